//! `cacheless evict`: drop files' pages from the page cache and show residency before/after.

use crate::ExitCode;
use std::path::PathBuf;

use anyhow::Result;
use cacheless::residency::evict_path;
use cacheless::Progress;
use clap::Args;

use crate::common::CommonOpts;
use crate::ui;

/// Arguments of `cacheless evict`.
#[derive(Args, Debug)]
pub struct EvictArgs {
    /// Files to evict.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// Runs `cacheless evict`: exit 0 when every file was evicted, 1 when one could not be.
pub fn run(args: &EvictArgs, common: &CommonOpts) -> Result<ExitCode> {
    let progress = Progress::new();
    let mut rows = Vec::new();
    for f in &args.files {
        match evict_path(f) {
            Ok(e) => {
                if !common.json {
                    println!(
                        "{}: {} ({:.1}%) resident before, {} ({:.1}%) after",
                        ui::shown(f),
                        ui::size(e.before.cached_bytes()),
                        e.before.fraction() * 100.0,
                        ui::size(e.after.cached_bytes()),
                        e.after.fraction() * 100.0
                    );
                }
                rows.push(e);
            }
            Err(e) => ui::item_error(&progress, &e),
        }
    }
    if common.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    }
    Ok(if progress.errors() > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
