//! The workers' side of each file entry: its data written through the engine (the file
//! creator for small files, the streaming `Writer` for large ones), its owner, mode and times,
//! and what the workers share with the parser's thread.

use super::gate::Gate;
use cacheless::sys;
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use cacheless::pool::Work;
use cacheless::sys::Timestamps;
use cacheless::{AlignedBuf, FileAttrs, FileCreator, NewFile, Progress, Taken};

use crate::fsops::RelPath;
use crate::modes::ModeCounter;

/// Size of the chunks a streamed entry's data is handed to a worker in.
pub(super) const CHUNK: usize = 4 << 20;

/// An entry's metadata, as it is to be applied.
#[derive(Clone, Debug)]
pub(super) struct Meta {
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub mtime: (i64, u32),
    pub chown: bool,
    /// Only the time is applied (an existing folder under --no-overwrite-dir).
    pub time_only: bool,
    /// Extended attributes and ACLs (`--xattrs`, `--acls`), where there are any to apply.
    pub extra: Option<Arc<Extra>>,
}

/// What `--xattrs` and `--acls` give an entry besides its owner, mode and times.
#[derive(Debug, Default)]
pub(super) struct Extra {
    /// Extended attributes to set, name and value (those the include and exclude patterns
    /// take).
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// The access ACL to set last (the archive's, or the one its mode says), as the xattr's
    /// value; or why the archive's could not be read.
    pub acl: Option<Result<Vec<u8>, String>>,
    /// A folder's default ACL: `Some(Some(..))` set, `Some(None)` removed (GNU's, for a folder
    /// the archive gives none: one inherited from the folder above goes).
    pub default_acl: Option<Result<Option<Vec<u8>>, String>>,
}

/// Sets an entry's extended attributes, then (after its owner and mode, which the caller
/// applied) its ACLs. What cannot be set is returned as warnings: the entry stays, as GNU tar
/// keeps it.
pub(super) fn apply_extra(at: sys::XattrAt<'_>, x: &Extra, rel: &RelPath) -> Vec<String> {
    let mut warnings = Vec::new();
    let mut said = |what: &str, e: &dyn std::fmt::Display| warnings.push(format!("{}: cannot set {what}: {e}", rel.to_path().display()));
    for (name, value) in &x.xattrs {
        if let Err(e) = sys::xattr_set(at, OsStr::from_bytes(name), value) {
            said(&format!("extended attribute {:?}", String::from_utf8_lossy(name)), &std::io::Error::from(e));
        }
    }
    // The ACLs: set, or (a folder's default ACL the archive does not give) removed; a filesystem
    // without ACLs has no default ACL to remove.
    let acls = [
        ("its ACL", crate::acl::ACCESS, x.acl.as_ref().map(|r| r.as_ref().map(Some))),
        ("its default ACL", crate::acl::DEFAULT, x.default_acl.as_ref().map(|r| r.as_ref().map(Option::as_ref))),
    ];
    for (what, attr, value) in acls {
        let done = match value {
            None => continue,
            Some(Err(why)) => {
                said(what, why);
                continue;
            }
            Some(Ok(Some(v))) => sys::xattr_set(at, attr, v),
            // Nothing to remove where there is none, or no ACLs at all.
            Some(Ok(None)) => sys::xattr_remove(at, attr).or_else(|e| if matches!(e, sys::Errno::NODATA | sys::Errno::OPNOTSUPP) { Ok(()) } else { Err(e) }),
        };
        if let Err(e) = done {
            said(what, &std::io::Error::from(e));
        }
    }
    warnings
}

pub(super) fn times(mtime: (i64, u32)) -> Timestamps {
    sys::timestamps(None, Some((mtime.0, mtime.1.into())))
}

pub(super) fn system_time(t: (i64, u32)) -> std::time::SystemTime {
    sys::system_time(t.0, t.1.into())
}

/// The attributes the engine applies when it finishes a file (after the fchown done here,
/// which clears setuid/setgid).
pub(super) fn attrs(m: &Meta) -> FileAttrs {
    FileAttrs { permissions: Some(m.mode), mtime: Some(system_time(m.mtime)), atime: None, create: None }
}

/// The entry's owner and group as the kernel's ids; `None` when one is out of their range.
pub(super) fn ids(m: &Meta) -> Option<(u32, u32)> {
    Some((u32::try_from(m.uid).ok()?, u32::try_from(m.gid).ok()?))
}

