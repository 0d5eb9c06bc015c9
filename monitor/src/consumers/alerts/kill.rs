//! The last resort, alerted: `MonitorProcessKilled` for each kill record a published sample carries (sent, or in
//! shadow mode only decided), `MonitorProcessRecycled` for each recycle (sent, decided, or impossible for want of a
//! `recycle_signal`), and `MonitorKillIneffective` while the kill step has halted because its kills freed
//! nothing. A kill is an event, not a state: its condition is held for [`HOLD_MS`] after the agent saw it and then
//! resolved like any other (after `quiet_s`), as the kernel's OOM kills are ([`super::oom`]).

use super::{names, Condition};
use crate::feed::Published;
use crate::guard::{KillRecord, RecycleRecord};

/// How long a kill's condition is held after the agent saw it, in milliseconds (1 minute).
pub(crate) const HOLD_MS: u64 = 60 * 1000;

/// Follows the kills sample by sample (pure: the caller gives the time).
#[derive(Debug, Default)]
pub(crate) struct KillWatch {
    last_seq: Option<u64>,
    /// Kills seen, with when, held until [`HOLD_MS`] after them.
    held: Vec<(KillRecord, u64)>,
    /// Recycles seen, the same way.
    recycles: Vec<(RecycleRecord, u64)>,
}

impl KillWatch {
    /// Takes in the sample `p` (once per sample: a sample seen before or the last good one repeated while the group
    /// cannot be read adds nothing) and returns the `MonitorProcessKilled` conditions true at `now_ms`.
    pub(crate) fn conditions(&mut self, p: &Published, now_ms: u64) -> Vec<Condition> {
        if self.last_seq != Some(p.snapshot.seq) {
            self.last_seq = Some(p.snapshot.seq);
            if let (Some(rec), None) = (&p.kill, &p.error) {
                // The same process decided again (shadow mode repeats its order): one alert, held from the latest.
                self.held.retain(|(r, _)| (r.pid, r.start_ticks) != (rec.pid, rec.start_ticks));
                self.held.push((rec.clone(), now_ms));
            }
            if let (Some(rec), None) = (&p.recycle, &p.error) {
                self.recycles.retain(|(r, _)| (r.pid, r.start_ticks) != (rec.pid, rec.start_ticks));
                self.recycles.push((rec.clone(), now_ms));
            }
        }
        self.held.retain(|(_, at)| now_ms < at + HOLD_MS);
        self.recycles.retain(|(_, at)| now_ms < at + HOLD_MS);
        let kills = self.held.iter().map(|(r, _)| killed(r));
        kills.chain(self.recycles.iter().map(|(r, _)| recycled(r))).collect()
    }
}

/// `MonitorProcessRecycled` for one recycle record: labelled with the process's name, role and pid, annotated with
/// what it held, why, and the signal (or why none could be sent).
pub fn recycled(r: &RecycleRecord) -> Condition {
    let what = format!(
        "{} (pid {}, {} anon) with the group at {:.1}% of its limit",
        r.name,
        r.pid,
        crate::base::units::size(r.anon_bytes),
        r.ratio * 100.0
    );
    let summary = match (&r.error, r.enforced) {
        (_, false) => format!("shadow mode, not enforced: the guard would have recycled {what}: {}", r.reason),
        (Some(e), true) => format!("the guard could not recycle {what}: {e}; {}", r.reason),
        (None, true) => format!(
            "the guard recycled {what} (SIG{} after {} ms of its requests in flight): {}",
            r.signal.as_deref().unwrap_or("-"),
            r.drained_ms,
            r.reason
        ),
    };
    let mut c = Condition::new(names::PROCESS_RECYCLED)
        .label("process", r.name.clone())
        .label("role", r.role.to_string())
        .label("pid", r.pid.to_string())
        .annotate("pid", r.pid.to_string())
        .annotate("anon_bytes", r.anon_bytes.to_string())
        .annotate("ratio", format!("{:.3}", r.ratio))
        .annotate("reason", r.reason.clone())
        .annotate("enforced", r.enforced.to_string())
        .annotate("summary", summary);
    if let Some(s) = &r.signal {
        c = c.annotate("signal", s.clone());
    }
    if let Some(e) = &r.error {
        c = c.annotate("error", e.clone());
    }
    c
}

