//! What a benchmark run reports: the JSON schema (`cacheless-bench/1`, documented in docs/bench-json.md), the
//! text table and the CSV.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::procfs::{CpuTime, Reclaim};
use crate::stats::{cov, median, Spread};

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
    /// Modes, in the order they ran within each round.
    pub modes: Vec<String>,
    /// Rounds of interleaved trials.
    pub runs: u32,
    /// `normal` or `low-memory`.
    pub scenario: String,
    /// Memory cgroup limit in bytes (low-memory scenario).
    pub memory_limit: Option<u64>,
    /// Whether caches were dropped system-wide before each trial.
    pub drop_caches: bool,
    /// Directory holding the files.
    pub dir: String,
}

impl ConfigReport {
    /// ` (limit 1.0 GiB)` in the low-memory scenario, else empty: the end of a one-line description.
    pub fn limit_note(&self) -> String {
        self.memory_limit
            .map(|l| format!(" (limit {})", human_bytes(l as f64)))
            .unwrap_or_default()
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
        Series {
            interval_s,
            spread: Spread::of(&mib_s),
            cov: cov(&mib_s),
            mib_s,
        }
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

/// One timed trial of one mode.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TrialReport {
    /// Round number, from 1.
    pub run: u32,
    /// Bytes the workload moved (read, or written; a copy counts the bytes copied).
    pub bytes: u64,
    /// Wall time from start to the last byte (durable for writes) in seconds.
    pub seconds: f64,
    /// `bytes / seconds` in MiB/s.
    pub mib_s: f64,
    /// Per-interval throughput.
    pub series: Series,
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
}

impl TrialReport {
    /// Fills `mib_s` and `cpu_s_per_gib` from bytes, seconds and CPU.
    pub fn finish_rates(&mut self) {
        self.mib_s = if self.seconds > 0.0 {
            self.bytes as f64 / MIB / self.seconds
        } else {
            0.0
        };
        let gib = self.bytes as f64 / GIB;
        self.cpu_s_per_gib = if gib > 0.0 {
            self.cpu.total_s() / gib
        } else {
            0.0
        };
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
    /// Their spread.
    pub mib_s: Spread,
    /// Our median for the same mode, MiB/s.
    pub ours_mib_s: Option<f64>,
    /// `ours / fio - 1` in percent.
    pub ours_vs_fio_pct: Option<f64>,
}

impl ModeReport {
    /// Builds the summary from the trials (diff against buffered is filled by [`BenchReport::finish`]).
    pub fn summarize(mode: String, decisions: Vec<String>, runs: Vec<TrialReport>) -> ModeReport {
        let col =
            |f: &dyn Fn(&TrialReport) -> f64| Spread::of(&runs.iter().map(f).collect::<Vec<_>>());
        let gib = |t: &TrialReport| (t.bytes as f64 / GIB).max(f64::MIN_POSITIVE);
        let summary = ModeSummary {
            mib_s: col(&|t| t.mib_s),
            diff_vs_buffered_pct: None,
            cpu_s_per_gib: col(&|t| t.cpu_s_per_gib),
            user_s_per_gib: median(
                &runs
                    .iter()
                    .map(|t| t.cpu.user_s / gib(t))
                    .collect::<Vec<_>>(),
            ),
            sys_s_per_gib: median(
                &runs
                    .iter()
                    .map(|t| t.cpu.sys_s / gib(t))
                    .collect::<Vec<_>>(),
            ),
            kswapd_cpu_s: col(&|t| t.kswapd_cpu_s),
            series_cov: col(&|t| t.series.cov),
            cache_growth_bytes: col(&|t| t.cache.growth_bytes as f64),
            cache_peak_growth_bytes: col(&|t| t.cache.peak_growth_bytes as f64),
            peak_dirty_writeback_bytes: col(&|t| t.cache.peak_dirty_writeback_bytes as f64),
            files_resident_bytes: col(&|t| t.files_resident_end_bytes as f64),
            pgscan_total: col(&|t| t.reclaim.pgscan_total as f64),
            pgsteal_total: col(&|t| t.reclaim.pgsteal_total as f64),
        };
        ModeReport {
            mode,
            decisions,
            summary,
            runs,
        }
    }

