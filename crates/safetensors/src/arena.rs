//! One aligned buffer holding chosen byte ranges of a file at their own alignment, filled with
//! parallel reads in the mode the engine chose for the file, or with parallel ranged GETs
//! straight into it where the file is an `s3://` or `http(s)://` object.
//!
//! Each range (a [`Segment`]) starts at an offset of the file and of the arena that are both
//! multiples of the alignment (the page size, or O_DIRECT's alignment if larger), so a byte's
//! address in the arena has the same alignment as its file offset, and every read lands in the
//! arena straight from the device with no bounce buffer (only the file's unaligned last bytes
//! go through one). A whole-file arena is one segment: arena byte `i` is file byte `i`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
#[cfg(feature = "remote")]
use std::sync::Arc;
use std::sync::Mutex;

use cacheless::conv::usize_of;
#[cfg(feature = "remote")]
use cacheless::{conv::fit, Reason, Taken};
use cacheless::{round_up, Lease};
use cacheless::{AlignedBuf, BackendChoice, Budget, Decision, ErrorKind, Progress, ReadOptions, Reader};
#[cfg(feature = "remote")]
use cacheless_remote::{url_of, Location, ObjectInfo, Remote, RemoteOptions};

use crate::error::Result;

/// Ranges closer than this are read as one (reading a little more beats another request).
pub const MERGE_GAP: u64 = 1 << 20;

/// Default size of the pieces a fill is cut into; workers take pieces one at a time and check
/// for cancellation between them.
pub const DEFAULT_PIECE: usize = 64 << 20;

/// A file range held by an arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// File offset of the first byte.
    pub file: u64,
    /// Arena offset of the first byte.
    pub at: usize,
    /// Bytes (a multiple of the alignment; the file's end may fall inside the last one).
    pub len: usize,
}

/// File bytes in one aligned allocation (see the module documentation).
pub struct Arena {
    buf: AlignedBuf,
    addr: usize,
    segments: Vec<Segment>,
    len: usize,
}

impl Arena {
    /// An arena of `len` bytes for `segments`; `None` where that size cannot be allocated
    /// (larger than the address space allows).
    fn new(segments: Vec<Segment>, len: usize) -> Option<Arena> {
        let mut buf = AlignedBuf::try_new(len.max(1), cacheless::sys::page_size())?;
        let addr = buf.as_mut_ptr() as usize;
        Some(Arena { buf, addr, segments, len })
    }

    /// Bytes held (the sum of the segments' lengths).
    pub fn len(&self) -> usize {
        self.len
    }
    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The arena's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
    /// Address of the first byte, for handing the memory to another runtime (Python's numpy)
    /// that reads and writes it while this arena lives. Taken from the allocation itself, not
    /// from a reference to its contents.
    pub fn address(&self) -> usize {
        self.addr
    }
    /// The file ranges held, in file (and arena) order.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }
    /// Arena offset of file bytes `[off, off+len)`, if one segment holds all of them. An empty
    /// range is found anywhere (at 0 when no segment holds its offset).
    pub fn locate(&self, off: u64, len: u64) -> Option<usize> {
        let i = self.segments.partition_point(|s| s.file <= off);
        let found = i.checked_sub(1).map(|i| self.segments[i]).filter(|s| off.checked_add(len).is_some_and(|end| end <= s.file + s.len as u64));
        match found {
            Some(s) => Some(s.at + usize_of(off - s.file)),
            None if len == 0 => Some(0),
            None => None,
        }
    }
}

impl std::fmt::Debug for Arena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arena").field("len", &self.len).field("segments", &self.segments.len()).finish()
    }
}

/// How to read into arenas.
#[derive(Debug, Clone)]
pub struct ArenaOptions {
    /// Mode, backend, request size, requests in flight (for the whole file, shared by the
    /// threads) and the memory budget the requests in flight are counted against.
    pub read: ReadOptions,
    /// Threads reading pieces at once (each with its share of the requests in flight).
    pub threads: usize,
    /// Size of the pieces a fill is cut into.
    pub piece: usize,
    /// How `s3://` and `http(s)://` objects are fetched (range size, ranges in flight,
    /// credentials); local files ignore it. (With the `remote` feature, on by default.)
    #[cfg(feature = "remote")]
    pub remote: RemoteOptions,
}

