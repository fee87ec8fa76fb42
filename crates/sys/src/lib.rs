//! cacheless-sys: the kernel facade of the cacheless workspace.
//!
//! Every system call the workspace's shipped crates make goes through this crate, the only one
//! of them that depends on rustix, libc, nix and io-uring: Cargo, not a convention, keeps the
//! others from calling the kernel themselves. It holds
//! - [`sys`]: calls on files and folders, and the sequences made of them (creating a file beside
//!   its final name, the commit sequence, temporaries and the locks that prove their writers
//!   alive), each retrying EINTR and, under the `fault-injection` feature, a fault site;
//! - [`backend`]: the I/O requests, on io_uring or a thread pool;
//! - [`caps`]: what each filesystem offers (O_DIRECT, RWF_DONTCACHE, O_TMPFILE, FICLONE), probed
//!   once per device;
//! - [`residency`]: cachestat, mincore and fadvise, the page cache as the engine sees it;
//! - [`buf`]: aligned memory under one budget;
//! - and the vocabulary they speak: the engine's [`error`], I/O [`mode`]s, names quoted as GNU
//!   tools quote them ([`quote`]), the user's stop ([`interrupt`]).
//!
//! The types of the kernel's bindings that these calls take and return (flags, modes, times,
//! errnos) are re-exported from [`sys`], so that a caller builds the value a call takes without
//! naming rustix; the calls themselves are here only.
//!
//! The engine crate (`cacheless`) re-exports what its users see; the modules it keeps to
//! itself are `#[doc(hidden)]` here.
#![deny(unsafe_code)]
// A library reports through its return values; front ends print.
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]
#![warn(missing_docs)]

#[doc(hidden)]
pub mod backend;
#[doc(hidden)]
pub mod buf;
pub mod caps;
pub mod conv;
#[doc(hidden)]
pub mod env;
#[doc(hidden)]
pub mod error;
#[cfg_attr(not(feature = "fault-injection"), doc(hidden))]
pub mod fault;
pub mod interrupt;
#[doc(hidden)]
pub mod mode;
#[doc(hidden)]
pub mod names;
pub mod quote;
pub mod residency;
pub mod sys;
/// Temporaries' names and their owners' leftovers: part of `sys/` (the facade), declared here so
/// that it has one public path.
#[path = "sys/temps.rs"]
pub mod temps;

pub use error::{Error, ErrorKind, Result};
