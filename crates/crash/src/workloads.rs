//! The built-in workloads: the engine's write paths, each ending in a promise.
//!
//! - `writer-direct`, `writer-dontcache`, `writer-writebehind`: a [`Writer`] in that mode
//!   replaces a file, then creates a new one (sizes with an unaligned tail, over a
//!   write-behind window).
//! - `copy-file`: [`copy_file_with`] of one large file over an existing one.
//! - `copy-tree`: [`copy_tree`](cacheless_cp::copy) of a small tree (a large file, small batched files, a
//!   subfolder, a symlink, a hard link) with `archive`; `copy-tree-file` and
//!   `copy-tree-symlink`: of one small file, of one symlink.
//! - `copy-tree-noreflink`: the same tree with `reflink = never` (`cp -a --reflink=never`), into
//!   an existing folder through `SRC/.`.
//! - `copy-tree-replace`: [`copy_tree`](cacheless_cp::copy) of a file over an existing one (`cp SRC DST`): replaced
//!   by a complete copy that keeps the old one's permission bits, atomic.
//! - `copy-tree-inplace`: the same over an existing file with a second name, which GNU cp
//!   writes in place (so both names see the new data): not atomic, both names promised the new
//!   content once the copy returned.
//! - `pack`: [`cacheless_archive::pack()`] of a small tree (sorted, reproducible) over an
//!   existing archive.
//! - `creator-batch`: a [`FileCreator`] writing small files in write-back batches under their
//!   final names, made durable by a syncfs; then a durable [`FileCreator::replace`].
//! - `extract`: [`cacheless_archive::extract()`] of a tar archive (folders six deep, 240 small
//!   files in small write-back batches, two files over 1 MiB, a member over an existing file, a
//!   hard link), each file promised byte-exact with its mode and time once extract returned
//!   (its syncfs), and every final name holding the old content, the whole new one or nothing
//!   before that.
//! - `python`: the Python package's `cacheless.safetensors.save_file`, `cacheless.write_file`
//!   and `cacheless.open(path, "wb")`, called by a child interpreter ([`python`]), each durable
//!   and atomic.
//! - `checkpoint`: a `torch.distributed.checkpoint` save through `cacheless.checkpoint.Writer`
//!   over an earlier checkpoint, checked as a whole by loading it ([`crate::checkpoint`]).

use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cacheless::{
    copy_file_with, CopyOptions, CreateOptions, Durability, FileAttrs, FileCreator, IoOptions, Mode, Progress, ReadOptions, Reflink, WriteOptions, Writer,
};
use cacheless_archive::pack::SortOrder;
use cacheless_archive::{ExtractOptions, Input, Output, PackOptions};
use cacheless_cp::{copy as copy_tree, CpOptions as TreeOptions};
use cacheless_safetensors::{Dtype, TensorData};
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
        tree_replace(),
        tree_in_place(),
        pack(),
        creator_batch(),
        extract(),
        extract_gzip(),
        python_calls(),
        crate::checkpoint::workload(),
        #[cfg(feature = "fault-injection")]
        tree_meta_fails(),
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
        absent: vec![],
        checks: vec![],
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
        absent: vec![],
        checks: vec![],
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
    let mut o = TreeOptions::new(io(Mode::Auto)).archive();
    o.copy.reflink = reflink;
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
        absent: vec![],
        checks: vec![],
    }
}

