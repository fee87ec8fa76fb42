//! `cacheless bench --scenario pressure|neighbour`, end to end on small files: the reports carry the
//! scenarios' figures, and the helper processes (the binary run again as `bench-helper`) are gone when the
//! run ends, also when it is interrupted. The memory held is kept small (`--free` just under MemAvailable).
//! No timing is asserted.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use cacheless_testkit::scratch;
use serde_json::Value;

/// How much the pressure runs hold: MemAvailable minus `--free`, a little above the smallest hold the
/// scenario accepts (64 MiB), so that memory other programs take meanwhile rarely makes it refuse.
const HOLD: u64 = 256 << 20;

/// One pressure run at a time: each sizes its hold from MemAvailable, which another one would move.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

fn mem_available() -> u64 {
    cacheless_bench::procfs::read_meminfo().unwrap().available
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `cacheless bench` on `dir` with one small file, and `extra` flags.
fn bench_with(dir: &Path, extra: &[&str]) -> Command {
    let mut c = cacheless_testkit::cacheless();
    c.args(["--json", "bench", "--files", "1", "--threads", "1", "--size", "8M", "--dir", s(dir)]).args(extra);
    c
}

/// [`bench_with`] one round of 1 MiB requests.
fn bench(dir: &Path, extra: &[&str]) -> Command {
    let mut c = bench_with(dir, &["--bs", "1M", "--runs", "1"]);
    c.args(extra);
    c
}

/// Runs a pressure bench, measuring MemAvailable again when the run refused because it dropped meanwhile
/// (other programs allocating), at most three times.
fn pressure_run(dir: &Path, extra: &[&str]) -> (Output, u64) {
    for _ in 0..3 {
        let free = mem_available() - HOLD;
        let out = bench(dir, &["--scenario", "pressure", "--free", &free.to_string()]).args(extra).output().unwrap();
        if !String::from_utf8_lossy(&out.stderr).contains("there is nothing to hold") {
            return (out, free);
        }
    }
    panic!("MemAvailable kept falling: the pressure scenario refused three times");
}

/// Processes that run `bench-helper` for the benchmark process `parent` (their last argument).
fn helpers_of(parent: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else { continue };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).filter(|a| !a.is_empty()).collect();
        if args.iter().any(|a| *a == b"bench-helper") && args.last() == Some(&parent.to_string().as_bytes()) {
            found.push(pid);
        }
    }
    found
}

/// Whether `pid` still runs `bench-helper` (a reused pid runs something else).
fn is_helper(pid: u64) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == b"bench-helper"))
}

