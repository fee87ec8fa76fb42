//! The keyword options the calls share (`mode=`, `backend=`, `memory=`, `block_size=`,
//! `queue_depth=`, `threads=`, `progress=`, `sync=`, `size_hint=`, `parallel=`), parsed in one
//! place into engine options.

use cacheless::{limits, Budget, IoOptions, ReadOptions, WriteOptions};
use cacheless_safetensors::ArenaOptions;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The options of one call.
pub struct Options<'py> {
    /// `mode=`, `backend=`, `block_size=`, `queue_depth=` and `memory=` (the budget).
    pub io: IoOptions,
    pub threads: Option<usize>,
    /// Threads decoding a multi-frame zstd archive (extract).
    pub decompress_threads: Option<usize>,
    /// `progress(done, total)`, called from the calling thread.
    pub progress: Option<Bound<'py, PyAny>>,
    pub sync: bool,
    pub size_hint: Option<u64>,
    pub parallel: usize,
}

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

/// A bandwidth limit keyword (`bwlimit=`): bytes per second as an int or float, or a size such
/// as "200M"; 0 is no limit, as on the command line.
pub fn rate(name: &str, v: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
    let flag = format!("{name}=");
    if let Ok(s) = v.extract::<String>() {
        return limits::parse_rate(&flag, &s).map_err(PyValueError::new_err);
    }
    let f: f64 = v.extract().map_err(|_| PyTypeError::new_err(format!("{name}= must be bytes per second or a size such as '200M'")))?;
    limits::rate(&flag, f).map_err(PyValueError::new_err)
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
        crate::fault::track(&o.io.budget);
        Ok(o)
    }

    fn parse_keys(call: &str, kw: Option<&Bound<'py, PyDict>>, allowed: &[&str]) -> PyResult<Options<'py>> {
        let mut o = Options { io: IoOptions::default(), threads: None, decompress_threads: None, progress: None, sync: true, size_hint: None, parallel: 4 };
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
                    o.io.mode = s.parse().map_err(|e: String| {
                        let extra = if matches!(s.as_str(), "rb" | "wb" | "r" | "w" | "br" | "bw") {
                            " (the access, \"rb\" or \"wb\", is open()'s second argument)"
                        } else {
                            ""
                        };
                        PyValueError::new_err(format!("mode=: {e}{extra}"))
                    })?;
                }
                "backend" => o.io.backend = v.extract::<String>()?.parse().map_err(|e: String| PyValueError::new_err(format!("backend=: {e}")))?,
                "memory" => o.io.budget = Budget::new(bounded("memory", &v, true, limits::memory)?),
                "block_size" => o.io.block_size = bounded("block_size", &v, true, limits::block_size)?,
                "queue_depth" => o.io.queue_depth = bounded("queue_depth", &v, false, limits::queue_depth)?,
                "threads" => o.threads = Some(bounded("threads", &v, false, limits::threads)?),
                "decompress_threads" => o.decompress_threads = Some(bounded("decompress_threads", &v, false, limits::threads)?),
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

    /// Engine read options.
    pub fn read(&self) -> ReadOptions {
        ReadOptions::from(self.io.clone())
    }

    /// Engine write options (with `sync=` and `size_hint=`).
    pub fn write(&self) -> WriteOptions {
        let mut o = WriteOptions::from(self.io.clone());
        o.sync = self.sync;
        o.size_hint = self.size_hint;
        o
    }

    /// Options for reading files into arenas.
    pub fn arena(&self) -> ArenaOptions {
        let mut o = ArenaOptions::new(self.io.budget.clone());
        o.read = self.read();
        o.threads = self.threads.unwrap_or(o.threads);
        o
    }
}

/// Keys of calls that read.
pub const READ: &[&str] = &["mode", "backend", "memory", "block_size", "queue_depth", "progress"];
/// Keys of calls that read into arenas.
pub const ARENA: &[&str] = &["mode", "backend", "memory", "block_size", "queue_depth", "threads", "progress"];

/// A job's report (a dict) with the leftovers of dead jobs the run removed where it wrote
/// (`leftovers_removed`, paths), as the command line's `--json` gives it (see `cacheless::temps`).
pub fn with_leftovers<'py>(report: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let removed: Vec<String> = cacheless::temps::take_removed().into_iter().map(|(p, _)| p.to_string_lossy().into_owned()).collect();
    report.set_item("leftovers_removed", removed)?;
    Ok(report)
}

/// A serde value (a report) as Python objects: dicts (in the fields' order), lists, strings,
/// numbers, booleans and None, as `json.loads` would give them from the command line's
/// `--json`, built directly.
pub fn to_py<'py>(py: Python<'py>, v: &impl serde::Serialize) -> PyResult<Bound<'py, PyAny>> {
    pythonize::pythonize(py, v).map_err(|e| PyValueError::new_err(format!("internal error: report does not convert: {e}")))
}