/// copy_tree (archive) of a folder holding one file, with the copy's first metadata call (the
/// file's permission bits, set before its name) failing with EIO: the copy fails that file,
/// naming it, with the OS error, and the file is never named, in no crash state and not after
/// the run (nothing is named half-done). A test build's workload: it arms the engine's fault
/// plan.
#[cfg(feature = "fault-injection")]
fn tree_meta_fails() -> Workload {
    let data = noise(50, 5000);
    let setup_data = data.clone();
    Workload {
        name: "copy-tree-meta-fails".into(),
        setup: Box::new(move |_, scratch| {
            std::fs::create_dir(scratch.join("solo"))?;
            std::fs::write(scratch.join("solo/one.bin"), &setup_data[..])?;
            set_meta(&scratch.join("solo/one.bin"), Meta { mode: 0o640, mtime: 1_100_000_000 })
        }),
        run: Box::new(|ctx: &Ctx| {
            use cacheless::fault::{self, Fault, Plan, Site};
            let o = TreeOptions::new(io(Mode::Auto)).archive();
            fault::start(Some(Plan { site: Site::Meta, nth: 0, fault: Fault::Eio }));
            let r = copy_tree(&[ctx.scratch.join("solo")], &ctx.path("dst"), &o, &Arc::new(Progress::new()));
            let fired = fault::stop().fired;
            let r = r.map_err(|e| e.to_string())?;
            ctx.mark("dst");
            let e = r.first_error.ok_or("the copy succeeded though a metadata call failed")?;
            if !fired || e.errno() != Some(libc::EIO) || !e.to_string().contains("one.bin") {
                return Err(format!("not the failure injected (fired: {fired}): {e}"));
            }
            Ok(Ran::Done)
        }),
        files: vec![],
        dirs: vec![],
        symlinks: vec![],
        absent: vec![PathBuf::from("dst/one.bin")],
        checks: vec![],
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
        absent: vec![],
        checks: vec![],
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
        absent: vec![],
        checks: vec![],
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
        absent: vec![],
        checks: vec![],
    }
}

/// copy_tree of one file (4 MiB and an unaligned tail) over an existing one with mode 0640:
/// replaced atomically, the mode kept (GNU cp's result over an existing file).
fn tree_replace() -> Workload {
    let (old, new) = (noise(40, 70_000), noise(41, (4 << 20) + 77));
    let (setup_old, setup_new) = (old.clone(), new.clone());
    Workload {
        name: "copy-tree-replace".into(),
        setup: Box::new(move |root, scratch| {
            write_synced(&root.join("over.bin"), &setup_old)?;
            set_meta(&root.join("over.bin"), Meta { mode: 0o640, mtime: 1_000_000_000 })?;
            std::fs::File::open(root.join("over.bin"))?.sync_all()?;
            std::fs::write(scratch.join("new.bin"), &setup_new[..])
        }),
        run: Box::new(|ctx: &Ctx| {
            let r = copy_tree(&[ctx.scratch.join("new.bin")], &ctx.path("over.bin"), &TreeOptions::new(io(Mode::Auto)), &Arc::new(Progress::new()))
                .map_err(|e| e.to_string())?;
            if let Some(e) = r.first_error {
                return Err(e.to_string());
            }
            ctx.mark("over.bin");
            Ok(Ran::Done)
        }),
        files: vec![expect("over.bin", Some(old), new, "over.bin", true)],
        dirs: vec![],
        symlinks: vec![],
        absent: vec![],
        checks: vec![],
    }
}

/// copy_tree of one file over an existing one that has a second name: written in place, so the
/// second name sees the new data too (GNU cp's result); promised once the copy returned.
fn tree_in_place() -> Workload {
    let (old, new) = (noise(42, 200_000), noise(43, (3 << 20) + 5));
    let (setup_old, setup_new) = (old.clone(), new.clone());
    Workload {
        name: "copy-tree-inplace".into(),
        setup: Box::new(move |root, scratch| {
            write_synced(&root.join("linked.bin"), &setup_old)?;
            std::fs::hard_link(root.join("linked.bin"), root.join("other-name.bin"))?;
            std::fs::File::open(root)?.sync_all()?;
            std::fs::write(scratch.join("new.bin"), &setup_new[..])
        }),
        run: Box::new(|ctx: &Ctx| {
            let r = copy_tree(&[ctx.scratch.join("new.bin")], &ctx.path("linked.bin"), &TreeOptions::new(io(Mode::Auto)), &Arc::new(Progress::new()))
                .map_err(|e| e.to_string())?;
            if let Some(e) = r.first_error {
                return Err(e.to_string());
            }
            if r.in_place != 1 {
                return Err(format!("written in place: {} files, not 1", r.in_place));
            }
            ctx.mark("linked.bin");
            Ok(Ran::Done)
        }),
        files: vec![expect("linked.bin", Some(old.clone()), new.clone(), "linked.bin", false), expect("other-name.bin", Some(old), new, "linked.bin", false)],
        dirs: vec![],
        symlinks: vec![],
        absent: vec![],
        checks: vec![],
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
        absent: vec![],
        checks: vec![],
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
            let c =
                FileCreator::new(CreateOptions { durability: Durability::AtTheEnd { write_back: Some(32 << 10) }, deferred_drops: 8, ..CreateOptions::new() });
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
        absent: vec![],
        checks: vec![],
    }
}

