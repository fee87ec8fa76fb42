//! The io_uring backend (the `io-uring` crate): one ring per queue, one SQE per op.
//!
//! Once an op's SQE is in the submission ring, the op stays in its slot until the matching CQE
//! is reaped, whatever fails in between: a failed `io_uring_enter` leaves the SQE in the ring
//! for the next one, and the error travels with the op's completion; a ring that can no longer
//! be waited on leaks its ops rather than free memory the kernel may still write.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use io_uring::{opcode, squeue, types, IoUring};

use super::{Completion, Op, OpKind, Queue, Req};
use crate::fault::{Injected, Site};
use crate::mode::BackendKind;

/// An op in flight and the submission error to report with its completion, if any.
struct Slot {
    op: Op,
    error: Option<io::Error>,
    /// A fault planned for this submission (the `fault-injection` feature), applied to its
    /// completion: the result the kernel gave is replaced, as if the kernel had given that.
    fault: Option<Injected>,
}

/// A queue backed by an io_uring instance.
pub struct UringQueue {
    ring: IoUring,
    /// Ops in flight, indexed by the SQE's user_data. The ring owns each op's memory until its
    /// completion arrives; the op (and so its buffer and file) lives here until then.
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    in_flight: usize,
    /// Slots whose SQE is queued in the ring but not yet handed to the kernel
    /// (`push_deferred`): a failed submission is charged to them.
    unsubmitted: Vec<usize>,
    ready: VecDeque<Completion>,
    /// The completions of one reap, kept for the next: a wait per file of an extraction's small
    /// files would otherwise allocate (and free) this list each time.
    cqes: Vec<(u64, i32)>,
    /// A fault found while reaping (a completion for no op in flight), reported with the next
    /// completion handed out.
    fault: Option<io::Error>,
    /// Start addresses of registered buffers, sorted: index = io_uring buffer index.
    fixed: Vec<usize>,
    /// Keeps registered memory alive as long as the ring may use it.
    _fixed_lease: Option<crate::buf::Lease>,
}

/// The same error again, for each op a failed submission is charged to.
fn copy_error(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(n) => io::Error::from_raw_os_error(n),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}

fn transient(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN | libc::EBUSY))
}

