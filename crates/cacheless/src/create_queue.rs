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
//! A file its creator's [`Keeper`](crate::Keeper) would park once finished (an extraction's
//! checksum gate that holds as many files open as it may) is created the same way under its
//! temporary name instead (an openat with O_CREAT | O_EXCL), and renamed when
//! named.
//!
//! Where io_uring is unavailable or switched off (`CACHELESS_DISABLE=uring`), where files are
//! created under their final name, or where the filesystem has no O_TMPFILE, each file is
//! created at once on the caller's thread by [`FileCreator::create`]: the same files, the same
//! errors; [`CreateQueue::how`] says which path was taken and why.
//!
//! The requests are [`Op::open_at`] ops on a queue of `backend/` (an io_uring that one kernel
//! worker serves, in order): the backend owns each request's folder and name until its
//! completion is reaped, and the descriptor it opened from then on, on every path, as it owns
//! the buffers of reads and writes; a queue dropped while it can no longer wait for its
//! requests leaks them rather than free them.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::backend::{self, Completion, Op, Queue};
use crate::create::{FileAttrs, FileCreator, NewFile};
use crate::error::{Error, Result};
use crate::pending::PendingFile;
use crate::sys;

/// Requests handed to the kernel together (one `io_uring_enter` each so many files).
const SUBMIT_EVERY: usize = 8;
/// Requests in flight at most (the ring's size).
const DEPTH: usize = 256;
/// The path of an O_TMPFILE openat: the directory itself.
const DOT: &std::ffi::CStr = c".";

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

/// What a file was asked with, kept until it is taken (the folder and the name the kernel
/// opens are in the request, the backend's until its completion).
#[derive(Debug)]
struct Asked {
    name: OsString,
    path: PathBuf,
    size_hint: u64,
    attrs: FileAttrs,
    /// Created with its final permission bits (see [`FileCreator::unnamed_perm`]).
    exact: bool,
    /// Created under a temporary name (else without a name: O_TMPFILE).
    temp: bool,
    /// Its ticket was dropped: the file goes once the request is done.
    abandoned: bool,
    /// Its place among the requests made.
    seq: u64,
}

/// A request's completion: its folder, the name it opened there, and the descriptor or the
/// error.
#[derive(Debug)]
struct Opened {
    dir: Arc<OwnedFd>,
    at: CString,
    fd: io::Result<OwnedFd>,
}

#[derive(Debug)]
enum Slot {
    Free,
    /// Created on the caller's thread.
    Done(Box<NewFile>),
    /// Its request is queued or running.
    InFlight(Asked),
    /// Its request is done.
    Completed(Asked, Opened),
}

/// Creates the files of a [`FileCreator`] ahead of their data; see the module's docs. For one
/// thread (the one that parses an archive): files are asked in order with [`CreateQueue::push`]
/// and taken, complete, with [`CreateQueue::take`].
pub struct CreateQueue {
    creator: FileCreator,
    queue: Option<Box<dyn Queue>>,
    /// Why files are created on the caller's thread, where they are.
    why_not: Option<String>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    abandoned: Arc<Mutex<Vec<usize>>>,
    /// Requests made, and the submissions that handed them to the kernel, for the report.
    requests: u64,
    submissions: u64,
    /// Completions received so far.
    reaped: u64,
}

