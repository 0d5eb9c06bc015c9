//! `monitor agent` inside the group it guards (`cgroup = "auto"`, as a service manager's unit would run it beside
//! the servers): it lists itself, but it is never the process told to abort even when it is the largest, and the
//! probes never trace it (its own API traffic is not counted), while busybox httpd in the same group is.

use monitor_tests::agent::process as entry;
use monitor_tests::config::Config;
use monitor_tests::http::wait_port;
use monitor_tests::{on_path, require, require_root, spawn_in_cgroup, Agent, Group};
use std::process::Command;
use std::time::Duration;

#[test]
fn the_agent_in_its_own_group_is_listed_never_aborted_never_traced() {
    let test = "the_agent_in_its_own_group_is_listed_never_aborted_never_traced";
    if !require_root(test) {
        return;
    }
    if !require(on_path("busybox"), test, "needs busybox") {
        return;
    }
    let cg = Group::here("own-group", Some(512 << 20));
    let port = monitor_tests::agent::free_port();
    // busybox httpd: a server far smaller than the agent, so the agent is the group's largest process.
    let dir = monitor_tests::temp_dir("own-group-www");
    let mut cmd = monitor_tests::servers::busybox_httpd(&dir, port);
    let server = spawn_in_cgroup(&mut cmd, cg.path());
    wait_port(port);
    // A limit far below what the group uses: the policy is in `aborting` from the first sample.
    let config = Config::new()
        .set("policy", "limit_bytes", 1_048_576)
        // Who is named to abort is what this test is about: the last resort would kill the server it then asks.
        .set("policy", "kill", false)
        .write(std::env::temp_dir().join(format!("monitor-own-group-{}.toml", std::process::id())));
    let web = monitor_tests::agent::free_port();
    let args: Vec<String> = ["agent", "--cgroup", "auto", "--interval-ms", "50", "--config"]
        .iter()
        .map(|s| s.to_string())
        .chain([config.display().to_string(), "--listen".into(), format!("127.0.0.1:{web}")])
        .collect();
    let agent = Agent::start_args_in(args, web, Some(cg.path()));
    let _ = std::fs::remove_file(&config);
    let (me, py) = (agent.pid(), server.pid());
    let st = agent.wait_for(|s| entry(s, me).is_some() && entry(s, py).is_some(), Duration::from_secs(10));
    assert_eq!(st["group"]["cgroup"], cg.path().display().to_string(), "auto is the agent's own cgroup: {st}");
    assert_eq!(st["policy"]["state"], "aborting", "{}", st["policy"]);
    let rss = |pid| entry(&st, pid).and_then(|p| p["rss_bytes"].as_u64()).unwrap_or(0);
    // The case this test is about: the agent is the largest member, yet the server is the one the policy names.
    assert!(rss(me) > rss(py), "the agent ({} B) should outweigh busybox ({} B) here", rss(me), rss(py));
    assert_eq!(st["policy"]["largest_pid"], py, "the agent must never be the victim: {}", st["policy"]);
    assert_eq!(entry(&st, py).and_then(|p| p["action"].as_str()), Some("abort"), "{st}");

    // The server is counted (its forked child folds into it); the agent, polled over HTTP all along, is not.
    let traced = st["probes"]["enabled"] == true;
    let off = format!("probes off ({}): the tracing half is not checked", st["probes"]["reason"]);
    if require(traced, test, &off) {
        let url = format!("http://127.0.0.1:{port}/index.html");
        let out = Command::new("curl").args(["-s", "-o", "/dev/null", "--max-time", "10", &url]).output();
        assert!(out.is_ok_and(|o| o.status.success()), "curl {url}");
        let st = agent.wait_for(
            |s| entry(s, py).is_some_and(|p| p["responses_total"].as_u64() == Some(1)),
            Duration::from_secs(10),
        );
        let mine = entry(&st, me).cloned().unwrap_or_default();
        assert_eq!(mine["requests_total"], 0, "the agent's own API requests were traced: {mine}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
