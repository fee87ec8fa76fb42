//! Archives in several frames (pzstd, concatenated zstd/gzip/xz/lz4/bzip2 outputs, skippable
//! frames, `cacheless pack`) extract byte-exact against GNU tar's extraction of the same tar,
//! multi-frame zstd on more than one thread, and a corrupt frame is an error naming its offset.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use cacheless_archive::{extract, pack, Compression, ExtractOptions, ExtractReport, Input, Output, PackOptions};
use common::*;

/// A tree (every kind of entry, a 9 GiB sparse file, 3 to 9 MiB files) and its plain tar with
/// GNU tar's extraction of it: the reference every compressed form must give.
struct Fixture {
    _dir: tempfile::TempDir,
    tree: PathBuf,
    tar: PathBuf,
    gnu: PathBuf,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = scratch();
        let tree = dir.path().join("tree");
        make_tree(&tree, &TreeSpec { long_names: true, huge_sparse: true, unicode: true });
        let tar = dir.path().join("t.tar");
        gnu_tar_create(&tree, &tar, "pax", None, &[]);
        let gnu = dir.path().join("gnu");
        gnu_tar_extract(&tar, &gnu);
        Fixture { _dir: dir, tree, tar, gnu }
    })
}

fn extract_with(archive: &Path, dest: &Path, decompress_threads: usize) -> ExtractReport {
    let mut o = ExtractOptions::new(dest);
    o.durability = cacheless::Durability::Off { write_back: Some(cacheless_archive::DEFAULT_WRITE_BACK) };
    o.decompress_threads = decompress_threads;
    extract(Input::Path(archive.to_path_buf()), &o).unwrap_or_else(|e| panic!("{archive:?}: {e}"))
}

/// Extracts `archive` and compares with GNU tar's extraction of the plain tar.
fn same_as_gnu(archive: &Path, decompress_threads: usize, what: &str) -> ExtractReport {
    let work = scratch();
    let o = work.path().join("ours");
    let r = extract_with(archive, &o, decompress_threads);
    assert!(r.is_ok(), "{what}: fatal {:?}, failures {:?}", r.fatal, r.failures);
    assert_same_tree(&o, &fixture().gnu, what);
    r
}

/// The plain tar cut in `n` parts of about equal size.
fn parts(n: usize) -> Vec<Vec<u8>> {
    let t = fs::read(&fixture().tar).unwrap();
    let step = t.len().div_ceil(n);
    t.chunks(step).map(<[u8]>::to_vec).collect()
}

/// Compresses `data` with `cmd` (a shell pipeline reading stdin).
fn compress(cmd: &str, data: &[u8], dir: &Path) -> Vec<u8> {
    let i = dir.join("part");
    fs::write(&i, data).unwrap();
    let out = Command::new("sh").arg("-c").arg(format!("{cmd} < '{}'", i.display())).output().unwrap();
    assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

fn tool(name: &str) -> bool {
    let found = Command::new("sh").arg("-c").arg(format!("command -v {name}")).output().is_ok_and(|o| o.status.success());
    require(name, if found { Ok(()) } else { Err(format!("{name} not installed (scripts/test installs it)")) })
}

/// The offsets of the zstd frames of a pzstd-style archive (each after a 12-byte size frame).
fn size_framed_offsets(z: &[u8]) -> Vec<usize> {
    let mut v = Vec::new();
    let mut i = 0;
    while i + 12 <= z.len() {
        assert_eq!(&z[i..i + 8], &[0x50, 0x2a, 0x4d, 0x18, 4, 0, 0, 0], "a size frame at {i}");
        let len = usize::try_from(u32::from_le_bytes(z[i + 8..i + 12].try_into().unwrap())).unwrap();
        v.push(i + 12);
        i += 12 + len;
    }
    assert_eq!(i, z.len());
    v
}

#[test]
fn pzstd_archives_are_decoded_frame_by_frame_on_several_threads() {
    if !tool("pzstd") {
        return;
    }
    let d = scratch();
    let a = d.path().join("p.tar.zst");
    // Level 1: 2 MiB frames, so the tree's tar is several.
    run(Command::new("pzstd").args(["-q", "-1", "-p", "2"]).arg(&fixture().tar).arg("-o").arg(&a));
    let frames = u64::try_from(size_framed_offsets(&fs::read(&a).unwrap()).len()).unwrap();
    assert!(frames >= 4, "{frames} frames");
    let r = same_as_gnu(&a, 4, "pzstd");
    assert_eq!(r.source.compression, Compression::Zstd);
    assert_eq!(r.source.frames, Some(frames));
    assert_eq!(r.source.decompress_threads, 4, "every worker decoded frames");
    // One decompression thread: the streaming decoder, which reads the same archive.
    let r = same_as_gnu(&a, 1, "pzstd on one thread");
    assert_eq!((r.source.frames, r.source.decompress_threads), (None, 1));
}

#[test]
fn a_single_frame_stays_on_one_thread() {
    let d = scratch();
    let a = d.path().join("one.tar.zst");
    run(Command::new("zstd").args(["-q", "-3"]).arg(&fixture().tar).arg("-o").arg(&a));
    let r = same_as_gnu(&a, 4, "zstd");
    assert_eq!((r.source.frames, r.source.decompress_threads), (Some(1), 1));
}

#[test]
fn concatenated_zstd_outputs_with_skippable_frames_of_every_magic() {
    let d = scratch();
    let mut z = Vec::new();
    for (i, p) in parts(3).iter().enumerate() {
        // Skippable frames 0x184D2A51..5F with payloads of several sizes, between the frames.
        for m in 0..5u32 {
            let magic = 0x184D_2A51 + u32::try_from(i).unwrap() * 5 + m;
            let payload = rnd(u64::from(magic), usize::try_from(m).unwrap() * 37);
            z.extend_from_slice(&magic.to_le_bytes());
            z.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_le_bytes());
            z.extend_from_slice(&payload);
        }
        // With and without the content size and checksum in the frame header.
        let cmd = if i == 1 { "zstd -q -c --no-check" } else { "zstd -q -c" };
        z.extend_from_slice(&compress(cmd, p, d.path()));
    }
    let a = d.path().join("cat.tar.zst");
    fs::write(&a, &z).unwrap();
    let r = same_as_gnu(&a, 2, "cat of zstd outputs");
    assert_eq!((r.source.frames, r.source.decompress_threads), (Some(3), 2));
    let r = same_as_gnu(&a, 1, "cat of zstd outputs, one thread");
    assert_eq!(r.source.decompress_threads, 1);
}

