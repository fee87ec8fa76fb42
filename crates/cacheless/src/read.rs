//! Reading: any buffer, any offset, any length, with read-ahead, in the mode chosen per file.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, Read};
use std::ops::Deref;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::backend::{BackendChoice, BackendKind, Completion, Driver, Lane, Op, OpKind};
use crate::buf::{round_up, AlignedBuf, Budget, Lease, LeaseRequest};
use crate::caps::{self, CapsMemo, FsCaps};
use crate::error::{Error, ErrorKind, Result};
use crate::options::IoOptions;
use crate::plan::{self, check_block_size, Plan};
use crate::policy::{self, Decision, Mode, Reason, Taken};
use crate::residency;
use crate::sys;

/// The largest read(2) of a file read with plain reads (see [`Reader::streams`]).
const PLAIN_BLOCK_MAX: usize = 1 << 20;

/// How to open a [`Reader`].
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// Mode, backend, request size, read-ahead depth and budget.
    pub io: IoOptions,
    /// Buffers leased beyond the read-ahead, for chunks the caller holds (1: the current one;
    /// a copy adds the writer's queue depth, because the writer holds chunks in flight).
    pub extra_buffers: usize,
    /// The capabilities of the filesystems read from, remembered across the files of a job
    /// (a tree copy's sources): a file on a filesystem it knows costs no probe. `None`: each
    /// file's filesystem is looked up in the cache of verdicts (an fstat and two fstatfs).
    pub caps_memo: Option<Arc<CapsMemo>>,
}

impl ReadOptions {
    /// Defaults (auto mode and backend, default request size and depth) with `budget`.
    pub fn new(budget: Budget) -> ReadOptions {
        ReadOptions::from(IoOptions::new(budget))
    }
}

impl From<IoOptions> for ReadOptions {
    /// Reads with a job's shared settings, holding one chunk at a time.
    fn from(io: IoOptions) -> ReadOptions {
        ReadOptions { io, extra_buffers: 1, caps_memo: None }
    }
}

/// A run of bytes read from a file, in an aligned buffer the caller now holds.
pub struct Chunk {
    buf: AlignedBuf,
    offset: u64,
    len: usize,
}

impl Chunk {
    /// File offset of the first byte.
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// Takes the buffer and the valid length out.
    pub fn into_parts(self) -> (AlignedBuf, usize) {
        (self.buf, self.len)
    }
}

impl Deref for Chunk {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl std::fmt::Debug for Chunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chunk").field("offset", &self.offset).field("len", &self.len).finish()
    }
}

/// What was resident in a range before we read it, so drop-behind removes only our pages.
enum Before {
    Drop,
    Keep,
    Map(Vec<bool>),
}

/// A file opened for reading in the mode chosen for it.
///
/// Streams in order with read-ahead ([`Reader::next_chunk`], `std::io::Read`), or reads any
/// range into any memory ([`Reader::read_at`]), or the whole file at once
/// ([`Reader::read_all`]). Reads the length the file had when opened.
pub struct Reader {
    file: Arc<File>,
    path: PathBuf,
    len: u64,
    /// The file's metadata when opened.
    meta: std::fs::Metadata,
    /// The mode, its reason and the alignment it asks for.
    plan: Plan,
    block: usize,
    depth: usize,
    backend: BackendKind,
    lease: Lease,
    lane: Lane,
    choice: Option<BackendChoice>,
    next_submit: u64,
    stream_pos: u64,
    stream_held: usize,
    ready: BTreeMap<u64, Chunk>,
    cur: Option<Chunk>,
    cur_pos: usize,
    /// Bytes of the next chunk that `Read` skips (a seek to an unaligned offset).
    skip: usize,
    before: HashMap<u64, Before>,
    /// Direct mode on a file with nothing cached at open: whatever is cached at the end came in
    /// through this read (btrfs reads small inline files buffered even with O_DIRECT).
    cold_direct: bool,
    /// Nothing of the file was cached at open (auto mode measured it): the first request, when
    /// it covers the whole file, needs no residency check of its own.
    cold_at_open: bool,
    /// Drop-behind dropped the whole file, pages past its end included, after one request.
    dropped_all: bool,
    /// Read with plain read(2) calls from where the descriptor stands to the end of the file,
    /// whatever its size says (see [`Reader::streams`]).
    plain: bool,
    /// A plain read reached the end of the file.
    at_end: bool,
    /// The size and modification time at open, checked again at the end of a stream: a file
    /// that changed while it was read is an error, never a silent mix or a short result.
    stamp: Option<Stamp>,
}

