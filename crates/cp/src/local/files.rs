//! The file copies of a tree copy, on the pool's workers: GNU cp's `copy_reg` for each file.
//! The source is opened (and checked to be the file the walk found), the destination decided:
//! a new file is staged by the engine's [`stage_copy`] under a temporary name (or none) and
//! committed on its own (large files, verified ones) or with a batch of small ones made durable
//! by one `syncfs`; an existing one is replaced the same way by a complete copy that carries its
//! owner, mode, ACLs and extended attributes, or, where replacing it would change what can be
//! seen (other hard links, a FIFO or device, attributes the copy could not carry over, a folder
//! the user may not write), written in place as GNU cp writes it.

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use cacheless::sys::{AtFlags, DirFd, FMode, OFlags};

use super::Sink;
use crate::options::{Note, OnNote, Preserve};
use cacheless::pool::Work;
use cacheless::quote::quote;
use cacheless::sys;
use cacheless::ReadOptions;
use cacheless::WriteOptions;
use cacheless::{copy_in_place, stage_copy_from, Carry, CopyOptions, CopyReport, Method, Source, Staged};
use cacheless::{Durability, FileCreator, Ownership, Xattrs};
use cacheless::{Error, ErrorKind};

/// `S_IFMT` of a mode.
pub(super) fn kind(mode: u32) -> u32 {
    mode & sys::consts::S_IFMT
}

/// Access and modification times of `m`, as the writer takes them.
pub(super) fn times(m: &std::fs::Metadata) -> (SystemTime, SystemTime) {
    (sys::system_time(m.atime(), m.atime_nsec()), sys::system_time(m.mtime(), m.mtime_nsec()))
}

/// Small files staged and waiting for the `syncfs` that makes them durable before renaming.
#[derive(Default)]
pub(super) struct Batch {
    files: Vec<Staged>,
    bytes: u64,
}

/// Files per batch, and bytes per batch, before a syncfs and the renames (or links).
pub(super) const BATCH_FILES: usize = 512;
const BATCH_BYTES: u64 = 256 << 20;
/// Bytes per batch where its files are written plainly, without a name, and left for the
/// batch's syncfs to write back together (see `Copier::batch_bytes`): what the page cache
/// holds of the copy at most.
pub(super) const PLAIN_BATCH_BYTES: u64 = 32 << 20;

/// One file for a worker.
pub(super) struct FileJob {
    pub src: PathBuf,
    pub dst: PathBuf,
    pub dir: Arc<OwnedFd>,
    pub name: OsString,
    /// The source as the walk found it.
    pub meta: std::fs::Metadata,
    /// `dir` is one the copy made and has no default ACL (see `CopyOptions::plain_dir`).
    pub plain: bool,
    /// The destination is known not to exist, or is to be replaced whatever it is: nothing is
    /// opened there before the copy takes its name.
    pub new: bool,
    /// An existing destination is opened through a symlink (one named on the command line).
    pub follow_dst: bool,
    /// The backup made of the destination, put back if the copy fails.
    pub backup: Option<PathBuf>,
}

/// What the walk and the workers share.
pub(super) struct Copier {
    pub ro: ReadOptions,
    pub wo: WriteOptions,
    pub co: CopyOptions,
    /// `co` for files in a directory the copy made that has no default ACL.
    pub co_plain: CopyOptions,
    pub creator: FileCreator,
    /// The creator of batched small files when they wait for their batch's syncfs without a
    /// name (O_TMPFILE, linked into place after it); `None`: under temporary names, renamed.
    pub unnamed: Option<FileCreator>,
    /// Files per batch (each file without a name holds a descriptor until it is linked).
    pub batch_files: usize,
    pub sink: Arc<Sink>,
    /// Batch small files (durable by one syncfs per batch).
    pub batched: bool,
    pub batch: Mutex<Batch>,
    /// The first reports (see `CpReport::files`), and those past them, counted.
    pub reports: Mutex<Vec<CopyReport>>,
    pub not_listed: AtomicU64,
    pub copied: AtomicU64,
    pub data_bytes: AtomicU64,
    pub reflinked: AtomicU64,
    pub in_place: AtomicU64,
    pub verify_ns: AtomicU64,
    /// Something was put in place without a directory fsync (a batch's renames, a symlink):
    /// the final syncfs must run, even when the copy made no folder.
    pub unsynced: AtomicBool,
    /// GNU's rules for each file's attributes.
    pub rules: Rules,
    /// Told of what is done (`--verbose`).
    pub on_note: Option<OnNote>,
}

