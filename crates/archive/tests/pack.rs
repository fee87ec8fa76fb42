//! `pack` against the tools people read archives with: GNU tar, bsdtar, Python's tarfile, zstd
//! and pzstd read what it writes, and extracting gives back the tree exactly.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

mod common;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use cacheless::Mode;
use cacheless_archive::pack::{Members, Owner, SortOrder, SKIPPABLE_MAGIC};
use cacheless_archive::{pack, Compression, Output, PackOptions, PackReport};
use common::*;

struct Trees {
    _dir: tempfile::TempDir,
    full: PathBuf,
}

/// The extract tests' tree: every size class, modes, empty dirs, symlinks, hard links, long and
/// unicode names, sparse files (one of 9 GiB), sub-second mtimes.
fn tree() -> &'static Path {
    static T: OnceLock<Trees> = OnceLock::new();
    &T.get_or_init(|| {
        let dir = scratch();
        let full = dir.path().join("full");
        make_tree(&full, &TreeSpec { long_names: true, huge_sparse: true, unicode: true });
        Trees { _dir: dir, full }
    })
    .full
}

/// Options for packing `dir`'s contents as "./..." into `out`.
fn opts(dir: &Path, out: &Path, c: Compression) -> PackOptions {
    let mut o = PackOptions::new(Output::Path(out.to_path_buf()), vec![".".into()]);
    o.members.directory = Some(dir.to_path_buf());
    o.compression = c;
    o.durability = cacheless::Durability::Off { write_back: None };
    o
}

fn packed(o: PackOptions) -> PackReport {
    let r = pack(o).unwrap_or_else(|e| panic!("pack: {e}"));
    assert!(r.is_ok(), "failures: {:?}", r.failures);
    r
}

/// The decompression command for an archive of `c` (for tools that cannot detect it).
fn decompressor(c: Compression) -> Option<&'static str> {
    match c {
        Compression::Zstd => Some("zstd -dc"),
        Compression::Gzip => Some("gzip -dc"),
        Compression::Xz => Some("xz -dc"),
        Compression::Lz4 => Some("lz4 -dc"),
        Compression::Bzip2 => Some("bzip2 -dc"),
        _ => None,
    }
}

/// Member names as Python's tarfile lists them (reading the decompressed stream from a pipe).
fn python_names(archive: &Path, c: Compression) -> Vec<String> {
    let script =
        "import sys, tarfile\nwith tarfile.open(fileobj=sys.stdin.buffer, mode='r|') as t:\n    for m in t:\n        print(repr(m.name), m.type, m.size)\n";
    let cat = match decompressor(c) {
        Some(d) => format!("{d} '{}'", archive.display()),
        None => format!("cat '{}'", archive.display()),
    };
    let out = run(Command::new("bash").arg("-c").arg(format!("set -o pipefail; {cat} | python3 -c \"{script}\"")));
    out.lines().map(str::to_string).collect()
}

/// Member names as a tar lists them.
fn tar_names(tool: &str, archive: &Path, c: Compression) -> Vec<String> {
    let mut cmd = Command::new(tool);
    if tool == "tar" {
        if let Some(d) = decompressor(c) {
            cmd.arg("-I").arg(d.trim_end_matches(" -dc"));
        }
    }
    let mut v: Vec<String> = run(cmd.arg("-tf").arg(archive)).lines().map(|l| l.trim_end_matches('/').to_string()).collect();
    v.sort();
    v
}