/// A regular file's size and modification time, as fstat gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    mtime: (i64, i64),
}

impl Stamp {
    fn of(m: &std::fs::Metadata) -> Stamp {
        Stamp { len: m.len(), mtime: (m.mtime(), m.mtime_nsec()) }
    }
}

impl Reader {
    /// Opens `path` and chooses its mode.
    pub fn open(path: impl AsRef<Path>, opts: &ReadOptions) -> Result<Reader> {
        let path = path.as_ref();
        let fd = sys::open_interruptible(sys::CWD, path, sys::OFlags::RDONLY | sys::OFlags::CLOEXEC, sys::FMode::empty())
            .map_err(io::Error::from)
            .map_err(|e| Error::io("open", path, e))?;
        Reader::from_file(File::from(fd), path, opts)
    }

    /// Wraps an already open regular file; `path` is for messages.
    pub fn from_file(file: File, path: &Path, opts: &ReadOptions) -> Result<Reader> {
        let meta = file.metadata().map_err(|e| Error::io("stat", path, e))?;
        Reader::from_file_stat(file, meta, path, opts)
    }

    /// [`Reader::from_file`] of a file whose status the caller took already (its fstat).
    ///
    /// A FIFO, a character device, a socket, or a file on a filesystem that makes its sizes up
    /// (proc, sysfs and their kin) is read with plain reads to its end (see
    /// [`Reader::streams`]); a mode forced on it other than buffered or write-behind is refused.
    pub fn from_file_stat(file: File, meta: std::fs::Metadata, path: &Path, opts: &ReadOptions) -> Result<Reader> {
        if meta.is_dir() {
            return Err(Error::new(ErrorKind::InvalidInput, "open", path, "is a directory"));
        }
        check_block_size("open", path, opts.io.block_size)?;
        if meta.file_type().is_block_device() {
            return Err(Error::new(ErrorKind::InvalidInput, "open", path, "a block device, not a regular file"));
        }
        if !meta.is_file() {
            let caps = Arc::new(caps::not_regular(meta.dev(), &meta.file_type()));
            return Reader::plain(file, meta, path, opts, caps);
        }
        let len = meta.len();
        let known = match &opts.caps_memo {
            Some(m) => m.for_file(&file, meta.dev()),
            None => caps::for_file(&file),
        }
        .map_err(|e| Error::io("probe", path, e))?;
        if known.sizes_lie() {
            return Reader::plain(file, meta, path, opts, known);
        }
        let cached = if opts.io.mode == Mode::Auto && len > 0 { residency::residency(&file, 0, len).ok().map(|r| r.cached_bytes().min(len)) } else { None };
        let plan = plan::choose(&file, path, "open", Some(known), |caps| policy::decide_read(opts.io.mode, caps, len, cached))?;
        let (align, mem_align) = (plan.align, plan.mem_align);
        let cold_direct = plan.decision.mode == Taken::Direct && len > 0 && residency::cachestat(file.as_fd(), 0, 0).is_ok_and(|c| c.nr_cache == 0);
        let page = sys::page_size();
        let mut block = round_up(opts.io.block_size.max(align), align);
        if len > 0 && crate::conv::usize_of(len) < block {
            // Never lease more than the file needs.
            block = round_up(crate::conv::usize_of(len), align.max(page));
        }
        if plan.decision.mode == Taken::DropBehind && len > block as u64 {
            // Drop-behind keeps only pages that were cached before each request. Kernel
            // read-ahead would cache pages ahead of the request before we look at them, so it is
            // turned off for this descriptor: our own queue does the read-ahead. A file read in
            // one request needs no such call: read-ahead stops at the end of the file.
            sys::fadvise(&file, sys::Advice::Random);
        }
        let stamp = Stamp::of(&meta);
        let blocks = crate::conv::usize_of(len.div_ceil(block as u64)).max(1);
        // Chunks held beyond the read-ahead are chunks of this file: never more than it has.
        let extra = opts.extra_buffers.min(blocks + 1);
        let want = opts.io.queue_depth.max(1).min(blocks) + extra;
        let lease = opts.io.budget.lease(LeaseRequest::buffers(block, want).aligned(page.max(mem_align)));
        let depth = lease.count().saturating_sub(extra).max(1);
        let mut r = Reader::assemble(file, path, meta, plan, block, depth, lease, opts);
        r.len = len;
        r.cold_direct = cold_direct;
        r.cold_at_open = cached == Some(0);
        r.stamp = Some(stamp);
        Ok(r)
    }

