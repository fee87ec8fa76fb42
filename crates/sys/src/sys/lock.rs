//! Open-file-description locks (`F_OFD_SETLK`, `F_OFD_GETLK`; Linux 3.15): how the writer of a
//! temporary shows that it is alive to any other process, in any PID namespace, and (for a
//! regular file on NFSv4) on another machine. Such a lock belongs to an open file description,
//! not to a process: the kernel drops it when the last descriptor of that description closes,
//! which a process's death does, however it dies. Nothing here waits for long: a blocking take
//! waits only for a cleaner's own brief look (see [`crate::temps`]).

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// A lock's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// Shared (F_RDLCK): needs a descriptor open for reading.
    Shared,
    /// Exclusive (F_WRLCK): needs a descriptor open for writing.
    Exclusive,
}

/// The bytes a lock covers: the whole file, or one byte at an offset (a slot; the bytes of a
/// folder are no data, so a slot names whatever its users agree on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockRange {
    /// Every byte of the file.
    Whole,
    /// The one byte at this offset.
    Byte(u64),
}

/// A `short` constant of fcntl.h (every lock type and whence fits: 0 to 2).
fn short(v: libc::c_int) -> libc::c_short {
    libc::c_short::try_from(v).unwrap_or(libc::c_short::MAX)
}

fn flock(kind: libc::c_short, range: LockRange) -> libc::flock {
    // SAFETY: `flock` is plain data; all-zero is a valid value of every field.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = kind;
    l.l_whence = short(libc::SEEK_SET);
    (l.l_start, l.l_len) = match range {
        LockRange::Whole => (0, 0),
        LockRange::Byte(at) => (i64::try_from(at).unwrap_or(i64::MAX - 1), 1),
    };
    l
}

fn fcntl(fd: BorrowedFd<'_>, cmd: libc::c_int, l: &mut libc::flock) -> io::Result<()> {
    loop {
        // SAFETY: `fd` is a live descriptor for the call's length; `l` is a valid, exclusively
        // borrowed `struct flock` the kernel reads (and for F_OFD_GETLK writes).
        let r = unsafe { libc::fcntl(fd.as_raw_fd(), cmd, l as *mut libc::flock) };
        if r != -1 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

fn code(kind: LockKind) -> libc::c_short {
    match kind {
        LockKind::Shared => short(libc::F_RDLCK),
        LockKind::Exclusive => short(libc::F_WRLCK),
    }
}

/// Takes a lock of `kind` on `range` of `fd`'s open file description, waiting while another
/// description holds one that conflicts. Held until every descriptor of the description is
/// closed (or it is taken again with another kind).
pub fn lock_wait(fd: BorrowedFd<'_>, kind: LockKind, range: LockRange) -> io::Result<()> {
    fcntl(fd, libc::F_OFD_SETLKW, &mut flock(code(kind), range))
}

/// Takes a lock of `kind` on `range` without waiting: `false` where another description holds
/// one that conflicts.
pub fn try_lock(fd: BorrowedFd<'_>, kind: LockKind, range: LockRange) -> io::Result<bool> {
    match fcntl(fd, libc::F_OFD_SETLK, &mut flock(code(kind), range)) {
        Ok(()) => Ok(true),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether another open file description holds any lock on `range` of `fd`'s file (one an
/// exclusive lock would conflict with); asks only, takes nothing. Any descriptor will do, read
/// access or none of it.
pub fn is_locked(fd: BorrowedFd<'_>, range: LockRange) -> io::Result<bool> {
    let mut l = flock(short(libc::F_WRLCK), range);
    fcntl(fd, libc::F_OFD_GETLK, &mut l)?;
    Ok(l.l_type != short(libc::F_UNLCK))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// Two descriptions of one file (as two processes hold them): a shared lock excludes an
    /// exclusive one, not another shared one; a slot is apart from the others; closing the
    /// holder frees it.
    #[test]
    fn descriptions_exclude_each_other_and_a_close_frees() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, b"x").unwrap();
        let a = std::fs::OpenOptions::new().read(true).write(true).open(&f).unwrap();
        let b = std::fs::OpenOptions::new().read(true).write(true).open(&f).unwrap();
        assert!(!is_locked(b.as_fd(), LockRange::Whole).unwrap());
        lock_wait(a.as_fd(), LockKind::Exclusive, LockRange::Whole).unwrap();
        assert!(is_locked(b.as_fd(), LockRange::Whole).unwrap());
        assert!(!try_lock(b.as_fd(), LockKind::Shared, LockRange::Whole).unwrap());
        drop(a);
        assert!(try_lock(b.as_fd(), LockKind::Shared, LockRange::Whole).unwrap());

        // A folder, opened for reading, takes shared slots; the others see them.
        let dir = std::fs::File::open(d.path()).unwrap();
        let other = std::fs::File::open(d.path()).unwrap();
        assert!(try_lock(dir.as_fd(), LockKind::Shared, LockRange::Byte(7)).unwrap());
        assert!(is_locked(other.as_fd(), LockRange::Byte(7)).unwrap());
        assert!(!is_locked(other.as_fd(), LockRange::Byte(8)).unwrap());
        assert!(!is_locked(dir.as_fd(), LockRange::Byte(7)).unwrap(), "its own lock is no other's");
        drop(dir);
        assert!(!is_locked(other.as_fd(), LockRange::Byte(7)).unwrap());
    }
}
