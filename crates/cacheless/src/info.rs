//! What `cacheless info` reports about a path: its filesystem's support, its residency, and the
//! mode auto would choose for it, with the reason (serializes to the CLI's JSON).

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::caps::{self, FsCaps, SystemCaps};
use crate::error::{Error, Result};
use crate::policy::{self, Decision, Mode, Refusal};
use crate::residency::{self, Residency};

/// One path described.
#[derive(Debug, Clone, Serialize)]
pub struct PathInfo {
    /// The path as given.
    pub path: PathBuf,
    /// `file` or `directory`.
    pub kind: &'static str,
    /// File size (files only).
    pub size: Option<u64>,
    /// What the path's filesystem supports.
    pub fs: FsCaps,
    /// Page-cache residency (files only, when it can be asked).
    pub residency: Option<Residency>,
    /// Why residency is unknown, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub residency_unknown: Option<String>,
    /// How a read in the requested mode would go (files only).
    pub read: Option<Decision>,
    /// How a write in the requested mode would go.
    pub write: Decision,
}

/// The whole report: the system, then each path.
#[derive(Debug, Serialize)]
pub struct Report<'a> {
    /// Kernel-wide support.
    pub system: &'a SystemCaps,
    /// Each path described.
    pub paths: Vec<PathInfo>,
}

/// A decision that was refused, shown as such with the advice.
fn refused(r: Refusal) -> Decision {
    Decision { mode: r.mode, reason: format!("refused: {}; {}", r.reason, r.hint()) }
}

/// Describes a file or directory: filesystem support, residency, and what `mode` would do.
pub fn describe(path: &Path, mode: Mode) -> Result<PathInfo> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io("stat", path, e))?;
    if meta.is_dir() {
        let fs = caps::for_dir(path).map_err(|e| Error::io("probe", path, e))?;
        let write = policy::decide_write(mode, &fs, None).unwrap_or_else(refused);
        return Ok(PathInfo { path: path.into(), kind: "directory", size: None, fs: (*fs).clone(), residency: None, residency_unknown: None, read: None, write });
    }
    let f = std::fs::File::open(path).map_err(|e| Error::io("open", path, e))?;
    let fs = caps::for_file(&f).map_err(|e| Error::io("probe", path, e))?;
    let len = meta.len();
    // Unknown residency (no permission to ask) is reported, and auto decides without it.
    let (res, residency_unknown) = match residency::residency(&f, 0, len) {
        Ok(r) => (Some(r), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let read = policy::decide_read(mode, &fs, len, res.map(|r| r.cached_bytes().min(len))).unwrap_or_else(refused);
    let write = policy::decide_write(mode, &fs, Some(len)).unwrap_or_else(refused);
    Ok(PathInfo { path: path.into(), kind: "file", size: Some(len), fs: (*fs).clone(), residency: res, residency_unknown, read: Some(read), write })
}
