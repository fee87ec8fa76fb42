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
//! a forced mode the filesystem refuses is an error (`probe_forced`).

use std::io::IoSlice;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU8, Ordering};

use rustix::fs::{Advice, OFlags};
use rustix::io::{Errno, ReadWriteFlags};

use crate::source::RWF_DONTCACHE;

/// How file data is written (mirrors the engine's `Mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IoMode {
    /// Per file: O_DIRECT for large files, DONTCACHE (else write-behind) for small ones.
    Auto,
    /// O_DIRECT bulk, tail after clearing O_DIRECT (written with DONTCACHE where possible).
    Direct,
    /// Buffered writes with RWF_DONTCACHE.
    DontCache,
    /// Buffered writes, writeback started and pages dropped behind.
    WriteBehind,
    /// Plain buffered writes (leaves the page cache full; for comparison).
    Buffered,
}

impl std::str::FromStr for IoMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "auto" => IoMode::Auto,
            "direct" => IoMode::Direct,
            "dontcache" => IoMode::DontCache,
            "writebehind" | "write-behind" => IoMode::WriteBehind,
            "buffered" => IoMode::Buffered,
            _ => return Err(format!("unknown mode {s:?}: auto|direct|dontcache|writebehind|buffered")),
        })
    }
}

/// What one file actually got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FileMode {
    Direct,
    DontCache,
    WriteBehind,
    Buffered,
}

const UNKNOWN: u8 = 0;
const YES: u8 = 1;
const NO: u8 = 2;

/// Capabilities of the destination filesystem, probed once (first use) and shared.
pub(crate) struct Caps {
    direct: AtomicU8,
    dontcache: AtomicU8,
    pub(crate) align: usize,
}

impl Caps {
    pub(crate) fn new() -> Self {
        Caps {
            direct: AtomicU8::new(UNKNOWN),
            dontcache: AtomicU8::new(UNKNOWN),
            align: 4096,
        }
    }
    pub(crate) fn direct_known_bad(&self) -> bool {
        self.direct.load(Ordering::Relaxed) == NO
    }
    pub(crate) fn set_direct(&self, ok: bool) {
        self.direct.store(if ok { YES } else { NO }, Ordering::Relaxed);
    }
    pub(crate) fn dontcache_known_bad(&self) -> bool {
        self.dontcache.load(Ordering::Relaxed) == NO
    }
    /// Whether O_DIRECT was refused / DONTCACHE was refused (for the report).
    pub(crate) fn verdicts(&self) -> (Option<bool>, Option<bool>) {
        let f = |v: u8| match v {
            YES => Some(true),
            NO => Some(false),
            _ => None,
        };
        (f(self.direct.load(Ordering::Relaxed)), f(self.dontcache.load(Ordering::Relaxed)))
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
                    caps.dontcache.store(YES, Ordering::Relaxed);
                    Ok(FileMode::DontCache)
                }
                // Refused before any I/O: fall back to write-behind and remember.
                Err(e) if e == Errno::OPNOTSUPP || e == Errno::INVAL => {
                    caps.dontcache.store(NO, Ordering::Relaxed);
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

/// A large file being written with O_DIRECT: whole aligned blocks go straight out, the last
/// partial block after clearing O_DIRECT.
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

/// Checks, with a scratch file in the destination, that a forced mode can be honoured: a forced
/// mode the filesystem refuses is an error, never a silent downgrade. `Err` names the errno.
pub(crate) fn probe_forced(dir: BorrowedFd<'_>, mode: IoMode, caps: &Caps) -> Result<(), String> {
    let name = format!(".cacheless-probe-{}", std::process::id());
    let direct = mode == IoMode::Direct;
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let flags = if direct { flags | OFlags::DIRECT } else { flags };
    let fd = rustix::fs::openat(dir, name.as_str(), flags, rustix::fs::Mode::from_raw_mode(0o600));
    let res = match fd {
        Err(e) => Err(e),
        Ok(fd) => {
            let r = if direct {
                let mut b = crate::source::AlignedBuf::new(caps.align, caps.align);
                pwrite_all(fd.as_fd(), b.as_mut_slice(), 0, 0)
            } else {
                pwrite_all(fd.as_fd(), b"x", 0, RWF_DONTCACHE)
            };
            let _ = rustix::fs::unlinkat(dir, name.as_str(), rustix::fs::AtFlags::empty());
            r
        }
    };
    match res {
        Ok(()) => {
            if direct {
                caps.set_direct(true);
            } else {
                caps.dontcache.store(YES, Ordering::Relaxed);
            }
            Ok(())
        }
        Err(e) if direct => Err(format!(
            "O_DIRECT unsupported on this filesystem ({e}): use --mode auto or dontcache"
        )),
        Err(e) => Err(format!(
            "RWF_DONTCACHE unsupported here ({e}; needs Linux 6.14+, ext4 6.17+, XFS 6.16+): use --mode auto or writebehind"
        )),
    }
}
