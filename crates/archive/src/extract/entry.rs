//! The work of each entry: namespace operations in archive order on the parser's thread, file
//! data and metadata on the pool's threads, all writes through the engine.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};

use cacheless::{AlignedBuf, FileAttrs, FileCreator, Mode, NewFile, Progress};
use rustix::fs::{AtFlags, Timespec, Timestamps};
use rustix::io::Errno;

use super::options::{ExtractOptions, ExtractReport, IoMode, ModeCounts};
use super::pool::{Pool, Work};
use crate::error::Error;
use crate::fsops::{sanitize, RelPath, Root, Sanitized};
use crate::source;
use crate::tarparse::{Entry, Kind, Parser};

/// Size of the chunks a streamed entry's data is handed to a worker in.
pub(super) const CHUNK: usize = 4 << 20;

/// An entry's metadata, as it is to be applied.
#[derive(Clone, Copy, Debug)]
pub(super) struct Meta {
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub mtime: (i64, u32),
    pub chown: bool,
}

pub(super) fn times(mtime: (i64, u32)) -> Timestamps {
    Timestamps {
        last_access: Timespec { tv_sec: 0, tv_nsec: rustix::fs::UTIME_OMIT },
        last_modification: Timespec { tv_sec: mtime.0, tv_nsec: mtime.1 as _ },
    }
}

fn system_time(t: (i64, u32)) -> std::time::SystemTime {
    use std::time::{Duration, UNIX_EPOCH};
    if t.0 >= 0 {
        UNIX_EPOCH + Duration::new(t.0 as u64, t.1)
    } else {
        UNIX_EPOCH - Duration::new(t.0.unsigned_abs(), 0) + Duration::from_nanos(t.1 as u64)
    }
}

/// The attributes the engine applies when it finishes a file (after the fchown done here,
/// which clears setuid/setgid).
fn attrs(m: &Meta) -> FileAttrs {
    FileAttrs { permissions: Some(m.mode), mtime: Some(system_time(m.mtime)), atime: None }
}

/// fchown to the entry's owner when ownership is restored.
fn chown(fd: impl AsFd, m: &Meta) -> rustix::io::Result<()> {
    if !m.chown {
        return Ok(());
    }
    rustix::fs::fchown(fd, Some(rustix::fs::Uid::from_raw(m.uid as u32)), Some(rustix::fs::Gid::from_raw(m.gid as u32)))
}

/// Owner, mode and mtime of a directory (or any open entry), in that order.
pub(super) fn apply_meta(fd: &OwnedFd, m: &Meta) -> rustix::io::Result<()> {
    chown(fd, m)?;
    // After fchown, which clears setuid/setgid.
    rustix::fs::fchmod(fd, rustix::fs::Mode::from_raw_mode(m.mode))?;
    rustix::fs::futimens(fd, &times(m.mtime))
}

/// A chunk of a streamed entry's data: the buffer, its length, and its share of the budget.
pub(super) enum Msg {
    Chunk(AlignedBuf, usize, Option<cacheless::buf::Lease>),
    End,
}

/// A small file's data: whole, or streamed in chunks.
pub(super) enum Data {
    Whole(AlignedBuf, usize, cacheless::buf::Lease),
    Stream(Receiver<Msg>),
}

/// What a worker does for one entry.
pub(super) enum Job {
    /// A file below `direct_min`, created by the engine's file creator and written whole.
    File { rel: RelPath, file: Box<NewFile>, meta: Meta, data: Data },
    /// A large file streamed through the engine's `Writer` (its queue of writes in flight, its
    /// mode), fed by chunks from the parser. The Writer owns its file.
    Stream { rel: RelPath, writer: Box<cacheless::Writer>, rx: Receiver<Msg>, meta: Meta },
}

/// What the parser's thread and the workers share.
pub(super) struct Shared {
    pub creator: FileCreator,
    pub progress: Arc<Progress>,
    failures: Mutex<(Vec<String>, u64)>,
    modes: [AtomicU64; 4],
    /// Chunk buffers given back by the workers, for the next streamed entry.
    bufs: Mutex<Vec<AlignedBuf>>,
}

