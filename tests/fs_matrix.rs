//! The filesystem matrix: `cp`, `cat` and `hash` round trips on real filesystems (ext4, xfs,
//! btrfs, tmpfs, overlay over the scratch disk, erofs with lz4, squashfs) mounted from small
//! loop images, in every mode x backend, at sizes around each filesystem's own alignment.
//! Each checks the bytes against std::fs, the page-cache residency of source and destination
//! afterwards, that a forced mode is either honoured or refused (never quietly replaced), and
//! prints what auto chose there and why. Needs root; a filesystem the kernel lacks is skipped,
//! saying so (a failure where CACHELESS_REQUIRE names it).
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

use std::path::{Path, PathBuf};
use std::process::Output;

use cacheless::caps::AlignSource;
use cacheless::info::{describe, PathInfo};
use cacheless::residency::cachestat;
use cacheless::{BackendKind, Mode};
use cacheless_testkit::{cacheless, require, scratch, FsKind, LoopFs};
use rand::{RngCore, SeedableRng};
use serde_json::Value;

const MODES: [Mode; 5] = Mode::ALL;
const BACKENDS: [BackendKind; 2] = [BackendKind::Uring, BackendKind::Threads];

fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

/// Sizes around alignment `a`, and one large enough (over 1 MiB) for auto to write it direct.
fn sizes(a: usize) -> Vec<usize> {
    vec![0, 1, a - 1, a, a + 1, 3 * a + 7, (2 << 20) + a + 1]
}

fn run(args: &[&str]) -> Output {
    cacheless().args(args).output().unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Cached pages of a file, and its dirty plus writeback pages.
fn pages(p: &Path) -> (u64, u64) {
    let f = std::fs::File::open(p).unwrap();
    let c = cachestat(std::os::fd::AsFd::as_fd(&f), 0, 0).unwrap();
    (c.nr_cache, c.nr_dirty + c.nr_writeback)
}

fn meminfo(key: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/meminfo").unwrap();
    s.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.trim().strip_suffix("kB")?.trim().parse().ok()).unwrap_or(0)
}

fn evict(files: &[PathBuf]) {
    for f in files {
        cacheless::residency::evict_path(f).unwrap();
        assert_eq!(pages(f).0, 0, "{} not evicted", f.display());
    }
}

/// What the probe found, printed once per filesystem: the figures the report quotes.
fn findings(kind: FsKind, i: &PathInfo) {
    let fs = &i.fs;
    let direct = match &fs.direct {
        Ok(a) => format!("yes (mem {} / offset {}, from {:?})", a.mem, a.offset, a.source),
        Err(u) => format!("no ({})", u.reason),
    };
    let dontcache = match &fs.dontcache {
        Ok(()) => "yes".to_string(),
        Err(u) => format!("no ({})", u.reason),
    };
    eprintln!("[{}] statfs: {}; O_DIRECT: {direct}; RWF_DONTCACHE: {dontcache}", kind.name(), fs.fs_type);
    if let Some(w) = &fs.direct_write_cached {
        eprintln!("[{}] O_DIRECT writes cached: {w}", kind.name());
    }
    if let Some(r) = &i.read {
        eprintln!("[{}] auto read of a large file: {} ({})", kind.name(), r.mode, r.reason);
    }
    if let Some(w) = &i.write {
        eprintln!("[{}] auto write of a large file: {} ({})", kind.name(), w.mode, w.reason);
    }
}

/// Residency of files written through an overlay is that of the upper layer's files.
fn real(fs: &LoopFs, p: &Path) -> PathBuf {
    match fs.upper() {
        Some(up) => up.join(p.strip_prefix(fs.path()).unwrap()),
        None => p.to_path_buf(),
    }
}

/// Whether the engine refuses forced `mode` for reading `file` or writing in `dir`.
fn refused(file: &Path, dir: &Path, mode: Mode) -> bool {
    describe(file, mode).unwrap().read.is_some_and(|p| p.is_refused()) || describe(dir, mode).unwrap().write.is_some_and(|p| p.is_refused())
}

