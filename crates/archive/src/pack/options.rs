//! What `pack` is asked to do, and what it reports: the options, the parsing of the values the
//! front ends take for them (owners, compression names and levels), and the report.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cacheless::{IoOptions, Progress, WriteReport};
use serde::Serialize;

use crate::modes::ModeCounts;
use crate::source::Compression;

/// Default frame size: 32 MiB of tar stream per independent frame, as Agave's snapshots use.
pub const DEFAULT_FRAME_SIZE: usize = 32 << 20;
/// Smallest frame size accepted.
pub const MIN_FRAME_SIZE: usize = cacheless::limits::MIN_FRAME_SIZE;

/// Where the archive goes.
pub enum Output {
    /// A file, written under a temporary name beside it and renamed into place when complete.
    Path(PathBuf),
    /// A stream (stdout, a pipe). Nothing can be taken back from a stream: on error it ends early.
    Stream(Box<dyn Write + Send>),
}

/// Order of directory entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SortOrder {
    /// As the directory lists them (GNU tar's default).
    None,
    /// By name, byte order (reproducible archives).
    Name,
}

/// An owner or group to store instead of the file's: the id and the name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// Numeric id.
    pub id: u32,
    /// Name ("" for none).
    pub name: String,
}

impl Owner {
    /// Parses GNU tar's `NAME[:ID]`, `+ID` or `ID` for a user (`group` false) or group.
    pub fn parse(s: &str, group: bool) -> Result<Owner, String> {
        let what = if group { "group" } else { "owner" };
        let no_such = |s: &str| format!("invalid {what} '{s}': no such {}; give NAME:ID", if group { "group" } else { "user" });
        let (name, id) = match s.split_once(':') {
            Some((n, i)) => (n, Some(i.parse::<u32>().map_err(|_| format!("invalid {what} '{s}': '{i}' is not a numeric id"))?)),
            None => (s, None),
        };
        let numeric = name.strip_prefix('+').unwrap_or(name);
        if id.is_none() && !numeric.is_empty() && numeric.bytes().all(|b| b.is_ascii_digit()) {
            let id: u32 = numeric.parse().map_err(|_| format!("invalid {what} '{s}': id out of range"))?;
            let name = if group { cacheless::sys::group_name(id) } else { cacheless::sys::user_name(id) };
            return Ok(Owner { id, name: name.unwrap_or_default() });
        }
        let id = match id {
            Some(i) => i,
            None if group => cacheless::sys::group_id(name).ok_or_else(|| no_such(s))?,
            None => cacheless::sys::user_id(name).ok_or_else(|| no_such(s))?,
        };
        Ok(Owner { id, name: name.to_string() })
    }
}
/// The compression an output name asks for: `.tar.zst`/`.tzst`, `.gz`/`.tgz`, `.xz`/`.txz`,
/// `.lz4`, `.bz2`/`.tbz2`, `.tar` (none); `None` for any other name.
pub fn compression_for_name(p: &Path) -> Option<Compression> {
    let n = p.file_name()?.to_string_lossy().to_ascii_lowercase();
    let ends = |s: &[&str]| s.iter().any(|e| n.ends_with(e));
    Some(if ends(&[".zst", ".tzst", ".zstd"]) {
        Compression::Zstd
    } else if ends(&[".gz", ".tgz"]) {
        Compression::Gzip
    } else if ends(&[".xz", ".txz"]) {
        Compression::Xz
    } else if ends(&[".lz4"]) {
        Compression::Lz4
    } else if ends(&[".bz2", ".tbz2", ".tbz"]) {
        Compression::Bzip2
    } else if ends(&[".tar"]) {
        Compression::None
    } else {
        return None;
    })
}

/// Parses a compression name: zstd, gzip, xz, lz4, bzip2 or none (also gz, zst, bz2).
pub fn parse_compression(s: &str) -> Result<Compression, String> {
    Ok(match s.to_ascii_lowercase().as_str() {
        "zstd" | "zst" => Compression::Zstd,
        "gzip" | "gz" => Compression::Gzip,
        "xz" => Compression::Xz,
        "lz4" => Compression::Lz4,
        "bzip2" | "bz2" => Compression::Bzip2,
        "none" | "tar" => Compression::None,
        o => return Err(format!("unknown compression '{o}': expected zstd, gzip, xz, lz4, bzip2 or none")),
    })
}

