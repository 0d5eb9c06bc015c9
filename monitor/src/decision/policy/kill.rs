//! The last resort, decided: when the process told to abort cannot obey (a native allocation loop, an event loop
//! that never turns, a process that ignores the signal), the agent kills that one process itself before the
//! kernel's OOM killer acts on the whole group (systemd's `OOMPolicy=stop` stops the unit, `memory.oom.group=1`
//! kills the container). Pure: the sampler carries the order out ([`crate::guard`]).
//!
//! - ratio >= `kill_at`: kill now.
//! - aborting `kill_after_ms` after the abort while the victim's anon has not fallen below what it was then: kill,
//!   wherever the ratio is (a grower held at the brake's `memory.high` never reaches `kill_at`).
//! - At most one kill per `kill_repeat_ms`. After [`MAX_KILLS`] kills without the ratio falling below `abort_at`
//!   (memory held by tmpfs, shared memory or the kernel, which no kill frees) the step halts until it does.
//! - The target is the abort's victim when it may be killed, else the largest by anon that may be. Never the agent;
//!   a protected process (a master, `[[process]] protect`) only when no other process's death would bring the group
//!   back under `abort_at` ([`target`]).
//! - In shadow mode the order is decided and logged, never sent, and does not count toward the halt.

use super::{find, id, ProcId};
use crate::decision::snapshot::{ProcSample, ProcessRole, Snapshot};
use serde::Serialize;

/// Kills without the ratio falling below `abort_at` after which the step halts.
pub(crate) const MAX_KILLS: u32 = 3;

/// Why the agent kills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum KillWhy {
    /// The ratio reached `kill_at`.
    OverKillAt,
    /// The victim was told to abort this long ago and its anon has not fallen.
    AbortNotObeyed { after_ms: u64 },
}

impl KillWhy {
    /// `over_kill_at` or `abort_not_obeyed`, for labels and the log.
    pub fn as_str(self) -> &'static str {
        match self {
            KillWhy::OverKillAt => "over_kill_at",
            KillWhy::AbortNotObeyed { .. } => "abort_not_obeyed",
        }
    }

    /// In words, for alerts and the log.
    pub fn describe(self, kill_at: f64) -> String {
        match self {
            KillWhy::OverKillAt => format!("the group reached kill_at ({:.0}% of its limit)", kill_at * 100.0),
            KillWhy::AbortNotObeyed { after_ms } => {
                format!("the abort was not obeyed: its memory had not fallen {after_ms} ms after it was sent")
            }
        }
    }
}

/// One kill the policy orders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KillOrder {
    pub target: ProcId,
    pub why: KillWhy,
    /// 1 for the first kill since the ratio was last below `abort_at`, up to [`MAX_KILLS`].
    pub round: u32,
}

/// What the kill step remembers between samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KillState {
    /// The process told to abort, while aborting: a repeat that names the same process again does not restart its
    /// wait.
    pub told: Option<Told>,
    /// When the last kill was ordered (monotonic ms).
    pub last_ms: Option<u64>,
    /// Kills ordered (outside shadow mode) since the ratio was last below `abort_at`.
    pub unrelieved: u32,
    /// The step has halted: [`MAX_KILLS`] kills freed nothing.
    pub halted: bool,
    /// Shadow mode: the process a kill was last decided for (it lives on, so it is not decided again until the
    /// group leaves aborting).
    pub shadowed: Option<ProcId>,
}

/// The process told to abort, as the kill step follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Told {
    pub id: ProcId,
    /// When it was first told (monotonic ms).
    pub since_ms: u64,
    /// Its anon then (to see whether it obeyed).
    pub anon: u64,
}

