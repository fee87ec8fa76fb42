//! Real faults, end to end: a full filesystem (a small ext4 image on a loop device, and a
//! size-limited tmpfs) under `cp` and `extract`; SIGTERM during `cp`; and a file written with
//! O_DIRECT while another process reads it buffered and a third has it mapped.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cacheless::{Budget, Mode, Taken, WriteOptions, Writer};
use cacheless_testkit::{cacheless, interrupt, require, scratch, FsKind, LoopFs};
use rand::{RngCore, SeedableRng};

fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The entries of `dir`, but ext4's lost+found.
fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).filter(|p| !p.ends_with("lost+found")).collect();
    v.sort();
    v
}

/// Small filesystems that fill up: a 48 MiB ext4 image and a 16 MiB tmpfs.
fn full_filesystems() -> Vec<LoopFs> {
    if !require("root", cacheless_testkit::root()) {
        return Vec::new();
    }
    [(FsKind::Ext4, 48), (FsKind::Tmpfs, 16)]
        .into_iter()
        .filter_map(|(kind, mib)| match LoopFs::new(kind, mib) {
            Ok(fs) => Some(fs),
            Err(why) => {
                require(kind.name(), Err(why));
                None
            }
        })
        .collect()
}

/// `cp` of a file larger than the filesystem fails with ENOSPC named, in every mode the
/// filesystem takes, and leaves neither the destination nor a temporary behind.
#[test]
fn cp_onto_a_full_filesystem_fails_with_enospc_and_leaves_nothing() {
    let d = scratch();
    let src = d.path().join("big");
    std::fs::write(&src, random_bytes(64 << 20, 1)).unwrap();
    for fs in full_filesystems() {
        for mode in Mode::ALL {
            let out_dir = fs.path().join(format!("cp-{mode}"));
            std::fs::create_dir(&out_dir).unwrap();
            if cacheless::info::describe(&out_dir, mode).unwrap().write.is_some_and(|p| p.is_refused()) {
                continue;
            }
            let o = cacheless().args(["cp", "--mode", mode.name(), s(&src), s(&out_dir.join("big"))]).output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "[{} {mode}] {err}", fs.kind().name());
            assert!(err.contains("No space left on device"), "[{} {mode}] ENOSPC named: {err}", fs.kind().name());
            assert_eq!(entries(&out_dir), Vec::<PathBuf>::new(), "[{} {mode}] nothing left behind", fs.kind().name());
        }
        // And the space is given back: a file that fits is copied after the failures.
        let small = d.path().join("small");
        std::fs::write(&small, random_bytes(1 << 20, 2)).unwrap();
        let o = cacheless().args(["cp", s(&small), s(&fs.path().join("small"))]).output().unwrap();
        assert!(o.status.success(), "[{}] {}", fs.kind().name(), String::from_utf8_lossy(&o.stderr));
        assert!(std::fs::read(fs.path().join("small")).unwrap() == std::fs::read(&small).unwrap());
    }
}

/// `extract` that runs out of space fails with ENOSPC named; nothing half-written carries a
/// final name or is left behind (a member finished before may stay, whole).
#[test]
fn extract_onto_a_full_filesystem_fails_with_enospc_and_leaves_no_partial_file() {
    let d = scratch();
    let tree = d.path().join("tree");
    std::fs::create_dir(&tree).unwrap();
    let first = random_bytes(100_000, 3);
    std::fs::write(tree.join("a-first"), &first).unwrap();
    std::fs::write(tree.join("b-big"), random_bytes(64 << 20, 4)).unwrap();
    let tar = d.path().join("t.tar");
    assert!(Command::new("tar").arg("-cf").arg(&tar).arg("-C").arg(&tree).args(["a-first", "b-big"]).status().unwrap().success());
    for fs in full_filesystems() {
        let dest = fs.path().join("x");
        let o = cacheless().args(["extract", "-C", s(&dest), s(&tar)]).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "[{}] {err}", fs.kind().name());
        assert!(err.contains("No space left on device"), "[{}] ENOSPC named: {err}", fs.kind().name());
        // The member that did not fit is gone, temporaries too; one that was finished may stay, whole.
        for e in entries(&dest) {
            assert_eq!(e, dest.join("a-first"), "[{}] only a whole member may be left", fs.kind().name());
            assert!(std::fs::read(&e).unwrap() == first, "[{}]", fs.kind().name());
        }
    }
}

