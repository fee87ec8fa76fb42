//! `cacheless._native._fault`, in test builds only (the `fault-injection` feature, never in a
//! shipped wheel): the engine's fault plan ([`cacheless::fault`]) driven from Python, so that
//! pytest can sweep the package's calls through every fault position (tests/test_faults.py).
//!
//! Sites and faults are named by strings ("open", "read", "write", "sync", "rename"; "eio",
//! "enospc", "eintr", "eagain", "short"). The memory budgets the calls create between
//! [`start`] and the next [`start`] are kept, so that [`budget_used`] can say whether every
//! buffer came back to them.

use std::sync::Mutex;

use cacheless::fault::{self, Fault, Plan, Site};
use cacheless::Budget;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The budgets made by calls since the last [`start`].
static BUDGETS: Mutex<Vec<Budget>> = Mutex::new(Vec::new());

/// Keeps `b` for [`budget_used`] (the options of every call register theirs here).
pub fn track(b: &Budget) {
    BUDGETS.lock().unwrap_or_else(|e| e.into_inner()).push(b.clone());
}

fn site_name(s: Site) -> &'static str {
    match s {
        Site::Open => "open",
        Site::Read => "read",
        Site::Write => "write",
        Site::Sync => "sync",
        Site::Rename => "rename",
        Site::Meta => "meta",
    }
}

fn fault_name(f: Fault) -> &'static str {
    match f {
        Fault::Eio => "eio",
        Fault::Enospc => "enospc",
        Fault::Eintr => "eintr",
        Fault::Eagain => "eagain",
        Fault::Short => "short",
    }
}

fn site(name: &str) -> PyResult<Site> {
    Site::ALL.into_iter().find(|&s| site_name(s) == name).ok_or_else(|| PyValueError::new_err(format!("unknown fault site '{name}'")))
}

fn fault_of(name: &str) -> PyResult<Fault> {
    Fault::ALL.into_iter().find(|&f| fault_name(f) == name).ok_or_else(|| PyValueError::new_err(format!("unknown fault '{name}'")))
}

/// Every site, in a fixed order.
#[pyfunction]
fn sites() -> Vec<&'static str> {
    Site::ALL.into_iter().map(site_name).collect()
}

/// The faults that apply at `site`: (name, errno or None for a short count, whether the
/// engine retries it there so that the call still succeeds).
#[pyfunction]
fn faults(site_name: &str) -> PyResult<Vec<(&'static str, Option<i32>, bool)>> {
    let s = site(site_name)?;
    Ok(Fault::ALL.into_iter().filter(|f| f.applies_to(s)).map(|f| (fault_name(f), f.errno(), f.retried_at(s))).collect())
}

/// The operations an error names when a call at `site` fails.
#[pyfunction]
fn ops(site_name: &str) -> PyResult<Vec<&'static str>> {
    Ok(site(site_name)?.ops().to_vec())
}

/// Starts counting calls from zero, forgets the budgets of earlier calls, and arms the plan
/// "the `nth` (from 0) call at `site` gets `fault`" (no plan without `site`: a clean run).
#[pyfunction]
#[pyo3(signature = (site = None, nth = 0, fault = None))]
fn start(site: Option<&str>, nth: u64, fault: Option<&str>) -> PyResult<()> {
    let plan = match (site, fault) {
        (Some(s), Some(f)) => Some(Plan { site: self::site(s)?, nth, fault: fault_of(f)? }),
        (None, None) => None,
        _ => return Err(PyValueError::new_err("start(): give both site= and fault=, or neither")),
    };
    BUDGETS.lock().unwrap_or_else(|e| e.into_inner()).clear();
    fault::start(plan);
    Ok(())
}

/// Whether the planned fault has been injected since [`start`].
#[pyfunction]
fn fired() -> bool {
    fault::fired()
}

/// Stops counting and disarms the plan: {"counts": {site: calls}, "fired": bool}.
#[pyfunction]
fn stop(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let out = fault::stop();
    let counts = PyDict::new(py);
    for s in Site::ALL {
        counts.set_item(site_name(s), out.count(s))?;
    }
    let d = PyDict::new(py);
    d.set_item("counts", counts)?;
    d.set_item("fired", out.fired)?;
    Ok(d)
}

/// Bytes still leased from the budgets of the calls made since [`start`] (0: every buffer is
/// back), and how many budgets that is.
#[pyfunction]
fn budget_used() -> (usize, usize) {
    let b = BUDGETS.lock().unwrap_or_else(|e| e.into_inner());
    (b.iter().map(Budget::used).sum(), b.len())
}

/// Adds the `_fault` submodule to the native module.
pub fn register(parent: &Bound<'_, PyModule>) -> PyResult<()> {
    let m = PyModule::new(parent.py(), "_fault")?;
    m.add_function(wrap_pyfunction!(sites, &m)?)?;
    m.add_function(wrap_pyfunction!(faults, &m)?)?;
    m.add_function(wrap_pyfunction!(ops, &m)?)?;
    m.add_function(wrap_pyfunction!(start, &m)?)?;
    m.add_function(wrap_pyfunction!(fired, &m)?)?;
    m.add_function(wrap_pyfunction!(stop, &m)?)?;
    m.add_function(wrap_pyfunction!(budget_used, &m)?)?;
    parent.add_submodule(&m)
}
