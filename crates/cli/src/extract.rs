//! `cacheless extract`: unpack tar archives (zstd, gzip, xz, lz4, bzip2 or plain) off the page
//! cache, safely. The work is done by `cacheless_archive::extract`; this module maps flags,
//! draws progress and prints the outcome.

use crate::ExitCode;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use cacheless::{Durability, Progress};
use cacheless_archive::{extract, ExtractOptions, Input, Listing, OldFiles};
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
    /// Extract into this directory (created if missing). As GNU tar's, several are taken in
    /// turn, each relative to the one before: one given after member names is where the members
    /// named after it go.
    #[arg(short = 'C', long = "directory")]
    pub directory: Vec<PathBuf>,
    /// Take member names as they are, as GNU tar -P: an absolute name from '/', a `..` going
    /// up, wherever that leads (by default a leading '/' is removed and `..` refused).
    #[arg(short = 'P', long)]
    pub absolute_names: bool,
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
    /// GNU tar's warning controls, as its --warning takes them: `timestamp` (a time stamp before
    /// 1970 or in the future), `unknown-keyword` (an extended header keyword GNU tar does not
    /// know), `all`, `none`, each with `no-` to silence it; GNU's other keywords name warnings
    /// this command never gives, and are taken as they are.
    #[arg(long = "warning", value_name = "KEYWORD", value_parser = parse_warning)]
    pub warning: Vec<String>,
    /// Read past zero blocks to the input's end: archives written one after another
    /// (`cat a.tar b.tar`) extract whole, as with GNU tar's -i.
    #[arg(short = 'i', long)]
    pub ignore_zeros: bool,
    /// Write a member into the regular file already where it goes (its inode kept: its other
    /// hard links see the new data), as GNU tar; a symlink there is replaced (followed with -h).
    #[arg(long)]
    pub overwrite: bool,
    /// With --overwrite, follow a symlink where a file member goes and write the file it names.
    #[arg(short = 'h', long)]
    pub dereference: bool,
    /// Existing folders keep their mode and time.
    #[arg(long)]
    pub no_overwrite_dir: bool,
    /// Rename an existing entry (not a folder) that a member replaces to a backup name first,
    /// as GNU tar: CONTROL is none/off, simple/never (NAME~), numbered/t (NAME.~N~) or
    /// existing/nil (numbered where numbered backups exist; the default, or $VERSION_CONTROL).
    #[arg(long, value_name = "CONTROL", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    pub backup: Option<std::ffi::OsString>,
    /// The suffix of simple backups (default `~`, or $SIMPLE_BACKUP_SUFFIX); implies --backup.
    #[arg(long, value_name = "STRING")]
    pub suffix: Option<std::ffi::OsString>,
    /// Rename members with a sed-like expression, as GNU tar: `s/REGEX/REPLACEMENT/FLAGS`
    /// (basic regular expressions; flags g, N, i, x, and r/s/h to choose member names, symlink
    /// and hard link targets), several separated by `;`; repeat for more.
    #[arg(long, visible_alias = "xform", value_name = "EXPRESSION")]
    pub transform: Vec<std::ffi::OsString>,
    /// With -v, name members as they are extracted (after --transform, --strip-components and
    /// --one-top-level).
    #[arg(long, overrides_with = "show_stored_names")]
    pub show_transformed_names: bool,
    /// With -v, name members as stored in the archive (the default).
    #[arg(long, overrides_with = "show_transformed_names")]
    pub show_stored_names: bool,
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
    /// Restore the members' extended attributes (pax `SCHILY.xattr.*`, as GNU tar `--xattrs`
    /// writes them): by default those in the `user.*` namespace only, as GNU tar.
    #[arg(long, overrides_with = "no_xattrs")]
    pub xattrs: bool,
    /// Restore no extended attributes (the default).
    #[arg(long, overrides_with = "xattrs")]
    pub no_xattrs: bool,
    /// Restore the extended attributes whose name matches MASK (`*`, `?`, `[...]`), in place of
    /// `user.*`; implies --xattrs. Repeat for more.
    #[arg(long, value_name = "MASK")]
    pub xattrs_include: Vec<String>,
    /// Do not restore the extended attributes whose name matches MASK; implies --xattrs.
    #[arg(long, value_name = "MASK")]
    pub xattrs_exclude: Vec<String>,
    /// Restore POSIX ACLs (pax `SCHILY.acl.*`, GNU tar `--acls`): a member without one gets the
    /// ACL its mode says, a folder without a default ACL loses one it inherited.
    #[arg(long, overrides_with = "no_acls")]
    pub acls: bool,
    /// Restore no ACLs (the default).
    #[arg(long, overrides_with = "acls")]
    pub no_acls: bool,
    /// Print help (-h is GNU tar's --dereference here).
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
    /// Worker threads writing file data (default: 2 per CPU, 4 to 16).
    #[arg(long, value_parser = crate::common::parse_threads)]
    pub threads: Option<usize>,
    /// Threads decoding a multi-frame zstd archive, a frame each (default: one per CPU, at most
    /// 8; 1: one thread). A single-frame archive, and the other formats, use one.
    #[arg(long, value_name = "N", value_parser = crate::common::parse_decompress_threads)]
    pub decompress_threads: Option<usize>,
    /// Accept zstd frames with windows up to 2^WINDOWLOG bytes, as `zstd -d --long=WINDOWLOG`
    /// (10 to 31; alone: 31), for archives made with `zstd --long`; the default limit is zstd's,
    /// 2^27.
    #[arg(long, value_name = "WINDOWLOG", num_args = 0..=1, require_equals = true, default_missing_value = "31", value_parser = clap::value_parser!(u32).range(10..=31))]
    pub long: Option<u32>,
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

