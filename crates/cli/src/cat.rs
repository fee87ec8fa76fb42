//! `cacheless cat`: stream files to standard output with read-ahead, leaving no cache behind.

use crate::ExitCode;
use std::io;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use cacheless::{Progress, Reader};
use clap::Args;

use crate::common::CommonOpts;
use crate::ui;

/// Arguments of `cacheless cat`.
#[derive(Args, Debug)]
pub struct CatArgs {
    /// Files to print, in order ("-" is standard input).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// Writes all of `data` to fd 1 without an extra copy through Rust's line buffer.
fn write_stdout(data: &[u8]) -> io::Result<()> {
    cacheless::sys::write_all(io::stdout().as_fd(), data)
}

fn is_epipe(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::BrokenPipe
}

pub fn run(args: &CatArgs, common: &CommonOpts) -> Result<ExitCode> {
    let ro = cacheless::ReadOptions::from(common.io());
    let progress = Arc::new(Progress::new());
    for f in &args.files {
        if f.as_os_str() == "-" {
            match ui::each_stdin_chunk(write_stdout) {
                Ok(()) => {}
                Err(e) if is_epipe(&e) => return Ok(ExitCode::SUCCESS),
                Err(e) => ui::item_error(&progress, &cacheless::Error::io("read", "-", e)),
            }
            continue;
        }
        if crate::remote::is_remote(f) {
            let cancel = std::sync::atomic::AtomicBool::new(false);
            match crate::remote::stream(f, &common.io(), &common.remote, &cancel, |d| {
                write_stdout(d).map_err(|e| cacheless::Error::io("write", "standard output", e))
            }) {
                Ok(()) => {}
                Err(e) if e.errno() == Some(cacheless::sys::consts::EPIPE) => return Ok(ExitCode::SUCCESS),
                Err(e) => ui::item_error(&progress, &e),
            }
            continue;
        }
        let meta = match std::fs::metadata(f) {
            Ok(m) => m,
            Err(e) => {
                ui::item_error(&progress, &cacheless::Error::io("open", f, e));
                continue;
            }
        };
        if !meta.is_file() && !meta.is_dir() {
            // Pipes, devices, /proc files: no O_DIRECT or cache to manage; a plain copy.
            match std::fs::File::open(f).and_then(|mut r| io::copy(&mut r, &mut io::stdout().lock())) {
                Ok(_) => {}
                Err(e) if is_epipe(&e) => return Ok(ExitCode::SUCCESS),
                Err(e) => ui::item_error(&progress, &cacheless::Error::io("read", f, e)),
            }
            continue;
        }
        let mut r = match Reader::open(f, &ro) {
            Ok(r) => r,
            Err(e) => {
                ui::item_error(&progress, &e);
                continue;
            }
        };
        if common.verbose > 0 {
            eprintln!("cacheless: {}: {} ({})", ui::shown(f), r.decision().mode, r.decision().reason);
        }
        loop {
            match r.next_chunk() {
                Ok(Some(chunk)) => {
                    if let Err(e) = write_stdout(&chunk) {
                        if is_epipe(&e) {
                            return Ok(ExitCode::SUCCESS);
                        }
                        return Err(anyhow::Error::new(e).context("write to standard output"));
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    ui::item_error(&progress, &e);
                    break;
                }
            }
        }
    }
    Ok(if progress.errors() > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
