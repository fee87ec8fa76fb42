//! `cacheless-crash`: records the engine's workloads on real filesystems and checks the crash
//! states a power cut may leave (see the `cacheless_crash` crate). Exit 0: no violation; 1: a
//! violation; 2: bad usage or a run that could not be made.

use std::process::ExitCode;

use cacheless_crash::{cleanup, workloads, FsKind, SweepOptions};
use clap::Parser;

/// Crash-consistency sweep of cacheless's write paths.
#[derive(Parser, Debug)]
#[command(name = "cacheless-crash", version)]
struct Args {
    /// Crash states per filesystem and workload (at most).
    #[arg(long, default_value_t = 40)]
    states: usize,
    /// Filesystems, comma-separated: ext4, xfs, btrfs (default ext4 and xfs, and btrfs where
    /// btrfs-progs is installed).
    #[arg(long)]
    fs: Option<String>,
    /// Workloads, comma-separated (default all).
    #[arg(long, value_delimiter = ',')]
    workload: Vec<String>,
    /// Seed of the random subsets of writes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Folder for the images (default /dev/shm).
    #[arg(long)]
    scratch: Option<std::path::PathBuf>,
    /// Remove durability steps from the engine (dirsync, fdatasync, syncfs, comma-separated):
    /// the sweep must then report violations. Needs a build with the `fault-injection` feature.
    #[arg(long, value_delimiter = ',')]
    skip: Vec<String>,
    /// Make the device fail the write of this number (from 0, counted from the mount) with EIO,
    /// once: the engine must then fail, never promise what the image does not hold. Several,
    /// comma-separated: a run for each.
    #[arg(long, value_delimiter = ',')]
    eio: Vec<usize>,
    /// Fail this many writes, each in a run of its own, spread evenly over the writes of a run
    /// without a failure (made and checked first).
    #[arg(long, default_value_t = 0)]
    eio_sweep: usize,
    /// Print every violation (default: the first 20).
    #[arg(long)]
    all: bool,
}

/// Prints a line; once standard output is closed (`| head`), stops the sweep between two
/// states (its mounts undone as on a signal) and exits 0.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write;
        if writeln!(std::io::stdout().lock(), $($arg)*).is_err() {
            cleanup::stop();
        }
    }};
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) => {
            eprintln!("cacheless-crash: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(feature = "fault-injection")]
fn skip(names: &[String]) -> Result<(), String> {
    use cacheless::fault::Step;
    let steps = names
        .iter()
        .map(|n| Step::ALL.into_iter().find(|s| s.name() == n).ok_or_else(|| format!("unknown step {n:?}: dirsync, fdatasync or syncfs")))
        .collect::<Result<Vec<_>, _>>()?;
    cacheless::fault::skip_durability(&steps);
    Ok(())
}

#[cfg(not(feature = "fault-injection"))]
fn skip(names: &[String]) -> Result<(), String> {
    if names.is_empty() {
        Ok(())
    } else {
        Err("--skip needs a build with the fault-injection feature (scripts/crash builds one)".into())
    }
}

fn run(args: &Args) -> Result<usize, String> {
    skip(&args.skip)?;
    if args.states == 0 {
        return Err("--states must be at least 1".into());
    }
    let opts = SweepOptions {
        fs: match &args.fs {
            Some(list) => FsKind::parse_list(list).map_err(|e| e.to_string())?,
            None => FsKind::defaults(),
        },
        states: args.states,
        seed: args.seed,
        eio_at: args.eio.clone(),
        eio_spread: args.eio_sweep,
        scratch: args.scratch.clone(),
    };
    let wl = workloads::select(&args.workload)?;
    cleanup::on_signals().map_err(|e| format!("signal handler: {e}"))?;
    let mut shown = 0;
    let out = cacheless_crash::sweep(&opts, &wl, |r| {
        let rate = if r.check_s > 0.0 { r.states as f64 / r.check_s } else { 0.0 };
        let name = match r.eio_at {
            Some(n) => format!("{} (EIO {n})", r.workload),
            None => r.workload.clone(),
        };
        match &r.skipped {
            Some(why) => say!("{:<6} {:<20} skipped: {why}", r.fs, name),
            None => say!(
                "{:<6} {:<20} {:>5} states ({:.1}/s), {:>4} violations in {} states, {} temporaries; {} writes, {} flushes recorded, loop {}",
                r.fs,
                name,
                r.states,
                rate,
                r.violations.len(),
                r.bad_states,
                r.temporaries,
                r.writes,
                r.barriers,
                if r.loop_direct_io { "direct-io" } else { "buffered" }
            ),
        }
        if r.eio_at.is_some() && r.failed_writes == 0 {
            say!("  the run ended before that write: nothing failed");
        }
        if r.failed_writes > 0 {
            let after = if r.returned_after_failure.is_empty() { "none".to_string() } else { r.returned_after_failure.join(", ") };
            match &r.failed_with {
                Some(e) => say!("  {} failed write(s); returned after it: {after}; then the workload failed: {e}", r.failed_writes),
                None => say!("  {} failed write(s); returned after it: {after}; every call succeeded", r.failed_writes),
            }
        }
        for v in &r.violations {
            if args.all || shown < 20 {
                say!("  violation: {v}");
                shown += 1;
            }
        }
    })
    .map_err(|e| e.to_string());
    cleanup::undo_all();
    if cleanup::stopped() {
        return Ok(0);
    }
    let out = out?;
    let n = out.violations().count();
    say!("{} crash states, {n} violations", out.states());
    Ok(n)
}
