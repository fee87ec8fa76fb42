//! The pressure and neighbour scenarios around each trial: their helper processes ([`crate::helper`]) start
//! after the trial's cold start and end (killed, and waited for) when the trial ends, fails or is
//! interrupted.
//!
//! - **pressure**: right before the clock starts, MemAvailable is measured and a helper holds all of it
//!   but `--free` ([`hold_size`]): anonymous memory, every page written, locked when the memlock limit
//!   allows (without swap, unlocked pages stay held too; /proc/swaps is reported). The run then waits for
//!   kswapd to go idle again, so that the trial starts with only `--free` available, machine-wide, and
//!   nothing in flight. The trial reports kswapd CPU (in total and per interval), the reclaim counters and
//!   allocation stalls of /proc/vmstat, and the lowest MemAvailable seen.
//! - **neighbour**: a co-tenant process reads a hot file (`--hot-size`, kept beside the benchmark's files)
//!   until it is cached, then re-reads it round and round while the trial runs. The trial reports the
//!   co-tenant's throughput during the clock and the share of its cached set that was evicted by the end,
//!   with what it had to read back from storage. The page-cache figures of the trial stay system-wide, so
//!   they include whatever the hot file gained or lost.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use cacheless::residency::residency_of;

pub use crate::config::MIN_FREE;
use crate::config::{BenchConfig, Scenario};
use crate::error::{Error, Result};
use crate::helper::HelperProcess;
use crate::log::Log;
use crate::prepare::settle;
use crate::procfs::read_meminfo;
use crate::report::{NeighbourReport, PressureReport, TrialReport};
use crate::units::human_bytes;

/// The smallest hold worth making: with less than this above `--free`, the pressure scenario refuses.
pub const MIN_HOLD: u64 = 64 << 20;

/// How many bytes the pressure helper is asked to hold when MemAvailable is `available` and `free` must
/// stay available: `available - free`, or an error naming both figures when that is under [`MIN_HOLD`].
pub fn hold_size(available: u64, free: u64) -> Result<u64> {
    match available.checked_sub(free) {
        Some(hold) if hold >= MIN_HOLD => Ok(hold),
        _ => Err(Error::Scenario(format!(
            "pressure scenario: MemAvailable is {} ({available} bytes), not above --free {} ({free} bytes) by at \
             least {}: there is nothing to hold; lower --free or free some memory",
            human_bytes(available as f64),
            human_bytes(free as f64),
            human_bytes(MIN_HOLD as f64)
        ))),
    }
}

/// The co-tenant's hot file of a run in `dir`.
pub(crate) fn hot_path(dir: &Path) -> PathBuf {
    dir.join("cacheless-bench-hot.dat")
}

/// The program that runs the helpers: `cfg.helper`, else this executable.
fn helper_exe(cfg: &BenchConfig) -> Result<PathBuf> {
    match &cfg.helper {
        Some(p) => Ok(p.clone()),
        None => std::env::current_exe().map_err(|e| Error::io("/proc/self/exe", "find the benchmark's program", e)),
    }
}

/// The co-tenant's counters at one moment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reading {
    at: Instant,
    bytes: u64,
    disk: Option<u64>,
}

/// What a trial's scenario keeps between its start and its end.
#[derive(Debug)]
pub(crate) enum TrialScenario {
    /// Normal and low-memory: nothing.
    Plain,
    /// The memory holder, with what it did so far.
    Pressure { holder: HelperProcess, report: PressureReport },
    /// The co-tenant, with its hot file and its counters when the clock started.
    Neighbour { tenant: HelperProcess, hot: PathBuf, report: NeighbourReport, start: Option<Reading> },
}

impl TrialScenario {
    /// Starts the scenario's helper for one trial, after its cold start: for pressure, once it holds its
    /// memory and kswapd is idle again; for neighbour, once the hot file is cached.
    pub(crate) fn start(cfg: &BenchConfig, dir: &Path, kswapd: &[u32], cancel: &AtomicBool, log: Log<'_>) -> Result<TrialScenario> {
        match cfg.scenario {
            Scenario::Normal | Scenario::LowMemory => Ok(TrialScenario::Plain),
            Scenario::Pressure => start_pressure(cfg, kswapd, cancel, log),
            Scenario::Neighbour => start_neighbour(cfg, dir, cancel, log),
        }
    }

