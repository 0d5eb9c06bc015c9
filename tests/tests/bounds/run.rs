//! `monitor run` under every load at once, with the real binary over the fixture fleet and the eBPF probes loaded.
//! For [`LOAD`]: [`PAGE_CLIENTS`] clients ask for the home page in a loop, [`IDLE_API`] connections sit on the API
//! sending nothing or half a head, [`SLOW_CLIENTS`] clients each send a request body to the front door 3 bytes a
//! second (coming back the next second when their connection is closed, as a slow-loris attack does), and once
//! they hold the front door `wrk -c64` runs through it for 10 s. The agent's peak RSS (VmHWM) stays under
//! [`RSS_CEILING_MB`], and the front door keeps serving: wrk's requests are answered, 2xx only (or 503s the memory
//! guard counted as shed), and none of wrk's connections is closed under it.

use crate::{alone, status_mb, RSS_CEILING_MB};
use monitor_tests::crowd::{self, raise_nofile};
use monitor_tests::run::{Run, Spec};
use monitor_tests::{http, require, require_group, require_program, TempDir};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the loads run together.
const LOAD: Duration = Duration::from_secs(16);
const PAGE_CLIENTS: usize = 64;
const IDLE_API: usize = 300;
const SLOW_CLIENTS: usize = 2000;
const WRK_CONNECTIONS: u32 = 64;
const WRK_SECONDS: u32 = 10;
/// Open files the test process needs: every client connection above, the fleet's, and some to spare. `monitor run`
/// inherits the limit, though its caps keep it far below (256 front-door and 256 API connections at most).
const NOFILE: u64 = 4096;

#[test]
fn every_load_at_once_stays_under_the_memory_ceiling_and_the_front_door_serves() {
    let _alone = alone();
    let test = "every_load_at_once_stays_under_the_memory_ceiling_and_the_front_door_serves";
    if !require_group(test) || !require_program(test, "wrk") {
        return;
    }
    let nofile = raise_nofile(NOFILE);
    if !require(nofile >= NOFILE, test, &format!("needs {NOFILE} open files (RLIMIT_NOFILE hard limit {nofile})")) {
        return;
    }
    let run = Run::start("bounds-all", &Spec { probes: true, ..Spec::default() });
    let probes = run.status()["probes"].clone();
    if !require(probes["enabled"] == true, test, &format!("needs the eBPF probes loaded: {probes}")) {
        return;
    }
    let pid = run.pid();
    let before = status_mb(pid, "VmRSS:");

    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let idle = crowd::idle(run.web, IDLE_API, Duration::from_secs(5));
    let slow = crowd::slow_bodies(run.proxy, SLOW_CLIENTS, "/r4/upload");
    let pages: Arc<Mutex<[usize; 3]>> = Arc::default(); // 200, 503 with Retry-After, other
    let page_clients: Vec<_> = (0..PAGE_CLIENTS)
        .map(|_| {
            let (stop, pages, web) = (stop.clone(), pages.clone(), run.web);
            std::thread::spawn(move || {
                // At nice 10, as in agent.rs: the clients' own CPU time on the shared cores is not the agent's.
                // SAFETY: setpriority on this thread's own id only changes its nice value.
                unsafe {
                    libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 10);
                }
                while !stop.load(Ordering::Relaxed) {
                    let k = match http::get(web, "/", Duration::from_secs(15)) {
                        Ok(r) if r.status == 200 => 0,
                        Ok(r) if r.status == 503 && r.header("retry-after").is_some() => 1,
                        _ => 2,
                    };
                    pages.lock().unwrap_or_else(|e| e.into_inner())[k] += 1;
                }
            })
        })
        .collect();
    // wrk comes once the slow clients hold the front door: a new client must get in past them. Their 2,000
    // connects, made one after another by one thread, share the 2 cores with the page clients and the idle ones:
    // a few seconds natively, given up to 20 s (longer under a slowdown).
    let opening = monitor_tests::pace::scaled(Duration::from_secs(20));
    while slow.opened() < SLOW_CLIENTS && started.elapsed() < opening {
        std::thread::sleep(Duration::from_millis(50));
    }
    let slow_in = slow.opened();
    let dir = TempDir::new("bounds-all");
    let url = format!("http://{}/r4/x", run.proxy);
    let wrk = std::thread::spawn(move || monitor_tests::wrk::wrk(&url, 2, WRK_CONNECTIONS, WRK_SECONDS, &dir));
    std::thread::sleep(LOAD.saturating_sub(started.elapsed()));
    stop.store(true, Ordering::Relaxed);
    let wrk = wrk.join().expect("wrk's thread");
    for c in page_clients {
        c.join().expect("a page client");
    }
    let (idle, slow) = (idle.stop(), slow.stop());
    let [pages_ok, pages_busy, pages_other] = *pages.lock().unwrap_or_else(|e| e.into_inner());
    let peak = status_mb(pid, "VmHWM:");
    let after = status_mb(pid, "VmRSS:");
    let shed = run.status()["front_door"]["shed_total"].as_u64().unwrap_or(0);

    eprintln!(
        "bounds: peak RSS {peak:.1} MB under {PAGE_CLIENTS} page clients, {IDLE_API} idle API conns, {SLOW_CLIENTS} \
         slow body clients, wrk -c{WRK_CONNECTIONS}, probes on"
    );
    eprintln!(
        "  VmRSS {before:.1} MB before, {after:.1} MB after; pages: {pages_ok} 200, {pages_busy} 503, {pages_other} \
         other; idle API: {idle:?}; slow bodies ({slow_in} in before wrk): {slow:?}; wrk: {} requests, statuses \
         {:?}, socket errors (connect, read, write, timeout) {:?}; shed {shed}",
        wrk.requests, wrk.statuses, wrk.socket_errors
    );
    assert!(peak <= RSS_CEILING_MB, "peak RSS {peak:.1} MB, ceiling {RSS_CEILING_MB} MB");
    // The loads all ran: the front door was full of slow clients, and closed some to let others in.
    assert!(slow_in >= SLOW_CLIENTS, "the slow clients got in: {slow_in} of {SLOW_CLIENTS}");
    assert!(slow.closed > 0, "the front door closed slow clients to make room: {slow:?}");
    assert!(idle.opened >= IDLE_API, "idle API connections: {idle:?}");
    assert!(pages_ok >= 10, "pages were served ({pages_ok})");
    // The front door served wrk: 2xx, or 503s the memory guard counted as shed; no connection closed under it.
    let ok = wrk.count(200..300);
    let shed_503 = wrk.count(503..504).min(shed);
    assert!(wrk.requests > 0 && ok > 0, "wrk was served: {}", wrk.text);
    assert_eq!(ok + shed_503, wrk.requests, "2xx or shed 503 only:\n{}", wrk.text);
    assert_eq!(wrk.socket_errors[..3], [0, 0, 0], "no wrk connection failed or was closed:\n{}", wrk.text);
}
