//! I/O backends: io_uring and a thread pool, behind one queue interface with identical results.
//!
//! Crate-private: the public API names only [`BackendKind`] and [`BackendChoice`].
//!
//! A [`Queue`] takes [`Op`]s (a read or write of one range of one file, or the creation of a
//! file in a folder) and hands back [`Completion`]s, in any order, with up to `depth()` in
//! flight. Each op owns what the kernel reads or writes for it: its buffer (or, for the unsafe
//! borrowed form, the caller guarantees the memory outlives the op), its file, or the folder
//! and name it opens. The queue keeps the op until its request has finished: what is handed to
//! the kernel stays owned by its slot until its completion is reaped, on every path, errors and
//! drop included, and a descriptor the kernel opens for an op is owned by the op from the
//! moment its completion is reaped. Every op pushed comes back exactly once, carrying its
//! result or the error that stopped it. Writes complete only when the whole range is written
//! (short writes are resubmitted); reads may be short at end of file.
#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::ffi::CString;
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rustix::fs::{Mode as FMode, OFlags};
use serde::Serialize;

use crate::buf::{AlignedBuf, Lease};
use crate::caps;
pub use crate::mode::BackendKind;
use crate::sys::{self, RwFlags};

mod threads;
mod uring;

use threads::ThreadQueue;
#[cfg(any(test, feature = "fault-injection"))]
pub use uring::fault::fail_submit;
use uring::UringQueue;

/// Read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// Read into the op's memory.
    Read,
    /// Write from the op's memory.
    Write,
}

/// The memory an op reads into or writes from.
enum IoMem {
    /// A buffer the op owns until its completion.
    Owned(AlignedBuf),
    /// Memory owned by the caller, who keeps it alive and untouched until the completion.
    Borrowed(RawMem),
}

/// A raw pointer to caller memory, for [`IoMem::Borrowed`] (the op's range says how much).
struct RawMem {
    ptr: *mut u8,
}

// SAFETY: RawMem is only created by the unsafe `Op::borrowed`, whose caller guarantees the
// memory is valid and exclusively lent to the op until completion, wherever it is processed.
unsafe impl Send for RawMem {}

/// A read or write of `len` bytes at file `offset`, to or from `mem[start..start+len]`.
struct Rw {
    kind: OpKind,
    /// The file; kept open by the op until completion.
    file: Arc<File>,
    offset: u64,
    mem: IoMem,
    start: usize,
    len: usize,
    /// preadv2/pwritev2 flags (RWF_DONTCACHE).
    rw_flags: RwFlags,
    /// Bytes already transferred by earlier submissions of this op (short transfers).
    done: usize,
}

/// An openat(2) of `path` in `dir`: the folder and the name are the op's until its completion
/// is reaped (the kernel resolves the folder's number and reads the name when it runs the
/// request, so closing or freeing either earlier could create the file elsewhere).
struct OpenAt {
    dir: Arc<OwnedFd>,
    path: CString,
    flags: OFlags,
    mode: u32,
    /// The descriptor the kernel opened, once the completion is reaped.
    opened: Option<OwnedFd>,
}

/// What an op asks of the kernel.
enum Req {
    Rw(Rw),
    OpenAt(OpenAt),
}

/// One request: a read or write of one range of one file ([`Op::owned`], [`Op::borrowed`]), or
/// the opening of a name in a folder ([`Op::open_at`]).
///
/// The fields are private and the constructors check them: every safe way to build or change
/// an op keeps a read or write's `start + len` within its memory, which is what lets
/// [`run_sync`] and the io_uring backend hand the range to the kernel.
pub struct Op {
    req: Req,
    /// Caller's tag, returned in the completion.
    tag: u64,
    /// Who started the op: 0 for ops on owned buffers, a [`read_into`] call's own id for the
    /// ops on the memory it borrows.
    owner: u64,
}