/// A skippable frame (magic 0x184D2A50 + `nibble`) with a payload of `len` bytes.
fn skippable(nibble: u32, len: usize) -> Vec<u8> {
    let magic = 0x184D_2A50 + nibble;
    let mut f = magic.to_le_bytes().to_vec();
    f.extend_from_slice(&u32::try_from(len).unwrap().to_le_bytes());
    f.extend_from_slice(&rnd(u64::from(magic), len));
    f
}

#[test]
fn lz4_with_skippable_frames_first_and_between_is_lz4() {
    if !tool("lz4") {
        return;
    }
    let d = scratch();
    // LZ4's frame format shares zstd's skippable frames: one leads the stream (so its first
    // bytes are not LZ4's magic), more sit between the members, one ends it.
    let mut z = skippable(0, 12);
    for (i, p) in parts(3).iter().enumerate() {
        z.extend_from_slice(&compress("lz4 -c", p, d.path()));
        z.extend_from_slice(&skippable(u32::try_from(i).unwrap() + 1, 1000 * i));
    }
    let a = d.path().join("skip.tar.lz4");
    fs::write(&a, &z).unwrap();
    // The reference decoder reads it as the plain tar.
    let out = Command::new("sh").arg("-c").arg(format!("lz4 -dc < '{}'", a.display())).output().unwrap();
    assert!(out.status.success(), "lz4 -d: {}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout == fs::read(&fixture().tar).unwrap(), "lz4 -d does not give the tar back");
    let r = same_as_gnu(&a, 2, "lz4 with skippable frames");
    assert_eq!(r.source.compression, Compression::Lz4);
}

#[test]
fn the_frame_after_leading_skippable_frames_decides_the_format() {
    let zstd = compress_bytes(&[0x28, 0xb5, 0x2f, 0xfd, 0, 0]);
    let lz4 = compress_bytes(&[0x04, 0x22, 0x4d, 0x18, 0x64, 0x40]);
    for (head, want, what) in [
        (zstd.clone(), Compression::Zstd, "skippable then zstd"),
        (lz4.clone(), Compression::Lz4, "skippable then lz4"),
        // A skippable frame that runs past what was peeked: zstd, the usual writer of them.
        (skippable(3, 4096)[..100].to_vec(), Compression::Zstd, "skippable cut short"),
        (skippable(3, 4)[..6].to_vec(), Compression::Zstd, "skippable header cut short"),
        ([0x04, 0x22, 0x4d, 0x18].to_vec(), Compression::Lz4, "lz4 alone"),
    ] {
        assert_eq!(Compression::detect(&head), want, "{what}");
    }
}

/// Two skippable frames, then `frame`.
fn compress_bytes(frame: &[u8]) -> Vec<u8> {
    let mut v = skippable(0, 4);
    v.extend_from_slice(&skippable(15, 0));
    v.extend_from_slice(frame);
    v
}

#[test]
fn concatenated_members_of_every_other_format() {
    for (cmd, name) in [("gzip -c", "gzip"), ("xz -c", "xz"), ("lz4 -c", "lz4"), ("bzip2 -c", "bzip2")] {
        if !tool(name) {
            continue;
        }
        let d = scratch();
        let z: Vec<u8> = parts(3).iter().flat_map(|p| compress(cmd, p, d.path())).collect();
        let a = d.path().join("cat.tar.c");
        fs::write(&a, &z).unwrap();
        let r = same_as_gnu(&a, 4, name);
        assert_eq!(r.source.compression.name(), name);
        assert_eq!((r.source.frames, r.source.decompress_threads), (None, 1), "{name}");
    }
}

#[test]
fn our_own_pack_output_in_many_frames() {
    let d = scratch();
    let a = d.path().join("ours.tar.zst");
    let mut o = PackOptions::new(Output::Path(a.clone()), vec![".".into()]);
    o.members.directory = Some(fixture().tree.clone());
    o.compression = Compression::Zstd;
    o.frame_size = 1 << 20;
    o.durability = cacheless::Durability::Off { write_back: None };
    let pr = pack(o).unwrap();
    assert!(pr.is_ok(), "{:?}", pr.failures);
    assert!(pr.frames >= 8, "{} frames", pr.frames);
    let work = scratch();
    let gnu = work.path().join("gnu");
    gnu_tar_extract(&a, &gnu);
    let ours = work.path().join("ours");
    let r = extract_with(&a, &ours, 3);
    assert!(r.is_ok(), "{:?} {:?}", r.fatal, r.failures);
    assert_same_tree(&ours, &gnu, "pack output");
    assert_eq!((r.source.frames, r.source.decompress_threads), (Some(pr.frames), 3));
}

/// Files under `root` (relative), with their contents.
fn files(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut v = Vec::new();
    let mut st = vec![root.to_path_buf()];
    while let Some(d) = st.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let md = fs::symlink_metadata(&p).unwrap();
            if md.is_dir() {
                st.push(p);
            } else if md.is_file() && md.len() < 64 << 20 {
                v.push((p.strip_prefix(root).unwrap().to_path_buf(), fs::read(&p).unwrap()));
            }
        }
    }
    v.sort();
    v
}

