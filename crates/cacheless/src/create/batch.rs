//! The batch and its syncfs cycle: small files written plainly and written back together,
//! files waiting for their name until a syncfs made their data durable, and the files kept
//! open for a second page drop. A [`Keeper`] may take the durable files instead of their
//! being named at once.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::sync::Arc;

use super::Shared;
use crate::error::{Error, Result};
use crate::fault::{self, Step};
use crate::pending::PendingFile;
use crate::residency;
use crate::sys;

/// Bytes of files waiting for their name before their batch is synced, when
/// [`Durability::AtTheEnd`](super::Durability::AtTheEnd) does not say.
const PUBLISH_BATCH: u64 = 32 << 20;

/// Called once a file waiting for its name got it (`Ok`), or did not (the batch's syncfs or the
/// rename failed: the file is removed, the error names it).
pub type Published = Box<dyn FnOnce(Result<()>) + Send>;

/// Takes the files of a [`FileCreator`](super::FileCreator) once their batch's syncfs made
/// them durable, in place of their being named at once: for a caller that names a file only
/// once something else allows it (extract names a file once the archive's checksums cover it).
/// A keeper names each file with [`PendingFile::publish`] (or [`PendingFile::park`]s it first),
/// or drops it, which removes it; either way it calls the file's [`Published`].
pub trait Keeper: Send + Sync {
    /// A file with `key` is finished and joins a batch: it will be kept once the batch is
    /// synced (batches may be synced out of order, by several writers). Nothing by default.
    fn finished(&self, key: u64) {
        let _ = key;
    }

    /// `file` is durable; `key` is what its writer gave it ([`NewFile::keep_with`](super::NewFile::keep_with),
    /// [`FileCreator::publish_after_sync_keyed`](super::FileCreator::publish_after_sync_keyed); 0 if nothing).
    fn keep(&self, key: u64, file: PendingFile, then: Published);

    /// Called after each batch's syncfs, once its files were handed over (and when a batch
    /// written back held none): the keeper may name what it now can.
    fn synced(&self);

    /// Whether the next file is better created under a temporary name than without a name:
    /// the keeper would park it under one anyway (a rename then names it, where parking costs
    /// a link and a rename).
    fn prefers_temporary(&self) -> bool {
        false
    }
}

/// A finished file in the batch: open (the batch's syncfs needs a descriptor of a file, as a
/// directory may be open with O_PATH only), its pages to drop once written back, and its name
/// to give.
pub(super) struct Batched {
    pub(super) file: Arc<File>,
    pub(super) drop_pages: bool,
    pub(super) publish: Option<(PendingFile, Published)>,
    /// For the creator's [`Keeper`].
    pub(super) key: u64,
}

/// The files waiting for the batch's syncfs, and their bytes.
#[derive(Default)]
pub(super) struct Batch {
    files: Vec<Batched>,
    bytes: u64,
    /// Files of the batches being synced now (open until their batch is done).
    in_sync: usize,
    /// Batches being synced now.
    syncing: usize,
}

impl Batch {
    /// Finished files open in this batch and in those being synced.
    fn open(&self) -> usize {
        self.files.len() + self.in_sync
    }
}

/// A batch being synced: its files are counted open until it is done, however it ends.
struct Syncing<'a> {
    shared: &'a Shared,
    files: usize,
}

impl Drop for Syncing<'_> {
    fn drop(&mut self) {
        {
            let mut b = self.shared.batch.lock().unwrap_or_else(|e| e.into_inner());
            b.in_sync -= self.files;
            b.syncing -= 1;
        }
        self.shared.synced.notify_all();
    }
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch").field("files", &self.files.len()).field("bytes", &self.bytes).finish()
    }
}

impl Shared {
    /// Keeps `file` open for a later drop of its pages, dropping the oldest one kept over the limit.
    pub(super) fn defer(&self, file: Arc<File>) {
        let old = {
            let mut q = self.deferred.lock().unwrap_or_else(|e| e.into_inner());
            q.push_back(file);
            if q.len() > self.opts.deferred_drops {
                q.pop_front()
            } else {
                None
            }
        };
        if let Some(f) = old {
            // Best effort: a failed drop loses no data.
            let _ = residency::drop_range(&f, 0, 0);
        }
    }

