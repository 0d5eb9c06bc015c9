//! The launcher restarts a crashed worker after growing delays (1 s, 2 s, 4 s), shows it in `/api/v1/status`
//! (backing-off with the next retry time, then ready, restarts counted), and leaves no orphan when killed.

use monitor_tests::require_group;
use monitor_tests::run::{member, Run, Spec};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

#[test]
fn a_crashed_worker_is_restarted_with_growing_delays() {
    if !require_group("a_crashed_worker_is_restarted_with_growing_delays") {
        return;
    }
    let run = Run::start("restart", &Spec { workers: 1, ..Spec::default() });
    let mut delays = Vec::new();
    for round in 1..=3u64 {
        let before = member(&run.status(), "tx1");
        let old_pid = before["pid"].as_u64().expect("a running tx1");
        let crashed = Instant::now();
        let crash_ms = now_ms();
        run.crash(1);
        let s = run.wait_for("tx1 backing off", |s| member(s, "tx1")["state"] == "backing-off", Duration::from_secs(5));
        let next = member(&s, "tx1")["next_retry_unix_ms"].as_u64().expect("next_retry_unix_ms");
        let planned = next.saturating_sub(crash_ms);
        let want = 1000 * (1 << (round - 1));
        assert!(planned + 200 >= want && planned <= want + 1000, "round {round}: next retry in {planned} ms");
        let s = run.wait_for(
            "tx1 ready again",
            |s| member(s, "tx1")["state"] == "ready",
            Duration::from_secs(want / 1000 + 10),
        );
        let took = crashed.elapsed();
        let m = member(&s, "tx1");
        assert_eq!(m["restarts"].as_u64(), Some(round), "{m}");
        assert_ne!(m["pid"].as_u64(), Some(old_pid));
        // The master never moved.
        assert_eq!(member(&s, "m0")["restarts"].as_u64(), Some(0));
        // The process list shows the launcher's role and restarts.
        let pid = m["pid"].clone();
        let listed = s["processes"].as_array().and_then(|ps| ps.iter().find(|p| p["pid"] == pid).cloned());
        if let Some(p) = listed {
            assert_eq!((p["role"].as_str(), p["restarts"].as_u64()), (Some("worker"), Some(round)), "{p}");
        }
        delays.push(took);
    }
    // Each restart waits at least its back-off (1, 2, 4 s) and then as long as a python server takes to start and
    // answer its health check: 2 s natively, stretched under emulation.
    let start = monitor_tests::pace::scaled(Duration::from_secs(2));
    for (i, want_ms) in [1000u64, 2000, 4000].into_iter().enumerate() {
        let want = Duration::from_millis(want_ms);
        assert!(
            delays[i] + Duration::from_millis(100) >= want && delays[i] < want + start,
            "round {}: {delays:?}",
            i + 1
        );
    }
}

#[test]
fn children_die_with_the_launcher() {
    if !require_group("children_die_with_the_launcher") {
        return;
    }
    let run = Run::start("orphans", &Spec::default());
    let pids = run.cg.procs();
    assert_eq!(pids.len(), 3, "{pids:?}");
    // SIGKILL: no drain, no chance to clean up; PR_SET_PDEATHSIG must take the children down.
    if let Ok(pid) = libc::pid_t::try_from(run.pid()) {
        // SAFETY: kill has no memory-safety preconditions; the pid is our child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let deadline = Instant::now() + monitor_tests::pace::scaled(Duration::from_secs(5));
    while Instant::now() < deadline {
        if run.cg.procs().is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("children left after the launcher was killed: {:?}", run.cg.procs());
}
