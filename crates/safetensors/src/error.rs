//! Errors of the safetensors loader and saver.

use std::path::{Path, PathBuf};

/// What can go wrong loading or saving a safetensors file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An engine error: I/O, an unsupported forced mode, or an interruption (it carries its own
    /// path, operation and OS error).
    #[error(transparent)]
    Engine(#[from] cacheless::Error),
    /// The file is not valid safetensors, or the tensors given to save are inconsistent.
    #[error("{}: {reason}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A tensor asked for by name is not in the file.
    #[error("{}: no tensor named '{name}'", path.display())]
    NoTensor {
        /// The file.
        path: PathBuf,
        /// The name asked for.
        name: String,
    },
}

impl Error {
    /// An [`Error::Invalid`] for `path`.
    pub fn invalid(path: &Path, reason: impl Into<String>) -> Error {
        Error::Invalid { path: path.to_path_buf(), reason: reason.into() }
    }
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
