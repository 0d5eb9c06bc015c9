//! `monitor status` as text: the group line and a table of its processes.

use crate::api::StatusView;
use std::fmt::Write;

/// Bytes as MiB with one decimal.
pub fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
}

/// Renders a status document as a text table.
pub fn render(v: &StatusView) -> String {
    let g = &v.group;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "group    {} (cgroup {})\nmemory   {} of {} ({:.1}%, limit from {})\npolicy   {}{} (refuse at {:.0}%, abort at {:.0}%)",
        g.cgroup.display(),
        g.version,
        mib(g.usage_bytes),
        mib(g.limit_bytes),
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
    let _ = writeln!(s, "probes   {probes}\n");
    let _ = writeln!(
        s,
        "{:>8}  {:<16} {:<8} {:>12} {:>12}  {:<7} {:>9} {:>8} {:>8}",
        "PID", "NAME", "ROLE", "RSS", "ANON", "ACTION", "REQUESTS", "INFLIGHT", "RESTARTS"
    );
    for p in &v.processes {
        // Under `monitor run` a process is shown by its name in the config (m0, tx1), else by its command name.
        let launched = v.launcher.iter().flatten().find(|l| l.pid == Some(p.pid)).map(|l| l.name.as_str());
        let name: String =
            launched.unwrap_or(&p.name).chars().map(|c| if c.is_control() { '?' } else { c }).take(16).collect();
        let _ = writeln!(
            s,
            "{:>8}  {:<16} {:<8} {:>12} {:>12}  {:<7} {:>9} {:>8} {:>8}",
            p.pid,
            name,
            p.role,
            mib(p.rss_bytes),
            mib(p.anon_bytes),
            p.action,
            p.requests_total,
            p.inflight,
            p.restarts
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
    s
}
