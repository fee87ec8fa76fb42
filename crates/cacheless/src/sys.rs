//! The system calls on the write path, each in one place: creating a file under a temporary
//! name, the write loop (short counts, EINTR), O_DIRECT on and off, attributes, and the commit
//! sequence that makes a finished file durable and puts it in place (fsync, rename, fsync
//! of the directory). Every call that can fail transiently goes through [`call`], which retries
//! EINTR and under the `fault-injection` feature lets a planned fault take the call's place.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use rustix::fs::{Mode as FMode, OFlags};
use rustix::io::Errno;

use crate::caps::{self, FsCaps, RWF_DONTCACHE};
use crate::error::{Error, ErrorKind, Result};
use crate::fault::{self, Injected, Site, Step};

/// Makes an entry under a temporary name beside `name` in `dir` (see [`crate::temps::temp_name`]) with
/// `make(dir, temporary)` (through [`call`]), which must fail with EEXIST where the name is
/// taken (an exclusive create, mknodat, symlinkat, linkat): another name is tried then.
/// Returns what `make` gave and the name.
///
/// The first temporary this process makes in a folder removes the leftovers of dead owners
/// there first ([`crate::temps`]).
pub(crate) fn beside<T>(dir: BorrowedFd<'_>, name: &OsStr, mut make: impl FnMut(BorrowedFd<'_>, &OsStr) -> io::Result<T>) -> io::Result<(T, OsString)> {
    crate::temps::clean_once(dir);
    let mut tries = 0;
    loop {
        let t = crate::temps::temp_name(name);
        match make(dir, &t) {
            Ok(v) => return Ok((v, t)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 100 => tries += 1,
            Err(e) => return Err(e),
        }
    }
}

/// The flags of a file created without a name (O_TMPFILE), read-write.
pub(crate) const UNNAMED: OFlags = OFlags::TMPFILE.union(OFlags::RDWR).union(OFlags::CLOEXEC);

/// Set once a filesystem refused O_TMPFILE: files are then created under temporary names.
static NO_TMPFILE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Set once linkat(AT_EMPTY_PATH) was refused (it needs CAP_DAC_READ_SEARCH before Linux
/// 6.10): a file without a name is then linked through /proc/self/fd.
static NO_EMPTY_PATH_LINK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The process's umask, from /proc/self/status (Linux 4.7); `None` where it does not say.
/// (umask(2) can only read it by setting it, which races with other threads creating files.)
pub(crate) fn umask() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Umask:"))?;
    u32::from_str_radix(line.trim(), 8).ok()
}

/// Whether the directory `dir` (open with O_PATH or not) has a default ACL, which files
/// created in it inherit in place of the umask; true where it cannot tell.
pub(crate) fn default_acl(dir: BorrowedFd<'_>) -> bool {
    const NAME: &str = "system.posix_acl_default";
    let asked = match rustix::fs::fgetxattr_query(dir, NAME) {
        // An O_PATH descriptor: asked through its /proc link, which getxattr follows.
        Err(Errno::BADF) => rustix::fs::getxattr_query(format!("/proc/self/fd/{}", dir.as_raw_fd()), NAME),
        r => r,
    };
    match asked {
        Ok(n) => n > 0,
        // None, or a filesystem without extended attributes (nothing to inherit).
        Err(Errno::NODATA | Errno::OPNOTSUPP) => false,
        Err(_) => true,
    }
}

/// Whether files may be created without a name (O_TMPFILE): not switched off, and not refused
/// by a filesystem so far.
pub(crate) fn tmpfile_available() -> bool {
    !NO_TMPFILE.load(Ordering::Relaxed) && !switched_off().0
}

/// Whether `e`, the error of an O_TMPFILE open, says the filesystem (or the kernel) has none;
/// remembered for the process.
pub(crate) fn tmpfile_refused(e: &io::Error) -> bool {
    let refused = matches!(Errno::from_io_error(e), Some(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL));
    if refused {
        NO_TMPFILE.store(true, Ordering::Relaxed);
    }
    refused
}

/// Gives the unnamed file `file` (created with [`UNNAMED`]) the name `name` in `dir`, replacing
/// a file or symlink there: linked under it where it is free, else under a temporary name
/// renamed over it. `path` names it in errors.
pub(crate) fn link_unnamed(file: &File, dir: BorrowedFd<'_>, name: &OsStr, path: &Path) -> Result<()> {
    match link_fd(file, dir, name) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let ((), tmp) = beside(dir, name, |dir, t| link_fd(file, dir, t)).map_err(|e| Error::io("link", path, e))?;
            publish(dir, &tmp, name, path, false).map_err(|u| {
                let _ = rustix::fs::unlinkat(dir, tmp.as_os_str(), rustix::fs::AtFlags::empty());
                *u.error
            })
        }
        Err(e) => Err(Error::io("link", path, e)),
    }
}