/// One filesystem: per mode x backend, cp of every source (to the same filesystem, or to the
/// scratch disk for a read-only one), then cat and hash of them.
///
/// A forced mode is either what ran (the report says so) or an error naming it for that file;
/// read-only images may refuse it per file (erofs refuses O_DIRECT for compressed files only),
/// writable filesystems answer as `info` does.
fn matrix(fs: &LoopFs, files: &[(PathBuf, Vec<u8>)], out_base: &Path) {
    let kind = fs.kind();
    let tmpfs = kind == FsKind::Tmpfs;
    let big = &files.last().unwrap().0;
    let srcs: Vec<PathBuf> = files.iter().map(|(p, _)| p.clone()).collect();
    let real_srcs: Vec<PathBuf> = srcs.iter().map(|p| real(fs, p)).collect();
    if !tmpfs {
        evict(&real_srcs);
    }
    findings(kind, &describe(big, Mode::Auto).unwrap());
    let all: Vec<u8> = files.iter().flat_map(|(_, d)| d.iter().copied()).collect();
    for mode in MODES {
        for backend in BACKENDS {
            let tag = format!("[{}] {mode} {}", kind.name(), backend.name());
            let out = out_base.join(format!("{mode}-{}", backend.name()));
            std::fs::create_dir_all(&out).unwrap();
            let expect_refusal = !read_only(fs) && refused(big, &out, mode);
            if !tmpfs {
                evict(&real_srcs);
            }
            // The I/O modes are what is tested here: a clone (xfs, btrfs) would move no data.
            let mut args = vec!["cp", "--json", "--reflink=never", "--mode", mode.name(), "--backend", backend.name()];
            args.extend(srcs.iter().map(|p| s(p)));
            args.push(s(&out));
            let o = run(&args);
            let err = stderr(&o);
            let report: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
            let done = report["files"].as_array().cloned().unwrap_or_default();
            let mut copied = 0;
            for (p, data) in files {
                let dst = out.join(p.file_name().unwrap());
                let Some(f) = done.iter().find(|f| f["src"].as_str() == Some(s(p))) else {
                    // Not copied: only a refusal of the forced mode for this file may say why.
                    assert!(mode != Mode::Auto && mode != Mode::Buffered && mode != Mode::DropBehind, "{tag}: {} not copied: {err}", p.display());
                    assert!(err.contains(&format!("{mode} unavailable")) && err.contains(s(p)), "{tag}: {} not copied, and no refusal: {err}", p.display());
                    assert!(!dst.exists(), "{tag}: refused copy left {}", dst.display());
                    continue;
                };
                copied += 1;
                let (rm, wm) = (f["read"]["mode"].as_str().unwrap(), f["write"]["decision"]["mode"].as_str().unwrap());
                if mode != Mode::Auto {
                    assert_eq!((rm, wm), (mode.name(), mode.name()), "{tag}: a forced mode is what ran");
                } else if p == big {
                    eprintln!(
                        "{tag}: auto cp of {} B: read {rm} ({}), write {wm} ({})",
                        data.len(),
                        f["read"]["reason"].as_str().unwrap_or(""),
                        f["write"]["decision"]["reason"].as_str().unwrap_or("")
                    );
                }
                let (cached, dirty) = pages(&real(fs, &dst));
                // A durable copy returns with nothing of it dirty or under writeback.
                assert_eq!(dirty, 0, "{tag}: {} has dirty or writeback pages after cp returned", dst.display());
                if mode != Mode::Buffered && !tmpfs {
                    assert_eq!(cached, 0, "{tag}: {} left {cached} pages cached", dst.display());
                }
                // Compared after residency was measured: this read fills the cache.
                assert!(std::fs::read(&dst).unwrap() == *data, "{tag}: {} differs", dst.display());
            }
            if expect_refusal {
                assert_eq!(copied, 0, "{tag}: info refuses {mode} here, yet cp copied: {err}");
            } else if !read_only(fs) {
                assert!(o.status.success(), "{tag}: cp failed: {err}");
            }
            if mode != Mode::Buffered && !tmpfs {
                for p in &real_srcs {
                    assert_eq!(pages(p).0, 0, "{tag}: source {} left cached by cp", p.display());
                }
            }
            eprintln!("{tag}: cp {copied} of {} files; system Dirty+Writeback {} kB", files.len(), meminfo("Dirty") + meminfo("Writeback"));
            // cat and hash read the sources back, byte-exact, in the same mode.
            if !tmpfs {
                evict(&real_srcs);
            }
            let before = meminfo("Cached");
            let mut args = vec!["cat", "--mode", mode.name(), "--backend", backend.name()];
            args.extend(srcs.iter().map(|p| s(p)));
            let o = run(&args);
            let grown = i64::try_from(meminfo("Cached")).unwrap() - i64::try_from(before).unwrap();
            if o.status.success() {
                assert!(o.stdout == all, "{tag}: cat output differs");
                assert!(!expect_refusal, "{tag}: cat in a refused mode succeeded");
                if mode != Mode::Buffered && !tmpfs {
                    for p in &real_srcs {
                        assert_eq!(pages(p).0, 0, "{tag}: {} left cached by cat", p.display());
                    }
                }
                if read_only(fs) && mode == Mode::Auto {
                    eprintln!("{tag}: cat of {} B left the files uncached; system-wide page cache grew by {grown} kB", all.len());
                }
            } else {
                assert!(mode != Mode::Auto && stderr(&o).contains(&format!("{mode} unavailable")), "{tag}: cat: {}", stderr(&o));
            }
            let mut args = vec!["hash", "--algo", "blake3", "--mode", mode.name(), "--backend", backend.name()];
            args.extend(srcs.iter().map(|p| s(p)));
            let o = run(&args);
            let text = String::from_utf8(o.stdout.clone()).unwrap();
            for line in text.lines() {
                let (sum, name) = line.split_once("  ").unwrap();
                let data = &files.iter().find(|(p, _)| s(p) == name).unwrap().1;
                assert_eq!(sum, blake3::hash(data).to_hex().as_str(), "{tag}: hash of {name}");
            }
            if o.status.success() {
                assert_eq!(text.lines().count(), files.len(), "{tag}: hash");
            } else {
                assert!(mode != Mode::Auto && stderr(&o).contains(&format!("{mode} unavailable")), "{tag}: hash: {}", stderr(&o));
            }
        }
    }
}

