//! Parsers for the /proc files the benchmark samples: /proc/vmstat (reclaim), /proc/meminfo (page cache),
//! `/proc/<pid>/stat` (CPU time of the workload and of kswapd), key-value files such as a cgroup's
//! memory.stat, and /proc/self/mountinfo (file system type, cgroup mounts).
//!
//! Written by hand: the `procfs` crate would add a large dependency for five trivial formats, and the parsers
//! take `&str` so that tests can feed them captured samples.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{read_text, Error, Result};

/// Clock ticks per second in `/proc/<pid>/stat`. The kernel exports times in USER_HZ, which is 100 on every
/// architecture Linux supports today.
pub const USER_HZ: f64 = 100.0;

/// Parses a file of `key value` lines (/proc/vmstat, cgroup memory.stat). Lines that do not end in a number
/// are skipped.
pub fn parse_key_values(text: &str) -> BTreeMap<String, u64> {
    let mut map = BTreeMap::new();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        if let (Some(k), Some(v)) = (it.next(), it.next()) {
            if let Ok(v) = v.parse::<u64>() {
                map.insert(k.to_string(), v);
            }
        }
    }
    map
}

/// Reclaim counters in pages, as /proc/vmstat or a cgroup v2 memory.stat reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reclaim {
    /// Pages scanned by kswapd (`pgscan_kswapd`).
    pub pgscan_kswapd: u64,
    /// Pages scanned by direct reclaim in the allocating task (`pgscan_direct`).
    pub pgscan_direct: u64,
    /// Pages reclaimed by kswapd (`pgsteal_kswapd`).
    pub pgsteal_kswapd: u64,
    /// Pages reclaimed by direct reclaim (`pgsteal_direct`).
    pub pgsteal_direct: u64,
    /// All pages scanned, memory-cgroup limit reclaim included (`pgscan_anon + pgscan_file`; /proc/vmstat
    /// leaves cgroup reclaim out of `pgscan_kswapd`/`pgscan_direct`, but counts it here).
    pub pgscan_total: u64,
    /// All pages reclaimed, memory-cgroup limit reclaim included (`pgsteal_anon + pgsteal_file`).
    pub pgsteal_total: u64,
    /// Allocations that stalled in direct reclaim, all zones (`allocstall_*`, or `allocstall` before
    /// Linux 4.10); 0 in a cgroup's memory.stat, which has no such counter.
    #[serde(default)]
    pub allocstall: u64,
}

impl Reclaim {
    /// Picks the reclaim counters out of a parsed vmstat or memory.stat. Missing keys count as 0. When the
    /// anon/file split is absent (kernels before 5.8, cgroup v2 memory.stat), the totals are kswapd + direct.
    pub fn from_map(m: &BTreeMap<String, u64>) -> Reclaim {
        let g = |k: &str| m.get(k).copied().unwrap_or(0);
        let mut r = Reclaim {
            pgscan_kswapd: g("pgscan_kswapd"),
            pgscan_direct: g("pgscan_direct"),
            pgsteal_kswapd: g("pgsteal_kswapd"),
            pgsteal_direct: g("pgsteal_direct"),
            pgscan_total: g("pgscan_anon") + g("pgscan_file"),
            pgsteal_total: g("pgsteal_anon") + g("pgsteal_file"),
            allocstall: m.iter().filter(|(k, _)| k.as_str() == "allocstall" || k.starts_with("allocstall_")).map(|(_, v)| *v).sum(),
        };
        if !m.contains_key("pgscan_file") {
            r.pgscan_total = m.get("pgscan").copied().unwrap_or(r.pgscan_kswapd + r.pgscan_direct);
        }
        if !m.contains_key("pgsteal_file") {
            r.pgsteal_total = m.get("pgsteal").copied().unwrap_or(r.pgsteal_kswapd + r.pgsteal_direct);
        }
        r
    }

