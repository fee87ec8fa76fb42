//! Files created ahead of their data, many per system call: the unnamed files of a
//! [`FileCreator`] that names files after their syncfs
//! ([`Durability::NamedAfterSync`](crate::Durability::NamedAfterSync)) are
//! created by O_TMPFILE openat requests on an io_uring, a batch of them per `io_uring_enter`,
//! run in order by one kernel worker while the caller goes on (parsing the next members of an
//! archive). Creating a file is most of the kernel's work per small file (inode allocation);
//! on the caller's thread it is the whole pipeline's critical path, and on several threads at
//! once it contends in the kernel (the directory and the inode allocator), so one worker in
//! the background is the best of both.
//!
//! A file an extraction's checksum gate would park once finished (it holds as many files open
//! as it may: see [`FileCreator::with_gate`](crate::FileCreator::with_gate)) is created the same
//! way under its temporary name instead (an openat with O_CREAT | O_EXCL), and renamed when
//! named.
//!
//! Where io_uring is unavailable or switched off (`CACHELESS_DISABLE=uring`), where files are
//! created under their final name, or where the filesystem has no O_TMPFILE, each file is
//! created at once on the caller's thread by [`FileCreator::create`]: the same files, the same
//! errors; [`CreateQueue::how`] says which path was taken and why.
//!
//! Ownership: a request's directory (and its temporary name) stays in its slot until the
//! request's completion is reaped (the kernel resolves the descriptor's number when the worker
//! runs the request, so closing it earlier could create the file in whatever directory reuses
//! the number). A queue dropped while it can no longer wait for its requests leaks those
//! requests (directories and names) rather than free them.
// The ring's submissions and the descriptors its completions return.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use io_uring::{opcode, squeue, types, IoUring};

use crate::create::{FileAttrs, FileCreator, NewFile};
use crate::error::{Error, Result};
use crate::fault::Site;
use crate::pending::PendingFile;
use crate::sys;

/// Requests handed to the kernel together (one `io_uring_enter` each so many files).
const SUBMIT_EVERY: usize = 8;
/// Requests in flight at most (the ring's size).
const DEPTH: u32 = 256;
/// The path of an O_TMPFILE openat: the directory itself.
const DOT: &CStr = c".";

/// A file asked of [`CreateQueue::push`], to be taken with [`CreateQueue::take`]. Dropped
/// without being taken, its file is removed (closed without a name) once its request is done.
#[derive(Debug)]
pub struct CreateTicket {
    slot: usize,
    abandoned: Arc<Mutex<Vec<usize>>>,
    taken: bool,
}

impl Drop for CreateTicket {
    fn drop(&mut self) {
        if !self.taken {
            self.abandoned.lock().unwrap_or_else(|e| e.into_inner()).push(self.slot);
        }
    }
}

/// What a file was asked with, kept until its request completes.
#[derive(Debug)]
struct Req {
    dir: Arc<OwnedFd>,
    name: OsString,
    path: PathBuf,
    size_hint: u64,
    attrs: FileAttrs,
    /// Created with its final permission bits (see [`FileCreator::unnamed_perm`]).
    exact: bool,
    /// The temporary name it is created under; `None`: without a name (O_TMPFILE).
    temp: Option<CString>,
    /// Its ticket was dropped: the file goes once the request is done.
    abandoned: bool,
    /// Its place among the requests made.
    seq: u64,
}

#[derive(Debug)]
enum Slot {
    Free,
    /// Created on the caller's thread.
    Done(Box<NewFile>),
    /// Its openat is queued or running; its directory is held until the completion is reaped.
    InFlight(Req),
    /// Its openat is done: the descriptor, or the errno.
    Completed(Req, i32),
}

/// The descriptor an openat request's completion returned (`res` >= 0).
fn opened(res: i32) -> OwnedFd {
    // SAFETY: the kernel opened it for this request, and each completion is turned into an
    // owner once (its slot leaves `Completed`, or its request is abandoned, at the same time).
    unsafe { OwnedFd::from_raw_fd(res) }
}

