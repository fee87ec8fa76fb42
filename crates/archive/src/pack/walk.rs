//! The walk: every input path, depth first, directories before their contents, in directory
//! order or sorted by name; member names as GNU tar forms them; hard links, excludes, owners,
//! sparse detection and xattrs decided here, in archive order.
//!
//! Paths are used relative to the working directory (`-C`) and stat'ed with `lstat`: symlinks
//! are stored as links and never followed, so a symlink loop is just a link.

use cacheless::sys;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, Metadata};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::header::{Fields, Kind};
use super::{Members, Owner, SortOrder};

/// What the walk found for one member.
pub(crate) enum What {
    /// A member whose header is written as is (directory, link, device, empty file...).
    Plain,
    /// A regular file with data to read (size > 0); `sparse` when it has holes worth keeping.
    Data { sparse: bool },
}

/// One member in archive order.
pub(crate) struct Item {
    /// The member name (directories end in '/').
    pub name: Vec<u8>,
    /// Where it is on disk (relative to the working directory, or absolute).
    pub path: PathBuf,
    pub fields: Fields,
    pub what: What,
    /// Device and inode, to check the file read is the file walked.
    pub id: (u64, u64),
}

/// Escapes a name for messages: control characters and invalid UTF-8 as in GNU tar's quoting.
pub(crate) fn show(b: &[u8]) -> String {
    let mut s = String::new();
    for chunk in b.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\n' => s.push_str("\\n"),
                '\t' => s.push_str("\\t"),
                '\\' => s.push_str("\\\\"),
                c if c.is_control() => s.push_str(&format!("\\{:03o}", c as u32)),
                c => s.push(c),
            }
        }
        for &b in chunk.invalid() {
            s.push_str(&format!("\\{b:03o}"));
        }
    }
    s
}

/// User and group names by id, looked up once each (getpwuid_r/getgrgid_r through `nix`, so
/// NSS sources such as LDAP answer as they do for GNU tar).
#[derive(Default)]
struct Names {
    users: HashMap<u32, Vec<u8>>,
    groups: HashMap<u32, Vec<u8>>,
}

impl Names {
    fn user(&mut self, uid: u32) -> Vec<u8> {
        self.users
            .entry(uid)
            .or_insert_with(|| match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
                Ok(Some(u)) => u.name.into_bytes(),
                _ => Vec::new(),
            })
            .clone()
    }
    fn group(&mut self, gid: u32) -> Vec<u8> {
        self.groups
            .entry(gid)
            .or_insert_with(|| match nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid)) {
                Ok(Some(g)) => g.name.into_bytes(),
                _ => Vec::new(),
            })
            .clone()
    }
}

/// Receives what the walk finds, in archive order.
pub(crate) trait Visit {
    /// A member; false stops the walk.
    fn item(&mut self, item: Item) -> bool;
    /// A path that could not be stat'ed or listed (the walk goes on).
    fn error(&mut self, msg: String, errno: Option<i32>);
    /// Something skipped on purpose (a socket, the archive itself, another filesystem).
    fn warn(&mut self, msg: String);
}

/// Walks every input of `opts` and hands each member to `v`. `skip`: (dev, ino) of files never
/// to archive (the archive being written).
pub(crate) fn walk(opts: &Members, skip: &[(u64, u64)], v: &mut dyn Visit) {
    let mut w = Walker { opts, skip, names: Names::default(), links: HashMap::new(), warned: Vec::new(), pending: Vec::new(), stopped: false };
    for input in &opts.paths {
        let full = match &opts.directory {
            Some(d) => d.join(input),
            None => input.clone(),
        };
        let name = w.member_name(input.as_os_str().as_bytes());
        for msg in std::mem::take(&mut w.pending) {
            v.warn(msg);
        }
        let md = match fs::symlink_metadata(&full) {
            Ok(m) => m,
            Err(e) => {
                v.error(format!("{}: cannot stat: {e}", show(input.as_os_str().as_bytes())), e.raw_os_error());
                continue;
            }
        };
        let dev = md.dev();
        if !w.visit(v, name, full, md, dev) {
            return;
        }
    }
}

struct Walker<'a> {
    opts: &'a Members,
    skip: &'a [(u64, u64)],
    names: Names,
    /// First member name of each multiply-linked inode.
    links: HashMap<(u64, u64), Vec<u8>>,
    warned: Vec<&'static str>,
    /// Warnings not yet handed to the visitor.
    pending: Vec<String>,
    /// The visitor asked to stop.
    stopped: bool,
}

/// A directory being listed: its member name, path, and entries not yet visited (reversed).
struct Open {
    name: Vec<u8>,
    path: PathBuf,
    left: Vec<std::ffi::OsString>,
}

