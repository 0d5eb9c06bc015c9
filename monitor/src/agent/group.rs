//! The group's cgroup as the agent finds it: resolved as it is (`monitor agent`), or created and limited when the
//! config asks (`monitor run`), and ended with everything still in it when `monitor run` stops.

use super::AgentError;
use crate::config::Config;
use crate::decision::snapshot::CgroupVersion;
use crate::sources::cgroup::{self, Mounts};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long the end of the group waits for its last processes to die, and for its removal.
const GROUP_END: Duration = Duration::from_secs(10);

/// The end of the group, when dropped (after a drain, or on an error once started): when the processes were
/// launched into a cgroup of their own (not `auto`), every process still in it (a server's own children, a
/// shell's, whatever joined) is killed, then the cgroup `monitor run` created is removed, both bounded by
/// [`GROUP_END`]. With `auto` the group is the cgroup monitor itself runs in: only what its processes left behind
/// is ended (`Descendants`, in `run`), the rest is its service manager's.
pub(crate) struct GroupEnd {
    /// The group the processes are launched into (not `auto`).
    pub group: Option<PathBuf>,
    /// Set once the first process is started: a `monitor run` that stops before that (a port already taken by
    /// another instance) leaves a group it did not create alone.
    pub launched: Arc<AtomicBool>,
    /// The group's cgroup, when `monitor run` created it.
    created: Option<PathBuf>,
}

impl Drop for GroupEnd {
    fn drop(&mut self) {
        let ours = self.launched.load(Ordering::Relaxed) || self.created.is_some();
        if let Some(dir) = self.group.take().filter(|_| ours) {
            match cgroup::kill::kill_all(&dir, GROUP_END) {
                Ok(k) if k.left.is_empty() => {
                    if k.signalled > 0 || k.cgroup_kill {
                        tracing::info!(cgroup = %dir.display(), killed = k.signalled, cgroup_kill = k.cgroup_kill,
                            "ended the processes left in the group");
                    }
                }
                Ok(k) => tracing::error!(cgroup = %dir.display(), left = ?k.left,
                    "processes still in the group {} s after SIGKILL", GROUP_END.as_secs()),
                Err(e) => tracing::error!("cannot end the processes left in the group: {e}"),
            }
        }
        if let Some(dir) = self.created.take() {
            match cgroup::kill::remove_tree(&dir, GROUP_END) {
                Ok(()) => tracing::info!(cgroup = %dir.display(), "removed the group's cgroup"),
                Err(e) => tracing::error!("could not remove the group's cgroup: {e}"),
            }
        }
    }
}

/// On cgroup v2 a new group has the memory controller only when its parent hands it down: `+memory` in the
/// parent's `cgroup.subtree_control`, written when missing. (The kernel refuses it while the parent holds processes
/// of its own, other than the root: the error names the file.)
fn hand_down_memory(dir: &std::path::Path) -> Result<(), AgentError> {
    let Some(parent) = dir.parent() else { return Ok(()) };
    let control = parent.join("cgroup.subtree_control");
    let enabled = std::fs::read_to_string(&control).unwrap_or_default();
    if enabled.split_whitespace().any(|c| c == "memory") {
        return Ok(());
    }
    std::fs::write(&control, "+memory").map_err(|source| {
        if source.raw_os_error() == Some(libc::EBUSY) {
            // cgroup v2 gives controllers only to the children of a group without processes of its own: a
            // container's group holds its entrypoint, so a group of the group's own cannot be made inside it.
            AgentError::NoChildGroup { parent: parent.to_path_buf() }
        } else {
            AgentError::CgroupSetup { what: "handing the memory controller down in", path: control.clone(), source }
        }
    })?;
    tracing::info!(file = %control.display(), "handed the memory controller down to the new group");
    Ok(())
}

/// Finds the group's cgroup; when `launching` (`monitor run`), creates and limits it as the config asks.
pub(crate) fn prepare(cfg: &Config, launching: bool) -> Result<(cgroup::Group, GroupEnd), AgentError> {
    let mounts = Mounts::read().map_err(AgentError::io("reading /proc/self/mountinfo"))?;
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let spec = &cfg.group.cgroup;
    let mut created = GroupEnd { group: None, launched: Arc::new(AtomicBool::new(false)), created: None };
    if launching && cfg.group.create && spec != "auto" {
        let g = cgroup::locate(spec, &mounts, &own)?;
        if !g.dir.exists() {
            if g.version == CgroupVersion::V2 {
                hand_down_memory(&g.dir)?;
            }
            std::fs::create_dir(&g.dir).map_err(|source| AgentError::CgroupSetup {
                what: "creating",
                path: g.dir.clone(),
                source,
            })?;
            tracing::info!(cgroup = %g.dir.display(), "created the group's cgroup");
            created.created = Some(g.dir.clone());
        }
    }
    let group = cgroup::resolve(spec, &mounts, &own)?;
    if let Some(limit) = cfg.group.limit_bytes.filter(|_| launching) {
        let file = match group.version {
            CgroupVersion::V1 => "memory.limit_in_bytes",
            CgroupVersion::V2 => "memory.max",
        };
        let path = group.dir.join(file);
        std::fs::write(&path, limit.to_string()).map_err(|source| AgentError::CgroupSetup {
            what: "setting the limit in",
            path,
            source,
        })?;
    }
    Ok((group, created))
}
