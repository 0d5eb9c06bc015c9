//! The Prometheus text (version 0.0.4) of one sample and what the agent counted beside it: every family with
//! HELP and TYPE, label values escaped. Pure: the same inputs give the same text.

use crate::base::reaction::{Counts, Kind, BOUNDS_NS};
use crate::decision::policy::{Decisions, Thresholds};
use crate::feed::Published;
use crate::guard::KillCounts;
use std::fmt::Write;

/// What the text holds beyond the sample.
#[derive(Debug, Clone, Default)]
pub struct Extra {
    /// Restarts per process name.
    pub restarts: Vec<(String, u64)>,
    pub shed_total: u64,
    /// The history is being written to the database.
    pub persisted: bool,
    /// Under `monitor run`: each process's (name, role, launcher state).
    pub states: Vec<(String, String, String)>,
    /// The reaction times per kind (none: the family is left out).
    pub reactions: Vec<(Kind, Counts)>,
    /// The policy's lines, exported so dashboards and alerts draw and compare against the configured values.
    pub thresholds: Thresholds,
    /// The decisions counted since the agent started.
    pub decisions: Decisions,
    /// The config's reloads since start, (good, failed) (none: the family is left out).
    pub reloads: Option<(u64, u64)>,
    /// The last resort's kills since start (none: the counters are left out).
    pub kills: Option<KillCounts>,
    /// The time of the scrape, for the sample's age (0: left out).
    pub now_unix_ms: u64,
}

