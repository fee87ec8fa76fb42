//! The small-file API: whole files in one call, and files created now and written later, in
//! every mode, byte-exact against std::fs, with their page-cache footprint asserted.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

mod common;

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use cacheless::residency::residency_of;
use cacheless::{CreateOptions, Durability, ErrorKind, FileAttrs, FileCreator, Hint, Mode, Reason, Taken};
use common::*;
use rand::RngCore;

fn open_dir(p: &Path) -> OwnedFd {
    rustix::fs::open(p, rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC, rustix::fs::Mode::empty()).unwrap()
}

fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng(seed).fill_bytes(&mut v);
    v
}

fn modes(dir: &Path) -> Vec<Mode> {
    let mut m: Vec<Mode> = matrix(dir).into_iter().map(|(m, _)| m).collect();
    m.dedup();
    m
}

fn attrs() -> FileAttrs {
    FileAttrs { permissions: Some(0o640), mtime: Some(UNIX_EPOCH + Duration::new(1_600_000_000, 5)), atime: None, create: None }
}

/// The mode auto must pick for `len` bytes on `dir`'s filesystem.
fn auto_mode(dir: &Path, len: u64) -> Taken {
    cacheless::decide_write(Mode::Auto, &cacheless::caps::for_dir(dir).unwrap(), Some(len)).unwrap().mode
}

/// Every mode and size around the alignment, from unaligned memory: the file is byte-exact,
/// gets its attributes, and (but for buffered) leaves nothing in the page cache once written
/// back: synced files at once, the others after a syncfs and the deferred second drop.
#[test]
fn write_file_every_mode_is_byte_exact_and_leaves_no_cache() {
    let d = scratch();
    let dir = open_dir(d.path());
    let align = cacheless::caps::for_dir(d.path()).unwrap().direct.as_ref().map(|a| a.both()).unwrap_or(4096);
    let sizes = [0, 1, align - 1, align, align + 1, 3 * align + 5, 100_000, (1 << 20) + 3, 3 << 20];
    for mode in modes(d.path()) {
        for sync in [true, false] {
            let creator = FileCreator::new(CreateOptions { mode, durability: Durability::synced(sync), ..CreateOptions::default() });
            let mut written = Vec::new();
            for (i, &len) in sizes.iter().enumerate() {
                // One byte into the vector: memory O_DIRECT cannot take as it is.
                let backing = bytes(len + 1, i as u64);
                let data = &backing[1..];
                let name = format!("{mode}-{sync}-{i}");
                let rep = creator.write_file(dir.as_fd(), OsStr::new(&name), Path::new(&name), data, &attrs()).unwrap();
                let want = mode.forced().unwrap_or_else(|| auto_mode(d.path(), len as u64));
                assert_eq!((rep.bytes, rep.decision.mode, rep.synced), (len as u64, want, sync), "{name}: {}", rep.decision.reason);
                if want == Taken::Direct {
                    assert_eq!(rep.direct_bytes + rep.tail_bytes, len as u64, "{name}");
                    assert_eq!(rep.tail_bytes, (len % align) as u64, "{name}: only the unaligned tail goes buffered");
                }
                let p = d.path().join(&name);
                let m = std::fs::metadata(&p).unwrap();
                assert_eq!((m.mode() & 0o7777, m.mtime(), m.mtime_nsec()), (0o640, 1_600_000_000, 5), "{name}: attributes");
                written.push((p, want, data.to_vec()));
            }
            if !sync {
                rustix::fs::syncfs(&dir).unwrap();
            }
            creator.drop_deferred();
            // The footprint first: reading the files back caches them.
            for (p, want, data) in written {
                let r = residency_of(&p).unwrap();
                if want == Taken::Buffered {
                    assert_eq!(r.cached_pages, r.total_pages, "{}: buffered writes stay cached", p.display());
                } else {
                    assert_eq!(r.cached_pages, 0, "{} ({want}, sync {sync}) left {} pages cached", p.display(), r.cached_pages);
                }
                assert!(std::fs::read(&p).unwrap() == data, "{}: content differs", p.display());
            }
        }
    }
}

