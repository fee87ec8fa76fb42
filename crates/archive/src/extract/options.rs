//! What an extraction is asked to do, and what it reports.

use cacheless::sys;
use std::path::PathBuf;
use std::sync::Arc;

use crate::error::Error;
use crate::modes::ModeCounts;
use crate::source::SourceInfo;

/// Bytes of small files written back together by default (see [`ExtractOptions::durability`]).
pub const DEFAULT_WRITE_BACK: u64 = 32 << 20;

/// What a member does to an entry already at its name: GNU tar's "old files" choice, one of
/// its options or none (GNU refuses two of them together; so does the command line).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OldFiles {
    /// The member replaces the entry (a new inode, named once complete); an existing folder
    /// takes the member's mode and time (GNU tar's default).
    #[default]
    Replace,
    /// As `Replace`, and an existing folder keeps its mode and time (`--no-overwrite-dir`).
    NoOverwriteDir,
    /// A regular file already where a file member goes is written in place (its inode, and so
    /// its other hard links, get the new data), as GNU tar `--overwrite` writes it; a symlink
    /// there is replaced unless [`ExtractOptions::dereference`].
    Overwrite,
    /// Existing files are kept: an existing file is an entry failure, an existing folder keeps
    /// its mode and time (`-k`, `--keep-old-files`; see docs/extract.md).
    Keep,
    /// Existing files and folders are kept as they are, silently: members whose name is taken
    /// are skipped (`--skip-old-files`).
    Skip,
}

impl OldFiles {
    /// GNU tar's option for each choice but the default, as its messages name them.
    pub const OPTIONS: [(&'static str, OldFiles); 4] = [
        ("--keep-old-files", OldFiles::Keep),
        ("--skip-old-files", OldFiles::Skip),
        ("--overwrite", OldFiles::Overwrite),
        ("--no-overwrite-dir", OldFiles::NoOverwriteDir),
    ];

    /// Whether existing files are kept, each an entry failure (`-k`).
    pub fn keeps(self) -> bool {
        self == OldFiles::Keep
    }
}

/// Whether and how members are named as they are reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Listing {
    /// Not named (the default).
    #[default]
    Off,
    /// Each member named on standard output as it is reached, as stored in the archive (GNU
    /// tar `-v`; on standard error with `to_stdout`, as GNU). Members not taken (not named,
    /// excluded, nothing left after `strip_components`) are not named.
    Names,
    /// GNU tar's long listing (`-vv`): type and mode, owner/group (numbers with
    /// `numeric_owner` or where the archive has no names), size or device numbers, the
    /// modification time in local time, the name, and a link's target.
    Long,
}

impl Listing {
    /// GNU tar's count of `-v`: none, one, two or more.
    pub fn of_verbosity(v: u8) -> Listing {
        match v {
            0 => Listing::Off,
            1 => Listing::Names,
            _ => Listing::Long,
        }
    }

    /// Whether the listing is GNU's long one (`-vv`).
    pub fn long(self) -> bool {
        self == Listing::Long
    }
}

