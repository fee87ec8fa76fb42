//! `cacheless pack`: create tar archives (zstd in independent frames by default, or gzip, xz,
//! lz4, bzip2, plain) without filling the page cache. The work is done by
//! `cacheless_archive::pack`; this module maps flags, draws progress and prints the outcome.

use crate::ExitCode;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use cacheless::Progress;
use cacheless_archive::pack::{check_level, compression_for_name, parse_compression, parse_time, Owner, SortOrder, DEFAULT_FRAME_SIZE};
use cacheless_archive::{pack, Compression, Output, PackOptions};
use clap::{Args, ValueEnum};

use crate::common::{parse_size, CommonOpts};
use crate::ui;

/// Directory entry order.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum SortArg {
    /// As the directory lists them.
    None,
    /// By name (with --mtime: reproducible archives).
    Name,
}

/// `--frame-size`: a size from 64k to 1G.
fn parse_frame_size(s: &str) -> std::result::Result<usize, String> {
    cacheless::limits::frame_size("--frame-size", parse_size(s)?)
}

/// Arguments of `cacheless pack`.
#[derive(Args, Debug)]
pub struct PackArgs {
    /// The archive to create, or `-` for standard output.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// Files and directories to archive (directories recursively), relative to -C.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Paths and member names are relative to this directory (like tar -C).
    #[arg(short = 'C', long = "directory")]
    pub directory: Option<PathBuf>,
    /// Compression: zstd, gzip, xz, lz4, bzip2 or none (default: from the output's extension, else zstd).
    #[arg(long, value_parser = parse_compression)]
    pub compress: Option<Compression>,
    /// Compression level (default: the format's own: zstd 3, gzip 6, xz 6, bzip2 9).
    #[arg(long, allow_negative_numbers = true)]
    pub level: Option<i32>,
    /// Compression threads (default: one per CPU).
    #[arg(long, value_parser = crate::common::parse_threads)]
    pub threads: Option<usize>,
    /// Bytes of tar per independent compressed frame (default 32M; 64k to 1G).
    #[arg(long, value_parser = parse_frame_size)]
    pub frame_size: Option<usize>,
    /// Order of directory entries.
    #[arg(long, value_enum, default_value = "none")]
    pub sort: SortArg,
    /// Store this modification time for every member: @SECONDS or YYYY-MM-DD[THH:MM:SS] (UTC).
    #[arg(long)]
    pub mtime: Option<String>,
    /// Store this owner for every member: NAME, NAME:UID or +UID.
    #[arg(long)]
    pub owner: Option<String>,
    /// Store this group for every member: NAME, NAME:GID or +GID.
    #[arg(long)]
    pub group: Option<String>,
    /// Store numeric ids only, no user or group names.
    #[arg(long)]
    pub numeric_owner: bool,
    /// Leave out members matching this glob (on the name or any tail of it), with their contents.
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// Do not descend into directories on other filesystems.
    #[arg(long)]
    pub one_file_system: bool,
    /// Store extended attributes (pax SCHILY.xattr records, as GNU tar --xattrs).
    #[arg(long)]
    pub xattrs: bool,
    /// Store POSIX ACLs as GNU tar --acls does (pax SCHILY.acl.access and SCHILY.acl.default
    /// text records), which GNU tar, bsdtar and cacheless extract --acls restore.
    #[arg(long)]
    pub acls: bool,
    /// Do not fsync the archive at the end (faster, not crash-safe).
    #[arg(long)]
    pub no_sync: bool,
    /// Threads reading input files ahead of the archive writer.
    #[arg(long, default_value_t = 8, value_parser = crate::common::parse_read_threads)]
    pub read_threads: usize,
}

fn usage(msg: String) -> anyhow::Error {
    anyhow::Error::new(ui::UsageError(msg))
}