#[test]
fn round_trips_through_gnu_tar_bsdtar_and_extract_for_every_compression() {
    let src = tree();
    for (c, level) in [
        (Compression::Zstd, None),
        (Compression::Gzip, Some(1)),
        (Compression::Xz, Some(0)),
        (Compression::Lz4, None),
        (Compression::Bzip2, Some(1)),
        (Compression::None, None),
    ] {
        let work = scratch();
        let a = work.path().join(format!("t.tar.{}", c.name()));
        let mut o = opts(src, &a, c);
        o.level = level;
        o.frame_size = 1 << 20;
        o.threads = 3;
        let r = packed(o);
        assert!(r.frames > 1, "{c:?}: expected several frames, got {}", r.frames);
        assert!(r.sparse >= 3, "{c:?}: the three sparse files were not stored sparse: {r:?}");
        // GNU tar.
        let gnu = work.path().join("gnu");
        fs::create_dir_all(&gnu).unwrap();
        let mut x = Command::new("tar");
        x.arg("--no-same-owner");
        if let Some(d) = decompressor(c) {
            x.arg("-I").arg(d.trim_end_matches(" -dc"));
        }
        run(x.arg("-xf").arg(&a).arg("-C").arg(&gnu));
        assert_same_tree(&gnu, src, &format!("{c:?} GNU tar"));
        assert!(allocated(&gnu.join("sparse/huge")) < 16 << 20, "{c:?}: GNU tar filled the sparse file");
        // Ours.
        let ours_dir = work.path().join("ours");
        ours(&a, &ours_dir, Mode::Auto, false).expect("auto mode always works");
        assert_same_tree(&ours_dir, src, &format!("{c:?} cacheless extract"));
        assert!(allocated(&ours_dir.join("sparse/huge")) < 16 << 20, "{c:?}: extract filled the sparse file");
        // bsdtar lists what GNU tar lists, and extracts the same tree.
        assert_eq!(tar_names("bsdtar", &a, c), tar_names("tar", &a, c), "{c:?}: bsdtar and GNU tar list different members");
        let bsd = work.path().join("bsd");
        fs::create_dir_all(&bsd).unwrap();
        run(Command::new("bsdtar").arg("-xf").arg(&a).arg("-C").arg(&bsd));
        // bsdtar leaves the extraction directory's own mtime alone (GNU tar's archives too).
        fs::File::open(&bsd).unwrap().set_modified(fs::metadata(src).unwrap().modified().unwrap()).unwrap();
        assert_same_tree(&bsd, src, &format!("{c:?} bsdtar"));
        // Python's tarfile reads every member, with the sparse file's real size.
        let py = python_names(&a, c);
        assert_eq!(py.len(), tar_names("tar", &a, c).len(), "{c:?}: tarfile saw {py:?}");
        assert!(py.iter().any(|l| l.starts_with("'./sparse/huge'") && l.ends_with(&format!(" {}", 9u64 << 30))), "{c:?}: {py:?}");
        // The compressor's own tool accepts it.
        if let Some(d) = decompressor(c) {
            let tool = d.split(' ').next().unwrap();
            run(Command::new(tool).arg("-t").arg(&a));
        }
    }
}

/// Walks a zstd archive: each frame must be a skippable frame holding the size of the zstd
/// frame after it. Returns the number of zstd frames.
fn zstd_frames(data: &[u8]) -> usize {
    let mut pos = 0;
    let mut n = 0;
    while pos < data.len() {
        let magic = u32::from_le_bytes(data[pos..pos + 4].try_into().unwrap());
        assert_eq!(magic, SKIPPABLE_MAGIC, "frame {n} at {pos}: no skippable frame");
        assert_eq!(u32::from_le_bytes(data[pos + 4..pos + 8].try_into().unwrap()), 4, "skippable payload length");
        let size = u32::from_le_bytes(data[pos + 8..pos + 12].try_into().unwrap()) as usize;
        pos += 12;
        assert_eq!(&data[pos..pos + 4], &[0x28, 0xb5, 0x2f, 0xfd], "frame {n}: no zstd frame after the size");
        pos += size;
        n += 1;
    }
    assert_eq!(pos, data.len(), "the last frame's size overruns the archive");
    n
}

#[test]
fn zstd_frames_are_independent_sized_and_read_by_zstd_pzstd_and_tar() {
    let work = scratch();
    let src = work.path().join("src");
    fs::create_dir_all(&src).unwrap();
    // Compressible and incompressible data, 6 MiB in all.
    for i in 0..6 {
        let v = if i % 2 == 0 { rnd(i + 1, 1 << 20) } else { vec![0u8; 1 << 20] };
        fs::write(src.join(format!("f{i}")), &v).unwrap();
    }
    let a = work.path().join("s.tar.zst");
    let mut o = opts(&src, &a, Compression::Zstd);
    o.frame_size = 256 << 10;
    let r = packed(o);
    let data = fs::read(&a).unwrap();
    let frames = zstd_frames(&data);
    assert_eq!(frames as u64, r.frames);
    assert_eq!(r.tar_bytes % 10240, 0, "padded to whole records");
    assert_eq!(frames as u64, r.tar_bytes.div_ceil(256 << 10), "one frame per 256 KiB of tar");
    run(Command::new("zstd").arg("-t").arg(&a));
    let pz = run(Command::new("bash").arg("-c").arg(format!("set -o pipefail; pzstd -d -c -p 2 '{}' | tar -t | wc -l", a.display())));
    assert_eq!(pz.trim(), "7", "pzstd + tar listing: {pz}");
    assert_eq!(tar_names("tar", &a, Compression::Zstd).len(), 7);
    // Each frame decompresses on its own, to exactly its share of the tar stream.
    let mut pos = 0;
    let mut total = 0u64;
    while pos < data.len() {
        let size = u32::from_le_bytes(data[pos + 8..pos + 12].try_into().unwrap()) as usize;
        let frame = &data[pos + 12..pos + 12 + size];
        let plain = zstd::decode_all(frame).unwrap();
        assert!(plain.len() == 256 << 10 || pos + 12 + size == data.len(), "a frame that is not the last holds {} bytes", plain.len());
        total += plain.len() as u64;
        pos += 12 + size;
    }
    assert_eq!(total, r.tar_bytes);
}

