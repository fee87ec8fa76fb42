//! Whole files in one call: create a file in a directory, write a buffer in the best mode,
//! set its attributes, make it durable if asked, close it. The small-file half of the write
//! path (the streaming [`Writer`](crate::Writer) is the other), shared by many threads.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use crate::buf::AlignedBuf;
use crate::caps::{self, FsCaps};
use crate::error::{Error, ErrorKind, Result};
pub use crate::options::Durability;
use crate::pending::{NewName, PendingFile};
use crate::plan::{self, Plan};
use crate::policy::{self, Decision, Mode, Reason, Taken};
use crate::progress::Progress;
use crate::residency;
use crate::sys;
use crate::write::WriteReport;

mod attrs;
mod batch;

pub use attrs::FileAttrs;
use attrs::{for_last_dir, LastDir};
pub use batch::{sync_filesystem, Keeper, Published};
use batch::{Batch, Batched};

/// Direct writes from memory that is not aligned for O_DIRECT go through an aligned bounce
/// buffer of at most this size.
const BOUNCE: usize = 1 << 20;

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
    /// Most finished files open in batches at once: in the one being filled and in those being
    /// synced (each writer may be syncing one). A writer that would pass it waits for a sync to
    /// end, so that a slow syncfs (a busy disk, another program's dirty pages) costs time, not
    /// more descriptors than the job has (see `pool::FdPlan::batched_open`). Default: no bound.
    pub batched_open: usize,
    /// Claims this job holds (see [`crate::temps::claim`]) on folders above every folder it
    /// creates files in, kept by the creator while it lives. Where each is held, a file it
    /// makes under a temporary name on a filesystem of this machine is held against cleaners
    /// by them and takes no lock of its own (see `PendingFile::create`). Default: none.
    pub claims: Vec<crate::temps::Claim>,
}

impl Default for CreateOptions {
    fn default() -> CreateOptions {
        CreateOptions::new()
    }
}

impl CreateOptions {
    /// Auto mode, each file fsynced, 64 deferred drops, no bound on the files open in batches.
    pub fn new() -> CreateOptions {
        CreateOptions { mode: Mode::Auto, durability: Durability::EachFile, deferred_drops: 64, batched_open: usize::MAX, claims: Vec::new() }
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
    /// Signalled when a batch's sync ends (see [`CreateOptions::batched_open`]).
    synced: Condvar,
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
    /// The last directory asked about in [`FileCreator::covers`] and whether it is on a
    /// filesystem of this machine.
    local_dir: LastDir<bool>,
    /// Who takes the files once their batch's syncfs made them durable (see [`Keeper`]);
    /// `None`: they are named then.
    keeper: Option<Arc<dyn Keeper>>,
}

impl std::fmt::Debug for dyn Keeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keeper")
    }
}

impl Shared {
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
}

/// The pieces [`FileCreator::stage_replace`] writes a buffer in, looking for a cancel between
/// them (a multiple of every O_DIRECT alignment).
pub const STAGE_PIECE: usize = 64 << 20;

impl Drop for Shared {
    fn drop(&mut self) {
        self.drop_deferred();
    }
}

impl FileCreator {
    /// A creator writing with `opts`.
    pub fn new(opts: CreateOptions) -> FileCreator {
        FileCreator::make(opts, None)
    }

    /// A creator that hands its files to `keeper` once their batch's syncfs made them durable,
    /// instead of naming them then (see [`Keeper`]). For [`Durability::NamedAfterSync`]
    /// creators: others name their files at once.
    pub fn with_keeper(opts: CreateOptions, keeper: Arc<dyn Keeper>) -> FileCreator {
        FileCreator::make(opts, Some(keeper))
    }