/// A member of the archive `extract` unpacks.
#[derive(Clone)]
enum Member {
    /// A folder, with its permission bits and time.
    Dir(String, Meta),
    /// A regular file: its content, permission bits and time.
    File(String, Arc<[u8]>, Meta),
    /// A hard link to an earlier member.
    Link(String, String),
}

/// The folders of the archive, six deep (`d1` .. `d1/d2/d3/d4/d5/d6`).
fn extract_dirs() -> Vec<String> {
    (1..=6).map(|depth| (1..=depth).map(|i| format!("d{i}")).collect::<Vec<_>>().join("/")).collect()
}

/// The member that replaces a file already in the destination.
const EXTRACT_REPLACED: &str = "d1/old.txt";
/// The hard link, and the member it links to.
const EXTRACT_LINK: (&str, &str) = ("d1/d2/d3/link.bin", "d1/d2/f007.bin");

/// The archive's members in order: the folders, 240 small files of 1-8 KiB spread over them
/// (written in write-back batches), two files of 1 MiB and more among them (streamed through
/// the Writer), a member over an existing file, and a hard link at the end.
fn extract_members() -> Vec<Member> {
    let dirs = extract_dirs();
    let mut out: Vec<Member> = dirs
        .iter()
        .zip(0i64..)
        .map(|(d, i)| Member::Dir(d.clone(), Meta { mode: if i % 2 == 0 { 0o755 } else { 0o750 }, mtime: 1_500_000_000 + i * 100 }))
        .collect();
    let modes = [0o644, 0o600, 0o640, 0o755];
    for i in 0..240usize {
        let meta = Meta { mode: modes[i % 4], mtime: 1_400_000_000 + 61 * i64::try_from(i).unwrap_or(0) };
        out.push(Member::File(format!("{}/f{i:03}.bin", dirs[i % 6]), noise(1000 + i as u64, 1024 + (i * 2903) % 7169), meta));
        match i {
            80 => out.push(Member::File("d1/d2/big1.bin".into(), noise(990, (1 << 20) + 4099), Meta { mode: 0o644, mtime: 1_450_000_000 })),
            120 => out.push(Member::File(EXTRACT_REPLACED.into(), noise(991, 6000), Meta { mode: 0o600, mtime: 1_450_000_100 })),
            160 => out.push(Member::File("d1/d2/d3/d4/d5/big2.bin".into(), noise(992, (2 << 20) + 777), Meta { mode: 0o640, mtime: 1_450_000_200 })),
            _ => {}
        }
    }
    out.push(Member::Link(EXTRACT_LINK.0.into(), EXTRACT_LINK.1.into()));
    out
}

/// The members as a plain tar archive (GNU headers, owner root).
fn tar_of(members: &[Member]) -> std::io::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    for m in members {
        let mut h = tar::Header::new_gnu();
        h.set_uid(0);
        h.set_gid(0);
        let (path, data): (&str, &[u8]) = match m {
            Member::Dir(p, meta) => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(meta.mode);
                h.set_mtime(meta.mtime.unsigned_abs());
                (p, &[])
            }
            Member::File(p, d, meta) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(meta.mode);
                h.set_mtime(meta.mtime.unsigned_abs());
                (p, d)
            }
            Member::Link(p, target) => {
                h.set_entry_type(tar::EntryType::Link);
                h.set_link_name(target)?;
                h.set_mode(0o644);
                (p, &[])
            }
        };
        h.set_path(path)?;
        h.set_size(data.len() as u64);
        h.set_cksum();
        b.append(&h, data)?;
    }
    b.into_inner()
}

