//! The worker pool that writes file data and metadata (the archive crate's extraction, and the
//! tree copy's), and how many descriptors it may hold.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::error::{Error, Result};

/// What the pool's threads do with each job.
pub trait Work: Send + Sync + 'static {
    /// A unit of work.
    type Job: Send + 'static;
    /// Does one job.
    fn run(&self, job: Self::Job);
    /// Names the job (the entry it writes), for the failure reported if it panics.
    fn name(job: &Self::Job) -> String;
    /// Reports a job that panicked: its name and the panic's message. Whatever the job held
    /// (an unfinished file) was dropped while unwinding, which removes it.
    fn panicked(&self, name: String, message: String);
}

/// Threads taking jobs from a bounded queue. A job that panics becomes a failure naming it; the
/// thread goes on with the next job, and the job with it.
pub struct Pool<W: Work> {
    tx: Option<SyncSender<W::Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl<W: Work> Pool<W> {
    /// Starts `n` threads (at least one) taking jobs from a queue of `queue` places.
    pub fn new(n: usize, queue: usize, work: &Arc<W>) -> Result<Pool<W>> {
        let (tx, rx) = sync_channel::<W::Job>(queue);
        let rx = Arc::new(Mutex::new(rx));
        let mut threads = Vec::new();
        for i in 0..n.max(1) {
            let (rx, work) = (rx.clone(), work.clone());
            let spawned = std::thread::Builder::new().name(format!("cacheless-create-{i}")).spawn(move || worker(&rx, &*work));
            match spawned {
                Ok(h) => threads.push(h),
                // Fewer threads are slower, not wrong; none at all is an error.
                Err(e) if threads.is_empty() => return Err(Error::io("spawn", "worker thread", e)),
                Err(_) => break,
            }
        }
        Ok(Pool { tx: Some(tx), threads })
    }

    /// Queues a job, waiting for a place. A job no thread can take any more (they all exited)
    /// is dropped, which removes what it created.
    pub fn send(&self, job: W::Job) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(job);
        }
    }

    /// Waits for every queued job to be done.
    pub fn finish(mut self) {
        self.tx = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn worker<W: Work>(rx: &Mutex<Receiver<W::Job>>, work: &W) {
    loop {
        // The lock is held only to take a job, never while one runs, so a panicking job cannot
        // poison it; should it be poisoned anyway, the queue inside is still sound.
        let job = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
        let Ok(job) = job else { return };
        let name = W::name(&job);
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| work.run(job))) {
            work.panicked(name, panic_message(&*p));
        }
    }
}

/// How the descriptors the extraction may hold are shared out: threads, queued jobs (each
/// holds an open file and its directory, a large file's writer a few more), small files created
/// ahead of their data, files waiting for their batch's syncfs, and resolved directories kept
/// open. Each share shrinks with the limit, down to one of each, so that any limit from a
/// few dozen descriptors works (more slowly: fewer files per syncfs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdPlan {
    /// The open-files limit it shares out.
    pub limit: u64,
    /// Worker threads.
    pub threads: usize,
    /// Places in the job queue.
    pub queue: usize,
    /// Most small files one job may hold (a batch handed to a worker together).
    pub batch: usize,
    /// Small files created ahead of their data (an extraction's batches waiting for their
    /// creation), each holding itself and its directory.
    pub pipeline: usize,
    /// Files of a batch (written back together by one syncfs), and the files kept open for a
    /// second page drop (see `CreateOptions::deferred_drops`).
    pub deferred: usize,
    /// Most finished files open in batches at once, each holding itself and its directory
    /// (see `CreateOptions::batched_open`): a batch per worker and two more where they fit
    /// (each worker may be syncing one while the next fills and the caller publishes one),
    /// two batches at least.
    pub batched_open: usize,
    /// Directories kept open by the resolver.
    pub dirs: usize,
    /// Finished files kept open while they wait for their input's checksums (an extraction
    /// from a compressed archive; see the archive's `Gate`); those past it wait under
    /// temporary names, which costs a rename each.
    pub held: usize,
}

/// Descriptors a job may hold at most: a large file's writer holds its file, its directory (a
/// duplicate), an io_uring instance, and the job its parent directory.
const PER_JOB: usize = 4;
/// Descriptors a finished file of a batch holds until its batch is synced: itself and its
/// directory (files of one directory share it, files of many do not).
const PER_BATCHED: usize = 2;
/// Most small files created ahead of their data.
const PIPELINE_MAX: usize = 160;
/// Most small files in one job, each holding itself and its directory.
const BATCH_MAX: usize = 32;
/// Most finished files held open for their input's checksums (an open file pins its inode and
/// its open file, about a KiB of kernel memory each).
const HELD_MAX: usize = 65536;
/// Descriptors left for everything else (the archive and its ring, the create queue's ring,
/// probes, the resolver's root).
const RESERVE: usize = 12;

/// [`fd_plan`] for this process now: its soft RLIMIT_NOFILE and the descriptors it has open.
pub fn fd_plan_now(threads: usize) -> FdPlan {
    let limit = crate::sys::nofile_limit().unwrap_or(u64::MAX);
    fd_plan(limit, open_fds(), threads)
}

