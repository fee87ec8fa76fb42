//! cacheless run as `cp` against GNU cp itself, case by case: each case builds the same tree
//! twice, runs GNU cp (`/bin/cp`) in one and cacheless (through a link named `cp`) in the other
//! with the same command line, umask and user, and compares the exit status, standard output,
//! standard error, and every entry of the two trees: type, mode (set-ID and sticky bits
//! included), owner, group, contents or link target, device number, which names share an inode,
//! extended attributes and ACLs, and the modification time (exact, or "now" where the copy set
//! it). The cases are the differences found by running GNU's own test suite and scripts
//! against cacheless: set-ID bits and the umask, writing through symlinks, files whose size
//! lies, existing destinations, special files, option parsing, and every GNU cp option.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cacheless_testkit::tree::{age, snapshot, twins, Node as Entry};
use cacheless_testkit::{require, root, scratch};

/// How a case is run.
#[derive(Clone, Copy)]
struct Run<'a> {
    args: &'a [&'a str],
    umask: u32,
    /// Run as this user (uid, gid, supplementary groups), not root.
    user: Option<(u32, u32, &'a [u32])>,
    /// Fed to standard input.
    stdin: &'a str,
    /// A shell command run beside cp (in the background, before it), such as a reader of a FIFO.
    beside: Option<&'a str>,
    /// cacheless replaces an existing file here where GNU writes it in place: the folder
    /// holding it gets a new modification time (and the file a new inode), nothing else differs.
    replaces: bool,
    /// What is left depends on the order of inode numbers, which differ between the two trees
    /// (a copy into itself stops where it meets itself): the trees are not compared.
    partial: bool,
    /// Several entries of one folder are listed (`-rv`): both copy a folder's entries in the
    /// order of their inode numbers, which differ between the two trees, so the lines are
    /// compared in any order.
    lines_in_any_order: bool,
}

const RUN: Run<'static> = Run { args: &[], umask: 0o022, user: None, stdin: "", beside: None, replaces: false, partial: false, lines_in_any_order: false };

/// What a run left and said.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    tree: BTreeMap<PathBuf, Entry>,
}

/// Runs `cp` (the one in `bin`) in `dir` as `run` says.
fn run_in(bin: &Path, dir: &Path, run: Run<'_>) -> Outcome {
    let since = {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
        (i64::try_from(t.as_secs()).unwrap() - 1, 0)
    };
    let mut script = format!("umask {:03o}; ", run.umask);
    if let Some(b) = run.beside {
        script.push_str(&format!("{b} & "));
    }
    script.push_str("cp \"$@\"; rc=$?; wait; exit $rc");
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(&script).arg("sh").args(run.args).current_dir(dir);
    cmd.env("PATH", format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()));
    cmd.env("LC_ALL", "C").env_remove("POSIXLY_CORRECT").env_remove("VERSION_CONTROL").env_remove("SIMPLE_BACKUP_SUFFIX");
    if let Some((u, g, groups)) = run.user {
        let gs: Vec<String> = groups.iter().map(u32::to_string).collect();
        let mut c = Command::new("setpriv");
        c.args([format!("--reuid={u}"), format!("--regid={g}"), format!("--groups={}", if gs.is_empty() { g.to_string() } else { gs.join(",") })]);
        c.arg("--").arg("sh").arg("-c").arg(&script).arg("sh").args(run.args).current_dir(dir);
        c.env("PATH", format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()));
        c.env("LC_ALL", "C").env_remove("POSIXLY_CORRECT").env_remove("VERSION_CONTROL").env_remove("SIMPLE_BACKUP_SUFFIX");
        cmd = c;
    }
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    {
        use std::io::Write;
        let mut i = child.stdin.take().unwrap();
        let _ = i.write_all(run.stdin.as_bytes());
    }
    let out = child.wait_with_output().unwrap();
    Outcome {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        tree: snapshot(dir, since),
    }
}

