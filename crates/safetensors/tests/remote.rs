//! Loading from `s3://` and `http(s)://` against the real servers the test command starts
//! (SeaweedFS, nginx): every loader byte-exact against the same file loaded from disk, `keys`
//! fetching only those tensors' ranges, and errors naming the URL.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

use std::path::Path;
use std::sync::atomic::AtomicBool;

use cacheless::{Budget, ErrorKind, IoOptions, Progress, Taken};
use cacheless_remote::{upload_file, Credentials, Location, Remote, RemoteOptions};
use cacheless_safetensors::{load, load_model, serialize, Dtype, Error, LoadOptions, Loaded, SafeFile, TensorData};
use cacheless_testkit::servers;

const MIB: usize = 1 << 20;

/// Tensors around the 1 MiB range size: tiny, one byte past a range, many ranges.
fn tensors(seed: u64) -> Vec<(String, Vec<usize>, Vec<u8>)> {
    [("a.tiny", vec![3usize]), ("b.past", vec![MIB / 4 + 1]), ("c.many", vec![5 * MIB / 4, 3]), ("d.small", vec![7, 5])]
        .into_iter()
        .enumerate()
        .map(|(i, (n, shape))| {
            let len = shape.iter().product::<usize>() * 4;
            (n.to_string(), shape, cacheless_testkit::random_bytes(len, seed * 10 + i as u64))
        })
        .collect()
}

