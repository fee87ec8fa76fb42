//! Whether the user asked to stop: the front ends register the flags their signals set (the
//! command line's SIGINT and SIGTERM, Python's KeyboardInterrupt) with [`watch`], and the calls
//! that can wait for another process for ever (the open of a FIFO whose other end never comes,
//! a read of a pipe or a terminal, a write to a full pipe; see `sys::read` and
//! `sys::open_interruptible`) wait in slices and end with ECANCELED once one is set (not EINTR,
//! which readers retry). A job's own loops stop on its cancel flag between requests; this is
//! for the one call that never returns.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

fn flags() -> &'static Mutex<Vec<Weak<AtomicBool>>> {
    static F: OnceLock<Mutex<Vec<Weak<AtomicBool>>>> = OnceLock::new();
    F.get_or_init(Mutex::default)
}

/// A registration made by [`watch`]: the flag counts until this is dropped.
#[derive(Debug)]
pub struct Watch(Weak<AtomicBool>);

impl Drop for Watch {
    fn drop(&mut self) {
        flags().lock().unwrap_or_else(|e| e.into_inner()).retain(|w| !w.ptr_eq(&self.0) && w.strong_count() > 0);
    }
}

/// Makes a blocking call end (ECANCELED) once `flag` is set, for as long as the returned
/// registration lives.
pub fn watch(flag: &Arc<AtomicBool>) -> Watch {
    let w = Arc::downgrade(flag);
    flags().lock().unwrap_or_else(|e| e.into_inner()).push(w.clone());
    Watch(w)
}

/// Whether a registered flag is set.
pub fn requested() -> bool {
    flags().lock().unwrap_or_else(|e| e.into_inner()).iter().any(|w| w.upgrade().is_some_and(|f| f.load(Ordering::Relaxed)))
}

/// The error a call that waited ends with once the user asked to stop: ECANCELED, not EINTR,
/// which readers retry.
pub fn cancelled() -> std::io::Error {
    std::io::Error::from_raw_os_error(libc::ECANCELED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_counts_while_it_is_watched() {
        let f = Arc::new(AtomicBool::new(false));
        let w = watch(&f);
        assert!(!requested());
        f.store(true, Ordering::Relaxed);
        assert!(requested());
        drop(w);
        assert!(!requested());
    }
}
