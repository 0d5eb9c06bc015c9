//! `monitor report [--date YYYY-MM-DD] [--json] [--png FILE]`: one UTC day from the stats database: peak and mean
//! memory per process, requests per process and in total, refusals, aborts, restarts, the guard's kills and
//! recycles, and under `[cluster]` the membership's events; `--png` draws the day ([`png`]).

pub mod png;

use crate::base::text::controls_only as esc;
use crate::history::events::{ClusterEvent, KillEvent, RecycleEvent};
use crate::history::ring::{Labels, Minute};
use crate::history::store::Store;
use crate::history::HistoryError;
use serde::{Deserialize, Serialize};
use std::fmt::Write;
use std::path::Path;

/// What can go wrong with a report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("bad date {0:?}: use today, yesterday or YYYY-MM-DD")]
    Date(String),
    #[error("{0} is not a monitor stats database (SQLite could not read it as a database)")]
    NotADatabase(std::path::PathBuf),
    #[error("no stats database: pass --db FILE, or --config FILE whose [stats] path names it")]
    NoDatabase,
    #[error("no stats database at {0}")]
    Missing(std::path::PathBuf),
    #[error(transparent)]
    History(#[from] HistoryError),
    #[error("--png: {0}")]
    Png(String),
}

/// One process over the day.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessDay {
    pub process: String,
    pub role: String,
    pub peak_rss_bytes: u64,
    pub mean_rss_bytes: u64,
    pub requests: u64,
    pub errors_5xx: u64,
    pub restarts: u64,
}

/// The day's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DayReport {
    pub date: String,
    /// Minutes with data.
    pub minutes: usize,
    pub peak_usage_bytes: u64,
    pub mean_usage_bytes: u64,
    pub limit_bytes: u64,
    pub requests_total: u64,
    pub refusals: u64,
    pub refusing_seconds: u64,
    pub aborts: u64,
    pub aborting_seconds: u64,
    pub shed_requests: u64,
    pub restarts: u64,
    pub processes: Vec<ProcessDay>,
    /// Under `[cluster]`: the changes of the members' states this node saw that day, oldest first (empty on a
    /// single host, and in a report of a database from before they were kept).
    #[serde(default)]
    pub cluster_events: Vec<ClusterEvent>,
    /// The guard's kills that day (sent, not sent, or decided in shadow mode), oldest first (empty in a report of a
    /// database from before they were kept).
    #[serde(default)]
    pub kills: Vec<KillEvent>,
    /// The guard's recycles that day (graceful restarts: sent, not sent, or decided in shadow mode), oldest first,
    /// apart from the kills (empty in a report of a database from before they were kept).
    #[serde(default)]
    pub recycles: Vec<RecycleEvent>,
    /// Under `monitor run`: the requests that grew memory that day, per route key, the largest p99 growth first
    /// (empty in a report of a database from before they were kept).
    #[serde(default)]
    pub routes: Vec<RouteDay>,
}

/// One route key's memory per request over the day.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouteDay {
    pub route: String,
    pub requests: u64,
    /// Measured alone on their process.
    pub exact: u64,
    /// The 99th percentile of the growth: of the exact measures when there are any, else of the shared.
    pub p99_growth_bytes: u64,
    pub p99_exact: bool,
    /// In flight when their process was told to abort or was killed.
    pub at_abort: u64,
}

/// The day's route keys, the largest p99 growth first (then the most requests).
fn route_days(rows: crate::history::store::RouteRows) -> Vec<RouteDay> {
    crate::history::store::ranked(rows)
        .into_iter()
        .map(|(route, k, (p99_growth_bytes, p99_exact))| RouteDay {
            route,
            requests: k.count,
            exact: k.exact.count(),
            p99_growth_bytes,
            p99_exact,
            at_abort: k.at_abort,
        })
        .collect()
}

/// The date (`YYYY-MM-DD`, UTC) of the day that starts `day × 86,400` seconds after the Unix epoch.
pub(crate) fn civil_from_days(day: u64) -> String {
    let start = std::time::UNIX_EPOCH + std::time::Duration::from_secs(day.saturating_mul(86_400));
    let stamp = humantime::format_rfc3339_seconds(start).to_string();
    stamp.get(..10).unwrap_or_default().to_string()
}