    /// Counters accumulated since `earlier` (saturating, so a counter reset gives 0, not a panic).
    pub fn since(&self, earlier: &Reclaim) -> Reclaim {
        Reclaim {
            pgscan_kswapd: self.pgscan_kswapd.saturating_sub(earlier.pgscan_kswapd),
            pgscan_direct: self.pgscan_direct.saturating_sub(earlier.pgscan_direct),
            pgsteal_kswapd: self.pgsteal_kswapd.saturating_sub(earlier.pgsteal_kswapd),
            pgsteal_direct: self.pgsteal_direct.saturating_sub(earlier.pgsteal_direct),
            pgscan_total: self.pgscan_total.saturating_sub(earlier.pgscan_total),
            pgsteal_total: self.pgsteal_total.saturating_sub(earlier.pgsteal_total),
            allocstall: self.allocstall.saturating_sub(earlier.allocstall),
        }
    }
}

/// Reads the reclaim counters from /proc/vmstat.
pub fn read_vmstat() -> Result<Reclaim> {
    Ok(Reclaim::from_map(&read_vmstat_map()?))
}

/// Reads every /proc/vmstat counter.
pub fn read_vmstat_map() -> Result<BTreeMap<String, u64>> {
    Ok(parse_key_values(&read_text("/proc/vmstat")?))
}

/// How many times anything wrote /proc/sys/vm/drop_caches (`drop_pagecache` in /proc/vmstat).
pub fn drop_pagecache_count(vmstat: &BTreeMap<String, u64>) -> u64 {
    vmstat.get("drop_pagecache").copied().unwrap_or(0)
}

/// The page-cache figures of /proc/meminfo, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemInfo {
    /// `MemTotal`.
    pub total: u64,
    /// `MemAvailable`.
    pub available: u64,
    /// `Cached`: the page cache, shmem included.
    pub cached: u64,
    /// `Dirty`: cached pages not yet written back.
    pub dirty: u64,
    /// `Writeback`: pages being written back now.
    pub writeback: u64,
}

/// Parses /proc/meminfo (`Key:   123 kB` lines).
pub fn parse_meminfo(text: &str) -> Result<MemInfo> {
    let mut m = MemInfo::default();
    let mut seen = 0;
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let mut it = rest.split_whitespace();
        let Some(Ok(v)) = it.next().map(str::parse::<u64>) else {
            continue;
        };
        let v = if it.next() == Some("kB") { v * 1024 } else { v };
        let slot = match key {
            "MemTotal" => &mut m.total,
            "MemAvailable" => &mut m.available,
            "Cached" => &mut m.cached,
            "Dirty" => &mut m.dirty,
            "Writeback" => &mut m.writeback,
            _ => continue,
        };
        *slot = v;
        seen += 1;
    }
    if seen < 5 {
        return Err(Error::Parse { path: "/proc/meminfo".into(), what: "missing MemTotal, MemAvailable, Cached, Dirty or Writeback".into() });
    }
    Ok(m)
}

/// Reads /proc/meminfo.
pub fn read_meminfo() -> Result<MemInfo> {
    parse_meminfo(&read_text("/proc/meminfo")?)
}

/// Total size in bytes of the active swap areas listed in a /proc/swaps text (header line, then one line
/// per area: `Filename Type Size(KiB) Used Priority`).
pub fn parse_swaps(text: &str) -> u64 {
    text.lines().skip(1).filter_map(|l| l.split_whitespace().nth(2)?.parse::<u64>().ok()).map(|kib| kib.saturating_mul(1024)).sum()
}

/// Total size of the active swap areas (/proc/swaps); 0 when there is none or the file cannot be read.
pub fn swap_bytes() -> u64 {
    std::fs::read_to_string("/proc/swaps").map(|t| parse_swaps(&t)).unwrap_or(0)
}

/// CPU time in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuTime {
    /// User-mode seconds.
    pub user_s: f64,
    /// Kernel-mode seconds.
    pub sys_s: f64,
}

impl CpuTime {
    /// Time used since `earlier`.
    pub fn since(&self, earlier: &CpuTime) -> CpuTime {
        CpuTime { user_s: (self.user_s - earlier.user_s).max(0.0), sys_s: (self.sys_s - earlier.sys_s).max(0.0) }
    }

    /// User + sys.
    pub fn total_s(&self) -> f64 {
        self.user_s + self.sys_s
    }
}

