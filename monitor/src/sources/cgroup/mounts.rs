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
    /// Which cgroup the v1 memory mount shows at its mount point, relative to this process's cgroup namespace
    /// (mountinfo's root field): `/` on a host and for a mount made inside the namespace (as container runtimes
    /// do), the group's path for a bind mount of one group, and `/..` (outside the namespace) for a mount made
    /// before it.
    pub v1_memory_root: String,
    /// The same for the cgroup2 mount.
    pub v2_root: String,
}

/// Whether a mount root lies outside this process's cgroup namespace (`/..` and below).
fn outside(root: &str) -> bool {
    root == "/.." || root.starts_with("/../")
}

/// Whether the mount `(point, root)` replaces `held` (the one found so far): the later of two at one mount point
/// covers the earlier; one inside the cgroup namespace beats one from outside it.
fn replaces(held: &Option<PathBuf>, held_root: &str, point: &Path, root: &str) -> bool {
    match held {
        None => true,
        Some(p) => p == point || (outside(held_root) && !outside(root)),
    }
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
            let root = info.root.clone();
            match info.fs_type.as_str() {
                "cgroup"
                    if info.super_options.contains_key("memory")
                        && replaces(&m.v1_memory, &m.v1_memory_root, &info.mount_point, &root) =>
                {
                    (m.v1_memory, m.v1_memory_root) = (Some(info.mount_point), root);
                }
                "cgroup2" if replaces(&m.v2, &m.v2_root, &info.mount_point, &root) => {
                    (m.v2, m.v2_root) = (Some(info.mount_point), root);
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

/// Where a cgroup path of `/proc/<pid>/cgroup` (relative to this process's cgroup namespace) lies under a mount
/// whose root is `root`: its path relative to the mount point, or None when the mount does not show it.
pub fn under_root<'a>(path: &'a str, root: &str) -> Option<&'a str> {
    if root == "/" {
        return Some(path);
    }
    if outside(root) {
        return None;
    }
    match path.strip_prefix(root.trim_end_matches('/'))? {
        "" => Some("/"),
        r if r.starts_with('/') => Some(r),
        _ => None,
    }
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
    fn inside_a_cgroup_namespace_the_mount_made_there_covers_the_one_from_outside() {
        // Captured under `unshare --cgroup --mount`, after mounting a tmpfs and the memory hierarchy anew over
        // /sys/fs/cgroup as a container runtime does: the host's mount (root `/..`) is still listed, covered.
        let m = Mounts::parse(include_str!("../../../../tests/fixtures/proc/v1-cgroupns.mountinfo"));
        assert_eq!(
            (m.v1_memory.as_deref(), m.v1_memory_root.as_str()),
            (Some(Path::new("/sys/fs/cgroup/memory")), "/")
        );
        // Before that mount only the host's is there, showing a group outside the namespace.
        let m = Mounts::parse(include_str!("../../../../tests/fixtures/proc/v1-cgroupns-host-mount.mountinfo"));
        assert_eq!(m.v1_memory_root, "/..");
        // The host's own mounts have their root at `/`.
        let m = Mounts::parse(include_str!("../../../../tests/fixtures/proc/v1-host.mountinfo"));
        assert_eq!((m.v1_memory_root.as_str(), m.v2_root.as_str()), ("/", "/"));
    }

    #[test]
    fn a_cgroup_path_under_a_mount_root() {
        assert_eq!(under_root("/a/b", "/"), Some("/a/b"));
        // A bind mount of one group (a container without its own cgroup namespace).
        assert_eq!(under_root("/docker/abc", "/docker/abc"), Some("/"));
        assert_eq!(under_root("/docker/abc/sub", "/docker/abc/"), Some("/sub"));
        assert_eq!(under_root("/docker/abcd", "/docker/abc"), None);
        assert_eq!(under_root("/other", "/docker/abc"), None);
        // A mount from outside the namespace shows nothing a namespace path can name.
        assert_eq!(under_root("/", "/.."), None);
        assert_eq!(under_root("/x", "/../.."), None);
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
