//! `cacheless cp` end to end: archive mode against GNU `cp -a` (on the scratch filesystem and
//! on xfs and btrfs loop images), reflinks and their fallback, holes, `--verify` with a fault
//! injected between write and verification, `--bwlimit` checked from our own progress counters,
//! and `-u`/`-n` resuming a tree copy.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cacheless_testkit::tree::paths;
use cacheless_testkit::{require, root, scratch, skip};
use rand::{RngCore, SeedableRng};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn cacheless(args: &[&str]) -> Output {
    cacheless_testkit::cacheless().args(args).output().expect("run cacheless")
}

fn ok(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "exit {:?}: {}", out.status.code(), String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

fn set_mtime(p: &Path, secs: i64, nsec: i64, follow: bool) {
    let ts = rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec { tv_sec: secs - 100, tv_nsec: nsec },
        last_modification: rustix::fs::Timespec { tv_sec: secs, tv_nsec: nsec },
    };
    let flags = if follow { rustix::fs::AtFlags::empty() } else { rustix::fs::AtFlags::SYMLINK_NOFOLLOW };
    rustix::fs::utimensat(rustix::fs::CWD, p, &ts, flags).unwrap();
}

/// Sets `user.<name>` on `p`; false where the filesystem has no user xattrs.
fn set_xattr(p: &Path, name: &str, value: &[u8]) -> bool {
    match rustix::fs::lsetxattr(p, format!("user.{name}").as_str(), value, rustix::fs::XattrFlags::empty()) {
        Ok(()) => true,
        Err(rustix::io::Errno::OPNOTSUPP) => false,
        Err(e) => panic!("setxattr {}: {e}", p.display()),
    }
}

fn xattrs(p: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut list = vec![0u8; 64 << 10];
    let n = match rustix::fs::llistxattr(p, &mut list) {
        Ok(n) => n,
        Err(rustix::io::Errno::OPNOTSUPP) => return BTreeMap::new(),
        Err(e) => panic!("listxattr {}: {e}", p.display()),
    };
    let mut m = BTreeMap::new();
    for name in list[..n].split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let name = String::from_utf8_lossy(name).to_string();
        if name.starts_with("security.") {
            continue; // Labels the system sets on every new file.
        }
        let mut v = vec![0u8; 64 << 10];
        let k = rustix::fs::lgetxattr(p, name.as_str(), &mut v).unwrap();
        v.truncate(k);
        m.insert(name, v);
    }
    m
}

/// Builds the test tree under `root`: odd sizes (small files through the creator, a large one
/// streamed), modes, a read-only directory, symlinks (dangling too), hard links, a sparse file,
/// an empty file, xattrs and an ACL where the filesystem has them, another owner when root,
/// and distinct nanosecond times everywhere. Returns whether xattrs could be set.
fn make_tree(root: &Path, many: usize) -> bool {
    let d = root.join("d");
    std::fs::create_dir_all(d.join("sub")).unwrap();
    std::fs::create_dir_all(d.join("many")).unwrap();
    for (i, (len, mode)) in
        [(0usize, 0o644), (1, 0o600), (4095, 0o755), (4096, 0o640), (65537, 0o644), ((1 << 20) + 3, 0o600), ((3 << 20) + 5, 0o644)].iter().enumerate()
    {
        let p = root.join(format!("f{i}"));
        std::fs::write(&p, random_bytes(*len, i as u64)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode)).unwrap();
    }
    for i in 0..many {
        std::fs::write(d.join("many").join(format!("m{i:05}")), random_bytes(1024 + (i * 7919) % (63 << 10), 1000 + i as u64)).unwrap();
    }
    std::fs::write(d.join("sub").join("inner"), b"inner").unwrap();
    // Hard links within the tree.
    std::fs::write(root.join("hl1"), random_bytes(10_000, 77)).unwrap();
    std::fs::hard_link(root.join("hl1"), d.join("hl2")).unwrap();
    std::fs::hard_link(root.join("hl1"), d.join("sub").join("hl3")).unwrap();
    // Symlinks: relative, dangling, to a directory.
    std::os::unix::fs::symlink("f1", root.join("link")).unwrap();
    std::os::unix::fs::symlink("nowhere", root.join("dangle")).unwrap();
    std::os::unix::fs::symlink("d/sub", root.join("dlink")).unwrap();
    // A sparse file: data, a hole, data, a hole to the end.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::create(root.join("sparse")).unwrap();
        f.write_all_at(&random_bytes(64 << 10, 5), 0).unwrap();
        f.write_all_at(&random_bytes(64 << 10, 6), 4 << 20).unwrap();
        f.set_len(8 << 20).unwrap();
    }
    let has_xattrs = set_xattr(&root.join("f2"), "color", b"blue") && set_xattr(&d, "dircolor", b"green");
    if has_xattrs && Command::new("setfacl").arg("--version").output().is_ok() {
        let acl = |args: &[&str]| assert!(Command::new("setfacl").args(args).status().unwrap().success(), "setfacl {args:?}");
        acl(&["-m", "u:1234:r", s(&root.join("f3"))]);
        acl(&["-d", "-m", "u:1234:rx", s(&d.join("many"))]);
    }
    if rustix::process::geteuid().is_root() {
        let own = |p: &Path, u, g| {
            rustix::fs::chownat(
                rustix::fs::CWD,
                p,
                Some(rustix::fs::Uid::from_raw(u)),
                Some(rustix::fs::Gid::from_raw(g)),
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
            )
            .unwrap();
        };
        own(&root.join("f4"), 1234, 5678);
        own(&d.join("sub"), 4321, 8765);
        own(&root.join("link"), 1234, 1234);
    }
    // Times last, deepest first; the read-only directory after its contents.
    let mut n = 0;
    let mut all: Vec<PathBuf> = paths(root).into_iter().map(|r| root.join(r)).collect();
    all.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in all {
        n += 1;
        let follow = !std::fs::symlink_metadata(&p).unwrap().file_type().is_symlink();
        set_mtime(&p, 1_600_000_000 + n, 123_456_789 - n, follow);
    }
    std::fs::set_permissions(d.join("sub"), std::fs::Permissions::from_mode(0o555)).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o750)).unwrap();
    set_mtime(&d.join("sub"), 1_500_000_000, 5, true);
    set_mtime(&d, 1_500_000_001, 6, true);
    has_xattrs
}

