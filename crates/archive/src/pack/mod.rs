//! `pack`: create a tar archive (zstd, gzip, xz, lz4, bzip2 or plain) from files and trees
//! without filling the page cache.
//!
//! Four stages run at once. A dispatcher thread walks the inputs in archive order and hands
//! each file to a few read-ahead threads, which read it through the engine's `Reader` (see
//! `read`). The calling thread writes the tar stream in order: headers (see `header`), then each
//! file's data as it arrives. The stream is cut into frames compressed in parallel, and one
//! output thread writes them in order through the engine's `Writer` (durable, under a temporary
//! name renamed into place at the end, removed on error or interrupt) or to a stream (see
//! `frames`). Every buffer comes out of one `cacheless::Budget`, carved into shares for the
//! output, the compression and the read-ahead so that no stage waits on memory another holds.
//!
//! Layout: `options` (what is asked and reported, and the parsing of the front ends' values),
//! `time` (`--mtime`'s calendar), `walk` (the inputs in archive order), `read` (the read-ahead),
//! `write` (the tar stream, on the calling thread), `header` (tar headers), `frames` (the
//! compression and the output), and here the run itself: its set-up, its threads and its end.

mod frames;
mod header;
mod options;
mod read;
mod time;
mod walk;
mod write;

use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use cacheless::{Budget, Progress, ReadOptions, WriteOptions};

use crate::error::{Error, Result};
use crate::modes::ModeCounts;
use crate::source::Compression;
use frames::{Codec, Frame, Outcome, Sink, TarOut};
use read::{Job, Msg};
use walk::Item;
use write::{write_members, Counts, Stop};

pub use frames::SKIPPABLE_MAGIC;
pub use options::{
    check_level, compression_for_name, default_level, parse_compression, Members, Output, Owner, PackOptions, PackReport, SortOrder, DEFAULT_FRAME_SIZE,
    MIN_FRAME_SIZE,
};
pub use time::parse_time;

/// One member in archive order, as the dispatcher hands it to the writer.
enum Slot {
    Plain(Item),
    Data(Item, Receiver<Msg>),
    Warn(String),
    Error(String, Option<i32>),
}

/// Shares of the budget for the output, the compression and the read-ahead.
struct Shares {
    /// The output's, the compression's (frames), the read-ahead's and the compression
    /// workers' scratch, held out of the job's budget together.
    parts: cacheless::Shares,
    workers: usize,
    slots: usize,
}

impl Shares {
    fn write(&self) -> &Budget {
        self.parts.part(0)
    }
    fn comp(&self) -> &Budget {
        self.parts.part(1)
    }
    fn read(&self) -> &Budget {
        self.parts.part(2)
    }
}

fn shares(o: &PackOptions, frame: usize) -> Shares {
    let total = o.io.budget.limit();
    let wblock = o.io.block_size.max(4096);
    let wbytes = (o.io.queue_depth + 1) * wblock;
    let rest = total.saturating_sub(wbytes);
    let rbytes = (rest / 4).clamp(16 << 20, 256 << 20).min(rest.max(1));
    let cbytes = rest.saturating_sub(rbytes);
    let fit = cbytes / frame;
    let workers = if o.compression == Compression::None { 0 } else { o.threads.clamp(1, fit.saturating_sub(1).max(1)) };
    // One frame filling, one per worker compressing, one being written, one spare.
    let slots = fit.saturating_sub(workers).clamp(1, workers + 3);
    // The workers' scratch (output produced while the input still exists) is reserved with
    // the frames: a worker never waits for it. The shares are taken together, so that a budget
    // smaller than they need is exceeded (and reported) rather than waited on forever.
    let parts = o.io.budget.split(&[wbytes.max(1), (slots * frame).max(1), rbytes.max(1), workers * frame]);
    Shares { parts, workers, slots }
}

