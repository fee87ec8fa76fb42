//! The recording layer: a FUSE filesystem serving one file, `image`, backed by a real file,
//! that logs in order every write the kernel sends it and every fsync as a barrier.
//!
//! A loop device attached to `MOUNT/image` turns the block requests of the filesystem under
//! test into calls on this file: writes into write calls, and the cache flushes (the flush
//! before a journal commit, a FUA write turned by the block layer into a write and a flush) into
//! fsync. The file is opened with FOPEN_DIRECT_IO, so the kernel keeps no page cache of it and
//! sends each write on at once, in the order the loop driver issues them. The close-time FUSE
//! `flush` is no barrier (it makes nothing durable) and is not logged.

use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use fuser::{FileAttr, FileType, Filesystem, MountOption, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request};

use crate::cleanup::{self, Undo};
use crate::{Error, Result};

/// One entry of the log.
#[derive(Debug, Clone)]
pub enum Event {
    /// A write of `data` at byte offset `off` of the image.
    Write {
        /// Byte offset in the image.
        off: u64,
        /// The bytes.
        data: Arc<[u8]>,
    },
    /// A flush: everything written before it is durable.
    Barrier,
    /// A workload call returned: what it promised holds from here on.
    Mark(String),
    /// A write the device failed (EIO): nothing of it reached the image.
    Failed {
        /// Byte offset in the image.
        off: u64,
        /// Its length.
        len: usize,
    },
}

/// The log, shared by the FUSE server thread and the workload.
#[derive(Debug, Clone, Default)]
pub struct Log(Arc<Mutex<Vec<Event>>>);

impl Log {
    fn push(&self, e: Event) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(e);
    }

    /// Appends a marker: the call named `what` has returned.
    pub fn mark(&self, what: &str) {
        self.push(Event::Mark(what.to_string()));
    }

    /// Takes what was logged so far.
    pub fn take(&self) -> Vec<Event> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

const ROOT: u64 = 1;
const IMAGE: u64 = 2;
/// Name of the one file the filesystem serves.
pub const IMAGE_NAME: &str = "image";
const TTL: Duration = Duration::from_secs(1);

/// The FUSE filesystem: one directory holding `image`.
struct ImageFs {
    file: File,
    size: u64,
    log: Log,
    /// Writes seen so far, and the one that fails (EIO, nothing written: a device's transient
    /// write error), if any.
    writes: usize,
    fail_at: Option<usize>,
    uid: u32,
    gid: u32,
}

impl ImageFs {
    fn attr(&self, ino: u64) -> FileAttr {
        let (kind, perm, size, nlink) = if ino == ROOT { (FileType::Directory, 0o755, 0, 2) } else { (FileType::RegularFile, 0o600, self.size, 1) };
        let t = SystemTime::UNIX_EPOCH;
        FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind,
            perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }
}

/// The byte range `off..off + len` of an image of `size` bytes, or None outside it.
fn range(off: i64, len: u64, size: u64) -> Option<u64> {
    let off = u64::try_from(off).ok()?;
    (off.checked_add(len)? <= size).then_some(off)
}

impl Filesystem for ImageFs {
    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        if parent == ROOT && name == IMAGE_NAME {
            reply.entry(&TTL, &self.attr(IMAGE), 0);
        } else {
            reply.error(libc::ENOENT);
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        match ino {
            ROOT | IMAGE => reply.attr(&TTL, &self.attr(ino)),
            _ => reply.error(libc::ENOENT),
        }
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        if ino == IMAGE {
            reply.opened(0, fuser::consts::FOPEN_DIRECT_IO);
        } else {
            reply.error(libc::EISDIR);
        }
    }

    fn read(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, offset: i64, size: u32, _flags: i32, _lock: Option<u64>, reply: ReplyData) {
        let len = u64::from(size);
        let Some(off) = (ino == IMAGE).then(|| range(offset, 0, self.size)).flatten() else {
            return reply.error(libc::EINVAL);
        };
        let len = len.min(self.size - off);
        let mut buf = vec![0u8; usize::try_from(len).unwrap_or(0)];
        match self.file.read_exact_at(&mut buf, off) {
            Ok(()) => reply.data(&buf),
            Err(e) => reply.error(e.raw_os_error().unwrap_or(libc::EIO)),
        }
    }

