//! The archive source: reads the (compressed) archive off the page cache on its own thread,
//! detects the compression by magic bytes and decompresses on other threads, so parsing and
//! file creation overlap with both. zstd archives are cut at frame boundaries and their frames
//! decoded in parallel (`zframes`; a single-frame archive on one thread); the other formats,
//! and zstd when one decompression thread is asked for, are decoded on one thread by a
//! streaming decoder that reads concatenated frames (members, streams) to the end.
//!
//! A path is read with the engine's [`cacheless::Reader`] (direct I/O with read-ahead, or buffered
//! when the archive is already cached, as its auto policy decides and reports); a stream (stdin,
//! a pipe) is read with plain reads. Either way the reading runs on its own thread.

use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use cacheless::Progress;

use crate::error::{Error, Result};
use crate::zframes::{self, FrameReader, Stats, OUT_CHUNK};
use ahead::Ahead;

pub mod ahead;

const LZ4_MAGIC: &[u8] = &[0x04, 0x22, 0x4d, 0x18];

/// Whether `b` begins with a skippable frame's magic.
fn skippable_magic(b: &[u8]) -> bool {
    matches!(b, [a, b1, c, d, ..] if zframes::is_skippable(u32::from_le_bytes([*a, *b1, *c, *d])))
}

/// The length of the skippable frame's payload that `b` begins with (after its 8-byte header),
/// or `None` when `b` does not begin with a whole skippable frame header.
fn skippable_len(b: &[u8]) -> Option<usize> {
    if !skippable_magic(b) {
        return None;
    }
    let len: [u8; 4] = b.get(4..8)?.try_into().ok()?;
    usize::try_from(u32::from_le_bytes(len)).ok()
}

/// Compression formats recognised by their magic bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// Zstandard (`28 b5 2f fd`).
    Zstd,
    /// gzip (`1f 8b`).
    Gzip,
    /// xz (`fd 37 7a 58 5a 00`).
    Xz,
    /// LZ4 frame format (`04 22 4d 18`).
    Lz4,
    /// bzip2 (`BZh`).
    Bzip2,
    /// Plain tar.
    None,
}

impl Compression {
    /// Detects the compression from the first bytes of the archive.
    ///
    /// Skippable frames (magic 0x184D2A50..5F, then a 4-byte little-endian length) belong to both
    /// zstd and LZ4: pzstd and `cacheless pack` begin zstd streams with one, and an LZ4 stream may
    /// carry them too. They are stepped over and the frame after them decides; where that frame
    /// lies beyond `head`, or nothing follows, the stream is taken as zstd.
    pub fn detect(head: &[u8]) -> Compression {
        let mut at = 0usize;
        let mut skipped = false;
        while let Some(len) = skippable_len(&head[at..]) {
            skipped = true;
            match at.checked_add(8).and_then(|a| a.checked_add(len)) {
                Some(next) if next < head.len() => at = next,
                _ => return Compression::Zstd,
            }
        }
        let head = &head[at..];
        if skippable_magic(head) {
            // A skippable frame whose header `head` cuts short.
            return Compression::Zstd;
        }
        if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) || (skipped && !head.starts_with(LZ4_MAGIC)) {
            Compression::Zstd
        } else if head.starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
            Compression::Xz
        } else if head.starts_with(LZ4_MAGIC) {
            Compression::Lz4
        } else if head.len() >= 4 && head.starts_with(b"BZh") && (b'1'..=b'9').contains(&head[3]) {
            Compression::Bzip2
        } else {
            Compression::None
        }
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Compression::Zstd => "zstd",
            Compression::Gzip => "gzip",
            Compression::Xz => "xz",
            Compression::Lz4 => "lz4",
            Compression::Bzip2 => "bzip2",
            Compression::None => "none",
        }
    }
}

/// How the archive itself was read.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SourceInfo {
    /// Detected compression.
    pub compression: Compression,
    /// How the archive was read, and why (serialized as `read_mode` and `reason`).
    #[serde(flatten)]
    pub read: SourceRead,
    /// Size of the archive file, if known.
    pub archive_len: Option<u64>,
    /// Threads that decompressed (0 for a plain tar; for zstd decoded frame by frame, those
    /// that decoded at least one frame).
    pub decompress_threads: usize,
    /// zstd frames decoded frame by frame (skippable frames not counted); `None` where the
    /// stream was decoded by one streaming decoder, which does not count them.
    pub frames: Option<u64>,
}

