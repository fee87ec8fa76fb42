//! The tree copy: files, directories, symlinks and (in archive mode) hard links, with their
//! mode and times (in archive mode also owner, extended attributes and ACLs). What `cacheless
//! cp` and Python's `copy` of a directory run.
//!
//! Each file is written under a temporary name beside its destination, made durable, and
//! renamed into place. The walk runs on the caller's thread and does every namespace operation
//! in order (mkdir, symlinks, the checks of `no_clobber` and `update`); each file is copied by a
//! worker of the [`pool`](crate::pool), through [`stage_copy`](crate::stage_copy) (a reflink
//! where possible, small files written whole by a shared [`FileCreator`], holes kept). Small
//! files are made durable in batches, with one `syncfs` before a batch is renamed into place,
//! instead of one fsync each; large files, and every file under `verify`, are fsync'ed
//! one by one. Directories get their mode, owner, xattrs and times after their contents,
//! deepest first.
//!
//! Where each source lands follows GNU cp: into a destination directory under the source's
//! last name (`SRC` and `SRC/` alike), except that a source naming a directory's contents
//! (`SRC/.`) lands on the destination itself; with a destination that is not a directory, the
//! source becomes it.
//!
//! Per-item failures do not stop the job: each is counted in the [`Progress`], given to
//! [`TreeOptions::on_error`], and the first is kept in the report.
//!
//! Layout: `options` (what is asked and reported), here the run; `walk` (the caller's thread), `files`
//! (the workers), `samples` (the rate samples of a limited copy).

mod files;
mod options;
mod samples;
mod walk;

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rustix::fs::{Mode as FMode, OFlags};

use crate::caps::CapsMemo;
use crate::copy::{CopyOptions, CopyReport};
use crate::create::{CreateOptions, FileCreator};
use crate::error::{Error, ErrorKind, Result};
use crate::fault::Site;
use crate::pool::{fd_plan, open_fds, Pool};
use crate::progress::Progress;
use crate::rate::RateLimit;
use crate::read::ReadOptions;
use crate::sys::call;
use crate::write::WriteOptions;
use files::Copier;
pub use options::{OnCopied, OnError, TreeOptions, TreeReport};
use walk::Walker;

/// Files a batch must be able to hold for its small files to wait without a name (each holds
/// a descriptor): below that, a syncfs per few files would cost more than the renames save.
const MIN_UNNAMED_BATCH: usize = 64;

/// Where failures and finished files go: counted, kept (the first failure) and told.
pub(crate) struct Sink {
    progress: Arc<Progress>,
    errors: AtomicU64,
    first: Mutex<Option<Error>>,
    on_error: Option<OnError>,
    on_copied: Option<OnCopied>,
}

impl Sink {
    fn fail(&self, e: Error) {
        self.progress.error();
        self.errors.fetch_add(1, Ordering::Relaxed);
        if let Some(f) = &self.on_error {
            f(&e);
        }
        let mut first = self.first.lock().unwrap_or_else(|p| p.into_inner());
        if first.is_none() {
            *first = Some(e);
        }
    }

    fn copied(&self, r: &CopyReport) {
        if let Some(f) = &self.on_copied {
            f(r);
        }
    }
}

/// Where `src` lands when copied to `dst` (see the module documentation).
pub fn target(src: &Path, dst: &Path, dst_is_dir: bool) -> PathBuf {
    if !dst_is_dir {
        return dst.to_path_buf();
    }
    // `Path` drops a trailing `.` component (`SRC/.` has the file name `SRC`): look at the bytes.
    let raw = src.as_os_str().as_encoded_bytes();
    let end = raw.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
    let last = raw[..end].rsplit(|&b| b == b'/').next().unwrap_or_default();
    if last == b"." {
        return dst.to_path_buf();
    }
    match src.file_name() {
        Some(n) => dst.join(n),
        None => dst.join(src.canonicalize().ok().and_then(|c| c.file_name().map(|n| n.to_owned())).unwrap_or_default()),
    }
}

/// Bytes and files under `p` (the files a copy of it would write; in archive mode a file with
/// several names within the tree once, as it is copied once). `seen` holds the multiply-linked
/// files met so far, by device and inode, when they are counted once.
fn totals(p: &Path, recursive: bool, seen: Option<&mut HashSet<(u64, u64)>>) -> (u64, u64) {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_file() => {
            let again = m.nlink() > 1 && seen.is_some_and(|s| !s.insert((m.dev(), m.ino())));
            if again {
                (0, 0)
            } else {
                (m.len(), 1)
            }
        }
        Ok(m) if m.is_dir() && recursive => {
            let Ok(rd) = std::fs::read_dir(p) else { return (0, 0) };
            let mut seen = seen;
            rd.filter_map(|e| e.ok()).map(|e| totals(&e.path(), true, seen.as_deref_mut())).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
        }
        Ok(m) if m.file_type().is_symlink() && !recursive => std::fs::metadata(p).map(|m| (m.len(), 1)).unwrap_or((0, 0)),
        _ => (0, 0),
    }
}

