//! URLs on the command line (`s3://`, `http://`, `https://`): `cp` downloads and uploads, and
//! `cat`, `hash` and `info` of an object. The transfers are the remote crate's; this module
//! maps operands to transfers as `aws s3 cp` does (a prefix to a folder, a folder to a prefix),
//! says what it did as cp does, and exits as cp does.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use cacheless::{Error, IoOptions, Progress};
use cacheless_remote::{copy, CopyOptions, Location, Remote, RemoteOptions, Transfer};
use clap::Args;

use crate::ui;

/// The flags of transfers to and from URLs (every command that takes one).
#[derive(Args, Debug, Clone, Default)]
pub struct RemoteFlags {
    /// Bytes per ranged GET and per uploaded part [default: 8M; parts at least 5M].
    #[arg(long, global = true, value_parser = parse_part_size)]
    pub part_size: Option<usize>,
    /// Requests in flight per transfer [default: 8].
    #[arg(long, global = true, value_parser = parse_concurrency)]
    pub concurrency: Option<usize>,
    /// Send S3 requests unsigned (a public bucket).
    #[arg(long, global = true)]
    pub no_sign_request: bool,
    /// The S3 endpoint (in place of AWS_ENDPOINT_URL), addressed path-style.
    #[arg(long, global = true, value_name = "URL")]
    pub endpoint_url: Option<String>,
}

/// `--part-size`: 64 KiB to 5 GiB (S3's largest part).
pub fn parse_part_size(s: &str) -> Result<usize, String> {
    let v = cacheless::parse_size(s).map_err(|e| e.to_string())?;
    if !(64 << 10..=5 << 30).contains(&v) {
        return Err(format!("invalid value '{s}' for '--part-size': from 64K to 5G"));
    }
    usize::try_from(v).map_err(|e| e.to_string())
}

/// `--concurrency`: 1 to 256.
pub fn parse_concurrency(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(v) if (1..=256).contains(&v) => Ok(v),
        _ => Err(format!("invalid value '{s}' for '--concurrency': a whole number from 1 to 256")),
    }
}

impl RemoteFlags {
    /// The transfers' options.
    pub fn options(&self) -> RemoteOptions {
        let mut o = RemoteOptions::default();
        if let Some(p) = self.part_size {
            o.part_size = p;
        }
        if let Some(c) = self.concurrency {
            o.concurrency = c;
        }
        o.no_sign_request = self.no_sign_request;
        if let Some(e) = &self.endpoint_url {
            o.endpoint = Some(e.clone());
        }
        o
    }

    /// These flags, with `over`'s where it gives them.
    pub fn or(&self, over: &RemoteFlags) -> RemoteFlags {
        RemoteFlags {
            part_size: over.part_size.or(self.part_size),
            concurrency: over.concurrency.or(self.concurrency),
            no_sign_request: self.no_sign_request || over.no_sign_request,
            endpoint_url: over.endpoint_url.clone().or_else(|| self.endpoint_url.clone()),
        }
    }
}

/// Whether an operand is a URL.
pub fn is_remote(p: &Path) -> bool {
    cacheless_remote::url_of(p).is_some()
}

/// What `cp` was asked, for the URL transfers.
pub struct CpRemote<'a> {
    pub srcs: &'a [PathBuf],
    pub dst: &'a Path,
    pub recursive: bool,
    /// `-n`: skip what exists.
    pub no_clobber: bool,
    /// `-u`: skip what exists with the same size and the ETag it landed with (else a time no
    /// older).
    pub update: bool,
    pub verbose: bool,
    pub json: bool,
    pub verify: bool,
    pub sync: bool,
    pub io: IoOptions,
    pub flags: RemoteFlags,
    pub prog: &'a str,
}