/// How an archive is read: its mode and why, typed up to the report, and worded only where it
/// is printed or handed to Python.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum SourceRead {
    /// A file, read by the engine as its policy decided (`direct`, `dontcache`, ...).
    File(cacheless::Decision),
    /// Standard input or a pipe; or, with its path, a file that is not regular.
    Stream(Option<PathBuf>),
    /// A download: ranged GETs of `part_size` bytes, up to `in_flight` at once, pinned to
    /// the object's ETag.
    Download {
        /// Bytes per request.
        part_size: u64,
        /// Requests in flight at most.
        in_flight: usize,
        /// The ETag every range is pinned to.
        etag: Option<String>,
    },
}

impl SourceRead {
    /// The read mode's name: the engine's (`direct`, `dontcache`, ...), `stream` or `remote`.
    pub fn mode(&self) -> String {
        match self {
            SourceRead::File(d) => d.mode.to_string(),
            SourceRead::Stream(_) => "stream".into(),
            SourceRead::Download { .. } => "remote".into(),
        }
    }
}

impl std::fmt::Display for SourceRead {
    /// Why the archive was read so.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceRead::File(d) => write!(f, "{}", d.reason),
            SourceRead::Stream(None) => f.write_str("stdin or pipe"),
            SourceRead::Stream(Some(p)) => write!(f, "{}: not a regular file, read as a stream", p.display()),
            SourceRead::Download { part_size, in_flight, etag } => {
                #[allow(clippy::cast_precision_loss)] // A size in a sentence.
                let size = cacheless::human_bytes(*part_size as f64);
                write!(f, "ranged GETs of {size}, up to {in_flight} in flight, pinned to ETag {}", etag.as_deref().unwrap_or("none"))
            }
        }
    }
}

impl serde::Serialize for SourceRead {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("read_mode", &self.mode())?;
        m.serialize_entry("reason", &self.to_string())?;
        m.end()
    }
}

/// Where the archive comes from.
pub enum Input {
    /// A file path.
    Path(PathBuf),
    /// Any stream (stdin, a pipe, a test buffer).
    Stream(Box<dyn Read + Send>),
    /// A stream that says what it is (a download: `cacheless extract URL`): read as a stream,
    /// reported as it says, with its length where known.
    Named {
        /// The bytes.
        reader: Box<dyn Read + Send>,
        /// How it is read, for the report.
        read: SourceRead,
        /// Its length, when known.
        len: Option<u64>,
    },
}

/// Size of the reads from a stream.
const READ_CHUNK: usize = 4 << 20;

/// Reads from `r` until `buf` is full or the stream ends, retrying EINTR. Returns the bytes read
/// and the error that stopped it early, if any (the bytes before it are still in `buf`).
fn fill(r: &mut impl Read, buf: &mut [u8]) -> (usize, Option<io::Error>) {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (filled, Some(e)),
        }
    }
    (filled, None)
}

/// A `Read` over a channel of byte chunks; a `None`-terminated stream, errors travel in-band.
pub(crate) struct ChanReader {
    rx: Receiver<io::Result<Vec<u8>>>,
    cur: Vec<u8>,
    pos: usize,
    done: bool,
}

