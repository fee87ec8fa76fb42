//! Copying one file: a reflink where the filesystem shares extents, else direct reads handed to
//! the writer in the same aligned buffers; holes kept; optionally verified from the disk.
//!
//! Every copy is written under a temporary name beside its destination ([`stage_copy`] returns
//! it as a [`Staged`] file) and renamed into place by [`Staged::commit`], so that a tree copy
//! can make a batch of files durable with one `syncfs` before renaming them. [`copy_file_with`]
//! does both steps for one file.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Instant;

use crate::sys::{AtFlags, FMode, OFlags};
use serde::Serialize;

use crate::buf::AlignedBuf;
use crate::create::{CreateOptions, Durability, FileAttrs, FileCreator, NewFile};
use crate::digest::{Algo, Hasher};
use crate::error::{Error, ErrorKind, Result};
use crate::options::Naming;
use crate::pending::{NewName, PendingFile};
use crate::policy::{self, Decision, Reason, Taken};
use crate::progress::Progress;
use crate::rate::RateLimit;
use crate::read::{ReadOptions, Reader};
use crate::sys;
use crate::write::{WriteOptions, WriteReport, Writer};
use crate::BackendChoice;

/// Whether to clone the source's extents (FICLONE) instead of copying its bytes; GNU cp's
/// `--reflink` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reflink {
    /// Clone where the filesystem can (same filesystem, reflink support), else copy.
    #[default]
    Auto,
    /// Clone or fail.
    Always,
    /// Always copy the bytes.
    Never,
}

/// Whether holes are kept; GNU cp's `--sparse` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Sparse {
    /// A source with holes (fewer blocks than its size) is copied extent by extent
    /// (SEEK_DATA/SEEK_HOLE) and its holes stay holes.
    #[default]
    Auto,
    /// As auto, and runs of zeros (whole 4 KiB blocks) in the data become holes too.
    Always,
    /// Every byte is written: holes come out as allocated zeros.
    Never,
}

macro_rules! named_enum {
    ($t:ty, $what:literal, $($v:ident = $s:literal),+) => {
        impl $t {
            /// The lowercase name used on the command line and in reports.
            pub fn name(self) -> &'static str {
                match self { $(<$t>::$v => $s),+ }
            }
        }
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
        impl FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> std::result::Result<$t, String> {
                match s.to_ascii_lowercase().as_str() {
                    $($s => Ok(<$t>::$v),)+
                    o => Err(format!(concat!("unknown ", $what, " '{}': expected auto, always or never"), o)),
                }
            }
        }
    };
}
named_enum!(Reflink, "reflink value", Auto = "auto", Always = "always", Never = "never");
named_enum!(Sparse, "sparse value", Auto = "auto", Always = "always", Never = "never");

/// Called with the destination (open read-write, under its temporary name, durable) between
/// the write and the verification read: a fault-injection point for tests.
pub type VerifyHook = Arc<dyn Fn(&File, &Path) -> io::Result<()> + Send + Sync>;

/// What a copy does beyond moving the bytes.
#[derive(Clone)]
pub struct CopyOptions {
    /// Clone instead of copying (default auto).
    pub reflink: Reflink,
    /// Keep holes (default auto).
    pub sparse: Sparse,
    /// Hash the source while reading it, then read the durable destination back past the page
    /// cache and compare; a mismatch is an error and the destination is not kept.
    pub verify: Option<Algo>,
    /// Limit on the bytes moved per second, shared by every copy holding it.
    pub rate: Option<Arc<RateLimit>>,
    /// Whether the destination gets the source's owner and group, and what a refusal means.
    pub owner: Ownership,
    /// Which extended attributes the destination gets from the source.
    pub xattrs: Xattrs,
    /// What the copy takes from the file it replaces (see [`Carry`]).
    pub carry: Option<Arc<Carry>>,
    /// Files up to this size are written whole by a [`FileCreator`] (one read, one write);
    /// larger ones stream through a [`Writer`]. Default `SMALL_WRITE`.
    pub small_file: u64,
    /// Test hook run before verification (see [`VerifyHook`]).
    pub before_verify: Option<VerifyHook>,
    /// The destination's directory is one the tree copy made, so that nothing in it is the
    /// source, and has no default ACL, so that a new file in it inherits none: the check for
    /// a copy onto itself and the look for an inherited ACL to remove are left out.
    pub plain_dir: bool,
    /// The caller looked already whether the destination is the source (the tree copy's walk,
    /// as GNU cp does): the copy does not look again (the destination may be a symlink to the
    /// source that it replaces).
    pub same_checked: bool,
}

impl CopyOptions {
    /// Defaults: reflink and sparse auto, no verification, no limit, no owner or xattrs, files
    /// up to `SMALL_WRITE` written whole. The same as `CopyOptions::default()`.
    pub fn new() -> CopyOptions {
        CopyOptions {
            reflink: Reflink::default(),
            sparse: Sparse::default(),
            verify: None,
            rate: None,
            owner: Ownership::Mine,
            xattrs: Xattrs::None,
            carry: None,
            small_file: policy::SMALL_WRITE,
            before_verify: None,
            plain_dir: false,
            same_checked: false,
        }
    }
}

impl Default for CopyOptions {
    fn default() -> CopyOptions {
        CopyOptions::new()
    }
}

impl fmt::Debug for CopyOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CopyOptions")
            .field("reflink", &self.reflink)
            .field("sparse", &self.sparse)
            .field("verify", &self.verify)
            .field("rate", &self.rate.as_ref().map(|r| r.rate()))
            .field("owner", &self.owner)
            .field("xattrs", &self.xattrs)
            .field("carry", &self.carry.is_some())
            .field("small_file", &self.small_file)
            .field("before_verify", &self.before_verify.is_some())
            .field("plain_dir", &self.plain_dir)
            .finish()
    }
}

/// How the bytes got there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// FICLONE: the destination shares the source's extents; no data moved.
    Reflink,
    /// Read and written in full.
    Copy,
    /// Data extents read and written, holes left as holes.
    Sparse,
}

impl Method {
    /// The lowercase name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Method::Reflink => "reflink",
            Method::Copy => "copy",
            Method::Sparse => "sparse",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The verification of a copy.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// The algorithm.
    pub algo: Algo,
    /// The digest of the source (as read) and of the destination (read back), equal.
    pub digest: String,
    /// How the destination was read back, and why.
    pub read: Decision,
    /// Seconds spent reading the destination back and hashing it.
    pub seconds: f64,
}

