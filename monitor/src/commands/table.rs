//! `monitor status` as text: the group line and a table of its processes; with `--cluster`, one row per member of
//! the cluster from each one's own status.

use crate::base::text::{controls_but_newlines, controls_only as esc};
use crate::base::units::size;
use crate::config::live::ReloadResult;
use crate::view::StatusView;
use std::fmt::Write;

/// The kernel's OOM kills, the wake-ups with the paced interval, and the brake when it is on.
fn kernel_lines(s: &mut String, v: &StatusView) {
    let g = &v.group;
    let oom = match g.oom_kills {
        Some(0) => "none".to_string(),
        Some(n) => format!("{n} (processes of the group killed by the kernel's OOM killer)"),
        None => "not counted by this kernel".to_string(),
    };
    let _ = writeln!(s, "oom      {oom}");
    let mut unseen = format!("{} beyond the sampled processes", size(g.unattributed_bytes));
    if g.processes_unsampled > 0 {
        let _ = write!(unseen, "; {} of {} listed processes not sampled", g.processes_unsampled, g.processes_listed);
    }
    if v.policy.unseen {
        unseen.push_str("; the memory over the abort line is there: the last resort holds off");
    }
    let _ = writeln!(s, "unseen   {unseen}");
    let mut wake = if g.wakeups.is_empty() { "timer only".to_string() } else { g.wakeups.join(", ") };
    for off in &g.wakeups_off {
        let _ = write!(wake, "; {} off ({})", off.source, off.reason);
    }
    if g.next_sample_ms > 0 {
        let _ = write!(wake, "; next sample in {} ms", g.next_sample_ms);
    }
    let _ = writeln!(s, "wake-ups {wake}");
    if let Some(b) = &g.brake {
        let state = match (b.high_bytes, &b.error) {
            (Some(h), _) => format!("memory.high {} ({:.0}% of the limit; was {})", size(h), b.at * 100.0, b.previous),
            (None, Some(e)) => format!("not set at {:.0}%: {e}", b.at * 100.0),
            (None, None) => format!("not set at {:.0}%", b.at * 100.0),
        };
        let _ = writeln!(s, "brake    {state}");
    }
}

/// The config's last reload, when it left something to do: a file refused, keys waiting for a restart.
fn config_lines(s: &mut String, v: &StatusView) {
    let Some(c) = &v.config else { return };
    if let (Some(ReloadResult::Failed), Some(e)) = (c.last_reload, &c.error) {
        let _ = writeln!(s, "config   reload failed, the previous config runs: {e}");
    }
    if !c.restart_needed.is_empty() {
        let _ =
            writeln!(s, "config   changed in the file, applied at the next restart: {}", c.restart_needed.join(", "));
    }
}

/// Renders a status document as a text table. The agent's strings are its own (the process names escaped where
/// they were read), a member's may be anything: each outside string is escaped, and what the table holds besides
/// its line breaks is, once more, before it is printed.
pub fn render(v: &StatusView) -> String {
    controls_but_newlines(&table(v)).into_owned()
}

