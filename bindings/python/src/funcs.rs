//! Module-level calls: info, residency, evict, read_file, write_file, copy, extract, pack, hash.

use std::path::PathBuf;
use std::sync::Arc;

use cacheless::{CreateOptions, Durability, FileAttrs, FileCreator, Progress, ReadOptions, Reflink, Sparse};
use cacheless_cp::{CpOptions, Existing};
use cacheless_safetensors::arena::read_whole;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde::Serialize;

use crate::arena::PyArena;
use crate::errors;
use crate::job::{self, Measure};
use crate::opts::{
    self, to_py, BlockSize, Callback, Concurrency, Count, DecompressThreads, FrameSize, Memory, PartSize, QueueDepth, Rate, ReadThreads, Retries, Size, Threads,
};
use crate::pybuf::Pinned;
use crate::remote;

/// What `cacheless info PATH --json` reports for one path, plus the kernel-wide `system`.
#[pyfunction]
#[pyo3(signature = (path, mode = "auto"))]
pub fn info<'py>(py: Python<'py>, path: PathBuf, mode: &str) -> PyResult<Bound<'py, PyAny>> {
    let m = opts::word("mode", mode)?;
    let i = py.detach(|| cacheless::info::describe(&path, m)).map_err(|e| errors::engine(&e))?;
    let d = to_py(py, &i)?;
    d.set_item("system", to_py(py, cacheless::caps::system())?)?;
    Ok(d)
}

#[derive(Serialize)]
struct Res {
    #[serde(serialize_with = "cacheless::quote::serialize_path")]
    path: PathBuf,
    size: u64,
    #[serde(flatten)]
    r: cacheless::residency::Residency,
    cached_bytes: u64,
    fraction: f64,
}

/// How much of a file is in the page cache (cachestat, else mincore).
#[pyfunction]
pub fn residency<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyAny>> {
    let (r, size) = py
        .detach(|| -> cacheless::Result<_> {
            let r = cacheless::residency::residency_of(&path)?;
            let size = std::fs::metadata(&path).map_err(|e| cacheless::Error::io("stat", &path, e))?.len();
            Ok((r, size))
        })
        .map_err(|e| errors::engine(&e))?;
    to_py(py, &Res { path, size, r, cached_bytes: r.cached_bytes().min(size), fraction: r.fraction() })
}

/// Writes back and drops a file's pages from the page cache; residency before and after.
#[pyfunction]
pub fn evict<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyAny>> {
    let evicted = py.detach(|| cacheless::residency::evict_path(&path)).map_err(|e| errors::engine(&e))?;
    to_py(py, &evicted)
}

/// Reads a whole file into one aligned buffer; returns (arena, (mode, reason)).
#[pyfunction]
#[pyo3(signature = (path, *, mode = "auto", backend = "auto", memory = None, block_size = None, queue_depth = None, threads = None, progress = None))]
#[allow(clippy::too_many_arguments)] // The Python signature: each keyword is a parameter.
pub fn read_file<'py>(
    py: Python<'py>,
    path: PathBuf,
    mode: &str,
    backend: &str,
    memory: Option<Size<Memory>>,
    block_size: Option<Size<BlockSize>>,
    queue_depth: Option<Count<QueueDepth>>,
    threads: Option<Count<Threads>>,
    progress: Option<Callback<'py>>,
) -> PyResult<(PyArena, (String, String))> {
    let ao = opts::arena(opts::io(mode, backend, memory, block_size, queue_depth)?, threads);
    let p = Progress::new();
    let (arena, sr) = job::run(py, &p, opts::callback(&progress), || read_whole(&path, &ao, &p))?.map_err(errors::safetensors)?;
    let len = arena.len();
    let d = sr.decision();
    Ok((PyArena::new(Arc::new(arena), len), (d.mode.to_string(), d.reason.to_string())))
}

