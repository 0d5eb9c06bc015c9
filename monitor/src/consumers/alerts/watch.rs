//! Conditions raised from outside the sampler, by polling once a second: the launcher's processes (a crash and
//! its restart; a crash loop, when the backoff has reached its cap; a running process failing its health checks,
//! out of the front door's pool), the stats database (not persisting) and, under `[cluster]`, the members (one
//! suspect or dead: its caches cannot be reached).

use super::task::Raiser;
use super::{names, Condition};
use crate::base::units::unix_ms as now_ms;
use crate::feed::{LauncherInfo, Phase};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// A backoff delay at or above this is the cap (60 s; the step below it is 32 s).
const CAP_FROM_MS: u64 = 59_000;

/// What one poll of the launcher makes true. `loop_since` remembers, per process, that the current backoff is at
/// its cap (set when it enters backing-off with a capped delay, cleared when it is ready again).
pub(crate) fn launcher_conditions(
    infos: &[LauncherInfo],
    now_ms: u64,
    capped: &mut HashMap<String, bool>,
) -> Vec<(String, Option<Condition>)> {
    let mut out = Vec::new();
    for i in infos {
        let down = i.state == Phase::BackingOff || (i.state == Phase::Starting && i.restarts > 0);
        let restart_key = format!("restart/{}", i.name);
        out.push((
            restart_key,
            down.then(|| {
                Condition::new(names::PROCESS_RESTARTING)
                    .label("process", i.name.clone())
                    .label("role", i.role.as_str())
                    .annotate("restarts", i.restarts.to_string())
                    .annotate("state", i.state.as_str())
                    .annotate("summary", format!("{} ({}) exited and is being restarted", i.name, i.role))
            }),
        ));
        out.push((
            format!("unhealthy/{}", i.name),
            (i.state == Phase::Unhealthy).then(|| {
                Condition::new(names::PROCESS_UNHEALTHY)
                    .label("process", i.name.clone())
                    .label("role", i.role.as_str())
                    .annotate("pid", i.pid.map(|p| p.to_string()).unwrap_or_default())
                    .annotate(
                        "summary",
                        format!(
                            "{} ({}) is running but fails its health checks: out of the front door's pool",
                            i.name, i.role
                        ),
                    )
            }),
        ));
        let at_cap = capped.entry(i.name.clone()).or_insert(false);
        if i.state == Phase::Ready {
            *at_cap = false;
        } else if matches!(i.state, Phase::BackingOff | Phase::Killed) {
            if let Some(next) = i.next_retry_unix_ms {
                if next.saturating_sub(now_ms) >= CAP_FROM_MS {
                    *at_cap = true;
                }
            }
        }
        let loop_key = format!("crashloop/{}", i.name);
        out.push((
            loop_key,
            at_cap.then(|| {
                Condition::new(names::PROCESS_CRASH_LOOP)
                    .label("process", i.name.clone())
                    .label("role", i.role.as_str())
                    .annotate("restarts", i.restarts.to_string())
                    .annotate("summary", format!("{} keeps crashing: restart backoff is at its 60 s cap", i.name))
            }),
        ));
    }
    out
}

/// Polls the launcher's view every second and raises or clears restart and crash-loop conditions.
pub async fn launcher(door: crate::feed::Door, raiser: Raiser) {
    let mut capped = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        for (key, cond) in launcher_conditions(&door.launched(), now_ms(), &mut capped) {
            raiser.set(key, cond);
        }
    }
}

/// What the membership makes true: for each other member, `MonitorClusterMemberDown` while it is suspect or dead
/// (requests for its caches get 503), cleared when it is alive again or has left (a leave is not an incident).
pub(crate) fn cluster_conditions(members: &crate::cluster::Members) -> Vec<(String, Option<Condition>)> {
    use crate::cluster::State;
    members
        .iter()
        .filter(|m| !m.this)
        .map(|m| {
            // The member's name and processes are what its datagrams said: escaped for the alert's text.
            let esc = |s: &str| crate::base::text::escape_controls(s).into_owned();
            let (name, processes) = (esc(&m.id.name), m.id.processes.iter().map(|p| esc(p)).collect::<Vec<_>>());
            let down = matches!(m.state, State::Suspect | State::Dead).then(|| {
                Condition::new(names::CLUSTER_MEMBER_DOWN)
                    .label("member", name.clone())
                    .annotate("state", m.state.as_str())
                    .annotate("gossip", m.id.gossip.to_string())
                    .annotate("processes", processes.join(","))
                    .annotate(
                        "summary",
                        format!(
                            "cluster member {name} is {}: requests for its caches ({}) cannot be served",
                            m.state.as_str(),
                            processes.join(", ")
                        ),
                    )
            });
            (format!("cluster/{}", m.id.name), down)
        })
        .collect()
}

