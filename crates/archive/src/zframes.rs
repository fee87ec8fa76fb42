//! Parallel decompression of multi-frame zstd archives, handed to the tar parser in order.
//!
//! Archives written in independent frames (`pzstd`, `cacheless pack`, Agave and Firedancer
//! snapshots, `cat a.zst b.zst`) can be decoded a frame per thread. One splitter thread cuts
//! the compressed stream at frame boundaries without decompressing: a pzstd-style skippable
//! frame (magic 0x184D2A50, 4 bytes of payload) gives the next frame's compressed size; without
//! one, the frame header is parsed and its block headers walked (3 bytes per block of up to
//! 128 KiB). The zstd crates only find a frame's end in a buffer holding all of it
//! (`ZSTD_findFrameCompressedSize`), which would hold a single-frame archive whole in memory:
//! the walk here streams. Other skippable frames are skipped.
//!
//! Frame `i` goes to worker `i % threads` (round robin, so frames are taken in order and the
//! threads used are known), which decodes it with its own streaming decoder (the whole frame
//! must be consumed by exactly one frame: a size frame that lies is an error). Each frame's
//! output goes to a channel of its own, and the reader takes the frames' channels in archive
//! order: the tar parser sees one stream, as from a single decoder. A single-frame archive is
//! decoded on one worker, as it would be on one thread.
//!
//! Memory: compressed bytes handed to workers and not yet consumed are held to `in_share`
//! bytes (leases from a private budget: a lone piece always gets through, so nothing hangs);
//! at most `window` frames are in flight, each with at most `per_frame` output chunks of
//! `out_chunk` bytes waiting for the parser. A worker blocked on a later frame's full channel
//! never holds up the frame the parser is reading: frames are started in order, so that one's
//! worker has either finished it or is still decoding it.
//!
//! Errors name the frame and its offset in the archive (the compressed stream).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use zstd::stream::raw::{Decoder, InBuffer, Operation, OutBuffer};

use crate::error::panic_message;

/// Bytes per decoded chunk handed to the parser (the single decoder's; frames use smaller ones
/// when the budget is small, see [`Plan`]).
pub(crate) const OUT_CHUNK: usize = 1 << 20;
/// The smallest decoded chunk of a frame.
const MIN_OUT_CHUNK: usize = 64 << 10;

const ZSTD_MAGIC: u32 = 0xFD2F_B528;
/// The skippable frame magics are 0x184D2A50..=0x184D2A5F.
const SKIPPABLE_MASK: u32 = 0xFFFF_FFF0;
const SKIPPABLE_MAGIC: u32 = 0x184D_2A50;

/// Whether `magic` (a frame's first four bytes, little-endian) starts a skippable frame, which
/// zstd and LZ4 share.
pub(crate) fn is_skippable(magic: u32) -> bool {
    magic & SKIPPABLE_MASK == SKIPPABLE_MAGIC
}

/// How many frames were decoded and by how many threads.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    /// zstd frames (not counting skippable ones) the splitter found.
    pub frames: AtomicU64,
    /// Bit `i`: worker `i` decoded at least one frame.
    pub workers_used: AtomicU64,
}

impl Stats {
    /// Threads that decoded at least one frame.
    pub fn threads_used(&self) -> usize {
        usize::try_from(self.workers_used.load(Ordering::Relaxed).count_ones()).unwrap_or(64)
    }
}

/// How the decompression is sized.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    /// Worker threads (at least 1).
    pub threads: usize,
    /// Frames in flight between the splitter and the parser.
    pub window: usize,
    /// Output chunks each frame may have waiting for the parser.
    pub per_frame: usize,
    /// Bytes per output chunk.
    pub out_chunk: usize,
    /// Compressed bytes handed to workers and not yet consumed.
    pub in_share: usize,
    /// The largest window accepted (log2), where zstd's default (27) is not enough.
    pub window_log_max: Option<u32>,
}

impl Plan {
    /// Sizes `threads` workers to a share of `share` bytes of the memory budget: a quarter for
    /// compressed input in flight, the rest for decoded chunks of 64 KiB to 1 MiB (at least two
    /// per frame, which a share under 1.5 MiB per frame exceeds).
    pub fn new(threads: usize, share: usize) -> Plan {
        let threads = threads.clamp(1, 64);
        let window = threads + 1;
        let out = share / 4 * 3 / window;
        let out_chunk = (out / 2).clamp(MIN_OUT_CHUNK, OUT_CHUNK);
        Plan { threads, window, per_frame: (out / out_chunk).max(2), out_chunk, in_share: (share / 4).max(MIN_OUT_CHUNK), window_log_max: None }
    }
}

