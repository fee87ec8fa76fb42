//! The keyword arguments the calls share, converted where they cross into Rust: each call's
//! pyo3 signature names its keywords with their defaults (so Python rejects any other, in its
//! own words), and each value is converted by its type here, once, with the error the command
//! line gives for the same flag (`cacheless::limits`).
//!
//! - sizes (`memory=`, `block_size=`, `frame_size=`): [`Size`], an int or a string such as "512M";
//! - counts (`queue_depth=`, `threads=`, `decompress_threads=`, `read_threads=`): [`Count`];
//! - `bwlimit=`: [`Rate`]; `progress=`: [`Callback`];
//! - words (`mode=`, `backend=`, `reflink=`, ...): a `&str` with its default in the signature,
//!   parsed into the engine's enum by [`word`] before anything runs.

use std::marker::PhantomData;
use std::str::FromStr;

use cacheless::{limits, Budget, Durability, IoOptions, Mode, ReadOptions, WriteOptions};
use cacheless_safetensors::ArenaOptions;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

/// A count or size keyword held to the bounds the command line holds its flag to (see
/// `cacheless::limits`): an int (a size may also be a string such as "512M"), else a
/// `TypeError`; out of bounds, a `ValueError`.
pub fn bounded(name: &str, v: &Bound<'_, PyAny>, size: bool, check: fn(&str, u64) -> Result<usize, String>) -> PyResult<usize> {
    let n: u64 = match v.extract::<u64>() {
        Ok(n) => n,
        Err(_) if size => {
            let s: String = v.extract().map_err(|_| PyTypeError::new_err(format!("{name}= must be a number of bytes or a size such as '512M'")))?;
            cacheless::parse_size(&s).map_err(|e| PyValueError::new_err(format!("{name}=: {e}")))?
        }
        // A negative int is out of range; anything else is not a count.
        Err(_) if v.extract::<i64>().is_ok() => return Err(PyValueError::new_err(format!("{name}= must not be negative"))),
        Err(_) => return Err(PyTypeError::new_err(format!("{name}= must be an int"))),
    };
    check(&format!("{name}="), n).map_err(PyValueError::new_err)
}

/// A keyword whose value is a bounded number: its name and the bounds of its flag.
pub trait Key {
    /// The keyword, as errors name it (`threads=`).
    const NAME: &'static str;
    /// The bounds (`cacheless::limits`).
    fn check(flag: &str, n: u64) -> Result<usize, String>;
}

