//! Whole files in one call: create a file in a directory, write a buffer in the best mode,
//! set its attributes, make it durable if asked, close it. The small-file half of the write
//! path (the streaming [`Writer`](crate::Writer) is the other), shared by many threads.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use crate::buf::AlignedBuf;
use crate::caps::{self, FsCaps, RWF_DONTCACHE};
use crate::error::{Error, ErrorKind, Result};
use crate::fault::{self, Step};
use crate::pending::{initial_mode, Named, Naming, Parked, PendingFile};
use crate::plan::{self, Plan};
use crate::policy::{self, Decision, Mode, Reason, Taken};
use crate::progress::Progress;
use crate::residency;
use crate::sys;
use crate::write::WriteReport;

/// Direct writes from memory that is not aligned for O_DIRECT go through an aligned bounce
/// buffer of at most this size.
const BOUNCE: usize = 1 << 20;

/// When a [`FileCreator`]'s files are made durable, and when they get their final names: the
/// valid combinations of syncing each file, writing small files back together and naming files
/// after their batch's syncfs, one variant each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Each file is fsynced (its data and attributes) before it is closed (the default).
    #[default]
    EachFile,
    /// Nothing is synced here: the caller makes the whole tree durable at the end. With
    /// `write_back` (bytes), files under [`policy::SMALL_WRITE`] that auto would write uncached
    /// are written plainly instead, kept open, and once this many bytes of them (or
    /// [`CreateOptions::deferred_drops`] files) are waiting, the filesystem is synced (syncfs,
    /// which writes them back in a few large requests rather than one or more each) and their
    /// pages are dropped: the cache never holds more than about this many bytes of theirs, and
    /// the device sees a fraction of the requests. Dirty pages of other programs on the same
    /// filesystem are written back by the same syncfs (they stay cached).
    AtTheEnd {
        /// Bytes of small files written back together (`None`: each file on its own).
        write_back: Option<u64>,
    },
    /// As [`Durability::AtTheEnd`], and files are named only once their data is durable:
    /// [`FileCreator::create`] creates each file without a name (O_TMPFILE), or under a
    /// temporary name beside its final one where the filesystem has no O_TMPFILE (or
    /// `CACHELESS_DISABLE=tmpfile`); once finished it waits in the batch, and the batch's syncfs
    /// is followed by the links (or renames) that name its files. A power cut then leaves under
    /// a final name nothing, the file it replaced, or the complete new file, never a file whose
    /// data did not reach the disk (which ext4 shows as zeros of the new length); what it may
    /// leave besides is nothing (an unnamed file is freed at the next mount) or, under
    /// temporary names, the temporaries `.NAME.cacheless-BOOT-PID-N.lk.tmp`. A last
    /// [`FileCreator::publish_now`] names what is still waiting, and the caller's final syncfs
    /// makes the names durable (extract). The batch is written back every `write_back` bytes
    /// (32 MiB when `None`; small files are then written as auto decides) or
    /// [`CreateOptions::deferred_drops`] files.
    NamedAfterSync {
        /// Bytes per batch, and small files written plainly to be written back together.
        write_back: Option<u64>,
    },
}

impl Durability {
    /// [`Durability::EachFile`] where `sync`, else [`Durability::AtTheEnd`] without batches.
    pub fn synced(sync: bool) -> Durability {
        if sync {
            Durability::EachFile
        } else {
            Durability::AtTheEnd { write_back: None }
        }
    }

    /// Whether each file is fsynced before it is closed.
    pub fn each_file(self) -> bool {
        self == Durability::EachFile
    }

    /// Bytes of small files written back together (0: none are).
    fn write_back(self) -> u64 {
        match self {
            Durability::EachFile => 0,
            Durability::AtTheEnd { write_back } | Durability::NamedAfterSync { write_back } => write_back.unwrap_or(0),
        }
    }

    /// Whether files are named after their batch's syncfs.
    fn names_after_sync(self) -> bool {
        matches!(self, Durability::NamedAfterSync { .. })
    }
}

/// How a [`FileCreator`] writes its files.
#[derive(Debug, Clone)]
pub struct CreateOptions {
    /// Requested mode (default auto: the engine's policy for the file's size and filesystem).
    pub mode: Mode,
    /// When files are durable and named (default: each fsynced before it is closed).
    pub durability: Durability,
    /// How many files written through the cache (write-behind) stay open for a second page
    /// drop once their writeback is done; the first drop, right after the write, starts the
    /// writeback. 0 drops once only (pages still under writeback then stay cached). Also the
    /// most files of a batch (see [`Durability`]). Default 64.
    pub deferred_drops: usize,
}

impl Default for CreateOptions {
    fn default() -> CreateOptions {
        CreateOptions::new()
    }
}

impl CreateOptions {
    /// Auto mode, each file fsynced, 64 deferred drops.
    pub fn new() -> CreateOptions {
        CreateOptions { mode: Mode::Auto, durability: Durability::EachFile, deferred_drops: 64 }
    }
}

/// Bytes of files waiting for their name before their batch is synced, when
/// [`Durability::AtTheEnd`] does not say.
const PUBLISH_BATCH: u64 = 32 << 20;

/// Called once a file waiting for its name got it (`Ok`), or did not (the batch's syncfs or the
/// rename failed: the file is removed, the error names it).
pub type Published = Box<dyn FnOnce(Result<()>) + Send>;

/// A finished file in the batch: open (the batch's syncfs needs a descriptor of a file, as a
/// directory may be open with O_PATH only), its pages to drop once written back, and its name
/// to give.
struct Batched {
    file: Arc<File>,
    drop_pages: bool,
    publish: Option<(PendingFile, Published)>,
    /// The position in the gate's input the file's data ends at (see [`FileCreator::with_gate`]).
    until: u64,
}

/// A durable file waiting for the gate to pass it (see [`FileCreator::with_gate`]): open, or
/// parked under a temporary name with its descriptor closed, so that however many wait, they
/// hold few descriptors.
enum Held {
    Open(PendingFile),
    Parked(Parked),
}

impl Held {
    fn path(&self) -> &Path {
        match self {
            Held::Open(p) => p.path(),
            Held::Parked(p) => &p.identity().path,
        }
    }

    /// The folder it is to be named in.
    fn dir(&self) -> &Arc<OwnedFd> {
        match self {
            Held::Open(p) => p.dir(),
            Held::Parked(p) => &p.identity().dir,
        }
    }

    /// What removes it by name should the gate never pass `until` once it is named.
    fn early(&self, until: u64) -> Option<Early> {
        let at = match self {
            Held::Open(p) => p.identity()?,
            Held::Parked(p) => p.identity().clone(),
        };
        Some(Early { until, at })
    }

    fn publish(self) -> Result<()> {
        match self {
            Held::Open(p) => p.publish(false),
            Held::Parked(p) => p.publish(),
        }
    }
}