/// A slice of a chunk of the compressed stream, with its share of the input budget.
struct Piece {
    chunk: Arc<Vec<u8>>,
    start: usize,
    end: usize,
    _lease: cacheless::Lease,
}

/// One frame for a worker: its compressed bytes arrive in pieces (an error of the archive's
/// read or of the splitter arrives in-band, after the pieces before it); its output leaves
/// through `out`.
struct Job {
    seq: u64,
    offset: u64,
    window_log_max: Option<u32>,
    input: Receiver<io::Result<Piece>>,
    out: SyncSender<io::Result<Vec<u8>>>,
    out_chunk: usize,
}

/// The decoded stream: each frame's chunks in archive order.
pub(crate) struct FrameReader {
    frames: Receiver<Receiver<io::Result<Vec<u8>>>>,
    cur: Option<Receiver<io::Result<Vec<u8>>>>,
    buf: Vec<u8>,
    pos: usize,
    /// Bytes handed out so far, and up to where whole frames were (see `TarStream::verified`):
    /// a frame's worker closes its channel only after the decoder reported the frame's end,
    /// its content checksum checked.
    delivered: u64,
    verified: Arc<AtomicU64>,
}

impl io::Read for FrameReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.pos < self.buf.len() {
                let n = out.len().min(self.buf.len() - self.pos);
                out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
                self.pos += n;
                self.delivered += n as u64;
                return Ok(n);
            }
            match &self.cur {
                Some(rx) => match rx.recv() {
                    Ok(Ok(v)) => {
                        self.buf = v;
                        self.pos = 0;
                    }
                    Ok(Err(e)) => return Err(e),
                    // The frame's worker finished it (an error would have come first).
                    Err(_) => {
                        self.cur = None;
                        // (Or more already, by a verifier ahead: see `crate::source::ahead`.)
                        self.verified.fetch_max(self.delivered, Ordering::AcqRel);
                    }
                },
                None => match self.frames.recv() {
                    Ok(rx) => self.cur = Some(rx),
                    Err(_) => return Ok(0),
                },
            }
        }
    }
}

/// The compressed stream as the reading thread delivers it, in chunks.
pub(crate) struct RawIn {
    rx: Receiver<io::Result<Vec<u8>>>,
    cur: Arc<Vec<u8>>,
    pos: usize,
    /// Archive offset of `cur[pos]`.
    offset: u64,
}

impl RawIn {
    /// Continues a stream of which `first[pos..]` is the next part.
    pub fn new(rx: Receiver<io::Result<Vec<u8>>>, first: Vec<u8>, pos: usize) -> RawIn {
        RawIn { rx, cur: Arc::new(first), pos, offset: 0 }
    }

