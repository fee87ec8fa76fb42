//! `cacheless pack` end to end: exit codes, unreadable inputs, pipes, usage errors, JSON.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn cacheless(args: &[&str]) -> Output {
    cacheless_testkit::cacheless().args(args).output().expect("run cacheless")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A world-readable scratch directory under /tmp (so the user nobody can use it too).
fn scratch() -> tempfile::TempDir {
    let d = cacheless_testkit::scratch_in(Path::new("/tmp"));
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o777)).unwrap();
    d
}

fn tar_list(archive: &Path) -> Vec<String> {
    // GNU tar 1.34 detects zstd by the frame magic, which a leading skippable frame hides.
    let out = Command::new("tar").args(["-I", "zstd", "-tf"]).arg(archive).output().unwrap();
    assert!(out.status.success(), "tar -t {}: {}", archive.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

#[test]
fn unreadable_file_and_directory_are_reported_skipped_and_exit_1() {
    let d = scratch();
    let src = d.path().join("src");
    fs::create_dir_all(src.join("closed")).unwrap();
    fs::write(src.join("closed/hidden"), "h").unwrap();
    fs::write(src.join("secret"), "s").unwrap();
    fs::write(src.join("open"), "o").unwrap();
    for (p, m) in [("", 0o755), ("closed", 0o000), ("secret", 0o000), ("open", 0o644)] {
        fs::set_permissions(src.join(p), fs::Permissions::from_mode(m)).unwrap();
    }
    let a = d.path().join("u.tar.zst");
    let args = ["pack", "-o", s(&a), "-C", s(&src), "."];
    // Root reads everything: run as nobody where we are root.
    let out = if rustix::process::geteuid().is_root() {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(cacheless_testkit::bin("cacheless"))
            .args(&args[..])
            .output()
            .unwrap()
    } else {
        cacheless(&args)
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("./secret: cannot open: Permission denied"), "{err}");
    assert!(err.contains("./closed/: cannot open directory: Permission denied"), "{err}");
    let names = tar_list(&a);
    assert!(names.contains(&"./open".to_string()) && names.contains(&"./closed/".to_string()), "{names:?}");
    assert!(!names.iter().any(|n| n.contains("secret") || n.contains("hidden")), "{names:?}");
}

#[test]
fn stdout_streams_a_valid_archive_into_a_pipe() {
    let d = scratch();
    let src = d.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("x"), vec![5u8; 3 << 20]).unwrap();
    let mut pack = cacheless_testkit::cacheless().args(["pack", "-o", "-", "-C", s(&src), "x"]).stdout(Stdio::piped()).spawn().unwrap();
    let out = Command::new("tar").args(["-I", "zstd", "-xOf", "-"]).stdin(pack.stdout.take().unwrap()).output().unwrap();
    assert!(pack.wait().unwrap().success());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout == vec![5u8; 3 << 20]);
}

#[test]
fn compression_follows_the_extension_and_json_reports_it() {
    let d = scratch();
    let src = d.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), "data").unwrap();
    for (ext, name, magic) in
        [("tar.gz", "gzip", &b"\x1f\x8b"[..]), ("tar.xz", "xz", b"\xfd7zXZ"), ("tar.lz4", "lz4", b"\x04\x22\x4d\x18"), ("tar", "none", b"")]
    {
        let a = d.path().join(format!("a.{ext}"));
        let out = cacheless(&["pack", "--json", "-o", s(&a), "-C", s(&src), "."]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["compression"], name);
        assert_eq!(v["files"], 1);
        assert_eq!(v["output_bytes"].as_u64(), Some(fs::metadata(&a).unwrap().len()));
        let data = fs::read(&a).unwrap();
        assert!(data.starts_with(magic), "{ext}");
        if name == "none" {
            assert_eq!(&data[257..263], b"ustar\0", "a plain ustar header first");
        }
    }
}

#[test]
fn bad_pack_flags_exit_2_and_create_nothing() {
    let d = scratch();
    let a = d.path().join("a.tar.zst");
    for args in [
        &["pack", "-o", s(&a), "--compress", "rar", "."][..],
        &["pack", "-o", s(&a), "--mtime", "yesterday", "."],
        &["pack", "-o", s(&a), "--level", "99", "."],
        &["pack", "-o", s(&a), "--compress", "lz4", "--level", "3", "."],
        &["pack", "-o", s(&a), "--frame-size", "1k", "."],
        &["pack", "-o", s(&a)],
    ] {
        let out = cacheless(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(!a.exists());
    }
    // A destination directory that does not exist: exit 1, the path named.
    let missing = d.path().join("no/such/dir/a.tar");
    let out = cacheless(&["pack", "-o", s(&missing), "."]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no/such/dir"));
    // A directory under the archive's name: refused before any work, the directory untouched.
    let out = cacheless(&["pack", "-o", s(d.path()), "."]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Is a directory"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(d.path().is_dir());
}

#[test]
fn a_budget_smaller_than_a_frame_is_exceeded_with_a_warning_not_waited_on() {
    let d = scratch();
    let src = d.path().join("src");
    fs::create_dir_all(&src).unwrap();
    for i in 0..20u8 {
        fs::write(src.join(format!("f{i}")), vec![i; 300_000]).unwrap();
    }
    let a = d.path().join("m.tar.zst");
    let out = cacheless(&["pack", "--memory", "1M", "--frame-size", "1M", "-o", s(&a), "-C", s(&src), "."]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("warning: the memory budget of 1 MiB is less than pack needs"), "{err}");
    assert_eq!(tar_list(&a).len(), 21);
}

/// A pack stopped by SIGINT or SIGTERM exits 130 or 143, says so, and leaves neither the
/// archive nor its temporary behind.
#[test]
fn interrupted_pack_exits_with_the_signal_and_leaves_no_archive() {
    let d = scratch();
    let src = d.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("big"), (0..256u32 << 20).map(|i| (i % 251) as u8).collect::<Vec<u8>>()).unwrap();
    for (sig, code) in [(rustix::process::Signal::INT, 130), (rustix::process::Signal::TERM, 143)] {
        let a = d.path().join(format!("i{code}.tar"));
        // Tiny direct requests, one at a time, keep the input in flight when the signal lands.
        let child = cacheless_testkit::cacheless()
            .args(["--block-size", "4k", "--queue-depth", "1", "--mode", "direct", "pack", "--no-sync", "-o", s(&a), "-C", s(&src), "big"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = cacheless_testkit::interrupt(child, std::time::Duration::from_millis(400), sig);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{sig:?}: {err}");
        assert!(err.contains("interrupted"), "{err}");
        assert!(!a.exists(), "no archive under its final name");
        let left: Vec<_> = fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name()).filter(|n| n.to_string_lossy().contains(".cacheless-")).collect();
        assert!(left.is_empty(), "temporaries left: {left:?}");
    }
}

/// Where a seccomp filter denies io_uring_setup with EPERM (Docker's default profile), every
/// test of this file passes on the thread backend.
#[test]
fn the_suite_passes_where_seccomp_denies_io_uring() {
    let out = cacheless_testkit::rerun_without_io_uring("the_suite_passes_where_seccomp_denies_io_uring");
    if !cacheless_testkit::require("seccomp", out.as_ref().map(|_| ()).map_err(Clone::clone)) {
        return;
    }
    let out = out.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the suite under seccomp: {text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("test result: ok"), "{text}");
}
