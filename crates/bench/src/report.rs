//! What a benchmark run reports: the JSON schema (`cacheless-bench/1`, documented in docs/bench-json.md) and
//! the summaries computed from the trials. The render module turns it into the table, sentences and CSV.

use serde::{Deserialize, Serialize};

use crate::procfs::{CpuTime, Reclaim};
use crate::stats::{by_position, cov, median, position_effect, PositionEffect, Spread};
use crate::units::human_bytes;

/// The schema name written in every JSON report. Fields may be added within a version; none is removed or
/// renamed without changing it.
pub const SCHEMA: &str = "cacheless-bench/1";

const MIB: f64 = 1024.0 * 1024.0;
const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// A whole benchmark run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchReport {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// Version of cacheless that ran it.
    pub version: String,
    /// The options of the run.
    pub config: ConfigReport,
    /// The machine it ran on.
    pub system: SystemReport,
    /// One entry per mode, in the order given.
    pub modes: Vec<ModeReport>,
    /// fio's figures for the same job (`--vs-fio`), one per fio-capable mode.
    #[serde(default)]
    pub fio: Vec<FioReport>,
}

/// The options a run used.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConfigReport {
    /// `read`, `write`, `randread` or `copy`.
    pub rw: String,
    /// Number of files.
    pub files: usize,
    /// Size of each file in bytes.
    pub file_size: u64,
    /// Worker threads.
    pub threads: usize,
    /// I/O request size in bytes.
    pub block_size: u64,
    /// Requests in flight per file.
    pub queue_depth: u32,
    /// Engine backend asked for (`auto`, `uring`, `threads`).
    pub backend: String,
    /// Modes, in the order given (the order of the first round).
    pub modes: Vec<String>,
    /// Rounds of interleaved trials.
    pub runs: u32,
    /// The order of the trials in each round (mode names, `fio <mode>` for fio's): a balanced Latin square,
    /// so that every kind of trial runs in every position equally often over a full square.
    #[serde(default)]
    pub schedule: Vec<Vec<String>>,
    /// `normal`, `low-memory`, `pressure` or `neighbour`.
    pub scenario: String,
    /// Memory cgroup limit in bytes (low-memory scenario).
    pub memory_limit: Option<u64>,
    /// Bytes left available machine-wide during each trial (pressure scenario, `--free`).
    #[serde(default)]
    pub free: Option<u64>,
    /// Size of the co-tenant's hot file in bytes (neighbour scenario, `--hot-size`).
    #[serde(default)]
    pub hot_size: Option<u64>,
    /// The co-tenant's hot file (neighbour scenario).
    #[serde(default)]
    pub hot_file: Option<String>,
    /// Whether caches were dropped system-wide before each trial.
    pub drop_caches: bool,
    /// Directory holding the files.
    pub dir: String,
}

impl ConfigReport {
    /// `read x 2 file(s) of 1.0 GiB, 2 thread(s), bs 4.0 MiB`: the workload in one phrase.
    pub fn workload(&self) -> String {
        format!(
            "{} x {} file(s) of {}, {} thread(s), bs {}",
            self.rw,
            self.files,
            human_bytes(self.file_size as f64),
            self.threads,
            human_bytes(self.block_size as f64)
        )
    }

    /// ` (limit 1.0 GiB)` in the low-memory scenario, ` (1.0 GiB left free)` under pressure, ` (hot set
    /// 1.0 GiB)` with a neighbour, else empty: the end of a one-line description.
    pub fn limit_note(&self) -> String {
        let limit = self.memory_limit.map(|l| format!(" (limit {})", human_bytes(l as f64)));
        let free = self.free.map(|f| format!(" ({} left free)", human_bytes(f as f64)));
        let hot = self.hot_size.map(|h| format!(" (hot set {})", human_bytes(h as f64)));
        limit.or(free).or(hot).unwrap_or_default()
    }
}

/// The machine.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SystemReport {
    /// `uname -r`.
    pub kernel: String,
    /// Online CPUs.
    pub cpus: usize,
    /// MemTotal in bytes.
    pub mem_total: u64,
    /// File system type of the benchmark directory, when known.
    pub fs_type: Option<String>,
    /// Memory cgroup version used by the low-memory scenario (`v1`, `v2`).
    pub cgroup: Option<String>,
    /// Total size of the active swap areas (/proc/swaps) in bytes; with swap, memory held by the pressure
    /// scenario may be swapped out unless it was locked (`pressure.locked` of each trial).
    #[serde(default)]
    pub swap_bytes: u64,
}

