//! The benchmark itself: prepares the files, runs cold trials of each mode (and of fio with `vs_fio`) in an
//! order that rotates every round ([`crate::schedule`]), optionally inside a memory cgroup, under machine-wide
//! memory pressure or beside a co-tenant ([`crate::scenario`]), and summarizes them into a [`BenchReport`].
//! The pieces: [`crate::config`] (options), `prepare` (files, cold start), `trial` (one trial),
//! [`crate::fio`] (fio's jobs).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use cacheless::{Budget, Mode};

use crate::cgroup::{self, MemoryCgroup, MemoryHierarchy};
use crate::config::validate;
pub use crate::config::{BenchConfig, Rw, Scenario};
use crate::error::{Error, Result};
use crate::fio::FioJob;
pub use crate::log::Log;
use crate::prepare::{prepare_sources, remove_all, target_path};
use crate::procfs::{kswapd_pids, parse_mountinfo, read_meminfo, swap_bytes};
use crate::report::{BenchReport, ConfigReport, FioReport, ModeReport, SystemReport, TrialReport, SCHEMA};
use crate::scenario::hot_path;
use crate::schedule::{default_rounds, ordinal, schedule};
use crate::stats::Spread;
use crate::trial::Bench;
use crate::units::human_bytes;

/// One kind of trial in the rotation.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// `cfg.modes[i]`.
    Ours(usize),
    /// The `i`-th fio job.
    Fio(usize),
}

/// What the trials of a run produced, per kind.
struct Results {
    trials: Vec<Vec<TrialReport>>,
    decisions: Vec<Vec<String>>,
    /// Per fio job: bandwidth and position of each run.
    fio: Vec<(Vec<f64>, Vec<u32>)>,
}

fn system_report(dir: &Path, cgroup: Option<String>) -> SystemReport {
    let fs_type = std::fs::read_to_string("/proc/self/mountinfo").ok().and_then(|mi| fs_type_of(&mi, dir));
    SystemReport {
        kernel: cacheless::caps::system().kernel.clone(),
        cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        mem_total: read_meminfo().map(|m| m.total).unwrap_or(0),
        fs_type,
        cgroup,
        swap_bytes: swap_bytes(),
    }
}

/// The file system type of the longest mount point containing `dir`.
fn fs_type_of(mountinfo: &str, dir: &Path) -> Option<String> {
    let dir = std::fs::canonicalize(dir).ok()?;
    let mut best: Option<(usize, &str)> = None;
    for m in parse_mountinfo(mountinfo) {
        let len = m.mount_point.as_os_str().len();
        if dir.starts_with(&m.mount_point) && best.is_none_or(|b| len >= b.0) {
            best = Some((len, m.fs_type));
        }
    }
    best.map(|b| b.1.to_string())
}

/// The directory for the files: `cfg.dir` (created if needed), else a new temporary one under the current
/// directory, returned too so that it lives (and is removed) with the run, with the claim on the
/// current directory that keeps `cacheless clean` off it while the run lives.
fn work_dir(cfg: &BenchConfig) -> Result<(PathBuf, Option<(tempfile::TempDir, cacheless::temps::Claim)>)> {
    if let Some(d) = &cfg.dir {
        std::fs::create_dir_all(d).map_err(|e| Error::io(d, "create directory", e))?;
        return Ok((d.clone(), None));
    }
    let cwd = std::env::current_dir().map_err(|e| Error::io(".", "current directory", e))?;
    // Named for its owner and made under its claim (`cacheless::temps`), so that `cacheless
    // clean` removes it if this run is killed, and not before.
    let claim = cacheless::temps::claim_path(&cwd);
    let tmp = tempfile::Builder::new()
        .prefix(&cacheless::temps::bench_dir_name())
        .rand_bytes(0)
        .tempdir_in(&cwd)
        .map_err(|e| Error::io(&cwd, "create temporary directory", e))?;
    Ok((tmp.path().to_path_buf(), Some((tmp, claim))))
}

/// The memory cgroup hierarchy for the low-memory scenario, found once (every trial's cgroup goes in the
/// same place) and tried once, so that the run fails before creating gigabytes when the cgroup cannot be
/// made; with the hierarchy's version for the report.
fn cgroup_for(cfg: &BenchConfig) -> Result<(Option<MemoryHierarchy>, Option<String>)> {
    if cfg.scenario != Scenario::LowMemory {
        return Ok((None, None));
    }
    let h = cgroup::detect()?;
    MemoryCgroup::create_in(h.clone(), cfg.memory_limit)?.remove()?;
    let version = format!("{:?}", h.version).to_lowercase();
    Ok((Some(h), Some(version)))
}