/// Escapes a label value: backslash, double quote and newline.
pub fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// The whole text: `names` are the (series name, role) of each of the sample's processes, in order.
pub fn render(p: &Published, names: &[(String, String)], extra: &Extra) -> String {
    let mut o = String::with_capacity(4096 + names.len() * 2048);
    let g = &p.snapshot.group;
    family(
        &mut o,
        "monitor_build_info",
        "gauge",
        "1, labelled with the version, the commit and whether the eBPF object is built in.",
    );
    let probes = if crate::sources::build::probes_built() { "built" } else { "not built" };
    let _ = writeln!(
        o,
        "monitor_build_info{{version=\"{}\",revision=\"{}\",probes=\"{probes}\"}} 1",
        crate::sources::build::VERSION,
        crate::sources::build::REVISION
    );
    family(
        &mut o,
        "monitor_group_memory_usage_bytes",
        "gauge",
        "The group's unreclaimable memory: anon plus shmem (v2 anon + shmem, v1 total_rss + total_shmem).",
    );
    let _ = writeln!(o, "monitor_group_memory_usage_bytes {}", g.usage_bytes);
    family(
        &mut o,
        "monitor_group_shmem_bytes",
        "gauge",
        "The shmem part of the usage: tmpfs files and shared memory, which killing a process may not free.",
    );
    let _ = writeln!(o, "monitor_group_shmem_bytes {}", g.shmem_bytes);
    family(
        &mut o,
        "monitor_group_unattributed_bytes",
        "gauge",
        "What the group holds beyond the sampled processes' anon (a lower bound).",
    );
    let _ = writeln!(o, "monitor_group_unattributed_bytes {}", g.unattributed_bytes);
    family(&mut o, "monitor_group_processes_unsampled", "gauge", "Listed processes of the group not sampled.");
    let _ = writeln!(o, "monitor_group_processes_unsampled {}", g.processes_unsampled());
    family(&mut o, "monitor_group_memory_limit_bytes", "gauge", "The group's memory limit (cgroup, config or host).");
    let _ = writeln!(o, "monitor_group_memory_limit_bytes {}", g.limit_bytes);
    family(&mut o, "monitor_group_memory_ratio", "gauge", "Usage divided by the limit.");
    let _ = writeln!(o, "monitor_group_memory_ratio {}", p.decision.ratio);
    family(&mut o, "monitor_policy_state", "gauge", "The policy's state: 0 normal, 1 refusing, 2 aborting.");
    let _ = writeln!(o, "monitor_policy_state {}", crate::history::ring::state_code(p.decision.state));
    family(&mut o, "monitor_policy_shadow", "gauge", "1 when the policy decides but enforces nothing.");
    let _ = writeln!(o, "monitor_policy_shadow {}", u8::from(p.decision.shadow));
    family(&mut o, "monitor_policy_abort_round", "gauge", "Victims chosen since entering aborting.");
    let _ = writeln!(o, "monitor_policy_abort_round {}", p.decision.abort_round);
    policy_lines(&mut o, &extra.thresholds, &extra.decisions);
    guard_lines(&mut o, p.decision.kills_halted, extra.kills.as_ref());
    if let Some((ok, failed)) = extra.reloads {
        family(
            &mut o,
            "monitor_config_reloads_total",
            "counter",
            "Config reloads (SIGHUP): ok applied the file, failed kept the running config.",
        );
        let _ = writeln!(o, "monitor_config_reloads_total{{result=\"ok\"}} {ok}");
        let _ = writeln!(o, "monitor_config_reloads_total{{result=\"failed\"}} {failed}");
    }
    family(&mut o, "monitor_probes_enabled", "gauge", "1 when the eBPF probes count requests.");
    let _ = writeln!(o, "monitor_probes_enabled {}", u8::from(p.probes.enabled));
    if let Some(hooks) = &p.probes.hooks {
        family(&mut o, "monitor_probes_info", "gauge", "1, labelled with the kernel hooks the probes count from.");
        let _ = writeln!(o, "monitor_probes_info{{hooks=\"{hooks}\"}} 1");
    }
    if let Some(pr) = g.pressure {
        family(
            &mut o,
            "monitor_memory_pressure_seconds_total",
            "counter",
            "Time the group's tasks stalled on memory (PSI): some = at least one, full = all at once.",
        );
        let _ = writeln!(o, "monitor_memory_pressure_seconds_total{{kind=\"some\"}} {}", pr.some_us as f64 / 1e6);
        let _ = writeln!(o, "monitor_memory_pressure_seconds_total{{kind=\"full\"}} {}", pr.full_us as f64 / 1e6);
    }
    family(&mut o, "monitor_sample_ok", "gauge", "1 when the latest sample of the group succeeded.");
    let _ = writeln!(o, "monitor_sample_ok {}", u8::from(p.error.is_none()));
    if extra.now_unix_ms > 0 {
        family(&mut o, "monitor_sample_age_seconds", "gauge", "Time since the latest sample was taken.");
        let age = extra.now_unix_ms.saturating_sub(p.snapshot.unix_ms) as f64 / 1e3;
        let _ = writeln!(o, "monitor_sample_age_seconds {age}");
    }
    reaction_lines(&mut o, p);
    reaction_histogram(&mut o, &extra.reactions);
    family(&mut o, "monitor_history_persisted", "gauge", "1 when the history is written to the stats database.");
    let _ = writeln!(o, "monitor_history_persisted {}", u8::from(extra.persisted));
    family(&mut o, "monitor_shed_requests_total", "counter", "Requests the front door refused with 503.");
    let _ = writeln!(o, "monitor_shed_requests_total {}", extra.shed_total);

    let procs = &p.snapshot.processes;
    let labels: Vec<String> =
        names.iter().map(|(n, r)| format!("process=\"{}\",role=\"{}\"", escape_label(n), escape_label(r))).collect();
    let per = |o: &mut String, name: &str, kind: &str, help: &str, v: &dyn Fn(usize) -> u64| {
        family(o, name, kind, help);
        for (i, l) in labels.iter().enumerate().take(procs.len()) {
            let _ = writeln!(o, "{name}{{{l}}} {}", v(i));
        }
    };
    per(&mut o, "monitor_process_resident_memory_bytes", "gauge", "Resident set of the process.", &|i| {
        procs[i].rss_bytes
    });
    per(&mut o, "monitor_process_anon_memory_bytes", "gauge", "RssAnon of the process.", &|i| procs[i].anon_bytes);
    per(&mut o, "monitor_http_requests_total", "counter", "HTTP requests the process received (eBPF).", &|i| {
        procs[i].traffic.requests_total
    });
    per(&mut o, "monitor_http_requests_in_flight", "gauge", "HTTP requests received and not yet answered.", &|i| {
        procs[i].traffic.inflight
    });
    family(&mut o, "monitor_http_responses_total", "counter", "HTTP responses the process sent, by status class.");
    for (i, l) in labels.iter().enumerate().take(procs.len()) {
        for (c, n) in procs[i].traffic.responses_by_class.iter().enumerate() {
            let _ = writeln!(o, "monitor_http_responses_total{{{l},class=\"{}xx\"}} {n}", c + 1);
        }
    }
    family(
        &mut o,
        "monitor_http_request_duration_seconds",
        "histogram",
        "Request latency from the log2 histogram (buckets at powers of two microseconds; sum from bucket midpoints).",
    );
    for (i, l) in labels.iter().enumerate().take(procs.len()) {
        histogram(&mut o, l, &procs[i].traffic.latency_hist_us);
    }
    family(
        &mut o,
        "monitor_process_restarts_total",
        "counter",
        "Times the process was restarted (new pid, same name).",
    );
    let mut restarts = extra.restarts.clone();
    for (n, _) in names {
        if !restarts.iter().any(|(r, _)| r == n) {
            restarts.push((n.clone(), 0));
        }
    }
    restarts.sort();
    for (n, v) in &restarts {
        let role = names.iter().find(|(x, _)| x == n).map(|(_, r)| r.as_str()).unwrap_or("process");
        let _ = writeln!(
            o,
            "monitor_process_restarts_total{{process=\"{}\",role=\"{}\"}} {v}",
            escape_label(n),
            escape_label(role)
        );
    }
    launcher_states(&mut o, &extra.states);
    o
}

