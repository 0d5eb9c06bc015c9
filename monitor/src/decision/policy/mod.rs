//! The decision: a pure function of (previous state, snapshot, thresholds). No I/O.
//!
//! ratio >= refuse_at: every process refuses new requests. ratio >= abort_at: the process with the largest RSS
//! aborts its in-flight work, the others refuse; if still >= abort_at after `abort_repeat_ms`, the (new) largest
//! is aborted again. Leaving a state needs the ratio to fall `hysteresis` below its threshold. When the process
//! told to abort cannot obey, the last resort ([`kill`]) orders it killed before the kernel's OOM killer acts.

pub mod kill;
pub mod recycle;

use crate::decision::snapshot::{ProcSample, Snapshot};
pub use kill::{Growth, KillOrder, KillState, KillWhy};
pub use recycle::{RecycleOrder, RecycleState};
use serde::Serialize;

/// The thresholds and switches of the policy (`[policy]` in the config).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Thresholds {
    pub refuse_at: f64,
    pub abort_at: f64,
    pub hysteresis: f64,
    pub abort_repeat_ms: u64,
    pub shadow: bool,
    /// The last resort ([`kill`]): on, its line, how long an abort may go unobeyed, how often it may kill.
    pub kill: bool,
    pub kill_at: f64,
    pub kill_after_ms: u64,
    pub kill_repeat_ms: u64,
    /// The recycle ([`recycle`]): how long after it was told a victim that obeyed but keeps the group over
    /// `refuse_at` is restarted gracefully (0: never).
    pub recycle_after_ms: u64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            refuse_at: 0.85,
            abort_at: 0.92,
            hysteresis: 0.02,
            abort_repeat_ms: 5000,
            shadow: false,
            kill: true,
            kill_at: 0.97,
            kill_after_ms: 2000,
            kill_repeat_ms: 1000,
            recycle_after_ms: 20_000,
        }
    }
}

/// The group's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    #[default]
    Normal,
    Refusing,
    Aborting,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Normal => "normal",
            State::Refusing => "refusing",
            State::Aborting => "aborting",
        }
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// What one process should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Serve,
    Refuse,
    Abort,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Serve => "serve",
            Action::Refuse => "refuse",
            Action::Abort => "abort",
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// A process named by pid and start time (a pid alone can be reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct ProcId {
    pub pid: u32,
    pub start_ticks: u64,
}

/// What the policy remembers between samples.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyState {
    pub state: State,
    /// The process told to abort, while aborting.
    pub victim: Option<ProcId>,
    /// When the current victim was chosen (monotonic ms).
    pub victim_since_ms: u64,
    /// How many victims have been chosen since entering `aborting` (1 = the first).
    pub abort_round: u32,
    /// The victim's anon at the last sample it was seen: what may still be leaving the group once it is gone.
    pub victim_anon: u64,
    /// The victim gone (it exited, or the last resort killed it) while its memory may still be charged to the group.
    pub leaving: Option<Leaving>,
    /// The last resort's memory.
    pub kill: KillState,
    /// The recycle's memory.
    pub recycle: RecycleState,
}

/// The abort's victim, gone from the listing: a process leaves the listing before the kernel has uncharged all of its
/// memory, so for a moment the group's usage still counts what it held. Choosing the next victim from that usage
/// would tell an innocent process to abort (the kill step waits for its own kills the same way: `Dying`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leaving {
    pub victim: ProcId,
    /// When it was first seen gone (monotonic ms).
    pub ms: u64,
    /// The group's usage at the last sample the victim was seen in, the lowest since, and what the victim held.
    pub usage: u64,
    pub low: u64,
    pub held: u64,
}

impl Leaving {
    /// Its memory has left: the usage fell by at least half of what it held, or `wait_ms` (the kill step's
    /// `kill_repeat_ms`) went by without that (memory no process death frees: the next victim is chosen then).
    pub fn left(&self, now: u64, wait_ms: u64) -> bool {
        self.low.saturating_add(self.held / 2) <= self.usage || now.saturating_sub(self.ms) >= wait_ms
    }
}