impl ChanReader {
    pub(crate) fn new(rx: Receiver<io::Result<Vec<u8>>>) -> Self {
        ChanReader { rx, cur: Vec::new(), pos: 0, done: false }
    }
    /// Peeks the first bytes without consuming them.
    fn peek(&mut self) -> io::Result<&[u8]> {
        while self.pos >= self.cur.len() && !self.done {
            match self.rx.recv() {
                Ok(Ok(c)) => {
                    self.cur = c;
                    self.pos = 0;
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => self.done = true,
            }
        }
        Ok(&self.cur[self.pos..])
    }

    /// Peeks at least `n` bytes (fewer only at the end of the stream), joining chunks if the
    /// current one holds fewer.
    fn peek_n(&mut self, n: usize) -> io::Result<&[u8]> {
        self.peek()?;
        while self.cur.len() - self.pos < n && !self.done {
            match self.rx.recv() {
                Ok(Ok(c)) => {
                    self.cur.drain(..self.pos);
                    self.pos = 0;
                    self.cur.extend_from_slice(&c);
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => self.done = true,
            }
        }
        Ok(&self.cur[self.pos..])
    }

    /// Consumes the skippable frames (zstd's and LZ4's, magic 0x184D2A50..5F) that come next.
    fn skip_skippable_frames(&mut self) -> io::Result<()> {
        while let Some(len) = skippable_len(self.peek_n(8)?) {
            self.pos += 8;
            let want = len as u64;
            if io::copy(&mut self.by_ref().take(want), &mut io::sink())? < want {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "skippable frame cut short"));
            }
        }
        Ok(())
    }
}

impl Read for ChanReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.peek()?;
        let avail = &self.cur[self.pos..];
        let n = avail.len().min(buf.len());
        buf[..n].copy_from_slice(&avail[..n]);
        self.pos += n;
        Ok(n)
    }
}

/// Where the decompressed stream comes from: one channel, or one channel per zstd frame.
enum Decoded {
    Chan(ChanReader),
    Frames(FrameReader),
}

/// The decompressed tar stream plus the threads feeding it.
pub struct TarStream {
    reader: Decoded,
    threads: Vec<JoinHandle<()>>,
    stats: Option<Arc<Stats>>,
    /// How far into the decompressed stream every checksum covering the bytes has passed (see
    /// [`TarStream::verified`]).
    verified: Arc<AtomicU64>,
    /// The archive's checksums verified ahead by a second read, where it is a file decoded as
    /// one stream (see [`ahead`]).
    ahead: Option<Arc<Ahead>>,
    /// How the archive is read and what compression it has.
    pub info: SourceInfo,
}

impl TarStream {
    /// How many bytes of the decompressed (tar) stream every checksum covering them has
    /// verified so far: up to the end of the last gzip member, xz or bzip2 stream, zstd or LZ4
    /// frame whose checks passed (`u64::MAX` for a plain tar, which has none). Rises as the
    /// stream is read; a byte past it may still turn out corrupt.
    pub fn verified(&self) -> Arc<AtomicU64> {
        self.verified.clone()
    }

    /// The verifier that may check the archive's checksums ahead (see [`ahead`]): where
    /// the archive is a file decoded as one stream.
    pub fn ahead(&self) -> Option<Arc<Ahead>> {
        self.ahead.clone().filter(|a| a.enabled())
    }

    /// The counts of frames and decompression threads so far (final once the stream has been
    /// read to its end).
    pub fn source_info(&self) -> SourceInfo {
        let mut info = self.info.clone();
        if let Some(s) = &self.stats {
            info.frames = Some(s.frames.load(Ordering::Relaxed));
            info.decompress_threads = s.threads_used();
        }
        info
    }
}

impl Read for TarStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.reader {
            Decoded::Chan(r) => r.read(buf),
            Decoded::Frames(r) => r.read(buf),
        }
    }
}

impl Drop for TarStream {
    fn drop(&mut self) {
        // Closing our receivers makes the producers' sends fail, so they exit.
        let (_tx, rx) = sync_channel(1);
        drop(std::mem::replace(&mut self.reader, Decoded::Chan(ChanReader::new(rx))));
        join(std::mem::take(&mut self.threads));
        if let Some(a) = &self.ahead {
            a.finish();
        }
    }
}

/// How many threads decompress, and the share of the memory budget they may hold.
#[derive(Clone, Debug)]
pub struct Decompress {
    /// Threads decoding zstd frames (1: one streaming decoder, as for the other formats).
    pub threads: usize,
    /// The largest zstd window accepted (log2), where the default is not enough.
    pub window_log_max: Option<u32>,
    /// Bytes the frames in flight may hold (the caller's share of its budget for them).
    pub bytes: usize,
}

