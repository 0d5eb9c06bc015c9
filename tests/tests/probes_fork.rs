//! Servers that fork a child per connection, through the agent: busybox httpd (and python's ForkingTCPServer with
//! a slow handler, so the children live across samples) in a test cgroup, `monitor agent` on it, N requests one
//! per connection; `/api/v1/status` must show exactly N requests and N responses for the server's pid, its
//! exited children folded in (docs/probes.md, "Forked children").

use monitor_tests::agent::process;
use monitor_tests::http::wait_port;
use monitor_tests::{on_path, require, require_root, spawn_in_cgroup, Agent, CgroupV1};
use std::process::{Command, Stdio};
use std::time::Duration;

fn curl(url: &str) {
    let out = Command::new("curl").args(["-s", "-o", "/dev/null", "--max-time", "10", url]).output();
    match out {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!("curl {url}: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => panic!("curl cannot run: {e}"),
    }
}

/// Starts `server` in a new test cgroup with the agent on it, sends `n` GETs of `path` one per connection, and
/// checks the server's pid ends with exactly `n` requests, responses and accepts.
fn counts_exactly(name: &str, mut server: Command, port: u16, path: &str, n: u64) {
    let cg = CgroupV1::create(name, Some(512 << 20));
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
        curl(&format!("http://127.0.0.1:{port}{path}"));
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
    let cmd = monitor_tests::busybox_httpd(&dir, port);
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
    let script = "import http.server as h, socketserver as s, sys, time\n\
        class H(h.SimpleHTTPRequestHandler):\n    \
            def do_GET(self):\n        \
                time.sleep(0.25)\n        \
                super().do_GET()\n\
        s.ForkingTCPServer.allow_reuse_address = True\n\
        s.ForkingTCPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n";
    let mut cmd = Command::new("python3");
    cmd.args(["-c", script, &port.to_string()])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    counts_exactly("probes-fork-python", cmd, port, "/Cargo.toml", 6);
}
