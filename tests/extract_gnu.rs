//! `cacheless extract` against GNU tar itself, case by case: each case builds the same
//! destination twice, extracts the same archive with `tar -xf` in one and `cacheless extract`
//! in the other (same umask, open-files limit and user namespace), and compares whether each
//! succeeded and every entry of the two trees: type, mode (set-ID and sticky bits included),
//! owner, group, contents or link target, which names share an inode, extended attributes and
//! the modification time. GNU tar exits 2 where a member failed, cacheless 1 (its convention
//! for every command); the comparison is of success or failure. The cases are the differences
//! found by running GNU tar's own test suite and side-by-side probes against cacheless: pax
//! values holding any byte, values that make no sense, bad headers, `-k`, owners that cannot be
//! set, long names, a member replacing a folder that holds earlier members, small open-file
//! limits, archives from FIFOs and pipes, and empty input.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cacheless_testkit::tree::{age, snapshot, twins, Node};
use cacheless_testkit::{require, scratch};

/// How a case is run.
#[derive(Clone, Copy)]
struct Run<'a> {
    /// Options given to both (`-k`, `--same-owner`, `--strip-components=N`), before the archive.
    opts: &'a [&'a str],
    umask: u32,
    /// `ulimit -n` for both.
    nofile: Option<u32>,
    /// Run inside `unshare -r` (a user namespace mapping only root): an owner other than root
    /// cannot be set there.
    userns: bool,
    /// The archive is fed through a FIFO made beside it, not named.
    fifo: bool,
    /// Run as this user (and group), not root; the destinations are theirs.
    user: Option<u32>,
    /// Member names, after the archive.
    names: &'a [&'a str],
}

const RUN: Run<'static> = Run { opts: &[], umask: 0o022, nofile: None, userns: false, fifo: false, user: None, names: &[] };

/// What a run left and said.
struct Outcome {
    ok: bool,
    stdout: Vec<u8>,
    stderr: String,
    tree: BTreeMap<PathBuf, Node>,
}

fn now_less_a_second() -> (i64, i64) {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    (i64::try_from(t.as_secs()).unwrap() - 1, 0)
}

/// Extracts `archive` into `dest` with GNU tar (`gnu`) or cacheless.
fn extract_with(gnu: bool, archive: &Path, dest: &Path, run: Run<'_>) -> Outcome {
    let since = now_less_a_second();
    let mut script = format!("umask {:03o}; ", run.umask);
    if let Some(n) = run.nofile {
        script.push_str(&format!("ulimit -n {n} || exit 99; "));
    }
    let src = if run.fifo {
        let fifo = dest.with_extension("fifo");
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::from_raw_mode(0o600), 0).unwrap();
        script.push_str(&format!("cat \"$ARCHIVE\" > '{}' & ", fifo.display()));
        fifo
    } else {
        archive.to_path_buf()
    };
    script.push_str("\"$@\"; rc=$?; wait; exit $rc");
    let mut argv: Vec<String> = Vec::new();
    if run.userns {
        argv.extend(["unshare".into(), "-r".into()]);
    }
    if let Some(u) = run.user {
        argv.extend(["setpriv".into(), format!("--reuid={u}"), format!("--regid={u}"), "--clear-groups".into()]);
    }
    let opts = run.opts.iter().map(|s| s.to_string());
    if gnu {
        // -C first: GNU applies it to the names (and -T lists) after it only.
        argv.extend(["tar".into(), "-C".into(), dest.display().to_string()]);
        argv.extend(opts);
        argv.extend(["-xf".into(), src.display().to_string()]);
        argv.extend(run.names.iter().map(|s| s.to_string()));
    } else {
        argv.extend([cacheless_testkit::bin("cacheless").display().to_string(), "extract".into(), "--no-sync".into()]);
        argv.extend(opts);
        argv.extend(["-C".into(), dest.display().to_string(), src.display().to_string()]);
        argv.extend(run.names.iter().map(|s| s.to_string()));
    }
    // Run beside the destination: nothing either writes can land in the working tree.
    let cwd = dest.parent().unwrap();
    let out = Command::new("sh").arg("-c").arg(&script).arg("sh").args(&argv).env("ARCHIVE", archive).env("LC_ALL", "C").current_dir(cwd).output().unwrap();
    assert_ne!(out.status.code(), Some(99), "ulimit -n {:?} refused", run.nofile);
    Outcome { ok: out.status.success(), stdout: out.stdout, stderr: String::from_utf8_lossy(&out.stderr).into_owned(), tree: snapshot(dest, since) }
}

fn gnu_tar() -> bool {
    let v = Command::new("tar").arg("--version").output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    require("peers", if v.contains("GNU tar") { Ok(()) } else { Err("no GNU tar to compare with".into()) })
}

/// Builds the same destination with `setup` twice, extracts `archive` into one with GNU tar and
/// into the other with cacheless, and checks they end the same. Returns cacheless's outcome.
#[track_caller]
fn same_as_gnu(name: &str, archive: &Path, setup: impl Fn(&Path), run: Run<'_>) -> Outcome {
    let (_d, g, o) = twins(setup, run.user.map(|u| (u, u)));
    let want = extract_with(true, archive, &g, run);
    let got = extract_with(false, archive, &o, run);
    let what = format!("{name}: extract {} {}", run.opts.join(" "), run.names.join(" "));
    assert_eq!(got.ok, want.ok, "{what}: success; GNU said {:?}, we said {:?}", want.stderr, got.stderr);
    assert!(got.stdout == want.stdout, "{what}: standard output, {} bytes against GNU's {}", got.stdout.len(), want.stdout.len());
    for (p, w) in &want.tree {
        let Some(e) = got.tree.get(p) else { panic!("{what}: {} missing (GNU made {w:?}); we said {:?}", p.display(), got.stderr) };
        assert!(e == w, "{what}: {}\n ours {}\n GNU  {}", p.display(), brief(e), brief(w));
    }
    let extra: Vec<&PathBuf> = got.tree.keys().filter(|p| !want.tree.contains_key(*p)).collect();
    assert!(extra.is_empty(), "{what}: entries GNU did not make: {extra:?}");
    if !got.ok {
        assert!(!got.stderr.is_empty(), "{what}: a failure is said");
    }
    got
}

/// An entry for a message: its contents cut short.
fn brief(n: &Node) -> String {
    let mut short = n.clone();
    short.body.truncate(32);
    format!("{short:?} ({} bytes of contents)", n.body.len())
}

/// Runs a Python program (its standard library's tarfile writes archives field by field) with
/// `sys`, `tarfile`, `io` and `os` imported and the archive's path as `sys.argv[1]`.
fn python(program: &str, archive: &Path) {
    let program = format!("import sys, tarfile, io, os\n{program}");
    let st = Command::new("python3").arg("-c").arg(&program).arg(archive).status().unwrap();
    assert!(st.success(), "python3 {program}");
}

/// A scratch folder anyone may enter, with `a.tar` in it written by the Python `program` (see
/// [`python`]); `None` where there is no GNU tar to compare with (said, or a failure where
/// required).
fn crafted(program: &str) -> Option<(tempfile::TempDir, PathBuf)> {
    if !gnu_tar() {
        return None;
    }
    let d = scratch();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let archive = d.path().join("a.tar");
    python(program, &archive);
    std::fs::set_permissions(&archive, std::fs::Permissions::from_mode(0o644)).unwrap();
    Some((d, archive))
}

