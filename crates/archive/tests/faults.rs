//! Extraction under an injected fault at every position of every call the engine makes for it
//! (opening and reading the archive; creating, writing and syncing each member, and setting its
//! mode and times), with every fault that applies there: EINTR, EAGAIN and short counts are
//! retried and the tree is exact; any other fault fails the run, saying the OS error; the
//! archive is untouched; every member
//! present is byte-exact (a hard link is never left holding a file that failed), no temporary
//! is left, and every buffer is back in the budget. Then the same hard-link guarantee on a real
//! full filesystem.
//!
//! Fault injection is process-wide: the cases of this binary take turns.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Mutex;

use cacheless::fault::{self, Fault, Plan, Site};
use cacheless::{BackendKind, Budget, Mode};
use cacheless_archive::{extract, pack, Compression, ExtractOptions, ExtractReport, Input, Output, PackOptions};
use common::*;

/// One case injects at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Files at least this large are streamed through the engine's Writer.
const STREAM_MIN: u64 = 128 << 10;

/// The archive's members and their bytes: small files (the file creator), a large one (the
/// streaming Writer), and hard links to one of each.
fn members() -> (Vec<u8>, BTreeMap<&'static str, Vec<u8>>) {
    let small = rnd(1, 3000);
    let mid = rnd(2, 70_000);
    let big = rnd(3, 300_000 + 77);
    let tar = TarBuf::default()
        .dir("d")
        .file("d/small", &small)
        .file("d/mid", &mid)
        .file("d/big", &big)
        .hardlink("d/big.link", "d/big")
        .hardlink("small.link", "d/small")
        .end();
    let files = BTreeMap::from([("d/small", small.clone()), ("d/mid", mid), ("d/big", big.clone()), ("d/big.link", big), ("small.link", small)]);
    (tar, files)
}

fn options(dest: &Path, backend: BackendKind, mode: Mode, budget: &Budget) -> ExtractOptions {
    let mut o = ExtractOptions::new(dest);
    o.io.budget = budget.clone();
    o.io.backend = backend;
    o.io.block_size = 16 << 10;
    o.io.queue_depth = 2;
    o.io.mode = mode;
    o.direct_min = STREAM_MIN;
    o.threads = 2;
    // The tree is checked, not made durable (syncfs is no call of the engine's).
    o.durability = cacheless::Durability::Off { write_back: Some(cacheless_archive::DEFAULT_WRITE_BACK) };
    o
}

/// Every regular file under `root`, by path relative to it (directories are listed as such);
/// nothing where `root` was never made (a fault at its own mkdir).
fn tree(root: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    if !root.exists() {
        return out;
    }
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                stack.push(p);
                out.insert(rel, None);
            } else {
                out.insert(rel, Some(fs::read(&p).unwrap()));
            }
        }
    }
    out
}

/// What one run must leave, given its outcome.
fn check(res: &cacheless_archive::Result<ExtractReport>, plan: Option<Plan>, archive: &Path, files: &BTreeMap<&str, Vec<u8>>, dest: &Path, what: &str) {
    let fired = fault::fired();
    let failing = plan.filter(|p| fired && !p.fault.retried_at(p.site));
    match (res, failing) {
        (Ok(r), None) => assert!(r.is_ok(), "{what}: {plan:?} (injected: {fired}): {:?} {:?}", r.failures, r.fatal),
        (Ok(r), Some(p)) => {
            assert!(!r.is_ok(), "{what}: {p:?} was injected and the extraction reported success");
            let os = std::io::Error::from_raw_os_error(p.fault.errno().unwrap()).to_string();
            let said = r.failures.iter().chain(&r.fatal).any(|m| m.contains(&os));
            assert!(said, "{what}: {p:?}: the report does not say '{os}': {:?} {:?}", r.failures, r.fatal);
        }
        (Err(e), Some(p)) => {
            let text = e.to_string();
            assert!(text.contains(&archive.display().to_string()) || text.contains(&dest.display().to_string()), "{what}: {p:?}: {text}");
        }
        (Err(e), None) => panic!("{what}: {plan:?} (injected: {fired}) failed: {e}"),
    }
    for (rel, content) in tree(dest) {
        match (content, files.get(rel.as_str())) {
            (None, _) if rel == "d" => {}
            (Some(got), Some(want)) => assert!(&got == want, "{what}: {plan:?}: {rel} holds other bytes than the archive's"),
            (got, _) => panic!("{what}: {plan:?}: {rel} should not be there (a file: {})", got.is_some()),
        }
    }
    // A link that exists is the same file as its target.
    for (link, target) in [("d/big.link", "d/big"), ("small.link", "d/small")] {
        if let Ok(m) = fs::metadata(dest.join(link)) {
            assert_eq!(Some(m.ino()), fs::metadata(dest.join(target)).ok().map(|t| t.ino()), "{what}: {plan:?}: {link} is not a link to {target}");
        }
    }
}

