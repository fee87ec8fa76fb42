//! What the kernel and each filesystem support, probed once per device and cached.
//!
//! Sources, in order: `CACHELESS_DISABLE` (the user's opt-out), statx(STATX_DIOALIGN) (Linux
//! 6.1+), the backing device's `logical_block_size` in sysfs, else 4096; a real O_DIRECT open
//! confirms support (EINVAL: unsupported). RWF_DONTCACHE (Linux 6.14+) is probed with a 1-byte
//! preadv2, which the kernel refuses with EOPNOTSUPP before doing any I/O when either the
//! kernel or the filesystem lacks it. io_uring is probed by setting up a small ring.
//!
//! Where O_DIRECT opens, one more probe asks whether direct *writes* really bypass the cache:
//! btrfs (Linux 6.15+) turns O_DIRECT writes to files with data checksums into buffered ones,
//! silently. An anonymous file beside the probed one gets a page mapped, then one O_DIRECT write
//! over it: a real direct write invalidates the mapped page, a buffered one writes into it and
//! leaves it resident (the kernel's fallback drops only unmapped pages), which cachestat sees.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use rustix::fs::{statx, AtFlags, StatxFlags};
use serde::Serialize;

/// The flags of one read or write request (preadv2/pwritev2's, io_uring's `rw_flags`): the
/// `RWF_*` bits the engine uses, typed from the plan that picks them to the call that passes
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RwFlags(u32);

impl RwFlags {
    /// No flag: a plain pread or pwrite.
    pub const NONE: RwFlags = RwFlags(0);
    /// `RWF_DONTCACHE` (Linux 6.14+): the request goes through the page cache, whose pages
    /// are dropped once written back (a read's once copied out).
    pub const DONTCACHE: RwFlags = RwFlags(0x80);

    /// The bits, as preadv2/pwritev2 take them.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// The flags as rustix's preadv2/pwritev2 take them.
    pub fn for_rustix(self) -> rustix::io::ReadWriteFlags {
        rustix::io::ReadWriteFlags::from_bits_retain(self.0)
    }

    /// The bits as io_uring's `rw_flags` field takes them (the same bits, as an `i32`).
    pub fn uring_bits(self) -> i32 {
        i32::from_ne_bytes(self.0.to_ne_bytes())
    }

    /// Whether every flag of `other` is set.
    pub fn contains(self, other: RwFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

/// Why a feature is unavailable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unavailable {
    /// Human-readable reason, naming the errno or the setting.
    pub reason: String,
    /// The errno that said no, if an OS call did.
    pub errno: Option<i32>,
}

impl Unavailable {
    /// `what` failed with errno `e`.
    pub fn errno(what: &str, e: &io::Error) -> Unavailable {
        Unavailable { reason: format!("{what}: {}", errno_name(e)), errno: e.raw_os_error() }
    }
    fn disabled(what: &str) -> Unavailable {
        Unavailable { reason: format!("{what} disabled by CACHELESS_DISABLE"), errno: None }
    }
}

/// `Ok(value)` when available, else why not.
pub type Support<T = ()> = Result<T, Unavailable>;

/// Where the O_DIRECT alignment figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AlignSource {
    /// statx(STATX_DIOALIGN), Linux 6.1+.
    Statx,
    /// /sys/dev/block/MAJ:MIN/queue/logical_block_size.
    Sysfs,
    /// Nothing told us: 4096, safe on every common device.
    Default,
}

/// O_DIRECT alignment requirements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DioAlign {
    /// Required alignment of the buffer address.
    pub mem: u32,
    /// Required alignment of file offsets and lengths.
    pub offset: u32,
    /// Where the figures came from.
    pub source: AlignSource,
}

impl DioAlign {
    /// The larger of the two alignments: satisfies both.
    pub fn both(&self) -> usize {
        self.mem.max(self.offset) as usize
    }
}

/// What one filesystem (device) supports.
#[derive(Debug, Clone, Serialize)]
pub struct FsCaps {
    /// st_dev of the device.
    pub dev: u64,
    /// Filesystem type name from the statfs magic ([`fs_name`]: xfs, tmpfs, ext2/ext3/ext4 ...).
    pub fs_type: String,
    /// O_DIRECT and its alignment.
    pub direct: Support<DioAlign>,
    /// RWF_DONTCACHE.
    pub dontcache: Support,
    /// Set when O_DIRECT opens but writes go through the page cache all the same (btrfs with
    /// data checksums, Linux 6.15+): what the probe write showed. Auto writes with another
    /// mode there; a forced direct write is still done as asked.
    pub direct_write_cached: Option<String>,
}

