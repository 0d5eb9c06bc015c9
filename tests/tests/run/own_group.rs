//! `monitor run` as deploy/monitor-run.service runs it: started inside the group's cgroup with `cgroup = "auto"`,
//! so the processes it launches stay in its own cgroup and the cgroup's limit is the group's. The group is that
//! cgroup, with its limit; monitor is listed beside its processes but not traced (the front door's own traffic is
//! not counted as requests), the processes' kernel counts add up to what went through the front door, and SIGTERM
//! drains and exits 0 with every process gone.

use monitor_tests::agent::process;
use monitor_tests::require_group;
use monitor_tests::run::{launcher, Run, Spec};
use serde_json::Value;
use std::time::Duration;

/// The status entry of `pid` (a u64 from the launcher's list).
fn entry(s: &Value, pid: u64) -> Option<&Value> {
    process(s, u32::try_from(pid).ok()?)
}

#[test]
fn run_in_its_own_group_guards_it_without_counting_itself() {
    let name = "run_in_its_own_group_guards_it_without_counting_itself";
    if !require_group(name) {
        return;
    }
    // Root, as require_group made sure: the probes run.
    let spec = Spec { workers: 2, probes: true, own_group: true, limit_mib: 768, ..Spec::default() };
    let mut run = Run::start("own-group", &spec);
    let pids: Vec<u64> = launcher(&run.status()).iter().filter_map(|p| p["pid"].as_u64()).collect();
    assert_eq!(pids.len(), 3, "{}", run.status());
    // The launcher's states are live; the process list is the last sample's.
    let st = run.wait_for(
        "the processes in a sample",
        |s| pids.iter().all(|p| entry(s, *p).is_some()),
        Duration::from_secs(10),
    );
    assert_eq!(st["group"]["cgroup"], run.cg.path().display().to_string(), "auto is monitor's own cgroup");
    assert_eq!(st["group"]["limit_bytes"], 768u64 << 20, "{}", st["group"]);
    let me = u64::from(run.pid());
    assert!(entry(&st, me).is_some(), "monitor itself is a member of its group: {st}");
    let n = 40u64;
    for i in 0..n {
        let r = run.get(&format!("/r4/CodeSystem/{i}"), &[]);
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert_eq!(st["probes"]["enabled"], true, "{}", st["probes"]);
    // Health checks reach the processes too: at least the proxied requests, and nothing on monitor.
    let st = run.wait_for(
        "the proxied requests counted",
        |s| pids.iter().filter_map(|p| entry(s, *p)?["requests_total"].as_u64()).sum::<u64>() >= n,
        Duration::from_secs(10),
    );
    let mine = entry(&st, me).cloned().unwrap_or_default();
    assert_eq!(mine["requests_total"], 0, "monitor traced itself: {mine}");
    assert_eq!(mine["accepts_total"], 0, "monitor traced itself: {mine}");
    let status = run.terminate(Duration::from_secs(30));
    assert!(status.success(), "monitor run exit: {status}; stderr:\n{}", run.stderr());
    for pid in pids {
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "process {pid} outlived monitor run");
    }
}
