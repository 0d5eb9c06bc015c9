//! The fleet docs against a real agent: `docs/prometheus-alerts.yml` passes `promtool check rules` and its unit
//! tests (`promtool test rules docs/prometheus-alerts.test.yml`: each rule fires with its name, labels and
//! annotations), and both it and `docs/grafana-dashboard.json` (which must parse) name only `monitor_*` series that
//! a running agent's `/metrics` exports; the rules raise the agent's own alerts under the agent's names
//! (`monitor::consumers::alerts::names`). promtool missing: skipped locally, a failure in CI.
//!
//! And the benchmark figures the docs quote against docs/benchmarks.md, which `cargo xtask bench all` writes. How
//! to quote one: in README.md, docs/*.md or a file under deploy/ a benchmark figure is written only as a link on one
//! line, its text the figure exactly as the page prints it (unit included) and its target the page's section it
//! comes from: `[1.89x](benchmarks.md#cluster-forwarding-and-gossip)` in docs/, `docs/benchmarks.md#…` from the
//! README and in a unit file's comments. Each section of the page opens with a table of its figures to quote. The
//! test fails when a link's section is not a heading of the page, when a Markdown file's link does not lead to
//! docs/benchmarks.md, or when a quote (a link text starting with a digit or a sign) is not a whole figure of its
//! section: `1.7` is not in `1.72x`, nor `32 µs` in `+32 µs`. After `cargo xtask bench all`, update the quotes it
//! names.
use monitor_tests::config::Config;
use monitor_tests::markdown::anchor;
use monitor_tests::{require, workspace_root, Agent};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
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
    // Exported once the guard has killed a process; monitor::consumers::metrics' unit tests check it.
    have.insert("monitor_guard_kills_total".to_string());
    // Exported once the guard has recycled a process; monitor::consumers::metrics' unit tests check it.
    have.insert("monitor_guard_recycles_total".to_string());
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
    use monitor::consumers::alerts::names::{RAISED_BY_AGENT, RAISED_BY_RULES_ONLY};
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
    monitor::consumers::alerts::names::RAISED_BY_AGENT.iter().map(|s| s.to_string()).collect()
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

/// A link `[text](target)` on line `line` (from 1) of a file.
#[derive(Debug, PartialEq)]
struct Link {
    line: usize,
    text: String,
    target: String,
}

/// Every `[text](target)` in `doc` whose target's path ends in `benchmarks.md`.
fn bench_links(doc: &str) -> Vec<Link> {
    let mut out = Vec::new();
    for (n, l) in doc.lines().enumerate() {
        let mut rest = l;
        while let Some(open) = rest.find('[') {
            let after = &rest[open + 1..];
            let Some(close) = after.find("](") else { break };
            let text = &after[..close];
            let tail = &after[close + 2..];
            let Some(end) = tail.find(')') else { break };
            let target = &tail[..end];
            if text.contains('[') {
                rest = &rest[open + 1..];
                continue;
            }
            if target.split('#').next().is_some_and(|p| p.ends_with("benchmarks.md")) {
                out.push(Link { line: n + 1, text: text.to_string(), target: target.to_string() });
            }
            rest = &tail[end..];
        }
    }
    out
}

/// The section of `page` whose heading has `id` as its anchor: from the heading to the next heading of the same or
/// a higher level.
fn section<'a>(page: &'a str, id: &str) -> Option<&'a str> {
    let mut start = None;
    let mut offset = 0;
    for l in page.split_inclusive('\n') {
        let level = l.bytes().take_while(|&b| b == b'#').count();
        if level > 0 && l.as_bytes().get(level) == Some(&b' ') {
            match start {
                Some((at, lvl)) if level <= lvl => return Some(&page[at..offset]),
                None if anchor(l[level..].trim()) == id => start = Some((offset, level)),
                _ => {}
            }
        }
        offset += l.len();
    }
    start.map(|(at, _)| &page[at..])
}

