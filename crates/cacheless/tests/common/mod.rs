//! Shared helpers for the engine's integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use cacheless::{BackendKind, Mode};
use rand::{Rng, RngCore, SeedableRng};

/// Features named in CACHELESS_REQUIRE must be present: a skip becomes a failure.
pub fn required(feature: &str) -> bool {
    std::env::var("CACHELESS_REQUIRE").map(|v| v.split(',').any(|f| f.trim() == feature)).unwrap_or(false)
}

/// Skips (returns true) when `feature` is unavailable for `reason`, unless it is required.
pub fn skip_unless(feature: &str, available: Result<(), String>) -> bool {
    match available {
        Ok(()) => false,
        Err(reason) => {
            if required(feature) {
                panic!("{feature} is required by CACHELESS_REQUIRE but unavailable: {reason}");
            }
            eprintln!("skipping: {feature} unavailable: {reason}");
            true
        }
    }
}

/// A scratch directory on the real disk (not tmpfs), under the target directory.
pub fn scratch() -> tempfile::TempDir {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(base).unwrap();
    tempfile::tempdir_in(base).unwrap()
}

/// A file of `len` pseudo-random bytes.
pub fn random_file(dir: &Path, name: &str, len: usize, seed: u64) -> (PathBuf, Vec<u8>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut data = vec![0u8; len];
    rng.fill_bytes(&mut data);
    let p = dir.join(name);
    std::fs::write(&p, &data).unwrap();
    (p, data)
}

/// Random number in range with a seed-driven generator.
pub fn rng(seed: u64) -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(seed)
}

/// Every concrete mode and backend whose features are present (probed on `dir`), failing if
/// a required one is missing.
pub fn matrix(dir: &Path) -> Vec<(Mode, BackendKind)> {
    let caps = cacheless::caps::for_dir(dir).unwrap();
    let sys = cacheless::caps::system();
    let mut backends = vec![BackendKind::Threads];
    if !skip_unless("uring", sys.uring.clone().map_err(|u| u.reason)) {
        backends.push(BackendKind::Uring);
    }
    let mut modes = vec![Mode::Auto, Mode::Buffered, Mode::WriteBehind];
    if !skip_unless("direct", caps.direct.clone().map(|_| ()).map_err(|u| u.reason)) {
        modes.push(Mode::Direct);
    }
    if !skip_unless("dontcache", caps.dontcache.clone().map_err(|u| u.reason)) {
        modes.push(Mode::DontCache);
    }
    let mut v = Vec::new();
    for m in &modes {
        for b in &backends {
            v.push((*m, *b));
        }
    }
    v
}

/// Sizes around every alignment boundary up to 3 alignments, plus a few random larger ones.
pub fn sizes(align: usize, seed: u64) -> Vec<usize> {
    let mut v = vec![0, 1];
    for k in 1..=3 {
        for d in [-1i64, 0, 1] {
            v.push((k as i64 * align as i64 + d) as usize);
        }
    }
    let mut r = rng(seed);
    for _ in 0..3 {
        v.push(r.random_range(1..(8 << 20)));
    }
    v.push(r.random_range((8 << 20)..(64 << 20)));
    v
}

/// A scratch directory on tmpfs, which has no RWF_DONTCACHE: a real filesystem lacking a
/// feature. `None` (after saying why) where /dev/shm is not such a tmpfs.
pub fn tmpfs_without_dontcache() -> Option<tempfile::TempDir> {
    let shm = Path::new("/dev/shm");
    let Ok(caps) = cacheless::caps::for_dir(shm) else {
        eprintln!("skipping: no /dev/shm");
        return None;
    };
    if caps.fs_type != "tmpfs" || caps.dontcache.is_ok() {
        eprintln!("skipping: /dev/shm is {} with dontcache {:?}", caps.fs_type, caps.dontcache.is_ok());
        return None;
    }
    Some(tempfile::tempdir_in(shm).unwrap())
}