    /// A reader in its state at open: nothing read, nothing in flight, read to the size stat
    /// gave (the caller sets it and what it measured).
    #[allow(clippy::too_many_arguments)] // The parts each open decides; the rest starts empty.
    fn assemble(file: File, path: &Path, meta: std::fs::Metadata, plan: Plan, block: usize, depth: usize, lease: Lease, opts: &ReadOptions) -> Reader {
        Reader {
            file: Arc::new(file),
            path: path.to_path_buf(),
            len: 0,
            meta,
            plan,
            block,
            depth,
            backend: opts.io.backend,
            lease,
            lane: Lane::new(),
            choice: None,
            next_submit: 0,
            stream_pos: 0,
            stream_held: 0,
            ready: BTreeMap::new(),
            cur: None,
            cur_pos: 0,
            skip: 0,
            before: HashMap::new(),
            cold_direct: false,
            cold_at_open: false,
            dropped_all: false,
            plain: false,
            at_end: false,
            stamp: None,
        }
    }

    /// A reader of `file` with plain read(2) calls to its end, for a file whose size does not
    /// say what it holds (`caps` says why: not a regular file, or its filesystem).
    fn plain(file: File, meta: std::fs::Metadata, path: &Path, opts: &ReadOptions, caps: Arc<FsCaps>) -> Result<Reader> {
        let what = if meta.is_file() { format!("a {} file, whose size is made up", caps.fs_type) } else { caps.fs_type.clone() };
        let decision = match opts.io.mode {
            Mode::Auto | Mode::Buffered | Mode::DropBehind => Decision { mode: Taken::Buffered, reason: Reason::PlainReads { what } },
            m => {
                return Err(Error::new(ErrorKind::Unsupported, "open", path, format!("{m} unavailable: {what} is read only with plain reads"))
                    .with_hint(crate::error::Hint::Modes(vec![Mode::Auto, Mode::Buffered])));
            }
        };
        let page = sys::page_size();
        let block = round_up(opts.io.block_size.clamp(page, PLAIN_BLOCK_MAX), page);
        let lease = opts.io.budget.lease(LeaseRequest::buffers(block, 1 + opts.extra_buffers).aligned(page));
        let mut r = Reader::assemble(file, path, meta, Plan::new(caps, decision), block, 1, lease, opts);
        r.plain = true;
        Ok(r)
    }

    /// Whether the file is read with plain reads to its end, whatever its size says: a FIFO, a
    /// character device, a socket, or a file whose filesystem makes its size up (proc, sysfs,
    /// debugfs and their kin: 0 or 4096 bytes by stat, whatever they hold). Such a file's
    /// [`Reader::len`] is the bytes read so far, final once the end is reached; it is read as
    /// a stream ([`Reader::next_chunk`], `Read`, [`Reader::read_all`]) from where its
    /// descriptor stands.
    pub fn streams(&self) -> bool {
        self.plain
    }

    /// The file's metadata (fstat) when it was opened.
    pub fn metadata(&self) -> &std::fs::Metadata {
        &self.meta
    }
    /// File length when opened.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// True for an empty file.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The mode in effect and why.
    pub fn decision(&self) -> &Decision {
        &self.plan.decision
    }
    /// The mode with its reason, and the alignment requests and buffers need in it.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }
    /// What the file's filesystem supports.
    pub fn caps(&self) -> &FsCaps {
        &self.plan.caps
    }
    /// The backend in use once I/O has started (`None` before, or for single-request files
    /// that never needed a queue).
    pub fn backend(&self) -> Option<&BackendChoice> {
        self.choice.as_ref()
    }
    /// The path given at open.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// Request size in use.
    pub fn block_size(&self) -> usize {
        self.block
    }
    /// Read-ahead depth in use (may be below the requested depth under a small budget).
    pub fn queue_depth(&self) -> usize {
        self.depth
    }
    /// Buffers this reader leased from the budget (read-ahead plus `extra_buffers`).
    pub fn buffers(&self) -> usize {
        self.lease.count()
    }
    /// The underlying file.
    pub fn file(&self) -> &File {
        &self.file
    }

