//! The loader and saver against the `safetensors` crate (the format's reference) and std::fs,
//! under every mode and backend; corrupt files; page-cache footprint; sharded checkpoints.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

#[path = "../../cacheless/tests/common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use cacheless::{BackendKind, Budget, Mode, Progress, Taken, WriteOptions};
use cacheless_safetensors::{load, load_model, save, serialize, Dtype, Error, LoadOptions, SafeFile, TensorData};
use common::*;
use rand::{Rng, RngCore};

/// An owned tensor for building test files.
struct T {
    name: String,
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl T {
    fn new(name: &str, dtype: Dtype, shape: &[usize], seed: u64) -> T {
        let n = usize::try_from(cacheless_safetensors::header::nbytes(dtype, shape).unwrap()).unwrap();
        let mut data = vec![0u8; n];
        rng(seed).fill_bytes(&mut data);
        T { name: name.into(), dtype, shape: shape.to_vec(), data }
    }
    fn view(&self) -> TensorData<'_> {
        TensorData { name: &self.name, dtype: self.dtype, shape: &self.shape, data: &self.data }
    }
}

/// The reference: the crate's own serializer with real data.
struct Real<'a>(&'a T);
impl safetensors::View for Real<'_> {
    fn dtype(&self) -> Dtype {
        self.0.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.0.shape
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Borrowed(&self.0.data)
    }
    fn data_len(&self) -> usize {
        self.0.data.len()
    }
}

fn reference(ts: &[T], meta: Option<&HashMap<String, String>>) -> Vec<u8> {
    safetensors::serialize(ts.iter().map(|t| (t.name.as_str(), Real(t))), meta.cloned()).unwrap()
}

fn mixed(seed: u64) -> Vec<T> {
    let dtypes = [Dtype::F32, Dtype::F16, Dtype::BF16, Dtype::U8, Dtype::I64, Dtype::BOOL, Dtype::F8_E4M3, Dtype::C64, Dtype::F4, Dtype::F64];
    let mut r = rng(seed);
    let mut v = Vec::new();
    for (i, d) in dtypes.iter().enumerate() {
        let rows = r.random_range(1..40);
        v.push(T::new(&format!("t{i:02}"), *d, &[rows, 6], seed + i as u64));
    }
    v.push(T::new("scalar", Dtype::F32, &[], 1));
    v.push(T::new("empty", Dtype::F16, &[0, 5], 2));
    // A large one spanning many requests and pieces.
    v.push(T::new("big", Dtype::F32, &[3 << 20], 3));
    v
}

fn opts(mode: Mode, backend: BackendKind) -> LoadOptions {
    let mut o = LoadOptions::new(Budget::new(64 << 20));
    o.read.io.mode = mode;
    o.read.io.backend = backend;
    o.read.io.block_size = 1 << 20;
    o.piece = 4 << 20;
    o
}

