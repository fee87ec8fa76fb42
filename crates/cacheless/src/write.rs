//! Writing: streaming `Write` or zero-copy chunks, in the mode chosen per file, made durable
//! and renamed into place only when complete.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use serde::Serialize;

use crate::backend::{BackendChoice, Completion, Lane, Op, OpKind};
use crate::buf::{round_up, AlignedBuf, Budget, Lease, LeaseRequest};
use crate::caps::FsCaps;
use crate::error::{Error, ErrorKind, Result};
use crate::options::{Durability, IoOptions, Naming};
use crate::pending::{initial_mode, NewName, PendingFile};
use crate::plan::{self, Plan};
use crate::policy::{self, Decision, Taken};
use crate::read::Chunk;
use crate::residency;
use crate::sys::{self, set_direct};

/// Write-behind window: after each window is written, its writeback is started, and the
/// window before it is waited for and dropped from the cache. 8 MiB keeps the dirty
/// footprint to about two windows while leaving the device a deep enough queue.
pub const WRITE_BEHIND_WINDOW: u64 = 8 << 20;

/// How to create a [`Writer`].
#[derive(Debug, Clone)]
pub struct WriteOptions {
    /// Mode, backend, request size, writes in flight (0 writes through: each request completes
    /// before the call returns) and budget.
    pub io: IoOptions,
    /// Final size, when known: picks the mode, and preallocates the file.
    pub size_hint: Option<u64>,
    /// Under a temporary name, renamed into place in `finish` (default), or under the final
    /// name from the start; either way an unfinished file is removed.
    pub naming: Naming,
    /// [`Durability::EachFile`] (the default) makes the file durable (fsync of its data and
    /// attributes, and of the directory after the rename) before `finish` returns; under any
    /// other variant the writer syncs nothing, and the caller makes the file durable
    /// (`AtTheEnd`, `NamedAfterSync`: the job's syncfs) or nobody does (`Off`).
    pub durability: Durability,
    /// Permission bits to set (default: 0666 less the umask, as open(2) makes them).
    pub permissions: Option<u32>,
    /// The mode the file is created with, before the umask (see [`crate::FileAttrs::create`]).
    pub create_mode: Option<u32>,
    /// Modification time to set.
    pub mtime: Option<SystemTime>,
    /// Access time to set.
    pub atime: Option<SystemTime>,
}

impl WriteOptions {
    /// Defaults (auto mode and backend, atomic, durable) with `budget`.
    pub fn new(budget: Budget) -> WriteOptions {
        WriteOptions::from(IoOptions::new(budget))
    }
}

impl From<IoOptions> for WriteOptions {
    /// Writes with a job's shared settings: atomic, durable, no size hint or attributes.
    fn from(io: IoOptions) -> WriteOptions {
        WriteOptions {
            io,
            size_hint: None,
            naming: Naming::Temporary,
            durability: Durability::EachFile,
            permissions: None,
            create_mode: None,
            mtime: None,
            atime: None,
        }
    }
}

/// What a finished write did.
#[derive(Debug, Clone, Serialize)]
pub struct WriteReport {
    /// The final path.
    #[serde(serialize_with = "crate::quote::serialize_path")]
    pub path: PathBuf,
    /// Bytes written.
    pub bytes: u64,
    /// Mode used and why.
    pub decision: Decision,
    /// Bytes written with O_DIRECT.
    pub direct_bytes: u64,
    /// Unaligned tail written after clearing O_DIRECT.
    pub tail_bytes: u64,
    /// fsync'ed (and the directory fsync'ed) before returning.
    pub synced: bool,
    /// The backend used for queued writes, if any.
    pub backend: Option<BackendChoice>,
}