/// fio's jobs with `vs_fio`, or none (saying why when fio is missing).
fn fio_jobs(cfg: &BenchConfig, dir: &Path, sources: &[PathBuf], log: Log<'_>) -> Vec<(Mode, FioJob)> {
    if !cfg.vs_fio {
        return Vec::new();
    }
    if crate::fio::version().is_none() {
        log("--vs-fio: fio is not installed; skipping it");
        return Vec::new();
    }
    crate::fio::jobs_for(cfg, dir, sources)
}

/// Runs every round of `schedule` over `kinds`.
fn run_rounds(bench: &Bench<'_>, kinds: &[Kind], fio: &[(Mode, FioJob)], schedule: &[Vec<usize>], log: Log<'_>) -> Result<Results> {
    let cfg = bench.cfg;
    let mut out =
        Results { trials: vec![Vec::new(); cfg.modes.len()], decisions: vec![Vec::new(); cfg.modes.len()], fio: vec![(Vec::new(), Vec::new()); fio.len()] };
    let rounds = schedule.len();
    for (r, order) in schedule.iter().enumerate() {
        let run = ordinal(r);
        for (p, &k) in order.iter().enumerate() {
            if bench.cancel.load(Ordering::Relaxed) {
                return Err(Error::Interrupted);
            }
            let position = ordinal(p);
            match kinds[k] {
                Kind::Ours(mi) => {
                    let mode = cfg.modes[mi];
                    let (mut t, decisions) = bench.ours(mode, log)?;
                    t.run = run;
                    t.position = position;
                    log(&format!(
                        "run {run}/{rounds} #{position} {mode}: {:.0} MiB/s, {:.2} CPU s/GiB, cache {:+.0} MiB \
                         (peak {:+.0} MiB)",
                        t.mib_s,
                        t.cpu_s_per_gib,
                        t.cache.growth_bytes as f64 / 1048576.0,
                        t.cache.peak_growth_bytes as f64 / 1048576.0
                    ));
                    if run == 1 {
                        out.decisions[mi] = decisions;
                    }
                    out.trials[mi].push(t);
                }
                Kind::Fio(fi) => {
                    let (mode, job) = &fio[fi];
                    let bw = bench.fio(job, log)?;
                    log(&format!("run {run}/{rounds} #{position} fio {mode}: {bw:.0} MiB/s"));
                    out.fio[fi].0.push(bw);
                    out.fio[fi].1.push(position);
                }
            }
        }
    }
    Ok(out)
}

/// The options of the run as reported, with the order of each round.
fn config_report(cfg: &BenchConfig, schedule: Vec<Vec<String>>, dir: &Path) -> ConfigReport {
    ConfigReport {
        rw: cfg.rw.name().into(),
        files: cfg.files,
        file_size: cfg.file_size,
        threads: cfg.threads,
        block_size: cfg.block_size as u64,
        queue_depth: u32::try_from(cfg.queue_depth).unwrap_or(u32::MAX),
        backend: cfg.backend.to_string(),
        modes: cfg.modes.iter().map(|m| m.to_string()).collect(),
        runs: u32::try_from(schedule.len()).unwrap_or(u32::MAX),
        schedule,
        scenario: cfg.scenario.name().into(),
        memory_limit: (cfg.scenario == Scenario::LowMemory).then_some(cfg.memory_limit),
        free: (cfg.scenario == Scenario::Pressure).then_some(cfg.free),
        hot_size: (cfg.scenario == Scenario::Neighbour).then_some(cfg.hot_size),
        hot_file: (cfg.scenario == Scenario::Neighbour).then(|| hot_path(dir).display().to_string()),
        drop_caches: cfg.drop_caches,
        dir: dir.display().to_string(),
    }
}

/// Checks before any file is made that the pressure scenario can hold memory now (see
/// [`crate::scenario::hold_size`]), and says when swap could take what it holds.
fn check_pressure(cfg: &BenchConfig, log: Log<'_>) -> Result<()> {
    if cfg.scenario != Scenario::Pressure {
        return Ok(());
    }
    crate::scenario::hold_size(read_meminfo()?.available, cfg.free)?;
    let swap = swap_bytes();
    if swap > 0 {
        log(&format!(
            "WARNING: swap is on ({}): memory the pressure scenario holds is only held if it can be locked \
             (see pressure.locked in the JSON report); otherwise the kernel may swap it out",
            human_bytes(swap as f64)
        ));
    }
    Ok(())
}

/// Runs the benchmark.
pub fn run(cfg: &BenchConfig, log: Log<'_>) -> Result<BenchReport> {
    run_cancellable(cfg, log, &AtomicBool::new(false))
}

