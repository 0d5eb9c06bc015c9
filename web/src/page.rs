//! The home page's HTML: a header with the group's state, the range links, a status strip per process and the
//! charts inline as SVG. No external resources; readable without JavaScript (a few lines refresh it in place).

use crate::chart;
use crate::html::{escape, mib};
use crate::view::{Dashboard, GroupNow, Range};
use std::fmt::Write;

const STYLE: &str = "body{font-family:sans-serif;margin:1em 2em;color:#222}\
h1{font-size:1.3em;margin:.2em 0}h2{font-size:1.05em;margin:1.2em 0 .3em}\
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}\
th{background:#f4f4f4}td.l{text-align:left}.state-normal{color:#080}.state-refusing{color:#c70}\
.state-aborting{color:#c00;font-weight:bold}nav a{margin-right:.8em}nav a.on{font-weight:bold;text-decoration:none}\
svg{max-width:100%;height:auto;display:block}.note{background:#fff3cd;padding:4px 8px;margin:4px 0}\
.err{color:#c00}tr.stale td{color:#999}tr.total td{font-weight:bold}.oom{background:#c00;color:#fff;font-weight:bold;padding:6px 10px;margin:6px 0}";

/// Auto-refresh: every 5 s, unless the tab is hidden, the page is fetched again and its body swapped in place (no
/// reload: no flash, the scroll position kept). The page is complete without it.
const SCRIPT: &str = "setInterval(function(){if(document.hidden){return;}\
fetch(location.href,{cache:'no-store'}).then(function(r){return r.ok?r.text():null;}).then(function(t){\
if(t){var d=new DOMParser().parseFromString(t,'text/html');document.body.replaceWith(d.body);}}).catch(function(){});},5000);";

/// A chart of the page: its SVG from the dashboard.
pub type DrawFn = fn(&Dashboard) -> Result<String, chart::ChartError>;

/// The page's charts, top to bottom: id, heading and how each is drawn (the daily report's PNG draws the same).
pub const CHARTS: [(&str, &str, DrawFn); 5] = [
    ("memory", "Group memory: processes stacked, usage, limit, refuse/abort lines, brake", chart::memory),
    ("requests", "Requests per second", chart::requests),
    ("inflight", "In flight", chart::inflight),
    ("latency", "Latency p50 and p99", chart::latency),
    ("errors", "5xx responses and shed 503s per second", chart::errors),
];

/// The whole home page.
pub fn render(d: &Dashboard) -> String {
    let mut h = String::with_capacity(512 * 1024);
    let g = &d.group;
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>monitor: {}</title>\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><style>{STYLE}</style></head><body>",
        escape(&g.cgroup)
    );
    let _ = write!(
        h,
        "<h1>monitor · {}</h1><p>Group memory <b>{}</b> of <b>{}</b> ({}, {:.1}%) · state \
         <b class=\"state-{st}\" id=\"state\">{st}</b>{} · refuse at {:.0}%, abort at {:.0}% · probes: {}</p>",
        escape(&g.cgroup),
        mib(g.usage_bytes),
        mib(g.limit_bytes),
        escape(&g.limit_source),
        g.ratio * 100.0,
        if g.shadow { " (shadow: nothing enforced)" } else { "" },
        g.refuse_at * 100.0,
        g.abort_at * 100.0,
        escape(&g.probes),
        st = escape(&g.state),
    );
    kernel(&mut h, g);
    for n in &d.notes {
        let _ = write!(h, "<p class=\"note\">{}</p>", escape(n));
    }
    h.push_str("<nav>Range: ");
    if let Range::Minutes(_) = d.range {
        let _ = write!(h, "<a class=\"on\" href=\"/\">{}</a>", d.range.name());
    }
    for r in Range::ALL {
        let on = if r == d.range { " class=\"on\"" } else { "" };
        let _ = write!(h, "<a{on} href=\"/?range={0}\">{0}</a>", r.name());
    }
    let _ = write!(h, " · <span id=\"range\">showing {}</span></nav>", d.range.words());
    status_strip(&mut h, d);
    routes(&mut h, &d.routes);
    crate::fleet::table(&mut h, &d.peers);
    for (id, title, draw) in CHARTS {
        let _ = write!(h, "<h2>{title}</h2><div class=\"chart\" id=\"chart-{id}\">");
        match draw(d) {
            Ok(svg) => h.push_str(&svg),
            Err(e) => {
                let _ = write!(h, "<p class=\"err\">{}</p>", escape(&e.to_string()));
            }
        }
        h.push_str("</div>");
    }
    let _ = write!(h, "<script>{SCRIPT}</script></body></html>");
    h
}

