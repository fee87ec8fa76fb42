//! Files to and from objects: a download lands through a [`Writer`]'s positioned writes
//! (O_DIRECT where the file's filesystem allows) under a temporary name until complete and
//! durable; an upload reads the file with the engine's [`Reader`] and sends it as one PUT or
//! as a multipart upload that is completed only when every part is in, and aborted otherwise.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cacheless::{
    AlignedBuf, Budget, Carry, Decision, Error, ErrorKind, IoOptions, LeaseRequest, Progress, ReadOptions, Reader, Result, WriteOptions, WriteReport, Writer,
};
use md5::{Digest, Md5};

use crate::client::{check_writable, Failure, Multipart, ObjectInfo, Remote, MAX_PARTS, MIN_PART_SIZE};
use crate::fetch::{fetch, receive, FetchReport, Sink};
use crate::location::Location;

/// What a download to a file did.
#[derive(Debug, Clone)]
pub struct DownloadReport {
    /// The requests.
    pub fetch: FetchReport,
    /// The landed file.
    pub write: WriteReport,
}

/// The extended attribute a downloaded file keeps its object's ETag in (what `cp -u` compares).
pub const ETAG_XATTR: &str = "user.cacheless.etag";

/// The ETag a file landed by [`download_file`] keeps ([`ETAG_XATTR`]), if it has one.
pub fn landed_etag(path: &Path) -> Option<String> {
    let f = std::fs::File::open(path).ok()?;
    let v = cacheless::sys::xattr_get(cacheless::sys::XattrAt::Fd(f.as_fd()), ETAG_XATTR).ok()?;
    String::from_utf8(v).ok()
}

/// Downloads `info`'s object to `dest`: ranges in flight as [`fetch`] runs them, each written
/// at its offset as it arrives, the file named only when complete (and durable, unless
/// `wo.sync` is off). Its modification time is the object's unless `wo.mtime` says otherwise,
/// and it keeps the object's ETag in [`ETAG_XATTR`] (where the filesystem takes user
/// attributes). On any error, or when `cancel` is set, the partial file is removed.
pub fn download_file(
    remote: &Remote,
    info: &ObjectInfo,
    dest: &Path,
    wo: &WriteOptions,
    cancel: &AtomicBool,
    progress: Option<&Progress>,
) -> Result<DownloadReport> {
    let (dir, name) = cacheless::sys::open_parent(dest)?;
    download_into(remote, info, Arc::new(dir), name, dest, wo, None, cancel, progress)
}

/// [`download_file`] into the entry `name` of the open folder `dir` (`display`: its path in
/// messages): a folder the caller holds, so that nothing between is looked up again. With
/// `carry`, the new file takes what the file it replaces had (its owner and extended
/// attributes; its mode and access time come through `wo`) before it is named, as a copy over
/// an existing file keeps them.
#[allow(clippy::too_many_arguments)] // download_file's, and where the file goes.
pub fn download_into(
    remote: &Remote,
    info: &ObjectInfo,
    dir: Arc<OwnedFd>,
    name: &OsStr,
    display: &Path,
    wo: &WriteOptions,
    carry: Option<&Carry>,
    cancel: &AtomicBool,
    progress: Option<&Progress>,
) -> Result<DownloadReport> {
    let mut wo = wo.clone();
    wo.size_hint = Some(info.size);
    wo.mtime.get_or_insert(info.last_modified);
    let mut w = Writer::create_in_shared(dir, name, display, &wo)?;
    struct Land<'a>(&'a mut Writer);
    impl Sink for Land<'_> {
        fn put(&mut self, offset: u64, buf: AlignedBuf, len: usize) -> Result<()> {
            self.0.write_at(offset, buf, len)
        }
        fn release(&mut self) -> Result<bool> {
            self.0.wait_one()
        }
    }
    let f = fetch(remote, info, &wo.io.budget, wo.io.queue_depth.max(1), cancel, progress, &mut Land(&mut w))?;
    // Dropped, the file is removed.
    if !may_name(cancel, progress) {
        return Err(Error::new(ErrorKind::Interrupted, "download", info.location.to_string(), "interrupted"));
    }
    if let Some(c) = carry {
        c.apply(w.file(), display)?;
    }
    if let Some(etag) = &info.etag {
        // Set before the rename, so the name never shows without it. A filesystem without user
        // attributes keeps none, and `cp -u` compares sizes and times there instead.
        let _ = cacheless::sys::xattr_set(cacheless::sys::XattrAt::Fd(w.file().as_fd()), ETAG_XATTR, etag.as_bytes());
    }
    let write = w.finish()?;
    Ok(DownloadReport { fetch: f, write })
}