/// `monitor_process_state`: under `monitor run`, one series per process labelled with its launcher state.
fn launcher_states(o: &mut String, states: &[(String, String, String)]) {
    if states.is_empty() {
        return;
    }
    family(
        o,
        "monitor_process_state",
        "gauge",
        "1 for each process of monitor run, labelled with its launcher state (starting, ready, unhealthy, backing-off, stopped).",
    );
    for (n, role, state) in states {
        let _ = writeln!(
            o,
            "monitor_process_state{{process=\"{}\",role=\"{}\",state=\"{}\"}} 1",
            escape_label(n),
            escape_label(role),
            escape_label(state)
        );
    }
}

/// The kernel's OOM kills, the wake-up sources, the brake and the paced interval.
fn reaction_lines(o: &mut String, p: &Published) {
    if let Some(n) = p.snapshot.group.oom_kills {
        family(o, "monitor_oom_kills_total", "counter", "Processes of the group the kernel's OOM killer has killed.");
        let _ = writeln!(o, "monitor_oom_kills_total {n}");
    }
    let w = &p.wakeups;
    if !w.armed.is_empty() || !w.off.is_empty() {
        family(
            o,
            "monitor_wakeup_armed",
            "gauge",
            "1 for each kernel wake-up source of the sampler that is armed, 0 for one configured but off.",
        );
        for s in &w.armed {
            let _ = writeln!(o, "monitor_wakeup_armed{{source=\"{}\"}} 1", escape_label(s));
        }
        for off in &w.off {
            let _ = writeln!(o, "monitor_wakeup_armed{{source=\"{}\"}} 0", escape_label(&off.source));
        }
    }
    if let Some(high) = p.brake.as_ref().and_then(|b| b.high_bytes) {
        family(o, "monitor_memory_high_bytes", "gauge", "The group's memory.high as the brake set it.");
        let _ = writeln!(o, "monitor_memory_high_bytes {high}");
    }
    family(o, "monitor_sample_interval_seconds", "gauge", "The interval until the next timed sample, as paced.");
    let _ = writeln!(o, "monitor_sample_interval_seconds {}", p.next_sample_ms as f64 / 1000.0);
}

