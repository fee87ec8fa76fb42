//! safetensors files at direct-I/O speed, leaving no page cache behind.
//!
//! Loading reads the file (or only the byte spans of the tensors asked for) into one aligned
//! [`Arena`] whose byte `i` is file byte `i`: every request is aligned at both ends, so O_DIRECT
//! reads land in the arena with no bounce buffer, and each tensor is a view into it. The header
//! is parsed with the `safetensors` crate and every span is checked against the file, its shape
//! and its dtype, with checked arithmetic, before any view exists. A file that is already mostly
//! cached is read buffered (the engine's auto mode), so warm loads stay fast and warm.
//!
//! Saving writes the same bytes the `safetensors` crate writes (its header, its tensor order)
//! through the engine's [`cacheless::Writer`]: direct I/O, under a temporary name, fsync'ed
//! and renamed, so readers of the old file are never disturbed.
//!
//! ```no_run
//! use cacheless::{Budget, Progress};
//! use cacheless_safetensors::{load, LoadOptions};
//! let loaded = load("model.safetensors".as_ref(), None, &LoadOptions::new(Budget::new(256 << 20)), &Progress::new())?;
//! for t in loaded.header.tensors() {
//!     let bytes = loaded.tensor_bytes(t).expect("every tensor loaded");
//!     println!("{} {} {:?}: {} bytes", t.name, t.dtype, t.shape, bytes.len());
//! }
//! # Ok::<(), cacheless_safetensors::Error>(())
//! ```
#![deny(unsafe_code)]
// A library reports through its return values and progress counters; front ends print.
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]
#![warn(missing_docs)]

pub mod arena;
pub mod error;
pub mod header;
pub mod load;
pub mod model;
pub mod save;

pub use arena::{Arena, ArenaOptions, SpanReader};
pub use error::{Error, Result};
pub use header::{Dtype, Header, TensorEntry};
pub use load::{load, LoadOptions, LoadReport, Loaded, SafeFile};
pub use model::{load_model, ModelIndex};
pub use save::{save, save_staged, serialize, TensorData};
