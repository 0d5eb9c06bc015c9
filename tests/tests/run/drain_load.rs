//! A drain under keep-alive load: SIGTERM while `wrk -t2 -c16` runs through the front door of `monitor run`. Every
//! request received is answered (no socket error, no status but 2xx), each answer of the drain says
//! `Connection: close`, and `monitor run` exits 0 with every in-flight request finished. The same with slow answers,
//! so that every connection has a request in flight at the SIGTERM (one connection per wrk thread there, so that
//! each connection's last answer is counted).
//!
//! wrk reconnects at once after a `Connection: close`, and once the front door has closed its listening socket
//! those reconnections are refused: wrk counts them as socket errors, whatever the server (nginx's graceful quit
//! gives thousands). So wrk runs a script that stops a thread at its first `Connection: close`: a client told the
//! server is going away goes elsewhere, as a load balancer would. What is left to count are the errors on the
//! kept-alive connections themselves: a request cut, or a connection closed under a request sent on it.

use monitor_tests::require::{on_path, require};
use monitor_tests::require_group;
use monitor_tests::run::{Run, Spec};
use monitor_tests::wrk::WrkReport;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SCRIPT: &str = r#"
threads = {}
setup = function(thread)
  table.insert(threads, thread)
end
closes = 0
response = function(status, headers, body)
  local c = headers["Connection"] or headers["connection"]
  if c ~= nil and string.lower(c) == "close" then
    closes = closes + 1
    wrk.thread:stop()
  end
end
done = function(summary, latency, requests)
  local n = 0
  for _, t in ipairs(threads) do
    n = n + (t:get("closes") or 0)
  end
  io.write(string.format("Connection: close answers: %d\n", n))
end
"#;

/// What wrk reported, and the script's count of answers that said `Connection: close`.
#[derive(Debug)]
struct Report {
    wrk: WrkReport,
    closes: u64,
}

fn parse(text: &str) -> Report {
    let closes = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Connection: close answers:"))
        .map_or(0, |n| n.trim().parse().unwrap_or(u64::MAX));
    Report { wrk: monitor_tests::wrk::parse(text), closes }
}

/// Runs wrk (16 connections on `threads` threads) for `seconds` against `path` through the front door, SIGTERMs
/// `monitor run` after `term_after`, and returns wrk's report once both ended. Both times stretch on a slow machine
/// (`monitor_tests::pace::stretch`: the emulated VM), so the load before the drain does more work.
fn sigterm_under_wrk(name: &str, threads: u32, path: &str, seconds: u64, term_after: Duration) -> Report {
    let slow = monitor_tests::pace::stretch();
    let (seconds, term_after) = (seconds * u64::from(slow), term_after * slow);
    let mut run = Run::start(name, &Spec::default());
    let script = std::env::temp_dir().join(format!("{name}-{}.lua", std::process::id()));
    std::fs::write(&script, SCRIPT).expect("writing the wrk script");
    let url = format!("http://{}{path}", run.proxy);
    let wrk = Command::new("wrk")
        .args([&format!("-t{threads}"), "-c16", &format!("-d{seconds}s"), "--timeout", "10s", "-s"])
        .arg(&script)
        .arg(&url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting wrk");
    let started = Instant::now();
    std::thread::sleep(term_after);
    run.sigterm();
    let status = run.wait_exit(Duration::from_secs(40));
    let out = wrk.wait_with_output().expect("wrk's output");
    let _ = std::fs::remove_file(&script);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "wrk failed: {text}");
    assert!(status.success(), "monitor run exited {status}; stderr:\n{}", run.stderr());
    let err = run.stderr();
    assert!(err.contains("every in-flight request finished"), "{err}");
    assert!(started.elapsed() >= term_after, "wrk ended early: {text}");
    parse(&text)
}

/// `at_least` requests before the drain natively; under a slowdown (the emulated VM) that many over it.
fn check(r: &Report, at_least: u64, closes: std::ops::RangeInclusive<u64>) {
    let at_least = at_least / u64::from(monitor_tests::pace::slowdown());
    let w = &r.wrk;
    eprintln!("{}", w.text);
    assert!(closes.contains(&r.closes), "answers with Connection: close:\n{}", w.text);
    assert_eq!(w.socket_errors, [0; 4], "socket errors (connect, read, write, timeout):\n{}", w.text);
    assert_eq!(w.non_2xx, 0, "non-2xx answers:\n{}", w.text);
    assert!(w.requests >= at_least, "only {} requests before the drain:\n{}", w.requests, w.text);
}

#[test]
fn sigterm_during_wrk_loses_no_request_on_fast_answers() {
    let name = "sigterm_during_wrk_loses_no_request_on_fast_answers";
    if !require_group(name) || !require(on_path("wrk"), name, "needs wrk (apt-get install wrk)") {
        return;
    }
    // Each of wrk's two threads stops after the event-loop round that brought its first `Connection: close` (which
    // may have brought others).
    let r = sigterm_under_wrk("drainfast", 2, "/r4/x", 4, Duration::from_millis(1500));
    check(&r, 200, 2..=16);
}

#[test]
fn sigterm_during_wrk_loses_no_request_in_flight() {
    let name = "sigterm_during_wrk_loses_no_request_in_flight";
    if !require_group(name) || !require(on_path("wrk"), name, "needs wrk (apt-get install wrk)") {
        return;
    }
    // Every connection has a request in flight at the SIGTERM most of the time. One connection per wrk thread, so
    // each thread stops at its own connection's last answer and every one of the 16 is counted: each connection
    // ends with an answer that says `Connection: close`, none with an error.
    let r = sigterm_under_wrk("drainslow", 16, "/r4/slow?sleep_ms=300", 4, Duration::from_millis(1500));
    check(&r, 48, 16..=16);
}

#[test]
fn the_scripts_count_of_closes_is_parsed_beside_wrks_summary() {
    let text = "  62 requests in 4.10s, 9.79MB read\n  Socket errors: connect 0, read 16, write 45464, timeout 2\n  \
                Non-2xx or 3xx responses: 3\nRequests/sec: 15.1\nConnection: close answers: 16\n";
    let r = parse(text);
    assert_eq!((r.wrk.requests, r.wrk.socket_errors, r.wrk.non_2xx, r.closes), (62, [0, 16, 45464, 2], 3, 16));
    assert_eq!(parse("  68461 requests in 3.05s, 9.79MB read\n").closes, 0);
}
