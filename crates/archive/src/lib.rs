//! Tar + compression reader and the many-file creator behind `cacheless extract`.
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
#![warn(missing_docs)]

pub mod error;
pub mod extract;
pub mod fsops;
pub mod pack;
pub mod sink;
pub mod source;
pub mod tarparse;

pub use error::{Error, Result};
pub use extract::{extract, ExtractOptions, ExtractReport, ModeCounts, Progress};
pub use pack::{pack, Output, PackOptions, PackReport};
pub use sink::IoMode;
pub use source::{Compression, Input, SourceInfo};
