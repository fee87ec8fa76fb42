//! What a read or write of one file will do, decided once when it opens: the mode with its
//! reason, and the alignment that mode asks of requests and buffers. Readers, writers and the
//! file creator answer with a [`Plan`], and callers (the archive, safetensors, the bindings)
//! size and align their buffers from it instead of working it out again.
//!
//! The system calls themselves are in `sys`; this module decides and words the refusals.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::backend::{self, BackendChoice, BackendKind, Queue};
use crate::buf::Lease;
use crate::caps::{self, FsCaps, RwFlags};
use crate::error::{Error, ErrorKind, Hint, Result};
use crate::policy::{self, Decision, Mode, Refusal, Taken};
use crate::sys;

/// The largest request size accepted (a read or write syscall moves at most 2 GiB at once).
pub const MAX_BLOCK_SIZE: usize = 1 << 30;

/// The mode chosen for one file and what it asks of requests and buffers.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The mode in effect (never auto) and why.
    pub decision: Decision,
    /// Offset and length alignment of requests that bypass the cache (1 unless direct).
    pub align: usize,
    /// Memory alignment of buffers that requests use without a bounce copy (1 unless direct).
    pub mem_align: usize,
    /// What the file's filesystem offers.
    pub caps: Arc<FsCaps>,
    /// preadv2/pwritev2 flags for every request (RWF_DONTCACHE in dontcache mode).
    pub(crate) flags: RwFlags,
}

impl Plan {
    /// The plan for `decision` on a filesystem with `caps`.
    pub fn new(caps: Arc<FsCaps>, decision: Decision) -> Plan {
        let (align, mem_align) = match (decision.mode, &caps.direct) {
            (Taken::Direct, Ok(a)) => (a.offset.max(1) as usize, a.mem.max(1) as usize),
            _ => (1, 1),
        };
        let flags = if decision.mode == Taken::DontCache { RwFlags::DONTCACHE } else { RwFlags::NONE };
        Plan { decision, align, mem_align, caps, flags }
    }

    /// The mode in effect.
    pub fn mode(&self) -> Taken {
        self.decision.mode
    }

    /// The alignment a buffer for this file's data should have: both of the direct
    /// alignments, and at least a page, so that every request can use it as it is.
    pub fn buffer_align(&self) -> usize {
        self.align.max(self.mem_align).max(sys::page_size()).next_power_of_two()
    }

    /// The alignment data handed to this file should have to go to the kernel without a bounce
    /// copy: [`Plan::buffer_align`] when the file is read or written with O_DIRECT, 1 otherwise.
    pub fn data_align(&self) -> usize {
        if self.decision.mode == Taken::Direct {
            self.buffer_align()
        } else {
            1
        }
    }
}

/// Whether `mode` can be forced for files on a filesystem with `caps`: `Ok` for auto, buffered
/// and write-behind everywhere; for direct and dontcache, where the probe found them. The
/// error is the one a reader or writer forced to that mode fails with, for `op` on `path`.
pub fn check_forced(mode: Mode, caps: &FsCaps, op: &'static str, path: &Path) -> Result<()> {
    match policy::forced(mode, caps) {
        Ok(()) => Ok(()),
        Err(r) => Err(refused(op, path, r)),
    }
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

/// The error for O_DIRECT refused on a file of a filesystem that offers it.
pub(crate) fn direct_refused(path: &Path, e: io::Error, caps: &FsCaps) -> Error {
    Error::io("fcntl(O_DIRECT)", path, e).with_kind(ErrorKind::Unsupported).with_hint(policy::alternatives(Mode::Direct, caps))
}

/// Probes `file`'s filesystem (unless its capabilities are `known`), decides with `decide`,
/// and turns O_DIRECT on if chosen. A mode the caller forced that cannot be honoured is an
/// `Unsupported` error for `op` on `path`.
///
/// The probe is per filesystem, but some refuse O_DIRECT per file (erofs for compressed files,
/// with EINVAL from fcntl): then `decide` is asked again with O_DIRECT marked unavailable for
/// this file, so auto takes its next mode (saying why) and a forced direct is refused.
pub(crate) fn choose(
    file: &File,
    path: &Path,
    op: &'static str,
    known: Option<Arc<FsCaps>>,
    decide: impl Fn(&FsCaps) -> Result<Decision, Refusal>,
) -> Result<Plan> {
    let mut caps = match known {
        Some(c) => c,
        None => caps::for_file(file).map_err(|e| Error::io("probe", path, e))?,
    };
    let mut decision = decide(&caps).map_err(|r| refused(op, path, r))?;
    if decision.mode == Taken::Direct {
        if let Err(e) = sys::set_direct(file, true) {
            if e.raw_os_error() != Some(sys::consts::EINVAL) {
                return Err(direct_refused(path, e, &caps));
            }
            let mut this_file = (*caps).clone();
            this_file.direct = Err(caps::Unavailable::errno("fcntl(O_DIRECT) on this file", &e));
            decision = decide(&this_file).map_err(|r| refused(op, path, r))?;
            caps = Arc::new(this_file);
        }
    }
    Ok(Plan::new(caps, decision))
}

/// Opens a queue of `depth` for `path`, registering `lease`'s buffers when it can; the
/// choice's reason says which backend and which buffers.
pub(crate) fn open_queue(kind: BackendKind, depth: usize, lease: Option<&Lease>, path: &Path) -> Result<(Box<dyn Queue>, BackendChoice)> {
    let (mut q, mut choice) = backend::open_queue(kind, depth).map_err(|e| {
        Error::io("io_uring setup", path, e).with_kind(ErrorKind::Unsupported).with_hint(Hint::Backends(vec![BackendKind::Auto, BackendKind::Threads]))
    })?;
    if let Some(l) = lease {
        choice.buffers = backend::try_register(q.as_mut(), l);
    }
    Ok((q, choice))
}

/// An I/O error of a request in `mode` with `flags`, with a note and a hint where the mode is
/// the cause.
pub(crate) fn io_error(op: &'static str, path: &Path, e: io::Error, mode: Taken, flags: RwFlags, caps: &FsCaps) -> Error {
    let e = Error::io(op, path, e);
    match e.errno() {
        Some(sys::consts::EINVAL) if mode == Taken::Direct => e.with_note("O_DIRECT refused a request").with_hint(policy::alternatives(Mode::Direct, caps)),
        Some(sys::consts::EOPNOTSUPP) if flags.contains(RwFlags::DONTCACHE) => {
            e.with_note("RWF_DONTCACHE unsupported").with_hint(policy::alternatives(Mode::DontCache, caps))
        }
        _ => e,
    }
}