impl Shared {
    pub(super) fn new(creator: FileCreator, progress: Arc<Progress>) -> Shared {
        Shared { creator, progress, failures: Mutex::new((Vec::new(), 0)), modes: Default::default(), bufs: Mutex::new(Vec::new()) }
    }

    /// Counts and records a failed entry (the first 1000 messages are kept).
    pub(super) fn fail(&self, msg: String) {
        self.progress.error();
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        f.1 += 1;
        if f.0.len() < 1000 {
            f.0.push(msg);
        }
    }

    /// The failures so far, and how many there were.
    pub(super) fn take_failures(&self) -> (Vec<String>, u64) {
        std::mem::take(&mut *self.failures.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Counts a completed file and the mode it got.
    fn file_done(&self, m: Mode) {
        let i = match m {
            Mode::Direct => 0,
            Mode::DontCache => 1,
            Mode::WriteBehind => 2,
            Mode::Buffered | Mode::Auto => 3,
        };
        self.modes[i].fetch_add(1, Ordering::Relaxed);
        self.progress.file_done();
    }

    pub(super) fn mode_counts(&self) -> ModeCounts {
        let m = |i: usize| self.modes[i].load(Ordering::Relaxed);
        ModeCounts { direct: m(0), dontcache: m(1), writebehind: m(2), buffered: m(3) }
    }

    /// Hands each chunk of a streamed entry to `write`, counts it and keeps its buffer for the
    /// next chunk. `Err(None)`: the parser stopped inside this entry (truncated or corrupt
    /// archive, or interrupted); it reports why, and dropping the unfinished file removes it.
    fn take_chunks<E>(&self, rx: &Receiver<Msg>, mut write: impl FnMut(&[u8]) -> std::result::Result<(), E>) -> std::result::Result<(), Option<E>> {
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

    fn file_job(&self, rel: &RelPath, mut file: NewFile, meta: &Meta, data: Data) {
        let res = match data {
            Data::Whole(buf, len, _lease) => file.write_at(&buf[..len], 0).map_err(Some),
            Data::Stream(rx) => {
                let mut off = 0u64;
                self.take_chunks(&rx, |s| {
                    file.write_at(s, off)?;
                    off += s.len() as u64;
                    Ok(())
                })
            }
        };
        let res = res
            .and_then(|()| chown(file.file(), meta).map_err(|e| Some(cacheless::Error::io("fchown", file.path(), e.into()))))
            .and_then(|()| file.finish().map_err(Some));
        self.done(rel, res);
    }

    fn stream_job(&self, rel: &RelPath, mut w: cacheless::Writer, rx: Receiver<Msg>, meta: &Meta) {
        let res = self
            .take_chunks(&rx, |s| w.write_bytes(s))
            .and_then(|()| chown(w.file(), meta).map_err(|e| Some(cacheless::Error::io("fchown", w.path(), e.into()))))
            // Permissions and mtime are applied by finish (after the fchown above).
            .and_then(|()| w.finish().map_err(Some));
        self.done(rel, res);
    }

    /// Counts a file's outcome. A failed file was removed (dropped unfinished); `Err(None)`:
    /// the parser stopped inside it and reports why.
    fn done(&self, rel: &RelPath, res: std::result::Result<cacheless::WriteReport, Option<cacheless::Error>>) {
        match res {
            Ok(rep) => self.file_done(rep.decision.mode),
            Err(Some(e)) => self.fail(named(rel, &e.to_string(), true)),
            Err(None) => {}
        }
    }
}

/// A failure message that names the entry once (most engine errors already carry its path).
fn named(rel: &RelPath, msg: &str, removed: bool) -> String {
    let name = rel.to_path().display().to_string();
    let msg = if msg.contains(&name) { msg.to_string() } else { format!("{name}: {msg}") };
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
            Job::File { rel, file, meta, data } => self.file_job(&rel, *file, &meta, data),
            Job::Stream { rel, writer, rx, meta } => self.stream_job(&rel, *writer, rx, &meta),
        }
    }
    fn name(job: &Job) -> String {
        match job {
            Job::File { rel, .. } | Job::Stream { rel, .. } => rel.to_path().display().to_string(),
        }
    }
    fn panicked(&self, name: String, message: String) {
        self.fail(format!("{name}: internal error while writing it ({message}) (removed)"));
    }
}

/// Entry-level outcome: the archive goes on after `Entry`, stops after `Fatal` (an error of
/// the archive itself: truncated, corrupt, unreadable, or the extraction interrupted).
pub(super) enum Fail {
    Entry(Error),
    Fatal(Error),
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        match e {
            Error::Truncated { .. } | Error::Corrupt { .. } | Error::Decompress { .. } | Error::Interrupted { .. } => Fail::Fatal(e),
            e => Fail::Entry(e),
        }
    }
}