    /// Makes bytes available in `cur`; `Ok(false)` at the end of the stream.
    fn more(&mut self) -> io::Result<bool> {
        while self.pos >= self.cur.len() {
            match self.rx.recv() {
                Ok(Ok(c)) => {
                    self.cur = Arc::new(c);
                    self.pos = 0;
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => return Ok(false),
            }
        }
        Ok(true)
    }

    /// Takes the next `n` bytes, handing each contiguous part to `f` (chunk, start, end).
    /// `Ok(false)` when the stream ended first.
    fn take(&mut self, mut n: u64, mut f: impl FnMut(&Arc<Vec<u8>>, usize, usize) -> io::Result<()>) -> io::Result<bool> {
        while n > 0 {
            if !self.more()? {
                return Ok(false);
            }
            let k = cacheless::conv::fit(n, self.cur.len() - self.pos);
            f(&self.cur, self.pos, self.pos + k)?;
            self.pos += k;
            self.offset += k as u64;
            n -= k as u64;
        }
        Ok(true)
    }

    /// Copies the next `buf.len()` bytes into `buf` (also handing them to `f`).
    fn read_small(&mut self, buf: &mut [u8], mut f: impl FnMut(&Arc<Vec<u8>>, usize, usize) -> io::Result<()>) -> io::Result<bool> {
        let mut got = 0;
        self.take(buf.len() as u64, |c, s, e| {
            buf[got..got + e - s].copy_from_slice(&c[s..e]);
            got += e - s;
            f(c, s, e)
        })
    }
}

/// Starts the splitter and the workers; returns the in-order decoded stream, the threads to
/// join, and the counters.
/// `verified` rises to the end of each frame the reader has handed out whole.
pub(crate) fn start(raw: RawIn, plan: Plan, verified: Arc<AtomicU64>) -> io::Result<(FrameReader, Vec<JoinHandle<()>>, Arc<Stats>)> {
    let stats = Arc::new(Stats::default());
    let (frames_tx, frames_rx) = sync_channel(plan.window.saturating_sub(1).max(1));
    let mut threads = Vec::new();
    let mut job_txs = Vec::new();
    for i in 0..plan.threads {
        // One job queued per worker beyond the one it decodes: the window bounds the rest.
        let (tx, rx) = sync_channel::<Job>(1);
        let st = stats.clone();
        let spawned = std::thread::Builder::new().name(format!("cacheless-unzstd-{i}")).spawn(move || worker(i, &rx, &st));
        match spawned {
            Ok(h) => {
                threads.push(h);
                job_txs.push(tx);
            }
            // Fewer threads are slower, not wrong; none at all is an error.
            Err(e) if threads.is_empty() => return Err(e),
            Err(_) => break,
        }
    }
    let st = stats.clone();
    let in_budget = cacheless::Budget::new(plan.in_share);
    let splitter = std::thread::Builder::new().name("cacheless-frames".into()).spawn(move || {
        let failed = frames_tx.clone();
        let mut raw = raw;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| split(&mut raw, &job_txs, &frames_tx, &in_budget, &plan, &st)));
        let err = match r {
            Ok(Ok(())) => return,
            Ok(Err(e)) => e,
            Err(p) => io::Error::other(format!("zstd frame splitter failed: {}", panic_message(&*p))),
        };
        // After every frame already started, in order: the parser sees it where it happened.
        let (tx, rx) = sync_channel(1);
        let _ = tx.send(Err(err));
        let _ = failed.send(rx);
    })?;
    threads.push(splitter);
    Ok((FrameReader { frames: frames_rx, cur: None, buf: Vec::new(), pos: 0, delivered: 0, verified }, threads, stats))
}

fn bad(offset: u64, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{what} at archive offset {offset}"))
}

fn truncated(seq: u64, offset: u64) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, format!("archive ends inside zstd frame {seq} (at archive offset {offset})"))
}

/// Sends contiguous parts of the stream to a worker as pieces, merging neighbours in one
/// chunk (block headers and bodies) so a piece is one channel message per chunk, not per block.
struct Forward<'a> {
    tx: &'a SyncSender<io::Result<Piece>>,
    budget: &'a cacheless::Budget,
    pending: Option<(Arc<Vec<u8>>, usize, usize)>,
}

/// The worker went away (the parser dropped the stream): the run is over.
#[derive(Debug)]
struct Gone;

impl std::fmt::Display for Gone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the decoded stream was closed")
    }
}

impl std::error::Error for Gone {}

impl From<Gone> for io::Error {
    fn from(g: Gone) -> io::Error {
        io::Error::other(g)
    }
}

fn is_gone(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<Gone>())
}

/// Takes bytes without forwarding them (skippable frames, a size frame's payload).
fn nothing(_: &Arc<Vec<u8>>, _: usize, _: usize) -> io::Result<()> {
    Ok(())
}

impl Forward<'_> {
    fn add(&mut self, c: &Arc<Vec<u8>>, s: usize, e: usize) -> io::Result<()> {
        if let Some((pc, _, pe)) = &mut self.pending {
            if Arc::ptr_eq(pc, c) && *pe == s {
                *pe = e;
                return Ok(());
            }
        }
        self.flush()?;
        self.pending = Some((c.clone(), s, e));
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        if let Some((chunk, start, end)) = self.pending.take() {
            let lease = self.budget.lease(cacheless::LeaseRequest::one(end - start));
            self.tx.send(Ok(Piece { chunk, start, end, _lease: lease })).map_err(|_| Gone)?;
        }
        Ok(())
    }
}

