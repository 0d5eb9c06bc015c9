//! `CgroupV1`: a uniquely named cgroup v1 memory group that the test owns, removed on drop with every process
//! still in it (and in its children) killed first.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Where the v1 memory controller is mounted on the machines we run on.
pub const V1_MEMORY_MOUNT: &str = "/sys/fs/cgroup/memory";

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A memory cgroup (v1) created by the test; on drop, kills what runs in it and removes it.
#[derive(Debug)]
pub struct CgroupV1 {
    path: PathBuf,
}

impl CgroupV1 {
    /// Why v1 memory cgroups cannot be used here, or `None` when they can (mounted and writable by us).
    pub fn unavailable_reason() -> Option<String> {
        let mount = Path::new(V1_MEMORY_MOUNT);
        if !mount.join("memory.limit_in_bytes").exists() {
            return Some(format!("no cgroup v1 memory controller at {V1_MEMORY_MOUNT}"));
        }
        if !crate::is_root() {
            return Some("needs root".into());
        }
        None
    }

    /// Creates `/sys/fs/cgroup/memory/monitor-test-<pid>-<n>-<name>` with `memory.limit_in_bytes` set to `limit`
    /// (`None`: no limit of its own).
    pub fn create(name: &str, limit: Option<u64>) -> CgroupV1 {
        Self::create_under(Path::new(V1_MEMORY_MOUNT), name, limit)
    }

    /// Creates a nested child group `<self>/<name>` (unique name too), removed on drop (or with its parent).
    pub fn create_child(&self, name: &str, limit: Option<u64>) -> CgroupV1 {
        Self::create_under(&self.path, name, limit)
    }

    /// Creates a uniquely named group under `parent` in any hierarchy (a v1 `cpu` one, a cgroup2 mount without
    /// a memory controller, …), with no limit: for tests of what the agent refuses. Removed on drop likewise.
    pub fn create_in(parent: &Path, name: &str) -> CgroupV1 {
        Self::create_under(parent, name, None)
    }

    fn create_under(parent: &Path, name: &str, limit: Option<u64>) -> CgroupV1 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = parent.join(format!("monitor-test-{}-{n}-{name}", std::process::id()));
        if let Err(e) = fs::create_dir(&dir) {
            panic!("cannot create cgroup {}: {e}", dir.display());
        }
        let cg = CgroupV1 { path: dir };
        if let Some(bytes) = limit {
            cg.set_limit(bytes);
        }
        cg
    }

    /// The absolute path of the group's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path relative to the memory controller's mount (e.g. `monitor-test-1-0-x`), as `--cgroup` accepts it.
    pub fn relative(&self) -> String {
        self.path
            .strip_prefix(V1_MEMORY_MOUNT)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| self.path.display().to_string())
    }

    /// Sets `memory.limit_in_bytes`.
    pub fn set_limit(&self, bytes: u64) {
        self.write("memory.limit_in_bytes", &bytes.to_string());
    }

    /// Writes a control file of the group.
    pub fn write(&self, file: &str, value: &str) {
        write_control(&self.path, file, value);
    }

    /// Reads a control file of the group.
    pub fn read(&self, file: &str) -> String {
        read_control(&self.path, file)
    }

    /// A value of the group's `memory.stat` (`total_rss`, `rss_huge`, `hierarchical_memory_limit`, …).
    pub fn stat(&self, key: &str) -> Option<u64> {
        parse_stat(&self.read("memory.stat"), key)
    }

    /// The pids in `cgroup.procs` (this group only, not its children).
    pub fn procs(&self) -> Vec<u32> {
        read_procs(&self.path)
    }

    /// The kernel's count of OOM kills in the group (`memory.oom_control` `oom_kill`); panics when unreadable.
    pub fn oom_kills(&self) -> u64 {
        crate::group::oom_kills(&self.path, crate::group::Hierarchy::V1).unwrap_or_else(|e| panic!("{e}"))
    }
}

/// A value of a `key value` file such as `memory.stat`.
pub fn parse_stat(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        if k == key {
            v.trim().parse().ok()
        } else {
            None
        }
    })
}

/// Writes a control file of a test group (v1 or v2); a failure fails the test.
pub(crate) fn write_control(dir: &Path, file: &str, value: &str) {
    let p = dir.join(file);
    if let Err(e) = fs::write(&p, value) {
        panic!("cannot write {value:?} to {}: {e}", p.display());
    }
}

/// Reads a control file of a test group (v1 or v2); a failure fails the test.
pub(crate) fn read_control(dir: &Path, file: &str) -> String {
    let p = dir.join(file);
    match fs::read_to_string(&p) {
        Ok(s) => s,
        Err(e) => panic!("cannot read {}: {e}", p.display()),
    }
}

/// The pids in `<dir>/cgroup.procs` (empty when the group is gone).
pub fn read_procs(dir: &Path) -> Vec<u32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Kills every process in `dir` and its sub-groups, then removes them depth first (retrying briefly while the
/// kernel finishes tearing the processes down). Serves v1 and v2 groups alike.
pub(crate) fn destroy(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                destroy(&e.path());
            }
        }
    }
    // v2's cgroup.kill (5.14+) kills the whole subtree at once; the loop below covers v1 and older kernels.
    if dir.join("cgroup.kill").exists() {
        let _ = fs::write(dir.join("cgroup.kill"), "1");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        // Only processes this test started are in a group it created.
        for pid in read_procs(dir) {
            if let Ok(pid) = libc::pid_t::try_from(pid) {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        match fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == ErrorKind::NotFound => return,
            Err(e) if Instant::now() >= deadline => {
                eprintln!("warning: cannot remove cgroup {}: {e}", dir.display());
                return;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

impl Drop for CgroupV1 {
    fn drop(&mut self) {
        destroy(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::child::spawn_in_cgroup;
    use std::process::Command;

    #[test]
    fn parses_memory_stat() {
        let text =
            "cache 0\nrss 1048576\nrss_huge 0\nhierarchical_memory_limit 9223372036854771712\ntotal_rss 2097152\n";
        assert_eq!(parse_stat(text, "rss"), Some(1_048_576));
        assert_eq!(parse_stat(text, "total_rss"), Some(2_097_152));
        assert_eq!(parse_stat(text, "hierarchical_memory_limit"), Some(9_223_372_036_854_771_712));
        assert_eq!(parse_stat(text, "missing"), None);
    }

    #[test]
    fn creates_limits_runs_and_removes() {
        if !crate::require_v1("creates_limits_runs_and_removes") {
            return;
        }
        let cg = CgroupV1::create("support", Some(64 << 20));
        let path = cg.path().to_path_buf();
        assert_eq!(cg.stat("hierarchical_memory_limit"), Some(64 << 20));
        assert!(cg.relative().starts_with("monitor-test-"));
        let child = cg.create_child("nested", Some(32 << 20));
        assert_eq!(child.stat("hierarchical_memory_limit"), Some(32 << 20));
        let sleeper = spawn_in_cgroup(Command::new("sleep").arg("30"), child.path());
        assert_eq!(child.procs(), vec![sleeper.pid()]);
        // The parent goes first: it must take the nested group and its process with it.
        drop(cg);
        assert!(!path.exists());
        drop(child);
        drop(sleeper);
    }
}