/// What the gate holds back: files in the order they joined, and the names given before the
/// gate passed them (a caller needed the name: see [`FileCreator::release_held`]).
#[derive(Default)]
struct Gated {
    files: VecDeque<(u64, Held, Published)>,
    open: usize,
    /// Held files kept open at most; the ones after them are parked.
    open_max: usize,
    early: Vec<Early>,
}

/// A file named before the gate passed it: where, and which inode, to remove it if the gate
/// never does.
struct Early {
    until: u64,
    at: Named,
}

/// The files waiting for the batch's syncfs, and their bytes.
#[derive(Default)]
struct Batch {
    files: Vec<Batched>,
    bytes: u64,
}

impl std::fmt::Debug for Gated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gated").field("files", &self.files.len()).field("early", &self.early.len()).finish()
    }
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch").field("files", &self.files.len()).field("bytes", &self.bytes).finish()
    }
}

/// Attributes a file gets when it is created and when it is finished.
#[derive(Debug, Clone, Default)]
pub struct FileAttrs {
    /// Permission bits set when it is finished. Default: those it was created with (see
    /// `create`).
    pub permissions: Option<u32>,
    /// Modification time.
    pub mtime: Option<SystemTime>,
    /// Access time.
    pub atime: Option<SystemTime>,
    /// The mode it is created with, before the umask (or its directory's default ACL) takes
    /// its part, as open(2) takes it: GNU cp creates a copy with its source's permission bits.
    /// Default: 0666 where `permissions` is not given (the file keeps what the umask leaves),
    /// else owner-only until it gets those. See [`FileAttrs::create_perm`].
    pub create: Option<u32>,
}

impl FileAttrs {
    /// The permission bits a file is created with, the one rule for every file the engine
    /// makes: never wider than the ones it ends with (`permissions`, where given), and
    /// owner-only (0600) where those are set only at the end and no creation mode was asked
    /// for, so nobody else reads it half-written; never a set-ID or sticky bit (those come at
    /// the end). Without either, 0666: the umask makes the file what it will stay. (A file
    /// created without a name, which nobody can open, may get its final bits at once: see
    /// [`FileCreator::create`].)
    pub fn create_perm(&self) -> u32 {
        initial_mode(self.permissions, self.create)
    }
}

/// Creates and writes whole files, from many threads at once.
///
/// Each file is created relative to a directory descriptor, with
/// `O_CREAT | O_EXCL | O_NOFOLLOW` (it must not exist, and a symlink in its place is not
/// followed), under its final name; a failed write removes it. Its mode follows the engine's
/// policy for its size on its filesystem ([`policy::decide_write`]): RWF_DONTCACHE for small
/// files where the filesystem has it, else write-behind (each write dropped from the cache, and
/// dropped again once written back); O_DIRECT when forced or large, with the unaligned tail
/// written after clearing O_DIRECT. What each filesystem supports is probed once and cached
/// ([`caps`]), including a refusal of RWF_DONTCACHE only a write could reveal.
///
/// Cheap to clone: clones share the files waiting for their second drop, which
/// [`FileCreator::drop_deferred`] (or dropping the last clone) drops at once.
#[derive(Clone, Debug)]
pub struct FileCreator {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    opts: CreateOptions,
    deferred: Mutex<VecDeque<Arc<File>>>,
    /// Small files written plainly, waiting to be written back together (see
    /// [`Durability::AtTheEnd`]), and files waiting for their name (see
    /// [`Durability::NamedAfterSync`]).
    batch: Mutex<Batch>,
    /// The last directory files were created in and its device: files created one after
    /// another in one directory cost one fstat for all, not one each.
    last_dir: Mutex<Option<(Arc<OwnedFd>, caps::FsKey)>>,
    /// The process's umask, read when a file is first created without a name (`None` where
    /// /proc does not say).
    umask: OnceLock<Option<u32>>,
    /// The last directory a file was created in without a name, and whether files created in
    /// it get exactly the mode asked at creation (no default ACL there).
    exact_dir: LastDir<bool>,
    /// The last directory asked about in [`FileCreator::owner_in`] and the owner its new files get.
    owner_dir: LastDir<(u32, u32)>,
    /// How far the input files are made from has passed its checksums (see
    /// [`FileCreator::with_gate`]); `None`: no gate.
    gate: Option<Arc<AtomicU64>>,
    /// The files the gate holds back.
    gated: Mutex<Gated>,
}

impl Shared {
    /// Keeps `file` open for a later drop of its pages, dropping the oldest one kept over the limit.
    fn defer(&self, file: Arc<File>) {
        let old = {
            let mut q = self.deferred.lock().unwrap_or_else(|e| e.into_inner());
            q.push_back(file);
            if q.len() > self.opts.deferred_drops {
                q.pop_front()
            } else {
                None
            }
        };
        if let Some(f) = old {
            // Best effort: a failed drop loses no data.
            let _ = residency::drop_range(&f, 0, 0);
        }
    }

    fn drop_deferred(&self) {
        self.write_back_batch();
        let files: Vec<Arc<File>> = self.deferred.lock().unwrap_or_else(|e| e.into_inner()).drain(..).collect();
        for f in files {
            let _ = residency::drop_range(&f, 0, 0);
        }
    }

    /// Whether a file of `size_hint` bytes that auto writes uncached is batched instead.
    fn batches(&self, size_hint: u64) -> bool {
        self.opts.durability.write_back() > 0 && self.opts.mode == Mode::Auto && size_hint < policy::SMALL_WRITE
    }

    /// The plan for a file of `size` bytes on a filesystem with `caps`: the policy's, or, for
    /// a small file that is batched (see [`Durability::AtTheEnd`]), write-behind
    /// with the others (batching replaces the uncached write auto would choose, so the
    /// policy's own decision is not made).
    fn plan(&self, caps: Arc<FsCaps>, size: u64, path: &Path) -> Result<Plan> {
        let decision = if self.batches(size) {
            Decision {
                mode: Taken::DropBehind,
                reason: Reason::Batched { size, window_mib: self.opts.durability.write_back() >> 20, files: self.opts.deferred_drops.max(1) },
            }
        } else {
            policy::decide_write(self.opts.mode, &caps, Some(size)).map_err(|r| plan::refused("create", path, r))?
        };
        Ok(Plan::new(caps, decision))
    }

    /// Whether files are created under a temporary name and named after their batch's syncfs.
    fn publishes(&self) -> bool {
        self.opts.durability.names_after_sync()
    }

    /// Adds a finished file to the batch (its pages to drop, its name to give), writing the
    /// batch back once it is full.
    fn add_to_batch(&self, entry: Batched, bytes: u64) {
        let full = {
            let mut b = self.batch.lock().unwrap_or_else(|e| e.into_inner());
            b.files.push(entry);
            b.bytes += bytes;
            let max_bytes = match self.opts.durability.write_back() {
                0 => PUBLISH_BATCH,
                n => n,
            };
            b.bytes >= max_bytes || b.files.len() >= self.opts.deferred_drops.max(1)
        };
        if full {
            self.write_back_batch();
        }
    }

