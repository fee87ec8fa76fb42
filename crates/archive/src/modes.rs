//! Files counted by the I/O mode the engine gave them: how `extract` wrote its files and how
//! `pack` read its inputs.

use std::sync::atomic::{AtomicU64, Ordering};

use cacheless::Mode;
use serde::Serialize;

/// Files per mode (read or written, as the report that holds it says).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ModeCounts {
    /// With O_DIRECT.
    pub direct: u64,
    /// With RWF_DONTCACHE.
    pub dontcache: u64,
    /// Buffered, pages dropped behind.
    pub writebehind: u64,
    /// Plain buffered (a file read already cached is left cached).
    pub buffered: u64,
}

/// Counts files by mode from any number of threads; [`ModeCounter::counts`] takes a snapshot.
#[derive(Debug, Default)]
pub(crate) struct ModeCounter([AtomicU64; 4]);

impl ModeCounter {
    /// Counts one file with mode `m` (`Auto`, never the outcome of a decision, counts as
    /// buffered).
    pub(crate) fn add(&self, m: Mode) {
        let i = match m {
            Mode::Direct => 0,
            Mode::DontCache => 1,
            Mode::DropBehind => 2,
            Mode::Buffered | Mode::Auto => 3,
        };
        self.0[i].fetch_add(1, Ordering::Relaxed);
    }

    /// The counts so far.
    pub(crate) fn counts(&self) -> ModeCounts {
        let m = |i: usize| self.0[i].load(Ordering::Relaxed);
        ModeCounts { direct: m(0), dontcache: m(1), writebehind: m(2), buffered: m(3) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_has_its_own_count() {
        let c = ModeCounter::default();
        for m in [Mode::Direct, Mode::DontCache, Mode::DontCache, Mode::DropBehind, Mode::Buffered, Mode::Auto] {
            c.add(m);
        }
        let n = c.counts();
        assert_eq!((n.direct, n.dontcache, n.writebehind, n.buffered), (1, 2, 1, 2));
    }
}
