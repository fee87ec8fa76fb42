//! What the process is: its ids, its umask, its limits, the page size, its parent; and the
//! names of the system's users and groups (getpwnam and its kin, through NSS).

use std::io;
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

/// The user id of the account `name`; `None` where there is no such account.
pub fn user_id(name: &str) -> Option<u32> {
    nix::unistd::User::from_name(name).ok().flatten().map(|u| u.uid.as_raw())
}

/// The group id of the group `name`; `None` where there is no such group.
pub fn group_id(name: &str) -> Option<u32> {
    nix::unistd::Group::from_name(name).ok().flatten().map(|g| g.gid.as_raw())
}

/// The name of the account `uid`; `None` where it has none.
pub fn user_name(uid: u32) -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok().flatten().map(|u| u.name)
}

/// The name of the group `gid`; `None` where it has none.
pub fn group_name(gid: u32) -> Option<String> {
    nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid)).ok().flatten().map(|g| g.name)
}

/// The parent's process id (1, or a subreaper's, once the parent is gone).
pub fn parent_pid() -> i32 {
    rustix::process::Pid::as_raw(rustix::process::getppid())
}

/// Asks the kernel to kill this process when the thread that started it ends (a helper process
/// that must not outlive the job that runs it).
pub fn die_with_parent() -> io::Result<()> {
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL)).map_err(io::Error::from)
}

/// Locks the process's present memory (mlockall(MCL_CURRENT)); whether the kernel allowed it.
pub fn lock_memory() -> bool {
    rustix::mm::mlockall(rustix::mm::MlockAllFlags::CURRENT).is_ok()
}

/// Writes every filesystem's dirty data back (sync(2)).
pub fn sync_all() {
    rustix::fs::sync();
}

/// The bytes an unprivileged user may still write on the filesystem holding `path`; `None`
/// where it cannot be asked.
pub fn space_available(path: &std::path::Path) -> Option<u64> {
    rustix::fs::statvfs(path).ok().map(|s| s.f_bavail.saturating_mul(s.f_frsize))
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

    /// The account lookups agree with each other and with the system's own database.
    #[test]
    fn users_and_groups_are_looked_up_both_ways() {
        assert_eq!(user_name(0).as_deref(), Some("root"));
        assert_eq!(user_id("root"), Some(0));
        let g0 = group_name(0).expect("group 0 has a name");
        assert_eq!(group_id(&g0), Some(0));
        assert_eq!(user_id("no-such-user-cacheless"), None);
        assert_eq!(group_id("no-such-group-cacheless"), None);
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
        let first = passwd.lines().next().unwrap();
        let mut f = first.split(':');
        let (name, uid) = (f.next().unwrap(), f.nth(1).unwrap().parse::<u32>().unwrap());
        assert_eq!((user_id(name), user_name(uid).as_deref()), (Some(uid), Some(name)));
    }
}
