//! `cacheless extract`: unpack tar archives (zstd, gzip, xz, lz4, bzip2 or plain) off the page
//! cache, safely. The work is done by `cacheless_archive::extract`; this module maps flags,
//! draws progress and prints the outcome.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use cacheless::Progress;
use cacheless_archive::{extract, ExtractOptions, Input};
use clap::Args;

use crate::common::CommonOpts;
use crate::ui;

/// Arguments of `cacheless extract`.
#[derive(Args, Debug)]
pub struct ExtractArgs {
    /// The archive, or `-` for standard input. Compression is detected from its first bytes.
    pub archive: PathBuf,
    /// Only these members, as stored in the archive (a folder takes everything below it); a
    /// name no member matches is an error, as with GNU tar.
    pub members: Vec<PathBuf>,
    /// Read member names from FILE too, one per line (`-` for standard input).
    #[arg(short = 'T', long = "files-from", value_name = "FILE")]
    pub files_from: Vec<PathBuf>,
    /// Skip members whose name (or any tail of it that starts at a component) matches PATTERN
    /// (`*`, `?`, `[...]`; wildcards match '/'), as GNU tar's --exclude.
    #[arg(long, value_name = "PATTERN")]
    pub exclude: Vec<String>,
    /// Extract into this directory (created if missing).
    #[arg(short = 'C', long = "directory", default_value = ".")]
    pub directory: PathBuf,
    /// Drop this many leading components from member names (like GNU tar).
    #[arg(long, default_value_t = 0)]
    pub strip_components: usize,
    /// Do not syncfs at the end (faster, not crash-safe).
    #[arg(long)]
    pub no_sync: bool,
    /// Keep existing files; an existing file is reported as an error for that member.
    #[arg(short = 'k', long)]
    pub keep_old_files: bool,
    /// Keep existing files and folders as they are, silently.
    #[arg(long)]
    pub skip_old_files: bool,
    /// Existing folders keep their mode and time.
    #[arg(long)]
    pub no_overwrite_dir: bool,
    /// Extract every member under the folder DIR (a member already under it stays as it is);
    /// without DIR, under the archive's name less its `.tar`/compression suffix, as GNU tar.
    #[arg(long, value_name = "DIR", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    pub one_top_level: Option<std::ffi::OsString>,
    /// A symlink to a folder already there stays where the archive has a folder of that name
    /// (default: replaced by the folder, as GNU tar does).
    #[arg(long)]
    pub keep_directory_symlink: bool,
    /// Write regular members' contents to standard output and create nothing.
    #[arg(short = 'O', long)]
    pub to_stdout: bool,
    /// Accepted for GNU tar's command lines, and changes nothing: members are always extracted
    /// in one pass, in the archive's order, whatever the order of the names given.
    #[arg(short = 's', long, visible_alias = "preserve-order")]
    pub same_order: bool,
    /// Say how the archive was read and each file written, and why (what `-v` says in the other
    /// commands; here `-v` names the members, as GNU tar's).
    #[arg(long)]
    pub debug: bool,
    /// Give members the archive's owners, by name where this system knows it, else by number
    /// (default as root, as GNU tar). A member whose owner cannot be set is kept and reported.
    #[arg(long, overrides_with = "no_same_owner")]
    pub same_owner: bool,
    /// Members are owned by the user extracting them (default for other users than root).
    #[arg(long, overrides_with = "same_owner")]
    pub no_same_owner: bool,
    /// Owners by the archive's numbers, never its names.
    #[arg(long)]
    pub numeric_owner: bool,
    /// Give members the archive's mode bits whole, set-ID and sticky bits included, without the
    /// umask (default as root, as GNU tar).
    #[arg(short = 'p', long = "same-permissions", visible_alias = "preserve-permissions", overrides_with = "no_same_permissions")]
    pub same_permissions: bool,
    /// Modes are the archive's permission bits less the umask (default for other users).
    #[arg(long, overrides_with = "same_permissions")]
    pub no_same_permissions: bool,
    /// Create FIFOs and device nodes (the default, as GNU tar; kept for older command lines).
    #[arg(long, overrides_with = "no_special_files")]
    pub special_files: bool,
    /// Skip FIFOs and device nodes with a warning.
    #[arg(long, overrides_with = "special_files")]
    pub no_special_files: bool,
    /// Worker threads writing file data (default: 2 per CPU, 4 to 16).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Threads decoding a multi-frame zstd archive, a frame each (default: one per CPU, at most
    /// 8; 1: one thread). A single-frame archive, and the other formats, use one.
    #[arg(long, value_name = "N")]
    pub decompress_threads: Option<usize>,
    /// Small files (under 1 MiB) are written back together once this much of them waits: one
    /// syncfs writes them in a few large requests, then their pages are dropped (default 32M;
    /// 0: each file on its own, with RWF_DONTCACHE).
    #[arg(long, value_name = "SIZE", value_parser = crate::common::parse_size)]
    pub writeback_batch: Option<u64>,
}

