//! The `cacheless` binary, end to end: copies, hashes, eviction, pipes, errors and exit codes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // A failed step in a test is a failed test.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use rand::{RngCore, SeedableRng};

fn bin() -> Command {
    cacheless_testkit::cacheless()
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run cacheless")
}

/// Runs the binary as the unprivileged user nobody (for checks that root would bypass).
fn run_as_nobody(args: &[&str]) -> Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(cacheless_testkit::bin("cacheless"))
        .args(args)
        .output()
        .expect("run cacheless as nobody")
}

/// A source of `len` random bytes and a destination holding `old`, in `dir`.
fn src_and_old_dst(dir: &Path, len: usize, seed: u64, old: &[u8]) -> (std::path::PathBuf, std::path::PathBuf) {
    let src = dir.join("src");
    std::fs::write(&src, random_bytes(len, seed)).unwrap();
    let dst = dir.join("dst");
    std::fs::write(&dst, old).unwrap();
    (src, dst)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

use cacheless_testkit::{interrupt, require, required, scratch};

fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

fn resident(p: &Path) -> u64 {
    cacheless::residency::residency_of(p).unwrap().cached_bytes()
}

/// Compares two trees: names, types, contents, modes, mtimes, symlink targets.
fn assert_same_tree(a: &Path, b: &Path) {
    let ma = std::fs::symlink_metadata(a).unwrap();
    let mb = std::fs::symlink_metadata(b).unwrap_or_else(|e| panic!("{} missing: {e}", b.display()));
    assert_eq!(ma.file_type(), mb.file_type(), "type of {}", b.display());
    if ma.file_type().is_symlink() {
        assert_eq!(std::fs::read_link(a).unwrap(), std::fs::read_link(b).unwrap(), "link {}", b.display());
        return;
    }
    assert_eq!(ma.mode() & 0o7777, mb.mode() & 0o7777, "mode of {}", b.display());
    assert_eq!((ma.mtime(), ma.mtime_nsec()), (mb.mtime(), mb.mtime_nsec()), "mtime of {}", b.display());
    if ma.is_file() {
        assert!(std::fs::read(a).unwrap() == std::fs::read(b).unwrap(), "content of {}", b.display());
    } else {
        let names = |p: &Path| {
            let mut v: Vec<_> = std::fs::read_dir(p).unwrap().map(|e| e.unwrap().file_name()).collect();
            v.sort();
            v
        };
        assert_eq!(names(a), names(b), "entries of {}", b.display());
        for n in names(a) {
            assert_same_tree(&a.join(&n), &b.join(&n));
        }
    }
}

fn no_temp_files(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let n = e.unwrap().file_name();
        assert!(!n.to_string_lossy().contains(".cacheless-"), "temporary file left: {n:?}");
    }
}

#[test]
fn cp_tree_with_odd_sizes_symlinks_modes_and_mtimes() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir_all(src.join("sub/deeper")).unwrap();
    std::fs::create_dir(src.join("empty-dir")).unwrap();
    let sizes = [0usize, 1, 511, 512, 513, 4095, 4096, 4097, 65537, 1 << 20, (3 << 20) + 7];
    for (i, n) in sizes.iter().enumerate() {
        let p = src.join(if i % 2 == 0 { format!("f{i}") } else { format!("sub/f{i}") });
        std::fs::write(&p, random_bytes(*n, i as u64)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode([0o644, 0o600, 0o755, 0o640][i % 4])).unwrap();
    }
    std::fs::write(src.join("sub/deeper/empty"), b"").unwrap();
    std::os::unix::fs::symlink("../f0", src.join("sub/link-to-f0")).unwrap();
    std::os::unix::fs::symlink("does-not-exist", src.join("dangling")).unwrap();
    std::fs::set_permissions(src.join("sub/deeper"), std::fs::Permissions::from_mode(0o750)).unwrap();
    let old = filetime(1_500_000_000, 123_456_789);
    for p in ["f0", "sub/f1", "sub", "sub/deeper/empty", "empty-dir"] {
        let f = std::fs::File::open(src.join(p)).unwrap();
        f.set_times(std::fs::FileTimes::new().set_modified(old).set_accessed(old)).unwrap();
    }
    let dst = d.path().join("dst");
    // GNU cp keeps modes and times only when asked (`cp -r` alone gives the umask and now).
    let out = run(&["cp", "-r", "--preserve=mode,timestamps", s(&src), s(&dst)]);
    assert!(out.status.success(), "cp -r failed: {}", String::from_utf8_lossy(&out.stderr));
    assert_same_tree(&src, &dst);
    no_temp_files(&dst);
    no_temp_files(&dst.join("sub"));
}

fn filetime(secs: u64, nanos: u32) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + std::time::Duration::new(secs, nanos)
}

