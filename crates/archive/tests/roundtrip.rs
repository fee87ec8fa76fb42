//! Round trips against GNU tar: the same archive extracted by GNU tar and by us gives the same tree.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use cacheless::Mode;
use cacheless_archive::{extract, ExtractOptions, Input};
use cacheless_testkit::tree::paths;
use common::*;

struct Trees {
    _dir: tempfile::TempDir,
    full: PathBuf,
    basic: PathBuf,
}

fn trees() -> &'static Trees {
    static T: OnceLock<Trees> = OnceLock::new();
    T.get_or_init(|| {
        let dir = scratch();
        let full = dir.path().join("full");
        make_tree(&full, &TreeSpec { long_names: true, huge_sparse: true, unicode: true });
        let basic = dir.path().join("basic");
        make_tree(&basic, &TreeSpec { long_names: false, huge_sparse: false, unicode: false });
        Trees { _dir: dir, full, basic }
    })
}

fn check(archive: &Path, modes: &[Mode], walk: bool, what: &str) {
    let work = scratch();
    let gnu = work.path().join("gnu");
    gnu_tar_extract(archive, &gnu);
    for (i, &m) in modes.iter().enumerate() {
        let ours_dir = work.path().join(format!("ours{i}"));
        let Some(r) = ours(archive, &ours_dir, m, walk) else { continue };
        assert_same_tree(&ours_dir, &gnu, &format!("{what} mode {m:?}"));
        let huge = ours_dir.join("sparse/huge");
        if huge.exists() {
            assert!(allocated(&huge) < 16 << 20, "{what}: sparse file was filled: {} bytes allocated", allocated(&huge));
        }
        // Auto writes large files (1 MiB and up, not sparse) with O_DIRECT where it works.
        let large = paths(&gnu).iter().map(|r| gnu.join(r)).any(|p| {
            let md = std::fs::symlink_metadata(&p).unwrap();
            md.is_file() && md.len() >= 1 << 20 && allocated(&p) >= md.len() / 2
        });
        if m == Mode::Auto && r.direct_ok == Some(true) && large {
            assert!(r.modes.direct > 0, "{what}: no file written with O_DIRECT: {:?}", r.modes);
        }
        // Each forced mode is what the files got.
        let n = r.modes.direct + r.modes.dontcache + r.modes.writebehind + r.modes.buffered;
        match m {
            Mode::Direct => assert_eq!(r.modes.direct, n, "{what}: {:?}", r.modes),
            Mode::DontCache => assert_eq!(r.modes.dontcache, n, "{what}: {:?}", r.modes),
            Mode::DropBehind => assert_eq!(r.modes.writebehind, n, "{what}: {:?}", r.modes),
            Mode::Buffered => assert_eq!(r.modes.buffered, n, "{what}: {:?}", r.modes),
            Mode::Auto => {}
        }
    }
}

fn archive(tree: &Path, name: &str, format: &str, compress: Option<&str>, extra: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let d = scratch();
    let a = d.path().join(name);
    gnu_tar_create(tree, &a, format, compress, extra);
    (d, a)
}

#[test]
fn gnu_formats_full_tree() {
    for fmt in ["gnu", "oldgnu", "pax"] {
        let (_d, a) = archive(&trees().full, &format!("t-{fmt}.tar"), fmt, None, &[]);
        check(&a, &[Mode::Auto], false, fmt);
    }
}

#[test]
fn ustar_and_v7_basic_tree() {
    for fmt in ["ustar", "v7"] {
        let d = scratch();
        let a = d.path().join(format!("t-{fmt}.tar"));
        // ustar/v7 cannot hold sparse files: no -S.
        run(Command::new("tar").arg(format!("--format={fmt}")).arg("-cf").arg(&a).arg("-C").arg(&trees().basic).arg("."));
        check(&a, &[Mode::Auto], false, fmt);
    }
}

#[test]
fn pax_sparse_versions() {
    for v in ["0.0", "0.1", "1.0"] {
        let (_d, a) = archive(&trees().full, &format!("t-sparse{v}.tar"), "pax", None, &[&format!("--sparse-version={v}")]);
        check(&a, &[Mode::Auto], false, &format!("pax sparse {v}"));
    }
}