/// The process the kill step would target now (`snap.protected` lists the masters and `[[process]] protect`; never
/// the agent), in this order:
/// 1. the abort's `victim`, when it is not protected;
/// 2. the largest unprotected process by anon whose death would bring the group back under `abort_at` (it holds at
///    least `excess` bytes, the usage over that line);
/// 3. else the largest protected one whose death would: a master stuck growing is killed rather than every small
///    worker one by one, and rather than the kernel's kill of the whole group;
/// 4. else (no single death frees enough: tmpfs, shared memory) the largest unprotected process holding memory, then
///    the largest of all: the kills count toward the halt after [`MAX_KILLS`].
///
/// None, whatever the victim, when [`unseen`] holds: the memory over the line is held where the sampler cannot see
/// it, and killing visible processes that could not relieve the group would only cost them their lives.
pub fn target(snap: &Snapshot, victim: Option<ProcId>, excess: u64) -> Option<&ProcSample> {
    let protected = |p: &ProcSample| snap.protected.contains(&p.pid);
    let candidates = || snap.processes.iter().filter(|p| p.pid != snap.agent_pid);
    let by_anon = |a: &&ProcSample, b: &&ProcSample| a.anon_bytes.cmp(&b.anon_bytes).then(b.pid.cmp(&a.pid));
    if unseen(snap, excess) {
        return None;
    }
    let named = victim.and_then(|v| find(snap, v)).filter(|v| v.pid != snap.agent_pid);
    if let Some(v) = named.filter(|v| !protected(v)) {
        return Some(v);
    }
    let largest_free = candidates().filter(|p| !protected(p) && p.anon_bytes > 0).max_by(by_anon);
    let largest_kept = candidates().filter(|p| protected(p)).max_by(by_anon);
    match (largest_free, largest_kept) {
        (Some(f), _) if f.anon_bytes >= excess => Some(f),
        (_, Some(k)) if k.anon_bytes >= excess && k.anon_bytes > 0 => Some(k),
        (Some(f), _) => Some(f),
        _ => candidates().max_by(by_anon),
    }
}

/// The bytes of usage over the line `at` (a fraction of the limit).
pub fn over(snap: &Snapshot, at: f64) -> u64 {
    snap.group.usage_bytes.saturating_sub((at * snap.group.limit_bytes as f64) as u64)
}

/// True when some listed processes could not be sampled, no sampled process other than the agent holds `excess`
/// bytes of anon, and the memory beyond the sampled processes does: what must be freed is most likely in a process
/// the sampler cannot read.
pub fn unseen(snap: &Snapshot, excess: u64) -> bool {
    let g = &snap.group;
    excess > 0
        && g.processes_unsampled() > 0
        && g.unattributed_bytes >= excess
        && !snap.processes.iter().any(|p| p.pid != snap.agent_pid && p.anon_bytes >= excess)
}

/// The inputs of one kill decision.
pub struct Step<'a> {
    pub snap: &'a Snapshot,
    pub aborting: bool,
    /// The abort's victim.
    pub victim: Option<ProcId>,
    /// The victim was chosen (or chosen again) with this sample.
    pub new_victim: bool,
}

/// The kill step: the state to keep and the order, if any.
pub fn decide(prev: &KillState, s: &Step, t: &super::Thresholds) -> (KillState, Option<KillOrder>) {
    let (now, ratio) = (s.snap.mono_ms, s.snap.group.ratio());
    let mut next = *prev;
    if ratio < t.abort_at {
        next.unrelieved = 0;
        next.halted = false;
    }
    let victim_now = s.victim.and_then(|v| find(s.snap, v));
    if !s.aborting {
        next.told = None;
        next.shadowed = None;
    } else if s.new_victim && next.told.map(|t| t.id) != s.victim {
        let anon = victim_now.map_or(0, |p| p.anon_bytes);
        next.told = s.victim.map(|id| Told { id, since_ms: now, anon });
    }
    if !t.kill || !s.aborting || next.halted {
        return (next, None);
    }
    if next.last_ms.is_some_and(|last| now.saturating_sub(last) < t.kill_repeat_ms) {
        return (next, None);
    }
    let not_obeyed = next.told.and_then(|told| {
        let waited = now.saturating_sub(told.since_ms);
        let held = victim_now.is_some_and(|v| v.anon_bytes >= told.anon && v.anon_bytes > 0);
        (waited >= t.kill_after_ms && held).then_some(waited)
    });
    let why = match not_obeyed {
        _ if ratio >= t.kill_at => KillWhy::OverKillAt,
        Some(after_ms) => KillWhy::AbortNotObeyed { after_ms },
        None => return (next, None),
    };
    let Some(p) = target(s.snap, s.victim, over(s.snap, t.abort_at)) else { return (next, None) };
    let chosen = id(p);
    if t.shadow && next.shadowed == Some(chosen) {
        return (next, None);
    }
    if next.unrelieved >= MAX_KILLS {
        next.halted = true;
        return (next, None);
    }
    next.last_ms = Some(now);
    if t.shadow {
        next.shadowed = Some(chosen);
    } else {
        next.unrelieved += 1;
    }
    (next, Some(KillOrder { target: chosen, why, round: next.unrelieved.max(1) }))
}