    fn make(opts: CreateOptions, keeper: Option<Arc<dyn Keeper>>) -> FileCreator {
        FileCreator {
            shared: Arc::new(Shared {
                opts,
                deferred: Mutex::new(VecDeque::new()),
                batch: Mutex::default(),
                synced: Condvar::new(),
                last_dir: Mutex::new(None),
                umask: OnceLock::new(),
                exact_dir: Mutex::new(None),
                owner_dir: Mutex::new(None),
                local_dir: Mutex::new(None),
                keeper,
            }),
        }
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
        let mut f = self.create_as(dir, name, display_path, data.len() as u64, attrs.clone(), NewName::Final)?;
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
    /// was). Written in pieces of `STAGE_PIECE`, counted in `progress`; once `progress` is
    /// cancelled it stops with an `Interrupted` error.
    pub fn stage_replace(&self, path: &Path, data: &[u8], attrs: &FileAttrs, progress: &Progress) -> Result<(WriteReport, Option<PendingFile>)> {
        let (dir, name) = sys::open_parent(path)?;
        let mut f = self.create_as(Arc::new(dir), name, path, data.len() as u64, attrs.clone(), NewName::Temporary)?;
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
            NewName::Final
        } else if self.prefers_temporary() {
            // It would be parked under a temporary name once finished: it gets one now, which
            // costs a rename where parking costs a link and a rename.
            NewName::Temporary
        } else {
            NewName::Unnamed { mode: 0 }
        };
        self.create_as(dir, name, display_path, size_hint, attrs, naming)
    }

