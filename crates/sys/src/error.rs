//! The one error type of the engine: what failed, on which path, doing what, and what to try.

use std::borrow::Cow;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::mode::{BackendKind, Mode};

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
    /// A mode, backend or feature the caller forced is not available for this file or kernel.
    Unsupported,
    /// The caller passed something unusable (a bad size, a directory where a file is needed).
    InvalidInput,
    /// Source and destination are the same file.
    SameFile,
    /// The operation was cancelled.
    Interrupted,
    /// A file read changed (its size or modification time) while it was read.
    Changed,
    /// Any other OS error.
    Io,
}

/// What the caller can do instead, for errors and refusals that have a way out. Structured, so
/// that each front end words it its own way (the command line names the flags to pass).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Hint {
    /// Ask for one of these modes instead, best first.
    Modes(Vec<Mode>),
    /// Use one of these backends instead, best first.
    Backends(Vec<BackendKind>),
}

impl Hint {
    /// The setting the hint is about, as front ends name their option: `mode` or `backend`.
    pub fn setting(&self) -> &'static str {
        match self {
            Hint::Modes(_) => "mode",
            Hint::Backends(_) => "backend",
        }
    }

    /// The values to try, by name, best first.
    pub fn values(&self) -> Vec<&'static str> {
        match self {
            Hint::Modes(m) => m.iter().map(|m| m.name()).collect(),
            Hint::Backends(b) => b.iter().map(|b| b.name()).collect(),
        }
    }

    /// The hint as a sentence, `use A`, `use A or B`, `use A, B or C`, each choice worded by
    /// `word(setting, value, place)` (place 0 first): a front end may name its option once,
    /// before the first value, or with each value (`use mode="auto" or mode="dontcache"`).
    pub fn sentence(&self, word: impl Fn(&str, &str, usize) -> String) -> String {
        let words: Vec<String> = self.values().into_iter().enumerate().map(|(i, v)| word(self.setting(), v, i)).collect();
        match words.as_slice() {
            [] => String::new(),
            [one] => format!("use {one}"),
            [rest @ .., last] => format!("use {} or {last}", rest.join(", ")),
        }
    }
}

/// An engine error: the kind, the path, the operation and the OS error, plus what to try.
///
/// `Display` prints the operation, the path and the OS error (with a note where the engine
/// knows the cause); `source()` does not repeat the OS error, so printing the chain says each
/// cause once. The [`Hint`] is not part of `Display`: front ends word it.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    path: PathBuf,
    op: Cow<'static, str>,
    source: io::Error,
    note: Option<Cow<'static, str>>,
    hint: Option<Hint>,
}

/// Result with the engine's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error from an OS call `op` on `path`; the kind follows the errno.
    pub fn io(op: impl Into<Cow<'static, str>>, path: impl AsRef<Path>, source: io::Error) -> Error {
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
        Error { kind, path: path.as_ref().to_path_buf(), op: op.into(), source, note: None, hint: None }
    }

    /// An error of an explicit kind with a message instead of an OS error.
    pub fn new(kind: ErrorKind, op: impl Into<Cow<'static, str>>, path: impl AsRef<Path>, msg: impl Into<String>) -> Error {
        let io_kind = match kind {
            ErrorKind::NotFound => io::ErrorKind::NotFound,
            ErrorKind::PermissionDenied => io::ErrorKind::PermissionDenied,
            ErrorKind::AlreadyExists => io::ErrorKind::AlreadyExists,
            ErrorKind::Unsupported => io::ErrorKind::Unsupported,
            ErrorKind::InvalidInput | ErrorKind::SameFile => io::ErrorKind::InvalidInput,
            ErrorKind::Interrupted => io::ErrorKind::Interrupted,
            ErrorKind::Changed | ErrorKind::Io => io::ErrorKind::Other,
        };
        Error { kind, path: path.as_ref().to_path_buf(), op: op.into(), source: io::Error::new(io_kind, msg.into()), note: None, hint: None }
    }

    /// Adds what the caller can do instead.
    pub fn with_hint(mut self, hint: Hint) -> Error {
        self.hint = Some(hint);
        self
    }

    /// Adds a note on the cause, shown after the OS error ("O_DIRECT refused a request").
    pub fn with_note(mut self, note: impl Into<Cow<'static, str>>) -> Error {
        self.note = Some(note.into());
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
    /// The operation that failed ("open", "read", "rename" ...), or GNU's words for it with
    /// `{}` where the path goes ("cannot stat {}"); empty for an error told by its message.
    pub fn op(&self) -> &str {
        &self.op
    }
    /// The OS error number, when the failure came from the OS.
    pub fn errno(&self) -> Option<i32> {
        self.source.raw_os_error()
    }
    /// What to try instead, if anything.
    pub fn hint(&self) -> Option<&Hint> {
        self.hint.as_ref()
    }
    /// The note on the cause, if any.
    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }
    /// The underlying I/O error.
    pub fn io_error(&self) -> &io::Error {
        &self.source
    }
}

