//! `cacheless bench`: a fio-style benchmark that also measures page-cache growth, reclaim, kswapd CPU and
//! per-second stability, for buffered, direct, dontcache, write-behind and auto I/O, in an order that rotates
//! every round. With no arguments it runs the quick built-in comparison (`cacheless demo` runs the same). The
//! text output is the table, its warnings, and a few sentences computed from the run.
//!
//! Scenarios: `normal`; `low-memory` (a memory cgroup per trial); `pressure` (a helper process holds all of
//! MemAvailable but `--free` during each trial; kswapd CPU per second, reclaim and allocation stalls are
//! reported); `neighbour` (a co-tenant re-reads a cached hot file of `--hot-size` during each trial; its
//! throughput and the share of its set evicted are reported). Their helpers are this binary run again with
//! the hidden `bench-helper` subcommand. Ctrl-C or SIGTERM stops the run (exit 130 or 143): the trial in
//! progress stops, helpers are ended and written files removed.
//!
//! Flags shared with other commands come from [`CommonOpts`]: `--queue-depth`, `--backend`, `--memory`
//! (engine buffer budget), `--block-size` (same as `--bs`) and `--json` (print the JSON report on stdout
//! instead of the table). Because `--json` is that global switch, the JSON file is `--json-out F`.

use crate::ExitCode;
use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use cacheless::Mode;
use cacheless_bench::run::{BenchConfig, Rw, Scenario};
use clap::Args;

use crate::common::{parse_size, CommonOpts};
use crate::ui;

/// Options of `cacheless bench`. Everything is optional: unset values come from the quick comparison.
#[derive(Args, Debug, Default, Clone)]
pub struct BenchArgs {
    /// Workload: read, write (durable), randread or copy (durable).
    #[arg(long, value_name = "RW")]
    pub rw: Option<Rw>,
    /// Number of files (default: one per thread).
    #[arg(long, value_name = "N")]
    pub files: Option<usize>,
    /// Size of each file (default: from free disk and RAM, a few GiB in all at most).
    #[arg(long, value_name = "S", value_parser = parse_size)]
    pub size: Option<u64>,
    /// Worker threads, each working on its own file (default 2).
    #[arg(long, value_name = "T", value_parser = crate::common::parse_threads)]
    pub threads: Option<usize>,
    /// I/O request size (default: the engine's, 4M; same as the global --block-size).
    #[arg(long, value_name = "B", value_parser = crate::common::parse_block_size)]
    pub bs: Option<usize>,
    /// Modes to compare, comma-separated (default: all). The first round runs them in this order; later
    /// rounds rotate it (a balanced Latin square, fio's trials included) so that each mode runs in each
    /// position equally often.
    #[arg(long, value_name = "M,...", value_delimiter = ',')]
    pub modes: Option<Vec<Mode>>,
    /// Rounds of interleaved trials; medians are reported with min and max (default: one full rotation,
    /// as many rounds as modes compared, fio's included, and at least 3).
    #[arg(long, value_name = "R")]
    pub runs: Option<u32>,
    /// normal; low-memory: each trial runs in a memory cgroup limited to --memory-limit (needs root);
    /// pressure: a helper process holds anonymous memory so that only --free stays available machine-wide
    /// during each trial (sized from MemAvailable right before it; refused when there is too little), and
    /// kswapd CPU per second, pgscan/pgsteal and allocation stalls are reported; neighbour: a co-tenant
    /// process re-reads a cached hot file of --hot-size during each trial, and its throughput and the share
    /// of its set evicted are reported.
    #[arg(long, value_name = "SCENARIO", verbatim_doc_comment)]
    pub scenario: Option<Scenario>,
    /// Memory cgroup limit for --scenario low-memory (default 1G).
    #[arg(long, value_name = "M", value_parser = parse_size)]
    pub memory_limit: Option<u64>,
    /// Memory left available machine-wide during each trial of --scenario pressure (default 1G, at least
    /// 256M); the trial's own buffers (--memory) come out of it.
    #[arg(long, value_name = "M", value_parser = parse_size)]
    pub free: Option<u64>,
    /// Size of the co-tenant's hot file for --scenario neighbour (default 1G); it is kept beside the
    /// benchmark's files (cacheless-bench-hot.dat) and reused.
    #[arg(long, value_name = "S", value_parser = parse_size)]
    pub hot_size: Option<u64>,
    /// Directory for the benchmark files; they are kept there and reused by later runs (default: a
    /// temporary folder under the current directory, removed at the end).
    #[arg(long, value_name = "D")]
    pub dir: Option<PathBuf>,
    /// Remove the files in --dir at the end.
    #[arg(long)]
    pub clean: bool,
    /// Write the JSON report (schema cacheless-bench/1, docs/bench-json.md) to this file.
    #[arg(long = "json-out", value_name = "F")]
    pub json_out: Option<PathBuf>,
    /// Write one CSV row per trial to this file.
    #[arg(long, value_name = "F")]
    pub csv: Option<PathBuf>,
    /// Draw per-second throughput, CPU and cache growth to this .png or .svg file.
    #[arg(long, value_name = "F")]
    pub plot: Option<PathBuf>,
    /// Also run fio's equivalent job for buffered and direct and print its bandwidth beside ours.
    #[arg(long)]
    pub vs_fio: bool,
    /// Drop all caches system-wide before each trial (echo 3 > /proc/sys/vm/drop_caches; root only).
    #[arg(long)]
    pub drop_caches: bool,
}

