//! Helpers shared by the engine's and the safetensors crate's integration tests, on top of the
//! workspace's testkit (scratch folders, feature requirements).
#![allow(dead_code)] // Each test crate uses its own subset.
#![allow(clippy::unwrap_used)] // A failed step in a test is a failed test.

use std::path::{Path, PathBuf};

use cacheless::{BackendKind, Mode};
pub use cacheless_testkit::{require, scratch, skip};
use rand::{Rng, RngCore, SeedableRng};

/// `Ok`, or why the feature is unavailable, from a probe's verdict.
pub fn support<T>(s: &Result<T, cacheless::caps::Unavailable>) -> Result<(), String> {
    s.as_ref().map(|_| ()).map_err(|u| u.reason.clone())
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
#[track_caller]
pub fn matrix(dir: &Path) -> Vec<(Mode, BackendKind)> {
    let caps = cacheless::caps::for_dir(dir).unwrap();
    let sys = cacheless::caps::system();
    let mut backends = vec![BackendKind::Threads];
    if require("uring", support(&sys.uring)) {
        backends.push(BackendKind::Uring);
    }
    let mut modes = vec![Mode::Auto, Mode::Buffered, Mode::DropBehind];
    if require("direct", support(&caps.direct)) {
        modes.push(Mode::Direct);
    }
    if require("dontcache", support(&caps.dontcache)) {
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
        v.extend([k * align - 1, k * align, k * align + 1]);
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
        skip("no /dev/shm");
        return None;
    };
    if caps.fs_type != "tmpfs" || caps.dontcache.is_ok() {
        skip(&format!("/dev/shm is {} with dontcache {:?}", caps.fs_type, caps.dontcache.is_ok()));
        return None;
    }
    Some(tempfile::tempdir_in(shm).unwrap())
}
