//! The native half of `cacheless.safetensors`: loading into arenas, `safe_open`, saving.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cacheless::Progress;
use cacheless_safetensors::{load, load_model, save_staged, serialize, Dtype, Header, Loaded, SafeFile, TensorData};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::arena::PyArena;
use crate::errors;
use crate::job;
use crate::opts::{self, to_py, BlockSize, Callback, Count, Memory, QueueDepth, Size, Threads};
use crate::pybuf::Pinned;

/// (name, dtype, shape, arena offset, bytes) for each tensor in `names` order.
type Entry = (String, String, Vec<usize>, usize, u64);

fn entry(t: &cacheless_safetensors::TensorEntry, at: usize) -> Entry {
    (t.name.clone(), t.dtype.to_string(), t.shape.clone(), at, t.len)
}

fn loaded_entries(l: &Loaded, keys: Option<&[String]>) -> PyResult<Vec<Entry>> {
    match keys {
        None => Ok(l.header.tensors().iter().filter_map(|t| l.tensor_offset(t).map(|at| entry(t, at))).collect()),
        Some(keys) => keys
            .iter()
            .map(|k| {
                let t = l.header.require(k).map_err(errors::safetensors)?;
                let at = l.tensor_offset(t).ok_or_else(|| PyValueError::new_err(format!("internal error: tensor '{k}' missing from its arena")))?;
                Ok(entry(t, at))
            })
            .collect(),
    }
}

fn metadata<'py>(py: Python<'py>, h: &Header) -> PyResult<Bound<'py, PyAny>> {
    match h.metadata() {
        Some(m) => Ok(m.clone().into_pyobject(py)?.into_any()),
        None => Ok(py.None().into_bound(py)),
    }
}

/// One loaded file for Python: (arena, entries, metadata, report).
fn loaded_to_py<'py>(py: Python<'py>, l: Loaded, keys: Option<&[String]>) -> PyResult<Bound<'py, PyTuple>> {
    let es = loaded_entries(&l, keys)?;
    let meta = metadata(py, &l.header)?;
    let report = to_py(py, &l.report)?;
    let len = l.arena.len();
    let arena = Bound::new(py, PyArena::new(Arc::new(l.arena), len))?;
    PyTuple::new(py, [arena.into_any(), es.into_pyobject(py)?.into_any(), meta, report])
}

/// Loads a safetensors file (every tensor, or only `keys`): (arena, entries, metadata, report).
#[pyfunction]
#[pyo3(signature = (path, keys = None, *, mode = "auto", backend = "auto", memory = None, block_size = None, queue_depth = None, threads = None, progress = None))]
#[allow(clippy::too_many_arguments)] // The Python signature: each keyword is a parameter.
pub fn st_load<'py>(
    py: Python<'py>,
    path: PathBuf,
    keys: Option<Vec<String>>,
    mode: &str,
    backend: &str,
    memory: Option<Size<Memory>>,
    block_size: Option<Size<BlockSize>>,
    queue_depth: Option<Count<QueueDepth>>,
    threads: Option<Count<Threads>>,
    progress: Option<Callback<'py>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let ao = opts::arena(opts::io(mode, backend, memory, block_size, queue_depth)?, threads);
    let p = Progress::new();
    let l = job::run(py, &p, opts::callback(&progress), || load(&path, keys.as_deref(), &ao, &p))?.map_err(errors::safetensors)?;
    loaded_to_py(py, l, keys.as_deref())
}

