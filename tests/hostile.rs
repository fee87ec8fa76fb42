//! What a hostile or careless user does to the command line: files whose size lies, sources
//! that change while they are read, arguments past every bound, names no terminal should see,
//! signals during slow work. Each asserts the outcome a careful tool gives (GNU's where there is
//! a GNU peer), not just that nothing crashed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use cacheless_testkit::tree::paths;
use cacheless_testkit::{interrupt, require, scratch};

fn bin() -> Command {
    cacheless_testkit::cacheless()
}

/// Runs `cmd` and fails the test if it has not finished within `limit` (a spin or a hang).
/// Its output is read as it comes, so a full pipe never holds it up.
fn within(cmd: &mut Command, limit: Duration) -> Output {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = rustix::process::Pid::from_child(&child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output().unwrap()));
    match rx.recv_timeout(limit) {
        Ok(out) => out,
        Err(_) => {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            panic!("{cmd:?} still running after {limit:?}");
        }
    }
}

fn sha256sum(p: &Path) -> String {
    let out = Command::new("sha256sum").arg(p).output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

/// Names left in `dir` besides `keep` (temporaries a run should have removed).
fn others(dir: &Path, keep: &[&str]) -> Vec<String> {
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| !keep.contains(&n.as_str())).collect()
}

/// proc and sysfs files say 0 or 4096 bytes whatever they hold, and a FIFO says 0: `cat`,
/// `hash` and `cp` read each to its end (what GNU cat and sha256sum give), never spin on a
/// read that returns nothing, never stop at the size stat gave.
#[test]
fn files_whose_size_lies_are_read_to_their_end_by_every_command() {
    let d = scratch();
    let files: Vec<PathBuf> =
        ["/proc/sys/kernel/hostname", "/proc/version", "/sys/kernel/mm/transparent_hugepage/enabled", "/sys/kernel/mm/transparent_hugepage/defrag"]
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.exists())
            .collect();
    assert!(!files.is_empty(), "no proc file to read");
    for p in &files {
        let want = std::fs::read(p).unwrap();
        let out = within(bin().arg("cat").arg(p), Duration::from_secs(20));
        assert!(out.status.success(), "cat {}: {}", p.display(), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.stdout, want, "cat {}", p.display());
        let out = within(bin().arg("hash").arg(p), Duration::from_secs(20));
        assert!(out.status.success());
        assert_eq!(String::from_utf8(out.stdout).unwrap(), sha256sum(p), "hash {}", p.display());
        let dst = d.path().join("copy");
        let out = within(bin().arg("cp").arg(p).arg(&dst), Duration::from_secs(20));
        assert!(out.status.success(), "cp {}: {}", p.display(), String::from_utf8_lossy(&out.stderr));
        assert_eq!(std::fs::read(&dst).unwrap(), want, "cp {}", p.display());
        std::fs::remove_file(&dst).unwrap();
    }
    // A FIFO: what the writer sent, hashed as sha256sum hashes it from a pipe.
    let fifo = d.path().join("fifo");
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251).to_le_bytes()[0]).collect();
    std::fs::write(d.path().join("plain"), &data).unwrap();
    for cmd in ["hash", "cat"] {
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::from_raw_mode(0o600), 0).unwrap();
        let (w, sent) = (fifo.clone(), data.clone());
        let writer = std::thread::spawn(move || std::fs::write(w, sent).unwrap());
        let out = within(bin().arg(cmd).arg(&fifo), Duration::from_secs(20));
        writer.join().unwrap();
        assert!(out.status.success(), "{cmd} of a FIFO: {}", String::from_utf8_lossy(&out.stderr));
        if cmd == "hash" {
            let want = sha256sum(&d.path().join("plain"));
            assert_eq!(String::from_utf8(out.stdout).unwrap().split_whitespace().next(), want.split_whitespace().next());
        } else {
            assert!(out.stdout == data);
        }
        std::fs::remove_file(&fifo).unwrap();
    }
}

