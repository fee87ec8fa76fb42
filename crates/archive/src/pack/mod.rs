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

mod frames;
mod header;
mod read;
mod walk;

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cacheless::{Budget, Mode, Progress, ReadOptions, WriteOptions, WriteReport};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::source::Compression;
use frames::{Frame, Sink, TarOut};
use read::{Job, Msg};
use walk::{show, Item, What};

pub use frames::SKIPPABLE_MAGIC;

/// Default frame size: 32 MiB of tar stream per independent frame, as Agave's snapshots use.
pub const DEFAULT_FRAME_SIZE: usize = 32 << 20;
/// Smallest frame size accepted.
pub const MIN_FRAME_SIZE: usize = 64 << 10;
/// Tar record size: the archive is padded to a multiple of it, as GNU tar does (20 blocks).
const RECORD: u64 = 10240;

/// Where the archive goes.
pub enum Output {
    /// A file, written under a temporary name beside it and renamed into place when complete.
    Path(PathBuf),
    /// A stream (stdout, a pipe). Nothing can be taken back from a stream: on error it ends early.
    Stream(Box<dyn Write + Send>),
}

/// Order of directory entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SortOrder {
    /// As the directory lists them (GNU tar's default).
    None,
    /// By name, byte order (reproducible archives).
    Name,
}

/// An owner or group to store instead of the file's: the id and the name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// Numeric id.
    pub id: u32,
    /// Name ("" for none).
    pub name: String,
}

impl Owner {
    /// Parses GNU tar's `NAME[:ID]`, `+ID` or `ID` for a user (`group` false) or group.
    pub fn parse(s: &str, group: bool) -> std::result::Result<Owner, String> {
        let what = if group { "group" } else { "owner" };
        let no_such = |s: &str| format!("invalid {what} '{s}': no such {}; give NAME:ID", if group { "group" } else { "user" });
        let (name, id) = match s.split_once(':') {
            Some((n, i)) => (n, Some(i.parse::<u32>().map_err(|_| format!("invalid {what} '{s}': '{i}' is not a numeric id"))?)),
            None => (s, None),
        };
        let numeric = name.strip_prefix('+').unwrap_or(name);
        if id.is_none() && !numeric.is_empty() && numeric.bytes().all(|b| b.is_ascii_digit()) {
            let id: u32 = numeric.parse().map_err(|_| format!("invalid {what} '{s}': id out of range"))?;
            let name = if group {
                nix::unistd::Group::from_gid(id.into()).ok().flatten().map(|g| g.name)
            } else {
                nix::unistd::User::from_uid(id.into()).ok().flatten().map(|u| u.name)
            };
            return Ok(Owner { id, name: name.unwrap_or_default() });
        }
        let id = match id {
            Some(i) => i,
            None if group => nix::unistd::Group::from_name(name).ok().flatten().map(|g| g.gid.as_raw()).ok_or_else(|| no_such(s))?,
            None => nix::unistd::User::from_name(name).ok().flatten().map(|u| u.uid.as_raw()).ok_or_else(|| no_such(s))?,
        };
        Ok(Owner { id, name: name.to_string() })
    }
}