/// Opens the archive: starts the reader thread, detects the compression and, unless the archive is
/// plain tar, starts the decompressor thread. The archive bytes read are counted as `progress`'s
/// input bytes, against the archive's size when it is known.
/// A zstd archive is decoded by `decompress.threads` threads when that is more than one: its
/// frames in parallel, with `decompress.bytes` for their input and output in flight.
pub fn open(input: Input, progress: Arc<Progress>, read_options: &cacheless::ReadOptions, decompress: &Decompress) -> Result<TarStream> {
    let (tx, rx) = sync_channel::<io::Result<Vec<u8>>>(4);
    let mut threads = Vec::new();
    // A FIFO, a pipe (`<(…)`), a character device (a tape) or a socket is read as a stream, as
    // standard input is: no size to plan reads by, no O_DIRECT.
    let mut not_regular = None;
    let input = match input {
        Input::Path(path) if std::fs::metadata(&path).is_ok_and(|m| !m.is_file() && !m.file_type().is_block_device() && !m.is_dir()) => {
            // A FIFO with no writer yet is waited for in a way Ctrl-C ends, and so is its data.
            let flags = cacheless::sys::OFlags::RDONLY | cacheless::sys::OFlags::CLOEXEC | cacheless::sys::OFlags::NOCTTY;
            let fd = cacheless::sys::open_interruptible(cacheless::sys::CWD, path.as_path(), flags, cacheless::sys::FMode::empty())
                .map_err(|e| Error::io("open", &path, io::Error::from(e)))?;
            not_regular = Some(path.clone());
            Input::Stream(Box::new(cacheless::sys::FdStream(fd)))
        }
        i => i,
    };
    let verified = Arc::new(AtomicU64::new(0));
    let mut ahead = None;
    let (read, archive_len) = match input {
        Input::Path(path) => {
            let reader = cacheless::Reader::open(&path, read_options)?;
            let d = reader.decision().clone();
            let len = Some(reader.len());
            progress.add_total_input_bytes(reader.len());
            let ab = progress.clone();
            // A file can be read twice: its checksums may be verified ahead (see `ahead`).
            let a = Ahead::new(path.clone(), read_options.clone(), verified.clone());
            ahead = Some(a.clone());
            threads.push(
                std::thread::Builder::new()
                    .name("cacheless-read".into())
                    .spawn(move || read_engine_thread(reader, tx, ab, a))
                    .map_err(|e| Error::io("spawn", &path, e))?,
            );
            (SourceRead::File(d), len)
        }
        Input::Stream(r) => {
            threads.push(read_stream_thread(r, tx, progress.clone())?);
            (SourceRead::Stream(not_regular), None)
        }
        Input::Named { reader, read, len } => {
            if let Some(l) = len {
                progress.add_total_input_bytes(l);
            }
            threads.push(read_stream_thread(reader, tx, progress.clone())?);
            (read, len)
        }
    };
    // Whatever happens next, a verifier that never started ends with the stream.
    let finish_ahead = |a: &Option<Arc<Ahead>>| a.iter().for_each(|a| a.off());
    let mut raw = ChanReader::new(rx);
    if let Err(e) = raw.peek() {
        // The reader thread holds the archive and its buffers: they are given back before the
        // error is.
        drop(raw);
        finish_ahead(&ahead);
        join(threads);
        return Err(Error::from_engine_io(e).unwrap_or_else(|e| Error::io("read", "archive", e)));
    }
    let compression = Compression::detect(raw.peek().unwrap_or_default());
    let mut info = SourceInfo { compression, read, archive_len, decompress_threads: 0, frames: None };
    if compression == Compression::None {
        finish_ahead(&ahead);
        verified.store(u64::MAX, Ordering::Release);
        return Ok(TarStream { reader: Decoded::Chan(raw), threads, stats: None, verified, ahead: None, info });
    }
    info.decompress_threads = 1;
    if let Some(a) = &ahead {
        a.enable(compression, decompress.window_log_max);
    }
    if compression == Compression::Zstd && decompress.threads > 1 {
        // The frames' buffers are sized to the caller's share: not leased, so that they never
        // wait on the file writers' leases (which wait on the parser, which waits on the frames).
        let mut plan = zframes::Plan::new(decompress.threads, decompress.bytes.max(1));
        plan.window_log_max = decompress.window_log_max;
        let ChanReader { rx, cur, pos, .. } = raw;
        let (frames, more, stats) =
            zframes::start(zframes::RawIn::new(rx, cur, pos), plan, verified.clone()).map_err(|e| Error::io("spawn", "decompressor", e))?;
        threads.extend(more);
        if let Some(a) = &ahead {
            a.watch_frames(stats.clone());
        }
        return Ok(TarStream { reader: Decoded::Frames(frames), threads, stats: Some(stats), verified, ahead, info });
    }
    let (dtx, drx) = sync_channel::<io::Result<Vec<u8>>>(8);
    let marks = verified.clone();
    let window_log_max = decompress.window_log_max;
    let spawned = std::thread::Builder::new().name("cacheless-decompress".into()).spawn(move || {
        // A decoder fed a hostile stream must not take the run down: its panic is an
        // error of the stream, reported where it broke.
        let failed = dtx.clone();
        if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decompress_thread(compression, raw, dtx, marks, window_log_max))) {
            let msg = format!("{} decoder failed: {}", compression.name(), crate::error::panic_message(&*p));
            let _ = failed.send(Err(io::Error::new(io::ErrorKind::InvalidData, msg)));
        }
    });
    match spawned {
        Ok(t) => threads.push(t),
        Err(e) => {
            // The failed spawn dropped the receiver: the reader thread's sends fail, it exits.
            finish_ahead(&ahead);
            join(threads);
            return Err(Error::io("spawn", "decompressor", e));
        }
    }
    Ok(TarStream { reader: Decoded::Chan(ChanReader::new(drx)), threads, stats: None, verified, ahead, info })
}