/// Hands walked members to the reader pool and the writer, in order.
struct Dispatch<'a> {
    slots: SyncSender<Slot>,
    jobs: SyncSender<Job>,
    read: &'a Budget,
    ro: &'a ReadOptions,
    progress: &'a Progress,
}

impl walk::Visit for Dispatch<'_> {
    fn item(&mut self, mut item: Item) -> bool {
        if self.progress.is_cancelled() {
            return false;
        }
        let slot = match item.data.take() {
            Some(walk::Data { sparse, at }) => {
                let size = item.fields.size;
                self.progress.add_total_files(1);
                self.progress.add_total_bytes(size);
                let (mut ro, bytes) = read::plan(self.ro, size, sparse);
                // Taken in archive order: earlier files' shares are released as the writer
                // consumes them, so this never waits on a file that only a later one blocks.
                let lease = self.read.lease(cacheless::LeaseRequest::one(bytes));
                ro.io.budget = Budget::new(bytes);
                let (tx, rx) = sync_channel(read::CHANNEL);
                let name = PathBuf::from(std::ffi::OsStr::from_bytes(&item.name));
                let job = Job { at, name, size, sparse, id: item.id, ro, lease, tx, cancel: self.progress.cancel_flag() };
                if self.jobs.send(job).is_err() {
                    return false;
                }
                Slot::Data(item, rx)
            }
            None => Slot::Plain(item),
        };
        self.slots.send(slot).is_ok()
    }
    fn error(&mut self, msg: String, errno: Option<i32>) {
        let _ = self.slots.send(Slot::Error(msg, errno));
    }
    fn warn(&mut self, msg: String) {
        let _ = self.slots.send(Slot::Warn(msg));
    }
}

fn spawn<T: Send + 'static>(name: &str, f: impl FnOnce() -> T + Send + 'static) -> Result<JoinHandle<T>> {
    std::thread::Builder::new().name(name.into()).spawn(f).map_err(|e| Error::io("spawn", name, e))
}

/// A request that cannot be honoured (a level the format lacks, no paths, a frame too small).
fn invalid(output: &Path, msg: String) -> Error {
    Error::Engine(cacheless::Error::new(cacheless::ErrorKind::InvalidInput, "pack", output, msg))
}

/// The name an output is reported under: its path, or `-` for a stream.
fn out_path(o: &Output) -> PathBuf {
    match o {
        Output::Path(p) => p.clone(),
        Output::Stream(_) => PathBuf::from("-"),
    }
}

fn interrupted(what: &Path) -> Error {
    Error::Engine(cacheless::Error::new(cacheless::ErrorKind::Interrupted, "pack", what, "interrupted; the archive was removed"))
}

/// Creates the archive. Returns `Err` when the archive could not be created or completed
/// (nothing is left under its name); unreadable or changing input files are reported in the
/// report (`is_ok()` false) and the archive is still complete and valid.
pub fn pack(opts: PackOptions) -> Result<PackReport> {
    let sync = opts.durability.each_file();
    let (report, archive) = pack_staged(opts)?;
    if let Some(a) = archive {
        // Made durable by its writer when `sync`; the name too then.
        a.publish(sync)?;
    }
    Ok(report)
}