impl FsCaps {
    /// Whether the filesystem makes file sizes up (proc, sysfs and their kin: a file of 0 or
    /// 4096 bytes by stat holds what a read returns), so that a file there is read to its end
    /// rather than to its size.
    pub fn sizes_lie(&self) -> bool {
        matches!(
            self.fs_type.as_str(),
            "proc" | "sysfs" | "debugfs" | "tracefs" | "securityfs" | "configfs" | "cgroup" | "cgroup2" | "efivarfs" | "pstore" | "bpf" | "selinuxfs"
        )
    }
}

/// What the kernel supports, independent of files.
#[derive(Debug, Clone, Serialize)]
pub struct SystemCaps {
    /// Kernel release (uname -r).
    pub kernel: String,
    /// io_uring can be set up.
    pub uring: Support,
    /// cachestat(2) (Linux 6.5+); without it residency comes from mincore.
    pub cachestat: Support,
    /// RLIMIT_MEMLOCK soft limit in bytes (io_uring registered buffers count against it).
    pub memlock_limit: Option<u64>,
    /// Page size.
    pub page_size: usize,
    /// Whether large result buffers (whole files read into memory) use transparent huge pages,
    /// or why not (`result_huge_pages`).
    pub result_huge_pages: Support,
}

pub use crate::env::disabled;
use crate::residency::CachestatMissing;

/// The system capabilities, probed on first use.
pub fn system() -> &'static SystemCaps {
    static SYS: OnceLock<SystemCaps> = OnceLock::new();
    SYS.get_or_init(|| {
        let kernel = rustix::system::uname().release().to_string_lossy().into_owned();
        let memlock = rustix::process::getrlimit(rustix::process::Resource::Memlock).current;
        let result_huge_pages = crate::buf::result_huge_pages().clone().map_err(|reason| Unavailable { reason, errno: None });
        SystemCaps {
            kernel,
            uring: probe_uring(),
            cachestat: probe_cachestat(),
            memlock_limit: memlock,
            page_size: rustix::param::page_size(),
            result_huge_pages,
        }
    })
}

fn probe_uring() -> Support {
    if disabled("uring") {
        return Err(Unavailable::disabled("io_uring"));
    }
    match io_uring::IoUring::new(2) {
        Ok(_) => Ok(()),
        Err(e) => {
            let mut u = Unavailable::errno("io_uring_setup", &e);
            if let Ok(s) = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled") {
                if s.trim() != "0" {
                    u.reason += &format!(" (kernel.io_uring_disabled = {})", s.trim());
                }
            }
            if e.raw_os_error() == Some(libc::EPERM) {
                u.reason += " (a seccomp profile, e.g. Docker's default, may block it)";
            }
            Err(u)
        }
    }
}

fn probe_cachestat() -> Support {
    match crate::residency::cachestat_support() {
        Ok(()) => Ok(()),
        Err(CachestatMissing::Disabled) => Err(Unavailable::disabled("cachestat")),
        Err(CachestatMissing::Errno(e)) => Err(Unavailable::errno("cachestat", &io::Error::from_raw_os_error(e))),
    }
}

/// What the verdicts are cached under: the device, and the filesystem's magic and id, so that a
/// device that is unmounted and mounted again with another filesystem (a reused loop device) is
/// probed afresh.
type Key = (u64, u64, u64);

fn cache() -> &'static Mutex<HashMap<Key, Arc<FsCaps>>> {
    static C: OnceLock<Mutex<HashMap<Key, Arc<FsCaps>>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

fn key(fd: BorrowedFd<'_>, dev: u64) -> Key {
    let magic = rustix::fs::fstatfs(fd).map(|st| magic(st.f_type)).unwrap_or(0);
    let fsid = rustix::fs::fstatvfs(fd).map(|st| st.f_fsid).unwrap_or(0);
    (dev, magic, fsid)
}

/// The capabilities of the filesystem holding the open regular file `file`, probed with it on
/// first use of its filesystem and cached.
pub fn for_file(file: &File) -> io::Result<Arc<FsCaps>> {
    let dev = file.metadata()?.dev();
    let key = key(file.as_fd(), dev);
    if let Some(c) = cache().lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(c.clone());
    }
    let caps = Arc::new(probe(file.as_fd(), dev));
    cache().lock().unwrap_or_else(|e| e.into_inner()).insert(key, caps.clone());
    Ok(caps)
}

/// The filesystems a job reads many files from, remembered by device for the job's life, so
/// that each file's plan costs no probe of its own (a cached [`for_file`] costs an fstat and two
/// fstatfs per file). Each remembered filesystem keeps one of its files open: while it is
/// open, its device number cannot come to name another filesystem (one mounted after it was
/// unmounted), so the device alone identifies it. The verdicts themselves are looked up in
/// the cache each time, so that one learnt since (RWF_DONTCACHE refused by a write) counts.
#[derive(Debug, Default)]
pub struct CapsMemo {
    fs: Mutex<Vec<(u64, FsKey, File)>>,
}