/// Builds the benchmark configuration from the flags.
pub fn config(args: &BenchArgs, common: &CommonOpts) -> anyhow::Result<BenchConfig> {
    // Free space is measured where the files will go, or in the current directory until --dir exists.
    let space_probe = args.dir.clone().filter(|d| d.exists()).unwrap_or_else(crate::common::default_workdir);
    let mut c = BenchConfig::quick(&space_probe);
    // Its helpers are this command line run again.
    c.helper = crate::program();
    if let Some(rw) = args.rw {
        c.rw = rw;
    }
    if let Some(t) = args.threads {
        c.threads = t;
    }
    c.files = args.files.unwrap_or(c.threads);
    if let Some(s) = args.size {
        c.file_size = s;
    }
    if let Some(b) = args.bs.or(common.block_size) {
        c.block_size = b;
    }
    if let Some(q) = common.queue_depth {
        c.queue_depth = q;
    }
    c.backend = common.backend;
    if let Some(m) = common.memory {
        c.budget_bytes = m;
    }
    if let Some(m) = &args.modes {
        c.modes = m.clone();
    }
    if let Some(r) = args.runs {
        c.runs = Some(r);
    }
    if let Some(s) = args.scenario {
        c.scenario = s;
    }
    if let Some(m) = args.memory_limit {
        c.memory_limit = m;
    }
    if let Some(f) = args.free {
        c.free = f;
    }
    if let Some(h) = args.hot_size {
        c.hot_size = h;
    }
    c.dir = args.dir.clone();
    c.remove_files = args.dir.is_none() || args.clean;
    c.drop_caches = args.drop_caches;
    c.vs_fio = args.vs_fio;
    Ok(c)
}

/// Runs `cacheless bench`: exit 0, 2 on bad flags, 130 or 143 when interrupted by SIGINT or SIGTERM.
pub fn run(args: &BenchArgs, common: &CommonOpts) -> anyhow::Result<ExitCode> {
    let cfg = config(args, common)?;
    let mut log = |s: &str| {
        let _ = writeln!(std::io::stderr(), "{s}");
    };
    // The signal handlers only set the flag; the run stops at its next check and cleans up.
    let cancel = cacheless::Progress::new();
    let signals = ui::Signals::register(&cancel);
    let report = match cacheless_bench::run::run_cancellable(&cfg, &mut log, &cancel.cancel_flag()) {
        Ok(r) => r,
        Err(e) => {
            if let Some(code) = signals.exit_code() {
                eprintln!("cacheless: bench interrupted; helper processes ended and written files removed");
                return Ok(code);
            }
            return Err(cli_error(e));
        }
    };
    // The report files are written as every file is: whole under their names, or not at all.
    let write =
        |p: &std::path::Path, data: &[u8]| cacheless::FileCreator::new(cacheless::CreateOptions::new()).replace(p, data, &cacheless::FileAttrs::default());
    if let Some(p) = &args.json_out {
        write(p, report.to_json()?.as_bytes()).with_context(|| format!("write {}", p.display()))?;
    }
    if let Some(p) = &args.csv {
        write(p, report.to_csv().as_bytes()).with_context(|| format!("write {}", p.display()))?;
    }
    if let Some(p) = &args.plot {
        cacheless_bench::plot::plot(&report, p).map_err(cli_error)?;
    }
    let out = if common.json { report.to_json()? + "\n" } else { report.text() };
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(out.as_bytes()).and_then(|_| stdout.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        r => r.context("write to stdout")?,
    }
    Ok(ExitCode::SUCCESS)
}

/// A benchmark error as the command reports it: a bad option (the configuration's validation) is a
/// usage error, exit 2; anything else is a failure, exit 1.
fn cli_error(e: cacheless_bench::Error) -> anyhow::Error {
    match e {
        cacheless_bench::Error::Usage(msg) => anyhow::Error::new(ui::UsageError(msg)),
        e => e.into(),
    }
}

/// Runs a helper process of the pressure or neighbour scenario (`cacheless bench-helper ...`, started by
/// `cacheless bench` itself): exit 0 when the benchmark ended it normally, 2 on bad arguments, 1 otherwise.
pub fn helper(args: &[String]) -> ExitCode {
    match cacheless_bench::helper::main(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cacheless {}: {e}", cacheless_bench::helper::SUBCOMMAND);
            ExitCode::from(if matches!(e, cacheless_bench::Error::Usage(_)) { 2 } else { 1 })
        }
    }
}

/// The quick built-in comparison: what `cacheless bench` does with no arguments (and `cacheless demo`).
pub fn run_default(common: &CommonOpts) -> anyhow::Result<ExitCode> {
    run(&BenchArgs::default(), common)
}
