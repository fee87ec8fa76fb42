//! A file not yet published: the one home of a new file from its exclusive creation to its
//! final name, or to its removal. Every writer of the engine (the streaming
//! [`Writer`](crate::Writer), the [`FileCreator`](crate::FileCreator), a copy, the tree copy,
//! extract) holds its new file as a [`PendingFile`]; none creates, names or removes one
//! itself.
//!
//! A pending file is in one of four places: under its final name already (written where it
//! will stay, removed on failure), under a temporary name beside it (renamed over it when
//! published), without a name (O_TMPFILE: linked when published, freed by the kernel when
//! dropped), or an existing file written in place (never removed). It is created with the
//! one exclusive-create (`O_CREAT | O_EXCL | O_NOFOLLOW`: nothing there is followed or
//! reused) and with permission bits from the one rule, [`initial_mode`].

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::sys::{AtFlags, DirFd, FMode, OFlags};

use crate::error::{Error, Result};
use crate::residency;
use crate::sys;

/// The flags of every new regular file the engine creates under a name: read-write, and
/// created here (`O_EXCL`), never an existing file or the target of a symlink in its place.
pub(crate) const EXCLUSIVE: OFlags = DirFd::CREATE_NEW.union(OFlags::RDWR);

/// The permission bits a new file is created with (before the umask), the one rule for every
/// file the engine makes: never wider than the bits it ends with (`permissions`, where they
/// are set when it is finished), owner-only (0600) where those are set only at the end and no
/// creation mode is asked for, so nobody else reads it half-written, and never a set-ID or
/// sticky bit (those come at the end). Without either, 0666: the umask makes the file what it
/// will stay. `create` is the mode asked for at creation (GNU cp creates a copy with its
/// source's bits). A file created without a name, which nobody can open, may get its final
/// bits at once (`Unnamed`).
pub fn initial_mode(permissions: Option<u32>, create: Option<u32>) -> u32 {
    let base = create.unwrap_or(if permissions.is_some() { 0o600 } else { 0o666 });
    base & permissions.unwrap_or(0o777) & 0o777
}

/// How a new file is named while it is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NewName {
    /// Under its final name from the start (it must not exist).
    Final,
    /// Under a temporary name beside it, `.NAME.cacheless-BOOT-PID-N.lk.tmp` (see [`crate::sys::temps::temp_name`]).
    Temporary,
    /// Without a name (O_TMPFILE) with permission bits `mode`, or where the filesystem has
    /// none (or it is switched off), as [`NewName::Temporary`].
    Unnamed { mode: u32 },
}

/// Where a pending file is.
#[derive(Debug)]
enum At {
    Final,
    Temporary(OsString),
    Unnamed,
    /// An existing file written in place: its name is its own, and it is never removed.
    InPlace,
}

/// A complete or growing file in its directory that is not yet published under its final
/// name ([`PendingFile::publish`]); dropped unpublished, it is removed (a file under its
/// final name or a temporary one is unlinked, one without a name goes with its last
/// descriptor, an existing file written in place stays as far as it got), and the pages it
/// left in the cache are dropped.
pub struct PendingFile {
    /// The file, open (for its writes, the syncfs of its batch, and to link it when it has
    /// no name).
    file: Arc<File>,
    dir: Arc<OwnedFd>,
    /// Its final name in `dir`.
    name: OsString,
    path: PathBuf,
    at: At,
    /// Published (or in place for good): nothing to remove.
    settled: bool,
}

impl PendingFile {
    /// Creates a new file for `name` (one path component) in `dir`, named as `naming` says,
    /// read-write, with permission bits `mode` (see [`initial_mode`]). `path` names it in
    /// errors. `covered`: a temporary name it gets is covered by its job's claim on a folder
    /// above it (see [`hold_temporary`]).
    pub(crate) fn create(dir: Arc<OwnedFd>, name: &OsStr, path: &Path, naming: NewName, mode: u32, covered: bool) -> Result<PendingFile> {
        sys::check_name("create", path, name)?;
        let (fd, at) = match naming {
            NewName::Final => {
                let fd = DirFd::of(&*dir).create_new(name, OFlags::RDWR, mode).map_err(io::Error::from).map_err(|e| Error::io("create", path, e))?;
                (fd, At::Final)
            }
            NewName::Unnamed { mode: unnamed } => match create_unnamed(dir.as_fd(), path, unnamed)? {
                Some(fd) => (fd, At::Unnamed),
                None => create_temp(dir.as_fd(), name, path, mode, covered)?,
            },
            NewName::Temporary => create_temp(dir.as_fd(), name, path, mode, covered)?,
        };
        Ok(PendingFile { file: Arc::new(File::from(fd)), dir, name: name.to_os_string(), path: path.to_path_buf(), at, settled: false })
    }