    fn err(&self, op: &'static str, e: io::Error) -> Error {
        plan::io_error(op, &self.path, e, self.plan.decision.mode, self.plan.flags, &self.plan.caps)
    }

    /// Opens the queue unless the whole file is one request with nothing else in flight,
    /// which is done on the calling thread.
    fn prepare_lane(&mut self) -> Result<()> {
        if self.lane.has_queue() || (self.len <= self.block as u64 && self.lane.in_flight() == 0) {
            return Ok(());
        }
        let (q, choice) = plan::open_queue(self.backend, self.depth + 1, Some(&self.lease), &self.path)?;
        self.lane.open(q);
        self.choice = Some(choice);
        Ok(())
    }

    /// Starts `op`: through the queue, or synchronously when the whole file is one request.
    fn submit(&mut self, op: Op) -> Result<()> {
        self.prepare_lane()?;
        self.lane.push(op);
        Ok(())
    }

    fn note_before(&mut self, off: u64, len: usize) {
        if self.plan.decision.mode != Taken::DropBehind || len == 0 {
            return;
        }
        // The open found nothing cached: a first request over the whole file drops all it reads.
        let whole_cold = std::mem::take(&mut self.cold_at_open) && off == 0 && len as u64 >= self.len;
        let b = if whole_cold {
            Before::Drop
        } else {
            match residency::residency(&self.file, off, len as u64) {
                Ok(r) if r.cached_pages == 0 => Before::Drop,
                Ok(r) if r.cached_pages >= r.total_pages => Before::Keep,
                _ => residency::resident_pages(&self.file, off, len as u64).map(Before::Map).unwrap_or(Before::Keep),
            }
        };
        self.before.insert(off, b);
    }

    fn apply_before(&mut self, off: u64, len: usize) {
        let page = sys::page_size() as u64;
        // Best effort: failing to drop pages loses no data, and the read itself succeeded.
        let _ = match self.before.remove(&off) {
            // The whole file read in one request, nothing of it cached before: one drop of
            // all of it, which covers the pages past its end that `drop` would drop too.
            Some(Before::Drop) if off == 0 && len as u64 >= self.len => {
                self.dropped_all = true;
                residency::drop_range(&self.file, 0, 0)
            }
            Some(Before::Drop) => {
                let start = off / page * page;
                residency::drop_range(&self.file, start, (off + len as u64 - start).div_ceil(page) * page)
            }
            Some(Before::Map(m)) => residency::drop_brought_in(&self.file, off, len as u64, &m),
            Some(Before::Keep) | None => Ok(()),
        };
    }

    // ---- streaming ----

    fn fill(&mut self) -> Result<()> {
        while self.stream_held < self.depth && self.next_submit < self.len {
            let Some(buf) = self.lease.get() else { break };
            let off = self.next_submit;
            let want = crate::conv::fit(self.len - off, self.block);
            let req = round_up(want, self.plan.align);
            self.note_before(off, want);
            let op = Op::owned(OpKind::Read, self.file.clone(), off, buf, 0, req, self.plan.flags, off).map_err(|e| self.err("read", e))?;
            self.next_submit += want as u64;
            self.stream_held += 1;
            // Started with the next flush or wait, several at once (see `next_chunk`).
            self.prepare_lane()?;
            self.lane.push_deferred(op);
        }
        Ok(())
    }

