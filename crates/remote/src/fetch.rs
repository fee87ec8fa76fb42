//! Downloads: many ranged GETs in flight, each into a buffer leased from the job's budget,
//! handed to a sink as they arrive (in any order), every range pinned to the object's ETag.
//!
//! Every answer is held to what was asked: a range comes back as 206 with the Content-Range
//! asked for and exactly its bytes (a 200 for a range, on HTTP, turns the download into one
//! stream, whose length must be the object's), with the ETag it is pinned to; a download ends
//! in success only once every byte of the object has been handed on.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cacheless::{AlignedBuf, Budget, Error, ErrorKind, LeaseRequest, Progress, Result};
use futures::TryStreamExt;
use reqwest::StatusCode;

use crate::client::{backoff, content_range, header, Conn, Failure, ObjectInfo, Remote};
use crate::location::{Location, Scheme};

/// Where downloaded bytes go.
pub trait Sink {
    /// Takes `buf[..len]`, the object's bytes at `offset`. Called in the order ranges arrive.
    fn put(&mut self, offset: u64, buf: AlignedBuf, len: usize) -> Result<()>;
    /// Waits for one buffer the sink still holds (a write in flight) to come back to its
    /// lease; false when it holds none.
    fn release(&mut self) -> Result<bool>;
}

/// What a download did.
#[derive(Debug, Clone, Default)]
pub struct FetchReport {
    /// Bytes received.
    pub bytes: u64,
    /// Ranged GETs made (0 when the server sent the object as one stream).
    pub ranges: u64,
    /// Requests in flight at once, at most.
    pub in_flight: usize,
    /// Bytes one ranged GET asks for (the part size, within the memory budget).
    pub range: usize,
    /// Whether the server answered ranged requests (206); false: one stream.
    pub ranged: bool,
    /// Ranges fetched again after a short or failed body.
    pub retried: u64,
    /// Seconds from the first request to the last byte handed to the sink.
    pub elapsed_s: f64,
}

/// Why one range failed.
pub(crate) enum RangeError {
    Failed(Failure),
    /// The server ignored the Range header (200 with the whole object).
    NotPartial,
    /// Fewer or more bytes than asked.
    Length(usize),
    /// A response for another version of the object.
    Changed(Option<String>),
    /// An answer for other bytes than those asked (its Content-Range), or from an object of
    /// another size than the server said: no retry mends it.
    Mismatch(String),
}

impl RangeError {
    /// Whether fetching the range again may mend it: a body cut short or run long, or a
    /// failure that may pass (a reset, a stall, a 5xx).
    fn retryable(&self) -> bool {
        match self {
            RangeError::Length(_) => true,
            RangeError::Failed(f) => f.transient(),
            RangeError::NotPartial | RangeError::Changed(_) | RangeError::Mismatch(_) => false,
        }
    }
}

/// Whether range `idx` may be tried again after `attempts` tries that began at `start`.
fn may_retry(remote: &Remote, e: &RangeError, attempts: usize, start: Instant) -> bool {
    e.retryable() && attempts <= remote.opts.retries && start.elapsed() + backoff(attempts) <= remote.opts.retry_time
}

type Done = (usize, AlignedBuf, std::result::Result<usize, RangeError>);

