//! URLs on the command line (`s3://`, `http://`, `https://`): the transfers' flags, and `cat`,
//! `hash`, `info`, `extract` and `pack` of an object. `cp` with URLs is the copy job's
//! (`cacheless_cp`), as every `cp` is.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use cacheless::{Error, IoOptions};
use cacheless_remote::{limits, Location, Remote, RemoteOptions};
use clap::Args;

use crate::ui;

/// The flags of transfers to and from URLs (every command that takes one): each over its
/// environment variable, by the AWS CLI's names where it has one.
#[derive(Args, Debug, Clone, Default)]
pub struct RemoteFlags {
    /// Bytes per ranged GET and per uploaded part [default: 8M; parts at least 5M; within
    /// --memory].
    #[arg(long, global = true, value_parser = parse_part_size)]
    pub part_size: Option<usize>,
    /// Requests in flight per transfer, and objects at a time [default: 8].
    #[arg(long, global = true, value_parser = parse_concurrency)]
    pub concurrency: Option<usize>,
    /// Send S3 requests unsigned (a public bucket).
    #[arg(long, global = true)]
    pub no_sign_request: bool,
    /// The S3 endpoint (in place of AWS_ENDPOINT_URL), addressed path-style.
    #[arg(long, global = true, value_name = "URL")]
    pub endpoint_url: Option<String>,
    /// The S3 region (in place of AWS_REGION) [default: us-east-1].
    #[arg(long, global = true)]
    pub region: Option<String>,
    /// Certificates (PEM) trusted for S3 beside the system's (in place of AWS_CA_BUNDLE).
    #[arg(long, global = true, value_name = "FILE")]
    pub ca_bundle: Option<PathBuf>,
    /// Retries of a request that failed in a way that may pass [default: 5].
    #[arg(long, global = true, value_parser = parse_retries)]
    pub retries: Option<usize>,
    /// Seconds a response may send nothing before it is cut and retried [default: 20].
    #[arg(long, global = true, value_parser = parse_read_timeout, value_name = "SECONDS")]
    pub read_timeout: Option<f64>,
}

/// `--part-size`: 64 KiB to 5 GiB (S3's largest part).
pub fn parse_part_size(s: &str) -> Result<usize, String> {
    let v = cacheless::parse_size(s).map_err(|e| e.to_string())?;
    limits::part_size("--part-size", v)
}

/// `--concurrency`: 1 to 256.
pub fn parse_concurrency(s: &str) -> Result<usize, String> {
    limits::concurrency("--concurrency", s.trim().parse::<u64>().map_err(|_| format!("--concurrency {s}: not a whole number"))?)
}

/// `--retries`: 0 to 100.
pub fn parse_retries(s: &str) -> Result<usize, String> {
    limits::retries("--retries", s.trim().parse::<u64>().map_err(|_| format!("--retries {s}: not a whole number"))?)
}

/// `--read-timeout`: seconds, 0.1 to 3600.
pub fn parse_read_timeout(s: &str) -> Result<f64, String> {
    let v = s.trim().parse::<f64>().map_err(|_| format!("--read-timeout {s}: not a number of seconds"))?;
    limits::read_timeout("--read-timeout", v).map(|_| v)
}

impl RemoteFlags {
    /// The transfers' options (what is not given: the environment's, else the defaults); an
    /// error names a bad environment variable.
    pub fn options(&self) -> Result<RemoteOptions, Error> {
        let mut o = RemoteOptions::from_env()?;
        if let Some(p) = self.part_size {
            o.part_size = p;
        }
        if let Some(c) = self.concurrency {
            o.concurrency = c;
        }
        if let Some(r) = self.retries {
            o.retries = r;
        }
        if let Some(t) = self.read_timeout {
            o.stall = std::time::Duration::from_secs_f64(t);
        }
        o.no_sign_request |= self.no_sign_request;
        o.endpoint.clone_from(&self.endpoint_url);
        o.region.clone_from(&self.region);
        if self.ca_bundle.is_some() {
            o.ca_bundle.clone_from(&self.ca_bundle);
        }
        Ok(o)
    }

