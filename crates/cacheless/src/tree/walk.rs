//! The walk of a tree copy, on the caller's thread: every namespace operation in order (mkdir,
//! symlinks, the checks of `no_clobber` and `update`), each regular file handed to the pool,
//! hard links and the directories' metadata once the files are in place.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, Mode as FMode, OFlags};

use super::files::{Copier, FileJob, Jobs, JOB_FILES};
use super::TreeOptions;
use crate::copy::{copy_xattrs, open_parent};
use crate::error::{Error, ErrorKind, Result};
use crate::fault::Site;
use crate::pool::Pool;
use crate::sys::{call, default_acl};

fn timestamps(m: &std::fs::Metadata) -> rustix::fs::Timestamps {
    let ts = |s: i64, ns: i64| rustix::fs::Timespec { tv_sec: s, tv_nsec: ns };
    rustix::fs::Timestamps { last_access: ts(m.atime(), m.atime_nsec()), last_modification: ts(m.mtime(), m.mtime_nsec()) }
}

/// Opens the directory `path` (not through a symlink when `nofollow`), for its metadata.
fn open_dir(path: &Path, nofollow: bool) -> Result<OwnedFd> {
    let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | if nofollow { OFlags::NOFOLLOW } else { OFlags::empty() };
    call(Site::Open, || rustix::fs::open(path, flags, FMode::empty())).map_err(|e| Error::io("open directory", path, e))
}

/// A temporary name beside `dst` for an entry made before it is renamed over `dst`.
fn temp_beside(dst: &Path, what: &str) -> PathBuf {
    dst.with_file_name(format!(".{}.cacheless-{}{what}.tmp", dst.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(), std::process::id()))
}

/// Renames `tmp` over `dst`, removing `tmp` if that fails.
fn rename_over(tmp: &Path, dst: &Path) -> Result<()> {
    call(Site::Rename, || rustix::fs::rename(tmp, dst)).map_err(|e| {
        let _ = std::fs::remove_file(tmp);
        Error::io("rename", dst, e)
    })
}

/// A directory whose metadata is set once its contents are done.
pub(super) struct DirMeta {
    src: PathBuf,
    dst: PathBuf,
    meta: std::fs::Metadata,
    /// The folder was set-group-ID when the copy came to it (inherited from its parent when
    /// the copy made it): the bit is kept, as GNU cp keeps it, whatever the source's mode.
    keep_sgid: bool,
}

/// The walk on the caller's thread.
pub(super) struct Walker<'a> {
    pub o: &'a TreeOptions,
    pub recursive: bool,
    pub copier: Arc<Copier>,
    pub pool: Option<Pool<Copier>>,
    /// Files waiting to be handed to a worker together (see [`Jobs`]).
    pub queued: Jobs,
    /// Give copies the source's owner (archive, as root).
    pub owner: bool,
    pub dirs: Vec<DirMeta>,
    /// First destination of each multiply-linked source file (by device and inode), in archive mode.
    pub links: HashMap<(u64, u64), PathBuf>,
    /// Hard links to make once their first copy is in place: (first copy, new link).
    pub pending_links: Vec<(PathBuf, PathBuf)>,
    pub skipped: u64,
    pub hardlinks: u64,
}

