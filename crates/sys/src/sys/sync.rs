//! Durability: fdatasync, fsync, syncfs, and the commit sequence that puts a finished file in
//! place (fsync, rename, fsync of the folder). Each is [`Site::Sync`] (the rename
//! [`Site::Rename`]); under the `fault-injection` feature a [`Step`] can be skipped, so
//! that the crash checks see what a missing one would lose.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::BorrowedFd;
use std::path::Path;

use super::{call, Site};
use crate::error::{Error, Result};
use crate::fault::{self, Step};

/// fdatasync `file` (named `path` in the error), retried when interrupted.
pub fn fdatasync(file: &File, path: &Path) -> Result<()> {
    if fault::skipped(Step::Fdatasync) {
        return Ok(());
    }
    call(Site::Sync, || rustix::fs::fdatasync(file)).map_err(|e| Error::io("fdatasync", path, e))
}

/// fsync `file` (named `path` in the error): its data and its metadata (size, permission bits,
/// times, owner, extended attributes), as a finished file needs before its rename. fdatasync
/// is not enough there: the attributes set after the last write may stay out of what it makes
/// durable (btrfs logs only the inode changes an fsync asks for), and the rename and the
/// directory fsync that follow do not carry them. Retried when interrupted;
/// `Fdatasync` skips it.
pub fn fsync(file: &File, path: &Path) -> Result<()> {
    if fault::skipped(Step::Fdatasync) {
        return Ok(());
    }
    call(Site::Sync, || rustix::fs::fsync(file)).map_err(|e| Error::io("fsync", path, e))
}

/// Why [`publish`] failed, and whether the file is in place.
pub struct Unpublished {
    /// The rename happened: the file is complete and under its final name, and only the
    /// durability of the directory entry is in doubt. Removing it would lose the file it
    /// replaced, so it stays.
    pub renamed: bool,
    /// What failed (boxed: a result carrying it stays small).
    pub error: Box<Error>,
}

/// The last steps of the commit sequence of a file written under the temporary name `tmp` in
/// `dir` (already synced with [`fsync`] when `durable`): rename it over `name`,
/// then, when `durable`, fsync `dir` so that the new entry survives a crash. `path` names
/// the file in errors.
pub fn publish(dir: BorrowedFd<'_>, tmp: &OsStr, name: &OsStr, path: &Path, durable: bool) -> std::result::Result<(), Unpublished> {
    super::renameat(dir, tmp, dir, name).map_err(|e| Unpublished { renamed: false, error: Box::new(Error::io("rename", path, e.into())) })?;
    if durable {
        sync_dir(dir, path).map_err(|e| Unpublished { renamed: true, error: Box::new(e) })?;
    }
    Ok(())
}

/// fsync of the directory `dir` after an entry named `path` changed in it, so that the entry
/// survives a crash; `DirSync` skips it.
pub fn sync_dir(dir: BorrowedFd<'_>, path: &Path) -> Result<()> {
    if fault::skipped(Step::DirSync) {
        return Ok(());
    }
    call(Site::Sync, || rustix::fs::fsync(dir)).map_err(|e| Error::io("fsync directory", path, e))
}

/// syncfs of the filesystem holding `fd` (Linux 2.6.39; its writeback errors since 5.8),
/// retried when interrupted; under the `fault-injection` feature a planned fault takes its
/// place, and `Syncfs` can be skipped.
pub fn syncfs(fd: BorrowedFd<'_>) -> io::Result<()> {
    if fault::skipped(Step::Syncfs) {
        return Ok(());
    }
    call(Site::Sync, || rustix::fs::syncfs(fd))?;
    still_writable(fd)
}

/// After a syncfs that succeeded: EROFS if the filesystem of `fd` is now read-only. A
/// filesystem that met a write error in its journal (ext4 aborts it and remounts read-only)
/// answers every later syncfs with success, as there is nothing left it can write (Linux 6.18,
/// shown by `crates/crash` with a failed write), though what was written since its last commit
/// is lost. The callers synced a filesystem they wrote to, so read-only now means that.
pub fn still_writable(fd: BorrowedFd<'_>) -> io::Result<()> {
    match rustix::fs::fstatvfs(fd) {
        Ok(s) if s.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY) => Err(io::Error::from_raw_os_error(libc::EROFS)),
        _ => Ok(()),
    }
}

/// syncfs of the filesystem holding `fd` for its writeback alone (no fault site, nothing
/// returned): files that are not to be named after it are only written back, and an error of
/// that writeback is for the next checked [`syncfs`] of the filesystem to report.
pub fn write_back(fd: BorrowedFd<'_>) {
    let _ = super::quiet(|| rustix::fs::syncfs(fd));
}