/// Reads a stream on its own thread, in chunks sent down `tx`.
fn read_stream_thread(mut r: Box<dyn Read + Send>, tx: SyncSender<io::Result<Vec<u8>>>, progress: Arc<Progress>) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("cacheless-read".into())
        .spawn(move || loop {
            let mut buf = vec![0u8; READ_CHUNK];
            let filled = match fill(&mut r, &mut buf) {
                (_, Some(e)) => {
                    let _ = tx.send(Err(e));
                    return;
                }
                (n, None) => n,
            };
            if filled == 0 {
                return;
            }
            buf.truncate(filled);
            progress.add_input_bytes(filled as u64);
            if tx.send(Ok(buf)).is_err() {
                return;
            }
        })
        .map_err(|e| Error::io("spawn", "-", e))
}

/// Waits for the threads that fed a receiver now closed (their sends fail, so they exit).
fn join(threads: Vec<JoinHandle<()>>) {
    for t in threads {
        let _ = t.join();
    }
}

/// The decoder of a stream compressed as `c`, raising `verified` as its members' checks pass.
pub(crate) fn decoder(c: Compression, raw: ChanReader, verified: Arc<AtomicU64>, window_log_max: Option<u32>) -> Box<dyn Read> {
    match c {
        Compression::Lz4 => Box::new(Lz4Frames::new(raw, verified)),
        Compression::None => Box::new(raw),
        c => Box::new(Members { window_log_max, ..Members::new(c, raw, verified) }),
    }
}

fn decompress_thread(c: Compression, raw: ChanReader, tx: SyncSender<io::Result<Vec<u8>>>, verified: Arc<AtomicU64>, window_log_max: Option<u32>) {
    let mut dec = decoder(c, raw, verified, window_log_max);
    loop {
        let mut buf = vec![0u8; OUT_CHUNK];
        let (filled, err) = fill(&mut dec, &mut buf);
        if let Some(e) = err {
            // What decoded before the error still goes out, so the parser reports where it broke.
            if filled > 0 {
                buf.truncate(filled);
                let _ = tx.send(Ok(buf));
            }
            let _ = tx.send(Err(io::Error::new(e.kind(), format!("{} decoder: {}", c.name(), zframes::explain(&e)))));
            return;
        }
        if filled == 0 {
            return;
        }
        buf.truncate(filled);
        if tx.send(Ok(buf)).is_err() {
            return;
        }
    }
}