/// Filesystems a [`CapsMemo`] remembers at most (the oldest is forgotten first).
const MEMO_FS: usize = 8;

impl CapsMemo {
    /// An empty memo.
    pub fn new() -> CapsMemo {
        CapsMemo::default()
    }

    /// The capabilities of the filesystem holding `file`, whose device (from its fstat) is
    /// `dev`: remembered, or probed as [`for_file`] does and remembered.
    pub fn for_file(&self, file: &File, dev: u64) -> io::Result<Arc<FsCaps>> {
        let known = self.fs.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|e| e.0 == dev).map(|e| e.1);
        if let Some(c) = known.and_then(cached) {
            return Ok(c);
        }
        let k = FsKey(key(file.as_fd(), dev));
        let caps = match cached(k) {
            Some(c) => c,
            None => for_file(file)?,
        };
        // Only a filesystem whose verdicts are cached under the key read here is remembered
        // (`for_file` caches them under the key it reads itself).
        if cached(k).is_some() {
            if let Ok(pin) = file.try_clone() {
                let mut fs = self.fs.lock().unwrap_or_else(|e| e.into_inner());
                fs.retain(|e| e.0 != dev);
                if fs.len() >= MEMO_FS {
                    fs.remove(0);
                }
                fs.push((dev, k, pin));
            }
        }
        Ok(caps)
    }
}

/// What identifies the filesystem holding `fd` (a directory, or any file) in the cache of
/// verdicts: its device, magic and id (an fstat, an fstatfs and an fstatvfs). Opaque.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsKey(Key);

impl FsKey {
    /// The device of the filesystem.
    pub fn dev(&self) -> u64 {
        self.0 .0
    }
}

/// The [`FsKey`] of the filesystem holding `fd`.
pub fn fs_key(fd: BorrowedFd<'_>) -> io::Result<FsKey> {
    Ok(FsKey(key(fd, rustix::fs::fstat(fd)?.st_dev)))
}

/// The capabilities already probed for the filesystem `k` (see [`fs_key`]), without probing;
/// `None` when it has not been probed yet.
pub fn cached(k: FsKey) -> Option<Arc<FsCaps>> {
    cache().lock().unwrap_or_else(|e| e.into_inner()).get(&k.0).cloned()
}

/// The capabilities of the filesystem holding directory `dir`, probed through an anonymous
/// O_TMPFILE file in it (nothing visible is created). Falls back to a named temporary file
/// where O_TMPFILE is unsupported.
pub fn for_dir(dir: &Path) -> io::Result<Arc<FsCaps>> {
    let dev = std::fs::metadata(dir)?.dev();
    let magic = rustix::fs::statfs(dir).map(|st| magic(st.f_type)).unwrap_or(0);
    let fsid = rustix::fs::statvfs(dir).map(|st| st.f_fsid).unwrap_or(0);
    if let Some(c) = cache().lock().unwrap_or_else(|e| e.into_inner()).get(&(dev, magic, fsid)) {
        return Ok(c.clone());
    }
    use rustix::fs::{Mode as FMode, OFlags};
    let f: File = match rustix::fs::open(dir, OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC, FMode::from_raw_mode(0o600)) {
        Ok(fd) => fd.into(),
        Err(_) => named_probe(rustix::fs::open(dir, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, FMode::empty())?.as_fd())?,
    };
    for_file(&f)
}

/// The capabilities of the filesystem holding the open directory `dir` (see [`for_dir`]).
pub fn for_dir_fd(dir: BorrowedFd<'_>) -> io::Result<Arc<FsCaps>> {
    let dev = rustix::fs::fstat(dir)?.st_dev;
    if let Some(c) = cache().lock().unwrap_or_else(|e| e.into_inner()).get(&key(dir, dev)) {
        return Ok(c.clone());
    }
    use rustix::fs::{Mode as FMode, OFlags};
    let f: File = match rustix::fs::openat(dir, ".", OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC, FMode::from_raw_mode(0o600)) {
        Ok(fd) => fd.into(),
        Err(_) => named_probe(dir)?,
    };
    for_file(&f)
}

/// A file to probe the filesystem of `dir` with where it has no O_TMPFILE: created under a name
/// of its own ([`crate::names::probe_name`], one per call) and unlinked at once.
fn named_probe(dir: BorrowedFd<'_>) -> io::Result<File> {
    use rustix::fs::{AtFlags, Mode as FMode, OFlags};
    let name = crate::names::probe_name();
    let flags = OFlags::CREATE | OFlags::EXCL | OFlags::RDWR | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    let fd = rustix::fs::openat(dir, &name, flags, FMode::from_raw_mode(0o600))?;
    let _ = rustix::fs::unlinkat(dir, &name, AtFlags::empty());
    Ok(fd.into())
}

