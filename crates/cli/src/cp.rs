//! `cacheless cp`: copy files and trees. Each file is written under a temporary name beside its
//! destination, made durable, and renamed into place; mode and times are kept (with `-a` also
//! owner, extended attributes, ACLs and hard links).
//!
//! The walk runs on this thread and does every namespace operation in order (mkdir, symlinks,
//! the checks of `-n` and `-u`); each file is copied by a worker of the pool `extract` uses,
//! through the engine's `stage_copy` (a reflink where possible, small files written whole by
//! the shared `FileCreator`, holes kept). Small files are made durable in batches, with one
//! `syncfs` before a batch is renamed into place, instead of one fdatasync each; large files,
//! and every file under `--verify`, are fdatasync'ed one by one. Directories get their mode,
//! owner, xattrs and times after their contents, deepest first.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use cacheless::digest::Algo;
use cacheless::{
    open_parent, stage_copy, CopyOptions, CopyReport, CreateOptions, Error, ErrorKind, FileCreator, Method, Progress, RateLimit, ReadOptions, Reflink, Sparse,
    Staged, WriteOptions,
};
use cacheless_archive::extract::pool::{fd_plan, open_fds, Pool, Work};
use clap::Args;
use rustix::fs::{AtFlags, Mode as FMode, OFlags};

use crate::common::{parse_size, CommonOpts};
use crate::ui;

/// Arguments of `cacheless cp`.
#[derive(Args, Debug)]
pub struct CpArgs {
    /// Copy directories recursively (symlinks inside are copied as symlinks).
    #[arg(short = 'r', short_alias = 'R', long = "recursive")]
    pub recursive: bool,
    /// Archive: recursive, and keep symlinks as links, hard links within the tree as hard
    /// links, mode, times, ownership (when root), extended attributes and ACLs.
    #[arg(short = 'a', long)]
    pub archive: bool,
    /// Do not overwrite an existing destination file.
    #[arg(short = 'n', long, conflicts_with = "update")]
    pub no_clobber: bool,
    /// Skip a file whose destination is as new and the same size (resumes an interrupted copy).
    #[arg(short = 'u', long)]
    pub update: bool,
    /// Clone the data (FICLONE) where source and destination share a filesystem that can:
    /// auto falls back to copying, always fails where cloning is impossible, never copies.
    #[arg(long, value_name = "WHEN", default_value = "auto", default_missing_value = "always", num_args = 0..=1, require_equals = true)]
    pub reflink: Reflink,
    /// Holes: auto keeps a sparse source's holes, always also turns zero blocks into holes,
    /// never writes every byte.
    #[arg(long, value_name = "WHEN", default_value = "auto")]
    pub sparse: Sparse,
    /// Once each copy is durable, read it back from the disk (not the cache) and compare its
    /// checksum with the source's, hashed while it was read; a mismatch is an error, and the
    /// copy is removed before it takes the destination's name.
    #[arg(long)]
    pub verify: bool,
    /// Checksum for --verify (xxh3 detects corruption; sha256 or blake3 to keep the digests).
    #[arg(long, value_name = "ALGO", default_value = "xxh3")]
    pub verify_algo: Algo,
    /// Move at most RATE bytes per second (e.g. 200M), smoothed within each second; applies
    /// to the bytes read and written.
    #[arg(long, value_name = "RATE", value_parser = parse_size)]
    pub bwlimit: Option<u64>,
    /// Worker threads copying files (default: 2 per CPU, 4 to 16).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Do not make the copies durable before renaming them into place (faster, not crash-safe).
    #[arg(long)]
    pub no_sync: bool,
    /// Sources, then the destination (a directory when there are several sources).
    #[arg(required = true, num_args = 2..)]
    pub paths: Vec<PathBuf>,
}

fn times(m: &std::fs::Metadata) -> (SystemTime, SystemTime) {
    // st_*time_nsec is 0..1e9 (the kernel's timespec).
    let t = |s: i64, ns: i64| {
        let ns = u32::try_from(ns).unwrap_or(0);
        match u64::try_from(s) {
            Ok(s) => UNIX_EPOCH + Duration::new(s, ns),
            Err(_) => UNIX_EPOCH - Duration::new(s.unsigned_abs(), 0) + Duration::from_nanos(ns.into()),
        }
    };
    (t(m.atime(), m.atime_nsec()), t(m.mtime(), m.mtime_nsec()))
}

