//! Writing small and sparse files' data off the page cache.
//!
//! Files of at least `ExtractOptions::direct_min` (1 MiB) go through the engine's `Writer` (see
//! extract.rs). Smaller ones, and sparse entries, are written here with one `pwritev2` per
//! piece, because a `Writer` per few-KiB file would pay its queue set-up, lease and
//! preallocation per file. The policy is the engine's: buffered writes with
//! `pwritev2(RWF_DONTCACHE)` (Linux 6.14+, ext4 6.17+, XFS 6.16+), else write-behind
//! (`posix_fadvise(DONTNEED)` right after the write starts writeback, and again a few files later,
//! once writeback is done, to drop the pages); a forced `--mode direct` writes small files with
//! O_DIRECT blocks and the tail after clearing O_DIRECT with `fcntl(F_SETFL)`. Each fallback
//! happens only on a named errno (EOPNOTSUPP/EINVAL for DONTCACHE) and is counted in the report;
//! a forced mode the filesystem refuses is an error (`probe`).

use std::io::IoSlice;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};

use rustix::fs::{Advice, OFlags};
use rustix::io::{Errno, ReadWriteFlags};

/// How file data is written: the engine's mode (`Auto` picks per file).
pub use cacheless::Mode as IoMode;

/// What one file actually got: the engine's mode, never `Auto` here.
pub(crate) type FileMode = cacheless::Mode;

const RWF_DONTCACHE: u32 = cacheless::caps::RWF_DONTCACHE as u32;

const UNKNOWN: u8 = 0;
const YES: u8 = 1;
const NO: u8 = 2;

/// One verdict, learnt from the first write that tries it and shared by every worker.
struct Verdict(AtomicU8);

impl Verdict {
    fn get(&self) -> Option<bool> {
        match self.0.load(Ordering::Relaxed) {
            YES => Some(true),
            NO => Some(false),
            _ => None,
        }
    }
    fn set(&self, ok: bool) {
        // Loaded first: this runs after every write, and an unconditional store would bounce
        // the cache line between the workers.
        if self.get() != Some(ok) {
            self.0.store(if ok { YES } else { NO }, Ordering::Relaxed);
        }
    }
}

/// Capabilities of the destination filesystem, learnt as files are written and shared.
pub(crate) struct Caps {
    direct: Verdict,
    dontcache: Verdict,
    /// O_DIRECT alignment of offsets, lengths and buffer addresses.
    pub(crate) align: usize,
}

impl Caps {
    pub(crate) fn new(align: usize) -> Self {
        Caps {
            direct: Verdict(AtomicU8::new(UNKNOWN)),
            dontcache: Verdict(AtomicU8::new(UNKNOWN)),
            align,
        }
    }
    pub(crate) fn set_direct(&self, ok: bool) {
        self.direct.set(ok);
    }
    pub(crate) fn dontcache_known_bad(&self) -> bool {
        self.dontcache.get() == Some(false)
    }
    /// Whether O_DIRECT / DONTCACHE worked (None: not tried), for the report.
    pub(crate) fn verdicts(&self) -> (Option<bool>, Option<bool>) {
        (self.direct.get(), self.dontcache.get())
    }
}