    /// Seconds waited for kswapd after the helper started (pressure only).
    pub(crate) fn settle_s(&self) -> f64 {
        match self {
            TrialScenario::Pressure { report, .. } => report.settle_s,
            _ => 0.0,
        }
    }

    /// Just before the clock starts.
    pub(crate) fn clock_starts(&mut self, cancel: &AtomicBool) -> Result<()> {
        match self {
            TrialScenario::Plain => {}
            TrialScenario::Pressure { report, .. } => report.mem_available_start_bytes = read_meminfo()?.available,
            TrialScenario::Neighbour { tenant, start, .. } => *start = Some(reading(tenant, cancel)?),
        }
        Ok(())
    }

    /// Just after the clock stopped: fills the trial's scenario figures, then ends the helper and waits
    /// for its exit.
    pub(crate) fn finish(self, t: &mut TrialReport, cancel: &AtomicBool) -> Result<()> {
        match self {
            TrialScenario::Plain => Ok(()),
            TrialScenario::Pressure { mut holder, mut report } => {
                report.holder_lost = holder.exited();
                t.pressure = Some(report);
                holder.stop()
            }
            TrialScenario::Neighbour { mut tenant, hot, mut report, start } => {
                let end = reading(&mut tenant, cancel)?;
                let r = residency_of(&hot)?;
                report.resident_end_bytes = r.cached_bytes();
                report.evicted_fraction = evicted_fraction(report.resident_start_bytes, report.resident_end_bytes);
                if let Some(s) = start {
                    report.bytes = end.bytes.saturating_sub(s.bytes);
                    report.seconds = end.at.saturating_duration_since(s.at).as_secs_f64();
                    report.mib_s = if report.seconds > 0.0 { report.bytes as f64 / 1048576.0 / report.seconds } else { 0.0 };
                    report.disk_read_bytes = end.disk.zip(s.disk).map(|(e, s)| e.saturating_sub(s));
                }
                t.neighbour = Some(report);
                tenant.stop()
            }
        }
    }
}

/// The share of `start` resident bytes gone at the end, in [0, 1] (0 when nothing was resident).
pub fn evicted_fraction(start: u64, end: u64) -> f64 {
    if start == 0 {
        return 0.0;
    }
    (start.saturating_sub(end) as f64 / start as f64).clamp(0.0, 1.0)
}

/// Parses the holder's `held BYTES LOCKED AVAILABLE` line.
fn parse_held(line: &str) -> Option<(u64, bool, u64)> {
    let mut it = line.strip_prefix("held ")?.split(' ');
    let held = it.next()?.parse().ok()?;
    let locked = it.next()? == "1";
    let avail = it.next()?.parse().ok()?;
    Some((held, locked, avail))
}

fn start_pressure(cfg: &BenchConfig, kswapd: &[u32], cancel: &AtomicBool, log: Log<'_>) -> Result<TrialScenario> {
    let before = read_meminfo()?.available;
    let target = hold_size(before, cfg.free)?;
    let mut holder = HelperProcess::spawn(&helper_exe(cfg)?, "memory holder", &["hold".into(), cfg.free.to_string(), target.to_string()])?;
    let line = holder.line(cancel, None)?;
    let (held, locked, after) = parse_held(&line)
        .ok_or_else(|| Error::Scenario(format!("the memory holder (pid {}) answered '{line}', not 'held BYTES LOCKED AVAILABLE'", holder.pid())))?;
    if held < MIN_HOLD {
        return Err(Error::Scenario(format!(
            "pressure scenario: the memory holder could hold only {} of {}: MemAvailable fell from {} to {} while it \
             grew (another program allocating?)",
            human_bytes(held as f64),
            human_bytes(target as f64),
            human_bytes(before as f64),
            human_bytes(after as f64)
        )));
    }
    if held < target - target / 10 {
        log(&format!(
            "WARNING: the memory holder stopped at {} of {}: MemAvailable fell to {} while it grew (another \
             program allocating?)",
            human_bytes(held as f64),
            human_bytes(target as f64),
            human_bytes(after as f64)
        ));
    }
    // Growing made the kernel reclaim other programs' cache; the trial starts once that is over.
    let settled = settle(kswapd, cancel)?;
    let report = PressureReport {
        holder_pid: holder.pid(),
        mem_available_before_bytes: before,
        target_bytes: target,
        held_bytes: held,
        locked,
        settle_s: settled.settle_s,
        ..Default::default()
    };
    Ok(TrialScenario::Pressure { holder, report })
}