/// A source truncated or extended while `cp` copies it (slowed by `--bwlimit` so the change
/// lands mid-copy) fails with exit 1 and an error naming it; nothing is left under the
/// destination's name, nor any temporary.
#[test]
fn a_source_that_changes_during_cp_is_an_error_naming_it() {
    for shrink in [true, false] {
        let d = scratch();
        let src = d.path().join("src");
        std::fs::write(&src, vec![7u8; 16 << 20]).unwrap();
        let child = bin().args(["cp", "--bwlimit", "8M"]).arg(&src).arg(d.path().join("dst")).stderr(Stdio::piped()).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(600));
        let f = std::fs::OpenOptions::new().write(true).open(&src).unwrap();
        f.set_len(if shrink { 3 << 20 } else { 20 << 20 }).unwrap();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "shrink={shrink}: {err}");
        assert!(err.contains("changed as it was read") && err.contains("src"), "{err}");
        assert_eq!(others(d.path(), &["src"]), Vec::<String>::new(), "shrink={shrink}");
    }
}

/// Sizes, depths and thread counts past what any job can use are usage errors (exit 2; `cp`'s
/// own parser, GNU's, exits 1) that name the flag, before anything is allocated: never an
/// abort, a panic or the OOM killer. A budget past the machine's memory is clamped to it.
#[test]
fn arguments_past_their_bounds_are_usage_errors() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::write(&src, vec![1u8; 1 << 20]).unwrap();
    let s = src.to_str().unwrap();
    let dst = d.path().join("dst");
    let t = dst.to_str().unwrap();
    let cases: &[(&[&str], i32, &str)] = &[
        (&["pack", "--frame-size", "100G", "-o", t, s], 2, "--frame-size"),
        (&["pack", "--read-threads", "40000", "-o", t, s], 2, "--read-threads"),
        (&["pack", "--threads", "0", "-o", t, s], 2, "--threads"),
        (&["--queue-depth", "1000000", "cat", s], 2, "--queue-depth"),
        (&["--block-size", "100G", "cat", s], 2, "--block-size"),
        (&["--memory", "0", "hash", s], 2, "--memory"),
        (&["extract", "--decompress-threads", "99999", t], 2, "--decompress-threads"),
        (&["cp", "--bwlimit", "0.5", s, t], 1, "--bwlimit"),
        (&["cp", "--threads", "40000", s, t], 1, "--threads"),
        // A flag every command takes: refused before cp's own parser sees it.
        (&["cp", "--queue-depth", "1000000", s, t], 2, "--queue-depth"),
    ];
    for (args, code, flag) in cases {
        let out = within(bin().args(*args), Duration::from_secs(30));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {err}");
        assert!(err.contains(flag) && !err.contains("panicked"), "{args:?}: {err}");
        assert!(!dst.exists(), "{args:?} wrote something");
    }
    // Clamped, not refused: the copy is done with what the machine has.
    let out = within(bin().args(["--queue-depth", "4096", "--memory", "100T", "cp", s, t]), Duration::from_secs(60));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(&dst).unwrap(), std::fs::read(&src).unwrap());
    // --bwlimit 0 is no limit, as rsync's.
    std::fs::remove_file(&dst).unwrap();
    let out = within(bin().args(["cp", "--bwlimit", "0", s, t]), Duration::from_secs(60));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `--json` reports a name that is not UTF-8 (escaped, `\377`) instead of panicking after the
/// work or printing nothing: cp, hash, info and evict alike.
#[test]
fn json_reports_names_that_are_not_utf8() {
    let d = scratch();
    let name = std::ffi::OsStr::from_bytes(b"bad\xff");
    let src = d.path().join(name);
    std::fs::write(&src, b"data").unwrap();
    for args in [vec!["cp"], vec!["hash"], vec!["info"], vec!["evict"]] {
        let mut cmd = bin();
        cmd.arg("--json").args(&args).arg(&src);
        if args[0] == "cp" {
            cmd.arg(d.path().join("copy"));
        }
        let out = within(&mut cmd, Duration::from_secs(30));
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        let text = v.to_string();
        assert!(text.contains(r"bad\\377"), "{args:?}: {text}");
    }
    assert_eq!(std::fs::read(d.path().join("copy")).unwrap(), b"data");
}