/// Asserts that `ours` equals `gnu` (GNU cp -a's copy): names, types, contents, modes, owners,
/// nanosecond mtimes (symlinks' too), symlink targets, xattrs and ACLs, allocated blocks of
/// each file (holes), and the hard-link groups.
fn assert_same_as_gnu(gnu: &Path, ours: &Path) {
    let (a, b) = (paths(gnu), paths(ours));
    assert_eq!(a, b, "entries differ");
    let mut groups_a: BTreeMap<u64, BTreeSet<PathBuf>> = BTreeMap::new();
    let mut groups_b: BTreeMap<u64, BTreeSet<PathBuf>> = BTreeMap::new();
    for rel in &a {
        let (pa, pb) = (gnu.join(rel), ours.join(rel));
        let (ma, mb) = (std::fs::symlink_metadata(&pa).unwrap(), std::fs::symlink_metadata(&pb).unwrap());
        let what = rel.display();
        assert_eq!(ma.file_type(), mb.file_type(), "type of {what}");
        assert_eq!(ma.mode(), mb.mode(), "mode of {what}");
        assert_eq!((ma.uid(), ma.gid()), (mb.uid(), mb.gid()), "owner of {what}");
        assert_eq!((ma.mtime(), ma.mtime_nsec()), (mb.mtime(), mb.mtime_nsec()), "mtime of {what}");
        if ma.file_type().is_symlink() {
            assert_eq!(std::fs::read_link(&pa).unwrap(), std::fs::read_link(&pb).unwrap(), "target of {what}");
            continue;
        }
        assert_eq!(xattrs(&pa), xattrs(&pb), "xattrs of {what}");
        if ma.is_file() {
            assert!(std::fs::read(&pa).unwrap() == std::fs::read(&pb).unwrap(), "content of {what}");
            assert_eq!(ma.blocks(), mb.blocks(), "allocated blocks (du) of {what}");
            if ma.nlink() > 1 {
                groups_a.entry(ma.ino()).or_default().insert(rel.clone());
                groups_b.entry(mb.ino()).or_default().insert(rel.clone());
            }
        }
    }
    let sets = |g: BTreeMap<u64, BTreeSet<PathBuf>>| g.into_values().collect::<BTreeSet<_>>();
    assert_eq!(sets(groups_a), sets(groups_b), "hard-link groups");
}

fn no_temp_files(dir: &Path) {
    for r in paths(dir) {
        assert!(!r.to_string_lossy().contains(".cacheless-"), "temporary file left: {}", r.display());
    }
}

/// `cacheless cp -a` and GNU `cp -a` of the same tree under `base`, compared.
fn archive_matches_gnu(base: &Path, many: usize) {
    let src = base.join("src");
    std::fs::create_dir(&src).unwrap();
    let has_xattrs = make_tree(&src, many);
    if !has_xattrs {
        require("xattr", Err(format!("no user xattrs on {}", base.display())));
    }
    let gnu = base.join("gnu");
    let st = Command::new("cp").args(["-a", s(&src), s(&gnu)]).status().unwrap();
    assert!(st.success(), "GNU cp -a failed");
    let ours = base.join("ours");
    let j = ok(&cacheless(&["--json", "cp", "-a", s(&src), s(&ours)]));
    assert_eq!(j["hardlinks"], 2, "{j}");
    assert_same_as_gnu(&gnu, &ours);
    no_temp_files(&ours);
}

#[test]
fn archive_copy_equals_gnu_cp_a() {
    let d = scratch();
    archive_matches_gnu(d.path(), 300);
}

