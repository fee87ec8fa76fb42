//! The settings every job shares (mode, backend, request size, depth, memory budget), in one
//! value that front ends build once from their flags or keywords and jobs embed.

use crate::buf::Budget;
use crate::mode::{BackendKind, Mode};

/// Default size of one I/O request. Chosen by measurement on the development machine: see
/// docs/BENCHMARKS.md, "request size and queue depth".
pub const DEFAULT_BLOCK_SIZE: usize = 4 << 20;
/// Default number of requests in flight per file (same measurement).
pub const DEFAULT_QUEUE_DEPTH: usize = 8;
/// Default memory budget for all the buffers of one job: 256 MiB holds the default queue of
/// 4 MiB requests for several files at once and is small beside the machines that move big data.
pub const DEFAULT_BUDGET: usize = 256 << 20;

/// How a job reads and writes: the mode and backend asked for, the request size and depth, and
/// the budget every buffer comes out of. Cloning shares the budget.
#[derive(Debug, Clone)]
pub struct IoOptions {
    /// Requested mode (default auto: decided per file, with the reason reported).
    pub mode: Mode,
    /// Requested backend (default auto: io_uring where the kernel allows it, else threads).
    pub backend: BackendKind,
    /// Size of each request; rounded up to the O_DIRECT alignment. At most 1 GiB.
    pub block_size: usize,
    /// Requests in flight per file (read-ahead depth; for writes, 0 writes through).
    pub queue_depth: usize,
    /// The memory budget buffers come out of.
    pub budget: Budget,
}

impl IoOptions {
    /// Defaults (auto mode and backend, default request size and depth) with `budget`.
    pub fn new(budget: Budget) -> IoOptions {
        IoOptions { mode: Mode::Auto, backend: BackendKind::Auto, block_size: DEFAULT_BLOCK_SIZE, queue_depth: DEFAULT_QUEUE_DEPTH, budget }
    }
}

impl Default for IoOptions {
    /// Defaults with a budget of its own of [`DEFAULT_BUDGET`].
    fn default() -> IoOptions {
        IoOptions::new(Budget::new(DEFAULT_BUDGET))
    }
}

/// When a job's files are made durable, and when they get their final names: one type for every
/// writer (a single file's write, a tree copy, an extraction, a pack), each taking the variants
/// it can honour and refusing the others before anything moves (see each job's options).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Each file is fsynced (its data and attributes, and its folder after the rename that
    /// names it) before it is named and closed (the default of a single file's write).
    #[default]
    EachFile,
    /// Nothing is made durable: a crash may leave files empty or short under their names
    /// (`--no-sync`, `sync=False`). With `write_back` (bytes), small files are written back
    /// together for the cache's sake as under [`Durability::AtTheEnd`], and (extraction) named
    /// after their batch's syncfs as under [`Durability::NamedAfterSync`]; no syncfs ends the job.
    Off {
        /// Bytes of small files written back together (`None`: each file on its own).
        write_back: Option<u64>,
    },
    /// Nothing is synced file by file: the job makes the whole tree durable at the end (one
    /// syncfs; for a [`crate::FileCreator`], its caller does). With `write_back` (bytes),
    /// files under `SMALL_WRITE` that auto would write uncached are written plainly instead,
    /// kept open, and once this many bytes of them (or [`crate::CreateOptions::deferred_drops`]
    /// files) are waiting, the filesystem is synced (syncfs, which writes them back in a few
    /// large requests rather than one or more each) and their pages are dropped: the cache
    /// never holds more than about this many bytes of theirs, and the device sees a fraction of
    /// the requests. Dirty pages of other programs on the same filesystem are written back by
    /// the same syncfs (they stay cached).
    AtTheEnd {
        /// Bytes of small files written back together (`None`: each file on its own).
        write_back: Option<u64>,
    },
    /// As [`Durability::AtTheEnd`], and files are named only once their data is durable:
    /// [`crate::FileCreator::create`] creates each file without a name (O_TMPFILE), or under a
    /// temporary name beside its final one where the filesystem has no O_TMPFILE (or
    /// `CACHELESS_DISABLE=tmpfile`); once finished it waits in the batch, and the batch's syncfs
    /// is followed by the links (or renames) that name its files. A power cut then leaves under
    /// a final name nothing, the file it replaced, or the complete new file, never a file whose
    /// data did not reach the disk (which ext4 shows as zeros of the new length); what it may
    /// leave besides is nothing (an unnamed file is freed at the next mount) or, under
    /// temporary names, the temporaries `.NAME.cacheless-BOOT-PID-N.lk.tmp`. A last
    /// [`crate::FileCreator::publish_now`] names what is still waiting, and the job's final
    /// syncfs makes the names durable (extract's default). The batch is written back every
    /// `write_back` bytes (32 MiB when `None`; small files are then written as auto decides) or
    /// [`crate::CreateOptions::deferred_drops`] files.
    NamedAfterSync {
        /// Bytes per batch, and small files written plainly to be written back together.
        write_back: Option<u64>,
    },
}