/// Runs `cacheless pack`: exit 0 when every member was stored, 1 when some could not be read
/// or changed while read (the archive is complete either way), 2 on bad flags, 130 or 143 when
/// interrupted by SIGINT or SIGTERM (the archive is removed).
pub fn run(args: &PackArgs, common: &CommonOpts) -> Result<ExitCode> {
    let to_stdout = args.output.as_os_str() == "-";
    if to_stdout && std::io::stdout().is_terminal() {
        bail!("refusing to write an archive to a terminal: redirect standard output or use -o FILE");
    }
    let compression: Compression = match args.compress {
        Some(c) => c,
        None if to_stdout => Compression::Zstd,
        None => compression_for_name(&args.output).unwrap_or(Compression::Zstd),
    };
    // A URL: the archive is uploaded as it is written, its frames sent as parts, out of a share
    // of the budget of its own; the object appears only when `finish` completes it.
    let mut io = common.io();
    let mut upload = None;
    let progress = Arc::new(Progress::new());
    let output = if to_stdout {
        Output::Stream(Box::new(std::io::stdout()))
    } else if crate::remote::is_remote(&args.output) {
        let (share, rest) = crate::remote::split_budget(&io.budget, &common.remote).with_context(|| format!("pack {}", args.output.display()))?;
        io.budget = rest;
        let (writer, handle) = crate::remote::archive_output(&args.output, &share, &common.remote, progress.cancel_flag())
            .with_context(|| format!("pack {}", args.output.display()))?;
        upload = Some(handle);
        Output::Stream(Box::new(writer))
    } else {
        Output::Path(args.output.clone())
    };
    let mut o = PackOptions::new(output, args.paths.clone());
    o.members.directory = args.directory.clone();
    o.compression = compression;
    if let Some(l) = args.level {
        check_level(compression, l).map_err(usage)?;
    }
    o.level = args.level;
    if let Some(t) = args.threads {
        o.threads = t;
    }
    o.frame_size = args.frame_size.unwrap_or(DEFAULT_FRAME_SIZE);
    o.members.sort = match args.sort {
        SortArg::None => SortOrder::None,
        SortArg::Name => SortOrder::Name,
    };
    o.members.mtime = args.mtime.as_deref().map(parse_time).transpose().map_err(usage)?;
    o.members.owner = args.owner.as_deref().map(|s| Owner::parse(s, false)).transpose().map_err(usage)?;
    o.members.group = args.group.as_deref().map(|s| Owner::parse(s, true)).transpose().map_err(usage)?;
    o.members.numeric_owner = args.numeric_owner;
    o.members.exclude =
        args.exclude.iter().map(|g| glob::Pattern::new(g).map_err(|e| usage(format!("invalid --exclude pattern '{g}': {e}")))).collect::<Result<_>>()?;
    o.members.one_file_system = args.one_file_system;
    o.members.xattrs = args.xattrs;
    o.members.acls = args.acls;
    o.durability = cacheless::Durability::synced(!args.no_sync);
    o.read_threads = args.read_threads;
    o.io = io;
    o.progress = Some(progress.clone());
    // Ctrl-C / SIGTERM stop between members and chunks; the unfinished archive is removed.
    let signals = ui::Signals::register(&progress);
    let res = {
        let _bar = ui::Bar::start(&progress, common.json, ui::Measure::Pack);
        pack(o)
    };
    // An upload is complete only when `finish` completes it: a signal before that aborts it.
    let uploaded = match (res.is_ok(), upload) {
        (true, Some(h)) => Some(h.finish()),
        _ => None,
    };
    // A signal that came after the archive was complete (during its final sync) changes nothing.
    if let Some(code) = signals.exit_code().filter(|_| res.is_err() || uploaded.as_ref().is_some_and(Result::is_err)) {
        eprintln!("cacheless: interrupted; the unfinished archive was removed");
        return Ok(code);
    }
    let mut report = res.with_context(|| format!("pack {}", args.output.display()))?;
    if let Some(up) = uploaded {
        let up = up.with_context(|| format!("pack {}", args.output.display()))?;
        report.output_bytes = up.bytes;
        if common.verbose > 0 && !common.json {
            let how = if up.parts == 0 { "one PUT".to_string() } else { format!("{} parts", up.parts) };
            eprintln!("cacheless: {}: uploaded {} in {how}, ETag {}", args.output.display(), ui::size(up.bytes), up.etag.as_deref().unwrap_or("none"));
        }
    }
    ui::print_members(&report.warnings, &report.failures, report.failure_count);
    if common.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if common.verbose > 0 {
        let m = &report.read_modes;
        let ratio = report.output_bytes as f64 / (report.tar_bytes.max(1)) as f64;
        eprintln!(
            "packed {} files ({}), {} dirs, {} symlinks, {} hard links in {:.2} s ({}); {} level {}: {} -> {} ({:.1} %), {} frames on {} threads; read: direct {}, dontcache {}, writebehind {}, buffered {}; archive: {}",
            report.files,
            ui::size(report.input_bytes),
            report.dirs,
            report.symlinks,
            report.hardlinks,
            report.elapsed_s,
            ui::rate(report.input_bytes, report.elapsed_s),
            report.compression.name(),
            report.level,
            ui::size(report.tar_bytes),
            ui::size(report.output_bytes),
            ratio * 100.0,
            report.frames,
            report.threads,
            m.direct,
            m.dontcache,
            m.writebehind,
            m.buffered,
            match &report.write {
                Some(w) => format!("{} ({}){}", w.decision.mode, w.decision.reason, if w.synced { ", synced" } else { ", not synced (--no-sync)" }),
                None => "standard output".into(),
            },
        );
    }
    Ok(if report.is_ok() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