/// Loads every shard of a checkpoint: (list of per-shard tuples as `st_load`, index dict).
#[pyfunction]
#[pyo3(signature = (path, *, mode = "auto", backend = "auto", memory = None, block_size = None, queue_depth = None, threads = None, parallel = 4, progress = None))]
#[allow(clippy::too_many_arguments)] // The Python signature: each keyword is a parameter.
pub fn st_load_model<'py>(
    py: Python<'py>,
    path: PathBuf,
    mode: &str,
    backend: &str,
    memory: Option<Size<Memory>>,
    block_size: Option<Size<BlockSize>>,
    queue_depth: Option<Count<QueueDepth>>,
    threads: Option<Count<Threads>>,
    parallel: usize,
    progress: Option<Callback<'py>>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyDict>)> {
    if parallel == 0 {
        return Err(PyValueError::new_err("parallel= must be positive"));
    }
    let ao = opts::arena(opts::io(mode, backend, memory, block_size, queue_depth)?, threads);
    let p = Progress::new();
    let (index, shards) = job::run(py, &p, opts::callback(&progress), || load_model(&path, &ao, parallel, &p))?.map_err(errors::safetensors)?;
    let list = PyList::empty(py);
    for l in shards {
        list.append(loaded_to_py(py, l, None)?)?;
    }
    let d = PyDict::new(py);
    d.set_item("index", index.index.as_ref().map(|p| p.to_string_lossy().into_owned()))?;
    d.set_item("shards", index.shards.iter().map(|p| p.to_string_lossy().into_owned()).collect::<Vec<_>>())?;
    d.set_item("weight_map", index.weight_map.clone().into_pyobject(py)?)?;
    d.set_item("metadata", to_py(py, &index.metadata)?)?;
    Ok((list, d))
}

/// A safetensors file opened for reading tensors one at a time.
#[pyclass(frozen, module = "cacheless._native", name = "SafeFile")]
pub struct PySafeFile {
    inner: Mutex<Option<SafeFile>>,
    header: Header,
    mode: (String, String),
}

impl PySafeFile {
    fn read(&self, py: Python<'_>, off: u64, len: u64) -> PyResult<(PyArena, usize)> {
        let p = Progress::new();
        let r = py.detach(|| {
            let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            g.as_mut().map(|f| f.span(off, len, &p))
        });
        let (arena, at) = r.ok_or_else(|| PyValueError::new_err("the file is closed"))?.map_err(errors::safetensors)?;
        let n = arena.len();
        Ok((PyArena::new(arena, n), at))
    }
}

#[pymethods]
impl PySafeFile {
    #[new]
    #[pyo3(signature = (path, *, mode = "auto", backend = "auto", memory = None))]
    fn new(py: Python<'_>, path: PathBuf, mode: &str, backend: &str, memory: Option<Size<Memory>>) -> PyResult<Self> {
        let o = opts::arena(opts::io(mode, backend, memory, None, None)?, None);
        let f = py.detach(|| SafeFile::open(&path, &o)).map_err(errors::safetensors)?;
        let header = f.header().clone();
        let mode = (f.decision().mode.to_string(), f.decision().reason.to_string());
        Ok(PySafeFile { inner: Mutex::new(Some(f)), header, mode })
    }

    /// Tensor names in file order.
    fn offset_keys(&self) -> Vec<String> {
        self.header.tensors().iter().map(|t| t.name.clone()).collect()
    }

    /// (dtype, shape, bytes) of a tensor; `KeyError` if there is none of that name.
    fn describe(&self, name: &str) -> PyResult<(String, Vec<usize>, u64)> {
        let t = self.header.require(name).map_err(errors::safetensors)?;
        Ok((t.dtype.to_string(), t.shape.clone(), t.len))
    }

    /// The `__metadata__` dict, or None.
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        metadata(py, &self.header)
    }

    /// (arena, offset) holding a tensor's bytes.
    fn tensor(&self, py: Python<'_>, name: &str) -> PyResult<(PyArena, usize)> {
        let t = self.header.require(name).map_err(errors::safetensors)?;
        self.read(py, t.offset, t.len)
    }

    /// (arena, offset) holding bytes `[lo, hi)` of a tensor's data.
    fn tensor_range(&self, py: Python<'_>, name: &str, lo: u64, hi: u64) -> PyResult<(PyArena, usize)> {
        let t = self.header.require(name).map_err(errors::safetensors)?;
        if lo > hi || hi > t.len {
            return Err(PyValueError::new_err(format!("range {lo}..{hi} is outside tensor '{name}' ({} bytes)", t.len)));
        }
        self.read(py, t.offset + lo, hi - lo)
    }

    /// (mode, reason): how the file is read, and why.
    fn decision(&self) -> (String, String) {
        self.mode.clone()
    }

    /// Closes the file (arrays already handed out stay valid).
    fn close(&self) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