/// What is known of the filesystem holding directory `dir` where no file can be created to
/// probe it (a read-only filesystem such as erofs, squashfs or proc, or no permission; `why` is
/// the error [`for_dir`] got): its name from statfs, O_DIRECT and RWF_DONTCACHE reported as not
/// probed, with why. Not cached: a later probe that can create a file is the better verdict.
pub fn unprobed(dir: &Path, why: &io::Error) -> io::Result<FsCaps> {
    let dev = std::fs::metadata(dir)?.dev();
    let st = rustix::fs::statfs(dir)?;
    let not = Unavailable { reason: format!("not probed: no file can be created here ({})", errno_name(why)), errno: why.raw_os_error() };
    Ok(FsCaps { dev, fs_type: fs_name(magic(st.f_type)), direct: Err(not.clone()), dontcache: Err(not), direct_write_cached: None })
}

/// What is known of a file that is not a regular one (a FIFO, a character device, a socket),
/// on device `dev`: no O_DIRECT nor RWF_DONTCACHE, nothing cached to manage; named after its
/// kind.
pub fn not_regular(dev: u64, kind: &std::fs::FileType) -> FsCaps {
    use std::os::unix::fs::FileTypeExt;
    let name = if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    };
    let not = Unavailable { reason: format!("{name}: read with plain reads"), errno: None };
    FsCaps { dev, fs_type: name.to_string(), direct: Err(not.clone()), dontcache: Err(not), direct_write_cached: None }
}

/// Replaces the cached verdicts for the filesystem of `file` (tests of verdicts only a write
/// can reveal).
#[cfg(any(test, feature = "fault-injection"))]
pub fn set_cached(file: &File, caps: FsCaps) {
    let k = key(file.as_fd(), caps.dev);
    cache().lock().unwrap_or_else(|e| e.into_inner()).insert(k, Arc::new(caps));
}

/// Forgets cached verdicts (tests use this after changing `CACHELESS_DISABLE`).
pub fn clear_cache() {
    cache().lock().unwrap_or_else(|e| e.into_inner()).clear();
}

fn probe(fd: BorrowedFd<'_>, dev: u64) -> FsCaps {
    let fs_type = fs_type_name(fd);
    let direct = probe_direct(fd, dev);
    let direct_write_cached = match &direct {
        Ok(a) => probe_direct_write(fd, a).map(|pages| {
            let why = match fs_type.as_str() {
                "btrfs" => " (btrfs buffers O_DIRECT writes to files with data checksums, Linux 6.15+)",
                "tmpfs" => " (tmpfs keeps file data in the page cache)",
                _ => "",
            };
            format!("an O_DIRECT write left {pages} in the page cache{why}")
        }),
        Err(_) => None,
    };
    FsCaps { dev, fs_type, direct, dontcache: probe_dontcache(fd), direct_write_cached }
}

/// Whether an O_DIRECT write in the directory of `fd` leaves its pages in the cache: one write
/// of one aligned block to an anonymous O_TMPFILE file there whose page is mapped (see the
/// module doc). `None` when the write bypassed the cache, and also when the probe cannot run
/// (a read-only filesystem, no O_TMPFILE, no space): nothing then says otherwise.
#[allow(unsafe_code)]
fn probe_direct_write(fd: BorrowedFd<'_>, align: &DioAlign) -> Option<String> {
    use rustix::fs::{Mode as FMode, OFlags};
    use rustix::mm::{MapFlags, ProtFlags};
    let link = rustix::fs::readlink(format!("/proc/self/fd/{}", fd.as_raw_fd()), Vec::new()).ok()?;
    let dir = Path::new(std::ffi::OsStr::from_bytes(link.as_bytes())).parent()?.to_path_buf();
    let tmp: File = rustix::fs::open(&dir, OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC, FMode::from_raw_mode(0o600)).ok()?.into();
    let len = align.both().max(rustix::param::page_size());
    tmp.set_len(u64::try_from(len).ok()?).ok()?;
    // SAFETY: a fresh shared read-only mapping of `len` bytes of a file we own, at an address the
    // kernel chooses; MAP_POPULATE maps its pages now, so nothing is ever read through it.
    let map = unsafe { rustix::mm::mmap(std::ptr::null_mut(), len, ProtFlags::READ, MapFlags::SHARED | MapFlags::POPULATE, &tmp, 0) }.ok()?;
    let verdict = direct_write_left_pages(&tmp, len, align);
    // SAFETY: exactly the mapping made above; nothing references it.
    let _ = unsafe { rustix::mm::munmap(map, len) };
    verdict
}