/// Into a folder with a default ACL, which every folder and file made under it inherits: the
/// copy still equals GNU cp -a's (copies of files and folders without an ACL have none), so the
/// inherited ACLs are removed (elsewhere, in folders the copy made without a default ACL, the
/// copy does not look for them).
#[test]
fn archive_copy_into_a_folder_with_a_default_acl_equals_gnu_cp_a() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir(&src).unwrap();
    if !make_tree(&src, 40) || Command::new("setfacl").arg("--version").output().is_err() {
        require("xattr", Err(format!("no user xattrs or no setfacl on {}", d.path().display())));
        return;
    }
    let to = d.path().join("to");
    std::fs::create_dir(&to).unwrap();
    assert!(Command::new("setfacl").args(["-d", "-m", "u:1234:rwx", s(&to)]).status().unwrap().success());
    std::fs::write(to.join("probe"), b"").unwrap();
    assert!(xattrs(&to.join("probe")).contains_key("system.posix_acl_access"), "a new file under {} inherits no ACL", to.display());
    std::fs::remove_file(to.join("probe")).unwrap();
    let (gnu, ours) = (to.join("gnu"), to.join("ours"));
    assert!(Command::new("cp").args(["-a", s(&src), s(&gnu)]).status().unwrap().success(), "GNU cp -a failed");
    ok(&cacheless(&["--json", "cp", "-a", s(&src), s(&ours)]));
    assert_same_as_gnu(&gnu, &ours);
    no_temp_files(&ours);
}

/// As root, into folders that exist already, set-group-ID and of another group (files created
/// there get that group, not the copier's): `SRC/.` copied into one by GNU cp -a and into
/// another by us must give the same owners, modes and everything else. The copy changes a
/// file's owner only where it was not created with the source's (here the files directly in
/// the folder, whose group is the folder's), and learns that per folder it made from the first
/// file created in it: a wrong guess would leave a copy with the wrong group.
#[test]
fn archive_copy_into_a_set_group_id_folder_of_another_group_equals_gnu_cp_a() {
    if !require("root", root()) {
        return;
    }
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir(&src).unwrap();
    if !make_tree(&src, 40) {
        require("xattr", Err(format!("no user xattrs on {}", d.path().display())));
        return;
    }
    let (gnu, ours) = (d.path().join("gnu"), d.path().join("ours"));
    for to in [&gnu, &ours] {
        std::fs::create_dir(to).unwrap();
        rustix::fs::chown(to.as_path(), None, Some(rustix::fs::Gid::from_raw(4242))).unwrap();
        std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o2775)).unwrap();
    }
    std::fs::write(ours.join("probe"), b"").unwrap();
    assert_eq!(std::fs::metadata(ours.join("probe")).unwrap().gid(), 4242, "a new file in a set-group-ID folder does not get its group");
    std::fs::remove_file(ours.join("probe")).unwrap();
    let from = format!("{}/.", s(&src));
    assert!(Command::new("cp").args(["-a", &from, s(&gnu)]).status().unwrap().success(), "GNU cp -a failed");
    ok(&cacheless(&["--json", "cp", "-a", &from, s(&ours)]));
    assert_same_as_gnu(&gnu, &ours);
    no_temp_files(&ours);
}

/// Runs `prog args...` under umask 022 (GNU cp without -p gives new files the source's mode
/// less the umask), failing the test if it fails.
fn under_umask(prog: &Path, args: &[&str]) {
    let out = Command::new("sh").arg("-c").arg("umask 022; exec \"$@\"").arg("sh").arg(prog).args(args).output().unwrap();
    assert!(out.status.success(), "{} {args:?}: exit {:?}: {}", prog.display(), out.status.code(), String::from_utf8_lossy(&out.stderr));
}

/// One entry of a tree: relative name, kind, contents (a symlink's target), mode, mtime.
type Entry = (PathBuf, String, Vec<u8>, u32, Option<(i64, i64)>);

/// Names, kinds, contents, symlink targets and modes (with `times`, nanosecond mtimes) of every
/// entry under `root`, and of `root` itself as "." (its mtime only with `root_time`).
fn tree_state(root: &Path, times: bool, root_time: bool) -> Vec<Entry> {
    let mut v = Vec::new();
    for rel in std::iter::once(PathBuf::from(".")).chain(paths(root)) {
        let p = root.join(&rel);
        let m = std::fs::symlink_metadata(&p).unwrap();
        let ft = m.file_type();
        let (kind, body) = if ft.is_symlink() {
            ("symlink", std::fs::read_link(&p).unwrap().into_os_string().into_encoded_bytes())
        } else if ft.is_dir() {
            ("dir", Vec::new())
        } else {
            ("file", std::fs::read(&p).unwrap())
        };
        let time = (times && (rel != Path::new(".") || root_time)).then(|| (m.mtime(), m.mtime_nsec()));
        v.push((rel, kind.to_string(), body, m.mode(), time));
    }
    v
}

