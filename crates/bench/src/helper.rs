//! The helper processes of the pressure and neighbour scenarios, and the handle the benchmark keeps on them.
//!
//! A helper is the benchmark's program run again with the `bench-helper` subcommand ([`SUBCOMMAND`]; the
//! `cacheless` binary hands it to [`main`]). Each helper:
//! - dies with the thread that started it (PR_SET_PDEATHSIG SIGKILL), and gives up at once if that parent
//!   is already gone;
//! - runs in its own process group, so that a Ctrl-C on the terminal reaches only the benchmark, which ends
//!   its helpers itself (SIGKILL) and waits for their exit, so that their memory is back when it goes on;
//! - talks over stdin and stdout, one line at a time; end of stdin (the benchmark closed it, or died) ends it.
//!
//! `hold FREE MAX PARENT`: grows anonymous memory in steps of [`HOLD_STEP`], every page written, up to MAX
//! bytes, re-reading MemAvailable before each step and stopping as soon as a step would leave less than
//! FREE available (something else allocating meanwhile); then locks it (mlockall, when the memlock limit
//! allows), prints `held BYTES LOCKED AVAILABLE` and keeps it until stdin ends. It makes itself the OOM
//! killer's first choice (oom_score_adj 1000), so that if memory runs out anyway it is the one to go.
//!
//! `reread FILE PARENT`: reads FILE once, buffered, so that it is cached, prints `ready`, then reads it
//! again and again, 1 MiB at a time, in order, round and round. For each line it gets on stdin it prints
//! `BYTES DISK` where BYTES counts what it read since `ready` and DISK is `read_bytes` of its
//! /proc/self/io (what had to come from storage; `-` without task I/O accounting).

use std::fs::File;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::fs::FileExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::procfs::{parse_key_values, read_meminfo};

/// The subcommand of the benchmark's program that runs a helper.
pub const SUBCOMMAND: &str = "bench-helper";

/// How much the memory holder adds between two looks at MemAvailable.
pub const HOLD_STEP: u64 = 64 << 20;

/// The co-tenant's request size.
const REREAD_BLOCK: usize = 1 << 20;

/// Runs the helper named by `args` (what follows [`SUBCOMMAND`] on the command line) until the benchmark
/// ends it. An error means bad arguments or a failed read; the caller exits non-zero.
pub fn main(args: &[String]) -> Result<()> {
    let usage = || Error::Usage(format!("{SUBCOMMAND}: expected `hold FREE MAX PARENT` or `reread FILE PARENT`, got {args:?}"));
    let num = |s: &String| s.parse::<u64>().map_err(|_| usage());
    match args {
        [cmd, free, max, parent] if cmd == "hold" => {
            let (free, max) = (num(free)?, num(max)?);
            orphan_guard(num(parent)?)?;
            hold(free, max)
        }
        [cmd, file, parent] if cmd == "reread" => {
            orphan_guard(num(parent)?)?;
            reread(Path::new(file))
        }
        _ => Err(usage()),
    }
}

/// Arranges for SIGKILL when the parent goes, and checks that it has not gone already.
fn orphan_guard(parent: u64) -> Result<()> {
    cacheless::sys::die_with_parent().map_err(|e| Error::io("/proc/self", "prctl(PR_SET_PDEATHSIG)", e))?;
    parent_is(parent)
}

/// Checks that this process's parent is `parent`.
fn parent_is(parent: u64) -> Result<()> {
    let now = cacheless::sys::parent_pid();
    if u64::try_from(now).ok() != Some(parent) {
        return Err(Error::Scenario(format!("{SUBCOMMAND}: its parent {parent} is gone (now {now})")));
    }
    Ok(())
}

/// Writes one protocol line to stdout.
fn say(line: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(format!("{line}\n").as_bytes()).and_then(|()| out.flush()).map_err(|e| Error::io("stdout", "write", e))
}

/// Blocks until stdin ends.
fn wait_for_eof() {
    let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
}

/// The `hold` helper.
fn hold(free: u64, max: u64) -> Result<()> {
    // Best effort: an unprivileged process may raise its own score.
    let _ = std::fs::write("/proc/self/oom_score_adj", "1000");
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    let mut held = 0u64;
    while held < max {
        let room = read_meminfo()?.available.saturating_sub(free);
        let step = HOLD_STEP.min(max - held).min(room);
        let Ok(len) = usize::try_from(step) else { break };
        if len < (1 << 20) {
            break;
        }
        let mut v: Vec<u8> = Vec::new();
        if v.try_reserve_exact(len).is_err() {
            break;
        }
        // Written, not only reserved: every page is faulted in and stays (anonymous, no swap to go to).
        v.resize(len, 0xa5);
        chunks.push(v);
        held += step;
    }
    let locked = cacheless::sys::lock_memory();
    say(&format!("held {held} {} {}", u8::from(locked), read_meminfo()?.available))?;
    wait_for_eof();
    drop(chunks);
    Ok(())
}

/// `read_bytes` of /proc/self/io, when the kernel accounts task I/O.
fn disk_read_bytes() -> Option<u64> {
    parse_key_values(&std::fs::read_to_string("/proc/self/io").ok()?).get("read_bytes:").copied()
}