macro_rules! keys {
    ($($(#[$doc:meta])* $t:ident = $name:literal, $check:path;)*) => {$(
        $(#[$doc])*
        pub enum $t {}
        impl Key for $t {
            const NAME: &'static str = $name;
            fn check(flag: &str, n: u64) -> Result<usize, String> {
                $check(flag, n)
            }
        }
    )*};
}

keys! {
    /// `memory=`: the budget of I/O buffers.
    Memory = "memory", limits::memory;
    /// `block_size=`: bytes per request.
    BlockSize = "block_size", limits::block_size;
    /// `queue_depth=`: requests in flight per file.
    QueueDepth = "queue_depth", limits::queue_depth;
    /// `threads=`: workers.
    Threads = "threads", limits::threads;
    /// `decompress_threads=`: threads decoding a multi-frame zstd archive.
    DecompressThreads = "decompress_threads", limits::threads;
    /// `read_threads=`: threads reading a pack's files.
    ReadThreads = "read_threads", limits::threads;
    /// `frame_size=`: bytes of tar per compressed frame.
    FrameSize = "frame_size", limits::frame_size;
    /// `part_size=`: bytes per ranged GET and per uploaded part.
    PartSize = "part_size", cacheless_remote::limits::part_size;
    /// `concurrency=`: requests in flight per transfer, and objects at a time.
    Concurrency = "concurrency", cacheless_remote::limits::concurrency;
    /// `retries=`: retries of a request that failed in a way that may pass.
    Retries = "retries", cacheless_remote::limits::retries;
}

/// A size keyword: bytes as an int, or a size such as "512M".
pub struct Size<K>(pub usize, PhantomData<K>);

/// A count keyword: an int.
pub struct Count<K>(pub usize, PhantomData<K>);

impl<K: Key> FromPyObject<'_, '_> for Size<K> {
    type Error = PyErr;
    fn extract(obj: Borrowed<'_, '_, PyAny>) -> PyResult<Self> {
        bounded(K::NAME, &obj, true, K::check).map(|n| Size(n, PhantomData))
    }
}

impl<K: Key> FromPyObject<'_, '_> for Count<K> {
    type Error = PyErr;
    fn extract(obj: Borrowed<'_, '_, PyAny>) -> PyResult<Self> {
        bounded(K::NAME, &obj, false, K::check).map(|n| Count(n, PhantomData))
    }
}

/// A count keyword's value, where it was given.
pub fn count<K>(c: Option<Count<K>>) -> Option<usize> {
    c.map(|c| c.0)
}

/// `bwlimit=`: bytes per second as an int or float, or a size such as "200M"; 0 is no limit, as
/// on the command line.
pub struct Rate(pub Option<u64>);

impl FromPyObject<'_, '_> for Rate {
    type Error = PyErr;
    fn extract(v: Borrowed<'_, '_, PyAny>) -> PyResult<Self> {
        let flag = "bwlimit=";
        if let Ok(s) = v.extract::<String>() {
            return limits::parse_rate(flag, &s).map(Rate).map_err(PyValueError::new_err);
        }
        let f: f64 = v.extract().map_err(|_| PyTypeError::new_err("bwlimit= must be bytes per second or a size such as '200M'"))?;
        limits::rate(flag, f).map(Rate).map_err(PyValueError::new_err)
    }
}

/// `progress=`: a callable, called as `progress(done_bytes, total_bytes)` from the calling
/// thread.
pub struct Callback<'py>(pub Bound<'py, PyAny>);

impl<'py> FromPyObject<'_, 'py> for Callback<'py> {
    type Error = PyErr;
    fn extract(v: Borrowed<'_, 'py, PyAny>) -> PyResult<Self> {
        if !v.is_callable() {
            return Err(PyTypeError::new_err("progress= must be a callable taking (done_bytes, total_bytes)"));
        }
        Ok(Callback(v.to_owned()))
    }
}

/// The callback, where one was given.
pub fn callback<'a, 'py>(c: &'a Option<Callback<'py>>) -> Option<&'a Bound<'py, PyAny>> {
    c.as_ref().map(|c| &c.0)
}

/// A word keyword (`reflink="auto"`) parsed into the engine's value; a `ValueError` naming the
/// keyword and what it accepts otherwise.
pub fn word<T: FromStr<Err = String>>(key: &str, s: &str) -> PyResult<T> {
    s.parse().map_err(|e: String| PyValueError::new_err(format!("{key}=: {e}")))
}

/// `mode=`: the engine's mode; the access of `open()` given here instead is pointed out.
pub fn mode(s: &str) -> PyResult<Mode> {
    s.parse().map_err(|e: String| {
        let extra = if matches!(s, "rb" | "wb" | "r" | "w" | "br" | "bw") { " (the access, \"rb\" or \"wb\", is open()'s second argument)" } else { "" };
        PyValueError::new_err(format!("mode=: {e}{extra}"))
    })
}

/// The I/O keywords every call that reads or writes shares: `mode=`, `backend=`, `memory=`,
/// `block_size=` and `queue_depth=` (`None`: the engine's default).
pub fn io(
    mode: &str,
    backend: &str,
    memory: Option<Size<Memory>>,
    block_size: Option<Size<BlockSize>>,
    queue_depth: Option<Count<QueueDepth>>,
) -> PyResult<IoOptions> {
    let mut io = IoOptions { mode: self::mode(mode)?, backend: word("backend", backend)?, ..IoOptions::default() };
    if let Some(m) = memory {
        io.budget = Budget::new(m.0);
    }
    if let Some(b) = block_size {
        io.block_size = b.0;
    }
    if let Some(q) = queue_depth {
        io.queue_depth = q.0;
    }
    #[cfg(feature = "fault-injection")]
    crate::fault::track(&io.budget);
    Ok(io)
}

/// Engine write options: `io` with `sync=` and `size_hint=`.
pub fn write(io: IoOptions, sync: bool, size_hint: Option<u64>) -> WriteOptions {
    let mut o = WriteOptions::from(io);
    o.durability = Durability::synced(sync);
    o.size_hint = size_hint;
    o
}

/// Options for reading files into arenas: `io` with `threads=`.
pub fn arena(io: IoOptions, threads: Option<Count<Threads>>) -> ArenaOptions {
    let mut o = ArenaOptions::new(io.budget.clone());
    o.read = ReadOptions::from(io);
    o.threads = count(threads).unwrap_or(o.threads);
    o
}

/// A serde value (a report) as Python objects: dicts (in the fields' order), lists, strings,
/// numbers, booleans and None, as `json.loads` would give them from the command line's
/// `--json`, built directly.
pub fn to_py<'py>(py: Python<'py>, v: &impl serde::Serialize) -> PyResult<Bound<'py, PyAny>> {
    pythonize::pythonize(py, v).map_err(|e| PyValueError::new_err(format!("internal error: report does not convert: {e}")))
}

