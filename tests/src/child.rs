//! Child processes that are killed and reaped on drop, and spawning a command inside a cgroup.

use std::ffi::CString;
use std::io;
use std::ops::{Deref, DerefMut};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// A child process that is SIGKILLed and waited for when dropped (if it has not exited already).
#[derive(Debug)]
pub struct ChildGuard(Child);

impl ChildGuard {
    /// Spawns `cmd`, panicking with the command line if it cannot start.
    pub fn spawn(cmd: &mut Command) -> ChildGuard {
        match cmd.spawn() {
            Ok(c) => ChildGuard(c),
            Err(e) => panic!("cannot start {cmd:?}: {e}"),
        }
    }

    /// Wraps an already spawned child.
    pub fn new(child: Child) -> ChildGuard {
        ChildGuard(child)
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Waits at most `timeout` for the child to exit; `None` if it is still running.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.0.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if Instant::now() >= deadline => return None,
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => panic!("waiting for pid {}: {e}", self.0.id()),
            }
        }
    }

    /// Kills the child (SIGKILL) and reaps it. Harmless if it has exited already.
    pub fn kill(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

impl Deref for ChildGuard {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl DerefMut for ChildGuard {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Spawns `cmd` as a member of the cgroup directory `cgroup` (v1 or v2): the child writes `0` (itself) to
/// `<cgroup>/cgroup.procs` between fork and exec, so everything it allocates is charged to that group.
pub fn spawn_in_cgroup(cmd: &mut Command, cgroup: &Path) -> ChildGuard {
    join_cgroup_at_exec(cmd, cgroup);
    match cmd.spawn() {
        Ok(c) => ChildGuard(c),
        Err(e) => panic!("cannot start {cmd:?} in {}: {e}", cgroup.display()),
    }
}

/// Makes the child that `cmd` spawns join the cgroup directory `cgroup` (v1 or v2) before it execs: it writes `0`
/// (itself) to `<cgroup>/cgroup.procs` between fork and exec, and the spawn fails if it cannot. For a caller that
/// spawns the command its own way ([`spawn_in_cgroup`] spawns it).
pub fn join_cgroup_at_exec(cmd: &mut Command, cgroup: &Path) {
    let procs = cgroup.join("cgroup.procs");
    let path = match CString::new(procs.as_os_str().as_bytes()) {
        Ok(p) => p,
        Err(e) => panic!("bad cgroup path {}: {e}", procs.display()),
    };
    // SAFETY: the closure runs in the forked child before exec and only makes async-signal-safe system calls
    // (open, write, close) on memory allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let n = libc::write(fd, b"0".as_ptr().cast(), 1);
            let err = io::Error::last_os_error();
            libc::close(fd);
            if n != 1 {
                return Err(err);
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_kills_and_reaps() {
        let guard = ChildGuard::spawn(Command::new("sleep").arg("30"));
        let pid = guard.pid();
        drop(guard);
        // Reaped: no /proc entry left (not even a zombie).
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn wait_timeout_sees_an_exit() {
        let mut guard = ChildGuard::spawn(&mut Command::new("true"));
        let status = guard.wait_timeout(Duration::from_secs(5));
        assert!(status.is_some_and(|s| s.success()));
    }
}