/// What a copy did.
#[derive(Debug, Clone, Serialize)]
pub struct CopyReport {
    /// Source path.
    #[serde(serialize_with = "crate::quote::serialize_path")]
    pub src: PathBuf,
    /// How the bytes got there.
    pub method: Method,
    /// Why no reflink was made, when one was allowed (`None` for a reflink, and for
    /// `--reflink never`).
    pub reflink_fallback: Option<String>,
    /// How the source was read.
    pub read: Decision,
    /// The read backend, if a queue was used.
    pub read_backend: Option<BackendChoice>,
    /// What the write did (for a reflink: the file's size, no data written).
    pub write: WriteReport,
    /// Bytes of data read and written (0 for a reflink; less than the size for a sparse file).
    pub data_bytes: u64,
    /// The verification, when asked for.
    pub verify: Option<VerifyReport>,
}

/// Errnos on which FICLONE means "cannot clone here" rather than a failure: the filesystem has
/// no reflinks (EOPNOTSUPP, ENOTTY where the ioctl is unknown), source and destination are on
/// different filesystems (EXDEV), or this file cannot be cloned (EINVAL).
fn clone_refused(e: sys::Errno) -> bool {
    matches!(e, sys::Errno::OPNOTSUPP | sys::Errno::XDEV | sys::Errno::INVAL | sys::Errno::NOTTY)
}

/// A copy written and closed under a temporary name beside its destination (or none), with
/// its attributes; [`Staged::commit`] gives it its name. Dropped uncommitted, it is removed.
#[derive(Debug)]
pub struct Staged {
    /// The copy, until it is named; `None` for a copy written in place (an existing file kept
    /// its inode): nothing to name.
    entry: Option<PendingFile>,
    /// Made by a creator that names files after their syncfs (see
    /// [`Durability::NamedAfterSync`]): named once the caller's syncfs made it durable.
    after_syncfs: bool,
    /// A verification left to the caller's syncfs (see [`Staged::prefetch`]): the algorithm,
    /// the source's digest, the options (hook, rate) it runs with, and the job's cancel flag.
    deferred: Option<(Algo, String, CopyOptions, Arc<std::sync::atomic::AtomicBool>)>,
    dir: Arc<OwnedFd>,
    path: PathBuf,
    sync: bool,
    /// What the copy did.
    pub report: CopyReport,
}

impl Staged {
    /// For a copy without a name whose verification waits for the caller's syncfs (see
    /// [`stage_copy`]): runs the test hook, drops its pages (clean after the syncfs; written
    /// back first where the hook wrote) and starts reading it back from the disk. Called for
    /// every file of a batch before their commits, so that the device serves the read-backs
    /// together rather than one at a time. Nothing to do for other copies.
    pub fn prefetch(&self) -> Result<()> {
        let (Some((_, _, co, _)), Some(f)) = (&self.deferred, self.entry.as_ref().map(PendingFile::file)) else { return Ok(()) };
        // Clean after the syncfs: dropped as they are, unless the hook wrote (then written back first).
        match &co.before_verify {
            Some(hook) => {
                hook(f, &self.path).map_err(|e| Error::io("verify hook", &self.path, e))?;
                crate::residency::evict(f, 0, 0)
            }
            None => crate::residency::drop_range(f, 0, 0),
        }
        .map_err(|e| Error::io("evict", &self.path, e))?;
        // Best effort: without it the read below waits for the disk on its own.
        sys::fadvise(&**f, sys::Advice::WillNeed);
        Ok(())
    }

    /// Reads a copy that a syncfs made durable back (after [`Staged::prefetch`] dropped its pages and
    /// started the reads), hashes it and compares with the source's digest. Its pages are dropped
    /// again when it is named (`PendingFile::publish_synced`), or go with it.
    fn verify_synced(&self, f: &File, algo: Algo, want: &str, co: &CopyOptions, cancel: &std::sync::atomic::AtomicBool) -> Result<VerifyReport> {
        let t = Instant::now();
        let mut h = Hasher::new(algo);
        let mut buf = vec![0u8; crate::conv::usize_of(self.report.write.bytes.clamp(1, 1 << 20))];
        let mut off = 0u64;
        loop {
            let n = sys::read_once(f, &mut buf, off, sys::RwFlags::NONE).map_err(|e| Error::io("read back", &self.path, e))?;
            if n == 0 {
                break;
            }
            if let Some(r) = &co.rate {
                r.take(n as u64, || cancel.load(std::sync::atomic::Ordering::Relaxed));
            }
            h.update(&buf[..n]);
            off += n as u64;
        }
        let got = h.hex();
        if got != want {
            return Err(mismatch(&self.path, algo, &got, want));
        }
        let read = Decision { mode: Taken::DropBehind, reason: Reason::ReadBackAfterSync };
        Ok(VerifyReport { algo, digest: got, read, seconds: t.elapsed().as_secs_f64() })
    }

    /// The destination directory (for a `syncfs` covering a batch).
    pub fn dir(&self) -> &Arc<OwnedFd> {
        &self.dir
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the file into place (fsyncing the directory if the copy was durable) and
    /// returns its report. A file from a creator that names files after their syncfs (see
    /// [`stage_copy`]) is linked (or renamed) into place, its pages dropped: the caller
    /// commits it only after a syncfs that made it durable.
    pub fn commit(mut self) -> Result<CopyReport> {
        let Some(entry) = self.entry.take() else {
            return Ok(self.report.clone());
        };
        if self.after_syncfs {
            if let Some((algo, want, co, cancel)) = self.deferred.take() {
                // A copy that fails goes with `entry`, never named.
                self.report.verify = Some(self.verify_synced(entry.file(), algo, &want, &co, &cancel)?);
            }
            entry.publish_synced()?;
        } else {
            // After the rename the copy is whole and in place; only the directory entry's
            // durability can be in doubt then, and the error says so.
            entry.publish(self.sync)?;
        }
        Ok(self.report.clone())
    }
}

/// Opens the directory `dst` lives in; returns it with `dst`'s file name.
pub fn open_parent(dst: &Path) -> Result<(Arc<OwnedFd>, OsString)> {
    let (fd, name) = sys::open_parent(dst)?;
    Ok((Arc::new(fd), name.to_os_string()))
}

/// What a copy replacing an existing regular file takes from it, so that what can be seen
/// of the file stays as GNU cp leaves it when it writes the file in place: its owner and
/// group, its permission bits (less the set-user-ID and set-group-ID bits the kernel drops
/// when another user's process writes a file), its access time, and its extended attributes
/// and ACLs (not `security.capability`, which the kernel drops on any write).
#[derive(Debug)]
pub struct Carry {
    file: File,
    uid: u32,
    gid: u32,
    /// The permission bits the copy gets.
    pub mode: u32,
    /// The access time it keeps.
    pub atime: std::time::SystemTime,
}

/// The capability attribute, which a write removes from a file.
const CAPABILITY: &[u8] = b"security.capability";

impl Carry {
    /// What to carry over from `old` (with status `st`), or `None` where this user could not
    /// give a new file all of it (another owner or group, an attribute only a privileged
    /// process may set): the file is then written in place.
    pub fn of(old: &File, st: &sys::Stat, root: bool) -> Option<Carry> {
        let (euid, in_group) = (sys::euid(), sys::in_group);
        if !root && (st.st_uid != euid || !in_group(st.st_gid)) {
            return None;
        }
        if !root {
            let list = sys::xattr_names(sys::XattrAt::Fd(old.as_fd())).unwrap_or_default();
            let settable = |n: &[u8]| n.starts_with(b"user.") || n.starts_with(b"system.posix_acl_") || n == CAPABILITY;
            if !list.split(|&b| b == 0).filter(|n| !n.is_empty()).all(settable) {
                return None;
            }
        }
        let mut mode = st.st_mode & 0o7777;
        if !root {
            // What the kernel drops when a process without CAP_FSETID writes the file.
            mode &= !sys::consts::S_ISUID;
            if mode & sys::consts::S_IXGRP != 0 || !in_group(st.st_gid) {
                mode &= !sys::consts::S_ISGID;
            }
        }
        let atime = sys::system_time(st.st_atime, i64::try_from(st.st_atime_nsec).unwrap_or(0));
        Some(Carry { file: old.try_clone().ok()?, uid: st.st_uid, gid: st.st_gid, mode, atime })
    }