/// [`pack`] up to the archive's rename: a complete archive file is returned under its
/// temporary name, for the caller to name with `PendingFile::publish` (durable when
/// `opts.durability` is `EachFile`) once nothing stands in the way (a Ctrl-C that came meanwhile); dropped instead,
/// it is removed. `None` for a stream.
pub fn pack_staged(mut opts: PackOptions) -> Result<(PackReport, Option<cacheless::PendingFile>)> {
    let t0 = Instant::now();
    let progress = opts.progress.clone().unwrap_or_default();
    let c = opts.compression;
    opts.durability.file_by_file("pack", &out_path(&opts.output))?;
    let (level, frame) = level_and_frame(&opts)?;
    let sh = shares(&opts, frame);
    let output = std::mem::replace(&mut opts.output, Output::Path(PathBuf::new()));
    // The output first: a destination we cannot create fails before any reading, and the
    // walk leaves out the archive itself (its temporary name, or an old archive being replaced).
    let Opened { sink, name: out_name, skip } = open_output(output, &opts, &sh)?;
    let codecs = (0..sh.workers)
        .map(|_| Codec::new(c, level).map_err(|e| invalid(&out_name, format!("{} level {level}: {e}", c.name()))))
        .collect::<Result<Vec<_>>>()?;
    let (slots, walk) = spawn_walk(&opts, skip, &sh, &progress)?;
    let (frame_tx, pool, compress) = spawn_compression(c, codecs, &sh, sink, &progress)?;
    let mut counts = Counts::new(empty_report(out_name.clone(), c, level, frame, &sh));
    if sh.parts.over() > 0 {
        counts.warn(format!(
            "the memory budget of {} MiB is less than pack needs with {} MiB frames (one per compression stage, plus the writer's and the read-ahead's buffers): using {} MiB more",
            opts.io.budget.limit() >> 20,
            frame >> 20,
            sh.parts.over().div_ceil(1 << 20)
        ));
    }
    let tar = TarOut::new(frame, frame_tx, sh.comp().clone(), pool);
    let (res, walked) = write_archive(slots, walk, tar, &mut counts, &progress);
    let outcome = compress.join(&out_name)?;
    let (mut report, archive) = finish(counts, res, outcome, walked, &progress, &out_name)?;
    report.elapsed_s = t0.elapsed().as_secs_f64();
    Ok((report, archive))
}

/// The compression level and the frame size to use, checked, and the paths checked to name
/// something to pack.
fn level_and_frame(opts: &PackOptions) -> Result<(i32, usize)> {
    let c = opts.compression;
    let level = match opts.level {
        Some(l) => {
            check_level(c, l).map_err(|m| invalid(&out_path(&opts.output), m))?;
            l
        }
        None => default_level(c),
    };
    if opts.members.paths.is_empty() {
        return Err(invalid(&out_path(&opts.output), "nothing to pack: give at least one path".into()));
    }
    // Uncompressed: the stream goes out in write-request pieces.
    let frame = if c == Compression::None { opts.io.block_size.max(MIN_FRAME_SIZE) } else { opts.frame_size };
    // The bounds every front end holds these to: checked here too, before anything is
    // allocated, for callers of the library.
    let bad = |m: String| invalid(&out_path(&opts.output), m);
    let frame = cacheless::limits::frame_size("frame size", frame as u64).map_err(bad)?;
    cacheless::limits::threads("compression threads", opts.threads as u64).map_err(bad)?;
    cacheless::limits::threads("read threads", opts.read_threads as u64).map_err(bad)?;
    Ok((level, frame))
}

/// Where the archive goes, opened.
struct Opened {
    sink: Sink,
    /// The name the archive is reported under: its path, or `-` for a stream.
    name: PathBuf,
    /// Files the walk leaves out (device, inode): the archive's temporary name, and an old
    /// archive being replaced.
    skip: Vec<(u64, u64)>,
}

/// Opens where the archive goes (a file under a temporary name, or the stream).
fn open_output(output: Output, opts: &PackOptions, sh: &Shares) -> Result<Opened> {
    let mut skip = Vec::new();
    let (sink, out_name) = match output {
        Output::Path(p) => {
            if let Ok(m) = std::fs::metadata(&p) {
                if m.is_dir() {
                    return Err(Error::io("create", &p, std::io::Error::from_raw_os_error(cacheless::sys::consts::EISDIR)));
                }
                skip.push((m.dev(), m.ino()));
            }
            let mut wo = WriteOptions::from(opts.io.clone());
            wo.io.budget = sh.write().clone();
            wo.durability = opts.durability;
            wo.naming = cacheless::Naming::Temporary;
            let w = cacheless::Writer::create(&p, &wo)?;
            let m = w.file().metadata().map_err(|e| Error::io("stat", &p, e))?;
            skip.push((m.dev(), m.ino()));
            (Sink::File(Box::new(w)), p)
        }
        Output::Stream(s) => (Sink::Stream(s), PathBuf::from("-")),
    };
    Ok(Opened { sink, name: out_name, skip })
}