impl ArenaOptions {
    /// Defaults: auto mode and backend, the engine's request size and depth, 2 threads.
    pub fn new(budget: Budget) -> ArenaOptions {
        ArenaOptions {
            read: ReadOptions::new(budget),
            threads: 2,
            piece: DEFAULT_PIECE,
            #[cfg(feature = "remote")]
            remote: RemoteOptions::default(),
        }
    }
}

/// A file opened for reading ranges into arenas: a local file, whose mode is decided once from
/// the whole file's residency (a mostly cached file is read buffered and stays cached) and every
/// worker reads in that mode; or an `s3://` or `http(s)://` object (a `path` written as such a
/// URL), whose ranges are fetched with ranged GETs pinned to the ETag seen at open.
pub struct SpanReader {
    path: PathBuf,
    align: usize,
    piece: usize,
    source: Source,
}

enum Source {
    Local(Box<Local>),
    #[cfg(feature = "remote")]
    Remote(Box<RemoteObject>),
}

struct Local {
    file: File,
    primary: Reader,
    worker: ReadOptions,
    threads: usize,
    /// The share of the caller's budget this reader's requests in flight are counted against,
    /// held until it is dropped. Taken whole before any reader opens, so concurrent loads
    /// sharing a budget never wait on each other while holding part of it.
    _admission: Lease,
}

#[cfg(feature = "remote")]
struct RemoteObject {
    remote: Arc<Remote>,
    info: ObjectInfo,
    decision: Decision,
}

impl SpanReader {
    /// Opens `path` and decides its mode; a `path` written as an `s3://` or `http(s)://` URL
    /// is that object (a client is started for it; [`SpanReader::open_object`] shares one),
    /// with the `remote` feature (on by default).
    pub fn open(path: &Path, opts: &ArenaOptions) -> Result<SpanReader> {
        #[cfg(feature = "remote")]
        if let Some(url) = url_of(path) {
            let loc = Location::parse(url)?;
            let remote = Arc::new(Remote::connect(&loc, &opts.remote)?);
            return SpanReader::open_object(remote, &loc);
        }
        let page = cacheless::sys::page_size();
        let ro = &opts.read;
        let admission = ro.io.budget.lease(cacheless::LeaseRequest::buffers(ro.io.block_size.max(page), ro.io.queue_depth.max(1)).aligned(page));
        let threads = opts.threads.clamp(1, admission.count());
        // The readers (one per thread) lease their buffers out of the admission, which is held
        // out of the caller's budget: each keeps its share of the requests in flight and no
        // extra buffers, so that together they never want more than the admission holds and
        // none waits on another's.
        let mut each = ro.clone();
        each.io.budget = Budget::new(admission.count() * admission.size());
        each.io.queue_depth = (admission.count() / threads).max(1);
        each.extra_buffers = 0;
        // The engine's open (its retries, its errors); the workers read through duplicates.
        let primary = Reader::open(path, &each)?;
        let file = primary.file().try_clone().map_err(|e| cacheless::Error::io("dup", path, e))?;
        let align = primary.plan().buffer_align();
        each.io.mode = primary.decision().mode.into();
        Ok(SpanReader {
            path: path.to_path_buf(),
            align,
            piece: round_up(opts.piece.max(1), align),
            source: Source::Local(Box::new(Local { file, primary, worker: each, threads, _admission: admission })),
        })
    }

    /// Opens the object at `loc` through `remote` (a HEAD: its size and ETag, which every
    /// later range is pinned to). Its ranges are fetched straight into arenas, the client's
    /// range size and ranges in flight; nothing is leased from the budget (the arena is the
    /// only memory).
    #[cfg(feature = "remote")]
    pub fn open_object(remote: Arc<Remote>, loc: &Location) -> Result<SpanReader> {
        let info = remote.head(loc)?;
        Ok(SpanReader::from_object(remote, info))
    }

    /// The object `info` describes (a HEAD's answer), read through `remote` as
    /// [`SpanReader::open_object`] reads it.
    #[cfg(feature = "remote")]
    pub fn from_object(remote: Arc<Remote>, info: ObjectInfo) -> SpanReader {
        let how = format!(
            "ranged GETs of {} MiB, {} in flight, pinned to ETag {}",
            remote.options().range_size() >> 20,
            remote.options().concurrency,
            info.etag.as_deref().unwrap_or("none (Last-Modified and size)")
        );
        SpanReader {
            path: PathBuf::from(info.location.to_string()),
            align: cacheless::sys::page_size(),
            // One ranged GET per piece (the range size is whole pages).
            piece: remote.options().range_size(),
            source: Source::Remote(Box::new(RemoteObject { remote, info, decision: Decision { mode: Taken::Remote, reason: Reason::Fetched { how } } })),
        }
    }