/// The destination and GNU tar's `-C` between member names (see
/// `ExtractOptions::chdirs`): each `-C` is joined to the one before it; those before the first
/// name make the destination, each later one sends the names after it (their index among the
/// member names) to its folder. Where the `-C` stand among the names comes from the command
/// line's matches (clap keeps each value's position).
fn directories(args: &ExtractArgs, matches: Option<&clap::ArgMatches>) -> (PathBuf, Vec<(usize, PathBuf)>) {
    let mut cur = PathBuf::new();
    let mut dest = None;
    let mut chdirs: Vec<(usize, PathBuf)> = Vec::new();
    let positions = (args.directory.len() > 1 && !args.members.is_empty())
        .then(|| {
            let sub = matches?;
            let dirs: Vec<usize> = sub.indices_of("directory")?.collect();
            let names: Vec<usize> = sub.indices_of("members")?.collect();
            Some((dirs, names))
        })
        .flatten();
    for (n, dir) in args.directory.iter().enumerate() {
        cur = cur.join(dir);
        let before = positions.as_ref().map_or(0, |(dirs, names)| names.iter().filter(|&&i| i < dirs[n]).count());
        match chdirs.last_mut() {
            _ if before == 0 => dest = Some(cur.clone()),
            Some((from, last)) if *from == before => *last = cur.clone(),
            _ => chdirs.push((before, cur.clone())),
        }
    }
    (dest.unwrap_or_else(|| PathBuf::from(".")), chdirs)
}

