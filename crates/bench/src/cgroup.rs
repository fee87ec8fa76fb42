//! A memory cgroup created and removed by the benchmark, for `--scenario low-memory`.
//!
//! The whole benchmark process (all its threads and io_uring workers) moves into the cgroup for the timed part
//! of a trial and back out afterwards, so that the page cache and buffers the workload allocates are charged to
//! it and reclaimed at its limit. Both hierarchies are supported:
//! - cgroup v2: a child of the hierarchy root (the root may hold processes and enable controllers, a
//!   non-root cgroup may not do both), with `memory.max`;
//! - cgroup v1: a child of this process's current memory cgroup, with `memory.limit_in_bytes`.
//!
//! Written by hand over the cgroup file system: the crates that exist (cgroups-rs, controlgroup) are large and
//! aimed at container runtimes; we need mkdir, four files and rmdir.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use serde::{Deserialize, Serialize};

use crate::error::{read_text, Error, Result};
use crate::procfs::{parse_key_values, parse_mountinfo, Reclaim};

/// Which cgroup hierarchy holds the memory controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupVersion {
    /// The legacy per-controller hierarchy.
    V1,
    /// The unified hierarchy.
    V2,
}

/// Where the memory controller lives: its hierarchy, mount point, and this process's cgroup in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryHierarchy {
    /// v1 or v2.
    pub version: CgroupVersion,
    /// Mount point of the hierarchy (e.g. /sys/fs/cgroup/memory or /sys/fs/cgroup).
    pub mount: PathBuf,
    /// This process's cgroup, relative to the mount (e.g. `/user.slice/...`; `/` for the root).
    pub current: String,
}

impl MemoryHierarchy {
    /// The directory of this process's cgroup.
    pub fn current_dir(&self) -> PathBuf {
        self.mount.join(self.current.trim_start_matches('/'))
    }
}

/// Finds the memory controller from the texts of /proc/self/mountinfo and /proc/self/cgroup, preferring v2.
/// `has_v2_memory` says whether a cgroup2 mount point lists `memory` in its cgroup.controllers.
pub fn find_memory_hierarchy(mountinfo: &str, self_cgroup: &str, has_v2_memory: impl Fn(&Path) -> bool) -> Option<MemoryHierarchy> {
    let mut v1 = None;
    let mut v2 = None;
    for m in parse_mountinfo(mountinfo) {
        match m.fs_type {
            "cgroup2" if v2.is_none() && has_v2_memory(&m.mount_point) => v2 = Some(m.mount_point),
            "cgroup" if v1.is_none() && m.super_options.split(',').any(|x| x == "memory") => v1 = Some(m.mount_point),
            _ => {}
        }
    }
    let mut cur_v1 = None;
    let mut cur_v2 = None;
    for line in self_cgroup.lines() {
        let mut it = line.splitn(3, ':');
        let (Some(_), Some(ctrls), Some(path)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if ctrls.is_empty() {
            cur_v2 = Some(path.to_string());
        } else if ctrls.split(',').any(|c| c == "memory") {
            cur_v1 = Some(path.to_string());
        }
    }
    let (version, mount, current) = match (v2, v1) {
        (Some(mount), _) => (CgroupVersion::V2, mount, cur_v2),
        (None, Some(mount)) => (CgroupVersion::V1, mount, cur_v1),
        (None, None) => return None,
    };
    Some(MemoryHierarchy { version, mount, current: current.unwrap_or_else(|| "/".into()) })
}

/// Finds the memory controller of this system.
pub fn detect() -> Result<MemoryHierarchy> {
    let mountinfo = read_text("/proc/self/mountinfo")?;
    let self_cg = read_text("/proc/self/cgroup")?;
    find_memory_hierarchy(&mountinfo, &self_cg, |m| {
        fs::read_to_string(m.join("cgroup.controllers")).map(|c| c.split_whitespace().any(|x| x == "memory")).unwrap_or(false)
    })
    .ok_or_else(|| Error::Cgroup("no memory cgroup controller is mounted (neither cgroup v2 nor v1)".into()))
}

/// Memory figures of a cgroup, in bytes (reclaim in pages).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupMemStat {
    /// Page cache charged to the cgroup (v1 `total_cache`, v2 `file`).
    pub cache: u64,
    /// Dirty page cache (v1 `total_dirty`, v2 `file_dirty`).
    pub dirty: u64,
    /// Page cache under writeback (v1 `total_writeback`, v2 `file_writeback`).
    pub writeback: u64,
    /// Reclaim counters: cgroup v2 only (v1 memory.stat has no pgscan/pgsteal).
    pub reclaim: Option<Reclaim>,
}