#[test]
fn hash_output_is_accepted_by_sha256sum() {
    let d = scratch();
    let mut args = vec!["hash".to_string()];
    for (i, n) in [0usize, 1, 4097, 2 << 20].iter().enumerate() {
        let p = d.path().join(format!("file {i}.bin"));
        std::fs::write(&p, random_bytes(*n, 50 + i as u64)).unwrap();
        args.push(p.to_str().unwrap().to_string());
    }
    let out = bin().args(&args).output().unwrap();
    assert!(out.status.success());
    let sums = d.path().join("SUMS");
    std::fs::write(&sums, &out.stdout).unwrap();
    let check = Command::new("sha256sum").arg("-c").arg(&sums).output().unwrap();
    assert!(check.status.success(), "sha256sum -c rejected our output:\n{}", String::from_utf8_lossy(&check.stdout));
    // And the digests are sha256sum's own.
    let theirs = Command::new("sha256sum").args(&args[1..]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&theirs.stdout));
    // Names with a backslash are escaped as sha256sum does.
    let odd = d.path().join("back\\slash");
    std::fs::write(&odd, b"x").unwrap();
    let ours = run(&["hash", s(&odd)]);
    let theirs = Command::new("sha256sum").arg(&odd).output().unwrap();
    assert_eq!(ours.stdout, theirs.stdout);
}

#[test]
fn hash_algorithms_agree_with_reference_implementations() {
    let d = scratch();
    let data = random_bytes((5 << 20) + 3, 77);
    let p = d.path().join("x");
    std::fs::write(&p, &data).unwrap();
    let b3 = String::from_utf8(run(&["hash", "--algo", "blake3", s(&p)]).stdout).unwrap();
    assert_eq!(b3.split_whitespace().next().unwrap(), blake3::hash(&data).to_hex().as_str());
    let x3 = String::from_utf8(run(&["hash", "--algo", "xxh3", s(&p)]).stdout).unwrap();
    assert_eq!(x3.split_whitespace().next().unwrap(), format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&data)));
}

#[test]
fn evict_leaves_nothing_resident() {
    let d = scratch();
    let p = d.path().join("warm");
    std::fs::write(&p, random_bytes(8 << 20, 3)).unwrap();
    let _ = std::fs::read(&p).unwrap();
    assert!(resident(&p) > 0, "the file should start cached");
    let out = run(&["evict", s(&p)]);
    assert!(out.status.success());
    assert_eq!(resident(&p), 0);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("before") && text.contains("after"), "evict prints before/after: {text}");
}

#[test]
fn cat_into_a_closed_pipe_exits_zero() {
    let d = scratch();
    let p = d.path().join("big");
    std::fs::write(&p, random_bytes(64 << 20, 4)).unwrap();
    let mut child = bin().args(["cat", s(&p)]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 4096];
    out.read_exact(&mut first).unwrap();
    drop(out);
    let st = child.wait_with_output().unwrap();
    assert!(st.status.success(), "closed pipe must exit 0, got {:?}: {}", st.status, String::from_utf8_lossy(&st.stderr));
    assert!(st.stderr.is_empty(), "nothing printed for a closed pipe: {}", String::from_utf8_lossy(&st.stderr));
}

#[test]
fn cat_concatenates_byte_exact() {
    let d = scratch();
    let a = random_bytes(3_000_001, 5);
    let b = random_bytes(513, 6);
    std::fs::write(d.path().join("a"), &a).unwrap();
    std::fs::write(d.path().join("b"), &b).unwrap();
    let out = run(&["cat", s(&d.path().join("a")), s(&d.path().join("b"))]);
    assert!(out.status.success());
    assert!(out.stdout == [a, b].concat());
}

#[test]
fn missing_source_exits_1_names_it_and_copies_the_rest() {
    let d = scratch();
    let a = d.path().join("a");
    std::fs::write(&a, b"alpha").unwrap();
    let missing = d.path().join("no-such-file");
    let dst = d.path().join("out");
    std::fs::create_dir(&dst).unwrap();
    let out = run(&["cp", s(&missing), s(&a), s(&dst)]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(s(&missing)), "error names the path: {err}");
    assert_eq!(std::fs::read(dst.join("a")).unwrap(), b"alpha");
}

#[test]
fn copy_onto_itself_is_refused() {
    let d = scratch();
    let f = d.path().join("f");
    std::fs::write(&f, b"precious").unwrap();
    let link = d.path().join("link");
    std::os::unix::fs::symlink(&f, &link).unwrap();
    let hard = d.path().join("hard");
    std::fs::hard_link(&f, &hard).unwrap();
    for dst in [&f, &link, &hard] {
        let out = run(&["cp", s(&f), s(dst)]);
        assert_eq!(out.status.code(), Some(1), "copy onto {} must fail", dst.display());
        assert!(String::from_utf8_lossy(&out.stderr).contains("same file"), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(std::fs::read(&f).unwrap(), b"precious");
    }
    no_temp_files(d.path());
}

#[test]
fn read_only_destination_gives_eacces_with_the_path() {
    let d = tempfile::Builder::new().prefix("cacheless-ro").tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let src = d.path().join("src");
    std::fs::write(&src, b"data").unwrap();
    std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o644)).unwrap();
    let ro = d.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    let dst = ro.join("dst");
    // Root ignores directory permissions: run the copy as nobody.
    let out = if rustix::process::geteuid().is_root() { run_as_nobody(&["cp", s(&src), s(&dst)]) } else { run(&["cp", s(&src), s(&dst)]) };
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Permission denied") && err.contains(s(&dst)), "EACCES with the path: {err}");
    assert_eq!(err.matches("Permission denied").count(), 1, "the OS error is said once: {err}");
    assert!(!dst.exists());
}

