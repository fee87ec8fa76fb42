//! Real filesystems for tests: small images on loop devices, tmpfs and overlay mounts, each
//! under its own scratch folder and taken down (unmounted, loop device detached, image removed)
//! when dropped, also when the test fails.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A filesystem [`LoopFs`] can mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsKind {
    /// ext4 on a loop device.
    Ext4,
    /// XFS on a loop device.
    Xfs,
    /// btrfs on a loop device (default data checksums).
    Btrfs,
    /// A size-limited tmpfs.
    Tmpfs,
    /// overlay whose lower and upper layers are folders of the scratch disk.
    Overlay,
    /// Read-only erofs with lz4 compression, built from a folder.
    Erofs,
    /// Read-only squashfs (gzip), built from a folder.
    Squashfs,
}

impl FsKind {
    /// Every kind, the writable ones first.
    pub const ALL: [FsKind; 7] = [FsKind::Ext4, FsKind::Xfs, FsKind::Btrfs, FsKind::Tmpfs, FsKind::Overlay, FsKind::Erofs, FsKind::Squashfs];

    /// The kernel's name for it (as in /proc/filesystems), also the feature name tests require.
    pub fn name(self) -> &'static str {
        match self {
            FsKind::Ext4 => "ext4",
            FsKind::Xfs => "xfs",
            FsKind::Btrfs => "btrfs",
            FsKind::Tmpfs => "tmpfs",
            FsKind::Overlay => "overlay",
            FsKind::Erofs => "erofs",
            FsKind::Squashfs => "squashfs",
        }
    }

    /// Whether it is built read-only from a folder ([`LoopFs::image`]) rather than made empty.
    pub fn read_only(self) -> bool {
        matches!(self, FsKind::Erofs | FsKind::Squashfs)
    }
}

/// A mounted filesystem for one test; everything is undone when it is dropped.
#[derive(Debug)]
pub struct LoopFs {
    kind: FsKind,
    mnt: PathBuf,
    /// Mount points, in the order they were mounted.
    mounts: Vec<PathBuf>,
    loopdev: Option<String>,
    /// Holds the image, the mount point and overlay's layers; removed last.
    dir: Option<tempfile::TempDir>,
}

/// Runs a command; `Err` names it with its status and standard error.
fn run(cmd: &mut Command) -> Result<String, String> {
    match cmd.output() {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).trim().to_string()),
        Ok(o) => Err(format!("{cmd:?}: {}: {}", o.status, String::from_utf8_lossy(&o.stderr).trim())),
        Err(e) => Err(format!("{cmd:?}: {e}")),
    }
}

/// `Ok` when the running kernel has filesystem `name` (loading its module if need be), else
/// why not. This is the one reason a filesystem test may skip.
pub fn kernel_has(name: &str) -> Result<(), String> {
    let listed = |n: &str| std::fs::read_to_string("/proc/filesystems").is_ok_and(|s| s.lines().any(|l| l.split_whitespace().last() == Some(n)));
    if !listed(name) {
        let _ = Command::new("modprobe").arg("-q").arg(name).status();
    }
    if listed(name) {
        Ok(())
    } else {
        Err(format!("the kernel has no {name} (not in /proc/filesystems, no module)"))
    }
}

impl LoopFs {
    /// An empty writable filesystem of `kind` of `mib` MiB, mounted in a fresh scratch folder.
    /// `Err` says why it cannot be had: not root, or a kernel without it ([`kernel_has`]);
    /// a missing mkfs tool or a failing mount panics (scripts/test installs the tools).
    pub fn new(kind: FsKind, mib: u64) -> Result<LoopFs, String> {
        assert!(!kind.read_only(), "{} is built from a folder: use LoopFs::image", kind.name());
        crate::root()?;
        kernel_has(kind.name())?;
        let mut fs = LoopFs::empty(kind);
        let dir = fs.scratch();
        let mnt = dir.join("mnt");
        mkdir(&mnt);
        match kind {
            FsKind::Tmpfs => fs.mount(Command::new("mount").args(["-t", "tmpfs", "-o"]).arg(format!("size={mib}m")).arg("tmpfs").arg(&mnt), &mnt),
            FsKind::Overlay => {
                for d in ["lower", "upper", "work"] {
                    mkdir(&dir.join(d));
                }
                let opts = format!("lowerdir={},upperdir={},workdir={}", dir.join("lower").display(), dir.join("upper").display(), dir.join("work").display());
                fs.mount(Command::new("mount").args(["-t", "overlay", "overlay", "-o"]).arg(opts).arg(&mnt), &mnt);
            }
            _ => {
                let img = dir.join("image");
                let f = std::fs::File::create(&img).unwrap_or_else(|e| panic!("create {}: {e}", img.display()));
                f.set_len(mib << 20).unwrap_or_else(|e| panic!("size {}: {e}", img.display()));
                let mut mkfs = match kind {
                    FsKind::Ext4 => cmd("mkfs.ext4", &["-q", "-F"]),
                    // mkfs.xfs refuses filesystems under 300 MB unless run from fstests, which it
                    // recognises by these variables; a small one is all a test needs.
                    FsKind::Xfs => {
                        let mut c = cmd("mkfs.xfs", &["-q", "-f"]);
                        c.env("TEST_DIR", &dir).env("TEST_DEV", &img).env("QA_CHECK_FS", "1");
                        c
                    }
                    _ => cmd("mkfs.btrfs", &["-q", "-f"]),
                };
                run(mkfs.arg(&img)).unwrap_or_else(|e| panic!("{e}"));
                fs.attach_and_mount(&img, kind.name(), &mnt);
            }
        }
        fs.mnt = mnt;
        Ok(fs)
    }