impl Walker<'_> {
    fn fail(&self, e: Error) {
        self.copier.sink.fail(e);
    }

    /// Copies `src` (any type) to `dst`; per-item errors are reported and counted, not fatal.
    /// `dir` is `dst`'s parent, open, when the walk already holds it, and whether it is plain
    /// (see [`FileJob::plain`]).
    pub fn any(&mut self, src: &Path, dst: &Path, dir: Option<(&Arc<OwnedFd>, bool)>) {
        if self.copier.sink.progress.is_cancelled() {
            return;
        }
        // Symlinks are copied as links when recursive; otherwise the file they name is copied.
        let lmeta = match std::fs::symlink_metadata(src) {
            Ok(m) => m,
            Err(e) => return self.fail(Error::io("stat", src, e)),
        };
        let meta = if lmeta.file_type().is_symlink() && !self.recursive {
            match std::fs::metadata(src) {
                Ok(m) => m,
                Err(e) => return self.fail(Error::io("stat", src, e)),
            }
        } else {
            lmeta
        };
        let ft = meta.file_type();
        if !ft.is_dir() && self.skip(&meta, dst) {
            self.skipped += 1;
            return;
        }
        let r = if ft.is_symlink() {
            self.symlink(src, dst, &meta)
        } else if ft.is_dir() {
            if self.recursive {
                self.dir(src, dst, meta);
                Ok(())
            } else {
                Err(Error::new(ErrorKind::InvalidInput, "copy", src, "is a directory (use -r to copy it)"))
            }
        } else if ft.is_file() {
            self.file(src, dst, meta, dir)
        } else {
            Err(Error::new(ErrorKind::InvalidInput, "copy", src, "not a regular file, directory or symlink; skipped"))
        };
        if let Err(e) = r {
            self.fail(e);
        }
    }

    /// no_clobber: the destination exists; update: it is as new as the source and the same
    /// size (never for a symlink).
    fn skip(&self, src: &std::fs::Metadata, dst: &Path) -> bool {
        if !self.o.no_clobber && !self.o.update {
            return false;
        }
        let Ok(d) = std::fs::symlink_metadata(dst) else { return false };
        if self.o.no_clobber {
            return true;
        }
        if src.file_type().is_symlink() || d.file_type().is_symlink() {
            return false;
        }
        d.is_file() && d.len() == src.len() && (d.mtime(), d.mtime_nsec()) >= (src.mtime(), src.mtime_nsec())
    }

    fn file(&mut self, src: &Path, dst: &Path, meta: std::fs::Metadata, dir: Option<(&Arc<OwnedFd>, bool)>) -> Result<()> {
        if self.o.archive && meta.nlink() > 1 {
            let key = (meta.dev(), meta.ino());
            if let Some(first) = self.links.get(&key) {
                self.pending_links.push((first.clone(), dst.to_path_buf()));
                return Ok(());
            }
            self.links.insert(key, dst.to_path_buf());
        }
        let mut dst = dst.to_path_buf();
        let plain = dir.is_some_and(|d| d.1);
        let (dir, name) = match dir {
            Some((d, _)) => (d.clone(), dst.file_name().map(|n| n.to_os_string()).unwrap_or_default()),
            None => {
                // Like cp, write through a destination symlink given by the caller.
                if let Ok(l) = std::fs::symlink_metadata(&dst) {
                    if l.file_type().is_symlink() {
                        if let Ok(real) = std::fs::canonicalize(&dst) {
                            dst = real;
                        }
                    }
                }
                open_parent(&dst)?
            }
        };
        self.queued.push(FileJob { src: src.to_path_buf(), dst, dir, name, meta, plain });
        if self.queued.len() >= JOB_FILES {
            self.send_queued();
        }
        Ok(())
    }

    /// Hands the files queued to a worker (at the end of each directory, and of the walk).
    pub fn send_queued(&mut self) {
        if self.queued.is_empty() {
            return;
        }
        let jobs = std::mem::take(&mut self.queued);
        if let Some(p) = &self.pool {
            p.send(jobs);
        }
    }

    fn symlink(&mut self, src: &Path, dst: &Path, meta: &std::fs::Metadata) -> Result<()> {
        let target = std::fs::read_link(src).map_err(|e| Error::io("readlink", src, e))?;
        let tmp = temp_beside(dst, "");
        call(Site::Open, || rustix::fs::symlink(&target, &tmp)).map_err(|e| Error::io("symlink", dst, e))?;
        let meta_done = (|| -> Result<()> {
            if self.owner {
                let (u, g) = (rustix::fs::Uid::from_raw(meta.uid()), rustix::fs::Gid::from_raw(meta.gid()));
                rustix::fs::chownat(rustix::fs::CWD, &tmp, Some(u), Some(g), AtFlags::SYMLINK_NOFOLLOW).map_err(|e| Error::io("lchown", dst, e.into()))?;
            }
            if self.o.archive {
                rustix::fs::utimensat(rustix::fs::CWD, &tmp, &timestamps(meta), AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(|e| Error::io("set times", dst, e.into()))?;
            }
            Ok(())
        })();
        if let Err(e) = meta_done {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        rename_over(&tmp, dst)?;
        // Not synced here: the final syncfs makes it durable.
        self.copier.unsynced.store(true, std::sync::atomic::Ordering::Relaxed);
        self.copier.sink.progress.file_done();
        Ok(())
    }

    fn dir(&mut self, src: &Path, dst: &Path, meta: std::fs::Metadata) {
        if let (Ok(s), Ok(d)) = (std::fs::canonicalize(src), dst.parent().map(std::fs::canonicalize).unwrap_or(Ok(PathBuf::from(".")))) {
            if d.starts_with(&s) {
                return self.fail(Error::new(ErrorKind::InvalidInput, "copy", dst, format!("cannot copy directory '{}' into itself", src.display())));
            }
        }
        let made = match call(Site::Open, || rustix::fs::mkdir(dst, FMode::from_raw_mode(0o777))) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dst.is_dir() => false,
            Err(e) => return self.fail(Error::io("mkdir", dst, e)),
        };
        let fd = match open_dir(dst, true) {
            Ok(fd) => Arc::new(fd),
            Err(e) => return self.fail(e),
        };
        // A folder made here holds only what the copy puts in it; without a default ACL, its
        // new files inherit none (one look per folder, where each file's copy looked itself).
        let plain = made && !(self.o.archive && default_acl(fd.as_fd()));
        // A set-group-ID folder (one made in such a folder inherits the bit and its group) keeps
        // the bit while it is filled, so that what is made in it inherits both, as in GNU cp's
        // copies, and after (`dir_meta`).
        let keep_sgid = rustix::fs::fstat(&*fd).is_ok_and(|st| st.st_mode & libc::S_ISGID != 0);
        // Writable while we fill it; the source's mode and times are set after its contents.
        let _ = rustix::fs::fchmod(&*fd, FMode::from_raw_mode(0o700 | if keep_sgid { libc::S_ISGID } else { 0 }));
        match std::fs::read_dir(src) {
            Ok(rd) => {
                let mut names: Vec<_> = rd.filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
                names.sort();
                for n in names {
                    self.any(&src.join(&n), &dst.join(&n), Some((&fd, plain)));
                }
                self.send_queued();
            }
            Err(e) => self.fail(Error::io("read directory", src, e)),
        }
        self.dirs.push(DirMeta { src: src.to_path_buf(), dst: dst.to_path_buf(), meta, keep_sgid });
    }

    /// Owner, xattrs, mode and times of one directory.
    pub fn dir_meta(&self, d: &DirMeta) -> Result<()> {
        let fd = open_dir(&d.dst, true)?;
        if self.owner {
            let (u, g) = (rustix::fs::Uid::from_raw(d.meta.uid()), rustix::fs::Gid::from_raw(d.meta.gid()));
            rustix::fs::fchown(&fd, Some(u), Some(g)).map_err(|e| Error::io("fchown", &d.dst, e.into()))?;
        }
        if self.o.archive {
            let s = open_dir(&d.src, false)?;
            copy_xattrs(&s, &fd, &d.dst)?;
        }
        let mode = d.meta.mode() & 0o7777 | if d.keep_sgid { libc::S_ISGID } else { 0 };
        rustix::fs::fchmod(&fd, FMode::from_raw_mode(mode)).map_err(|e| Error::io("chmod", &d.dst, e.into()))?;
        rustix::fs::futimens(&fd, &timestamps(&d.meta)).map_err(|e| Error::io("set times", &d.dst, e.into()))
    }

    /// A hard link to the copy of a file met earlier in the tree, made under a temporary name
    /// and renamed over the destination.
    pub fn hardlink(&self, first: &Path, dst: &Path) -> Result<()> {
        let tmp = temp_beside(dst, ".link");
        call(Site::Open, || rustix::fs::link(first, &tmp)).map_err(|e| Error::io("link", dst, e))?;
        rename_over(&tmp, dst)
    }
}
