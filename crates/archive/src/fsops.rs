//! Namespace operations beneath the destination directory, never through a symlink the
//! archive made that could lead out of it: extraction's resolution policy over the facade's
//! directory capability (`sys::DirFd`, whose calls on a name never follow a symlink there).
//!
//! Every entry's parent directory is resolved relative to the destination's directory fd with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` (Linux 5.6+). Where
//! openat2 is missing or filtered (ENOSYS, EPERM from seccomp, EINVAL) the parent is walked one
//! component at a time with `openat(O_DIRECTORY | O_NOFOLLOW)`. The final component is always
//! created with `O_CREAT | O_EXCL | O_NOFOLLOW`, `mkdirat`, `symlinkat`, `linkat` (no follow) or
//! `mknodat`, so nothing is ever created or written through a symlink at a member's own name.
//! A symlink met on the way to a member's folder is followed as GNU tar follows it: one that was
//! there before the extraction wherever it points (`lib -> usr/lib` when restoring into `/`),
//! and one the archive made whose text is relative without `..`; never one the archive made
//! with an absolute text or a `..` (GNU makes those last, so that nothing goes through them),
//! under any name, nor anything whose way leads through one (a followed link's text is
//! resolved a component at a time). Resolved parents are cached; the cache is invalidated
//! whenever a directory is removed, and, once a symlink was followed, whenever an entry is
//! replaced.

use cacheless::sys;
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cacheless::sys::Errno;
use cacheless::sys::{DirFd, OFlags};

use crate::error::{Error, Result};

/// A sanitised member name: components beneath the destination, none of them `..` or empty.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RelPath(pub Vec<Vec<u8>>);

impl RelPath {
    /// The path for messages and keys.
    pub fn to_path(&self) -> PathBuf {
        let mut p = PathBuf::new();
        for c in &self.0 {
            p.push(OsStr::from_bytes(c));
        }
        p
    }
    /// Parent components and the last one; `None` for the destination itself.
    pub fn split(&self) -> Option<(&[Vec<u8>], &[u8])> {
        self.0.split_last().map(|(l, p)| (p, l.as_slice()))
    }
}

/// Outcome of sanitising a member name.
pub enum Sanitized {
    /// A usable path; `stripped` tells whether leading `/` were removed (GNU tar warns once).
    Ok {
        /// The components.
        path: RelPath,
        /// Leading slashes were removed.
        stripped: bool,
    },
    /// Refused: contains `..` (GNU tar: "Member name contains '..'").
    DotDot,
}

/// GNU tar's default: strip leading `/`, refuse any `..` component, drop `.` and empty ones.
pub fn sanitize(raw: &[u8]) -> Sanitized {
    let stripped = raw.first() == Some(&b'/');
    let mut comps = Vec::new();
    for c in raw.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return Sanitized::DotDot,
            c => comps.push(c.to_vec()),
        }
    }
    Sanitized::Ok { path: RelPath(comps), stripped }
}

/// What [`Root::mkdir`] found or did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// It made the directory.
    Made,
    /// A directory was there already.
    Existing,
    /// Something was there and was kept as it is (`keep_old`).
    Kept,
}

/// How parents are resolved (reported).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Resolve {
    /// openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS.
    Openat2,
    /// Component-by-component O_NOFOLLOW walk.
    Walk,
}

