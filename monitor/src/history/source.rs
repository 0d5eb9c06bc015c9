//! The home page's data: the latest sample (header, status strip), the history's series, kills and recycles, as
//! `web`'s plain view types. Its revision is the latest sample's: one render answers every request until the next
//! sample.

use super::{query, History};
use crate::base::units::unix_ms as now_ms;
use crate::decision::policy::ProcId;
use std::sync::OnceLock;
use std::time::Instant;
use web::{BrakeNow, Dashboard, GroupNow, ProcessStatus, Range, Source};

impl Source for History {
    /// Back to the oldest minute kept (from the stats database too) or second, whichever is older.
    fn held_seconds(&self) -> Option<u64> {
        let inner = self.lock();
        let oldest =
            [inner.minutes.front().map(|m| m.t), inner.seconds.front().map(|s| s.t)].into_iter().flatten().min()?;
        Some((now_ms() / 1000).saturating_sub(oldest))
    }

    /// The latest sample's wake-up, in nanoseconds since the first call: it moves with every sample published,
    /// failed ones too (whose snapshot, and so whose `seq`, is the last good one).
    fn revision(&self) -> Option<u64> {
        static BASE: OnceLock<Instant> = OnceLock::new();
        let base = *BASE.get_or_init(Instant::now);
        Some(self.latest().wake.at.saturating_duration_since(base).as_nanos() as u64)
    }

    fn dashboard(&self, range: Range, buckets: usize) -> Dashboard {
        let p = self.latest();
        let t = p.thresholds.clone();
        let s = &p.snapshot;
        let d = &p.decision;
        let launched = self.launched();
        let named = self.names(&p);
        let restarts: std::collections::HashMap<String, u64> = self.restarts().into_iter().collect();
        let mut processes: Vec<ProcessStatus> = s
            .processes
            .iter()
            .zip(&named)
            .map(|(x, (name, role))| {
                let id = ProcId { pid: x.pid, start_ticks: x.start_ticks };
                let launched_restarts = launched.iter().find(|m| &m.name == name).map(|m| m.restarts as u64);
                ProcessStatus {
                    name: name.clone(),
                    role: role.clone(),
                    pid: Some(x.pid),
                    state: d.action_for(id).as_str().into(),
                    rss_bytes: x.rss_bytes,
                    anon_bytes: x.anon_bytes,
                    requests_total: x.traffic.requests_total,
                    restarts: launched_restarts.unwrap_or_else(|| restarts.get(name).copied().unwrap_or(0)),
                    next_retry: None,
                }
            })
            .collect();
        let now = now_ms();
        // Launched processes that are not running now (backing off, starting) still get a line.
        for m in launched.iter().filter(|m| !named.iter().any(|(n, _)| n == &m.name)) {
            processes.push(ProcessStatus {
                name: m.name.clone(),
                role: m.role.to_string(),
                pid: m.pid,
                state: m.state.to_string(),
                rss_bytes: 0,
                anon_bytes: 0,
                requests_total: 0,
                restarts: m.restarts as u64,
                next_retry: m.next_retry_unix_ms.map(|at| format!("in {:.0} s", at.saturating_sub(now) as f64 / 1e3)),
            });
        }
        let mut notes: Vec<String> = self.note().into_iter().collect();
        if let Some(e) = &p.error {
            notes.push(format!("the latest sample failed (values are from the last good one): {e}"));
        }
        // The lock is held only to copy the pointers: the sample consumer, on the async runtime, takes it too.
        let (seconds, minutes, labels, kills, recycles) = {
            let inner = self.lock();
            let i = &*inner;
            (i.seconds.clone(), i.minutes.clone(), i.labels.clone(), i.kills.clone(), i.recycles.clone())
        };
        let mut series = query::series(&seconds, &minutes, &labels, now, range, buckets);
        series.kills = query::kills(&kills, &series);
        series.recycles = query::recycles(&recycles, &series);
        Dashboard {
            now_ms: now,
            range,
            group: GroupNow {
                cgroup: s.group.cgroup.display().to_string(),
                usage_bytes: s.group.usage_bytes,
                limit_bytes: s.group.limit_bytes,
                limit_source: s.group.limit_source.to_string(),
                ratio: d.ratio,
                state: d.state.as_str().into(),
                refuse_at: t.refuse_at,
                abort_at: t.abort_at,
                shadow: d.shadow,
                probes: match (&p.probes.enabled, &p.probes.reason) {
                    (true, _) => "counting requests".into(),
                    (false, Some(r)) => format!("off ({r})"),
                    (false, None) => "off".into(),
                },
                oom_kills: s.group.oom_kills,
                wakeups: p.wakeups.armed.clone(),
                wakeups_off: p.wakeups.off.iter().map(|o| format!("{}: {}", o.source, o.reason)).collect(),
                next_sample_ms: p.next_sample_ms,
                brake: p.brake.as_ref().map(|b| BrakeNow {
                    at: b.at,
                    high_bytes: b.high_bytes,
                    error: b.error.clone(),
                }),
                processes_unsampled: s.group.processes_unsampled(),
                unattributed_bytes: s.group.unattributed_bytes,
                unseen: d.unseen,
                victim_requests: p.victim_requests.as_deref().map(|r| web::view::VictimRequestsNow {
                    pid: r.pid,
                    summary: r.summary(),
                    lines: r.lines().lines().map(str::to_string).collect(),
                }),
            },
            processes,
            series,
            notes,
            peers: self.inputs.peers.as_ref().map(|f| f()).unwrap_or_default(),
            clock: false,
            routes: route_growth(self.growth().unwrap_or_default()),
        }
    }
}

/// The route keys for the page, the largest p99 growth first (then the most requests).
fn route_growth(totals: super::store::RouteRows) -> Vec<web::RouteGrowth> {
    super::store::ranked(totals)
        .into_iter()
        .map(|(route, k, (p99_bytes, p99_exact))| web::RouteGrowth {
            route,
            count: k.count,
            exact: k.exact.count(),
            p99_bytes,
            p99_exact,
            at_abort: k.at_abort,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::policy::State;
    use crate::feed::Published;
    use std::sync::Arc;

    #[test]
    fn the_page_gets_the_oom_kills_the_wakeups_and_the_brake() {
        let p = Published::test(State::Normal).reacting(
            1,
            &["events", "pressure"],
            ("thresholds", "cgroup v1 only"),
            503_316_480,
            40,
        );
        let (_tx, latest) = tokio::sync::watch::channel(Arc::new(p));
        let h = History::new(latest, Default::default());
        let g = h.dashboard(Range::FiveMinutes, 10).group;
        assert_eq!(g.oom_kills, Some(1));
        assert_eq!(g.wakeups, ["events", "pressure"]);
        assert_eq!(g.wakeups_off, ["thresholds: cgroup v1 only"]);
        assert_eq!(g.next_sample_ms, 40);
        assert_eq!(g.brake, Some(BrakeNow { at: 0.96, high_bytes: Some(503_316_480), error: None }));
    }
}
