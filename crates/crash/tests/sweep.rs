//! The crash-consistency sweep, bounded, on ext4 and xfs: no violation with the engine as it
//! is; violations naming the workload, the crash state and the file once a durability step is
//! removed; a failed write either failing the call or keeping its promise. Needs root and
//! /dev/fuse: skipped, saying so, without them, unless `CACHELESS_REQUIRE` names `fuse`. The
//! `python` workload needs an interpreter that imports the package (`workloads::python`): left
//! out, saying so, without one, unless `CACHELESS_REQUIRE` names `python`; so is the `checkpoint`
//! workload where that interpreter lacks torch.

use std::sync::Mutex;

use cacheless::fault::{skip_durability, Step};
use cacheless_crash::{sweep, workloads, FsKind, Outcome, SweepOptions};

/// The steps switch is process-wide, and the sweeps share loop devices: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn can_run() -> bool {
    cacheless_testkit::require("fuse", cacheless_crash::record::available())
}

fn run(fs: &[FsKind], names: &[&str], states: usize, skip: &[Step]) -> Outcome {
    run_with(fs, names, states, skip, &[])
}

fn run_with(fs: &[FsKind], names: &[&str], states: usize, skip: &[Step], eio_at: &[usize]) -> Outcome {
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let wl = workloads::select(&names).unwrap_or_else(|e| panic!("{e}"));
    let opts = SweepOptions { fs: fs.to_vec(), states, seed: 1, eio_at: eio_at.to_vec(), eio_spread: 0, scratch: None };
    skip_durability(skip);
    let out = sweep(&opts, &wl, |r| {
        eprintln!(
            "{} {}: {} states, {} violations, {} temporaries, {} writes, {} flushes",
            r.fs,
            r.workload,
            r.states,
            r.violations.len(),
            r.temporaries,
            r.writes,
            r.barriers
        );
    });
    skip_durability(&[]);
    out.unwrap_or_else(|e| panic!("sweep: {e}"))
}

/// The workloads slowest to check (hundreds of files in each state; a child interpreter), given
/// fewer states so that the bounded sweep stays about as long as before they were added.
const SLOW: [&str; 4] = ["extract", "extract-gzip", "python", "checkpoint"];

#[test]
fn no_promise_is_broken_in_any_crash_state() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !can_run() {
        return;
    }
    let python = cacheless_testkit::require("python", workloads::python().map(drop));
    let names: Vec<String> = workloads::all().into_iter().map(|w| w.name).collect();
    let fast: Vec<&str> = names.iter().map(String::as_str).filter(|n| !SLOW.contains(n)).collect();
    // The checkpoint workload needs torch beside the package, in the same interpreter.
    let torch = python && cacheless_testkit::require("python", cacheless_crash::checkpoint::interpreter().map(drop));
    let slow: Vec<&str> = SLOW.into_iter().filter(|n| (python || *n != "python") && (torch || *n != "checkpoint")).collect();
    let mut out = run(&[FsKind::Ext4, FsKind::Xfs], &fast, 25, &[]);
    out.rows.extend(run(&[FsKind::Ext4, FsKind::Xfs], &slow, 10, &[]).rows);
    let bad: Vec<String> = out.violations().map(ToString::to_string).collect();
    assert!(bad.is_empty(), "{} violations:\n{}", bad.len(), bad.join("\n"));
    let ran = out.rows.iter().filter(|r| r.skipped.is_none()).count();
    assert_eq!(ran, 2 * (fast.len() + slow.len()), "every workload ran on both filesystems: {:?}", out.rows.iter().map(|r| &r.skipped).collect::<Vec<_>>());
    for r in &out.rows {
        assert!(
            r.states >= 10 && r.barriers > 0 && r.writes > 0,
            "{} {}: {} states from {} writes and {} flushes",
            r.fs,
            r.workload,
            r.states,
            r.writes,
            r.barriers
        );
    }
}

/// Regression: a tree copy of one small file, or of one symlink, renamed it into place without
/// syncing the directory or the filesystem, so a cut after copy_tree returned could lose it
/// (and the syncfs added for them must not follow the symlink it copied).
#[test]
fn a_tree_copy_of_one_small_file_or_symlink_is_durable_when_it_returns() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !can_run() {
        return;
    }
    let out = run(&[FsKind::Ext4, FsKind::Xfs], &["copy-tree-file", "copy-tree-symlink"], 40, &[]);
    let bad: Vec<String> = out.violations().map(ToString::to_string).collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Asserts that `out` has violations, each naming the workload, the state and the file, and