impl Walker<'_> {
    /// The member name of a command-line path: GNU tar drops leading '/' and '../' (warning
    /// once each) and keeps the rest as given ("." stays ".", stored "./").
    fn member_name(&mut self, raw: &[u8]) -> Vec<u8> {
        let mut s = raw;
        loop {
            if let Some(r) = s.strip_prefix(b"/") {
                self.warn_once("removing leading '/' from member names");
                s = r;
            } else if let Some(r) = s.strip_prefix(b"../") {
                self.warn_once("removing leading '../' from member names");
                s = r;
            } else if s == b".." {
                self.warn_once("removing leading '../' from member names");
                s = b".";
            } else {
                break;
            }
        }
        let mut v = s.to_vec();
        while v.len() > 1 && v.ends_with(b"/") {
            v.pop();
        }
        if v.is_empty() {
            v = b".".to_vec();
        }
        v
    }

    fn warn_once(&mut self, w: &'static str) {
        if !self.warned.contains(&w) {
            self.warned.push(w);
            self.pending.push(w.to_string());
        }
    }

    fn excluded(&self, name: &[u8]) -> bool {
        crate::select::excluded(&self.opts.exclude, name)
    }

    fn fields(&mut self, md: &Metadata, kind: Kind) -> Fields {
        let o = self.opts;
        // --numeric-owner stores no names, given owners included (as GNU tar).
        let (uid, uname) = match &o.owner {
            Some(Owner { id, .. }) if o.numeric_owner => (u64::from(*id), Vec::new()),
            Some(Owner { id, name }) => (u64::from(*id), name.clone().into_bytes()),
            None if o.numeric_owner => (u64::from(md.uid()), Vec::new()),
            None => (u64::from(md.uid()), self.names.user(md.uid())),
        };
        let (gid, gname) = match &o.group {
            Some(Owner { id, .. }) if o.numeric_owner => (u64::from(*id), Vec::new()),
            Some(Owner { id, name }) => (u64::from(*id), name.clone().into_bytes()),
            None if o.numeric_owner => (u64::from(md.gid()), Vec::new()),
            None => (u64::from(md.gid()), self.names.group(md.gid())),
        };
        // st_mtime_nsec is 0..1e9 (the kernel's timespec).
        let mtime = o.mtime.unwrap_or((md.mtime(), u32::try_from(md.mtime_nsec()).unwrap_or(0)));
        let rdev = md.rdev();
        Fields {
            kind,
            mode: md.mode() & 0o7777,
            uid,
            gid,
            uname,
            gname,
            mtime,
            size: 0,
            link: Vec::new(),
            dev: (rustix::fs::major(rdev), rustix::fs::minor(rdev)),
            xattrs: Vec::new(),
            acl_access: None,
            acl_default: None,
        }
    }

    /// Visits one path and, for a directory, everything under it.
    fn visit(&mut self, v: &mut dyn Visit, name: Vec<u8>, path: PathBuf, md: Metadata, top_dev: u64) -> bool {
        let mut stack: Vec<Open> = Vec::new();
        if let Some(open) = self.one(v, name, path, md, top_dev) {
            stack.push(open);
        }
        while let Some(top) = stack.last_mut() {
            let Some(child) = top.left.pop() else {
                stack.pop();
                continue;
            };
            let mut name = top.name.clone();
            if !name.ends_with(b"/") {
                name.push(b'/');
            }
            name.extend_from_slice(child.as_bytes());
            let path = top.path.join(&child);
            let md = match fs::symlink_metadata(&path) {
                Ok(m) => m,
                Err(e) => {
                    v.error(format!("{}: cannot stat: {e}", show(&name)), e.raw_os_error());
                    continue;
                }
            };
            if let Some(open) = self.one(v, name, path, md, top_dev) {
                stack.push(open);
            }
            if self.stopped {
                return false;
            }
        }
        !self.stopped
    }

    /// Hands over one member; returns the directory to descend into, if it is one.
    fn one(&mut self, v: &mut dyn Visit, name: Vec<u8>, path: PathBuf, md: Metadata, top_dev: u64) -> Option<Open> {
        if self.excluded(&name) {
            return None;
        }
        let id = (md.dev(), md.ino());
        if self.skip.contains(&id) {
            v.warn(format!("{}: file is the archive; not dumped", show(&name)));
            return None;
        }
        let ft = md.file_type();
        let kind = if ft.is_dir() {
            Kind::Dir
        } else if ft.is_symlink() {
            Kind::Symlink
        } else if ft.is_file() {
            Kind::File
        } else if ft.is_char_device() {
            Kind::CharDev
        } else if ft.is_block_device() {
            Kind::BlockDev
        } else if ft.is_fifo() {
            Kind::Fifo
        } else {
            v.warn(format!("{}: socket ignored", show(&name)));
            return None;
        };
        let mut f = self.fields(&md, kind);
        if self.opts.xattrs && kind != Kind::Symlink {
            match read_xattrs(&path) {
                Ok(x) => f.xattrs = x,
                Err(e) => v.error(format!("{}: cannot read xattrs: {e}", show(&name)), e.raw_os_error()),
            }
        }
        if self.opts.acls && kind != Kind::Symlink {
            // Stored as text records; never also as raw attributes.
            f.xattrs.retain(|(k, _)| !k.starts_with(b"system.posix_acl_"));
            match read_acls(&path, kind == Kind::Dir, md.mode(), &mut self.names) {
                Ok((access, default)) => (f.acl_access, f.acl_default) = (access, default),
                Err(e) => v.error(format!("{}: cannot read ACLs: {e}", show(&name)), e.raw_os_error()),
            }
        }
        let mut what = What::Plain;
        let mut name = name;
        match kind {
            Kind::Dir if !name.ends_with(b"/") => name.push(b'/'),
            Kind::Symlink => match fs::read_link(&path) {
                Ok(t) => f.link = t.into_os_string().into_vec(),
                Err(e) => {
                    v.error(format!("{}: cannot read link: {e}", show(&name)), e.raw_os_error());
                    return None;
                }
            },
            Kind::File => {
                if md.nlink() > 1 {
                    if let Some(first) = self.links.get(&id) {
                        f.kind = Kind::HardLink;
                        f.link = first.clone();
                        self.hand(v, name, path, f, What::Plain, id);
                        return None;
                    }
                    self.links.insert(id, name.clone());
                }
                f.size = md.len();
                if md.len() > 0 {
                    // GNU tar's test: fewer blocks allocated than the size needs.
                    let sparse = (md.blocks() * 512) < md.len();
                    what = What::Data { sparse };
                }
            }
            Kind::CharDev | Kind::BlockDev if !super::header::dev_fits(f.dev) => {
                v.error(format!("{}: device number {}:{} too large for a tar header; not dumped", show(&name), f.dev.0, f.dev.1), None);
                return None;
            }
            _ => {}
        }
        let dir = (kind == Kind::Dir).then(|| (name.clone(), path.clone()));
        if !self.hand(v, name, path, f, what, id) {
            return None;
        }
        let (name, path) = dir?;
        if self.opts.one_file_system && id.0 != top_dev {
            v.warn(format!("{}: is on a different filesystem; contents not dumped", show(&name)));
            return None;
        }
        let mut left: Vec<std::ffi::OsString> = match fs::read_dir(&path) {
            Ok(rd) => {
                let mut names = Vec::new();
                for e in rd {
                    match e {
                        Ok(e) => names.push(e.file_name()),
                        Err(e) => {
                            v.error(format!("{}: cannot read directory: {e}", show(&name)), e.raw_os_error());
                            break;
                        }
                    }
                }
                names
            }
            Err(e) => {
                v.error(format!("{}: cannot open directory: {e}", show(&name)), e.raw_os_error());
                return None;
            }
        };
        if self.opts.sort == SortOrder::Name {
            left.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        }
        left.reverse();
        Some(Open { name, path, left })
    }

    fn hand(&mut self, v: &mut dyn Visit, name: Vec<u8>, path: PathBuf, fields: Fields, what: What, id: (u64, u64)) -> bool {
        if !v.item(Item { name, path, fields, what, id }) {
            self.stopped = true;
        }
        !self.stopped
    }
}

