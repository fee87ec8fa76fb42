//! The many-file creator behind `cacheless extract`.
//!
//! One thread parses the tar stream and performs every namespace operation (mkdirat, openat with
//! O_CREAT|O_EXCL|O_NOFOLLOW, symlinkat, linkat, unlinkat) in archive order, so replacement and
//! symlink checks see exactly the state GNU tar would. File data, permissions, ownership, mtime
//! and close run on a pool of worker threads, so many files are in flight at once (the design's
//! thread-pool creator; io_uring batching of openat/write/close is not done yet). Small files are
//! read whole and handed over (written by `sink`); large ones are streamed in 4 MiB chunks to a
//! worker that writes them through the engine's `Writer` (O_DIRECT with its queue of writes in
//! flight, on io_uring or threads). All buffers are leased from the engine's memory budget.
//! Directories get their mode and mtime after their contents, deepest first; then `syncfs` makes
//! the tree durable before success is reported.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use cacheless::residency::drop_range;
use cacheless::AlignedBuf;
use rustix::fs::{AtFlags, Mode, OFlags, Timespec, Timestamps};
use rustix::io::Errno;

use crate::error::{Error, Result};
use crate::fsops::{sanitize, RelPath, Root, Sanitized};
use crate::sink::{write_buffered, Caps, DirectFile, FileMode, IoMode};
use crate::source::{self, Input, SourceInfo};
use crate::tarparse::{Entry, Kind, Parser};

/// Live counters, shared with whoever draws progress (CLI, Python).
#[derive(Debug, Default)]
pub struct Progress {
    /// Bytes of the archive file read so far (compressed).
    pub archive_bytes: Arc<AtomicU64>,
    /// Bytes of the uncompressed tar stream parsed so far.
    pub tar_bytes: AtomicU64,
    /// Entries processed.
    pub entries: AtomicU64,
    /// Regular files completed.
    pub files: AtomicU64,
    /// File data bytes written.
    pub bytes: AtomicU64,
    /// Entries that failed.
    pub errors: AtomicU64,
    /// Set to stop the extraction between entries and data chunks (Ctrl-C); the entry being
    /// written is removed and the report says `interrupted`. Shared, so a signal handler can
    /// set it directly (signal-hook's `flag::register`).
    pub cancel: Arc<std::sync::atomic::AtomicBool>,
}

/// What `extract` does and how.
#[derive(Clone, Debug)]
pub struct ExtractOptions {
    /// Destination directory (created if missing).
    pub dest: PathBuf,
    /// Leading path components to drop (GNU `--strip-components`).
    pub strip_components: usize,
    /// How file data is written.
    pub mode: IoMode,
    /// syncfs before reporting success (false: `--no-sync`).
    pub sync: bool,
    /// Keep existing files instead of replacing them (an existing file is an entry failure).
    pub keep_old_files: bool,
    /// Restore owner, group and setuid/setgid bits (only honoured when running as root).
    pub same_owner: bool,
    /// Create FIFOs, and device nodes when root (otherwise they are skipped with a warning).
    pub special_files: bool,
    /// Worker threads for file data and metadata.
    pub threads: usize,
    /// The engine's memory budget: every in-flight buffer (archive read-ahead, decompressed
    /// chunks handed to workers, small files' data) is leased from it.
    pub budget: cacheless::Budget,
    /// How the archive file is read (mode, backend, block size, read-ahead depth); its budget
    /// should be `budget`.
    pub read_options: cacheless::ReadOptions,
    /// Auto mode: files at least this large are written with O_DIRECT.
    pub direct_min: u64,
    /// Use the O_NOFOLLOW walk even where openat2 works (tests of the fallback).
    pub force_walk: bool,
    /// Engine write options for large files (mode is taken from `mode`, budget from `budget`;
    /// block size, queue depth and backend from here).
    pub write_options: Option<cacheless::WriteOptions>,
    /// Counters to poll while it runs.
    pub progress: Option<Arc<Progress>>,
}

