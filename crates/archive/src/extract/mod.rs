//! The many-file creator behind `cacheless extract`.
//!
//! One thread parses the tar stream and performs every namespace operation (mkdirat, the
//! engine's create, symlinkat, linkat, unlinkat) in archive order,
//! so replacement and symlink checks see exactly the state GNU tar would. File data,
//! permissions, ownership, mtime and close run on a pool of worker threads, so many files are
//! in flight at once. Every byte goes through the engine: small files are read whole and
//! written by its `FileCreator` (its mode per file, its deferred page drops; files under 1 MiB
//! are written back in batches, a syncfs per 32 MiB of them, so that the device sees a few
//! large requests instead of one or more per file, see `ExtractOptions::durability`), large ones are
//! streamed in 4 MiB chunks to its `Writer` (O_DIRECT with its queue of writes in flight, on
//! io_uring or threads). No file gets its final name before its data is durable: small ones
//! are created without a name (O_TMPFILE) and large ones under a temporary name, and each
//! batch's syncfs is followed by the links and renames that name its files (the creator's
//! `Durability::NamedAfterSync`), so a power cut leaves under a final name the old file, nothing, or
//! the complete new one. A file's ticket (`jobs::InFlight`) settles once it has its name: a hard
//! link to it, or a later member of the same name, waits for that. All buffers are leased from
//! the engine's memory budget; a batch's small files share one buffer (`jobs::Slab`).
//! Directories get their mode and mtime after their contents, deepest first (not one an entry
//! replaced; GNU tar leaves its parent with the time of the replacement, we with the archive's);
//! then `syncfs` makes the tree (the names included) durable before success is reported.
//!
//! In a directory this extraction made, a file is created without a look at its name first:
//! only this extraction's own entries can be there, and it knows where it made directories
//! (`Root::only_ours_at`). A small file whose mode has no bit the umask masks, in a directory
//! without a default ACL, is created with that mode and needs no fchmod (see the engine's
//! `FileCreator::create`).
//!
//! Nothing process-wide is changed: the umask is read, not set, and the number of files held
//! open is sized to the current RLIMIT_NOFILE (raising it is the caller's business).
//!
//! Layout: `options` (what is asked and reported), `entry` (each entry on the parser's thread),
//! `jobs` (each file on a worker), and here the run itself. The worker threads and the share of
//! descriptors are the engine's `cacheless::pool`.

mod entry;
mod gate;
mod jobs;
mod options;
mod shares;

use cacheless::sys;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use cacheless::pool::{fd_plan_now, Pool};
use cacheless::{CreateOptions, CreateQueue, Durability, FileCreator};

use crate::error::{Error, Result};
use crate::fsops::Root;
pub use crate::modes::ModeCounts;
use crate::source::{self, Input};
use crate::tarparse::Parser;
use entry::{Ctx, Fail};
use gate::Gate;
use jobs::{apply_meta, Shared, Why};
pub use options::{ExtractOptions, ExtractReport, Listing, OldFiles, DEFAULT_WRITE_BACK};
use shares::Shares;

/// Fewest small files the descriptor plan must let be created ahead of their data for them to
/// be created on an io_uring (see `CreateQueue`).
const PIPELINE_MIN: usize = 8;

