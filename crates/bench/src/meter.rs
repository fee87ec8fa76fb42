//! Measures one trial: runs the workload on its own thread, samples progress, page cache, dirty memory,
//! MemAvailable and kswapd's CPU time every 100 ms from the calling thread, and takes CPU, kswapd and reclaim
//! deltas around it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cacheless::Progress;

use crate::cgroup::{CgroupMemStat, MemoryCgroup};
use crate::error::{Error, Result};
use crate::procfs::{drop_pagecache_count, kswapd_cpu, read_meminfo, read_vmstat_map, self_cpu, CpuTime, MemInfo, Reclaim};
use crate::report::{CacheReport, CacheSource, Series, TrialReport};

/// How often progress and memory are sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);

const MIB: f64 = 1024.0 * 1024.0;

struct Snapshot {
    cpu: CpuTime,
    kswapd: CpuTime,
    vm: Reclaim,
    drops: u64,
    mem: MemInfo,
    cg: Option<CgroupMemStat>,
}

fn snapshot(cg: Option<&MemoryCgroup>, kswapd: &[u32]) -> Result<Snapshot> {
    let vm = read_vmstat_map()?;
    Ok(Snapshot {
        cpu: self_cpu()?,
        kswapd: kswapd_cpu(kswapd),
        vm: Reclaim::from_map(&vm),
        drops: drop_pagecache_count(&vm),
        mem: read_meminfo()?,
        cg: cg.map(|c| c.stat()).transpose()?,
    })
}

/// Page cache and Dirty + Writeback bytes: the cgroup's when its memory.stat was read, else the system's
/// (`mem` is only called then, so the sampling loop reads one file, not two).
fn cache_and_dirty(cg: Option<&CgroupMemStat>, mem: impl FnOnce() -> MemInfo) -> (u64, u64) {
    match cg {
        Some(c) => (c.cache, c.dirty + c.writeback),
        None => {
            let m = mem();
            (m.cached, m.dirty + m.writeback)
        }
    }
}

/// Runs `work` (which adds the bytes it moves to the progress it is given, [`Progress::add_bytes`]) and
/// measures it. The returned trial has everything but `run`, `position`, the wait before it and the files'
/// residency filled in. A panic in `work` comes back as [`Error::Panic`].
///
/// The clock starts just before `work` starts and stops when it returns: for writes, `work` must include
/// making the data durable.
pub fn measure<W>(cg: Option<&MemoryCgroup>, kswapd: &[u32], work: W) -> Result<TrialReport>
where
    W: FnOnce(&Progress) -> Result<()> + Send,
{
    measure_cancellable(cg, kswapd, &AtomicBool::new(false), work)
}