/// fchown to the entry's owner when ownership is restored, and only where the entry does not
/// have it already (as root, most archives' files are root's, as new files are): a change of
/// owner is a journaled inode update, a look at it (fstat) is not.
pub(super) fn chown(fd: impl AsFd, m: &Meta) -> sys::KResult<()> {
    if !m.chown {
        return Ok(());
    }
    let (uid, gid) = ids(m).ok_or(sys::Errno::OVERFLOW)?;
    if sys::fstat(&fd).is_ok_and(|st| st.st_uid == uid && st.st_gid == gid) {
        return Ok(());
    }
    sys::fchown(fd, Some(uid), Some(gid))
}

/// Why an entry failed: the message the report gives, and the OS error's number where an OS
/// call failed (the Python package raises `OSError` with it).
pub(super) struct Why {
    pub msg: String,
    pub errno: Option<i32>,
}

impl Why {
    /// `what` failed on the entry `rel` with the OS error `e`: "REL: WHAT: ERROR".
    pub(super) fn os(rel: &RelPath, what: &str, e: sys::Errno) -> Why {
        Why { msg: format!("{}: {what}: {}", rel.to_path().display(), std::io::Error::from(e)), errno: Some(e.raw_os_error()) }
    }

    /// The engine's error `e` on the entry `rel`, named once (see [`named`]).
    pub(super) fn engine(rel: &RelPath, e: &cacheless::Error, removed: bool) -> Why {
        Why { msg: named(rel, &e.to_string(), removed), errno: e.errno() }
    }
}

impl From<String> for Why {
    fn from(msg: String) -> Why {
        Why { msg, errno: None }
    }
}

impl From<&cacheless::Error> for Why {
    fn from(e: &cacheless::Error) -> Why {
        Why { msg: e.to_string(), errno: e.errno() }
    }
}

/// Gives an open entry its owner when ownership is restored. Where that fails (a user the
/// filesystem cannot represent, root squashed, a user namespace without the id) the entry is
/// kept, as GNU tar keeps it, and the failure is said in the message returned; the mode it is
/// then to get has no set-user-ID or set-group-ID bit (GNU keeps them on a file now owned by
/// the extracting user: a set-ID program of the wrong owner, which we do not make).
pub(super) fn own(fd: impl AsFd, m: &Meta, rel: &RelPath) -> (u32, Option<Why>) {
    owned(chown(fd, m), m, rel)
}

/// The mode an entry is to get, and what went wrong, after `chowned`: the outcome of giving it
/// its owner (see [`own`]; also for an entry that cannot be opened, such as a FIFO).
pub(super) fn owned(chowned: sys::KResult<()>, m: &Meta, rel: &RelPath) -> (u32, Option<Why>) {
    match chowned {
        Ok(()) => (m.mode, None),
        Err(e) => (
            m.mode & !0o6000,
            Some(Why {
                msg: format!(
                    "{}: cannot change ownership to uid {}, gid {}: {} (kept, without set-ID bits)",
                    rel.to_path().display(),
                    m.uid,
                    m.gid,
                    std::io::Error::from(e)
                ),
                errno: Some(e.raw_os_error()),
            }),
        ),
    }
}

/// Owner, mode, extended attributes, ACLs and mtime of a directory (or any open entry), in that
/// order. A failure to set the owner is returned after the rest is set (see [`own`]); what
/// `--xattrs` and `--acls` could not set goes to `warn`.
pub(super) fn apply_meta(fd: &OwnedFd, m: &Meta, rel: &RelPath, warn: impl FnMut(String)) -> Result<(), Why> {
    if m.time_only {
        return sys::futimens(fd, &times(m.mtime)).map_err(|e| Why::os(rel, "futimens", e));
    }
    let (mode, owner) = own(fd, m, rel);
    // After fchown, which clears setuid/setgid.
    let r = sys::fchmod(fd, mode).map_err(|e| Why::os(rel, "fchmod", e));
    if let Some(x) = &m.extra {
        apply_extra(sys::XattrAt::Fd(fd.as_fd()), x, rel).into_iter().for_each(warn);
    }
    let r = r.and_then(|()| sys::futimens(fd, &times(m.mtime)).map_err(|e| Why::os(rel, "futimens", e)));
    r.and(owner.map_or(Ok(()), Err))
}

/// A chunk of a streamed entry's data: the buffer, its length, and its share of the budget.
pub(super) enum Msg {
    Chunk(AlignedBuf, usize, Option<cacheless::Lease>),
    End,
}