    fn complete_stream(&mut self, c: Completion) -> Result<()> {
        let base = c.op.tag();
        let n = match c.result {
            Ok(n) => n,
            Err(e) => return Err(self.err("read", e)),
        };
        let want = crate::conv::fit(self.len.saturating_sub(base), self.block);
        let mut op = c.op;
        if n > 0 && n < want && n % self.plan.align == 0 {
            // Short read before the end: carry on with the rest of the request.
            op.advance(n);
            return self.submit(op);
        }
        let got = n.min(want);
        if got < want {
            return Err(self.changed(format!("it ended at {} B", base + got as u64)));
        }
        self.apply_before(base, got);
        let Some(buf) = op.into_buf() else {
            return Err(Error::new(ErrorKind::Io, "read", &self.path, "a read-ahead request came back without its buffer"));
        };
        self.ready.insert(base, Chunk { buf, offset: base, len: got });
        Ok(())
    }

    /// The next chunk of the file in order, or `None` at the end. Keeps up to the queue depth
    /// of requests in flight ahead of the caller.
    pub fn next_chunk(&mut self) -> Result<Option<Chunk>> {
        if self.plain {
            return self.next_plain();
        }
        loop {
            if let Some(c) = self.ready.remove(&self.stream_pos) {
                self.stream_pos += c.len as u64;
                self.stream_held -= 1;
                if c.len == 0 {
                    continue;
                }
                self.fill()?;
                // Read-ahead goes to the kernel in batches, as fio resubmits: the requests freed
                // by a burst of completions (a merged request completes its parts together) are
                // submitted together once the burst is consumed, so the block layer can merge
                // them again; at most half the depth waits, and never when the caller would wait
                // next.
                if !self.ready.contains_key(&self.stream_pos) || self.lane.deferred() * 2 >= self.depth {
                    self.lane.flush();
                }
                return Ok(Some(c));
            }
            if self.stream_pos >= self.len {
                self.check_unchanged()?;
                return Ok(None);
            }
            self.fill()?;
            if self.stream_held == 0 {
                return Err(Error::new(ErrorKind::Io, "read", &self.path, "no buffer available for read-ahead"));
            }
            // Only stream reads are in flight here: read_at drains its own before returning.
            let c = self.lane.wait().map_err(|e| self.err("read", e))?;
            self.complete_stream(c)?;
        }
    }

    /// The next chunk of a file read with plain reads: one read(2) (retried when interrupted),
    /// `None` once it returns end of file.
    fn next_plain(&mut self) -> Result<Option<Chunk>> {
        if self.at_end {
            return Ok(None);
        }
        let Some(mut buf) = self.lease.get() else {
            return Err(Error::new(ErrorKind::Io, "read", &self.path, "no buffer available for the next read"));
        };
        let n = sys::read(&*self.file, &mut buf[..self.block]).map_err(|e| self.err("read", e))?;
        if n == 0 {
            self.at_end = true;
            return Ok(None);
        }
        let c = Chunk { buf, offset: self.stream_pos, len: n };
        self.stream_pos += n as u64;
        self.len = self.stream_pos;
        Ok(Some(c))
    }

    /// The error for a file that changed while it was read: its size or modification time is
    /// not what it was at open (`what` says what was seen).
    fn changed(&self, what: String) -> Error {
        let was = self.stamp.map_or(self.len, |s| s.len);
        Error::new(ErrorKind::Changed, "read", &self.path, format!("file changed as it was read ({was} B at open; {what})"))
    }

    /// Fails where the file's size or modification time is no longer what it was at open: a
    /// file written, truncated or extended while it was read, whose copy, archive member or
    /// checksum would mix two versions or stop short. Called at the end of every stream; for
    /// callers that read with [`Reader::read_at`], theirs to call when they are done.
    pub fn check_unchanged(&self) -> Result<()> {
        let Some(at_open) = self.stamp else { return Ok(()) };
        let now = Stamp::of(&self.file.metadata().map_err(|e| self.err("fstat", e))?);
        if now != at_open {
            let what = if now.len == at_open.len { "modified since".to_string() } else { format!("{} B now", now.len) };
            return Err(self.changed(what));
        }
        Ok(())
    }