fn table(v: &StatusView) -> String {
    let g = &v.group;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "group    {} (cgroup {})\nmemory   {} of {} ({:.1}%, limit from {})\npolicy   {}{} (refuse at {:.0}%, abort at {:.0}%)",
        g.cgroup.display(),
        g.version,
        size(g.usage_bytes),
        size(g.limit_bytes),
        g.ratio * 100.0,
        g.limit_source,
        v.policy.state,
        if v.policy.shadow { ", shadow: nothing enforced" } else { "" },
        v.policy.refuse_at * 100.0,
        v.policy.abort_at * 100.0,
    );
    if let Some(e) = &g.error {
        let _ = writeln!(s, "error    {e}");
    }
    let probes = match (&v.probes.enabled, &v.probes.reason) {
        (true, _) => match &v.probes.hooks {
            Some(h) => format!("on ({h})"),
            None => "on".to_string(),
        },
        (false, Some(r)) => format!("off ({r})"),
        (false, None) => "off".to_string(),
    };
    let _ = writeln!(s, "probes   {probes}");
    kernel_lines(&mut s, v);
    config_lines(&mut s, v);
    s.push('\n');
    let _ = writeln!(
        s,
        "{:>8}  {:<16} {:<8} {:>12} {:>12}  {:<7} {:>9} {:>8} {:>8} {:>5}",
        "PID", "NAME", "ROLE", "RSS", "ANON", "ACTION", "REQUESTS", "INFLIGHT", "RESTARTS", "KILLS"
    );
    for p in &v.processes {
        // Under `monitor run` a process is shown by its name in the config (m0, tx1), else by its command name.
        let launched = v.launcher.iter().flatten().find(|l| l.pid == Some(p.pid)).map(|l| l.name.as_str());
        let name: String =
            launched.unwrap_or(&p.name).chars().map(|c| if c.is_control() { '?' } else { c }).take(16).collect();
        let _ = writeln!(
            s,
            "{:>8}  {:<16} {:<8} {:>12} {:>12}  {:<7} {:>9} {:>8} {:>8} {:>5}",
            p.pid,
            name,
            p.role,
            size(p.rss_bytes),
            size(p.anon_bytes),
            p.action,
            p.requests_total,
            p.inflight,
            p.restarts,
            p.kills
        );
    }
    if v.processes.is_empty() {
        let _ = writeln!(s, "(no processes in the group)");
    }
    // Launched processes that are not running now (starting, backing off, stopped).
    let now_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    for l in v.launcher.iter().flatten().filter(|l| l.pid.is_none_or(|pid| !v.processes.iter().any(|p| p.pid == pid))) {
        let retry = l
            .next_retry_unix_ms
            .map(|t| format!(", next start in {:.1} s", t.saturating_sub(now_ms) as f64 / 1000.0))
            .unwrap_or_default();
        let _ = writeln!(s, "{:>8}  {:<16} {:<8} {}{retry}, restarts {}", "-", l.name, l.role, l.state, l.restarts);
    }
    if let Some(k) = last_kill(v, now_ms) {
        let _ = writeln!(s, "\n{k}");
    }
    s
}

/// The last resort's latest kill in a line, `now_ms` being the time of the reading (None when it killed nothing).
fn last_kill(v: &StatusView, now_ms: u64) -> Option<String> {
    let k = v.kills.last()?;
    let name: String = k.name.chars().map(|c| if c.is_control() { '?' } else { c }).take(32).collect();
    let ago = ago(now_ms.saturating_sub(k.unix_ms));
    let who = format!("{name} (pid {})", k.pid);
    let mut line = match (&k.error, k.enforced) {
        (_, false) => format!("shadow: would have killed {who} {ago} (not enforced): {}", esc(&k.reason)),
        (Some(e), true) => format!("kill of {who} not sent {ago} ({}): {}", esc(e), esc(&k.reason)),
        (None, true) => format!("killed {who} {ago}: {}", esc(&k.reason)),
    };
    if v.policy.kills_halted {
        line.push_str("\nkills halted: three kills did not bring the group below abort_at");
    }
    Some(line)
}

/// `3 s ago`, `4 min ago`, `2 h ago`.
fn ago(ms: u64) -> String {
    match ms / 1000 {
        s if s < 120 => format!("{s} s ago"),
        s if s < 7200 => format!("{} min ago", s / 60),
        s => format!("{} h ago", s / 3600),
    }
}

/// `monitor status --cluster`: one row per member, from the cluster view of the node asked and each member's own
/// status (`Err`: why it could not be had). A member whose status is missing shows its state only, and why after
/// the table.
pub fn render_cluster(
    view: &crate::cluster::api::ClusterView,
    statuses: &[(String, Result<StatusView, String>)],
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "cluster  seen from {}, {} members\n", esc(&view.node), view.members.len());
    let _ = writeln!(
        s,
        "{:<16} {:<8} {:>12} {:>12} {:>7}  {:<9} {:>5} {:>9} {:>8}  FRONT",
        "NODE", "STATE", "MEMORY", "LIMIT", "RATIO", "POLICY", "PROCS", "REQUESTS", "INFLIGHT"
    );
    let mut notes = Vec::new();
    for m in &view.members {
        let node: String = m.node.chars().map(|c| if c.is_control() { '?' } else { c }).take(16).collect();
        let state = if m.this { format!("{}*", m.state.as_str()) } else { m.state.as_str().to_string() };
        match statuses.iter().find(|(n, _)| *n == m.node).map(|(_, st)| st) {
            Some(Ok(v)) => {
                let requests: u64 = v.processes.iter().map(|p| p.requests_total).sum();
                let inflight: u64 = v.processes.iter().map(|p| p.inflight).sum();
                let _ = writeln!(
                    s,
                    "{:<16} {:<8} {:>12} {:>12} {:>6.1}%  {:<9} {:>5} {:>9} {:>8}  {}",
                    node,
                    state,
                    size(v.group.usage_bytes),
                    size(v.group.limit_bytes),
                    v.group.ratio * 100.0,
                    v.policy.state.to_string(),
                    v.processes.len(),
                    requests,
                    inflight,
                    m.front
                );
            }
            other => {
                let _ = writeln!(
                    s,
                    "{:<16} {:<8} {:>12} {:>12} {:>7}  {:<9} {:>5} {:>9} {:>8}  {}",
                    node, state, "-", "-", "-", "-", "-", "-", "-", m.front
                );
                if let Some(Err(e)) = other {
                    notes.push(format!("{}: {}", esc(&m.node), esc(e)));
                }
            }
        }
    }
    if !notes.is_empty() {
        s.push('\n');
        for n in notes {
            let _ = writeln!(s, "{n}");
        }
    }
    controls_but_newlines(&s).into_owned()
}

