//! Files counted by the I/O mode the engine gave them: how `extract` wrote its files and how
//! `pack` read its inputs.

use std::sync::atomic::{AtomicU64, Ordering};

use cacheless::Taken;
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
    /// Counts one file with mode `m` (a file that moved no data counts as buffered).
    pub(crate) fn add(&self, m: Taken) {
        let i = match m {
            Taken::Direct => 0,
            Taken::DontCache => 1,
            Taken::DropBehind => 2,
            Taken::Buffered | Taken::NoData | Taken::Remote => 3,
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
        for m in [Taken::Direct, Taken::DontCache, Taken::DontCache, Taken::DropBehind, Taken::Buffered, Taken::NoData] {
            c.add(m);
        }
        let n = c.counts();
        assert_eq!((n.direct, n.dontcache, n.writebehind, n.buffered), (1, 2, 1, 2));
    }
}
