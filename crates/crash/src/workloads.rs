//! The built-in workloads: the engine's write paths, each ending in a promise.
//!
//! - `writer-direct`, `writer-dontcache`, `writer-writebehind`: a [`Writer`] in that mode
//!   replaces a file, then creates a new one (sizes with an unaligned tail, over a
//!   write-behind window).
//! - `copy-file`: [`copy_file_with`] of one large file over an existing one.
//! - `copy-tree`: [`copy_tree`] of a small tree (a large file, small batched files, a
//!   subfolder, a symlink, a hard link) with `archive`; `copy-tree-file` and
//!   `copy-tree-symlink`: of one small file, of one symlink.
//! - `copy-tree-noreflink`: the same tree with `reflink = never` (`cp -a --reflink=never`), into
//!   an existing folder through `SRC/.`.
//! - `pack`: [`cacheless_archive::pack`] of a small tree (sorted, reproducible) over an
//!   existing archive.
//! - `creator-batch`: a [`FileCreator`] writing small files in write-back batches under their
//!   final names (as extract does), made durable by a syncfs; then a durable
//!   [`FileCreator::replace`].

use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cacheless::{
    copy_file_with, copy_tree, CopyOptions, CreateOptions, FileAttrs, FileCreator, IoOptions, Mode, Progress, ReadOptions, Reflink, TreeOptions, WriteOptions,
    Writer,
};
use cacheless_archive::pack::SortOrder;
use cacheless_archive::{Output, PackOptions};
use rand::{RngCore, SeedableRng};

use crate::workload::{Ctx, DirExpect, FileExpect, Meta, Ran, SymlinkExpect, Workload};

/// `len` bytes of deterministic noise from `seed`.
pub fn noise(seed: u64, len: usize) -> Arc<[u8]> {
    let mut v = vec![0u8; len];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    Arc::from(v)
}

/// Every built-in workload.
pub fn all() -> Vec<Workload> {
    vec![
        writer("writer-direct", Mode::Direct),
        writer("writer-dontcache", Mode::DontCache),
        writer("writer-writebehind", Mode::DropBehind),
        copy_file(),
        tree(),
        tree_file(),
        tree_symlink(),
        tree_no_reflink(),
        pack(),
        creator_batch(),
    ]
}

/// The built-in workloads whose names are in `names` (all when empty); an unknown name is an
/// error listing the known ones.
pub fn select(names: &[String]) -> Result<Vec<Workload>, String> {
    let all = all();
    if names.is_empty() {
        return Ok(all);
    }
    let known: Vec<String> = all.iter().map(|w| w.name.clone()).collect();
    if let Some(bad) = names.iter().find(|n| !known.contains(n)) {
        return Err(format!("unknown workload {bad:?}: known are {}", known.join(", ")));
    }
    Ok(all.into_iter().filter(|w| names.contains(&w.name)).collect())
}

fn io(mode: Mode) -> IoOptions {
    // Small requests, so that a file is many writes and a queue of them is in flight.
    IoOptions { mode, block_size: 1 << 20, queue_depth: 4, ..IoOptions::default() }
}

fn expect(path: &str, old: Option<Arc<[u8]>>, new: Arc<[u8]>, by: &str, atomic: bool) -> FileExpect {
    FileExpect { path: PathBuf::from(path), old, new, promised_by: by.to_string(), atomic, meta: None }
}

/// A modification time `secs` after the epoch.
fn at(secs: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs.unsigned_abs())
}

/// Sets the permission bits and modification time of `path`.
fn set_meta(path: &Path, m: Meta) -> std::io::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(m.mode))?;
    std::fs::File::open(path)?.set_modified(at(m.mtime))
}

fn write_synced(path: &Path, data: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, data)?;
    std::fs::File::open(path)?.sync_all()
}

/// Whether an engine error says the filesystem cannot do the forced mode.
fn unsupported(e: &cacheless::Error) -> bool {
    e.kind() == cacheless::ErrorKind::Unsupported
}

/// The permission bits and time the Writer gives `replace.bin`.
const WRITER_META: Meta = Meta { mode: 0o640, mtime: 1_234_567_890 };

