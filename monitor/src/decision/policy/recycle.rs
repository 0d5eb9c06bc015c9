//! The recycle, decided: a process told to abort that obeyed (it stopped growing) but keeps the group over
//! `refuse_at` is restarted gracefully, never killed. Its runtime may hold what it dropped for long: V8 until its
//! next garbage collection (seconds, an idle one about 9 s), a JVM its committed heap for good, Python its arenas.
//! Meanwhile the whole group refuses. Pure: the sampler carries the order out (under `monitor run` its requests in
//! flight finish first, then SIGTERM and the launcher's restart; under `monitor agent` `[actions] recycle_signal`).
//!
//! - The candidate is the abort's victim, followed from when it was told while the ratio stays at or above
//!   `refuse_at` (through `aborting` and the `refusing` below it).
//! - It has obeyed when its anon has not risen by more than [`super::kill::tolerance`] for a growth window
//!   ([`super::kill::growth_window_ms`]); a candidate still growing is the kill step's.
//! - `recycle_after_ms` after it was told, obeyed, the group still at or above `refuse_at`: recycle it, once.
//! - One at a time: no other recycle is ordered while the last one's process is still in the group (for at most
//!   [`STUCK_MS`]; a process that ignores the recycle is not recycled again, nor killed for it below `kill_at`).
//! - `recycle_after_ms = 0` turns it off. In shadow mode the order is decided and logged, never sent.

use super::{find, id, ProcId};
use crate::decision::snapshot::Snapshot;
use serde::Serialize;

/// How long a recycled process may stay in the group before another recycle may be ordered (its drain and its own
/// shutdown included).
pub const STUCK_MS: u64 = 60_000;

/// One recycle the policy orders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RecycleOrder {
    pub target: ProcId,
    /// How long ago it was told to abort.
    pub after_ms: u64,
    /// How long its anon has not risen past the tolerance.
    pub flat_ms: u64,
}

impl RecycleOrder {
    /// In words, for the log and the alert.
    pub fn describe(&self) -> String {
        format!(
            "it obeyed the abort {:.1} s ago (no growth for {:.1} s) but still holds its memory, and the group is \
             still over refuse_at: a graceful restart gives it back",
            self.after_ms as f64 / 1000.0,
            self.flat_ms as f64 / 1000.0
        )
    }
}

/// One recycle, carried out, decided only (shadow mode), or impossible (no way to tell the process).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct RecycleRecord {
    pub pid: u32,
    #[serde(skip)]
    pub start_ticks: u64,
    /// The configured name under `monitor run`, else the command name.
    pub name: String,
    pub role: crate::decision::snapshot::ProcessRole,
    pub anon_bytes: u64,
    /// The group's ratio when it was decided.
    pub ratio: f64,
    /// Why, in words.
    pub reason: String,
    /// The signal sent (`TERM` under `monitor run`, `[actions] recycle_signal` under `monitor agent`), when sent.
    pub signal: Option<String>,
    /// How long its requests in flight were waited for before the signal (under `monitor run`).
    pub drained_ms: u64,
    pub unix_ms: u64,
    /// False in shadow mode: decided and recorded, never sent.
    pub enforced: bool,
    /// Why it was not sent, when it was not (no `recycle_signal`, the process gone, …).
    pub error: Option<String>,
}

impl RecycleRecord {
    /// Sent and not failed.
    pub fn done(&self) -> bool {
        self.enforced && self.error.is_none()
    }
}

/// The process followed for a recycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    pub id: ProcId,
    /// When it was told to abort (monotonic ms).
    pub since_ms: u64,
    /// Its anon at the last rise past the tolerance (or the lowest since), and when it rose.
    pub anon: u64,
    pub rose_ms: u64,
}

/// What the recycle step remembers between samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecycleState {
    pub candidate: Option<Candidate>,
    /// The last recycle ordered, and when: none other while its process is in the group (up to [`STUCK_MS`]).
    pub last: Option<(ProcId, u64)>,
}

/// The inputs of one recycle decision.
pub struct Step<'a> {
    pub snap: &'a Snapshot,
    /// The abort's victim (while aborting).
    pub victim: Option<ProcId>,
    pub recycle_after_ms: u64,
    pub kill_after_ms: u64,
    pub refuse_at: f64,
}