/// What `extract` does and how.
#[derive(Clone, Debug)]
pub struct ExtractOptions {
    /// Destination directory (created if missing).
    pub dest: PathBuf,
    /// Leading path components to drop (GNU `--strip-components`).
    pub strip_components: usize,
    /// Files are named after their batch's syncfs (the checksum hold needs it), and a syncfs of
    /// each destination's filesystem ends the job: [`cacheless::Durability::NamedAfterSync`]
    /// (the default, batches of 32 MiB), or [`cacheless::Durability::Off`] (`--no-sync`: the same
    /// batches, no final syncfs; not crash-safe, faster). `write_back`: bytes of small files that
    /// auto would write uncached written plainly and written back together by one syncfs, their
    /// pages then dropped (the device sees a few large requests rather than one or more per file,
    /// and the cache holds at most about this much of them); `None` writes each as auto decides
    /// (RWF_DONTCACHE), in batches of 32 MiB. The other variants are refused.
    pub durability: cacheless::Durability,
    /// What a member does to an entry already at its name: GNU tar's one choice among `-k`,
    /// `--skip-old-files`, `--overwrite` and `--no-overwrite-dir` (see [`OldFiles`]).
    pub old_files: OldFiles,
    /// Zero blocks do not end the archive (GNU tar `-i`, `--ignore-zeros`): archives written one
    /// after another (`cat a.tar b.tar`) are extracted whole, to the input's end.
    pub ignore_zeros: bool,
    /// GNU tar's warnings of a time stamp before 1970 or in the future (`--warning=timestamp`,
    /// on by default; `--warning=no-timestamp` silences them).
    pub warn_timestamp: bool,
    /// GNU tar's warning of an extended header keyword it does not know
    /// (`--warning=unknown-keyword`, on by default).
    pub warn_unknown_keyword: bool,
    /// Before a member takes the name of an existing entry that is not a folder (as `stat`
    /// sees it, a symlink followed), that entry is renamed to its backup name (GNU tar
    /// `--backup`, with GNU's naming: `cacheless::backup::backup_name_in`), said under `list`.
    /// Where the member then fails before its file is written, the backup takes its name back.
    pub backup: Option<(cacheless::backup::BackupKind, String)>,
    /// With [`OldFiles::Overwrite`], a symlink where a file member goes is followed to the regular file it
    /// names, wherever that is, and that file is written (GNU tar `-h`/`--dereference`). A
    /// symlink to nothing is replaced (GNU creates the file it names).
    pub dereference: bool,
    /// A symlink to a folder that was there before, where a folder member has its name, stays
    /// as it is, and the members below go through it (GNU tar `--keep-directory-symlink`).
    /// Default: it is replaced by a folder, as GNU replaces it.
    pub keep_directory_symlink: bool,
    /// Every member under this folder (GNU tar `--one-top-level=DIR`): a member whose path
    /// (after `strip_components`) does not begin with it is put under it (see
    /// [`crate::select::under_top`]); hard link targets too.
    pub one_top_level: Option<Vec<u8>>,
    /// GNU tar `--transform`: sed-like expressions applied to each member's name and link
    /// target before anything else (`strip_components`, `one_top_level`); members are still
    /// selected (`members`, `exclude`) and listed by their stored names.
    pub transform: Option<Arc<crate::transform::Transform>>,
    /// With a [`Listing`], name members as they are extracted, after `transform`, `strip_components`
    /// and `one_top_level` (GNU tar `--show-transformed-names`).
    pub show_transformed_names: bool,
    /// Names as they are (GNU tar `-P`/`--absolute-names`): one beginning with '/' from the
    /// root of the filesystem, others from the destination, a `..` going up a component (taken
    /// from the name's text, after `strip_components`), wherever that leads. Default: a leading
    /// '/' is removed and a name holding `..` refused, so nothing lands outside the destination.
    pub absolute_names: bool,
    /// GNU tar's `-C` between member names: `(i, dir)` sends the members that the names from
    /// `members[i]` on select into `dir` (until the next such entry) rather than `dest`. Each
    /// `dir` is the path to use, already joined to the one before it as GNU's successive `-C`
    /// are.
    pub chdirs: Vec<(usize, PathBuf)>,
    /// Only these members (as stored in the archive; a folder takes everything below it), each
    /// reported when no member matched it. Empty: every member.
    pub members: Vec<Vec<u8>>,
    /// Members whose name (or any tail of it starting at a component) matches are skipped
    /// (GNU tar `--exclude`).
    pub exclude: Vec<glob::Pattern>,
    /// Write the contents of regular members to standard output, one after another, and create
    /// nothing (GNU tar `-O`).
    pub to_stdout: bool,
    /// Whether and how each member is named as it is reached (GNU tar `-v`, `-vv`; see
    /// [`Listing`]).
    pub listing: Listing,
    /// Give each member the archive's owner and group (GNU tar `--same-owner`, its default as
    /// root): by their names where the archive has them and this system knows them, else by
    /// their numbers. A member whose owner cannot be set is kept and reported, without set-ID
    /// bits. Default: whether this process runs as root.
    pub same_owner: bool,
    /// Owners by the archive's numbers only, never its names (GNU tar `--numeric-owner`).
    pub numeric_owner: bool,
    /// Give each member the archive's mode bits whole, set-ID and sticky bits included, with no
    /// umask (GNU tar `-p`, its default as root). Otherwise the permission bits less the umask,
    /// as GNU tar gives other users. As root without owners restored, set-ID bits are dropped
    /// (GNU keeps them on a file then owned by root). Default: whether this process runs as root.
    pub same_permissions: bool,
    /// Restore the extended attributes the archive holds (pax `SCHILY.xattr.*`, GNU tar
    /// `--xattrs`): those `xattrs_include` takes and `xattrs_exclude` does not. One that cannot be
    /// set (a filesystem without them, a namespace this process may not write) is a warning,
    /// as GNU's (which it prints only under `--warning=xattr-write`); the member stays.
    pub xattrs: bool,
    /// Names of the extended attributes restored (shell patterns, as GNU tar
    /// `--xattrs-include`; wildcards match '.' and '/'). Empty: the `user.*` namespace only,
    /// GNU's default.
    pub xattrs_include: Vec<glob::Pattern>,
    /// Names of extended attributes not restored (GNU tar `--xattrs-exclude`).
    pub xattrs_exclude: Vec<glob::Pattern>,
    /// Restore POSIX ACLs (pax `SCHILY.acl.access` and `SCHILY.acl.default`, GNU tar `--acls`):
    /// a member without one gets the ACL its mode says (any other removed, its permission bits
    /// exactly the archive's), a folder without a default ACL loses one it inherited. Applied
    /// last, after owner and mode, as GNU applies them; not to symlinks.
    pub acls: bool,
    /// Create FIFOs and device nodes (default, as GNU tar; a device node needs privilege, and
    /// fails without it); false skips them with a warning.
    pub special_files: bool,
    /// Worker threads for file data and metadata (fewer when the open-file limit is low).
    pub threads: usize,
    /// Threads decoding a zstd archive's frames in parallel (default: one per CPU, at most 8;
    /// 1 decodes on one thread). An archive of one frame is decoded on one thread whatever this
    /// says; the other formats always are.
    pub decompress_threads: usize,
    /// The largest zstd window to accept, as a power of two (`zstd -d --long=N`: 10 to 31).
    /// `None`: zstd's default limit (2^27, 128 MiB), which a `zstd --long=31` archive exceeds.
    pub zstd_window_log_max: Option<u32>,
    /// How the archive is read and file data written (mode, backend, request size, depth),
    /// and the memory budget every in-flight buffer (archive read-ahead, decompressed chunks
    /// handed to workers, small files' data) is leased from. The mode applies to the files
    /// written (`Auto` picks per file) and to the reading of an archive file.
    pub io: cacheless::IoOptions,
    /// Files at least this large are streamed through the engine's `Writer`, with its queue of
    /// writes in flight; smaller ones are written whole by the engine's `FileCreator`. Either
    /// way the engine's policy picks the mode (O_DIRECT for large files in auto mode).
    pub direct_min: u64,
    /// Most finished files kept open while they wait for the archive's checksums covering
    /// their data (a compressed archive: see docs/extract.md); those past them wait under
    /// temporary names. `None` (the default): most of the descriptors the soft RLIMIT_NOFILE
    /// leaves spare, up to 65,536.
    pub held_open: Option<usize>,
    /// Use the O_NOFOLLOW walk even where openat2 works (tests of the fallback).
    pub force_walk: bool,
    /// The umask applied to members' modes when not running as root, as GNU tar does. `None`:
    /// the process's, read from /proc/self/status (the umask is never set, which would race
    /// every other thread creating files).
    pub umask: Option<u32>,
    /// Counters to poll while it runs, and the cancel flag it checks between entries and
    /// chunks.
    pub progress: Option<Arc<cacheless::Progress>>,
}

