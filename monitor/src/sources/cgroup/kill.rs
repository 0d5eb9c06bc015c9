//! Ending every process of a group, and removing a group: cgroup v2 `cgroup.kill` where the kernel has it, else
//! SIGKILL to each pid listed in `cgroup.procs` (of the group and every cgroup below it) until none is left. A pid
//! is signalled through a pidfd opened on it and only after the process behind that pidfd is seen listed in the
//! group again, so a pid reused by a process outside the group is never signalled; this process never signals
//! itself. In a group this process belongs to, only its own descendants are ended ([`Descendants`]).

use super::{parse_procs, CgroupError};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The group directory and every cgroup directory below it, parents first.
pub fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        if let Ok(entries) = std::fs::read_dir(&out[i]) {
            let mut subs: Vec<PathBuf> =
                entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()).collect();
            subs.sort();
            out.extend(subs);
        }
        i += 1;
    }
    out
}

/// Every pid in the group's tree (sorted, deduplicated). A cgroup removed meanwhile lists nothing.
pub fn members(dir: &Path) -> Result<Vec<u32>, CgroupError> {
    let mut out = Vec::new();
    for d in tree(dir) {
        let path = d.join("cgroup.procs");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENODEV) => continue,
            Err(e) => return Err(CgroupError::Io { path, source: e }),
        };
        parse_procs(&text, &mut out).map_err(|msg| CgroupError::Parse { path, msg })?;
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// What [`kill_all`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Killed {
    /// Processes signalled with SIGKILL (v1, or v2 without `cgroup.kill`).
    pub signalled: usize,
    /// True when the kernel's `cgroup.kill` was used.
    pub cgroup_kill: bool,
    /// Processes still listed at the deadline (this process itself is never counted).
    pub left: Vec<u32>,
}