/// The kernel's side: OOM kills (a red banner when there were any), the wake-up sources, the paced interval and
/// the brake.
fn kernel(h: &mut String, g: &GroupNow) {
    if let Some(n) = g.oom_kills.filter(|&n| n > 0) {
        let _ = write!(
            h,
            "<p class=\"oom\" id=\"oom-kills\">The kernel's OOM killer has killed {n} process{} of this group</p>",
            if n == 1 { "" } else { "es" }
        );
    }
    let oom = match g.oom_kills {
        Some(n) => n.to_string(),
        None => "not counted by this kernel".into(),
    };
    if g.unseen {
        let _ = write!(
            h,
            "<p class=\"oom\" id=\"unseen\">Aborting, but the memory over the line is held beyond the sampled \
             processes ({} that could not be sampled): the last resort holds off</p>",
            g.processes_unsampled
        );
    }
    if let Some(v) = &g.victim_requests {
        let _ = write!(
            h,
            "<div id=\"victim-requests\"><p>Told to abort: pid {}, with {} when it was chosen</p><ul>",
            v.pid,
            escape(&v.summary)
        );
        for l in &v.lines {
            let _ = write!(h, "<li>{}</li>", escape(l));
        }
        h.push_str("</ul></div>");
    }
    let wake = if g.wakeups.is_empty() { "timer only".to_string() } else { escape(&g.wakeups.join(", ")) };
    let _ = write!(h, "<p id=\"kernel\">OOM kills <b>{oom}</b> · wake-ups <b id=\"wakeups\">{wake}</b>");
    for off in &g.wakeups_off {
        let _ = write!(h, " (off: {})", escape(off));
    }
    let _ = write!(h, " · beyond the sampled processes <b id=\"unattributed\">{}</b>", mib(g.unattributed_bytes));
    if g.processes_unsampled > 0 {
        let _ = write!(h, " (<span class=\"err\" id=\"unsampled\">{} not sampled</span>)", g.processes_unsampled);
    }
    if g.next_sample_ms > 0 {
        let _ = write!(h, " · next sample in {} ms", g.next_sample_ms);
    }
    if let Some(b) = &g.brake {
        let at = b.at * 100.0;
        let _ = match (b.high_bytes, &b.error) {
            (Some(high), _) => {
                write!(h, " · brake: memory.high <b id=\"brake\">{}</b> ({at:.0}% of the limit)", mib(high))
            }
            (None, Some(e)) => write!(h, " · brake at {at:.0}% <span class=\"err\">not set: {}</span>", escape(e)),
            (None, None) => write!(h, " · brake at {at:.0}%: not set"),
        };
    }
    h.push_str("</p>");
}

/// The requests that grew memory: each route key's count, how many were measured alone, the 99th percentile of the
/// growth (marked when only shared measures exist) and how many were in flight at an abort or kill; the most
/// first. Left out when nothing was measured.
fn routes(h: &mut String, routes: &[crate::view::RouteGrowth]) {
    if routes.is_empty() {
        return;
    }
    h.push_str(
        "<h2>Requests that grew memory</h2><table id=\"routes\"><tr><th>route</th><th>requests</th>\
         <th>measured alone</th><th>p99 growth</th><th>at an abort or kill</th></tr>",
    );
    for r in routes {
        let shared = if r.p99_exact { "" } else { " (shared)" };
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}{shared}</td><td>{}</td></tr>",
            escape(&r.route),
            r.count,
            r.exact,
            mib(r.p99_bytes),
            r.at_abort
        );
    }
    h.push_str("</table>");
}

fn status_strip(h: &mut String, d: &Dashboard) {
    h.push_str(
        "<h2>Processes</h2><table id=\"processes\"><tr><th>process</th><th>role</th><th>pid</th>\
         <th>action / state</th><th>anon</th><th>RSS</th><th>requests</th><th>restarts</th><th>next retry</th></tr>",
    );
    for p in &d.processes {
        let pid = p.pid.map(|p| p.to_string()).unwrap_or_else(|| "–".into());
        let _ = write!(
            h,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{pid}</td><td class=\"l\">{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&p.name),
            escape(&p.role),
            escape(&p.state),
            mib(p.anon_bytes),
            mib(p.rss_bytes),
            p.requests_total,
            p.restarts,
            escape(p.next_retry.as_deref().unwrap_or("–")),
        );
    }
    if d.processes.is_empty() {
        h.push_str("<tr><td class=\"l\" colspan=\"9\">no processes in the group</td></tr>");
    }
    h.push_str("</table>");
}
