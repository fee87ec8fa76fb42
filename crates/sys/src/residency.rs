//! How much of a file is in the page cache, and dropping what we put there.
//!
//! cachestat(2) (Linux 6.5+) counts cached, dirty and writeback pages of a range without
//! touching them; mincore(2) over a read-only mapping is the fallback and also gives the
//! per-page bitmap that "drop only what we brought in" needs.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};

/// cachestat's syscall number (451 on every architecture since Linux 6.5; libc has no constant).
const SYS_CACHESTAT: libc::c_long = 451;

#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

/// The kernel's `struct cachestat`.
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
pub struct Cachestat {
    /// Pages in the page cache.
    pub nr_cache: u64,
    /// Dirty pages.
    pub nr_dirty: u64,
    /// Pages under writeback.
    pub nr_writeback: u64,
    /// Pages evicted.
    pub nr_evicted: u64,
    /// Pages evicted recently (would have been hits).
    pub nr_recently_evicted: u64,
}

/// cachestat(2) over `[off, off+len)` (`len` 0: to the end of the file). Linux 6.5+.
pub fn cachestat(fd: BorrowedFd<'_>, off: u64, len: u64) -> io::Result<Cachestat> {
    let range = CachestatRange { off, len };
    let mut cs = Cachestat::default();
    // SAFETY: both pointers are to live, properly sized repr(C) structs for the call's duration.
    let r = unsafe { libc::syscall(SYS_CACHESTAT, fd.as_raw_fd(), &range as *const CachestatRange, &mut cs as *mut Cachestat, 0u32) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(cs)
    }
}

/// cachestat(2) on a raw descriptor over the whole file, for probing whether the call exists.
/// Why cachestat(2) cannot be used.
#[derive(Debug, Clone, Copy)]
pub enum CachestatMissing {
    /// The user turned it off (`CACHELESS_DISABLE=cachestat`).
    Disabled,
    /// The call failed with this errno (ENOSYS: the kernel predates it, 6.5).
    Errno(i32),
}

/// Whether cachestat(2) is there, probed once. An invalid descriptor tells the two cases apart
/// without touching a file: EBADF means the call exists, ENOSYS that it does not. Per-file
/// refusals (EPERM on files the caller may not write) are handled where residency is asked for.
pub fn cachestat_support() -> std::result::Result<(), CachestatMissing> {
    static S: std::sync::OnceLock<std::result::Result<(), CachestatMissing>> = std::sync::OnceLock::new();
    *S.get_or_init(|| {
        if crate::env::disabled("cachestat") {
            return Err(CachestatMissing::Disabled);
        }
        match cachestat_raw(-1) {
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => Err(CachestatMissing::Errno(libc::ENOSYS)),
            _ => Ok(()),
        }
    })
}

fn cachestat_raw(fd: i32) -> io::Result<Cachestat> {
    let range = CachestatRange { off: 0, len: 0 };
    let mut cs = Cachestat::default();
    // SAFETY: both pointers are to live repr(C) structs; a bad fd fails with EBADF.
    let r = unsafe { libc::syscall(SYS_CACHESTAT, fd, &range as *const CachestatRange, &mut cs as *mut Cachestat, 0u32) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(cs)
    }
}

/// Where a residency figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// cachestat(2).
    Cachestat,
    /// mincore(2) over a mapping.
    Mincore,
}

/// Page-cache residency of a file or range.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Residency {
    /// Pages of the range in the page cache.
    pub cached_pages: u64,
    /// Pages the range spans.
    pub total_pages: u64,
    /// Dirty pages (cachestat only; 0 from mincore).
    pub dirty_pages: u64,
    /// Pages under writeback (cachestat only).
    pub writeback_pages: u64,
    /// Page size in bytes.
    pub page_size: u64,
    /// How it was measured.
    pub source: Source,
}

impl Residency {
    /// Bytes resident.
    pub fn cached_bytes(&self) -> u64 {
        self.cached_pages * self.page_size
    }
    /// Bytes the range spans, in whole pages.
    pub fn total_bytes(&self) -> u64 {
        self.total_pages * self.page_size
    }
    /// Resident fraction, 0.0 for an empty file.
    pub fn fraction(&self) -> f64 {
        if self.total_pages == 0 {
            0.0
        } else {
            self.cached_pages as f64 / self.total_pages as f64
        }
    }
}

fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

/// Residency of `[off, off+len)` of an open file: cachestat, else mincore.
pub fn residency(file: &File, off: u64, len: u64) -> io::Result<Residency> {
    let ps = page_size();
    let total = ((off + len).div_ceil(ps)).saturating_sub(off / ps);
    if len == 0 {
        return Ok(Residency { cached_pages: 0, total_pages: 0, dirty_pages: 0, writeback_pages: 0, page_size: ps, source: Source::Cachestat });
    }
    if cachestat_support().is_ok() {
        match cachestat(file.as_fd(), off, len) {
            Ok(cs) => {
                return Ok(Residency {
                    cached_pages: cs.nr_cache,
                    total_pages: total,
                    dirty_pages: cs.nr_dirty,
                    writeback_pages: cs.nr_writeback,
                    page_size: ps,
                    source: Source::Cachestat,
                })
            }
            // The kernel refuses cachestat on files the caller may not write; mincore may
            // still answer below.
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
            Err(e) => return Err(e),
        }
    }
    // mincore reports every page of a file the caller may not write as resident (so as not to
    // leak what others read): such an answer would be a lie, so say "unknown" instead.
    if rustix::fs::access(format!("/proc/self/fd/{}", file.as_raw_fd()).as_str(), rustix::fs::Access::WRITE_OK).is_err()
        && !rustix::process::geteuid().is_root()
    {
        return Err(io::Error::new(io::ErrorKind::PermissionDenied, "residency unknown: cachestat and mincore need write permission on the file"));
    }
    let map = resident_pages(file, off, len)?;
    Ok(Residency {
        cached_pages: map.iter().filter(|&&b| b).count() as u64,
        total_pages: total,
        dirty_pages: 0,
        writeback_pages: 0,
        page_size: ps,
        source: Source::Mincore,
    })
}

