//! `cacheless evict`: drop files' pages from the page cache and show residency before/after.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use cacheless::residency::{evict_path, Residency};
use cacheless::Progress;
use clap::Args;
use serde::Serialize;

use crate::common::CommonOpts;
use crate::ui;

/// Arguments of `cacheless evict`.
#[derive(Args, Debug)]
pub struct EvictArgs {
    /// Files to evict.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

#[derive(Serialize)]
struct Row {
    path: PathBuf,
    before: Residency,
    after: Residency,
}

pub fn run(args: &EvictArgs, common: &CommonOpts) -> Result<ExitCode> {
    let progress = Progress::new();
    let mut rows = Vec::new();
    for f in &args.files {
        match evict_path(f) {
            Ok((before, after)) => {
                if !common.json {
                    println!(
                        "{}: {} ({:.1}%) resident before, {} ({:.1}%) after",
                        f.display(),
                        ui::size(before.cached_bytes()),
                        before.fraction() * 100.0,
                        ui::size(after.cached_bytes()),
                        after.fraction() * 100.0
                    );
                }
                rows.push(Row { path: f.clone(), before, after });
            }
            Err(e) => ui::item_error(&progress, &e),
        }
    }
    if common.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    }
    Ok(if progress.errors() > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