    /// The first of these flags given, by its name (none: all are the defaults).
    pub fn given(&self) -> Option<&'static str> {
        let set = [
            (self.part_size.is_some(), "--part-size"),
            (self.concurrency.is_some(), "--concurrency"),
            (self.no_sign_request, "--no-sign-request"),
            (self.endpoint_url.is_some(), "--endpoint-url"),
            (self.region.is_some(), "--region"),
            (self.ca_bundle.is_some(), "--ca-bundle"),
            (self.retries.is_some(), "--retries"),
            (self.read_timeout.is_some(), "--read-timeout"),
        ];
        set.iter().find(|(on, _)| *on).map(|(_, name)| *name)
    }

    /// These flags, with `over`'s where it gives them.
    pub fn or(&self, over: &RemoteFlags) -> RemoteFlags {
        RemoteFlags {
            part_size: over.part_size.or(self.part_size),
            concurrency: over.concurrency.or(self.concurrency),
            no_sign_request: self.no_sign_request || over.no_sign_request,
            endpoint_url: over.endpoint_url.clone().or_else(|| self.endpoint_url.clone()),
            region: over.region.clone().or_else(|| self.region.clone()),
            ca_bundle: over.ca_bundle.clone().or_else(|| self.ca_bundle.clone()),
            retries: over.retries.or(self.retries),
            read_timeout: over.read_timeout.or(self.read_timeout),
        }
    }
}

/// Whether an operand is a URL.
pub fn is_remote(p: &Path) -> bool {
    cacheless_remote::url_of(p).is_some()
}

fn text(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// The object at `url`, its bytes passed to `out` in order (`cat`, `hash`): ranges in flight as
/// a download runs them, those that arrive early held in their buffers (the budget bounds them).
pub fn stream(url: &Path, io: &IoOptions, flags: &RemoteFlags, cancel: &AtomicBool, out: impl FnMut(&[u8]) -> Result<(), Error>) -> Result<(), Error> {
    let loc = Location::parse(&text(url))?;
    let remote = Remote::connect(&loc, &flags.options()?)?;
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
    let opts = flags.options()?;
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
    format!("{} UTC", cacheless::utc_time(s))
}

/// A streamed transfer's share of `budget`, and the rest (see `cacheless_remote::split_budget`).
pub fn split_budget(budget: &cacheless::Budget, flags: &RemoteFlags) -> Result<(cacheless::Budget, cacheless::Budget), Error> {
    Ok(cacheless_remote::split_budget(budget, &flags.options()?))
}

/// `extract URL`: the object as the archive's input, read in order while its ranges download
/// ahead into `budget`.
pub fn archive_input(url: &Path, budget: &cacheless::Budget, flags: &RemoteFlags) -> Result<cacheless_archive::Input, Error> {
    let loc = Location::parse(&text(url))?;
    let opts = flags.options()?;
    let remote = Arc::new(Remote::connect(&loc, &opts)?);
    let info = remote.head(&loc)?;
    let in_flight = cacheless_remote::ObjectReader::in_flight(&opts, budget);
    let read = cacheless_archive::source::SourceRead::Download { part_size: opts.part_size as u64, in_flight, etag: info.etag.clone() };
    let len = Some(info.size);
    let reader = cacheless_remote::ObjectReader::open(remote, info, budget.clone())?;
    Ok(cacheless_archive::Input::Named { reader: Box::new(reader), read, len })
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
    let remote = Arc::new(Remote::connect(&loc, &flags.options()?)?);
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
    let remote = Remote::connect(&loc, &flags.options()?)?;
    let info = remote.head(&loc)?;
    let r = cacheless_remote::fetch(&remote, &info, &io.budget, 0, &AtomicBool::new(false), None, &mut Drop)?;
    Ok(r.bytes)
}
