//! Helpers shared by every test crate of the workspace (a dev-dependency only).
//!
//! - [`scratch`]: a scratch folder on a real disk (O_DIRECT and RWF_DONTCACHE need one; tmpfs
//!   has neither), removed when dropped.
//! - [`bin`] / [`cacheless`]: the workspace's built binaries, found beside the test executable.
//! - [`require`] / [`skip`]: a test that cannot run here says why on the terminal (not in
//!   libtest's captured output, so the reason shows under plain `cargo test`), and fails instead
//!   when `CACHELESS_REQUIRE` names the feature it needs (CI sets it: its machine has them all).
//! - [`interrupt`]: sends a signal to a running child and collects its output.
//! - [`without_io_uring`]: runs code (and the processes it starts) where io_uring_setup fails
//!   with EPERM, as under Docker's default seccomp profile.
//! - [`tree::snapshot`]: every entry of a tree, to compare with what a GNU tool made.
//! - [`servers`]: the S3 and HTTP servers the test command starts; [`proxy::FaultProxy`]: faults
//!   injected between a client and them.
//! - [`LoopFs`]: a real filesystem (ext4, xfs, btrfs, tmpfs, overlay, erofs, squashfs) mounted
//!   for one test and taken down when dropped.

mod loopfs;
pub mod proxy;
pub mod servers;
pub mod tree;

pub use loopfs::{kernel_has, FsKind, LoopFs};

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::Duration;

/// The features named in `CACHELESS_REQUIRE` (comma-separated).
pub fn required(feature: &str) -> bool {
    std::env::var("CACHELESS_REQUIRE").is_ok_and(|v| v.split(',').any(|f| f.trim() == feature))
}

/// Writes one line to the process's standard error handle itself: libtest captures the print
/// macros of a passing test, not writes to the handle, so the line reaches the terminal.
fn say(line: &str) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(format!("{line}\n").as_bytes());
    let _ = e.flush();
}

/// Whether a test that needs `feature` can run: true when `available` is `Ok`. Otherwise it
/// says on the terminal why the test is skipped and returns false, or panics (the test fails)
/// when `CACHELESS_REQUIRE` names `feature`.
///
/// ```no_run
/// # fn probe() -> Result<(), String> { Ok(()) }
/// if !cacheless_testkit::require("uring", probe()) {
///     return;
/// }
/// ```
#[track_caller]
pub fn require(feature: &str, available: Result<(), String>) -> bool {
    match verdict(feature, available, required(feature)) {
        Verdict::Run => true,
        Verdict::Fail(msg) => panic!("{msg}"),
        Verdict::Skip(msg) => {
            say(&format!("skipped ({}): {msg}", std::panic::Location::caller()));
            false
        }
    }
}

/// What [`require`] does.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Run,
    Skip(String),
    Fail(String),
}

fn verdict(feature: &str, available: Result<(), String>, required: bool) -> Verdict {
    match available {
        Ok(()) => Verdict::Run,
        Err(reason) if required => Verdict::Fail(format!("{feature} is required by CACHELESS_REQUIRE but unavailable: {reason}")),
        Err(reason) => Verdict::Skip(format!("{feature} unavailable: {reason}")),
    }
}

/// Says on the terminal why a test (or part of it) is skipped, for a reason that is no kernel
/// feature (a tool that is not installed, a run that is not root).
#[track_caller]
pub fn skip(reason: &str) {
    say(&format!("skipped ({}): {reason}", std::panic::Location::caller()));
}

/// `len` random bytes, the same for the same `seed`.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    use rand::{RngCore, SeedableRng};
    let mut v = vec![0u8; len];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

/// The names in a folder, sorted (what a failed job must not have left there).
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.map_or_else(|e| panic!("read {}: {e}", dir.display()), |e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    v.sort();
    v
}

/// `Ok` when this process runs as root, else why a test that needs root cannot run.
pub fn root() -> Result<(), String> {
    if rustix::process::geteuid().is_root() {
        Ok(())
    } else {
        Err("needs root".into())
    }
}

/// The target directory of this build (`target/`), found from the test executable's path
/// (`target/<profile>/deps/<test>`).
fn target_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.ancestors().find(|a| a.file_name().is_some_and(|n| n == "deps"))?;
    Some(deps.parent()?.parent()?.to_path_buf())
}

/// A fresh scratch folder on a real disk, removed when dropped: under `CACHELESS_TEST_DIR` if
/// set, else `target/tmp` (where cargo puts integration tests' scratch), else the system's
/// temporary folder.
pub fn scratch() -> tempfile::TempDir {
    let base = std::env::var_os("CACHELESS_TEST_DIR").map(PathBuf::from).or_else(|| target_dir().map(|t| t.join("tmp"))).unwrap_or_else(std::env::temp_dir);
    scratch_in(&base)
}