/// A file being written. Drop it without [`Writer::finish`] and it is removed.
pub struct Writer {
    file: Arc<File>,
    path: PathBuf,
    /// The new file, until it is published (or removed with the writer).
    entry: Option<PendingFile>,
    /// The mode, its reason and the alignment it asks for.
    plan: Plan,
    opts: WriteOptions,
    block: usize,
    depth: usize,
    lease: Option<Lease>,
    lease_count: usize,
    lane: Lane,
    choice: Option<BackendChoice>,
    cur: Option<AlignedBuf>,
    cur_len: usize,
    /// File offset of the next byte handed to us.
    pos: u64,
    /// Offsets of writes in flight (for write-behind's contiguous-done point).
    outstanding: BTreeSet<u64>,
    /// Write-behind: start of the range not yet dropped from the cache.
    wb_dropped: u64,
    /// Write-behind: start of the range whose writeback has not been started.
    wb_started: u64,
    /// The size to preallocate at the first write, when it is still to be done.
    prealloc: Option<u64>,
    preallocated: Option<u64>,
    direct_bytes: u64,
    /// Positioned writes ([`Writer::write_at`]): the bytes handed over so far, and the file's
    /// unaligned last bytes, written by `finish` after O_DIRECT is cleared.
    placed: u64,
    tail_at: Option<(u64, Vec<u8>)>,
}

impl Writer {
    /// Creates `path` (atomically by default: see [`WriteOptions::naming`]).
    pub fn create(path: impl AsRef<Path>, opts: &WriteOptions) -> Result<Writer> {
        let path = path.as_ref();
        let (dir, name) = sys::open_parent(path)?;
        Writer::create_in_shared(Arc::new(dir), name, path, opts)
    }

    /// Creates `name` (a single path component) inside the directory `dir`, relative to it and
    /// without following a symlink at `name`; `display_path` is used in messages and reports.
    pub fn create_in(dir: BorrowedFd<'_>, name: &OsStr, display_path: &Path, opts: &WriteOptions) -> Result<Writer> {
        let dir = dir.try_clone_to_owned().map_err(|e| Error::io("dup", display_path, e))?;
        Writer::create_in_shared(Arc::new(dir), name, display_path, opts)
    }

    /// As [`Writer::create_in`], holding the directory's descriptor the caller shares (one
    /// descriptor for every file written in it, none duplicated).
    pub fn create_in_shared(dir: Arc<OwnedFd>, name: &OsStr, path: &Path, opts: &WriteOptions) -> Result<Writer> {
        sys::check_name("create", path, name)?;
        plan::check_block_size("create", path, opts.io.block_size)?;
        let naming = match opts.naming {
            Naming::Temporary => NewName::Temporary,
            Naming::Final => NewName::Final,
        };
        let entry = PendingFile::create(dir, name, path, naming, initial_mode(opts.permissions, opts.create_mode), false)?;
        // A failure to decide how to write removes the file with `entry`.
        let plan = plan::choose(entry.file(), path, "create", None, |caps| policy::decide_write(opts.io.mode, caps, opts.size_hint))?;
        Ok(Writer::new(entry, path, opts, plan))
    }

    fn new(entry: PendingFile, path: &Path, opts: &WriteOptions, plan: Plan) -> Writer {
        let file = entry.file().clone();
        let align = plan.align;
        let page = sys::page_size();
        let mut block = round_up(opts.io.block_size.max(align), align.max(page));
        let mut lease_count = opts.io.queue_depth.max(1) + 1;
        if let Some(h) = opts.size_hint {
            let h = crate::conv::usize_of(h);
            if h < block {
                block = round_up(h.max(1), align.max(page));
                lease_count = 1;
            } else {
                // Never more buffers in flight than the file has blocks.
                lease_count = lease_count.min(h.div_ceil(block) + 1);
            }
        }
        // Preallocation keeps the file contiguous and lets direct writes land in allocated
        // space. Done at the first write, not here: a writer killed before it wrote anything
        // leaves no full-size temporary behind.
        let prealloc = opts.size_hint.filter(|&h| h >= policy::SMALL_WRITE && plan.decision.mode != Taken::Buffered);
        Writer {
            file,
            path: path.to_path_buf(),
            entry: Some(entry),
            plan,
            opts: opts.clone(),
            block,
            depth: opts.io.queue_depth.max(1),
            lease: None,
            lease_count,
            lane: Lane::new(),
            choice: None,
            cur: None,
            cur_len: 0,
            pos: 0,
            outstanding: BTreeSet::new(),
            wb_dropped: 0,
            wb_started: 0,
            prealloc,
            preallocated: None,
            direct_bytes: 0,
            placed: 0,
            tail_at: None,
        }
    }

