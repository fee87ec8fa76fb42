//! cacheless-cp: GNU cp's policy over operands that are local paths or remote objects
//! (`s3://`, `http(s)://`), the one copy job every door reaches: `cacheless cp` and Python's
//! `cacheless.copy` read their flags or keywords once into [`CpOptions`] and call [`copy`].
//!
//! The policy is here: GNU's options as types (what an existing destination means, backups,
//! links, attributes, dereferencing, where each source lands) and the per-file decisions they
//! drive. The I/O is not: the engine (`cacheless`) reads and writes local files, and
//! `cacheless-remote` fetches and sends objects; neither knows cp.
//!
//! - Local paths to local paths (`local`): GNU cp's results, each file written off the page
//!   cache, held to coreutils' own `tests/cp`.
//! - With URLs (`remote`): a download or an upload per file, operands mapped as `aws s3 cp` and
//!   rclone map them (a prefix's objects into a folder, a folder's files under a prefix), and
//!   every option either works with GNU's meaning (a backup of an existing destination before a
//!   download lands, `-i` asks, `-n`, `-u`, `--attributes-only`, `--parents`, `-v`) or is refused
//!   before anything is transferred, naming the option and why (`-s` and `-l` from an object,
//!   `--preserve` onto one, ...).
//!
//! ```no_run
//! use std::sync::Arc;
//! use cacheless_cp::{copy, CpOptions};
//! let mut o = CpOptions::default();
//! o.recursive = true;
//! let report = copy(&["s3://models/llama/".into()], "/data/llama".as_ref(), &o, &Arc::new(cacheless::Progress::new()))?;
//! println!("{} files, {} B", report.copied, report.bytes);
//! # Ok::<(), cacheless::Error>(())
//! ```
#![deny(unsafe_code)]
// A library reports through its return values and callbacks; front ends print.
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]
#![warn(missing_docs)]

mod local;
mod options;
mod remote;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cacheless::{Progress, Result};

pub use cacheless::backup::BackupKind;
pub use local::target;
pub use options::{Ask, Attr, CpOptions, CpReport, Deref, Existing, Link, Note, OnCopied, OnError, OnNote, OnTransfer, Preserve, Question, Target, Transfer};

/// Whether an operand is a URL (`s3://`, `http://`, `https://`) rather than a local path (a
/// local file of such a name is written `./s3://...`).
pub fn is_url(p: &Path) -> bool {
    cacheless_remote::url_of(p).is_some()
}

/// Copies each of `srcs` to `dst` as `o` says, GNU cp's rules for every operand: local paths
/// through the engine, URLs through transfers (see the crate's documentation). Counts in
/// `progress` and stops early when it is cancelled (nothing unfinished is left under a final
/// name or key). Per-item failures are counted and told (see [`CpOptions::on_error`]), not
/// returned, and the first is kept in the report; an error is returned only when the job cannot
/// start: no source, a destination that cannot take them, an option the operands cannot honour.
pub fn copy(srcs: &[PathBuf], dst: &Path, o: &CpOptions, progress: &Arc<Progress>) -> Result<CpReport> {
    o.durability.file_by_file("cp", dst)?;
    if is_url(dst) || srcs.iter().any(|s| is_url(s)) {
        remote::copy(srcs, dst, o, progress)
    } else {
        local::copy(srcs, dst, o, progress)
    }
}