/// The default level of each compression (what its own tool uses).
pub fn default_level(c: Compression) -> i32 {
    match c {
        Compression::Zstd => 3,
        Compression::Gzip | Compression::Xz => 6,
        Compression::Bzip2 => 9,
        Compression::Lz4 | Compression::None => 0,
    }
}

/// Checks that `level` exists for `c`; the error says the range.
pub fn check_level(c: Compression, level: i32) -> Result<(), String> {
    let (lo, hi) = match c {
        Compression::Zstd => {
            let r = zstd::compression_level_range();
            (*r.start(), *r.end())
        }
        Compression::Gzip | Compression::Xz => (0, 9),
        Compression::Bzip2 => (1, 9),
        Compression::Lz4 | Compression::None => return Err(format!("{} has no compression levels here; give no level", c.name())),
    };
    if (lo..=hi).contains(&level) {
        Ok(())
    } else {
        Err(format!("{} level {level} out of range ({lo} to {hi})", c.name()))
    }
}

/// What goes into the archive: the inputs, and how members are named and described.
#[derive(Clone, Debug)]
pub struct Members {
    /// Directory the paths are relative to (`-C`); `None`: the working directory.
    pub directory: Option<PathBuf>,
    /// Files and directories to archive (directories recursively), as member names.
    pub paths: Vec<PathBuf>,
    /// Order of directory entries.
    pub sort: SortOrder,
    /// Store this modification time (seconds, nanoseconds) for every member.
    pub mtime: Option<(i64, u32)>,
    /// Store this owner for every member.
    pub owner: Option<Owner>,
    /// Store this group for every member.
    pub group: Option<Owner>,
    /// Store numeric ids only, no user or group names.
    pub numeric_owner: bool,
    /// Members whose name (or any tail of it starting at a component) matches are left out,
    /// with everything under them.
    pub exclude: Vec<glob::Pattern>,
    /// Do not descend into directories on other filesystems than the input they are under.
    pub one_file_system: bool,
    /// Store extended attributes (pax `SCHILY.xattr.*`, as GNU tar `--xattrs`).
    pub xattrs: bool,
    /// Store POSIX ACLs as GNU tar `--acls` stores them: the text of pax `SCHILY.acl.access`
    /// and `SCHILY.acl.default` (star's records), not the raw `system.posix_acl_*` attributes.
    pub acls: bool,
}

impl Members {
    /// The given paths, relative to the working directory, directory order, the files' own
    /// times and owners.
    pub fn new(paths: Vec<PathBuf>) -> Members {
        Members {
            directory: None,
            paths,
            sort: SortOrder::None,
            mtime: None,
            owner: None,
            group: None,
            numeric_owner: false,
            exclude: Vec::new(),
            one_file_system: false,
            xattrs: false,
            acls: false,
        }
    }
}

/// What `pack` does and how.
pub struct PackOptions {
    /// Where the archive goes.
    pub output: Output,
    /// What goes into the archive, and how members are named and described.
    pub members: Members,
    /// Compression of the archive.
    pub compression: Compression,
    /// Compression level (`None`: the format's default).
    pub level: Option<i32>,
    /// Compression workers.
    pub threads: usize,
    /// Bytes of tar stream per independent compressed frame.
    pub frame_size: usize,
    /// [`cacheless::Durability::EachFile`] (the default): the archive file is durable, and its
    /// name, before `pack` returns; `Off { write_back: None }` (`--no-sync`): nothing is synced.
    /// The other variants are refused.
    pub durability: cacheless::Durability,
    /// How input files are read and the archive file written (mode, backend, request size,
    /// depth: the read-ahead of each input and the archive's writes in flight), and the budget
    /// every buffer comes out of.
    pub io: IoOptions,
    /// Threads reading files ahead of the writer.
    pub read_threads: usize,
    /// Counters to poll while it runs: file bytes read and files (`bytes`, `files`; their
    /// totals grow as the walk goes), archive bytes written (`output_bytes`), errors, and the
    /// cancel flag checked between entries and chunks.
    pub progress: Option<Arc<Progress>>,
}