/// The destination directory and its cache of resolved parent directories.
pub struct Root {
    fd: Arc<OwnedFd>,
    /// The destination as given, for messages.
    pub path: PathBuf,
    /// How parents are resolved.
    pub resolve: Resolve,
    /// Why (the errno that made openat2 unusable, if any).
    pub resolve_reason: String,
    cache: HashMap<Vec<Vec<u8>>, Arc<OwnedFd>>,
    /// Most directories kept open in `cache` (each holds a descriptor).
    cache_max: usize,
    implicit_dir_mode: u32,
    /// Directories created implicitly (not in the archive).
    pub implicit_dirs: u64,
    /// Where kept (`Some`), the folders made on the way to members, in order, until taken (GNU
    /// tar `-vv` names them).
    pub implicit_log: Option<Vec<RelPath>>,
    /// The directories this extraction made (the destination itself when it made it): what is
    /// in them, this extraction put there.
    made: HashSet<Vec<Vec<u8>>>,
    /// More directories were made than `made` keeps: it no longer tells.
    made_overflow: bool,
    /// Directories removed to make way for an entry, since [`Root::take_removed_dirs`].
    removed_dirs: Vec<Vec<Vec<u8>>>,
    /// A directory that was in an entry's way and not removed: files this extraction wrote
    /// into it may not have their names yet, so that it looks empty when it is not. The caller
    /// settles them (see [`Root::take_dir_in_way`]), allows its removal and tries again.
    dir_in_way: Option<Vec<Vec<u8>>>,
    /// The directory whose removal was allowed after that.
    rmdir_allowed: Option<Vec<Vec<u8>>>,
    /// The symlinks (device, inode) this extraction made that GNU tar would not follow (see
    /// [`Root::note_placed`]): never followed, under any name (a hard link to one is the same
    /// inode). Every other symlink is followed as GNU tar follows it: one that was there
    /// before (`lib -> usr/lib` restored into `/`), and one the archive made with a relative
    /// text without `..`.
    placed: HashSet<(u64, u64)>,
    /// More links were placed than `placed` keeps: no symlink is followed any more.
    placed_overflow: bool,
    /// A symlink was followed: from then on, replacing an entry forgets every directory cached
    /// (they may have been reached through it).
    followed: bool,
}

/// Most directories [`Root`] remembers having made.
const MADE_MAX: usize = 1 << 20;

fn join(comps: &[Vec<u8>]) -> Vec<u8> {
    comps.join(&b'/')
}

impl Root {
    /// Opens (creating if missing) the destination directory; up to `cache_max` resolved
    /// directories are kept open.
    pub fn open(path: &Path, implicit_dir_mode: u32, cache_max: usize) -> Result<Root> {
        let mut made = HashSet::new();
        if !path.exists() {
            sys::mkdir_all(path).map_err(|e| Error::io("mkdir", path, e))?;
            made.insert(Vec::new());
        }
        let fd = sys::look(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC).map_err(|e| Error::io("open", path, e))?;
        let (resolve, resolve_reason) = match DirFd::of(&fd).look_dir_beneath(".") {
            Ok(_) => (Resolve::Openat2, "openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS".to_string()),
            Err(e) if e == Errno::NOSYS || e == Errno::PERM || e == Errno::INVAL || e == Errno::OPNOTSUPP => {
                (Resolve::Walk, format!("openat2 unavailable ({e}): O_NOFOLLOW walk"))
            }
            Err(e) => return Err(Error::io("openat2", path, e)),
        };
        Ok(Root {
            fd: Arc::new(fd),
            path: path.to_path_buf(),
            resolve,
            resolve_reason,
            cache: HashMap::new(),
            cache_max: cache_max.max(1),
            implicit_dir_mode,
            implicit_dirs: 0,
            implicit_log: None,
            made,
            made_overflow: false,
            removed_dirs: Vec::new(),
            dir_in_way: None,
            rmdir_allowed: None,
            placed: HashSet::new(),
            placed_overflow: false,
            followed: false,
        })
    }

    /// Forces the O_NOFOLLOW walk (tests of the fallback).
    pub fn force_walk(&mut self) {
        self.resolve = Resolve::Walk;
        self.resolve_reason = "forced".into();
        self.cache.clear();
    }