/// Makes an archive of `src`'s contents (`-C src .`) with GNU tar and `opts`, its entries'
/// times set in the past first.
fn gnu_pack(src: &Path, archive: &Path, opts: &[&str]) {
    // Times in the past, so that none reads as "now" in one tree and not the other.
    age(src);
    let st = Command::new("tar").args(opts).arg("-cf").arg(archive).arg("-C").arg(src).arg(".").status().unwrap();
    assert!(st.success(), "tar {opts:?} -cf");
}

fn write(p: &Path, data: &[u8], mode: u32) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, data).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A pax record's value may hold any byte: newlines in names and in extended attribute values
/// (as in file capabilities and ACLs) are values, not the end of the header, and every later
/// member is extracted.
#[test]
fn pax_values_holding_newlines_are_values_and_later_members_follow() {
    if !gnu_tar() {
        return;
    }
    let d = scratch();
    let src = d.path().join("src");
    // Over 100 bytes with a newline: GNU tar puts it in a pax path record.
    let long = format!("{}\nline", "n".repeat(120));
    write(&src.join(&long), b"newline in the name", 0o644);
    write(&src.join("with-xattr"), b"x", 0o640);
    let has_xattr = rustix::fs::setxattr(src.join("with-xattr"), "user.v", b"a\nb\n", rustix::fs::XattrFlags::empty()).is_ok();
    write(&src.join("z-later"), b"after them", 0o600);
    let archive = d.path().join("a.tar");
    gnu_pack(&src, &archive, &["--format=pax", "--xattrs", "--xattrs-include=user.*"]);
    if has_xattr {
        let raw = std::fs::read(&archive).unwrap();
        assert!(raw.windows(18).any(|w| w == b"SCHILY.xattr.user.v"[..18].as_ref()), "the archive holds the xattr record");
    }
    let got = same_as_gnu("newlines", &archive, |_| {}, RUN);
    assert!(got.tree.contains_key(Path::new("z-later")) && got.tree.contains_key(Path::new(&long)), "{:?}", got.tree.keys());

    // cacheless pack --xattrs's own archive of the same tree.
    let ours = d.path().join("ours.tar");
    let st = cacheless_testkit::cacheless().args(["pack", "--xattrs", "--compress", "none", "-C"]).arg(&src).arg("-o").arg(&ours).arg(".").status().unwrap();
    assert!(st.success());
    same_as_gnu("pack --xattrs", &ours, |_| {}, RUN);
}

/// A pax value that makes no sense for its key is reported and ignored, the member extracted
/// with its header's field, and the archive goes on: as GNU tar does.
#[test]
fn a_pax_value_that_makes_no_sense_is_reported_and_the_archive_goes_on() {
    let Some((_d, archive)) = crafted(
        r#"
with tarfile.open(sys.argv[1], "w", format=tarfile.PAX_FORMAT) as t:
    for name, pax in [("bad-uid", {"uid": "abc"}), ("bad-size", {"size": "12x"}), ("bad-gid", {"gid": "-5"}), ("fine", {})]:
        ti = tarfile.TarInfo(name); ti.size = 4; ti.mtime = 1000000000; ti.mode = 0o640; ti.pax_headers = pax
        t.addfile(ti, io.BytesIO(b"data"))
"#,
    ) else {
        return;
    };
    let got = same_as_gnu("bad values", &archive, |_| {}, RUN);
    assert!(!got.ok);
    assert!(got.stderr.contains("uid=abc") && got.stderr.contains("size=12x"), "{}", got.stderr);
}

/// A pax time written with an exponent (Python's tarfile writes a float's repr) is read as the
/// number it is; GNU tar 1.34 reads `1e-09` as 1 s (documented difference: we keep 1 ns).
#[test]
fn a_pax_time_with_an_exponent_is_the_number_it_says() {
    let d = scratch();
    let archive = d.path().join("a.tar");
    python(
        r#"
with tarfile.open(sys.argv[1], "w", format=tarfile.PAX_FORMAT) as t:
    ti = tarfile.TarInfo("tiny"); ti.size = 1; ti.pax_headers = {"mtime": "1e-09"}; t.addfile(ti, io.BytesIO(b"t"))
    ti = tarfile.TarInfo("big"); ti.size = 1; ti.pax_headers = {"mtime": "1.5e9"}; t.addfile(ti, io.BytesIO(b"b"))
"#,
        &archive,
    );
    let dest = d.path().join("o");
    let out = extract_with(false, &archive, &dest, RUN);
    assert!(out.ok, "{}", out.stderr);
    assert_eq!(out.tree[Path::new("tiny")].mtime, Some((0, 1)));
    assert_eq!(out.tree[Path::new("big")].mtime, Some((1_500_000_000, 0)));
}

/// A header whose checksum is wrong is reported, the blocks after it are looked at until one is
/// a header, and the members after it are extracted (GNU: "Skipping to next header"). Empty
/// input is no archive.
#[test]
fn a_bad_header_is_skipped_as_gnu_skips_it_and_empty_input_is_no_archive() {
    if !gnu_tar() {
        return;
    }
    let d = scratch();
    let src = d.path().join("src");
    write(&src.join("a"), &vec![b'a'; 1500], 0o644);
    write(&src.join("b"), b"lost", 0o644);
    write(&src.join("c"), &vec![b'c'; 700], 0o644);
    write(&src.join("d"), b"kept", 0o644);
    let archive = d.path().join("a.tar");
    age(&src);
    let st = Command::new("tar").arg("--format=ustar").arg("-cf").arg(&archive).arg("-C").arg(&src).args(["a", "b", "c", "d"]).status().unwrap();
    assert!(st.success());
    let mut raw = std::fs::read(&archive).unwrap();
    // b's header follows a's header and its 3 blocks of data.
    let at = 512 * 4;
    assert_eq!(&raw[at..at + 1], b"b");
    raw[at + 1] = b'X';
    std::fs::write(&archive, &raw).unwrap();
    let got = same_as_gnu("bad checksum", &archive, |_| {}, RUN);
    assert!(!got.ok && got.tree.contains_key(Path::new("d")) && !got.tree.contains_key(Path::new("b")), "{:?}", got.tree.keys());
    assert!(got.stderr.contains("checksum") && got.stderr.contains("skipping"), "{}", got.stderr);

    let empty = d.path().join("empty.tar");
    std::fs::write(&empty, b"").unwrap();
    let got = same_as_gnu("empty", &empty, |_| {}, RUN);
    assert!(got.stderr.contains("does not look like a tar archive"), "{}", got.stderr);
}