/// Cuts the stream into frames and hands them out. `Err`: an error of the archive (read error,
/// not zstd, truncated) to be reported after the frames before it.
fn split(
    raw: &mut RawIn,
    jobs: &[SyncSender<Job>],
    frames: &SyncSender<Receiver<io::Result<Vec<u8>>>>,
    budget: &cacheless::Budget,
    plan: &Plan,
    stats: &Stats,
) -> io::Result<()> {
    let mut seq = 0u64;
    // Round robin: frame `seq` goes to worker `seq % jobs.len()`.
    let mut next_worker = 0usize;
    // The compressed size of the next frame, from a pzstd-style skippable frame.
    let mut hint: Option<u32> = None;
    loop {
        let at = raw.offset;
        let mut m = [0u8; 4];
        let mut got = 0;
        // A clean end is only between frames.
        let whole = raw.read_small(&mut m, |_, s, e| {
            got += e - s;
            Ok(())
        })?;
        if !whole {
            if got == 0 {
                return Ok(());
            }
            return Err(truncated(seq, at));
        }
        let magic = u32::from_le_bytes(m);
        if is_skippable(magic) {
            let mut sz = [0u8; 4];
            if !raw.read_small(&mut sz, nothing)? {
                return Err(truncated(seq, at));
            }
            let size = u32::from_le_bytes(sz);
            if magic == SKIPPABLE_MAGIC && size == 4 {
                let mut h = [0u8; 4];
                if !raw.read_small(&mut h, nothing)? {
                    return Err(truncated(seq, at));
                }
                hint = Some(u32::from_le_bytes(h));
            } else {
                // A size frame speaks of the frame right after it only.
                hint = None;
                if !raw.take(size.into(), nothing)? {
                    return Err(truncated(seq, at));
                }
            }
            continue;
        }
        if magic != ZSTD_MAGIC {
            let after = if seq == 0 { String::new() } else { format!(" after zstd frame {}", seq - 1) };
            return Err(bad(at, format_args!("not a zstd frame (magic {magic:#010x}){after}")));
        }
        let (out_tx, out_rx) = sync_channel(plan.per_frame);
        let (in_tx, in_rx) = sync_channel(64);
        // Waits while the window is full: the parser is behind.
        if frames.send(out_rx).is_err() {
            return Ok(());
        }
        let Some(job_tx) = jobs.get(next_worker) else { return Ok(()) };
        next_worker = (next_worker + 1) % jobs.len();
        if job_tx.send(Job { seq, offset: at, input: in_rx, out: out_tx, out_chunk: plan.out_chunk, window_log_max: plan.window_log_max }).is_err() {
            return Ok(());
        }
        stats.frames.fetch_add(1, Ordering::Relaxed);
        let mut fw = Forward { tx: &in_tx, budget, pending: None };
        fw.add(&Arc::new(m.to_vec()), 0, 4)?;
        let r = match hint.take() {
            Some(len) => {
                let body = u64::from(len).saturating_sub(4);
                raw.take(body, |c, s, e| fw.add(c, s, e)).and_then(|ok| if ok { Ok(()) } else { Err(truncated(seq, at)) })
            }
            None => walk(raw, &mut fw, seq, at),
        };
        let r = r.and_then(|()| fw.flush());
        match r {
            Ok(()) => {}
            Err(e) if is_gone(&e) => return Ok(()),
            Err(e) => {
                // The worker decodes what came before, then reports this.
                let _ = fw.flush();
                let _ = in_tx.send(Err(e));
                return Ok(());
            }
        }
        seq += 1;
    }
}

