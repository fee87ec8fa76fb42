//! File objects: the native halves of `cacheless.open(path, "rb")` and `"wb"`.

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use cacheless::{ErrorKind, Progress, ReadOptions, Reader, Writer};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors;
use crate::job;
use crate::opts::{self, to_py, BlockSize, Count, Memory, QueueDepth, Size};
use crate::pybuf::Pinned;

/// Reads at least this large go straight into the caller's buffer when its address and the
/// file position suit the mode (zero-copy); smaller ones are copied out of the read-ahead.
const ZERO_COPY_MIN: usize = 1 << 20;

/// Calls moving at least this much run as a job: Ctrl-C cancels them between pieces.
const JOB_MIN: usize = 64 << 20;

/// Pieces of a job-run read or write.
const PIECE: usize = 64 << 20;

/// What `readall` of a stream asks for at a time.
const STREAM_PIECE: usize = 1 << 20;

struct ReadState {
    r: Reader,
    pos: u64,
    /// Where the engine's stream (with its read-ahead) is, when it is in use.
    stream_at: Option<u64>,
    /// O_DIRECT's (memory, offset) alignment, when reads are direct.
    direct: Option<(usize, usize)>,
}

impl ReadState {
    /// Fills `buf` from the current position (short only at end of file).
    fn readinto(&mut self, buf: &mut [u8]) -> cacheless::Result<usize> {
        // A pipe, a FIFO or a file whose size says nothing is read as it comes, to its end, as
        // Python's own open() reads it (waiting for a writer in a way Ctrl-C ends).
        if !self.r.streams() {
            if self.pos >= self.r.len() || buf.is_empty() {
                return Ok(0);
            }
            let aligned = match self.direct {
                Some((mem, off)) => self.pos % off as u64 == 0 && buf.as_ptr() as usize % mem == 0,
                None => true,
            };
            if buf.len() >= ZERO_COPY_MIN && aligned {
                let n = self.r.read_at(buf, self.pos)?;
                self.pos += n as u64;
                self.stream_at = None;
                return Ok(n);
            }
            if self.stream_at != Some(self.pos) {
                self.r.seek_stream(self.pos)?;
            }
        }
        let mut done = 0;
        while done < buf.len() {
            let n = self.r.read_stream(&mut buf[done..])?;
            if n == 0 {
                break;
            }
            done += n;
        }
        self.pos += done as u64;
        self.stream_at = Some(self.pos);
        Ok(done)
    }
}

fn closed() -> PyErr {
    PyValueError::new_err("I/O operation on closed file")
}

/// Runs a fill of `buf` in pieces: as a job (cancellable, GIL released) when it is large,
/// else in one go with the GIL released.
/// `streams`: the file is a stream, which can wait for ever on its writer: run as a job,
/// which Ctrl-C ends, however small the read.
fn read_pieces(py: Python<'_>, state: &Mutex<Option<ReadState>>, streams: bool, buf: &mut [u8]) -> PyResult<usize> {
    let progress = Progress::new();
    let fill = |buf: &mut [u8]| -> Option<cacheless::Result<usize>> {
        let mut g = state.lock().unwrap_or_else(|e| e.into_inner());
        let st = g.as_mut()?;
        let mut done = 0;
        while done < buf.len() {
            if progress.is_cancelled() {
                return Some(Err(cacheless::Error::new(ErrorKind::Interrupted, "read", st.r.path(), "interrupted")));
            }
            let end = (done + PIECE).min(buf.len());
            match st.readinto(&mut buf[done..end]) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) => return Some(Err(e)),
            }
        }
        Some(Ok(done))
    };
    let r = if buf.len() >= JOB_MIN || streams { job::run(py, &progress, None, || fill(buf))? } else { py.detach(|| fill(buf)) };
    match r {
        None => Err(closed()),
        Some(Ok(n)) => Ok(n),
        Some(Err(e)) => Err(errors::engine(&e)),
    }
}

/// A file open for reading (`cacheless.open(path, "rb")` wraps it in `io.RawIOBase`).
#[pyclass(frozen, module = "cacheless._native", name = "Reader")]
pub struct PyReader {
    state: Mutex<Option<ReadState>>,
    path: PathBuf,
    len: u64,
    /// Read as a stream (see [`Reader::streams`]).
    streams: bool,
    mode: (String, String),
    fd: i32,
}

