//! What a Reader and a Writer share when they open a file: the mode decision and its refusal
//! error, switching O_DIRECT on, the queue with its registered buffers, and the hints attached
//! to I/O errors of the chosen mode.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use rustix::fs::{Mode as FMode, OFlags};
use rustix::io::Errno;

use crate::backend::{self, BackendChoice, BackendKind, Queue};
use crate::buf::Lease;
use crate::caps::{self, FsCaps, RWF_DONTCACHE};
use crate::error::{Error, ErrorKind, Hint, Result};
use crate::fault::{self, Injected, Site};
use crate::policy::{self, Decision, Mode, Refusal};

/// The largest request size accepted (a read or write syscall moves at most 2 GiB at once).
pub const MAX_BLOCK_SIZE: usize = 1 << 30;

/// The mode chosen for a file and what it implies for requests.
pub(crate) struct Chosen {
    pub caps: Arc<FsCaps>,
    pub decision: Decision,
    /// Offset and length alignment (1 unless direct).
    pub align: usize,
    /// Memory alignment (1 unless direct).
    pub mem_align: usize,
    /// preadv2/pwritev2 flags for every request (RWF_DONTCACHE in dontcache mode).
    pub flags: i32,
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A temporary name beside `name`, `.NAME.cacheless-PID-N.tmp`, that no other writer of this
/// process uses.
pub(crate) fn temp_name(name: &OsStr) -> OsString {
    let mut t = OsString::from(".");
    t.push(name);
    t.push(format!(".cacheless-{}-{}.tmp", std::process::id(), TMP_COUNTER.fetch_add(1, Ordering::Relaxed)));
    t
}

/// Creates a new file (`O_CREAT | O_EXCL | O_NOFOLLOW`, read-write) under a temporary name
/// beside `name` in `dir` (see [`temp_name`]), with
/// permission bits `perm`; returns it and the name. `path` names it in errors.
pub(crate) fn create_temp(dir: BorrowedFd<'_>, name: &OsStr, path: &Path, perm: u32) -> Result<(OwnedFd, OsString)> {
    let flags = OFlags::CREATE | OFlags::EXCL | OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut tries = 0;
    loop {
        let t = temp_name(name);
        match call(Site::Open, || rustix::fs::openat(dir, t.as_os_str(), flags, FMode::from_raw_mode(perm))) {
            Ok(fd) => return Ok((fd, t)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 100 => tries += 1,
            Err(e) => return Err(Error::io("create", path, e)),
        }
    }
}

/// Opens the directory `path` would be created in, and returns it with `path`'s file name.
pub(crate) fn open_parent(path: &Path) -> Result<(OwnedFd, &OsStr)> {
    let name = path.file_name().ok_or_else(|| Error::new(ErrorKind::InvalidInput, "create", path, "no file name"))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = rustix::fs::open(parent, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, FMode::empty())
        .map_err(|e| Error::io("open directory", parent, e.into()))?;
    Ok((dir, name))
}

/// The error for a forced mode that `path`'s filesystem cannot honour.
pub(crate) fn refused(op: &'static str, path: &Path, r: Refusal) -> Error {
    Error::new(ErrorKind::Unsupported, op, path, format!("{} unavailable: {}", r.mode, r.reason)).with_hint(r.hint)
}

/// Checks a requested request size.
pub(crate) fn check_block_size(op: &'static str, path: &Path, block: usize) -> Result<()> {
    if block > MAX_BLOCK_SIZE {
        return Err(Error::new(ErrorKind::InvalidInput, op, path, format!("request size {block} B is over the largest, {MAX_BLOCK_SIZE} B")));
    }
    Ok(())
}

/// Probes `file`'s filesystem, decides with `decide`, and turns O_DIRECT on if chosen. A mode
/// the caller forced that cannot be honoured is an `Unsupported` error for `op` on `path`.
///
/// The probe is per filesystem, but some refuse O_DIRECT per file (erofs for compressed files,
/// with EINVAL from fcntl): then `decide` is asked again with O_DIRECT marked unavailable for
/// this file, so auto takes its next mode (saying why) and a forced direct is refused.
pub(crate) fn choose(file: &File, path: &Path, op: &'static str, decide: impl Fn(&FsCaps) -> Result<Decision, Refusal>) -> Result<Chosen> {
    let mut caps = caps::for_file(file).map_err(|e| Error::io("probe", path, e))?;
    let mut decision = decide(&caps).map_err(|r| refused(op, path, r))?;
    if decision.mode == Mode::Direct {
        if let Err(e) = set_direct(file, true) {
            if e.raw_os_error() != Some(libc::EINVAL) {
                return Err(Error::io("fcntl(O_DIRECT)", path, e).with_kind(ErrorKind::Unsupported).with_hint(policy::alternatives(Mode::Direct, &caps)));
            }
            let mut this_file = (*caps).clone();
            this_file.direct = Err(caps::Unavailable::errno("fcntl(O_DIRECT) on this file", &e));
            decision = decide(&this_file).map_err(|r| refused(op, path, r))?;
            caps = Arc::new(this_file);
        }
    }
    let (align, mem_align) = match (decision.mode, &caps.direct) {
        (Mode::Direct, Ok(a)) => (a.offset.max(1) as usize, a.mem.max(1) as usize),
        _ => (1, 1),
    };
    let flags = if decision.mode == Mode::DontCache { RWF_DONTCACHE } else { 0 };
    Ok(Chosen { caps, decision, align, mem_align, flags })
}

/// Opens a queue of `depth` for `path`, registering `lease`'s buffers when it can; the
/// choice's reason says which backend and which buffers.
pub(crate) fn open_queue(kind: BackendKind, depth: usize, lease: Option<&Lease>, path: &Path) -> Result<(Box<dyn Queue>, BackendChoice)> {
    let (mut q, mut choice) = backend::open_queue(kind, depth).map_err(|e| {
        Error::io("io_uring setup", path, e).with_kind(ErrorKind::Unsupported).with_hint(Hint::Backends(vec![BackendKind::Auto, BackendKind::Threads]))
    })?;
    if let Some(l) = lease {
        choice.reason += &backend::try_register(q.as_mut(), l);
    }
    Ok((q, choice))
}

/// An I/O error of a request in `mode` with `flags`, with a note and a hint where the mode is
/// the cause.
pub(crate) fn io_error(op: &'static str, path: &Path, e: io::Error, mode: Mode, flags: i32, caps: &FsCaps) -> Error {
    let e = Error::io(op, path, e);
    match e.errno() {
        Some(libc::EINVAL) if mode == Mode::Direct => e.with_note("O_DIRECT refused a request").with_hint(policy::alternatives(mode, caps)),
        Some(libc::EOPNOTSUPP) if flags & RWF_DONTCACHE != 0 => e.with_note("RWF_DONTCACHE unsupported").with_hint(policy::alternatives(Mode::DontCache, caps)),
        _ => e,
    }
}

/// Turns O_DIRECT on or off for an open file (fcntl F_SETFL).
pub(crate) fn set_direct(file: &File, on: bool) -> io::Result<()> {
    use rustix::fs::OFlags;
    let fl = rustix::fs::fcntl_getfl(file)?;
    let fl = if on { fl | OFlags::DIRECT } else { fl - OFlags::DIRECT };
    rustix::fs::fcntl_setfl(file, fl)?;
    Ok(())
}

/// Checks that `name` is a single path component that names an entry.
pub(crate) fn check_name(op: &'static str, path: &Path, name: &OsStr) -> Result<()> {
    if name.is_empty() || name.as_encoded_bytes().contains(&b'/') || name == ".." || name == "." {
        return Err(Error::new(ErrorKind::InvalidInput, op, path, "not a single file name"));
    }
    Ok(())
}

/// pwrite/pwritev2 until all of `data` is written at `off`: short counts carry on from where
/// they stopped, EINTR and EAGAIN are retried (as the backends do).
pub(crate) fn write_full(file: &File, mut data: &[u8], mut off: u64, flags: i32) -> io::Result<()> {
    while !data.is_empty() {
        let mut len = data.len();
        let r = match fault::check(Site::Write, Some(file), len) {
            Some(Injected::Errno(e)) => Err(Errno::from_raw_os_error(e)),
            Some(Injected::Short(n)) => {
                len = n.min(len);
                Ok(())
            }
            None => Ok(()),
        };
        let r = r.and_then(|()| {
            if flags == 0 {
                rustix::io::pwrite(file.as_fd(), &data[..len], off)
            } else {
                rustix::io::pwritev2(
                    file.as_fd(),
                    &[io::IoSlice::new(&data[..len])],
                    off,
                    rustix::io::ReadWriteFlags::from_bits_retain(u32::from_ne_bytes(flags.to_ne_bytes())),
                )
            }
        });
        match r {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0")),
            Ok(n) => {
                data = &data[n..];
                off += n as u64;
            }
            Err(e) if e == Errno::INTR || e == Errno::AGAIN => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Makes an open, fsync or rename call (`site` says which), retrying it when interrupted
/// (EINTR: FUSE and network filesystems return it from open and fsync when a signal arrives).
/// Under the `fault-injection` feature a planned fault takes the call's place.
pub(crate) fn call<T>(site: Site, mut f: impl FnMut() -> rustix::io::Result<T>) -> io::Result<T> {
    loop {
        let r = match fault::check(site, None, 0) {
            Some(Injected::Errno(e)) => Err(Errno::from_raw_os_error(e)),
            _ => f(),
        };
        match r {
            Err(Errno::INTR) => {}
            r => return r.map_err(io::Error::from),
        }
    }
}

/// Whether a write's error says the filesystem refuses RWF_DONTCACHE (it does so before any
/// I/O, so nothing was written).
pub(crate) fn dontcache_refused(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL))
}

/// Writes `data` at `off` buffered, uncached (RWF_DONTCACHE) where the filesystem takes it,
/// else plainly. A refusal the probe could not foresee is remembered for the filesystem.
/// Returns whether the pages stay cached (the caller drops them).
pub(crate) fn write_uncached(file: &File, data: &[u8], off: u64, caps: &FsCaps) -> io::Result<bool> {
    if caps.dontcache.is_ok() {
        match write_full(file, data, off, RWF_DONTCACHE) {
            Ok(()) => return Ok(false),
            Err(e) if dontcache_refused(&e) => caps::refuse_dontcache(caps.dev, &e),
            Err(e) => return Err(e),
        }
    }
    write_full(file, data, off, 0)?;
    Ok(true)
}

/// Sets permission bits and times (those given) on an open file; the error names the call.
pub(crate) fn apply_attrs(
    file: &File,
    permissions: Option<u32>,
    atime: Option<SystemTime>,
    mtime: Option<SystemTime>,
) -> Result<(), (&'static str, io::Error)> {
    if let Some(p) = permissions {
        rustix::fs::fchmod(file, rustix::fs::Mode::from_raw_mode(p)).map_err(|e| ("chmod", e.into()))?;
    }
    if mtime.is_some() || atime.is_some() {
        let ts = |t: Option<SystemTime>| match t {
            Some(t) => to_timespec(t),
            None => rustix::fs::Timespec { tv_sec: 0, tv_nsec: rustix::fs::UTIME_OMIT },
        };
        let times = rustix::fs::Timestamps { last_access: ts(atime), last_modification: ts(mtime) };
        rustix::fs::futimens(file, &times).map_err(|e| ("set times", e.into()))?;
    }
    Ok(())
}

fn to_timespec(t: SystemTime) -> rustix::fs::Timespec {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => rustix::fs::Timespec { tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX), tv_nsec: d.subsec_nanos().into() },
        Err(e) => {
            let d = e.duration();
            let (mut s, mut ns) = (-i64::try_from(d.as_secs()).unwrap_or(i64::MAX), -i64::from(d.subsec_nanos()));
            if ns < 0 {
                s -= 1;
                ns += 1_000_000_000;
            }
            rustix::fs::Timespec { tv_sec: s, tv_nsec: ns }
        }
    }
}