fn json(out: &Output) -> Value {
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn pressure_reports_reclaim_and_ends_its_holder() {
    let _one = one_at_a_time();
    let d = scratch();
    let (out, free) = pressure_run(d.path(), &["--modes", "buffered,direct"]);
    let r = json(&out);
    assert_eq!(r["config"]["scenario"], "pressure");
    assert_eq!(r["config"]["free"].as_u64(), Some(free));
    assert!(r["system"]["swap_bytes"].is_u64());
    for m in r["modes"].as_array().unwrap() {
        let t = &m["runs"][0];
        let p = &t["pressure"];
        let held = p["held_bytes"].as_u64().unwrap();
        let target = p["target_bytes"].as_u64().unwrap();
        assert!(held >= 64 << 20 && held <= target, "{}: held {held} of {target}", m["mode"]);
        assert!(p["locked"].is_boolean() && p["mem_available_start_bytes"].as_u64().unwrap() > 0);
        assert_eq!(p["holder_lost"], false);
        for k in ["pgscan_kswapd", "pgscan_direct", "pgsteal_kswapd", "pgsteal_direct", "allocstall"] {
            assert!(t["reclaim"][k].is_u64(), "{k}");
            assert!(m["summary"][k]["median"].is_number(), "{k}");
        }
        assert!(t["kswapd_cpu_s"].as_f64().unwrap() >= 0.0);
        let series = t["kswapd_cpu_pct_series"].as_array().unwrap();
        assert_eq!(series.len(), t["series"]["mib_s"].as_array().unwrap().len());
        assert!(series.iter().all(|v| v.as_f64().unwrap() >= 0.0));
        assert_eq!(m["summary"]["pressure_held_bytes"]["median"].as_f64(), Some(held as f64));
        assert_eq!(t["bytes"].as_u64(), Some(8 << 20));
        // Its holder was waited for: no process is left under its pid.
        let pid = p["holder_pid"].as_u64().unwrap();
        assert!(!is_helper(pid), "holder {pid} still runs");
    }
    let pids: Vec<u64> = r["modes"].as_array().unwrap().iter().map(|m| m["runs"][0]["pressure"]["holder_pid"].as_u64().unwrap()).collect();
    assert_ne!(pids[0], pids[1], "one holder per trial");
}

/// Waits until `child` has a `bench-helper` process, at most 60 s; `None` when it ended first.
fn wait_for_helper(child: &mut Child) -> Option<u32> {
    let t0 = Instant::now();
    loop {
        if let Some(&h) = helpers_of(child.id()).first() {
            return Some(h);
        }
        if child.try_wait().unwrap().is_some() {
            return None;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "no helper process appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_interrupted_pressure_bench_exits_130_and_ends_its_holder() {
    let _one = one_at_a_time();
    let d = scratch();
    let mut tries = 0;
    let (child, holder) = loop {
        let free = mem_available() - HOLD;
        // Several trials of small direct requests: a holder is alive for most of the run.
        let mut child = bench_with(
            d.path(),
            &["--scenario", "pressure", "--free", &free.to_string(), "--modes", "direct", "--runs", "4", "--bs", "4k", "--queue-depth", "1"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        if let Some(h) = wait_for_helper(&mut child) {
            break (child, h);
        }
        // Refused (MemAvailable fell meanwhile) or failed: say why after three tries.
        let out = child.wait_with_output().unwrap();
        tries += 1;
        assert!(tries < 3, "the bench ended before starting a helper: {}", String::from_utf8_lossy(&out.stderr));
    };
    let bench_pid = child.id();
    let out = cacheless_testkit::interrupt(child, Duration::from_millis(300), rustix::process::Signal::INT);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "Ctrl-C exits 130: {err}");
    assert!(err.contains("interrupted"), "{err}");
    assert!(out.stdout.is_empty(), "no report for an interrupted run");
    assert!(!is_helper(u64::from(holder)), "holder {holder} still runs");
    assert!(helpers_of(bench_pid).is_empty());
    // Nothing written is left behind; the kept source is whole.
    let names: Vec<String> = std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["cacheless-bench-0.dat"], "{names:?}");
}

#[test]
fn neighbour_reports_the_co_tenant_under_writes() {
    let d = scratch();
    let out = bench(d.path(), &["--scenario", "neighbour", "--hot-size", "16M", "--rw", "write", "--modes", "buffered,direct"]).output().unwrap();
    let r = json(&out);
    assert_eq!(r["config"]["scenario"], "neighbour");
    assert_eq!(r["config"]["hot_size"].as_u64(), Some(16 << 20));
    let hot = d.path().join("cacheless-bench-hot.dat");
    assert_eq!(r["config"]["hot_file"].as_str(), Some(s(&hot)));
    // Kept beside the files for the next run, like the sources.
    assert_eq!(std::fs::metadata(&hot).unwrap().len(), 16 << 20);
    for m in r["modes"].as_array().unwrap() {
        let n = &m["runs"][0]["neighbour"];
        assert_eq!(n["hot_bytes"].as_u64(), Some(16 << 20));
        let start = n["resident_start_bytes"].as_u64().unwrap();
        assert!(start > 8 << 20 && start <= 16 << 20, "{}: the hot set was not cached: {start}", m["mode"]);
        let evicted = n["evicted_fraction"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&evicted), "{evicted}");
        let end = n["resident_end_bytes"].as_u64().unwrap();
        assert_eq!(evicted, start.saturating_sub(end) as f64 / start as f64);
        assert!(n["mib_s"].as_f64().unwrap() >= 0.0 && n["seconds"].as_f64().unwrap() > 0.0);
        let med = m["summary"]["neighbour_evicted_fraction"]["median"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&med));
        assert!(m["summary"]["neighbour_mib_s"]["median"].as_f64().unwrap() >= 0.0);
        assert_eq!(m["runs"][0]["bytes"].as_u64(), Some(8 << 20));
        let pid = n["pid"].as_u64().unwrap();
        assert!(!is_helper(pid), "co-tenant {pid} still runs");
    }
}

#[test]
fn pressure_refuses_when_free_is_above_what_is_available() {
    let _one = one_at_a_time();
    let d = scratch();
    let free = mem_available() + (1 << 30);
    let out = bench(d.path(), &["--scenario", "pressure", "--free", &free.to_string()]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("pressure scenario: MemAvailable is") && err.contains(&format!("({free} bytes)")), "{err}");
    // Refused before any file was made.
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
}
