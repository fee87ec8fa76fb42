//! cacheless: read, write and copy big files at direct-I/O speed without filling the page cache.
//!
//! The engine picks, per file, the best mechanism the kernel and filesystem offer (O_DIRECT,
//! RWF_DONTCACHE, write-behind, or buffered for files already cached), says which and why, and
//! hides alignment: any buffer, any offset, any length. I/O runs on io_uring or, where that is
//! missing or blocked, a thread pool, with every in-flight buffer taken from one memory budget.
//! Large files stream through a [`Reader`] or a [`Writer`]; whole small files are written in
//! one call by a [`FileCreator`].
//!
//! ```no_run
//! use cacheless::{IoOptions, ReadOptions, Reader, WriteOptions, Writer};
//! // Mode, backend, request size and depth, and one memory budget for every buffer.
//! let io = IoOptions::default();
//! let mut r = Reader::open("big.bin", &ReadOptions::from(io.clone()))?;
//! let mut wo = WriteOptions::from(io);
//! wo.size_hint = Some(r.len());
//! let mut w = Writer::create("copy.bin", &wo)?;
//! while let Some(chunk) = r.next_chunk()? {
//!     w.write_chunk(chunk)?;
//! }
//! let report = w.finish()?;
//! println!("{} bytes, {} ({})", report.bytes, report.decision.mode, report.decision.reason);
//! # Ok::<(), cacheless::Error>(())
//! ```
#![deny(unsafe_code)]
// A library reports through its return values and progress counters; front ends print.
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]
#![warn(missing_docs)]

use cacheless_sys::backend;
pub mod backup;
use cacheless_sys::buf;
pub use cacheless_sys::caps;
pub use cacheless_sys::conv;
mod copy;
mod create;
mod create_queue;
pub mod digest;
use cacheless_sys::env;
use cacheless_sys::error;
#[cfg(feature = "fault-injection")]
pub use cacheless_sys::fault;
#[cfg(not(feature = "fault-injection"))]
use cacheless_sys::fault;
pub mod info;
pub use cacheless_sys::interrupt;
pub mod limits;
use cacheless_sys::mode;
mod options;
mod pending;
mod plan;
mod policy;
pub mod pool;
mod progress;
pub use cacheless_sys::quote;
mod rate;
mod read;
pub use cacheless_sys::residency;
#[doc(hidden)]
pub use cacheless_sys::sys;
pub use cacheless_sys::temps;

mod units;
mod write;

pub use backend::{BackendChoice, BackendKind, BackendReason, Buffers};
pub use buf::{round_up, AlignedBuf, Budget, Lease, LeaseRequest, Shares};
pub use copy::{
    copy_file, copy_file_with, copy_in_place, copy_xattrs, open_parent, stage_copy, stage_copy_from, Carry, CopyOptions, CopyReport, Method, Ownership,
    Reflink, Source, Sparse, Staged, VerifyHook, VerifyReport, Xattrs,
};
pub use create::{sync_filesystem, CreateOptions, FileAttrs, FileCreator, Keeper, NewFile, Published};
pub use create_queue::{CreateQueue, CreateTicket};
pub use env::{check_disabled, disabled};
pub use error::{strerror, Error, ErrorKind, Hint, Result};
pub use mode::{Mode, Taken};
pub use options::{Durability, IoOptions, Naming, DEFAULT_BLOCK_SIZE, DEFAULT_BUDGET, DEFAULT_QUEUE_DEPTH};
pub use pending::{initial_mode, Named, Parked, PendingFile};
pub use plan::{check_forced, Plan};
pub use policy::{decide_read, decide_write, Decision, Reason, Refusal};
pub use progress::Progress;
pub use rate::RateLimit;
pub use read::{Chunk, ReadOptions, Reader};
pub use units::{human_bytes, parse_size, utc_time};
pub use write::{WriteOptions, WriteReport, Writer};