/// Downloads `info`'s object into `sink`: ranges of `remote`'s part size (at most half of
/// `budget`), `concurrency` in flight, each in a buffer leased from `budget` (the sink may hold
/// up to `sink_holds` of them at once, in writes in flight). Succeeds only once every byte of
/// the object has been handed to the sink; stops with an `Interrupted` error when `cancel` is
/// set.
pub fn fetch(
    remote: &Remote,
    info: &ObjectInfo,
    budget: &Budget,
    sink_holds: usize,
    cancel: &AtomicBool,
    progress: Option<&Progress>,
    sink: &mut dyn Sink,
) -> Result<FetchReport> {
    let start = Instant::now();
    let size = info.size;
    let mut report = FetchReport { ranged: true, ..FetchReport::default() };
    if size == 0 {
        return Ok(report);
    }
    let page = cacheless::sys::page_size();
    let chunk = range_size(remote, budget);
    let chunks = usize::try_from(size.div_ceil(chunk as u64)).unwrap_or(usize::MAX);
    let want = remote.opts.concurrency.max(1).min(chunks);
    let lease = budget.lease(LeaseRequest::buffers(chunk.min(round_len(size, page)), want + sink_holds).aligned(page));
    let in_flight = want.min(lease.count()).max(1);
    report.in_flight = in_flight;
    report.range = chunk;
    let (tx, rx) = mpsc::channel::<Done>();
    let mut tasks = Tasks::default();
    // An HTTP server may not do ranges: the first range goes alone (and again alone while it
    // is retried), and a 200 turns the download into one stream.
    let mut probed = info.location.scheme() != Scheme::Http;
    let mut next = 0usize;
    let mut active = 0usize;
    let mut attempts: BTreeMap<usize, (usize, Instant)> = BTreeMap::new();
    let mut retry: Vec<usize> = Vec::new();
    loop {
        while active < in_flight && (probed || active == 0) && (!retry.is_empty() || next < chunks) {
            let Some(buf) = lease.get() else {
                if active == 0 && !sink.release()? {
                    return Err(Error::new(ErrorKind::Io, "download", info.location.to_string(), "no buffer to receive into"));
                }
                if active == 0 {
                    continue;
                }
                break;
            };
            let idx = retry.pop().unwrap_or_else(|| {
                next += 1;
                next - 1
            });
            let range = span(idx, chunk, size);
            let conn = remote.conn.clone();
            let (loc, etag, tx) = (info.location.clone(), info.etag.clone(), tx.clone());
            tasks.spawn(remote, async move {
                let mut buf = buf;
                let want = usize::try_from(range.end - range.start).unwrap_or(usize::MAX).min(buf.capacity());
                let res = get_into(&conn, &loc, range, size, etag.as_deref(), &mut buf[..want]).await;
                let _ = tx.send((idx, buf, res));
            });
            report.ranges += 1;
            active += 1;
        }
        if active == 0 {
            break;
        }
        let (idx, buf, res) = receive(&rx, cancel, "download", &info.location)?;
        active -= 1;
        let range = span(idx, chunk, size);
        match res {
            Ok(len) => {
                probed = true;
                report.bytes += len as u64;
                if let Some(p) = progress {
                    p.add_bytes(len as u64);
                }
                sink.put(range.start, buf, len)?;
            }
            Err(RangeError::NotPartial) if idx == 0 && !probed => {
                drop(buf);
                drop(lease);
                report.ranged = false;
                report.ranges = 0;
                report.in_flight = 1;
                stream_whole(remote, info, budget, cancel, progress, sink, &mut report)?;
                break;
            }
            Err(e) => {
                let (n, first) = attempts.entry(idx).or_insert((0, Instant::now()));
                *n += 1;
                if !may_retry(remote, &e, *n, *first) {
                    return Err(range_error(remote, &info.location, &range, info.etag.as_deref(), e, *n));
                }
                drop(buf);
                report.retried += 1;
                sleep_unless(cancel, backoff(*n));
                retry.push(idx);
            }
        }
    }
    if report.bytes != size {
        // Never a success with less than the object: whatever the way here, it is an error.
        let msg = format!("{} B of the object's {size} B came", report.bytes);
        return Err(Error::new(ErrorKind::Io, "download", info.location.to_string(), msg));
    }
    report.elapsed_s = start.elapsed().as_secs_f64();
    Ok(report)
}

/// The bytes one ranged GET asks for: the part size, within half of `budget` (two ranges in
/// flight at least, whatever `--part-size` says), in whole pages.
pub(crate) fn range_size(remote: &Remote, budget: &Budget) -> usize {
    let page = cacheless::sys::page_size();
    let half = (budget.limit() / 2) / page * page;
    remote.opts.range_size().min(half.max(page))
}

