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

mod backend;
pub mod buf;
pub mod caps;
pub mod conv;
mod copy;
pub mod create;
pub mod digest;
mod env;
pub mod error;
#[cfg(feature = "fault-injection")]
pub mod fault;
#[cfg(not(feature = "fault-injection"))]
mod fault;
pub mod info;
pub mod mode;
pub mod options;
pub mod plan;
pub mod policy;
pub mod pool;
mod progress;
pub mod rate;
pub mod read;
pub mod residency;
mod sys;
pub mod tree;
pub mod write;

pub use backend::{BackendChoice, BackendKind};
pub use buf::{AlignedBuf, Budget, LeaseRequest, Shares};
pub use copy::{
    copy_file, copy_file_with, copy_xattrs, open_parent, stage_copy, CopyOptions, CopyReport, Method, Reflink, Sparse, Staged, VerifyHook, VerifyReport,
};
pub use create::{CreateOptions, FileAttrs, FileCreator, NewFile};
pub use error::{Error, ErrorKind, Hint, Result};
pub use options::{IoOptions, DEFAULT_BUDGET};
pub use plan::Plan;
pub use policy::{Decision, Mode};
pub use progress::Progress;
pub use rate::RateLimit;
pub use read::{Chunk, ReadOptions, Reader};
pub use tree::{copy_tree, TreeOptions, TreeReport};
pub use write::{WriteOptions, WriteReport, Writer};

/// Parses a size such as `4096`, `512k`, `4M`, `1GiB` or `1.5G` (binary units).
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        u => return Err(format!("invalid size '{s}': unknown unit '{u}' (use k, M, G or T)")),
    };
    let invalid = || format!("invalid size '{s}': expected a number with an optional unit (k, M, G, T)");
    if !num.contains('.') {
        // Whole numbers exactly (a float has 53 bits: 2^53 + 1 bytes would come out one short).
        let n: u64 = num.parse().map_err(|e: std::num::ParseIntError| match e.kind() {
            std::num::IntErrorKind::PosOverflow => format!("invalid size '{s}': out of range"),
            _ => invalid(),
        })?;
        return n.checked_mul(mult).ok_or_else(|| format!("invalid size '{s}': out of range"));
    }
    let n: f64 = num.parse().map_err(|_| invalid())?;
    let v = n * mult as f64;
    if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
        return Err(format!("invalid size '{s}': out of range"));
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // Checked above: finite, in 0..=u64::MAX.
    Ok(v as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_exactly_and_refuse_what_does_not_fit() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size(" 512k "), Ok(512 << 10));
        assert_eq!(parse_size("4M"), Ok(4 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        // Whole numbers are exact: through a float, 2^53 + 1 came out as 2^53.
        assert_eq!(parse_size("9007199254740993"), Ok(9_007_199_254_740_993));
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        for bad in ["18446744073709551616", "16777216T", "", "k", "1.5.5", "-1", "12q"] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
    }
}
