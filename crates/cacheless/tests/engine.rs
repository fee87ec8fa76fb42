//! Byte-exact reads, writes and copies against std::fs, for every mode x backend.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;

use cacheless::{copy_file, BackendKind, Budget, Mode, Progress, ReadOptions, Reader, Taken, WriteOptions, Writer};
use common::*;
use rand::Rng;

fn ro(mode: Mode, backend: BackendKind, block: usize) -> ReadOptions {
    let mut o = ReadOptions::new(Budget::new(64 << 20));
    o.io.mode = mode;
    o.io.backend = backend;
    o.io.block_size = block;
    o.io.queue_depth = 4;
    o
}

fn wo(mode: Mode, backend: BackendKind, block: usize) -> WriteOptions {
    let mut o = WriteOptions::new(Budget::new(64 << 20));
    o.io.mode = mode;
    o.io.backend = backend;
    o.io.block_size = block;
    o.io.queue_depth = 4;
    o.durability = cacheless::Durability::Off { write_back: None };
    o
}

fn align_of(dir: &std::path::Path) -> usize {
    cacheless::caps::for_dir(dir).unwrap().direct.as_ref().map(|a| a.both()).unwrap_or(4096)
}

#[test]
fn stream_read_every_mode_backend_and_size() {
    let d = scratch();
    let align = align_of(d.path());
    for (i, size) in sizes(align, 1).into_iter().enumerate() {
        let (p, data) = random_file(d.path(), &format!("f{i}"), size, i as u64);
        for (mode, backend) in matrix(d.path()) {
            // A small block makes even modest files take many requests in flight.
            for block in [64 << 10, 1 << 20] {
                let mut r = Reader::open(&p, &ro(mode, backend, block)).unwrap();
                let mut got = Vec::new();
                r.read_to_end(&mut got).unwrap();
                assert!(got == data, "stream read of {size} B differs ({mode}, {backend}, block {block})");
            }
        }
    }
}

#[test]
fn read_at_misaligned_buffers_and_offsets() {
    let d = scratch();
    let align = align_of(d.path());
    let size = 3 * (1 << 20) + 777;
    let (p, data) = random_file(d.path(), "f", size, 9);
    let mut rng = rng(42);
    for (mode, backend) in matrix(d.path()) {
        let mut r = Reader::open(&p, &ro(mode, backend, 256 << 10)).unwrap();
        let mut cases: Vec<(usize, usize, usize)> = vec![(0, size, 0), (1, size - 1, 3), (align - 1, 2, 1), (align, align, 0), (size - 1, 10, 5), (size, 4, 0)];
        for _ in 0..20 {
            let off = rng.random_range(0..size);
            let len = rng.random_range(0..(size - off).min(2 << 20) + 1);
            cases.push((off, len, rng.random_range(0..64)));
        }
        for (off, len, mis) in cases {
            // `mis` bytes into the vector: a deliberately misaligned destination.
            let mut backing = vec![0xAAu8; len + mis + 8];
            let n = r.read_at(&mut backing[mis..mis + len], off as u64).unwrap();
            let expect = &data[off.min(size)..(off + len).min(size)];
            assert_eq!(n, expect.len(), "read_at({off}, {len}) length ({mode}, {backend})");
            assert!(&backing[mis..mis + n] == expect, "read_at({off}, {len}, mis {mis}) bytes ({mode}, {backend})");
            assert!(backing[..mis].iter().all(|&b| b == 0xAA) && backing[mis + len..].iter().all(|&b| b == 0xAA), "read_at wrote outside the buffer");
        }
    }
}