#[test]
fn every_compression() {
    for (z, ext) in [("zstd", "zst"), ("gzip", "gz"), ("xz -T2", "xz"), ("lz4", "lz4"), ("bzip2", "bz2")] {
        let (_d, a) = archive(&trees().full, &format!("t.tar.{ext}"), "pax", Some(z), &[]);
        check(&a, &[Mode::Auto], false, z);
    }
}

#[test]
fn every_mode_and_the_nofollow_walk() {
    let (_d, a) = archive(&trees().full, "modes.tar.zst", "gnu", Some("zstd"), &[]);
    let modes = [Mode::Auto, Mode::Direct, Mode::DontCache, Mode::DropBehind, Mode::Buffered];
    check(&a, &modes, false, "modes");
    check(&a, &[Mode::Auto], true, "walk");
}

#[test]
fn python_tarfile_formats() {
    for fmt in ["USTAR_FORMAT", "GNU_FORMAT", "PAX_FORMAT"] {
        let d = scratch();
        let a = d.path().join(format!("py-{fmt}.tar"));
        let script = format!("import tarfile,sys\nwith tarfile.open(sys.argv[1], 'w', format=tarfile.{fmt}) as t:\n    t.add(sys.argv[2], arcname='.')\n");
        run(Command::new("python3").arg("-c").arg(script).arg(&a).arg(&trees().basic));
        check(&a, &[Mode::Auto], false, fmt);
    }
}

#[test]
fn stream_input_and_strip_components() {
    let (_d, a) = archive(&trees().basic, "s.tar.gz", "gnu", Some("gzip"), &[]);
    let work = scratch();
    let gnu = work.path().join("gnu");
    std::fs::create_dir_all(&gnu).unwrap();
    run(Command::new("tar").arg("--no-same-owner").arg("--strip-components=2").arg("-xf").arg(&a).arg("-C").arg(&gnu));
    let o = work.path().join("ours");
    let mut opts = ExtractOptions::new(&o);
    opts.strip_components = 2;
    opts.durability = cacheless::Durability::NamedAfterSync { write_back: Some(cacheless_archive::DEFAULT_WRITE_BACK) };
    let f = std::fs::File::open(&a).unwrap();
    let r = extract(Input::Stream(Box::new(f)), &opts).unwrap();
    assert!(r.is_ok(), "{:?} {:?}", r.fatal, r.failures);
    assert!(r.synced);
    // The root's metadata is not set when stripping; compare contents only below it.
    for sub in ["a", "modes", "files"] {
        let (x, y) = (o.join(sub), gnu.join(sub));
        assert_eq!(x.exists(), y.exists(), "{sub}");
    }
    assert_eq!(paths(&o), paths(&gnu));
}

#[test]
fn existing_files_replaced_or_kept() {
    let (_d, a) = archive(&trees().basic, "k.tar", "gnu", None, &[]);
    let work = scratch();
    let o = work.path().join("o");
    std::fs::create_dir_all(o.join("files")).unwrap();
    std::fs::write(o.join("files/f01_1"), "old content").unwrap();
    // A symlink where a file will go: replaced, never written through.
    std::fs::write(work.path().join("victim"), "victim").unwrap();
    std::os::unix::fs::symlink(work.path().join("victim"), o.join("files/f02_100")).unwrap();
    let mut opts = ExtractOptions::new(&o);
    opts.old_files = cacheless_archive::OldFiles::Keep;
    let r = extract(Input::Path(a.clone()), &opts).unwrap();
    assert_eq!(r.failure_count, 2, "{:?}", r.failures);
    assert_eq!(std::fs::read(o.join("files/f01_1")).unwrap(), b"old content");
    let opts = ExtractOptions::new(&o);
    let r = extract(Input::Path(a), &opts).unwrap();
    assert!(r.is_ok(), "{:?}", r.failures);
    assert_eq!(std::fs::read(o.join("files/f01_1")).unwrap().len(), 1);
    assert!(std::fs::symlink_metadata(o.join("files/f02_100")).unwrap().is_file());
    assert_eq!(std::fs::read(work.path().join("victim")).unwrap(), b"victim");
}