    fn write(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, offset: i64, data: &[u8], _wf: u32, _flags: i32, _lock: Option<u64>, reply: ReplyWrite) {
        let Some(off) = (ino == IMAGE).then(|| range(offset, data.len() as u64, self.size)).flatten() else {
            // The image never grows: the loop device's size is fixed.
            return reply.error(libc::ENOSPC);
        };
        self.writes += 1;
        if self.fail_at == Some(self.writes - 1) {
            self.log.push(Event::Failed { off, len: data.len() });
            return reply.error(libc::EIO);
        }
        match self.file.write_all_at(data, off) {
            Ok(()) => {
                self.log.push(Event::Write { off, data: Arc::from(data) });
                reply.written(u32::try_from(data.len()).unwrap_or(u32::MAX));
            }
            Err(e) => reply.error(e.raw_os_error().unwrap_or(libc::EIO)),
        }
    }

    fn flush(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _lock: u64, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fsync(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _datasync: bool, reply: ReplyEmpty) {
        // The backing file itself need not be durable: only the log matters.
        self.log.push(Event::Barrier);
        reply.ok();
    }

    fn readdir(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, offset: i64, mut reply: ReplyDirectory) {
        if ino != ROOT {
            return reply.error(libc::ENOTDIR);
        }
        let entries = [(ROOT, FileType::Directory, "."), (ROOT, FileType::Directory, ".."), (IMAGE, FileType::RegularFile, IMAGE_NAME)];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(usize::try_from(offset).unwrap_or(0)) {
            if reply.add(*ino, i64::try_from(i + 1).unwrap_or(i64::MAX), *kind, name) {
                break;
            }
        }
        reply.ok();
    }
}

/// A mounted recorder: the image at [`Recorder::image`], its writes and flushes in
/// [`Recorder::log`]. Dropping it unmounts the FUSE filesystem (the loop device on it must be
/// detached first).
pub struct Recorder {
    session: Option<fuser::BackgroundSession>,
    mnt: PathBuf,
    log: Log,
    ticket: u64,
    /// The ticket of the abort of its FUSE connection (see [`Undo::AbortFuse`]).
    abort_ticket: Option<u64>,
}

impl Recorder {
    /// Serves `backing` (its size fixed from now) as `MNT/image`, recording into a new log;
    /// the write numbered `fail_at` (from 0) fails with EIO, as a device's transient error.
    pub fn mount(backing: &Path, mnt: &Path, fail_at: Option<usize>) -> Result<Recorder> {
        let _gate = cleanup::gate();
        let file = std::fs::OpenOptions::new().read(true).write(true).open(backing).map_err(|e| Error::io("open", backing, e))?;
        let size = file.metadata().map_err(|e| Error::io("stat", backing, e))?.len();
        let log = Log::default();
        let fs = ImageFs { file, size, log: log.clone(), writes: 0, fail_at, uid: rustix::process::getuid().as_raw(), gid: rustix::process::getgid().as_raw() };
        let opts = [MountOption::FSName("cacheless-crash".into()), MountOption::Subtype("record".into()), MountOption::RW, MountOption::NoAtime];
        let session = fuser::spawn_mount2(fs, mnt, &opts)
            .map_err(|e| Error::Command { what: format!("FUSE mount at {}", mnt.display()), detail: format!("{e} (needs /dev/fuse and root)") })?;
        // Registered before the unmount, so that a signal undoes it after: once the unmount
        // and the detach of the loop device on it are done, as far as they can be.
        let abort_ticket = rustix::fs::stat(mnt).ok().map(|st| cleanup::register(Undo::AbortFuse(connection(st.st_dev))));
        let ticket = cleanup::register(Undo::Umount(mnt.to_path_buf()));
        Ok(Recorder { session: Some(session), mnt: mnt.to_path_buf(), log, ticket, abort_ticket })
    }

    /// The served image file.
    pub fn image(&self) -> PathBuf {
        self.mnt.join(IMAGE_NAME)
    }

    /// The log it records into.
    pub fn log(&self) -> &Log {
        &self.log
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // Dropping the session unmounts it and joins its thread.
        drop(self.session.take());
        cleanup::done(self.ticket);
        if let Some(t) = self.abort_ticket {
            cleanup::done(t);
        }
    }
}

/// The number of the FUSE connection of a mount whose `st_dev` is `dev`: its name under
/// /sys/fs/fuse/connections, the kernel's own encoding of the device number (major << 20 |
/// minor), which is not the one stat(2) reports.
fn connection(dev: rustix::fs::Dev) -> u64 {
    (u64::from(rustix::fs::major(dev)) << 20) | u64::from(rustix::fs::minor(dev))
}

/// Whether this process can run the recorder: root, and /dev/fuse.
pub fn available() -> std::result::Result<(), String> {
    if !rustix::process::geteuid().is_root() {
        return Err("not root (the recorder mounts FUSE, loop devices and filesystems)".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Err("no /dev/fuse".into());
    }
    Ok(())
}