#[test]
fn sort_and_mtime_give_identical_bytes_whatever_the_threads() {
    let src = tree();
    let work = scratch();
    let mut hashes = Vec::new();
    for (i, (threads, reads)) in [(1, 1), (4, 8), (2, 3)].into_iter().enumerate() {
        let a = work.path().join(format!("r{i}.tar.zst"));
        let mut o = opts(src, &a, Compression::Zstd);
        o.members.sort = SortOrder::Name;
        o.members.mtime = Some((1_700_000_000, 0));
        o.frame_size = 1 << 20;
        o.threads = threads;
        o.read_threads = reads;
        packed(o);
        hashes.push(fs::read(&a).unwrap());
    }
    assert!(hashes[0] == hashes[1] && hashes[1] == hashes[2], "archives differ between runs");
    // Without --mtime the files' own (sub-second) times are stored: the bytes differ.
    let a = work.path().join("plain.tar.zst");
    let mut o = opts(src, &a, Compression::Zstd);
    o.members.sort = SortOrder::Name;
    o.frame_size = 1 << 20;
    packed(o);
    assert!(fs::read(&a).unwrap() != hashes[0]);
}

#[test]
fn odd_inputs_are_stored_or_reported_and_the_archive_stays_valid() {
    let work = scratch();
    let src = work.path().join("src");
    fs::create_dir_all(src.join("dir")).unwrap();
    // A symlink loop, a link to itself, a name with a newline and one with a tab, a socket.
    std::os::unix::fs::symlink("loop2", src.join("loop1")).unwrap();
    std::os::unix::fs::symlink("loop1", src.join("loop2")).unwrap();
    std::os::unix::fs::symlink(".", src.join("dir/self")).unwrap();
    fs::write(src.join("new\nline"), "x").unwrap();
    fs::write(src.join("tab\tname"), "y").unwrap();
    let sock = std::os::unix::net::UnixListener::bind(src.join("sock")).unwrap();
    // A device node (root only), stored as GNU tar stores it.
    if rustix::process::geteuid().is_root() {
        use rustix::fs::{makedev, mknodat, FileType, Mode, CWD};
        mknodat(CWD, src.join("null"), FileType::CharacterDevice, Mode::from_raw_mode(0o640), makedev(1, 3)).unwrap();
    }
    let a = work.path().join("odd.tar");
    let r = packed(opts(&src, &a, Compression::None));
    drop(sock);
    assert!(r.warnings.iter().any(|w| w.contains("./sock: socket ignored")), "{:?}", r.warnings);
    // Remove the socket and keep the directory's mtime, to compare the trees.
    let mtime = fs::metadata(&src).unwrap().modified().unwrap();
    fs::remove_file(src.join("sock")).unwrap();
    fs::File::open(&src).unwrap().set_modified(mtime).unwrap();
    let out = work.path().join("out");
    gnu_tar_extract(&a, &out);
    assert_same_tree(&out, &src, "odd names");
    let names = tar_names("tar", &a, Compression::None);
    assert!(names.iter().any(|n| n == "./new\\nline"), "GNU tar quotes the newline: {names:?}");
    if rustix::process::geteuid().is_root() {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let m = fs::symlink_metadata(out.join("null")).unwrap();
        assert!(m.file_type().is_char_device() && m.rdev() == rustix::fs::makedev(1, 3), "{m:?}");
    }
}

/// Output that is slow to take data, so that the reading is still going on when a test
/// changes a file or cancels.
struct Slow(fs::File);