/// Parses a time for `--mtime`: `@SECONDS`, `SECONDS`, `YYYY-MM-DD`, or
/// `YYYY-MM-DD[T ]HH:MM[:SS[.FRAC]]` with an optional `Z` (UTC in every case).
pub fn parse_time(s: &str) -> std::result::Result<(i64, u32), String> {
    let t = s.trim();
    let bad = || format!("invalid time '{s}': expected @SECONDS, YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS (UTC)");
    let num = t.strip_prefix('@').unwrap_or(t);
    if !num.is_empty() && num.trim_start_matches('-').bytes().all(|b| b.is_ascii_digit()) {
        return num.parse::<i64>().map(|v| (v, 0)).map_err(|_| bad());
    }
    let t = t.strip_suffix('Z').unwrap_or(t);
    let (date, time) = match t.split_once(['T', ' ']) {
        Some((d, tm)) => (d, Some(tm)),
        None => (t, None),
    };
    let d: Vec<&str> = date.split('-').collect();
    if d.len() != 3 {
        return Err(bad());
    }
    let (y, m, day): (i64, u32, u32) = (d[0].parse().map_err(|_| bad())?, d[1].parse().map_err(|_| bad())?, d[2].parse().map_err(|_| bad())?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) {
        return Err(bad());
    }
    let (mut secs, mut nanos) = (0i64, 0u32);
    if let Some(tm) = time {
        let (hms, frac) = tm.split_once('.').unwrap_or((tm, ""));
        let p: Vec<&str> = hms.split(':').collect();
        if !(2..=3).contains(&p.len()) {
            return Err(bad());
        }
        let v: Vec<i64> = p.iter().map(|x| x.parse::<i64>().map_err(|_| bad())).collect::<std::result::Result<_, _>>()?;
        if v.iter().any(|&x| x < 0) || v[0] > 23 || v[1] > 59 || v.get(2).is_some_and(|&s| s > 60) {
            return Err(bad());
        }
        secs = v[0] * 3600 + v[1] * 60 + v.get(2).copied().unwrap_or(0);
        for (c, scale) in frac.chars().zip(crate::tarparse::DIGIT_SCALES) {
            nanos += c.to_digit(10).ok_or_else(bad)? * scale;
        }
    }
    // Days from the civil date (Howard Hinnant's algorithm), proleptic Gregorian calendar.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (i64::from(m) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    // A year too far out for seconds in an i64 is refused, not wrapped into another date.
    let days = era.checked_mul(146097).and_then(|d| d.checked_add(doe - 719468));
    let t = days.and_then(|d| d.checked_mul(86400)).and_then(|t| t.checked_add(secs));
    t.map(|t| (t, nanos)).ok_or_else(|| format!("invalid time '{s}': out of range"))
}

/// The compression an output name asks for: `.tar.zst`/`.tzst`, `.gz`/`.tgz`, `.xz`/`.txz`,
/// `.lz4`, `.bz2`/`.tbz2`, `.tar` (none); `None` for any other name.
pub fn compression_for_name(p: &Path) -> Option<Compression> {
    let n = p.file_name()?.to_string_lossy().to_ascii_lowercase();
    let ends = |s: &[&str]| s.iter().any(|e| n.ends_with(e));
    Some(if ends(&[".zst", ".tzst", ".zstd"]) {
        Compression::Zstd
    } else if ends(&[".gz", ".tgz"]) {
        Compression::Gzip
    } else if ends(&[".xz", ".txz"]) {
        Compression::Xz
    } else if ends(&[".lz4"]) {
        Compression::Lz4
    } else if ends(&[".bz2", ".tbz2", ".tbz"]) {
        Compression::Bzip2
    } else if ends(&[".tar"]) {
        Compression::None
    } else {
        return None;
    })
}

/// Parses a compression name: zstd, gzip, xz, lz4, bzip2 or none (also gz, zst, bz2).
pub fn parse_compression(s: &str) -> std::result::Result<Compression, String> {
    Ok(match s.to_ascii_lowercase().as_str() {
        "zstd" | "zst" => Compression::Zstd,
        "gzip" | "gz" => Compression::Gzip,
        "xz" => Compression::Xz,
        "lz4" => Compression::Lz4,
        "bzip2" | "bz2" => Compression::Bzip2,
        "none" | "tar" => Compression::None,
        o => return Err(format!("unknown compression '{o}': expected zstd, gzip, xz, lz4, bzip2 or none")),
    })
}

/// The default level of each compression (what its own tool uses).
pub fn default_level(c: Compression) -> i32 {
    match c {
        Compression::Zstd => 3,
        Compression::Gzip | Compression::Xz => 6,
        Compression::Bzip2 => 9,
        Compression::Lz4 | Compression::None => 0,
    }
}

