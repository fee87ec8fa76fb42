//! Checking one crash state: mount the image (its journal replayed), check each file and
//! folder the workload wrote against what was promised at the cut, count the engine's
//! temporaries left behind, unmount, and run the filesystem's own checker.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::cmd::{self, Loop, Mount};
use crate::workload::{FileExpect, Meta, Workload};
use crate::Result;

/// What one state showed.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Broken promises: (file, what was found), the file empty for the filesystem itself.
    pub violations: Vec<(String, String)>,
    /// Temporaries of the engine found (allowed: a crash may leave them).
    pub temporaries: Vec<String>,
}

/// Whether `name` is one of the engine's temporary names (`cacheless::temps`:
/// `.NAME.cacheless-BOOT-PID-N.lk.tmp`, and those of the earlier scheme).
pub fn is_temporary(name: &str) -> bool {
    cacheless::temps::owner(name.as_bytes()).is_some()
}

/// What differs between `m` and the permission bits and time `want`, if anything.
fn meta_differs(m: &std::fs::Metadata, want: Option<Meta>) -> Option<String> {
    let w = want?;
    let (mode, mtime) = (m.mode() & 0o7777, m.mtime());
    (mode != w.mode || mtime != w.mtime).then(|| format!("mode {mode:o} and mtime {mtime}, not {:o} and {}", w.mode, w.mtime))
}

/// Short description of content `c` against the old and new contents.
fn describe(c: &[u8], f: &FileExpect) -> String {
    let old = f.old.as_ref().map_or("none".to_string(), |o| format!("{} B", o.len()));
    let same = c.iter().zip(f.new.iter()).take_while(|(a, b)| a == b).count();
    format!("{} B, the first {same} B of the new content (new {} B, old {old})", c.len(), f.new.len())
}

/// Checks one file under `root` given the markers `promised`.
fn check_file(root: &Path, f: &FileExpect, promised: &BTreeSet<String>) -> Option<String> {
    let p = root.join(&f.path);
    let owed = promised.contains(&f.promised_by);
    match std::fs::symlink_metadata(&p) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if owed {
                Some(format!("missing, though `{}` had returned", f.promised_by))
            } else if f.old.is_some() && f.atomic {
                Some("missing: the old file is lost and the new one not in place".into())
            } else {
                None
            }
        }
        Err(e) => Some(format!("stat: {e}")),
        Ok(m) if !m.is_file() => Some(format!("not a regular file ({:?})", m.file_type())),
        Ok(m) => match std::fs::read(&p) {
            Err(e) => Some(format!("read: {e}")),
            Ok(c) if c[..] == f.new[..] => meta_differs(&m, f.meta).map(|d| format!("the new content with the wrong attributes: {d}")),
            Ok(c) if owed => Some(format!("not the promised content (`{}` had returned): {}", f.promised_by, describe(&c, f))),
            Ok(c) if f.old.as_ref().is_some_and(|o| c[..] == o[..]) => None,
            Ok(c) if f.atomic => Some(format!("half-written file under its final name: {}", describe(&c, f))),
            Ok(_) => None,
        },
    }
}

/// Every temporary under `dir`, as paths relative to `root`.
fn temporaries(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let p = e.path();
        if is_temporary(&name) {
            out.push(p.strip_prefix(root).unwrap_or(&p).display().to_string());
        } else if e.file_type().is_ok_and(|t| t.is_dir()) && name != "lost+found" {
            temporaries(root, &p, out);
        }
    }
}

/// Mount options for checking a state of `fstype` (xfs: the states share one UUID).
fn mount_opts(fstype: &str) -> &'static str {
    if fstype == "xfs" {
        "nouuid"
    } else {
        ""
    }
}

/// Checks the crash state in `image` (a filesystem of `fstype`) against `w`'s expectations,
/// with `promised` the markers the cut owes; mounts it at `mnt`.
pub fn state(fstype: &str, image: &Path, mnt: &Path, w: &Workload, promised: &BTreeSet<String>) -> Result<Verdict> {
    let mut v = mounted(fstype, image, mnt, |root, v| {
        expectations(root, w, promised, false, v);
        cleaned(root, w, promised, v);
    })?;
    if let Some(complaint) = cmd::fsck(fstype, image)? {
        v.violations.push((String::new(), format!("the filesystem checker complains: {}", first_lines(&complaint, 6))));
    }
    Ok(v)
}

/// Checks only what `promised` owes in `image`, the image a run with a failed write left
/// behind: no cut, so every promise made holds whole, while names nothing promised yet are
/// beyond any promise, and so is what the filesystem's own checker makes of the failed write
/// (ext4 records the error in its superblock), which is not run.
pub fn promises(fstype: &str, image: &Path, mnt: &Path, w: &Workload, promised: &BTreeSet<String>) -> Result<Verdict> {
    mounted(fstype, image, mnt, |root, v| expectations(root, w, promised, true, v))
}