/// A slow `--bwlimit` (1 KiB/s: hours for a 10 MiB file) stops within a second of SIGINT or
/// SIGTERM, with 130 or 143, and leaves nothing behind.
#[test]
fn a_rate_limited_copy_stops_at_once_on_a_signal() {
    for (sig, code) in [(rustix::process::Signal::INT, 130), (rustix::process::Signal::TERM, 143)] {
        let d = scratch();
        let src = d.path().join("src");
        std::fs::write(&src, vec![3u8; 10 << 20]).unwrap();
        let child = bin().args(["cp", "--bwlimit", "1k"]).arg(&src).arg(d.path().join("dst")).stderr(Stdio::piped()).spawn().unwrap();
        let t0 = Instant::now();
        let out = interrupt(child, Duration::from_millis(500), sig);
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        assert_eq!(out.status.code(), Some(code), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(others(d.path(), &["src"]), Vec::<String>::new());
    }
}

/// A call that waits for another process for ever ends on SIGINT or SIGTERM within a second,
/// with 130 or 143 and nothing left, as GNU cp and tar end: a FIFO with no writer as the
/// source, a FIFO with no reader as an existing destination, an archive on standard input
/// whose writer stalls, an archive that is a FIFO with no writer.
#[test]
fn a_call_waiting_on_a_fifo_or_a_pipe_ends_on_a_signal() {
    use rustix::process::Signal;
    for (sig, code) in [(Signal::INT, 130), (Signal::TERM, 143)] {
        let d = scratch();
        let fifo = d.path().join("fifo");
        assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let f = d.path().join("f");
        std::fs::write(&f, vec![1u8; 1 << 20]).unwrap();
        let sub = d.path().join("d");
        std::fs::create_dir(&sub).unwrap();
        assert!(Command::new("mkfifo").arg(sub.join("f")).status().unwrap().success());
        let tar = d.path().join("x.tar");
        std::fs::write(d.path().join("big"), vec![2u8; 4 << 20]).unwrap();
        assert!(Command::new("tar").arg("-cf").arg(&tar).arg("-C").arg(d.path()).arg("big").arg("f").status().unwrap().success());
        let out = d.path().join("out");
        let mut cases: Vec<(&str, Command)> = Vec::new();
        let mut c = bin();
        c.arg("cp").arg(&fifo).arg(d.path().join("copy"));
        cases.push(("cp from a FIFO with no writer", c));
        let mut c = bin();
        c.arg("cp").arg(&f).arg(format!("{}/", sub.display()));
        cases.push(("cp onto a FIFO with no reader", c));
        let mut c = bin();
        c.arg("extract").arg("-C").arg(&out).arg("-").stdin(Stdio::piped());
        cases.push(("extract - from a stalled pipe", c));
        let mut c = bin();
        c.arg("extract").arg("-C").arg(&out).arg(&fifo);
        cases.push(("extract of a FIFO with no writer", c));
        for (what, mut cmd) in cases {
            let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
            // The archive's first 2 MB, then nothing: the writer stalls, its end kept open.
            let stalled = child.stdin.take().map(|mut w| {
                use std::io::Write;
                let data = std::fs::read(&tar).unwrap();
                w.write_all(&data[..2_000_000]).unwrap();
                w
            });
            std::thread::sleep(Duration::from_millis(700));
            let t0 = Instant::now();
            rustix::process::kill_process(rustix::process::Pid::from_child(&child), sig).unwrap();
            let o = child.wait_with_output().unwrap();
            assert!(t0.elapsed() < Duration::from_secs(1), "{what}: {:?}", t0.elapsed());
            drop(stalled);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(code), "{what}: {err}");
            assert!(err.contains("interrupted"), "{what}: {err}");
            assert_eq!(others(d.path(), &["fifo", "f", "d", "x.tar", "big", "out"]), Vec::<String>::new(), "{what}");
            assert_eq!(others(&sub, &[]), vec!["f".to_string()], "{what}");
            let left: Vec<_> = std::fs::read_dir(&out).map(|r| r.map(|e| e.unwrap().file_name()).collect()).unwrap_or_default();
            assert!(left.is_empty(), "{what}: {left:?}");
        }
    }
}