impl Write for Slow {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        std::thread::sleep(Duration::from_millis(2));
        self.0.write(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// Packs `src` (plain tar, 64 KiB requests) to a slow stream in `a`, running `during` once
/// 1 MiB of input has gone into the archive.
fn pack_slowly(src: &Path, a: &Path, during: impl FnOnce() + Send + 'static) -> cacheless_archive::Result<PackReport> {
    let mut o = PackOptions::new(Output::Stream(Box::new(Slow(fs::File::create(a).unwrap()))), vec![".".into()]);
    o.members.directory = Some(src.to_path_buf());
    o.compression = Compression::None;
    o.io.block_size = 64 << 10;
    o.io.queue_depth = 1;
    let progress = Arc::new(cacheless::Progress::new());
    o.progress = Some(progress.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let (p, s) = (progress.clone(), stop.clone());
    let t = std::thread::spawn(move || {
        while p.bytes() < 1 << 20 && !s.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_micros(200));
        }
        during();
    });
    let r = pack(o);
    stop.store(true, Ordering::Relaxed);
    t.join().unwrap();
    r
}

#[test]
fn a_file_that_shrinks_or_grows_while_read_is_reported_and_the_archive_stays_valid() {
    for grow in [false, true] {
        let work = scratch();
        let src = work.path().join("src");
        fs::create_dir_all(&src).unwrap();
        fs::write(src.join("a_before"), "before").unwrap();
        fs::write(src.join("changing"), vec![7u8; 16 << 20]).unwrap();
        fs::write(src.join("z_after"), "after").unwrap();
        let a = work.path().join("c.tar");
        let victim = src.join("changing");
        let r = pack_slowly(&src, &a, move || {
            let mut f = fs::OpenOptions::new().append(true).open(&victim).unwrap();
            if grow {
                f.write_all(&[1u8; 1 << 20]).unwrap();
            } else {
                f.set_len(2 << 20).unwrap();
            }
        })
        .unwrap();
        let want = if grow { "file changed as we read it" } else { "file shrank by" };
        assert!(!r.is_ok() && r.failures.iter().any(|f| f.contains("./changing") && f.contains(want)), "grow {grow}: {:?}", r.failures);
        assert_eq!(r.changed, 1);
        // Still a valid archive, the member with its size when walked, the others intact.
        let out = work.path().join("out");
        gnu_tar_extract(&a, &out);
        assert_eq!(fs::metadata(out.join("changing")).unwrap().len(), 16 << 20);
        assert_eq!(fs::read(out.join("a_before")).unwrap(), b"before");
        assert_eq!(fs::read(out.join("z_after")).unwrap(), b"after");
        let data = fs::read(out.join("changing")).unwrap();
        assert!(data[..1 << 20].iter().all(|&b| b == 7), "the bytes read before the change are kept");
        if !grow {
            assert!(data[2 << 20..].iter().all(|&b| b == 0), "what was cut is padded with zeros");
        }
    }
}

#[test]
fn an_interrupted_pack_leaves_no_archive_and_no_temporary() {
    let work = scratch();
    let src = work.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("big"), vec![3u8; 24 << 20]).unwrap();
    let outdir = work.path().join("out");
    fs::create_dir_all(&outdir).unwrap();
    let a = outdir.join("i.tar.zst");
    let mut o = opts(&src, &a, Compression::Zstd);
    o.io.block_size = 64 << 10;
    o.frame_size = 64 << 10;
    let progress = Arc::new(cacheless::Progress::new());
    o.progress = Some(progress.clone());
    let p = progress.clone();
    let t = std::thread::spawn(move || {
        while p.bytes() == 0 {
            std::thread::yield_now();
        }
        p.cancel();
    });
    let e = pack(o).expect_err("cancelled");
    t.join().unwrap();
    assert!(e.to_string().contains("interrupted"), "{e}");
    assert_eq!(fs::read_dir(&outdir).unwrap().count(), 0, "left behind: {:?}", fs::read_dir(&outdir).unwrap().collect::<Vec<_>>());
}

#[test]
fn a_full_filesystem_fails_the_pack_and_leaves_nothing() {
    let work = scratch();
    let mnt = work.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    if !require("root", mount_tmpfs(&mnt, "size=2m")) {
        return;
    }
    struct Umount(PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _u = Umount(mnt.clone());
    let src = work.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("random"), rnd(9, 8 << 20)).unwrap();
    let a = mnt.join("full.tar.zst");
    let e = pack(opts(&src, &a, Compression::Zstd)).expect_err("no space");
    assert!(e.to_string().contains("No space left"), "{e}");
    assert_eq!(fs::read_dir(&mnt).unwrap().count(), 0, "left behind on the full filesystem");
}