/// One O_DIRECT write of `len` bytes at offset 0 of `tmp` (whose pages are mapped); how many of
/// its pages it left in the page cache, if any.
fn direct_write_left_pages(tmp: &File, len: usize, align: &DioAlign) -> Option<String> {
    use rustix::fs::{Mode as FMode, OFlags};
    let direct: File =
        rustix::fs::open(format!("/proc/self/fd/{}", tmp.as_raw_fd()).as_str(), OFlags::RDWR | OFlags::DIRECT | OFlags::CLOEXEC, FMode::empty()).ok()?.into();
    let mut buf = crate::buf::AlignedBuf::new(len, align.both());
    buf[..len].fill(0x5a);
    let n = rustix::io::pwrite(&direct, &buf[..len], 0).ok()?;
    let left = crate::residency::residency(tmp, 0, u64::try_from(len).ok()?).ok()?;
    (n == len && left.cached_pages > 0).then(|| format!("{} of {} pages", left.cached_pages, left.total_pages))
}

fn probe_direct(fd: BorrowedFd<'_>, dev: u64) -> Support<DioAlign> {
    if disabled("direct") {
        return Err(Unavailable::disabled("O_DIRECT"));
    }
    let mut align = None;
    if let Ok(st) = statx(fd, "", AtFlags::EMPTY_PATH, StatxFlags::DIOALIGN) {
        if st.stx_mask & StatxFlags::DIOALIGN.bits() != 0 {
            if st.stx_dio_mem_align == 0 {
                return Err(Unavailable { reason: "statx reports no O_DIRECT support (dio_mem_align = 0)".into(), errno: None });
            }
            align = Some(DioAlign { mem: st.stx_dio_mem_align, offset: st.stx_dio_offset_align, source: AlignSource::Statx });
        }
    }
    let align = align.unwrap_or_else(|| match sysfs_logical_block_size(dev) {
        Some(n) => DioAlign { mem: n, offset: n, source: AlignSource::Sysfs },
        None => DioAlign { mem: 4096, offset: 4096, source: AlignSource::Default },
    });
    // Confirm with a real open: some filesystems report alignment but refuse O_DIRECT (and
    // tmpfs has reported it wrongly).
    let proc = format!("/proc/self/fd/{}", fd.as_raw_fd());
    use rustix::fs::{Mode as FMode, OFlags};
    match rustix::fs::open(proc.as_str(), OFlags::RDONLY | OFlags::DIRECT | OFlags::CLOEXEC, FMode::empty()) {
        Ok(_) => Ok(align),
        Err(e) if e == rustix::io::Errno::INVAL => Err(Unavailable::errno("open(O_DIRECT)", &e.into())),
        // The probe open itself could not be done (no /proc): trust the alignment figures.
        Err(_) => Ok(align),
    }
}

fn sysfs_logical_block_size(dev: u64) -> Option<u32> {
    let (maj, min) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    let base = format!("/sys/dev/block/{maj}:{min}");
    // A partition has no queue/ of its own: its parent directory does.
    for p in [format!("{base}/queue/logical_block_size"), format!("{base}/../queue/logical_block_size")] {
        if let Ok(s) = std::fs::read_to_string(&p) {
            if let Ok(n) = s.trim().parse() {
                return Some(n);
            }
        }
    }
    None
}

/// The start of a file a 1-byte probe read may bring into the cache (its read-ahead window).
const PROBE_SPAN: u64 = 256 << 10;

fn probe_dontcache(fd: BorrowedFd<'_>) -> Support {
    if disabled("dontcache") {
        return Err(Unavailable::disabled("RWF_DONTCACHE"));
    }
    // The probe read (and its read-ahead) can leave a few pages of the file cached even with
    // the flag: note what was resident first, and drop only the pages the probe brought in.
    let file = fd.try_clone_to_owned().ok().map(File::from);
    let span = file.as_ref().and_then(|f| f.metadata().ok()).map_or(0, |m| m.len().min(PROBE_SPAN));
    let before = file.as_ref().filter(|_| span > 0).and_then(|f| crate::residency::resident_pages(f, 0, span).ok());
    let mut b = [0u8; 1];
    let probed = rustix::io::preadv2(fd, &mut [io::IoSliceMut::new(&mut b)], 0, RwFlags::DONTCACHE.for_rustix());
    if let (Some(f), Some(before)) = (&file, &before) {
        let _ = crate::residency::drop_brought_in(f, 0, span, before);
    }
    match probed {
        Ok(_) => Ok(()),
        Err(e) if e == rustix::io::Errno::OPNOTSUPP || e == rustix::io::Errno::INVAL || e == rustix::io::Errno::NOSYS => {
            Err(Unavailable::errno("preadv2(RWF_DONTCACHE)", &e.into()))
        }
        // EBADF on a write-only descriptor etc.: the probe could not run; assume the flag works
        // and let the first real I/O decide (it fails before doing anything if not).
        Err(_) => Ok(()),
    }
}

