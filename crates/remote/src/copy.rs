//! `cp` with URLs as a job the command line and Python share: operands mapped to transfers as
//! `aws s3 cp` maps them (a prefix to a folder, a folder to a prefix), run `concurrency` files at
//! a time, each with its own ranges or parts in flight, all in one memory budget.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use cacheless::{Error, ErrorKind, IoOptions, Progress, Result, WriteOptions};
use serde::Serialize;

use crate::client::{ObjectInfo, Remote, RemoteOptions};
use crate::location::{url_of, Location};
use crate::transfer::{download_file, upload_file, verify_download};

/// A callback with a failed transfer, or a finished one.
pub type OnError = Arc<dyn Fn(&Error) + Send + Sync>;
/// A callback with a finished transfer.
pub type OnDone = Arc<dyn Fn(&Transfer) + Send + Sync>;

/// How [`copy`] runs.
#[derive(Clone)]
pub struct CopyOptions {
    /// Prefixes and folders are copied whole (`-r`).
    pub recursive: bool,
    /// Skip a destination that exists (`-n`).
    pub no_clobber: bool,
    /// Skip a destination with the same size and a time no older than the source's (`-u`).
    pub update: bool,
    /// Check against the server's ETag (see [`crate::verify_download`], [`crate::upload_file`]).
    pub verify: bool,
    /// Make downloaded files durable before naming them.
    pub sync: bool,
    /// The engine's settings and the memory budget.
    pub io: IoOptions,
    /// The transfers' settings.
    pub remote: RemoteOptions,
    /// Called with each failed transfer, the job going on with the next; without it the job
    /// stops at the first.
    pub on_error: Option<OnError>,
    /// Called with each finished or skipped transfer.
    pub on_done: Option<OnDone>,
}

impl CopyOptions {
    /// Defaults: one object or file, durable, not verified.
    pub fn new(io: IoOptions, remote: RemoteOptions) -> CopyOptions {
        CopyOptions { recursive: false, no_clobber: false, update: false, verify: false, sync: true, io, remote, on_error: None, on_done: None }
    }
}

/// One file's transfer, done or skipped.
#[derive(Debug, Clone, Serialize)]
pub struct Transfer {
    /// Where from (a URL or a path).
    pub source: String,
    /// Where to.
    pub destination: String,
    /// Whether a download (else an upload).
    pub download: bool,
    /// Bytes moved.
    pub bytes: u64,
    /// Skipped by `no_clobber` or `update`.
    pub skipped: bool,
    /// Ranged GETs (downloads) or parts (uploads; 0 for one PUT).
    pub requests: u64,
    /// Whether the server answered ranges (downloads).
    pub ranged: bool,
    /// The local file's I/O mode, and why.
    pub mode: Option<String>,
    /// Why that mode.
    pub reason: Option<String>,
    /// The object's ETag.
    pub etag: Option<String>,
    /// With `verify`: checked (true), or not checkable (`None`: a multipart upload's ETag).
    pub verified: Option<bool>,
    /// Seconds it took.
    pub seconds: f64,
}

/// What [`copy`] did.
#[derive(Debug, Clone, Serialize)]
pub struct CopyReport {
    /// The transfers, in the operands' order.
    pub transfers: Vec<Transfer>,
    /// Bytes moved.
    pub bytes: u64,
    /// Transfers that failed.
    pub errors: u64,
    /// Seconds from start to end.
    pub elapsed_s: f64,
}