fn file(ts: &[(String, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let views: Vec<TensorData<'_>> = ts.iter().map(|(n, s, d)| TensorData { name: n, dtype: Dtype::F32, shape: s, data: d }).collect();
    serialize(&views, None).unwrap()
}

fn opts(remote: RemoteOptions) -> LoadOptions {
    let mut o = LoadOptions::new(Budget::new(64 * MIB));
    o.remote = remote;
    o
}

/// Every tensor of `l` as (name, bytes), in file order.
fn contents(l: &Loaded) -> Vec<(String, Vec<u8>)> {
    l.header.tensors().iter().filter_map(|t| l.tensor_bytes(t).map(|b| (t.name.clone(), b.to_vec()))).collect()
}

fn s3_options(s3: &servers::S3) -> RemoteOptions {
    let credentials = Some(Credentials { key_id: s3.key.clone(), secret: s3.secret.clone(), token: None });
    RemoteOptions { part_size: MIB, endpoint: Some(s3.endpoint.clone()), region: Some("us-east-1".into()), credentials, ..RemoteOptions::default() }
}

fn put(s3: &servers::S3, key: &str, local: &Path) -> String {
    let url = s3.url(key);
    let loc = Location::parse(&url).unwrap();
    let remote = Remote::connect(&loc, &s3_options(s3)).unwrap();
    upload_file(&remote, local, &loc, &IoOptions::new(Budget::new(64 * MIB)), false, &AtomicBool::new(false), None).unwrap();
    url
}

#[test]
fn s3_loads_match_the_file_loaded_from_disk_and_keys_fetch_only_their_ranges() {
    let Some(s3) = servers::s3() else { return };
    let pre = format!("st-load-{}/", std::process::id());
    let d = cacheless_testkit::scratch();
    let ts = tensors(1);
    let local = d.path().join("m.safetensors");
    std::fs::write(&local, file(&ts)).unwrap();
    let url = put(&s3, &format!("{pre}m.safetensors"), &local);
    let o = opts(s3_options(&s3));
    let disk = load(&local, None, &o, &Progress::new()).unwrap();

    let p = Progress::new();
    let whole = load(Path::new(&url), None, &o, &p).unwrap();
    assert_eq!(contents(&whole), contents(&disk));
    assert_eq!(whole.report.decision.mode, Taken::Remote, "{}", whole.report.decision.reason);
    assert_eq!(whole.report.bytes_read, std::fs::metadata(&local).unwrap().len());
    assert_eq!(p.bytes(), whole.report.bytes_read, "every byte counted once");

    // keys=: only the spans of the tensors named (page-widened), never the large one.
    let keys = vec!["d.small".to_string(), "a.tiny".to_string()];
    let some = load(Path::new(&url), Some(&keys), &o, &Progress::new()).unwrap();
    let big = some.header.require("c.many").unwrap();
    assert!(some.tensor_bytes(big).is_none(), "c.many was not fetched");
    assert!(some.report.bytes_read < big.len, "{} B fetched", some.report.bytes_read);
    for k in &keys {
        let t = some.header.require(k).unwrap();
        assert_eq!(some.tensor_bytes(t).unwrap(), disk.tensor_bytes(t).unwrap(), "{k}");
    }

    // safe_open: one tensor at a time, the header read at open.
    let mut f = SafeFile::open(Path::new(&url), &o).unwrap();
    assert_eq!(f.decision().mode, Taken::Remote);
    for (name, _, data) in &ts {
        let (arena, at, t) = f.tensor(name, &Progress::new()).unwrap();
        assert_eq!(&arena.bytes()[at..at + data.len()], &data[..], "{name}");
        assert_eq!(t.len, data.len() as u64);
    }

    // A missing object: an error naming the URL, NotFound.
    let missing = s3.url(&format!("{pre}absent.safetensors"));
    let e = load(Path::new(&missing), None, &o, &Progress::new()).unwrap_err();
    let Error::Engine(e) = e else { panic!("{e}") };
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert!(e.to_string().contains(&missing), "{e}");
}

#[test]
fn a_sharded_checkpoint_under_a_prefix_loads_as_from_its_folder() {
    let Some(s3) = servers::s3() else { return };
    let pre = format!("st-model-{}/", std::process::id());
    let d = cacheless_testkit::scratch();
    let dir = d.path().join("ckpt");
    std::fs::create_dir(&dir).unwrap();
    let (one, two) = (tensors(2), tensors(3));
    let rename = |ts: Vec<(String, Vec<usize>, Vec<u8>)>, p: &str| ts.into_iter().map(|(n, s, b)| (format!("{p}.{n}"), s, b)).collect::<Vec<_>>();
    let (one, two) = (rename(one, "l0"), rename(two, "l1"));
    std::fs::write(dir.join("model-00001-of-00002.safetensors"), file(&one)).unwrap();
    std::fs::write(dir.join("model-00002-of-00002.safetensors"), file(&two)).unwrap();
    let mut map = serde_json::Map::new();
    for (n, _, _) in &one {
        map.insert(n.clone(), "model-00001-of-00002.safetensors".into());
    }
    for (n, _, _) in &two {
        map.insert(n.clone(), "model-00002-of-00002.safetensors".into());
    }
    let index = serde_json::json!({"metadata": {"total_size": 1}, "weight_map": map});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    for e in std::fs::read_dir(&dir).unwrap() {
        let e = e.unwrap();
        put(&s3, &format!("{pre}{}", e.file_name().to_string_lossy()), &e.path());
    }
    // Something deeper under the prefix is not a shard of this checkpoint.
    put(&s3, &format!("{pre}other/x.safetensors"), &dir.join("model-00001-of-00002.safetensors"));
    let o = opts(s3_options(&s3));
    let (_, disk) = load_model(&dir, &o, 2, &Progress::new()).unwrap();
    let want: Vec<_> = disk.iter().flat_map(contents).collect();
    for url in [s3.url(&pre), s3.url(&format!("{pre}model.safetensors.index.json"))] {
        let p = Progress::new();
        let (index, got) = load_model(Path::new(&url), &o, 2, &p).unwrap();
        assert_eq!(index.shards.len(), 2, "{url}");
        assert_eq!(got.iter().flat_map(contents).collect::<Vec<_>>(), want, "{url}");
        assert_eq!(p.bytes(), p.total_bytes(), "{url}");
        assert!(index.weight_map.contains_key("l1.c.many"));
    }
}

#[test]
fn http_loads_with_ranges_and_without() {
    let Some(h) = servers::http() else { return };
    let ts = tensors(4);
    let bytes = file(&ts);
    let name = format!("st-{}.safetensors", std::process::id());
    let d = cacheless_testkit::scratch();
    let local = d.path().join("m.safetensors");
    std::fs::write(&local, &bytes).unwrap();
    let o = opts(RemoteOptions { part_size: MIB, ..RemoteOptions::default() });
    let disk = load(&local, None, &o, &Progress::new()).unwrap();
    for folder in ["ranges", "noranges"] {
        let served = h.root.join(folder).join(&name);
        std::fs::write(&served, &bytes).unwrap();
        let url = format!("{}/{folder}/{name}", h.origin);
        let got = load(Path::new(&url), None, &o, &Progress::new()).unwrap();
        assert_eq!(contents(&got), contents(&disk), "{url}");
        let keys = vec!["b.past".to_string()];
        let some = load(Path::new(&url), Some(&keys), &o, &Progress::new()).unwrap();
        let t = some.header.require("b.past").unwrap();
        assert_eq!(some.tensor_bytes(t).unwrap(), disk.tensor_bytes(t).unwrap(), "{url}");
        std::fs::remove_file(&served).unwrap();
    }
}