/// One member of a stream of concatenated members, being decoded: a gzip member, an xz or
/// bzip2 stream, a zstd frame. Each decoder checks its member's checksum (gzip's CRC-32 and
/// size, xz's block and stream checks, bzip2's block and stream CRCs, zstd's content checksum)
/// before it reports the member's end.
enum Member {
    Gzip(flate2::bufread::GzDecoder<BufReader<ChanReader>>),
    Xz(XzMember),
    Bzip2(bzip2::bufread::BzDecoder<BufReader<ChanReader>>),
    Zstd(zstd::stream::read::Decoder<'static, BufReader<ChanReader>>),
}

/// One xz stream, decoded until its end is reported: xz2's single-stream reader calls the
/// bytes of a next stream corrupt instead of stopping before them, so the stream is driven
/// here (its block and stream checks are the decoder's, as there).
struct XzMember {
    stream: xz2::stream::Stream,
    input: BufReader<ChanReader>,
    ended: bool,
}

impl XzMember {
    fn new(input: BufReader<ChanReader>) -> io::Result<XzMember> {
        Ok(XzMember { stream: xz2::stream::Stream::new_stream_decoder(u64::MAX, 0)?, input, ended: false })
    }
}

impl Read for XzMember {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.ended || buf.is_empty() {
                return Ok(0);
            }
            let inp = self.input.fill_buf()?;
            let eof = inp.is_empty();
            let (in0, out0) = (self.stream.total_in(), self.stream.total_out());
            let action = if eof { xz2::stream::Action::Finish } else { xz2::stream::Action::Run };
            let status = self.stream.process(inp, buf, action);
            let consumed = cacheless::conv::usize_of(self.stream.total_in() - in0);
            let produced = cacheless::conv::usize_of(self.stream.total_out() - out0);
            self.input.consume(consumed);
            if status? == xz2::stream::Status::StreamEnd {
                self.ended = true;
            }
            if produced > 0 || self.ended {
                return Ok(produced);
            }
            if eof {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "stream truncated"));
            }
            if consumed == 0 {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "corrupt xz stream"));
            }
        }
    }
}

/// Concatenated members (gzip members, xz and bzip2 streams, zstd frames), decoded one at a
/// time so that the end of each is known: every byte produced up to a member's end has passed
/// the checksums that cover it, and `verified` says so (the count of decoded bytes up to there).
/// The files made of those bytes may then take their names (see `cacheless::FileCreator`'s
/// gate); the bytes of a member whose check fails never do.
struct Members {
    codec: Compression,
    /// The compressed input between members.
    input: Option<BufReader<ChanReader>>,
    cur: Option<Member>,
    produced: u64,
    verified: Arc<AtomicU64>,
    /// The largest zstd window accepted (log2), where the default is not enough.
    window_log_max: Option<u32>,
}

impl Members {
    fn new(codec: Compression, raw: ChanReader, verified: Arc<AtomicU64>) -> Members {
        Members { codec, input: Some(BufReader::with_capacity(1 << 20, raw)), cur: None, produced: 0, verified, window_log_max: None }
    }

    /// Starts the next member, or says there is none.
    fn next_member(&mut self) -> io::Result<bool> {
        let Some(mut input) = self.input.take() else { return Ok(false) };
        if self.codec == Compression::Xz {
            // xz stream padding: null bytes between and after streams.
            loop {
                let buf = input.fill_buf()?;
                let zeros = buf.iter().take_while(|&&b| b == 0).count();
                if zeros == 0 {
                    break;
                }
                input.consume(zeros);
            }
        }
        if input.fill_buf()?.is_empty() {
            self.input = Some(input);
            return Ok(false);
        }
        self.cur = Some(match self.codec {
            Compression::Gzip => Member::Gzip(flate2::bufread::GzDecoder::new(input)),
            Compression::Xz => Member::Xz(XzMember::new(input)?),
            Compression::Bzip2 => Member::Bzip2(bzip2::bufread::BzDecoder::new(input)),
            _ => {
                let mut d = zstd::stream::read::Decoder::with_buffer(input)?.single_frame();
                if let Some(w) = self.window_log_max {
                    d.window_log_max(w)?;
                }
                Member::Zstd(d)
            }
        });
        Ok(true)
    }
}

