//! `cacheless clean`: the temporaries that killed or crashed jobs left behind (a file under a
//! temporary name, the benchmark's folder), removed where their writer provably holds them no
//! more (the locks of `cacheless::temps`), never a running job's, on this machine or another,
//! in this PID namespace or another; what nothing proves gone is left and named.

use crate::ExitCode;
use std::path::PathBuf;

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
    /// Why it was left: nothing proves its writer gone.
    #[serde(skip_serializing_if = "Option::is_none")]
    kept: Option<String>,
}

/// Runs `cacheless clean`: exit 0, or 1 where a folder could not be read or a temporary was
/// left because nothing proves its writer gone.
pub fn run(args: &CleanArgs, common: &CommonOpts) -> Result<ExitCode> {
    let dirs = if args.dirs.is_empty() { vec![PathBuf::from(".")] } else { args.dirs.clone() };
    let mut rows = Vec::new();
    let mut failed = false;
    for d in &dirs {
        let found = cacheless::temps::clean_tree(d, args.dry_run);
        for e in found.errors {
            failed = true;
            eprintln!("cacheless: {}", ui::printable(&e));
        }
        for (path, pid) in found.removed {
            if !common.json {
                let what = if args.dry_run { "would remove" } else { "removed" };
                println!("{what} {} (its writer, process {pid} where it ran, holds it no more)", ui::shown(&path));
            }
            rows.push(Row { path, pid, removed: !args.dry_run, kept: None });
        }
        for (path, pid, why) in found.kept {
            failed = true;
            eprintln!("cacheless: left {} (process {pid} where it ran): {why}", ui::shown(&path));
            rows.push(Row { path, pid, removed: false, kept: Some(why) });
        }
    }
    if common.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    }
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