#[test]
fn both_engine_backends() {
    // The archive is read, and large files written, through the engine: io_uring and threads.
    let (_d, a) = archive(&trees().full, "backends.tar.zst", "pax", Some("zstd"), &[]);
    let work = scratch();
    let gnu = work.path().join("gnu");
    gnu_tar_extract(&a, &gnu);
    for (i, kind) in [cacheless::BackendKind::Threads, cacheless::BackendKind::Uring].into_iter().enumerate() {
        let o = work.path().join(format!("ours{i}"));
        let mut opts = ExtractOptions::new(&o);
        opts.io.backend = kind;
        opts.durability = cacheless::Durability::Off { write_back: Some(cacheless_archive::DEFAULT_WRITE_BACK) };
        let r = match extract(Input::Path(a.clone()), &opts) {
            Ok(r) => r,
            Err(e) if kind == cacheless::BackendKind::Uring => {
                require("uring", Err(e.to_string()));
                continue;
            }
            Err(e) => panic!("{kind:?}: {e}"),
        };
        if kind == cacheless::BackendKind::Uring && !r.is_ok() && r.failures.iter().any(|f| f.contains("uring")) {
            require("uring", Err(format!("{:?}", r.failures)));
            continue;
        }
        assert!(r.is_ok(), "{kind:?}: {:?} {:?}", r.fatal, r.failures);
        assert_same_tree(&o, &gnu, &format!("backend {kind:?}"));
    }
}

#[test]
fn tiny_memory_budget_completes() {
    // 1 MiB budget, smaller than one 4 MiB chunk and the engine's default read-ahead: slower,
    // never stuck.
    let (_d, a) = archive(&trees().basic, "tiny.tar.zst", "gnu", Some("zstd"), &[]);
    let work = scratch();
    let gnu = work.path().join("gnu");
    gnu_tar_extract(&a, &gnu);
    let o = work.path().join("ours");
    let mut opts = ExtractOptions::new(&o);
    opts.io.budget = cacheless::Budget::new(1 << 20);
    opts.durability = cacheless::Durability::Off { write_back: Some(cacheless_archive::DEFAULT_WRITE_BACK) };
    let r = extract(Input::Path(a), &opts).unwrap();
    assert!(r.is_ok(), "{:?} {:?}", r.fatal, r.failures);
    assert_same_tree(&o, &gnu, "tiny budget");
}

#[test]
fn negative_and_fractional_mtimes_like_gnu() {
    // pax mtime with a fraction before 1970, and GNU base-256 negative mtime.
    let d = scratch();
    for (fmt, mt) in [("PAX_FORMAT", "-86400.25"), ("GNU_FORMAT", "-86400"), ("PAX_FORMAT", "1700000000.123456789")] {
        let a = d.path().join("neg.tar");
        let script = format!(
            "import tarfile,io,sys\nwith tarfile.open(sys.argv[1], 'w', format=tarfile.{fmt}) as t:\n    i=tarfile.TarInfo('old'); i.size=3; i.mtime={mt}; t.addfile(i, io.BytesIO(b'old'))\n    i=tarfile.TarInfo('olddir'); i.type=tarfile.DIRTYPE; i.mtime={mt}; t.addfile(i)\n"
        );
        run(Command::new("python3").arg("-c").arg(script).arg(&a));
        check(&a, &[Mode::Auto], false, &format!("{fmt} mtime {mt}"));
    }
}