/// An access ACL and a default one, as text, where there are.
type AclTexts = (Option<Vec<u8>>, Option<Vec<u8>>);

/// The POSIX ACLs of `path` (not a symlink) as GNU tar `--acls` stores them, as text: its access
/// ACL where it has one beyond its mode, and a folder's default ACL (a folder with a default
/// ACL and none of its own gets its mode's, as GNU's does).
fn read_acls(path: &Path, dir: bool, mode: u32, names: &mut Names) -> std::io::Result<AclTexts> {
    let at = sys::XattrAt::Link(path);
    let get = |n: &str| match sys::xattr_get(at, OsStr::new(n)) {
        Ok(v) => Ok(Some(v)),
        Err(rustix::io::Errno::NODATA | rustix::io::Errno::OPNOTSUPP) => Ok(None),
        Err(e) => Err(std::io::Error::from(e)),
    };
    let access = get(crate::acl::ACCESS)?;
    let default = if dir { get(crate::acl::DEFAULT)? } else { None };
    let access = access.or_else(|| default.is_some().then(|| crate::acl::from_mode(mode)));
    let mut text = |v: Option<Vec<u8>>| -> std::io::Result<Option<Vec<u8>>> {
        v.map(|v| {
            crate::acl::to_text(&v, |group, id| {
                let n = if group { names.group(id) } else { names.user(id) };
                (!n.is_empty()).then_some(n)
            })
            .map_err(std::io::Error::other)
        })
        .transpose()
    };
    Ok((text(access)?, text(default)?))
}

/// The extended attributes of `path` (not following a symlink), sorted by name.
fn read_xattrs(path: &Path) -> std::io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let at = sys::XattrAt::Link(path);
    let names = match sys::xattr_names(at) {
        Ok(n) => n,
        Err(rustix::io::Errno::OPNOTSUPP) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    for key in names.split(|&b| b == 0).filter(|k| !k.is_empty()) {
        match sys::xattr_get(at, OsStr::from_bytes(key)) {
            Ok(val) => out.push((key.to_vec(), val)),
            // Removed since it was listed.
            Err(rustix::io::Errno::NODATA) => {}
            Err(e) => return Err(e.into()),
        }
    }
    out.sort();
    Ok(out)
}

use std::os::unix::ffi::OsStringExt;