/// `SRC/.` and `SRC/` and `SRC` into an existing and into a missing destination, with -a and
/// with -r: `cacheless cp` makes the tree GNU cp makes (the contents of SRC in DST for `SRC/.`;
/// DST/SRC for the others when DST exists; DST as the copy when it does not), byte-exact.
#[test]
fn trailing_dot_and_slash_on_a_source_copy_as_gnu_cp_does() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir_all(src.join("sub").join("deeper")).unwrap();
    std::fs::write(src.join("a"), random_bytes(5000, 1)).unwrap();
    std::fs::write(src.join("sub").join("b"), random_bytes(70_000, 2)).unwrap();
    std::fs::write(src.join("sub").join("deeper").join("c"), b"c").unwrap();
    std::fs::write(src.join(".hidden"), b"dot file").unwrap();
    std::os::unix::fs::symlink("sub/b", src.join("link")).unwrap();
    std::fs::set_permissions(src.join("a"), std::fs::Permissions::from_mode(0o640)).unwrap();
    std::fs::set_permissions(src.join("sub").join("b"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut n = 0;
    let mut all: Vec<PathBuf> = paths(&src).into_iter().map(|r| src.join(r)).collect();
    all.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in all.iter().chain(std::iter::once(&src)) {
        n += 1;
        set_mtime(p, 1_600_000_000 + n, 987_654_321 - n, !std::fs::symlink_metadata(p).unwrap().file_type().is_symlink());
    }
    std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o750)).unwrap();
    let gnu_cp = Path::new("cp");
    let ours = cacheless_testkit::bin("cacheless");
    for flag in ["-a", "-r"] {
        for (suffix, existing) in [("/.", true), ("/.", false), ("/", true), ("/", false), ("", true), ("", false)] {
            let case = format!("cp {flag} src{suffix} into {} destination", if existing { "an existing" } else { "a missing" });
            let source = format!("{}{suffix}", s(&src));
            let mut states = Vec::new();
            for (who, prog, sub) in [("gnu", gnu_cp, None), ("ours", ours.as_path(), Some("cp"))] {
                let dst = d.path().join(format!("{who}{flag}{}{}", suffix.replace('/', "slash").replace('.', "dot"), existing));
                if existing {
                    std::fs::create_dir(&dst).unwrap();
                    std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o750)).unwrap();
                }
                under_umask(prog, &sub.into_iter().chain([flag, &source, s(&dst)]).collect::<Vec<_>>());
                // An existing destination's own mtime changes with its new entry (at different
                // times for the two copies), unless it takes the source's (-a, `SRC/.`).
                let root_time = !existing || suffix == "/.";
                states.push(tree_state(&dst, flag == "-a", root_time));
                if who == "ours" {
                    no_temp_files(&dst);
                }
            }
            assert!(states[0].len() > 1, "{case}: GNU cp copied nothing");
            assert_eq!(states[0], states[1], "{case}");
        }
    }
}

