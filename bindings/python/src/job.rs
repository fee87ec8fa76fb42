//! The one place where long calls run: the work goes to a worker thread while the calling
//! thread, with the GIL released, wakes a few times a second to run Python's signal handlers
//! (Ctrl-C raises KeyboardInterrupt there) and the caller's progress callback. Either one
//! raising cancels the work through its cancel flag; the call returns only once the worker has
//! stopped, so nothing it borrowed (buffers, files) is released under it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, sync_channel, RecvTimeoutError, Sender, SyncSender};
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

/// A message to the calling thread from the work: it finished, or it asks whether it may name
/// what it completed (see [`Naming`]).
enum Msg {
    Done,
    Ask(SyncSender<bool>),
}

/// The question a job's worker asks the calling thread before it names its last file (the
/// job's naming gate, `Progress::set_naming_gate`, made by [`Naming::gate`]: a copy's last file,
/// a download, an upload's or an uploaded archive's object): only the calling thread can run
/// Python's signal handlers, so a Ctrl-C that came while the last bytes went out is seen there,
/// before the name is given, and not at the next tick after it. The calling thread answers
/// after it has run the signal handlers and made the progress callback's last call; either one
/// raising answers no, and nothing more is named. Files named before the last byte was done
/// (those of a tree) are named without asking: a Ctrl-C keeps every file a job finished.
pub struct Naming {
    progress: Arc<Progress>,
    /// The calling thread's end of the job's channel, while [`run_with`] serves it.
    to_caller: Mutex<Option<Sender<Msg>>>,
    /// The question was asked (its answer then stands: a no closes the job's gate).
    asked: AtomicBool,
    /// The progress callback's last call was made in answer: it is not made again.
    last_made: AtomicBool,
}

impl Naming {
    pub fn new(progress: Arc<Progress>) -> Arc<Naming> {
        Arc::new(Naming { progress, to_caller: Mutex::new(None), asked: AtomicBool::new(false), last_made: AtomicBool::new(false) })
    }

    /// The gate a job asks before each name it gives: yes at once until every byte is done,
    /// then the calling thread's answer, asked once.
    pub fn gate(self: &Arc<Naming>) -> Arc<dyn Fn() -> bool + Send + Sync> {
        let n = self.clone();
        Arc::new(move || {
            if n.progress.bytes() < n.progress.total_bytes() || n.asked.swap(true, Ordering::AcqRel) {
                return true;
            }
            let Some(to_caller) = n.to_caller.lock().unwrap_or_else(|e| e.into_inner()).clone() else { return true };
            let (tx, rx) = sync_channel(1);
            // No answer (the calling thread stopped serving) is a no: nothing is named unseen.
            to_caller.send(Msg::Ask(tx)).is_ok() && rx.recv().unwrap_or(false)
        })
    }
}

/// Sends [`Msg::Done`] when the worker ends, by returning or by a panic.
struct Bye(Sender<Msg>);

impl Drop for Bye {
    fn drop(&mut self) {
        let _ = self.0.send(Msg::Done);
    }
}

/// [`run_measured`], serving `naming`'s question from the work's threads (see [`Naming`]); the
/// callback's last call, if made in answer to it, is not made again.
pub fn run_with<T, F>(
    py: Python<'_>,
    progress: &Progress,
    measure: Measure,
    callback: Option<&Bound<'_, PyAny>>,
    naming: Option<&Naming>,
    work: F,
) -> PyResult<T>
where
    T: Send,
    F: FnOnce() -> T + Send,
{
    // A KeyboardInterrupt cancels the job, which also ends a call of it that waits on a FIFO,
    // a pipe or a terminal (see `cacheless::interrupt`).
    let _watch = cacheless::interrupt::watch(&progress.cancel_flag());
    let (tx, rx) = channel::<Msg>();
    if let Some(n) = naming {
        *n.to_caller.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx.clone());
    }
    let (out, failure) = std::thread::scope(|s| {
        // Only this thread receives; the mutex makes the receiver shareable with `detach`.
        let rx = Mutex::new(rx);
        let handle = s.spawn(move || {
            let _bye = Bye(tx);
            work()
        });
        let mut failure: Option<PyErr> = None;
        // The callback's first call comes at the first tick, then every CALLBACK_EVERY.
        let mut last: Option<Instant> = None;
        loop {
            let msg = py.detach(|| rx.lock().unwrap_or_else(|e| e.into_inner()).recv_timeout(TICK));
            match msg {
                Ok(Msg::Done) | Err(RecvTimeoutError::Disconnected) => break,
                Ok(Msg::Ask(answer)) => {
                    let yes = failure.is_none() && may_name(py, progress, measure, callback, naming, &mut failure);
                    let _ = answer.send(yes);
                    continue;
                }
                Err(RecvTimeoutError::Timeout) => {}
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
    if let Some(n) = naming {
        *n.to_caller.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
    if let Some(e) = failure {
        return Err(e);
    }
    let out = out.map_err(|_| errors::panicked("an I/O worker"))?;
    if let Some(cb) = callback {
        if !naming.is_some_and(|n| n.last_made.load(Ordering::Relaxed)) {
            cb.call1(measure.counts(progress))?;
        }
    }
    Ok(out)
}

/// The calling thread's answer to [`Naming`]'s question: the signal handlers ran and the
/// callback's last call was made without raising (else the exception is kept in `failure` and
/// the job cancelled).
fn may_name(
    py: Python<'_>,
    progress: &Progress,
    measure: Measure,
    callback: Option<&Bound<'_, PyAny>>,
    naming: Option<&Naming>,
    failure: &mut Option<PyErr>,
) -> bool {
    let r = py.check_signals().and_then(|()| match callback {
        Some(cb) => {
            if let Some(n) = naming {
                n.last_made.store(true, Ordering::Relaxed);
            }
            cb.call1(measure.counts(progress)).map(drop)
        }
        None => Ok(()),
    });
    match r {
        Ok(()) => true,
        Err(e) => {
            progress.cancel();
            *failure = Some(e);
            false
        }
    }
}

/// Names what a job staged (`commit(staged)`: a rename or link), unless a signal came since the
/// job's last look (a Ctrl-C while its last bytes went out): then `staged` is dropped, which
/// removes it, and the signal's exception is raised. The progress callback's last call came
/// before, in [`run`]: one that raises leaves nothing named either. (A job that names its
/// files on its worker asks the calling thread instead: [`Naming`].) The commit runs without
/// the GIL; a signal during it is raised after it, when the new file is whole in place.
pub fn commit<S: Send>(py: Python<'_>, staged: S, commit: impl FnOnce(S) -> cacheless::Result<()> + Send) -> PyResult<()> {
    py.check_signals()?;
    py.detach(|| commit(staged)).map_err(|e| errors::engine(&e))
}