fn timestamps(m: &std::fs::Metadata) -> rustix::fs::Timestamps {
    let ts = |s: i64, ns: i64| rustix::fs::Timespec { tv_sec: s, tv_nsec: ns };
    rustix::fs::Timestamps { last_access: ts(m.atime(), m.atime_nsec()), last_modification: ts(m.mtime(), m.mtime_nsec()) }
}

/// Small files staged and waiting for the `syncfs` that makes them durable before renaming.
#[derive(Default)]
struct Batch {
    files: Vec<Staged>,
    bytes: u64,
}

/// Files per batch, and bytes per batch, before a syncfs and the renames.
const BATCH_FILES: usize = 512;
const BATCH_BYTES: u64 = 256 << 20;

/// One file for a worker.
struct FileJob {
    src: PathBuf,
    dst: PathBuf,
    dir: Arc<OwnedFd>,
    name: OsString,
    meta: std::fs::Metadata,
}

/// What the walk and the workers share.
struct Copier {
    ro: ReadOptions,
    wo: WriteOptions,
    co: CopyOptions,
    creator: FileCreator,
    progress: Arc<Progress>,
    verbose: bool,
    /// Batch small files (durable by one syncfs per batch).
    batched: bool,
    batch: Mutex<Batch>,
    reports: Mutex<Vec<CopyReport>>,
    reflinked: AtomicU64,
    verify_ns: AtomicU64,
}

impl Copier {
    fn fail(&self, e: &Error) {
        ui::item_error(&self.progress, e);
    }

