//! The walk: every input path, depth first, directories before their contents, in directory
//! order or sorted by name; member names as GNU tar forms them; hard links, excludes, owners,
//! sparse detection and xattrs decided here, in archive order.
//!
//! Inputs are relative to the working directory (`-C`) and looked at with `lstat`: symlinks
//! are stored as links and never followed, so a symlink loop is just a link. Below an input
//! the walk goes by descriptor, as `find` and GNU tar do: each entry is looked at, opened and
//! read relative to its open folder, so a tree of any depth is archived whole (no path grows
//! past PATH_MAX), and a folder swapped for a symlink while the walk is in it is not followed.
//! One folder is open at a time: the walk comes back up through `..`, checked to be the
//! folder it went down from. A folder's names are held packed while its entries are visited,
//! and a member's name is built only when it is handed on, so memory grows with the widest
//! folder's names and the depth, not with the tree.

use cacheless::sys;
use cacheless::sys::{AtFlags, FileType, OFlags, Stat};
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use super::header::{Fields, Kind};
use super::{Members, Owner, SortOrder};

/// A regular file with data to read (size > 0): where to open it, and whether it has holes
/// worth keeping.
pub(crate) struct Data {
    pub sparse: bool,
    pub at: At,
}

/// Where a file is opened: its open folder and its name there.
pub(crate) struct At {
    pub dir: Arc<OwnedFd>,
    pub name: OsString,
}

