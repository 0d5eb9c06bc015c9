//! A worker that obeyed is never killed: `monitor run` over a Node master and two Node workers (the seed's shape) in
//! a 512 MiB group; a request grows tx1 by a 4 MiB Buffer a turn of its event loop (500 MiB/s) toward 600 MiB. At
//! 92% the front door cancels it; tx1 stops growing and drops its Buffers at once, but V8 gives their memory back
//! only at its next garbage collection, seconds later. Through that wait the group stays over abort_at with tx1
//! holding the memory: the guard must not mistake it for a process that did not obey. Each episode ends with the
//! request cancelled, no kill, 0 kernel OOM kills, and tx1 serving again once V8 gave the memory back, with nothing
//! restarted; or, where V8 kept it past `recycle_after_s` (an idle V8 may wait long for its next collection), once
//! the guard recycled tx1 (SIGTERM and a restart, never a kill). It prints how long V8 held the memory.
//! `MONITOR_NODE_EPISODES` sets the number of episodes (5 by default).

use monitor_tests::require_group;
use monitor_tests::run::{member, node_worker, Run, Spec, TIMEOUT};
use serde_json::Value;
use std::time::{Duration, Instant};

/// How long an episode waits for V8 to give the memory back or for the recycle (`recycle_after_s`, 20 s, after the
/// abort) and tx1's restart.
const HOLD_LIMIT: Duration = Duration::from_secs(45);

fn spec() -> Spec {
    Spec {
        workers: 2,
        limit_mib: 512,
        proxy: "master_serves_tx = false".into(),
        policy: "interval_ms = 100".into(),
        command: node_worker(),
        // Node is not in the VM image: the runtime's behaviour is the point here, the same on either hierarchy.
        host_only: true,
        ..Spec::default()
    }
}

fn u64_at(v: &Value, pointer: &str) -> u64 {
    v.pointer(pointer).and_then(Value::as_u64).unwrap_or_else(|| panic!("no {pointer} in {v:#}"))
}

/// The guard's `killed:` lines so far.
fn kills(run: &Run) -> usize {
    run.stderr().lines().filter(|l| l.contains("killed:")).count()
}

/// How one episode ended.
enum Held {
    /// V8 gave the memory back after this long, and tx1 served again.
    Returned(Duration),
    /// V8 still held it `recycle_after_s` (20 s) after the abort: the guard recycled tx1 (SIGTERM, restart), after
    /// this long.
    Recycled(Duration),
}