/// Creates the files of a [`FileCreator`] ahead of their data; see the module's docs. For one
/// thread (the one that parses an archive): files are asked in order with [`CreateQueue::push`]
/// and taken, complete, with [`CreateQueue::take`].
pub struct CreateQueue {
    creator: FileCreator,
    ring: Option<IoUring>,
    /// Why files are created on the caller's thread, where they are.
    why_not: Option<String>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    abandoned: Arc<Mutex<Vec<usize>>>,
    /// Requests in the submission ring not yet handed to the kernel, and in flight.
    unsubmitted: usize,
    in_flight: usize,
    /// Requests made and `io_uring_enter` calls that handed them over, for the report.
    requests: u64,
    enters: u64,
    /// Completions reaped so far.
    reaped: u64,
    /// The completions of one reap (kept for the next).
    done: Vec<(usize, i32)>,
    /// The folder whose leftovers were last looked at (see `temps::clean_once`): files come
    /// folder by folder, and looking costs an fstat each time.
    cleaned: Option<Arc<OwnedFd>>,
}

impl std::fmt::Debug for CreateQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreateQueue").field("ring", &self.ring.is_some()).field("in_flight", &self.in_flight).finish()
    }
}

impl CreateQueue {
    /// A queue for the files of `creator`: on an io_uring where the creator names its files after
    /// their syncfs and io_uring is available, else on the caller's thread.
    pub fn new(creator: &FileCreator) -> CreateQueue {
        Self::with(creator, None)
    }

    /// A queue that creates every file on the caller's thread, for `why` (for the report): as
    /// where io_uring is missing, each creation's error is the caller's to handle at once.
    pub fn on_caller_thread(creator: &FileCreator, why: String) -> CreateQueue {
        Self::with(creator, Some(why))
    }

    fn with(creator: &FileCreator, not: Option<String>) -> CreateQueue {
        let ring = if let Some(why) = not {
            Err(why)
        } else if !creator.publishes() {
            Err("files are created under their final name".to_string())
        } else if crate::env::disabled("tmpfile") {
            Err("O_TMPFILE unavailable".to_string())
        } else {
            match &crate::caps::system().uring {
                Err(u) => Err(format!("io_uring unavailable: {}", u.reason)),
                Ok(()) => IoUring::new(DEPTH).map_err(|e| format!("io_uring_setup: {e}")),
            }
        };
        let (ring, why_not) = match ring {
            Ok(r) => {
                // One worker runs the requests, in order: creations on several threads contend.
                // A kernel without the limit runs them on as many as it likes (still correct).
                let _ = r.submitter().register_iowq_max_workers(&mut [1, 1]);
                (Some(r), None)
            }
            Err(why) => (None, Some(why)),
        };
        CreateQueue {
            creator: creator.clone(),
            ring,
            why_not,
            slots: Vec::new(),
            free: Vec::new(),
            abandoned: Arc::default(),
            unsubmitted: 0,
            in_flight: 0,
            requests: 0,
            enters: 0,
            reaped: 0,
            done: Vec::new(),
            cleaned: None,
        }
    }

    /// How files are created, in words for a report.
    pub fn how(&self) -> String {
        match (&self.why_not, self.requests) {
            (None, 0) => "O_TMPFILE openat requests on io_uring (none made)".to_string(),
            (None, n) => {
                format!("O_TMPFILE openat requests on io_uring, {:.1} per submission, run in order by one kernel worker", n as f64 / self.enters.max(1) as f64)
            }
            (Some(why), _) => format!("on the parsing thread ({why})"),
        }
    }

