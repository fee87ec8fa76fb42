#![deny(unsafe_code)]
//! Workloads, metrics and reports behind `cacheless bench`: a fio-style benchmark that also measures what fio
//! cannot see — page-cache growth, reclaim (kswapd and direct), kswapd CPU and per-second stability — for
//! buffered, direct, uncached (RWF_DONTCACHE), write-behind and automatic I/O.
//!
//! Layout: [`procfs`] parses /proc, [`cgroup`] runs the low-memory scenario, [`stats`] and [`report`] turn
//! trials into tables, CSV and JSON (`cacheless-bench/1`, see docs/bench-json.md), [`plot`] draws them.

pub mod cgroup;
pub mod error;
pub mod fio;
pub mod meter;
pub mod plot;
pub mod procfs;
pub mod report;
pub mod run;
pub mod stats;

pub use error::{Error, Result};
