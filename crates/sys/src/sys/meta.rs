//! Metadata calls: permission bits, owner, times and extended attributes ([`Site::Meta`]; the
//! reads of extended attributes are looks, no fault site), and the conversions between the
//! kernel's timestamps and `SystemTime`.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, Gid, Mode, Timespec, Timestamps, Uid, XattrFlags};
use rustix::io::{Errno, Result};
use rustix::path::Arg;

use super::{quiet, retry, Site};

/// fchmod(2).
pub fn fchmod(fd: impl AsFd, mode: u32) -> Result<()> {
    let fd = fd.as_fd();
    retry(Site::Meta, || rustix::fs::fchmod(fd, Mode::from_raw_mode(mode)))
}

/// fchmodat(2) (`flags` empty: Linux cannot change a symlink's mode).
pub fn chmodat<P: Arg + Copy>(dir: impl AsFd, path: P, mode: u32, flags: AtFlags) -> Result<()> {
    let dir = dir.as_fd();
    retry(Site::Meta, || rustix::fs::chmodat(dir, path, Mode::from_raw_mode(mode), flags))
}

/// fchown(2); `None` leaves that id as it is.
pub fn fchown(fd: impl AsFd, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
    let fd = fd.as_fd();
    retry(Site::Meta, || rustix::fs::fchown(fd, uid.map(Uid::from_raw), gid.map(Gid::from_raw)))
}

/// fchownat(2); `None` leaves that id as it is.
pub fn chownat<P: Arg + Copy>(dir: impl AsFd, path: P, uid: Option<u32>, gid: Option<u32>, flags: AtFlags) -> Result<()> {
    let dir = dir.as_fd();
    retry(Site::Meta, || rustix::fs::chownat(dir, path, uid.map(Uid::from_raw), gid.map(Gid::from_raw), flags))
}

/// futimens(2).
pub fn futimens(fd: impl AsFd, times: &Timestamps) -> Result<()> {
    let fd = fd.as_fd();
    retry(Site::Meta, || rustix::fs::futimens(fd, times))
}

/// utimensat(2).
pub fn utimensat<P: Arg + Copy>(dir: impl AsFd, path: P, times: &Timestamps, flags: AtFlags) -> Result<()> {
    let dir = dir.as_fd();
    retry(Site::Meta, || rustix::fs::utimensat(dir, path, times, flags))
}