/// Residency of a whole file by path.
pub fn residency_of(path: impl AsRef<Path>) -> Result<Residency> {
    let path = path.as_ref();
    let f = File::open(path).map_err(|e| Error::io("open", path, e))?;
    let len = f.metadata().map_err(|e| Error::io("stat", path, e))?.len();
    residency(&f, 0, len).map_err(|e| Error::io("residency", path, e))
}

/// Per-page residency of `[off, off+len)` via mincore over a read-only mapping. The mapping is
/// never touched, so nothing is read in.
pub fn resident_pages(file: &File, off: u64, len: u64) -> io::Result<Vec<bool>> {
    let ps = page_size();
    let start = off / ps * ps;
    let end = (off + len).div_ceil(ps) * ps;
    if end <= start {
        return Ok(Vec::new());
    }
    let maplen = usize::try_from(end - start).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "range too large to map"))?;
    let map_off = libc::off_t::try_from(start).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset out of range"))?;
    // SAFETY: a fresh shared read-only mapping of our own fd; we never dereference it, only
    // pass it to mincore, and unmap it before returning.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), maplen, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), map_off) };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let pages = maplen / crate::conv::usize_of(ps);
    let mut vec = vec![0u8; pages];
    // SAFETY: p..p+maplen is our mapping; vec has one byte per page as mincore requires.
    let r = unsafe { libc::mincore(p, maplen, vec.as_mut_ptr()) };
    let err = io::Error::last_os_error();
    // SAFETY: unmapping exactly the mapping created above.
    unsafe { libc::munmap(p, maplen) };
    if r != 0 {
        return Err(err);
    }
    Ok(vec.into_iter().map(|b| b & 1 == 1).collect())
}

/// sync_file_range(2) over `[off, off+len)` with `flags` (Linux 2.6.17+; rustix lacks it).
pub fn sync_range(file: &File, off: u64, len: u64, flags: libc::c_uint) -> io::Result<()> {
    let range = |n: u64| libc::off64_t::try_from(n).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "range out of bounds"));
    let (off, len) = (range(off)?, range(len)?);
    loop {
        // SAFETY: integer-only syscall on our own open fd.
        let r = unsafe { libc::sync_file_range(file.as_raw_fd(), off, len, flags) };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// Writes back and drops `[off, off+len)` (`len` 0: the whole file) from the page cache.
/// Dirty pages are written first (DONTNEED leaves dirty pages), so nothing is lost.
pub fn evict(file: &File, off: u64, len: u64) -> io::Result<()> {
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    if let Err(e) = sync_range(file, off, len, flags) {
        // Not every file type supports it (pipes, some filesystems): then fdatasync.
        if !matches!(e.raw_os_error(), Some(libc::ESPIPE) | Some(libc::EINVAL)) {
            return Err(e);
        }
        rustix::fs::fdatasync(file)?;
    }
    drop_range(file, off, len)
}

/// fadvise(DONTNEED) on `[off, off+len)` without writing anything back first.
pub fn drop_range(file: &File, off: u64, len: u64) -> io::Result<()> {
    rustix::fs::fadvise(file, off, std::num::NonZeroU64::new(len), rustix::fs::Advice::DontNeed)?;
    Ok(())
}

/// Drops the pages of `[off, off+len)` that were not resident before, according to `before`
/// (a bitmap from [`resident_pages`] taken for the same range), leaving pages other programs
/// had cached alone.
pub fn drop_brought_in(file: &File, off: u64, len: u64, before: &[bool]) -> io::Result<()> {
    let ps = page_size();
    let first = off / ps;
    let mut i = 0;
    while i < before.len() {
        if before[i] {
            i += 1;
            continue;
        }
        let j = before[i..].iter().position(|&b| b).map(|k| i + k).unwrap_or(before.len());
        let start = (first + i as u64) * ps;
        let end = ((first + j as u64) * ps).min((off + len).div_ceil(ps) * ps);
        drop_range(file, start, end - start)?;
        i = j;
    }
    Ok(())
}

/// What [`evict_path`] did to one file (the CLI's `evict --json` rows, Python's `evict()`).
#[derive(Debug, Clone, Serialize)]
pub struct Evicted {
    /// The file, as given.
    #[serde(serialize_with = "crate::quote::serialize_path")]
    pub path: PathBuf,
    /// Residency before.
    pub before: Residency,
    /// Residency after.
    pub after: Residency,
}

/// Evicts a whole file by path; returns residency before and after. No root needed.
pub fn evict_path(path: impl AsRef<Path>) -> Result<Evicted> {
    let path = path.as_ref();
    let f = File::open(path).map_err(|e| Error::io("open", path, e))?;
    let len = f.metadata().map_err(|e| Error::io("stat", path, e))?.len();
    let before = residency(&f, 0, len).map_err(|e| Error::io("residency", path, e))?;
    evict(&f, 0, 0).map_err(|e| Error::io("evict", path, e))?;
    let after = residency(&f, 0, len).map_err(|e| Error::io("residency", path, e))?;
    Ok(Evicted { path: path.to_path_buf(), before, after })
}
