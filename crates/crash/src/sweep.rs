//! The sweep: for each filesystem and workload, make a filesystem image, set the workload up,
//! record its run through the FUSE recorder and a loop device, then build and check crash
//! states from the log.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::cleanup::{self, Undo};
use crate::cmd::{self, Loop, Mount};
use crate::record::{Event, Recorder};
use crate::states::{self, Epoch};
use crate::workload::{Ctx, Ran, Workload};
use crate::{check, Error, Result};

/// A filesystem the sweep runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsKind {
    /// ext4 (ordered data, its journal).
    Ext4,
    /// xfs (its log).
    Xfs,
    /// btrfs (copy on write).
    Btrfs,
}

impl FsKind {
    /// Its name, as mount(8) takes it.
    pub fn name(self) -> &'static str {
        match self {
            FsKind::Ext4 => "ext4",
            FsKind::Xfs => "xfs",
            FsKind::Btrfs => "btrfs",
        }
    }

    /// Parses a comma-separated list (`ext4,xfs`).
    pub fn parse_list(s: &str) -> Result<Vec<FsKind>> {
        s.split(',')
            .filter(|p| !p.trim().is_empty())
            .map(|p| match p.trim() {
                "ext4" => Ok(FsKind::Ext4),
                "xfs" => Ok(FsKind::Xfs),
                "btrfs" => Ok(FsKind::Btrfs),
                other => Err(Error::Invalid(format!("unknown filesystem {other:?}: use ext4, xfs or btrfs"))),
            })
            .collect()
    }

    /// The filesystems a sweep runs on unless told: ext4 and xfs, and btrfs where btrfs-progs
    /// is installed (`mkfs.btrfs` and `btrfs` on the PATH).
    pub fn defaults() -> Vec<FsKind> {
        let on_path = |tool: &str| std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()));
        let mut v = vec![FsKind::Ext4, FsKind::Xfs];
        if on_path("mkfs.btrfs") && on_path("btrfs") {
            v.push(FsKind::Btrfs);
        }
        v
    }

    /// Image size: small, so that each state is cheap (btrfs needs more for its metadata).
    fn image_mib(self) -> u64 {
        match self {
            FsKind::Ext4 | FsKind::Xfs => 64,
            FsKind::Btrfs => 128,
        }
    }
}

/// What to sweep.
#[derive(Debug, Clone)]
pub struct SweepOptions {
    /// The filesystems.
    pub fs: Vec<FsKind>,
    /// Crash states per filesystem and workload (at most).
    pub states: usize,
    /// Seed of the random subsets.
    pub seed: u64,
    /// Fail the write of each of these numbers (from 0, counted from the mount of the recorded
    /// filesystem) with EIO, once, in a run of its own: the engine must then report an error,
    /// never a promise the image does not hold. Empty: no failed write.
    pub eio_at: Vec<usize>,
    /// Also fail, each in a run of its own, this many writes spread evenly over those of a run
    /// without a failure (made and checked first, as without this option).
    pub eio_spread: usize,
    /// Where the images go (default /dev/shm where it has 1 GiB free, else the temporary
    /// folder).
    pub scratch: Option<PathBuf>,
}

/// A broken promise.
#[derive(Debug, Clone)]
pub struct Violation {
    /// The filesystem.
    pub fs: &'static str,
    /// The workload.
    pub workload: String,
    /// The crash state.
    pub state: String,
    /// The file (empty for the filesystem as a whole).
    pub file: String,
    /// What was found.
    pub what: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let file = if self.file.is_empty() { "(filesystem)" } else { &self.file };
        write!(f, "{} {} [{}] {file}: {}", self.fs, self.workload, self.state, self.what)
    }
}

