//! The one place where engine, archive and safetensors errors become Python exceptions.
//!
//! OS errors become `OSError` with `errno`, `strerror` and `filename` (Python picks the
//! subclass from the errno: `FileNotFoundError`, `PermissionError`, ...); a mode the caller
//! forced that the filesystem cannot honour is `cacheless.UnsupportedError` (an `OSError`);
//! malformed input is `ValueError` naming the file and what is wrong.

use std::path::Path;

use cacheless::ErrorKind;
use pyo3::create_exception;
use pyo3::exceptions::{PyKeyError, PyKeyboardInterrupt, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

create_exception!(
    cacheless,
    UnsupportedError,
    PyOSError,
    "A mode the caller forced (mode=\"direct\", backend=\"uring\", ...) that this file's filesystem or kernel cannot honour."
);

/// The engine's advice, in the words of the Python API (its keyword arguments, not CLI flags).
fn python_hint(hint: &str) -> String {
    hint.replace("--mode ", "mode=").replace("--backend ", "backend=")
}

/// The OS error's text without Rust's " (os error N)" suffix.
fn reason(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.rfind(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

fn os_error(errno: Option<i32>, text: String, path: &Path) -> PyErr {
    let filename = path.to_string_lossy().into_owned();
    match errno {
        Some(n) => PyOSError::new_err((n, text, filename)),
        None => PyOSError::new_err((Option::<i32>::None, text, filename)),
    }
}

/// An engine error as the Python exception a caller expects.
pub fn engine(e: &cacheless::Error) -> PyErr {
    let mut text = format!("{}: {}", e.op(), reason(e.io_error()));
    if let Some(h) = e.hint() {
        text += &format!(" ({})", python_hint(h));
    }
    let path = e.path();
    match e.kind() {
        ErrorKind::Unsupported => {
            let filename = path.to_string_lossy().into_owned();
            UnsupportedError::new_err((e.errno().unwrap_or(libc::EOPNOTSUPP), text, filename))
        }
        ErrorKind::Interrupted => PyKeyboardInterrupt::new_err(text),
        ErrorKind::SameFile => Python::attach(|py| {
            let msg = format!("{}: {text}", path.display());
            match py.import("shutil").and_then(|m| m.getattr("SameFileError")).and_then(|t| t.call1((msg,))) {
                Ok(v) => PyErr::from_value(v),
                Err(err) => err,
            }
        }),
        ErrorKind::InvalidInput if e.errno().is_none() && path.is_dir() => os_error(Some(libc::EISDIR), text, path),
        ErrorKind::InvalidInput if e.errno().is_none() => PyValueError::new_err(format!("{}: {text}", path.display())),
        ErrorKind::NotFound if e.errno().is_none() => os_error(Some(libc::ENOENT), text, path),
        ErrorKind::PermissionDenied if e.errno().is_none() => os_error(Some(libc::EACCES), text, path),
        ErrorKind::AlreadyExists if e.errno().is_none() => os_error(Some(libc::EEXIST), text, path),
        _ => os_error(e.errno(), text, path),
    }
}

/// A safetensors error: malformed files and inconsistent tensors are `ValueError`, a missing
/// tensor `KeyError`, the rest as [`engine`].
pub fn safetensors(e: cacheless_safetensors::Error) -> PyErr {
    match e {
        cacheless_safetensors::Error::Engine(e) => engine(&e),
        cacheless_safetensors::Error::NoTensor { .. } => PyKeyError::new_err(e.to_string()),
        other => PyValueError::new_err(other.to_string()),
    }
}

/// An archive error: a corrupt or truncated archive is `ValueError` naming it.
pub fn archive(e: cacheless_archive::Error, archive: &Path) -> PyErr {
    use cacheless_archive::Error as A;
    match e {
        A::Engine(e) => engine(&e),
        A::Io { op, path, source } => os_error(source.raw_os_error(), format!("{op}: {}", reason(&source)), &path),
        A::Unsupported(msg) => UnsupportedError::new_err((libc::EOPNOTSUPP, python_hint(&msg), archive.to_string_lossy().into_owned())),
        other => PyValueError::new_err(format!("{}: {other}", archive.display())),
    }
}

/// A worker thread panicked: a bug, reported as such.
pub fn panicked(what: &str) -> PyErr {
    PyRuntimeError::new_err(format!("internal error: {what} panicked (please report it)"))
}