impl Op {
    /// An op on `buf[start..start+len]`. Errors (InvalidInput) if the range exceeds the buffer
    /// or the file range overflows.
    #[allow(clippy::too_many_arguments)]
    pub fn owned(kind: OpKind, file: Arc<File>, offset: u64, buf: AlignedBuf, start: usize, len: usize, rw_flags: RwFlags, tag: u64) -> io::Result<Op> {
        let fits = start.checked_add(len).is_some_and(|end| end <= buf.capacity());
        if !fits || offset.checked_add(len as u64).is_none_or(|end| end > i64::MAX as u64) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("request of {len} B at {start} exceeds its {} B buffer or the file range", buf.capacity()),
            ));
        }
        let rw = Rw { kind, file, offset, mem: IoMem::Owned(buf), start, len, rw_flags, done: 0 };
        Ok(Op { req: Req::Rw(rw), tag, owner: 0 })
    }

    /// An op on caller memory.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads and writes, and neither read, written, moved nor
    /// freed by anyone else until this op's completion has been returned by the queue (or the
    /// op is dropped without ever having been pushed).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn borrowed(kind: OpKind, file: Arc<File>, offset: u64, ptr: *mut u8, len: usize, rw_flags: RwFlags, tag: u64, owner: u64) -> Op {
        let rw = Rw { kind, file, offset, mem: IoMem::Borrowed(RawMem { ptr }), start: 0, len, rw_flags, done: 0 };
        Op { req: Req::Rw(rw), tag, owner }
    }

    /// An openat(2) of `path` in `dir` with `flags` and `mode` (a file created with O_TMPFILE,
    /// or under a name with O_CREAT | O_EXCL). Its completion's result is 0 on success, and
    /// [`Op::into_opened`] gives the descriptor. A fault site ([`Site::Open`](crate::fault::Site::Open)), as a creation
    /// on the caller's thread is.
    pub fn open_at(dir: Arc<OwnedFd>, path: CString, flags: OFlags, mode: u32, tag: u64) -> Op {
        Op { req: Req::OpenAt(OpenAt { dir, path, flags, mode, opened: None }), tag, owner: 0 }
    }

    /// The caller's tag.
    pub fn tag(&self) -> u64 {
        self.tag
    }
    /// Who started the op (0: an op on an owned buffer).
    pub fn owner(&self) -> u64 {
        self.owner
    }
    /// The owned buffer, if the op has one.
    pub fn into_buf(self) -> Option<AlignedBuf> {
        match self.req {
            Req::Rw(Rw { mem: IoMem::Owned(b), .. }) => Some(b),
            _ => None,
        }
    }

    /// An open's folder, its name, and the descriptor the kernel opened (`None` where it
    /// failed); `None` for a read or write.
    pub fn into_opened(self) -> Option<(Arc<OwnedFd>, CString, Option<OwnedFd>)> {
        match self.req {
            Req::OpenAt(o) => Some((o.dir, o.path, o.opened)),
            Req::Rw(_) => None,
        }
    }

    /// Moves past `n` transferred bytes, for resubmitting the rest of a short transfer.
    pub fn advance(&mut self, n: usize) {
        if let Req::Rw(rw) = &mut self.req {
            let n = n.min(rw.len);
            rw.start += n;
            rw.offset += n as u64;
            rw.len -= n;
            rw.done += n;
        }
    }

    /// Undoes every `advance`, so the op describes the range first asked for; returns the
    /// bytes those advances covered.
    fn restore(&mut self) -> usize {
        match &mut self.req {
            Req::Rw(rw) => {
                let d = rw.done;
                rw.start -= d;
                rw.offset -= d as u64;
                rw.len += d;
                rw.done = 0;
                d
            }
            Req::OpenAt(_) => 0,
        }
    }
}

impl Rw {
    /// Start address of the owned buffer, if the op has one.
    fn owned_base(&self) -> Option<usize> {
        match &self.mem {
            IoMem::Owned(b) => Some(b.as_ptr() as usize),
            IoMem::Borrowed(_) => None,
        }
    }

    /// Pointer to the first byte of the op's range; `start + len` is within the memory.
    fn ptr(&mut self) -> *mut u8 {
        let base = match &mut self.mem {
            IoMem::Owned(b) => b.as_mut_ptr(),
            IoMem::Borrowed(r) => r.ptr,
        };
        // SAFETY: start + len <= the memory's length: checked by `owned`, promised by the
        // caller of `borrowed` (start 0), and kept by `advance` and `restore`.
        unsafe { base.add(self.start) }
    }
}