/// `-k` never deletes nor changes what is there: a directory member where a file is keeps the
/// file, an existing directory keeps its mode and time, a file member where a file is keeps it.
#[test]
fn keep_old_files_keeps_files_and_folders_as_they_are() {
    if !gnu_tar() {
        return;
    }
    let d = scratch();
    let src = d.path().join("src");
    write(&src.join("d/f"), b"new", 0o644);
    write(&src.join("e/g"), b"under e", 0o644);
    write(&src.join("h"), b"new h", 0o644);
    std::fs::set_permissions(src.join("d"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let archive = d.path().join("a.tar");
    gnu_pack(&src, &archive, &[]);
    let setup = |dir: &Path| {
        std::fs::create_dir(dir.join("d")).unwrap();
        std::fs::set_permissions(dir.join("d"), std::fs::Permissions::from_mode(0o700)).unwrap();
        write(&dir.join("e"), b"a file where the archive has a folder", 0o600);
        write(&dir.join("h"), b"old h", 0o600);
    };
    let got = same_as_gnu("-k", &archive, setup, Run { opts: &["-k"], ..RUN });
    assert_eq!(got.tree[Path::new("e")].body, b"a file where the archive has a folder");
    assert_eq!(got.tree[Path::new("d")].mode, 0o700);
    // Without -k the folder and the file are replaced, as GNU replaces them.
    same_as_gnu("replace", &archive, setup, RUN);
}

/// GNU tar takes one choice about existing files: two of `-k`, `--skip-old-files`,
/// `--overwrite` and `--no-overwrite-dir` are refused before anything is extracted, the later
/// one named first; each alone is taken.
#[test]
fn two_choices_about_existing_files_are_refused_as_gnu_refuses_them() {
    if !gnu_tar() {
        return;
    }
    let d = scratch();
    let src = d.path().join("src");
    write(&src.join("d/f"), b"new", 0o644);
    let archive = d.path().join("a.tar");
    gnu_pack(&src, &archive, &[]);
    let setup = |dir: &Path| write(&dir.join("d/f"), b"old", 0o600);
    let choices = ["--keep-old-files", "--skip-old-files", "--overwrite", "--no-overwrite-dir"];
    for a in choices {
        same_as_gnu(a, &archive, setup, Run { opts: &[a], ..RUN });
        for b in choices.iter().copied().filter(|&b| b != a) {
            let got = same_as_gnu(&format!("{a} {b}"), &archive, setup, Run { opts: &[a, b], ..RUN });
            assert!(!got.ok, "{a} {b}: taken");
            assert_eq!(got.tree[Path::new("d/f")].body, b"old", "{a} {b}: something was extracted");
            let said = format!("'{b}' cannot be used with '{a}'");
            assert!(got.stderr.contains(&said), "{a} {b}: {:?} does not say {said:?}", got.stderr);
            let (_t, g, _o) = twins(setup, None);
            let gnu = extract_with(true, &archive, &g, Run { opts: &[a, b], ..RUN });
            assert!(gnu.stderr.contains(&said), "GNU tar's message changed: {:?}", gnu.stderr);
        }
    }
}

/// A member whose owner cannot be set (here: a user namespace that maps only root) is kept and
/// reported, as GNU tar keeps it; it keeps no set-ID bit (GNU's does: see docs/extract.md).
#[test]
fn a_member_whose_owner_cannot_be_set_is_kept_and_reported() {
    let userns = Command::new("unshare").args(["-r", "true"]).status().is_ok_and(|s| s.success());
    if !require("userns", if userns { Ok(()) } else { Err("unshare -r refused: no user namespaces".into()) }) {
        return;
    }
    let Some((d, archive)) = crafted(
        r#"
with tarfile.open(sys.argv[1], "w", format=tarfile.PAX_FORMAT) as t:
    for name, size, mode in [("small", 5, 0o640), ("big", 3 << 20, 0o644), ("plain", 2, 0o600)]:
        ti = tarfile.TarInfo(name); ti.size = size; ti.uid = 4321; ti.gid = 4321; ti.mode = mode; ti.mtime = 1000000000
        t.addfile(ti, io.BytesIO(b"x" * size))
    ti = tarfile.TarInfo("dir"); ti.type = tarfile.DIRTYPE; ti.uid = 4321; ti.gid = 4321; ti.mode = 0o750; ti.mtime = 1000000000
    t.addfile(ti)
"#,
    ) else {
        return;
    };
    let got = same_as_gnu("unmapped owner", &archive, |_| {}, Run { opts: &["--same-owner"], userns: true, ..RUN });
    assert!(!got.ok);
    for n in ["small", "big", "plain", "dir"] {
        assert!(got.tree.contains_key(Path::new(n)), "{n} kept: {:?}", got.tree.keys());
        assert!(got.stderr.contains(&format!("{n}: cannot change ownership to uid 4321")), "{}", got.stderr);
    }
    // A set-ID bit is not kept on a file of the wrong owner.
    let suid = d.path().join("suid.tar");
    python(
        r#"
with tarfile.open(sys.argv[1], "w") as t:
    ti = tarfile.TarInfo("s"); ti.size = 1; ti.uid = 4321; ti.mode = 0o4755; t.addfile(ti, io.BytesIO(b"s"))
"#,
        &suid,
    );
    let dest = d.path().join("o");
    let out = extract_with(false, &suid, &dest, Run { opts: &["--same-owner"], userns: true, ..RUN });
    assert!(!out.ok && out.tree[Path::new("s")].mode == 0o755, "{:?} {}", out.tree, out.stderr);
}

/// Names up to the filesystem's limit extract whatever the file's size (a large file is written
/// under a temporary name beside it, which must fit too).
#[test]
fn the_longest_names_extract_for_files_of_any_size() {
    if !gnu_tar() {
        return;
    }
    let d = scratch();
    let src = d.path().join("src");
    for (len, size) in [(255usize, 3usize << 20), (240, 1 << 20), (255, 100)] {
        write(&src.join(format!("{}{}", size, "n".repeat(len - size.to_string().len()))), &vec![7u8; size], 0o644);
    }
    let archive = d.path().join("a.tar");
    gnu_pack(&src, &archive, &["--format=pax"]);
    let got = same_as_gnu("long names", &archive, |_| {}, RUN);
    assert_eq!(got.tree.len(), 3);
}

/// A later member of a folder's name does not remove the folder when it holds earlier members
/// (their files may not have their names yet): the member fails, as with GNU tar.
#[test]
fn a_later_member_does_not_remove_a_folder_holding_earlier_members() {
    let Some((_d, archive)) = crafted(
        r#"
with tarfile.open(sys.argv[1], "w", format=tarfile.USTAR_FORMAT) as t:
    def f(name, data):
        ti = tarfile.TarInfo(name); ti.size = len(data); ti.mtime = 1000000000; t.addfile(ti, io.BytesIO(data))
    d = tarfile.TarInfo("a"); d.type = tarfile.DIRTYPE; d.mode = 0o755; d.mtime = 1000000000; t.addfile(d)
    f("a/f", b"earlier")
    f("a", b"later file")
    f("b/c", b"implicit folder")
    f("b", b"later file")
    e = tarfile.TarInfo("e"); e.type = tarfile.DIRTYPE; e.mode = 0o755; e.mtime = 1000000000; t.addfile(e)
    f("e", b"replaces the empty folder")
"#,
    ) else {
        return;
    };
    let got = same_as_gnu("folder in the way", &archive, |_| {}, RUN);
    assert_eq!(got.tree[Path::new("a/f")].body, b"earlier");
    assert_eq!(got.tree[Path::new("e")].body, b"replaces the empty folder");
}

/// 2,000 folders extract under any open-files limit GNU tar works under: the usual 1024 and
/// GNU's own test's 10.
#[test]
fn many_folders_extract_under_small_open_file_limits() {
    if !gnu_tar() {
        return;
    }
    let d = scratch();
    let src = d.path().join("src");
    for i in 0..2000 {
        write(&src.join(format!("d{i}/e/f")), format!("{i}").as_bytes(), 0o644);
    }
    write(&src.join("big"), &vec![1u8; 3 << 20], 0o644);
    let archive = d.path().join("a.tar");
    gnu_pack(&src, &archive, &[]);
    for n in [1024, 10] {
        let got = same_as_gnu("2,000 folders", &archive, |_| {}, Run { nofile: Some(n), ..RUN });
        assert!(got.ok && got.tree.len() == 6001, "ulimit -n {n}: {} entries, {}", got.tree.len(), got.stderr);
    }
}

/// An archive read from a FIFO or a pipe extracts as from a file.
#[test]
fn archives_from_fifos_and_pipes_extract() {
    if !gnu_tar() {
        return;
    }
    let d = scratch();
    let src = d.path().join("src");
    write(&src.join("small"), b"small", 0o644);
    write(&src.join("big"), &vec![3u8; 5 << 20], 0o600);
    let archive = d.path().join("a.tar");
    gnu_pack(&src, &archive, &[]);
    let got = same_as_gnu("fifo", &archive, |_| {}, Run { fifo: true, ..RUN });
    assert!(got.ok && got.tree.len() == 2);
    // Process substitution: a /dev/fd/N path to a pipe.
    let dest = d.path().join("pipe");
    let out = Command::new("bash")
        .arg("-c")
        .arg("exec \"$0\" extract --no-sync -C \"$1\" <(cat \"$2\")")
        .arg(cacheless_testkit::bin("cacheless"))
        .arg(&dest)
        .arg(&archive)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(dest.join("big")).unwrap(), std::fs::read(src.join("big")).unwrap());
}

/// As another user than root, modes are the archive's less the umask, without set-ID or sticky
/// bits (GNU tar's default for users, --no-same-permissions); as root they are kept.
#[test]
fn modes_as_a_user_and_as_root_are_gnu_tars() {
    let Some((_d, archive)) = crafted(
        r#"
with tarfile.open(sys.argv[1], "w", format=tarfile.GNU_FORMAT) as t:
    for name, mode in [("sticky", 0o1777), ("setgid", 0o2775), ("open", 0o777)]:
        ti = tarfile.TarInfo(name); ti.type = tarfile.DIRTYPE; ti.mode = mode; ti.mtime = 1000000000; t.addfile(ti)
    for name, mode in [("suid", 0o4755), ("f", 0o666), ("sticky-file", 0o1644)]:
        ti = tarfile.TarInfo(name); ti.size = 1; ti.mode = mode; ti.mtime = 1000000000; t.addfile(ti, io.BytesIO(b"x"))
"#,
    ) else {
        return;
    };
    let user = same_as_gnu("as a user", &archive, |_| {}, Run { user: Some(4242), umask: 0o027, ..RUN });
    assert_eq!(user.tree[Path::new("sticky")].mode, 0o750);
    same_as_gnu("as root", &archive, |_| {}, Run { umask: 0o027, ..RUN });
}

/// As root, GNU tar's defaults: owners restored by name where this system knows it (else by
/// number, or by number only with `--numeric-owner`), FIFOs and device nodes created with the
/// archive's exact modes; `--no-same-owner` keeps root as the owner, and root's set-ID bits as
/// GNU keeps them (another owner's, unlike GNU, are dropped: see docs/extract.md).
#[test]
fn root_defaults_are_gnu_tars() {
    if !require("root", cacheless_testkit::root()) {
        return;
    }
    let Some((d, archive)) = crafted(
        r#"
with tarfile.open(sys.argv[1], "w", format=tarfile.GNU_FORMAT) as t:
    def add(name, kind=tarfile.REGTYPE, mode=0o644, uid=0, gid=0, uname="", gname="", data=b""):
        ti = tarfile.TarInfo(name); ti.type = kind; ti.mode = mode; ti.uid = uid; ti.gid = gid
        ti.uname = uname; ti.gname = gname; ti.mtime = 1000000000; ti.size = len(data)
        if kind == tarfile.CHRTYPE: ti.devmajor, ti.devminor = 1, 3
        t.addfile(ti, io.BytesIO(data) if data else None)
    add("by-name", uid=7777, gid=7777, uname="nobody", gname="nogroup", data=b"n")
    add("unknown-name", uid=4321, gid=4322, uname="no-such-user-here", gname="no-such-group-here", data=b"u")
    add("numbers", uid=1234, gid=1235, data=b"x")
    add("suid", mode=0o4755, uid=1234, gid=1234, data=b"s")
    add("fifo", kind=tarfile.FIFOTYPE, mode=0o666)
    add("null", kind=tarfile.CHRTYPE, mode=0o666, uid=1234)
    add("dir", kind=tarfile.DIRTYPE, mode=0o2775, uid=1234, gid=1234)
    add("root-suid", mode=0o4755, uname="root", gname="root", data=b"sudo")
    add("root-sgid-dir", kind=tarfile.DIRTYPE, mode=0o2775, uname="root", gname="root")
"#,
    ) else {
        return;
    };
    let got = same_as_gnu("root defaults", &archive, |_| {}, RUN);
    let nobody = Command::new("id").args(["-u", "nobody"]).output().unwrap();
    if nobody.status.success() {
        let n: u32 = String::from_utf8_lossy(&nobody.stdout).trim().parse().unwrap();
        assert_eq!(got.tree[Path::new("by-name")].uid, n, "owner by name, not by number");
    }
    assert_eq!((got.tree[Path::new("unknown-name")].uid, got.tree[Path::new("fifo")].mode), (4321, 0o666));
    same_as_gnu("numeric", &archive, |_| {}, Run { opts: &["--numeric-owner"], ..RUN });
    let got = extract_with(false, &archive, &d.path().join("o"), Run { opts: &["--no-same-owner"], ..RUN });
    assert!(got.ok, "{}", got.stderr);
    // Another owner's set-ID program is not made root's (GNU makes it: docs/extract.md).
    assert_eq!((got.tree[Path::new("suid")].uid, got.tree[Path::new("suid")].mode), (0, 0o755));
    // Root's own keep their set-ID bits, as GNU keeps them (Debian's sudo stays 4755).
    std::fs::create_dir(d.path().join("g")).unwrap();
    let gnu = extract_with(true, &archive, &d.path().join("g"), Run { opts: &["--no-same-owner"], ..RUN });
    assert!(gnu.ok, "{}", gnu.stderr);
    for n in ["root-suid", "root-sgid-dir"] {
        let (ours, theirs) = (&got.tree[Path::new(n)], &gnu.tree[Path::new(n)]);
        assert_eq!((ours.uid, ours.mode), (theirs.uid, theirs.mode), "{n}");
    }
    assert_eq!(got.tree[Path::new("root-suid")].mode, 0o4755);
}

/// `-i` reads archives written one after another (`cat a.tar b.tar`) to the input's end, as GNU
/// tar's `-i` does; without it the first archive's end is the end, as GNU's is. A compressed
/// stream of nothing is an empty archive (nothing extracted, success), as GNU extracts it; no
/// bytes at all is still no archive.
#[test]
fn concatenated_archives_and_a_compressed_nothing_are_gnu_tars() {
    if !gnu_tar() {
        return;
    }
    let d = scratch();
    let (one, two) = (d.path().join("one"), d.path().join("two"));
    write(&one.join("a"), b"first", 0o644);
    write(&two.join("b"), &vec![b'b'; 3000], 0o644);
    write(&two.join("sub/c"), b"third", 0o600);
    age(&one);
    age(&two);
    let cat = d.path().join("cat.tar");
    let mut bytes = Vec::new();
    for src in [&one, &two] {
        let t = d.path().join("part.tar");
        assert!(Command::new("tar").arg("-cf").arg(&t).arg("-C").arg(src).arg(".").status().unwrap().success());
        bytes.extend(std::fs::read(&t).unwrap());
    }
    std::fs::write(&cat, &bytes).unwrap();
    let got = same_as_gnu("concatenated", &cat, |_| {}, RUN);
    assert!(got.tree.contains_key(Path::new("a")) && !got.tree.contains_key(Path::new("b")));
    for opt in ["-i", "--ignore-zeros"] {
        let got = same_as_gnu("concatenated", &cat, |_| {}, Run { opts: &[opt], ..RUN });
        assert!(got.tree.contains_key(Path::new("a")) && got.tree.contains_key(Path::new("sub/c")), "{opt}: {:?}", got.tree.keys());
    }
    for (name, tool) in [("empty.gz", "gzip"), ("empty.zst", "zstd"), ("empty.xz", "xz"), ("empty.bz2", "bzip2")] {
        let out = Command::new(tool).arg("-c").stdin(Stdio::null()).output().unwrap();
        assert!(out.status.success(), "{tool}");
        let p = d.path().join(name);
        std::fs::write(&p, out.stdout).unwrap();
        let got = same_as_gnu("a compressed nothing", &p, |_| {}, RUN);
        assert!(got.ok && got.tree.is_empty(), "{name}: {}", got.stderr);
    }
}

/// Member names (as stored; a folder takes what is below it; a name no member matches is an
/// error), `-T`, `--exclude`, `--skip-old-files`, `--no-overwrite-dir`, `-O` and `-s` give GNU
/// tar's results.
#[test]
fn member_selection_and_overwrite_options_are_gnu_tars() {
    if !gnu_tar() {
        return;
    }
    let d = scratch();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let src = d.path().join("src");
    write(&src.join("a/b/f"), b"f", 0o644);
    write(&src.join("a/g.o"), b"object", 0o644);
    write(&src.join("c/h"), b"h", 0o600);
    write(&src.join("top"), &vec![9u8; 3 << 20], 0o644);
    let archive = d.path().join("a.tar");
    gnu_pack(&src, &archive, &["--sparse"]);
    for names in [&["./a"][..], &["./a/b/f", "./top"], &["a"], &["./c/", "./nope"]] {
        same_as_gnu("names", &archive, |_| {}, Run { names, ..RUN });
    }
    let list = d.path().join("list");
    std::fs::write(&list, "./c/h\n./a/b\n").unwrap();
    let from = format!("--files-from={}", list.display());
    same_as_gnu("-T", &archive, |_| {}, Run { opts: &[&from], ..RUN });
    same_as_gnu("exclude", &archive, |_| {}, Run { opts: &["--exclude=*.o", "--exclude=c"], ..RUN });
    let existing = |dir: &Path| {
        std::fs::create_dir(dir.join("a")).unwrap();
        std::fs::set_permissions(dir.join("a"), std::fs::Permissions::from_mode(0o700)).unwrap();
        write(&dir.join("top"), b"old", 0o600);
        write(&dir.join("c"), b"a file where a folder is", 0o600);
    };
    let got = same_as_gnu("skip", &archive, existing, Run { opts: &["--skip-old-files"], ..RUN });
    assert_eq!(got.tree[Path::new("top")].body, b"old");
    same_as_gnu("no-overwrite-dir", &archive, existing, Run { opts: &["--no-overwrite-dir"], ..RUN });
    let got = same_as_gnu("-O", &archive, |_| {}, Run { opts: &["-O"], ..RUN });
    assert_eq!(got.stdout.len(), 1 + 6 + 1 + (3 << 20), "every regular member's bytes, in archive order");
    same_as_gnu("-O names", &archive, |_| {}, Run { opts: &["-O"], names: &["./c/h"], ..RUN });
    // -s (names in the archive's order) changes nothing: names given out of order.
    same_as_gnu("-s", &archive, |_| {}, Run { opts: &["-s"], names: &["./top", "./a/b/f"], ..RUN });
    same_as_gnu("--preserve-order", &archive, |_| {}, Run { opts: &["--preserve-order"], names: &["./top", "./c"], ..RUN });
}

/// `-v` names each member taken as GNU tar does: as stored, in the archive's order, in GNU's
/// escape quoting (newline, backslash, bytes beyond ASCII), not the members left out by names,
/// `--exclude` or `--strip-components`; with `-O`, on standard error.
#[test]
fn verbose_names_members_as_gnu_tar_does() {
    let Some((_d, archive)) = crafted(
        r#"
with tarfile.open(sys.argv[1], "w", format=tarfile.PAX_FORMAT) as t:
    for name, body in [("top/", None), ("top/a", b"a"), ("top/new\nline", b"n"), ("top/back\\slash", b"b"), ("top/caf\u00e9", b"c"),
                       ("top/tab\there", b"t"), ("top/sub/", None), ("top/sub/f.o", b"o"), ("top/sub/g", b"g"), ("loose", b"l")]:
        ti = tarfile.TarInfo(name.rstrip("/")); ti.mtime = 1000000000
        if body is None:
            ti.type = tarfile.DIRTYPE; ti.mode = 0o755
            t.addfile(ti)
        else:
            ti.size = len(body); ti.mode = 0o644
            t.addfile(ti, io.BytesIO(body))
"#,
    ) else {
        return;
    };
    let got = same_as_gnu("-v", &archive, |_| {}, Run { opts: &["-v"], ..RUN });
    assert!(String::from_utf8_lossy(&got.stdout).contains("top/new\\nline\ntop/back\\\\slash\n"), "{:?}", String::from_utf8_lossy(&got.stdout));
    same_as_gnu("-v names", &archive, |_| {}, Run { opts: &["-v"], names: &["top/sub", "loose"], ..RUN });
    same_as_gnu("-v exclude", &archive, |_| {}, Run { opts: &["-v", "--exclude=*.o"], ..RUN });
    same_as_gnu("-v strip", &archive, |_| {}, Run { opts: &["-v", "--strip-components=1"], ..RUN });
    let got = same_as_gnu("-v -O", &archive, |_| {}, Run { opts: &["-v", "-O"], names: &["top/a", "top/sub/g"], ..RUN });
    assert_eq!(got.stdout, b"ag", "contents only on standard output");
    assert!(got.stderr.contains("top/a\n") && got.stderr.contains("top/sub/g\n"), "the names on standard error: {:?}", got.stderr);
}

/// Symlinks in the destination: one that was there before is followed on the way to a member,
/// wherever it points, as GNU tar follows it (`lib -> usr/lib` restored into `/`); one the
/// archive made is followed where its text is relative without `..` (as GNU's), never where it
/// is not (GNU makes those last), under any name (a hard link to it) or on the way of another
/// link; replaced, a link is no longer followed. A folder member where such a symlink is replaces it, or with
/// `--keep-directory-symlink` keeps it and goes through it.
#[test]
fn symlinks_already_there_are_followed_as_gnu_follows_them() {
    let Some((_d, archive)) = crafted(
        r#"
with tarfile.open(sys.argv[1], "w", format=tarfile.GNU_FORMAT) as t:
    def f(name, data):
        ti = tarfile.TarInfo(name); ti.size = len(data); ti.mtime = 1000000000; t.addfile(ti, io.BytesIO(data))
    def link(name, target, kind=tarfile.SYMTYPE):
        ti = tarfile.TarInfo(name); ti.type = kind; ti.linkname = target; ti.mtime = 1000000000; t.addfile(ti)
    f("lib/x", b"through the link already there")
    f("lib/sub/y", b"in a folder made through it")
    f("up/z", b"through a link that leaves the destination")
    link("safe", "usr")
    f("safe/h", b"through the archive's own link inside")
    link("evil", "usr/../usr")
    f("evil/f", b"never through the archive's own link with a ..")
    link("evil2", "evil", tarfile.LNKTYPE)
    f("evil2/g", b"nor through a hard link to it")
    link("hop", "evil")
    f("hop/i", b"nor through a link on the way to it")
    f("swap/a", b"through the link")
    f("swap", b"a file now")
    f("swap/b", b"not through what replaced it")
"#,
    ) else {
        return;
    };
    let setup = |dir: &Path| {
        std::fs::create_dir_all(dir.join("usr/lib")).unwrap();
        std::fs::create_dir_all(dir.join("swapped")).unwrap();
        std::os::unix::fs::symlink("usr/lib", dir.join("lib")).unwrap();
        std::os::unix::fs::symlink("swapped", dir.join("swap")).unwrap();
        // Outside the destination, beside it (one for both twins).
        std::fs::create_dir_all(dir.parent().unwrap().join("outside")).unwrap();
        std::os::unix::fs::symlink("../outside", dir.join("up")).unwrap();
    };
    let got = same_as_gnu("links already there", &archive, setup, RUN);
    assert!(!got.stderr.contains("up/z"), "{}", got.stderr);
    assert_eq!(got.tree[Path::new("usr/lib/x")].body, b"through the link already there");
    assert_eq!(got.tree[Path::new("usr/lib/sub/y")].body, b"in a folder made through it");
    assert_eq!(got.tree[Path::new("swapped/a")].body, b"through the link");
    assert_eq!(got.tree[Path::new("usr/h")].body, b"through the archive's own link inside");
    assert!(["usr/f", "usr/g", "usr/i"].iter().all(|p| !got.tree.contains_key(Path::new(p))));
    for refused in ["evil/f", "evil2/g", "hop/i", "swap/b"] {
        assert!(got.stderr.contains(refused), "{refused}: {}", got.stderr);
    }
    assert!(!got.ok);

    let Some((_e, folders)) = crafted(
        r#"
with tarfile.open(sys.argv[1], "w", format=tarfile.GNU_FORMAT) as t:
    d = tarfile.TarInfo("root/lib"); d.type = tarfile.DIRTYPE; d.mode = 0o755; d.mtime = 1000000000; t.addfile(d)
    ti = tarfile.TarInfo("root/lib/z"); ti.size = 2; ti.mtime = 1000000000; t.addfile(ti, io.BytesIO(b"zz"))
"#,
    ) else {
        return;
    };
    let setup = |dir: &Path| {
        std::fs::create_dir_all(dir.join("root/dir")).unwrap();
        std::os::unix::fs::symlink("dir", dir.join("root/lib")).unwrap();
    };
    let replaced = same_as_gnu("folder member at a link", &folders, setup, RUN);
    assert_eq!(replaced.tree[Path::new("root/lib/z")].body, b"zz");
    let kept = same_as_gnu("--keep-directory-symlink", &folders, setup, Run { opts: &["--keep-directory-symlink"], ..RUN });
    assert_eq!(kept.tree[Path::new("root/dir/z")].body, b"zz");
}

/// `--one-top-level[=DIR]`: every member under DIR (or the archive's name less its suffixes),
/// one already under it left as it is, `./` itself becoming DIR with its mode, as GNU tar does.
/// Hard links are put under it too: GNU
/// 1.34 leaves their targets as stored, so that they fail; here they link (docs/extract.md).
#[test]
fn one_top_level_puts_members_under_one_folder_as_gnu_does() {
    if !gnu_tar() {
        return;
    }
    let d = scratch();
    let src = d.path().join("src");
    write(&src.join("a/b"), b"b", 0o644);
    write(&src.join("c"), b"c", 0o600);
    std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o2750)).unwrap();
    let archive = d.path().join("a.tar.gz");
    gnu_pack(&src, &archive, &["-z"]);
    for opts in [&["--one-top-level"][..], &["--one-top-level=a"], &["--one-top-level=top", "-p"]] {
        let got = same_as_gnu("one top level", &archive, |_| {}, Run { opts, ..RUN });
        assert!(got.ok, "{opts:?}: {}", got.stderr);
    }
    let got = same_as_gnu("one top level", &archive, |_| {}, Run { opts: &["--one-top-level=top", "-p"], ..RUN });
    assert_eq!(got.tree[Path::new("top")].mode & 0o7777, 0o2750);
    assert_eq!(got.tree[Path::new("top/a/b")].body, b"b");

    // A hard link's target goes under the folder with it.
    let Some((_e, links)) = crafted(
        r#"
with tarfile.open(sys.argv[1], "w", format=tarfile.GNU_FORMAT) as t:
    ti = tarfile.TarInfo("c"); ti.size = 1; t.addfile(ti, io.BytesIO(b"c"))
    h = tarfile.TarInfo("h"); h.type = tarfile.LNKTYPE; h.linkname = "c"; t.addfile(h)
"#,
    ) else {
        return;
    };
    let dest = links.with_file_name("dest");
    let st =
        Command::new(cacheless_testkit::bin("cacheless")).args(["extract", "--no-sync", "--one-top-level=top", "-C"]).arg(&dest).arg(&links).status().unwrap();
    assert!(st.success());
    let (c, h) = (std::fs::metadata(dest.join("top/c")).unwrap(), std::fs::metadata(dest.join("top/h")).unwrap());
    assert_eq!((c.ino(), c.nlink()), (h.ino(), 2));
}