    /// Syncs the filesystem of the batched files, then names those waiting for their name and
    /// drops the pages of the others (clean now). The page drops are best effort: the data is
    /// in the files whatever happens here. A file waiting for its name is named only after a
    /// syncfs that succeeded (and found the filesystem still writable); else it is removed and
    /// its callback gets the error. Without such files the result of the syncfs is not needed
    /// here: a writeback error is reported to whoever makes the files durable (syncfs reports
    /// it to every descriptor of the filesystem opened before it).
    fn write_back_batch(&self) {
        let batch = std::mem::take(&mut *self.batch.lock().unwrap_or_else(|e| e.into_inner()));
        let Some(first) = batch.files.first() else {
            // Nothing to sync; what was held may be passed by now.
            self.release(self.passed());
            return;
        };
        let synced = if batch.files.iter().any(|b| b.publish.is_some()) {
            sys::syncfs(first.file.as_fd())
        } else {
            if !fault::skipped(Step::Syncfs) {
                sys::write_back(first.file.as_fd());
            }
            Ok(())
        };
        let passed = self.passed();
        for b in batch.files {
            if let Some((pending, then)) = b.publish {
                match &synced {
                    // Durable, but its input not yet verified: held back (see `with_gate`).
                    Ok(()) if b.until > passed => self.hold(b.until, pending, then),
                    Ok(()) => then(pending.publish(false)),
                    // Dropping `pending` removes its temporary.
                    Err(e) => then(Err(Error::io("syncfs", pending.path(), io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(libc::EIO))))),
                }
            }
            if b.drop_pages {
                let _ = residency::drop_range(&b.file, 0, 0);
            }
        }
        self.release(passed);
    }

    /// Whether the gate holds as many files open as it may: the next ones are parked.
    fn holds_all_it_may(&self) -> bool {
        self.gate.is_some() && {
            let g = self.gated.lock().unwrap_or_else(|e| e.into_inner());
            g.open >= g.open_max
        }
    }

    /// How far the gate has passed its input (everything where there is no gate).
    fn passed(&self) -> u64 {
        self.gate.as_ref().map_or(u64::MAX, |g| g.load(Ordering::Acquire))
    }

    /// Holds a durable file back until the gate passes `until`; parked (its descriptor closed)
    /// once as many as the gate allows are held open. A file that cannot be parked stays open.
    fn hold(&self, until: u64, pending: PendingFile, then: Published) {
        let mut g = self.gated.lock().unwrap_or_else(|e| e.into_inner());
        let held = if g.open < g.open_max {
            g.open += 1;
            Held::Open(pending)
        } else {
            match pending.park() {
                Ok(p) => Held::Parked(p),
                Err(pending) => {
                    g.open += 1;
                    Held::Open(pending)
                }
            }
        };
        g.files.push_back((until, held, then));
    }

    /// Syncs what waits in the batch (naming what the gate passed), then takes every file the
    /// gate still holds, in the order they joined.
    fn take_held(&self) -> Vec<(u64, Held, Published)> {
        self.write_back_batch();
        let mut g = self.gated.lock().unwrap_or_else(|e| e.into_inner());
        g.open = 0;
        g.files.drain(..).collect()
    }

    /// Names the held files the gate has passed (`passed`), in the order they joined, and
    /// forgets the early names it now vouches for.
    fn release(&self, passed: u64) {
        let ready: Vec<(u64, Held, Published)> = {
            let mut g = self.gated.lock().unwrap_or_else(|e| e.into_inner());
            g.early.retain(|e| e.until > passed);
            let mut ready = Vec::new();
            while g.files.front().is_some_and(|f| f.0 <= passed) {
                if let Some(f) = g.files.pop_front() {
                    if matches!(f.1, Held::Open(_)) {
                        g.open -= 1;
                    }
                    ready.push(f);
                }
            }
            ready
        };
        publish_all(ready);
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
    let helpers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(8) - 1;
    if ready.len() <= RUN || helpers == 0 {
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

/// The pieces [`FileCreator::stage_replace`] writes a buffer in, looking for a cancel between
/// them (a multiple of every O_DIRECT alignment).
pub const STAGE_PIECE: usize = 64 << 20;

/// Makes everything written to the filesystem of `dir` durable (syncfs, Linux 2.6.39), as a
/// caller of a [`FileCreator`] without `sync` ends (extract), and fails (EROFS) when the
/// filesystem went read-only on an error meanwhile: a syncfs then succeeds though what was
/// written since the filesystem's last commit is lost. Retried when interrupted; `path` names
/// `dir` in the error.
pub fn sync_filesystem(dir: BorrowedFd<'_>, path: &Path) -> Result<()> {
    sys::syncfs(dir).map_err(|e| Error::io("syncfs", path, e))
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.drop_deferred();
    }
}

/// The last directory asked about and what is known of it (see [`for_last_dir`]).
type LastDir<T> = Mutex<Option<(Arc<OwnedFd>, T)>>;

/// What `slot` remembers of `dir`, the last directory asked about there; else `make`'s answer,
/// remembered in its place. Files are created one after another in one directory: one call
/// answers for all of them.
fn for_last_dir<T: Copy>(slot: &LastDir<T>, dir: &Arc<OwnedFd>, make: impl FnOnce() -> Option<T>) -> Option<T> {
    let mut last = slot.lock().unwrap_or_else(|e| e.into_inner());
    match &*last {
        Some((d, t)) if Arc::ptr_eq(d, dir) => Some(*t),
        _ => {
            let t = make()?;
            *last = Some((dir.clone(), t));
            Some(t)
        }
    }
}

impl FileCreator {
    /// A creator writing with `opts`.
    pub fn new(opts: CreateOptions) -> FileCreator {
        FileCreator::gated(opts, None, 0)
    }

    /// A creator whose files, made from an input that checksums verify as it is read (a
    /// compressed archive: gzip members, zstd frames), take their names only once `verified`
    /// (the input position up to which every checksum covering it has passed) reaches the
    /// position their data ended at, given with [`NewFile::hold_until`] or
    /// [`FileCreator::publish_after_sync_until`]. Until then a finished file is durable (its
    /// batch's syncfs) but unnamed; [`FileCreator::discard_held`] removes those the input never
    /// vouched for. Up to `open_max` such files stay open (see `pool::FdPlan::held`); those
    /// past them wait under temporary names, their descriptors closed. For
    /// [`Durability::NamedAfterSync`] creators.
    pub fn with_gate(opts: CreateOptions, verified: Arc<AtomicU64>, open_max: usize) -> FileCreator {
        FileCreator::gated(opts, Some(verified), open_max)
    }

    fn gated(opts: CreateOptions, gate: Option<Arc<AtomicU64>>, open_max: usize) -> FileCreator {
        FileCreator {
            shared: Arc::new(Shared {
                opts,
                deferred: Mutex::new(VecDeque::new()),
                batch: Mutex::default(),
                last_dir: Mutex::new(None),
                umask: OnceLock::new(),
                exact_dir: Mutex::new(None),
                owner_dir: Mutex::new(None),
                gate,
                gated: Mutex::new(Gated { open_max, ..Gated::default() }),
            }),
        }
    }

    /// Names every held file now, whether the gate passed it or not: for a caller about to use
    /// one of their names (a hard link to it, a member replacing it) that cannot wait for the
    /// input to be verified. Those the gate had not passed are remembered: if it never does,
    /// [`FileCreator::discard_held`] removes them by name. Syncs first, as
    /// [`FileCreator::publish_now`] does.
    pub fn release_held(&self) {
        let files = self.shared.take_held();
        let passed = self.shared.passed();
        let mut early = Vec::new();
        for (until, held, then) in files {
            let e = (until > passed).then(|| held.early(until)).flatten();
            let r = held.publish();
            if r.is_ok() {
                early.extend(e);
            }
            then(r);
        }
        self.shared.gated.lock().unwrap_or_else(|e| e.into_inner()).early.extend(early);
    }

    /// For a caller that linked `name` in `dir` to a file (a hard link): if that file was named
    /// before the gate passed it (see [`FileCreator::release_held`]), the link goes with it
    /// should the gate never pass it.
    pub fn note_link(&self, dir: &Arc<OwnedFd>, name: &OsStr, path: &Path) {
        let Ok(st) = sys::statat(&**dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) else { return };
        let id = (st.st_dev, st.st_ino);
        let mut g = self.shared.gated.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(until) = g.early.iter().find(|e| e.at.id == id).map(|e| e.until) {
            g.early.push(Early { until, at: Named { dir: dir.clone(), name: name.to_os_string(), path: path.to_path_buf(), id } });
        }
    }

    /// Gives up the files the gate did not pass, the input having failed its checks (or ended)
    /// before their end: each held one is removed, its callback getting `why(path)`; each named
    /// early (see [`FileCreator::release_held`]) is removed where it is still the same file, and
    /// its path returned (its callback said `Ok` when it was named).
    pub fn discard_held(&self, why: impl Fn(&Path) -> Error) -> Vec<PathBuf> {
        let files = self.shared.take_held();
        let early = std::mem::take(&mut self.shared.gated.lock().unwrap_or_else(|e| e.into_inner()).early);
        for (_, held, then) in files {
            let e = why(held.path());
            // Dropped: removed.
            drop(held);
            then(Err(e));
        }
        let mut removed = Vec::new();
        for Early { at, .. } in early {
            let same = sys::statat(&*at.dir, at.name.as_os_str(), rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| (st.st_dev, st.st_ino) == at.id);
            if same && sys::unlinkat(&*at.dir, at.name.as_os_str(), rustix::fs::AtFlags::empty()).is_ok() {
                removed.push(at.path);
            }
        }
        removed
    }

    /// The options it writes with.
    pub fn options(&self) -> &CreateOptions {
        &self.shared.opts
    }

    /// Creates `name` (one path component) in `dir`, writes all of `data`, sets `attrs`,
    /// fsyncs it if the options say so, and closes it. `display_path` names it in errors and
    /// the report. On error nothing is left under `name`.
    pub fn write_file(&self, dir: BorrowedFd<'_>, name: &OsStr, display_path: &Path, data: &[u8], attrs: &FileAttrs) -> Result<WriteReport> {
        let dir = Arc::new(dir.try_clone_to_owned().map_err(|e| Error::io("dup", display_path, e))?);
        let mut f = self.create_as(dir, name, display_path, data.len() as u64, attrs.clone(), Naming::Final)?;
        f.write_at(data, 0)?;
        f.finish()
    }

    /// Writes all of `data` to `path` as a new file that replaces any file of that name: under
    /// a temporary name beside it (as [`FileCreator::write_file`] writes), renamed over `path`
    /// once complete (and durable, with the directory entry, if the options sync). On error
    /// the temporary is removed and `path` is untouched.
    pub fn replace(&self, path: &Path, data: &[u8], attrs: &FileAttrs) -> Result<WriteReport> {
        let (report, entry) = self.stage_replace(path, data, attrs, &Progress::new())?;
        // After a failed directory fsync the rename has happened: the file is whole, only its
        // durability is in doubt, and the error says so. Otherwise the temporary goes.
        entry.map_or(Ok(()), |e| e.publish(self.shared.opts.durability.each_file()))?;
        Ok(report)
    }

    /// [`FileCreator::replace`] up to its rename: the complete file (durable if the options
    /// sync) under its temporary name, for the caller to name with [`PendingFile::publish`]
    /// once nothing stands in the way (dropped instead, it is removed and `path` is as it
    /// was). Written in pieces of [`STAGE_PIECE`], counted in `progress`; once `progress` is
    /// cancelled it stops with an `Interrupted` error.
    pub fn stage_replace(&self, path: &Path, data: &[u8], attrs: &FileAttrs, progress: &Progress) -> Result<(WriteReport, Option<PendingFile>)> {
        let (dir, name) = sys::open_parent(path)?;
        let mut f = self.create_as(Arc::new(dir), name, path, data.len() as u64, attrs.clone(), Naming::Temporary)?;
        progress.add_total_bytes(data.len() as u64);
        for (i, piece) in data.chunks(STAGE_PIECE).enumerate() {
            if progress.is_cancelled() {
                return Err(Error::new(ErrorKind::Interrupted, "write", path, "interrupted"));
            }
            f.write_at(piece, (i * STAGE_PIECE) as u64)?;
            progress.add_bytes(piece.len() as u64);
        }
        f.finish_unbatched()
    }

    /// Creates `name` in `dir` now and returns it open, to be written and finished later,
    /// on any thread: for callers that must create entries in order but write them in
    /// parallel. `size_hint` is the number of bytes that will be written (it picks the mode).
    /// Dropped without [`NewFile::finish`], the file is removed.
    ///
    /// With [`Durability::NamedAfterSync`] the file is created without a name
    /// (O_TMPFILE; under a temporary name where the filesystem has no O_TMPFILE), and named
    /// after the syncfs of the batch it joins when finished: [`NewFile::finish_then`] says
    /// when. Nothing is checked or replaced at `name` until then; naming it replaces a file or
    /// symlink there at once. A file created without a name gets its permissions at creation
    /// where the kernel gives exactly those (no bit the umask masks, no default ACL in `dir`,
    /// no setuid, setgid or sticky bit): nobody can open it before it is named, so it need not
    /// be created 0600 and changed after.
    pub fn create(&self, dir: Arc<OwnedFd>, name: &OsStr, display_path: &Path, size_hint: u64, attrs: FileAttrs) -> Result<NewFile> {
        let naming = if !self.shared.publishes() {
            Naming::Final
        } else if self.shared.holds_all_it_may() {
            // It would be parked under a temporary name once finished: it gets one now, which
            // costs a rename where parking costs a link and a rename.
            Naming::Temporary
        } else {
            Naming::Unnamed { mode: 0 }
        };
        self.create_as(dir, name, display_path, size_hint, attrs, naming)
    }

    /// As [`FileCreator::create`], named as `naming` says (for [`Naming::Unnamed`], with the
    /// mode [`FileCreator::unnamed_perm`] gives, whatever it holds).
    pub(crate) fn create_as(&self, dir: Arc<OwnedFd>, name: &OsStr, display_path: &Path, size_hint: u64, attrs: FileAttrs, naming: Naming) -> Result<NewFile> {
        let (naming, exact) = match naming {
            Naming::Unnamed { .. } => {
                let (perm, exact) = self.unnamed_perm(&dir, &attrs);
                (Naming::Unnamed { mode: perm }, exact)
            }
            n => (n, false),
        };
        let entry = PendingFile::create(dir, name, display_path, naming, attrs.create_perm())?;
        let attrs = Self::mode_given(attrs, exact && entry.unnamed());
        Ok(self.new_file(entry, size_hint, attrs))
    }

    /// The mode to create a file without a name in `dir` with, and whether it is the file's
    /// final one (`attrs`' permissions, which then need no fchmod): so where nobody can open
    /// the file while it is written, the kernel's creation gives exactly those bits (none
    /// masked by the umask, read once per creator, no default ACL in `dir`), and
    /// they have no setuid, setgid or sticky bit (which creation may clear). Else the file is
    /// created as [`FileAttrs::create_perm`] says and gets its permissions when finished.
    pub(crate) fn unnamed_perm(&self, dir: &Arc<OwnedFd>, attrs: &FileAttrs) -> (u32, bool) {
        match (attrs.permissions, *self.shared.umask.get_or_init(sys::umask)) {
            (Some(p), Some(umask)) if p & 0o7000 == 0 && p & umask == 0 && self.exact_in(dir) => (p, true),
            // A creation mode asked for and nothing set at the end: the kernel's creation
            // (umask, default ACL) makes the file what it ends with.
            _ => (attrs.create_perm(), false),
        }
    }

    /// `attrs` for a file created with mode `perm` of [`FileCreator::unnamed_perm`]: without
    /// the permissions it has already where `exact`.
    pub(crate) fn mode_given(mut attrs: FileAttrs, exact: bool) -> FileAttrs {
        if exact {
            attrs.permissions = None;
        }
        attrs
    }

    /// Whether files created in `dir` get the mode asked (less the umask): `dir` has no
    /// default ACL. Asked once for files created one after another in one directory.
    fn exact_in(&self, dir: &Arc<OwnedFd>) -> bool {
        for_last_dir(&self.shared.exact_dir, dir, || Some(!sys::default_acl(dir.as_fd()))).unwrap_or(false)
    }

    /// The owner (uid, gid) that files this process creates in `dir` get: that of `file`, one
    /// just created there (fstat), remembered for the next files created in the same directory.
    /// The group comes from the process or from the directory (its set-group-ID bit, or the
    /// `grpid` mount option): whichever applies, it is the same for every file created there
    /// while nobody changes the directory, so the answer holds for a directory the caller made
    /// and fills itself. `None` where the fstat failed.
    pub(crate) fn owner_in(&self, dir: &Arc<OwnedFd>, file: &File) -> Option<(u32, u32)> {
        for_last_dir(&self.shared.owner_dir, dir, || sys::fstat(file).ok().map(|s| (s.st_uid, s.st_gid)))
    }

    /// A [`NewFile`] of `entry`, to be written with a size of about `size_hint`.
    fn new_file(&self, entry: PendingFile, size_hint: u64, attrs: FileAttrs) -> NewFile {
        let mut draft = self.draft(entry.file().clone(), entry.path(), size_hint);
        draft.caps = self.dir_caps(entry.dir());
        NewFile { draft, entry: Some(entry), attrs }
    }

    /// Names `file` (a complete file under a temporary name, such as a [`Writer`](crate::Writer)
    /// finished with [`Writer::finish_pending`](crate::Writer::finish_pending)) after the next
    /// syncfs of the batch, as files created with [`Durability::NamedAfterSync`] are;
    /// `bytes` counts towards the batch's size. `then` says when (at once with its error where
    /// the creator does not publish after sync: the file is named now).
    pub fn publish_after_sync(&self, file: PendingFile, bytes: u64, then: Published) {
        self.publish_after_sync_until(file, bytes, 0, then);
    }

    /// [`FileCreator::publish_after_sync`] for a file made from a gated input (see
    /// [`FileCreator::with_gate`]) whose data ends at `until` there.
    pub fn publish_after_sync_until(&self, file: PendingFile, bytes: u64, until: u64, then: Published) {
        if self.shared.publishes() {
            let open = file.file().clone();
            self.shared.add_to_batch(Batched { file: open, drop_pages: false, publish: Some((file, then)), until }, bytes);
        } else {
            then(file.publish(false));
        }
    }

    /// Whether a gate holds as many files open as it may (see [`FileCreator::with_gate`]):
    /// the next ones are created under temporary names, as parked files wait.
    pub(crate) fn holds_all_it_may(&self) -> bool {
        self.shared.holds_all_it_may()
    }

    /// Whether files are created without their final name and named after their batch's
    /// syncfs (see [`Durability::NamedAfterSync`]).
    pub(crate) fn publishes(&self) -> bool {
        self.shared.publishes()
    }

    /// `file`, an existing file open for writing, as a [`NewFile`] written in place: its inode
    /// kept (its other names see the data), emptied first when `truncate` (as GNU cp's
    /// `O_TRUNC` open does), never removed, and named already. A FIFO or device is written
    /// with plain writes in order. For a copy over an existing destination where only writing
    /// in place keeps what can be seen of it.
    #[allow(clippy::too_many_arguments)] // What `create` takes, and the file.
    pub fn adopt_existing(
        &self,
        file: File,
        dir: Arc<OwnedFd>,
        name: &OsStr,
        display_path: &Path,
        size_hint: u64,
        attrs: FileAttrs,
        truncate: bool,
    ) -> NewFile {
        let regular = file.metadata().is_ok_and(|m| m.is_file());
        if truncate && regular {
            // Best effort here; a file that cannot be emptied fails at its first write.
            let _ = file.set_len(0);
        }
        let mut f = self.new_file(PendingFile::in_place(file, dir, name, display_path), size_hint, attrs);
        f.draft.stream = !regular;
        f
    }

    /// A file a [`CreateQueue`](crate::create_queue::CreateQueue) created (see
    /// [`PendingFile::adopt`]), as [`FileCreator::create`] would have made it.
    pub(crate) fn adopt(&self, entry: PendingFile, size_hint: u64, attrs: FileAttrs) -> NewFile {
        self.new_file(entry, size_hint, attrs)
    }

    /// How files waiting for their name are created and named (O_TMPFILE and a link, or a
    /// temporary name and a rename, and why), in words for a report; `None` where files are
    /// created under their final name.
    pub fn naming(&self) -> Option<String> {
        self.shared.publishes().then(sys::naming)
    }

    /// Whether a file of `size` bytes is written plainly and written back with others (see
    /// [`Durability::AtTheEnd`]): its data then needs no alignment.
    pub fn writes_back_together(&self, size: u64) -> bool {
        self.shared.batches(size)
    }

    /// Syncs the filesystem now and names every file waiting for its name (see
    /// [`Durability::NamedAfterSync`]), each file's callback saying how it went; drops
    /// the pages of batched files. For a caller about to use one of their names, and at the
    /// end of a job.
    pub fn publish_now(&self) {
        self.shared.write_back_batch();
    }

    /// The capabilities of the filesystem of `dir` (that of every file created in it), when its
    /// filesystem was probed already; `None` leaves it to the file's own probe.
    fn dir_caps(&self, dir: &Arc<OwnedFd>) -> Option<Arc<FsCaps>> {
        let key = for_last_dir(&self.shared.last_dir, dir, || caps::fs_key(dir.as_fd()).ok())?;
        // Looked up each time: a verdict learnt since (RWF_DONTCACHE refused by a write) counts.
        caps::cached(key)
    }

    /// The device of the filesystem holding `dir`, when `dir` is the directory files were last
    /// created in (learnt then, so without a call); `None` otherwise.
    pub fn dir_dev(&self, dir: &Arc<OwnedFd>) -> Option<u64> {
        match &*self.shared.last_dir.lock().unwrap_or_else(|e| e.into_inner()) {
            Some((d, key)) if Arc::ptr_eq(d, dir) => Some(key.dev()),
            _ => None,
        }
    }

    /// How a file of `size` bytes created in `dir` would be written: its mode and why, and the
    /// alignment its data should have to be written without a bounce copy (see
    /// [`Plan::buffer_align`]). `path` names the directory in errors.
    pub fn plan(&self, dir: &Arc<OwnedFd>, path: &Path, size: u64) -> Result<Plan> {
        let caps = match self.dir_caps(dir) {
            Some(c) => c,
            None => caps::for_dir_fd(dir.as_fd()).map_err(|e| Error::io("probe", path, e))?,
        };
        self.shared.plan(caps, size, path)
    }

    /// Drops now the pages of every file kept for a later drop (call it once their writeback
    /// is done, after a syncfs for instance).
    pub fn drop_deferred(&self) {
        self.shared.drop_deferred();
    }

    fn draft(&self, file: Arc<File>, path: &Path, size_hint: u64) -> Draft {
        Draft {
            file,
            path: path.to_path_buf(),
            shared: self.shared.clone(),
            size_hint,
            caps: None,
            plan: None,
            direct_bytes: 0,
            tail_bytes: 0,
            end: 0,
            cached: false,
            batched: false,
            stream: false,
            until: 0,
        }
    }
}

/// A file made by [`FileCreator::create`]: open, under its final name (or a temporary one, see
/// [`Durability::NamedAfterSync`]), not yet finished.
///
/// Write it with [`NewFile::write_at`] (any offsets: what is not written stays a hole), set
/// its length with [`NewFile::set_len`] if it ends in a hole, then [`NewFile::finish`] it.
/// Dropped unfinished, or when `finish` fails, it is removed.
#[derive(Debug)]
pub struct NewFile {
    draft: Draft,
    /// The file until it is finished (dropped with it unfinished, it is removed).
    entry: Option<PendingFile>,
    attrs: FileAttrs,
}

impl NewFile {
    /// How the file will be written: its mode and why, and the alignment its data should
    /// have ([`Plan::data_align`]). Decided here or at the first write, once.
    pub fn plan(&mut self) -> Result<&Plan> {
        Ok(&self.draft.plan()?.plan)
    }

    /// Writes all of `data` at `offset`, in the file's mode.
    pub fn write_at(&mut self, data: &[u8], offset: u64) -> Result<()> {
        self.draft.write_at(data, offset)
    }

    /// Sets the file's length (ftruncate): a file ending in a hole.
    pub fn set_len(&mut self, len: u64) -> Result<()> {
        self.draft.file.set_len(len).map_err(|e| Error::io("truncate", &self.draft.path, e))?;
        self.draft.end = len;
        Ok(())
    }

    /// Where this file's data ends in the input of a gated creator (see
    /// [`FileCreator::with_gate`]): it takes its name only once the input is verified that far.
    pub fn hold_until(&mut self, until: u64) {
        self.draft.until = until;
    }

    /// Sets the permission bits the file gets when finished (in place of those given at
    /// creation; `None`: it keeps those it has).
    pub fn set_permissions(&mut self, permissions: Option<u32>) {
        self.attrs.permissions = permissions;
    }

    /// The open file (for calls the engine does not make, such as fchown).
    pub fn file(&self) -> &File {
        &self.draft.file
    }

    /// The path given at creation.
    pub fn path(&self) -> &Path {
        &self.draft.path
    }

    /// Sets the attributes, fsyncs if the options say so, and closes the file. A file under a
    /// temporary name gets its final name later, with its batch: see [`NewFile::finish_then`]
    /// to learn when, or whether it failed.
    pub fn finish(self) -> Result<WriteReport> {
        self.finish_then(Box::new(|_| {}))
    }

    /// As [`NewFile::finish`], then `then` once the file has its final name: at once for a
    /// file created under it, after its batch's syncfs for one under a temporary name (or with
    /// the error that removed it). Not called when finishing fails (the error is returned).
    pub fn finish_then(mut self, then: Published) -> Result<WriteReport> {
        let report = match self.draft.finish(&self.attrs) {
            Ok(r) => r,
            Err(e) => {
                // The file goes first, then what `then` holds (a caller may wait on it).
                drop(self);
                drop(then);
                return Err(e);
            }
        };
        match self.settle() {
            Ok(None) => then(Ok(())),
            // Named after its batch's syncfs.
            Ok(Some(pending)) if self.draft.shared.publishes() => self.draft.close_pending(pending, then),
            // A file under a temporary name from a creator that names files at once.
            Ok(Some(pending)) => then(pending.publish(false)),
            Err(e) => then(Err(e)),
        }
        Ok(report)
    }

    /// Marks the finished file done: closes it (its pages dropped, or kept for a later drop)
    /// and hands back the file where it is still to be named (under a temporary name or
    /// none). A file from a creator that names files after their syncfs is handed back open,
    /// its pages left to the batch that names it.
    fn settle(&mut self) -> Result<Option<PendingFile>> {
        let Some(entry) = self.entry.take() else {
            return Err(Error::new(ErrorKind::InvalidInput, "finish", &self.draft.path, "finished already"));
        };
        if entry.unpublished() {
            if !self.draft.shared.publishes() {
                self.draft.close();
            }
            return Ok(Some(entry));
        }
        self.draft.close();
        // Under its final name already, or written in place: nothing to name.
        entry.publish(false)?;
        Ok(None)
    }

    /// As [`NewFile::finish`], but a file created without its final name (see
    /// [`Durability::NamedAfterSync`]) is returned instead of joining the creator's
    /// batch, for a caller that batches files itself: once a syncfs of its own made the file
    /// durable, [`PendingFile::publish_synced`] names it (dropped instead, it is removed). A
    /// file created under its final name is finished as `finish` does (`None`).
    pub fn finish_unbatched(mut self) -> Result<(WriteReport, Option<PendingFile>)> {
        // On error `self` goes, and with it the file.
        let report = self.draft.finish(&self.attrs)?;
        Ok((report, self.settle()?))
    }

    /// Sets the attributes, fsyncs the file whatever the options say (a copy made durable on
    /// its own by a creator shared with batched ones), and closes it; hands it back where it
    /// is still to be named, as [`NewFile::finish_unbatched`] does.
    pub(crate) fn finish_durable(mut self) -> Result<(WriteReport, Option<PendingFile>)> {
        let mut report = self.draft.finish(&self.attrs)?;
        if !report.synced && !self.draft.stream {
            sys::fsync(&self.draft.file, &self.draft.path)?;
            report.synced = true;
        }
        Ok((report, self.settle()?))
    }
}

/// How a file is being written, decided at its first write (or at finish for an empty file).
#[derive(Debug)]
struct Writing {
    plan: Plan,
    direct: DirectState,
}

/// O_DIRECT on the descriptor, for a file in direct mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DirectState {
    /// Not switched on yet.
    Off,
    /// On: aligned writes go straight to the device.
    On,
    /// Cleared for an unaligned write; the rest of the file is written buffered.
    Cleared,
}