    /// A file created elsewhere (an openat on an io_uring), as [`NewName::Temporary`] makes one
    /// under the temporary name `tmp` (held here as `create` holds one, see [`hold_temporary`]:
    /// `None` where its name is no longer its own), or [`NewName::Unnamed`] one without a name
    /// (`tmp` `None`). `covered` as [`PendingFile::create`] takes it.
    pub(crate) fn adopt(fd: OwnedFd, dir: Arc<OwnedFd>, name: &OsStr, path: &Path, tmp: Option<OsString>, covered: bool) -> Option<PendingFile> {
        if let Some(t) = &tmp {
            if !hold_temporary(fd.as_fd(), dir.as_fd(), t, covered) {
                return None;
            }
        }
        let at = tmp.map_or(At::Unnamed, At::Temporary);
        Some(PendingFile { file: Arc::new(File::from(fd)), dir, name: name.to_os_string(), path: path.to_path_buf(), at, settled: false })
    }

    /// `file`, an existing file `name` in `dir` to be written in place: its inode kept, never
    /// removed, named already.
    pub(crate) fn in_place(file: File, dir: Arc<OwnedFd>, name: &OsStr, path: &Path) -> PendingFile {
        PendingFile { file: Arc::new(file), dir, name: name.to_os_string(), path: path.to_path_buf(), at: At::InPlace, settled: false }
    }

    /// The directory it is in.
    pub fn dir(&self) -> &Arc<OwnedFd> {
        &self.dir
    }

    /// The final path, as given at creation.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file.
    pub(crate) fn file(&self) -> &Arc<File> {
        &self.file
    }

    /// Whether it is still to be given its final name (under a temporary name or none),
    /// rather than under it already or written in place.
    pub(crate) fn unpublished(&self) -> bool {
        matches!(self.at, At::Temporary(_) | At::Unnamed)
    }

    /// Whether it was created without a name.
    pub(crate) fn unnamed(&self) -> bool {
        matches!(self.at, At::Unnamed)
    }

    /// A second open file description of it, read-write (one whose flags, O_DIRECT among
    /// them, are its own): for reading a finished file back.
    pub(crate) fn reopen(&self) -> io::Result<File> {
        let flags = OFlags::RDWR | OFlags::CLOEXEC;
        let fd = match &self.at {
            At::Temporary(tmp) => sys::openat(&*self.dir, tmp.as_os_str(), flags | OFlags::NOFOLLOW, FMode::empty()).map_err(io::Error::from)?,
            _ => {
                let proc = sys::proc_fd_path(self.file.as_fd());
                sys::open(proc.as_str(), flags, FMode::empty()).map_err(io::Error::from)?
            }
        };
        Ok(File::from(fd))
    }

    /// Gives it its final name, replacing a file or symlink there: renamed from its temporary
    /// name, or linked where it has none. `durable`: the directory is fsynced after, so that
    /// the name survives a crash (the file's own data and attributes are its writer's to make
    /// durable first). A file under its final name already, or written in place, has nothing
    /// to do. On error it is removed, unless the rename happened and only the directory's
    /// fsync failed: it is then complete and in place (removing it would lose the file it
    /// replaced), and the error says what is in doubt.
    pub fn publish(mut self, durable: bool) -> Result<()> {
        let r = match &self.at {
            At::Final | At::InPlace => Ok(()),
            At::Temporary(tmp) => sys::publish(self.dir.as_fd(), tmp, &self.name, &self.path, durable).map_err(|u| {
                self.settled = u.renamed;
                *u.error
            }),
            At::Unnamed => sys::link_unnamed(&self.file, self.dir.as_fd(), &self.name, &self.path).and_then(|()| {
                self.settled = true;
                if durable {
                    sys::sync_dir(self.dir.as_fd(), &self.path)?;
                }
                Ok(())
            }),
        };
        if r.is_ok() {
            self.settled = true;
        }
        r
    }