/// `--xattrs` (GNU's default of `user.*` only), `--xattrs-include`/`--xattrs-exclude` and
/// `--acls` restore what GNU tar restores, on small, large and sparse files, folders (default
/// ACLs too), FIFOs and symlinks, as root and as a user; without `--acls` a destination's
/// default ACL is inherited as GNU's files inherit it, with it a member's own ACL (or the one
/// its mode says) replaces the inherited one.
#[test]
fn xattrs_and_acls_are_restored_as_gnu_restores_them() {
    if !require("root", cacheless_testkit::root()) || !gnu_tar() {
        return;
    }
    let setfacl = |args: &[&str], p: &Path| {
        let st = Command::new("setfacl").args(args).arg(p).status();
        require("acl", if st.is_ok_and(|s| s.success()) { Ok(()) } else { Err("setfacl failed or is missing (package acl)".into()) })
    };
    let xattr = |p: &Path, name: &str, value: &[u8]| rustix::fs::lsetxattr(p, name, value, rustix::fs::XattrFlags::empty()).unwrap();
    let d = scratch();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let src = d.path().join("src");
    write(&src.join("d/small"), b"small", 0o640);
    write(&src.join("d/big"), &vec![7u8; 3 << 20], 0o644);
    write(&src.join("d/sub/f"), b"f", 0o600);
    let sparse = std::fs::File::create(src.join("d/sparse")).unwrap();
    sparse.set_len(8 << 20).unwrap();
    std::os::unix::fs::FileExt::write_at(&sparse, b"end", 8 << 20).unwrap();
    rustix::fs::mknodat(rustix::fs::CWD, src.join("d/fifo"), rustix::fs::FileType::Fifo, rustix::fs::Mode::from_raw_mode(0o640), 0).unwrap();
    std::os::unix::fs::symlink("small", src.join("d/link")).unwrap();
    for f in ["d", "d/small", "d/big", "d/sparse"] {
        xattr(&src.join(f), "user.kept", format!("{f}=value\n").as_bytes());
    }
    // The user namespace is for files and folders only.
    for f in ["d", "d/small", "d/big", "d/sparse", "d/fifo"] {
        xattr(&src.join(f), "trusted.t", b"t");
    }
    xattr(&src.join("d/small"), "user.=NAME%3D=", b"escaped in its pax key");
    xattr(&src.join("d/link"), "trusted.l", b"a symlink's own");
    if !setfacl(&["-m", "u:nobody:r-x,g:daemon:rw-"], &src.join("d/small"))
        || !setfacl(&["-m", "u:daemon:r--"], &src.join("d/big"))
        || !setfacl(&["-m", "g:daemon:rwx"], &src.join("d/sparse"))
        || !setfacl(&["-d", "-m", "u:nobody:rwx"], &src.join("d"))
        || !setfacl(&["-m", "u:daemon:--x"], &src.join("d/sub"))
    {
        return;
    }
    let with = d.path().join("with.tar");
    gnu_pack(&src, &with, &["--xattrs", "--xattrs-include=*", "--acls", "--sparse"]);
    let without = d.path().join("without.tar");
    gnu_pack(&src, &without, &[]);
    std::fs::set_permissions(&with, std::fs::Permissions::from_mode(0o644)).unwrap();
    // A destination whose default ACL new entries inherit.
    let inheriting = |dest: &Path| {
        setfacl(&["-d", "-m", "u:daemon:---,o::---"], dest);
    };
    for opts in
        [&["--xattrs"][..], &["--xattrs-include=*"], &["--xattrs-include=trusted.*", "--xattrs-exclude=trusted.l"], &["--acls"], &["--xattrs", "--acls"], &[]]
    {
        let got = same_as_gnu("xattrs", &with, |_| {}, Run { opts, ..RUN });
        let small = &got.tree[Path::new("d/small")];
        let has = |n: &str| small.xattrs.contains_key(n);
        assert_eq!(has("user.=NAME%3D="), opts.contains(&"--xattrs") || opts.contains(&"--xattrs-include=*"), "{opts:?}");
        assert_eq!(has("system.posix_acl_access"), opts.contains(&"--acls") || opts.contains(&"--xattrs-include=*"), "{opts:?}");
        same_as_gnu("xattrs into a default ACL", &with, inheriting, Run { opts, ..RUN });
        same_as_gnu("no ACLs in the archive", &without, inheriting, Run { opts, ..RUN });
    }
    same_as_gnu("xattrs as a user", &with, |_| {}, Run { opts: &["--xattrs-include=*", "--acls"], user: Some(4242), umask: 0o027, ..RUN });
    // cacheless pack --xattrs writes names as GNU reads them ('=' and '%' escaped).
    let ours = d.path().join("ours.tar");
    let st = cacheless_testkit::cacheless().args(["pack", "--xattrs", "--compress", "none", "-C"]).arg(&src).arg("-o").arg(&ours).arg(".").status().unwrap();
    assert!(st.success());
    let got = same_as_gnu("pack --xattrs", &ours, |_| {}, Run { opts: &["--xattrs-include=*"], ..RUN });
    assert_eq!(got.tree[Path::new("d/small")].xattrs.get("user.=NAME%3D=").map(Vec::as_slice), Some(&b"escaped in its pax key"[..]));
}