/// One mode: its trials and their summary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModeReport {
    /// The mode asked for (`buffered`, `direct`, `dontcache`, `writebehind`, `auto`).
    pub mode: String,
    /// What the engine chose per file and why, from the first trial (e.g. `direct: file not cached`).
    pub decisions: Vec<String>,
    /// Medians over the trials, with min and max.
    pub summary: ModeSummary,
    /// Every trial, in the order run.
    pub runs: Vec<TrialReport>,
}

/// Medians over a mode's trials.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ModeSummary {
    /// Throughput in MiB/s (bytes / wall time).
    pub mib_s: Spread,
    /// Median throughput against buffered's, in percent (`+12.5` = 12.5 % faster); absent without buffered.
    pub diff_vs_buffered_pct: Option<f64>,
    /// Workload CPU (user + sys) seconds per GiB moved.
    pub cpu_s_per_gib: Spread,
    /// Workload user seconds per GiB (median).
    pub user_s_per_gib: f64,
    /// Workload sys seconds per GiB (median).
    pub sys_s_per_gib: f64,
    /// kswapd CPU seconds during the trial.
    pub kswapd_cpu_s: Spread,
    /// Coefficient of variation of the per-second throughput.
    pub series_cov: Spread,
    /// Page-cache growth in bytes from start to end of the trial.
    pub cache_growth_bytes: Spread,
    /// Highest page-cache growth seen during the trial, in bytes.
    pub cache_peak_growth_bytes: Spread,
    /// Highest Dirty + Writeback seen during the trial, in bytes.
    pub peak_dirty_writeback_bytes: Spread,
    /// Bytes of the benchmark's files resident in the page cache at the end.
    pub files_resident_bytes: Spread,
    /// Pages scanned by reclaim (all kinds, cgroup limit reclaim included).
    pub pgscan_total: Spread,
    /// Pages reclaimed (all kinds).
    pub pgsteal_total: Spread,
    /// Pages scanned by kswapd.
    #[serde(default)]
    pub pgscan_kswapd: Spread,
    /// Pages scanned by direct reclaim.
    #[serde(default)]
    pub pgscan_direct: Spread,
    /// Pages reclaimed by kswapd.
    #[serde(default)]
    pub pgsteal_kswapd: Spread,
    /// Pages reclaimed by direct reclaim.
    #[serde(default)]
    pub pgsteal_direct: Spread,
    /// Allocations that stalled in direct reclaim.
    #[serde(default)]
    pub allocstall: Spread,
    /// Bytes the pressure scenario's helper held during the trials.
    #[serde(default)]
    pub pressure_held_bytes: Option<Spread>,
    /// The co-tenant's throughput during the trials, MiB/s (neighbour scenario).
    #[serde(default)]
    pub neighbour_mib_s: Option<Spread>,
    /// Share of the co-tenant's cached hot set that was evicted by the end of the trials (neighbour scenario).
    #[serde(default)]
    pub neighbour_evicted_fraction: Option<Spread>,
    /// Median throughput of the trials run at each position of the round (element 0: first), `None` where
    /// none ran there.
    #[serde(default)]
    pub mib_s_by_position: Vec<Option<f64>>,
    /// Set when those medians disagree beyond the run-to-run noise: the trial order, not the mode, moved
    /// the figures.
    #[serde(default)]
    pub position_effect: Option<PositionEffect>,
}

/// The per-interval throughput of a trial.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Series {
    /// Length of each interval in seconds (1 for trials of 5 s or more, else 0.1).
    pub interval_s: f64,
    /// MiB/s of each complete interval.
    pub mib_s: Vec<f64>,
    /// Smallest, median and largest interval figure.
    pub spread: Spread,
    /// Coefficient of variation (population standard deviation / mean).
    pub cov: f64,
}

impl Series {
    /// A series from its interval figures.
    pub fn new(interval_s: f64, mib_s: Vec<f64>) -> Series {
        Series { interval_s, spread: Spread::of(&mib_s), cov: cov(&mib_s), mib_s }
    }
}