/// Whether a finished transfer may now take its name (a download) or complete (an upload): not
/// cancelled, and the job's naming gate says yes (`Progress::may_name`).
fn may_name(cancel: &AtomicBool, progress: Option<&Progress>) -> bool {
    !cancel.load(Ordering::Relaxed) && progress.is_none_or(Progress::may_name)
}

/// What an upload did.
#[derive(Debug, Clone)]
pub struct UploadReport {
    /// Bytes sent.
    pub bytes: u64,
    /// Parts of a multipart upload (0: one PUT).
    pub parts: u64,
    /// Bytes per part (the part size, within the memory budget; the whole file for one PUT).
    pub part: usize,
    /// The new object's ETag, as the server gave it.
    pub etag: Option<String>,
    /// How the file was read.
    pub read: Decision,
    /// Seconds from the first read to the object's completion.
    pub elapsed_s: f64,
    /// With `verify`: the ETag S3 gives an object of these bytes sent in these parts (the MD5
    /// of the bytes, or of the parts' MD5s with the part count), and whether the server's
    /// matched it.
    pub verified: Option<Verified>,
}

/// A check of an object's bytes against its ETag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The ETag the bytes make.
    pub expected: String,
    /// The ETag the server gave.
    pub server: String,
}

/// The ETag without its quotes.
fn bare(etag: &str) -> &str {
    etag.trim_matches('"')
}

