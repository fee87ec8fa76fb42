//! Local paths to local paths: GNU cp for files, directories, symlinks, special files and hard
//! links, with the attributes GNU cp's options ask for.
//!
//! Each new file is written under a temporary name (or none) beside its destination, made
//! durable, and renamed into place; an existing destination is replaced the same way, by a
//! complete copy carrying what GNU cp's write in place would keep, or written in place where
//! only that keeps what can be seen (see [`CpOptions::inplace`]). The walk runs on the
//! caller's thread and makes GNU cp's decisions and every namespace operation in GNU's order;
//! each regular file is copied by a worker of the engine's [`pool`](cacheless::pool) (a reflink where
//! possible, small files written whole by a shared [`FileCreator`], holes kept). Small files
//! are made durable in batches, with one `syncfs` before a batch is renamed into place,
//! instead of one fsync each; large files, and every file under `verify`, are fsync'ed one by
//! one. Directories get their attributes after their contents, deepest first.
//!
//! Where each source lands follows GNU cp: into a destination directory under the source's
//! last name (`SRC` and `SRC/` alike; `SRC/.` names the directory itself), or with
//! `--parents` under its whole name; with a destination that is not a directory, the one
//! source becomes it.
//!
//! Per-item failures do not stop the job: each is counted in the [`Progress`], given to
//! [`CpOptions::on_error`], and the first is kept in the report.
//!
//! Layout: here the run; `walk` (the caller's thread), `files` (the workers), `samples` (the rate
//! samples of a limited copy).

mod files;
mod samples;
mod walk;

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cacheless::sys::{FMode, OFlags};

use crate::options::{CpOptions, CpReport, Deref, Note, OnCopied, OnError, Target};
use cacheless::caps::CapsMemo;
use cacheless::pool::fd_plan_now;
use cacheless::quote::quote;
use cacheless::sys;
use cacheless::Progress;
use cacheless::ReadOptions;
use cacheless::WriteOptions;
use cacheless::{CopyOptions, CopyReport, Ownership, Xattrs};
use cacheless::{CreateOptions, Durability, FileCreator};
use cacheless::{Error, ErrorKind, Result};
use files::{Copier, Rules};
use walk::{concat, last_component, At, Walker};

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

/// Where `src` lands when copied into the directory `dst` as GNU cp puts it: `dst/NAME` for
/// the source's last name (trailing slashes dropped; `SRC/.` and `SRC/..` name `dst/.`, the
/// directory itself); with `dst_is_dir` false, `dst` itself.
pub fn target(src: &Path, dst: &Path, dst_is_dir: bool) -> PathBuf {
    if !dst_is_dir {
        return dst.to_path_buf();
    }
    concat(dst, &last_component(src))
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

/// Opens the directory `p` for the copy to work in (read access where it has it: a syncfs
/// needs it; else search only). A probe as much as an open: where it fails, the destination is
/// not a directory to copy into (GNU's `target_directory_operand`), so it is no fault site.
fn open_target(p: &Path) -> std::io::Result<OwnedFd> {
    let open = |flags| sys::look(p, flags | OFlags::DIRECTORY | OFlags::CLOEXEC).map_err(std::io::Error::from);
    match open(OFlags::RDONLY) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => open(OFlags::PATH),
        r => r,
    }
}