    /// As [`FileCreator::create`], named as `naming` says (for [`NewName::Unnamed`], with the
    /// mode [`FileCreator::unnamed_perm`] gives, whatever it holds).
    pub(crate) fn create_as(&self, dir: Arc<OwnedFd>, name: &OsStr, display_path: &Path, size_hint: u64, attrs: FileAttrs, naming: NewName) -> Result<NewFile> {
        let (naming, exact) = match naming {
            NewName::Unnamed { .. } => {
                let (perm, exact) = self.unnamed_perm(&dir, &attrs);
                (NewName::Unnamed { mode: perm }, exact)
            }
            n => (n, false),
        };
        let covered = naming != NewName::Final && self.covers(&dir);
        let entry = PendingFile::create(dir, name, display_path, naming, attrs.create_perm(), covered)?;
        let attrs = Self::mode_given(attrs, exact && entry.unnamed());
        Ok(self.new_file(entry, size_hint, attrs))
    }

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
        self.publish_after_sync_keyed(file, bytes, 0, then);
    }

    /// [`FileCreator::publish_after_sync`], the file handed to the creator's [`Keeper`] with
    /// `key` once durable.
    pub fn publish_after_sync_keyed(&self, file: PendingFile, bytes: u64, key: u64, then: Published) {
        if self.shared.publishes() {
            let open = file.file().clone();
            self.shared.add_to_batch(Batched { file: open, drop_pages: false, publish: Some((file, then)), key }, bytes);
        } else {
            then(file.publish(false));
        }
    }

    /// Whether the next file is created under a temporary name rather than without a name,
    /// as the creator's [`Keeper`] prefers.
    pub(crate) fn prefers_temporary(&self) -> bool {
        self.shared.keeper.as_ref().is_some_and(|k| k.prefers_temporary())
    }

    /// Whether a file made under a temporary name in `dir` is held against cleaners by the
    /// creator's claims (see [`CreateOptions::claims`]): there are some, each is held, and
    /// `dir` is on a filesystem of this machine (asked once for files created one after another
    /// in one directory).
    pub(crate) fn covers(&self, dir: &Arc<OwnedFd>) -> bool {
        let claims = &self.shared.opts.claims;
        !claims.is_empty()
            && claims.iter().all(crate::temps::Claim::is_held)
            && for_last_dir(&self.shared.local_dir, dir, || Some(!crate::temps::on_shared_fs(dir.as_fd()))).unwrap_or(false)
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
            key: 0,
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

    /// The key this file is handed to the creator's [`Keeper`] with once durable (0 unless
    /// given).
    pub fn keep_with(&mut self, key: u64) {
        self.draft.key = key;
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
    /// For the creator's [`Keeper`] (see [`NewFile::keep_with`]).
    key: u64,
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
            Taken::Buffered | Taken::NoData | Taken::Remote => sys::write_full(&self.file, data, off, sys::RwFlags::NONE).map_err(|e| self.err("write", e))?,
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
                sys::write_full(&self.file, bulk_data, off, sys::RwFlags::NONE)
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
            sys::write_full(&self.file, &b[..n], off + done as u64, sys::RwFlags::NONE)?;
            done += n;
        }
        Ok(())
    }

    fn write_dontcache(&mut self, data: &[u8], off: u64) -> Result<()> {
        match sys::write_full(&self.file, data, off, sys::RwFlags::DONTCACHE) {
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
        sys::write_full(&self.file, data, off, sys::RwFlags::NONE).map_err(|e| self.err("write", e))?;
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
            self.shared.add_to_batch(Batched { file: self.file.clone(), drop_pages: true, publish: None, key: 0 }, self.end);
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
        self.shared.add_to_batch(Batched { file: self.file.clone(), drop_pages, publish: Some((pending, then)), key: self.key }, self.end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::{FMode, OFlags};

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

    /// Names every file a while after its batch's syncfs, as a slow syncfs would delay it.
    struct Slow;

    impl Keeper for Slow {
        fn keep(&self, _: u64, file: PendingFile, then: Published) {
            std::thread::sleep(std::time::Duration::from_millis(5));
            then(file.publish(false));
        }
        fn synced(&self) {}
    }

    /// The most files that wait open in batches when four writers finish 40 files each into
    /// batches of 4 whose sync is slow, with `batched_open` as given.
    fn most_open_in_batches(batched_open: usize) -> usize {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let d = tempfile::tempdir().unwrap();
        let dir = Arc::new(sys::open(d.path(), OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, FMode::empty()).unwrap());
        let opts =
            CreateOptions { durability: Durability::NamedAfterSync { write_back: Some(1 << 20) }, deferred_drops: 4, batched_open, ..CreateOptions::new() };
        let creator = FileCreator::with_keeper(opts, Arc::new(Slow));
        let (open, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        std::thread::scope(|s| {
            for t in 0..4 {
                let (creator, dir, open, most) = (creator.clone(), dir.clone(), open.clone(), most.clone());
                s.spawn(move || {
                    for i in 0..40 {
                        let name = format!("t{t}-{i}");
                        let mut f = creator.create(dir.clone(), OsStr::new(&name), Path::new(&name), 5, FileAttrs::default()).unwrap();
                        f.write_at(name.as_bytes(), 0).unwrap();
                        // Counted from before it joins a batch (one too many per writer at most)
                        // until it is named.
                        most.fetch_max(open.fetch_add(1, SeqCst) + 1, SeqCst);
                        let open = open.clone();
                        f.finish_then(Box::new(move |r| {
                            r.unwrap();
                            open.fetch_sub(1, SeqCst);
                        }))
                        .unwrap();
                    }
                });
            }
        });
        creator.publish_now();
        assert_eq!(open.load(SeqCst), 0, "every file named");
        for t in 0..4 {
            for i in 0..40 {
                let name = format!("t{t}-{i}");
                assert_eq!(std::fs::read(d.path().join(&name)).unwrap(), name.as_bytes());
            }
        }
        most.load(SeqCst)
    }

    /// Writers that fill batches faster than they are synced wait once `batched_open` files
    /// are open in batches: a slow syncfs costs time, not descriptors past the job's share.
    /// Without the bound, each writer holds a batch of its own being synced besides the one
    /// filling.
    #[test]
    fn files_open_in_batches_stay_within_their_bound_however_slow_the_sync() {
        let bounded = most_open_in_batches(8);
        assert!(bounded <= 8 + 4, "{bounded} files open in batches, bound 8 (and one per writer)");
        let unbounded = most_open_in_batches(usize::MAX);
        assert!(unbounded > 8 + 4, "only {unbounded} files open without a bound: the test shows nothing");
    }
}
