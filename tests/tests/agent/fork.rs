//! Servers that fork a child per connection, through the agent: busybox httpd (and python's ForkingTCPServer with
//! a slow handler, so the children live across samples) in a test cgroup, `monitor agent` on it, N requests one
//! per connection; `/api/v1/status` must show exactly N requests and N responses for the server's pid, its
//! exited children folded in (docs/probes.md, "Forked children").

use monitor_tests::agent::process;
use monitor_tests::clients::curl;
use monitor_tests::http::wait_port;
use monitor_tests::servers::{busybox_httpd, python_forking};
use monitor_tests::{on_path, require, require_root, spawn_in_cgroup, Agent, Group};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Starts `server` in a new test cgroup with the agent on it, sends `n` GETs of `path` one per connection, and
/// checks the server's pid ends with exactly `n` requests, responses and accepts.
fn counts_exactly(name: &str, mut server: Command, port: u16, path: &str, n: u64) {
    let cg = Group::here(name, Some(512 << 20));
    let server = spawn_in_cgroup(&mut server, cg.path());
    wait_port(port);
    let agent = Agent::start(&cg.path().display().to_string(), &[]);
    let st = agent.status();
    assert_eq!(st["probes"]["enabled"], true, "probes must load as root: {}", st["probes"]);
    let pid = server.pid();
    assert!(process(&st, pid).is_some(), "server pid {pid} not in {st}");
    // Let the sampler put the pid in the kernel's filter before the first request.
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..n {
        curl(&[&format!("http://127.0.0.1:{port}{path}")]).answered();
    }
    let st = agent.wait_for(
        |s| process(s, pid).is_some_and(|p| p["responses_total"].as_u64() == Some(n)),
        Duration::from_secs(10),
    );
    // A pause, then again: nothing more arrives (no double folding), and the children are gone from the list.
    std::thread::sleep(Duration::from_millis(500));
    let st2 = agent.status();
    for s in [&st, &st2] {
        let p = process(s, pid).cloned().unwrap_or_default();
        assert_eq!(p["requests_total"], n, "{p}");
        assert_eq!(p["responses_total"], n, "{p}");
        assert_eq!(p["responses_by_class"], serde_json::json!([0, n, 0, 0, 0]), "{p}");
        assert_eq!(p["accepts_total"], n, "{p}");
        assert_eq!(p["inflight"], 0, "{p}");
    }
    let total: u64 =
        st2["processes"].as_array().map(|a| a.iter().filter_map(|p| p["requests_total"].as_u64()).sum()).unwrap_or(0);
    assert_eq!(total, n, "requests counted twice or on other pids: {st2}");
}

#[test]
fn agent_counts_busybox_httpd_forked_children_exactly() {
    let test = "agent_counts_busybox_httpd_forked_children_exactly";
    if !require_root(test) || !require(on_path("busybox") && on_path("curl"), test, "needs busybox and curl") {
        return;
    }
    let port = monitor_tests::agent::free_port();
    let dir = monitor_tests::temp_dir("probes-fork");
    let cmd = busybox_httpd(&dir, port);
    counts_exactly("probes-fork-busybox", cmd, port, "/index.html", 10);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn agent_counts_slow_forked_children_seen_by_the_sampler_exactly() {
    let test = "agent_counts_slow_forked_children_seen_by_the_sampler_exactly";
    if !require_root(test) || !require(on_path("curl"), test, "needs curl") {
        return;
    }
    let port = monitor_tests::agent::free_port();
    // Each child sleeps 250 ms before answering: the sampler (100 ms) lists it, then sees it leave.
    let cmd = python_forking(Path::new(env!("CARGO_MANIFEST_DIR")), port, 250);
    counts_exactly("probes-fork-python", cmd, port, "/Cargo.toml", 6);
}
