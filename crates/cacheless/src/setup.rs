//! What a Reader and a Writer share when they open a file: the mode decision and its refusal
//! error, switching O_DIRECT on, the queue with its registered buffers, and the advice attached
//! to I/O errors of the chosen mode.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::backend::{self, BackendChoice, BackendKind, Queue};
use crate::buf::Lease;
use crate::caps::{self, FsCaps, RWF_DONTCACHE};
use crate::error::{Error, ErrorKind, Result};
use crate::policy::{Decision, Mode, Refusal};

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

/// Probes `file`'s filesystem, decides with `decide`, and turns O_DIRECT on if chosen. A mode
/// the user forced that cannot be honoured is an `Unsupported` error for `op` on `path`.
pub(crate) fn choose(file: &File, path: &Path, op: &'static str, decide: impl FnOnce(&FsCaps) -> Result<Decision, Refusal>) -> Result<Chosen> {
    let caps = caps::for_file(file).map_err(|e| Error::io("probe", path, e))?;
    let decision = decide(&caps).map_err(|r| {
        Error::new(ErrorKind::Unsupported, op, path, format!("{} unavailable: {}", r.mode, r.reason)).with_hint(r.hint())
    })?;
    let (align, mem_align) = match (decision.mode, &caps.direct) {
        (Mode::Direct, Ok(a)) => {
            set_direct(file, true).map_err(|e| {
                Error::io("fcntl(O_DIRECT)", path, e).with_kind(ErrorKind::Unsupported).with_hint("use --mode auto or dontcache")
            })?;
            (a.offset.max(1) as usize, a.mem.max(1) as usize)
        }
        _ => (1, 1),
    };
    let flags = if decision.mode == Mode::DontCache { RWF_DONTCACHE } else { 0 };
    Ok(Chosen { caps, decision, align, mem_align, flags })
}

/// Opens a queue of `depth` for `path`, registering `lease`'s buffers when it can; the
/// choice's reason says which backend and which buffers.
pub(crate) fn open_queue(kind: BackendKind, depth: usize, lease: Option<&Lease>, path: &Path) -> Result<(Box<dyn Queue>, BackendChoice)> {
    let (mut q, mut choice) = backend::open_queue(kind, depth).map_err(|e| {
        Error::io("io_uring setup", path, e).with_kind(ErrorKind::Unsupported).with_hint("use --backend auto or threads")
    })?;
    if let Some(l) = lease {
        choice.reason += &backend::try_register(q.as_mut(), l);
    }
    Ok((q, choice))
}

/// An I/O error of a request in `mode` with `flags`, with advice where the mode is the cause.
pub(crate) fn io_error(op: &'static str, path: &Path, e: io::Error, mode: Mode, flags: i32) -> Error {
    let hint = match e.raw_os_error() {
        Some(libc::EINVAL) if mode == Mode::Direct => Some("O_DIRECT refused a request: use --mode auto or dontcache"),
        Some(libc::EOPNOTSUPP) if flags != 0 => Some("RWF_DONTCACHE unsupported: use --mode auto or writebehind"),
        _ => None,
    };
    let e = Error::io(op, path, e);
    match hint {
        Some(h) => e.with_hint(h),
        None => e,
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