    fn done(&self, r: CopyReport) {
        if self.verbose {
            let how = match r.method {
                Method::Reflink => "reflink (FICLONE, no data copied)".to_string(),
                m => format!(
                    "{m}: read {} ({}), write {} ({}){}",
                    r.read.mode,
                    r.read.reason,
                    r.write.decision.mode,
                    r.write.decision.reason,
                    r.write.backend.as_ref().map(|b| format!(", {} ({})", b.name(), b.reason)).unwrap_or_default()
                ),
            };
            let fb = r.reflink_fallback.as_ref().map(|f| format!("; no reflink: {f}")).unwrap_or_default();
            let v = r.verify.as_ref().map(|v| format!("; verified {} {} from {} in {:.3} s", v.algo, v.digest, v.read.mode, v.seconds)).unwrap_or_default();
            eprintln!("cacheless: {} -> {}: {how}{fb}{v}", r.src.display(), r.write.path.display());
        }
        if r.method == Method::Reflink {
            self.reflinked.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(v) = &r.verify {
            self.verify_ns.fetch_add(u64::try_from(Duration::from_secs_f64(v.seconds).as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
        }
        self.reports.lock().unwrap_or_else(|e| e.into_inner()).push(r);
    }

    fn copy(&self, job: FileJob) {
        if self.progress.is_cancelled() {
            return;
        }
        let mut wo = self.wo.clone();
        wo.permissions = Some(job.meta.mode() & 0o7777);
        let (at, mt) = times(&job.meta);
        wo.atime = Some(at);
        wo.mtime = Some(mt);
        let len = job.meta.len();
        let batch = self.batched && len <= self.co.small_file;
        if batch {
            wo.sync = false;
        }
        let staged = match stage_copy(&job.src, &job.dir, &job.name, &job.dst, &self.ro, &wo, &self.co, Some(&self.creator), &self.progress) {
            Ok(s) => s,
            Err(e) => return self.fail(&e),
        };
        if !batch {
            return match staged.commit() {
                Ok(r) => self.done(r),
                Err(e) => self.fail(&e),
            };
        }
        let full = {
            let mut b = self.batch.lock().unwrap_or_else(|e| e.into_inner());
            b.bytes += len;
            b.files.push(staged);
            if b.files.len() >= BATCH_FILES || b.bytes >= BATCH_BYTES {
                Some(std::mem::take(&mut *b))
            } else {
                None
            }
        };
        if let Some(b) = full {
            self.flush(b);
        }
    }

    /// Makes a batch durable with one syncfs, then renames its files into place. Its files are
    /// complete (each was written whole before it joined the batch), so an interrupted copy
    /// still keeps them, as it keeps every other file it finished.
    fn flush(&self, b: Batch) {
        if b.files.is_empty() {
            return;
        }
        if let Err(e) = rustix::fs::syncfs(&**b.files[0].dir()) {
            // Not durable: none of them takes its final name (dropping them removes them).
            for s in &b.files {
                self.fail(&Error::io("syncfs", s.path(), e.into()));
            }
            return;
        }
        // Written back now: what the small files' writes left in the cache can go.
        self.creator.drop_deferred();
        for s in b.files {
            match s.commit() {
                Ok(r) => self.done(r),
                Err(e) => self.fail(&e),
            }
        }
    }
}

impl Work for Copier {
    type Job = FileJob;
    fn run(&self, job: FileJob) {
        self.copy(job);
    }
    fn name(job: &FileJob) -> String {
        job.dst.display().to_string()
    }
    fn panicked(&self, name: String, message: String) {
        self.fail(&Error::new(ErrorKind::Io, "copy", name, format!("internal error while copying it ({message}); removed")));
    }
}

/// A directory whose metadata is set once its contents are done.
struct DirMeta {
    src: PathBuf,
    dst: PathBuf,
    meta: std::fs::Metadata,
}

/// The walk on the main thread.
struct Walker<'a> {
    args: &'a CpArgs,
    recursive: bool,
    copier: Arc<Copier>,
    pool: Option<Pool<Copier>>,
    owner: bool,
    dirs: Vec<DirMeta>,
    /// First destination of each multiply-linked source file (by device and inode), with -a.
    links: HashMap<(u64, u64), PathBuf>,
    /// Hard links to make once their first copy is in place: (first copy, new link).
    pending_links: Vec<(PathBuf, PathBuf)>,
    skipped: u64,
    hardlinks: u64,
}

impl Walker<'_> {
    /// Copies `src` (any type) to `dst`; per-item errors are reported and counted, not fatal.
    /// `dir` is `dst`'s parent, open, when the walk already holds it.
    fn any(&mut self, src: &Path, dst: &Path, dir: Option<&Arc<OwnedFd>>) {
        let progress = self.copier.progress.clone();
        let progress = &*progress;
        if progress.is_cancelled() {
            return;
        }
        // Symlinks are copied as links with -r; otherwise the file they name is copied.
        let lmeta = match std::fs::symlink_metadata(src) {
            Ok(m) => m,
            Err(e) => return ui::item_error(progress, &Error::io("stat", src, e)),
        };
        let meta = if lmeta.file_type().is_symlink() && !self.recursive {
            match std::fs::metadata(src) {
                Ok(m) => m,
                Err(e) => return ui::item_error(progress, &Error::io("stat", src, e)),
            }
        } else {
            lmeta
        };
        let ft = meta.file_type();
        if !ft.is_dir() && self.skip(&meta, dst) {
            self.skipped += 1;
            return;
        }
        let r = if ft.is_symlink() {
            self.symlink(src, dst, &meta)
        } else if ft.is_dir() {
            if self.recursive {
                self.dir(src, dst, meta);
                Ok(())
            } else {
                Err(Error::new(ErrorKind::InvalidInput, "copy", src, "is a directory (use -r to copy it)"))
            }
        } else if ft.is_file() {
            self.file(src, dst, meta, dir)
        } else {
            Err(Error::new(ErrorKind::InvalidInput, "copy", src, "not a regular file, directory or symlink; skipped"))
        };
        if let Err(e) = r {
            ui::item_error(progress, &e);
        }
    }

    /// -n: the destination exists; -u: it is as new as the source and the same size (a
    /// symlink: it names the same target).
    fn skip(&self, src: &std::fs::Metadata, dst: &Path) -> bool {
        if !self.args.no_clobber && !self.args.update {
            return false;
        }
        let Ok(d) = std::fs::symlink_metadata(dst) else { return false };
        if self.args.no_clobber {
            return true;
        }
        if !self.args.update {
            return false;
        }
        if src.file_type().is_symlink() || d.file_type().is_symlink() {
            return false;
        }
        d.is_file() && d.len() == src.len() && (d.mtime(), d.mtime_nsec()) >= (src.mtime(), src.mtime_nsec())
    }

    fn file(&mut self, src: &Path, dst: &Path, meta: std::fs::Metadata, dir: Option<&Arc<OwnedFd>>) -> Result<(), Error> {
        if self.args.archive && meta.nlink() > 1 {
            let key = (meta.dev(), meta.ino());
            if let Some(first) = self.links.get(&key) {
                self.pending_links.push((first.clone(), dst.to_path_buf()));
                return Ok(());
            }
            self.links.insert(key, dst.to_path_buf());
        }
        let mut dst = dst.to_path_buf();
        let (dir, name) = match dir {
            Some(d) => (d.clone(), dst.file_name().map(|n| n.to_os_string()).unwrap_or_default()),
            None => {
                // Like cp, write through a destination symlink given on the command line.
                if let Ok(l) = std::fs::symlink_metadata(&dst) {
                    if l.file_type().is_symlink() {
                        if let Ok(real) = std::fs::canonicalize(&dst) {
                            dst = real;
                        }
                    }
                }
                open_parent(&dst)?
            }
        };
        if let Some(p) = &self.pool {
            p.send(FileJob { src: src.to_path_buf(), dst, dir, name, meta });
        }
        Ok(())
    }

    fn symlink(&mut self, src: &Path, dst: &Path, meta: &std::fs::Metadata) -> Result<(), Error> {
        let target = std::fs::read_link(src).map_err(|e| Error::io("readlink", src, e))?;
        let tmp = dst.with_file_name(format!(".{}.cacheless-{}.tmp", dst.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(), std::process::id()));
        std::os::unix::fs::symlink(&target, &tmp).map_err(|e| Error::io("symlink", dst, e))?;
        let meta_done = (|| -> Result<(), Error> {
            if self.owner {
                let (u, g) = (rustix::fs::Uid::from_raw(meta.uid()), rustix::fs::Gid::from_raw(meta.gid()));
                rustix::fs::chownat(rustix::fs::CWD, &tmp, Some(u), Some(g), AtFlags::SYMLINK_NOFOLLOW).map_err(|e| Error::io("lchown", dst, e.into()))?;
            }
            if self.args.archive {
                rustix::fs::utimensat(rustix::fs::CWD, &tmp, &timestamps(meta), AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(|e| Error::io("set times", dst, e.into()))?;
            }
            Ok(())
        })();
        if let Err(e) = meta_done.and_then(|()| std::fs::rename(&tmp, dst).map_err(|e| Error::io("rename", dst, e))) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        self.copier.progress.file_done();
        Ok(())
    }

    fn dir(&mut self, src: &Path, dst: &Path, meta: std::fs::Metadata) {
        let progress = self.copier.progress.clone();
        if let (Ok(s), Ok(d)) = (std::fs::canonicalize(src), dst.parent().map(std::fs::canonicalize).unwrap_or(Ok(PathBuf::from(".")))) {
            if d.starts_with(&s) {
                return ui::item_error(
                    &progress,
                    &Error::new(ErrorKind::InvalidInput, "copy", dst, format!("cannot copy directory '{}' into itself", src.display())),
                );
            }
        }
        match std::fs::create_dir(dst) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dst.is_dir() => {}
            Err(e) => return ui::item_error(&progress, &Error::io("mkdir", dst, e)),
        }
        let fd = match rustix::fs::open(dst, OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW, FMode::empty()) {
            Ok(fd) => Arc::new(fd),
            Err(e) => return ui::item_error(&progress, &Error::io("open directory", dst, e.into())),
        };
        // Writable while we fill it; the source's mode and times are set after its contents.
        let _ = rustix::fs::fchmod(&*fd, FMode::from_raw_mode(0o700));
        match std::fs::read_dir(src) {
            Ok(rd) => {
                let mut names: Vec<_> = rd.filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
                names.sort();
                for n in names {
                    self.any(&src.join(&n), &dst.join(&n), Some(&fd));
                }
            }
            Err(e) => ui::item_error(&progress, &Error::io("read directory", src, e)),
        }
        self.dirs.push(DirMeta { src: src.to_path_buf(), dst: dst.to_path_buf(), meta });
    }

    /// Owner, xattrs, mode and times of one directory.
    fn dir_meta(&self, d: &DirMeta) -> Result<(), Error> {
        let fd = rustix::fs::open(&d.dst, OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW, FMode::empty())
            .map_err(|e| Error::io("open directory", &d.dst, e.into()))?;
        if self.owner {
            let (u, g) = (rustix::fs::Uid::from_raw(d.meta.uid()), rustix::fs::Gid::from_raw(d.meta.gid()));
            rustix::fs::fchown(&fd, Some(u), Some(g)).map_err(|e| Error::io("fchown", &d.dst, e.into()))?;
        }
        if self.args.archive {
            let s = rustix::fs::open(&d.src, OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC, FMode::empty())
                .map_err(|e| Error::io("open directory", &d.src, e.into()))?;
            cacheless::copy_xattrs(&s, &fd, &d.dst)?;
        }
        rustix::fs::fchmod(&fd, FMode::from_raw_mode(d.meta.mode() & 0o7777)).map_err(|e| Error::io("chmod", &d.dst, e.into()))?;
        rustix::fs::futimens(&fd, &timestamps(&d.meta)).map_err(|e| Error::io("set times", &d.dst, e.into()))
    }

    /// A hard link to the copy of a file met earlier in the tree, made under a temporary name
    /// and renamed over the destination.
    fn hardlink(&self, first: &Path, dst: &Path) -> Result<(), Error> {
        let tmp =
            dst.with_file_name(format!(".{}.cacheless-{}.link.tmp", dst.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(), std::process::id()));
        rustix::fs::linkat(rustix::fs::CWD, first, rustix::fs::CWD, &tmp, AtFlags::empty()).map_err(|e| Error::io("link", dst, e.into()))?;
        std::fs::rename(&tmp, dst).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Error::io("rename", dst, e)
        })
    }
}