impl ExtractOptions {
    /// Defaults: the default I/O options (auto mode and backend, the default budget), sync,
    /// replace existing files, special files created, and GNU tar's defaults for owners and
    /// modes (restored as root, not otherwise).
    pub fn new(dest: impl Into<PathBuf>) -> Self {
        let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
        let root = sys::is_root();
        ExtractOptions {
            dest: dest.into(),
            strip_components: 0,
            durability: cacheless::Durability::NamedAfterSync { write_back: Some(DEFAULT_WRITE_BACK) },
            old_files: OldFiles::Replace,
            ignore_zeros: false,
            warn_timestamp: true,
            warn_unknown_keyword: true,
            keep_directory_symlink: false,
            one_top_level: None,
            backup: None,
            dereference: false,
            transform: None,
            show_transformed_names: false,
            chdirs: Vec::new(),
            absolute_names: false,
            members: Vec::new(),
            exclude: Vec::new(),
            to_stdout: false,
            listing: Listing::Off,
            same_owner: root,
            numeric_owner: false,
            same_permissions: root,
            special_files: true,
            xattrs: false,
            xattrs_include: Vec::new(),
            xattrs_exclude: Vec::new(),
            acls: false,
            threads: (cpus * 2).clamp(4, 16),
            decompress_threads: cpus.clamp(1, 8),
            zstd_window_log_max: None,
            held_open: None,
            io: cacheless::IoOptions::default(),
            direct_min: 1 << 20,
            force_walk: false,
            umask: None,
            progress: None,
        }
    }
}