/// extract of a tar archive into `out`: deep folders, many small files in small write-back
/// batches, two large files, a member over an existing file, a hard link; then its syncfs.
fn extract() -> Workload {
    extract_from("extract", "a.tar", None, |tar| Ok(tar.to_vec()))
}

/// The extract workload's archive as two gzip members, cut in the middle of a member's data:
/// each file takes its name only once the CRC of every gzip member holding its data has passed,
/// so the files of the first member wait for its end, those of the second for the end of the
/// archive, and the file across the cut for both. Beside the destination's files are a file of
/// the user's and one whose name only looks like a temporary, which the clean-up after each
/// cut (see `check::state`) must leave alone.
fn extract_gzip() -> Workload {
    let mut w = extract_from("extract-gzip", "a.tar.gz", Some(16), |tar| {
        use std::io::Write;
        let cut = tar.len() / 2 + 100;
        let mut out = Vec::new();
        for part in [&tar[..cut], &tar[cut..]] {
            let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            z.write_all(part)?;
            out.extend(z.finish()?);
        }
        Ok(out)
    });
    let mine = [("out/keep.txt", noise(994, 700)), ("out/d1/.notes.cacheless-draft.tmp", noise(995, 300))];
    let setup = std::mem::replace(&mut w.setup, Box::new(|_, _| Ok(())));
    let made = mine.clone();
    w.setup = Box::new(move |root, scratch| {
        setup(root, scratch)?;
        for (p, d) in &made {
            write_synced(&root.join(p), d)?;
        }
        Ok(())
    });
    w.files.extend(mine.into_iter().map(|(p, d)| expect(p, Some(d.clone()), d, "extract", true)));
    w
}

/// The extract workload with its archive as `pack` makes it from the tar's bytes, in `file`,
/// holding at most `held_open` files open for its checksums.
fn extract_from(name: &str, file: &'static str, held_open: Option<usize>, pack: fn(&[u8]) -> std::io::Result<Vec<u8>>) -> Workload {
    let members = extract_members();
    let old = noise(993, 3000);
    let (setup_members, setup_old) = (members.clone(), old.clone());
    let files: Vec<(String, Arc<[u8]>, Meta)> =
        members.iter().filter_map(|m| if let Member::File(p, d, meta) = m { Some((p.clone(), d.clone(), *meta)) } else { None }).collect();
    let mut expects: Vec<FileExpect> = files
        .iter()
        .map(|(p, d, m)| {
            let was = (p == EXTRACT_REPLACED).then(|| old.clone());
            FileExpect { meta: Some(*m), ..expect(&format!("out/{p}"), was, d.clone(), "extract", true) }
        })
        .collect();
    if let Some((_, d, m)) = files.iter().find(|(p, _, _)| p == EXTRACT_LINK.1) {
        expects.push(FileExpect { meta: Some(*m), ..expect(&format!("out/{}", EXTRACT_LINK.0), None, d.clone(), "extract", true) });
    }
    let dirs = members
        .iter()
        .filter_map(|m| {
            if let Member::Dir(p, meta) = m {
                Some(DirExpect { path: Path::new("out").join(p), promised_by: "extract".into(), meta: Some(*meta) })
            } else {
                None
            }
        })
        .collect();
    Workload {
        name: name.into(),
        setup: Box::new(move |root, scratch| {
            std::fs::create_dir_all(root.join("out/d1"))?;
            write_synced(&root.join("out").join(EXTRACT_REPLACED), &setup_old)?;
            std::fs::write(scratch.join(file), pack(&tar_of(&setup_members)?)?)
        }),
        run: Box::new(move |ctx: &Ctx| {
            let mut o = ExtractOptions::new(ctx.path("out"));
            o.io = io(Mode::Auto);
            // Small batches, so that the small files are written back in many of them (about
            // twenty), each ended by a syncfs, between and around the two large files.
            o.durability = Durability::NamedAfterSync { write_back: Some(64 << 10) };
            o.held_open = held_open;
            let r = cacheless_archive::extract(Input::Path(ctx.scratch.join(file)), &o).map_err(|e| e.to_string())?;
            if !r.is_ok() {
                return Err(r.fatal.or_else(|| r.failures.first().cloned()).unwrap_or_else(|| "extract failed".into()));
            }
            if !r.synced {
                return Err("extract returned without its syncfs".into());
            }
            ctx.mark("extract");
            Ok(Ran::Done)
        }),
        files: expects,
        dirs,
        symlinks: vec![],
        absent: vec![],
        checks: vec![],
    }
}

