//! The fleet docs against a real agent: `docs/prometheus-alerts.yml` passes `promtool check rules` and its unit
//! tests (`promtool test rules docs/prometheus-alerts.test.yml`: each rule fires with its name, labels and
//! annotations), and both it and `docs/grafana-dashboard.json` (which must parse) name only `monitor_*` series that
//! a running agent's `/metrics` exports; the rules raise the agent's own alerts under the agent's names
//! (`monitor::alerts::names`). promtool missing: skipped locally, a failure in CI.

use monitor_tests::config::Config;
use monitor_tests::{require, workspace_root, Agent};
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::{Command, Stdio};

fn doc(name: &str) -> String {
    let p = workspace_root().join("docs").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every `monitor_…` identifier in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("monitor_") {
        let before = rest[..i].chars().next_back();
        let tail = &rest[i..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            out.insert(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
    out
}

/// The sample names in a Prometheus text exposition.
fn exported(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next().map(String::from))
        .collect()
}

/// Every `expr` string anywhere in the dashboard.
fn exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr", Value::String(s)) => out.push(s.clone()),
                    _ => exprs(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| exprs(x, out)),
        _ => {}
    }
}

fn agent_metrics() -> BTreeSet<String> {
    let dir = std::env::temp_dir().join(format!("monitor-docs-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let a = Agent::with_config("auto", &Config::new().probes(false), &dir);
    let (code, text) = a.get("/metrics");
    drop(a);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 200, "{text}");
    exported(&text)
}

#[test]
fn names_are_found_in_expressions() {
    let n = metric_names("rate(monitor_http_requests_total{x=\"y\"}[5m]) / xmonitor_no + monitor_a_bucket");
    assert_eq!(n.into_iter().collect::<Vec<_>>(), vec!["monitor_a_bucket", "monitor_http_requests_total"]);
    let e = exported("# HELP a b\nmonitor_x{p=\"1\"} 3\nmonitor_y 4\n");
    assert_eq!(e.into_iter().collect::<Vec<_>>(), vec!["monitor_x", "monitor_y"]);
}

#[test]
fn dashboard_and_alerts_name_only_exported_series() {
    let dashboard: Value = serde_json::from_str(&doc("grafana-dashboard.json")).expect("the dashboard is JSON");
    let mut list = Vec::new();
    exprs(&dashboard, &mut list);
    assert!(list.len() >= 8, "the dashboard has its panels' queries: {list:?}");
    let from_dashboard = metric_names(&list.join("\n"));
    let from_alerts = metric_names(&doc("prometheus-alerts.yml"));
    let mut have = agent_metrics();
    // Exported only under `monitor run` (its launcher's processes); tests/tests/run/counts.rs checks it there.
    have.insert("monitor_process_state".to_string());
    // Exported only under `[cluster]`; tests/tests/cluster/membership.rs checks it there.
    have.insert("monitor_cluster_members".to_string());
    // Exported once the guard has killed a process; monitor::metrics' unit tests check it.
    have.insert("monitor_guard_kills_total".to_string());
    for (doc, names) in [("grafana-dashboard.json", &from_dashboard), ("prometheus-alerts.yml", &from_alerts)] {
        let missing: Vec<&String> = names.iter().filter(|n| !have.contains(*n)).collect();
        assert!(
            missing.is_empty(),
            "docs/{doc} names series the agent does not export: {missing:?}\nexported: {have:?}"
        );
    }
    for family in [
        "monitor_group_memory_usage_bytes",
        "monitor_group_memory_limit_bytes",
        "monitor_policy_state",
        "monitor_process_resident_memory_bytes",
        "monitor_http_requests_total",
        "monitor_http_request_duration_seconds_bucket",
        "monitor_process_restarts_total",
        "monitor_shed_requests_total",
    ] {
        assert!(from_dashboard.contains(family), "the dashboard shows {family}");
    }
}

/// Whether promtool runs here (else `skipping <test>: …`, a failure in CI).
fn have_promtool(test: &str) -> bool {
    let have = Command::new("promtool").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    require(have.is_ok(), test, "promtool not installed (apt-get install prometheus)")
}

/// `promtool <args> docs/<file>`, which must succeed and say SUCCESS.
fn promtool(args: &[&str], file: &str) {
    let file = workspace_root().join("docs").join(file);
    let out = Command::new("promtool").args(args).arg(&file).output().expect("promtool");
    let msg = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "promtool {} {}:\n{msg}", args.join(" "), file.display());
    assert!(msg.contains("SUCCESS"), "{msg}");
}

