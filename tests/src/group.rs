//! `Group`: a test group of either hierarchy (a [`CgroupV1`] where the host's memory controller is on v1, a
//! [`CgroupV2`] on a unified host or in the test VM). Every integration test that needs a group takes it from
//! [`Group::here`], so the same test binaries run on both hierarchies (`cargo xtask vmtest --kernel 6.12` runs them
//! on v2). It writes the limit and reads what the kernel says of the group under the names each hierarchy uses:
//! anon memory, shared memory, the OOM kill count, the usage high-water mark.

use crate::cgroup::{parse_stat, CgroupV1};
use crate::cgroup2::CgroupV2;
use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

/// Which cgroup hierarchy a group is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hierarchy {
    V1,
    V2,
}

impl Hierarchy {
    /// The hierarchy whose memory controller this host offers to root: v1 when mounted (these project machines),
    /// else v2 (production hosts, the test VM). Err: why neither can be used here.
    pub fn here() -> Result<Hierarchy, String> {
        let v1 = CgroupV1::unavailable_reason();
        if v1.is_none() {
            return Ok(Hierarchy::V1);
        }
        match CgroupV2::unavailable_reason() {
            None => Ok(Hierarchy::V2),
            Some(v2) => Err(format!("{}; {v2}", v1.unwrap_or_default())),
        }
    }

    /// `v1` or `v2`, as the agent's status names it (`group.version`).
    pub fn name(self) -> &'static str {
        match self {
            Hierarchy::V1 => "v1",
            Hierarchy::V2 => "v2",
        }
    }
}

/// A test group of either hierarchy (killed and removed on drop).
#[derive(Debug)]
pub enum Group {
    V1(CgroupV1),
    V2(CgroupV2),
}

impl Group {
    /// A new group with the memory limit `limit` (bytes).
    pub fn create(h: Hierarchy, name: &str, limit: u64) -> Group {
        match h {
            Hierarchy::V1 => Group::V1(CgroupV1::create(name, Some(limit))),
            Hierarchy::V2 => Group::V2(CgroupV2::create(name, Some(limit))),
        }
    }

    /// A new group in the hierarchy this host offers ([`Hierarchy::here`]), with the memory limit `limit`
    /// (`None`: none of its own). Panics when there is none: call [`crate::require_group`] first.
    pub fn here(name: &str, limit: Option<u64>) -> Group {
        record_test();
        Group::here_unlisted(name, limit)
    }

    /// [`Group::here`] for a test that runs on the host only (it drives a runtime the VM image does not carry): not
    /// listed for the VM's run on v2.
    pub fn here_unlisted(name: &str, limit: Option<u64>) -> Group {
        match Hierarchy::here() {
            Ok(Hierarchy::V1) => Group::V1(CgroupV1::create(name, limit)),
            Ok(Hierarchy::V2) => Group::V2(CgroupV2::create(name, limit)),
            Err(e) => panic!("no memory cgroup here: {e}"),
        }
    }

    /// A nested child group `<self>/<name>` with its own limit (`None`: none). On v2 the parent hands the memory
    /// controller down and can then hold no processes itself: put them in the leaves.
    pub fn create_child(&self, name: &str, limit: Option<u64>) -> Group {
        match self {
            Group::V1(g) => Group::V1(g.create_child(name, limit)),
            Group::V2(g) => Group::V2(g.create_child(name, limit)),
        }
    }

    /// A child group with no limit and, on v2, no controller handed down, so this group may still hold processes
    /// beside it (its processes are charged here either way).
    pub fn subgroup(&self, name: &str) -> Group {
        match self {
            Group::V1(g) => Group::V1(g.create_child(name, None)),
            Group::V2(g) => Group::V2(g.create_plain_child(name)),
        }
    }

    /// Sets the group's memory limit: v1 `memory.limit_in_bytes`, v2 `memory.max` (`None`: no limit).
    pub fn set_limit(&self, bytes: Option<u64>) {
        match self {
            Group::V1(g) => g.write("memory.limit_in_bytes", &bytes.map_or_else(|| "-1".into(), |b| b.to_string())),
            Group::V2(g) => g.set_max(bytes),
        }
    }

    /// Writes a control file of the group.
    pub fn write(&self, file: &str, value: &str) {
        crate::cgroup::write_control(self.path(), file, value);
    }

    /// Reads a control file of the group.
    pub fn read(&self, file: &str) -> String {
        crate::cgroup::read_control(self.path(), file)
    }

    /// A value of the group's `memory.stat`, under the hierarchy's own name for it.
    pub fn stat(&self, key: &str) -> Option<u64> {
        parse_stat(&self.read("memory.stat"), key)
    }

    /// The pids in `cgroup.procs` (this group only, not its children).
    pub fn procs(&self) -> Vec<u32> {
        crate::cgroup::read_procs(self.path())
    }

    /// The group's shared memory (tmpfs, shm): v1 `total_shmem`, v2 `shmem`; 0 when absent.
    pub fn shmem(&self) -> u64 {
        let key = match self {
            Group::V1(_) => "total_shmem",
            Group::V2(_) => "shmem",
        };
        self.stat(key).unwrap_or(0)
    }