/// Checks that `level` exists for `c`; the error says the range.
pub fn check_level(c: Compression, level: i32) -> std::result::Result<(), String> {
    let (lo, hi) = match c {
        Compression::Zstd => {
            let r = zstd::compression_level_range();
            (*r.start(), *r.end())
        }
        Compression::Gzip | Compression::Xz => (0, 9),
        Compression::Bzip2 => (1, 9),
        Compression::Lz4 | Compression::None => return Err(format!("{} has no compression levels here; give no level", c.name())),
    };
    if (lo..=hi).contains(&level) {
        Ok(())
    } else {
        Err(format!("{} level {level} out of range ({lo} to {hi})", c.name()))
    }
}

/// What goes into the archive: the inputs, and how members are named and described.
#[derive(Clone, Debug)]
pub struct Members {
    /// Directory the paths are relative to (`-C`); `None`: the working directory.
    pub directory: Option<PathBuf>,
    /// Files and directories to archive (directories recursively), as member names.
    pub paths: Vec<PathBuf>,
    /// Order of directory entries.
    pub sort: SortOrder,
    /// Store this modification time (seconds, nanoseconds) for every member.
    pub mtime: Option<(i64, u32)>,
    /// Store this owner for every member.
    pub owner: Option<Owner>,
    /// Store this group for every member.
    pub group: Option<Owner>,
    /// Store numeric ids only, no user or group names.
    pub numeric_owner: bool,
    /// Members whose name (or any tail of it starting at a component) matches are left out,
    /// with everything under them.
    pub exclude: Vec<glob::Pattern>,
    /// Do not descend into directories on other filesystems than the input they are under.
    pub one_file_system: bool,
    /// Store extended attributes (pax `SCHILY.xattr.*`, as GNU tar `--xattrs`).
    pub xattrs: bool,
}

impl Members {
    /// The given paths, relative to the working directory, directory order, the files' own
    /// times and owners.
    pub fn new(paths: Vec<PathBuf>) -> Members {
        Members {
            directory: None,
            paths,
            sort: SortOrder::None,
            mtime: None,
            owner: None,
            group: None,
            numeric_owner: false,
            exclude: Vec::new(),
            one_file_system: false,
            xattrs: false,
        }
    }
}

/// What `pack` does and how.
pub struct PackOptions {
    /// Where the archive goes.
    pub output: Output,
    /// What goes into the archive, and how members are named and described.
    pub members: Members,
    /// Compression of the archive.
    pub compression: Compression,
    /// Compression level (`None`: the format's default).
    pub level: Option<i32>,
    /// Compression workers.
    pub threads: usize,
    /// Bytes of tar stream per independent compressed frame.
    pub frame_size: usize,
    /// Make the archive durable before returning (false: `--no-sync`).
    pub sync: bool,
    /// How input files are read (mode, backend, request size, read-ahead depth).
    pub read_options: ReadOptions,
    /// How the archive file is written (mode, backend, request size, queue depth).
    pub write_options: WriteOptions,
    /// Threads reading files ahead of the writer.
    pub read_threads: usize,
    /// The budget every buffer comes out of.
    pub budget: Budget,
    /// Counters to poll while it runs: file bytes read and files (`bytes`, `files`; their
    /// totals grow as the walk goes), archive bytes written (`output_bytes`), errors, and the
    /// cancel flag checked between entries and chunks.
    pub progress: Option<Arc<Progress>>,
}

impl PackOptions {
    /// Defaults: zstd at level 3, 32 MiB frames, one worker per CPU, directory order, durable,
    /// auto modes, 256 MiB budget.
    pub fn new(output: Output, paths: Vec<PathBuf>) -> PackOptions {
        let budget = Budget::new(256 << 20);
        let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
        PackOptions {
            output,
            members: Members::new(paths),
            compression: Compression::Zstd,
            level: None,
            threads: cpus,
            frame_size: DEFAULT_FRAME_SIZE,
            sync: true,
            read_options: ReadOptions::new(budget.clone()),
            write_options: WriteOptions::new(budget.clone()),
            read_threads: 8,
            budget,
            progress: None,
        }
    }
}