/// [`run`], stopping with [`Error::Interrupted`] soon after `cancel` is set (a signal handler sets it): the
/// trial in progress stops between requests, the scenario's helper process is ended and waited for, and
/// written files (and with `remove_files` the sources) are removed.
///
/// The pressure and neighbour scenarios' helpers die with the thread that calls this (PR_SET_PDEATHSIG).
pub fn run_cancellable(cfg: &BenchConfig, log: Log<'_>, cancel: &AtomicBool) -> Result<BenchReport> {
    validate(cfg)?;
    check_pressure(cfg, log)?;
    let (dir, _tmp) = work_dir(cfg)?;
    let (hierarchy, cgroup_version) = cgroup_for(cfg)?;
    let prepared = prepare(cfg, &dir, cancel, log);
    let hot = (cfg.scenario == Scenario::Neighbour).then(|| hot_path(&dir));
    let remove_prepared = |sources: &[PathBuf]| -> Result<()> {
        if cfg.remove_files {
            remove_all(sources)?;
            remove_all(hot.as_slice())?;
        }
        Ok(())
    };
    let sources = match prepared {
        Ok(s) => s,
        Err(e) => {
            let all: Vec<PathBuf> = (0..cfg.files).map(|i| crate::prepare::source_path(&dir, i)).collect();
            remove_prepared(&all)?;
            return Err(e);
        }
    };
    let targets: Vec<PathBuf> = if cfg.rw.writes_targets() { (0..cfg.files).map(|i| target_path(&dir, i)).collect() } else { Vec::new() };
    let fio = fio_jobs(cfg, &dir, &sources, log);
    let bench = Bench { cfg, sources, targets, budget: Budget::new(cfg.budget_bytes), kswapd: kswapd_pids(), hierarchy, dir: dir.clone(), cancel };
    let kinds: Vec<Kind> = (0..cfg.modes.len()).map(Kind::Ours).chain((0..fio.len()).map(Kind::Fio)).collect();
    let names: Vec<String> = kinds
        .iter()
        .map(|k| match *k {
            Kind::Ours(i) => cfg.modes[i].to_string(),
            Kind::Fio(i) => format!("fio {}", fio[i].0),
        })
        .collect();
    let runs = cfg.runs.unwrap_or_else(|| default_rounds(kinds.len()));
    let schedule = schedule(kinds.len(), runs as usize);

    let results = run_rounds(&bench, &kinds, &fio, &schedule, log);
    // Whatever happened, leave no written file behind (the sources stay for reuse when asked).
    let mut cleanup = remove_all(&bench.targets);
    if cfg.rw == Rw::Write {
        for (_, job) in &fio {
            cleanup = cleanup.and(remove_all(&job.files));
        }
    }
    cleanup = cleanup.and(remove_prepared(&bench.sources));
    // Whatever failed once a signal came, the run was interrupted.
    let results = results.map_err(|e| if cancel.load(Ordering::Relaxed) { Error::Interrupted } else { e })?;
    cleanup?;

    let mut report = BenchReport {
        schema: SCHEMA.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        config: config_report(cfg, schedule.iter().map(|o| o.iter().map(|&k| names[k].clone()).collect()).collect(), &dir),
        system: system_report(&dir, cgroup_version),
        modes: cfg.modes.iter().zip(results.trials).zip(results.decisions).map(|((m, t), d)| ModeReport::summarize(m.to_string(), d, t)).collect(),
        fio: fio
            .into_iter()
            .zip(results.fio)
            .map(|((m, job), (runs, positions))| FioReport {
                mode: m.to_string(),
                command: job.command_line(),
                mib_s: Spread::of(&runs),
                runs_mib_s: runs,
                runs_position: positions,
                mib_s_by_position: Vec::new(),
                position_effect: None,
                ours_mib_s: None,
                ours_vs_fio_pct: None,
            })
            .collect(),
    };
    report.finish();
    Ok(report)
}

/// The source files (read, randread, copy) and the neighbour scenario's hot file.
fn prepare(cfg: &BenchConfig, dir: &Path, cancel: &AtomicBool, log: Log<'_>) -> Result<Vec<PathBuf>> {
    let sources = if cfg.rw.reads_sources() { prepare_sources(cfg, dir, cancel, log)? } else { Vec::new() };
    if cfg.scenario == Scenario::Neighbour {
        crate::prepare::prepare_file(cfg, &hot_path(dir), cfg.hot_size, 0x0070_6f74, cancel, log)?;
    }
    Ok(sources)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fs_type_from_mountinfo() {
        let mi = include_str!("../tests/data/mountinfo.txt");
        assert_eq!(fs_type_of(mi, Path::new("/")).as_deref(), Some("ext4"));
        assert_eq!(fs_type_of(mi, Path::new("/sys/fs/cgroup/memory")).as_deref(), Some("cgroup"));
    }
}
