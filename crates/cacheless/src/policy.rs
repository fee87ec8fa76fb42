//! The I/O modes and the automatic choice between them, with the reason for each choice.

use std::fmt;

use serde::Serialize;

use crate::caps::FsCaps;
use crate::error::Hint;
pub use crate::mode::{Mode, Taken};

/// A mode chosen for one file, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// The mode taken.
    pub mode: Taken,
    /// Why this mode: the rule that fired, with the figures it used.
    pub reason: Reason,
}

/// Why a mode was taken: the rule that fired and the figures it used, kept as values (a file's
/// reason costs no formatting unless it is shown). `Display` gives the words the reports show,
/// and it serializes as those words.
#[derive(Debug, Clone, PartialEq)]
pub enum Reason {
    /// The caller asked for the mode.
    Requested,
    /// The caller asked for O_DIRECT writes where they go through the page cache all the same
    /// ([`FsCaps::direct_write_cached`] says why).
    RequestedThough {
        /// What the probe write showed.
        why: String,
    },
    /// Mostly resident already: read buffered.
    Resident {
        /// Percent of the file in the page cache.
        percent: f64,
    },
    /// A file smaller than `TINY_READ`: buffered, then its pages dropped.
    SmallRead {
        /// Its size.
        len: u64,
    },
    /// A file smaller than `SMALL_WRITE`: one uncached buffered write.
    SmallWrite {
        /// Its size.
        len: u64,
    },
    /// A file smaller than `SMALL_WRITE` where RWF_DONTCACHE is missing: write-behind.
    SmallWriteNoDontcache {
        /// Its size.
        len: u64,
        /// Why RWF_DONTCACHE is missing.
        dontcache: String,
    },
    /// O_DIRECT writes go through the page cache here: RWF_DONTCACHE instead.
    DirectWritesCached {
        /// What the probe write showed.
        why: String,
    },
    /// O_DIRECT writes go through the page cache here and RWF_DONTCACHE is missing: write-behind.
    DirectWritesCachedNoDontcache {
        /// What the probe write showed.
        why: String,
        /// Why RWF_DONTCACHE is missing.
        dontcache: String,
    },
    /// A large read or write: O_DIRECT with the filesystem's alignment.
    Large {
        /// `read` or `write`.
        what: &'static str,
        /// Memory alignment.
        mem: u32,
        /// Offset alignment.
        offset: u32,
    },
    /// O_DIRECT is missing: RWF_DONTCACHE.
    NoDirect {
        /// Why O_DIRECT is missing.
        direct: String,
    },
    /// O_DIRECT and RWF_DONTCACHE are missing: buffered with drop-behind (reads) or
    /// write-behind (writes).
    NoDirectNoDontcache {
        /// `read` or `write`.
        what: &'static str,
        /// Why O_DIRECT is missing.
        direct: String,
        /// Why RWF_DONTCACHE is missing.
        dontcache: String,
    },
    /// A small file of a file creator that writes small files back together.
    Batched {
        /// Its size.
        size: u64,
        /// MiB written back per syncfs.
        window_mib: u64,
        /// Files written back per syncfs, at most.
        files: usize,
    },
    /// A write refused RWF_DONTCACHE where the probe could not tell: write-behind.
    DontcacheRefusedByWrite {
        /// The errno, in words.
        errno: String,
    },
    /// The destination is no regular file: plain writes in order.
    NotRegularWrite,
    /// A file whose size says nothing of what it holds (`what` it is): plain reads to its end.
    PlainReads {
        /// What the file is.
        what: String,
    },
    /// A copy verified after the syncfs of its batch.
    ReadBackAfterSync,
    /// A source read as a stream.
    Streamed,
    /// A copy that shares the source's extents (FICLONE).
    Reflinked,
    /// A copy of attributes only.
    AttributesOnly,
    /// Bytes fetched from a remote object: how (the requests, the version they were pinned to).
    Fetched {
        /// The requests, in words.
        how: String,
    },
}

