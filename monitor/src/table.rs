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
        (true, _) => "on".to_string(),
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
        let name: String = p.name.chars().map(|c| if c.is_control() { '?' } else { c }).take(16).collect();
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
    s
}
