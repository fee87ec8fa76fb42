//! Shared helpers: tree generation, GNU tar invocation, tree comparison, a tiny tar header builder.
#![allow(dead_code)] // Each test crate uses its own subset.
#![allow(clippy::unwrap_used)] // A failed step in a test is a failed test.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use cacheless::Mode;
use cacheless_archive::{extract, ExtractOptions, ExtractReport, Input};
pub use cacheless_testkit::{require, scratch};

/// Mounts a tmpfs with `options` (such as `size=2m`) on `dir`: `Err` says why not (it needs root).
pub fn mount_tmpfs(dir: &Path, options: &str) -> Result<(), String> {
    cacheless_testkit::root()?;
    let out = Command::new("mount").args(["-t", "tmpfs", "-o", options, "tmpfs"]).arg(dir).output().map_err(|e| format!("mount: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("cannot mount a tmpfs: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Unmounts its folder when dropped (after [`mount_tmpfs`]).
pub struct Umount(pub PathBuf);

impl Drop for Umount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Runs a command, panicking with its stderr on failure.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `n` deterministic pseudo-random bytes from `seed`.
pub fn rnd(seed: u64, n: usize) -> Vec<u8> {
    // xorshift: deterministic, fast, no dependency on rand's API.
    let mut x = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    let mut v = Vec::with_capacity(n + 8);
    while v.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(n);
    v
}

fn set_mtime(p: &Path, secs: i64, nsec: i64, follow: bool) {
    use rustix::fs::{AtFlags, Timespec, Timestamps, CWD};
    let t = Timestamps { last_access: Timespec { tv_sec: secs, tv_nsec: nsec }, last_modification: Timespec { tv_sec: secs, tv_nsec: nsec } };
    let fl = if follow { AtFlags::empty() } else { AtFlags::SYMLINK_NOFOLLOW };
    rustix::fs::utimensat(CWD, p, &t, fl).unwrap();
}

/// What a generated tree contains.
pub struct TreeSpec {
    /// Names longer than 100 bytes and paths longer than 255 (not for ustar/v7).
    pub long_names: bool,
    /// A 9 GiB sparse file (not for ustar/v7).
    pub huge_sparse: bool,
    /// Unicode names.
    pub unicode: bool,
}

/// Builds a test tree under `root`: every size class, dirs, symlinks, hardlinks, modes, mtimes.
pub fn make_tree(root: &Path, spec: &TreeSpec) {
    fs::create_dir_all(root).unwrap();
    let sizes: &[usize] = &[0, 1, 100, 511, 512, 513, 4095, 4096, 4097, 65536, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) + 4096, 9 * (1 << 20) + 7];
    let d = root.join("files");
    fs::create_dir_all(&d).unwrap();
    for (i, &s) in sizes.iter().enumerate() {
        let p = d.join(format!("f{i:02}_{s}"));
        fs::write(&p, rnd(i as u64 + 1, s)).unwrap();
    }
    // Half-zero file (compressible) and all-zero file.
    let mut z = vec![0u8; 300_000];
    z[..1000].copy_from_slice(&rnd(99, 1000));
    fs::write(d.join("halfzero"), &z).unwrap();
    // Modes.
    let m = root.join("modes");
    fs::create_dir_all(&m).unwrap();
    for (i, mode) in [0o600u32, 0o644, 0o755, 0o444, 0o700, 0o640, 0o1777].iter().enumerate() {
        let p = m.join(format!("m{mode:o}"));
        fs::write(&p, format!("mode {i}")).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(*mode)).unwrap();
    }
    let ro = m.join("rodir");
    fs::create_dir_all(&ro).unwrap();
    fs::write(ro.join("inside"), "x").unwrap();
    // Empty dirs, nested.
    fs::create_dir_all(root.join("empty/a/b/c")).unwrap();
    fs::create_dir_all(root.join("empty2")).unwrap();
    // Symlinks: relative, absolute, dangling, to dir.
    let l = root.join("links");
    fs::create_dir_all(&l).unwrap();
    std::os::unix::fs::symlink("../files/f01_1", l.join("rel")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", l.join("abs")).unwrap();
    std::os::unix::fs::symlink("nowhere/at/all", l.join("dangling")).unwrap();
    std::os::unix::fs::symlink("../empty", l.join("todir")).unwrap();
    // Hardlinks.
    fs::write(l.join("h1"), rnd(7, 5000)).unwrap();
    fs::hard_link(l.join("h1"), l.join("h2")).unwrap();
    fs::hard_link(l.join("h1"), root.join("files/h3")).unwrap();
    if spec.unicode {
        let u = root.join("ünïcødé_名前");
        fs::create_dir_all(&u).unwrap();
        fs::write(u.join("файл.txt"), "привет").unwrap();
        fs::write(u.join("emoji_🦀.bin"), rnd(3, 777)).unwrap();
    }
    if spec.long_names {
        let mut p = root.join("long");
        for i in 0..6 {
            p = p.join(format!("directory_component_number_{i}_{}", "x".repeat(30)));
        }
        fs::create_dir_all(&p).unwrap();
        fs::write(p.join(format!("file_{}", "y".repeat(150))), rnd(5, 1234)).unwrap();
        std::os::unix::fs::symlink("t".repeat(200), p.join("longlink")).unwrap();
        fs::hard_link(p.join(format!("file_{}", "y".repeat(150))), root.join("long/hardlink_to_long")).unwrap();
    }
    if spec.huge_sparse {
        let s = root.join("sparse");
        fs::create_dir_all(&s).unwrap();
        let mut f = fs::File::create(s.join("huge")).unwrap();
        f.set_len(9 << 30).unwrap();
        for (k, off) in [0u64, 5 << 20, 4 << 30, (9 << 30) - 10000].iter().enumerate() {
            f.seek(SeekFrom::Start(*off)).unwrap();
            f.write_all(&rnd(k as u64 + 50, 9000)).unwrap();
        }
        let mut f = fs::File::create(s.join("small")).unwrap();
        f.set_len(1 << 20).unwrap();
        f.seek(SeekFrom::Start(300_000)).unwrap();
        f.write_all(&rnd(77, 10)).unwrap();
        drop(f);
        fs::File::create(s.join("allhole")).unwrap().set_len(10 << 20).unwrap();
    }
    // mtimes: fixed, with fractions, pre-1970 excluded (v7/ustar cannot hold them).
    let mut all = Vec::new();
    walk(root, &mut all);
    for (i, p) in (0i64..).zip(&all) {
        let md = fs::symlink_metadata(p).unwrap();
        set_mtime(p, 1_600_000_000 + i * 3677, 123_456_789, !md.file_type().is_symlink());
    }
    set_mtime(root, 1_500_000_000, 0, true);
    fs::set_permissions(&ro, fs::Permissions::from_mode(0o555)).unwrap();
    set_mtime(&ro, 1_400_000_000, 5, true);
}

fn walk(p: &Path, out: &mut Vec<PathBuf>) {
    let mut ents: Vec<_> = fs::read_dir(p).unwrap().map(|e| e.unwrap().path()).collect();
    ents.sort();
    for e in ents {
        let md = fs::symlink_metadata(&e).unwrap();
        if md.is_dir() {
            walk(&e, out);
        }
        out.push(e);
    }
}

/// Creates an archive of `src` with GNU tar (`-C src .`).
pub fn gnu_tar_create(src: &Path, archive: &Path, format: &str, compress: Option<&str>, extra: &[&str]) {
    let mut c = Command::new("tar");
    c.arg(format!("--format={format}")).arg("-S");
    if let Some(z) = compress {
        c.arg("-I").arg(z);
    }
    c.args(extra).arg("-cf").arg(archive).arg("-C").arg(src).arg(".");
    run(&mut c);
}

/// Extracts with GNU tar (as this user; no owners).
pub fn gnu_tar_extract(archive: &Path, dest: &Path) {
    fs::create_dir_all(dest).unwrap();
    let mut c = Command::new("tar");
    c.arg("--no-same-owner");
    // GNU tar 1.34 does not recognise lz4 by its magic.
    if archive.extension().is_some_and(|e| e == "lz4") {
        c.arg("-I").arg("lz4");
    }
    c.arg("-xf").arg(archive).arg("-C").arg(dest);
    run(&mut c);
}

/// Extracts with ours.
/// `None` when the filesystem refuses a forced mode (skipped unless CACHELESS_REQUIRE names it).
#[track_caller]
pub fn ours(archive: &Path, dest: &Path, mode: Mode, walk: bool) -> Option<ExtractReport> {
    let mut o = ExtractOptions::new(dest);
    o.io.mode = mode;
    o.force_walk = walk;
    o.durability = cacheless::Durability::Off { write_back: Some(cacheless_archive::DEFAULT_WRITE_BACK) };
    o.threads = 4;
    let r = match extract(Input::Path(archive.to_path_buf()), &o) {
        Ok(r) => r,
        Err(why) if why.is_unsupported() => {
            let feature = if mode == Mode::Direct { "direct" } else { "dontcache" };
            assert!(
                matches!(why.hint(), Some(cacheless::Hint::Modes(m)) if m.first() == Some(&Mode::Auto)),
                "a refused mode says which to ask for instead: {why} {:?}",
                why.hint()
            );
            require(feature, Err(why.to_string()));
            return None;
        }
        Err(e) => panic!("{archive:?}: {e}"),
    };
    assert!(r.is_ok(), "{archive:?}: fatal {:?}, failures {:?}", r.fatal, r.failures);
    Some(r)
}

#[derive(Debug, PartialEq)]
struct Node {
    kind: char,
    mode: u32,
    mtime: (i64, i64),
    size: u64,
    link: Option<PathBuf>,
    content: Option<Vec<u8>>, // hash-free: small trees
    ino_group: Option<usize>,
}

/// Data segments (offset, bytes) of a file found with SEEK_DATA/SEEK_HOLE.
pub fn data_segments(p: &Path) -> Vec<(u64, Vec<u8>)> {
    use rustix::fs::{seek, SeekFrom as S};
    let f = fs::File::open(p).unwrap();
    let len = f.metadata().unwrap().len();
    let mut out = Vec::new();
    let mut off = 0u64;
    while off < len {
        let d = match seek(&f, S::Data(off)) {
            Ok(d) => d,
            Err(rustix::io::Errno::NXIO) => break,
            Err(e) => panic!("{e}"),
        };
        let h = seek(&f, S::Hole(d)).unwrap();
        let mut b = vec![0u8; usize::try_from(h - d).unwrap()];
        rustix::io::pread(&f, &mut b, d).unwrap();
        out.push((d, b));
        off = h;
    }
    out
}

fn read_content(p: &Path, size: u64) -> Vec<u8> {
    if size > 64 << 20 {
        // Huge sparse files: compare the non-zero bytes of their data segments, position-exact.
        let mut v = Vec::new();
        for (o, b) in data_segments(p) {
            for (i, byte) in b.iter().enumerate() {
                if *byte != 0 {
                    v.extend_from_slice(&(o + i as u64).to_le_bytes());
                    v.push(*byte);
                }
            }
        }
        v
    } else {
        let mut v = Vec::new();
        fs::File::open(p).unwrap().read_to_end(&mut v).unwrap();
        v
    }
}

fn snapshot(root: &Path) -> BTreeMap<PathBuf, Node> {
    let mut all = Vec::new();
    walk(root, &mut all);
    let mut inos: HashMap<u64, usize> = HashMap::new();
    let mut m = BTreeMap::new();
    for p in all {
        let md = fs::symlink_metadata(&p).unwrap();
        let ft = md.file_type();
        let kind = if ft.is_dir() {
            'd'
        } else if ft.is_symlink() {
            'l'
        } else if ft.is_file() {
            'f'
        } else {
            '?'
        };
        let ino_group = if kind == 'f' && md.nlink() > 1 {
            let n = inos.len();
            Some(*inos.entry(md.ino()).or_insert(n))
        } else {
            None
        };
        m.insert(
            p.strip_prefix(root).unwrap().to_path_buf(),
            Node {
                kind,
                mode: if kind == 'l' { 0 } else { md.mode() & 0o7777 },
                mtime: (md.mtime(), md.mtime_nsec()),
                size: if kind == 'd' { 0 } else { md.size() },
                link: if kind == 'l' { Some(fs::read_link(&p).unwrap()) } else { None },
                content: if kind == 'f' { Some(read_content(&p, md.size())) } else { None },
                ino_group,
            },
        );
    }
    m
}

/// Asserts two extracted trees are equal: content, type, mode, mtime, link target, hardlink groups.
pub fn assert_same_tree(a: &Path, b: &Path, what: &str) {
    let sa = snapshot(a);
    let sb = snapshot(b);
    let ka: Vec<_> = sa.keys().collect();
    let kb: Vec<_> = sb.keys().collect();
    assert_eq!(ka, kb, "{what}: different entries");
    for (k, na) in &sa {
        let nb = &sb[k];
        if na != nb {
            let mut na2 = format!("{:?}", Node { content: None, ..clone_node(na) });
            let nb2 = format!("{:?}", Node { content: None, ..clone_node(nb) });
            if na.content != nb.content {
                na2.push_str(" (content differs)");
            }
            panic!("{what}: {k:?} differs:\n ours {na2}\n gnu  {nb2}");
        }
    }
    // The root's own mode and mtime ("./" entry).
    let (ma, mb) = (fs::metadata(a).unwrap(), fs::metadata(b).unwrap());
    assert_eq!(ma.mode(), mb.mode(), "{what}: root dir mode");
    // Its mtime comes from the archive only when it has a "./" entry; else both are "now".
    let now = i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()).unwrap();
    if ma.mtime() < now - 60 || mb.mtime() < now - 60 {
        assert_eq!(ma.mtime(), mb.mtime(), "{what}: root dir mtime");
    }
}

fn clone_node(n: &Node) -> Node {
    Node { kind: n.kind, mode: n.mode, mtime: n.mtime, size: n.size, link: n.link.clone(), content: None, ino_group: n.ino_group }
}

/// Allocated bytes of a file (to check sparse files stayed sparse).
pub fn allocated(p: &Path) -> u64 {
    fs::metadata(p).unwrap().blocks() * 512
}

// ---------------------------------------------------------------------------------------------
// A tiny tar writer for hostile archives: every field set by hand.

/// One 512-byte header with the given fields; `size_field` raw (12 bytes) to allow hostile values.
pub fn header(name: &[u8], typeflag: u8, size_field: &[u8; 12], link: &[u8], mode: u32) -> [u8; 512] {
    let mut h = [0u8; 512];
    h[..name.len().min(100)].copy_from_slice(&name[..name.len().min(100)]);
    h[100..108].copy_from_slice(format!("{mode:07o}\0").as_bytes());
    h[108..116].copy_from_slice(b"0000000\0");
    h[116..124].copy_from_slice(b"0000000\0");
    h[124..136].copy_from_slice(size_field);
    h[136..148].copy_from_slice(b"14000000000\0");
    h[156] = typeflag;
    h[157..157 + link.len().min(100)].copy_from_slice(&link[..link.len().min(100)]);
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    fix_checksum(&mut h);
    h
}

/// Recomputes the checksum field.
pub fn fix_checksum(h: &mut [u8; 512]) {
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
}

/// Octal size field.
pub fn size_field(n: u64) -> [u8; 12] {
    let mut f = [0u8; 12];
    f.copy_from_slice(format!("{n:011o}\0").as_bytes());
    f
}

/// Archive builder.
#[derive(Default)]
pub struct TarBuf(pub Vec<u8>);

impl TarBuf {
    /// A regular file with content.
    pub fn file(&mut self, name: &str, data: &[u8]) -> &mut Self {
        self.raw(header(name.as_bytes(), b'0', &size_field(data.len() as u64), b"", 0o644), data)
    }
    /// A symlink.
    pub fn symlink(&mut self, name: &str, target: &str) -> &mut Self {
        self.raw(header(name.as_bytes(), b'2', &size_field(0), target.as_bytes(), 0o777), &[])
    }
    /// A hard link.
    pub fn hardlink(&mut self, name: &str, target: &str) -> &mut Self {
        self.raw(header(name.as_bytes(), b'1', &size_field(0), target.as_bytes(), 0o644), &[])
    }
    /// A directory.
    pub fn dir(&mut self, name: &str) -> &mut Self {
        self.raw(header(name.as_bytes(), b'5', &size_field(0), b"", 0o755), &[])
    }
    /// A pax extended header with the given records.
    pub fn pax(&mut self, records: &[(&str, &str)]) -> &mut Self {
        let mut d = Vec::new();
        for (k, v) in records {
            let body = format!(" {k}={v}\n");
            let mut len = body.len() + 1;
            while format!("{len}{body}").len() != len {
                len += 1;
            }
            d.extend_from_slice(format!("{len}{body}").as_bytes());
        }
        let h = header(b"././@PaxHeader", b'x', &size_field(d.len() as u64), b"", 0o644);
        self.raw(h, &d)
    }
    /// A header followed by data, padded.
    pub fn raw(&mut self, h: [u8; 512], data: &[u8]) -> &mut Self {
        self.0.extend_from_slice(&h);
        self.0.extend_from_slice(data);
        let pad = (512 - data.len() % 512) % 512;
        self.0.resize(self.0.len() + pad, 0);
        self
    }
    /// End-of-archive blocks.
    pub fn end(&mut self) -> Vec<u8> {
        self.0.extend_from_slice(&[0u8; 1024]);
        std::mem::take(&mut self.0)
    }
}