/// A fresh scratch folder under `base` (created if missing), removed when dropped.
pub fn scratch_in(base: &Path) -> tempfile::TempDir {
    std::fs::create_dir_all(base).unwrap_or_else(|e| panic!("create {}: {e}", base.display()));
    tempfile::Builder::new().prefix("cacheless-test-").tempdir_in(base).unwrap_or_else(|e| panic!("scratch folder in {}: {e}", base.display()))
}

/// This process's descriptors of files in `dir` (an unnamed file shows as `dir/#INODE (deleted)`):
/// what a test expects to be empty once everything it opened there is closed.
pub fn open_in(dir: &Path) -> Vec<PathBuf> {
    let dir = dir.to_string_lossy().into_owned() + "/";
    std::fs::read_dir("/proc/self/fd")
        .unwrap_or_else(|e| panic!("/proc/self/fd: {e}"))
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|t| t.to_string_lossy().starts_with(&dir))
        .collect()
}

/// The path of the workspace binary `name` built with this test (`target/<profile>/<name>`).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    let deps = exe.ancestors().find(|a| a.file_name().is_some_and(|n| n == "deps")).unwrap_or_else(|| panic!("{} is not under a deps folder", exe.display()));
    let p = deps.parent().unwrap_or(deps).join(name);
    assert!(p.exists(), "{} not built: run the tests with cargo test", p.display());
    p
}

/// A command for the `cacheless` binary.
pub fn cacheless() -> Command {
    Command::new(bin("cacheless"))
}

/// Lets `child` run for `after`, sends it `signal`, and returns its output once it exits.
pub fn interrupt(child: Child, after: Duration, signal: rustix::process::Signal) -> Output {
    std::thread::sleep(after);
    rustix::process::kill_process(rustix::process::Pid::from_child(&child), signal).unwrap_or_else(|e| panic!("kill: {e}"));
    child.wait_with_output().unwrap_or_else(|e| panic!("wait: {e}"))
}

/// Runs `f` on a thread of its own under a seccomp filter that makes io_uring_setup fail with
/// EPERM (what Docker's default profile does since 25.0) and lets every other call through;
/// processes started from it inherit the filter. `Err` says why no filter could be installed.
pub fn without_io_uring<R: Send>(f: impl FnOnce() -> R + Send) -> Result<R, String> {
    use seccompiler::{BpfProgram, SeccompAction, SeccompFilter};
    let arch = std::env::consts::ARCH.try_into().map_err(|e| format!("seccomp on {}: {e:?}", std::env::consts::ARCH))?;
    let rules = [(libc::SYS_io_uring_setup, vec![])].into_iter().collect();
    let errno = u32::try_from(libc::EPERM).unwrap_or(1);
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(errno), arch).map_err(|e| format!("seccomp filter: {e:?}"))?;
    let prog: BpfProgram = filter.try_into().map_err(|e| format!("seccomp program: {e:?}"))?;
    std::thread::scope(|s| {
        let t = s.spawn(|| {
            // Only this thread gets the filter (no TSYNC): the rest of the test process is untouched.
            seccompiler::apply_filter(&prog).map_err(|e| format!("seccomp: {e:?}"))?;
            Ok(f())
        });
        t.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

/// Runs this test executable's tests again, all but `skip` (the caller, which would recurse), in
/// a process where io_uring_setup fails with EPERM ([`without_io_uring`]), and returns its
/// output. `uring` is taken out of `CACHELESS_REQUIRE` there: the point is to run without it.
pub fn rerun_without_io_uring(skip: &str) -> Result<Output, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let require: Vec<String> =
        std::env::var("CACHELESS_REQUIRE").unwrap_or_default().split(',').map(str::trim).filter(|f| !f.is_empty() && *f != "uring").map(String::from).collect();
    without_io_uring(|| Command::new(&exe).args(["--skip", skip]).env("CACHELESS_REQUIRE", require.join(",")).output())?
        .map_err(|e| format!("run {}: {e}", exe.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_is_under_the_target_folder_and_removed_when_dropped() {
        let d = scratch();
        let p = d.path().to_path_buf();
        assert!(p.is_dir());
        if std::env::var_os("CACHELESS_TEST_DIR").is_none() {
            assert!(p.starts_with(target_dir().unwrap_or_default().join("tmp")), "{}", p.display());
        }
        drop(d);
        assert!(!p.exists());
    }

    #[test]
    fn io_uring_setup_is_denied_with_eperm_only_under_the_filter() {
        let ring = || io_uring::IoUring::new(2).err().and_then(|e| e.raw_os_error());
        assert_eq!(without_io_uring(ring).unwrap(), Some(libc::EPERM), "io_uring_setup under the filter");
        assert_eq!(ring(), None, "this thread has no filter");
    }

    #[test]
    fn a_missing_feature_skips_unless_it_is_required() {
        assert_eq!(verdict("uring", Ok(()), true), Verdict::Run);
        assert_eq!(verdict("uring", Err("EPERM".into()), false), Verdict::Skip("uring unavailable: EPERM".into()));
        assert_eq!(verdict("uring", Err("EPERM".into()), true), Verdict::Fail("uring is required by CACHELESS_REQUIRE but unavailable: EPERM".into()));
    }
}