#[test]
fn inputs_and_archive_are_left_out_of_the_page_cache() {
    let work = scratch();
    let src = work.path().join("src");
    fs::create_dir_all(src.join("small")).unwrap();
    for i in 0..3 {
        fs::write(src.join(format!("large{i}")), rnd(50 + i, 12 << 20)).unwrap();
    }
    for i in 0..200 {
        fs::write(src.join(format!("small/{i}")), rnd(100 + i as u64, 1000 + i * 97)).unwrap();
    }
    let files: Vec<PathBuf> = walk_files(&src);
    for f in &files {
        cacheless::residency::evict_path(f).unwrap();
    }
    let a = work.path().join("res.tar.zst");
    let mut o = opts(&src, &a, Compression::Zstd);
    o.durability = cacheless::Durability::EachFile;
    let r = packed(o);
    assert!(r.read_modes.buffered == 0, "cold files read buffered: {:?}", r.read_modes);
    let mut cached = 0;
    let mut total = 0;
    for f in &files {
        let res = cacheless::residency::residency_of(f).unwrap();
        cached += res.cached_bytes();
        total += fs::metadata(f).unwrap().len();
    }
    assert!(cached * 50 < total, "inputs: {cached} of {total} bytes left cached");
    let ares = cacheless::residency::residency_of(&a).unwrap().cached_bytes();
    let alen = fs::metadata(&a).unwrap().len();
    assert!(ares * 50 < alen, "archive: {ares} of {alen} bytes left cached");
}

fn walk_files(d: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for e in fs::read_dir(d).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            v.extend(walk_files(&p));
        } else {
            v.push(p);
        }
    }
    v
}

#[test]
fn members_are_named_as_gnu_tar_names_them() {
    let src = tree();
    let work = scratch();
    let ours_a = work.path().join("o.tar");
    let mut o = PackOptions::new(Output::Path(ours_a.clone()), vec!["files".into(), "links/".into()]);
    o.members = Members { directory: Some(src.to_path_buf()), ..o.members };
    o.compression = Compression::None;
    o.durability = cacheless::Durability::Off { write_back: None };
    packed(o);
    let gnu_a = work.path().join("g.tar");
    run(Command::new("tar").arg("--format=pax").arg("-cf").arg(&gnu_a).arg("-C").arg(src).args(["files", "links/"]));
    // The same members in the same order (GNU tar lists directory entries in directory order,
    // as we do by default).
    let list = |a: &Path| run(Command::new("tar").arg("-tf").arg(a));
    assert_eq!(list(&ours_a), list(&gnu_a));
    // --exclude leaves out matching members (and what is under them) wherever they are.
    let ex = work.path().join("x.tar");
    let mut o = opts(src, &ex, Compression::None);
    o.members.exclude = vec![glob::Pattern::new("f0*").unwrap(), glob::Pattern::new("links").unwrap()];
    packed(o);
    let names = tar_names("tar", &ex, Compression::None);
    assert!(names.iter().all(|n| !n.contains("/f0") && !n.contains("links")), "{names:?}");
    assert!(names.iter().any(|n| n.ends_with("/f10_1048576")), "{names:?}");
}

#[test]
fn stdout_output_is_the_same_archive() {
    let src = tree();
    let work = scratch();
    let a = work.path().join("f.tar.zst");
    let mut o = opts(src, &a, Compression::Zstd);
    o.members.sort = SortOrder::Name;
    packed(o);
    let mut child = Command::new("cat").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let stdin = child.stdin.take().unwrap();
    let mut o = PackOptions::new(Output::Stream(Box::new(stdin)), vec![".".into()]);
    o.members.directory = Some(src.to_path_buf());
    o.members.sort = SortOrder::Name;
    let reader = std::thread::spawn(move || child.wait_with_output().unwrap().stdout);
    let r = pack(o).unwrap();
    let streamed = reader.join().unwrap();
    assert!(r.write.is_none());
    assert_eq!(streamed.len() as u64, r.output_bytes);
    assert!(streamed == fs::read(&a).unwrap(), "streamed and file archives differ");
}