    /// Asks for the file `name` in `dir` (see [`FileCreator::create`]: same arguments, same
    /// file). Errors found now (a bad name, or any error where files are created at once) are
    /// returned now; an error of the request itself comes from [`CreateQueue::take`].
    pub fn push(&mut self, dir: Arc<OwnedFd>, name: &OsStr, display_path: &Path, size_hint: u64, attrs: FileAttrs) -> Result<CreateTicket> {
        self.reclaim();
        if self.ring.is_none() || !sys::tmpfile_available(dir.as_fd()) {
            let file = self.creator.create(dir, name, display_path, size_hint, attrs)?;
            return Ok(self.ticket(Slot::Done(Box::new(file))));
        }
        sys::check_name("create", display_path, name)?;
        // The same fault site as a creation on the caller's thread, counted in the same order.
        sys::call(Site::Open, || Ok(())).map_err(|e| Error::io("create", display_path, e))?;
        if self.in_flight + self.unsubmitted >= DEPTH as usize {
            self.wait(1).map_err(|e| Error::io("create", display_path, e))?;
        }
        // A file the gate would park once finished (see `FileCreator::with_gate`) is created
        // under its temporary name now: a rename names it later, where parking would cost a
        // link and a rename.
        let temp = if self.creator.holds_all_it_may() {
            if !self.cleaned.as_ref().is_some_and(|c| Arc::ptr_eq(c, &dir)) {
                sys::temps::clean_once(dir.as_fd());
                self.cleaned = Some(dir.clone());
            }
            let t = sys::temps::temp_name(name);
            // Temporary names hold no NUL (the final name was checked).
            Some(CString::new(t.as_bytes()).map_err(|e| Error::io("create", display_path, io::Error::other(e)))?)
        } else {
            None
        };
        let (perm, exact, flags) = match &temp {
            Some(_) => (attrs.create_perm(), false, crate::pending::EXCLUSIVE),
            None => {
                let (perm, exact) = self.creator.unnamed_perm(&dir, &attrs);
                (perm, exact, sys::UNNAMED)
            }
        };
        let req = Req { dir, name: name.to_os_string(), path: display_path.to_path_buf(), size_hint, attrs, exact, temp, abandoned: false, seq: self.requests };
        let at = req.temp.as_deref().unwrap_or(DOT);
        let sqe = opcode::OpenAt::new(types::Fd(req.dir.as_raw_fd()), at.as_ptr())
            // The flags of every file created without a name, or under a name (the bits fit an int).
            .flags(i32::from_ne_bytes(flags.bits().to_ne_bytes()))
            .mode(perm)
            .build()
            // Creating a file always blocks: straight to the worker.
            .flags(squeue::Flags::ASYNC);
        let ticket = self.ticket(Slot::InFlight(req));
        let sqe = sqe.user_data(ticket.slot as u64);
        let Some(ring) = self.ring.as_mut() else { return Err(Error::io("create", display_path, io::Error::other("no ring"))) };
        // SAFETY: the request names the directory's descriptor and its path (static, or the
        // temporary name's heap buffer, which moving the request does not move), both kept in
        // its slot until its completion is reaped.
        if unsafe { ring.submission().push(&sqe) }.is_err() {
            // The submission ring is full of requests not yet handed over: hand them over.
            self.submit().map_err(|e| Error::io("create", display_path, e))?;
            let Some(ring) = self.ring.as_mut() else { return Err(Error::io("create", display_path, io::Error::other("no ring"))) };
            // SAFETY: as above.
            unsafe { ring.submission().push(&sqe) }.map_err(|_| Error::io("create", display_path, io::Error::other("io_uring submission ring full")))?;
        }
        self.unsubmitted += 1;
        self.requests += 1;
        if self.unsubmitted >= SUBMIT_EVERY {
            // A failed submission leaves the requests queued for the next one.
            let _ = self.submit();
        }
        Ok(ticket)
    }