/// Ends every process in the group `dir` and below it, except this process: `cgroup.kill` when the kernel has it
/// and this process is outside the group, otherwise SIGKILL to each listed pid, repeated (a process may fork
/// meanwhile) until the group is empty or `timeout` has passed.
pub fn kill_all(dir: &Path, timeout: Duration) -> Result<Killed, CgroupError> {
    let me = std::process::id();
    let deadline = Instant::now() + timeout;
    let mut done = Killed::default();
    let kill_file = dir.join("cgroup.kill");
    // cgroup.kill would end this process too when it is a member.
    let use_kill_file = kill_file.exists() && !members(dir)?.contains(&me);
    let mut signalled = std::collections::HashSet::new();
    loop {
        let pids: Vec<u32> = members(dir)?.into_iter().filter(|&p| p != me).collect();
        if pids.is_empty() || Instant::now() >= deadline {
            done.signalled = signalled.len();
            done.left = pids;
            return Ok(done);
        }
        if use_kill_file && std::fs::write(&kill_file, "1").is_ok() {
            done.cgroup_kill = true;
        } else {
            for pid in pids {
                if signal_member(dir, pid) {
                    signalled.insert(pid);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The processes of a group that descend from this process, each held by a pidfd: taken while their parents still
/// live, they are found again after those parents stop, orphans included, and a pid reused meanwhile is never
/// mistaken for one of them. For a group this process is a member of (`auto`), where the group is not all ours.
pub(crate) struct Descendants(Vec<(u32, std::os::fd::OwnedFd)>);

impl Descendants {
    /// The members of `dir` (and below) descending from this process.
    pub(crate) fn in_group(dir: &Path) -> Result<Descendants, CgroupError> {
        let me = std::process::id();
        let proc_root = Path::new("/proc");
        let ours = crate::sources::procs::with_descendants(proc_root, me);
        let mut held = Vec::new();
        for pid in members(dir)? {
            if pid != me && ours.contains(&pid) {
                if let Ok(fd) = crate::base::pidfd::open(pid) {
                    held.push((pid, fd));
                }
            }
        }
        // A pid that named another process by the time its pidfd was opened is dropped: the pidfd's process must
        // still be listed and still descend from this one.
        let (listed, ours) = (members(dir)?, crate::sources::procs::with_descendants(proc_root, me));
        held.retain(|(pid, _)| listed.binary_search(pid).is_ok() && ours.contains(pid));
        Ok(Descendants(held))
    }

    /// How many processes are held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.len()
    }

    /// SIGKILLs every held process still running; how many were.
    pub fn kill(self) -> usize {
        self.0.iter().filter(|(_, fd)| crate::base::pidfd::send_signal(fd, libc::SIGKILL).is_ok()).count()
    }
}

/// SIGKILLs `pid` if, through a pidfd opened on it, it is still a member of the group `dir`. True when signalled.
fn signal_member(dir: &Path, pid: u32) -> bool {
    let listed = || members(dir).is_ok_and(|m| m.binary_search(&pid).is_ok());
    match crate::base::pidfd::open(pid) {
        // The pidfd names one process for good: if the pid is listed in the group now, it is that process.
        Ok(fd) => listed() && crate::base::pidfd::send_signal(&fd, libc::SIGKILL).is_ok(),
        // A kernel without pidfds (before 5.3): the membership check just made is the best there is.
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            let Ok(raw) = libc::pid_t::try_from(pid) else { return false };
            // SAFETY: kill has no memory-safety preconditions.
            listed() && unsafe { libc::kill(raw, libc::SIGKILL) } == 0
        }
        Err(_) => false,
    }
}

/// Removes the group `dir` and every cgroup below it (deepest first), trying again until it is gone or `timeout`
/// has passed (a cgroup whose last process just died may still count as populated for a moment).
pub(crate) fn remove_tree(dir: &Path, timeout: Duration) -> Result<(), CgroupError> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut last = None;
        for d in tree(dir).iter().rev() {
            match std::fs::remove_dir(d) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => last = Some((d.clone(), e)),
            }
        }
        if !dir.exists() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let (path, source) = last.unwrap_or((dir.to_path_buf(), std::io::Error::other("still present")));
            return Err(CgroupError::Io { path, source });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_lists_parents_first_and_members_read_every_level() {
        let root = monitor_tests::temp_dir("cgroup-kill-tree");
        std::fs::create_dir_all(root.join("a/b")).expect("mkdir");
        std::fs::write(root.join("cgroup.procs"), "12\n3\n").expect("procs");
        std::fs::write(root.join("a/cgroup.procs"), "").expect("procs");
        std::fs::write(root.join("a/b/cgroup.procs"), "7\n3\n").expect("procs");
        let t = tree(&root);
        assert_eq!(t, [root.clone(), root.join("a"), root.join("a/b")]);
        assert_eq!(members(&root).expect("members"), [3, 7, 12]);
        std::fs::write(root.join("a/cgroup.procs"), "x\n").expect("procs");
        assert!(matches!(members(&root), Err(CgroupError::Parse { .. })));
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(members(&root).expect("a removed group lists nothing"), Vec::<u32>::new());
    }

    #[test]
    fn a_listed_pid_that_is_this_process_or_not_a_member_is_never_signalled() {
        let root = monitor_tests::temp_dir("cgroup-kill-self");
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("spawn");
        // The child is not listed: not signalled. This process is listed: never signalled, and left alone.
        std::fs::write(root.join("cgroup.procs"), format!("{}\n", std::process::id())).expect("procs");
        assert!(!signal_member(&root, child.id()));
        let k = kill_all(&root, Duration::from_millis(50)).expect("kill");
        assert_eq!(k, Killed::default());
        assert!(child.try_wait().expect("try_wait").is_none(), "the child was signalled");
        // Listed: signalled.
        std::fs::write(root.join("cgroup.procs"), format!("{}\n", child.id())).expect("procs");
        assert!(signal_member(&root, child.id()));
        let status = child.wait().expect("wait");
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn descendants_are_held_and_killed_even_once_orphaned() {
        let root = monitor_tests::temp_dir("cgroup-kill-descendants");
        // A shell of ours with a child of its own, and a process that is not ours (pid 1), all listed.
        let mut sh = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        let mut line = String::new();
        if let Some(out) = sh.stdout.as_mut() {
            use std::io::BufRead;
            std::io::BufReader::new(out).read_line(&mut line).expect("read");
        }
        let sleep: u32 = line.trim().parse().expect("the sleep's pid");
        let listed = format!("1\n{}\n{sleep}\n{}\n", sh.id(), std::process::id());
        std::fs::write(root.join("cgroup.procs"), listed).expect("procs");
        let d = Descendants::in_group(&root).expect("descendants");
        assert_eq!(d.len(), 2, "the shell and its sleep, not pid 1 nor this process");
        // The shell goes first: its sleep, orphaned, is still reached through its pidfd.
        let _ = sh.kill();
        let _ = sh.wait();
        assert_eq!(d.kill(), 1, "the sleep was running");
        let gone = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            std::fs::read_to_string(format!("/proc/{sleep}/stat"))
                .map_or(true, |t| t.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z')))
        });
        assert!(gone, "the orphaned sleep still runs");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn cgroup_kill_is_written_where_the_kernel_has_it_and_this_process_is_outside() {
        let root = monitor_tests::temp_dir("cgroup-kill-file");
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("spawn");
        // A stand-in group whose listed process does not die of the write: written again until the deadline.
        std::fs::write(root.join("cgroup.kill"), "").expect("cgroup.kill");
        std::fs::write(root.join("cgroup.procs"), format!("{}\n", child.id())).expect("procs");
        let k = kill_all(&root, Duration::from_millis(100)).expect("kill");
        assert_eq!(k, Killed { signalled: 0, cgroup_kill: true, left: vec![child.id()] });
        assert_eq!(std::fs::read_to_string(root.join("cgroup.kill")).expect("read"), "1");
        assert!(child.try_wait().expect("try_wait").is_none(), "signalled besides cgroup.kill");
        // This process listed too: cgroup.kill would end it, so each other pid is signalled instead.
        std::fs::write(root.join("cgroup.kill"), "").expect("cgroup.kill");
        std::fs::write(root.join("cgroup.procs"), format!("{}\n{}\n", child.id(), std::process::id())).expect("procs");
        let k = kill_all(&root, Duration::from_millis(100)).expect("kill");
        assert!(!k.cgroup_kill && k.signalled == 1, "{k:?}");
        assert_eq!(std::fs::read_to_string(root.join("cgroup.kill")).expect("read"), "");
        let status = child.wait().expect("wait");
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
        let _ = std::fs::remove_dir_all(&root);
    }
}