/// Copies each of `srcs` to `dst` as `o` says (GNU cp's rules: see the module documentation),
/// counting in `progress` and stopping early when it is cancelled. Per-item failures are
/// counted and reported (see [`CpOptions::on_error`]), not returned; an error is returned
/// only when the job cannot start, worded as GNU cp words it: the target directory cannot be
/// opened (`-t`), several sources and a destination that is not a directory, no thread.
pub(crate) fn copy(srcs: &[PathBuf], dst: &Path, o: &CpOptions, progress: &Arc<Progress>) -> Result<CpReport> {
    let t0 = Instant::now();
    if srcs.is_empty() {
        return Err(Error::message(ErrorKind::InvalidInput, dst, "missing file operand"));
    }
    // GNU's do_copy: is the destination a directory to copy into?
    let (target_dir, new_dst) = match o.target {
        Target::File => (None, false),
        Target::Directory => match open_target(dst) {
            Ok(fd) => (Some(Arc::new(fd)), false),
            Err(e) => return Err(Error::io("target directory {}", dst, e)),
        },
        Target::Auto => match open_target(dst) {
            Ok(fd) => (Some(Arc::new(fd)), false),
            Err(e) => {
                if srcs.len() > 1 {
                    return Err(Error::io("target {}", dst, e));
                }
                (None, e.raw_os_error() == Some(sys::consts::ENOENT))
            }
        },
    };
    if o.parents && target_dir.is_none() {
        return Err(Error::message(ErrorKind::InvalidInput, dst, "with --parents, the destination must be a directory"));
    }
    // GNU: `cp --force --backup FILE FILE` copies FILE to its backup name, without a backup.
    let same_name_backup;
    let mut dst_path = dst.to_path_buf();
    let o = match &o.backup {
        Some((kind, suffix)) if o.force && target_dir.is_none() && !new_dst && srcs[0].as_os_str() == dst.as_os_str() && dst.is_file() => {
            dst_path = walk::backup_name(At::path(dst), *kind, suffix).map_err(|e| Error::io("cannot backup {}", dst, e))?.1;
            same_name_backup = CpOptions { backup: None, ..o.clone() };
            &same_name_backup
        }
        _ => o,
    };
    let dst = dst_path.as_path();
    let recursive = o.recursive;
    if o.count_totals {
        let mut seen = o.preserve.links.then(HashSet::new);
        for s in srcs {
            let (b, n) = totals(s, recursive, seen.as_mut());
            progress.add_total_bytes(b);
            progress.add_total_files(n);
        }
    }
    let root = sys::is_root();
    let umask = sys::umask().unwrap_or(0o022);
    let mut co = o.copy.clone();
    co.owner = Ownership::of(o.preserve.ownership, false);
    co.xattrs = Xattrs::of(o.preserve.xattr, false);
    co.same_checked = true;
    let mut wo = WriteOptions::from(o.io.clone());
    wo.durability = o.durability;
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let plan = fd_plan_now(o.threads.unwrap_or((cpus * 2).clamp(4, 16)).max(1));
    let sink = Arc::new(Sink {
        progress: progress.clone(),
        errors: AtomicU64::new(0),
        first: Mutex::new(None),
        on_error: o.on_error.clone(),
        on_copied: o.on_copied.clone(),
    });
    // Verified copies too: a batch's copies are read back after its syncfs (see `Staged::prefetch`),
    // or, under temporary names, each on its own before it joins the batch.
    let batched = o.durability.durable();
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
            durability: Durability::NamedAfterSync { write_back: Some(files::PLAIN_BATCH_BYTES) },
            deferred_drops: plan.deferred,
            batched_open: plan.batched_open,
            ..CreateOptions::new()
        })
    });
    let batch_files = if unnamed.is_some() { files::BATCH_FILES.min(plan.deferred) } else { files::BATCH_FILES };
    let copier = Arc::new(Copier {
        // The sources' filesystems are probed once for the whole copy, not once per file.
        ro: ReadOptions { caps_memo: Some(Arc::new(CapsMemo::new())), ..ReadOptions::from(o.io.clone()) },
        wo,
        co_plain: CopyOptions { plain_dir: true, ..co.clone() },
        co,
        creator: FileCreator::new(CreateOptions {
            mode: o.io.mode,
            durability: Durability::AtTheEnd { write_back: None },
            deferred_drops: plan.deferred,
            batched_open: plan.batched_open,
            ..CreateOptions::new()
        }),
        unnamed,
        batch_files,
        sink: sink.clone(),
        batched,
        batch: Mutex::default(),
        reports: Mutex::new(Vec::new()),
        not_listed: AtomicU64::new(0),
        copied: AtomicU64::new(0),
        data_bytes: AtomicU64::new(0),
        reflinked: AtomicU64::new(0),
        in_place: AtomicU64::new(0),
        verify_ns: AtomicU64::new(0),
        unsynced: AtomicBool::new(false),
        rules: Rules {
            preserve: o.preserve,
            no_preserve_mode: o.no_preserve_mode,
            umask,
            root,
            nofollow_src: o.deref() == Deref::Never,
            force: o.force,
            inplace: o.inplace,
            data: o.data(),
        },
        on_note: o.on_note.clone(),
    });
    let sampler = o.copy.rate.as_ref().map(|_| samples::Sampler::start(progress));
    let several = srcs.len() > 1 && target_dir.is_some();
    let mut w = Walker {
        o,
        deref: o.deref(),
        copier: copier.clone(),
        pool: None,
        pool_size: (plan.threads, plan.queue),
        queued: Vec::new(),
        dirs: Vec::new(),
        copied: HashMap::new(),
        pending_links: Vec::new(),
        src_seen: several.then(HashMap::new),
        dest_seen: several.then(HashMap::new),
        skipped: 0,
        hardlinks: 0,
        top: (PathBuf::new(), PathBuf::new()),
        umask,
        root,
        parent_attrs: Vec::new(),
        reprotect_later: Vec::new(),
        dispatched: 0,
        held: 0,
    };
    match &target_dir {
        Some(tfd) => {
            for s in srcs {
                if o.parents {
                    parents(&mut w, s, dst, tfd);
                    continue;
                }
                let base = last_component(s);
                let path = concat(dst, &base);
                w.top(s, At { dir: Some(tfd), name: &base, path: &path, plain: false }, 0);
            }
        }
        None => {
            w.top(&srcs[0], At::path(dst), if new_dst { -1 } else { 0 });
        }
    }
    w.send_queued();
    if let Some(pool) = w.pool.take() {
        pool.finish();
    }
    let t_sync = Instant::now();
    copier.flush(copier.rest());
    if !progress.is_cancelled() {
        finish(&mut w, dst, o.durability.durable());
    }
    let final_sync_s = t_sync.elapsed().as_secs_f64();
    let progress_samples = sampler.map(samples::Sampler::finish).unwrap_or_default();
    let files = std::mem::take(&mut *copier.reports.lock().unwrap_or_else(|e| e.into_inner()));
    let first_error = sink.first.lock().unwrap_or_else(|e| e.into_inner()).take();
    Ok(CpReport {
        transfers: Vec::new(),
        copied: copier.copied.load(Ordering::Relaxed),
        files_not_listed: copier.not_listed.load(Ordering::Relaxed),
        reflinked: copier.reflinked.load(Ordering::Relaxed),
        in_place: copier.in_place.load(Ordering::Relaxed),
        hardlinks: w.hardlinks,
        skipped: w.skipped,
        errors: sink.errors.load(Ordering::Relaxed),
        bytes: progress.bytes(),
        data_bytes: copier.data_bytes.load(Ordering::Relaxed),
        elapsed_s: t0.elapsed().as_secs_f64(),
        final_sync_s,
        verify_s: copier.verify_ns.load(Ordering::Relaxed) as f64 / 1e9,
        bwlimit: o.copy.rate.as_ref().map(|r| r.rate()),
        progress_samples,
        interrupted: progress.is_cancelled(),
        first_error,
        files,
    })
}

