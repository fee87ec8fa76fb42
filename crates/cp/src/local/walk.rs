//! The walk of a tree copy, on the caller's thread: GNU cp's decisions for each source, in
//! GNU's order (what to follow, what an existing destination means, backups, refusals), every
//! namespace operation (directories, symlinks, links, special files), and each regular file
//! handed to the pool with what the walk learnt of its destination. Hard links and the
//! directories' attributes are set once the files are in place.
//!
//! Where GNU cp would write through a symlink found inside a destination tree (one the user did
//! not name), the copy replaces the symlink instead, as GNU cp's `--remove-destination` does:
//! nothing is written outside the destination through a link the copy did not make.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cacheless::sys::{AtFlags, DirFd, FMode, OFlags, Stat};

use super::files::{kind, Copier, FileJob, Jobs, JOB_FILES};
use crate::options::CpOptions;
use crate::options::{Deref, Existing, Link, Note, Question};
use cacheless::backup::BackupKind;
use cacheless::copy_xattrs;
use cacheless::pool::Pool;
use cacheless::quote::quote;
use cacheless::sys::{self, default_acl};
use cacheless::{Error, ErrorKind};

fn is_dir(mode: u32) -> bool {
    kind(mode) == sys::consts::S_IFDIR
}
fn is_lnk(mode: u32) -> bool {
    kind(mode) == sys::consts::S_IFLNK
}
fn is_reg(mode: u32) -> bool {
    kind(mode) == sys::consts::S_IFREG
}

/// An entry of the destination: its directory (open, when the walk holds it) and name there,
/// or a path relative to the working directory; and its path for messages.
#[derive(Clone, Copy)]
pub(super) struct At<'a> {
    pub dir: Option<&'a Arc<OwnedFd>>,
    pub name: &'a OsStr,
    pub path: &'a Path,
    /// `dir` is a folder the copy made and has no default ACL (see `CopyOptions::plain_dir`).
    pub plain: bool,
}

impl<'a> At<'a> {
    /// A path relative to the working directory.
    pub fn path(p: &'a Path) -> At<'a> {
        At { dir: None, name: p.as_os_str(), path: p, plain: false }
    }
    fn fd(&self) -> BorrowedFd<'_> {
        match self.dir {
            Some(d) => d.as_fd(),
            None => sys::CWD,
        }
    }
    /// The folder `name` is resolved in, as a capability: the tree copy's resolution policy is
    /// its folders' handles, opened as the walk descends (the command line's operands from the
    /// working directory, followed as GNU cp follows them).
    fn dir(&self) -> DirFd<'_> {
        self.fd().into()
    }
    fn stat(&self, follow: bool) -> io::Result<Stat> {
        let flags = if follow { AtFlags::empty() } else { AtFlags::SYMLINK_NOFOLLOW };
        sys::statat(self.fd(), self.name, flags).map_err(io::Error::from)
    }
    /// The directory holding the entry, open (for a worker's creation in it), and the entry's
    /// name in it.
    fn parent(&self) -> io::Result<(Arc<OwnedFd>, OsString)> {
        let raw = self.name.as_bytes();
        let end = raw.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
        let (dir_part, base) = match raw[..end].iter().rposition(|&b| b == b'/') {
            Some(i) => (&raw[..=i], &raw[i + 1..end]),
            None => (&b""[..], &raw[..end]),
        };
        let base = OsStr::from_bytes(base).to_os_string();
        match (self.dir, dir_part.is_empty()) {
            (Some(d), true) => Ok((d.clone(), base)),
            (d, _) => {
                let at = d.map_or(sys::CWD, |d| d.as_fd());
                let p = if dir_part.is_empty() { OsStr::new(".") } else { OsStr::from_bytes(dir_part) };
                // Search access is enough where the user may not read the directory.
                let fd = match sys::openat(at, p, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, FMode::empty()).map_err(io::Error::from) {
                    Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                        sys::openat(at, p, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, FMode::empty()).map_err(io::Error::from)?
                    }
                    r => r?,
                };
                Ok((Arc::new(fd), base))
            }
        }
    }
}

/// The last component of `p` as GNU names it (trailing slashes dropped; `..` becomes `.`, so
/// that `cp -R src/.. dst` copies into `dst` itself).
pub(super) fn last_component(p: &Path) -> OsString {
    let raw = p.as_os_str().as_bytes();
    let end = raw.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
    let start = raw[..end].iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
    let base = &raw[start..end];
    OsStr::from_bytes(if base == b".." { b"." } else { base }).to_os_string()
}

/// `dir` + `/` + `name` as GNU joins them (no second slash after one that ends `dir`).
pub(super) fn concat(dir: &Path, name: &OsStr) -> PathBuf {
    let mut s = dir.as_os_str().to_os_string();
    if !s.as_bytes().ends_with(b"/") && !s.is_empty() {
        s.push("/");
    }
    s.push(name);
    PathBuf::from(s)
}

/// Whether `a` (relative to the working directory) and `b` (in `at`) are one directory entry:
/// the same name in the same directory.
fn same_name(a: &Path, b: At<'_>) -> bool {
    let (ab, bb) = (last_component(a), last_component(Path::new(b.name)));
    if ab != bb {
        return false;
    }
    let parent = |p: &Path| -> PathBuf {
        match p.parent() {
            Some(q) if !q.as_os_str().is_empty() => q.to_path_buf(),
            _ => PathBuf::from("."),
        }
    };
    let pa = sys::stat(&parent(a));
    let pb = sys::statat(b.fd(), &parent(Path::new(b.name)), AtFlags::empty());
    matches!((pa, pb), (Ok(x), Ok(y)) if x.st_dev == y.st_dev && x.st_ino == y.st_ino)
}

/// The attributes of a source directory its copy gets.
pub(super) struct DirAttrs {
    mode: u32,
    uid: u32,
    gid: u32,
    atime: (i64, i64),
    mtime: (i64, i64),
}

impl DirAttrs {
    fn of(m: &std::fs::Metadata) -> DirAttrs {
        DirAttrs { mode: m.mode(), uid: m.uid(), gid: m.gid(), atime: (m.atime(), m.atime_nsec()), mtime: (m.mtime(), m.mtime_nsec()) }
    }
    fn times(&self) -> sys::Timestamps {
        sys::timestamps(Some(self.atime), Some(self.mtime))
    }
}

