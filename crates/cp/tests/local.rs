//! The local copy (`cacheless_cp`, GNU cp over local paths) as a library: an archive copy equals its source under
//! every mode and backend, and under an injected fault at every position of every kind of call
//! it makes (open, mkdir, symlink, link, read, write, fsync, syncfs, rename), with every fault
//! that applies there: retried faults leave a whole copy and no error; any other fault is a
//! counted error naming its errno, an operation of its kind and a path of the tree, while every
//! file left under a final name is byte-exact, no temporary is left, and every buffer is back in
//! the budget.
//!
//! Fault injection is process-wide: the cases of this binary take turns.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

#[path = "../../cacheless/tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cacheless::fault::{self, Site};
use cacheless::{BackendKind, Budget, IoOptions, Mode, Progress, Taken};
use cacheless_cp::{copy as copy_tree, CpOptions as TreeOptions, CpReport as TreeReport};
use common::*;

/// One case injects at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The source tree under `root/src`: small files (written in batches), one larger than the
/// small-file limit (streamed), an empty file, nested directories, a symlink and a hard link.
fn make_src(root: &Path) -> PathBuf {
    let src = root.join("src");
    std::fs::create_dir_all(src.join("sub").join("deeper")).unwrap();
    random_file(&src, "small", 5000, 1);
    random_file(&src, "empty", 0, 2);
    random_file(&src.join("sub"), "large", (1 << 20) + 4097, 3);
    random_file(&src.join("sub").join("deeper"), "tiny", 7, 4);
    std::fs::hard_link(src.join("small"), src.join("sub").join("small-again")).unwrap();
    std::os::unix::fs::symlink("sub/large", src.join("link")).unwrap();
    src
}

/// (kind, contents or target, mode, mtime) of every entry under `root`, by relative path, and
/// its hard-link groups (inode -> names).
type State = (BTreeMap<PathBuf, (String, Vec<u8>, u32, (i64, i64))>, Vec<Vec<PathBuf>>);

fn state(root: &Path) -> State {
    let mut m = BTreeMap::new();
    let mut links: BTreeMap<u64, Vec<PathBuf>> = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in std::fs::read_dir(root.join(&rel)).unwrap() {
            let r = rel.join(e.unwrap().file_name());
            let p = root.join(&r);
            let md = std::fs::symlink_metadata(&p).unwrap();
            let ft = md.file_type();
            let (kind, body) = if ft.is_symlink() {
                ("symlink", std::fs::read_link(&p).unwrap().into_os_string().into_encoded_bytes())
            } else if ft.is_dir() {
                stack.push(r.clone());
                ("dir", Vec::new())
            } else {
                if md.nlink() > 1 {
                    links.entry(md.ino()).or_default().push(r.clone());
                }
                ("file", std::fs::read(&p).unwrap())
            };
            m.insert(r, (kind.to_string(), body, md.mode(), (md.mtime(), md.mtime_nsec())));
        }
    }
    let mut groups: Vec<Vec<PathBuf>> = links
        .into_values()
        .map(|mut g| {
            g.sort();
            g
        })
        .collect();
    groups.sort();
    (m, groups)
}

fn options(mode: Mode, backend: BackendKind, budget: &Budget) -> TreeOptions {
    let mut io = IoOptions::new(budget.clone());
    io.mode = mode;
    io.backend = backend;
    io.block_size = 64 << 10;
    io.queue_depth = 3;
    let mut o = TreeOptions::new(io).archive();
    o.threads = Some(2);
    o
}

/// Runs `check` under every mode and backend of `matrix(root)`, with the options for it, its
/// label and the destination `root/dst`; then the budget must be whole again, and the
/// destination goes.
fn each_mode(root: &Path, mut check: impl FnMut(&TreeOptions, &str, &Path)) {
    for (mode, backend) in matrix(root) {
        let what = format!("{mode}, {backend}");
        let budget = Budget::new(16 << 20);
        let o = options(mode, backend, &budget);
        let dst = root.join("dst");
        check(&o, &what, &dst);
        assert_eq!(budget.used(), 0, "{what}: buffers not returned to the budget");
        std::fs::remove_dir_all(&dst).unwrap();
    }
}

fn run(src: &Path, dst: &Path, o: &TreeOptions) -> TreeReport {
    copy_tree(&[src.to_path_buf()], dst, o, &Arc::new(Progress::new())).unwrap()
}

