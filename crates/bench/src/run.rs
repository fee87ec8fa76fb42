//! The benchmark itself: prepares the files, runs cold, interleaved trials of each mode (A B C A B C ...),
//! optionally inside a memory cgroup and beside fio, and summarizes them into a [`BenchReport`].

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use cacheless::residency::{evict_path, residency_of};
use cacheless::{
    copy_file, BackendKind, Budget, Mode, Progress, ReadOptions, Reader, WriteOptions, Writer,
};

use crate::cgroup::{self, MemoryCgroup};
use crate::error::{Error, Result};
use crate::fio::FioJob;
use crate::meter::measure;
use crate::procfs::{kswapd_pids, parse_mountinfo, read_meminfo};
use crate::report::{
    BenchReport, ConfigReport, FioReport, ModeReport, SystemReport, TrialReport, SCHEMA,
};
use crate::stats::Spread;

/// The workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rw {
    /// Each thread reads whole files sequentially (streaming reader with read-ahead).
    Read,
    /// Each thread writes whole files sequentially and makes them durable.
    Write,
    /// Each thread reads block-size requests at random aligned offsets, file size bytes per file.
    RandRead,
    /// Each thread copies whole files (reads handed to the writer without a copy), durable at the end.
    Copy,
}

impl Rw {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Rw::Read => "read",
            Rw::Write => "write",
            Rw::RandRead => "randread",
            Rw::Copy => "copy",
        }
    }
    fn reads_sources(self) -> bool {
        self != Rw::Write
    }
    fn writes_targets(self) -> bool {
        matches!(self, Rw::Write | Rw::Copy)
    }
}

impl FromStr for Rw {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Rw, String> {
        Ok(match s {
            "read" => Rw::Read,
            "write" => Rw::Write,
            "randread" => Rw::RandRead,
            "copy" => Rw::Copy,
            _ => {
                return Err(format!(
                    "unknown workload '{s}': expected read, write, randread or copy"
                ))
            }
        })
    }
}

/// Where trials run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// As the system is.
    Normal,
    /// Inside a memory cgroup limited to [`BenchConfig::memory_limit`].
    LowMemory,
}

impl FromStr for Scenario {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Scenario, String> {
        match s {
            "normal" => Ok(Scenario::Normal),
            "low-memory" | "lowmem" | "low_memory" => Ok(Scenario::LowMemory),
            _ => Err(format!(
                "unknown scenario '{s}': expected normal or low-memory"
            )),
        }
    }
}

/// Everything a benchmark run needs.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// The workload.
    pub rw: Rw,
    /// Number of files (each read or written whole by one thread at a time).
    pub files: usize,
    /// Bytes per file.
    pub file_size: u64,
    /// Worker threads; they take files from a shared list.
    pub threads: usize,
    /// Request size.
    pub block_size: usize,
    /// Requests in flight per file.
    pub queue_depth: usize,
    /// Engine backend.
    pub backend: BackendKind,
    /// Memory budget for the engine's buffers, all threads together.
    pub budget_bytes: usize,
    /// Modes, run in this order in every round.
    pub modes: Vec<Mode>,
    /// Rounds.
    pub runs: u32,
    /// Normal or low-memory.
    pub scenario: Scenario,
    /// cgroup limit for the low-memory scenario.
    pub memory_limit: u64,
    /// Directory for the files; `None`: a temporary folder under the current directory, removed at the end.
    pub dir: Option<PathBuf>,
    /// Also drop all caches system-wide before each trial (root only).
    pub drop_caches: bool,
    /// Run fio's equivalent job for buffered and direct.
    pub vs_fio: bool,
    /// Remove the source files at the end. With `dir` set, keeping them (false) lets later runs reuse them;
    /// a temporary folder is removed in any case.
    pub remove_files: bool,
}

impl BenchConfig {
    /// The quick built-in comparison: 2 threads each reading its own file, all modes, 3 rounds, with a total
    /// size from free disk and RAM (a quarter of free disk space, half of RAM, at most 4 GiB, at least 256 MiB).
    pub fn quick(dir_for_space: &Path) -> BenchConfig {
        let avail_disk = rustix::fs::statvfs(dir_for_space)
            .map(|s| s.f_bavail.saturating_mul(s.f_frsize))
            .unwrap_or(1 << 30);
        let mem = read_meminfo().map(|m| m.total).unwrap_or(2 << 30);
        let total = (avail_disk / 4).min(mem / 2).clamp(256 << 20, 4 << 30);
        let per_file = (total / 2) & !((1 << 20) - 1);
        BenchConfig {
            rw: Rw::Read,
            files: 2,
            file_size: per_file.max(1 << 20),
            threads: 2,
            block_size: cacheless::read::DEFAULT_BLOCK_SIZE,
            queue_depth: cacheless::read::DEFAULT_QUEUE_DEPTH,
            backend: BackendKind::Auto,
            budget_bytes: 256 << 20,
            modes: Mode::ALL.to_vec(),
            runs: 3,
            scenario: Scenario::Normal,
            memory_limit: 1 << 30,
            dir: None,
            drop_caches: false,
            vs_fio: false,
            remove_files: true,
        }
    }
}

