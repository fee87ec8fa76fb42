//! Terminal output shared by the commands: progress bars, errors, sizes, CPU time.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cacheless::Progress;
use indicatif::{ProgressBar, ProgressStyle};

/// True when an error chain ends in EPIPE: the reader of our output went away, which is
/// success for a command like cat.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().map(|io| io.kind() == std::io::ErrorKind::BrokenPipe).unwrap_or(false))
        || e.chain().any(|c| c.downcast_ref::<cacheless::Error>().map(|ce| ce.errno() == Some(libc::EPIPE)).unwrap_or(false))
}

/// Feeds standard input to `f` in 1 MiB pieces until end of input or the first error.
pub fn each_stdin_chunk(mut f: impl FnMut(&[u8]) -> std::io::Result<()>) -> std::io::Result<()> {
    use std::io::Read;
    let mut buf = vec![0u8; 1 << 20];
    let mut stdin = std::io::stdin().lock();
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => f(&buf[..n])?,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Prints a per-item error the way every command does, and counts it.
pub fn item_error(progress: &Progress, e: &dyn std::fmt::Display) {
    progress.error();
    eprintln!("cacheless: {e}");
}

/// Human-readable size (binary units).
pub fn size(n: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

/// Ctrl-C and SIGTERM set the progress's cancel flag, so jobs stop between requests and remove
/// their temporary files.
pub fn cancel_on_signals(progress: &Progress) {
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(sig, progress.cancel_flag());
    }
}

/// A progress bar drawn from the counters, on a terminal only.
pub struct Bar {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Bar {
    /// Whether a bar is drawn: stderr is a terminal and the output is not JSON.
    pub fn wanted(json: bool) -> bool {
        !json && std::io::stderr().is_terminal()
    }

    /// Starts drawing if [`Bar::wanted`].
    pub fn start(progress: &Arc<Progress>, json: bool) -> Bar {
        let stop = Arc::new(AtomicBool::new(false));
        if !Bar::wanted(json) {
            return Bar { stop, handle: None };
        }
        let p = progress.clone();
        let s = stop.clone();
        let handle = std::thread::spawn(move || {
            let pb = ProgressBar::new(p.total_bytes().max(1));
            pb.set_style(
                ProgressStyle::with_template("{bar:30} {bytes}/{total_bytes} {bytes_per_sec} ETA {eta} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            while !s.load(Ordering::Relaxed) {
                pb.set_length(p.total_bytes().max(1));
                pb.set_position(p.bytes());
                if p.total_files() > 1 {
                    pb.set_message(format!("{}/{} files", p.files(), p.total_files()));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            pb.finish_and_clear();
        });
        Bar { stop, handle: Some(handle) }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
