//! The one error type of the engine: what failed, on which path, doing what, and what to do about it.

use std::borrow::Cow;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// What kind of failure an [`Error`] is, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The path does not exist.
    NotFound,
    /// The OS refused access (EACCES, EPERM, EROFS).
    PermissionDenied,
    /// The destination exists and the operation does not replace it.
    AlreadyExists,
    /// A mode, backend or feature the user forced is not available for this file or kernel.
    Unsupported,
    /// The caller passed something unusable (a bad size, a directory where a file is needed).
    InvalidInput,
    /// Source and destination are the same file.
    SameFile,
    /// The operation was cancelled.
    Interrupted,
    /// Any other OS error.
    Io,
}

/// An engine error: the kind, the path, the operation and the OS error, plus a hint for the user.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    path: PathBuf,
    op: &'static str,
    source: io::Error,
    hint: Option<Cow<'static, str>>,
}

/// Result with the engine's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error from an OS call `op` on `path`; the kind follows the errno.
    pub fn io(op: &'static str, path: impl AsRef<Path>, source: io::Error) -> Error {
        let kind = match source.kind() {
            io::ErrorKind::NotFound => ErrorKind::NotFound,
            io::ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
            io::ErrorKind::AlreadyExists => ErrorKind::AlreadyExists,
            io::ErrorKind::Interrupted => ErrorKind::Interrupted,
            io::ErrorKind::InvalidInput => ErrorKind::InvalidInput,
            io::ErrorKind::Unsupported => ErrorKind::Unsupported,
            _ => match source.raw_os_error() {
                Some(libc::EROFS) => ErrorKind::PermissionDenied,
                Some(libc::EOPNOTSUPP) => ErrorKind::Unsupported,
                _ => ErrorKind::Io,
            },
        };
        Error { kind, path: path.as_ref().to_path_buf(), op, source, hint: None }
    }

    /// An error of an explicit kind with a message instead of an OS error.
    pub fn new(kind: ErrorKind, op: &'static str, path: impl AsRef<Path>, msg: impl Into<String>) -> Error {
        let io_kind = match kind {
            ErrorKind::NotFound => io::ErrorKind::NotFound,
            ErrorKind::PermissionDenied => io::ErrorKind::PermissionDenied,
            ErrorKind::AlreadyExists => io::ErrorKind::AlreadyExists,
            ErrorKind::Unsupported => io::ErrorKind::Unsupported,
            ErrorKind::InvalidInput | ErrorKind::SameFile => io::ErrorKind::InvalidInput,
            ErrorKind::Interrupted => io::ErrorKind::Interrupted,
            ErrorKind::Io => io::ErrorKind::Other,
        };
        Error { kind, path: path.as_ref().to_path_buf(), op, source: io::Error::new(io_kind, msg.into()), hint: None }
    }

    /// Adds advice for the user ("use --mode auto").
    pub fn with_hint(mut self, hint: impl Into<Cow<'static, str>>) -> Error {
        self.hint = Some(hint.into());
        self
    }

    /// Overrides the kind.
    pub fn with_kind(mut self, kind: ErrorKind) -> Error {
        self.kind = kind;
        self
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
    /// The file the failure concerns.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The operation that failed ("open", "read", "rename" ...).
    pub fn op(&self) -> &'static str {
        self.op
    }
    /// The OS error number, when the failure came from the OS.
    pub fn errno(&self) -> Option<i32> {
        self.source.raw_os_error()
    }
    /// The advice attached, if any.
    pub fn hint(&self) -> Option<&str> {
        self.hint.as_deref()
    }
    /// The underlying I/O error.
    pub fn io_error(&self) -> &io::Error {
        &self.source
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} '{}': {}", self.op, self.path.display(), self.source)?;
        if let Some(h) = &self.hint {
            write!(f, " ({h})")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        let msg = e.to_string();
        match e.source.raw_os_error() {
            // Keep the errno so callers (and Python's OSError) can branch on it.
            Some(code) => io::Error::new(io::Error::from_raw_os_error(code).kind(), msg),
            None => io::Error::new(e.source.kind(), msg),
        }
    }
}