impl std::fmt::Debug for CreateQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let in_flight = self.queue.as_ref().map_or(0, |q| q.in_flight());
        f.debug_struct("CreateQueue").field("ring", &self.queue.is_some()).field("in_flight", &in_flight).finish()
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
        let queue = if let Some(why) = not {
            Err(why)
        } else if !creator.publishes() {
            Err("files are created under their final name".to_string())
        } else if crate::env::disabled("tmpfile") {
            Err("O_TMPFILE unavailable".to_string())
        } else {
            backend::open_in_order(DEPTH).map_err(|e| match e.raw_os_error() {
                Some(_) => format!("io_uring_setup: {e}"),
                None => e.to_string(),
            })
        };
        let (queue, why_not) = match queue {
            Ok(q) => (Some(q), None),
            Err(why) => (None, Some(why)),
        };
        CreateQueue {
            creator: creator.clone(),
            queue,
            why_not,
            slots: Vec::new(),
            free: Vec::new(),
            abandoned: Arc::default(),
            requests: 0,
            submissions: 0,
            reaped: 0,
        }
    }

    /// How files are created, in words for a report.
    pub fn how(&self) -> String {
        match (&self.why_not, self.requests) {
            (None, 0) => "O_TMPFILE openat requests on io_uring (none made)".to_string(),
            (None, n) => {
                format!(
                    "O_TMPFILE openat requests on io_uring, {:.1} per submission, run in order by one kernel worker",
                    n as f64 / self.submissions.max(1) as f64
                )
            }
            (Some(why), _) => format!("on the parsing thread ({why})"),
        }
    }

    /// Asks for the file `name` in `dir` (see [`FileCreator::create`]: same arguments, same
    /// file). Errors found now (a bad name, or any error where files are created at once) are
    /// returned now; an error of the request itself comes from [`CreateQueue::take`].
    pub fn push(&mut self, dir: Arc<OwnedFd>, name: &OsStr, display_path: &Path, size_hint: u64, attrs: FileAttrs) -> Result<CreateTicket> {
        self.reclaim();
        if self.queue.is_none() || !sys::tmpfile_available(dir.as_fd()) {
            let file = self.creator.create(dir, name, display_path, size_hint, attrs)?;
            return Ok(self.ticket(Slot::Done(Box::new(file))));
        }
        sys::check_name("create", display_path, name)?;
        if self.queue.as_ref().is_some_and(|q| q.in_flight() >= DEPTH) {
            self.collect(1).map_err(|e| Error::io("create", display_path, e))?;
        }
        // A file the creator's keeper would park once finished (see `Keeper`) is created under
        // its temporary name now: a rename names it later, where parking would cost a link and
        // a rename.
        let temp = if self.creator.prefers_temporary() {
            // Held by its own lock while open, then (parked) by its job's claim on a folder
            // above it.
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
        let asked = Asked {
            name: name.to_os_string(),
            path: display_path.to_path_buf(),
            size_hint,
            attrs,
            exact,
            temp: temp.is_some(),
            abandoned: false,
            seq: self.requests,
        };
        let ticket = self.ticket(Slot::InFlight(asked));
        let op = Op::open_at(dir, temp.unwrap_or_else(|| DOT.to_owned()), flags, perm, ticket.slot as u64);
        let Some(q) = self.queue.as_mut() else { return Err(Error::io("create", display_path, io::Error::other("no ring"))) };
        q.push_deferred(op);
        self.requests += 1;
        if q.deferred() >= SUBMIT_EVERY {
            q.flush();
            self.submissions += 1;
        }
        Ok(ticket)
    }

    /// The file asked with `ticket`, created, open, not yet written; waits for its request.
    pub fn take(&mut self, mut ticket: CreateTicket) -> Result<NewFile> {
        ticket.taken = true;
        let slot = ticket.slot;
        while let Slot::InFlight(a) = &self.slots[slot] {
            // The worker runs requests in order: those before this one complete first, and one
            // wait covers them all (a wake-up each would cost a switch each).
            let ahead = (a.seq + 1).saturating_sub(self.reaped);
            let path = a.path.clone();
            self.collect(ahead).map_err(|e| Error::io("create", &path, e))?;
        }
        let done = std::mem::replace(&mut self.slots[slot], Slot::Free);
        self.free.push(slot);
        match done {
            Slot::Done(f) => Ok(*f),
            Slot::Completed(a, Opened { dir, at, fd: Ok(fd) }) => {
                let tmp = a.temp.then(|| OsString::from_vec(at.into_bytes()));
                let covered = a.temp && self.creator.covers(&dir);
                match PendingFile::adopt(fd, dir.clone(), &a.name, &a.path, tmp, covered) {
                    Some(entry) => Ok(self.creator.adopt(entry, a.size_hint, FileCreator::mode_given(a.attrs, a.exact))),
                    // Its temporary name taken by a cleaner before it was held: made again, here.
                    None => self.creator.create(dir, &a.name, &a.path, a.size_hint, a.attrs),
                }
            }
            Slot::Completed(a, Opened { dir, fd: Err(e), .. }) => {
                if e.raw_os_error() == Some(sys::consts::EINTR) || (e.raw_os_error() == Some(sys::consts::EEXIST) && a.temp) {
                    // Interrupted before it was made, or its temporary name taken (another
                    // process's): made again, here, under another one where it needs one.
                    return self.creator.create(dir, &a.name, &a.path, a.size_hint, a.attrs);
                }
                // (Only an O_TMPFILE open says whether the filesystem has O_TMPFILE.)
                if !a.temp && sys::tmpfile_refused(&e, dir.as_fd()) {
                    // No O_TMPFILE here: this file and the next are created at once, under a
                    // temporary name.
                    self.why_not = Some(format!("O_TMPFILE refused: {}", crate::caps::errno_name(&e)));
                    return self.creator.create(dir, &a.name, &a.path, a.size_hint, a.attrs);
                }
                Err(Error::io("create", &a.path, e))
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
                Slot::InFlight(mut a) => {
                    a.abandoned = true;
                    self.slots[i] = Slot::InFlight(a);
                    continue;
                }
                Slot::Completed(a, o) => discard(o, a.temp),
                _ => {}
            }
            self.free.push(i);
        }
    }

    /// Hands over what is queued, waits until `want` requests are done (at least one, at most
    /// those in flight), and takes every completion there is.
    fn collect(&mut self, want: u64) -> io::Result<()> {
        let Some(q) = self.queue.as_mut() else { return Err(io::Error::other("no ring")) };
        if q.deferred() > 0 {
            self.submissions += 1;
        }
        q.flush();
        q.wait_ready(usize::try_from(want).unwrap_or(usize::MAX).max(1))?;
        let mut next = Some(q.wait()?);
        while let Some(c) = next {
            self.record(c);
            next = self.queue.as_mut().and_then(|q| q.poll());
        }
        Ok(())
    }

    /// Puts a request's completion in its slot (or removes its file, where its ticket was
    /// dropped).
    fn record(&mut self, c: Completion) {
        let i = crate::conv::usize_of(c.op.tag());
        let Some((dir, at, fd)) = c.op.into_opened() else { return };
        self.reaped += 1;
        let Some(Slot::InFlight(a)) = self.slots.get_mut(i).map(|s| std::mem::replace(s, Slot::Free)) else {
            // Not a request of this queue's (never happens): what it made is closed.
            return;
        };
        let fd = match (c.result, fd) {
            (Ok(_), Some(fd)) => Ok(fd),
            (Ok(_), None) => Err(io::Error::other("openat completed without a descriptor")),
            (Err(e), made) => {
                // A submission error charged to a request the kernel ran anyway: what it made
                // goes, and the file fails with the error.
                if let Some(fd) = made {
                    discard(Opened { dir: dir.clone(), at: at.clone(), fd: Ok(fd) }, a.temp);
                }
                Err(e)
            }
        };
        let o = Opened { dir, at, fd };
        if a.abandoned {
            discard(o, a.temp);
            self.free.push(i);
        } else {
            self.slots[i] = Slot::Completed(a, o);
        }
    }
}

