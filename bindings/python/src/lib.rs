//! The native module of the `cacheless` Python package (`cacheless._native`): the engine's
//! file I/O, copy, extract, pack and hash, and the safetensors loader and saver, with the GIL
//! released for all I/O. The Python package (py_src/cacheless) is the public API; the names
//! here are private to it.
#![deny(unsafe_code)]

mod arena;
mod cli;
mod errors;
#[cfg(feature = "fault-injection")]
mod fault;
mod files;
mod funcs;
mod job;
mod opts;
mod pybuf;
mod remote;
mod st;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // A misspelt switch would leave on what the user meant to turn off.
    cacheless::check_disabled().map_err(pyo3::exceptions::PyValueError::new_err)?;
    m.add("UnsupportedError", m.py().get_type::<errors::UnsupportedError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<arena::PyArena>()?;
    m.add_class::<files::PyReader>()?;
    m.add_class::<files::PyWriter>()?;
    m.add_class::<st::PySafeFile>()?;
    m.add_class::<remote::PyRemoteReader>()?;
    m.add_class::<remote::PyRemoteWriter>()?;
    m.add_function(wrap_pyfunction!(remote::is_url, m)?)?;
    m.add_function(wrap_pyfunction!(funcs::info, m)?)?;
    m.add_function(wrap_pyfunction!(funcs::residency, m)?)?;
    m.add_function(wrap_pyfunction!(funcs::evict, m)?)?;
    m.add_function(wrap_pyfunction!(funcs::read_file, m)?)?;
    m.add_function(wrap_pyfunction!(funcs::write_file, m)?)?;
    m.add_function(wrap_pyfunction!(funcs::copy, m)?)?;
    m.add_function(wrap_pyfunction!(funcs::hash, m)?)?;
    m.add_function(wrap_pyfunction!(funcs::extract, m)?)?;
    m.add_function(wrap_pyfunction!(funcs::pack, m)?)?;
    m.add_function(wrap_pyfunction!(st::st_load, m)?)?;
    m.add_function(wrap_pyfunction!(st::st_load_model, m)?)?;
    m.add_function(wrap_pyfunction!(cli::cli_main, m)?)?;
    m.add_function(wrap_pyfunction!(st::st_parse, m)?)?;
    m.add_function(wrap_pyfunction!(st::st_save, m)?)?;
    m.add_function(wrap_pyfunction!(st::st_serialize, m)?)?;
    #[cfg(feature = "fault-injection")]
    fault::register(m)?;
    Ok(())
}