fn fs_type_name(fd: BorrowedFd<'_>) -> String {
    match rustix::fs::fstatfs(fd) {
        Ok(st) => fs_name(magic(st.f_type)),
        Err(_) => "unknown".into(),
    }
}

/// statfs's `f_type` (a signed word) as the unsigned magic number the kernel defines.
fn magic(f_type: impl TryInto<u64>) -> u64 {
    f_type.try_into().unwrap_or(0)
}

/// The filesystem a statfs `f_type` magic number stands for (linux/magic.h and the
/// filesystems' own sources), or the number in hex when it is not one we know. Several
/// filesystems share a magic (ext2, ext3 and ext4; the FUSE family), so the name says so.
pub fn fs_name(magic: u64) -> String {
    let name = match magic {
        0xEF53 => "ext2/ext3/ext4",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x0102_1994 => "tmpfs",
        0x8584_58F6 => "ramfs",
        0x9584_58F6 => "hugetlbfs",
        0x794C_7630 => "overlay",
        0x6573_5546 => "fuse",
        0x6573_5543 => "fusectl",
        0xE0F5_E1E2 => "erofs",
        0x7371_7368 => "squashfs",
        0x6969 => "nfs",
        0xFF53_4D42 => "cifs",
        0xFE53_4D42 => "smb2",
        0x517B => "smb",
        0x2FC1_2FC1 => "zfs",
        0xF2F5_2010 => "f2fs",
        0x5346_544E => "ntfs",
        0x7366_746E => "ntfs3",
        0x4D44 => "vfat",
        0x2011_BAB0 => "exfat",
        0xCA45_1A4E => "bcachefs",
        0x0102_1997 => "9p",
        0x00C3_6400 => "ceph",
        0x9660 => "iso9660",
        0x1501_3346 => "udf",
        0x3153_464A => "jfs",
        0x5265_4973 => "reiserfs",
        0x482B => "hfsplus",
        0x0116_1970 => "gfs2",
        0x7461_636F => "ocfs2",
        0x3434 => "nilfs2",
        0x2846_3D45 | 0x453D_CD28 => "cramfs",
        0x7275 => "romfs",
        0x6B41_4653 => "afs",
        0xF15F => "ecryptfs",
        0x9FA0 => "proc",
        0x6265_6572 => "sysfs",
        0x1CD1 => "devpts",
        0x6367_7270 => "cgroup2",
        0x0027_E0EB => "cgroup",
        0x6462_6720 => "debugfs",
        0x7472_6163 => "tracefs",
        0x7363_6673 => "securityfs",
        0xCAFE_4A11 => "bpf",
        0x6E73_6673 => "nsfs",
        0x5049_5045 => "pipefs",
        0x534F_434B => "sockfs",
        0x0904_1934 => "anon_inode",
        0x6265_6570 => "configfs",
        0xDE5E_81E4 => "efivarfs",
        0x6165_676C => "pstore",
        0x1980_0202 => "mqueue",
        0xF97C_FF8C => "selinuxfs",
        0x0187 => "autofs",
        _ => return format!("0x{magic:x}"),
    };
    name.into()
}

/// Records that a write on device `dev` refused RWF_DONTCACHE where the probe could not tell
/// (it could not read the file), so later files there take the next mode at once.
pub fn refuse_dontcache(dev: u64, e: &io::Error) {
    let mut c = cache().lock().unwrap_or_else(|e| e.into_inner());
    for old in c.values_mut().filter(|v| v.dev == dev) {
        if old.dontcache.is_ok() {
            let mut caps = (**old).clone();
            caps.dontcache = Err(Unavailable::errno("pwritev2(RWF_DONTCACHE)", e));
            *old = Arc::new(caps);
        }
    }
}

/// Devices whose filesystem refused O_TMPFILE (no probe asks ahead: the first file created
/// there tells), with the refusal.
static NO_TMPFILE: Mutex<Vec<(u64, Unavailable)>> = Mutex::new(Vec::new());
/// Whether any filesystem refused O_TMPFILE: until one does, asking costs one atomic load.
static ANY_NO_TMPFILE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// linkat(AT_EMPTY_PATH) refused (ENOENT or EPERM: it needs CAP_DAC_READ_SEARCH before Linux
/// 6.10): a property of the process's privileges, not of a filesystem, so one verdict.
static NO_FLINK: OnceLock<Unavailable> = OnceLock::new();

