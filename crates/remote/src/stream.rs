//! Objects as streams: an [`ObjectReader`] reads an object in order while its ranges download
//! ahead in parallel (what `extract URL` decompresses), and an [`ObjectWriter`] uploads what is
//! written to it as parts while it is written (what `pack -o s3://...` writes its frames to).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cacheless::{AlignedBuf, Budget, Error, ErrorKind, Lease, LeaseRequest, Result};

use crate::client::{check_writable, Failure, Multipart, ObjectInfo, Remote};
use crate::fetch::{fetch, receive, Ordered, Tasks};
use crate::location::Location;

/// A streamed transfer's share of `budget` (its ranges or parts in flight, at most a quarter
/// of the whole, at least one part) and the rest, for the job at the other end of the stream
/// (an extraction's writers, a pack's readers): two budgets whose sum is the one given, so that
/// neither waits on memory the other holds.
pub fn split_budget(budget: &Budget, opts: &crate::RemoteOptions) -> (Budget, Budget) {
    let total = budget.limit();
    let want = opts.part_size.saturating_mul(opts.concurrency).min(total / 4).max(opts.part_size.min(total / 2)).max(1);
    (Budget::new(want), Budget::new(total.saturating_sub(want).max(1)))
}

/// An object read in order, its ranges fetched ahead in parallel on a thread of its own into
/// buffers of `budget` (the read-ahead is what the budget and the concurrency allow).
pub struct ObjectReader {
    rx: Receiver<io::Result<Vec<u8>>>,
    cur: Vec<u8>,
    pos: usize,
    cancel: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ObjectReader {
    /// The ranges a reader of `opts` keeps in flight within `budget`: the concurrency asked
    /// for, at most as many parts as the budget holds (at least one).
    pub fn in_flight(opts: &crate::RemoteOptions, budget: &Budget) -> usize {
        opts.concurrency.min((budget.limit() / opts.part_size.max(1)).max(1))
    }

    /// Starts fetching `info`'s object.
    pub fn open(remote: Arc<Remote>, info: ObjectInfo, budget: Budget) -> Result<ObjectReader> {
        let cancel = Arc::new(AtomicBool::new(false));
        // Two ranges' worth of bytes handed over and not yet read, besides those in flight.
        let (tx, rx) = mpsc::sync_channel::<io::Result<Vec<u8>>>(2);
        let stop = cancel.clone();
        let url = info.location.to_string();
        let thread = std::thread::Builder::new()
            .name("cacheless-fetch".into())
            .spawn(move || {
                let send = |b: &[u8]| {
                    tx.send(Ok(b.to_vec())).map_err(|_| Error::new(ErrorKind::Interrupted, "download", info.location.to_string(), "the reader was closed"))
                };
                let mut sink = Ordered::new(send);
                // Ranges that arrive early wait in buffers of their own (as many as are in flight).
                if let Err(e) = fetch(&remote, &info, &budget, remote.opts.concurrency, &stop, None, &mut sink) {
                    drop(sink);
                    let _ = tx.send(Err(io::Error::other(e)));
                }
            })
            .map_err(|e| Error::io("spawn", url, e))?;
        Ok(ObjectReader { rx, cur: Vec::new(), pos: 0, cancel, thread: Some(thread) })
    }
}

impl io::Read for ObjectReader {
    /// Waits for the next range as long as the server takes (its read timeout bounds that),
    /// unless the user asks to stop (see [`cacheless::interrupt`]): the download is cancelled
    /// then and the read fails with ECANCELED within a tenth of a second.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos >= self.cur.len() {
            match self.rx.recv_timeout(Duration::from_millis(100)) {
                Ok(Ok(c)) => {
                    self.cur = c;
                    self.pos = 0;
                }
                Ok(Err(e)) => return Err(e),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if cacheless::interrupt::requested() {
                        self.cancel.store(true, Ordering::Relaxed);
                        return Err(cacheless::interrupt::cancelled());
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(0),
            }
        }
        let n = (self.cur.len() - self.pos).min(buf.len());
        buf[..n].copy_from_slice(&self.cur[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

impl Drop for ObjectReader {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        // Its sends fail once the receiver is gone: the thread ends.
        let (_, rx) = mpsc::sync_channel(0);
        drop(std::mem::replace(&mut self.rx, rx));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What an upload through an [`ObjectWriter`] did.
#[derive(Debug, Clone)]
pub struct StreamReport {
    /// Bytes sent.
    pub bytes: u64,
    /// Parts of the multipart upload (0: one PUT).
    pub parts: u64,
    /// The object's ETag.
    pub etag: Option<String>,
}

struct Inner {
    remote: Arc<Remote>,
    dest: Location,
    part: usize,
    lease: Lease,
    cur: Option<(AlignedBuf, usize)>,
    upload: Option<Multipart>,
    tasks: Tasks,
    tx: SyncSender<std::result::Result<(), Failure>>,
    rx: Receiver<std::result::Result<(), Failure>>,
    active: usize,
    in_flight: usize,
    parts: u64,
    bytes: u64,
    done: bool,
    cancel: Arc<AtomicBool>,
}

/// Bytes written become an object: parts of `part_size` are uploaded as they fill, with the
/// remote's concurrency in flight; [`UploadHandle::finish`] completes it (one PUT when it never
/// filled a part). Dropped unfinished (an error, a signal), the multipart upload is aborted.
pub struct ObjectWriter(Arc<Mutex<Inner>>);

/// Completes the upload an [`ObjectWriter`] feeds.
pub struct UploadHandle(Arc<Mutex<Inner>>);

/// An upload to `dest` fed by writes: the writer, and the handle that completes it. Setting
/// `cancel` makes the next write or the finish fail (`Interrupted`), and the upload is aborted.
/// An error before anything is sent where `dest` takes no upload: a prefix (`InvalidInput`) or
/// an `http(s)://` URL (`Unsupported`; uploads go to S3).
pub fn upload_stream(remote: Arc<Remote>, dest: &Location, budget: &Budget, cancel: Arc<AtomicBool>) -> Result<(ObjectWriter, UploadHandle)> {
    check_writable(dest)?;
    let page = cacheless::sys::page_size();
    // The size is unknown: the part size asked for, within the budget.
    let part = crate::transfer::part_size(0, remote.opts.part_size.min(budget.limit() >> 20 << 20));
    crate::transfer::check_fits(part, budget, dest)?;
    let want = remote.opts.concurrency.max(1) + 1;
    let lease = budget.lease(LeaseRequest::buffers(part, want).aligned(page));
    let in_flight = lease.count().saturating_sub(1).max(1);
    let (tx, rx) = mpsc::sync_channel(want);
    let inner = Inner {
        remote,
        dest: dest.clone(),
        part,
        lease,
        cur: None,
        upload: None,
        tasks: Tasks::default(),
        tx,
        rx,
        active: 0,
        in_flight,
        parts: 0,
        bytes: 0,
        done: false,
        cancel,
    };
    let shared = Arc::new(Mutex::new(inner));
    Ok((ObjectWriter(shared.clone()), UploadHandle(shared)))
}

impl Inner {
    fn err(&self, f: Failure) -> Error {
        self.remote.conn.error("upload", &self.dest, f)
    }

    fn interrupted(&self) -> Result<()> {
        if self.cancel.load(Ordering::Relaxed) {
            return Err(Error::new(ErrorKind::Interrupted, "upload", self.dest.to_string(), "interrupted"));
        }
        Ok(())
    }

    /// Waits for one part in flight; its error is the upload's.
    fn wait_one(&mut self) -> Result<()> {
        let r = receive(&self.rx, &self.cancel, "upload", &self.dest)?;
        self.active -= 1;
        r.map_err(|f| self.err(f).with_note("a part failed; the upload was aborted"))
    }

    fn buffer(&mut self) -> Result<AlignedBuf> {
        loop {
            if let Some(b) = self.lease.get() {
                return Ok(b);
            }
            if self.active > 0 {
                self.wait_one()?;
            } else {
                // A sent part's buffer is on its way back from the client.
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    fn send(&mut self, buf: AlignedBuf, len: usize) -> Result<()> {
        if self.upload.is_none() {
            self.upload = Some(Multipart::start(&self.remote, &self.dest)?);
        }
        while self.active >= self.in_flight {
            self.wait_one()?;
        }
        let Some(up) = self.upload.as_mut() else { return Ok(()) };
        let sent = up.part(crate::transfer::payload(buf, len));
        let tx = self.tx.clone();
        self.tasks.spawn(&self.remote, async move {
            let _ = tx.send(sent.await);
        });
        self.active += 1;
        self.parts += 1;
        Ok(())
    }

    fn write(&mut self, mut data: &[u8]) -> Result<()> {
        self.interrupted()?;
        if self.done {
            return Err(Error::new(ErrorKind::InvalidInput, "upload", self.dest.to_string(), "written after it was finished"));
        }
        while !data.is_empty() {
            let (mut buf, mut len) = match self.cur.take() {
                Some(c) => c,
                None => (self.buffer()?, 0),
            };
            let n = data.len().min(self.part - len);
            buf[len..len + n].copy_from_slice(&data[..n]);
            len += n;
            data = &data[n..];
            self.bytes += n as u64;
            if len == self.part {
                self.send(buf, len)?;
            } else {
                self.cur = Some((buf, len));
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<StreamReport> {
        self.done = true;
        self.interrupted()?;
        if self.upload.is_none() {
            // Never filled a part: one PUT.
            let (buf, len) = match self.cur.take() {
                Some(c) => c,
                None => (self.buffer()?, 0),
            };
            let put = self.remote.rt.block_on(self.remote.conn.put(&self.dest, crate::transfer::payload(buf, len)));
            let etag = put.map_err(|f| self.err(f))?;
            return Ok(StreamReport { bytes: self.bytes, parts: 0, etag });
        }
        if let Some((buf, len)) = self.cur.take() {
            self.send(buf, len)?;
        }
        while self.active > 0 {
            self.wait_one()?;
        }
        self.interrupted()?;
        let Some(up) = self.upload.take() else {
            return Err(Error::new(ErrorKind::Io, "upload", self.dest.to_string(), "the upload was closed already"));
        };
        let etag = up.complete()?;
        Ok(StreamReport { bytes: self.bytes, parts: self.parts, etag })
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The parts in flight first, then the upload: the server keeps nothing.
        self.tasks = Tasks::default();
        if let Some(mut up) = self.upload.take() {
            up.abort();
        }
    }
}

impl io::Write for ObjectWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut inner = self.0.lock().map_err(|_| io::Error::other("the upload failed on another thread"))?;
        inner.write(buf).map_err(io::Error::other)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl UploadHandle {
    /// Sends what is left and completes the upload: the object appears under its key. On an
    /// error the upload is aborted.
    pub fn finish(self) -> Result<StreamReport> {
        let mut inner = self.0.lock().map_err(|_| Error::new(ErrorKind::Io, "upload", "upload", "the upload failed on another thread"))?;
        let r = inner.finish();
        if r.is_err() {
            inner.tasks = Tasks::default();
            if let Some(mut up) = inner.upload.take() {
                up.abort();
            }
        }
        r
    }
}
