//! I/O backends: io_uring and a thread pool, behind one queue interface with identical results.
//!
//! A [`Queue`] takes [`Op`]s (a read or write of one range of one file) and hands back
//! [`Completion`]s, in any order, with up to `depth()` in flight. Each op owns its buffer (or,
//! for the unsafe borrowed form, the caller guarantees the memory outlives the op), so the
//! kernel or a worker thread has the memory until the completion comes back. Writes complete
//! only when the whole range is written (short writes are resubmitted); reads may be short at
//! end of file.
#![allow(unsafe_code)]

use std::fmt;
use std::fs::File;
use std::io;
use std::str::FromStr;
use std::sync::Arc;

use serde::Serialize;

use crate::buf::AlignedBuf;
pub use crate::buf::Lease;
use crate::caps;

mod threads;
mod uring;

pub use threads::ThreadQueue;
pub use uring::UringQueue;

/// Which backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// io_uring when the kernel allows it (EPERM/ENOSYS/ENOMEM at setup fall back to threads).
    Auto,
    /// io_uring or an error.
    Uring,
    /// A thread pool doing pread/pwrite/preadv2/pwritev2.
    Threads,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Auto => "auto",
            BackendKind::Uring => "uring",
            BackendKind::Threads => "threads",
        })
    }
}

impl FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(BackendKind::Auto),
            "uring" | "io_uring" | "io-uring" => Ok(BackendKind::Uring),
            "threads" | "thread" | "sync" => Ok(BackendKind::Threads),
            o => Err(format!("unknown backend '{o}': expected auto, uring or threads")),
        }
    }
}

/// Read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// Read into the op's memory.
    Read,
    /// Write from the op's memory.
    Write,
}

/// The memory an op reads into or writes from.
pub enum IoMem {
    /// A buffer the op owns until its completion.
    Owned(AlignedBuf),
    /// Memory owned by the caller, who keeps it alive and untouched until the completion.
    Borrowed(RawMem),
}

/// A raw pointer and length, for [`IoMem::Borrowed`].
pub struct RawMem {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: RawMem is only created by the unsafe `Op::borrowed`, whose caller guarantees the
// memory is valid and exclusively lent to the op until completion, wherever it is processed.
unsafe impl Send for RawMem {}

impl IoMem {
    fn base(&mut self) -> (*mut u8, usize) {
        match self {
            IoMem::Owned(b) => (b.as_mut_ptr(), b.capacity()),
            IoMem::Borrowed(r) => (r.ptr, r.len),
        }
    }

    /// The owned buffer, if this memory is one.
    pub fn into_owned(self) -> Option<AlignedBuf> {
        match self {
            IoMem::Owned(b) => Some(b),
            IoMem::Borrowed(_) => None,
        }
    }
}

/// One read or write of `len` bytes at file `offset`, to or from `mem[start..start+len]`.
pub struct Op {
    /// Read or write.
    pub kind: OpKind,
    /// The file; kept open by the op until completion.
    pub file: Arc<File>,
    /// File offset of the first byte.
    pub offset: u64,
    /// The memory.
    pub mem: IoMem,
    /// Position in `mem` of the first byte.
    pub start: usize,
    /// Bytes to transfer.
    pub len: usize,
    /// preadv2/pwritev2 flags (RWF_DONTCACHE).
    pub rw_flags: i32,
    /// Caller's tag, returned in the completion.
    pub tag: u64,
    /// Bytes already transferred by earlier submissions of this op (short transfers).
    done: usize,
}

impl Op {
    /// An op on an owned buffer. Panics if `start + len` exceeds the buffer.
    #[allow(clippy::too_many_arguments)]
    pub fn owned(kind: OpKind, file: Arc<File>, offset: u64, buf: AlignedBuf, start: usize, len: usize, rw_flags: i32, tag: u64) -> Op {
        assert!(start + len <= buf.capacity(), "op range exceeds its buffer");
        Op { kind, file, offset, mem: IoMem::Owned(buf), start, len, rw_flags, tag, done: 0 }
    }

    /// An op on caller memory.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads and writes, and neither read, written, moved nor
    /// freed by anyone else until this op's completion has been returned by the queue.
    pub unsafe fn borrowed(kind: OpKind, file: Arc<File>, offset: u64, ptr: *mut u8, len: usize, rw_flags: i32, tag: u64) -> Op {
        Op { kind, file, offset, mem: IoMem::Borrowed(RawMem { ptr, len }), start: 0, len, rw_flags, tag, done: 0 }
    }

    /// Start address of the owned buffer, if the op has one.
    fn owned_base(&self) -> Option<usize> {
        match &self.mem {
            IoMem::Owned(b) => Some(b.as_ptr() as usize),
            IoMem::Borrowed(_) => None,
        }
    }

    /// Pointer to the first byte of the op's range.
    fn ptr(&mut self) -> *mut u8 {
        let (base, cap) = self.mem.base();
        debug_assert!(self.start + self.len <= cap);
        // SAFETY: start + len <= cap, checked at construction and kept by `advance`.
        unsafe { base.add(self.start) }
    }