/// The start (Unix seconds) of the UTC day `s` names: `today` or `yesterday` (from `now`, Unix seconds), or a date.
pub fn parse_day(s: &str, now: u64) -> Result<u64, ReportError> {
    let today = now / 86_400 * 86_400;
    match s {
        "today" => Ok(today),
        "yesterday" => Ok(today.saturating_sub(86_400)),
        date => parse_date(date),
    }
}

/// The start (Unix seconds) of the UTC day `YYYY-MM-DD` (1970 to 9999; a day the month does not have is refused).
pub(crate) fn parse_date(s: &str) -> Result<u64, ReportError> {
    let bad = || ReportError::Date(s.to_string());
    let digit_or_dash = |(i, b): (usize, u8)| if i == 4 || i == 7 { b == b'-' } else { b.is_ascii_digit() };
    if s.len() != 10 || !s.bytes().enumerate().all(digit_or_dash) {
        return Err(bad());
    }
    let start = humantime::parse_rfc3339(&format!("{s}T00:00:00Z")).map_err(|_| bad())?;
    start.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).map_err(|_| bad())
}

/// Sums a day's minutes.
pub(crate) fn summarize(date: &str, minutes: &[Minute], labels: &Labels) -> DayReport {
    let mut procs: Vec<(u16, ProcessDay, u64, u64)> = Vec::new();
    for m in minutes {
        for p in &m.procs {
            let i = match procs.iter().position(|x| x.0 == p.label) {
                Some(i) => i,
                None => {
                    let (name, role) = labels.get(p.label);
                    let day = ProcessDay {
                        process: name.into(),
                        role: role.into(),
                        peak_rss_bytes: 0,
                        mean_rss_bytes: 0,
                        requests: 0,
                        errors_5xx: 0,
                        restarts: 0,
                    };
                    procs.push((p.label, day, 0, 0));
                    procs.len() - 1
                }
            };
            let (_, d, sum, n) = &mut procs[i];
            d.peak_rss_bytes = d.peak_rss_bytes.max(p.rss_max);
            *sum += p.rss_mean;
            *n += 1;
            d.requests += u64::from(p.requests);
            d.errors_5xx += u64::from(p.err5xx);
            d.restarts += p.restarts as u64;
        }
    }
    let processes: Vec<ProcessDay> = procs
        .into_iter()
        .map(|(_, mut d, sum, n)| {
            d.mean_rss_bytes = sum / n.max(1);
            d
        })
        .collect();
    let n = minutes.len() as u64;
    DayReport {
        date: date.to_string(),
        minutes: minutes.len(),
        peak_usage_bytes: minutes.iter().map(|m| m.usage_max).max().unwrap_or(0),
        mean_usage_bytes: minutes.iter().map(|m| m.usage_mean).sum::<u64>() / n.max(1),
        limit_bytes: minutes.last().map(|m| m.limit).unwrap_or(0),
        requests_total: processes.iter().map(|p| p.requests).sum(),
        refusals: minutes.iter().map(|m| m.refusals as u64).sum(),
        refusing_seconds: minutes.iter().map(|m| m.refusing_s as u64).sum(),
        aborts: minutes.iter().map(|m| m.aborts as u64).sum(),
        aborting_seconds: minutes.iter().map(|m| m.aborting_s as u64).sum(),
        shed_requests: minutes.iter().map(|m| m.shed).sum(),
        restarts: processes.iter().map(|p| p.restarts).sum(),
        processes,
        cluster_events: Vec::new(),
        kills: Vec::new(),
        recycles: Vec::new(),
        routes: Vec::new(),
    }
}

