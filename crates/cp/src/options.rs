//! What a copy is asked to do, and what it reports: GNU cp's options (see `cacheless cp
//! --help`), read once into these types by each door (the command line, Python), cacheless's own
//! beside them, and the settings of transfers to and from URLs. A copy of local paths gives GNU
//! cp's results, with each file written off the page cache; with URLs, each option works with
//! GNU's meaning or is refused before anything moves (see [`crate::copy`]).

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use cacheless::backup::BackupKind;
use cacheless::{CopyOptions, CopyReport, Durability, Error, IoOptions};
use cacheless_remote::RemoteOptions;

/// Called with each item that failed (the job goes on with the rest).
pub type OnError = Arc<dyn Fn(&Error) + Send + Sync>;
/// Called with the report of each file copied, once it is in place.
pub type OnCopied = Arc<dyn Fn(&CopyReport) + Send + Sync>;
/// Called with what the copy does as it does it (GNU cp's `--verbose` lines), and its warnings.
pub type OnNote = Arc<dyn Fn(&Note<'_>) + Send + Sync>;
/// Asked before an existing destination is replaced under `--interactive`: true to replace it.
pub type Ask = Arc<dyn Fn(&Question<'_>) -> bool + Send + Sync>;
/// Called with each transfer to or from a URL once it is done: its requests, how the local file
/// was read or written, and why.
pub type OnTransfer = Arc<dyn Fn(&Transfer) + Send + Sync>;

/// Which symbolic links among the sources are followed (GNU cp's `-P`, `-H`, `-L`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Deref {
    /// GNU's default: never when recursive (unless hard-linking), else always.
    #[default]
    Default,
    /// Never (`-P`, `-d`, `-a`): a symlink is copied as a symlink.
    Never,
    /// Those named on the command line only (`-H`).
    CommandLine,
    /// Always (`-L`): the file a symlink names is copied.
    Always,
}

/// The attributes a copy takes from its source (GNU cp's `--preserve`); without them a new
/// copy gets the source's permission bits less the umask (and no set-user-ID, set-group-ID or
/// sticky bit), the current time, and the copying user as owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Preserve {
    /// Permission bits, the set-ID and sticky bits, and the access ACL.
    pub mode: bool,
    /// Owner and group (the owner needs root; the group where the user belongs to it).
    pub ownership: bool,
    /// Access and modification times.
    pub timestamps: bool,
    /// Hard links among the files copied.
    pub links: bool,
    /// Extended attributes (ACLs among them).
    pub xattr: bool,
}

impl Preserve {
    /// Everything (`--preserve=all`, `-a`).
    pub const ALL: Preserve = Preserve { mode: true, ownership: true, timestamps: true, links: true, xattr: true };
}

/// One word of GNU cp's `--preserve=LIST` and `--no-preserve=LIST`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attr {
    /// `mode`.
    Mode,
    /// `timestamps`.
    Timestamps,
    /// `ownership`.
    Ownership,
    /// `links`.
    Links,
    /// `context` (SELinux: refused to keep, as GNU cp refuses it without SELinux).
    Context,
    /// `xattr`.
    Xattr,
    /// `all`.
    All,
}

impl Attr {
    /// The words, as GNU cp lists them.
    pub const WORDS: [(&'static str, Attr); 7] = [
        ("mode", Attr::Mode),
        ("timestamps", Attr::Timestamps),
        ("ownership", Attr::Ownership),
        ("links", Attr::Links),
        ("context", Attr::Context),
        ("xattr", Attr::Xattr),
        ("all", Attr::All),
    ];
}

impl std::str::FromStr for Attr {
    type Err = String;
    fn from_str(s: &str) -> Result<Attr, String> {
        Attr::WORDS
            .iter()
            .find(|(w, _)| *w == s)
            .map(|(_, a)| *a)
            .ok_or_else(|| format!("{s:?} is no attribute: one of {}", Attr::WORDS.iter().map(|(w, _)| *w).collect::<Vec<_>>().join(", ")))
    }
}

impl std::str::FromStr for Deref {
    type Err = String;
    fn from_str(s: &str) -> Result<Deref, String> {
        match s {
            "always" => Ok(Deref::Always),
            "never" => Ok(Deref::Never),
            "command-line" => Ok(Deref::CommandLine),
            _ => Err(format!("{s:?}: always (-L), never (-P) or command-line (-H)")),
        }
    }
}

/// What to do with a destination that exists (GNU cp's `-n`, `-i`).
#[derive(Clone, Default)]
pub enum Existing {
    /// Replace it (the default).
    #[default]
    Replace,
    /// Leave it (`-n`).
    Keep,
    /// Ask (`-i`); a non-directory is replaced only on a yes.
    Ask(Ask),
}

impl fmt::Debug for Existing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Existing::Replace => "Replace",
            Existing::Keep => "Keep",
            Existing::Ask(_) => "Ask",
        })
    }
}

