//! Options shared by every command, and their translation into engine options.

use std::path::PathBuf;

use cacheless::{BackendKind, Budget, IoOptions, Mode};
use clap::Args;

/// Parses sizes such as `4M`, `1GiB`, `512k` or `4096`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    cacheless::parse_size(s).map_err(|e| e.to_string())
}

/// A size held to `check`'s bounds (see `cacheless::limits`): past them a usage error.
fn bounded_size(s: &str, flag: &str, check: fn(&str, u64) -> Result<usize, String>) -> Result<usize, String> {
    check(flag, parse_size(s)?)
}

/// `--block-size`: a size, at most 1 GiB.
pub fn parse_block_size(s: &str) -> Result<usize, String> {
    bounded_size(s, "--block-size", cacheless::limits::block_size)
}

/// `--memory`: a size, clamped to the machine's memory.
pub fn parse_memory(s: &str) -> Result<usize, String> {
    bounded_size(s, "--memory", cacheless::limits::memory)
}

/// A count held to `check`'s bounds.
fn bounded_count(s: &str, flag: &str, check: fn(&str, u64) -> Result<usize, String>) -> Result<usize, String> {
    let v: u64 = s.trim().parse().map_err(|_| format!("invalid value '{s}' for '{flag}': expected a whole number"))?;
    check(flag, v)
}

/// `--queue-depth`: 0 to `cacheless::limits::MAX_QUEUE_DEPTH`.
pub fn parse_queue_depth(s: &str) -> Result<usize, String> {
    bounded_count(s, "--queue-depth", cacheless::limits::queue_depth)
}

/// `--threads`: 1 to `cacheless::limits::MAX_THREADS`.
pub fn parse_threads(s: &str) -> Result<usize, String> {
    bounded_count(s, "--threads", cacheless::limits::threads)
}

/// `--read-threads`, as `--threads`.
pub fn parse_read_threads(s: &str) -> Result<usize, String> {
    bounded_count(s, "--read-threads", cacheless::limits::threads)
}

/// `--decompress-threads`, as `--threads`.
pub fn parse_decompress_threads(s: &str) -> Result<usize, String> {
    bounded_count(s, "--decompress-threads", cacheless::limits::threads)
}

/// The flags every command takes.
#[derive(Args, Debug, Clone)]
pub struct CommonOpts {
    /// I/O mode: auto picks per file and says why (see `cacheless info`).
    #[arg(long, global = true, default_value = "auto")]
    pub mode: Mode,
    /// I/O backend: auto uses io_uring when the kernel allows it, else a thread pool.
    #[arg(long, global = true, default_value = "auto")]
    pub backend: BackendKind,
    /// Size of each I/O request (default chosen by measurement, see docs/BENCHMARKS.md).
    #[arg(long, global = true, value_parser = parse_block_size)]
    pub block_size: Option<usize>,
    /// Requests kept in flight per file.
    #[arg(long, global = true, value_parser = parse_queue_depth)]
    pub queue_depth: Option<usize>,
    /// Budget for all in-flight buffers together [default: 256M; at most the machine's memory].
    #[arg(long, global = true, value_parser = parse_memory)]
    pub memory: Option<usize>,
    /// Print a machine-readable JSON report instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Say which mode and backend each file got, and why (extract: name each member as it is
    /// extracted, as GNU tar -v, and `-vv` in GNU's long listing; its summary is `extract
    /// --debug`).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Transfers to and from s3:// and http(s):// URLs.
    #[command(flatten)]
    pub remote: crate::remote::RemoteFlags,
}

impl CommonOpts {
    /// The engine's I/O options from the flags, with one memory budget shared by everything
    /// this command does: the one place the flags become engine settings.
    pub fn io(&self) -> IoOptions {
        let mut o = IoOptions { mode: self.mode, backend: self.backend, ..IoOptions::default() };
        if let Some(b) = self.block_size {
            o.block_size = b;
        }
        if let Some(q) = self.queue_depth {
            o.queue_depth = q;
        }
        if let Some(m) = self.memory {
            o.budget = Budget::new(m);
        }
        o
    }
}

/// Where a command was asked to put its temporary work.
pub fn default_workdir() -> PathBuf {
    std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."))
}