/// Reads the day starting at `day_start` from the database at `path`.
pub fn load(path: &Path, day_start: u64) -> Result<(DayReport, Vec<Minute>, Labels), ReportError> {
    if !path.is_file() {
        return Err(ReportError::Missing(path.to_path_buf()));
    }
    let not_a_database = |e: HistoryError| match e {
        HistoryError::Db(rusqlite::Error::SqliteFailure(f, _))
        | HistoryError::Open { source: rusqlite::Error::SqliteFailure(f, _), .. }
            if f.code == rusqlite::ErrorCode::NotADatabase =>
        {
            ReportError::NotADatabase(path.to_path_buf())
        }
        e => e.into(),
    };
    let store = Store::open_read_only(path).map_err(not_a_database)?;
    let mut labels = Labels::default();
    let minutes = store.minutes(day_start, day_start + 86_400, &mut labels).map_err(not_a_database)?;
    let events = store.events(day_start, day_start + 86_400).map_err(not_a_database)?;
    let kills = store.kills(day_start, day_start + 86_400).map_err(not_a_database)?;
    let recycles = store.recycles(day_start, day_start + 86_400).map_err(not_a_database)?;
    let routes = route_days(store.routes(day_start, day_start + 86_400).map_err(not_a_database)?);
    let date = civil_from_days(day_start / 86_400);
    let report = DayReport { cluster_events: events, kills, recycles, routes, ..summarize(&date, &minutes, &labels) };
    Ok((report, minutes, labels))
}

/// The report as a text table. Its outside strings (process names, route keys, reasons, node names) are escaped
/// ([`crate::base::text::controls_only`]), and what the text holds besides its line breaks is, once more, before
/// it is printed: a database written by an older agent may hold names read raw.
pub fn text(r: &DayReport) -> String {
    crate::base::text::controls_but_newlines(&report_text(r)).into_owned()
}

fn report_text(r: &DayReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "monitor report for {} (UTC), {} of data",
        r.date,
        crate::base::units::count(r.minutes as u64, "minute")
    );
    let _ = writeln!(
        o,
        "group: peak {} mean {} of {}; requests {}; refusals {} ({} s refusing); aborts {} ({} s aborting); \
         shed {}; restarts {}",
        crate::base::units::size(r.peak_usage_bytes),
        crate::base::units::size(r.mean_usage_bytes),
        crate::base::units::size(r.limit_bytes),
        r.requests_total,
        r.refusals,
        r.refusing_seconds,
        r.aborts,
        r.aborting_seconds,
        r.shed_requests,
        r.restarts
    );
    let _ = writeln!(
        o,
        "{:<20} {:<8} {:>12} {:>12} {:>10} {:>8} {:>8}",
        "PROCESS", "ROLE", "PEAK RSS", "MEAN RSS", "REQUESTS", "5XX", "RESTARTS"
    );
    for p in &r.processes {
        let _ = writeln!(
            o,
            "{:<20} {:<8} {:>12} {:>12} {:>10} {:>8} {:>8}",
            esc(&p.process),
            esc(&p.role),
            crate::base::units::size(p.peak_rss_bytes),
            crate::base::units::size(p.mean_rss_bytes),
            p.requests,
            p.errors_5xx,
            p.restarts
        );
    }
    routes_text(&mut o, &r.routes);
    kills_text(&mut o, &r.kills);
    recycles_text(&mut o, &r.recycles);
    cluster_text(&mut o, &r.cluster_events);
    o
}

/// The "requests that grew memory" section; nothing when none were measured.
fn routes_text(o: &mut String, routes: &[RouteDay]) {
    if routes.is_empty() {
        return;
    }
    let _ = writeln!(o, "\nrequests that grew memory (growth of their process's anon while in flight):");
    let _ = writeln!(o, "{:<40} {:>10} {:>10} {:>14} {:>9}", "ROUTE", "REQUESTS", "ALONE", "P99 GROWTH", "AT ABORT");
    for r in routes {
        let p99 = format!("{}{}", crate::base::units::size(r.p99_growth_bytes), if r.p99_exact { "" } else { "*" });
        let route = esc(&r.route);
        let _ = writeln!(o, "{:<40} {:>10} {:>10} {:>14} {:>9}", route, r.requests, r.exact, p99, r.at_abort);
    }
    if routes.iter().any(|r| !r.p99_exact) {
        let _ = writeln!(o, "* of requests that shared their process with others: each is given the whole growth");
    }
}

