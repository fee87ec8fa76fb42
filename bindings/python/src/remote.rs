//! URLs (`s3://`, `http(s)://`) in the module's calls: `copy`, `hash`, `extract` and `pack`
//! take them where they take a path (`read_file` and the safetensors loaders through
//! `cacheless_safetensors`, whose readers open URLs), through the engine's `cacheless-remote` crate
//! (credentials and endpoint from the AWS environment; docs/remote.md).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use cacheless::{Budget, Error, Progress, Result};
use cacheless_remote::{Location, ObjectInfo, Remote, RemoteOptions};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::errors;
use crate::job;
use crate::opts::{self, Concurrency, Count, Memory, PartSize, Retries, Size};
use crate::pybuf::Pinned;

/// Whether `path` is written as a URL the engine fetches (`s3://`, `http://`, `https://`)
/// rather than a local path (a local file of such a name is written `./s3://...`).
#[pyfunction]
pub fn is_url(path: PathBuf) -> bool {
    // A name that is not UTF-8 (surrogate-escaped in Python) is no URL.
    path.to_str().is_some_and(cacheless_remote::is_url)
}

/// The client for `url`, and what the server says of the object.
pub fn open(url: &str, opts: &RemoteOptions) -> Result<(Remote, ObjectInfo)> {
    let loc = Location::parse(url)?;
    let remote = Remote::connect(&loc, opts)?;
    let info = remote.head(&loc)?;
    Ok((remote, info))
}

/// The object's bytes in order to `out` (a checksum).
pub fn stream(url: &str, opts: &RemoteOptions, budget: &Budget, cancel: &AtomicBool, progress: &Progress, out: impl FnMut(&[u8]) -> Result<()>) -> Result<()> {
    let (remote, info) = open(url, opts)?;
    progress.add_total_bytes(info.size);
    let mut sink = cacheless_remote::Ordered::new(out);
    cacheless_remote::fetch(&remote, &info, budget, remote.options().concurrency, cancel, Some(progress), &mut sink)?;
    Ok(())
}

/// A streamed transfer's share of `budget`, and the rest (see `cacheless_remote::split_budget`).
pub fn split(budget: &Budget, opts: &RemoteOptions) -> (Budget, Budget) {
    cacheless_remote::split_budget(budget, opts)
}

/// `extract(URL, ...)`: the object as the archive, read in order while its ranges download
/// ahead into `budget`.
pub fn archive_input(url: &str, opts: &RemoteOptions, budget: &Budget) -> Result<cacheless_archive::Input> {
    let (remote, info) = open(url, opts)?;
    let in_flight = cacheless_remote::ObjectReader::in_flight(opts, budget);
    let read = cacheless_archive::source::SourceRead::Download { part_size: opts.part_size as u64, in_flight, etag: info.etag.clone() };
    let len = Some(info.size);
    let reader = cacheless_remote::ObjectReader::open(Arc::new(remote), info, budget.clone())?;
    Ok(cacheless_archive::Input::Named { reader: Box::new(reader), read, len })
}

/// An upload to `url` fed by writes (`pack(URL, ...)`, `open(URL, "wb")`), and the handle that
/// completes it.
pub fn upload(
    url: &str,
    opts: &RemoteOptions,
    budget: &Budget,
    cancel: Arc<AtomicBool>,
) -> Result<(cacheless_remote::ObjectWriter, cacheless_remote::UploadHandle)> {
    let loc = Location::parse(url)?;
    let remote = Remote::connect(&loc, opts)?;
    cacheless_remote::upload_stream(Arc::new(remote), &loc, budget, cancel)
}

/// What `cacheless.open(URL, "rb")` reads through: the client, the object (pinned to the ETag
/// seen at open), the position, and a read-ahead window for small reads.
struct ReadState {
    remote: Remote,
    info: ObjectInfo,
    pos: u64,
    window: Vec<u8>,
    /// Object offset of `window[0]` and the bytes it holds.
    at: u64,
    held: usize,
}

impl ReadState {
    /// Fills `buf` from the current position (short only at the end): a read of at least the
    /// window's size goes straight into `buf` as parallel ranged GETs; smaller ones are copied
    /// out of the window, refilled (in parallel ranges) where it does not hold the position.
    fn readinto(&mut self, buf: &mut [u8], cancel: &AtomicBool, progress: &Progress) -> Result<usize> {
        let n = cacheless::conv::fit(self.info.size.saturating_sub(self.pos), buf.len());
        let buf = &mut buf[..n];
        if n >= self.window.len() {
            cacheless_remote::fetch_into(&self.remote, &self.info, vec![(self.pos, buf)], cancel, Some(progress))?;
            self.pos += n as u64;
            return Ok(n);
        }
        let mut done = 0;
        while done < n {
            let held = self.pos >= self.at && self.pos < self.at + self.held as u64;
            if !held {
                let want = cacheless::conv::fit(self.info.size - self.pos, self.window.len());
                self.held = 0;
                cacheless_remote::fetch_into(&self.remote, &self.info, vec![(self.pos, &mut self.window[..want])], cancel, Some(progress))?;
                (self.at, self.held) = (self.pos, want);
            }
            let from = cacheless::conv::usize_of(self.pos - self.at);
            let k = (self.held - from).min(n - done);
            buf[done..done + k].copy_from_slice(&self.window[from..from + k]);
            done += k;
            self.pos += k as u64;
        }
        Ok(done)
    }
}