/// One filesystem and workload.
#[derive(Debug, Clone, Default)]
pub struct Row {
    /// The filesystem.
    pub fs: &'static str,
    /// The workload.
    pub workload: String,
    /// Writes and barriers recorded.
    pub writes: usize,
    /// Barriers (flushes) recorded.
    pub barriers: usize,
    /// Crash states checked.
    pub states: usize,
    /// Of them, states with a violation.
    pub bad_states: usize,
    /// Violations.
    pub violations: Vec<Violation>,
    /// Temporaries found, over all states.
    pub temporaries: usize,
    /// Why it did not run (a mode the filesystem refuses), if it did not.
    pub skipped: Option<String>,
    /// The write the device was told to fail (EIO), if any.
    pub eio_at: Option<usize>,
    /// With a failed write: the error the workload stopped on (None: every call succeeded).
    pub failed_with: Option<String>,
    /// Writes the device failed.
    pub failed_writes: usize,
    /// The calls that returned after the first failed write.
    pub returned_after_failure: Vec<String>,
    /// Whether the recording loop device did direct I/O on the FUSE file.
    pub loop_direct_io: bool,
    /// Seconds spent checking states.
    pub check_s: f64,
}

/// A scratch folder for one filesystem and workload, removed on drop (and on a signal).
struct Scratch {
    dir: tempfile::TempDir,
    ticket: u64,
}

impl Scratch {
    fn new(base: &Path) -> Result<Scratch> {
        let _gate = cleanup::gate();
        let dir = tempfile::Builder::new().prefix("cacheless-crash-").tempdir_in(base).map_err(|e| Error::io("create a folder in", base, e))?;
        let ticket = cleanup::register(Undo::RemoveDir(dir.path().to_path_buf()));
        for sub in ["mnt", "fuse", "scratch"] {
            std::fs::create_dir(dir.path().join(sub)).map_err(|e| Error::io("mkdir", &dir.path().join(sub), e))?;
        }
        Ok(Scratch { dir, ticket })
    }
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        cleanup::done(self.ticket);
    }
}