/// True when `figure` is in `text` as a whole figure: not part of a longer number or word (`1.7` is not in
/// `1.72x`, `32 µs` not in `+32 µs`, `1.89` not in `1.89x`).
fn has_figure(text: &str, figure: &str) -> bool {
    text.match_indices(figure).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = &text[i + figure.len()..];
        let mut next = after.chars();
        let joined_before = before.is_some_and(|c| c.is_alphanumeric() || matches!(c, '.' | '+' | '-'));
        let joined_after = match next.next() {
            Some('.') => next.next().is_some_and(|c| c.is_ascii_digit()),
            Some(c) => c.is_alphanumeric(),
            None => false,
        };
        !joined_before && !joined_after
    })
}

/// A link text that is a figure: it starts with a digit, or a sign and a digit.
fn is_figure(text: &str) -> bool {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    digits.starts_with(|c: char| c.is_ascii_digit())
}

/// The files that may quote the page: README.md, docs/*.md but the page, every file under deploy/.
fn quoting_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = match std::fs::read_dir(dir) {
            Ok(e) => e.filter_map(|e| e.ok().map(|e| e.path())).collect(),
            Err(e) => panic!("{}: {e}", dir.display()),
        };
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push(p);
            }
        }
    }
    let root = workspace_root();
    let mut files = vec![root.join("README.md")];
    walk(&root.join("deploy"), &mut files);
    let mut docs = Vec::new();
    walk(&root.join("docs"), &mut docs);
    files
        .extend(docs.into_iter().filter(|p| p.extension().is_some_and(|e| e == "md") && !p.ends_with("benchmarks.md")));
    files
}

/// What is wrong with `link` in `file` (a path relative to the workspace root) against the page, if anything.
fn check_link(file: &str, link: &Link, page: &str) -> Option<String> {
    let at = format!("{file}:{}: [{}]({})", link.line, link.text, link.target);
    let (path, id) = link.target.split_once('#').unwrap_or((link.target.as_str(), ""));
    if file.ends_with(".md") {
        let dir = Path::new(file).parent().unwrap_or(Path::new(""));
        if dir.join(path) != Path::new("docs/benchmarks.md") {
            return Some(format!("{at}: the link does not lead to docs/benchmarks.md"));
        }
    }
    if id.is_empty() {
        return is_figure(&link.text).then(|| format!("{at}: a quoted figure links to the section it comes from"));
    }
    let Some(text) = section(page, id) else {
        return Some(format!("{at}: docs/benchmarks.md has no section #{id}"));
    };
    (is_figure(&link.text) && !has_figure(text, &link.text))
        .then(|| format!("{at}: section #{id} of docs/benchmarks.md has no figure `{}`", link.text))
}

#[test]
fn quotes_and_figures_are_read_as_written() {
    let doc =
        "a [1.89x](benchmarks.md#cluster) and [text](x.md) [2 ms](docs/benchmarks.md#reaction-to-a-fast-grower)\n\
               [[nested] 3](benchmarks.md#y) [0.5%](benchmarks.md)";
    let links = bench_links(doc);
    let got: Vec<(usize, &str, &str)> = links.iter().map(|l| (l.line, l.text.as_str(), l.target.as_str())).collect();
    assert_eq!(
        got,
        vec![
            (1, "1.89x", "benchmarks.md#cluster"),
            (1, "2 ms", "docs/benchmarks.md#reaction-to-a-fast-grower"),
            (2, "nested] 3", "benchmarks.md#y"),
            (2, "0.5%", "benchmarks.md"),
        ]
    );
    for (text, figure, whole) in [
        ("| forwarded / local p50 | 1.89x |", "1.89x", true),
        ("forwarded / local p50: 1.89 (rounds", "1.89", true),
        ("| x | 1.89x |", "1.89", false),
        ("| x | 1.72x |", "1.7", false),
        ("1.72", "1.7", false),
        ("| a | +32 µs |", "+32 µs", true),
        ("| a | +32 µs |", "32 µs", false),
        ("v1.5.2", "1.5", false),
        ("it is 1.5.", "1.5", true),
        ("0.5 / 0.7 ms |", "0.7 ms", true),
        ("0.7 msec", "0.7 ms", false),
        ("2.01x", "2.01x", true),
        ("1.89x", "2.01x", false),
    ] {
        assert_eq!(has_figure(text, figure), whole, "{figure:?} in {text:?}");
    }
    assert!(is_figure("2339 MB/s") && is_figure("+32 µs") && is_figure("-185 ns"));
    assert!(!is_figure("benchmarks.md") && !is_figure("Host reads") && !is_figure("-"));
}