/// How the files are made (GNU cp's `-l`, `-s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Link {
    /// Copied.
    #[default]
    Copy,
    /// Hard links to the sources (`-l`).
    Hard,
    /// Symbolic links to the sources (`-s`).
    Symbolic,
}

/// Where the sources go (GNU cp's `-t`, `-T`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// Into the destination when it is a directory; else the one source becomes it.
    #[default]
    Auto,
    /// Into the destination, which must be a directory (`-t`).
    Directory,
    /// The one source becomes the destination, even a directory (`-T`).
    File,
}

/// What the copy did, as it did it: GNU cp's `--verbose` lines and its warnings.
#[derive(Debug)]
#[non_exhaustive]
pub enum Note<'a> {
    /// `src` is being copied to `dst` (a file or link before it is made, a directory once
    /// made), the destination moved to `backup` first.
    Copy {
        /// The source.
        src: &'a Path,
        /// Where it goes.
        dst: &'a Path,
        /// The backup made of what `dst` held.
        backup: Option<&'a Path>,
    },
    /// The destination was removed to be replaced (`--remove-destination`, `--force`, or a
    /// destination with other hard links under `--preserve=links`).
    Removed(&'a Path),
    /// A backup was put back after the copy over it failed.
    Unbackup {
        /// The backup.
        backup: &'a Path,
        /// The name it got back.
        dst: &'a Path,
    },
    /// A directory made for `--parents`: `src` (a leading part of a source) -> `dst`.
    Parent {
        /// The source directory.
        src: &'a Path,
        /// The directory made.
        dst: &'a Path,
    },
    /// A warning: the copy goes on, and it is not a failure ("source file specified more
    /// than once").
    Warning(String),
}

/// The question `--interactive` asks before replacing a destination.
#[derive(Debug)]
#[non_exhaustive]
pub struct Question<'a> {
    /// The destination.
    pub dst: &'a Path,
    /// Its mode, when the user may not write it (the question then says so).
    pub unwritable_mode: Option<u32>,
    /// The destination is to be removed before it is replaced (`--force`,
    /// `--remove-destination`): "replace" rather than "overwrite".
    pub replace: bool,
}

/// What a copy is asked to do: GNU cp's options, cacheless's own, the engine's I/O settings and
/// the transfers' (URLs).
#[derive(Clone)]
pub struct CpOptions {
    /// Mode, backend, request size and depth, and the memory budget of every read and write.
    pub io: IoOptions,
    /// Copy directories (`-r`). Without it a directory source is an error.
    pub recursive: bool,
    /// Which symlinks among the sources are followed.
    pub deref: Deref,
    /// The attributes taken from the sources.
    pub preserve: Preserve,
    /// `--no-preserve=mode` was given: a new copy gets 0666 (0777 for a directory) less the
    /// umask, and no ACL.
    pub no_preserve_mode: bool,
    /// A failure to preserve an attribute asked for is an error (`-p`, `--preserve`, `-a`);
    /// else it is ignored where the user could not have the attribute anyway (another owner).
    pub require_preserve: bool,
    /// Fewer complaints about attributes the destination cannot hold (`-a`).
    pub reduce_diagnostics: bool,
    /// What to do with an existing destination.
    pub existing: Existing,
    /// Leave a destination that is not older than its source (`-u`).
    pub update: bool,
    /// A destination that cannot be opened is removed and created again (`-f`).
    pub force: bool,
    /// Each existing destination is removed first (`--remove-destination`).
    pub remove_destination: bool,
    /// Back up each destination replaced: how, with which suffix for simple backups.
    pub backup: Option<(BackupKind, String)>,
    /// Copy, or make hard or symbolic links.
    pub link: Link,
    /// Copy the attributes only, no data (`--attributes-only`).
    pub attributes_only: bool,
    /// Read special files (FIFOs, devices) as files when recursive (`--copy-contents`).
    pub copy_contents: bool,
    /// Stay on the sources' filesystems (`-x`).
    pub one_file_system: bool,
    /// Each source lands under its whole name in the destination directory (`--parents`).
    pub parents: bool,
    /// Where the sources go.
    pub target: Target,
    /// Write each existing destination in place (its inode kept) rather than replacing it with
    /// a complete copy (`--inplace`). Without it, existing files are written in place only
    /// where replacing them would change what can be seen (other hard links, a FIFO or device,
    /// an owner or attributes the copy could not carry over, a directory the user may not
    /// write).
    pub inplace: bool,
    /// Write through a dangling symlink named as the destination (GNU cp under
    /// POSIXLY_CORRECT); else that is refused.
    pub open_dangling: bool,
    /// How each file is copied: reflink, holes, verification, the rate limit (reads and writes
    /// together) and the verification hook, as for one file. Its `owner` and `xattrs` follow
    /// `preserve`; the rest of what it says of attributes is the tree copy's own.
    pub copy: CopyOptions,
    /// Worker threads copying files (default: 2 per CPU, 4 to 16).
    pub threads: Option<usize>,
    /// [`Durability::EachFile`] (the default): each copy is durable before it takes its name
    /// (small files a batch at a time, by the batch's syncfs, named after it); `Off { write_back:
    /// None }`: nothing is synced (`--no-sync`). The other variants are refused.
    pub durability: Durability,
    /// Walk the sources first to set the progress's totals of bytes and files.
    pub count_totals: bool,
    /// Told of each failed item.
    pub on_error: Option<OnError>,
    /// Told of each file copied.
    pub on_copied: Option<OnCopied>,
    /// Told of what is done (`--verbose`) and of warnings.
    pub on_note: Option<OnNote>,
    /// Transfers to and from URLs: the store, its credentials, requests in flight, part size.
    pub remote: RemoteOptions,
    /// Told of each transfer to or from a URL.
    pub on_transfer: Option<OnTransfer>,
}

