//! The files of a run and the cold start of every trial: creating the sources, removing what trials wrote,
//! evicting, and waiting for writeback and reclaim to finish before the clock starts.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cacheless::residency::{evict_path, residency_of};
use cacheless::{Budget, WriteOptions, Writer};

use crate::config::BenchConfig;
use crate::error::{Error, Result};
use crate::log::Log;
use crate::procfs::{kswapd_cpu, read_meminfo};

/// The `i`-th source file of a run.
pub(crate) fn source_path(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("cacheless-bench-{i}.dat"))
}
/// The `i`-th file a write or copy trial creates.
pub(crate) fn target_path(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("cacheless-bench-out-{i}.dat"))
}
/// The `i`-th file fio's write trials create.
pub(crate) fn fio_target_path(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("cacheless-bench-fio-{i}.dat"))
}

/// xorshift64*: the benchmark's data and random offsets only need to be cheap and not compressible; `rand`
/// would add a dependency for ten lines.
#[derive(Debug, Clone)]
pub(crate) struct XorShift(pub(crate) u64);
impl XorShift {
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

/// `len` pseudo-random bytes from `seed`.
pub(crate) fn make_block(seed: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    XorShift(seed | 1).fill(&mut b);
    b
}

/// Creates (or reuses, when the size matches) the source files, written with the engine in auto mode so that
/// preparing them does not fill the page cache.
pub(crate) fn prepare_sources(cfg: &BenchConfig, dir: &Path, cancel: &AtomicBool, log: Log<'_>) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for i in 0..cfg.files {
        let p = source_path(dir, i);
        prepare_file(cfg, &p, cfg.file_size, 0x9e37_79b9 + i as u64, cancel, log)?;
        out.push(p);
    }
    Ok(out)
}

/// Creates `path` with `size` pseudo-random bytes from `seed` as [`prepare_sources`] does, unless it exists
/// with that size already.
pub(crate) fn prepare_file(cfg: &BenchConfig, path: &Path, size: u64, seed: u64, cancel: &AtomicBool, log: Log<'_>) -> Result<()> {
    if std::fs::metadata(path).map(|m| m.len() == size).unwrap_or(false) {
        return Ok(());
    }
    log(&format!("creating {} ({size} bytes)", path.display()));
    let mut wo = WriteOptions::new(Budget::new(cfg.budget_bytes));
    wo.size_hint = Some(size);
    wo.io.block_size = cfg.block_size.max(1 << 20);
    let mut w = Writer::create(path, &wo)?;
    let mut block = make_block(seed, wo.io.block_size);
    let mut left = size;
    let mut n = 0u64;
    while left > 0 {
        if cancel.load(Ordering::Relaxed) {
            // The unfinished file never takes its name: the writer removes its temporary when dropped.
            return Err(Error::Interrupted);
        }
        let k = cacheless::conv::fit(left, block.len());
        // Make every block different, so that nothing below us can deduplicate it.
        block[..8].copy_from_slice(&n.to_le_bytes());
        w.write_all(&block[..k]).map_err(|e| Error::io(path, "write", e))?;
        left -= k as u64;
        n += 1;
    }
    w.finish()?;
    Ok(())
}

fn remove_if_exists(p: &Path) -> Result<()> {
    match std::fs::remove_file(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(p, "remove", e)),
    }
}

/// Removes the files that exist among `paths`.
pub(crate) fn remove_all(paths: &[PathBuf]) -> Result<()> {
    paths.iter().try_for_each(|p| remove_if_exists(p))
}

/// Bytes of `files` resident in the page cache, and their total size in pages; files that cannot be
/// checked count as neither.
pub(crate) fn resident_bytes(files: &[PathBuf]) -> (u64, u64) {
    let mut cached = 0;
    let mut total = 0;
    for f in files {
        if let Ok(r) = residency_of(f) {
            cached += r.cached_bytes();
            total += r.total_bytes();
        }
    }
    (cached, total)
}

/// Dirty + Writeback at or under which writeback counts as finished (other programs keep a little dirty).
const SETTLED_DIRTY_BYTES: u64 = 16 << 20;
/// How often the wait looks at /proc/meminfo and kswapd's CPU time.
const SETTLE_POLL: Duration = Duration::from_millis(50);
/// Consecutive polls in which kswapd must have used no CPU (its time has a 10 ms resolution).
const SETTLE_QUIET_POLLS: u32 = 2;
/// The longest wait: a busy machine must not stall the run; the trial then records what it started with.
const SETTLE_MAX: Duration = Duration::from_secs(10);