    /// The kernel's count of OOM kills in the group; panics when unreadable (the group is the test's own).
    pub fn oom_count(&self) -> u64 {
        self.oom_kills().unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn hierarchy(&self) -> Hierarchy {
        match self {
            Group::V1(_) => Hierarchy::V1,
            Group::V2(_) => Hierarchy::V2,
        }
    }

    pub fn path(&self) -> &Path {
        match self {
            Group::V1(g) => g.path(),
            Group::V2(g) => g.path(),
        }
    }

    /// The path relative to the hierarchy's mount, as `--cgroup` accepts it.
    pub fn relative(&self) -> String {
        match self {
            Group::V1(g) => g.relative(),
            Group::V2(g) => g.relative(),
        }
    }

    fn file(&self, name: &str) -> Result<String, String> {
        let p = self.path().join(name);
        fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))
    }

    /// The group's anonymous memory as the agent counts it: v1 `total_rss`, v2 `anon`.
    pub fn anon(&self) -> Result<u64, String> {
        let key = match self {
            Group::V1(_) => "total_rss",
            Group::V2(_) => "anon",
        };
        parse_stat(&self.file("memory.stat")?, key).ok_or_else(|| format!("no {key} in memory.stat"))
    }

    /// What the agent counts against the limit: [`charged`].
    pub fn charged(&self) -> Result<u64, String> {
        charged(self.path(), self.hierarchy())
    }

    /// The kernel's count of OOM kills in the group: v1 `memory.oom_control`, v2 `memory.events` `oom_kill`.
    pub fn oom_kills(&self) -> Result<u64, String> {
        oom_kills(self.path(), self.hierarchy())
    }

    /// The kernel's high-water mark of the group's usage (anon and cache): v1 `memory.max_usage_in_bytes`, v2
    /// `memory.peak` (5.19 and later; None before).
    pub fn peak_usage(&self) -> Option<u64> {
        let name = match self {
            Group::V1(_) => "memory.max_usage_in_bytes",
            Group::V2(_) => "memory.peak",
        };
        self.file(name).ok()?.trim().parse().ok()
    }
}

/// Adds `<test target> <test>` to the file `MONITOR_TEST_GROUPS` names (once per test and process), when set:
/// `cargo xtask test` sets it, and `cargo xtask vmtest --kernel 6.12` runs exactly the tests listed there again on
/// cgroup v2. The test is the name the test harness gives the running thread; a group made on a thread it did not
/// name (none of ours) is not listed.
fn record_test() {
    let Some(list) = std::env::var_os("MONITOR_TEST_GROUPS") else { return };
    let thread = std::thread::current();
    let Some(test) = thread.name().filter(|t| *t != "main") else { return };
    let exe = std::env::current_exe().ok();
    let Some(file) = exe.as_deref().and_then(Path::file_name).and_then(|n| n.to_str()) else { return };
    // cargo names a test executable `<target>-<hash>`: the target's name is what stays from build to build.
    let exe = file.rsplit_once('-').map_or(file, |(name, _)| name);
    static RECORDED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    if RECORDED.lock().unwrap_or_else(|e| e.into_inner()).insert(test.to_string()) {
        // One write per line in append mode: the lines of tests running at once do not interleave.
        if let Ok(mut f) = fs::OpenOptions::new().create(true).append(true).open(list) {
            let _ = f.write_all(format!("{exe} {test}\n").as_bytes());
        }
    }
}

/// What the agent counts against the limit of the group at `dir`: anon, shmem and the kernel memory charged with
/// them (v1 `total_rss + total_shmem` and `memory.kmem.usage_in_bytes`; v2 `anon + shmem` and `kernel` less
/// `slab_reclaimable`), as monitor/src/sources/cgroup/ reads it (this crate cannot call the agent's reader: the agent's
/// own tests depend on it).
pub fn charged(dir: &Path, h: Hierarchy) -> Result<u64, String> {
    let read = |name: &str| {
        let p = dir.join(name);
        fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))
    };
    let stat = read("memory.stat")?;
    let get = |k: &str| parse_stat(&stat, k).unwrap_or(0);
    Ok(match h {
        Hierarchy::V1 => {
            let kmem = read("memory.kmem.usage_in_bytes").ok().and_then(|t| t.trim().parse::<u64>().ok());
            get("total_rss") + get("total_shmem") + kmem.unwrap_or(0)
        }
        Hierarchy::V2 => get("anon") + get("shmem") + get("kernel").saturating_sub(get("slab_reclaimable")),
    })
}

/// The kernel's count of OOM kills in the group at `dir`: `oom_kill` of v1's `memory.oom_control` or of v2's
/// `memory.events`.
pub fn oom_kills(dir: &Path, h: Hierarchy) -> Result<u64, String> {
    let name = match h {
        Hierarchy::V1 => "memory.oom_control",
        Hierarchy::V2 => "memory.events",
    };
    let p = dir.join(name);
    let text = fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    parse_stat(&text, "oom_kill").ok_or_else(|| format!("no oom_kill in {}: {text:?}", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_oom_count_of_either_hierarchy() {
        let dir = crate::temp_dir("oom-count");
        fs::write(dir.join("memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n").expect("write");
        fs::write(dir.join("memory.events"), "low 0\nhigh 2\nmax 9\noom 1\noom_kill 1\n").expect("write");
        assert_eq!(oom_kills(&dir, Hierarchy::V1), Ok(3));
        assert_eq!(oom_kills(&dir, Hierarchy::V2), Ok(1));
        fs::write(dir.join("memory.events"), "low 0\n").expect("write");
        assert!(oom_kills(&dir, Hierarchy::V2).is_err());
        let _ = fs::remove_dir_all(&dir);
    }
}