impl Read for Members {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            let n = match &mut self.cur {
                None => {
                    if !self.next_member()? {
                        return Ok(0);
                    }
                    continue;
                }
                Some(Member::Gzip(d)) => d.read(buf)?,
                Some(Member::Xz(d)) => d.read(buf)?,
                Some(Member::Bzip2(d)) => d.read(buf)?,
                Some(Member::Zstd(d)) => d.read(buf)?,
            };
            if n > 0 {
                self.produced += n as u64;
                return Ok(n);
            }
            // The member ended, its checks passed: what it held is verified (or more already,
            // by a verifier ahead: see `ahead`).
            self.verified.fetch_max(self.produced, Ordering::AcqRel);
            self.input = match self.cur.take() {
                Some(Member::Gzip(d)) => Some(d.into_inner()),
                Some(Member::Xz(d)) => Some(d.input),
                Some(Member::Bzip2(d)) => Some(d.into_inner()),
                Some(Member::Zstd(d)) => Some(d.finish()),
                None => None,
            };
        }
    }
}

/// Concatenated LZ4 frames (as `lz4` and `cacheless pack` write them): lz4_flex's decoder
/// returns end of stream at the end of each frame, so go on while input remains. Skippable
/// frames, which lz4_flex refuses, are stepped over before each frame.
///
/// lz4_flex also returns end of stream where the input ends inside a frame at a block boundary
/// or after the frame's header (no end mark): the input then ran dry under the decoder, which a
/// frame that ended with its end mark never does. That is a truncated archive, as `lz4` says
/// ("Unfinished stream"), never a clean end.
struct Lz4Frames {
    dec: lz4_flex::frame::FrameDecoder<DrySeen>,
    /// At the start of the stream or just after a frame's end.
    between: bool,
    /// Bytes decoded so far, and up to where the frames' checks passed (see [`Members`]).
    produced: u64,
    verified: Arc<AtomicU64>,
}

/// The archive's bytes, noting whether a read found none left (see [`Lz4Frames`]).
struct DrySeen {
    raw: ChanReader,
    dry: bool,
}

impl Read for DrySeen {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.raw.read(buf)?;
        if n == 0 && !buf.is_empty() {
            self.dry = true;
        }
        Ok(n)
    }
}

impl Lz4Frames {
    fn new(raw: ChanReader, verified: Arc<AtomicU64>) -> Self {
        Lz4Frames { dec: lz4_flex::frame::FrameDecoder::new(DrySeen { raw, dry: false }), between: true, produced: 0, verified }
    }
}

impl Read for Lz4Frames {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.between {
                let raw = &mut self.dec.get_mut().raw;
                raw.skip_skippable_frames()?;
                if raw.peek()?.is_empty() {
                    return Ok(0);
                }
                self.between = false;
            }
            let n = self.dec.read(buf)?;
            if n > 0 {
                self.produced += n as u64;
                return Ok(n);
            }
            if self.dec.get_ref().dry {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "stream truncated: a frame ends without its end mark"));
            }
            // The frame's end mark (and its checksums, where it has them) passed.
            self.verified.fetch_max(self.produced, Ordering::AcqRel);
            self.between = true;
        }
    }
}

/// Reads an archive file through the engine, each piece checked by `ahead` before it is sent
/// (see [`ahead`]; where no verifier can run, as they come).
fn read_engine_thread(mut r: cacheless::Reader, tx: SyncSender<io::Result<Vec<u8>>>, progress: Arc<Progress>, ahead: Arc<Ahead>) {
    loop {
        match r.next_chunk() {
            Ok(Some(c)) => {
                // Copied out so the engine's buffer goes back to its read-ahead at once.
                let v = c.to_vec();
                drop(c);
                progress.add_input_bytes(v.len() as u64);
                if let Err(e) = ahead.check(&v) {
                    let _ = tx.send(Err(e));
                    return;
                }
                if tx.send(Ok(v)).is_err() {
                    return;
                }
            }
            Ok(None) => return,
            Err(e) => {
                // The engine error travels whole (tarparse takes it back out).
                let _ = tx.send(Err(io::Error::from(e)));
                return;
            }
        }
    }
}