/// A task's command name and CPU time, from `/proc/<pid>/stat`.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskStat {
    /// The command name (between the parentheses; it may itself contain spaces and parentheses).
    pub comm: String,
    /// utime and stime (fields 14 and 15), in seconds. For a process these cover all its threads, the
    /// io_uring workers included.
    pub cpu: CpuTime,
}

/// Parses one `/proc/<pid>/stat` line.
pub fn parse_task_stat(text: &str) -> Option<TaskStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    // After ") " come field 3 (state) onwards: utime is field 14, stime field 15.
    let fields: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(TaskStat { comm, cpu: CpuTime { user_s: utime as f64 / USER_HZ, sys_s: stime as f64 / USER_HZ } })
}

/// Reads `/proc/<pid>/stat`, or /proc/self/stat when `pid` is `None`.
pub fn read_task_stat(pid: Option<u32>) -> Result<TaskStat> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/stat"),
        None => "/proc/self/stat".to_string(),
    };
    let text = read_text(&path)?;
    parse_task_stat(&text).ok_or_else(|| Error::Parse { path: path.into(), what: "unexpected /proc/<pid>/stat format".into() })
}

/// CPU time of this process (all threads, io_uring workers included).
pub fn self_cpu() -> Result<CpuTime> {
    Ok(read_task_stat(None)?.cpu)
}

/// Process ids of the kswapd kernel threads (one per NUMA node), found by their command name.
pub fn kswapd_pids() -> Vec<u32> {
    let mut pids = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Ok(comm) = std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("comm")) {
            if is_kswapd(comm.trim()) {
                pids.push(pid);
            }
        }
    }
    pids.sort_unstable();
    pids
}

/// Whether a command name is a kswapd thread's (`kswapd0`, `kswapd1`, ...).
pub fn is_kswapd(comm: &str) -> bool {
    comm.strip_prefix("kswapd").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Total CPU time of the given kswapd threads. Threads that vanished are skipped.
pub fn kswapd_cpu(pids: &[u32]) -> CpuTime {
    let mut t = CpuTime::default();
    for &p in pids {
        if let Ok(s) = read_task_stat(Some(p)) {
            t.user_s += s.cpu.user_s;
            t.sys_s += s.cpu.sys_s;
        }
    }
    t
}

/// The fields of one /proc/self/mountinfo line that the benchmark uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry<'a> {
    /// The mount point (field 5), with mountinfo's octal escapes undone.
    pub mount_point: PathBuf,
    /// The file system type (the first field after ` - `).
    pub fs_type: &'a str,
    /// The super-block options (the third field after ` - `; empty when absent).
    pub super_options: &'a str,
}

/// Parses /proc/self/mountinfo, skipping lines without a mount point or file system type.
pub fn parse_mountinfo(text: &str) -> impl Iterator<Item = MountEntry<'_>> {
    text.lines().filter_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mount = left.split_whitespace().nth(4)?;
        let mut right = right.split_whitespace();
        let fs_type = right.next()?;
        Some(MountEntry { mount_point: PathBuf::from(unescape_mount(mount)), fs_type, super_options: right.nth(1).unwrap_or("") })
    })
}

