//! The alerts task: derives conditions from each published decision, from the group's OOM kill count
//! ([`OomWatch`]) and from the guard's own kills ([`KillWatch`]), merges those raised by other parts (the launcher's
//! crashes and crash loops, the stats database), runs the [`Book`](super::engine::Book) and hands notifications to the
//! sinks. It reads every published sample in order ([`Samples`]), so a decision that lasted a single sample is alerted
//! too; it never blocks the sampler.

use super::engine::Book;
use super::kill::KillWatch;
use super::oom::OomWatch;
use super::sinks::{self, SinkHandle};
use super::{names, Condition};
use crate::config::live::Live;
use crate::config::AlertsConfig;
use crate::decision::policy::State;
use crate::feed::{Published, Samples};
use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

/// Raises and clears conditions from outside the sampler (launcher, stats database). Cheap to clone.
#[derive(Clone)]
pub struct Raiser {
    tx: mpsc::UnboundedSender<(String, Option<Condition>)>,
}

impl Raiser {
    /// Sets (Some) or clears (None) the condition known by `key`.
    pub fn set(&self, key: impl Into<String>, cond: Option<Condition>) {
        let _ = self.tx.send((key.into(), cond));
    }
}

/// The conditions that one published sample makes true.
pub(crate) fn conditions(p: &Published, probes_wanted: bool) -> Vec<Condition> {
    let s = &p.snapshot;
    let d = &p.decision;
    let cgroup = s.group.cgroup.display().to_string();
    let usage = |c: Condition| {
        c.annotate("usage_bytes", s.group.usage_bytes.to_string())
            .annotate("limit_bytes", s.group.limit_bytes.to_string())
            .annotate("ratio", format!("{:.3}", d.ratio))
            .annotate("shadow", d.shadow.to_string())
    };
    let mut out = Vec::new();
    if matches!(d.state, State::Refusing | State::Aborting) {
        out.push(usage(Condition::new(names::GROUP_REFUSING).label("cgroup", cgroup.clone()).annotate(
            "summary",
            format!("group memory at {:.1}% of its limit: every process refuses new requests", d.ratio * 100.0),
        )));
    }
    if d.state == State::Aborting {
        let victim = d.victim.and_then(|v| s.processes.iter().find(|p| p.pid == v.pid));
        let mut c = Condition::new(names::GROUP_ABORTING).label("cgroup", cgroup.clone());
        if let Some(v) = victim {
            c = c
                .annotate("victim_pid", v.pid.to_string())
                .annotate("victim_name", v.name.clone())
                .annotate("victim_comm", v.comm.clone())
                .annotate("victim_rss_bytes", v.rss_bytes.to_string())
                .annotate(
                    "summary",
                    format!(
                        "group memory at {:.1}%: {} (pid {}) aborts its in-flight work{}",
                        d.ratio * 100.0,
                        v.name,
                        v.pid,
                        victim_work(p, v.pid).map(|r| format!(": {}", r.summary())).unwrap_or_default()
                    ),
                );
            if let Some(r) = victim_work(p, v.pid) {
                c = c.annotate("victim_requests", r.lines()).annotate("victim_requests_total", r.total.to_string());
            }
        }
        out.push(usage(c));
    }
    out.extend(super::kill::ineffective(p));
    if probes_wanted && !p.probes.enabled {
        out.push(
            Condition::new(names::PROBES_DISABLED)
                .label("cgroup", cgroup.clone())
                .annotate("reason", p.probes.reason.clone().unwrap_or_default())
                .annotate("summary", "request counting (eBPF) is off"),
        );
    }
    if let Some(e) = &p.error {
        out.push(
            Condition::new(names::GROUP_UNREADABLE)
                .label("cgroup", cgroup)
                .annotate("error", e.clone())
                .annotate("summary", format!("the group cannot be read: {e}")),
        );
    }
    out
}

/// Under `monitor run`: the abort victim `pid`'s requests in flight when it was chosen.
fn victim_work(p: &Published, pid: u32) -> Option<&crate::decision::snapshot::VictimRequests> {
    p.victim_requests.as_deref().filter(|r| r.pid == pid)
}