/// Files read per mode.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReadModes {
    /// Read with O_DIRECT.
    pub direct: u64,
    /// Read with RWF_DONTCACHE.
    pub dontcache: u64,
    /// Read buffered, pages brought in dropped behind.
    pub writebehind: u64,
    /// Read buffered (already cached: left cached).
    pub buffered: u64,
}

/// What `pack` did.
#[derive(Debug, Serialize)]
pub struct PackReport {
    /// The archive's path, or `-` for a stream.
    pub output: PathBuf,
    /// Compression and level.
    pub compression: Compression,
    /// Level used (0 where the format has none).
    pub level: i32,
    /// Independent compressed frames written (tar chunks, for an uncompressed archive).
    pub frames: u64,
    /// Bytes of tar stream per frame.
    pub frame_size: usize,
    /// Compression workers used (fewer than asked when the budget holds fewer frames).
    pub threads: usize,
    /// Frames that may be in flight at once (filled, compressing, waiting to be written).
    pub frames_in_flight: usize,
    /// Members written.
    pub entries: u64,
    /// Regular files with their data.
    pub files: u64,
    /// Directories.
    pub dirs: u64,
    /// Symbolic links.
    pub symlinks: u64,
    /// Hard links (stored once, later names as links).
    pub hardlinks: u64,
    /// FIFOs and device nodes.
    pub special: u64,
    /// Sparse files stored as pax sparse 1.0.
    pub sparse: u64,
    /// File data bytes read.
    pub input_bytes: u64,
    /// Uncompressed tar bytes.
    pub tar_bytes: u64,
    /// Archive bytes written.
    pub output_bytes: u64,
    /// How input files were read.
    pub read_modes: ReadModes,
    /// How the archive file was written (`None` for a stream).
    pub write: Option<WriteReport>,
    /// Files that changed while they were read (stored as read, reported, exit 1).
    pub changed: u64,
    /// Warnings (sockets ignored, leading '/' removed), first 1000.
    pub warnings: Vec<String>,
    /// Members that failed (unreadable, changed), first 1000; the run went on past them.
    pub failures: Vec<String>,
    /// Number of failures.
    pub failure_count: u64,
    /// Wall time in seconds, including the final sync.
    pub elapsed_s: f64,
}

impl PackReport {
    /// True when every member was stored as it was when walked.
    pub fn is_ok(&self) -> bool {
        self.failure_count == 0
    }
}

/// One member in archive order, as the dispatcher hands it to the writer.
enum Slot {
    Plain(Item),
    Data(Item, Receiver<Msg>),
    Warn(String),
    Error(String),
}

/// Shares of the budget for the output, the compression and the read-ahead.
struct Shares {
    _carved: cacheless::buf::Lease,
    write: Budget,
    comp: Budget,
    read: Budget,
    workers: usize,
    slots: usize,
    /// Bytes the shares need beyond the budget (one frame and one request each at least).
    over: usize,
}

