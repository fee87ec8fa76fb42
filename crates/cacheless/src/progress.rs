//! Progress counters that a job updates and a front end (the CLI's bar, Python) polls.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Counters shared between a running job and whoever reports on it, plus a cancel flag the
/// job checks between requests. The library never prints: front ends read these.
///
/// One type for every job: a copy counts bytes and files done; an extraction also counts the
/// archive bytes it has read (its input, against the archive's size) and the entries parsed; a
/// pack counts the file bytes it has read as bytes done and the archive bytes it has written
/// as output bytes.
#[derive(Debug, Default)]
pub struct Progress {
    naming: NamingGate,
    bytes: AtomicU64,
    total_bytes: AtomicU64,
    input_bytes: AtomicU64,
    total_input_bytes: AtomicU64,
    output_bytes: AtomicU64,
    files: AtomicU64,
    total_files: AtomicU64,
    entries: AtomicU64,
    errors: AtomicU64,
    cancel: Arc<AtomicBool>,
}

impl Progress {
    /// Fresh counters.
    pub fn new() -> Progress {
        Progress::default()
    }
    /// Adds bytes done.
    pub fn add_bytes(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
    }
    /// Adds to the expected total of bytes.
    pub fn add_total_bytes(&self, n: u64) {
        self.total_bytes.fetch_add(n, Ordering::Relaxed);
    }
    /// Adds input bytes read (an archive's bytes, before decompression), for jobs whose input
    /// is not their output.
    pub fn add_input_bytes(&self, n: u64) {
        self.input_bytes.fetch_add(n, Ordering::Relaxed);
    }
    /// Adds to the expected total of input bytes.
    pub fn add_total_input_bytes(&self, n: u64) {
        self.total_input_bytes.fetch_add(n, Ordering::Relaxed);
    }
    /// Adds output bytes written (an archive's compressed bytes), for jobs whose output is not
    /// what they count as bytes done.
    pub fn add_output_bytes(&self, n: u64) {
        self.output_bytes.fetch_add(n, Ordering::Relaxed);
    }
    /// Counts an entry (of any type) taken from an archive.
    pub fn entry_done(&self) {
        self.entries.fetch_add(1, Ordering::Relaxed);
    }
    /// Counts a finished file.
    pub fn file_done(&self) {
        self.files.fetch_add(1, Ordering::Relaxed);
    }
    /// Adds to the expected number of files.
    pub fn add_total_files(&self, n: u64) {
        self.total_files.fetch_add(n, Ordering::Relaxed);
    }
    /// Counts a failed item.
    pub fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }
    /// Bytes done so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
    /// Expected total bytes (0 if unknown).
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes.load(Ordering::Relaxed)
    }
    /// Input bytes read so far (0 for jobs that count no input apart).
    pub fn input_bytes(&self) -> u64 {
        self.input_bytes.load(Ordering::Relaxed)
    }
    /// Expected total input bytes (0 if unknown).
    pub fn total_input_bytes(&self) -> u64 {
        self.total_input_bytes.load(Ordering::Relaxed)
    }
    /// Output bytes written so far (0 for jobs that count no output apart).
    pub fn output_bytes(&self) -> u64 {
        self.output_bytes.load(Ordering::Relaxed)
    }
    /// Archive entries taken so far.
    pub fn entries(&self) -> u64 {
        self.entries.load(Ordering::Relaxed)
    }
    /// Files done so far.
    pub fn files(&self) -> u64 {
        self.files.load(Ordering::Relaxed)
    }
    /// Expected total files (0 if unknown).
    pub fn total_files(&self) -> u64 {
        self.total_files.load(Ordering::Relaxed)
    }
    /// Failed items so far.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }
    /// Asks the job to stop at its next check.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
    /// The cancel flag itself, for a signal handler to set (signal-hook's `flag::register`).
    pub fn cancel_flag(&self) -> Arc<AtomicBool> {
        self.cancel.clone()
    }
    /// Whether cancel was asked for.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
    /// Sets the question the job asks before it gives a name to something it finished (a
    /// copy's file, a download, an upload's object): one per job, set before it starts; false
    /// where one was set already. Python's calls set one so that a Ctrl-C seen only by the
    /// calling thread still comes before the last name is given.
    pub fn set_naming_gate(&self, gate: Arc<dyn Fn() -> bool + Send + Sync>) -> bool {
        self.naming.gate.set(gate).is_ok()
    }
    /// Whether the job may name what it finished now: yes where no gate is set. Once the gate
    /// says no the job is cancelled and the answer stays no: nothing more is named (what was
    /// finished and not named is removed, as on an error). A cancel alone names what is
    /// complete, as an interrupted copy keeps every file it finished.
    pub fn may_name(&self) -> bool {
        if self.naming.closed.load(Ordering::Relaxed) {
            return false;
        }
        let Some(gate) = self.naming.gate.get() else { return true };
        if gate() {
            return true;
        }
        self.naming.closed.store(true, Ordering::Relaxed);
        self.cancel();
        false
    }
}

/// The question set by [`Progress::set_naming_gate`], and whether it was answered no.
#[derive(Default)]
struct NamingGate {
    gate: std::sync::OnceLock<Arc<dyn Fn() -> bool + Send + Sync>>,
    closed: AtomicBool,
}

impl std::fmt::Debug for NamingGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamingGate").field("set", &self.gate.get().is_some()).field("closed", &self.closed).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Without a gate every name may be given; with one, its answer counts, a no cancels the
    /// job and stays no (the gate is not asked again), and a second gate is refused.
    #[test]
    fn a_naming_gate_that_says_no_cancels_and_stays_closed() {
        let p = Progress::new();
        assert!(p.may_name() && !p.is_cancelled());
        let asked = Arc::new(AtomicUsize::new(0));
        let answer = Arc::new(AtomicBool::new(true));
        let (a, y) = (asked.clone(), answer.clone());
        assert!(p.set_naming_gate(Arc::new(move || {
            a.fetch_add(1, Ordering::Relaxed);
            y.load(Ordering::Relaxed)
        })));
        assert!(!p.set_naming_gate(Arc::new(|| true)), "one gate per job");
        assert!(p.may_name() && !p.is_cancelled());
        answer.store(false, Ordering::Relaxed);
        assert!(!p.may_name());
        assert!(p.is_cancelled(), "a no cancels the job");
        answer.store(true, Ordering::Relaxed);
        assert!(!p.may_name(), "once no, no again");
        assert_eq!(asked.load(Ordering::Relaxed), 2, "the gate is not asked once it said no");
    }
}
