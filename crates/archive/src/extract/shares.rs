//! How an extraction divides its memory budget, in one place.
//!
//! Four kinds of holder draw on the one budget of [`ExtractOptions::io`]: the archive's
//! read-ahead, the frames of a zstd archive decoded in parallel, the queue of a large file's
//! `Writer`, and the leases of small files' data and of streamed chunks. Each is held to a
//! quarter of the budget (the read-ahead and the parallel decoding to an eighth each, a quarter
//! together), so that whatever the budget is, one holder can always go on once the small files
//! in flight are written: nothing waits on memory only a waiting holder could free. The
//! quarters are ceilings, not reservations; what one holder leaves the others may use.

use cacheless::Lease;
use cacheless::{Budget, IoOptions, LeaseRequest, ReadOptions, WriteOptions};

use super::options::ExtractOptions;

/// The budget of one extraction and its division.
pub(super) struct Shares {
    budget: Budget,
    /// The read-ahead's ceiling (a quarter, or an eighth when frames are decoded in parallel).
    read: usize,
    /// The parallel decoding's ceiling (an eighth when frames are decoded in parallel).
    decode: usize,
    /// Every other holder's ceiling (a quarter).
    quarter: usize,
}

impl Shares {
    pub(super) fn new(opts: &ExtractOptions) -> Shares {
        let limit = opts.io.budget.limit();
        let (read, decode) = if opts.decompress_threads > 1 { (limit / 8, limit / 8) } else { (limit / 4, 0) };
        Shares { budget: opts.io.budget.clone(), read, decode: decode.max(1), quarter: limit / 4 }
    }

    /// How the archive file is read: the job's settings, its read-ahead within its share.
    pub(super) fn archive_read(&self, io: &IoOptions) -> ReadOptions {
        let mut ro = ReadOptions::from(io.clone());
        ro.io.queue_depth = depth_within(self.read, ro.io.block_size, ro.io.queue_depth, ro.extra_buffers);
        ro
    }

    /// Bytes the frames of a zstd archive decoded in parallel may hold (not leased: they must
    /// never wait on the file writers' leases, which wait on the parser, which waits on them).
    pub(super) fn decode_bytes(&self) -> usize {
        self.decode
    }

    /// How a large file is written: the job's settings, its queue of writes within a quarter.
    pub(super) fn large_file(&self, io: &IoOptions) -> WriteOptions {
        let mut wo = WriteOptions::from(io.clone());
        wo.io.queue_depth = depth_within(self.quarter, wo.io.block_size, wo.io.queue_depth, 1);
        wo
    }

    /// Leases `n` bytes of data in flight to the workers, at most a quarter of the budget.
    pub(super) fn lease(&self, n: u64) -> Lease {
        self.budget.lease(LeaseRequest::one(cacheless::conv::fit(n, self.quarter.max(1)).max(1)))
    }
}

/// Caps a queue depth so that `depth` (+ `extra`) buffers of `block` bytes stay within `share`
/// bytes (one request at least; a depth of 0, write-through, stays 0).
fn depth_within(share: usize, block: usize, depth: usize, extra: usize) -> usize {
    if depth == 0 {
        return 0;
    }
    let fit = (share / block.max(1)).max(1 + extra);
    depth.min(fit - extra).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depths_stay_within_their_share_and_at_least_one() {
        assert_eq!(depth_within(64 << 20, 4 << 20, 8, 0), 8);
        assert_eq!(depth_within(16 << 20, 4 << 20, 8, 0), 4);
        assert_eq!(depth_within(16 << 20, 4 << 20, 8, 2), 2);
        assert_eq!(depth_within(1 << 20, 4 << 20, 8, 2), 1);
        assert_eq!(depth_within(1 << 20, 4 << 20, 0, 0), 0);
    }

    #[test]
    fn parallel_decoding_takes_half_the_read_ahead_quarter() {
        let mut o = ExtractOptions::new("/nonexistent");
        o.io.budget = Budget::new(256 << 20);
        o.decompress_threads = 1;
        let one = Shares::new(&o);
        assert_eq!((one.read, one.quarter), (64 << 20, 64 << 20));
        o.decompress_threads = 4;
        let par = Shares::new(&o);
        assert_eq!((par.read, par.decode_bytes(), par.quarter), (32 << 20, 32 << 20, 64 << 20));
        let ro = par.archive_read(&o.io);
        assert!((ro.io.queue_depth + ro.extra_buffers) * ro.io.block_size <= 32 << 20, "{ro:?}");
    }
}
