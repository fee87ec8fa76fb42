//! The checksum gate: a file extracted from a compressed archive takes its name only once every
//! checksum covering its bytes has passed (the gzip member's, the zstd or LZ4 frame's, the xz or
//! bzip2 stream's), so a corrupt or truncated archive leaves none of the files its bad part
//! made. The engine's file creator makes each file durable (its batch's syncfs) and hands it
//! here ([`Keeper`]); the gate names it once the verified position of the input passes the end
//! of its data, and removes it ([`PendingFile`]'s drop) if it never does.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cacheless::{Keeper, Named, Parked, PendingFile, Published};

use crate::source::ahead::Ahead;

/// A durable file waiting for the gate to pass it: open, or parked under a temporary name with
/// its descriptor closed, so that however many wait, they hold few descriptors.
enum Held {
    Open(PendingFile),
    Parked(Parked),
}

impl Held {
    fn path(&self) -> &Path {
        match self {
            Held::Open(p) => p.path(),
            Held::Parked(p) => p.path(),
        }
    }

    /// The folder it is to be named in.
    fn dir(&self) -> &Arc<OwnedFd> {
        match self {
            Held::Open(p) => p.dir(),
            Held::Parked(p) => p.dir(),
        }
    }

    /// What removes it by name should the gate never pass `until` once it is named.
    fn early(&self, until: u64) -> Option<Early> {
        let at = match self {
            Held::Open(p) => p.identity()?,
            Held::Parked(p) => p.identity()?,
        };
        Some(Early { until, at })
    }

    fn publish(self) -> cacheless::Result<()> {
        match self {
            Held::Open(p) => p.publish(false),
            Held::Parked(p) => p.publish(),
        }
    }
}

/// A file named before the gate passed it: where, and which inode, to remove it if the gate
/// never does.
struct Early {
    until: u64,
    at: Named,
}

/// What the gate holds back: files in the order they joined, and the names given before the
/// gate passed them (a member needed the name: see [`Gate::release_held`]).
#[derive(Default)]
struct Waiting {
    files: VecDeque<(u64, Held, Published)>,
    open: usize,
    early: Vec<Early>,
    /// Files that waited under a temporary name.
    parked: u64,
    /// Whether the verifier ahead was considered (at the first file parked).
    asked: bool,
}

/// Holds an extraction's durable files until the input is verified past the end of their data
/// (the key each file was finished with), then names them in the order they joined.
pub struct Gate {
    /// The input position up to which every checksum covering it has passed.
    verified: Arc<AtomicU64>,
    /// Held files kept open at most (see `cacheless::pool::FdPlan::held`); those past them
    /// wait under temporary names, their descriptors closed.
    open_max: usize,
    held: Mutex<Waiting>,
    /// Files kept so far (counted without the lock: most pass at once where frames are small).
    kept: AtomicU64,
    /// Files finished so far (before their batch's syncfs), and the furthest end of their data:
    /// how many files the archive has per MiB, whatever order their batches are synced in.
    finished: AtomicU64,
    furthest: AtomicU64,
    /// The archive's checksums verified ahead (see [`crate::source::ahead`]), asked for once files are
    /// parked, where the archive has many files for its size.
    ahead: Option<Arc<Ahead>>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let h = self.lock();
        f.debug_struct("Gate").field("files", &h.files.len()).field("early", &h.early.len()).finish()
    }
}

impl Gate {
    /// A gate passing files whose data ends at or before `verified`, holding at most
    /// `open_max` of the others open.
    pub fn new(verified: Arc<AtomicU64>, open_max: usize) -> Gate {
        Gate { verified, open_max, held: Mutex::default(), kept: AtomicU64::new(0), finished: AtomicU64::new(0), furthest: AtomicU64::new(0), ahead: None }
    }

    /// The gate, starting `ahead` (where given) once files are parked, where the archive has
    /// many files for its size ([`Ahead::worth_it`]).
    pub fn with_ahead(mut self, ahead: Option<Arc<Ahead>>) -> Gate {
        self.ahead = ahead;
        self
    }

