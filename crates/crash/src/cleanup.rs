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
                let _ = std::fs::remove_dir_all(p);
            }
        }
    }
}

static NEXT: AtomicU64 = AtomicU64::new(0);
static PENDING: Mutex<Vec<(u64, Undo)>> = Mutex::new(Vec::new());
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static STOPPED: AtomicBool = AtomicBool::new(false);

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

/// Undoes everything still registered, newest first.
pub fn undo_all() {
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
            undo_all();
            // The process must end now, with the signal's status: the main thread may be
            // blocked on a filesystem the undo just took away.
            #[allow(clippy::exit)]
            std::process::exit(128 + sig);
        }
    })?;
    Ok(())
}
