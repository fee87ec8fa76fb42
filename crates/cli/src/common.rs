//! Options shared by every command, and their translation into engine options.

use std::path::PathBuf;

use cacheless::{BackendKind, Budget, IoOptions, Mode};
use clap::Args;

/// Parses sizes such as `4M`, `1GiB`, `512k` or `4096`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    cacheless::parse_size(s).map_err(|e| e.to_string())
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
    #[arg(long, global = true, value_parser = parse_size)]
    pub block_size: Option<u64>,
    /// Requests kept in flight per file.
    #[arg(long, global = true)]
    pub queue_depth: Option<u32>,
    /// Budget for all in-flight buffers together [default: 256M].
    #[arg(long, global = true, value_parser = parse_size)]
    pub memory: Option<u64>,
    /// Print a machine-readable JSON report instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Say which mode and backend each file got, and why (extract: name each member as it is
    /// extracted, as GNU tar -v, and `-vv` in GNU's long listing; its summary is `extract
    /// --debug`).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

impl CommonOpts {
    /// The engine's I/O options from the flags, with one memory budget shared by everything
    /// this command does: the one place the flags become engine settings.
    pub fn io(&self) -> IoOptions {
        let mut o = IoOptions { mode: self.mode, backend: self.backend, ..IoOptions::default() };
        if let Some(b) = self.block_size {
            o.block_size = cacheless::conv::usize_of(b);
        }
        if let Some(q) = self.queue_depth {
            o.queue_depth = q as usize;
        }
        if let Some(m) = self.memory {
            o.budget = Budget::new(cacheless::conv::usize_of(m));
        }
        o
    }
}

/// Where a command was asked to put its temporary work.
pub fn default_workdir() -> PathBuf {
    std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."))
}