/// Sleeps `d`, in slices, ending early once `cancel` is set.
fn sleep_unless(cancel: &AtomicBool, d: Duration) {
    let until = Instant::now() + d;
    while !cancel.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= until {
            return;
        }
        std::thread::sleep((until - now).min(Duration::from_millis(50)));
    }
}

/// The server sends the whole object in one response (no ranges): its bytes go to the sink
/// in buffers of the range size, in order; there must be exactly the object's size of them.
fn stream_whole(
    remote: &Remote,
    info: &ObjectInfo,
    budget: &Budget,
    cancel: &AtomicBool,
    progress: Option<&Progress>,
    sink: &mut dyn Sink,
    report: &mut FetchReport,
) -> Result<()> {
    let page = cacheless::sys::page_size();
    let chunk = range_size(remote, budget);
    let lease = budget.lease(LeaseRequest::buffers(chunk.min(round_len(info.size, page)), 2).aligned(page));
    let loc = &info.location;
    let mut body = whole_body(remote, info)?;
    let mut at = 0u64;
    let mut cur: Option<(AlignedBuf, usize)> = None;
    loop {
        if cancel.load(Ordering::Relaxed) {
            return Err(Error::new(ErrorKind::Interrupted, "download", loc.to_string(), "interrupted"));
        }
        let piece = match remote.rt.block_on(until_cancelled(cancel, next_piece(&remote.conn, &mut body))) {
            None => return Err(Error::new(ErrorKind::Interrupted, "download", loc.to_string(), "interrupted")),
            Some(Ok(Some(p))) => p,
            Some(Ok(None)) => break,
            Some(Err(e)) => return Err(range_error(remote, loc, &(0..info.size), info.etag.as_deref(), e, 1)),
        };
        let mut piece = &piece[..];
        while !piece.is_empty() {
            if at + piece.len() as u64 > info.size {
                return Err(range_error(remote, loc, &(0..info.size), info.etag.as_deref(), RangeError::Length(usize::MAX), 1));
            }
            let (mut buf, mut len) = match cur.take() {
                Some(c) => c,
                None => loop {
                    if let Some(b) = lease.get() {
                        break (b, 0);
                    }
                    if !sink.release()? {
                        return Err(Error::new(ErrorKind::Io, "download", loc.to_string(), "no buffer to receive into"));
                    }
                },
            };
            let cap = buf.capacity().min(chunk);
            let n = piece.len().min(cap - len);
            buf[len..len + n].copy_from_slice(&piece[..n]);
            len += n;
            piece = &piece[n..];
            at += n as u64;
            if len == cap || at == info.size {
                if let Some(p) = progress {
                    p.add_bytes(len as u64);
                }
                sink.put(at - len as u64, buf, len)?;
            } else {
                cur = Some((buf, len));
            }
        }
    }
    if at != info.size {
        return Err(range_error(remote, loc, &(0..info.size), info.etag.as_deref(), RangeError::Length(usize::try_from(at).unwrap_or(usize::MAX)), 1));
    }
    report.bytes = at;
    Ok(())
}

/// The next piece of a body, rate-limited; `None` at its end.
async fn next_piece(conn: &Conn, body: &mut reqwest::Response) -> std::result::Result<Option<bytes::Bytes>, RangeError> {
    match body.chunk().await {
        Ok(Some(p)) => {
            if let Some(rate) = &conn.rate {
                tokio::time::sleep(rate.reserve(p.len() as u64)).await;
            }
            Ok(Some(p))
        }
        Ok(None) => Ok(None),
        Err(e) => Err(RangeError::Failed(conn.transport(e))),
    }
}

