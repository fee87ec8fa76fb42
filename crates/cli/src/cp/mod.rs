//! `cacheless cp`, and cacheless run as `cp` (through a link of that name): GNU cp 9.1's
//! command line, results, diagnostics and exit statuses, with every file written off the page
//! cache. The command line becomes the engine's tree-copy options (`cacheless::tree`, which
//! makes GNU cp's decisions and does the work); this module prints what it reports: `-v` lines
//! on standard output, diagnostics on standard error worded as GNU words them. Run as
//! `cacheless cp`, a diagnostic names cacheless and may be followed by a hint line; run as `cp`,
//! it is GNU's line exactly.
//!
//! Exit status, as GNU cp's: 0 when everything was copied, 1 when something failed or the
//! command line is wrong; 130 or 143 when stopped by SIGINT or SIGTERM.

pub(crate) mod args;

use crate::ExitCode;
use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use cacheless::quote::quote;
use cacheless::{Budget, CopyReport, Method, Progress};
use cacheless_cp::{CpOptions, Existing, Note, Question, Transfer};
use clap::Args;

use crate::common::CommonOpts;
use crate::ui;
use args::{CpArgs, Interactive, Stop};

/// Arguments of `cacheless cp`: read as GNU cp reads its own (see `cacheless cp --help`).
#[derive(Args, Debug)]
pub struct CpCmd {
    /// GNU cp's options and operands, and cacheless's own options.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0.., value_name = "ARGS")]
    pub args: Vec<OsString>,
}

/// The name diagnostics start with: `cp` as invoked (argv[0], as GNU prints it), or
/// `cacheless`.
static PROG: OnceLock<String> = OnceLock::new();
/// Run as `cp`: GNU's lines only, no hint lines.
static AS_CP: AtomicBool = AtomicBool::new(false);

fn prog() -> &'static str {
    PROG.get().map_or("cacheless", String::as_str)
}

/// How `--help` is asked for in "Try ..." lines.
fn help_command() -> String {
    if AS_CP.load(Ordering::Relaxed) {
        prog().to_string()
    } else {
        "cacheless cp".to_string()
    }
}

/// Prints a warning (not a failure) on standard error.
pub fn warn(msg: &str) {
    eprintln!("{}: {msg}", prog());
}

/// `cacheless cp ...`.
pub fn run(cmd: &CpCmd, common: &CommonOpts) -> ExitCode {
    let _ = PROG.set("cacheless".into());
    main(&cmd.args, Some(common))
}

/// cacheless run as `cp` (`argv0` as invoked).
pub fn run_as_cp(argv0: &std::ffi::OsStr, args: &[OsString]) -> ExitCode {
    let _ = PROG.set(argv0.to_string_lossy().into_owned());
    AS_CP.store(true, Ordering::Relaxed);
    main(args, None)
}

fn usage_exit(msg: Option<&str>, try_help: bool) -> ExitCode {
    if let Some(m) = msg {
        eprintln!("{}: {m}", prog());
    }
    if try_help {
        eprintln!("Try '{} --help' for more information.", help_command());
    }
    ExitCode::from(1)
}

