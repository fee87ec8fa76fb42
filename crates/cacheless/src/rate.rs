//! A bandwidth limit shared by every thread of a job: a token bucket refilled continuously at
//! the rate, holding at most a tenth of a second's worth, so that any one-second window moves
//! at most 1.1 times the rate and the flow stays smooth within the second.
//!
//! Written here rather than taken from a crate: the few rate-limiting crates are async or
//! count requests, not bytes from many blocking threads; this is twenty lines.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The longest one sleep of [`RateLimit::take`] lasts before it looks at the cancel flag.
pub const SLICE: Duration = Duration::from_millis(50);

/// A byte-rate limit. [`RateLimit::take`] blocks the calling thread until the bytes may move.
#[derive(Debug)]
pub struct RateLimit {
    rate: u64,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Bytes that may move now (negative: owed, the caller sleeps it off).
    tokens: f64,
    at: Instant,
}

impl RateLimit {
    /// A limit of `bytes_per_sec` (at least 1).
    pub fn new(bytes_per_sec: u64) -> RateLimit {
        RateLimit { rate: bytes_per_sec.max(1), state: Mutex::new(State { tokens: 0.0, at: Instant::now() }) }
    }

    /// The limit in bytes per second.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// The largest burst the bucket holds: a tenth of a second's worth.
    fn burst(&self) -> f64 {
        self.rate as f64 / 10.0
    }

    /// Accounts for `n` bytes and returns how long they take at the rate beyond what the
    /// bucket holds (zero when it holds them): the wait before they may move, for a caller that
    /// waits its own way (an async task). Callers share the bucket: together they move at most
    /// the rate.
    pub fn reserve(&self, n: u64) -> Duration {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(s.at).as_secs_f64();
        s.at = now;
        s.tokens = (s.tokens + elapsed * self.rate as f64).min(self.burst()) - n as f64;
        if s.tokens >= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64((-s.tokens / self.rate as f64).min(1e9))
    }

    /// Accounts for `n` bytes, sleeping as long as they take at the rate beyond what the
    /// bucket holds (see [`RateLimit::reserve`]). The sleep is cut into slices of at most
    /// `SLICE` and ends early once `cancelled` says so (a job's cancel flag), so that a slow
    /// limit (`1k` of a 4 MiB chunk is over an hour) never holds up Ctrl-C.
    pub fn take(&self, n: u64, cancelled: impl Fn() -> bool) {
        let wait = self.reserve(n);
        if wait.is_zero() {
            return;
        }
        let until = Instant::now() + wait;
        loop {
            let now = Instant::now();
            if now >= until || cancelled() {
                return;
            }
            std::thread::sleep((until - now).min(SLICE));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_beyond_the_burst_are_owed() {
        let r = RateLimit::new(1000);
        r.take(0, || false);
        let s = r.state.lock().unwrap();
        assert!(s.tokens <= r.burst());
        drop(s);
        // 10 bytes fit in a burst of 100 once refilled; the bucket never exceeds the burst.
        std::thread::sleep(Duration::from_millis(200));
        r.take(10, || false);
        let s = r.state.lock().unwrap();
        assert!(s.tokens <= r.burst() - 10.0 + 1e-9, "{}", s.tokens);
    }

    /// A sleep of hours at a slow limit ends within a slice of the cancel.
    #[test]
    fn a_cancel_ends_the_sleep() {
        let r = std::sync::Arc::new(RateLimit::new(1000));
        let cancel = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (r2, c2) = (r.clone(), cancel.clone());
        let t0 = Instant::now();
        let sleeper = std::thread::spawn(move || r2.take(1 << 30, || c2.load(std::sync::atomic::Ordering::Relaxed)));
        std::thread::sleep(Duration::from_millis(100));
        cancel.store(true, std::sync::atomic::Ordering::Relaxed);
        sleeper.join().unwrap();
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    }
}
