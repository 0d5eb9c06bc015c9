//! The last resort, decided: when the process told to abort cannot obey (a native allocation loop, an event loop
//! that never turns, a process that ignores the signal), the agent kills that one process itself before the
//! kernel's OOM killer acts on the whole group (systemd's `OOMPolicy=stop` stops the unit, `memory.oom.group=1`
//! kills the container). Pure: the sampler carries the order out ([`crate::guard`]).
//!
//! - ratio >= the kill line: kill now. The line is `kill_at`; for [`RESPAWN_MS`] after a kill it moves down by what
//!   the group grows while a killed process dies (the measured growth rate times the measured time from a kill to
//!   its memory leaving the group), never below `abort_at`: an allocator that respawns what was killed is met
//!   before it reaches the limit ([`kill_line`]).
//! - aborting `kill_after_ms` after the abort while the victim is *still growing*: its anon rose by more than
//!   [`tolerance`] over the last growth window or two ([`growth_window_ms`]), and is rising in the latest half of
//!   them, measured on the samples after it was told. A last allocation that lands just after the abort
//!   (already on its way when the abort came) shows in the previous window only: that victim stopped.
//!   Killed wherever the ratio is (a grower held at the brake's `memory.high` may never reach `kill_at`). A victim
//!   that stopped growing has obeyed, even while its runtime has not given the memory back (V8 frees at its next
//!   garbage collection, a JVM keeps its committed heap, Python its arenas): that one is recycled gracefully, never
//!   killed below the kill line.
//! - The next kill follows as soon as the last one is done: its target has left the group and the group's usage
//!   has fallen by at least half of what the target held (its memory uncharged). While it is not done, the next
//!   waits `kill_repeat_ms`. After [`MAX_KILLS`] kills without the ratio falling below `abort_at` (memory held by
//!   tmpfs, shared memory or the kernel, which no kill frees) the step halts until it does.
//! - The target is the abort's victim when it may be killed, else the largest by anon that may be. Never the agent;
//!   a protected process (a master, `[[process]] protect`) only when no other process's death would bring the group
//!   back under `abort_at` ([`target`]).
//! - In shadow mode the order is decided and logged, never sent, and does not count toward the halt.

use super::{find, id, ProcId};
use crate::decision::snapshot::{ProcSample, ProcessRole, Snapshot};
use serde::Serialize;

/// Kills without the ratio falling below `abort_at` after which the step halts.
pub(crate) const MAX_KILLS: u32 = 3;

/// How long after a kill the kill line stays moved down by the group's growth rate: a respawned process and its
/// siblings refill the group within this.
pub const RESPAWN_MS: u64 = 5_000;

/// The time from a kill to its target's memory leaving the group, until one has been measured (ms).
pub const DIE_MS_GUESS: u64 = 30;

/// The growth window for `kill_after_ms`: half of it, at least 100 ms. A victim is still growing when its anon
/// rose by more than [`tolerance`] over the last one and a half to two windows, and by more than a quarter of it
/// over the last half window to one ([`Told::growth`]).
pub fn growth_window_ms(kill_after_ms: u64) -> u64 {
    (kill_after_ms / 2).max(100)
}

/// Rises of a victim's anon up to this many bytes are allocator noise, not growth: 0.5% of the limit (2.6 MiB of
/// 512 MiB), at least 1 MiB (1% of a limit under 100 MiB).
pub fn tolerance(limit: u64) -> u64 {
    (limit / 200).max((1u64 << 20).min(limit / 100))
}

/// Why the agent kills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum KillWhy {
    /// The ratio reached the kill line (`kill_at`, or lower while an allocator respawns: [`kill_line`]).
    OverKillAt,
    /// The victim was told to abort this long ago and is still growing: `grew_bytes` over the last `over_ms`.
    AbortNotObeyed { after_ms: u64, grew_bytes: u64, over_ms: u64 },
}