/// An open file and how it is being written.
#[derive(Debug)]
struct Draft {
    /// Shared with the list of files waiting for their second page drop.
    file: Arc<File>,
    path: PathBuf,
    shared: Arc<Shared>,
    size_hint: u64,
    /// The filesystem's capabilities when known at creation (from its directory).
    caps: Option<Arc<FsCaps>>,
    plan: Option<Writing>,
    direct_bytes: u64,
    tail_bytes: u64,
    /// End of the data written so far (or the length set).
    end: u64,
    /// Some bytes went through the page cache: their pages are dropped at the end.
    cached: bool,
    /// Written plainly, to be written back with other small files (see
    /// [`Durability::AtTheEnd`]).
    batched: bool,
    /// Not a regular file (a FIFO or device written in place): plain writes in order, no
    /// O_DIRECT and no page drops.
    stream: bool,
    /// Where its data ends in a gated input (see [`FileCreator::with_gate`]).
    until: u64,
}

impl Draft {
    fn err(&self, op: &'static str, e: io::Error) -> Error {
        match &self.plan {
            Some(w) => plan::io_error(op, &self.path, e, w.plan.decision.mode, w.plan.flags, &w.plan.caps),
            None => Error::io(op, &self.path, e),
        }
    }

    /// Decides the mode on first use.
    fn plan(&mut self) -> Result<&mut Writing> {
        if self.plan.is_none() {
            let caps = match self.caps.take() {
                Some(c) => c,
                None => caps::for_file(&self.file).map_err(|e| Error::io("probe", &self.path, e))?,
            };
            self.batched = self.shared.batches(self.size_hint);
            let plan = self.shared.plan(caps, self.size_hint, &self.path)?;
            self.plan = Some(Writing { plan, direct: DirectState::Off });
        }
        match self.plan.as_mut() {
            Some(p) => Ok(p),
            None => Err(Error::new(ErrorKind::Io, "create", &self.path, "no write plan")),
        }
    }

