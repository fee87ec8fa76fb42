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
//! use cacheless::{Budget, ReadOptions, Reader, WriteOptions, Writer};
//! let budget = Budget::new(256 << 20);
//! let mut r = Reader::open("big.bin", &ReadOptions::new(budget.clone()))?;
//! let mut wo = WriteOptions::new(budget);
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

mod backend;
pub mod buf;
pub mod caps;
pub mod conv;
mod copy;
pub mod create;
pub mod digest;
pub mod error;
#[cfg(feature = "fault-injection")]
pub mod fault;
#[cfg(not(feature = "fault-injection"))]
mod fault;
pub mod info;
pub mod policy;
mod progress;
pub mod read;
pub mod residency;
mod setup;
pub mod write;

pub use backend::{BackendChoice, BackendKind};
pub use buf::{AlignedBuf, Budget};
pub use copy::{copy_file, CopyReport};
pub use create::{CreateOptions, FileAttrs, FileCreator, NewFile};
pub use error::{Error, ErrorKind, Hint, Result};
pub use policy::{Decision, Mode};
pub use progress::Progress;
pub use read::{Chunk, ReadOptions, Reader};
pub use write::{WriteOptions, WriteReport, Writer};

/// Parses a size such as `4096`, `512k`, `4M`, `1GiB` or `1.5G` (binary units).
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("invalid size '{s}': expected a number with an optional unit (k, M, G, T)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        u => return Err(format!("invalid size '{s}': unknown unit '{u}' (use k, M, G or T)")),
    };
    let v = n * mult as f64;
    if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
        return Err(format!("invalid size '{s}': out of range"));
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // Checked above: finite, in 0..=u64::MAX.
    Ok(v as u64)
}
