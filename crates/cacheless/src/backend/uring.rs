//! The io_uring backend (the `io-uring` crate): one ring per queue, one SQE per op.

use std::collections::VecDeque;
use std::io;
use std::os::fd::AsRawFd;

use io_uring::{opcode, types, IoUring};

use super::{Completion, Op, OpKind, Queue};

/// A queue backed by an io_uring instance.
pub struct UringQueue {
    ring: IoUring,
    /// Ops in flight, indexed by the SQE's user_data. The ring owns each op's memory until its
    /// completion arrives; the op (and so its buffer and file) lives here until then.
    slots: Vec<Option<Op>>,
    free: Vec<usize>,
    in_flight: usize,
    ready: VecDeque<Completion>,
    depth: usize,
    /// Start addresses of registered buffers, sorted: index = io_uring buffer index.
    fixed: Vec<usize>,
    /// Keeps registered memory alive as long as the ring may use it.
    _fixed_lease: Option<crate::buf::Lease>,
}

impl UringQueue {
    /// Sets up a ring with room for `depth` requests.
    pub fn new(depth: usize) -> io::Result<UringQueue> {
        let depth = depth.max(1);
        let ring = IoUring::new(depth.next_power_of_two() as u32)?;
        Ok(UringQueue {
            ring,
            slots: (0..depth).map(|_| None).collect(),
            free: (0..depth).rev().collect(),
            in_flight: 0,
            ready: VecDeque::new(),
            depth,
            fixed: Vec::new(),
            _fixed_lease: None,
        })
    }

    fn submit_slot(&mut self, slot: usize) -> io::Result<()> {
        let op = self.slots[slot].as_mut().expect("slot holds an op");
        let fd = types::Fd(op.file.as_raw_fd());
        let len = u32::try_from(op.len).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "request over 4 GiB"))?;
        let fixed = op.owned_base().and_then(|b| self.fixed.binary_search(&b).ok());
        let ptr = op.ptr();
        let sqe = match (op.kind, fixed) {
            (OpKind::Read, Some(i)) => opcode::ReadFixed::new(fd, ptr, len, i as u16).offset(op.offset).rw_flags(op.rw_flags).build(),
            (OpKind::Write, Some(i)) => opcode::WriteFixed::new(fd, ptr, len, i as u16).offset(op.offset).rw_flags(op.rw_flags).build(),
            (OpKind::Read, None) => opcode::Read::new(fd, ptr, len).offset(op.offset).rw_flags(op.rw_flags).build(),
            (OpKind::Write, None) => opcode::Write::new(fd, ptr, len).offset(op.offset).rw_flags(op.rw_flags).build(),
        }
        .user_data(slot as u64);
        loop {
            // SAFETY: the SQE points at the op's memory and file, both kept alive in
            // `self.slots[slot]` until the matching CQE is reaped in `reap`.
            let pushed = unsafe { self.ring.submission().push(&sqe) };
            if pushed.is_ok() {
                break;
            }
            self.ring.submit()?;
        }
        loop {
            match self.ring.submit() {
                Ok(_) => return Ok(()),
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Moves every available CQE into `ready`, resubmitting short writes and EAGAIN/EINTR.
    fn reap(&mut self) -> io::Result<()> {
        let cqes: Vec<(u64, i32)> = self.ring.completion().map(|c| (c.user_data(), c.result())).collect();
        for (ud, res) in cqes {
            let slot = ud as usize;
            let mut op = self.slots[slot].take().expect("completion for a live slot");
            if res == -libc::EAGAIN || res == -libc::EINTR {
                self.slots[slot] = Some(op);
                self.submit_slot(slot)?;
                continue;
            }
            if op.kind == OpKind::Write && res > 0 && (res as usize) < op.len {
                // Short write: carry on from where it stopped; the op counts what is done.
                op.advance(res as usize);
                self.slots[slot] = Some(op);
                self.submit_slot(slot)?;
                continue;
            }
            self.free.push(slot);
            self.in_flight -= 1;
            let result = if res < 0 { Err(io::Error::from_raw_os_error(-res)) } else { Ok(res as usize) };
            let done = op.restore();
            let result = result.map(|n| n + done);
            self.ready.push_back(Completion { op, result });
        }
        Ok(())
    }
}

impl Queue for UringQueue {
    fn push(&mut self, op: Op) -> io::Result<()> {
        let slot = self.free.pop().ok_or_else(|| io::Error::other("io_uring queue full"))?;
        self.slots[slot] = Some(op);
        self.in_flight += 1;
        if let Err(e) = self.submit_slot(slot) {
            self.slots[slot] = None;
            self.free.push(slot);
            self.in_flight -= 1;
            return Err(e);
        }
        Ok(())
    }

    fn wait(&mut self) -> io::Result<Completion> {
        loop {
            if let Some(c) = self.ready.pop_front() {
                return Ok(c);
            }
            if self.in_flight == 0 {
                return Err(io::Error::other("wait on an empty queue"));
            }
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => return Err(e),
            }
            self.reap()?;
        }
    }

    fn poll(&mut self) -> Option<Completion> {
        if self.ready.is_empty() && self.in_flight > 0 {
            let _ = self.reap();
        }
        self.ready.pop_front()
    }

    fn in_flight(&self) -> usize {
        self.in_flight + self.ready.len()
    }
    fn depth(&self) -> usize {
        self.depth
    }
    fn name(&self) -> &'static str {
        "io_uring"
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
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(_) => {
                    // Cannot wait: leaking the ops is the only memory-safe choice.
                    for s in self.slots.drain(..) {
                        std::mem::forget(s);
                    }
                    return;
                }
            }
            let _ = self.reap();
        }
    }
}