/// The recycle step: the state to keep and the order, if any.
pub fn decide(prev: &RecycleState, s: &Step) -> (RecycleState, Option<RecycleOrder>) {
    let (now, ratio) = (s.snap.mono_ms, s.snap.group.ratio());
    let mut next = *prev;
    if let Some((last, at)) = next.last {
        if find(s.snap, last).is_none() || now.saturating_sub(at) >= STUCK_MS {
            next.last = None;
        }
    }
    if ratio < s.refuse_at || s.recycle_after_ms == 0 {
        next.candidate = None;
        return (next, None);
    }
    match (next.candidate, s.victim) {
        (Some(c), Some(v)) if c.id != v => next.candidate = None,
        _ => {}
    }
    if next.candidate.is_none() {
        let v = s.victim.and_then(|v| find(s.snap, v));
        next.candidate = v.map(|p| Candidate { id: id(p), since_ms: now, anon: p.anon_bytes, rose_ms: now });
    }
    let Some(mut c) = next.candidate else { return (next, None) };
    let Some(p) = find(s.snap, c.id) else {
        next.candidate = None;
        return (next, None);
    };
    let tol = super::kill::tolerance(s.snap.group.limit_bytes);
    if p.anon_bytes > c.anon.saturating_add(tol) {
        (c.anon, c.rose_ms) = (p.anon_bytes, now);
    } else if p.anon_bytes < c.anon {
        c.anon = p.anon_bytes;
    }
    next.candidate = Some(c);
    let flat_ms = now.saturating_sub(c.rose_ms);
    let after_ms = now.saturating_sub(c.since_ms);
    let obeyed = flat_ms >= super::kill::growth_window_ms(s.kill_after_ms);
    if !obeyed || after_ms < s.recycle_after_ms || next.last.is_some() {
        return (next, None);
    }
    next.last = Some((c.id, now));
    next.candidate = None;
    (next, Some(RecycleOrder { target: c.id, after_ms, flat_ms }))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{proc, snap};
    use super::*;
    use crate::decision::snapshot::ProcSample;

    const AFTER: u64 = 20_000;

    /// Runs the step over (usage of 1000, ms, processes) with 11 as the abort's victim while the usage is at or
    /// above 920; returns the orders' targets.
    fn run(steps: &[(u64, u64, Vec<ProcSample>)]) -> Vec<Option<u32>> {
        let mut st = RecycleState::default();
        steps
            .iter()
            .map(|(u, ms, procs)| {
                let sn = snap(*u, 1000, *ms, procs.clone());
                let victim =
                    (*u >= 920).then_some(ProcId { pid: 11, start_ticks: 1011 }).filter(|v| find(&sn, *v).is_some());
                let step = Step { snap: &sn, victim, recycle_after_ms: AFTER, kill_after_ms: 2000, refuse_at: 0.85 };
                let (n, o) = decide(&st, &step);
                st = n;
                o.map(|o| o.target.pid)
            })
            .collect()
    }

    fn three(by: u64) -> Vec<ProcSample> {
        vec![proc(10, 100), proc(11, 600 + by), proc(12, 200)]
    }

    #[test]
    fn a_victim_that_obeyed_but_keeps_the_group_over_refuse_at_is_recycled_once_after_the_wait() {
        // Told at 0, flat from then on, the group over abort_at, then in refusing (over refuse_at) all along.
        let mut steps: Vec<(u64, u64, Vec<ProcSample>)> = (0..=10).map(|i| (930, i * 1000, three(0))).collect();
        steps.extend((11..=25).map(|i| (880, i * 1000, three(0))));
        let got = run(&steps);
        let at: Vec<usize> = got.iter().enumerate().filter(|(_, o)| o.is_some()).map(|(i, _)| i).collect();
        assert_eq!(at, [20], "once, {AFTER} ms after it was told: {got:?}");
        assert_eq!(got[20], Some(11));
    }

    #[test]
    fn a_victim_still_growing_is_not_recycled_and_its_wait_counts_from_when_it_stopped() {
        // Growing by 20 a second until 15 s (the kill step's, not ours), then flat.
        let steps: Vec<(u64, u64, Vec<ProcSample>)> =
            (0..=40).map(|i| (930, i * 1000, three(20 * i.min(15)))).collect();
        let got = run(&steps);
        let first = got.iter().position(Option::is_some);
        assert_eq!(first, Some(20), "after the wait, once flat for a growth window: {got:?}");
    }

    #[test]
    fn under_refuse_at_or_off_nothing_and_one_at_a_time() {
        // The group falls under refuse_at at 10 s: the candidate is dropped, and a new abort starts a new wait.
        let mut steps: Vec<(u64, u64, Vec<ProcSample>)> = (0..=9).map(|i| (930, i * 1000, three(0))).collect();
        steps.push((800, 10_000, three(0)));
        steps.extend((11..=35).map(|i| (930, i * 1000, three(0))));
        let got = run(&steps);
        assert_eq!(got.iter().position(Option::is_some), Some(31), "{got:?}");
        // Off.
        let sn = snap(930, 1000, 30_000, three(0));
        let victim = Some(ProcId { pid: 11, start_ticks: 1011 });
        let step = Step { snap: &sn, victim, recycle_after_ms: 0, kill_after_ms: 2000, refuse_at: 0.85 };
        assert_eq!(decide(&RecycleState::default(), &step).1, None);
        // While the last recycled process is in the group, no other is ordered.
        let last = Some((ProcId { pid: 12, start_ticks: 1012 }, 0));
        let cand = Candidate { id: ProcId { pid: 11, start_ticks: 1011 }, since_ms: 0, anon: 600, rose_ms: 0 };
        let st = RecycleState { candidate: Some(cand), last };
        let step = Step { snap: &sn, victim, recycle_after_ms: AFTER, kill_after_ms: 2000, refuse_at: 0.85 };
        assert_eq!(decide(&st, &step).1, None);
        // Gone: the next may be.
        let gone = snap(930, 1000, 30_000, vec![proc(10, 100), proc(11, 600)]);
        let step = Step { snap: &gone, victim, recycle_after_ms: AFTER, kill_after_ms: 2000, refuse_at: 0.85 };
        assert_eq!(decide(&st, &step).1.map(|o| o.target.pid), Some(11));
    }
}
