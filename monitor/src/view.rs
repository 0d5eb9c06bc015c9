//! The status document of docs/api.md as data: what `GET /api/v1/status` serves, what `monitor status` prints
//! and what a cluster peer reads of another node, built from one published sample. Shared by the API, the
//! status table and the fleet, so none of them depends on another.

use crate::config::live::ConfigStatus;
use crate::config::Role;
use crate::decision::policy::{self, Action, ProcId, Thresholds};
use crate::decision::snapshot::{infer_roles, CgroupVersion, LimitSource, ProcessRole, VictimRequests};
use crate::feed::{BrakeStatus, LauncherInfo, ProbeStatus, Published, WakeupOff};
use crate::guard::KillRecord;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Debug, Serialize, Deserialize)]
pub struct StatusView {
    pub group: GroupView,
    pub policy: PolicyView,
    pub processes: Vec<ProcessView>,
    pub probes: ProbeStatus,
    pub sample: SampleView,
    /// Under `monitor run`: every launched process, running or backing off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher: Option<Vec<LauncherInfo>>,
    /// Where the config came from and how its last reload (SIGHUP) went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<ConfigStatus>,
    /// Under `monitor run`: what the front door counted since start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub front_door: Option<FrontDoorView>,
    /// The last resort's recent kills (sent, failed, or decided in shadow mode), oldest first.
    #[serde(default)]
    pub kills: Vec<KillView>,
    /// The recent recycles (sent, decided in shadow mode, or impossible), oldest first: processes that obeyed their
    /// abort but kept the group over refuse_at, restarted gracefully.
    #[serde(default)]
    pub recycles: Vec<crate::decision::policy::recycle::RecycleRecord>,
}

/// One kill of the last resort as the status shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KillView {
    pub pid: u32,
    /// The configured name under `monitor run`, else the command name.
    pub name: String,
    pub role: ProcessRole,
    pub rss_bytes: u64,
    pub anon_bytes: u64,
    /// The group's ratio when the kill was decided.
    pub ratio: f64,
    /// `over_kill_at` or `abort_not_obeyed`.
    pub why: String,
    /// In words.
    pub reason: String,
    /// 1..=3: the kills since the group was last below `abort_at`.
    pub round: u32,
    pub unix_ms: u64,
    /// False in shadow mode: decided, never sent.
    pub enforced: bool,
    /// Why the SIGKILL was not sent, when it was not.
    #[serde(default)]
    pub error: Option<String>,
    /// When the SIGKILL was sent, `CLOCK_MONOTONIC` nanoseconds of this host.
    #[serde(default)]
    pub sent_mono_ns: Option<u64>,
    /// Under `monitor run`: its requests in flight just before the kill.
    #[serde(default)]
    pub requests: Option<VictimRequests>,
}

impl From<&KillRecord> for KillView {
    fn from(r: &KillRecord) -> KillView {
        KillView {
            pid: r.pid,
            name: r.name.clone(),
            role: r.role,
            rss_bytes: r.rss_bytes,
            anon_bytes: r.anon_bytes,
            ratio: r.ratio,
            why: r.why.to_string(),
            reason: r.reason.clone(),
            round: r.round,
            unix_ms: r.unix_ms,
            enforced: r.enforced,
            error: r.error.clone(),
            sent_mono_ns: r.sent_mono_ns,
            requests: r.requests.clone(),
        }
    }
}