/// Copies each of `srcs` to `dst` (a directory when there are several) as `o` says, counting
/// in `progress` and stopping early when it is cancelled. Per-item failures are counted and
/// reported (see [`TreeOptions::on_error`]), not returned; an error is returned only when the
/// job cannot start (several sources and a destination that is not a directory, no thread).
pub fn copy_tree(srcs: &[PathBuf], dst: &Path, o: &TreeOptions, progress: &Arc<Progress>) -> Result<TreeReport> {
    let t0 = Instant::now();
    let dst_is_dir = dst.is_dir();
    if srcs.is_empty() {
        return Err(Error::new(ErrorKind::InvalidInput, "copy", dst, "no source to copy"));
    }
    if srcs.len() > 1 && !dst_is_dir {
        return Err(Error::new(ErrorKind::InvalidInput, "copy", dst, "target is not a directory (there are several sources)"));
    }
    let recursive = o.recursive || o.archive;
    if o.count_totals {
        let mut seen = o.archive.then(HashSet::new);
        for s in srcs {
            let (b, n) = totals(s, recursive, seen.as_mut());
            progress.add_total_bytes(b);
            progress.add_total_files(n);
        }
    }
    let owner = o.archive && rustix::process::geteuid().is_root();
    let mut co = CopyOptions::new();
    co.reflink = o.reflink;
    co.sparse = o.sparse;
    co.verify = o.verify;
    co.rate = o.bwlimit.map(|r| Arc::new(RateLimit::new(r)));
    co.owner = owner;
    co.xattrs = o.archive;
    co.before_verify = o.before_verify.clone();
    let mut wo = WriteOptions::from(o.io.clone());
    wo.sync = o.sync;
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(u64::MAX);
    let plan = fd_plan(nofile, open_fds(), o.threads.unwrap_or((cpus * 2).clamp(4, 16)).max(1));
    let sink = Arc::new(Sink {
        progress: progress.clone(),
        errors: AtomicU64::new(0),
        first: Mutex::new(None),
        on_error: o.on_error.clone(),
        on_copied: o.on_copied.clone(),
    });
    // Verified copies too: a batch's copies are read back after its syncfs (see `Staged::prefetch`),
    // or, under temporary names, each on its own before it joins the batch.
    let batched = o.sync;
    // A batch's small files wait for its syncfs without a name (O_TMPFILE), each holding its
    // descriptor until linked: where the descriptors allow a batch of a useful size. Elsewhere
    // they wait under temporary names, closed, and are renamed.
    // Their data is written plainly (under auto) and left dirty for the batch's syncfs, which
    // writes the batch back in a few large requests and after which each file's pages are
    // dropped as it is linked: where an uncached write of each would start a writeback of its
    // own, a device request or more per small file.
    let unnamed = (batched && plan.deferred >= MIN_UNNAMED_BATCH).then(|| {
        FileCreator::new(CreateOptions {
            mode: o.io.mode,
            sync: false,
            deferred_drops: plan.deferred,
            batch_writeback: files::PLAIN_BATCH_BYTES,
            publish_after_sync: true,
        })
    });
    let batch_files = if unnamed.is_some() { files::BATCH_FILES.min(plan.deferred) } else { files::BATCH_FILES };
    let copier = Arc::new(Copier {
        // The sources' filesystems are probed once for the whole copy, not once per file.
        ro: ReadOptions { caps_memo: Some(Arc::new(CapsMemo::new())), ..ReadOptions::from(o.io.clone()) },
        wo,
        co_plain: CopyOptions { plain_dir: true, ..co.clone() },
        co,
        creator: FileCreator::new(CreateOptions { mode: o.io.mode, sync: false, deferred_drops: plan.deferred, batch_writeback: 0, publish_after_sync: false }),
        unnamed,
        batch_files,
        sink: sink.clone(),
        batched,
        batch: Mutex::default(),
        reports: Mutex::new(Vec::new()),
        reflinked: AtomicU64::new(0),
        verify_ns: AtomicU64::new(0),
        unsynced: AtomicBool::new(false),
    });
    let pool = Pool::new(plan.threads, plan.queue, &copier)?;
    let sampler = o.bwlimit.map(|_| samples::Sampler::start(progress));
    let mut w = Walker {
        o,
        recursive,
        copier: copier.clone(),
        pool: Some(pool),
        queued: Vec::new(),
        owner,
        dirs: Vec::new(),
        links: HashMap::new(),
        pending_links: Vec::new(),
        skipped: 0,
        hardlinks: 0,
    };
    for s in srcs {
        w.any(s, &target(s, dst, dst_is_dir), None);
    }
    w.send_queued();
    if let Some(pool) = w.pool.take() {
        pool.finish();
    }
    let t_sync = Instant::now();
    copier.flush(copier.rest());
    if !progress.is_cancelled() {
        finish(&mut w, dst, o.sync);
    }
    let final_sync_s = t_sync.elapsed().as_secs_f64();
    let progress_samples = sampler.map(samples::Sampler::finish).unwrap_or_default();
    let files = std::mem::take(&mut *copier.reports.lock().unwrap_or_else(|e| e.into_inner()));
    let first_error = sink.first.lock().unwrap_or_else(|e| e.into_inner()).take();
    Ok(TreeReport {
        copied: files.len() as u64,
        reflinked: copier.reflinked.load(Ordering::Relaxed),
        hardlinks: w.hardlinks,
        skipped: w.skipped,
        errors: sink.errors.load(Ordering::Relaxed),
        bytes: progress.bytes(),
        data_bytes: files.iter().map(|r| r.data_bytes).sum(),
        elapsed_s: t0.elapsed().as_secs_f64(),
        final_sync_s,
        verify_s: copier.verify_ns.load(Ordering::Relaxed) as f64 / 1e9,
        bwlimit: o.bwlimit,
        progress_samples,
        interrupted: progress.is_cancelled(),
        first_error,
        files,
    })
}