/// Whether O_TMPFILE and linkat(AT_EMPTY_PATH) are turned off (`CACHELESS_DISABLE=tmpfile`,
/// `flink`), read once: they are asked per file.
fn switched_off() -> (bool, bool) {
    static OFF: std::sync::OnceLock<(bool, bool)> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| (crate::env::disabled("tmpfile"), crate::env::disabled("flink")))
}

/// How files written by a creator that names them after their syncfs got their names so far
/// (without a name, see [`UNNAMED`], then [`link_unnamed`]), in words for reports.
pub(crate) fn naming() -> String {
    let (no_tmpfile, no_flink) = switched_off();
    let created = if no_tmpfile {
        "under temporary names (.NAME.cacheless-BOOT-PID-N.tmp; O_TMPFILE disabled), renamed".to_string()
    } else if NO_TMPFILE.load(Ordering::Relaxed) {
        "under temporary names (.NAME.cacheless-BOOT-PID-N.tmp; O_TMPFILE unsupported), renamed".to_string()
    } else if no_flink || NO_EMPTY_PATH_LINK.load(Ordering::Relaxed) {
        format!("without a name (O_TMPFILE), linked through /proc/self/fd (linkat AT_EMPTY_PATH {})", if no_flink { "disabled" } else { "refused" })
    } else {
        "without a name (O_TMPFILE), linked (linkat AT_EMPTY_PATH)".to_string()
    };
    format!("{created} after the syncfs of their batch")
}

/// linkat of an open file to `name` in `dir`.
pub(crate) fn link_fd(file: &File, dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    use rustix::fs::AtFlags;
    if !NO_EMPTY_PATH_LINK.load(Ordering::Relaxed) && !switched_off().1 {
        match call(Site::Open, || rustix::fs::linkat(file, "", dir, name, AtFlags::EMPTY_PATH)) {
            Err(e) if matches!(Errno::from_io_error(&e), Some(Errno::NOENT | Errno::PERM)) => NO_EMPTY_PATH_LINK.store(true, Ordering::Relaxed),
            r => return r,
        }
    }
    let proc = format!("/proc/self/fd/{}", file.as_raw_fd());
    call(Site::Open, || rustix::fs::linkat(rustix::fs::CWD, proc.as_str(), dir, name, AtFlags::SYMLINK_FOLLOW))
}

/// Opens the directory `path` would be created in, and returns it with `path`'s file name.
pub(crate) fn open_parent(path: &Path) -> Result<(OwnedFd, &OsStr)> {
    let name = path.file_name().ok_or_else(|| Error::new(ErrorKind::InvalidInput, "create", path, "no file name"))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = rustix::fs::open(parent, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, FMode::empty())
        .map_err(|e| Error::io("open directory", parent, e.into()))?;
    Ok((dir, name))
}

/// Turns O_DIRECT on or off for an open file (fcntl F_SETFL).
pub(crate) fn set_direct(file: &File, on: bool) -> io::Result<()> {
    use rustix::fs::OFlags;
    let fl = rustix::fs::fcntl_getfl(file)?;
    let fl = if on { fl | OFlags::DIRECT } else { fl - OFlags::DIRECT };
    rustix::fs::fcntl_setfl(file, fl)?;
    Ok(())
}

/// fdatasync `file` (named `path` in the error), retried when interrupted.
pub(crate) fn fdatasync(file: &File, path: &Path) -> Result<()> {
    if fault::skipped(Step::Fdatasync) {
        return Ok(());
    }
    call(Site::Sync, || rustix::fs::fdatasync(file)).map_err(|e| Error::io("fdatasync", path, e))
}

/// fsync `file` (named `path` in the error): its data and its metadata (size, permission bits,
/// times, owner, extended attributes), as a finished file needs before its rename. fdatasync
/// is not enough there: the attributes set after the last write may stay out of what it makes
/// durable (btrfs logs only the inode changes an fsync asks for), and the rename and the
/// directory fsync that follow do not carry them. Retried when interrupted;
/// [`Step::Fdatasync`] skips it.
pub(crate) fn fsync(file: &File, path: &Path) -> Result<()> {
    if fault::skipped(Step::Fdatasync) {
        return Ok(());
    }
    call(Site::Sync, || rustix::fs::fsync(file)).map_err(|e| Error::io("fsync", path, e))
}

/// Why [`publish`] failed, and whether the file is in place.
pub(crate) struct Unpublished {
    /// The rename happened: the file is complete and under its final name, and only the
    /// durability of the directory entry is in doubt. Removing it would lose the file it
    /// replaced, so it stays.
    pub renamed: bool,
    /// What failed (boxed: a result carrying it stays small).
    pub error: Box<Error>,
}

