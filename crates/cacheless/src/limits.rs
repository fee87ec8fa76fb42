//! The bounds every front end holds its numeric arguments to, in one place, so that the
//! command line (a usage error) and Python (`ValueError`) refuse the same values, and refuse
//! them before anything is allocated: a request size, a queue depth, a thread count or a frame
//! size past these is a mistake, never a reason to abort, panic or meet the OOM killer. A
//! memory budget beyond the machine's memory is clamped to it (a budget is a ceiling, and no
//! job can use more than there is).
//!
//! Each check takes the flag's name as the front end spells it (`--queue-depth`,
//! `queue_depth=`) and returns the value to use or the message to show.

/// The largest request size: a read or write system call moves at most 2 GiB at once.
pub const MAX_BLOCK_SIZE: usize = crate::plan::MAX_BLOCK_SIZE;
/// The most requests kept in flight per file (io_uring rings hold at most 32768 entries;
/// beyond a few hundred no device goes faster).
pub const MAX_QUEUE_DEPTH: usize = 4096;
/// The most threads a job starts for one role (workers, readers, compressors).
pub const MAX_THREADS: usize = 1024;
/// The largest independent compressed frame: a frame is held whole in memory while it is
/// compressed, once per compression thread.
pub const MAX_FRAME_SIZE: usize = 1 << 30;
/// The smallest frame accepted: below it the frames' headers and the lost context cost more
/// than the parallelism gains.
pub const MIN_FRAME_SIZE: usize = 64 << 10;

fn range(flag: &str, v: u64, lo: u64, hi: u64, unit: &str) -> Result<usize, String> {
    if v < lo || v > hi {
        return Err(format!("{flag} {v}{unit}: out of range ({lo}{unit} to {hi}{unit})"));
    }
    usize::try_from(v).map_err(|_| format!("{flag} {v}{unit}: out of range"))
}

/// A request size: 1 byte to [`MAX_BLOCK_SIZE`] (rounded up to the alignment later).
pub fn block_size(flag: &str, v: u64) -> Result<usize, String> {
    range(flag, v, 1, MAX_BLOCK_SIZE as u64, " B")
}

/// Requests in flight per file: 0 (writes go through one at a time) to [`MAX_QUEUE_DEPTH`].
pub fn queue_depth(flag: &str, v: u64) -> Result<usize, String> {
    range(flag, v, 0, MAX_QUEUE_DEPTH as u64, "")
}

/// A thread count: 1 to [`MAX_THREADS`].
pub fn threads(flag: &str, v: u64) -> Result<usize, String> {
    range(flag, v, 1, MAX_THREADS as u64, "")
}

/// A frame size: [`MIN_FRAME_SIZE`] to [`MAX_FRAME_SIZE`].
pub fn frame_size(flag: &str, v: u64) -> Result<usize, String> {
    range(flag, v, MIN_FRAME_SIZE as u64, MAX_FRAME_SIZE as u64, " B")
}

/// A memory budget: at least 1 byte, and at most the machine's memory (more is clamped to it).
pub fn memory(flag: &str, v: u64) -> Result<usize, String> {
    if v == 0 {
        return Err(format!("{flag} 0: a budget must be at least 1 byte"));
    }
    let total = physical_memory().unwrap_or(u64::MAX);
    Ok(usize::try_from(v.min(total)).unwrap_or(usize::MAX))
}

/// A bandwidth limit in bytes per second: 0 is no limit (as rsync's `--bwlimit=0`), otherwise
/// at least 1 byte per second. `None`: no limit.
pub fn rate(flag: &str, v: f64) -> Result<Option<u64>, String> {
    if v == 0.0 {
        return Ok(None);
    }
    if !v.is_finite() || v < 1.0 {
        return Err(format!("{flag} {v}: a limit must be at least 1 byte per second (0 for none)"));
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // Finite and at least 1.
    Ok(Some(v.min(u64::MAX as f64) as u64))
}

/// A bandwidth limit as written (`200M`, `1k`, `0`), checked as [`rate`] checks it: a value
/// that rounds down to 0 bytes but is not 0 (`0.5`) is below 1 byte per second, not "no limit".
pub fn parse_rate(flag: &str, s: &str) -> Result<Option<u64>, String> {
    let v = crate::units::parse_size(s)?;
    if v == 0 && s.chars().any(|c| ('1'..='9').contains(&c)) {
        return Err(format!("{flag} {s}: a limit must be at least 1 byte per second (0 for none)"));
    }
    #[allow(clippy::cast_precision_loss)] // Checked for 0 and 1 only.
    rate(flag, v as f64)
}

/// The machine's memory (MemTotal in /proc/meminfo), where /proc says.
pub fn physical_memory() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = s.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_past_the_bounds_are_refused_and_named() {
        assert_eq!(block_size("--block-size", 1 << 20), Ok(1 << 20));
        let e = block_size("--block-size", 100 << 30).unwrap_err();
        assert!(e.starts_with("--block-size 107374182400 B: out of range"), "{e}");
        assert!(block_size("--block-size", 0).is_err());
        assert_eq!(queue_depth("q", 0), Ok(0));
        assert!(queue_depth("q", 1_000_000).is_err());
        assert!(threads("t", 0).is_err() && threads("t", 40_000).is_err());
        assert_eq!(threads("t", 8), Ok(8));
        assert!(frame_size("f", 100 << 30).is_err() && frame_size("f", 1000).is_err());
        assert_eq!(frame_size("f", 32 << 20), Ok(32 << 20));
        let total = physical_memory().expect("/proc/meminfo");
        assert_eq!(memory("m", 100 << 40), Ok(usize::try_from(total).unwrap()));
        assert_eq!(memory("m", 1 << 20), Ok(1 << 20));
        assert!(memory("m", 0).is_err());
        assert_eq!(rate("r", 0.0), Ok(None));
        assert_eq!(rate("r", 1000.0), Ok(Some(1000)));
        assert!(rate("r", 0.5).is_err() && rate("r", f64::NAN).is_err());
        assert_eq!(parse_rate("r", "0"), Ok(None));
        assert_eq!(parse_rate("r", "1k"), Ok(Some(1024)));
        assert!(parse_rate("r", "0.5").is_err());
    }
}
