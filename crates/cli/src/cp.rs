//! `cacheless cp`: copy files and trees. The flags become the engine's tree-copy options
//! (`cacheless::tree`, which does the work: each file written under a temporary name beside its
//! destination, made durable, and renamed into place; mode and times kept, with `-a` also
//! owner, extended attributes, ACLs and hard links); this module prints what it reports.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use cacheless::digest::Algo;
use cacheless::{copy_tree, CopyReport, Method, Progress, Reflink, Sparse, TreeOptions};
use clap::Args;

use crate::common::{parse_size, CommonOpts};
use crate::ui;

/// Arguments of `cacheless cp`.
#[derive(Args, Debug)]
pub struct CpArgs {
    /// Copy directories recursively (symlinks inside are copied as symlinks).
    #[arg(short = 'r', short_alias = 'R', long = "recursive")]
    pub recursive: bool,
    /// Archive: recursive, and keep symlinks as links, hard links within the tree as hard
    /// links, mode, times, ownership (when root), extended attributes and ACLs.
    #[arg(short = 'a', long)]
    pub archive: bool,
    /// Do not overwrite an existing destination file.
    #[arg(short = 'n', long, conflicts_with = "update")]
    pub no_clobber: bool,
    /// Skip a file whose destination is as new and the same size (resumes an interrupted copy).
    #[arg(short = 'u', long)]
    pub update: bool,
    /// Clone the data (FICLONE) where source and destination share a filesystem that can:
    /// auto falls back to copying, always fails where cloning is impossible, never copies.
    #[arg(long, value_name = "WHEN", default_value = "auto", default_missing_value = "always", num_args = 0..=1, require_equals = true)]
    pub reflink: Reflink,
    /// Holes: auto keeps a sparse source's holes, always also turns zero blocks into holes,
    /// never writes every byte.
    #[arg(long, value_name = "WHEN", default_value = "auto")]
    pub sparse: Sparse,
    /// Once each copy is durable, read it back from the disk (not the cache) and compare its
    /// checksum with the source's, hashed while it was read; a mismatch is an error, and the
    /// copy is removed before it takes the destination's name.
    #[arg(long)]
    pub verify: bool,
    /// Checksum for --verify (xxh3 detects corruption; sha256 or blake3 to keep the digests).
    #[arg(long, value_name = "ALGO", default_value = "xxh3")]
    pub verify_algo: Algo,
    /// Move at most RATE bytes per second (e.g. 200M), smoothed within each second; applies
    /// to the bytes read and written.
    #[arg(long, value_name = "RATE", value_parser = parse_size)]
    pub bwlimit: Option<u64>,
    /// Worker threads copying files (default: 2 per CPU, 4 to 16).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Do not make the copies durable before renaming them into place (faster, not crash-safe).
    #[arg(long)]
    pub no_sync: bool,
    /// Sources, then the destination (a directory when there are several sources).
    #[arg(required = true, num_args = 2..)]
    pub paths: Vec<PathBuf>,
}

/// The fault injected between write and verification for the tests of `--verify`: with
/// `CACHELESS_TEST_CORRUPT_VERIFY=1`, the first byte of each copy is flipped on the disk once the
/// copy is durable. Not a documented option: tests only.
fn corrupt_hook() -> Option<cacheless::VerifyHook> {
    if std::env::var_os("CACHELESS_TEST_CORRUPT_VERIFY").as_deref() != Some(std::ffi::OsStr::new("1")) {
        return None;
    }
    Some(Arc::new(|f: &std::fs::File, _: &Path| {
        use std::os::unix::fs::FileExt;
        let mut b = [0u8; 1];
        if f.read_at(&mut b, 0)? == 1 {
            f.write_at(&[b[0] ^ 0xff], 0)?;
            f.sync_data()?;
        }
        Ok(())
    }))
}

pub fn run(args: &CpArgs, common: &CommonOpts) -> Result<ExitCode> {
    let (srcs, dst) = args.paths.split_at(args.paths.len() - 1);
    let dst = &dst[0];
    if srcs.len() > 1 && !dst.is_dir() {
        eprintln!("cacheless: target '{}' is not a directory", dst.display());
        return Ok(ExitCode::from(1));
    }
    let progress = Arc::new(Progress::new());
    let signals = ui::Signals::register(&progress);
    let mut o = TreeOptions::new(common.io());
    o.recursive = args.recursive;
    o.archive = args.archive;
    o.no_clobber = args.no_clobber;
    o.update = args.update;
    o.reflink = args.reflink;
    o.sparse = args.sparse;
    o.verify = args.verify.then_some(args.verify_algo);
    o.bwlimit = args.bwlimit;
    o.threads = args.threads;
    o.sync = !args.no_sync;
    // Totals only feed the bar's ETA: no tree walk when nothing is drawn.
    o.count_totals = ui::Bar::wanted(common.json);
    o.before_verify = corrupt_hook();
    o.on_error = Some(Arc::new(move |e: &cacheless::Error| ui::print_item_error(e)));
    if common.verbose {
        o.on_copied = Some(Arc::new(say_copied));
    }
    let report = {
        let _bar = ui::Bar::start(&progress, common.json, ui::Measure::Output);
        copy_tree(srcs, dst, &o, &progress)?
    };
    if let Some(code) = signals.exit_code() {
        eprintln!("cacheless: interrupted; files not yet finished were removed");
        return Ok(code);
    }
    let r = &report;
    if common.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "files": r.files,
                "copied": r.copied,
                "reflinked": r.reflinked,
                "hardlinks": r.hardlinks,
                "skipped": r.skipped,
                "errors": progress.errors(),
                "bytes": progress.bytes(),
                "data_bytes": r.data_bytes,
                "elapsed_s": r.elapsed_s,
                "final_sync_s": r.final_sync_s,
                "verify_s": r.verify_s,
                "bwlimit": r.bwlimit,
                "progress_samples": r.progress_samples,
            }))?
        );
    } else if common.verbose {
        let v = if args.verify { format!(", verify {:.2} s", r.verify_s) } else { String::new() };
        eprintln!(
            "cacheless: copied {} (reflinked {}), hard links {}, skipped {}, errors {}, {} of data in {:.2} s{v}",
            r.copied,
            r.reflinked,
            r.hardlinks,
            r.skipped,
            progress.errors(),
            ui::size(r.data_bytes),
            r.elapsed_s
        );
    }
    Ok(if progress.errors() > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// `-v`: how one file was copied, and why.
fn say_copied(r: &CopyReport) {
    let how = match r.method {
        Method::Reflink => "reflink (FICLONE, no data copied)".to_string(),
        m => format!(
            "{m}: read {} ({}), write {} ({}){}",
            r.read.mode,
            r.read.reason,
            r.write.decision.mode,
            r.write.decision.reason,
            r.write.backend.as_ref().map(|b| format!(", {} ({})", b.name(), b.reason)).unwrap_or_default()
        ),
    };
    let fb = r.reflink_fallback.as_ref().map(|f| format!("; no reflink: {f}")).unwrap_or_default();
    let v = r.verify.as_ref().map(|v| format!("; verified {} {} from {} in {:.3} s", v.algo, v.digest, v.read.mode, v.seconds)).unwrap_or_default();
    eprintln!("cacheless: {} -> {}: {how}{fb}{v}", r.src.display(), r.write.path.display());
}
