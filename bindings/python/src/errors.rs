//! The one place where engine, archive and safetensors errors become Python exceptions.
//!
//! OS errors become `OSError` with `errno`, `strerror` and `filename` (Python picks the
//! subclass from the errno: `FileNotFoundError`, `PermissionError`, ...); a mode the caller
//! forced that the filesystem cannot honour is `cacheless.UnsupportedError` (an `OSError`);
//! malformed input is `ValueError` naming the file and what is wrong. The engine's structured
//! hint (the modes or backends to try instead) is worded here in the Python API's own terms,
//! its keyword arguments (`use mode="auto" or mode="dontcache"`).

use std::path::Path;

use cacheless::{ErrorKind, Hint};
use pyo3::create_exception;
use pyo3::exceptions::{PyKeyboardInterrupt, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyType;

create_exception!(
    cacheless,
    UnsupportedError,
    PyOSError,
    "A mode the caller forced (mode=\"direct\", backend=\"uring\", ...) that this file's filesystem or kernel cannot honour."
);

/// A hint in the words of the Python API: the keyword arguments to pass instead
/// (`use mode="auto" or mode="dontcache"`), never command-line flags.
pub fn hint_text(h: &Hint) -> String {
    h.sentence(|setting, value, _| format!("{setting}=\"{value}\""))
}

/// A refusal of the shared core, which names the options as the command line spells them
/// (`--reflink=always`, `--link (-l)`, `--preserve=mode (or -p, -a)`), in the Python API's
/// own keyword arguments (`reflink="always"`, `link=True`, `preserve="mode" (or archive=True)`).
fn python_spelling(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let word = |from: usize, ok: fn(u8) -> bool| (from..b.len()).find(|&j| !ok(b[j])).unwrap_or(b.len());
    while i < b.len() {
        let at_word_start = i == 0 || b[i - 1] == b' ' || b[i - 1] == b'(';
        if at_word_start && b[i..].starts_with(b"--") && b.get(i + 2).is_some_and(u8::is_ascii_lowercase) {
            let end = word(i + 2, |c| c.is_ascii_lowercase() || c == b'-');
            let name = text[i + 2..end].replace('-', "_");
            if b.get(end) == Some(&b'=') {
                let v_end = word(end + 1, |c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-');
                out += &format!("{name}=\"{}\"", &text[end + 1..v_end]);
                i = v_end;
            } else {
                // The keyword arguments that take a value name it with nothing after the sign.
                out += &if name == "backup" { format!("{name}=") } else { format!("{name}=True") };
                i = end;
            }
            // The short options after it: Python has none (`-a` is `archive=True`).
            for (short, python) in [(" (-l)", ""), (" (-s)", ""), (" (or -p, -a)", " (or archive=True)")] {
                if text[i..].starts_with(short) {
                    out += python;
                    i += short.len();
                }
            }
            continue;
        }
        let next = text[i..].chars().next().map_or(1, char::len_utf8);
        out += &text[i..i + next];
        i += next;
    }
    out
}

/// Whether `text` names `path` itself: at its start, or as a word before a colon.
fn names_path(text: &str, path: &Path) -> bool {
    let p = path.to_string_lossy();
    !p.is_empty() && (text.starts_with(&*p) || text.contains(&format!(" {p}: ")))
}

/// The OS error's text without Rust's " (os error N)" suffix (Python shows the errno itself).
fn reason(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.rfind(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

fn os_error(errno: Option<i32>, text: String, path: &Path) -> PyErr {
    PyOSError::new_err((errno, text, path.to_string_lossy().into_owned()))
}

/// An engine error as the Python exception a caller expects: `strerror` is the operation, the
/// OS error (or the engine's message), the engine's note on the cause and the hint.
pub fn engine(e: &cacheless::Error) -> PyErr {
    // An error told by its message (GNU cp's refusals) is that message; one worded as GNU
    // words an operation names its path there ("cannot stat 'x'"); any other is the
    // operation and the OS error.
    let mut text = if e.is_message() {
        e.what()
    } else if e.op().contains("{}") {
        format!("{}: {}", e.what(), reason(e.io_error()))
    } else {
        format!("{}: {}", e.op(), reason(e.io_error()))
    };
    if let Some(n) = e.note() {
        text += &format!(" ({n})");
    }
    if let Some(h) = e.hint().map(hint_text) {
        text += &format!("; {h}");
    }
    let path = e.path();
    match e.kind() {
        ErrorKind::Unsupported => {
            UnsupportedError::new_err((e.errno().unwrap_or(cacheless::sys::consts::EOPNOTSUPP), text, path.to_string_lossy().into_owned()))
        }
        ErrorKind::Interrupted => PyKeyboardInterrupt::new_err(text),
        ErrorKind::SameFile => Python::attach(|py| {
            let msg = format!("{}: {text}", path.display());
            match py.import("shutil").and_then(|m| m.getattr("SameFileError")).and_then(|t| t.call1((msg,))) {
                Ok(v) => PyErr::from_value(v),
                Err(err) => err,
            }
        }),
        ErrorKind::InvalidInput if e.errno().is_none() && path.is_dir() => os_error(Some(cacheless::sys::consts::EISDIR), text, path),
        // An option refused: the message names it (its "path"), in Python's spelling here.
        ErrorKind::InvalidInput if e.is_message() && path.as_os_str().as_encoded_bytes().starts_with(b"--") => PyValueError::new_err(python_spelling(&text)),
        // A message that names its path already ("extract DEST: durability ...") is not
        // prefixed with it again.
        ErrorKind::InvalidInput if e.errno().is_none() && e.is_message() && names_path(&text, path) => PyValueError::new_err(text),
        ErrorKind::InvalidInput if e.errno().is_none() => PyValueError::new_err(format!("{}: {text}", path.display())),
        ErrorKind::NotFound if e.errno().is_none() => os_error(Some(cacheless::sys::consts::ENOENT), text, path),
        ErrorKind::PermissionDenied if e.errno().is_none() => os_error(Some(cacheless::sys::consts::EACCES), text, path),
        ErrorKind::AlreadyExists if e.errno().is_none() => os_error(Some(cacheless::sys::consts::EEXIST), text, path),
        _ => os_error(e.errno(), text, path),
    }
}

/// `cacheless.safetensors.SafetensorError` (a `ValueError`, and a subclass of the
/// `safetensors` package's `SafetensorError` where that package is installed) with `msg`; a
/// plain `ValueError` should the Python module fail to import.
pub fn safetensor_error(msg: String) -> PyErr {
    Python::attach(|py| {
        let class = py.import("cacheless.safetensors").and_then(|m| m.getattr("SafetensorError")).and_then(|c| Ok(c.cast_into::<PyType>()?));
        match class {
            Ok(c) => PyErr::from_type(c, msg),
            Err(_) => PyValueError::new_err(msg),
        }
    })
}

/// A safetensors error as the `safetensors` package raises it: malformed files, inconsistent
/// tensors and a missing tensor are `SafetensorError` (worded as the package words a missing
/// tensor, with the file named after it); engine errors as [`engine`].
pub fn safetensors(e: cacheless_safetensors::Error) -> PyErr {
    match e {
        cacheless_safetensors::Error::Engine(e) => engine(&e),
        cacheless_safetensors::Error::NoTensor { path, name } => safetensor_error(format!("File does not contain tensor {name} ({})", path.display())),
        other => safetensor_error(other.to_string()),
    }
}

/// An archive error: an OS error is `OSError` naming the path it was applied to, an
/// interruption `KeyboardInterrupt`, a corrupt or truncated archive `ValueError` naming it.
pub fn archive(e: cacheless_archive::Error, archive: &Path) -> PyErr {
    use cacheless_archive::Error as A;
    match e {
        A::Engine(e) => engine(&e),
        A::Io { op, path, error } => os_error(error.raw_os_error(), format!("{op}: {}", reason(&error)), &path),
        A::Interrupted { entry } if entry.is_empty() => PyKeyboardInterrupt::new_err(format!("extract {}: interrupted", archive.display())),
        A::Interrupted { .. } => PyKeyboardInterrupt::new_err(format!("extract {}: {e}", archive.display())),
        other => PyValueError::new_err(format!("{}: {other}", archive.display())),
    }
}

/// Some members of an archive job failed while the rest went on: an `OSError` naming the
/// archive and the first failure, with its errno (`first_errno`, the report's: where that
/// failure was an OS error, ENOSPC when the disk filled), and the job's report in its
/// `report` attribute.
pub fn members_failed(archive: &Path, what: &str, failures: &[String], first_errno: Option<i32>, report: Bound<'_, PyAny>) -> PyErr {
    let first = failures.first().map(String::as_str).unwrap_or("?");
    let err = os_error(first_errno, format!("{what}; first: {first}"), archive);
    if let Err(e) = err.value(report.py()).setattr("report", report) {
        return e;
    }
    err
}

/// A worker thread panicked: a bug, reported as such.
pub fn panicked(what: &str) -> PyErr {
    PyRuntimeError::new_err(format!("internal error: {what} panicked (please report it)"))
}
