//! The keyword options the calls share (`mode=`, `backend=`, `memory=`, `block_size=`,
//! `queue_depth=`, `threads=`, `progress=`, `sync=`, `size_hint=`, `parallel=`), parsed in one
//! place into engine options.

use cacheless::{BackendKind, Budget, IoOptions, Mode, ReadOptions, WriteOptions};
use cacheless_safetensors::ArenaOptions;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The default memory budget for I/O buffers in flight, as the CLI's `--memory`.
pub const DEFAULT_MEMORY: usize = 256 << 20;

/// The options of one call.
pub struct Options<'py> {
    pub mode: Mode,
    pub backend: BackendKind,
    pub budget: Budget,
    pub block_size: Option<usize>,
    pub queue_depth: Option<usize>,
    pub threads: Option<usize>,
    /// Threads decoding a multi-frame zstd archive (extract).
    pub decompress_threads: Option<usize>,
    /// `progress(done, total)`, called from the calling thread.
    pub progress: Option<Bound<'py, PyAny>>,
    pub sync: bool,
    pub size_hint: Option<u64>,
    pub parallel: usize,
}

/// A size keyword (`memory=`, `frame_size=`) as bytes: an int, or a size such as "512M" or "1GiB".
pub fn size_bytes(name: &str, m: &Bound<'_, PyAny>) -> PyResult<usize> {
    if let Ok(n) = m.extract::<usize>() {
        return Ok(n);
    }
    let s: String = m.extract().map_err(|_| PyValueError::new_err(format!("{name}= must be a number of bytes or a size such as '512M'")))?;
    let n = cacheless::parse_size(&s).map_err(|e| PyValueError::new_err(format!("{name}=: {e}")))?;
    usize::try_from(n).map_err(|_| PyValueError::new_err(format!("{name}=: {s} is too large")))
}

fn positive(name: &str, v: &Bound<'_, PyAny>) -> PyResult<usize> {
    let n: usize = v.extract().map_err(|_| PyTypeError::new_err(format!("{name}= must be a positive int")))?;
    if n == 0 {
        return Err(PyValueError::new_err(format!("{name}= must be positive")));
    }
    Ok(n)
}

impl<'py> Options<'py> {
    /// Parses the keyword arguments `kw` of `call`, which accepts the keys in `allowed`; any
    /// other key is a `TypeError`, a bad value a `ValueError` that says what is accepted.
    pub fn parse(call: &str, kw: Option<&Bound<'py, PyDict>>, allowed: &[&str]) -> PyResult<Options<'py>> {
        let o = Self::parse_keys(call, kw, allowed)?;
        #[cfg(feature = "fault-injection")]
        crate::fault::track(&o.budget);
        Ok(o)
    }

    fn parse_keys(call: &str, kw: Option<&Bound<'py, PyDict>>, allowed: &[&str]) -> PyResult<Options<'py>> {
        let mut o = Options {
            mode: Mode::Auto,
            backend: BackendKind::Auto,
            budget: Budget::new(DEFAULT_MEMORY),
            block_size: None,
            queue_depth: None,
            threads: None,
            decompress_threads: None,
            progress: None,
            sync: true,
            size_hint: None,
            parallel: 4,
        };
        let Some(kw) = kw else { return Ok(o) };
        for (k, v) in kw.iter() {
            let key: String = k.extract()?;
            if !allowed.contains(&key.as_str()) {
                return Err(PyTypeError::new_err(format!("{call}() got an unexpected keyword argument '{key}'")));
            }
            if v.is_none() {
                continue;
            }
            match key.as_str() {
                "mode" => {
                    let s: String = v.extract()?;
                    o.mode = s.parse().map_err(|e: String| {
                        let extra = if matches!(s.as_str(), "rb" | "wb" | "r" | "w" | "br" | "bw") {
                            " (the access, \"rb\" or \"wb\", is open()'s second argument)"
                        } else {
                            ""
                        };
                        PyValueError::new_err(format!("mode=: {e}{extra}"))
                    })?;
                }
                "backend" => o.backend = v.extract::<String>()?.parse().map_err(|e: String| PyValueError::new_err(format!("backend=: {e}")))?,
                "memory" => o.budget = Budget::new(size_bytes("memory", &v)?),
                "block_size" => o.block_size = Some(positive("block_size", &v)?),
                "queue_depth" => o.queue_depth = Some(positive("queue_depth", &v)?),
                "threads" => o.threads = Some(positive("threads", &v)?),
                "decompress_threads" => o.decompress_threads = Some(positive("decompress_threads", &v)?),
                "parallel" => o.parallel = positive("parallel", &v)?,
                "progress" if v.is_callable() => o.progress = Some(v),
                "progress" => return Err(PyTypeError::new_err("progress= must be a callable taking (done_bytes, total_bytes)")),
                "sync" => o.sync = v.is_truthy()?,
                "size_hint" => o.size_hint = Some(v.extract()?),
                _ => return Err(PyTypeError::new_err(format!("{call}() got an unexpected keyword argument '{key}'"))),
            }
        }
        Ok(o)
    }

    /// The progress callback, if any.
    pub fn callback(&self) -> Option<&Bound<'py, PyAny>> {
        self.progress.as_ref()
    }

    /// The engine's I/O settings: mode, backend, request size and depth, budget.
    pub fn io(&self) -> IoOptions {
        let mut io = IoOptions::new(self.budget.clone());
        io.mode = self.mode;
        io.backend = self.backend;
        io.block_size = self.block_size.unwrap_or(io.block_size);
        io.queue_depth = self.queue_depth.unwrap_or(io.queue_depth);
        io
    }

    /// Engine read options.
    pub fn read(&self) -> ReadOptions {
        ReadOptions::from(self.io())
    }

    /// Engine write options.
    pub fn write(&self) -> WriteOptions {
        let mut o = WriteOptions::from(self.io());
        o.sync = self.sync;
        o.size_hint = self.size_hint;
        o
    }

    /// Options for reading files into arenas.
    pub fn arena(&self) -> ArenaOptions {
        let mut o = ArenaOptions::new(self.budget.clone());
        o.read = self.read();
        o.threads = self.threads.unwrap_or(o.threads);
        o
    }
}

/// Keys of calls that read.
pub const READ: &[&str] = &["mode", "backend", "memory", "block_size", "queue_depth", "progress"];
/// Keys of calls that read into arenas.
pub const ARENA: &[&str] = &["mode", "backend", "memory", "block_size", "queue_depth", "threads", "progress"];

/// A serde value (a report) as Python objects, through `json.loads`.
pub fn to_py<'py>(py: Python<'py>, v: &impl serde::Serialize) -> PyResult<Bound<'py, PyAny>> {
    let s = serde_json::to_string(v).map_err(|e| PyValueError::new_err(format!("internal error: report does not serialize: {e}")))?;
    py.import("json")?.call_method1("loads", (s,))
}
