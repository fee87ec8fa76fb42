//! Temporaries whose owner is known, and removed by nobody else while it lives. Every name
//! the engine gives a file, link or node it is still writing is
//! `.NAME.cacheless-BOOT-PID-N.lk.tmp` (BOOT the first 8 hex digits of the kernel's boot id,
//! PID the writing process: for a person reading the folder). The name is not the proof: a PID
//! means nothing in another PID namespace or on another machine sharing the filesystem. The
//! proof is a lock the kernel drops when its holder dies, however it dies (see [`crate::sys::lock`]):
//!
//! - before it makes its first temporary in a folder, a writer takes a shared lock on one byte
//!   of the folder itself, its slot (a hash of BOOT and PID, which its names carry), and holds it
//!   until its last temporary there is gone ([`Claim`](crate::temps::Claim));
//! - a regular file's writer also holds an exclusive lock on the whole file while it is open
//!   (NFSv4 carries that one to the server, where another machine's cleaner sees it), except
//!   where its job holds a claim on a folder above it for as long as it writes and its folder is
//!   on a filesystem of this machine ([`on_shared_fs`](crate::temps::on_shared_fs)): every cleaner that can see the file
//!   there sees that claim first, so the file's own lock would add nothing but calls (an
//!   extraction's files: see the engine's `CreateOptions::claims`).
//!
//! A cleaner ([`clean_tree`](crate::temps::clean_tree), `cacheless clean`) removes a temporary only where neither is
//! held: the slot is free, and for a regular file it takes a shared lock on the file itself
//! before it unlinks it (a writer that is only now taking its lock waits for that, then finds
//! its name gone and makes another). Where it cannot tell (a lock the filesystem refuses, a
//! folder on a network filesystem for what is not a regular file, a file it may not open, a
//! name of an earlier scheme whose writers took no locks) it leaves the temporary and says so.
//! A job removes nobody's temporaries but its own: no job reads a whole folder to clean it.
//!
//! The benchmark's folders, `.cacheless-bench-BOOT-PID-N.lk`, are held the same way, by a
//! slot in the folder they are made in.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use crate::sys::lock::{self, LockKind, LockRange};

pub use crate::names::{bench_dir_name, boot, temp_name};

/// Who made a temporary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Its boot (8 hex digits), `None` for a name of the first scheme.
    pub boot: Option<String>,
    /// Its process, in the writer's PID namespace.
    pub pid: u32,
    /// Whether its writer holds the locks that prove it alive (`.lk` names); earlier writers
    /// took none, and nothing says whether they are gone.
    pub locks: bool,
}

impl Owner {
    /// The byte of a folder whose shared lock says this owner still writes there.
    pub fn slot(&self) -> u64 {
        slot_of(self.boot.as_deref().unwrap_or(""), self.pid)
    }
}

/// FNV-1a of "BOOT-PID", below 2^62 and never 0: the slot of that writer in each folder. Two
/// writers of one slot (PIDs alike in two namespaces, or a hash alike) keep each other's
/// temporaries: nothing is removed wrongly, only later.
fn slot_of(boot: &str, pid: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in format!("{boot}-{pid}").bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h >> 2).max(1)
}

/// The owner of `name` when it is one of the engine's temporary names (a file's, or a folder's
/// `.cacheless-bench-BOOT-PID-N.lk`).
pub fn owner(name: &[u8]) -> Option<Owner> {
    let (tail, locks) = match name.strip_prefix(b".cacheless-bench-") {
        Some(rest) => {
            let t = std::str::from_utf8(rest).ok()?;
            t.strip_suffix(".lk").map_or((t, false), |t| (t, true))
        }
        None => {
            let rest = name.strip_prefix(b".")?.strip_suffix(b".tmp")?;
            let at = rest.windows(11).rposition(|w| w == b".cacheless-")?;
            let tail = std::str::from_utf8(&rest[at + 11..]).ok()?;
            match tail.strip_suffix(".lk") {
                Some(t) => (t, true),
                None => (tail.strip_suffix(".link").unwrap_or(tail), false),
            }
        }
    };
    let num = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    let parts: Vec<&str> = tail.split('-').collect();
    match parts[..] {
        [b, pid, n] if b.len() == 8 && b.bytes().all(|c| c.is_ascii_hexdigit()) && num(pid) && num(n) => {
            Some(Owner { boot: Some(b.to_string()), pid: pid.parse().ok()?, locks })
        }
        [pid, n] if num(pid) && num(n) && !locks => Some(Owner { boot: None, pid: pid.parse().ok()?, locks }),
        [pid] if num(pid) && !locks => Some(Owner { boot: None, pid: pid.parse().ok()?, locks }),
        _ => None,
    }
}