/// The "kills" section: the day's kills of the guard's last resort, each with its time, process and reason;
/// nothing when there are none.
fn kills_text(o: &mut String, kills: &[KillEvent]) {
    if kills.is_empty() {
        return;
    }
    let sent = kills.iter().filter(|k| k.enforced && k.error.is_none()).count();
    let shadow = kills.iter().filter(|k| !k.enforced).count();
    let failed = kills.len() - sent - shadow;
    let _ = writeln!(
        o,
        "\nkills: {} by the guard's last resort ({sent} sent, {shadow} shadow: not enforced, {failed} not sent)",
        kills.len()
    );
    let _ = writeln!(o, "{:<14} {:<20} {:>8} {:>12}  REASON", "TIME (UTC)", "PROCESS", "PID", "RSS");
    for k in kills {
        let note = match (&k.error, k.enforced) {
            (_, false) => " (shadow: not enforced)".to_string(),
            (Some(e), true) => format!(" (not sent: {})", esc(e)),
            (None, true) => String::new(),
        };
        let process: String = k.process.chars().map(|c| if c.is_control() { '?' } else { c }).take(20).collect();
        let _ = writeln!(
            o,
            "{:<14} {:<20} {:>8} {:>12}  {}{note}",
            time_of_day(k.at_unix_ms),
            process,
            k.pid,
            crate::base::units::size(k.rss_bytes),
            esc(&k.reason)
        );
    }
}

/// The "recycles" section: the day's graceful restarts by the guard, each with its time, process, the signal sent
/// and the reason; nothing when there are none.
fn recycles_text(o: &mut String, recycles: &[RecycleEvent]) {
    if recycles.is_empty() {
        return;
    }
    let sent = recycles.iter().filter(|r| r.enforced && r.error.is_none()).count();
    let shadow = recycles.iter().filter(|r| !r.enforced).count();
    let failed = recycles.len() - sent - shadow;
    let _ = writeln!(
        o,
        "\nrecycles: {} graceful restarts by the guard ({sent} sent, {shadow} shadow: not enforced, {failed} not sent)",
        recycles.len()
    );
    let _ = writeln!(o, "{:<14} {:<20} {:>8} {:>12} {:<7} REASON", "TIME (UTC)", "PROCESS", "PID", "ANON", "SIGNAL");
    for r in recycles {
        let note = match (&r.error, r.enforced) {
            (_, false) => " (shadow: not enforced)".to_string(),
            (Some(e), true) => format!(" (not sent: {})", esc(e)),
            (None, true) if r.drained_ms > 0 => format!(" (after {:.1} s of draining)", r.drained_ms as f64 / 1000.0),
            (None, true) => String::new(),
        };
        let process: String = r.process.chars().map(|c| if c.is_control() { '?' } else { c }).take(20).collect();
        let _ = writeln!(
            o,
            "{:<14} {:<20} {:>8} {:>12} {:<7} {}{note}",
            time_of_day(r.at_unix_ms),
            process,
            r.pid,
            crate::base::units::size(r.anon_bytes),
            r.signal.as_deref().unwrap_or("-"),
            esc(&r.reason)
        );
    }
}

/// The kinds of cluster events in the order a member goes through them.
const KINDS: [&str; 5] = ["joined", "suspect", "alive again", "dead", "left"];

/// How many events of each kind, in the order of [`KINDS`] then any other kind in the order first seen.
pub(crate) fn count_kinds(events: &[ClusterEvent]) -> Vec<(&str, usize)> {
    let mut counts: Vec<(&str, usize)> = KINDS.iter().map(|k| (*k, 0)).collect();
    for e in events {
        match counts.iter_mut().find(|(k, _)| *k == e.what) {
            Some((_, n)) => *n += 1,
            None => counts.push((e.what.as_str(), 1)),
        }
    }
    counts.retain(|(_, n)| *n > 0);
    counts
}

