//! Crash states: which images a power cut may leave, given the log of a recorded run.
//!
//! The log splits at its barriers into epochs: the writes between two flushes. A cut during
//! epoch `e` keeps everything before it (flushed) plus any subset of epoch `e`'s writes (a
//! device with a volatile write cache may keep some of them, in any order). The states built
//! here are, for every epoch, the image at its start (nothing of it kept: the image as at
//! every flush), then, within the budget, prefixes of its writes and seeded random subsets.
//!
//! A cut during epoch `e` may come as late as just before the barrier that closes it, so the
//! promises such a state must honour are every marker logged before that barrier.

use std::collections::{BTreeSet, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use rand::seq::index;
use rand::{Rng, SeedableRng};

use crate::record::Event;
use crate::{Error, Result};

/// The writes between two barriers, and what is promised by the barrier that ends them.
#[derive(Debug, Clone, Default)]
pub struct Epoch {
    /// Positions in the log of its writes, in order.
    pub writes: Vec<usize>,
    /// The markers logged before the barrier that closes it (or before the end of the log).
    pub promised: BTreeSet<String>,
}

/// Splits `log` into epochs (the last one ends with the log, after its last barrier).
pub fn epochs(log: &[Event]) -> Vec<Epoch> {
    let mut out = vec![Epoch::default()];
    let mut marks = BTreeSet::new();
    for (i, e) in log.iter().enumerate() {
        match e {
            Event::Write { .. } => out.last_mut().into_iter().for_each(|ep| ep.writes.push(i)),
            Event::Mark(m) => {
                marks.insert(m.clone());
            }
            Event::Failed { .. } => {}
            Event::Barrier => {
                if let Some(ep) = out.last_mut() {
                    ep.promised = marks.clone();
                }
                out.push(Epoch::default());
            }
        }
    }
    if let Some(ep) = out.last_mut() {
        ep.promised = marks;
    }
    out
}

/// One crash state: every epoch before `epoch` kept whole, and of `epoch` the writes at
/// these indices (into [`Epoch::writes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// The epoch the cut falls in.
    pub epoch: usize,
    /// Which of its writes the device kept, in log order.
    pub keep: Vec<usize>,
    /// How it was chosen, for reports.
    pub label: String,
}

/// Up to `budget` crash states of `epochs`, in epoch order: each epoch's start first (evenly
/// spread over the epochs when they alone are over the budget), then prefixes and random
/// subsets of each epoch's writes, taken in turn from every epoch, chosen from `seed`.
pub fn choose(epochs: &[Epoch], budget: usize, seed: u64) -> Vec<State> {
    let n = epochs.len();
    let mut out: Vec<State> = Vec::new();
    let starts: Vec<usize> = if n <= budget {
        (0..n).collect()
    } else {
        (0..budget).map(|i| i * (n - 1) / budget.saturating_sub(1).max(1)).collect::<BTreeSet<_>>().into_iter().collect()
    };
    for e in starts {
        out.push(State { epoch: e, keep: vec![], label: format!("flush {e}") });
    }
    let mut seen: Vec<HashSet<Vec<usize>>> = epochs.iter().map(|_| HashSet::new()).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut round = 0usize;
    let mut stalled = 0;
    while out.len() < budget && stalled < 64 {
        let before = out.len();
        for (e, ep) in epochs.iter().enumerate() {
            let w = ep.writes.len();
            if out.len() >= budget || w < 2 {
                continue;
            }
            let (keep, label) = match round {
                0 => ((0..w / 2).collect::<Vec<_>>(), format!("epoch {e}: prefix {}/{w}", w / 2)),
                1 => ((0..w - 1).collect(), format!("epoch {e}: prefix {}/{w}", w - 1)),
                2 => (vec![0], format!("epoch {e}: prefix 1/{w}")),
                r if r % 2 == 1 => {
                    let k = rng.random_range(1..w);
                    ((0..k).collect(), format!("epoch {e}: prefix {k}/{w}"))
                }
                _ => {
                    let k = rng.random_range(1..w);
                    let mut v = index::sample(&mut rng, w, k).into_vec();
                    v.sort_unstable();
                    let label = format!("epoch {e}: random {k}/{w} (seed {seed}, round {round})");
                    (v, label)
                }
            };
            if !keep.is_empty() && keep.len() < w && seen[e].insert(keep.clone()) {
                out.push(State { epoch: e, keep, label });
            }
        }
        stalled = if out.len() == before { stalled + 1 } else { 0 };
        round += 1;
    }
    out.sort_by_key(|s| s.epoch);
    out
}

