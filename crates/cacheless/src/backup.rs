//! Backups of replaced files as GNU names them (gnulib's `backupfile`): what `cp --backup` and
//! `extract --backup` share.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;

use crate::sys::OFlags;
use serde::Serialize;

use crate::sys;

/// How backups of replaced destinations are named (GNU's `--backup=CONTROL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BackupKind {
    /// `NAME` + suffix (`simple`, `never`).
    Simple,
    /// `NAME.~N~` (`numbered`, `t`).
    Numbered,
    /// Numbered where numbered backups exist, else simple (`existing`, `nil`).
    Existing,
}

impl BackupKind {
    /// The kind a `--backup=CONTROL` word names (GNU's words, whole): `None` for `none` and
    /// `off` (no backups).
    pub fn from_control(word: &str) -> Result<Option<BackupKind>, String> {
        match word {
            "none" | "off" => Ok(None),
            "simple" | "never" => Ok(Some(BackupKind::Simple)),
            "existing" | "nil" => Ok(Some(BackupKind::Existing)),
            "numbered" | "t" => Ok(Some(BackupKind::Numbered)),
            _ => Err(format!("{word:?}: none (off), simple (never), existing (nil) or numbered (t)")),
        }
    }
}

/// The name a backup of `name` (relative to the folder `dir`, which may be the working
/// directory's `CWD`) gets, GNU's `find_backup_file_name`: `name` and `suffix` (`simple`),
/// `name.~N~` one above the highest such name there (`numbered`), or numbered where one is there
/// already (`existing`). Relative to `dir`, as `name` is.
pub fn backup_name_in(dir: BorrowedFd<'_>, name: &OsStr, kind: BackupKind, suffix: &str) -> io::Result<OsString> {
    let name = name.as_bytes();
    let (dir_part, base) = match name.iter().rposition(|&b| b == b'/') {
        Some(i) => (&name[..=i], &name[i + 1..]),
        None => (&b""[..], name),
    };
    let parent = if dir_part.is_empty() { OsStr::new(".") } else { OsStr::from_bytes(dir_part) };
    let numbered = || -> io::Result<u64> {
        // The highest N among BASE.~N~ in the directory.
        let folder = sys::lookat(dir, parent, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC)?;
        let mut best = 0u64;
        let mut prefix = base.to_vec();
        prefix.extend_from_slice(b".~");
        for n in sys::entry_names(&folder)? {
            let n = n.as_bytes();
            if let Some(rest) = n.strip_prefix(&prefix[..]).and_then(|r| r.strip_suffix(b"~")) {
                if !rest.is_empty() && rest[0] != b'0' && rest.iter().all(u8::is_ascii_digit) {
                    if let Ok(v) = std::str::from_utf8(rest).unwrap_or("0").parse::<u64>() {
                        best = best.max(v);
                    }
                }
            }
        }
        Ok(best)
    };
    let highest = match kind {
        BackupKind::Simple => None,
        BackupKind::Numbered => Some(numbered()?),
        BackupKind::Existing => Some(numbered()?).filter(|&n| n > 0),
    };
    let mut rel = name.to_vec();
    match highest {
        Some(n) => rel.extend_from_slice(format!(".~{}~", n + 1).as_bytes()),
        None => rel.extend_from_slice(suffix.as_bytes()),
    }
    Ok(OsStr::from_bytes(&rel).to_os_string())
}