/// What the next run (or `cacheless clean`) does after the power cut: it removes every
/// temporary of the engine under `root` (their owner is gone with the boot) and nothing else.
/// Temporaries it leaves are violations, and so is anything of `w`'s it removed or changed
/// (the expectations are checked again). `v.temporaries` holds what the cut left.
fn cleaned(root: &Path, w: &Workload, promised: &BTreeSet<String>, v: &mut Verdict) {
    if v.temporaries.is_empty() {
        return;
    }
    let errors = cacheless::temps::clean_tree_all_gone(root).errors;
    for e in errors {
        v.violations.push((String::new(), format!("the clean-up could not read a folder: {e}")));
    }
    let mut left = Vec::new();
    temporaries(root, root, &mut left);
    for t in left {
        v.violations.push((t, "a temporary the clean-up left".into()));
    }
    let mut after = Verdict::default();
    expectations(root, w, promised, false, &mut after);
    v.violations.extend(after.violations.into_iter().map(|(f, what)| (f, format!("after the clean-up: {what}"))));
}

/// Mounts `image` at `mnt`, counts the engine's temporaries there, runs `f` on it and
/// unmounts it; a mount that fails is a violation.
fn mounted(fstype: &str, image: &Path, mnt: &Path, f: impl FnOnce(&Path, &mut Verdict)) -> Result<Verdict> {
    let mut v = Verdict::default();
    let lo = Loop::attach(image, false)?;
    match Mount::new(lo.dev(), fstype, mnt, mount_opts(fstype)) {
        Err(e) => v.violations.push((String::new(), format!("does not mount: {e}"))),
        Ok(m) => {
            temporaries(mnt, mnt, &mut v.temporaries);
            f(mnt, &mut v);
            m.unmount()?;
        }
    }
    Ok(v)
}

/// Checks each file, folder and symlink of `w` under `root` given the markers `promised`; with
/// `owed_only`, only those whose marker is among them.
fn expectations(root: &Path, w: &Workload, promised: &BTreeSet<String>, owed_only: bool, v: &mut Verdict) {
    let wanted = |by: &String| !owed_only || promised.contains(by);
    for f in w.files.iter().filter(|f| wanted(&f.promised_by)) {
        if let Some(what) = check_file(root, f, promised) {
            v.violations.push((f.path.display().to_string(), what));
        }
    }
    for d in w.dirs.iter().filter(|d| promised.contains(&d.promised_by)) {
        let problem = match std::fs::metadata(root.join(&d.path)) {
            Ok(m) if m.is_dir() => meta_differs(&m, d.meta).map(|x| format!("folder with the wrong attributes: {x}")),
            _ => Some("folder missing".to_string()),
        };
        if let Some(p) = problem {
            v.violations.push((d.path.display().to_string(), format!("{p}, though `{}` had returned", d.promised_by)));
        }
    }
    for (i, c) in w.checks.iter().enumerate() {
        if let Some(what) = c(root, promised) {
            v.violations.push((format!("check {}", i + 1), what));
        }
    }
    for a in &w.absent {
        if std::fs::symlink_metadata(root.join(a)).is_ok() {
            v.violations.push((a.display().to_string(), "named, though the call making it failed".into()));
        }
    }
    for l in w.symlinks.iter().filter(|l| wanted(&l.promised_by)) {
        let owed = promised.contains(&l.promised_by);
        let problem = match std::fs::read_link(root.join(&l.path)) {
            Ok(t) if t == l.target => None,
            Ok(t) => Some(format!("points at {}, not {}", t.display(), l.target.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !owed => None,
            Err(e) => Some(format!("symlink unreadable or missing ({e}), though `{}` had returned", l.promised_by)),
        };
        if let Some(p) = problem {
            v.violations.push((l.path.display().to_string(), p));
        }
    }
}

fn first_lines(s: &str, n: usize) -> String {
    s.lines().filter(|l| !l.trim().is_empty()).take(n).collect::<Vec<_>>().join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name the workload says must never exist is a violation where it exists, and only there.
    #[test]
    fn an_absent_name_that_exists_is_a_violation() {
        let root = tempfile::tempdir().unwrap();
        let w = Workload {
            name: "t".into(),
            setup: Box::new(|_, _| Ok(())),
            run: Box::new(|_| Ok(crate::workload::Ran::Done)),
            files: vec![],
            dirs: vec![],
            symlinks: vec![],
            absent: vec!["dst/one.bin".into()],
            checks: vec![],
        };
        let check = || {
            let mut v = Verdict::default();
            expectations(root.path(), &w, &BTreeSet::new(), false, &mut v);
            v.violations
        };
        assert!(check().is_empty());
        std::fs::create_dir(root.path().join("dst")).unwrap();
        std::fs::write(root.path().join("dst/one.bin"), b"x").unwrap();
        assert_eq!(check(), [("dst/one.bin".to_string(), "named, though the call making it failed".to_string())]);
    }

    #[test]
    fn temporaries_are_recognised_by_the_engines_pattern() {
        assert!(is_temporary(".data.bin.cacheless-1234-0.tmp"));
        assert!(is_temporary(&format!(".data.bin.cacheless-{}-1234-0.tmp", cacheless::temps::boot())));
        assert!(is_temporary(".a.b.cacheless-1-22.tmp"));
        assert!(!is_temporary("data.bin"));
        assert!(!is_temporary(".data.bin.cacheless-12x-0.tmp"));
        assert!(!is_temporary(".data.bin.cacheless-1-.tmp"));
        assert!(!is_temporary(".data.bin.tmp"));
        assert!(is_temporary(".link.cacheless-77.tmp") && is_temporary(".f.cacheless-77.link.tmp"), "the tree copy's symlinks and hard links");
        assert!(!is_temporary(".f.cacheless-.link.tmp"));
    }
}