/// `monitor status --cluster` from a node's `/api/v1/cluster/fleet`: one row per member with the figures it last
/// answered, the fleet's sums, and below the table why a member's figures are not current.
pub fn render_fleet(f: &web::view::Fleet) -> String {
    let mut s = String::new();
    let t = &f.total;
    let _ = writeln!(s, "cluster  seen from {}, {} members, {} answering\n", esc(&f.node), t.nodes, t.answering);
    let _ = writeln!(
        s,
        "{:<16} {:<8} {:>12} {:>12} {:>7}  {:<9} {:>5} {:>5} {:>9} {:>8} {:>7}  FRONT",
        "NODE", "STATE", "MEMORY", "LIMIT", "RATIO", "POLICY", "PROCS", "READY", "REQUESTS", "INFLIGHT", "SHED"
    );
    let mut notes = Vec::new();
    for p in &f.nodes {
        let node: String = p.node.chars().map(|c| if c.is_control() { '?' } else { c }).take(16).collect();
        let state = if p.this { format!("{}*", esc(&p.state)) } else { esc(&p.state).into_owned() };
        fleet_row(&mut s, &node, &state, p.figures.as_ref(), &esc(p.front.as_deref().unwrap_or("-")));
        if p.stale() {
            let since = p.no_answer_s.map(|n| format!("no answer since {n:.0} s: ")).unwrap_or_default();
            notes.push(format!("{}: {since}{}", esc(&p.node), esc(p.error.as_deref().unwrap_or("not asked"))));
        }
    }
    fleet_row(&mut s, "fleet", "", (t.answering > 0).then_some(&t.figures), "");
    if !notes.is_empty() {
        s.push('\n');
        for n in notes {
            let _ = writeln!(s, "{n}");
        }
    }
    controls_but_newlines(&s).into_owned()
}

/// Whether every live member of `f` has been asked (it has figures, or an error): until then `monitor status
/// --cluster` asks the members itself.
pub fn fleet_complete(f: &web::view::Fleet) -> bool {
    f.nodes.iter().all(|p| p.figures.is_some() || p.stale() || !matches!(p.state.as_str(), "alive" | "suspect"))
}