/// The last steps of the commit sequence of a file written under the temporary name `tmp` in
/// `dir` (already synced with [`fsync`] when `durable`): rename it over `name`,
/// then, when `durable`, fsync `dir` so that the new entry survives a crash. `path` names
/// the file in errors.
pub(crate) fn publish(dir: BorrowedFd<'_>, tmp: &OsStr, name: &OsStr, path: &Path, durable: bool) -> std::result::Result<(), Unpublished> {
    call(Site::Rename, || rustix::fs::renameat(dir, tmp, dir, name))
        .map_err(|e| Unpublished { renamed: false, error: Box::new(Error::io("rename", path, e)) })?;
    if durable {
        sync_dir(dir, path).map_err(|e| Unpublished { renamed: true, error: Box::new(e) })?;
    }
    Ok(())
}

/// fsync of the directory `dir` after an entry named `path` changed in it, so that the entry
/// survives a crash; [`Step::DirSync`] skips it.
pub(crate) fn sync_dir(dir: BorrowedFd<'_>, path: &Path) -> Result<()> {
    if fault::skipped(Step::DirSync) {
        return Ok(());
    }
    call(Site::Sync, || rustix::fs::fsync(dir)).map_err(|e| Error::io("fsync directory", path, e))
}

/// syncfs of the filesystem holding `fd` (Linux 2.6.39; its writeback errors since 5.8),
/// retried when interrupted; under the `fault-injection` feature a planned fault takes its
/// place, and [`Step::Syncfs`] can be skipped.
pub(crate) fn syncfs(fd: BorrowedFd<'_>) -> io::Result<()> {
    if fault::skipped(Step::Syncfs) {
        return Ok(());
    }
    call(Site::Sync, || rustix::fs::syncfs(fd))?;
    still_writable(fd)
}

/// After a syncfs that succeeded: EROFS if the filesystem of `fd` is now read-only. A
/// filesystem that met a write error in its journal (ext4 aborts it and remounts read-only)
/// answers every later syncfs with success, as there is nothing left it can write (Linux 6.18,
/// shown by `crates/crash` with a failed write), though what was written since its last commit
/// is lost. The callers synced a filesystem they wrote to, so read-only now means that.
pub(crate) fn still_writable(fd: BorrowedFd<'_>) -> io::Result<()> {
    match rustix::fs::fstatvfs(fd) {
        Ok(s) if s.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY) => Err(io::Error::from_raw_os_error(libc::EROFS)),
        _ => Ok(()),
    }
}

/// Checks that `name` is a single path component that names an entry.
pub(crate) fn check_name(op: &'static str, path: &Path, name: &OsStr) -> Result<()> {
    if name.is_empty() || name.as_encoded_bytes().contains(&b'/') || name == ".." || name == "." {
        return Err(Error::new(ErrorKind::InvalidInput, op, path, "not a single file name"));
    }
    Ok(())
}

/// The length a read or write of `len` bytes at `site` goes on with, or the error it fails with,
/// under a planned fault (`len` itself where none is planned).
fn injected(site: Site, file: &File, len: usize) -> Result<usize, Errno> {
    match fault::check(site, Some(file), len) {
        Some(Injected::Errno(e)) => Err(Errno::from_raw_os_error(e)),
        Some(Injected::Short(n)) => Ok(n.min(len)),
        None => Ok(len),
    }
}

