//! Operands that are URLs: downloads (every source an object or a prefix in one bucket or
//! origin, the destination local) and uploads (every source local, the destination an S3 key or
//! prefix), with GNU cp's options.
//!
//! First the options the operands cannot honour are refused, each by name, before any request
//! is sent. Then the operands are mapped to transfers as `aws s3 cp` and rclone map them (a
//! prefix's objects at their paths below it in the destination folder; a folder's files at
//! their paths below the prefix), and each transfer's destination is decided in the operands'
//! order, as GNU's walk decides them: skipped (`-n`, `-u`, a "no" to `-i`), backed up
//! (`--backup`), replaced. The transfers themselves run `--threads` (else `--concurrency`) at a
//! time, each with its own ranges or parts in flight, all within one memory budget.
//!
//! A prefix's keys that no local name can hold (a `.` or `..` part, an empty part, a control
//! character) are reported and skipped, the rest copied; folder markers (keys ending in `/`)
//! are skipped. Nothing is written outside the destination folder, nor through a symbolic link
//! found inside it.

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::Instant;

use cacheless::backup::backup_name_in;
use cacheless::quote::quote;
use cacheless::sys::{AtFlags, FMode, OFlags};
use cacheless::{sys, Carry, Error, ErrorKind, Progress, Reflink, Result, Sparse, WriteOptions};
use cacheless_remote::{download_into, landed_etag, upload_file, url_of, verify_download, Location, ObjectInfo, Remote, Scheme};

use crate::options::{CpOptions, CpReport, Deref, Existing, Link, Note, Question, Target, Transfer};

/// An option the transfer cannot honour, refused before anything moves: named, with why.
fn refused(option: &str, why: &str) -> Error {
    Error::message(ErrorKind::InvalidInput, option, format!("{option} cannot be honoured with a URL operand: {why}"))
}

/// The options a download (`upload` false) or an upload cannot honour: the first, refused.
fn refuse(o: &CpOptions, upload: bool) -> Result<()> {
    let what = if upload { "an object" } else { "a file downloaded from a URL" };
    match o.link {
        Link::Symbolic if upload => return Err(refused("--symbolic-link (-s)", "an object store holds no links")),
        Link::Symbolic => return Err(refused("--symbolic-link (-s)", "a symbolic link cannot point to a remote object; download it, then link to the file")),
        Link::Hard if upload => return Err(refused("--link (-l)", "an object store holds no links")),
        Link::Hard => return Err(refused("--link (-l)", "a hard link cannot be made to a remote object; download it, then link to the file")),
        Link::Copy => {}
    }
    if o.inplace {
        let why = if upload { "an upload replaces an object whole" } else { "a download is written under a temporary name and takes its name when complete" };
        return Err(refused("--inplace", why));
    }
    if o.copy.reflink == Reflink::Always {
        return Err(refused("--reflink=always", &format!("{what} cannot share a local file's blocks; use --reflink=auto or never")));
    }
    if o.copy.sparse == Sparse::Always {
        let why = if upload { "an object has no holes" } else { "a download's blocks are written as they come, none made a hole" };
        return Err(refused("--sparse=always", why));
    }
    if upload {
        if o.attributes_only {
            return Err(refused("--attributes-only", "an object has no attributes apart from its bytes"));
        }
        if o.backup.is_some() {
            return Err(refused("--backup", "an object cannot be backed up here (turn on the bucket's versioning to keep replaced objects)"));
        }
        if o.copy_contents {
            return Err(refused("--copy-contents", "special files are not uploaded"));
        }
        let p = o.preserve;
        let kept = [(p.mode, "mode"), (p.ownership, "ownership"), (p.timestamps, "timestamps"), (p.links, "links"), (p.xattr, "xattr")];
        if let Some((_, name)) = kept.iter().find(|(on, _)| *on) {
            return Err(refused(
                &format!("--preserve={name} (or -p, -a)"),
                "an object keeps its bytes only: S3 sets its own time and holds no mode, owner, links or attributes",
            ));
        }
    }
    Ok(())
}

/// One file's transfer, as planned.
enum Job {
    /// An object to a local file: where (an open folder and the name in it), and what the
    /// destination decision made.
    Down { info: ObjectInfo, dir: Arc<OwnedFd>, name: OsString, to: PathBuf, backup: Option<OsString>, carry: Option<Arc<Carry>> },
    /// A local file to an object.
    Up { from: PathBuf, to: Location },
}

/// What a job came to.
enum Done {
    Moved(Transfer),
    Failed(Error),
}

/// The clients, one per bucket or origin, made when first needed.
struct Clients<'a> {
    o: &'a CpOptions,
    made: Vec<Arc<Remote>>,
}