fn shares(o: &PackOptions, frame: usize) -> Shares {
    let total = o.budget.limit();
    let wblock = o.write_options.io.block_size.max(4096);
    let wbytes = (o.write_options.io.queue_depth + 1) * wblock;
    let rest = total.saturating_sub(wbytes);
    let rbytes = (rest / 4).clamp(16 << 20, 256 << 20).min(rest.max(1));
    let cbytes = rest.saturating_sub(rbytes);
    let fit = cbytes / frame;
    let workers = if o.compression == Compression::None { 0 } else { o.threads.clamp(1, fit.saturating_sub(1).max(1)) };
    // One frame filling, one per worker compressing, one being written, one spare.
    let slots = fit.saturating_sub(workers).clamp(1, workers + 3);
    // The workers' scratch (output produced while the input still exists) is reserved with
    // the frames: a worker never waits for it. One lease for all the shares, so that a budget
    // smaller than they need is exceeded (and reported) rather than waited on forever.
    let want = wbytes + workers * frame + slots * frame + rbytes;
    let carved = o.budget.lease(cacheless::LeaseRequest::one(want.min(total).max(1)));
    let (write, comp, read) = (Budget::new(wbytes.max(1)), Budget::new((slots * frame).max(1)), Budget::new(rbytes.max(1)));
    Shares { _carved: carved, write, comp, read, workers, slots, over: want.saturating_sub(total) }
}

struct Counts {
    report: PackReport,
}

impl Counts {
    fn fail(&mut self, progress: &Progress, msg: String) {
        progress.error();
        self.report.failure_count += 1;
        if self.report.failures.len() < 1000 {
            self.report.failures.push(msg);
        }
    }
    fn warn(&mut self, msg: String) {
        if self.report.warnings.len() < 1000 {
            self.report.warnings.push(msg);
        }
    }
}

/// Hands walked members to the reader pool and the writer, in order.
struct Dispatch<'a> {
    slots: std::sync::mpsc::SyncSender<Slot>,
    jobs: std::sync::mpsc::SyncSender<Job>,
    read: &'a Budget,
    ro: &'a ReadOptions,
    progress: &'a Progress,
}

impl walk::Visit for Dispatch<'_> {
    fn item(&mut self, item: Item) -> bool {
        if self.progress.is_cancelled() {
            return false;
        }
        let slot = match item.what {
            What::Data { sparse } => {
                let size = item.fields.size;
                self.progress.add_total_files(1);
                self.progress.add_total_bytes(size);
                let (mut ro, bytes) = read::plan(self.ro, size, sparse);
                // Taken in archive order: earlier files' shares are released as the writer
                // consumes them, so this never waits on a file that only a later one blocks.
                let lease = self.read.lease(cacheless::LeaseRequest::one(bytes));
                ro.io.budget = Budget::new(bytes);
                let (tx, rx) = sync_channel(read::CHANNEL);
                let job = Job { path: item.path.clone(), size, sparse, id: item.id, ro, lease, tx, cancel: self.progress.cancel_flag() };
                if self.jobs.send(job).is_err() {
                    return false;
                }
                Slot::Data(item, rx)
            }
            What::Plain => Slot::Plain(item),
        };
        self.slots.send(slot).is_ok()
    }
    fn error(&mut self, msg: String) {
        let _ = self.slots.send(Slot::Error(msg));
    }
    fn warn(&mut self, msg: String) {
        let _ = self.slots.send(Slot::Warn(msg));
    }
}

