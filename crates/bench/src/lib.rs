// The benchmark makes and removes its own files and cgroup controls, not a user's data: it is
// not held to the engine's facade (see .ci/clippy-shipped/clippy.toml and tests/architecture.rs).
#![allow(clippy::disallowed_methods)]
#![deny(unsafe_code)]
// A library reports through its return values and progress counters; front ends print.
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]
//! Workloads, metrics and reports behind `cacheless bench`: a fio-style benchmark that also measures what fio
//! cannot see — page-cache growth, reclaim (kswapd and direct), kswapd CPU and per-second stability — for
//! buffered, direct, uncached (RWF_DONTCACHE), write-behind and automatic I/O.
//!
//! Scenarios (`--scenario`): `normal`; `low-memory`, each trial inside a memory cgroup; `pressure`, a
//! helper process holds all of MemAvailable but `--free` during each trial, and the report adds kswapd CPU
//! per second, the reclaim counters and allocation stalls; `neighbour`, a co-tenant process re-reads a hot
//! file (`--hot-size`) during each trial, and the report adds its throughput and the share of its cached set
//! that was evicted. Every mode and workload runs in each.
//!
//! Layout: [`run`] drives a run from a [`config::BenchConfig`]: `prepare` makes the files and the cold start
//! of each trial, [`schedule`] rotates the trial order every round, `trial` times one trial, [`fio`] runs
//! fio's equivalent. [`procfs`] parses /proc, [`meter`] samples it during a trial, [`cgroup`] runs the
//! low-memory scenario, [`scenario`] the pressure and neighbour scenarios with their [`helper`] processes. [`stats`] and [`report`] summarize the trials (JSON `cacheless-bench/1`, see
//! docs/bench-json.md), [`render`] writes the table, sentences and CSV, [`plot`] draws them.

pub mod cgroup;
pub mod config;
pub mod error;
pub mod fio;
pub mod helper;
mod log;
pub mod meter;
pub mod plot;
mod prepare;
pub mod procfs;
pub mod render;
pub mod report;
pub mod run;
pub mod scenario;
pub mod schedule;
pub mod stats;
mod trial;
mod units;

pub use error::{Error, Result};
