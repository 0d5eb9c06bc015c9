//! The agent on what only cgroup v2 has: the limit up a nested tree of `memory.max` and changed at run time,
//! `memory.high` beside it, a process moved out (v2 does not move its charges). The memory scenario and the group
//! removed under the agent run on v2 as the host's own tests (tests/tests/agent).

use crate::support::*;
use monitor_tests::cgroup2::{move_to_root, CgroupV2};
use monitor_tests::{Agent, Hog, MIB};

/// The policy test's group limit.
const LIMIT: u64 = 256 * MIB;

fn hogs_in(cg: &CgroupV2, mibs: &[u64]) -> Vec<Hog> {
    mibs.iter().map(|&m| Hog::spawn(hog_bin(), cg.path(), m, false)).collect()
}

/// top (200 MiB) / mid (max) / leaf (300 MiB), the agent on the leaf by a path relative to the mount: the limit
/// is the smallest `memory.max` up the tree, and follows `memory.max` written while the agent runs.
pub fn nested_limit_changed_at_run_time() {
    let top = CgroupV2::create("top", Some(200 * MIB));
    let mid = top.create_child("mid", None);
    let leaf = mid.create_child("leaf", Some(300 * MIB));
    let hog = Hog::spawn(hog_bin(), leaf.path(), 40, false);
    let agent = Agent::start(&leaf.relative(), &[]);
    let s = wait_usage_matches(&agent, std::slice::from_ref(&hog));
    assert_eq!(str_at(&s, "/group/version"), "v2");
    assert_eq!(str_at(&s, "/group/limit_source"), "cgroup");
    assert_eq!(u64_at(&s, "/group/limit_bytes"), 200 * MIB, "the top's limit applies: {s:#}");

    let limit_is = |bytes: u64| {
        move |s: &serde_json::Value| s.pointer("/group/limit_bytes").and_then(serde_json::Value::as_u64) == Some(bytes)
    };
    // The leaf's own limit drops below the top's.
    leaf.set_max(Some(150 * MIB));
    let s = agent.wait_for(limit_is(150 * MIB), SETTLE);
    let ratio = f64_at(&s, "/group/ratio");
    let usage = u64_at(&s, "/group/usage_bytes");
    assert!((ratio - usage as f64 / (150 * MIB) as f64).abs() < 0.005, "ratio {ratio} for usage {usage}");
    // The top's drops below the leaf's.
    top.set_max(Some(120 * MIB));
    agent.wait_for(limit_is(120 * MIB), SETTLE);
    // The middle one gets the smallest.
    mid.set_max(Some(100 * MIB));
    agent.wait_for(limit_is(100 * MIB), SETTLE);
    // No limit left anywhere: the host's memory.
    for cg in [&leaf, &mid, &top] {
        cg.set_max(None);
    }
    let s = agent.wait_for(|s| s.pointer("/group/limit_source").and_then(|v| v.as_str()) == Some("host"), SETTLE);
    assert_eq!(u64_at(&s, "/group/limit_bytes"), mem_total());
    // cgroup v2 with PSI: the group's memory stall totals are exported, both kinds, as counters.
    let leaf_pressure = std::fs::read_to_string(leaf.path().join("memory.pressure")).unwrap_or_default();
    let (code, metrics) = agent.get("/metrics");
    assert_eq!(code, 200, "{metrics}");
    for kind in ["some", "full"] {
        let line = format!("monitor_memory_pressure_seconds_total{{kind=\"{kind}\"}} ");
        assert!(
            metrics.lines().any(|l| l.starts_with(&line)),
            "no {line}in /metrics (memory.pressure: {leaf_pressure:?})"
        );
    }
}

/// `memory.high` is a throttle, not a limit: the kernel reclaims and slows allocators above it but never
/// OOM-kills there, so the agent's limit (and ratio) stays `memory.max`; the agent keeps working with it set.
pub fn memory_high_is_not_the_limit() {
    let cg = CgroupV2::create("high", Some(LIMIT));
    cg.set_high(Some(128 * MIB));
    let mut hog = Hog::spawn(hog_bin(), cg.path(), 60, false);
    let agent = Agent::start(&cg.path().display().to_string(), &[]);
    let s = wait_usage_matches(&agent, std::slice::from_ref(&hog));
    assert_eq!(u64_at(&s, "/group/limit_bytes"), LIMIT, "memory.max, not memory.high: {s:#}");
    // Grow up to just under memory.high, then lower memory.high at run time: still memory.max.
    hog.set_mib(110);
    let s = wait_usage_matches(&agent, std::slice::from_ref(&hog));
    assert_eq!(u64_at(&s, "/group/limit_bytes"), LIMIT);
    assert_eq!(str_at(&s, "/policy/state"), "normal");
    cg.set_high(Some(200 * MIB));
    hog.set_mib(150);
    let s = wait_usage_matches(&agent, std::slice::from_ref(&hog));
    assert_eq!(u64_at(&s, "/group/limit_bytes"), LIMIT);
    let ratio = f64_at(&s, "/group/ratio");
    let usage = u64_at(&s, "/group/usage_bytes");
    assert!((ratio - usage as f64 / LIMIT as f64).abs() < 0.005, "ratio {ratio} against memory.max");
}

/// A process moved to another group disappears from `processes`; the others stay. (cgroup v2 does not move
/// memory charges with a process: the group's `memory.stat anon`, which the agent reports, keeps what the moved
/// process had touched until it frees it.)
pub fn process_moved_out_disappears() {
    let cg = CgroupV2::create("moved", Some(LIMIT));
    let hogs = hogs_in(&cg, &[30, 20]);
    let agent = Agent::start(&cg.path().display().to_string(), &[]);
    wait_usage_matches(&agent, &hogs);
    let (stay, leave) = (hogs[0].pid(), hogs[1].pid());
    move_to_root(leave);
    assert_eq!(cg.procs(), vec![stay]);
    let s = agent.wait_for(|s| process(s, leave).is_none() && process(s, stay).is_some(), SETTLE);
    let usage = u64_at(&s, "/group/usage_bytes");
    let kernel_anon = cg.stat("anon").unwrap_or(0);
    assert!(close(usage, kernel_anon, 0.05, MIB), "usage {usage}, memory.stat anon {kernel_anon}");
}