fn spawn<T: Send + 'static>(name: &str, f: impl FnOnce() -> T + Send + 'static) -> Result<std::thread::JoinHandle<T>> {
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

/// Why the writer stopped early.
enum Stop {
    Cancelled,
    /// The output thread went away; it says why.
    Closed,
}

impl From<frames::Closed> for Stop {
    fn from(_: frames::Closed) -> Stop {
        Stop::Closed
    }
}

static ZEROS: [u8; 64 << 10] = [0u8; 64 << 10];

fn zeros(tar: &mut TarOut, mut n: u64) -> std::result::Result<(), Stop> {
    while n > 0 {
        let k = cacheless::conv::fit(n, ZEROS.len());
        tar.write(&ZEROS[..k])?;
        n -= k as u64;
    }
    Ok(())
}

/// Writes every member the dispatcher hands over, in order, then the end of the archive.
fn write_members(slots: &Receiver<Slot>, tar: &mut TarOut, counts: &mut Counts, progress: &Progress) -> std::result::Result<(), Stop> {
    let mut hdr = Vec::with_capacity(4096);
    for slot in slots.iter() {
        if progress.is_cancelled() {
            return Err(Stop::Cancelled);
        }
        let r = &mut counts.report;
        match slot {
            Slot::Warn(m) => counts.warn(m),
            Slot::Error(m) => counts.fail(progress, m),
            Slot::Plain(item) => {
                hdr.clear();
                header::append(&mut hdr, &item.name, &item.fields, None);
                tar.write(&hdr)?;
                r.entries += 1;
                match item.fields.kind {
                    header::Kind::Dir => r.dirs += 1,
                    header::Kind::Symlink => r.symlinks += 1,
                    header::Kind::HardLink => r.hardlinks += 1,
                    header::Kind::File => r.files += 1,
                    _ => r.special += 1,
                }
            }
            Slot::Data(item, rx) => write_file(&item, &rx, tar, &mut hdr, counts, progress)?,
        }
    }
    // End of archive: two zero blocks, then padding to a whole record.
    zeros(tar, 1024)?;
    zeros(tar, (RECORD - tar.tar_bytes % RECORD) % RECORD)?;
    Ok(())
}

/// Writes one file with data: its header once the reader has it open, then its data as it
/// arrives, padded with zeros if the file shrank or a read failed (the header promised the size).
fn write_file(item: &Item, rx: &Receiver<Msg>, tar: &mut TarOut, hdr: &mut Vec<u8>, counts: &mut Counts, progress: &Progress) -> std::result::Result<(), Stop> {
    let name = show(&item.name);
    let sparse = match rx.recv() {
        Ok(Msg::Start { mode, sparse }) => {
            let m = &mut counts.report.read_modes;
            match mode {
                Mode::Direct => m.direct += 1,
                Mode::DontCache => m.dontcache += 1,
                Mode::DropBehind => m.writebehind += 1,
                Mode::Buffered | Mode::Auto => m.buffered += 1,
            }
            sparse
        }
        Ok(Msg::Failed { msg, .. }) => {
            counts.fail(progress, format!("{name}: {msg}; not dumped"));
            return Ok(());
        }
        _ => {
            counts.fail(progress, format!("{name}: read failed; not dumped"));
            return Ok(());
        }
    };
    hdr.clear();
    header::append(hdr, &item.name, &item.fields, sparse.as_ref());
    tar.write(hdr)?;
    let want = sparse.as_ref().map_or(item.fields.size, |m| m.data_len());
    let mut got = 0u64;
    loop {
        match rx.recv() {
            Ok(Msg::Data(p)) => {
                let n = cacheless::conv::fit(want - got, p.len());
                tar.write(&p[..n])?;
                drop(p);
                got += n as u64;
                progress.add_bytes(n as u64);
                if progress.is_cancelled() {
                    return Err(Stop::Cancelled);
                }
            }
            Ok(Msg::End { changed, .. }) => {
                if let Some(c) = changed {
                    counts.report.changed += 1;
                    counts.fail(progress, format!("{name}: {c}"));
                }
                break;
            }
            Ok(Msg::Failed { msg, .. }) => {
                counts.fail(progress, format!("{name}: {msg}; padded with zeros"));
                break;
            }
            Ok(Msg::Start { .. }) | Err(_) => {
                if progress.is_cancelled() {
                    return Err(Stop::Cancelled);
                }
                counts.fail(progress, format!("{name}: read ended early; padded with zeros"));
                break;
            }
        }
    }
    zeros(tar, want - got)?;
    zeros(tar, (512 - want % 512) % 512)?;
    let r = &mut counts.report;
    r.entries += 1;
    r.files += 1;
    r.input_bytes += got;
    if sparse.is_some() {
        r.sparse += 1;
    }
    progress.file_done();
    Ok(())
}

/// Creates the archive. Returns `Err` when the archive could not be created or completed
/// (nothing is left under its name); unreadable or changing input files are reported in the
/// report (`is_ok()` false) and the archive is still complete and valid.
pub fn pack(mut opts: PackOptions) -> Result<PackReport> {
    let t0 = Instant::now();
    let progress = opts.progress.clone().unwrap_or_default();
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
    let frame = if c == Compression::None { opts.write_options.io.block_size.max(MIN_FRAME_SIZE) } else { opts.frame_size };
    if frame < MIN_FRAME_SIZE {
        return Err(invalid(&out_path(&opts.output), format!("frame size {frame} is below the minimum of {MIN_FRAME_SIZE} bytes")));
    }
    let sh = shares(&opts, frame);
    let output = std::mem::replace(&mut opts.output, Output::Path(PathBuf::new()));
    // The output first: a destination we cannot create fails before any reading, and the
    // walk leaves out the archive itself (its temporary name, or an old archive being replaced).
    let mut skip = Vec::new();
    let (sink, out_name) = match output {
        Output::Path(p) => {
            if let Ok(m) = std::fs::metadata(&p) {
                if m.is_dir() {
                    return Err(Error::io("create", &p, std::io::Error::from_raw_os_error(libc::EISDIR)));
                }
                skip.push((m.dev(), m.ino()));
            }
            let mut wo = opts.write_options.clone();
            wo.io.budget = sh.write.clone();
            wo.sync = opts.sync;
            wo.atomic = true;
            let w = cacheless::Writer::create(&p, &wo)?;
            let m = w.file().metadata().map_err(|e| Error::io("stat", &p, e))?;
            skip.push((m.dev(), m.ino()));
            (Sink::File(Box::new(w)), p)
        }
        Output::Stream(s) => (Sink::Stream(s), PathBuf::from("-")),
    };
    let members = opts.members.clone();
    let codecs = (0..sh.workers)
        .map(|_| frames::Codec::new(c, level).map_err(|e| invalid(&out_name, format!("{} level {level}: {e}", c.name()))))
        .collect::<Result<Vec<_>>>()?;

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
    let (read_budget, ro, prog) = (sh.read.clone(), opts.read_options.clone(), progress.clone());
    let dispatcher = spawn("cacheless-pack-walk", move || {
        let mut d = Dispatch { slots: slot_tx, jobs: job_tx, read: &read_budget, ro: &ro, progress: &prog };
        walk::walk(&members, &skip, &mut d);
    })?;
    // Compression and output.
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
    let out_thread = spawn("cacheless-pack-out", move || frames::output(out_rx, sink, zstd, written, opool, keep))?;

    let mut counts = Counts {
        report: PackReport {
            output: out_name.clone(),
            compression: c,
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
            read_modes: ReadModes::default(),
            write: None,
            changed: 0,
            warnings: Vec::new(),
            failures: Vec::new(),
            failure_count: 0,
            elapsed_s: 0.0,
        },
    };
    if sh.over > 0 {
        counts.warn(format!(
            "the memory budget of {} MiB is less than pack needs with {} MiB frames (one per compression stage, plus the writer's and the read-ahead's buffers): using {} MiB more",
            opts.budget.limit() >> 20,
            frame >> 20,
            sh.over.div_ceil(1 << 20)
        ));
    }
    let mut tar = TarOut::new(frame, frame_tx, sh.comp.clone(), pool);
    let res = write_members(&slot_rx, &mut tar, &mut counts, &progress);
    // Stop the walk and the readers (their sends fail once the receivers are gone).
    drop(slot_rx);
    // A walk that panicked would have ended the archive early: never keep such an archive.
    let walked = dispatcher.join().is_ok();
    for r in readers {
        let _ = r.join();
    }
    counts.report.tar_bytes = tar.tar_bytes;
    let res = match res {
        Ok(()) => tar.finish().map_err(Stop::from),
        Err(e) => {
            drop(tar);
            Err(e)
        }
    };
    for w in workers {
        let _ = w.join();
    }
    let outcome = out_thread.join().map_err(|p| {
        let msg = format!("the output thread panicked ({}); the archive was removed", crate::error::panic_message(&*p));
        Error::io("write", &out_name, std::io::Error::other(msg))
    })?;
    if let Some(e) = outcome.error {
        return Err(Error::io("write", &out_name, e));
    }
    let lost = |what: &str| Err(Error::io("write", &out_name, std::io::Error::other(format!("{what}; the archive was removed"))));
    match res {
        Err(Stop::Cancelled) => return Err(interrupted(&out_name)),
        Err(Stop::Closed) => return lost("the output stage stopped"),
        Ok(_) if progress.is_cancelled() => return Err(interrupted(&out_name)),
        Ok(_) if !walked => return lost("the walk of the inputs failed"),
        Ok(frames) if frames != outcome.frames => return lost("a compression worker failed"),
        Ok(frames) => counts.report.frames = frames,
    }
    match outcome.sink {
        Sink::File(w) => counts.report.write = Some(w.finish()?),
        Sink::Stream(mut s) => s.flush().map_err(|e| Error::io("write", &out_name, e))?,
    }
    let mut report = counts.report;
    report.output_bytes = outcome.bytes;
    report.elapsed_s = t0.elapsed().as_secs_f64();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_as_utc() {
        assert_eq!(parse_time("@1700000000"), Ok((1_700_000_000, 0)));
        assert_eq!(parse_time("0"), Ok((0, 0)));
        assert_eq!(parse_time("1970-01-01"), Ok((0, 0)));
        assert_eq!(parse_time("2000-03-01T00:00:00Z"), Ok((951_868_800, 0)));
        assert_eq!(parse_time("2024-02-29 12:34:56.5"), Ok((1_709_210_096, 500_000_000)));
        assert_eq!(parse_time("1969-12-31T23:59:59"), Ok((-1, 0)));
        // Found by the parse_args fuzz target: a year this large wrapped around i64.
        assert!(parse_time("020281021000024-1-04").is_err());
        assert!(parse_time("9223372036854775807-12-31").is_err());
        // And a negative hour overflowed when turned into seconds.
        assert!(parse_time("20407199-01-01T-8044444444444444443:00").is_err());
        assert!(parse_time("2024-01-01T-1:00").is_err());
        assert_eq!(parse_time("292277026596-12-04T15:30:07"), Ok((i64::MAX, 0)), "the last second an i64 holds");
        for bad in ["yesterday", "2024-13-01", "2024-01-01T25:00", "2024-01", ""] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn owners_parse_as_gnu_tar_takes_them() {
        assert_eq!(Owner::parse("root", false), Ok(Owner { id: 0, name: "root".into() }));
        assert_eq!(Owner::parse("+0", true), Ok(Owner { id: 0, name: "root".into() }));
        assert_eq!(Owner::parse("builder:1234", false), Ok(Owner { id: 1234, name: "builder".into() }));
        assert!(Owner::parse("no-such-user-here", false).unwrap_err().contains("NAME:ID"));
        assert!(Owner::parse("x:y", true).is_err());
    }

    #[test]
    fn compression_follows_the_name() {
        for (n, c) in [
            ("a.tar.zst", Compression::Zstd),
            ("a.TZST", Compression::Zstd),
            ("a.tgz", Compression::Gzip),
            ("a.tar.xz", Compression::Xz),
            ("a.tar.lz4", Compression::Lz4),
            ("a.tar.bz2", Compression::Bzip2),
            ("a.tar", Compression::None),
        ] {
            assert_eq!(compression_for_name(Path::new(n)), Some(c), "{n}");
        }
        assert_eq!(compression_for_name(Path::new("backup.img")), None);
        assert_eq!(parse_compression("gz"), Ok(Compression::Gzip));
        assert!(parse_compression("rar").is_err());
        assert!(check_level(Compression::Gzip, 10).is_err() && check_level(Compression::Zstd, 19).is_ok());
    }
}