    /// Restarts the stream at `pos` (at most the length). Read-ahead in flight is waited for
    /// and dropped; the next [`Reader::next_chunk`] starts at `pos` rounded down to the
    /// alignment ([`Chunk::offset`] says where), and `std::io::Read` continues at `pos` exactly.
    /// Errors of the dropped read-ahead are not reported: its data is not used.
    pub fn seek_stream(&mut self, pos: u64) -> Result<()> {
        let pos = pos.min(self.len);
        self.cur = None;
        self.cur_pos = 0;
        // Only stream reads are in flight here (read_at drains its own before returning).
        while self.stream_held > self.ready.len() {
            let c = self.lane.wait().map_err(|e| self.err("read", e))?;
            if self.complete_stream(c).is_err() {
                // The failed request and its buffer are gone.
                self.stream_held -= 1;
            }
        }
        self.ready.clear();
        self.before.clear();
        self.stream_held = 0;
        let start = pos / self.plan.align as u64 * self.plan.align as u64;
        self.stream_pos = start;
        self.next_submit = start;
        self.skip = crate::conv::fit(pos - start, self.plan.align);
        Ok(())
    }

    // ---- random access ----

    /// Reads into `mem` at `offset`; `mem` satisfies the mode's alignment (address, offset
    /// and length aligned for direct). Returns bytes read (short at EOF).
    fn read_raw(&mut self, mem: &mut [u8], offset: u64) -> Result<usize> {
        let (file, block, depth, align, flags) = (self.file.clone(), self.block, self.depth, self.plan.align, self.plan.flags);
        crate::backend::read_into(self, &file, mem, offset, block, depth, align, flags)
    }

    /// Reads into `buf` at file `offset`: any buffer, any offset, any length. Returns the bytes
    /// read, short only at end of file. Aligned memory is read into directly; unaligned edges
    /// (direct mode) go through the reader's aligned buffers.
    pub fn read_at(&mut self, buf: &mut [u8], offset: u64) -> Result<usize> {
        if self.plain {
            // Its size says nothing: positioned reads to the end of what it holds (ESPIPE for a
            // FIFO or a socket).
            let mut done = 0;
            while done < buf.len() {
                let at = offset + done as u64;
                let n = sys::pread(&*self.file, &mut buf[done..], at).map_err(|e| self.err("read", e))?;
                if n == 0 {
                    break;
                }
                done += n;
            }
            return Ok(done);
        }
        if offset >= self.len || buf.is_empty() {
            return Ok(0);
        }
        let want = crate::conv::fit(self.len - offset, buf.len());
        let buf = &mut buf[..want];
        if self.plan.decision.mode != Taken::Direct {
            return self.read_raw(buf, offset);
        }
        let a = self.plan.align;
        if offset % a as u64 == 0 && buf.as_ptr() as usize % self.plan.mem_align == 0 {
            let bulk = want / a * a;
            let mut done = 0;
            if bulk > 0 {
                done = self.read_raw(&mut buf[..bulk], offset)?;
                if done < bulk {
                    return Ok(done);
                }
            }
            if want > bulk {
                done += self.bounce(&mut buf[bulk..], offset + bulk as u64)?;
            }
            return Ok(done);
        }
        self.bounce(buf, offset)
    }

    /// Direct reads of the aligned span covering `[offset, offset+buf.len())` into aligned
    /// buffers, copied out to `buf`.
    fn bounce(&mut self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let a = self.plan.align as u64;
        let lo = offset / a * a;
        let hi = (offset + buf.len() as u64).div_ceil(a) * a;
        let mut copied = 0usize;
        let mut p = lo;
        while p < hi {
            let piece = crate::conv::fit(hi - p, self.block);
            let mut b = match self.lease.get() {
                Some(b) => b,
                // Every leased buffer is held by stream read-ahead: borrow one outside the
                // budget rather than deadlock (only when streaming and read_at are mixed).
                None => AlignedBuf::new(self.block, self.lease.align()),
            };
            let n = self.read_raw(&mut b[..piece], p)?;
            let s = offset.max(p);
            let e = (offset + buf.len() as u64).min(p + n as u64);
            if e > s {
                // All within one piece of at most `block` bytes, and within `buf`.
                let at = |x: u64, from: u64| crate::conv::usize_of(x - from);
                buf[at(s, offset)..at(e, offset)].copy_from_slice(&b[at(s, p)..at(e, p)]);
                copied += at(e, s);
            }
            if n < piece {
                break;
            }
            p += piece as u64;
        }
        Ok(copied)
    }