/// Something the caller shows the user while a run goes (the library never prints).
pub type Log<'a> = &'a mut dyn FnMut(&str);

fn source_path(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("cacheless-bench-{i}.dat"))
}
fn target_path(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("cacheless-bench-out-{i}.dat"))
}
fn fio_target_path(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("cacheless-bench-fio-{i}.dat"))
}

/// xorshift64*: the benchmark's data and random offsets only need to be cheap and not compressible; `rand`
/// would add a dependency for ten lines.
#[derive(Debug, Clone)]
struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

fn make_block(seed: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    XorShift(seed | 1).fill(&mut b);
    b
}

/// Creates (or reuses, when the size matches) the source files, written with the engine in auto mode so that
/// preparing them does not fill the page cache.
fn prepare_sources(cfg: &BenchConfig, dir: &Path, log: Log) -> Result<Vec<PathBuf>> {
    let budget = Budget::new(cfg.budget_bytes);
    let mut out = Vec::new();
    for i in 0..cfg.files {
        let p = source_path(dir, i);
        if std::fs::metadata(&p)
            .map(|m| m.len() == cfg.file_size)
            .unwrap_or(false)
        {
            out.push(p);
            continue;
        }
        log(&format!(
            "creating {} ({} bytes)",
            p.display(),
            cfg.file_size
        ));
        let mut wo = WriteOptions::new(budget.clone());
        wo.size_hint = Some(cfg.file_size);
        wo.block_size = cfg.block_size.max(1 << 20);
        let mut w = Writer::create(&p, &wo)?;
        let mut block = make_block(0x9e37_79b9 + i as u64, wo.block_size);
        let mut left = cfg.file_size;
        let mut n = 0u64;
        while left > 0 {
            let k = left.min(block.len() as u64) as usize;
            // Make every block different, so that nothing below us can deduplicate it.
            block[..8].copy_from_slice(&n.to_le_bytes());
            w.write_all(&block[..k])
                .map_err(|e| Error::io(&p, "write", e))?;
            left -= k as u64;
            n += 1;
        }
        w.finish()?;
        out.push(p);
    }
    Ok(out)
}

fn remove_if_exists(p: &Path) -> Result<()> {
    match std::fs::remove_file(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(p, "remove", e)),
    }
}

fn remove_all(paths: &[PathBuf]) -> Result<()> {
    paths.iter().try_for_each(|p| remove_if_exists(p))
}

/// Brings the files to a cold state: evicts them, optionally drops all caches, and returns the bytes still
/// resident afterwards.
fn make_cold(files: &[PathBuf], drop_caches: bool) -> Result<u64> {
    rustix::fs::sync();
    if drop_caches {
        let p = "/proc/sys/vm/drop_caches";
        std::fs::write(p, "3").map_err(|e| Error::io(p, "write (needs root)", e))?;
    }
    let mut resident = 0;
    for f in files {
        let (_, after) = evict_path(f)?;
        resident += after.cached_bytes();
    }
    Ok(resident)
}

fn resident_bytes(files: &[PathBuf]) -> (u64, u64) {
    let mut cached = 0;
    let mut total = 0;
    for f in files {
        if let Ok(r) = residency_of(f) {
            cached += r.cached_bytes();
            total += r.total_bytes();
        }
    }
    (cached, total)
}

struct Ctx<'a> {
    cfg: &'a BenchConfig,
    mode: Mode,
    budget: Budget,
    sources: &'a [PathBuf],
    targets: &'a [PathBuf],
    decisions: Mutex<BTreeSet<String>>,
}