/// GNU tar's one choice about existing entries, from `-k`, `--skip-old-files`, `--overwrite`
/// and `--no-overwrite-dir`: two of them are refused as GNU refuses them, naming the later one
/// first (their order comes from the command line's matches).
fn old_files(args: &ExtractArgs, matches: Option<&clap::ArgMatches>) -> Result<OldFiles> {
    let given = [args.keep_old_files, args.skip_old_files, args.overwrite, args.no_overwrite_dir];
    let ids = ["keep_old_files", "skip_old_files", "overwrite", "no_overwrite_dir"];
    let mut chosen: Vec<(usize, (&str, OldFiles))> =
        (0..4).filter(|&i| given[i]).map(|i| (matches.and_then(|m| m.index_of(ids[i])).unwrap_or(i), OldFiles::OPTIONS[i])).collect();
    chosen.sort_by_key(|&(at, _)| at);
    match chosen.as_slice() {
        [] => Ok(OldFiles::Replace),
        [(_, (_, one))] => Ok(*one),
        [(_, (first, _)), (_, (later, _)), ..] => Err(ui::UsageError(format!("'{later}' cannot be used with '{first}'")).into()),
    }
}

/// Runs `cacheless extract`: exit 0 when every member was extracted, 1 otherwise, 130 or 143
/// when interrupted by SIGINT or SIGTERM.
pub fn run(args: &ExtractArgs, common: &CommonOpts, matches: Option<&clap::ArgMatches>) -> Result<ExitCode> {
    let progress = Arc::new(Progress::new());
    let (dest, chdirs) = directories(args, matches);
    let mut opts = ExtractOptions::new(dest);
    opts.chdirs = chdirs;
    opts.absolute_names = args.absolute_names;
    opts.strip_components = args.strip_components;
    opts.io = common.io();
    // A URL's download reads ahead into a share of the memory budget of its own (the
    // extraction's writers hold the rest: neither waits on memory the other holds).
    let fetch_budget = match crate::remote::is_remote(&args.archive) {
        true => {
            let (fetch, rest) = crate::remote::split_budget(&opts.io.budget, &common.remote).with_context(|| format!("extract {}", args.archive.display()))?;
            opts.io.budget = rest;
            Some(fetch)
        }
        false => None,
    };
    let write_back = match args.writeback_batch {
        Some(0) => None,
        Some(b) => Some(b),
        None => Some(cacheless_archive::DEFAULT_WRITE_BACK),
    };
    opts.durability = Durability::batched(!args.no_sync, write_back);
    opts.old_files = old_files(args, matches)?;
    opts.ignore_zeros = args.ignore_zeros;
    for w in &args.warning {
        let (on, word) = w.strip_prefix("no-").map_or((true, w.as_str()), |rest| (false, rest));
        match word {
            "timestamp" => opts.warn_timestamp = on,
            "unknown-keyword" => opts.warn_unknown_keyword = on,
            "all" => (opts.warn_timestamp, opts.warn_unknown_keyword) = (true, true),
            "none" => (opts.warn_timestamp, opts.warn_unknown_keyword) = (false, false),
            _ => {}
        }
    }
    opts.keep_directory_symlink = args.keep_directory_symlink;
    if let Some(top) = &args.one_top_level {
        opts.one_top_level = Some(one_top_level(Path::new(top), &args.archive)?);
    }
    if !args.transform.is_empty() {
        let mut t = cacheless_archive::transform::Transform::new();
        for expr in &args.transform {
            t.add(expr.as_encoded_bytes()).map_err(ui::UsageError)?;
        }
        opts.transform = Some(Arc::new(t));
    }
    opts.show_transformed_names = args.show_transformed_names;
    opts.dereference = args.dereference;
    // GNU tar: --suffix implies --backup.
    if args.backup.is_some() || args.suffix.is_some() {
        let control = args.backup.clone().unwrap_or_default();
        let kind = crate::cp::args::backup_kind(Some(control.clone()).filter(|c| !c.is_empty())).map_err(|stop| match stop {
            crate::cp::args::Stop::Invalid(m) => ui::UsageError(m),
            _ => ui::UsageError(format!("--backup={}: not a backup type", control.to_string_lossy())),
        })?;
        // GNU: a suffix that is empty or holds a slash is not used.
        let suffix = args.suffix.clone().or_else(|| std::env::var_os("SIMPLE_BACKUP_SUFFIX"));
        let suffix = suffix.filter(|s| !s.is_empty() && !s.as_encoded_bytes().contains(&b'/')).map(|s| s.to_string_lossy().into_owned());
        opts.backup = kind.map(|k| (k, suffix.unwrap_or_else(|| "~".into())));
    }
    opts.to_stdout = args.to_stdout;
    opts.members = member_names(args)?;
    let pattern = |flag: &str, p: &String| glob::Pattern::new(p).map_err(|e| ui::UsageError(format!("--{flag} {p:?}: {e}")));
    for p in &args.exclude {
        opts.exclude.push(pattern("exclude", p)?);
    }
    for p in &args.xattrs_include {
        opts.xattrs_include.push(pattern("xattrs-include", p)?);
    }
    for p in &args.xattrs_exclude {
        opts.xattrs_exclude.push(pattern("xattrs-exclude", p)?);
    }
    // GNU tar: an include or exclude mask turns --xattrs on.
    opts.xattrs = (args.xattrs || !args.xattrs_include.is_empty() || !args.xattrs_exclude.is_empty()) && !args.no_xattrs;
    opts.acls = args.acls;
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
        opts.decompress_threads = t;
    }
    opts.zstd_window_log_max = args.long;
    opts.progress = Some(progress.clone());
    opts.listing = Listing::of_verbosity(common.verbose);
    if args.debug && common.backend.to_string() != "auto" {
        eprintln!(
            "cacheless: --backend {} applies to reading the archive and writing large files; smaller files are written by the thread-pool creator",
            common.backend
        );
    }

    // Ctrl-C / SIGTERM stop between entries and chunks; the entry being written is removed.
    let signals = ui::Signals::register(&progress);
    let input = match &fetch_budget {
        _ if args.archive.as_os_str() == "-" => Input::Stream(Box::new(cacheless::sys::FdStream(std::io::stdin()))),
        Some(budget) => crate::remote::archive_input(&args.archive, budget, &common.remote).with_context(|| format!("extract {}", args.archive.display()))?,
        None => Input::Path(args.archive.clone()),
    };
    let res = {
        let _bar = ui::Bar::start(&progress, common.json, ui::Measure::Input);
        extract(input, &opts)
    };
    if let Some(code) = signals.exit_code().filter(|_| res.as_ref().map_or(true, |r| r.interrupted || r.fatal.is_some())) {
        eprintln!("cacheless: interrupted; the member being written was removed");
        return Ok(code);
    }
    let report = res.with_context(|| format!("extract {}", args.archive.display()))?;

    ui::print_members(&report.warnings, &report.failures, report.failure_count);
    if let Some(f) = &report.fatal {
        eprintln!("cacheless: {}", ui::printable(f));
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
            report.source.read.mode(),
            report.source.read,
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

/// GNU tar 1.34's warning keywords (`--warning`), each also with `no-`.
const WARNINGS: [&str; 29] = [
    "all",
    "none",
    "alone-zero-block",
    "bad-dumpdir",
    "cachedir",
    "contiguous-cast",
    "file-changed",
    "file-ignored",
    "file-removed",
    "file-shrank",
    "file-unchanged",
    "filename-with-nuls",
    "ignore-archive",
    "ignore-newer",
    "new-directory",
    "rename-directory",
    "symlink-cast",
    "timestamp",
    "unknown-cast",
    "unknown-keyword",
    "xdev",
    "decompress-program",
    "existing-file",
    "xattr-write",
    "record-size",
    "failed-read",
    "missing-zero-blocks",
    "verbose",
    "empty-transform",
];

fn parse_warning(s: &str) -> Result<String, String> {
    let word = s.strip_prefix("no-").unwrap_or(s);
    if WARNINGS.contains(&word) {
        Ok(s.to_string())
    } else {
        Err(format!("{s:?} is not one of GNU tar's warning keywords ({}, each also with no-)", WARNINGS.join(", ")))
    }
}