/// Once every file is in place: the hard links, the directories' metadata (deepest first), and
/// a syncfs that makes the renames and the metadata durable (those of batched files and
/// symlinks included).
fn finish(w: &mut Walker<'_>, dst: &Path, sync: bool) {
    let sink = w.copier.sink.clone();
    for (first, link) in std::mem::take(&mut w.pending_links) {
        match w.hardlink(&first, &link) {
            Ok(()) => {
                w.hardlinks += 1;
                sink.progress.file_done();
            }
            Err(e) => sink.fail(e),
        }
    }
    for d in w.dirs.iter().rev() {
        if let Err(e) = w.dir_meta(d) {
            sink.fail(e);
        }
    }
    // Batched files and symlinks were renamed into place without a directory fsync: the
    // syncfs makes those renames durable too, also where no folder was made (one small file).
    if sync && (!w.dirs.is_empty() || w.hardlinks > 0 || w.copier.unsynced.load(Ordering::Relaxed)) {
        // Any descriptor of the filesystem will do: the destination when it is a folder, else
        // the folder it is in (a symlink copied as one may point anywhere, or nowhere).
        let dst_dir = std::fs::symlink_metadata(dst).is_ok_and(|m| m.is_dir());
        let at = match dst.parent() {
            Some(p) if !dst_dir => {
                if p.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    p
                }
            }
            _ => dst,
        };
        let synced = call(Site::Open, || rustix::fs::open(at, OFlags::RDONLY | OFlags::CLOEXEC, FMode::empty()))
            .map_err(|e| Error::io("open", at, e))
            .and_then(|fd| crate::sys::syncfs(std::os::fd::AsFd::as_fd(&fd)).map_err(|e| Error::io("syncfs", dst, e)));
        if let Err(e) = synced {
            sink.fail(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::target;
    use std::path::{Path, PathBuf};

    #[test]
    fn sources_land_where_gnu_cp_puts_them() {
        let d = Path::new("/tmp/dst");
        // Into an existing directory: under the source's last name, trailing slashes or not.
        assert_eq!(target(Path::new("a/src"), d, true), PathBuf::from("/tmp/dst/src"));
        assert_eq!(target(Path::new("a/src/"), d, true), PathBuf::from("/tmp/dst/src"));
        assert_eq!(target(Path::new("a/src//"), d, true), PathBuf::from("/tmp/dst/src"));
        // A directory's contents: onto the directory itself.
        assert_eq!(target(Path::new("a/src/."), d, true), PathBuf::from("/tmp/dst"));
        assert_eq!(target(Path::new("a/src/./"), d, true), PathBuf::from("/tmp/dst"));
        assert_eq!(target(Path::new("."), d, true), PathBuf::from("/tmp/dst"));
        // A name that only ends in a dot is a name.
        assert_eq!(target(Path::new("a/src."), d, true), PathBuf::from("/tmp/dst/src."));
        assert_eq!(target(Path::new("a/.src"), d, true), PathBuf::from("/tmp/dst/.src"));
        // A destination that is not a directory: the source becomes it.
        for s in ["a/src", "a/src/", "a/src/."] {
            assert_eq!(target(Path::new(s), d, false), PathBuf::from("/tmp/dst"), "{s}");
        }
    }
}