impl Ctx<'_> {
    fn ro(&self) -> ReadOptions {
        let mut o = ReadOptions::new(self.budget.clone());
        o.mode = self.mode;
        o.backend = self.cfg.backend;
        o.block_size = self.cfg.block_size;
        o.queue_depth = self.cfg.queue_depth;
        o
    }
    fn wo(&self) -> WriteOptions {
        let mut o = WriteOptions::new(self.budget.clone());
        o.mode = self.mode;
        o.backend = self.cfg.backend;
        o.block_size = self.cfg.block_size;
        o.queue_depth = self.cfg.queue_depth;
        o.size_hint = Some(self.cfg.file_size);
        o.sync = true;
        o
    }
    fn note(&self, what: &str, mode: Mode, reason: &str) {
        self.decisions
            .lock()
            .unwrap()
            .insert(format!("{what} {mode} ({reason})"));
    }

    /// The work of one trial: threads take file indexes from a shared counter.
    fn work(&self, progress: &Progress) -> Result<()> {
        let next = AtomicUsize::new(0);
        let n = self.cfg.files;
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..self.cfg.threads.min(n).max(1))
                .map(|t| {
                    let next = &next;
                    s.spawn(move || -> Result<()> {
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            if i >= n {
                                return Ok(());
                            }
                            self.one_file(i, t, progress)?;
                        }
                    })
                })
                .collect();
            let mut first = Ok(());
            for h in hs {
                let r = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                if first.is_ok() {
                    first = r;
                }
            }
            first
        })
    }

    fn one_file(&self, i: usize, thread: usize, progress: &Progress) -> Result<()> {
        match self.cfg.rw {
            Rw::Read => {
                let mut r = Reader::open(&self.sources[i], &self.ro())?;
                self.note("read", r.decision().mode, &r.decision().reason);
                while let Some(c) = r.next_chunk()? {
                    progress.add_bytes(c.len() as u64);
                }
            }
            Rw::RandRead => {
                let mut r = Reader::open(&self.sources[i], &self.ro())?;
                self.note("randread", r.decision().mode, &r.decision().reason);
                let bs = self.cfg.block_size as u64;
                let blocks = r.len().div_ceil(bs).max(1);
                let mut rng =
                    XorShift(0x51_7cc1_b727_220a ^ ((i as u64) << 32) ^ thread as u64 | 1);
                let mut buf = vec![0u8; bs as usize];
                for _ in 0..blocks {
                    let off = (rng.next() % blocks) * bs;
                    let got = r.read_at(&mut buf, off)?;
                    progress.add_bytes(got as u64);
                }
            }
            Rw::Write => {
                let p = &self.targets[i];
                let mut w = Writer::create(p, &self.wo())?;
                self.note("write", w.decision().mode, &w.decision().reason);
                let block = make_block(0x1234_5678 + i as u64, self.cfg.block_size);
                let mut left = self.cfg.file_size;
                while left > 0 {
                    let k = left.min(block.len() as u64) as usize;
                    w.write_all(&block[..k])
                        .map_err(|e| Error::io(p, "write", e))?;
                    progress.add_bytes(k as u64);
                    left -= k as u64;
                }
                w.finish()?;
            }
            Rw::Copy => {
                // What `cacheless cp` runs: the engine's copy, with its buffer split between reader and writer.
                let r = copy_file(
                    &self.sources[i],
                    &self.targets[i],
                    &self.ro(),
                    &self.wo(),
                    progress,
                )?;
                self.note("copy read", r.read.mode, &r.read.reason);
                self.note(
                    "copy write",
                    r.write.decision.mode,
                    &r.write.decision.reason,
                );
            }
        }
        Ok(())
    }
}

fn validate(cfg: &BenchConfig) -> Result<()> {
    if cfg.files == 0 || cfg.threads == 0 || cfg.runs == 0 || cfg.modes.is_empty() {
        return Err(Error::Usage(
            "--files, --threads, --runs and --modes must not be zero or empty".into(),
        ));
    }
    if cfg.file_size == 0 || cfg.block_size == 0 || cfg.queue_depth == 0 {
        return Err(Error::Usage(
            "--size, --bs and --queue-depth must be positive".into(),
        ));
    }
    if cfg.scenario == Scenario::LowMemory && cfg.memory_limit < (16 << 20) {
        return Err(Error::Usage(
            "--memory-limit must be at least 16 MiB".into(),
        ));
    }
    Ok(())
}

fn system_report(dir: &Path, cgroup: Option<String>) -> SystemReport {
    let fs_type = std::fs::read_to_string("/proc/self/mountinfo")
        .ok()
        .and_then(|mi| fs_type_of(&mi, dir));
    SystemReport {
        kernel: cacheless::caps::system().kernel.clone(),
        cpus: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        mem_total: read_meminfo().map(|m| m.total).unwrap_or(0),
        fs_type,
        cgroup,
    }
}