    /// The mode in effect and why.
    pub fn decision(&self) -> &Decision {
        &self.plan.decision
    }

    /// Sets the permission bits the file gets when finished (in place of `opts.permissions`).
    pub fn set_permissions(&mut self, permissions: Option<u32>) {
        self.opts.permissions = permissions;
    }
    /// The mode with its reason, and the alignment requests and buffers need in it.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }
    /// What the destination's filesystem supports.
    pub fn caps(&self) -> &FsCaps {
        &self.plan.caps
    }
    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// Bytes accepted so far.
    pub fn position(&self) -> u64 {
        self.pos + self.cur_len as u64
    }
    /// The underlying (temporary, until finished) file.
    pub fn file(&self) -> &File {
        &self.file
    }

    fn err(&self, op: &'static str, e: io::Error) -> Error {
        plan::io_error(op, &self.path, e, self.plan.decision.mode, self.plan.flags, &self.plan.caps)
    }

    fn get_buf(&mut self) -> Result<AlignedBuf> {
        let lease = match &self.lease {
            Some(l) => l.clone(),
            None => {
                let l = self.opts.io.budget.lease(LeaseRequest::buffers(self.block, self.lease_count).aligned(sys::page_size().max(self.plan.mem_align)));
                self.lease = Some(l.clone());
                l
            }
        };
        loop {
            if let Some(b) = lease.get() {
                return Ok(b);
            }
            // Every buffer is in flight: wait for one to come back.
            self.reap_one()?;
        }
    }

    fn submit(&mut self, buf: AlignedBuf, len: usize) -> Result<()> {
        let off = self.pos;
        self.pos += len as u64;
        self.submit_at(off, buf, len)
    }

    /// Queues the write of `buf[..len]` at `off` (the caller keeps `pos`).
    fn submit_at(&mut self, off: u64, buf: AlignedBuf, len: usize) -> Result<()> {
        if let Some(h) = self.prealloc.take() {
            // Unsupported filesystems just skip it.
            if sys::fallocate(&*self.file, h, false).is_ok() {
                self.preallocated = Some(h);
            }
        }
        let op = Op::owned(OpKind::Write, self.file.clone(), off, buf, 0, len, self.plan.flags, off).map_err(|e| self.err("write", e))?;
        let one_request = !self.lane.has_queue() && self.opts.size_hint.is_some_and(|h| h <= self.block as u64);
        if !one_request {
            while self.lane.in_flight() >= self.depth {
                self.reap_one()?;
            }
            if !self.lane.has_queue() {
                let (q, choice) = plan::open_queue(self.opts.io.backend, self.depth, self.lease.as_ref(), &self.path)?;
                self.lane.open(q);
                self.choice = Some(choice);
            }
        }
        if self.plan.decision.mode == Taken::Direct {
            self.direct_bytes += len as u64;
        }
        self.outstanding.insert(off);
        // A one-request file needs no queue: the lane does it on this thread.
        self.lane.push(op);
        if one_request || self.opts.io.queue_depth == 0 {
            self.drain()?;
        }
        Ok(())
    }

    fn reap_one(&mut self) -> Result<()> {
        if self.lane.in_flight() == 0 {
            return Err(Error::new(ErrorKind::Io, "write", &self.path, "no write in flight to wait for"));
        }
        let c = self.lane.wait().map_err(|e| self.err("write", e))?;
        self.complete(c)
    }

    fn reap_ready(&mut self) -> Result<()> {
        while let Some(c) = self.lane.poll() {
            self.complete(c)?;
        }
        Ok(())
    }

