//! A file's data and its making: creating a file under a temporary name or without one
//! (O_TMPFILE) and linking it, the read and write loops (short counts, EINTR, EAGAIN), O_DIRECT
//! on and off, uncached writes (RWF_DONTCACHE).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::OFlags;
use rustix::io::Errno;

use super::{call, publish, Site};
pub use crate::caps::RwFlags;
use crate::caps::{self, FsCaps};
use crate::error::{Error, ErrorKind, Result};
use crate::fault::{self, Injected};

/// Makes an entry under a temporary name beside `name` in `dir` (see [`crate::sys::temps::temp_name`]) with
/// `make(dir, temporary)` (through [`call`]), which must fail with EEXIST where the name is
/// taken (an exclusive create, mknodat, symlinkat, linkat): another name is tried then.
/// Returns what `make` gave, the name, and this process's claim on the folder, taken before
/// the name was made: the caller keeps it until the name is renamed or removed, and until then
/// no cleaner takes the name (see [`crate::sys::temps`]).
pub fn beside<T>(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    make: impl FnMut(BorrowedFd<'_>, &OsStr) -> io::Result<T>,
) -> io::Result<(T, OsString, crate::temps::Claim)> {
    beside_claimed(dir, name, true, make)
}

/// [`beside`] for a regular file its caller holds open and locks at once
/// (`hold_file`): that lock proves its writer alive, and no claim on the folder
/// is taken (a claim costs a descriptor of the folder, which a job under a tight open-files
/// limit has not to spare).
pub fn beside_held<T>(dir: BorrowedFd<'_>, name: &OsStr, make: impl FnMut(BorrowedFd<'_>, &OsStr) -> io::Result<T>) -> io::Result<(T, OsString)> {
    beside_claimed(dir, name, false, make).map(|(v, t, _)| (v, t))
}

fn beside_claimed<T>(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    claimed: bool,
    mut make: impl FnMut(BorrowedFd<'_>, &OsStr) -> io::Result<T>,
) -> io::Result<(T, OsString, crate::temps::Claim)> {
    let claim = if claimed { crate::sys::temps::claim(dir) } else { crate::temps::Claim::default() };
    let mut tries = 0;
    loop {
        let t = crate::sys::temps::temp_name(name);
        match make(dir, &t) {
            Ok(v) => return Ok((v, t, claim)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 100 => tries += 1,
            Err(e) => return Err(e),
        }
    }
}

/// The flags of a file created without a name (O_TMPFILE), read-write.
pub const UNNAMED: OFlags = OFlags::TMPFILE.union(OFlags::RDWR).union(OFlags::CLOEXEC);

/// Whether files may be created without a name (O_TMPFILE) in the folder `dir`: not switched
/// off, and not refused by its filesystem so far ([`caps::tmpfile`]; the folder is looked at
/// only once some filesystem refused).
pub fn tmpfile_available(dir: BorrowedFd<'_>) -> bool {
    if !caps::tmpfile_refused_somewhere() {
        return !crate::env::disabled("tmpfile");
    }
    super::fstat(dir).map_or(true, |st| caps::tmpfile(st.st_dev).is_ok())
}

/// Whether `e`, the error of an O_TMPFILE open in the folder `dir`, says its filesystem (or the
/// kernel) has none; remembered for that filesystem (`refuse_tmpfile`).
pub fn tmpfile_refused(e: &io::Error, dir: BorrowedFd<'_>) -> bool {
    let refused = caps::says_no_tmpfile(e);
    if refused {
        if let Ok(st) = super::fstat(dir) {
            caps::refuse_tmpfile(st.st_dev, e);
        }
    }
    refused
}

/// Gives the unnamed file `file` (created with [`UNNAMED`]) the name `name` in `dir`, replacing
/// a file or symlink there: linked under it where it is free, else under a temporary name
/// renamed over it. `path` names it in errors.
pub fn link_unnamed(file: &File, dir: BorrowedFd<'_>, name: &OsStr, path: &Path) -> Result<()> {
    match link_fd(file, dir, name) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let ((), tmp, _claim) = beside(dir, name, |dir, t| link_fd(file, dir, t)).map_err(|e| Error::io("link", path, e))?;
            publish(dir, &tmp, name, path, false).map_err(|u| {
                let _ = super::unlinkat(dir, tmp.as_os_str(), rustix::fs::AtFlags::empty());
                *u.error
            })
        }
        Err(e) => Err(Error::io("link", path, e)),
    }
}