#[test]
fn same_owner_and_fifos_as_root() {
    if !require("root", cacheless_testkit::root()) {
        return;
    }
    let d = scratch();
    let a = d.path().join("own.tar");
    let script = "import tarfile,io,sys\nwith tarfile.open(sys.argv[1], 'w', format=tarfile.PAX_FORMAT) as t:\n    i=tarfile.TarInfo('f'); i.size=1; i.uid=1234; i.gid=4321; i.mode=0o4755; t.addfile(i, io.BytesIO(b'x'))\n    i=tarfile.TarInfo('big'); i.size=3<<20; i.uid=1234; i.gid=4321; i.mode=0o2755; t.addfile(i, io.BytesIO(bytes(3<<20)))\n    i=tarfile.TarInfo('p'); i.type=tarfile.FIFOTYPE; i.mode=0o640; t.addfile(i)\n";
    run(Command::new("python3").arg("-c").arg(script).arg(&a));
    let o = d.path().join("o");
    let mut opts = ExtractOptions::new(&o);
    opts.same_owner = true;
    opts.special_files = true;
    let r = extract(Input::Path(a), &opts).unwrap();
    assert!(r.is_ok(), "{:?}", r.failures);
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    for (n, mode) in [("f", 0o4755), ("big", 0o2755)] {
        let m = std::fs::metadata(o.join(n)).unwrap();
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (1234, 4321, mode), "{n}");
    }
    assert!(std::fs::symlink_metadata(o.join("p")).unwrap().file_type().is_fifo());
}

/// Small files share their batch's buffer (a slab, reused once its batch is written): files
/// of every size up to the batched limit, some filling a batch on their own, interleaved with
/// large files that hand the batch over early and with empty files, come out byte-exact as GNU
/// tar extracts them, in every mode (a forced O_DIRECT takes buffers of its own).
#[test]
fn small_files_of_every_size_sharing_batch_buffers() {
    let d = scratch();
    let tree = d.path().join("t");
    std::fs::create_dir_all(tree.join("a/b")).unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for i in 0..700u64 {
        let size = match i % 10 {
            0 => 65536,
            1 => 65535 - (next() % 64) as usize,
            2 => 0,
            3 if i % 100 == 3 => (1 << 20) + (next() % 4096) as usize,
            _ => (next() % 9000) as usize,
        };
        let data: Vec<u8> = (0..size).map(|_| next().to_le_bytes()[0]).collect();
        let dir = if i % 3 == 0 { tree.join("a/b") } else { tree.join("a") };
        std::fs::write(dir.join(format!("f{i}")), data).unwrap();
    }
    let (_a, a) = archive(&tree, "slabs.tar", "gnu", None, &[]);
    check(&a, &[Mode::Auto, Mode::Direct, Mode::DropBehind], false, "slabs");
}

/// Extraction names files after their batch's syncfs (the checksum hold needs it): a durability
/// that would not is refused before anything moves, naming the destination, as pack refuses one
/// that is not a single file's; those they offer work.
#[test]
fn a_durability_a_job_does_not_offer_is_refused_before_anything_moves() {
    let (_d, a) = archive(&trees().full, "durability.tar.zst", "pax", Some("zstd"), &[]);
    let work = scratch();
    let o = work.path().join("out");
    for refused in [cacheless::Durability::EachFile, cacheless::Durability::AtTheEnd { write_back: None }] {
        let mut opts = ExtractOptions::new(&o);
        opts.durability = refused;
        let e = extract(Input::Path(a.clone()), &opts).unwrap_err();
        assert!(e.to_string().contains("durability") && e.to_string().contains(&o.display().to_string()), "{refused:?}: {e}");
        assert!(!o.exists(), "{refused:?}: the destination was made");
    }
    for taken in [cacheless::Durability::NamedAfterSync { write_back: None }, cacheless::Durability::Off { write_back: Some(1 << 20) }] {
        let mut opts = ExtractOptions::new(&o);
        opts.durability = taken;
        let r = extract(Input::Path(a.clone()), &opts).unwrap();
        assert!(r.is_ok(), "{taken:?}: {:?} {:?}", r.fatal, r.failures);
        std::fs::remove_dir_all(&o).unwrap();
    }
    let out = work.path().join("p.tar");
    let mut po = cacheless_archive::PackOptions::new(cacheless_archive::Output::Path(out.clone()), vec![a.clone()]);
    po.durability = cacheless::Durability::NamedAfterSync { write_back: None };
    let e = cacheless_archive::pack(po).unwrap_err();
    assert!(e.to_string().contains("durability"), "pack: {e}");
    assert!(!out.exists(), "pack: the archive was made");
}