fn total_bytes(p: &Path, recursive: bool) -> (u64, u64) {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_file() => (m.len(), 1),
        Ok(m) if m.is_dir() && recursive => std::fs::read_dir(p)
            .map(|rd| rd.filter_map(|e| e.ok()).map(|e| total_bytes(&e.path(), true)).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1)))
            .unwrap_or((0, 0)),
        Ok(m) if m.file_type().is_symlink() && !recursive => std::fs::metadata(p).map(|m| (m.len(), 1)).unwrap_or((0, 0)),
        _ => (0, 0),
    }
}

/// Samples the bytes done once a second from the first byte on, while a limit is set, for the
/// report: the limit is checked against our own counters.
struct Sampler {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<Vec<(f64, u64)>>>,
}

impl Sampler {
    fn start(progress: &Arc<Progress>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (progress.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            // Seconds count from the first byte moved, not from the start of the walk.
            while p.bytes() == 0 && !s.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(1));
            }
            let t0 = Instant::now();
            let mut v = vec![(0.0, p.bytes())];
            let mut next = Duration::from_secs(1);
            while !s.load(Ordering::Relaxed) {
                let now = t0.elapsed();
                if now >= next {
                    v.push((now.as_secs_f64(), p.bytes()));
                    next += Duration::from_secs(1);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            v.push((t0.elapsed().as_secs_f64(), p.bytes()));
            v
        });
        Sampler { stop, handle: Some(handle) }
    }

    fn finish(mut self) -> Vec<(f64, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().and_then(|h| h.join().ok()).unwrap_or_default()
    }
}