/// A finished op and its result (bytes transferred, or the OS error).
pub struct Completion {
    /// The op, with its memory (and for an open, the descriptor opened).
    pub op: Op,
    /// Bytes transferred in all (0 for an open), or the error that stopped the op.
    pub result: io::Result<usize>,
}

impl Completion {
    /// The op as it was pushed, with the bytes of earlier partial transfers added to `result`.
    fn finish(mut op: Op, result: io::Result<usize>) -> Completion {
        let done = op.restore();
        Completion { op, result: result.map(|n| n + done) }
    }
}

/// A submission/completion queue for one reader, writer or job.
///
/// # Safety
/// The kernel and worker threads use an op's memory after `push` returns, so an
/// implementation must:
/// - keep every pushed op, with its memory and file, alive and untouched by anything but the
///   I/O it describes until that I/O has finished, whatever error happens in between; where it
///   can no longer learn that (the ring cannot be waited on), leak the op rather than drop it;
/// - return each pushed op exactly once from `wait` or `poll`, and only after its I/O has
///   finished (an op that never reached the kernel comes back with the error that stopped it);
/// - touch no memory outside each op's `start..start+len` range.
///
/// [`read_into`] lends borrowed memory on the strength of this.
pub unsafe trait Queue: Send {
    /// Starts `op`. Never fails: an op that cannot be started comes back from `wait` with the
    /// error. The caller keeps `in_flight() < depth()`.
    fn push(&mut self, op: Op);
    /// Queues `op` to start with the next [`Queue::flush`] or wait, so that several requests
    /// go to the kernel in one submission: io_uring plugs a batch of more than two, and the
    /// block layer merges adjacent requests of a plugged batch into larger ones (up to the
    /// device's max_sectors_kb), as fio's batched resubmission gets. Backends that start each
    /// op on its own start it now.
    fn push_deferred(&mut self, op: Op) {
        self.push(op);
    }
    /// Starts the ops queued by [`Queue::push_deferred`].
    fn flush(&mut self) {}
    /// Ops queued by [`Queue::push_deferred`] and not started yet.
    fn deferred(&self) -> usize {
        0
    }
    /// Waits for one completion. Errors only when nothing is in flight, or when the queue can
    /// no longer be waited on (its ops are then leaked, never freed).
    fn wait(&mut self) -> io::Result<Completion>;
    /// Waits until `want` completions are ready to be taken (at most as many as are in
    /// flight), so that one wake-up covers several: for a caller that needs the `want`-th of
    /// requests the kernel runs in order. The completions are then taken with `wait` or
    /// `poll`. Backends that cannot wait for several at once return at once.
    fn wait_ready(&mut self, _want: usize) -> io::Result<()> {
        Ok(())
    }
    /// A completion that is already available, without waiting.
    fn poll(&mut self) -> Option<Completion>;
    /// Ops pushed and not yet returned.
    fn in_flight(&self) -> usize;
    /// [`BackendKind::Uring`] or [`BackendKind::Threads`].
    fn kind(&self) -> BackendKind;
    /// Registers every buffer of `lease` with the kernel so ops on them skip per-request page
    /// pinning (io_uring fixed buffers). Errors where unsupported or over the memlock limit;
    /// ops then use plain buffers, with the same results.
    fn register(&mut self, _lease: &Lease) -> io::Result<()> {
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
}

/// Why a queue got its backend.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendReason {
    /// The caller asked for it.
    Requested,
    /// Auto, and io_uring works here.
    Available,
    /// Auto, and the probe found io_uring unavailable (why, as the probe says it).
    UringUnavailable(String),
    /// Auto, and setting up the ring failed with this errno (EPERM, ENOSYS, ENOMEM, EOPNOTSUPP).
    UringSetupFailed(i32),
}

/// What became of an io_uring queue's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Buffers {
    /// None were offered (a thread queue, or a queue given no lease).
    NotOffered,
    /// This many registered with the ring (fixed-buffer reads and writes).
    Registered(usize),
    /// Plain buffers: registering them would pass the memlock limit (KiB asked, KiB allowed).
    OverMemlock {
        /// KiB of the buffers.
        kib: u64,
        /// The limit, in KiB.
        limit_kib: u64,
    },
    /// Plain buffers: the registration failed with this errno.
    RegistrationFailed(i32),
}