/// Writes a whole bytes-like object to a new file that replaces `path`, through the engine's
/// small-file path (the one extraction uses): a temporary name beside it, the best mode for its
/// size, fsync unless `sync=False`, then a rename. Returns the report.
#[pyfunction]
#[pyo3(signature = (path, data, *, mode = "auto", sync = true))]
pub fn write_file<'py>(py: Python<'py>, path: PathBuf, data: &Bound<'py, PyAny>, mode: &str, sync: bool) -> PyResult<Bound<'py, PyAny>> {
    let io = opts::io(mode, "auto", None, None, None)?;
    let pin = Pinned::readable(data)?;
    let creator = FileCreator::new(CreateOptions { mode: io.mode, durability: Durability::synced(sync), ..CreateOptions::new() });
    // Written on a worker that stops at a Ctrl-C; named only if none came (see `job::commit`).
    let p = Progress::new();
    let (rep, file) = job::run(py, &p, None, || creator.stage_replace(&path, pin.bytes(), &FileAttrs::default(), &p))?.map_err(|e| errors::engine(&e))?;
    if let Some(f) = file {
        job::commit(py, f, |f| f.publish(sync))?;
    }
    to_py(py, &rep)
}

/// `cacheless cp` from Python: one source to `dst`, with GNU cp's options as keywords (the
/// command line's names), through the same copy job (`cacheless_cp::copy`) for local paths and
/// URLs alike; returns the job's report (`cacheless cp --json`'s). Items that failed raise the
/// `OSError` of the first, with the report in its `report` attribute; an option the operands
/// cannot honour raises `ValueError` before anything moves.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // The Python signature: each keyword is a parameter.
#[pyo3(signature = (src, dst, *, recursive = false, archive = false, no_clobber = false, update = false, interactive = None, force = false, remove_destination = false, backup = None, suffix = None, preserve = None, no_preserve = None, attributes_only = false, parents = false, link = false, symbolic_link = false, dereference = None, one_file_system = false, copy_contents = false, no_target_directory = false, inplace = false, reflink = "auto", sparse = "auto", verify = None, bwlimit = None, threads = None, sync = true, mode = "auto", backend = "auto", memory = None, block_size = None, queue_depth = None, progress = None, endpoint_url = None, region = None, no_sign_request = false, concurrency = None, part_size = None, ca_bundle = None, retries = None, read_timeout = None))]
pub fn copy<'py>(
    py: Python<'py>,
    src: PathBuf,
    dst: PathBuf,
    recursive: bool,
    archive: bool,
    no_clobber: bool,
    update: bool,
    interactive: Option<Bound<'py, PyAny>>,
    force: bool,
    remove_destination: bool,
    backup: Option<&str>,
    suffix: Option<String>,
    preserve: Option<Vec<String>>,
    no_preserve: Option<Vec<String>>,
    attributes_only: bool,
    parents: bool,
    link: bool,
    symbolic_link: bool,
    dereference: Option<&str>,
    one_file_system: bool,
    copy_contents: bool,
    no_target_directory: bool,
    inplace: bool,
    reflink: &str,
    sparse: &str,
    verify: Option<&str>,
    bwlimit: Option<Rate>,
    threads: Option<Count<Threads>>,
    sync: bool,
    mode: &str,
    backend: &str,
    memory: Option<Size<Memory>>,
    block_size: Option<Size<BlockSize>>,
    queue_depth: Option<Count<QueueDepth>>,
    progress: Option<Callback<'py>>,
    endpoint_url: Option<String>,
    region: Option<String>,
    no_sign_request: bool,
    concurrency: Option<Count<Concurrency>>,
    part_size: Option<Size<PartSize>>,
    ca_bundle: Option<PathBuf>,
    retries: Option<Count<Retries>>,
    read_timeout: Option<f64>,
) -> PyResult<Bound<'py, PyAny>> {
    let mut o = CpOptions::new(opts::io(mode, backend, memory, block_size, queue_depth)?);
    if archive {
        o = o.archive();
    }
    o.recursive |= recursive;
    o.copy.reflink = opts::word("reflink", reflink)?;
    o.copy.sparse = opts::word("sparse", sparse)?;
    if o.copy.reflink == Reflink::Always && o.copy.sparse != Sparse::Auto {
        return Err(PyValueError::new_err("reflink=\"always\" can be used only with sparse=\"auto\" (as cp's --reflink and --sparse)"));
    }
    // A transfer is checked against its object's ETag (an MD5), whatever algorithm a local
    // copy would read back with: with a URL, verify="etag"; without one, an algorithm.
    let url = cacheless_cp::is_url(&src) || cacheless_cp::is_url(&dst);
    o.copy.verify = match verify {
        None => None,
        Some("etag") if url => Some(cacheless::digest::Algo::Xxh3),
        Some("etag") => {
            return Err(PyValueError::new_err(
                "verify=\"etag\" checks a transfer against its object's ETag, and no operand is a URL: give xxh3, sha256 or blake3",
            ))
        }
        Some(a) if url => {
            return Err(PyValueError::new_err(format!(
                "verify=\"{a}\" cannot be honoured with a URL operand: a transfer is checked against the object's ETag (an MD5): give verify=\"etag\""
            )))
        }
        Some(a) => Some(opts::word("verify", a)?),
    };
    o.copy.rate = bwlimit.and_then(|r| r.0).map(|r| Arc::new(cacheless::RateLimit::new(r)));
    // -n, -i, -u: whichever of -n and -i the caller gives, as cp's last one wins.
    if no_clobber && interactive.is_some() {
        return Err(PyValueError::new_err("no_clobber= and interactive= each say what to do with an existing destination: give one"));
    }
    if no_clobber {
        o.existing = Existing::Keep;
    } else if let Some(ask) = interactive {
        o.existing = Existing::Ask(opts::ask(ask)?);
    }
    o.update = update && !no_clobber;
    o.force = force;
    o.remove_destination = remove_destination;
    if let Some(control) = backup {
        if no_clobber {
            return Err(PyValueError::new_err("backup= and no_clobber= are mutually exclusive (as cp's --backup and --no-clobber)"));
        }
        let kind = cacheless_cp::BackupKind::from_control(control).map_err(|e| PyValueError::new_err(format!("backup=: {e}")))?;
        let suffix = suffix.or_else(|| std::env::var("SIMPLE_BACKUP_SUFFIX").ok()).filter(|s| !s.is_empty() && !s.contains('/'));
        o.backup = kind.map(|k| (k, suffix.unwrap_or_else(|| "~".into())));
    } else if suffix.is_some() {
        return Err(PyValueError::new_err("suffix= names simple backups: give backup= too"));
    }
    for (list, on) in [(preserve, true), (no_preserve, false)] {
        for w in list.unwrap_or_default() {
            let attr = opts::word::<cacheless_cp::Attr>(if on { "preserve" } else { "no_preserve" }, w.trim())?;
            o.set_preserve(attr, on).map_err(|e| PyValueError::new_err(format!("{}=: {e}", if on { "preserve" } else { "no_preserve" })))?;
        }
    }
    o.attributes_only = attributes_only;
    o.parents = parents;
    o.link = match (link, symbolic_link) {
        (true, true) => return Err(PyValueError::new_err("link= and symbolic_link=: cannot make both hard and symbolic links")),
        (true, false) => cacheless_cp::Link::Hard,
        (false, true) => cacheless_cp::Link::Symbolic,
        (false, false) => cacheless_cp::Link::Copy,
    };
    if let Some(d) = dereference {
        o.deref = opts::word("dereference", d)?;
    }
    o.one_file_system = one_file_system;
    o.copy_contents = copy_contents;
    o.inplace = inplace;
    o.target = if no_target_directory { cacheless_cp::Target::File } else { cacheless_cp::Target::Auto };
    o.open_dangling = std::env::var_os("POSIXLY_CORRECT").is_some();
    o.threads = opts::count(threads);
    o.durability = Durability::synced(sync);
    o.count_totals = true;
    o.remote = opts::remote(endpoint_url, region, no_sign_request, concurrency, part_size, ca_bundle, retries, read_timeout)?;
    let p = Arc::new(Progress::new());
    // The last copy takes its name only once the calling thread has seen no Ctrl-C and made the
    // progress callback's last call without an exception (see `job::Naming`): else nothing
    // more is named.
    let naming = job::Naming::new(p.clone());
    p.set_naming_gate(naming.gate());
    let work = || cacheless_cp::copy(std::slice::from_ref(&src), &dst, &o, &p);
    let rep = job::run_with(py, &p, Measure::Output, opts::callback(&progress), Some(&naming), work)?;
    let rep = rep.map_err(|e| errors::engine(&e))?;
    let report = to_py(py, &rep)?;
    if let Some(e) = &rep.first_error {
        let err = errors::engine(e);
        err.value(py).setattr("report", report)?;
        return Err(err);
    }
    if rep.interrupted {
        return Err(pyo3::exceptions::PyKeyboardInterrupt::new_err("interrupted; files not yet finished were removed"));
    }
    Ok(report)
}

