//! The membership's events in the history: two nodes, each a real `monitor run` with a stats database; b is killed
//! (SIGKILL, no leave told) and once a has declared it dead, `monitor report --json` on a's database, read while a
//! still runs, lists b's joined, suspect and dead, in order, with their times.

use super::*;
use monitor_tests::require_program;
use std::path::Path;

/// `node`'s `monitor run` over a python3 http.server master and worker, with its stats database at `db`.
fn start_with_stats(node: &Node, seeds: &[SocketAddr], dir: &Path, db: &Path) -> Launched {
    node.launch(&format!("cluster-events-{}", node.name), node.python_config(seeds, dir).stats(db))
}

fn sigkill(pid: i32) {
    signal(pid, libc::SIGKILL);
}

/// `monitor report --db <db> --json` (today, UTC), parsed.
fn report(db: &Path) -> Value {
    let out =
        monitor_tests::run_monitor(&["report", "--db", &db.display().to_string(), "--json"], Duration::from_secs(20));
    assert!(out.status.success(), "monitor report failed: {}{}", out.stdout, out.stderr);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("report JSON: {e}\n{}", out.stdout))
}

/// b's events in a report: (what, from, to, at_unix_ms).
fn events_of_b(r: &Value) -> Vec<(String, Value, Value, u64)> {
    let events = r["cluster_events"].as_array().cloned().unwrap_or_default();
    events
        .iter()
        .filter(|e| e["node"] == "b")
        .map(|e| {
            let what = e["what"].as_str().unwrap_or_default().to_string();
            (what, e["from"].clone(), e["to"].clone(), e["at_unix_ms"].as_u64().unwrap_or(0))
        })
        .collect()
}

#[test]
fn a_killed_nodes_joined_suspect_and_dead_are_in_the_report_within_seconds() {
    let test = "a_killed_nodes_joined_suspect_and_dead_are_in_the_report_within_seconds";
    if !require_program(test, "python3") {
        return;
    }
    let _serial = one_at_a_time();
    let dir = monitor_tests::temp_dir("cluster-events");
    let (a, b) = (Node::new("a", 10), Node::new("b", 11));
    let (db_a, db_b) = (dir.join("a.db"), dir.join("b.db"));
    let node_a = start_with_stats(&a, &[], &dir, &db_a);
    wait_member(&node_a, "a", |m| m["self"] == true, Duration::from_secs(20));
    let started = std::time::SystemTime::now();
    let node_b = start_with_stats(&b, &[a.gossip_addr()], &dir, &db_b);
    wait_member(&node_a, "b", |m| m["state"] == "alive", Duration::from_secs(20));
    wait_member(&node_b, "a", |m| m["state"] == "alive", Duration::from_secs(20));

    // kill -9: no leave is told, and b's servers go too, so that nothing of b answers.
    let servers = children(node_b.pid());
    assert_eq!(servers.len(), 2, "b's master and worker: {servers:?}");
    sigkill(i32::try_from(node_b.pid()).expect("a pid"));
    for s in &servers {
        sigkill(*s);
    }
    let killed = std::time::SystemTime::now();
    wait_member(&node_a, "b", |m| m["state"] == "dead", Duration::from_secs(10));
    let dead_seen = Instant::now();

    // The report reads a's database while a runs: the events are there within seconds, not at the minute's end.
    let mut got = Vec::new();
    while dead_seen.elapsed() < Duration::from_secs(5) {
        got = events_of_b(&report(&db_a));
        if got.iter().any(|e| e.0 == "dead") {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let took = dead_seen.elapsed();
    // Joined first, suspect then dead last (a loaded machine may show a flap in between: it is listed too).
    let whats: Vec<&str> = got.iter().map(|e| e.0.as_str()).collect();
    let n = whats.len();
    assert!(n >= 3, "b's events in a's database after {took:?}: {got:?}");
    assert_eq!([whats[0], whats[n - 2], whats[n - 1]], ["joined", "suspect", "dead"], "{got:?}");
    let (joined, suspect, dead) = (&got[0], &got[n - 2], &got[n - 1]);
    assert_eq!((&joined.1, &joined.2), (&Value::Null, &Value::from("alive")), "{got:?}");
    assert_eq!((&suspect.1, &suspect.2), (&Value::from("alive"), &Value::from("suspect")), "{got:?}");
    assert_eq!((&dead.1, &dead.2), (&Value::from("suspect"), &Value::from("dead")), "{got:?}");
    let ms =
        |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    let times: Vec<u64> = got.iter().map(|e| e.3).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "oldest first: {got:?}");
    assert!(ms(started) <= joined.3 && joined.3 <= ms(killed), "joined while b ran: {got:?}");
    assert!(ms(killed) <= suspect.3, "suspect after the kill: {got:?}");
    // Dead once the 2000 ms suspicion ran out.
    assert!(dead.3 - suspect.3 >= 1500, "suspect for {} ms only: {got:?}", dead.3 - suspect.3);
    // The text report has its cluster section.
    let out = monitor_tests::run_monitor(&["report", "--db", &db_a.display().to_string()], Duration::from_secs(20));
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("\ncluster: "), "{}", out.stdout);
    assert!(out.stdout.lines().any(|l| l.contains(" b ") && l.ends_with("suspect -> dead")), "{}", out.stdout);
    drop(node_a);
    let _ = std::fs::remove_dir_all(&dir);
}