impl ExtractOptions {
    /// Defaults: auto mode, sync, replace existing files, no ownership, 256 MiB budget.
    pub fn new(dest: impl Into<PathBuf>) -> Self {
        let budget = cacheless::Budget::new(256 << 20);
        let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
        ExtractOptions {
            dest: dest.into(),
            strip_components: 0,
            mode: IoMode::Auto,
            sync: true,
            keep_old_files: false,
            same_owner: false,
            special_files: false,
            threads: (cpus * 2).clamp(4, 16),
            read_options: cacheless::ReadOptions::new(budget.clone()),
            budget,
            direct_min: 1 << 20,
            force_walk: false,
            progress: None,
            write_options: None,
        }
    }
}

/// Per-mode file counts.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ModeCounts {
    /// Files written with O_DIRECT.
    pub direct: u64,
    /// Files written with RWF_DONTCACHE.
    pub dontcache: u64,
    /// Files written with write-behind.
    pub writebehind: u64,
    /// Files written plain buffered.
    pub buffered: u64,
}

/// The outcome of one extraction.
#[derive(Debug, serde::Serialize)]
pub struct ExtractReport {
    /// How the archive was read and its compression.
    pub source: SourceInfo,
    /// Entries seen.
    pub entries: u64,
    /// Regular files written.
    pub files: u64,
    /// Directories.
    pub dirs: u64,
    /// Symbolic links.
    pub symlinks: u64,
    /// Hard links.
    pub hardlinks: u64,
    /// Entries skipped (refused names, special files).
    pub skipped: u64,
    /// File data bytes written.
    pub bytes: u64,
    /// Uncompressed tar bytes parsed.
    pub tar_bytes: u64,
    /// How files were written.
    pub modes: ModeCounts,
    /// O_DIRECT verdict for the destination (None: not tried).
    pub direct_ok: Option<bool>,
    /// RWF_DONTCACHE verdict for the destination (None: not tried).
    pub dontcache_ok: Option<bool>,
    /// How parents were resolved (`openat2` or `walk`) and why.
    pub resolve: String,
    /// Whether syncfs ran.
    pub synced: bool,
    /// Warnings (refused names, skipped special files), first 1000.
    pub warnings: Vec<String>,
    /// Entries that failed, first 1000 (the run went on past them).
    pub failures: Vec<String>,
    /// Number of failed entries.
    pub failure_count: u64,
    /// The archive-level error that stopped the run (truncated, corrupt), if any.
    pub fatal: Option<String>,
    /// Wall time in seconds (including the final syncfs).
    pub elapsed_s: f64,
    /// Seconds spent in the final syncfs.
    pub sync_s: f64,
    /// The fatal error itself.
    #[serde(skip)]
    pub fatal_error: Option<Error>,
}

impl ExtractReport {
    /// True when every entry was extracted and the archive was read to its end.
    pub fn is_ok(&self) -> bool {
        self.failure_count == 0 && self.fatal.is_none()
    }
}

/// Bytes held against the engine's budget, returned on drop.
type Lease = cacheless::buf::Lease;

/// Leases `n` bytes, at most a quarter of the budget: the archive's read-ahead and a large
/// file's Writer are each held to a quarter too (see `extract`), so a lease always fits once the
/// small files in flight are written, whatever `--memory` is.
fn acquire(b: &cacheless::Budget, n: u64) -> Lease {
    b.lease((n as usize).clamp(1, (b.limit() / 4).max(1)), 1, 1, 1)
}

/// The mode small files ask `sink` for (it falls back from DONTCACHE to write-behind).
fn small_file_mode(mode: IoMode) -> FileMode {
    match mode {
        IoMode::Buffered => FileMode::Buffered,
        IoMode::WriteBehind => FileMode::WriteBehind,
        _ => FileMode::DontCache,
    }
}

/// Caps a queue depth so that `depth` (+ `extra`) buffers of `block` bytes stay within a quarter
/// of the budget.
fn quarter_depth(limit: usize, block: usize, depth: usize, extra: usize) -> usize {
    if depth == 0 {
        return 0; // write-through stays write-through
    }
    let fit = (limit / 4 / block.max(1)).max(1 + extra);
    depth.min(fit - extra).max(1)
}

#[derive(Clone, Copy, Debug)]
struct Meta {
    mode: u32,
    uid: u64,
    gid: u64,
    mtime: (i64, u32),
    chown: bool,
}

fn times(mtime: (i64, u32)) -> Timestamps {
    Timestamps {
        last_access: Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
        last_modification: Timespec {
            tv_sec: mtime.0,
            tv_nsec: mtime.1 as _,
        },
    }
}