#[test]
fn reflink_fallback_is_reported_and_always_is_an_error() {
    // FICLONE between two filesystems answers EXDEV: /dev/shm is another one.
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        return skip("no /dev/shm");
    }
    let d = scratch();
    let src = d.path().join("src");
    std::fs::write(&src, random_bytes(300_000, 1)).unwrap();
    let other = tempfile::tempdir_in(shm).unwrap();
    let dst = other.path().join("dst");
    let j = ok(&cacheless(&["--json", "cp", s(&src), s(&dst)]));
    let f = &j["files"][0];
    assert_eq!(f["method"], "copy", "{j}");
    assert!(f["reflink_fallback"].as_str().unwrap().contains("EXDEV"), "{j}");
    assert_eq!(std::fs::read(&dst).unwrap(), std::fs::read(&src).unwrap());
    // --debug says it too.
    let out = cacheless(&["cp", "--debug", s(&src), s(&dst)]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no reflink: FICLONE: EXDEV"), "{}", String::from_utf8_lossy(&out.stderr));
    // --reflink=always: a clear error, nothing written, exit 1.
    let dst2 = other.path().join("dst2");
    let out = cacheless(&["cp", "--reflink=always", s(&src), s(&dst2)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--reflink=always") && err.contains("EXDEV"), "{err}");
    assert!(!dst2.exists());
    no_temp_files(other.path());
    // --reflink=never copies without trying.
    let j = ok(&cacheless(&["--json", "cp", "--reflink=never", s(&src), s(&dst2)]));
    assert!(j["files"][0]["reflink_fallback"].is_null(), "{j}");
}

/// Data extents of a file, from SEEK_DATA/SEEK_HOLE.
fn extents(p: &Path) -> Vec<(u64, u64)> {
    let f = std::fs::File::open(p).unwrap();
    let len = f.metadata().unwrap().len();
    let mut v = Vec::new();
    let mut pos = 0;
    while pos < len {
        let Ok(start) = rustix::fs::seek(&f, rustix::fs::SeekFrom::Data(pos)) else { break };
        let end = rustix::fs::seek(&f, rustix::fs::SeekFrom::Hole(start)).unwrap();
        v.push((start, end));
        pos = end;
    }
    v
}

#[test]
fn holes_stay_holes_and_sparse_never_and_always_do_as_gnu_cp() {
    let d = scratch();
    let src = d.path().join("sparse");
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::create(&src).unwrap();
        f.write_all_at(&random_bytes(1 << 20, 1), 0).unwrap();
        f.write_all_at(&random_bytes((1 << 20) + 5, 2), 16 << 20).unwrap();
        f.set_len(40 << 20).unwrap();
    }
    let gnu = d.path().join("gnu");
    assert!(Command::new("cp").args([s(&src), s(&gnu)]).status().unwrap().success());
    let ours = d.path().join("ours");
    let j = ok(&cacheless(&["--json", "cp", s(&src), s(&ours)]));
    assert_eq!(j["files"][0]["method"], "sparse", "{j}");
    // The data extents, as the filesystem rounds them (to its blocks).
    let data: u64 = extents(&src).iter().map(|(a, b)| b - a).sum();
    assert!(data < 3 << 20);
    assert_eq!(j["files"][0]["data_bytes"], data, "{j}");
    assert!(std::fs::read(&src).unwrap() == std::fs::read(&ours).unwrap());
    assert_eq!(extents(&ours), extents(&src));
    assert_eq!(std::fs::metadata(&ours).unwrap().blocks(), std::fs::metadata(&gnu).unwrap().blocks(), "du differs from GNU cp's copy");
    // never: every byte allocated.
    let dense = d.path().join("dense");
    ok(&cacheless(&["cp", "--sparse=never", s(&src), s(&dense)]));
    assert!(std::fs::metadata(&dense).unwrap().blocks() * 512 >= 40 << 20);
    assert!(std::fs::read(&src).unwrap() == std::fs::read(&dense).unwrap());
    // always: the zeros of a dense file become holes, as with GNU cp --sparse=always.
    let re = d.path().join("resparsed");
    let gnu_re = d.path().join("gnu-resparsed");
    ok(&cacheless(&["cp", "--sparse=always", s(&dense), s(&re)]));
    assert!(Command::new("cp").args(["--sparse=always", s(&dense), s(&gnu_re)]).status().unwrap().success());
    assert!(std::fs::read(&src).unwrap() == std::fs::read(&re).unwrap());
    assert_eq!(std::fs::metadata(&re).unwrap().blocks(), std::fs::metadata(&gnu_re).unwrap().blocks());
}

#[test]
fn verify_passes_and_catches_a_corruption_injected_after_the_write() {
    let d = scratch();
    for (i, len) in [5000usize, 6 << 20].into_iter().enumerate() {
        let src = d.path().join(format!("src{i}"));
        let data = random_bytes(len, i as u64);
        std::fs::write(&src, &data).unwrap();
        let dst = d.path().join(format!("dst{i}"));
        let j = ok(&cacheless(&["--json", "cp", "--verify", "--verify-algo", "blake3", s(&src), s(&dst)]));
        let v = &j["files"][0]["verify"];
        let want = blake3::hash(&data).to_hex().to_string();
        assert_eq!(v["digest"], want.as_str(), "{j}");
        assert!(v["seconds"].as_f64().unwrap() >= 0.0 && j["verify_s"].as_f64().unwrap() >= 0.0, "{j}");
        // A byte flipped on the disk between the write and the verification: an error with
        // both digests, and the old destination left as it was.
        std::fs::write(&dst, b"old").unwrap();
        let out = cacheless_testkit::cacheless().env("CACHELESS_TEST_CORRUPT_VERIFY", "1").args(["cp", "--verify", s(&src), s(&dst)]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("verify") && err.contains("xxh3") && err.contains("the source's was") && err.contains("removed"), "{err}");
        assert_eq!(std::fs::read(&dst).unwrap(), b"old");
        no_temp_files(d.path());
    }
}

/// `cp -a --verify` of many small files reads each copy back after the syncfs of its batch
/// (no fsync of its own), all the batch's read-backs started together: every digest is the
/// source's, the report says how each was read back, and a copy corrupted on the disk before
/// its read-back fails, is never named, and leaves no temporary.
#[test]
fn a_tree_of_small_files_is_verified_in_batches_after_their_syncfs() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    let files: Vec<(String, Vec<u8>)> =
        (0..120).map(|i| (if i % 2 == 0 { format!("f{i}") } else { format!("sub/f{i}") }, random_bytes(1 + i * 211, 300 + i as u64))).collect();
    for (n, data) in &files {
        std::fs::write(src.join(n), data).unwrap();
    }
    let dst = d.path().join("dst");
    let j = ok(&cacheless(&["--json", "cp", "-a", "--verify", "--verify-algo", "blake3", s(&src), s(&dst)]));
    let reports = j["files"].as_array().unwrap();
    assert_eq!(reports.len(), files.len());
    let mut batched = 0;
    for r in reports {
        let rel = Path::new(r["src"].as_str().unwrap()).strip_prefix(&src).unwrap().to_path_buf();
        let data = std::fs::read(src.join(&rel)).unwrap();
        assert_eq!(std::fs::read(dst.join(&rel)).unwrap(), data, "{}", rel.display());
        assert_eq!(r["verify"]["digest"], blake3::hash(&data).to_hex().as_str(), "{r}");
        batched += usize::from(r["verify"]["read"]["reason"].as_str().unwrap().contains("after the syncfs of its batch"));
    }
    assert_eq!(batched, files.len(), "every small copy is read back after its batch's syncfs: {}", reports[0]["verify"]);
    // Each copy corrupted on the disk before its read-back: each fails, none is named.
    let bad = d.path().join("bad");
    let out = cacheless_testkit::cacheless().env("CACHELESS_TEST_CORRUPT_VERIFY", "1").args(["cp", "-a", "--verify", s(&src), s(&bad)]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("the source's was").count(), files.len(), "{err}");
    for (n, _) in &files {
        assert!(!bad.join(n).exists(), "{n}: a copy that failed its verification got its name");
    }
    no_temp_files(&bad);
    no_temp_files(&bad.join("sub"));
}