#[test]
fn alert_rules_pass_promtool() {
    if have_promtool("alert_rules_pass_promtool") {
        promtool(&["check", "rules"], "prometheus-alerts.yml");
    }
}

#[test]
fn alert_rules_fire_as_their_unit_tests_expect() {
    if have_promtool("alert_rules_fire_as_their_unit_tests_expect") {
        promtool(&["test", "rules"], "prometheus-alerts.test.yml");
    }
}

#[test]
fn the_rules_raise_the_agents_alerts_under_its_names() {
    use monitor::alerts::names::{RAISED_BY_AGENT, RAISED_BY_RULES_ONLY};
    let rules = names_after(&doc("prometheus-alerts.yml"), "alert: ");
    let agent: BTreeSet<String> = RAISED_BY_AGENT.iter().map(|s| s.to_string()).collect();
    let only: BTreeSet<String> = RAISED_BY_RULES_ONLY.iter().map(|s| s.to_string()).collect();
    let missing: Vec<&String> = agent.difference(&rules).collect();
    assert!(missing.is_empty(), "the agent raises {missing:?}; docs/prometheus-alerts.yml has no rule of that name");
    let rules_only: BTreeSet<String> = rules.difference(&agent).cloned().collect();
    assert_eq!(rules_only, only, "the rules the agent does not raise itself");
    assert_eq!(names_after(&doc("prometheus-alerts.test.yml"), "alertname: "), rules, "every rule has its unit test");
}

/// The alert names in `docs/alerts.md`'s table, with who raises each (`agent`, `rules`).
fn runbook_table() -> Vec<(String, String)> {
    doc("alerts.md")
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells.len() >= 4 && cells[1].starts_with("Monitor")).then(|| (cells[1].to_string(), cells[2].to_string()))
        })
        .collect()
}

/// Every `Monitor…` name in `text` after `prefix` (`Condition::new("`, `alert: `).
fn names_after(text: &str, prefix: &str) -> BTreeSet<String> {
    text.match_indices(prefix)
        .filter_map(|(i, p)| {
            let rest = &text[i + p.len()..];
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
            name.starts_with("Monitor").then_some(name)
        })
        .collect()
}

/// The agent's own alert names.
fn agent_alert_names() -> BTreeSet<String> {
    monitor::alerts::names::RAISED_BY_AGENT.iter().map(|s| s.to_string()).collect()
}

#[test]
fn every_alert_has_one_name_and_a_runbook() {
    let table = runbook_table();
    let by = |who: &str| -> BTreeSet<String> {
        table.iter().filter(|(_, w)| w.contains(who)).map(|(n, _)| n.clone()).collect()
    };
    let agent = agent_alert_names();
    let rules = names_after(&doc("prometheus-alerts.yml"), "alert: ");
    assert!(agent.len() >= 8 && rules.len() >= 10, "read too few names: {agent:?} {rules:?}");
    assert_eq!(agent, by("agent"), "the agent's alerts against docs/alerts.md's table");
    assert_eq!(rules, by("rules"), "the rules' alerts against docs/alerts.md's table");
    let page = doc("alerts.md");
    for (name, _) in &table {
        assert!(page.contains(&format!("\n## {name}\n")), "docs/alerts.md has no section for {name}");
    }
    // Each rule links to its section.
    let yml = doc("prometheus-alerts.yml");
    for name in &rules {
        assert!(yml.contains(&format!("alerts.md#{}\"", name.to_lowercase())), "{name} has no runbook_url");
    }
}

#[test]
fn the_runbook_table_gives_each_rule_its_severity() {
    let yml = doc("prometheus-alerts.yml");
    // Each rule's `alert:` and the first `severity:` after it.
    let rules: Vec<(String, String)> = yml
        .split("- alert: ")
        .skip(1)
        .filter_map(|r| {
            let name = r.lines().next()?.trim().to_string();
            let severity = r.lines().find_map(|l| l.trim().strip_prefix("severity: "))?.trim().to_string();
            Some((name, severity))
        })
        .collect();
    assert!(rules.len() >= 10, "read too few rules: {rules:?}");
    let table: Vec<(String, String)> = doc("alerts.md")
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells.len() >= 5 && cells[1].starts_with("Monitor")).then(|| (cells[1].to_string(), cells[3].to_string()))
        })
        .collect();
    for (name, severity) in &rules {
        let listed = table.iter().find(|(n, _)| n == name).map(|(_, s)| s.as_str());
        assert_eq!(listed, Some(severity.as_str()), "docs/alerts.md's severity of {name} against its rule");
    }
}