    /// Gives `dst`, the new file, the old one's owner and extended attributes (its mode and
    /// access time go through the [`WriteOptions`] that make it: [`Carry::mode`],
    /// [`Carry::atime`]).
    pub fn apply(&self, dst: &File, path: &Path) -> Result<()> {
        let st = sys::fstat(dst).map_err(|e| Error::io("fstat", path, e.into()))?;
        if (st.st_uid, st.st_gid) != (self.uid, self.gid) {
            let uid = (st.st_uid != self.uid).then_some(self.uid);
            sys::fchown(dst, uid, Some(self.gid)).map_err(|e| Error::io("fchown", path, e.into()))?;
        }
        copy_xattrs_filtered(&self.file, dst, path, true, |n| n != CAPABILITY)
    }
}

/// Whether a copy gets its source's owner and group, and what a refusal means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ownership {
    /// Not taken: the copying user owns the copy (the default).
    #[default]
    Mine,
    /// Taken where this user may (the owner needs root or CAP_CHOWN); as GNU cp does for
    /// other users, a change the kernel refuses is tried again with the group alone, and the
    /// set-user-ID, set-group-ID and sticky bits are left out of the mode.
    Tried,
    /// Taken, and a change that fails is an error (the user may change owners: root).
    Required,
}

impl Ownership {
    /// GNU cp's: not taken unless `preserve`; then required of root, tried by others.
    pub fn of(preserve: bool, root: bool) -> Ownership {
        match (preserve, root) {
            (false, _) => Ownership::Mine,
            (true, false) => Ownership::Tried,
            (true, true) => Ownership::Required,
        }
    }
}

/// Which extended attributes a copy gets from its source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Xattrs {
    /// None (the default).
    #[default]
    None,
    /// The source's access ACL, or none where the source has none (an ACL the copy inherited
    /// from its directory goes): what GNU cp does with the mode it preserves, or drops under
    /// `--no-preserve=mode`.
    Acl,
    /// Every extended attribute (POSIX ACLs among them) where both filesystems have them.
    All,
}

impl Xattrs {
    /// GNU cp's: all with `--preserve=xattr`, else the access ACL where `acl` (the mode is
    /// preserved, or explicitly not: GNU sets the ACL the mode says either way), else none.
    pub fn of(xattr: bool, acl: bool) -> Xattrs {
        match (xattr, acl) {
            (true, _) => Xattrs::All,
            (false, true) => Xattrs::Acl,
            (false, false) => Xattrs::None,
        }
    }
}

/// Copies the regular file `src` to `dst`: written under a temporary name, made durable (where
/// `wo.durability` is `EachFile`), then renamed over `dst`. Refuses to copy a file onto itself. Checks
/// `progress` for cancellation between requests; an interrupted copy leaves `dst` untouched.
pub fn copy_file(src: &Path, dst: &Path, ro: &ReadOptions, wo: &WriteOptions, progress: &Progress) -> Result<CopyReport> {
    copy_file_with(src, dst, ro, wo, &CopyOptions::new(), progress)
}

/// [`copy_file`] with reflinks, holes, verification, a rate limit, owner and xattrs as `co`
/// says. The permissions and times to give the copy are in `wo`.
pub fn copy_file_with(src: &Path, dst: &Path, ro: &ReadOptions, wo: &WriteOptions, co: &CopyOptions, progress: &Progress) -> Result<CopyReport> {
    let (dir, name) = open_parent(dst)?;
    stage_copy(src, &dir, &name, dst, ro, wo, co, None, progress)?.commit()
}

/// Where a copy's data comes from.
pub enum Source {
    /// A regular file, read at the offsets its size says (unless its filesystem makes sizes
    /// up: proc, sysfs and the like, read to their end as a stream), with its status when the
    /// caller has it.
    File(File, Option<std::fs::Metadata>),
    /// Anything else (a FIFO, a device, standard input): read to its end.
    Stream(File),
    /// No data (`--attributes-only`): the copy is empty, or an existing one keeps its data;
    /// the source, open, gives its attributes.
    Nothing(File),
}

/// Copies `src` into a temporary file beside `name` in `dir` (`dst` is the final path, for
/// messages), with the attributes `wo` and `co` ask for, and returns it unrenamed. The data is
/// durable when `wo.durability` is `EachFile` or a verification was asked for (the verification reads the
/// durable file). Small files go through `creator` when given (else one made for the call).
/// A creator that names files after their syncfs ([`Durability::NamedAfterSync`])
/// makes a small copy that is not synced without a name (O_TMPFILE), which [`Staged::commit`]
/// links into place: commit it only after a syncfs made it durable. Its verification, when
/// asked, waits for that syncfs too: [`Staged::prefetch`] starts reading it back, and the
/// commit compares it before naming it (a batch's read-backs then overlap, and no file is
/// fsynced on its own).
#[allow(clippy::too_many_arguments)] // Each is a distinct part of the job; a struct of them would only be rebuilt per file.
pub fn stage_copy(
    src: &Path,
    dir: &Arc<OwnedFd>,
    name: &OsStr,
    dst: &Path,
    ro: &ReadOptions,
    wo: &WriteOptions,
    co: &CopyOptions,
    creator: Option<&FileCreator>,
    progress: &Progress,
) -> Result<Staged> {
    let fd = sys::open_interruptible(sys::CWD, src, OFlags::RDONLY | OFlags::CLOEXEC, FMode::empty())
        .map_err(io::Error::from)
        .map_err(|e| Error::io("open", src, e))?;
    stage_copy_from(Source::File(File::from(fd), None), src, dir, name, dst, ro, wo, co, creator, progress)
}