/// pwrite/pwritev2 until all of `data` is written at `off`: short counts carry on from where
/// they stopped, EINTR and EAGAIN are retried (as the backends do).
pub(crate) fn write_full(file: &File, mut data: &[u8], mut off: u64, flags: i32) -> io::Result<()> {
    while !data.is_empty() {
        let r = injected(Site::Write, file, data.len()).and_then(|len| {
            if flags == 0 {
                rustix::io::pwrite(file.as_fd(), &data[..len], off)
            } else {
                rustix::io::pwritev2(file.as_fd(), &[io::IoSlice::new(&data[..len])], off, rw_flags(flags))
            }
        });
        match r {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0")),
            Ok(n) => {
                data = &data[n..];
                off += n as u64;
            }
            Err(e) if e == Errno::INTR || e == Errno::AGAIN => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// One pread/preadv2 of up to `buf.len()` bytes at `off` (short only at end of file, or where
/// the caller decides), with EINTR and EAGAIN retried.
pub(crate) fn read_once(file: &File, buf: &mut [u8], off: u64, flags: i32) -> io::Result<usize> {
    loop {
        let r = injected(Site::Read, file, buf.len()).and_then(|len| {
            if flags == 0 {
                rustix::io::pread(file.as_fd(), &mut buf[..len], off)
            } else {
                rustix::io::preadv2(file.as_fd(), &mut [io::IoSliceMut::new(&mut buf[..len])], off, rw_flags(flags))
            }
        });
        match r {
            Err(e) if e == Errno::INTR || e == Errno::AGAIN => {}
            r => return r.map_err(io::Error::from),
        }
    }
}

/// The RWF_* bits as preadv2/pwritev2 take them (io_uring takes the same bits as an i32).
fn rw_flags(flags: i32) -> rustix::io::ReadWriteFlags {
    rustix::io::ReadWriteFlags::from_bits_retain(u32::from_ne_bytes(flags.to_ne_bytes()))
}

/// Makes an open, fsync or rename call (`site` says which), retrying it when interrupted
/// (EINTR: FUSE and network filesystems return it from open and fsync when a signal arrives).
/// Under the `fault-injection` feature a planned fault takes the call's place.
pub(crate) fn call<T>(site: Site, mut f: impl FnMut() -> rustix::io::Result<T>) -> io::Result<T> {
    loop {
        let r = match fault::check(site, None, 0) {
            Some(Injected::Errno(e)) => Err(Errno::from_raw_os_error(e)),
            _ => f(),
        };
        match r {
            Err(Errno::INTR) => {}
            r => return r.map_err(io::Error::from),
        }
    }
}

/// Whether a write's error says the filesystem refuses RWF_DONTCACHE (it does so before any
/// I/O, so nothing was written).
pub(crate) fn dontcache_refused(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL))
}

/// Writes `data` at `off` buffered, uncached (RWF_DONTCACHE) where the filesystem takes it,
/// else plainly. A refusal the probe could not foresee is remembered for the filesystem.
/// Returns whether the pages stay cached (the caller drops them).
pub(crate) fn write_uncached(file: &File, data: &[u8], off: u64, caps: &FsCaps) -> io::Result<bool> {
    if caps.dontcache.is_ok() {
        match write_full(file, data, off, RWF_DONTCACHE) {
            Ok(()) => return Ok(false),
            Err(e) if dontcache_refused(&e) => caps::refuse_dontcache(caps.dev, &e),
            Err(e) => return Err(e),
        }
    }
    write_full(file, data, off, 0)?;
    Ok(true)
}

/// Sets permission bits and times (those given) on an open file; the error names the call.
pub(crate) fn apply_attrs(
    file: &File,
    permissions: Option<u32>,
    atime: Option<SystemTime>,
    mtime: Option<SystemTime>,
) -> Result<(), (&'static str, io::Error)> {
    if let Some(p) = permissions {
        rustix::fs::fchmod(file, rustix::fs::Mode::from_raw_mode(p)).map_err(|e| ("chmod", e.into()))?;
    }
    if mtime.is_some() || atime.is_some() {
        let ts = |t: Option<SystemTime>| match t {
            Some(t) => to_timespec(t),
            None => rustix::fs::Timespec { tv_sec: 0, tv_nsec: rustix::fs::UTIME_OMIT },
        };
        let times = rustix::fs::Timestamps { last_access: ts(atime), last_modification: ts(mtime) };
        rustix::fs::futimens(file, &times).map_err(|e| ("set times", e.into()))?;
    }
    Ok(())
}

/// A timespec (seconds and nanoseconds, as stat gives them) as a `SystemTime`.
pub(crate) fn system_time(s: i64, ns: i64) -> SystemTime {
    use std::time::{Duration, UNIX_EPOCH};
    // st_*time_nsec is 0..1e9 (the kernel's timespec).
    let ns = u32::try_from(ns).unwrap_or(0);
    match u64::try_from(s) {
        Ok(s) => UNIX_EPOCH + Duration::new(s, ns),
        Err(_) => UNIX_EPOCH - Duration::new(s.unsigned_abs(), 0) + Duration::from_nanos(ns.into()),
    }
}

fn to_timespec(t: SystemTime) -> rustix::fs::Timespec {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => rustix::fs::Timespec { tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX), tv_nsec: d.subsec_nanos().into() },
        Err(e) => {
            let d = e.duration();
            let (mut s, mut ns) = (-i64::try_from(d.as_secs()).unwrap_or(i64::MAX), -i64::from(d.subsec_nanos()));
            if ns < 0 {
                s -= 1;
                ns += 1_000_000_000;
            }
            rustix::fs::Timespec { tv_sec: s, tv_nsec: ns }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temporary_is_made_beside_the_longest_name() {
        // And the file can be made.
        let d = tempfile::tempdir().unwrap();
        let dir = File::open(d.path()).unwrap();
        let name = OsString::from("é".repeat(127));
        let (_fd, t) =
            beside(dir.as_fd(), &name, |dir, t| Ok(rustix::fs::openat(dir, t, OFlags::CREATE | OFlags::EXCL | OFlags::RDWR, FMode::from_raw_mode(0o600))?))
                .unwrap();
        assert!(d.path().join(&t).exists());
    }
}