impl UringQueue {
    /// Sets up a ring with room for `depth` requests.
    pub fn new(depth: usize) -> io::Result<UringQueue> {
        let depth = depth.max(1);
        let entries = u32::try_from(depth.next_power_of_two()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "io_uring queue too deep"))?;
        let ring = IoUring::new(entries)?;
        Ok(UringQueue {
            ring,
            slots: (0..depth).map(|_| None).collect(),
            free: (0..depth).rev().collect(),
            in_flight: 0,
            unsubmitted: Vec::new(),
            ready: VecDeque::new(),
            cqes: Vec::new(),
            fault: None,
            fixed: Vec::new(),
            _fixed_lease: None,
        })
    }

    /// Has one kernel worker run this ring's blocking requests, in order (see
    /// [`open_in_order`](super::open_in_order)); a kernel without the limit keeps its own.
    pub fn one_worker(&self) {
        let _ = self.ring.submitter().register_iowq_max_workers(&mut [1, 1]);
    }

    /// Puts the SQE of the op in `slot` into the submission ring. On error nothing was queued.
    fn enqueue(&mut self, slot: usize) -> io::Result<()> {
        let fixed_bufs = &self.fixed;
        let Some(Some(s)) = self.slots.get_mut(slot) else {
            return Err(io::Error::other("io_uring slot is empty"));
        };
        let sqe = match &mut s.op.req {
            Req::Rw(op) => {
                s.fault = crate::fault::check(if op.kind == OpKind::Read { Site::Read } else { Site::Write }, op.len, || crate::sys::is_direct(&op.file));
                let fd = types::Fd(op.file.as_raw_fd());
                let len = u32::try_from(op.len).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "request over 4 GiB"))?;
                // The kernel checks the range against the registered buffer it names.
                let fixed = op.owned_base().and_then(|b| fixed_bufs.binary_search(&b).ok()).and_then(|i| u16::try_from(i).ok());
                let ptr = op.ptr();
                match (op.kind, fixed) {
                    (OpKind::Read, Some(i)) => opcode::ReadFixed::new(fd, ptr, len, i).offset(op.offset).rw_flags(op.rw_flags.uring_bits()).build(),
                    (OpKind::Write, Some(i)) => opcode::WriteFixed::new(fd, ptr, len, i).offset(op.offset).rw_flags(op.rw_flags.uring_bits()).build(),
                    (OpKind::Read, None) => opcode::Read::new(fd, ptr, len).offset(op.offset).rw_flags(op.rw_flags.uring_bits()).build(),
                    (OpKind::Write, None) => opcode::Write::new(fd, ptr, len).offset(op.offset).rw_flags(op.rw_flags.uring_bits()).build(),
                }
            }
            Req::OpenAt(o) => {
                // The fault site of an open on the caller's thread: an injected error fails the
                // op before the kernel sees it (nothing is created), as a refusal would.
                crate::sys::call(Site::Open, || Ok(()))?;
                opcode::OpenAt::new(types::Fd(o.dir.as_raw_fd()), o.path.as_ptr())
                    // Open flags fit an int.
                    .flags(i32::from_ne_bytes(o.flags.bits().to_ne_bytes()))
                    .mode(o.mode)
                    .build()
                    // Creating a file always blocks: straight to the worker.
                    .flags(squeue::Flags::ASYNC)
            }
        }
        .user_data(slot as u64);
        // SAFETY: the SQE points at the op's memory range (within it by the Op invariant) and
        // file, or at its folder's descriptor and its name (a heap buffer that moving the op
        // does not move), all kept alive in `self.slots[slot]` until the matching CQE is reaped
        // in `reap`, or leaked by Drop if that can no longer happen.
        let pushed = unsafe { self.ring.submission().push(&sqe) };
        // SQEs are handed to the kernel as soon as they are queued, so the ring only fills when
        // submissions keep failing; then the op fails before the kernel ever saw it.
        pushed.map_err(|_| io::Error::other("io_uring submission ring full"))
    }

    /// Hands queued SQEs to the kernel. EAGAIN and EBUSY leave them queued for the next
    /// `io_uring_enter` (the wait), which is not an error.
    fn submit(&mut self) -> io::Result<()> {
        #[cfg(any(test, feature = "fault-injection"))]
        if let Some(e) = fault::take_submit_error() {
            return Err(e);
        }
        loop {
            match self.ring.submit() {
                Ok(_) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) if transient(&e) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    /// Starts (or restarts) the op in `slot`, with every op queued before it. If its SQE
    /// cannot be queued, the op completes at once with the error; if it was queued but the
    /// submission failed, the op stays in flight (the SQE goes with the next submission) and
    /// its completion carries the error.
    fn start(&mut self, slot: usize) {
        self.queue_only(slot);
        self.submit_queued();
    }

    /// Takes a free slot for `op`, in flight from now on. More ops than the ring has entries
    /// (a read_at beside a stream's read-ahead) is fine: the SQEs go out at once, and
    /// completions beyond the ring wait in the kernel.
    fn slot_for(&mut self, op: Op) -> usize {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        self.slots[slot] = Some(Slot { op, error: None, fault: None });
        self.in_flight += 1;
        slot
    }

    /// Puts the SQE of the op in `slot` in the ring without submitting it.
    fn queue_only(&mut self, slot: usize) {
        match self.enqueue(slot) {
            Ok(()) => self.unsubmitted.push(slot),
            Err(e) => self.complete(slot, Err(e)),
        }
    }

    /// Submits the queued SQEs; a failure is charged to each op whose SQE it left in the ring.
    fn submit_queued(&mut self) {
        if self.unsubmitted.is_empty() {
            return;
        }
        match self.submit() {
            Ok(()) => {}
            Err(e) => {
                for &slot in &self.unsubmitted {
                    if let Some(Some(s)) = self.slots.get_mut(slot) {
                        s.error.get_or_insert_with(|| copy_error(&e));
                    }
                }
            }
        }
        self.forget_submitted();
    }

    /// Clears the list of queued SQEs once the kernel has consumed them all.
    fn forget_submitted(&mut self) {
        if self.ring.submission().is_empty() {
            self.unsubmitted.clear();
        }
    }

    /// Takes the op out of `slot` and queues its completion with `result` (or the submission
    /// error it carries).
    fn complete(&mut self, slot: usize, result: io::Result<usize>) {
        let Some(Some(s)) = self.slots.get_mut(slot).map(Option::take) else { return };
        self.free.push(slot);
        self.in_flight -= 1;
        let result = match s.error {
            Some(e) => Err(e),
            None => result,
        };
        self.ready.push_back(Completion::finish(s.op, result));
    }

    /// Moves every available CQE into `ready`, restarting short writes and EAGAIN/EINTR.
    fn reap(&mut self) {
        let mut cqes = std::mem::take(&mut self.cqes);
        cqes.clear();
        cqes.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
        for &(ud, mut res) in &cqes {
            let slot = crate::conv::usize_of(ud);
            let Some(Some(s)) = self.slots.get_mut(slot) else {
                self.fault.get_or_insert_with(|| io::Error::other(format!("io_uring completed request {ud}, which is not in flight")));
                continue;
            };
            match s.fault.take() {
                Some(Injected::Errno(e)) => res = -e,
                Some(Injected::Short(n)) if res > 0 => res = res.min(i32::try_from(n).unwrap_or(i32::MAX)),
                _ => {}
            }
            if let (Req::OpenAt(o), true) = (&mut s.op.req, res >= 0) {
                // SAFETY: the kernel opened this descriptor for this request, whose CQE is
                // reaped once: the op owns it from here on, with a submission error charged to
                // it or not (its owner then removes what it made).
                o.opened = Some(unsafe { OwnedFd::from_raw_fd(res) });
                self.complete(slot, Ok(0));
                continue;
            }
            if s.error.is_none() {
                if res == -libc::EAGAIN || res == -libc::EINTR {
                    self.start(slot);
                    continue;
                }
                let done = usize::try_from(res).unwrap_or(0);
                if matches!(&s.op.req, Req::Rw(rw) if rw.kind == OpKind::Write && done > 0 && done < rw.len) {
                    // Short write: carry on from where it stopped; the op counts what is done.
                    s.op.advance(done);
                    self.start(slot);
                    continue;
                }
            }
            // A negative result is the errno; the rest is the byte count.
            let result = usize::try_from(res).map_err(|_| io::Error::from_raw_os_error(-res));
            self.complete(slot, result);
        }
        self.cqes = cqes;
    }

    /// The next ready completion; a fault found while reaping fails it.
    fn pop_ready(&mut self) -> Option<Completion> {
        let mut c = self.ready.pop_front()?;
        if let Some(f) = self.fault.take() {
            c.result = Err(f);
        }
        Some(c)
    }
}

// SAFETY: each op lives in its slot from `push` until its CQE is reaped (`complete`), and is
// handed out exactly once, from `ready`. Submission errors never free a slot whose SQE is in the
// ring, and Drop leaks the slots when their CQEs can no longer be reaped.
unsafe impl Queue for UringQueue {
    fn push(&mut self, op: Op) {
        let slot = self.slot_for(op);
        self.start(slot);
    }

    fn push_deferred(&mut self, op: Op) {
        let slot = self.slot_for(op);
        self.queue_only(slot);
        // A ring that could not take one more SQE would refuse the next: submit first.
        if self.unsubmitted.len() >= self.ring.params().sq_entries() as usize {
            self.submit_queued();
        }
    }

    fn flush(&mut self) {
        self.submit_queued();
    }

    fn deferred(&self) -> usize {
        self.unsubmitted.len()
    }

    fn wait(&mut self) -> io::Result<Completion> {
        loop {
            if let Some(c) = self.pop_ready() {
                return Ok(c);
            }
            if self.in_flight == 0 {
                return Err(io::Error::other("wait on an empty queue"));
            }
            let waited = self.ring.submit_and_wait(1);
            self.forget_submitted();
            match waited {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                // Completion ring full or no memory for now: reap what is there, then retry.
                Err(e) if transient(&e) => {
                    self.reap();
                    if self.ready.is_empty() {
                        std::thread::yield_now();
                    }
                }
                Err(e) => {
                    self.reap();
                    if let Some(c) = self.pop_ready() {
                        return Ok(c);
                    }
                    return Err(e);
                }
            }
            self.reap();
        }
    }

    fn wait_ready(&mut self, want: usize) -> io::Result<()> {
        loop {
            self.reap();
            // Ops restarted by the reap (short writes, EAGAIN) stay in flight.
            let want = want.min(self.in_flight + self.ready.len());
            if self.ready.len() >= want {
                return Ok(());
            }
            let waited = self.ring.submit_and_wait(want - self.ready.len());
            self.forget_submitted();
            match waited {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if transient(&e) => std::thread::yield_now(),
                Err(e) => return Err(e),
            }
        }
    }

    fn poll(&mut self) -> Option<Completion> {
        self.submit_queued();
        if self.ready.is_empty() && self.in_flight > 0 {
            self.reap();
        }
        self.pop_ready()
    }

    fn in_flight(&self) -> usize {
        self.in_flight + self.ready.len()
    }
    fn kind(&self) -> BackendKind {
        BackendKind::Uring
    }

    fn register(&mut self, lease: &crate::buf::Lease) -> io::Result<()> {
        if !self.fixed.is_empty() || self.in_flight > 0 {
            return Err(io::Error::from(io::ErrorKind::Unsupported));
        }
        let mut bufs = lease.preallocate();
        if bufs.len() > u16::MAX as usize {
            return Err(io::Error::from(io::ErrorKind::Unsupported));
        }
        bufs.sort_unstable();
        let iov: Vec<libc::iovec> = bufs.iter().map(|&(p, l)| libc::iovec { iov_base: p as *mut libc::c_void, iov_len: l }).collect();
        // SAFETY: every iovec is a live allocation of the lease, which this queue keeps alive
        // (`_fixed_lease`) until the ring, and with it the registration, is dropped.
        unsafe { self.ring.submitter().register_buffers(&iov)? };
        self.fixed = bufs.into_iter().map(|(p, _)| p).collect();
        self._fixed_lease = Some(lease.clone());
        Ok(())
    }
}

impl Drop for UringQueue {
    fn drop(&mut self) {
        // The kernel may still write into the ops' memory: wait for every completion before the
        // slots (and their buffers) are freed.
        while self.in_flight > 0 {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if transient(&e) => std::thread::yield_now(),
                Err(_) => {
                    // Cannot wait: leaking the ops (their buffers, their lease and files) is
                    // the only memory-safe choice.
                    self.reap();
                    #[allow(clippy::mem_forget)] // The leak is the point: the kernel may still use them.
                    for s in self.slots.drain(..) {
                        std::mem::forget(s);
                    }
                    #[allow(clippy::mem_forget)] // As above: the registered buffers stay mapped.
                    if let Some(l) = self._fixed_lease.take() {
                        std::mem::forget(l);
                    }
                    return;
                }
            }
            self.reap();
        }
    }
}

