//! Hostile and broken archives: refused or failing cleanly, nothing written outside DIR.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use cacheless_archive::{extract, Error, ExtractOptions, ExtractReport, Input};
use common::*;

struct Case {
    _t: tempfile::TempDir,
    base: PathBuf,
    dest: PathBuf,
    outside: PathBuf,
}

/// base/{dest, outside/secret}
fn case() -> Case {
    let t = scratch();
    let base = t.path().to_path_buf();
    let dest = base.join("dest");
    let outside = base.join("outside");
    fs::create_dir_all(&dest).unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("secret"), "secret").unwrap();
    Case { _t: t, base, dest, outside }
}

fn listing(p: &Path) -> Vec<String> {
    let mut v = Vec::new();
    let mut st = vec![p.to_path_buf()];
    while let Some(d) = st.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap().path();
            if fs::symlink_metadata(&e).unwrap().is_dir() {
                st.push(e.clone());
            }
            v.push(e.strip_prefix(p).unwrap().display().to_string());
        }
    }
    v.sort();
    v
}

impl Case {
    fn run(&self, bytes: Vec<u8>) -> ExtractReport {
        self.run_with(bytes, |_| {})
    }
    fn run_with(&self, bytes: Vec<u8>, f: impl FnOnce(&mut ExtractOptions)) -> ExtractReport {
        let mut o = ExtractOptions::new(&self.dest);
        o.durability = cacheless::Durability::Off { write_back: Some(cacheless_archive::DEFAULT_WRITE_BACK) };
        f(&mut o);
        let r = extract(Input::Stream(Box::new(std::io::Cursor::new(bytes))), &o).unwrap();
        self.assert_outside_untouched();
        r
    }
    fn assert_outside_untouched(&self) {
        assert_eq!(listing(&self.base).into_iter().filter(|p| !p.starts_with("dest")).collect::<Vec<_>>(), vec!["outside", "outside/secret"]);
        assert_eq!(fs::read(self.outside.join("secret")).unwrap(), b"secret");
    }
    fn dest_listing(&self) -> Vec<String> {
        listing(&self.dest)
    }
}

#[test]
fn dotdot_refused_absolute_stripped() {
    let c = case();
    let r = c.run(TarBuf::default().file("../evil", b"x").file("a/../../evil2", b"x").file("/abs/file", b"ok").file("good", b"g").end());
    assert_eq!(r.failure_count, 2, "{:?}", r.failures);
    assert!(r.failures[0].contains("../evil"), "{:?}", r.failures);
    assert!(r.warnings.iter().any(|w| w.contains("leading '/'")));
    assert_eq!(c.dest_listing(), vec!["abs", "abs/file", "good"]);
    assert!(r.fatal.is_none());
}

#[test]
fn symlink_then_write_through() {
    let c = case();
    let out = c.outside.display().to_string();
    let r = c.run(
        TarBuf::default()
            .symlink("link", &out)
            .file("link/evil", b"x")
            .symlink("rel", "../outside")
            .file("rel/evil", b"x")
            .dir("rel/sub")
            .symlink("dot", ".")
            .file("dot/inside", b"y")
            .end(),
    );
    assert_eq!(r.failure_count, 3, "{:?}", r.failures);
    assert!(r.failures.iter().all(|f| f.contains("symlink")), "{:?}", r.failures);
    // A link the archive made with a relative text without `..` is followed, as GNU tar follows it.
    assert_eq!(c.dest_listing(), vec!["dot", "inside", "link", "rel"]);
}

#[test]
fn file_replacing_symlink_does_not_write_through() {
    let c = case();
    let target = c.outside.join("secret").display().to_string();
    let r = c.run(TarBuf::default().symlink("s", &target).file("s", b"overwritten?").end());
    assert!(r.is_ok(), "{:?}", r.failures);
    assert_eq!(fs::read(c.dest.join("s")).unwrap(), b"overwritten?");
    assert!(fs::symlink_metadata(c.dest.join("s")).unwrap().is_file());
}

