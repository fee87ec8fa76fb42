//! What a benchmark run is asked to do: the workload, the scenario and [`BenchConfig`].

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use cacheless::{BackendKind, Mode};

use crate::error::{Error, Result};
use crate::procfs::read_meminfo;

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
    pub(crate) fn reads_sources(self) -> bool {
        self != Rw::Write
    }
    pub(crate) fn writes_targets(self) -> bool {
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
            _ => return Err(format!("unknown workload '{s}': expected read, write, randread or copy")),
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
    /// Machine-wide memory pressure: a helper process holds anonymous memory (touched, locked when allowed)
    /// so that only [`BenchConfig::free`] stays available during each trial (see the scenario module).
    Pressure,
    /// A co-tenant process re-reads a hot file of [`BenchConfig::hot_size`] bytes, fully cached before the
    /// trial, while the trial runs (see the scenario module).
    Neighbour,
}

impl Scenario {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Normal => "normal",
            Scenario::LowMemory => "low-memory",
            Scenario::Pressure => "pressure",
            Scenario::Neighbour => "neighbour",
        }
    }
}

impl FromStr for Scenario {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Scenario, String> {
        match s {
            "normal" => Ok(Scenario::Normal),
            "low-memory" | "lowmem" | "low_memory" => Ok(Scenario::LowMemory),
            "pressure" => Ok(Scenario::Pressure),
            "neighbour" | "neighbor" => Ok(Scenario::Neighbour),
            _ => Err(format!("unknown scenario '{s}': expected normal, low-memory, pressure or neighbour")),
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
    /// Modes, in the order of the first round; later rounds rotate it (see [`crate::schedule`]).
    pub modes: Vec<Mode>,
    /// Rounds; `None`: a full Latin square of the kinds of trial (modes, plus fio's with `vs_fio`), at
    /// least 3 rounds ([`crate::schedule::default_rounds`]).
    pub runs: Option<u32>,
    /// Normal or low-memory.
    pub scenario: Scenario,
    /// cgroup limit for the low-memory scenario.
    pub memory_limit: u64,
    /// Bytes left available machine-wide (MemAvailable) during each trial of the pressure scenario.
    pub free: u64,
    /// Size of the co-tenant's hot file in the neighbour scenario.
    pub hot_size: u64,
    /// The program whose `bench-helper` subcommand runs the helper processes of the pressure and neighbour
    /// scenarios (the `cacheless` binary); `None`: this executable, which must then call
    /// [`crate::helper::main`] for that subcommand as `cacheless` does.
    pub helper: Option<PathBuf>,
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
    /// The quick built-in comparison (`cacheless demo`): 2 threads each reading its own file, all modes, a
    /// full square of rounds (each mode once in each position: 5 rounds), with a total size from free disk
    /// and RAM (a quarter of free disk space, half of RAM, at most 2 GiB, at least 256 MiB). 25 trials of
    /// 2 GiB take about a minute on a disk that reads 1.5 GiB/s; the size is kept small so that the square
    /// stays whole.
    pub fn quick(dir_for_space: &Path) -> BenchConfig {
        let avail_disk = cacheless::sys::space_available(dir_for_space).unwrap_or(1 << 30);
        let mem = read_meminfo().map(|m| m.total).unwrap_or(2 << 30);
        let total = (avail_disk / 4).min(mem / 2).clamp(256 << 20, 2 << 30);
        let per_file = (total / 2) & !((1 << 20) - 1);
        BenchConfig {
            rw: Rw::Read,
            files: 2,
            file_size: per_file.max(1 << 20),
            threads: 2,
            block_size: cacheless::DEFAULT_BLOCK_SIZE,
            queue_depth: cacheless::DEFAULT_QUEUE_DEPTH,
            backend: BackendKind::Auto,
            budget_bytes: cacheless::DEFAULT_BUDGET,
            modes: Mode::ALL.to_vec(),
            runs: None,
            scenario: Scenario::Normal,
            memory_limit: 1 << 30,
            free: 1 << 30,
            hot_size: 1 << 30,
            helper: None,
            dir: None,
            drop_caches: false,
            vs_fio: false,
            remove_files: true,
        }
    }
}

/// The smallest `--free`: leaving less available risks the OOM killer (the trial's own buffers, the
/// kernel's reserves and everything else running need it).
pub const MIN_FREE: u64 = 256 << 20;

pub(crate) fn validate(cfg: &BenchConfig) -> Result<()> {
    if cfg.files == 0 || cfg.threads == 0 || cfg.runs == Some(0) || cfg.modes.is_empty() {
        return Err(Error::Usage("--files, --threads, --runs and --modes must not be zero or empty".into()));
    }
    if cfg.file_size == 0 || cfg.block_size == 0 || cfg.queue_depth == 0 {
        return Err(Error::Usage("--size, --bs and --queue-depth must be positive".into()));
    }
    if cfg.scenario == Scenario::LowMemory && cfg.memory_limit < (16 << 20) {
        return Err(Error::Usage("--memory-limit must be at least 16 MiB".into()));
    }
    if cfg.scenario == Scenario::Pressure && cfg.free < MIN_FREE {
        return Err(Error::Usage(format!("--free {} is below {} MiB: leaving less than that available risks the OOM killer", cfg.free, MIN_FREE >> 20)));
    }
    if cfg.scenario == Scenario::Neighbour && cfg.hot_size < (1 << 20) {
        return Err(Error::Usage("--hot-size must be at least 1 MiB".into()));
    }
    let mut seen = HashSet::new();
    if let Some(m) = cfg.modes.iter().find(|m| !seen.insert(**m)) {
        return Err(Error::Usage(format!("--modes names {m} twice")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse() {
        assert_eq!("randread".parse::<Rw>().unwrap(), Rw::RandRead);
        assert!("sideways".parse::<Rw>().is_err());
        assert_eq!("low-memory".parse::<Scenario>().unwrap(), Scenario::LowMemory);
        for s in [Scenario::Normal, Scenario::LowMemory, Scenario::Pressure, Scenario::Neighbour] {
            assert_eq!(s.name().parse::<Scenario>().unwrap(), s);
        }
        assert_eq!("neighbor".parse::<Scenario>().unwrap(), Scenario::Neighbour);
        let e = "crowded".parse::<Scenario>().unwrap_err();
        assert!(e.contains("pressure or neighbour"), "{e}");
    }

    #[test]
    fn quick_config_is_bounded() {
        let c = BenchConfig::quick(Path::new("."));
        assert!(c.file_size * 2 <= 2 << 30 && c.file_size >= 1 << 20);
        assert_eq!(c.modes.len(), 5);
        assert_eq!(c.runs, None);
        assert!(validate(&c).is_ok());
    }

    #[test]
    fn bad_options_are_usage_errors() {
        let ok = BenchConfig::quick(Path::new("."));
        let mut c = ok.clone();
        c.runs = Some(0);
        assert!(matches!(validate(&c), Err(Error::Usage(_))));
        let mut c = ok.clone();
        c.modes = vec![Mode::Direct, Mode::Buffered, Mode::Direct];
        let e = validate(&c).unwrap_err().to_string();
        assert!(e.contains("--modes names direct twice"), "{e}");
        let mut c = ok.clone();
        c.scenario = Scenario::Pressure;
        c.free = 100 << 20;
        let e = validate(&c).unwrap_err().to_string();
        assert!(e.contains("--free 104857600 is below 256 MiB"), "{e}");
        c.free = 1 << 30;
        assert!(validate(&c).is_ok());
        c.scenario = Scenario::Neighbour;
        c.hot_size = 4096;
        assert!(matches!(validate(&c), Err(Error::Usage(_))));
    }
}