fn main(raw: &[OsString], common: Option<&CommonOpts>) -> ExitCode {
    let mut a = match args::parse(raw) {
        Ok(a) => a,
        Err(Stop::Help) => {
            print!("{}", help_text());
            return ExitCode::SUCCESS;
        }
        Err(Stop::Version) => {
            println!("cp (cacheless) {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Err(Stop::Usage(m, try_help)) => return usage_exit(m.as_deref(), try_help),
        Err(Stop::Invalid(m)) => {
            let (first, rest) = m.split_once('\n').unwrap_or((&m, ""));
            eprintln!("{}: {first}", prog());
            eprintln!("{rest}");
            return usage_exit(None, true);
        }
    };
    if let Some(c) = common {
        a.verbose |= c.verbose > 0;
        a.json |= c.json;
    }
    // GNU's do_copy: the operands.
    let n = a.files.len();
    if n <= usize::from(a.target_directory.is_none()) {
        let m = if n == 0 { "missing file operand".to_string() } else { format!("missing destination file operand after {}", quote(&a.files[0])) };
        return usage_exit(Some(&m), true);
    }
    if a.no_target_directory {
        if a.target_directory.is_some() {
            return usage_exit(Some("cannot combine --target-directory (-t) and --no-target-directory (-T)"), false);
        }
        if n > 2 {
            return usage_exit(Some(&format!("extra operand {}", quote(&a.files[2]))), true);
        }
    }
    let (mut srcs, dst) = match &a.target_directory {
        Some(t) => (a.files.clone(), t.clone()),
        None => (a.files[..n - 1].to_vec(), a.files[n - 1].clone()),
    };
    if a.strip_trailing_slashes {
        for s in &mut srcs {
            let b = s.as_os_str().as_bytes();
            let end = b.iter().rposition(|&c| c != b'/').map_or(1.min(b.len()), |i| i + 1);
            *s = PathBuf::from(std::ffi::OsStr::from_bytes(&b[..end]));
        }
    }
    // URLs (`cacheless cp` only: run as `cp`, an operand is always a path).
    let urls = !AS_CP.load(Ordering::Relaxed) && (cacheless_cp::is_url(&dst) || srcs.iter().any(|s| cacheless_cp::is_url(s)));
    let flags = common.map(|c| c.remote.clone()).unwrap_or_default().or(&a.remote);
    if let Some(flag) = flags.given().filter(|_| !urls) {
        return usage_exit(Some(&format!("{flag} applies to s3:// and http(s):// URLs, and no operand is one")), false);
    }
    if urls && a.verify_algo {
        return usage_exit(
            Some("--verify-algo cannot be honoured with a URL operand: a transfer is verified against the object's ETag (an MD5), whatever the algorithm"),
            false,
        );
    }
    if !urls && a.cp.parents && a.target_directory.is_none() && srcs.len() == 1 && !dst.is_dir() {
        return usage_exit(Some("with --parents, the destination must be a directory"), true);
    }
    let progress = Arc::new(Progress::new());
    let signals = ui::Signals::register(&progress);
    let verify = a.cp.copy.verify.is_some();
    let mut o = options(&mut a, common);
    if urls {
        // The transfers' flags may also come before `cp`.
        o.remote = match flags.options() {
            Ok(r) => r,
            Err(e) => {
                print_error(&e);
                return ExitCode::from(1);
            }
        };
        let (prog, debug) = (prog().to_string(), a.debug);
        o.on_transfer = Some(Arc::new(move |t: &Transfer| said(&prog, t, debug, verify)));
    }
    let show_bar = !AS_CP.load(Ordering::Relaxed) && a.interactive != Interactive::Ask;
    let report = {
        let _bar = show_bar.then(|| ui::Bar::start(&progress, a.json, ui::Measure::Output));
        cacheless_cp::copy(&srcs, &dst, &o, &progress)
    };
    let report = match report {
        Ok(r) => r,
        Err(_) if signals.exit_code().is_some() => {
            eprintln!("{}: interrupted; files not yet finished were removed", prog());
            return signals.exit_code().unwrap_or(ExitCode::from(130));
        }
        Err(e) => {
            print_error(&e);
            return ExitCode::from(1);
        }
    };
    if let Some(code) = signals.exit_code() {
        eprintln!("{}: interrupted; files not yet finished were removed", prog());
        return code;
    }
    let r = &report;
    if a.json {
        let v = serde_json::json!({
            "files": r.files,
            "transfers": r.transfers,
            "copied": r.copied,
            "reflinked": r.reflinked,
            "in_place": r.in_place,
            "hardlinks": r.hardlinks,
            "skipped": r.skipped,
            "errors": progress.errors(),
            "bytes": progress.bytes(),
            "data_bytes": r.data_bytes,
            "elapsed_s": r.elapsed_s,
            "final_sync_s": r.final_sync_s,
            "verify_s": r.verify_s,
            "bwlimit": r.bwlimit,
            "progress_samples": r.progress_samples,
        });
        match serde_json::to_string_pretty(&v) {
            Ok(s) => println!("{s}"),
            Err(e) => eprintln!("{}: {e}", prog()),
        }
    } else if a.debug {
        let v = if verify { format!(", verify {:.2} s", r.verify_s) } else { String::new() };
        eprintln!(
            "{}: copied {} (reflinked {}, in place {}), hard links {}, skipped {}, errors {}, {} of data in {:.2} s{v}",
            prog(),
            r.copied,
            r.reflinked,
            r.in_place,
            r.hardlinks,
            r.skipped,
            progress.errors(),
            ui::size(r.data_bytes),
            r.elapsed_s
        );
    }
    if progress.errors() > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// The engine's options from the command line (and the flags given before `cp`).
fn options(a: &mut CpArgs, common: Option<&CommonOpts>) -> CpOptions {
    let mut io = common.map(CommonOpts::io).unwrap_or_default();
    if let Some(m) = a.mode {
        io.mode = m;
    }
    if let Some(b) = a.backend {
        io.backend = b;
    }
    if let Some(b) = a.block_size {
        io.block_size = b;
    }
    if let Some(q) = a.queue_depth {
        io.queue_depth = q;
    }
    if let Some(m) = a.memory {
        io.budget = Budget::new(m);
    }
    let mut o = std::mem::take(&mut a.cp);
    o.io = io;
    o.existing = match a.interactive {
        Interactive::No => Existing::Keep,
        Interactive::Ask => Existing::Ask(Arc::new(ask)),
        Interactive::Unspecified => Existing::Replace,
    };
    o.target = args::target(a);
    o.open_dangling = std::env::var_os("POSIXLY_CORRECT").is_some();
    // Totals only feed the bar's ETA: no tree walk when nothing is drawn.
    o.count_totals = !AS_CP.load(Ordering::Relaxed) && ui::Bar::wanted(a.json);
    o.copy.before_verify = corrupt_hook();
    o.on_error = Some(Arc::new(|e: &cacheless::Error| print_error(e)));
    let verbose = a.verbose && !a.json;
    o.on_note = Some(Arc::new(move |n: &Note<'_>| note(n, verbose)));
    if a.debug {
        o.on_copied = Some(Arc::new(say_copied));
    }
    o
}

/// The fault injected between write and verification for the tests of `--verify`: with
/// `CACHELESS_TEST_CORRUPT_VERIFY=1`, the first byte of each copy is flipped on the disk once the
/// copy is durable. Not a documented option: tests only.
fn corrupt_hook() -> Option<cacheless::VerifyHook> {
    if std::env::var_os("CACHELESS_TEST_CORRUPT_VERIFY").as_deref() != Some(std::ffi::OsStr::new("1")) {
        return None;
    }
    Some(Arc::new(|f: &std::fs::File, _: &Path| {
        use std::os::unix::fs::FileExt;
        let mut b = [0u8; 1];
        if f.read_at(&mut b, 0)? == 1 {
            f.write_at(&[b[0] ^ 0xff], 0)?;
            f.sync_data()?;
        }
        Ok(())
    }))
}

/// GNU's words for an engine operation that names none itself.
fn gnu_op(op: &str) -> &str {
    match op {
        "open" => "cannot open {} for reading",
        "create" | "link" | "rename" => "cannot create regular file {}",
        "write" => "error writing {}",
        "read" | "read back" => "error reading {}",
        "stat" => "cannot stat {}",
        "fsync" | "fdatasync" | "fsync directory" | "syncfs" => "failed to sync {}",
        "chmod" => "preserving permissions for {}",
        "set times" => "preserving times for {}",
        "fchown" => "failed to preserve ownership for {}",
        "setxattr" | "getxattr" | "listxattr" | "removexattr" => "setting attributes for {}",
        "truncate" => "failed to extend {}",
        other => other,
    }
}

/// An engine error as GNU cp words its diagnostics: what failed, the name quoted, and the OS
/// error as strerror says it.
fn gnu_text(e: &cacheless::Error) -> String {
    if e.is_message() {
        return e.what();
    }
    let op = gnu_op(e.op());
    let q = quote(e.path());
    let head = match op.split_once("{}") {
        Some((a, b)) => format!("{a}{q}{b}"),
        None => format!("{op} {q}"),
    };
    let tail = match e.errno() {
        Some(n) => cacheless::strerror(n),
        None => e.io_error().to_string(),
    };
    format!("{head}: {tail}")
}

/// Prints a failure: GNU's line, then (as `cacheless cp`) the engine's note and hint. A
/// transfer's failure names its URL and what the server said, the note on a line of its own.
fn print_error(e: &cacheless::Error) {
    if cacheless_cp::is_url(e.path()) && !e.is_message() {
        eprintln!("{}: {}: {}", prog(), ui::printable(&e.what()), ui::printable(&e.io_error().to_string()));
        if let Some(n) = e.note() {
            eprintln!("{}: hint: {n}", prog());
        }
        return;
    }
    let mut line = format!("{}: {}", prog(), gnu_text(e));
    if !AS_CP.load(Ordering::Relaxed) {
        if let Some(n) = e.note() {
            line.push_str(&format!(" ({n})"));
        }
    }
    eprintln!("{line}");
    if !AS_CP.load(Ordering::Relaxed) {
        if let Some(h) = e.hint() {
            eprintln!("{}: hint: {}", prog(), ui::hint_text(h));
        }
    }
}

/// What the copy tells as it goes: `-v` lines on standard output (GNU's), warnings on
/// standard error.
fn note(n: &Note<'_>, verbose: bool) {
    if let Note::Warning(w) = n {
        return warn(w);
    }
    if !verbose {
        return;
    }
    let mut out = std::io::stdout().lock();
    // A closed standard output loses the lines, not the copy.
    let _ = match n {
        Note::Copy { src, dst, backup } => match backup {
            Some(b) => writeln!(out, "{} -> {} (backup: {})", quote(src), quote(dst), quote(b)),
            None => writeln!(out, "{} -> {}", quote(src), quote(dst)),
        },
        Note::Removed(p) => writeln!(out, "removed {}", quote(p)),
        Note::Unbackup { backup, dst } => writeln!(out, "{} -> {} (unbackup)", quote(backup), quote(dst)),
        Note::Parent { src, dst } => {
            // GNU prints these two names as they are.
            let mut line = src.as_os_str().as_bytes().to_vec();
            line.extend_from_slice(b" -> ");
            line.extend_from_slice(dst.as_os_str().as_bytes());
            line.push(b'\n');
            out.write_all(&line)
        }
        _ => Ok(()),
    };
}

/// The `ls`-style permission letters of `mode` (`rwxr-sr-T`).
fn strmode(mode: u32) -> String {
    let bit = |m: u32, c: char| if mode & m != 0 { c } else { '-' };
    let special = |x: u32, s: u32, on: char, off: char| match (mode & x != 0, mode & s != 0) {
        (true, true) => on,
        (false, true) => off,
        (true, false) => 'x',
        (false, false) => '-',
    };
    [
        bit(0o400, 'r'),
        bit(0o200, 'w'),
        special(0o100, 0o4000, 's', 'S'),
        bit(0o040, 'r'),
        bit(0o020, 'w'),
        special(0o010, 0o2000, 's', 'S'),
        bit(0o004, 'r'),
        bit(0o002, 'w'),
        special(0o001, 0o1000, 't', 'T'),
    ]
    .iter()
    .collect()
}

/// `-i`: asks on standard error, reads the answer from standard input (yes: it starts with y
/// or Y, as GNU's `yesno` reads it in the C locale).
fn ask(q: &Question<'_>) -> bool {
    let p = prog();
    let text = match q.unwritable_mode {
        Some(m) if q.replace => format!("{p}: replace {}, overriding mode {m:04o} ({})? ", quote(q.dst), strmode(m)),
        Some(m) => format!("{p}: unwritable {} (mode {m:04o}, {}); try anyway? ", quote(q.dst), strmode(m)),
        None => format!("{p}: overwrite {}? ", quote(q.dst)),
    };
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(_) => line.starts_with(['y', 'Y']),
        Err(_) => false,
    }
}

/// A transfer to or from a URL: with `--debug`, how it went (requests, how the local file was
/// read or written, and why); with `--verify`, a download that could not be checked.
fn said(prog: &str, t: &Transfer, debug: bool, verify: bool) {
    if verify && t.download && !t.skipped && t.verified.is_none() && t.local.as_ref().is_some_and(|d| d.mode != cacheless::Taken::NoData) {
        eprintln!("{prog}: {}: not verified: its ETag is no MD5 of its bytes (a multipart upload's), and the server gives no other checksum", t.source);
    }
    if !debug || t.skipped {
        return;
    }
    let how = match (t.download, t.ranged, t.requests) {
        (true, true, n) => format!("{n} ranges"),
        (true, false, _) => "one stream: the server does not do ranges".to_string(),
        (false, _, 0) => "one PUT".to_string(),
        (false, _, n) => format!("{n} parts"),
    };
    let (mode, reason) = t.local.as_ref().map_or((String::new(), String::new()), |d| (d.mode.to_string(), d.reason.to_string()));
    let what = if t.download { "written" } else { "read" };
    let url = if t.download { &t.source } else { &t.destination };
    eprintln!("{prog}: {url}: {} in {how}; {what} {mode} ({reason})", ui::size(t.bytes));
}

/// `--debug`: how one file was copied, and why.
fn say_copied(r: &CopyReport) {
    let how = match r.method {
        Method::Reflink => "reflink (FICLONE, no data copied)".to_string(),
        m => format!(
            "{m}: read {} ({}), write {} ({}){}",
            r.read.mode,
            r.read.reason,
            r.write.decision.mode,
            r.write.decision.reason,
            r.write.backend.as_ref().map(|b| format!(", {} ({})", b.name(), b.why())).unwrap_or_default()
        ),
    };
    let fb = r.reflink_fallback.as_ref().map(|f| format!("; no reflink: {f}")).unwrap_or_default();
    let v = r.verify.as_ref().map(|v| format!("; verified {} {} from {} in {:.3} s", v.algo, v.digest, v.read.mode, v.seconds)).unwrap_or_default();
    eprintln!("{}: {} -> {}: {how}{fb}{v}", prog(), quote(&r.src), quote(&r.write.path));
}

fn help_text() -> String {
    let p = help_command();
    format!(
        "\
Usage: {p} [OPTION]... [-T] SOURCE DEST
  or:  {p} [OPTION]... SOURCE... DIRECTORY
  or:  {p} [OPTION]... -t DIRECTORY SOURCE...
Copy SOURCE to DEST, or several SOURCEs into DIRECTORY, as GNU cp does, writing every file
off the page cache (direct I/O, or uncached writes), durable and under a temporary name until
it is complete.

GNU cp's options:
  -a, --archive                same as -dR --preserve=all
      --attributes-only        copy the attributes only, not the data
      --backup[=CONTROL]       back up each existing destination file
  -b                           like --backup, without an argument
      --copy-contents          read special files as files when recursive
  -d                           same as --no-dereference --preserve=links
  -f, --force                  remove a destination that cannot be opened, and try again
                                 (ignored with -n)
  -i, --interactive            ask before overwriting (overrides an earlier -n)
  -H                           follow symbolic links named on the command line
  -l, --link                   make hard links instead of copying
  -L, --dereference            always follow symbolic links in SOURCE
  -n, --no-clobber             never overwrite an existing file (overrides an earlier -i)
  -P, --no-dereference         never follow symbolic links in SOURCE
  -p                           same as --preserve=mode,ownership,timestamps
      --preserve[=ATTR_LIST]   keep these attributes (default: mode,ownership,timestamps);
                                 others: links, xattr, context, all
      --no-preserve=ATTR_LIST  do not keep these attributes
      --parents                put each SOURCE under its whole name in DIRECTORY
  -R, -r, --recursive          copy directories recursively
      --reflink[=WHEN]         clone the data (auto, always (the default of the bare
                                 option), never)
      --remove-destination     remove each existing destination before making it
      --sparse=WHEN            holes: auto (keep those of a sparse SOURCE), always (also
                                 turn zero blocks into holes), never
      --strip-trailing-slashes  remove trailing slashes from each SOURCE
  -s, --symbolic-link          make symbolic links instead of copying
  -S, --suffix=SUFFIX          the suffix of simple backups (default ~)
  -t, --target-directory=DIRECTORY  copy every SOURCE into DIRECTORY
  -T, --no-target-directory    treat DEST as a file, never as a directory to copy into
  -u, --update                 copy only a SOURCE newer than its destination, or one
                                 whose destination is missing
  -v, --verbose                say what is done
  -x, --one-file-system        stay on SOURCE's file systems
  -Z, --context[=CTX]          accepted; SELinux contexts are not set
      --help                   show this help and exit
      --version                show the version and exit

cacheless's options (spelt out in full):
      --debug                  -v, and how each file was read and written, and why
      --inplace                write each existing destination in place (its inode kept)
                                 rather than replacing it with a complete copy
      --verify                 read each durable copy back from the disk and compare
      --verify-algo=ALGO       checksum for --verify: xxh3 (default), sha256, blake3
      --bwlimit=RATE           move at most RATE bytes per second (e.g. 200M)
      --threads=N              worker threads copying files
      --no-sync                do not make copies durable before they take their names
      --mode=MODE              auto, direct, dontcache, writebehind, buffered
      --backend=BACKEND        auto, uring, threads
      --block-size=SIZE        size of each I/O request
      --queue-depth=N          requests in flight per file
      --memory=SIZE            budget of all in-flight buffers (default 256M)
      --json                   print a report in JSON instead of -v lines

With s3:// and http(s):// operands (docs/remote.md; each over its environment variable):
      --endpoint-url=URL       the S3 endpoint (AWS_ENDPOINT_URL)
      --region=REGION          the S3 region (AWS_REGION; default us-east-1)
      --no-sign-request        unsigned requests, for a public bucket
      --ca-bundle=FILE         certificates (PEM) trusted for S3 (AWS_CA_BUNDLE)
      --part-size=SIZE         bytes per ranged GET and per part (default 8M, within --memory)
      --concurrency=N          requests in flight per transfer, and objects at a time (8)
      --retries=N              retries of a request that may pass (5)
      --read-timeout=SECONDS   how long a response may send nothing (20)
GNU's options keep their meaning with a URL, or are refused before anything moves (-s, -l,
--inplace, --reflink=always, --sparse=always; onto an object --backup, --attributes-only and
--preserve); --verify checks against the object's ETag.

CONTROL (--backup, or $VERSION_CONTROL): none or off (no backups), numbered or t (NAME.~N~),
existing or nil (numbered where numbered backups exist, else simple), simple or never
(NAME~, or NAME$SIMPLE_BACKUP_SUFFIX).

A new file never appears half-written under its name. An existing file is replaced by a
complete copy that keeps its owner, mode, ACLs and extended attributes, except where only
writing it in place keeps what can be seen (other hard links, a FIFO or device, attributes
this user could not carry over): it is then written in place, as GNU cp writes it.
Exit status: 0 on success, 1 when something failed or the command line is wrong.
"
    )
}

#[cfg(test)]
mod tests {
    use super::strmode;

    #[test]
    fn permission_letters_are_as_ls_shows_them() {
        assert_eq!(strmode(0o644), "rw-r--r--");
        assert_eq!(strmode(0o4755), "rwsr-xr-x");
        assert_eq!(strmode(0o2644), "rw-r-Sr--");
        assert_eq!(strmode(0o2640), "rw-r-S---");
        assert_eq!(strmode(0o1777), "rwxrwxrwt");
        assert_eq!(strmode(0o1000), "--------T");
    }
}