    /// For a file its caller made durable itself (a syncfs after it was finished): drops the
    /// pages it left in the cache (written back now; best effort) and gives it its final
    /// name (see [`PendingFile::publish`]; the name's durability is the caller's: a later
    /// syncfs). On error it is removed.
    pub fn publish_synced(self) -> Result<()> {
        let _ = residency::drop_range(&self.file, 0, 0);
        self.publish(false)
    }

    /// Removes it now (as dropping it does).
    pub fn discard(self) {}
}

impl PendingFile {
    /// Puts a complete, durable file that is to wait for its name under a temporary name (if
    /// it has none) and closes it: a [`Parked`] file holds no descriptor of its own. Back as it
    /// was where it cannot be (no link could be made).
    pub fn park(mut self) -> std::result::Result<Parked, PendingFile> {
        // Closed, its own lock goes: what holds it from now is the claim its job keeps on a
        // folder above it (extract claims its destination; see `crate::temps`), which costs no
        // descriptor per parked file or per folder.
        let tmp = match &self.at {
            At::Temporary(t) => t.clone(),
            At::Unnamed => match sys::beside_held(self.dir.as_fd(), &self.name, |d, t| sys::link_fd(&self.file, d, t)) {
                Ok(((), t)) => t,
                Err(_) => return Err(self),
            },
            At::Final | At::InPlace => return Err(self),
        };
        self.settled = true;
        let (dir, name, path) = (self.dir.clone(), std::mem::take(&mut self.name), std::mem::take(&mut self.path));
        Ok(Parked { dir, name, path, tmp, settled: false })
    }

    /// Where it is to be named, and which inode it is: for a caller that names it before it
    /// knows it may keep it, and removes it again by [`Named::remove_if_same`] if it may not.
    pub fn identity(&self) -> Option<Named> {
        use std::os::unix::fs::MetadataExt;
        let m = self.file.metadata().ok()?;
        Some(Named { dir: self.dir.clone(), name: self.name.clone(), path: self.path.clone(), id: (m.dev(), m.ino()) })
    }
}

/// Where a file is (to be) named, and which inode it is: what removes a name given before its
/// time, should the file not be kept ([`Named::remove_if_same`]).
#[derive(Clone, Debug)]
pub struct Named {
    dir: Arc<OwnedFd>,
    name: OsString,
    path: PathBuf,
    /// Device and inode.
    id: (u64, u64),
}

impl Named {
    /// `name` in `dir` as it is now (not followed where it is a symlink); `path` names it.
    /// `None` where nothing is there.
    pub fn of(dir: &Arc<OwnedFd>, name: &OsStr, path: &Path) -> Option<Named> {
        let st = DirFd::of(&**dir).stat(name).ok()?;
        Some(Named { dir: dir.clone(), name: name.to_os_string(), path: path.to_path_buf(), id: (st.st_dev, st.st_ino) })
    }

    /// The path that names it in messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether `other` is the same inode.
    pub fn same_file(&self, other: &Named) -> bool {
        self.id == other.id
    }

    /// The folder it is named in.
    pub fn dir(&self) -> &Arc<OwnedFd> {
        &self.dir
    }

    /// Removes the name where it still names the same inode (nobody replaced it since), and
    /// says whether it did.
    pub fn remove_if_same(&self) -> bool {
        let same = DirFd::of(&*self.dir).stat(self.name.as_os_str()).is_ok_and(|st| (st.st_dev, st.st_ino) == self.id);
        same && sys::unlinkat(&*self.dir, self.name.as_os_str(), AtFlags::empty()).is_ok()
    }
}

/// A complete, durable file waiting for its name under a temporary one, its descriptor closed
/// (see [`PendingFile::park`]): renamed when published, removed when dropped.
#[derive(Debug)]
pub struct Parked {
    dir: Arc<OwnedFd>,
    /// Its final name in `dir`.
    name: OsString,
    path: PathBuf,
    tmp: OsString,
    settled: bool,
}

impl Parked {
    /// Renames it to its final name (see [`PendingFile::publish`]).
    pub fn publish(mut self) -> Result<()> {
        let r = sys::publish(self.dir.as_fd(), &self.tmp, &self.name, &self.path, false).map_err(|u| {
            self.settled = u.renamed;
            *u.error
        });
        if r.is_ok() {
            self.settled = true;
        }
        r
    }

