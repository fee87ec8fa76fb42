//! What a workload is: a setup (the files it replaces or reads, made before recording starts),
//! a run (the calls, each followed by a marker once it returns), and expectations (per file:
//! its old and new content, the marker after which the new content is promised, and whether
//! the name may ever hold anything but old, new or nothing).
//!
//! Adding one: write a function returning a [`Workload`] and list it in
//! [`crate::workloads::all`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::record::Log;

/// What a workload's run sees: where the filesystem under test is mounted, a scratch folder
/// outside it (for sources), and the marker callback.
pub struct Ctx {
    /// The mount point of the filesystem under test.
    pub root: PathBuf,
    /// A folder on another filesystem, made by the setup (sources to copy from).
    pub scratch: PathBuf,
    log: Log,
}

impl Ctx {
    /// A context over `root` and `scratch`, marking into `log`.
    pub fn new(root: &Path, scratch: &Path, log: Log) -> Ctx {
        Ctx { root: root.to_path_buf(), scratch: scratch.to_path_buf(), log }
    }

    /// Puts a marker in the log: the call named `what` has returned, so what it promised holds
    /// in every crash state from here on. Call it right after the call returns.
    pub fn mark(&self, what: &str) {
        self.log.mark(what);
    }

    /// `rel` under the mount point.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ran {
    /// Every call returned.
    Done,
    /// The filesystem cannot do what the workload asks (a forced mode it refuses), or this
    /// machine lacks what it needs (the `python` workload's interpreter): the reason.
    Unsupported(String),
}

/// The setup: `(root, scratch)` -> files made before recording starts.
pub type Setup = Box<dyn Fn(&Path, &Path) -> std::io::Result<()> + Send + Sync>;
/// The run.
pub type Run = Box<dyn Fn(&Ctx) -> Result<Ran, String> + Send + Sync>;
/// A check of a crash state beyond its files' bytes: `(root, promised markers)` -> what is
/// wrong, if anything (a checkpoint that must load and equal what was saved).
pub type Check = Box<dyn Fn(&Path, &std::collections::BTreeSet<String>) -> Option<String> + Send + Sync>;

/// What must hold for one file in every crash state.
#[derive(Debug, Clone)]
pub struct FileExpect {
    /// Its path under the mount point.
    pub path: PathBuf,
    /// Its content before the workload (None: it did not exist).
    pub old: Option<Arc<[u8]>>,
    /// Its content once written.
    pub new: Arc<[u8]>,
    /// The marker after which the new content is promised.
    pub promised_by: String,
    /// The name never holds anything but the old content, the new content or (for a new file)
    /// nothing: the engine wrote it under a temporary name. False for files created under
    /// their final name (a file creator's batches, as extract writes them), which only the
    /// promise covers.
    pub atomic: bool,
    /// The permission bits and modification time (whole seconds since the epoch) it gets with
    /// its new content, where the workload sets them: whenever the new content is under the
    /// final name, they must be there too.
    pub meta: Option<Meta>,
}

/// Permission bits and modification time a file or folder must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// `st_mode & 0o7777`.
    pub mode: u32,
    /// `st_mtime`, in seconds.
    pub mtime: i64,
}

/// A directory that must exist once `promised_by` is in the log.
#[derive(Debug, Clone)]
pub struct DirExpect {
    /// Its path under the mount point.
    pub path: PathBuf,
    /// The marker after which it is promised.
    pub promised_by: String,
    /// Its permission bits and modification time once promised, where the workload sets them.
    pub meta: Option<Meta>,
}

/// A symbolic link that must point at `target` once `promised_by` is in the log (and, before,
/// be absent or already right: it is made under a temporary name).
#[derive(Debug, Clone)]
pub struct SymlinkExpect {
    /// Its path under the mount point.
    pub path: PathBuf,
    /// What it points at.
    pub target: PathBuf,
    /// The marker after which it is promised.
    pub promised_by: String,
}

/// A workload for the simulator.
pub struct Workload {
    /// Its name in reports (`writer-direct`, `copy-tree`, ...).
    pub name: String,
    /// Makes the old files under the root and the sources in the scratch folder.
    pub setup: Setup,
    /// The calls, with a marker after each.
    pub run: Run,
    /// The files it writes.
    pub files: Vec<FileExpect>,
    /// The directories it makes.
    pub dirs: Vec<DirExpect>,
    /// The symbolic links it makes.
    pub symlinks: Vec<SymlinkExpect>,
    /// Names that must never exist, in any crash state nor after the run: the items a failed
    /// call fails, which are never named half-done.
    pub absent: Vec<PathBuf>,
    /// Further checks of every crash state, each naming what it found wrong.
    pub checks: Vec<Check>,
}

impl std::fmt::Debug for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workload").field("name", &self.name).field("files", &self.files.len()).field("dirs", &self.dirs.len()).finish()
    }
}