/// This process's slot.
fn my_slot() -> u64 {
    static SLOT: OnceLock<u64> = OnceLock::new();
    *SLOT.get_or_init(|| slot_of(boot(), crate::names::pid()))
}

/// A folder in which this process holds its slot: a descriptor of the folder (opened for
/// reading: a lock needs one), its slot locked shared. Dropped with its last [`Claim`].
#[derive(Debug)]
pub struct Held {
    /// Holds the lock while it is open.
    _fd: OwnedFd,
    key: (u64, u64),
}

/// This process's hold on its slot in one folder (see the module's docs): every temporary it
/// makes there is made under one and keeps one until it is renamed or removed. `None` inside
/// where the folder cannot be locked (a filesystem without locks, a folder it may not read): a
/// cleaner then cannot tell either, except as root (see [`clean_tree`]).
#[derive(Debug, Clone, Default)]
pub struct Claim(Option<Arc<Held>>);

/// The folders (device, inode) this process holds its slot in.
type Claims = Mutex<HashMap<(u64, u64), Weak<Held>>>;

fn claims() -> &'static Claims {
    static C: OnceLock<Claims> = OnceLock::new();
    C.get_or_init(Mutex::default)
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut m = claims().lock().unwrap_or_else(|e| e.into_inner());
        if m.get(&self.key).is_some_and(|w| w.strong_count() == 0) {
            m.remove(&self.key);
        }
    }
}

impl Claim {
    /// Whether the slot is held.
    pub fn is_held(&self) -> bool {
        self.0.is_some()
    }
}

/// Takes (or shares) this process's slot in the folder `dir` (any descriptor of it, O_PATH
/// too): one open and one lock per folder while any of its claims lives.
pub fn claim(dir: BorrowedFd<'_>) -> Claim {
    let Ok(st) = crate::sys::fstat(dir) else { return Claim(None) };
    let key = (st.st_dev, st.st_ino);
    let mut m = claims().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(h) = m.get(&key).and_then(Weak::upgrade) {
        return Claim(Some(h));
    }
    let Ok(fd) = crate::sys::quiet(|| rustix::fs::openat(dir, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())) else {
        return Claim(None);
    };
    if !lock::try_lock(fd.as_fd(), LockKind::Shared, LockRange::Byte(my_slot())).unwrap_or(false) {
        return Claim(None);
    }
    let h = Arc::new(Held { _fd: fd, key });
    m.insert(key, Arc::downgrade(&h));
    Claim(Some(h))
}

/// [`claim`] on the folder at `path`.
pub fn claim_path(path: &Path) -> Claim {
    match crate::sys::quiet(|| rustix::fs::open(path, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())) {
        Ok(fd) => claim(fd.as_fd()),
        Err(_) => Claim(None),
    }
}

/// Whether the folder `dir` is on a filesystem shared between machines (NFS, SMB, FUSE, ...:
/// see `shared_fs`), where a lock on a folder is not seen by another machine's cleaner: a
/// temporary made there needs its own lock (see [`hold_file`]) whatever claim covers it.
/// `true` where statfs fails (the safe answer).
pub fn on_shared_fs(dir: BorrowedFd<'_>) -> bool {
    rustix::fs::fstatfs(dir).map_or(true, |s| u64::try_from(s.f_type).map_or(true, shared_fs))
}