#[test]
fn bad_flags_exit_2_with_usage() {
    for args in [&["frobnicate"][..], &["cat", "--mode", "sideways", "x"], &["bench", "--threads", "0"]] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("error:") && (err.contains("Usage:") || err.contains("--help")), "{args:?}: {err}");
    }
    // cp is GNU cp: its usage errors exit 1, worded as GNU words them.
    for (args, first) in [
        (&["cp", "--no-such-flag", "a", "b"][..], "cacheless: unrecognized option '--no-such-flag'"),
        (&["cp", "onlyone"], "cacheless: missing destination file operand after 'onlyone'"),
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err, format!("{first}\nTry 'cacheless cp --help' for more information.\n"), "{args:?}");
    }
}

#[test]
fn interrupted_copy_leaves_destination_unchanged() {
    let d = scratch();
    let (src, dst) = src_and_old_dst(d.path(), 512 << 20, 8, b"the old destination");
    // Throttle with a tiny request size so the copy is still running when the signal lands.
    let child = bin().args(["--block-size", "4k", "--queue-depth", "1", "--mode", "direct", "cp", s(&src), s(&dst)]).stderr(Stdio::piped()).spawn().unwrap();
    let out = interrupt(child, std::time::Duration::from_millis(300), rustix::process::Signal::INT);
    assert_eq!(out.status.code(), Some(130), "Ctrl-C exits 130: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(&dst).unwrap(), b"the old destination");
    no_temp_files(d.path());
}

/// Files under `dir`, relative, with their contents.
fn tree_files(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            v.extend(tree_files(&p).into_iter().map(|(q, c)| (p.file_name().map(std::path::PathBuf::from).unwrap().join(q), c)));
        } else {
            v.push((p.file_name().map(std::path::PathBuf::from).unwrap(), std::fs::read(&p).unwrap()));
        }
    }
    v.sort();
    v
}

/// An extraction stopped by SIGINT or SIGTERM exits 130 or 143 and leaves no partial file
/// under a final name: every file there is whole and byte-exact.
#[test]
fn interrupted_extract_exits_with_the_signal_and_leaves_no_partial_file() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("a-small"), random_bytes(10_000, 20)).unwrap();
    let block = random_bytes(1 << 20, 21);
    let big: Vec<u8> = (0..=255u8).flat_map(|i| block.iter().map(move |b| b.wrapping_add(i))).collect();
    std::fs::write(src.join("b-big"), &big).unwrap();
    std::fs::write(src.join("c-small"), random_bytes(5000, 22)).unwrap();
    drop(big);
    let tar = d.path().join("t.tar");
    let st = Command::new("tar").arg("-cf").arg(&tar).arg("-C").arg(&src).args(["a-small", "b-big", "c-small"]).status().unwrap();
    assert!(st.success());
    let want = tree_files(&src);
    for (sig, code) in [(rustix::process::Signal::INT, 130), (rustix::process::Signal::TERM, 143)] {
        let dest = d.path().join(format!("out-{code}"));
        // Tiny direct requests keep the big member in flight when the signal lands.
        let child = bin()
            .args(["--block-size", "4k", "--queue-depth", "1", "--mode", "direct", "extract", "--no-sync", "-C", s(&dest), s(&tar)])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = interrupt(child, std::time::Duration::from_millis(400), sig);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{sig:?}: {err}");
        assert!(err.contains("interrupted"), "{err}");
        let got = tree_files(&dest);
        assert!(got.len() < want.len(), "the run was stopped before its end: {:?}", got.iter().map(|f| &f.0).collect::<Vec<_>>());
        for (name, content) in &got {
            let whole = want.iter().find(|(n, _)| n == name).map(|(_, c)| c);
            assert!(whole == Some(content), "{name:?} is under its final name but not whole ({} B)", content.len());
        }
    }
}

/// Errors say the OS error once (the library's errors do not repeat their source), and a
/// hint, where the engine gives one, in flag terms.
#[test]
fn errors_name_the_os_error_once_and_hint_in_flags() {
    let d = scratch();
    let missing = d.path().join("no-such-file");
    for args in [vec!["cat", s(&missing)], vec!["hash", s(&missing)], vec!["extract", "-C", s(d.path()), s(&missing)], vec!["cp", s(&missing), s(d.path())]] {
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.matches("No such file or directory").count(), 1, "{args:?}: {err}");
        // cp words its messages as GNU cp does: strerror's words alone.
        assert_eq!(err.matches("os error 2").count(), usize::from(args[0] != "cp"), "{args:?}: {err}");
        assert!(err.contains(s(&missing)), "{args:?}: {err}");
    }
    let f = d.path().join("f");
    std::fs::write(&f, random_bytes(2 << 20, 23)).unwrap();
    let out = bin().env("CACHELESS_DISABLE", "uring").args(["--backend", "uring", "--block-size", "256k", "cat", s(&f)]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("io_uring unavailable").count(), 1, "{err}");
    assert!(err.contains("cacheless: hint: use --backend auto or threads"), "{err}");
}