/// Directory descriptors held for the attributes set at the end, at most: past that, a
/// directory is opened again by its name then (one descriptor per directory of a large tree
/// would pass the open-files limit).
const HELD_DIRS: usize = 256;

/// A directory whose attributes are set once its contents are done.
pub(super) struct DirMeta {
    /// The source, where its extended attributes are copied.
    src: Option<PathBuf>,
    dst: PathBuf,
    /// The copy, open (while few are held; else opened again by `dst`).
    fd: Option<Arc<OwnedFd>>,
    meta: DirAttrs,
    /// The copy made it.
    new: bool,
    /// Its mode when made, to put back (with the bits left out at its creation) where the
    /// copy had to make it searchable and writable to fill it.
    restore: Option<u32>,
    /// Permission bits left out when it was made (they are added back at the end).
    omitted: u32,
    /// Set-group-ID when the copy came to it: the bit stays, as GNU cp keeps it.
    keep_sgid: bool,
}

/// A hard link to make once its first copy is in place.
pub(super) struct PendingLink {
    /// The first copy.
    pub first: PathBuf,
    /// The new link.
    pub dst: PathBuf,
}

/// What copying one entry came to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Ok,
    Failed,
    /// A directory was found to hold its own copy: its walk stops.
    IntoSelf,
}

/// The walk on the caller's thread.
pub(super) struct Walker<'a> {
    pub o: &'a CpOptions,
    pub deref: Deref,
    pub copier: Arc<Copier>,
    /// The workers, started when the first file is handed to them (a copy of directories and
    /// links needs none).
    pub pool: Option<Pool<Copier>>,
    /// The pool's threads and queue places.
    pub pool_size: (usize, usize),
    /// Files waiting to be handed to a worker together (see [`Jobs`]).
    pub queued: Jobs,
    pub dirs: Vec<DirMeta>,
    /// First destination of each source copied whose other names must become hard links, and
    /// of each directory named on the command line or made first for one (by device and inode):
    /// GNU's record of what was copied where.
    pub copied: HashMap<(u64, u64), PathBuf>,
    pub pending_links: Vec<PendingLink>,
    /// Sources named on the command line (when there are several), by device and inode with
    /// their names, to warn of one directory entry named twice.
    pub src_seen: Option<HashMap<(u64, u64), Vec<PathBuf>>>,
    /// Destinations made for command-line sources (when there are several): never written
    /// again, nor through. Each with the device and inode of what was made (`None`: a file its
    /// worker may still be copying).
    pub dest_seen: Option<HashMap<PathBuf, Option<(u64, u64)>>>,
    pub skipped: u64,
    pub hardlinks: u64,
    /// The command-line source and destination being copied, for messages.
    pub top: (PathBuf, PathBuf),
    pub umask: u32,
    /// The user may change owners (root).
    pub root: bool,
    /// `--parents`: the directories leading to the current source (their name under the
    /// target, their source's status, the mode to put back), for their attributes once it is
    /// copied.
    pub parent_attrs: Vec<(OsString, std::fs::Metadata, Option<u32>)>,
    /// `--parents`: those of each source, with the target they are under, set at the end.
    #[allow(clippy::type_complexity)] // The target, its descriptor, and the list above.
    pub reprotect_later: Vec<(PathBuf, Arc<OwnedFd>, Vec<(OsString, std::fs::Metadata, Option<u32>)>)>,
    /// Files handed to the workers so far.
    pub dispatched: u64,
    /// Directories in `dirs` holding their descriptor.
    pub held: usize,
}