/// A symlink that was in the destination before is followed, wherever it points, as GNU tar
/// follows it (`lib -> usr/lib` restored into `/`), with openat2 and with the O_NOFOLLOW walk;
/// but not where its way leads through a symlink the archive made that GNU would not follow.
#[test]
fn preexisting_symlink_in_dest_is_followed_as_gnu_follows_it() {
    for walk in [false, true] {
        let c = case();
        std::os::unix::fs::symlink(&c.outside, c.dest.join("pre")).unwrap();
        let mut o = ExtractOptions::new(&c.dest);
        o.durability = cacheless::Durability::Off { write_back: Some(cacheless_archive::DEFAULT_WRITE_BACK) };
        o.force_walk = walk;
        let bytes = TarBuf::default().file("pre/x", b"x").dir("pre/d").end();
        let r = extract(Input::Stream(Box::new(std::io::Cursor::new(bytes))), &o).unwrap();
        assert!(r.is_ok(), "{:?}", r.failures);
        assert_eq!(fs::read(c.outside.join("x")).unwrap(), b"x");
        assert!(c.outside.join("d").is_dir());

        // `way -> hop`, where the archive then makes `hop -> OUTSIDE` (absolute: GNU makes it
        // last, so nothing goes through it).
        let c = case();
        std::os::unix::fs::symlink("hop", c.dest.join("way")).unwrap();
        let out = c.outside.display().to_string();
        let r = c.run_with(TarBuf::default().symlink("hop", &out).file("way/evil", b"x").end(), |o| o.force_walk = walk);
        assert_eq!(r.failure_count, 1, "{:?}", r.failures);
    }
}

#[test]
fn hardlink_escape_refused() {
    let c = case();
    let out = c.outside.display().to_string();
    let r = c.run(
        TarBuf::default().hardlink("h1", "../outside/secret").hardlink("h2", &format!("{out}/secret")).symlink("s", &out).hardlink("h3", "s/secret").end(),
    );
    assert_eq!(r.failure_count, 3, "{:?}", r.failures);
    assert!(!c.dest.join("h1").exists() && !c.dest.join("h3").exists());
    // h2: leading '/' stripped, so its target is dest/<outside path>/secret, which does not exist.
    assert!(fs::symlink_metadata(c.dest.join("h2")).is_err());
    assert_eq!(c.dest_listing(), vec!["s"], "nothing created for a missing hard link target");
}

#[test]
fn truncated_in_data_removes_the_partial_entry() {
    for size in [5000usize, 9 << 20] {
        let c = case();
        let mut t = TarBuf::default();
        t.file("done", b"complete");
        let big = vec![7u8; size];
        t.file("partial", &big);
        let mut bytes = t.end();
        bytes.truncate(1024 + 512 + size / 2);
        let r = c.run(bytes);
        let fatal = r.fatal.clone().expect("fatal error");
        assert!(fatal.contains("partial") && fatal.contains("offset"), "{fatal}");
        assert!(matches!(r.fatal_error, Some(Error::Truncated { .. })));
        assert_eq!(c.dest_listing(), vec!["done"]);
        assert_eq!(fs::read(c.dest.join("done")).unwrap(), b"complete");
    }
}

#[test]
fn truncated_in_header() {
    let c = case();
    let mut bytes = TarBuf::default().file("done", b"complete").file("next", b"n").end();
    bytes.truncate(1024 + 200);
    let r = c.run(bytes);
    assert!(matches!(r.fatal_error, Some(Error::Truncated { what: "header", offset: 1024, .. })), "{:?}", r.fatal);
    assert_eq!(c.dest_listing(), vec!["done"]);
}