/// Page-cache figures of a trial, in bytes.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct CacheReport {
    /// `meminfo` (system-wide Cached) or `cgroup` (the cgroup's page cache).
    pub source: CacheSource,
    /// Page cache when the clock started.
    pub start_bytes: u64,
    /// Page cache when the clock stopped.
    pub end_bytes: u64,
    /// `end - start` (negative when the trial freed cache).
    pub growth_bytes: i64,
    /// Highest value seen minus start.
    pub peak_growth_bytes: i64,
    /// Highest Dirty + Writeback seen.
    pub peak_dirty_writeback_bytes: u64,
    /// Dirty + Writeback when the clock started (after the wait for writeback before each trial).
    #[serde(default)]
    pub start_dirty_writeback_bytes: u64,
}

/// Where page-cache figures come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheSource {
    /// /proc/meminfo `Cached`, `Dirty`, `Writeback`.
    #[default]
    Meminfo,
    /// The memory cgroup's memory.stat.
    Cgroup,
}

/// The pressure scenario's side of a trial: what its helper held.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct PressureReport {
    /// Process id of the helper that held the memory (gone when the trial ended).
    pub holder_pid: u32,
    /// MemAvailable measured after the cold start, before the helper grew.
    pub mem_available_before_bytes: u64,
    /// What the helper was asked to hold: that MemAvailable minus `--free`.
    pub target_bytes: u64,
    /// Anonymous memory the helper touched and held through the trial (less than the target when
    /// MemAvailable fell under `--free` while it grew: something else was allocating).
    pub held_bytes: u64,
    /// Whether the held memory was locked (mlockall). Unlocked memory stays held without swap.
    pub locked: bool,
    /// MemAvailable when the clock started.
    pub mem_available_start_bytes: u64,
    /// Seconds waited after the helper grew for kswapd to go idle (part of `settle_s`).
    pub settle_s: f64,
    /// The helper was gone before the trial ended (killed by the OOM killer, or by another program): the
    /// pressure did not last the whole trial.
    pub holder_lost: bool,
}

/// The neighbour scenario's side of a trial: how the co-tenant fared.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct NeighbourReport {
    /// Process id of the co-tenant (gone when the trial ended).
    pub pid: u32,
    /// Size of the hot file, rounded up to whole pages.
    pub hot_bytes: u64,
    /// Bytes of the hot file resident when the clock started (the co-tenant read it all first).
    pub resident_start_bytes: u64,
    /// Bytes of the hot file resident when the clock stopped.
    pub resident_end_bytes: u64,
    /// `(resident_start - resident_end) / resident_start`, in [0, 1]: the share of the cached hot set that
    /// was gone at the end (pages the co-tenant read back in during the trial count as kept).
    pub evicted_fraction: f64,
    /// Bytes the co-tenant read (buffered, 1 MiB at a time, round and round the hot file) while the clock
    /// ran.
    pub bytes: u64,
    /// Seconds between its two counter readings around the trial.
    pub seconds: f64,
    /// `bytes / seconds` in MiB/s.
    pub mib_s: f64,
    /// Bytes the co-tenant had to fetch from storage during the trial (`read_bytes` of its `/proc/<pid>/io`):
    /// with its set fully cached at the start, every one was evicted by the trial. `None` without task I/O
    /// accounting.
    pub disk_read_bytes: Option<u64>,
}