    /// Reads the whole file into one aligned buffer (direct into it, no copy).
    pub fn read_all(&mut self) -> Result<Chunk> {
        if self.plain {
            let mut all = Vec::new();
            while let Some(c) = self.next_plain()? {
                all.extend_from_slice(&c);
            }
            let mut buf = AlignedBuf::try_new(all.len().max(1), sys::page_size())
                .ok_or_else(|| Error::new(ErrorKind::InvalidInput, "read", &self.path, format!("{} B do not fit in memory", all.len())))?;
            buf[..all.len()].copy_from_slice(&all);
            return Ok(Chunk { buf, offset: 0, len: all.len() });
        }
        let cap = usize::try_from(self.len).ok().and_then(|l| l.max(1).checked_add(self.plan.align - 1)).map(|l| l / self.plan.align * self.plan.align);
        let Some((cap, mut buf)) = cap.and_then(|c| AlignedBuf::try_new(c, self.plan.mem_align.max(sys::page_size())).map(|b| (c, b))) else {
            return Err(Error::new(ErrorKind::InvalidInput, "read", &self.path, format!("a {} B file does not fit in memory", self.len)));
        };
        let len = crate::conv::fit(self.len, cap);
        let want = if self.plan.decision.mode == Taken::Direct { cap } else { len };
        let n = if self.len == 0 { 0 } else { self.read_raw(&mut buf[..want], 0)? };
        Ok(Chunk { buf, offset: 0, len: n.min(len) })
    }
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader").field("path", &self.path).field("len", &self.len).field("mode", &self.plan.decision.mode).finish()
    }
}

impl Driver for Reader {
    type Error = Error;
    fn prepare(&mut self, _len: usize) -> Result<()> {
        self.prepare_lane()
    }
    fn lane(&mut self) -> &mut Lane {
        &mut self.lane
    }
    fn other(&mut self, c: Completion) -> Result<()> {
        self.complete_stream(c)
    }
    fn error(&mut self, e: io::Error) -> Error {
        self.err("read", e)
    }
    fn before(&mut self, off: u64, len: usize) {
        self.note_before(off, len);
    }
    fn after(&mut self, off: u64, n: usize) {
        self.apply_before(off, n);
    }
}

impl Reader {
    /// Copies the next bytes of the stream into `out` (what `std::io::Read::read` does, with
    /// the engine's error): at most to the end of the current chunk; 0 at end of file.
    pub fn read_stream(&mut self, out: &mut [u8]) -> Result<usize> {
        loop {
            if let Some(c) = &self.cur {
                if self.cur_pos < c.len {
                    let n = out.len().min(c.len - self.cur_pos);
                    out[..n].copy_from_slice(&c[self.cur_pos..self.cur_pos + n]);
                    self.cur_pos += n;
                    return Ok(n);
                }
            }
            // Give the finished chunk's buffer back before asking for more read-ahead.
            self.cur = None;
            match self.next_chunk()? {
                Some(c) => {
                    self.cur = Some(c);
                    self.cur_pos = std::mem::take(&mut self.skip);
                }
                None => return Ok(0),
            }
        }
    }
}

impl Read for Reader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        Ok(self.read_stream(out)?)
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        // Let read-ahead finish so drop-behind can clean up after it; the queue's own Drop
        // would wait for it anyway.
        while self.lane.in_flight() > 0 {
            match self.lane.wait() {
                Ok(Completion { op, result: Ok(n) }) if op.owner() == 0 => self.apply_before(op.tag(), n),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        // Best effort, as drop-behind: failing to drop pages loses no data.
        match self.plan.decision.mode {
            // Pages past the end hold no data of the file, yet some filesystems fill them when
            // they decompress a whole block (squashfs caches its 128 KiB block in the file's
            // mapping): drop them too.
            Taken::DropBehind if self.len > 0 && !self.dropped_all => {
                let page = sys::page_size() as u64;
                let _ = residency::drop_range(&self.file, self.len.div_ceil(page) * page, 0);
            }
            Taken::Direct if self.cold_direct && residency::cachestat(self.file.as_fd(), 0, 0).is_ok_and(|c| c.nr_cache > 0) => {
                let _ = residency::drop_range(&self.file, 0, 0);
            }
            _ => {}
        }
    }
}