/// Holds the regular file `fd`, just made under the temporary name `tmp` in `dir` (under a
/// [`Claim`]), locked for as long as it is open, and checks that the name is still its own (a
/// cleaner on another machine, which sees no claim, may have taken it before the lock): `false`
/// where it is not, and the caller makes another. A filesystem without locks holds none.
pub fn hold_file(fd: BorrowedFd<'_>, dir: BorrowedFd<'_>, tmp: &OsStr) -> bool {
    if lock::lock_wait(fd, LockKind::Exclusive, LockRange::Whole).is_err() {
        return true;
    }
    match (crate::sys::fstat(fd), crate::sys::statat(dir, tmp, AtFlags::SYMLINK_NOFOLLOW)) {
        (Ok(a), Ok(b)) => (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino),
        _ => false,
    }
}

/// What a cleaner found a temporary to be.
enum Verdict {
    /// Its writer is gone: removable. For a regular file, the descriptor whose lock holds off
    /// a writer that might be taking its own just now, until the name is gone.
    Gone(Option<OwnedFd>),
    /// Its writer holds it.
    Alive,
    /// Nothing proves either way; why.
    Unknown(String),
}

/// Whether a writer holds `slot` on the folder `dir` or on a folder above it, up to `/` (a job
/// claims the top of what it writes, such as an extraction's destination, for the files it
/// parks below it: see `PendingFile::park`). Looked at only for a temporary found unheld in
/// its own folder.
fn held_here_or_above(dir: BorrowedFd<'_>, slot: u64) -> std::io::Result<bool> {
    if lock::is_locked(dir, LockRange::Byte(slot))? {
        return Ok(true);
    }
    let st = crate::sys::fstat(dir)?;
    let mut last = (st.st_dev, st.st_ino);
    let (mut cur, mut here) = crate::sys::parent_dir(dir)?;
    // `/` is its own parent.
    while here != last {
        if lock::is_locked(cur.as_fd(), LockRange::Byte(slot))? {
            return Ok(true);
        }
        last = here;
        (cur, here) = crate::sys::parent_dir(&cur)?;
    }
    Ok(false)
}

/// Statfs magics of filesystems shared between machines, where a lock on a folder is not seen
/// by the others (NFS, SMB, CIFS, 9p, Ceph, Lustre, GFS2, OCFS2, AFS, FUSE).
fn shared_fs(magic: u64) -> bool {
    matches!(
        magic,
        0x6969 | 0xFF53_4D42 | 0xFE53_4D42 | 0x517B | 0x0102_1997 | 0x00C3_6400 | 0x0BD0_0BD0 | 0x0116_1970 | 0x7461_636F | 0x5346_414F | 0x6573_5546
    )
}

/// Judges the temporary `name` of `owner` in the folder `dir` (open for reading), of type `ft`;
/// `shared`: the folder is on a filesystem shared between machines.
fn judge(dir: BorrowedFd<'_>, name: &OsStr, owner: &Owner, ft: FileType, shared: bool) -> Verdict {
    if !owner.locks {
        return Verdict::Unknown("its writer was a version that took no locks: remove it yourself once no job of that version runs".into());
    }
    match held_here_or_above(dir, owner.slot()) {
        Ok(true) => return Verdict::Alive,
        Ok(false) => {}
        Err(e) => return Verdict::Unknown(format!("no lock can be read on its folder or one above it ({e})")),
    }
    if ft != FileType::RegularFile {
        return if shared {
            Verdict::Unknown("on a filesystem shared between machines, where a folder's lock is not seen by the others".into())
        } else {
            Verdict::Gone(None)
        };
    }
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = match crate::sys::quiet(|| rustix::fs::openat(dir, name, flags, Mode::empty())) {
        Ok(fd) => fd,
        Err(e) => return Verdict::Unknown(format!("it cannot be opened to read its lock ({})", std::io::Error::from(e))),
    };
    match lock::try_lock(fd.as_fd(), LockKind::Shared, LockRange::Whole) {
        Ok(true) => {}
        Ok(false) => return Verdict::Alive,
        Err(e) => return Verdict::Unknown(format!("no lock can be taken on it ({e})")),
    }
    // Still the file looked at (it was not replaced between the listing and the open).
    match (crate::sys::fstat(&fd), crate::sys::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)) {
        (Ok(a), Ok(b)) if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino) => Verdict::Gone(Some(fd)),
        _ => Verdict::Alive,
    }
}