    /// How the files waited for the archive's checksums, in words for the report: how many
    /// waited under temporary names, and what the verifier ahead did. `None` where none waited
    /// so.
    pub fn report(&self) -> Option<String> {
        let h = self.lock();
        let mut parts = Vec::new();
        if h.parked > 0 {
            parts.push(format!(
                "{} of {} files waited for the archive's checksums under temporary names (renamed), past the {} held open",
                h.parked,
                self.kept.load(Ordering::Relaxed),
                self.open_max
            ));
        }
        parts.extend(self.ahead.as_ref().and_then(|a| a.report()));
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How far the input is verified.
    fn passed(&self) -> u64 {
        self.verified.load(Ordering::Acquire)
    }

    /// Names every held file now, whether the gate passed it or not: for a member about to use
    /// one of their names (a hard link to it, a member replacing it) that cannot wait for the
    /// input to be verified. Those the gate had not passed are remembered: if it never does,
    /// [`Gate::discard_held`] removes them by name. Call it after the creator's
    /// `publish_now`, which hands over what waits in its batch.
    pub fn release_held(&self) {
        let files = self.take_held();
        let passed = self.passed();
        let mut early = Vec::new();
        for (until, held, then) in files {
            let e = (until > passed).then(|| held.early(until)).flatten();
            let r = held.publish();
            if r.is_ok() {
                early.extend(e);
            }
            then(r);
        }
        self.lock().early.extend(early);
    }

    /// For a member that linked `name` in `dir` to a file (a hard link): if that file was
    /// named before the gate passed it (see [`Gate::release_held`]), the link goes with it
    /// should the gate never pass it.
    pub fn note_link(&self, dir: &Arc<OwnedFd>, name: &OsStr, path: &Path) {
        let Some(at) = Named::of(dir, name, path) else { return };
        let mut h = self.lock();
        if let Some(until) = h.early.iter().find(|e| e.at.same_file(&at)).map(|e| e.until) {
            h.early.push(Early { until, at });
        }
    }

    /// Gives up the files the gate did not pass, the input having failed its checks (or ended)
    /// before their end: each held one is removed, its callback getting `why(path)`; each named
    /// early (see [`Gate::release_held`]) is removed where it is still the same file, and its
    /// path returned (its callback said `Ok` when it was named). Call it after the creator's
    /// `publish_now`.
    pub fn discard_held(&self, why: impl Fn(&Path) -> cacheless::Error) -> Vec<PathBuf> {
        let files = self.take_held();
        let early = std::mem::take(&mut self.lock().early);
        for (_, held, then) in files {
            let e = why(held.path());
            // Dropped: removed.
            drop(held);
            then(Err(e));
        }
        early.into_iter().filter(|e| e.at.remove_if_same()).map(|e| e.at.path().to_path_buf()).collect()
    }

    /// Every file the gate holds, in the order they joined.
    fn take_held(&self) -> Vec<(u64, Held, Published)> {
        let mut h = self.lock();
        h.open = 0;
        h.files.drain(..).collect()
    }
}

impl Keeper for Gate {
    /// A file whose data ends at `until` is finished: counted for the verifier's decision (see
    /// [`Gate::keep`]), where the files kept when the first is parked are too few while an
    /// earlier batch's syncfs is still running.
    fn finished(&self, until: u64) {
        self.finished.fetch_add(1, Ordering::Relaxed);
        self.furthest.fetch_max(until, Ordering::Relaxed);
    }

    /// Names `file` at once where the input is verified past `until` (the end of its data);
    /// else holds it, parked (its descriptor
    /// closed) once as many as the gate allows are held open. A file that cannot be parked
    /// stays open.
    fn keep(&self, until: u64, file: PendingFile, then: Published) {
        let kept = self.kept.fetch_add(1, Ordering::Relaxed) + 1;
        if until <= self.passed() {
            return then(file.publish(false));
        }
        let mut h = self.lock();
        let held = if h.open < self.open_max {
            h.open += 1;
            Held::Open(file)
        } else {
            if !h.asked {
                // The hold begins to cost a rename per file: a second decoding may cost less.
                // Judged by the files finished so far, not those kept: batches are synced by
                // several workers, and the first to end may be a later one.
                h.asked = true;
                let files = self.finished.load(Ordering::Relaxed).max(kept);
                let decoded = self.furthest.load(Ordering::Relaxed).max(until);
                if let Some(a) = self.ahead.as_ref().filter(|a| a.worth_it(files, decoded)) {
                    a.start(kept);
                }
            }
            match file.park() {
                Ok(p) => {
                    h.parked += 1;
                    Held::Parked(p)
                }
                Err(file) => {
                    h.open += 1;
                    Held::Open(file)
                }
            }
        };
        h.files.push_back((until, held, then));
    }