/// Verified copies on several threads under a budget that holds only a few leases at once:
/// each copy gives its buffers back before its read-back takes new ones, so none waits for
/// ever on another's (the run is killed and the test fails if it does not end).
#[test]
fn verified_copies_on_many_threads_share_a_small_budget_without_waiting_for_ever() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let files: Vec<(String, Vec<u8>)> = (0..8).map(|i| (format!("f{i}"), random_bytes((8 << 20) + i * 4097, 100 + i as u64))).collect();
    for (n, data) in &files {
        std::fs::write(src.join(n), data).unwrap();
    }
    let dst = d.path().join("dst");
    let mut child = cacheless_testkit::cacheless()
        .args(["cp", "-a", "--verify", "--threads", "4", "--memory", "16M", s(&src), s(&dst)])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > std::time::Duration::from_secs(120) {
            child.kill().unwrap();
            panic!("cp -a --verify still running after 120 s: its threads wait on each other's buffers");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(status.success(), "exit {:?}", status.code());
    for (n, data) in &files {
        assert_eq!(&std::fs::read(dst.join(n)).unwrap(), data, "{n}");
    }
    no_temp_files(&dst);
}

#[test]
fn bwlimit_keeps_every_second_within_a_fifth_of_the_limit() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::write(&src, random_bytes(200 << 20, 9)).unwrap();
    let dst = d.path().join("dst");
    let j = ok(&cacheless(&["--json", "cp", "--bwlimit", "50M", s(&src), s(&dst)]));
    assert!(std::fs::read(&src).unwrap() == std::fs::read(&dst).unwrap());
    let samples: Vec<(f64, u64)> = serde_json::from_value(j["progress_samples"].clone()).unwrap();
    let limit = 50.0 * 1024.0 * 1024.0;
    let total = 200u64 << 20;
    // Each full second between samples, while bytes were still moving.
    let mut checked = 0;
    for w in samples.windows(2) {
        let ((t0, b0), (t1, b1)) = (w[0], w[1]);
        if b1 >= total || t1 - t0 < 0.5 {
            break;
        }
        let rate = (b1 - b0) as f64 / (t1 - t0);
        assert!((rate - limit).abs() <= 0.2 * limit, "{:.1} MiB/s in [{t0:.2}, {t1:.2}] s: {samples:?}", rate / 1048576.0);
        checked += 1;
    }
    assert!(checked >= 2, "too few full seconds: {samples:?}");
}

#[test]
fn update_resumes_an_interrupted_tree_copy_without_rewriting_finished_files() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir(&src).unwrap();
    make_tree(&src, 60);
    // Copied into an existing folder, so that each run copies src to the same place.
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let dst = out.join("src");
    ok(&cacheless(&["cp", "-a", s(&src), s(&out)]));
    // What an interrupted copy leaves: some files missing, one cut short.
    let many = dst.join("d").join("many");
    let names: Vec<PathBuf> = paths(&many).into_iter().collect();
    for n in &names[..20] {
        std::fs::remove_file(many.join(n)).unwrap();
    }
    // A file some other tool cut short is newer than its source: GNU's -u goes by time alone
    // and leaves it (cacheless itself never leaves a file cut short under its name).
    std::fs::OpenOptions::new().write(true).open(many.join(&names[20])).unwrap().set_len(10).unwrap();
    let inode = |p: &Path| std::fs::symlink_metadata(p).unwrap().ino();
    let kept: Vec<(PathBuf, u64)> = names[21..].iter().map(|n| (n.clone(), inode(&many.join(n)))).collect();
    // GNU cp -a -u on the same damaged copy is the oracle.
    let gnu = d.path().join("gnu");
    std::fs::create_dir(&gnu).unwrap();
    assert!(Command::new("cp").args(["-a", s(&dst), s(&gnu)]).status().unwrap().success());
    let j = ok(&cacheless(&["--json", "cp", "-a", "-u", s(&src), s(&out)]));
    assert!(Command::new("cp").args(["-a", "-u", s(&src), s(&gnu)]).status().unwrap().success());
    assert_same_as_gnu(&gnu.join("src"), &dst);
    assert_eq!(std::fs::metadata(many.join(&names[20])).unwrap().len(), 10, "-u left the newer file as GNU does");
    for (n, ino) in kept {
        assert_eq!(inode(&many.join(&n)), ino, "{} was rewritten", n.display());
    }
    assert!(j["skipped"].as_u64().unwrap() >= 39, "{j}");
    // -n leaves an existing file alone even when it differs.
    std::fs::write(dst.join("f1"), b"mine").unwrap();
    ok(&cacheless(&["cp", "-a", "-n", s(&src), s(&out)]));
    assert_eq!(std::fs::read(dst.join("f1")).unwrap(), b"mine");
}