impl KillWhy {
    /// `over_kill_at` or `abort_not_obeyed`, for labels and the log.
    pub fn as_str(self) -> &'static str {
        match self {
            KillWhy::OverKillAt => "over_kill_at",
            KillWhy::AbortNotObeyed { .. } => "abort_not_obeyed",
        }
    }

    /// In words, for alerts and the log; `line` is the kill line the ratio was held against (below `kill_at` just
    /// after a kill while the group refills fast).
    pub fn describe(self, kill_at: f64, line: f64) -> String {
        match self {
            KillWhy::OverKillAt if line < kill_at - 1e-9 => format!(
                "the group reached the kill line, {:.1}% of its limit just after a kill: kill_at ({:.0}%) lowered by \
                 what the group grows while a killed process dies, as it refills that fast",
                line * 100.0,
                kill_at * 100.0
            ),
            KillWhy::OverKillAt => format!("the group reached kill_at ({:.0}% of its limit)", kill_at * 100.0),
            KillWhy::AbortNotObeyed { after_ms, grew_bytes, over_ms } => format!(
                "the abort was not obeyed: it was still growing ({:.1} MiB in the last {over_ms} ms) {after_ms} ms \
                 after it was sent",
                grew_bytes as f64 / (1u64 << 20) as f64
            ),
        }
    }
}

/// One kill the policy orders.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct KillOrder {
    pub target: ProcId,
    pub why: KillWhy,
    /// 1 for the first kill since the ratio was last below `abort_at`, up to [`MAX_KILLS`].
    pub round: u32,
    /// The kill line the ratio was held against (`kill_at`, or lower while an allocator respawns).
    pub line: f64,
}

/// What the kill step remembers between samples.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct KillState {
    /// The process told to abort, while aborting: a repeat that names the same process again does not restart its
    /// wait.
    pub told: Option<Told>,
    /// When the last kill was ordered (monotonic ms).
    pub last_ms: Option<u64>,
    /// The last kill, until it is done (its target gone and its memory uncharged).
    pub dying: Option<Dying>,
    /// The last measured time from a kill to its being done (ms).
    pub die_ms: Option<u64>,
    /// The group's usage at the previous sample (monotonic ms, bytes), and its growth rate (bytes per ms, smoothed
    /// over about 100 ms; falls count as 0).
    pub usage_at: Option<(u64, u64)>,
    pub rate: f64,
    /// Kills ordered (outside shadow mode) since the ratio was last below `abort_at`.
    pub unrelieved: u32,
    /// The step has halted: [`MAX_KILLS`] kills freed nothing.
    pub halted: bool,
    /// Shadow mode: the process a kill was last decided for (it lives on, so it is not decided again until the
    /// group leaves aborting).
    pub shadowed: Option<ProcId>,
}

/// A kill sent and not yet done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dying {
    pub target: ProcId,
    pub ms: u64,
    /// The group's usage when it was ordered, the lowest since, and what the target held.
    pub usage: u64,
    pub low: u64,
    pub held: u64,
}

impl Dying {
    /// Done: the target has left the group and the usage has fallen by at least half of what it held.
    fn done(&self, snap: &Snapshot) -> bool {
        find(snap, self.target).is_none() && self.low.saturating_add(self.held / 2) <= self.usage
    }
}

/// The process told to abort, as the kill step follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Told {
    pub id: ProcId,
    /// When it was first told (monotonic ms).
    pub since_ms: u64,
    /// (monotonic ms, anon) at the start of the last four half windows, oldest first.
    pub marks: [(u64, u64); 4],
}

impl Told {
    fn new(id: ProcId, now: u64, anon: u64) -> Told {
        Told { id, since_ms: now, marks: [(now, anon); 4] }
    }

    /// Rolls the half windows with the victim's anon sampled at `now`.
    fn observe(&mut self, now: u64, anon: u64, window_ms: u64) {
        if now.saturating_sub(self.marks[3].0) >= window_ms / 2 {
            self.marks.rotate_left(1);
            self.marks[3] = (now, anon);
        }
    }

    /// Its growth to `anon` at `now` from the start of the oldest half window (one and a half to two windows), and
    /// from the start of the one before the current (half a window to one).
    pub fn growth(&self, now: u64, anon: u64) -> Growth {
        let ([from, ..], recent) = (self.marks, self.marks[2]);
        Growth {
            bytes: anon as i64 - from.1 as i64,
            over_ms: now.saturating_sub(from.0),
            recent_bytes: anon as i64 - recent.1 as i64,
            recent_ms: now.saturating_sub(recent.0),
        }
    }
}

/// How the abort's victim has moved since it was told: the evidence of its obeying.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Growth {
    /// Its anon now less its anon `over_ms` ago (negative: it gave memory back).
    pub bytes: i64,
    pub over_ms: u64,
    /// Its anon now less its anon `recent_ms` ago (half a window to one).
    pub recent_bytes: i64,
    pub recent_ms: u64,
}