/// Files created now and written later, at offsets, with holes between and at the end: the
/// holes read as zeros and stay unallocated, in every mode.
#[test]
fn create_and_write_at_offsets_leaves_holes() {
    let d = scratch();
    let dir = Arc::new(open_dir(d.path()));
    for mode in modes(d.path()) {
        let creator = FileCreator::new(CreateOptions { mode, durability: Durability::EachFile, ..CreateOptions::default() });
        let name = format!("sparse-{mode}");
        let segments = [(0usize, 10_000usize), (1 << 20, 4096), (8 << 20, 5000)];
        let total: usize = segments.iter().map(|s| s.1).sum();
        let mut f = creator.create(dir.clone(), OsStr::new(&name), Path::new(&name), total as u64, attrs()).unwrap();
        assert!(d.path().join(&name).exists(), "created now, under its name");
        let mut expect = vec![0u8; 64 << 20];
        for (i, &(off, len)) in segments.iter().enumerate() {
            let data = bytes(len, 50 + i as u64);
            f.write_at(&data, off as u64).unwrap();
            expect[off..off + len].copy_from_slice(&data);
        }
        f.set_len(expect.len() as u64).unwrap();
        let rep = f.finish().unwrap();
        assert_eq!(rep.bytes, expect.len() as u64);
        let p = d.path().join(&name);
        assert!(std::fs::read(&p).unwrap() == expect, "{name}: content differs");
        assert!(std::fs::metadata(&p).unwrap().blocks() * 512 < 4 << 20, "{name}: the holes were filled");
    }
}

/// Many threads sharing one creator: every file byte-exact.
#[test]
fn many_threads_share_one_creator() {
    let d = scratch();
    let dir = Arc::new(open_dir(d.path()));
    let creator = FileCreator::new(CreateOptions { durability: Durability::AtTheEnd { write_back: None }, deferred_drops: 8, ..CreateOptions::default() });
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let (creator, dir, root) = (creator.clone(), dir.clone(), d.path());
            s.spawn(move || {
                for i in 0..100u64 {
                    let data = bytes(((t * 7919 + i * 104_729) % 70_000) as usize, t * 1000 + i);
                    let name = format!("t{t}-{i}");
                    creator.write_file(dir.as_fd(), OsStr::new(&name), Path::new(&name), &data, &FileAttrs::default()).unwrap();
                    assert!(std::fs::read(root.join(&name)).unwrap() == data, "{name}");
                }
            });
        }
    });
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 800);
}

/// Small files written back together (`Durability::AtTheEnd` with `write_back`): auto writes them plainly
/// and says why; each full batch is written back by one syncfs and dropped, so the files of a
/// batch that filled are out of the cache while the last ones still wait in it; after
/// `drop_deferred` none is cached and every one is byte-exact. Synced, or with batching off,
/// the same files are not batched.
#[test]
fn small_files_written_back_in_batches_leave_no_cache() {
    let d = scratch();
    let dir = open_dir(d.path());
    let batched = |len: u64| matches!(auto_mode(d.path(), len), Taken::DontCache | Taken::DropBehind);
    if !batched(4096) {
        skip("auto writes small files directly here: nothing to batch");
        return;
    }
    let window = 768u64 << 10;
    let creator =
        FileCreator::new(CreateOptions { durability: Durability::AtTheEnd { write_back: Some(window) }, deferred_drops: 1000, ..CreateOptions::default() });
    let mut written = Vec::new();
    let mut total = 0u64;
    for i in 0..100u64 {
        let data = bytes(usize::try_from(4096 + i * 331 + i % 7).unwrap(), 7000 + i);
        total += data.len() as u64;
        let name = format!("s{i}");
        let rep = creator.write_file(dir.as_fd(), OsStr::new(&name), Path::new(&name), &data, &attrs()).unwrap();
        assert_eq!(rep.decision.mode, Taken::DropBehind, "{name}: {}", rep.decision.reason);
        assert!(matches!(rep.decision.reason, Reason::Batched { .. }), "{name}: {}", rep.decision.reason);
        assert!(rep.decision.reason.to_string().contains("written back with the others"), "{name}: {}", rep.decision.reason);
        written.push((d.path().join(&name), data));
    }
    assert!(total > 2 * window, "the files fill at least two batches ({total} B)");
    let cached = |p: &Path| residency_of(p).unwrap().cached_pages;
    assert_eq!(cached(&written[0].0), 0, "the first batch was written back and dropped when it filled");
    assert!(cached(&written[99].0) > 0, "the last file waits in the cache for its batch");
    creator.drop_deferred();
    for (p, _) in &written {
        assert_eq!(cached(p), 0, "{} is still cached", p.display());
    }
    for (p, data) in &written {
        assert!(std::fs::read(p).unwrap() == *data, "{}", p.display());
        assert_eq!(std::fs::metadata(p).unwrap().mode() & 0o777, 0o640);
    }
    // Synced files (no batch can be asked of them), or batching off: each file on its own.
    for opts in [
        CreateOptions { durability: Durability::EachFile, ..CreateOptions::default() },
        CreateOptions { durability: Durability::AtTheEnd { write_back: None }, ..CreateOptions::default() },
    ] {
        let creator = FileCreator::new(opts.clone());
        let name = format!("one-{}", opts.durability.each_file());
        let rep = creator.write_file(dir.as_fd(), OsStr::new(&name), Path::new(&name), &bytes(5000, 1), &attrs()).unwrap();
        assert!(!matches!(rep.decision.reason, Reason::Batched { .. }), "{opts:?}: {}", rep.decision.reason);
    }
}