/// Parses a memory.stat file of either version.
pub fn parse_memory_stat(text: &str, version: CgroupVersion) -> CgroupMemStat {
    let m: BTreeMap<String, u64> = parse_key_values(text);
    let g = |k: &str| m.get(k).copied().unwrap_or(0);
    match version {
        CgroupVersion::V1 => CgroupMemStat {
            cache: m.get("total_cache").copied().unwrap_or(g("cache")),
            dirty: m.get("total_dirty").copied().unwrap_or(g("dirty")),
            writeback: m.get("total_writeback").copied().unwrap_or(g("writeback")),
            reclaim: None,
        },
        CgroupVersion::V2 => CgroupMemStat { cache: g("file"), dirty: g("file_dirty"), writeback: g("file_writeback"), reclaim: Some(Reclaim::from_map(&m)) },
    }
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// The pid in a cgroup name of ours (`cacheless-bench-<pid>-<n>`).
fn owner_pid(name: &str) -> Option<u32> {
    name.strip_prefix("cacheless-bench-")?.split('-').next()?.parse().ok()
}

/// Removes empty cgroups left by benchmark processes that died inside a trial (killed before `Drop` ran).
/// Best effort: a cgroup still in use, or not ours, is left alone.
fn remove_stale(parent: &Path) {
    let Ok(rd) = fs::read_dir(parent) else { return };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(owner_pid) else {
            continue;
        };
        if pid != std::process::id() && !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = fs::remove_dir(e.path());
        }
    }
}

/// A memory cgroup with a limit, removed on drop (after moving this process back out if it is inside).
#[derive(Debug)]
pub struct MemoryCgroup {
    hierarchy: MemoryHierarchy,
    dir: PathBuf,
    origin: PathBuf,
    limit: u64,
    entered: bool,
}

impl MemoryCgroup {
    /// Creates a new memory cgroup limited to `limit` bytes. Needs root (or a delegated cgroup); the error
    /// says so.
    pub fn create(limit: u64) -> Result<MemoryCgroup> {
        let hierarchy = detect()?;
        Self::create_in(hierarchy, limit)
    }