/// Which backend a queue got, and why. Serialized as `{"name": "io_uring" | "threads",
/// "reason"}`, the reason in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendChoice {
    /// The backend in effect: [`BackendKind::Uring`] or [`BackendKind::Threads`] (never auto).
    pub kind: BackendKind,
    /// Why this one.
    pub reason: BackendReason,
    /// What became of its buffers.
    pub buffers: Buffers,
}

impl fmt::Display for BackendReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendReason::Requested => f.write_str("requested"),
            BackendReason::Available => f.write_str("available"),
            BackendReason::UringUnavailable(why) => write!(f, "io_uring unavailable: {why}"),
            BackendReason::UringSetupFailed(e) => write!(f, "io_uring setup failed: {}", caps::errno_name(&io::Error::from_raw_os_error(*e))),
        }
    }
}

impl fmt::Display for Buffers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Buffers::NotOffered => Ok(()),
            Buffers::Registered(n) => write!(f, "{n} registered buffers"),
            Buffers::OverMemlock { kib, limit_kib } => write!(f, "plain buffers ({kib} KiB over the memlock limit of {limit_kib} KiB)"),
            Buffers::RegistrationFailed(e) => write!(f, "plain buffers (registration failed: {})", caps::errno_name(&io::Error::from_raw_os_error(*e))),
        }
    }
}

impl BackendChoice {
    fn new(kind: BackendKind, reason: BackendReason) -> BackendChoice {
        BackendChoice { kind, reason, buffers: Buffers::NotOffered }
    }

    /// Why, in words: the reason, and what became of the buffers where any were offered
    /// (`available; 8 registered buffers`).
    pub fn why(&self) -> String {
        match self.buffers {
            Buffers::NotOffered => self.reason.to_string(),
            b => format!("{}; {b}", self.reason),
        }
    }

    /// The backend's name in reports: "io_uring" or "threads".
    pub fn name(&self) -> &'static str {
        match self.kind {
            BackendKind::Uring | BackendKind::Auto => "io_uring",
            BackendKind::Threads => "threads",
        }
    }
}

impl Serialize for BackendChoice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("BackendChoice", 2)?;
        st.serialize_field("name", self.name())?;
        st.serialize_field("reason", &self.why())?;
        st.end()
    }
}

/// Opens a queue of `depth` with the requested backend. A forced io_uring that the kernel
/// refuses is an error; auto falls back to threads on EPERM, ENOSYS, ENOMEM or EOPNOTSUPP.
pub fn open_queue(kind: BackendKind, depth: usize) -> io::Result<(Box<dyn Queue>, BackendChoice)> {
    let depth = depth.max(1);
    match kind {
        BackendKind::Threads => Ok((Box::new(ThreadQueue::new(depth)), BackendChoice::new(BackendKind::Threads, BackendReason::Requested))),
        BackendKind::Uring | BackendKind::Auto => {
            let forced = kind == BackendKind::Uring;
            if let Err(u) = &caps::system().uring {
                if forced {
                    return Err(io::Error::new(io::ErrorKind::Unsupported, format!("io_uring unavailable: {}", u.reason)));
                }
                return Ok((Box::new(ThreadQueue::new(depth)), BackendChoice::new(BackendKind::Threads, BackendReason::UringUnavailable(u.reason.clone()))));
            }
            match UringQueue::new(depth) {
                Ok(q) => Ok((Box::new(q), BackendChoice::new(BackendKind::Uring, if forced { BackendReason::Requested } else { BackendReason::Available }))),
                Err(e) if !forced && matches!(e.raw_os_error(), Some(libc::EPERM | libc::ENOSYS | libc::ENOMEM | libc::EOPNOTSUPP)) => Ok((
                    Box::new(ThreadQueue::new(depth)),
                    BackendChoice::new(BackendKind::Threads, BackendReason::UringSetupFailed(e.raw_os_error().unwrap_or(0))),
                )),
                Err(e) => Err(e),
            }
        }
    }
}