/// How files written by a creator that names them after their syncfs got their names so far
/// (without a name, see [`UNNAMED`], then [`link_unnamed`]), in words for reports.
pub fn naming() -> String {
    let created = if crate::env::disabled("tmpfile") {
        "under temporary names (.NAME.cacheless-BOOT-PID-N.lk.tmp; O_TMPFILE disabled), renamed".to_string()
    } else if caps::tmpfile_refused_somewhere() {
        "under temporary names (.NAME.cacheless-BOOT-PID-N.lk.tmp; O_TMPFILE unsupported), renamed".to_string()
    } else {
        match caps::flink() {
            Ok(()) => "without a name (O_TMPFILE), linked (linkat AT_EMPTY_PATH)".to_string(),
            Err(_) => format!(
                "without a name (O_TMPFILE), linked through /proc/self/fd (linkat AT_EMPTY_PATH {})",
                if crate::env::disabled("flink") { "disabled" } else { "refused" }
            ),
        }
    };
    format!("{created} after the syncfs of their batch")
}

/// linkat of an open file to `name` in `dir`.
pub fn link_fd(file: &File, dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    use rustix::fs::AtFlags;
    if caps::flink().is_ok() {
        match super::linkat(file, "", dir, name, AtFlags::EMPTY_PATH).map_err(io::Error::from) {
            Err(e) if matches!(Errno::from_io_error(&e), Some(Errno::NOENT | Errno::PERM)) => caps::refuse_flink(&e),
            r => return r,
        }
    }
    let proc = super::proc_fd_path(file.as_fd());
    super::linkat(rustix::fs::CWD, proc.as_str(), dir, name, AtFlags::SYMLINK_FOLLOW).map_err(io::Error::from)
}

/// Opens the directory `path` would be created in, and returns it with `path`'s file name.
pub fn open_parent(path: &Path) -> Result<(OwnedFd, &OsStr)> {
    let name = path.file_name().ok_or_else(|| Error::new(ErrorKind::InvalidInput, "create", path, "no file name"))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = super::look(parent, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC).map_err(|e| Error::io("open directory", parent, e.into()))?;
    Ok((dir, name))
}

/// Whether `file` is open with O_DIRECT.
pub fn is_direct(file: &File) -> bool {
    rustix::fs::fcntl_getfl(file).is_ok_and(|f| f.contains(OFlags::DIRECT))
}

/// Turns O_DIRECT on or off for an open file (fcntl F_SETFL).
pub fn set_direct(file: &File, on: bool) -> io::Result<()> {
    use rustix::fs::OFlags;
    let fl = rustix::fs::fcntl_getfl(file)?;
    let fl = if on { fl | OFlags::DIRECT } else { fl - OFlags::DIRECT };
    rustix::fs::fcntl_setfl(file, fl)?;
    Ok(())
}

/// Checks that `name` is a single path component that names an entry.
pub fn check_name(op: &'static str, path: &Path, name: &OsStr) -> Result<()> {
    if name.is_empty() || name.as_encoded_bytes().contains(&b'/') || name == ".." || name == "." {
        return Err(Error::new(ErrorKind::InvalidInput, op, path, "not a single file name"));
    }
    Ok(())
}