impl Clients<'_> {
    fn of(&mut self, loc: &Location) -> Result<Arc<Remote>> {
        if let Some(r) = self.made.iter().find(|r| r.serves(loc)) {
            return Ok(r.clone());
        }
        // One rate for the job: --bwlimit limits transfers as it limits local copies.
        let opts = cacheless_remote::RemoteOptions { rate: self.o.copy.rate.clone().or_else(|| self.o.remote.rate.clone()), ..self.o.remote.clone() };
        let r = Arc::new(Remote::connect(loc, &opts)?);
        self.made.push(r.clone());
        Ok(r)
    }
}

/// A skipped transfer.
fn skipped(source: String, destination: String, download: bool, etag: Option<String>) -> Transfer {
    Transfer {
        source,
        destination,
        download,
        bytes: 0,
        skipped: true,
        requests: 0,
        ranged: false,
        local: None,
        etag,
        verified: None,
        backup: None,
        seconds: 0.0,
    }
}

/// The copy with URLs: see the module documentation.
pub(crate) fn copy(srcs: &[PathBuf], dst: &Path, o: &CpOptions, progress: &Arc<Progress>) -> Result<CpReport> {
    let t0 = Instant::now();
    if srcs.is_empty() {
        return Err(Error::message(ErrorKind::InvalidInput, dst, "missing file operand"));
    }
    let upload = url_of(dst).is_some();
    if upload {
        if let Some(s) = srcs.iter().find(|s| url_of(s).is_some()) {
            let m = format!("{} to {}: copying between URLs is not supported; download, then upload", text(s), text(dst));
            return Err(Error::message(ErrorKind::InvalidInput, dst, m));
        }
    } else if let Some(s) = srcs.iter().find(|s| url_of(s).is_none()) {
        let m = format!("{}: a local source with a URL among the sources: copy them in two commands", text(s));
        return Err(Error::message(ErrorKind::InvalidInput, s, m));
    }
    refuse(o, upload)?;
    let mut run = Run {
        o,
        progress,
        clients: Clients { o, made: Vec::new() },
        report: CpReport::default(),
        first: Mutex::new(None),
        errors: AtomicU64::new(0),
        seq: AtomicUsize::new(0),
        skipped: Mutex::new(Vec::new()),
    };
    let jobs = if upload { run.plan_uploads(srcs, dst)? } else { run.plan_downloads(srcs, dst)? };
    run.execute(jobs);
    let mut report = run.report;
    report.errors = run.errors.into_inner();
    report.first_error = run.first.into_inner().unwrap_or_else(PoisonError::into_inner);
    report.copied = report.transfers.iter().filter(|t| !t.skipped).count() as u64;
    report.bytes = progress.bytes();
    report.data_bytes = report.transfers.iter().map(|t| t.bytes).sum();
    report.bwlimit = o.copy.rate.as_ref().or(o.remote.rate.as_ref()).map(|r| r.rate());
    report.interrupted = progress.is_cancelled();
    report.elapsed_s = t0.elapsed().as_secs_f64();
    Ok(report)
}

fn text(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// A job's state: the options, its counters and report, its clients.
struct Run<'a> {
    o: &'a CpOptions,
    progress: &'a Arc<Progress>,
    clients: Clients<'a>,
    report: CpReport,
    first: Mutex<Option<Error>>,
    errors: AtomicU64,
    /// The operands' order: each transfer planned or skipped takes the next number.
    seq: AtomicUsize,
    /// The transfers skipped while planning, with their numbers.
    skipped: Mutex<Vec<(usize, Transfer)>>,
}

/// A download's destination folder, opened once: the folder, and those made or opened below it
/// (by their path relative to it), none reached through a symbolic link.
struct Under {
    root: Arc<OwnedFd>,
    path: PathBuf,
    opened: HashMap<Vec<u8>, Arc<OwnedFd>>,
}

impl Under {
    /// The folder `rel` (`/`-separated parts, each a plain name) below the root, made where
    /// missing; a part that is a symbolic link or no folder is an error.
    fn folder(&mut self, rel: &[u8]) -> Result<Arc<OwnedFd>> {
        if rel.is_empty() {
            return Ok(self.root.clone());
        }
        if let Some(fd) = self.opened.get(rel) {
            return Ok(fd.clone());
        }
        let (up, name) = match rel.iter().rposition(|&b| b == b'/') {
            Some(i) => (&rel[..i], &rel[i + 1..]),
            None => (&b""[..], rel),
        };
        let parent = self.folder(up)?;
        let name = OsStr::from_bytes(name);
        let path = self.path.join(OsStr::from_bytes(rel));
        match sys::DirFd::of(&parent).mkdir(name, 0o777) {
            Ok(()) | Err(sys::Errno::EXIST) => {}
            Err(e) => return Err(Error::io("cannot create directory {}", &path, e.into())),
        }
        let fd = sys::DirFd::of(&parent).open_dir(name).map_err(|e| {
            if matches!(e, sys::Errno::LOOP | sys::Errno::NOTDIR) {
                Error::message(
                    ErrorKind::AlreadyExists,
                    &path,
                    format!("{} is not a directory (a symbolic link or a file): nothing is written through it", quote(&path)),
                )
            } else {
                Error::io("cannot open directory {}", &path, e.into())
            }
        })?;
        let fd = Arc::new(fd);
        self.opened.insert(rel.to_vec(), fd.clone());
        Ok(fd)
    }
}

