//! File bytes in one aligned Rust allocation, handed to numpy without a copy.
//!
//! numpy builds an array over this object's `__array_interface__` and keeps the object as the
//! array's base, so the allocation lives while any array (or view of one) does.

use std::sync::Arc;

use cacheless_safetensors::Arena;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// An aligned buffer of file bytes (`numpy.asarray(arena)` is a writable uint8 view of it).
#[pyclass(frozen, module = "cacheless._native", name = "Arena")]
pub struct PyArena {
    inner: Arc<Arena>,
    len: usize,
}

impl PyArena {
    /// Wraps an arena, exposing its first `len` bytes.
    pub fn new(inner: Arc<Arena>, len: usize) -> PyArena {
        let len = len.min(inner.len());
        PyArena { inner, len }
    }
}

#[pymethods]
impl PyArena {
    /// The numpy array interface (version 3): a writable uint8 vector over the arena.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", (self.len,))?;
        d.set_item("typestr", "|u1")?;
        d.set_item("data", (self.inner.address(), false))?;
        Ok(d)
    }

    /// Bytes exposed.
    fn __len__(&self) -> usize {
        self.len
    }

    /// Address of the first byte (aligned to the page size at least).
    #[getter]
    fn address(&self) -> usize {
        self.inner.address()
    }

    fn __repr__(&self) -> String {
        format!("<cacheless Arena of {} bytes at 0x{:x}>", self.len, self.inner.address())
    }
}