/// One timed trial of one mode.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TrialReport {
    /// Round number, from 1.
    pub run: u32,
    /// Place of this trial in its round, from 1 (fio's trials count too).
    #[serde(default)]
    pub position: u32,
    /// Seconds spent before the clock started waiting for writeback to finish and kswapd to go idle.
    #[serde(default)]
    pub settle_s: f64,
    /// Bytes the workload moved (read, or written; a copy counts the bytes copied).
    pub bytes: u64,
    /// Wall time from start to the last byte (durable for writes) in seconds.
    pub seconds: f64,
    /// `bytes / seconds` in MiB/s.
    pub mib_s: f64,
    /// Per-interval throughput.
    pub series: Series,
    /// CPU of the kswapd threads in each interval of `series`, in percent of one CPU (all kswapd threads
    /// together; sampled with throughput every 100 ms, with the kernel's 10 ms resolution).
    #[serde(default)]
    pub kswapd_cpu_pct_series: Vec<f64>,
    /// Lowest MemAvailable seen while the clock ran (sampled every 100 ms; at start and end only in the
    /// low-memory scenario).
    #[serde(default)]
    pub mem_available_min_bytes: u64,
    /// CPU time of the benchmark process (all threads, io_uring workers included) during the trial.
    pub cpu: CpuTime,
    /// `(user + sys) / GiB`.
    pub cpu_s_per_gib: f64,
    /// CPU time of the kswapd threads during the trial (user + sys seconds).
    pub kswapd_cpu_s: f64,
    /// /proc/vmstat reclaim deltas, in pages.
    pub reclaim: Reclaim,
    /// The cgroup's own reclaim deltas (cgroup v2 only), in pages.
    pub cgroup_reclaim: Option<Reclaim>,
    /// Page-cache figures (the cgroup's in the low-memory scenario).
    pub cache: CacheReport,
    /// System-wide Cached growth, also in the low-memory scenario.
    pub system_cache_growth_bytes: i64,
    /// Resident bytes of the files read, checked before the clock started (0 = cold).
    pub files_resident_start_bytes: u64,
    /// Resident bytes of the files the trial read or wrote, when it ended (cachestat, else mincore).
    pub files_resident_end_bytes: u64,
    /// Total size of those files.
    pub files_total_bytes: u64,
    /// Highest memory charge of the cgroup (low-memory scenario).
    pub cgroup_peak_bytes: Option<u64>,
    /// How many times another program dropped the caches (wrote /proc/sys/vm/drop_caches) while the clock
    /// ran: a trial with a non-zero figure was disturbed and its cache figures are not its own.
    #[serde(default)]
    pub caches_dropped_during: u64,
    /// What the pressure scenario held (pressure scenario only).
    #[serde(default)]
    pub pressure: Option<PressureReport>,
    /// How the co-tenant fared (neighbour scenario only).
    #[serde(default)]
    pub neighbour: Option<NeighbourReport>,
}

impl TrialReport {
    /// Fills `mib_s` and `cpu_s_per_gib` from bytes, seconds and CPU.
    pub fn finish_rates(&mut self) {
        self.mib_s = if self.seconds > 0.0 { self.bytes as f64 / MIB / self.seconds } else { 0.0 };
        let gib = self.bytes as f64 / GIB;
        self.cpu_s_per_gib = if gib > 0.0 { self.cpu.total_s() / gib } else { 0.0 };
    }
}

/// fio's result for one mode.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FioReport {
    /// `buffered` or `direct`.
    pub mode: String,
    /// The fio command line.
    pub command: String,
    /// fio's bandwidth of each run, MiB/s.
    pub runs_mib_s: Vec<f64>,
    /// The place of each of those runs in its round, from 1.
    #[serde(default)]
    pub runs_position: Vec<u32>,
    /// Their spread.
    pub mib_s: Spread,
    /// Median bandwidth at each position of the round (element 0: first), `None` where none ran there.
    #[serde(default)]
    pub mib_s_by_position: Vec<Option<f64>>,
    /// Set when those medians disagree beyond the run-to-run noise.
    #[serde(default)]
    pub position_effect: Option<PositionEffect>,
    /// Our median for the same mode, MiB/s.
    pub ours_mib_s: Option<f64>,
    /// `ours / fio - 1` in percent.
    pub ours_vs_fio_pct: Option<f64>,
}