/// Test-only fault injection: makes a chosen `io_uring_enter` submission on this thread fail.
#[cfg(any(test, feature = "fault-injection"))]
pub mod fault {
    use std::cell::Cell;
    use std::io;

    thread_local! {
        static FAIL: Cell<Option<(u32, i32)>> = const { Cell::new(None) };
    }

    /// Lets `after` submissions on this thread through, then fails the next one with `errno`.
    pub fn fail_submit(after: u32, errno: i32) {
        FAIL.with(|f| f.set(Some((after, errno))));
    }

    /// Called by each submission: the error to fail it with, if one is armed and due.
    pub(super) fn take_submit_error() -> Option<io::Error> {
        FAIL.with(|f| match f.get() {
            Some((0, errno)) => {
                f.set(None);
                Some(io::Error::from_raw_os_error(errno))
            }
            Some((n, errno)) => {
                f.set(Some((n - 1, errno)));
                None
            }
            None => None,
        })
    }

    #[cfg(test)]
    mod tests {
        use super::super::*;
        use crate::buf::AlignedBuf;
        use std::sync::Arc;

        /// True (after saying why) when io_uring is missing and the test cannot run; a failure
        /// instead when `CACHELESS_REQUIRE` names it.
        #[track_caller]
        fn no_uring() -> bool {
            !cacheless_testkit::require("uring", crate::caps::system().uring.as_ref().map(|_| ()).map_err(|u| u.reason.clone()))
        }

        /// A completion the queue does not know is an error on the next completion, not a panic.
        #[test]
        fn a_stray_completion_is_an_error() {
            if no_uring() {
                return;
            }
            let mut q = UringQueue::new(4).unwrap();
            let nop = opcode::Nop::new().build().user_data(999);
            // SAFETY: a NOP touches no memory.
            unsafe { q.ring.submission().push(&nop).unwrap() };
            q.ring.submit_and_wait(1).unwrap();
            let f = Arc::new(tempfile::tempfile().unwrap());
            let op = Op::owned(OpKind::Read, f, 0, AlignedBuf::new(4096, 4096), 0, 4096, crate::sys::RwFlags::NONE, 7).unwrap();
            q.push(op);
            let c = q.wait().unwrap();
            assert_eq!(c.op.tag(), 7);
            let e = c.result.unwrap_err();
            assert!(e.to_string().contains("request 999"), "{e}");
            assert_eq!(q.in_flight(), 0);
        }
    }
}
