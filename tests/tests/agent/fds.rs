//! File descriptors: an agent held to 1,024 of them (soft and hard, so raising cannot help) watching a group of
//! 1,101 processes samples every one of them (the ones past what it can keep open are read by open-read-close) and
//! says so: `group.processes_sampled` equals `group.processes_listed`.

use monitor_tests::agent::free_port;
use monitor_tests::{http, monitor_bin, on_path, require, require_group, spawn_in_cgroup, ChildGuard, Group};
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SLEEPERS: usize = 1_100;

/// The agent's `/api/v1/status`, when it answers.
fn status(port: u16) -> Option<Value> {
    let r = http::get(std::net::SocketAddr::from(([127, 0, 0, 1], port)), "/api/v1/status", Duration::from_secs(5));
    let r = r.ok()?;
    (r.status == 200).then(|| serde_json::from_slice(&r.body).ok()).flatten()
}

#[test]
fn every_process_is_sampled_past_the_fd_limit() {
    let name = "every_process_is_sampled_past_the_fd_limit";
    if !require_group(name) || !require(on_path("prlimit"), name, "needs prlimit (util-linux)") {
        return;
    }
    let cg = Group::here("fds", None);
    // One shell and its 1,100 sleepers.
    let script = format!("for i in $(seq {SLEEPERS}); do sleep 600 & done; wait");
    let mut sh = Command::new("sh");
    sh.args(["-c", &script]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    let _sleepers = spawn_in_cgroup(&mut sh, cg.path());
    monitor_tests::wait_until("the sleepers in the group", Duration::from_secs(60), || {
        (cg.procs().len() > SLEEPERS).then_some(())
    });
    let port = free_port();
    let mut cmd = Command::new("prlimit");
    cmd.arg("--nofile=1024:1024")
        .arg("--")
        .arg(monitor_bin())
        .args(["agent", "--cgroup", &cg.relative(), "--listen", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut agent = ChildGuard::spawn(&mut cmd);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = Value::Null;
    let done = loop {
        if let Some(st) = agent.wait_timeout(Duration::ZERO) {
            let mut err = String::new();
            if let Some(mut e) = agent.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            panic!("the agent exited ({st}):\n{err}");
        }
        if let Some(s) = status(port) {
            let g = &s["group"];
            let listed = g["processes_listed"].as_u64().unwrap_or(0);
            if listed > SLEEPERS as u64 && g["processes_sampled"] == listed {
                break s;
            }
            last = s;
        }
        assert!(Instant::now() < deadline, "not every process sampled within 30 s: {}", last["group"]);
        std::thread::sleep(Duration::from_millis(100));
    };
    let listed = done["group"]["processes_listed"].as_u64().unwrap_or(0);
    let shown = done["processes"].as_array().map_or(0, Vec::len) as u64;
    assert_eq!(shown, listed, "every sampled process is in the status");
    // The limit held: the agent ran with 1,024 descriptors.
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", agent.pid())).unwrap_or_default();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap_or_default().to_string();
    assert!(line.split_whitespace().filter(|w| *w == "1024").count() == 2, "{line}");
    // And it stays so, sample after sample.
    std::thread::sleep(Duration::from_millis(500));
    let again = status(port).unwrap_or_else(|| panic!("no status"));
    assert_eq!(again["group"]["processes_sampled"], again["group"]["processes_listed"], "{}", again["group"]);
    eprintln!("{name}: {listed} listed, {listed} sampled with 1024 fds");
}