#[test]
fn forced_mode_the_filesystem_cannot_honour_is_a_clear_error() {
    let d = scratch();
    let (src, dst) = src_and_old_dst(d.path(), 2 << 20, 9, b"keep me");
    let out = bin().env("CACHELESS_DISABLE", "direct").args(["--mode", "direct", "cp", s(&src), s(&dst)]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("direct unavailable") && err.contains("--mode auto"), "names the problem and the way out: {err}");
    assert_eq!(std::fs::read(&dst).unwrap(), b"keep me");
    no_temp_files(d.path());
}

#[derive(serde::Deserialize)]
struct InfoJson {
    paths: Vec<InfoPath>,
}
#[derive(serde::Deserialize)]
struct InfoPath {
    read: Option<Dec>,
    write: Dec,
}
#[derive(serde::Deserialize)]
struct Dec {
    mode: String,
    reason: String,
}

#[test]
fn without_direct_and_dontcache_auto_takes_the_next_mode_and_says_so() {
    let d = scratch();
    let f = d.path().join("big");
    std::fs::write(&f, random_bytes(4 << 20, 10)).unwrap();
    cacheless::residency::evict_path(&f).unwrap();
    let out = bin().env("CACHELESS_DISABLE", "direct,dontcache").args(["--json", "info", s(&f)]).output().unwrap();
    assert!(out.status.success());
    let info: InfoJson = serde_json::from_slice(&out.stdout).unwrap();
    let read = info.paths[0].read.as_ref().unwrap();
    assert_eq!(read.mode, "writebehind");
    assert!(read.reason.contains("O_DIRECT unavailable") && read.reason.contains("RWF_DONTCACHE unavailable"), "{}", read.reason);
    assert_eq!(info.paths[0].write.mode, "writebehind");
    // With only DONTCACHE left, it is the next choice.
    let out = bin().env("CACHELESS_DISABLE", "direct").args(["--json", "info", s(&f)]).output().unwrap();
    let info: InfoJson = serde_json::from_slice(&out.stdout).unwrap();
    if cacheless::caps::for_dir(d.path()).unwrap().dontcache.is_ok() || required("dontcache") {
        assert_eq!(info.paths[0].write.mode, "dontcache");
    }
    // And the copy still works, byte-exact, leaving no cache behind.
    let dst = d.path().join("copy");
    let out = bin().env("CACHELESS_DISABLE", "direct,dontcache").args(["cp", s(&f), s(&dst)]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Write-behind drops what it brought in: under 2 % of either file stays cached.
    let limit = (4 << 20) / 50;
    assert!(resident(&f) < limit, "the source left {} B cached", resident(&f));
    assert!(resident(&dst) < limit, "the copy left {} B cached", resident(&dst));
    assert!(std::fs::read(&f).unwrap() == std::fs::read(&dst).unwrap());
}

/// A forced mode the filesystem lacks: the JSON carries the refusal's structured hint (the modes
/// to ask for instead), the text words it as flags.
#[test]
fn info_of_a_refused_mode_gives_the_hint_as_data_and_as_flags() {
    let d = scratch();
    let f = d.path().join("f");
    std::fs::write(&f, random_bytes(8192, 16)).unwrap();
    let out = bin().env("CACHELESS_DISABLE", "direct").args(["--mode", "direct", "--json", "info", s(&f)]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for side in ["read", "write"] {
        let p = &v["paths"][0][side];
        assert_eq!(p["mode"], "direct", "{p}");
        assert!(p["reason"].as_str().unwrap().starts_with("refused: ") && !p["reason"].as_str().unwrap().contains("--mode"), "{p}");
        let modes = p["hint"]["modes"].as_array().unwrap();
        assert!(modes.len() == 2 && modes[0] == "auto" && (modes[1] == "dontcache" || modes[1] == "writebehind"), "{p}");
    }
    let out = bin().env("CACHELESS_DISABLE", "direct").args(["--mode", "direct", "info", s(&f)]).output().unwrap();
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(t.contains("read with      direct: refused: ") && t.contains("; use --mode auto or "), "{t}");
}

#[test]
fn without_io_uring_the_thread_backend_is_used_and_reported() {
    let d = scratch();
    let f = d.path().join("big");
    std::fs::write(&f, random_bytes(16 << 20, 11)).unwrap();
    let dst = d.path().join("copy");
    let out = bin().env("CACHELESS_DISABLE", "uring").args(["--block-size", "1M", "cp", "--debug", s(&f), s(&dst)]).output().unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("threads (io_uring unavailable"), "reports the fallback: {err}");
    assert!(std::fs::read(&f).unwrap() == std::fs::read(&dst).unwrap());
    let out = bin().env("CACHELESS_DISABLE", "uring").args(["--backend", "uring", "--block-size", "1M", "cp", s(&f), s(&dst)]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "a forced io_uring that is unavailable is an error");
}

/// Page-cache footprint is deterministic, so it is asserted: cat and cp of a cold 256 MiB
/// file leave under 2 % of source and destination cached.
#[test]
fn cat_and_cp_of_a_cold_file_leave_the_cache_clean() {
    let d = scratch();
    let src = d.path().join("cold");
    let data = random_bytes(256 << 20, 12);
    std::fs::write(&src, &data).unwrap();
    drop(data);
    cacheless::residency::evict_path(&src).unwrap();
    assert_eq!(resident(&src), 0);
    let limit = (256u64 << 20) / 50;

    let mut child = bin().args(["cat", s(&src)]).stdout(Stdio::piped()).spawn().unwrap();
    let mut n = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    let mut so = child.stdout.take().unwrap();
    loop {
        let k = so.read(&mut buf).unwrap();
        if k == 0 {
            break;
        }
        n += k as u64;
    }
    assert!(child.wait().unwrap().success());
    assert_eq!(n, 256 << 20);
    assert!(resident(&src) < limit, "cat left {} B of the source cached", resident(&src));

    let dst = d.path().join("copy");
    let out = run(&["cp", s(&src), s(&dst)]);
    assert!(out.status.success());
    assert!(resident(&src) < limit, "cp left {} B of the source cached", resident(&src));
    assert!(resident(&dst) < limit, "cp left {} B of the destination cached", resident(&dst));
}

#[test]
fn reading_a_warm_file_keeps_it_cached() {
    let d = scratch();
    let p = d.path().join("warm");
    std::fs::write(&p, random_bytes(32 << 20, 13)).unwrap();
    let _ = std::fs::read(&p).unwrap();
    let before = resident(&p);
    assert_eq!(before, 32 << 20);
    let out = run(&["cat", s(&p)]);
    assert!(out.status.success());
    assert_eq!(resident(&p), before, "a warm file must stay cached");
    let out = run(&["hash", s(&p)]);
    assert!(out.status.success());
    assert_eq!(resident(&p), before);
}

#[test]
fn info_reports_alignment_source_and_residency() {
    let d = scratch();
    let p = d.path().join("f");
    std::fs::write(&p, random_bytes(1 << 20, 14)).unwrap();
    let out = run(&["info", s(&p), s(d.path())]);
    assert!(out.status.success());
    let t = String::from_utf8_lossy(&out.stdout);
    for needle in ["io_uring", "cachestat", "O_DIRECT", "RWF_DONTCACHE", "resident", "read with", "write with"] {
        assert!(t.contains(needle), "info lacks {needle}: {t}");
    }
    let caps = cacheless::caps::for_dir(d.path()).unwrap();
    if let Ok(a) = &caps.direct {
        assert!(t.contains(&format!("memory alignment {} B", a.mem)), "{t}");
    }
}

/// cachestat refuses (EPERM) and mincore lies (all resident) for files the caller may not
/// write: residency is then reported unknown, and auto must not mistake the file for cached.
#[test]
fn residency_of_a_file_we_may_not_write_is_unknown_not_warm() {
    if !require("root", cacheless_testkit::root()) {
        return;
    }
    let d = tempfile::Builder::new().prefix("cacheless-perm").tempdir_in("/var/tmp").unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let f = d.path().join("root-owned");
    std::fs::write(&f, random_bytes(8 << 20, 15)).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    cacheless::residency::evict_path(&f).unwrap();
    let out = run_as_nobody(&["--json", "info", s(&f)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &v["paths"][0];
    assert!(p["residency"].is_null() && p["residency_unknown"].as_str().unwrap().contains("write permission"), "{p}");
    assert_eq!(p["read"]["mode"], "direct", "{p}");
}

/// Filesystems are named from their statfs magic, read-only ones (where nothing can be created
/// to probe them) included.
#[test]
fn info_names_filesystems_by_their_magic() {
    let out = run(&["info", "/proc"]);
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(t.contains("/proc (directory, proc on device"), "{t}");
    assert!(t.contains("not probed"), "{t}");
    let d = scratch();
    let out = run(&["--json", "info", s(d.path())]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let name = v["paths"][0]["fs"]["fs_type"].as_str().unwrap().to_string();
    assert!(!name.starts_with("0x") && !name.is_empty(), "the test disk's filesystem is one we know: {name}");
}

/// Where a seccomp filter denies io_uring_setup with EPERM (Docker's default profile), every
/// test of this file passes on the thread backend, and `info` says why io_uring is not used.
#[test]
fn the_suite_passes_where_seccomp_denies_io_uring() {
    let info = cacheless_testkit::without_io_uring(|| run(&["info", "--json"]));
    if !require("seccomp", info.as_ref().map(|_| ()).map_err(Clone::clone)) {
        return;
    }
    let info: serde_json::Value = serde_json::from_slice(&info.unwrap().stdout).unwrap();
    let uring = &info["system"]["uring"]["Err"];
    assert_eq!(uring["errno"], libc::EPERM, "{info}");
    let why = uring["reason"].as_str().unwrap();
    assert!(why.contains("EPERM") && why.contains("seccomp"), "info says why: {why}");
    let d = scratch();
    let f = d.path().join("f");
    std::fs::write(&f, random_bytes(8 << 20, 30)).unwrap();
    let out = cacheless_testkit::without_io_uring(|| run(&["--block-size", "1M", "cp", "--debug", s(&f), s(&d.path().join("g"))])).unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stderr).contains("threads (io_uring unavailable"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = cacheless_testkit::rerun_without_io_uring("the_suite_passes_where_seccomp_denies_io_uring").unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the suite under seccomp: {text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("test result: ok"), "{text}");
}

/// Extracted files get their final names only after a syncfs made their data durable: created
/// without a name (O_TMPFILE) and linked, or, where that is turned off or missing, under a
/// temporary name and renamed; linked through /proc/self/fd where linkat(AT_EMPTY_PATH) is
/// turned off. Each path gives GNU tar's tree, replaces files already there (a file, a symlink
/// to a file outside, which must stay as it was, a hard-linked file whose other name keeps the
/// old bytes), says which path it took, and leaves no temporaries.
#[test]
fn extract_names_files_after_their_sync_on_every_path_as_gnu_tar_does() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir_all(src.join("deep/er/still")).unwrap();
    for i in 0..300usize {
        let dir = if i % 3 == 0 { src.join("deep/er/still") } else { src.clone() };
        std::fs::write(dir.join(format!("f{i}")), random_bytes(1 + (i * 37) % 9000, i as u64)).unwrap();
    }
    std::fs::write(src.join("big"), random_bytes((3 << 20) + 11, 7)).unwrap();
    std::fs::set_permissions(src.join("f1"), std::fs::Permissions::from_mode(0o640)).unwrap();
    std::fs::hard_link(src.join("f2"), src.join("f2-link")).unwrap();
    std::os::unix::fs::symlink("f4", src.join("sym")).unwrap();
    let tar = d.path().join("a.tar");
    let st = Command::new("tar").arg("-cf").arg(&tar).arg("-C").arg(&src).arg(".").status().unwrap();
    assert!(st.success());
    let outside = d.path().join("outside");
    std::fs::write(&outside, b"outside").unwrap();
    // What is in the destination before: files the archive replaces.
    let prepare = |dest: &Path| {
        std::fs::create_dir_all(dest).unwrap();
        std::fs::write(dest.join("f5"), b"old five").unwrap();
        std::os::unix::fs::symlink(&outside, dest.join("f6")).unwrap();
        std::fs::write(dest.join("f8"), b"old eight").unwrap();
        std::fs::hard_link(dest.join("f8"), dest.join("keeps-old-eight")).unwrap();
        std::fs::File::options().write(true).open(dest.join("f8")).unwrap().set_modified(filetime(1_500_000_000, 7)).unwrap();
    };
    let gnu = d.path().join("gnu");
    prepare(&gnu);
    let st = Command::new("tar").arg("-xpf").arg(&tar).arg("-C").arg(&gnu).status().unwrap();
    assert!(st.success());
    // Small files are created by O_TMPFILE requests on an io_uring where there is one (this
    // whole file also runs again where a seccomp filter denies it), else on the parsing thread.
    let info: serde_json::Value = serde_json::from_slice(&run(&["info", "--json"]).stdout).unwrap();
    let uring = info["system"]["uring"].get("Ok").is_some();
    for (disable, says) in [
        ("", "linked (linkat AT_EMPTY_PATH)"),
        ("tmpfile", "under temporary names"),
        ("flink", "through /proc/self/fd"),
        ("uring", "linked (linkat AT_EMPTY_PATH)"),
    ] {
        let dest = d.path().join(format!("ours-{disable}"));
        prepare(&dest);
        let out = bin().env("CACHELESS_DISABLE", disable).args(["--json", "extract", "-C", s(&dest), s(&tar)]).output().unwrap();
        assert!(out.status.success(), "{disable}: {}", String::from_utf8_lossy(&out.stderr));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let naming = report["naming"].as_str().unwrap();
        assert!(naming.contains(says) && naming.contains("after the syncfs"), "{disable}: {naming}");
        let creation = report["creation"].as_str().unwrap();
        let expected = match disable {
            "tmpfile" => "on the parsing thread (O_TMPFILE unavailable)",
            "uring" => "on the parsing thread (io_uring unavailable: io_uring disabled by CACHELESS_DISABLE)",
            _ if !uring => "on the parsing thread (io_uring unavailable",
            _ => "O_TMPFILE openat requests on io_uring",
        };
        assert!(creation.starts_with(expected), "{disable}: {creation}");
        assert_same_tree(&gnu, &dest);
        assert_eq!(std::fs::read(&outside).unwrap(), b"outside", "{disable}: the symlink's target was written through");
        assert_eq!(std::fs::read(dest.join("keeps-old-eight")).unwrap(), b"old eight", "{disable}");
        for dir in [dest.clone(), dest.join("deep/er/still")] {
            no_temp_files(&dir);
        }
    }
}

/// The output of `getfacl -R` of `dir` (relative names), for comparing ACLs.
fn acls(dir: &Path) -> String {
    let out = Command::new("getfacl").args(["-R", "-p", "."]).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "getfacl {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Small files are created with their final mode where the kernel's creation gives exactly
/// that (no bit the umask masks, no default ACL in the folder, no setuid, setgid or sticky
/// bit), and get it by fchmod otherwise; and in folders the extraction made it does not look
/// at a name before creating a file there, except where it made a folder of that name. Under
/// umasks 022 and 077, in folders made by the extraction and in ones that were there, with a
/// default ACL and without, the modes and ACLs are GNU tar's, and a file replaces a folder the
/// archive made earlier as GNU tar does.
#[test]
fn modes_and_acls_are_gnu_tars_whether_given_at_creation_or_after() {
    let d = scratch();
    if Command::new("setfacl").arg("--version").output().is_err()
        || Command::new("setfacl").args(["-m", "u:1234:r", s(d.path())]).status().map_or(true, |st| !st.success())
    {
        require("xattr", Err(format!("no setfacl or no ACLs on {}", d.path().display())));
        return;
    }
    let src = d.path().join("src");
    for dir in ["made/deep", "acl/sub", "e"] {
        std::fs::create_dir_all(src.join(dir)).unwrap();
    }
    let modes = [0o644, 0o664, 0o600, 0o444, 0o755, 0o777, 0o700, 0o640, 0o4755, 0o1644];
    for (i, mode) in modes.iter().enumerate() {
        for dir in ["", "made", "made/deep", "acl", "acl/sub"] {
            let p = src.join(dir).join(format!("m{mode:o}"));
            std::fs::write(&p, random_bytes(100 + i * 997, i as u64)).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode)).unwrap();
        }
    }
    // `e/x` is a folder, and then, appended, a file: it replaces the folder.
    std::fs::create_dir(src.join("e/x")).unwrap();
    let tar = d.path().join("a.tar");
    assert!(Command::new("tar").arg("-cf").arg(&tar).arg("-C").arg(&src).arg(".").status().unwrap().success());
    let later = d.path().join("later");
    std::fs::create_dir_all(later.join("e")).unwrap();
    std::fs::write(later.join("e/x"), b"a file now").unwrap();
    assert!(Command::new("tar").arg("-rf").arg(&tar).arg("-C").arg(&later).arg("./e/x").status().unwrap().success());
    let prepare = |dest: &Path| {
        std::fs::create_dir_all(dest.join("acl")).unwrap();
        assert!(Command::new("setfacl").args(["-d", "-m", "u::rwx,g::r-x,o::---,u:1234:rw-"]).arg(dest.join("acl")).status().unwrap().success());
    };
    for umask in ["022", "077"] {
        let gnu = d.path().join(format!("gnu-{umask}"));
        prepare(&gnu);
        let st = Command::new("sh").arg("-c").arg(format!("umask {umask} && exec tar -xf \"$0\" -C \"$1\"")).arg(&tar).arg(&gnu).status().unwrap();
        assert!(st.success());
        for disable in ["", "uring", "tmpfile"] {
            let dest = d.path().join(format!("ours-{umask}-{disable}"));
            prepare(&dest);
            let out = Command::new("sh")
                .arg("-c")
                .arg(format!("umask {umask} && exec \"$0\" extract -C \"$1\" \"$2\""))
                .arg(cacheless_testkit::cacheless().get_program())
                .arg(&dest)
                .arg(&tar)
                .env("CACHELESS_DISABLE", disable)
                .output()
                .unwrap();
            assert!(out.status.success(), "umask {umask} {disable}: {}", String::from_utf8_lossy(&out.stderr));
            // GNU tar as root keeps setuid bits where we, not restoring owners, drop them:
            // they are left out of the comparison.
            for dir in ["", "made", "made/deep", "acl", "acl/sub"] {
                for root in [&gnu, &dest] {
                    let p = root.join(dir).join("m4755");
                    let m = std::fs::metadata(&p).unwrap().mode() & 0o777;
                    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m)).unwrap();
                }
            }
            // GNU tar leaves `e`, whose folder `x` was replaced, with the time of the
            // replacement; we give it the archive's mtime, as to every other folder.
            assert_eq!(std::fs::metadata(dest.join("e")).unwrap().mtime(), std::fs::metadata(src.join("e")).unwrap().mtime());
            let t = std::fs::File::open(dest.join("e")).unwrap().metadata().unwrap().modified().unwrap();
            std::fs::File::open(gnu.join("e")).unwrap().set_modified(t).unwrap();
            assert_same_tree(&gnu, &dest);
            assert_eq!(acls(&gnu), acls(&dest), "umask {umask} {disable}: ACLs");
            assert_eq!(std::fs::read(dest.join("e/x")).unwrap(), b"a file now");
        }
    }
}