    /// The run whose throughput is closest to the median (for plots).
    pub fn representative(&self) -> Option<&TrialReport> {
        let v: Vec<f64> = self.runs.iter().map(|t| t.mib_s).collect();
        crate::stats::median_index(&v).map(|i| &self.runs[i])
    }
}

impl BenchReport {
    /// Fills the diffs against buffered and the fio comparisons.
    pub fn finish(&mut self) {
        let base = self
            .modes
            .iter()
            .find(|m| m.mode == "buffered")
            .map(|m| m.summary.mib_s.median);
        for m in &mut self.modes {
            m.summary.diff_vs_buffered_pct = pct_vs(Some(m.summary.mib_s.median), base);
        }
        for f in &mut self.fio {
            f.ours_mib_s = self
                .modes
                .iter()
                .find(|m| m.mode == f.mode)
                .map(|m| m.summary.mib_s.median);
            f.ours_vs_fio_pct = pct_vs(f.ours_mib_s, Some(f.mib_s.median));
        }
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("report serializes")
    }

    /// The main table in Markdown, as in the published erofs table, followed by a detail table.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let c = &self.config;
        let _ = writeln!(
            s,
            "{} x {} file(s) of {}, {} thread(s), bs {}, qd {}, {} run(s), scenario {}{}",
            c.rw,
            c.files,
            human_bytes(c.file_size as f64),
            c.threads,
            human_bytes(c.block_size as f64),
            c.queue_depth,
            c.runs,
            c.scenario,
            c.limit_note()
        );
        s.push('\n');
        s.push_str("| mode | MiB/s | diff | CPU s/GiB | cache growth |\n");
        s.push_str("|---|---:|---:|---:|---:|\n");
        for m in &self.modes {
            let x = &m.summary;
            let _ = writeln!(
                s,
                "| {} | {:.0} | {} | {:.2} | {} |",
                m.mode,
                x.mib_s.median,
                or_dash(x.diff_vs_buffered_pct.map(|d| format!("{d:+.1}%"))),
                x.cpu_s_per_gib.median,
                human_signed(x.cache_peak_growth_bytes.median),
            );
        }
        s.push('\n');
        s.push_str(
            "| mode | MiB/s min-max | CoV/s | user/sys s/GiB | kswapd CPU s | pgscan | pgsteal | \
             cache end | peak dirty+wb | files cached |\n",
        );
        s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for m in &self.modes {
            let x = &m.summary;
            let _ = writeln!(
                s,
                "| {} | {:.0}-{:.0} | {:.1}% | {:.2}/{:.2} | {:.2} | {:.0} | {:.0} | {} | {} | {} |",
                m.mode,
                x.mib_s.min,
                x.mib_s.max,
                x.series_cov.median * 100.0,
                x.user_s_per_gib,
                x.sys_s_per_gib,
                x.kswapd_cpu_s.median,
                x.pgscan_total.median,
                x.pgsteal_total.median,
                human_signed(x.cache_growth_bytes.median),
                human_bytes(x.peak_dirty_writeback_bytes.median),
                human_bytes(x.files_resident_bytes.median),
            );
        }
        let disturbed: usize = self
            .modes
            .iter()
            .flat_map(|m| &m.runs)
            .filter(|t| t.caches_dropped_during > 0)
            .count();
        if disturbed > 0 {
            let _ = writeln!(
                s,
                "\nWARNING: another program dropped the page cache during {disturbed} trial(s) \
                 (caches_dropped_during in the JSON/CSV): their cache figures are not their own."
            );
        }
        let decided: Vec<_> = self
            .modes
            .iter()
            .filter(|m| !m.decisions.is_empty())
            .collect();
        if !decided.is_empty() {
            s.push('\n');
            for m in decided {
                let _ = writeln!(s, "{}: {}", m.mode, m.decisions.join("; "));
            }
        }
        if !self.fio.is_empty() {
            s.push('\n');
            s.push_str("| mode | ours MiB/s | fio MiB/s | ours vs fio |\n|---|---:|---:|---:|\n");
            for f in &self.fio {
                let _ = writeln!(
                    s,
                    "| {} | {} | {:.0} ({:.0}-{:.0}) | {} |",
                    f.mode,
                    or_dash(f.ours_mib_s.map(|o| format!("{o:.0}"))),
                    f.mib_s.median,
                    f.mib_s.min,
                    f.mib_s.max,
                    or_dash(f.ours_vs_fio_pct.map(|d| format!("{d:+.1}%"))),
                );
            }
        }
        s
    }

