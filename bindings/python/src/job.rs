//! The one place where long calls run: the work goes to a worker thread while the calling
//! thread, with the GIL released, wakes a few times a second to run Python's signal handlers
//! (Ctrl-C raises KeyboardInterrupt there) and the caller's progress callback. Either one
//! raising cancels the work through its cancel flag; the call returns only once the worker has
//! stopped, so nothing it borrowed (buffers, files) is released under it.

use std::sync::mpsc::{channel, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use crate::errors;

/// How often the calling thread checks for signals.
const TICK: Duration = Duration::from_millis(50);
/// How often, at most, the progress callback is called while the work runs.
const CALLBACK_EVERY: Duration = Duration::from_millis(250);

/// What a running job reports and how it is stopped.
pub trait Watch: Sync {
    /// (bytes done, bytes expected; 0 when unknown).
    fn counts(&self) -> (u64, u64);
    /// Asks the work to stop at its next check.
    fn cancel(&self);
}

impl Watch for cacheless::Progress {
    fn counts(&self) -> (u64, u64) {
        (self.bytes(), self.total_bytes())
    }
    fn cancel(&self) {
        cacheless::Progress::cancel(self)
    }
}

/// An extraction's counters: compressed bytes read out of the archive's size.
pub struct ArchiveWatch {
    /// The extraction's counters.
    pub progress: Arc<cacheless_archive::Progress>,
    /// The archive's size.
    pub total: u64,
}

impl Watch for ArchiveWatch {
    fn counts(&self) -> (u64, u64) {
        (self.progress.archive_bytes.load(std::sync::atomic::Ordering::Relaxed), self.total)
    }
    fn cancel(&self) {
        self.progress.cancel.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Runs `work` on a worker thread (see the module documentation) and returns its result, or
/// the exception a signal handler or `callback(done, total)` raised. The callback also gets a
/// last call when the work succeeded.
pub fn run<T, F>(py: Python<'_>, watch: &dyn Watch, callback: Option<&Bound<'_, PyAny>>, work: F) -> PyResult<T>
where
    T: Send,
    F: FnOnce() -> T + Send,
{
    let (out, failure) = std::thread::scope(|s| {
        let (tx, rx) = channel::<()>();
        // Only this thread receives; the mutex makes the receiver shareable with `detach`.
        let rx = Mutex::new(rx);
        let handle = s.spawn(move || {
            let r = work();
            let _ = tx.send(());
            r
        });
        let mut failure: Option<PyErr> = None;
        // The callback's first call comes at the first tick, then every CALLBACK_EVERY.
        let mut last: Option<Instant> = None;
        loop {
            // A worker that panicked drops its sender: that ends the wait too.
            let finished = py.detach(|| {
                let rx = rx.lock().unwrap_or_else(|e| e.into_inner());
                !matches!(rx.recv_timeout(TICK), Err(RecvTimeoutError::Timeout))
            });
            if finished {
                break;
            }
            if failure.is_some() {
                continue;
            }
            if let Err(e) = py.check_signals() {
                watch.cancel();
                failure = Some(e);
                continue;
            }
            if let Some(cb) = callback {
                if last.is_none_or(|t| t.elapsed() >= CALLBACK_EVERY) {
                    last = Some(Instant::now());
                    if let Err(e) = cb.call1(watch.counts()) {
                        watch.cancel();
                        failure = Some(e);
                    }
                }
            }
        }
        (py.detach(|| handle.join()), failure)
    });
    if let Some(e) = failure {
        return Err(e);
    }
    let out = out.map_err(|_| errors::panicked("an I/O worker"))?;
    if let Some(cb) = callback {
        cb.call1(watch.counts())?;
    }
    Ok(out)
}