impl CpOptions {
    /// A plain copy of files (not recursive, no attribute preserved), durable, reflink and
    /// sparse auto, with `io`: GNU cp with no option.
    pub fn new(io: IoOptions) -> CpOptions {
        CpOptions {
            io,
            recursive: false,
            deref: Deref::Default,
            preserve: Preserve::default(),
            no_preserve_mode: false,
            require_preserve: false,
            reduce_diagnostics: false,
            existing: Existing::Replace,
            update: false,
            force: false,
            remove_destination: false,
            backup: None,
            link: Link::Copy,
            attributes_only: false,
            copy_contents: false,
            one_file_system: false,
            parents: false,
            target: Target::Auto,
            inplace: false,
            open_dangling: false,
            copy: CopyOptions::new(),
            threads: None,
            durability: Durability::EachFile,
            count_totals: false,
            on_error: None,
            on_copied: None,
            on_note: None,
            remote: RemoteOptions::default(),
            on_transfer: None,
        }
    }

    /// Archive mode (`-a`): recursive, symlinks copied as symlinks, every attribute preserved.
    pub fn archive(mut self) -> CpOptions {
        self.recursive = true;
        self.deref = Deref::Never;
        self.preserve = Preserve::ALL;
        self.require_preserve = true;
        self.reduce_diagnostics = true;
        self
    }

    /// Keeps (`on`) or drops one attribute, as a word of `--preserve=` or `--no-preserve=`
    /// does (`--preserve` also makes a failure to keep one an error). `context` cannot be
    /// kept (no SELinux): the error says so.
    pub fn set_preserve(&mut self, attr: Attr, on: bool) -> Result<(), String> {
        match attr {
            Attr::Mode => {
                self.preserve.mode = on;
                self.no_preserve_mode = !on;
            }
            Attr::Timestamps => self.preserve.timestamps = on,
            Attr::Ownership => self.preserve.ownership = on,
            Attr::Links => self.preserve.links = on,
            Attr::Context if on => return Err("cannot preserve security context without an SELinux-enabled kernel".into()),
            Attr::Context => {}
            Attr::Xattr => self.preserve.xattr = on,
            Attr::All => {
                self.preserve = if on { Preserve::ALL } else { Preserve::default() };
                self.no_preserve_mode = !on;
            }
        }
        if on {
            self.require_preserve = true;
        }
        Ok(())
    }

    /// Which symlinks are followed, GNU's default resolved.
    pub fn deref(&self) -> Deref {
        match self.deref {
            Deref::Default if self.recursive && self.link != Link::Hard => Deref::Never,
            Deref::Default => Deref::Always,
            d => d,
        }
    }

    /// Whether special files are read as files (without `-r`, or with `--copy-contents`).
    pub fn copy_as_regular(&self) -> bool {
        !self.recursive || self.copy_contents
    }

    /// Whether the destination's existing entries are never overwritten (`-n`).
    pub fn no_clobber(&self) -> bool {
        matches!(self.existing, Existing::Keep)
    }

    /// Whether the data is copied (not `--attributes-only`).
    pub fn data(&self) -> bool {
        !self.attributes_only
    }