/// Whether `etag` is S3's MD5 of the whole object (a single PUT without server-side
/// encryption by KMS): 32 hex digits, no part count.
pub fn etag_is_md5(etag: &str) -> bool {
    let e = bare(etag);
    e.len() == 32 && e.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Checks a landed file against the object's ETag, where the ETag is the MD5 of its bytes:
/// reads the file back with the engine's reader (from the disk, not the cache) and hashes it.
/// `None` when the ETag says nothing checkable (a multipart upload's, or none).
pub fn verify_download(path: &Path, info: &ObjectInfo, io: &IoOptions) -> Result<Option<Verified>> {
    let Some(etag) = info.etag.as_deref().filter(|e| etag_is_md5(e)) else { return Ok(None) };
    let mut r = Reader::open(path, &ReadOptions::from(io.clone()))?;
    let mut h = Md5::new();
    while let Some(c) = r.next_chunk()? {
        h.update(&c[..]);
    }
    let expected = hex(&h.finalize());
    let v = Verified { expected, server: bare(etag).to_ascii_lowercase() };
    if v.expected != v.server {
        return Err(Error::new(ErrorKind::Changed, "verify", path, format!("its MD5 {} is not the ETag {} of {}", v.expected, v.server, info.location)));
    }
    Ok(Some(v))
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// The part size for an object of `size` bytes: `want`, raised to S3's 5 MiB floor and far
/// enough that it takes at most 10,000 parts, in whole MiB.
pub fn part_size(size: u64, want: usize) -> usize {
    let floor = usize::try_from(size.div_ceil(MAX_PARTS)).unwrap_or(usize::MAX);
    cacheless::round_up(want.max(MIN_PART_SIZE).max(floor), 1 << 20)
}

/// Uploads the file `src` to `dest`: one PUT when it fits one part, else a multipart upload with
/// parts in flight, each read with the engine's reader into a buffer from `io`'s budget and
/// sent without a copy. The object appears only when complete; on an error, or when `cancel` is
/// set, the multipart upload is aborted (its parts removed) and the error returned. With
/// `verify`, each part's MD5 is computed as it is sent and the server's ETag checked against
/// them (an error when they differ; the object is then in place, and named in the error).
pub fn upload_file(
    remote: &Remote,
    src: &Path,
    dest: &Location,
    io: &IoOptions,
    verify: bool,
    cancel: &AtomicBool,
    progress: Option<&Progress>,
) -> Result<UploadReport> {
    check_writable(dest)?;
    let start = Instant::now();
    let page = cacheless::sys::page_size();
    // The reader's share of the budget apart from the parts', so neither waits on the other.
    let reading = (io.block_size.max(page) * 2).min(io.budget.limit() / 4);
    let shares = io.budget.split(&[reading, io.budget.limit().saturating_sub(reading).max(page)]);
    let mut ro = ReadOptions::from(IoOptions { budget: shares.part(0).clone(), queue_depth: 1, ..io.clone() });
    ro.extra_buffers = 0;
    let mut r = Reader::open(src, &ro)?;
    let size = r.len();
    let read = r.decision().clone();
    let parts_budget: &Budget = shares.part(1);
    // The part size asked for, within the budget (S3's floor and the 10,000 parts permitting).
    let part = part_size(size, remote.opts.part_size.min(parts_budget.limit() >> 20 << 20));
    check_fits(part.min(cacheless::round_up(usize::try_from(size).unwrap_or(usize::MAX).max(1), page)), parts_budget, dest)?;
    let url = dest.to_string();
    let interrupted = || Error::new(ErrorKind::Interrupted, "upload", url.clone(), "interrupted");
    if size <= part as u64 {
        let len = usize::try_from(size).unwrap_or(usize::MAX);
        let lease = parts_budget.lease(LeaseRequest::one(cacheless::round_up(len.max(1), page)).aligned(page));
        let mut buf = lease.get().unwrap_or_else(|| AlignedBuf::new(cacheless::round_up(len.max(1), page), page));
        read_part(&mut r, &mut buf, 0, len)?;
        r.check_unchanged()?;
        let expected = verify.then(|| hex(&Md5::digest(&buf[..len])));
        if cancel.load(Ordering::Relaxed) {
            return Err(interrupted());
        }
        let etag = remote.rt.block_on(remote.conn.put(dest, payload(buf, len))).map_err(|f| remote.conn.error("upload", dest, f))?;
        if let Some(p) = progress {
            p.add_bytes(size);
        }
        let verified = check(expected, etag.as_deref(), dest)?;
        return Ok(UploadReport { bytes: size, parts: 0, part: len, etag, read, elapsed_s: start.elapsed().as_secs_f64(), verified });
    }
    let lease = parts_budget.lease(LeaseRequest::buffers(part, remote.opts.concurrency.max(1) + 1).aligned(page));
    let in_flight = remote.opts.concurrency.max(1).min(lease.count()).max(1);
    let mut up = Multipart::start(remote, dest)?;
    let (tx, rx) = mpsc::channel::<(u64, std::result::Result<(), Failure>)>();
    let mut tasks = crate::fetch::Tasks::default();
    let mut active = 0usize;
    let mut off = 0u64;
    let mut sums = Md5::new();
    let wait = |active: &mut usize| -> Result<()> {
        let (at, res) = receive(&rx, cancel, "upload", dest)?;
        *active -= 1;
        res.map_err(|f| remote.conn.error("upload", dest, f).with_note(format!("the part at byte {at} failed; the upload was aborted")))
    };
    while off < size {
        if cancel.load(Ordering::Relaxed) {
            return Err(interrupted());
        }
        if active >= in_flight {
            wait(&mut active)?;
            continue;
        }
        let Some(mut buf) = lease.get() else {
            if active > 0 {
                wait(&mut active)?;
            } else {
                // A finished part's buffer is on its way back from the client.
                std::thread::sleep(Duration::from_millis(1));
            }
            continue;
        };
        let len = usize::try_from((size - off).min(part as u64)).unwrap_or(part);
        read_part(&mut r, &mut buf, off, len)?;
        if verify {
            sums.update(Md5::digest(&buf[..len]));
        }
        let sent = up.part(payload(buf, len));
        let (tx, at) = (tx.clone(), off);
        tasks.spawn(remote, async move {
            let _ = tx.send((at, sent.await));
        });
        active += 1;
        off += len as u64;
        if let Some(p) = progress {
            p.add_bytes(len as u64);
        }
    }
    while active > 0 {
        wait(&mut active)?;
    }
    r.check_unchanged()?;
    // The object appears only when completed (dropped, the multipart upload is aborted).
    if !may_name(cancel, progress) {
        return Err(interrupted());
    }
    let parts = up.count();
    let etag = up.complete()?;
    let expected = verify.then(|| format!("{}-{parts}", hex(&sums.finalize())));
    let verified = check(expected, etag.as_deref(), dest)?;
    Ok(UploadReport { bytes: size, parts, part, etag, read, elapsed_s: start.elapsed().as_secs_f64(), verified })
}

/// An error unless a part of `part` bytes fits `budget`: S3's parts are at least 5 MiB, and a
/// large object's larger (10,000 parts at most), so a budget below one part cannot upload it
/// (rather than exceed the budget).
pub(crate) fn check_fits(part: usize, budget: &Budget, dest: &Location) -> Result<()> {
    if part <= budget.limit() {
        return Ok(());
    }
    let m = format!(
        "a part of {} does not fit in the memory budget's {} for parts",
        cacheless::human_bytes(part as f64),
        cacheless::human_bytes(budget.limit() as f64)
    );
    Err(Error::new(ErrorKind::InvalidInput, "upload", dest.to_string(), m).with_note("raise --memory, or lower --part-size (parts are at least 5 MiB)"))
}

/// Compares the ETag the bytes make with the server's.
fn check(expected: Option<String>, server: Option<&str>, dest: &Location) -> Result<Option<Verified>> {
    let Some(expected) = expected else { return Ok(None) };
    let Some(server) = server else {
        return Err(Error::new(ErrorKind::Unsupported, "verify", dest.to_string(), "the server gave no ETag to check the upload against"));
    };
    let v = Verified { expected, server: bare(server).to_ascii_lowercase() };
    if v.expected != v.server {
        return Err(Error::new(
            ErrorKind::Changed,
            "verify",
            dest.to_string(),
            format!("the server's ETag {} is not the {} its bytes make", v.server, v.expected),
        )
        .with_note("the object is in place: remove it or upload it again"));
    }
    Ok(Some(v))
}

/// Reads `len` bytes at `off` into `buf`; a file that ends early has changed under us.
fn read_part(r: &mut Reader, buf: &mut AlignedBuf, off: u64, len: usize) -> Result<()> {
    let n = r.read_at(&mut buf[..len], off)?;
    if n != len {
        return Err(Error::new(
            ErrorKind::Changed,
            "read",
            r.path(),
            format!("the file ended at {} B, before the {} B it had when the upload began", off + n as u64, r.len()),
        ));
    }
    Ok(())
}

/// `buf[..len]` as a request body, without a copy: the buffer returns to its lease when the
/// client drops the body (after the part is sent, retries included).
pub(crate) fn payload(buf: AlignedBuf, len: usize) -> Bytes {
    struct Part(AlignedBuf, usize);
    impl AsRef<[u8]> for Part {
        fn as_ref(&self) -> &[u8] {
            &self.0[..self.1]
        }
    }
    Bytes::from_owner(Part(buf, len))
}
