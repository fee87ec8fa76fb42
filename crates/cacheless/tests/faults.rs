//! Every engine workload (whole-file and streaming reads, a streaming write, a copy) under an
//! injected fault at every position of every kind of call it makes (open, read, write, fsync,
//! rename), with every fault that applies there (EIO, ENOSPC, EINTR, EAGAIN, a short count),
//! under each backend and mode. Whatever is injected: EINTR, EAGAIN and short counts are retried
//! and the result is byte-exact; any other fault is an error naming the path and the operation;
//! the source is untouched; nothing but a byte-exact copy of the source is left under the
//! destination's name, and no temporary at all; every buffer is back in the budget.
//!
//! Fault injection is process-wide: the cases of this binary take turns (and nothing else runs
//! in it).
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use cacheless::fault::{self, Plan, Site, Swept};
use cacheless::{copy_file, copy_file_with, BackendKind, Budget, CopyOptions, Mode, Progress, ReadOptions, Reader, Sparse, WriteOptions, Writer};
use common::*;

/// One case injects at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The request size: the files below take several requests.
const BLOCK: usize = 64 << 10;
/// Source size: five requests, the last one partial and unaligned.
const SIZE: usize = 4 * BLOCK + 12_345;

/// The modes and backends each workload runs under: buffered, and direct where the filesystem
/// has it (its aligned requests, its unaligned tail); threads, and io_uring where the kernel has it.
fn configs(dir: &Path) -> Vec<(Mode, BackendKind)> {
    matrix(dir).into_iter().filter(|(m, _)| matches!(m, Mode::Buffered | Mode::Direct)).collect()
}

fn ro(mode: Mode, backend: BackendKind, budget: &Budget) -> ReadOptions {
    let mut o = ReadOptions::new(budget.clone());
    o.io.mode = mode;
    o.io.backend = backend;
    o.io.block_size = BLOCK;
    o.io.queue_depth = 3;
    o
}

fn wo(mode: Mode, backend: BackendKind, budget: &Budget) -> WriteOptions {
    let mut o = WriteOptions::new(budget.clone());
    o.io.mode = mode;
    o.io.backend = backend;
    o.io.block_size = BLOCK;
    o.io.queue_depth = 3;
    o
}