    /// The file asked with `ticket`, created, open, not yet written; waits for its request.
    pub fn take(&mut self, mut ticket: CreateTicket) -> Result<NewFile> {
        ticket.taken = true;
        let slot = ticket.slot;
        while let Slot::InFlight(req) = &self.slots[slot] {
            // The worker runs requests in order: those before this one complete first, and one
            // wait covers them all (a wake-up each would cost a switch each).
            let ahead = (req.seq + 1).saturating_sub(self.reaped);
            let path = req.path.clone();
            self.wait(ahead).map_err(|e| Error::io("create", &path, e))?;
        }
        let done = std::mem::replace(&mut self.slots[slot], Slot::Free);
        self.free.push(slot);
        match done {
            Slot::Done(f) => Ok(*f),
            Slot::Completed(req, res) if res >= 0 => {
                let fd = opened(res);
                let tmp = req.temp.map(|t| OsString::from_vec(t.into_bytes()));
                let entry = PendingFile::adopt(fd, req.dir, &req.name, &req.path, tmp);
                Ok(self.creator.adopt(entry, req.size_hint, FileCreator::mode_given(req.attrs, req.exact)))
            }
            Slot::Completed(req, res) => {
                let e = io::Error::from_raw_os_error(-res);
                if res == -libc::EINTR || (res == -libc::EEXIST && req.temp.is_some()) {
                    // Interrupted before it was made, or its temporary name taken (another
                    // process's): made again, here, under another one where it needs one.
                    return self.creator.create(req.dir, &req.name, &req.path, req.size_hint, req.attrs);
                }
                // (Only an O_TMPFILE open says whether the filesystem has O_TMPFILE.)
                if req.temp.is_none() && sys::tmpfile_refused(&e, req.dir.as_fd()) {
                    // No O_TMPFILE here: this file and the next are created at once, under a
                    // temporary name.
                    self.why_not = Some(format!("O_TMPFILE refused: {}", crate::caps::errno_name(&e)));
                    return self.creator.create(req.dir, &req.name, &req.path, req.size_hint, req.attrs);
                }
                Err(Error::io("create", &req.path, e))
            }
            Slot::Free | Slot::InFlight(_) => Err(Error::io("create", Path::new(""), io::Error::other("create queue slot lost"))),
        }
    }

    fn ticket(&mut self, s: Slot) -> CreateTicket {
        let slot = match self.free.pop() {
            Some(i) => {
                self.slots[i] = s;
                i
            }
            None => {
                self.slots.push(s);
                self.slots.len() - 1
            }
        };
        CreateTicket { slot, abandoned: self.abandoned.clone(), taken: false }
    }

    /// Frees the slots of dropped tickets (files done are removed; requests still running go
    /// once they complete).
    fn reclaim(&mut self) {
        let gone: Vec<usize> = std::mem::take(&mut *self.abandoned.lock().unwrap_or_else(|e| e.into_inner()));
        for i in gone {
            match std::mem::replace(&mut self.slots[i], Slot::Free) {
                Slot::InFlight(mut req) => {
                    req.abandoned = true;
                    self.slots[i] = Slot::InFlight(req);
                    continue;
                }
                Slot::Completed(req, res) => discard(&req, res),
                _ => {}
            }
            self.free.push(i);
        }
    }