#[test]
fn truncated_compressed_stream() {
    let c = case();
    let tar = TarBuf::default().file("a", &vec![1u8; 100_000]).file("b", &vec![2u8; 3 << 20]).end();
    let mut z = zstd::encode_all(&tar[..], 3).unwrap();
    z.truncate(z.len() / 2);
    let r = c.run(z);
    assert!(r.fatal.is_some());
    assert!(!c.dest.join("b").exists());
}

#[test]
fn huge_size_field() {
    let c = case();
    // Claims 8 GiB - 1 of data, holds 10 bytes.
    let h = header(b"huge", b'0', b"77777777777\0", b"", 0o644);
    let mut t = TarBuf::default();
    t.raw(h, b"0123456789");
    let r = c.run(t.end());
    assert!(matches!(r.fatal_error, Some(Error::Truncated { .. })), "{:?}", r.fatal);
    assert!(c.dest_listing().is_empty());
}

#[test]
fn negative_and_overflowing_fields() {
    let neg: [u8; 12] = [0xff; 12];
    let mut over = [0xffu8; 12];
    over[0] = 0x80;
    let mut bad = *b"12345678901\0";
    bad[3] = b'9';
    for (what, f) in [("negative", neg), ("overflow", over), ("bad digit", bad)] {
        let c = case();
        let mut t = TarBuf::default();
        t.raw(header(b"x", b'0', &f, b"", 0o644), &[]);
        let r = c.run(t.end());
        assert!(matches!(r.fatal_error, Some(Error::Corrupt { .. })), "{what}: {:?}", r.fatal);
        assert!(c.dest_listing().is_empty(), "{what}");
    }
    // An overflowing pax size and a pax record with a lying length are reported and ignored,
    // as GNU tar ignores them: the header's own fields stand and the archive goes on.
    let c = case();
    let r = c.run(TarBuf::default().pax(&[("size", "99999999999999999999999")]).file("p", b"").file("q", b"q").end());
    assert!(r.fatal.is_none() && r.failure_count == 1 && r.failures[0].contains("size=9999"), "{:?} {:?}", r.fatal, r.failures);
    assert_eq!(c.dest_listing(), vec!["p", "q"]);
    let c = case();
    let d = b"999 path=x\n";
    let mut t = TarBuf::default();
    t.raw(header(b"pax", b'x', &size_field(d.len() as u64), b"", 0o644), d);
    t.file("f", b"");
    let r = c.run(t.end());
    assert!(r.fatal.is_none() && r.failure_count == 1 && r.failures[0].contains("malformed extended header"), "{:?} {:?}", r.fatal, r.failures);
    assert_eq!(c.dest_listing(), vec!["f"]);
}

#[test]
fn bad_checksum() {
    let c = case();
    let mut h = header(b"x", b'0', &size_field(1), b"", 0o644);
    h[0] = b'y';
    let mut t = TarBuf::default();
    t.raw(h, b"1");
    t.file("next", b"2");
    let r = c.run(t.end());
    // Reported once and skipped, as GNU tar skips it; the next header is found.
    assert!(r.fatal.is_none(), "{:?}", r.fatal);
    assert!(r.failure_count == 1 && r.failures[0].contains("checksum") && r.failures[0].contains("skipping to next header"), "{:?}", r.failures);
    assert_eq!(c.dest_listing(), vec!["next"]);
}

#[test]
fn huge_longname_and_sparse_map() {
    let c = case();
    let mut t = TarBuf::default();
    t.raw(header(b"././@LongLink", b'L', &size_field(1 << 30), b"", 0o644), &[]);
    let r = c.run(t.end());
    assert!(matches!(r.fatal_error, Some(Error::Corrupt { .. })), "{:?}", r.fatal);
    // pax sparse 0.1 map beyond the real size.
    let c = case();
    let r = c.run(
        TarBuf::default()
            .pax(&[("GNU.sparse.map", "100,10"), ("GNU.sparse.realsize", "50"), ("GNU.sparse.name", "sp")])
            .file("GNUSparseFile.0/sp", &[1u8; 10])
            .end(),
    );
    assert!(matches!(r.fatal_error, Some(Error::Corrupt { .. })), "{:?}", r.fatal);
    assert!(c.dest_listing().is_empty());
}