#[test]
fn extraction_survives_or_reports_every_fault() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let work = scratch();
    let (tar, files) = members();
    let archive = work.path().join("a.tar");
    fs::write(&archive, &tar).unwrap();
    // The same members in one gzip member: every file is held until its CRC passes, then
    // named (or, on a fault, removed with the rest it held).
    let gz_archive = work.path().join("a.tar.gz");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &tar).unwrap();
    fs::write(&gz_archive, gz.finish().unwrap()).unwrap();
    let dest = work.path().join("out");
    let mut backends = vec![BackendKind::Threads];
    if require("uring", cacheless::caps::system().uring.as_ref().map(|_| ()).map_err(|u| u.reason.clone())) {
        backends.push(BackendKind::Uring);
    }
    let cases = backends
        .iter()
        .flat_map(|&b| [(b, Mode::Auto, &archive), (b, Mode::Buffered, &archive)])
        .chain([(BackendKind::Threads, Mode::Auto, &gz_archive)])
        .collect::<Vec<_>>();
    for (backend, mode, archive) in cases {
        let tar = fs::read(archive).unwrap();
        let archive = archive.clone();
        {
            let what = format!("extract ({mode}, {backend}, {})", archive.display());
            let s = fault::sweep(&[Site::Open, Site::Read, Site::Write, Site::Sync, Site::Meta], |plan| {
                let _ = fs::remove_dir_all(&dest);
                let budget = Budget::new(8 << 20);
                let res = extract(Input::Path(archive.clone()), &options(&dest, backend, mode, &budget));
                check(&res, plan, &archive, &files, &dest, &what);
                assert!(fs::read(&archive).unwrap() == tar, "{what}: {plan:?}: the archive changed");
                drop(res);
                assert_eq!(budget.used(), 0, "{what}: {plan:?}: buffers not returned to the budget");
            });
            eprintln!("{what}: clean calls {:?}; {} runs with a fault, {} injected ({} retried)", s.clean, s.runs, s.fired, s.retried);
            assert!(s.fired > 0);
        }
    }
}

/// A write fault on a large file that has a hard link: neither name is left.
#[test]
fn a_hard_link_to_a_file_that_failed_is_not_made() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let work = scratch();
    let big = rnd(5, 1 << 20);
    let tar = TarBuf::default().file("big", &big).hardlink("link", "big").file("after", b"after").end();
    let dest = work.path().join("out");
    let budget = Budget::new(8 << 20);
    fault::start(Some(Plan { site: Site::Write, nth: 3, fault: Fault::Eio }));
    let r = extract(Input::Stream(Box::new(std::io::Cursor::new(tar))), &options(&dest, BackendKind::Threads, Mode::Auto, &budget)).unwrap();
    assert!(fault::stop().fired);
    assert!(!dest.join("big").exists() && !dest.join("link").exists(), "a name holds the failed file: {:?}", tree(&dest).keys());
    assert_eq!(fs::read(dest.join("after")).unwrap(), b"after", "the entries after it are extracted");
    assert_eq!(r.failure_count, 2, "{:?}", r.failures);
    assert!(r.failures.iter().any(|f| f.contains("link") && f.contains("not linking")), "{:?}", r.failures);
}

/// The real fault: a 40 MiB file and a hard link to it, onto a 24 MiB filesystem. The file
/// fails (rightly) and is removed, and the link is not left holding its partial data.
#[test]
fn a_full_filesystem_leaves_no_partial_file_under_a_hard_link() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let work = scratch();
    let mnt = work.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    if !require("root", mount_tmpfs(&mnt, "size=24m")) {
        return;
    }
    let _umount = Umount(mnt.clone());
    let archive = work.path().join("a.tar");
    let big = rnd(6, 40 << 20);
    fs::write(&archive, TarBuf::default().file("big", &big).hardlink("link", "big").file("small", b"small").end()).unwrap();
    let r = extract(Input::Path(archive), &ExtractOptions::new(&mnt)).unwrap();
    assert!(!r.is_ok());
    assert!(r.failures.iter().any(|f| f.contains("No space left on device")), "{:?}", r.failures);
    assert!(!mnt.join("big").exists() && !mnt.join("link").exists(), "a name holds partial data: {:?}", tree(&mnt).keys());
    assert_eq!(fs::read(mnt.join("small")).unwrap(), b"small");
}