/// One member in archive order.
pub(crate) struct Item {
    /// The member name (directories end in '/').
    pub name: Vec<u8>,
    pub fields: Fields,
    /// Device and inode, to check the file read is the file walked.
    pub id: (u64, u64),
    /// A file's data to read (taken by the dispatcher, so that the folder is held open only
    /// while the file waits to be read); `None` for a member whose header is all there is
    /// (directory, link, device, empty file...).
    pub data: Option<Data>,
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
        self.users.entry(uid).or_insert_with(|| sys::user_name(uid).map(String::into_bytes).unwrap_or_default()).clone()
    }
    fn group(&mut self, gid: u32) -> Vec<u8> {
        self.groups.entry(gid).or_insert_with(|| sys::group_name(gid).map(String::into_bytes).unwrap_or_default()).clone()
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
    let dir = opts.directory.as_deref().unwrap_or(std::path::Path::new("."));
    let base = match sys::lookat(sys::CWD, dir, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC) {
        Ok(fd) => Arc::new(fd),
        Err(e) => {
            v.error(format!("{}: cannot open: {}", show(dir.as_os_str().as_bytes()), std::io::Error::from(e)), Some(e.raw_os_error()));
            return;
        }
    };
    let mut w =
        Walker { opts, skip, names: Names::default(), links: HashMap::new(), warned: Vec::new(), pending: Vec::new(), stopped: false, top_dev: 0, proc: None };
    for input in &opts.paths {
        let name = w.member_name(input.as_os_str().as_bytes());
        for msg in std::mem::take(&mut w.pending) {
            v.warn(msg);
        }
        let st = match sys::DirFd::of(&*base).stat(input.as_path()) {
            Ok(st) => st,
            Err(e) => {
                v.error(format!("{}: cannot stat: {}", show(input.as_os_str().as_bytes()), std::io::Error::from(e)), Some(e.raw_os_error()));
                continue;
            }
        };
        if !w.visit(v, name, &base, input.as_os_str(), &st) {
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
    /// The device of the input being walked, for `--one-file-system`.
    top_dev: u64,
    /// Whether /proc/self/fd reaches open folders (for the l*xattr calls), once looked at.
    proc: Option<bool>,
}

/// A folder's entry names (packed, see `sys::DirNames`) and the next one to visit.
struct Entries {
    names: sys::DirNames,
    next: usize,
}

impl Entries {
    fn read(dir: BorrowedFd<'_>, sort: bool) -> std::io::Result<Entries> {
        let order = if sort { sys::NameOrder::Name } else { sys::NameOrder::Listed };
        Ok(Entries { names: sys::dir_names(dir, order)?, next: 0 })
    }

    fn next(&mut self) -> Option<&OsStr> {
        let n = self.names.get(self.next)?;
        self.next += 1;
        Some(n)
    }
}

/// A folder the walk is in: its identity (to check the way back up), the length of its member
/// name in the walk's name (ending in '/'), and its entries.
struct Frame {
    id: (u64, u64),
    name_len: usize,
    entries: Entries,
}

/// A folder to descend into, as [`Walker::one`] opened it.
struct Opened {
    fd: OwnedFd,
    name: Vec<u8>,
    entries: Entries,
    id: (u64, u64),
}

fn open_dir(dir: BorrowedFd<'_>, name: &OsStr) -> sys::KResult<OwnedFd> {
    sys::lookat(dir, name, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC)
}

fn id_of(st: &Stat) -> (u64, u64) {
    (st.st_dev, st.st_ino)
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

    fn fields(&mut self, st: &Stat, kind: Kind) -> Fields {
        let o = self.opts;
        // --numeric-owner stores no names, given owners included (as GNU tar).
        let (uid, uname) = match &o.owner {
            Some(Owner { id, .. }) if o.numeric_owner => (u64::from(*id), Vec::new()),
            Some(Owner { id, name }) => (u64::from(*id), name.clone().into_bytes()),
            None if o.numeric_owner => (u64::from(st.st_uid), Vec::new()),
            None => (u64::from(st.st_uid), self.names.user(st.st_uid)),
        };
        let (gid, gname) = match &o.group {
            Some(Owner { id, .. }) if o.numeric_owner => (u64::from(*id), Vec::new()),
            Some(Owner { id, name }) => (u64::from(*id), name.clone().into_bytes()),
            None if o.numeric_owner => (u64::from(st.st_gid), Vec::new()),
            None => (u64::from(st.st_gid), self.names.group(st.st_gid)),
        };
        // st_mtime_nsec is 0..1e9 (the kernel's timespec).
        let mtime = o.mtime.unwrap_or((st.st_mtime, u32::try_from(st.st_mtime_nsec).unwrap_or(0)));
        let rdev = st.st_rdev;
        Fields {
            kind,
            mode: st.st_mode & 0o7777,
            uid,
            gid,
            uname,
            gname,
            mtime,
            size: 0,
            link: Vec::new(),
            dev: (sys::major(rdev), sys::minor(rdev)),
            xattrs: Vec::new(),
            acl_access: None,
            acl_default: None,
        }
    }

    /// Visits one input, `name` in the open folder `base`, and, for a directory, everything
    /// under it. False when the visitor asked to stop.
    fn visit(&mut self, v: &mut dyn Visit, name: Vec<u8>, base: &Arc<OwnedFd>, input: &OsStr, st: &Stat) -> bool {
        self.top_dev = st.st_dev;
        let Some(top) = self.one(v, name, base, input, st) else {
            return !self.stopped;
        };
        // The member name of the folder the walk is in, ending in '/'.
        let mut prefix = top.name;
        let mut cur = Arc::new(top.fd);
        let mut stack = vec![Frame { id: top.id, name_len: prefix.len(), entries: top.entries }];
        while let Some(frame) = stack.last_mut() {
            if let Some(child) = frame.entries.next() {
                let child = child.to_os_string();
                let mut name = Vec::with_capacity(prefix.len() + child.len());
                name.extend_from_slice(&prefix);
                name.extend_from_slice(child.as_bytes());
                let st = match sys::DirFd::of(&*cur).stat(child.as_os_str()) {
                    Ok(st) => st,
                    Err(e) => {
                        v.error(format!("{}: cannot stat: {}", show(&name), std::io::Error::from(e)), Some(e.raw_os_error()));
                        continue;
                    }
                };
                if let Some(down) = self.one(v, name, &cur, &child, &st) {
                    prefix = down.name;
                    cur = Arc::new(down.fd);
                    stack.push(Frame { id: down.id, name_len: prefix.len(), entries: down.entries });
                }
                if self.stopped {
                    return false;
                }
                continue;
            }
            stack.pop();
            let Some(parent) = stack.last() else { break };
            // Back up to the parent through "..", which must be the folder the walk came from.
            match sys::parent_dir(&*cur) {
                Ok((fd, id)) if id == parent.id => {
                    cur = Arc::new(fd);
                    prefix.truncate(parent.name_len);
                }
                _ => {
                    v.error(format!("{}: moved while it was archived; the rest of the folders above it not dumped", show(&prefix)), None);
                    return true;
                }
            }
        }
        !self.stopped
    }

    /// Hands over one member, `leaf` in the open folder `dir`; returns the directory to
    /// descend into, opened and listed, if it is one.
    fn one(&mut self, v: &mut dyn Visit, name: Vec<u8>, dir: &Arc<OwnedFd>, leaf: &OsStr, st: &Stat) -> Option<Opened> {
        if self.excluded(&name) {
            return None;
        }
        let id = id_of(st);
        if self.skip.contains(&id) {
            v.warn(format!("{}: file is the archive; not dumped", show(&name)));
            return None;
        }
        let kind = match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => Kind::Dir,
            FileType::Symlink => Kind::Symlink,
            FileType::RegularFile => Kind::File,
            FileType::CharacterDevice => Kind::CharDev,
            FileType::BlockDevice => Kind::BlockDev,
            FileType::Fifo => Kind::Fifo,
            _ => {
                v.warn(format!("{}: socket ignored", show(&name)));
                return None;
            }
        };
        let mut f = self.fields(st, kind);
        if (self.opts.xattrs || self.opts.acls) && kind != Kind::Symlink {
            self.attrs(v, &name, dir.as_fd(), leaf, st, &mut f);
        }
        let mut data = None;
        let mut name = name;
        match kind {
            Kind::Dir if !name.ends_with(b"/") => name.push(b'/'),
            Kind::Symlink => match sys::readlinkat(&**dir, leaf) {
                Ok(t) => f.link = t.into_bytes(),
                Err(e) => {
                    v.error(format!("{}: cannot read link: {}", show(&name), std::io::Error::from(e)), Some(e.raw_os_error()));
                    return None;
                }
            },
            Kind::File => {
                if st.st_nlink > 1 {
                    if let Some(first) = self.links.get(&id) {
                        f.kind = Kind::HardLink;
                        f.link = first.clone();
                        self.hand(v, Item { name, fields: f, id, data: None });
                        return None;
                    }
                    self.links.insert(id, name.clone());
                }
                let size = u64::try_from(st.st_size).unwrap_or(0);
                f.size = size;
                if size > 0 {
                    // GNU tar's test: fewer blocks allocated than the size needs.
                    let sparse = u64::try_from(st.st_blocks).unwrap_or(0).saturating_mul(512) < size;
                    data = Some(Data { sparse, at: At { dir: dir.clone(), name: leaf.to_os_string() } });
                }
            }
            Kind::CharDev | Kind::BlockDev if !super::header::dev_fits(f.dev) => {
                v.error(format!("{}: device number {}:{} too large for a tar header; not dumped", show(&name), f.dev.0, f.dev.1), None);
                return None;
            }
            _ => {}
        }
        let dir_name = (kind == Kind::Dir).then(|| name.clone());
        if !self.hand(v, Item { name, fields: f, id, data }) {
            return None;
        }
        let name = dir_name?;
        if self.opts.one_file_system && id.0 != self.top_dev {
            v.warn(format!("{}: is on a different filesystem; contents not dumped", show(&name)));
            return None;
        }
        let fd = match open_dir(dir.as_fd(), leaf) {
            Ok(fd) => fd,
            Err(e) => {
                v.error(format!("{}: cannot open directory: {}", show(&name), std::io::Error::from(e)), Some(e.raw_os_error()));
                return None;
            }
        };
        // The folder opened is the one looked at, not something put in its place since.
        match sys::fstat(&fd) {
            Ok(now) if id_of(&now) == id => {}
            _ => {
                v.error(format!("{}: replaced since it was looked at; contents not dumped", show(&name)), None);
                return None;
            }
        }
        let entries = match Entries::read(fd.as_fd(), self.opts.sort == SortOrder::Name) {
            Ok(e) => e,
            Err(e) => {
                v.error(format!("{}: cannot read directory: {e}", show(&name)), e.raw_os_error());
                return None;
            }
        };
        Some(Opened { fd, name, entries, id })
    }

    /// Reads the extended attributes and ACLs `--xattrs` and `--acls` store, into `f`.
    fn attrs(&mut self, v: &mut dyn Visit, name: &[u8], dir: BorrowedFd<'_>, leaf: &OsStr, st: &Stat, f: &mut Fields) {
        // By name through /proc/self/fd, to any depth and whatever the file is (a FIFO or a
        // device is not opened); where /proc is not mounted, a file or folder is opened.
        let proc = *self.proc.get_or_insert_with(|| sys::statat(sys::CWD, "/proc/self/fd", AtFlags::empty()).is_ok());
        let fd;
        let at = if proc {
            sys::XattrAt::Name(dir, leaf)
        } else if matches!(f.kind, Kind::File | Kind::Dir) {
            match sys::lookat(dir, leaf, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC) {
                Ok(o) => {
                    fd = o;
                    sys::XattrAt::Fd(fd.as_fd())
                }
                Err(e) => {
                    v.error(format!("{}: cannot read xattrs or ACLs: {}", show(name), std::io::Error::from(e)), Some(e.raw_os_error()));
                    return;
                }
            }
        } else {
            v.error(format!("{}: cannot read xattrs or ACLs: /proc is not mounted", show(name)), None);
            return;
        };
        if self.opts.xattrs {
            match read_xattrs(at) {
                Ok(x) => f.xattrs = x,
                Err(e) => v.error(format!("{}: cannot read xattrs: {e}", show(name)), e.raw_os_error()),
            }
        }
        if self.opts.acls {
            // Stored as text records; never also as raw attributes.
            f.xattrs.retain(|(k, _)| !k.starts_with(b"system.posix_acl_"));
            match read_acls(at, f.kind == Kind::Dir, st.st_mode, &mut self.names) {
                Ok((access, default)) => (f.acl_access, f.acl_default) = (access, default),
                Err(e) => v.error(format!("{}: cannot read ACLs: {e}", show(name)), e.raw_os_error()),
            }
        }
    }

    fn hand(&mut self, v: &mut dyn Visit, item: Item) -> bool {
        if !v.item(item) {
            self.stopped = true;
        }
        !self.stopped
    }
}

/// An access ACL and a default one, as text, where there are.
type AclTexts = (Option<Vec<u8>>, Option<Vec<u8>>);

/// The POSIX ACLs at `at` (not a symlink) as GNU tar `--acls` stores them, as text: its access
/// ACL where it has one beyond its mode, and a folder's default ACL (a folder with a default
/// ACL and none of its own gets its mode's, as GNU's does).
fn read_acls(at: sys::XattrAt<'_>, dir: bool, mode: u32, names: &mut Names) -> std::io::Result<AclTexts> {
    let get = |n: &str| match sys::xattr_get(at, OsStr::new(n)) {
        Ok(v) => Ok(Some(v)),
        Err(sys::Errno::NODATA | sys::Errno::OPNOTSUPP) => Ok(None),
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

/// The extended attributes at `at` (not following a symlink), sorted by name.
fn read_xattrs(at: sys::XattrAt<'_>) -> std::io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let names = match sys::xattr_names(at) {
        Ok(n) => n,
        Err(sys::Errno::OPNOTSUPP) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    for key in names.split(|&b| b == 0).filter(|k| !k.is_empty()) {
        match sys::xattr_get(at, OsStr::from_bytes(key)) {
            Ok(val) => out.push((key.to_vec(), val)),
            // Removed since it was listed.
            Err(sys::Errno::NODATA) => {}
            Err(e) => return Err(e.into()),
        }
    }
    out.sort();
    Ok(out)
}