/// `HH:MM:SS.mmm` (UTC) of a time in ms since the Unix epoch.
fn time_of_day(at_unix_ms: u64) -> String {
    let ms = at_unix_ms % 86_400_000;
    let (h, m, s) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60);
    format!("{h:02}:{m:02}:{s:02}.{:03}", ms % 1000)
}

/// The "cluster" section: the day's membership events with their counts; nothing when there are none.
fn cluster_text(o: &mut String, events: &[ClusterEvent]) {
    if events.is_empty() {
        return;
    }
    let counts: Vec<String> = count_kinds(events).into_iter().map(|(k, n)| format!("{k} {n}")).collect();
    let _ =
        writeln!(o, "\ncluster: {}: {}", crate::base::units::count(events.len() as u64, "event"), counts.join(", "));
    let _ = writeln!(o, "{:<14} {:<20} {:<12} FROM -> TO", "TIME (UTC)", "NODE", "WHAT");
    for e in events {
        let (node, from, to) = (esc(&e.node), esc(e.from.as_deref().unwrap_or("-")), esc(&e.to));
        let _ = writeln!(o, "{:<14} {:<20} {:<12} {} -> {}", time_of_day(e.at_unix_ms), node, e.what, from, to);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::ring::ProcMinute;

    #[test]
    fn dates() {
        assert_eq!(parse_date("1970-01-02").ok(), Some(86_400));
        assert_eq!(parse_date("2024-03-01").ok(), Some(1_709_251_200));
        assert_eq!(parse_date("2024-02-29").ok(), Some(1_709_164_800), "a leap day");
        for bad in
            ["2024-02-30", "2023-02-29", "2024-13-01", "2024-00-10", "1969-12-31", "24-1-1x", "", "2024-01-01-01"]
        {
            assert!(parse_date(bad).is_err(), "{bad}");
        }
        assert_eq!(civil_from_days(19_783), "2024-03-01");
        assert_eq!(civil_from_days(0), "1970-01-01");
        let now = 1_709_251_200 + 3_600; // 2024-03-01 01:00 UTC
        assert_eq!(parse_day("today", now).ok(), Some(1_709_251_200));
        assert_eq!(parse_day("yesterday", now).ok(), Some(1_709_251_200 - 86_400));
        assert_eq!(parse_day("2024-03-01", now).ok(), Some(1_709_251_200));
        assert!(parse_day("tomorrow", now).is_err());
    }

    #[test]
    fn a_file_that_is_not_a_database_says_so_once() {
        let e = load(Path::new("/etc/passwd"), 0).err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(e, "/etc/passwd is not a monitor stats database (SQLite could not read it as a database)");
    }

    fn event(at_unix_ms: u64, node: &str, what: &str, from: Option<&str>, to: &str) -> ClusterEvent {
        let (node, what, to) = (node.to_string(), what.to_string(), to.to_string());
        ClusterEvent { at_unix_ms, node, what, from: from.map(String::from), to }
    }

    /// A day of a node that saw b join, go suspect, come back, then die, written to a real database with the
    /// events of the days around it.
    #[test]
    fn the_days_membership_events_are_listed_and_counted() {
        let dir = monitor_tests::temp_dir("report-events");
        let path = dir.join("stats.db");
        let day = parse_date("2024-03-01").expect("a date");
        let ms = |h: u64, m: u64, s: u64, milli: u64| (day + h * 3600 + m * 60 + s) * 1000 + milli;
        let events = [
            event(ms(9, 15, 2, 40), "b", "joined", None, "alive"),
            event(ms(13, 0, 0, 5), "b", "suspect", Some("alive"), "suspect"),
            event(ms(13, 0, 0, 750), "b", "alive again", Some("suspect"), "alive"),
            event(ms(23, 59, 59, 999), "b", "dead", Some("alive"), "dead"),
        ];
        {
            let mut store = Store::open(&path).expect("open");
            let mut labels = Labels::default();
            let label = labels.intern("am0", "master");
            let procs = vec![ProcMinute { label, rss_max: 10, rss_mean: 10, ..ProcMinute::default() }];
            store.insert(&Minute { t: day + 60, limit: 100, procs, ..Minute::default() }, &labels).expect("minute");
            let around = [
                event(day * 1000 - 1, "c", "left", Some("alive"), "left"),
                event(ms(24, 0, 0, 0), "c", "joined", None, "alive"),
            ];
            store.insert_events(&around).expect("the days around");
            store.insert_events(&events).expect("events");
        }
        let (r, _, _) = load(&path, day).expect("report");
        assert_eq!(r.cluster_events, events, "the day's, oldest first");
        let text = text(&r);
        let section = text.split_once("\ncluster: ").map(|(_, s)| s).unwrap_or_default();
        let lines: Vec<&str> = section.lines().collect();
        assert_eq!(lines.first(), Some(&"4 events: joined 1, suspect 1, alive again 1, dead 1"), "{text}");
        let rows: Vec<Vec<&str>> = lines.iter().skip(2).map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(rows[0], ["09:15:02.040", "b", "joined", "-", "->", "alive"], "{text}");
        assert_eq!(rows[2], ["13:00:00.750", "b", "alive", "again", "suspect", "->", "alive"], "{text}");
        assert_eq!(rows[3], ["23:59:59.999", "b", "dead", "alive", "->", "dead"], "{text}");
        assert_eq!(rows.len(), 4, "{text}");
        let json = serde_json::to_value(&r).expect("json");
        let first = &json["cluster_events"][0];
        assert_eq!(first["at_unix_ms"], ms(9, 15, 2, 40));
        assert_eq!((first["node"].as_str(), first["what"].as_str()), (Some("b"), Some("joined")));
        assert_eq!((first["from"].is_null(), first["to"].as_str()), (true, Some("alive")));
        assert_eq!(json["cluster_events"][3]["from"], "alive");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The day's memory per request: the minutes of the day summed per route key (a minute written twice adds up),
    /// the largest p99 growth first; minutes of other days left out.
    #[test]
    fn the_days_requests_that_grew_memory_are_ranked() {
        let dir = monitor_tests::temp_dir("report-routes");
        let path = dir.join("stats.db");
        let day = parse_date("2024-03-01").expect("a date");
        let minute = |heavy_mib: u64, shared: bool| {
            let g = crate::feed::growth::RouteGrowth::default();
            g.record("GET /heavy/:id", heavy_mib << 20, !shared, heavy_mib > 60);
            g.record("GET /light", 0, true, false);
            g.take()
        };
        {
            let mut store = Store::open(&path).expect("open");
            store.insert_routes(day - 60, &minute(900, false)).expect("the day before");
            store.insert_routes(day + 60, &minute(48, false)).expect("a minute");
            store.insert_routes(day + 60, &minute(50, false)).expect("the same minute again");
            store.insert_routes(day + 120, &minute(64, true)).expect("a shared one");
        }
        let (r, _, _) = load(&path, day).expect("load");
        let heavy = &r.routes[0];
        assert_eq!((heavy.route.as_str(), heavy.requests, heavy.exact, heavy.at_abort), ("GET /heavy/:id", 3, 2, 1));
        assert!(heavy.p99_exact && (heavy.p99_growth_bytes as f64 / (50u64 << 20) as f64 - 1.0).abs() < 0.03);
        assert_eq!(
            (r.routes[1].route.as_str(), r.routes[1].requests, r.routes[1].p99_growth_bytes),
            ("GET /light", 3, 0)
        );
        let text = text(&r);
        let section: Vec<&str> = text.lines().skip_while(|l| !l.starts_with("requests that grew memory")).collect();
        let row: Vec<&str> = section[2].split_whitespace().collect();
        assert_eq!(row, ["GET", "/heavy/:id", "3", "2", "50.4", "MiB", "1"], "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A database holds what processes, clients and members said: none of it adds a line to the report or reaches
    /// the terminal as an escape.
    #[test]
    fn outside_strings_in_the_report_are_escaped() {
        let mut r = summarize("2024-03-01", &[], &Labels::default());
        r.kills = vec![KillEvent {
            at_unix_ms: 1000,
            pid: 9,
            process: "a\nkilled: x".into(),
            role: "worker".into(),
            why: "over_kill_at".into(),
            reason: "a\nkilled: x grew \x1b[2J".into(),
            rss_bytes: 1,
            anon_bytes: 1,
            ratio: 0.97,
            round: 1,
            enforced: true,
            error: None,
        }];
        r.routes = vec![RouteDay {
            route: "GET /\x1b]0;t\x07".into(),
            requests: 1,
            exact: 1,
            p99_growth_bytes: 1,
            p99_exact: true,
            at_abort: 0,
        }];
        r.cluster_events = vec![ClusterEvent {
            at_unix_ms: 1000,
            node: "b\nkilled: z".into(),
            what: "joined".into(),
            from: None,
            to: "alive".into(),
        }];
        let text = text(&r);
        assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text:?}");
        assert!(!text.lines().any(|l| l.starts_with("killed: ")), "{text}");
        assert!(text.contains("a\\nkilled: x grew \\e[2J") && text.contains("b\\nkilled: z"), "{text}");
    }

    #[test]
    fn the_days_kills_are_counted_and_listed_with_their_reason() {
        let dir = monitor_tests::temp_dir("report-kills");
        let path = dir.join("stats.db");
        let day = parse_date("2024-03-01").expect("a date");
        let kill = |at_s: u64, pid: u32, enforced: bool, error: Option<&str>| KillEvent {
            at_unix_ms: at_s * 1000 + 250,
            pid,
            process: "node".into(),
            role: "worker".into(),
            why: "abort_not_obeyed".into(),
            reason: "the abort was not obeyed".into(),
            rss_bytes: 300 << 20,
            anon_bytes: 280 << 20,
            ratio: 0.95,
            round: 1,
            enforced,
            error: error.map(String::from),
        };
        let kills = [
            kill(day + 3_600, 11, true, None),
            kill(day + 7_200, 12, false, None),
            kill(day + 7_300, 13, true, Some("pid 13 is gone")),
        ];
        {
            let mut store = Store::open(&path).expect("open");
            store.insert_kills(&[kill(day - 10, 9, true, None), kill(day + 86_400, 10, true, None)]).expect("around");
            store.insert_kills(&kills).expect("kills");
        }
        let (r, _, _) = load(&path, day).expect("load");
        assert_eq!(r.kills, kills, "the day's, oldest first");
        let text = text(&r);
        let section: Vec<&str> = text.lines().skip_while(|l| !l.starts_with("kills:")).collect();
        assert_eq!(
            section.first(),
            Some(&"kills: 3 by the guard's last resort (1 sent, 1 shadow: not enforced, 1 not sent)"),
            "{text}"
        );
        assert!(
            section.get(2).is_some_and(|l| l.starts_with("01:00:00.250   node")
                && l.contains(" 11 ")
                && l.ends_with("the abort was not obeyed")),
            "{text}"
        );
        assert!(section.get(3).is_some_and(|l| l.ends_with("(shadow: not enforced)")), "{text}");
        assert!(section.get(4).is_some_and(|l| l.ends_with("(not sent: pid 13 is gone)")), "{text}");
        let json = serde_json::to_value(&r).expect("json");
        assert_eq!(json["kills"][0]["reason"], "the abort was not obeyed");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The day's recycles, in a section of their own: counted, listed with their signal and reason, and in the
    /// JSON apart from the kills.
    #[test]
    fn the_days_recycles_are_counted_and_listed_apart_from_the_kills() {
        use crate::history::store::fixtures::{kill, recycle};
        let dir = monitor_tests::temp_dir("report-recycles");
        let path = dir.join("stats.db");
        let day = parse_date("2024-03-01").expect("a date");
        let at = |s: u64| (day + s) * 1000 + 250;
        let recycles = [
            recycle(at(3_600), 11, true),
            recycle(at(7_200), 12, false),
            RecycleEvent { error: Some("no [actions] recycle_signal is set".into()), ..recycle(at(7_300), 13, true) },
        ];
        {
            let mut store = Store::open(&path).expect("open");
            store.insert_recycles(&[recycle(at(0) - 1_000, 9, true), recycle(at(86_400), 10, true)]).expect("around");
            store.insert_recycles(&recycles).expect("recycles");
            store.insert_kills(&[kill(at(3_000), 21, true)]).expect("a kill");
        }
        let (r, _, _) = load(&path, day).expect("load");
        assert_eq!(r.recycles, recycles, "the day's, oldest first");
        assert_eq!(r.kills.iter().map(|k| k.pid).collect::<Vec<_>>(), [21], "the kills apart");
        let text = text(&r);
        let section: Vec<&str> = text.lines().skip_while(|l| !l.starts_with("recycles:")).collect();
        assert_eq!(
            section.first(),
            Some(&"recycles: 3 graceful restarts by the guard (1 sent, 1 shadow: not enforced, 1 not sent)"),
            "{text}"
        );
        let row: Vec<&str> = section.get(2).map(|l| l.split_whitespace().take(6).collect()).unwrap_or_default();
        assert_eq!(row, ["01:00:00.250", "node", "11", "280.0", "MiB", "TERM"], "{text}");
        assert!(section.get(2).is_some_and(|l| l.ends_with("holds its memory (after 1.2 s of draining)")), "{text}");
        assert!(section.get(3).is_some_and(|l| l.ends_with("(shadow: not enforced)")), "{text}");
        assert!(
            section.get(4).is_some_and(|l| l.ends_with("(not sent: no [actions] recycle_signal is set)")),
            "{text}"
        );
        let kills_at = text.find("\nkills:").expect("a kills section");
        assert!(kills_at < text.find("\nrecycles:").unwrap_or(0), "after the kills: {text}");
        let json = serde_json::to_value(&r).expect("json");
        assert_eq!(json["recycles"][0]["signal"], "TERM");
        assert_eq!(json["recycles"][0]["pid"], 11);
        assert_eq!(json["kills"][0]["pid"], 21);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_single_host_prints_no_cluster_section() {
        let r = summarize("2024-03-01", &[], &Labels::default());
        assert!(!text(&r).contains("cluster"), "{}", text(&r));
        let json = serde_json::to_value(&r).expect("json");
        assert_eq!(json["cluster_events"], serde_json::json!([]));
        // A report written before the events were kept reads back with none.
        let mut old = json;
        old.as_object_mut().map(|o| o.remove("cluster_events"));
        old.as_object_mut().map(|o| o.remove("kills"));
        old.as_object_mut().map(|o| o.remove("recycles"));
        let back: DayReport = serde_json::from_value(old).expect("an older report");
        assert_eq!(back, r);
    }

    #[test]
    fn sums_a_day_per_process() {
        let mut labels = Labels::default();
        let m0 = labels.intern("m0", "master");
        let tx = labels.intern("tx1", "worker");
        let minute = |t: u64, rss: u64, req: u32, restarts: u16| Minute {
            t,
            usage_max: rss * 2,
            usage_mean: rss,
            limit: 1000,
            refusals: 1,
            refusing_s: 10,
            procs: vec![
                ProcMinute { label: m0, rss_max: rss, rss_mean: rss, requests: req, ..ProcMinute::default() },
                ProcMinute {
                    label: tx,
                    rss_max: rss + 1,
                    rss_mean: rss,
                    requests: 2 * req,
                    restarts,
                    ..ProcMinute::default()
                },
            ],
            ..Minute::default()
        };
        let r = summarize("2024-03-01", &[minute(0, 100, 5, 0), minute(60, 300, 7, 1)], &labels);
        assert_eq!((r.peak_usage_bytes, r.mean_usage_bytes, r.requests_total), (600, 200, 36));
        assert_eq!((r.refusals, r.refusing_seconds, r.restarts), (2, 20, 1));
        assert_eq!(r.processes[1].process, "tx1");
        assert_eq!(
            (r.processes[1].peak_rss_bytes, r.processes[1].mean_rss_bytes, r.processes[1].requests),
            (301, 200, 24)
        );
        assert!(text(&r).contains("tx1"));
    }
}