/// An error of the archive read by the parser: always stops the run.
fn fatal(e: Error) -> Fail {
    Fail::Fatal(e)
}

/// The parser's side of the extraction.
pub(super) struct Ctx<'a> {
    pub opts: &'a ExtractOptions,
    pub root: Root,
    pub sh: Arc<Shared>,
    pub pool: Pool<Shared>,
    pub budget: cacheless::Budget,
    pub is_root: bool,
    pub umask: u32,
    pub dirs: Vec<(RelPath, Meta)>,
    pub report: ExtractReport,
    pub warned_abs: bool,
}

/// Leases `n` bytes, at most a quarter of the budget: the archive's read-ahead and a large
/// file's Writer are each held to a quarter too (see `extract`), so a lease always fits once the
/// small files in flight are written, whatever the budget is.
fn acquire(b: &cacheless::Budget, n: u64) -> cacheless::buf::Lease {
    b.lease((n as usize).clamp(1, (b.limit() / 4).max(1)), 1, 1, 1)
}

/// Caps a queue depth so that `depth` (+ `extra`) buffers of `block` bytes stay within a quarter
/// of the budget.
pub(super) fn quarter_depth(limit: usize, block: usize, depth: usize, extra: usize) -> usize {
    if depth == 0 {
        return 0; // write-through stays write-through
    }
    let fit = (limit / 4 / block.max(1)).max(1 + extra);
    depth.min(fit - extra).max(1)
}

