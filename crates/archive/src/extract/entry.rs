//! The parser's side of each entry: its name made safe, and every namespace operation (mkdir,
//! the engine's create, symlink, link, mknod) in archive order, handing file data to the workers
//! (`jobs`); sparse files are written here, segment by segment, through the engine.

use cacheless::sys;
use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;

use cacheless::sys::Errno;
use cacheless::sys::{AtFlags, DirFd};
use cacheless::{AlignedBuf, CreateQueue, CreateTicket, NewFile};

use super::jobs::{
    attrs, named, own, owned, system_time, times, Data, Extra, Job, Meta, Msg, Settled, Shared, Slab, Small, Why, BATCH_BYTES, CHUNK, SLAB_ALIGN, SLAB_BYTES,
};
use super::options::{ExtractOptions, ExtractReport};
use super::shares::Shares;
use crate::error::Error;
use crate::extract::options::{Listing, OldFiles};
use crate::fsops::{sanitize, Dir, RelPath, Root, Sanitized};
use crate::source;
use crate::tarparse::{Entry, Kind, Parser};
use cacheless::pool::Pool;

/// Entry-level outcome: the archive goes on after `Entry`, stops after `Fatal` (an error of
/// the archive itself: truncated, corrupt, unreadable, or the extraction interrupted).
pub(super) enum Fail {
    Entry(Error),
    Fatal(Error),
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        match e {
            Error::Truncated { .. } | Error::Corrupt { .. } | Error::Decompress { .. } | Error::Interrupted { .. } => Fail::Fatal(e),
            e => Fail::Entry(e),
        }
    }
}

/// An error of the archive read by the parser: always stops the run.
fn fatal(e: Error) -> Fail {
    Fail::Fatal(e)
}

/// The parser's side of the extraction.
pub(super) struct Ctx<'a> {
    pub opts: &'a ExtractOptions,
    /// The destination members are extracted into now: `dest`, or one of `chdirs`' folders.
    pub root: Root,
    /// Every destination by its index (0: `dest`, then `chdirs`'), the one in `root` taken out.
    pub roots: Vec<Option<Root>>,
    /// The index of the one in `root`.
    pub active: usize,
    /// With `absolute_names`, each destination's real path as components (its `Root` is '/').
    pub bases: Vec<Vec<Vec<u8>>>,
    pub sh: Arc<Shared>,
    pub pool: Pool<Shared>,
    /// The budget's division among the holders of buffers.
    pub shares: Shares,
    pub is_root: bool,
    pub umask: u32,
    /// Folders whose metadata is applied at the end: their destination's index, path, metadata.
    pub dirs: Vec<(usize, RelPath, Meta)>,
    pub report: ExtractReport,
    pub warned_abs: bool,
    /// `--one-top-level`'s folder as components (split once, for every member).
    pub top: Option<Vec<Vec<u8>>>,
    /// Offset of the last member named by `list` (a member retried is named once).
    pub listed: Option<u64>,
    /// `-vv`: the width of owner, group and size together, the widest seen (GNU's, from 19).
    pub list_width: usize,
    /// Small files read whole and not yet handed to a worker, and the lease they fill.
    pub batch: Vec<Queued>,
    pub batch_bytes: usize,
    /// The batch's slab being filled (see `jobs::Slab`), and how much of it is.
    pub slab: Option<(AlignedBuf, usize)>,
    /// Batches whose files are still being created, oldest first, and their slabs.
    pub waiting: VecDeque<(Vec<Queued>, usize, Option<Arc<Slab>>)>,
    /// Creates the small files of batches ahead of their data (`None` only while a creation
    /// borrows it).
    pub creates: Option<CreateQueue>,
    /// User and group names looked up.
    pub owners: Owners,
    /// The member names asked for, and which were found.
    pub members: crate::select::Members,
    /// Most files in a batch, and most batches waiting for their creation: together the
    /// descriptor plan's `pipeline` (each file holds itself and its directory).
    pub batch_files: usize,
    pub waiting_max: usize,
    /// Where the current member's data ends in the tar stream (see `jobs::InFlight::begin`).
    pub until: u64,
}

/// The ids of user and group names, looked up once each (getpwnam_r/getgrnam_r).
#[derive(Default)]
pub(super) struct Owners {
    users: std::collections::HashMap<Vec<u8>, Option<u32>>,
    groups: std::collections::HashMap<Vec<u8>, Option<u32>>,
}

impl Owners {
    /// The id of the user (`group` false) or group named `name`; `None` for an empty name or one
    /// this system does not know.
    fn id(&mut self, group: bool, name: &[u8]) -> Option<u32> {
        if name.is_empty() {
            return None;
        }
        let known = if group { &mut self.groups } else { &mut self.users };
        // Looked up by the borrowed name: a copy is made once per name, not once per member.
        if let Some(id) = known.get(name) {
            return *id;
        }
        let id = std::str::from_utf8(name).ok().and_then(|n| if group { sys::group_id(n) } else { sys::user_id(n) });
        known.insert(name.to_vec(), id);
        id
    }
}

/// A small file read whole, its creation asked of the create queue.
pub(super) struct Queued {
    rel: RelPath,
    create: CreateTicket,
    meta: Meta,
    data: Piece,
    ticket: super::jobs::Ticket,
}

/// Where a batched file's data is: in a buffer of its own, or at an offset in its batch's slab.
enum Piece {
    Own(AlignedBuf, usize),
    InSlab(usize, usize),
}

/// Batches whose files are being created, at most: the parser waits for the oldest beyond.
pub(super) const WAITING_MAX: usize = 4;

/// Files up to this size are handed to the workers in batches.
const BATCHED_MAX: u64 = 64 << 10;