    /// The final path, as given at creation.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The folder it is to be named in.
    pub fn dir(&self) -> &Arc<OwnedFd> {
        &self.dir
    }

    /// Where it is to be named, and which inode it is (as [`PendingFile::identity`] says; its
    /// temporary name, its own, is looked at): asked only where it is to be named early, so
    /// that parking costs no look. `None` where it cannot be looked at.
    pub fn identity(&self) -> Option<Named> {
        let at = Named::of(&self.dir, &self.tmp, &self.path)?;
        Some(Named { name: self.name.clone(), ..at })
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        if !self.settled {
            let _ = sys::unlinkat(&*self.dir, self.tmp.as_os_str(), AtFlags::empty());
        }
    }
}

impl std::fmt::Debug for PendingFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingFile").field("path", &self.path).field("at", &self.at).finish()
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        // What it put in the cache is garbage now (or, in place, not ours to keep).
        let _ = residency::drop_range(&self.file, 0, 0);
        let victim = match &self.at {
            At::Final => &self.name,
            At::Temporary(tmp) => tmp,
            // Freed with its last descriptor; or an existing file, which stays as far as it
            // got (GNU cp's copy does the same).
            At::Unnamed | At::InPlace => return,
        };
        let _ = sys::unlinkat(&*self.dir, victim.as_os_str(), AtFlags::empty());
    }
}

/// Holds the regular file `fd`, just made under the temporary name `tmp` in `dir`, against
/// cleaners (see [`crate::temps`]): by its own lock (`temps::hold_file`), unless `covered` (its
/// job holds a claim on a folder above it for as long as it lives, and its folder is on a
/// filesystem of this machine), where that claim is what every cleaner looks at first and the
/// lock (a lock, a look at the file and one at its name) would add nothing. `false` where its
/// name was taken before it was held: the caller makes another.
pub(crate) fn hold_temporary(fd: BorrowedFd<'_>, dir: BorrowedFd<'_>, tmp: &OsStr, covered: bool) -> bool {
    covered || crate::temps::hold_file(fd, dir, tmp)
}

/// Creates a new file under a temporary name beside `name` in `dir` (see [`crate::sys::temps::temp_name`])
/// with permission bits `mode`, held as [`hold_temporary`] holds it; `path` names it in errors.
fn create_temp(dir: BorrowedFd<'_>, name: &OsStr, path: &Path, mode: u32, covered: bool) -> Result<(OwnedFd, At)> {
    loop {
        let (fd, tmp) = sys::beside_held(dir, name, |dir, t| DirFd::from(dir).create_new(t, OFlags::RDWR, mode).map_err(io::Error::from))
            .map_err(|e| Error::io("create", path, e))?;
        // Its own lock proves its writer alive while it is open (parked, its job's claim on a
        // folder above it, see `park`). Its name taken by a cleaner before the lock: made again.
        if hold_temporary(fd.as_fd(), dir, &tmp, covered) {
            return Ok((fd, At::Temporary(tmp)));
        }
    }
}