impl Eq for Reason {}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Requested => f.write_str("requested"),
            Reason::RequestedThough { why } => write!(f, "requested, though O_DIRECT writes here go through the page cache ({why})"),
            Reason::Resident { percent } => write!(f, "{percent:.0}% already resident: buffered reads are the fast path and keep it cached"),
            Reason::SmallRead { len } => write!(f, "small file ({len} B < {TINY_READ} B): buffered, then drop the pages this read brought in"),
            Reason::SmallWrite { len } => write!(f, "small file ({len} B < {SMALL_WRITE} B): uncached buffered write"),
            Reason::SmallWriteNoDontcache { len, dontcache } => {
                write!(f, "small file ({len} B < {SMALL_WRITE} B) and no RWF_DONTCACHE ({dontcache}): write-behind")
            }
            Reason::DirectWritesCached { why } => write!(f, "O_DIRECT writes go through the page cache here ({why}): RWF_DONTCACHE"),
            Reason::DirectWritesCachedNoDontcache { why, dontcache } => {
                write!(f, "O_DIRECT writes go through the page cache here ({why}) and RWF_DONTCACHE unavailable ({dontcache}): write-behind")
            }
            Reason::Large { what, mem, offset } => write!(f, "large {what}: O_DIRECT (memory alignment {mem}, offset alignment {offset})"),
            Reason::NoDirect { direct } => write!(f, "O_DIRECT unavailable ({direct}): RWF_DONTCACHE"),
            Reason::NoDirectNoDontcache { what, direct, dontcache } => write!(
                f,
                "O_DIRECT unavailable ({direct}) and RWF_DONTCACHE unavailable ({dontcache}): buffered with {}",
                if *what == "read" { "drop-behind" } else { "write-behind" }
            ),
            Reason::Batched { size, window_mib, files } => write!(
                f,
                "small file ({size} B < {SMALL_WRITE} B): written back with the others (a syncfs per {window_mib} MiB or {files} files), then dropped"
            ),
            Reason::DontcacheRefusedByWrite { errno } => write!(f, "RWF_DONTCACHE refused by a write ({errno}): write-behind"),
            Reason::NotRegularWrite => f.write_str("not a regular file: written in order with plain writes"),
            Reason::PlainReads { what } => write!(f, "{what}: read to its end with plain reads, nothing to keep out of the cache"),
            Reason::ReadBackAfterSync => {
                f.write_str("read back after the syncfs of its batch: its pages dropped, read ahead with the rest of the batch, then dropped again")
            }
            Reason::Streamed => f.write_str("not a regular file, or on a filesystem that makes its sizes up (proc, sysfs): read to its end as a stream"),
            Reason::Reflinked => f.write_str("FICLONE: extents shared with the source, no data written"),
            Reason::AttributesOnly => f.write_str("--attributes-only: no data read"),
            Reason::Fetched { how } => f.write_str(how),
        }
    }
}

impl Serialize for Reason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A file at least this fraction resident is read buffered: the data is already in memory, and
/// reading it with O_DIRECT would be slower and (for partially cached files) could not keep
/// it warm. Half: below it, most of the bytes still come from the device.
pub const WARM_FRACTION: f64 = 0.5;

/// Reads of files smaller than this are buffered, then the pages they brought in are dropped.
/// Measured with `bench/thresholds.sh` (docs/BENCHMARKS.md, "Auto-mode thresholds"): cold
/// reads of 2,000 files, buffered+drop beat O_DIRECT at 16 KiB (0.42 s vs 0.48 s) and lost by
/// 2x at 64 KiB; the threshold sits between the two.
pub const TINY_READ: u64 = 32 * 1024;

/// Writes of files known to be smaller than this use DONTCACHE (else write-behind) instead of
/// O_DIRECT. The same measurement was mixed for writes (direct ahead at 16 and 64 KiB with
/// sizes that are whole blocks, DONTCACHE ahead at 256 KiB, even at 1 MiB); real small files
/// are mostly an unaligned tail, which a direct writer must write with O_DIRECT cleared and
/// then evict, three extra calls that one uncached write does not need.
pub const SMALL_WRITE: u64 = 1024 * 1024;

fn unsupported(mode: Mode, caps: &FsCaps) -> Option<String> {
    match mode {
        Mode::Direct => caps.direct.as_ref().err().map(|u| u.reason.clone()),
        Mode::DontCache => caps.dontcache.as_ref().err().map(|u| u.reason.clone()),
        _ => None,
    }
}

/// Why a forced mode cannot be honoured, and what to ask for instead.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// The mode that was asked for.
    pub mode: Mode,
    /// What the probe found.
    pub reason: String,
    /// The modes that work here instead, best first.
    pub hint: Hint,
}

/// The modes to try instead of `mode` on a filesystem with `caps`, best first: auto, then the
/// nearest mode that works there (uncached buffered for direct, write-behind for uncached).
pub fn alternatives(mode: Mode, caps: &FsCaps) -> Hint {
    let next = match mode {
        Mode::Direct if caps.dontcache.is_ok() => Some(Mode::DontCache),
        Mode::Direct | Mode::DontCache => Some(Mode::DropBehind),
        _ => None,
    };
    Hint::Modes(std::iter::once(Mode::Auto).chain(next).collect())
}

/// Whether `mode` can be forced on a filesystem with `caps`: direct and dontcache only where
/// the probe found them; the others everywhere.
pub fn forced(mode: Mode, caps: &FsCaps) -> Result<(), Refusal> {
    match unsupported(mode, caps) {
        Some(reason) => Err(Refusal { mode, reason, hint: alternatives(mode, caps) }),
        None => Ok(()),
    }
}

/// Chooses how to read a file of `len` bytes with `cached` bytes already resident.
///
/// A forced mode the filesystem cannot honour is refused, never silently downgraded.
pub fn decide_read(requested: Mode, caps: &FsCaps, len: u64, cached: Option<u64>) -> Result<Decision, Refusal> {
    if let Some(taken) = requested.forced() {
        forced(requested, caps)?;
        return Ok(Decision { mode: taken, reason: Reason::Requested });
    }
    if let (Some(c), true) = (cached, len > 0) {
        let frac = c as f64 / len as f64;
        if frac >= WARM_FRACTION {
            return Ok(Decision { mode: Taken::Buffered, reason: Reason::Resident { percent: frac * 100.0 } });
        }
    }
    if len < TINY_READ {
        return Ok(Decision { mode: Taken::DropBehind, reason: Reason::SmallRead { len } });
    }
    fallback_chain(caps, "read")
}