    fn complete(&mut self, c: Completion) -> Result<()> {
        let off = c.op.tag();
        self.outstanding.remove(&off);
        if let Err(e) = c.result {
            return Err(self.err("write", e));
        }
        if self.plan.decision.mode == Taken::DropBehind {
            self.write_behind()?;
        }
        Ok(())
    }

    /// Everything below this offset has been written (handed to the page cache or device).
    fn done_upto(&self) -> u64 {
        self.outstanding.iter().next().copied().unwrap_or(self.pos)
    }

    /// The classic write-behind: start writeback of each full window as soon as it is written,
    /// then wait for the window before it and drop it from the cache.
    fn write_behind(&mut self) -> Result<()> {
        let done = self.done_upto();
        while done >= self.wb_started + WRITE_BEHIND_WINDOW {
            let start = self.wb_started;
            residency::sync_range(&self.file, start, WRITE_BEHIND_WINDOW, sys::consts::SYNC_FILE_RANGE_WRITE).map_err(|e| self.err("sync_file_range", e))?;
            self.wb_started += WRITE_BEHIND_WINDOW;
            if start >= self.wb_dropped + WRITE_BEHIND_WINDOW {
                let prev = self.wb_dropped;
                let len = start - prev;
                residency::sync_range(
                    &self.file,
                    prev,
                    len,
                    sys::consts::SYNC_FILE_RANGE_WAIT_BEFORE | sys::consts::SYNC_FILE_RANGE_WRITE | sys::consts::SYNC_FILE_RANGE_WAIT_AFTER,
                )
                .map_err(|e| self.err("sync_file_range", e))?;
                let _ = residency::drop_range(&self.file, prev, len);
                self.wb_dropped = start;
            }
        }
        Ok(())
    }

    /// Hands a chunk to the writer without copying when it can go out as one request (its
    /// buffer is aligned and, for direct writes, its length is aligned or it is the last
    /// chunk); otherwise copies it.
    pub fn write_chunk(&mut self, chunk: Chunk) -> Result<()> {
        self.reap_ready()?;
        let (buf, len) = chunk.into_parts();
        if len == 0 {
            return Ok(());
        }
        let aligned_mem = buf.as_ptr() as usize % self.plan.mem_align == 0;
        if self.cur_len == 0 && aligned_mem && self.pos % self.plan.align as u64 == 0 {
            if len % self.plan.align == 0 {
                return self.submit(buf, len);
            }
            // An unaligned length can only be the file's tail: keep it as the current buffer
            // (if it fits one request, so that later writes can append to it).
            if self.cur.is_none() && len <= buf.capacity().min(self.block) {
                self.cur = Some(buf);
                self.cur_len = len;
                return Ok(());
            }
        }
        self.write_bytes(&buf[..len])
    }

    /// Writes `buf[..len]` at `offset`, in any order, for a file whose size is known
    /// ([`WriteOptions::size_hint`]): what lands data as it arrives out of order (ranges
    /// downloaded in parallel). `offset` and `buf` must be aligned as [`Writer::plan`] says and
    /// `len` a multiple of the alignment, except for the chunk that ends the file; every byte up
    /// to the size must be written once before [`Writer::finish`], which fails otherwise. The
    /// buffer goes to the kernel as it is (no copy) and returns to its lease when written. Not
    /// to be mixed with [`Writer::write_chunk`] or [`Writer::write_bytes`].
    pub fn write_at(&mut self, offset: u64, buf: AlignedBuf, len: usize) -> Result<()> {
        self.reap_ready()?;
        let Some(size) = self.opts.size_hint else {
            return Err(Error::new(ErrorKind::InvalidInput, "write", &self.path, "positioned writes need the file's size (size_hint)"));
        };
        let align = self.plan.align;
        let end = offset.checked_add(len as u64).filter(|&e| e <= size && len <= buf.capacity());
        let aligned = offset % align as u64 == 0 && buf.as_ptr() as usize % self.plan.mem_align == 0;
        let whole = len % align == 0 || end == Some(size);
        if self.cur.is_some() || end.is_none() || !aligned || !whole {
            let why = format!("a positioned write of {len} B at {offset} does not fit a file of {size} B aligned to {align} B");
            return Err(Error::new(ErrorKind::InvalidInput, "write", &self.path, why));
        }
        self.placed += len as u64;
        self.pos = self.pos.max(offset + len as u64);
        let bulk = if self.plan.decision.mode == Taken::Direct { len / align * align } else { len };
        if bulk < len {
            self.tail_at = Some((offset + bulk as u64, buf[bulk..len].to_vec()));
        }
        if bulk == 0 {
            return Ok(());
        }
        self.submit_at(offset, buf, bulk)
    }

