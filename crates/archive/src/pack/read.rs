//! Read-ahead of the files to archive: a few threads open and read the next files in archive
//! order through the engine's `Reader` (direct when cold, buffered when already cached, pages
//! brought in dropped behind), while one thread writes the tar stream in order.
//!
//! Each file's buffers come out of its own small budget, carved in archive order out of the
//! read-ahead share of the job's budget (see `plan`), so a reader never waits for memory that
//! only a later file holds, and the writer, which always needs the earliest file, never waits.

use cacheless::sys;
use std::fs::{File, Metadata};
use std::ops::Deref;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;

use cacheless::Lease;
use cacheless::{AlignedBuf, Budget, Chunk, ReadOptions, Reader, Taken};

use super::header::SparseMap;

/// Chunks a file's reader may have handed on that the writer has not consumed yet.
pub(crate) const CHANNEL: usize = 2;
/// Most requests in flight per file.
const MAX_DEPTH: usize = 4;

/// A run of file data: an engine chunk (the first `len` bytes of it) or a buffer read into.
pub(crate) enum Piece {
    Chunk(Chunk, usize),
    Buf(AlignedBuf, usize),
}

impl Deref for Piece {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Piece::Chunk(c, n) => &c[..*n],
            Piece::Buf(b, n) => &b[..*n],
        }
    }
}

/// What a reader sends the writer about one file, in this order: `Start` (or `Failed`: the
/// file is skipped), `Data`..., then `End` (or `Failed`: the rest is padded with zeros).
pub(crate) enum Msg {
    /// Opened: the mode it is read in and, for a sparse file, its data segments.
    Start {
        mode: Taken,
        sparse: Option<SparseMap>,
    },
    Data(Piece),
    /// Done; `changed` says how the file changed while it was read, if it did. The lease is
    /// the file's share of the budget, released once the writer has it.
    End {
        changed: Option<String>,
        _lease: Lease,
    },
    Failed {
        msg: String,
        errno: Option<i32>,
        _lease: Lease,
    },
}

/// One file to read.
pub(crate) struct Job {
    /// Where it is opened.
    pub at: super::walk::At,
    /// Its member name, for messages.
    pub name: PathBuf,
    /// Size when walked: the size in the header, and what is read.
    pub size: u64,
    pub sparse: bool,
    /// (dev, ino) when walked.
    pub id: (u64, u64),
    pub ro: ReadOptions,
    pub lease: Lease,
    pub tx: SyncSender<Msg>,
    pub cancel: Arc<AtomicBool>,
}

/// The budget a file of `size` bytes needs and the read options for it: the engine reader's
/// read-ahead (`depth` requests, 1 for a file of one request) plus the chunks handed on
/// (`CHANNEL` in the channel, one in the writer's hands, one spare), or for a sparse file one
/// bounce buffer plus the buffers read into.
pub(crate) fn plan(base: &ReadOptions, size: u64, sparse: bool) -> (ReadOptions, usize) {
    let mut ro = base.clone();
    let page = 4096usize;
    // Requests never exceed what was walked, so a file that grew in between cannot need more.
    let block = ro.io.block_size.max(page).min(cacheless::conv::usize_of(size.div_ceil(page as u64).max(1)).saturating_mul(page));
    ro.io.block_size = block;
    let blocks = cacheless::conv::usize_of(size.div_ceil(block as u64).max(1));
    let bufs = if sparse {
        ro.io.queue_depth = 1;
        ro.extra_buffers = 0;
        1 + CHANNEL + 2
    } else if blocks == 1 {
        ro.io.queue_depth = 1;
        ro.extra_buffers = 1;
        2
    } else {
        // The writer takes chunks in order and at most CHANNEL wait for it, so a deeper queue
        // than a few requests only holds memory (and pages to register) without reading sooner.
        ro.io.queue_depth = ro.io.queue_depth.clamp(1, blocks.min(MAX_DEPTH));
        ro.extra_buffers = CHANNEL + 2;
        ro.io.queue_depth + ro.extra_buffers
    };
    (ro, bufs * block)
}

/// The ranges of a file that hold data (SEEK_DATA / SEEK_HOLE), clipped to `size`; a file that
/// ends in a hole gets a last empty segment at `size`, as GNU tar writes it.
fn data_segments(f: &File, size: u64) -> std::io::Result<Vec<(u64, u64)>> {
    use cacheless::sys::SeekFrom;
    let mut out = Vec::new();
    let mut off = 0u64;
    while off < size {
        let d = match sys::seek(f, SeekFrom::Data(off)) {
            Ok(d) => d,
            Err(sys::Errno::NXIO) => break,
            Err(e) => return Err(e.into()),
        };
        if d >= size {
            break;
        }
        let h = sys::seek(f, SeekFrom::Hole(d)).map_err(std::io::Error::from)?.min(size);
        out.push((d, h - d));
        off = h;
    }
    if out.last().is_none_or(|&(o, l)| o + l < size) {
        out.push((size, 0));
    }
    Ok(out)
}