/// `--backup` (each CONTROL, `--suffix`, `$SIMPLE_BACKUP_SUFFIX` left out) renames what a
/// member replaces as GNU tar does, and says so under `-v`; `--overwrite` writes a regular file
/// in place (its other hard links see the new data) and replaces a symlink, which `-h` follows
/// instead.
#[test]
fn backup_and_overwrite_are_gnu_tars() {
    if !gnu_tar() {
        return;
    }
    let d = scratch();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let src = d.path().join("src");
    write(&src.join("dir1/file1"), b"new", 0o644);
    write(&src.join("dir1/big"), &vec![3u8; 3 << 20], 0o640);
    write(&src.join("dir1/sym"), b"through the link", 0o644);
    write(&src.join("dir2/f"), b"f", 0o644);
    let archive = d.path().join("a.tar");
    gnu_pack(&src, &archive, &[]);
    let existing = |dir: &Path| {
        write(&dir.join("dir1/file1"), b"old", 0o600);
        write(&dir.join("dir1/file1.~4~"), b"an older backup", 0o600);
        write(&dir.join("dir1/big"), b"old big", 0o600);
        std::fs::hard_link(dir.join("dir1/big"), dir.join("dir1/big-twin")).unwrap();
        write(&dir.join("dir1/target"), b"the link's target", 0o600);
        std::os::unix::fs::symlink("target", dir.join("dir1/sym")).unwrap();
        // A file where the archive has a folder: backed up, then the folder made.
        write(&dir.join("dir2"), b"a file", 0o600);
    };
    for opts in [
        &["--backup"][..],
        &["--backup=numbered"],
        &["--backup=existing"],
        &["--backup=simple", "--suffix=.old"],
        &["--suffix=.bak"],
        &["--backup=none"],
        &["-v", "--backup=t"],
    ] {
        let got = same_as_gnu("backup", &archive, existing, Run { opts, ..RUN });
        assert!(got.ok, "{opts:?}: {}", got.stderr);
    }
    let got = same_as_gnu("overwrite", &archive, existing, Run { opts: &["--overwrite"], ..RUN });
    assert_eq!(got.tree[Path::new("dir1/big-twin")].body.len(), 3 << 20, "written in place");
    let got = same_as_gnu("overwrite through links", &archive, existing, Run { opts: &["--overwrite", "-h"], ..RUN });
    assert_eq!(got.tree[Path::new("dir1/target")].body, b"through the link");
}

