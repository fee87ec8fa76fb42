//! Byte-exact reads, writes and copies against std::fs, for every mode x backend.

mod common;

use std::io::{Read, Write};

use cacheless::{copy_file, BackendKind, Budget, Mode, Progress, ReadOptions, Reader, WriteOptions, Writer};
use common::*;
use rand::Rng;

fn ro(mode: Mode, backend: BackendKind, block: usize) -> ReadOptions {
    let mut o = ReadOptions::new(Budget::new(64 << 20));
    o.mode = mode;
    o.backend = backend;
    o.block_size = block;
    o.queue_depth = 4;
    o
}

fn wo(mode: Mode, backend: BackendKind, block: usize) -> WriteOptions {
    let mut o = WriteOptions::new(Budget::new(64 << 20));
    o.mode = mode;
    o.backend = backend;
    o.block_size = block;
    o.queue_depth = 4;
    o.sync = false;
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
            let off = rng.gen_range(0..size);
            let len = rng.gen_range(0..(size - off).min(2 << 20) + 1);
            cases.push((off, len, rng.gen_range(0..64)));
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
fn read_all_is_the_whole_file() {
    let d = scratch();
    let align = align_of(d.path());
    for size in [0, 1, align - 1, align + 1, 5 << 20] {
        let (p, data) = random_file(d.path(), &format!("a{size}"), size, size as u64);
        for (mode, backend) in matrix(d.path()) {
            let mut r = Reader::open(&p, &ro(mode, backend, 1 << 20)).unwrap();
            let all = r.read_all().unwrap();
            assert!(&all[..] == &data[..], "read_all {size} ({mode}, {backend})");
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
                    let n = r.gen_range(1..100_000).min(size - k);
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
    r.block_size = 128 << 10;
    let mut w = WriteOptions::new(budget.clone());
    w.block_size = 128 << 10;
    w.sync = false;
    let dst = d.path().join("d");
    copy_file(&src, &dst, &r, &w, &Progress::new()).unwrap();
    assert!(std::fs::read(&dst).unwrap() == data);
    assert_eq!(budget.used(), 0, "every buffer returned to the budget");
}