#[test]
fn an_archive_copy_equals_its_source_under_every_mode_and_backend() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = scratch();
    let src = make_src(d.path());
    let want = state(&src);
    each_mode(d.path(), |o, what, dst| {
        // Into a missing destination: it becomes the copy.
        let r = run(&src, dst, o);
        assert_eq!((r.errors, r.copied, r.hardlinks), (0, 4, 1), "{what}: {r:?}");
        assert_eq!(state(dst), want, "{what}");
        // `SRC/.` into an existing directory: its contents, over the copy made before.
        let again = run(&src.join("."), dst, o);
        assert_eq!(again.errors, 0, "{what}: {again:?}");
        assert_eq!(state(dst), want, "{what}: SRC/. into an existing directory");
    });
}

#[test]
fn a_tree_copy_is_whole_or_reports_every_fault() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = scratch();
    let src = make_src(d.path());
    let want = state(&src);
    let dst = d.path().join("dst");
    let s = fault::sweep(&Site::ALL, |plan| {
        let budget = Budget::new(16 << 20);
        let o = options(Mode::Buffered, BackendKind::Threads, &budget);
        let r = run(&src, &dst, &o);
        let what = format!("{plan:?}");
        match plan {
            Some(p) if fault::fired() && !p.fault.retried_at(p.site) => {
                assert!(r.errors >= 1, "{what}: injected and no error counted: {r:?}");
                let e = r.first_error.as_ref().unwrap();
                if e.is_message() {
                    // Worded whole as GNU cp words it ("failed to preserve ownership for X: ..."):
                    // the operation opens it, the OS error ends it.
                    let text = e.to_string();
                    let os = std::io::Error::from_raw_os_error(p.fault.errno().unwrap()).kind().to_string();
                    let said = cacheless::strerror(p.fault.errno().unwrap());
                    assert!(text.ends_with(&said) || text.contains(&os), "{what}: the message says the OS error: {text}");
                    let opens = |o: &&str| o.ends_with("{}") && text.starts_with(o.trim_end_matches("{}"));
                    assert!(p.site.ops().iter().any(opens), "{what}: the message names the operation: {text}");
                } else {
                    assert_eq!(e.errno(), p.fault.errno(), "{what}: {e}");
                    // An operation worded as GNU cp words it may name a second file after the path.
                    let named = |o: &&str| e.op() == *o || (o.ends_with("{}") && e.op().starts_with(&o[..]));
                    assert!(p.site.ops().iter().any(named), "{what}: the error names the operation '{}': {e}", e.op());
                }
                assert!(e.path().starts_with(&src) || e.path().starts_with(&dst), "{what}: the error names {}: {e}", e.path().display());
                // Whatever took a final name is whole; nothing temporary is left.
                let (got, _) = if dst.exists() { state(&dst) } else { State::default() };
                for (rel, (kind, body, ..)) in &got {
                    assert!(!rel.to_string_lossy().contains(".cacheless-"), "{what}: temporary left: {}", rel.display());
                    let (wkind, wbody, ..) = want.0.get(rel).unwrap_or_else(|| panic!("{what}: {} is not in the source", rel.display()));
                    assert_eq!(kind, wkind, "{what}: {}", rel.display());
                    if kind != "dir" {
                        assert!(body == wbody, "{what}: {} differs from its source", rel.display());
                    }
                }
            }
            _ => {
                assert_eq!(r.errors, 0, "{what}: {:?}", r.first_error);
                assert_eq!(state(&dst), want, "{what}");
            }
        }
        assert_eq!(budget.used(), 0, "{what}: buffers not returned to the budget");
        if dst.exists() {
            // A directory whose metadata failed may be left read-only; it is ours to remove.
            let _ = std::process::Command::new("chmod").args(["-R", "u+rwx"]).arg(&dst).status();
            std::fs::remove_dir_all(&dst).unwrap();
        }
    });
    eprintln!("tree copy: clean calls {:?}; {} runs with a fault, {} injected ({} retried)", s.clean, s.runs, s.fired, s.retried);
    assert!(s.fired > 0, "no fault was ever injected");
}