/// [`stage_copy`] from a source already open.
#[allow(clippy::too_many_arguments)] // As stage_copy.
pub fn stage_copy_from(
    source: Source,
    src: &Path,
    dir: &Arc<OwnedFd>,
    name: &OsStr,
    dst: &Path,
    ro: &ReadOptions,
    wo: &WriteOptions,
    co: &CopyOptions,
    creator: Option<&FileCreator>,
    progress: &Progress,
) -> Result<Staged> {
    Job::new(src, dst, dir, name, co, wo, progress, None).run(source, ro, creator)
}

/// Copies `source` into `dst`, an existing file open for writing, in place: the file keeps its
/// inode, and with it its other names, owner, mode and attributes (those `co` and `wo` ask for
/// are set); a FIFO or device is written as a stream. Without `data` nothing is written, only
/// the attributes set. Durable when `wo.durability` is `EachFile` (a regular file). An interrupted or failed
/// copy leaves the file as far as it got, as GNU cp's does.
#[allow(clippy::too_many_arguments)] // As stage_copy.
pub fn copy_in_place(
    source: Source,
    src: &Path,
    dst_file: File,
    dir: &Arc<OwnedFd>,
    name: &OsStr,
    dst: &Path,
    ro: &ReadOptions,
    wo: &WriteOptions,
    co: &CopyOptions,
    progress: &Progress,
) -> Result<CopyReport> {
    Job::new(src, dst, dir, name, co, wo, progress, Some(dst_file)).run(source, ro, None)?.commit()
}

/// One file's copy in progress.
struct Job<'a> {
    src: &'a Path,
    dst: &'a Path,
    dir: &'a Arc<OwnedFd>,
    /// The final name in `dir`.
    name: &'a OsStr,
    /// The copy, finished under a temporary name (or none) and waiting to be named.
    entry: Option<PendingFile>,
    /// Made by a creator that names files after their syncfs: named after the caller's.
    after_syncfs: bool,
    co: &'a CopyOptions,
    wo: &'a WriteOptions,
    progress: &'a Progress,
    hasher: Option<Hasher>,
    /// The existing file to write in place, until the copy takes it.
    existing: Option<File>,
    /// That file is a FIFO or a device: nothing to read back.
    stream_dst: bool,
    /// The owner could not be given (another user's copy): the set-ID and sticky bits are left
    /// out of the mode, as GNU cp leaves them.
    drop_special: bool,
}

/// How a source that is not read at offsets (a stream, or a file whose size its filesystem
/// makes up) was read.
fn streamed() -> Decision {
    Decision { mode: Taken::Buffered, reason: Reason::Streamed }
}