/// Shares out `limit - open_now` descriptors (the soft RLIMIT_NOFILE less those already open)
/// for an extraction asking for `threads` workers.
pub fn fd_plan(limit: u64, open_now: u64, threads: usize) -> FdPlan {
    let avail = usize::try_from(limit.saturating_sub(open_now)).unwrap_or(usize::MAX).saturating_sub(RESERVE);
    // Jobs (running, queued and the one being built) get at most half. A job holds a large
    // file's writer or a batch of small files: batches shrink where fewer than a few jobs
    // would fit.
    let per_job = |batch: usize| (2 * batch).max(PER_JOB);
    let mut batch = BATCH_MAX;
    while batch > 1 && avail / 2 / per_job(batch) < threads.min(4) + 3 {
        batch /= 2;
    }
    let jobs_max = (avail / 2 / per_job(batch)).max(3);
    let threads = threads.clamp(1, jobs_max - 2);
    let queue = (threads * 8).min(jobs_max - threads - 1).max(1);
    let rest = avail.saturating_sub((threads + queue + 1) * per_job(batch));
    let pipeline = (rest / 8).min(PIPELINE_MAX);
    let rest = rest - pipeline * 2;
    // Half of what is left for batches: the files kept for a second page drop (one each)
    // and the files open in batches, two batches at least; as many as the workers can sync
    // side by side where that fits.
    let share = rest / 2;
    let deferred = (share / (2 * PER_BATCHED + 1)).min(512);
    let batched_open = (deferred * (threads + 2)).min((share - deferred) / PER_BATCHED);
    let rest = rest - deferred - batched_open * PER_BATCHED;
    let dirs = rest.clamp(1, 4096);
    // What is left, less an eighth kept free: held files (a single-frame archive holds every
    // file it makes until its end), up to a bound on the kernel memory they pin.
    let held = (rest.saturating_sub(dirs) / 8 * 7).min(HELD_MAX);
    FdPlan { limit, threads, queue, batch, pipeline, deferred, batched_open, dirs, held }
}

/// The message a panic carried (a worker's or a decoder's, caught and turned into an error).
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    match (p.downcast_ref::<&str>(), p.downcast_ref::<String>()) {
        (Some(s), _) => (*s).to_string(),
        (_, Some(s)) => s.clone(),
        _ => "unknown panic".into(),
    }
}

/// Descriptors open in this process now (from /proc/self/fd; a guess where it is missing).
pub fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count() as u64).unwrap_or(16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    struct Recorder {
        done: AtomicU64,
        panics: Mutex<Vec<(String, String)>>,
    }

    impl Work for Recorder {
        type Job = u64;
        fn run(&self, job: u64) {
            if job == 3 {
                panic!("job three fails");
            }
            self.done.fetch_add(1 << job, Ordering::Relaxed);
        }
        fn name(job: &u64) -> String {
            format!("entry-{job}")
        }
        fn panicked(&self, name: String, message: String) {
            self.panics.lock().unwrap().push((name, message));
        }
    }

    #[test]
    fn a_panicking_job_is_a_failure_naming_it_and_the_rest_runs() {
        let w = Arc::new(Recorder { done: AtomicU64::new(0), panics: Mutex::new(Vec::new()) });
        let pool = Pool::new(2, 2, &w).unwrap();
        for j in 0..8 {
            pool.send(j);
        }
        pool.finish();
        assert_eq!(w.done.load(Ordering::Relaxed), 0xff & !(1 << 3), "every other job ran");
        assert_eq!(*w.panics.lock().unwrap(), vec![("entry-3".to_string(), "job three fails".to_string())]);
    }

    #[test]
    fn the_descriptor_plan_fits_the_limit() {
        for (limit, threads) in [(1024u64, 16usize), (1024, 4), (256, 16), (64, 16), (40, 4), (1 << 20, 16)] {
            let p = fd_plan(limit, 10, threads);
            assert!(p.threads >= 1 && p.threads <= threads && p.queue >= 1 && p.dirs >= 1, "{limit}: {p:?}");
            // Two batches fit at least, and no more than the workers can fill and sync.
            assert!(p.batched_open >= 2 * p.deferred && p.batched_open <= (p.threads + 2) * p.deferred, "{limit}: {p:?}");
            let used = (p.threads + p.queue + 1) * (2 * p.batch).max(PER_JOB)
                + p.pipeline * 2
                + p.deferred
                + p.batched_open * PER_BATCHED
                + p.dirs
                + p.held
                + RESERVE
                + 10;
            if limit >= 64 {
                assert!(used as u64 <= limit, "{limit}: {p:?} uses {used}");
            }
        }
        // A generous limit keeps the full figures.
        let p = fd_plan(1 << 20, 10, 16);
        assert_eq!((p.threads, p.queue, p.batch, p.pipeline, p.deferred, p.dirs), (16, 128, 32, 160, 512, 4096));
        assert_eq!(p.batched_open, 18 * 512, "a batch for each worker syncing, one filling, one the caller publishes");
        // And holds files open for the checksums up to its bound; a tighter limit, most of what
        // is left, no more.
        assert_eq!(p.held, HELD_MAX);
        let p = fd_plan(20_000, 10, 16);
        let spare = 20_000 - 10 - RESERVE - (p.threads + p.queue + 1) * 64 - p.pipeline * 2 - p.deferred - p.batched_open * PER_BATCHED - p.dirs;
        assert!(p.held > spare / 2 && p.held < spare, "{p:?}");
    }
}
