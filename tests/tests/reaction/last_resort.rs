//! `monitor run`'s last resort: a worker whose request handler allocates toward twice the limit without ever
//! yielding (the fixture backend's `?grow_sync_mib`, as a Node worker whose event loop never turns) cannot be
//! stopped by cancelling its request. The guard kills that one worker before the kernel's OOM killer acts (the
//! group's own OOM count stays 0): its request is answered with the guard's 503 (cancelled at the abort, or failed
//! at the kill), never a 502; the launcher restarts it (state `killed`, not a crash), the master and the other
//! worker keep their pids, and the other worker's clients get its 200 or the guard's 503 all along. A request still
//! in flight to the worker when it is killed (one sent after the abort, on a health path the guard never refuses)
//! gets the guard's 503 with the kill's reason, not the 502 of a broken connection.

use monitor_tests::require_group;
use monitor_tests::run::{member, Busy, Run, Seen, Spec, TIMEOUT};
use serde_json::Value;
use std::time::{Duration, Instant};

/// A master and two workers in a 512 MiB memory group, the master serving no tx paths, sampled every 100 ms.
fn spec() -> Spec {
    Spec {
        workers: 2,
        limit_mib: 512,
        proxy: "master_serves_tx = false".into(),
        policy: "interval_ms = 100".into(),
        ..Spec::default()
    }
}

fn pid_of(status: &Value, name: &str) -> u64 {
    member(status, name)["pid"].as_u64().unwrap_or_else(|| panic!("{name} has no pid:\n{status:#}"))
}

#[test]
fn a_worker_stuck_allocating_is_killed_and_restarted_before_the_oom_killer() {
    if !require_group("a_worker_stuck_allocating_is_killed_and_restarted_before_the_oom_killer") {
        return;
    }
    let _turn = crate::turn();
    let run = Run::start("run-last-resort", &spec());
    let tx1 = run.cache_id_of("tx1");
    let tx2 = run.cache_id_of("tx2");
    let before = run.status();
    let (m0, tx1_pid, tx2_pid) = (pid_of(&before, "m0"), pid_of(&before, "tx1"), pid_of(&before, "tx2"));
    let kills = run.cg.oom_count();

    // Two clients keep tx2 busy all along: each answer is tx2's 200 or the guard's 503 while the group refuses.
    let guarded = |body: &str| body.starts_with("memory guard:");
    let busy = Busy::start(&run, 2, &tx2, "tx2", "/r4/x?sleep_ms=50", guarded);
    std::thread::sleep(Duration::from_millis(300));

    // 1,024 MiB in one request, twice the limit, and nothing in tx1 can notice the request was cancelled.
    let t0 = Instant::now();
    let grow = run.get("/r4/x?grow_sync_mib=1024", &[("X-Cache-Id", &tx1)]);
    let took = t0.elapsed();
    assert_eq!(grow.status, 503, "the growing request: {} {}\n{}", grow.status, grow.text(), run.stderr());
    // Cancelled when tx1 was told to abort, or failed when it was killed: either way the guard's 503, never a 502.
    assert!(grow.text().starts_with("memory guard:"), "{}", grow.text());
    assert_eq!(run.cg.oom_count(), kills, "the kernel's OOM killer acted:\n{}", run.stderr());
    // The launcher knows the guard killed it: `killed` until the restart (1 s of backoff), not a crash.
    run.wait_for("tx1 killed", |s| member(s, "tx1")["state"] == "killed", Duration::from_secs(3));
    assert!(run.stderr().contains("killed: "), "the agent logs the kill:\n{}", run.stderr());

    // tx1 comes back as a new process; the master and tx2 are the processes they were.
    let status = run.wait_for(
        "tx1 restarted and ready",
        |s| {
            let m = member(s, "tx1");
            m["state"] == "ready" && m["pid"].as_u64().is_some_and(|p| p != tx1_pid)
        },
        TIMEOUT,
    );
    assert_eq!(member(&status, "tx1")["restarts"], 1, "{status:#}");
    assert_eq!((pid_of(&status, "m0"), pid_of(&status, "tx2")), (m0, tx2_pid), "only tx1 was killed:\n{status:#}");
    assert_eq!(member(&status, "m0")["restarts"], 0, "{status:#}");
    assert_eq!(member(&status, "tx2")["restarts"], 0, "{status:#}");
    let r = run.get("/r4/x", &[]);
    assert_eq!(r.status, 200, "the group serves again: {}", r.text());
    assert_eq!(run.cg.oom_count(), kills, "the kernel's OOM killer acted:\n{}", run.stderr());
    let Seen { ok, shed, failed } = busy.stop();
    assert!(failed.is_empty(), "tx2's clients got only 200 or the guard's 503: {failed:#?}");
    assert!(ok >= 10, "tx2 served its clients: {ok} answers");
    eprintln!(
        "tx1 grew without yielding: killed by the guard and answered 503 after {took:?}; tx2's clients: {ok} ok, \
         {shed} shed; OOM kills 0"
    );
}