/// The outcome of one extraction.
#[derive(Debug, serde::Serialize)]
pub struct ExtractReport {
    /// How the archive was read and its compression.
    pub source: SourceInfo,
    /// Entries seen.
    pub entries: u64,
    /// Regular files written.
    pub files: u64,
    /// Directories.
    pub dirs: u64,
    /// Symbolic links.
    pub symlinks: u64,
    /// Hard links.
    pub hardlinks: u64,
    /// Entries skipped (refused names, special files).
    pub skipped: u64,
    /// File data bytes written.
    pub bytes: u64,
    /// Uncompressed tar bytes parsed.
    pub tar_bytes: u64,
    /// How files were written.
    pub modes: ModeCounts,
    /// Whether the destination's filesystem takes O_DIRECT (the engine's probe).
    pub direct_ok: Option<bool>,
    /// Whether the destination's filesystem takes RWF_DONTCACHE (the engine's probe, or a write
    /// that refused it).
    pub dontcache_ok: Option<bool>,
    /// How files got their final names: created without one (O_TMPFILE) or under a temporary
    /// one, and named only after the syncfs that made their data durable, so that a power cut
    /// never leaves a final name on data that did not reach the disk.
    pub naming: String,
    /// How the small files were created: by O_TMPFILE requests on an io_uring, run by one
    /// kernel worker while the archive is parsed on, or on the parsing thread (and why).
    pub creation: String,
    /// How parents were resolved (`openat2` or `walk`) and why.
    pub resolve: String,
    /// The soft limit on open files (RLIMIT_NOFILE) the extraction sized its threads, queue and
    /// open directories to.
    pub open_files_limit: u64,
    /// Whether syncfs ran.
    pub synced: bool,
    /// Whether the extraction was cancelled (the entry being written was removed).
    pub interrupted: bool,
    /// Warnings (refused names, skipped special files), first 1000.
    pub warnings: Vec<String>,
    /// Entries that failed, first 1000 (the run went on past them).
    pub failures: Vec<String>,
    /// Number of failed entries.
    pub failure_count: u64,
    /// The archive-level error that stopped the run (truncated, corrupt, interrupted), if any.
    pub fatal: Option<String>,
    /// Wall time in seconds (including the final syncfs).
    pub elapsed_s: f64,
    /// Seconds spent in the final syncfs.
    pub sync_s: f64,
    /// The fatal error itself.
    #[serde(skip)]
    pub fatal_error: Option<Error>,
    /// The OS error's number of the first failure, where an OS call failed (ENOSPC when the
    /// disk filled): for a caller that raises it as an OS error (the Python package).
    #[serde(skip)]
    pub first_failure_errno: Option<i32>,
}

impl ExtractReport {
    /// True when every entry was extracted and the archive was read to its end.
    pub fn is_ok(&self) -> bool {
        self.failure_count == 0 && self.fatal.is_none()
    }
}