/// The walk's threads: the dispatcher and the read-ahead.
struct Walk {
    dispatcher: JoinHandle<()>,
    readers: Vec<JoinHandle<()>>,
}

impl Walk {
    /// Waits for the walk's threads; false when the walk panicked, which would have ended the
    /// archive early: such an archive is never kept.
    fn join(self) -> bool {
        let walked = self.dispatcher.join().is_ok();
        for r in self.readers {
            let _ = r.join();
        }
        walked
    }
}

/// Starts the read-ahead threads and the dispatcher walking the inputs; the writer takes the
/// members from the receiver, in archive order.
fn spawn_walk(opts: &PackOptions, skip: Vec<(u64, u64)>, sh: &Shares, progress: &Arc<Progress>) -> Result<(Receiver<Slot>, Walk)> {
    let members = opts.members.clone();
    // Read-ahead threads.
    let (job_tx, job_rx) = sync_channel::<Job>(opts.read_threads.max(1) * 2);
    let job_rx = Arc::new(Mutex::new(job_rx));
    let mut readers = Vec::new();
    for i in 0..opts.read_threads.max(1) {
        let rx = job_rx.clone();
        readers.push(spawn(&format!("cacheless-pack-read-{i}"), move || loop {
            let job = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
            match job {
                Ok(j) => read::run(j),
                Err(_) => return,
            }
        })?);
    }
    // The walk and dispatch.
    let (slot_tx, slot_rx) = sync_channel::<Slot>(4096);
    let (read_budget, ro, prog) = (sh.read().clone(), ReadOptions::from(opts.io.clone()), progress.clone());
    let dispatcher = spawn("cacheless-pack-walk", move || {
        let mut d = Dispatch { slots: slot_tx, jobs: job_tx, read: &read_budget, ro: &ro, progress: &prog };
        walk::walk(&members, &skip, &mut d);
    })?;
    Ok((slot_rx, Walk { dispatcher, readers }))
}

/// The compression's threads: the workers (or a pass-through, for an uncompressed archive)
/// and the output thread.
struct Compress {
    workers: Vec<JoinHandle<()>>,
    output: JoinHandle<Outcome>,
}

impl Compress {
    /// Waits for the workers, then for the output thread, and says what it wrote.
    fn join(self, out_name: &Path) -> Result<Outcome> {
        for w in self.workers {
            let _ = w.join();
        }
        self.output.join().map_err(|p| {
            let msg = format!("the output thread panicked ({}); the archive was removed", crate::error::panic_message(&*p));
            Error::io("write", out_name, std::io::Error::other(msg))
        })
    }
}

/// Starts the compression workers and the output thread writing to `sink`. The writer sends
/// its frames into the sender, taking their buffers from the pool.
fn spawn_compression(
    c: Compression,
    codecs: Vec<Codec>,
    sh: &Shares,
    sink: Sink,
    progress: &Arc<Progress>,
) -> Result<(SyncSender<Frame>, frames::Pool, Compress)> {
    let pool: frames::Pool = Default::default();
    let keep = sh.slots + sh.workers;
    let (frame_tx, frame_rx) = sync_channel::<Frame>(1);
    let frame_rx = Arc::new(Mutex::new(frame_rx));
    let (out_tx, out_rx) = sync_channel::<std::io::Result<Frame>>(sh.slots + 1);
    let mut workers = Vec::new();
    if c == Compression::None {
        let (rx, tx) = (frame_rx.clone(), out_tx.clone());
        workers.push(spawn("cacheless-pack-pass", move || loop {
            let f = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
            let Ok(f) = f else { return };
            if tx.send(Ok(f)).is_err() {
                return;
            }
        })?);
    }
    for (i, codec) in codecs.into_iter().enumerate() {
        let (rx, tx, pool) = (frame_rx.clone(), out_tx.clone(), pool.clone());
        workers.push(spawn(&format!("cacheless-pack-{}-{i}", c.name()), move || frames::worker(codec, rx, tx, pool, keep))?);
    }
    drop(out_tx);
    let (written, opool) = (progress.clone(), pool.clone());
    let zstd = c == Compression::Zstd;
    let output = spawn("cacheless-pack-out", move || frames::output(out_rx, sink, zstd, written, opool, keep))?;
    Ok((frame_tx, pool, Compress { workers, output }))
}