    /// The destination's own fd.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn refuse(&self, comps: &[Vec<u8>], e: Errno) -> Error {
        let p = RelPath(comps.to_vec()).to_path();
        if e == Errno::LOOP || e == Errno::NOTDIR || e == Errno::XDEV {
            Error::io("refusing to go through a symlink or non-directory", p, std::io::Error::from_raw_os_error(e.raw_os_error()))
        } else {
            Error::io("resolve parent", p, e)
        }
    }

    /// Resolves (creating missing components) the directory `comps` beneath the root.
    pub fn dir(&mut self, comps: &[Vec<u8>]) -> Result<Arc<OwnedFd>> {
        self.resolve_dir(comps, true)
    }

    /// Resolves the existing directory `comps` beneath the root, creating nothing.
    pub fn existing_dir(&mut self, comps: &[Vec<u8>]) -> Result<Arc<OwnedFd>> {
        self.resolve_dir(comps, false)
    }

    fn resolve_dir(&mut self, comps: &[Vec<u8>], create: bool) -> Result<Arc<OwnedFd>> {
        let Some((last, parent)) = comps.split_last() else {
            return Ok(self.fd.clone());
        };
        if let Some(fd) = self.cache.get(comps) {
            return Ok(fd.clone());
        }
        let fd = match self.resolve {
            Resolve::Openat2 => match DirFd::of(&*self.fd).look_dir_beneath(OsStr::from_bytes(&join(comps))) {
                Ok(fd) => Arc::new(fd),
                Err(Errno::NOENT) if create => {
                    let pfd = self.dir(parent)?;
                    self.mkdir_one(&pfd, comps, last)?;
                    Arc::new(DirFd::of(&*pfd).look_dir_beneath(OsStr::from_bytes(last)).map_err(|e| self.refuse(comps, e))?)
                }
                Err(Errno::LOOP | Errno::NOTDIR) => self.through_links(comps, create)?,
                Err(e) => return Err(self.refuse(comps, e)),
            },
            Resolve::Walk => {
                let pfd = self.resolve_dir(parent, create)?;
                Arc::new(self.open_one(&pfd, comps, last, create)?)
            }
        };
        if self.cache.len() >= self.cache_max {
            self.cache.clear();
        }
        self.cache.insert(comps.to_vec(), fd.clone());
        Ok(fd)
    }

    /// Resolves `comps` one component at a time from the root, following the symlinks that were
    /// there before this extraction (see `placed`) and creating missing directories when
    /// `create`: where openat2 met a symlink or a non-directory.
    fn through_links(&mut self, comps: &[Vec<u8>], create: bool) -> Result<Arc<OwnedFd>> {
        let mut fd = self.fd.clone();
        for i in 0..comps.len() {
            let here = &comps[..=i];
            fd = match self.cache.get(here) {
                Some(cached) => cached.clone(),
                None => Arc::new(self.open_one(&fd, here, &comps[i], create)?),
            };
        }
        Ok(fd)
    }

    /// Opens the directory `last` in `pfd` (at `comps`) without following a symlink there,
    /// unless it may be followed (see [`Root::follow`]); created first where it is missing
    /// and `create`.
    fn open_one(&mut self, pfd: &OwnedFd, comps: &[Vec<u8>], last: &[u8], create: bool) -> Result<OwnedFd> {
        let open = |pfd: &OwnedFd| DirFd::of(pfd).look_dir(OsStr::from_bytes(last));
        match open(pfd) {
            Ok(fd) => Ok(fd),
            Err(Errno::NOENT) if create => {
                self.mkdir_one(pfd, comps, last)?;
                open(pfd).map_err(|e| self.refuse(comps, e))
            }
            Err(e @ (Errno::LOOP | Errno::NOTDIR)) => self.follow(pfd, last).map_err(|_| self.refuse(comps, e)),
            Err(e) => Err(self.refuse(comps, e)),
        }
    }

    /// Opens the directory the symlink `name` in `pfd` leads to, as GNU tar would
    /// reach it (see [`Root::walk_link`]); `Err` where it is not a symlink, or the way goes
    /// through a symlink the archive made that GNU would not follow, or does not end at a
    /// directory.
    fn follow(&mut self, pfd: &OwnedFd, name: &[u8]) -> std::result::Result<OwnedFd, Errno> {
        let fd = self.walk_link(pfd.as_fd(), name, 0)?;
        self.followed = true;
        Ok(fd)
    }

    /// Resolves the symlink `name` in `dir` one component of its text at a time (from `/` for
    /// an absolute one, `..` as the kernel takes it), each symlink on the way likewise, at most
    /// 40 deep (the kernel's limit): so that none of them is one in `placed`, which the kernel
    /// would follow.
    fn walk_link(&self, dir: BorrowedFd<'_>, name: &[u8], depth: u32) -> std::result::Result<OwnedFd, Errno> {
        if depth >= 40 {
            return Err(Errno::LOOP);
        }
        let st = DirFd::of(&dir).stat(OsStr::from_bytes(name))?;
        if sys::FileType::from_raw_mode(st.st_mode) != sys::FileType::Symlink {
            return Err(Errno::NOTDIR);
        }
        if self.placed_overflow || self.placed.contains(&(st.st_dev, st.st_ino)) {
            return Err(Errno::LOOP);
        }
        let text = DirFd::of(&dir).readlink(OsStr::from_bytes(name))?;
        let text = text.as_bytes();
        let mut cur = if text.starts_with(b"/") { sys::look("/", DirFd::HANDLE)? } else { DirFd::of(&dir).look_dir(".")? };
        for c in text.split(|&b| b == b'/').filter(|c| !c.is_empty() && *c != b".") {
            cur = match DirFd::of(&cur).look_dir(OsStr::from_bytes(c)) {
                Ok(f) => f,
                Err(Errno::LOOP | Errno::NOTDIR) => self.walk_link(cur.as_fd(), c, depth + 1)?,
                Err(e) => return Err(e),
            };
        }
        Ok(cur)
    }

    /// Notes the symlink this extraction just made at `name` in `parent` with the text
    /// `target`: where GNU tar would not follow it (its text absolute or holding a `..`
    /// component: GNU makes such links last, so nothing goes through them), no member goes
    /// through it, nor through a hard link to it. Others are followed as GNU follows them.
    pub fn note_placed(&mut self, parent: &OwnedFd, name: &[u8], target: &[u8]) {
        if !(target.starts_with(b"/") || target.split(|&b| b == b'/').any(|c| c == b"..")) {
            return;
        }
        match DirFd::of(parent).stat(OsStr::from_bytes(name)) {
            Ok(st) if self.placed.len() < MADE_MAX => {
                self.placed.insert((st.st_dev, st.st_ino));
            }
            _ => self.placed_overflow = true,
        }
    }

    /// Before an entry takes a name (renamed or linked over what is there, or after removing
    /// it): where symlinks were followed, what is there may be one, and every directory cached
    /// may have been reached through it.
    pub fn placing(&mut self) {
        if self.followed {
            self.cache.clear();
        }
    }

    /// Whether `path` is a symlink that leads to a directory, and could be followed (GNU tar
    /// `--keep-directory-symlink` keeps it for a folder member).
    pub fn is_directory_link(&mut self, path: &RelPath) -> bool {
        let Some((parent, name)) = path.split() else { return false };
        let Ok(pfd) = self.dir(parent) else { return false };
        self.follow(&pfd, name).is_ok()
    }

    fn mkdir_one(&mut self, pfd: &OwnedFd, comps: &[Vec<u8>], last: &[u8]) -> Result<()> {
        match DirFd::of(pfd).mkdir(OsStr::from_bytes(last), self.implicit_dir_mode) {
            Ok(()) => {
                self.implicit_dirs += 1;
                if let Some(log) = &mut self.implicit_log {
                    log.push(RelPath(comps.to_vec()));
                }
                self.note_made(comps);
                Ok(())
            }
            Err(Errno::EXIST) => Ok(()),
            Err(e) => Err(Error::io("mkdirat", RelPath(comps.to_vec()).to_path(), e)),
        }
    }

    fn note_made(&mut self, comps: &[Vec<u8>]) {
        if self.made.len() < MADE_MAX {
            self.made.insert(comps.to_vec());
        } else {
            self.made_overflow = true;
        }
    }

    /// Whether nothing but a non-directory this extraction put there can be at `path`: its
    /// parent is a directory this extraction made, and no directory was made at `path`. There,
    /// a new entry needs no look at what it replaces before it is created (a file or symlink
    /// is replaced when named). False where this cannot be told.
    pub fn only_ours_at(&self, path: &RelPath) -> bool {
        let Some((parent, _)) = path.split() else { return false };
        !self.made_overflow && self.made.contains(parent) && !self.made.contains(&path.0)
    }

    /// The directories removed to make way for an entry since the last call.
    pub fn take_removed_dirs(&mut self) -> Vec<Vec<Vec<u8>>> {
        std::mem::take(&mut self.removed_dirs)
    }

    /// The directory that was in the last entry's way and not removed (see `dir_in_way`).
    pub fn take_dir_in_way(&mut self) -> Option<RelPath> {
        self.dir_in_way.take().map(RelPath)
    }

    /// Allows the next removal of the directory `path` (once what was written into it has its
    /// name: then it is empty only when it is).
    pub fn allow_rmdir(&mut self, path: RelPath) {
        self.rmdir_allowed = Some(path.0);
    }

    /// Forgets cached directories at or under `comps` (after something there was removed).
    pub fn invalidate(&mut self, comps: &[Vec<u8>]) {
        self.cache.retain(|k, _| !k.starts_with(comps));
    }

    /// Removes whatever is at `name` in `parent` (a non-directory, or an empty directory) so that
    /// an entry can replace it, as GNU tar does by default. `Ok(false)` if nothing was there.
    pub fn remove_existing(&mut self, parent: &OwnedFd, path: &RelPath, name: &[u8]) -> Result<bool> {
        match DirFd::of(parent).unlink(OsStr::from_bytes(name)) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(Errno::ISDIR) | Err(Errno::PERM) => {
                if self.rmdir_allowed.take().as_ref() != Some(&path.0) {
                    self.dir_in_way = Some(path.0.clone());
                    return Err(Error::io("rmdir (to replace it)", path.to_path(), std::io::Error::from_raw_os_error(sys::consts::EBUSY)));
                }
                self.invalidate(&path.0);
                // It may have been reached under other names, through symlinks.
                self.placing();
                match DirFd::of(parent).rmdir(OsStr::from_bytes(name)) {
                    Ok(()) => {
                        self.removed_dirs.push(path.0.clone());
                        Ok(true)
                    }
                    Err(e) => Err(Error::io("rmdir (to replace it)", path.to_path(), e)),
                }
            }
            Err(e) => Err(Error::io("unlinkat (to replace it)", path.to_path(), e)),
        }
    }

    /// Creates a directory entry; an existing directory is kept, anything else there is
    /// replaced, unless `keep_old`: then whatever is there stays as it is (GNU tar `-k`, which
    /// neither replaces it nor restores an existing directory's mode and time).
    pub fn mkdir(&mut self, path: &RelPath, keep_old: bool) -> Result<Dir> {
        let Some((parent, name)) = path.split() else { return Ok(if keep_old { Dir::Kept } else { Dir::Existing }) };
        let pfd = self.dir(parent)?;
        match DirFd::of(&*pfd).mkdir(OsStr::from_bytes(name), 0o700) {
            Ok(()) => {
                self.note_made(&path.0);
                Ok(Dir::Made)
            }
            Err(Errno::EXIST) if keep_old => Ok(Dir::Kept),
            Err(Errno::EXIST) => {
                let st = DirFd::of(&*pfd).stat(OsStr::from_bytes(name)).map_err(|e| Error::io("fstatat", path.to_path(), e))?;
                if sys::FileType::from_raw_mode(st.st_mode) == sys::FileType::Directory {
                    return Ok(Dir::Existing);
                }
                self.placing();
                self.remove_existing(&pfd, path, name)?;
                DirFd::of(&*pfd).mkdir(OsStr::from_bytes(name), 0o700).map_err(|e| Error::io("mkdirat", path.to_path(), e))?;
                self.note_made(&path.0);
                Ok(Dir::Made)
            }
            Err(e) => Err(Error::io("mkdirat", path.to_path(), e)),
        }
    }

    /// Runs `op` (given the parent directory and the name) to create a non-directory at
    /// `path`, replacing what is there unless `keep_old`.
    pub fn create_with<T>(
        &mut self,
        path: &RelPath,
        keep_old: bool,
        opname: &'static str,
        mut op: impl FnMut(&Arc<OwnedFd>, &OsStr) -> sys::KResult<T>,
    ) -> Result<(Arc<OwnedFd>, T)> {
        let Some((parent, name)) = path.split() else {
            return Err(Error::io(opname, &self.path, std::io::Error::from_raw_os_error(sys::consts::EISDIR)));
        };
        let pfd = self.dir(parent)?;
        let n = OsStr::from_bytes(name);
        match op(&pfd, n) {
            Ok(t) => Ok((pfd, t)),
            Err(Errno::EXIST) if keep_old => {
                Err(Error::io("not replacing existing file (keeping old files)", path.to_path(), std::io::Error::from_raw_os_error(sys::consts::EEXIST)))
            }
            Err(Errno::EXIST) => {
                self.remove_existing(&pfd, path, name)?;
                op(&pfd, n).map(|t| (pfd, t)).map_err(|e| Error::io(opname, path.to_path(), e))
            }
            Err(e) => Err(Error::io(opname, path.to_path(), e)),
        }
    }

    /// Whether something (of any type, a symlink not followed) is at `path`; false where its
    /// parent is not a directory beneath the root.
    pub fn exists(&mut self, path: &RelPath) -> bool {
        let Some((parent, name)) = path.split() else { return true };
        match self.existing_dir(parent) {
            Ok(pfd) => DirFd::of(&*pfd).stat(OsStr::from_bytes(name)).is_ok(),
            Err(_) => false,
        }
    }

    /// Opens the directory at `path` itself (read-only, no symlink) for fchmod/futimens.
    pub fn open_dir_for_meta(&mut self, path: &RelPath) -> Result<OwnedFd> {
        match path.split() {
            None => DirFd::of(&*self.fd).open_dir(".").map_err(|e| Error::io("open", &self.path, e)),
            Some((parent, name)) => {
                let pfd = self.dir(parent)?;
                DirFd::of(&*pfd).open_dir(OsStr::from_bytes(name)).map_err(|e| self.refuse(&path.0, e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(raw: &str) -> (Vec<String>, bool) {
        match sanitize(raw.as_bytes()) {
            Sanitized::Ok { path, stripped } => (path.0.iter().map(|c| String::from_utf8(c.clone()).unwrap()).collect(), stripped),
            Sanitized::DotDot => panic!("{raw} refused"),
        }
    }

    #[test]
    fn names() {
        assert_eq!(ok("a/b/c"), (vec!["a".into(), "b".into(), "c".into()], false));
        assert_eq!(ok("./a//b/./"), (vec!["a".into(), "b".into()], false));
        assert_eq!(ok("//etc/passwd"), (vec!["etc".into(), "passwd".into()], true));
        assert_eq!(ok("./"), (vec![], false));
        assert_eq!(ok("a..b/..c"), (vec!["a..b".into(), "..c".into()], false));
        for bad in ["..", "../x", "a/../b", "a/b/..", "/../x"] {
            assert!(matches!(sanitize(bad.as_bytes()), Sanitized::DotDot), "{bad}");
        }
    }
}
