//! Memory per request under `monitor run`: two workers serve a light route and a heavy one (the fixture's
//! `alloc_mib`: it allocates and touches a known amount, holds it while it sleeps, and frees it once it has answered).
//! After a run of mixed requests, one at a time and spaced past the sampler's listing period so that each is
//! measured alone, the home page's "requests that grew memory" ranks the heavy route first with its p99 growth
//! within 10% of the amount, the light route's is near zero, and `/metrics` has both in its histogram.

use monitor_tests::http;
use monitor_tests::require_group;
use monitor_tests::run::{Run, Spec, TIMEOUT};
use std::time::Duration;

const HEAVY_MIB: f64 = 48.0;
const ROUNDS: usize = 6;

/// The page's table: (route, requests, measured alone, p99 growth in MiB, at an abort or kill), in its order.
fn table(page: &str) -> Vec<(String, u64, u64, f64, u64)> {
    let Some(start) = page.find("<table id=\"routes\">") else { return Vec::new() };
    let table = &page[start..page[start..].find("</table>").map_or(page.len(), |e| start + e)];
    table
        .split("<tr><td>")
        .skip(1)
        .filter_map(|row| {
            let cells: Vec<&str> = row.split("</td><td>").map(|c| c.trim_end_matches("</td></tr>")).collect();
            let mib = cells.get(3)?.split(' ').next()?.parse().ok()?;
            Some((cells[0].to_string(), cells[1].parse().ok()?, cells[2].parse().ok()?, mib, cells[4].parse().ok()?))
        })
        .collect()
}

#[test]
fn the_heavy_route_ranks_first_with_the_memory_it_grew() {
    if !require_group("the_heavy_route_ranks_first_with_the_memory_it_grew") {
        return;
    }
    let dir = monitor_tests::TempDir::new("growth");
    let db = dir.0.join("stats.db");
    let spec = Spec {
        workers: 2,
        limit_mib: 512,
        proxy: "master_serves_tx = false".into(),
        extra: monitor_tests::config::Config::new().stats(&db),
        // What it measures is each process's own anon (`RssAnon`), the same on either hierarchy; the emulated VM
        // would stretch its spaced requests past ten minutes.
        host_only: true,
        ..Spec::default()
    };
    let mut run = Run::start("growth", &spec);
    // The heavy requests go to tx1 and the light ones to tx2 (by their cache ids), so the requests on a process are
    // a round apart, past the sampler's listing period (a second) even on a loaded host: each is measured alone.
    let (to_tx1, to_tx2) = (run.cache_id_of("tx1"), run.cache_id_of("tx2"));
    let gap = monitor_tests::pace::scaled(Duration::from_millis(1100));
    std::thread::sleep(gap);
    for i in 0..ROUNDS {
        // Held 1.3 s: at least one listing falls while it is in flight.
        let path = format!("/r4/heavy/{i}?alloc_mib={HEAVY_MIB}&sleep_ms=1300");
        let heavy = run.get(&path, &[("X-Cache-Id", &to_tx1)]);
        assert_eq!(heavy.status, 200, "{}", heavy.text());
        std::thread::sleep(gap);
        let light = run.get(&format!("/r4/light/{i}"), &[("X-Cache-Id", &to_tx2)]);
        assert_eq!(light.status, 200, "{}", light.text());
        std::thread::sleep(gap);
    }
    let ours = |r: &&(String, u64, u64, f64, u64)| r.0.starts_with("GET /r4/heavy") || r.0.starts_with("GET /r4/light");
    let rows = monitor_tests::wait_until("every request measured", TIMEOUT, || {
        let page = http::get(run.web, "/", TIMEOUT).ok()?;
        let rows: Vec<_> = table(&page.text()).iter().filter(ours).cloned().collect();
        (rows.iter().map(|r| r.1).sum::<u64>() == 2 * ROUNDS as u64).then_some(rows)
    });
    eprintln!("requests that grew memory: {rows:?}");
    let (heavy, light) = (&rows[0], &rows[1]);
    assert_eq!(heavy.0, "GET /r4/heavy/:id", "the heavy route ranks first: {rows:?}");
    assert_eq!(light.0, "GET /r4/light/:id", "{rows:?}");
    assert_eq!((heavy.1, light.1), (ROUNDS as u64, ROUNDS as u64), "{rows:?}");
    assert_eq!((heavy.2, light.2), (ROUNDS as u64, ROUNDS as u64), "each measured alone: {rows:?}");
    assert!((heavy.3 / HEAVY_MIB - 1.0).abs() <= 0.10, "heavy p99 {} MiB against {HEAVY_MIB}: {rows:?}", heavy.3);
    assert!(light.3 < 1.0, "the light route grew nothing much: {rows:?}");
    assert_eq!((heavy.4, light.4), (0, 0), "no abort");
    let metrics = http::get(run.web, "/metrics", TIMEOUT).expect("/metrics").text();
    let heavy_count =
        format!("monitor_request_memory_growth_bytes_count{{route=\"GET /r4/heavy/:id\",measure=\"exact\"}} {ROUNDS}");
    assert!(metrics.contains(&heavy_count), "{heavy_count} not in /metrics");
    // None under 16 MiB: the buckets' edges fall where the fine histogram's do.
    let le = "monitor_request_memory_growth_bytes_bucket{route=\"GET /r4/heavy/:id\",measure=\"exact\",le=\"1.6777216e+07\"} 0";
    assert!(metrics.contains(le), "{le} not in /metrics");
    // Kept per minute in the stats database (the last minute at the stop): the day's report ranks them the same.
    assert!(run.terminate(TIMEOUT).success(), "{}", run.stderr());
    let out = monitor_tests::run_monitor(&["report", "--db", &db.display().to_string(), "--json"], TIMEOUT);
    assert!(out.status.success(), "report failed: {}", out.stderr);
    let r: serde_json::Value = serde_json::from_str(&out.stdout).expect("report JSON");
    let routes = &r["routes"];
    assert_eq!(routes[0]["route"], "GET /r4/heavy/:id", "{r}");
    assert_eq!(routes[0]["requests"].as_u64(), Some(ROUNDS as u64), "{r}");
    let p99 = routes[0]["p99_growth_bytes"].as_f64().unwrap_or(0.0) / (1u64 << 20) as f64;
    assert!((p99 / HEAVY_MIB - 1.0).abs() <= 0.10, "the report's heavy p99 {p99} MiB: {r}");
}