/// `MonitorProcessKilled` for one kill record: labelled with the process's name, role and pid (each kill its own
/// alert), annotated with what it held and why.
pub fn killed(r: &KillRecord) -> Condition {
    let what = format!(
        "{} (pid {}, {} resident, {} anon) with the group at {:.1}% of its limit",
        r.name,
        r.pid,
        crate::base::units::size(r.rss_bytes),
        crate::base::units::size(r.anon_bytes),
        r.ratio * 100.0
    );
    let work = r.requests.as_ref().map(|q| format!("; {}", q.summary())).unwrap_or_default();
    let work = format!("{work}{}", r.again_words());
    let summary = match (&r.error, r.enforced) {
        (_, false) => format!("shadow mode, not enforced: the guard would have killed {what}: {}{work}", r.reason),
        (Some(e), true) => format!("the guard's kill of {what} was not sent ({e}): {}{work}", r.reason),
        (None, true) => format!("the guard killed {what}: {}{work}", r.reason),
    };
    let mut c = Condition::new(names::PROCESS_KILLED)
        .label("process", r.name.clone())
        .label("role", r.role.to_string())
        .label("pid", r.pid.to_string())
        .annotate("pid", r.pid.to_string())
        .annotate("rss_bytes", r.rss_bytes.to_string())
        .annotate("anon_bytes", r.anon_bytes.to_string())
        .annotate("ratio", format!("{:.3}", r.ratio))
        .annotate("why", r.why)
        .annotate("reason", r.reason.clone())
        .annotate("round", r.round.to_string())
        .annotate("killed_before_in_last_minute", r.again.to_string())
        .annotate("enforced", r.enforced.to_string())
        .annotate("summary", summary);
    if let Some(e) = &r.error {
        c = c.annotate("error", e.clone());
    }
    if let Some(q) = &r.requests {
        c = c.annotate("requests", q.lines()).annotate("requests_total", q.total.to_string());
    }
    c
}