/// Checksum of a file, read without leaving it cached: (hex digest, mode).
#[pyfunction]
#[pyo3(signature = (path, algo = "sha256", *, mode = "auto", backend = "auto", memory = None, block_size = None, queue_depth = None, progress = None, endpoint_url = None, region = None, no_sign_request = false, concurrency = None, part_size = None, ca_bundle = None, retries = None, read_timeout = None))]
#[allow(clippy::too_many_arguments)] // The Python signature: each keyword is a parameter.
pub fn hash<'py>(
    py: Python<'py>,
    path: PathBuf,
    algo: &str,
    mode: &str,
    backend: &str,
    memory: Option<Size<Memory>>,
    block_size: Option<Size<BlockSize>>,
    queue_depth: Option<Count<QueueDepth>>,
    progress: Option<Callback<'py>>,
    endpoint_url: Option<String>,
    region: Option<String>,
    no_sign_request: bool,
    concurrency: Option<Count<Concurrency>>,
    part_size: Option<Size<PartSize>>,
    ca_bundle: Option<PathBuf>,
    retries: Option<Count<Retries>>,
    read_timeout: Option<f64>,
) -> PyResult<(String, String)> {
    let algo: cacheless::digest::Algo = opts::word("algo", algo)?;
    let ropts = opts::remote(endpoint_url, region, no_sign_request, concurrency, part_size, ca_bundle, retries, read_timeout)?;
    let ro = ReadOptions::from(opts::io(mode, backend, memory, block_size, queue_depth)?);
    let p = Progress::new();
    if let Some(url) = cacheless_remote::url_of(&path) {
        let cancel = p.cancel_flag();
        let work = || -> cacheless::Result<(String, String)> {
            let mut h = cacheless::digest::Hasher::new(algo);
            remote::stream(url, &ropts, &ro.io.budget, &cancel, &p, |b| {
                h.update(b);
                Ok(())
            })?;
            Ok((h.hex(), "remote".to_string()))
        };
        return job::run(py, &p, opts::callback(&progress), work)?.map_err(|e| errors::engine(&e));
    }
    let work = || -> cacheless::Result<(String, String)> {
        let mut r = cacheless::Reader::open(&path, &ro)?;
        p.add_total_bytes(r.len());
        let digest = cacheless::digest::hash_reader(&mut r, algo, &p)?;
        Ok((digest, r.decision().mode.to_string()))
    };
    job::run(py, &p, opts::callback(&progress), work)?.map_err(|e| errors::engine(&e))
}