/// Extracts an archive (any supported compression, detected) into `opts.dest`.
///
/// Returns `Err` only when nothing could start (archive or destination unopenable, a forced
/// mode the destination cannot honour). Entry failures, a truncated or corrupt archive and an
/// interruption are in the report (`is_ok()` is false); entries completed before them stay,
/// the entry being written is removed.
pub fn extract(input: Input, opts: &ExtractOptions) -> Result<ExtractReport> {
    let t0 = Instant::now();
    let write_back = match opts.durability {
        Durability::NamedAfterSync { write_back } | Durability::Off { write_back } => write_back,
        d => return Err(d.refused("extract", &opts.dest, "NamedAfterSync or Off").into()),
    };
    let progress = opts.progress.clone().unwrap_or_default();
    let shares = Shares::new(opts);
    let mut warnings = Vec::new();
    let umask = match opts.umask.or_else(sys::umask) {
        Some(u) => u,
        None => {
            warnings.push("umask unknown (no /proc/self/status): 022 assumed".to_string());
            0o022
        }
    };
    let plan = fd_plan_now(opts.threads);
    // GNU tar -P: every destination's namespace is the whole tree, and each member's name is
    // made a path from '/' (see `Ctx::absolute`), relative ones from the destination's real path.
    let mut bases = Vec::new();
    // Each destination: a forced mode its filesystem cannot honour is refused before anything
    // is written, never silently downgraded.
    let mut open_root = |dir: &Path| -> Result<Root> {
        let mut root = if opts.absolute_names {
            sys::mkdir_all(dir).map_err(|e| Error::io("mkdir", dir, e))?;
            let real = dir.canonicalize().map_err(|e| Error::io("resolve", dir, e))?;
            bases.push(real.as_os_str().as_bytes().split(|&b| b == b'/').filter(|c| !c.is_empty()).map(<[u8]>::to_vec).collect());
            Root::open(Path::new("/"), 0o777 & !umask, plan.dirs)?
        } else {
            Root::open(dir, 0o777 & !umask, plan.dirs)?
        };
        if opts.force_walk {
            root.force_walk();
        }
        let fs = cacheless::caps::for_dir(&root.path).map_err(|e| cacheless::Error::io("probe", &root.path, e))?;
        cacheless::check_forced(opts.io.mode, &fs, "extract", &root.path)?;
        Ok(root)
    };
    let root = open_root(&opts.dest)?;
    // Files parked under temporary names while their archive's checksums are pending hold no
    // descriptor: this process's claim on each destination keeps cleaners off them (see
    // `cacheless::temps`). Every folder the extraction creates files in is beneath one (a
    // member is resolved beneath its destination), so on a filesystem of this machine its
    // temporaries need no lock of their own either (see `CreateOptions::claims`).
    let mut claims = vec![cacheless::temps::claim(root.fd())];
    // GNU tar's -C between member names: a destination each.
    let mut roots: Vec<Option<Root>> = vec![None];
    for (_, dir) in &opts.chdirs {
        let r = open_root(dir)?;
        claims.push(cacheless::temps::claim(r.fd()));
        roots.push(Some(r));
    }
    // Small files created ahead of their data: the batch being filled and those waiting.
    let batch_files = (plan.pipeline / (entry::WAITING_MAX + 1)).clamp(1, jobs::BATCH_FILES.min(plan.batch));
    let waiting_max = (plan.pipeline / batch_files).clamp(1, entry::WAITING_MAX + 1) - 1;
    let decompress = source::Decompress { threads: opts.decompress_threads, bytes: shares.decode_bytes(), window_log_max: opts.zstd_window_log_max };
    let stream = source::open(input, progress.clone(), &shares.archive_read(&opts.io), &decompress)?;
    let info = stream.info.clone();
    let compressed = info.compression != source::Compression::None;
    let is_root = sys::is_root();
    // A file takes its name only once every checksum covering its bytes has passed (the gzip
    // member's, the zstd or LZ4 frame's, the xz or bzip2 stream's): a corrupt or truncated
    // archive leaves none of the files its bad part made.
    let gate = Arc::new(Gate::new(stream.verified(), opts.held_open.map_or(plan.held, |n| n.min(plan.held))).with_ahead(stream.ahead()));
    let creator = FileCreator::with_keeper(
        CreateOptions {
            mode: opts.io.mode,
            durability: Durability::NamedAfterSync { write_back },
            deferred_drops: plan.deferred,
            batched_open: plan.batched_open,
            claims,
        },
        gate.clone(),
    );
    let sh = Arc::new(Shared::new(creator, gate, progress.clone()));
    let pool = Pool::new(plan.threads, plan.queue, &sh)?;
    let report = ExtractReport {
        source: info,
        entries: 0,
        files: 0,
        dirs: 0,
        symlinks: 0,
        hardlinks: 0,
        skipped: 0,
        bytes: 0,
        tar_bytes: 0,
        modes: ModeCounts::default(),
        direct_ok: None,
        dontcache_ok: None,
        naming: String::new(),
        creation: String::new(),
        resolve: format!("{:?}: {}", root.resolve, root.resolve_reason).to_lowercase(),
        open_files_limit: plan.limit,
        synced: false,
        interrupted: false,
        warnings,
        failures: Vec::new(),
        failure_count: 0,
        fatal: None,
        elapsed_s: 0.0,
        sync_s: 0.0,
        fatal_error: None,
        first_failure_errno: None,
    };
    let mut ctx = Ctx {
        opts,
        root,
        roots,
        bases,
        active: 0,
        sh: sh.clone(),
        pool,
        shares,
        is_root,
        umask,
        dirs: Vec::new(),
        report,
        warned_abs: false,
        top: opts.one_top_level.as_deref().map(crate::select::top_components),
        listed: None,
        list_width: 19,
        batch: Vec::new(),
        batch_bytes: 0,
        slab: None,
        waiting: Default::default(),
        // Files created ahead of their data hold descriptors the parser cannot give back when
        // it runs out: under a few dozen, each is created when its member is reached.
        creates: Some(if plan.pipeline >= PIPELINE_MIN {
            CreateQueue::new(&sh.creator)
        } else {
            CreateQueue::on_caller_thread(&sh.creator, format!("{} open files at most: too few to create files ahead", plan.limit))
        }),
        batch_files,
        waiting_max,
        until: 0,
        owners: Default::default(),
        members: crate::select::Members::new(&opts.members),
    };
    // A compressed stream of nothing is an empty archive (GNU tar: nothing extracted, exit 0).
    let mut parser = Parser::new(stream).ignore_zeros(opts.ignore_zeros).empty_ok(compressed);
    loop {
        if progress.is_cancelled() {
            ctx.report.fatal_error = Some(Error::Interrupted { entry: String::new() });
            break;
        }
        let next = parser.next_entry();
        // Headers skipped and values ignored on the way, reported as GNU tar reports them.
        for skipped in parser.take_problems() {
            sh.fail(skipped.to_string());
        }
        for w in parser.take_warnings() {
            if opts.warn_unknown_keyword {
                ctx.warn(w);
            }
        }
        let e = match next {
            Ok(Some(e)) => e,
            Ok(None) => {
                if let Err(err) = parser.drain() {
                    ctx.report.fatal_error = Some(err);
                }
                break;
            }
            Err(err) => {
                ctx.report.fatal_error = Some(err);
                break;
            }
        };
        ctx.report.entries += 1;
        progress.entry_done();
        let name = e.display();
        let done = ctx.entry(&mut parser, e);
        // A directory the entry replaced gets no metadata at the end (GNU tar's neither).
        let removed = ctx.root.take_removed_dirs();
        if !removed.is_empty() {
            let active = ctx.active;
            ctx.dirs.retain(|(i, rel, _)| *i != active || !removed.iter().any(|r| rel.0.starts_with(r)));
        }
        match done {
            Ok(()) => {}
            Err(Fail::Entry(err)) => {
                sh.fail(Why { msg: jobs::once(&name, err.to_string()), errno: err.errno() });
            }
            Err(Fail::Fatal(err)) => {
                ctx.report.fatal_error = Some(err);
                break;
            }
        }
    }
    // GNU tar: a name given that no member matched is an error.
    if ctx.report.fatal_error.is_none() {
        for name in ctx.members.not_found() {
            sh.fail(format!("{}: not found in archive", String::from_utf8_lossy(name)));
        }
    }
    ctx.report.tar_bytes = parser.position();
    ctx.report.source = parser.get_ref().source_info();
    drop(parser);
    // Small files read whole before the run stopped are complete: written like the rest.
    ctx.flush_batch();
    let Ctx { pool, root, mut roots, active, mut dirs, mut report, creates, .. } = ctx;
    roots[active] = Some(root);
    // Every one is back: `dirs`' indices are theirs.
    let mut roots: Vec<Root> = roots.into_iter().flatten().collect();
    report.creation = creates.as_ref().map(CreateQueue::how).unwrap_or_default();
    drop(creates);
    pool.finish();
    // Every file written is complete: a syncfs makes the last batch durable and names it (an
    // interrupted run too: what it completed stays), each file once the archive's checksums
    // covered it. What they never covered (the stream was corrupt or cut, or the run stopped
    // before the checks were reached) is removed, each file reported under its own name.
    sh.creator.publish_now();
    let why = match &report.fatal_error {
        Some(Error::Interrupted { .. }) => "interrupted before the archive's checksums covering its data were read",
        _ => "the archive's checksums covering its data did not pass (corrupt or truncated compressed stream)",
    };
    for early in sh.gate.discard_held(|p| cacheless::Error::new(cacheless::ErrorKind::Io, "verify", p, why)) {
        sh.fail(format!("{}: named before its data was verified (another member needed it), then {why}: removed", early.display()));
    }
    report.interrupted = matches!(report.fatal_error, Some(Error::Interrupted { .. }));
    report.fatal = report.fatal_error.as_ref().map(|e| match e {
        Error::Interrupted { entry } if entry.is_empty() => "interrupted".to_string(),
        e => e.to_string(),
    });
    // Directories last, deepest first, so their contents do not disturb their mtime.
    dirs.sort_by_key(|(_, r, _)| std::cmp::Reverse(r.0.len()));
    for (i, rel, meta) in &dirs {
        match roots[*i].open_dir_for_meta(rel) {
            Ok(fd) => {
                if let Err(why) = apply_meta(&fd, meta, rel, |w| sh.warn(w)) {
                    sh.fail(why);
                }
            }
            Err(e) => sh.fail(Why { msg: format!("{}: {e}", rel.to_path().display()), errno: e.errno() }),
        }
    }
    let t_sync = Instant::now();
    // An interrupted run stops at once: what it completed stays, not made durable.
    if opts.durability.durable() && !report.interrupted {
        // The engine's: it also fails where the filesystem went read-only on a write error,
        // which a plain syncfs answers with success.
        // Each destination's filesystem (one syncfs each where -C named several).
        let mut synced = true;
        for root in &roots {
            if let Err(e) = cacheless::sync_filesystem(root.fd(), &root.path) {
                synced = false;
                sh.fail(&e);
            }
        }
        report.synced = synced;
    }
    report.sync_s = t_sync.elapsed().as_secs_f64();
    // Written back now (or soon, without sync): the second drop of write-behind files' pages.
    sh.creator.drop_deferred();
    report.modes = sh.modes.counts();
    report.naming = sh.creator.naming().unwrap_or_default();
    if let Some(how) = sh.gate.report() {
        report.naming = format!("{}; {how}", report.naming);
    }
    if let Ok(fs) = cacheless::caps::for_dir(&roots[0].path) {
        report.direct_ok = Some(fs.direct.is_ok());
        report.dontcache_ok = Some(fs.dontcache.is_ok());
    }
    report.warnings.extend(sh.take_warnings());
    let (failures, count, errno) = sh.take_failures();
    report.failures = failures;
    report.failure_count = count;
    report.first_failure_errno = errno;
    report.elapsed_s = t0.elapsed().as_secs_f64();
    Ok(report)
}
