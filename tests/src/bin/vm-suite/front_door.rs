//! `monitor run` on a real cgroup v2 hierarchy: it creates the group with its `memory.max`, starts a master and a
//! worker of the fixture backend in it, proxies requests to them, counts them in the kernel, and on SIGTERM drains,
//! stops the processes and removes the group it created.

use crate::support::*;
use monitor_tests::agent::free_port;
use monitor_tests::{http, ChildGuard};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Requests sent through the front door.
const REQUESTS: u64 = 20;

pub fn run_creates_the_group_and_serves() {
    let cg = Path::new("/sys/fs/cgroup").join(format!("monitor-test-run-{}", std::process::id()));
    assert!(!cg.exists(), "{} exists already", cg.display());
    let (proxy, web) = (free_port(), free_port());
    let ports = [free_port(), free_port()];
    let fixture = bin_dir().join("fixture-backend");
    let mut config = format!(
        "[group]\ncgroup = {:?}\ncreate = true\nlimit_bytes = {}\n[policy]\ninterval_ms = 50\n\
         [web]\nlisten = \"127.0.0.1:{web}\"\n[proxy]\nlisten = \"127.0.0.1:{proxy}\"\ndrain_timeout_s = 5\n\
         stop_grace_s = 2\n",
        cg.display().to_string(),
        256u64 << 20
    );
    for (i, (name, role)) in [("m0", "master"), ("tx1", "worker")].iter().enumerate() {
        config.push_str(&format!(
            "[[process]]\nname = \"{name}\"\nrole = \"{role}\"\ncommand = [{:?}, \"--name\", \"{name}\", \"--port\", \
             \"{port}\"]\nport = {port}\nstart_timeout_s = 30\n",
            fixture.display().to_string(),
            port = ports[i]
        ));
    }
    let file = std::env::temp_dir().join("monitor-run-v2.toml");
    std::fs::write(&file, config).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut cmd = Command::new(bin_dir().join("monitor"));
    cmd.arg("run").arg("--config").arg(&file).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::inherit());
    let mut run = ChildGuard::spawn(&mut cmd);
    let web = SocketAddr::from(([127, 0, 0, 1], web));
    let proxy = SocketAddr::from(([127, 0, 0, 1], proxy));

    let ready = wait_status(web, "both processes ready", |s| {
        let l = s.pointer("/launcher").and_then(Value::as_array);
        l.is_some_and(|l| l.len() == 2 && l.iter().all(|p| p["state"] == "ready"))
    });
    // The group it created, with the limit, holding both processes.
    let max = std::fs::read_to_string(cg.join("memory.max")).unwrap_or_default();
    assert_eq!(max.trim(), (256u64 << 20).to_string(), "memory.max of {}", cg.display());
    let procs = std::fs::read_to_string(cg.join("cgroup.procs")).unwrap_or_default();
    let pids: Vec<u32> = ready["launcher"]
        .as_array()
        .map(|l| l.iter().filter_map(|p| p["pid"].as_u64()).map(|p| p as u32).collect())
        .unwrap_or_default();
    assert_eq!(pids.len(), 2, "{ready:#}");
    for pid in &pids {
        assert!(procs.lines().any(|l| l.trim() == pid.to_string()), "pid {pid} not in {}: {procs}", cg.display());
    }
    assert_eq!(u64_at(&ready, "/group/limit_bytes"), 256 << 20, "the limit the agent reads");
    assert_eq!(str_at(&ready, "/group/version"), "v2");

    // Through the front door: every request answered by one of the two.
    for i in 0..REQUESTS {
        let r = http::request(proxy, "GET", &format!("/tx/r4/CodeSystem/{i}"), &[], Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("request {i} via the proxy: {e}"));
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
    }
    // Counted in the kernel for the two processes: at least what went through (the launcher's health checks
    // count too), and then nothing left in flight. A sample may fall between a request and its response (a health
    // check, or the last request: the status is up to one sample old; in flight 1 was seen on 6.1), so this waits
    // for a sample with none: one that never comes (a request counted and its response not) fails here.
    let s = wait_status(web, "the requests counted and none in flight", |s| {
        let procs: Vec<&Value> = pids.iter().filter_map(|&p| process(s, p)).collect();
        let total: u64 = procs.iter().filter_map(|p| p.get("requests_total")).filter_map(Value::as_u64).sum();
        let idle =
            procs.len() == pids.len() && procs.iter().all(|p| p.get("inflight").and_then(Value::as_u64) == Some(0));
        total >= REQUESTS && idle
    });
    for &pid in &pids {
        let p = process(&s, pid).unwrap_or_else(|| panic!("pid {pid} not in the status:\n{s:#}"));
        assert_eq!(p.get("inflight").and_then(Value::as_u64), Some(0), "{p:#}");
    }

    // SIGTERM: drain, stop the processes, exit 0, remove the group.
    if let Ok(pid) = libc::pid_t::try_from(run.pid()) {
        // SAFETY: kill has no memory-safety preconditions; the pid is our un-reaped child.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = run.try_wait().ok().flatten() {
            break st;
        }
        assert!(Instant::now() < deadline, "monitor run did not exit within 30 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "monitor run exited with {status}");
    assert!(!cg.exists(), "{} was not removed", cg.display());
    for pid in pids {
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "process {pid} outlived monitor run");
    }
}

/// Polls `/api/v1/status` until `pred` holds.
fn wait_status(web: SocketAddr, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + SETTLE;
    loop {
        let got = http::get(web, "/api/v1/status", Duration::from_secs(5)).ok().filter(|r| r.status == 200);
        if let Some(s) = got.and_then(|r| serde_json::from_str::<Value>(&r.text()).ok()) {
            if pred(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "{what}: not within {SETTLE:?}; status:\n{s:#}");
        }
        assert!(Instant::now() < deadline, "{what}: no status within {SETTLE:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