/// GNU tar's `-C` among member names (each for the names after it, relative to the one
/// before), `--transform` (names, symlink and hard link targets, with `--strip-components` after
/// it) with `--show-transformed-names`, and `-P` (`..` taken as written, an absolute name at its
/// absolute path) give GNU's results.
#[test]
fn several_directories_transforms_and_absolute_names_are_gnu_tars() {
    let Some((d, archive)) = crafted(
        r#"
with tarfile.open(sys.argv[1], "w", format=tarfile.GNU_FORMAT) as t:
    def add(name, kind=tarfile.REGTYPE, link="", data=b""):
        ti = tarfile.TarInfo(name); ti.type = kind; ti.linkname = link; ti.mode = 0o644; ti.mtime = 1000000000; ti.size = len(data)
        t.addfile(ti, io.BytesIO(data) if data else None)
    add("top/d", tarfile.DIRTYPE)
    add("top/d/d1", data=b"d1")
    add("top/e", data=b"e")
    add("top/link-to-e", tarfile.SYMTYPE, link="e")
    add("top/hard-e", tarfile.LNKTYPE, link="top/e")
    add("top/d/../d2", data=b"through dot-dot")
"#,
    ) else {
        return;
    };
    let with_y = |dest: &Path| std::fs::create_dir(dest.join("y")).unwrap();
    for names in [&["top/d", "-C", "y", "top/e"][..], &["top/e", "-C", "y", "-C", "../z", "top/d"]] {
        let mk = |dest: &Path| {
            with_y(dest);
            std::fs::create_dir(dest.join("z")).unwrap();
        };
        same_as_gnu("-C among names", &archive, mk, Run { names, ..RUN });
    }
    for opts in [
        &["--transform=s/e/E/g", "-v"][..],
        &["--transform=s,^top,T,", "--transform=s/d/D/g", "-v", "--show-transformed-names"],
        &["--xform=s/e/X/S", "--strip-components=1", "-v", "--show-transformed-names"],
        &["--transform=flags=r;s/e/F/", "--one-top-level=one", "-v", "--show-transformed-names"],
        &["--transform=s/(d)([0-9])/\\U\\1-\\2/x", "-v"],
        &["--transform=s/\\(d\\)\\([0-9]\\)/\\u\\1_\\2/", "-v"],
    ] {
        same_as_gnu("transform", &archive, |_| {}, Run { opts, ..RUN });
    }
    let got = same_as_gnu("-P", &archive, |_| {}, Run { opts: &["-P", "-v"], names: &["top/d/../d2", "top/e"], ..RUN });
    assert_eq!(got.tree[Path::new("top/d2")].body, b"through dot-dot");

    // An absolute name lands where it says, with -P only.
    let target = d.path().join("abs/f");
    let abs = d.path().join("abs.tar");
    let program = format!(
        "with tarfile.open(sys.argv[1], 'w', format=tarfile.GNU_FORMAT) as t:\n    ti = tarfile.TarInfo({:?}); ti.size = 3; t.addfile(ti, io.BytesIO(b'abs'))",
        target.display().to_string()
    );
    python(&program, &abs);
    let inside = d.path().join("inside");
    std::fs::create_dir(&inside).unwrap();
    let gnu = Command::new("tar").arg("-C").arg(&inside).args(["-P", "-xf"]).arg(&abs).status().unwrap();
    assert!(gnu.success() && std::fs::read(&target).unwrap() == b"abs");
    std::fs::remove_file(&target).unwrap();
    let ours = cacheless_testkit::cacheless().args(["extract", "--no-sync", "-P", "-C"]).arg(&inside).arg(&abs).status().unwrap();
    assert!(ours.success());
    assert_eq!(std::fs::read(&target).unwrap(), b"abs");
    std::fs::remove_file(&target).unwrap();
    let ours = cacheless_testkit::cacheless().args(["extract", "--no-sync", "-C"]).arg(&inside).arg(&abs).status().unwrap();
    assert!(ours.success() && !target.exists() && inside.join(target.strip_prefix("/").unwrap()).exists(), "without -P it stays inside");
}