/// Parses a whole file held in a bytes-like object: (entries with offsets into it, metadata).
#[pyfunction]
pub fn st_parse<'py>(py: Python<'py>, data: &Bound<'py, PyAny>) -> PyResult<(Vec<Entry>, Bound<'py, PyAny>)> {
    let pin = Pinned::readable(data)?;
    let h = Header::from_bytes(Path::new("<bytes>"), pin.bytes()).map_err(errors::safetensors)?;
    let es = h.tensors().iter().map(|t| entry(t, cacheless::conv::usize_of(t.offset))).collect();
    Ok((es, metadata(py, &h)?))
}

/// Tensors to save, as given from Python: (name, dtype, shape, pinned bytes).
struct Given {
    name: String,
    dtype: Dtype,
    shape: Vec<usize>,
    data: Pinned,
}

fn dtype(s: &str) -> PyResult<Dtype> {
    serde_json::from_value(serde_json::Value::String(s.to_string())).map_err(|_| PyTypeError::new_err(format!("unknown safetensors dtype '{s}'")))
}

fn given(tensors: &Bound<'_, PyList>) -> PyResult<Vec<Given>> {
    tensors
        .iter()
        .map(|item| {
            let (name, d, shape, buf): (String, String, Vec<usize>, Bound<'_, PyAny>) = item.extract()?;
            Ok(Given { name, dtype: dtype(&d)?, shape, data: Pinned::readable(&buf)? })
        })
        .collect()
}

fn views(g: &[Given]) -> Vec<TensorData<'_>> {
    g.iter().map(|t| TensorData { name: &t.name, dtype: t.dtype, shape: &t.shape, data: t.data.bytes() }).collect()
}

/// Saves tensors given as [(name, dtype, shape, buffer)]: durable, atomic, direct I/O.
#[pyfunction]
#[pyo3(signature = (path, tensors, metadata = None, *, mode = "auto", backend = "auto", memory = None, block_size = None, queue_depth = None, progress = None))]
#[allow(clippy::too_many_arguments)] // The Python signature: each keyword is a parameter.
pub fn st_save<'py>(
    py: Python<'py>,
    path: PathBuf,
    tensors: &Bound<'py, PyList>,
    metadata: Option<HashMap<String, String>>,
    mode: &str,
    backend: &str,
    memory: Option<Size<Memory>>,
    block_size: Option<Size<BlockSize>>,
    queue_depth: Option<Count<QueueDepth>>,
    progress: Option<Callback<'py>>,
) -> PyResult<Bound<'py, PyAny>> {
    let wo = opts::write(opts::io(mode, backend, memory, block_size, queue_depth)?, true, None);
    let g = given(tensors)?;
    let v = views(&g);
    let p = Progress::new();
    let (rep, file) = job::run(py, &p, opts::callback(&progress), || save_staged(&path, &v, metadata.as_ref(), &wo, &p))?.map_err(errors::safetensors)?;
    // A Ctrl-C that came while it was written, or a callback that raised on its last call,
    // leaves `path` as it was: the complete file is dropped (removed) unnamed.
    job::commit(py, file, |f| f.publish(true))?;
    to_py(py, &rep)
}

/// The whole file as bytes, as `safetensors.serialize` makes it.
#[pyfunction]
#[pyo3(signature = (tensors, metadata = None))]
pub fn st_serialize<'py>(py: Python<'py>, tensors: &Bound<'py, PyList>, metadata: Option<HashMap<String, String>>) -> PyResult<Bound<'py, PyBytes>> {
    let g = given(tensors)?;
    let v = views(&g);
    let out = py.detach(|| serialize(&v, metadata.as_ref())).map_err(errors::safetensors)?;
    Ok(PyBytes::new(py, &out))
}