fn closed() -> PyErr {
    PyValueError::new_err("I/O operation on closed file")
}

/// An object open for reading (`cacheless.open(URL, "rb")` wraps it in `io.RawIOBase`):
/// seekable, every read pinned to the ETag seen at open.
#[pyclass(frozen, module = "cacheless._native", name = "RemoteReader")]
pub struct PyRemoteReader {
    state: Mutex<Option<ReadState>>,
    len: u64,
    mode: (String, String),
}

impl PyRemoteReader {
    fn fill(&self, py: Python<'_>, buf: &mut [u8]) -> PyResult<usize> {
        let progress = Progress::new();
        let cancel = progress.cancel_flag();
        let r = job::run(py, &progress, None, || {
            let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
            g.as_mut().map(|s| s.readinto(buf, &cancel, &progress))
        })?;
        r.ok_or_else(closed)?.map_err(|e| errors::engine(&e))
    }
}

#[pymethods]
impl PyRemoteReader {
    #[new]
    #[pyo3(signature = (url, *, memory = None, endpoint_url = None, region = None, no_sign_request = false, concurrency = None, part_size = None, ca_bundle = None, retries = None, read_timeout = None))]
    #[allow(clippy::too_many_arguments)] // The Python signature: each keyword is a parameter.
    fn new(
        py: Python<'_>,
        url: &str,
        memory: Option<Size<Memory>>,
        endpoint_url: Option<String>,
        region: Option<String>,
        no_sign_request: bool,
        concurrency: Option<Count<Concurrency>>,
        part_size: Option<Size<PartSize>>,
        ca_bundle: Option<PathBuf>,
        retries: Option<Count<Retries>>,
        read_timeout: Option<f64>,
    ) -> PyResult<Self> {
        let budget = opts::io("auto", "auto", memory, None, None)?.budget;
        let ropts = opts::remote(endpoint_url, region, no_sign_request, concurrency, part_size, ca_bundle, retries, read_timeout)?;
        let (remote, info) = py.detach(|| open(url, &ropts)).map_err(|e| errors::engine(&e))?;
        // The window: the ranges in flight at once, within the memory budget.
        let o = remote.options();
        let window = (o.range_size() * o.concurrency.max(1)).min(budget.limit()).max(1 << 20);
        let window = cacheless::conv::fit(info.size, window).max(1);
        let how = format!(
            "ranged GETs pinned to ETag {}; reads of {} MiB and more land in the caller's buffer, smaller ones through a window of that size",
            info.etag.as_deref().unwrap_or("none"),
            window >> 20
        );
        let len = info.size;
        let state = ReadState { remote, info, pos: 0, window: vec![0; window], at: 0, held: 0 };
        Ok(PyRemoteReader { state: Mutex::new(Some(state)), len, mode: ("remote".into(), how) })
    }

    /// Fills `buf` (any writable buffer) from the current position; returns the bytes read.
    fn readinto(&self, py: Python<'_>, buf: &Bound<'_, PyAny>) -> PyResult<usize> {
        let mut pin = Pinned::writable(buf)?;
        self.fill(py, pin.bytes_mut())
    }

    /// Everything from the current position to the end, as bytes.
    fn readall<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let pos = self.state.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|s| s.pos).ok_or_else(closed)?;
        let n = cacheless::conv::usize_of(self.len.saturating_sub(pos));
        PyBytes::new_with(py, n, |b| self.fill(py, b).map(|_| ()))
    }

    /// Moves to absolute position `pos` (past the end reads nothing); returns it.
    fn seek(&self, pos: u64) -> PyResult<u64> {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        g.as_mut().ok_or_else(closed)?.pos = pos;
        Ok(pos)
    }

    /// The current position.
    fn tell(&self) -> PyResult<u64> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|s| s.pos).ok_or_else(closed)
    }

    /// The object's size when opened.
    fn size(&self) -> u64 {
        self.len
    }

    /// ("remote", how it is read).
    fn decision(&self) -> (String, String) {
        self.mode.clone()
    }

    /// Closes it.
    fn close(&self, py: Python<'_>) {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner()).take();
        py.detach(move || drop(st));
    }
}