fn text(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// `cacheless cp` with a URL among its operands.
pub fn cp(c: &CpRemote<'_>) -> ExitCode {
    let progress = Arc::new(Progress::new());
    let signals = ui::Signals::register(&progress);
    let cancel = progress.cancel_flag();
    let mut o = CopyOptions::new(c.io.clone(), c.flags.options());
    o.recursive = c.recursive;
    o.no_clobber = c.no_clobber;
    o.update = c.update;
    o.verify = c.verify;
    o.sync = c.sync;
    let prog = c.prog.to_string();
    o.on_error = Some(Arc::new(move |e: &Error| print(&prog, e)));
    let (prog, verbose, verify) = (c.prog.to_string(), c.verbose && !c.json, c.verify);
    o.on_done = Some(Arc::new(move |t: &Transfer| said(&prog, t, verbose, verify)));
    let result = {
        let _bar = (!c.json).then(|| ui::Bar::start(&progress, c.json, ui::Measure::Output));
        copy(c.srcs, c.dst, &o, &cancel, &progress)
    };
    if let Some(code) = signals.exit_code() {
        eprintln!("{}: interrupted; nothing unfinished was left under a final name or key", c.prog);
        return code;
    }
    let failed = match result {
        Ok(r) => {
            if c.json {
                println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
            }
            r.errors > 0 || progress.errors() > 0
        }
        Err(e) => {
            print(c.prog, &e);
            true
        }
    };
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// What `-v` says of a transfer, as cp says it (`'a' -> 'b'`) and how it went; with `--verify`,
/// a transfer that could not be checked.
fn said(prog: &str, t: &Transfer, verbose: bool, verify: bool) {
    if verify && t.download && !t.skipped && t.verified.is_none() {
        eprintln!("{prog}: {}: not verified: its ETag is no MD5 of its bytes (a multipart upload's), and the server gives no other checksum", t.source);
    }
    if !verbose || t.skipped {
        return;
    }
    println!("{} -> {}", cacheless::quote::quote(Path::new(&t.source)), cacheless::quote::quote(Path::new(&t.destination)));
    let how = match (t.download, t.ranged, t.requests) {
        (true, true, n) => format!("{n} ranges"),
        (true, false, _) => "one stream: the server does not do ranges".to_string(),
        (false, _, 0) => "one PUT".to_string(),
        (false, _, n) => format!("{n} parts"),
    };
    let (mode, reason) = (t.mode.as_deref().unwrap_or(""), t.reason.as_deref().unwrap_or(""));
    let what = if t.download { "written" } else { "read" };
    let url = if t.download { &t.source } else { &t.destination };
    eprintln!("{prog}: {url}: {} in {how}; {what} {mode} ({reason})", ui::size(t.bytes));
}

/// A failed transfer, as cp prints one, with what to try on the next line.
fn print(prog: &str, e: &Error) {
    eprintln!("{prog}: {}", ui::printable(&e.to_string()));
    if let Some(n) = e.note() {
        eprintln!("{prog}: {n}");
    }
}

/// The object at `url`, its bytes passed to `out` in order (`cat`, `hash`): ranges in flight as
/// a download runs them, those that arrive early held in their buffers (the budget bounds them).
pub fn stream(url: &Path, io: &IoOptions, flags: &RemoteFlags, cancel: &AtomicBool, out: impl FnMut(&[u8]) -> Result<(), Error>) -> Result<(), Error> {
    let loc = Location::parse(&text(url))?;
    let remote = Remote::connect(&loc, &flags.options())?;
    let info = remote.head(&loc)?;
    let mut sink = cacheless_remote::Ordered::new(out);
    // Ranges that arrive before the one awaited wait in buffers of their own, as many as are in
    // flight, so that one slow range does not stop the others.
    cacheless_remote::fetch(&remote, &info, &io.budget, remote.options().concurrency, cancel, None, &mut sink)?;
    Ok(())
}

/// What `info URL` reports.
#[derive(serde::Serialize)]
pub struct ObjectReport {
    pub url: String,
    pub size: u64,
    pub etag: Option<String>,
    /// Whether the ETag is the MD5 of the bytes (what `cp --verify` checks against).
    pub etag_is_md5: bool,
    /// Seconds since the epoch.
    pub last_modified: f64,
    /// Whether the server answers ranged GETs (206).
    pub ranges: bool,
    /// What a download would do: ranged GETs of `part_size`, `in_flight` at once.
    pub requests: u64,
    pub part_size: usize,
    pub in_flight: usize,
}

/// `info URL`: the object's size and identity, whether ranges work, and what a download would do.
pub fn describe(url: &Path, io: &IoOptions, flags: &RemoteFlags) -> Result<ObjectReport, Error> {
    let loc = Location::parse(&text(url))?;
    let opts = flags.options();
    let remote = Remote::connect(&loc, &opts)?;
    let info = remote.head(&loc)?;
    let ranges = remote.ranges(&info)?;
    let part = opts.range_size();
    let requests = if ranges { info.size.div_ceil(part as u64) } else { 1 };
    let fit = (io.budget.limit() / part).max(1);
    let in_flight = if ranges { opts.concurrency.min(fit).min(usize::try_from(requests).unwrap_or(usize::MAX)).max(1) } else { 1 };
    Ok(ObjectReport {
        url: loc.to_string(),
        size: info.size,
        etag_is_md5: info.etag.as_deref().is_some_and(cacheless_remote::etag_is_md5),
        etag: info.etag,
        last_modified: info.last_modified.duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()),
        ranges,
        requests,
        part_size: part,
        in_flight,
    })
}

/// The report as `info` prints it.
pub fn print_report(r: &ObjectReport) {
    println!("{}", r.url);
    println!("  size           {} ({} B)", ui::size(r.size), r.size);
    let what = if r.etag_is_md5 { " (the MD5 of its bytes: cp --verify checks it)" } else { "" };
    println!("  ETag           {}{what}", r.etag.as_deref().unwrap_or("none"));
    println!("  last modified  {}", utc(r.last_modified));
    println!("  ranges         {}", if r.ranges { "yes (206 Partial Content)" } else { "no: the server sends the whole object; a download is one stream" });
    println!(
        "  a download     {} request{} of up to {}, {} in flight, each into a buffer of the memory budget",
        r.requests,
        if r.requests == 1 { "" } else { "s" },
        ui::size(r.part_size as u64),
        r.in_flight
    );
}

/// Seconds since the epoch as `YYYY-MM-DD HH:MM:SS UTC`.
fn utc(secs: f64) -> String {
    #[allow(clippy::cast_possible_truncation)]
    let s = secs.floor() as i64;
    let (days, rem) = (s.div_euclid(86_400), s.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// A streamed transfer's share of `budget`, and the rest (see `cacheless_remote::split_budget`).
pub fn split_budget(budget: &cacheless::Budget, flags: &RemoteFlags) -> (cacheless::Budget, cacheless::Budget) {
    cacheless_remote::split_budget(budget, &flags.options())
}

/// `extract URL`: the object as the archive's input, read in order while its ranges download
/// ahead into `budget`.
pub fn archive_input(url: &Path, budget: &cacheless::Budget, flags: &RemoteFlags) -> Result<cacheless_archive::Input, Error> {
    let loc = Location::parse(&text(url))?;
    let opts = flags.options();
    let remote = Arc::new(Remote::connect(&loc, &opts)?);
    let info = remote.head(&loc)?;
    let in_flight = opts.concurrency.min((budget.limit() / opts.part_size.max(1)).max(1));
    let reason =
        format!("ranged GETs of {}, up to {in_flight} in flight, pinned to ETag {}", ui::size(opts.part_size as u64), info.etag.as_deref().unwrap_or("none"));
    let len = Some(info.size);
    let reader = cacheless_remote::ObjectReader::open(remote, info, budget.clone())?;
    Ok(cacheless_archive::Input::Named { reader: Box::new(reader), mode: "remote".into(), reason, len })
}

/// `pack -o URL`: a writer whose bytes are uploaded as parts as they come, and the handle that
/// completes the object.
pub fn archive_output(
    url: &Path,
    budget: &cacheless::Budget,
    flags: &RemoteFlags,
    cancel: Arc<AtomicBool>,
) -> Result<(cacheless_remote::ObjectWriter, cacheless_remote::UploadHandle), Error> {
    let loc = Location::parse(&text(url))?;
    let remote = Arc::new(Remote::connect(&loc, &flags.options())?);
    cacheless_remote::upload_stream(remote, &loc, budget, cancel)
}

/// `cacheless bench-helper fetch URL`: the object's ranges fetched and dropped as they arrive,
/// in any order: the rate the server and the network give a client that writes nothing (the
/// limit bench/remote.sh compares downloads with). Returns the bytes received.
pub fn discard(url: &Path, io: &IoOptions, flags: &RemoteFlags) -> Result<u64, Error> {
    struct Drop;
    impl cacheless_remote::Sink for Drop {
        fn put(&mut self, _: u64, _: cacheless::AlignedBuf, _: usize) -> Result<(), Error> {
            Ok(())
        }
        fn release(&mut self) -> Result<bool, Error> {
            Ok(false)
        }
    }
    let loc = Location::parse(&text(url))?;
    let remote = Remote::connect(&loc, &flags.options())?;
    let info = remote.head(&loc)?;
    let r = cacheless_remote::fetch(&remote, &info, &io.budget, 0, &AtomicBool::new(false), None, &mut Drop)?;
    Ok(r.bytes)
}
