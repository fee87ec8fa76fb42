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
    Ok(dir_names(dir, NameOrder::Listed)?.iter().map(std::ffi::OsStr::to_os_string).collect())
}

/// The folder above the open folder `dir` (its `..`), open for reading, with its device and
/// inode: a walk by descriptor goes back up through it and checks it is where it came from (a
/// look).
pub fn parent_dir(dir: impl AsFd) -> Result<(OwnedFd, (u64, u64))> {
    let up = lookat(dir, "..", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC)?;
    let st = fstat(&up)?;
    Ok((up, (st.st_dev, st.st_ino)))
}

/// In which order [`dir_names`] gives a folder's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameOrder {
    /// As the folder lists them.
    Listed,
    /// By their bytes.
    Name,
    /// By inode number (a large folder's inodes then come in disk order), names of one inode
    /// in the order the folder lists them (a stable sort), as GNU cp copies them.
    Inode,
}

/// A folder's names, packed: each ends in a NUL in one buffer, with where each begins (about
/// five bytes per name beyond its bytes, where a `Vec<OsString>` costs forty or more), so a
/// walk over folders of a million entries holds them in little more than their bytes.
#[derive(Debug, Default)]
pub struct DirNames {
    buf: Vec<u8>,
    starts: Vec<u32>,
}

impl DirNames {
    /// How many names.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// The `i`th name.
    pub fn get(&self, i: usize) -> Option<&std::ffi::OsStr> {
        use std::os::unix::ffi::OsStrExt;
        let &at = self.starts.get(i)?;
        Some(std::ffi::OsStr::from_bytes(name_at(&self.buf, at)))
    }

    /// The names in order.
    pub fn iter(&self) -> impl Iterator<Item = &std::ffi::OsStr> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }
}

fn name_at(buf: &[u8], at: u32) -> &[u8] {
    let rest = buf.get(at as usize..).unwrap_or_default();
    &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())]
}

/// The names in the open folder `dir` (not `.` and `..`) in `order`, packed (a look).
pub fn dir_names(dir: impl AsFd, order: NameOrder) -> io::Result<DirNames> {
    let mut buf = Vec::new();
    let mut starts: Vec<u32> = Vec::new();
    // Inode numbers only where they order the names (eight more bytes a name while sorting).
    let mut inos: Vec<u64> = Vec::new();
    for e in rustix::fs::Dir::read_from(dir.as_fd())? {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n == b"." || n == b".." {
            continue;
        }
        let at = u32::try_from(buf.len()).map_err(|_| io::Error::other("more names in one folder than a walk holds (4 GiB of them)"))?;
        starts.push(at);
        if order == NameOrder::Inode {
            inos.push(e.ino());
        }
        buf.extend_from_slice(n);
        buf.push(0);
    }
    match order {
        NameOrder::Listed => {}
        NameOrder::Inode => {
            let mut pairs: Vec<(u64, u32)> = inos.into_iter().zip(starts).collect();
            pairs.sort_by_key(|&(ino, _)| ino);
            starts = pairs.into_iter().map(|(_, at)| at).collect();
        }
        NameOrder::Name => starts.sort_unstable_by(|&a, &b| name_at(&buf, a).cmp(name_at(&buf, b))),
    }
    buf.shrink_to_fit();
    starts.shrink_to_fit();
    Ok(DirNames { buf, starts })
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::DirEntryExt;

    /// The packed names are the folder's, byte for byte (names that are not UTF-8, long ones,
    /// hard links), in the order each asks: as the standard library's listing lists them, by
    /// bytes, by inode with hard links in listing order.
    #[test]
    fn dir_names_are_the_listing_in_the_order_asked() {
        use std::os::unix::ffi::OsStrExt;
        let d = tempfile::tempdir().unwrap();
        let mut made = Vec::new();
        for i in 0..500u32 {
            let name = match i % 4 {
                0 => std::ffi::OsString::from(format!("f{i}")),
                1 => std::ffi::OsStr::from_bytes(&[b"x\xff-".as_slice(), i.to_string().as_bytes()].concat()).to_os_string(),
                2 => std::ffi::OsString::from("l".repeat(200) + &i.to_string()),
                _ => std::ffi::OsString::from(format!("link{i}")),
            };
            if i % 4 == 3 {
                std::fs::hard_link(d.path().join(&made[0]), d.path().join(&name)).unwrap();
            } else {
                std::fs::write(d.path().join(&name), b"").unwrap();
            }
            made.push(name);
        }
        std::fs::create_dir(d.path().join("sub")).unwrap();
        let listed: Vec<(u64, std::ffi::OsString)> = std::fs::read_dir(d.path()).unwrap().map(|e| e.map(|e| (e.ino(), e.file_name())).unwrap()).collect();
        let fd = look(d.path(), OFlags::RDONLY | OFlags::DIRECTORY).unwrap();
        let got = |o| dir_names(&fd, o).unwrap().iter().map(|n| n.to_os_string()).collect::<Vec<_>>();
        assert_eq!(got(NameOrder::Listed), listed.iter().map(|e| e.1.clone()).collect::<Vec<_>>());
        let mut by_name: Vec<_> = listed.iter().map(|e| e.1.clone()).collect();
        by_name.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        assert_eq!(got(NameOrder::Name), by_name);
        let mut by_ino = listed.clone();
        by_ino.sort_by_key(|e| e.0);
        assert_eq!(got(NameOrder::Inode), by_ino.into_iter().map(|e| e.1).collect::<Vec<_>>());
        assert_eq!(dir_names(&fd, NameOrder::Listed).unwrap().len(), 501, "every name once");
    }
}
