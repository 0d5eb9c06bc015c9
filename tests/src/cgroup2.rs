//! `CgroupV2`: a uniquely named cgroup v2 group with the memory controller that the test owns, removed on drop
//! (every process in it and in its children killed first, with `cgroup.kill` where the kernel has it).

use crate::cgroup::{destroy, read_control, read_procs, write_control};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// Where the unified hierarchy is mounted (in the test VM and on systemd machines).
pub const V2_MOUNT: &str = "/sys/fs/cgroup";

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A cgroup v2 group created by the test; on drop, kills what runs in it and removes it.
#[derive(Debug)]
pub struct CgroupV2 {
    path: PathBuf,
    /// False once the test removed the group itself ([`CgroupV2::remove`]).
    owned: bool,
}

impl CgroupV2 {
    /// Why v2 memory groups cannot be made here, or `None` when they can: the unified hierarchy mounted at
    /// [`V2_MOUNT`] with `memory` in the root's `cgroup.subtree_control`, and root.
    pub fn unavailable_reason() -> Option<String> {
        let mount = Path::new(V2_MOUNT);
        let controllers = fs::read_to_string(mount.join("cgroup.controllers")).unwrap_or_default();
        if !controllers.split_whitespace().any(|c| c == "memory") {
            return Some(format!("no cgroup v2 memory controller at {V2_MOUNT} (controllers: {controllers:?})"));
        }
        let subtree = fs::read_to_string(mount.join("cgroup.subtree_control")).unwrap_or_default();
        if !subtree.split_whitespace().any(|c| c == "memory") {
            return Some(format!("memory is not enabled in {V2_MOUNT}/cgroup.subtree_control"));
        }
        if !crate::is_root() {
            return Some("needs root".into());
        }
        None
    }

    /// Creates `/sys/fs/cgroup/monitor-test-<pid>-<n>-<name>` with `memory.max` set to `max` (`None`: `max`).
    pub fn create(name: &str, max: Option<u64>) -> CgroupV2 {
        Self::create_under(Path::new(V2_MOUNT), name, max)
    }

    /// Creates a nested child group `<self>/<name>` (unique name too), enabling the memory controller for this
    /// group's children first. A v2 group that hands controllers down cannot hold processes itself, so put
    /// processes in the leaves.
    pub fn create_child(&self, name: &str, max: Option<u64>) -> CgroupV2 {
        self.write("cgroup.subtree_control", "+memory");
        Self::create_under(&self.path, name, max)
    }

    /// Creates a child group `<self>/<name>` without handing any controller down: this group may keep its own
    /// processes, and the child's are charged to it.
    pub fn create_plain_child(&self, name: &str) -> CgroupV2 {
        Self::create_under(&self.path, name, None)
    }

    fn create_under(parent: &Path, name: &str, max: Option<u64>) -> CgroupV2 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = parent.join(format!("monitor-test-{}-{n}-{name}", std::process::id()));
        if let Err(e) = fs::create_dir(&dir) {
            panic!("cannot create cgroup {}: {e}", dir.display());
        }
        let cg = CgroupV2 { path: dir, owned: true };
        if max.is_some() {
            cg.set_max(max);
        }
        cg
    }

    /// The absolute path of the group's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path relative to the mount (e.g. `monitor-test-1-0-x/monitor-test-1-1-y`), as `--cgroup` accepts it.
    pub fn relative(&self) -> String {
        self.path
            .strip_prefix(V2_MOUNT)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| self.path.display().to_string())
    }

    /// Writes `memory.max` (`None`: `max`, no limit).
    pub fn set_max(&self, bytes: Option<u64>) {
        self.write("memory.max", &limit_text(bytes));
    }

    /// Writes `memory.high` (`None`: `max`, no throttling).
    pub fn set_high(&self, bytes: Option<u64>) {
        self.write("memory.high", &limit_text(bytes));
    }

    /// Writes a control file of the group.
    pub fn write(&self, file: &str, value: &str) {
        write_control(&self.path, file, value);
    }

    /// Reads a control file of the group.
    pub fn read(&self, file: &str) -> String {
        read_control(&self.path, file)
    }

    /// A value of the group's `memory.stat` (`anon`, `file`, …).
    pub fn stat(&self, key: &str) -> Option<u64> {
        crate::cgroup::parse_stat(&self.read("memory.stat"), key)
    }

    /// The pids in `cgroup.procs` (this group only, not its children).
    pub fn procs(&self) -> Vec<u32> {
        read_procs(&self.path)
    }

    /// The kernel's count of OOM kills in the group (`memory.events` `oom_kill`); panics when unreadable.
    pub fn oom_kills(&self) -> u64 {
        crate::group::oom_kills(&self.path, crate::group::Hierarchy::V2).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Moves `pid` into this group.
    pub fn adopt(&self, pid: u32) {
        self.write("cgroup.procs", &pid.to_string());
    }

    /// Kills everything in the group and removes it now (children first); drop then does nothing.
    pub fn remove(&mut self) {
        destroy(&self.path);
        if self.path.exists() {
            panic!("cgroup {} is still there after removing it", self.path.display());
        }
        self.owned = false;
    }
}

/// Moves `pid` into the root group of the hierarchy (out of every test group).
pub fn move_to_root(pid: u32) {
    let p = Path::new(V2_MOUNT).join("cgroup.procs");
    if let Err(e) = fs::write(&p, pid.to_string()) {
        panic!("cannot move {pid} to {}: {e}", p.display());
    }
}

/// The text a v2 limit file takes: bytes, or `max`.
pub fn limit_text(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "max".to_string(), |b| b.to_string())
}

impl Drop for CgroupV2 {
    fn drop(&mut self) {
        if self.owned {
            destroy(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_text_is_bytes_or_max() {
        assert_eq!(limit_text(None), "max");
        assert_eq!(limit_text(Some(64 << 20)), "67108864");
    }

    #[test]
    fn availability_is_explained() {
        // On the host (v1 memory only) this names the missing controller; in the test VM it is None as root.
        if let Some(reason) = CgroupV2::unavailable_reason() {
            assert!(!reason.is_empty());
        }
    }
}
