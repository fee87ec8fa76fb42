//! Terminal output shared by the commands: errors with their hints, usage errors, progress bars,
//! signals, sizes.

use crate::ExitCode;
use std::error::Error as StdError;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cacheless::human_bytes;
use cacheless::{Hint, Progress};
use indicatif::{ProgressBar, ProgressStyle};

/// A bad flag value or combination: `main` prints the message with a pointer to `--help` and
/// exits 2, as clap does for the flags it rejects itself.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl StdError for UsageError {}

/// True when an error chain ends in EPIPE: the reader of our output went away, which is
/// success for a command like cat.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().map(|io| io.kind() == std::io::ErrorKind::BrokenPipe).unwrap_or(false))
        || e.chain().any(|c| c.downcast_ref::<cacheless::Error>().map(|ce| ce.errno() == Some(cacheless::sys::consts::EPIPE)).unwrap_or(false))
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

/// A hint in the words of the command line: the flag to pass, then the values to try.
pub fn hint_text(h: &Hint) -> String {
    h.sentence(|setting, value, place| if place == 0 { format!("--{setting} {value}") } else { value.to_string() })
}

/// The first hint an error chain carries.
fn hint_in<'a>(mut chain: impl Iterator<Item = &'a (dyn StdError + 'static)>) -> Option<&'a Hint> {
    chain.find_map(|c| {
        c.downcast_ref::<cacheless::Error>().and_then(|e| e.hint()).or_else(|| c.downcast_ref::<cacheless_archive::Error>().and_then(|e| e.hint())).or_else(
            || c.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()).and_then(|i| i.downcast_ref::<cacheless::Error>()).and_then(|e| e.hint()),
        )
    })
}

/// A message made safe for a terminal: a control character in it (a name's escape sequence
/// could clear the screen, move the cursor or forge a line) is written as GNU tar and ls write
/// it in a name (`\033`, `\n`); the rest is left as it is.
pub fn printable(msg: &str) -> std::borrow::Cow<'_, str> {
    if !msg.chars().any(char::is_control) {
        return msg.into();
    }
    let mut out = String::with_capacity(msg.len() + 8);
    for c in msg.chars() {
        if c.is_control() {
            let mut b = [0u8; 4];
            out.push_str(&String::from_utf8_lossy(&cacheless::quote::escape(c.encode_utf8(&mut b).as_bytes())));
        } else {
            out.push(c);
        }
    }
    out.into()
}

/// A path as a terminal is shown it: GNU's `escape` quoting (a backslash doubled, a byte that
/// does not print as `\033`, `\n`, ...), as GNU tar lists names.
pub fn shown(p: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    String::from_utf8_lossy(&cacheless::quote::escape(p.as_os_str().as_bytes())).into_owned()
}

/// Prints an error chain the way every command does: one line, each cause once (the library
/// errors never repeat their source), then the hint in flag terms, if there is one.
fn print_chain<'a>(chain: impl Iterator<Item = &'a (dyn StdError + 'static)> + Clone) {
    let line: Vec<String> = chain.clone().map(|c| c.to_string()).collect();
    eprintln!("cacheless: {}", printable(&line.join(": ")));
    if let Some(h) = hint_in(chain).map(hint_text) {
        eprintln!("cacheless: hint: {h}");
    }
}

/// Prints a command's error (what `main` got back).
pub fn print_error(e: &anyhow::Error) {
    print_chain(e.chain());
}

