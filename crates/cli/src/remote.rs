//! URLs on the command line (`s3://`, `http://`, `https://`): `cp` downloads and uploads, and
//! `cat`, `hash` and `info` of an object. The transfers are the remote crate's; this module
//! maps operands to transfers as `aws s3 cp` does (a prefix to a folder, a folder to a prefix),
//! says what it did as cp does, and exits as cp does.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use cacheless::{Error, ErrorKind, IoOptions, Progress, WriteOptions};
use cacheless_remote::{download_file, is_url, upload_file, verify_download, Location, ObjectInfo, Remote, RemoteOptions};
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
            o.storage_options.push(("aws_endpoint_url".into(), e.clone()));
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
    p.to_str().is_some_and(is_url)
}

/// One client per bucket or origin, made when first needed.
#[derive(Default)]
pub struct Clients {
    opts: RemoteOptions,
    made: Vec<Remote>,
}

impl Clients {
    /// Clients with these options.
    pub fn new(opts: RemoteOptions) -> Clients {
        Clients { opts, made: Vec::new() }
    }

    /// The client for `loc`'s store.
    pub fn of(&mut self, loc: &Location) -> Result<&Remote, Error> {
        let i = match self.made.iter().position(|r| r.serves(loc)) {
            Some(i) => i,
            None => {
                self.made.push(Remote::connect(loc, &self.opts)?);
                self.made.len() - 1
            }
        };
        Ok(&self.made[i])
    }
}

/// What `cp` was asked, for the URL transfers.
pub struct CpRemote<'a> {
    pub srcs: &'a [PathBuf],
    pub dst: &'a Path,
    pub recursive: bool,
    /// `-n`: skip what exists.
    pub no_clobber: bool,
    /// `-u`: skip what exists with the same size and a time no older.
    pub update: bool,
    pub verbose: bool,
    pub json: bool,
    pub verify: bool,
    pub sync: bool,
    pub io: IoOptions,
    pub flags: RemoteFlags,
    pub prog: &'a str,
}

/// One transfer's result, for `--json`.
#[derive(serde::Serialize)]
struct Row {
    source: String,
    destination: String,
    bytes: u64,
    skipped: bool,
    /// Ranged GETs (downloads) or parts (uploads; 0 for one PUT).
    requests: u64,
    mode: Option<String>,
    etag: Option<String>,
    verified: Option<bool>,
    seconds: f64,
}

fn text(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// `cacheless cp` with a URL among its operands.
pub fn cp(c: &CpRemote<'_>) -> ExitCode {
    let progress = Arc::new(Progress::new());
    let signals = ui::Signals::register(&progress);
    let cancel = progress.cancel_flag();
    let mut clients = Clients::new(c.flags.options());
    let mut rows = Vec::new();
    let start = std::time::Instant::now();
    let result = {
        let _bar = (!c.json).then(|| ui::Bar::start(&progress, c.json, ui::Measure::Output));
        run_cp(c, &mut clients, &cancel, &progress, &mut rows)
    };
    if let Some(code) = signals.exit_code() {
        eprintln!("{}: interrupted; nothing unfinished was left under a final name or key", c.prog);
        return code;
    }
    if let Err(e) = result {
        print(c.prog, &e);
        progress.error();
    }
    if c.json {
        let v = serde_json::json!({
            "transfers": rows,
            "bytes": rows.iter().map(|r| r.bytes).sum::<u64>(),
            "errors": progress.errors(),
            "elapsed_s": start.elapsed().as_secs_f64(),
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    }
    if progress.errors() > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// A failed transfer, as cp prints one, with what to try on the next line.
fn print(prog: &str, e: &Error) {
    eprintln!("{prog}: {}", ui::printable(&e.to_string()));
    if let Some(n) = e.note() {
        eprintln!("{prog}: {n}");
    }
}

/// One file's transfer.
enum Job {
    Download(ObjectInfo, PathBuf),
    Upload(PathBuf, Location),
}

fn run_cp(c: &CpRemote<'_>, clients: &mut Clients, cancel: &AtomicBool, progress: &Progress, rows: &mut Vec<Row>) -> Result<(), Error> {
    let jobs = plan(c, clients, progress)?;
    let Some(first) = jobs.first() else { return Ok(()) };
    let loc = match first {
        Job::Download(i, _) => i.location.clone(),
        Job::Upload(_, l) => l.clone(),
    };
    // Every job is in one bucket or origin (one client); files run `concurrency` at a time,
    // each with its own ranges or parts in flight, all inside the one memory budget.
    let remote = clients.of(&loc)?;
    let workers = remote.options().concurrency.clamp(1, jobs.len());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(job) = jobs.get(i) else { break };
                if cancel.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let r = match job {
                    Job::Download(info, to) => one_download(c, remote, info, to, cancel, progress),
                    Job::Upload(from, to) => one_upload(c, remote, from, to, cancel, progress),
                };
                match r {
                    Ok(row) => done.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((i, row)),
                    Err(e) if e.kind() == ErrorKind::Interrupted => break,
                    Err(e) => {
                        print(c.prog, &e);
                        progress.error();
                    }
                }
            });
        }
    });
    let mut done = done.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    done.sort_by_key(|(i, _)| *i);
    rows.extend(done.into_iter().map(|(_, r)| r));
    Ok(())
}