impl<'a> Job<'a> {
    /// A copy of `src` to `name` in `dir` (`dst` for messages), into `existing` in place when
    /// given.
    #[allow(clippy::too_many_arguments)] // As stage_copy.
    fn new(
        src: &'a Path,
        dst: &'a Path,
        dir: &'a Arc<OwnedFd>,
        name: &'a OsStr,
        co: &'a CopyOptions,
        wo: &'a WriteOptions,
        progress: &'a Progress,
        existing: Option<File>,
    ) -> Job<'a> {
        Job {
            src,
            dst,
            dir,
            name,
            entry: None,
            after_syncfs: false,
            co,
            wo,
            progress,
            hasher: co.verify.map(Hasher::new),
            existing,
            stream_dst: false,
            drop_special: false,
        }
    }

    /// The whole copy: the data by the best way the source and destination allow, then the
    /// attributes, staged under a temporary name (or none, or in place).
    fn run(mut self, source: Source, ro: &ReadOptions, creator: Option<&FileCreator>) -> Result<Staged> {
        let (file, meta) = match source {
            Source::Nothing(src) => return self.nothing(src, creator),
            Source::Stream(f) => return self.plain(f, creator),
            Source::File(f, meta) => (f, meta),
        };
        let mut ro = ro.clone();
        // The reader's lease also covers the chunks the writer holds in flight.
        ro.extra_buffers = self.wo.io.queue_depth.max(1) + 1;
        if let Some(r) = &self.co.rate {
            // Read-ahead bounded to a tenth of a second's worth keeps the reads within the limit too.
            let tenth = (r.rate() / 10).max(64 << 10);
            let cap = crate::conv::usize_of(1u64 << (63 - tenth.leading_zeros()));
            ro.io.block_size = ro.io.block_size.min(cap);
            ro.io.queue_depth = ro.io.queue_depth.min(2);
        }
        let mut reader = match meta {
            Some(m) => Reader::from_file_stat(file, m, self.src, &ro)?,
            None => Reader::from_file(file, self.src, &ro)?,
        };
        if reader.caps().sizes_lie() {
            let f = reader.file().try_clone().map_err(|e| Error::io("dup", self.src, e))?;
            drop(reader);
            return self.plain(f, creator);
        }
        // The reader's fstat at open serves the copy (size, sparseness, owner) without another.
        let smeta = reader.metadata().clone();
        if self.existing.is_none() && !self.co.same_checked {
            if let Some(d) = (!self.co.plain_dir).then(|| sys::statat(&**self.dir, self.name, AtFlags::empty()).ok()).flatten() {
                if d.st_dev == smeta.dev() && d.st_ino == smeta.ino() {
                    return Err(Error::new(
                        ErrorKind::SameFile,
                        "copy",
                        self.dst,
                        format!("'{}' and '{}' are the same file", self.src.display(), self.dst.display()),
                    ));
                }
            }
        }
        let len = reader.len();
        let mut fallback = None;
        if self.co.reflink != Reflink::Never && len > 0 && self.existing.is_none() {
            match self.reflink(&mut reader, &smeta, creator)? {
                Ok(write) => return self.staged(Method::Reflink, None, reader.decision().clone(), reader.backend().cloned(), reader.block_size(), write, 0),
                Err(why) => fallback = Some(why),
            }
        }
        // Holes only where the destination can have them (a FIFO or device is written whole).
        let stream_dst = self.existing.as_ref().is_some_and(|f| f.metadata().is_ok_and(|m| !m.is_file()));
        let dense = smeta.blocks().saturating_mul(512) >= len || stream_dst;
        let (method, write, data) = if !stream_dst && (self.co.sparse == Sparse::Always || (self.co.sparse == Sparse::Auto && !dense && len > 0)) {
            self.sparse(&mut reader, creator)?
        } else if len <= self.co.small_file || self.existing.is_some() {
            self.small(&mut reader, creator)?
        } else {
            self.stream(&mut reader)?
        };
        let (decision, backend, block) = (reader.decision().clone(), reader.backend().cloned(), reader.block_size());
        // The source's reader is given back (and its buffers to the budget) before a read-back
        // takes buffers of its own: copies on many threads each holding one lease while waiting
        // for a second would wait for ever.
        drop(reader);
        self.staged(method, fallback, decision, backend, block, write, data)
    }

    fn interrupted(&self) -> Result<()> {
        if self.progress.is_cancelled() {
            return Err(Error::new(ErrorKind::Interrupted, "copy", self.dst, "interrupted"));
        }
        Ok(())
    }

    /// Counts `n` bytes moved: the rate limit, the hash, the progress.
    fn moved(&mut self, data: &[u8]) {
        if let Some(r) = &self.co.rate {
            r.take(data.len() as u64, || self.progress.is_cancelled());
        }
        if let Some(h) = &mut self.hasher {
            h.update(data);
        }
        self.progress.add_bytes(data.len() as u64);
    }

    /// Feeds `n` zero bytes (a hole) to the hash and counts them as done.
    fn hole(&mut self, mut n: u64) {
        self.progress.add_bytes(n);
        if let Some(h) = &mut self.hasher {
            static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
            while n > 0 {
                let k = crate::conv::fit(n, ZEROS.len());
                h.update(&ZEROS[..k]);
                n -= k as u64;
            }
        }
    }

    /// The permission bits the copy ends with.
    fn permissions(&self) -> Option<u32> {
        self.wo.permissions.map(|p| if self.drop_special { p & !0o7000 } else { p })
    }

    fn attrs(&self) -> FileAttrs {
        FileAttrs { permissions: self.permissions(), mtime: self.wo.mtime, atime: self.wo.atime, create: self.wo.create_mode }
    }

    /// Owner and extended attributes, before the engine applies mode and times (fchown clears
    /// setuid and setgid, which the mode then restores): those carried from a file the copy
    /// replaces first, then those taken from the source (GNU cp's order). The owner is changed
    /// only where the copy was not created with it already, as GNU cp and rsync do: a change of
    /// owner is a journaled inode update, where a copy run as root of files owned by root needs
    /// none. In a folder the copy made (`plain_dir`), every file it creates gets the same owner,
    /// learnt from the first (`creator`'s [`FileCreator::owner_in`]); elsewhere each copy is
    /// looked at. A change of owner this user may not make (not root) is left at the group,
    /// where the user belongs to it, and the set-ID and sticky bits are left out.
    fn extra(&mut self, src: &File, dst: &File, meta: &std::fs::Metadata, creator: Option<&FileCreator>) -> Result<()> {
        if let Some(c) = &self.co.carry {
            c.apply(dst, self.dst)?;
        }
        if self.co.owner != Ownership::Mine {
            let want = (meta.uid(), meta.gid());
            let has = match creator.filter(|_| self.co.plain_dir && self.co.carry.is_none()) {
                Some(c) => c.owner_in(self.dir, dst),
                None => sys::fstat(dst).ok().map(|s| (s.st_uid, s.st_gid)),
            };
            if has != Some(want) {
                let (u, g) = want;
                match sys::fchown(dst, Some(u), Some(g)) {
                    Ok(()) => {}
                    Err(sys::Errno::PERM | sys::Errno::INVAL) if self.co.owner == Ownership::Tried => {
                        let _ = sys::fchown(dst, None, Some(g));
                        self.drop_special = true;
                    }
                    Err(e) => {
                        return Err(Error::message(
                            ErrorKind::PermissionDenied,
                            self.dst,
                            format!("failed to preserve ownership for {}: {}", crate::quote::quote(self.dst), crate::error::strerror(e.raw_os_error())),
                        ))
                    }
                }
            }
        }
        if self.co.xattrs == Xattrs::All {
            copy_xattrs_to(src, dst, self.dst, !self.co.plain_dir || self.co.carry.is_some())?;
        } else if self.co.xattrs == Xattrs::Acl {
            copy_acl(src, dst, self.dst, !self.co.plain_dir || self.co.carry.is_some() || self.existing.is_some())?;
        }
        Ok(())
    }

    /// Tries FICLONE into a fresh temporary file. `Ok(Err(why))`: cloning is impossible here
    /// (a named errno) and reflink is auto: copy instead.
    fn reflink(&mut self, reader: &mut Reader, smeta: &std::fs::Metadata, creator: Option<&FileCreator>) -> Result<std::result::Result<WriteReport, String>> {
        // The creator knows the device of the directory it last created a file in.
        let ddev = match creator.and_then(|c| c.dir_dev(self.dir)) {
            Some(d) => d,
            None => sys::fstat(&**self.dir).map(|s| s.st_dev).unwrap_or(0),
        };
        let key = (smeta.dev(), ddev);
        let known = crate::caps::clone_refused_between(key);
        let errno = match known {
            Some(e) => Some(e),
            None => {
                // On any error below the clone goes with `entry`.
                let entry = PendingFile::create(self.dir.clone(), self.name, self.dst, NewName::Temporary, self.attrs().create_perm(), false)?;
                let file = entry.file();
                match sys::ficlone(&**file, reader.file()) {
                    Ok(()) => {
                        self.extra(reader.file(), file, smeta, creator)?;
                        sys::apply_attrs(file, self.permissions(), self.wo.atime, self.wo.mtime).map_err(|(op, e)| Error::io(op, self.dst, e))?;
                        if self.wo.durability.each_file() {
                            sys::fsync(file, self.dst)?;
                        }
                        self.progress.add_bytes(reader.len());
                        if let Some(h) = &mut self.hasher {
                            // The hash of the source, read as any copy reads it.
                            while let Some(c) = reader.next_chunk()? {
                                if let Some(r) = &self.co.rate {
                                    r.take(c.len() as u64, || self.progress.is_cancelled());
                                }
                                h.update(&c);
                            }
                        }
                        self.entry = Some(entry);
                        let decision = Decision { mode: Taken::NoData, reason: Reason::Reflinked };
                        return Ok(Ok(WriteReport {
                            path: self.dst.to_path_buf(),
                            bytes: reader.len(),
                            decision,
                            direct_bytes: 0,
                            tail_bytes: 0,
                            synced: self.wo.durability.each_file(),
                            backend: None,
                        }));
                    }
                    Err(e) if clone_refused(e) => {
                        if e != sys::Errno::INVAL {
                            crate::caps::refuse_clone(key, e);
                        }
                        Some(e)
                    }
                    Err(e) => return Err(Error::io("clone (FICLONE)", self.dst, e.into())),
                }
            }
        };
        let e = errno.unwrap_or(sys::Errno::OPNOTSUPP);
        let why = match e {
            sys::Errno::XDEV => "FICLONE: EXDEV (source and destination on different filesystems)",
            sys::Errno::INVAL => "FICLONE: EINVAL (this file cannot be cloned here)",
            sys::Errno::NOTTY => "FICLONE: ENOTTY (the filesystem has no reflinks)",
            _ => "FICLONE: EOPNOTSUPP (the filesystem has no reflinks)",
        }
        .to_string();
        if self.co.reflink == Reflink::Always {
            return Err(Error::io("clone (FICLONE)", self.dst, e.into()).with_kind(ErrorKind::Unsupported).with_note(format!("--reflink=always: {why}")));
        }
        Ok(Err(why))
    }

    /// A small file (or any file written in place): read in chunks, written by the file
    /// creator at their offsets.
    fn small(&mut self, reader: &mut Reader, creator: Option<&FileCreator>) -> Result<(Method, WriteReport, u64)> {
        let len = reader.len();
        let mut f = self.new_file(creator, len)?;
        let mut data = 0;
        while let Some(c) = reader.next_chunk()? {
            self.interrupted()?;
            f.write_at(&c, c.offset())?;
            data += c.len() as u64;
            self.moved(&c);
        }
        self.extra(reader.file(), f.file(), reader.metadata(), creator)?;
        Ok((Method::Copy, self.finish(f)?, data))
    }

    /// A source read to its end as a stream (a FIFO, a device, a file whose size its
    /// filesystem makes up), written in order.
    fn plain(mut self, src: File, creator: Option<&FileCreator>) -> Result<Staged> {
        let meta = src.metadata().map_err(|e| Error::io("cannot fstat {}", self.src, e))?;
        let mut f = self.new_file(creator, 0)?;
        let mut buf = vec![0u8; 128 << 10];
        let mut off = 0u64;
        loop {
            self.interrupted()?;
            let n = sys::read(&src, &mut buf).map_err(|e| Error::io("error reading {}", self.src, e))?;
            if n == 0 {
                break;
            }
            f.write_at(&buf[..n], off)?;
            self.moved(&buf[..n]);
            off += n as u64;
        }
        self.extra(&src, f.file(), &meta, creator)?;
        let write = self.finish(f)?;
        self.staged(Method::Copy, None, streamed(), None, buf.len(), write, off)
    }

    /// `--attributes-only`: an empty copy (or the existing file, its data left) with the
    /// source's attributes.
    fn nothing(mut self, src: File, creator: Option<&FileCreator>) -> Result<Staged> {
        let meta = src.metadata().map_err(|e| Error::io("cannot fstat {}", self.src, e))?;
        let f = match self.existing.take() {
            Some(existing) => self.adopt(existing, creator, 0, false),
            None => self.new_file(creator, 0)?,
        };
        self.extra(&src, f.file(), &meta, creator)?;
        let write = self.finish(f)?;
        let read = Decision { mode: Taken::NoData, reason: Reason::AttributesOnly };
        self.staged(Method::Copy, None, read, None, 0, write, 0)
    }

    /// Finishes a file from the creator, durable if the write options ask for it (a shared
    /// creator may not sync: a tree copy makes its small files durable in batches).
    fn finish(&mut self, mut f: NewFile) -> Result<WriteReport> {
        // A change of owner this user could not make drops the set-ID bits asked for.
        if self.drop_special {
            f.set_permissions(self.permissions());
        }
        // The attributes are set by the finish, and made durable by its fsync. The file comes
        // back under its temporary name (or none), to be named by `Staged::commit`.
        let (report, entry) = if self.wo.durability.each_file() { f.finish_durable()? } else { f.finish_unbatched()? };
        self.entry = entry;
        Ok(report)
    }

    /// The existing file `existing`, to be written in place (emptied first when `truncate`).
    fn adopt(&mut self, existing: File, creator: Option<&FileCreator>, len: u64, truncate: bool) -> NewFile {
        self.stream_dst = existing.metadata().is_ok_and(|m| !m.is_file());
        match creator {
            Some(c) => c.adopt_existing(existing, self.dir.clone(), self.name, self.dst, len, self.attrs(), truncate),
            None => self.own_creator().adopt_existing(existing, self.dir.clone(), self.name, self.dst, len, self.attrs(), truncate),
        }
    }

    /// A creator of this copy's own, where the caller gave none: durable as the write options say.
    fn own_creator(&self) -> FileCreator {
        FileCreator::new(CreateOptions {
            mode: self.wo.io.mode,
            durability: Durability::synced(self.wo.durability.each_file()),
            deferred_drops: 0,
            ..CreateOptions::new()
        })
    }

    fn new_file(&mut self, creator: Option<&FileCreator>, len: u64) -> Result<NewFile> {
        let own;
        if let Some(existing) = self.existing.take() {
            return Ok(self.adopt(existing, creator, len, true));
        }
        // A creator that names files after their syncfs creates this one without a name, to be
        // named after the caller's syncfs (and verified after it, when asked); not for a copy
        // made durable on its own (it uses its temporary name).
        if let Some(c) = creator.filter(|c| c.publishes() && !self.wo.durability.each_file()) {
            self.after_syncfs = true;
            return c.create(self.dir.clone(), self.name, self.dst, len, self.attrs());
        }
        let creator = match creator.filter(|c| !c.publishes()) {
            Some(c) => c,
            None => {
                own = self.own_creator();
                &own
            }
        };
        creator.create_as(self.dir.clone(), self.name, self.dst, len, self.attrs(), NewName::Temporary)
    }

    /// A large file: streamed through the writer's queue.
    fn stream(&mut self, reader: &mut Reader) -> Result<(Method, WriteReport, u64)> {
        let mut wo = self.wo.clone();
        wo.naming = Naming::Temporary;
        wo.size_hint = Some(reader.len());
        wo.permissions = self.permissions();
        // Under a budget smaller than asked for, the writer may only hold what the reader's lease
        // leaves beyond its read-ahead and the chunk in hand; none left means write-through.
        wo.io.queue_depth = wo.io.queue_depth.min(reader.buffers().saturating_sub(reader.queue_depth() + 1));
        let mut writer = Writer::create_in_shared(self.dir.clone(), self.name, self.dst, &wo)?;
        let mut data = 0;
        while let Some(chunk) = reader.next_chunk()? {
            self.interrupted()?;
            data += chunk.len() as u64;
            self.moved(&chunk);
            writer.write_chunk(chunk)?;
        }
        self.extra(reader.file(), writer.file(), reader.metadata(), None)?;
        if self.drop_special {
            writer.set_permissions(self.permissions());
        }
        // Named by `Staged::commit` (the file's own fsync, when asked, is done).
        let (w, entry) = writer.finish_pending()?;
        self.entry = Some(entry);
        Ok((Method::Copy, w, data))
    }

    /// A file with holes: its data extents (SEEK_DATA/SEEK_HOLE) read and written at their
    /// offsets, the holes left unwritten; with `Sparse::Always`, whole zero blocks too.
    fn sparse(&mut self, reader: &mut Reader, creator: Option<&FileCreator>) -> Result<(Method, WriteReport, u64)> {
        const ZBLOCK: usize = 4096;
        let len = reader.len();
        let mut f = self.new_file(creator, len)?;
        let piece = reader.block_size().max(ZBLOCK);
        let mut buf = AlignedBuf::try_new(piece, 4096).ok_or_else(|| Error::new(ErrorKind::Io, "copy", self.src, "out of memory for a read buffer"))?;
        let zeros_too = self.co.sparse == Sparse::Always;
        let (mut pos, mut data) = (0u64, 0u64);
        while pos < len {
            self.interrupted()?;
            let start = match data_at(reader.file(), pos).map_err(|e| Error::io("seek (SEEK_DATA)", self.src, e))? {
                Some(s) if s < len => s,
                _ => break,
            };
            let end = hole_at(reader.file(), start).map_err(|e| Error::io("seek (SEEK_HOLE)", self.src, e))?.min(len);
            self.hole(start - pos);
            let mut off = start;
            while off < end {
                self.interrupted()?;
                let want = crate::conv::fit(end - off, piece);
                let n = reader.read_at(&mut buf[..want], off)?;
                if n == 0 {
                    break;
                }
                let got = &buf[..n];
                if zeros_too {
                    let mut i = 0;
                    while i < n {
                        let j = (i + ZBLOCK).min(n);
                        if got[i..j].iter().all(|&b| b == 0) {
                            i = j;
                            continue;
                        }
                        let mut k = j;
                        while k < n && !got[k..(k + ZBLOCK).min(n)].iter().all(|&b| b == 0) {
                            k = (k + ZBLOCK).min(n);
                        }
                        f.write_at(&got[i..k], off + i as u64)?;
                        data += (k - i) as u64;
                        i = k;
                    }
                } else {
                    f.write_at(got, off)?;
                    data += n as u64;
                }
                self.moved(got);
                off += n as u64;
            }
            pos = off.max(end);
        }
        self.hole(len.saturating_sub(pos));
        // Read by extents, not as a stream: the size and mtime are checked here.
        reader.check_unchanged()?;
        f.set_len(len)?;
        self.extra(reader.file(), f.file(), reader.metadata(), creator)?;
        let mut w = self.finish(f)?;
        w.bytes = len;
        Ok((Method::Sparse, w, data))
    }

    /// Verifies if asked, and wraps up the staged file.
    #[allow(clippy::too_many_arguments)] // The parts of the report, each from a different step.
    fn staged(
        mut self,
        method: Method,
        fallback: Option<String>,
        read: Decision,
        read_backend: Option<BackendChoice>,
        block: usize,
        write: WriteReport,
        data_bytes: u64,
    ) -> Result<Staged> {
        let mut staged = Staged {
            entry: self.entry.take(),
            after_syncfs: self.after_syncfs,
            deferred: None,
            dir: self.dir.clone(),
            path: self.dst.to_path_buf(),
            sync: self.wo.durability.each_file(),
            report: CopyReport { src: self.src.to_path_buf(), method, reflink_fallback: fallback, read, read_backend, write, data_bytes, verify: None },
        };
        if let (Some(algo), Some(h)) = (self.co.verify.filter(|_| !self.stream_dst), self.hasher.take()) {
            let want = h.hex();
            if staged.after_syncfs && staged.entry.is_some() {
                // Read back after the caller's syncfs, which makes it durable, with the rest of
                // its batch (`Staged::prefetch`, then `Staged::commit`).
                staged.deferred = Some((algo, want, self.co.clone(), self.progress.cancel_flag()));
            } else {
                staged.report.verify = Some(self.verify(staged.entry.as_ref(), algo, want, block)?);
            }
        }
        self.progress.file_done();
        Ok(staged)
    }

    /// Reads the copy (`entry`, not yet named; `None`: the file written in place) back past
    /// the page cache and compares its digest with the source's.
    fn verify(&self, entry: Option<&PendingFile>, algo: Algo, want: String, block: usize) -> Result<VerifyReport> {
        let t = Instant::now();
        // A file written in place was opened through its name as given (a symlink the user named
        // is followed); the copy's own file is opened anew, its flags its own.
        let file = match entry {
            Some(e) => e.reopen(),
            None => sys::openat(&**self.dir, self.name, OFlags::RDWR | OFlags::CLOEXEC, FMode::empty()).map_err(io::Error::from).map(File::from),
        }
        .map_err(|e| Error::io("open for verify", self.dst, e))?;
        sys::fdatasync(&file, self.dst)?;
        if let Some(hook) = &self.co.before_verify {
            hook(&file, self.dst).map_err(|e| Error::io("verify hook", self.dst, e))?;
        }
        // Whatever of the copy is still cached goes first, so the read comes from the disk.
        crate::residency::evict(&file, 0, 0).map_err(|e| Error::io("evict", self.dst, e))?;
        let mut ro = ReadOptions::new(self.wo.io.budget.clone());
        ro.io.mode = self.wo.io.mode;
        ro.io.backend = self.wo.io.backend;
        ro.io.block_size = block.max(1 << 20);
        let mut back = Reader::from_file(file, self.dst, &ro)?;
        let mut h = Hasher::new(algo);
        while let Some(c) = back.next_chunk()? {
            self.interrupted()?;
            if let Some(r) = &self.co.rate {
                r.take(c.len() as u64, || self.progress.is_cancelled());
            }
            h.update(&c);
        }
        let got = h.hex();
        if got != want {
            return Err(mismatch(self.dst, algo, &got, &want));
        }
        Ok(VerifyReport { algo, digest: got, read: back.decision().clone(), seconds: t.elapsed().as_secs_f64() })
    }
}