/// The front door's counts since start, as `/metrics` has them (`monitor_shed_requests_total`,
/// `monitor_cluster_forwarded_total`), in the status document so one request gives a peer the whole picture.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrontDoorView {
    /// Requests answered 503 because the group was refusing.
    pub shed_total: u64,
    /// Requests sent on to the node that owns their cache (0 outside a cluster).
    pub forwarded_total: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct GroupView {
    pub cgroup: PathBuf,
    pub version: CgroupVersion,
    pub usage_bytes: u64,
    /// The shmem part of the usage (tmpfs, shared memory).
    #[serde(default)]
    pub shmem_bytes: u64,
    /// The kernel part of the usage (page tables, kernel stacks, slab).
    #[serde(default)]
    pub kernel_bytes: u64,
    pub limit_bytes: u64,
    pub limit_source: LimitSource,
    pub ratio: f64,
    /// Why the latest sample failed (the values are from the last good one).
    pub error: Option<String>,
    /// Processes of the group the kernel's OOM killer has killed since the group was created (null where the
    /// kernel does not count them).
    #[serde(default)]
    pub oom_kills: Option<u64>,
    /// The kernel wake-up sources armed besides the timer (`thresholds`, `events`, `pressure`).
    #[serde(default)]
    pub wakeups: Vec<String>,
    /// Each configured wake-up source that is not armed, and why.
    #[serde(default)]
    pub wakeups_off: Vec<WakeupOff>,
    /// The memory brake (`[policy] brake_at`), null when it is off.
    #[serde(default)]
    pub brake: Option<BrakeStatus>,
    /// The interval until the next timed sample, in milliseconds, as pacing chose it.
    #[serde(default)]
    pub next_sample_ms: u64,
    /// How many processes the group's `cgroup.procs` listed, and how many of them were sampled.
    #[serde(default)]
    pub processes_listed: usize,
    #[serde(default)]
    pub processes_sampled: usize,
    /// Listed processes that could not be sampled (`processes_listed - processes_sampled`).
    #[serde(default)]
    pub processes_unsampled: usize,
    /// What the group holds beyond the sampled processes: its usage less their anon (shmem no process maps, and
    /// the memory of processes that could not be sampled; a lower bound, as pages shared after a fork count once in
    /// the group and in each process).
    #[serde(default)]
    pub unattributed_bytes: u64,
    /// cgroup v2 `memory.oom.group` (true: a kernel OOM kill takes the whole group); null on v1 or unknown.
    #[serde(default)]
    pub oom_group: Option<bool>,
    /// What a kernel OOM kill would cost, in words ([`kernel_oom_cost`]).
    #[serde(default)]
    pub kernel_oom_cost: Option<String>,
}

