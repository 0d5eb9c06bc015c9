//! Periodic health checks by the launcher: a ready worker whose health path hangs leaves the front door's pool
//! after `health_failures` failed checks (state `unhealthy` in `/api/v1/status`, no request routed to it, not
//! restarted) and rejoins once its health path answers again.

use monitor_tests::require_group;
use monitor_tests::run::{member, served_by, Run, Spec};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

#[test]
fn a_hung_worker_leaves_the_pool_and_rejoins() {
    if !require_group("a_hung_worker_leaves_the_pool_and_rejoins") {
        return;
    }
    let spec = Spec { workers: 1, process: "health_interval_ms = 100\nhealth_failures = 3".into(), ..Spec::default() };
    let run = Run::start("health", &spec);
    let seen: BTreeSet<String> = (0..4).map(|_| served_by(&run.get("/r4/x", &[]))).collect();
    assert_eq!(seen, ["m0", "tx1"].map(String::from).into());

    // tx1's /health hangs for 4 s (stretched on a slow machine); the process itself keeps running.
    let hang = monitor_tests::pace::scaled(Duration::from_secs(4));
    let hung = Instant::now();
    let r = run.direct(1, &format!("/hang-health?ms={}", hang.as_millis()));
    assert_eq!(r.status, 200, "{}", r.text());
    let pid = member(&run.status(), "tx1")["pid"].clone();
    run.wait_for("tx1 unhealthy", |s| member(s, "tx1")["state"] == "unhealthy", Duration::from_secs(3));
    // Three checks of at most 100 ms each, 100 ms apart: not before ~300 ms.
    let took = hung.elapsed();
    assert!(took >= Duration::from_millis(250), "unhealthy after {took:?}");
    for i in 0..10 {
        let r = run.get("/r4/x", &[]);
        assert_eq!((r.status, served_by(&r).as_str()), (200, "m0"), "request {i} while tx1 is unhealthy: {}", r.text());
    }
    let s = run.status();
    assert_eq!(member(&s, "m0")["state"], "ready", "{s:#}");
    assert!(hung.elapsed() < hang, "the checks above outlasted the hang; the test proves nothing");

    // Healthy again: back in the pool, same process, no restart.
    let s = run.wait_for("tx1 ready again", |s| member(s, "tx1")["state"] == "ready", Duration::from_secs(8));
    let m = member(&s, "tx1");
    assert_eq!((m["pid"].clone(), m["restarts"].as_u64()), (pid, Some(0)), "{m}");
    let seen: BTreeSet<String> = (0..4).map(|_| served_by(&run.get("/r4/x", &[]))).collect();
    assert_eq!(seen, ["m0", "tx1"].map(String::from).into());
}