/// `info` says per folder whether new files there are made without a name (O_TMPFILE) and how
/// they are linked, asked of the folder itself (the file's folder for a file); switched off,
/// it says so.
#[test]
fn info_reports_o_tmpfile_per_folder_and_the_switch() {
    use std::os::unix::fs::OpenOptionsExt;
    let d = scratch();
    let f = d.path().join("f");
    std::fs::write(&f, b"x").unwrap();
    let json = |env: Option<&str>, p: &Path| {
        let mut c = bin();
        if let Some(v) = env {
            c.env("CACHELESS_DISABLE", v);
        }
        let out = c.args(["--json", "info", s(p)]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["paths"][0].clone()
    };
    // What an O_TMPFILE open in the scratch folder says, asked here.
    let here = std::fs::OpenOptions::new().read(true).write(true).custom_flags(libc::O_TMPFILE).open(d.path()).is_ok();
    for p in [d.path(), f.as_path()] {
        let info = json(None, p);
        assert_eq!(info["tmpfile"].get("Ok").is_some(), here, "{info}");
        assert!(info["flink"].get("Ok").is_some() || info["flink"]["Err"]["reason"].as_str().unwrap().contains("linkat"), "{info}");
        let off = json(Some("tmpfile"), p);
        assert_eq!(off["tmpfile"]["Err"]["reason"], "O_TMPFILE disabled by CACHELESS_DISABLE", "{off}");
    }
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1, "the probes leave nothing in the folder");
    let text = String::from_utf8(bin().env("CACHELESS_DISABLE", "flink").args(["info", s(d.path())]).output().unwrap().stdout).unwrap();
    assert!(text.contains("linkat by fd   no (linkat(AT_EMPTY_PATH) disabled by CACHELESS_DISABLE)"), "{text}");
    assert!(!here || text.contains("O_TMPFILE      yes, new files made without a name"), "{text}");
}