impl Ctx<'_> {
    pub(super) fn warn(&mut self, w: String) {
        if self.report.warnings.len() < 1000 {
            self.report.warnings.push(w);
        }
    }

    fn meta(&self, e: &Entry) -> Meta {
        let chown = self.opts.same_owner && self.is_root;
        let mut mode = e.mode & 0o7777;
        if !chown {
            mode &= !0o6000;
        }
        if !self.is_root {
            mode &= !self.umask;
        }
        Meta { mode, uid: e.uid, gid: e.gid, mtime: e.mtime, chown }
    }

    /// Sanitises and strips a member name; `None` if the entry is to be skipped (already warned).
    fn rel(&mut self, raw: &[u8], what: &str) -> std::result::Result<Option<RelPath>, Fail> {
        let display = String::from_utf8_lossy(raw).into_owned();
        match sanitize(raw) {
            Sanitized::DotDot => Err(Fail::Entry(Error::io(
                if what == "member" { "refusing member" } else { "refusing hard link target" },
                PathBuf::from(display),
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "member name contains '..'"),
            ))),
            Sanitized::Ok { path, stripped } => {
                if stripped && !self.warned_abs {
                    self.warned_abs = true;
                    self.warn("removing leading '/' from member names".into());
                }
                // GNU counts "." as a component when stripping ("./a/b" -N1-> "a/b").
                let raw_comps: Vec<&[u8]> = raw.split(|&b| b == b'/').filter(|c| !c.is_empty()).collect();
                let n = self.opts.strip_components;
                if n == 0 {
                    return Ok(Some(path));
                }
                if raw_comps.len() <= n {
                    return Ok(None);
                }
                let rest: Vec<Vec<u8>> = raw_comps[n..].iter().filter(|c| **c != b".").map(|c| c.to_vec()).collect();
                Ok(Some(RelPath(rest)))
            }
        }
    }

    /// Does one entry.
    pub(super) fn entry(&mut self, parser: &mut Parser<source::TarStream>, e: Entry) -> std::result::Result<(), Fail> {
        let Some(rel) = self.rel(&e.path, "member")? else {
            self.report.skipped += 1;
            return Ok(());
        };
        let meta = self.meta(&e);
        match e.kind {
            Kind::Dir => {
                self.root.mkdir(&rel)?;
                self.report.dirs += 1;
                self.dirs.push((rel, meta));
            }
            Kind::File => {
                match e.sparse.as_deref() {
                    Some(map) => self.sparse_file(parser, &e, map, rel, meta)?,
                    None => self.file(parser, &e, rel, meta)?,
                }
                self.report.files += 1;
                self.report.bytes += e.size;
            }
            Kind::Symlink => {
                let target = e.link.clone().unwrap_or_default();
                let (pfd, ()) = self.root.create_with(&rel, self.opts.keep_old_files, "symlinkat", |d, n| rustix::fs::symlinkat(OsStr::from_bytes(&target), d, n))?;
                let name = last_name(&rel);
                if meta.chown {
                    let _ = rustix::fs::chownat(
                        &pfd,
                        name,
                        Some(rustix::fs::Uid::from_raw(meta.uid as u32)),
                        Some(rustix::fs::Gid::from_raw(meta.gid as u32)),
                        AtFlags::SYMLINK_NOFOLLOW,
                    );
                }
                let _ = rustix::fs::utimensat(&pfd, name, &times(meta.mtime), AtFlags::SYMLINK_NOFOLLOW);
                self.report.symlinks += 1;
            }
            Kind::HardLink => {
                let target = e.link.clone().unwrap_or_default();
                let Some(trel) = self.rel(&target, "hard link target")? else {
                    return Err(Fail::Entry(Error::io(
                        "refused hard link",
                        rel.to_path(),
                        std::io::Error::new(std::io::ErrorKind::InvalidInput, "target stripped away"),
                    )));
                };
                let Some((tparent, tname)) = trel.split() else {
                    return Err(Fail::Entry(Error::io("refused hard link to the destination itself", rel.to_path(), std::io::Error::from_raw_os_error(libc::EPERM))));
                };
                if trel == rel {
                    // GNU tar: a link to itself is a no-op.
                    return Ok(());
                }
                let tfd = self.root.existing_dir(tparent)?;
                let tname = tname.to_vec();
                self.root.create_with(&rel, self.opts.keep_old_files, "linkat", |d, n| rustix::fs::linkat(&tfd, OsStr::from_bytes(&tname), d, n, AtFlags::empty()))?;
                self.report.hardlinks += 1;
            }
            Kind::Fifo | Kind::CharDev | Kind::BlockDev => {
                let dev = e.kind != Kind::Fifo;
                if !self.opts.special_files || (dev && !self.is_root) {
                    self.report.skipped += 1;
                    self.warn(format!(
                        "{}: skipping {} ({})",
                        e.display(),
                        if dev { "device node" } else { "fifo" },
                        if dev { "device nodes need special files enabled and root" } else { "special files not enabled" }
                    ));
                    return Ok(());
                }
                let ft = match e.kind {
                    Kind::Fifo => rustix::fs::FileType::Fifo,
                    Kind::CharDev => rustix::fs::FileType::CharacterDevice,
                    _ => rustix::fs::FileType::BlockDevice,
                };
                let devn = rustix::fs::makedev(e.dev.0, e.dev.1);
                let (pfd, ()) =
                    self.root.create_with(&rel, self.opts.keep_old_files, "mknodat", |d, n| rustix::fs::mknodat(d, n, ft, rustix::fs::Mode::from_raw_mode(meta.mode), devn))?;
                let _ = rustix::fs::utimensat(&pfd, last_name(&rel), &times(meta.mtime), AtFlags::SYMLINK_NOFOLLOW);
            }
        }
        Ok(())
    }

    /// Creates a file entry with an engine call, in archive order, replacing what is there as
    /// for other entries. The resolver speaks errnos (EEXIST makes it replace the entry); the
    /// engine's error, with its hint, is what gets reported.
    fn create_entry<T>(&mut self, rel: &RelPath, mut make: impl FnMut(&Arc<OwnedFd>, &OsStr) -> cacheless::Result<T>) -> std::result::Result<T, Fail> {
        let mut engine_err = None;
        let r = self.root.create_with(rel, self.opts.keep_old_files, "create", |d, n| match make(d, n) {
            Ok(t) => Ok(t),
            Err(err) => {
                let errno = err.errno().map(Errno::from_raw_os_error).unwrap_or(Errno::IO);
                engine_err = Some(err);
                Err(errno)
            }
        });
        match r {
            Ok((_, t)) => Ok(t),
            Err(err) => Err(match engine_err {
                Some(ee) if ee.errno() != Some(libc::EEXIST) => Fail::Entry(Error::Engine(ee)),
                _ => err.into(),
            }),
        }
    }

    fn file(&mut self, parser: &mut Parser<source::TarStream>, e: &Entry, rel: RelPath, meta: Meta) -> std::result::Result<(), Fail> {
        if rel.split().is_none() {
            return Err(Fail::Entry(Error::io("refused", "member", std::io::Error::from_raw_os_error(libc::EISDIR))));
        }
        if e.size >= self.opts.direct_min.max(1) {
            return self.stream_file(parser, e, rel, meta);
        }
        let display = rel.to_path();
        let creator = self.sh.creator.clone();
        let file = self.create_entry(&rel, |d, n| creator.create(d.clone(), n, &display, e.size, attrs(&meta)))?;
        if e.size <= CHUNK as u64 {
            // O_DIRECT (forced, or chosen for a large file) writes from aligned memory.
            let align = if self.opts.mode == IoMode::Direct || e.size >= cacheless::policy::SMALL_WRITE { 4096 } else { 1 };
            let lease = acquire(&self.budget, e.size);
            let mut buf = AlignedBuf::new(e.size as usize, align);
            // Dropping `file` on error removes it.
            parser.read_data_exact(&mut buf[..e.size as usize]).map_err(fatal)?;
            self.sh.progress.add_bytes(e.size);
            self.pool.send(Job::File { rel, file: Box::new(file), meta, data: Data::Whole(buf, e.size as usize, lease) });
        } else {
            let (tx, rx) = sync_channel::<Msg>(4);
            self.pool.send(Job::File { rel, file: Box::new(file), meta, data: Data::Stream(rx) });
            self.send_chunks(parser, e, tx, true)?;
        }
        Ok(())
    }

    /// Streams the entry's data to a worker in `CHUNK`s, in buffers the workers give back.
    /// `lease`: hold each chunk against the budget (not for the engine's `Writer`, see
    /// `stream_file`). Returning early drops `tx`, which makes the worker remove the partial file.
    fn send_chunks(&self, parser: &mut Parser<source::TarStream>, e: &Entry, tx: SyncSender<Msg>, lease: bool) -> std::result::Result<(), Fail> {
        let mut left = e.size;
        while left > 0 {
            if self.sh.progress.is_cancelled() {
                return Err(Fail::Fatal(Error::Interrupted { entry: e.display() }));
            }
            let n = (left as usize).min(CHUNK);
            let lease = lease.then(|| acquire(&self.budget, CHUNK as u64));
            let pooled = self.sh.bufs.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let mut buf = pooled.unwrap_or_else(|| AlignedBuf::new(CHUNK, 4096));
            parser.read_data_exact(&mut buf[..n]).map_err(fatal)?;
            left -= n as u64;
            let _ = tx.send(Msg::Chunk(buf, n, lease));
        }
        let _ = tx.send(Msg::End);
        Ok(())
    }

    /// Large files go through the engine's `Writer`: its policy (O_DIRECT bulk and a tail after
    /// clearing O_DIRECT in auto mode), its queue of writes in flight, its removal of a file
    /// dropped unfinished. Created with `create_in` (O_CREAT|O_EXCL|O_NOFOLLOW under the final
    /// name, `atomic = false`), so namespace order and replacement stay as for other entries.
    /// Chunk buffers handed to it are not leased (the channel bounds them to 5 x 4 MiB): the
    /// Writer leases its own buffers from the same budget, and a worker waiting for that lease
    /// must not wait on chunks that only it can release.
    fn stream_file(&mut self, parser: &mut Parser<source::TarStream>, e: &Entry, rel: RelPath, meta: Meta) -> std::result::Result<(), Fail> {
        let mut wo = self.opts.write_options.clone().unwrap_or_else(|| cacheless::WriteOptions::new(self.budget.clone()));
        wo.budget = self.budget.clone();
        wo.mode = self.opts.mode;
        wo.queue_depth = quarter_depth(self.budget.limit(), wo.block_size, wo.queue_depth, 1);
        wo.size_hint = Some(e.size);
        wo.atomic = false;
        wo.sync = false; // syncfs at the end makes the whole tree durable at once
        wo.permissions = Some(meta.mode);
        wo.mtime = Some(system_time(meta.mtime));
        let display = self.root.path.join(rel.to_path());
        let w = self.create_entry(&rel, |d, n| cacheless::Writer::create_in(d.as_fd(), n, &display, &wo))?;
        let (tx, rx) = sync_channel::<Msg>(4);
        self.pool.send(Job::Stream { rel, writer: Box::new(w), rx, meta });
        // Returning early drops `tx`: the worker drops the Writer, which removes the file.
        self.send_chunks(parser, e, tx, false)
    }

    /// A sparse entry, written here: each data segment at its offset through the engine, the
    /// holes left as holes, the length set at the end.
    fn sparse_file(&mut self, parser: &mut Parser<source::TarStream>, e: &Entry, map: &[(u64, u64)], rel: RelPath, meta: Meta) -> std::result::Result<(), Fail> {
        let data_len: u64 = map.iter().map(|&(_, len)| len).sum();
        let display = rel.to_path();
        let creator = self.sh.creator.clone();
        // Dropping `file` on error removes it.
        let mut file = self.create_entry(&rel, |d, n| creator.create(d.clone(), n, &display, data_len, attrs(&meta)))?;
        let mut buf = AlignedBuf::new(1 << 20, 4096);
        for &(off, len) in map {
            let mut done = 0u64;
            while done < len {
                let n = ((len - done) as usize).min(buf.len());
                parser.read_data_exact(&mut buf[..n]).map_err(fatal)?;
                file.write_at(&buf[..n], off + done).map_err(|er| Fail::Entry(Error::Engine(er)))?;
                done += n as u64;
                self.sh.progress.add_bytes(n as u64);
            }
        }
        file.set_len(e.size).map_err(|er| Fail::Entry(Error::Engine(er)))?;
        chown(file.file(), &meta).map_err(|er| Fail::Entry(Error::io("fchown", display, er)))?;
        let rep = file.finish().map_err(|er| Fail::Entry(Error::Engine(er)))?;
        self.sh.file_done(rep.decision.mode);
        Ok(())
    }
}

/// The last component of a non-root entry (the root itself never reaches here: entries that
/// name it are refused or skipped first).
fn last_name(rel: &RelPath) -> &OsStr {
    OsStr::from_bytes(rel.split().map_or(&b"."[..], |(_, n)| n))
}