/// One kill, sent or (in shadow mode) only decided.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KillRecord {
    pub pid: u32,
    #[serde(skip)]
    pub start_ticks: u64,
    pub name: String,
    pub role: ProcessRole,
    pub rss_bytes: u64,
    pub anon_bytes: u64,
    /// The group's ratio when the kill was decided.
    pub ratio: f64,
    /// `over_kill_at` or `abort_not_obeyed`.
    pub why: &'static str,
    /// In words (with the wait, for an abort not obeyed).
    pub reason: String,
    /// 1..=3: the kills since the ratio was last below `abort_at`.
    pub round: u32,
    pub unix_ms: u64,
    /// False in shadow mode: decided and recorded, never sent.
    pub enforced: bool,
    /// Why the SIGKILL was not sent, when it was not (the process was gone, another process has its pid, …).
    pub error: Option<String>,
    /// When the SIGKILL was sent, `CLOCK_MONOTONIC` nanoseconds (what a benchmark times it against).
    pub sent_mono_ns: Option<u64>,
    /// Under `monitor run`: its requests in flight just before the kill.
    pub requests: Option<crate::decision::snapshot::VictimRequests>,
}

#[cfg(test)]
impl KillRecord {
    /// A kill of worker `name` (pid `pid`, started at tick 5) at kill_at, for the consumers' tests.
    pub(crate) fn example(pid: u32, name: &str, enforced: bool) -> KillRecord {
        KillRecord {
            pid,
            start_ticks: 5,
            name: name.into(),
            role: ProcessRole::Worker,
            rss_bytes: 300 << 20,
            anon_bytes: 280 << 20,
            ratio: 0.975,
            why: "over_kill_at",
            reason: KillWhy::OverKillAt.describe(0.97),
            round: 1,
            unix_ms: 1_000,
            enforced,
            error: None,
            sent_mono_ns: None,
            requests: None,
        }
    }
}

impl KillRecord {
    /// The kill order for `order` as the sample shows its target (None when the target is not in the sample).
    pub fn of(order: &KillOrder, snap: &Snapshot, role: ProcessRole, kill_at: f64, shadow: bool) -> Option<Self> {
        let p = find(snap, order.target)?;
        Some(KillRecord {
            pid: p.pid,
            start_ticks: p.start_ticks,
            name: p.name.clone(),
            role,
            rss_bytes: p.rss_bytes,
            anon_bytes: p.anon_bytes,
            ratio: snap.group.ratio(),
            why: order.why.as_str(),
            reason: order.why.describe(kill_at),
            round: order.round,
            unix_ms: snap.unix_ms,
            enforced: !shadow,
            error: None,
            sent_mono_ns: None,
            requests: None,
        })
    }