/// Raises and clears the members' conditions at each change of the membership.
pub async fn cluster(mut view: tokio::sync::watch::Receiver<Arc<crate::cluster::Members>>, raiser: Raiser) {
    loop {
        let now = view.borrow_and_update().clone();
        for (key, cond) in cluster_conditions(&now) {
            raiser.set(key, cond);
        }
        if view.changed().await.is_err() {
            return;
        }
    }
}

/// Polls the stats database's note (Some = not persisting, and why) every second.
pub async fn stats(note: Arc<dyn Fn() -> Option<String> + Send + Sync>, raiser: Raiser) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let cond = note().map(|why| {
            Condition::new(names::STATS_DATABASE_FAILING)
                .annotate("error", why.clone())
                .annotate("summary", format!("the stats database is not written: {why}"))
        });
        raiser.set("stats", cond);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(state: Phase, restarts: u32, next: Option<u64>) -> LauncherInfo {
        LauncherInfo {
            name: "tx1".into(),
            role: crate::config::Role::Worker,
            port: 3002,
            pid: None,
            state,
            next_retry_unix_ms: next,
            restarts,
        }
    }

    fn names(v: &[(String, Option<Condition>)]) -> Vec<String> {
        v.iter().filter_map(|(_, c)| c.as_ref().map(|c| c.name.clone())).collect()
    }

    #[test]
    fn a_member_down_while_suspect_or_dead_and_not_when_it_left() {
        use crate::cluster::{Members, NodeId, State};
        let node = |name: &str, ip: u8| NodeId {
            name: name.into(),
            gossip: std::net::SocketAddr::from(([127, 0, 0, ip], 7946)),
            front: std::net::SocketAddr::from(([127, 0, 0, ip], 8080)),
            web: std::net::SocketAddr::from(([127, 0, 0, ip], 9464)),
            processes: vec![format!("{name}0")],
            started_ms: 1,
            generation: 0,
        };
        let (b, c) = (node("b", 3), node("c", 4));
        let mut m = Members::new(node("a", 2));
        let none = std::collections::HashSet::new();
        // (b's state, c's state, the members down)
        let steps = [
            (State::Alive, State::Alive, vec![]),
            (State::Suspect, State::Alive, vec!["b"]),
            (State::Dead, State::Alive, vec!["b"]),
            (State::Alive, State::Dead, vec!["c"]),
        ];
        for (sb, sc, want) in steps {
            m.update([(&b, sb), (&c, sc)], &none);
            let got = cluster_conditions(&m);
            assert_eq!(got.len(), 2, "one key per other member: {got:?}");
            let down: Vec<String> =
                got.iter().filter_map(|(_, c)| c.as_ref()).map(|c| c.labels["member"].clone()).collect();
            assert_eq!(down, want, "b {sb:?}, c {sc:?}");
        }
        let left = std::collections::HashSet::from([("c".to_string(), 1)]);
        m.update([(&c, State::Dead)], &left);
        assert!(cluster_conditions(&m).iter().all(|(_, c)| c.is_none()), "c left: no incident");
        let one = cluster_conditions(&Members::new(node("a", 2)));
        assert!(one.is_empty(), "alone: nothing to raise");
    }

    #[test]
    fn unhealthy_while_it_fails_its_checks() {
        let mut capped = HashMap::new();
        let v = launcher_conditions(&[info(Phase::Unhealthy, 0, None)], 0, &mut capped);
        assert_eq!(names(&v), vec!["MonitorProcessUnhealthy"]);
        let v = launcher_conditions(&[info(Phase::Ready, 0, None)], 0, &mut capped);
        assert!(names(&v).is_empty());
    }

    #[test]
    fn crash_restart_and_crash_loop() {
        let mut capped = HashMap::new();
        assert!(names(&launcher_conditions(&[info(Phase::Ready, 0, None)], 0, &mut capped)).is_empty());
        let v = launcher_conditions(&[info(Phase::BackingOff, 1, Some(1_000))], 0, &mut capped);
        assert_eq!(names(&v), vec!["MonitorProcessRestarting"]);
        assert_eq!(names(&launcher_conditions(&[info(Phase::Starting, 1, None)], 1_000, &mut capped)).len(), 1);
        // The backoff reaches the cap: a crash loop, held while it keeps failing, even as the wait runs down.
        let v = launcher_conditions(&[info(Phase::BackingOff, 7, Some(70_000))], 10_000, &mut capped);
        assert_eq!(names(&v), vec!["MonitorProcessRestarting", "MonitorProcessCrashLoop"]);
        let v = launcher_conditions(&[info(Phase::Starting, 7, None)], 71_000, &mut capped);
        assert_eq!(names(&v), vec!["MonitorProcessRestarting", "MonitorProcessCrashLoop"]);
        // Ready again: both clear.
        assert!(names(&launcher_conditions(&[info(Phase::Ready, 7, None)], 80_000, &mut capped)).is_empty());
    }
}