/// A Writer in `mode`: replaces `replace.bin`, then creates `new.bin`.
fn writer(name: &str, mode: Mode) -> Workload {
    // Over a write-behind window (8 MiB) and with an unaligned tail.
    let old = noise(1, (512 << 10) + 100);
    let a = noise(2, (9 << 20) + 777);
    let b = noise(3, (3 << 20) + 5);
    let setup_old = old.clone();
    let (ra, rb) = (a.clone(), b.clone());
    Workload {
        name: name.to_string(),
        setup: Box::new(move |root, _| write_synced(&root.join("replace.bin"), &setup_old)),
        run: Box::new(move |ctx: &Ctx| {
            for (file, data) in [("replace.bin", &ra), ("new.bin", &rb)] {
                let mut wo = WriteOptions::from(io(mode));
                wo.size_hint = Some(data.len() as u64);
                if file == "replace.bin" {
                    wo.permissions = Some(WRITER_META.mode);
                    wo.mtime = Some(at(WRITER_META.mtime));
                }
                let mut w = match Writer::create(ctx.path(file), &wo) {
                    Ok(w) => w,
                    Err(e) if unsupported(&e) => return Ok(Ran::Unsupported(e.to_string())),
                    Err(e) => return Err(e.to_string()),
                };
                w.write_bytes(data).map_err(|e| e.to_string())?;
                w.finish().map_err(|e| e.to_string())?;
                ctx.mark(file);
            }
            Ok(Ran::Done)
        }),
        files: vec![
            FileExpect { meta: Some(WRITER_META), ..expect("replace.bin", Some(old), a, "replace.bin", true) },
            expect("new.bin", None, b, "new.bin", true),
        ],
        dirs: vec![],
        symlinks: vec![],
    }
}

/// copy_file_with of a large file (on another filesystem) over an existing one.
fn copy_file() -> Workload {
    let old = noise(10, 300 << 10);
    let src = noise(11, (6 << 20) + 333);
    let (setup_old, setup_src) = (old.clone(), src.clone());
    Workload {
        name: "copy-file".into(),
        setup: Box::new(move |root, scratch| {
            write_synced(&root.join("copy.bin"), &setup_old)?;
            std::fs::write(scratch.join("src.bin"), &setup_src[..])
        }),
        run: Box::new(|ctx: &Ctx| {
            let io = io(Mode::Auto);
            copy_file_with(
                &ctx.scratch.join("src.bin"),
                &ctx.path("copy.bin"),
                &ReadOptions::from(io.clone()),
                &WriteOptions::from(io),
                &CopyOptions::new(),
                &Progress::new(),
            )
            .map_err(|e| e.to_string())?;
            ctx.mark("copy.bin");
            Ok(Ran::Done)
        }),
        files: vec![expect("copy.bin", Some(old), src, "copy.bin", true)],
        dirs: vec![],
        symlinks: vec![],
    }
}

/// The files of the tree `copy-tree` copies: (relative path, content, permission bits and
/// time, which archive mode keeps).
fn tree_files() -> Vec<(&'static str, Arc<[u8]>, Meta)> {
    let m = |mode: u32, i: i64| Meta { mode, mtime: 1_000_000_000 + i * 1000 };
    vec![
        ("big.bin", noise(20, (2 << 20) + 17), m(0o640, 0)),
        ("a.txt", noise(21, 1000), m(0o600, 1)),
        ("b.txt", noise(22, 5000), m(0o644, 2)),
        ("c.txt", noise(23, 20_000), m(0o755, 3)),
        ("empty", noise(24, 0), m(0o604, 4)),
        ("sub/d.txt", noise(25, 3000), m(0o640, 5)),
        ("sub/e.txt", noise(26, 70_000), m(0o444, 6)),
    ]
}

/// The folders of that tree, deepest first, with their permission bits and times.
const TREE_DIRS: [(&str, Meta); 2] = [("sub", Meta { mode: 0o711, mtime: 1_200_000_000 }), ("", Meta { mode: 0o750, mtime: 1_100_000_000 })];

fn run_tree(ctx: &Ctx, src: &str, dst: &str) -> Result<Ran, String> {
    run_tree_with(ctx, src, dst, Reflink::Auto)
}

fn run_tree_with(ctx: &Ctx, src: &str, dst: &str, reflink: Reflink) -> Result<Ran, String> {
    let mut o = TreeOptions::new(io(Mode::Auto));
    o.recursive = true;
    o.archive = true;
    o.reflink = reflink;
    let r = copy_tree(&[ctx.scratch.join(src)], &ctx.path(dst), &o, &Arc::new(Progress::new())).map_err(|e| e.to_string())?;
    if let Some(e) = r.first_error {
        return Err(e.to_string());
    }
    ctx.mark(dst);
    Ok(Ran::Done)
}

