//! The thread-pool backend: workers doing pread/pwrite/preadv2/pwritev2.
//!
//! Used where io_uring is missing or blocked (Docker's default seccomp profile, Android,
//! kernel.io_uring_disabled), and when asked for. Each worker is one request in flight, so a
//! queue of depth N starts up to N workers, on demand.

use std::collections::VecDeque;
use std::io;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::{run_sync, BackendKind, Completion, Op, Queue};

/// At most this many worker threads per queue, whatever the depth.
const MAX_WORKERS: usize = 64;

/// A queue served by a pool of worker threads.
pub struct ThreadQueue {
    jobs: Option<Sender<Op>>,
    jobs_rx: Arc<Mutex<Receiver<Op>>>,
    done_tx: Sender<Completion>,
    done: Receiver<Completion>,
    /// Ops done on the calling thread because no worker could be started.
    here: VecDeque<Completion>,
    workers: Vec<JoinHandle<()>>,
    in_flight: usize,
    depth: usize,
}

impl ThreadQueue {
    /// A queue of `depth`; workers start as requests arrive.
    pub fn new(depth: usize) -> ThreadQueue {
        let (jobs, jobs_rx) = mpsc::channel();
        let (done_tx, done) = mpsc::channel();
        ThreadQueue {
            jobs: Some(jobs),
            jobs_rx: Arc::new(Mutex::new(jobs_rx)),
            done_tx,
            done,
            here: VecDeque::new(),
            workers: Vec::new(),
            in_flight: 0,
            depth: depth.max(1),
        }
    }

    fn spawn_worker(&mut self) -> io::Result<()> {
        let rx = self.jobs_rx.clone();
        let tx = self.done_tx.clone();
        let h = std::thread::Builder::new().name("cacheless-io".into()).spawn(move || loop {
            let job = { rx.lock().unwrap_or_else(|e| e.into_inner()).recv() };
            match job {
                Ok(op) => {
                    if tx.send(run_sync(op)).is_err() {
                        return;
                    }
                }
                Err(_) => return,
            }
        })?;
        self.workers.push(h);
        Ok(())
    }
}

// SAFETY: an op moves whole into the job channel, then into one worker, which does its I/O with
// `run_sync` and only then sends it back as a completion; nothing else touches it meanwhile.
// Drop closes the job channel and joins the workers, so every op sent to them has finished
// before the queue is gone. An op that cannot reach a worker is done on the calling thread.
unsafe impl Queue for ThreadQueue {
    fn push(&mut self, op: Op) {
        self.in_flight += 1;
        let want = self.in_flight.min(self.depth).min(MAX_WORKERS);
        if self.workers.len() < want && self.spawn_worker().is_err() && self.workers.is_empty() {
            // No thread to run it: run it here, with the same result.
            self.here.push_back(run_sync(op));
            return;
        }
        match self.jobs.as_ref() {
            Some(tx) => {
                if let Err(mpsc::SendError(op)) = tx.send(op) {
                    self.here.push_back(Completion::finish(op, Err(io::Error::other("I/O worker threads exited"))));
                }
            }
            None => self.here.push_back(Completion::finish(op, Err(io::Error::other("I/O queue closed")))),
        }
    }

    fn wait(&mut self) -> io::Result<Completion> {
        if let Some(c) = self.here.pop_front() {
            self.in_flight -= 1;
            return Ok(c);
        }
        if self.in_flight == 0 {
            return Err(io::Error::other("wait on an empty queue"));
        }
        let c = self.done.recv().map_err(|_| io::Error::other("I/O worker threads exited"))?;
        self.in_flight -= 1;
        Ok(c)
    }

    fn poll(&mut self) -> Option<Completion> {
        let c = match self.here.pop_front() {
            Some(c) => c,
            None => self.done.try_recv().ok()?,
        };
        self.in_flight -= 1;
        Some(c)
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }
    fn kind(&self) -> BackendKind {
        BackendKind::Threads
    }
}

impl Drop for ThreadQueue {
    fn drop(&mut self) {
        // Closing the job channel ends the workers once they finish what they hold; the ops
        // (and their buffers) are dropped with their completions.
        self.jobs.take();
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }
}