#[test]
fn xattrs_are_stored_for_gnu_tar_when_asked() {
    let work = scratch();
    let src = work.path().join("src");
    fs::create_dir_all(&src).unwrap();
    let f = src.join("tagged");
    fs::write(&f, "data").unwrap();
    match rustix::fs::setxattr(&f, "user.cacheless.test", b"value \x01\xff", rustix::fs::XattrFlags::empty()) {
        Ok(()) => {}
        Err(e) if e == rustix::io::Errno::OPNOTSUPP => {
            require("xattr", Err(format!("user xattrs unsupported on {}", f.display())));
            return;
        }
        Err(e) => panic!("setxattr: {e}"),
    }
    for with in [false, true] {
        let a = work.path().join(format!("x{with}.tar"));
        let mut o = opts(&src, &a, Compression::None);
        o.members.xattrs = with;
        packed(o);
        let out = work.path().join(format!("out{with}"));
        fs::create_dir_all(&out).unwrap();
        run(Command::new("tar").args(["--xattrs", "--xattrs-include=user.*", "-xf"]).arg(&a).arg("-C").arg(&out));
        let mut buf = [0u8; 64];
        let got = rustix::fs::getxattr(out.join("tagged"), "user.cacheless.test", &mut buf).ok().map(|n| buf[..n].to_vec());
        assert_eq!(got, with.then(|| b"value \x01\xff".to_vec()), "--xattrs {with}");
    }
}

#[test]
fn every_forced_mode_reads_and_writes_in_that_mode_or_is_refused_clearly() {
    let work = scratch();
    let src = work.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("big"), vec![9u8; 5 << 20]).unwrap();
    fs::write(src.join("small"), "small").unwrap();
    for (mode, feature) in [(Mode::Direct, "direct"), (Mode::DontCache, "dontcache"), (Mode::DropBehind, ""), (Mode::Buffered, "")] {
        let a = work.path().join(format!("{mode:?}.tar.zst"));
        let mut o = opts(&src, &a, Compression::Zstd);
        o.io.mode = mode;
        let r = match pack(o) {
            Ok(r) => r,
            Err(e) => {
                let msg = e.to_string();
                assert!(!feature.is_empty() && msg.contains("unavailable"), "{mode:?}: {msg}");
                assert!(!a.exists());
                require(feature, Err(msg));
                continue;
            }
        };
        assert!(r.is_ok(), "{mode:?}: {:?}", r.failures);
        let m = &r.read_modes;
        let n = match mode {
            Mode::Direct => m.direct,
            Mode::DontCache => m.dontcache,
            Mode::DropBehind => m.writebehind,
            _ => m.buffered,
        };
        assert_eq!(n, 2, "{mode:?}: {m:?}");
        assert_eq!(Mode::from(r.write.as_ref().unwrap().decision.mode), mode);
        let out = work.path().join(format!("out-{mode:?}"));
        fs::create_dir_all(&out).unwrap();
        run(Command::new("tar").args(["-I", "zstd", "-xf"]).arg(&a).arg("-C").arg(&out));
        assert!(fs::read(out.join("big")).unwrap() == vec![9u8; 5 << 20]);
    }
}

#[test]
fn the_archive_is_not_stored_in_itself() {
    let work = scratch();
    let src = work.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), "a").unwrap();
    // An older archive under the final name and the new one being written are both in the tree.
    let a = src.join("self.tar");
    fs::write(&a, "old archive").unwrap();
    let r = packed(opts(&src, &a, Compression::None));
    assert_eq!(r.warnings.iter().filter(|w| w.contains("file is the archive; not dumped")).count(), 2, "{:?}", r.warnings);
    assert_eq!(tar_names("tar", &a, Compression::None), vec![".", "./a"]);
}

#[test]
fn one_file_system_stores_a_mount_point_but_not_what_is_under_it() {
    let work = scratch();
    let src = work.path().join("src");
    let mnt = src.join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    fs::write(src.join("here"), "here").unwrap();
    if !require("root", mount_tmpfs(&mnt, "size=1m")) {
        return;
    }
    fs::write(mnt.join("there"), "there").unwrap();
    let mut names = Vec::new();
    for one in [false, true] {
        let a = work.path().join(format!("o{one}.tar"));
        let mut o = opts(&src, &a, Compression::None);
        o.members.one_file_system = one;
        let r = pack(o);
        names.push(r.map(|_| tar_names("tar", &a, Compression::None)));
    }
    let _ = Command::new("umount").arg(&mnt).status();
    let names: Vec<Vec<String>> = names.into_iter().map(|n| n.unwrap()).collect();
    assert_eq!(names[0], vec![".", "./here", "./mnt", "./mnt/there"]);
    assert_eq!(names[1], vec![".", "./here", "./mnt"]);
}