/// `monitor_reaction_seconds{action}`: from the sampler's wake-up to the signal sent, the POST answered, or the
/// first 503 after the group entered refusing or aborting.
fn reaction_histogram(o: &mut String, reactions: &[(Kind, Counts)]) {
    if reactions.is_empty() {
        return;
    }
    let name = "monitor_reaction_seconds";
    family(
        o,
        name,
        "histogram",
        "Time from the sampler's wake-up to the action: signal sent, POST answered, first 503 after entering \
         refusing or aborting.",
    );
    for (kind, c) in reactions {
        let l = format!("action=\"{}\"", kind.as_str());
        let mut cum = 0u64;
        for (bound, n) in BOUNDS_NS.iter().zip(&c.buckets) {
            cum += n;
            let _ = writeln!(o, "{name}_bucket{{{l},le=\"{}\"}} {cum}", *bound as f64 / 1e9);
        }
        let total = c.count();
        let _ = writeln!(o, "{name}_bucket{{{l},le=\"+Inf\"}} {total}");
        let _ = writeln!(o, "{name}_sum{{{l}}} {}", c.sum_ns as f64 / 1e9);
        let _ = writeln!(o, "{name}_count{{{l}}} {total}");
    }
}

/// One histogram: bucket i of `hist` counts latencies in [2^i, 2^(i+1)) µs, so its upper bound is 2^(i+1) µs.
/// The configured lines and the decisions counted.
fn policy_lines(o: &mut String, t: &Thresholds, d: &Decisions) {
    family(o, "monitor_policy_threshold_ratio", "gauge", "The policy's lines as fractions of the limit.");
    let _ = writeln!(o, "monitor_policy_threshold_ratio{{line=\"refuse\"}} {}", t.refuse_at);
    let _ = writeln!(o, "monitor_policy_threshold_ratio{{line=\"abort\"}} {}", t.abort_at);
    family(o, "monitor_policy_hysteresis_ratio", "gauge", "How far under a line the group must fall to leave it.");
    let _ = writeln!(o, "monitor_policy_hysteresis_ratio {}", t.hysteresis);
    family(o, "monitor_policy_entered_total", "counter", "Times the group entered refusing or aborting.");
    let _ = writeln!(o, "monitor_policy_entered_total{{state=\"refusing\"}} {}", d.entered_refusing);
    let _ = writeln!(o, "monitor_policy_entered_total{{state=\"aborting\"}} {}", d.entered_aborting);
    family(o, "monitor_policy_victims_total", "counter", "Processes chosen to abort (one per abort round).");
    let _ = writeln!(o, "monitor_policy_victims_total {}", d.victims);
}

/// The last resort: kills sent per process name, those not enforced (shadow) or not sent, and whether it halted.
fn guard_lines(o: &mut String, halted: bool, kills: Option<&KillCounts>) {
    family(o, "monitor_guard_kills_halted", "gauge", "1 while the last resort has halted: its kills freed nothing.");
    let _ = writeln!(o, "monitor_guard_kills_halted {}", u8::from(halted));
    let Some(k) = kills else { return };
    if !k.by_name.is_empty() {
        family(o, "monitor_guard_kills_total", "counter", "Processes the guard's last resort killed, by name.");
        for (name, n) in &k.by_name {
            let _ = writeln!(o, "monitor_guard_kills_total{{process=\"{}\"}} {n}", escape_label(name));
        }
    }
    family(
        o,
        "monitor_guard_kills_not_enforced_total",
        "counter",
        "Kills the last resort decided in shadow mode and did not send.",
    );
    let _ = writeln!(o, "monitor_guard_kills_not_enforced_total {}", k.not_enforced);
    family(
        o,
        "monitor_guard_kills_failed_total",
        "counter",
        "Kills the last resort could not send (the process was gone, its pid reused, or it left the group).",
    );
    let _ = writeln!(o, "monitor_guard_kills_failed_total {}", k.failed);
}

/// The log2 histogram's bucket bounds exported: every other power of two of microseconds, from 2 µs to 2^25 µs
/// (33.6 s), 13 buckets and +Inf per process. Each is a bound of the log2 histogram, so the counts stay exact.
const EXPORTED_BOUNDS: usize = 25;