/// The options that decide a file's attributes and how it is opened, from the tree's.
pub(super) struct Rules {
    pub preserve: Preserve,
    pub no_preserve_mode: bool,
    pub umask: u32,
    pub root: bool,
    /// The source is opened without following a symlink (`-P`).
    pub nofollow_src: bool,
    pub force: bool,
    pub inplace: bool,
    pub data: bool,
}

impl Copier {
    /// Names a staged copy, where the job's naming gate lets it ([`Progress::may_name`]; else
    /// drops it, which removes it).
    fn name(&self, staged: Staged) -> Result<Option<CopyReport>, Error> {
        if !self.sink.progress.may_name() {
            return Ok(None);
        }
        staged.commit().map(Some)
    }

    fn done(&self, r: CopyReport) {
        self.sink.copied(&r);
        if r.method == Method::Reflink {
            self.reflinked.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(v) = &r.verify {
            self.verify_ns.fetch_add(u64::try_from(Duration::from_secs_f64(v.seconds).as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
        }
        self.copied.fetch_add(1, Ordering::Relaxed);
        self.data_bytes.fetch_add(r.data_bytes, Ordering::Relaxed);
        let mut reports = self.reports.lock().unwrap_or_else(|e| e.into_inner());
        if reports.len() < crate::options::FILES_LISTED {
            reports.push(r);
        } else {
            self.not_listed.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn copy(&self, job: FileJob) {
        if self.sink.progress.is_cancelled() {
            return;
        }
        if let Err(e) = self.copy_reg(&job) {
            self.sink.fail(e);
            if let Some(b) = &job.backup {
                self.unbackup(&job, b);
            }
        }
    }

    /// Puts the backup of a destination back after the copy over it failed.
    fn unbackup(&self, job: &FileJob, backup: &Path) {
        let Some(bname) = backup.file_name() else { return };
        match DirFd::of(&*job.dir).rename(bname, DirFd::of(&*job.dir), job.name.as_os_str()) {
            Ok(()) => self.note(&Note::Unbackup { backup, dst: &job.dst }),
            Err(e) => self.sink.fail(Error::io("cannot un-backup {}", &job.dst, e.into())),
        }
    }

    fn note(&self, n: &Note<'_>) {
        if let Some(f) = &self.on_note {
            f(n);
        }
    }

    /// GNU's `copy_reg`: one file's copy, from opening its source to its attributes.
    fn copy_reg(&self, job: &FileJob) -> Result<(), Error> {
        let r = &self.rules;
        let flags = OFlags::RDONLY | OFlags::CLOEXEC | if r.nofollow_src { OFlags::NOFOLLOW } else { OFlags::empty() };
        // A FIFO (as the walk saw it) is opened so that its open can end on a signal; any other
        // file with one open, no look before it.
        let open = if job.meta.file_type().is_fifo() {
            sys::open_interruptible(sys::CWD, &job.src, flags, FMode::empty())
        } else {
            sys::open(&job.src, flags, FMode::empty())
        };
        let fd = open.map_err(std::io::Error::from).map_err(|e| Error::io("cannot open {} for reading", &job.src, e))?;
        let src = File::from(fd);
        let smeta = src.metadata().map_err(|e| Error::io("cannot fstat {}", &job.src, e))?;
        if smeta.dev() != job.meta.dev() || smeta.ino() != job.meta.ino() {
            return Err(Error::message(ErrorKind::Io, &job.src, format!("skipping file {}, as it was replaced while being copied", quote(&job.src))));
        }
        let mut existing = None;
        if !job.new {
            let oflags = OFlags::WRONLY | OFlags::CLOEXEC | if job.follow_dst { OFlags::empty() } else { OFlags::NOFOLLOW };
            match sys::open_interruptible(&*job.dir, job.name.as_os_str(), oflags, FMode::empty()).map_err(std::io::Error::from) {
                Ok(fd) => existing = Some(File::from(fd)),
                // A symlink followed to nothing: refused, as GNU refuses it.
                Err(e)
                    if e.raw_os_error() == Some(sys::consts::ENOENT)
                        && job.follow_dst
                        && DirFd::of(&*job.dir).stat(job.name.as_os_str()).is_ok_and(|l| kind(l.st_mode) == sys::consts::S_IFLNK) =>
                {
                    return Err(Error::message(ErrorKind::NotFound, &job.dst, format!("not writing through dangling symlink {}", quote(&job.dst))));
                }
                // Gone since the walk looked: a new file.
                Err(e) if e.raw_os_error() == Some(sys::consts::ENOENT) => {}
                // `-f`: what cannot be opened is removed, and the copy made anew.
                Err(_) if r.force => match DirFd::of(&*job.dir).unlink(job.name.as_os_str()) {
                    Ok(()) => self.note(&Note::Removed(&job.dst)),
                    Err(sys::Errno::NOENT) => {}
                    Err(u) => return Err(Error::io("cannot remove {}", &job.dst, u.into())),
                },
                Err(e) => return Err(Error::io("cannot create regular file {}", &job.dst, e)),
            }
        }
        let mut wo = self.wo.clone();
        let mut co = if job.plain { self.co_plain.clone() } else { self.co.clone() };
        if r.preserve.timestamps {
            let (at, mt) = times(&job.meta);
            wo.atime = Some(at);
            wo.mtime = Some(mt);
        }
        let smode = smeta.mode();
        let len = smeta.len();
        let regular = kind(smode) == sys::consts::S_IFREG;
        let source = if !r.data {
            Source::Nothing(src)
        } else if regular {
            Source::File(src, Some(smeta))
        } else {
            Source::Stream(src)
        };
        if let Some(old) = existing {
            let ost = sys::fstat(&old).map_err(|e| Error::io("cannot fstat {}", &job.dst, e.into()))?;
            // Named through a symlink (one the user named): written where the link points, in
            // place, as GNU writes it.
            let through_link = job.follow_dst && DirFd::of(&*job.dir).stat(job.name.as_os_str()).is_ok_and(|l| kind(l.st_mode) == sys::consts::S_IFLNK);
            let carry = (!r.inplace && r.data && !through_link && kind(ost.st_mode) == sys::consts::S_IFREG && ost.st_nlink == 1)
                .then(|| Carry::of(&old, &ost, r.root))
                .flatten()
                .filter(|_| sys::accessat(&*job.dir, ".", sys::Access::WRITE_OK | sys::Access::EXEC_OK, AtFlags::EACCESS).is_ok());
            // GNU's rules for an existing destination: only what --preserve asks changes.
            wo.permissions = r.preserve.mode.then_some(smode & 0o7777);
            co.owner = Ownership::of(r.preserve.ownership, r.root);
            co.xattrs = Xattrs::of(r.preserve.xattr, r.preserve.mode);
            match carry {
                Some(c) => {
                    // A complete copy replaces the file, with what GNU's write in place keeps:
                    // its mode, owner, attributes and access time. Made owner-only where the
                    // owner changes after it is made.
                    wo.permissions = wo.permissions.or(Some(c.mode));
                    wo.atime = wo.atime.or(Some(c.atime));
                    wo.create_mode = Some(c.mode & 0o700);
                    co.carry = Some(Arc::new(c));
                    let staged = stage_copy_from(source, &job.src, &job.dir, &job.name, &job.dst, &self.ro, &wo, &co, None, &self.sink.progress)?;
                    if let Some(rep) = self.name(staged)? {
                        self.done(rep);
                    }
                }
                None => {
                    let rep = copy_in_place(source, &job.src, old, &job.dir, &job.name, &job.dst, &self.ro, &wo, &co, &self.sink.progress)?;
                    self.in_place.fetch_add(1, Ordering::Relaxed);
                    self.done(rep);
                }
            }
            return Ok(());
        }
        // A new file: GNU's creation mode, and the attributes it ends with.
        let omitted = if r.preserve.ownership { 0o077 } else { 0 };
        let mut create = (smode & 0o777) & !omitted;
        if r.preserve.xattr && !r.root {
            // Extended attributes are set through a descriptor that must be writable.
            create |= 0o200;
        }
        wo.create_mode = Some(create);
        wo.permissions = if r.preserve.mode {
            Some(smode & 0o7777)
        } else if r.no_preserve_mode {
            Some(0o666 & !r.umask)
        } else if omitted != 0 || create & !(smode & 0o777) != 0 {
            Some((smode & 0o777) & !r.umask)
        } else {
            None
        };
        co.owner = Ownership::of(r.preserve.ownership, r.root);
        co.xattrs = Xattrs::of(r.preserve.xattr, r.preserve.mode || r.no_preserve_mode);
        let batch = self.batched && len <= self.co.small_file && regular && r.data;
        if batch {
            wo.durability = Durability::AtTheEnd { write_back: None };
        }
        let creator = match &self.unnamed {
            Some(c) if batch => c,
            _ => &self.creator,
        };
        let staged = stage_copy_from(source, &job.src, &job.dir, &job.name, &job.dst, &self.ro, &wo, &co, Some(creator), &self.sink.progress)?;
        if !batch {
            if let Some(rep) = self.name(staged)? {
                self.done(rep);
            }
            return Ok(());
        }
        let full = {
            let mut b = self.batch.lock().unwrap_or_else(|e| e.into_inner());
            b.bytes += len;
            b.files.push(staged);
            if b.files.len() >= self.batch_files || b.bytes >= self.batch_bytes() {
                Some(std::mem::take(&mut *b))
            } else {
                None
            }
        };
        if let Some(b) = full {
            self.flush(b);
        }
        Ok(())
    }

    /// Bytes per batch: [`PLAIN_BATCH_BYTES`] where `unnamed` writes small files plainly, their
    /// dirty pages waiting for the batch's syncfs (one writeback of many files in few large
    /// requests, not one uncached write-through a file); [`BATCH_BYTES`] where each file is
    /// written uncached on its own.
    fn batch_bytes(&self) -> u64 {
        match &self.unnamed {
            Some(c) if c.writes_back_together(0) => PLAIN_BATCH_BYTES,
            _ => BATCH_BYTES,
        }
    }

    /// Takes the batch still open (after the last file was queued).
    pub fn rest(&self) -> Batch {
        std::mem::take(&mut *self.batch.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Makes a batch durable with one syncfs, then renames its files into place. Its files are
    /// complete (each was written whole before it joined the batch), so an interrupted copy
    /// still keeps them, as it keeps every other file it finished.
    pub fn flush(&self, b: Batch) {
        if b.files.is_empty() {
            return;
        }
        if let Err(e) = sys::syncfs(b.files[0].dir().as_fd()) {
            // Not durable: none of them takes its final name (dropping them removes them).
            for s in &b.files {
                self.sink.fail(Error::io("syncfs", s.path(), std::io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(sys::consts::EIO))));
            }
            return;
        }
        // Written back now: what the small files' writes left in the cache can go.
        self.creator.drop_deferred();
        // Their renames are not synced here: the final syncfs makes them durable.
        self.unsynced.store(true, Ordering::Relaxed);
        // Copies to verify are read back from the disk together: all their reads are started
        // before the first is waited for (each commit verifies its file before naming it).
        let mut files = Vec::with_capacity(b.files.len());
        for s in b.files {
            match s.prefetch() {
                Ok(()) => files.push(s),
                Err(e) => self.sink.fail(e),
            }
        }
        for s in files {
            match self.name(s) {
                Ok(Some(r)) => self.done(r),
                Ok(None) => {}
                Err(e) => self.sink.fail(e),
            }
        }
    }
}

/// Files handed to a worker at once (see [`Jobs`]).
pub(super) const JOB_FILES: usize = 16;

/// Files of one directory for one worker, copied one after the other: a worker woken per file
/// costs a wake and a wait (two futex calls) per small file when the walk is the slower side.
pub(super) type Jobs = Vec<FileJob>;

impl Work for Copier {
    type Job = Jobs;
    fn run(&self, jobs: Jobs) {
        let n = jobs.len();
        for job in jobs {
            if n == 1 {
                // The pool reports a panic of a job of one file.
                self.copy(job);
                continue;
            }
            // Each file's panic is its own failure; the others still go.
            let name = job.dst.display().to_string();
            if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.copy(job))) {
                self.panicked(name, cacheless::pool::panic_message(&*p));
            }
        }
    }
    fn name(jobs: &Jobs) -> String {
        jobs.first().map(|j| j.dst.display().to_string()).unwrap_or_default()
    }
    fn panicked(&self, name: String, message: String) {
        self.sink.fail(Error::new(ErrorKind::Io, "copy", name, format!("internal error while copying it ({message}); removed")));
    }
}