impl Growth {
    /// Still growing: risen by more than `tolerance` bytes over the two windows, and by more than a quarter of it in
    /// the current one (a rise that stopped in the previous window is the last allocation of a process that obeyed).
    pub fn growing(&self, tolerance: u64) -> bool {
        self.bytes > tolerance as i64 && self.recent_bytes > (tolerance / 4) as i64
    }

    /// In words: `still growing (+12.0 MiB in 1000 ms)`, `stopped growing (+0.3 MiB in 1000 ms): its memory not yet
    /// given back`, `gave back 40.0 MiB in 1000 ms`.
    pub fn describe(&self, tolerance: u64) -> String {
        let mib = self.bytes as f64 / (1u64 << 20) as f64;
        let recent = self.recent_bytes as f64 / (1u64 << 20) as f64;
        if self.growing(tolerance) {
            format!("still growing (+{mib:.1} MiB in {} ms)", self.over_ms)
        } else if self.bytes > tolerance as i64 {
            format!(
                "stopped growing (+{mib:.1} MiB in {} ms, {recent:+.1} MiB in the last {} ms): its memory not yet given back",
                self.over_ms, self.recent_ms
            )
        } else if self.bytes >= -(tolerance as i64) {
            format!("stopped growing ({mib:+.1} MiB in {} ms): its memory not yet given back", self.over_ms)
        } else {
            format!("gave back {:.1} MiB in {} ms", -mib, self.over_ms)
        }
    }
}

/// The kill line now: `kill_at`, or, for [`RESPAWN_MS`] after a kill that was sent, lower by what the group grows
/// (at its measured rate) in the time a killed process takes to leave it; never below `abort_at`.
pub fn kill_line(st: &KillState, now: u64, limit: u64, t: &super::Thresholds) -> f64 {
    let recent = st.last_ms.is_some_and(|l| now.saturating_sub(l) <= RESPAWN_MS) && !t.shadow;
    if !recent || limit == 0 {
        return t.kill_at;
    }
    let die = st.die_ms.unwrap_or(DIE_MS_GUESS) as f64;
    (t.kill_at - st.rate * die / limit as f64).max(t.abort_at)
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

/// What the kill step says besides its order: the victim's growth since it was told, and the kill line.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Seen {
    pub victim_growth: Option<Growth>,
    pub line: f64,
}

/// Follows the group's growth rate and the last kill's progress with this sample.
fn observe(next: &mut KillState, snap: &Snapshot) {
    let (now, usage) = (snap.mono_ms, snap.group.usage_bytes);
    if let Some((ms, was)) = next.usage_at.filter(|&(ms, _)| now > ms) {
        let dt = (now - ms) as f64;
        let rate = usage.saturating_sub(was) as f64 / dt;
        let alpha = (dt / 100.0).min(1.0);
        next.rate += alpha * (rate - next.rate);
    }
    next.usage_at = Some((now, usage));
    if let Some(d) = next.dying.as_mut() {
        d.low = d.low.min(usage);
    }
    if let Some(d) = next.dying.filter(|d| d.done(snap)) {
        next.die_ms = Some(now.saturating_sub(d.ms));
        next.dying = None;
    }
}