#[test]
fn sections_run_to_the_next_heading_of_their_level() {
    let page = "# Benchmarks\n\n## Agent CPU\n\n| x | 0.562% |\n\n## Bounds the tests hold\n\n### Agent under load\n\n\
                64 MB\n\n### Front door drain\n\nnone\n";
    assert_eq!(section(page, "agent-cpu"), Some("## Agent CPU\n\n| x | 0.562% |\n\n"));
    assert!(section(page, "bounds-the-tests-hold").is_some_and(|s| s.contains("64 MB") && s.contains("none")));
    assert_eq!(section(page, "agent-under-load"), Some("### Agent under load\n\n64 MB\n\n"));
    assert_eq!(section(page, "front-door-drain"), Some("### Front door drain\n\nnone\n"));
    assert_eq!(section(page, "sampler"), None);
    let link = |text: &str, target: &str| Link { line: 7, text: text.into(), target: target.into() };
    assert_eq!(check_link("docs/x.md", &link("0.562%", "benchmarks.md#agent-cpu"), page), None);
    assert_eq!(check_link("README.md", &link("0.562%", "docs/benchmarks.md#agent-cpu"), page), None);
    assert_eq!(check_link("deploy/a.service", &link("0.562%", "docs/benchmarks.md#agent-cpu"), page), None);
    assert_eq!(check_link("docs/x.md", &link("the page", "benchmarks.md"), page), None);
    for (file, text, target, why) in [
        ("docs/x.md", "0.63%", "benchmarks.md#agent-cpu", "has no figure `0.63%`"),
        ("docs/x.md", "64 MB", "benchmarks.md#agent-cpu", "has no figure `64 MB`"),
        ("docs/x.md", "0.562%", "benchmarks.md#sampler", "has no section #sampler"),
        ("docs/x.md", "0.562%", "benchmarks.md", "links to the section it comes from"),
        ("README.md", "0.562%", "benchmarks.md#agent-cpu", "does not lead to docs/benchmarks.md"),
        ("docs/x.md", "the load", "benchmarks.md#agent-under-loud", "has no section #agent-under-loud"),
    ] {
        let err = check_link(file, &link(text, target), page).unwrap_or_default();
        assert!(err.starts_with(&format!("{file}:7: [{text}]({target})")) && err.contains(why), "{err}");
    }
}

/// Every benchmark figure the docs quote is, as written, in the section of docs/benchmarks.md it links to.
#[test]
fn quoted_benchmark_figures_are_the_pages() {
    let root = workspace_root();
    let page = doc("benchmarks.md");
    let mut quotes = 0;
    let mut wrong = Vec::new();
    for path in quoting_files() {
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        let file = path.strip_prefix(&root).unwrap_or(&path).display().to_string();
        for link in bench_links(&text) {
            quotes += usize::from(is_figure(&link.text));
            wrong.extend(check_link(&file, &link, &page));
        }
    }
    assert!(wrong.is_empty(), "quotes of docs/benchmarks.md that are not on it:\n{}", wrong.join("\n"));
    assert!(quotes >= 15, "only {quotes} quoted figures found: the docs quote more");
}
