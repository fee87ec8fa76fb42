//! What a new file is created with and ends with: its attributes, and the answers about its
//! folder (umask, default ACL, owner) remembered for the files created there one after another.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use super::FileCreator;
use crate::pending::initial_mode;
use crate::sys;

/// Attributes a file gets when it is created and when it is finished.
#[derive(Debug, Clone, Default)]
pub struct FileAttrs {
    /// Permission bits set when it is finished. Default: those it was created with (see
    /// `create`).
    pub permissions: Option<u32>,
    /// Modification time.
    pub mtime: Option<SystemTime>,
    /// Access time.
    pub atime: Option<SystemTime>,
    /// The mode it is created with, before the umask (or its directory's default ACL) takes
    /// its part, as open(2) takes it: GNU cp creates a copy with its source's permission bits.
    /// Default: 0666 where `permissions` is not given (the file keeps what the umask leaves),
    /// else owner-only until it gets those. See [`FileAttrs::create_perm`].
    pub create: Option<u32>,
}

impl FileAttrs {
    /// The permission bits a file is created with, the one rule for every file the engine
    /// makes: never wider than the ones it ends with (`permissions`, where given), and
    /// owner-only (0600) where those are set only at the end and no creation mode was asked
    /// for, so nobody else reads it half-written; never a set-ID or sticky bit (those come at
    /// the end). Without either, 0666: the umask makes the file what it will stay. (A file
    /// created without a name, which nobody can open, may get its final bits at once: see
    /// [`FileCreator::create`].)
    pub fn create_perm(&self) -> u32 {
        initial_mode(self.permissions, self.create)
    }
}

/// The last directory asked about and what is known of it (see [`for_last_dir`]).
pub(super) type LastDir<T> = Mutex<Option<(Arc<OwnedFd>, T)>>;

/// What `slot` remembers of `dir`, the last directory asked about there; else `make`'s answer,
/// remembered in its place. Files are created one after another in one directory: one call
/// answers for all of them.
pub(super) fn for_last_dir<T: Copy>(slot: &LastDir<T>, dir: &Arc<OwnedFd>, make: impl FnOnce() -> Option<T>) -> Option<T> {
    let mut last = slot.lock().unwrap_or_else(|e| e.into_inner());
    match &*last {
        Some((d, t)) if Arc::ptr_eq(d, dir) => Some(*t),
        _ => {
            let t = make()?;
            *last = Some((dir.clone(), t));
            Some(t)
        }
    }
}

impl FileCreator {
    /// The mode to create a file without a name in `dir` with, and whether it is the file's
    /// final one (`attrs`' permissions, which then need no fchmod): so where nobody can open
    /// the file while it is written, the kernel's creation gives exactly those bits (none
    /// masked by the umask, read once per creator, no default ACL in `dir`), and
    /// they have no setuid, setgid or sticky bit (which creation may clear). Else the file is
    /// created as [`FileAttrs::create_perm`] says and gets its permissions when finished.
    pub(crate) fn unnamed_perm(&self, dir: &Arc<OwnedFd>, attrs: &FileAttrs) -> (u32, bool) {
        match (attrs.permissions, *self.shared.umask.get_or_init(sys::umask)) {
            (Some(p), Some(umask)) if p & 0o7000 == 0 && p & umask == 0 && self.exact_in(dir) => (p, true),
            // A creation mode asked for and nothing set at the end: the kernel's creation
            // (umask, default ACL) makes the file what it ends with.
            _ => (attrs.create_perm(), false),
        }
    }

    /// `attrs` for a file created with mode `perm` of [`FileCreator::unnamed_perm`]: without
    /// the permissions it has already where `exact`.
    pub(crate) fn mode_given(mut attrs: FileAttrs, exact: bool) -> FileAttrs {
        if exact {
            attrs.permissions = None;
        }
        attrs
    }

    /// Whether files created in `dir` get the mode asked (less the umask): `dir` has no
    /// default ACL. Asked once for files created one after another in one directory.
    fn exact_in(&self, dir: &Arc<OwnedFd>) -> bool {
        for_last_dir(&self.shared.exact_dir, dir, || Some(!sys::default_acl(dir.as_fd()))).unwrap_or(false)
    }

    /// The owner (uid, gid) that files this process creates in `dir` get: that of `file`, one
    /// just created there (fstat), remembered for the next files created in the same directory.
    /// The group comes from the process or from the directory (its set-group-ID bit, or the
    /// `grpid` mount option): whichever applies, it is the same for every file created there
    /// while nobody changes the directory, so the answer holds for a directory the caller made
    /// and fills itself. `None` where the fstat failed.
    pub(crate) fn owner_in(&self, dir: &Arc<OwnedFd>, file: &File) -> Option<(u32, u32)> {
        for_last_dir(&self.shared.owner_dir, dir, || sys::fstat(file).ok().map(|s| (s.st_uid, s.st_gid)))
    }
}