    pub(super) fn drop_deferred(&self) {
        self.write_back_batch();
        let files: VecDeque<Arc<File>> = std::mem::take(&mut *self.deferred.lock().unwrap_or_else(|e| e.into_inner()));
        for f in files {
            let _ = residency::drop_range(&f, 0, 0);
        }
    }

    /// Adds a finished file to the batch (its pages to drop, its name to give), writing the
    /// batch back once it is full.
    ///
    /// Past [`CreateOptions::batched_open`](super::CreateOptions::batched_open) files open in
    /// batches, it first waits for a batch being synced to end.
    pub(super) fn add_to_batch(&self, entry: Batched, bytes: u64) {
        if let (Some(k), Some(_)) = (&self.keeper, &entry.publish) {
            k.finished(entry.key);
        }
        let full = {
            let mut b = self.batch.lock().unwrap_or_else(|e| e.into_inner());
            // A slow syncfs must not let every writer hold a batch of its own beyond the
            // descriptors the job has: past its share, wait for one to be done. (With none
            // being synced, this file's batch is written back below instead.)
            while b.open() >= self.opts.batched_open && b.syncing > 0 {
                b = self.synced.wait(b).unwrap_or_else(|e| e.into_inner());
            }
            b.files.push(entry);
            b.bytes += bytes;
            let max_bytes = match self.opts.durability.write_back() {
                0 => PUBLISH_BATCH,
                n => n,
            };
            b.bytes >= max_bytes || b.files.len() >= self.opts.deferred_drops.max(1) || b.open() >= self.opts.batched_open
        };
        if full {
            self.write_back_batch();
        }
    }

    /// Syncs the filesystem of the batched files, then names those waiting for their name (or
    /// hands them to the keeper) and drops the pages of the others (clean now). The page drops
    /// are best effort: the data is in the files whatever happens here. A file waiting for its
    /// name is named only after a syncfs that succeeded (and found the filesystem still
    /// writable); else it is removed and its callback gets the error. Without such files the
    /// result of the syncfs is not needed here: a writeback error is reported to whoever makes
    /// the files durable (syncfs reports it to every descriptor of the filesystem opened before
    /// it).
    pub(super) fn write_back_batch(&self) {
        let (batch, _syncing) = {
            let mut b = self.batch.lock().unwrap_or_else(|e| e.into_inner());
            let files = std::mem::take(&mut b.files);
            b.bytes = 0;
            let n = files.len();
            b.syncing += 1;
            b.in_sync += n;
            (files, Syncing { shared: self, files: n })
        };
        let Some(first) = batch.first() else {
            // Nothing to sync; what the keeper holds may be named by now.
            if let Some(k) = &self.keeper {
                k.synced();
            }
            return;
        };
        let synced = if batch.iter().any(|b| b.publish.is_some()) {
            sys::syncfs(first.file.as_fd())
        } else {
            if !fault::skipped(Step::Syncfs) {
                sys::write_back(first.file.as_fd());
            }
            Ok(())
        };
        for b in batch {
            if let Some((pending, then)) = b.publish {
                match (&synced, &self.keeper) {
                    (Ok(()), Some(k)) => k.keep(b.key, pending, then),
                    (Ok(()), None) => then(pending.publish(false)),
                    // Dropping `pending` removes its temporary.
                    (Err(e), _) => then(Err(Error::io("syncfs", pending.path(), io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(sys::consts::EIO))))),
                }
            }
            if b.drop_pages {
                let _ = residency::drop_range(&b.file, 0, 0);
            }
        }
        if let Some(k) = &self.keeper {
            k.synced();
        }
    }
}

/// Makes everything written to the filesystem of `dir` durable (syncfs, Linux 2.6.39), as a
/// caller of a [`FileCreator`](super::FileCreator) without `sync` ends (extract), and fails
/// (EROFS) when the filesystem went read-only on an error meanwhile: a syncfs then succeeds
/// though what was written since the filesystem's last commit is lost. Retried when
/// interrupted; `path` names `dir` in the error.
pub fn sync_filesystem(dir: BorrowedFd<'_>, path: &Path) -> Result<()> {
    sys::syncfs(dir).map_err(|e| Error::io("syncfs", path, e))
}