fn wopts(mode: Mode, backend: BackendKind) -> WriteOptions {
    let mut o = WriteOptions::new(Budget::new(64 << 20));
    o.io.mode = mode;
    o.io.backend = backend;
    o
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn saved_files_are_the_reference_bytes_and_load_back_in_every_mode() {
    let d = scratch();
    let ts = mixed(10);
    let views: Vec<_> = ts.iter().map(T::view).collect();
    let meta: HashMap<String, String> = [("format".to_string(), "np".to_string())].into();
    let want = reference(&ts, Some(&meta));
    assert_eq!(serialize(&views, Some(&meta)).unwrap(), want, "in-memory serialization differs from the safetensors crate");
    for (mode, backend) in matrix(d.path()) {
        let p = d.path().join(format!("m-{mode}-{backend}.safetensors"));
        let rep = save(&p, &views, Some(&meta), &wopts(mode, backend), &Progress::new()).unwrap();
        assert_eq!(rep.bytes, want.len() as u64);
        assert!(std::fs::read(&p).unwrap() == want, "saved bytes differ from the safetensors crate ({mode}, {backend})");
        let l = load(&p, None, &opts(mode, backend), &Progress::new()).unwrap();
        assert_eq!(l.header.metadata(), Some(&meta));
        for t in &ts {
            let e = l.header.get(&t.name).unwrap();
            assert_eq!((e.dtype, &e.shape), (t.dtype, &t.shape));
            assert!(l.tensor_bytes(e).unwrap() == &t.data[..], "tensor {} differs ({mode}, {backend})", t.name);
        }
        // Arena byte i is file byte i.
        assert!(l.arena.bytes()[..want.len()] == want[..]);
    }
}

#[test]
fn keys_read_only_the_spans_asked_for() {
    let d = scratch();
    let mut ts = vec![
        T::new("a", Dtype::F32, &[1 << 20], 1),
        T::new("b", Dtype::U8, &[10], 2),
        T::new("c", Dtype::F32, &[1 << 20], 3),
        T::new("z", Dtype::F64, &[3], 4),
    ];
    ts.sort_by(|a, b| a.name.cmp(&b.name));
    let p = write(d.path(), "k.safetensors", &reference(&ts, None));
    let keys = vec!["z".to_string(), "b".to_string()];
    let progress = Progress::new();
    let l = load(&p, Some(&keys), &LoadOptions::new(Budget::new(64 << 20)), &progress).unwrap();
    assert!(l.report.bytes_read < 3 << 20, "read {} bytes for two tiny tensors", l.report.bytes_read);
    assert!(l.arena.len() < 3 << 20);
    assert_eq!(progress.bytes(), l.report.bytes_read);
    for t in ts.iter().filter(|t| keys.contains(&t.name)) {
        assert!(l.tensor_bytes(l.header.get(&t.name).unwrap()).unwrap() == &t.data[..]);
    }
    assert!(l.tensor_offset(l.header.get("a").unwrap()).is_none(), "a tensor not asked for is not loaded");
    let missing = load(&p, Some(&["nope".to_string()]), &LoadOptions::new(Budget::new(64 << 20)), &Progress::new()).unwrap_err();
    assert!(matches!(missing, Error::NoTensor { .. }), "{missing}");
}

#[test]
fn tensors_keep_their_file_alignment_in_the_arena() {
    let d = scratch();
    // A hand-made header of odd length puts every tensor at an odd file offset.
    let json = r#"{"x":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},"y":{"dtype":"F64","shape":[2],"data_offsets":[12,28]}}"#;
    assert!(json.len() % 8 != 0);
    let mut f = (json.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(json.as_bytes());
    f.extend(0..28u8);
    let p = write(d.path(), "odd.safetensors", &f);
    for keys in [None, Some(vec!["y".to_string()])] {
        let l = load(&p, keys.as_deref(), &LoadOptions::new(Budget::new(1 << 20)), &Progress::new()).unwrap();
        let y = l.header.get("y").unwrap();
        let at = l.tensor_offset(y).unwrap();
        let (off, end) = (usize::try_from(y.offset).unwrap(), usize::try_from(y.end()).unwrap());
        assert_eq!((l.arena.address() + at) % 4096, off % 4096, "address and file offset agree modulo the page");
        assert!(l.tensor_bytes(y).unwrap() == &f[off..end]);
    }
}

#[test]
fn corrupt_files_are_rejected_with_the_reason() {
    let d = scratch();
    let good = reference(&[T::new("a", Dtype::F32, &[4], 1), T::new("b", Dtype::F32, &[4], 2)], None);
    let n = usize::try_from(u64::from_le_bytes(good[..8].try_into().unwrap())).unwrap();
    let mut cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", vec![], "too short"),
        ("huge header", [u64::MAX.to_le_bytes().to_vec(), good[8..].to_vec()].concat(), "exceeds the limit"),
        ("header past EOF", [(good.len() as u64).to_le_bytes().to_vec(), good[8..].to_vec()].concat(), "runs past the end"),
        ("truncated data", good[..good.len() - 3].to_vec(), "holds only 29 bytes of data: truncated"),
        ("trailing bytes", [good.clone(), vec![0; 5]].concat(), "5 bytes unaccounted"),
    ];
    let bad_json = [8u64.to_le_bytes().to_vec(), b"{\"a\":1}x".to_vec()].concat();
    cases.push(("bad JSON", bad_json, "not valid safetensors JSON"));
    let text = String::from_utf8(good[8..8 + n].to_vec()).unwrap();
    let overlap = text.replace("[16,32]", "[8,24]");
    let mut ov = (overlap.len() as u64).to_le_bytes().to_vec();
    ov.extend_from_slice(overlap.as_bytes());
    ov.extend_from_slice(&good[8 + n..]);
    cases.push(("overlap", ov, "overlaps tensor 'a'"));
    for (what, bytes, expect) in cases {
        let p = write(d.path(), "bad.safetensors", &bytes);
        for keys in [None, Some(vec!["a".to_string()])] {
            let e = load(&p, keys.as_deref(), &LoadOptions::new(Budget::new(1 << 20)), &Progress::new()).unwrap_err();
            assert!(matches!(e, Error::Invalid { .. }), "{what}: {e}");
            let msg = e.to_string();
            assert!(msg.contains(expect) && msg.contains("bad.safetensors"), "{what}: '{msg}' should name the file and say '{expect}'");
        }
    }
}

#[test]
fn saving_checks_the_tensors_first() {
    let d = scratch();
    let p = d.path().join("s.safetensors");
    let data = [0u8; 12];
    let bad = [TensorData { name: "a", dtype: Dtype::F32, shape: &[4], data: &data }];
    let e = save(&p, &bad, None, &wopts(Mode::Auto, BackendKind::Auto), &Progress::new()).unwrap_err();
    assert!(e.to_string().contains("needs 16"), "{e}");
    let dup = [TensorData { name: "a", dtype: Dtype::U8, shape: &[12], data: &data }, TensorData { name: "a", dtype: Dtype::U8, shape: &[12], data: &data }];
    assert!(save(&p, &dup, None, &wopts(Mode::Auto, BackendKind::Auto), &Progress::new()).unwrap_err().to_string().contains("two tensors"));
    assert!(!p.exists(), "nothing is created when the tensors are inconsistent");
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0, "no temporary is left");
}