/// The local name a key below a prefix takes (`/`-separated), or why it can have none: a part
/// that is empty, `.` or `..`, or holds a control character.
fn local_name(rel: &str) -> std::result::Result<&str, &'static str> {
    if rel.is_empty() {
        return Err("an empty name");
    }
    for part in rel.split('/') {
        if part.is_empty() {
            return Err("an empty part (//, or a leading /)");
        }
        if part == "." || part == ".." {
            return Err("a . or .. part");
        }
        if part.chars().any(char::is_control) {
            return Err("a control character");
        }
    }
    Ok(rel)
}

impl Run<'_> {
    /// Counts and tells a failure (the job goes on).
    fn fail(&self, e: Error) {
        self.progress.error();
        self.errors.fetch_add(1, Ordering::Relaxed);
        if let Some(f) = &self.o.on_error {
            f(&e);
        }
        self.first.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(e);
    }

    fn note(&self, n: &Note<'_>) {
        if let Some(f) = &self.o.on_note {
            f(n);
        }
    }

    /// Downloads: the objects (and prefixes' objects) each to its local file, decided in order.
    fn plan_downloads(&mut self, srcs: &[PathBuf], dst: &Path) -> Result<Vec<(usize, Job)>> {
        let o = self.o;
        let mut locs = Vec::with_capacity(srcs.len());
        for s in srcs {
            let loc = Location::parse(&text(s))?;
            if let Some(first) = locs.first() {
                if !loc.same_store(first) {
                    return Err(Error::message(
                        ErrorKind::InvalidInput,
                        s,
                        format!("{loc}: the sources are in more than one bucket or server: copy them in one command each"),
                    ));
                }
            }
            locs.push(loc);
        }
        // Where they go (GNU's target rules): into a folder, or onto the one destination named.
        let is_dir = std::fs::metadata(dst).is_ok_and(|m| m.is_dir());
        let into = match o.target {
            Target::File => {
                if srcs.len() > 1 {
                    return Err(Error::message(ErrorKind::InvalidInput, dst, format!("extra operand {}", quote(&srcs[1]))));
                }
                false
            }
            Target::Directory => {
                if !is_dir {
                    return Err(Error::message(ErrorKind::InvalidInput, dst, format!("target directory {}: No such file or directory", quote(dst))));
                }
                true
            }
            Target::Auto => is_dir || text(dst).ends_with('/') || locs.iter().any(Location::is_prefix),
        };
        if srcs.len() > 1 && !into {
            return Err(Error::message(ErrorKind::InvalidInput, dst, format!("target {} is not a directory", quote(dst))));
        }
        if o.parents && !is_dir {
            return Err(Error::message(ErrorKind::InvalidInput, dst, "with --parents, the destination must be a directory"));
        }
        // The destination folder, made where missing (as `aws s3 cp` makes it), opened once.
        let mut under = if into {
            sys::mkdir_all(dst).map_err(|e| Error::io("cannot create directory {}", dst, e))?;
            let root =
                sys::look(dst, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC).map_err(|e| Error::io("cannot open directory {}", dst, e.into()))?;
            Some(Under { root: Arc::new(root), path: dst.to_path_buf(), opened: HashMap::new() })
        } else {
            None
        };
        let mut jobs = Vec::new();
        let mut planned: HashSet<PathBuf> = HashSet::new();
        for (s, loc) in srcs.iter().zip(&locs) {
            if self.progress.is_cancelled() {
                break;
            }
            let remote = self.clients.of(loc)?;
            if loc.is_prefix() {
                if !o.recursive {
                    self.fail(Error::message(ErrorKind::InvalidInput, s, format!("-r not specified; omitting directory {}", quote(s))));
                    continue;
                }
                let objects = match remote.list(loc) {
                    Ok(v) => v,
                    Err(e) => {
                        self.fail(e);
                        continue;
                    }
                };
                if objects.is_empty() {
                    self.fail(Error::new(ErrorKind::NotFound, "list", loc.to_string(), "no object under this prefix"));
                    continue;
                }
                let base = prefix_of(loc);
                // With --parents, below the prefix's own path.
                let lead = if o.parents { base.clone() } else { String::new() };
                for info in objects {
                    let Some(rel) = info.location.key().strip_prefix(&base) else { continue };
                    // Folder markers: a key ending in / holds no file.
                    if rel.is_empty() || rel.ends_with('/') {
                        continue;
                    }
                    let rel = format!("{lead}{rel}");
                    match local_name(&rel) {
                        Ok(r) => {
                            let r = r.to_string();
                            if let Some(u) = under.as_mut() {
                                self.plan_download(&mut jobs, &mut planned, info, Dest::Under(u, &r));
                            }
                        }
                        Err(why) => {
                            let e = Error::message(
                                ErrorKind::InvalidInput,
                                info.location.to_string(),
                                format!("{}: the key has {why}, which no local name can hold: skipped", info.location),
                            );
                            self.fail(e);
                        }
                    }
                }
            } else {
                let info = match remote.head(loc) {
                    Ok(i) => i,
                    Err(e) => {
                        self.fail(e);
                        continue;
                    }
                };
                match under.as_mut() {
                    Some(u) => {
                        let rel = if o.parents { loc.key().to_string() } else { loc.file_name().unwrap_or_else(|| "index.html".into()) };
                        match local_name(&rel) {
                            Ok(r) => {
                                let r = r.to_string();
                                self.plan_download(&mut jobs, &mut planned, info, Dest::Under(u, &r));
                            }
                            Err(why) => {
                                self.fail(Error::message(ErrorKind::InvalidInput, s, format!("{loc}: its name has {why}, which no local name can hold")));
                            }
                        }
                    }
                    None => self.plan_download(&mut jobs, &mut planned, info, Dest::Path(dst)),
                }
            }
        }
        Ok(jobs)
    }

    /// Decides one download's destination as GNU decides a file's (in the operands' order):
    /// skipped, asked, backed up or replaced; a planned job, or a failure told.
    fn plan_download(&self, jobs: &mut Vec<(usize, Job)>, planned: &mut HashSet<PathBuf>, info: ObjectInfo, dest: Dest<'_>) {
        let src = PathBuf::from(info.location.to_string());
        let (dir, name, to) = match dest {
            Dest::Under(u, rel) => {
                let to = u.path.join(rel);
                let (up, base) = match rel.rfind('/') {
                    Some(i) => (&rel[..i], &rel[i + 1..]),
                    None => ("", rel),
                };
                match u.folder(up.as_bytes()) {
                    Ok(d) => (d, OsString::from(base), to),
                    Err(e) => return self.fail(e),
                }
            }
            Dest::Path(p) => match self.top_destination(p) {
                Ok((d, n, to)) => (d, n, to),
                Err(e) => return self.fail(e),
            },
        };
        let o = self.o;
        if !planned.insert(to.clone()) {
            return self.fail(Error::message(ErrorKind::AlreadyExists, &to, format!("will not overwrite just-created {} with {}", quote(&to), quote(&src))));
        }
        let existing = sys::DirFd::of(&dir).stat(name.as_os_str());
        let mut backup = None;
        let mut carry = None;
        match existing {
            Err(sys::Errno::NOENT) => {}
            Err(e) => return self.fail(Error::io("cannot stat {}", &to, e.into())),
            Ok(st) => {
                if st.st_mode & sys::consts::S_IFMT == sys::consts::S_IFDIR {
                    return self.fail(Error::message(ErrorKind::AlreadyExists, &to, format!("cannot overwrite directory {} with non-directory", quote(&to))));
                }
                if o.update && not_older(&to, &st, &info) {
                    return self.skip(skipped(info.location.to_string(), text(&to), true, info.etag.clone()));
                }
                match &o.existing {
                    Existing::Keep => return self.skip(skipped(info.location.to_string(), text(&to), true, info.etag.clone())),
                    Existing::Ask(ask) => {
                        let unwritable = st.st_mode & sys::consts::S_IFMT != sys::consts::S_IFLNK
                            && !sys::is_root()
                            && sys::accessat(dir.as_fd(), name.as_os_str(), sys::Access::WRITE_OK, AtFlags::EACCESS).is_err();
                        let q = Question { dst: &to, unwritable_mode: unwritable.then_some(st.st_mode & 0o7777), replace: o.force || o.remove_destination };
                        if !ask(&q) {
                            return self.skip(skipped(info.location.to_string(), text(&to), true, info.etag.clone()));
                        }
                    }
                    Existing::Replace => {}
                }
                if let Some((kind, suffix)) = &o.backup {
                    let made = backup_name_in(dir.as_fd(), &name, *kind, suffix)
                        .and_then(|b| sys::renameat(dir.as_fd(), name.as_os_str(), dir.as_fd(), b.as_os_str()).map(|()| b).map_err(std::io::Error::from));
                    match made {
                        Ok(b) => backup = Some(b),
                        Err(e) => return self.fail(Error::io("cannot backup {}", &to, e)),
                    }
                } else if o.remove_destination {
                    // Replaced by the rename that names the download: the same end, and a failure
                    // leaves what was there.
                    self.note(&Note::Removed(&to));
                } else if st.st_mode & sys::consts::S_IFMT == sys::consts::S_IFREG {
                    // GNU writes the file in place, which keeps its inode: the download replaces
                    // it whole with what can be seen of it kept (mode, owner, attributes), or,
                    // where a new file could not keep that (other names, another owner), is
                    // refused for this file.
                    match replaced(&dir, &name, &to, &st) {
                        Ok(c) => carry = Some(Arc::new(c)),
                        Err(e) => return self.fail(e),
                    }
                }
            }
        }
        let backup_path = backup.as_ref().map(|b| to.with_file_name(b));
        self.note(&Note::Copy { src: &src, dst: &to, backup: backup_path.as_deref() });
        self.progress.add_total_bytes(if o.attributes_only { 0 } else { info.size });
        self.progress.add_total_files(1);
        jobs.push((self.seq.fetch_add(1, Ordering::Relaxed), Job::Down { info, dir, name, to, backup, carry }));
    }

    /// The folder and name a download to the path `p` (no folder) lands at: a symbolic link
    /// named as the destination is written through, as GNU cp writes through it (a dangling
    /// one refused, as GNU refuses it, unless `open_dangling`).
    fn top_destination(&self, p: &Path) -> Result<(Arc<OwnedFd>, OsString, PathBuf)> {
        let mut to = p.to_path_buf();
        let follow = !self.o.remove_destination && self.o.backup.is_none();
        if follow && std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink()) {
            match std::fs::canonicalize(p) {
                Ok(t) => to = t,
                Err(_) if self.o.open_dangling => {
                    let target = std::fs::read_link(p).map_err(|e| Error::io("cannot read symbolic link {}", p, e))?;
                    to = p.parent().unwrap_or(Path::new(".")).join(target);
                }
                Err(_) => return Err(Error::message(ErrorKind::NotFound, p, format!("not writing through dangling symlink {}", quote(p)))),
            }
        }
        if let Some(parent) = to.parent().filter(|q| !q.as_os_str().is_empty()) {
            sys::mkdir_all(parent).map_err(|e| Error::io("cannot create directory {}", parent, e))?;
        }
        let (dir, name) = cacheless::open_parent(&to)?;
        Ok((dir, name, to))
    }

    /// A transfer skipped (`-n`, `-u`, a "no" to `-i`): told, and kept in the operands' order.
    fn skip(&self, t: Transfer) {
        if let Some(f) = &self.o.on_transfer {
            f(&t);
        }
        let i = self.seq.fetch_add(1, Ordering::Relaxed);
        self.skipped.lock().unwrap_or_else(PoisonError::into_inner).push((i, t));
    }

    /// Uploads: each local file (a folder's, with -r) to its key, decided in order.
    fn plan_uploads(&mut self, srcs: &[PathBuf], dst: &Path) -> Result<Vec<(usize, Job)>> {
        let o = self.o;
        let mut dest = Location::parse(&text(dst))?;
        if dest.scheme() == Scheme::Http {
            return Err(Error::new(ErrorKind::Unsupported, "upload", dest.to_string(), "uploads go to s3:// URLs; a web server takes none"));
        }
        match o.target {
            Target::File if dest.is_prefix() => {
                return Err(Error::message(
                    ErrorKind::InvalidInput,
                    dst,
                    format!("{dest}: with -T the destination is an object's key, not a prefix (a URL ending in /)"),
                ));
            }
            Target::File if srcs.len() > 1 => return Err(Error::message(ErrorKind::InvalidInput, dst, format!("extra operand {}", quote(&srcs[1])))),
            Target::Directory if !dest.is_prefix() => dest = dest.with_key(format!("{}/", dest.key())),
            _ => {}
        }
        if srcs.len() > 1 && !dest.is_prefix() {
            return Err(Error::message(ErrorKind::InvalidInput, dst, format!("{dest}: several sources need a prefix (a URL ending in /)")));
        }
        let remote = self.clients.of(&dest)?;
        let base = prefix_of(&dest);
        let mut jobs = Vec::new();
        let deref = o.deref();
        for s in srcs {
            let follow = matches!(deref, Deref::Always | Deref::CommandLine | Deref::Default);
            let meta = if follow { std::fs::metadata(s) } else { std::fs::symlink_metadata(s) };
            let meta = match meta {
                Ok(m) => m,
                Err(e) => {
                    self.fail(Error::io("cannot stat {}", s, e));
                    continue;
                }
            };
            // With --parents, the source's whole name (as given) below the prefix.
            let named = if o.parents { format!("{}/", text(s).trim_start_matches("./").trim_start_matches('/').trim_end_matches('/')) } else { String::new() };
            if meta.is_dir() {
                if !o.recursive {
                    self.fail(Error::message(ErrorKind::InvalidInput, s, format!("-r not specified; omitting directory {}", quote(s))));
                    continue;
                }
                for item in walk(s, deref == Deref::Always, o.one_file_system, meta.dev()) {
                    match item {
                        Ok((file, rel)) => {
                            let key = format!("{base}{named}{rel}");
                            self.plan_upload(&mut jobs, &remote, file, dest.with_key(key));
                        }
                        Err(e) => self.fail(e),
                    }
                }
            } else if meta.is_file() {
                let key = if dest.is_prefix() {
                    if o.parents {
                        format!("{base}{}", named.trim_end_matches('/'))
                    } else {
                        format!("{base}{}", s.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default())
                    }
                } else {
                    dest.key().to_string()
                };
                self.plan_upload(&mut jobs, &remote, s.clone(), dest.with_key(key));
            } else {
                self.fail(not_uploaded(s, &meta));
            }
        }
        Ok(jobs)
    }

    /// Decides one upload's destination: skipped (`-n`, `-u`, a "no" to `-i`) or sent.
    fn plan_upload(&self, jobs: &mut Vec<(usize, Job)>, remote: &Remote, from: PathBuf, to: Location) {
        let o = self.o;
        if let Err(e) = cacheless_remote::check_writable(&to) {
            return self.fail(e);
        }
        let asks = matches!(o.existing, Existing::Ask(_));
        if matches!(o.existing, Existing::Keep) || o.update || asks {
            match remote.head(&to) {
                Ok(existing) => {
                    let m = match std::fs::metadata(&from) {
                        Ok(m) => m,
                        Err(e) => return self.fail(Error::io("cannot stat {}", &from, e)),
                    };
                    // GNU's -u: an object not older than the file is left.
                    let same = m.modified().is_ok_and(|t| existing.last_modified >= t);
                    let keep = match &o.existing {
                        Existing::Keep => true,
                        _ if o.update && same => true,
                        Existing::Ask(ask) => {
                            let shown = PathBuf::from(to.to_string());
                            !ask(&Question { dst: &shown, unwritable_mode: None, replace: o.force || o.remove_destination })
                        }
                        Existing::Replace => false,
                    };
                    if keep {
                        return self.skip(skipped(text(&from), to.to_string(), false, existing.etag));
                    }
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return self.fail(e),
            }
        }
        self.note(&Note::Copy { src: &from, dst: Path::new(&to.to_string()), backup: None });
        if let Ok(m) = std::fs::metadata(&from) {
            self.progress.add_total_bytes(m.len());
        }
        self.progress.add_total_files(1);
        jobs.push((self.seq.fetch_add(1, Ordering::Relaxed), Job::Up { from, to }));
    }

    /// Runs the planned transfers, `--threads` (else `--concurrency`) at a time.
    fn execute(&mut self, jobs: Vec<(usize, Job)>) {
        let mut done: Vec<(usize, Transfer)> = std::mem::take(&mut *self.skipped.lock().unwrap_or_else(PoisonError::into_inner));
        self.report.skipped = done.len() as u64;
        if !jobs.is_empty() {
            let workers = self.o.threads.unwrap_or(self.o.remote.concurrency).clamp(1, jobs.len());
            let next = AtomicUsize::new(0);
            let (tx, rx) = mpsc::channel::<(usize, Done)>();
            let clients: Vec<Arc<Remote>> = self.clients.made.clone();
            let this = &*self;
            std::thread::scope(|s| {
                for _ in 0..workers {
                    let tx = tx.clone();
                    let (next, jobs, clients) = (&next, &jobs, &clients);
                    s.spawn(move || {
                        while let Some((i, job)) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                            if this.progress.is_cancelled() || tx.send((*i, this.run_one(job, clients))).is_err() {
                                break;
                            }
                        }
                    });
                }
                drop(tx);
                for (i, r) in rx {
                    match r {
                        Done::Moved(t) => {
                            if let Some(f) = &this.o.on_transfer {
                                f(&t);
                            }
                            done.push((i, t));
                        }
                        Done::Failed(e) if e.kind() == ErrorKind::Interrupted => {}
                        Done::Failed(e) => this.fail(e),
                    }
                }
            });
        }
        done.sort_by_key(|(i, _)| *i);
        self.report.transfers = done.into_iter().map(|(_, t)| t).collect();
    }

    /// One transfer, on a worker.
    fn run_one(&self, job: &Job, clients: &[Arc<Remote>]) -> Done {
        let o = self.o;
        let cancel = self.progress.cancel_flag();
        match job {
            Job::Down { info, dir, name, to, backup, carry } => {
                let Some(remote) = clients.iter().find(|r| r.serves(&info.location)) else {
                    return Done::Failed(Error::new(ErrorKind::Io, "download", info.location.to_string(), "no client for this store"));
                };
                let r = if o.attributes_only { attributes_only(dir, name, to, info) } else { self.download(remote, info, dir, name, to, carry.as_deref()) };
                match r {
                    Ok(mut t) => {
                        t.backup = backup.as_ref().map(|b| text(&to.with_file_name(b)));
                        Done::Moved(t)
                    }
                    Err(e) => {
                        // GNU puts the backup back when the copy over it failed.
                        if let Some(b) = backup {
                            if sys::renameat(dir.as_fd(), b.as_os_str(), dir.as_fd(), name.as_os_str()).is_ok() {
                                let bp = to.with_file_name(b);
                                self.note(&Note::Unbackup { backup: &bp, dst: to });
                            }
                        }
                        Done::Failed(e)
                    }
                }
            }
            Job::Up { from, to } => {
                let Some(remote) = clients.iter().find(|r| r.serves(to)) else {
                    return Done::Failed(Error::new(ErrorKind::Io, "upload", to.to_string(), "no client for this store"));
                };
                let verify = o.copy.verify.is_some();
                match upload_file(remote, from, to, &o.io, verify, &cancel, Some(self.progress)) {
                    Ok(r) => Done::Moved(Transfer {
                        source: text(from),
                        destination: to.to_string(),
                        download: false,
                        bytes: r.bytes,
                        skipped: false,
                        requests: r.parts,
                        ranged: false,
                        local: Some(r.read.clone()),
                        etag: r.etag,
                        verified: r.verified.map(|_| true),
                        backup: None,
                        seconds: r.elapsed_s,
                    }),
                    Err(e) => Done::Failed(e),
                }
            }
        }
    }

    fn download(&self, remote: &Remote, info: &ObjectInfo, dir: &Arc<OwnedFd>, name: &OsStr, to: &Path, carry: Option<&Carry>) -> Result<Transfer> {
        let o = self.o;
        let cancel = self.progress.cancel_flag();
        let mut wo = WriteOptions::from(o.io.clone());
        wo.durability = o.durability;
        if let Some(c) = carry {
            // What GNU's write in place keeps: the mode (owner-only until the owner is set),
            // the access time.
            wo.permissions = Some(c.mode);
            wo.create_mode = Some(c.mode & 0o700);
            wo.atime = Some(c.atime);
        }
        let r = download_into(remote, info, dir.clone(), name, to, &wo, carry, &cancel, Some(self.progress))?;
        let verified = if o.copy.verify.is_some() { verify_download(to, info, &o.io)?.map(|_| true) } else { None };
        self.progress.file_done();
        Ok(Transfer {
            source: info.location.to_string(),
            destination: text(to),
            download: true,
            bytes: r.fetch.bytes,
            skipped: false,
            requests: r.fetch.ranges,
            ranged: r.fetch.ranged,
            local: Some(r.write.decision.clone()),
            etag: info.etag.clone(),
            verified,
            backup: None,
            seconds: r.fetch.elapsed_s,
        })
    }
}

