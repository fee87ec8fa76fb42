//! The engine's temporary names, `.NAME.cacheless-BOOT-PID-N.lk.tmp`: what they are made of
//! (see `sys::temps` for who may remove one, and when).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Longest name a directory entry may have on Linux (NAME_MAX).
const NAME_MAX: usize = 255;

/// The first 8 hex digits of this boot's id (/proc/sys/kernel/random/boot_id), or `00000000`
/// where /proc does not say.
pub fn boot() -> &'static str {
    static BOOT: OnceLock<String> = OnceLock::new();
    BOOT.get_or_init(|| {
        let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        let hex: String = id.chars().filter(char::is_ascii_hexdigit).take(8).collect();
        if hex.len() == 8 {
            hex
        } else {
            "00000000".into()
        }
    })
}

/// This process's id as its temporary names and its slot (see `sys::temps`) carry it: read once,
/// where a call for each name cost a system call per file. A child forked from this process
/// keeps its parent's, so that its names and its slot still agree (what keeps cleaners off its
/// temporaries); only the PID a person reads in its names is its parent's.
pub fn pid() -> u32 {
    static PID: OnceLock<u32> = OnceLock::new();
    *PID.get_or_init(std::process::id)
}

/// A temporary name beside `name`, `.NAME.cacheless-BOOT-PID-N.lk.tmp`, that no other writer
/// of this process uses. It fits wherever `name` does: NAME is cut to leave room for the rest
/// (any byte but '/' and NUL may end a name, so a cut is a name too). Made only under a
/// `sys::temps::Claim` on its folder.
pub fn temp_name(name: &OsStr) -> OsString {
    let tail = format!(".cacheless-{}-{}-{}.lk.tmp", boot(), pid(), COUNTER.fetch_add(1, Ordering::Relaxed));
    let bytes = name.as_bytes();
    let keep = bytes.len().min(NAME_MAX - 1 - tail.len());
    let mut t = OsString::from(".");
    t.push(OsStr::from_bytes(&bytes[..keep]));
    t.push(tail);
    t
}

/// A name for the benchmark's temporary folder, `.cacheless-bench-BOOT-PID-N.lk`, that
/// `sys::temps::clean_tree` recognises once its owner is gone; made under a `sys::temps::Claim` on the folder it
/// is in.
pub fn bench_dir_name() -> String {
    format!(".cacheless-bench-{}-{}-{}.lk", boot(), pid(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// A name for a file that probes a filesystem without O_TMPFILE (see `caps`),
/// `.cacheless-probe.cacheless-BOOT-PID-N.lk.tmp`: one per call, so that threads probing one
/// filesystem at once never meet, and one of the temporary names `cacheless clean` removes once
/// its owner is gone (should it die between the probe's creation and its unlink).
pub fn probe_name() -> OsString {
    temp_name(OsStr::new("cacheless-probe"))
}
