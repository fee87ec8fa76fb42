//! The directory capability: a folder's descriptor, through which the names in it are made,
//! linked, renamed, removed and changed.
//!
//! Every method takes a single name in the folder and fixes, once, what a call on such a
//! name must never do: follow a symbolic link at the name (`O_NOFOLLOW`, `AT_SYMLINK_NOFOLLOW`,
//! `O_EXCL` on creation) or leak a descriptor into a child process (`O_CLOEXEC`). What a name
//! leading to the folder may do is not its business: that is the resolution policy of whoever
//! opened the folder. There are two: extraction's confined root (the archive crate's `Root`:
//! member paths resolved beneath the destination with openat2's `RESOLVE_BENEATH`, or a walk
//! one component at a time, following only the links GNU tar follows) and the tree copy's
//! folder handles (crates/cp: each folder opened by its handle as the walk descends, the
//! command line's operands from the working directory as GNU cp follows them).
//!
//! The methods return the kernel's errno, not a message: each caller decides by it (an
//! existing name is replaced or kept, a missing folder made) and words the error with the path
//! it knows (a member's name, a destination). Like the functions of the facade, they retry
//! EINTR and are fault sites where they change something.

use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, Dev, FileType, Mode, OFlags, ResolveFlags, Stat, Timestamps};
use rustix::io::Result;
use rustix::path::Arg;

use super::{chmodat, chownat, linkat, lookat, lookat2, mkdirat, mknodat, openat, readlinkat, renameat, statat, symlinkat, unlinkat, utimensat};

/// A folder, by its descriptor (borrowed: the folder's owner keeps it open; `sys::CWD` for the
/// working directory). Copy: it is a reference.
#[derive(Clone, Copy, Debug)]
pub struct DirFd<'a>(BorrowedFd<'a>);

