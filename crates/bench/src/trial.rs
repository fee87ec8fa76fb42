//! One timed trial of the engine in one mode: worker threads take files from a shared list and read, write
//! or copy them whole, while [`measure_cancellable`] samples the system, with the scenario's helper process
//! ([`TrialScenario`]) around it.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use cacheless::{copy_file, Budget, Mode, Progress, ReadOptions, Reader, WriteOptions, Writer};

use crate::cgroup::{MemoryCgroup, MemoryHierarchy};
use crate::config::{BenchConfig, Rw};
use crate::error::{Error, Result};
use crate::fio::FioJob;
use crate::log::Log;
use crate::meter::measure_cancellable;
use crate::prepare::{make_block, make_cold, remove_all, resident_bytes, ColdStart, XorShift};
use crate::report::TrialReport;
use crate::scenario::TrialScenario;

/// What every trial of a run shares.
pub(crate) struct Bench<'a> {
    /// The run's options.
    pub cfg: &'a BenchConfig,
    /// Files read (read, randread, copy).
    pub sources: Vec<PathBuf>,
    /// Files written (write, copy).
    pub targets: Vec<PathBuf>,
    /// The engine's buffer budget, shared by all trials.
    pub budget: Budget,
    /// kswapd thread ids.
    pub kswapd: Vec<u32>,
    /// Where each trial's memory cgroup goes (low-memory scenario).
    pub hierarchy: Option<MemoryHierarchy>,
    /// The directory of the files (the neighbour scenario's hot file is there too).
    pub dir: PathBuf,
    /// Set by a signal handler to stop the run: the trial in progress stops between requests.
    pub cancel: &'a AtomicBool,
}

impl Bench<'_> {
    /// Brings the sources cold before a trial (see [`make_cold`]), warning when that did not work.
    fn cold_start(&self, log: Log<'_>) -> Result<ColdStart> {
        let cold = make_cold(&self.sources, self.cfg.drop_caches, &self.kswapd, self.cancel)?;
        let source_bytes = self.cfg.file_size * self.sources.len() as u64;
        if cold.resident > source_bytes / 100 {
            log(&format!(
                "WARNING: {} bytes of the files are still cached after eviction \
                 (mapped or locked by another program?): this trial does not start cold",
                cold.resident
            ));
        }
        if !cold.settled {
            log(&format!(
                "WARNING: after {:.0} s writeback ({} MiB dirty or under writeback) or kswapd is still \
                 busy (another program?): this trial shares the machine with it",
                cold.settle_s,
                cold.dirty_writeback >> 20
            ));
        }
        Ok(cold)
    }

    /// One trial of the engine in `mode` from a cold start, with the engine's decisions (deduplicated).
    /// `run` and `position` are the caller's to fill.
    pub fn ours(&self, mode: Mode, log: Log<'_>) -> Result<(TrialReport, Vec<String>)> {
        remove_all(&self.targets)?;
        let cold = self.cold_start(log)?;
        // Its helper process ends with it, also when a step fails (dropped: killed and waited for).
        let mut scenario = TrialScenario::start(self.cfg, &self.dir, &self.kswapd, self.cancel, log)?;
        scenario.clock_starts(self.cancel)?;
        let settle_s = cold.settle_s + scenario.settle_s();
        let (mut t, decisions) = self.timed(mode)?;
        scenario.finish(&mut t, self.cancel)?;
        t.files_resident_start_bytes = cold.resident;
        t.settle_s = settle_s;
        if t.caches_dropped_during > 0 {
            log(&format!("WARNING: another program dropped the page cache {} time(s) during this trial", t.caches_dropped_during));
        }
        Ok((t, decisions))
    }

    /// One run of fio's `job` from a cold start: its bandwidth in MiB/s.
    pub fn fio(&self, job: &FioJob, log: Log<'_>) -> Result<f64> {
        if self.cfg.rw == Rw::Write {
            remove_all(&job.files)?;
        }
        self.cold_start(log)?;
        // The same scenario as the engine's trials: fio's figures are only comparable under the same pressure.
        let mut scenario = TrialScenario::start(self.cfg, &self.dir, &self.kswapd, self.cancel, log)?;
        scenario.clock_starts(self.cancel)?;
        let bw = job.run()?;
        scenario.finish(&mut TrialReport::default(), self.cancel)?;
        Ok(bw)
    }

    /// The timed part of [`Bench::ours`].
    fn timed(&self, mode: Mode) -> Result<(TrialReport, Vec<String>)> {
        let ctx = Ctx { bench: self, mode, decisions: Mutex::new(BTreeSet::new()) };
        let mut cg = match &self.hierarchy {
            Some(h) => {
                let mut cg = MemoryCgroup::create_in(h.clone(), self.cfg.memory_limit)?;
                cg.enter()?;
                Some(cg)
            }
            None => None,
        };
        let result = measure_cancellable(cg.as_ref(), &self.kswapd, self.cancel, |c| ctx.work(c));
        if let Some(cg) = cg.as_mut() {
            cg.leave()?;
        }
        let mut t = result?;
        // Residency before the cgroup goes: removing it reclaims what was charged to it.
        let (cached, total) = resident_bytes(if self.cfg.rw.writes_targets() { &self.targets } else { &self.sources });
        if let Some(cg) = cg {
            cg.remove()?;
        }
        t.files_resident_end_bytes = cached;
        t.files_total_bytes = total;
        // A panicking worker poisons the set; the strings in it are whole, and the panic is already an error.
        let decisions = ctx.decisions.into_inner().unwrap_or_else(PoisonError::into_inner);
        Ok((t, decisions.into_iter().collect()))
    }
}