fn same(a: &Metadata, b: &Metadata) -> bool {
    (a.len(), a.mtime(), a.mtime_nsec(), a.ctime(), a.ctime_nsec()) == (b.len(), b.mtime(), b.mtime_nsec(), b.ctime(), b.ctime_nsec())
}

/// Reads one file and sends it to the writer. Never fails: failures are messages.
pub(crate) fn run(job: Job) {
    let Job { at, name: path, size, sparse, id, ro, lease, tx, cancel } = job;
    let fail = |msg: String, errno: Option<i32>, lease: Lease| {
        let _ = tx.send(Msg::Failed { msg, errno, _lease: lease });
    };
    // O_NOFOLLOW: the walk saw a regular file; a symlink put in its place is not followed.
    let file = match sys::openat(&*at.dir, at.name.as_os_str(), sys::OFlags::RDONLY | sys::OFlags::NOFOLLOW | sys::OFlags::CLOEXEC, sys::FMode::empty())
        .map(File::from)
        .map_err(std::io::Error::from)
    {
        Ok(f) => f,
        Err(e) => return fail(format!("cannot open: {e}"), e.raw_os_error(), lease),
    };
    // The folder is not needed once the file is open.
    drop(at);
    let before = match file.metadata() {
        Ok(m) => m,
        Err(e) => return fail(format!("cannot stat: {e}"), e.raw_os_error(), lease),
    };
    if (before.dev(), before.ino()) != id || !before.is_file() {
        return fail("replaced by another file since it was listed; not dumped".into(), None, lease);
    }
    let map = if sparse {
        match data_segments(&file, size) {
            Ok(s) => Some(SparseMap { segments: s, realsize: size }),
            Err(e) => return fail(format!("cannot map holes: {e}"), e.raw_os_error(), lease),
        }
    } else {
        None
    };
    let mut reader = match Reader::from_file(file, &path, &ro) {
        Ok(r) => r,
        Err(e) => return fail(e.to_string(), e.errno(), lease),
    };
    if tx.send(Msg::Start { mode: reader.decision().mode, sparse: map.clone() }).is_err() {
        return;
    }
    let res = match &map {
        Some(m) => read_sparse(&mut reader, m, &ro.io.budget, &tx, &cancel),
        None => read_stream(&mut reader, size, &tx, &cancel),
    };
    let got = match res {
        Ok(Some(n)) => n,
        Ok(None) => return, // the writer went away or the job was cancelled
        Err(e) => return fail(e.to_string(), e.errno(), lease),
    };
    let after = reader.file().metadata();
    drop(reader);
    let want = map.as_ref().map_or(size, |m| m.data_len());
    let changed = if got < want {
        Some(format!("file shrank by {} bytes; padded with zeros", want - got))
    } else if before.len() != size || !after.as_ref().is_ok_and(|a| same(&before, a)) {
        Some("file changed as we read it".into())
    } else {
        None
    };
    let _ = tx.send(Msg::End { changed, _lease: lease });
}

/// Streams up to `size` bytes; `Ok(None)` when the writer went away.
fn read_stream(reader: &mut Reader, size: u64, tx: &SyncSender<Msg>, cancel: &AtomicBool) -> cacheless::Result<Option<u64>> {
    let mut got = 0u64;
    while got < size {
        if cancel.load(Ordering::Relaxed) {
            return Ok(None);
        }
        // A file that changed is reported by how it changed (below), as GNU tar reports it.
        let c = match reader.next_chunk() {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) if e.kind() == cacheless::ErrorKind::Changed => break,
            Err(e) => return Err(e),
        };
        let n = cacheless::conv::fit(size - got, c.len());
        got += n as u64;
        if tx.send(Msg::Data(Piece::Chunk(c, n))).is_err() {
            return Ok(None);
        }
    }
    Ok(Some(got))
}

/// Reads the data segments of a sparse file into buffers of the file's budget.
fn read_sparse(reader: &mut Reader, map: &SparseMap, budget: &Budget, tx: &SyncSender<Msg>, cancel: &AtomicBool) -> cacheless::Result<Option<u64>> {
    let block = reader.block_size();
    let align = reader.plan().buffer_align();
    let lease = budget.lease(cacheless::LeaseRequest::buffers(block, CHANNEL + 2).aligned(align));
    let mut got = 0u64;
    for &(off, len) in &map.segments {
        let mut done = 0u64;
        while done < len {
            if cancel.load(Ordering::Relaxed) {
                return Ok(None);
            }
            // At most CHANNEL + 1 buffers are out (channel and writer), so one is free.
            let mut b = lease.get().unwrap_or_else(|| AlignedBuf::new(block, align));
            let want = cacheless::conv::fit(len - done, block);
            let n = reader.read_at(&mut b[..want], off + done)?;
            got += n as u64;
            done += n as u64;
            if n > 0 && tx.send(Msg::Data(Piece::Buf(b, n))).is_err() {
                return Ok(None);
            }
            if n < want {
                return Ok(Some(got)); // shrank
            }
        }
    }
    Ok(Some(got))
}