#[test]
fn special_files_skipped_when_asked() {
    let c = case();
    let mut t = TarBuf::default();
    t.raw(header(b"fifo", b'6', &size_field(0), b"", 0o644), &[]);
    t.raw(header(b"null", b'3', &size_field(0), b"", 0o666), &[]);
    let r = c.run_with(t.end(), |o| o.special_files = false);
    assert!(r.is_ok());
    assert_eq!(r.skipped, 2);
    assert_eq!(r.warnings.len(), 2);
    assert!(c.dest_listing().is_empty());
}

/// Without `--same-owner` a set-ID member becomes the extracting user's: as root, one the
/// archive gives root (uid and gid 0, as this header does) keeps its bits, as GNU tar keeps them;
/// as another user, GNU's default drops them (--no-same-permissions).
#[test]
fn setuid_bits_without_same_owner_stay_only_on_roots_own() {
    use std::os::unix::fs::PermissionsExt;
    let c = case();
    let mut t = TarBuf::default();
    t.raw(header(b"suid", b'0', &size_field(1), b"", 0o4755), b"x");
    let r = c.run_with(t.end(), |o| o.same_owner = false);
    assert!(r.is_ok());
    let want = if cacheless::sys::is_root() { 0o4755 } else { 0o755 };
    assert_eq!(fs::metadata(c.dest.join("suid")).unwrap().permissions().mode() & 0o7777, want);
}

#[test]
fn truncated_compressed_stream_after_complete_tar() {
    // The tar part decodes completely (end blocks included) but the zstd frame is cut: an error,
    // as `zstd -d | tar x` reports it.
    let c = case();
    let tar = TarBuf::default().file("a", b"x").end();
    let mut tar = tar;
    tar.resize(10240, 0);
    let mut z = zstd::encode_all(&tar[..], 3).unwrap();
    z.truncate(z.len() - 3);
    let r = c.run(z);
    assert!(matches!(r.fatal_error, Some(Error::Decompress { .. })), "{:?}", r.fatal);
}

/// The offsets in an LZ4 frame (as `lz4` writes it: a 7-byte header, no block checksums) at
/// which a block starts, and where its end mark is.
fn lz4_block_starts(z: &[u8]) -> (Vec<usize>, usize) {
    let flags = z[4];
    let mut at = 4 + 2 + if flags & 0x08 != 0 { 8 } else { 0 } + 1;
    let mut starts = Vec::new();
    loop {
        let word = u32::from_le_bytes(z[at..at + 4].try_into().unwrap());
        if word == 0 {
            return (starts, at);
        }
        starts.push(at);
        at += 4 + (word & 0x7fff_ffff) as usize + if flags & 0x10 != 0 { 4 } else { 0 };
    }
}

