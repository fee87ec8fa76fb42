//! Fault injection for tests: the `fault-injection` feature (off by default, never in a shipped
//! build) makes the Nth open, read, write, fsync or rename of the process fail with an errno,
//! or transfer fewer bytes than asked.
//!
//! The engine consults the plan at the single places where it issues those calls: each read or
//! write request of both backends (the thread pool's pread/pwrite, and io_uring's completions,
//! whose result the fault replaces), the whole-buffer writes of the file creator and of a
//! direct file's tail, the opens of `cacheless::Reader`, `cacheless::Writer` and
//! `cacheless::FileCreator`, fdatasync and fsync, the rename of a finished file, and
//! every call of the `sys` facade that changes something: the namespace calls (mkdirat,
//! symlinkat, linkat, mknodat: [`Site::Open`]) and the metadata calls (fchmod, fchown, futimens,
//! utimensat, extended attributes: [`Site::Meta`]) of the tree copy and of extraction alike.
//! Probes (`caps`) and cache advice are not counted. Every resubmission counts as one more
//! operation, as it is one more call.
//!
//! The plan is process-wide, because requests run on worker threads and rings: a test binary
//! that injects faults must run its cases one at a time and nothing else beside them. Until
//! `start` is called, each check is one relaxed atomic load.
//!
//! `sweep` runs a workload once clean, to count its operations, then once for every position
//! of every kind of operation with every fault that applies there, under a watchdog that aborts
//! the process if one run hangs.
//!
//! The Python package's calls are swept the same way from pytest: the bindings crate's own
//! `fault-injection` feature exposes this plan as `cacheless._native._fault`, and
//! `bindings/python/tests/test_faults.py` drives every call through it (scripts/test builds that
//! extension into `target/python-fault` and runs the file against it).
#![cfg_attr(not(feature = "fault-injection"), allow(dead_code))]

/// A kind of call a fault can be injected into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Site {
    /// Opening or creating a file or directory (a tree copy's mkdir, symlink and link too).
    Open,
    /// One read request.
    Read,
    /// One write request.
    Write,
    /// fdatasync, fsync or syncfs.
    Sync,
    /// Renaming a finished file into place.
    Rename,
    /// Setting metadata: permission bits, owner, times, extended attributes.
    Meta,
}

impl Site {
    /// Every site, in a fixed order.
    pub const ALL: [Site; 6] = [Site::Open, Site::Read, Site::Write, Site::Sync, Site::Rename, Site::Meta];

    fn index(self) -> usize {
        match self {
            Site::Open => 0,
            Site::Read => 1,
            Site::Write => 2,
            Site::Sync => 3,
            Site::Rename => 4,
            Site::Meta => 5,
        }
    }

    /// The operations ([`Error::op`](crate::Error::op)) an engine error names when a call of
    /// this kind fails.
    pub fn ops(self) -> &'static [&'static str] {
        match self {
            Site::Open => &[
                "open",
                "create",
                "open directory",
                "open for verify",
                "mkdir",
                "symlink",
                "link",
                // The tree copy's operations, in GNU cp's words (a symlink's and a link's name
                // their target after the path).
                "cannot open {} for reading",
                "cannot create regular file {}",
                "cannot create directory {}",
                "cannot make directory {}",
                "cannot create symbolic link {}",
                "cannot create hard link {}",
                "cannot create fifo {}",
                "cannot create special file {}",
                "cannot stat {}",
                // The archive crate's: the call's own name.
                "mkdirat",
                "symlinkat",
                "linkat",
                "mknodat",
            ],
            Site::Read => &["read"],
            Site::Write => &["write"],
            Site::Sync => &["fdatasync", "fsync", "fsync directory", "syncfs"],
            // An entry the tree copy makes under a temporary name and renames over the one it
            // replaces is named by what it is making.
            Site::Rename => {
                &["rename", "cannot create symbolic link {}", "cannot create hard link {}", "cannot create fifo {}", "cannot create special file {}"]
            }
            // The engine's words, then the tree copy's (GNU cp's).
            Site::Meta => &[
                "chmod",
                "set times",
                "fchown",
                "setxattr",
                "removexattr",
                "preserving times for {}",
                "preserving permissions for {}",
                "setting permissions for {}",
                "failed to preserve times for {}",
                "failed to preserve ownership for {}",
                "failed to preserve permissions for {}",
                // The archive crate's: the call's own name.
                "fchmod",
                "futimens",
            ],
        }
    }
}