/// Given owners and --numeric-owner are stored as GNU tar stores them: `tar -tv` of our
/// archive and of GNU tar's, made with the same settings, list the same owners and groups.
#[test]
fn owners_and_numeric_owner_are_stored_as_gnu_tar_stores_them() {
    let work = scratch();
    let src = work.path().join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    fs::write(src.join("d/f"), b"data").unwrap();
    let listing = |a: &Path| -> Vec<String> {
        run(Command::new("tar").arg("-tvf").arg(a)).lines().map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" ")).collect()
    };
    // NAME:ID forms only: GNU tar 1.34 stores "+ID" itself as the name.
    for (i, (given, numeric)) in [(true, false), (true, true), (false, true)].into_iter().enumerate() {
        let mut flags = Vec::new();
        let ours = work.path().join(format!("o{i}.tar"));
        let mut o = opts(&src, &ours, Compression::None);
        o.members.sort = SortOrder::Name;
        if given {
            flags.extend(["--owner=builder:1234", "--group=staff:50"]);
            o.members.owner = Some(Owner::parse("builder:1234", false).unwrap());
            o.members.group = Some(Owner::parse("staff:50", true).unwrap());
        }
        if numeric {
            flags.push("--numeric-owner");
        }
        o.members.numeric_owner = numeric;
        packed(o);
        let gnu = work.path().join(format!("g{i}.tar"));
        run(Command::new("tar").args(["--format=pax", "--sort=name"]).args(&flags).arg("-cf").arg(&gnu).arg("-C").arg(&src).arg("."));
        assert_eq!(listing(&ours), listing(&gnu), "{flags:?}");
    }
}