/// A small file's data: whole, whole under a batch's lease, or streamed in chunks.
pub(super) enum Data {
    Whole(AlignedBuf, usize, cacheless::Lease),
    Owned(AlignedBuf, usize),
    /// `len` bytes at `off` in its batch's slab.
    InSlab(Arc<Slab>, usize, usize),
    Stream(Receiver<Msg>),
}

/// A batch of small files (see `entry::Ctx`) holds at most this many files...
pub(super) const BATCH_FILES: usize = 32;
/// ... and this many bytes of data.
pub(super) const BATCH_BYTES: usize = 256 << 10;
/// Bytes a slab holds: a batch's data, each file's at a multiple of [`SLAB_ALIGN`].
pub(super) const SLAB_BYTES: usize = BATCH_BYTES + BATCH_FILES * SLAB_ALIGN;
/// Where each file's data starts in a slab: as a buffer of its own would be aligned.
pub(super) const SLAB_ALIGN: usize = 64;
/// Slabs kept for the next batches.
const SLABS_KEPT: usize = 16;

/// The data of a batch's small files, one after another in one buffer: one allocation per
/// batch rather than one per file, none once slabs come back. Goes back to the shared pool
/// when the batch's last file is written (its last [`Data::InSlab`] dropped).
pub(super) struct Slab {
    buf: Option<AlignedBuf>,
    pool: Arc<Mutex<Vec<AlignedBuf>>>,
}

impl Slab {
    pub(super) fn new(buf: AlignedBuf, pool: Arc<Mutex<Vec<AlignedBuf>>>) -> Slab {
        Slab { buf: Some(buf), pool }
    }

    fn bytes(&self) -> &[u8] {
        self.buf.as_deref().unwrap_or_default()
    }
}

impl Drop for Slab {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
            if pool.len() < SLABS_KEPT {
                pool.push(b);
            }
        }
    }
}

/// A small file read whole, waiting in a batch; its ticket says when it is complete or gone.
pub(super) struct Small {
    pub rel: RelPath,
    pub file: NewFile,
    pub meta: Meta,
    pub data: Data,
    pub ticket: Ticket,
}

/// What a worker does for one entry, or for a batch of small ones. Each file's ticket says when
/// it is complete or gone.
pub(super) enum Job {
    /// Small files handed over together (one queue message and one budget lease for all,
    /// where one each cost a wake-up and a lock each), written one after the other.
    Batch(Vec<Small>, cacheless::Lease),
    /// A file below `direct_min`, created by the engine's file creator and written whole.
    File { rel: RelPath, file: Box<NewFile>, meta: Meta, data: Data, ticket: Ticket },
    /// A large file streamed through the engine's `Writer` (its queue of writes in flight, its
    /// mode), fed by chunks from the parser. The Writer owns its file.
    Stream { rel: RelPath, writer: Box<cacheless::Writer>, rx: Receiver<Msg>, meta: Meta, ticket: Ticket },
}

/// The files being written on the workers, by name: a hard link to one of them is made only once
/// it is complete (never to a file that failed, whose partial data the link would keep under
/// another name), and an entry replacing one waits until its worker is done with the name.
#[derive(Default)]
pub(super) struct InFlight {
    state: Mutex<Names>,
    changed: Condvar,
}

/// A name in flight, shared by the map and its ticket (one copy of the name per file).
type Key = Arc<[Vec<u8>]>;

/// The hasher of the names in flight: every entry is looked up and inserted, so the hash is
/// on each file's path; foldhash's (seeded per process) is a fraction of SipHash's cost.
type Hasher = foldhash::fast::RandomState;

#[derive(Default)]
struct Names {
    /// Tickets issued so far.
    issued: u64,
    /// The name of each file in flight, and its latest ticket.
    pending: HashMap<Key, u64, Hasher>,
    /// Names whose latest file failed (and was removed).
    failed: HashSet<Key, Hasher>,
    /// Threads waiting in [`InFlight::settle`]: a settled file wakes them only when there are
    /// some (a wake-up is a system call, and most files settle with nobody waiting).
    waiting: usize,
}

/// What became of the file last written under a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Settled {
    /// Complete, or never written by this extraction.
    Ok,
    /// Failed and removed.
    Failed,
    /// The extraction was cancelled while waiting.
    Cancelled,
}