impl Walker<'_> {
    fn fail(&self, e: Error) -> Outcome {
        self.copier.sink.fail(e);
        Outcome::Failed
    }

    fn message(&self, kind: ErrorKind, path: &Path, text: String) -> Outcome {
        self.fail(Error::message(kind, path, text))
    }

    fn warn(&self, text: String) {
        self.o.note(&Note::Warning(text));
    }

    fn follows(&self, cmdline: bool) -> bool {
        self.deref == Deref::Always || (self.deref == Deref::CommandLine && cmdline)
    }

    /// Copies one command-line source `src` to `at`; `nonexistent`: 1 when `at` is known not to
    /// exist, -1 when it does not exist unless as a dangling symlink, 0 when unknown.
    pub fn top(&mut self, src: &Path, at: At<'_>, nonexistent: i8) -> bool {
        self.top = (src.to_path_buf(), at.path.to_path_buf());
        let mut first_dir = false;
        let mut ancestors = Vec::new();
        self.copy(src, at, nonexistent, None, &mut ancestors, true, &mut first_dir) == Outcome::Ok
    }

    /// GNU's `copy_internal`: copies `src` (any type) to `at`. Failures are reported through
    /// the sink as they happen.
    #[allow(clippy::too_many_arguments)] // GNU's walk state, one argument each.
    fn copy(
        &mut self,
        src: &Path,
        at: At<'_>,
        nonexistent: i8,
        parent: Option<&std::fs::Metadata>,
        ancestors: &mut Vec<(u64, u64)>,
        cmdline: bool,
        first_dir: &mut bool,
    ) -> Outcome {
        if self.copier.sink.progress.is_cancelled() {
            return Outcome::Failed;
        }
        let o = self.o;
        let dst = at.path;
        let stat = if self.follows(cmdline) { std::fs::metadata(src) } else { std::fs::symlink_metadata(src) };
        let meta = match stat {
            Ok(m) => m,
            Err(e) => return self.fail(Error::io("cannot stat {}", src, e)),
        };
        let mode = meta.mode();
        if is_dir(mode) && !o.recursive {
            return self.message(ErrorKind::InvalidInput, src, format!("-r not specified; omitting directory {}", quote(src)));
        }
        if cmdline {
            if let Some(seen) = &mut self.src_seen {
                let key = (meta.dev(), meta.ino());
                let names = seen.entry(key).or_default();
                if !is_dir(mode) && o.backup.is_none() && names.iter().any(|n| same_name(src, At::path(n))) {
                    self.warn(format!("warning: source file {} specified more than once", quote(src)));
                    return Outcome::Ok;
                }
                names.push(src.to_path_buf());
            }
        }

        let mut new_dst = nonexistent > 0;
        let mut dst_st: Option<Stat> = None;
        let mut have_lstat = false;
        let mut backup: Option<PathBuf> = None;
        // Replace a symlink found in a destination tree rather than write through it.
        let mut replace_link = false;
        // An existing symlink inside the destination tree that a regular file is written through.
        let mut through_link = false;
        if nonexistent <= 0 {
            let use_lstat = (!is_reg(mode) && (!o.copy_as_regular() || is_dir(mode) || is_lnk(mode)))
                || o.link != Link::Copy
                || o.backup.is_some()
                || o.remove_destination
                || !cmdline;
            if !use_lstat && nonexistent < 0 {
                new_dst = true;
            } else {
                match at.stat(!use_lstat) {
                    Ok(st) => {
                        have_lstat = use_lstat;
                        dst_st = Some(st);
                    }
                    Err(e) if e.raw_os_error() == Some(sys::consts::ELOOP) && o.force => {}
                    Err(e) if e.raw_os_error() == Some(sys::consts::ENOENT) => new_dst = true,
                    Err(e) => return self.fail(Error::io("cannot stat {}", dst, e)),
                }
            }
            // A file being made for an earlier command-line source counts as there already.
            let just_made = cmdline && !is_dir(mode) && self.dest_seen.as_ref().is_some_and(|s| s.get(dst) == Some(&None));
            if just_made && dst_st.is_none() {
                if o.no_clobber() {
                    self.skipped += 1;
                    return Outcome::Ok;
                }
                let numbered = matches!(o.backup, Some((BackupKind::Numbered, _)));
                if !numbered {
                    return self.message(ErrorKind::AlreadyExists, dst, format!("will not overwrite just-created {} with {}", quote(dst), quote(src)));
                }
            }
            if let Some(d) = dst_st {
                if !matches!(o.existing, Existing::Keep) {
                    match self.same_file_ok(src, &meta, at, &d) {
                        Some(true) => {}
                        Some(false) => return Outcome::Ok,
                        None => return self.message(ErrorKind::SameFile, dst, format!("{} and {} are the same file", quote(src), quote(dst))),
                    }
                }
                if o.update && !is_dir(mode) && (d.st_mtime, i64::try_from(d.st_mtime_nsec).unwrap_or(0)) >= (meta.mtime(), meta.mtime_nsec()) {
                    self.skipped += 1;
                    self.link_known(&meta, dst);
                    return Outcome::Ok;
                }
                if !is_dir(mode) {
                    match &o.existing {
                        Existing::Keep => {
                            self.skipped += 1;
                            return Outcome::Ok;
                        }
                        Existing::Ask(ask) => {
                            let unwritable =
                                !is_lnk(d.st_mode) && !self.root && sys::accessat(at.fd(), at.name, sys::Access::WRITE_OK, AtFlags::EACCESS).is_err();
                            let q = Question { dst, unwritable_mode: unwritable.then_some(d.st_mode & 0o7777), replace: o.force || o.remove_destination };
                            if !ask(&q) {
                                self.skipped += 1;
                                return Outcome::Ok;
                            }
                        }
                        Existing::Replace => {}
                    }
                }
                if !is_dir(d.st_mode) {
                    if is_dir(mode) {
                        return self.message(
                            ErrorKind::AlreadyExists,
                            dst,
                            format!("cannot overwrite non-directory {} with directory {}", quote(dst), quote(src)),
                        );
                    }
                    let numbered = matches!(o.backup, Some((BackupKind::Numbered, _)));
                    let seen = self.dest_seen.as_ref().and_then(|s| s.get(dst)).is_some_and(|k| k.is_none_or(|k| k == (d.st_dev, d.st_ino)));
                    if cmdline && !numbered && seen {
                        return self.message(ErrorKind::AlreadyExists, dst, format!("will not overwrite just-created {} with {}", quote(dst), quote(src)));
                    }
                }
                if !is_dir(mode) && is_dir(d.st_mode) {
                    return self.message(ErrorKind::AlreadyExists, dst, format!("cannot overwrite directory {} with non-directory", quote(dst)));
                }
                let base = last_component(src);
                if let Some((bk, suffix)) = o.backup.as_ref().filter(|_| base != "." && base != ".." && !is_dir(d.st_mode)) {
                    if *bk != BackupKind::Numbered && source_is_backup(&base, &meta, at, suffix) {
                        return self.message(
                            ErrorKind::InvalidInput,
                            dst,
                            format!("backing up {} might destroy source;  {} not copied", quote(dst), quote(src)),
                        );
                    }
                    match make_backup(at, *bk, suffix) {
                        Ok(b) => backup = Some(b),
                        Err(e) if e.raw_os_error() == Some(sys::consts::ENOENT) => {}
                        Err(e) => return self.fail(Error::io("cannot backup {}", dst, e)),
                    }
                    new_dst = true;
                } else if !is_dir(d.st_mode)
                    && (o.remove_destination || (o.data() && ((o.preserve.links && d.st_nlink > 1) || (self.deref == Deref::Never && !is_reg(mode)))))
                {
                    // GNU removes it here. The copy replaces it instead when it is made (a file
                    // or link made under a temporary name and renamed over it): the same end,
                    // and a failure leaves what was there.
                    replace_link = true;
                    new_dst = true;
                    o.note(&Note::Removed(dst));
                } else if !cmdline && is_lnk(d.st_mode) && !is_dir(mode) {
                    // A symlink inside the destination tree. One this copy made is never
                    // written through (GNU's guard). A regular file's data goes where an older
                    // one points, as GNU cp writes it (opened, emptied, written; a dangling one
                    // is refused at the open); anything else replaces it.
                    if self.dest_seen.as_ref().and_then(|s| s.get(dst)).is_some_and(|k| k.is_some_and(|k| k == (d.st_dev, d.st_ino))) {
                        return self.message(ErrorKind::InvalidInput, dst, format!("will not copy {} through just-created symlink {}", quote(src), quote(dst)));
                    }
                    if (is_reg(mode) || (o.copy_as_regular() && !is_lnk(mode))) && o.link == Link::Copy {
                        through_link = true;
                    } else {
                        replace_link = true;
                        new_dst = true;
                    }
                }
            }
        }

        // Never copy through a symlink made by this copy.
        if cmdline && o.backup.is_none() {
            if let Some(seen) = &self.dest_seen {
                let l = if have_lstat { dst_st } else { at.stat(false).ok() };
                if l.is_some_and(|l| is_lnk(l.st_mode) && seen.get(dst) == Some(&Some((l.st_dev, l.st_ino)))) {
                    return self.message(ErrorKind::InvalidInput, dst, format!("will not copy {} through just-created symlink {}", quote(src), quote(dst)));
                }
            }
        }

        if !is_dir(mode) {
            o.note(&Note::Copy { src, dst, backup: backup.as_deref() });
        }

        // What was copied where: the other names of a multiply-linked file become hard links to
        // its first copy; a directory met twice is a copy into itself, or named twice.
        let key = (meta.dev(), meta.ino());
        let earlier = if o.recursive && is_dir(mode) {
            if cmdline {
                self.remember(key, dst)
            } else {
                self.copied.get(&key).cloned()
            }
        } else if o.preserve.links && o.link != Link::Hard && (meta.nlink() > 1 || (cmdline && self.deref == Deref::CommandLine) || self.deref == Deref::Always)
        {
            self.remember(key, dst)
        } else {
            None
        };
        let had_earlier = earlier.is_some();
        if let Some(first) = earlier {
            if is_dir(mode) {
                if same_name(src, At::path(&first)) {
                    let (s, d) = (quote(&self.top.0), quote(&self.top.1));
                    self.message(ErrorKind::InvalidInput, dst, format!("cannot copy a directory, {s}, into itself, {d}"));
                    return Outcome::IntoSelf;
                }
                if same_name(&first, at) {
                    self.warn(format!("warning: source directory {} specified more than once", quote(&self.top.0)));
                    return Outcome::Ok;
                }
                if !self.follows(cmdline) {
                    return self.message(ErrorKind::InvalidInput, dst, format!("will not create hard link {} to directory {}", quote(dst), quote(&first)));
                }
            } else {
                self.pending_links.push(PendingLink { first, dst: dst.to_path_buf() });
                return Outcome::Ok;
            }
        }

        let dst_mode_bits = mode & 0o7777;
        let omitted = dst_mode_bits
            & if o.preserve.ownership {
                0o077
            } else if is_dir(mode) {
                0o022
            } else {
                0
            };

        let r = if is_dir(mode) {
            self.dir(src, at, meta, new_dst || dst_st.is_none_or(|d| !is_dir(d.st_mode)), omitted, parent, ancestors, first_dir)
        } else if o.link == Link::Symbolic {
            self.symbolic(src, at, replace_link || o.force)
        } else if o.link == Link::Hard {
            self.hard(src, at, cmdline, o.force || matches!(o.existing, Existing::Ask(_)) || replace_link)
        } else if is_reg(mode) || (o.copy_as_regular() && !is_lnk(mode)) {
            self.file(src, at, meta, new_dst, cmdline, backup.clone(), replace_link, through_link)
        } else if kind(mode) == sys::consts::S_IFIFO
            || kind(mode) == sys::consts::S_IFBLK
            || kind(mode) == sys::consts::S_IFCHR
            || kind(mode) == sys::consts::S_IFSOCK
        {
            self.special(src, at, &meta, omitted, new_dst, replace_link)
        } else if is_lnk(mode) {
            self.symlink(src, at, &meta, dst_st.filter(|_| !new_dst), replace_link || o.force)
        } else {
            self.message(ErrorKind::InvalidInput, src, format!("{} has unknown file type", quote(src)))
        };
        if r == Outcome::Ok && !cmdline && is_lnk(mode) {
            // A link made inside the tree, where several sources may meet: never written
            // through by a later one.
            if let Some(seen) = &mut self.dest_seen {
                seen.insert(dst.to_path_buf(), at.stat(false).ok().map(|l| (l.st_dev, l.st_ino)));
            }
        }
        if r == Outcome::Ok && cmdline && !is_dir(mode) {
            if let Some(seen) = &mut self.dest_seen {
                // A regular file's copy may still be in flight: it counts by its name.
                let made = if (is_reg(mode) || (o.copy_as_regular() && !is_lnk(mode))) && o.link == Link::Copy {
                    None
                } else {
                    at.stat(false).ok().map(|l| (l.st_dev, l.st_ino))
                };
                seen.insert(dst.to_path_buf(), made);
            }
        }
        if r != Outcome::Ok {
            if r == Outcome::Failed && !had_earlier {
                self.copied.remove(&key);
            }
            if let Some(b) = &backup {
                self.unbackup(b, at);
            }
        }
        r
    }

    /// Records that `key` was copied to `dst`; returns where it went first if it was already.
    fn remember(&mut self, key: (u64, u64), dst: &Path) -> Option<PathBuf> {
        match self.copied.get(&key) {
            Some(p) => Some(p.clone()),
            None => {
                self.copied.insert(key, dst.to_path_buf());
                None
            }
        }
    }

    /// `-u` skipped a file: if another name of it was copied already, this name becomes a hard
    /// link to that copy (GNU's `--update` with `--preserve=links`).
    fn link_known(&mut self, meta: &std::fs::Metadata, dst: &Path) {
        if !self.o.preserve.links || self.o.link == Link::Hard {
            return;
        }
        if let Some(first) = self.remember((meta.dev(), meta.ino()), dst) {
            self.pending_links.push(PendingLink { first, dst: dst.to_path_buf() });
        }
    }

    /// GNU's `same_file_ok`: `Some(true)` to go on, `Some(false)` when there is nothing to do
    /// (a hard link onto itself), `None` when source and destination are the same file.
    fn same_file_ok(&self, src: &Path, s: &std::fs::Metadata, at: At<'_>, d: &Stat) -> Option<bool> {
        let o = self.o;
        let same = s.dev() == d.st_dev && s.ino() == d.st_ino;
        let hard = o.link == Link::Hard;
        if same && hard {
            return Some(false);
        }
        let (sl, dl): (std::fs::Metadata, Stat);
        let (src_l, dst_l): (&std::fs::Metadata, &Stat);
        let same_link;
        if self.deref == Deref::Never {
            same_link = same;
            if is_lnk(s.mode()) && is_lnk(d.st_mode) {
                let sn = same_name(src, at);
                if !sn {
                    if o.backup.is_some() {
                        return Some(true);
                    }
                    if same_link {
                        return Some(false);
                    }
                }
                return if sn { None } else { Some(true) };
            }
            src_l = s;
            dst_l = d;
        } else {
            if !same {
                return Some(true);
            }
            match (at.stat(false), std::fs::symlink_metadata(src)) {
                (Ok(a), Ok(b)) => {
                    dl = a;
                    sl = b;
                }
                _ => return Some(true),
            }
            src_l = &sl;
            dst_l = &dl;
            same_link = src_l.dev() == dst_l.st_dev && src_l.ino() == dst_l.st_ino;
            if is_lnk(src_l.mode()) && is_lnk(dst_l.st_mode) && o.remove_destination {
                return Some(true);
            }
        }
        if o.backup.is_some() {
            if !same_link {
                if self.deref != Deref::Never && is_lnk(src_l.mode()) && !is_lnk(dst_l.st_mode) {
                    return None;
                }
                return Some(true);
            }
            return if same_name(src, at) { None } else { Some(true) };
        }
        if o.remove_destination {
            if is_lnk(dst_l.st_mode) {
                return Some(true);
            }
            if same_link && dst_l.st_nlink > 1 && !same_name(src, at) {
                return Some(true);
            }
        }
        if !is_lnk(src_l.mode()) && !is_lnk(dst_l.st_mode) {
            if !(src_l.dev() == dst_l.st_dev && src_l.ino() == dst_l.st_ino) {
                return Some(true);
            }
            if hard {
                return Some(false);
            }
        }
        if o.link == Link::Symbolic && is_lnk(dst_l.st_mode) {
            return Some(true);
        }
        if self.deref == Deref::Never {
            let ts = if !is_lnk(src_l.mode()) {
                (src_l.dev(), src_l.ino())
            } else {
                match std::fs::metadata(src) {
                    Ok(m) => (m.dev(), m.ino()),
                    Err(_) => return Some(true),
                }
            };
            let td = if !is_lnk(dst_l.st_mode) {
                (dst_l.st_dev, dst_l.st_ino)
            } else {
                match at.stat(true) {
                    Ok(m) => (m.st_dev, m.st_ino),
                    Err(_) => return Some(true),
                }
            };
            if ts != td {
                return Some(true);
            }
            if hard {
                return Some(is_lnk(dst_l.st_mode));
            }
        }
        None
    }

    fn unbackup(&self, backup: &Path, at: At<'_>) {
        let bname = last_component(backup);
        let from = match at.name.as_bytes().iter().rposition(|&b| b == b'/') {
            Some(i) => {
                let mut p = OsStr::from_bytes(&at.name.as_bytes()[..=i]).to_os_string();
                p.push(&bname);
                p
            }
            None => bname,
        };
        match at.dir().rename(from.as_os_str(), at.dir(), at.name) {
            Ok(()) => self.o.note(&Note::Unbackup { backup, dst: at.path }),
            Err(e) => self.copier.sink.fail(Error::io("cannot un-backup {}", at.path, e.into())),
        }
    }

    /// A regular file (or a special file read as one): handed to a worker.
    #[allow(clippy::too_many_arguments)] // One file's facts as the walk found them.
    fn file(
        &mut self,
        src: &Path,
        at: At<'_>,
        meta: std::fs::Metadata,
        new_dst: bool,
        cmdline: bool,
        backup: Option<PathBuf>,
        replace_link: bool,
        through_link: bool,
    ) -> Outcome {
        let dst = at.path;
        // A new file named with a trailing slash cannot be made (GNU: "Not a directory").
        if new_dst && at.name.as_bytes().ends_with(b"/") {
            return self.fail(Error::io("cannot create regular file {}", dst, io::Error::from_raw_os_error(sys::consts::ENOTDIR)));
        }
        // A command-line destination that is a dangling symlink is not written through.
        let mut at_name = None;
        if new_dst && cmdline && !replace_link && backup.is_none() {
            if let Ok(l) = at.stat(false) {
                if is_lnk(l.st_mode) {
                    if !self.o.open_dangling {
                        return self.message(ErrorKind::NotFound, dst, format!("not writing through dangling symlink {}", quote(dst)));
                    }
                    // POSIXLY_CORRECT: the file the link names is created.
                    match std::fs::read_link(at_path_full(at)) {
                        Ok(t) => at_name = Some(t),
                        Err(e) => return self.fail(Error::io("cannot create regular file {}", dst, e)),
                    }
                }
            }
        }
        let (dir, name, plain) = match (at.dir, at_name.as_ref()) {
            (Some(d), None) if !at.name.as_bytes().contains(&b'/') => (d.clone(), at.name.to_os_string(), at.plain),
            _ => {
                let target;
                let a = match &at_name {
                    Some(t) => {
                        target = resolve_link_target(at, t);
                        At::path(&target)
                    }
                    None => at,
                };
                match a.parent() {
                    Ok((d, n)) => (d, n, false),
                    Err(e) => return self.fail(Error::io("cannot create regular file {}", dst, e)),
                }
            }
        };
        self.dispatched += 1;
        self.queued.push(FileJob {
            src: src.to_path_buf(),
            dst: dst.to_path_buf(),
            dir,
            name,
            meta,
            plain,
            new: new_dst,
            follow_dst: cmdline || through_link,
            backup,
        });
        if self.queued.len() >= JOB_FILES {
            self.send_queued();
        }
        Outcome::Ok
    }

    /// Hands the files queued to a worker (at the end of each directory, and of the walk).
    pub fn send_queued(&mut self) {
        if self.queued.is_empty() {
            return;
        }
        let jobs = std::mem::take(&mut self.queued);
        if self.pool.is_none() {
            match Pool::new(self.pool_size.0, self.pool_size.1, &self.copier) {
                Ok(p) => self.pool = Some(p),
                Err(e) => {
                    // Dropping the jobs drops nothing made yet: each file is made by its worker.
                    for j in &jobs {
                        self.copier.sink.fail(Error::io("copy", &j.dst, io::Error::other(e.to_string())));
                    }
                    return;
                }
            }
        }
        if let Some(p) = &self.pool {
            p.send(jobs);
        }
    }

    /// Makes an entry at `at` with `make(dir, name)`, a call of the `sys` facade (its own fault
    /// site, EINTR retried). Where `replace` and a name is there already, the entry is made under a temporary name and renamed over it (so that a failure
    /// leaves what was there); returns whether a name was replaced.
    fn make(&self, at: At<'_>, replace: bool, make: impl Fn(BorrowedFd<'_>, &OsStr) -> sys::KResult<()>) -> io::Result<bool> {
        match make(at.fd(), at.name).map_err(io::Error::from) {
            Err(e) if replace && e.kind() == io::ErrorKind::AlreadyExists => {}
            r => return r.map(|()| false),
        }
        let (dir, name) = at.parent()?;
        let ((), tmp, _claim) = sys::beside(dir.as_fd(), &name, |d, t| make(d, t).map_err(io::Error::from))?;
        let dir = DirFd::of(&dir);
        let r = dir.rename(tmp.as_os_str(), dir, name.as_os_str()).map_err(io::Error::from);
        // After a failure, and after a rename onto another name of the same file (which renames
        // nothing and succeeds), the temporary name is still there.
        let _ = dir.unlink(tmp.as_os_str());
        r.map(|()| true)
    }

    /// `-s`: a symbolic link to the source, named as given.
    fn symbolic(&mut self, src: &Path, at: At<'_>, replace: bool) -> Outcome {
        let dst = at.path;
        if !src.as_os_str().as_bytes().starts_with(b"/") {
            // A relative link works only from the current directory.
            let parent = match Path::new(at.name).parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            let here = at.dir.is_none() && parent == Path::new(".");
            let same = match (sys::stat("."), sys::statat(at.fd(), &parent, AtFlags::empty())) {
                (Ok(a), Ok(b)) => a.st_dev == b.st_dev && a.st_ino == b.st_ino,
                _ => true,
            };
            if !here && !same {
                let name = dst.to_string_lossy();
                return self.message(ErrorKind::InvalidInput, dst, format!("{name}: can make relative symbolic links only in current directory"));
            }
        }
        match self.make(at, replace, |d, n| DirFd::from(d).symlink(src, n)) {
            Ok(_) => self.made(),
            Err(e) => self.fail(Error::io(format!("cannot create symbolic link {{}} to {}", quote(src)), dst, e)),
        }
    }

    /// `-l`: a hard link to the source.
    fn hard(&mut self, src: &Path, at: At<'_>, cmdline: bool, replace: bool) -> Outcome {
        let follow = if self.follows(cmdline) { AtFlags::SYMLINK_FOLLOW } else { AtFlags::empty() };
        match self.make(at, replace, |d, n| sys::linkat(sys::CWD, src, d, n, follow)) {
            Ok(_) => {
                self.hardlinks += 1;
                self.made()
            }
            Err(e) => self.fail(Error::io(format!("cannot create hard link {{}} to {}", quote(src)), at.path, e)),
        }
    }

    /// An entry made in the namespace (not synced here: the final syncfs makes it durable).
    fn made(&mut self) -> Outcome {
        self.copier.unsynced.store(true, std::sync::atomic::Ordering::Relaxed);
        self.copier.sink.progress.file_done();
        Outcome::Ok
    }

    /// A FIFO, device or socket, made anew (recursive, without `--copy-contents`).
    fn special(&mut self, src: &Path, at: At<'_>, meta: &std::fs::Metadata, omitted: u32, new_dst: bool, replace: bool) -> Outcome {
        let mode = meta.mode() & !omitted;
        let (ft, perm) = (sys::FileType::from_raw_mode(mode), mode & 0o7777);
        let made = self.make(at, replace, |d, n| DirFd::from(d).mknod(n, ft, perm, meta.rdev()));
        match made {
            Ok(_) => {
                self.made();
                self.post(src, at, meta, omitted, new_dst, false)
            }
            Err(e) if kind(meta.mode()) == sys::consts::S_IFIFO => self.fail(Error::io("cannot create fifo {}", at.path, e)),
            Err(e) => self.fail(Error::io("cannot create special file {}", at.path, e)),
        }
    }

    /// A symlink copied as a symlink.
    fn symlink(&mut self, src: &Path, at: At<'_>, meta: &std::fs::Metadata, existing: Option<Stat>, replace: bool) -> Outcome {
        let target = match std::fs::read_link(src) {
            Ok(t) => t,
            Err(e) => return self.fail(Error::io("cannot read symbolic link {}", src, e)),
        };
        if let Err(e) = self.make(at, replace, |d, n| DirFd::from(d).symlink(&target, n)) {
            // `-u` onto the same symlink: nothing to do.
            let same = self.o.update
                && existing.is_some_and(|d| is_lnk(d.st_mode))
                && sys::readlinkat(at.fd(), at.name).is_ok_and(|t| t.as_bytes() == target.as_os_str().as_bytes());
            if !same {
                return self.fail(Error::io("cannot create symbolic link {}", at.path, e));
            }
        }
        self.made();
        self.post(src, at, meta, 0, true, true)
    }

    /// The attributes of an entry made in the namespace (not a regular file, which its worker
    /// settles, nor a directory, settled after its contents): GNU's order, times, owner,
    /// xattrs, then mode (not for a symlink).
    fn post(&self, src: &Path, at: At<'_>, meta: &std::fs::Metadata, omitted: u32, new_dst: bool, symlink: bool) -> Outcome {
        let o = self.o;
        let nofollow = if symlink { AtFlags::SYMLINK_NOFOLLOW } else { AtFlags::empty() };
        if o.preserve.timestamps {
            if let Err(e) = sys::utimensat(at.fd(), at.name, &timestamps(meta), nofollow) {
                self.copier.sink.fail(Error::io("preserving times for {}", at.path, e.into()));
                if o.require_preserve {
                    return Outcome::Failed;
                }
            }
        }
        let mut mode = meta.mode();
        if o.preserve.ownership {
            let (u, g) = (meta.uid(), meta.gid());
            if let Err(e) = at.dir().set_owner(at.name, Some(u), Some(g)) {
                if !self.root && matches!(e, sys::Errno::PERM | sys::Errno::INVAL) {
                    let _ = at.dir().set_owner(at.name, None, Some(g));
                    mode &= !0o7000;
                } else {
                    let what = if symlink { at.path.display().to_string() } else { quote(at.path) };
                    self.copier.sink.fail(Error::message(
                        ErrorKind::PermissionDenied,
                        at.path,
                        format!("failed to preserve ownership for {what}: {}", strerror(e)),
                    ));
                    if o.require_preserve {
                        return Outcome::Failed;
                    }
                }
            }
        }
        if symlink {
            return Outcome::Ok;
        }
        if o.preserve.xattr {
            let copied = open_path(src).and_then(|s| open_path_at(at).map(|d| (s, d))).and_then(|(s, d)| copy_xattrs(&s, &d, at.path).map_err(io::Error::from));
            if let Err(e) = copied {
                if !o.reduce_diagnostics {
                    self.copier.sink.fail(Error::io("setting attributes for {}", at.path, e));
                    return Outcome::Failed;
                }
            }
        }
        let set = if o.preserve.mode {
            Some(mode & 0o7777)
        } else if o.no_preserve_mode && new_dst {
            let k = kind(mode);
            Some(if k == sys::consts::S_IFDIR || k == sys::consts::S_IFSOCK { 0o777 } else { 0o666 } & !self.umask)
        } else if omitted & !self.umask != 0 {
            match at.stat(false) {
                Ok(d) if (omitted & !self.umask) & !d.st_mode != 0 => Some((d.st_mode | (omitted & !self.umask)) & 0o7777),
                Ok(_) => None,
                Err(e) => return self.fail(Error::io("cannot stat {}", at.path, e)),
            }
        } else {
            None
        };
        if let Some(m) = set {
            if let Err(e) = sys::chmodat(at.fd(), at.name, m, AtFlags::empty()) {
                self.copier.sink.fail(Error::io("preserving permissions for {}", at.path, e.into()));
                if o.require_preserve {
                    return Outcome::Failed;
                }
            }
        }
        Outcome::Ok
    }

    /// A directory: made (or an existing one used), filled, its attributes set at the end.
    #[allow(clippy::too_many_arguments)] // GNU's walk state, one argument each.
    fn dir(
        &mut self,
        src: &Path,
        at: At<'_>,
        meta: std::fs::Metadata,
        make: bool,
        omitted: u32,
        parent: Option<&std::fs::Metadata>,
        ancestors: &mut Vec<(u64, u64)>,
        first_dir: &mut bool,
    ) -> Outcome {
        let o = self.o;
        let dst = at.path;
        let key = (meta.dev(), meta.ino());
        if ancestors.contains(&key) {
            return self.message(ErrorKind::InvalidInput, src, format!("cannot copy cyclic symbolic link {}", quote(src)));
        }
        let mut restore = None;
        let mut omitted = omitted;
        if make {
            let mode = (meta.mode() & 0o7777) & !omitted;
            if let Err(e) = at.dir().mkdir(at.name, mode).map_err(io::Error::from) {
                return self.fail(Error::io("cannot create directory {}", dst, e));
            }
            o.note(&Note::Copy { src, dst, backup: None });
        } else {
            omitted = 0;
        }
        let fd = match at.dir().open_dir(at.name).map_err(io::Error::from) {
            Ok(fd) => Arc::new(fd),
            Err(e) => return self.fail(Error::io("cannot stat {}", dst, e)),
        };
        let st = match sys::fstat(&*fd) {
            Ok(s) => s,
            Err(e) => return self.fail(Error::io("cannot stat {}", dst, e.into())),
        };
        let keep_sgid = st.st_mode & sys::consts::S_ISGID != 0;
        if make {
            if st.st_mode & 0o700 != 0o700 {
                restore = Some(st.st_mode & 0o7777);
                if let Err(e) = sys::fchmod(&*fd, (st.st_mode | 0o700) & 0o7777) {
                    return self.fail(Error::io("setting permissions for {}", dst, e.into()));
                }
            }
            if !*first_dir {
                self.copied.insert((st.st_dev, st.st_ino), dst.to_path_buf());
                *first_dir = true;
            }
        }
        let crossing = o.one_file_system && parent.is_some_and(|p| p.dev() != meta.dev());
        let mut r = Outcome::Ok;
        let before = (self.dispatched, self.pending_links.len());
        if !crossing {
            // A folder the copy made holds only what the copy puts in it; without a default
            // ACL, its new files inherit none (one look per folder).
            let plain = make && !default_acl(fd.as_fd());
            match read_dir_inode_order(src) {
                Ok(names) => {
                    ancestors.push(key);
                    let mut first = *first_dir;
                    for n in names.iter() {
                        let s = concat(src, n);
                        let d = concat(dst, n);
                        let child = At { dir: Some(&fd), name: n, path: &d, plain };
                        let c = self.copy(&s, child, if make { 1 } else { 0 }, Some(&meta), ancestors, false, &mut first);
                        if c == Outcome::IntoSelf {
                            r = Outcome::IntoSelf;
                            break;
                        }
                        if c == Outcome::Failed {
                            r = Outcome::Failed;
                        }
                    }
                    *first_dir |= first;
                    ancestors.pop();
                }
                Err(e) => {
                    self.copier.sink.fail(Error::io("cannot access {}", src, e));
                    r = Outcome::Failed;
                }
            }
            self.send_queued();
        }
        let d = DirMeta {
            src: o.preserve.xattr.then(|| src.to_path_buf()),
            dst: dst.to_path_buf(),
            fd: Some(fd),
            meta: DirAttrs::of(&meta),
            new: make,
            restore,
            omitted,
            keep_sgid,
        };
        if (self.dispatched, self.pending_links.len()) == before {
            // Nothing under it is left to a worker or to the end: its attributes now, as GNU
            // sets them (no record kept, whatever the size of the tree).
            if let Err(e) = self.dir_meta(&d) {
                self.copier.sink.fail(e);
            }
        } else {
            let d = if self.held < HELD_DIRS {
                self.held += 1;
                d
            } else {
                DirMeta { fd: None, ..d }
            };
            self.dirs.push(d);
        }
        r
    }

    /// A directory's attributes, once its contents are in place (deepest first).
    pub fn dir_meta(&self, d: &DirMeta) -> Result<(), Error> {
        let o = self.o;
        let fd = match &d.fd {
            Some(fd) => fd.clone(),
            None => Arc::new(
                sys::open(&d.dst, OFlags::DIRECTORY | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, FMode::empty())
                    .map_err(io::Error::from)
                    .map_err(|e| Error::io("cannot stat {}", &d.dst, e))?,
            ),
        };
        if o.preserve.timestamps {
            sys::futimens(&*fd, &d.meta.times()).map_err(|e| Error::io("preserving times for {}", &d.dst, e.into()))?;
        }
        let mut mode = d.meta.mode & 0o7777;
        if o.preserve.ownership {
            let (u, g) = (d.meta.uid, d.meta.gid);
            if let Err(e) = sys::fchown(&*fd, Some(u), Some(g)) {
                if !self.root && matches!(e, sys::Errno::PERM | sys::Errno::INVAL) {
                    let _ = sys::fchown(&*fd, None, Some(g));
                    mode &= !0o7000;
                } else {
                    return Err(Error::message(
                        ErrorKind::PermissionDenied,
                        &d.dst,
                        format!("failed to preserve ownership for {}: {}", quote(&d.dst), strerror(e)),
                    ));
                }
            }
        }
        if let Some(src) = d.src.as_ref().filter(|_| o.preserve.xattr) {
            let s = open_path(src).map_err(|e| Error::io("cannot access {}", src, e))?;
            if let Err(e) = copy_xattrs(&s, &*fd, &d.dst) {
                if !o.reduce_diagnostics {
                    return Err(e);
                }
            }
        }
        let sgid = if d.keep_sgid { sys::consts::S_ISGID } else { 0 };
        let set = if o.preserve.mode {
            Some(mode | sgid)
        } else if o.no_preserve_mode && d.new {
            Some(0o777 & !self.umask)
        } else {
            let omitted = d.omitted & !self.umask;
            match d.restore {
                Some(m) => Some(m | omitted),
                None if omitted != 0 => sys::fstat(&*fd).ok().filter(|s| omitted & !s.st_mode != 0).map(|s| (s.st_mode & 0o7777) | omitted),
                None => None,
            }
        };
        if let Some(m) = set {
            sys::fchmod(&*fd, m).map_err(|e| Error::io("preserving permissions for {}", &d.dst, e.into()))?;
        }
        Ok(())
    }

    /// A hard link to the copy of a file met earlier in the tree, renamed over the destination
    /// where one is there (which `-v` reports as removed, as GNU's does).
    pub fn hardlink(&self, l: &PendingLink) -> Result<(), Error> {
        let at = At::path(&l.dst);
        let replaced = self
            .make(at, true, |d, n| sys::linkat(sys::CWD, &l.first, d, n, AtFlags::empty()))
            .map_err(|e| Error::io(format!("cannot create hard link {{}} to {}", quote(&l.first)), &l.dst, e))?;
        if replaced {
            self.o.note(&Note::Removed(&l.dst));
        }
        Ok(())
    }
}