    /// Moves past `n` transferred bytes, for resubmitting the rest of a short transfer.
    pub fn advance(&mut self, n: usize) {
        let n = n.min(self.len);
        self.start += n;
        self.offset += n as u64;
        self.len -= n;
        self.done += n;
    }

    /// Undoes every `advance`, so the op describes the range first asked for; returns the
    /// bytes those advances covered.
    fn restore(&mut self) -> usize {
        let d = self.done;
        self.start -= d;
        self.offset -= d as u64;
        self.len += d;
        self.done = 0;
        d
    }
}

/// A finished op and its result (bytes transferred, or the OS error).
pub struct Completion {
    /// The op, with its memory.
    pub op: Op,
    /// Bytes transferred by this completion.
    pub result: io::Result<usize>,
}

/// A submission/completion queue for one reader, writer or job.
pub trait Queue: Send {
    /// Starts `op`. The caller keeps `in_flight() < depth()`.
    fn push(&mut self, op: Op) -> io::Result<()>;
    /// Waits for one completion. Errors if nothing is in flight.
    fn wait(&mut self) -> io::Result<Completion>;
    /// A completion that is already available, without waiting.
    fn poll(&mut self) -> Option<Completion>;
    /// Ops pushed and not yet returned.
    fn in_flight(&self) -> usize;
    /// The most ops this queue keeps in flight.
    fn depth(&self) -> usize;
    /// "io_uring" or "threads".
    fn name(&self) -> &'static str;
    /// Registers every buffer of `lease` with the kernel so ops on them skip per-request page
    /// pinning (io_uring fixed buffers). Errors where unsupported or over the memlock limit;
    /// ops then use plain buffers, with the same results.
    fn register(&mut self, _lease: &crate::buf::Lease) -> io::Result<()> {
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
}

/// Which backend a queue got, and why.
#[derive(Debug, Clone, Serialize)]
pub struct BackendChoice {
    /// "io_uring" or "threads".
    pub name: &'static str,
    /// Why this one.
    pub reason: String,
}

/// Opens a queue of `depth` with the requested backend. A forced io_uring that the kernel
/// refuses is an error; auto falls back to threads on EPERM, ENOSYS, ENOMEM or EOPNOTSUPP.
pub fn open_queue(kind: BackendKind, depth: usize) -> io::Result<(Box<dyn Queue>, BackendChoice)> {
    let depth = depth.max(1);
    match kind {
        BackendKind::Threads => Ok((Box::new(ThreadQueue::new(depth)), BackendChoice { name: "threads", reason: "forced by --backend".into() })),
        BackendKind::Uring | BackendKind::Auto => {
            let forced = kind == BackendKind::Uring;
            if let Err(u) = &caps::system().uring {
                if forced {
                    return Err(io::Error::new(io::ErrorKind::Unsupported, format!("io_uring unavailable: {}", u.reason)));
                }
                return Ok((Box::new(ThreadQueue::new(depth)), BackendChoice { name: "threads", reason: format!("io_uring unavailable: {}", u.reason) }));
            }
            match UringQueue::new(depth) {
                Ok(q) => Ok((Box::new(q), BackendChoice { name: "io_uring", reason: if forced { "forced by --backend".into() } else { "available".into() } })),
                Err(e) if !forced && matches!(e.raw_os_error(), Some(libc::EPERM | libc::ENOSYS | libc::ENOMEM | libc::EOPNOTSUPP)) => Ok((
                    Box::new(ThreadQueue::new(depth)),
                    BackendChoice { name: "threads", reason: format!("io_uring setup failed: {}", caps::errno_name(&e)) },
                )),
                Err(e) => Err(e),
            }
        }
    }
}

/// Registers `lease`'s buffers with `q` when the memlock limit allows it (root, holding
/// CAP_IPC_LOCK, is not limited), and says what happened, for the backend report.
pub fn try_register(q: &mut dyn Queue, lease: &crate::buf::Lease) -> String {
    if q.name() != "io_uring" {
        return String::new();
    }
    let bytes = lease.bytes() as u64;
    let root = rustix::process::geteuid().is_root();
    if let (false, Some(limit)) = (root, caps::system().memlock_limit) {
        if bytes > limit {
            return format!("; plain buffers ({} KiB over the memlock limit of {} KiB)", bytes >> 10, limit >> 10);
        }
    }
    match q.register(lease) {
        Ok(()) => format!("; {} registered buffers", lease.count()),
        Err(e) => format!("; plain buffers (registration failed: {})", caps::errno_name(&e)),
    }
}

/// Does one op synchronously on the calling thread (the thread backend's worker body, and the
/// shortcut for single-request files that need no queue).
pub fn run_sync(mut op: Op) -> Completion {
    let result = loop {
        if op.len == 0 {
            break Ok(0);
        }
        let fd = op.file.clone();
        let flags = rustix::io::ReadWriteFlags::from_bits_retain(op.rw_flags as u32);
        let (ptr, len, off) = (op.ptr(), op.len, op.offset);
        let r = match op.kind {
            OpKind::Read => {
                // SAFETY: the op's memory range is valid and exclusively ours until completion.
                let s = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
                if op.rw_flags == 0 {
                    rustix::io::pread(&*fd, s, off)
                } else {
                    rustix::io::preadv2(&*fd, &mut [io::IoSliceMut::new(s)], off, flags)
                }
            }
            OpKind::Write => {
                // SAFETY: as above; the memory is only read.
                let s = unsafe { std::slice::from_raw_parts(ptr, len) };
                if op.rw_flags == 0 {
                    rustix::io::pwrite(&*fd, s, off)
                } else {
                    rustix::io::pwritev2(&*fd, &[io::IoSlice::new(s)], off, flags)
                }
            }
        };
        match r {
            Ok(0) if op.kind == OpKind::Write => break Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0")),
            // A read is done at its first short count: EOF, or the caller decides.
            Ok(n) if op.kind == OpKind::Read => break Ok(n),
            Ok(n) => op.advance(n),
            Err(e) if e == rustix::io::Errno::INTR || e == rustix::io::Errno::AGAIN => continue,
            Err(e) => break Err(e.into()),
        }
    };
    // Hand back the op as it was pushed, with the whole length written as the result.
    let done = op.restore();
    Completion { op, result: result.map(|n| n + done) }
}

/// What [`read_into`] needs from its caller: a way to start and wait for ops on a queue that
/// may also carry the caller's other ops, and hooks around each piece.
pub trait Driver {
    /// The caller's error type.
    type Error;
    /// Starts an op.
    fn push(&mut self, op: Op) -> Result<(), Self::Error>;
    /// Waits for any completion.
    fn wait(&mut self) -> io::Result<Completion>;
    /// Handles a completion that is not this batch's (tag without `tag_bit`).
    fn other(&mut self, c: Completion) -> Result<(), Self::Error>;
    /// Converts an I/O error of a piece.
    fn error(&mut self, e: io::Error) -> Self::Error;
    /// Called before a piece `[off, off+len)` is read.
    fn before(&mut self, _off: u64, _len: usize) {}
    /// Called after a piece completed with `n` bytes.
    fn after(&mut self, _off: u64, _n: usize) {}
}

/// Reads `mem.len()` bytes at file `offset` straight into `mem`, in pieces of `block` with up
/// to `depth` in flight, resubmitting short reads that stop on an `align` boundary before the
/// end. Returns the bytes read (short only at end of file).
///
/// Every piece in flight borrows `mem`; this function does not return, on success or error,
/// until each of them has completed. If the queue can no longer be waited on, the process
/// aborts rather than let the kernel write into memory that has been given back.
#[allow(clippy::too_many_arguments)]
pub fn read_into<D: Driver>(d: &mut D, file: &Arc<File>, mem: &mut [u8], offset: u64, block: usize, depth: usize, align: usize, rw_flags: i32, tag_bit: u64) -> Result<usize, D::Error> {
    let len = mem.len();
    let ptr = mem.as_mut_ptr();
    let block = block.max(1);
    let mut next = 0usize;
    let mut mine = 0usize;
    let mut short_at = len;
    let mut first_err: Option<D::Error> = None;
    loop {
        while first_err.is_none() && next < len && mine < depth.max(1) {
            let piece = block.min(len - next);
            d.before(offset + next as u64, piece);
            // SAFETY: `mem` is exclusively borrowed for this call, and the loop below does not
            // return until every op pushed here has completed (or the process aborts).
            let op = unsafe { Op::borrowed(OpKind::Read, file.clone(), offset + next as u64, ptr.add(next), piece, rw_flags, tag_bit | next as u64) };
            if let Err(e) = d.push(op) {
                first_err = Some(e);
                break;
            }
            mine += 1;
            next += piece;
        }
        if mine == 0 {
            break;
        }
        let c = match d.wait() {
            Ok(c) => c,
            Err(_) => std::process::abort(),
        };
        if c.op.tag & tag_bit == 0 {
            if let Err(e) = d.other(c) {
                first_err.get_or_insert(e);
            }
            continue;
        }
        let rel = (c.op.tag & !tag_bit) as usize;
        let piece = block.min(len - rel);
        match c.result {
            Ok(n) if n < piece && n > 0 && n % align.max(1) == 0 && first_err.is_none() => {
                let mut op = c.op;
                op.advance(n);
                if let Err(e) = d.push(op) {
                    first_err = Some(e);
                    mine -= 1;
                }
            }
            Ok(n) => {
                mine -= 1;
                d.after(offset + rel as u64, n.min(piece));
                if n < piece {
                    short_at = short_at.min(rel + n);
                }
            }
            Err(e) => {
                mine -= 1;
                let e = d.error(e);
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(short_at),
    }
}
