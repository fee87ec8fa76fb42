//! The settings every job shares (mode, backend, request size, depth, memory budget), in one
//! value that front ends build once from their flags or keywords and jobs embed.

use crate::buf::Budget;
use crate::mode::{BackendKind, Mode};

/// Default size of one I/O request. Chosen by measurement on the development machine: see
/// docs/BENCHMARKS.md, "request size and queue depth".
pub const DEFAULT_BLOCK_SIZE: usize = 4 << 20;
/// Default number of requests in flight per file (same measurement).
pub const DEFAULT_QUEUE_DEPTH: usize = 8;
/// Default memory budget for all the buffers of one job: 256 MiB holds the default queue of
/// 4 MiB requests for several files at once and is small beside the machines that move big data.
pub const DEFAULT_BUDGET: usize = 256 << 20;

/// How a job reads and writes: the mode and backend asked for, the request size and depth, and
/// the budget every buffer comes out of. Cloning shares the budget.
#[derive(Debug, Clone)]
pub struct IoOptions {
    /// Requested mode (default auto: decided per file, with the reason reported).
    pub mode: Mode,
    /// Requested backend (default auto: io_uring where the kernel allows it, else threads).
    pub backend: BackendKind,
    /// Size of each request; rounded up to the O_DIRECT alignment. At most 1 GiB.
    pub block_size: usize,
    /// Requests in flight per file (read-ahead depth; for writes, 0 writes through).
    pub queue_depth: usize,
    /// The memory budget buffers come out of.
    pub budget: Budget,
}

impl IoOptions {
    /// Defaults (auto mode and backend, default request size and depth) with `budget`.
    pub fn new(budget: Budget) -> IoOptions {
        IoOptions { mode: Mode::Auto, backend: BackendKind::Auto, block_size: DEFAULT_BLOCK_SIZE, queue_depth: DEFAULT_QUEUE_DEPTH, budget }
    }
}

impl Default for IoOptions {
    /// Defaults with a budget of its own of [`DEFAULT_BUDGET`].
    fn default() -> IoOptions {
        IoOptions::new(Budget::new(DEFAULT_BUDGET))
    }
}
