//! The two settings a caller picks by name: how a file is read or written ([`Mode`]) and which
//! I/O backend runs the requests ([`BackendKind`]); and the mode a file got ([`Taken`]). A leaf: the policy, the backends, the
//! errors' hints and the options all name them.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// How a file is read or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Pick per file from its size, residency and filesystem; the choice and reason are reported.
    Auto,
    /// O_DIRECT: aligned requests bypass the page cache; unaligned edges go through bounce buffers,
    /// and the unaligned tail of a written file is written after clearing O_DIRECT.
    Direct,
    /// Uncached buffered I/O (RWF_DONTCACHE, Linux 6.14+, ext4 6.17+, XFS 6.16+).
    DontCache,
    /// Buffered I/O that drops its pages behind itself: writes are pushed out in windows with
    /// sync_file_range and then dropped with fadvise(DONTNEED) (write-behind); reads drop the
    /// pages they brought in (drop-behind). Named `writebehind` on the command line and in
    /// reports, where `dropbehind` is accepted too.
    #[serde(rename = "writebehind")]
    DropBehind,
    /// Plain buffered I/O through the page cache (the baseline; leaves the cache full).
    Buffered,
}

impl Mode {
    /// The lowercase name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Direct => "direct",
            Mode::DontCache => "dontcache",
            Mode::DropBehind => "writebehind",
            Mode::Buffered => "buffered",
        }
    }

    /// Every mode, in the order reports list them.
    pub const ALL: [Mode; 5] = [Mode::Buffered, Mode::Direct, Mode::DontCache, Mode::DropBehind, Mode::Auto];
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "auto" => Mode::Auto,
            "direct" | "o_direct" => Mode::Direct,
            "dontcache" | "uncached" => Mode::DontCache,
            "writebehind" | "write-behind" | "dropbehind" => Mode::DropBehind,
            "buffered" => Mode::Buffered,
            other => return Err(format!("unknown mode '{other}': expected auto, direct, dontcache, writebehind or buffered")),
        })
    }
}

/// The mode a file was read or written with: what the engine took for it, never `Auto` (a
/// requested [`Mode`] may be). A decision's (`cacheless::Decision`) mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Taken {
    /// O_DIRECT.
    Direct,
    /// Uncached buffered I/O (RWF_DONTCACHE).
    DontCache,
    /// Buffered I/O that drops its pages behind itself (`writebehind` in reports).
    #[serde(rename = "writebehind")]
    DropBehind,
    /// Plain buffered I/O.
    Buffered,
    /// No data was read or written: the copy shares the source's extents (a reflink), or it
    /// copies attributes only. Reports say `auto`, the word they have always given it.
    #[serde(rename = "auto")]
    NoData,
    /// Fetched from an `s3://` or `http(s)://` object (ranged GETs), not read from a file.
    Remote,
}

impl Taken {
    /// The name reports give it ([`Mode::name`] of the same mode).
    pub fn name(self) -> &'static str {
        match self {
            Taken::Remote => "remote",
            t => Mode::from(t).name(),
        }
    }
}

impl From<Taken> for Mode {
    fn from(t: Taken) -> Mode {
        match t {
            Taken::Direct => Mode::Direct,
            Taken::DontCache => Mode::DontCache,
            Taken::DropBehind => Mode::DropBehind,
            Taken::Buffered => Mode::Buffered,
            Taken::NoData | Taken::Remote => Mode::Auto,
        }
    }
}

impl Mode {
    /// The mode taken when this one is forced; `None` for `Auto`, which the policy decides.
    pub fn forced(self) -> Option<Taken> {
        match self {
            Mode::Auto => None,
            Mode::Direct => Some(Taken::Direct),
            Mode::DontCache => Some(Taken::DontCache),
            Mode::DropBehind => Some(Taken::DropBehind),
            Mode::Buffered => Some(Taken::Buffered),
        }
    }
}

impl fmt::Display for Taken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// io_uring when the kernel allows it (EPERM/ENOSYS/ENOMEM at setup fall back to threads).
    Auto,
    /// io_uring or an error.
    Uring,
    /// A thread pool doing pread/pwrite/preadv2/pwritev2.
    Threads,
}

impl BackendKind {
    /// The lowercase name used in reports and accepted by `FromStr`.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Auto => "auto",
            BackendKind::Uring => "uring",
            BackendKind::Threads => "threads",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(BackendKind::Auto),
            "uring" | "io_uring" | "io-uring" => Ok(BackendKind::Uring),
            "threads" | "thread" | "sync" => Ok(BackendKind::Threads),
            o => Err(format!("unknown backend '{o}': expected auto, uring or threads")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_and_the_command_line_use_one_name_per_mode() {
        for m in Mode::ALL {
            assert_eq!(serde_json::to_value(m).unwrap(), m.name(), "{m:?}");
            assert_eq!(m.name().parse::<Mode>().unwrap(), m);
        }
        for b in [BackendKind::Auto, BackendKind::Uring, BackendKind::Threads] {
            assert_eq!(serde_json::to_value(b).unwrap(), b.name(), "{b:?}");
        }
    }
}
