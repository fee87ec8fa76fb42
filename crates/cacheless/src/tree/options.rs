//! What a tree copy is asked to do, and what it reports.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;

use crate::copy::{CopyReport, Reflink, Sparse, VerifyHook};
use crate::digest::Algo;
use crate::error::Error;
use crate::options::IoOptions;

/// Called with each item that failed (the job goes on with the rest).
pub type OnError = Arc<dyn Fn(&Error) + Send + Sync>;
/// Called with the report of each file copied, once it is in place.
pub type OnCopied = Arc<dyn Fn(&CopyReport) + Send + Sync>;

/// What a tree copy is asked to do: `cacheless cp`'s flags, and the engine's I/O settings.
#[derive(Clone)]
pub struct TreeOptions {
    /// Mode, backend, request size and depth, and the memory budget of every read and write.
    pub io: IoOptions,
    /// Copy directories (symlinks inside are copied as symlinks). Without it a directory
    /// source is an error, and a symlink source is followed.
    pub recursive: bool,
    /// Archive: recursive, and keep hard links within the tree as hard links, symlinks' times,
    /// ownership (when root), extended attributes and ACLs.
    pub archive: bool,
    /// Do not overwrite an existing destination file.
    pub no_clobber: bool,
    /// Skip a file whose destination is as new and the same size (resumes an interrupted copy).
    pub update: bool,
    /// Clone the data (FICLONE) where the filesystem can (default auto).
    pub reflink: Reflink,
    /// Holes (default auto: kept).
    pub sparse: Sparse,
    /// Read each durable copy back from the disk and compare its checksum with the source's.
    pub verify: Option<Algo>,
    /// Bytes per second moved at most (reads and writes).
    pub bwlimit: Option<u64>,
    /// Worker threads copying files (default: 2 per CPU, 4 to 16).
    pub threads: Option<usize>,
    /// Make the copies durable before renaming them into place (default true).
    pub sync: bool,
    /// Walk the sources first to set the progress's totals of bytes and files.
    pub count_totals: bool,
    /// Told of each failed item.
    pub on_error: Option<OnError>,
    /// Told of each file copied.
    pub on_copied: Option<OnCopied>,
    /// Test hook run before each verification (see [`VerifyHook`]).
    pub before_verify: Option<VerifyHook>,
}

impl TreeOptions {
    /// A plain copy of files (not recursive), durable, reflink and sparse auto, with `io`.
    pub fn new(io: IoOptions) -> TreeOptions {
        TreeOptions {
            io,
            recursive: false,
            archive: false,
            no_clobber: false,
            update: false,
            reflink: Reflink::Auto,
            sparse: Sparse::Auto,
            verify: None,
            bwlimit: None,
            threads: None,
            sync: true,
            count_totals: false,
            on_error: None,
            on_copied: None,
            before_verify: None,
        }
    }
}

impl Default for TreeOptions {
    /// [`TreeOptions::new`] with the default I/O settings.
    fn default() -> TreeOptions {
        TreeOptions::new(IoOptions::default())
    }
}

impl fmt::Debug for TreeOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TreeOptions")
            .field("io", &self.io)
            .field("recursive", &self.recursive)
            .field("archive", &self.archive)
            .field("no_clobber", &self.no_clobber)
            .field("update", &self.update)
            .field("reflink", &self.reflink)
            .field("sparse", &self.sparse)
            .field("verify", &self.verify)
            .field("bwlimit", &self.bwlimit)
            .field("threads", &self.threads)
            .field("sync", &self.sync)
            .field("count_totals", &self.count_totals)
            .field("on_error", &self.on_error.is_some())
            .field("on_copied", &self.on_copied.is_some())
            .field("before_verify", &self.before_verify.is_some())
            .finish()
    }
}

/// What a tree copy did (the fields of `cacheless cp --json`).
#[derive(Debug, Default, Serialize)]
pub struct TreeReport {
    /// Each file copied, in the order they were put in place.
    pub files: Vec<CopyReport>,
    /// Files copied (`files.len()`).
    pub copied: u64,
    /// Of those, the ones cloned (FICLONE).
    pub reflinked: u64,
    /// Hard links made (archive mode).
    pub hardlinks: u64,
    /// Items skipped by `no_clobber` or `update`.
    pub skipped: u64,
    /// Items that failed.
    pub errors: u64,
    /// Bytes done, as the progress counted them.
    pub bytes: u64,
    /// Bytes of data read and written (0 for a reflink; less than the size for sparse files).
    pub data_bytes: u64,
    /// Seconds the whole job took.
    pub elapsed_s: f64,
    /// Seconds of the last batch's sync, the hard links, the directories' metadata and the
    /// final syncfs.
    pub final_sync_s: f64,
    /// Seconds spent reading copies back to verify them (summed over the workers).
    pub verify_s: f64,
    /// The rate limit, if any.
    pub bwlimit: Option<u64>,
    /// (seconds from the first byte, bytes done) once a second, while a rate limit is set.
    pub progress_samples: Vec<(f64, u64)>,
    /// Whether the job was cancelled through its progress (files not yet finished were removed).
    pub interrupted: bool,
    /// The first failure, if any.
    #[serde(skip)]
    pub first_error: Option<Error>,
}