/// One episode on a fresh `monitor run`: the growing request cancelled at 92%, tx1 never killed while V8 holds what
/// it dropped, 0 kernel OOM kills; once V8 gives the memory back (or the guard recycled tx1, if V8 kept it past
/// `recycle_after_s`), tx1 serves again.
fn episode(episode: usize) -> Held {
    let run = Run::start("run-node-obeyed", &spec());
    let oom = run.cg.oom_count();
    let first = run.status();
    let pids: Vec<u64> = ["m0", "tx1", "tx2"].iter().map(|n| u64_at(&member(&first, n), "/pid")).collect();
    let t0 = Instant::now();
    // 4 MiB a turn of tx1's event loop at 500 MiB/s: the cancel lands between 92% and kill_at even on a loaded
    // machine. (At full speed, about 1.4 GB/s here, the margin is about 10 ms; a grower the cancel cannot outrun is
    // the last resort's case, tests/tests/reaction/last_resort.rs.)
    let grow = run.get("/r4/x?grow_mib=600&grow_mib_s=500", &[("X-Cache-Id", "tx1.0")]);
    assert_eq!(grow.status, 503, "episode {episode}: the growing request: {}\n{}", grow.text(), run.stderr());
    assert!(grow.text().starts_with("memory guard:"), "cancelled by the guard: {}", grow.text());
    // tx1 saw its request end and dropped what it grew.
    let stats = monitor_tests::wait_until("tx1's growth stopped", TIMEOUT, || {
        let s = run.stats(1);
        (s["grows"].as_array().is_some_and(|g| !g.is_empty())).then_some(s)
    });
    let stop = &stats["grows"][0];
    assert!(matches!(stop["why"].as_str(), Some("cancelled" | "abort")), "episode {episode}: {stop}");
    let stopped_at = stop["stopped_at_mib"].as_u64().unwrap_or(0);
    // V8 holds the memory until its next collection: the group stays over the lines meanwhile, tx1 the largest.
    let dropped = Instant::now();
    let anon_at_stop = u64_at(&stats, "/anon");
    let held = loop {
        assert!(
            dropped.elapsed() < HOLD_LIMIT,
            "episode {episode}: neither given back nor recycled:\n{}",
            run.stderr()
        );
        assert_eq!(kills(&run), 0, "episode {episode}: the guard killed:\n{}", run.stderr());
        let status = run.status();
        if status["recycles"].as_array().is_some_and(|r| !r.is_empty()) {
            break Held::Recycled(dropped.elapsed());
        }
        if u64_at(&member(&status, "tx1"), "/pid") == pids[1] && u64_at(&run.stats(1), "/anon") < anon_at_stop / 4 {
            break Held::Returned(dropped.elapsed());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let recycled = matches!(held, Held::Recycled(_));
    let status = run.wait_for(
        "the group back to normal, every process ready",
        |s| s["policy"]["state"] == "normal" && ["m0", "tx1", "tx2"].iter().all(|n| member(s, n)["state"] == "ready"),
        HOLD_LIMIT,
    );
    assert_eq!(run.cg.oom_count(), oom, "episode {episode}: the kernel's OOM killer acted:\n{}", run.stderr());
    assert_eq!(kills(&run), 0, "episode {episode}: the guard killed:\n{}", run.stderr());
    assert!(status["kills"].as_array().is_none_or(Vec::is_empty), "no kill recorded: {status:#}");
    for (name, pid) in ["m0", "tx1", "tx2"].iter().zip(&pids) {
        let m = member(&status, name);
        let (now, restarts) = (u64_at(&m, "/pid"), u64_at(&m, "/restarts"));
        if recycled && *name == "tx1" {
            assert_eq!(restarts, 1, "tx1 restarted once, recycled: {status:#}");
        } else {
            assert_eq!((now, restarts), (*pid, 0), "{name} was restarted: {status:#}");
        }
    }
    // Held past its wait (kill_after_ms, 2 s): the log said tx1 obeyed, with the evidence.
    if !matches!(held, Held::Returned(d) if d <= Duration::from_secs(3)) {
        assert!(run.stderr().contains("abort victim obeyed: stopped growing"), "{}", run.stderr());
    }
    let r = run.get("/r4/x", &[("X-Cache-Id", "tx1.0")]);
    assert_eq!((r.status, r.header("x-served-by")), (200, Some("tx1")), "tx1 serves again: {}", r.text());
    let why = stop["why"].as_str().unwrap_or("?");
    let after = dropped.duration_since(t0);
    let outcome = match held {
        Held::Returned(d) => format!("V8 held {} MiB for {d:?}", anon_at_stop >> 20),
        Held::Recycled(d) => {
            format!("V8 still held {} MiB after {d:?}: recycled (SIGTERM, restart)", anon_at_stop >> 20)
        }
    };
    eprintln!(
        "episode {episode}: tx1 stopped at {stopped_at} MiB ({why}) {after:?} after the request; {outcome}; tx1 \
         serves again"
    );
    held
}

#[test]
fn a_node_worker_that_obeyed_keeps_its_life_while_v8_holds_the_memory() {
    let name = "a_node_worker_that_obeyed_keeps_its_life_while_v8_holds_the_memory";
    if !require_group(name) || !monitor_tests::require_program(name, "node") {
        return;
    }
    let _turn = crate::turn();
    let episodes: usize = std::env::var("MONITOR_NODE_EPISODES").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let mut held: Vec<Duration> = Vec::new();
    let mut recycled = Vec::new();
    for i in 1..=episodes {
        match episode(i) {
            Held::Returned(d) => held.push(d),
            Held::Recycled(d) => recycled.push(d),
        }
    }
    held.sort();
    let median = held.get(held.len() / 2).copied();
    eprintln!(
        "{episodes} of {episodes} episodes: the request cancelled, nothing killed, 0 kernel OOM kills; V8 gave the \
         memory back in {} of them after {:?} to {:?} (median {median:?}), nothing restarted; recycled after V8 kept \
         it in {}: {recycled:?}",
        held.len(),
        held.first(),
        held.last(),
        recycled.len()
    );
}