/// What an injected fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The call fails with EIO.
    Eio,
    /// The call fails with ENOSPC.
    Enospc,
    /// The call is interrupted (EINTR).
    Eintr,
    /// The call would block (EAGAIN).
    Eagain,
    /// A read or write transfers about half of what was asked (whole 4 KiB blocks where it
    /// can, as the kernel's partial transfers do; never a partial block on an O_DIRECT file).
    Short,
}

impl Fault {
    /// Every fault, in a fixed order.
    pub const ALL: [Fault; 5] = [Fault::Eio, Fault::Enospc, Fault::Eintr, Fault::Eagain, Fault::Short];

    /// The errno the call fails with (`None` for a short transfer).
    pub fn errno(self) -> Option<i32> {
        match self {
            Fault::Eio => Some(libc::EIO),
            Fault::Enospc => Some(libc::ENOSPC),
            Fault::Eintr => Some(libc::EINTR),
            Fault::Eagain => Some(libc::EAGAIN),
            Fault::Short => None,
        }
    }

    /// Whether the fault can happen at `site` (a short count only on reads and writes).
    pub fn applies_to(self, site: Site) -> bool {
        self != Fault::Short || matches!(site, Site::Read | Site::Write)
    }

    /// Whether the engine retries the call, so that the operation still succeeds: EINTR
    /// everywhere; EAGAIN and short counts on reads and writes. Any other fault is an error
    /// naming the path and the operation.
    pub fn retried_at(self, site: Site) -> bool {
        match self {
            Fault::Eintr => true,
            Fault::Eagain | Fault::Short => matches!(site, Site::Read | Site::Write),
            Fault::Eio | Fault::Enospc => false,
        }
    }
}

/// Which call fails and how: the `nth` (from 0) call at `site` after `start` gets `fault`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Plan {
    /// The kind of call.
    pub site: Site,
    /// Its position among the calls of that kind, from 0.
    pub nth: u64,
    /// What happens to it.
    pub fault: Fault,
}

/// What the engine does in place of (or to) one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Injected {
    /// Fail with this errno instead of making the call.
    Errno(i32),
    /// Transfer at most this many bytes.
    Short(usize),
}

/// The bytes an injected short transfer moves out of `len`: about half, in whole 4 KiB blocks
/// where there are two or more; a partial block only off O_DIRECT. `None` when no shorter
/// transfer is possible.
fn short_of(len: usize, direct: bool) -> Option<usize> {
    let half = len / 2;
    let blocks = half / 4096 * 4096;
    match (blocks, direct) {
        (b, _) if b > 0 => Some(b),
        (_, false) if half > 0 => Some(half),
        _ => None,
    }
}

#[cfg(feature = "fault-injection")]
pub use armed::*;

/// A step that makes written data durable, which `skip_durability` can remove to show that a
/// crash test notices the loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// The fsync of the directory after a finished file is renamed into place (`publish`).
    DirSync,
    /// The sync of a finished file (its fsync before the rename, direct, uncached and
    /// write-behind writes alike; the fdatasync before a verification).
    Fdatasync,
    /// The syncfs of a batch of small files (a tree copy's before its renames, a file
    /// creator's write-back batch) and the final syncfs of a tree copy.
    Syncfs,
}

impl Step {
    /// Every step, in a fixed order.
    pub const ALL: [Step; 3] = [Step::DirSync, Step::Fdatasync, Step::Syncfs];

    fn bit(self) -> u8 {
        match self {
            Step::DirSync => 1,
            Step::Fdatasync => 2,
            Step::Syncfs => 4,
        }
    }

    /// Its name on a command line: `dirsync`, `fdatasync`, `syncfs`.
    pub fn name(self) -> &'static str {
        match self {
            Step::DirSync => "dirsync",
            Step::Fdatasync => "fdatasync",
            Step::Syncfs => "syncfs",
        }
    }
}