/// The two `cp`s: GNU's and cacheless, each as a link named `cp` in a folder of its own.
struct Cps {
    gnu: PathBuf,
    ours: PathBuf,
    _dir: tempfile::TempDir,
}

fn cps() -> Option<Cps> {
    let gnu_cp = Path::new("/bin/cp");
    let v = Command::new(gnu_cp).arg("--version").output().ok()?;
    if !require("peers", if String::from_utf8_lossy(&v.stdout).contains("GNU coreutils") { Ok(()) } else { Err("no GNU cp at /bin/cp to compare with".into()) })
    {
        return None;
    }
    let d = scratch();
    let (gnu, ours) = (d.path().join("gnu"), d.path().join("ours"));
    for (dir, target) in [(&gnu, gnu_cp.to_path_buf()), (&ours, cacheless_testkit::bin("cacheless"))] {
        std::fs::create_dir(dir).unwrap();
        std::os::unix::fs::symlink(target, dir.join("cp")).unwrap();
    }
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    Some(Cps { gnu, ours, _dir: d })
}

/// Builds the same tree with `setup` in two folders, runs GNU cp in one and cacheless in the
/// other, and checks that they end the same. Returns cacheless's outcome.
fn same_as_gnu(cps: &Cps, name: &str, setup: impl Fn(&Path), run: Run<'_>) -> Outcome {
    let (_d, g, o) = twins(setup, run.user.map(|(u, gid, _)| (u, gid)));
    let want = run_in(&cps.gnu, &g, run);
    let got = run_in(&cps.ours, &o, run);
    let what = format!("{name}: cp {}", run.args.join(" "));
    assert_eq!(got.code, want.code, "{what}: exit status; GNU said {:?}, we said {:?}", want.stderr, got.stderr);
    if run.lines_in_any_order {
        let sorted = |s: &str| {
            let mut v: Vec<&str> = s.lines().collect();
            v.sort_unstable();
            v.join("\n")
        };
        assert_eq!(sorted(&got.stdout), sorted(&want.stdout), "{what}: standard output");
    } else {
        assert_eq!(got.stdout, want.stdout, "{what}: standard output");
    }
    assert_eq!(got.stderr, want.stderr, "{what}: standard error");
    if run.partial {
        return got;
    }
    for (p, w) in &want.tree {
        let Some(e) = got.tree.get(p) else { panic!("{what}: {} missing (GNU made {w:?})", p.display()) };
        if run.replaces && w.kind == "dir" {
            assert_eq!(Entry { mtime: None, ..e.clone() }, Entry { mtime: None, ..w.clone() }, "{what}: {}", p.display());
        } else {
            assert_eq!(e, w, "{what}: {}", p.display());
        }
    }
    let extra: Vec<&PathBuf> = got.tree.keys().filter(|p| !want.tree.contains_key(*p)).collect();
    assert!(extra.is_empty(), "{what}: entries GNU did not make: {extra:?}");
    got
}