/// The policy's output for one sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    pub state: State,
    pub ratio: f64,
    /// The process with the largest RSS now (None with no processes).
    pub largest_pid: Option<u32>,
    /// The process told to abort (only while aborting).
    pub victim: Option<ProcId>,
    pub abort_round: u32,
    /// Decide and record, enforce nothing.
    pub shadow: bool,
    /// The state or the victim changed with this sample.
    pub changed: bool,
    /// The last resort: a process to kill now (carried out by the sampler unless in shadow mode).
    pub kill: Option<KillOrder>,
    /// The last resort has halted: its kills freed nothing (`MonitorKillIneffective`).
    pub kills_halted: bool,
    /// While aborting: the memory over `abort_at` is held beyond the sampled processes, and some listed processes
    /// could not be sampled ([`kill::unseen`]). The abort went to the largest process the sampler sees; the last
    /// resort holds off rather than kill processes whose death would not relieve the group.
    pub unseen: bool,
    /// While aborting: the victim's growth since it was told, the evidence of its obeying ([`kill`]).
    pub victim_growth: Option<Growth>,
    /// The last resort's line now: `kill_at`, or lower just after a kill while the group refills fast
    /// ([`kill::kill_line`]).
    pub kill_line: f64,
    /// A process that obeyed but keeps the group over `refuse_at`, to restart gracefully now ([`recycle`]).
    pub recycle: Option<RecycleOrder>,
}

impl Decision {
    /// What the policy decided for `p`, whether or not it is enforced.
    pub(crate) fn decided_for(&self, p: ProcId) -> Action {
        match self.state {
            State::Normal => Action::Serve,
            State::Refusing => Action::Refuse,
            State::Aborting if self.victim == Some(p) => Action::Abort,
            State::Aborting => Action::Refuse,
        }
    }

    /// What `p` should do now: the decided action, or `serve` in shadow mode.
    pub(crate) fn action_for(&self, p: ProcId) -> Action {
        if self.shadow {
            Action::Serve
        } else {
            self.decided_for(p)
        }
    }
}

/// The largest process by RSS other than the agent itself (`agent_pid`); ties go to the larger RssAnon, then to
/// the lower pid (deterministic).
pub fn largest(processes: &[ProcSample], agent_pid: u32) -> Option<&ProcSample> {
    processes
        .iter()
        .filter(|p| p.pid != agent_pid)
        .max_by(|a, b| a.rss_bytes.cmp(&b.rss_bytes).then(a.anon_bytes.cmp(&b.anon_bytes)).then(b.pid.cmp(&a.pid)))
}

/// The process `id` names in `snap`, if it is still there (a pid alone can be reused).
pub fn find(snap: &Snapshot, id: ProcId) -> Option<&ProcSample> {
    snap.processes.iter().find(|p| p.pid == id.pid && p.start_ticks == id.start_ticks)
}

fn id(p: &ProcSample) -> ProcId {
    ProcId { pid: p.pid, start_ticks: p.start_ticks }
}