#[test]
fn a_cancelled_save_or_load_leaves_nothing_behind() {
    let d = scratch();
    let ts = vec![T::new("big", Dtype::F32, &[8 << 20], 5)];
    let views: Vec<_> = ts.iter().map(T::view).collect();
    let p = d.path().join("c.safetensors");
    std::fs::write(&p, b"old").unwrap();
    let progress = Progress::new();
    progress.cancel();
    let e = save(&p, &views, None, &wopts(Mode::Auto, BackendKind::Auto), &progress).unwrap_err();
    assert!(matches!(&e, Error::Engine(x) if x.kind() == cacheless::ErrorKind::Interrupted), "{e}");
    assert_eq!(std::fs::read(&p).unwrap(), b"old", "the old file is untouched");
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1, "no temporary is left");
    let q = write(d.path(), "l.safetensors", &reference(&ts, None));
    let e = load(&q, None, &LoadOptions::new(Budget::new(64 << 20)), &progress).unwrap_err();
    assert!(matches!(&e, Error::Engine(x) if x.kind() == cacheless::ErrorKind::Interrupted), "{e}");
}

#[test]
fn a_cold_load_and_a_save_leave_no_page_cache_and_a_warm_file_stays_warm() {
    let d = scratch();
    let caps = cacheless::caps::for_dir(d.path()).unwrap();
    if !require("direct", support(&caps.direct)) {
        return;
    }
    let ts = [T::new("w", Dtype::F32, &[6 << 20], 7), T::new("b", Dtype::F16, &[333], 8)];
    let views: Vec<_> = ts.iter().map(T::view).collect();
    let p = d.path().join("r.safetensors");
    save(&p, &views, None, &wopts(Mode::Auto, BackendKind::Auto), &Progress::new()).unwrap();
    let after_save = cacheless::residency::residency_of(&p).unwrap();
    assert!(after_save.fraction() < 0.02, "save left {} of {} pages cached", after_save.cached_pages, after_save.total_pages);
    cacheless::residency::evict_path(&p).unwrap();
    let l = load(&p, None, &LoadOptions::new(Budget::new(64 << 20)), &Progress::new()).unwrap();
    assert_eq!(l.report.decision.mode, Taken::Direct, "{}", l.report.decision.reason);
    let r = cacheless::residency::residency_of(&p).unwrap();
    assert!(r.fraction() < 0.02, "cold load left {} of {} pages cached", r.cached_pages, r.total_pages);
    // Warm the file, then load: buffered, and everything stays cached.
    let _ = std::fs::read(&p).unwrap();
    let l = load(&p, None, &LoadOptions::new(Budget::new(64 << 20)), &Progress::new()).unwrap();
    assert_eq!(l.report.decision.mode, Taken::Buffered, "{}", l.report.decision.reason);
    let r = cacheless::residency::residency_of(&p).unwrap();
    assert_eq!(r.cached_pages, r.total_pages, "a warm load must keep the file cached");
}