    /// The file's length when opened.
    pub fn len(&self) -> u64 {
        match &self.source {
            Source::Local(l) => l.primary.len(),
            #[cfg(feature = "remote")]
            Source::Remote(r) => r.info.size,
        }
    }
    /// True for an empty file.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The path opened (a URL for an object).
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The mode chosen and why (`remote` for an object).
    pub fn decision(&self) -> &Decision {
        match &self.source {
            Source::Local(l) => l.primary.decision(),
            #[cfg(feature = "remote")]
            Source::Remote(r) => &r.decision,
        }
    }
    /// The backend of the first reader, once it has queued a request (none for an object).
    pub fn backend(&self) -> Option<&BackendChoice> {
        match &self.source {
            Source::Local(l) => l.primary.backend(),
            #[cfg(feature = "remote")]
            Source::Remote(_) => None,
        }
    }
    /// The alignment of arena layouts (page size, or O_DIRECT's if larger).
    pub fn align(&self) -> usize {
        self.align
    }

    /// Reads into any buffer at any offset (the engine's `read_at`; one ranged GET for an
    /// object): for small reads such as a header. Returns the bytes read, short at the end.
    pub fn read_at(&mut self, buf: &mut [u8], off: u64) -> Result<usize> {
        match &mut self.source {
            Source::Local(l) => Ok(l.primary.read_at(buf, off)?),
            #[cfg(feature = "remote")]
            Source::Remote(r) => {
                let n = fit(r.info.size.saturating_sub(off), buf.len());
                cacheless_remote::read_into(&r.remote, &r.info, off, &mut buf[..n], &AtomicBool::new(false))?;
                Ok(n)
            }
        }
    }

    /// An arena laid out for the file ranges `spans` (`(start, end)` offsets; empty ones are
    /// ignored), each widened to the alignment and merged with neighbours closer than
    /// [`MERGE_GAP`]. Nothing is read yet. An `InvalidInput` error where the ranges add up to
    /// more than one buffer can hold.
    pub fn layout(&self, spans: &[(u64, u64)]) -> Result<Arena> {
        let a = self.align as u64;
        let end = self.len().div_ceil(a) * a;
        let mut v: Vec<(u64, u64)> =
            spans.iter().filter(|(s, e)| e > s && *s < end).map(|&(s, e)| (s / a * a, e.div_ceil(a).saturating_mul(a).min(end))).collect();
        v.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(v.len());
        for (s, e) in v {
            match merged.last_mut() {
                Some(last) if s <= last.1.saturating_add(MERGE_GAP) => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        let too_large = || {
            cacheless::Error::new(
                ErrorKind::InvalidInput,
                "read",
                &self.path,
                format!("the byte ranges asked for ({} B of file) do not fit in memory", self.len()),
            )
        };
        let mut at = 0usize;
        let mut segments = Vec::with_capacity(merged.len());
        for (s, e) in merged {
            let len = usize::try_from(e - s).map_err(|_| too_large())?;
            segments.push(Segment { file: s, at, len });
            at = at.checked_add(len).ok_or_else(too_large)?;
        }
        Ok(Arena::new(segments, at).ok_or_else(too_large)?)
    }

    /// Reads the parts of `arena`'s segments that fall in file range `[lo, hi)` (`lo`
    /// rounded down and `hi` up to the alignment, clipped at the end of the file), in pieces,
    /// on the reader's threads. Counts bytes in `progress` and stops with an `Interrupted`
    /// error when it is cancelled. Returns the file offset up to which the range was read.
    pub fn fill(&mut self, arena: &mut Arena, lo: u64, hi: u64, progress: &Progress) -> Result<u64> {
        let a = self.align as u64;
        let len = self.len();
        let (lo, hi) = (lo / a * a, hi.div_ceil(a).saturating_mul(a).min(len));
        let mut pieces = Vec::new();
        for seg in &arena.segments {
            let s = seg.file.max(lo);
            let e = (seg.file + seg.len as u64).min(hi);
            let mut p = s;
            while p < e {
                let n = (self.piece as u64).min(e - p);
                pieces.push((p, seg.at + usize_of(p - seg.file), usize_of(n)));
                p += n;
            }
        }
        // Cut the arena into the pieces' disjoint slices (pieces are in arena order).
        let mut rest: &mut [u8] = &mut arena.buf[..];
        let mut base = 0usize;
        let mut jobs = Vec::with_capacity(pieces.len());
        for (off, at, n) in pieces {
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(at - base);
            let (mine, tail) = tail.split_at_mut(n);
            jobs.push((off, mine));
            rest = tail;
            base = at + n;
        }
        let path = self.path.as_path();
        // One arm without the `remote` feature.
        #[allow(clippy::infallible_destructuring_match)]
        let l = match &mut self.source {
            Source::Local(l) => l,
            #[cfg(feature = "remote")]
            Source::Remote(r) => {
                let cancel = progress.cancel_flag();
                cacheless_remote::fetch_into(&r.remote, &r.info, jobs, &cancel, Some(progress))?;
                return Ok(hi.max(lo));
            }
        };
        let threads = l.threads.min(jobs.len()).max(1);
        let queue = Mutex::new(jobs.into_iter());
        let stop = AtomicBool::new(false);
        let Local { file, primary, worker, .. } = &mut **l;
        let (file, worker) = (&*file, &*worker);
        let first = std::thread::scope(|s| {
            let helpers: Vec<_> = (1..threads)
                .map(|_| {
                    s.spawn(|| {
                        let dup = file.try_clone().map_err(|e| cacheless::Error::io("dup", path, e))?;
                        let mut r = Reader::from_file(dup, path, worker)?;
                        drain(&mut r, &queue, progress, &stop)
                    })
                })
                .collect();
            let mut first = drain(primary, &queue, progress, &stop).err();
            for h in helpers {
                let r = h.join().unwrap_or_else(|_| Err(cacheless::Error::new(ErrorKind::Io, "read", path, "a read worker panicked").into()));
                if let Err(e) = r {
                    first.get_or_insert(e);
                }
            }
            first
        });
        match first {
            Some(e) => Err(e),
            // A file extended or rewritten meanwhile would mix two versions in the arena.
            None => {
                primary.check_unchanged()?;
                Ok(hi.max(lo))
            }
        }
    }
}

impl std::fmt::Debug for SpanReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpanReader").field("path", &self.path).field("mode", &self.decision().mode).finish_non_exhaustive()
    }
}

