//! Errors of the archive reader and the file creator.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong while reading or extracting an archive.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An OS call failed on a path (open, mkdirat, write, ...).
    #[error("{op} {path}: {source}")]
    Io {
        /// The operation that failed, e.g. `openat`.
        op: &'static str,
        /// The path it was applied to (relative to the destination for entries).
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The archive ended inside a header or inside an entry's data.
    #[error("archive truncated in {what} of entry {entry:?} at tar offset {offset}: the entry being written was removed")]
    Truncated {
        /// `header` or `data`.
        what: &'static str,
        /// The entry name, as far as known.
        entry: String,
        /// Offset in the uncompressed tar stream.
        offset: u64,
    },
    /// A header is not valid tar (bad checksum, bad number, overflowing field, bad pax record).
    #[error("corrupt archive at tar offset {offset} (entry {entry:?}): {reason}")]
    Corrupt {
        /// What is wrong.
        reason: String,
        /// The entry name, as far as known.
        entry: String,
        /// Offset in the uncompressed tar stream.
        offset: u64,
    },
    /// The decompressor reported an error (corrupt or truncated compressed stream).
    #[error("compressed stream corrupt or truncated in entry {entry:?} near tar offset {offset}: {source}")]
    Decompress {
        /// The entry being read, as far as known.
        entry: String,
        /// Offset in the uncompressed tar stream reached so far.
        offset: u64,
        /// The decoder's error.
        #[source]
        source: io::Error,
    },
    /// An engine error (it carries its own path, operation and OS error).
    #[error(transparent)]
    Engine(#[from] cacheless::Error),
    /// A request that cannot be honoured (forced mode unsupported, bad option).
    #[error("{0}")]
    Unsupported(String),
}

impl Error {
    /// Builds an [`Error::Io`].
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: impl Into<io::Error>) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source: source.into(),
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
