//! The one place where long calls run: the work goes to a worker thread while the calling
//! thread, with the GIL released, wakes a few times a second to run Python's signal handlers
//! (Ctrl-C raises KeyboardInterrupt there) and the caller's progress callback. Either one
//! raising cancels the work through its cancel flag; the call returns only once the worker has
//! stopped, so nothing it borrowed (buffers, files) is released under it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cacheless::Progress;
use pyo3::prelude::*;

use crate::errors;

/// How often the calling thread checks for signals.
const TICK: Duration = Duration::from_millis(50);
/// How often, at most, the progress callback is called while the work runs.
const CALLBACK_EVERY: Duration = Duration::from_millis(250);

/// What a job's progress callback is given, as `(done, total)` (total 0 when unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// Bytes read or written against the bytes expected (reads, copies, saves).
    Output,
    /// Input bytes read against the input's size (an extraction: the archive's bytes).
    Input,
}

impl Measure {
    fn counts(self, p: &Progress) -> (u64, u64) {
        match self {
            Measure::Output => (p.bytes(), p.total_bytes()),
            Measure::Input => (p.input_bytes(), p.total_input_bytes()),
        }
    }
}

/// [`run_measured`] with the output measure.
pub fn run<T, F>(py: Python<'_>, progress: &Progress, callback: Option<&Bound<'_, PyAny>>, work: F) -> PyResult<T>
where
    T: Send,
    F: FnOnce() -> T + Send,
{
    run_measured(py, progress, Measure::Output, callback, work)
}

/// Runs `work` on a worker thread (see the module documentation) and returns its result, or
/// the exception a signal handler or `callback(done, total)` (counted by `measure`) raised;
/// either cancels `progress`, whose flag the work checks. The callback also gets a
/// last call when the work succeeded.
pub fn run_measured<T, F>(py: Python<'_>, progress: &Progress, measure: Measure, callback: Option<&Bound<'_, PyAny>>, work: F) -> PyResult<T>
where
    T: Send,
    F: FnOnce() -> T + Send,
{
    run_with(py, progress, measure, callback, None, work)
}

/// [`run_measured`], where the work may have made the callback's last call itself (set in
/// `last_made`: a job that calls it before it names its files, see [`last_call_gate`]): then
/// it is not made again.
pub fn run_with<T, F>(
    py: Python<'_>,
    progress: &Progress,
    measure: Measure,
    callback: Option<&Bound<'_, PyAny>>,
    last_made: Option<&AtomicBool>,
    work: F,
) -> PyResult<T>
where
    T: Send,
    F: FnOnce() -> T + Send,
{
    // A KeyboardInterrupt cancels the job, which also ends a call of it that waits on a FIFO,
    // a pipe or a terminal (see `cacheless::interrupt`).
    let _watch = cacheless::interrupt::watch(&progress.cancel_flag());
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
                progress.cancel();
                failure = Some(e);
                continue;
            }
            if let Some(cb) = callback {
                if last.is_none_or(|t| t.elapsed() >= CALLBACK_EVERY) {
                    last = Some(Instant::now());
                    if let Err(e) = cb.call1(measure.counts(progress)) {
                        progress.cancel();
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
        if !last_made.is_some_and(|m| m.load(Ordering::Relaxed)) {
            cb.call1(measure.counts(progress))?;
        }
    }
    Ok(out)
}

/// The callback's last call, made by the work before it names what it wrote (a copy job's
/// gate, `cacheless_cp::Gate`): once every byte is done, `callback(done, total)` is called
/// (holding the GIL, from the work's thread) and `last_made` set; should it raise, its exception
/// is kept in `raised` and the gate says no, so that nothing more is named and the call raises
/// it. Before the last byte the gate says yes without a call.
pub fn last_call_gate(
    callback: Py<PyAny>,
    progress: Arc<Progress>,
    last_made: Arc<AtomicBool>,
    raised: Arc<Mutex<Option<PyErr>>>,
) -> Arc<dyn Fn() -> bool + Send + Sync> {
    Arc::new(move || {
        let (done, total) = (progress.bytes(), progress.total_bytes());
        if done < total || last_made.swap(true, Ordering::Relaxed) {
            return true;
        }
        Python::attach(|py| match callback.call1(py, (done, total)) {
            Ok(_) => true,
            Err(e) => {
                *raised.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                false
            }
        })
    })
}

/// Names what a job staged (`commit(staged)`: a rename or link), unless a signal came since the
/// job's last look (a Ctrl-C while its last bytes went out): then `staged` is dropped, which
/// removes it, and the signal's exception is raised. The progress callback's last call came
/// before, in [`run`]: one that raises leaves nothing named either. The commit runs without
/// the GIL; a signal during it is raised after it, when the new file is whole in place.
pub fn commit<S: Send>(py: Python<'_>, staged: S, commit: impl FnOnce(S) -> cacheless::Result<()> + Send) -> PyResult<()> {
    py.check_signals()?;
    py.detach(|| commit(staged)).map_err(|e| errors::engine(&e))
}
