//! Compression in independent frames, in parallel, written in order.
//!
//! The tar stream is cut into frames of `frame_size` bytes. Each frame is compressed on its own
//! by one of the workers (a complete zstd frame, gzip member, xz stream, lz4 frame or bzip2
//! stream), and one output thread writes them in order. Concatenated frames are a valid stream
//! for every one of these formats, so any decompressor reads the archive; and for zstd each
//! frame is preceded by a skippable frame holding its compressed size (the layout pzstd
//! writes), so that `pzstd -d` and a parallel extract find the frame boundaries without
//! decompressing. The same input gives the same bytes whatever the number of workers.
//!
//! Each frame holds a lease of `frame_size` bytes from the compression share of the budget from
//! the moment it is filled until it is written; the workers' scratch (the output being produced
//! while the input still exists) is reserved once for all of them.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex};

use cacheless::Lease;
use cacheless::{Budget, Progress};

use crate::source::Compression;

/// zstd skippable frame magic (the first of the 16: 0x184D2A50..5F), as pzstd writes it.
pub const SKIPPABLE_MAGIC: u32 = 0x184D_2A50;

/// One frame on its way through the pipeline.
pub(crate) struct Frame {
    pub seq: u64,
    pub data: Vec<u8>,
    pub _lease: Lease,
}

/// Spare frame buffers, reused instead of allocating (and page-faulting) 32 MiB per frame.
pub(crate) type Pool = Arc<Mutex<Vec<Vec<u8>>>>;

fn take(pool: &Pool, cap: usize) -> Vec<u8> {
    let mut v = pool.lock().unwrap_or_else(|e| e.into_inner()).pop().unwrap_or_default();
    v.clear();
    v.reserve(cap);
    v
}

fn give(pool: &Pool, v: Vec<u8>, keep: usize) {
    let mut p = pool.lock().unwrap_or_else(|e| e.into_inner());
    if p.len() < keep {
        p.push(v);
    }
}

/// The writing end: the tar stream is written here and leaves in frames.
pub(crate) struct TarOut {
    buf: Vec<u8>,
    lease: Option<Lease>,
    frame_size: usize,
    seq: u64,
    tx: Option<SyncSender<Frame>>,
    budget: Budget,
    pool: Pool,
    /// Bytes of tar stream written.
    pub tar_bytes: u64,
}

/// The next stage went away (an output error, reported by the output thread).
#[derive(Debug)]
pub(crate) struct Closed;

impl TarOut {
    pub fn new(frame_size: usize, tx: SyncSender<Frame>, budget: Budget, pool: Pool) -> TarOut {
        TarOut { buf: Vec::new(), lease: None, frame_size, seq: 0, tx: Some(tx), budget, pool, tar_bytes: 0 }
    }

    pub fn write(&mut self, mut data: &[u8]) -> Result<(), Closed> {
        while !data.is_empty() {
            if self.lease.is_none() {
                // Waits while the frames in flight hold the compression share.
                self.lease = Some(self.budget.lease(cacheless::LeaseRequest::one(self.frame_size)));
                self.buf = take(&self.pool, self.frame_size);
            }
            let n = data.len().min(self.frame_size - self.buf.len());
            self.buf.extend_from_slice(&data[..n]);
            data = &data[n..];
            self.tar_bytes += n as u64;
            if self.buf.len() == self.frame_size {
                self.send()?;
            }
        }
        Ok(())
    }

    fn send(&mut self) -> Result<(), Closed> {
        let (Some(lease), Some(tx)) = (self.lease.take(), self.tx.as_ref()) else { return Ok(()) };
        let f = Frame { seq: self.seq, data: std::mem::take(&mut self.buf), _lease: lease };
        self.seq += 1;
        tx.send(f).map_err(|_| Closed)
    }

    /// Sends the last, partial frame and closes the stream; returns the number of frames.
    pub fn finish(mut self) -> Result<u64, Closed> {
        if !self.buf.is_empty() {
            self.send()?;
        }
        self.tx = None;
        Ok(self.seq)
    }
}

/// One worker's compressor, reused from frame to frame.
pub(crate) enum Codec {
    Zstd(Box<zstd::bulk::Compressor<'static>>),
    Gzip(u32),
    Xz(u32),
    Lz4,
    Bzip2(u32),
}

impl Codec {
    pub fn new(c: Compression, level: i32) -> io::Result<Codec> {
        Ok(match c {
            Compression::Zstd => {
                let mut z = zstd::bulk::Compressor::new(level)?;
                // Like the zstd tool: a checksum per frame, and the content size in its header.
                z.include_checksum(true)?;
                z.include_contentsize(true)?;
                Codec::Zstd(Box::new(z))
            }
            Compression::Gzip => Codec::Gzip(unsigned_level(level)?),
            Compression::Xz => Codec::Xz(unsigned_level(level)?),
            Compression::Lz4 => Codec::Lz4,
            Compression::Bzip2 => Codec::Bzip2(unsigned_level(level)?),
            Compression::None => return Err(io::Error::new(io::ErrorKind::InvalidInput, "no codec for uncompressed output")),
        })
    }

