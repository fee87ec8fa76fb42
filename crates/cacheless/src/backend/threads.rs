//! The thread-pool backend: workers doing pread/pwrite/preadv2/pwritev2.
//!
//! Used where io_uring is missing or blocked (Docker's default seccomp profile, Android,
//! kernel.io_uring_disabled), and forced with `--backend threads`. Each worker is one request
//! in flight, so a queue of depth N starts up to N workers, on demand.

use std::io;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::{run_sync, Completion, Op, Queue};

/// At most this many worker threads per queue, whatever the depth.
const MAX_WORKERS: usize = 64;

/// A queue served by a pool of worker threads.
pub struct ThreadQueue {
    jobs: Option<Sender<Op>>,
    jobs_rx: Arc<Mutex<Receiver<Op>>>,
    done_tx: Sender<Completion>,
    done: Receiver<Completion>,
    workers: Vec<JoinHandle<()>>,
    in_flight: usize,
    depth: usize,
}

impl ThreadQueue {
    /// A queue of `depth`; workers start as requests arrive.
    pub fn new(depth: usize) -> ThreadQueue {
        let (jobs, jobs_rx) = mpsc::channel();
        let (done_tx, done) = mpsc::channel();
        ThreadQueue { jobs: Some(jobs), jobs_rx: Arc::new(Mutex::new(jobs_rx)), done_tx, done, workers: Vec::new(), in_flight: 0, depth: depth.max(1) }
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

impl Queue for ThreadQueue {
    fn push(&mut self, op: Op) -> io::Result<()> {
        if self.workers.len() < (self.in_flight + 1).min(self.depth).min(MAX_WORKERS) {
            self.spawn_worker()?;
        }
        self.jobs.as_ref().expect("queue open").send(op).map_err(|_| io::Error::other("I/O worker threads exited"))?;
        self.in_flight += 1;
        Ok(())
    }

    fn wait(&mut self) -> io::Result<Completion> {
        if self.in_flight == 0 {
            return Err(io::Error::other("wait on an empty queue"));
        }
        let c = self.done.recv().map_err(|_| io::Error::other("I/O worker threads exited"))?;
        self.in_flight -= 1;
        Ok(c)
    }

    fn poll(&mut self) -> Option<Completion> {
        let c = self.done.try_recv().ok()?;
        self.in_flight -= 1;
        Some(c)
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }
    fn depth(&self) -> usize {
        self.depth
    }
    fn name(&self) -> &'static str {
        "threads"
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