/// The report before anything is written.
fn empty_report(output: PathBuf, compression: Compression, level: i32, frame: usize, sh: &Shares) -> PackReport {
    PackReport {
        output,
        compression,
        level,
        frames: 0,
        frame_size: frame,
        threads: sh.workers,
        frames_in_flight: sh.slots,
        entries: 0,
        files: 0,
        dirs: 0,
        symlinks: 0,
        hardlinks: 0,
        special: 0,
        sparse: 0,
        input_bytes: 0,
        tar_bytes: 0,
        output_bytes: 0,
        read_modes: ModeCounts::default(),
        write: None,
        changed: 0,
        warnings: Vec::new(),
        failures: Vec::new(),
        failure_count: 0,
        elapsed_s: 0.0,
        first_failure_errno: None,
    }
}

/// Writes the tar stream on the calling thread, then stops the walk and ends the stream.
/// Returns the frames sent to the compression (or why the writer stopped early), and whether
/// the walk completed.
fn write_archive(slots: Receiver<Slot>, walk: Walk, mut tar: TarOut, counts: &mut Counts, progress: &Progress) -> (std::result::Result<u64, Stop>, bool) {
    let res = write_members(&slots, &mut tar, counts, progress);
    // Stop the walk and the readers (their sends fail once the receivers are gone).
    drop(slots);
    let walked = walk.join();
    counts.report.tar_bytes = tar.tar_bytes;
    let res = match res {
        Ok(()) => tar.finish().map_err(Stop::from),
        Err(e) => {
            drop(tar);
            Err(e)
        }
    };
    (res, walked)
}

/// Keeps the archive only when the whole of it was written (`res`: the writer's frames, or why
/// it stopped; `outcome`: what the output thread wrote), finishing its file or flushing its
/// stream; else the archive is removed and the error says why.
fn finish(
    counts: Counts,
    res: std::result::Result<u64, Stop>,
    outcome: Outcome,
    walked: bool,
    progress: &Progress,
    out_name: &Path,
) -> Result<(PackReport, Option<cacheless::PendingFile>)> {
    if let Some(e) = outcome.error {
        return Err(Error::io("write", out_name, e));
    }
    let mut report = counts.into_report();
    let lost = |what: &str| Err(Error::io("write", out_name, std::io::Error::other(format!("{what}; the archive was removed"))));
    match res {
        Err(Stop::Cancelled) => return Err(interrupted(out_name)),
        Err(Stop::Closed) => return lost("the output stage stopped"),
        Ok(_) if progress.is_cancelled() => return Err(interrupted(out_name)),
        Ok(_) if !walked => return lost("the walk of the inputs failed"),
        Ok(frames) if frames != outcome.frames => return lost("a compression worker failed"),
        Ok(frames) => report.frames = frames,
    }
    let archive = match outcome.sink {
        Sink::File(w) => {
            let (write, archive) = w.finish_pending()?;
            report.write = Some(write);
            Some(archive)
        }
        Sink::Stream(mut s) => {
            s.flush().map_err(|e| Error::io("write", out_name, e))?;
            None
        }
    };
    report.output_bytes = outcome.bytes;
    Ok((report, archive))
}