/// `--acls` stores POSIX ACLs as GNU `tar -c --acls` does (the same `SCHILY.acl.*` text records
/// for each member), and GNU `tar -x --acls`, bsdtar `--acls` and our own extract restore them:
/// `getfacl` of each gives what it gives of the source.
#[test]
fn acls_are_stored_as_gnu_tar_stores_them_and_restored_by_gnu_tar_bsdtar_and_extract() {
    let have = |t: &str| Command::new("sh").arg("-c").arg(format!("command -v {t}")).output().is_ok_and(|o| o.status.success());
    if !require(
        "peers",
        if ["setfacl", "getfacl", "tar", "bsdtar"].iter().all(|t| have(t)) { Ok(()) } else { Err("setfacl, getfacl, tar or bsdtar missing".into()) },
    ) {
        return;
    }
    let work = scratch();
    let src = work.path().join("src");
    fs::create_dir_all(src.join("d/sub")).unwrap();
    fs::write(src.join("d/f"), "data").unwrap();
    fs::write(src.join("plain"), "plain").unwrap();
    let setfacl = |args: &[&str], p: &Path| {
        let o = Command::new("setfacl").args(args).arg(p).output().unwrap();
        o.status.success().then_some(()).ok_or_else(|| String::from_utf8_lossy(&o.stderr).into_owned())
    };
    if let Err(e) = setfacl(&["-m", "u:nobody:r--,g:daemon:rw-,u:4321:rwx"], &src.join("d/f")) {
        require("xattr", Err(format!("setfacl: {e}")));
        return;
    }
    setfacl(&["-d", "-m", "u:nobody:rwx"], &src.join("d/sub")).unwrap();
    let getfacl = |root: &Path| {
        let o = Command::new("getfacl").args(["-R", "-p", "-n", "."]).current_dir(root).output().unwrap();
        assert!(o.status.success());
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let want = getfacl(&src);
    let records = |a: &Path| {
        let o = Command::new("python3")
            .arg("-c")
            .arg("import sys, tarfile\nfor m in tarfile.open(sys.argv[1]):\n    print(m.name, sorted((k, v) for k, v in m.pax_headers.items() if k.startswith('SCHILY.acl')))")
            .arg(a)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let mut lines: Vec<String> = String::from_utf8_lossy(&o.stdout).lines().map(str::to_string).collect();
        lines.sort();
        lines
    };
    let ours = work.path().join("ours.tar");
    let mut o = opts(&src, &ours, Compression::None);
    o.members.acls = true;
    o.members.xattrs = true;
    packed(o);
    let gnu = work.path().join("gnu.tar");
    run(Command::new("tar").args(["--acls", "--format=posix", "-cf"]).arg(&gnu).arg("-C").arg(&src).arg("."));
    assert_eq!(records(&ours), records(&gnu), "the SCHILY.acl records GNU tar writes");
    for (name, cmd) in [("gnu", vec!["tar", "--acls", "-xf"]), ("bsdtar", vec!["bsdtar", "--acls", "-xf"])] {
        let out = work.path().join(name);
        fs::create_dir_all(&out).unwrap();
        run(Command::new(cmd[0]).args(&cmd[1..]).arg(&ours).arg("-C").arg(&out));
        assert_eq!(getfacl(&out), want, "{name}");
    }
    let out = work.path().join("extract");
    let mut eo = cacheless_archive::ExtractOptions::new(&out);
    eo.acls = true;
    let r = cacheless_archive::extract(cacheless_archive::Input::Path(ours.clone()), &eo).unwrap();
    assert!(r.is_ok(), "{:?}", r.failures);
    assert_eq!(getfacl(&out), want, "cacheless extract --acls");
}

/// Makes `depth` nested folders `d` under `root`, a file `f` holding `data` (with the extended
/// attribute user.deep where the filesystem takes one) and a symlink `l` to it at the bottom,
/// by descriptor: the bottom is far past PATH_MAX.
fn deep_tree(root: &Path, depth: usize, data: &[u8]) -> bool {
    use rustix::fs::{Mode, OFlags};
    fs::create_dir_all(root).unwrap();
    let mut dir = rustix::fs::open(root, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
    for _ in 0..depth {
        rustix::fs::mkdirat(&dir, "d", Mode::from_raw_mode(0o755)).unwrap();
        dir = rustix::fs::openat(&dir, "d", OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
    }
    let f = rustix::fs::openat(&dir, "f", OFlags::WRONLY | OFlags::CREATE, Mode::from_raw_mode(0o640)).unwrap();
    rustix::io::write(&f, data).unwrap();
    rustix::fs::symlinkat("f", &dir, "l").unwrap();
    rustix::fs::fsetxattr(&f, "user.deep", b"bottom", rustix::fs::XattrFlags::empty()).is_ok()
}

#[test]
fn a_tree_deeper_than_path_max_is_packed_whole_as_gnu_tar_packs_it() {
    let work = scratch();
    let src = work.path().join("src");
    let data = b"at the bottom of 5,000 folders\n";
    let xattr = deep_tree(&src.join("t"), 5000, data);
    let ours = work.path().join("o.tar");
    let mut o = PackOptions::new(Output::Path(ours.clone()), vec!["t".into()]);
    o.members.directory = Some(src.clone());
    o.members.xattrs = true;
    o.compression = Compression::None;
    o.durability = cacheless::Durability::Off { write_back: None };
    let r = packed(o);
    let gnu = work.path().join("g.tar");
    run(Command::new("tar").args(["--format=pax", "--xattrs", "-cf"]).arg(&gnu).arg("-C").arg(&src).arg("t"));
    // Every member, 5,000 folders, the file and the link, in the same order with the same
    // types, modes, owners, sizes and times as GNU tar stores them.
    let list = |a: &Path| run(Command::new("tar").args(["--full-time", "-tvf"]).arg(a));
    let (o_list, g_list) = (list(&ours), list(&gnu));
    assert_eq!(o_list.lines().count(), 5003);
    assert!(o_list == g_list, "the listings differ from GNU tar's");
    assert_eq!(r.files, 1);
    // The bottom file's bytes, and its extended attribute, came from the file itself.
    let bottom = format!("t/{}f", "d/".repeat(5000));
    let out = Command::new("tar").arg("-xOf").arg(&ours).arg(&bottom).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, data);
    if xattr {
        let script = "import sys, tarfile\nt = tarfile.open(sys.argv[1])\nm = [m for m in t if m.name.endswith('/f')][0]\nprint(m.pax_headers.get('SCHILY.xattr.user.deep'))\n";
        assert_eq!(run(Command::new("python3").arg("-c").arg(script).arg(&ours)).trim(), "bottom");
    } else {
        require("xattr", Err(format!("user xattrs unsupported on {}", src.display())));
    }
}