/// The transfers the operands ask for, as `aws s3 cp` maps them: a folder's files under a
/// prefix, a prefix's objects under a folder.
fn plan(c: &CpRemote<'_>, clients: &mut Clients, progress: &Progress) -> Result<Vec<Job>, Error> {
    let usage = |m: String| Error::new(ErrorKind::InvalidInput, "cp", c.dst, m);
    let mut jobs = Vec::new();
    if is_remote(c.dst) {
        let dst = Location::parse(&text(c.dst))?;
        if let Some(s) = c.srcs.iter().find(|s| is_remote(s)) {
            return Err(usage(format!("{} to {}: copying between URLs is not supported; download, then upload", text(s), dst)));
        }
        if c.srcs.len() > 1 && !dst.is_prefix() {
            return Err(usage(format!("{dst}: several sources need a prefix (a URL ending in /)")));
        }
        for s in c.srcs {
            let meta = std::fs::metadata(s).map_err(|e| Error::io("stat", s, e))?;
            if meta.is_dir() {
                if !c.recursive {
                    eprintln!("{}: -r not specified; omitting directory {}", c.prog, cacheless::quote::quote(s));
                    progress.error();
                    continue;
                }
                for (file, rel) in walk(s)? {
                    jobs.push(Job::Upload(file, dst.with_key(format!("{}{rel}", prefix_of(&dst)))));
                }
            } else {
                let key = if dst.is_prefix() {
                    let name = s.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                    format!("{}{name}", prefix_of(&dst))
                } else {
                    dst.key().to_string()
                };
                jobs.push(Job::Upload(s.clone(), dst.with_key(key)));
            }
        }
        return Ok(jobs);
    }
    // Downloads: every source is a URL, all in one bucket or origin.
    if let Some(s) = c.srcs.iter().find(|s| !is_remote(s)) {
        return Err(usage(format!("{}: a local source with a URL among the sources: copy them in two commands", text(s))));
    }
    let dst_dir = c.dst.is_dir() || text(c.dst).ends_with('/');
    if c.srcs.len() > 1 && !dst_dir {
        return Err(Error::new(ErrorKind::InvalidInput, "cp", c.dst, format!("target {} is not a directory", cacheless::quote::quote(c.dst))));
    }
    let mut first: Option<Location> = None;
    for s in c.srcs {
        let src = Location::parse(&text(s))?;
        if !first.get_or_insert_with(|| src.clone()).same_store(&src) {
            return Err(usage(format!("{src}: the sources are in more than one bucket or server: copy them in one command each")));
        }
        if src.is_prefix() {
            if !c.recursive {
                return Err(usage(format!("{src}: a prefix needs -r (or name an object: a URL not ending in /)")));
            }
            let objects = clients.of(&src)?.list(&src)?;
            if objects.is_empty() {
                return Err(Error::new(ErrorKind::NotFound, "list", src.to_string(), "no object under this prefix"));
            }
            let base = prefix_of(&src);
            for o in objects {
                // Zero-byte keys ending in / are folder markers, not files.
                let Some(rel) = o.location.key().strip_prefix(&base).filter(|r| !r.is_empty() && !r.ends_with('/')) else { continue };
                let to = c.dst.join(rel);
                jobs.push(Job::Download(o, to));
            }
        } else {
            let to = if dst_dir { c.dst.join(src.file_name().unwrap_or("index.html")) } else { c.dst.to_path_buf() };
            jobs.push(Job::Download(clients.of(&src)?.head(&src)?, to));
        }
    }
    Ok(jobs)
}