/// Opens an io_uring queue of `depth` whose requests one kernel worker runs, in order, for
/// file creations ([`Op::open_at`]): creations on several threads contend in the kernel (the
/// folder and the inode allocator), and in order lets a caller wait for the n-th with one
/// wake-up ([`Queue::wait_ready`]). A kernel without the worker limit (before 5.15) runs them
/// on as many workers as it likes, which is still correct. Errors where io_uring is missing.
pub fn open_in_order(depth: usize) -> io::Result<Box<dyn Queue>> {
    if let Err(u) = &caps::system().uring {
        return Err(io::Error::new(io::ErrorKind::Unsupported, format!("io_uring unavailable: {}", u.reason)));
    }
    let q = UringQueue::new(depth)?;
    q.one_worker();
    Ok(Box::new(q))
}

/// Registers `lease`'s buffers with `q` when the memlock limit allows it (root, holding
/// CAP_IPC_LOCK, is not limited), and says what happened, for the backend report.
pub fn try_register(q: &mut dyn Queue, lease: &Lease) -> Buffers {
    if q.kind() != BackendKind::Uring {
        return Buffers::NotOffered;
    }
    let bytes = lease.bytes() as u64;
    let root = rustix::process::geteuid().is_root();
    if let (false, Some(limit)) = (root, caps::system().memlock_limit) {
        if bytes > limit {
            return Buffers::OverMemlock { kib: bytes >> 10, limit_kib: limit >> 10 };
        }
    }
    match q.register(lease) {
        Ok(()) => Buffers::Registered(lease.count()),
        Err(e) => Buffers::RegistrationFailed(e.raw_os_error().unwrap_or(0)),
    }
}

/// Does one op synchronously on the calling thread (the thread backend's worker body, and the
/// shortcut for single-request files that need no queue).
pub fn run_sync(mut op: Op) -> Completion {
    let result = match &mut op.req {
        Req::Rw(rw) => {
            let (ptr, len, off) = (rw.ptr(), rw.len, rw.offset);
            match rw.kind {
                _ if len == 0 => Ok(0),
                // SAFETY: ptr..ptr+len lies within the op's memory (the Op invariant), which the
                // op owns or has been lent exclusively until its completion; it is only read.
                OpKind::Write => sys::write_full(&rw.file, unsafe { std::slice::from_raw_parts(ptr, len) }, off, rw.rw_flags).map(|()| len),
                OpKind::Read => {
                    // SAFETY: as above.
                    let s = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
                    sys::read_once(&rw.file, s, off, rw.rw_flags)
                }
            }
        }
        Req::OpenAt(o) => match sys::openat(&*o.dir, o.path.as_c_str(), o.flags, FMode::from_raw_mode(o.mode)) {
            Ok(fd) => {
                o.opened = Some(fd);
                Ok(0)
            }
            Err(e) => Err(io::Error::from(e)),
        },
    };
    // Hand back the op as it was pushed, with the whole length transferred as the result.
    Completion::finish(op, result)
}

/// The requests of one reader or writer: its queue, opened on first need, and the requests
/// done on the calling thread instead (a file that is one request needs no queue).
#[derive(Default)]
pub struct Lane {
    queue: Option<Box<dyn Queue>>,
    here: VecDeque<Completion>,
}

impl Lane {
    /// A lane with no queue yet.
    pub fn new() -> Lane {
        Lane::default()
    }
    /// Whether a queue is open.
    pub fn has_queue(&self) -> bool {
        self.queue.is_some()
    }
    /// Installs the queue later requests go to; only while none is open, so a queue with
    /// requests in flight is never replaced.
    pub fn open(&mut self, q: Box<dyn Queue>) {
        if self.queue.is_none() {
            self.queue = Some(q);
        }
    }
    /// Starts `op` on the queue, or on this thread when no queue is open.
    pub fn push(&mut self, op: Op) {
        match &mut self.queue {
            Some(q) => q.push(op),
            None => self.here.push_back(run_sync(op)),
        }
    }

    /// Queues `op` to start with the next [`Lane::flush`] or wait (see
    /// [`Queue::push_deferred`]); without a queue it runs now, as [`Lane::push`].
    pub fn push_deferred(&mut self, op: Op) {
        match self.queue.as_mut() {
            Some(q) => q.push_deferred(op),
            None => self.here.push_back(run_sync(op)),
        }
    }

    /// Starts every op queued by [`Lane::push_deferred`].
    pub fn flush(&mut self) {
        if let Some(q) = self.queue.as_mut() {
            q.flush();
        }
    }