/// Gives `dst` the access ACL of `src`, or removes one it inherited (`inherited`: it may have)
/// where `src` has none: the ACL part of GNU cp's copy of a mode. A filesystem without ACLs
/// has nothing to copy.
fn copy_acl(src: &File, dst: &File, path: &Path, inherited: bool) -> Result<()> {
    const ACL: &str = "system.posix_acl_access";
    match sys::xattr_get(sys::XattrAt::Fd(src.as_fd()), ACL) {
        Ok(v) if !v.is_empty() => match sys::xattr_set(sys::XattrAt::Fd(dst.as_fd()), ACL, &v) {
            Ok(()) | Err(sys::Errno::OPNOTSUPP) => Ok(()),
            Err(e) => Err(Error::io("preserving permissions for {}", path, e.into())),
        },
        Ok(_) | Err(sys::Errno::NODATA | sys::Errno::OPNOTSUPP) if inherited => match sys::xattr_remove(sys::XattrAt::Fd(dst.as_fd()), ACL) {
            Ok(()) | Err(sys::Errno::NODATA | sys::Errno::OPNOTSUPP) => Ok(()),
            Err(e) => Err(Error::io("preserving permissions for {}", path, e.into())),
        },
        Ok(_) | Err(sys::Errno::NODATA | sys::Errno::OPNOTSUPP) => Ok(()),
        Err(e) => Err(Error::io("getxattr", path, e.into())),
    }
}