/// `loc`'s key as a prefix: empty, or ending in one `/`.
fn prefix_of(loc: &Location) -> String {
    let k = loc.key().trim_end_matches('/');
    if k.is_empty() {
        String::new()
    } else {
        format!("{k}/")
    }
}

/// The regular files under `dir` (symbolic links followed, as `aws s3 cp` does), with their
/// paths relative to it (`/`-separated), in name order.
fn walk(dir: &Path) -> Result<Vec<(PathBuf, String)>, Error> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((d, rel)) = stack.pop() {
        let mut names: Vec<_> = std::fs::read_dir(&d).map_err(|e| Error::io("read directory", &d, e))?.filter_map(|e| e.ok().map(|e| e.file_name())).collect();
        names.sort();
        for n in names.into_iter().rev() {
            let p = d.join(&n);
            let r = format!("{rel}{}", n.to_string_lossy());
            let m = std::fs::metadata(&p).map_err(|e| Error::io("stat", &p, e))?;
            if m.is_dir() {
                stack.push((p, format!("{r}/")));
            } else if m.is_file() {
                out.push((p, r));
            }
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

fn one_download(c: &CpRemote<'_>, remote: &Remote, info: &ObjectInfo, to: &Path, cancel: &AtomicBool, progress: &Progress) -> Result<Row, Error> {
    let source = info.location.to_string();
    if let Ok(m) = std::fs::metadata(to) {
        let same = m.len() == info.size && m.modified().is_ok_and(|t| t >= info.last_modified);
        if c.no_clobber || (c.update && same) {
            return Ok(Row {
                source,
                destination: text(to),
                bytes: 0,
                skipped: true,
                requests: 0,
                mode: None,
                etag: info.etag.clone(),
                verified: None,
                seconds: 0.0,
            });
        }
    }
    if let Some(parent) = to.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| Error::io("create directory", parent, e))?;
    }
    progress.add_total_bytes(info.size);
    let mut wo = WriteOptions::from(c.io.clone());
    wo.sync = c.sync;
    let r = download_file(remote, info, to, &wo, cancel, Some(progress))?;
    let verified = if c.verify {
        let v = verify_download(to, info, &c.io)?;
        if v.is_none() {
            eprintln!("{}: {}: not verified: its ETag is no MD5 of its bytes (a multipart upload's), and the server gives no other checksum", c.prog, source);
        }
        v.map(|_| true)
    } else {
        None
    };
    if c.verbose && !c.json {
        println!("{} -> {}", cacheless::quote::quote(Path::new(&source)), cacheless::quote::quote(to));
        eprintln!(
            "{}: {}: {} in {} ranges, {}; written {} ({})",
            c.prog,
            source,
            ui::size(r.fetch.bytes),
            r.fetch.ranges,
            if r.fetch.ranged { "ranged" } else { "one stream: the server does not do ranges" },
            r.write.decision.mode,
            r.write.decision.reason
        );
    }
    Ok(Row {
        source,
        destination: text(to),
        bytes: r.fetch.bytes,
        skipped: false,
        requests: r.fetch.ranges,
        mode: Some(r.write.decision.mode.to_string()),
        etag: info.etag.clone(),
        verified,
        seconds: r.fetch.elapsed_s,
    })
}