impl Ctx<'_> {
    /// Hands every batch of small files to the workers, the one being filled too, once their
    /// files are created.
    pub(super) fn flush_batch(&mut self) {
        self.close_batch();
        while !self.waiting.is_empty() {
            self.send_oldest();
        }
    }

    /// Closes the batch being filled: it waits for its files' creation, and the batches whose
    /// files are all created (or the oldest, when too many wait) are handed over.
    fn close_batch(&mut self) {
        // The next batch's room made at once, not grown file by file.
        let files = std::mem::replace(&mut self.batch, Vec::with_capacity(self.batch_files));
        let bytes = std::mem::take(&mut self.batch_bytes);
        let slab = self.slab.take().map(|(buf, _)| Arc::new(Slab::new(buf, self.sh.slabs.clone())));
        if !files.is_empty() {
            self.waiting.push_back((files, bytes, slab));
        }
        while self.waiting.len() > self.waiting_max {
            self.send_oldest();
        }
    }

    /// Takes the created files of the oldest batch waiting (waiting for their creation) and hands
    /// them to the workers, with one lease for their bytes (as much as their leases one each
    /// would hold). A file whose creation failed is reported, and its name settles as failed.
    fn send_oldest(&mut self) {
        let Some((files, bytes, slab)) = self.waiting.pop_front() else { return };
        let Some(creates) = self.creates.as_mut() else { return };
        let mut ready = Vec::with_capacity(files.len());
        for q in files {
            let data = match q.data {
                Piece::Own(buf, len) => Data::Owned(buf, len),
                Piece::InSlab(off, len) => match &slab {
                    Some(slab) => Data::InSlab(slab.clone(), off, len),
                    None => {
                        self.sh.fail(named(&q.rel, "internal error: its batch has no slab", false));
                        continue;
                    }
                },
            };
            match creates.take(q.create) {
                Ok(file) => ready.push(Small { rel: q.rel, file, meta: q.meta, data, ticket: q.ticket }),
                Err(e) => self.sh.fail(Why::engine(&q.rel, &e, false)),
            }
        }
        if !ready.is_empty() {
            let lease = self.shares.lease(bytes as u64);
            self.pool.send(Job::Batch(ready, lease));
        }
    }

    /// Closes the batch first if `n` more bytes would not fit in it.
    fn batch_room(&mut self, n: usize) {
        if !self.batch.is_empty() && (self.batch_bytes + n > BATCH_BYTES || self.batch.len() >= self.batch_files) {
            self.close_batch();
        }
        self.batch_bytes += n;
    }

    pub(super) fn warn(&mut self, w: String) {
        if self.report.warnings.len() < 1000 {
            self.report.warnings.push(w);
        }
    }

    fn meta(&mut self, e: &Entry) -> Meta {
        let chown = self.opts.same_owner;
        let (mut uid, mut gid) = (e.uid, e.gid);
        if chown && !self.opts.numeric_owner {
            // GNU tar: the archive's names where this system knows them, else its numbers.
            uid = self.owners.id(false, &e.uname).map_or(uid, u64::from);
            gid = self.owners.id(true, &e.gname).map_or(gid, u64::from);
        }
        let mut mode = e.mode & 0o7777;
        if !self.opts.same_permissions {
            // GNU tar's default for other users (--no-same-permissions): the permission bits
            // less the umask, no set-ID nor sticky bit.
            mode &= 0o777 & !self.umask;
        } else if !chown && self.is_root {
            // The entry becomes root's (user and group 0). A set-ID bit whose owner in the
            // archive is root too means here what it meant there, and is kept, as GNU keeps it
            // (Debian's sudo, 4755); one of another owner's would make a set-ID program of the
            // wrong owner, and is not made (GNU makes it).
            let root_user = e.uid == 0 && (e.uname.is_empty() || e.uname == b"root");
            let root_group = e.gid == 0 && (e.gname.is_empty() || e.gname == b"root");
            if !root_user {
                mode &= !0o4000;
            }
            if !root_group {
                mode &= !0o2000;
            }
        }
        Meta { mode, uid, gid, mtime: e.mtime, chown, time_only: false, extra: self.extra(e) }
    }

    /// What `--xattrs` and `--acls` give the entry, where they give it anything. GNU tar's
    /// choices: by default only `user.*` attributes; with `--acls`, a member without an ACL
    /// gets the one its mode says, a folder without a default ACL loses one; symlinks and
    /// hard links get no ACL (a hard link nothing at all: its inode has them already).
    fn extra(&mut self, e: &Entry) -> Option<Arc<Extra>> {
        if e.kind == Kind::HardLink || !(self.opts.xattrs || self.opts.acls) {
            return None;
        }
        let mut x = Extra::default();
        if self.opts.xattrs {
            let (include, exclude) = (&self.opts.xattrs_include, &self.opts.xattrs_exclude);
            let wanted = |name: &str| {
                let included = if include.is_empty() { name.starts_with("user.") } else { include.iter().any(|p| p.matches(name)) };
                included && !exclude.iter().any(|p| p.matches(name))
            };
            x.xattrs = e.xattrs.iter().filter(|(n, _)| wanted(&String::from_utf8_lossy(n))).cloned().collect();
        }
        if self.opts.acls && e.kind != Kind::Symlink {
            let owners = &mut self.owners;
            let text = |t: &[u8], owners: &mut Owners| crate::acl::from_text(t, |group, name| owners.id(group, name));
            x.acl = Some(match &e.acl_access {
                Some(t) => text(t, owners),
                None => Ok(crate::acl::from_mode(e.mode)),
            });
            if e.kind == Kind::Dir {
                x.default_acl = Some(match &e.acl_default {
                    Some(t) => text(t, owners).map(Some),
                    None => Ok(None),
                });
            }
        }
        (!x.xattrs.is_empty() || x.acl.is_some()).then(|| Arc::new(x))
    }

    /// Sanitises and strips a member name; `None` if the entry is to be skipped (already warned).
    fn rel(&mut self, raw: &[u8], what: &str) -> Result<Option<RelPath>, Fail> {
        let rel = self.rel_stored(raw, what)?;
        Ok(match &self.top {
            Some(top) => rel.map(|r| crate::select::under_top(top, r)),
            None => rel,
        })
    }

    /// The member name `raw` as a path beneath the destination, before `--one-top-level`.
    fn rel_stored(&mut self, raw: &[u8], what: &str) -> Result<Option<RelPath>, Fail> {
        if self.opts.absolute_names {
            return Ok(self.absolute(raw));
        }
        match sanitize(raw) {
            Sanitized::DotDot => Err(Fail::Entry(Error::io(
                if what == "member" { "refusing member" } else { "refusing hard link target" },
                PathBuf::from(String::from_utf8_lossy(raw).into_owned()),
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "member name contains '..'"),
            ))),
            Sanitized::Ok { path, stripped } => {
                if stripped && !self.warned_abs {
                    self.warned_abs = true;
                    self.warn("removing leading '/' from member names".into());
                }
                // GNU counts "." as a component when stripping ("./a/b" -N1-> "a/b").
                let raw_comps: Vec<&[u8]> = raw.split(|&b| b == b'/').filter(|c| !c.is_empty()).collect();
                let n = self.opts.strip_components;
                if n == 0 {
                    return Ok(Some(path));
                }
                if raw_comps.len() <= n {
                    return Ok(None);
                }
                let rest: Vec<Vec<u8>> = raw_comps[n..].iter().filter(|c| **c != b".").map(|c| c.to_vec()).collect();
                Ok(Some(RelPath(rest)))
            }
        }
    }

    /// GNU tar `-P`: the name as it is, from '/' where it begins with one, else from the
    /// destination; `.` dropped and `..` taking a component off as the text says (GNU leaves
    /// that to the kernel, which differs only where a symlink is on the way), the folder it
    /// leaves made first where missing, as the kernel's walk needs it for GNU. `None` where
    /// `--strip-components` leaves nothing.
    fn absolute(&mut self, raw: &[u8]) -> Option<RelPath> {
        let comps: Vec<&[u8]> = raw.split(|&b| b == b'/').filter(|c| !c.is_empty()).collect();
        let n = self.opts.strip_components;
        if n > 0 && comps.len() <= n {
            return None;
        }
        let mut out = if raw.starts_with(b"/") && n == 0 { Vec::new() } else { self.bases[self.active].clone() };
        for c in &comps[n..] {
            match *c {
                b"." => {}
                b".." => {
                    // A folder that cannot be made leaves the member to fail where it goes.
                    let _ = self.root.dir(&out);
                    out.pop();
                }
                c => out.push(c.to_vec()),
            }
        }
        Some(RelPath(out))
    }

    /// Does one entry. Where a directory is in its way, the files written into that directory
    /// are given their names first (a syncfs), so that it is removed only when it is empty
    /// (else an earlier member in it, not yet named, would be lost with it), and the entry is
    /// tried again: nothing of its data was read yet.
    pub(super) fn entry(&mut self, parser: &mut Parser<source::TarStream>, mut e: Entry) -> Result<(), Fail> {
        // Where this member's data ends in the tar stream: its file is named once the
        // archive's checksums have verified that far.
        self.until = parser.position().saturating_add(e.data_len);
        // GNU tar --transform: the member's name and link target as the expressions make them;
        // the name as stored still selects the member and is what -v shows.
        let stored = match &self.opts.transform {
            Some(t) => {
                let link_scope = match e.kind {
                    Kind::Symlink => Some(crate::transform::SYMLINKS),
                    Kind::HardLink => Some(crate::transform::HARD_LINKS),
                    _ => None,
                };
                if let Some(new) = link_scope.and_then(|w| t.apply(e.link.as_deref().unwrap_or_default(), w)) {
                    e.link = Some(new);
                }
                t.apply(&e.path, crate::transform::NAMES).map(|new| std::mem::replace(&mut e.path, new))
            }
            None => None,
        };
        let stored = stored.as_deref().unwrap_or(&e.path);
        match self.entry_once(parser, &e, stored) {
            Err(Fail::Entry(err)) => {
                if let Some(dir) = self.root.take_dir_in_way() {
                    self.settle_under(&dir, &e)?;
                    self.root.allow_rmdir(dir);
                } else if err.errno() == Some(sys::consts::EMFILE) {
                    // Out of descriptors: the files in flight hold them until they are named.
                    // Once every one is, and no directory is held open, there is room.
                    self.settle_under(&RelPath(Vec::new()), &e)?;
                    self.root.invalidate(&[]);
                } else {
                    return Err(Fail::Entry(err));
                }
                self.entry_once(parser, &e, stored)
            }
            r => r,
        }
    }

    /// Names the member `e` (stored as `stored`) as GNU tar `-v` does, once: on standard output
    /// (standard error while contents go to standard output), in GNU's escape quoting; as
    /// stored, or with `--show-transformed-names` as it is extracted (`rel`, where known).
    fn list(&mut self, e: &Entry, stored: &[u8], rel: Option<&RelPath>) {
        if self.opts.listing == Listing::Off || self.listed == Some(e.offset) {
            return;
        }
        self.listed = Some(e.offset);
        let shown = match rel {
            Some(rel) if self.opts.show_transformed_names => {
                let mut name = self.gnu_name(e, rel).into_os_string().into_vec();
                if stored.ends_with(b"/") {
                    name.push(b'/');
                }
                name
            }
            _ => stored.to_vec(),
        };
        let mut line = if self.opts.listing.long() { self.long_listing(e) } else { Vec::new() };
        line.extend_from_slice(&cacheless::quote::escape(&shown));
        if self.opts.listing.long() {
            match (e.kind, &e.link) {
                (Kind::Symlink, Some(l)) => {
                    line.extend_from_slice(b" -> ");
                    line.extend_from_slice(&cacheless::quote::escape(l));
                }
                (Kind::HardLink, Some(l)) => {
                    line.extend_from_slice(b" link to ");
                    line.extend_from_slice(&cacheless::quote::escape(l));
                }
                _ => {}
            }
        }
        line.push(b'\n');
        self.say(&line);
    }

    /// A regular member's contents to standard output (holes of a sparse one as zeros); other
    /// members give nothing (GNU tar `-O`).
    fn write_out(&mut self, parser: &mut Parser<source::TarStream>, e: &Entry) -> Result<(), Fail> {
        use std::io::Write;
        if e.kind != Kind::File {
            return Ok(());
        }
        let out_err = |er: std::io::Error| Fail::Fatal(Error::io("write", "standard output", er));
        let mut out = std::io::stdout().lock();
        let mut buf = vec![0u8; 1 << 20];
        let segments = e.sparse.clone().unwrap_or_else(|| vec![(0, e.size)]);
        let zeros = vec![0u8; 1 << 16];
        let mut at = 0u64;
        for (off, len) in segments {
            // The hole before the segment.
            while at < off {
                let n = cacheless::conv::fit(off - at, zeros.len());
                out.write_all(&zeros[..n]).map_err(out_err)?;
                at += n as u64;
            }
            let mut left = len;
            while left > 0 {
                let n = cacheless::conv::fit(left, buf.len());
                parser.read_data_exact(&mut buf[..n]).map_err(fatal)?;
                out.write_all(&buf[..n]).map_err(out_err)?;
                left -= n as u64;
                at += n as u64;
            }
        }
        while at < e.size {
            let n = cacheless::conv::fit(e.size - at, zeros.len());
            out.write_all(&zeros[..n]).map_err(out_err)?;
            at += n as u64;
        }
        out.flush().map_err(out_err)?;
        self.report.files += 1;
        self.report.bytes += e.size;
        Ok(())
    }

    /// Waits until every file written at or below `dir` has its name (or failed).
    fn settle_under(&mut self, dir: &RelPath, e: &Entry) -> Result<(), Fail> {
        self.flush_batch();
        for rel in self.sh.in_flight.pending_under(dir) {
            self.settle(&rel, e)?;
        }
        Ok(())
    }

    fn entry_once(&mut self, parser: &mut Parser<source::TarStream>, e: &Entry, stored: &[u8]) -> Result<(), Fail> {
        let Some(named) = self.members.take_index(stored).filter(|_| !crate::select::excluded(&self.opts.exclude, stored)) else {
            self.report.skipped += 1;
            return Ok(());
        };
        // GNU tar: the -C in force where the name that took it was given.
        let dest = self.opts.chdirs.iter().rposition(|(from, _)| *from <= named).map_or(0, |j| j + 1);
        if dest != self.active {
            // Every destination but the active one is in `roots`.
            if let Some(next) = self.roots[dest].take() {
                let prev = std::mem::replace(&mut self.root, next);
                self.roots[self.active] = Some(prev);
                self.active = dest;
            }
        }
        if self.opts.to_stdout {
            self.list(e, stored, None);
            return self.write_out(parser, e);
        }
        let Some(rel) = self.rel(&e.path, "member")? else {
            self.report.skipped += 1;
            return Ok(());
        };
        self.list(e, stored, Some(&rel));
        if self.opts.old_files == OldFiles::Skip && self.root.exists(&rel) {
            // GNU tar --skip-old-files: what is there stays, silently.
            self.report.skipped += 1;
            return Ok(());
        }
        let meta = self.meta(e);
        if e.kind != Kind::HardLink && self.opts.warn_timestamp {
            if let Some(w) = time_warning(&e.path, e.mtime, std::time::SystemTime::now()) {
                self.warn(w);
            }
        }
        // A worker still writing a file under this name removes it if it fails: let it finish
        // before the name is used again.
        self.settle(&rel, e)?;
        // A folder on its way may be the name of an earlier file not yet named (over a symlink
        // that would be followed until then): the file takes it first, as GNU's has it already.
        for _ in 1..rel.0.len() {
            let Some(above) = self.sh.in_flight.pending_above(&rel) else { break };
            self.settle(&above, e)?;
        }
        if e.kind != Kind::Dir {
            self.root.placing();
        }
        let opts = self.opts;
        let backup = match &opts.backup {
            Some((kind, suffix)) => self.backup(e, &rel, *kind, suffix)?,
            None => None,
        };
        let path = backup.is_some().then(|| self.gnu_name(e, &rel));
        if self.opts.listing.long() {
            self.root.implicit_log.get_or_insert_with(Vec::new);
        }
        let made = self.place(parser, e, rel, meta);
        // GNU tar -vv: the folders made on the member's way, after its line.
        for dir in self.root.implicit_log.as_mut().map(std::mem::take).unwrap_or_default() {
            let modes = String::from_utf8_lossy(&self.long_listing_modes(0o777 & !self.umask, Kind::Dir)).into_owned();
            let name = String::from_utf8_lossy(&cacheless::quote::escape(dir.to_path().as_os_str().as_bytes())).into_owned();
            self.say(format!("{modes} {:>w$} {name}\n", "Creating directory:", w = self.list_width + 1 + 16).as_bytes());
        }
        if let (Err(_), Some((pfd, name, to)), Some(path)) = (&made, backup, path) {
            // GNU tar: the backup takes its name back where the member failed.
            if DirFd::of(&pfd).rename(&to, DirFd::of(&pfd), &name).is_ok() && self.opts.listing != Listing::Off {
                self.say(
                    format!("Renaming {} back to {}\n", cacheless::quote::quote(backup_path(&path, &name, &to)), cacheless::quote::quote(&path)).as_bytes(),
                );
            }
        }
        made
    }

    /// GNU tar `--backup`: an entry (not a folder, as `stat` sees it) where `rel` goes is
    /// renamed to its backup name first. Returns its folder, name and backup name.
    fn backup(
        &mut self,
        e: &Entry,
        rel: &RelPath,
        kind: cacheless::backup::BackupKind,
        suffix: &str,
    ) -> Result<Option<(Arc<OwnedFd>, OsString, OsString)>, Fail> {
        let Some((parent, name)) = rel.split() else { return Ok(None) };
        let Ok(pfd) = self.root.existing_dir(parent) else { return Ok(None) };
        let name = OsStr::from_bytes(name).to_os_string();
        let io = |what: &'static str, er: std::io::Error| Fail::Entry(Error::io(what, rel.to_path(), er));
        match sys::statat(&pfd, &name, AtFlags::empty()) {
            Err(Errno::NOENT) => return Ok(None),
            Err(er) => return Err(io("cannot stat (for --backup)", er.into())),
            Ok(st) if sys::FileType::from_raw_mode(st.st_mode) == sys::FileType::Directory => return Ok(None),
            Ok(_) => {}
        }
        let to = cacheless::backup::backup_name_in(pfd.as_fd(), &name, kind, suffix).map_err(|er| io("cannot name a backup", er))?;
        DirFd::of(&pfd).rename(&name, DirFd::of(&pfd), &to).map_err(|er| {
            let why = std::io::Error::new(std::io::Error::from(er).kind(), format!("cannot rename to {}: {}", to.to_string_lossy(), std::io::Error::from(er)));
            io("backup", why)
        })?;
        if self.opts.listing != Listing::Off {
            let path = self.gnu_name(e, rel);
            self.say(format!("Renaming {} to {}\n", cacheless::quote::quote(&path), cacheless::quote::quote(backup_path(&path, &name, &to))).as_bytes());
        }
        Ok(Some((pfd, name, to)))
    }

    /// What GNU tar `-vv` prints before a member's name: type and mode (`-rwsr-x--T`), owner
    /// and group (numbers with `--numeric-owner` or where the archive has no names), size (or
    /// `major,minor`) right-aligned in a width that grows with the widest seen, as GNU's, and
    /// the modification time in local time (the seconds where it has no date).
    fn long_listing(&mut self, e: &Entry) -> Vec<u8> {
        let modes = self.long_listing_modes(e.mode, e.kind);
        let who = |name: &[u8], id: u64| if name.is_empty() || self.opts.numeric_owner { id.to_string() } else { String::from_utf8_lossy(name).into_owned() };
        let (user, group) = (who(&e.uname, e.uid), who(&e.gname, e.gid));
        let size = match e.kind {
            Kind::CharDev | Kind::BlockDev => format!("{},{}", e.dev.0, e.dev.1),
            _ => e.size.to_string(),
        };
        let pad = user.len() + 1 + group.len() + 1 + size.len();
        self.list_width = self.list_width.max(pad);
        let time = chrono::DateTime::from_timestamp(e.mtime.0, 0)
            .map(|t| t.with_timezone(&chrono::Local).format("%Y-%m-%d %H:%M").to_string())
            .unwrap_or_else(|| e.mtime.0.to_string());
        let mut line = modes.to_vec();
        line.extend_from_slice(format!(" {user}/{group} {size:>w$} {time:<16} ", w = self.list_width - pad + size.len()).as_bytes());
        line
    }

    /// `-vv`'s type and mode letters (`drwxr-sr-t`).
    fn long_listing_modes(&self, m: u32, kind: Kind) -> [u8; 10] {
        let bit = |mask: u32, c: u8| if m & mask != 0 { c } else { b'-' };
        let exec = |x: u32, special: u32, set: u8, unset: u8| match (m & special != 0, m & x != 0) {
            (true, true) => set,
            (true, false) => unset,
            (false, true) => b'x',
            (false, false) => b'-',
        };
        let kind = match kind {
            Kind::File => b'-',
            Kind::HardLink => b'h',
            Kind::Symlink => b'l',
            Kind::CharDev => b'c',
            Kind::BlockDev => b'b',
            Kind::Dir => b'd',
            Kind::Fifo => b'p',
        };
        [
            kind,
            bit(0o400, b'r'),
            bit(0o200, b'w'),
            exec(0o100, 0o4000, b's', b'S'),
            bit(0o040, b'r'),
            bit(0o020, b'w'),
            exec(0o010, 0o2000, b's', b'S'),
            bit(0o004, b'r'),
            bit(0o002, b'w'),
            exec(0o001, 0o1000, b't', b'T'),
        ]
    }

    /// The member's name as GNU tar's messages give it: as stored, less a leading '/' and a
    /// trailing one, where no option changed it; else the path it is extracted to.
    fn gnu_name(&self, e: &Entry, rel: &RelPath) -> PathBuf {
        if self.opts.strip_components > 0 || self.top.is_some() {
            return rel.to_path();
        }
        let mut name = &e.path[..];
        while let [b'/', rest @ ..] = name {
            name = rest;
        }
        while let [rest @ .., b'/'] = name {
            name = rest;
        }
        PathBuf::from(OsStr::from_bytes(name))
    }

    /// A line on the listing's stream (standard output; standard error under `-O`). A closed or
    /// full output is not the extraction's failure (GNU tar goes on too).
    fn say(&self, line: &[u8]) {
        use std::io::Write;
        let _ = if self.opts.to_stdout { std::io::stderr().lock().write_all(line) } else { std::io::stdout().lock().write_all(line) };
    }

    /// Makes the member at `rel`, by its kind.
    fn place(&mut self, parser: &mut Parser<source::TarStream>, e: &Entry, rel: RelPath, meta: Meta) -> Result<(), Fail> {
        match e.kind {
            Kind::Dir => {
                // GNU tar --keep-directory-symlink: a symlink to a folder that was there stays,
                // as it is, and the members below go through it.
                if self.opts.keep_directory_symlink && self.root.is_directory_link(&rel) {
                    self.report.dirs += 1;
                    return Ok(());
                }
                match self.root.mkdir(&rel, self.opts.old_files.keeps())? {
                    Dir::Made => self.dirs.push((self.active, rel, meta)),
                    // GNU tar --no-overwrite-dir: an existing folder keeps its mode, not its time.
                    Dir::Existing if self.opts.old_files == OldFiles::NoOverwriteDir => {
                        self.dirs.push((self.active, rel, Meta { time_only: true, extra: None, ..meta }));
                    }
                    Dir::Existing => self.dirs.push((self.active, rel, meta)),
                    Dir::Kept => {}
                }
                self.report.dirs += 1;
            }
            Kind::File => {
                if self.opts.old_files == OldFiles::Overwrite && self.overwrite(parser, e, &rel, &meta)? {
                    self.report.files += 1;
                    self.report.bytes += e.size;
                    return Ok(());
                }
                match e.sparse.as_deref() {
                    Some(map) => self.sparse_file(parser, e, map, rel, meta)?,
                    None => self.file(parser, e, rel, meta)?,
                }
                self.report.files += 1;
                self.report.bytes += e.size;
            }
            Kind::Symlink => {
                let target = e.link.clone().unwrap_or_default();
                let (pfd, ()) =
                    self.root.create_with(&rel, self.opts.old_files.keeps(), "symlinkat", |d, n| DirFd::of(d).symlink(OsStr::from_bytes(&target), n))?;
                self.root.note_placed(&pfd, last_name(&rel).as_bytes(), &target);
                let name = last_name(&rel);
                if let Some((uid, gid)) = meta.chown.then(|| super::jobs::ids(&meta)).flatten() {
                    let _ = DirFd::of(&pfd).set_owner(name, Some(uid), Some(gid));
                }
                if let Some(x) = &meta.extra {
                    // Extended attributes of a symlink's own (trusted.*, security.*); no ACL.
                    for w in super::jobs::apply_extra(sys::XattrAt::Name(pfd.as_fd(), name), x, &rel) {
                        self.warn(w);
                    }
                }
                let _ = DirFd::of(&pfd).set_times(name, &times(meta.mtime));
                self.report.symlinks += 1;
            }
            Kind::HardLink => {
                let target = e.link.clone().unwrap_or_default();
                let Some(trel) = self.rel(&target, "hard link target")? else {
                    return Err(Fail::Entry(Error::io(
                        "refused hard link",
                        rel.to_path(),
                        std::io::Error::new(std::io::ErrorKind::InvalidInput, "target stripped away"),
                    )));
                };
                let Some((tparent, tname)) = trel.split() else {
                    return Err(Fail::Entry(Error::io(
                        "refused hard link to the destination itself",
                        rel.to_path(),
                        std::io::Error::from_raw_os_error(sys::consts::EPERM),
                    )));
                };
                if trel == rel {
                    // GNU tar: a link to itself is a no-op.
                    return Ok(());
                }
                // Linked only once its target is complete: a link to a file that then failed
                // would keep its partial data under the link's name.
                if self.settle(&trel, e)? == Settled::Failed {
                    return Err(Fail::Entry(Error::io(
                        "not linking to a file that failed",
                        rel.to_path(),
                        std::io::Error::new(std::io::ErrorKind::NotFound, format!("hard link target {} was not extracted", trel.to_path().display())),
                    )));
                }
                let tfd = self.root.existing_dir(tparent)?;
                let tname = tname.to_vec();
                let (pfd, ()) = self
                    .root
                    .create_with(&rel, self.opts.old_files.keeps(), "linkat", |d, n| DirFd::of(d).link(DirFd::of(&tfd), OsStr::from_bytes(&tname), n))?;
                // A link to a file named before the archive's checksums reached it goes with
                // it, should they fail.
                self.sh.gate.note_link(&pfd, last_name(&rel), &rel.to_path());
                self.report.hardlinks += 1;
            }
            Kind::Fifo | Kind::CharDev | Kind::BlockDev => {
                let dev = e.kind != Kind::Fifo;
                if !self.opts.special_files {
                    self.report.skipped += 1;
                    self.warn(format!("{}: skipping {} (special files not enabled)", e.display(), if dev { "device node" } else { "fifo" }));
                    return Ok(());
                }
                let ft = match e.kind {
                    Kind::Fifo => sys::FileType::Fifo,
                    Kind::CharDev => sys::FileType::CharacterDevice,
                    _ => sys::FileType::BlockDevice,
                };
                let devn = sys::makedev(e.dev.0, e.dev.1);
                let (pfd, ()) = self.root.create_with(&rel, self.opts.old_files.keeps(), "mknodat", |d, n| DirFd::of(d).mknod(n, ft, meta.mode, devn))?;
                // Its owner, then its mode exactly (mknod applied the umask; a chown clears
                // set-ID bits), then its time.
                let name = last_name(&rel);
                let chowned = match (meta.chown, super::jobs::ids(&meta)) {
                    (false, _) => Ok(()),
                    (true, Some((u, g))) => DirFd::of(&pfd).set_owner(name, Some(u), Some(g)),
                    (true, None) => Err(Errno::OVERFLOW),
                };
                let (mode, owner) = owned(chowned, &meta, &rel);
                if let Some(why) = owner {
                    self.sh.fail(why);
                }
                if let Err(er) = DirFd::of(&pfd).set_mode(name, mode) {
                    self.sh.fail(Why::os(&rel, "chmod", er));
                }
                if let Some(x) = &meta.extra {
                    for w in super::jobs::apply_extra(sys::XattrAt::Name(pfd.as_fd(), name), x, &rel) {
                        self.warn(w);
                    }
                }
                let _ = DirFd::of(&pfd).set_times(name, &times(meta.mtime));
            }
        }
        Ok(())
    }

    /// Waits until no file named `rel` is being written or waits for its name, and says how
    /// the last one ended. A file of that name still in the batch is handed to the workers
    /// first, and one waiting for its name is named by a syncfs made now (else nothing might
    /// ever settle it).
    fn settle(&mut self, rel: &RelPath, e: &Entry) -> Result<Settled, Fail> {
        if self.sh.in_flight.pending(rel) {
            self.flush_batch();
        }
        let (creator, gate) = (&self.sh.creator, &self.sh.gate);
        // Named after the batch's syncfs; a file that is held until the archive's checksums
        // reach it is named now (this member needs its name: a hard link to it, or it replaces
        // it), and removed again if they never do.
        let in_flight = self.sh.in_flight.clone();
        let publish = || {
            creator.publish_now();
            if in_flight.pending(rel) {
                // What finished meanwhile joins the gate first, then all it holds is named.
                creator.publish_now();
                gate.release_held();
            }
        };
        match self.sh.in_flight.settle(rel, &self.sh.progress, publish) {
            Settled::Cancelled => Err(Fail::Fatal(Error::Interrupted { entry: e.display() })),
            s => Ok(s),
        }
    }

    /// Creates a file entry with an engine call, in archive order, replacing what is there as
    /// for other entries. The resolver speaks errnos (EEXIST makes it replace the entry); the
    /// engine's error, with its hint, is what gets reported.
    ///
    /// Files are written under a temporary name and renamed over `rel` once durable (see
    /// `cacheless::Durability::NamedAfterSync`), which replaces a file or symlink there
    /// at once: what is there is looked at first (unless only this extraction's own files can
    /// be there, see `Root::only_ours_at`), and a directory is removed (or the entry refused)
    /// here, in archive order, as is anything with old files kept.
    fn create_entry<T>(&mut self, rel: &RelPath, mut make: impl FnMut(&Arc<OwnedFd>, &OsStr) -> cacheless::Result<T>) -> Result<T, Fail> {
        let mut engine_err = None;
        let keep_old = self.opts.old_files.keeps();
        // In a directory this extraction made, only its own entries can be there, and a
        // directory among them it knows of: no need to look.
        let look = keep_old || !self.root.only_ours_at(rel);
        let r = self.root.create_with(rel, keep_old, "create", |d, n| {
            match look.then(|| DirFd::of(d).stat(n)) {
                Some(Ok(st)) if keep_old || sys::FileType::from_raw_mode(st.st_mode) == sys::FileType::Directory => return Err(Errno::EXIST),
                _ => {}
            }
            match make(d, n) {
                Ok(t) => Ok(t),
                Err(err) => {
                    let errno = err.errno().map(Errno::from_raw_os_error).unwrap_or(Errno::IO);
                    engine_err = Some(err);
                    Err(errno)
                }
            }
        });
        match r {
            Ok((_, t)) => Ok(t),
            Err(err) => Err(match engine_err {
                Some(ee) if ee.errno() != Some(sys::consts::EEXIST) => Fail::Entry(Error::Engine(ee)),
                _ => err.into(),
            }),
        }
    }

    fn file(&mut self, parser: &mut Parser<source::TarStream>, e: &Entry, rel: RelPath, meta: Meta) -> Result<(), Fail> {
        if rel.split().is_none() {
            return Err(Fail::Entry(Error::io("refused", "member", std::io::Error::from_raw_os_error(sys::consts::EISDIR))));
        }
        if e.size > BATCHED_MAX {
            // Its buffers are leased while the batch's lease is not held back by the parser.
            self.flush_batch();
        }
        if e.size >= self.opts.direct_min.max(1) {
            return self.stream_file(parser, e, rel, meta);
        }
        let display = rel.to_path();
        let creator = self.sh.creator.clone();
        if e.size <= BATCHED_MAX {
            return self.small_file(parser, e, rel, meta);
        }
        let mut file = self.create_entry(&rel, |d, n| creator.create(d.clone(), n, &display, e.size, attrs(&meta)))?;
        if e.size <= CHUNK as u64 {
            // Data for a file written with O_DIRECT is read into memory aligned as it needs.
            let align = file.plan().map_err(|e| Fail::Entry(Error::Engine(e)))?.data_align();
            let size = cacheless::conv::fit(e.size, CHUNK);
            let lease = self.shares.lease(e.size);
            let mut buf = AlignedBuf::new(size, align);
            // Dropping `file` on error removes it.
            parser.read_data_exact(&mut buf[..size]).map_err(fatal)?;
            self.sh.progress.add_bytes(e.size);
            let ticket = self.sh.in_flight.begin(&rel, self.until);
            self.pool.send(Job::File { rel, file: Box::new(file), meta, data: Data::Whole(buf, size, lease), ticket });
        } else {
            let (tx, rx) = sync_channel::<Msg>(4);
            let ticket = self.sh.in_flight.begin(&rel, self.until);
            self.pool.send(Job::File { rel, file: Box::new(file), meta, data: Data::Stream(rx), ticket });
            self.send_chunks(parser, e, tx, true)?;
        }
        Ok(())
    }

    /// A small file: its creation asked of the create queue (it goes on while the parser reads
    /// on), its data read whole, and the file added to the batch the workers get once its files
    /// are created.
    fn small_file(&mut self, parser: &mut Parser<source::TarStream>, e: &Entry, rel: RelPath, meta: Meta) -> Result<(), Fail> {
        let display = rel.to_path();
        let Some(mut creates) = self.creates.take() else {
            return Err(Fail::Fatal(Error::io("create", display, std::io::Error::other("no create queue"))));
        };
        let asked = self.create_entry(&rel, |d, n| creates.push(d.clone(), n, &display, e.size, attrs(&meta)));
        self.creates = Some(creates);
        let create = asked?;
        // Small files written back together need no alignment; others (a forced O_DIRECT) get
        // data aligned as their plan needs.
        let align = if self.sh.creator.writes_back_together(e.size) {
            64
        } else {
            let dir = self.root.existing_dir(rel.split().map_or(&[][..], |(p, _)| p)).map_err(Fail::Entry)?;
            self.sh.creator.plan(&dir, &display, e.size).map_err(|er| Fail::Entry(Error::Engine(er)))?.data_align()
        };
        let size = cacheless::conv::fit(e.size, CHUNK);
        self.batch_room(size);
        // Dropping `create` on error removes the file.
        let data = if align <= SLAB_ALIGN {
            let (slab, off) = self.slab_room(size);
            parser.read_data_exact(&mut slab[off..off + size]).map_err(fatal)?;
            Piece::InSlab(off, size)
        } else {
            let mut buf = AlignedBuf::new(size, align);
            parser.read_data_exact(&mut buf[..size]).map_err(fatal)?;
            Piece::Own(buf, size)
        };
        self.sh.progress.add_bytes(e.size);
        let ticket = self.sh.in_flight.begin(&rel, self.until);
        self.batch.push(Queued { rel, create, meta, data, ticket });
        Ok(())
    }

    /// The batch's slab and where in it `size` more bytes go (at a multiple of `SLAB_ALIGN`):
    /// a slab given back or a new one for a new batch, and a new batch where the slab is full.
    fn slab_room(&mut self, size: usize) -> (&mut AlignedBuf, usize) {
        let fits = |used: usize| used.next_multiple_of(SLAB_ALIGN) + size <= SLAB_BYTES;
        if self.slab.as_ref().is_some_and(|(_, used)| !fits(*used)) {
            // Not reached while batches hold at most BATCH_BYTES (see SLAB_BYTES).
            self.close_batch();
        }
        let (buf, used) = self.slab.get_or_insert_with(|| {
            let given_back = self.sh.slabs.lock().unwrap_or_else(|e| e.into_inner()).pop();
            (given_back.unwrap_or_else(|| AlignedBuf::new(SLAB_BYTES.max(size), SLAB_ALIGN)), 0)
        });
        let off = used.next_multiple_of(SLAB_ALIGN);
        *used = off + size;
        (buf, off)
    }

    /// Streams the entry's data to a worker in `CHUNK`s, in buffers the workers give back.
    /// `lease`: hold each chunk against the budget (not for the engine's `Writer`, see
    /// `stream_file`). Returning early drops `tx`, which makes the worker remove the partial file.
    fn send_chunks(&self, parser: &mut Parser<source::TarStream>, e: &Entry, tx: SyncSender<Msg>, lease: bool) -> Result<(), Fail> {
        let mut left = e.size;
        while left > 0 {
            if self.sh.progress.is_cancelled() {
                return Err(Fail::Fatal(Error::Interrupted { entry: e.display() }));
            }
            let n = cacheless::conv::fit(left, CHUNK);
            let lease = lease.then(|| self.shares.lease(CHUNK as u64));
            let pooled = self.sh.bufs.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let mut buf = pooled.unwrap_or_else(|| AlignedBuf::new(CHUNK, 4096));
            parser.read_data_exact(&mut buf[..n]).map_err(fatal)?;
            left -= n as u64;
            let _ = tx.send(Msg::Chunk(buf, n, lease));
        }
        let _ = tx.send(Msg::End);
        Ok(())
    }

    /// Large files go through the engine's `Writer`: its policy (O_DIRECT bulk and a tail after
    /// clearing O_DIRECT in auto mode), its queue of writes in flight, its removal of a file
    /// dropped unfinished. Created with `create_in` (O_CREAT|O_EXCL|O_NOFOLLOW under the final
    /// name, `Naming::Final`), so namespace order and replacement stay as for other entries.
    /// Chunk buffers handed to it are not leased (the channel bounds them to 5 x 4 MiB): the
    /// Writer leases its own buffers from the same budget, and a worker waiting for that lease
    /// must not wait on chunks that only it can release.
    fn stream_file(&mut self, parser: &mut Parser<source::TarStream>, e: &Entry, rel: RelPath, meta: Meta) -> Result<(), Fail> {
        let mut wo = self.shares.large_file(&self.opts.io);
        wo.size_hint = Some(e.size);
        // Under a temporary name, renamed once a syncfs made it durable (see `jobs`).
        wo.naming = cacheless::Naming::Temporary;
        wo.durability = cacheless::Durability::NamedAfterSync { write_back: None };
        wo.permissions = Some(meta.mode);
        wo.mtime = Some(system_time(meta.mtime));
        let display = self.root.path.join(rel.to_path());
        let w = self.create_entry(&rel, |d, n| cacheless::Writer::create_in_shared(d.clone(), n, &display, &wo))?;
        let (tx, rx) = sync_channel::<Msg>(4);
        let ticket = self.sh.in_flight.begin(&rel, self.until);
        self.pool.send(Job::Stream { rel, writer: Box::new(w), rx, meta, ticket });
        // Returning early drops `tx`: the worker drops the Writer, which removes the file.
        self.send_chunks(parser, e, tx, false)
    }

    /// A sparse entry, written here: each data segment at its offset through the engine, the
    /// holes left as holes, the length set at the end.
    fn sparse_file(&mut self, parser: &mut Parser<source::TarStream>, e: &Entry, map: &[(u64, u64)], rel: RelPath, meta: Meta) -> Result<(), Fail> {
        self.flush_batch();
        let data_len: u64 = map.iter().map(|&(_, len)| len).sum();
        let display = rel.to_path();
        let creator = self.sh.creator.clone();
        // Dropping `file` on error removes it.
        let file = self.create_entry(&rel, |d, n| creator.create(d.clone(), n, &display, data_len, attrs(&meta)))?;
        self.write_here(parser, e, map, &rel, &meta, file)
    }

    /// GNU tar `--overwrite`: a regular file already at `rel` (through a symlink only with
    /// `dereference`) is written in place, its inode kept, as GNU's `O_TRUNC` open writes it:
    /// its other names see the new data. False where there is none; the member is then made as
    /// without the option (a symlink, FIFO or other entry there is replaced).
    fn overwrite(&mut self, parser: &mut Parser<source::TarStream>, e: &Entry, rel: &RelPath, meta: &Meta) -> Result<bool, Fail> {
        let Some((parent, name)) = rel.split() else { return Ok(false) };
        let Ok(pfd) = self.root.existing_dir(parent) else { return Ok(false) };
        let mut flags = sys::OFlags::WRONLY | sys::OFlags::CLOEXEC | sys::OFlags::NOCTTY | sys::OFlags::NONBLOCK;
        if !self.opts.dereference {
            flags |= sys::OFlags::NOFOLLOW;
        }
        // Not there, a symlink not to be followed, or anything that cannot be opened so: made
        // anew.
        let Ok(fd) = sys::lookat(&pfd, OsStr::from_bytes(name), flags) else { return Ok(false) };
        let file = std::fs::File::from(fd);
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            return Ok(false);
        }
        self.flush_batch();
        let file = self.sh.creator.adopt_existing(file, pfd, OsStr::from_bytes(name), &rel.to_path(), e.size, attrs(meta), true);
        let whole = [(0, e.size)];
        self.write_here(parser, e, e.sparse.as_deref().unwrap_or(&whole), rel, meta, file)?;
        Ok(true)
    }

    /// Writes a file member's data (the segments of `map`, in order) into `file` on this
    /// thread, gives it its size, owner, mode and the rest, and finishes it.
    fn write_here(
        &mut self,
        parser: &mut Parser<source::TarStream>,
        e: &Entry,
        map: &[(u64, u64)],
        rel: &RelPath,
        meta: &Meta,
        mut file: NewFile,
    ) -> Result<(), Fail> {
        let mut buf = AlignedBuf::new(1 << 20, 4096);
        for &(off, len) in map {
            let mut done = 0u64;
            while done < len {
                let n = cacheless::conv::fit(len - done, buf.len());
                parser.read_data_exact(&mut buf[..n]).map_err(fatal)?;
                file.write_at(&buf[..n], off + done).map_err(|er| Fail::Entry(Error::Engine(er)))?;
                done += n as u64;
                self.sh.progress.add_bytes(n as u64);
            }
        }
        file.set_len(e.size).map_err(|er| Fail::Entry(Error::Engine(er)))?;
        let (mode, owner) = own(file.file(), meta, rel);
        if let Some(why) = owner {
            file.set_permissions(Some(mode));
            self.sh.fail(why);
        }
        if self.sh.extra(file.file().as_fd(), meta, mode, rel) {
            file.set_permissions(None);
        }
        // Named after a syncfs, like the workers' files: its ticket settles then.
        let ticket = self.sh.in_flight.begin(rel, self.until);
        let rep = file.finish_then(self.sh.on_published(rel, ticket)).map_err(|er| Fail::Entry(Error::Engine(er)))?;
        self.sh.file_done(rep.decision.mode);
        Ok(())
    }
}