/// The policy. `prev` is what the previous call returned (or `PolicyState::default()` at start).
pub fn decide(prev: &PolicyState, snap: &Snapshot, t: &Thresholds) -> (PolicyState, Decision) {
    let ratio = snap.group.ratio();
    let now = snap.mono_ms;
    let big = largest(&snap.processes, snap.agent_pid);

    let state = match prev.state {
        _ if ratio >= t.abort_at => State::Aborting,
        State::Aborting if ratio >= t.abort_at - t.hysteresis => State::Aborting,
        State::Aborting | State::Refusing if ratio >= t.refuse_at - t.hysteresis => State::Refusing,
        State::Normal if ratio >= t.refuse_at => State::Refusing,
        _ => State::Normal,
    };

    let mut next = PolicyState { state, ..PolicyState::default() };
    let mut new_victim = false;
    if state == State::Aborting {
        let entering = prev.state != State::Aborting;
        let repeat_due =
            !entering && ratio >= t.abort_at && now.saturating_sub(prev.victim_since_ms) >= t.abort_repeat_ms;
        // The victim gone (it exited, or the last resort killed it) while the group is still over the line: the
        // new largest is told without waiting for the repeat time, once the gone one's memory has left the group
        // (until then the usage still counts it, and a process told then could be an innocent one: [`Leaving`]).
        let gone = prev.victim.is_some_and(|v| find(snap, v).is_none());
        let usage = snap.group.usage_bytes;
        next.leaving = match (gone, prev.leaving, prev.victim) {
            (true, Some(l), Some(v)) if l.victim == v => Some(Leaving { low: l.low.min(usage), ..l }),
            (true, _, Some(v)) => {
                let before = prev.kill.usage_at.map_or(usage, |(_, u)| u);
                Some(Leaving { victim: v, ms: now, usage: before, low: before.min(usage), held: prev.victim_anon })
            }
            _ => None,
        };
        let waiting = next.leaving.is_some_and(|l| !l.left(now, t.kill_repeat_ms));
        if entering || !waiting && (repeat_due || (prev.victim.is_none() || gone) && ratio >= t.abort_at) {
            next.victim = big.map(id);
            next.victim_since_ms = now;
            next.abort_round = if entering { 1 } else { prev.abort_round + 1 };
            new_victim = true;
        } else {
            next.victim = prev.victim;
            next.victim_since_ms = prev.victim_since_ms;
            next.abort_round = prev.abort_round;
        }
    }

    next.victim_anon = next.victim.and_then(|v| find(snap, v)).map_or(prev.victim_anon, |p| p.anon_bytes);
    let step = kill::Step { snap, aborting: state == State::Aborting, victim: next.victim, new_victim };
    let (kill_state, kill, seen) = kill::decide(&prev.kill, &step, t);
    let unseen = state == State::Aborting && kill::unseen(snap, kill::over(snap, t.abort_at));
    next.kill = kill_state;
    let step = recycle::Step {
        snap,
        victim: next.victim,
        recycle_after_ms: t.recycle_after_ms,
        kill_after_ms: t.kill_after_ms,
        refuse_at: t.refuse_at,
    };
    // A process the last resort kills now is not also recycled.
    let (recycle_state, recycle) = recycle::decide(&prev.recycle, &step);
    let recycle = recycle.filter(|r| kill.is_none_or(|k| k.target != r.target));
    next.recycle = recycle_state;
    let changed = next.state != prev.state || next.victim != prev.victim;
    let decision = Decision {
        state,
        ratio,
        largest_pid: big.map(|p| p.pid),
        victim: next.victim,
        abort_round: next.abort_round,
        shadow: t.shadow,
        changed,
        kill,
        kills_halted: next.kill.halted,
        unseen,
        victim_growth: seen.victim_growth,
        kill_line: seen.line,
        recycle,
    };
    (next, decision)
}

/// The policy's decisions counted since the agent started, so an episode shorter than a scrape still shows in
/// `/metrics` (`monitor_policy_entered_total`, `monitor_policy_victims_total`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Decisions {
    /// Times the group entered refusing and aborting (from a lower state or, for refusing, from aborting).
    pub entered_refusing: u64,
    pub entered_aborting: u64,
    /// Processes chosen to abort: a new victim each abort round (chosen and not told, in shadow mode).
    pub victims: u64,
    last: Option<(State, Option<ProcId>)>,
}