fn one_upload(c: &CpRemote<'_>, remote: &Remote, from: &Path, dst: &Location, cancel: &AtomicBool, progress: &Progress) -> Result<Row, Error> {
    if c.no_clobber || c.update {
        match remote.head(dst) {
            Ok(existing) => {
                let m = std::fs::metadata(from).map_err(|e| Error::io("stat", from, e))?;
                let same = m.len() == existing.size && m.modified().is_ok_and(|t| existing.last_modified >= t);
                if c.no_clobber || same {
                    return Ok(Row {
                        source: text(from),
                        destination: dst.to_string(),
                        bytes: 0,
                        skipped: true,
                        requests: 0,
                        mode: None,
                        etag: existing.etag,
                        verified: None,
                        seconds: 0.0,
                    });
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    if let Ok(m) = std::fs::metadata(from) {
        progress.add_total_bytes(m.len());
    }
    let r = upload_file(remote, from, dst, &c.io, c.verify, cancel, Some(progress))?;
    if c.verbose && !c.json {
        println!("{} -> {}", cacheless::quote::quote(from), cacheless::quote::quote(Path::new(&dst.to_string())));
        let how = if r.parts == 0 { "one PUT".to_string() } else { format!("{} parts", r.parts) };
        eprintln!("{}: {}: {} in {how}, read {} ({})", c.prog, dst, ui::size(r.bytes), r.read.mode, r.read.reason);
    }
    Ok(Row {
        source: text(from),
        destination: dst.to_string(),
        bytes: r.bytes,
        skipped: false,
        requests: r.parts,
        mode: Some(r.read.mode.to_string()),
        etag: r.etag,
        verified: r.verified.map(|_| true),
        seconds: r.elapsed_s,
    })
}

/// The object at `url`, its bytes passed to `out` in order (`cat`, `hash`): ranges in flight as
/// a download runs them, those that arrive early held in their buffers (the budget bounds them).
pub fn stream(url: &Path, io: &IoOptions, flags: &RemoteFlags, cancel: &AtomicBool, out: impl FnMut(&[u8]) -> Result<(), Error>) -> Result<(), Error> {
    let loc = Location::parse(&text(url))?;
    let remote = Remote::connect(&loc, &flags.options())?;
    let info = remote.head(&loc)?;
    let mut sink = cacheless_remote::Ordered::new(out);
    cacheless_remote::fetch(&remote, &info, &io.budget, 0, cancel, None, &mut sink)?;
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
    let page = cacheless::sys::page_size();
    let part = cacheless::round_up(opts.part_size.max(page), page);
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

/// A download's share of `budget` (its ranges in flight, at most a quarter of the whole, at
/// least one range), and the rest: two budgets whose sum is the one given.
pub fn split_budget(budget: &cacheless::Budget, flags: &RemoteFlags) -> (cacheless::Budget, cacheless::Budget) {
    let o = flags.options();
    let total = budget.limit();
    let want = o.part_size.saturating_mul(o.concurrency).min(total / 4).max(o.part_size.min(total / 2)).max(1);
    (cacheless::Budget::new(want), cacheless::Budget::new(total.saturating_sub(want).max(1)))
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
    if loc.is_prefix() {
        return Err(Error::new(ErrorKind::InvalidInput, "pack", loc.to_string(), "an archive needs a key, not a prefix (a URL ending in /)"));
    }
    let remote = Arc::new(Remote::connect(&loc, &flags.options())?);
    Ok(cacheless_remote::upload_stream(remote, &loc, budget, cancel))
}