/// `-vv` lists members in GNU tar's long format: type and mode letters (set-ID and sticky
/// bits), owner/group by name or number (`--numeric-owner`), size or device numbers in a column
/// that widens as GNU's does, local time, the name, a link's target, and the folders made on
/// the way.
#[test]
fn long_listing_is_gnu_tars() {
    let Some((_d, archive)) = crafted(
        r#"
with tarfile.open(sys.argv[1], "w", format=tarfile.GNU_FORMAT) as t:
    def add(name, kind=tarfile.REGTYPE, mode=0o644, uid=0, gid=0, uname="root", gname="root", link="", data=b"", mtime=1000000000):
        ti = tarfile.TarInfo(name); ti.type = kind; ti.mode = mode; ti.uid = uid; ti.gid = gid; ti.linkname = link
        ti.uname = uname; ti.gname = gname; ti.mtime = mtime; ti.size = len(data)
        if kind == tarfile.CHRTYPE: ti.devmajor, ti.devminor = 1, 3
        t.addfile(ti, io.BytesIO(data) if data else None)
    add("deep/er/f", data=b"x" * 12345)
    add("suid", mode=0o4755, data=b"s")
    add("sgid-noexec", mode=0o2640, data=b"g")
    add("sticky", tarfile.DIRTYPE, mode=0o1777)
    add("sticky-noexec", tarfile.DIRTYPE, mode=0o1776)
    add("numbers", uid=123456789, gid=987654321, uname="", gname="", data=b"n")
    add("null", tarfile.CHRTYPE, mode=0o666)
    add("fifo", tarfile.FIFOTYPE, mode=0o600)
    add("link", tarfile.SYMTYPE, link="deep/er/f")
    add("hard", tarfile.LNKTYPE, link="suid")
    add("old", data=b"o", mtime=0)
"#,
    ) else {
        return;
    };
    for opts in [&["-vv"][..], &["-vv", "--numeric-owner"]] {
        let got = same_as_gnu("-vv", &archive, |_| {}, Run { opts, ..RUN });
        let out = String::from_utf8_lossy(&got.stdout).into_owned();
        assert!(out.contains("-rwsr-xr-x") && out.contains("Creating directory:"), "{opts:?}: {out}");
    }
    same_as_gnu("-vv", &archive, |_| {}, Run { opts: &["-vv", "--strip-components=1", "--show-transformed-names"], ..RUN });
}