/// The whole object in one GET (a server without ranges), pinned to `info`'s ETag: the
/// response, its body still to read.
fn whole_body(remote: &Remote, info: &ObjectInfo) -> Result<reqwest::Response> {
    let loc = &info.location;
    let r = remote.rt.block_on(remote.conn.get(loc, None, info.etag.as_deref())).map_err(|f| remote.conn.error("download", loc, f))?;
    let etag = header(r.headers(), reqwest::header::ETAG).map(str::to_string);
    if etag.is_some() && info.etag.is_some() && etag != info.etag {
        return Err(range_error(remote, loc, &(0..info.size), info.etag.as_deref(), RangeError::Changed(etag), 1));
    }
    let len = header(r.headers(), reqwest::header::CONTENT_LENGTH).and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(len) = len.filter(|&l| l != info.size) {
        let m = format!("the server sends {len} B for the whole object, whose size it said was {} B", info.size);
        return Err(range_error(remote, loc, &(0..info.size), info.etag.as_deref(), RangeError::Mismatch(m), 1));
    }
    Ok(r)
}

/// The next answer on `rx` from a transfer's tasks, checking `cancel` every 100 ms: an
/// `Interrupted` error once it is set, an `Io` error should every task be gone.
pub(crate) fn receive<T>(rx: &mpsc::Receiver<T>, cancel: &AtomicBool, op: &'static str, loc: &Location) -> Result<T> {
    loop {
        if cancel.load(Ordering::Relaxed) {
            return Err(Error::new(ErrorKind::Interrupted, op, loc.to_string(), "interrupted"));
        }
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(d) => return Ok(d),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(Error::new(ErrorKind::Io, op, loc.to_string(), "a request's task ended without an answer"))
            }
        }
    }
}

/// `len` rounded up to `page`, at least one page (the largest buffer a small object needs).
fn round_len(len: u64, page: usize) -> usize {
    cacheless::round_up(usize::try_from(len).unwrap_or(usize::MAX / 2).max(1), page)
}

/// The bytes chunk `idx` covers.
fn span(idx: usize, chunk: usize, size: u64) -> Range<u64> {
    let start = idx as u64 * chunk as u64;
    start..(start + chunk as u64).min(size)
}

fn range_error(remote: &Remote, loc: &Location, range: &Range<u64>, etag: Option<&str>, e: RangeError, attempts: usize) -> Error {
    let at = format!("bytes {}-{}", range.start, range.end.saturating_sub(1));
    let tries = if attempts > 1 { format!(" (all {attempts} attempts)") } else { String::new() };
    match e {
        RangeError::Failed(mut f) => {
            if let Failure::Status { attempts: a, .. } | Failure::Transport { attempts: a, .. } = &mut f {
                *a = attempts;
            }
            remote.conn.error("download", loc, f)
        }
        RangeError::NotPartial => Error::new(ErrorKind::Io, "download", loc.to_string(), format!("{at}: the server sent the whole object for a range")),
        RangeError::Length(got) => Error::new(
            ErrorKind::Io,
            "download",
            loc.to_string(),
            format!(
                "{at}: the server sent {} B, not the range's {} B{tries}",
                if got == usize::MAX { "more".to_string() } else { got.to_string() },
                range.end - range.start
            ),
        )
        .with_note("the body was cut short or ran long, and retries did not mend it"),
        RangeError::Mismatch(m) => Error::new(ErrorKind::Io, "download", loc.to_string(), format!("{at}: {m}"))
            .with_note("the server's answers do not agree with each other: nothing was kept"),
        RangeError::Changed(now) => Error::new(
            ErrorKind::Changed,
            "download",
            loc.to_string(),
            format!("the object was replaced during the transfer (ETag {} became {})", etag.unwrap_or("none"), now.as_deref().unwrap_or("none")),
        )
        .with_note("run it again to fetch the new version; nothing of the old one was kept"),
    }
}