/// The path of `path`'s backup, for messages: `path` and what the backup's name `to` adds to
/// the entry's name `name`.
fn backup_path(path: &std::path::Path, name: &OsStr, to: &OsStr) -> PathBuf {
    let mut p = path.as_os_str().to_os_string().into_vec();
    p.extend_from_slice(&to.as_bytes()[name.len()..]);
    PathBuf::from(OsString::from_vec(p))
}

/// The last component of a non-root entry (the root itself never reaches here: entries that
/// name it are refused or skipped first).
fn last_name(rel: &RelPath) -> &OsStr {
    OsStr::from_bytes(rel.split().map_or(&b"."[..], |(_, n)| n))
}

/// GNU tar's warning for a member's time stamp it will set: before 1970 ("implausibly old time
/// stamp"), or later than `now` ("time stamp ... is N s in the future"), in GNU's words (the
/// stamp in UTC as `YYYY-MM-DD HH:MM:SS[.fraction]`).
fn time_warning(name: &[u8], mtime: (i64, u32), now: std::time::SystemTime) -> Option<String> {
    let name = String::from_utf8_lossy(name);
    if mtime.0 < 0 {
        return Some(format!("{name}: implausibly old time stamp {}", utc_stamp(mtime)));
    }
    let now = now.duration_since(std::time::UNIX_EPOCH).ok()?;
    let (ns, now_s, now_ns) = (i128::from(mtime.1), i128::from(now.as_secs()), i128::from(now.subsec_nanos()));
    let diff = (i128::from(mtime.0) * 1_000_000_000 + ns) - (now_s * 1_000_000_000 + now_ns);
    if diff <= 0 {
        return None;
    }
    let frac = format!("{:09}", diff % 1_000_000_000);
    let frac = frac.trim_end_matches('0');
    let secs = diff / 1_000_000_000;
    let amount = if frac.is_empty() { secs.to_string() } else { format!("{secs}.{frac}") };
    Some(format!("{name}: time stamp {} is {amount} s in the future", utc_stamp(mtime)))
}

/// `YYYY-MM-DD HH:MM:SS`, with `.fraction` (trailing zeros cut) where there are nanoseconds.
fn utc_stamp((secs, ns): (i64, u32)) -> String {
    let mut s = cacheless::utc_time(secs);
    if ns > 0 {
        let f = format!("{ns:09}");
        s.push('.');
        s.push_str(f.trim_end_matches('0'));
    }
    s
}

#[cfg(test)]
mod time_tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn time_stamps_are_warned_of_in_gnus_words() {
        let now = UNIX_EPOCH + Duration::new(1_796_548_587, 500_000_000);
        assert_eq!(time_warning(b"old", (-1000, 0), now).unwrap(), "old: implausibly old time stamp 1969-12-31 23:43:20");
        assert_eq!(time_warning(b"f", (1_796_648_587, 0), now).unwrap(), "f: time stamp 2026-12-07 13:03:07 is 99999.5 s in the future");
        assert_eq!(time_warning(b"ok", (1_000_000_000, 0), now), None);
        assert_eq!(utc_stamp((951_782_400, 250_000_000)), "2000-02-29 00:00:00.25");
        assert_eq!(utc_stamp((0, 0)), "1970-01-01 00:00:00");
    }
}