/// How a trial's start was prepared.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ColdStart {
    /// Bytes of the files still resident when the wait ended (0 = cold).
    pub resident: u64,
    /// Seconds spent waiting for writeback and kswapd.
    pub settle_s: f64,
    /// Dirty + Writeback when the wait ended.
    pub dirty_writeback: u64,
    /// Whether both settled before [`SETTLE_MAX`].
    pub settled: bool,
}

/// Brings `files` to a cold state: writes back everything dirty (sync), optionally drops all caches, evicts
/// the files, then waits until the work that left behind is done.
///
/// Why the wait: a buffered trial fills the page cache, and a write trial leaves dirty pages and removed
/// files behind. Evicting (fadvise DONTNEED) frees the files' pages at once, but writeback started by
/// anything else and kswapd's reclaim go on asynchronously; a trial started while they run shares the disk
/// and a CPU with them, so the trial after a buffered one would pay for it. sync() waits for writeback of
/// what was dirty when it was called; the wait below also covers what got dirty since, and kswapd. Each
/// trial records the wait and the Dirty + Writeback it started with, and the files' residency.
pub(crate) fn make_cold(files: &[PathBuf], drop_caches: bool, kswapd: &[u32], cancel: &AtomicBool) -> Result<ColdStart> {
    cacheless::sys::sync_all();
    if drop_caches {
        let p = "/proc/sys/vm/drop_caches";
        std::fs::write(p, "3").map_err(|e| Error::io(p, "write (needs root)", e))?;
    }
    for f in files {
        evict_path(f)?;
    }
    let mut cold = settle(kswapd, cancel)?;
    cold.resident = resident_bytes(files).0;
    Ok(cold)
}

/// Waits until Dirty + Writeback is at most [`SETTLED_DIRTY_BYTES`] and kswapd has been idle for
/// [`SETTLE_QUIET_POLLS`] polls, or [`SETTLE_MAX`] has passed. While too much is dirty it syncs again (which
/// waits for that writeback) rather than waiting for the flusher's timer. Stops with [`Error::Interrupted`]
/// once `cancel` is set.
pub(crate) fn settle(kswapd: &[u32], cancel: &AtomicBool) -> Result<ColdStart> {
    let t0 = Instant::now();
    let mut quiet = 0;
    let mut ksw = kswapd_cpu(kswapd).total_s();
    loop {
        if cancel.load(Ordering::Relaxed) {
            return Err(Error::Interrupted);
        }
        let m = read_meminfo()?;
        let dirty = m.dirty + m.writeback;
        let settled = dirty <= SETTLED_DIRTY_BYTES && quiet >= SETTLE_QUIET_POLLS;
        if settled || t0.elapsed() >= SETTLE_MAX {
            return Ok(ColdStart { resident: 0, settle_s: t0.elapsed().as_secs_f64(), dirty_writeback: dirty, settled });
        }
        let p0 = Instant::now();
        if dirty > SETTLED_DIRTY_BYTES {
            cacheless::sys::sync_all();
        }
        std::thread::sleep(SETTLE_POLL.saturating_sub(p0.elapsed()));
        let now = kswapd_cpu(kswapd).total_s();
        quiet = if now > ksw { 0 } else { quiet + 1 };
        ksw = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xorshift_is_not_constant() {
        let b = make_block(7, 4096);
        assert_ne!(&b[..8], &b[8..16]);
        assert_eq!(b, make_block(7, 4096));
    }

    #[test]
    fn a_cold_start_leaves_nothing_resident_and_reports_its_wait() {
        // Under target/ rather than in /tmp, which may be a tmpfs whose pages cannot be evicted.
        let dir = cacheless_testkit::scratch();
        let p = dir.path().join("f");
        std::fs::write(&p, make_block(3, 1 << 20)).unwrap();
        // Written through the page cache: resident and dirty now.
        assert!(resident_bytes(std::slice::from_ref(&p)).0 > 0);
        let c = make_cold(std::slice::from_ref(&p), false, &crate::procfs::kswapd_pids(), &AtomicBool::new(false)).unwrap();
        assert_eq!(c.resident, 0);
        assert!(c.settle_s >= 0.0 && c.settle_s <= SETTLE_MAX.as_secs_f64() + 1.0);
        if c.settled {
            assert!(c.dirty_writeback <= SETTLED_DIRTY_BYTES);
            // Idle kswapd is only seen after polling.
            assert!(c.settle_s >= (SETTLE_POLL * SETTLE_QUIET_POLLS).as_secs_f64());
        }
        assert_eq!(resident_bytes(&[p]).1, 1 << 20);
    }
}