/// What an extended attribute call is made on.
#[derive(Clone, Copy, Debug)]
pub enum XattrAt<'a> {
    /// An open file or folder.
    Fd(BorrowedFd<'a>),
    /// A name, the last component not followed (a symlink itself, a FIFO or a device node,
    /// which are not opened).
    Link(&'a Path),
    /// A name in an open folder, the last component not followed, reached through
    /// /proc/self/fd (the l*xattr calls take no folder): at any depth.
    Name(BorrowedFd<'a>, &'a OsStr),
}

/// What an extended attribute call reaches: a descriptor, or a path whose last component is
/// not followed.
#[derive(Clone, Copy)]
enum Target<'a> {
    Fd(BorrowedFd<'a>),
    Link(&'a Path),
}

/// The target of `at`; a [`XattrAt::Name`] becomes the path that reaches it (held in `path`).
fn target<'a>(at: XattrAt<'a>, path: &'a mut PathBuf) -> Target<'a> {
    match at {
        XattrAt::Fd(fd) => Target::Fd(fd),
        XattrAt::Link(p) => Target::Link(p),
        XattrAt::Name(dir, name) => {
            *path = PathBuf::from(super::proc_fd_path(dir));
            path.push(name);
            Target::Link(path)
        }
    }
}

/// The names of `at`'s extended attributes, each ending in a NUL (a look).
pub fn xattr_names(at: XattrAt<'_>) -> Result<Vec<u8>> {
    let mut path = PathBuf::new();
    match target(at, &mut path) {
        Target::Fd(fd) => grown(|b| rustix::fs::flistxattr(fd, b), || rustix::fs::flistxattr_query(fd)),
        Target::Link(p) => grown(|b| rustix::fs::llistxattr(p, b), || rustix::fs::llistxattr_query(p)),
    }
}

/// The value of `at`'s extended attribute `name` (a look; ENODATA where it has none).
pub fn xattr_get(at: XattrAt<'_>, name: impl AsRef<OsStr>) -> Result<Vec<u8>> {
    let mut path = PathBuf::new();
    let at = target(at, &mut path);
    let name = name.as_ref();
    match at {
        Target::Fd(fd) => grown(|b| rustix::fs::fgetxattr(fd, name, b), || rustix::fs::fgetxattr_query(fd, name)),
        Target::Link(p) => grown(|b| rustix::fs::lgetxattr(p, name, b), || rustix::fs::lgetxattr_query(p, name)),
    }
}

/// Sets `at`'s extended attribute `name` to `value`.
pub fn xattr_set(at: XattrAt<'_>, name: impl AsRef<OsStr>, value: &[u8]) -> Result<()> {
    let mut path = PathBuf::new();
    let at = target(at, &mut path);
    let name = name.as_ref();
    retry(Site::Meta, || match at {
        Target::Fd(fd) => rustix::fs::fsetxattr(fd, name, value, XattrFlags::empty()),
        Target::Link(p) => rustix::fs::lsetxattr(p, name, value, XattrFlags::empty()),
    })
}

/// Removes `at`'s extended attribute `name` (ENODATA where it has none).
pub fn xattr_remove(at: XattrAt<'_>, name: impl AsRef<OsStr>) -> Result<()> {
    let mut path = PathBuf::new();
    let at = target(at, &mut path);
    let name = name.as_ref();
    retry(Site::Meta, || match at {
        Target::Fd(fd) => rustix::fs::fremovexattr(fd, name),
        Target::Link(p) => rustix::fs::lremovexattr(p, name),
    })
}

/// Reads a variable-size attribute value or list: asks its size, then reads it (again if it
/// grew in between). An empty one (most files have no extended attribute) costs the one call.
fn grown(get: impl Fn(&mut [u8]) -> Result<usize>, query: impl Fn() -> Result<usize>) -> Result<Vec<u8>> {
    for _ in 0..4 {
        let n = quiet(&query)?;
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut v = vec![0u8; n];
        match quiet(|| get(&mut v)) {
            Ok(k) => {
                v.truncate(k);
                return Ok(v);
            }
            Err(Errno::RANGE) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(Errno::RANGE)
}

/// Whether the directory `dir` (open with O_PATH or not) has a default ACL, which files
/// created in it inherit in place of the umask; true where it cannot tell.
pub fn default_acl(dir: BorrowedFd<'_>) -> bool {
    const NAME: &str = "system.posix_acl_default";
    let asked = match quiet(|| rustix::fs::fgetxattr_query(dir, NAME)) {
        // An O_PATH descriptor: asked through its /proc link, which getxattr follows.
        Err(Errno::BADF) => quiet(|| rustix::fs::getxattr_query(super::proc_fd_path(dir).as_str(), NAME)),
        r => r,
    };
    match asked {
        Ok(n) => n > 0,
        // None, or a filesystem without extended attributes (nothing to inherit).
        Err(Errno::NODATA | Errno::OPNOTSUPP) => false,
        Err(_) => true,
    }
}

/// Sets permission bits and times (those given) on an open file; the error names the call.
pub fn apply_attrs(
    file: &File,
    permissions: Option<u32>,
    atime: Option<SystemTime>,
    mtime: Option<SystemTime>,
) -> std::result::Result<(), (&'static str, io::Error)> {
    if let Some(p) = permissions {
        fchmod(file, p).map_err(|e| ("chmod", e.into()))?;
    }
    if mtime.is_some() || atime.is_some() {
        let times = Timestamps { last_access: atime.map_or(OMIT, timespec), last_modification: mtime.map_or(OMIT, timespec) };
        futimens(file, &times).map_err(|e| ("set times", e.into()))?;
    }
    Ok(())
}

/// A timestamp that leaves the time it stands for as it is (UTIME_OMIT).
pub const OMIT: Timespec = Timespec { tv_sec: 0, tv_nsec: rustix::fs::UTIME_OMIT };

/// Access and modification times, each as seconds and nanoseconds (as stat gives them), for
/// futimens and utimensat; `None` leaves that time as it is.
pub fn timestamps(atime: Option<(i64, i64)>, mtime: Option<(i64, i64)>) -> Timestamps {
    let ts = |t: Option<(i64, i64)>| t.map_or(OMIT, |(s, ns)| Timespec { tv_sec: s, tv_nsec: ns });
    Timestamps { last_access: ts(atime), last_modification: ts(mtime) }
}

/// A timespec (seconds and nanoseconds, as stat gives them) as a `SystemTime`.
pub fn system_time(s: i64, ns: i64) -> SystemTime {
    // st_*time_nsec is 0..1e9 (the kernel's timespec).
    let ns = u32::try_from(ns).unwrap_or(0);
    match u64::try_from(s) {
        Ok(s) => UNIX_EPOCH + Duration::new(s, ns),
        Err(_) => UNIX_EPOCH - Duration::new(s.unsigned_abs(), 0) + Duration::from_nanos(ns.into()),
    }
}

/// A `SystemTime` as the kernel's timespec (before 1970 too).
pub fn timespec(t: SystemTime) -> Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timespec { tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX), tv_nsec: d.subsec_nanos().into() },
        Err(e) => {
            let d = e.duration();
            let (mut s, mut ns) = (-i64::try_from(d.as_secs()).unwrap_or(i64::MAX), -i64::from(d.subsec_nanos()));
            if ns < 0 {
                s -= 1;
                ns += 1_000_000_000;
            }
            Timespec { tv_sec: s, tv_nsec: ns }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_before_and_after_1970_convert_both_ways() {
        for (s, ns) in [(0, 0), (1_700_000_000, 123_456_789), (-1, 500_000_000), (-86_400 * 365, 1)] {
            let t = timespec(system_time(s, ns));
            assert_eq!((t.tv_sec, t.tv_nsec), (s, ns));
        }
    }
}