/// Forwards one frame whose magic was just read: its header, then block after block to the
/// last one, then its checksum (RFC 8878 section 3.1.1).
fn walk(raw: &mut RawIn, fw: &mut Forward<'_>, seq: u64, at: u64) -> io::Result<()> {
    let mut fhd = [0u8; 1];
    if !raw.read_small(&mut fhd, |c, s, e| fw.add(c, s, e))? {
        return Err(truncated(seq, at));
    }
    let d = fhd[0];
    if d & 0x08 != 0 {
        return Err(bad(at, format_args!("zstd frame {seq}: reserved bit set in its header")));
    }
    let single = d & 0x20 != 0;
    let fcs = match d >> 6 {
        0 => u64::from(single),
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let did = [0u64, 1, 2, 4][usize::from(d & 3)];
    let rest = u64::from(!single) + did + fcs;
    if !raw.take(rest, |c, s, e| fw.add(c, s, e))? {
        return Err(truncated(seq, at));
    }
    loop {
        let block_at = raw.offset;
        let mut bh = [0u8; 3];
        if !raw.read_small(&mut bh, |c, s, e| fw.add(c, s, e))? {
            return Err(truncated(seq, at));
        }
        let h = u32::from(bh[0]) | u32::from(bh[1]) << 8 | u32::from(bh[2]) << 16;
        let (last, kind, size) = (h & 1 != 0, (h >> 1) & 3, h >> 3);
        let body = match kind {
            0 | 2 => u64::from(size),
            1 => 1,
            _ => return Err(bad(block_at, format_args!("zstd frame {seq} (at archive offset {at}): reserved block type"))),
        };
        if !raw.take(body, |c, s, e| fw.add(c, s, e))? {
            return Err(truncated(seq, at));
        }
        if last {
            break;
        }
    }
    if d & 0x04 != 0 && !raw.take(4, |c, s, e| fw.add(c, s, e))? {
        return Err(truncated(seq, at));
    }
    Ok(())
}

fn worker(index: usize, jobs: &Receiver<Job>, stats: &Stats) {
    let mut dec = None;
    while let Ok(job) = jobs.recv() {
        let out = job.out.clone();
        let (seq, offset) = (job.seq, job.offset);
        // A decoder fed a hostile frame must not take the run down: its panic is an error of
        // the frame, reported where it broke.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decode(&mut dec, job)));
        let err = match r {
            Ok(Ok(())) => None,
            Ok(Err(Stop::Gone)) => None,
            Ok(Err(Stop::Archive(e))) => Some(e),
            Ok(Err(Stop::Frame(e))) => Some(io::Error::new(e.kind(), format!("zstd frame {seq} at archive offset {offset}: {}", explain(&e)))),
            Err(p) => {
                dec = None;
                Some(io::Error::other(format!("zstd frame {seq} at archive offset {offset}: decoder failed: {}", panic_message(&*p))))
            }
        };
        if let Some(e) = err {
            let _ = out.send(Err(e));
        }
        if index < 64 {
            stats.workers_used.fetch_or(1 << index, Ordering::Relaxed);
        }
    }
}

/// A decoder's error, with what to do where the frame needs a larger window than allowed (an
/// archive made with `zstd --long`).
pub(crate) fn explain(e: &io::Error) -> String {
    let msg = e.to_string();
    if msg.contains("too much memory") || msg.contains("indow") {
        format!("{msg} (a frame made with zstd --long needs a larger window: allow it with --long=31)")
    } else {
        msg
    }
}

/// Why a frame's decoding stopped early.
enum Stop {
    /// The parser went away.
    Gone,
    /// An error of the archive found by the splitter or the read (passed on as it is).
    Archive(io::Error),
    /// The decoder's error on this frame.
    Frame(io::Error),
}

fn decode(dec: &mut Option<Decoder<'static>>, job: Job) -> Result<(), Stop> {
    let d = match dec {
        Some(d) => {
            d.reinit().map_err(Stop::Frame)?;
            d
        }
        None => {
            let mut d = Decoder::new().map_err(Stop::Frame)?;
            if let Some(w) = job.window_log_max {
                d.set_parameter(zstd_safe::DParameter::WindowLogMax(w)).map_err(Stop::Frame)?;
            }
            dec.insert(d)
        }
    };
    let chunk = job.out_chunk;
    let mut out: Vec<u8> = Vec::with_capacity(chunk);
    let mut done = false;
    let send = |out: &mut Vec<u8>| -> Result<(), Stop> {
        let full = std::mem::replace(out, Vec::with_capacity(chunk));
        job.out.send(Ok(full)).map_err(|_| Stop::Gone)
    };
    for piece in &job.input {
        let piece = match piece {
            Ok(p) => p,
            Err(e) => {
                // What decoded before the error goes first.
                if !out.is_empty() {
                    send(&mut out)?;
                }
                return Err(Stop::Archive(e));
            }
        };
        let mut inb = InBuffer::around(&piece.chunk[piece.start..piece.end]);
        while inb.pos() < piece.end - piece.start {
            if done {
                return Err(Stop::Frame(io::Error::new(io::ErrorKind::InvalidData, "data after the end of the frame (its size frame is wrong)")));
            }
            let pos = out.len();
            let mut ob = OutBuffer::around_pos(&mut out, pos);
            let left = d.run(&mut inb, &mut ob).map_err(Stop::Frame)?;
            done = left == 0;
            if out.len() == out.capacity() {
                send(&mut out)?;
            }
        }
    }
    // Output the decoder still holds (when the output buffer filled up last).
    while !done {
        let pos = out.len();
        let mut ob = OutBuffer::around_pos(&mut out, pos);
        let left = d.run(&mut InBuffer::around(&[]), &mut ob).map_err(Stop::Frame)?;
        done = left == 0;
        let produced = out.len() > pos;
        if out.len() == out.capacity() {
            send(&mut out)?;
        } else if !done && !produced {
            return Err(Stop::Frame(io::Error::new(io::ErrorKind::UnexpectedEof, "frame truncated")));
        }
    }
    if !out.is_empty() {
        send(&mut out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn run(bytes: Vec<u8>, threads: usize, chunk: usize) -> (io::Result<Vec<u8>>, Arc<Stats>) {
        let (tx, rx) = sync_channel(4);
        let feeder = std::thread::spawn(move || {
            for c in bytes.chunks(chunk) {
                if tx.send(Ok(c.to_vec())).is_err() {
                    return;
                }
            }
        });
        let (mut r, threads, stats) = start(RawIn::new(rx, Vec::new(), 0), Plan::new(threads, 8 << 20), Arc::new(AtomicU64::new(0))).unwrap();
        let mut v = Vec::new();
        let res = r.read_to_end(&mut v).map(|_| v);
        drop(r);
        for t in threads {
            t.join().unwrap();
        }
        feeder.join().unwrap();
        (res, stats)
    }

    fn data(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i.to_le_bytes()[0]).wrapping_mul(seed) ^ (i >> 9).to_le_bytes()[0]).collect()
    }

    #[test]
    fn concatenated_frames_decode_in_order_on_every_worker() {
        let parts: Vec<Vec<u8>> = (0..7u8).map(|i| data(300_000 + usize::from(i) * 1000, i + 3)).collect();
        let mut z = Vec::new();
        for (i, p) in parts.iter().enumerate() {
            // Skippable frames of every magic between data frames, as other writers insert them.
            z.extend_from_slice(&(SKIPPABLE_MAGIC + u32::try_from(i).unwrap() * 2 + 1).to_le_bytes());
            z.extend_from_slice(&3u32.to_le_bytes());
            z.extend_from_slice(b"abc");
            z.extend_from_slice(&zstd::encode_all(&p[..], 3).unwrap());
        }
        for chunk in [1, 7, 4096, 1 << 20] {
            let (out, stats) = run(z.clone(), 3, chunk);
            assert_eq!(out.unwrap(), parts.concat(), "chunk {chunk}");
            assert_eq!(stats.frames.load(Ordering::Relaxed), 7);
            assert_eq!(stats.threads_used(), 3);
        }
    }

    #[test]
    fn a_wrong_size_frame_and_a_truncated_frame_are_errors_naming_the_offset() {
        let a = zstd::encode_all(&data(100_000, 5)[..], 3).unwrap();
        let mut z = a.clone();
        let at = z.len();
        z.extend_from_slice(&SKIPPABLE_MAGIC.to_le_bytes());
        z.extend_from_slice(&4u32.to_le_bytes());
        z.extend_from_slice(&u32::try_from(a.len() + 10).unwrap().to_le_bytes());
        z.extend_from_slice(&a);
        z.extend_from_slice(&a[..10]);
        let e = run(z, 2, 1000).0.unwrap_err();
        assert!(e.to_string().contains(&format!("zstd frame 1 at archive offset {}", at + 12)), "{e}");
        let mut z = a.clone();
        z.extend_from_slice(&a[..a.len() - 5]);
        let e = run(z, 2, 1000).0.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
        assert!(e.to_string().contains(&format!("archive ends inside zstd frame 1 (at archive offset {})", a.len())), "{e}");
        let mut z = a.clone();
        z.extend_from_slice(b"garbage!");
        let e = run(z, 2, 1000).0.unwrap_err();
        assert!(e.to_string().contains(&format!("at archive offset {}", a.len())), "{e}");
    }
}
