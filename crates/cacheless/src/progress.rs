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
}
