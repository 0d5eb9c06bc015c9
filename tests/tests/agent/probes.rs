//! The kernel's request counts through the agent: python's http.server in a test cgroup, `monitor agent` on it, an
//! exact number of requests with curl (one per connection and several on one keep-alive connection); `/api/v1/status`
//! must show exactly those counts for that pid, and nothing for a twin server outside the group.

use monitor_tests::agent::process;
use monitor_tests::clients;
use monitor_tests::config::Config;
use monitor_tests::http::wait_port;
use monitor_tests::servers::python_http;
use monitor_tests::{require_root, spawn_in_cgroup, Agent, ChildGuard, Group};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// python's http.server serving this crate's folder (`/Cargo.toml`, `/src/`) on 127.0.0.1:`port`.
fn http_server(port: u16) -> Command {
    python_http(Path::new(env!("CARGO_MANIFEST_DIR")), "127.0.0.1", port)
}

/// One curl run that must get an answer for every transfer.
fn curl(args: &[&str]) {
    clients::curl(args).answered();
}

#[test]
fn agent_counts_requests_of_group_processes_exactly() {
    let test = "agent_counts_requests_of_group_processes_exactly";
    if !require_root(test) {
        return;
    }
    let cg = Group::here("probes-agent", Some(512 << 20));
    let port = monitor_tests::agent::free_port();
    let server = spawn_in_cgroup(&mut http_server(port), cg.path());
    let other_port = monitor_tests::agent::free_port();
    let _outside = ChildGuard::spawn(&mut http_server(other_port));
    wait_port(port);
    wait_port(other_port);
    let agent = Agent::start(&cg.path().display().to_string(), &[]);
    let st = agent.status();
    assert_eq!(st["probes"]["enabled"], true, "probes must load as root: {}", st["probes"]);
    // Where the kernel has the socket tracepoints (6.3+; this host's 6.18 does) the agent must count from them,
    // not from syscall hooks that slow every process on the host.
    let has_sock = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .iter()
        .any(|t| std::path::Path::new(t).join("events/sock/sock_recv_length").exists());
    let want = if has_sock { "sock" } else { "raw_sys_exit" };
    assert_eq!(st["probes"]["hooks"], want, "hooks: {}", st["probes"]);
    let pid = server.pid();
    assert!(process(&st, pid).is_some(), "server pid {pid} not in {st}");
    // Let the sampler put the pid in the kernel's filter before the first request.
    std::thread::sleep(Duration::from_millis(300));

    let base = format!("http://127.0.0.1:{port}");
    // 5 requests, one connection each: 3 × 200, 2 × 404.
    for path in ["/", "/Cargo.toml", "/src/", "/missing", "/also-missing"] {
        curl(&[&format!("{base}{path}")]);
    }
    // 6 requests on one keep-alive connection (curl reuses it for URLs given together).
    let urls: Vec<String> = (0..6).map(|_| format!("{base}/Cargo.toml")).collect();
    let mut args: Vec<&str> = Vec::new();
    for u in &urls {
        args.extend(["-o", "/dev/null", u.as_str()]);
    }
    curl(&args);
    // 2 HEAD requests.
    curl(&["-I", &format!("{base}/")]);
    curl(&["-I", &format!("{base}/missing")]);
    // The outside server gets traffic too; it must count nowhere.
    for _ in 0..4 {
        curl(&[&format!("http://127.0.0.1:{other_port}/")]);
    }

    let want_requests = 5 + 6 + 2;
    let st = agent.wait_for(
        |s| process(s, pid).is_some_and(|p| p["responses_total"].as_u64() == Some(want_requests)),
        Duration::from_secs(10),
    );
    let p = process(&st, pid).cloned().unwrap_or_default();
    assert_eq!(p["requests_total"], want_requests, "{p}");
    assert_eq!(p["responses_total"], want_requests, "{p}");
    // 2xx: 3 + 6 + 1 HEAD; 4xx: 2 + 1 HEAD.
    assert_eq!(p["responses_by_class"], serde_json::json!([0, 10, 0, 3, 0]), "{p}");
    assert_eq!(p["accepts_total"], 5 + 1 + 2, "{p}");
    assert_eq!(p["inflight"], 0, "{p}");
    assert!(p["latency_p50_us"].as_u64().is_some(), "{p}");
    // Only group processes are listed, so the outside server cannot appear; and the totals add up to ours.
    let total: u64 =
        st["processes"].as_array().map(|a| a.iter().filter_map(|p| p["requests_total"].as_u64()).sum()).unwrap_or(0);
    assert_eq!(total, want_requests);
}

#[test]
fn agent_counts_on_the_hooks_the_config_names() {
    let test = "agent_counts_on_the_hooks_the_config_names";
    if !require_root(test) {
        return;
    }
    let cg = Group::here("probes-hooks", Some(512 << 20));
    let port = monitor_tests::agent::free_port();
    let server = spawn_in_cgroup(&mut http_server(port), cg.path());
    wait_port(port);
    let config = Config::new()
        .probes(true)
        .set("probes", "hooks", "raw_sys_exit")
        .write(std::env::temp_dir().join(format!("monitor-probes-hooks-{}.toml", std::process::id())));
    let agent = Agent::start(&cg.path().display().to_string(), &["--config", &config.display().to_string()]);
    let _ = std::fs::remove_file(&config);
    let st = agent.status();
    assert_eq!(st["probes"]["enabled"], true, "probes must load as root: {}", st["probes"]);
    assert_eq!(st["probes"]["hooks"], "raw_sys_exit", "the config's hooks: {}", st["probes"]);
    let pid = server.pid();
    std::thread::sleep(Duration::from_millis(300));
    let url = format!("http://127.0.0.1:{port}/Cargo.toml");
    curl(&[&url, "-o", "/dev/null", &url, "-o", "/dev/null", &url]);
    let st = agent.wait_for(
        |s| process(s, pid).is_some_and(|p| p["responses_total"].as_u64() == Some(3)),
        Duration::from_secs(10),
    );
    let p = process(&st, pid).cloned().unwrap_or_default();
    assert_eq!((p["accepts_total"].as_u64(), p["requests_total"].as_u64()), (Some(1), Some(3)), "{p}");
}