impl<'a> DirFd<'a> {
    /// The folder open as `fd` (a descriptor of a directory, as `O_PATH` or read-only).
    pub fn of(fd: &'a impl AsFd) -> DirFd<'a> {
        DirFd(fd.as_fd())
    }

    /// Opens the folder `name` to read its names and change its attributes (an open, a fault
    /// site); a symlink there is not followed (ELOOP or ENOTDIR).
    pub fn open_dir<P: Arg + Copy>(self, name: P) -> Result<OwnedFd> {
        openat(self.0, name, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
    }

    /// Opens the folder `name` as a handle to resolve names in (`O_PATH`: no read, no
    /// permission needed to read it; a look, no fault site); a symlink there is not followed.
    pub fn look_dir<P: Arg + Copy>(self, name: P) -> Result<OwnedFd> {
        lookat(self.0, name, Self::HANDLE | OFlags::NOFOLLOW)
    }

    /// Opens the folder at the relative path `path` as a handle, resolved beneath this folder
    /// with no symlink on the way, none at all (openat2 `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
    /// RESOLVE_NO_MAGICLINKS`, Linux 5.6): ELOOP or EXDEV where the path leaves it or meets a
    /// link, ENOSYS (or EPERM under a seccomp filter) where the kernel has no openat2.
    pub fn look_dir_beneath<P: Arg + Copy>(self, path: P) -> Result<OwnedFd> {
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        lookat2(self.0, path, Self::HANDLE, resolve)
    }

    /// The flags of a folder handle (see [`DirFd::look_dir`]).
    pub const HANDLE: OFlags = OFlags::PATH.union(OFlags::DIRECTORY).union(OFlags::CLOEXEC);

    /// Creates the file `name`, which must not exist (`O_CREAT | O_EXCL`: a symlink there is
    /// an existing name, never followed), opened with `access` (`O_WRONLY`, `O_RDWR`, and
    /// any of `O_DIRECT`, ...) and permission bits `mode` (less the umask).
    pub fn create_new<P: Arg + Copy>(self, name: P, access: OFlags, mode: u32) -> Result<OwnedFd> {
        openat(self.0, name, access | Self::CREATE_NEW, Mode::from_raw_mode(mode))
    }

    /// The flags of an exclusive create (see [`DirFd::create_new`]), less the access mode: for
    /// requests that make the call elsewhere (an io_uring openat).
    pub const CREATE_NEW: OFlags = OFlags::CREATE.union(OFlags::EXCL).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

    /// Creates a file in the folder without a name (`O_TMPFILE`, read-write), to be named by
    /// a link once whole; EOPNOTSUPP or EISDIR where the filesystem has no unnamed files.
    pub fn create_unnamed(self, mode: u32) -> Result<OwnedFd> {
        openat(self.0, ".", super::UNNAMED, Mode::from_raw_mode(mode))
    }

    /// Makes the folder `name` with permission bits `mode` (less the umask).
    pub fn mkdir<P: Arg + Copy>(self, name: P, mode: u32) -> Result<()> {
        mkdirat(self.0, name, Mode::from_raw_mode(mode))
    }

    /// Makes `name` a symlink whose text is `target` (never followed to make it).
    pub fn symlink<P: Arg + Copy, Q: Arg + Copy>(self, target: P, name: Q) -> Result<()> {
        symlinkat(target, self.0, name)
    }

    /// Makes `name` a FIFO, socket or device node.
    pub fn mknod<P: Arg + Copy>(self, name: P, file_type: FileType, mode: u32, dev: Dev) -> Result<()> {
        mknodat(self.0, name, file_type, Mode::from_raw_mode(mode), dev)
    }

    /// Makes `name` a hard link to `old` in the folder `from`: to `old` itself, a symlink
    /// there included, never to what it points at.
    pub fn link<P: Arg + Copy, Q: Arg + Copy>(self, from: DirFd<'_>, old: P, name: Q) -> Result<()> {
        linkat(from.0, old, self.0, name, AtFlags::empty())
    }

    /// Renames `name` to `new` in the folder `to`, replacing what is there (not a folder by a
    /// file, nor a non-empty folder).
    pub fn rename<P: Arg + Copy, Q: Arg + Copy>(self, name: P, to: DirFd<'_>, new: Q) -> Result<()> {
        renameat(self.0, name, to.0, new)
    }

    /// Removes the name `name` (not a folder: EISDIR).
    pub fn unlink<P: Arg + Copy>(self, name: P) -> Result<()> {
        unlinkat(self.0, name, AtFlags::empty())
    }

    /// Removes the empty folder `name`.
    pub fn rmdir<P: Arg + Copy>(self, name: P) -> Result<()> {
        unlinkat(self.0, name, AtFlags::REMOVEDIR)
    }

    /// What `name` is (a symlink there is described, not followed).
    pub fn stat<P: Arg + Copy>(self, name: P) -> Result<Stat> {
        statat(self.0, name, AtFlags::SYMLINK_NOFOLLOW)
    }

    /// The text of the symlink `name`.
    pub fn readlink<P: Arg + Copy>(self, name: P) -> Result<CString> {
        readlinkat(self.0, name)
    }

    /// Sets the access and modification times of `name` itself (a symlink's own).
    pub fn set_times<P: Arg + Copy>(self, name: P, times: &Timestamps) -> Result<()> {
        utimensat(self.0, name, times, AtFlags::SYMLINK_NOFOLLOW)
    }

    /// Sets the owner and group of `name` itself (a symlink's own); `None` leaves one as it is.
    pub fn set_owner<P: Arg + Copy>(self, name: P, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
        chownat(self.0, name, uid, gid, AtFlags::SYMLINK_NOFOLLOW)
    }

    /// Sets the permission bits of `name`, which must not be a symlink: Linux has no mode of
    /// a symlink to set, and fchmodat follows one (`AT_SYMLINK_NOFOLLOW` is EOPNOTSUPP there).
    /// The caller knows what it made at `name`; a symlink found there is refused (ELOOP), not
    /// followed.
    pub fn set_mode<P: Arg + Copy>(self, name: P, mode: u32) -> Result<()> {
        let st = self.stat(name)?;
        if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
            return Err(rustix::io::Errno::LOOP);
        }
        chmodat(self.0, name, mode, AtFlags::empty())
    }
}

impl<'a> From<BorrowedFd<'a>> for DirFd<'a> {
    fn from(fd: BorrowedFd<'a>) -> DirFd<'a> {
        DirFd(fd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// Each call on a name leaves a symlink at that name alone: it is the name's own, never
    /// its target's (which stays as it was).
    #[test]
    fn a_symlink_at_the_name_is_never_followed() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("target");
        std::fs::write(&target, b"keep").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::os::unix::fs::symlink(&target, d.path().join("l")).unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::os::unix::fs::symlink(d.path().join("sub"), d.path().join("dl")).unwrap();
        let fd = rustix::fs::open(d.path(), OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let dir = DirFd::of(&fd);

        assert_eq!(dir.create_new("l", OFlags::WRONLY, 0o600).unwrap_err(), rustix::io::Errno::EXIST);
        assert!(matches!(dir.open_dir("dl").unwrap_err(), rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR));
        assert!(matches!(dir.look_dir("dl").unwrap_err(), rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR));
        assert!(matches!(
            dir.look_dir_beneath("dl").unwrap_err(),
            rustix::io::Errno::LOOP | rustix::io::Errno::XDEV | rustix::io::Errno::NOSYS | rustix::io::Errno::PERM
        ));
        assert_eq!(dir.set_mode("l", 0o600).unwrap_err(), rustix::io::Errno::LOOP);
        let ts = crate::sys::timestamps(Some((1, 0)), Some((2, 0)));
        dir.set_times("l", &ts).unwrap();
        dir.set_owner("l", None, Some(0)).unwrap();
        assert_eq!(FileType::from_raw_mode(dir.stat("l").unwrap().st_mode), FileType::Symlink);
        assert_eq!(dir.stat("l").unwrap().st_mtime, 2, "the link's own time was set");
        let t = std::fs::metadata(&target).unwrap();
        assert_eq!((t.mode() & 0o7777, t.mtime() == 2), (0o644, false), "the target is untouched");
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        dir.link(dir, "l", "l2").unwrap();
        assert_eq!(FileType::from_raw_mode(dir.stat("l2").unwrap().st_mode), FileType::Symlink, "a link to the symlink, not its target");
        dir.unlink("l2").unwrap();
        assert_eq!(dir.unlink("sub").unwrap_err(), rustix::io::Errno::ISDIR);
    }

    /// Making, renaming and removing names through the folder, byte-exact against std's view.
    #[test]
    fn names_are_made_renamed_and_removed_in_the_folder() {
        let d = tempfile::tempdir().unwrap();
        let fd = rustix::fs::open(d.path(), OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let dir = DirFd::of(&fd);
        let f = dir.create_new("f", OFlags::WRONLY, 0o600).unwrap();
        rustix::io::write(&f, b"data").unwrap();
        let flags = rustix::io::fcntl_getfd(&f).unwrap();
        assert!(flags.contains(rustix::io::FdFlags::CLOEXEC), "no descriptor leaks into a child");
        dir.mkdir("d", 0o755).unwrap();
        assert_eq!(dir.mkdir("d", 0o755).unwrap_err(), rustix::io::Errno::EXIST);
        let sub = dir.look_dir("d").unwrap();
        dir.rename("f", DirFd::of(&sub), "g").unwrap();
        assert_eq!(std::fs::read(d.path().join("d/g")).unwrap(), b"data");
        dir.symlink("d/g", "s").unwrap();
        assert_eq!(dir.readlink("s").unwrap().as_bytes(), b"d/g");
        dir.set_mode("d", 0o700).unwrap();
        assert_eq!(std::fs::metadata(d.path().join("d")).unwrap().mode() & 0o7777, 0o700);
        let beneath = dir.look_dir_beneath("d");
        if let Ok(b) = beneath {
            DirFd::of(&b).unlink("g").unwrap();
        } else {
            DirFd::of(&sub).unlink("g").unwrap();
        }
        dir.rmdir("d").unwrap();
        dir.unlink("s").unwrap();
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
        if let Ok(u) = dir.create_unnamed(0o600) {
            assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0, "an unnamed file has no name");
            drop(u);
        }
    }
}