type Jobs<'a> = Mutex<std::vec::IntoIter<(u64, &'a mut [u8])>>;

/// One worker: reads pieces until none are left, the job is cancelled, or another worker failed.
fn drain(r: &mut Reader, queue: &Jobs<'_>, progress: &Progress, stop: &AtomicBool) -> Result<()> {
    let res = (|| loop {
        if progress.is_cancelled() {
            return Err(cacheless::Error::new(ErrorKind::Interrupted, "read", r.path(), "interrupted").into());
        }
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
        let Some((off, buf)) = next else { return Ok(()) };
        let want = buf.len();
        let n = r.read_at(buf, off)?;
        if n < want {
            let msg = format!("file shrank while being read: {n} of {want} bytes at offset {off}");
            return Err(cacheless::Error::new(ErrorKind::Io, "read", r.path(), msg).into());
        }
        progress.add_bytes(n as u64);
    })();
    if res.is_err() {
        stop.store(true, Ordering::Relaxed);
    }
    res
}

/// Reads a whole file (or object, `path` written as a URL) into one arena (arena byte `i` is
/// file byte `i`).
pub fn read_whole(path: &Path, opts: &ArenaOptions, progress: &Progress) -> Result<(Arena, SpanReader)> {
    let mut sr = SpanReader::open(path, opts)?;
    // A file whose size says nothing (a proc or sysfs file, a FIFO): read to its end, then
    // laid out.
    let streamed = match &mut sr.source {
        Source::Local(l) if l.primary.streams() => Some(l.primary.read_all()?),
        _ => None,
    };
    if let Some(all) = streamed {
        progress.add_total_bytes(all.len() as u64);
        let mut arena = sr.layout(&[(0, all.len() as u64)])?;
        arena.buf[..all.len()].copy_from_slice(&all);
        arena.len = all.len();
        progress.add_bytes(all.len() as u64);
        return Ok((arena, sr));
    }
    let len = sr.len();
    progress.add_total_bytes(len);
    let mut arena = sr.layout(&[(0, len)])?;
    sr.fill(&mut arena, 0, len, progress)?;
    arena.len = usize_of(len);
    Ok((arena, sr))
}
