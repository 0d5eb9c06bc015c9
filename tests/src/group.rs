//! `Group`: a test group of either hierarchy (a [`CgroupV1`] on the host, a [`CgroupV2`] in the test VM), for the
//! code that runs on both: the memory scenario and the reaction suite. It reads what the kernel says of the group
//! under the names each hierarchy uses: anon memory, the OOM kill count, the usage high-water mark.

use crate::cgroup::{parse_stat, CgroupV1};
use crate::cgroup2::CgroupV2;
use std::fs;
use std::path::Path;

/// Which cgroup hierarchy a group is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hierarchy {
    V1,
    V2,
}

impl Hierarchy {
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
