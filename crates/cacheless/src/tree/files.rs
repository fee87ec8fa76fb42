//! The file copies of a tree copy, on the pool's workers: each file staged by the engine's
//! [`stage_copy`], then committed on its own (large files, verified ones) or with a batch of
//! small ones made durable by one `syncfs`.

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Sink;
use crate::copy::{stage_copy, CopyOptions, CopyReport, Method, Staged};
use crate::create::FileCreator;
use crate::error::{Error, ErrorKind};

use crate::pool::Work;
use crate::read::ReadOptions;
use crate::sys;
use crate::write::WriteOptions;

/// Access and modification times of `m`, as the writer takes them.
pub(super) fn times(m: &std::fs::Metadata) -> (SystemTime, SystemTime) {
    // st_*time_nsec is 0..1e9 (the kernel's timespec).
    let t = |s: i64, ns: i64| {
        let ns = u32::try_from(ns).unwrap_or(0);
        match u64::try_from(s) {
            Ok(s) => UNIX_EPOCH + Duration::new(s, ns),
            Err(_) => UNIX_EPOCH - Duration::new(s.unsigned_abs(), 0) + Duration::from_nanos(ns.into()),
        }
    };
    (t(m.atime(), m.atime_nsec()), t(m.mtime(), m.mtime_nsec()))
}

/// Small files staged and waiting for the `syncfs` that makes them durable before renaming.
#[derive(Default)]
pub(super) struct Batch {
    files: Vec<Staged>,
    bytes: u64,
}

/// Files per batch, and bytes per batch, before a syncfs and the renames (or links).
pub(super) const BATCH_FILES: usize = 512;
const BATCH_BYTES: u64 = 256 << 20;
/// Bytes per batch where its files are written plainly, without a name, and left for the
/// batch's syncfs to write back together (see `Copier::batch_bytes`): what the page cache
/// holds of the copy at most.
pub(super) const PLAIN_BATCH_BYTES: u64 = 32 << 20;

/// One file for a worker.
pub(super) struct FileJob {
    pub src: PathBuf,
    pub dst: PathBuf,
    pub dir: Arc<OwnedFd>,
    pub name: OsString,
    pub meta: std::fs::Metadata,
    /// `dir` is one the copy made and has no default ACL (see `CopyOptions::plain_dir`).
    pub plain: bool,
}

/// What the walk and the workers share.
pub(super) struct Copier {
    pub ro: ReadOptions,
    pub wo: WriteOptions,
    pub co: CopyOptions,
    /// `co` for files in a directory the copy made that has no default ACL.
    pub co_plain: CopyOptions,
    pub creator: FileCreator,
    /// The creator of batched small files when they wait for their batch's syncfs without a
    /// name (O_TMPFILE, linked into place after it); `None`: under temporary names, renamed.
    pub unnamed: Option<FileCreator>,
    /// Files per batch (each file without a name holds a descriptor until it is linked).
    pub batch_files: usize,
    pub sink: Arc<Sink>,
    /// Batch small files (durable by one syncfs per batch).
    pub batched: bool,
    pub batch: Mutex<Batch>,
    pub reports: Mutex<Vec<CopyReport>>,
    pub reflinked: AtomicU64,
    pub verify_ns: AtomicU64,
    /// Something was put in place without a directory fsync (a batch's renames, a symlink):
    /// the final syncfs must run, even when the copy made no folder.
    pub unsynced: AtomicBool,
}