impl InFlight {
    /// Records that the file `rel` is being written; its ticket settles it.
    /// `until`: where the file's data ends in the tar stream (it is named once the archive's
    /// checksums have verified that far, see `super::gate::Gate`).
    pub(super) fn begin(self: &Arc<Self>, rel: &RelPath, until: u64) -> Ticket {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.issued += 1;
        let seq = st.issued;
        let key: Key = rel.0.as_slice().into();
        st.pending.insert(key.clone(), seq);
        if !st.failed.is_empty() {
            st.failed.remove(rel.0.as_slice());
        }
        Ticket { names: self.clone(), key, seq, ok: false, until }
    }

    /// The files being written at or below `dir`.
    pub(super) fn pending_under(&self, dir: &RelPath) -> Vec<RelPath> {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.pending.keys().filter(|k| k.starts_with(&dir.0)).map(|k| RelPath(k.to_vec())).collect()
    }

    /// Whether a file named `rel` is being written (its ticket not yet settled).
    pub(super) fn pending(&self, rel: &RelPath) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).pending.contains_key(rel.0.as_slice())
    }

    /// The first folder on the way to `rel` that is the name of a file being written or
    /// waiting for its name, if any.
    pub(super) fn pending_above(&self, rel: &RelPath) -> Option<RelPath> {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.pending.is_empty() {
            return None;
        }
        (1..rel.0.len()).find(|&n| st.pending.contains_key(&rel.0[..n])).map(|n| RelPath(rel.0[..n].to_vec()))
    }

    /// Waits until no file named `rel` is being written or waits for its name, and says how its
    /// last file ended. `publish` names the files waiting for their name (a syncfs), called
    /// when waiting is not enough. Checks `progress` for cancellation while it waits.
    pub(super) fn settle(&self, rel: &RelPath, progress: &Progress, publish: impl Fn()) -> Settled {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while st.pending.contains_key(rel.0.as_slice()) {
            if progress.is_cancelled() {
                return Settled::Cancelled;
            }
            // Woken when a file settles; the timeout bounds how late a cancel is seen, and how
            // long a file that is written already waits for its batch.
            st.waiting += 1;
            let (mut guard, waited) = self.changed.wait_timeout(st, Duration::from_millis(20)).unwrap_or_else(|e| e.into_inner());
            guard.waiting -= 1;
            st = guard;
            if waited.timed_out() && st.pending.contains_key(rel.0.as_slice()) {
                drop(st);
                publish();
                st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            }
        }
        if st.failed.contains(rel.0.as_slice()) {
            Settled::Failed
        } else {
            Settled::Ok
        }
    }
}

/// A file in flight, until it has its final name. Dropped without [`Ticket::ok`] (the job
/// failed, panicked or never ran), its name counts as failed. Drop it only after the file is
/// named or removed.
pub(super) struct Ticket {
    names: Arc<InFlight>,
    key: Key,
    seq: u64,
    ok: bool,
    /// Where the file's data ends in the tar stream.
    pub until: u64,
}

impl Ticket {
    /// Settles the file as complete.
    pub(super) fn ok(mut self) {
        self.ok = true;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut st = self.names.state.lock().unwrap_or_else(|e| e.into_inner());
        // A later file under the same name has its own ticket.
        if st.pending.get(&*self.key) == Some(&self.seq) {
            st.pending.remove(&*self.key);
            if !self.ok {
                st.failed.insert(self.key.clone());
            }
        }
        if st.waiting > 0 {
            self.names.changed.notify_all();
        }
    }
}

/// The failures of a run: the first 1000 messages, and how many there were. Shared with the
/// callbacks that name files after their batch's syncfs.
#[derive(Default)]
pub(super) struct Failures {
    /// The messages, how many failures there were, and the first one's errno.
    list: Mutex<(Vec<String>, u64, Option<i32>)>,
}

impl Failures {
    fn add(&self, progress: &Progress, why: Why) {
        progress.error();
        let mut f = self.list.lock().unwrap_or_else(|e| e.into_inner());
        if f.1 == 0 {
            f.2 = why.errno;
        }
        f.1 += 1;
        if f.0.len() < 1000 {
            f.0.push(why.msg);
        }
    }
}

/// What the parser's thread and the workers share.
pub(super) struct Shared {
    pub creator: FileCreator,
    /// Where the creator's durable files wait for the archive's checksums.
    pub gate: Arc<Gate>,
    pub progress: Arc<Progress>,
    failures: Arc<Failures>,
    /// Warnings from the workers (the first 1000).
    warnings: Mutex<Vec<String>>,
    /// Files written per mode.
    pub modes: ModeCounter,
    /// Chunk buffers given back by the workers, for the next streamed entry.
    pub bufs: Mutex<Vec<AlignedBuf>>,
    /// Slabs given back (see [`Slab`]), for the next batches.
    pub slabs: Arc<Mutex<Vec<AlignedBuf>>>,
    /// The files the workers are writing.
    pub in_flight: Arc<InFlight>,
}