    /// Sent and not failed: the process is gone by the guard's hand.
    pub fn done(&self) -> bool {
        self.enforced && self.error.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::proc;
    use super::super::{decide as policy, Decision, PolicyState, State, Thresholds};
    use super::*;

    /// A group of limit 1000 at `usage`, at `ms`, pid 10 protected (a master).
    fn snap(usage: u64, ms: u64, procs: Vec<ProcSample>) -> Snapshot {
        let mut s = super::super::tests::snap(usage, 1000, ms, procs);
        (s.unix_ms, s.protected) = (ms, vec![10]);
        s
    }

    fn three() -> Vec<ProcSample> {
        vec![proc(10, 100), proc(11, 300), proc(12, 200)]
    }

    /// Runs the policy over (usage, ms, processes) steps; returns each decision.
    fn run(t: &Thresholds, steps: &[(u64, u64, Vec<ProcSample>)]) -> Vec<Decision> {
        let mut st = PolicyState::default();
        steps
            .iter()
            .map(|(u, ms, procs)| {
                let (n, d) = policy(&st, &snap(*u, *ms, procs.clone()), t);
                st = n;
                d
            })
            .collect()
    }

    fn kills(ds: &[Decision]) -> Vec<Option<(u32, &'static str)>> {
        ds.iter().map(|d| d.kill.map(|k| (k.target.pid, k.why.as_str()))).collect()
    }

    #[test]
    fn over_kill_at_the_victim_is_killed_at_once_then_at_most_once_per_repeat() {
        let t = Thresholds::default();
        let ds = run(
            &t,
            &[
                (930, 0, three()),                               // aborting: 11 told
                (970, 100, three()),                             // kill_at: 11 killed
                (975, 200, three()),                             // within kill_repeat_ms: no second kill
                (975, 1100, vec![proc(10, 100), proc(12, 200)]), // 11 gone, still over: the largest that may be, 12
            ],
        );
        assert_eq!(kills(&ds), [None, Some((11, "over_kill_at")), None, Some((12, "over_kill_at"))]);
        assert_eq!((ds[1].kill.map(|k| k.round), ds[3].kill.map(|k| k.round)), (Some(1), Some(2)));
        // Straight from normal to over kill_at: the largest is told and killed on the same sample.
        let ds = run(&t, &[(100, 0, three()), (990, 100, three())]);
        assert_eq!((ds[1].state, ds[1].victim.map(|v| v.pid)), (State::Aborting, Some(11)));
        assert_eq!(kills(&ds), [None, Some((11, "over_kill_at"))]);
    }

    #[test]
    fn an_abort_not_obeyed_is_a_kill_after_kill_after_ms_wherever_the_ratio_is() {
        let t = Thresholds::default();
        let grown = || vec![proc(10, 100), proc(11, 320), proc(12, 200)];
        let ds = run(
            &t,
            &[
                (930, 0, three()),
                (935, 1000, grown()),
                (925, 1999, grown()),
                // Held at the brake below kill_at, in the hysteresis band: still killed once the wait is over.
                (910, 2000, grown()),
            ],
        );
        assert_eq!(kills(&ds), [None, None, None, Some((11, "abort_not_obeyed"))]);
        assert_eq!(ds[3].kill.map(|k| k.why), Some(KillWhy::AbortNotObeyed { after_ms: 2000 }));
        // A victim that freed some memory obeyed: no kill.
        let freed = vec![proc(10, 100), proc(11, 250), proc(12, 200)];
        let ds = run(&t, &[(930, 0, three()), (930, 2500, freed)]);
        assert_eq!(kills(&ds), [None, None]);
        // Refusing again: no kill.
        let ds = run(&t, &[(930, 0, three()), (880, 2500, three())]);
        assert_eq!(kills(&ds), [None, None]);
    }

    #[test]
    fn a_repeat_naming_the_same_victim_does_not_restart_its_wait() {
        // kill_after_ms above abort_repeat_ms: the repeat names 11 again at 600 and 1200, yet the wait runs from 0.
        let t = Thresholds { abort_repeat_ms: 600, kill_after_ms: 1000, ..Thresholds::default() };
        let steps: Vec<(u64, u64, Vec<ProcSample>)> = (0..5).map(|i| (950, i * 300, three())).collect();
        let ds = run(&t, &steps);
        assert_eq!(kills(&ds), [None, None, None, None, Some((11, "abort_not_obeyed"))]);
    }

    #[test]
    fn after_a_kill_the_next_largest_is_told_at_once_and_killed_after_its_own_wait() {
        let t = Thresholds::default();
        let without_11 = || vec![proc(10, 100), proc(12, 200)];
        let ds = run(
            &t,
            &[
                (950, 0, three()),
                (950, 2000, three()),      // 11 killed: abort not obeyed
                (950, 2100, without_11()), // 11 gone, still over: 12 told at once
                (950, 3900, without_11()), // 12's wait is not over
                (950, 4100, without_11()), // now it is
            ],
        );
        assert_eq!(kills(&ds)[1], Some((11, "abort_not_obeyed")));
        assert_eq!((ds[2].victim.map(|v| v.pid), ds[2].abort_round), (Some(12), 2));
        assert_eq!(kills(&ds)[3..], [None, Some((12, "abort_not_obeyed"))]);
    }

    #[test]
    fn the_master_is_spared_while_another_process_holds_memory() {
        let t = Thresholds::default();
        // The master (10) is the largest and so the abort's victim; the kill takes the largest other.
        let big_master = || vec![proc(10, 700), proc(11, 100), proc(12, 150)];
        let ds = run(&t, &[(980, 0, big_master())]);
        assert_eq!(ds[0].victim.map(|v| v.pid), Some(10));
        assert_eq!(kills(&ds), [Some((12, "over_kill_at"))]);
        // Alone with memory, the master may be killed.
        let ds = run(&t, &[(980, 0, vec![proc(10, 700), proc(11, 0)])]);
        assert_eq!(kills(&ds), [Some((10, "over_kill_at"))]);
        // The agent itself never.
        let mut s = snap(980, 0, vec![proc(5, 900)]);
        s.agent_pid = 5;
        assert_eq!(target(&s, None, 0), None);
        // The master stuck growing, the workers small: killing them would free nothing that matters, the master is
        // killed rather than the kernel killing the whole group.
        let ds = run(&t, &[(980, 0, vec![proc(10, 900), proc(11, 10), proc(12, 20)])]);
        assert_eq!(kills(&ds), [Some((10, "over_kill_at"))]);
    }

    #[test]
    fn three_kills_that_free_nothing_halt_the_step_until_the_ratio_falls() {
        let t = Thresholds::default();
        // tmpfs holds the group over kill_at: each kill frees nothing.
        let steps: Vec<(u64, u64, Vec<ProcSample>)> = (0..8).map(|i| (985, i * 1000, three())).collect();
        let ds = run(&t, &steps);
        let ordered = ds.iter().filter(|d| d.kill.is_some()).count();
        assert_eq!(ordered, MAX_KILLS as usize, "{:?}", kills(&ds));
        assert_eq!(
            ds.iter().map(|d| d.kills_halted).collect::<Vec<_>>(),
            [false, false, false, true, true, true, true, true]
        );
        // Below abort_at the count starts again.
        let mut steps = steps;
        steps.push((800, 9000, three()));
        steps.push((985, 10000, three()));
        let ds = run(&t, &steps);
        assert_eq!((ds[8].kills_halted, ds[9].kill.map(|k| k.round)), (false, Some(1)));
    }

    #[test]
    fn off_and_shadow() {
        let off = Thresholds { kill: false, ..Thresholds::default() };
        assert_eq!(kills(&run(&off, &[(990, 0, three())])), [None]);
        // Shadow: decided once for each process it would kill (that process lives on), never counted toward the
        // halt (nothing was sent); decided again after the group left aborting.
        let shadow = Thresholds { shadow: true, ..Thresholds::default() };
        let mut steps: Vec<(u64, u64, Vec<ProcSample>)> = (0..6).map(|i| (990, i * 1000, three())).collect();
        steps.push((800, 6000, three()));
        steps.push((990, 7000, three()));
        let ds = run(&shadow, &steps);
        let want = [Some((11, "over_kill_at")), None, None, None, None, None, None, Some((11, "over_kill_at"))];
        assert_eq!(kills(&ds), want);
        assert!(ds.iter().all(|d| !d.kills_halted));
    }

    #[test]
    fn a_reused_pid_is_not_the_abort_victim_named() {
        let t = Thresholds::default();
        let (st, d) = policy(&PolicyState::default(), &snap(930, 0, three()), &t);
        assert_eq!(d.victim.map(|v| v.pid), Some(11));
        // 11 exited and its pid was reused by a new small process: the kill takes the largest that may be.
        let mut reused = proc(11, 50);
        reused.start_ticks += 7;
        let (_, d) = policy(&st, &snap(975, 100, vec![proc(10, 100), reused, proc(12, 200)]), &t);
        assert_eq!(d.kill.map(|k| k.target.pid), Some(12));
    }

    #[test]
    fn memory_held_where_the_sampler_cannot_see_is_no_reason_to_kill_the_visible() {
        let t = Thresholds::default();
        // 985 of 1000 used; the three sampled hold 120; one listed process could not be sampled.
        let small = || vec![proc(10, 30), proc(11, 50), proc(12, 40)];
        let mut s = snap(985, 0, small());
        s.group.processes_listed += 1;
        assert_eq!(s.group.unattributed_bytes, 865);
        let (_, d) = policy(&PolicyState::default(), &s, &t);
        assert_eq!((d.state, d.victim.map(|v| v.pid)), (State::Aborting, Some(11)));
        assert_eq!(d.kill, None, "no sampled death frees the 65 over abort_at, the unseen 865 would");
        assert!(unseen(&s, 65) && d.unseen);
        // A sampled process that can relieve the group is still killed.
        let mut s = snap(985, 0, vec![proc(10, 100), proc(11, 500), proc(12, 200)]);
        s.group.processes_listed += 1;
        assert!(!unseen(&s, 65));
        let (_, d) = policy(&PolicyState::default(), &s, &t);
        assert_eq!(d.kill.map(|k| k.target.pid), Some(11));
        // Every listed process sampled: the memory is tmpfs or shared, the usual last resort holds.
        let s = snap(985, 0, small());
        assert!(!unseen(&s, 65));
        let (_, d) = policy(&PolicyState::default(), &s, &t);
        assert_eq!((d.kill.map(|k| k.target.pid), d.unseen), (Some(11), false));
    }
}