/// The error text of an errno, as strerror words it.
pub(super) fn strerror(e: sys::Errno) -> String {
    cacheless::strerror(e.raw_os_error())
}

/// The path of `at` as one path (for calls that take no directory descriptor).
fn at_path_full(at: At<'_>) -> PathBuf {
    at.path.to_path_buf()
}

/// Where a dangling symlink at `at` with target `t` points, as a path usable from here.
fn resolve_link_target(at: At<'_>, t: &Path) -> PathBuf {
    if t.is_absolute() {
        return t.to_path_buf();
    }
    match at.path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.join(t),
        _ => t.to_path_buf(),
    }
}

/// Opens `p` (not following a final symlink) for its extended attributes.
fn open_path(p: &Path) -> io::Result<OwnedFd> {
    sys::look(p, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOFOLLOW)
        .or_else(|_| sys::look(p, OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW))
        .map_err(io::Error::from)
}

fn open_path_at(at: At<'_>) -> io::Result<OwnedFd> {
    sys::lookat(at.fd(), at.name, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOFOLLOW)
        .or_else(|_| sys::lookat(at.fd(), at.name, OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW))
        .map_err(io::Error::from)
}

pub(super) fn timestamps(m: &std::fs::Metadata) -> sys::Timestamps {
    sys::timestamps(Some((m.atime(), m.atime_nsec())), Some((m.mtime(), m.mtime_nsec())))
}