/// What a clean found: temporaries of gone writers (removed unless a dry run), those it could
/// not judge (left, with why), and the folders it could not read.
#[derive(Debug, Default)]
pub struct Cleaned {
    /// Paths and their writers' PIDs.
    pub removed: Vec<(PathBuf, u32)>,
    /// Paths, their writers' PIDs, and why nothing proves their writers gone.
    pub kept: Vec<(PathBuf, u32, String)>,
    /// What could not be read or removed, in words.
    pub errors: Vec<String>,
}

/// Judges the temporaries in the folder `fd` (open for reading; named `path`), removing those of gone
/// writers unless `dry_run` (every writer counts as gone where `all_gone`), and lists the other
/// folders in it, for a walk to enter (one read of the folder for both).
fn clean_fd(fd: BorrowedFd<'_>, path: &Path, dry_run: bool, all_gone: bool, out: &mut Cleaned) -> Vec<OsString> {
    let mut subdirs = Vec::new();
    let shared = rustix::fs::fstatfs(fd).is_ok_and(|s| u64::try_from(s.f_type).is_ok_and(shared_fs));
    let Ok(mut entries) = rustix::fs::Dir::read_from(fd) else {
        out.errors.push(format!("{}: cannot be read", path.display()));
        return subdirs;
    };
    while let Some(Ok(e)) = entries.next() {
        let name = OsStr::from_bytes(e.file_name().to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        let ft = match e.file_type() {
            // A filesystem that does not say (d_type DT_UNKNOWN): asked.
            FileType::Unknown => crate::sys::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW).map_or(FileType::Unknown, |st| FileType::from_raw_mode(st.st_mode)),
            t => t,
        };
        let Some(owner) = owner(name.as_bytes()) else {
            if ft == FileType::Directory {
                subdirs.push(name.to_os_string());
            }
            continue;
        };
        let verdict = if all_gone { Verdict::Gone(None) } else { judge(fd, name, &owner, ft, shared) };
        let held = match verdict {
            Verdict::Alive => continue,
            Verdict::Unknown(why) => {
                out.kept.push((path.join(name), owner.pid, why));
                continue;
            }
            Verdict::Gone(held) => held,
        };
        let gone = dry_run
            || if ft == FileType::Directory {
                // Only the benchmark makes temporary folders.
                remove_tree_at(fd, name).map_err(|e| out.errors.push(format!("{}: {e}", path.join(name).display()))).is_ok()
            } else {
                crate::sys::unlinkat(fd, name, AtFlags::empty()).is_ok()
            };
        drop(held);
        if gone {
            out.removed.push((path.join(name), owner.pid));
        }
    }
    subdirs
}

/// Removes the folder `name` in `dir` and all under it, by descriptor (nothing is followed).
fn remove_tree_at(dir: BorrowedFd<'_>, name: &OsStr) -> std::io::Result<()> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = crate::sys::quiet(|| rustix::fs::openat(dir, name, flags, Mode::empty()))?;
    for e in rustix::fs::Dir::read_from(&fd)? {
        let e = e?;
        let n = OsStr::from_bytes(e.file_name().to_bytes());
        if n == "." || n == ".." {
            continue;
        }
        let is_dir = match e.file_type() {
            FileType::Unknown => {
                crate::sys::statat(&fd, n, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory)
            }
            t => t == FileType::Directory,
        };
        if is_dir {
            remove_tree_at(fd.as_fd(), n)?;
        } else {
            crate::sys::unlinkat(&fd, n, AtFlags::empty())?;
        }
    }
    crate::sys::unlinkat(dir, name, AtFlags::REMOVEDIR)?;
    Ok(())
}