/// `save` of a safetensors file larger than the filesystem fails with ENOSPC and leaves no file.
#[test]
fn safetensors_save_onto_a_full_filesystem_fails_with_enospc_and_leaves_nothing() {
    use cacheless_safetensors::{save, Dtype, TensorData};
    let data = random_bytes(64 << 20, 5);
    let shape = [data.len()];
    let tensors = [TensorData { name: "w", dtype: Dtype::U8, shape: &shape, data: &data }];
    for fs in full_filesystems() {
        let p = fs.path().join("model.safetensors");
        let e = save(&p, &tensors, None, &WriteOptions::new(Budget::new(64 << 20)), &cacheless::Progress::new()).unwrap_err();
        let errno = match &e {
            cacheless_safetensors::Error::Engine(e) => e.errno(),
            other => panic!("[{}] not an I/O error: {other}", fs.kind().name()),
        };
        assert_eq!(errno, Some(libc::ENOSPC), "[{}] {e}", fs.kind().name());
        assert_eq!(entries(fs.path()), Vec::<PathBuf>::new(), "[{}] nothing left behind", fs.kind().name());
    }
}

/// `cp` of several files stopped by SIGTERM exits 143: the files it finished are kept whole,
/// the one in flight is neither under its name nor left as a temporary.
#[test]
fn cp_stopped_by_sigterm_exits_143_and_keeps_the_files_it_finished() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let small = random_bytes(50_000, 6);
    std::fs::write(src.join("a-small"), &small).unwrap();
    std::fs::write(src.join("b-big"), random_bytes(256 << 20, 7)).unwrap();
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    // Tiny direct requests keep the big file in flight when the signal lands.
    let child = cacheless()
        .args(["--block-size", "4k", "--queue-depth", "1", "--mode", "direct", "cp", s(&src.join("a-small")), s(&src.join("b-big")), s(&out)])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let o = interrupt(child, std::time::Duration::from_millis(500), rustix::process::Signal::TERM);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(143), "SIGTERM exits 143: {err}");
    assert_eq!(entries(&out), vec![out.join("a-small")], "the finished file is kept, nothing else: {err}");
    assert!(std::fs::read(out.join("a-small")).unwrap() == small);
}

/// One process writes a file with O_DIRECT while another reads it buffered over and over and a
/// third has it mapped and touches every page: once the write is done, all three see exactly
/// what was written.
#[test]
fn direct_writes_under_buffered_readers_and_a_mapping_read_back_exactly() {
    let d = scratch();
    let f = d.path().join("shared");
    let done = d.path().join("done");
    let len = 24usize << 20;
    let data = random_bytes(len, 8);
    let mut opts = WriteOptions::new(Budget::new(64 << 20));
    opts.io.mode = Mode::Direct;
    opts.naming = cacheless::Naming::Final;
    opts.size_hint = Some(len as u64);
    opts.io.block_size = 1 << 20;
    let mut w = Writer::create(&f, &opts).unwrap();
    // Preallocated at its first write, not before (a writer killed before writing leaves no
    // full-size file); from then on it has its full size, before the readers start.
    assert_eq!(std::fs::metadata(&f).unwrap().len(), 0);
    let mut pieces = data.chunks(1 << 20);
    w.write_bytes(pieces.next().unwrap()).unwrap();
    assert_eq!(std::fs::metadata(&f).unwrap().len(), len as u64);
    let reader = Command::new("sh").arg("-c").arg(r#"while [ ! -e "$2" ]; do cat "$1" >/dev/null; done"#).args(["sh", s(&f), s(&done)]).spawn().unwrap();
    let mapper = Command::new("python3")
        .arg("-c")
        .arg(
            r#"
import mmap, os, sys
f, done = sys.argv[1], sys.argv[2]
with open(f, "rb") as fh:
    m = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
    sum_ = 0
    while not os.path.exists(done):
        for off in range(0, len(m), 4096):
            sum_ += m[off]
    sys.stdout.buffer.write(m[:])
"#,
        )
        .args([s(&f), s(&done)])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    for (i, piece) in pieces.enumerate() {
        w.write_bytes(piece).unwrap();
        if i % 4 == 0 {
            // Let the readers pull the pages in between writes.
            std::thread::yield_now();
        }
    }
    let rep = w.finish().unwrap();
    assert_eq!(rep.decision.mode, Taken::Direct);
    std::fs::File::create(&done).unwrap().flush().unwrap();
    let mapped = mapper.wait_with_output().unwrap();
    let mut reader = reader;
    assert!(reader.wait().unwrap().success());
    assert!(mapped.status.success());
    assert!(mapped.stdout == data, "the mapping sees what was written");
    assert!(std::fs::read(&f).unwrap() == data, "a buffered read sees what was written");
    let cat = cacheless().args(["cat", "--mode", "direct", s(&f)]).output().unwrap();
    assert!(cat.status.success() && cat.stdout == data, "a direct read sees what was written");
}