/// An LZ4 archive cut where the decoder finds no fault of its own (at a block boundary, just
/// before the end mark, or after the frame's header) is a truncated archive, as `lz4 -d` says
/// ("Unfinished stream"): an error, never a clean end with members missing, and the member
/// being written when it ran out is removed.
#[test]
fn truncated_lz4_at_a_block_boundary_is_an_error() {
    let d = scratch();
    let src = d.path().join("t.tar");
    let tar = TarBuf::default().file("a", &rnd(1, 300_000)).file("b", &rnd(2, 500_000)).file("c", b"c").end();
    fs::write(&src, &tar).unwrap();
    let out = std::process::Command::new("lz4").args(["-q", "-f", "-B4"]).arg(&src).arg(d.path().join("t.tar.lz4")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let z = fs::read(d.path().join("t.tar.lz4")).unwrap();
    let (starts, end_mark) = lz4_block_starts(&z);
    assert!(starts.len() > 3, "{} blocks", starts.len());
    // The whole archive extracts; then each cut.
    let c = case();
    let r = c.run(z.clone());
    assert!(r.is_ok(), "{:?}", r.fatal);
    assert_eq!(c.dest_listing(), vec!["a", "b", "c"]);
    for cut in [end_mark, starts[starts.len() / 2], starts[0]] {
        let c = case();
        let r = c.run(z[..cut].to_vec());
        let fatal = r.fatal.clone().unwrap_or_default();
        assert!(matches!(r.fatal_error, Some(Error::Decompress { .. } | Error::Truncated { .. })), "cut at {cut}: {:?}", r.fatal);
        assert!(fatal.contains("truncated") || fatal.contains("end mark"), "{fatal}");
        // `lz4 -d` refuses the same bytes.
        let cut_file = d.path().join("cut.lz4");
        fs::write(&cut_file, &z[..cut]).unwrap();
        let peer = std::process::Command::new("lz4").args(["-d", "-c"]).arg(&cut_file).output().unwrap();
        assert!(!peer.status.success(), "lz4 -d accepts a cut at {cut}");
        // Only whole members, each complete.
        for name in c.dest_listing() {
            let want: &[u8] = match name.as_str() {
                "a" => &rnd(1, 300_000),
                "b" => &rnd(2, 500_000),
                _ => b"c",
            };
            assert!(fs::read(c.dest.join(&name)).unwrap() == want, "cut at {cut}: {name} is partial");
        }
    }
}

/// `data` compressed by the peer tool `cmd` (`gzip -c`, `zstd -c`, ...).
fn compress_with(cmd: &[&str], data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child =
        std::process::Command::new(cmd[0]).args(&cmd[1..]).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = data.to_vec();
    let feeder = std::thread::spawn(move || stdin.write_all(&input).unwrap());
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    assert!(out.status.success(), "{cmd:?}");
    out.stdout
}

/// Whether a failure message names member `n` (as `'n'`, `'DEST/n'` or `n: ...`).
fn names(failures: &[String], n: &str) -> bool {
    failures.iter().any(|f| f.starts_with(&format!("{n}:")) || f.contains(&format!("'{n}'")) || f.contains(&format!("/{n}'")))
}

/// Each codec whose stream carries checksums, and the command that compresses with it.
const CODECS: [(&str, &[&str]); 5] = [
    ("gzip", &["gzip", "-c", "-1"]),
    ("zstd", &["zstd", "-c", "-q", "-1"]),
    ("lz4", &["lz4", "-c", "-q"]),
    ("xz", &["xz", "-c", "-0"]),
    ("bzip2", &["bzip2", "-c", "-1"]),
];

/// One bit flipped inside member `a`'s compressed bytes, or the stream cut inside `b`'s: no
/// member whose bytes a failed (or never reached) checksum covers keeps a name, whatever the
/// codec. `a` is not left corrupted under its name (what `tar -x` leaves), and each removed
/// member is listed under its own name, not the one the parser happened to be reading.
#[test]
fn a_member_is_named_only_after_the_checksums_covering_it_pass() {
    let a = rnd(11, 200_000);
    let b = rnd(12, 3 << 20);
    let tar = TarBuf::default().file("a", &a).file("b", &b).file("c", b"c").end();
    for (name, cmd) in CODECS {
        let z = compress_with(cmd, &tar);
        // Intact, everything comes out.
        let c = case();
        let r = c.run(z.clone());
        assert!(r.is_ok(), "{name}: {:?} {:?}", r.fatal, r.failures);
        assert_eq!(c.dest_listing(), vec!["a", "b", "c"], "{name}");
        for threads in [1, 4] {
            // A bit of `a`'s data (random data compresses to itself, at about the same place).
            let mut bad = z.clone();
            let at = (512 + 100_000).min(bad.len() / 20);
            bad[at] ^= 0x10;
            let c = case();
            let r = c.run_with(bad, |o| o.decompress_threads = threads);
            let what = format!("{name} flipped, {threads} threads");
            assert!(r.fatal.is_some(), "{what}: the damage went unnoticed");
            assert!(!c.dest.join("a").exists(), "{what}: the damaged member kept its name");
            // Listed as removed; or, where the damage showed before `a` was whole, the member
            // being written when it did, removed with it; or no member was reached (a bzip2
            // block gives nothing before its check).
            let fatal = r.fatal.clone().unwrap_or_default();
            assert!(names(&r.failures, "a") || fatal.contains("entry \"a\"") || r.entries == 0, "{what}: a is not named among {:?} nor in {fatal}", r.failures);
            // What stays is whole.
            for (n, want) in [("b", &b[..]), ("c", &b"c"[..])] {
                if c.dest.join(n).exists() {
                    assert!(fs::read(c.dest.join(n)).unwrap() == want, "{what}: {n} is not whole");
                }
            }
            // Cut inside `b`: `a`, before the cut but under the same checksum, goes too.
            let c = case();
            let r = c.run_with(z[..z.len() * 2 / 3].to_vec(), |o| o.decompress_threads = threads);
            let what = format!("{name} cut, {threads} threads");
            assert!(r.fatal.is_some(), "{what}");
            assert!(c.dest_listing().is_empty(), "{what}: {:?} named though its checksum never came", c.dest_listing());
        }
    }
    // Independent frames (as `cacheless pack` and pzstd write them): a frame whose checksum
    // fails takes its members with it, the frames before it stay.
    let split = 512 + a.len().div_ceil(512) * 512;
    let first = compress_with(&["zstd", "-c", "-q", "-1"], &tar[..split]);
    let second = compress_with(&["zstd", "-c", "-q", "-1"], &tar[split..]);
    for threads in [1, 4] {
        let mut z = first.clone();
        let mut s2 = second.clone();
        let at = s2.len() / 2;
        s2[at] ^= 0x10;
        z.extend_from_slice(&s2);
        let c = case();
        let r = c.run_with(z, |o| o.decompress_threads = threads);
        assert!(r.fatal.is_some(), "{threads} threads");
        assert_eq!(c.dest_listing(), vec!["a"], "{threads} threads: {:?}", r.failures);
        assert!(fs::read(c.dest.join("a")).unwrap() == a);
        let fatal = r.fatal.clone().unwrap_or_default();
        assert!(names(&r.failures, "b") || fatal.contains("entry \"b\""), "{:?} {fatal}", r.failures);
    }
}

/// An archive file read a second time ahead of the extraction, to check its one checksum
/// early (every file parked, so the verifier is considered at the first): intact, every member
/// comes out whole and the report says the verifier vouched for the archive (where a second
/// decoding costs less than the renames it spares); with a bit flipped or the stream cut, the
/// verifier fails, the hold goes on, and no member whose bytes the failed (or never reached)
/// checksum covers keeps a name, whatever the codec and however many threads decode it.
#[test]
fn a_checksum_verified_ahead_names_files_early_only_when_it_passes() {
    let mut t = TarBuf::default();
    let files: Vec<(String, Vec<u8>)> = (0..2000usize).map(|i| (format!("d{}/f{i}", i % 3), rnd(100 + i as u64, (i * 37) % 300))).collect();
    for (n, d) in &files {
        t.file(n, d);
    }
    // Past what the decoder reads ahead of the parser (with the budget below), so that the
    // files wait for the end. Small files, about 1,000 per MiB of tar stream: the verifier is
    // worth its cost for every codec but bzip2 (whose decoding costs more than 1,000 renames
    // per MiB), where the hold goes on alone.
    t.file("big", &vec![0u8; 24 << 20]);
    let tar = t.end();
    for (name, cmd) in CODECS {
        let z = compress_with(cmd, &tar);
        // zstd is decoded by its frames' workers where more than one thread is asked.
        let threads_tried: &[usize] = if name == "zstd" { &[1, 4] } else { &[1] };
        for &threads in threads_tried {
            let from_file = |bytes: &[u8], what: &str| {
                let c = case();
                let archive = c.base.join("a.tar.x");
                fs::write(&archive, bytes).unwrap();
                let mut o = ExtractOptions::new(&c.dest);
                o.held_open = Some(0);
                // Files wait for the stream's end (its one checksum) only where a batch of them
                // is synced before the decoder gets there, however long a syncfs takes on a busy
                // filesystem: one worker, which syncs each batch of 32 KiB itself before it takes
                // the next file, so that the parser, its queue full, stops within a few hundred
                // files of the first batch, and the decoder (after a small budget's worth of
                // data, and its channel) far from the end.
                o.threads = 1;
                o.durability = cacheless::Durability::NamedAfterSync { write_back: Some(32 << 10) };
                o.io.budget = cacheless::Budget::new(8 << 20);
                o.decompress_threads = threads;
                let r = extract(Input::Path(archive.clone()), &o).unwrap();
                assert_eq!(fs::read(&archive).unwrap(), bytes, "{what}: the archive is never changed");
                (c, r)
            };
            let what = format!("{name}, {threads} threads");
            let (c, r) = from_file(&z, &what);
            assert!(r.is_ok(), "{what}: {:?} {:?}", r.fatal, r.failures);
            assert!(r.naming.contains("under temporary names"), "{what}: no file waited for the checksum: {}", r.naming);
            if name == "bzip2" {
                assert!(!r.naming.contains("verified ahead"), "{what}: {}", r.naming);
            } else {
                assert!(r.naming.contains("verified the whole archive"), "{what}: {}", r.naming);
            }
            for (n, d) in &files {
                assert!(fs::read(c.dest.join(n)).unwrap() == *d, "{what}: {n}");
            }
            assert!(fs::read(c.dest.join("big")).unwrap().iter().all(|&b| b == 0), "{what}: big");
            assert_eq!(c.dest_listing().len(), files.len() + 4, "{what}");
            // A bit flipped in the middle: the verifier fails, nothing under its checksum stays.
            let mut bad = z.clone();
            let at = bad.len() / 2;
            bad[at] ^= 0x10;
            let (c, r) = from_file(&bad, &what);
            assert!(r.fatal.is_some(), "{what} flipped: the damage went unnoticed");
            assert!(!r.naming.contains("verified the whole archive"), "{what} flipped: {}", r.naming);
            let named: Vec<String> = c.dest_listing().into_iter().filter(|p| !["d0", "d1", "d2"].contains(&p.as_str())).collect();
            assert!(named.is_empty(), "{what} flipped: {named:?} named though their checksum failed");
            // Cut: nothing named either.
            let (c, r) = from_file(&z[..z.len() * 2 / 3], &what);
            assert!(r.fatal.is_some(), "{what} cut");
            let named: Vec<String> = c.dest_listing().into_iter().filter(|p| !["d0", "d1", "d2"].contains(&p.as_str())).collect();
            assert!(named.is_empty(), "{what} cut: {named:?} named though their checksum never came");
        }
    }
}

/// A zstd archive of two frames decoded frame by frame: each frame is checked as it ends, so
/// the archive is never read a second time, and every member comes out whole.
#[test]
fn frames_checked_as_they_end_are_not_read_twice() {
    let mut t = TarBuf::default();
    for i in 0..2000usize {
        t.file(&format!("d{}/f{i}", i % 3), &rnd(300 + i as u64, (i * 37) % 300));
    }
    t.file("big", &vec![0u8; 24 << 20]);
    let tar = t.end();
    let split = tar.len() / 2 / 512 * 512;
    let mut z = compress_with(&["zstd", "-c", "-q", "-1"], &tar[..split]);
    z.extend(compress_with(&["zstd", "-c", "-q", "-1"], &tar[split..]));
    let c = case();
    let archive = c.base.join("a.tar.zst");
    fs::write(&archive, &z).unwrap();
    let mut o = ExtractOptions::new(&c.dest);
    o.held_open = Some(0);
    o.io.budget = cacheless::Budget::new(8 << 20);
    o.decompress_threads = 4;
    let r = extract(Input::Path(archive), &o).unwrap();
    assert!(r.is_ok(), "{:?} {:?}", r.fatal, r.failures);
    assert!(!r.naming.contains("second read"), "{}", r.naming);
    let gnu = c.base.join("gnu");
    fs::create_dir(&gnu).unwrap();
    fs::write(c.base.join("a.tar"), &tar).unwrap();
    assert!(std::process::Command::new("tar").arg("-xf").arg(c.base.join("a.tar")).arg("-C").arg(&gnu).status().unwrap().success());
    // The same files, byte for byte (the folders the archive does not hold get their own times).
    let diff = std::process::Command::new("diff").arg("-r").arg(&gnu).arg(&c.dest).output().unwrap();
    assert!(diff.status.success(), "{}", String::from_utf8_lossy(&diff.stdout));
}

/// A hard link to a member, or a later member of the same name, needs the earlier file's name
/// before the archive's checksums reach it: it is named then (no wait on a check that only
/// reading further can bring), and, should the check then fail, removed with the rest.
#[test]
fn members_that_need_an_unverified_name_get_it_and_lose_it_if_the_check_fails() {
    let a = rnd(21, 50_000);
    let tar = TarBuf::default().file("a", &a).hardlink("l", "a").file("a", b"second").file("tail", &rnd(22, 2 << 20)).end();
    let z = compress_with(&["gzip", "-c", "-1"], &tar);
    let c = case();
    let r = c.run(z.clone());
    assert!(r.is_ok(), "{:?} {:?}", r.fatal, r.failures);
    assert_eq!(c.dest_listing(), vec!["a", "l", "tail"]);
    assert_eq!(fs::read(c.dest.join("a")).unwrap(), b"second");
    assert!(fs::read(c.dest.join("l")).unwrap() == a);
    // The same archive with its last bytes (the gzip trailer: CRC and size) damaged.
    let (c, r) = with_bad_crc(z);
    assert!(c.dest_listing().is_empty(), "{:?} stayed: {:?}", c.dest_listing(), r.failures);
}

/// Extracts the gzip archive `z` with its trailer's CRC damaged: a fatal error, for sure.
fn with_bad_crc(mut z: Vec<u8>) -> (Case, ExtractReport) {
    let n = z.len();
    z[n - 6] ^= 0xff;
    let c = case();
    let r = c.run(z);
    assert!(r.fatal.is_some());
    (c, r)
}

/// Many files held at once (one gzip member of 600 small files): past the few held open, they
/// wait parked under temporary names, their descriptors closed; all are named once the CRC
/// passes, or all removed when it fails, and no temporary is left either way.
#[test]
fn many_held_files_are_parked_and_all_named_or_all_removed() {
    let mut t = TarBuf::default();
    t.dir("d");
    for i in 0..600usize {
        t.file(&format!("d/f{i:03}"), &rnd(i as u64, 100 + i));
    }
    let tar = t.end();
    let z = compress_with(&["gzip", "-c", "-1"], &tar);
    let c = case();
    let r = c.run(z.clone());
    assert!(r.is_ok(), "{:?} {:?}", r.fatal, r.failures.first());
    let names: Vec<String> = fs::read_dir(c.dest.join("d")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names.len(), 600, "{:?}", names.iter().filter(|n| n.starts_with('.')).collect::<Vec<_>>());
    for i in 0..600usize {
        assert!(fs::read(c.dest.join(format!("d/f{i:03}"))).unwrap() == rnd(i as u64, 100 + i));
    }
    let (c, r) = with_bad_crc(z);
    assert_eq!(fs::read_dir(c.dest.join("d")).unwrap().count(), 0, "files or temporaries left");
    assert_eq!(r.failure_count, 600, "{:?}", r.failures.first());
}