/// Writes all of `buf` at `off` with `pwrite`, or `pwritev2(flags)` when flags are set.
pub(crate) fn pwrite_all(fd: BorrowedFd<'_>, mut buf: &[u8], mut off: u64, flags: u32) -> rustix::io::Result<()> {
    while !buf.is_empty() {
        let n = if flags != 0 {
            rustix::io::pwritev2(fd, &[IoSlice::new(buf)], off, ReadWriteFlags::from_bits_retain(flags))
        } else {
            rustix::io::pwrite(fd, buf, off)
        };
        match n {
            Ok(0) => return Err(Errno::IO),
            Ok(n) => {
                buf = &buf[n..];
                off += n as u64;
            }
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Buffered write of `buf` at `off` off the page cache: DONTCACHE when the filesystem takes it,
/// else plain pwrite + DONTNEED (write-behind). Returns the mode used.
pub(crate) fn write_buffered(caps: &Caps, fd: BorrowedFd<'_>, buf: &[u8], off: u64, want: FileMode) -> rustix::io::Result<FileMode> {
    match want {
        FileMode::Buffered => {
            pwrite_all(fd, buf, off, 0)?;
            Ok(FileMode::Buffered)
        }
        FileMode::DontCache | FileMode::Direct if !caps.dontcache_known_bad() => {
            match pwrite_all(fd, buf, off, RWF_DONTCACHE) {
                Ok(()) => {
                    caps.dontcache.set(true);
                    Ok(FileMode::DontCache)
                }
                // Refused before any I/O: fall back to write-behind and remember.
                Err(e) if e == Errno::OPNOTSUPP || e == Errno::INVAL => {
                    caps.dontcache.set(false);
                    write_behind(fd, buf, off)
                }
                Err(e) => Err(e),
            }
        }
        _ => write_behind(fd, buf, off),
    }
}

fn write_behind(fd: BorrowedFd<'_>, buf: &[u8], off: u64) -> rustix::io::Result<FileMode> {
    pwrite_all(fd, buf, off, 0)?;
    // DONTNEED on dirty pages starts their writeback; a second DONTNEED later drops them.
    let _ = rustix::fs::fadvise(fd, off, std::num::NonZeroU64::new(buf.len() as u64), Advice::DontNeed);
    Ok(FileMode::WriteBehind)
}

/// A file being written with O_DIRECT (forced `--mode direct`, below `direct_min`): whole aligned
/// blocks go straight out, the last partial block after clearing O_DIRECT.
pub(crate) struct DirectFile<'a> {
    pub(crate) fd: &'a OwnedFd,
    pub(crate) off: u64,
}

impl DirectFile<'_> {
    /// Writes an aligned block (its length a multiple of the alignment, address aligned).
    pub(crate) fn write_aligned(&mut self, buf: &[u8]) -> rustix::io::Result<()> {
        pwrite_all(self.fd.as_fd(), buf, self.off, 0)?;
        self.off += buf.len() as u64;
        Ok(())
    }

    /// Writes the final bytes: the aligned part direct, the rest after clearing O_DIRECT.
    pub(crate) fn finish(&mut self, caps: &Caps, buf: &[u8]) -> rustix::io::Result<()> {
        let aligned = buf.len() / caps.align * caps.align;
        if aligned > 0 {
            self.write_aligned(&buf[..aligned])?;
        }
        let tail = &buf[aligned..];
        if !tail.is_empty() {
            let fl = rustix::fs::fcntl_getfl(self.fd)?;
            rustix::fs::fcntl_setfl(self.fd, fl - OFlags::DIRECT)?;
            write_buffered(caps, self.fd.as_fd(), tail, self.off, FileMode::DontCache)?;
            self.off += tail.len() as u64;
        }
        Ok(())
    }
}

/// The destination's capabilities for `mode`. A forced `direct` or `dontcache` is checked up
/// front with the engine's probe (cached per device, and the one the `Writer` of large files
/// uses): a forced mode the filesystem refuses is an error, never a silent downgrade, and `Err`
/// says why and what to do. O_DIRECT alignment is the engine's figure, at least 4096.
pub(crate) fn probe(dest: &Path, mode: IoMode) -> Result<Caps, String> {
    if !matches!(mode, IoMode::Direct | IoMode::DontCache) {
        return Ok(Caps::new(4096));
    }
    let fs = cacheless::caps::for_dir(dest).map_err(|e| format!("probe {}: {e}", dest.display()))?;
    if let Err(r) = cacheless::policy::decide_write(mode, &fs, None) {
        return Err(format!("{} on the filesystem of {}: {}", r.reason, dest.display(), r.hint()));
    }
    let align = fs.direct.as_ref().map_or(4096, |a| a.both().max(4096));
    let caps = Caps::new(align);
    match mode {
        IoMode::Direct => caps.set_direct(true),
        _ => caps.dontcache.set(true),
    }
    Ok(caps)
}