/// Where a planned download goes.
enum Dest<'a> {
    /// `rel` below a destination folder.
    Under(&'a mut Under, &'a str),
    /// The path named as the destination.
    Path(&'a Path),
}

/// What a download replacing the regular file `name` (with `st`) keeps of it: what GNU's write
/// in place keeps, where a new file can have it all; else why the download is refused for it.
fn replaced(dir: &Arc<OwnedFd>, name: &OsStr, to: &Path, st: &sys::Stat) -> Result<Carry> {
    let refuse = |why: &str| {
        Error::message(ErrorKind::Unsupported, to, format!("{}: {why}: a download replaces a file whole", quote(to)))
            .with_note("--remove-destination replaces it with a new file, --backup keeps the old one aside")
    };
    if st.st_nlink > 1 {
        return Err(refuse("it has other hard links, which GNU cp's write in place would keep"));
    }
    let fd = sys::openat(dir.as_fd(), name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, FMode::empty())
        .map_err(|e| Error::io("cannot open {} for reading", to, e.into()))?;
    Carry::of(&std::fs::File::from(fd), st, sys::is_root()).ok_or_else(|| refuse("its owner or extended attributes could not be kept by a new file"))
}

/// Whether `-u` leaves the file `to` (with `st`) as it is, GNU's rule with what a download
/// knows besides: where the file keeps the ETag it landed with, it is left exactly when that is
/// the object's (the object has not changed since, whatever has touched the file's time);
/// elsewhere (landed by another tool, a filesystem without user attributes) when its
/// modification time is not older than the object's, as GNU leaves a destination that is not
/// older than its source.
fn not_older(to: &Path, st: &sys::Stat, info: &ObjectInfo) -> bool {
    match (landed_etag(to), &info.etag) {
        (Some(have), Some(want)) => have == *want && u64::try_from(st.st_size).is_ok_and(|n| n == info.size),
        _ => sys::system_time(st.st_mtime, i64::try_from(st.st_mtime_nsec).unwrap_or(0)) >= info.last_modified,
    }
}