/// Many small files in several directories, handed to the workers several at a time and made
/// durable in batches: the copy equals the source, every file counted once, nothing temporary
/// left, under every mode and backend.
#[test]
fn many_small_files_in_several_directories_copy_whole() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = scratch();
    let src = d.path().join("src");
    let mut n = 0;
    for (i, dir) in ["a", "b/c", "b", "e"].into_iter().enumerate() {
        std::fs::create_dir_all(src.join(dir)).unwrap();
        // 37 files: two full hands of 16 and a partial one; 1 in `e`.
        for k in 0..(if dir == "e" { 1 } else { 37 }) {
            random_file(&src.join(dir), &format!("f{k}"), 1 + (k * 997 + i * 13) % 9000, (i * 100 + k) as u64);
            n += 1;
        }
    }
    let want = state(&src);
    each_mode(d.path(), |o, what, dst| {
        let r = run(&src, dst, o);
        assert_eq!((r.errors, r.copied), (0, n), "{what}: {r:?}");
        assert_eq!(state(dst), want, "{what}");
    });
}

/// Under auto, the small files of a tree copy are written plainly and left for their batch's
/// syncfs to write back together, not each written uncached with a writeback of its own; the
/// batch's pages are dropped as its files are named, so once the copy is done nothing of the
/// source or of the copy is in the page cache, and the copy is byte-exact.
#[test]
fn a_tree_copys_small_files_are_written_back_by_their_batch_and_leave_nothing_cached() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = scratch();
    let src = d.path().join("src");
    let mut n = 0;
    for dir in ["a", "b"] {
        std::fs::create_dir_all(src.join(dir)).unwrap();
        for k in 0..150 {
            random_file(&src.join(dir), &format!("f{k}"), 1 + (k * 1237) % 12_000, 500 + n);
            n += 1;
        }
    }
    let want = state(&src);
    for p in want.0.keys().filter(|p| want.0[*p].0 == "file") {
        cacheless::residency::evict_path(src.join(p)).unwrap();
    }
    let budget = Budget::new(16 << 20);
    let o = options(Mode::Auto, BackendKind::Auto, &budget);
    let dst = d.path().join("dst");
    let r = run(&src, &dst, &o);
    assert_eq!((r.errors, r.copied), (0, n), "{r:?}");
    for f in &r.files {
        let why = &f.write.decision.reason;
        assert!(matches!(why, cacheless::Reason::Batched { .. }), "{}: {why}", f.write.path.display());
        assert_eq!(f.write.decision.mode, Taken::DropBehind, "{}: {why}", f.write.path.display());
    }
    for p in want.0.keys() {
        for root in [&src, &dst] {
            let path = root.join(p);
            if path.is_file() {
                let cached = cacheless::residency::residency_of(&path).unwrap().cached_pages;
                assert_eq!(cached, 0, "{}: {cached} pages left in the page cache", path.display());
            }
        }
    }
    // Read only now: the comparison caches what it reads.
    assert_eq!(state(&dst), want);
    assert_eq!(budget.used(), 0, "buffers not returned to the budget");
}

/// A durability the tree copy does not offer (it syncs each file, or a batch's by the batch's
/// syncfs, or nothing) is refused before anything moves, naming the destination; the two it
/// offers copy the tree.
#[test]
fn a_durability_the_copy_does_not_offer_is_refused_before_anything_moves() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("sub/f"), b"data").unwrap();
    let dst = d.path().join("dst");
    let mut o = TreeOptions::new(IoOptions::default()).archive();
    for refused in [
        cacheless::Durability::AtTheEnd { write_back: None },
        cacheless::Durability::NamedAfterSync { write_back: None },
        cacheless::Durability::Off { write_back: Some(1 << 20) },
    ] {
        o.durability = refused;
        let e = copy_tree(std::slice::from_ref(&src), &dst, &o, &Arc::new(Progress::new())).unwrap_err();
        assert_eq!(e.kind(), cacheless::ErrorKind::InvalidInput, "{refused:?}: {e}");
        assert_eq!(e.path(), dst, "{refused:?}: {e}");
        assert!(e.to_string().contains("durability"), "{refused:?}: {e}");
        assert!(!dst.exists(), "{refused:?}: the destination was made");
    }
    for taken in [cacheless::Durability::EachFile, cacheless::Durability::Off { write_back: None }] {
        o.durability = taken;
        let r = run(&src, &dst, &o);
        assert!(r.first_error.is_none(), "{taken:?}: {:?}", r.first_error);
        assert_eq!(std::fs::read(dst.join("sub/f")).unwrap(), b"data", "{taken:?}");
        std::fs::remove_dir_all(&dst).unwrap();
    }
}