impl ModeReport {
    /// Builds the summary from the trials (the diff against buffered and the per-position figures are
    /// filled by [`BenchReport::finish`]).
    pub fn summarize(mode: String, decisions: Vec<String>, runs: Vec<TrialReport>) -> ModeReport {
        let col = |f: &dyn Fn(&TrialReport) -> f64| Spread::of(&runs.iter().map(f).collect::<Vec<_>>());
        let gib = |t: &TrialReport| (t.bytes as f64 / GIB).max(f64::MIN_POSITIVE);
        // A scenario's figure over the trials that have it, `None` when none has.
        let some = |f: &dyn Fn(&TrialReport) -> Option<f64>| {
            let v: Vec<f64> = runs.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| Spread::of(&v))
        };
        let summary = ModeSummary {
            mib_s: col(&|t| t.mib_s),
            diff_vs_buffered_pct: None,
            cpu_s_per_gib: col(&|t| t.cpu_s_per_gib),
            user_s_per_gib: median(&runs.iter().map(|t| t.cpu.user_s / gib(t)).collect::<Vec<_>>()),
            sys_s_per_gib: median(&runs.iter().map(|t| t.cpu.sys_s / gib(t)).collect::<Vec<_>>()),
            kswapd_cpu_s: col(&|t| t.kswapd_cpu_s),
            series_cov: col(&|t| t.series.cov),
            cache_growth_bytes: col(&|t| t.cache.growth_bytes as f64),
            cache_peak_growth_bytes: col(&|t| t.cache.peak_growth_bytes as f64),
            peak_dirty_writeback_bytes: col(&|t| t.cache.peak_dirty_writeback_bytes as f64),
            files_resident_bytes: col(&|t| t.files_resident_end_bytes as f64),
            pgscan_total: col(&|t| t.reclaim.pgscan_total as f64),
            pgsteal_total: col(&|t| t.reclaim.pgsteal_total as f64),
            pgscan_kswapd: col(&|t| t.reclaim.pgscan_kswapd as f64),
            pgscan_direct: col(&|t| t.reclaim.pgscan_direct as f64),
            pgsteal_kswapd: col(&|t| t.reclaim.pgsteal_kswapd as f64),
            pgsteal_direct: col(&|t| t.reclaim.pgsteal_direct as f64),
            allocstall: col(&|t| t.reclaim.allocstall as f64),
            pressure_held_bytes: some(&|t| t.pressure.map(|p| p.held_bytes as f64)),
            neighbour_mib_s: some(&|t| t.neighbour.map(|n| n.mib_s)),
            neighbour_evicted_fraction: some(&|t| t.neighbour.map(|n| n.evicted_fraction)),
            mib_s_by_position: Vec::new(),
            position_effect: None,
        };
        ModeReport { mode, decisions, summary, runs }
    }

    /// The run whose throughput is closest to the median (for plots).
    pub fn representative(&self) -> Option<&TrialReport> {
        let v: Vec<f64> = self.runs.iter().map(|t| t.mib_s).collect();
        crate::stats::median_index(&v).map(|i| &self.runs[i])
    }
}

impl BenchReport {
    /// The number of positions in a round: the kinds of trial compared.
    pub fn positions(&self) -> usize {
        let most = self.modes.iter().flat_map(|m| &m.runs).map(|t| t.position);
        let fio = self.fio.iter().flat_map(|f| f.runs_position.iter().copied());
        let seen = most.chain(fio).max().unwrap_or(0) as usize;
        self.config.schedule.first().map_or(seen, |r| r.len().max(seen))
    }

    /// Fills the diffs against buffered, the fio comparisons and the per-position figures.
    pub fn finish(&mut self) {
        let positions = self.positions();
        for m in &mut self.modes {
            let t: Vec<(u32, f64)> = m.runs.iter().map(|t| (t.position, t.mib_s)).collect();
            m.summary.mib_s_by_position = by_position(&t, positions);
            m.summary.position_effect = position_effect(&t);
        }
        for f in &mut self.fio {
            let t: Vec<(u32, f64)> = f.runs_position.iter().copied().zip(f.runs_mib_s.iter().copied()).collect();
            f.mib_s_by_position = by_position(&t, positions);
            f.position_effect = position_effect(&t);
        }
        let base = self.modes.iter().find(|m| m.mode == "buffered").map(|m| m.summary.mib_s.median);
        for m in &mut self.modes {
            m.summary.diff_vs_buffered_pct = pct_vs(Some(m.summary.mib_s.median), base);
        }
        for f in &mut self.fio {
            f.ours_mib_s = self.modes.iter().find(|m| m.mode == f.mode).map(|m| m.summary.mib_s.median);
            f.ours_vs_fio_pct = pct_vs(f.ours_mib_s, Some(f.mib_s.median));
        }
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(self)
    }
}