#[test]
fn a_request_in_flight_at_the_kill_gets_the_guards_503_with_the_reason() {
    if !require_group("a_request_in_flight_at_the_kill_gets_the_guards_503_with_the_reason") {
        return;
    }
    let _turn = crate::turn();
    let run = Run::start("run-last-resort-inflight", &spec());
    let tx1 = run.cache_id_of("tx1");
    let kills = run.cg.oom_count();
    // tx1's health path will hang: a request on it is still in flight when the guard kills tx1.
    let r = run.direct(1, "/hang-health?ms=15000");
    assert_eq!(r.status, 200, "{}", r.text());

    // tx1 grows to ~94.5% without yielding, then goes on growing at 4 MiB/s: over abort_at, under kill_at for
    // longer than kill_after_ms, never obeying (still growing when its wait is over).
    let usage = run.status()["group"]["usage_bytes"].as_u64().unwrap_or(0);
    let mib = ((0.945 * (512 << 20) as f64 - usage as f64) / (1 << 20) as f64) as u64;
    let (proxy, id) = (run.proxy, tx1.clone());
    let grow = std::thread::spawn(move || {
        let path = format!("/r4/x?grow_sync_mib={mib}&spin_ms=20000&creep_mib_s=4");
        monitor_tests::http::request(proxy, "GET", &path, &[("X-Cache-Id", &id)], TIMEOUT)
    });
    run.wait_for("aborting", |s| s["policy"]["state"] == "aborting", TIMEOUT);
    // The growing request is answered once the front door has cancelled tx1's requests in flight at the abort.
    // The status page shows `aborting` a moment before that cancellation, so the health request waits for it.
    let grown = grow.join().unwrap_or_else(|_| panic!("the grow thread panicked"));
    let grown = grown.unwrap_or_else(|e| panic!("the growing request: {e}"));
    assert_eq!(grown.status, 503, "cancelled at the abort: {}", grown.text());
    // Sent after the abort: exempt from the refusal, not cancelled with the requests in flight at the abort.
    let t0 = Instant::now();
    let r = run.get("/health", &[("X-Cache-Id", &tx1)]);
    let took = t0.elapsed();
    assert_eq!(r.status, 503, "the request in flight at the kill: {} {}\n{}", r.status, r.text(), run.stderr());
    assert!(r.text().starts_with("memory guard:") && r.text().contains("was killed"), "{}", r.text());
    assert!(r.text().contains("abort was not obeyed: it was still growing"), "the reason: {}", r.text());
    assert!(r.header("retry-after").is_some(), "Retry-After on the guard's 503");
    assert_eq!(run.cg.oom_count(), kills, "the kernel's OOM killer acted:\n{}", run.stderr());
    let status = run.wait_for("tx1 killed and started again", |s| member(s, "tx1")["restarts"] == 1, TIMEOUT);
    let kill = status["kills"].as_array().and_then(|k| k.last()).cloned().unwrap_or_default();
    assert_eq!((kill["name"].as_str(), kill["why"].as_str()), (Some("tx1"), Some("abort_not_obeyed")), "{kill}");
    eprintln!("the health request in flight at the kill: 503 after {took:?}: {}", r.text().trim());
}
