//! What must be undone however the run ends: mounts, loop devices, the FUSE session, scratch
//! folders. Each guard ([`crate::cmd::Loop`], [`crate::cmd::Mount`], the recorder's session)
//! undoes its own on drop, and registers it here meanwhile, so that a SIGINT or SIGTERM handler
//! ([`on_signals`]) can undo whatever is still there, newest first, before the process exits.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// One thing to undo.
#[derive(Debug, Clone)]
pub enum Undo {
    /// Unmount this mount point (lazily, if busy).
    Umount(PathBuf),
    /// Detach this loop device.
    Detach(String),
    /// Remove this folder and what is in it.
    RemoveDir(PathBuf),
    /// Abort this FUSE connection (its number under /sys/fs/fuse/connections), if it is still
    /// there. The recorder serves the loop device under the filesystem being tested from a
    /// thread of this process: a signal that ends the process while the main thread is in
    /// that filesystem (its unmount writing its journal) would leave the main thread waiting
    /// forever on a server that is gone, and the process, its loop device and every `sync` on
    /// the machine with it. Aborting fails those requests instead (EIO, as a dead device).
    AbortFuse(u64),
}

impl Undo {
    /// Does it, best effort (it runs on the way out, where nothing can be reported).
    pub fn run(&self) {
        let quiet = |c: &mut Command| c.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).status().is_ok_and(|s| s.success());
        match self {
            Undo::Umount(p) => {
                if !quiet(Command::new("umount").arg(p)) {
                    quiet(Command::new("umount").arg("-l").arg(p));
                }
            }
            Undo::Detach(dev) => {
                quiet(Command::new("losetup").arg("-d").arg(dev));
            }
            Undo::RemoveDir(p) => {
                // The main thread may still be writing a file in it (the handler does not stop
                // it): a few tries.
                for _ in 0..5 {
                    if std::fs::remove_dir_all(p).is_ok() || !p.exists() {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
            }
            Undo::AbortFuse(n) => abort_fuse(*n, quiet),
        }
    }
}

/// Writes to the `abort` file of FUSE connection `n`, mounting the FUSE control filesystem for
/// it where it is not mounted (and unmounting it again after).
fn abort_fuse(n: u64, quiet: impl Fn(&mut Command) -> bool) {
    let dir = std::path::Path::new("/sys/fs/fuse/connections");
    let mounted =
        std::fs::read_to_string("/proc/self/mounts").is_ok_and(|m| m.lines().any(|l| l.split_whitespace().nth(1) == Some("/sys/fs/fuse/connections")));
    let ours = !mounted && quiet(Command::new("mount").args(["-t", "fusectl", "fusectl"]).arg(dir));
    let abort = dir.join(n.to_string()).join("abort");
    if abort.exists() {
        let _ = std::fs::write(&abort, "1");
    }
    if ours {
        quiet(Command::new("umount").arg(dir));
    }
}

static NEXT: AtomicU64 = AtomicU64::new(0);
static PENDING: Mutex<Vec<(u64, Undo)>> = Mutex::new(Vec::new());
static GATE: Mutex<()> = Mutex::new(());
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static STOPPED: AtomicBool = AtomicBool::new(false);

/// Held by a guard from before it makes what it undoes until it has registered it, and by the
/// signal handler from before its undo until the process exits: whatever a guard makes is
/// either registered before the undo (and undone) or never made, though the main thread goes
/// on while the handler works.
pub fn gate() -> std::sync::MutexGuard<'static, ()> {
    GATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Registers `undo` until the returned ticket is [`done`]; returns the ticket.
pub fn register(undo: Undo) -> u64 {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    PENDING.lock().unwrap_or_else(|e| e.into_inner()).push((id, undo));
    id
}

/// The guard holding `ticket` undid it itself: forget it.
pub fn done(ticket: u64) {
    PENDING.lock().unwrap_or_else(|e| e.into_inner()).retain(|(id, _)| *id != ticket);
}

/// Whether a SIGINT or SIGTERM arrived (the sweep stops between crash states).
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Stops the sweep between two crash states (its output was closed): [`interrupted`] turns
/// true, and [`stopped`] says why.
pub fn stop() {
    STOPPED.store(true, Ordering::SeqCst);
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Whether [`stop`] was called.
pub fn stopped() -> bool {
    STOPPED.load(Ordering::Relaxed)
}

/// Undoes everything still registered, newest first. After a signal, waits instead for the
/// handler, which undoes it and ends the process with the signal's status.
pub fn undo_all() {
    let _gate = gate();
    undo_pending();
}

fn undo_pending() {
    let all: Vec<(u64, Undo)> = std::mem::take(&mut *PENDING.lock().unwrap_or_else(|e| e.into_inner()));
    for (_, u) in all.iter().rev() {
        u.run();
    }
}

/// Installs a handler thread for SIGINT and SIGTERM: it marks the run interrupted, undoes what
/// is registered, and exits with 128 + the signal's number (130, 143), as the CLI does.
pub fn on_signals() -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    std::thread::Builder::new().name("crash-signals".into()).spawn(move || {
        if let Some(sig) = signals.forever().next() {
            INTERRUPTED.store(true, Ordering::SeqCst);
            // Held until the exit: nothing new is made meanwhile.
            let _held = gate();
            undo_pending();
            // The process must end now, with the signal's status: the main thread may be
            // blocked on a filesystem the undo just took away.
            #[allow(clippy::exit)]
            std::process::exit(128 + sig);
        }
    })?;
    Ok(())
}