/// The length a read or write of `len` bytes at `site` goes on with, or the error it fails with,
/// under a planned fault (`len` itself where none is planned).
fn injected(site: Site, file: &File, len: usize) -> Result<usize, Errno> {
    match fault::check(site, len, || is_direct(file)) {
        Some(Injected::Errno(e)) => Err(Errno::from_raw_os_error(e)),
        Some(Injected::Short(n)) => Ok(n.min(len)),
        None => Ok(len),
    }
}

/// pwrite/pwritev2 until all of `data` is written at `off`: short counts carry on from where
/// they stopped, EINTR and EAGAIN are retried (as the backends do).
pub fn write_full(file: &File, mut data: &[u8], mut off: u64, flags: RwFlags) -> io::Result<()> {
    while !data.is_empty() {
        let r = injected(Site::Write, file, data.len()).and_then(|len| {
            if flags == RwFlags::NONE {
                rustix::io::pwrite(file.as_fd(), &data[..len], off)
            } else {
                rustix::io::pwritev2(file.as_fd(), &[io::IoSlice::new(&data[..len])], off, flags.for_rustix())
            }
        });
        match r {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0")),
            Ok(n) => {
                data = &data[n..];
                off += n as u64;
            }
            Err(e) if e == Errno::INTR => {}
            // A pipe or FIFO opened without blocking, full: until its reader takes some.
            Err(e) if e == Errno::AGAIN => wait_ready(file.as_fd(), rustix::event::PollFlags::OUT)?,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// One pread/preadv2 of up to `buf.len()` bytes at `off` (short only at end of file, or where
/// the caller decides), with EINTR and EAGAIN retried.
pub fn read_once(file: &File, buf: &mut [u8], off: u64, flags: RwFlags) -> io::Result<usize> {
    loop {
        let r = injected(Site::Read, file, buf.len()).and_then(|len| {
            if flags == RwFlags::NONE {
                rustix::io::pread(file.as_fd(), &mut buf[..len], off)
            } else {
                rustix::io::preadv2(file.as_fd(), &mut [io::IoSliceMut::new(&mut buf[..len])], off, flags.for_rustix())
            }
        });
        match r {
            Err(e) if e == Errno::INTR || e == Errno::AGAIN => {}
            r => return r.map_err(io::Error::from),
        }
    }
}

/// Whether a write's error says the filesystem refuses RWF_DONTCACHE (it does so before any
/// I/O, so nothing was written).
pub fn dontcache_refused(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL))
}

/// Writes `data` at `off` buffered, uncached (RWF_DONTCACHE) where the filesystem takes it,
/// else plainly. A refusal the probe could not foresee is remembered for the filesystem.
/// Returns whether the pages stay cached (the caller drops them).
pub fn write_uncached(file: &File, data: &[u8], off: u64, caps: &FsCaps) -> io::Result<bool> {
    if caps.dontcache.is_ok() {
        match write_full(file, data, off, RwFlags::DONTCACHE) {
            Ok(()) => return Ok(false),
            Err(e) if dontcache_refused(&e) => caps::refuse_dontcache(caps.dev, &e),
            Err(e) => return Err(e),
        }
    }
    write_full(file, data, off, RwFlags::NONE)?;
    Ok(true)
}

/// read(2) from the file position, at [`Site::Read`] (EINTR and EAGAIN retried). It waits for
/// data with poll(2) first, in slices, so that a pipe, FIFO or terminal whose writer never
/// writes (or never comes) ends (ECANCELED: not EINTR, which readers retry) once the user asks to stop ([`crate::interrupt`]).
pub fn read(fd: impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
    let fd = fd.as_fd();
    loop {
        wait_ready(fd, rustix::event::PollFlags::IN)?;
        match call(Site::Read, || rustix::io::read(fd, &mut *buf)) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            r => return r,
        }
    }
}

/// A pipe, FIFO, terminal or other stream (standard input: `FdStream(io::stdin())`) read with
/// [`read`], not through the standard library's buffer: one whose writer never writes ends
/// (ECANCELED: not EINTR, which readers retry) once the user asks to stop.
#[derive(Debug)]
pub struct FdStream<F: AsFd>(pub F);