/// The fault injected between write and verification for the tests of `--verify`: with
/// `CACHELESS_TEST_CORRUPT_VERIFY=1`, the first byte of each copy is flipped on the disk once the
/// copy is durable. Not a documented option: tests only.
fn corrupt_hook() -> Option<cacheless::VerifyHook> {
    if std::env::var_os("CACHELESS_TEST_CORRUPT_VERIFY").as_deref() != Some(std::ffi::OsStr::new("1")) {
        return None;
    }
    Some(Arc::new(|f: &std::fs::File, _: &Path| {
        use std::os::unix::fs::FileExt;
        let mut b = [0u8; 1];
        if f.read_at(&mut b, 0)? == 1 {
            f.write_at(&[b[0] ^ 0xff], 0)?;
            f.sync_data()?;
        }
        Ok(())
    }))
}

pub fn run(args: &CpArgs, common: &CommonOpts) -> Result<ExitCode> {
    let t0 = Instant::now();
    let (srcs, dst) = args.paths.split_at(args.paths.len() - 1);
    let dst = &dst[0];
    let dst_is_dir = dst.is_dir();
    if srcs.len() > 1 && !dst_is_dir {
        eprintln!("cacheless: target '{}' is not a directory", dst.display());
        return Ok(ExitCode::from(1));
    }
    let recursive = args.recursive || args.archive;
    let progress = Arc::new(Progress::new());
    let signals = ui::Signals::register(&progress);
    if ui::Bar::wanted(common.json) {
        // Totals only feed the bar's ETA: no tree walk when nothing is drawn.
        for s in srcs {
            let (b, n) = total_bytes(s, recursive);
            progress.add_total_bytes(b);
            progress.add_total_files(n);
        }
    }
    let io = common.io();
    let is_root = rustix::process::geteuid().is_root();
    let owner = args.archive && is_root;
    let mut co = CopyOptions::new();
    co.reflink = args.reflink;
    co.sparse = args.sparse;
    co.verify = args.verify.then_some(args.verify_algo);
    co.rate = args.bwlimit.map(|r| Arc::new(RateLimit::new(r)));
    co.owner = owner;
    co.xattrs = args.archive;
    co.before_verify = corrupt_hook();
    let mut wo = WriteOptions::from(io.clone());
    wo.sync = !args.no_sync;
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(u64::MAX);
    let plan = fd_plan(nofile, open_fds(), args.threads.unwrap_or((cpus * 2).clamp(4, 16)).max(1));
    let copier = Arc::new(Copier {
        ro: ReadOptions::from(io),
        wo,
        co,
        creator: FileCreator::new(CreateOptions { mode: common.mode, sync: false, deferred_drops: plan.deferred, batch_writeback: 0 }),
        progress: progress.clone(),
        verbose: common.verbose,
        batched: !args.no_sync && !args.verify,
        batch: Mutex::new(Batch::default()),
        reports: Mutex::new(Vec::new()),
        reflinked: AtomicU64::new(0),
        verify_ns: AtomicU64::new(0),
    });
    let pool = Pool::new(plan.threads, plan.queue, &copier)?;
    let sampler = args.bwlimit.map(|_| Sampler::start(&progress));
    let mut w = Walker {
        args,
        recursive,
        copier: copier.clone(),
        pool: Some(pool),
        owner,
        dirs: Vec::new(),
        links: HashMap::new(),
        pending_links: Vec::new(),
        skipped: 0,
        hardlinks: 0,
    };
    let sync_s;
    {
        let _bar = ui::Bar::start(&progress, common.json, ui::Measure::Output);
        for s in srcs {
            let target = if dst_is_dir {
                match s.file_name() {
                    Some(n) => dst.join(n),
                    None => dst.join(s.canonicalize().ok().and_then(|c| c.file_name().map(|n| n.to_owned())).unwrap_or_default()),
                }
            } else {
                dst.clone()
            };
            w.any(s, &target, None);
        }
        if let Some(pool) = w.pool.take() {
            pool.finish();
        }
        let rest = std::mem::take(&mut *copier.batch.lock().unwrap_or_else(|e| e.into_inner()));
        let t_sync = Instant::now();
        copier.flush(rest);
        if !progress.is_cancelled() {
            for (first, link) in std::mem::take(&mut w.pending_links) {
                match w.hardlink(&first, &link) {
                    Ok(()) => {
                        w.hardlinks += 1;
                        progress.file_done();
                    }
                    Err(e) => ui::item_error(&progress, &e),
                }
            }
            for d in w.dirs.iter().rev() {
                if let Err(e) = w.dir_meta(d) {
                    ui::item_error(&progress, &e);
                }
            }
            // The renames and the directories' metadata.
            if !args.no_sync && (!w.dirs.is_empty() || w.hardlinks > 0) {
                let synced = rustix::fs::open(dst, OFlags::RDONLY | OFlags::CLOEXEC, FMode::empty()).and_then(rustix::fs::syncfs);
                if let Err(e) = synced {
                    ui::item_error(&progress, &Error::io("syncfs", dst, e.into()));
                }
            }
        }
        sync_s = t_sync.elapsed().as_secs_f64();
    }
    let samples = sampler.map(Sampler::finish).unwrap_or_default();
    if let Some(code) = signals.exit_code() {
        eprintln!("cacheless: interrupted; files not yet finished were removed");
        return Ok(code);
    }
    let reports = std::mem::take(&mut *copier.reports.lock().unwrap_or_else(|e| e.into_inner()));
    let verify_s = copier.verify_ns.load(Ordering::Relaxed) as f64 / 1e9;
    let reflinked = copier.reflinked.load(Ordering::Relaxed);
    let data_bytes: u64 = reports.iter().map(|r| r.data_bytes).sum();
    if common.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "files": reports,
                "copied": reports.len(),
                "reflinked": reflinked,
                "hardlinks": w.hardlinks,
                "skipped": w.skipped,
                "errors": progress.errors(),
                "bytes": progress.bytes(),
                "data_bytes": data_bytes,
                "elapsed_s": t0.elapsed().as_secs_f64(),
                "final_sync_s": sync_s,
                "verify_s": verify_s,
                "bwlimit": args.bwlimit,
                "progress_samples": samples,
            }))?
        );
    } else if common.verbose {
        let v = if args.verify { format!(", verify {verify_s:.2} s") } else { String::new() };
        eprintln!(
            "cacheless: copied {} (reflinked {reflinked}), hard links {}, skipped {}, errors {}, {} of data in {:.2} s{v}",
            reports.len(),
            w.hardlinks,
            w.skipped,
            progress.errors(),
            ui::size(data_bytes),
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(if progress.errors() > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