fn chown(p: &Path, u: u32, g: u32) {
    rustix::fs::chownat(rustix::fs::CWD, p, Some(rustix::fs::Uid::from_raw(u)), Some(rustix::fs::Gid::from_raw(g)), rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        .unwrap();
}

fn write(p: &Path, data: &str, mode: u32) {
    std::fs::write(p, data).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn mkdir(p: &Path, mode: u32) {
    std::fs::create_dir_all(p).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn symlink(target: &str, p: &Path) {
    std::os::unix::fs::symlink(target, p).unwrap();
}

fn mkfifo(p: &Path, mode: u32) {
    rustix::fs::mknodat(rustix::fs::CWD, p, rustix::fs::FileType::Fifo, rustix::fs::Mode::from_raw_mode(mode), 0).unwrap();
}

fn set_xattr(p: &Path, name: &str, value: &[u8]) -> bool {
    rustix::fs::lsetxattr(p, name, value, rustix::fs::XattrFlags::empty()).is_ok()
}

fn setfacl(args: &[&str], p: &Path) {
    let ok = Command::new("setfacl").args(args).arg(p).status().is_ok_and(|s| s.success());
    assert!(ok, "setfacl {args:?} {}", p.display());
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A plain copy keeps no set-ID bit and applies the umask; `-r` applies it to a whole tree.
#[test]
fn set_id_bits_and_the_umask_are_as_gnu_cp_leaves_them() {
    let Some(c) = cps() else { return };
    let tree = |d: &Path| {
        write(&d.join("suid"), "x", 0o4755);
        write(&d.join("sgid"), "y", 0o2750);
        write(&d.join("f"), "z", 0o644);
        mkdir(&d.join("t/sub"), 0o777);
        write(&d.join("t/sub/g"), "g", 0o777);
        mkdir(&d.join("sticky"), 0o1777);
        std::fs::set_permissions(d.join("t"), std::fs::Permissions::from_mode(0o777)).unwrap();
        mkdir(&d.join("sg"), 0o2750);
        write(&d.join("sg/inner"), "i", 0o644);
    };
    if is_root() {
        same_as_gnu(
            &c,
            "owned",
            |d| {
                tree(d);
                chown(&d.join("suid"), 1234, 1234);
            },
            Run { args: &["suid", "c1"], ..RUN },
        );
    }
    same_as_gnu(&c, "plain", tree, Run { args: &["suid", "sgid", "f", "t"], ..RUN });
    same_as_gnu(&c, "umask 077", tree, Run { args: &["f", "suid", "t"], umask: 0o077, ..RUN });
    same_as_gnu(&c, "tree", tree, Run { args: &["-r", "t", "sticky", "sg", "suid", "f", "."], ..RUN });
    same_as_gnu(&c, "tree into a new folder", tree, Run { args: &["-r", "t", "t2"], umask: 0o027, ..RUN });
    same_as_gnu(&c, "-p keeps them", tree, Run { args: &["-rp", "t", "sticky", "sg", "c"], ..RUN });
    same_as_gnu(&c, "--no-preserve=mode", tree, Run { args: &["-a", "--no-preserve=mode", "t", "sticky", "sg", "c2"], ..RUN });
}

/// As another user: `-a` of a root-owned set-ID file drops the bits (the owner cannot be kept);
/// a file of one of the user's other groups keeps its group.
#[test]
fn archive_copies_by_another_user_keep_what_gnu_cp_keeps() {
    let Some(c) = cps() else { return };
    if !require("root", root()) {
        return;
    }
    let tree = |d: &Path| {
        write(&d.join("suid"), "x", 0o6755);
        write(&d.join("grp"), "y", 0o640);
        write(&d.join("mine"), "z", 0o4700);
        mkdir(&d.join("out"), 0o755);
    };
    let fix = |d: &Path| {
        tree(d);
        chown(d, 1234, 1234);
        chown(&d.join("out"), 1234, 1234);
        chown(&d.join("mine"), 1234, 1234);
        chown(&d.join("grp"), 0, 4242);
        chown(&d.join("suid"), 0, 0);
    };
    let user = Some((1234, 1234, &[1234u32, 4242][..]));
    same_as_gnu(&c, "-a as another user", fix, Run { args: &["-a", "suid", "grp", "mine", "out"], user, ..RUN });
    same_as_gnu(&c, "-p as another user", fix, Run { args: &["-p", "suid", "grp", "mine", "out"], user, ..RUN });
}

/// Never through a symlink the copy made, nor through a dangling or looping one named as the
/// destination.
#[test]
fn symlinks_in_the_destination_are_written_through_where_gnu_writes_and_refused_where_gnu_refuses() {
    let Some(c) = cps() else { return };
    let abuse = |d: &Path| {
        for x in ["a", "b", "c"] {
            mkdir(&d.join(x), 0o755);
        }
        symlink("../t", &d.join("a/1"));
        write(&d.join("b/1"), "payload", 0o644);
        write(&d.join("t"), "precious", 0o644);
        write(&d.join("f"), "data", 0o644);
        symlink("nowhere", &d.join("dangle"));
        symlink("loop", &d.join("loop"));
        symlink("t", &d.join("to-t"));
    };
    for args in [&["-r", "a/1", "b/1", "c"][..], &["-a", "a/1", "b/1", "c"], &["f", "dangle"], &["f", "loop"], &["-f", "f", "loop"], &["f", "to-t"]] {
        same_as_gnu(&c, "symlinks", abuse, Run { args, ..RUN });
    }
    // Inside a destination tree, an existing symlink is written through for a regular file, as
    // GNU writes through it; a dangling one is refused at the open, as GNU refuses it; one this
    // copy made (two sources meeting at one name) is never written through, and a symlink
    // source replaces a symlink there.
    let inside = |d: &Path| {
        mkdir(&d.join("src"), 0o755);
        write(&d.join("src/x"), "new", 0o644);
        write(&d.join("src/y"), "new y", 0o644);
        symlink("elsewhere", &d.join("src/z"));
        mkdir(&d.join("dst/src"), 0o755);
        write(&d.join("outside"), "precious", 0o644);
        symlink("../../outside", &d.join("dst/src/x"));
        symlink("../../nothing", &d.join("dst/src/y"));
        symlink("../../outside", &d.join("dst/src/z"));
        mkdir(&d.join("s1/t"), 0o755);
        symlink("../../outside", &d.join("s1/t/f"));
        mkdir(&d.join("s2/t"), 0o755);
        write(&d.join("s2/t/f"), "second", 0o644);
        mkdir(&d.join("meet"), 0o755);
    };
    for args in [&["-r", "src", "dst"][..], &["-a", "src", "dst"], &["-r", "s1/t", "meet"]] {
        same_as_gnu(&c, "symlinks inside the destination", inside, Run { args, ..RUN });
    }
    let d = scratch();
    inside(d.path());
    let out = cacheless_testkit::cacheless().args(["cp", "-r", "src", "dst"]).current_dir(d.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(d.path().join("outside")).unwrap(), b"new", "written through, as GNU writes");
    // Two sources meeting inside the tree: GNU writes the second through the link the first
    // just made (here, out of the destination); cacheless refuses, as GNU itself refuses for a
    // destination named on the command line (docs/cp.md).
    let d = scratch();
    inside(d.path());
    let out = cacheless_testkit::cacheless().args(["cp", "-r", "s1/t", "s2/t", "meet"]).current_dir(d.path()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("will not copy 's2/t/f' through just-created symlink 'meet/t/f'"), "{err}");
    assert_eq!(std::fs::read(d.path().join("outside")).unwrap(), b"precious");
}

/// Files whose size lies (procfs, sysfs), standard input and /dev/null are read to their end.
#[test]
fn files_whose_size_lies_are_copied_whole() {
    let Some(c) = cps() else { return };
    let base = |d: &Path| write(&d.join("x"), "old contents", 0o644);
    for args in
        [&["/proc/version", "v"][..], &["/sys/kernel/mm/transparent_hugepage/enabled", "thp"], &["/dev/null", "x"], &["/dev/stdin", "in"], &["-", "dash"]]
    {
        if !Path::new(args[0]).exists() && args[0] != "-" {
            continue;
        }
        same_as_gnu(&c, "lying sizes", base, Run { args, stdin: "from standard input\n", ..RUN });
    }
}

/// FIFOs, devices and sockets in a tree are made anew by `-r` and `-a`; `--copy-contents`
/// reads a FIFO instead; without `-r` a FIFO is read.
#[test]
fn special_files_are_recreated_or_read_as_gnu_cp_does() {
    let Some(c) = cps() else { return };
    let tree = |d: &Path| {
        mkdir(&d.join("d"), 0o755);
        mkfifo(&d.join("d/fifo"), 0o640);
        if is_root() {
            rustix::fs::mknodat(
                rustix::fs::CWD,
                d.join("d/null"),
                rustix::fs::FileType::CharacterDevice,
                rustix::fs::Mode::from_raw_mode(0o666),
                rustix::fs::makedev(1, 3),
            )
            .unwrap();
        }
        let _ = std::os::unix::net::UnixListener::bind(d.join("d/sock"));
        mkfifo(&d.join("feed"), 0o600);
    };
    same_as_gnu(&c, "-r", tree, Run { args: &["-r", "d", "e"], ..RUN });
    same_as_gnu(&c, "-a", tree, Run { args: &["-a", "d", "e"], ..RUN });
    same_as_gnu(&c, "a FIFO read", tree, Run { args: &["feed", "got"], beside: Some("echo fed > feed"), ..RUN });
    same_as_gnu(&c, "--copy-contents", tree, Run { args: &["-r", "--copy-contents", "feed", "got"], beside: Some("echo fed > feed"), ..RUN });
}

/// An existing destination keeps its owner, mode, ACL and extended attributes (unless `-p`
/// takes the source's), its other hard links see the new data, a FIFO is written into, an
/// existing folder keeps its mode.
#[test]
fn existing_destinations_end_as_gnu_cp_leaves_them() {
    let Some(c) = cps() else { return };
    let tree = |d: &Path| {
        write(&d.join("src"), "the new data, longer than the old", 0o644);
        write(&d.join("dst"), "old", 0o600);
        if is_root() {
            chown(&d.join("dst"), 65534, 65534);
        }
        let _ = set_xattr(&d.join("dst"), "user.kept", b"yes");
        write(&d.join("hl"), "old", 0o640);
        std::fs::hard_link(d.join("hl"), d.join("hl2")).unwrap();
        mkfifo(&d.join("pipe"), 0o644);
        mkdir(&d.join("srcdir/sub"), 0o755);
        write(&d.join("srcdir/sub/f"), "f", 0o644);
        mkdir(&d.join("dstdir"), 0o700);
        mkdir(&d.join("dstdir/sub"), 0o711);
        write(&d.join("acl"), "old", 0o640);
        write(&d.join("ro"), "old", 0o444);
    };
    let with_acl = |d: &Path| {
        tree(d);
        if Command::new("setfacl").arg("--version").output().is_ok() {
            setfacl(&["-m", "u:1234:rw"], &d.join("acl"));
        }
    };
    same_as_gnu(&c, "owner and mode", tree, Run { args: &["src", "dst"], ..RUN });
    same_as_gnu(&c, "-p over it", tree, Run { args: &["-p", "src", "dst"], ..RUN });
    same_as_gnu(&c, "hard links", tree, Run { args: &["src", "hl"], ..RUN });
    same_as_gnu(&c, "-a onto hard links", tree, Run { args: &["-a", "src", "hl"], ..RUN });
    same_as_gnu(&c, "ACL", with_acl, Run { args: &["src", "acl"], ..RUN });
    same_as_gnu(&c, "FIFO", tree, Run { args: &["src", "pipe"], beside: Some("cat pipe > got"), ..RUN });
    same_as_gnu(&c, "folder", tree, Run { args: &["-r", "srcdir/.", "dstdir/"], ..RUN });
    if is_root() {
        same_as_gnu(&c, "read-only, as root", tree, Run { args: &["src", "ro"], ..RUN });
    }
    let user = Some((1234, 1234, &[1234u32][..]));
    same_as_gnu(&c, "read-only", tree, Run { args: &["src", "ro"], user, ..RUN });
    same_as_gnu(&c, "read-only, -f", tree, Run { args: &["-f", "src", "ro"], user, ..RUN });
    same_as_gnu(&c, "read-only, --remove-destination", tree, Run { args: &["--remove-destination", "src", "ro"], user, ..RUN });
    // A folder the user may not write: the file in it is written in place.
    let locked = |d: &Path| {
        tree(d);
        mkdir(&d.join("locked"), 0o755);
        write(&d.join("locked/f"), "old", 0o666);
        chown(&d.join("locked"), 0, 0);
        chown(&d.join("locked/f"), 0, 0);
    };
    if is_root() {
        same_as_gnu(&c, "a folder the user may not write", locked, Run { args: &["src", "locked/f"], user, ..RUN });
    }
}

/// `-u` goes by time alone; times are the copy's own unless kept; a destination named with a
/// trailing slash must be a folder.
#[test]
fn update_times_and_trailing_slashes_are_gnu_cp_s() {
    let Some(c) = cps() else { return };
    let tree = |d: &Path| {
        write(&d.join("f"), "source", 0o644);
        write(&d.join("newer"), "a longer destination", 0o644);
        write(&d.join("older"), "old", 0o644);
    };
    let times = |d: &Path| {
        tree(d);
        age(d);
        let set = |p: &Path, s: i64| {
            let t = rustix::fs::Timespec { tv_sec: s, tv_nsec: 0 };
            rustix::fs::utimensat(rustix::fs::CWD, p, &rustix::fs::Timestamps { last_access: t, last_modification: t }, rustix::fs::AtFlags::empty()).unwrap();
        };
        set(&d.join("f"), 1_100_000_000);
        set(&d.join("newer"), 1_200_000_000);
        set(&d.join("older"), 1_000_000_000);
    };
    same_as_gnu(&c, "-u", times, Run { args: &["-u", "f", "newer"], ..RUN });
    same_as_gnu(&c, "-u older", times, Run { args: &["-u", "f", "older"], ..RUN });
    same_as_gnu(&c, "times", times, Run { args: &["f", "copy"], ..RUN });
    same_as_gnu(&c, "slash", tree, Run { args: &["f", "nonexist/"], ..RUN });
    same_as_gnu(&c, "slash on a file", tree, Run { args: &["f", "older/"], ..RUN });
}

/// `-au` onto a partly copied tree keeps the source's hard links as hard links.
#[test]
fn archive_update_onto_a_partial_copy_keeps_hard_links() {
    let Some(c) = cps() else { return };
    let tree = |d: &Path| {
        mkdir(&d.join("s/sub"), 0o755);
        write(&d.join("s/a"), "linked", 0o644);
        std::fs::hard_link(d.join("s/a"), d.join("s/sub/b")).unwrap();
        std::fs::hard_link(d.join("s/a"), d.join("s/c")).unwrap();
        write(&d.join("s/other"), "other", 0o644);
        // A partial copy: one name of the linked file there already.
        mkdir(&d.join("t/sub"), 0o755);
        write(&d.join("t/a"), "linked", 0o644);
    };
    same_as_gnu(&c, "-au", tree, Run { args: &["-au", "s/.", "t"], ..RUN });
    // Sixteen names of one file, each already in the destination as a separate file newer than
    // the source: the one met first is kept and the others become links to it. GNU meets the
    // names of one inode in the order the directory lists them, which is not name order (ext4
    // lists by hash, tmpfs newest first), so a copy that met them by name kept another one.
    let names: Vec<String> = (0..16).map(|i| format!("x{i:02}")).collect();
    let links = |d: &Path| {
        // The sources lie deeper than the destinations, so that `age` makes them older.
        mkdir(&d.join("s/d/e"), 0o755);
        mkdir(&d.join("t/d"), 0o755);
        write(&d.join("s/d/e").join(&names[0]), "linked", 0o644);
        for n in &names[1..] {
            std::fs::hard_link(d.join("s/d/e").join(&names[0]), d.join("s/d/e").join(n)).unwrap();
        }
        for n in &names {
            write(&d.join("t/d").join(n), "linked", 0o644);
        }
    };
    same_as_gnu(&c, "-au links", links, Run { args: &["-au", "s/d/e/.", "t/d"], ..RUN });
    same_as_gnu(&c, "-auv links", links, Run { args: &["-auv", "s/d/e/.", "t/d"], lines_in_any_order: true, ..RUN });
}

/// GNU's option parsing: the last of repeated options wins, prefixes of long options, `--`,
/// `-n` with `-u`, and GNU's usage errors with exit status 1; `-v` on standard output.
#[test]
fn command_lines_are_read_as_gnu_cp_reads_them() {
    let Some(c) = cps() else { return };
    let tree = |d: &Path| {
        write(&d.join("f"), "data", 0o644);
        write(&d.join("g"), "other", 0o644);
        mkdir(&d.join("d/e"), 0o755);
        write(&d.join("d/e/h"), "h", 0o644);
        write(&d.join("-x"), "dash", 0o644);
    };
    for args in [
        &["-r", "-r", "d", "d2"][..],
        &["--reflink=auto", "--reflink=never", "f", "f2"],
        &["--recur", "--verb", "d", "d3"],
        &["-n", "-u", "f", "g"],
        &["-u", "-n", "f", "g"],
        &["-i", "-n", "f", "g"],
        &["-v", "f", "g", "d"],
        &["--", "-x", "y"],
        &["--bogus", "f", "g"],
        &["-z", "f", "g"],
        &["--re", "f", "g"],
        &["--verbose=yes", "f", "g"],
        &["-t"],
        &["--target-directory"],
        &[],
        &["f"],
        &["-T", "f", "g", "d"],
        &["-t", "d", "-T", "f"],
        &["-t", "d", "-t", "d", "f"],
        &["--sparse=sometimes", "f", "g"],
        &["--sparse=a", "f", "g"],
        &["--sparse=al", "f", "g2"],
        &["--preserve=nothing", "f", "g"],
        &["--backup=bogus", "f", "g"],
        &["-l", "-s", "f", "g"],
        &["-b", "-n", "f", "g"],
        &["--reflink", "--sparse=never", "f", "g"],
        &["f", "g", "nonexistent"],
        &["f", "g", "f"],
        &["d", "x"],
        &["--parents", "f", "g"],
    ] {
        same_as_gnu(&c, "command line", tree, Run { args, ..RUN });
    }
    same_as_gnu(&c, "command line", tree, Run { args: &["-rv", "d", "d4"], lines_in_any_order: true, ..RUN });
}

/// Every other GNU cp option, each against GNU cp.
#[test]
fn every_gnu_cp_option_gives_gnu_cp_s_result() {
    let Some(c) = cps() else { return };
    let tree = |d: &Path| {
        mkdir(&d.join("d/sub"), 0o750);
        write(&d.join("d/sub/f"), "f", 0o640);
        write(&d.join("d/g"), "g", 0o604);
        symlink("g", &d.join("d/lg"));
        symlink("sub", &d.join("d/ldir"));
        write(&d.join("f"), "data", 0o644);
        write(&d.join("f~"), "older backup", 0o644);
        write(&d.join("g"), "existing", 0o644);
        write(&d.join("g.~2~"), "a numbered backup", 0o644);
        symlink("f", &d.join("lf"));
        symlink("d", &d.join("ld"));
        mkdir(&d.join("dst"), 0o755);
        write(&d.join("dst/g"), "existing in dst", 0o644);
        mkdir(&d.join("a/b"), 0o700);
        write(&d.join("a/b/c"), "deep", 0o600);
        let _ = set_xattr(&d.join("f"), "user.color", b"blue");
    };
    for args in [
        &["-p", "f", "p"][..],
        &["--preserve", "f", "p"],
        &["--preserve=mode,timestamps", "f", "p"],
        &["--preserve=xattr", "f", "p"],
        &["--preserve=links", "-r", "d", "p"],
        &["--preserve=all", "-r", "d", "p"],
        &["-a", "--no-preserve=timestamps,ownership", "d", "p"],
        &["-d", "lf", "p"],
        &["-P", "lf", "p"],
        &["-L", "-r", "d", "p"],
        &["-H", "-r", "ld", "p"],
        &["-r", "ld", "p"],
        &["-rL", "ld", "p"],
        &["-f", "f", "g"],
        &["--remove-destination", "f", "g"],
        &["-l", "f", "p"],
        &["-rl", "d", "p"],
        &["-s", "f", "p"],
        &["-s", "f", "dst/p"],
        &["-s", "/nonexistent", "dst/p"],
        &["-sf", "f", "g"],
        &["-b", "f", "g"],
        &["--backup=numbered", "f", "g"],
        &["--backup=existing", "f", "g"],
        &["--backup=simple", "-S", ".bak", "f", "g"],
        &["--backup=none", "f", "g"],
        &["-b", "f", "dst"],
        &["-bf", "f", "f"],
        &["--backup=numbered", "-f", "f", "f"],
        &["-v", "-b", "f", "g"],
        &["-t", "dst", "f", "g"],
        &["--target-directory=dst", "-r", "d"],
        &["-T", "f", "dst/f"],
        &["-rT", "d", "dst"],
        &["--parents", "a/b/c", "dst"],
        &["--parents", "-v", "a/b/c", "dst"],
        &["--parents", "-p", "a/b/c", "dst"],
        &["--attributes-only", "f", "g"],
        &["--attributes-only", "-p", "f", "p"],
        &["--strip-trailing-slashes", "-r", "d/", "p"],
        &["-x", "-r", "d", "p"],
        &["f", "f"],
        &["f", "lf"],
        &["lf", "f"],
    ] {
        same_as_gnu(&c, "option", tree, Run { args, ..RUN });
    }
    for args in [&["-rv", "d", "dst"][..], &["-v", "-r", "d/.", "dst"]] {
        same_as_gnu(&c, "option", tree, Run { args, lines_in_any_order: true, ..RUN });
    }
    for args in [&["-r", "d", "d/sub"][..], &["-r", "d", "d"]] {
        same_as_gnu(&c, "into itself", tree, Run { args, partial: true, ..RUN });
    }
    // Over an existing file in a folder of the tree (GNU writes it in place; cacheless replaces
    // it with a complete copy carrying its attributes).
    same_as_gnu(&c, "replaced", tree, Run { args: &["-T", "f", "dst/g"], replaces: true, ..RUN });
    same_as_gnu(&c, "replaced by -p", tree, Run { args: &["-p", "f", "dst/g"], replaces: true, ..RUN });
    // -i: asked on standard error, answered on standard input.
    for answer in ["n\n", "y\n", ""] {
        same_as_gnu(&c, "-i", tree, Run { args: &["-i", "f", "g"], stdin: answer, ..RUN });
    }
    let user = Some((1234, 1234, &[1234u32][..]));
    let ro = |d: &Path| {
        tree(d);
        std::fs::set_permissions(d.join("g"), std::fs::Permissions::from_mode(0o444)).unwrap();
    };
    if is_root() {
        same_as_gnu(&c, "-i unwritable", ro, Run { args: &["-i", "f", "g"], stdin: "y\n", user, ..RUN });
        same_as_gnu(&c, "-if unwritable", ro, Run { args: &["-if", "f", "g"], stdin: "y\n", user, ..RUN });
    }
}

/// A name with a newline, a quote or a terminal escape is quoted in messages as GNU quotes it.
#[test]
fn odd_names_are_quoted_in_messages_as_gnu_quotes_them() {
    let Some(c) = cps() else { return };
    let names: [&OsStr; 5] = [OsStr::new("it's"), OsStr::new("a\nb"), OsStr::new("\x1b[2J"), OsStr::from_bytes(b"\xff"), OsStr::new("sp ace")];
    for n in names {
        let d = scratch();
        let missing = d.path().join(n);
        let run = |bin: &Path| Command::new(bin.join("cp")).arg(&missing).arg(d.path()).env("LC_ALL", "C").output().unwrap();
        let (want, got) = (run(&c.gnu), run(&c.ours));
        let norm = |o: &std::process::Output, bin: &Path| String::from_utf8_lossy(&o.stderr).replace(&bin.join("cp").display().to_string(), "cp");
        assert_eq!(norm(&got, &c.ours), norm(&want, &c.gnu), "{n:?}");
        assert_eq!(got.status.code(), want.status.code());
    }
}