/// The interpreter the `python` workload runs its calls in: `CACHELESS_PYTHON` where set, else
/// this repository's test virtualenv, `target/python-venv/bin/python` (scripts/test makes it
/// and installs the package into it with maturin). `Err` says why there is none to use: no
/// interpreter there, or one that cannot import `cacheless`.
pub fn python() -> Result<PathBuf, String> {
    // Looked for once: each run of the workload would otherwise pay an interpreter's start.
    static FOUND: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    FOUND.get_or_init(find_python).clone()
}

fn find_python() -> Result<PathBuf, String> {
    let py = match std::env::var_os("CACHELESS_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap_or(Path::new(".")).join("target/python-venv/bin/python"),
    };
    if !py.is_file() {
        return Err(format!("no Python interpreter at {} (scripts/test makes that virtualenv; CACHELESS_PYTHON names another)", py.display()));
    }
    let out = Command::new(&py).args(["-c", "import cacheless, cacheless.safetensors"]).output().map_err(|e| format!("{}: {e}", py.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("{} cannot import cacheless: {}", py.display(), err.trim().lines().last().unwrap_or("")));
    }
    Ok(py)
}

/// What the `python` workload's interpreter runs: `ROOT` (the mount point) and `SRC` (the
/// scratch folder with the data) as arguments. After each call it prints the call's name and
/// waits for a line on its standard input, so that the marker is in the log before anything
/// of the next call is written.
const PYTHON_CALLS: &str = r#"
import sys
import numpy as np
import cacheless
from cacheless.safetensors import save_file

root, src = sys.argv[1], sys.argv[2]

def returned(name):
    print(name, flush=True)
    sys.stdin.readline()

def raw(name):
    with open(f"{src}/{name}", "rb") as f:
        return f.read()

tensors = {
    "w": np.frombuffer(raw("w.bin"), dtype="<f4").reshape(512, 1025),
    "b": np.frombuffer(raw("b.bin"), dtype=np.uint8),
    "i": np.frombuffer(raw("i.bin"), dtype="<i8").reshape(3, 5),
}
save_file(tensors, f"{root}/model.safetensors", metadata={"format": "np"})
returned("model.safetensors")

cacheless.write_file(f"{root}/blob.bin", raw("blob.bin"))
returned("blob.bin")

data = raw("stream.bin")
with cacheless.open(f"{root}/stream.bin", "wb", size_hint=len(data)) as f:
    for at in range(0, len(data), 65537):
        f.write(data[at:at + 65537])
returned("stream.bin")
"#;

/// A tensor the `python` workload saves.
struct Tensor {
    /// Its name.
    name: &'static str,
    /// The scratch file its bytes are read from (the child cannot make the same noise).
    file: &'static str,
    /// Its element type.
    dtype: Dtype,
    /// Its shape.
    shape: Vec<usize>,
    /// Its bytes, little-endian.
    data: Arc<[u8]>,
}

/// The tensors the `python` workload saves (the script gives the same dtypes and shapes).
fn python_tensors() -> Vec<Tensor> {
    let t = |name, file, dtype, shape: Vec<usize>, seed| {
        let len = cacheless_safetensors::header::nbytes(dtype, &shape).and_then(|n| usize::try_from(n).ok()).unwrap_or(0);
        Tensor { name, file, dtype, shape, data: noise(seed, len) }
    };
    vec![t("w", "w.bin", Dtype::F32, vec![512, 1025], 60), t("b", "b.bin", Dtype::U8, vec![777], 61), t("i", "i.bin", Dtype::I64, vec![3, 5], 62)]
}