/// pack of the sources into an archive beside the copies (on this filesystem, or on the scratch
/// disk for a read-only one), then extract of it: byte-exact, and neither the inputs nor the
/// archive left in the cache.
fn pack_round_trip(fs: &LoopFs, files: &[(PathBuf, Vec<u8>)], out_base: &Path) {
    let tag = format!("[{}] pack", fs.kind().name());
    let tmpfs = fs.kind() == FsKind::Tmpfs;
    let dir = files[0].0.parent().unwrap();
    let real_srcs: Vec<PathBuf> = files.iter().map(|(p, _)| real(fs, p)).collect();
    if !tmpfs {
        evict(&real_srcs);
    }
    let archive = out_base.join("all.tar.zst");
    let mut args = vec!["pack", "-o", s(&archive), "-C", s(dir)];
    let names: Vec<String> = files.iter().map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    args.extend(names.iter().map(String::as_str));
    let o = run(&args);
    assert!(o.status.success(), "{tag}: {}", stderr(&o));
    if !tmpfs {
        assert_eq!(pages(&real(fs, &archive)).0, 0, "{tag}: the archive left cached");
        for p in &real_srcs {
            assert_eq!(pages(p).0, 0, "{tag}: input {} left cached", p.display());
        }
    }
    let back = out_base.join("unpacked");
    let o = run(&["extract", s(&archive), "-C", s(&back)]);
    assert!(o.status.success(), "{tag}: extract: {}", stderr(&o));
    for ((_, data), n) in files.iter().zip(&names) {
        assert!(std::fs::read(back.join(n)).unwrap() == *data, "{tag}: {n} differs after pack and extract");
    }
}

fn read_only(fs: &LoopFs) -> bool {
    fs.kind().read_only()
}

/// Bytes lz4 compresses well: words from a small random vocabulary.
fn compressible(len: usize, seed: u64) -> Vec<u8> {
    let words: Vec<Vec<u8>> = (0..64).map(|i| random_bytes(8, seed * 1000 + i).iter().map(|b| b'a' + b % 16).collect()).collect();
    let pick = random_bytes(len / 8 + 1, seed);
    let mut v: Vec<u8> = pick.iter().flat_map(|b| words[usize::from(b % 64)].iter().copied().chain(std::iter::once(b' '))).collect();
    v.truncate(len);
    v
}

/// The sources, random (or `compressible`) bytes at [`sizes`] around `align`.
fn write_sources(dir: &Path, align: usize, compress: bool) -> Vec<(PathBuf, Vec<u8>)> {
    std::fs::create_dir_all(dir).unwrap();
    sizes(align)
        .into_iter()
        .enumerate()
        .map(|(i, n)| {
            let p = dir.join(format!("f{i}-{n}"));
            let data = if compress { compressible(n, i as u64 + 1) } else { random_bytes(n, i as u64 + 1) };
            std::fs::write(&p, &data).unwrap();
            (p, data)
        })
        .collect()
}

fn align_of(dir: &Path) -> usize {
    cacheless::caps::for_dir(dir).ok().and_then(|c| c.direct.as_ref().ok().map(|a| a.both())).unwrap_or(4096)
}