#[test]
fn an_interrupted_tree_copy_leaves_only_whole_files_and_update_finishes_it() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir(&src).unwrap();
    for i in 0..24 {
        std::fs::write(src.join(format!("big{i:02}")), random_bytes((2 << 20) + i, i as u64)).unwrap();
    }
    for i in 0..300 {
        std::fs::write(src.join(format!("small{i:03}")), random_bytes(3000 + i, 100 + i as u64)).unwrap();
    }
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let dst = out.join("src");
    // Rate-limited so that it is still running when the signal comes.
    let child = cacheless_testkit::cacheless().args(["cp", "-a", "--bwlimit", "8M", s(&src), s(&out)]).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let o = cacheless_testkit::interrupt(child, std::time::Duration::from_millis(1500), rustix::process::Signal::INT);
    assert_eq!(o.status.code(), Some(130), "{}", String::from_utf8_lossy(&o.stderr));
    no_temp_files(&out);
    let done: Vec<(PathBuf, u64)> = paths(&dst).into_iter().map(|r| (r.clone(), std::fs::metadata(dst.join(&r)).unwrap().ino())).collect();
    assert!(done.len() < 324, "the copy finished before the signal");
    for (r, _) in &done {
        assert!(std::fs::read(src.join(r)).unwrap() == std::fs::read(dst.join(r)).unwrap(), "{} is not whole", r.display());
    }
    let j = ok(&cacheless(&["--json", "cp", "-a", "-u", s(&src), s(&out)]));
    assert_eq!(j["skipped"], done.len(), "{j}");
    let gnu = d.path().join("gnu");
    assert!(Command::new("cp").args(["-a", s(&src), s(&gnu)]).status().unwrap().success());
    assert_same_as_gnu(&gnu, &dst);
    for (r, ino) in done {
        assert_eq!(std::fs::metadata(dst.join(&r)).unwrap().ino(), ino, "{} was rewritten", r.display());
    }
}

// ---- loop images: xfs and btrfs ----

/// A filesystem image on a loop device, mounted; unmounted and detached when dropped (also when
/// the test fails).
struct Mounted {
    dev: String,
    mnt: PathBuf,
}

impl Mounted {
    /// Makes a `size`-byte image of `fs` in `dir` and mounts it, or says why it cannot.
    fn new(dir: &Path, fs: &str, size: u64) -> Result<Mounted, String> {
        root()?;
        let mkfs = format!("mkfs.{fs}");
        if Command::new(&mkfs).arg("-V").output().is_err() {
            return Err(format!("{mkfs} not installed"));
        }
        let img = dir.join(format!("{fs}.img"));
        std::fs::File::create(&img).unwrap().set_len(size).unwrap();
        let out = Command::new("losetup").args(["--direct-io=on", "-f", "--show", s(&img)]).output().unwrap();
        if !out.status.success() {
            return Err(format!("losetup: {}", String::from_utf8_lossy(&out.stderr)));
        }
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let mnt = dir.join(format!("{fs}-mnt"));
        std::fs::create_dir(&mnt).unwrap();
        let m = Mounted { dev, mnt };
        let out = Command::new(&mkfs).args(["-f", "-q", &m.dev]).output().unwrap();
        assert!(out.status.success(), "{mkfs}: {}", String::from_utf8_lossy(&out.stderr));
        let out = Command::new("mount").args([&m.dev, s(&m.mnt)]).output().unwrap();
        assert!(out.status.success(), "mount: {}", String::from_utf8_lossy(&out.stderr));
        Ok(m)
    }