    /// A read-only filesystem of `kind` (erofs with lz4, squashfs) holding a copy of folder
    /// `src`, mounted from a loop device in a fresh scratch folder. `Err` as for [`LoopFs::new`].
    pub fn image(kind: FsKind, src: &Path) -> Result<LoopFs, String> {
        assert!(kind.read_only(), "{} is made empty: use LoopFs::new", kind.name());
        crate::root()?;
        kernel_has(kind.name())?;
        let mut fs = LoopFs::empty(kind);
        let dir = fs.scratch();
        let img = dir.join("image");
        let mnt = dir.join("mnt");
        mkdir(&mnt);
        let mut mk = match kind {
            FsKind::Erofs => {
                let mut c = cmd("mkfs.erofs", &["--quiet", "-zlz4"]);
                c.arg(&img).arg(src);
                c
            }
            _ => {
                let mut c = cmd("mksquashfs", &[]);
                c.arg(src).arg(&img).args(["-noappend", "-quiet", "-no-progress"]);
                c
            }
        };
        run(&mut mk).unwrap_or_else(|e| panic!("{e}"));
        fs.attach_and_mount(&img, kind.name(), &mnt);
        fs.mnt = mnt;
        Ok(fs)
    }

    fn empty(kind: FsKind) -> LoopFs {
        LoopFs { kind, mnt: PathBuf::new(), mounts: Vec::new(), loopdev: None, dir: None }
    }

    fn scratch(&mut self) -> PathBuf {
        let d = crate::scratch();
        let p = d.path().to_path_buf();
        self.dir = Some(d);
        p
    }

    /// Attaches `img` to a loop device with direct I/O on (else the loop device's own caching
    /// of the image file would hide what the filesystem's I/O does) and mounts it at `mnt`.
    fn attach_and_mount(&mut self, img: &Path, fstype: &str, mnt: &Path) {
        let dev = run(Command::new("losetup").args(["--direct-io=on", "-f", "--show"]).arg(img)).unwrap_or_else(|e| panic!("{e}"));
        self.loopdev = Some(dev.clone());
        self.mount(Command::new("mount").args(["-t", fstype, &dev]).arg(mnt), mnt);
    }

    fn mount(&mut self, c: &mut Command, mnt: &Path) {
        run(c).unwrap_or_else(|e| panic!("{e}"));
        self.mounts.push(mnt.to_path_buf());
    }

    /// Which filesystem this is.
    pub fn kind(&self) -> FsKind {
        self.kind
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.mnt
    }

    /// The loop device (`/dev/loopN`), for the kinds that have one.
    pub fn loop_device(&self) -> Option<&str> {
        self.loopdev.as_deref()
    }

    /// For overlay: the folder of the upper layer, where files written through the mount land
    /// (their page cache is that of these files, not of the overlay's).
    pub fn upper(&self) -> Option<PathBuf> {
        (self.kind == FsKind::Overlay).then(|| self.dir.as_ref().map(|d| d.path().join("upper"))).flatten()
    }
}

fn cmd(prog: &str, args: &[&str]) -> Command {
    let mut c = Command::new(prog);
    c.args(args);
    c
}

fn mkdir(p: &Path) {
    std::fs::create_dir_all(p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        for m in self.mounts.iter().rev() {
            // A process still holding a file open (a failed test's child) makes umount EBUSY:
            // detach it lazily so the loop device and the image can go all the same.
            if run(Command::new("umount").arg(m)).is_err() {
                let _ = run(Command::new("umount").arg("-l").arg(m));
            }
        }
        if let Some(dev) = &self.loopdev {
            let _ = run(Command::new("losetup").arg("-d").arg(dev));
        }
        self.dir.take();
    }
}