impl Durability {
    /// [`Durability::EachFile`] where `sync`, else [`Durability::Off`] without batches: a door's
    /// `sync` switch (`--no-sync`, `sync=False`) for a job that syncs file by file.
    pub fn synced(sync: bool) -> Durability {
        if sync {
            Durability::EachFile
        } else {
            Durability::Off { write_back: None }
        }
    }

    /// [`Durability::NamedAfterSync`] where `sync`, else [`Durability::Off`], both with
    /// `write_back`: a door's `sync` switch for a job that names its files after their batch's
    /// syncfs (extract).
    pub fn batched(sync: bool, write_back: Option<u64>) -> Durability {
        if sync {
            Durability::NamedAfterSync { write_back }
        } else {
            Durability::Off { write_back }
        }
    }

    /// For a job that makes its files durable one by one or not at all (cp, pack): `Ok` for
    /// [`Durability::EachFile`] and `Off` without batches, else the refusal (see
    /// [`Durability::refused`]).
    pub fn file_by_file(self, job: &str, path: &std::path::Path) -> crate::Result<()> {
        match self {
            Durability::EachFile | Durability::Off { write_back: None } => Ok(()),
            d => Err(d.refused(job, path, "EachFile, or Off without write_back")),
        }
    }

    /// Whether each file is fsynced before it is named and closed.
    pub fn each_file(self) -> bool {
        self == Durability::EachFile
    }

    /// Whether the job's files are durable when it reports success (every variant but `Off`).
    pub fn durable(self) -> bool {
        !matches!(self, Durability::Off { .. })
    }

    /// Bytes of small files written back together (0: none are).
    pub fn write_back(self) -> u64 {
        match self {
            Durability::EachFile => 0,
            Durability::Off { write_back } | Durability::AtTheEnd { write_back } | Durability::NamedAfterSync { write_back } => write_back.unwrap_or(0),
        }
    }

    /// Whether files are named after their batch's syncfs.
    pub fn names_after_sync(self) -> bool {
        matches!(self, Durability::NamedAfterSync { .. })
    }

    /// The error refusing this durability for `job` on `path`, a job that takes only `offered`
    /// (their names); nothing has moved when a job returns it.
    pub fn refused(self, job: &str, path: &std::path::Path, offered: &str) -> crate::Error {
        crate::Error::message(
            crate::ErrorKind::InvalidInput,
            path,
            format!("{job} {}: durability {self:?} is not offered (it takes {offered}); nothing was done", path.display()),
        )
    }
}

/// How a file being written is named (a single file's write: [`crate::WriteOptions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Naming {
    /// Under a temporary name beside the destination, renamed over it once complete (the
    /// default): the final name shows the old file or the whole new one, never a part.
    #[default]
    Temporary,
    /// Under the final name from the start, which must not exist; an unfinished file is still
    /// removed.
    Final,
}
