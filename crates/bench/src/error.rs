//! The bench crate's error type: every error names the path and the operation.

use std::io;
use std::path::PathBuf;

/// A benchmark error: what was being done, on which path, and the cause.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O error on a file of the benchmark, /proc, or the cgroup file system.
    // The OS error is part of the message and not also the `source()`: a front end that prints
    // the chain of causes would say it twice.
    #[error("{op} {}: {error}", path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The operation that failed (`read`, `create cgroup`, ...).
        op: &'static str,
        /// The operating-system error.
        error: io::Error,
    },
    /// An error from the cacheless engine.
    #[error(transparent)]
    Engine(#[from] cacheless::Error),
    /// A /proc or cgroup file did not have the expected format.
    #[error("cannot parse {}: {what}", path.display())]
    Parse {
        /// The file that was parsed.
        path: PathBuf,
        /// What was wrong with it.
        what: String,
    },
    /// The low-memory scenario needs something this system does not offer.
    #[error("low-memory scenario: {0}")]
    Cgroup(String),
    /// The pressure or neighbour scenario cannot run as asked (too little memory to hold, a helper process
    /// that failed or went away).
    #[error("{0}")]
    Scenario(String),
    /// The run was interrupted (Ctrl-C, SIGTERM): the trial in progress stopped, its helpers were ended and
    /// its written files removed.
    #[error("interrupted")]
    Interrupted,
    /// A bad option value or combination.
    #[error("invalid benchmark option: {0}")]
    Usage(String),
    /// fio failed or printed something we could not read.
    #[error("fio: {0}")]
    Fio(String),
    /// A thread of the benchmark panicked (a bug); the run stops with this error instead of the panic.
    #[error("{what} panicked: {message}")]
    Panic {
        /// What the thread was doing (`read of /data/f0`, `the workload`).
        what: String,
        /// The panic message.
        message: String,
    },
    /// Drawing the plot failed.
    #[error("plot {}: {what}", path.display())]
    Plot {
        /// The image being written.
        path: PathBuf,
        /// What went wrong.
        what: String,
    },
}

impl Error {
    /// An I/O error on `path` during `op`.
    pub fn io(path: impl Into<PathBuf>, op: &'static str, error: io::Error) -> Self {
        Error::Io { path: path.into(), op, error }
    }
}

impl Error {
    /// The error for a thread that panicked while doing `what`, with the panic's message.
    pub(crate) fn panicked(what: impl Into<String>, payload: &(dyn std::any::Any + Send)) -> Self {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".into());
        Error::Panic { what: what.into(), message }
    }
}

/// Result with the bench [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Reads a whole small text file (/proc, /sys), naming the path on error.
pub(crate) fn read_text(path: impl AsRef<std::path::Path>) -> Result<String> {
    let path = path.as_ref();
    std::fs::read_to_string(path).map_err(|e| Error::io(path, "read", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_says_the_os_error_once_and_source_does_not_repeat_it() {
        let e = Error::io("/proc/vmstat", "read", io::Error::from_raw_os_error(cacheless::sys::consts::EACCES));
        assert_eq!(e.to_string(), "read /proc/vmstat: Permission denied (os error 13)");
        assert!(std::error::Error::source(&e).is_none());
    }
}
