//! Crash consistency of the engine, shown on real filesystems: what cacheless says is durable
//! survives a power cut, and no half-written file ever carries a final name.
//!
//! A workload runs on a real filesystem (ext4, xfs, btrfs) whose block device is a loop device
//! over an image file served by a small FUSE filesystem of our own ([`record`]), which logs in
//! order every write the loop driver sends it and every flush (fsync of the image: the
//! filesystem's cache flushes and FUA writes) as a barrier. The workload puts markers in the
//! same log the moment a call returns ("call X returned"), so the log says which promises were
//! made before each point.
//!
//! A power cut keeps what was flushed plus any subset of what was written since, in any order.
//! [`states`] builds such images from the log: the image at every flush, and between two
//! flushes prefixes and seeded random subsets of the writes since. [`check`] runs the
//! filesystem's own checker on each, mounts it (replaying its journal) and checks the
//! [`workload`]'s expectations: a file whose call returned before the cut is byte-exact; a
//! final name holds the old content, the complete new content, or nothing; the engine's
//! temporaries left behind are counted apart. [`sweep()`] puts it together per filesystem and
//! workload, and the `cacheless-crash` binary (`scripts/crash`) prints the tally.
//!
//! Under the `fault-injection` feature, `cacheless::fault::skip_durability` removes one of the
//! engine's durability steps, and the sweep must then report violations.
#![deny(unsafe_code)]

pub mod check;
pub mod checkpoint;
pub mod cleanup;
pub mod cmd;
pub mod record;
pub mod states;
pub mod sweep;
pub mod workload;
pub mod workloads;

pub use sweep::{sweep, FsKind, Outcome, SweepOptions, Violation};
pub use workload::{Ctx, FileExpect, Workload};

/// Why a sweep could not run: a tool, a mount, the FUSE session, bad input.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A command failed (or could not be started).
    #[error("{what}: {detail}")]
    Command {
        /// The command line.
        what: String,
        /// Its exit status and standard error, or why it did not start.
        detail: String,
    },
    /// An I/O call on a scratch file failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// The operation.
        what: &'static str,
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A request that cannot be run, or what this machine cannot do.
    #[error("{0}")]
    Invalid(String),
    /// A workload failed before a crash could be simulated.
    #[error("workload {workload} failed: {detail}")]
    Workload {
        /// The workload's name.
        workload: String,
        /// What failed.
        detail: String,
    },
    /// The run was interrupted (SIGINT, SIGTERM).
    #[error("interrupted")]
    Interrupted,
}

impl Error {
    /// An I/O error on `path`.
    pub fn io(what: &'static str, path: &std::path::Path, source: std::io::Error) -> Error {
        Error::Io { what, path: path.display().to_string(), source }
    }
}

/// The crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