struct Ctx<'a> {
    bench: &'a Bench<'a>,
    mode: Mode,
    decisions: Mutex<BTreeSet<String>>,
}

impl Ctx<'_> {
    fn ro(&self) -> ReadOptions {
        let cfg = self.bench.cfg;
        let mut o = ReadOptions::new(self.bench.budget.clone());
        o.io.mode = self.mode;
        o.io.backend = cfg.backend;
        o.io.block_size = cfg.block_size;
        o.io.queue_depth = cfg.queue_depth;
        o
    }
    fn wo(&self) -> WriteOptions {
        let cfg = self.bench.cfg;
        let mut o = WriteOptions::new(self.bench.budget.clone());
        o.io.mode = self.mode;
        o.io.backend = cfg.backend;
        o.io.block_size = cfg.block_size;
        o.io.queue_depth = cfg.queue_depth;
        o.size_hint = Some(cfg.file_size);
        o.durability = cacheless::Durability::EachFile;
        o
    }
    fn note(&self, what: &str, mode: cacheless::Taken, reason: &dyn std::fmt::Display) {
        self.decisions.lock().unwrap_or_else(PoisonError::into_inner).insert(format!("{what} {mode} ({reason})"));
    }

    /// The work of one trial: threads take file indexes from a shared counter. A worker's panic becomes an
    /// error naming its file.
    fn work(&self, progress: &Progress) -> Result<()> {
        let next = AtomicUsize::new(0);
        let n = self.bench.cfg.files;
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..self.bench.cfg.threads.min(n).max(1))
                .map(|t| {
                    let next = &next;
                    s.spawn(move || -> Result<()> {
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            if i >= n {
                                return Ok(());
                            }
                            if progress.is_cancelled() {
                                return Err(Error::Interrupted);
                            }
                            catch_unwind(AssertUnwindSafe(|| self.one_file(i, t, progress))).map_err(|p| Error::panicked(self.describe(i), p.as_ref()))??;
                        }
                    })
                })
                .collect();
            let mut first = Ok(());
            for h in hs {
                let r = h.join().unwrap_or_else(|p| Err(Error::panicked("a benchmark worker", p.as_ref())));
                if first.is_ok() {
                    first = r;
                }
            }
            first
        })
    }

    /// `read of /dir/cacheless-bench-0.dat`: what the worker on file `i` does.
    fn describe(&self, i: usize) -> String {
        let b = self.bench;
        let path = match self.bench.cfg.rw {
            Rw::Write => b.targets.get(i),
            _ => b.sources.get(i),
        };
        let path = path.map(|p| p.display().to_string()).unwrap_or_default();
        format!("{} {} of {path}", self.mode, self.bench.cfg.rw.name())
    }

    fn one_file(&self, i: usize, thread: usize, progress: &Progress) -> Result<()> {
        let cfg = self.bench.cfg;
        let (sources, targets) = (&self.bench.sources, &self.bench.targets);
        match cfg.rw {
            Rw::Read => {
                let mut r = Reader::open(&sources[i], &self.ro())?;
                self.note("read", r.decision().mode, &r.decision().reason);
                while let Some(c) = r.next_chunk()? {
                    progress.add_bytes(c.len() as u64);
                    if progress.is_cancelled() {
                        return Err(Error::Interrupted);
                    }
                }
            }
            Rw::RandRead => {
                let mut r = Reader::open(&sources[i], &self.ro())?;
                self.note("randread", r.decision().mode, &r.decision().reason);
                let bs = cfg.block_size as u64;
                let blocks = r.len().div_ceil(bs).max(1);
                let mut rng = XorShift(0x51_7cc1_b727_220a ^ ((i as u64) << 32) ^ thread as u64 | 1);
                let mut buf = vec![0u8; cfg.block_size];
                for _ in 0..blocks {
                    if progress.is_cancelled() {
                        return Err(Error::Interrupted);
                    }
                    let off = (rng.next() % blocks) * bs;
                    let got = r.read_at(&mut buf, off)?;
                    progress.add_bytes(got as u64);
                }
            }
            Rw::Write => {
                let p = &targets[i];
                let mut w = Writer::create(p, &self.wo())?;
                self.note("write", w.decision().mode, &w.decision().reason);
                let block = make_block(0x1234_5678 + i as u64, cfg.block_size);
                let mut left = cfg.file_size;
                while left > 0 {
                    if progress.is_cancelled() {
                        return Err(Error::Interrupted);
                    }
                    let k = cacheless::conv::fit(left, block.len());
                    w.write_all(&block[..k]).map_err(|e| Error::io(p, "write", e))?;
                    progress.add_bytes(k as u64);
                    left -= k as u64;
                }
                w.finish()?;
            }
            Rw::Copy => {
                // What `cacheless cp` runs: the engine's copy, with its buffer split between reader and writer.
                let r = copy_file(&sources[i], &targets[i], &self.ro(), &self.wo(), progress)?;
                self.note("copy read", r.read.mode, &r.read.reason);
                self.note("copy write", r.write.decision.mode, &r.write.decision.reason);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn a_worker_panic_is_an_error_naming_the_file() {
        let mut cfg = BenchConfig::quick(Path::new("."));
        cfg.files = 1;
        cfg.threads = 1;
        // One file to read but no source: indexing it panics inside the worker.
        let cancel = AtomicBool::new(false);
        let bench = Bench {
            cfg: &cfg,
            sources: Vec::new(),
            targets: Vec::new(),
            budget: Budget::new(1 << 20),
            kswapd: Vec::new(),
            hierarchy: None,
            dir: PathBuf::from("."),
            cancel: &cancel,
        };
        let ctx = Ctx { bench: &bench, mode: Mode::Direct, decisions: Mutex::new(BTreeSet::new()) };
        match ctx.work(&Progress::new()) {
            Err(Error::Panic { what, message }) => {
                assert_eq!(what, "direct read of ");
                assert!(message.contains("index out of bounds"), "{message}");
            }
            other => panic!("expected a panic error, got {other:?}"),
        }
    }
}