/// `--attributes-only` from an object: the file made where missing (empty), its data left as it
/// is where present; its time the object's, as a download's is.
fn attributes_only(dir: &Arc<OwnedFd>, name: &OsStr, to: &Path, info: &ObjectInfo) -> Result<Transfer> {
    let fd = match sys::openat(dir.as_fd(), name, OFlags::WRONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC, FMode::from_raw_mode(0o666)) {
        Ok(fd) => fd,
        Err(e) => return Err(Error::io("cannot create regular file {}", to, e.into())),
    };
    drop(fd);
    let t = sys::timespec(info.last_modified);
    let times = sys::Timestamps { last_access: t, last_modification: t };
    sys::DirFd::of(dir).set_times(name, &times).map_err(|e| Error::io("preserving times for {}", to, e.into()))?;
    Ok(Transfer {
        source: info.location.to_string(),
        destination: text(to),
        download: true,
        bytes: 0,
        skipped: false,
        requests: 0,
        ranged: false,
        local: Some(cacheless::Decision { mode: cacheless::Taken::NoData, reason: cacheless::Reason::AttributesOnly }),
        etag: info.etag.clone(),
        verified: None,
        backup: None,
        seconds: 0.0,
    })
}

/// `loc`'s key as a prefix: empty, or ending in one `/`.
fn prefix_of(loc: &Location) -> String {
    let k = loc.key().trim_end_matches('/');
    if k.is_empty() {
        String::new()
    } else {
        format!("{k}/")
    }
}