/// An object being written (`cacheless.open(URL, "wb")`): parts are uploaded as they fill; the
/// object appears only at `commit`, and `discard`, a failed write or Ctrl-C aborts the upload.
#[pyclass(frozen, module = "cacheless._native", name = "RemoteWriter")]
pub struct PyRemoteWriter {
    state: Mutex<Option<(cacheless_remote::ObjectWriter, cacheless_remote::UploadHandle)>>,
    failed: Mutex<Option<String>>,
    /// Its cancel flag is the upload's: Ctrl-C during a write aborts it.
    progress: Progress,
    url: String,
    written: std::sync::atomic::AtomicU64,
}

impl PyRemoteWriter {
    fn gone(&self) -> PyErr {
        match self.failed.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            Some(why) => PyValueError::new_err(format!("{}: an earlier write failed ({why}); the upload was aborted and nothing was stored", self.url)),
            None => closed(),
        }
    }
}

#[pymethods]
impl PyRemoteWriter {
    #[new]
    #[pyo3(signature = (url, *, memory = None, endpoint_url = None, region = None, no_sign_request = false, concurrency = None, part_size = None, ca_bundle = None, retries = None, read_timeout = None))]
    #[allow(clippy::too_many_arguments)] // The Python signature: each keyword is a parameter.
    fn new(
        url: &str,
        memory: Option<Size<Memory>>,
        endpoint_url: Option<String>,
        region: Option<String>,
        no_sign_request: bool,
        concurrency: Option<Count<Concurrency>>,
        part_size: Option<Size<PartSize>>,
        ca_bundle: Option<PathBuf>,
        retries: Option<Count<Retries>>,
        read_timeout: Option<f64>,
    ) -> PyResult<Self> {
        let budget = opts::io("auto", "auto", memory, None, None)?.budget;
        let ropts = opts::remote(endpoint_url, region, no_sign_request, concurrency, part_size, ca_bundle, retries, read_timeout)?;
        let progress = Progress::new();
        let pair = upload(url, &ropts, &budget, progress.cancel_flag()).map_err(|e| errors::engine(&e))?;
        Ok(PyRemoteWriter { state: Mutex::new(Some(pair)), failed: Mutex::new(None), progress, url: url.to_string(), written: Default::default() })
    }

    /// Writes all of `buf` (any bytes-like object); returns its length.
    fn write(&self, py: Python<'_>, buf: &Bound<'_, PyAny>) -> PyResult<usize> {
        use std::io::Write as _;
        let pin = Pinned::readable(buf)?;
        let data = pin.bytes();
        let r = job::run(py, &self.progress, None, || {
            let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
            g.as_mut().map(|(w, _)| w.write_all(data))
        });
        let failed = match r {
            Ok(Some(Ok(()))) => {
                self.written.fetch_add(data.len() as u64, std::sync::atomic::Ordering::Relaxed);
                return Ok(data.len());
            }
            Ok(None) => return Err(self.gone()),
            Ok(Some(Err(e))) => {
                *self.failed.lock().unwrap_or_else(|x| x.into_inner()) = Some(e.to_string());
                match e.downcast::<Error>() {
                    Ok(e) => Err(errors::engine(&e)),
                    Err(e) => Err(PyOSError::new_err(format!("{}: {e}", self.url))),
                }
            }
            Err(e) => {
                *self.failed.lock().unwrap_or_else(|x| x.into_inner()) = Some("interrupted".into());
                Err(e)
            }
        };
        // Nothing half-written may be completed: the upload is aborted.
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner()).take();
        py.detach(move || drop(st));
        failed
    }

    /// Bytes written so far.
    fn tell(&self) -> PyResult<u64> {
        match self.state.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            Some(_) => Ok(self.written.load(std::sync::atomic::Ordering::Relaxed)),
            None => Err(self.gone()),
        }
    }

    /// Sends the rest and completes the upload: the object appears under its key. Returns the
    /// report (`url`, `bytes`, `parts`, `etag`).
    fn commit<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (w, h) = self.state.lock().unwrap_or_else(|e| e.into_inner()).take().ok_or_else(|| self.gone())?;
        let rep = job::run(py, &self.progress, None, move || {
            drop(w);
            h.finish()
        })?
        .map_err(|e| errors::engine(&e))?;
        let d = PyDict::new(py);
        d.set_item("url", &self.url)?;
        d.set_item("bytes", rep.bytes)?;
        d.set_item("parts", rep.parts)?;
        d.set_item("etag", rep.etag)?;
        Ok(d.into_any())
    }

    /// Abandons the upload (aborted: nothing is stored, no part is left behind).
    fn discard(&self, py: Python<'_>) {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner()).take();
        py.detach(move || drop(st));
    }

    /// True until committed or discarded.
    fn is_open(&self) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// ("remote", how it is written).
    fn decision(&self) -> (String, String) {
        ("remote".into(), "multipart upload, parts sent as they fill; the object appears when closed".into())
    }
}