/// The error of a copy whose digest read back from the disk (`got`) is not the source's.
fn mismatch(path: &Path, algo: Algo, got: &str, want: &str) -> Error {
    Error::new(ErrorKind::Io, "verify", path, format!("{algo} of the copy read back from the disk is {got}, the source's was {want}; the copy was removed"))
}

/// lseek(SEEK_DATA) from `pos` (Linux 3.1+): the next data offset, `None` past the last data.
/// A filesystem without it (EINVAL) reports the whole file as data, as the kernel's default does.
fn data_at(f: &File, pos: u64) -> io::Result<Option<u64>> {
    match sys::seek(f, sys::SeekFrom::Data(pos)) {
        Ok(o) => Ok(Some(o)),
        Err(sys::Errno::NXIO) => Ok(None),
        Err(sys::Errno::INVAL) => Ok(Some(pos)),
        Err(e) => Err(e.into()),
    }
}

/// lseek(SEEK_HOLE) from `pos` (Linux 3.1+): the next hole (the end of the file if none).
fn hole_at(f: &File, pos: u64) -> io::Result<u64> {
    match sys::seek(f, sys::SeekFrom::Hole(pos)) {
        Ok(o) => Ok(o),
        Err(sys::Errno::INVAL | sys::Errno::NXIO) => Ok(u64::MAX),
        Err(e) => Err(e.into()),
    }
}

