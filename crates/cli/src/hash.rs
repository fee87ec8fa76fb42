//! `cacheless hash`: checksums printed exactly like sha256sum (`HASH  PATH`), so `sha256sum -c`
//! accepts the sha256 output.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use cacheless::{Progress, Reader};
use clap::{Args, ValueEnum};
use serde::Serialize;
use sha2::Digest;

use crate::common::CommonOpts;
use crate::ui;

/// Hash algorithms.
#[derive(ValueEnum, Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Algo {
    /// SHA-256, as sha256sum.
    Sha256,
    /// BLAKE3 (256-bit), as b3sum.
    Blake3,
    /// XXH3 64-bit, as `xxhsum -H3` prints the digest.
    Xxh3,
}

/// Arguments of `cacheless hash`.
#[derive(Args, Debug)]
pub struct HashArgs {
    /// Algorithm.
    #[arg(long, value_enum, default_value = "sha256")]
    pub algo: Algo,
    /// Files to hash ("-" is standard input).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

enum Hasher {
    Sha256(sha2::Sha256),
    Blake3(Box<blake3::Hasher>),
    Xxh3(Box<xxhash_rust::xxh3::Xxh3>),
}

impl Hasher {
    fn new(a: Algo) -> Hasher {
        match a {
            Algo::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
            Algo::Blake3 => Hasher::Blake3(Box::new(blake3::Hasher::new())),
            Algo::Xxh3 => Hasher::Xxh3(Box::default()),
        }
    }
    fn update(&mut self, d: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(d),
            Hasher::Blake3(h) => {
                h.update(d);
            }
            Hasher::Xxh3(h) => h.update(d),
        }
    }
    fn hex(self) -> String {
        match self {
            Hasher::Sha256(h) => hex(&h.finalize()),
            Hasher::Blake3(h) => h.finalize().to_hex().to_string(),
            Hasher::Xxh3(h) => format!("{:016x}", h.digest()),
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The line sha256sum prints: names with a backslash or newline are escaped and the line
/// starts with a backslash.
pub fn sum_line(digest: &str, path: &Path) -> String {
    let name = path.to_string_lossy();
    if name.contains('\\') || name.contains('\n') || name.contains('\r') {
        let esc = name.replace('\\', "\\\\").replace('\n', "\\n").replace('\r', "\\r");
        format!("\\{digest}  {esc}")
    } else {
        format!("{digest}  {name}")
    }
}

#[derive(Serialize)]
struct Row {
    path: PathBuf,
    algo: Algo,
    digest: String,
    mode: Option<cacheless::Mode>,
}

fn hash_file(f: &Path, algo: Algo, common: &CommonOpts, budget: &cacheless::Budget) -> Result<(String, Option<cacheless::Mode>), cacheless::Error> {
    let mut h = Hasher::new(algo);
    if f.as_os_str() == "-" {
        ui::each_stdin_chunk(|d| {
            h.update(d);
            Ok(())
        })
        .map_err(|e| cacheless::Error::io("read", f, e))?;
        return Ok((h.hex(), None));
    }
    let mut r = Reader::open(f, &common.read_options(budget))?;
    if common.verbose {
        eprintln!("cacheless: {}: {} ({})", f.display(), r.decision().mode, r.decision().reason);
    }
    while let Some(c) = r.next_chunk()? {
        h.update(&c);
    }
    Ok((h.hex(), Some(r.decision().mode)))
}

pub fn run(args: &HashArgs, common: &CommonOpts) -> Result<ExitCode> {
    let budget = common.budget();
    let progress = Progress::new();
    let mut rows = Vec::new();
    let mut out = io::stdout().lock();
    for f in &args.files {
        match hash_file(f, args.algo, common, &budget) {
            Ok((digest, mode)) => {
                if common.json {
                    rows.push(Row { path: f.clone(), algo: args.algo, digest, mode });
                } else {
                    writeln!(out, "{}", sum_line(&digest, f))?;
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