/// /dev/shm where it has room for a few images (Docker gives it 64 MiB by default), else the
/// temporary folder.
fn default_scratch() -> PathBuf {
    let shm = Path::new("/dev/shm");
    let free = rustix::fs::statvfs(shm).map(|s| s.f_bavail.saturating_mul(s.f_frsize)).unwrap_or(0);
    if free >= 1 << 30 {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Records `w` on a fresh `fs`: returns the log, whether the loop device did direct I/O, and
/// how the run ended. `s` holds `base.img` (made and set up here) and the mounts. `small`:
/// requests capped as for a failed write (see below) though none fails, so that a run without
/// a failure numbers its writes as the runs with one do.
fn record(fs: FsKind, w: &Workload, s: &Scratch, eio_at: Option<usize>, small: bool) -> Result<(Vec<Event>, bool, Result<Ran, String>)> {
    let base = s.path("base.img");
    let f = std::fs::File::create(&base).map_err(|e| Error::io("create", &base, e))?;
    f.set_len(fs.image_mib() << 20).map_err(|e| Error::io("truncate", &base, e))?;
    drop(f);
    cmd::mkfs(fs.name(), &base)?;
    {
        let lo = Loop::attach(&base, false)?;
        let m = Mount::new(lo.dev(), fs.name(), &s.path("mnt"), "")?;
        (w.setup)(m.path(), &s.path("scratch")).map_err(|e| Error::Workload { workload: w.name.clone(), detail: format!("setup: {e}") })?;
        m.unmount()?;
    }
    let live = s.path("live.img");
    states::sparse_copy(&base, &live)?;
    let rec = Recorder::mount(&live, &s.path("fuse"), eio_at)?;
    let (ran, dio) = {
        let lo = Loop::attach(&rec.image(), true)?;
        if eio_at.is_some() || small {
            // The loop driver takes a short write of its backing file for a complete one (its
            // completion fails only a read that comes up short), and FUSE answers a request it
            // split with the bytes written before the part that failed: requests of at most
            // 64 KiB (17 pages) reach the recorder whole, so that a failed one fails.
            lo.max_request_kib(64)?;
        }
        let m = match Mount::new(lo.dev(), fs.name(), &s.path("mnt"), "") {
            Ok(m) => m,
            // The failed write may be the mount's own (xfs writes its log as it mounts).
            Err(e) if eio_at.is_some() => {
                drop(lo);
                let log = rec.log().take();
                return Ok((log, true, Err(format!("mount: {e}"))));
            }
            Err(e) => return Err(e),
        };
        let ctx = Ctx::new(m.path(), &s.path("scratch"), rec.log().clone());
        let ran = (w.run)(&ctx);
        if eio_at.is_none() {
            ran.clone().map_err(|detail| Error::Workload { workload: w.name.clone(), detail })?;
        }
        // After a failed write the filesystem may have shut itself down: unmount lazily then.
        if let Err(e) = m.unmount() {
            if eio_at.is_none() {
                return Err(e);
            }
        }
        (ran, lo.direct_io())
    };
    let log = rec.log().take();
    drop(rec);
    Ok((log, dio, ran))
}

/// Checks every chosen state of `log` against `w`, adding to `row`.
fn check_states(fs: FsKind, w: &Workload, s: &Scratch, log: &[Event], opts: &SweepOptions, row: &mut Row) -> Result<()> {
    let epochs: Vec<Epoch> = states::epochs(log);
    let chosen = states::choose(&epochs, opts.states, opts.seed);
    let (base, cur, img) = (s.path("base.img"), s.path("cur.img"), s.path("state.img"));
    states::sparse_copy(&base, &cur)?;
    let cur_file = std::fs::OpenOptions::new().write(true).open(&cur).map_err(|e| Error::io("open", &cur, e))?;
    // `cur` holds every epoch before `at`.
    let mut at = 0;
    for st in &chosen {
        if cleanup::interrupted() {
            return Err(Error::Interrupted);
        }
        while at < st.epoch {
            states::apply(&cur_file, &cur, log, epochs[at].writes.iter().copied())?;
            at += 1;
        }
        states::sparse_copy(&cur, &img)?;
        let f = std::fs::OpenOptions::new().write(true).open(&img).map_err(|e| Error::io("open", &img, e))?;
        let ep = &epochs[st.epoch];
        states::apply(&f, &img, log, st.keep.iter().map(|&k| ep.writes[k]))?;
        drop(f);
        let promised: &BTreeSet<String> = &ep.promised;
        let v = check::state(fs.name(), &img, &s.path("mnt"), w, promised)?;
        row.states += 1;
        row.temporaries += v.temporaries.len();
        if !v.violations.is_empty() {
            row.bad_states += 1;
        }
        let label = format!(
            "{}; promised: {}",
            st.label,
            if promised.is_empty() { "nothing".to_string() } else { promised.iter().cloned().collect::<Vec<_>>().join(", ") }
        );
        row.violations.extend(v.violations.into_iter().map(|(file, what)| Violation {
            fs: fs.name(),
            workload: w.name.clone(),
            state: label.clone(),
            file,
            what,
        }));
    }
    Ok(())
}

/// Runs `w` on `fs`, with the write numbered `eio_at` failed if given, and checks its crash
/// states.
pub fn one(fs: FsKind, w: &Workload, opts: &SweepOptions, eio_at: Option<usize>) -> Result<Row> {
    let base = opts.scratch.clone().unwrap_or_else(default_scratch);
    let s = Scratch::new(&base)?;
    let mut row = Row { fs: fs.name(), workload: w.name.clone(), eio_at, ..Row::default() };
    let (log, dio, ran) = record(fs, w, &s, eio_at, opts.eio_spread > 0)?;
    row.loop_direct_io = dio;
    row.writes = log.iter().filter(|e| matches!(e, Event::Write { .. })).count();
    row.barriers = log.iter().filter(|e| matches!(e, Event::Barrier)).count();
    row.failed_writes = log.iter().filter(|e| matches!(e, Event::Failed { .. })).count();
    match ran {
        Ok(Ran::Unsupported(why)) => {
            row.skipped = Some(why);
            return Ok(row);
        }
        Ok(Ran::Done) => {}
        Err(e) => row.failed_with = Some(e),
    }
    // With a failed write, the states are cut before it: what the filesystem does about the
    // error afterwards (ext4 aborts its journal, and may lose commits it had made) is beyond
    // any promise. The calls that returned after it are named for the reader.
    let (cut, after): (&[Event], &[Event]) = match log.iter().position(|e| matches!(e, Event::Failed { .. })) {
        Some(p) => log.split_at(p),
        None => (&log, &[]),
    };
    row.returned_after_failure = after.iter().filter_map(|e| if let Event::Mark(m) = e { Some(m.clone()) } else { None }).collect();
    let t = Instant::now();
    check_states(fs, w, &s, cut, opts, &mut row)?;
    if row.failed_writes > 0 {
        check_left(fs, w, &s, &log, &mut row)?;
    }
    row.check_s = t.elapsed().as_secs_f64();
    Ok(row)
}

/// After a failed write: every call that returned success, before the failure or after it,
/// must have left what it promised in the image the run left behind (no cut: the filesystem
/// unmounted as well as it could). A call that failed promised nothing.
fn check_left(fs: FsKind, w: &Workload, s: &Scratch, log: &[Event], row: &mut Row) -> Result<()> {
    let promised: BTreeSet<String> = log.iter().filter_map(|e| if let Event::Mark(m) = e { Some(m.clone()) } else { None }).collect();
    if promised.is_empty() {
        return Ok(());
    }
    // A copy: the recorded image stays as the run left it.
    let left = s.path("left.img");
    states::sparse_copy(&s.path("live.img"), &left)?;
    let v = check::promises(fs.name(), &left, &s.path("mnt"), w, &promised)?;
    row.states += 1;
    row.temporaries += v.temporaries.len();
    let label = format!("the image the run left, after the failed write; promised: {}", promised.iter().cloned().collect::<Vec<_>>().join(", "));
    if !v.violations.is_empty() {
        row.bad_states += 1;
    }
    row.violations.extend(v.violations.into_iter().map(|(file, what)| Violation { fs: fs.name(), workload: w.name.clone(), state: label.clone(), file, what }));
    Ok(())
}

/// `k` write numbers spread evenly over `writes` (the middle of `k` equal slices), distinct.
pub fn spread(writes: usize, k: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..k).map(|i| (2 * i + 1) * writes / (2 * k)).collect();
    v.dedup();
    v
}

/// What a sweep found.
#[derive(Debug, Default)]
pub struct Outcome {
    /// One row per filesystem and workload.
    pub rows: Vec<Row>,
}

impl Outcome {
    /// Crash states checked.
    pub fn states(&self) -> usize {
        self.rows.iter().map(|r| r.states).sum()
    }
    /// Every violation.
    pub fn violations(&self) -> impl Iterator<Item = &Violation> {
        self.rows.iter().flat_map(|r| r.violations.iter())
    }
}

/// Runs every workload on every filesystem of `opts`, calling `each` with each row as it is
/// done.
pub fn sweep(opts: &SweepOptions, workloads: &[Workload], mut each: impl FnMut(&Row)) -> Result<Outcome> {
    if opts.fs.is_empty() || workloads.is_empty() {
        return Err(Error::Invalid("nothing to sweep: name a filesystem and a workload".into()));
    }
    crate::record::available().map_err(Error::Invalid)?;
    let mut out = Outcome::default();
    for &fs in &opts.fs {
        for w in workloads {
            let mut fail_at = opts.eio_at.clone();
            if fail_at.is_empty() || opts.eio_spread > 0 {
                let row = one(fs, w, opts, None)?;
                if row.skipped.is_none() {
                    fail_at.extend(spread(row.writes, opts.eio_spread));
                }
                each(&row);
                out.rows.push(row);
            }
            fail_at.sort_unstable();
            fail_at.dedup();
            for n in fail_at {
                if cleanup::interrupted() {
                    return Err(Error::Interrupted);
                }
                let row = one(fs, w, opts, Some(n))?;
                each(&row);
                out.rows.push(row);
            }
        }
    }
    Ok(out)
}