#[test]
fn seek_stream_then_read_matches_the_file() {
    let d = scratch();
    let align = align_of(d.path());
    let size = 3 * (1 << 20) + 333;
    let (p, data) = random_file(d.path(), "seek", size, 17);
    let mut rng = rng(5);
    for (mode, backend) in matrix(d.path()) {
        let mut r = Reader::open(&p, &ro(mode, backend, 256 << 10)).unwrap();
        // Start streaming, so the seeks below drop read-ahead in flight.
        let mut first = vec![0u8; 1000];
        r.read_exact(&mut first).unwrap();
        assert!(first[..] == data[..1000]);
        let mut targets = vec![0, 1, align as u64 - 1, align as u64, size as u64 - 1, size as u64];
        targets.extend((0..10).map(|_| rng.random_range(0..size as u64)));
        for pos in targets {
            r.seek_stream(pos).unwrap();
            let want = (size as u64 - pos).min(700_000) as usize;
            let mut got = vec![0u8; want];
            r.read_exact(&mut got).unwrap();
            let at = usize::try_from(pos).unwrap();
            assert!(got[..] == data[at..at + want], "read after seek_stream({pos}) ({mode}, {backend})");
            if pos == size as u64 {
                assert_eq!(r.read(&mut [0u8; 4]).unwrap(), 0, "a seek to the end reads EOF");
            }
        }
        // next_chunk after a seek starts at the aligned offset at or below the target.
        r.seek_stream(align as u64 + 5).unwrap();
        let c = r.next_chunk().unwrap().unwrap();
        let a = if r.decision().mode == Taken::Direct { align as u64 } else { 1 };
        assert_eq!(c.offset(), (align as u64 + 5) / a * a);
        let at = usize::try_from(c.offset()).unwrap();
        assert!(c[..] == data[at..at + c.len()]);
    }
}

#[test]
fn read_all_is_the_whole_file() {
    let d = scratch();
    let align = align_of(d.path());
    for size in [0, 1, align - 1, align + 1, 5 << 20] {
        let (p, data) = random_file(d.path(), &format!("a{size}"), size, size as u64);
        for (mode, backend) in matrix(d.path()) {
            let mut r = Reader::open(&p, &ro(mode, backend, 1 << 20)).unwrap();
            let all = r.read_all().unwrap();
            assert!(all[..] == data[..], "read_all {size} ({mode}, {backend})");
            assert_eq!(all.as_ptr() as usize % align, 0);
        }
    }
}

#[test]
fn writer_streaming_every_mode_backend_and_size() {
    let d = scratch();
    let align = align_of(d.path());
    for (i, size) in sizes(align, 2).into_iter().enumerate() {
        let mut r = rng(i as u64);
        let mut data = vec![0u8; size];
        r.fill(&mut data[..]);
        for (mode, backend) in matrix(d.path()) {
            for hint in [None, Some(size as u64)] {
                let p = d.path().join(format!("w{i}-{mode}-{backend}"));
                let mut o = wo(mode, backend, 256 << 10);
                o.size_hint = hint;
                let mut w = Writer::create(&p, &o).unwrap();
                // Odd-sized writes exercise the buffering.
                let mut k = 0;
                while k < size {
                    let n = r.random_range(1..100_000).min(size - k);
                    w.write_all(&data[k..k + n]).unwrap();
                    k += n;
                }
                assert!(!p.exists(), "the final name must not exist before finish");
                let rep = w.finish().unwrap();
                assert_eq!(rep.bytes, size as u64);
                let got = std::fs::read(&p).unwrap();
                assert!(got == data, "written {size} B differ ({mode}, {backend}, hint {hint:?})");
                std::fs::remove_file(&p).unwrap();
            }
        }
    }
}

#[test]
fn copy_every_mode_backend_is_byte_exact() {
    let d = scratch();
    let align = align_of(d.path());
    for (i, size) in sizes(align, 3).into_iter().enumerate() {
        let (src, data) = random_file(d.path(), &format!("s{i}"), size, 100 + i as u64);
        for (mode, backend) in matrix(d.path()) {
            let dst = d.path().join(format!("d{i}"));
            let rep = copy_file(&src, &dst, &ro(mode, backend, 512 << 10), &wo(mode, backend, 512 << 10), &Progress::new()).unwrap();
            assert_eq!(rep.write.bytes, size as u64);
            assert!(std::fs::read(&dst).unwrap() == data, "copy of {size} B differs ({mode}, {backend})");
        }
    }
}

#[test]
fn dropped_writer_leaves_no_file() {
    let d = scratch();
    for (mode, backend) in matrix(d.path()) {
        let p = d.path().join("unfinished");
        std::fs::write(&p, b"old contents").unwrap();
        {
            let mut w = Writer::create(&p, &wo(mode, backend, 64 << 10)).unwrap();
            w.write_all(&vec![7u8; 1 << 20]).unwrap();
        }
        assert_eq!(std::fs::read(&p).unwrap(), b"old contents", "an unfinished write replaced the file ({mode})");
        let leftovers: Vec<_> = std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name()).filter(|n| n != "unfinished").collect();
        assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    }
}

