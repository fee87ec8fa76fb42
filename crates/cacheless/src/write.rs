//! Writing: streaming `Write` or zero-copy chunks, in the mode chosen per file, made durable
//! and renamed into place only when complete.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use rustix::fs::{AtFlags, Mode as FMode, OFlags};
use serde::Serialize;

use crate::backend::{run_sync, BackendChoice, BackendKind, Completion, Op, OpKind, Queue};
use crate::buf::{round_up, AlignedBuf, Budget, Lease};
use crate::caps::{FsCaps, RWF_DONTCACHE};
use crate::error::{Error, ErrorKind, Result};
use crate::policy::{self, Decision, Mode};
use crate::read::{Chunk, DEFAULT_BLOCK_SIZE, DEFAULT_QUEUE_DEPTH};
use crate::setup::{self, set_direct, Chosen};
use crate::residency;

/// Write-behind window: after each window is written, its writeback is started, and the
/// window before it is waited for and dropped from the cache. 8 MiB keeps the dirty
/// footprint to about two windows while leaving the device a deep enough queue.
pub const WRITE_BEHIND_WINDOW: u64 = 8 << 20;

/// How to create a [`Writer`].
#[derive(Debug, Clone)]
pub struct WriteOptions {
    /// Requested mode (default auto).
    pub mode: Mode,
    /// Requested backend (default auto).
    pub backend: BackendKind,
    /// Size of each write request; rounded up to the O_DIRECT alignment.
    pub block_size: usize,
    /// Writes in flight; 0 writes through (each request completes before the call returns).
    pub queue_depth: usize,
    /// The memory budget buffers come out of.
    pub budget: Budget,
    /// Final size, when known: picks the mode, and preallocates the file.
    pub size_hint: Option<u64>,
    /// Write under a temporary name beside the destination and rename it into place in
    /// `finish` (default). When false, write under the final name, which must not exist;
    /// either way an unfinished file is removed.
    pub atomic: bool,
    /// Make the data durable (fdatasync, and fsync of the directory after the rename) before
    /// `finish` returns (default true).
    pub sync: bool,
    /// Permission bits to set (default: 0666 less the umask, as open(2) makes them).
    pub permissions: Option<u32>,
    /// Modification time to set.
    pub mtime: Option<SystemTime>,
    /// Access time to set.
    pub atime: Option<SystemTime>,
}

impl WriteOptions {
    /// Defaults: auto mode and backend, atomic, durable.
    pub fn new(budget: Budget) -> WriteOptions {
        WriteOptions {
            mode: Mode::Auto,
            backend: BackendKind::Auto,
            block_size: DEFAULT_BLOCK_SIZE,
            queue_depth: DEFAULT_QUEUE_DEPTH,
            budget,
            size_hint: None,
            atomic: true,
            sync: true,
            permissions: None,
            mtime: None,
            atime: None,
        }
    }
}

/// What a finished write did.
#[derive(Debug, Clone, Serialize)]
pub struct WriteReport {
    /// The final path.
    pub path: PathBuf,
    /// Bytes written.
    pub bytes: u64,
    /// Mode used and why.
    pub decision: Decision,
    /// Bytes written with O_DIRECT.
    pub direct_bytes: u64,
    /// Unaligned tail written after clearing O_DIRECT.
    pub tail_bytes: u64,
    /// fdatasync'ed (and the directory fsync'ed) before returning.
    pub synced: bool,
    /// The backend used for queued writes, if any.
    pub backend: Option<BackendChoice>,
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A file being written. Drop it without [`Writer::finish`] and it is removed.
pub struct Writer {
    file: Arc<File>,
    path: PathBuf,
    dir: OwnedFd,
    name: OsString,
    tmp: Option<OsString>,
    decision: Decision,
    caps: Arc<FsCaps>,
    opts: WriteOptions,
    /// Offset alignment for direct writes (1 otherwise).
    align: usize,
    mem_align: usize,
    block: usize,
    depth: usize,
    lease: Option<Lease>,
    lease_count: usize,
    queue: Option<Box<dyn Queue>>,
    choice: Option<BackendChoice>,
    flags: i32,
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
    preallocated: Option<u64>,
    direct_bytes: u64,
    finished: bool,
}

impl Writer {
    /// Creates `path` (atomically by default: see [`WriteOptions::atomic`]).
    pub fn create(path: impl AsRef<Path>, opts: &WriteOptions) -> Result<Writer> {
        let path = path.as_ref();
        let name = path.file_name().ok_or_else(|| Error::new(ErrorKind::InvalidInput, "create", path, "no file name"))?;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let dir = rustix::fs::open(parent, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, FMode::empty())
            .map_err(|e| Error::io("open directory", parent, e.into()))?;
        Writer::create_in_owned(dir, name, path, opts)
    }