impl PackOptions {
    /// Defaults: zstd at level 3, 32 MiB frames, one worker per CPU, directory order, durable,
    /// auto modes, the default I/O options and budget.
    pub fn new(output: Output, paths: Vec<PathBuf>) -> PackOptions {
        let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
        PackOptions {
            output,
            members: Members::new(paths),
            compression: Compression::Zstd,
            level: None,
            threads: cpus,
            frame_size: DEFAULT_FRAME_SIZE,
            durability: cacheless::Durability::EachFile,
            io: IoOptions::default(),
            read_threads: 8,
            progress: None,
        }
    }
}

/// What `pack` did.
#[derive(Debug, Serialize)]
pub struct PackReport {
    /// The archive's path, or `-` for a stream.
    #[serde(serialize_with = "cacheless::quote::serialize_path")]
    pub output: PathBuf,
    /// Compression and level.
    pub compression: Compression,
    /// Level used (0 where the format has none).
    pub level: i32,
    /// Independent compressed frames written (tar chunks, for an uncompressed archive).
    pub frames: u64,
    /// Bytes of tar stream per frame.
    pub frame_size: usize,
    /// Compression workers used (fewer than asked when the budget holds fewer frames).
    pub threads: usize,
    /// Frames that may be in flight at once (filled, compressing, waiting to be written).
    pub frames_in_flight: usize,
    /// Members written.
    pub entries: u64,
    /// Regular files with their data.
    pub files: u64,
    /// Directories.
    pub dirs: u64,
    /// Symbolic links.
    pub symlinks: u64,
    /// Hard links (stored once, later names as links).
    pub hardlinks: u64,
    /// FIFOs and device nodes.
    pub special: u64,
    /// Sparse files stored as pax sparse 1.0.
    pub sparse: u64,
    /// File data bytes read.
    pub input_bytes: u64,
    /// Uncompressed tar bytes.
    pub tar_bytes: u64,
    /// Archive bytes written.
    pub output_bytes: u64,
    /// How input files were read.
    pub read_modes: ModeCounts,
    /// How the archive file was written (`None` for a stream).
    pub write: Option<WriteReport>,
    /// Files that changed while they were read (stored as read, reported, exit 1).
    pub changed: u64,
    /// Warnings (sockets ignored, leading '/' removed), first 1000.
    pub warnings: Vec<String>,
    /// Members that failed (unreadable, changed), first 1000; the run went on past them.
    pub failures: Vec<String>,
    /// Number of failures.
    pub failure_count: u64,
    /// Wall time in seconds, including the final sync.
    pub elapsed_s: f64,
    /// The OS error's number of the first failure, where an OS call failed: for a caller that
    /// raises it as an OS error (the Python package).
    #[serde(skip)]
    pub first_failure_errno: Option<i32>,
}

impl PackReport {
    /// True when every member was stored as it was when walked.
    pub fn is_ok(&self) -> bool {
        self.failure_count == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_parse_as_gnu_tar_takes_them() {
        assert_eq!(Owner::parse("root", false), Ok(Owner { id: 0, name: "root".into() }));
        assert_eq!(Owner::parse("+0", true), Ok(Owner { id: 0, name: "root".into() }));
        assert_eq!(Owner::parse("builder:1234", false), Ok(Owner { id: 1234, name: "builder".into() }));
        assert!(Owner::parse("no-such-user-here", false).unwrap_err().contains("NAME:ID"));
        assert!(Owner::parse("x:y", true).is_err());
    }

    #[test]
    fn compression_follows_the_name() {
        for (n, c) in [
            ("a.tar.zst", Compression::Zstd),
            ("a.TZST", Compression::Zstd),
            ("a.tgz", Compression::Gzip),
            ("a.tar.xz", Compression::Xz),
            ("a.tar.lz4", Compression::Lz4),
            ("a.tar.bz2", Compression::Bzip2),
            ("a.tar", Compression::None),
        ] {
            assert_eq!(compression_for_name(Path::new(n)), Some(c), "{n}");
        }
        assert_eq!(compression_for_name(Path::new("backup.img")), None);
        assert_eq!(parse_compression("gz"), Ok(Compression::Gzip));
        assert!(parse_compression("rar").is_err());
        assert!(check_level(Compression::Gzip, 10).is_err() && check_level(Compression::Zstd, 19).is_ok());
    }
}