impl Shared {
    pub(super) fn new(creator: FileCreator, gate: Arc<Gate>, progress: Arc<Progress>) -> Shared {
        Shared {
            creator,
            gate,
            progress,
            failures: Arc::default(),
            warnings: Mutex::default(),
            modes: Default::default(),
            bufs: Mutex::new(Vec::new()),
            slabs: Arc::default(),
            in_flight: Arc::default(),
        }
    }

    /// Counts and records a failed entry (the first 1000 messages are kept).
    pub(super) fn fail(&self, why: impl Into<Why>) {
        self.failures.add(&self.progress, why.into());
    }

    /// Records a warning: something the entry did not get, the entry itself extracted.
    pub(super) fn warn(&self, msg: String) {
        let mut w = self.warnings.lock().unwrap_or_else(|e| e.into_inner());
        if w.len() < 1000 {
            w.push(msg);
        }
    }

    /// The warnings so far.
    pub(super) fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut *self.warnings.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// A regular file's extended attributes and ACLs, before it is finished with `mode`. With an
    /// ACL to set, the mode is applied here first (the ACL after it, as GNU tar sets them) and
    /// true returned: the engine is not to apply it again.
    pub(super) fn extra(&self, fd: BorrowedFd<'_>, meta: &Meta, mode: u32, rel: &RelPath) -> bool {
        let Some(x) = &meta.extra else { return false };
        let chmod = x.acl.is_some();
        if chmod {
            if let Err(e) = sys::fchmod(fd, mode) {
                self.fail(Why::os(rel, "fchmod", e));
            }
        }
        apply_extra(sys::XattrAt::Fd(fd), x, rel).into_iter().for_each(|w| self.warn(w));
        chmod
    }