impl Drop for CreateQueue {
    fn drop(&mut self) {
        // Files nobody took are removed once their requests are done; the backend's queue
        // leaks the requests it can no longer wait for.
        if let Some(mut q) = self.queue.take() {
            while q.in_flight() > 0 {
                match q.wait() {
                    Ok(c) => {
                        let temp = matches!(self.slots.get(crate::conv::usize_of(c.op.tag())), Some(Slot::InFlight(a)) if a.temp);
                        if let Some((dir, at, Some(fd))) = c.op.into_opened() {
                            discard(Opened { dir, at, fd: Ok(fd) }, temp);
                        }
                    }
                    Err(_) => break,
                }
            }
        }
        for s in self.slots.drain(..) {
            if let Slot::Completed(a, o) = s {
                discard(o, a.temp);
            }
        }
    }
}

/// The file a request made that nobody takes: closed, and its temporary name removed where it
/// has one (one without a name goes with its descriptor).
fn discard(o: Opened, temp: bool) {
    let Ok(fd) = o.fd else { return };
    drop(fd);
    if temp {
        let _ = sys::unlinkat(&*o.dir, o.at.as_c_str(), sys::AtFlags::empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::create::{CreateOptions, Durability};
    use crate::sys::{FMode, OFlags};
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn open_dir(p: &Path) -> Arc<OwnedFd> {
        Arc::new(sys::open(p, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, FMode::empty()).unwrap())
    }

    fn content(i: u32) -> Vec<u8> {
        i.to_le_bytes().iter().copied().cycle().take(i as usize * 10).collect()
    }

    /// A keeper that names every file at once, and wants them created under temporary names.
    struct Temporaries;

    impl crate::Keeper for Temporaries {
        fn keep(&self, _: u64, file: PendingFile, then: crate::Published) {
            then(file.publish(false));
        }
        fn synced(&self) {}
        fn prefers_temporary(&self) -> bool {
            true
        }
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
        assert_eq!(cacheless_testkit::open_in(d.path()), Vec::<PathBuf>::new(), "every descriptor the requests opened is closed");
    }

    /// A failed submission is charged to the requests it left in the ring, which the kernel
    /// runs with the next one: those files fail with the error, naming themselves, and what
    /// the kernel made for them (under temporary names) is removed; the others are whole.
    #[test]
    fn a_failed_submission_fails_its_files_and_leaves_nothing_they_made() {
        if !cacheless_testkit::require("uring", crate::caps::system().uring.as_ref().map(|_| ()).map_err(|u| u.reason.clone())) {
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let dir = open_dir(d.path());
        let opts = CreateOptions { durability: Durability::NamedAfterSync { write_back: Some(1 << 20) }, ..CreateOptions::new() };
        // Every file is made under a temporary name.
        let creator = FileCreator::with_keeper(opts, Arc::new(Temporaries));
        let mut q = CreateQueue::new(&creator);
        backend::fail_submit(1, sys::consts::ENXIO);
        let tickets: Vec<_> = (0..24u32)
            .map(|i| q.push(dir.clone(), OsStr::new(&format!("f{i:02}")), Path::new(&format!("f{i:02}")), 10, FileAttrs::default()).unwrap())
            .collect();
        let (mut good, mut failed) = (Vec::new(), Vec::new());
        for (i, t) in (0u32..).zip(tickets) {
            match q.take(t) {
                Ok(mut f) => {
                    f.write_at(&content(i + 1), 0).unwrap();
                    f.finish().unwrap();
                    good.push(format!("f{i:02}"));
                }
                Err(e) => {
                    assert_eq!(e.errno(), Some(sys::consts::ENXIO), "{e}");
                    assert!(e.to_string().contains(&format!("f{i:02}")), "{e}");
                    failed.push(i);
                }
            }
        }
        assert_eq!(failed, (8..16).collect::<Vec<_>>(), "the second submission's eight requests fail");
        drop(q);
        creator.publish_now();
        let mut names: Vec<String> = std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        assert_eq!(names, good, "no temporary is left of the failed files");
        drop(creator);
        assert_eq!(cacheless_testkit::open_in(d.path()), Vec::<PathBuf>::new());
    }

    /// A request that fails in the kernel (its directory was removed) fails its take, naming the
    /// file, and the queue goes on with the next.
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
