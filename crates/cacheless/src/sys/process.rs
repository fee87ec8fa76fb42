//! What the process is: its ids, its umask, its limits, the page size.

use std::os::fd::{AsRawFd, BorrowedFd};

/// The effective user id.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Whether the process runs as root (effective user id 0).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Whether the process is in group `gid` (its effective group or a supplementary one).
pub fn in_group(gid: u32) -> bool {
    rustix::process::getegid().as_raw() == gid || rustix::process::getgroups().is_ok_and(|v| v.iter().any(|g| g.as_raw() == gid))
}

/// The soft limit on open files (RLIMIT_NOFILE); `None` where unlimited.
pub fn nofile_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// Raises the soft limit on open files to the hard limit (a process that holds many files in
/// flight sizes what it holds to whatever the limit is).
pub fn raise_nofile_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let l = getrlimit(Resource::Nofile);
    if l.current < l.maximum {
        let _ = setrlimit(Resource::Nofile, Rlimit { current: l.maximum, maximum: l.maximum });
    }
}

/// The page size.
pub fn page_size() -> usize {
    rustix::param::page_size()
}

/// The process's umask, from /proc/self/status (Linux 4.7); `None` where it does not say.
/// (umask(2) can only read it by setting it, which races with other threads creating files.)
pub fn umask() -> Option<u32> {
    parse_umask(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// The umask in a /proc/self/status text (its `Umask:` line).
fn parse_umask(status: &str) -> Option<u32> {
    let line = status.lines().find_map(|l| l.strip_prefix("Umask:"))?;
    u32::from_str_radix(line.trim(), 8).ok()
}

/// The path through which the process reaches its open descriptor `fd` (for the calls that
/// take no descriptor: the l*xattr family, linkat of a file without a name).
pub fn proc_fd_path(fd: BorrowedFd<'_>) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_umask_is_read_from_the_status_text() {
        let out = std::process::Command::new("sh").arg("-c").arg("umask 0027; cat /proc/self/status").output().unwrap();
        assert_eq!(parse_umask(&String::from_utf8_lossy(&out.stdout)), Some(0o027));
        assert_eq!(parse_umask("Name:\tx\nUmask:\t0002\nState:\tR\n"), Some(0o002));
        assert_eq!(parse_umask("Name:\tx\n"), None);
        assert!(umask().is_some(), "this process's umask is readable");
    }
}