/// Whether files can be created without a name (O_TMPFILE) on device `dev`: not switched off
/// (`CACHELESS_DISABLE=tmpfile`) and not refused there so far.
pub fn tmpfile(dev: u64) -> Support {
    if disabled("tmpfile") {
        return Err(Unavailable::disabled("O_TMPFILE"));
    }
    if !ANY_NO_TMPFILE.load(std::sync::atomic::Ordering::Relaxed) {
        return Ok(());
    }
    match NO_TMPFILE.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|(d, _)| *d == dev) {
        Some((_, why)) => Err(why.clone()),
        None => Ok(()),
    }
}

/// Asks the filesystem of the folder `dir` whether it creates files without a name: an
/// O_TMPFILE open there, closed at once (the file never had a name, so nothing is left). A
/// refusal is remembered for the filesystem ([`tmpfile`]); an open refused for another reason
/// (no permission, a read-only filesystem) says so and is not remembered.
pub fn probe_tmpfile(dir: &Path) -> Support {
    let dev = std::fs::metadata(dir).map_err(|e| Unavailable::errno("stat", &e))?.dev();
    tmpfile(dev)?;
    let flags = rustix::fs::OFlags::TMPFILE | rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC;
    match rustix::fs::open(dir, flags, rustix::fs::Mode::from_raw_mode(0o600)) {
        Ok(_) => Ok(()),
        Err(e) => {
            let e = io::Error::from(e);
            if says_no_tmpfile(&e) {
                refuse_tmpfile(dev, &e);
            }
            Err(Unavailable::errno("O_TMPFILE", &e))
        }
    }
}

/// Whether `e`, the error of an O_TMPFILE open, says the filesystem (or the kernel) has none
/// (EOPNOTSUPP; EISDIR or EINVAL from kernels and filesystems that do not know the flag).
pub fn says_no_tmpfile(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL))
}

/// Whether some filesystem refused O_TMPFILE so far (callers then ask [`tmpfile`] per device).
pub fn tmpfile_refused_somewhere() -> bool {
    ANY_NO_TMPFILE.load(std::sync::atomic::Ordering::Relaxed)
}

/// Records that the filesystem of device `dev` refused O_TMPFILE with `e`.
pub fn refuse_tmpfile(dev: u64, e: &io::Error) {
    let mut v = NO_TMPFILE.lock().unwrap_or_else(|e| e.into_inner());
    if !v.iter().any(|(d, _)| *d == dev) {
        v.push((dev, Unavailable::errno("O_TMPFILE", e)));
    }
    ANY_NO_TMPFILE.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether a file without a name can be linked by its descriptor (linkat AT_EMPTY_PATH): not
/// switched off (`CACHELESS_DISABLE=flink`) and not refused so far; else it is linked through
/// /proc/self/fd.
pub fn flink() -> Support {
    if disabled("flink") {
        return Err(Unavailable::disabled("linkat(AT_EMPTY_PATH)"));
    }
    match NO_FLINK.get() {
        Some(why) => Err(why.clone()),
        None => Ok(()),
    }
}

/// Records that linkat(AT_EMPTY_PATH) was refused with `e`.
pub fn refuse_flink(e: &io::Error) {
    let _ = NO_FLINK.set(Unavailable::errno("linkat(AT_EMPTY_PATH)", e));
}

/// FICLONE refused between pairs of devices (source, destination) that cannot clone at all
/// (EOPNOTSUPP, EXDEV, ENOTTY), so that a tree copy asks once per pair.
static NO_CLONE: Mutex<Vec<((u64, u64), rustix::io::Errno)>> = Mutex::new(Vec::new());

/// How FICLONE from a file on device `pair.0` to one on `pair.1` was refused, if it was.
pub fn clone_refused_between(pair: (u64, u64)) -> Option<rustix::io::Errno> {
    NO_CLONE.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|(p, _)| *p == pair).map(|(_, e)| *e)
}

/// Records that FICLONE from device `pair.0` to `pair.1` was refused with `e` (not EINVAL,
/// which is about one file).
pub fn refuse_clone(pair: (u64, u64), e: rustix::io::Errno) {
    let mut v = NO_CLONE.lock().unwrap_or_else(|e| e.into_inner());
    if !v.iter().any(|(p, _)| *p == pair) {
        v.push((pair, e));
    }
}