    /// Creates the cgroup in the given hierarchy.
    pub fn create_in(hierarchy: MemoryHierarchy, limit: u64) -> Result<MemoryCgroup> {
        let origin = hierarchy.current_dir();
        let parent = match hierarchy.version {
            CgroupVersion::V1 => origin.clone(),
            CgroupVersion::V2 => hierarchy.mount.clone(),
        };
        let name = format!("cacheless-bench-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
        remove_stale(&parent);
        let dir = parent.join(name);
        if let Err(e) = fs::create_dir(&dir) {
            let hint = if e.kind() == std::io::ErrorKind::PermissionDenied || e.raw_os_error() == Some(cacheless::sys::consts::EROFS) {
                " (the low-memory scenario creates a memory cgroup: run as root, or in a cgroup delegated to you)"
            } else {
                ""
            };
            return Err(Error::Cgroup(format!("create {}: {e}{hint}", dir.display())));
        }
        let cg = MemoryCgroup { hierarchy, dir, origin, limit, entered: false };
        if cg.hierarchy.version == CgroupVersion::V2 {
            // memory.max needs the controller enabled in the parent's subtree_control.
            let sc = cg.hierarchy.mount.join("cgroup.subtree_control");
            if !cg.dir.join("memory.max").exists() {
                fs::write(&sc, "+memory").map_err(|e| Error::io(&sc, "enable memory controller", e))?;
            }
            cg.write("memory.max", &limit.to_string())?;
            // Swap would let anonymous memory escape the limit; page cache cannot be swapped anyway.
            let _ = cg.write("memory.swap.max", "0");
        } else {
            cg.write("memory.limit_in_bytes", &limit.to_string())?;
        }
        Ok(cg)
    }

    fn write(&self, file: &str, value: &str) -> Result<()> {
        let p = self.dir.join(file);
        fs::write(&p, value).map_err(|e| Error::io(&p, "write", e))
    }

    fn read(&self, file: &str) -> Result<String> {
        read_text(self.dir.join(file))
    }

    fn read_u64(&self, file: &str) -> Result<u64> {
        let t = self.read(file)?;
        t.trim().parse().map_err(|_| Error::Parse { path: self.dir.join(file), what: format!("not a number: {t:?}") })
    }

    /// The cgroup's directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The hierarchy version.
    pub fn version(&self) -> CgroupVersion {
        self.hierarchy.version
    }

    /// The limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Moves this whole process (every thread) into the cgroup.
    pub fn enter(&mut self) -> Result<()> {
        self.write("cgroup.procs", &std::process::id().to_string())?;
        self.entered = true;
        Ok(())
    }

    /// Moves this process back to the cgroup it came from. Charges stay with the cgroup until it is removed.
    pub fn leave(&mut self) -> Result<()> {
        if self.entered {
            let p = self.origin.join("cgroup.procs");
            fs::write(&p, std::process::id().to_string()).map_err(|e| Error::io(&p, "move back", e))?;
            self.entered = false;
        }
        Ok(())
    }

    /// Memory charged now (v1 memory.usage_in_bytes, v2 memory.current).
    pub fn usage(&self) -> Result<u64> {
        match self.hierarchy.version {
            CgroupVersion::V1 => self.read_u64("memory.usage_in_bytes"),
            CgroupVersion::V2 => self.read_u64("memory.current"),
        }
    }

    /// Highest charge since creation (v1 memory.max_usage_in_bytes, v2 memory.peak on 5.19+), if known.
    pub fn peak(&self) -> Option<u64> {
        match self.hierarchy.version {
            CgroupVersion::V1 => self.read_u64("memory.max_usage_in_bytes").ok(),
            CgroupVersion::V2 => self.read_u64("memory.peak").ok(),
        }
    }

    /// Page cache, dirty and writeback figures and (v2) reclaim counters.
    pub fn stat(&self) -> Result<CgroupMemStat> {
        Ok(parse_memory_stat(&self.read("memory.stat")?, self.hierarchy.version))
    }

    /// Leaves (if inside) and removes the cgroup, reporting errors that drop would swallow.
    pub fn remove(mut self) -> Result<()> {
        self.remove_inner()
    }

    fn remove_inner(&mut self) -> Result<()> {
        self.leave()?;
        if self.dir.as_os_str().is_empty() {
            return Ok(());
        }
        if self.hierarchy.version == CgroupVersion::V1 {
            // Reclaim what is charged so the parent does not inherit it; failure only costs a reparenting.
            let _ = self.write("memory.force_empty", "0");
        }
        let mut last = None;
        for _ in 0..50 {
            match fs::remove_dir(&self.dir) {
                Ok(()) => {
                    self.dir = PathBuf::new();
                    return Ok(());
                }
                Err(e) if e.raw_os_error() == Some(cacheless::sys::consts::EBUSY) => {
                    last = Some(e);
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => return Err(Error::io(&self.dir, "remove cgroup", e)),
            }
        }
        let busy = last.unwrap_or_else(|| std::io::Error::from_raw_os_error(cacheless::sys::consts::EBUSY));
        Err(Error::io(&self.dir, "remove cgroup", busy))
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        let _ = self.remove_inner();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO_HYBRID: &str = include_str!("../tests/data/mountinfo.txt");
    const CGROUP_V1: &str = include_str!("../tests/data/self_cgroup_v1.txt");

    #[test]
    fn finds_v1_memory_on_hybrid_system() {
        let h = find_memory_hierarchy(MOUNTINFO_HYBRID, CGROUP_V1, |_| false).unwrap();
        assert_eq!(h.version, CgroupVersion::V1);
        assert_eq!(h.mount, PathBuf::from("/sys/fs/cgroup/memory"));
        assert_eq!(h.current, "/process_api/bd21b254a3cfd4f5e6089851057c484d");
        assert_eq!(h.current_dir(), PathBuf::from("/sys/fs/cgroup/memory/process_api/bd21b254a3cfd4f5e6089851057c484d"));
    }

    #[test]
    fn prefers_v2_when_it_has_memory() {
        let mi = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        let h = find_memory_hierarchy(mi, "0::/user.slice/session-1.scope\n", |_| true).unwrap();
        assert_eq!(h.version, CgroupVersion::V2);
        assert_eq!(h.current_dir(), PathBuf::from("/sys/fs/cgroup/user.slice/session-1.scope"));
        assert!(find_memory_hierarchy(mi, "0::/\n", |_| false).is_none());
    }

    #[test]
    fn stale_cgroup_names() {
        assert_eq!(owner_pid("cacheless-bench-1234-0"), Some(1234));
        assert_eq!(owner_pid("cacheless-bench-x-0"), None);
        assert_eq!(owner_pid("user.slice"), None);
    }

    #[test]
    fn parses_memory_stat_v1_sample() {
        let s = parse_memory_stat(include_str!("../tests/data/memory_stat_v1.txt"), CgroupVersion::V1);
        assert_eq!(s.cache, 195182592);
        assert_eq!(s.dirty, 286720);
        assert_eq!(s.writeback, 0);
        assert!(s.reclaim.is_none());
    }

    #[test]
    fn parses_memory_stat_v2_sample() {
        let s = parse_memory_stat(include_str!("../tests/data/memory_stat_v2.txt"), CgroupVersion::V2);
        assert_eq!(s.cache, 1073741824);
        assert_eq!(s.dirty, 8192);
        assert_eq!(s.writeback, 4096);
        let r = s.reclaim.unwrap();
        assert_eq!(r.pgscan_kswapd, 0);
        assert_eq!(r.pgscan_direct, 524288);
        assert_eq!(r.pgsteal_direct, 262144);
        assert_eq!(r.pgscan_total, 524288);
        assert_eq!(r.pgsteal_total, 262144);
    }
}