/// `value` against `base` in percent (`+12.5` = 12.5 % more); `None` without both or with a base of 0.
pub(crate) fn pct_vs(value: Option<f64>, base: Option<f64>) -> Option<f64> {
    match (value, base) {
        (Some(v), Some(b)) if b > 0.0 => Some((v / b - 1.0) * 100.0),
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    /// A trial that moved `bytes` in `seconds` with 2 CPU seconds and the given page-cache growth.
    fn trial(run: u32, position: u32, bytes: u64, seconds: f64, growth: i64, series: Vec<f64>) -> TrialReport {
        let mut t = TrialReport {
            run,
            position,
            bytes,
            seconds,
            series: Series::new(1.0, series),
            cpu: CpuTime { user_s: 0.5, sys_s: 1.5 },
            kswapd_cpu_s: 0.25,
            cache: CacheReport {
                source: CacheSource::Meminfo,
                start_bytes: 1 << 20,
                end_bytes: (1 << 20) + u64::try_from(growth).unwrap(),
                growth_bytes: growth,
                peak_growth_bytes: growth,
                peak_dirty_writeback_bytes: 4096,
                start_dirty_writeback_bytes: 0,
            },
            files_total_bytes: bytes,
            ..Default::default()
        };
        t.finish_rates();
        t
    }

    /// A finished report of a read of 2 x 1 GiB with these modes and fio runs.
    fn report_of(modes: Vec<ModeReport>, fio: Vec<FioReport>) -> BenchReport {
        let mut kinds: Vec<String> = modes.iter().map(|m| m.mode.clone()).collect();
        kinds.extend(fio.iter().map(|f| format!("fio {}", f.mode)));
        let runs = modes.iter().map(|m| m.runs.len()).max().unwrap_or(0);
        let mut r = BenchReport {
            schema: SCHEMA.into(),
            version: "0.1.0".into(),
            config: ConfigReport {
                rw: "read".into(),
                files: 2,
                file_size: G,
                threads: 2,
                block_size: 1 << 20,
                queue_depth: 8,
                backend: "auto".into(),
                modes: modes.iter().map(|m| m.mode.clone()).collect(),
                runs: u32::try_from(runs).unwrap(),
                schedule: crate::schedule::schedule(kinds.len(), runs).into_iter().map(|o| o.into_iter().map(|k| kinds[k].clone()).collect()).collect(),
                scenario: "normal".into(),
                memory_limit: None,
                free: None,
                hot_size: None,
                hot_file: None,
                drop_caches: false,
                dir: "/tmp/x".into(),
            },
            system: SystemReport { kernel: "6.18".into(), cpus: 2, mem_total: 24 * G, fs_type: Some("ext4".into()), cgroup: None, swap_bytes: 0 },
            modes,
            fio,
        };
        r.finish();
        r
    }

    /// A report whose modes ran at these MiB/s (one trial per figure, in rounds of a Latin square), with
    /// these CPU seconds per GiB and page-cache growths (per mode, the same in every trial).
    pub(crate) fn synthetic(modes: &[(&str, &[f64], f64, i64)]) -> BenchReport {
        let n = modes.len();
        let modes = modes
            .iter()
            .enumerate()
            .map(|(k, &(name, mib_s, cpu, growth))| {
                let runs = mib_s
                    .iter()
                    .enumerate()
                    .map(|(r, &v)| {
                        let order = crate::schedule::order(n, r);
                        let pos = crate::schedule::ordinal(order.iter().position(|&x| x == k).unwrap_or(0));
                        let mut t = trial(crate::schedule::ordinal(r), pos, 2 * G, 2048.0 / v, growth, vec![v]);
                        t.cpu = CpuTime { user_s: 0.0, sys_s: cpu * 2.0 };
                        t.finish_rates();
                        t
                    })
                    .collect();
                ModeReport::summarize(name.into(), vec![], runs)
            })
            .collect();
        report_of(modes, vec![])
    }

    pub(crate) fn sample_report() -> BenchReport {
        // Three kinds (buffered, direct, fio direct): round 1 runs them in that order, round 2 as
        // direct, fio direct, buffered.
        report_of(
            vec![
                ModeReport::summarize(
                    "buffered".into(),
                    vec![],
                    vec![trial(1, 1, 2 * G, 2.0, 2 << 30, vec![1000.0, 1048.0]), trial(2, 3, 2 * G, 4.0, 2 << 30, vec![500.0, 524.0])],
                ),
                ModeReport::summarize(
                    "direct".into(),
                    vec!["direct: forced".into()],
                    vec![trial(1, 2, 2 * G, 1.0, 0, vec![2048.0]), trial(2, 1, 2 * G, 1.0, 0, vec![2048.0])],
                ),
            ],
            vec![FioReport {
                mode: "direct".into(),
                command: "fio ...".into(),
                runs_mib_s: vec![2000.0, 1900.0],
                runs_position: vec![3, 2],
                mib_s: Spread::of(&[2000.0, 1900.0]),
                mib_s_by_position: vec![],
                position_effect: None,
                ours_mib_s: None,
                ours_vs_fio_pct: None,
            }],
        )
    }

    #[test]
    fn summary_medians_and_diff() {
        let r = sample_report();
        let b = &r.modes[0].summary;
        assert_eq!(r.modes[0].runs[0].mib_s, 1024.0);
        assert_eq!(b.mib_s.median, 768.0);
        assert_eq!(b.mib_s.min, 512.0);
        assert_eq!(b.cpu_s_per_gib.median, 1.0);
        assert_eq!(b.diff_vs_buffered_pct, Some(0.0));
        let d = &r.modes[1].summary;
        assert_eq!(d.mib_s.median, 2048.0);
        assert!((d.diff_vs_buffered_pct.unwrap() - 166.666_666).abs() < 1e-3);
        assert!((r.fio[0].ours_vs_fio_pct.unwrap() - 2048.0 / 1950.0 * 100.0 + 100.0).abs() < 1e-9);
        assert_eq!(r.modes[0].representative().unwrap().run, 1);
        assert_eq!(r.positions(), 3);
        assert_eq!(r.config.schedule, [["buffered", "direct", "fio direct"], ["direct", "fio direct", "buffered"]]);
        assert_eq!(b.mib_s_by_position, [Some(1024.0), None, Some(512.0)]);
        assert_eq!(d.mib_s_by_position, [Some(2048.0), Some(2048.0), None]);
        assert_eq!(r.fio[0].mib_s_by_position, [None, Some(1900.0), Some(2000.0)]);
        // Two trials cannot tell a position effect from noise.
        assert!(b.position_effect.is_none() && r.fio[0].position_effect.is_none());
    }

    #[test]
    fn a_slow_position_is_flagged_in_the_summary() {
        let r = synthetic(&[
            ("buffered", &[1500.0, 1490.0, 1510.0, 1500.0, 1505.0], 1.0, 1 << 30),
            ("direct", &[1000.0, 1500.0, 1510.0, 1490.0, 1520.0], 0.5, 0),
            ("dontcache", &[1400.0, 1410.0, 1405.0, 1395.0, 1400.0], 0.8, 0),
            ("writebehind", &[1300.0; 5], 0.9, 1 << 20),
            ("auto", &[1480.0, 1500.0, 1490.0, 1495.0, 1500.0], 0.5, 0),
        ]);
        let d = &r.modes[1].summary;
        let e = d.position_effect.expect("direct's first round is flagged");
        // Round 1 runs in the given order: direct was second.
        assert_eq!((e.position, e.median), (2, 1000.0));
        assert_eq!(d.mib_s_by_position.iter().filter(|p| p.is_some()).count(), 5);
        // Its JSON keys are documented in docs/bench-json.md.
        let v = serde_json::to_value(e).unwrap();
        let mut k: Vec<&String> = v.as_object().unwrap().keys().collect();
        k.sort();
        assert_eq!(k, ["gap_pct", "median", "others_max", "others_min", "position"]);
        for m in [0, 2, 3, 4] {
            assert!(r.modes[m].summary.position_effect.is_none(), "{}", r.modes[m].mode);
        }
    }

    /// The JSON schema is stable: these keys are documented in docs/bench-json.md and must not change
    /// within `cacheless-bench/1`.
    #[test]
    fn json_schema_is_stable() {
        let v: serde_json::Value = serde_json::from_str(&sample_report().to_json().unwrap()).unwrap();
        let keys = |v: &serde_json::Value| -> Vec<String> {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        assert_eq!(v["schema"], "cacheless-bench/1");
        assert_eq!(keys(&v), ["config", "fio", "modes", "schema", "system", "version"]);
        assert_eq!(
            keys(&v["config"]),
            [
                "backend",
                "block_size",
                "dir",
                "drop_caches",
                "file_size",
                "files",
                "free",
                "hot_file",
                "hot_size",
                "memory_limit",
                "modes",
                "queue_depth",
                "runs",
                "rw",
                "scenario",
                "schedule",
                "threads"
            ]
        );
        assert_eq!(keys(&v["system"]), ["cgroup", "cpus", "fs_type", "kernel", "mem_total", "swap_bytes"]);
        let m = &v["modes"][0];
        assert_eq!(keys(m), ["decisions", "mode", "runs", "summary"]);
        assert_eq!(
            keys(&m["summary"]),
            [
                "allocstall",
                "cache_growth_bytes",
                "cache_peak_growth_bytes",
                "cpu_s_per_gib",
                "diff_vs_buffered_pct",
                "files_resident_bytes",
                "kswapd_cpu_s",
                "mib_s",
                "mib_s_by_position",
                "neighbour_evicted_fraction",
                "neighbour_mib_s",
                "peak_dirty_writeback_bytes",
                "pgscan_direct",
                "pgscan_kswapd",
                "pgscan_total",
                "pgsteal_direct",
                "pgsteal_kswapd",
                "pgsteal_total",
                "position_effect",
                "pressure_held_bytes",
                "series_cov",
                "sys_s_per_gib",
                "user_s_per_gib"
            ]
        );
        assert_eq!(keys(&m["summary"]["mib_s"]), ["max", "median", "min"]);
        let t = &m["runs"][0];
        assert_eq!(
            keys(t),
            [
                "bytes",
                "cache",
                "caches_dropped_during",
                "cgroup_peak_bytes",
                "cgroup_reclaim",
                "cpu",
                "cpu_s_per_gib",
                "files_resident_end_bytes",
                "files_resident_start_bytes",
                "files_total_bytes",
                "kswapd_cpu_pct_series",
                "kswapd_cpu_s",
                "mem_available_min_bytes",
                "mib_s",
                "neighbour",
                "position",
                "pressure",
                "reclaim",
                "run",
                "seconds",
                "series",
                "settle_s",
                "system_cache_growth_bytes"
            ]
        );
        assert_eq!(keys(&t["series"]), ["cov", "interval_s", "mib_s", "spread"]);
        assert_eq!(keys(&t["cpu"]), ["sys_s", "user_s"]);
        assert_eq!(keys(&t["reclaim"]), ["allocstall", "pgscan_direct", "pgscan_kswapd", "pgscan_total", "pgsteal_direct", "pgsteal_kswapd", "pgsteal_total"]);
        // The scenarios' objects, when a trial has them.
        let mut tr = sample_report().modes[0].runs[0].clone();
        tr.pressure = Some(PressureReport::default());
        tr.neighbour = Some(NeighbourReport::default());
        let tv = serde_json::to_value(&tr).unwrap();
        assert_eq!(
            keys(&tv["pressure"]),
            ["held_bytes", "holder_lost", "holder_pid", "locked", "mem_available_before_bytes", "mem_available_start_bytes", "settle_s", "target_bytes"]
        );
        assert_eq!(
            keys(&tv["neighbour"]),
            ["bytes", "disk_read_bytes", "evicted_fraction", "hot_bytes", "mib_s", "pid", "resident_end_bytes", "resident_start_bytes", "seconds"]
        );
        assert_eq!(
            keys(&t["cache"]),
            ["end_bytes", "growth_bytes", "peak_dirty_writeback_bytes", "peak_growth_bytes", "source", "start_bytes", "start_dirty_writeback_bytes"]
        );
        assert_eq!(t["cache"]["source"], "meminfo");
        assert_eq!(
            keys(&v["fio"][0]),
            ["command", "mib_s", "mib_s_by_position", "mode", "ours_mib_s", "ours_vs_fio_pct", "position_effect", "runs_mib_s", "runs_position"]
        );
        // And it reads back.
        let back: BenchReport = serde_json::from_value(v).unwrap();
        assert_eq!(back.modes.len(), 2);
    }
}