/// [`measure`], passing `cancel` on: once it is set, the progress given to `work` reports
/// [`Progress::is_cancelled`] (within one sampling interval), and `work` should stop.
pub fn measure_cancellable<W>(cg: Option<&MemoryCgroup>, kswapd: &[u32], cancel: &AtomicBool, work: W) -> Result<TrialReport>
where
    W: FnOnce(&Progress) -> Result<()> + Send,
{
    let progress = Progress::new();
    let start = snapshot(cg, kswapd)?;
    let (cache_start, dirty_start) = cache_and_dirty(start.cg.as_ref(), || start.mem);
    let mut peak_cache = cache_start;
    let mut peak_dirty = dirty_start;
    let mut available_min = start.mem.available;
    let mut samples: Vec<(f64, f64)> = vec![(0.0, 0.0)];
    let kswapd_start = start.kswapd.total_s();
    let mut kswapd_samples: Vec<(f64, f64)> = vec![(0.0, 0.0)];
    let t0 = Instant::now();
    let (result, seconds) = std::thread::scope(|s| {
        let h = s.spawn(|| work(&progress));
        let mut next = t0 + SAMPLE_EVERY;
        while !h.is_finished() {
            if cancel.load(Ordering::Relaxed) {
                progress.cancel();
            }
            let now = Instant::now();
            if now < next {
                // Poll for the end a few times per interval so that the clock stops promptly.
                std::thread::sleep((next - now).min(Duration::from_millis(5)));
                continue;
            }
            next += SAMPLE_EVERY;
            let at = t0.elapsed().as_secs_f64();
            samples.push((at, progress.bytes() as f64));
            kswapd_samples.push((at, kswapd_cpu(kswapd).total_s() - kswapd_start));
            let (c, d) = cache_and_dirty(cg.and_then(|c| c.stat().ok()).as_ref(), || {
                let m = read_meminfo().unwrap_or_default();
                if m.total > 0 {
                    available_min = available_min.min(m.available);
                }
                m
            });
            peak_cache = peak_cache.max(c);
            peak_dirty = peak_dirty.max(d);
        }
        let r = h.join().unwrap_or_else(|p| Err(Error::panicked("the workload", p.as_ref())));
        (r, t0.elapsed().as_secs_f64())
    });
    result?;
    let bytes = progress.bytes();
    samples.push((seconds, bytes as f64));
    let end = snapshot(cg, kswapd)?;
    kswapd_samples.push((seconds, end.kswapd.total_s() - kswapd_start));
    let (cache_end, dirty_end) = cache_and_dirty(end.cg.as_ref(), || end.mem);
    peak_cache = peak_cache.max(cache_end);
    peak_dirty = peak_dirty.max(dirty_end);
    let interval = if seconds >= 5.0 { 1.0 } else { 0.1 };

    let mut t = TrialReport {
        bytes,
        seconds,
        series: series_from_samples(&samples, interval),
        kswapd_cpu_pct_series: per_interval(&kswapd_samples, interval).into_iter().map(|s| s / interval * 100.0).collect(),
        mem_available_min_bytes: available_min.min(end.mem.available),
        cpu: end.cpu.since(&start.cpu),
        kswapd_cpu_s: end.kswapd.since(&start.kswapd).total_s(),
        reclaim: end.vm.since(&start.vm),
        cgroup_reclaim: match (end.cg.and_then(|c| c.reclaim), start.cg.and_then(|c| c.reclaim)) {
            (Some(e), Some(s)) => Some(e.since(&s)),
            _ => None,
        },
        cache: CacheReport {
            source: if cg.is_some() { CacheSource::Cgroup } else { CacheSource::Meminfo },
            start_bytes: cache_start,
            end_bytes: cache_end,
            growth_bytes: signed_diff(cache_end, cache_start),
            peak_growth_bytes: signed_diff(peak_cache, cache_start),
            peak_dirty_writeback_bytes: peak_dirty,
            start_dirty_writeback_bytes: dirty_start,
        },
        system_cache_growth_bytes: signed_diff(end.mem.cached, start.mem.cached),
        caches_dropped_during: end.drops.saturating_sub(start.drops),
        cgroup_peak_bytes: cg.and_then(|c| c.peak()),
        ..Default::default()
    };
    t.finish_rates();
    Ok(t)
}

/// `a - b` as a signed byte count, saturating at the ends of `i64`.
fn signed_diff(a: u64, b: u64) -> i64 {
    if a >= b {
        i64::try_from(a - b).unwrap_or(i64::MAX)
    } else {
        i64::try_from(b - a).map_or(i64::MIN, |d| -d)
    }
}

/// Turns cumulative `(seconds, bytes)` samples into MiB/s per complete interval, interpolating linearly
/// between samples.
pub fn series_from_samples(samples: &[(f64, f64)], interval: f64) -> Series {
    Series::new(interval, per_interval(samples, interval).into_iter().map(|d| d / MIB / interval).collect())
}

