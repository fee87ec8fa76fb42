//! The one facade of the kernel calls every crate of the workspace makes on files and folders.
//! Outside it only `backend/` (the I/O requests), `caps` (the probes), `residency` (mincore,
//! cachestat, fadvise) and `buf` (aligned memory) name rustix or libc; `tests/architecture.rs` holds
//! every other source file of the workspace's shipped crates to that.
//!
//! Split by concern, one file each, every item re-exported here: `dir.rs` ([`DirFd`], the directory
//! capability: the calls on a name in a folder, with no symlink at the name followed), `file.rs` (creating a file,
//! reading and writing its data), `ns.rs` (opening, making, linking, renaming and removing
//! names, and looking at them), `meta.rs` (mode, owner, times, extended attributes), `sync.rs`
//! (fsync, syncfs, the commit sequence), `process.rs` (the process's ids, umask, limits), [`lock`] (open-file-description locks) and
//! [`temps`] (temporaries' names, and the locks that say their writers live).
//!
//! Every call that changes something goes through [`retry`], which retries EINTR (FUSE and
//! network filesystems return it from open, fsync and the metadata calls when a signal
//! arrives) and, under the `fault-injection` feature, lets a planned fault take the call's
//! place: opens and namespace changes at [`Site::Open`], renames at [`Site::Rename`], mode,
//! owner, times and extended attributes at [`Site::Meta`], syncs at [`Site::Sync`]. Looks
//! (stat, readlink, listing extended attributes) and removals (which run on the way out of an
//! error, to clean up) retry EINTR and are no fault sites: a fault there would test the clean-up
//! of a clean-up. The wrappers keep rustix's signatures and its `Errno` results, so that a
//! caller matches errnos as before.
//!
//! The module is public for the workspace's crates (the archive crate's extraction makes the
//! same namespace and metadata calls as the tree copy); it is no part of the library's API.

mod dir;
mod file;
pub mod lock;
mod meta;
mod ns;
mod process;
mod sync;
/// Declared at the crate root (`cacheless::temps`, its one public path); named here for the
/// engine's callers, as the rest of the facade is.
pub use crate::temps;

pub use self::dir::DirFd;
pub use self::file::*;
pub use self::meta::*;
pub use self::ns::*;
pub use self::process::*;
pub use self::sync::*;

use std::io;

pub use crate::fault::Site;
use crate::fault::{self, Injected};
/// The current directory, for the `*at` calls given a path.
pub use rustix::fs::CWD;

// The kernel's vocabulary: the types the calls above take and return, for callers to build
// and match them without naming the bindings (which only this crate depends on). Values, not
// calls: device numbers are arithmetic.
pub use rustix::fs::{major, makedev, minor, Access, Advice, AtFlags, FileType, Mode as FMode, OFlags, SeekFrom, Stat, Timestamps};
pub use rustix::io::{Errno, Result as KResult};

/// The kernel's numbers a caller matches or builds: errno values, the file type and mode bits,
/// `sync_file_range`'s flags.
pub mod consts {
    pub use libc::{
        EACCES, EBUSY, EEXIST, EINTR, EINVAL, EIO, EISDIR, ELOOP, EMFILE, ENOENT, ENOTDIR, ENXIO, EOPNOTSUPP, EPERM, EPIPE, EROFS, SYNC_FILE_RANGE_WAIT_AFTER,
        SYNC_FILE_RANGE_WAIT_BEFORE, SYNC_FILE_RANGE_WRITE, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK, S_ISGID, S_ISUID, S_IXGRP,
    };
}

/// Makes a call that can fail transiently (`site` says which kind), retrying it when
/// interrupted; under the `fault-injection` feature a planned fault takes the call's place.
pub fn retry<T>(site: Site, mut f: impl FnMut() -> rustix::io::Result<T>) -> rustix::io::Result<T> {
    loop {
        let r = match fault::check(site, 0, || false) {
            Some(Injected::Errno(e)) => Err(Errno::from_raw_os_error(e)),
            _ => f(),
        };
        match r {
            Err(Errno::INTR) => {}
            r => return r,
        }
    }
}

/// [`retry`], with the error as an `io::Error`.
pub fn call<T>(site: Site, f: impl FnMut() -> rustix::io::Result<T>) -> io::Result<T> {
    retry(site, f).map_err(io::Error::from)
}

/// Makes a call that is no fault site (a look, or a clean-up), retrying it when interrupted.
pub fn quiet<T>(mut f: impl FnMut() -> rustix::io::Result<T>) -> rustix::io::Result<T> {
    loop {
        match f() {
            Err(Errno::INTR) => {}
            r => return r,
        }
    }
}