/// A misspelt `CACHELESS_DISABLE` would leave on what the user meant to turn off: every command
/// refuses to run (a usage error naming the word and the known ones), `cp` as GNU cp's usage.
#[test]
fn an_unknown_feature_in_cacheless_disable_is_refused() {
    let d = scratch();
    let f = d.path().join("f");
    std::fs::write(&f, b"x").unwrap();
    let out = bin().env("CACHELESS_DISABLE", "direct,dierct").arg("hash").arg(&f).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("'dierct'") && err.contains("dontcache"), "{err}");
    assert!(out.stdout.is_empty());
    let out = bin().env("CACHELESS_DISABLE", " Direct , uring ").arg("hash").arg(&f).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The temporaries in `dir` (the engine's names, `.NAME.cacheless-BOOT-PID-N.lk.tmp`).
fn temporaries(dir: &Path) -> Vec<String> {
    others(dir, &[]).into_iter().filter(|n| n.starts_with('.') && n.contains(".cacheless-") && n.ends_with(".tmp")).collect()
}

/// Starts a rate-limited copy of `src` to `dir/name` and returns it once its temporary is there.
fn slow_copy(src: &Path, dir: &Path, name: &str) -> std::process::Child {
    let child = bin().args(["cp", "--bwlimit", "8M"]).arg(src).arg(dir.join(name)).stderr(Stdio::piped()).spawn().unwrap();
    let t0 = Instant::now();
    while !temporaries(dir).iter().any(|t| t.starts_with(&format!(".{name}."))) {
        assert!(t0.elapsed() < Duration::from_secs(20), "no temporary appeared");
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

/// Several jobs writing into one folder, as several nodes saving one checkpoint into a shared
/// folder do: a job in another PID namespace (where the first one's PID is nobody, or someone
/// else), and a `cacheless clean` there too, never remove a running job's temporary; all
/// finish with their data. A SIGKILLed job's temporary is then removed by `clean` (its lock
/// went with it), and `-n` only lists it. A name whose writer took no locks is left and named.
#[test]
fn a_running_jobs_temporary_is_never_removed_by_another_job_in_any_namespace() {
    if !require("root", cacheless_testkit::root()) {
        return;
    }
    let d = scratch();
    let src = d.path().join("src");
    std::fs::write(&src, (0..24u32 << 20).map(|i| (i * 7 % 251) as u8).collect::<Vec<u8>>()).unwrap();
    let small = d.path().join("small");
    std::fs::write(&small, b"small").unwrap();
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let first = slow_copy(&src, &out, "a");
    let unshared = |args: &[&std::ffi::OsStr]| {
        let mut c = Command::new("unshare");
        c.args(["--pid", "--fork", "--mount-proc"]).arg(cacheless_testkit::cacheless().get_program()).args(args);
        within(&mut c, Duration::from_secs(60))
    };
    let o = unshared(&["cp".as_ref(), small.as_os_str(), out.join("b").as_os_str()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = unshared(&["clean".as_ref(), out.as_os_str()]);
    assert!(o.status.success(), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let o = within(bin().arg("clean").arg(&out), Duration::from_secs(20));
    assert!(o.status.success() && o.stdout.is_empty(), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(temporaries(&out).len(), 1, "the running job's temporary is there");
    let first = first.wait_with_output().unwrap();
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    assert_eq!(sha256sum(&out.join("a")).split(' ').next(), sha256sum(&src).split(' ').next());
    assert_eq!(std::fs::read(out.join("b")).unwrap(), b"small");
    assert!(temporaries(&out).is_empty());

    // Killed, its temporary is nobody's: listed by -n, removed by clean, also from another
    // namespace.
    let mut killed = slow_copy(&src, &out, "c");
    killed.kill().unwrap();
    killed.wait().unwrap();
    let left = temporaries(&out);
    assert_eq!(left.len(), 1, "{left:?}");
    let o = within(bin().args(["clean", "-n"]).arg(d.path()), Duration::from_secs(20));
    assert!(o.status.success());
    let listed = String::from_utf8_lossy(&o.stdout);
    assert!(listed.contains("would remove") && listed.contains(&left[0]), "{listed}");
    assert_eq!(temporaries(&out), left);
    let old = out.join(format!(".x.cacheless-{}-1-0.tmp", cacheless::temps::boot()));
    std::fs::write(&old, b"an earlier version's").unwrap();
    let o = unshared(&["clean".as_ref(), d.path().as_os_str()]);
    let (stdout, stderr) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stdout.contains("removed") && stdout.contains(&left[0]), "{stdout}");
    assert!(stderr.contains("left") && stderr.contains(".x.cacheless-") && stderr.contains("no locks"), "{stderr}");
    assert_eq!(temporaries(&out), vec![old.file_name().unwrap().to_string_lossy().into_owned()]);
}

/// `cacheless clean` walks by descriptor: a folder swapped for a symbolic link to another tree
/// while it walks takes it nowhere (a matching name outside stays), whatever the moment.
#[test]
fn clean_never_leaves_its_tree_when_a_folder_becomes_a_link() {
    let d = scratch();
    let outside = d.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let tree = d.path().join("tree");
    let bait = format!(".f.cacheless-{}-{}-0.lk.tmp", cacheless::temps::boot(), 4_194_315);
    for round in 0..20 {
        std::fs::write(outside.join(&bait), b"keep").unwrap();
        let _ = std::fs::remove_dir_all(&tree);
        for i in 0..200 {
            std::fs::create_dir_all(tree.join(format!("d{i}")).join("inner")).unwrap();
        }
        let mut child = bin().arg("clean").arg(&tree).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        // Swap folders for links to `outside` while the walk goes.
        for i in (0..200).rev() {
            let p = tree.join(format!("d{i}"));
            let _ = std::fs::rename(&p, tree.join(format!("moved{i}")));
            let _ = std::os::unix::fs::symlink(&outside, &p);
        }
        child.wait().unwrap();
        assert!(outside.join(&bait).exists(), "round {round}: the walk removed a name outside its tree");
    }
}

/// An archive made with `zstd --long=31` (a 2 GiB window, beyond zstd's default limit) is
/// refused as `zstd -d` refuses it, with what to pass, and extracts with `--long=31`, as
/// `zstd -d --long=31` decodes it; on one thread and on several.
#[test]
fn a_long_window_zstd_archive_extracts_with_long() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), vec![9u8; 300_000]).unwrap();
    let tar = Command::new("tar").arg("-cf").arg("-").arg("-C").arg(&src).arg(".").output().unwrap().stdout;
    // From a pipe the size is unknown, so the frame keeps its 2^31 window.
    let mut z = Command::new("zstd").args(["--long=31", "-q", "-c"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    {
        use std::io::Write;
        z.stdin.take().unwrap().write_all(&tar).unwrap();
    }
    let arch = d.path().join("a.tar.zst");
    std::fs::write(&arch, z.wait_with_output().unwrap().stdout).unwrap();
    let peer = Command::new("zstd").args(["-d", "-q", "-c"]).arg(&arch).output().unwrap();
    assert!(!peer.status.success(), "zstd -d decodes a --long=31 frame without --long");
    for threads in ["1", "4"] {
        let out = d.path().join(format!("out{threads}"));
        let o = within(bin().args(["extract", "--decompress-threads", threads]).arg(&arch).arg("-C").arg(&out), Duration::from_secs(60));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains("--long=31"), "{err}");
        let o = within(bin().args(["extract", "--long=31", "--decompress-threads", threads]).arg(&arch).arg("-C").arg(&out), Duration::from_secs(60));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(std::fs::read(out.join("f")).unwrap(), vec![9u8; 300_000]);
    }
}

/// A member name holding terminal escape sequences (clear the screen, a forged line) reaches
/// the terminal escaped, in `-v` lines and in failure messages alike; `hash` prints a name
/// that is not UTF-8, or that holds a backslash, a newline or a carriage return, byte for
/// byte as sha256sum does, so that `sha256sum -c` reads the list back.
#[test]
fn names_reach_the_terminal_escaped_and_hash_lines_are_sha256sums() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let evil = std::ffi::OsStr::from_bytes(b"e\x1b[2Jx\ncacheless: forged");
    std::fs::write(src.join(evil), b"x").unwrap();
    let arch = d.path().join("a.tar");
    assert!(Command::new("tar").arg("-cf").arg(&arch).arg("-C").arg(&src).arg(".").status().unwrap().success());
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join(evil), b"old").unwrap();
    // -k: the member fails ("exists"), its name in the message.
    let o = within(bin().args(["-v", "extract", "-k"]).arg(&arch).arg("-C").arg(&out), Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    for (what, text) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
        assert!(!text.contains(&0x1b), "{what} holds a raw escape: {:?}", String::from_utf8_lossy(text));
        assert!(!String::from_utf8_lossy(text).lines().any(|l| l.starts_with("cacheless: forged")), "{what} has a forged line");
    }
    assert!(String::from_utf8_lossy(&o.stderr).contains("\\033[2Jx\\ncacheless: forged"), "{}", String::from_utf8_lossy(&o.stderr));
    // hash: byte for byte sha256sum's lines, read back by sha256sum -c.
    let names: [&[u8]; 4] = [b"bad\xff", b"back\\slash", b"new\nline", b"cr\rx"];
    let files: Vec<PathBuf> = names.iter().map(|n| d.path().join(std::ffi::OsStr::from_bytes(n))).collect();
    for f in &files {
        std::fs::write(f, b"data").unwrap();
    }
    let ours = within(bin().arg("hash").args(&files), Duration::from_secs(30));
    assert!(ours.status.success());
    let theirs = Command::new("sha256sum").args(&files).output().unwrap();
    assert_eq!(ours.stdout, theirs.stdout, "{:?}", String::from_utf8_lossy(&ours.stdout));
    let list = d.path().join("sums");
    std::fs::write(&list, &ours.stdout).unwrap();
    assert!(Command::new("sha256sum").arg("-c").arg("--quiet").arg(&list).status().unwrap().success());
}

/// A single gzip member covers every file of the archive, so every file waits for its CRC at
/// the end. Under a tight descriptor limit (256, soft and hard) all but a few wait under
/// temporary names with their descriptors closed (else the extraction would run out of
/// descriptors). They take their names when the CRC passes, or all go when it fails, and no
/// temporary is left either way. GNU tar, by contrast, keeps the damaged files.
#[test]
fn under_a_tight_descriptor_limit_held_files_wait_under_temporary_names() {
    let d = scratch();
    let src = d.path().join("src");
    for i in 0..2000u32 {
        let dir = src.join(format!("d{}", i / 500));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("f{i:04}")), format!("file {i} ").repeat(1 + i as usize % 50)).unwrap();
    }
    let arch = d.path().join("a.tar.gz");
    assert!(Command::new("tar").arg("-czf").arg(&arch).arg("-C").arg(&src).arg(".").status().unwrap().success());
    let mut bad = std::fs::read(&arch).unwrap();
    let n = bad.len();
    bad[n - 6] ^= 0xff; // in the member's CRC
    let bad_arch = d.path().join("bad.tar.gz");
    std::fs::write(&bad_arch, &bad).unwrap();
    // util-linux's prlimit sets the limit for the command it runs.
    let tight = || {
        let mut cmd = Command::new("prlimit");
        cmd.arg("--nofile=256:256").arg("--").arg(cacheless_testkit::bin("cacheless"));
        cmd
    };
    let out = d.path().join("out");
    let o = within(tight().arg("extract").arg(&arch).arg("-C").arg(&out), Duration::from_secs(120));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let diff = Command::new("diff").arg("-r").arg(&src).arg(&out).output().unwrap();
    assert!(diff.status.success(), "{}", String::from_utf8_lossy(&diff.stdout));
    let out = d.path().join("bad-out");
    let o = within(tight().arg("extract").arg(&bad_arch).arg("-C").arg(&out), Duration::from_secs(120));
    let err = String::from_utf8_lossy(&o.stderr);
    // The project's 1 for members that failed (GNU tar's 2: docs/extract.md).
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("the members whose data it held were removed"), "{err}");
    let left: Vec<PathBuf> = paths(&out).into_iter().filter(|p| !out.join(p).is_dir()).collect();
    assert!(left.is_empty(), "{} files or temporaries left, e.g. {:?}: {err}", left.len(), left.first());
    // The peer names them all, damaged or not.
    let peer = d.path().join("peer");
    std::fs::create_dir(&peer).unwrap();
    let t = Command::new("tar").arg("-xzf").arg(&bad_arch).arg("-C").arg(&peer).output().unwrap();
    assert!(!t.status.success());
    assert_eq!(paths(&peer).into_iter().filter(|p| peer.join(p).is_file()).count(), 2000);
}