/// Copies every extended attribute of `src` to `dst` (POSIX ACLs are the `system.posix_acl_*`
/// ones). Attributes the destination's filesystem does not take (EOPNOTSUPP) or this user may
/// not set (EPERM: `trusted.*`, `security.*` without privilege) are left out, as GNU cp -a does.
pub fn copy_xattrs(src: impl AsFd, dst: impl AsFd, path: &Path) -> Result<()> {
    copy_xattrs_to(src, dst, path, true)
}

/// [`copy_xattrs`]; `inherited`: `dst` may have inherited an ACL from its directory's default
/// ACL (else it is not looked for).
fn copy_xattrs_to(src: impl AsFd, dst: impl AsFd, path: &Path, inherited: bool) -> Result<()> {
    copy_xattrs_filtered(src, dst, path, inherited, |_| true)
}

/// [`copy_xattrs_to`] of the attributes whose names `keep` takes.
fn copy_xattrs_filtered(src: impl AsFd, dst: impl AsFd, path: &Path, inherited: bool, keep: impl Fn(&[u8]) -> bool) -> Result<()> {
    let (src, dst) = (src.as_fd(), dst.as_fd());
    let list = match sys::xattr_names(sys::XattrAt::Fd(src.as_fd())) {
        Ok(l) => l,
        Err(sys::Errno::OPNOTSUPP) => return Ok(()),
        Err(e) => return Err(Error::io("listxattr", path, e.into())),
    };
    for name in list.split(|&b| b == 0).filter(|n| !n.is_empty() && keep(n)) {
        let name = <OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name);
        let value = match sys::xattr_get(sys::XattrAt::Fd(src.as_fd()), name) {
            Ok(v) => v,
            // Removed since it was listed.
            Err(sys::Errno::NODATA) => continue,
            Err(e) => return Err(Error::io("getxattr", path, e.into())),
        };
        match sys::xattr_set(sys::XattrAt::Fd(dst.as_fd()), name, &value) {
            Ok(()) | Err(sys::Errno::OPNOTSUPP | sys::Errno::PERM) => {}
            Err(e) => return Err(Error::io("setxattr", path, e.into()).with_note(format!("attribute {}", name.to_string_lossy()))),
        }
    }
    // An ACL the destination inherited from its directory's default ACL, which the source does
    // not have, goes: the copy gets the source's ACL exactly, as with GNU cp -a. The
    // destination's list says whether it has one (one call, where removing each would be two).
    let acls = [&b"system.posix_acl_access"[..], b"system.posix_acl_default"];
    let has = |l: &[u8], acl: &[u8]| l.split(|&b| b == 0).any(|n| n == acl);
    if !inherited || acls.iter().all(|acl| has(&list, acl)) {
        return Ok(());
    }
    let inherited = match sys::xattr_names(sys::XattrAt::Fd(dst.as_fd())) {
        Ok(l) => l,
        Err(sys::Errno::OPNOTSUPP) => return Ok(()),
        Err(e) => return Err(Error::io("listxattr", path, e.into())),
    };
    for acl in acls {
        if has(&list, acl) || !has(&inherited, acl) {
            continue;
        }
        let name = <OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(acl);
        match sys::xattr_remove(sys::XattrAt::Fd(dst.as_fd()), name) {
            Ok(()) | Err(sys::Errno::NODATA | sys::Errno::OPNOTSUPP) => {}
            Err(e) => return Err(Error::io("removexattr", path, e.into()).with_note(format!("attribute {}", name.to_string_lossy()))),
        }
    }
    Ok(())
}