    /// Sectors written to the device so far (/sys/block/loopN/stat, field 7).
    fn sectors_written(&self) -> u64 {
        let name = Path::new(&self.dev).file_name().unwrap().to_str().unwrap().to_string();
        let stat = std::fs::read_to_string(format!("/sys/block/{name}/stat")).unwrap();
        stat.split_whitespace().nth(6).unwrap().parse().unwrap()
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}

fn shared_extents(p: &Path) -> bool {
    let out = Command::new("filefrag").args(["-v", s(p)]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).contains("shared")
}

fn on_image(fs: &str) {
    let d = scratch();
    let m = match Mounted::new(d.path(), fs, 400 << 20) {
        Ok(m) => m,
        Err(why) => {
            if why.contains("root") {
                require("root", Err(why));
            } else {
                skip(&why);
            }
            return;
        }
    };
    let base = m.mnt.join("t");
    std::fs::create_dir(&base).unwrap();
    archive_matches_gnu(&base, 200);
    // A reflink: the copy shares the source's extents and writes no data.
    let big = m.mnt.join("big");
    std::fs::write(&big, random_bytes(96 << 20, 3)).unwrap();
    rustix::fs::sync();
    let before = m.sectors_written();
    let j = ok(&cacheless(&["--json", "cp", "--reflink=always", s(&big), s(&m.mnt.join("clone"))]));
    let written = (m.sectors_written() - before) * 512;
    assert_eq!(j["files"][0]["method"], "reflink", "{j}");
    assert_eq!(j["files"][0]["data_bytes"], 0, "{j}");
    assert!(written < 8 << 20, "a reflink wrote {written} bytes to the device");
    assert!(shared_extents(&m.mnt.join("clone")), "filefrag shows no shared extents");
    assert!(std::fs::read(&big).unwrap() == std::fs::read(m.mnt.join("clone")).unwrap());
    // --verify on a clone reads both back.
    let j = ok(&cacheless(&["--json", "cp", "--verify", s(&big), s(&m.mnt.join("clone2"))]));
    assert_eq!(j["files"][0]["method"], "reflink", "{j}");
    assert!(j["files"][0]["verify"]["digest"].is_string(), "{j}");
}

#[test]
fn on_xfs_archive_copy_equals_gnu_and_reflinks_share_extents() {
    on_image("xfs");
}

#[test]
fn on_btrfs_archive_copy_equals_gnu_and_reflinks_share_extents() {
    on_image("btrfs");
}

/// `--inplace` writes an existing destination in place: its inode, its other names and its
/// attributes stay, and its other names see the new data. Without it, an existing file with
/// one name is replaced by a complete copy (a new inode) that keeps its mode and owner, and a
/// file with another name is written in place all the same (GNU cp's result).
#[test]
fn existing_files_are_replaced_whole_or_written_in_place_where_that_is_gnu_cp_s_result() {
    let d = scratch();
    let src = d.path().join("src");
    let data = random_bytes((3 << 20) + 5, 90);
    std::fs::write(&src, &data).unwrap();
    let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
    let one = d.path().join("one");
    std::fs::write(&one, b"old").unwrap();
    std::fs::set_permissions(&one, std::fs::Permissions::from_mode(0o600)).unwrap();
    let before = ino(&one);
    let j = ok(&cacheless(&["--json", "cp", s(&src), s(&one)]));
    assert_ne!(ino(&one), before, "replaced by a new file");
    assert_eq!((j["in_place"].as_u64(), j["copied"].as_u64()), (Some(0), Some(1)), "{j}");
    assert_eq!(std::fs::metadata(&one).unwrap().mode() & 0o7777, 0o600, "the mode of the file it replaced");
    assert!(std::fs::read(&one).unwrap() == data);
    let before = ino(&one);
    std::fs::write(&one, b"old again").unwrap();
    let j = ok(&cacheless(&["--json", "cp", "--inplace", s(&src), s(&one)]));
    assert_eq!(ino(&one), before, "--inplace keeps the inode");
    assert_eq!(j["in_place"].as_u64(), Some(1), "{j}");
    assert!(std::fs::read(&one).unwrap() == data);
    let linked = d.path().join("linked");
    std::fs::write(&linked, b"old").unwrap();
    std::fs::hard_link(&linked, d.path().join("other-name")).unwrap();
    let j = ok(&cacheless(&["--json", "cp", s(&src), s(&linked)]));
    assert_eq!(j["in_place"].as_u64(), Some(1), "{j}");
    assert!(std::fs::read(d.path().join("other-name")).unwrap() == data, "the other name sees the new data");
    no_temp_files(d.path());
}

/// While a large copy is written under its temporary name, nobody but its owner can read it
/// unless the copy will let them: it is never created with wider permission bits than it ends
/// with (a copy kept 0640 is never 0644 on the way, one whose owner changes is owner-only until
/// then).
#[test]
fn a_copy_in_progress_is_never_wider_open_than_it_ends() {
    let d = scratch();
    let src = d.path().join("secret");
    std::fs::write(&src, random_bytes(24 << 20, 91)).unwrap();
    std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o640)).unwrap();
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    for (args, most) in [(&["--bwlimit", "16M", "-p"][..], 0o640), (&["--bwlimit", "16M"][..], 0o640 & !0o022)] {
        let mut cmd = cacheless_testkit::cacheless();
        cmd.arg("cp").args(args).arg(&src).arg(out.join("copy"));
        let mut child = cmd.spawn().unwrap();
        let mut seen = 0;
        while child.try_wait().unwrap().is_none() {
            for e in std::fs::read_dir(&out).unwrap() {
                let e = e.unwrap();
                if e.file_name().to_string_lossy().contains(".cacheless-") {
                    if let Ok(m) = e.metadata() {
                        seen += 1;
                        assert_eq!(m.mode() & 0o7777 & !most, 0, "{args:?}: the copy in progress has mode {:o}", m.mode() & 0o7777);
                    }
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(seen > 0, "{args:?}: the copy was never seen in progress");
        std::fs::remove_file(out.join("copy")).unwrap();
    }
}

/// `cacheless cp -- -f g` copies the file `-f`, as `cp -- -f g` does: the `--` ends cp's options,
/// whatever the subcommand parser in front of it does with one (and `-f` is no option there).
#[test]
fn a_double_dash_ends_cps_options_through_the_subcommand() {
    let d = scratch();
    std::fs::write(d.path().join("-f"), b"dash").unwrap();
    for (tool, out) in [("gnu", "g1"), ("ours", "g2")] {
        let o = if tool == "gnu" {
            Command::new("cp").args(["--", "-f", out]).current_dir(d.path()).output().unwrap()
        } else {
            cacheless_testkit::cacheless().args(["cp", "--", "-f", out]).current_dir(d.path()).output().unwrap()
        };
        assert!(o.status.success(), "{tool}: {}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(std::fs::read(d.path().join(out)).unwrap(), b"dash", "{tool}");
    }
    // And `-v` before the `--` is still an option.
    let o = cacheless_testkit::cacheless().args(["cp", "-v", "--", "-f", "g3"]).current_dir(d.path()).output().unwrap();
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains("'-f' -> 'g3'"), "{}", String::from_utf8_lossy(&o.stdout));
}
