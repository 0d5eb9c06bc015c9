//! The alerts' names: one per fault, the same whether the agent sends it or the fleet's Prometheus raises it from
//! `/metrics` with docs/prometheus-alerts.yml (`promtool test rules docs/prometheus-alerts.test.yml` fires each of
//! its rules; tests/tests/cli/docs_check.rs holds the rules' names to [`RAISED_BY_AGENT`] and
//! [`RAISED_BY_RULES_ONLY`]).

/// The group is above `refuse_at`: every process refuses new requests.
pub(crate) const GROUP_REFUSING: &str = "MonitorGroupRefusing";
/// The group is above `abort_at`: the largest process aborts its in-flight work.
pub(crate) const GROUP_ABORTING: &str = "MonitorGroupAborting";
/// The kernel's OOM killer killed a process of the group.
pub(crate) const OOM_KILL: &str = "MonitorOomKill";
/// The guard's last resort killed a process (or, in shadow mode, would have).
pub(crate) const PROCESS_KILLED: &str = "MonitorProcessKilled";
/// A process that obeyed its abort but kept the group over `refuse_at` was recycled gracefully (or could not be).
pub(crate) const PROCESS_RECYCLED: &str = "MonitorProcessRecycled";
/// The last resort has halted: its kills did not bring the group below `abort_at`.
pub(crate) const KILL_INEFFECTIVE: &str = "MonitorKillIneffective";
/// Under `monitor run`: a process exited and is being restarted.
pub(crate) const PROCESS_RESTARTING: &str = "MonitorProcessRestarting";
/// Under `monitor run`: a process keeps exiting; its restart backoff is at its cap.
pub(crate) const PROCESS_CRASH_LOOP: &str = "MonitorProcessCrashLoop";
/// Under `monitor run`: a process runs but fails its health checks.
pub(crate) const PROCESS_UNHEALTHY: &str = "MonitorProcessUnhealthy";
/// The eBPF probes are wanted but not loaded: requests are not counted.
pub(crate) const PROBES_DISABLED: &str = "MonitorProbesDisabled";
/// The group cannot be sampled.
pub(crate) const GROUP_UNREADABLE: &str = "MonitorGroupUnreadable";
/// The history is not written to the stats database.
pub(crate) const STATS_DATABASE_FAILING: &str = "MonitorStatsDatabaseFailing";

/// Under `[cluster]`: another member is suspect or dead; requests for its caches cannot be served.
pub(crate) const CLUSTER_MEMBER_DOWN: &str = "MonitorClusterMemberDown";

/// Every alert the agent raises itself.
pub const RAISED_BY_AGENT: [&str; 13] = [
    GROUP_REFUSING,
    GROUP_ABORTING,
    OOM_KILL,
    PROCESS_KILLED,
    PROCESS_RECYCLED,
    KILL_INEFFECTIVE,
    PROCESS_RESTARTING,
    PROCESS_CRASH_LOOP,
    PROCESS_UNHEALTHY,
    PROBES_DISABLED,
    GROUP_UNREADABLE,
    STATS_DATABASE_FAILING,
    CLUSTER_MEMBER_DOWN,
];

/// The alerts only the fleet's Prometheus raises: the agent is not there to say it (down, absent), or the fault is
/// a trend over minutes of its metrics (near the limit without refusing, shedding).
pub const RAISED_BY_RULES_ONLY: [&str; 4] =
    ["MonitorMemoryNearLimit", "MonitorShedding", "MonitorAgentDown", "MonitorAgentAbsent"];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn each_name_is_said_once() {
        let all: Vec<&str> = RAISED_BY_AGENT.iter().chain(&RAISED_BY_RULES_ONLY).copied().collect();
        let unique: BTreeSet<&str> = all.iter().copied().collect();
        assert_eq!(unique.len(), all.len(), "{all:?}");
    }
}