#[test]
fn small_budget_still_completes() {
    let d = scratch();
    let (src, data) = random_file(d.path(), "s", 5 << 20, 5);
    let budget = Budget::new(300 << 10);
    let mut r = ReadOptions::new(budget.clone());
    r.io.block_size = 128 << 10;
    let mut w = WriteOptions::new(budget.clone());
    w.io.block_size = 128 << 10;
    w.durability = cacheless::Durability::Off { write_back: None };
    let dst = d.path().join("d");
    copy_file(&src, &dst, &r, &w, &Progress::new()).unwrap();
    assert!(std::fs::read(&dst).unwrap() == data);
    assert_eq!(budget.used(), 0, "every buffer returned to the budget");
}

/// tmpfs has no RWF_DONTCACHE: a real filesystem where auto must take the next mode and say so.
#[test]
fn tmpfs_without_dontcache_gets_the_next_mode() {
    let Some(d) = tmpfs_without_dontcache() else { return };
    let p = d.path().join("small");
    let mut o = wo(Mode::Auto, BackendKind::Auto, 1 << 20);
    o.size_hint = Some(1000);
    let mut w = Writer::create(&p, &o).unwrap();
    assert_eq!(w.decision().mode, Taken::DropBehind, "{}", w.decision().reason);
    assert!(matches!(w.decision().reason, cacheless::Reason::SmallWriteNoDontcache { len: 1000, .. }), "{}", w.decision().reason);
    assert!(w.decision().reason.to_string().contains("no RWF_DONTCACHE"), "{}", w.decision().reason);
    w.write_all(&[5u8; 1000]).unwrap();
    w.finish().unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), vec![5u8; 1000]);
    // Forcing it is an error naming the problem, and leaves nothing behind.
    let mut o = wo(Mode::DontCache, BackendKind::Auto, 1 << 20);
    o.size_hint = Some(10);
    let e = Writer::create(d.path().join("forced"), &o).unwrap_err();
    assert_eq!(e.kind(), cacheless::ErrorKind::Unsupported);
    assert!(e.to_string().contains("dontcache unavailable"), "{e}");
    assert!(!d.path().join("forced").exists());
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
}

/// Direct reads and writes leave (almost) nothing in the page cache: asserted, since the
/// footprint is deterministic.
#[test]
fn direct_read_and_write_leave_no_cache() {
    let d = scratch();
    if !require("direct", support(&cacheless::caps::for_dir(d.path()).unwrap().direct)) {
        return;
    }
    let (src, _) = random_file(d.path(), "s", (64 << 20) + 333, 21);
    cacheless::residency::evict_path(&src).unwrap();
    let dst = d.path().join("d");
    let mut w = wo(Mode::Auto, BackendKind::Auto, 1 << 20);
    w.durability = cacheless::Durability::EachFile;
    let rep = copy_file(&src, &dst, &ro(Mode::Auto, BackendKind::Auto, 1 << 20), &w, &Progress::new()).unwrap();
    assert_eq!(rep.read.mode, Taken::Direct);
    assert_eq!(rep.write.decision.mode, Taken::Direct);
    // (64 MiB + 333) % 512: the unaligned tail.
    assert_eq!(rep.write.tail_bytes, 333);
    for p in [&src, &dst] {
        let r = cacheless::residency::residency_of(p).unwrap();
        assert!(r.cached_pages <= 2, "{} has {} pages cached", p.display(), r.cached_pages);
    }
}

/// Registered (fixed) io_uring buffers give the same bytes as plain ones, and the report says
/// which were used.
#[test]
fn uring_registered_buffers_are_used_and_byte_exact() {
    let d = scratch();
    if !require("uring", support(&cacheless::caps::system().uring)) {
        return;
    }
    let (p, data) = random_file(d.path(), "f", (9 << 20) + 5, 31);
    let mut r = Reader::open(&p, &ro(Mode::Direct, BackendKind::Uring, 1 << 20)).unwrap();
    let mut got = Vec::new();
    r.read_to_end(&mut got).unwrap();
    assert!(got == data);
    let choice = r.backend().unwrap();
    assert!(
        matches!(choice.buffers, cacheless::Buffers::Registered(n) if n > 0)
            || matches!(choice.buffers, cacheless::Buffers::OverMemlock { .. } | cacheless::Buffers::RegistrationFailed(_)),
        "{choice:?}"
    );
    assert!(choice.why().contains("registered buffers") || choice.why().contains("plain buffers ("), "{}", choice.why());
    if rustix::process::geteuid().is_root() {
        assert!(matches!(choice.buffers, cacheless::Buffers::Registered(_)), "root is not memlock-limited: {}", choice.why());
    }
}