/// The errno's symbolic name and message ("EINVAL (Invalid argument)").
pub fn errno_name(e: &io::Error) -> String {
    let name = match e.raw_os_error() {
        Some(libc::EINVAL) => "EINVAL",
        Some(libc::EOPNOTSUPP) => "EOPNOTSUPP",
        Some(libc::ENOSYS) => "ENOSYS",
        Some(libc::EPERM) => "EPERM",
        Some(libc::EACCES) => "EACCES",
        Some(libc::ENOMEM) => "ENOMEM",
        Some(libc::EBADF) => "EBADF",
        _ => return e.to_string(),
    };
    format!("{name} ({})", io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(0)).kind())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe's named file (where a filesystem has no O_TMPFILE) has a name of its own per
    /// call, one `cacheless clean` recognises as this process's temporary, and is gone once
    /// made: threads probing one folder at once all get a file and leave nothing.
    #[test]
    fn named_probes_never_meet_and_leave_nothing() {
        let d = tempfile::tempdir().unwrap();
        let a = crate::names::probe_name();
        let b = crate::names::probe_name();
        assert_ne!(a, b);
        let owner = crate::sys::temps::owner(a.as_encoded_bytes()).expect("a temporary name the cleaner knows");
        assert_eq!((owner.pid, owner.boot.as_deref()), (std::process::id(), Some(crate::sys::temps::boot())));
        let dir = File::open(d.path()).unwrap();
        std::thread::scope(|s| {
            let hs: Vec<_> =
                (0..8).map(|_| s.spawn(|| (0..50).map(|_| named_probe(dir.as_fd()).map(|f| f.metadata().unwrap().nlink())).collect::<Vec<_>>())).collect();
            for h in hs {
                for r in h.join().unwrap() {
                    assert_eq!(r.unwrap(), 0, "unlinked at once");
                }
            }
        });
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }

    /// A filesystem that refused O_TMPFILE turns it off there alone: a folder on another
    /// filesystem still creates files without a name (a device number no filesystem has stands
    /// for the refusing one, so that the other tests of this process are not affected).
    #[test]
    fn an_o_tmpfile_refusal_is_remembered_for_its_filesystem_only() {
        let d = tempfile::tempdir().unwrap();
        let here = std::fs::metadata(d.path()).unwrap().dev();
        let elsewhere = u64::MAX - 7;
        assert_ne!(here, elsewhere);
        let on = tmpfile(here).is_ok();
        refuse_tmpfile(elsewhere, &io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        let no = tmpfile(elsewhere).unwrap_err();
        assert!(no.reason.contains("EOPNOTSUPP") && no.errno == Some(libc::EOPNOTSUPP), "{no:?}");
        assert_eq!(tmpfile(here).is_ok(), on, "another filesystem's refusal changed this one's verdict");
        let dir = File::open(d.path()).unwrap();
        assert_eq!(crate::sys::tmpfile_available(dir.as_fd()), on);
        assert_eq!(probe_tmpfile(d.path()).is_ok(), on);
    }

    /// The RWF_DONTCACHE probe leaves none of the probed file's pages cached that it brought
    /// in, and drops none that were cached before it.
    #[test]
    fn the_dontcache_probe_leaves_the_probed_file_as_it_found_it() {
        let dir = cacheless_testkit::scratch();
        let p = dir.path().join("probed");
        std::fs::write(&p, vec![7u8; 1 << 20]).expect("write");
        let f = File::open(&p).expect("open");
        crate::residency::evict(&f, 0, 0).expect("evict");
        assert_eq!(crate::residency::residency(&f, 0, 1 << 20).expect("residency").cached_pages, 0);
        let _ = probe_dontcache(f.as_fd());
        assert_eq!(crate::residency::residency(&f, 0, 1 << 20).expect("residency").cached_pages, 0, "the probe left pages cached");
        // Pages another program had cached stay.
        let mut buf = vec![0u8; 8192];
        rustix::io::pread(&f, &mut buf, 0).expect("pread");
        let had = crate::residency::residency(&f, 0, 1 << 20).expect("residency").cached_pages;
        assert!(had > 0);
        let _ = probe_dontcache(f.as_fd());
        assert!(crate::residency::residency(&f, 0, 1 << 20).expect("residency").cached_pages >= had, "the probe dropped pages it did not bring in");
    }

    #[test]
    fn filesystems_are_named_by_their_magic() {
        for (magic, name) in [
            (0xEF53, "ext2/ext3/ext4"),
            (0x5846_5342, "xfs"),
            (0x0102_1994, "tmpfs"),
            (0x794C_7630, "overlay"),
            (0xE0F5_E1E2, "erofs"),
            (0x7371_7368, "squashfs"),
            (0x6573_5546, "fuse"),
            (0x6969, "nfs"),
            (0xFE53_4D42, "smb2"),
            (0x2FC1_2FC1, "zfs"),
            (0x9FA0, "proc"),
        ] {
            assert_eq!(fs_name(magic), name, "{magic:#x}");
        }
        assert_eq!(fs_name(0x1234_5678), "0x12345678", "unknown magics print as hex");
        // And the live call: /proc is procfs wherever the tests run.
        let f = File::open("/proc/self/status").unwrap();
        assert_eq!(fs_type_name(f.as_fd()), "proc");
    }
}
