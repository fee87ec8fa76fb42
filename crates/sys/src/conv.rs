//! Conversions between file offsets and counts (`u64`) and memory lengths (`usize`), in one
//! place instead of `as` casts that would truncate silently where `usize` is narrower.

/// How much of `n` bytes fits in `cap`: the smaller of the two.
pub fn fit(n: u64, cap: usize) -> usize {
    usize::try_from(n).map_or(cap, |n| n.min(cap))
}

/// `n` as a memory length, saturating at `usize::MAX`: no buffer is that long, so a length or
/// index derived from an out-of-range `n` fails its bounds check or allocation instead of
/// wrapping to a small number.
pub fn usize_of(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_is_the_smaller_and_usize_of_saturates() {
        assert_eq!(fit(10, 4), 4);
        assert_eq!(fit(3, 4), 3);
        assert_eq!(fit(u64::MAX, 7), 7);
        assert_eq!(usize_of(12), 12);
        assert_eq!(usize_of(u64::MAX), usize::try_from(u64::MAX).unwrap_or(usize::MAX));
    }
}
