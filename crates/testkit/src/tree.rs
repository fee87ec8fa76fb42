//! A tree as the comparisons with GNU's tools see it: every entry's type, mode, owner, contents
//! or link target, device number, shared inodes, extended attributes and modification time.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Used by tests only: a failed step is a failed test.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One entry of a tree as the comparison sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// "file", "dir", "symlink", "fifo", "char", "block" or "socket".
    pub kind: &'static str,
    /// Permission bits, set-ID and sticky bits included.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Contents of a file, target of a symlink.
    pub body: Vec<u8>,
    /// Device number of a device node.
    pub rdev: u64,
    /// The first name (in sorted order) of the tree sharing this entry's inode.
    pub inode_of: PathBuf,
    /// Extended attributes, ACLs among them (not the labels the system sets: `security.*`
    /// but the file capability).
    pub xattrs: BTreeMap<String, Vec<u8>>,
    /// The modification time, or `None` when it is later than the start of the run (the copy
    /// set it to the time of the copy).
    pub mtime: Option<(i64, i64)>,
}

/// The extended attributes of `p` (not followed), by name.
pub fn xattrs(p: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut list = vec![0u8; 64 << 10];
    let Ok(n) = rustix::fs::llistxattr(p, &mut list) else { return BTreeMap::new() };
    let mut m = BTreeMap::new();
    for name in list[..n].split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let name = String::from_utf8_lossy(name).to_string();
        if name.starts_with("security.") && name != "security.capability" {
            continue;
        }
        let mut v = vec![0u8; 64 << 10];
        let k = rustix::fs::lgetxattr(p, name.as_str(), &mut v).unwrap();
        v.truncate(k);
        m.insert(name, v);
    }
    m
}

/// Every path under `root`, relative, sorted; symlinks are not followed, and a folder that
/// cannot be read is listed without its contents.
pub fn paths(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(root.join(&rel)) else { continue };
        for e in rd {
            let r = rel.join(e.unwrap().file_name());
            if std::fs::symlink_metadata(root.join(&r)).unwrap().is_dir() {
                stack.push(r.clone());
            }
            out.push(r);
        }
    }
    out.sort();
    out
}

/// Every entry under `root`, by relative path; times after `since` count as "now".
pub fn snapshot(root: &Path, since: (i64, i64)) -> BTreeMap<PathBuf, Node> {
    let paths = paths(root);
    let mut first: BTreeMap<(u64, u64), PathBuf> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for r in paths {
        let p = root.join(&r);
        let m = std::fs::symlink_metadata(&p).unwrap();
        let ft = m.file_type();
        let (kind, body) = if ft.is_symlink() {
            ("symlink", std::fs::read_link(&p).unwrap().into_os_string().into_encoded_bytes())
        } else if ft.is_dir() {
            ("dir", Vec::new())
        } else if ft.is_file() {
            ("file", std::fs::read(&p).unwrap())
        } else {
            (
                match m.mode() & libc::S_IFMT {
                    libc::S_IFIFO => "fifo",
                    libc::S_IFCHR => "char",
                    libc::S_IFBLK => "block",
                    _ => "socket",
                },
                Vec::new(),
            )
        };
        let inode_of = first.entry((m.dev(), m.ino())).or_insert_with(|| r.clone()).clone();
        let mtime = Some((m.mtime(), m.mtime_nsec())).filter(|t| *t < since);
        out.insert(r, Node { kind, mode: m.mode() & 0o7777, uid: m.uid(), gid: m.gid(), body, rdev: m.rdev(), inode_of, xattrs: xattrs(&p), mtime });
    }
    out
}

/// Sets every time under `dir` (and its own) to one in the past, deepest first.
pub fn age(dir: &Path) {
    let mut all = vec![dir.to_path_buf()];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if std::fs::symlink_metadata(&p).unwrap().is_dir() {
                stack.push(p.clone());
            }
            all.push(p);
        }
    }
    all.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for (i, p) in all.iter().enumerate() {
        let t = rustix::fs::Timespec { tv_sec: 1_000_000_000 + i64::try_from(i).unwrap(), tv_nsec: 500 };
        let _ =
            rustix::fs::utimensat(rustix::fs::CWD, p, &rustix::fs::Timestamps { last_access: t, last_modification: t }, rustix::fs::AtFlags::SYMLINK_NOFOLLOW);
    }
}

/// Two folders `g` and `o` (for GNU's tool and for cacheless) in a scratch folder anyone may
/// enter, each built by `setup`, given to `owner` (uid, gid) where one is named, and aged (see
/// [`age`]) so that a time the run sets shows. The scratch folder goes when the first is dropped.
pub fn twins(setup: impl Fn(&Path), owner: Option<(u32, u32)>) -> (tempfile::TempDir, PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let d = crate::scratch();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (g, o) = (d.path().join("g"), d.path().join("o"));
    for dir in [&g, &o] {
        std::fs::create_dir(dir).unwrap();
        setup(dir);
        if let Some((u, gid)) = owner {
            let ids = (Some(rustix::fs::Uid::from_raw(u)), Some(rustix::fs::Gid::from_raw(gid)));
            rustix::fs::chownat(rustix::fs::CWD, dir.as_path(), ids.0, ids.1, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).unwrap();
        }
        age(dir);
    }
    (d, g, o)
}