/// `MonitorKillIneffective` while the kill step has halted (`decision.kills_halted`).
pub fn ineffective(p: &Published) -> Option<Condition> {
    if !p.decision.kills_halted {
        return None;
    }
    let g = &p.snapshot.group;
    let c = Condition::new(names::KILL_INEFFECTIVE)
        .label("cgroup", g.cgroup.display().to_string())
        .annotate("usage_bytes", g.usage_bytes.to_string())
        .annotate("shmem_bytes", g.shmem_bytes.to_string())
        .annotate("limit_bytes", g.limit_bytes.to_string())
        .annotate("ratio", format!("{:.3}", p.decision.ratio))
        .annotate(
            "summary",
            format!(
                "{} kills did not bring the group below abort_at (at {:.1}% of its limit, {} of it shmem): its memory \
                 is held by something no kill frees (tmpfs, shared memory, the kernel); the guard has stopped killing",
                crate::decision::policy::kill::MAX_KILLS,
                p.decision.ratio * 100.0,
                crate::base::units::size(g.shmem_bytes)
            ),
        );
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::policy::State;

    fn record(pid: u32, enforced: bool) -> KillRecord {
        KillRecord { start_ticks: u64::from(pid) * 10, ..KillRecord::example(pid, "tx1", enforced) }
    }

    fn sample(seq: u64, kill: Option<KillRecord>) -> Published {
        let mut p = Published::test(State::Aborting);
        p.snapshot.seq = seq;
        p.kill = kill;
        p
    }

    fn ann<'a>(c: &'a Condition, k: &str) -> Option<&'a str> {
        c.annotations.get(k).map(String::as_str)
    }

    /// A kill under `monitor run` names the requests the process had in flight, the oldest first.
    #[test]
    fn a_kill_names_the_requests_in_flight() {
        use crate::decision::snapshot::{InFlight, VictimRequests};
        let req = |path: &str, age_ms| InFlight {
            method: "POST".into(),
            path: path.into(),
            cache_id: None,
            age_ms,
            bytes_in: 2048,
            bytes_out: 0,
        };
        let mut r = record(11, true);
        r.requests = Some(VictimRequests::new(11, 1, vec![req("/light", 5), req("/heavy", 4200)]));
        let c = killed(&r);
        let summary = ann(&c, "summary").unwrap_or_default();
        assert!(summary.ends_with("; 2 requests in flight, the oldest POST /heavy for 4.2 s"), "{summary}");
        assert_eq!(
            ann(&c, "requests"),
            Some("POST /heavy 4.2 s (in 2048 B, out 0 B)\nPOST /light 0.0 s (in 2048 B, out 0 B)")
        );
        assert_eq!(ann(&c, "requests_total"), Some("2"));
        assert_eq!(ann(&killed(&record(11, true)), "requests"), None, "none outside monitor run");
    }

    #[test]
    fn each_kill_fires_once_and_is_held_for_a_while() {
        let mut w = KillWatch::default();
        assert!(w.conditions(&sample(1, None), 0).is_empty());
        let c = w.conditions(&sample(2, Some(record(11, true))), 100);
        assert_eq!(c.len(), 1);
        let c = &c[0];
        assert_eq!(c.name, "MonitorProcessKilled");
        assert_eq!(c.labels.get("process").map(String::as_str), Some("tx1"));
        assert_eq!(c.labels.get("role").map(String::as_str), Some("worker"));
        assert_eq!((ann(c, "pid"), ann(c, "round"), ann(c, "why")), (Some("11"), Some("1"), Some("over_kill_at")));
        assert_eq!(ann(c, "anon_bytes"), Some((280u64 << 20).to_string().as_str()));
        let summary = ann(c, "summary").unwrap_or_default();
        assert!(summary.starts_with("the guard killed tx1 (pid 11, 300.0 MiB resident"), "{summary}");
        assert!(summary.contains("97.5%") && summary.contains("kill_at"), "{summary}");
        // Held as later samples come (and on ticks without one), then gone.
        assert_eq!(w.conditions(&sample(3, None), 30_000), vec![c.clone()]);
        assert_eq!(w.conditions(&sample(3, None), 100 + HOLD_MS - 1).len(), 1);
        assert!(w.conditions(&sample(4, None), 100 + HOLD_MS).is_empty());
    }

    #[test]
    fn a_second_kill_is_its_own_alert() {
        let mut w = KillWatch::default();
        let first = w.conditions(&sample(1, Some(record(11, true))), 0);
        let both = w.conditions(&sample(2, Some(record(12, true))), 1_000);
        assert_eq!(both.len(), 2);
        assert_eq!(both[0], first[0]);
        assert_ne!(both[0].fingerprint(), both[1].fingerprint());
    }

    #[test]
    fn a_sample_seen_before_or_a_failed_one_adds_nothing() {
        let mut w = KillWatch::default();
        w.conditions(&sample(1, Some(record(11, true))), 0);
        // The same sample read again at the next tick: still one kill.
        assert_eq!(w.conditions(&sample(1, Some(record(11, true))), 10).len(), 1);
        let mut failed = sample(2, Some(record(12, true)));
        failed.error = Some("memory.stat: gone".into());
        assert_eq!(w.conditions(&failed, 20).len(), 1, "a failed sample carries no kill");
    }

    #[test]
    fn shadow_and_unsent_kills_say_so() {
        let mut w = KillWatch::default();
        let c = w.conditions(&sample(1, Some(record(11, false))), 0);
        let summary = ann(&c[0], "summary").unwrap_or_default();
        assert!(summary.starts_with("shadow mode, not enforced: the guard would have killed tx1"), "{summary}");
        assert_eq!(ann(&c[0], "enforced"), Some("false"));
        // Decided again a second later (shadow repeats its order): the same alert, not a second one.
        assert_eq!(w.conditions(&sample(2, Some(record(11, false))), 1_000).len(), 1);
        let mut unsent = record(12, true);
        unsent.error = Some("pid 12 is gone".into());
        let c = killed(&unsent);
        assert!(ann(&c, "summary").is_some_and(|s| s.contains("was not sent (pid 12 is gone)")), "{c:?}");
        assert_eq!(ann(&c, "error"), Some("pid 12 is gone"));
    }

    #[test]
    fn ineffective_while_the_kills_have_halted() {
        let mut p = Published::test(State::Aborting);
        assert_eq!(ineffective(&p), None);
        p.decision.kills_halted = true;
        p.decision.ratio = 0.95;
        p.snapshot.group.shmem_bytes = 64 << 20;
        let c = ineffective(&p).expect("halted");
        assert_eq!(c.name, "MonitorKillIneffective");
        assert_eq!(c.labels.get("cgroup").map(String::as_str), Some("/g"));
        let summary = ann(&c, "summary").unwrap_or_default();
        assert!(summary.starts_with("3 kills did not bring the group below abort_at"), "{summary}");
        assert!(summary.contains("tmpfs, shared memory, the kernel") && summary.contains("64.0 MiB"), "{summary}");
    }
}