    fn write_at(&mut self, data: &[u8], off: u64) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        if self.stream {
            use std::io::Write;
            (&*self.file).write_all(data).map_err(|e| Error::io("error writing {}", &self.path, e))?;
            self.end = off + data.len() as u64;
            return Ok(());
        }
        let mode = self.plan()?.plan.decision.mode;
        match mode {
            Taken::Direct => self.write_direct(data, off)?,
            Taken::DontCache => self.write_dontcache(data, off)?,
            Taken::DropBehind => self.write_behind(data, off)?,
            Taken::Buffered | Taken::NoData | Taken::Remote => sys::write_full(&self.file, data, off, 0).map_err(|e| self.err("write", e))?,
        }
        self.end = self.end.max(off + data.len() as u64);
        Ok(())
    }

    /// Aligned whole blocks with O_DIRECT (through a bounce buffer if `data` is not aligned),
    /// the rest after clearing O_DIRECT, uncached where the filesystem allows.
    fn write_direct(&mut self, data: &[u8], off: u64) -> Result<()> {
        let (caps, state) = match &self.plan {
            Some(w) => (w.plan.caps.clone(), w.direct),
            None => return Err(Error::new(ErrorKind::Io, "write", &self.path, "no write plan")),
        };
        let Ok(a) = caps.direct.as_ref() else {
            return Err(Error::new(ErrorKind::Unsupported, "write", &self.path, "O_DIRECT unavailable").with_hint(policy::alternatives(Mode::Direct, &caps)));
        };
        let (align, mem_align) = (a.offset.max(1) as usize, a.mem.max(1) as usize);
        let mut bulk = 0;
        if state != DirectState::Cleared && off % align as u64 == 0 {
            bulk = data.len() / align * align;
        }
        let mut on = state == DirectState::On;
        if bulk > 0 {
            if !on {
                sys::set_direct(&self.file, true).map_err(|e| {
                    Error::io("fcntl(O_DIRECT)", &self.path, e).with_kind(ErrorKind::Unsupported).with_hint(policy::alternatives(Mode::Direct, &caps))
                })?;
                self.set_direct_state(DirectState::On);
                on = true;
            }
            let bulk_data = &data[..bulk];
            let r = if bulk_data.as_ptr() as usize % mem_align == 0 {
                sys::write_full(&self.file, bulk_data, off, 0)
            } else {
                self.bounce(bulk_data, off, align.max(mem_align))
            };
            r.map_err(|e| self.err("write", e))?;
            self.direct_bytes += bulk as u64;
        }
        let rest = &data[bulk..];
        if !rest.is_empty() {
            if on {
                sys::set_direct(&self.file, false).map_err(|e| self.err("fcntl", e))?;
            }
            self.set_direct_state(DirectState::Cleared);
            sys::write_uncached(&self.file, rest, off + bulk as u64, &caps).map_err(|e| self.err("write", e))?;
            // Even uncached, the partial page a tail shares with the direct part can stay
            // cached (it is read in to be merged): dropped at the end like write-behind pages.
            self.cached = true;
            self.tail_bytes += rest.len() as u64;
        }
        Ok(())
    }

    fn set_direct_state(&mut self, s: DirectState) {
        if let Some(p) = self.plan.as_mut() {
            p.direct = s;
        }
    }

    /// Direct writes of `data` (a whole number of blocks) copied through an aligned buffer.
    fn bounce(&self, data: &[u8], off: u64, align: usize) -> io::Result<()> {
        let size = BOUNCE.min(data.len()).div_ceil(align) * align;
        let mut b = AlignedBuf::try_new(size, align).ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        let mut done = 0;
        while done < data.len() {
            let n = size.min(data.len() - done);
            b[..n].copy_from_slice(&data[done..done + n]);
            sys::write_full(&self.file, &b[..n], off + done as u64, 0)?;
            done += n;
        }
        Ok(())
    }

    fn write_dontcache(&mut self, data: &[u8], off: u64) -> Result<()> {
        match sys::write_full(&self.file, data, off, RWF_DONTCACHE) {
            // RWF_DONTCACHE drops pages as their writeback ends, but not always every one: the
            // file is dropped again when it is closed (or once written back, when not synced).
            Ok(()) => {
                self.cached = true;
                Ok(())
            }
            // The probe could not tell (it could not read the file): the first write does.
            // Under auto, remember it for the filesystem and take the next mode.
            Err(e) if sys::dontcache_refused(&e) && self.shared.opts.mode == Mode::Auto => {
                if let Some(w) = self.plan.as_mut() {
                    caps::refuse_dontcache(w.plan.caps.dev, &e);
                    let decision = Decision { mode: Taken::DropBehind, reason: Reason::DontcacheRefusedByWrite { errno: caps::errno_name(&e) } };
                    w.plan = Plan::new(w.plan.caps.clone(), decision);
                }
                self.write_behind(data, off)
            }
            Err(e) => Err(self.err("write", e)),
        }
    }

    /// A plain write, dropped from the cache at once (which starts its writeback) and again
    /// later (see [`CreateOptions::deferred_drops`]).
    fn write_behind(&mut self, data: &[u8], off: u64) -> Result<()> {
        sys::write_full(&self.file, data, off, 0).map_err(|e| self.err("write", e))?;
        // A batched file's pages are written back and dropped with its batch's.
        if !self.batched {
            let _ = residency::drop_range(&self.file, off, data.len() as u64);
        }
        self.cached = true;
        Ok(())
    }

    fn finish(&mut self, attrs: &FileAttrs) -> Result<WriteReport> {
        if self.stream {
            sys::apply_attrs(&self.file, attrs.permissions, attrs.atime, attrs.mtime).map_err(|(op, e)| self.err(op, e))?;
            let decision = Decision { mode: Taken::Buffered, reason: Reason::NotRegularWrite };
            return Ok(WriteReport { path: self.path.clone(), bytes: self.end, decision, direct_bytes: 0, tail_bytes: 0, synced: false, backend: None });
        }
        let decision = self.plan()?.plan.decision.clone();
        let sync = self.shared.opts.durability.each_file();
        // Attributes before the sync, so that it makes them durable with the data.
        sys::apply_attrs(&self.file, attrs.permissions, attrs.atime, attrs.mtime).map_err(|(op, e)| self.err(op, e))?;
        if sync {
            sys::fsync(&self.file, &self.path)?;
        }
        Ok(WriteReport {
            path: self.path.clone(),
            bytes: self.end,
            decision,
            direct_bytes: self.direct_bytes,
            tail_bytes: self.tail_bytes,
            synced: sync,
            backend: None,
        })
    }

    /// Closes a finished file; pages it left in the cache are dropped now when they are written
    /// back already (synced), else kept for a later drop.
    fn close(&mut self) {
        if !self.cached {
            return;
        }
        if self.shared.opts.durability.each_file() {
            let _ = residency::drop_range(&self.file, 0, 0);
        } else if self.batched {
            self.shared.add_to_batch(Batched { file: self.file.clone(), drop_pages: true, publish: None, until: 0 }, self.end);
        } else {
            self.shared.defer(self.file.clone());
        }
    }

    /// Closes a finished file under a temporary name: it joins the batch, to be named after
    /// its syncfs (its pages dropped then too, or kept for a later drop as [`Draft::close`]
    /// does).
    fn close_pending(&mut self, pending: PendingFile, then: Published) {
        let drop_pages = self.cached && self.batched;
        if self.cached && !self.batched {
            self.shared.defer(self.file.clone());
        }
        self.shared.add_to_batch(Batched { file: self.file.clone(), drop_pages, publish: Some((pending, then)), until: self.until }, self.end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::{Mode as FMode, OFlags};

    /// Where the probe could not tell (it could not read the file) and a write is the first to
    /// meet a refusal of RWF_DONTCACHE, auto takes write-behind, says why, and remembers it
    /// for the filesystem. tmpfs refuses the flag; the cache is made to say it takes it.
    #[test]
    fn a_dontcache_refusal_only_a_write_reveals_falls_back_and_is_remembered() {
        let shm = Path::new("/dev/shm");
        let real = match caps::for_dir(shm) {
            Ok(c) if c.fs_type == "tmpfs" && c.dontcache.is_err() => c,
            _ => {
                cacheless_testkit::skip("no tmpfs without RWF_DONTCACHE at /dev/shm");
                return;
            }
        };
        let d = tempfile::tempdir_in(shm).unwrap();
        let dir = sys::open(d.path(), OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, FMode::empty()).unwrap();
        let mut blind = (*real).clone();
        blind.dontcache = Ok(());
        caps::set_cached(&File::open(d.path()).unwrap(), blind);
        let c = FileCreator::new(CreateOptions::default());
        let rep = c.write_file(dir.as_fd(), OsStr::new("f"), Path::new("f"), b"some data", &FileAttrs::default()).unwrap();
        assert_eq!(rep.decision.mode, Taken::DropBehind, "{}", rep.decision.reason);
        assert!(matches!(rep.decision.reason, Reason::DontcacheRefusedByWrite { .. }), "{}", rep.decision.reason);
        assert!(rep.decision.reason.to_string().contains("refused by a write"), "{}", rep.decision.reason);
        assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"some data");
        assert!(caps::for_dir(shm).unwrap().dontcache.is_err(), "the refusal is remembered for the filesystem");
        // A forced dontcache there is now refused up front, with the modes to try.
        let forced = FileCreator::new(CreateOptions { mode: Mode::DontCache, ..CreateOptions::default() });
        let e = forced.write_file(dir.as_fd(), OsStr::new("g"), Path::new("g"), b"x", &FileAttrs::default()).unwrap_err();
        assert_eq!(e.hint(), Some(&crate::Hint::Modes(vec![Mode::Auto, Mode::DropBehind])));
        assert!(!d.path().join("g").exists());
    }
}