impl Copier {
    fn done(&self, r: CopyReport) {
        self.sink.copied(&r);
        if r.method == Method::Reflink {
            self.reflinked.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(v) = &r.verify {
            self.verify_ns.fetch_add(u64::try_from(Duration::from_secs_f64(v.seconds).as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
        }
        self.reports.lock().unwrap_or_else(|e| e.into_inner()).push(r);
    }

    fn copy(&self, job: FileJob) {
        if self.sink.progress.is_cancelled() {
            return;
        }
        let mut wo = self.wo.clone();
        wo.permissions = Some(job.meta.mode() & 0o7777);
        let (at, mt) = times(&job.meta);
        wo.atime = Some(at);
        wo.mtime = Some(mt);
        let len = job.meta.len();
        let batch = self.batched && len <= self.co.small_file;
        if batch {
            wo.sync = false;
        }
        let creator = match &self.unnamed {
            Some(c) if batch => c,
            _ => &self.creator,
        };
        let co = if job.plain { &self.co_plain } else { &self.co };
        let staged = match stage_copy(&job.src, &job.dir, &job.name, &job.dst, &self.ro, &wo, co, Some(creator), &self.sink.progress) {
            Ok(s) => s,
            Err(e) => return self.sink.fail(e),
        };
        if !batch {
            return match staged.commit() {
                Ok(r) => self.done(r),
                Err(e) => self.sink.fail(e),
            };
        }
        let full = {
            let mut b = self.batch.lock().unwrap_or_else(|e| e.into_inner());
            b.bytes += len;
            b.files.push(staged);
            if b.files.len() >= self.batch_files || b.bytes >= self.batch_bytes() {
                Some(std::mem::take(&mut *b))
            } else {
                None
            }
        };
        if let Some(b) = full {
            self.flush(b);
        }
    }

    /// Bytes per batch: [`PLAIN_BATCH_BYTES`] where `unnamed` writes small files plainly, their
    /// dirty pages waiting for the batch's syncfs (one writeback of many files in few large
    /// requests, not one uncached write-through a file); [`BATCH_BYTES`] where each file is
    /// written uncached on its own.
    fn batch_bytes(&self) -> u64 {
        match &self.unnamed {
            Some(c) if c.writes_back_together(0) => PLAIN_BATCH_BYTES,
            _ => BATCH_BYTES,
        }
    }

    /// Takes the batch still open (after the last file was queued).
    pub fn rest(&self) -> Batch {
        std::mem::take(&mut *self.batch.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Makes a batch durable with one syncfs, then renames its files into place. Its files are
    /// complete (each was written whole before it joined the batch), so an interrupted copy
    /// still keeps them, as it keeps every other file it finished.
    pub fn flush(&self, b: Batch) {
        if b.files.is_empty() {
            return;
        }
        if let Err(e) = sys::syncfs(b.files[0].dir().as_fd()) {
            // Not durable: none of them takes its final name (dropping them removes them).
            for s in &b.files {
                self.sink.fail(Error::io("syncfs", s.path(), std::io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(libc::EIO))));
            }
            return;
        }
        // Written back now: what the small files' writes left in the cache can go.
        self.creator.drop_deferred();
        // Their renames are not synced here: the final syncfs makes them durable.
        self.unsynced.store(true, Ordering::Relaxed);
        // Copies to verify are read back from the disk together: all their reads are started
        // before the first is waited for (each commit verifies its file before naming it).
        let mut files = Vec::with_capacity(b.files.len());
        for s in b.files {
            match s.prefetch() {
                Ok(()) => files.push(s),
                Err(e) => self.sink.fail(e),
            }
        }
        for s in files {
            match s.commit() {
                Ok(r) => self.done(r),
                Err(e) => self.sink.fail(e),
            }
        }
    }
}

/// Files handed to a worker at once (see [`Jobs`]).
pub(super) const JOB_FILES: usize = 16;

/// Files of one directory for one worker, copied one after the other: a worker woken per file
/// costs a wake and a wait (two futex calls) per small file when the walk is the slower side.
pub(super) type Jobs = Vec<FileJob>;

impl Work for Copier {
    type Job = Jobs;
    fn run(&self, jobs: Jobs) {
        let n = jobs.len();
        for job in jobs {
            if n == 1 {
                // The pool reports a panic of a job of one file.
                self.copy(job);
                continue;
            }
            // Each file's panic is its own failure; the others still go.
            let name = job.dst.display().to_string();
            if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.copy(job))) {
                self.panicked(name, crate::pool::panic_message(&*p));
            }
        }
    }
    fn name(jobs: &Jobs) -> String {
        jobs.first().map(|j| j.dst.display().to_string()).unwrap_or_default()
    }
    fn panicked(&self, name: String, message: String) {
        self.sink.fail(Error::new(ErrorKind::Io, "copy", name, format!("internal error while copying it ({message}); removed")));
    }
}