    /// The failures so far, how many there were, and the first one's errno.
    pub(super) fn take_failures(&self) -> (Vec<String>, u64, Option<i32>) {
        std::mem::take(&mut *self.failures.list.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// What to do once the file `rel` has its final name (see
    /// `cacheless::Durability::NamedAfterSync`): settle its ticket as complete, or, when
    /// its batch's syncfs or its rename failed (it was removed), record why and settle it as
    /// failed.
    pub(super) fn on_published(&self, rel: &RelPath, ticket: Ticket) -> cacheless::Published {
        let (failures, progress, rel) = (self.failures.clone(), self.progress.clone(), rel.clone());
        Box::new(move |r| match r {
            Ok(()) => ticket.ok(),
            Err(e) => {
                failures.add(&progress, Why::engine(&rel, &e, true));
                drop(ticket);
            }
        })
    }

    /// Counts a completed file and the mode it got.
    pub(super) fn file_done(&self, m: Taken) {
        self.modes.add(m);
        self.progress.file_done();
    }

    /// Hands each chunk of a streamed entry to `write`, counts it and keeps its buffer for the
    /// next chunk. `Err(None)`: the parser stopped inside this entry (truncated or corrupt
    /// archive, or interrupted); it reports why, and dropping the unfinished file removes it.
    fn take_chunks<E>(&self, rx: &Receiver<Msg>, mut write: impl FnMut(&[u8]) -> Result<(), E>) -> Result<(), Option<E>> {
        loop {
            match rx.recv() {
                Ok(Msg::Chunk(buf, len, lease)) => {
                    write(&buf[..len]).map_err(Some)?;
                    self.progress.add_bytes(len as u64);
                    let mut pool = self.bufs.lock().unwrap_or_else(|e| e.into_inner());
                    if pool.len() < 64 {
                        pool.push(buf);
                    }
                    drop(lease);
                }
                Ok(Msg::End) => return Ok(()),
                Err(_) => return Err(None),
            }
        }
    }

    /// Writes and finishes a small file; its ticket settles once the file has its final name
    /// (or failed and was removed).
    fn file_job(&self, rel: &RelPath, mut file: NewFile, meta: &Meta, data: Data, ticket: Ticket) {
        let res = match data {
            Data::Whole(buf, len, _lease) => file.write_at(&buf[..len], 0).map_err(Some),
            Data::Owned(buf, len) => file.write_at(&buf[..len], 0).map_err(Some),
            Data::InSlab(slab, off, len) => file.write_at(&slab.bytes()[off..off + len], 0).map_err(Some),
            Data::Stream(rx) => {
                let mut off = 0u64;
                self.take_chunks(&rx, |s| {
                    file.write_at(s, off)?;
                    off += s.len() as u64;
                    Ok(())
                })
            }
        };
        if res.is_ok() {
            let (mode, owner) = own(file.file(), meta, rel);
            if let Some(why) = owner {
                file.set_permissions(Some(mode));
                self.fail(why);
            }
            if self.extra(file.file().as_fd(), meta, mode, rel) {
                file.set_permissions(None);
            }
        }
        // The ticket goes with the file once it is finished: its callback settles it.
        let res = match res {
            Ok(()) => {
                file.keep_with(ticket.until);
                file.finish_then(self.on_published(rel, ticket)).map_err(Some)
            }
            Err(e) => {
                // Removed before its ticket settles as failed (at the end of this call).
                drop(file);
                Err(e)
            }
        };
        self.done(rel, res);
    }

    /// Writes and finishes a large file under its temporary name; it is named after the
    /// creator's next syncfs, and its ticket settles then (or when it failed and was removed).
    fn stream_job(&self, rel: &RelPath, mut w: cacheless::Writer, rx: Receiver<Msg>, meta: &Meta, ticket: Ticket) {
        let res = self.take_chunks(&rx, |s| w.write_bytes(s)).and_then(|()| {
            let (mode, owner) = own(w.file(), meta, rel);
            if let Some(why) = owner {
                w.set_permissions(Some(mode));
                self.fail(why);
            }
            if self.extra(w.file().as_fd(), meta, mode, rel) {
                w.set_permissions(None);
            }
            // Permissions and mtime are applied by finish (after the fchown above).
            w.finish_pending().map_err(Some)
        });
        let res = res.map(|(rep, pending)| {
            let until = ticket.until;
            self.creator.publish_after_sync_keyed(pending, rep.bytes, until, self.on_published(rel, ticket));
            rep
        });
        self.done(rel, res);
    }

    /// Counts a file's outcome. A failed file was removed (dropped unfinished); `Err(None)`:
    /// the parser stopped inside it and reports why.
    fn done(&self, rel: &RelPath, res: Result<cacheless::WriteReport, Option<cacheless::Error>>) {
        match res {
            Ok(rep) => self.file_done(rep.decision.mode),
            Err(Some(e)) => self.fail(Why::engine(rel, &e, true)),
            Err(None) => {}
        }
    }
}

/// `msg` about the entry `name`, naming it once: as it is where it names it already (most
/// errors carry their path), else after the name.
pub(super) fn once(name: &str, msg: String) -> String {
    if msg.contains(name) {
        msg
    } else {
        format!("{name}: {msg}")
    }
}

/// A failure message that names the entry once (most engine errors already carry its path).
pub(super) fn named(rel: &RelPath, msg: &str, removed: bool) -> String {
    let msg = once(&rel.to_path().display().to_string(), msg.to_string());
    if removed {
        msg + " (removed)"
    } else {
        msg
    }
}

impl Work for Shared {
    type Job = Job;
    fn run(&self, job: Job) {
        match job {
            Job::Batch(files, _lease) => {
                for Small { rel, file, meta, data, ticket } in files {
                    // One file's panic fails that file (dropped while unwinding: removed, and its
                    // ticket unsettled after it), not the rest.
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.file_job(&rel, file, &meta, data, ticket)));
                    if let Err(p) = r {
                        self.panicked(rel.to_path().display().to_string(), crate::error::panic_message(&*p));
                    }
                }
            }
            // The file is settled once it has its final name, or when it failed and was
            // removed (a panicking job drops its ticket unsettled, after its file).
            Job::File { rel, file, meta, data, ticket } => self.file_job(&rel, *file, &meta, data, ticket),
            Job::Stream { rel, writer, rx, meta, ticket } => self.stream_job(&rel, *writer, rx, &meta, ticket),
        }
    }
    fn name(job: &Job) -> String {
        match job {
            Job::Batch(files, _) => match files.first() {
                Some(f) => format!("{} (and {} more files)", f.rel.to_path().display(), files.len() - 1),
                None => "an empty batch".into(),
            },
            Job::File { rel, .. } | Job::Stream { rel, .. } => rel.to_path().display().to_string(),
        }
    }
    fn panicked(&self, name: String, message: String) {
        self.fail(format!("{name}: internal error while writing it ({message}) (removed)"));
    }
}