/// The `reread` helper.
fn reread(path: &Path) -> Result<()> {
    let mut f = File::open(path).map_err(|e| Error::io(path, "open", e))?;
    let mut buf = vec![0u8; REREAD_BLOCK];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(path, "read", e)),
        }
    }
    let count = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    say("ready")?;
    let answers = {
        let (count, done) = (count.clone(), done.clone());
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let disk = disk_read_bytes().map_or_else(|| "-".to_string(), |d| d.to_string());
                if line.is_err() || say(&format!("{} {disk}", count.load(Ordering::Relaxed))).is_err() {
                    break;
                }
            }
            done.store(true, Ordering::Relaxed);
        })
    };
    let mut off = 0u64;
    while !done.load(Ordering::Relaxed) {
        match f.read_at(&mut buf, off) {
            Ok(0) => off = 0,
            Ok(n) => {
                count.fetch_add(n as u64, Ordering::Relaxed);
                off += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(path, "read", e)),
        }
    }
    let _ = answers.join();
    Ok(())
}

/// A running helper process, ended (SIGKILL) and waited for when stopped or dropped.
///
/// It must be started from the thread that runs the benchmark: the helper's PR_SET_PDEATHSIG fires when
/// the thread that started it ends.
#[derive(Debug)]
pub(crate) struct HelperProcess {
    /// `memory holder`, `co-tenant`: for messages.
    what: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    ended: bool,
}

impl HelperProcess {
    /// Starts `exe bench-helper ARGS... PARENT` (PARENT: this process's id).
    pub(crate) fn spawn(exe: &Path, what: &'static str, args: &[String]) -> Result<HelperProcess> {
        let mut child = Command::new(exe)
            .arg(SUBCOMMAND)
            .args(args)
            .arg(std::process::id().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| Error::io(exe, "start the helper process", e))?;
        let stdin = child.stdin.take();
        // Bounded: a helper that printed without end would block on its pipe, not fill our memory.
        let (tx, lines) = mpsc::sync_channel(64);
        if let Some(out) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(l) = line else { break };
                    if tx.send(l).is_err() {
                        break;
                    }
                }
            });
        }
        Ok(HelperProcess { what, child, stdin, lines, ended: false })
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next line it prints, waiting at most `timeout` (`None`: as long as it runs) and stopping with
    /// [`Error::Interrupted`] as soon as `cancel` is set.
    pub(crate) fn line(&mut self, cancel: &AtomicBool, timeout: Option<Duration>) -> Result<String> {
        let t0 = Instant::now();
        loop {
            if cancel.load(Ordering::Relaxed) {
                return Err(Error::Interrupted);
            }
            match self.lines.recv_timeout(Duration::from_millis(50)) {
                Ok(l) => return Ok(l),
                Err(RecvTimeoutError::Timeout) => {
                    if let Some(t) = timeout.filter(|t| t0.elapsed() > *t) {
                        return Err(Error::Scenario(format!("the {} (pid {}) did not answer within {} s", self.what, self.pid(), t.as_secs())));
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
                    self.ended = true;
                    return Err(Error::Scenario(format!("the {} (pid {}) ended before answering ({status})", self.what, self.pid())));
                }
            }
        }
    }

    /// Sends it one line and returns its answer (within 10 s).
    pub(crate) fn ask(&mut self, cancel: &AtomicBool) -> Result<String> {
        let (what, pid) = (self.what, self.pid());
        let sent = match self.stdin.as_mut() {
            Some(i) => i.write_all(b"?\n").and_then(|()| i.flush()).map_err(|e| e.to_string()),
            None => Err("its input is closed".into()),
        };
        sent.map_err(|e| Error::Scenario(format!("the {what} (pid {pid}) cannot be asked: {e}")))?;
        self.line(cancel, Some(Duration::from_secs(10)))
    }

    /// Whether it has exited already (on its own, or killed by something else).
    pub(crate) fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Ends it and waits for its exit: its memory is free when this returns.
    pub(crate) fn stop(mut self) -> Result<()> {
        self.end()
    }

    fn end(&mut self) -> Result<()> {
        if self.ended {
            return Ok(());
        }
        self.ended = true;
        drop(self.stdin.take());
        // An error here means it has exited already; the wait below reaps it either way.
        let _ = self.child.kill();
        let pid = self.pid();
        self.child.wait().map(drop).map_err(|e| Error::io(format!("/proc/{pid}"), "wait for the helper process", e))
    }
}

impl Drop for HelperProcess {
    fn drop(&mut self) {
        let _ = self.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_arguments_are_usage_errors() {
        for args in [
            vec![],
            vec!["hold".to_string(), "1".into()],
            vec!["dance".into(), "1".into(), "2".into()],
            vec!["hold".into(), "x".into(), "1".into(), "1".into()],
        ] {
            let e = main(&args).unwrap_err();
            assert!(matches!(e, Error::Usage(_)), "{args:?}: {e}");
            assert!(e.to_string().contains("expected `hold FREE MAX PARENT`"), "{e}");
        }
    }

    #[test]
    fn a_helper_whose_parent_is_not_ours_gives_up() {
        // Our parent is the test runner, not pid 1 or `u32::MAX`.
        let e = parent_is(u64::from(u32::MAX)).unwrap_err().to_string();
        assert!(e.contains("its parent 4294967295 is gone"), "{e}");
        parent_is(u64::from(std::os::unix::process::parent_id())).unwrap();
    }

    #[test]
    fn a_helper_process_is_reaped_when_dropped() {
        // `yes` stands in for a helper: it prints its arguments until killed.
        let mut h = HelperProcess::spawn(Path::new("yes"), "printer", &["x".into()]).unwrap();
        let pid = h.pid();
        let line = h.line(&AtomicBool::new(false), Some(Duration::from_secs(10))).unwrap();
        assert_eq!(line, format!("{SUBCOMMAND} x {}", std::process::id()));
        assert!(!h.exited());
        assert!(matches!(h.line(&AtomicBool::new(true), None), Err(Error::Interrupted)));
        drop(h);
        // Reaped: no /proc entry (not even a zombie) is left.
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
    }
}