/// fchown to the entry's owner when ownership is restored.
fn chown(fd: impl AsFd, m: &Meta) -> rustix::io::Result<()> {
    if !m.chown {
        return Ok(());
    }
    rustix::fs::fchown(
        fd,
        Some(rustix::fs::Uid::from_raw(m.uid as u32)),
        Some(rustix::fs::Gid::from_raw(m.gid as u32)),
    )
}

fn apply_meta(fd: &OwnedFd, m: &Meta) -> rustix::io::Result<()> {
    chown(fd, m)?;
    // After fchown, which clears setuid/setgid.
    rustix::fs::fchmod(fd, Mode::from_raw_mode(m.mode))?;
    rustix::fs::futimens(fd, &times(m.mtime))
}

const CHUNK: usize = 4 << 20;

enum Msg {
    Chunk(AlignedBuf, usize, Option<Lease>),
    End,
}

enum Data {
    Whole(Vec<u8>, Lease),
    Stream(Receiver<Msg>),
}

/// A file below `direct_min`, written by `sink` on a worker.
struct FileJob {
    rel: RelPath,
    parent: Arc<OwnedFd>,
    fd: OwnedFd,
    direct: bool,
    want: FileMode,
    meta: Meta,
    data: Data,
}

enum Job {
    File(FileJob),
    /// A large file written by the engine's `Writer` (O_DIRECT with a deep queue, or the mode it
    /// picks), fed by chunks from the parser. The Writer owns its file.
    Engine {
        rel: RelPath,
        writer: Box<cacheless::Writer>,
        rx: Receiver<Msg>,
        meta: Meta,
    },
}

struct Shared {
    caps: Caps,
    progress: Arc<Progress>,
    failures: Mutex<(Vec<String>, u64)>,
    modes: [AtomicU64; 4],
    leftovers: Mutex<Vec<File>>,
    bufs: Mutex<Vec<AlignedBuf>>,
}