    /// Creates `name` (a single path component) inside the directory `dir`, relative to it and
    /// without following a symlink at `name`; `display_path` is used in messages and reports.
    pub fn create_in(dir: BorrowedFd<'_>, name: &OsStr, display_path: &Path, opts: &WriteOptions) -> Result<Writer> {
        let dir = dir.try_clone_to_owned().map_err(|e| Error::io("dup", display_path, e))?;
        Writer::create_in_owned(dir, name, display_path, opts)
    }

    fn create_in_owned(dir: OwnedFd, name: &OsStr, path: &Path, opts: &WriteOptions) -> Result<Writer> {
        if name.is_empty() || name.as_encoded_bytes().contains(&b'/') || name == ".." || name == "." {
            return Err(Error::new(ErrorKind::InvalidInput, "create", path, "not a single file name"));
        }
        let flags = OFlags::CREATE | OFlags::EXCL | OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let (fd, tmp) = if opts.atomic {
            let mut tries = 0;
            loop {
                let mut t = OsString::from(".");
                t.push(name);
                t.push(format!(".cacheless-{}-{}.tmp", std::process::id(), TMP_COUNTER.fetch_add(1, Ordering::Relaxed)));
                match rustix::fs::openat(&dir, t.as_os_str(), flags, FMode::from_raw_mode(0o666)) {
                    Ok(fd) => break (fd, Some(t)),
                    Err(e) if e == rustix::io::Errno::EXIST && tries < 100 => tries += 1,
                    Err(e) => return Err(Error::io("create", path, e.into())),
                }
            }
        } else {
            let fd = rustix::fs::openat(&dir, name, flags, FMode::from_raw_mode(0o666)).map_err(|e| Error::io("create", path, e.into()))?;
            (fd, None)
        };
        let file = File::from(fd);
        let chosen = match setup::choose(&file, path, "create", |caps| policy::decide_write(opts.mode, caps, opts.size_hint)) {
            Ok(c) => c,
            Err(e) => {
                // Undo the creation before reporting why we cannot write.
                let victim = tmp.unwrap_or_else(|| name.to_os_string());
                let _ = rustix::fs::unlinkat(&dir, victim.as_os_str(), AtFlags::empty());
                return Err(e);
            }
        };
        Ok(Writer::new(file, dir, name.to_os_string(), tmp, path, opts, chosen))
    }

    fn new(file: File, dir: OwnedFd, name: OsString, tmp: Option<OsString>, path: &Path, opts: &WriteOptions, chosen: Chosen) -> Writer {
        let Chosen { caps, decision, align, mem_align, flags } = chosen;
        let page = rustix::param::page_size();
        let mut block = round_up(opts.block_size.max(align), align.max(page));
        let mut lease_count = opts.queue_depth.max(1) + 1;
        if let Some(h) = opts.size_hint {
            if (h as usize) < block {
                block = round_up((h as usize).max(1), align.max(page));
                lease_count = 1;
            }
        }
        let mut preallocated = None;
        if let Some(h) = opts.size_hint {
            if h >= policy::SMALL_WRITE && decision.mode != Mode::Buffered {
                // Preallocation keeps the file contiguous and lets direct writes land in
                // allocated space; unsupported filesystems just skip it.
                if rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, h).is_ok() {
                    preallocated = Some(h);
                }
            }
        }
        Writer {
            file: Arc::new(file),
            path: path.to_path_buf(),
            dir,
            name,
            tmp,
            decision,
            caps,
            opts: opts.clone(),
            align,
            mem_align,
            block,
            depth: opts.queue_depth.max(1),
            lease: None,
            lease_count,
            queue: None,
            choice: None,
            flags,
            cur: None,
            cur_len: 0,
            pos: 0,
            outstanding: BTreeSet::new(),
            wb_dropped: 0,
            wb_started: 0,
            preallocated,
            direct_bytes: 0,
            finished: false,
        }
    }

    /// The mode in effect and why.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }
    /// What the destination's filesystem supports.
    pub fn caps(&self) -> &FsCaps {
        &self.caps
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
        setup::io_error(op, &self.path, e, self.decision.mode, self.flags)
    }