/// The transfer's tasks on the runtime: aborted when the transfer ends early.
#[derive(Default)]
pub(crate) struct Tasks(Vec<tokio::task::JoinHandle<()>>);

impl Tasks {
    pub(crate) fn spawn(&mut self, remote: &Remote, f: impl std::future::Future<Output = ()> + Send + 'static) {
        self.0.retain(|h| !h.is_finished());
        self.0.push(remote.rt.spawn(f));
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

/// A sink that passes the bytes on in order (standard output, a hash): ranges that arrive
/// early wait in their buffers, which the budget bounds.
pub struct Ordered<F: FnMut(&[u8]) -> Result<()>> {
    next: u64,
    early: BTreeMap<u64, (AlignedBuf, usize)>,
    out: F,
}

impl<F: FnMut(&[u8]) -> Result<()>> Ordered<F> {
    /// Passes the object's bytes to `out` in order.
    pub fn new(out: F) -> Self {
        Ordered { next: 0, early: BTreeMap::new(), out }
    }
}

impl<F: FnMut(&[u8]) -> Result<()>> Sink for Ordered<F> {
    fn put(&mut self, offset: u64, buf: AlignedBuf, len: usize) -> Result<()> {
        self.early.insert(offset, (buf, len));
        while let Some((buf, len)) = self.early.remove(&self.next) {
            (self.out)(&buf[..len])?;
            self.next += len as u64;
        }
        Ok(())
    }

    fn release(&mut self) -> Result<bool> {
        Ok(false)
    }
}

/// Reads a whole object into memory, its ranges fetched in parallel straight into their places.
pub fn read_all(remote: &Remote, info: &ObjectInfo, cancel: &AtomicBool) -> Result<Vec<u8>> {
    let mut out = vec![0u8; cacheless::conv::usize_of(info.size)];
    read_into(remote, info, 0, &mut out, cancel)?;
    Ok(out)
}

/// Downloads object bytes straight into the caller's memory: each piece `(offset, buf)` gets
/// the object's bytes `[offset, offset + buf.len())`, as ranged GETs of at most the part size,
/// `concurrency` in flight, every one pinned to `info`'s ETag, each response copied into its
/// place as it arrives (no buffer between). A server that answers a range with the whole object
/// (checked with the first range alone, on HTTP) is read as one stream, each piece taken as it
/// passes. Failed and short ranges are retried as [`fetch`] retries them; stops with an
/// `Interrupted` error when `cancel` is set.
pub fn fetch_into(remote: &Remote, info: &ObjectInfo, pieces: Vec<(u64, &mut [u8])>, cancel: &AtomicBool, progress: Option<&Progress>) -> Result<FetchReport> {
    let start = Instant::now();
    let loc = &info.location;
    let chunk = remote.opts.range_size();
    let mut work: Vec<(u64, &mut [u8])> = Vec::with_capacity(pieces.len());
    for (mut off, mut rest) in pieces {
        if off.checked_add(rest.len() as u64).is_none_or(|end| end > info.size) {
            let msg = format!("bytes {off}+{} asked for, past the object's end ({} B)", rest.len(), info.size);
            return Err(Error::new(ErrorKind::InvalidInput, "download", loc.to_string(), msg));
        }
        while !rest.is_empty() {
            let n = chunk.min(rest.len());
            let (mine, tail) = std::mem::take(&mut rest).split_at_mut(n);
            work.push((off, mine));
            off += n as u64;
            rest = tail;
        }
    }
    let mut report = FetchReport { ranged: true, ..FetchReport::default() };
    if work.is_empty() {
        return Ok(report);
    }
    work.sort_unstable_by_key(|p| p.0);
    let etag = info.etag.as_deref();
    let retried = std::sync::atomic::AtomicU64::new(0);
    let ctx = Piece { remote, loc, size: info.size, etag, progress, retried: &retried };
    let fail = |(range, e, n): (Range<u64>, RangeError, usize)| range_error(remote, loc, &range, etag, e, n);
    let interrupted = || Error::new(ErrorKind::Interrupted, "download", loc.to_string(), "interrupted");
    report.ranges = work.len() as u64;
    report.in_flight = remote.opts.concurrency.max(1).min(work.len());
    // Over HTTP, the first range alone: a 200 says the server does not do ranges.
    let mut skip = 0;
    if let Some(first) = work.first_mut().filter(|_| loc.scheme() == Scheme::Http) {
        match remote.rt.block_on(until_cancelled(cancel, ctx.get(first))).ok_or_else(interrupted)? {
            Ok(()) => skip = 1,
            Err((_, RangeError::NotPartial, _)) => {
                report.ranged = false;
                report.ranges = 0;
                report.in_flight = 1;
                report.bytes = scatter(remote, info, &mut work, cancel, progress)?;
                report.elapsed_s = start.elapsed().as_secs_f64();
                return Ok(report);
            }
            Err(e) => return Err(fail(e)),
        }
    }
    let all = futures::stream::iter(work[skip..].iter_mut().map(Ok)).try_for_each_concurrent(report.in_flight, |p| ctx.get(p));
    remote.rt.block_on(until_cancelled(cancel, all)).ok_or_else(interrupted)?.map_err(fail)?;
    report.bytes = work.iter().map(|p| p.1.len() as u64).sum();
    report.retried = retried.into_inner();
    report.elapsed_s = start.elapsed().as_secs_f64();
    Ok(report)
}

/// What every range of a [`fetch_into`] shares.
struct Piece<'a> {
    remote: &'a Remote,
    loc: &'a Location,
    size: u64,
    etag: Option<&'a str>,
    progress: Option<&'a Progress>,
    retried: &'a std::sync::atomic::AtomicU64,
}

impl Piece<'_> {
    /// One piece's ranged GET, retried with backoff when it fails or comes back short.
    async fn get(&self, p: &mut (u64, &mut [u8])) -> std::result::Result<(), (Range<u64>, RangeError, usize)> {
        let range = p.0..p.0 + p.1.len() as u64;
        let mut attempt = 0usize;
        let first = Instant::now();
        loop {
            match get_into(&self.remote.conn, self.loc, range.clone(), self.size, self.etag, p.1).await {
                Ok(n) => {
                    if let Some(pr) = self.progress {
                        pr.add_bytes(n as u64);
                    }
                    return Ok(());
                }
                Err(e) => {
                    attempt += 1;
                    if !may_retry(self.remote, &e, attempt, first) {
                        return Err((range, e, attempt));
                    }
                    self.retried.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(backoff(attempt)).await;
                }
            }
        }
    }
}

