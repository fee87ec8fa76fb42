//! `cacheless info`: what the kernel and each path's filesystem support, how much of a file is
//! cached, and which mode auto would choose for it, with the reason.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use cacheless::caps::{self, FsCaps, Support, SystemCaps};
use cacheless::policy::{self, Decision};
use cacheless::residency::{self, Residency};
use cacheless::{Mode, Progress};
use clap::Args;
use serde::Serialize;

use crate::common::CommonOpts;
use crate::ui;

/// Arguments of `cacheless info`.
#[derive(Args, Debug)]
pub struct InfoArgs {
    /// Files or directories to describe (default: the current directory).
    pub paths: Vec<PathBuf>,
}

#[derive(Serialize)]
struct PathInfo {
    path: PathBuf,
    kind: &'static str,
    size: Option<u64>,
    fs: FsCaps,
    residency: Option<Residency>,
    #[serde(skip_serializing_if = "Option::is_none")]
    residency_unknown: Option<String>,
    read: Option<Decision>,
    /// How a file written here would be written; `None` where no file can be created.
    write: Option<Decision>,
}

#[derive(Serialize)]
struct Report<'a> {
    system: &'a SystemCaps,
    paths: Vec<PathInfo>,
}

fn support<T>(s: &Support<T>, yes: impl Fn(&T) -> String) -> String {
    match s {
        Ok(v) => format!("yes{}", yes(v)),
        Err(u) => format!("no ({})", u.reason),
    }
}

/// A decision that was refused, shown as such with what to ask for instead.
fn refused(r: policy::Refusal) -> Decision {
    let hint = ui::hint_text(&r.hint).map(|h| format!("; {h}")).unwrap_or_default();
    Decision { mode: r.mode, reason: format!("refused: {}{hint}", r.reason) }
}

/// A directory where no probe file can be created (a read-only filesystem such as erofs,
/// squashfs or proc, or no permission): its filesystem named from statfs, the features
/// reported as not probed, with why.
fn unprobed(path: &Path, meta: &std::fs::Metadata, why: &std::io::Error) -> Result<FsCaps, cacheless::Error> {
    use std::os::unix::fs::MetadataExt;
    let st = rustix::fs::statfs(path).map_err(|e| cacheless::Error::io("statfs", path, e.into()))?;
    let not = caps::Unavailable { reason: format!("not probed: no file can be created here ({})", caps::errno_name(why)), errno: why.raw_os_error() };
    Ok(FsCaps { dev: meta.dev(), fs_type: caps::fs_name(st.f_type as u64), direct: Err(not.clone()), dontcache: Err(not) })
}

fn describe(path: &Path, mode: Mode) -> Result<PathInfo, cacheless::Error> {
    let meta = std::fs::metadata(path).map_err(|e| cacheless::Error::io("stat", path, e))?;
    if meta.is_dir() {
        let (fs, write) = match caps::for_dir(path) {
            Ok(fs) => ((*fs).clone(), Some(policy::decide_write(mode, &fs, None).unwrap_or_else(refused))),
            Err(e) => (unprobed(path, &meta, &e)?, None),
        };
        return Ok(PathInfo { path: path.into(), kind: "directory", size: None, fs, residency: None, residency_unknown: None, read: None, write });
    }
    let f = std::fs::File::open(path).map_err(|e| cacheless::Error::io("open", path, e))?;
    let fs = caps::for_file(&f).map_err(|e| cacheless::Error::io("probe", path, e))?;
    let len = meta.len();
    // Unknown residency (no permission to ask) is reported, and auto decides without it.
    let (res, residency_unknown) = match residency::residency(&f, 0, len) {
        Ok(r) => (Some(r), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let read = policy::decide_read(mode, &fs, len, res.map(|r| r.cached_bytes().min(len))).unwrap_or_else(refused);
    let write = policy::decide_write(mode, &fs, Some(len)).unwrap_or_else(refused);
    Ok(PathInfo { path: path.into(), kind: "file", size: Some(len), fs: (*fs).clone(), residency: res, residency_unknown, read: Some(read), write: Some(write) })
}

pub fn run(args: &InfoArgs, common: &CommonOpts) -> Result<ExitCode> {
    let sys = caps::system();
    let paths = if args.paths.is_empty() { vec![PathBuf::from(".")] } else { args.paths.clone() };
    let progress = Progress::new();
    let mut infos = Vec::new();
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
        if let Some(m) = sys.memlock_limit {
            println!("  memlock limit  {}", ui::size(m));
        }
        for i in &infos {
            println!("{} ({}, {} on device {}:{})", i.path.display(), i.kind, i.fs.fs_type, rustix::fs::major(i.fs.dev), rustix::fs::minor(i.fs.dev));
            println!(
                "  O_DIRECT       {}",
                support(&i.fs.direct, |a| format!(", memory alignment {} B, offset alignment {} B (from {})", a.mem, a.offset, match a.source {
                    caps::AlignSource::Statx => "statx STATX_DIOALIGN",
                    caps::AlignSource::Sysfs => "sysfs logical_block_size",
                    caps::AlignSource::Default => "default",
                }))
            );
            println!("  RWF_DONTCACHE  {}", support(&i.fs.dontcache, |_| String::new()));
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
                println!("  read with      {}: {}", d.mode, d.reason);
            }
            match &i.write {
                Some(w) => println!("  write with     {}: {}", w.mode, w.reason),
                None => println!("  write with     nothing: no file can be created here"),
            }
        }
    }
    Ok(if progress.errors() > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