/// `--parents`: the source `s` under its whole name in the target directory, the directories
/// leading to it made as GNU cp makes them (each with its source's mode, and its owner and
/// times where preserved, once the copy is done).
fn parents(w: &mut Walker<'_>, s: &Path, dst: &Path, tfd: &Arc<OwnedFd>) {
    let raw = s.as_os_str().as_bytes();
    let end = raw.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
    let rel_start = raw.iter().position(|&b| b != b'/').unwrap_or(end).min(end);
    let rel = std::ffi::OsStr::from_bytes(&raw[rel_start..end]).to_os_string();
    let path = concat(dst, std::ffi::OsStr::from_bytes(&raw[..end]));
    match w.parent_dirs(s, &rel, dst, tfd) {
        Ok(made) => {
            let at = At { dir: Some(tfd), name: &rel, path: &path, plain: false };
            w.top(s, at, if made { 1 } else { 0 });
            // Their attributes once the files in them are in place (see `finish`).
            let attrs = std::mem::take(&mut w.parent_attrs);
            w.reprotect_later.push((dst.to_path_buf(), tfd.clone(), attrs));
        }
        Err(e) => w.copier.sink.fail(e),
    }
}

impl Walker<'_> {
    /// Makes the directories leading to `rel` under the target (GNU's
    /// `make_dir_parents_private`); returns whether the last one was made (its entry is then
    /// known to be new).
    fn parent_dirs(&mut self, src: &Path, rel: &OsString, dst: &Path, tfd: &Arc<OwnedFd>) -> Result<bool> {
        let raw = rel.as_bytes();
        let mut made = false;
        let mut i = 0;
        let o = self.o;
        self.parent_attrs.clear();
        while let Some(p) = raw[i..].iter().position(|&b| b == b'/') {
            let end = i + p;
            let part = std::ffi::OsStr::from_bytes(&raw[..end]);
            let src_part = {
                let sraw = src.as_os_str().as_bytes();
                let lead = sraw.len() - sraw.iter().rev().skip_while(|&&b| b == b'/').count();
                let _ = lead;
                let skip = sraw.iter().position(|&b| b != b'/').unwrap_or(0);
                PathBuf::from(std::ffi::OsStr::from_bytes(&sraw[..skip + end]))
            };
            let dpath = concat(dst, part);
            let missing = sys::statat(&**tfd, part, sys::AtFlags::empty());
            let missing = match missing {
                Ok(st) if st.st_mode & sys::consts::S_IFMT == sys::consts::S_IFDIR => {
                    made = false;
                    false
                }
                Ok(_) => return Err(Error::message(ErrorKind::AlreadyExists, &dpath, format!("{} exists but is not a directory", quote(&dpath)))),
                Err(_) => true,
            };
            if missing || o.preserve.ownership || o.preserve.mode || o.preserve.timestamps {
                let sm = match std::fs::metadata(&src_part) {
                    Ok(m) if m.is_dir() => m,
                    Ok(_) => return Err(Error::io("failed to get attributes of {}", &src_part, std::io::Error::from_raw_os_error(sys::consts::ENOTDIR))),
                    Err(e) => return Err(Error::io("failed to get attributes of {}", &src_part, e)),
                };
                let mut restore = None;
                if missing {
                    let smode = sm.mode();
                    let omitted = smode
                        & if o.preserve.ownership {
                            0o077
                        } else if o.preserve.mode {
                            0o022
                        } else {
                            0
                        };
                    let mkmode = if o.no_preserve_mode { 0o777 } else { smode } & 0o7777 & !omitted;
                    sys::DirFd::of(&**tfd).mkdir(part, mkmode).map_err(std::io::Error::from).map_err(|e| Error::io("cannot make directory {}", &dpath, e))?;
                    o.note(&Note::Parent { src: &src_part, dst: &dpath });
                    made = true;
                    let st = sys::DirFd::of(&**tfd).stat(part).map_err(|e| Error::io("failed to get attributes of {}", &dpath, e.into()))?;
                    if !o.preserve.mode {
                        let mut om = omitted;
                        if om & !st.st_mode != 0 {
                            om &= !self.umask;
                        }
                        if om & !st.st_mode != 0 || st.st_mode & 0o700 != 0o700 {
                            restore = Some((st.st_mode | om) & 0o7777);
                        }
                    }
                    if st.st_mode & 0o700 != 0o700 {
                        sys::chmodat(&**tfd, part, (st.st_mode | 0o700) & 0o7777, sys::AtFlags::empty())
                            .map_err(|e| Error::io("setting permissions for {}", &dpath, e.into()))?;
                    }
                }
                self.parent_attrs.push((part.to_os_string(), sm, restore));
            }
            i = end + 1;
            while i < raw.len() && raw[i] == b'/' {
                i += 1;
            }
        }
        Ok(made)
    }

    /// The directories `--parents` made or met get their attributes (GNU's `re_protect`):
    /// those leading to one source, `attrs`, under the target `dst` (open: `tfd`).
    fn reprotect(&self, dst: &Path, tfd: &Arc<OwnedFd>, attrs: Vec<(OsString, std::fs::Metadata, Option<u32>)>) {
        let o = self.o;
        for (part, sm, restore) in attrs.into_iter().rev() {
            let dpath = concat(dst, &part);
            if o.preserve.timestamps {
                if let Err(e) = sys::utimensat(&**tfd, &part, &walk::timestamps(&sm), sys::AtFlags::empty()) {
                    return self.copier.sink.fail(Error::io("failed to preserve times for {}", &dpath, e.into()));
                }
            }
            if o.preserve.ownership {
                let (u, g) = (sm.uid(), sm.gid());
                if let Err(e) = sys::DirFd::of(&**tfd).set_owner(&part, Some(u), Some(g)) {
                    if self.root || !matches!(e, sys::Errno::PERM | sys::Errno::INVAL) {
                        return self.copier.sink.fail(Error::io("failed to preserve ownership for {}", &dpath, e.into()));
                    }
                    let _ = sys::DirFd::of(&**tfd).set_owner(&part, None, Some(g));
                }
            }
            let mode = if o.preserve.mode { Some(sm.mode() & 0o7777) } else { restore };
            if let Some(m) = mode {
                if let Err(e) = sys::chmodat(&**tfd, &part, m, sys::AtFlags::empty()) {
                    return self.copier.sink.fail(Error::io("failed to preserve permissions for {}", &dpath, e.into()));
                }
            }
        }
    }
}

/// Once every file is in place: the hard links, the directories' metadata (deepest first), and
/// a syncfs that makes the renames and the metadata durable (those of batched files and
/// symlinks included).
fn finish(w: &mut Walker<'_>, dst: &Path, sync: bool) {
    let sink = w.copier.sink.clone();
    for l in std::mem::take(&mut w.pending_links) {
        match w.hardlink(&l) {
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
    for (dst, tfd, attrs) in std::mem::take(&mut w.reprotect_later) {
        w.reprotect(&dst, &tfd, attrs);
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
        let synced = sys::open(at, OFlags::RDONLY | OFlags::CLOEXEC, FMode::empty())
            .map_err(std::io::Error::from)
            .map_err(|e| Error::io("open", at, e))
            .and_then(|fd| sys::syncfs(std::os::fd::AsFd::as_fd(&fd)).map_err(|e| Error::io("syncfs", dst, e)));
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
