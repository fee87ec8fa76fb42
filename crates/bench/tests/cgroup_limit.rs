//! The low-memory scenario really limits memory: a buffered read of a file four times larger than the cgroup
//! limit keeps the cgroup's charge under the limit at every moment (sampled after every MiB read, not only at
//! the end). Needs root (or a delegated cgroup); skips with a reason
//! otherwise, unless `CACHELESS_REQUIRE` names `cgroup` or we are root with a writable cgroup file system.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

use std::io::{Read, Write};

use cacheless_bench::cgroup::{detect, MemoryCgroup};
use cacheless_bench::meter::measure;
use cacheless_bench::report::CacheSource;

const MIB: u64 = 1 << 20;

/// A memory cgroup must be creatable: `CACHELESS_REQUIRE` names `cgroup`, or we are root with
/// a writable cgroup file system.
fn required() -> bool {
    let root = rustix::process::geteuid().is_root();
    let writable =
        detect().map(|h| !rustix::fs::statvfs(&h.mount).map(|s| s.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY)).unwrap_or(true)).unwrap_or(false);
    (root && writable) || cacheless_testkit::required("cgroup")
}

fn make_cold_file(dir: &std::path::Path, size: u64) -> std::path::PathBuf {
    let path = dir.join("big");
    let mut f = std::fs::File::create(&path).unwrap();
    let block: Vec<u8> = (0..MIB).map(|i| (i * 31 % 251) as u8).collect();
    for _ in 0..size / MIB {
        f.write_all(&block).unwrap();
    }
    f.sync_all().unwrap();
    rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
    path
}

#[test]
fn buffered_read_stays_under_the_cgroup_limit() {
    let limit = 64 * MIB;
    let cg = match MemoryCgroup::create(limit) {
        Ok(cg) => cg,
        Err(e) if !required() => {
            cacheless_testkit::skip(&format!("cannot create a memory cgroup ({e}); not root, or cgroup fs read-only"));
            return;
        }
        Err(e) => panic!("root with a writable cgroup file system (or CACHELESS_REQUIRE=cgroup), yet: {e}"),
    };
    let dir = cacheless_testkit::scratch();
    let size = 4 * limit;
    let path = make_cold_file(dir.path(), size);

    let mut cg = cg;
    cg.enter().unwrap();
    // The charge after each MiB read, while the reads go on.
    let mut samples = Vec::new();
    let t = measure(Some(&cg), &[], |counter| {
        let mut f = std::fs::File::open(&path).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = f.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            counter.add_bytes(n as u64);
            samples.push(cg.usage()?);
        }
        Ok(())
    });
    // Once more while still inside, then leave before asserting.
    samples.push(cg.usage().unwrap());
    let peak = cg.peak();
    cg.leave().unwrap();
    let t = t.unwrap();
    let stat_cache = t.cache.peak_growth_bytes;
    cg.remove().unwrap();

    assert_eq!(t.bytes, size, "the whole file was read");
    assert_eq!(t.cache.source, CacheSource::Cgroup);
    assert_eq!(samples.len() as u64, size / MIB + 1, "one sample per MiB read");
    if let Some((i, u)) = samples.iter().enumerate().find(|(_, &u)| u > limit) {
        panic!("usage {u} over limit {limit} after {} MiB read", i + 1);
    }
    // The reads were charged to the cgroup: its usage reached the limit's neighbourhood during the run.
    let max_seen = samples.iter().copied().max().unwrap_or(0);
    assert!(max_seen > limit / 2, "usage peaked at {max_seen} during the run: reads were not charged to the cgroup");
    if let Some(p) = peak {
        assert!(p <= limit, "peak {p} over limit {limit}");
        // The reads were charged to the cgroup, so the limit was what bounded them.
        assert!(p > limit / 2, "peak {p}: reads were not charged to the cgroup");
    }
    assert!(stat_cache <= i64::try_from(limit).unwrap(), "page cache grew by {stat_cache}, over the limit");
    assert!(stat_cache > 0, "cgroup page cache did not grow: reads were not charged to it");
    assert_eq!(t.cgroup_peak_bytes, peak);
}