fn histogram(o: &mut String, labels: &str, hist: &[u64]) {
    let name = "monitor_http_request_duration_seconds";
    let mut cum = 0u64;
    let mut sum = 0.0;
    for (i, &n) in hist.iter().enumerate() {
        cum += n;
        sum += n as f64 * 1.5 * (1u64 << i.min(62)) as f64 / 1e6;
        if i % 2 == 0 && i < EXPORTED_BOUNDS {
            let le = (1u64 << (i + 1)) as f64 / 1e6;
            let _ = writeln!(o, "{name}_bucket{{{labels},le=\"{le}\"}} {cum}");
        }
    }
    let _ = writeln!(o, "{name}_bucket{{{labels},le=\"+Inf\"}} {cum}");
    let _ = writeln!(o, "{name}_sum{{{labels}}} {sum}");
    let _ = writeln!(o, "{name}_count{{{labels}}} {cum}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::reaction::Reactions;
    use crate::decision::policy::State;
    use std::time::Duration;

    #[test]
    fn launcher_states_are_one_series_per_process() {
        let mut text = String::new();
        launcher_states(
            &mut text,
            &[("m0".into(), "master".into(), "ready".into()), ("tx1".into(), "worker".into(), "unhealthy".into())],
        );
        assert!(text.contains("# TYPE monitor_process_state gauge"), "{text}");
        assert!(text.contains("monitor_process_state{process=\"m0\",role=\"master\",state=\"ready\"} 1"), "{text}");
        assert!(text.contains("monitor_process_state{process=\"tx1\",role=\"worker\",state=\"unhealthy\"} 1"));
        let mut none = String::new();
        launcher_states(&mut none, &[]);
        assert!(none.is_empty(), "no launcher, no family: {none}");
    }

    /// The lines of `text` that start with `prefix`.
    fn lines_of<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
        text.lines().filter(|l| l.starts_with(prefix)).collect()
    }

    #[test]
    fn oom_kills_wakeups_brake_and_interval() {
        let p =
            Published::test(State::Normal).reacting(3, &["thresholds"], ("events", "cgroup v2 only"), 515_396_075, 20);
        let text = render(&p, &[], &Extra::default());
        assert!(text.contains("# TYPE monitor_oom_kills_total counter\nmonitor_oom_kills_total 3\n"), "{text}");
        assert_eq!(
            lines_of(&text, "monitor_wakeup_armed"),
            ["monitor_wakeup_armed{source=\"thresholds\"} 1", "monitor_wakeup_armed{source=\"events\"} 0"]
        );
        assert_eq!(lines_of(&text, "monitor_memory_high_bytes"), ["monitor_memory_high_bytes 515396075"]);
        assert_eq!(lines_of(&text, "monitor_sample_interval_seconds"), ["monitor_sample_interval_seconds 0.02"]);
        assert!(lines_of(&text, "monitor_reaction_seconds").is_empty(), "no reactions kept, no family");

        // A kernel without the count, no wake-up source, no brake (or one not set): the families are left out.
        let mut p = Published::test(State::Normal);
        p.brake = Some(
            serde_json::from_value(serde_json::json!({
                "at": 0.96, "high_bytes": null, "previous": "max", "error": "memory.high: permission denied"
            }))
            .expect("a brake status"),
        );
        let text = render(&p, &[], &Extra::default());
        for absent in ["monitor_oom_kills_total", "monitor_wakeup_armed", "monitor_memory_high_bytes"] {
            assert!(!text.contains(absent), "{absent} in:\n{text}");
        }
        assert_eq!(lines_of(&text, "monitor_sample_interval_seconds"), ["monitor_sample_interval_seconds 0.1"]);
    }

    #[test]
    fn reaction_times_are_a_histogram_per_action() {
        let r = Reactions::new();
        r.record(Kind::Signal, Duration::from_micros(700));
        r.record(Kind::Signal, Duration::from_millis(12));
        r.record(Kind::Shed, Duration::from_secs(2));
        let extra = Extra { reactions: Kind::ALL.iter().map(|&k| (k, r.counts(k))).collect(), ..Extra::default() };
        let text = render(&Published::test(State::Normal), &[], &extra);
        assert!(text.contains("# TYPE monitor_reaction_seconds histogram\n"), "{text}");
        let signal = lines_of(&text, "monitor_reaction_seconds_bucket{action=\"signal\"");
        assert_eq!(signal.len(), BOUNDS_NS.len() + 1);
        assert_eq!(signal[0], "monitor_reaction_seconds_bucket{action=\"signal\",le=\"0.0001\"} 0");
        assert_eq!(signal[3], "monitor_reaction_seconds_bucket{action=\"signal\",le=\"0.001\"} 1");
        assert_eq!(signal[7], "monitor_reaction_seconds_bucket{action=\"signal\",le=\"0.02\"} 2");
        assert_eq!(signal[13], "monitor_reaction_seconds_bucket{action=\"signal\",le=\"+Inf\"} 2");
        assert!(text.contains("monitor_reaction_seconds_sum{action=\"signal\"} 0.0127\n"), "{text}");
        assert!(text.contains("monitor_reaction_seconds_count{action=\"signal\"} 2\n"));
        // Nothing posted yet: every bucket 0, still exported so rates work from the start.
        assert!(text.contains("monitor_reaction_seconds_bucket{action=\"post\",le=\"+Inf\"} 0\n"));
        // Above the last bound: only in +Inf.
        assert!(text.contains("monitor_reaction_seconds_bucket{action=\"shed\",le=\"1\"} 0\n"));
        assert!(text.contains("monitor_reaction_seconds_bucket{action=\"shed\",le=\"+Inf\"} 1\n"));
    }

    #[test]
    fn config_reloads_are_counted_by_result_where_they_are_kept() {
        let p = Published::test(State::Normal);
        let text = render(&p, &[], &Extra { reloads: Some((3, 1)), ..Extra::default() });
        assert_eq!(
            lines_of(&text, "monitor_config_reloads_total{"),
            ["monitor_config_reloads_total{result=\"ok\"} 3", "monitor_config_reloads_total{result=\"failed\"} 1"]
        );
        assert!(text.contains("# TYPE monitor_config_reloads_total counter\n"), "{text}");
        let text = render(&p, &[], &Extra::default());
        assert!(!text.contains("monitor_config_reloads_total"), "left out where no reload is counted: {text}");
    }

    #[test]
    fn build_lines_decisions_and_sample_age() {
        let mut p = Published::test(State::Refusing);
        p.snapshot.unix_ms = 1_000_000;
        let mut decisions = Decisions::default();
        for state in [State::Normal, State::Refusing, State::Normal, State::Refusing] {
            decisions.observe(&crate::decision::policy::Decision { state, ..p.decision.clone() });
        }
        let thresholds = Thresholds { refuse_at: 0.8, abort_at: 0.9, ..Thresholds::default() };
        let extra = Extra { thresholds, decisions, now_unix_ms: 1_002_500, ..Extra::default() };
        let text = render(&p, &[], &extra);
        let info = lines_of(&text, "monitor_build_info{");
        assert_eq!(info.len(), 1, "{text}");
        assert!(info[0].contains(&format!("version=\"{}\"", crate::sources::build::VERSION)), "{text}");
        assert!(info[0].contains("revision=\"") && info[0].ends_with("} 1"), "{text}");
        assert_eq!(
            lines_of(&text, "monitor_policy_threshold_ratio{"),
            [
                "monitor_policy_threshold_ratio{line=\"refuse\"} 0.8",
                "monitor_policy_threshold_ratio{line=\"abort\"} 0.9"
            ]
        );
        assert_eq!(
            lines_of(&text, "monitor_policy_entered_total{state=\"refusing\"}"),
            ["monitor_policy_entered_total{state=\"refusing\"} 2"]
        );
        assert_eq!(lines_of(&text, "monitor_policy_victims_total "), ["monitor_policy_victims_total 0"]);
        assert_eq!(lines_of(&text, "monitor_sample_age_seconds "), ["monitor_sample_age_seconds 2.5"]);
        assert!(lines_of(&text, "monitor_memory_pressure").is_empty(), "no PSI, no family");
        p.snapshot.group.pressure = Some(crate::decision::snapshot::Pressure { some_us: 2_500_000, full_us: 1_000 });
        let text = render(&p, &[], &extra);
        assert_eq!(
            lines_of(&text, "monitor_memory_pressure_seconds_total{"),
            [
                "monitor_memory_pressure_seconds_total{kind=\"some\"} 2.5",
                "monitor_memory_pressure_seconds_total{kind=\"full\"} 0.001"
            ]
        );
    }

    #[test]
    fn guard_kills_by_name_shadow_failed_and_halted() {
        let mut p = Published::test(State::Aborting);
        p.snapshot.group.shmem_bytes = 4096;
        let text = render(&p, &[], &Extra::default());
        assert_eq!(lines_of(&text, "monitor_group_shmem_bytes "), ["monitor_group_shmem_bytes 4096"]);
        assert_eq!(lines_of(&text, "monitor_group_processes_unsampled "), ["monitor_group_processes_unsampled 0"]);
        assert_eq!(lines_of(&text, "monitor_guard_kills_halted "), ["monitor_guard_kills_halted 0"]);
        assert!(!text.contains("monitor_guard_kills_total"), "no book, no counters: {text}");
        assert!(!text.contains("monitor_guard_kills_failed_total"), "{text}");
        // A book with nothing killed yet: the shadow and failed counters start at 0, no series by name.
        let empty = Extra { kills: Some(KillCounts::default()), ..Extra::default() };
        let text = render(&p, &[], &empty);
        assert!(!text.contains("monitor_guard_kills_total"), "{text}");
        assert_eq!(lines_of(&text, "monitor_guard_kills_failed_total "), ["monitor_guard_kills_failed_total 0"]);
        let kills = KillCounts {
            by_name: [("tx\"1".to_string(), 2), ("tx2".to_string(), 1)].into_iter().collect(),
            not_enforced: 3,
            failed: 1,
        };
        p.decision.kills_halted = true;
        let text = render(&p, &[], &Extra { kills: Some(kills), ..Extra::default() });
        assert!(text.contains("# TYPE monitor_guard_kills_total counter\n"), "{text}");
        assert_eq!(
            lines_of(&text, "monitor_guard_kills_total{"),
            ["monitor_guard_kills_total{process=\"tx\\\"1\"} 2", "monitor_guard_kills_total{process=\"tx2\"} 1"]
        );
        assert_eq!(
            lines_of(&text, "monitor_guard_kills_not_enforced_total "),
            ["monitor_guard_kills_not_enforced_total 3"]
        );
        assert_eq!(lines_of(&text, "monitor_guard_kills_failed_total "), ["monitor_guard_kills_failed_total 1"]);
        assert_eq!(lines_of(&text, "monitor_guard_kills_halted "), ["monitor_guard_kills_halted 1"]);
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let mut o = String::new();
        histogram(&mut o, "process=\"p\",role=\"worker\"", &[1, 0, 2]);
        let lines: Vec<&str> = o.lines().collect();
        assert_eq!(
            lines[0],
            "monitor_http_request_duration_seconds_bucket{process=\"p\",role=\"worker\",le=\"0.000002\"} 1"
        );
        // 4 µs is not exported: the next bound is 8 µs, which holds all three.
        assert_eq!(
            lines[1],
            "monitor_http_request_duration_seconds_bucket{process=\"p\",role=\"worker\",le=\"0.000008\"} 3"
        );
        assert_eq!(
            lines[2],
            "monitor_http_request_duration_seconds_bucket{process=\"p\",role=\"worker\",le=\"+Inf\"} 3"
        );
        assert!(lines[4].ends_with("} 3"));
        // The 32 log2 buckets a probe keeps become 13 bounds and +Inf; a latency past 33.6 s is in +Inf only.
        let mut full = [0u64; 32];
        full[31] = 1;
        let mut o = String::new();
        histogram(&mut o, "p=\"x\"", &full);
        let buckets: Vec<&str> = o.lines().filter(|l| l.contains("_bucket")).collect();
        assert_eq!(buckets.len(), 14, "{o}");
        assert!(buckets[12].contains("le=\"33.554432\"} 0"), "{o}");
        assert!(buckets[13].ends_with("le=\"+Inf\"} 1"), "{o}");
    }
}