#[test]
fn a_corrupt_frame_in_the_middle_names_its_offset_and_leaves_no_partial_file() {
    if !tool("pzstd") {
        return;
    }
    // 300 files of 20 KiB: each 2 MiB frame ends inside some file's data.
    let d = scratch();
    let tree = d.path().join("tree");
    fs::create_dir_all(&tree).unwrap();
    for i in 0..300u64 {
        fs::write(tree.join(format!("f{i:03}")), rnd(i, 20 << 10)).unwrap();
    }
    let tar = d.path().join("t.tar");
    gnu_tar_create(&tree, &tar, "gnu", None, &[]);
    let a = d.path().join("t.tar.zst");
    run(Command::new("pzstd").args(["-q", "-1", "-p", "2"]).arg(&tar).arg("-o").arg(&a));
    let good = fs::read(&a).unwrap();
    let offs = size_framed_offsets(&good);
    assert!(offs.len() >= 3, "{} frames", offs.len());
    let at = offs[1];
    // The frame's magic (found by the splitter), or a reserved bit in its header (by the decoder).
    for (byte, what) in [(at, "not a zstd frame"), (at + 4, "zstd frame 1 at archive offset")] {
        let mut z = good.clone();
        z[byte] ^= if byte == at { 0xff } else { 0x08 };
        fs::write(&a, &z).unwrap();
        let out = d.path().join(format!("out{byte}"));
        let r = extract_with(&a, &out, 2);
        let fatal = r.fatal.clone().unwrap_or_default();
        assert!(fatal.contains(what) && fatal.contains(&format!("archive offset {at}")), "{fatal}");
        // What is there is whole, and the entry cut by the bad frame is not.
        let got = files(&out);
        assert!(!got.is_empty() && got.len() < 300, "{} files", got.len());
        for (p, data) in &got {
            assert_eq!(data, &fs::read(tree.join(p)).unwrap(), "{p:?}");
        }
    }
}