impl PyReader {
    fn lock(&self) -> MutexGuard<'_, Option<ReadState>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[pymethods]
impl PyReader {
    #[new]
    #[pyo3(signature = (path, *, mode = "auto", backend = "auto", memory = None, block_size = None, queue_depth = None))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        mode: &str,
        backend: &str,
        memory: Option<Size<Memory>>,
        block_size: Option<Size<BlockSize>>,
        queue_depth: Option<Count<QueueDepth>>,
    ) -> PyResult<Self> {
        let ro = ReadOptions::from(opts::io(mode, backend, memory, block_size, queue_depth)?);
        let r = py.detach(|| Reader::open(&path, &ro)).map_err(|e| errors::engine(&e))?;
        let plan = r.plan();
        let direct = (plan.mode() == cacheless::Taken::Direct).then_some((plan.mem_align, plan.align));
        let (len, streams, fd) = (r.len(), r.streams(), r.file().as_raw_fd());
        let mode = (r.decision().mode.to_string(), r.decision().reason.to_string());
        Ok(PyReader { state: Mutex::new(Some(ReadState { r, pos: 0, stream_at: None, direct })), path, len, streams, mode, fd })
    }

    /// Fills `buf` (any writable buffer) from the current position; returns the bytes read,
    /// fewer than asked only at end of file.
    fn readinto(&self, py: Python<'_>, buf: &Bound<'_, PyAny>) -> PyResult<usize> {
        let mut pin = Pinned::writable(buf)?;
        read_pieces(py, &self.state, self.streams, pin.bytes_mut())
    }

    /// Everything from the current position to the end, as bytes (a stream: all it gives
    /// until its writer closes it).
    fn readall<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let pos = self.lock().as_ref().map(|s| s.pos).ok_or_else(closed)?;
        if self.streams {
            let mut out = Vec::new();
            loop {
                let at = out.len();
                out.resize(at + STREAM_PIECE, 0);
                let n = read_pieces(py, &self.state, self.streams, &mut out[at..])?;
                out.truncate(at + n);
                if n < STREAM_PIECE {
                    return Ok(PyBytes::new(py, &out));
                }
            }
        }
        let n = cacheless::conv::usize_of(self.len.saturating_sub(pos));
        PyBytes::new_with(py, n, |b| read_pieces(py, &self.state, self.streams, b).map(|_| ()))
    }

    /// Moves to absolute position `pos` (past the end reads nothing); returns it.
    fn seek(&self, pos: u64) -> PyResult<u64> {
        let mut g = self.lock();
        let st = g.as_mut().ok_or_else(closed)?;
        st.pos = pos;
        Ok(pos)
    }

    /// The current position.
    fn tell(&self) -> PyResult<u64> {
        self.lock().as_ref().map(|s| s.pos).ok_or_else(closed)
    }

    /// The file's length when opened.
    fn size(&self) -> u64 {
        self.len
    }

    /// Whether it is read as a stream (a pipe, a FIFO, a character device or a file whose
    /// size says nothing): no seeking, read to its end.
    fn streams(&self) -> bool {
        self.streams
    }

    /// The file descriptor (valid until close).
    fn fileno(&self) -> PyResult<i32> {
        self.lock().as_ref().map(|_| self.fd).ok_or_else(closed)
    }

    /// (mode, reason): how the file is read, and why.
    fn decision(&self) -> (String, String) {
        self.mode.clone()
    }

    /// The path opened.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// Closes the file (waits for read-ahead in flight).
    fn close(&self, py: Python<'_>) {
        let st = self.lock().take();
        py.detach(move || drop(st));
    }
}

/// A file being written (`cacheless.open(path, "wb")`): under a temporary name until `commit`.
#[pyclass(frozen, module = "cacheless._native", name = "Writer")]
pub struct PyWriter {
    state: Mutex<Option<Writer>>,
    /// Why the writer was dropped before commit (a failed write), for the error `commit` raises.
    failed: Mutex<Option<String>>,
    path: PathBuf,
    mode: (String, String),
    fd: i32,
}