    /// Names the held files the gate has passed, in the order they joined, and forgets the
    /// early names it now vouches for.
    fn synced(&self) {
        let passed = self.passed();
        let ready: Vec<(u64, Held, Published)> = {
            let mut h = self.lock();
            h.early.retain(|e| e.until > passed);
            let mut ready = Vec::new();
            while h.files.front().is_some_and(|f| f.0 <= passed) {
                if let Some(f) = h.files.pop_front() {
                    if matches!(f.1, Held::Open(_)) {
                        h.open -= 1;
                    }
                    ready.push(f);
                }
            }
            ready
        };
        publish_all(ready);
    }

    fn prefers_temporary(&self) -> bool {
        self.lock().open >= self.open_max
    }
}

/// Names held files the gate passed. Many at once (the end of a single-frame archive names
/// every file it made) are named on several threads, each taking runs of them in the order they
/// joined, a run a folder's files that came together (`RUN` of them at most): names in one folder
/// wait for each other (its lock), names in different folders do not. This thread takes runs
/// too, and the rest where no thread can start.
fn publish_all(ready: Vec<(u64, Held, Published)>) {
    const RUN: usize = 1024;
    let name = |run: Vec<(u64, Held, Published)>| {
        for (_, held, then) in run {
            then(held.publish());
        }
    };
    if ready.len() <= RUN {
        return name(ready);
    }
    // Asked only here: the kernel's answer reads the cgroup's files, where most batches name a
    // few files or none.
    let helpers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(8) - 1;
    if helpers == 0 {
        return name(ready);
    }
    let mut runs: VecDeque<Vec<(u64, Held, Published)>> = VecDeque::new();
    for f in ready {
        match runs.back_mut() {
            Some(run) if run.len() < RUN && run.last().is_some_and(|l| Arc::ptr_eq(l.1.dir(), f.1.dir())) => run.push(f),
            _ => runs.push_back(vec![f]),
        }
    }
    let helpers = helpers.min(runs.len() - 1);
    let runs = Mutex::new(runs);
    let work = || loop {
        let Some(run) = runs.lock().unwrap_or_else(|e| e.into_inner()).pop_front() else { return };
        name(run);
    };
    std::thread::scope(|s| {
        for _ in 0..helpers {
            if std::thread::Builder::new().name("cacheless-name".into()).spawn_scoped(s, work).is_err() {
                break;
            }
        }
        work();
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use cacheless::{CreateOptions, CreateQueue, Durability, FileAttrs, FileCreator};
    use std::sync::atomic::AtomicUsize;

    fn open_dir(p: &Path) -> Arc<OwnedFd> {
        Arc::new(std::fs::File::open(p).unwrap().into())
    }

    fn content(i: u32) -> Vec<u8> {
        i.to_le_bytes().iter().copied().cycle().take(i as usize * 10).collect()
    }

    /// Past the files a checksum gate holds open, the queue creates files under temporary
    /// names: they stay there (their descriptors closed) until the gate passes them, then take
    /// their names; an abandoned one leaves nothing, and those the gate never passes go.
    #[test]
    fn past_the_files_a_gate_holds_open_files_are_made_under_temporary_names() {
        for passes in [true, false] {
            let d = tempfile::tempdir().unwrap();
            let dir = open_dir(d.path());
            let gate = Arc::new(AtomicU64::new(0));
            let opts = CreateOptions { durability: Durability::NamedAfterSync { write_back: Some(1 << 20) }, ..CreateOptions::new() };
            let keeper = Arc::new(Gate::new(gate.clone(), 4));
            let creator = FileCreator::with_keeper(opts, keeper.clone());
            let mut q = CreateQueue::new(&creator);
            let named = Arc::new(AtomicUsize::new(0));
            for i in 0..20u32 {
                let name = format!("f{i:02}");
                let t = q.push(dir.clone(), OsStr::new(&name), Path::new(&name), 100, FileAttrs { permissions: Some(0o644), ..FileAttrs::default() }).unwrap();
                if i % 5 == 4 {
                    drop(t);
                    continue;
                }
                let mut f = q.take(t).unwrap();
                f.write_at(&content(i + 1), 0).unwrap();
                f.keep_with(u64::from(i) + 1);
                let n = named.clone();
                f.finish_then(Box::new(move |r| {
                    if r.is_ok() {
                        n.fetch_add(1, Ordering::Relaxed);
                    }
                }))
                .unwrap();
                // Synced: held by the gate from now on.
                creator.publish_now();
            }
            drop(q);
            let names = || {
                let mut v: Vec<String> = std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
                v.sort();
                v
            };
            let waiting = names();
            assert_eq!(waiting.len(), 16 - 4, "all but the four held open wait under temporary names: {waiting:?}");
            assert!(waiting.iter().all(|n| n.starts_with(".f") && n.ends_with(".tmp")), "{waiting:?}");
            assert_eq!(named.load(Ordering::Relaxed), 0);
            if passes {
                gate.store(u64::MAX, Ordering::Release);
                creator.publish_now();
                let want: Vec<String> = (0..20u32).filter(|i| i % 5 != 4).map(|i| format!("f{i:02}")).collect();
                assert_eq!(names(), want);
                for i in (0..20u32).filter(|i| i % 5 != 4) {
                    assert_eq!(std::fs::read(d.path().join(format!("f{i:02}"))).unwrap(), content(i + 1));
                }
                assert_eq!(named.load(Ordering::Relaxed), 16);
            } else {
                creator.publish_now();
                let removed = keeper.discard_held(|p| cacheless::Error::io("verify", p, std::io::Error::other("checksum")));
                assert!(removed.is_empty());
                assert_eq!(names(), Vec::<String>::new(), "nothing the gate did not pass is left");
            }
            drop(creator);
            drop(keeper);
            assert_eq!(cacheless_testkit::open_in(d.path()), Vec::<PathBuf>::new());
        }
    }

    /// Whether the verifier ahead starts is judged by the files finished so far and the
    /// furthest end of their data: where the first file parked comes from a later batch (an
    /// earlier batch's syncfs still running), the files kept so far (one) say nothing of how
    /// many the archive has per MiB.
    #[test]
    fn the_verifier_is_judged_by_the_files_finished_not_those_kept() {
        for finished_first in [true, false] {
            let d = tempfile::tempdir().unwrap();
            let archive = d.path().join("a.tar.gz");
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            std::io::Write::write_all(&mut gz, &[0u8; 4096]).unwrap();
            std::fs::write(&archive, gz.finish().unwrap()).unwrap();
            let verified = Arc::new(AtomicU64::new(0));
            let ahead = Ahead::new(archive, cacheless::ReadOptions::from(cacheless::IoOptions::default()), verified.clone());
            ahead.enable(crate::source::Compression::Gzip, None);
            let keeper = Arc::new(Gate::new(verified, 0).with_ahead(Some(ahead.clone())));
            // A thousand files in the first MiB of tar stream: for gzip, a second decoding
            // costs less than a thousand renames.
            if finished_first {
                for i in 1..=1000u64 {
                    keeper.finished(i * 1024);
                }
            }
            let opts = CreateOptions { durability: Durability::NamedAfterSync { write_back: Some(1 << 20) }, ..CreateOptions::new() };
            let creator = FileCreator::with_keeper(opts, keeper.clone());
            let dir = open_dir(d.path());
            let mut q = CreateQueue::new(&creator);
            let t = q.push(dir, OsStr::new("f"), Path::new("f"), 10, FileAttrs { permissions: Some(0o644), ..FileAttrs::default() }).unwrap();
            let mut f = q.take(t).unwrap();
            f.write_at(b"0123456789", 0).unwrap();
            // The last of them is the first kept.
            f.keep_with(1000 * 1024);
            f.finish_then(Box::new(|_| {})).unwrap();
            creator.publish_now();
            let report = keeper.report().unwrap_or_default();
            assert_eq!(report.contains("verified ahead by a second read, started after 1 files"), finished_first, "{report}");
            ahead.finish();
            drop(q);
            drop(creator);
            let _ = keeper.discard_held(|p| cacheless::Error::io("verify", p, std::io::Error::other("checksum")));
        }
    }
}