impl Error {
    /// What failed and where, without the OS error: the operation and the quoted path
    /// ([`crate::quote::quote`]), or the message alone for an error told by its message (see
    /// [`Error::message`]). An operation with `{}` in it has the path there ("cannot open {}
    /// for reading"); any other is followed by the path ("stat 'x'").
    pub fn what(&self) -> String {
        let q = crate::quote::quote(&self.path);
        match self.op.split_once("{}") {
            _ if self.op.is_empty() => self.source.to_string(),
            Some((a, b)) => format!("{a}{q}{b}"),
            None => format!("{} {q}", self.op),
        }
    }

    /// An error told by its message alone, as GNU tools word a refusal that names its files
    /// itself ("'a' and 'b' are the same file"): no operation, no OS error.
    pub fn message(kind: ErrorKind, path: impl AsRef<Path>, text: impl Into<String>) -> Error {
        Error::new(kind, "", path, text)
    }

    /// Whether this error is told by its message alone (see [`Error::message`]).
    pub fn is_message(&self) -> bool {
        self.op.is_empty()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.op.is_empty() {
            write!(f, "{}", self.source)?;
        } else {
            write!(f, "{}: {}", self.what(), self.source)?;
        }
        if let Some(n) = &self.note {
            write!(f, " ({n})")?;
        }
        Ok(())
    }
}

/// The text of the OS error `errno`, as strerror(3) words it (no "(os error N)").
pub fn strerror(errno: i32) -> String {
    let t = io::Error::from_raw_os_error(errno).to_string();
    match t.rfind(" (os error ") {
        Some(i) => t[..i].to_string(),
        None => t,
    }
}

impl std::error::Error for Error {
    /// What lies beneath the OS error, if anything: `Display` already prints the OS error itself
    /// (as `io::Error` does with the error it wraps).
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.source)
    }
}

impl From<Error> for io::Error {
    /// An `io::Error` of the same kind wrapping the engine error (`get_ref` and `downcast`
    /// give it back, with its path, operation, errno and hint).
    fn from(e: Error) -> io::Error {
        io::Error::new(e.source.kind(), e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_says_the_os_error_once_and_the_chain_does_not_repeat_it() {
        let e = Error::io("read", "/x", io::Error::from_raw_os_error(libc::EIO)).with_hint(Hint::Modes(vec![Mode::Auto]));
        let text = e.to_string();
        assert!(text.starts_with("read '/x': "), "{text}");
        assert_eq!(text.matches("os error 5").count(), 1, "{text}");
        assert!(std::error::Error::source(&e).is_none());
        assert_eq!(e.hint(), Some(&Hint::Modes(vec![Mode::Auto])));
        let flag = |s: &str, v: &str, i: usize| if i == 0 { format!("--{s} {v}") } else { v.to_string() };
        assert_eq!(Hint::Modes(vec![Mode::Auto]).sentence(flag), "use --mode auto");
        let h = Hint::Backends(vec![BackendKind::Auto, BackendKind::Threads, BackendKind::Uring]);
        assert_eq!(h.sentence(|s, v, _| format!("{s}={v}")), "use backend=auto, backend=threads or backend=uring");
        // An io::Error wrapping another error: Display prints it, source() goes below it.
        let inner = io::Error::other(Error::io("open", "/y", io::Error::from_raw_os_error(libc::ENOENT)));
        let e = Error::io("copy", "/z", inner);
        assert_eq!(e.to_string().matches("os error 2").count(), 1);
        let mut chain = String::new();
        let mut cur: Option<&dyn std::error::Error> = std::error::Error::source(&e);
        while let Some(c) = cur {
            chain += &c.to_string();
            cur = c.source();
        }
        assert!(!chain.contains("os error 2"), "the chain repeats the OS error: {chain}");
    }
}