/// Unpacks a tar archive (any supported compression); returns the report. A corrupt or
/// truncated archive is a `ValueError`; members that could not be written an `OSError` whose
/// report is in its `report` attribute.
#[pyfunction]
#[pyo3(signature = (archive, dest, strip_components = 0, keep_old_files = false, *, ignore_zeros = false, mode = "auto", memory = None, threads = None, decompress_threads = None, progress = None, sync = true, endpoint_url = None, region = None, no_sign_request = false, concurrency = None, part_size = None, ca_bundle = None, retries = None, read_timeout = None))]
#[allow(clippy::too_many_arguments)] // The Python signature: each keyword is a parameter.
pub fn extract<'py>(
    py: Python<'py>,
    archive: PathBuf,
    dest: PathBuf,
    strip_components: usize,
    keep_old_files: bool,
    ignore_zeros: bool,
    mode: &str,
    memory: Option<Size<Memory>>,
    threads: Option<Count<Threads>>,
    decompress_threads: Option<Count<DecompressThreads>>,
    progress: Option<Callback<'py>>,
    sync: bool,
    endpoint_url: Option<String>,
    region: Option<String>,
    no_sign_request: bool,
    concurrency: Option<Count<Concurrency>>,
    part_size: Option<Size<PartSize>>,
    ca_bundle: Option<PathBuf>,
    retries: Option<Count<Retries>>,
    read_timeout: Option<f64>,
) -> PyResult<Bound<'py, PyAny>> {
    let ropts = opts::remote(endpoint_url, region, no_sign_request, concurrency, part_size, ca_bundle, retries, read_timeout)?;
    let mut eo = cacheless_archive::ExtractOptions::new(&dest);
    eo.io = opts::io(mode, "auto", memory, None, None)?;
    eo.durability = Durability::batched(sync, Some(cacheless_archive::DEFAULT_WRITE_BACK));
    eo.strip_components = strip_components;
    if keep_old_files {
        eo.old_files = cacheless_archive::OldFiles::Keep;
    }
    eo.ignore_zeros = ignore_zeros;
    if let Some(t) = opts::count(threads) {
        eo.threads = t;
    }
    if let Some(t) = opts::count(decompress_threads) {
        eo.decompress_threads = t;
    }
    // One progress for the whole extraction: the archive's bytes read (its size is the total,
    // set by the extraction once it has opened it) are what the callback is given.
    let callback = progress;
    let progress = Arc::new(Progress::new());
    eo.progress = Some(progress.clone());
    let input = match cacheless_remote::url_of(&archive) {
        // A URL: its download reads ahead into a share of the budget of its own.
        Some(url) => {
            let (fetch, rest) = remote::split(&eo.io.budget, &ropts);
            eo.io.budget = rest;
            job::run(py, &progress, None, || remote::archive_input(url, &ropts, &fetch))?.map_err(|e| errors::engine(&e))?
        }
        None => cacheless_archive::Input::Path(archive.clone()),
    };
    let mut rep = job::run_measured(py, &progress, Measure::Input, opts::callback(&callback), || cacheless_archive::extract(input, &eo))?
        .map_err(|e| errors::archive(e, &archive))?;
    if let Some(e) = rep.fatal_error.take() {
        return Err(errors::archive(e, &archive));
    }
    let report = to_py(py, &rep)?;
    if rep.failure_count > 0 {
        let what = format!("{} of {} members could not be extracted", rep.failure_count, rep.entries);
        return Err(errors::members_failed(&archive, &what, &rep.failures, rep.first_failure_errno, report));
    }
    Ok(report)
}

