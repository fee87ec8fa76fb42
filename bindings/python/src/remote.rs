//! URLs (`s3://`, `http(s)://`) in the module's calls: `read_file`, `copy`, `hash`, `extract`
//! and `pack` take them where they take a path, through the engine's `cacheless-remote` crate
//! (credentials and endpoint from the AWS environment; docs/remote.md).

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use cacheless::{Budget, Error, IoOptions, Progress, Result};
use cacheless_remote::{is_url, Location, ObjectInfo, Remote, RemoteOptions};
use cacheless_safetensors::arena::Arena;

/// `p` as a URL, when it is written as one.
pub fn url(p: &Path) -> Option<&str> {
    p.to_str().filter(|s| is_url(s))
}

/// The client for `url`, and what the server says of the object.
pub fn open(url: &str) -> Result<(Remote, ObjectInfo)> {
    let loc = Location::parse(url)?;
    let remote = Remote::connect(&loc, &RemoteOptions::default())?;
    let info = remote.head(&loc)?;
    Ok((remote, info))
}

/// The whole object in one arena (byte `i` is the object's byte `i`), its ranges fetched in
/// parallel and copied in as they arrive.
pub fn read_whole(url: &str, budget: &Budget, cancel: &AtomicBool, progress: &Progress) -> Result<(Arena, String)> {
    let (remote, info) = open(url)?;
    let len = cacheless::conv::usize_of(info.size);
    let mut arena = Arena::whole(len).ok_or_else(|| Error::new(cacheless::ErrorKind::InvalidInput, "read", url, format!("{len} B do not fit in memory")))?;
    progress.add_total_bytes(info.size);
    let r = cacheless_remote::fetch(&remote, &info, budget, 0, cancel, Some(progress), &mut cacheless_remote::Fill(arena.bytes_mut()))?;
    let how = if r.ranged { format!("{} ranged GETs, {} in flight", r.ranges, r.in_flight) } else { "one stream: the server does not do ranges".into() };
    Ok((arena, how))
}

/// The object's bytes in order to `out` (a checksum).
pub fn stream(url: &str, budget: &Budget, cancel: &AtomicBool, progress: &Progress, out: impl FnMut(&[u8]) -> Result<()>) -> Result<()> {
    let (remote, info) = open(url)?;
    progress.add_total_bytes(info.size);
    let mut sink = cacheless_remote::Ordered::new(out);
    cacheless_remote::fetch(&remote, &info, budget, remote.options().concurrency, cancel, Some(progress), &mut sink)?;
    Ok(())
}

/// A streamed transfer's share of `budget`, and the rest (see `cacheless_remote::split_budget`).
pub fn split(budget: &Budget) -> (Budget, Budget) {
    cacheless_remote::split_budget(budget, &RemoteOptions::default())
}

/// `extract(URL, ...)`: the object as the archive, read in order while its ranges download
/// ahead into `budget`.
pub fn archive_input(url: &str, budget: &Budget) -> Result<cacheless_archive::Input> {
    let (remote, info) = open(url)?;
    let reason = format!("ranged GETs pinned to ETag {}", info.etag.as_deref().unwrap_or("none"));
    let len = Some(info.size);
    let reader = cacheless_remote::ObjectReader::open(Arc::new(remote), info, budget.clone())?;
    Ok(cacheless_archive::Input::Named { reader: Box::new(reader), mode: "remote".into(), reason, len })
}

/// `pack(URL, ...)`: the upload the archive is written to, and the handle that completes it.
pub fn archive_output(url: &str, budget: &Budget, cancel: Arc<AtomicBool>) -> Result<(cacheless_remote::ObjectWriter, cacheless_remote::UploadHandle)> {
    let loc = Location::parse(url)?;
    let remote = Remote::connect(&loc, &RemoteOptions::default())?;
    Ok(cacheless_remote::upload_stream(Arc::new(remote), &loc, budget, cancel))
}

/// `copy` with a URL on either side.
pub fn copy(
    src: &Path,
    dst: &Path,
    io: IoOptions,
    flags: (bool, bool, bool, bool, bool),
    cancel: &AtomicBool,
    progress: &Progress,
) -> Result<cacheless_remote::CopyReport> {
    let (recursive, no_clobber, update, verify, sync) = flags;
    let mut o = cacheless_remote::CopyOptions::new(io, RemoteOptions::default());
    o.recursive = recursive;
    o.no_clobber = no_clobber;
    o.update = update && !no_clobber;
    o.verify = verify;
    o.sync = sync;
    let srcs: Vec<PathBuf> = vec![src.to_path_buf()];
    cacheless_remote::copy(&srcs, dst, &o, cancel, progress)
}