impl Decisions {
    /// Counts one decision, taken on the next sample.
    pub(crate) fn observe(&mut self, d: &Decision) {
        let (state, victim) = self.last.unwrap_or((State::Normal, None));
        if d.state != state {
            match d.state {
                State::Refusing => self.entered_refusing += 1,
                State::Aborting => self.entered_aborting += 1,
                State::Normal => {}
            }
        }
        if d.victim.is_some() && d.victim != victim {
            self.victims += 1;
        }
        self.last = Some((d.state, d.victim));
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::decision::snapshot::{CgroupVersion, GroupSample, LimitSource, Traffic};

    /// A process of `rss` bytes, all of it anon, started at `1000 + pid`.
    pub(crate) fn proc(pid: u32, rss: u64) -> ProcSample {
        ProcSample {
            pid,
            name: format!("p{pid}"),
            comm: format!("p{pid}"),
            start_ticks: 1000 + pid as u64,
            ppid: 1,
            rss_bytes: rss,
            anon_bytes: rss,
            traffic: Traffic::default(),
        }
    }

    /// A v1 group at `usage` of `limit`, sampled at `mono_ms`, with `procs` and nobody protected.
    pub(crate) fn snap(usage: u64, limit: u64, mono_ms: u64, procs: Vec<ProcSample>) -> Snapshot {
        Snapshot {
            seq: 0,
            unix_ms: 0,
            mono_ms,
            counted_unix_ms: 0,
            group: GroupSample {
                cgroup: "/g".into(),
                version: CgroupVersion::V1,
                usage_bytes: usage,
                shmem_bytes: 0,
                kernel_bytes: 0,
                oom_group: None,
                limit_bytes: limit,
                limit_source: LimitSource::Cgroup,
                oom_kills: None,
                processes_listed: procs.len(),
                processes_sampled: procs.len(),
                unattributed_bytes: crate::decision::snapshot::unattributed(usage, 0, &procs),
                pressure: None,
            },
            processes: procs.into(),
            agent_pid: 0,
            protected: Vec::new(),
        }
    }

    fn three() -> Vec<ProcSample> {
        vec![proc(10, 100), proc(11, 300), proc(12, 200)]
    }

    /// Runs the policy over a sequence of usage percentages (limit 1000), returning the states.
    fn run(usages: &[u64], t: &Thresholds) -> Vec<State> {
        let mut st = PolicyState::default();
        usages
            .iter()
            .enumerate()
            .map(|(i, &u)| {
                let (n, d) = decide(&st, &snap(u, 1000, i as u64 * 100, three()), t);
                st = n;
                d.state
            })
            .collect()
    }

    #[test]
    fn transitions_with_hysteresis() {
        use State::*;
        let t = Thresholds::default();
        let cases: &[(&[u64], &[State])] = &[
            (&[0, 849, 850], &[Normal, Normal, Refusing]),
            // refusing holds down to refuse_at - h = 0.83 and is left below it
            (&[850, 840, 831, 829], &[Refusing, Refusing, Refusing, Normal]),
            (&[919, 920], &[Refusing, Aborting]),
            // straight from normal to aborting
            (&[100, 950], &[Normal, Aborting]),
            // aborting holds until below 0.90, then refusing, which holds until below 0.83
            (&[920, 905, 901, 899, 840, 829], &[Aborting, Aborting, Aborting, Refusing, Refusing, Normal]),
            // aborting straight to normal on a big drop
            (&[950, 100], &[Aborting, Normal]),
            // re-entering aborting from refusing
            (&[950, 880, 930], &[Aborting, Refusing, Aborting]),
            // at the exact line
            (&[1000], &[Aborting]),
        ];
        for (usages, want) in cases {
            assert_eq!(run(usages, &t), *want, "usages {usages:?}");
        }
    }

    #[test]
    fn largest_is_aborted_others_refuse() {
        let t = Thresholds::default();
        let (_, d) = decide(&PolicyState::default(), &snap(950, 1000, 0, three()), &t);
        assert_eq!(d.largest_pid, Some(11));
        assert_eq!(d.victim.map(|v| v.pid), Some(11));
        let acts: Vec<Action> = three().iter().map(|p| d.action_for(id(p))).collect();
        assert_eq!(acts, vec![Action::Refuse, Action::Abort, Action::Refuse]);
        assert!(d.changed);
        let (_, d) = decide(&PolicyState::default(), &snap(860, 1000, 0, three()), &t);
        assert!(three().iter().all(|p| d.action_for(id(p)) == Action::Refuse));
        let (_, d) = decide(&PolicyState::default(), &snap(10, 1000, 0, three()), &t);
        assert!(three().iter().all(|p| d.action_for(id(p)) == Action::Serve));
        assert!(!d.changed);
    }

    #[test]
    fn victim_is_kept_until_repeat_then_the_new_largest() {
        let t = Thresholds { abort_repeat_ms: 1000, ..Thresholds::default() };
        let (s1, d1) = decide(&PolicyState::default(), &snap(950, 1000, 0, three()), &t);
        assert_eq!((d1.victim.map(|v| v.pid), d1.abort_round), (Some(11), 1));
        // Another process is now larger, but the repeat time has not come: the victim stays.
        let grown = vec![proc(10, 500), proc(11, 300), proc(12, 200)];
        let (s2, d2) = decide(&s1, &snap(950, 1000, 500, grown.clone()), &t);
        assert_eq!((d2.victim.map(|v| v.pid), d2.largest_pid, d2.changed), (Some(11), Some(10), false));
        // After abort_repeat_ms, still over abort_at: the new largest.
        let (s3, d3) = decide(&s2, &snap(950, 1000, 1000, grown.clone()), &t);
        assert_eq!((d3.victim.map(|v| v.pid), d3.abort_round, d3.changed), (Some(10), 2, true));
        // In the hysteresis band (0.90..0.92) no repeat happens even after the time.
        let (_, d4) = decide(&s3, &snap(910, 1000, 5000, vec![proc(12, 900)]), &t);
        assert_eq!((d4.state, d4.victim.map(|v| v.pid), d4.abort_round), (State::Aborting, Some(10), 2));
    }

    #[test]
    fn pid_reuse_is_not_the_victim() {
        let t = Thresholds::default();
        let (s, d) = decide(&PolicyState::default(), &snap(950, 1000, 0, three()), &t);
        let victim = d.victim.expect("victim");
        let reused = ProcId { pid: victim.pid, start_ticks: victim.start_ticks + 1 };
        let (_, d) = decide(&s, &snap(950, 1000, 100, three()), &t);
        assert_eq!(d.decided_for(reused), Action::Refuse);
        assert_eq!(d.decided_for(victim), Action::Abort);
    }

    #[test]
    fn ties_go_to_larger_anon_then_lower_pid() {
        let mut a = proc(20, 500);
        a.anon_bytes = 100;
        let b = proc(21, 500);
        assert_eq!(largest(&[a.clone(), b.clone()], 0).map(|p| p.pid), Some(21));
        assert_eq!(largest(&[proc(30, 5), proc(29, 5), proc(31, 5)], 0).map(|p| p.pid), Some(29));
    }

    #[test]
    fn the_agent_in_its_own_group_is_never_the_victim() {
        let t = Thresholds::default();
        // The agent (pid 11) is the largest member here: the next largest aborts, and alone it is no victim.
        let mut s = snap(950, 1000, 0, three());
        s.agent_pid = 11;
        let (_, d) = decide(&PolicyState::default(), &s, &t);
        assert_eq!((d.state, d.victim.map(|v| v.pid), d.largest_pid), (State::Aborting, Some(12), Some(12)));
        let mut alone = snap(950, 1000, 0, vec![proc(11, 300)]);
        alone.agent_pid = 11;
        let (_, d) = decide(&PolicyState::default(), &alone, &t);
        assert_eq!((d.victim, d.largest_pid), (None, None));
    }

    #[test]
    fn a_gone_victim_s_memory_leaves_before_the_next_is_told() {
        let t = Thresholds::default();
        // The largest by RSS, 40 of it anon: what its death frees.
        let (big, small) = (ProcSample { anon_bytes: 40, ..proc(11, 200) }, proc(12, 150));
        let (s, d) = decide(&PolicyState::default(), &snap(950, 1000, 0, vec![big.clone(), small.clone()]), &t);
        assert_eq!(d.victim.map(|v| v.pid), Some(11));
        // Killed: gone from the listing, what it held still charged. The other is not told to abort.
        let (s, d) = decide(&s, &snap(950, 1000, 10, vec![small.clone()]), &t);
        assert_eq!((d.state, d.victim.map(|v| v.pid)), (State::Aborting, Some(11)), "no new victim yet");
        assert_eq!(d.action_for(id(&small)), Action::Refuse);
        let (s, d) = decide(&s, &snap(940, 1000, 20, vec![small.clone()]), &t);
        assert_eq!(d.victim.map(|v| v.pid), Some(11), "10 of its 40 left: not yet");
        // Half of what it held has left, and the group is still over the line: the largest now is told.
        let (_, d) = decide(&s, &snap(925, 1000, 30, vec![small.clone()]), &t);
        assert_eq!((d.state, d.victim.map(|v| v.pid)), (State::Aborting, Some(12)));
        // Memory that never leaves (no process's death frees it): the next is told kill_repeat_ms after.
        let (s, _) = decide(&PolicyState::default(), &snap(950, 1000, 0, vec![big, small.clone()]), &t);
        let (s, d) = decide(&s, &snap(950, 1000, 10, vec![small.clone()]), &t);
        assert_eq!(d.victim.map(|v| v.pid), Some(11));
        let (s, d) = decide(&s, &snap(950, 1000, 9 + t.kill_repeat_ms, vec![small.clone()]), &t);
        assert_eq!(d.victim.map(|v| v.pid), Some(11));
        let (_, d) = decide(&s, &snap(950, 1000, 10 + t.kill_repeat_ms, vec![small]), &t);
        assert_eq!(d.victim.map(|v| v.pid), Some(12));
    }

    #[test]
    fn one_process_and_no_processes() {
        let t = Thresholds::default();
        let (_, d) = decide(&PolicyState::default(), &snap(950, 1000, 0, vec![proc(7, 1)]), &t);
        assert_eq!(d.victim.map(|v| v.pid), Some(7));
        let (s, d) = decide(&PolicyState::default(), &snap(950, 1000, 0, vec![]), &t);
        assert_eq!((d.state, d.victim, d.largest_pid), (State::Aborting, None, None));
        // A process that appears while aborting with no victim is chosen at once.
        let (_, d) = decide(&s, &snap(950, 1000, 100, vec![proc(8, 1)]), &t);
        assert_eq!(d.victim.map(|v| v.pid), Some(8));
    }

    #[test]
    fn limit_changing_at_run_time() {
        let t = Thresholds::default();
        let (s, d) = decide(&PolicyState::default(), &snap(800, 1000, 0, three()), &t);
        assert_eq!(d.state, State::Normal);
        // The limit is lowered under the same usage.
        let (s, d) = decide(&s, &snap(800, 850, 100, three()), &t);
        assert_eq!(d.state, State::Aborting);
        // And raised again.
        let (_, d) = decide(&s, &snap(800, 2000, 200, three()), &t);
        assert_eq!(d.state, State::Normal);
        // A zero limit (unknown) never divides by zero.
        let (_, d) = decide(&PolicyState::default(), &snap(800, 0, 0, three()), &t);
        assert_eq!((d.state, d.ratio), (State::Normal, 0.0));
    }

    #[test]
    fn shadow_decides_but_enforces_nothing() {
        let t = Thresholds { shadow: true, ..Thresholds::default() };
        let (_, d) = decide(&PolicyState::default(), &snap(950, 1000, 0, three()), &t);
        assert_eq!(d.state, State::Aborting);
        let victim = d.victim.expect("victim");
        assert_eq!(d.decided_for(victim), Action::Abort);
        assert_eq!(d.action_for(victim), Action::Serve);
    }

    #[test]
    fn decisions_count_entries_and_victims_once_each() {
        let d = |state, victim: Option<u32>| Decision {
            state,
            ratio: 0.0,
            largest_pid: None,
            victim: victim.map(|pid| ProcId { pid, start_ticks: 1 }),
            abort_round: 0,
            shadow: false,
            changed: false,
            kill: None,
            kills_halted: false,
            unseen: false,
            victim_growth: None,
            kill_line: 0.97,
            recycle: None,
        };
        let mut c = Decisions::default();
        for x in [
            d(State::Normal, None),
            d(State::Refusing, None),
            d(State::Refusing, None),
            d(State::Aborting, Some(7)),
            d(State::Aborting, Some(7)),
            d(State::Aborting, Some(8)),
            d(State::Refusing, None),
            d(State::Normal, None),
            d(State::Aborting, Some(8)),
        ] {
            c.observe(&x);
        }
        assert_eq!((c.entered_refusing, c.entered_aborting, c.victims), (2, 2, 3));
    }
}
