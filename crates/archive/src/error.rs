//! Errors of the archive reader and the file creator.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong while reading or extracting an archive.
///
/// `Display` says each cause once: the OS error is part of the message, and `source()` does not
/// return it again.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An OS call failed on a path (open, mkdirat, write, ...).
    #[error("{op} {path}: {error}")]
    Io {
        /// The operation that failed, e.g. `openat`.
        op: &'static str,
        /// The path it was applied to (relative to the destination for entries).
        path: PathBuf,
        /// The OS error.
        error: io::Error,
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
    #[error("compressed stream corrupt or truncated near tar offset {offset} (reading entry {entry:?}): {error}; the members whose data it held were removed")]
    Decompress {
        /// The entry being read, as far as known.
        entry: String,
        /// Offset in the uncompressed tar stream reached so far.
        offset: u64,
        /// The decoder's error.
        error: io::Error,
    },
    /// An engine error (it carries its own path, operation, OS error and hint).
    #[error(transparent)]
    Engine(#[from] cacheless::Error),
    /// The extraction was cancelled through its progress's cancel flag.
    #[error("interrupted while extracting {entry:?}: the entry being written was removed")]
    Interrupted {
        /// The entry being written, if any.
        entry: String,
    },
}

impl Error {
    /// Builds an [`Error::Io`].
    pub fn io(op: &'static str, path: impl Into<PathBuf>, error: impl Into<io::Error>) -> Self {
        Error::Io { op, path: path.into(), error: error.into() }
    }

    /// The OS error number behind it, where there is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Io { error, .. } => error.raw_os_error(),
            Error::Engine(e) => e.errno(),
            _ => None,
        }
    }

    /// What the caller can do instead, when the engine knows.
    pub fn hint(&self) -> Option<&cacheless::Hint> {
        match self {
            Error::Engine(e) => e.hint(),
            _ => None,
        }
    }

    /// True when a mode, backend or feature the caller forced is unavailable here.
    pub fn is_unsupported(&self) -> bool {
        matches!(self, Error::Engine(e) if e.kind() == cacheless::ErrorKind::Unsupported)
    }

    /// The engine error an `io::Error` carries (as errors of the archive's reader thread do),
    /// or the `io::Error` itself.
    pub(crate) fn from_engine_io(e: io::Error) -> std::result::Result<Error, io::Error> {
        if e.get_ref().is_some_and(|i| i.is::<cacheless::Error>()) {
            if let Some(Ok(ce)) = e.into_inner().map(|i| i.downcast::<cacheless::Error>()) {
                return Ok(Error::Engine(*ce));
            }
            return Err(io::Error::other("engine error lost"));
        }
        Err(e)
    }
}

/// The message a panic carried (a worker's or a decoder's, caught and turned into an error).
pub(crate) use cacheless::pool::panic_message;

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_says_the_os_error_once_and_source_does_not_repeat_it() {
        let e = Error::io("openat", "a/b", io::Error::from_raw_os_error(cacheless::sys::consts::EACCES));
        assert_eq!(e.to_string().matches("os error 13").count(), 1, "{e}");
        assert!(std::error::Error::source(&e).is_none());
        let e = Error::Engine(cacheless::Error::io("read", "x.tar", io::Error::from_raw_os_error(cacheless::sys::consts::EIO)));
        assert_eq!(e.to_string(), "read 'x.tar': Input/output error (os error 5)");
        assert!(std::error::Error::source(&e).is_none());
    }
}