    /// Waits for one write in flight to complete, so that its buffer returns to its lease
    /// (a caller of [`Writer::write_at`] that needs a buffer back); false when none is in flight.
    pub fn wait_one(&mut self) -> Result<bool> {
        if self.lane.in_flight() == 0 {
            return Ok(false);
        }
        self.reap_one()?;
        Ok(true)
    }

    /// Writes all of `data` (buffered into whole requests; [`Writer::finish`] writes the
    /// rest). `std::io::Write` does the same with the error wrapped in an `io::Error`.
    pub fn write_bytes(&mut self, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            if self.cur.is_none() {
                let b = self.get_buf()?;
                self.cur = Some(b);
                self.cur_len = 0;
            }
            let Some(cur) = self.cur.as_mut() else { continue };
            let cap = cur.capacity().min(self.block);
            let n = data.len().min(cap - self.cur_len);
            cur[self.cur_len..self.cur_len + n].copy_from_slice(&data[..n]);
            self.cur_len += n;
            data = &data[n..];
            if self.cur_len == cap {
                if let Some(b) = self.cur.take() {
                    let len = std::mem::take(&mut self.cur_len);
                    self.submit(b, len)?;
                }
            }
        }
        Ok(())
    }

    /// Waits for every write in flight; the first error wins. Stops early only if the queue
    /// can no longer be waited on (its writes are then leaked by the queue, never freed).
    fn drain(&mut self) -> Result<()> {
        let mut first = None;
        while self.lane.in_flight() > 0 {
            let c = match self.lane.wait() {
                Ok(c) => c,
                Err(e) => {
                    first.get_or_insert(self.err("write", e));
                    break;
                }
            };
            if let Err(e) = self.complete(c) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Writes what is buffered (the unaligned tail after clearing O_DIRECT), applies permissions
    /// and times, makes the file durable unless `sync` is off, and renames it into place.
    pub fn finish(mut self) -> Result<WriteReport> {
        let report = self.write_rest()?;
        // Where the rename happened and only the directory's fsync failed, the complete,
        // durable file stays in place (removing it would also lose the file it replaced).
        self.entry.take().map_or(Ok(()), |e| e.publish(self.opts.durability.each_file()))?;
        Ok(report)
    }

    /// As [`Writer::finish`] for an atomic writer, but leaves the complete file under its
    /// temporary name, to be named later: by a [`FileCreator`](crate::FileCreator) after the
    /// syncfs that makes it durable ([`FileCreator::publish_after_sync`](crate::FileCreator::publish_after_sync)),
    /// or by a copy when it commits. Fails for a writer that is not atomic (its file has its
    /// final name already).
    pub fn finish_pending(mut self) -> Result<(WriteReport, PendingFile)> {
        if !self.entry.as_ref().is_some_and(PendingFile::unpublished) {
            return Err(Error::new(ErrorKind::InvalidInput, "finish", &self.path, "not written under a temporary name"));
        }
        let report = self.write_rest()?;
        match self.entry.take() {
            Some(e) => Ok((report, e)),
            None => Err(Error::new(ErrorKind::InvalidInput, "finish", &self.path, "finished already")),
        }
    }

    /// Everything [`Writer::finish`] does before the rename.
    fn write_rest(&mut self) -> Result<WriteReport> {
        let mut tail_bytes = 0u64;
        if let Some(buf) = self.cur.take() {
            let len = std::mem::take(&mut self.cur_len);
            if self.plan.decision.mode == Taken::Direct && len % self.plan.align != 0 {
                let bulk = len / self.plan.align * self.plan.align;
                let tail = buf[bulk..len].to_vec();
                if bulk > 0 {
                    self.submit(buf, bulk)?;
                } else {
                    drop(buf);
                }
                self.drain()?;
                // The unaligned tail: O_DIRECT off, then an ordinary (uncached if possible) write.
                set_direct(&self.file, false).map_err(|e| self.err("fcntl", e))?;
                sys::write_uncached(&self.file, &tail, self.pos, &self.plan.caps).map_err(|e| self.err("write", e))?;
                self.pos += tail.len() as u64;
                tail_bytes = tail.len() as u64;
            } else if len > 0 {
                self.submit(buf, len)?;
            }
        }
        if let Some((at, tail)) = self.tail_at.take() {
            self.drain()?;
            if self.plan.decision.mode == Taken::Direct {
                set_direct(&self.file, false).map_err(|e| self.err("fcntl", e))?;
            }
            sys::write_uncached(&self.file, &tail, at, &self.plan.caps).map_err(|e| self.err("write", e))?;
            tail_bytes = tail.len() as u64;
        }
        self.drain()?;
        let total = self.pos;
        if self.placed > 0 && self.placed != total {
            let why = format!("positioned writes gave {} of its {total} B", self.placed);
            return Err(Error::new(ErrorKind::InvalidInput, "write", &self.path, why));
        }
        if self.preallocated.is_some_and(|p| p != total) {
            self.file.set_len(total).map_err(|e| self.err("truncate", e))?;
        }
        // Attributes before the sync, so that it makes them durable with the data.
        sys::apply_attrs(&self.file, self.opts.permissions, self.opts.atime, self.opts.mtime).map_err(|(op, e)| self.err(op, e))?;
        if self.opts.durability.each_file() {
            sys::fsync(&self.file, &self.path)?;
        }
        // Drop what went through the cache: the direct tail, the last write-behind windows.
        match self.plan.decision.mode {
            Taken::Direct if tail_bytes > 0 => {
                let page = sys::page_size() as u64;
                let start = (total - tail_bytes) / page * page;
                // To the end of the file (length 0): fadvise(DONTNEED) keeps a partial last page
                // of a range that stops short of a page boundary, which a tail always is.
                let _ = residency::evict(&self.file, start, 0);
            }
            Taken::DropBehind => {
                let _ = residency::evict(&self.file, self.wb_dropped, 0);
            }
            // RWF_DONTCACHE drops pages as their writeback ends, but not always every one (the
            // filesystem matrix saw a page of a 2 MiB file stay on ext4). The file is new, so
            // every page of it came from this writer: drop what is left.
            Taken::DontCache => {
                let _ = residency::drop_range(&self.file, 0, 0);
            }
            _ => {}
        }
        Ok(WriteReport {
            path: self.path.clone(),
            bytes: total,
            decision: self.plan.decision.clone(),
            direct_bytes: self.direct_bytes,
            tail_bytes,
            synced: self.opts.durability.each_file(),
            backend: self.choice.clone(),
        })
    }
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("path", &self.path).field("mode", &self.plan.decision.mode).field("position", &self.position()).finish()
    }
}

impl Write for Writer {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.write_bytes(data)?;
        Ok(data.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        // Data is pushed out in whole requests; `finish` writes the rest and makes it durable.
        Ok(())
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Unfinished: the writes in flight end first (their buffers are the kernel's until
        // then), then the file goes with its entry, and what it put in the cache with it.
        if self.entry.is_some() {
            let _ = self.drain();
        }
    }
}