/// Buffered reads with drop-behind leave a cold file uncached, and leave the pages that were
/// already cached (someone else's) in place.
#[test]
fn drop_behind_reads_drop_only_what_they_brought_in() {
    let d = scratch();
    let len = 32 << 20;
    let (p, data) = random_file(d.path(), "f", len, 41);
    cacheless::residency::evict_path(&p).unwrap();
    for backend in [BackendKind::Threads, BackendKind::Auto] {
        let mut r = Reader::open(&p, &ro(Mode::DropBehind, backend, 1 << 20)).unwrap();
        let mut got = Vec::new();
        r.read_to_end(&mut got).unwrap();
        drop(r);
        assert!(got == data);
        let res = cacheless::residency::residency_of(&p).unwrap();
        assert!(res.cached_bytes() < len as u64 / 50, "{backend}: {} B left cached of a cold file", res.cached_bytes());
    }
    // Warm the first quarter (another program's pages): it must stay. Read-ahead is off for
    // the warming read, so exactly that quarter is cached. A control file's quarter is warmed
    // with it and left alone: the kernel's own reclaim (the test suite fills the cache around
    // it) takes from both alike, while a reader that dropped warm pages would take from `p`
    // only.
    let (q, _) = random_file(d.path(), "control", len / 4, 42);
    cacheless::residency::evict_path(&q).unwrap();
    let control = std::fs::File::open(&q).unwrap();
    rustix::fs::fadvise(&control, 0, None, rustix::fs::Advice::Random).unwrap();
    let mut quarter = vec![0u8; len / 4];
    std::os::unix::fs::FileExt::read_exact_at(&control, &mut quarter, 0).unwrap();
    let f = std::fs::File::open(&p).unwrap();
    rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::Random).unwrap();
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut quarter, 0).unwrap();
    let before = cacheless::residency::residency(&f, 0, len as u64).unwrap();
    assert!(before.cached_bytes() >= (len / 4) as u64 && before.cached_bytes() < (len / 3) as u64, "warming cached {} B", before.cached_bytes());
    let mut r = Reader::open(&p, &ro(Mode::DropBehind, BackendKind::Auto, 1 << 20)).unwrap();
    let mut got = Vec::new();
    r.read_to_end(&mut got).unwrap();
    drop(r);
    let warm = cacheless::residency::residency(&f, 0, (len / 4) as u64).unwrap();
    let reclaimed = cacheless::residency::residency(&control, 0, (len / 4) as u64).unwrap();
    let (lost, lost_by_reclaim) = (warm.total_pages - warm.cached_pages, reclaimed.total_pages - reclaimed.cached_pages);
    assert!(lost == 0 || lost <= lost_by_reclaim + 8, "{lost} pages cached before the read were evicted ({lost_by_reclaim} of the control's reclaimed)");
    let rest = cacheless::residency::residency(&f, (len / 4) as u64, (len - len / 4) as u64).unwrap();
    assert!(rest.cached_bytes() < len as u64 / 50, "{} B of the cold part left cached", rest.cached_bytes());
}

/// A small file read whole in one request: a cold one read in auto mode (which measures what
/// is cached at open and picks drop-behind for it) leaves nothing cached, pages past its end
/// included; one already cached stays cached. A reader with a memo of the filesystem's
/// capabilities makes the same plan as one without, and its metadata is the file's fstat.
#[test]
fn small_files_read_whole_leave_the_cache_as_they_found_it_and_a_memo_plans_the_same() {
    let d = scratch();
    let memo = std::sync::Arc::new(cacheless::caps::CapsMemo::new());
    let mut dropped_behind = 0;
    for (i, len) in [1usize, 4095, 4096, 5000, 8191, 60000].into_iter().enumerate() {
        let (p, data) = random_file(d.path(), &format!("f{i}"), len, 90 + i as u64);
        std::fs::File::open(&p).unwrap().sync_all().unwrap();
        let plain = ro(Mode::Auto, BackendKind::Threads, 1 << 20);
        let mut with_memo = plain.clone();
        with_memo.caps_memo = Some(memo.clone());
        cacheless::residency::evict_path(&p).unwrap();
        let mut r = Reader::open(&p, &with_memo).unwrap();
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!((r.metadata().ino(), r.metadata().len()), (m.ino(), m.len()), "{len} B");
        let mode = r.decision().mode;
        let mut got = Vec::new();
        r.read_to_end(&mut got).unwrap();
        drop(r);
        assert!(got == data, "{len} B: read differs");
        let res = cacheless::residency::residency_of(&p).unwrap();
        if mode == Taken::DropBehind {
            dropped_behind += 1;
            assert_eq!(res.cached_pages, 0, "{len} B: a cold file read whole left pages cached");
        }
        // Cached now (read through std): auto keeps it cached, whatever mode it picks.
        std::fs::read(&p).unwrap();
        let mut r = Reader::open(&p, &with_memo).unwrap();
        let without = Reader::open(&p, &plain).unwrap();
        assert_eq!(r.decision(), without.decision(), "{len} B: a memo changed the plan");
        assert_eq!(r.caps().fs_type, without.caps().fs_type);
        got.clear();
        r.read_to_end(&mut got).unwrap();
        drop(r);
        assert!(got == data);
        let warm = cacheless::residency::residency_of(&p).unwrap();
        assert_eq!(warm.cached_pages, warm.total_pages, "{len} B: pages cached before the read were dropped");
    }
    if dropped_behind == 0 {
        skip("auto read no cold small file with drop-behind on this filesystem");
    }
}

