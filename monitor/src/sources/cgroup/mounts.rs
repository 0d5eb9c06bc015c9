//! Where the cgroup hierarchies are mounted (`/proc/self/mountinfo`) and which cgroup a process is in
//! (`/proc/<pid>/cgroup`).

use procfs::FromBufRead;
use std::path::{Path, PathBuf};

/// The hierarchies that can hold the group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mounts {
    /// The cgroup v1 hierarchy with the `memory` controller.
    pub v1_memory: Option<PathBuf>,
    /// The cgroup2 mount, whatever its controllers.
    pub v2: Option<PathBuf>,
    /// The cgroup2 mount if its root offers the memory controller.
    pub v2_memory: Option<PathBuf>,
}

impl Mounts {
    /// Parses mountinfo text. Assumes a cgroup2 mount offers memory; [`Mounts::read`] checks it.
    /// Lines that do not parse, or name a mount point that is not absolute, are skipped (mountinfo comes from the
    /// kernel; a bad line must not stop the agent).
    pub fn parse(mountinfo: &str) -> Mounts {
        let mut m = Mounts::default();
        for line in mountinfo.lines() {
            let Ok(info) = procfs::process::MountInfo::from_line(line) else { continue };
            // The kernel writes mount points as absolute, canonical paths; anything else is not a line to trust.
            let canonical = info
                .mount_point
                .components()
                .all(|c| matches!(c, std::path::Component::RootDir | std::path::Component::Normal(_)));
            if !info.mount_point.is_absolute() || !canonical {
                continue;
            }
            match info.fs_type.as_str() {
                "cgroup" if info.super_options.contains_key("memory") => {
                    m.v1_memory.get_or_insert(info.mount_point);
                }
                "cgroup2" => {
                    m.v2.get_or_insert(info.mount_point);
                }
                _ => {}
            }
        }
        m.v2_memory = m.v2.clone();
        m
    }

    /// This process's mounts, with the cgroup2 root's `cgroup.controllers` checked for `memory`.
    pub fn read() -> std::io::Result<Mounts> {
        let text = std::fs::read_to_string("/proc/self/mountinfo")?;
        let mut m = Mounts::parse(&text);
        m.v2_memory = m.v2.clone().filter(|root| v2_has_memory(root));
        Ok(m)
    }

    /// A short description for error messages.
    pub fn describe(&self) -> String {
        let show = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "none".into());
        format!("v1 memory: {}, cgroup2: {} (memory controller: {})", show(&self.v1_memory), show(&self.v2), {
            if self.v2_memory.is_some() {
                "yes"
            } else {
                "no"
            }
        })
    }
}

/// True if the cgroup2 root at `root` lists `memory` in `cgroup.controllers`.
pub fn v2_has_memory(root: &Path) -> bool {
    std::fs::read_to_string(root.join("cgroup.controllers"))
        .map(|s| s.split_whitespace().any(|c| c == "memory"))
        .unwrap_or(false)
}

/// A process's memory cgroups, relative to their hierarchy's mount.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcCgroup {
    pub v1_memory: Option<String>,
    pub v2: Option<String>,
}

/// Parses `/proc/<pid>/cgroup`: the v1 line whose controllers include `memory`, and the v2 `0::` line.
pub fn parse_proc_cgroup(text: &str) -> ProcCgroup {
    let mut out = ProcCgroup::default();
    let Ok(groups) = procfs::ProcessCGroups::from_buf_read(text.as_bytes()) else { return out };
    for g in groups.0 {
        if g.hierarchy == 0 && g.controllers.is_empty() {
            out.v2 = Some(g.pathname);
        } else if g.controllers.iter().any(|c| c == "memory") {
            out.v1_memory = Some(g.pathname);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_host_mounts() {
        let m = Mounts::parse(include_str!("../../../../tests/fixtures/proc/v1-host.mountinfo"));
        assert_eq!(m.v1_memory, Some(PathBuf::from("/sys/fs/cgroup/memory")));
        assert_eq!(m.v2, Some(PathBuf::from("/sys/fs/cgroup/unified")));
    }

    #[test]
    fn v2_only_mounts() {
        let m = Mounts::parse(include_str!("../../../../tests/fixtures/proc/v2-only.mountinfo"));
        assert_eq!(m.v1_memory, None);
        assert_eq!(m.v2_memory, Some(PathBuf::from("/sys/fs/cgroup")));
    }

    #[test]
    fn a_mount_point_that_is_not_absolute_is_skipped() {
        // Found by the mounts_and_paths fuzz target: a group located under a relative mount point is outside it.
        let m = Mounts::parse("30 22 0:26 / sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
        assert_eq!(m.v2, None);
        // Nor one that climbs: a group under it would not start with it.
        let m = Mounts::parse("30 22 0:26 / /a/../sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
        assert_eq!(m.v2, None);
    }

    #[test]
    fn proc_cgroup_lines() {
        let c = parse_proc_cgroup(include_str!("../../../../tests/fixtures/proc/v1-host.cgroup"));
        assert_eq!(c.v1_memory.as_deref(), Some("/monitor-capture-1061/child"));
        assert_eq!(c.v2.as_deref(), Some("/"));
        let c = parse_proc_cgroup("0::/system.slice/x.service\n");
        assert_eq!(c, ProcCgroup { v1_memory: None, v2: Some("/system.slice/x.service".into()) });
        assert_eq!(parse_proc_cgroup("garbage"), ProcCgroup::default());
    }

    proptest::proptest! {
        #[test]
        fn mount_parsers_never_panic(s in "\\PC{0,400}") {
            let _ = Mounts::parse(&s);
            let _ = parse_proc_cgroup(&s);
        }
    }
}