/// The transfers' keywords (the command line's flags, by the same names): each over the
/// environment's value (`CACHELESS_PART_SIZE`, ..., and the AWS variables, read where a client
/// is made), else the default.
#[allow(clippy::too_many_arguments)] // One per keyword.
pub fn remote(
    endpoint_url: Option<String>,
    region: Option<String>,
    no_sign_request: bool,
    concurrency: Option<Count<Concurrency>>,
    part_size: Option<Size<PartSize>>,
    ca_bundle: Option<std::path::PathBuf>,
    retries: Option<Count<Retries>>,
    read_timeout: Option<f64>,
) -> PyResult<cacheless_remote::RemoteOptions> {
    let mut o = cacheless_remote::RemoteOptions::from_env().map_err(|e| crate::errors::engine(&e))?;
    if endpoint_url.is_some() {
        o.endpoint = endpoint_url;
    }
    if region.is_some() {
        o.region = region;
    }
    o.no_sign_request |= no_sign_request;
    if let Some(c) = concurrency {
        o.concurrency = c.0;
    }
    if let Some(p) = part_size {
        o.part_size = p.0;
    }
    if ca_bundle.is_some() {
        o.ca_bundle = ca_bundle;
    }
    if let Some(r) = retries {
        o.retries = r.0;
    }
    if let Some(t) = read_timeout {
        o.stall = cacheless_remote::limits::read_timeout("read_timeout=", t).map_err(PyValueError::new_err)?;
    }
    Ok(o)
}

/// `interactive=`: a callable asked before an existing destination is replaced, as `cp -i`
/// asks: called with the destination (a `str`), replaced only where it returns true. It runs
/// on the copy's thread, holding the GIL while it runs; one that raises is a "no".
pub fn ask(f: Bound<'_, PyAny>) -> PyResult<cacheless_cp::Ask> {
    if !f.is_callable() {
        return Err(PyTypeError::new_err("interactive= must be a callable taking the destination and returning whether to replace it"));
    }
    let f: Py<PyAny> = f.unbind();
    Ok(std::sync::Arc::new(move |q: &cacheless_cp::Question<'_>| {
        let dst = q.dst.to_string_lossy().into_owned();
        Python::attach(|py| f.call1(py, (dst,)).and_then(|r| r.is_truthy(py)).unwrap_or(false))
    }))
}
