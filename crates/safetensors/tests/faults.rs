//! Saving and loading under an injected fault at every position of every call the engine makes
//! for them (open, read, write, fsync, rename), with every fault that applies there: EINTR,
//! EAGAIN and short counts are retried and the result is byte-exact; any other fault is an
//! engine error naming the file and the operation; a failed save leaves the old file and no
//! temporary; a load leaves its file untouched; every buffer is back in the budget.
//!
//! Fault injection is process-wide: the cases of this binary take turns.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

#[path = "../../cacheless/tests/common/mod.rs"]
mod common;

use std::path::Path;

use cacheless::fault::{self, Plan, Site};
use cacheless::{BackendKind, Budget, Mode, Progress, WriteOptions};
use cacheless_safetensors::{load, save, serialize, Dtype, Error, LoadOptions, TensorData};
use common::*;
use rand::RngCore;

/// The tensors saved: a few dtypes and shapes, one spanning several requests.
fn tensors() -> Vec<(String, Dtype, Vec<usize>, Vec<u8>)> {
    let bytes = |n: usize, seed: u64| {
        let mut v = vec![0u8; n];
        rng(seed).fill_bytes(&mut v);
        v
    };
    vec![
        ("big".into(), Dtype::F32, vec![50_000], bytes(200_000, 1)),
        ("half".into(), Dtype::F16, vec![3, 7], bytes(42, 2)),
        ("ids".into(), Dtype::I64, vec![100], bytes(800, 3)),
        ("scalar".into(), Dtype::F64, vec![], bytes(8, 4)),
    ]
}

fn check_error(r: &Result<(), Error>, plan: Option<Plan>, path: &Path, what: &str) {
    let fired = fault::fired();
    match (r, plan) {
        (Ok(()), Some(p)) if fired => assert!(p.fault.retried_at(p.site), "{what}: {p:?} was injected and it succeeded"),
        (Ok(()), _) => {}
        (Err(Error::Engine(e)), Some(p)) if fired && !p.fault.retried_at(p.site) => {
            assert_eq!(e.errno(), p.fault.errno(), "{what}: {p:?}: {e}");
            assert!(p.site.ops().contains(&e.op()), "{what}: {p:?}: the error names the operation '{}': {e}", e.op());
            assert!(e.path() == path || Some(e.path()) == path.parent(), "{what}: {p:?}: the error names {}: {e}", e.path().display());
        }
        (Err(e), p) => panic!("{what}: {p:?} (injected: {fired}) failed: {e}"),
    }
}

#[test]
fn save_and_load_survive_or_report_every_fault() {
    let d = scratch();
    let ts = tensors();
    let views: Vec<TensorData<'_>> = ts.iter().map(|(n, dt, sh, data)| TensorData { name: n, dtype: *dt, shape: sh, data }).collect();
    let want = serialize(&views, None).unwrap();
    let path = d.path().join("model.safetensors");
    let old = b"the file as it was".to_vec();
    let caps = cacheless::caps::for_dir(d.path()).unwrap();
    let mut backends = vec![BackendKind::Threads];
    if require("uring", cacheless::caps::system().uring.as_ref().map(|_| ()).map_err(|u| u.reason.clone())) {
        backends.push(BackendKind::Uring);
    }
    let mut modes = vec![Mode::Buffered];
    if require("direct", caps.direct.as_ref().map(|_| ()).map_err(|u| u.reason.clone())) {
        modes.push(Mode::Direct);
    }
    for &backend in &backends {
        for &mode in &modes {
            let what = format!("save ({mode}, {backend})");
            let s = fault::sweep(&Site::ALL, |plan| {
                std::fs::write(&path, &old).unwrap();
                let budget = Budget::new(8 << 20);
                let mut wo = WriteOptions::new(budget.clone());
                (wo.io.mode, wo.io.backend, wo.io.block_size, wo.io.queue_depth) = (mode, backend, 64 << 10, 2);
                let r = save(&path, &views, None, &wo, &Progress::new()).map(|_| ());
                check_error(&r, plan, &path, &what);
                let now = std::fs::read(&path).unwrap();
                assert!(now == want || (r.is_err() && now == old), "{what}: {plan:?}: the file is neither the old one nor the saved one");
                let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
                assert_eq!(names, ["model.safetensors"], "{what}: {plan:?}: files left behind");
                assert_eq!(budget.used(), 0, "{what}: {plan:?}: buffers not returned to the budget");
            });
            eprintln!("{what}: clean calls {:?}; {} runs with a fault, {} injected ({} retried)", s.clean, s.runs, s.fired, s.retried);
            assert!(s.fired > 0);

            std::fs::write(&path, &want).unwrap();
            let what = format!("load ({mode}, {backend})");
            let s = fault::sweep(&[Site::Open, Site::Read], |plan| {
                let budget = Budget::new(8 << 20);
                let mut o = LoadOptions::new(budget.clone());
                (o.read.io.mode, o.read.io.backend, o.read.io.block_size, o.piece) = (mode, backend, 64 << 10, 128 << 10);
                let r = load(&path, None, &o, &Progress::new());
                if let Ok(l) = &r {
                    for (n, _, _, data) in &ts {
                        assert!(l.tensor_bytes(l.header.get(n).unwrap()).unwrap() == &data[..], "{what}: {plan:?}: tensor {n} differs");
                    }
                }
                check_error(&r.map(|_| ()), plan, &path, &what);
                assert!(std::fs::read(&path).unwrap() == want, "{what}: {plan:?}: the file changed");
                assert_eq!(budget.used(), 0, "{what}: {plan:?}: buffers not returned to the budget");
            });
            eprintln!("{what}: clean calls {:?}; {} runs with a fault, {} injected ({} retried)", s.clean, s.runs, s.fired, s.retried);
            assert!(s.fired > 0);
        }
    }
}