    /// Ops queued by [`Lane::push_deferred`] and not started yet.
    pub fn deferred(&self) -> usize {
        self.queue.as_ref().map_or(0, |q| q.deferred())
    }
    /// The next completion, waiting for one if need be. Errors when nothing is in flight or the
    /// queue can no longer be waited on.
    pub fn wait(&mut self) -> io::Result<Completion> {
        if let Some(c) = self.here.pop_front() {
            return Ok(c);
        }
        match &mut self.queue {
            Some(q) => q.wait(),
            None => Err(io::Error::other("wait with nothing in flight")),
        }
    }
    /// A completion that is already available.
    pub fn poll(&mut self) -> Option<Completion> {
        self.here.pop_front().or_else(|| self.queue.as_mut().and_then(|q| q.poll()))
    }
    /// Requests started and not yet returned.
    pub fn in_flight(&self) -> usize {
        self.here.len() + self.queue.as_ref().map_or(0, |q| q.in_flight())
    }
}

/// What [`read_into`] needs from its caller: the lane its requests go to (which may also carry
/// the caller's other requests), and hooks around each piece.
///
/// A safe trait: `read_into` only ever hands its requests to a [`Lane`], and counts the ones
/// that come back by an id no other request carries, so nothing an implementation does can make
/// it return while one of its requests may still touch the memory it borrows.
pub trait Driver {
    /// The caller's error type.
    type Error;
    /// Gets the lane ready for a request of `len` bytes (opens its queue if need be).
    fn prepare(&mut self, len: usize) -> Result<(), Self::Error>;
    /// The lane.
    fn lane(&mut self) -> &mut Lane;
    /// Handles a completion that is not this call's.
    fn other(&mut self, c: Completion) -> Result<(), Self::Error>;
    /// Converts an I/O error of a piece.
    fn error(&mut self, e: io::Error) -> Self::Error;
    /// Called before a piece `[off, off+len)` is read.
    fn before(&mut self, _off: u64, _len: usize) {}
    /// Called after a piece completed with `n` bytes.
    fn after(&mut self, _off: u64, _n: usize) {}
}

/// Ids of [`read_into`] calls, so each recognises its own completions (0 is "no call").
static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

/// The count of a [`read_into`] call's requests in flight, which aborts the process if it is
/// dropped while any remain: a panic in one of the [`Driver`]'s hooks must not unwind out of
/// `read_into` and give back memory the kernel or a worker thread may still write into.
struct InFlight(usize);

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0 > 0 {
            std::process::abort();
        }
    }
}

