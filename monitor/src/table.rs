//! `monitor status` as text: the group line and a table of its processes.

use crate::api::StatusView;
use crate::live::ReloadResult;
use crate::units::size;
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

/// Renders a status document as a text table.
pub fn render(v: &StatusView) -> String {
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
            size(p.rss_bytes),
            size(p.anon_bytes),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feed::Published;
    use crate::policy::{State, Thresholds};
    use crate::units::count;

    fn line<'a>(text: &'a str, head: &str) -> Option<&'a str> {
        text.lines().find_map(|l| l.strip_prefix(head)).map(str::trim)
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
        let text = render(&crate::api::status_view(&p, &Thresholds::default()));
        assert_eq!(line(&text, "oom "), Some("1 (processes of the group killed by the kernel's OOM killer)"), "{text}");
        assert_eq!(
            line(&text, "wake-ups "),
            Some("thresholds; events off (cgroup v2 only); next sample in 100 ms"),
            "{text}"
        );
        assert_eq!(line(&text, "brake "), Some("memory.high 480.0 MiB (96% of the limit; was max)"), "{text}");

        // No count, the timer only, no brake: said so, and no brake line.
        let p = Published::test(State::Normal);
        let text = render(&crate::api::status_view(&p, &Thresholds::default()));
        assert_eq!(line(&text, "oom "), Some("not counted by this kernel"));
        assert_eq!(line(&text, "wake-ups "), Some("timer only; next sample in 100 ms"));
        assert_eq!(line(&text, "brake "), None, "{text}");
        assert_eq!(line(&text, "config "), None, "nothing to say of a config that was never reloaded: {text}");
    }

    #[test]
    fn a_failed_reload_and_keys_waiting_for_a_restart_are_shown() {
        let p = Published::test(State::Normal);
        let mut v = crate::api::status_view(&p, &Thresholds::default());
        let reloads = crate::live::Reloads::new(Some("/etc/monitor/agent.toml".into()));
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