/// Reader and writer with different request sizes, chunks handed over and then more bytes
/// written through `Write`: the writer re-blocks without losing or reordering a byte.
#[test]
fn chunks_then_writes_with_mismatched_block_sizes() {
    let d = scratch();
    let (src, data) = random_file(d.path(), "s", (3 << 20) + (600 << 10) + 1234, 51);
    let tail = b"and some more bytes after the chunks";
    for (rb, wb) in [(256 << 10, 1 << 20), (1 << 20, 256 << 10), (64 << 10, 64 << 10)] {
        for (mode, backend) in matrix(d.path()) {
            let mut r = Reader::open(&src, &ro(mode, backend, rb)).unwrap();
            let dst = d.path().join("d");
            let mut w = Writer::create(&dst, &wo(mode, backend, wb)).unwrap();
            while let Some(c) = r.next_chunk().unwrap() {
                w.write_chunk(c).unwrap();
            }
            w.write_all(tail).unwrap();
            w.finish().unwrap();
            let got = std::fs::read(&dst).unwrap();
            assert!(got.len() == data.len() + tail.len() && got[..data.len()] == data[..] && &got[data.len()..] == tail, "{mode} {backend} {rb}/{wb}");
        }
    }
}

/// Random reads while the stream's read-ahead is in flight share one queue: both are
/// byte-exact, whatever the backend, even with more requests in flight than the queue's depth.
#[test]
fn read_at_between_stream_chunks() {
    let d = scratch();
    let (p, data) = random_file(d.path(), "f", (6 << 20) + 99, 61);
    for (mode, backend) in matrix(d.path()) {
        let mut o = ro(mode, backend, 64 << 10);
        o.io.queue_depth = 2;
        let mut r = Reader::open(&p, &o).unwrap();
        let mut streamed = Vec::new();
        let mut k = 0;
        while let Some(c) = r.next_chunk().unwrap() {
            streamed.extend_from_slice(&c);
            drop(c);
            if k % 20 == 0 {
                let off = (k * 77_777) % (5 << 20);
                let mut buf = vec![0u8; 1 << 20];
                let n = r.read_at(&mut buf, off as u64).unwrap();
                assert!(n == buf.len() && buf[..] == data[off..off + n], "read_at({off}) ({mode}, {backend})");
            }
            k += 1;
        }
        assert!(streamed == data, "stream ({mode}, {backend})");
    }
}

/// Where the kernel has cachestat(2), residency comes from it, and its count of cached pages
/// agrees with mincore's page map of the same file, a quarter of which was read back in.
#[test]
fn residency_comes_from_cachestat_and_agrees_with_mincore() {
    use cacheless::residency::{evict_path, residency_of, resident_pages, Source};
    if !require("cachestat", support(&cacheless::caps::system().cachestat)) {
        return;
    }
    let d = scratch();
    let len = 8 << 20;
    let (p, _) = random_file(d.path(), "r", len, 91);
    evict_path(&p).unwrap();
    // Read a quarter back with read-ahead off, so that only that quarter is cached.
    let f = std::fs::File::open(&p).unwrap();
    rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::Random).unwrap();
    let mut quarter = vec![0u8; len / 4];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut quarter, 0).unwrap();
    let r = residency_of(&p).unwrap();
    assert_eq!(r.source, Source::Cachestat);
    let mincore = resident_pages(&f, 0, len as u64).unwrap().iter().filter(|&&b| b).count() as u64;
    assert_eq!(r.cached_pages, mincore);
    assert!(r.cached_pages > 0 && r.cached_pages < r.total_pages, "a quarter of the file is cached: {r:?}");
}