/// Prints a per-item error the way every command does, and counts it.
pub fn item_error(progress: &Progress, e: &(dyn StdError + 'static)) {
    progress.error();
    print_item_error(e);
}

/// Prints a per-item error that a library job has counted itself.
pub fn print_item_error(e: &(dyn StdError + 'static)) {
    print_chain(std::iter::successors(Some(e), |&c| c.source()));
}

/// Prints an archive job's warnings and failed members (the first ones it kept, then how many
/// more there were).
pub fn print_members(warnings: &[String], failures: &[String], failure_count: u64) {
    for w in warnings {
        eprintln!("cacheless: warning: {}", printable(w));
    }
    for f in failures {
        eprintln!("cacheless: {}", printable(f));
    }
    let more = failure_count.saturating_sub(failures.len() as u64);
    if more > 0 {
        eprintln!("cacheless: ... {more} more failed members");
    }
}

/// Human-readable size (binary units), as the benchmark's tables print sizes too.
pub fn size(n: u64) -> String {
    human_bytes(n as f64)
}

/// A rate of `bytes` in `secs` seconds, in binary units per second.
pub fn rate(bytes: u64, secs: f64) -> String {
    format!("{}/s", human_bytes(bytes as f64 / secs.max(1e-9)))
}

/// Ctrl-C and SIGTERM, registered once for any job: each sets the progress's cancel flag (the
/// job stops between requests and removes its unfinished files; a call waiting on a FIFO, a
/// pipe or a terminal ends, see `cacheless::interrupt`) and is remembered, for the exit status.
pub struct Signals {
    last: Arc<AtomicUsize>,
    _watch: cacheless::interrupt::Watch,
}

impl Signals {
    /// Registers SIGINT and SIGTERM for `progress`.
    pub fn register(progress: &Progress) -> Signals {
        let last = Arc::new(AtomicUsize::new(0));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            let _ = signal_hook::flag::register_usize(sig, last.clone(), usize::try_from(sig).unwrap_or(usize::MAX));
            let _ = signal_hook::flag::register(sig, progress.cancel_flag());
        }
        Signals { last, _watch: cacheless::interrupt::watch(&progress.cancel_flag()) }
    }

    /// The exit status for the signal that came, if one did: 128 plus its number, as a shell
    /// reports a process the signal ended (130 for Ctrl-C, 143 for SIGTERM).
    pub fn exit_code(&self) -> Option<ExitCode> {
        match self.last.load(Ordering::Relaxed) {
            0 => None,
            sig => Some(ExitCode::from(u8::try_from(sig).map_or(u8::MAX, |s| 128u8.saturating_add(s)))),
        }
    }
}

/// What a bar measures.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// Bytes done against the total bytes (copies).
    Output,
    /// Input bytes read against the input's size, with files and bytes written beside
    /// (extraction: the archive read, the tree written).
    Input,
    /// Bytes read against the total walked so far, with files, archive bytes written and the
    /// ratio beside (pack).
    Pack,
}

/// A progress bar drawn from a job's [`Progress`], on a terminal only.
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
    pub fn start(progress: &Arc<Progress>, json: bool, measure: Measure) -> Bar {
        let stop = Arc::new(AtomicBool::new(false));
        if !Bar::wanted(json) {
            return Bar { stop, handle: None };
        }
        let (p, s) = (progress.clone(), stop.clone());
        let handle = std::thread::spawn(move || draw(&p, &s, measure));
        Bar { stop, handle: Some(handle) }
    }
}

fn draw(p: &Progress, stop: &AtomicBool, measure: Measure) {
    let pb = ProgressBar::new_spinner();
    let mut styled = None;
    while !stop.load(Ordering::Relaxed) {
        let (pos, total) = match measure {
            Measure::Output | Measure::Pack => (p.bytes(), p.total_bytes()),
            Measure::Input => (p.input_bytes(), p.total_input_bytes()),
        };
        // The total may become known once the job has started (an archive's size).
        if styled != Some(total > 0) {
            let tmpl = match (measure, total > 0) {
                (Measure::Output | Measure::Pack, _) => "{bar:30} {bytes}/{total_bytes} {bytes_per_sec} ETA {eta} {msg}",
                (Measure::Input, true) => "{bar:30} {bytes}/{total_bytes} archive {bytes_per_sec} ETA {eta} {msg}",
                (Measure::Input, false) => "{spinner} {bytes} archive {bytes_per_sec} {msg}",
            };
            pb.set_style(ProgressStyle::with_template(tmpl).unwrap_or_else(|_| ProgressStyle::default_bar()));
            styled = Some(total > 0);
        }
        pb.set_length(total.max(1));
        pb.set_position(pos);
        match measure {
            Measure::Output if p.total_files() > 1 => pb.set_message(format!("{}/{} files", p.files(), p.total_files())),
            Measure::Output => {}
            Measure::Input => pb.set_message(format!("{} files, {} written", p.files(), size(p.bytes()))),
            Measure::Pack => {
                let out = p.output_bytes();
                let ratio = 100.0 * out as f64 / p.bytes().max(1) as f64;
                pb.set_message(format!("{}/{} files, archive {} ({ratio:.0} %)", p.files(), p.total_files(), size(out)));
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    pb.finish_and_clear();
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cacheless::{BackendKind, Mode};

    #[test]
    fn hints_become_flags() {
        assert_eq!(hint_text(&Hint::Modes(vec![Mode::Auto])), "use --mode auto");
        assert_eq!(hint_text(&Hint::Modes(vec![Mode::Auto, Mode::DontCache])), "use --mode auto or dontcache");
        assert_eq!(hint_text(&Hint::Backends(vec![BackendKind::Auto, BackendKind::Threads, BackendKind::Uring])), "use --backend auto, threads or uring");
    }

    #[test]
    fn sizes_as_the_benchmark_prints_them() {
        assert_eq!(size(1023), "1023 B");
        assert_eq!(size(5 << 40), "5.0 TiB");
        assert_eq!(size(3 << 50), "3072.0 TiB");
        assert_eq!(rate(3 << 20, 2.0), "1.5 MiB/s");
    }
}
