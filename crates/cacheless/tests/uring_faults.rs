//! A failed io_uring submission (an `io_uring_enter` that fails, injected on this thread) in the
//! middle of a stream: the chunks before it are right, the error names the file and the
//! operation, nothing the kernel may still hold is freed, every buffer comes back to the budget,
//! and an unfinished file is removed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

use std::io::Write;

use cacheless::sys::consts::ENXIO;
use cacheless::{BackendKind, Budget, Mode, ReadOptions, Reader, WriteOptions, Writer};
use cacheless_sys::backend::fail_submit;

/// True (after saying why) when io_uring is missing and the test cannot run; a failure
/// instead when `CACHELESS_REQUIRE` names it.
#[track_caller]
fn no_uring() -> bool {
    !cacheless_testkit::require("uring", cacheless::caps::system().uring.as_ref().map(|_| ()).map_err(|u| u.reason.clone()))
}

fn data(len: usize) -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}

const BLOCK: usize = 256 << 10;

/// An 8 MiB scratch file (its directory, path and bytes) and a reader on it through
/// io_uring, with the budget its buffers come from.
fn uring_reader() -> (tempfile::TempDir, std::path::PathBuf, Vec<u8>, Budget, Reader) {
    let dir = cacheless_testkit::scratch();
    let p = dir.path().join("src");
    let bytes = data(8 << 20);
    std::fs::write(&p, &bytes).unwrap();
    let budget = Budget::new(8 << 20);
    let mut o = ReadOptions::new(budget.clone());
    o.io.mode = Mode::Buffered;
    o.io.backend = BackendKind::Uring;
    o.io.block_size = BLOCK;
    o.io.queue_depth = 4;
    let r = Reader::open(&p, &o).unwrap();
    (dir, p, bytes, budget, r)
}

/// A submission that fails mid-stream: the chunks before it are right, the error names
/// the file and the operation, and every buffer comes back to the budget (none was freed
/// while the kernel still had it: its SQE went out with a later submission).
#[test]
fn failed_submit_mid_stream_read() {
    if no_uring() {
        return;
    }
    let (_dir, p, bytes, budget, mut r) = uring_reader();
    fail_submit(6, ENXIO);
    let mut good = 0;
    let err = loop {
        match r.next_chunk() {
            Ok(Some(c)) => {
                let off = cacheless::conv::usize_of(c.offset());
                assert!(c[..] == bytes[off..off + c.len()], "chunk at {off} differs");
                good += 1;
            }
            Ok(None) => panic!("the injected failure was not reported"),
            Err(e) => break e,
        }
    };
    assert!(good > 0, "chunks before the failure arrive");
    assert_eq!((err.op(), err.path(), err.errno()), ("read", p.as_path(), Some(ENXIO)), "{err}");
    drop(r);
    assert_eq!(budget.used(), 0, "every buffer is back in the budget");
}

/// The same for reads into borrowed memory: the call returns only once every piece is
/// back, so the next call on the same queue is byte-exact.
#[test]
fn failed_submit_read_at() {
    if no_uring() {
        return;
    }
    let (_dir, p, bytes, budget, mut r) = uring_reader();
    let mut buf = vec![0u8; 6 << 20];
    fail_submit(3, ENXIO);
    let err = r.read_at(&mut buf, 1000).unwrap_err();
    assert_eq!((err.op(), err.path(), err.errno()), ("read", p.as_path(), Some(ENXIO)), "{err}");
    buf.fill(0);
    assert_eq!(r.read_at(&mut buf, 1000).unwrap(), buf.len());
    assert!(buf[..] == bytes[1000..1000 + buf.len()]);
    drop(r);
    assert_eq!(budget.used(), 0);
}

/// A failed submission while writing: an error naming the file and the operation, and
/// the unfinished file removed once the writes in flight are back.
#[test]
fn failed_submit_mid_stream_write() {
    if no_uring() {
        return;
    }
    let dir = cacheless_testkit::scratch();
    let p = dir.path().join("dst");
    let bytes = data(8 << 20);
    let budget = Budget::new(8 << 20);
    let mut o = WriteOptions::new(budget.clone());
    o.io.mode = Mode::Buffered;
    o.io.backend = BackendKind::Uring;
    o.io.block_size = BLOCK;
    o.io.queue_depth = 4;
    o.durability = cacheless::Durability::Off { write_back: None };
    let mut w = Writer::create(&p, &o).unwrap();
    fail_submit(5, ENXIO);
    let err = match bytes.chunks(100_000).try_for_each(|c| w.write_all(c)) {
        Err(e) => {
            drop(w);
            e.into_inner().and_then(|e| e.downcast::<cacheless::Error>().ok()).map(|e| *e).expect("an engine error")
        }
        Ok(()) => w.finish().map(|_| ()).unwrap_err(),
    };
    assert_eq!((err.op(), err.path(), err.errno()), ("write", p.as_path(), Some(ENXIO)), "{err}");
    assert_eq!(budget.used(), 0, "every buffer is back in the budget");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the unfinished file is removed");
}
