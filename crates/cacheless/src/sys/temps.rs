//! Temporaries whose owner is known: every name the engine gives a file, link or node it is
//! still writing is `.NAME.cacheless-BOOT-PID-N.tmp` (BOOT the first 8 hex digits of the
//! kernel's boot id, PID the writing process), so that what a SIGKILL or a power cut left
//! behind can be told from what a running job is writing: its owner's boot is over, or its
//! owner is gone. A job that makes a temporary in a folder first removes the leftovers of dead
//! owners there (once per folder per process) and records them ([`take_removed`]) for the
//! front ends to say (`-v`, `--json`); `cacheless clean` lists and removes them under a tree.
//! A live owner's temporary is never touched, whatever its age.
//!
//! Names of the earlier scheme, `.NAME.cacheless-PID-N.tmp` (no boot), are recognised too:
//! dead where no process has that PID.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use rustix::fs::AtFlags;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Longest name a directory entry may have on Linux (NAME_MAX).
const NAME_MAX: usize = 255;

/// The first 8 hex digits of this boot's id (/proc/sys/kernel/random/boot_id), or `00000000`
/// where /proc does not say.
pub fn boot() -> &'static str {
    static BOOT: OnceLock<String> = OnceLock::new();
    BOOT.get_or_init(|| {
        let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        let hex: String = id.chars().filter(char::is_ascii_hexdigit).take(8).collect();
        if hex.len() == 8 {
            hex
        } else {
            "00000000".into()
        }
    })
}

/// A temporary name beside `name`, `.NAME.cacheless-BOOT-PID-N.tmp`, that no other writer of
/// this process uses. It fits wherever `name` does: NAME is cut to leave room for the rest (any
/// byte but '/' and NUL may end a name, so a cut is a name too).
pub fn temp_name(name: &OsStr) -> OsString {
    let tail = format!(".cacheless-{}-{}-{}.tmp", boot(), std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
    let bytes = name.as_bytes();
    let keep = bytes.len().min(NAME_MAX - 1 - tail.len());
    let mut t = OsString::from(".");
    t.push(OsStr::from_bytes(&bytes[..keep]));
    t.push(tail);
    t
}

/// Who made a temporary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Its boot (8 hex digits), `None` for a name of the earlier scheme.
    pub boot: Option<String>,
    /// Its process.
    pub pid: u32,
}

impl Owner {
    /// Whether the owner is gone: another boot, or no process of its PID in this one. A PID
    /// reused since by another process counts as alive (kept: never a live job's file).
    pub fn is_dead(&self) -> bool {
        if self.boot.as_deref().is_some_and(|b| b != boot()) {
            return true;
        }
        !Path::new(&format!("/proc/{}", self.pid)).exists()
    }
}

/// The owner of `name` when it is one of the engine's temporary names (a file's, or a folder's
/// `.cacheless-bench-BOOT-PID-N`).
pub fn owner(name: &[u8]) -> Option<Owner> {
    let tail = match name.strip_prefix(b".cacheless-bench-") {
        Some(rest) => std::str::from_utf8(rest).ok()?,
        None => {
            let rest = name.strip_prefix(b".")?.strip_suffix(b".tmp")?;
            let at = rest.windows(11).rposition(|w| w == b".cacheless-")?;
            let tail = std::str::from_utf8(&rest[at + 11..]).ok()?;
            tail.strip_suffix(".link").unwrap_or(tail)
        }
    };
    let num = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    let parts: Vec<&str> = tail.split('-').collect();
    match parts[..] {
        [b, pid, n] if b.len() == 8 && b.bytes().all(|c| c.is_ascii_hexdigit()) && num(pid) && num(n) => {
            Some(Owner { boot: Some(b.to_string()), pid: pid.parse().ok()? })
        }
        [pid, n] if num(pid) && num(n) => Some(Owner { boot: None, pid: pid.parse().ok()? }),
        [pid] if num(pid) => Some(Owner { boot: None, pid: pid.parse().ok()? }),
        _ => None,
    }
}

/// The folders (device, inode) whose leftovers this process has looked at, and what it removed.
struct Seen {
    dirs: HashSet<(u64, u64)>,
    removed: Vec<(PathBuf, u32)>,
}

fn seen() -> &'static Mutex<Seen> {
    static S: OnceLock<Mutex<Seen>> = OnceLock::new();
    S.get_or_init(|| Mutex::new(Seen { dirs: HashSet::new(), removed: Vec::new() }))
}

