//! End-to-end runs of every workload on small files, and the page-cache figures against `fincore`.
//! No timing is asserted; byte counts and residency are.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

use std::path::Path;
use std::process::Command;

use cacheless::Mode;
use cacheless_bench::run::{run, BenchConfig, Rw};

const MIB: u64 = 1 << 20;

fn small(rw: Rw, modes: Vec<Mode>, dir: &Path) -> BenchConfig {
    let mut c = BenchConfig::quick(dir);
    c.rw = rw;
    c.files = 2;
    c.threads = 2;
    c.file_size = 8 * MIB + 4096 + 123; // an unaligned tail
    c.block_size = 1 << 20;
    c.modes = modes;
    c.runs = Some(1);
    c.dir = Some(dir.to_path_buf());
    c.remove_files = false;
    c
}

fn workdir() -> tempfile::TempDir {
    cacheless_testkit::scratch()
}

#[test]
fn every_workload_moves_every_byte() {
    for rw in [Rw::Read, Rw::RandRead, Rw::Write, Rw::Copy] {
        let dir = workdir();
        let cfg = small(rw, vec![Mode::Buffered, Mode::Auto], dir.path());
        let mut lines = Vec::new();
        let r = run(&cfg, &mut |s: &str| lines.push(s.to_string())).unwrap();
        assert_eq!(r.modes.len(), 2);
        for m in &r.modes {
            let t = &m.runs[0];
            if rw != Rw::RandRead {
                assert_eq!(t.bytes, 2 * cfg.file_size, "{rw:?} {}", m.mode);
            } else {
                assert!(t.bytes > 0);
            }
            assert!(!m.decisions.is_empty(), "{rw:?} {}: no decision recorded", m.mode);
            assert_eq!(t.files_resident_start_bytes, 0, "{rw:?} {}: trial did not start cold", m.mode);
        }
        assert_eq!(lines.iter().filter(|l| l.starts_with("run 1/1")).count(), 2, "{lines:?}");
        // Written files are removed when the run ends.
        assert!(!dir.path().join("cacheless-bench-out-0.dat").exists());
        let csv = r.to_csv();
        assert_eq!(csv.lines().count(), 3);
    }
}

fn fincore_bytes(files: &[std::path::PathBuf]) -> Option<u64> {
    let out = Command::new("fincore").args(["--bytes", "--noheadings", "--raw", "--output", "RES"]).args(files).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).lines().map(|l| l.trim().parse::<u64>().unwrap()).sum())
}

/// Each mode runs once in each position over a full square, and every trial records its place.
#[test]
fn trial_order_rotates_every_round() {
    let dir = workdir();
    let mut cfg = small(Rw::Read, vec![Mode::Buffered, Mode::Direct, Mode::Auto], dir.path());
    cfg.runs = None;
    let mut lines = Vec::new();
    let r = run(&cfg, &mut |s: &str| lines.push(s.to_string())).unwrap();
    assert_eq!(r.config.runs, 3, "a full square of 3 modes");
    assert_eq!(r.config.schedule.len(), 3);
    assert_eq!(r.config.schedule[0], ["buffered", "direct", "auto"]);
    for (round, order) in r.config.schedule.iter().enumerate() {
        for (pos, name) in order.iter().enumerate() {
            let m = r.modes.iter().find(|m| &m.mode == name).unwrap();
            let t = &m.runs[round];
            assert_eq!((t.run, t.position), (cacheless_bench::schedule::ordinal(round), cacheless_bench::schedule::ordinal(pos)), "{name}");
            assert!(lines.iter().any(|l| l.starts_with(&format!("run {}/3 #{} {name}:", round + 1, pos + 1))), "{lines:?}");
        }
    }
    for m in &r.modes {
        let mut positions: Vec<u32> = m.runs.iter().map(|t| t.position).collect();
        positions.sort_unstable();
        assert_eq!(positions, [1, 2, 3], "{}", m.mode);
        assert_eq!(m.summary.mib_s_by_position.len(), 3);
        assert!(m.summary.mib_s_by_position.iter().all(|p| p.is_some()));
        assert!(m.runs.iter().all(|t| t.files_resident_start_bytes == 0 && t.settle_s >= 0.0));
    }
    let csv = r.to_csv();
    assert_eq!(csv.lines().count(), 10);
    let text = r.text();
    assert!(text.contains("was fastest") || text.contains("within noise"), "{text}");
    assert!(text.contains("Per GiB moved, buffered used"), "{text}");
}

/// Our per-file residency figure (cachestat, else mincore) agrees with util-linux fincore.
#[test]
fn residency_agrees_with_fincore() {
    let drops = || cacheless_bench::procfs::read_vmstat_map().map(|m| cacheless_bench::procfs::drop_pagecache_count(&m)).unwrap_or(0);
    let drops_before = drops();
    let dir = workdir();
    let cfg = small(Rw::Read, vec![Mode::Direct, Mode::Buffered], dir.path());
    let r = run(&cfg, &mut |_| {}).unwrap();
    let files: Vec<_> = (0..2).map(|i| dir.path().join(format!("cacheless-bench-{i}.dat"))).collect();
    let Some(fin) = fincore_bytes(&files) else {
        cacheless_testkit::skip("fincore (util-linux) is not installed");
        return;
    };
    if drops() != drops_before {
        cacheless_testkit::skip("another program dropped the page cache during the test; figures cannot be compared");
        return;
    }
    // Buffered ran last, so what fincore sees now is what that trial left behind.
    let buffered = &r.modes[1].runs[0];
    assert_eq!(buffered.files_resident_end_bytes, fin);
    assert!(fin >= 2 * 8 * MIB, "buffered read left only {fin} bytes cached");
    assert_eq!(buffered.files_total_bytes, 2 * cfg.file_size.div_ceil(4096) * 4096);
    // Direct left nothing behind.
    assert_eq!(r.modes[0].runs[0].files_resident_end_bytes, 0);
}