/// The temporaries under `root` (files, links and nodes the engine was writing; the
/// benchmark's folders), judged by their writers' locks (see the module's docs): those of gone
/// writers removed unless `dry_run`. The walk goes by descriptor to any depth, holding one
/// folder open at a time: each folder is opened from its parent's descriptor without following
/// a symbolic link, and the way back up is checked to lead to the folder it came from, so a
/// folder swapped for a link (or moved) mid-walk takes the walk nowhere else. It does not enter
/// the temporaries.
pub fn clean_tree(root: &Path, dry_run: bool) -> Cleaned {
    walk(root, dry_run, false)
}

/// [`clean_tree`] for a tree none of whose writers can be alive (a filesystem image from a
/// simulated power cut): every temporary removed.
pub fn clean_tree_all_gone(root: &Path) -> Cleaned {
    walk(root, false, true)
}

fn walk(root: &Path, dry_run: bool, all_gone: bool) -> Cleaned {
    struct Frame {
        id: (u64, u64),
        path: PathBuf,
        todo: Vec<OsString>,
    }
    let mut out = Cleaned::default();
    let open = |at: BorrowedFd<'_>, name: &OsStr| {
        crate::sys::quiet(|| rustix::fs::openat(at, name, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()))
    };
    let id = |fd: &OwnedFd| crate::sys::fstat(fd).map(|st| (st.st_dev, st.st_ino));
    // The root as the user named it (a symbolic link there is theirs to follow).
    let mut cur = match crate::sys::quiet(|| rustix::fs::open(root, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())) {
        Ok(fd) => fd,
        Err(e) => {
            out.errors.push(format!("{}: {}", root.display(), std::io::Error::from(e)));
            return out;
        }
    };
    let Ok(root_id) = id(&cur) else { return out };
    let todo = clean_fd(cur.as_fd(), root, dry_run, all_gone, &mut out);
    let mut stack = vec![Frame { id: root_id, path: root.to_path_buf(), todo }];
    while let Some(top) = stack.last_mut() {
        if let Some(name) = top.todo.pop() {
            let path = top.path.join(&name);
            match open(cur.as_fd(), &name) {
                Ok(fd) => match id(&fd) {
                    Ok(child) => {
                        let todo = clean_fd(fd.as_fd(), &path, dry_run, all_gone, &mut out);
                        cur = fd;
                        stack.push(Frame { id: child, path, todo });
                    }
                    Err(e) => out.errors.push(format!("{}: {}", path.display(), std::io::Error::from(e))),
                },
                Err(e) => out.errors.push(format!("{}: {}", path.display(), std::io::Error::from(e))),
            }
            continue;
        }
        let done = stack.pop();
        let Some(parent) = stack.last() else { break };
        match crate::sys::parent_dir(&cur) {
            Ok((up, id)) if id == parent.id => cur = up,
            _ => {
                let from = done.map_or_else(PathBuf::new, |f| f.path);
                out.errors.push(format!("{}: moved during the walk; what was left of the walk above it was not looked at", from.display()));
                break;
            }
        }
    }
    out.removed.sort();
    out.kept.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temporary_name_fits_beside_the_longest_name_and_names_its_owner() {
        for len in [1usize, 100, 230, 254, 255] {
            let name = OsString::from("n".repeat(len));
            let t = temp_name(&name);
            assert!(t.len() <= 255, "{len}: {} bytes", t.len());
            assert!(t.as_bytes().starts_with(b".n") && t.as_bytes().ends_with(b".lk.tmp"), "{t:?}");
            assert_ne!(temp_name(&name), t, "two temporaries of one name differ");
            let o = owner(t.as_bytes()).expect("an owner");
            assert_eq!(o, Owner { boot: Some(boot().to_string()), pid: std::process::id(), locks: true });
            assert_eq!(o.slot(), my_slot());
        }
        assert_eq!(owner(b".a.b.cacheless-1234-0.tmp"), Some(Owner { boot: None, pid: 1234, locks: false }));
        assert_eq!(owner(b".a.cacheless-77.link.tmp"), Some(Owner { boot: None, pid: 77, locks: false }));
        assert_eq!(owner(b".a.cacheless-0123abcd-5-1.tmp"), Some(Owner { boot: Some("0123abcd".into()), pid: 5, locks: false }));
        assert_eq!(owner(b".cacheless-bench-0123abcd-5-1.lk"), Some(Owner { boot: Some("0123abcd".into()), pid: 5, locks: true }));
        for not in
            [&b"a.cacheless-1-2.tmp"[..], b".a.cacheless-x-2.tmp", b".a.cacheless-1-2", b".a.tmp", b".a.cacheless-zzzzzzzz-1-2.tmp", b".a.cacheless-1-2.lk.tmp"]
        {
            assert_eq!(owner(not), None, "{}", String::from_utf8_lossy(not));
        }
        assert_ne!(slot_of("0123abcd", 5), slot_of("0123abcd", 6));
    }

    /// A child process that claims `dir`, makes `name` there (a regular file, held open and
    /// locked, or a symbolic link), says so on its standard output and then waits for its
    /// standard input to close: a live writer in another process, as the cleaner meets one.
    fn writer(dir: &Path, name: &str, file: bool) -> std::process::Child {
        let script = format!(
            "import fcntl, os, struct, sys\n\
             d = os.open({dir:?}, os.O_RDONLY | os.O_DIRECTORY)\n\
             fcntl.fcntl(d, 37, struct.pack('hhqqi', fcntl.F_RDLCK, 0, {slot}, 1, 0))\n\
             if {file}:\n    f = os.open(os.path.join({dir:?}, {name:?}), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)\n    fcntl.fcntl(f, 38, struct.pack('hhqqi', fcntl.F_WRLCK, 0, 0, 0, 0))\n\
             else:\n    os.symlink('x', os.path.join({dir:?}, {name:?}))\n\
             print('ready', flush=True)\n\
             sys.stdin.read()\n",
            dir = dir.to_str().unwrap(),
            slot = owner(name.as_bytes()).unwrap().slot(),
            file = if file { "True" } else { "False" },
        );
        let mut c = std::process::Command::new("python3")
            .arg("-c")
            .arg(script)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(c.stdout.as_mut().unwrap()), &mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        c
    }

    /// A temporary whose writer holds its locks stays, whatever its PID says (a PID of another
    /// namespace or machine may be anyone here); once the writer is gone its temporaries go;
    /// names whose writers took no locks, and anything else, stay, the first said as kept.
    #[test]
    fn clean_removes_only_what_no_writer_holds() {
        let d = tempfile::tempdir().unwrap();
        // PIDs that are no process here: another namespace's writer, alive.
        let live_file = format!(".a.cacheless-{}-{}-0.lk.tmp", boot(), 4_194_311);
        let live_link = format!(".b.cacheless-{}-{}-0.lk.tmp", boot(), 4_194_312);
        let mut w1 = writer(d.path(), &live_file, true);
        let mut w2 = writer(d.path(), &live_link, false);
        // A writer's own PID, its locks gone: dead whatever /proc says.
        let dead = [format!(".c.cacheless-{}-{}-3.lk.tmp", boot(), std::process::id())];
        let old = [".d.cacheless-4194311-0.tmp".to_string(), format!(".e.cacheless-{}-1-0.tmp", boot())];
        for n in dead.iter().chain(&old).chain(&["plain".to_string(), ".hidden.tmp".to_string()]) {
            std::fs::write(d.path().join(n), b"x").unwrap();
        }
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub").join(&dead[0]), b"x").unwrap();
        let bench = format!(".cacheless-bench-{}-{}-0.lk", boot(), 4_194_313);
        std::fs::create_dir_all(d.path().join(&bench).join("in")).unwrap();
        std::fs::write(d.path().join(&bench).join("in").join("f"), b"x").unwrap();

        let listed = clean_tree(d.path(), true);
        assert!(listed.errors.is_empty(), "{:?}", listed.errors);
        let names = |v: &[(PathBuf, u32)]| v.iter().map(|(p, _)| p.strip_prefix(d.path()).unwrap().to_path_buf()).collect::<Vec<_>>();
        let mut want = vec![PathBuf::from(&bench), PathBuf::from(&dead[0]), Path::new("sub").join(&dead[0])];
        want.sort();
        assert_eq!(names(&listed.removed), want);
        assert_eq!(listed.kept.len(), 2, "{:?}", listed.kept);
        assert!(listed.kept.iter().all(|(_, _, why)| why.contains("no locks")), "{:?}", listed.kept);
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 9, "a dry run removes nothing");

        let done = clean_tree(d.path(), false);
        assert_eq!(names(&done.removed), want);
        let mut left: Vec<String> = std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        left.sort();
        let mut keep = vec![live_file.clone(), live_link.clone(), "plain".into(), ".hidden.tmp".into(), "sub".into()];
        keep.extend(old.iter().cloned());
        keep.sort();
        assert_eq!(left, keep);

        // The writers gone, their temporaries go too.
        for w in [&mut w1, &mut w2] {
            drop(w.stdin.take());
            w.wait().unwrap();
        }
        let done = clean_tree(d.path(), false);
        let mut want = vec![PathBuf::from(&live_file), PathBuf::from(&live_link)];
        want.sort();
        assert_eq!(names(&done.removed), want);
    }

    /// This process's own temporaries are held while their claim lives, by every other
    /// description of the folder (a cleaner's), and free after.
    #[test]
    fn a_claim_holds_the_slot_until_its_last_copy_goes() {
        let d = tempfile::tempdir().unwrap();
        let dir = std::fs::File::open(d.path()).unwrap();
        let looker = std::fs::File::open(d.path()).unwrap();
        let a = claim(dir.as_fd());
        assert!(a.is_held());
        let b = claim_path(d.path());
        assert!(lock::is_locked(looker.as_fd(), LockRange::Byte(my_slot())).unwrap());
        drop(a);
        assert!(lock::is_locked(looker.as_fd(), LockRange::Byte(my_slot())).unwrap(), "one claim still lives");
        drop(b);
        assert!(!lock::is_locked(looker.as_fd(), LockRange::Byte(my_slot())).unwrap());
    }

    /// The walk goes by descriptor to any depth (deeper than PATH_MAX) and never leaves the
    /// tree it was given through a symbolic link.
    #[test]
    fn the_walk_reaches_any_depth_and_follows_no_link() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let t = format!(".x.cacheless-{}-{}-1.lk.tmp", boot(), 4_194_314);
        std::fs::write(outside.path().join(&t), b"x").unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join("link")).unwrap();
        // 600 levels of 10-byte names: 6,600 bytes of path, past PATH_MAX (4,096).
        let mut p = std::fs::File::open(d.path()).unwrap();
        for _ in 0..600 {
            let fd = crate::sys::mkdirat(&p, "deepfolder", Mode::from_raw_mode(0o755))
                .and_then(|()| crate::sys::openat(&p, "deepfolder", OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()));
            p = std::fs::File::from(fd.unwrap());
        }
        let f = crate::sys::openat(&p, t.as_str(), OFlags::CREATE | OFlags::WRONLY, Mode::from_raw_mode(0o600)).unwrap();
        drop(f);
        let done = clean_tree(d.path(), false);
        assert!(done.errors.is_empty(), "{:?}", done.errors);
        assert_eq!(done.removed.len(), 1, "{:?}", done.removed);
        assert_eq!(done.removed[0].0.components().count(), d.path().components().count() + 601);
        assert!(crate::sys::statat(&p, t.as_str(), AtFlags::empty()).is_err(), "the deep one is gone");
        assert!(outside.path().join(&t).exists(), "nothing outside is touched");
    }
}