/// A gzip archive file whose files wait for its one checksum (few descriptors: most are parked
/// under temporary names): a second read checks that checksum early, and the report says so;
/// with `CACHELESS_DISABLE=ahead` it does not, and says that instead. Both give GNU tar's
/// files, byte for byte.
#[test]
fn the_archive_s_checksum_is_verified_ahead_unless_turned_off() {
    let d = scratch();
    let src = d.path().join("src");
    let mut rng = rand::rngs::StdRng::seed_from_u64(48);
    for i in 0..3000u32 {
        let dir = src.join(format!("d{}", i / 1000));
        std::fs::create_dir_all(&dir).unwrap();
        let mut b = vec![0u8; (i as usize * 13) % 900];
        rng.fill_bytes(&mut b);
        std::fs::write(dir.join(format!("f{i}")), b).unwrap();
    }
    // Past what the decoder reads ahead of the parser, so that the files wait for the end.
    std::fs::write(src.join("zeros"), vec![0u8; 24 << 20]).unwrap();
    let tgz = d.path().join("a.tgz");
    assert!(Command::new("tar").arg("-czf").arg(&tgz).arg("-C").arg(&src).arg(".").status().unwrap().success());
    let gnu = d.path().join("gnu");
    std::fs::create_dir(&gnu).unwrap();
    assert!(Command::new("tar").arg("-xzf").arg(&tgz).arg("-C").arg(&gnu).status().unwrap().success());
    for (disable, says) in [("", "verified the whole archive"), ("ahead", "turned off (CACHELESS_DISABLE=ahead)")] {
        let dest = d.path().join(format!("ours-{disable}"));
        std::fs::create_dir(&dest).unwrap();
        // 96 descriptors: a few dozen files held open, the rest parked.
        let out = Command::new("prlimit")
            .arg("--nofile=96")
            .arg(env!("CARGO_BIN_EXE_cacheless"))
            .env("CACHELESS_DISABLE", disable)
            // A small budget: the parser waits for the workers, so that the decoder cannot reach
            // the stream's end before files wait for it.
            .args(["--json", "extract", "--memory", "8M", "-C", s(&dest), s(&tgz)])
            .output()
            .unwrap();
        assert!(out.status.success(), "{disable}: {}", String::from_utf8_lossy(&out.stderr));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let naming = report["naming"].as_str().unwrap();
        assert!(naming.contains("under temporary names (renamed)") && naming.contains(says), "{disable}: {naming}");
        let diff = Command::new("diff").arg("-r").arg(&gnu).arg(&dest).output().unwrap();
        assert!(diff.status.success(), "{disable}: {}", String::from_utf8_lossy(&diff.stdout));
    }
}