/// How much a cumulative figure sampled at `(seconds, value)` grew in each complete interval, interpolating
/// linearly between samples.
pub fn per_interval(samples: &[(f64, f64)], interval: f64) -> Vec<f64> {
    let Some(&(end, _)) = samples.last() else {
        return vec![];
    };
    let at = |t: f64| -> f64 {
        let i = samples.partition_point(|s| s.0 < t);
        if i == 0 {
            return samples[0].1;
        }
        if i >= samples.len() {
            return samples[samples.len() - 1].1;
        }
        let (t1, b1) = samples[i - 1];
        let (t2, b2) = samples[i];
        if t2 <= t1 {
            return b2;
        }
        b1 + (b2 - b1) * (t - t1) / (t2 - t1)
    };
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // A count of whole intervals of a run: small and not negative.
    let n = (end / interval + 1e-9).floor().max(0.0) as usize;
    let mut out = Vec::with_capacity(n);
    let mut prev = at(0.0);
    for k in 1..=n {
        let cur = at(k as f64 * interval);
        out.push(cur - prev);
        prev = cur;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_interpolates_complete_intervals() {
        let m = 1048576.0;
        let s = series_from_samples(&[(0.0, 0.0), (0.5, 50.0 * m), (1.0, 100.0 * m), (2.0, 300.0 * m), (2.5, 350.0 * m)], 1.0);
        assert_eq!(s.mib_s, vec![100.0, 200.0]);
        assert_eq!(s.spread.median, 150.0);
        assert!((s.cov - 1.0 / 3.0).abs() < 1e-12);
        let s = series_from_samples(&[(0.0, 0.0), (0.25, 0.0), (0.75, 100.0 * m)], 0.5);
        assert_eq!(s.mib_s, vec![100.0]);
        assert!(series_from_samples(&[], 1.0).mib_s.is_empty());
        // kswapd CPU seconds sampled the same way: 0.25 s in the first second, 0.5 s in the second.
        assert_eq!(per_interval(&[(0.0, 0.0), (1.0, 0.25), (2.0, 0.75), (2.4, 0.8)], 1.0), vec![0.25, 0.5]);
    }

    #[test]
    fn measures_a_workload() {
        let t = measure(None, &crate::procfs::kswapd_pids(), |c| {
            for _ in 0..64 {
                c.add_bytes(1 << 20);
            }
            std::thread::sleep(Duration::from_millis(250));
            Ok(())
        })
        .unwrap();
        assert_eq!(t.bytes, 64 << 20);
        assert!(t.seconds >= 0.25);
        assert!(t.mib_s > 0.0);
        assert!(t.series.interval_s == 0.1 && t.series.mib_s.len() >= 2);
        assert_eq!(t.cache.source, CacheSource::Meminfo);
        assert!(t.cgroup_peak_bytes.is_none());
        // kswapd's CPU is sampled on the same intervals as the throughput.
        assert_eq!(t.kswapd_cpu_pct_series.len(), t.series.mib_s.len());
        assert!(t.kswapd_cpu_pct_series.iter().all(|p| *p >= 0.0));
        assert!(t.mem_available_min_bytes > 0);
    }

    #[test]
    fn cancel_reaches_the_workload() {
        let cancel = AtomicBool::new(true);
        let r = measure_cancellable(None, &[], &cancel, |p| {
            let t0 = Instant::now();
            while !p.is_cancelled() {
                if t0.elapsed() > Duration::from_secs(10) {
                    return Err(Error::Usage("never cancelled".into()));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(Error::Interrupted)
        });
        assert!(matches!(r, Err(Error::Interrupted)), "{r:?}");
    }

    #[test]
    fn workload_error_is_returned() {
        let r = measure(None, &[], |_| Err(Error::Usage("boom".into())));
        assert!(matches!(r, Err(Error::Usage(_))));
    }

    #[test]
    fn workload_panic_is_an_error() {
        let r = measure(None, &[], |_| panic!("worker gave up"));
        match r {
            Err(Error::Panic { what, message }) => {
                assert_eq!(what, "the workload");
                assert_eq!(message, "worker gave up");
            }
            other => panic!("expected a panic error, got {other:?}"),
        }
    }
}