/// pack under an injected fault at every position of every call the engine makes for it
/// (opening and reading each input; creating, writing, syncing and renaming the archive):
/// EINTR, EAGAIN and short counts are retried and the archive holds the tree exactly; any other
/// fault either fails the run, naming the OS error, with no archive under its name, or is a
/// member reported as failed (as an unreadable file is). The inputs are untouched, no temporary
/// is left, and every buffer is back in the budget.
#[test]
fn a_pack_leaves_a_whole_archive_or_none_under_every_fault() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let work = scratch();
    let src = work.path().join("tree");
    fs::create_dir_all(src.join("d")).unwrap();
    let files = [("d/small", rnd(4, 3000)), ("d/big", rnd(5, 300_077)), ("top", rnd(6, 70_000))];
    for (n, b) in &files {
        fs::write(src.join(n), b).unwrap();
    }
    let archive = work.path().join("a.tar");
    let out = work.path().join("out");
    let mut backends = vec![BackendKind::Threads];
    if require("uring", cacheless::caps::system().uring.as_ref().map(|_| ()).map_err(|u| u.reason.clone())) {
        backends.push(BackendKind::Uring);
    }
    for backend in backends {
        let what = format!("pack ({backend})");
        let s = fault::sweep(&[Site::Open, Site::Read, Site::Write, Site::Sync, Site::Rename], |plan| {
            let _ = fs::remove_file(&archive);
            let budget = Budget::new(8 << 20);
            let mut o = PackOptions::new(Output::Path(archive.clone()), vec![".".into()]);
            o.members.directory = Some(src.clone());
            o.compression = Compression::None;
            o.threads = 1;
            o.read_threads = 2;
            o.io.budget = budget.clone();
            o.io.backend = backend;
            let res = pack(o);
            let fired = fault::fired();
            let failing = plan.filter(|p| fired && !p.fault.retried_at(p.site));
            for (n, b) in &files {
                assert!(fs::read(src.join(n)).unwrap() == *b, "{what}: {plan:?}: input {n} changed");
            }
            let mut left: Vec<String> = fs::read_dir(work.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
            left.sort();
            left.retain(|n| n != "tree" && n != "out");
            match (&res, failing) {
                (Ok(r), None) => {
                    assert!(r.is_ok(), "{what}: {plan:?} (injected: {fired}): {:?}", r.failures);
                    assert_eq!(left, ["a.tar"], "{what}: {plan:?}");
                }
                (Ok(r), Some(p)) => {
                    // A member that could not be read is reported; the archive holds the rest.
                    let os = std::io::Error::from_raw_os_error(p.fault.errno().unwrap()).to_string();
                    assert!(!r.is_ok() && r.failures.iter().any(|m| m.contains(&os)), "{what}: {p:?}: not reported: {:?}", r.failures);
                    assert_eq!(left, ["a.tar"], "{what}: {p:?}");
                }
                (Err(e), Some(p)) => {
                    assert!(e.to_string().contains(&archive.display().to_string()) || e.to_string().contains(&src.display().to_string()), "{what}: {p:?}: {e}");
                    // Nothing, or (a directory fsync that failed after the rename) the whole
                    // archive, checked below: never a temporary, never a part.
                    assert!(left.is_empty() || left == ["a.tar"], "{what}: {p:?}: left {left:?} after a failed pack");
                }
                (Err(e), None) => panic!("{what}: {plan:?} (injected: {fired}) failed: {e}"),
            }
            if archive.exists() {
                // Whatever the archive holds is byte-exact; only a member reported as failed may be missing.
                let _ = fs::remove_dir_all(&out);
                gnu_tar_extract(&archive, &out);
                for (n, b) in &files {
                    if fs::read(out.join(n)).ok().as_ref() != Some(b) {
                        let reported = res.as_ref().is_ok_and(|r| r.failures.iter().any(|m| m.contains(n)));
                        assert!(reported, "{what}: {plan:?}: {n} missing or different in the archive, and not reported as failed");
                    }
                }
            }
            drop(res);
            assert_eq!(budget.used(), 0, "{what}: {plan:?}: buffers not returned to the budget");
        });
        eprintln!("{what}: clean calls {:?}; {} runs with a fault, {} injected ({} retried)", s.clean, s.runs, s.fired, s.retried);
        assert!(s.fired > 0);
    }
}