/// `mtime=` as (seconds, nanoseconds): an int or float of seconds since the epoch, or a time
/// as the CLI's `--mtime` takes it (`@SECONDS`, `YYYY-MM-DD[THH:MM:SS]`, UTC).
pub struct Time(pub (i64, u32));

impl FromPyObject<'_, '_> for Time {
    type Error = PyErr;
    fn extract(v: Borrowed<'_, '_, PyAny>) -> PyResult<Self> {
        pack_time(&v).map(Time)
    }
}

/// `owner=`: an id, or a name as the CLI takes it (`NAME`, `NAME:ID`, `+ID`).
pub struct Owner(pub cacheless_archive::pack::Owner);

/// `group=`: as [`Owner`].
pub struct Group(pub cacheless_archive::pack::Owner);

impl FromPyObject<'_, '_> for Owner {
    type Error = PyErr;
    fn extract(v: Borrowed<'_, '_, PyAny>) -> PyResult<Self> {
        pack_owner(&v, false).map(Owner)
    }
}

impl FromPyObject<'_, '_> for Group {
    type Error = PyErr;
    fn extract(v: Borrowed<'_, '_, PyAny>) -> PyResult<Self> {
        pack_owner(&v, true).map(Group)
    }
}

fn pack_time(v: &Bound<'_, PyAny>) -> PyResult<(i64, u32)> {
    if let Ok(s) = v.extract::<i64>() {
        return Ok((s, 0));
    }
    if let Ok(f) = v.extract::<f64>() {
        if !f.is_finite() || f.abs() > 1e15 {
            return Err(PyValueError::new_err(format!("mtime=: {f} is not a time")));
        }
        let secs = f.floor();
        // Both casts are in range: |secs| <= 1e15 and the fraction is in [0, 1).
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        return Ok((secs as i64, (((f - secs) * 1e9).round() as u32).min(999_999_999)));
    }
    let s: String = v
        .extract()
        .map_err(|_| PyValueError::new_err("mtime= must be seconds since the epoch (int or float), a datetime, or a string such as '2024-01-31T12:00:00'"))?;
    cacheless_archive::pack::parse_time(&s).map_err(|e| PyValueError::new_err(format!("mtime=: {e}")))
}