/// Chooses how to write a file; `size_hint` is the final size when known.
///
/// Where O_DIRECT writes go through the page cache all the same ([`FsCaps::direct_write_cached`]),
/// auto takes the next mode, and a forced direct write is done as asked, its reason saying so.
pub fn decide_write(requested: Mode, caps: &FsCaps, size_hint: Option<u64>) -> Result<Decision, Refusal> {
    if let Some(taken) = requested.forced() {
        forced(requested, caps)?;
        let reason = match (&caps.direct_write_cached, taken) {
            (Some(why), Taken::Direct) => Reason::RequestedThough { why: why.clone() },
            _ => Reason::Requested,
        };
        return Ok(Decision { mode: taken, reason });
    }
    match size_hint {
        Some(n) if n < SMALL_WRITE => {
            if caps.dontcache.is_ok() {
                Ok(Decision { mode: Taken::DontCache, reason: Reason::SmallWrite { len: n } })
            } else {
                Ok(Decision {
                    mode: Taken::DropBehind,
                    reason: Reason::SmallWriteNoDontcache { len: n, dontcache: caps.dontcache.as_ref().err().map(|u| u.reason.clone()).unwrap_or_default() },
                })
            }
        }
        _ => match (&caps.direct, &caps.direct_write_cached, &caps.dontcache) {
            (Ok(_), Some(why), Ok(())) => Ok(Decision { mode: Taken::DontCache, reason: Reason::DirectWritesCached { why: why.clone() } }),
            (Ok(_), Some(why), Err(u)) => {
                Ok(Decision { mode: Taken::DropBehind, reason: Reason::DirectWritesCachedNoDontcache { why: why.clone(), dontcache: u.reason.clone() } })
            }
            _ => fallback_chain(caps, "write"),
        },
    }
}

fn fallback_chain(caps: &FsCaps, what: &'static str) -> Result<Decision, Refusal> {
    match (&caps.direct, &caps.dontcache) {
        (Ok(a), _) => Ok(Decision { mode: Taken::Direct, reason: Reason::Large { what, mem: a.mem, offset: a.offset } }),
        (Err(d), Ok(())) => Ok(Decision { mode: Taken::DontCache, reason: Reason::NoDirect { direct: d.reason.clone() } }),
        (Err(d), Err(u)) => {
            Ok(Decision { mode: Taken::DropBehind, reason: Reason::NoDirectNoDontcache { what, direct: d.reason.clone(), dontcache: u.reason.clone() } })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::{AlignSource, DioAlign, Unavailable};

    fn caps(dontcache: bool, cached: Option<&str>) -> FsCaps {
        let no = Unavailable { reason: "preadv2(RWF_DONTCACHE): EOPNOTSUPP".into(), errno: Some(crate::sys::consts::EOPNOTSUPP) };
        FsCaps {
            dev: 1,
            fs_type: "btrfs".into(),
            direct: Ok(DioAlign { mem: 4096, offset: 4096, source: AlignSource::Default }),
            dontcache: if dontcache { Ok(()) } else { Err(no) },
            direct_write_cached: cached.map(String::from),
        }
    }

    #[test]
    fn direct_writes_that_go_through_the_cache_make_auto_take_the_next_mode_and_forced_direct_say_so() {
        let why = "an O_DIRECT write left 1 of 1 pages in the page cache";
        let wb = decide_write(Mode::Auto, &caps(false, Some(why)), None).unwrap();
        assert_eq!(wb.mode, Taken::DropBehind);
        assert!(wb.reason.to_string().contains(why) && wb.reason.to_string().contains("EOPNOTSUPP"), "{}", wb.reason);
        assert_eq!(decide_write(Mode::Auto, &caps(true, Some(why)), Some(1 << 30)).unwrap().mode, Taken::DontCache);
        let forced = decide_write(Mode::Direct, &caps(false, Some(why)), None).unwrap();
        assert_eq!(forced.mode, Taken::Direct, "a forced mode is honoured");
        assert_eq!(forced.reason, Reason::RequestedThough { why: why.into() });
        assert!(forced.reason.to_string().starts_with("requested, though") && forced.reason.to_string().contains(why), "{}", forced.reason);
        // Reads are unaffected, and without the finding large writes stay direct.
        assert_eq!(decide_read(Mode::Auto, &caps(false, Some(why)), 1 << 30, Some(0)).unwrap().mode, Taken::Direct);
        assert_eq!(decide_write(Mode::Auto, &caps(false, None), None).unwrap().mode, Taken::Direct);
        assert_eq!(decide_write(Mode::Direct, &caps(false, None), None).unwrap().reason, Reason::Requested);
        assert_eq!(Reason::Requested.to_string(), "requested");
    }
}