/// mountinfo escapes space, tab, newline and backslash as octal `\040` etc.
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_captured_meminfo() {
        let m = parse_meminfo(include_str!("../tests/data/meminfo.txt")).unwrap();
        assert_eq!(m.total, 24684096 * 1024);
        assert_eq!(m.available, 24357936 * 1024);
        assert_eq!(m.cached, 178664 * 1024);
        assert_eq!(m.dirty, 232 * 1024);
        assert_eq!(m.writeback, 0);
    }

    #[test]
    fn meminfo_without_fields_is_an_error() {
        assert!(parse_meminfo("MemTotal: 1 kB\n").is_err());
    }

    #[test]
    fn parses_captured_vmstat() {
        let m = parse_key_values(include_str!("../tests/data/vmstat.txt"));
        assert!(m.len() > 150, "{} keys", m.len());
        assert_eq!(m["nr_free_pages"], 1085751);
        assert_eq!(Reclaim::from_map(&m), Reclaim::default());
        assert_eq!(drop_pagecache_count(&m), 1);
        assert_eq!(drop_pagecache_count(&BTreeMap::new()), 0);
    }

    #[test]
    fn reclaim_totals_and_deltas() {
        let before = Reclaim::from_map(&parse_key_values(
            "pgscan_kswapd 10\npgscan_direct 5\npgsteal_kswapd 8\npgsteal_direct 4\n\
             pgscan_anon 1\npgscan_file 100\npgsteal_anon 0\npgsteal_file 90\n",
        ));
        assert_eq!(before.pgscan_total, 101);
        assert_eq!(before.pgsteal_total, 90);
        let after = Reclaim::from_map(&parse_key_values(
            "pgscan_kswapd 1010\npgscan_direct 5\npgsteal_kswapd 908\npgsteal_direct 4\n\
             pgscan_anon 1\npgscan_file 5100\npgsteal_anon 0\npgsteal_file 4090\n",
        ));
        let d = after.since(&before);
        assert_eq!(d.pgscan_kswapd, 1000);
        assert_eq!(d.pgsteal_kswapd, 900);
        assert_eq!(d.pgscan_direct, 0);
        // cgroup limit reclaim shows only in the anon/file totals.
        assert_eq!(d.pgscan_total, 5000);
        assert_eq!(d.pgsteal_total, 4000);
        assert_eq!(before.since(&after), Reclaim::default());
    }

    #[test]
    fn allocation_stalls_are_summed_over_zones() {
        let r = Reclaim::from_map(&parse_key_values("allocstall_dma 1\nallocstall_dma32 2\nallocstall_normal 30\nallocstall_movable 400\npgscan_kswapd 9\n"));
        assert_eq!(r.allocstall, 433);
        assert_eq!(Reclaim::from_map(&parse_key_values("allocstall 7\n")).allocstall, 7);
        assert_eq!(Reclaim::from_map(&parse_key_values(include_str!("../tests/data/vmstat.txt"))).allocstall, 0);
    }

    #[test]
    fn swap_areas_add_up() {
        assert_eq!(parse_swaps("Filename\tType\tSize\tUsed\tPriority\n"), 0);
        let t = "Filename Type Size Used Priority\n/swapfile file 1048572 0 -2\n/dev/vdb2 partition 2048 0 -3\n";
        assert_eq!(parse_swaps(t), (1048572 + 2048) * 1024);
    }

    #[test]
    fn parses_captured_task_stat() {
        let k = parse_task_stat(include_str!("../tests/data/kswapd_stat.txt")).unwrap();
        assert_eq!(k.comm, "kswapd0");
        assert!(is_kswapd(&k.comm));
        let s = parse_task_stat(include_str!("../tests/data/self_stat.txt")).unwrap();
        assert_eq!(s.comm, "cat");
        assert!(!is_kswapd(&s.comm));
        assert_eq!(s.cpu, CpuTime::default());
    }

    #[test]
    fn task_stat_with_odd_comm_and_times() {
        let line = "77 (a) b (c) S 2 0 0 0 -1 2230336 0 0 0 0 250 1234 0 0 20 0 1 0 39 0 0";
        let t = parse_task_stat(line).unwrap();
        assert_eq!(t.comm, "a) b (c");
        assert_eq!(t.cpu.user_s, 2.5);
        assert_eq!(t.cpu.sys_s, 12.34);
        assert!(parse_task_stat("12 (x) S 1 2").is_none());
    }

    #[test]
    fn kswapd_names() {
        assert!(is_kswapd("kswapd0"));
        assert!(is_kswapd("kswapd12"));
        assert!(!is_kswapd("kswapd"));
        assert!(!is_kswapd("kswapd0x"));
        assert!(!is_kswapd("kcompactd0"));
    }

    #[test]
    fn unescapes_mount_points() {
        assert_eq!(unescape_mount(r"/mnt/a\040b"), "/mnt/a b");
        assert_eq!(unescape_mount("/plain"), "/plain");
    }

    #[test]
    fn live_proc_reads() {
        assert!(read_meminfo().unwrap().total > 0);
        read_vmstat().unwrap();
        self_cpu().unwrap();
        // Every Linux with memory has at least one kswapd thread; its CPU is readable.
        let pids = kswapd_pids();
        assert!(!pids.is_empty());
        let _ = kswapd_cpu(&pids);
    }
}
