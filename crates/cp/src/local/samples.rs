//! The bytes done once a second of a rate-limited copy, for its report: the limit is checked
//! against the job's own counters.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cacheless::Progress;

/// Samples the bytes done once a second from the first byte on, on a thread of its own.
pub(super) struct Sampler {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<Vec<(f64, u64)>>>,
}

impl Sampler {
    pub fn start(progress: &Arc<Progress>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (progress.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            // Seconds count from the first byte moved, not from the start of the walk.
            while p.bytes() == 0 && !s.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(1));
            }
            let t0 = Instant::now();
            let mut v = vec![(0.0, p.bytes())];
            let mut next = Duration::from_secs(1);
            while !s.load(Ordering::Relaxed) {
                let now = t0.elapsed();
                if now >= next {
                    v.push((now.as_secs_f64(), p.bytes()));
                    next += Duration::from_secs(1);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            v.push((t0.elapsed().as_secs_f64(), p.bytes()));
            v
        });
        Sampler { stop, handle: Some(handle) }
    }

    /// Stops sampling and returns the samples: (seconds from the first byte, bytes done).
    pub fn finish(mut self) -> Vec<(f64, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().and_then(|h| h.join().ok()).unwrap_or_default()
    }
}