    fn get_buf(&mut self) -> Result<AlignedBuf> {
        let lease = match &self.lease {
            Some(l) => l.clone(),
            None => {
                let l = self.opts.budget.lease(self.block, rustix::param::page_size().max(self.mem_align), self.lease_count, 1);
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
        if self.decision.mode == Mode::Direct {
            self.direct_bytes += len as u64;
        }
        let op = Op::owned(OpKind::Write, self.file.clone(), off, buf, 0, len, self.flags, off);
        self.outstanding.insert(off);
        if self.queue.is_none() && self.opts.size_hint.map(|h| h <= self.block as u64).unwrap_or(false) {
            // A one-request file: no queue to set up.
            let c = run_sync(op);
            return self.complete(c);
        }
        while self.queue.as_ref().map(|q| q.in_flight() >= self.depth).unwrap_or(false) {
            self.reap_one()?;
        }
        if self.queue.is_none() {
            let (q, choice) = setup::open_queue(self.opts.backend, self.depth, self.lease.as_ref(), &self.path)?;
            self.queue = Some(q);
            self.choice = Some(choice);
        }
        let r = self.queue.as_mut().expect("queue set").push(op);
        r.map_err(|e| self.err("submit", e))?;
        if self.opts.queue_depth == 0 {
            self.drain()?;
        }
        Ok(())
    }

    fn reap_one(&mut self) -> Result<()> {
        let c = match self.queue.as_mut() {
            Some(q) if q.in_flight() > 0 => q.wait().map_err(|e| Error::io("write", &self.path, e))?,
            _ => return Err(Error::new(ErrorKind::Io, "write", &self.path, "no write in flight to wait for")),
        };
        self.complete(c)
    }

    fn reap_ready(&mut self) -> Result<()> {
        while let Some(c) = self.queue.as_mut().and_then(|q| q.poll()) {
            self.complete(c)?;
        }
        Ok(())
    }

    fn complete(&mut self, c: Completion) -> Result<()> {
        let off = c.op.tag;
        self.outstanding.remove(&off);
        if let Err(e) = c.result {
            return Err(self.err("write", e));
        }
        if self.decision.mode == Mode::WriteBehind {
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
            residency::sync_range(&self.file, start, WRITE_BEHIND_WINDOW, libc::SYNC_FILE_RANGE_WRITE).map_err(|e| self.err("sync_file_range", e))?;
            self.wb_started += WRITE_BEHIND_WINDOW;
            if start >= self.wb_dropped + WRITE_BEHIND_WINDOW {
                let prev = self.wb_dropped;
                let len = start - prev;
                residency::sync_range(&self.file, prev, len, libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER)
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
        let aligned_mem = buf.as_ptr() as usize % self.mem_align == 0;
        if self.cur_len == 0 && aligned_mem && self.pos % self.align as u64 == 0 {
            if len % self.align == 0 {
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
        self.write_all(&buf[..len]).map_err(|e| Error::io("write", &self.path, e))
    }

    /// Copies all of `data` into the writer's buffers, sending full requests as they fill
    /// (what `std::io::Write::write_all` does, with the engine's error).
    pub fn write_bytes(&mut self, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            if self.cur.is_none() {
                let b = self.get_buf()?;
                self.cur = Some(b);
                self.cur_len = 0;
            }
            let cap = self.cur.as_ref().map(|b| b.capacity().min(self.block)).unwrap_or(0);
            let n = data.len().min(cap - self.cur_len);
            let cur = self.cur.as_mut().expect("current buffer");
            cur[self.cur_len..self.cur_len + n].copy_from_slice(&data[..n]);
            self.cur_len += n;
            data = &data[n..];
            if self.cur_len == cap {
                let b = self.cur.take().expect("current buffer");
                let len = std::mem::take(&mut self.cur_len);
                self.submit(b, len)?;
            }
        }
        Ok(())
    }

    fn drain(&mut self) -> Result<()> {
        let mut first = None;
        while self.queue.as_ref().map(|q| q.in_flight() > 0).unwrap_or(false) {
            if let Err(e) = self.reap_one() {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Writes what is buffered (the unaligned tail after clearing O_DIRECT), makes the file
    /// durable unless `sync` is off, applies permissions and times, and renames it into place.
    pub fn finish(mut self) -> Result<WriteReport> {
        let mut tail_bytes = 0u64;
        if let Some(buf) = self.cur.take() {
            let len = std::mem::take(&mut self.cur_len);
            if self.decision.mode == Mode::Direct && len % self.align != 0 {
                let bulk = len / self.align * self.align;
                let tail = buf[bulk..len].to_vec();
                if bulk > 0 {
                    self.submit(buf, bulk)?;
                } else {
                    drop(buf);
                }
                self.drain()?;
                // The unaligned tail: O_DIRECT off, then an ordinary (uncached if possible) write.
                set_direct(&self.file, false).map_err(|e| self.err("fcntl", e))?;
                let flags = if self.caps.dontcache.is_ok() { RWF_DONTCACHE } else { 0 };
                write_full(&self.file, &tail, self.pos, flags).map_err(|e| self.err("write", e))?;
                self.pos += tail.len() as u64;
                tail_bytes = tail.len() as u64;
            } else if len > 0 {
                self.submit(buf, len)?;
            }
        }
        self.drain()?;
        let total = self.pos;
        if self.preallocated.is_some_and(|p| p != total) {
            self.file.set_len(total).map_err(|e| self.err("truncate", e))?;
        }
        if self.opts.sync {
            rustix::fs::fdatasync(&*self.file).map_err(|e| self.err("fdatasync", e.into()))?;
        }
        // Drop what went through the cache: the direct tail, the last write-behind windows.
        match self.decision.mode {
            Mode::Direct if tail_bytes > 0 => {
                let page = rustix::param::page_size() as u64;
                let start = (total - tail_bytes) / page * page;
                let _ = residency::evict(&self.file, start, total - start);
            }
            Mode::WriteBehind => {
                let _ = residency::evict(&self.file, self.wb_dropped, 0);
            }
            _ => {}
        }
        if let Some(p) = self.opts.permissions {
            rustix::fs::fchmod(&*self.file, FMode::from_raw_mode(p)).map_err(|e| self.err("chmod", e.into()))?;
        }
        if self.opts.mtime.is_some() || self.opts.atime.is_some() {
            let ts = |t: Option<SystemTime>| match t {
                Some(t) => to_timespec(t),
                None => rustix::fs::Timespec { tv_sec: 0, tv_nsec: rustix::fs::UTIME_OMIT },
            };
            let times = rustix::fs::Timestamps { last_access: ts(self.opts.atime), last_modification: ts(self.opts.mtime) };
            rustix::fs::futimens(&*self.file, &times).map_err(|e| self.err("set times", e.into()))?;
        }
        if let Some(tmp) = self.tmp.clone() {
            rustix::fs::renameat(&self.dir, tmp.as_os_str(), &self.dir, self.name.as_os_str()).map_err(|e| self.err("rename", e.into()))?;
            self.tmp = None;
            if self.opts.sync {
                rustix::fs::fsync(&self.dir).map_err(|e| self.err("fsync directory", e.into()))?;
            }
        }
        self.finished = true;
        Ok(WriteReport {
            path: self.path.clone(),
            bytes: total,
            decision: self.decision.clone(),
            direct_bytes: self.direct_bytes,
            tail_bytes,
            synced: self.opts.sync,
            backend: self.choice.clone(),
        })
    }
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("path", &self.path).field("mode", &self.decision.mode).field("position", &self.position()).finish()
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
        if self.finished {
            return;
        }
        let _ = self.drain();
        let victim = self.tmp.clone().unwrap_or_else(|| self.name.clone());
        let _ = rustix::fs::unlinkat(&self.dir, victim.as_os_str(), AtFlags::empty());
        // What we wrote through the cache is garbage now.
        let _ = residency::drop_range(&self.file, 0, 0);
    }
}

fn to_timespec(t: SystemTime) -> rustix::fs::Timespec {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => rustix::fs::Timespec { tv_sec: d.as_secs() as _, tv_nsec: d.subsec_nanos() as _ },
        Err(e) => {
            let d = e.duration();
            let (mut s, mut ns) = (-(d.as_secs() as i64), -(d.subsec_nanos() as i64));
            if ns < 0 {
                s -= 1;
                ns += 1_000_000_000;
            }
            rustix::fs::Timespec { tv_sec: s as _, tv_nsec: ns as _ }
        }
    }
}

/// pwrite/pwritev2 until all of `data` is written at `off`.
fn write_full(file: &File, mut data: &[u8], mut off: u64, flags: i32) -> io::Result<()> {
    while !data.is_empty() {
        let r = if flags == 0 {
            rustix::io::pwrite(file.as_fd(), data, off)
        } else {
            rustix::io::pwritev2(file.as_fd(), &[io::IoSlice::new(data)], off, rustix::io::ReadWriteFlags::from_bits_retain(flags as u32))
        };
        match r {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0")),
            Ok(n) => {
                data = &data[n..];
                off += n as u64;
            }
            Err(e) if e == rustix::io::Errno::INTR => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