/// One row of [`render_fleet`]; `-` where there are no figures.
fn fleet_row(s: &mut String, node: &str, state: &str, f: Option<&web::view::Figures>, front: &str) {
    let Some(f) = f else {
        let _ = writeln!(
            s,
            "{:<16} {:<8} {:>12} {:>12} {:>7}  {:<9} {:>5} {:>5} {:>9} {:>8} {:>7}  {front}",
            node, state, "-", "-", "-", "-", "-", "-", "-", "-", "-"
        );
        return;
    };
    let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    let line = format!(
        "{:<16} {:<8} {:>12} {:>12} {:>6.1}%  {:<9} {:>5} {:>5} {:>9} {:>8} {:>7}  {front}",
        node,
        state,
        size(f.usage_bytes),
        size(f.limit_bytes),
        f.ratio * 100.0,
        esc(&f.policy),
        f.processes,
        opt(f.ready),
        f.requests_total,
        f.inflight,
        opt(f.shed_total),
    );
    let _ = writeln!(s, "{}", line.trim_end());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::units::count;
    use crate::decision::policy::{State, Thresholds};
    use crate::feed::Published;

    fn line<'a>(text: &'a str, head: &str) -> Option<&'a str> {
        text.lines().find_map(|l| l.strip_prefix(head)).map(str::trim)
    }

    #[test]
    fn the_cluster_table_has_a_row_per_member_and_says_why_one_is_missing() {
        use crate::cluster::api::ClusterView;
        let view: ClusterView = serde_json::from_value(serde_json::json!({
            "node": "a",
            "members": [
                {"node": "a", "state": "alive", "gossip": "10.0.0.5:7946", "front": "10.0.0.5:8080",
                 "web": "10.0.0.5:9464", "processes": ["am0"], "last_heard_s": 0.0, "self": true,
                 "started_ms": 1, "load": null},
                {"node": "b", "state": "suspect", "gossip": "10.0.0.6:7946", "front": "10.0.0.6:8080",
                 "web": "10.0.0.6:9464", "processes": ["bm0"], "last_heard_s": 4.0, "self": false,
                 "started_ms": 1, "load": null},
                {"node": "c", "state": "left", "gossip": "10.0.0.7:7946", "front": "10.0.0.7:8080",
                 "web": "10.0.0.7:9464", "processes": ["cm0"], "last_heard_s": null, "self": false,
                 "started_ms": 1, "load": null}
            ]
        }))
        .expect("a cluster view");
        let p = Published::test(State::Refusing);
        let a = crate::view::status_view(&p, &Thresholds::default());
        let statuses = vec![("a".to_string(), Ok(a)), ("b".to_string(), Err("no answer within 3 s".to_string()))];
        let text = render_cluster(&view, &statuses);
        let row = |node: &str| text.lines().find(|l| l.starts_with(&format!("{node} "))).unwrap_or_default();
        assert!(text.starts_with("cluster  seen from a, 3 members"), "{text}");
        let a = row("a");
        assert!(a.contains("alive*") && a.contains("refusing") && a.ends_with("10.0.0.5:8080"), "{text}");
        assert!(a.contains('%'), "{text}");
        let b = row("b");
        assert!(b.contains("suspect") && b.contains(" - ") && b.ends_with("10.0.0.6:8080"), "{text}");
        assert!(row("c").contains("left"), "{text}");
        assert!(text.lines().any(|l| l == "b: no answer within 3 s"), "{text}");
        assert!(!text.lines().any(|l| l.starts_with("c:")), "a member that left is not asked: {text}");
    }

    #[test]
    fn the_fleet_table_has_a_row_per_member_the_sums_and_why_one_is_not_current() {
        let fleet: web::view::Fleet = serde_json::from_value(serde_json::json!({
            "node": "a",
            "nodes": [
                {"node": "a", "state": "alive", "url": "http://10.0.0.5:9464/", "memory_ratio": 0.25,
                 "policy": "normal", "this": true, "front": "10.0.0.5:8080", "figures_age_s": 0.5,
                 "figures": {"usage_bytes": 268435456u64, "limit_bytes": 1073741824u64, "ratio": 0.25,
                             "policy": "normal", "processes": 2, "ready": 2, "requests_total": 90,
                             "requests_per_s": 4.5, "inflight": 1, "shed_total": 3}},
                {"node": "b", "state": "suspect", "url": "http://10.0.0.6:9464/", "memory_ratio": null,
                 "policy": null, "this": false, "front": "10.0.0.6:8080", "no_answer_s": 4.2,
                 "error": "connecting to 10.0.0.6:9464: Connection refused"}
            ],
            "total": {"nodes": 2, "answering": 1,
                      "figures": {"usage_bytes": 268435456u64, "limit_bytes": 1073741824u64, "ratio": 0.25,
                                  "policy": "normal", "processes": 2, "ready": 2, "requests_total": 90,
                                  "requests_per_s": 4.5, "inflight": 1, "shed_total": 3}}
        }))
        .expect("a fleet document");
        let text = render_fleet(&fleet);
        let row = |node: &str| text.lines().find(|l| l.starts_with(&format!("{node} "))).unwrap_or_default();
        assert!(text.starts_with("cluster  seen from a, 2 members, 1 answering"), "{text}");
        let a: Vec<&str> = row("a").split_whitespace().collect();
        let want = ["a", "alive*", "256.0", "MiB", "1.00", "GiB", "25.0%", "normal", "2", "2", "90", "1", "3"];
        assert_eq!(a, [&want[..], &["10.0.0.5:8080"]].concat());
        assert!(row("b").contains("suspect") && row("b").contains(" - "), "{text}");
        assert!(row("b").ends_with("10.0.0.6:8080"), "{text}");
        assert!(row("fleet").contains("256.0 MiB") && row("fleet").ends_with(" 3"), "{text}");
        assert!(fleet_complete(&fleet), "b was asked: it has an error");
        let mut unasked = fleet.clone();
        unasked.nodes[1].no_answer_s = None;
        unasked.nodes[1].error = None;
        assert!(!fleet_complete(&unasked), "b is live and was not asked yet");
        unasked.nodes[1].state = "dead".into();
        assert!(fleet_complete(&unasked), "a dead member is not asked");
        assert!(
            text.lines().any(|l| l == "b: no answer since 4 s: connecting to 10.0.0.6:9464: Connection refused"),
            "{text}"
        );
    }

    #[test]
    fn sizes_and_counts_read_naturally() {
        assert_eq!(size(512 << 20), "512.0 MiB");
        assert_eq!(size(1023 << 20), "1023.0 MiB");
        assert_eq!(size(3 << 29), "1.50 GiB");
        assert_eq!(
            (count(1, "minute"), count(0, "minute"), count(2, "minute")),
            ("1 minute".into(), "0 minutes".into(), "2 minutes".into())
        );
    }

    #[test]
    fn oom_kills_wakeups_and_the_brake_are_shown() {
        let mut p = Published::test(State::Normal);
        p.snapshot.group.oom_kills = Some(1);
        p.wakeups = std::sync::Arc::new(crate::feed::WakeupStatus {
            armed: vec!["thresholds".into()],
            off: vec![crate::feed::WakeupOff { source: "events".into(), reason: "cgroup v2 only".into() }],
            pacing: true,
        });
        p.brake = Some(
            serde_json::from_value(serde_json::json!({
                "at": 0.96, "high_bytes": 503_316_480u64, "previous": "max", "error": null
            }))
            .expect("a brake status"),
        );
        let text = render(&crate::view::status_view(&p, &Thresholds::default()));
        assert_eq!(line(&text, "oom "), Some("1 (processes of the group killed by the kernel's OOM killer)"), "{text}");
        assert_eq!(
            line(&text, "wake-ups "),
            Some("thresholds; events off (cgroup v2 only); next sample in 100 ms"),
            "{text}"
        );
        assert_eq!(line(&text, "brake "), Some("memory.high 480.0 MiB (96% of the limit; was max)"), "{text}");

        // No count, the timer only, no brake: said so, and no brake line.
        let p = Published::test(State::Normal);
        let text = render(&crate::view::status_view(&p, &Thresholds::default()));
        assert_eq!(line(&text, "oom "), Some("not counted by this kernel"));
        assert_eq!(line(&text, "wake-ups "), Some("timer only; next sample in 100 ms"));
        assert_eq!(line(&text, "brake "), None, "{text}");
        assert_eq!(line(&text, "config "), None, "nothing to say of a config that was never reloaded: {text}");
        assert_eq!(line(&text, "unseen "), Some("0.0 MiB beyond the sampled processes"), "{text}");

        // Two listed processes not sampled, 300 MiB beyond the sampled, and the policy says that is where it is.
        let mut p = Published::test(State::Aborting);
        (p.snapshot.group.processes_listed, p.snapshot.group.processes_sampled) = (5, 3);
        p.snapshot.group.unattributed_bytes = 300 << 20;
        p.decision.unseen = true;
        let text = render(&crate::view::status_view(&p, &Thresholds::default()));
        assert_eq!(
            line(&text, "unseen "),
            Some(
                "300.0 MiB beyond the sampled processes; 2 of 5 listed processes not sampled; the memory over the \
                 abort line is there: the last resort holds off"
            ),
            "{text}"
        );
    }

    #[test]
    fn each_process_shows_its_kills_and_the_last_kill_is_said_under_the_table() {
        let mut p = Published::test(State::Aborting);
        p.snapshot.processes = vec![crate::decision::snapshot::ProcSample {
            pid: 123,
            name: "node".into(),
            comm: "node".into(),
            start_ticks: 1,
            ppid: 1,
            rss_bytes: 1,
            anon_bytes: 1,
            traffic: Default::default(),
        }]
        .into();
        let mut v = crate::view::status_view(&p, &Thresholds::default());
        let text = render(&v);
        assert!(text.lines().any(|l| l.trim_end().ends_with("RESTARTS KILLS")), "{text}");
        assert!(!text.contains("killed"), "no kill, no line: {text}");
        v.processes[0].kills = 2;
        let kill = |pid: u32, unix_ms: u64, enforced: bool| crate::view::KillView {
            pid,
            name: "tx1".into(),
            role: crate::decision::snapshot::ProcessRole::Worker,
            rss_bytes: 1,
            anon_bytes: 1,
            ratio: 0.97,
            why: "abort_not_obeyed".into(),
            reason: "the abort was not obeyed".into(),
            round: 1,
            unix_ms,
            enforced,
            error: None,
            sent_mono_ns: None,
            requests: None,
        };
        v.kills = vec![kill(100, 0, true), kill(123, 10_000, true)];
        let text = render(&v);
        let row = text.lines().find(|l| l.trim_start().starts_with("123")).unwrap_or_default();
        assert!(row.ends_with("        0     2"), "restarts 0, kills 2: {row:?}");
        assert_eq!(last_kill(&v, 13_400).as_deref(), Some("killed tx1 (pid 123) 3 s ago: the abort was not obeyed"));
        assert!(text.contains("\nkilled tx1 (pid 123) "), "{text}");
        v.kills[1].enforced = false;
        v.policy.kills_halted = true;
        let line = last_kill(&v, 10_000 + 300_000).unwrap_or_default();
        assert!(line.starts_with("shadow: would have killed tx1 (pid 123) 5 min ago (not enforced)"), "{line}");
        assert!(line.ends_with("kills halted: three kills did not bring the group below abort_at"), "{line}");
        v.kills[1].enforced = true;
        v.kills[1].error = Some("pid 123 is gone".into());
        let line = last_kill(&v, 10_000 + 3 * 3_600_000).unwrap_or_default();
        assert!(line.starts_with("kill of tx1 (pid 123) not sent 3 h ago (pid 123 is gone)"), "{line}");
    }

    /// What a status holds that the agent did not write itself (a kill's reason, an error, a member's words) cannot
    /// add a line to the table or reach the terminal as an escape.
    #[test]
    fn outside_strings_in_the_status_are_escaped() {
        let mut v = crate::view::status_view(&Published::test(State::Aborting), &Thresholds::default());
        v.kills = vec![crate::view::KillView {
            pid: 9,
            name: "x\x1b]0;owned\x07".into(),
            role: crate::decision::snapshot::ProcessRole::Worker,
            rss_bytes: 1,
            anon_bytes: 1,
            ratio: 0.97,
            why: "over_kill_at".into(),
            reason: "grew\nkilled: y \x1b[2J".into(),
            round: 1,
            unix_ms: 0,
            enforced: true,
            error: None,
            sent_mono_ns: None,
            requests: None,
        }];
        v.group.error = Some("bad\x1b[31m".into());
        let text = render(&v);
        assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text:?}");
        assert!(!text.lines().any(|l| l.starts_with("killed: y")), "{text}");
        assert!(text.contains("grew\\nkilled: y \\e[2J"), "{text}");
    }

    #[test]
    fn a_failed_reload_and_keys_waiting_for_a_restart_are_shown() {
        let p = Published::test(State::Normal);
        let mut v = crate::view::status_view(&p, &Thresholds::default());
        let reloads = crate::config::live::Reloads::new(Some("/etc/monitor/agent.toml".into()));
        reloads.succeeded(vec!["web.listen".into()]);
        reloads.failed("/etc/monitor/agent.toml:3: unknown field `refuse_att`".into());
        v.config = Some(reloads.status());
        let text = render(&v);
        let lines: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("config ")).map(str::trim).collect();
        assert_eq!(
            lines,
            [
                "reload failed, the previous config runs: /etc/monitor/agent.toml:3: unknown field `refuse_att`",
                "changed in the file, applied at the next restart: web.listen"
            ],
            "{text}"
        );
    }
}