/// Removes the leftover temporaries of dead owners in `dir`, the first time this process makes
/// a temporary there (a later look finds only its own). Best effort: what cannot be read or
/// removed stays. What was removed is kept for [`take_removed`].
pub(crate) fn clean_once(dir: BorrowedFd<'_>) {
    let Ok(st) = crate::sys::fstat(dir) else { return };
    if !seen().lock().unwrap_or_else(|e| e.into_inner()).dirs.insert((st.st_dev, st.st_ino)) {
        return;
    }
    let (removed, _) = clean_fd(dir, None, false, &Owner::is_dead);
    if !removed.is_empty() {
        let at = std::fs::read_link(crate::sys::proc_fd_path(dir)).unwrap_or_default();
        let mut s = seen().lock().unwrap_or_else(|e| e.into_inner());
        s.removed.extend(removed.into_iter().map(|(n, pid)| (at.join(n), pid)));
    }
}

/// The leftovers of dead owners removed so far by this process (path, owner's PID), taken.
pub fn take_removed() -> Vec<(PathBuf, u32)> {
    std::mem::take(&mut seen().lock().unwrap_or_else(|e| e.into_inner()).removed)
}

/// The leftovers of dead owners in the open folder `dir` (names, owners' PIDs), removed unless
/// `dry_run`, and the other folders in it, for a walk to enter (one read of the folder for
/// both). A folder of the benchmark's is removed whole; `path` names `dir` for that.
fn clean_fd(dir: BorrowedFd<'_>, path: Option<&Path>, dry_run: bool, dead: &dyn Fn(&Owner) -> bool) -> (Vec<(OsString, u32)>, Vec<OsString>) {
    let (mut out, mut subdirs) = (Vec::new(), Vec::new());
    let Ok(fd) = crate::sys::lookat(dir, ".", rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC) else {
        return (out, subdirs);
    };
    // The descriptor read (`dir` may be O_PATH, which getdents refuses); entries go through `dir`.
    let Ok(mut entries) = rustix::fs::Dir::new(fd) else { return (out, subdirs) };
    while let Some(Ok(e)) = entries.next() {
        let name = e.file_name().to_bytes();
        let is_dir = match e.file_type() {
            rustix::fs::FileType::Directory => true,
            // A filesystem that does not say (d_type DT_UNKNOWN): asked.
            rustix::fs::FileType::Unknown => crate::sys::statat(dir, e.file_name(), AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory),
            _ => false,
        };
        let Some(owner) = owner(name) else {
            if is_dir && name != b"." && name != b".." {
                subdirs.push(OsStr::from_bytes(name).to_os_string());
            }
            continue;
        };
        if !dead(&owner) {
            continue;
        }
        let n = OsStr::from_bytes(name).to_os_string();
        let gone = dry_run
            || if is_dir {
                // Only the benchmark makes temporary folders: whole, by path.
                path.is_some_and(|p| std::fs::remove_dir_all(p.join(&n)).is_ok())
            } else {
                crate::sys::unlinkat(dir, n.as_os_str(), AtFlags::empty()).is_ok()
            };
        if gone {
            out.push((n, owner.pid));
        }
    }
    (out, subdirs)
}

/// The leftover temporaries of dead owners under `root` (files, links and nodes the engine
/// was writing; the benchmark's folders), removed unless `dry_run`: paths and owners' PIDs. The
/// walk follows no symlink and does not enter the leftovers. Folders it cannot read are
/// reported as errors and skipped.
pub fn clean_tree(root: &Path, dry_run: bool) -> (Vec<(PathBuf, u32)>, Vec<String>) {
    clean_tree_where(root, dry_run, &Owner::is_dead)
}

/// [`clean_tree`] with `dead` saying which owners are gone: for a tree whose owners' liveness
/// this process cannot see (a filesystem image from a simulated power cut, where every owner
/// is gone whatever /proc says).
pub fn clean_tree_where(root: &Path, dry_run: bool, dead: &dyn Fn(&Owner) -> bool) -> (Vec<(PathBuf, u32)>, Vec<String>) {
    use std::os::fd::AsFd;
    let (mut found, mut errors) = (Vec::new(), Vec::new());
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let d = match std::fs::File::open(&dir) {
            Ok(d) => d,
            Err(e) => {
                errors.push(format!("{}: {e}", dir.display()));
                continue;
            }
        };
        let (removed, subdirs) = clean_fd(d.as_fd(), Some(&dir), dry_run, dead);
        found.extend(removed.into_iter().map(|(n, pid)| (dir.join(n), pid)));
        stack.extend(subdirs.into_iter().map(|n| dir.join(n)));
    }
    found.sort();
    (found, errors)
}