/// GNU tar's warnings, in its words, and its exit status (0): a time stamp before 1970, one in
/// the future, an extended header keyword it does not know (`hdrcharset`, bsdtar's
/// `LIBARCHIVE.xattr.*`).
#[test]
fn gnu_tars_warnings_are_said_in_its_words() {
    if !gnu_tar() {
        return;
    }
    let Some((_d, archive)) = crafted(
        r#"
import time
with tarfile.open(sys.argv[1], "w", format=tarfile.PAX_FORMAT) as t:
    for name, mt in [("old", -1000), ("future", int(time.time()) + 100000), ("fine", 1000000000)]:
        ti = tarfile.TarInfo(name); ti.mtime = mt; ti.size = 1; t.addfile(ti, io.BytesIO(b"x"))
    ti = tarfile.TarInfo("kw"); ti.size = 1; ti.mtime = 1000000000
    ti.pax_headers = {"hdrcharset": "BINARY", "LIBARCHIVE.xattr.user.x": "eA", "foo.bar": "1"}
    t.addfile(ti, io.BytesIO(b"x"))
"#,
    ) else {
        return;
    };
    // The seconds to the future stamp differ between the two runs: compared up to them.
    let words = |err: &str, prefix: &str| -> Vec<String> {
        err.lines().filter_map(|l| l.strip_prefix(prefix)).map(|l| l.split(" is ").next().unwrap_or(l).to_string()).collect()
    };
    let got = same_as_gnu("warnings", &archive, |_| {}, RUN);
    let d = scratch();
    std::fs::create_dir(d.path().join("g")).unwrap();
    let gnu = extract_with(true, &archive, &d.path().join("g"), RUN);
    assert!(gnu.ok && got.ok);
    let want = words(&gnu.stderr, "tar: ");
    assert_eq!(want.len(), 5, "{}", gnu.stderr);
    assert_eq!(words(&got.stderr, "cacheless: warning: "), want, "{}", got.stderr);
}