/// The host's name (`/proc/sys/kernel/hostname`), `localhost` when it cannot be read.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// The labels every alert carries besides its own: `[alerts] labels`, `instance` (the host's name) and, in a
/// cluster, `node` (`[cluster] node`), each unless they name it. An alert's own label of the same name wins, as
/// with Prometheus' `external_labels`.
fn fleet_labels(configured: &BTreeMap<String, String>, host: &str, node: Option<&str>) -> BTreeMap<String, String> {
    let mut out = configured.clone();
    out.entry("instance".into()).or_insert_with(|| host.to_string());
    if let Some(n) = node {
        out.entry("node".into()).or_insert_with(|| n.to_string());
    }
    out
}

/// The client of the HTTP sinks: the host's CA store and `[alerts] ca_file`, the credentials of
/// `[alerts] bearer_token_file` or `basic_auth`. An error names the file.
pub fn client(cfg: &AlertsConfig) -> Result<crate::config::client::Client, String> {
    let authorization = cfg.authorization().map_err(|e| format!("[alerts] credentials: {e}"))?;
    crate::config::client::Client::new(cfg.ca_file.as_deref(), authorization.as_deref())
        .map_err(|e| format!("[alerts] {e}"))
}

/// The sinks `cfg` names, started on `tasks`: those sent each batch once, and the Alertmanagers (which also get the
/// firing alerts again every `resend_s`).
fn sinks_of(
    cfg: &AlertsConfig,
    client: &crate::config::client::Client,
    generator_url: &str,
    tasks: &mut JoinSet<()>,
) -> (Vec<SinkHandle>, Vec<SinkHandle>) {
    let mut once: Vec<SinkHandle> = Vec::new();
    if let Some(argv) = &cfg.command {
        once.push(sinks::command(cfg, argv.clone(), generator_url.into(), tasks));
    }
    if let Some(url) = &cfg.webhook {
        let render = sinks::webhook_json;
        once.push(sinks::http("webhook", url.clone(), client.clone(), generator_url.into(), render, tasks));
    }
    let am = cfg
        .all_alertmanagers()
        .iter()
        .map(|base| {
            let url = base.join("/api/v2/alerts");
            sinks::http("alertmanager", url, client.clone(), generator_url.into(), sinks::alertmanager_json, tasks)
        })
        .collect();
    (once, am)
}

/// The sinks of `now` (as [`sinks_of`] made them: `once` and `am`) that `before` did not have: a command or webhook
/// whose target changed, an Alertmanager at a new address. A sink rebuilt with the same target already heard of what
/// fires.
fn added<'a>(
    before: &AlertsConfig,
    now: &AlertsConfig,
    once: &'a [SinkHandle],
    am: &'a [SinkHandle],
) -> Vec<&'a SinkHandle> {
    let mut out = Vec::new();
    let mut once = once.iter();
    if now.command.is_some() {
        out.extend(once.next().filter(|_| now.command != before.command));
    }
    if now.webhook.is_some() {
        let same = now.webhook.as_ref().map(|u| u.to_string()) == before.webhook.as_ref().map(|u| u.to_string());
        out.extend(once.next().filter(|_| !same));
    }
    let old: Vec<String> = before.all_alertmanagers().iter().map(|u| u.to_string()).collect();
    for (s, url) in am.iter().zip(now.all_alertmanagers()) {
        if !old.contains(&url.to_string()) {
            out.push(s);
        }
    }
    out
}