/// Reads `mem.len()` bytes at file `offset` straight into `mem`, in pieces of `block` with up
/// to `depth` in flight, resubmitting short reads that stop on an `align` boundary before the
/// end. Returns the bytes read (short only at end of file).
///
/// Every piece in flight borrows `mem`; this function does not return, on success or error,
/// until each of them has come back. If the lane can no longer be waited on, or a hook of `d`
/// panics while pieces are in flight, the process aborts rather than let the kernel write into
/// memory that has been given back.
#[allow(clippy::too_many_arguments)]
pub fn read_into<D: Driver>(
    d: &mut D,
    file: &Arc<File>,
    mem: &mut [u8],
    offset: u64,
    block: usize,
    depth: usize,
    align: usize,
    rw_flags: RwFlags,
) -> Result<usize, D::Error> {
    let owner = NEXT_OWNER.fetch_add(1, Ordering::Relaxed);
    let len = mem.len();
    let ptr = mem.as_mut_ptr();
    let block = block.max(1);
    let mut next = 0usize;
    let mut mine = InFlight(0);
    let mut short_at = len;
    let mut first_err: Option<D::Error> = None;
    loop {
        while first_err.is_none() && next < len && mine.0 < depth.max(1) {
            let piece = block.min(len - next);
            if let Err(e) = d.prepare(piece) {
                first_err = Some(e);
                break;
            }
            d.before(offset + next as u64, piece);
            // `next < len`: the address stays inside `mem` (no wrapping happens).
            let at = ptr.wrapping_add(next);
            // SAFETY: `mem` is exclusively borrowed for this call and `next + piece <= len`.
            // Each op pushed here carries this call's unique `owner`, and the loop below does
            // not return until every one of them has come back from the lane, which returns an
            // op only once its I/O has finished (or the process aborts).
            let op = unsafe { Op::borrowed(OpKind::Read, file.clone(), offset + next as u64, at, piece, rw_flags, next as u64, owner) };
            d.lane().push(op);
            mine.0 += 1;
            next += piece;
        }
        if mine.0 == 0 {
            break;
        }
        let Ok(c) = d.lane().wait() else { std::process::abort() };
        if c.op.owner != owner {
            if let Err(e) = d.other(c) {
                first_err.get_or_insert(e);
            }
            continue;
        }
        let rel = crate::conv::usize_of(c.op.tag);
        let piece = block.min(len - rel);
        match c.result {
            Ok(n) if n < piece && n > 0 && n % align.max(1) == 0 && first_err.is_none() => {
                let mut op = c.op;
                op.advance(n);
                d.lane().push(op);
            }
            Ok(n) => {
                mine.0 -= 1;
                d.after(offset + rel as u64, n.min(piece));
                if n < piece {
                    short_at = short_at.min(rel + n);
                }
            }
            Err(e) => {
                mine.0 -= 1;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn an_owned_op_outside_its_buffer_or_the_file_range_is_refused() {
        let f = Arc::new(tempfile::tempfile().unwrap());
        let op = |start, len, offset| Op::owned(OpKind::Read, f.clone(), offset, AlignedBuf::new(4096, 4096), start, len, RwFlags::NONE, 0);
        assert!(op(0, 4096, 0).is_ok());
        assert!(op(4095, 1, 0).is_ok());
        for (start, len, offset) in [(0, 4097, 0), (4096, 1, 0), (1, 4096, 0), (usize::MAX, 2, 0), (0, 4096, u64::MAX - 10), (0, 1, i64::MAX as u64)] {
            let e = op(start, len, offset).err().unwrap_or_else(|| panic!("{start}+{len} at {offset} accepted"));
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{start}+{len} at {offset}");
        }
    }

    /// The queues of both backends where io_uring is here (saying why not where it is missing,
    /// and failing then where `CACHELESS_REQUIRE` names it).
    fn both_queues(depth: usize) -> Vec<Box<dyn Queue>> {
        let mut v = vec![open_queue(BackendKind::Threads, depth).unwrap().0];
        if cacheless_testkit::require("uring", caps::system().uring.as_ref().map(|_| ()).map_err(|u| u.reason.clone())) {
            v.push(open_in_order(depth).unwrap());
        }
        v
    }

    const MADE: OFlags = OFlags::CREATE.union(OFlags::EXCL).union(OFlags::RDWR).union(OFlags::CLOEXEC);

    /// An openat op has the same results on both backends: the descriptor of the file it made,
    /// with O_TMPFILE (no name) or under a name (O_CREAT | O_EXCL, with its mode), or the errno
    /// the kernel gave (EEXIST for the second of two on one name); the folder and the name come
    /// back with it, and every descriptor closes with its completion.
    #[test]
    fn an_open_op_has_the_same_results_on_both_backends() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        for mut q in both_queues(4) {
            let kind = q.kind();
            let d = tempfile::tempdir().unwrap();
            let dir = Arc::new(sys::open(d.path(), OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, FMode::empty()).unwrap());
            q.push(Op::open_at(dir.clone(), c"a".to_owned(), MADE, 0o640, 1));
            q.push(Op::open_at(dir.clone(), c"a".to_owned(), MADE, 0o640, 2));
            q.push(Op::open_at(dir.clone(), c".".to_owned(), sys::UNNAMED, 0o600, 3));
            let mut got = std::collections::BTreeMap::new();
            while q.in_flight() > 0 {
                let c = q.wait().unwrap();
                let tag = c.op.tag();
                let (back, at, fd) = c.op.into_opened().expect("an open op");
                assert!(Arc::ptr_eq(&back, &dir), "{kind:?}: the folder comes back with its op");
                got.insert(tag, (at, c.result.map(|_| fd.expect("a descriptor with success"))));
            }
            let mut made = 0;
            for tag in [1, 2] {
                let (at, r) = &got[&tag];
                assert_eq!(at.as_c_str(), c"a");
                match r {
                    Ok(fd) => {
                        made += 1;
                        let m = File::from(fd.try_clone().unwrap()).metadata().unwrap();
                        assert_eq!(m.ino(), std::fs::metadata(d.path().join("a")).unwrap().ino(), "{kind:?}");
                        assert_eq!(m.permissions().mode() & 0o777, 0o640 & !sys::umask().unwrap_or(0o022), "{kind:?}");
                    }
                    Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EEXIST), "{kind:?}: {e}"),
                }
            }
            assert_eq!(made, 1, "{kind:?}: one of two exclusive opens of one name makes the file");
            let (_, unnamed) = &got[&3];
            let m = File::from(unnamed.as_ref().unwrap().try_clone().unwrap()).metadata().unwrap();
            assert_eq!((m.nlink(), m.len()), (0, 0), "{kind:?}: an O_TMPFILE file has no name");
            assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1, "{kind:?}");
            drop(got);
            assert_eq!(cacheless_testkit::open_in(d.path()), Vec::<std::path::PathBuf>::new(), "{kind:?}: the descriptors close with their completions");
        }
    }

    /// A queue dropped with opens in flight waits for them and closes what they opened: no
    /// descriptor is left, and the kernel never resolves a folder's number after it is closed.
    #[test]
    fn a_queue_dropped_with_opens_in_flight_closes_what_they_opened() {
        for mut q in both_queues(64) {
            let kind = q.kind();
            let d = tempfile::tempdir().unwrap();
            let dir = Arc::new(sys::open(d.path(), OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, FMode::empty()).unwrap());
            for i in 0..64 {
                let name = CString::new(format!("f{i}")).unwrap();
                q.push_deferred(Op::open_at(dir.clone(), name, MADE, 0o600, i));
            }
            q.flush();
            drop(q);
            assert_eq!(Arc::strong_count(&dir), 1, "{kind:?}: every op gave its folder back");
            assert_eq!(cacheless_testkit::open_in(d.path()), Vec::<std::path::PathBuf>::new(), "{kind:?}");
            assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 64, "{kind:?}: every open ran");
        }
    }

    /// A [`Driver`] on a thread queue whose `after` hook panics once a piece has come back while
    /// others may still be in flight.
    struct PanicsAfterFirst {
        lane: Lane,
    }

    impl Driver for PanicsAfterFirst {
        type Error = io::Error;
        fn prepare(&mut self, _len: usize) -> io::Result<()> {
            self.lane.open(Box::new(ThreadQueue::new(8)));
            Ok(())
        }
        fn lane(&mut self) -> &mut Lane {
            &mut self.lane
        }
        fn other(&mut self, _c: Completion) -> io::Result<()> {
            Ok(())
        }
        fn error(&mut self, e: io::Error) -> io::Error {
            e
        }
        fn after(&mut self, _off: u64, _n: usize) {
            panic!("hook panicked");
        }
    }

    const CHILD: &str = "CACHELESS_TEST_PANICKING_HOOK_CHILD";

    /// A hook that panics while `read_into`'s pieces borrow the caller's memory must not unwind
    /// out of it (the memory would be given back while workers still write into it): the
    /// process aborts instead. Checked in a child process, which the abort ends.
    #[test]
    fn a_hook_panicking_with_pieces_in_flight_aborts_rather_than_unwinds() {
        if std::env::var_os(CHILD).is_some() {
            let mut f = tempfile::tempfile().unwrap();
            f.write_all(&vec![7u8; 8 << 20]).unwrap();
            let file = Arc::new(f);
            let mut mem = vec![0u8; 8 << 20];
            let mut d = PanicsAfterFirst { lane: Lane::new() };
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read_into(&mut d, &file, &mut mem, 0, 64 << 10, 8, 512, RwFlags::NONE)));
            // Reached only if the panic unwound out of read_into: the child then exits 0.
            assert!(r.is_err());
            return;
        }
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args(["--exact", "backend::tests::a_hook_panicking_with_pieces_in_flight_aborts_rather_than_unwinds", "--test-threads=1", "--nocapture"])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("hook panicked"), "the child never reached the hook: {stderr}");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(libc::SIGABRT), "expected an abort, got {:?}: {stderr}", out.status);
    }
}