impl Shared {
    fn fail(&self, msg: String) {
        self.progress.errors.fetch_add(1, Ordering::Relaxed);
        let mut f = self.failures.lock().unwrap();
        f.1 += 1;
        if f.0.len() < 1000 {
            f.0.push(msg);
        }
    }
    /// Counts a completed file and the mode it got.
    fn file_done(&self, m: FileMode) {
        let i = match m {
            FileMode::Direct => 0,
            FileMode::DontCache => 1,
            FileMode::WriteBehind => 2,
            FileMode::Buffered | FileMode::Auto => 3,
        };
        self.modes[i].fetch_add(1, Ordering::Relaxed);
        self.progress.files.fetch_add(1, Ordering::Relaxed);
    }
    /// Hands each chunk of a streamed entry to `write`, counts it and keeps its buffer for the
    /// next chunk. `Err(None)`: the parser stopped inside this entry (truncated or corrupt
    /// archive); it reports the error, the caller removes the half-written file.
    fn take_chunks<E>(&self, rx: &Receiver<Msg>, mut write: impl FnMut(&[u8]) -> std::result::Result<(), E>) -> std::result::Result<(), Option<E>> {
        loop {
            match rx.recv() {
                Ok(Msg::Chunk(buf, len, lease)) => {
                    write(&buf[..len]).map_err(Some)?;
                    self.progress.bytes.fetch_add(len as u64, Ordering::Relaxed);
                    let mut pool = self.bufs.lock().unwrap();
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
}

/// Removes the entry `rel` created in `parent` (its fd already closed) after a failure.
fn remove(parent: &OwnedFd, rel: &RelPath) {
    if let Some((_, name)) = rel.split() {
        let _ = rustix::fs::unlinkat(parent, OsStr::from_bytes(name), AtFlags::empty());
    }
}

/// How many write-behind files a worker keeps open before dropping their pages for good.
const BEHIND: usize = 32;

fn worker(rx: Arc<Mutex<Receiver<Job>>>, sh: Arc<Shared>) {
    let mut behind: VecDeque<File> = VecDeque::new();
    loop {
        let job = rx.lock().unwrap().recv();
        match job {
            Ok(Job::File(job)) => file_job(&sh, job, &mut behind),
            Ok(Job::Engine { rel, writer, rx, meta }) => engine_job(&sh, &rel, *writer, rx, &meta),
            Err(_) => break,
        }
    }
    sh.leftovers.lock().unwrap().extend(behind);
}

fn file_job(sh: &Shared, job: FileJob, behind: &mut VecDeque<File>) {
    let FileJob {
        rel,
        parent,
        fd,
        direct,
        want,
        meta,
        data,
    } = job;
    match write_file(sh, &fd, direct, want, data, &meta) {
        Ok(used) => {
            sh.file_done(used);
            if used == FileMode::WriteBehind || (direct && sh.caps.dontcache_known_bad()) {
                behind.push_back(fd.into());
                if behind.len() > BEHIND {
                    let old = behind.pop_front().unwrap();
                    let _ = drop_range(&old, 0, 0);
                }
            }
        }
        Err(e) => {
            drop(fd);
            remove(&parent, &rel);
            if let Some((op, errno)) = e {
                sh.fail(format!("{}: {op}: {errno} (removed)", rel.to_path().display()));
            }
        }
    }
}

/// Writes a small file's data and metadata; returns the mode it got. `Err(None)`: the parser
/// stopped inside this entry and reports why.
fn write_file(
    sh: &Shared,
    fd: &OwnedFd,
    direct: bool,
    want: FileMode,
    data: Data,
    meta: &Meta,
) -> std::result::Result<FileMode, Option<(&'static str, Errno)>> {
    let mut used = if direct { FileMode::Direct } else { want };
    match data {
        Data::Whole(v, _lease) => {
            if !v.is_empty() {
                used = write_buffered(&sh.caps, fd.as_fd(), &v, 0, want).map_err(|e| Some(("pwrite", e)))?;
            }
        }
        Data::Stream(rx) => {
            let mut df = DirectFile { fd, off: 0 };
            sh.take_chunks(&rx, |s| {
                if !direct {
                    used = write_buffered(&sh.caps, fd.as_fd(), s, df.off, want).map_err(|e| ("pwrite", e))?;
                    df.off += s.len() as u64;
                    Ok(())
                } else if s.len() == CHUNK {
                    df.write_aligned(s).map_err(|e| ("pwrite(O_DIRECT)", e))
                } else {
                    df.finish(&sh.caps, s).map_err(|e| ("pwrite(O_DIRECT)", e))
                }
            })?;
        }
    }
    apply_meta(fd, meta).map_err(|e| Some(("fchmod/futimens", e)))?;
    Ok(used)
}

fn engine_job(sh: &Shared, rel: &RelPath, mut w: cacheless::Writer, rx: Receiver<Msg>, meta: &Meta) {
    use std::io::Write;
    let res = sh
        .take_chunks(&rx, |s| w.write_all(s).map_err(|e| format!("write: {e}")))
        .and_then(|()| chown(w.file(), meta).map_err(|e| Some(format!("fchown: {e}"))))
        // Permissions and mtime are applied by finish (after the fchown above).
        .and_then(|()| w.finish().map_err(|e| Some(e.to_string())));
    match res {
        Ok(rep) => sh.file_done(rep.decision.mode),
        Err(Some(e)) => sh.fail(format!("{}: {e} (removed)", rel.to_path().display())),
        // Parser stopped inside this entry: dropping the Writer removes the file.
        Err(None) => {}
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

struct Pool {
    tx: Option<SyncSender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl Pool {
    fn new(n: usize, sh: &Arc<Shared>) -> Result<Pool> {
        let (tx, rx) = sync_channel::<Job>(n * 8);
        let rx = Arc::new(Mutex::new(rx));
        let mut threads = Vec::new();
        for i in 0..n.max(1) {
            let rx = rx.clone();
            let sh = sh.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("cacheless-create-{i}"))
                    .spawn(move || worker(rx, sh))
                    .map_err(|e| Error::io("spawn", "worker", e))?,
            );
        }
        Ok(Pool { tx: Some(tx), threads })
    }
    fn send(&self, j: Job) {
        // Workers only exit once the sender is gone, so this cannot fail.
        let _ = self.tx.as_ref().expect("pool open").send(j);
    }
    fn finish(mut self) {
        self.tx = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Entry-level outcome: the archive goes on after `Entry`, stops after `Fatal`.
enum Fail {
    Entry(Error),
    Fatal(Error),
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        match e {
            Error::Truncated { .. } | Error::Corrupt { .. } | Error::Decompress { .. } => Fail::Fatal(e),
            Error::Io { op: "read", .. } => Fail::Fatal(e),
            e => Fail::Entry(e),
        }
    }
}

struct Ctx<'a> {
    opts: &'a ExtractOptions,
    root: Root,
    sh: Arc<Shared>,
    pool: Pool,
    budget: cacheless::Budget,
    is_root: bool,
    umask: u32,
    dirs: Vec<(RelPath, Meta)>,
    report: ExtractReport,
    warned_abs: bool,
}

impl Ctx<'_> {
    fn warn(&mut self, w: String) {
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
        Meta {
            mode,
            uid: e.uid,
            gid: e.gid,
            mtime: e.mtime,
            chown,
        }
    }

    /// Sanitises and strips a member name; `None` if the entry is to be skipped (already warned).
    fn rel(&mut self, raw: &[u8], what: &str) -> std::result::Result<Option<RelPath>, Fail> {
        let display = String::from_utf8_lossy(raw).into_owned();
        match sanitize(raw) {
            Sanitized::DotDot => Err(Fail::Entry(Error::io(
                if what == "member" {
                    "refusing member"
                } else {
                    "refusing hard link target"
                },
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

    fn entry(&mut self, parser: &mut Parser<source::TarStream>, e: Entry) -> std::result::Result<(), Fail> {
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
                if e.sparse.is_some() {
                    self.sparse_file(parser, &e, rel, meta)?
                } else {
                    self.file(parser, &e, rel, meta)?
                }
                self.report.files += 1;
                self.report.bytes += e.size;
            }
            Kind::Symlink => {
                let target = e.link.clone().unwrap_or_default();
                let (pfd, ()) = self.root.create_with(&rel, self.opts.keep_old_files, "symlinkat", |d, n| {
                    rustix::fs::symlinkat(OsStr::from_bytes(&target), d, n)
                })?;
                let name = OsStr::from_bytes(rel.split().expect("non-root").1);
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
                    return Err(Fail::Entry(Error::io(
                        "refused hard link to the destination itself",
                        rel.to_path(),
                        std::io::Error::from_raw_os_error(libc::EPERM),
                    )));
                };
                if trel == rel {
                    // GNU tar: a link to itself is a no-op.
                    return Ok(());
                }
                let tfd = self.root.existing_dir(tparent)?;
                let tname = tname.to_vec();
                self.root.create_with(&rel, self.opts.keep_old_files, "linkat", |d, n| {
                    rustix::fs::linkat(&tfd, OsStr::from_bytes(&tname), d, n, AtFlags::empty())
                })?;
                self.report.hardlinks += 1;
            }
            Kind::Fifo | Kind::CharDev | Kind::BlockDev => {
                let dev = e.kind != Kind::Fifo;
                if !self.opts.special_files || (dev && !self.is_root) {
                    self.report.skipped += 1;
                    self.warn(format!(
                        "{}: skipping {} (use --special-files{})",
                        e.display(),
                        if dev { "device node" } else { "fifo" },
                        if dev { " as root" } else { "" }
                    ));
                    return Ok(());
                }
                let ft = match e.kind {
                    Kind::Fifo => rustix::fs::FileType::Fifo,
                    Kind::CharDev => rustix::fs::FileType::CharacterDevice,
                    _ => rustix::fs::FileType::BlockDevice,
                };
                let devn = rustix::fs::makedev(e.dev.0, e.dev.1);
                let (pfd, ()) = self.root.create_with(&rel, self.opts.keep_old_files, "mknodat", |d, n| {
                    rustix::fs::mknodat(d, n, ft, Mode::from_raw_mode(meta.mode), devn)
                })?;
                let name = OsStr::from_bytes(rel.split().expect("non-root").1);
                let _ = rustix::fs::utimensat(&pfd, name, &times(meta.mtime), AtFlags::SYMLINK_NOFOLLOW);
            }
        }
        Ok(())
    }

    fn open_file(&mut self, rel: &RelPath, direct: bool) -> std::result::Result<(Arc<OwnedFd>, OwnedFd), Fail> {
        let base = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let flags = if direct { base | OFlags::DIRECT } else { base };
        let r = self.root.create_with(rel, self.opts.keep_old_files, "openat", |d, n| {
            rustix::fs::openat(d, n, flags, Mode::from_raw_mode(0o600))
        });
        Ok(r?)
    }

    fn file(&mut self, parser: &mut Parser<source::TarStream>, e: &Entry, rel: RelPath, meta: Meta) -> std::result::Result<(), Fail> {
        if rel.split().is_none() {
            return Err(Fail::Entry(Error::io(
                "refused",
                "member",
                std::io::Error::from_raw_os_error(libc::EISDIR),
            )));
        }
        if e.size >= self.opts.direct_min.max(1) {
            return self.engine_file(parser, e, rel, meta);
        }
        // Below direct_min only a forced --mode direct writes with O_DIRECT.
        let direct = self.opts.mode == IoMode::Direct;
        let want = small_file_mode(self.opts.mode);
        let (parent, fd) = match self.open_file(&rel, direct) {
            // `probe` found O_DIRECT supported; a file that still refuses it fails the forced mode.
            Err(Fail::Entry(Error::Io { source, .. })) if direct && source.raw_os_error() == Some(libc::EINVAL) => {
                self.sh.caps.set_direct(false);
                return Err(Fail::Fatal(Error::Unsupported(format!(
                    "O_DIRECT unsupported on the filesystem of {} (EINVAL): use --mode auto or dontcache",
                    self.root.path.display()
                ))));
            }
            r => r?,
        };
        if e.size <= CHUNK as u64 && !direct {
            let lease = acquire(&self.budget, e.size);
            let mut v = vec![0u8; e.size as usize];
            if let Err(err) = parser.read_data_exact(&mut v) {
                drop(fd);
                remove(&parent, &rel);
                return Err(err.into());
            }
            self.sh.progress.bytes.fetch_add(e.size, Ordering::Relaxed);
            self.pool.send(Job::File(FileJob {
                rel,
                parent,
                fd,
                direct,
                want,
                meta,
                data: Data::Whole(v, lease),
            }));
        } else {
            let (tx, rx) = sync_channel::<Msg>(4);
            self.pool.send(Job::File(FileJob {
                rel,
                parent,
                fd,
                direct,
                want,
                meta,
                data: Data::Stream(rx),
            }));
            self.send_chunks(parser, e, tx, true)?;
        }
        Ok(())
    }

    /// Streams the entry's data to a worker in `CHUNK`s, in buffers the workers give back.
    /// `lease`: hold each chunk against the budget (not for the engine's `Writer`, see
    /// `engine_file`). Returning early drops `tx`, which makes the worker remove the partial file.
    fn send_chunks(
        &self,
        parser: &mut Parser<source::TarStream>,
        e: &Entry,
        tx: SyncSender<Msg>,
        lease: bool,
    ) -> std::result::Result<(), Fail> {
        let mut left = e.size;
        while left > 0 {
            let n = (left as usize).min(CHUNK);
            let lease = lease.then(|| acquire(&self.budget, CHUNK as u64));
            let mut buf = self.sh.bufs.lock().unwrap().pop().unwrap_or_else(|| AlignedBuf::new(CHUNK, self.sh.caps.align));
            if self.sh.progress.cancel.load(Ordering::Relaxed) {
                return Err(Fail::Fatal(Error::Unsupported(format!(
                    "interrupted while writing {}",
                    e.display()
                ))));
            }
            parser.read_data_exact(&mut buf[..n])?;
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
    fn engine_file(
        &mut self,
        parser: &mut Parser<source::TarStream>,
        e: &Entry,
        rel: RelPath,
        meta: Meta,
    ) -> std::result::Result<(), Fail> {
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
        let mut engine_err = None;
        let r =
            self.root.create_with(
                &rel,
                self.opts.keep_old_files,
                "create",
                |d, n| match cacheless::Writer::create_in(d, n, &display, &wo) {
                    Ok(w) => Ok(w),
                    Err(err) => {
                        let errno = err.errno().map(Errno::from_raw_os_error).unwrap_or(Errno::IO);
                        engine_err = Some(err);
                        Err(errno)
                    }
                },
            );
        let w = match r {
            Ok((_, w)) => w,
            Err(err) => {
                return Err(match engine_err {
                    Some(ee) if ee.errno() != Some(libc::EEXIST) => Fail::Entry(Error::Engine(ee)),
                    _ => err.into(),
                })
            }
        };
        let (tx, rx) = sync_channel::<Msg>(4);
        self.pool.send(Job::Engine {
            rel,
            writer: Box::new(w),
            rx,
            meta,
        });
        // Returning early drops `tx`: the worker drops the Writer, which removes the file.
        self.send_chunks(parser, e, tx, false)
    }

    fn sparse_file(
        &mut self,
        parser: &mut Parser<source::TarStream>,
        e: &Entry,
        rel: RelPath,
        meta: Meta,
    ) -> std::result::Result<(), Fail> {
        // Sparse entries are written on this thread with pwrite at each segment's offset and a
        // final ftruncate to the real size, so holes stay holes.
        let (parent, fd) = self.open_file(&rel, false)?;
        let want = small_file_mode(self.opts.mode);
        let res: std::result::Result<FileMode, Fail> = (|| {
            let mut used = want;
            let mut buf = vec![0u8; 1 << 20];
            for &(off, len) in e.sparse.as_ref().unwrap() {
                let mut done = 0u64;
                while done < len {
                    let n = ((len - done) as usize).min(buf.len());
                    parser.read_data_exact(&mut buf[..n])?;
                    used = write_buffered(&self.sh.caps, fd.as_fd(), &buf[..n], off + done, want)
                        .map_err(|er| Fail::Entry(Error::io("pwrite", rel.to_path(), er)))?;
                    done += n as u64;
                    self.sh.progress.bytes.fetch_add(n as u64, Ordering::Relaxed);
                }
            }
            rustix::fs::ftruncate(&fd, e.size).map_err(|er| Fail::Entry(Error::io("ftruncate", rel.to_path(), er)))?;
            apply_meta(&fd, &meta).map_err(|er| Fail::Entry(Error::io("fchmod/futimens", rel.to_path(), er)))?;
            Ok(used)
        })();
        match res {
            Ok(used) => {
                self.sh.file_done(used);
                if used == FileMode::WriteBehind {
                    self.sh.leftovers.lock().unwrap().push(fd.into());
                }
                Ok(())
            }
            Err(err) => {
                drop(fd);
                remove(&parent, &rel);
                Err(err)
            }
        }
    }
}

/// Extracts an archive (any supported compression, detected) into `opts.dest`.
///
/// Returns `Err` only when nothing could start (archive or destination unopenable). Entry
/// failures and a truncated or corrupt archive are in the report (`is_ok()` is false); entries
/// completed before them stay, the entry being written is removed.
pub fn extract(input: Input, opts: &ExtractOptions) -> Result<ExtractReport> {
    let t0 = Instant::now();
    let progress = opts.progress.clone().unwrap_or_default();
    let mut ro = opts.read_options.clone();
    ro.budget = opts.budget.clone();
    ro.queue_depth = quarter_depth(opts.budget.limit(), ro.block_size, ro.queue_depth, ro.extra_buffers);
    let stream = source::open(input, progress.archive_bytes.clone(), &ro)?;
    let info = stream.info.clone();
    let is_root = rustix::process::geteuid().is_root();
    // umask can only be read by setting it; done once, before any worker starts.
    let umask = rustix::process::umask(Mode::from_raw_mode(0o022)).as_raw_mode() as u32;
    rustix::process::umask(Mode::from_raw_mode(umask as _));
    let mut root = Root::open(&opts.dest, 0o777 & !umask)?;
    if opts.force_walk {
        root.force_walk();
    }
    raise_nofile();
    let caps = crate::sink::probe(&root.path, opts.mode).map_err(Error::Unsupported)?;
    let sh = Arc::new(Shared {
        caps,
        progress: progress.clone(),
        failures: Mutex::new((Vec::new(), 0)),
        modes: Default::default(),
        leftovers: Mutex::new(Vec::new()),
        bufs: Mutex::new(Vec::new()),
    });
    let pool = Pool::new(opts.threads, &sh)?;
    let report = ExtractReport {
        source: info,
        entries: 0,
        files: 0,
        dirs: 0,
        symlinks: 0,
        hardlinks: 0,
        skipped: 0,
        bytes: 0,
        tar_bytes: 0,
        modes: ModeCounts::default(),
        direct_ok: None,
        dontcache_ok: None,
        resolve: format!("{:?}: {}", root.resolve, root.resolve_reason).to_lowercase(),
        synced: false,
        warnings: Vec::new(),
        failures: Vec::new(),
        failure_count: 0,
        fatal: None,
        elapsed_s: 0.0,
        sync_s: 0.0,
        fatal_error: None,
    };
    let mut ctx = Ctx {
        opts,
        root,
        sh: sh.clone(),
        pool,
        budget: opts.budget.clone(),
        is_root,
        umask,
        dirs: Vec::new(),
        report,
        warned_abs: false,
    };
    let mut parser = Parser::new(stream);
    loop {
        if progress.cancel.load(Ordering::Relaxed) {
            ctx.report.fatal = Some("interrupted".into());
            break;
        }
        let e = match parser.next_entry() {
            Ok(Some(e)) => e,
            Ok(None) => {
                if let Err(err) = parser.drain() {
                    ctx.report.fatal = Some(err.to_string());
                    ctx.report.fatal_error = Some(err);
                }
                break;
            }
            Err(err) => {
                ctx.report.fatal = Some(err.to_string());
                ctx.report.fatal_error = Some(err);
                break;
            }
        };
        ctx.report.entries += 1;
        progress.entries.fetch_add(1, Ordering::Relaxed);
        let name = e.display();
        match ctx.entry(&mut parser, e) {
            Ok(()) => {}
            Err(Fail::Entry(err)) => {
                // Most errors already name the entry (their path); say it once.
                let msg = err.to_string();
                sh.fail(if msg.contains(&name) { msg } else { format!("{name}: {msg}") })
            }
            Err(Fail::Fatal(err)) => {
                ctx.report.fatal = Some(err.to_string());
                ctx.report.fatal_error = Some(err);
                break;
            }
        }
        progress.tar_bytes.store(parser.position(), Ordering::Relaxed);
    }
    ctx.report.tar_bytes = parser.position();
    drop(parser);
    let Ctx {
        pool,
        mut root,
        dirs,
        mut report,
        ..
    } = ctx;
    pool.finish();
    // Directories last, deepest first, so their contents do not disturb their mtime.
    let mut dirs = dirs;
    dirs.sort_by_key(|(r, _)| std::cmp::Reverse(r.0.len()));
    for (rel, meta) in &dirs {
        match root.open_dir_for_meta(rel) {
            Ok(fd) => {
                if let Err(e) = apply_meta(&fd, meta) {
                    sh.fail(format!("{}: fchmod/futimens: {e}", rel.to_path().display()));
                }
            }
            Err(e) => sh.fail(format!("{}: {e}", rel.to_path().display())),
        }
    }
    let t_sync = Instant::now();
    if opts.sync {
        match rustix::fs::syncfs(root.fd()) {
            Ok(()) => report.synced = true,
            Err(e) => sh.fail(format!("{}: syncfs: {e}", root.path.display())),
        }
    }
    report.sync_s = t_sync.elapsed().as_secs_f64();
    for f in sh.leftovers.lock().unwrap().drain(..) {
        let _ = drop_range(&f, 0, 0);
    }
    let m = |i: usize| sh.modes[i].load(Ordering::Relaxed);
    report.modes = ModeCounts {
        direct: m(0),
        dontcache: m(1),
        writebehind: m(2),
        buffered: m(3),
    };
    let (d, c) = sh.caps.verdicts();
    report.direct_ok = d;
    report.dontcache_ok = c;
    let f = std::mem::take(&mut *sh.failures.lock().unwrap());
    report.failures = f.0;
    report.failure_count = f.1;
    report.elapsed_s = t0.elapsed().as_secs_f64();
    Ok(report)
}

/// Many files in flight need descriptors: raise the soft RLIMIT_NOFILE to the hard limit.
fn raise_nofile() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let l = getrlimit(Resource::Nofile);
    if l.current < l.maximum {
        let _ = setrlimit(
            Resource::Nofile,
            rustix::process::Rlimit {
                current: l.maximum,
                maximum: l.maximum,
            },
        );
    }
}
