//! The orphans' reaper. As a container's entrypoint `monitor run` is PID 1, and the kernel hands it every process
//! of the namespace whose parent exits: a server's double-forked child, what a start-up shell left running. Outside
//! a container `monitor run` asks for the same (`PR_SET_CHILD_SUBREAPER`), so that what its processes leave behind
//! stays in its tree (and is ended with them at the stop) instead of going to the service manager. Either way an
//! orphan that exits stays a zombie until monitor waits for it: [`serve`] waits for every exited child that monitor
//! did not start itself, on each `SIGCHLD`.
//!
//! The children monitor starts (the processes, the alert commands) are waited for by their owners, which need their
//! exit status: they are started through [`spawn`], which records their pids while their [`Kid`] lives, and the
//! reaper leaves those alone. The record is taken before the fork and the reaper reads it under the same lock, so
//! a child that exits before its pid is recorded is never taken from its owner.

use std::io;
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard};
use tokio::process::{Child, Command};

/// The pids of the children monitor started and whose owner still holds them.
static OURS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn ours() -> MutexGuard<'static, Vec<u32>> {
    OURS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A child monitor started: a [`Child`] whose pid the reaper leaves to it until it is dropped.
#[derive(Debug)]
pub struct Kid {
    child: Child,
    pid: Option<u32>,
}

impl Deref for Kid {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.child
    }
}

impl DerefMut for Kid {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        if let Some(pid) = self.pid {
            let mut ours = ours();
            if let Some(i) = ours.iter().position(|&p| p == pid) {
                ours.swap_remove(i);
            }
        }
    }
}

/// Starts `cmd`, its pid recorded as monitor's own for as long as the returned [`Kid`] lives.
pub fn spawn(cmd: &mut Command) -> io::Result<Kid> {
    let mut ours = ours();
    let child = cmd.spawn()?;
    let pid = child.id();
    ours.extend(pid);
    Ok(Kid { child, pid })
}

/// Makes this process the reaper of its descendants' orphans (PID 1 already is). Returns whether it is one.
pub fn adopt() -> bool {
    // SAFETY: getpid has no preconditions.
    if unsafe { libc::getpid() } == 1 {
        return true;
    }
    let on: libc::c_ulong = 1;
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag and touches no memory of ours.
    let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, on, 0, 0, 0) };
    if r != 0 {
        tracing::warn!("cannot become the reaper of the processes' orphans: {}", io::Error::last_os_error());
    }
    r == 0
}

/// This process's children: from each thread's `children` file, or, on a kernel built without them, from every
/// process's `stat` (its parent).
fn children() -> Vec<u32> {
    if !std::path::Path::new("/proc/thread-self/children").exists() {
        return children_by_parent();
    }
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return out };
    for task in tasks.flatten() {
        // A thread that ends meanwhile has handed its children to another one, read after or before it.
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(text.split_ascii_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
    }
    out
}

fn children_by_parent() -> Vec<u32> {
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let Ok(all) = procfs::process::all_processes() else { return Vec::new() };
    all.flatten().filter(|p| p.stat().is_ok_and(|s| s.ppid == me)).filter_map(|p| u32::try_from(p.pid).ok()).collect()
}

/// Waits for every exited child monitor did not start itself; returns how many there were.
pub fn reap() -> usize {
    reap_among(children)
}

/// [`reap`] among the pids `children` lists (read under the lock, so that no [`spawn`] is half done).
fn reap_among(children: impl FnOnce() -> Vec<u32>) -> usize {
    let ours = ours();
    let mut reaped = 0;
    for pid in children().into_iter().filter(|p| !ours.contains(p)) {
        let Ok(raw) = libc::pid_t::try_from(pid) else { continue };
        let mut status = 0;
        // SAFETY: waitpid on one pid with WNOHANG writes only `status`; it returns 0 for a child still running.
        if unsafe { libc::waitpid(raw, &mut status, libc::WNOHANG) } == raw {
            tracing::debug!(pid, status, "reaped an orphan");
            reaped += 1;
        }
    }
    reaped
}

/// The longest an orphan's zombie waits when its `SIGCHLD` was missed.
const BACKSTOP: std::time::Duration = std::time::Duration::from_secs(10);

/// Reaps orphans on every `SIGCHLD` (and every [`BACKSTOP`]), for as long as the runtime runs.
pub async fn serve() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut sigchld = match signal(SignalKind::child()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("cannot watch SIGCHLD, orphans will stay zombies: {e}");
            return;
        }
    };
    // And every BACKSTOP: a zombie whose thread ended while it was being listed (its children move to another
    // thread) sends no second SIGCHLD.
    let mut backstop = tokio::time::interval(BACKSTOP);
    backstop.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            got = sigchld.recv() => if got.is_none() { return },
            _ = backstop.tick() => {}
        }
        reap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zombie(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
    }

    fn wait_for(what: &str, cond: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !cond() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    #[allow(clippy::zombie_processes)] // the stray is reaped by reap_among, which is what is tested
    fn an_exited_child_of_ours_is_left_to_its_owner_and_others_are_reaped() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        rt.block_on(async {
            let mut kid = spawn(Command::new("true").kill_on_drop(true)).expect("spawn true");
            let pid = kid.id().expect("a pid");
            // Started outside spawn(): as the reaper sees an orphan handed to it.
            let stray = std::process::Command::new("true").spawn().expect("spawn true");
            let stray_pid = stray.id();
            wait_for("both exited", || zombie(pid) && zombie(stray_pid));
            let listed = children();
            assert!(listed.contains(&pid) && listed.contains(&stray_pid), "{listed:?}");
            // Only these two: the other tests' children in this process are theirs to wait for.
            assert_eq!(reap_among(|| vec![pid, stray_pid]), 1, "the stray was reaped");
            assert!(!zombie(stray_pid), "the stray is gone");
            assert!(zombie(pid), "ours is left to its owner");
            let status = kid.wait().await.expect("our child's status is still ours");
            assert!(status.success());
            drop(kid);
            assert!(!ours().contains(&pid), "forgotten once dropped");
        });
    }
}