/// Copies `src` to a new file `dst` of the same size, holes kept (SEEK_DATA / SEEK_HOLE, then
/// copy_file_range of each data extent): a mostly empty image costs what it holds.
pub fn sparse_copy(src: &Path, dst: &Path) -> Result<()> {
    use rustix::fs::SeekFrom;
    let s = File::open(src).map_err(|e| Error::io("open", src, e))?;
    let d = File::create(dst).map_err(|e| Error::io("create", dst, e))?;
    let len = s.metadata().map_err(|e| Error::io("stat", src, e))?.len();
    d.set_len(len).map_err(|e| Error::io("truncate", dst, e))?;
    let mut pos = 0u64;
    while pos < len {
        let data = match rustix::fs::seek(&s, SeekFrom::Data(pos)) {
            Ok(p) => p,
            Err(rustix::io::Errno::NXIO) => break,
            Err(e) => return Err(Error::io("seek data", src, e.into())),
        };
        let hole = rustix::fs::seek(&s, SeekFrom::Hole(data)).map_err(|e| Error::io("seek hole", src, e.into()))?;
        let (mut off_in, mut off_out) = (data, data);
        while off_in < hole {
            let want = usize::try_from(hole - off_in).unwrap_or(usize::MAX);
            let n =
                rustix::fs::copy_file_range(&s, Some(&mut off_in), &d, Some(&mut off_out), want).map_err(|e| Error::io("copy_file_range", dst, e.into()))?;
            if n == 0 {
                return Err(Error::io("copy_file_range", dst, std::io::Error::from(std::io::ErrorKind::UnexpectedEof)));
            }
        }
        pos = hole;
    }
    Ok(())
}

/// Writes the log's writes at `positions` (in that order) into `image`.
pub fn apply(image: &File, path: &Path, log: &[Event], positions: impl IntoIterator<Item = usize>) -> Result<()> {
    for p in positions {
        if let Some(Event::Write { off, data }) = log.get(p) {
            image.write_all_at(data, *off).map_err(|e| Error::io("write", path, e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn w() -> Event {
        Event::Write { off: 0, data: Arc::from(&b"x"[..]) }
    }

    #[test]
    fn a_cut_owes_every_promise_made_before_the_barrier_that_ends_its_epoch() {
        let log = vec![w(), Event::Barrier, w(), w(), Event::Mark("a".into()), w(), Event::Barrier, Event::Mark("b".into())];
        let ep = epochs(&log);
        assert_eq!(ep.len(), 3);
        assert_eq!(ep[0].writes, vec![0]);
        assert!(ep[0].promised.is_empty());
        assert_eq!(ep[1].writes, vec![2, 3, 5]);
        assert_eq!(ep[1].promised.iter().collect::<Vec<_>>(), vec!["a"], "a returned inside epoch 1: its cut may come after it");
        assert!(ep[2].writes.is_empty() && ep[2].promised.contains("b"));
    }

    #[test]
    fn states_cover_every_flush_then_distinct_partial_epochs_within_budget() {
        let mut log = vec![];
        for _ in 0..3 {
            log.extend((0..6).map(|_| w()));
            log.push(Event::Barrier);
        }
        let ep = epochs(&log);
        let s = choose(&ep, 40, 7);
        assert_eq!(s.len(), 40);
        assert_eq!(s.iter().filter(|s| s.keep.is_empty()).count(), 4, "the image at every flush, and at the start");
        for st in &s {
            assert!(st.keep.is_empty() || st.keep.len() < ep[st.epoch].writes.len(), "a state keeping its whole epoch is the next flush: {st:?}");
        }
        let distinct: HashSet<_> = s.iter().map(|s| (s.epoch, s.keep.clone())).collect();
        assert_eq!(distinct.len(), s.len());
        assert!(s.windows(2).all(|p| p[0].epoch <= p[1].epoch));
        assert_eq!(choose(&ep, 40, 7), s, "the same seed chooses the same states");
        assert_eq!(choose(&ep, 2, 7).len(), 2);
    }
}
