//! What a path's filesystem supports, how much of a file is resident, and the mode a read or a
//! write in a requested mode would take there, with the reason: the report behind the command
//! line's `info` and the Python package's `cacheless.info()` (it serializes to the same JSON).

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::caps::{self, FsCaps, SystemCaps};
use crate::error::{Error, Hint, Result};
use crate::policy::{self, Decision, Mode, Reason, Refusal};
use crate::residency::{self, Residency};

/// How a read or a write would go: the mode and why, or, where the requested mode is refused,
/// that mode, why, and what to ask for instead.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// The mode that would be used (the refused mode when `hint` is set).
    pub mode: Mode,
    /// Why: the rule that fired, or the refusal and what the probe found (serialized as words:
    /// the rule's, or `refused: ` and the probe's).
    pub reason: PlanReason,
    /// For a refusal, the modes that work here instead (front ends word it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<Hint>,
}

/// Why a [`Plan`] goes as it does.
#[derive(Debug, Clone, PartialEq)]
pub enum PlanReason {
    /// The policy's rule that fired.
    Rule(Reason),
    /// The requested mode is refused: what the probe found.
    Refused(String),
}

impl std::fmt::Display for PlanReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlanReason::Rule(r) => write!(f, "{r}"),
            PlanReason::Refused(why) => write!(f, "refused: {why}"),
        }
    }
}

impl Serialize for PlanReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl Plan {
    /// True when the requested mode is refused here.
    pub fn is_refused(&self) -> bool {
        self.hint.is_some()
    }
}

impl From<std::result::Result<Decision, Refusal>> for Plan {
    fn from(d: std::result::Result<Decision, Refusal>) -> Plan {
        match d {
            Ok(d) => Plan { mode: d.mode.into(), reason: PlanReason::Rule(d.reason), hint: None },
            Err(r) => Plan { mode: r.mode, reason: PlanReason::Refused(r.reason), hint: Some(r.hint) },
        }
    }
}

/// One path described.
#[derive(Debug, Clone, Serialize)]
pub struct PathInfo {
    /// The path as given.
    #[serde(serialize_with = "crate::quote::serialize_path")]
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
    pub read: Option<Plan>,
    /// How a file written here in the requested mode would be written; `None` in a directory
    /// where no file can be created (nothing could be probed).
    pub write: Option<Plan>,
    /// Whether new files are created without a name in this folder (the file's folder for a
    /// file) and linked when done (O_TMPFILE), or under a temporary name and renamed.
    pub tmpfile: caps::Support,
    /// Whether such a file is linked by its descriptor (linkat AT_EMPTY_PATH) or through
    /// /proc/self/fd (the process's verdict: it depends on its privileges).
    pub flink: caps::Support,
}

/// The folder new files beside `path` go to: itself for a folder, else its parent.
fn folder_of(path: &Path, is_dir: bool) -> &Path {
    match path.parent() {
        _ if is_dir => path,
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The whole report: the system, then each path.
#[derive(Debug, Serialize)]
pub struct Report<'a> {
    /// Kernel-wide support.
    pub system: &'a SystemCaps,
    /// Each path described.
    pub paths: Vec<PathInfo>,
}

/// Describes a file or directory: filesystem support, residency, and what `mode` would do.
/// A directory where no file can be created (a read-only filesystem, no permission) is still
/// described: its filesystem named from statfs, its features reported as not probed.
pub fn describe(path: &Path, mode: Mode) -> Result<PathInfo> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io("stat", path, e))?;
    if meta.is_dir() {
        let (fs, write) = match caps::for_dir(path) {
            Ok(fs) => ((*fs).clone(), Some(policy::decide_write(mode, &fs, None).into())),
            Err(e) => (caps::unprobed(path, &e).map_err(|e| Error::io("statfs", path, e))?, None),
        };
        let tmpfile = caps::probe_tmpfile(folder_of(path, true));
        return Ok(PathInfo {
            path: path.into(),
            kind: "directory",
            size: None,
            fs,
            residency: None,
            residency_unknown: None,
            read: None,
            write,
            tmpfile,
            flink: caps::flink(),
        });
    }
    let f = std::fs::File::open(path).map_err(|e| Error::io("open", path, e))?;
    let fs = caps::for_file(&f).map_err(|e| Error::io("probe", path, e))?;
    let len = meta.len();
    // Unknown residency (no permission to ask) is reported, and auto decides without it.
    let (res, residency_unknown) = match residency::residency(&f, 0, len) {
        Ok(r) => (Some(r), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let read = policy::decide_read(mode, &fs, len, res.map(|r| r.cached_bytes().min(len))).into();
    let write = policy::decide_write(mode, &fs, Some(len)).into();
    Ok(PathInfo {
        path: path.into(),
        kind: "file",
        size: Some(len),
        fs: (*fs).clone(),
        residency: res,
        residency_unknown,
        read: Some(read),
        write: Some(write),
        tmpfile: caps::probe_tmpfile(folder_of(path, false)),
        flink: caps::flink(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_mode_is_described_with_the_modes_to_ask_for_instead() {
        let no = caps::Unavailable { reason: "open(O_DIRECT): EINVAL (invalid input)".into(), errno: Some(crate::sys::consts::EINVAL) };
        let fs = FsCaps { dev: 1, fs_type: "tmpfs".into(), direct: Err(no.clone()), dontcache: Ok(()), direct_write_cached: None };
        let read = Plan::from(policy::decide_read(Mode::Direct, &fs, 1 << 20, None));
        assert!(read.is_refused());
        assert_eq!(read.mode, Mode::Direct);
        assert_eq!(read.reason, PlanReason::Refused(no.reason.clone()));
        assert_eq!(read.reason.to_string(), format!("refused: {}", no.reason));
        assert_eq!(read.hint, Some(Hint::Modes(vec![Mode::Auto, Mode::DontCache])));
        let json = serde_json::to_value(&read).unwrap();
        assert_eq!(json["hint"], serde_json::json!({"modes": ["auto", "dontcache"]}), "{json}");
        // An accepted plan has no hint, and its JSON says none.
        let write = Plan::from(policy::decide_write(Mode::DontCache, &fs, Some(10)));
        assert!(!write.is_refused() && write.mode == Mode::DontCache, "{write:?}");
        assert!(serde_json::to_value(&write).unwrap().get("hint").is_none());
    }

    #[test]
    fn a_directory_where_nothing_can_be_created_is_named_and_not_probed() {
        let i = describe(Path::new("/proc"), Mode::Auto).unwrap();
        assert_eq!((i.kind, i.fs.fs_type.as_str()), ("directory", "proc"));
        assert!(i.write.is_none() && i.read.is_none());
        let why = &i.fs.direct.as_ref().unwrap_err().reason;
        assert!(why.starts_with("not probed: no file can be created here"), "{why}");
        assert!(i.tmpfile.is_err(), "no file is made in /proc");
    }

    #[test]
    fn the_naming_of_new_files_is_reported_per_folder() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, b"x").unwrap();
        for p in [d.path(), f.as_path()] {
            let i = describe(p, Mode::Auto).unwrap();
            // What an O_TMPFILE open in the folder says, asked here too.
            let asked = rustix::fs::open(d.path(), rustix::fs::OFlags::TMPFILE | rustix::fs::OFlags::RDWR, rustix::fs::Mode::from_raw_mode(0o600)).is_ok();
            assert_eq!(i.tmpfile.is_ok(), asked && !crate::env::disabled("tmpfile"), "{:?}", i.tmpfile);
            assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1, "the probe leaves nothing");
        }
    }
}