fn writable(kind: FsKind) {
    if !require("root", cacheless_testkit::root()) {
        return;
    }
    let fs = match LoopFs::new(kind, 256) {
        Ok(fs) => fs,
        Err(why) => {
            require(kind.name(), Err(why));
            return;
        }
    };
    if !require("uring", cacheless::caps::system().uring.clone().map_err(|u| u.reason)) {
        return;
    }
    let src = fs.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let files = write_sources(&src, align_of(&src), false);
    // Written buffered: flushed and dropped before the first round evicts them.
    for (p, _) in &files {
        std::fs::File::open(p).unwrap().sync_all().unwrap();
    }
    expectations(&fs, &files.last().unwrap().0);
    matrix(&fs, &files, &fs.path().join("out"));
    pack_round_trip(&fs, &files, &fs.path().join("out"));
}

fn read_only_image(kind: FsKind) {
    if !require("root", cacheless_testkit::root()) {
        return;
    }
    let d = scratch();
    let files = write_sources(&d.path().join("tree"), 4096, true);
    let fs = match LoopFs::image(kind, &d.path().join("tree")) {
        Ok(fs) => fs,
        Err(why) => {
            require(kind.name(), Err(why));
            return;
        }
    };
    let files: Vec<(PathBuf, Vec<u8>)> = files.into_iter().map(|(p, data)| (fs.path().join(p.file_name().unwrap()), data)).collect();
    expectations(&fs, &files.last().unwrap().0);
    matrix(&fs, &files, &d.path().join("out"));
    pack_round_trip(&fs, &files, &d.path().join("out"));
}

/// What each filesystem is expected to support on this kernel, checked where the kernel is new
/// enough for the expectation to hold.
fn expectations(fs: &LoopFs, big: &Path) {
    let i = describe(big, Mode::Auto).unwrap();
    let kernel = kernel_version();
    let read = i.read.as_ref().unwrap();
    match fs.kind() {
        FsKind::Xfs if kernel >= (6, 16) => {
            assert!(i.fs.direct.is_ok() && i.fs.dontcache.is_ok(), "xfs on Linux 6.16+ has O_DIRECT and RWF_DONTCACHE: {:?}", i.fs);
            assert_eq!(i.fs.direct.as_ref().unwrap().source, AlignSource::Statx, "xfs reports STATX_DIOALIGN");
        }
        FsKind::Btrfs => {
            let a = i.fs.direct.as_ref().expect("btrfs opens O_DIRECT");
            eprintln!("[btrfs] DIOALIGN reported: {}", a.source == AlignSource::Statx);
            if kernel >= (6, 15) {
                // Linux 6.15 made O_DIRECT writes to files with data checksums buffered.
                let why = i.fs.direct_write_cached.as_ref().expect("the probe sees btrfs buffer O_DIRECT writes of checksummed files");
                let w = i.write.as_ref().unwrap();
                assert_ne!(w.mode, Mode::Direct, "auto does not write direct where direct writes are cached: {}", w.reason);
                assert!(w.reason.to_string().contains(why.as_str()), "{}", w.reason);
                let forced = describe(big, Mode::Direct).unwrap().write.unwrap();
                assert!(forced.mode == Mode::Direct && forced.reason.to_string().contains("go through the page cache"), "{forced:?}");
            }
        }
        FsKind::Erofs => {
            assert!(i.fs.direct.is_err(), "erofs with lz4 refuses O_DIRECT: {:?}", i.fs.direct);
            assert_eq!(read.mode, Mode::DropBehind, "auto reads erofs with drop-behind: {}", read.reason);
        }
        FsKind::Ext4 | FsKind::Xfs => assert_eq!(i.fs.direct_write_cached, None, "{:?}", i.fs),
        _ => {}
    }
}

fn kernel_version() -> (u32, u32) {
    let k = &cacheless::caps::system().kernel;
    let mut it = k.split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse().ok());
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

#[test]
fn matrix_ext4() {
    writable(FsKind::Ext4);
}

#[test]
fn matrix_xfs() {
    writable(FsKind::Xfs);
}

#[test]
fn matrix_btrfs() {
    writable(FsKind::Btrfs);
}

#[test]
fn matrix_tmpfs() {
    writable(FsKind::Tmpfs);
}

#[test]
fn matrix_overlay() {
    writable(FsKind::Overlay);
}

#[test]
fn matrix_erofs() {
    read_only_image(FsKind::Erofs);
}

#[test]
fn matrix_squashfs() {
    read_only_image(FsKind::Squashfs);
}