/// The leftovers of dead owners in the folder `dir` itself (not below it), removed: paths and
/// owners' PIDs (see [`clean_tree`]).
pub fn clean_dir(dir: &Path) -> Vec<(PathBuf, u32)> {
    use std::os::fd::AsFd;
    match std::fs::File::open(dir) {
        Ok(d) => clean_fd(d.as_fd(), Some(dir), false, &Owner::is_dead).0.into_iter().map(|(n, pid)| (dir.join(n), pid)).collect(),
        Err(_) => Vec::new(),
    }
}

/// A name for the benchmark's temporary folder, `.cacheless-bench-BOOT-PID-N`, that
/// [`clean_tree`] and a later benchmark recognise once its owner is gone.
pub fn bench_dir_name() -> String {
    format!(".cacheless-bench-{}-{}-{}", boot(), std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temporary_name_fits_beside_the_longest_name_and_names_its_owner() {
        for len in [1usize, 100, 230, 254, 255] {
            let name = OsString::from("n".repeat(len));
            let t = temp_name(&name);
            assert!(t.len() <= NAME_MAX, "{len}: {} bytes", t.len());
            assert!(t.as_bytes().starts_with(b".n") && t.as_bytes().ends_with(b".tmp"), "{t:?}");
            assert_ne!(temp_name(&name), t, "two temporaries of one name differ");
            let o = owner(t.as_bytes()).expect("an owner");
            assert_eq!(o, Owner { boot: Some(boot().to_string()), pid: std::process::id() });
            assert!(!o.is_dead(), "this process is alive");
        }
        assert_eq!(owner(b".a.b.cacheless-1234-0.tmp"), Some(Owner { boot: None, pid: 1234 }));
        assert_eq!(owner(b".a.cacheless-77.link.tmp"), Some(Owner { boot: None, pid: 77 }));
        assert_eq!(owner(b".cacheless-bench-0123abcd-5-1"), Some(Owner { boot: Some("0123abcd".into()), pid: 5 }));
        for not in [&b"a.cacheless-1-2.tmp"[..], b".a.cacheless-x-2.tmp", b".a.cacheless-1-2", b".a.tmp", b".a.cacheless-zzzzzzzz-1-2.tmp"] {
            assert_eq!(owner(not), None, "{}", String::from_utf8_lossy(not));
        }
        // Another boot's, or no such process: dead.
        assert!(Owner { boot: Some(if boot() == "ffffffff" { "00000000" } else { "ffffffff" }.into()), pid: std::process::id() }.is_dead());
        assert!(Owner { boot: Some(boot().into()), pid: 4_194_304 + 7 }.is_dead());
        assert!(Owner { boot: None, pid: 4_194_304 + 7 }.is_dead());
    }

    /// Leftovers of dead owners go, a live owner's and anything else stay.
    #[test]
    fn clean_removes_only_dead_owners_leftovers() {
        let d = tempfile::tempdir().unwrap();
        let other_boot = if boot() == "ffffffff" { "00000000" } else { "ffffffff" };
        let dead =
            [format!(".a.cacheless-{other_boot}-1-0.tmp"), format!(".b.cacheless-{}-{}-3.tmp", boot(), 4_194_311), ".c.cacheless-4194311-0.tmp".to_string()];
        let live = [format!(".d.cacheless-{}-{}-9.tmp", boot(), std::process::id()), "plain".to_string(), ".hidden.tmp".to_string()];
        for n in dead.iter().chain(&live) {
            std::fs::write(d.path().join(n), b"x").unwrap();
        }
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub").join(&dead[0]), b"x").unwrap();
        std::fs::create_dir(d.path().join(format!(".cacheless-bench-{other_boot}-1-0"))).unwrap();
        std::fs::write(d.path().join(format!(".cacheless-bench-{other_boot}-1-0")).join("f"), b"x").unwrap();
        let (listed, errors) = clean_tree(d.path(), true);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(listed.len(), 5, "{listed:?}");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 8, "a dry run removes nothing");
        let (removed, _) = clean_tree(d.path(), false);
        assert_eq!(removed, listed);
        let mut left: Vec<String> = std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        left.sort();
        let mut want: Vec<String> = live.to_vec();
        want.push("sub".into());
        want.sort();
        assert_eq!(left, want);
        assert_eq!(std::fs::read_dir(d.path().join("sub")).unwrap().count(), 0);
    }
}