    /// Hands the queued requests to the kernel.
    fn submit(&mut self) -> io::Result<()> {
        let Some(ring) = self.ring.as_mut() else { return Ok(()) };
        if self.unsubmitted == 0 {
            return Ok(());
        }
        loop {
            match ring.submit() {
                Ok(n) => {
                    self.enters += 1;
                    self.unsubmitted -= n.min(self.unsubmitted);
                    self.in_flight += n;
                    return Ok(());
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Hands over what is queued and waits for `want` completions (at least one, at most those
    /// in flight), then reaps them all.
    fn wait(&mut self, want: u64) -> io::Result<()> {
        self.submit()?;
        if self.in_flight == 0 {
            return Err(io::Error::other("io_uring: nothing in flight to wait for"));
        }
        let want = usize::try_from(want).unwrap_or(usize::MAX).clamp(1, self.in_flight);
        let Some(ring) = self.ring.as_mut() else { return Ok(()) };
        if ring.completion().len() < want {
            loop {
                match ring.submit_and_wait(want) {
                    Ok(_) => break,
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        self.reap();
        Ok(())
    }

    fn reap(&mut self) {
        let Some(ring) = self.ring.as_mut() else { return };
        // Reused: an allocation per wait of this size would have malloc consolidate its free
        // lists each time.
        let mut done = std::mem::take(&mut self.done);
        done.clear();
        done.extend(ring.completion().map(|c| (usize::try_from(c.user_data()).unwrap_or(usize::MAX), c.result())));
        for &(i, res) in &done {
            let Some(slot) = self.slots.get_mut(i) else { continue };
            let Slot::InFlight(req) = std::mem::replace(slot, Slot::Free) else { continue };
            self.in_flight -= 1;
            self.reaped += 1;
            if req.abandoned {
                discard(&req, res);
                self.free.push(i);
            } else {
                *slot = Slot::Completed(req, res);
            }
        }
        self.done = done;
    }
}

impl Drop for CreateQueue {
    fn drop(&mut self) {
        // Every request's completion is reaped before its directory is closed.
        while self.in_flight + self.unsubmitted > 0 {
            if self.wait(u64::MAX).is_err() {
                break;
            }
        }
        for s in self.slots.drain(..) {
            match s {
                // Never completed: its directory stays open for good, and its temporary name
                // stays allocated (see the module's docs).
                #[allow(clippy::mem_forget)] // The leak is the point: the kernel may still use the number and the name.
                Slot::InFlight(req) => std::mem::forget(req),
                Slot::Completed(req, res) => discard(&req, res),
                _ => {}
            }
        }
    }
}

/// The file a request made that nobody takes: closed, and its temporary name removed where it
/// has one (one without a name goes with its descriptor).
fn discard(req: &Req, res: i32) {
    if res < 0 {
        return;
    }
    drop(opened(res));
    if let Some(t) = &req.temp {
        let _ = sys::unlinkat(&*req.dir, t.as_c_str(), rustix::fs::AtFlags::empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::create::{CreateOptions, Durability};
    use rustix::fs::{Mode as FMode, OFlags};
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn open_dir(p: &Path) -> Arc<OwnedFd> {
        Arc::new(sys::open(p, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, FMode::empty()).unwrap())
    }

    /// This process's descriptors of files in `dir` (an unnamed file shows as `dir/#INODE (deleted)`).
    fn open_in(dir: &Path) -> Vec<PathBuf> {
        let dir = dir.to_string_lossy().into_owned() + "/";
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|t| t.to_string_lossy().starts_with(&dir))
            .collect()
    }

    fn content(i: u32) -> Vec<u8> {
        i.to_le_bytes().iter().copied().cycle().take(i as usize * 10).collect()
    }

    fn publishing() -> FileCreator {
        FileCreator::new(CreateOptions { durability: Durability::NamedAfterSync { write_back: Some(1 << 20) }, ..CreateOptions::new() })
    }

    /// Files asked of the queue are the creator's files: written, finished and named after the
    /// syncfs, byte-exact, with their permissions and mtime; a ticket dropped untaken leaves no
    /// file and no descriptor behind, taken or not, done or still running. The report says
    /// which path was taken.
    #[test]
    fn queued_files_are_the_creators_files_and_dropped_tickets_leave_nothing() {
        let d = tempfile::tempdir().unwrap();
        let dir = open_dir(d.path());
        let creator = publishing();
        let mut q = CreateQueue::new(&creator);
        let uring = crate::caps::system().uring.is_ok();
        assert_eq!(q.how().starts_with("O_TMPFILE openat requests on io_uring"), uring, "{}", q.how());
        let named = Arc::new(AtomicUsize::new(0));
        let mut tickets = Vec::new();
        for i in 0..100u32 {
            let name = format!("f{i}");
            let attrs = FileAttrs {
                permissions: Some(0o640 + (i % 2)),
                mtime: Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000 + u64::from(i))),
                atime: None,
                create: None,
            };
            tickets.push((i, q.push(dir.clone(), OsStr::new(&name), Path::new(&name), u64::from(i) * 10, attrs).unwrap()));
        }
        // Every third is abandoned; the rest are written in order.
        for (i, t) in tickets {
            if i % 3 == 0 {
                drop(t);
                continue;
            }
            let mut f = q.take(t).unwrap();
            f.write_at(&content(i), 0).unwrap();
            let n = named.clone();
            f.finish_then(Box::new(move |r| {
                r.unwrap();
                n.fetch_add(1, Ordering::Relaxed);
            }))
            .unwrap();
        }
        // Abandoned tickets are reclaimed by the next request.
        let t = q.push(dir.clone(), OsStr::new("last"), Path::new("last"), 1, FileAttrs::default()).unwrap();
        drop(t);
        drop(q);
        creator.publish_now();
        assert_eq!(named.load(Ordering::Relaxed), 66);
        let mut names: Vec<String> = std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        let mut want: Vec<String> = (0..100u32).filter(|i| i % 3 != 0).map(|i| format!("f{i}")).collect();
        want.sort();
        assert_eq!(names, want, "only the files taken and finished have names; no temporaries");
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        for i in (0..100u32).filter(|i| i % 3 != 0) {
            let p = d.path().join(format!("f{i}"));
            assert_eq!(std::fs::read(&p).unwrap(), content(i));
            let m = std::fs::metadata(&p).unwrap();
            assert_eq!(m.permissions().mode() & 0o7777, 0o640 + (i % 2));
            assert_eq!(m.mtime(), 1_000_000 + i64::from(i));
        }
        drop(creator);
        assert_eq!(open_in(d.path()), Vec::<PathBuf>::new(), "every descriptor the requests opened is closed");
    }

    /// A request that fails in the kernel (its directory was removed) fails its take, naming the
    /// file, and the queue goes on with the next.
    /// Past the files a checksum gate holds open, the queue creates files under temporary
    /// names: they stay there (their descriptors closed) until the gate passes them, then take
    /// their names; an abandoned one leaves nothing, and those the gate never passes go.
    #[test]
    fn past_the_files_a_gate_holds_open_files_are_made_under_temporary_names() {
        use std::sync::atomic::AtomicU64;
        for passes in [true, false] {
            let d = tempfile::tempdir().unwrap();
            let dir = open_dir(d.path());
            let gate = Arc::new(AtomicU64::new(0));
            let opts = CreateOptions { durability: Durability::NamedAfterSync { write_back: Some(1 << 20) }, ..CreateOptions::new() };
            let creator = FileCreator::with_gate(opts, gate.clone(), 4);
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
                f.hold_until(u64::from(i) + 1);
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
                let removed = creator.discard_held(|p| Error::io("verify", p, io::Error::other("checksum")));
                assert!(removed.is_empty());
                assert_eq!(names(), Vec::<String>::new(), "nothing the gate did not pass is left");
            }
            drop(creator);
            assert_eq!(open_in(d.path()), Vec::<PathBuf>::new());
        }
    }

    #[test]
    fn a_failed_request_fails_its_take_naming_the_file() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("gone")).unwrap();
        let gone = open_dir(&d.path().join("gone"));
        std::fs::remove_dir(d.path().join("gone")).unwrap();
        // What the kernel answers there, asked directly.
        let want = sys::openat(&*gone, ".", OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC, FMode::from_raw_mode(0o666)).unwrap_err();
        let here = open_dir(d.path());
        let creator = publishing();
        let mut q = CreateQueue::new(&creator);
        let bad = q.push(gone, OsStr::new("x"), Path::new("gone/x"), 1, FileAttrs::default());
        let good = q.push(here, OsStr::new("y"), Path::new("y"), 1, FileAttrs::default()).unwrap();
        // Created on the caller's thread (no io_uring), the error comes from the push itself.
        let err = match bad {
            Ok(t) => q.take(t).unwrap_err(),
            Err(e) => e,
        };
        assert_eq!(err.errno(), Some(want.raw_os_error()), "{err}");
        assert!(err.to_string().contains("gone/x"), "{err}");
        let mut f = q.take(good).unwrap();
        f.write_at(b"y", 0).unwrap();
        f.finish().unwrap();
        creator.publish_now();
        assert_eq!(std::fs::read(d.path().join("y")).unwrap(), b"y");
    }
}