    pub(crate) fn note(&self, n: &Note<'_>) {
        if let Some(f) = &self.on_note {
            f(n);
        }
    }
}

impl Default for CpOptions {
    /// [`CpOptions::new`] with the default I/O settings.
    fn default() -> CpOptions {
        CpOptions::new(IoOptions::default())
    }
}

impl fmt::Debug for CpOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CpOptions")
            .field("io", &self.io)
            .field("recursive", &self.recursive)
            .field("deref", &self.deref)
            .field("preserve", &self.preserve)
            .field("no_preserve_mode", &self.no_preserve_mode)
            .field("require_preserve", &self.require_preserve)
            .field("existing", &self.existing)
            .field("update", &self.update)
            .field("force", &self.force)
            .field("remove_destination", &self.remove_destination)
            .field("backup", &self.backup)
            .field("link", &self.link)
            .field("attributes_only", &self.attributes_only)
            .field("copy_contents", &self.copy_contents)
            .field("one_file_system", &self.one_file_system)
            .field("parents", &self.parents)
            .field("target", &self.target)
            .field("inplace", &self.inplace)
            .field("copy", &self.copy)
            .field("threads", &self.threads)
            .field("durability", &self.durability)
            .field("count_totals", &self.count_totals)
            .field("remote", &self.remote)
            .finish_non_exhaustive()
    }
}

/// How many files a [`CpReport`] lists one by one.
pub const FILES_LISTED: usize = 1000;

/// What a copy did (the fields of `cacheless cp --json`, and what Python's `copy` returns).
#[derive(Debug, Default, Serialize)]
pub struct CpReport {
    /// Each local file copied, in the order they were put in place: the first
    /// `FILES_LISTED` (a report of its own each), so that a report's memory does not grow
    /// with the tree; the others are counted in `copied` and `files_not_listed`.
    pub files: Vec<CopyReport>,
    /// Local files copied past the first `FILES_LISTED`, counted and not listed.
    pub files_not_listed: u64,
    /// Each transfer to or from a URL, done or skipped, in the operands' order.
    pub transfers: Vec<Transfer>,
    /// Files copied (`files.len()`, or the transfers done).
    pub copied: u64,
    /// Of those, the ones cloned (FICLONE).
    pub reflinked: u64,
    /// Of those, the ones written in place (existing destinations whose inode was kept).
    pub in_place: u64,
    /// Hard links made (`--preserve=links`, `-l`).
    pub hardlinks: u64,
    /// Items skipped by `-n`, `-i` or `-u`.
    pub skipped: u64,
    /// Items that failed.
    pub errors: u64,
    /// Bytes done, as the progress counted them.
    pub bytes: u64,
    /// Bytes of data read and written (0 for a reflink; less than the size for sparse files).
    pub data_bytes: u64,
    /// Seconds the whole job took.
    pub elapsed_s: f64,
    /// Seconds of the last batch's sync, the hard links, the directories' metadata and the
    /// final syncfs.
    pub final_sync_s: f64,
    /// Seconds spent reading copies back to verify them (summed over the workers).
    pub verify_s: f64,
    /// The rate limit, if any.
    pub bwlimit: Option<u64>,
    /// (seconds from the first byte, bytes done) once a second, while a rate limit is set.
    pub progress_samples: Vec<(f64, u64)>,
    /// Whether the job was cancelled through its progress (files not yet finished were removed).
    pub interrupted: bool,
    /// The first failure, if any.
    #[serde(skip)]
    pub first_error: Option<Error>,
}

/// One file's transfer to or from a URL, done or skipped.
#[derive(Debug, Clone, Serialize)]
pub struct Transfer {
    /// Where from (a URL or a path).
    pub source: String,
    /// Where to.
    pub destination: String,
    /// Whether a download (else an upload).
    pub download: bool,
    /// Bytes moved.
    pub bytes: u64,
    /// Skipped by `-n`, `-i` or `-u`.
    pub skipped: bool,
    /// Ranged GETs (downloads) or parts (uploads; 0 for one PUT).
    pub requests: u64,
    /// Whether the server answered ranges (downloads).
    pub ranged: bool,
    /// How the local file was read or written, and why (serialized as `mode` and `reason`);
    /// `None` for a transfer skipped.
    #[serde(flatten)]
    pub local: Option<cacheless::Decision>,
    /// The object's ETag.
    pub etag: Option<String>,
    /// With `verify`: checked (true), or not checkable (`None`: a multipart upload's ETag).
    pub verified: Option<bool>,
    /// The backup made of the destination (`--backup`).
    pub backup: Option<String>,
    /// Seconds it took.
    pub seconds: f64,
}
