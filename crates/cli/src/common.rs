//! Options shared by every command, and their translation into engine options.

use std::path::PathBuf;

use cacheless::{BackendKind, Budget, IoOptions, Mode, ReadOptions, WriteOptions};
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
    /// Budget for all in-flight buffers together.
    #[arg(long, global = true, value_parser = parse_size, default_value = "256M")]
    pub memory: u64,
    /// Print a machine-readable JSON report instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Say which mode and backend each file got, and why.
    #[arg(short, long, global = true)]
    pub verbose: bool,
}

impl CommonOpts {
    /// One memory budget shared by everything this command does.
    pub fn budget(&self) -> Budget {
        Budget::new(cacheless::conv::usize_of(self.memory))
    }

    /// The engine's I/O settings from the flags, with `budget`.
    pub fn io_options(&self, budget: &Budget) -> IoOptions {
        let mut io = IoOptions::new(budget.clone());
        io.mode = self.mode;
        io.backend = self.backend;
        if let Some(b) = self.block_size {
            io.block_size = cacheless::conv::usize_of(b);
        }
        if let Some(q) = self.queue_depth {
            io.queue_depth = q as usize;
        }
        io
    }

    /// Engine read options from the flags.
    pub fn read_options(&self, budget: &Budget) -> ReadOptions {
        ReadOptions::from(self.io_options(budget))
    }

    /// Engine write options from the flags.
    pub fn write_options(&self, budget: &Budget) -> WriteOptions {
        WriteOptions::from(self.io_options(budget))
    }
}

/// Where a command was asked to put its temporary work.
pub fn default_workdir() -> PathBuf {
    std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."))
}