/// The calls of the Python package, each in a child interpreter writing into the filesystem
/// under test, each durable and atomic as documented: `cacheless.safetensors.save_file` of
/// 2 MiB of tensors to a new file (durable and atomic always), `cacheless.write_file` over an
/// existing file and `cacheless.open(path, "wb")` written in odd-sized pieces over another
/// (both durable with their default `sync=True`, atomic always). Skipped, saying why, without
/// an interpreter that imports the package ([`python`]).
fn python_calls() -> Workload {
    let tensors = python_tensors();
    let meta = std::collections::HashMap::from([("format".to_string(), "np".to_string())]);
    let views: Vec<TensorData<'_>> = tensors.iter().map(|t| TensorData { name: t.name, dtype: t.dtype, shape: &t.shape, data: &t.data }).collect();
    // Empty where it cannot be built: the run then fails, saying so.
    let model: Arc<[u8]> = cacheless_safetensors::serialize(&views, Some(&meta)).unwrap_or_default().into();
    drop(views);
    let (blob_old, blob) = (noise(63, 100_000), noise(64, (300 << 10) + 11));
    let (stream_old, stream) = (noise(65, 70_000), noise(66, (3 << 20) + 5));
    let (setup_olds, setup_new) = ([blob_old.clone(), stream_old.clone()], [blob.clone(), stream.clone()]);
    let built = !model.is_empty();
    Workload {
        name: "python".into(),
        setup: Box::new(move |root, scratch| {
            write_synced(&root.join("blob.bin"), &setup_olds[0])?;
            write_synced(&root.join("stream.bin"), &setup_olds[1])?;
            std::fs::write(scratch.join("blob.bin"), &setup_new[0][..])?;
            std::fs::write(scratch.join("stream.bin"), &setup_new[1][..])?;
            tensors.iter().try_for_each(|t| std::fs::write(scratch.join(t.file), &t.data[..]))
        }),
        run: Box::new(move |ctx: &Ctx| {
            if !built {
                return Err("the expected safetensors file could not be built".into());
            }
            let py = match python() {
                Ok(p) => p,
                Err(why) => return Ok(Ran::Unsupported(why)),
            };
            run_python(ctx, &py, &["model.safetensors", "blob.bin", "stream.bin"])
        }),
        files: vec![
            expect("model.safetensors", None, model, "model.safetensors", true),
            expect("blob.bin", Some(blob_old), blob, "blob.bin", true),
            expect("stream.bin", Some(stream_old), stream, "stream.bin", true),
        ],
        dirs: vec![],
        symlinks: vec![],
        absent: vec![],
        checks: vec![],
    }
}

/// Runs [`PYTHON_CALLS`] in `py`, marking each of `calls` as the child says it returned.
fn run_python(ctx: &Ctx, py: &Path, calls: &[&str]) -> Result<Ran, String> {
    use std::io::{BufRead, Write};
    let err_path = ctx.scratch.join("python.err");
    let err = std::fs::File::create(&err_path).map_err(|e| format!("create {}: {e}", err_path.display()))?;
    let mut child = Command::new(py)
        .arg("-c")
        .arg(PYTHON_CALLS)
        .arg(&ctx.root)
        .arg(&ctx.scratch)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()
        .map_err(|e| format!("{}: {e}", py.display()))?;
    let (Some(mut to), Some(from)) = (child.stdin.take(), child.stdout.take()) else {
        return Err("the child's pipes are missing".into());
    };
    for line in std::io::BufReader::new(from).lines() {
        let Ok(line) = line else { break };
        if let Some(call) = calls.iter().find(|c| **c == line.trim()) {
            ctx.mark(call);
        }
        // A child that has already exited is seen at the wait below.
        let _ = writeln!(to, "go");
    }
    drop(to);
    let status = child.wait().map_err(|e| format!("wait for {}: {e}", py.display()))?;
    if status.success() {
        return Ok(Ran::Done);
    }
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    Err(format!("{} exited with {status}: {}", py.display(), stderr.trim().lines().last().unwrap_or("")))
}