/// Starts the alerts task over the applied config's `[alerts]` (its sinks, labels and timings follow a reload;
/// with no sink the conditions are still followed, so a sink added later hears of those already firing). `client`
/// is the start-up config's ([`client`]); a reload builds its own. The task ends when the samples do, once its
/// sinks have sent what they hold.
pub fn spawn(
    mut config: Live,
    client: crate::config::client::Client,
    mut samples: Samples,
) -> (Raiser, JoinHandle<()>) {
    let (tx, mut ext_rx) = mpsc::unbounded_channel::<(String, Option<Condition>)>();
    let host = hostname();
    let task = tokio::spawn(async move {
        let mut tasks = JoinSet::new();
        let mut applied = config.now();
        // The cluster is read at start only: its node name is the same until the next start.
        let node = applied.cluster.as_ref().map(|c| c.node_name());
        let (mut sinks, mut am) = sinks_of(&applied.alerts, &client, &applied.web.generator_url(), &mut tasks);
        let mut labels = fleet_labels(&applied.alerts.labels, &host, node.as_deref());
        let mut book = Book::new(Duration::from_secs(applied.alerts.quiet_s));
        let mut oom = OomWatch::default();
        let mut kills = KillWatch::default();
        let started = Instant::now();
        let mut external: BTreeMap<String, Condition> = BTreeMap::new();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut resend_tick = tokio::time::interval(Duration::from_secs(applied.alerts.resend_s));
        loop {
            tokio::select! {
                p = samples.next() => if p.is_none() { break },
                Some((key, cond)) = ext_rx.recv() => match cond {
                    Some(c) => { external.insert(key, c); }
                    None => { external.remove(&key); }
                },
                _ = tick.tick() => {}
                _ = resend_tick.tick() => {
                    // Alertmanager expects firing alerts to be re-sent, or it resolves them itself.
                    for a in &am { a.push(book.firing()); }
                    continue;
                }
                cfg = config.next() => {
                    let url = cfg.web.generator_url();
                    if cfg.alerts != applied.alerts || url != applied.web.generator_url() {
                        match self::client(&cfg.alerts) {
                            // The old sinks finish what they hold, then stop.
                            Ok(c) => {
                                (sinks, am) = sinks_of(&cfg.alerts, &c, &url, &mut tasks);
                                // A sink the reload added hears of the alerts already firing, which will not fire
                                // again for it: a decision taken in the same sample as the reload may reach this
                                // task before the new config does.
                                let firing = book.firing();
                                if !firing.is_empty() {
                                    for s in added(&applied.alerts, &cfg.alerts, &sinks, &am) {
                                        s.push(firing.clone());
                                    }
                                }
                            }
                            Err(e) => tracing::error!("{e}: the alert sinks stay as they were"),
                        }
                        labels = fleet_labels(&cfg.alerts.labels, &host, node.as_deref());
                        book.set_quiet(Duration::from_secs(cfg.alerts.quiet_s));
                        if cfg.alerts.resend_s != applied.alerts.resend_s {
                            resend_tick = tokio::time::interval(Duration::from_secs(cfg.alerts.resend_s));
                        }
                    }
                    applied = cfg;
                    continue;
                }
            }
            let mut conds = conditions(samples.latest(), applied.probes.enabled);
            let now_ms = started.elapsed().as_millis() as u64;
            conds.extend(oom.conditions(samples.latest(), now_ms));
            conds.extend(kills.conditions(samples.latest(), now_ms));
            conds.extend(external.values().cloned());
            for c in &mut conds {
                for (k, v) in &labels {
                    c.labels.entry(k.clone()).or_insert_with(|| v.clone());
                }
                let runbook = format!("{}#{}", applied.alerts.runbook_url, c.name.to_lowercase());
                c.annotations.entry("runbook_url".into()).or_insert(runbook);
            }
            let out = book.observe(SystemTime::now(), &conds);
            if out.is_empty() {
                continue;
            }
            for n in &out {
                tracing::info!(alert = %n.labels.get("alertname").map(String::as_str).unwrap_or(""), status = ?n.status, fingerprint = %n.fingerprint, "alert");
            }
            for s in sinks.iter().chain(&am) {
                s.push(out.clone());
            }
            // Sinks replaced by a reload end once they have sent what they held.
            while tasks.try_join_next().is_some() {}
        }
        drop((sinks, am));
        while tasks.join_next().await.is_some() {}
    });
    (Raiser { tx }, task)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The abort alert names the victim's requests in flight when it was chosen, and only the victim's.
    #[test]
    fn the_abort_alert_names_the_victims_requests() {
        use crate::decision::policy::ProcId;
        use crate::decision::snapshot::{InFlight, ProcSample, VictimRequests};
        use std::sync::Arc;
        let mut p = Published::test(State::Aborting);
        p.snapshot.processes = vec![ProcSample::test(7)].into();
        p.decision.victim = Some(ProcId { pid: 7, start_ticks: 70 });
        let heavy = InFlight {
            method: "GET".into(),
            path: "/heavy".into(),
            cache_id: Some("w1.x".into()),
            age_ms: 1500,
            bytes_in: 0,
            bytes_out: 100,
        };
        p.victim_requests = Some(Arc::new(VictimRequests::new(7, 1, vec![heavy])));
        let aborting = |p: &Published| {
            conditions(p, false).into_iter().find(|c| c.name == names::GROUP_ABORTING).expect("the abort alert")
        };
        let c = aborting(&p);
        let ann = |k: &str| c.annotations.get(k).cloned().unwrap_or_default();
        assert!(
            ann("summary").ends_with("aborts its in-flight work: 1 request in flight, the oldest GET /heavy for 1.5 s")
        );
        assert_eq!(ann("victim_requests"), "GET /heavy 1.5 s (in 0 B, out 100 B, cache w1.x)");
        p.victim_requests = Some(Arc::new(VictimRequests::new(8, 1, Vec::new())));
        assert!(!aborting(&p).annotations.contains_key("victim_requests"), "another process's requests are not its");
    }

    #[tokio::test]
    async fn a_reload_tells_only_the_sinks_it_added_what_fires() {
        let mut tasks = JoinSet::new();
        let c = client(&AlertsConfig::default()).expect("a client");
        let url = |u: &str| u.parse::<crate::config::HttpUrl>().expect("a URL");
        let before = AlertsConfig {
            command: Some(vec!["hook-a".into()]),
            webhook: Some(url("http://127.0.0.1:9/a")),
            alertmanager: Some(url("http://127.0.0.1:9093")),
            ..AlertsConfig::default()
        };
        let count = |now: &AlertsConfig, tasks: &mut JoinSet<()>| {
            let (once, am) = sinks_of(now, &c, "", tasks);
            added(&before, now, &once, &am).len()
        };
        // Rebuilt with the same targets (another timeout): nothing is told twice.
        assert_eq!(count(&AlertsConfig { command_timeout_s: 3, ..before.clone() }, &mut tasks), 0);
        // A new command and a new Alertmanager; the webhook is the same.
        let now = AlertsConfig {
            command: Some(vec!["hook-b".into()]),
            alertmanagers: vec![url("http://127.0.0.1:9094")],
            ..before.clone()
        };
        assert_eq!(count(&now, &mut tasks), 2);
        // Added where there was none.
        let bare = AlertsConfig::default();
        let (once, am) = sinks_of(&before, &c, "", &mut tasks);
        assert_eq!(added(&bare, &before, &once, &am).len(), 3);
        assert_eq!(added(&before, &bare, &[], &[]).len(), 0);
    }

    #[test]
    fn every_alert_names_its_host_unless_the_config_does() {
        let mut configured = BTreeMap::new();
        configured.insert("team".to_string(), "storage".to_string());
        let l = fleet_labels(&configured, "db-7", None);
        assert_eq!(l.get("instance").map(String::as_str), Some("db-7"));
        assert_eq!(l.get("team").map(String::as_str), Some("storage"));
        assert_eq!(l.get("node"), None, "no cluster, no node label");
        configured.insert("instance".to_string(), "db-7.prod".to_string());
        assert_eq!(fleet_labels(&configured, "db-7", None).get("instance").map(String::as_str), Some("db-7.prod"));
        // In a cluster every alert names its node, unless the config's labels do.
        assert_eq!(fleet_labels(&configured, "db-7", Some("a")).get("node").map(String::as_str), Some("a"));
        configured.insert("node".to_string(), "a-prod".to_string());
        assert_eq!(fleet_labels(&configured, "db-7", Some("a")).get("node").map(String::as_str), Some("a-prod"));
        assert!(!hostname().is_empty());
    }
}