/// Writes the tree `copy-tree` copies into `tree`.
fn make_tree(tree: &Path, files: &[(&str, Arc<[u8]>, Meta)]) -> std::io::Result<()> {
    std::fs::create_dir_all(tree.join("sub"))?;
    for (p, d, m) in files {
        std::fs::write(tree.join(p), &d[..])?;
        set_meta(&tree.join(p), *m)?;
    }
    std::os::unix::fs::symlink("../a.txt", tree.join("sub/sym"))?;
    // A hard link, which archive mode keeps.
    std::fs::hard_link(tree.join("b.txt"), tree.join("sub/b-link"))?;
    TREE_DIRS.iter().try_for_each(|(d, m)| set_meta(&tree.join(d), *m))
}

/// copy_tree (archive) of a small tree to a new folder.
fn tree() -> Workload {
    let files = tree_files();
    let setup_files = files.clone();
    Workload {
        name: "copy-tree".into(),
        setup: Box::new(move |_, scratch| make_tree(&scratch.join("tree"), &setup_files)),
        run: Box::new(|ctx: &Ctx| run_tree(ctx, "tree", "dst")),
        files: files
            .into_iter()
            .flat_map(|(p, d, m)| {
                let link = (p == "b.txt").then(|| FileExpect { meta: Some(m), ..expect("dst/sub/b-link", None, d.clone(), "dst", true) });
                std::iter::once(FileExpect { meta: Some(m), ..expect(&format!("dst/{p}"), None, d, "dst", true) }).chain(link)
            })
            .collect(),
        dirs: TREE_DIRS.iter().map(|(d, m)| DirExpect { path: Path::new("dst").join(d), promised_by: "dst".into(), meta: Some(*m) }).collect(),
        symlinks: vec![SymlinkExpect { path: PathBuf::from("dst/sub/sym"), target: PathBuf::from("../a.txt"), promised_by: "dst".into() }],
    }
}

/// copy_tree of one small file (no folder) to a new name.
fn tree_file() -> Workload {
    let data = noise(30, 3000);
    let setup_data = data.clone();
    Workload {
        name: "copy-tree-file".into(),
        setup: Box::new(move |_, scratch| std::fs::write(scratch.join("small.txt"), &setup_data[..])),
        run: Box::new(|ctx: &Ctx| run_tree(ctx, "small.txt", "single.txt")),
        files: vec![expect("single.txt", None, data, "single.txt", true)],
        dirs: vec![],
        symlinks: vec![],
    }
}

/// copy_tree (archive) of one symlink (no folder) to a new name.
fn tree_symlink() -> Workload {
    Workload {
        name: "copy-tree-symlink".into(),
        setup: Box::new(|_, scratch| std::os::unix::fs::symlink("some/target", scratch.join("link"))),
        run: Box::new(|ctx: &Ctx| run_tree(ctx, "link", "link")),
        files: vec![],
        dirs: vec![],
        symlinks: vec![SymlinkExpect { path: PathBuf::from("link"), target: PathBuf::from("some/target"), promised_by: "link".into() }],
    }
}

/// copy_tree (archive, never a reflink) of the contents of a small tree (`tree/.`) into an
/// existing folder.
fn tree_no_reflink() -> Workload {
    let files = tree_files();
    let setup_files = files.clone();
    Workload {
        name: "copy-tree-noreflink".into(),
        setup: Box::new(move |root, scratch| {
            std::fs::create_dir(root.join("into"))?;
            std::fs::File::open(root)?.sync_all()?;
            make_tree(&scratch.join("tree"), &setup_files)
        }),
        run: Box::new(|ctx: &Ctx| run_tree_with(ctx, "tree/.", "into", Reflink::Never)),
        files: files.into_iter().map(|(p, d, m)| FileExpect { meta: Some(m), ..expect(&format!("into/{p}"), None, d, "into", true) }).collect(),
        dirs: vec![DirExpect { path: PathBuf::from("into/sub"), promised_by: "into".into(), meta: Some(TREE_DIRS[0].1) }],
        symlinks: vec![SymlinkExpect { path: PathBuf::from("into/sub/sym"), target: PathBuf::from("../a.txt"), promised_by: "into".into() }],
    }
}