/// Checks the outcome of one run: success unless a fault that is not retried was injected, and
/// then an error carrying the fault's errno, an operation of its kind, and one of `paths`.
fn check_outcome<T>(r: &cacheless::Result<T>, plan: Option<Plan>, paths: &[&Path], what: &str) {
    let fired = fault::fired();
    match (r, plan) {
        (Ok(_), Some(p)) if fired => assert!(p.fault.retried_at(p.site), "{what}: {p:?} was injected and the run succeeded"),
        (Ok(_), _) => {}
        (Err(e), Some(p)) if fired && !p.fault.retried_at(p.site) => {
            assert_eq!(e.errno(), p.fault.errno(), "{what}: {p:?}: {e}");
            assert!(p.site.ops().contains(&e.op()), "{what}: {p:?}: the error names the operation '{}': {e}", e.op());
            assert!(paths.contains(&e.path()), "{what}: {p:?}: the error names {}: {e}", e.path().display());
        }
        (Err(e), p) => panic!("{what}: {p:?} (injected: {fired}) failed: {e}"),
    }
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// A scratch folder with the source file, and its bytes.
fn setup() -> (tempfile::TempDir, PathBuf, Vec<u8>) {
    let d = scratch();
    let (src, data) = random_file(d.path(), "src", SIZE, 7);
    (d, src, data)
}

/// What every run leaves: the source as it was, the destination (if any) absent or equal to
/// `expect`, nothing else, and the whole budget back.
fn check_left(dir: &Path, src: &Path, data: &[u8], dst: Option<(&Path, &[u8])>, budget: &Budget, what: &str) {
    assert!(std::fs::read(src).unwrap() == data, "{what}: the source changed");
    let mut allowed = vec!["src".to_string()];
    if let Some((p, expect)) = dst {
        if p.exists() {
            assert!(std::fs::read(p).unwrap() == expect, "{what}: {} holds other bytes than its source", p.display());
            allowed.push(p.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    allowed.sort();
    assert_eq!(names(dir), allowed, "{what}: files left behind");
    assert_eq!(budget.used(), 0, "{what}: buffers not returned to the budget");
}

fn report(what: &str, s: &Swept) {
    eprintln!("{what}: clean calls {:?}; {} runs with a fault, {} injected ({} retried)", s.clean, s.runs, s.fired, s.retried);
    assert!(s.fired > 0, "{what}: no fault was ever injected");
}

/// Sweeps faults through `read` (a way of reading the whole source with a Reader).
fn read_sweep(d: &Path, src: &Path, data: &[u8], what: &str, mode: Mode, backend: BackendKind, read: impl Fn(&mut Reader) -> cacheless::Result<Vec<u8>>) {
    let s = fault::sweep(&[Site::Open, Site::Read], |plan| {
        let budget = Budget::new(16 << 20);
        let r = Reader::open(src, &ro(mode, backend, &budget)).and_then(|mut r| read(&mut r));
        check_outcome(&r, plan, &[src], what);
        if let Ok(got) = r {
            assert!(got == data, "{what}: {plan:?}: the bytes differ");
        }
        check_left(d, src, data, None, &budget, what);
    });
    report(what, &s);
}

#[test]
fn reads_survive_or_report_every_fault() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (d, src, data) = setup();
    for (mode, backend) in configs(d.path()) {
        // The whole file into one buffer.
        read_sweep(d.path(), &src, &data, &format!("read_all ({mode}, {backend})"), mode, backend, |r| Ok(r.read_all()?.to_vec()));
        // In order, with read-ahead.
        read_sweep(d.path(), &src, &data, &format!("stream ({mode}, {backend})"), mode, backend, |r| {
            let mut got = Vec::new();
            while let Some(c) = r.next_chunk()? {
                assert_eq!(c.offset(), got.len() as u64, "chunks out of order");
                got.extend_from_slice(&c);
            }
            Ok(got)
        });
    }
}

#[test]
fn a_write_is_complete_under_its_name_or_absent() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (d, src, data) = setup();
    let dst = d.path().join("dst");
    for (mode, backend) in configs(d.path()) {
        let what = format!("write ({mode}, {backend})");
        let s = fault::sweep(&Site::ALL, |plan| {
            let budget = Budget::new(16 << 20);
            let r = Writer::create(&dst, &wo(mode, backend, &budget)).and_then(|mut w| {
                // Uneven pieces: requests fill across them, and the tail is unaligned.
                for piece in data.chunks(50_000) {
                    w.write_bytes(piece)?;
                }
                w.finish()
            });
            check_outcome(&r, plan, &[&dst, d.path()], &what);
            if r.is_ok() {
                assert!(dst.exists(), "{what}: {plan:?}: finished, yet no file");
            }
            check_left(d.path(), &src, &data, Some((&dst, &data)), &budget, &what);
            let _ = std::fs::remove_file(&dst);
        });
        report(&what, &s);
    }
}

/// Sweeps every fault through `copy` (given the budget's read and write options) of `src` over
/// an existing `dst`: a failure leaves the old destination, success (or a failure after the
/// rename) the copy, byte-exact.
fn copy_sweep(
    d: &Path,
    src: &Path,
    data: &[u8],
    what: &str,
    copy: impl Fn(&ReadOptions, &WriteOptions) -> cacheless::Result<cacheless::CopyReport>,
    mode: Mode,
    backend: BackendKind,
) {
    let dst = d.join("dst");
    let old = b"the destination as it was".to_vec();
    let s = fault::sweep(&Site::ALL, |plan| {
        std::fs::write(&dst, &old).unwrap();
        let budget = Budget::new(16 << 20);
        let r = copy(&ro(mode, backend, &budget), &wo(mode, backend, &budget));
        check_outcome(&r, plan, &[src, &dst, d], what);
        let now = std::fs::read(&dst).unwrap();
        let expect: &[u8] = if now == old { &old } else { data };
        if r.is_ok() {
            assert!(now == data, "{what}: {plan:?}: copied, yet the destination differs");
        }
        check_left(d, src, data, Some((&dst, expect)), &budget, what);
    });
    report(what, &s);
}

#[test]
fn a_copy_replaces_its_destination_whole_or_not_at_all() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (d, src, data) = setup();
    let dst = d.path().join("dst");
    for (mode, backend) in configs(d.path()) {
        let what = format!("copy_file ({mode}, {backend})");
        copy_sweep(d.path(), &src, &data, &what, |ro, wo| copy_file(&src, &dst, ro, wo, &Progress::new()), mode, backend);
    }
}

/// The copy's other paths under every fault: extent by extent with verification from the disk,
/// and whole through the small-file creator with verification.
#[test]
fn every_copy_path_replaces_its_destination_whole_or_not_at_all() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (d, src, data) = setup();
    let mut sparse = CopyOptions::new();
    sparse.sparse = Sparse::Always;
    sparse.verify = Some(cacheless::digest::Algo::Xxh3);
    let mut small = CopyOptions::new();
    small.small_file = u64::MAX;
    small.verify = Some(cacheless::digest::Algo::Xxh3);
    let dst = d.path().join("dst");
    for (path, co) in [("sparse, verified", &sparse), ("small-file, verified", &small)] {
        let what = format!("copy_file_with ({path})");
        copy_sweep(d.path(), &src, &data, &what, |ro, wo| copy_file_with(&src, &dst, ro, wo, co, &Progress::new()), Mode::Auto, BackendKind::Threads);
    }
}