#[test]
fn safe_file_reads_tensors_one_at_a_time_with_a_window() {
    let d = scratch();
    let ts: Vec<T> = (0..500).map(|i| T::new(&format!("n{i:04}"), Dtype::F32, &[i % 7 + 1, 3], i as u64)).collect();
    let p = write(d.path(), "many.safetensors", &reference(&ts, None));
    let mut f = SafeFile::open(&p, &LoadOptions::new(Budget::new(16 << 20))).unwrap();
    let progress = Progress::new();
    for t in &ts {
        let (arena, at, e) = f.tensor(&t.name, &progress).unwrap();
        assert!(arena.bytes()[at..at + usize::try_from(e.len).unwrap()] == t.data[..], "{}", t.name);
    }
    assert!(progress.bytes() < 2 * std::fs::metadata(&p).unwrap().len(), "the window reads each byte about once ({} bytes read)", progress.bytes());
    assert!(matches!(f.tensor("missing", &progress), Err(Error::NoTensor { .. })));
}

#[test]
fn sharded_checkpoints_load_as_their_shards_under_one_small_budget() {
    let d = scratch();
    let mut weight_map = serde_json::Map::new();
    let mut all = HashMap::new();
    for s in 0..4 {
        let ts: Vec<T> = (0..3).map(|i| T::new(&format!("s{s}.w{i}"), Dtype::F32, &[(s + 1) * 100_000 + i], (s * 10 + i) as u64)).collect();
        let name = format!("model-{:05}-of-00004.safetensors", s + 1);
        write(d.path(), &name, &reference(&ts, None));
        for t in ts {
            weight_map.insert(t.name.clone(), name.clone().into());
            all.insert(t.name.clone(), t.data);
        }
    }
    let index = serde_json::json!({"metadata": {"total_size": 0}, "weight_map": weight_map});
    write(d.path(), "model.safetensors.index.json", index.to_string().as_bytes());
    // A budget of one request: shards still load concurrently without waiting on each other.
    let mut o = LoadOptions::new(Budget::new(1 << 20));
    o.read.io.block_size = 1 << 20;
    for target in [d.path().to_path_buf(), d.path().join("model.safetensors.index.json")] {
        let (idx, loaded) = load_model(&target, &o, 4, &Progress::new()).unwrap();
        assert_eq!(loaded.len(), 4);
        assert_eq!(idx.weight_map.len(), 12);
        let mut seen = 0;
        for l in &loaded {
            let single = load(l.header.path(), None, &o, &Progress::new()).unwrap();
            for t in l.header.tensors() {
                assert!(l.tensor_bytes(t).unwrap() == &all[&t.name][..]);
                assert!(l.tensor_bytes(t) == single.tensor_bytes(single.header.get(&t.name).unwrap()));
                seen += 1;
            }
        }
        assert_eq!(seen, 12);
    }
    // An index that names a tensor its shard does not hold, or a shard outside the folder.
    let mut wrong = index.clone();
    wrong["weight_map"]["s0.w0"] = "model-00002-of-00004.safetensors".into();
    let p = write(d.path(), "wrong.safetensors.index.json", wrong.to_string().as_bytes());
    let e = load_model(&p, &o, 2, &Progress::new()).unwrap_err().to_string();
    assert!(e.contains("s0.w0") && e.contains("does not hold it"), "{e}");
    let escape = serde_json::json!({"weight_map": {"x": "../outside.safetensors"}});
    let p = write(d.path(), "escape.safetensors.index.json", escape.to_string().as_bytes());
    assert!(load_model(&p, &o, 2, &Progress::new()).unwrap_err().to_string().contains("not a plain file name"));
}
