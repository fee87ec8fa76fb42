//! `cacheless cp`: copy files and trees. Each file is written under a temporary name beside its
//! destination, made durable, and renamed into place; mode and times are kept.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use cacheless::{copy_file, Budget, CopyReport, Error, ErrorKind, Progress};
use clap::Args;

use crate::common::CommonOpts;
use crate::ui;

/// Arguments of `cacheless cp`.
#[derive(Args, Debug)]
pub struct CpArgs {
    /// Copy directories recursively (symlinks inside are copied as symlinks).
    #[arg(short = 'r', short_alias = 'R', long = "recursive")]
    pub recursive: bool,
    /// Do not fdatasync each file before renaming it into place (faster, not crash-safe).
    #[arg(long)]
    pub no_sync: bool,
    /// Sources, then the destination (a directory when there are several sources).
    #[arg(required = true, num_args = 2..)]
    pub paths: Vec<PathBuf>,
}

struct Job<'a> {
    common: &'a CommonOpts,
    recursive: bool,
    budget: Budget,
    no_sync: bool,
    progress: Arc<Progress>,
    reports: Vec<CopyReport>,
}

fn times(m: &std::fs::Metadata) -> (SystemTime, SystemTime) {
    // st_*time_nsec is 0..1e9 (the kernel's timespec).
    let t = |s: i64, ns: i64| {
        let ns = u32::try_from(ns).unwrap_or(0);
        match u64::try_from(s) {
            Ok(s) => UNIX_EPOCH + Duration::new(s, ns),
            Err(_) => UNIX_EPOCH - Duration::new(s.unsigned_abs(), 0) + Duration::from_nanos(ns.into()),
        }
    };
    (t(m.atime(), m.atime_nsec()), t(m.mtime(), m.mtime_nsec()))
}

impl Job<'_> {
    fn file(&mut self, src: &Path, dst: &Path, meta: &std::fs::Metadata) -> Result<(), Error> {
        let mut dst = dst.to_path_buf();
        // Like cp, write through a destination symlink to the file it names.
        if let Ok(l) = std::fs::symlink_metadata(&dst) {
            if l.file_type().is_symlink() {
                if let Ok(real) = std::fs::canonicalize(&dst) {
                    dst = real;
                }
            }
        }
        let ro = self.common.read_options(&self.budget);
        let mut wo = self.common.write_options(&self.budget);
        wo.sync = !self.no_sync;
        wo.permissions = Some(meta.mode() & 0o7777);
        let (at, mt) = times(meta);
        wo.atime = Some(at);
        wo.mtime = Some(mt);
        let r = copy_file(src, &dst, &ro, &wo, &self.progress)?;
        if self.common.verbose {
            eprintln!(
                "cacheless: {} -> {}: read {} ({}), write {} ({}){}",
                src.display(),
                dst.display(),
                r.read.mode,
                r.read.reason,
                r.write.decision.mode,
                r.write.decision.reason,
                r.write.backend.as_ref().map(|b| format!(", {} ({})", b.name, b.reason)).unwrap_or_default()
            );
        }
        self.reports.push(r);
        Ok(())
    }

    fn symlink(&mut self, src: &Path, dst: &Path) -> Result<(), Error> {
        let target = std::fs::read_link(src).map_err(|e| Error::io("readlink", src, e))?;
        let tmp = dst.with_file_name(format!(".{}.cacheless-{}.tmp", dst.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(), std::process::id()));
        std::os::unix::fs::symlink(&target, &tmp).map_err(|e| Error::io("symlink", dst, e))?;
        std::fs::rename(&tmp, dst).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Error::io("rename", dst, e)
        })?;
        self.progress.file_done();
        Ok(())
    }

    /// Copies `src` (any type) to `dst`; per-item errors are reported and counted, not fatal.
    fn any(&mut self, src: &Path, dst: &Path) {
        if self.progress.is_cancelled() {
            return;
        }
        // Symlinks are copied as links with -r; otherwise the file they name is copied.
        let lmeta = match std::fs::symlink_metadata(src) {
            Ok(m) => m,
            Err(e) => return ui::item_error(&self.progress, &Error::io("stat", src, e)),
        };
        let meta = if lmeta.file_type().is_symlink() && !self.recursive {
            match std::fs::metadata(src) {
                Ok(m) => m,
                Err(e) => return ui::item_error(&self.progress, &Error::io("stat", src, e)),
            }
        } else {
            lmeta
        };
        let ft = meta.file_type();
        let r = if ft.is_symlink() {
            self.symlink(src, dst)
        } else if ft.is_dir() {
            if self.recursive {
                self.dir(src, dst, &meta);
                Ok(())
            } else {
                Err(Error::new(ErrorKind::InvalidInput, "copy", src, "is a directory (use -r to copy it)"))
            }
        } else if ft.is_file() {
            self.file(src, dst, &meta)
        } else {
            Err(Error::new(ErrorKind::InvalidInput, "copy", src, "not a regular file, directory or symlink; skipped"))
        };
        if let Err(e) = r {
            ui::item_error(&self.progress, &e);
        }
    }

    fn dir(&mut self, src: &Path, dst: &Path, meta: &std::fs::Metadata) {
        if let (Ok(s), Ok(d)) = (std::fs::canonicalize(src), dst.parent().map(std::fs::canonicalize).unwrap_or(Ok(PathBuf::from(".")))) {
            if d.starts_with(&s) {
                return ui::item_error(
                    &self.progress,
                    &Error::new(ErrorKind::InvalidInput, "copy", dst, format!("cannot copy directory '{}' into itself", src.display())),
                );
            }
        }
        match std::fs::create_dir(dst) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dst.is_dir() => {}
            Err(e) => return ui::item_error(&self.progress, &Error::io("mkdir", dst, e)),
        }
        // Writable while we fill it; the source's mode and times are set after its contents.
        let _ = std::fs::set_permissions(dst, std::fs::Permissions::from_mode(0o700));
        match std::fs::read_dir(src) {
            Ok(rd) => {
                let mut names: Vec<_> = rd.filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
                names.sort();
                for n in names {
                    self.any(&src.join(&n), &dst.join(&n));
                }
            }
            Err(e) => ui::item_error(&self.progress, &Error::io("read directory", src, e)),
        }
        if let Err(e) = std::fs::set_permissions(dst, std::fs::Permissions::from_mode(meta.mode() & 0o7777)) {
            ui::item_error(&self.progress, &Error::io("chmod", dst, e));
        }
        let (at, mt) = times(meta);
        if let Ok(f) = std::fs::File::open(dst) {
            let _ = f.set_times(std::fs::FileTimes::new().set_accessed(at).set_modified(mt));
        }
    }
}