/// A file truncated or extended while it is streamed is an error that names it, in every mode
/// and on every backend, never a short or mixed result: the reader checks its size and
/// modification time at the end against those at open.
#[test]
fn a_file_that_changes_while_it_is_read_is_an_error() {
    let d = scratch();
    for (mode, backend) in matrix(d.path()) {
        for shrink in [true, false] {
            let (p, _) = random_file(d.path(), "changing", 6 << 20, 7);
            let mut r = Reader::open(&p, &ro(mode, backend, 1 << 20)).unwrap();
            assert!(!r.streams());
            let first = r.next_chunk().unwrap().expect("a first chunk");
            drop(first);
            let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
            if shrink {
                f.set_len(3 << 20).unwrap();
            } else {
                f.set_len(8 << 20).unwrap();
            }
            let mut got = Ok(());
            loop {
                match r.next_chunk() {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(e) => {
                        got = Err(e);
                        break;
                    }
                }
            }
            let e = got.expect_err(&format!("{mode} {backend} shrink={shrink}: the change went unnoticed"));
            let msg = e.to_string();
            assert!(msg.contains("changed as it was read") && msg.contains(&*p.to_string_lossy()), "{msg}");
        }
        // Unchanged, the same reads end cleanly.
        let (p, data) = random_file(d.path(), "still", 3 << 20, 8);
        let mut r = Reader::open(&p, &ro(mode, backend, 1 << 20)).unwrap();
        let mut back = Vec::new();
        r.read_to_end(&mut back).unwrap();
        assert!(back == data);
    }
}

/// Files whose size says nothing of what they hold (a proc file of size 0, a sysfs file of
/// 4096 bytes, a FIFO) are read with plain reads to their end, as `std::fs::read` reads them;
/// a forced direct read of one is refused, not attempted.
#[test]
fn files_whose_size_lies_are_read_to_their_end() {
    for p in ["/proc/self/mounts", "/sys/kernel/mm/transparent_hugepage/enabled", "/proc/sys/kernel/hostname"] {
        if !std::path::Path::new(p).exists() {
            eprintln!("skipped {p}: not on this machine");
            continue;
        }
        let want = std::fs::read(p).unwrap();
        assert!(!want.is_empty());
        let mut r = Reader::open(p, &ro(Mode::Auto, BackendKind::Auto, 1 << 20)).unwrap();
        assert!(r.streams(), "{p}");
        assert_eq!(r.decision().mode, Taken::Buffered);
        let mut back = Vec::new();
        r.read_to_end(&mut back).unwrap();
        // /proc/self/mounts is this process's, stable across the two reads.
        assert_eq!(back, want, "{p}");
        assert_eq!(r.len(), want.len() as u64);
        let all = Reader::open(p, &ro(Mode::Auto, BackendKind::Auto, 4096)).unwrap().read_all().unwrap();
        assert_eq!(&all[..], &want[..], "{p}");
        let e = Reader::open(p, &ro(Mode::Direct, BackendKind::Auto, 1 << 20)).unwrap_err();
        assert!(e.to_string().contains("plain reads"), "{e}");
    }
    let d = scratch();
    let fifo = d.path().join("fifo");
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::from_raw_mode(0o600), 0).unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7).to_le_bytes()[0]).collect();
    let (w, sent) = (fifo.clone(), data.clone());
    let writer = std::thread::spawn(move || std::fs::write(w, sent).unwrap());
    let mut r = Reader::open(&fifo, &ro(Mode::Auto, BackendKind::Auto, 1 << 20)).unwrap();
    assert!(r.streams());
    let mut back = Vec::new();
    r.read_to_end(&mut back).unwrap();
    writer.join().unwrap();
    assert!(back == data, "{} of {} bytes through the FIFO", back.len(), data.len());
}

/// `CopyOptions::default()` is `CopyOptions::new()`: a caller writing `..Default::default()`
/// gets the same small-file threshold as one calling `new()` (it was 0, which streamed every
/// small file through a Writer).
#[test]
fn copy_options_default_is_new() {
    let (d, n) = (cacheless::CopyOptions::default(), cacheless::CopyOptions::new());
    assert_eq!(d.small_file, n.small_file);
    assert!(n.small_file > 0);
    assert_eq!(format!("{d:?}"), format!("{n:?}"));
}
