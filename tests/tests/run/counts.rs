//! Kernel counts under `monitor run`: the launcher has each process traced the moment it starts (before its first
//! health check), so the probes' `requests_total` of every process equals the requests it got by its own count
//! (the fixture's `/stats` `requests`: health checks, proxied requests and the `/stats` requests themselves).

use monitor_tests::require_group;
use monitor_tests::run::{member, Run, Spec, TIMEOUT};
use monitor_tests::{is_root, on_path, require};
use serde_json::Value;
use std::time::Duration;

/// `requests_total` of `pid` in the agent's status.
fn kernel_requests(s: &Value, pid: u64) -> Option<u64> {
    s["processes"].as_array()?.iter().find(|p| p["pid"].as_u64() == Some(pid))?["requests_total"].as_u64()
}

#[test]
fn every_request_a_process_got_is_counted_from_its_start() {
    let name = "every_request_a_process_got_is_counted_from_its_start";
    if !require_group(name) {
        return;
    }
    if !require(is_root(), name, "needs root for the probes") {
        return;
    }
    // Samples a second apart: without the launcher's request, a new process would only be traced at the next one,
    // after its first health checks. Periodic health checks a minute apart: none during the test.
    let spec = Spec {
        workers: 2,
        probes: true,
        policy: "interval_ms = 1000".into(),
        process: "health_interval_ms = 60000\n".into(),
        ..Spec::default()
    };
    let run = Run::start("counts", &spec);
    let st = run.status();
    assert_eq!(st["probes"]["enabled"], true, "the probes must run as root: {}", st["probes"]);
    for i in 0..30 {
        let path = if i % 10 == 0 { "/syndication/feed".to_string() } else { format!("/r4/CodeSystem/{i}") };
        let r = run.get(&path, &[]);
        assert_eq!(r.status, 200, "{path}: {}", r.text());
    }
    for (i, name) in ["m0", "tx1", "tx2"].iter().enumerate() {
        let pid = member(&run.status(), name)["pid"].as_u64().unwrap_or_else(|| panic!("no pid for {name}"));
        // The process's own count (this /stats request included), then the kernel's from the first sample whose
        // read of the counters began after it (`sample.counted_unix_ms`: they are read once a second), then the
        // process's count again: one more (that second /stats request) when nothing else reached the process in
        // between.
        let own = |i: usize| run.stats(i)["requests"].as_u64().unwrap_or_else(|| panic!("{name}: no requests"));
        let before = own(i);
        let asked = monitor::base::proof::now_ms();
        let counted = |s: &Value| s["sample"]["counted_unix_ms"].as_u64().is_some_and(|t| t > asked);
        let status = run.wait_for("a read of the counters after the process's own count", counted, TIMEOUT);
        let kernel = kernel_requests(&status, pid);
        let after = own(i);
        assert_eq!(after, before + 1, "{name}: requests reached it during the check");
        assert_eq!(
            kernel,
            Some(before),
            "{name} (pid {pid}): the kernel's count against the process's own, own count asked at {asked}, sample \
             {}",
            status["sample"]
        );
    }
    // /metrics under monitor run: one launcher-state series per process, and valid exposition text.
    let metrics = monitor_tests::http::get(run.web, "/metrics", Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("GET /metrics: {e}"))
        .text();
    for (name, role) in [("m0", "master"), ("tx1", "worker"), ("tx2", "worker")] {
        let line = format!("monitor_process_state{{process=\"{name}\",role=\"{role}\",state=\"ready\"}} 1");
        assert!(metrics.contains(&line), "no {line} in /metrics:\n{metrics}");
    }
    if require(on_path("promtool"), name, "needs promtool (apt-get install prometheus) for the metrics half") {
        let mut child = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("promtool: {e}"));
        if let Some(mut stdin) = child.stdin.take() {
            std::io::Write::write_all(&mut stdin, metrics.as_bytes()).unwrap_or_else(|e| panic!("promtool stdin: {e}"));
        }
        let out = child.wait_with_output().unwrap_or_else(|e| panic!("promtool: {e}"));
        assert!(out.status.success(), "promtool check metrics: {}", String::from_utf8_lossy(&out.stderr));
    }
}