fn total_bytes(p: &Path, recursive: bool) -> (u64, u64) {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_file() => (m.len(), 1),
        Ok(m) if m.is_dir() && recursive => std::fs::read_dir(p)
            .map(|rd| rd.filter_map(|e| e.ok()).map(|e| total_bytes(&e.path(), true)).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1)))
            .unwrap_or((0, 0)),
        Ok(m) if m.file_type().is_symlink() && !recursive => std::fs::metadata(p).map(|m| (m.len(), 1)).unwrap_or((0, 0)),
        _ => (0, 0),
    }
}

pub fn run(args: &CpArgs, common: &CommonOpts) -> Result<ExitCode> {
    let (srcs, dst) = args.paths.split_at(args.paths.len() - 1);
    let dst = &dst[0];
    let dst_is_dir = dst.is_dir();
    if srcs.len() > 1 && !dst_is_dir {
        eprintln!("cacheless: target '{}' is not a directory", dst.display());
        return Ok(ExitCode::from(1));
    }
    let progress = Arc::new(Progress::new());
    let signals = ui::Signals::register(&progress);
    if ui::Bar::wanted(common.json) {
        // Totals only feed the bar's ETA: no tree walk when nothing is drawn.
        for s in srcs {
            let (b, n) = total_bytes(s, args.recursive);
            progress.add_total_bytes(b);
            progress.add_total_files(n);
        }
    }
    let mut job = Job { common, recursive: args.recursive, budget: common.budget(), no_sync: args.no_sync, progress: progress.clone(), reports: Vec::new() };
    {
        let _bar = ui::Bar::start(&progress, common.json, ui::Measure::Output);
        for s in srcs {
            let target = if dst_is_dir {
                match s.file_name() {
                    Some(n) => dst.join(n),
                    None => dst.join(s.canonicalize().ok().and_then(|c| c.file_name().map(|n| n.to_owned())).unwrap_or_default()),
                }
            } else {
                dst.clone()
            };
            job.any(s, &target);
        }
    }
    if let Some(code) = signals.exit_code() {
        eprintln!("cacheless: interrupted; files not yet finished were removed");
        return Ok(code);
    }
    if common.json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "files": job.reports, "errors": progress.errors() }))?);
    }
    Ok(if progress.errors() > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