/// What a kernel OOM kill in the group `cgroup` costs: the whole systemd unit when the agent runs under systemd and
/// the group is (or is inside) a `.service` unit's cgroup (systemd's default `OOMPolicy=stop` stops the unit on any
/// kernel OOM kill in it), the whole group with `memory.oom.group` 1, else one process.
pub(crate) fn kernel_oom_cost(oom_group: Option<bool>, cgroup: &std::path::Path, systemd: bool) -> String {
    let unit = cgroup.components().any(|c| c.as_os_str().to_string_lossy().ends_with(".service"));
    match (systemd && unit, oom_group) {
        (true, _) => "whole unit (systemd OOMPolicy=stop unless the unit sets otherwise)".to_string(),
        (false, Some(true)) => "whole group".to_string(),
        (false, _) => "one process".to_string(),
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct PolicyView {
    pub state: policy::State,
    pub refuse_at: f64,
    pub abort_at: f64,
    pub hysteresis: f64,
    pub largest_pid: Option<u32>,
    pub victim_pid: Option<u32>,
    pub abort_round: u32,
    pub shadow: bool,
    /// The last resort (`[policy] kill`): on, its line, how long an abort may go unobeyed.
    #[serde(default)]
    pub kill: bool,
    #[serde(default)]
    pub kill_at: f64,
    #[serde(default)]
    pub kill_after_ms: u64,
    /// The last resort has halted: three kills did not bring the group below `abort_at`.
    #[serde(default)]
    pub kills_halted: bool,
    /// While aborting: the memory over `abort_at` is held beyond the sampled processes while some listed processes
    /// could not be sampled; the last resort holds off (`group.unattributed_bytes`, `group.processes_unsampled`).
    #[serde(default)]
    pub unseen: bool,
    /// Under `monitor run`, while aborting: the victim's requests in flight when it was chosen.
    #[serde(default)]
    pub victim_requests: Option<VictimRequests>,
    /// While aborting: how the victim's anon moved over the last growth window, the evidence of its obeying. Only a
    /// victim still growing `kill_after_ms` after it was told is killed below the kill line.
    #[serde(default)]
    pub victim_growth: Option<GrowthView>,
    /// The last resort's line now: `kill_at`, or lower just after a kill while the group refills fast.
    #[serde(default)]
    pub kill_line: f64,
}

/// The abort victim's growth, as the status shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GrowthView {
    /// Its anon now less its anon `over_ms` ago (one and a half to two growth windows).
    pub bytes: i64,
    pub over_ms: u64,
    /// Its anon now less its anon `recent_ms` ago (half a window to one).
    #[serde(default)]
    pub recent_bytes: i64,
    #[serde(default)]
    pub recent_ms: u64,
    /// Risen by more than the tolerance (0.5% of the limit, at least 1 MiB) and, lately, by more than a quarter of
    /// it.
    pub growing: bool,
    /// In words: `still growing (…)`, `stopped growing (…): its memory not yet given back`, `gave back …`.
    pub evidence: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ProcessView {
    pub pid: u32,
    /// Under `monitor run`, the `[[process]]` name of a launched process; else its command name.
    pub name: String,
    /// The command name (`/proc/<pid>/comm`).
    #[serde(default)]
    pub comm: String,
    pub role: ProcessRole,
    pub ppid: u32,
    pub rss_bytes: u64,
    pub anon_bytes: u64,
    /// What the process should do now (`serve` in shadow mode).
    pub action: Action,
    /// What the policy decided, enforced or not.
    pub decided: Action,
    pub requests_total: u64,
    pub responses_total: u64,
    pub responses_by_class: [u64; 5],
    pub accepts_total: u64,
    pub inflight: u64,
    pub latency_p50_us: Option<u64>,
    pub latency_p99_us: Option<u64>,
    pub restarts: u32,
    /// Kills the last resort sent to processes of this name (as `name` shows it) since the agent started.
    #[serde(default)]
    pub kills: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct SampleView {
    pub seq: u64,
    pub unix_ms: u64,
    /// When the processes' request counters were last read (`Snapshot::counted_unix_ms`).
    #[serde(default)]
    pub counted_unix_ms: u64,
}

impl From<Role> for ProcessRole {
    fn from(r: Role) -> ProcessRole {
        match r {
            Role::Master => ProcessRole::Master,
            Role::Worker => ProcessRole::Worker,
        }
    }
}

/// The status document of docs/api.md, from one published sample.
pub(crate) fn status_view(p: &Published, t: &Thresholds) -> StatusView {
    let s = &p.snapshot;
    let d = &p.decision;
    let roles = infer_roles(&s.processes);
    StatusView {
        group: GroupView {
            cgroup: s.group.cgroup.clone(),
            version: s.group.version,
            usage_bytes: s.group.usage_bytes,
            shmem_bytes: s.group.shmem_bytes,
            kernel_bytes: s.group.kernel_bytes,
            limit_bytes: s.group.limit_bytes,
            limit_source: s.group.limit_source,
            ratio: d.ratio,
            error: p.error.clone(),
            oom_kills: s.group.oom_kills,
            wakeups: p.wakeups.armed.clone(),
            wakeups_off: p.wakeups.off.clone(),
            brake: p.brake.clone(),
            next_sample_ms: p.next_sample_ms,
            processes_listed: s.group.processes_listed,
            processes_sampled: s.group.processes_sampled,
            processes_unsampled: s.group.processes_unsampled(),
            unattributed_bytes: s.group.unattributed_bytes,
            oom_group: s.group.oom_group,
            kernel_oom_cost: Some(kernel_oom_cost(s.group.oom_group, &s.group.cgroup, false)),
        },
        policy: PolicyView {
            state: d.state,
            refuse_at: t.refuse_at,
            abort_at: t.abort_at,
            hysteresis: t.hysteresis,
            largest_pid: d.largest_pid,
            victim_pid: d.victim.map(|v| v.pid),
            abort_round: d.abort_round,
            shadow: d.shadow,
            kill: t.kill,
            kill_at: t.kill_at,
            kill_after_ms: t.kill_after_ms,
            kills_halted: d.kills_halted,
            unseen: d.unseen,
            victim_requests: p.victim_requests.as_deref().cloned(),
            victim_growth: d.victim_growth.map(|g| {
                let tol = crate::decision::policy::kill::tolerance(s.group.limit_bytes);
                GrowthView {
                    bytes: g.bytes,
                    over_ms: g.over_ms,
                    recent_bytes: g.recent_bytes,
                    recent_ms: g.recent_ms,
                    growing: g.growing(tol),
                    evidence: g.describe(tol),
                }
            }),
            kill_line: d.kill_line,
        },
        processes: s
            .processes
            .iter()
            .zip(roles)
            .map(|(proc, role)| {
                let id = ProcId { pid: proc.pid, start_ticks: proc.start_ticks };
                let t = &proc.traffic;
                ProcessView {
                    pid: proc.pid,
                    name: proc.name.clone(),
                    comm: proc.comm.clone(),
                    role,
                    ppid: proc.ppid,
                    rss_bytes: proc.rss_bytes,
                    anon_bytes: proc.anon_bytes,
                    action: d.action_for(id),
                    decided: d.decided_for(id),
                    requests_total: t.requests_total,
                    responses_total: t.responses_total,
                    responses_by_class: t.responses_by_class,
                    accepts_total: t.accepts_total,
                    inflight: t.inflight,
                    latency_p50_us: t.latency_p50_us,
                    latency_p99_us: t.latency_p99_us,
                    restarts: 0,
                    kills: 0,
                }
            })
            .collect(),
        probes: p.probes.clone(),
        sample: SampleView { seq: s.seq, unix_ms: s.unix_ms, counted_unix_ms: s.counted_unix_ms },
        launcher: None,
        config: None,
        front_door: None,
        kills: Vec::new(),
        recycles: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::policy::State as PolicyState;

    #[test]
    fn the_group_shows_oom_kills_wakeups_brake_and_interval() {
        let mut p = Published::test(PolicyState::Normal);
        let v = serde_json::to_value(status_view(&p, &Thresholds::default())).expect("json");
        assert_eq!(v["group"]["oom_kills"], serde_json::Value::Null, "not counted: null");
        assert_eq!(v["group"]["wakeups"], serde_json::json!([]));
        assert_eq!(v["group"]["brake"], serde_json::Value::Null);
        p = p.reacting(2, &["thresholds"], ("pressure", "cgroup v2 only"), 1_030_792_151, 25);
        let v = serde_json::to_value(status_view(&p, &Thresholds::default())).expect("json");
        let g = &v["group"];
        assert_eq!(g["oom_kills"], 2);
        assert_eq!(g["wakeups"], serde_json::json!(["thresholds"]));
        assert_eq!(g["wakeups_off"], serde_json::json!([{"source": "pressure", "reason": "cgroup v2 only"}]));
        assert_eq!((g["brake"]["at"].as_f64(), g["brake"]["high_bytes"].as_u64()), (Some(0.96), Some(1_030_792_151)));
        assert_eq!(g["next_sample_ms"], 25);
        // `monitor status` reads the document back, and reads one from an agent that has none of these fields.
        let back: StatusView = serde_json::from_value(v.clone()).expect("read back");
        assert_eq!(back.group.oom_kills, Some(2));
        let mut old = v;
        for k in ["oom_kills", "wakeups", "wakeups_off", "brake", "next_sample_ms"] {
            old["group"].as_object_mut().map(|g| g.remove(k));
        }
        let old: StatusView = serde_json::from_value(old).expect("an older agent's document");
        assert_eq!((old.group.oom_kills, old.group.wakeups.len(), old.group.brake.is_none()), (None, 0, true));
    }

    #[test]
    fn the_cost_of_a_kernel_oom_kill_in_words() {
        use std::path::Path;
        let unit = Path::new("/system.slice/app.service");
        assert_eq!(kernel_oom_cost(Some(false), unit, false), "one process");
        assert_eq!(kernel_oom_cost(None, unit, false), "one process", "v1: the kernel kills one");
        assert_eq!(kernel_oom_cost(Some(true), unit, false), "whole group");
        let whole_unit = "whole unit (systemd OOMPolicy=stop unless the unit sets otherwise)";
        assert_eq!(kernel_oom_cost(Some(false), unit, true), whole_unit);
        assert_eq!(kernel_oom_cost(Some(false), &unit.join("workers"), true), whole_unit, "inside the unit too");
        assert_eq!(kernel_oom_cost(Some(true), Path::new("/user.slice/x.scope"), true), "whole group");
        let mut p = Published::test(PolicyState::Normal);
        p.snapshot.group.oom_group = Some(true);
        let v = serde_json::to_value(status_view(&p, &Thresholds::default())).expect("json");
        assert_eq!(
            (v["group"]["oom_group"].as_bool(), v["group"]["kernel_oom_cost"].as_str()),
            (Some(true), Some("whole group"))
        );
        p.snapshot.group.oom_group = None;
        let v = serde_json::to_value(status_view(&p, &Thresholds::default())).expect("json");
        assert!(v["group"]["oom_group"].is_null(), "v1: null");
    }
}