/// Why a local entry that is no regular file is not uploaded.
fn not_uploaded(p: &Path, m: &std::fs::Metadata) -> Error {
    if m.file_type().is_symlink() {
        Error::message(ErrorKind::InvalidInput, p, format!("{}: a symbolic link cannot be uploaded as one: -L uploads the file it names", quote(p)))
    } else {
        Error::message(ErrorKind::InvalidInput, p, format!("{}: not a regular file: an object is made of a file's bytes", quote(p)))
    }
}

/// The regular files under `dir` with their paths relative to it (`/`-separated), in name
/// order; symbolic links followed where `follow` (else each is an error: an object store holds
/// no links), folders on other filesystems left out where `one_fs` (GNU's `-x`), special files
/// an error each.
fn walk(dir: &Path, follow: bool, one_fs: bool, dev: u64) -> Vec<Result<(PathBuf, String)>> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((d, rel)) = stack.pop() {
        let names = match std::fs::read_dir(&d) {
            Ok(rd) => {
                let mut v: Vec<OsString> = rd.filter_map(|e| e.ok().map(|e| e.file_name())).collect();
                v.sort();
                v
            }
            Err(e) => {
                out.push(Err(Error::io("cannot open directory {}", &d, e)));
                continue;
            }
        };
        for n in names.into_iter().rev() {
            let p = d.join(&n);
            let r = format!("{rel}{}", n.to_string_lossy());
            let m = if follow { std::fs::metadata(&p) } else { std::fs::symlink_metadata(&p) };
            match m {
                Err(e) => out.push(Err(Error::io("cannot stat {}", &p, e))),
                Ok(m) if m.is_dir() => {
                    if !(one_fs && m.dev() != dev) {
                        stack.push((p, format!("{r}/")));
                    }
                }
                Ok(m) if m.is_file() => out.push(Ok((p, r))),
                Ok(m) => out.push(Err(not_uploaded(&p, &m))),
            }
        }
    }
    out.sort_by(|a, b| match (a, b) {
        (Ok(x), Ok(y)) => x.1.cmp(&y.1),
        (Err(_), Ok(_)) => std::cmp::Ordering::Less,
        (Ok(_), Err(_)) => std::cmp::Ordering::Greater,
        (Err(_), Err(_)) => std::cmp::Ordering::Equal,
    });
    out
}

#[cfg(test)]
mod tests {
    use super::local_name;

    #[test]
    fn keys_that_no_local_name_can_hold_are_told_apart() {
        for ok in ["a", "a/b.bin", "ü n+%?#[]*|^~=", "a..b/.c"] {
            assert_eq!(local_name(ok), Ok(ok));
        }
        for bad in ["", "p/../x", "./x", "a//b", "/a", "a/\nb", "a/\u{7f}"] {
            assert!(local_name(bad).is_err(), "{bad:?}");
        }
    }
}
