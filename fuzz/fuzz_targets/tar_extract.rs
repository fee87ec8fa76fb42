//! The tar entry pipeline on arbitrary bytes (any compression is detected, then tar parsed, then
//! every entry created): nothing is ever created outside the destination, no entry's writer
//! panics, and a truncated or corrupt stream ends in an error (a panic or a hang is a crash).
#![no_main]

use std::io::Cursor;
use std::path::PathBuf;
use std::sync::OnceLock;

use cacheless::{Budget, Durability, Mode};
use cacheless_archive::{extract, ExtractOptions, Input, DEFAULT_WRITE_BACK};
use libfuzzer_sys::fuzz_target;

/// Where each run gets a folder of its own: tmpfs when there is one (fast), else the temp folder.
fn base() -> &'static PathBuf {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| {
        let shm = std::path::Path::new("/dev/shm");
        let parent = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
        let d = tempfile::Builder::new().prefix("cacheless-fuzz-").tempdir_in(parent).expect("a scratch folder");
        d.keep()
    })
}

fuzz_target!(|data: &[u8]| {
    let case = tempfile::tempdir_in(base()).expect("a folder for the run");
    let dest = case.path().join("out");
    let mut o = ExtractOptions::new(&dest);
    let budget = Budget::new(16 << 20);
    o.io.budget = budget.clone();
    o.io.mode = Mode::Auto;
    o.durability = Durability::Off { write_back: Some(DEFAULT_WRITE_BACK) };
    o.threads = 2;
    o.direct_min = 64 << 10;
    let r = extract(Input::Stream(Box::new(Cursor::new(data.to_vec()))), &o);
    if let Ok(report) = &r {
        for f in &report.failures {
            assert!(!f.contains("internal error"), "a worker panicked: {f}");
        }
    }
    drop(r);
    // Nothing beside the destination: no `..`, absolute path or symlink led out of it.
    for e in std::fs::read_dir(case.path()).expect("the run's folder") {
        let name = e.expect("an entry").file_name();
        assert_eq!(name, "out", "created outside the destination: {name:?}");
    }
    let others: Vec<_> = std::fs::read_dir(base()).expect("the scratch folder").map(|e| e.expect("an entry").path()).filter(|p| p != case.path()).collect();
    assert!(others.is_empty(), "created outside the destination: {others:?}");
    assert_eq!(budget.used(), 0, "buffers not returned to the budget");
});