#[cfg(feature = "fault-injection")]
static SKIPPED: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Removes the durability `steps` from every later write of the process (none: all of them
/// come back): the call is not made and reports success, as if the system had made it. For the
/// crash simulator (`crates/crash`), which must then report lost data; never in a shipped build.
#[cfg(feature = "fault-injection")]
pub fn skip_durability(steps: &[Step]) {
    let bits = steps.iter().fold(0, |b, s| b | s.bit());
    SKIPPED.store(bits, std::sync::atomic::Ordering::SeqCst);
}

/// Whether `skip_durability` removed `step`.
#[cfg(feature = "fault-injection")]
pub fn skipped(step: Step) -> bool {
    SKIPPED.load(std::sync::atomic::Ordering::Relaxed) & step.bit() != 0
}

/// Without the feature every step is taken.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn skipped(_step: Step) -> bool {
    false
}

/// The fault planned for this call at `site` (of `len` bytes, for reads and writes, on a file
/// `direct` says whether it is open with O_DIRECT, asked only for a short count), if any;
/// counts the call.
#[cfg(feature = "fault-injection")]
pub fn check(site: Site, len: usize, direct: impl FnOnce() -> bool) -> Option<Injected> {
    take(site, |fault| match fault.errno() {
        Some(e) => Some(Injected::Errno(e)),
        None => short_of(len, direct()).map(Injected::Short),
    })
}

/// Without the feature nothing is ever injected.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn check(_site: Site, _len: usize, _direct: impl FnOnce() -> bool) -> Option<Injected> {
    None
}