/// Packs `tree` (in `dir`) to `out`, sorted by name with one time for every member, so that the
/// archive's bytes depend on the tree only.
fn pack_tree(dir: &Path, out: &Path) -> Result<(), String> {
    let mut o = PackOptions::new(Output::Path(out.to_path_buf()), vec![PathBuf::from("tree")]);
    o.members.directory = Some(dir.to_path_buf());
    o.members.sort = SortOrder::Name;
    o.members.mtime = Some((1_300_000_000, 0));
    o.io = io(Mode::Auto);
    let r = cacheless_archive::pack(o).map_err(|e| e.to_string())?;
    if r.failure_count > 0 {
        return Err(format!("{} members could not be packed", r.failure_count));
    }
    Ok(())
}

/// pack of a small tree over an existing archive. The archive it must hold is packed first,
/// from the same tree, into a folder of its own.
fn pack() -> Workload {
    let files = tree_files();
    let old = noise(80, 50_000);
    let new: Arc<[u8]> = (|| -> Result<Vec<u8>, String> {
        let d = tempfile::tempdir().map_err(|e| e.to_string())?;
        make_tree(&d.path().join("tree"), &files).map_err(|e| e.to_string())?;
        pack_tree(d.path(), &d.path().join("a.tar.zst"))?;
        std::fs::read(d.path().join("a.tar.zst")).map_err(|e| e.to_string())
    })()
    .unwrap_or_default()
    .into();
    let (setup_old, packed) = (old.clone(), !new.is_empty());
    Workload {
        name: "pack".into(),
        setup: Box::new(move |root, scratch| {
            if !packed {
                return Err(std::io::Error::other("the expected archive could not be packed"));
            }
            write_synced(&root.join("a.tar.zst"), &setup_old)?;
            make_tree(&scratch.join("tree"), &files)
        }),
        run: Box::new(|ctx: &Ctx| {
            pack_tree(&ctx.scratch, &ctx.path("a.tar.zst"))?;
            ctx.mark("a.tar.zst");
            Ok(Ran::Done)
        }),
        files: vec![expect("a.tar.zst", Some(old), new, "a.tar.zst", true)],
        dirs: vec![],
        symlinks: vec![],
    }
}

/// Small files in write-back batches under their final names, a syncfs, then a durable replace.
fn creator_batch() -> Workload {
    let files: Vec<(String, Arc<[u8]>)> = (0..24u64).map(|i| (format!("x/f{i:02}"), noise(40 + i, 1500 + 700 * usize::try_from(i).unwrap_or(0)))).collect();
    let old = noise(70, 4000);
    let new = noise(71, 9000);
    let (run_files, setup_old, run_new) = (files.clone(), old.clone(), new.clone());
    let mut expects: Vec<FileExpect> = files.into_iter().map(|(p, d)| expect(&p, None, d, "batch", false)).collect();
    expects.push(expect("replaced.txt", Some(old), new, "replaced.txt", true));
    Workload {
        name: "creator-batch".into(),
        setup: Box::new(move |root, _| {
            std::fs::create_dir(root.join("x"))?;
            write_synced(&root.join("replaced.txt"), &setup_old)
        }),
        run: Box::new(move |ctx: &Ctx| {
            let dir_path = ctx.path("x");
            let dir = std::fs::File::open(&dir_path).map_err(|e| format!("open {}: {e}", dir_path.display()))?;
            let c = FileCreator::new(CreateOptions { mode: Mode::Auto, sync: false, deferred_drops: 8, batch_writeback: 32 << 10, publish_after_sync: false });
            for (p, d) in &run_files {
                let name = Path::new(p).file_name().unwrap_or(OsStr::new(p));
                c.write_file(dir.as_fd(), name, &ctx.path(p), d, &FileAttrs::default()).map_err(|e| e.to_string())?;
            }
            c.drop_deferred();
            // As extract ends: one syncfs makes the whole tree durable.
            cacheless::sync_filesystem(dir.as_fd(), &dir_path).map_err(|e| e.to_string())?;
            ctx.mark("batch");
            let durable = FileCreator::new(CreateOptions::default());
            durable.replace(&ctx.path("replaced.txt"), &run_new, &FileAttrs::default()).map_err(|e| e.to_string())?;
            ctx.mark("replaced.txt");
            Ok(Ran::Done)
        }),
        files: expects,
        dirs: vec![DirExpect { path: PathBuf::from("x"), promised_by: "batch".into(), meta: None }],
        symlinks: vec![],
    }
}