/// An existing file or a symlink at the name is never written through; a name with a slash
/// is refused; a file dropped unfinished is removed.
#[test]
fn existing_names_symlinks_and_unfinished_files() {
    let d = scratch();
    let dir = Arc::new(open_dir(d.path()));
    let creator = FileCreator::new(CreateOptions::default());
    std::fs::write(d.path().join("old"), b"old").unwrap();
    std::fs::write(d.path().join("target"), b"target").unwrap();
    std::os::unix::fs::symlink("target", d.path().join("link")).unwrap();
    for name in ["old", "link"] {
        let e = creator.write_file(dir.as_fd(), OsStr::new(name), Path::new(name), b"new", &FileAttrs::default()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{name}: {e}");
        assert_eq!((e.op(), e.path()), ("create", Path::new(name)));
    }
    assert_eq!(std::fs::read(d.path().join("old")).unwrap(), b"old");
    assert_eq!(std::fs::read(d.path().join("target")).unwrap(), b"target");
    let e = creator.write_file(dir.as_fd(), OsStr::new("a/b"), Path::new("a/b"), b"x", &FileAttrs::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    let mut f = creator.create(dir.clone(), OsStr::new("unfinished"), Path::new("unfinished"), 5, FileAttrs::default()).unwrap();
    f.write_at(b"12345", 0).unwrap();
    drop(f);
    assert!(!d.path().join("unfinished").exists());
    // 0666 less the umask, as open(2) makes it, when no permissions are given.
    creator.write_file(dir.as_fd(), OsStr::new("plain"), Path::new("plain"), b"x", &FileAttrs::default()).unwrap();
    let umask = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Umask:").map(|u| u32::from_str_radix(u.trim(), 8).unwrap()))
        .unwrap();
    assert_eq!(std::fs::metadata(d.path().join("plain")).unwrap().permissions().mode() & 0o777, 0o666 & !umask);
}

/// A forced mode the filesystem lacks is an error with the modes to ask for instead, and
/// leaves nothing behind (tmpfs has no RWF_DONTCACHE).
#[test]
fn a_forced_mode_the_filesystem_lacks_is_refused_with_a_hint() {
    let Some(d) = tmpfs_without_dontcache() else { return };
    let dir = open_dir(d.path());
    let creator = FileCreator::new(CreateOptions { mode: Mode::DontCache, ..CreateOptions::default() });
    let e = creator.write_file(dir.as_fd(), OsStr::new("f"), Path::new("f"), b"data", &FileAttrs::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    assert_eq!(e.hint(), Some(&Hint::Modes(vec![Mode::Auto, Mode::DropBehind])));
    assert!(e.to_string().contains("dontcache unavailable"), "{e}");
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0, "nothing left behind");
}

/// A filesystem that went read-only (as ext4 does when a journal write fails) answers syncfs
/// with success, though nothing written since its last commit can be durable:
/// `sync_filesystem` fails there with EROFS instead, naming the folder.
#[test]
fn syncing_a_filesystem_that_went_read_only_fails() {
    if !require("root", cacheless_testkit::root()) {
        return;
    }
    let fs = match cacheless_testkit::LoopFs::new(cacheless_testkit::FsKind::Ext4, 32) {
        Ok(fs) => fs,
        Err(why) => {
            require("ext4", Err(why));
            return;
        }
    };
    let dir = open_dir(fs.path());
    cacheless::sync_filesystem(dir.as_fd(), fs.path()).unwrap();
    let remount = std::process::Command::new("mount").args(["-o", "remount,ro"]).arg(fs.path()).status().unwrap();
    assert!(remount.success());
    assert!(rustix::fs::syncfs(&dir).is_ok(), "the kernel's syncfs says nothing of it");
    let e = cacheless::sync_filesystem(dir.as_fd(), fs.path()).unwrap_err();
    assert_eq!(e.errno(), Some(libc::EROFS), "{e}");
    assert_eq!(e.op(), "syncfs");
    assert!(e.to_string().contains(&fs.path().display().to_string()), "{e}");
}

/// The entries of `dir`, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// A small copy staged through a creator that names files after their syncfs (as a tree copy
/// batches its small files) has no name until it is committed: without O_TMPFILE it waits
/// under a temporary name, never under its final one. Committed after a syncfs, it is
/// byte-exact with the mode and times asked for; it replaces a file of its name; dropped
/// uncommitted, it leaves nothing.
#[test]
fn a_staged_small_copy_takes_its_name_only_when_committed_and_leaves_nothing_when_dropped() {
    use cacheless::{open_parent, stage_copy, sync_filesystem, Budget, CopyOptions, Progress, ReadOptions, WriteOptions};

    let d = scratch();
    let (a, data_a) = random_file(d.path(), "a", 5000, 61);
    let (b, data_b) = random_file(d.path(), "b", 3000, 62);
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let creator = FileCreator::new(CreateOptions { durability: Durability::NamedAfterSync { write_back: None }, ..CreateOptions::default() });
    let budget = Budget::new(16 << 20);
    let mut wo = WriteOptions::new(budget.clone());
    wo.durability = Durability::Off { write_back: None };
    wo.permissions = Some(0o640);
    wo.mtime = Some(UNIX_EPOCH + Duration::new(1_234_567_890, 123_456_789));
    wo.atime = wo.mtime;
    let ro = ReadOptions::new(budget.clone());
    let co = CopyOptions::new();
    let progress = Progress::new();
    let dst = out.join("f");
    let (dir, name) = open_parent(&dst).unwrap();
    let stage = |src: &Path| stage_copy(src, &dir, &name, &dst, &ro, &wo, &co, Some(&creator), &progress).unwrap();

    let staged = stage(&a);
    let waiting = entries(&out);
    if creator.naming().unwrap().contains("without a name") {
        assert!(waiting.is_empty(), "an unnamed copy shows in its directory: {waiting:?}");
    } else {
        assert!(waiting.iter().all(|n| n.starts_with(".f.cacheless-")), "a staged copy took a name: {waiting:?}");
    }
    sync_filesystem(dir.as_fd(), &out).unwrap();
    staged.commit().unwrap();
    assert_eq!(entries(&out), ["f"]);
    assert!(std::fs::read(&dst).unwrap() == data_a);
    let m = std::fs::metadata(&dst).unwrap();
    assert_eq!((m.mode() & 0o7777, m.mtime(), m.mtime_nsec()), (0o640, 1_234_567_890, 123_456_789));

    // Dropped uncommitted: nothing left, the file of that name untouched.
    drop(stage(&b));
    assert_eq!(entries(&out), ["f"]);
    assert!(std::fs::read(&dst).unwrap() == data_a);

    // Over the file of its name: replaced, no temporary left.
    let staged = stage(&b);
    sync_filesystem(dir.as_fd(), &out).unwrap();
    staged.commit().unwrap();
    assert_eq!(entries(&out), ["f"]);
    assert!(std::fs::read(&dst).unwrap() == data_b);
    assert_eq!(budget.used(), 0, "buffers not returned to the budget");
}