/// The member names given on the command line and in each `--files-from` file (one per line,
/// empty lines skipped), as bytes.
fn member_names(args: &ExtractArgs) -> Result<Vec<Vec<u8>>> {
    use std::io::BufRead;
    use std::os::unix::ffi::OsStrExt;
    let mut names: Vec<Vec<u8>> = args.members.iter().map(|p| p.as_os_str().as_bytes().to_vec()).collect();
    for f in &args.files_from {
        let reader: Box<dyn BufRead> = if f.as_os_str() == "-" {
            Box::new(std::io::stdin().lock())
        } else {
            Box::new(std::io::BufReader::new(std::fs::File::open(f).with_context(|| format!("open {}", f.display()))?))
        };
        for line in reader.split(b'\n') {
            let line = line.with_context(|| format!("read {}", f.display()))?;
            if !line.is_empty() {
                names.push(line);
            }
        }
    }
    Ok(names)
}

/// The folder of `--one-top-level[=DIR]`: DIR, or the archive's name less its suffixes; a
/// usage error where that says nothing (GNU tar's words).
fn one_top_level(top: &Path, archive: &Path) -> Result<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    if !top.as_os_str().is_empty() {
        return Ok(top.as_os_str().as_bytes().to_vec());
    }
    let deduced = archive.file_name().filter(|_| archive.as_os_str() != "-").and_then(|n| cacheless_archive::select::top_of_archive(n.as_bytes()));
    deduced.ok_or_else(|| ui::UsageError("Cannot deduce top-level directory name; please set it explicitly with --one-top-level=DIR".into()).into())
}

/// Runs `cacheless extract`: exit 0 when every member was extracted, 1 otherwise, 130 or 143
/// when interrupted by SIGINT or SIGTERM.
pub fn run(args: &ExtractArgs, common: &CommonOpts) -> Result<ExitCode> {
    let progress = Arc::new(Progress::new());
    let mut opts = ExtractOptions::new(&args.directory);
    opts.strip_components = args.strip_components;
    opts.io = common.io();
    opts.sync = !args.no_sync;
    opts.keep_old_files = args.keep_old_files;
    opts.skip_old_files = args.skip_old_files;
    opts.keep_directory_symlink = args.keep_directory_symlink;
    if let Some(top) = &args.one_top_level {
        opts.one_top_level = Some(one_top_level(Path::new(top), &args.archive)?);
    }
    opts.no_overwrite_dir = args.no_overwrite_dir;
    opts.to_stdout = args.to_stdout;
    opts.members = member_names(args)?;
    for p in &args.exclude {
        opts.exclude.push(glob::Pattern::new(p).map_err(|e| ui::UsageError(format!("--exclude {p:?}: {e}")))?);
    }
    // GNU tar's defaults (ExtractOptions::new) unless a flag says otherwise.
    if args.same_owner || args.no_same_owner {
        opts.same_owner = args.same_owner;
    }
    opts.numeric_owner = args.numeric_owner;
    if args.same_permissions || args.no_same_permissions {
        opts.same_permissions = args.same_permissions;
    }
    opts.special_files = !args.no_special_files;
    if let Some(t) = args.threads {
        opts.threads = t.max(1);
    }
    if let Some(t) = args.decompress_threads {
        opts.decompress_threads = t.max(1);
    }
    if let Some(b) = args.writeback_batch {
        opts.batch_writeback = b;
    }
    opts.progress = Some(progress.clone());
    opts.list = common.verbose;
    if args.debug && common.backend.to_string() != "auto" {
        eprintln!(
            "cacheless: --backend {} applies to reading the archive and writing large files; smaller files are written by the thread-pool creator",
            common.backend
        );
    }

    // Ctrl-C / SIGTERM stop between entries and chunks; the entry being written is removed.
    let signals = ui::Signals::register(&progress);
    let input = if args.archive.as_os_str() == "-" { Input::Stream(Box::new(std::io::stdin())) } else { Input::Path(args.archive.clone()) };
    let res = {
        let _bar = ui::Bar::start(&progress, common.json, ui::Measure::Input);
        extract(input, &opts)
    };
    let report = res.with_context(|| format!("extract {}", args.archive.display()))?;

    ui::print_members(&report.warnings, &report.failures, report.failure_count);
    if let Some(code) = signals.exit_code().filter(|_| report.interrupted) {
        eprintln!("cacheless: interrupted; the member being written was removed");
        return Ok(code);
    }
    if let Some(f) = &report.fatal {
        eprintln!("cacheless: {f}");
        if let Some(h) = report.fatal_error.as_ref().and_then(|e| e.hint()).map(ui::hint_text) {
            eprintln!("cacheless: hint: {h}");
        }
    }
    if common.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if args.debug {
        let m = &report.modes;
        eprintln!(
            "extracted {} files ({}), {} dirs, {} symlinks, {} hard links in {:.2} s ({}); archive {} read {} ({}), {}; files: direct {}, dontcache {}, writebehind {}, buffered {}; created {}; named {}; {}; {}",
            report.files,
            ui::size(report.bytes),
            report.dirs,
            report.symlinks,
            report.hardlinks,
            report.elapsed_s,
            ui::rate(report.bytes, report.elapsed_s),
            report.source.compression.name(),
            report.source.read_mode,
            report.source.reason,
            match report.source.frames {
                Some(f) => format!("{f} frames decoded on {} threads", report.source.decompress_threads),
                None => format!("decoded on {} thread(s)", report.source.decompress_threads),
            },
            m.direct,
            m.dontcache,
            m.writebehind,
            m.buffered,
            report.creation,
            report.naming,
            report.resolve,
            if report.synced { "synced" } else { "not synced (--no-sync)" },
        );
    }
    Ok(if report.is_ok() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