/// The file system type of the longest mount point containing `dir`.
fn fs_type_of(mountinfo: &str, dir: &Path) -> Option<String> {
    let dir = std::fs::canonicalize(dir).ok()?;
    let mut best: Option<(usize, &str)> = None;
    for m in parse_mountinfo(mountinfo) {
        let len = m.mount_point.as_os_str().len();
        if dir.starts_with(&m.mount_point) && best.map_or(true, |b| len >= b.0) {
            best = Some((len, m.fs_type));
        }
    }
    best.map(|b| b.1.to_string())
}

/// Runs the benchmark.
pub fn run(cfg: &BenchConfig, log: Log) -> Result<BenchReport> {
    validate(cfg)?;
    let tmp;
    let dir: PathBuf = match &cfg.dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(|e| Error::io(d, "create directory", e))?;
            d.clone()
        }
        None => {
            let cwd =
                std::env::current_dir().map_err(|e| Error::io(".", "current directory", e))?;
            tmp = tempfile::Builder::new()
                .prefix(".cacheless-bench-")
                .tempdir_in(&cwd)
                .map_err(|e| Error::io(&cwd, "create temporary directory", e))?;
            tmp.path().to_path_buf()
        }
    };
    // Found once: every trial's cgroup goes in the same place. Fail early, before creating gigabytes, when
    // the cgroup cannot be made.
    let hierarchy = match cfg.scenario {
        Scenario::LowMemory => Some(cgroup::detect()?),
        Scenario::Normal => None,
    };
    let cgroup_version = match &hierarchy {
        Some(h) => {
            MemoryCgroup::create_in(h.clone(), cfg.memory_limit)?.remove()?;
            Some(format!("{:?}", h.version).to_lowercase())
        }
        None => None,
    };
    let sources = if cfg.rw.reads_sources() {
        prepare_sources(cfg, &dir, log)?
    } else {
        Vec::new()
    };
    let targets: Vec<PathBuf> = if cfg.rw.writes_targets() {
        (0..cfg.files).map(|i| target_path(&dir, i)).collect()
    } else {
        Vec::new()
    };
    let kswapd = kswapd_pids();
    let budget = Budget::new(cfg.budget_bytes);
    let source_bytes = cfg.file_size * sources.len() as u64;

    let fio_modes: Vec<Mode> = if cfg.vs_fio && cfg.rw != Rw::Copy {
        if crate::fio::version().is_none() {
            log("--vs-fio: fio is not installed; skipping it");
            Vec::new()
        } else {
            cfg.modes
                .iter()
                .copied()
                .filter(|m| matches!(m, Mode::Buffered | Mode::Direct))
                .collect()
        }
    } else {
        Vec::new()
    };
    let mut fio_runs: Vec<(Mode, FioJob, Vec<f64>)> = fio_modes
        .iter()
        .map(|&m| {
            let files = if cfg.rw == Rw::Write {
                (0..cfg.files).map(|i| fio_target_path(&dir, i)).collect()
            } else {
                sources.clone()
            };
            let job = FioJob {
                rw: cfg.rw.name().to_string(),
                files,
                size: cfg.file_size,
                bs: cfg.block_size as u64,
                iodepth: cfg.queue_depth as u32,
                direct: m == Mode::Direct,
                ioengine: if cfg.backend == BackendKind::Threads {
                    "psync".into()
                } else {
                    "io_uring".into()
                },
            };
            (m, job, Vec::new())
        })
        .collect();

    let mut trials: Vec<Vec<TrialReport>> = vec![Vec::new(); cfg.modes.len()];
    let mut decisions: Vec<Vec<String>> = vec![Vec::new(); cfg.modes.len()];
    for run in 1..=cfg.runs {
        for (mi, &mode) in cfg.modes.iter().enumerate() {
            remove_all(&targets)?;
            let resident_start = make_cold(&sources, cfg.drop_caches)?;
            if resident_start > source_bytes / 100 {
                log(&format!(
                    "WARNING: {resident_start} bytes of the files are still cached after eviction \
                     (mapped or locked by another program?): this trial does not start cold"
                ));
            }
            let ctx = Ctx {
                cfg,
                mode,
                budget: budget.clone(),
                sources: &sources,
                targets: &targets,
                decisions: Mutex::new(BTreeSet::new()),
            };
            let mut cg = match &hierarchy {
                Some(h) => {
                    let mut cg = MemoryCgroup::create_in(h.clone(), cfg.memory_limit)?;
                    cg.enter()?;
                    Some(cg)
                }
                None => None,
            };
            let result = measure(cg.as_ref(), &kswapd, |c| ctx.work(c));
            if let Some(cg) = cg.as_mut() {
                cg.leave()?;
            }
            let mut t = result?;
            // Residency before the cgroup goes: removing it reclaims what was charged to it.
            let (cached, total) = resident_bytes(if cfg.rw.writes_targets() {
                &targets
            } else {
                &sources
            });
            if let Some(cg) = cg {
                cg.remove()?;
            }
            t.run = run;
            t.files_resident_start_bytes = resident_start;
            t.files_resident_end_bytes = cached;
            t.files_total_bytes = total;
            if t.caches_dropped_during > 0 {
                log(&format!(
                    "WARNING: another program dropped the page cache {} time(s) during this trial",
                    t.caches_dropped_during
                ));
            }
            log(&format!(
                "run {run}/{} {mode}: {:.0} MiB/s, {:.2} CPU s/GiB, cache {:+.0} MiB (peak {:+.0} MiB)",
                cfg.runs,
                t.mib_s,
                t.cpu_s_per_gib,
                t.cache.growth_bytes as f64 / 1048576.0,
                t.cache.peak_growth_bytes as f64 / 1048576.0
            ));
            if run == 1 {
                decisions[mi] = ctx.decisions.into_inner().unwrap().into_iter().collect();
            }
            trials[mi].push(t);
        }
        for (m, job, out) in &mut fio_runs {
            if cfg.rw == Rw::Write {
                remove_all(&job.files)?;
            }
            make_cold(&sources, cfg.drop_caches)?;
            let bw = job.run()?;
            log(&format!("run {run}/{} fio {m}: {bw:.0} MiB/s", cfg.runs));
            out.push(bw);
        }
    }
    if cfg.rw == Rw::Write {
        for (_, job, _) in &fio_runs {
            remove_all(&job.files)?;
        }
    }
    remove_all(&targets)?;
    if cfg.remove_files {
        remove_all(&sources)?;
    }

    let mut report = BenchReport {
        schema: SCHEMA.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        config: ConfigReport {
            rw: cfg.rw.name().into(),
            files: cfg.files,
            file_size: cfg.file_size,
            threads: cfg.threads,
            block_size: cfg.block_size as u64,
            queue_depth: cfg.queue_depth as u32,
            backend: cfg.backend.to_string(),
            modes: cfg.modes.iter().map(|m| m.to_string()).collect(),
            runs: cfg.runs,
            scenario: match cfg.scenario {
                Scenario::Normal => "normal".into(),
                Scenario::LowMemory => "low-memory".into(),
            },
            memory_limit: (cfg.scenario == Scenario::LowMemory).then_some(cfg.memory_limit),
            drop_caches: cfg.drop_caches,
            dir: dir.display().to_string(),
        },
        system: system_report(&dir, cgroup_version),
        modes: cfg
            .modes
            .iter()
            .zip(trials)
            .zip(decisions)
            .map(|((m, t), d)| ModeReport::summarize(m.to_string(), d, t))
            .collect(),
        fio: fio_runs
            .into_iter()
            .map(|(m, job, runs)| FioReport {
                mode: m.to_string(),
                command: job.command_line(),
                mib_s: Spread::of(&runs),
                runs_mib_s: runs,
                ours_mib_s: None,
                ours_vs_fio_pct: None,
            })
            .collect(),
    };
    report.finish();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse() {
        assert_eq!("randread".parse::<Rw>().unwrap(), Rw::RandRead);
        assert!("sideways".parse::<Rw>().is_err());
        assert_eq!(
            "low-memory".parse::<Scenario>().unwrap(),
            Scenario::LowMemory
        );
    }

    #[test]
    fn fs_type_from_mountinfo() {
        let mi = include_str!("../tests/data/mountinfo.txt");
        assert_eq!(fs_type_of(mi, Path::new("/")).as_deref(), Some("ext4"));
        assert_eq!(
            fs_type_of(mi, Path::new("/sys/fs/cgroup/memory")).as_deref(),
            Some("cgroup")
        );
    }

    #[test]
    fn xorshift_is_not_constant() {
        let b = make_block(7, 4096);
        assert_ne!(&b[..8], &b[8..16]);
        assert_eq!(b, make_block(7, 4096));
    }

    #[test]
    fn quick_config_is_bounded() {
        let c = BenchConfig::quick(Path::new("."));
        assert!(c.file_size * 2 <= 4 << 30 && c.file_size >= 1 << 20);
        assert_eq!(c.modes.len(), 5);
    }
}
