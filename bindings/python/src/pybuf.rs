//! Python buffers (bytes, bytearray, memoryview, numpy arrays, array.array, mmap ...) pinned
//! for Rust to read or fill while the GIL is released.
//!
//! The stable ABI this module is built for (CPython 3.9+) has no `PyObject_GetBuffer` before
//! 3.11, so the buffer is exported through numpy instead (`numpy.frombuffer`, which takes and
//! holds a buffer export of the object) and its address is read from `__array_interface__`,
//! the way the `safetensors` package hands data pointers across. Holding that array keeps the
//! export alive: the memory can be neither freed nor resized (a bytearray refuses to resize
//! while exported) until the `Pinned` is dropped.
#![allow(unsafe_code)]

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A contiguous buffer of a Python object, exported for as long as this lives.
pub struct Pinned {
    _export: Option<Py<PyAny>>,
    addr: usize,
    len: usize,
    writable: bool,
}

impl Pinned {
    /// Pins `obj`'s bytes for reading.
    pub fn readable(obj: &Bound<'_, PyAny>) -> PyResult<Pinned> {
        Pinned::new(obj, false)
    }

    /// Pins `obj`'s bytes for writing: a read-only buffer is a `TypeError`.
    pub fn writable(obj: &Bound<'_, PyAny>) -> PyResult<Pinned> {
        Pinned::new(obj, true)
    }

    fn new(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<Pinned> {
        let py = obj.py();
        let np = py.import("numpy")?;
        let arr = np.call_method1("frombuffer", (obj, np.getattr("uint8")?)).map_err(|e| {
            PyTypeError::new_err(format!("expected a C-contiguous bytes-like object (bytes, bytearray, memoryview, numpy array), got {}: {e}", type_name(obj)))
        })?;
        let ok_to_write: bool = arr.getattr("flags")?.getattr("writeable")?.extract()?;
        if writable && !ok_to_write {
            return Err(PyTypeError::new_err(format!("a writable buffer is needed (bytearray, memoryview, numpy array), got read-only {}", type_name(obj))));
        }
        let len: usize = arr.getattr("nbytes")?.extract()?;
        let iface = arr.getattr("__array_interface__")?;
        let iface = iface.cast::<PyDict>()?;
        let data = iface.get_item("data")?.ok_or_else(|| PyTypeError::new_err("numpy array without a data address"))?;
        let (addr, _readonly): (usize, bool) = data.extract()?;
        Ok(Pinned { _export: Some(arr.unbind()), addr, len, writable })
    }

    /// The bytes, to read.
    pub fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `addr..addr+len` is the buffer numpy exported from the object; the export
        // held in `_export` keeps it allocated and unresized for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len) }
    }

    /// The bytes, to fill. Only for buffers pinned with [`Pinned::writable`].
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        if self.len == 0 || !self.writable {
            return &mut [];
        }
        // SAFETY: as in `bytes`, and the exporter reported the buffer writable. Python code
        // writing the same buffer from another thread during the call races with us, as it
        // would with any C extension that fills a buffer (file.readinto included).
        unsafe { std::slice::from_raw_parts_mut(self.addr as *mut u8, self.len) }
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "object".into())
}