impl<F: AsFd> io::Read for FdStream<F> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        read(self.0.as_fd(), buf)
    }
}

/// Waits until `fd` is ready for `events` (or hung up, or in error: the next call says), in
/// slices of 100 ms; ECANCELED once the user asks to stop ([`crate::interrupt::cancelled`]). A
/// regular file is always ready.
pub fn wait_ready(fd: BorrowedFd<'_>, events: rustix::event::PollFlags) -> io::Result<()> {
    loop {
        if crate::interrupt::requested() {
            return Err(crate::interrupt::cancelled());
        }
        let mut p = [rustix::event::PollFd::from_borrowed_fd(fd, events)];
        let slice = rustix::event::Timespec { tv_sec: 0, tv_nsec: 100_000_000 };
        match rustix::event::poll(&mut p, Some(&slice)) {
            Ok(0) | Err(Errno::INTR) => {}
            Ok(_) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
}

/// pread(2) at `off`, at [`Site::Read`] (EINTR retried).
pub fn pread(fd: impl AsFd, buf: &mut [u8], off: u64) -> io::Result<usize> {
    let fd = fd.as_fd();
    call(Site::Read, || rustix::io::pread(fd, &mut *buf, off))
}

/// posix_fadvise(2) over the whole file (advice: nothing to report when it is not taken).
pub fn fadvise(fd: impl AsFd, advice: rustix::fs::Advice) {
    let _ = rustix::fs::fadvise(fd.as_fd(), 0, None, advice);
}

/// fallocate(2) of `len` bytes from 0 (space reserved, the size kept as it is where `keep`).
pub fn fallocate(fd: impl AsFd, len: u64, keep: bool) -> rustix::io::Result<()> {
    let flags = if keep { rustix::fs::FallocateFlags::KEEP_SIZE } else { rustix::fs::FallocateFlags::empty() };
    let fd = fd.as_fd();
    super::quiet(|| rustix::fs::fallocate(fd, flags, 0, len))
}

/// FICLONE: `dst` made to share all of `src`'s extents (a reflink; a look at whether the
/// filesystem can, no fault site: a refusal falls back to copying).
pub fn ficlone(dst: impl AsFd, src: impl AsFd) -> rustix::io::Result<()> {
    let (dst, src) = (dst.as_fd(), src.as_fd());
    super::quiet(|| rustix::fs::ioctl_ficlone(dst, src))
}

/// lseek(2) to `to` (SEEK_DATA and SEEK_HOLE find a sparse file's data).
pub fn seek(fd: impl AsFd, to: rustix::fs::SeekFrom) -> rustix::io::Result<u64> {
    let fd = fd.as_fd();
    super::quiet(|| rustix::fs::seek(fd, to))
}

/// write(2) until all of `data` is written at the file position (a pipe or a terminal: standard
/// output), EINTR retried; no fault site (it is no file the engine makes).
pub fn write_all(fd: impl AsFd, mut data: &[u8]) -> io::Result<()> {
    let fd = fd.as_fd();
    while !data.is_empty() {
        let n = super::quiet(|| rustix::io::write(fd, data))?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0"));
        }
        data = &data[n..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::Mode as FMode;

    #[test]
    fn a_temporary_is_made_beside_the_longest_name() {
        // And the file can be made.
        let d = tempfile::tempdir().unwrap();
        let dir = File::open(d.path()).unwrap();
        let name = OsString::from("é".repeat(127));
        let (_fd, t, _claim) =
            beside(dir.as_fd(), &name, |dir, t| Ok(rustix::fs::openat(dir, t, OFlags::CREATE | OFlags::EXCL | OFlags::RDWR, FMode::from_raw_mode(0o600))?))
                .unwrap();
        assert!(d.path().join(&t).exists());
    }
}
