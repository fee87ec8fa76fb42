//! `cacheless clean`: the temporaries that killed or crashed jobs left behind (a file under a
//! temporary name, the benchmark's folder), found by their owner: removed where the process
//! that made them is gone (or its boot is over), never a running job's.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use serde::Serialize;

use crate::common::CommonOpts;
use crate::ui;

/// Arguments of `cacheless clean`.
#[derive(Args, Debug)]
pub struct CleanArgs {
    /// List what would be removed, and remove nothing.
    #[arg(short = 'n', long)]
    pub dry_run: bool,
    /// Folders to look under, whole trees (default: the current folder).
    pub dirs: Vec<PathBuf>,
}

#[derive(Serialize)]
struct Row {
    #[serde(serialize_with = "cacheless::quote::serialize_path")]
    path: PathBuf,
    pid: u32,
    removed: bool,
}

/// Runs `cacheless clean`: exit 0, or 1 where a folder could not be read.
pub fn run(args: &CleanArgs, common: &CommonOpts) -> Result<ExitCode> {
    let dirs = if args.dirs.is_empty() { vec![PathBuf::from(".")] } else { args.dirs.clone() };
    let mut rows = Vec::new();
    let mut failed = false;
    for d in &dirs {
        let (found, errors) = cacheless::temps::clean_tree(d, args.dry_run);
        for e in errors {
            failed = true;
            eprintln!("cacheless: {}", ui::printable(&e));
        }
        for (path, pid) in found {
            if !common.json {
                let what = if args.dry_run { "would remove" } else { "removed" };
                println!("{what} {} (left by process {pid}, which is gone)", ui::shown(&path));
            }
            rows.push(Row { path, pid, removed: !args.dry_run });
        }
    }
    if common.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    }
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
