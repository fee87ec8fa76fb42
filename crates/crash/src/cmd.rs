//! The system tools the simulator drives (mkfs, losetup, mount, the filesystem checkers), and
//! guards for what they set up: a [`Loop`] device is detached and a [`Mount`] unmounted when
//! dropped, and both are registered with [`crate::cleanup`] meanwhile.
//!
//! The tools themselves, not the ioctls: losetup and mount know every kernel's quirks (loop
//! device allocation races, LOOP_CONFIGURE against the older ioctls), and their errors are
//! clear.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cleanup::{self, Undo};
use crate::{Error, Result};

/// Runs `c`; its standard output on success, else an error with the command line, the status
/// and standard error.
pub fn run(c: &mut Command) -> Result<String> {
    let what = format!("{c:?}").replace('"', "");
    let out = c.output().map_err(|e| Error::Command { what: what.clone(), detail: format!("cannot start: {e}") })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let mut detail = format!("{}", out.status);
        for s in [&out.stderr, &out.stdout] {
            let t = String::from_utf8_lossy(s);
            let t = t.trim();
            if !t.is_empty() {
                detail.push_str(": ");
                detail.push_str(&t.chars().take(2000).collect::<String>());
            }
        }
        Err(Error::Command { what, detail })
    }
}

/// A loop device attached to an image file, detached when dropped.
#[derive(Debug)]
pub struct Loop {
    dev: String,
    direct_io: bool,
    ticket: u64,
}

impl Loop {
    /// Attaches `image` to a free loop device, with direct I/O when `direct_io` and the
    /// backing file takes it (see [`Loop::direct_io`] for what was granted).
    pub fn attach(image: &Path, direct_io: bool) -> Result<Loop> {
        let _gate = cleanup::gate();
        let mut c = Command::new("losetup");
        c.args(["--find", "--show"]);
        if direct_io {
            c.arg("--direct-io=on");
        }
        let out = run(c.arg(image));
        let out = match out {
            Err(_) if direct_io => run(Command::new("losetup").args(["--find", "--show"]).arg(image))?,
            o => o?,
        };
        let dev = out.trim().to_string();
        if !dev.starts_with("/dev/loop") {
            return Err(Error::Command { what: format!("losetup --find --show {}", image.display()), detail: format!("unexpected output {dev:?}") });
        }
        let ticket = cleanup::register(Undo::Detach(dev.clone()));
        let name = dev.trim_start_matches("/dev/");
        // A cap on request size set by an earlier user of the device outlives its detach: back
        // to the most the device takes.
        let queue = format!("/sys/block/{name}/queue");
        if let Ok(hw) = std::fs::read_to_string(format!("{queue}/max_hw_sectors_kb")) {
            let _ = std::fs::write(format!("{queue}/max_sectors_kb"), hw.trim());
        }
        let granted = std::fs::read_to_string(format!("/sys/block/{name}/loop/dio")).is_ok_and(|s| s.trim() == "1");
        Ok(Loop { dev, direct_io: granted, ticket })
    }

    /// Caps the size of its requests (`queue/max_sectors_kb`).
    pub fn max_request_kib(&self, kib: u32) -> Result<()> {
        let p = format!("/sys/block/{}/queue/max_sectors_kb", self.dev.trim_start_matches("/dev/"));
        std::fs::write(&p, kib.to_string()).map_err(|e| Error::io("write", Path::new(&p), e))
    }

    /// The device's path.
    pub fn dev(&self) -> &str {
        &self.dev
    }

    /// Whether the loop driver does direct I/O on its backing file (`/sys/block/loopN/loop/dio`).
    pub fn direct_io(&self) -> bool {
        self.direct_io
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        Undo::Detach(self.dev.clone()).run();
        cleanup::done(self.ticket);
    }
}

/// A mounted filesystem, unmounted when dropped.
#[derive(Debug)]
pub struct Mount {
    at: PathBuf,
    ticket: Option<u64>,
}

impl Mount {
    /// Mounts `dev` (of type `fstype`) at `at`, with `opts` if not empty.
    pub fn new(dev: &str, fstype: &str, at: &Path, opts: &str) -> Result<Mount> {
        let _gate = cleanup::gate();
        let mut c = Command::new("mount");
        c.args(["-t", fstype]);
        if !opts.is_empty() {
            c.args(["-o", opts]);
        }
        run(c.arg(dev).arg(at))?;
        let ticket = Some(cleanup::register(Undo::Umount(at.to_path_buf())));
        Ok(Mount { at: at.to_path_buf(), ticket })
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.at
    }

    /// Unmounts it now, reporting a failure (dropping it unmounts lazily instead).
    pub fn unmount(mut self) -> Result<()> {
        let r = run(Command::new("umount").arg(&self.at)).map(drop);
        if r.is_ok() {
            if let Some(t) = self.ticket.take() {
                cleanup::done(t);
            }
        }
        r
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Some(t) = self.ticket.take() {
            Undo::Umount(self.at.clone()).run();
            cleanup::done(t);
        }
    }
}

/// Makes a filesystem of `fstype` on the image file `image`.
pub fn mkfs(fstype: &str, image: &Path) -> Result<()> {
    let mut c = match fstype {
        // No lazy init: its background zeroing would write during the workload.
        "ext4" => {
            let mut c = Command::new("mkfs.ext4");
            c.args(["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"]);
            c
        }
        // mkfs.xfs refuses filesystems under 300 MB unless run from fstests, which it
        // recognises by these variables; a small one keeps each crash state cheap.
        "xfs" => {
            let mut c = Command::new("mkfs.xfs");
            c.args(["-q", "-f"]);
            let dir = image.parent().unwrap_or(Path::new("/tmp"));
            c.env("TEST_DIR", dir).env("TEST_DEV", image).env("QA_CHECK_FS", "1");
            c
        }
        "btrfs" => {
            let mut c = Command::new("mkfs.btrfs");
            c.args(["-q", "-f"]);
            c
        }
        other => return Err(Error::Invalid(format!("no mkfs for {other:?}: use ext4, xfs or btrfs"))),
    };
    run(c.arg(image)).map(drop)
}

/// Runs the filesystem's own read-only check on the image file (not mounted): `e2fsck -fn`,
/// `xfs_repair -n`, `btrfs check --readonly`. `Ok(None)` when it is clean, else its complaint.
pub fn fsck(fstype: &str, image: &Path) -> Result<Option<String>> {
    let mut c = match fstype {
        "ext4" => {
            let mut c = Command::new("e2fsck");
            c.arg("-fn");
            c
        }
        "xfs" => {
            let mut c = Command::new("xfs_repair");
            c.arg("-n");
            c
        }
        "btrfs" => {
            let mut c = Command::new("btrfs");
            c.args(["check", "--readonly"]);
            c
        }
        other => return Err(Error::Invalid(format!("no checker for {other:?}"))),
    };
    match run(c.arg(image)) {
        Ok(_) => Ok(None),
        Err(Error::Command { detail, .. }) if !detail.starts_with("cannot start") => Ok(Some(detail)),
        Err(e) => Err(e),
    }
}