/// Taken around each unnamed creation: the process's threads create their unnamed files one at
/// a time, as the extraction's creation queue does on its one kernel worker. An O_TMPFILE open
/// takes no lock on its folder, so threads that create at once meet inside the inode
/// allocator. On ext4 without a journal, whose allocator passes over the inodes freed in the
/// last minutes (`recently_deleted`, most of a profile of `cp -a` there), 20,000 small files
/// copied by two workers just after a tree of that size was removed took 3.1-4.3 s of system
/// time with both creating at once, 1.9 s with one worker, and 2.1-2.2 s with this lock. With a
/// journal (ext4, xfs) it made no difference either way.
static UNNAMED_ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Creates a file without a name in `dir` (O_TMPFILE, Linux 3.11; ext4, xfs, btrfs, tmpfs),
/// read-write with permission bits `mode`; until it is linked a crash leaves nothing of it
/// (the filesystem frees it at its next mount). `None` where the filesystem has no O_TMPFILE
/// (remembered for its filesystem) or it is switched off. One at a time in the process
/// ([`UNNAMED_ONE_AT_A_TIME`]).
fn create_unnamed(dir: BorrowedFd<'_>, path: &Path, mode: u32) -> Result<Option<OwnedFd>> {
    if !sys::tmpfile_available(dir) {
        return Ok(None);
    }
    let made = {
        let _one = UNNAMED_ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        DirFd::from(dir).create_unnamed(mode)
    };
    match made.map_err(io::Error::from) {
        Ok(fd) => Ok(Some(fd)),
        Err(e) if sys::tmpfile_refused(&e, dir) => Ok(None),
        Err(e) => Err(Error::io("create", path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    fn dir(p: &Path) -> Arc<OwnedFd> {
        Arc::new(sys::open(p, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, FMode::empty()).unwrap())
    }

    fn names(p: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(p).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    /// Each naming: nothing under the final name until published (but under it from the
    /// start for `Final`), the data and the name after, and nothing at all when dropped.
    #[test]
    fn each_naming_publishes_or_leaves_nothing() {
        for naming in [NewName::Final, NewName::Temporary, NewName::Unnamed { mode: 0o640 }] {
            let d = tempfile::tempdir().unwrap();
            std::fs::write(d.path().join("f"), b"old").unwrap();
            let fd = dir(d.path());
            if naming == NewName::Final {
                let e = PendingFile::create(fd.clone(), OsStr::new("f"), &d.path().join("f"), naming, 0o600, false).unwrap_err();
                assert_eq!(e.errno(), Some(sys::consts::EEXIST), "{e}");
                std::fs::remove_file(d.path().join("f")).unwrap();
            }
            let p = PendingFile::create(fd.clone(), OsStr::new("f"), &d.path().join("f"), naming, 0o600, false).unwrap();
            (&**p.file()).write_all(b"new data").unwrap();
            match naming {
                NewName::Final => assert_eq!(names(d.path()), ["f"]),
                NewName::Temporary => {
                    assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"old");
                    assert_eq!(names(d.path()).len(), 2);
                }
                NewName::Unnamed { .. } => assert_eq!(names(d.path()).len(), 1 + usize::from(!p.unnamed())),
            }
            assert_eq!(p.unpublished(), naming != NewName::Final);
            let mut back = String::new();
            io::Read::read_to_string(&mut p.reopen().unwrap(), &mut back).unwrap();
            assert_eq!(back, "new data");
            p.publish(true).unwrap();
            assert_eq!(names(d.path()), ["f"], "{naming:?}");
            assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"new data", "{naming:?}");

            // Dropped unpublished: what was there stays, and nothing else is left.
            let p = PendingFile::create(fd.clone(), OsStr::new("g"), &d.path().join("g"), naming, 0o600, false).unwrap();
            (&**p.file()).write_all(b"lost").unwrap();
            drop(p);
            assert_eq!(names(d.path()), ["f"], "{naming:?}");
        }
    }

    /// An existing file written in place is never removed, published or not.
    #[test]
    fn in_place_is_never_removed() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, b"kept").unwrap();
        let p = PendingFile::in_place(File::options().write(true).open(&f).unwrap(), dir(d.path()), OsStr::new("f"), &f);
        assert!(!p.unpublished());
        drop(p);
        assert_eq!(std::fs::read(&f).unwrap(), b"kept");
    }

    /// The one rule: never wider than the final bits, owner-only while those are not yet
    /// set, never a set-ID or sticky bit; the umask's part where nothing is asked.
    #[test]
    fn initial_mode_is_never_wider_than_the_final_one() {
        for perm in [0o644, 0o755, 0o4755, 0o2775, 0o1777, 0o600, 0o000, 0o070] {
            for create in [None, Some(0o666), Some(0o600), Some(0o4777)] {
                let m = initial_mode(Some(perm), create);
                assert_eq!(m & !(perm & 0o777), 0, "{perm:o} {create:?}: {m:o} is wider");
                assert_eq!(m & 0o7000, 0, "{perm:o} {create:?}: {m:o}");
                if create.is_none() {
                    assert_eq!(m & 0o077, 0, "{perm:o}: {m:o} is open to others before the end");
                }
            }
        }
        assert_eq!(initial_mode(None, None), 0o666);
        assert_eq!(initial_mode(None, Some(0o4755)), 0o755);
        // And the file is created with them.
        let d = tempfile::tempdir().unwrap();
        let p = PendingFile::create(dir(d.path()), OsStr::new("f"), &d.path().join("f"), NewName::Temporary, initial_mode(Some(0o644), None), false).unwrap();
        assert_eq!(p.file().metadata().unwrap().permissions().mode() & 0o7777, 0o600);
    }
}