fn text(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn is_remote(p: &Path) -> bool {
    url_of(p).is_some()
}

/// One client per bucket or origin, made when first needed.
struct Clients {
    opts: RemoteOptions,
    made: Vec<Remote>,
}

impl Clients {
    fn of(&mut self, loc: &Location) -> Result<&Remote> {
        let i = match self.made.iter().position(|r| r.serves(loc)) {
            Some(i) => i,
            None => {
                self.made.push(Remote::connect(loc, &self.opts)?);
                self.made.len() - 1
            }
        };
        Ok(&self.made[i])
    }
}

/// Copies `srcs` to `dst`, where either side is a URL: downloads (every source a URL in one
/// bucket or origin), or uploads (every source local). Stops with an `Interrupted` error when
/// `cancel` is set; nothing unfinished is left under a final name or key.
pub fn copy(srcs: &[PathBuf], dst: &Path, opts: &CopyOptions, cancel: &AtomicBool, progress: &Progress) -> Result<CopyReport> {
    let start = Instant::now();
    let mut clients = Clients { opts: opts.remote.clone(), made: Vec::new() };
    let jobs = plan(srcs, dst, opts, &mut clients, progress)?;
    let mut transfers = Vec::new();
    let errors = AtomicUsize::new(0);
    if let Some(first) = jobs.first() {
        let loc = match first {
            Job::Download(i, _) => i.location.clone(),
            Job::Upload(_, l) => l.clone(),
        };
        let remote = clients.of(&loc)?;
        let workers = remote.options().concurrency.clamp(1, jobs.len());
        let next = AtomicUsize::new(0);
        let done = Mutex::new(Vec::new());
        let failed: Mutex<Option<Error>> = Mutex::new(None);
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = jobs.get(i) else { break };
                    if cancel.load(Ordering::Relaxed) || failed.lock().unwrap_or_else(PoisonError::into_inner).is_some() {
                        break;
                    }
                    let r = match job {
                        Job::Download(info, to) => one_download(opts, remote, info, to, cancel, progress),
                        Job::Upload(from, to) => one_upload(opts, remote, from, to, cancel, progress),
                    };
                    match r {
                        Ok(t) => {
                            if let Some(f) = &opts.on_done {
                                f(&t);
                            }
                            done.lock().unwrap_or_else(PoisonError::into_inner).push((i, t));
                        }
                        Err(e) if e.kind() == ErrorKind::Interrupted => break,
                        Err(e) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            match &opts.on_error {
                                Some(f) => f(&e),
                                None => {
                                    failed.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(e);
                                }
                            }
                        }
                    }
                });
            }
        });
        if let Some(e) = failed.into_inner().unwrap_or_else(PoisonError::into_inner) {
            return Err(e);
        }
        let mut done = done.into_inner().unwrap_or_else(PoisonError::into_inner);
        done.sort_by_key(|(i, _)| *i);
        transfers = done.into_iter().map(|(_, t)| t).collect();
    }
    if cancel.load(Ordering::Relaxed) {
        return Err(Error::new(ErrorKind::Interrupted, "copy", dst, "interrupted"));
    }
    let bytes = transfers.iter().map(|t| t.bytes).sum();
    Ok(CopyReport { transfers, bytes, errors: errors.into_inner() as u64, elapsed_s: start.elapsed().as_secs_f64() })
}

/// One file's transfer.
enum Job {
    Download(ObjectInfo, PathBuf),
    Upload(PathBuf, Location),
}

/// The transfers the operands ask for, as `aws s3 cp` maps them: a folder's files under a
/// prefix, a prefix's objects under a folder.
fn plan(srcs: &[PathBuf], dst_path: &Path, c: &CopyOptions, clients: &mut Clients, progress: &Progress) -> Result<Vec<Job>> {
    let usage = |m: String| Error::new(ErrorKind::InvalidInput, "cp", dst_path, m);
    let mut jobs = Vec::new();
    if is_remote(dst_path) {
        let dst = Location::parse(&text(dst_path))?;
        if let Some(s) = srcs.iter().find(|s| is_remote(s)) {
            return Err(usage(format!("{} to {}: copying between URLs is not supported; download, then upload", text(s), dst)));
        }
        if srcs.len() > 1 && !dst.is_prefix() {
            return Err(usage(format!("{dst}: several sources need a prefix (a URL ending in /)")));
        }
        for s in srcs {
            let meta = std::fs::metadata(s).map_err(|e| Error::io("stat", s, e))?;
            if meta.is_dir() {
                if !c.recursive {
                    let e = Error::new(ErrorKind::InvalidInput, "cp", s, "-r not specified; omitting directory");
                    progress.error();
                    match &c.on_error {
                        Some(f) => f(&e),
                        None => return Err(e),
                    }
                    continue;
                }
                for (file, rel) in walk(s)? {
                    jobs.push(Job::Upload(file, dst.with_key(format!("{}{rel}", prefix_of(&dst)))));
                }
            } else {
                let key = if dst.is_prefix() {
                    let name = s.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                    format!("{}{name}", prefix_of(&dst))
                } else {
                    dst.key().to_string()
                };
                jobs.push(Job::Upload(s.clone(), dst.with_key(key)));
            }
        }
        return Ok(jobs);
    }
    // Downloads: every source is a URL, all in one bucket or origin.
    if let Some(s) = srcs.iter().find(|s| !is_remote(s)) {
        return Err(usage(format!("{}: a local source with a URL among the sources: copy them in two commands", text(s))));
    }
    let dst_dir = dst_path.is_dir() || text(dst_path).ends_with('/');
    if srcs.len() > 1 && !dst_dir {
        return Err(Error::new(ErrorKind::InvalidInput, "cp", dst_path, format!("target {} is not a directory", cacheless::quote::quote(dst_path))));
    }
    let mut first: Option<Location> = None;
    for s in srcs {
        let src = Location::parse(&text(s))?;
        if !first.get_or_insert_with(|| src.clone()).same_store(&src) {
            return Err(usage(format!("{src}: the sources are in more than one bucket or server: copy them in one command each")));
        }
        if src.is_prefix() {
            if !c.recursive {
                return Err(usage(format!("{src}: a prefix needs -r (or name an object: a URL not ending in /)")));
            }
            let objects = clients.of(&src)?.list(&src)?;
            if objects.is_empty() {
                return Err(Error::new(ErrorKind::NotFound, "list", src.to_string(), "no object under this prefix"));
            }
            let base = prefix_of(&src);
            for o in objects {
                // Zero-byte keys ending in / are folder markers, not files.
                let Some(rel) = o.location.key().strip_prefix(&base).filter(|r| !r.is_empty() && !r.ends_with('/')) else { continue };
                let to = dst_path.join(rel);
                jobs.push(Job::Download(o, to));
            }
        } else {
            let to = if dst_dir { dst_path.join(src.file_name().unwrap_or_else(|| "index.html".into())) } else { dst_path.to_path_buf() };
            jobs.push(Job::Download(clients.of(&src)?.head(&src)?, to));
        }
    }
    Ok(jobs)
}