/// `owner=` / `group=`: an id, or a name as the CLI takes it (`NAME`, `NAME:ID`, `+ID`).
fn pack_owner(v: &Bound<'_, PyAny>, group: bool) -> PyResult<cacheless_archive::pack::Owner> {
    let key = if group { "group" } else { "owner" };
    let s = match v.extract::<u32>() {
        Ok(id) => format!("+{id}"),
        Err(_) => v.extract::<String>().map_err(|_| PyValueError::new_err(format!("{key}= must be a name or a numeric id")))?,
    };
    cacheless_archive::pack::Owner::parse(&s, group).map_err(|e| PyValueError::new_err(format!("{key}=: {e}")))
}

/// Creates a tar archive of `paths` (relative to `directory`); returns the report. Members
/// that could not be read, or changed while read, raise an `OSError` whose report is in its
/// `report` attribute (the archive is complete without them).
#[pyfunction]
#[pyo3(signature = (archive, paths, directory = None, compression = None, level = None, frame_size = None, sort = "none", mtime = None, owner = None, group = None, numeric_owner = false, exclude = Vec::new(), one_file_system = false, xattrs = false, read_threads = None, acls = false, *, mode = "auto", backend = "auto", memory = None, block_size = None, queue_depth = None, threads = None, progress = None, sync = true, endpoint_url = None, region = None, no_sign_request = false, concurrency = None, part_size = None, ca_bundle = None, retries = None, read_timeout = None))]
#[allow(clippy::too_many_arguments)] // One keyword argument of the Python call each.
pub fn pack<'py>(
    py: Python<'py>,
    archive: PathBuf,
    paths: Vec<PathBuf>,
    directory: Option<PathBuf>,
    compression: Option<&str>,
    level: Option<i32>,
    frame_size: Option<Size<FrameSize>>,
    sort: &str,
    mtime: Option<Time>,
    owner: Option<Owner>,
    group: Option<Group>,
    numeric_owner: bool,
    exclude: Vec<String>,
    one_file_system: bool,
    xattrs: bool,
    read_threads: Option<Count<ReadThreads>>,
    acls: bool,
    mode: &str,
    backend: &str,
    memory: Option<Size<Memory>>,
    block_size: Option<Size<BlockSize>>,
    queue_depth: Option<Count<QueueDepth>>,
    threads: Option<Count<Threads>>,
    progress: Option<Callback<'py>>,
    sync: bool,
    endpoint_url: Option<String>,
    region: Option<String>,
    no_sign_request: bool,
    concurrency: Option<Count<Concurrency>>,
    part_size: Option<Size<PartSize>>,
    ca_bundle: Option<PathBuf>,
    retries: Option<Count<Retries>>,
    read_timeout: Option<f64>,
) -> PyResult<Bound<'py, PyAny>> {
    use cacheless_archive::pack::{compression_for_name, parse_compression, SortOrder};
    let ropts = opts::remote(endpoint_url, region, no_sign_request, concurrency, part_size, ca_bundle, retries, read_timeout)?;
    let mut io = opts::io(mode, backend, memory, block_size, queue_depth)?;
    let progress_cb = progress;
    let progress = Arc::new(Progress::new());
    // A URL: the archive is uploaded as it is written (its frames sent as parts), out of a
    // share of the budget of its own, and appears only when the upload completes.
    let mut upload = None;
    let output = match cacheless_remote::url_of(&archive) {
        Some(url) => {
            let (share, rest) = remote::split(&io.budget, &ropts);
            io.budget = rest;
            let (writer, handle) = remote::upload(url, &ropts, &share, progress.cancel_flag()).map_err(|e| errors::engine(&e))?;
            upload = Some(handle);
            cacheless_archive::Output::Stream(Box::new(writer))
        }
        None => cacheless_archive::Output::Path(archive.clone()),
    };
    let mut po = cacheless_archive::PackOptions::new(output, paths);
    po.compression = match compression {
        Some(c) => parse_compression(c).map_err(|e| PyValueError::new_err(format!("compression=: {e}")))?,
        None => compression_for_name(&archive).unwrap_or(cacheless_archive::Compression::Zstd),
    };
    po.level = level;
    if let Some(f) = frame_size {
        po.frame_size = f.0;
    }
    let m = &mut po.members;
    m.directory = directory;
    m.sort = match sort {
        "none" => SortOrder::None,
        "name" => SortOrder::Name,
        o => return Err(PyValueError::new_err(format!("sort=: unknown order '{o}': expected \"none\" or \"name\""))),
    };
    m.mtime = mtime.map(|t| t.0);
    m.owner = owner.map(|o| o.0);
    m.group = group.map(|g| g.0);
    m.numeric_owner = numeric_owner;
    m.exclude = exclude
        .iter()
        .map(|g| glob::Pattern::new(g).map_err(|e| PyValueError::new_err(format!("exclude=: invalid pattern '{g}': {e}"))))
        .collect::<PyResult<_>>()?;
    m.one_file_system = one_file_system;
    m.xattrs = xattrs;
    m.acls = acls;
    if let Some(t) = opts::count(threads) {
        po.threads = t;
    }
    if let Some(t) = opts::count(read_threads) {
        po.read_threads = t;
    }
    po.durability = Durability::synced(sync);
    po.io = io;
    // File bytes read against the bytes of the files walked so far (the total grows as the
    // walk goes) are what the callback is given.
    let callback = progress_cb;
    po.progress = Some(progress.clone());
    // An uploaded archive appears only once the calling thread has seen no Ctrl-C and made the
    // callback's last call (see `job::Naming`); a local one is named below, by `job::commit`.
    let naming = job::Naming::new(progress.clone());
    progress.set_naming_gate(naming.gate());
    let work = || -> cacheless_archive::Result<_> {
        let r = cacheless_archive::pack_staged(po)?;
        if let Some(h) = upload {
            if !progress.may_name() {
                // Dropped unfinished, the upload is aborted.
                drop(h);
                return Err(cacheless::Error::new(cacheless::ErrorKind::Interrupted, "upload", &archive, "interrupted").into());
            }
            h.finish()?;
        }
        Ok(r)
    };
    let (rep, staged) =
        job::run_with(py, &progress, Measure::Output, opts::callback(&callback), Some(&naming), work)?.map_err(|e| errors::archive(e, &archive))?;
    // Named only if no Ctrl-C came meanwhile (see `job::commit`).
    if let Some(a) = staged {
        job::commit(py, a, |a| a.publish(sync))?;
    }
    let report = to_py(py, &rep)?;
    if rep.failure_count > 0 {
        let what = format!("{} members could not be stored (the archive was written without them)", rep.failure_count);
        return Err(errors::members_failed(&archive, &what, &rep.failures, rep.first_failure_errno, report));
    }
    Ok(report)
}
