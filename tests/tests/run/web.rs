//! The web API under `monitor run` is served as `monitor agent`'s is (`monitor::consumers::api::serve`): a connection
//! that sends no complete request head within 10 s is closed, so idle or half-sent clients cannot hold it open, and the
//! API answers others meanwhile.

use monitor_tests::require_group;
use monitor_tests::run::{Run, Spec};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// True when the peer closes `s` within `limit` (a read returns 0 or fails other than by the time-out).
fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; 4096];
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        if s.set_read_timeout(Some(left.max(Duration::from_millis(10)))).is_err() {
            return true;
        }
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn idle_and_half_sent_web_connections_are_closed() {
    if !require_group("idle_and_half_sent_web_connections_are_closed") {
        return;
    }
    let run = Run::start("web-idle", &Spec { workers: 1, ..Spec::default() });
    let connect = || TcpStream::connect_timeout(&run.web, Duration::from_secs(5)).unwrap_or_else(|e| panic!("{e}"));
    let mut idle = connect();
    let mut half = connect();
    half.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").unwrap_or_else(|e| panic!("{e}"));
    let started = Instant::now();
    let s = run.status();
    assert!(s["policy"]["state"].is_string(), "the API answers meanwhile: {s}");
    for (name, c) in [("idle", &mut idle), ("half-sent", &mut half)] {
        let left = Duration::from_secs(20).saturating_sub(started.elapsed());
        assert!(closed_within(c, left), "the {name} connection is still open after {:?}", started.elapsed());
    }
    // Not before the head time-out: the API does not close a connection that is merely slow.
    assert!(started.elapsed() >= Duration::from_secs(8), "closed after {:?}", started.elapsed());
    let s = run.status();
    assert!(s["policy"]["state"].is_string(), "the API answers after: {s}");
}

#[test]
fn status_names_each_process_as_configured_and_keeps_its_command_name() {
    if !require_group("status_names_each_process_as_configured_and_keeps_its_command_name") {
        return;
    }
    let run = Run::start("web-names", &Spec { workers: 2, ..Spec::default() });
    let s = run.status();
    let procs = s["processes"].as_array().cloned().unwrap_or_default();
    let names: std::collections::BTreeSet<&str> = procs.iter().filter_map(|p| p["name"].as_str()).collect();
    assert!(names.is_superset(&["m0", "tx1", "tx2"].into()), "processes[].name: {names:?}\n{s}");
    assert!(procs.iter().all(|p| p["comm"].as_str().is_some_and(|c| !c.is_empty() && c != p["name"])), "{s}");
    // `monitor status` prints the same names.
    let url = format!("http://{}", run.web);
    let out = monitor_tests::run_monitor(&["status", "--url", &url], Duration::from_secs(20));
    assert!(out.status.success(), "{out:?}");
    for name in ["m0", "tx1", "tx2"] {
        assert!(out.stdout.lines().any(|l| l.split_whitespace().any(|w| w == name)), "{name} in:\n{}", out.stdout);
    }
}