#[cfg(feature = "fault-injection")]
mod armed {
    use std::collections::BTreeMap;
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Condvar, Mutex, OnceLock};
    use std::time::{Duration, Instant};

    use super::{Fault, Plan, Site};

    /// Set between `start` and [`stop`]: calls are counted and the plan consulted.
    static ON: AtomicBool = AtomicBool::new(false);

    #[derive(Default)]
    struct State {
        counts: [u64; 6],
        plan: Option<Plan>,
        fired: bool,
    }

    static STATE: Mutex<State> = Mutex::new(State { counts: [0; 6], plan: None, fired: false });

    fn state() -> std::sync::MutexGuard<'static, State> {
        STATE.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a call at `site`; if it is the planned one, `make` says what to inject (`None`
    /// where the fault cannot apply to this call, which then goes ahead untouched).
    pub fn take<T>(site: Site, make: impl FnOnce(Fault) -> Option<T>) -> Option<T> {
        if !ON.load(Ordering::Relaxed) {
            return None;
        }
        let mut st = state();
        let n = st.counts[site.index()];
        st.counts[site.index()] += 1;
        let plan = st.plan.filter(|p| p.site == site && p.nth == n)?;
        let injected = make(plan.fault);
        st.fired |= injected.is_some();
        injected
    }

    /// Starts counting calls from zero, with `plan` armed (or none: a clean, counted run).
    pub fn start(plan: Option<Plan>) {
        let mut st = state();
        *st = State { plan, ..State::default() };
        ON.store(true, Ordering::SeqCst);
    }

    /// What happened between `start` and [`stop`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Outcome {
        counts: [u64; 6],
        /// Whether the planned fault was injected (a short count cannot be injected into a call
        /// too small to shorten).
        pub fired: bool,
    }

    impl Outcome {
        /// Calls made at `site`.
        pub fn count(&self, site: Site) -> u64 {
            self.counts[site.index()]
        }
    }

    /// Whether the planned fault has been injected since `start`.
    pub fn fired() -> bool {
        state().fired
    }

    /// Stops counting and disarms the plan.
    pub fn stop() -> Outcome {
        ON.store(false, Ordering::SeqCst);
        let mut st = state();
        let out = Outcome { counts: st.counts, fired: st.fired };
        *st = State::default();
        out
    }

    /// What a `sweep` did.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct Swept {
        /// Calls of each kind in the clean run.
        pub clean: BTreeMap<&'static str, u64>,
        /// Runs with a fault planned.
        pub runs: u64,
        /// Runs in which the fault was injected.
        pub fired: u64,
        /// Of those, runs whose fault the engine retried.
        pub retried: u64,
    }

    /// The run the watchdog is watching: what it is, and when it must be over by.
    struct Watch {
        current: Mutex<Option<(String, Instant)>>,
        changed: Condvar,
    }

    /// How long one run may take before the watchdog calls it a hang. Generous: a run is a few
    /// small files.
    const HANG: Duration = Duration::from_secs(120);

    fn watchdog() -> &'static Watch {
        static W: OnceLock<&'static Watch> = OnceLock::new();
        W.get_or_init(|| {
            let w: &'static Watch = Box::leak(Box::new(Watch { current: Mutex::new(None), changed: Condvar::new() }));
            let spawned = std::thread::Builder::new().name("fault-watchdog".into()).spawn(move || {
                let mut cur = w.current.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    match cur.clone() {
                        Some((what, by)) => {
                            let now = Instant::now();
                            if now >= by {
                                let _ = writeln!(std::io::stderr(), "fault injection: {what} hung for over {} s", HANG.as_secs());
                                std::process::abort();
                            }
                            cur = w.changed.wait_timeout(cur, by.saturating_duration_since(now)).unwrap_or_else(|e| e.into_inner()).0;
                        }
                        None => cur = w.changed.wait(cur).unwrap_or_else(|e| e.into_inner()),
                    }
                }
            });
            if let Err(e) = spawned {
                panic!("cannot start the fault-injection watchdog: {e}");
            }
            w
        })
    }

    /// Runs `run(plan)` with `plan` armed, under the watchdog.
    fn watched(plan: Option<Plan>, run: &mut impl FnMut(Option<Plan>)) -> Outcome {
        let w = watchdog();
        *w.current.lock().unwrap_or_else(|e| e.into_inner()) = Some((format!("the run with {plan:?}"), Instant::now() + HANG));
        w.changed.notify_all();
        start(plan);
        run(plan);
        let out = stop();
        *w.current.lock().unwrap_or_else(|e| e.into_inner()) = None;
        w.changed.notify_all();
        out
    }

    /// Runs `run` once with no fault, counting its calls, then once for every call it made at
    /// each of `sites` with every fault that applies there. `run` does the workload and checks
    /// what must hold whatever happened ([`fired`] says whether the fault was injected); it must
    /// make the same calls each time it runs clean. A run that hangs aborts the process.
    pub fn sweep(sites: &[Site], mut run: impl FnMut(Option<Plan>)) -> Swept {
        let clean = watched(None, &mut run);
        let mut swept = Swept::default();
        for &site in sites {
            swept.clean.insert(site.ops()[0], clean.count(site));
            for nth in 0..clean.count(site) {
                for fault in Fault::ALL.into_iter().filter(|f| f.applies_to(site)) {
                    let out = watched(Some(Plan { site, nth, fault }), &mut run);
                    swept.runs += 1;
                    if out.fired {
                        swept.fired += 1;
                        swept.retried += u64::from(fault.retried_at(site));
                    }
                }
            }
        }
        swept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_transfers_are_whole_blocks_where_they_can_be() {
        assert_eq!(short_of(1 << 20, true), Some(512 << 10));
        assert_eq!(short_of(12288, false), Some(4096));
        assert_eq!(short_of(4096, false), Some(2048));
        assert_eq!(short_of(4096, true), None, "no partial block off an O_DIRECT request");
        assert_eq!(short_of(1, false), None);
    }

    #[test]
    fn what_applies_where_and_what_is_retried() {
        assert!(!Fault::Short.applies_to(Site::Rename) && Fault::Short.applies_to(Site::Write));
        assert!(Fault::Eintr.retried_at(Site::Sync) && !Fault::Eagain.retried_at(Site::Open) && Fault::Eagain.retried_at(Site::Read));
        assert!(!Fault::Eio.retried_at(Site::Read) && !Fault::Enospc.retried_at(Site::Write));
    }
}
