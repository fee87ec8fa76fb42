//! `cacheless hash`: checksums printed exactly like sha256sum (`HASH  PATH`), so `sha256sum -c`
//! accepts the sha256 output.

use crate::ExitCode;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::Result;
use cacheless::digest::{self, Algo, Hasher};
use cacheless::{Progress, Reader};
use clap::Args;
use serde::Serialize;

use crate::common::CommonOpts;
use crate::ui;

/// Arguments of `cacheless hash`.
#[derive(Args, Debug)]
pub struct HashArgs {
    /// Algorithm: sha256, blake3 or xxh3.
    #[arg(long, default_value = "sha256")]
    pub algo: Algo,
    /// Files to hash ("-" is standard input).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// The line sha256sum (GNU coreutils 9.1) prints, as bytes: a name with a backslash, a newline
/// or a carriage return has them escaped (`\\`, `\n`, `\r`) and the line starts with a
/// backslash; any other byte of the name is written as it is, so that `sha256sum -c` finds the
/// file by its exact name.
pub fn sum_line(digest: &str, path: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let name = path.as_os_str().as_bytes();
    let mut line = Vec::with_capacity(digest.len() + name.len() + 4);
    if name.iter().any(|b| matches!(b, b'\\' | b'\n' | b'\r')) {
        line.push(b'\\');
        line.extend_from_slice(digest.as_bytes());
        line.extend_from_slice(b"  ");
        for &b in name {
            match b {
                b'\\' => line.extend_from_slice(b"\\\\"),
                b'\n' => line.extend_from_slice(b"\\n"),
                b'\r' => line.extend_from_slice(b"\\r"),
                b => line.push(b),
            }
        }
    } else {
        line.extend_from_slice(digest.as_bytes());
        line.extend_from_slice(b"  ");
        line.extend_from_slice(name);
    }
    line.push(b'\n');
    line
}

#[derive(Serialize)]
struct Row {
    #[serde(serialize_with = "cacheless::quote::serialize_path")]
    path: PathBuf,
    algo: Algo,
    digest: String,
    mode: Option<cacheless::Taken>,
}

fn hash_file(f: &Path, algo: Algo, common: &CommonOpts, ro: &cacheless::ReadOptions) -> Result<(String, Option<cacheless::Taken>), cacheless::Error> {
    let mut h = Hasher::new(algo);
    if f.as_os_str() == "-" {
        ui::each_stdin_chunk(|d| {
            h.update(d);
            Ok(())
        })
        .map_err(|e| cacheless::Error::io("read", f, e))?;
        return Ok((h.hex(), None));
    }
    if crate::remote::is_remote(f) {
        let cancel = std::sync::atomic::AtomicBool::new(false);
        crate::remote::stream(f, &common.io(), &common.remote, &cancel, |d| {
            h.update(d);
            Ok(())
        })?;
        return Ok((h.hex(), None));
    }
    let mut r = Reader::open(f, ro)?;
    if common.verbose > 0 {
        eprintln!("cacheless: {}: {} ({})", ui::shown(f), r.decision().mode, r.decision().reason);
    }
    let digest = digest::hash_reader(&mut r, algo, &Progress::new())?;
    Ok((digest, Some(r.decision().mode)))
}

pub fn run(args: &HashArgs, common: &CommonOpts) -> Result<ExitCode> {
    let ro = cacheless::ReadOptions::from(common.io());
    let progress = Progress::new();
    let mut rows = Vec::new();
    let mut out = io::stdout().lock();
    for f in &args.files {
        match hash_file(f, args.algo, common, &ro) {
            Ok((digest, mode)) => {
                if common.json {
                    rows.push(Row { path: f.clone(), algo: args.algo, digest, mode });
                } else {
                    out.write_all(&sum_line(&digest, f))?;
                }
            }
            Err(e) => ui::item_error(&progress, &e),
        }
    }
    if common.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
    }
    out.flush()?;
    Ok(if progress.errors() > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
