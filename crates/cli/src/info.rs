//! `cacheless info`: what the kernel and each path's filesystem support, how much of a file is
//! cached, and which mode auto would choose for it, with the reason.

use crate::ExitCode;
use std::path::PathBuf;

use anyhow::Result;
use cacheless::caps::{self, Support};
use cacheless::info::{describe, Plan, Report};
use cacheless::Progress;
use clap::Args;

use crate::common::CommonOpts;
use crate::ui;

/// Arguments of `cacheless info`.
#[derive(Args, Debug)]
pub struct InfoArgs {
    /// Files or directories to describe (default: the current directory).
    pub paths: Vec<PathBuf>,
}

fn support<T>(s: &Support<T>, yes: impl Fn(&T) -> String) -> String {
    match s {
        Ok(v) => format!("yes{}", yes(v)),
        Err(u) => format!("no ({})", u.reason),
    }
}

/// A plan as one line: the mode and why, and for a refusal the flags to pass instead.
fn plan(p: &Plan) -> String {
    let hint = p.hint.as_ref().map(ui::hint_text).map(|h| format!("; {h}")).unwrap_or_default();
    format!("{}: {}{hint}", p.mode, p.reason)
}

pub fn run(args: &InfoArgs, common: &CommonOpts) -> Result<ExitCode> {
    let sys = caps::system();
    let paths = if args.paths.is_empty() { vec![PathBuf::from(".")] } else { args.paths.clone() };
    let progress = Progress::new();
    let mut infos = Vec::new();
    let (urls, paths): (Vec<PathBuf>, Vec<PathBuf>) = paths.into_iter().partition(|p| crate::remote::is_remote(p));
    if !urls.is_empty() {
        // Objects only: their reports, without the local system's.
        let mut reports = Vec::new();
        for u in &urls {
            match crate::remote::describe(u, &common.io(), &common.remote) {
                Ok(r) => reports.push(r),
                Err(e) => ui::item_error(&progress, &e),
            }
        }
        if common.json {
            println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "objects": reports }))?);
        } else {
            reports.iter().for_each(crate::remote::print_report);
        }
        if paths.is_empty() {
            return Ok(if progress.errors() > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS });
        }
    }
    for p in &paths {
        match describe(p, common.mode) {
            Ok(i) => infos.push(i),
            Err(e) => ui::item_error(&progress, &e),
        }
    }
    if common.json {
        println!("{}", serde_json::to_string_pretty(&Report { system: sys, paths: infos })?);
    } else {
        println!("kernel {}", sys.kernel);
        println!("  io_uring       {}", support(&sys.uring, |_| String::new()));
        println!("  cachestat      {}", support(&sys.cachestat, |_| String::new()));
        println!("  huge pages     {}", support(&sys.result_huge_pages, |_| ", for files read whole into memory".to_string()));
        if let Some(m) = sys.memlock_limit {
            println!("  memlock limit  {}", ui::size(m));
        }
        for i in &infos {
            println!("{} ({}, {} on device {}:{})", ui::shown(&i.path), i.kind, i.fs.fs_type, cacheless::sys::major(i.fs.dev), cacheless::sys::minor(i.fs.dev));
            println!(
                "  O_DIRECT       {}",
                support(&i.fs.direct, |a| format!(
                    ", memory alignment {} B, offset alignment {} B (from {})",
                    a.mem,
                    a.offset,
                    match a.source {
                        caps::AlignSource::Statx => "statx STATX_DIOALIGN",
                        caps::AlignSource::Sysfs => "sysfs logical_block_size",
                        caps::AlignSource::Default => "default",
                    }
                ))
            );
            println!("  RWF_DONTCACHE  {}", support(&i.fs.dontcache, |_| String::new()));
            println!("  O_TMPFILE      {}", support(&i.tmpfile, |_| ", new files made without a name".to_string()));
            println!("  linkat by fd   {}", support(&i.flink, |_| String::new()));
            if let Some(why) = &i.fs.direct_write_cached {
                println!("  O_DIRECT write cached: {why}");
            }
            if let (Some(r), Some(size)) = (&i.residency, i.size) {
                println!(
                    "  resident       {} of {} ({:.1}%, {} pages dirty, via {:?})",
                    ui::size(r.cached_bytes().min(size)),
                    ui::size(size),
                    r.fraction() * 100.0,
                    r.dirty_pages,
                    r.source
                );
            }
            if let Some(why) = &i.residency_unknown {
                println!("  resident       unknown ({why})");
            }
            if let Some(d) = &i.read {
                println!("  read with      {}", plan(d));
            }
            match &i.write {
                Some(w) => println!("  write with     {}", plan(w)),
                None => println!("  write with     nothing: no file can be created here"),
            }
        }
    }
    Ok(if progress.errors() > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