impl PyWriter {
    fn lock(&self) -> MutexGuard<'_, Option<Writer>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn gone(&self) -> PyErr {
        match self.failed.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            Some(why) => PyValueError::new_err(format!("{}: an earlier write failed ({why}); nothing was written under this name", self.path.display())),
            None => closed(),
        }
    }
}

#[pymethods]
impl PyWriter {
    #[new]
    #[pyo3(signature = (path, *, mode = "auto", backend = "auto", memory = None, block_size = None, queue_depth = None, size_hint = None, sync = true))]
    #[allow(clippy::too_many_arguments)] // The Python signature: each keyword is a parameter.
    fn new(
        py: Python<'_>,
        path: PathBuf,
        mode: &str,
        backend: &str,
        memory: Option<Size<Memory>>,
        block_size: Option<Size<BlockSize>>,
        queue_depth: Option<Count<QueueDepth>>,
        size_hint: Option<u64>,
        sync: bool,
    ) -> PyResult<Self> {
        let wo = opts::write(opts::io(mode, backend, memory, block_size, queue_depth)?, sync, size_hint);
        let w = py.detach(|| Writer::create(&path, &wo)).map_err(|e| errors::engine(&e))?;
        let mode = (w.decision().mode.to_string(), w.decision().reason.to_string());
        let fd = w.file().as_raw_fd();
        Ok(PyWriter { state: Mutex::new(Some(w)), failed: Mutex::new(None), path, mode, fd })
    }

    /// Writes all of `buf` (any bytes-like object); returns its length.
    fn write(&self, py: Python<'_>, buf: &Bound<'_, PyAny>) -> PyResult<usize> {
        let pin = Pinned::readable(buf)?;
        let data = pin.bytes();
        let progress = Progress::new();
        let put = || -> Option<cacheless::Result<()>> {
            let mut g = self.lock();
            let w = g.as_mut()?;
            for piece in data.chunks(PIECE) {
                if progress.is_cancelled() {
                    return Some(Err(cacheless::Error::new(ErrorKind::Interrupted, "write", w.path(), "interrupted")));
                }
                if let Err(e) = w.write_bytes(piece) {
                    return Some(Err(e));
                }
            }
            Some(Ok(()))
        };
        let r = if data.len() >= JOB_MIN { job::run(py, &progress, None, put) } else { Ok(py.detach(put)) };
        let failed = match r {
            Ok(Some(Ok(()))) => return Ok(data.len()),
            Ok(None) => return Err(self.gone()),
            Ok(Some(Err(e))) => {
                *self.failed.lock().unwrap_or_else(|x| x.into_inner()) = Some(e.to_string());
                Err(errors::engine(&e))
            }
            Err(e) => {
                *self.failed.lock().unwrap_or_else(|x| x.into_inner()) = Some("interrupted".into());
                Err(e)
            }
        };
        // A write that failed part-way leaves the file in an unknown state: drop it (the
        // temporary is removed), so that nothing half-written can be committed.
        let w = self.lock().take();
        py.detach(move || drop(w));
        failed
    }

    /// Bytes written so far.
    fn tell(&self) -> PyResult<u64> {
        self.lock().as_ref().map(|w| w.position()).ok_or_else(|| self.gone())
    }

    /// Writes the rest, makes the file durable and renames it into place; returns the report.
    fn commit<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let w = self.lock().take().ok_or_else(|| self.gone())?;
        let rep = py.detach(move || w.finish()).map_err(|e| errors::engine(&e))?;
        to_py(py, &rep)
    }

    /// Drops the file without committing: the temporary is removed, the destination untouched.
    fn discard(&self, py: Python<'_>) {
        let w = self.lock().take();
        py.detach(move || drop(w));
    }

    /// True until committed or discarded.
    fn is_open(&self) -> bool {
        self.lock().is_some()
    }

    /// The descriptor of the file being written (its temporary name until committed).
    fn fileno(&self) -> PyResult<i32> {
        self.lock().as_ref().map(|_| self.fd).ok_or_else(|| self.gone())
    }

    /// (mode, reason): how the file is written, and why.
    fn decision(&self) -> (String, String) {
        self.mode.clone()
    }

    /// The final path.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }
}
