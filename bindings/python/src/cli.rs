//! The `cacheless` command line, run by the package's console script (`cacheless._cli`): the
//! same code as the `cacheless` binary, so that one `pip install` gives both.

use std::ffi::OsString;
use std::path::PathBuf;

use pyo3::prelude::*;

/// Runs the command line `argv` (`sys.argv`: the program's name first) with the GIL released
/// and returns its exit status. `program` runs this command line again (the console script),
/// for the helper processes of `cacheless bench`.
#[pyfunction]
#[pyo3(signature = (argv, program))]
pub fn cli_main(py: Python<'_>, argv: Vec<OsString>, program: PathBuf) -> u8 {
    py.detach(|| cacheless_cli::run(argv, Some(program)).0)
}