/// Reads `buf.len()` object bytes at `offset` into `buf` (one ranged GET, or a stream where the
/// server does not do ranges): a header, a small read.
pub fn read_into(remote: &Remote, info: &ObjectInfo, offset: u64, buf: &mut [u8], cancel: &AtomicBool) -> Result<()> {
    fetch_into(remote, info, vec![(offset, buf)], cancel, None).map(|_| ())
}

/// `f`'s output, or `None` once `cancel` is set (checked every 100 ms; `f` is dropped then).
async fn until_cancelled<T>(cancel: &AtomicBool, f: impl std::future::Future<Output = T>) -> Option<T> {
    let watch = async {
        while !cancel.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    match futures::future::select(std::pin::pin!(f), std::pin::pin!(watch)).await {
        futures::future::Either::Left((v, _)) => Some(v),
        futures::future::Either::Right(_) => None,
    }
}

/// One ranged GET of an object of `size` bytes copied into `buf`, pinned to `etag`: the answer
/// must be 206 for exactly `range` (its Content-Range, the object's size, the ETag), with
/// exactly `buf.len()` bytes.
async fn get_into(conn: &Conn, loc: &Location, range: Range<u64>, size: u64, etag: Option<&str>, buf: &mut [u8]) -> std::result::Result<usize, RangeError> {
    let mut r = conn.get(loc, Some(range.clone()), etag).await.map_err(|f| match f {
        Failure::Status { status, .. } if status == StatusCode::RANGE_NOT_SATISFIABLE => {
            RangeError::Mismatch(format!("the server has no such range: the object is shorter than the {size} B it said"))
        }
        Failure::Status { status, .. } if status == StatusCode::PRECONDITION_FAILED => RangeError::Changed(None),
        f => RangeError::Failed(f),
    })?;
    if r.status() != StatusCode::PARTIAL_CONTENT {
        return Err(RangeError::NotPartial);
    }
    let got = header(r.headers(), reqwest::header::ETAG).map(str::to_string);
    if got.is_some() && etag.is_some() && got.as_deref() != etag {
        return Err(RangeError::Changed(got));
    }
    match content_range(r.headers()) {
        Some((a, b, total)) if a == range.start && b + 1 == range.end && total.is_none_or(|t| t == size) => {}
        Some((a, b, total)) => {
            let of = total.map_or("*".to_string(), |t| t.to_string());
            return Err(RangeError::Mismatch(format!("the server answered with bytes {a}-{b}/{of} (the object's size was {size} B)")));
        }
        None => return Err(RangeError::Mismatch("the server answered a range without saying which (no Content-Range)".into())),
    }
    let mut at = 0usize;
    while let Some(piece) = next_piece(conn, &mut r).await? {
        let end = at + piece.len();
        let Some(dst) = buf.get_mut(at..end) else { return Err(RangeError::Length(end)) };
        dst.copy_from_slice(&piece);
        at = end;
    }
    if at != buf.len() {
        return Err(RangeError::Length(at));
    }
    Ok(at)
}

/// The whole object as one stream, each piece (sorted by offset) copied from it as it passes;
/// returns the bytes placed.
fn scatter(remote: &Remote, info: &ObjectInfo, work: &mut [(u64, &mut [u8])], cancel: &AtomicBool, progress: Option<&Progress>) -> Result<u64> {
    let loc = &info.location;
    let mut body = whole_body(remote, info)?;
    let (mut at, mut i, mut placed) = (0u64, 0usize, 0u64);
    while i < work.len() {
        let piece = match remote.rt.block_on(until_cancelled(cancel, next_piece(&remote.conn, &mut body))) {
            None => return Err(Error::new(ErrorKind::Interrupted, "download", loc.to_string(), "interrupted")),
            Some(Ok(Some(p))) => p,
            Some(Ok(None)) => break,
            Some(Err(e)) => return Err(range_error(remote, loc, &(0..info.size), info.etag.as_deref(), e, 1)),
        };
        let end = at + piece.len() as u64;
        // Every piece that overlaps [at, end) takes its part; those that end here are done.
        let mut j = i;
        while j < work.len() && work[j].0 < end {
            let (off, ref mut dst) = work[j];
            let lo = off.max(at);
            let hi = (off + dst.len() as u64).min(end);
            if lo < hi {
                let n = usize::try_from(hi - lo).unwrap_or(usize::MAX);
                let s = usize::try_from(lo - at).unwrap_or(usize::MAX);
                let d = usize::try_from(lo - off).unwrap_or(usize::MAX);
                dst[d..d + n].copy_from_slice(&piece[s..s + n]);
                placed += n as u64;
                if let Some(p) = progress {
                    p.add_bytes(n as u64);
                }
            }
            if off + dst.len() as u64 <= end && j == i {
                i += 1;
            }
            j += 1;
        }
        at = end;
    }
    let want: u64 = work.iter().map(|p| p.1.len() as u64).sum();
    if placed != want {
        return Err(range_error(remote, loc, &(0..info.size), info.etag.as_deref(), RangeError::Length(usize::try_from(at).unwrap_or(usize::MAX)), 1));
    }
    Ok(placed)
}