    /// One CSV row per trial (header included).
    pub fn to_csv(&self) -> String {
        let mut s = String::from(
            "mode,run,bytes,seconds,mib_s,series_min,series_median,series_max,series_cov,user_s,sys_s,\
             cpu_s_per_gib,kswapd_cpu_s,pgscan_kswapd,pgscan_direct,pgsteal_kswapd,pgsteal_direct,\
             pgscan_total,pgsteal_total,cache_source,cache_growth_bytes,cache_peak_growth_bytes,\
             peak_dirty_writeback_bytes,system_cache_growth_bytes,files_resident_start_bytes,\
             files_resident_end_bytes,files_total_bytes,cgroup_peak_bytes,caches_dropped_during\n",
        );
        for m in &self.modes {
            for t in &m.runs {
                let r = &t.reclaim;
                let _ = writeln!(
                    s,
                    "{},{},{},{:.6},{:.3},{:.3},{:.3},{:.3},{:.5},{:.3},{:.3},{:.4},{:.3},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                    m.mode,
                    t.run,
                    t.bytes,
                    t.seconds,
                    t.mib_s,
                    t.series.spread.min,
                    t.series.spread.median,
                    t.series.spread.max,
                    t.series.cov,
                    t.cpu.user_s,
                    t.cpu.sys_s,
                    t.cpu_s_per_gib,
                    t.kswapd_cpu_s,
                    r.pgscan_kswapd,
                    r.pgscan_direct,
                    r.pgsteal_kswapd,
                    r.pgsteal_direct,
                    r.pgscan_total,
                    r.pgsteal_total,
                    if t.cache.source == CacheSource::Cgroup { "cgroup" } else { "meminfo" },
                    t.cache.growth_bytes,
                    t.cache.peak_growth_bytes,
                    t.cache.peak_dirty_writeback_bytes,
                    t.system_cache_growth_bytes,
                    t.files_resident_start_bytes,
                    t.files_resident_end_bytes,
                    t.files_total_bytes,
                    t.cgroup_peak_bytes.map(|p| p.to_string()).unwrap_or_default(),
                    t.caches_dropped_during,
                );
            }
        }
        s
    }
}

/// `1.5 GiB`-style sizes.
pub fn human_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut i = 0;
    while v.abs() >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

/// `value` against `base` in percent (`+12.5` = 12.5 % more); `None` without both or with a base of 0.
fn pct_vs(value: Option<f64>, base: Option<f64>) -> Option<f64> {
    match (value, base) {
        (Some(v), Some(b)) if b > 0.0 => Some((v / b - 1.0) * 100.0),
        _ => None,
    }
}

/// A table cell: the figure, or `-` when there is none.
fn or_dash(cell: Option<String>) -> String {
    cell.unwrap_or_else(|| "-".into())
}

fn human_signed(b: f64) -> String {
    if b > 0.0 {
        format!("+{}", human_bytes(b))
    } else {
        human_bytes(b)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample_report() -> BenchReport {
        let trial = |run, bytes: u64, seconds, growth: i64, series: Vec<f64>| {
            let mut t = TrialReport {
                run,
                bytes,
                seconds,
                series: Series::new(1.0, series),
                cpu: CpuTime {
                    user_s: 0.5,
                    sys_s: 1.5,
                },
                kswapd_cpu_s: 0.25,
                cache: CacheReport {
                    source: CacheSource::Meminfo,
                    start_bytes: 1 << 20,
                    end_bytes: (1 << 20) + growth as u64,
                    growth_bytes: growth,
                    peak_growth_bytes: growth,
                    peak_dirty_writeback_bytes: 4096,
                },
                files_total_bytes: bytes,
                ..Default::default()
            };
            t.finish_rates();
            t
        };
        let g = 1u64 << 30;
        let mut r = BenchReport {
            schema: SCHEMA.into(),
            version: "0.1.0".into(),
            config: ConfigReport {
                rw: "read".into(),
                files: 2,
                file_size: g,
                threads: 2,
                block_size: 1 << 20,
                queue_depth: 8,
                backend: "auto".into(),
                modes: vec!["buffered".into(), "direct".into()],
                runs: 2,
                scenario: "normal".into(),
                memory_limit: None,
                drop_caches: false,
                dir: "/tmp/x".into(),
            },
            system: SystemReport {
                kernel: "6.18".into(),
                cpus: 2,
                mem_total: 24 * g,
                fs_type: Some("ext4".into()),
                cgroup: None,
            },
            modes: vec![
                ModeReport::summarize(
                    "buffered".into(),
                    vec![],
                    vec![
                        trial(1, 2 * g, 2.0, 2 << 30, vec![1000.0, 1048.0]),
                        trial(2, 2 * g, 4.0, 2 << 30, vec![500.0, 524.0]),
                    ],
                ),
                ModeReport::summarize(
                    "direct".into(),
                    vec!["direct: forced".into()],
                    vec![
                        trial(1, 2 * g, 1.0, 0, vec![2048.0]),
                        trial(2, 2 * g, 1.0, 0, vec![2048.0]),
                    ],
                ),
            ],
            fio: vec![FioReport {
                mode: "direct".into(),
                command: "fio ...".into(),
                runs_mib_s: vec![2000.0],
                mib_s: Spread::of(&[2000.0]),
                ours_mib_s: None,
                ours_vs_fio_pct: None,
            }],
        };
        r.finish();
        r
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
        assert!((r.fio[0].ours_vs_fio_pct.unwrap() - 2.4).abs() < 1e-9);
        assert_eq!(r.modes[0].representative().unwrap().run, 1);
    }

    #[test]
    fn table_has_the_published_columns() {
        let t = sample_report().table();
        assert!(
            t.contains("| mode | MiB/s | diff | CPU s/GiB | cache growth |"),
            "{t}"
        );
        assert!(
            t.contains("| buffered | 768 | +0.0% | 1.00 | +2.0 GiB |"),
            "{t}"
        );
        assert!(
            t.contains("| direct | 2048 | +166.7% | 1.00 | 0 B |"),
            "{t}"
        );
        assert!(t.contains("direct: direct: forced"), "{t}");
        assert!(
            t.contains("| direct | 2048 | 2000 (2000-2000) | +2.4% |"),
            "{t}"
        );
    }

    #[test]
    fn csv_has_one_row_per_trial_and_matching_columns() {
        let c = sample_report().to_csv();
        let lines: Vec<&str> = c.lines().collect();
        assert_eq!(lines.len(), 5);
        let n = lines[0].split(',').count();
        assert!(lines.iter().all(|l| l.split(',').count() == n), "{c}");
        assert!(lines[1].starts_with("buffered,1,2147483648,2.000000,1024.000,"));
    }

    /// The JSON schema is stable: these keys are documented in docs/bench-json.md and must not change
    /// within `cacheless-bench/1`.
    #[test]
    fn json_schema_is_stable() {
        let v: serde_json::Value = serde_json::from_str(&sample_report().to_json()).unwrap();
        let keys = |v: &serde_json::Value| -> Vec<String> {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        assert_eq!(v["schema"], "cacheless-bench/1");
        assert_eq!(
            keys(&v),
            ["config", "fio", "modes", "schema", "system", "version"]
        );
        assert_eq!(
            keys(&v["config"]),
            [
                "backend",
                "block_size",
                "dir",
                "drop_caches",
                "file_size",
                "files",
                "memory_limit",
                "modes",
                "queue_depth",
                "runs",
                "rw",
                "scenario",
                "threads"
            ]
        );
        assert_eq!(
            keys(&v["system"]),
            ["cgroup", "cpus", "fs_type", "kernel", "mem_total"]
        );
        let m = &v["modes"][0];
        assert_eq!(keys(m), ["decisions", "mode", "runs", "summary"]);
        assert_eq!(
            keys(&m["summary"]),
            [
                "cache_growth_bytes",
                "cache_peak_growth_bytes",
                "cpu_s_per_gib",
                "diff_vs_buffered_pct",
                "files_resident_bytes",
                "kswapd_cpu_s",
                "mib_s",
                "peak_dirty_writeback_bytes",
                "pgscan_total",
                "pgsteal_total",
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
                "kswapd_cpu_s",
                "mib_s",
                "reclaim",
                "run",
                "seconds",
                "series",
                "system_cache_growth_bytes"
            ]
        );
        assert_eq!(keys(&t["series"]), ["cov", "interval_s", "mib_s", "spread"]);
        assert_eq!(keys(&t["cpu"]), ["sys_s", "user_s"]);
        assert_eq!(
            keys(&t["reclaim"]),
            [
                "pgscan_direct",
                "pgscan_kswapd",
                "pgscan_total",
                "pgsteal_direct",
                "pgsteal_kswapd",
                "pgsteal_total"
            ]
        );
        assert_eq!(
            keys(&t["cache"]),
            [
                "end_bytes",
                "growth_bytes",
                "peak_dirty_writeback_bytes",
                "peak_growth_bytes",
                "source",
                "start_bytes"
            ]
        );
        assert_eq!(t["cache"]["source"], "meminfo");
        assert_eq!(
            keys(&v["fio"][0]),
            [
                "command",
                "mib_s",
                "mode",
                "ours_mib_s",
                "ours_vs_fio_pct",
                "runs_mib_s"
            ]
        );
        // And it reads back.
        let back: BenchReport = serde_json::from_value(v).unwrap();
        assert_eq!(back.modes.len(), 2);
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human_bytes(0.0), "0 B");
        assert_eq!(human_bytes(1536.0), "1.5 KiB");
        assert_eq!(human_bytes(3.0 * 1024.0 * 1024.0 * 1024.0), "3.0 GiB");
        assert_eq!(human_signed(-2048.0), "-2.0 KiB");
    }
}