/// The names in directory `p`, in the order GNU cp copies them: by inode number (which reads a
/// large directory's inodes in disk order). Names of one inode (hard links) keep the order the
/// directory lists them in, as GNU's stable sort keeps them: which of them is met first decides
/// what `-u` keeps, so name order would differ from GNU's wherever the listing is not by name.
/// They are held packed (`sys::DirNames`): a folder of a million names costs little more than
/// their bytes, as GNU's listing does.
fn read_dir_inode_order(p: &Path) -> io::Result<sys::DirNames> {
    let fd = sys::lookat(sys::CWD, p, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC)?;
    sys::dir_names(&fd, sys::NameOrder::Inode)
}

/// Whether the source (named `base`, with `meta`) is the simple backup of the destination:
/// backing the destination up would replace the source.
fn source_is_backup(base: &OsStr, meta: &std::fs::Metadata, at: At<'_>, suffix: &str) -> bool {
    let dbase = last_component(Path::new(at.name));
    let mut want = dbase.clone();
    want.push(suffix);
    if base != want.as_os_str() {
        return false;
    }
    let mut b = at.name.to_os_string();
    b.push(suffix);
    sys::statat(at.fd(), &b, AtFlags::empty()).is_ok_and(|s| s.st_dev == meta.dev() && s.st_ino == meta.ino())
}

/// Renames the destination at `at` to its backup name (GNU's `backup_file_rename`); returns
/// the backup's path.
fn make_backup(at: At<'_>, kind: BackupKind, suffix: &str) -> io::Result<PathBuf> {
    let (rel, path) = backup_name(at, kind, suffix)?;
    at.dir().rename(at.name, at.dir(), rel.as_os_str())?;
    Ok(path)
}

/// The name a backup of `at` gets (GNU's `find_backup_file_name`, the engine's
/// [`cacheless::backup::backup_name_in`]): relative to `at`'s directory descriptor, and as a
/// path for messages.
pub(crate) fn backup_name(at: At<'_>, kind: BackupKind, suffix: &str) -> io::Result<(OsString, PathBuf)> {
    let rel = cacheless::backup::backup_name_in(at.fd(), at.name, kind, suffix)?;
    let tail = &rel.as_bytes()[at.name.len()..];
    let mut path = at.path.as_os_str().as_bytes().to_vec();
    path.extend_from_slice(tail);
    Ok((rel, PathBuf::from(OsStr::from_bytes(&path))))
}