/// that `workload` is among them.
fn assert_caught(out: &Outcome, step: &str, workload: &str) {
    let v: Vec<_> = out.violations().collect();
    assert!(!v.is_empty(), "without the {step}, the sweep must report lost data");
    assert!(v.iter().any(|v| v.workload == workload), "{workload} is caught without the {step}: {:?}", v.iter().map(|v| &v.workload).collect::<Vec<_>>());
    for x in &v {
        let line = x.to_string();
        assert!(!x.state.is_empty() && line.contains(&x.workload) && line.contains(&x.state), "{line}");
        assert!(["missing", "not the promised content", "wrong attributes"].iter().any(|w| x.what.contains(w)), "{line}");
        assert!(!x.file.is_empty(), "a violation names its file: {line}");
    }
    assert!(v.iter().any(|x| x.what.contains("missing") || x.what.contains("not the promised content")), "data is lost, not only attributes");
}

#[test]
fn without_the_directory_fsync_a_replaced_file_is_lost() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !can_run() {
        return;
    }
    let out = run(&[FsKind::Ext4, FsKind::Xfs], &["writer-direct", "copy-file"], 25, &[Step::DirSync]);
    assert_caught(&out, "directory fsync", "writer-direct");
    assert!(out.violations().any(|v| v.fs == "ext4") && out.violations().any(|v| v.fs == "xfs"), "both filesystems lose the rename");
}

#[test]
fn without_the_fdatasync_uncached_data_is_lost() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !can_run() {
        return;
    }
    let out = run(&[FsKind::Ext4, FsKind::Xfs], &["writer-dontcache", "creator-batch"], 40, &[Step::Fdatasync]);
    assert_caught(&out, "fdatasync", "writer-dontcache");
}

#[test]
fn without_the_syncfs_a_batch_of_small_files_is_lost() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !can_run() {
        return;
    }
    let out = run(&[FsKind::Ext4], &["copy-tree", "extract"], 30, &[Step::Syncfs]);
    assert_caught(&out, "syncfs", "copy-tree");
    assert_caught(&out, "syncfs", "extract");
}

/// Regression: the Writer (and a copy's small files) set the permission bits and times after
/// the fdatasync, which on btrfs left them out of what the directory fsync made durable: the
/// new content came back with the old mode and the time of the write.
#[test]
fn attributes_are_durable_with_the_content_on_btrfs() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !can_run() || !cacheless_testkit::require("btrfs", cacheless_testkit::kernel_has("btrfs")) {
        return;
    }
    let out = run(&[FsKind::Btrfs], &["writer-direct", "copy-tree"], 40, &[]);
    let bad: Vec<String> = out.violations().map(ToString::to_string).collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(out.states() >= 60, "{} states", out.states());
}

/// A write the device fails (EIO, once) in the middle of a file's data: the Writer fails with
/// the error, and no crash state before it breaks a promise.
#[test]
fn a_failed_write_fails_the_writer_and_breaks_no_promise() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !can_run() {
        return;
    }
    let out = run_with(&[FsKind::Ext4], &["writer-direct", "writer-dontcache"], 15, &[], &[45]);
    let bad: Vec<String> = out.violations().map(ToString::to_string).collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    for r in &out.rows {
        assert_eq!(r.failed_writes, 1, "{}", r.workload);
        let e = r.failed_with.as_deref().unwrap_or_else(|| panic!("{} succeeded though a write of its data failed", r.workload));
        assert!(e.contains("Input/output error"), "{}: {e}", r.workload);
        assert!(r.returned_after_failure.is_empty(), "{}: {:?} returned success after the failed write", r.workload, r.returned_after_failure);
    }
}

/// Writes failed at positions spread over a run: each run either fails, or every promise its
/// calls made is in the image it left (and no crash state before the failure breaks one).
#[test]
fn a_failed_write_anywhere_fails_the_call_or_keeps_its_promise() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !can_run() {
        return;
    }
    let wl = workloads::select(&["writer-direct".to_string(), "copy-tree".to_string()]).unwrap_or_else(|e| panic!("{e}"));
    let opts = SweepOptions { fs: vec![FsKind::Ext4], states: 5, seed: 1, eio_at: vec![], eio_spread: 4, scratch: None };
    let out =
        sweep(&opts, &wl, |r| eprintln!("{} {} (EIO {:?}): {} violations, failed with {:?}", r.fs, r.workload, r.eio_at, r.violations.len(), r.failed_with))
            .unwrap_or_else(|e| panic!("sweep: {e}"));
    let bad: Vec<String> = out.violations().map(ToString::to_string).collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert_eq!(out.rows.len(), 2 * 5, "a run without a failure, then four with one, per workload");
    let failed: Vec<_> = out.rows.iter().filter(|r| r.failed_writes == 1).collect();
    assert!(failed.len() >= 6, "most positions are reached: {}", failed.len());
    assert!(failed.iter().any(|r| r.failed_with.is_some()), "a failed data write fails the call");
}