/// Every file under `dir` (temporaries apart), by its path below `dir`, and the temporaries.
fn files_and_temporaries(dir: &Path) -> (std::collections::BTreeMap<PathBuf, Vec<u8>>, Vec<PathBuf>) {
    let (mut files, mut temps) = (std::collections::BTreeMap::new(), Vec::new());
    for rel in paths(dir) {
        let name = rel.file_name().unwrap().to_string_lossy().into_owned();
        if cacheless::temps::owner(name.as_bytes()).is_some() {
            temps.push(rel);
        } else if std::fs::symlink_metadata(dir.join(&rel)).unwrap().is_file() {
            let data = std::fs::read(dir.join(&rel)).unwrap();
            files.insert(rel, data);
        }
    }
    (files, temps)
}

/// Killed (SIGKILL) at moments spread over its run, a `cp -a` onto an older copy of a tree, an
/// extraction onto one and a `pack` over an older archive leave every file whole, old or new,
/// never a mix; what they leave besides are temporaries, which `cacheless clean` then removes,
/// all of them and nothing else.
#[test]
fn jobs_killed_at_any_moment_leave_whole_files_and_clean_removes_exactly_the_leftovers() {
    let d = scratch();
    let (old, new) = (d.path().join("old"), d.path().join("new"));
    let mut want_old = std::collections::BTreeMap::new();
    let mut want_new = std::collections::BTreeMap::new();
    for i in 0..120u32 {
        let rel = PathBuf::from(format!("d{}/f{i}", i % 7));
        let len = [0usize, 10, 4096, 70_000, 1 << 20][i as usize % 5];
        let k = i as usize;
        let byte = |x: usize| u8::try_from(x % 251).unwrap();
        let (a, b): (Vec<u8>, Vec<u8>) = ((0..len).map(|j| byte(j ^ k)).collect(), (0..len + 3).map(|j| byte(j * 3 + k)).collect());
        for (root, data, want) in [(&old, &a, &mut want_old), (&new, &b, &mut want_new)] {
            std::fs::create_dir_all(root.join(rel.parent().unwrap())).unwrap();
            std::fs::write(root.join(&rel), data).unwrap();
            want.insert(rel.clone(), data.clone());
        }
    }
    let tar = d.path().join("new.tar");
    assert!(Command::new("tar").arg("-cf").arg(&tar).arg("-C").arg(&new).arg(".").status().unwrap().success());
    // pack's old and new archives: GNU tar's of the old tree, ours of the new one (the same
    // bytes each time it is made: the same entries in the same order, with the same metadata).
    let old_tar = d.path().join("old.tar");
    assert!(Command::new("tar").arg("-cf").arg(&old_tar).arg("-C").arg(&old).arg(".").status().unwrap().success());
    let new_packed = d.path().join("packed");
    std::fs::create_dir(&new_packed).unwrap();
    let pack_args = |out: &Path| {
        let mut c = bin();
        c.args(["pack", "--compress", "none", "--no-sync", "-o"]).arg(out).arg("-C").arg(&new).arg(".");
        c
    };
    assert!(pack_args(&new_packed.join("a.tar")).status().unwrap().success());
    want_old.insert(PathBuf::from("a.tar"), std::fs::read(&old_tar).unwrap());
    want_new.insert(PathBuf::from("a.tar"), std::fs::read(new_packed.join("a.tar")).unwrap());
    let mut left_some = 0;
    for (job, round) in ["cp", "extract", "pack"].iter().flat_map(|j| (0..6u64).map(move |r| (*j, r))) {
        let dst = d.path().join(format!("dst-{job}-{round}"));
        let mut c = bin();
        if job == "pack" {
            std::fs::create_dir(&dst).unwrap();
            std::fs::copy(&old_tar, dst.join("a.tar")).unwrap();
            c = pack_args(&dst.join("a.tar"));
        } else {
            assert!(Command::new("cp").arg("-a").arg(&old).arg(&dst).status().unwrap().success());
        }
        match job {
            "cp" => c.args(["cp", "-a", "-T"]).arg(&new).arg(&dst),
            "extract" => c.arg("extract").arg(&tar).arg("-C").arg(&dst),
            _ => &mut c,
        };
        let mut child = c.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(5 + round * 40));
        let _ = child.kill();
        child.wait().unwrap();
        let (files, temps) = files_and_temporaries(&dst);
        for (rel, data) in &files {
            assert!(want_old.get(rel) == Some(data) || want_new.get(rel) == Some(data), "{job} round {round}: {} is neither version", rel.display());
        }
        let expected = if job == "pack" { 1 } else { want_old.len() - 1 };
        assert_eq!(files.len(), expected, "{job} round {round}: a file went missing");
        left_some += usize::from(!temps.is_empty());
        let o = within(bin().arg("clean").arg(&dst), Duration::from_secs(30));
        assert!(o.status.success(), "{job} round {round}: {}", String::from_utf8_lossy(&o.stderr));
        let removed = String::from_utf8_lossy(&o.stdout).lines().filter(|l| l.starts_with("removed ")).count();
        assert_eq!(removed, temps.len(), "{job} round {round}: {}", String::from_utf8_lossy(&o.stdout));
        let (after, temps_after) = files_and_temporaries(&dst);
        assert!(temps_after.is_empty(), "{job} round {round}: {temps_after:?}");
        assert_eq!(after, files, "{job} round {round}: clean changed a file");
    }
    eprintln!("killed jobs that left temporaries: {left_some} of 18");
}
