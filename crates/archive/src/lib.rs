//! Tar + compression: the reader and many-file creator behind `cacheless extract`, and the
//! walker and writer behind `cacheless pack`.
//!
//! [`pack()`] creates a tar archive (zstd in independent frames compressed in parallel, gzip,
//! xz, lz4, bzip2 or plain) from files and trees, reading them and writing the archive through
//! the engine so that neither is left in the page cache.
//!
//! [`extract()`] unpacks a tar archive (zstd, gzip, xz, lz4 frame, bzip2 or plain, detected by
//! magic bytes) into a directory without leaving the archive or the extracted tree in the page
//! cache, and safely: no member is created outside the destination or through a symlink.
//!
//! ```no_run
//! use cacheless_archive::{extract, ExtractOptions, Input};
//! let report = extract(Input::Path("snap.tar.zst".into()), &ExtractOptions::new("out")).unwrap();
//! assert!(report.is_ok(), "{:?}", report.failures);
//! ```
#![deny(unsafe_code)]
// A library reports through its return values and progress counters; front ends print.
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]
#![warn(missing_docs)]

pub mod acl;
pub mod error;
pub mod extract;
pub mod fsops;
mod modes;
pub mod pack;
pub mod select;
pub mod source;
pub mod tarparse;
pub mod transform;
mod zframes;

pub use error::{Error, Result};
pub use extract::{extract, ExtractOptions, ExtractReport, Listing, OldFiles, DEFAULT_WRITE_BACK};
pub use modes::ModeCounts;
pub use pack::{pack, pack_staged, Output, PackOptions, PackReport};
pub use source::{Compression, Decompress, Input, SourceInfo};