    /// Compresses `src` as one complete, independent frame into `out` (cleared first).
    pub fn compress(&mut self, src: &[u8], mut out: Vec<u8>) -> io::Result<Vec<u8>> {
        out.clear();
        Ok(match self {
            Codec::Zstd(z) => {
                out.reserve(zstd_safe::compress_bound(src.len()));
                z.compress_to_buffer(src, &mut out)?;
                out
            }
            Codec::Gzip(l) => {
                let mut e = flate2::write::GzEncoder::new(out, flate2::Compression::new(*l));
                e.write_all(src)?;
                e.finish()?
            }
            Codec::Xz(l) => {
                let mut e = xz2::write::XzEncoder::new(out, *l);
                e.write_all(src)?;
                e.finish()?
            }
            Codec::Lz4 => {
                let info = lz4_flex::frame::FrameInfo::new().content_checksum(true);
                let mut e = lz4_flex::frame::FrameEncoder::with_frame_info(info, out);
                e.write_all(src)?;
                e.finish().map_err(io::Error::other)?
            }
            Codec::Bzip2(l) => {
                let mut e = bzip2::write::BzEncoder::new(out, bzip2::Compression::new(*l));
                e.write_all(src)?;
                e.finish()?
            }
        })
    }
}

/// The level of a format whose levels are unsigned (gzip, xz, bzip2).
fn unsigned_level(level: i32) -> io::Result<u32> {
    u32::try_from(level).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("level {level} is negative")))
}

/// A compression worker: frames in, compressed frames out; the input buffer is recycled.
pub(crate) fn worker(mut codec: Codec, rx: Arc<Mutex<Receiver<Frame>>>, tx: SyncSender<io::Result<Frame>>, pool: Pool, keep: usize) {
    loop {
        let Ok(f) = rx.lock().unwrap_or_else(|e| e.into_inner()).recv() else { return };
        let out = take(&pool, 0);
        match codec.compress(&f.data, out) {
            Ok(data) => {
                give(&pool, f.data, keep);
                if tx.send(Ok(Frame { seq: f.seq, data, _lease: f._lease })).is_err() {
                    return;
                }
            }
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        }
    }
}

/// Where the archive goes.
pub(crate) enum Sink {
    File(Box<cacheless::Writer>),
    Stream(Box<dyn Write + Send>),
}

impl Sink {
    fn write_all(&mut self, b: &[u8]) -> io::Result<()> {
        match self {
            Sink::File(w) => w.write_all(b),
            Sink::Stream(s) => s.write_all(b),
        }
    }
}

/// What the output thread hands back: the sink (not finished: the caller finishes it only when
/// the whole archive was written), the frames written, and the first error.
pub(crate) struct Outcome {
    pub sink: Sink,
    pub frames: u64,
    /// Archive bytes written.
    pub bytes: u64,
    pub error: Option<io::Error>,
}

/// Writes frames in sequence order, each zstd frame after its skippable frame.
pub(crate) fn output(rx: Receiver<io::Result<Frame>>, mut sink: Sink, skippable: bool, progress: Arc<Progress>, pool: Pool, keep: usize) -> Outcome {
    let mut next = 0u64;
    let mut bytes = 0u64;
    let mut waiting: BTreeMap<u64, Frame> = BTreeMap::new();
    let mut error = None;
    'recv: for f in rx {
        let f = match f {
            Ok(f) => f,
            Err(e) => {
                error = Some(io::Error::new(e.kind(), format!("compressor: {e}")));
                break;
            }
        };
        waiting.insert(f.seq, f);
        while let Some(f) = waiting.remove(&next) {
            let r = (|| {
                if skippable {
                    let n = u32::try_from(f.data.len()).map_err(|_| io::Error::other("compressed frame over 4 GiB"))?;
                    let mut h = [0u8; 12];
                    h[..4].copy_from_slice(&SKIPPABLE_MAGIC.to_le_bytes());
                    h[4..8].copy_from_slice(&4u32.to_le_bytes());
                    h[8..].copy_from_slice(&n.to_le_bytes());
                    sink.write_all(&h)?;
                    bytes += 12;
                    progress.add_output_bytes(12);
                }
                sink.write_all(&f.data)
            })();
            if let Err(e) = r {
                error = Some(e);
                break 'recv;
            }
            bytes += f.data.len() as u64;
            progress.add_output_bytes(f.data.len() as u64);
            next += 1;
            give(&pool, f.data, keep);
        }
    }
    if error.is_none() && !waiting.is_empty() {
        error = Some(io::Error::other("a frame was lost between compression and output"));
    }
    Outcome { sink, frames: next, bytes, error }
}