/// The kill step: the state to keep, the order if any, and what it saw.
pub fn decide(prev: &KillState, s: &Step, t: &super::Thresholds) -> (KillState, Option<KillOrder>, Seen) {
    let (now, ratio, limit) = (s.snap.mono_ms, s.snap.group.ratio(), s.snap.group.limit_bytes);
    let mut next = *prev;
    observe(&mut next, s.snap);
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
        next.told = s.victim.map(|id| Told::new(id, now, anon));
    }
    let window = growth_window_ms(t.kill_after_ms);
    let growth = match (next.told.as_mut(), victim_now) {
        (Some(told), Some(v)) if Some(told.id) == s.victim => {
            told.observe(now, v.anon_bytes, window);
            Some(told.growth(now, v.anon_bytes))
        }
        _ => None,
    };
    let line = kill_line(&next, now, limit, t);
    let seen = Seen { victim_growth: growth, line };
    if !t.kill || !s.aborting || next.halted {
        return (next, None, seen);
    }
    if next.dying.is_some() && next.last_ms.is_some_and(|last| now.saturating_sub(last) < t.kill_repeat_ms) {
        return (next, None, seen);
    }
    let tol = tolerance(limit);
    let not_obeyed = next.told.zip(growth).and_then(|(told, g)| {
        let waited = now.saturating_sub(told.since_ms);
        (waited >= t.kill_after_ms && g.growing(tol)).then_some((waited, g))
    });
    let why = match not_obeyed {
        _ if ratio >= line => KillWhy::OverKillAt,
        Some((after_ms, g)) => {
            KillWhy::AbortNotObeyed { after_ms, grew_bytes: g.bytes.unsigned_abs(), over_ms: g.over_ms }
        }
        None => return (next, None, seen),
    };
    let Some(p) = target(s.snap, s.victim, over(s.snap, t.abort_at)) else { return (next, None, seen) };
    let (chosen, held) = (id(p), p.anon_bytes);
    if t.shadow && next.shadowed == Some(chosen) {
        return (next, None, seen);
    }
    if next.unrelieved >= MAX_KILLS {
        next.halted = true;
        return (next, None, seen);
    }
    next.last_ms = Some(now);
    if t.shadow {
        next.shadowed = Some(chosen);
    } else {
        next.unrelieved += 1;
        let usage = s.snap.group.usage_bytes;
        next.dying = Some(Dying { target: chosen, ms: now, usage, low: usage, held });
    }
    (next, Some(KillOrder { target: chosen, why, round: next.unrelieved.max(1), line }), seen)
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
    /// Kills of a process of the same name sent in the minute before this one ([`crate::guard::AGAIN_MS`]): more
    /// than 0 is a restart loop of the guard's making.
    pub again: u32,
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
            reason: KillWhy::OverKillAt.describe(0.97, 0.97),
            round: 1,
            unix_ms: 1_000,
            enforced,
            error: None,
            sent_mono_ns: None,
            requests: None,
            again: 0,
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
            reason: order.why.describe(kill_at, order.line),
            round: order.round,
            unix_ms: snap.unix_ms,
            enforced: !shadow,
            error: None,
            sent_mono_ns: None,
            requests: None,
            again: 0,
        })
    }

    /// `; a process of this name was killed N times before in the last minute: …` when it was, for the log and the
    /// alert.
    pub fn again_words(&self) -> String {
        match self.again {
            0 => String::new(),
            n => format!(
                "; a process of this name was killed {n} time{} before in the last minute: a restart loop of the \
                 guard's making (something starts it again as fast as it is killed)",
                if n == 1 { "" } else { "s" }
            ),
        }
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

    /// The three processes with 11 grown by `by` (bytes).
    fn grown(by: u64) -> Vec<ProcSample> {
        vec![proc(10, 100), proc(11, 300 + by), proc(12, 200)]
    }

    #[test]
    fn a_victim_still_growing_kill_after_ms_after_the_abort_is_killed_wherever_the_ratio_is() {
        let t = Thresholds::default();
        let ds = run(
            &t,
            &[
                (930, 0, three()),
                (935, 1000, grown(20)),
                (925, 1999, grown(40)),
                // Held at the brake below kill_at, in the hysteresis band, still growing: killed once the wait is
                // over.
                (910, 2000, grown(60)),
            ],
        );
        assert_eq!(kills(&ds), [None, None, None, Some((11, "abort_not_obeyed"))]);
        let why = KillWhy::AbortNotObeyed { after_ms: 2000, grew_bytes: 60, over_ms: 2000 };
        assert_eq!(ds[3].kill.map(|k| k.why), Some(why));
        assert!(why.describe(0.97, 0.97).contains("still growing"), "{}", why.describe(0.97, 0.97));
        assert_eq!(ds[3].victim_growth, Some(Growth { bytes: 60, over_ms: 2000, recent_bytes: 40, recent_ms: 1000 }));
        // A victim that freed some memory obeyed: no kill.
        let freed = vec![proc(10, 100), proc(11, 250), proc(12, 200)];
        let ds = run(&t, &[(930, 0, three()), (930, 1000, freed.clone()), (930, 2500, freed)]);
        assert_eq!(kills(&ds), [None, None, None]);
        // Refusing again: no kill.
        let ds = run(&t, &[(930, 0, three()), (880, 2500, grown(100))]);
        assert_eq!(kills(&ds), [None, None]);
    }

    #[test]
    fn a_victim_that_stopped_growing_obeyed_though_its_memory_stays_and_is_not_killed_below_kill_at() {
        let t = Thresholds::default();
        // Told at 0, it grew on for a moment (the abort was on its way), then stopped: its runtime keeps what it
        // grew (a garbage collector that has not run, a JVM's committed heap). Ten seconds over abort_at: no kill.
        let mut steps = vec![(930, 0, three()), (935, 50, grown(30))];
        steps.extend((1..=100).map(|i| (935, i * 100, grown(30 + i % 3))));
        let ds = run(&t, &steps);
        assert!(kills(&ds).iter().all(Option::is_none), "{:?}", kills(&ds));
        let last = ds.last().and_then(|d| d.victim_growth).expect("the victim's growth");
        assert!(!last.growing(tolerance(1000)), "{last:?}");
        assert!(last.describe(tolerance(1000)).starts_with("stopped growing"), "{}", last.describe(10));
        // kill_at stays the line for everyone.
        steps.push((970, 10_100, grown(32)));
        let ds = run(&t, &steps);
        assert_eq!(ds.last().and_then(|d| d.kill).map(|k| (k.target.pid, k.why.as_str())), Some((11, "over_kill_at")));
        // One that starts growing again, long after it was told, is killed then.
        let mut steps: Vec<(u64, u64, Vec<ProcSample>)> = (0..=30).map(|i| (935, i * 100, grown(30))).collect();
        steps.extend((31..=60).map(|i| (940, i * 100, grown(30 + (i - 30) * 2))));
        let ds = run(&t, &steps);
        let at = ds.iter().position(|d| d.kill.is_some()).expect("a kill");
        assert_eq!(kills(&ds)[at], Some((11, "abort_not_obeyed")));
        assert!((35..=52).contains(&at), "killed at step {at}: once its rise passed the tolerance within a window");
    }

    #[test]
    fn a_last_allocation_landing_after_the_abort_is_not_growth_but_a_slow_creeper_is() {
        let t = Thresholds::default();
        // Told at 0; on a slow machine its last chunk (more than the tolerance) lands 600 ms later, then nothing.
        let mut steps = vec![(930, 0, three()), (930, 50, grown(0)), (935, 600, grown(12))];
        steps.extend((7..=60).map(|i| (935, i * 100, grown(12))));
        let ds = run(&t, &steps);
        assert!(kills(&ds).iter().all(Option::is_none), "{:?}", kills(&ds));
        let at_wait = ds.iter().zip(&steps).find(|(_, s)| s.1 == 2000).and_then(|(d, _)| d.victim_growth);
        let g = at_wait.expect("the victim's growth at kill_after_ms");
        assert!(g.bytes > 10 && !g.growing(tolerance(1000)), "{g:?}");
        assert!(g.describe(tolerance(1000)).starts_with("stopped growing"), "{}", g.describe(tolerance(1000)));
        // One that creeps on at 6 a second (the tolerance is 10) is still growing, and killed.
        let steps: Vec<(u64, u64, Vec<ProcSample>)> = (0..=60).map(|i| (935, i * 100, grown(i * 6 / 10))).collect();
        let ds = run(&t, &steps);
        let at = ds.iter().position(|d| d.kill.is_some()).expect("the creeper killed");
        assert_eq!(kills(&ds)[at], Some((11, "abort_not_obeyed")));
        assert!((20..=30).contains(&at), "killed at step {at}");
    }

    #[test]
    fn a_repeat_naming_the_same_victim_does_not_restart_its_wait() {
        // kill_after_ms above abort_repeat_ms: the repeat names 11 again at 600 and 1200, yet the wait runs from 0.
        let t = Thresholds { abort_repeat_ms: 600, kill_after_ms: 1000, ..Thresholds::default() };
        let steps: Vec<(u64, u64, Vec<ProcSample>)> = (0..5).map(|i| (950, i * 300, grown(i * 30))).collect();
        let ds = run(&t, &steps);
        assert_eq!(kills(&ds), [None, None, None, None, Some((11, "abort_not_obeyed"))]);
    }

    #[test]
    fn after_a_kill_the_next_largest_is_told_once_it_is_gone_and_killed_after_its_own_wait() {
        let t = Thresholds::default();
        let without_11 = |by: u64| vec![proc(10, 100), proc(12, 200 + by)];
        let ds = run(
            &t,
            &[
                (950, 0, three()),
                (950, 1000, grown(30)),
                (950, 2000, grown(60)),      // 11 killed: still growing
                (950, 2100, without_11(0)),  // 11 gone, its memory not yet left: 12 is not told
                (950, 3100, without_11(30)), // kill_repeat_ms later it has not left either: 12 told
                (950, 4100, without_11(50)),
                (950, 5000, without_11(70)), // 12's wait is not over
                (950, 5100, without_11(80)), // now it is
            ],
        );
        assert_eq!(kills(&ds)[2], Some((11, "abort_not_obeyed")));
        assert_eq!((ds[3].victim.map(|v| v.pid), ds[3].abort_round), (Some(11), 1));
        assert_eq!((ds[4].victim.map(|v| v.pid), ds[4].abort_round), (Some(12), 2));
        assert_eq!(kills(&ds)[3..], [None, None, None, None, Some((12, "abort_not_obeyed"))]);
    }

    #[test]
    fn the_next_kill_follows_as_soon_as_the_last_is_done_not_a_fixed_time_later() {
        let t = Thresholds::default();
        let after = |b: u64| vec![proc(10, 100), proc(12, 200 + b)];
        let ds = run(
            &t,
            &[
                (980, 0, three()),     // 11 killed over kill_at
                (975, 10, three()),    // still listed: dying
                (975, 20, after(0)),   // gone, but its memory not yet uncharged: not done
                (700, 30, after(0)),   // done: 30 ms
                (985, 60, after(285)), // 12 (respawned, or its sibling) refilled the group: killed at once
            ],
        );
        assert_eq!(kills(&ds), [Some((11, "over_kill_at")), None, None, None, Some((12, "over_kill_at"))]);
        // Not done (gone but the usage has not fallen): the next waits kill_repeat_ms.
        let ds = run(&t, &[(980, 0, three()), (985, 30, after(0)), (985, 999, after(0)), (985, 1000, after(0))]);
        assert_eq!(kills(&ds), [Some((11, "over_kill_at")), None, None, Some((12, "over_kill_at"))]);
    }

    #[test]
    fn just_after_a_kill_the_line_moves_down_by_what_the_group_grows_while_a_victim_dies() {
        let t = Thresholds::default();
        let after = |b: u64| vec![proc(10, 100), proc(12, 200 + b)];
        // Without a kill the line is kill_at, whatever the rate.
        let ds = run(&t, &[(500, 0, three()), (930, 10, three()), (960, 20, three())]);
        assert_eq!((kills(&ds)[2], ds[2].kill_line), (None, 0.97));
        // After a kill (done in 40 ms) the group refills at about 2 to 3 bytes/ms, so 40 ms of dying are about 100
        // of 1000: the line falls to abort_at, and a refill to 94% is met there.
        let ds = run(
            &t,
            &[
                (980, 0, three()),
                (600, 40, after(0)),
                (660, 60, after(60)),
                (720, 80, after(120)),
                (780, 100, after(180)),
                (840, 120, after(240)),
                (900, 140, after(300)),
                (940, 160, after(340)),
            ],
        );
        assert_eq!(kills(&ds)[..7], [Some((11, "over_kill_at")), None, None, None, None, None, None]);
        assert!((ds[7].kill_line - 0.92).abs() < 1e-9, "{}", ds[7].kill_line);
        assert_eq!(kills(&ds)[7], Some((12, "over_kill_at")));
        assert!(ds[7].kill.is_some_and(|k| k.line < 0.97));
        let why = ds[7].kill.map(|k| k.why.describe(0.97, k.line)).unwrap_or_default();
        assert!(why.starts_with("the group reached the kill line, 92.0% of its limit just after a kill"), "{why}");
        // RESPAWN_MS later the line is kill_at again.
        let st = KillState { last_ms: Some(0), rate: 3.0, ..KillState::default() };
        assert_eq!(kill_line(&st, RESPAWN_MS + 1, 1000, &t), 0.97);
        assert!(kill_line(&st, RESPAWN_MS, 1000, &t) < 0.97);
        assert_eq!(kill_line(&st, 10, 1000, &Thresholds { shadow: true, ..t.clone() }), 0.97);
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