/// `loc`'s key as a prefix: empty, or ending in one `/`.
fn prefix_of(loc: &Location) -> String {
    let k = loc.key().trim_end_matches('/');
    if k.is_empty() {
        String::new()
    } else {
        format!("{k}/")
    }
}

/// The regular files under `dir` (symbolic links followed, as `aws s3 cp` does), with their
/// paths relative to it (`/`-separated), in name order.
fn walk(dir: &Path) -> Result<Vec<(PathBuf, String)>> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((d, rel)) = stack.pop() {
        let mut names: Vec<_> = std::fs::read_dir(&d).map_err(|e| Error::io("read directory", &d, e))?.filter_map(|e| e.ok().map(|e| e.file_name())).collect();
        names.sort();
        for n in names.into_iter().rev() {
            let p = d.join(&n);
            let r = format!("{rel}{}", n.to_string_lossy());
            let m = std::fs::metadata(&p).map_err(|e| Error::io("stat", &p, e))?;
            if m.is_dir() {
                stack.push((p, format!("{r}/")));
            } else if m.is_file() {
                out.push((p, r));
            }
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

/// A transfer that was skipped.
fn skipped(source: String, destination: String, download: bool, etag: Option<String>) -> Transfer {
    Transfer {
        source,
        destination,
        download,
        bytes: 0,
        skipped: true,
        requests: 0,
        ranged: false,
        mode: None,
        reason: None,
        etag,
        verified: None,
        seconds: 0.0,
    }
}

fn one_download(c: &CopyOptions, remote: &Remote, info: &ObjectInfo, to: &Path, cancel: &AtomicBool, progress: &Progress) -> Result<Transfer> {
    let source = info.location.to_string();
    if let Ok(m) = std::fs::metadata(to) {
        // The same version: the ETag the file landed with, or where it has none (landed by
        // another tool, or on a filesystem without user attributes), its size and time.
        let same = m.len() == info.size
            && match (crate::transfer::landed_etag(to), &info.etag) {
                (Some(have), Some(want)) => have == *want,
                _ => m.modified().is_ok_and(|t| t >= info.last_modified),
            };
        if c.no_clobber || (c.update && same) {
            return Ok(skipped(source, text(to), true, info.etag.clone()));
        }
    }
    if let Some(parent) = to.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| Error::io("create directory", parent, e))?;
    }
    progress.add_total_bytes(info.size);
    let mut wo = WriteOptions::from(c.io.clone());
    wo.sync = c.sync;
    let r = download_file(remote, info, to, &wo, cancel, Some(progress))?;
    let verified = if c.verify { verify_download(to, info, &c.io)?.map(|_| true) } else { None };
    Ok(Transfer {
        source,
        destination: text(to),
        download: true,
        bytes: r.fetch.bytes,
        skipped: false,
        requests: r.fetch.ranges,
        ranged: r.fetch.ranged,
        mode: Some(r.write.decision.mode.to_string()),
        reason: Some(r.write.decision.reason.to_string()),
        etag: info.etag.clone(),
        verified,
        seconds: r.fetch.elapsed_s,
    })
}

fn one_upload(c: &CopyOptions, remote: &Remote, from: &Path, dst: &Location, cancel: &AtomicBool, progress: &Progress) -> Result<Transfer> {
    let meta = std::fs::metadata(from);
    if c.no_clobber || c.update {
        match remote.head(dst) {
            Ok(existing) => {
                let m = match meta {
                    Ok(ref m) => m,
                    Err(e) => return Err(Error::io("stat", from, e)),
                };
                let same = m.len() == existing.size && m.modified().is_ok_and(|t| existing.last_modified >= t);
                if c.no_clobber || same {
                    return Ok(skipped(text(from), dst.to_string(), false, existing.etag));
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    if let Ok(m) = meta {
        progress.add_total_bytes(m.len());
    }
    let r = upload_file(remote, from, dst, &c.io, c.verify, cancel, Some(progress))?;
    Ok(Transfer {
        source: text(from),
        destination: dst.to_string(),
        download: false,
        bytes: r.bytes,
        skipped: false,
        requests: r.parts,
        ranged: false,
        mode: Some(r.read.mode.to_string()),
        reason: Some(r.read.reason.to_string()),
        etag: r.etag,
        verified: r.verified.map(|_| true),
        seconds: r.elapsed_s,
    })
}
