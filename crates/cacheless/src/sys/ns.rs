//! Namespace calls: opening, making, linking, renaming and removing names, and looking at them.
//! Opens and makes are [`Site::Open`], renames [`Site::Rename`]; looks and removals retry
//! EINTR only (see the module above).

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{AtFlags, Dev, FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Result;
use rustix::path::Arg;

use super::{quiet, retry, Site};

/// open(2).
pub fn open<P: Arg + Copy>(path: P, flags: OFlags, mode: Mode) -> Result<OwnedFd> {
    retry(Site::Open, || rustix::fs::open(path, flags, mode))
}

/// openat(2).
pub fn openat<P: Arg + Copy>(dir: impl AsFd, path: P, flags: OFlags, mode: Mode) -> Result<OwnedFd> {
    let dir = dir.as_fd();
    retry(Site::Open, || rustix::fs::openat(dir, path, flags, mode))
}

/// openat2(2) (Linux 5.6) with `resolve`'s restrictions.
pub fn openat2<P: Arg + Copy>(dir: impl AsFd, path: P, flags: OFlags, mode: Mode, resolve: ResolveFlags) -> Result<OwnedFd> {
    let dir = dir.as_fd();
    retry(Site::Open, || rustix::fs::openat2(dir, path, flags, mode, resolve))
}

/// openat(2) where a FIFO's open could wait for ever for its other end (a reader for a writer,
/// a writer for a reader): a FIFO (as a look at the name says) is opened without blocking
/// (O_NONBLOCK, cleared once open), and a writer with no
/// reader yet tries again every 50 ms, until the user asks to stop ([`crate::interrupt`]:
/// ECANCELED). Anything else is opened as [`openat`] opens it.
pub fn open_interruptible<P: Arg + Copy>(dir: impl AsFd, path: P, flags: OFlags, mode: Mode) -> Result<OwnedFd> {
    let dir = dir.as_fd();
    let follow = if flags.contains(OFlags::NOFOLLOW) { AtFlags::SYMLINK_NOFOLLOW } else { AtFlags::empty() };
    let fifo = quiet(|| rustix::fs::statat(dir, path, follow)).is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Fifo);
    if !fifo {
        return openat(dir, path, flags, mode);
    }
    loop {
        match openat(dir, path, flags | OFlags::NONBLOCK, mode) {
            Err(rustix::io::Errno::NXIO) => {
                if crate::interrupt::requested() {
                    return Err(rustix::io::Errno::CANCELED);
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            // Open: blocking again, as every reader and writer of the engine expects (a
            // write to a full pipe waits; `sys::read` waits with poll first, so a reader
            // whose writer has not come yet still ends on a signal).
            Ok(fd) => {
                let fl = quiet(|| rustix::fs::fcntl_getfl(&fd))?;
                quiet(|| rustix::fs::fcntl_setfl(&fd, fl - OFlags::NONBLOCK))?;
                return Ok(fd);
            }
            Err(e) => return Err(e),
        }
    }
}

/// mkdirat(2).
pub fn mkdirat<P: Arg + Copy>(dir: impl AsFd, path: P, mode: Mode) -> Result<()> {
    let dir = dir.as_fd();
    retry(Site::Open, || rustix::fs::mkdirat(dir, path, mode))
}

/// `mkdir -p`: the folder `path` and those leading to it, each made with mkdirat(2) (mode 0777
/// less the umask) where missing, following the symbolic links of the path as the caller wrote
/// it (a destination it named); an existing folder is no error, an entry of another type is.
pub fn mkdir_all(path: &std::path::Path) -> io::Result<()> {
    match mkdirat(rustix::fs::CWD, path, Mode::from_raw_mode(0o777)) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::EXIST) if path.is_dir() => Ok(()),
        Err(rustix::io::Errno::NOENT) => {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                mkdir_all(parent)?;
            }
            match mkdirat(rustix::fs::CWD, path, Mode::from_raw_mode(0o777)) {
                Err(rustix::io::Errno::EXIST) if path.is_dir() => Ok(()),
                r => r.map_err(io::Error::from),
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// symlinkat(2): `path` in `dir` made a symlink whose text is `target`.
pub fn symlinkat<P: Arg + Copy, Q: Arg + Copy>(target: P, dir: impl AsFd, path: Q) -> Result<()> {
    let dir = dir.as_fd();
    retry(Site::Open, || rustix::fs::symlinkat(target, dir, path))
}

/// linkat(2).
pub fn linkat<P: Arg + Copy, Q: Arg + Copy>(old_dir: impl AsFd, old: P, new_dir: impl AsFd, new: Q, flags: AtFlags) -> Result<()> {
    let (old_dir, new_dir) = (old_dir.as_fd(), new_dir.as_fd());
    retry(Site::Open, || rustix::fs::linkat(old_dir, old, new_dir, new, flags))
}

/// mknodat(2): a FIFO, socket or device node.
pub fn mknodat<P: Arg + Copy>(dir: impl AsFd, path: P, file_type: FileType, mode: Mode, dev: Dev) -> Result<()> {
    let dir = dir.as_fd();
    retry(Site::Open, || rustix::fs::mknodat(dir, path, file_type, mode, dev))
}

/// renameat(2).
pub fn renameat<P: Arg + Copy, Q: Arg + Copy>(old_dir: impl AsFd, old: P, new_dir: impl AsFd, new: Q) -> Result<()> {
    let (old_dir, new_dir) = (old_dir.as_fd(), new_dir.as_fd());
    retry(Site::Rename, || rustix::fs::renameat(old_dir, old, new_dir, new))
}

/// unlinkat(2) (a removal: no fault site).
pub fn unlinkat<P: Arg + Copy>(dir: impl AsFd, path: P, flags: AtFlags) -> Result<()> {
    let dir = dir.as_fd();
    quiet(|| rustix::fs::unlinkat(dir, path, flags))
}

/// stat(2) (a look).
pub fn stat<P: Arg + Copy>(path: P) -> Result<Stat> {
    quiet(|| rustix::fs::stat(path))
}

/// fstatat(2) (a look).
pub fn statat<P: Arg + Copy>(dir: impl AsFd, path: P, flags: AtFlags) -> Result<Stat> {
    let dir = dir.as_fd();
    quiet(|| rustix::fs::statat(dir, path, flags))
}

/// fstat(2) (a look).
pub fn fstat(fd: impl AsFd) -> Result<Stat> {
    let fd = fd.as_fd();
    quiet(|| rustix::fs::fstat(fd))
}

/// readlinkat(2) (a look).
pub fn readlinkat<P: Arg + Copy>(dir: impl AsFd, path: P) -> Result<std::ffi::CString> {
    let dir = dir.as_fd();
    quiet(|| rustix::fs::readlinkat(dir, path, Vec::new()))
}

/// faccessat(2) (a look).
pub fn accessat<P: Arg + Copy>(dir: impl AsFd, path: P, access: rustix::fs::Access, flags: AtFlags) -> Result<()> {
    let dir = dir.as_fd();
    quiet(|| rustix::fs::accessat(dir, path, access, flags))
}

/// The names in the open folder `dir` (not `.` and `..`), in the order it lists them (a look).
pub fn entry_names(dir: impl AsFd) -> io::Result<Vec<std::ffi::OsString>> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = Vec::new();
    each_entry(dir, |n| out.push(std::ffi::OsStr::from_bytes(n).to_os_string()))?;
    Ok(out)
}

/// Hands `each` every name in the open folder `dir` (not `.` and `..`), in the order it lists
/// them, with no allocation per name (a look): a walk over a folder of a million entries keeps
/// them packed.
pub fn each_entry(dir: impl AsFd, mut each: impl FnMut(&[u8])) -> io::Result<()> {
    for e in rustix::fs::Dir::read_from(dir.as_fd())? {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            each(n);
        }
    }
    Ok(())
}

/// open(2) of what is there, to look at it or to resolve a path through it (never O_CREAT): a
/// look, no fault site (a caller may fall back to another open where it fails).
pub fn look<P: Arg + Copy>(path: P, flags: OFlags) -> Result<OwnedFd> {
    quiet(|| rustix::fs::open(path, flags, Mode::empty()))
}

/// openat(2) as [`look`].
pub fn lookat<P: Arg + Copy>(dir: impl AsFd, path: P, flags: OFlags) -> Result<OwnedFd> {
    let dir = dir.as_fd();
    quiet(|| rustix::fs::openat(dir, path, flags, Mode::empty()))
}

/// openat2(2) as [`look`], with `resolve`'s restrictions.
pub fn lookat2<P: Arg + Copy>(dir: impl AsFd, path: P, flags: OFlags, resolve: ResolveFlags) -> Result<OwnedFd> {
    let dir = dir.as_fd();
    quiet(|| rustix::fs::openat2(dir, path, flags, Mode::empty(), resolve))
}