fn start_neighbour(cfg: &BenchConfig, dir: &Path, cancel: &AtomicBool, log: Log<'_>) -> Result<TrialScenario> {
    let hot = hot_path(dir);
    let mut tenant = HelperProcess::spawn(&helper_exe(cfg)?, "co-tenant", &["reread".into(), hot.display().to_string()])?;
    let line = tenant.line(cancel, None)?;
    if line != "ready" {
        return Err(Error::Scenario(format!("the co-tenant (pid {}) answered '{line}', not 'ready'", tenant.pid())));
    }
    let r = residency_of(&hot)?;
    let report = NeighbourReport { pid: tenant.pid(), hot_bytes: r.total_bytes(), resident_start_bytes: r.cached_bytes(), ..Default::default() };
    if report.resident_start_bytes < report.hot_bytes - report.hot_bytes / 100 {
        log(&format!(
            "WARNING: only {} of the {} hot file is cached after the co-tenant read it (too little memory?)",
            human_bytes(report.resident_start_bytes as f64),
            human_bytes(report.hot_bytes as f64)
        ));
    }
    Ok(TrialScenario::Neighbour { tenant, hot, report, start: None })
}

/// Asks the co-tenant for its counters.
fn reading(tenant: &mut HelperProcess, cancel: &AtomicBool) -> Result<Reading> {
    let line = tenant.ask(cancel)?;
    let at = Instant::now();
    let mut it = line.split(' ');
    let bytes = it.next().and_then(|b| b.parse().ok());
    let disk = it.next().and_then(|d| d.parse().ok());
    match bytes {
        Some(bytes) => Ok(Reading { at, bytes, disk }),
        None => Err(Error::Scenario(format!("the co-tenant (pid {}) answered '{line}', not 'BYTES DISK'", tenant.pid()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn hold_is_what_is_available_above_free() {
        assert_eq!(hold_size(20 << 30, 1 << 30).unwrap(), 19 << 30);
        assert_eq!(hold_size(1024 * MIB + MIN_HOLD, 1024 * MIB).unwrap(), MIN_HOLD);
    }

    #[test]
    fn too_little_available_is_refused_naming_the_figures() {
        for (available, free) in [(512 * MIB, 1024 * MIB), (1024 * MIB, 1024 * MIB), (1024 * MIB + MIN_HOLD - 1, 1024 * MIB)] {
            let e = hold_size(available, free).unwrap_err().to_string();
            assert!(e.starts_with("pressure scenario: MemAvailable is "), "{e}");
            assert!(e.contains(&format!("({available} bytes)")) && e.contains(&format!("--free 1.0 GiB ({free} bytes)")), "{e}");
            assert!(e.contains("by at least 64.0 MiB") && e.contains("lower --free"), "{e}");
        }
    }

    #[test]
    fn held_line_parses() {
        assert_eq!(parse_held("held 1048576 1 2048"), Some((1 << 20, true, 2048)));
        assert_eq!(parse_held("held 5 0 7"), Some((5, false, 7)));
        assert_eq!(parse_held("ready"), None);
        assert_eq!(parse_held("held x 1 2"), None);
    }

    #[test]
    fn eviction_is_a_fraction_of_what_was_cached() {
        assert_eq!(evicted_fraction(100, 100), 0.0);
        assert_eq!(evicted_fraction(100, 25), 0.75);
        assert_eq!(evicted_fraction(100, 0), 1.0);
        // More resident at the end than at the start (read back in) is no eviction.
        assert_eq!(evicted_fraction(50, 100), 0.0);
        assert_eq!(evicted_fraction(0, 0), 0.0);
    }
}
