//! The memory scenario that the host (cgroup v1) and the test VM (cgroup v2) both run: three `alloc-hog`s of
//! known size in a group, `monitor agent` on it, the group pushed past refuse_at (85%) and abort_at (92%) and
//! back down through the hysteresis. The scenario checks what holds on either hierarchy (usage within 5% of the
//! hogs' RssAnon, each process's RSS, the states and actions at each step, the largest aborted) and returns the
//! status it saw at each step, for the caller to check what is particular to its hierarchy.

use crate::group::Group;
use crate::status::{action, close, f64_at, process, state, str_at, u64_at};
use crate::{Agent, Hog, MIB};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// What the scenario saw.
#[derive(Debug)]
pub struct Memory {
    /// The group's limit.
    pub limit: u64,
    /// 78%: every hog listed, the agent's usage within 5% of their summed RssAnon.
    pub normal: Value,
    /// The group's own anon count (`Group::anon`) read just after `normal`.
    pub kernel_anon: u64,
    /// 88%: refusing, every hog told to refuse.
    pub refusing: Value,
    /// 94%: aborting, the largest hog told to abort.
    pub aborting: Value,
    /// Back at 84% on the way down: still refusing (hysteresis).
    pub hysteresis: Value,
    /// 59%: normal, everyone serves.
    pub normal_again: Value,
    /// The hogs' pids, the largest last.
    pub pids: Vec<u32>,
}

/// Waits until the agent's usage is within 5% of the hogs' summed RssAnon and every hog is listed.
pub fn wait_usage_matches(agent: &Agent, hogs: &[Hog], settle: Duration) -> Value {
    let want: u64 = hogs.iter().map(Hog::rss_anon).sum();
    agent.wait_for(
        |s| {
            let usage = s.pointer("/group/usage_bytes").and_then(Value::as_u64).unwrap_or(0);
            close(usage, want, 0.05, 0) && hogs.iter().all(|h| process(s, h.pid()).is_some())
        },
        settle,
    )
}

/// True when the status gives every hog the action `want`.
pub fn all_actions(status: &Value, hogs: &[Hog], want: &str) -> bool {
    hogs.iter().all(|h| action(status, h.pid()) == Some(want))
}

/// `GET /api/v1/decision?pid=N` names the action.
pub fn decision_says(agent: &Agent, pid: u32, want: &str) {
    let (code, body) = agent.get(&format!("/api/v1/decision?pid={pid}"));
    assert_eq!(code, 200, "decision for {pid}: {body}");
    let got = match serde_json::from_str::<Value>(&body) {
        Ok(Value::Object(o)) => o.get("action").and_then(Value::as_str).map(str::to_string),
        Ok(Value::String(s)) => Some(s),
        _ => None,
    };
    assert_eq!(got.as_deref(), Some(want), "decision for {pid}: {body}");
}

/// Resizes the hogs one by one, in the given order, to the given MiB (times `scale`).
fn resize(hogs: &mut [Hog], scale: u64, plan: &[(usize, u64)]) {
    for &(i, mib) in plan {
        hogs[i].set_mib(mib * scale);
    }
}

/// Runs the scenario on `group`, whose limit must be `scale` × 256 MiB (the hogs' sizes scale with it), with the
/// `alloc-hog` binary `hog_bin`; `settle` bounds each wait for the agent to show a change.
pub fn memory(group: &Group, hog_bin: &Path, scale: u64, settle: Duration) -> Memory {
    let limit = 256 * MIB * scale;
    // 200 MiB = 78% of 256.
    let mut hogs: Vec<Hog> =
        [50, 65, 85].iter().map(|&m| Hog::spawn(hog_bin, group.path(), m * scale, false)).collect();
    let agent = Agent::start(&group.path().display().to_string(), &[]);

    // Normal: the group, its usage and each process.
    let normal = wait_usage_matches(&agent, &hogs, settle);
    let kernel_anon = group.anon().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(str_at(&normal, "/group/version"), group.hierarchy().name());
    assert_eq!(u64_at(&normal, "/group/limit_bytes"), limit);
    assert_eq!(str_at(&normal, "/group/limit_source"), "cgroup");
    let name = group.relative();
    assert!(str_at(&normal, "/group/cgroup").ends_with(&name), "group.cgroup should name {name}: {normal:#}");
    let usage = u64_at(&normal, "/group/usage_bytes");
    let ratio = f64_at(&normal, "/group/ratio");
    assert!((ratio - usage as f64 / limit as f64).abs() < 0.005, "ratio {ratio} for usage {usage}");
    assert_eq!(str_at(&normal, "/policy/state"), "normal");
    for h in &hogs {
        let p = process(&normal, h.pid()).unwrap_or_else(|| panic!("pid {} not listed", h.pid()));
        let (rss, anon) = (u64_at(p, "/rss_bytes"), u64_at(p, "/anon_bytes"));
        let (vm_rss, rss_anon) = (h.vm_rss(), h.rss_anon());
        assert!(close(rss, vm_rss, 0.02, 2 * MIB), "pid {}: rss_bytes {rss}, VmRSS {vm_rss}", h.pid());
        assert!(close(anon, rss_anon, 0.02, 2 * MIB), "pid {}: anon_bytes {anon}, RssAnon {rss_anon}", h.pid());
        assert_eq!(p.get("action").and_then(Value::as_str), Some("serve"), "{p}");
    }
    decision_says(&agent, hogs[0].pid(), "serve");

    // 225 MiB = 88%: refusing, everyone refuses.
    resize(&mut hogs, scale, &[(0, 55), (1, 70), (2, 100)]);
    let refusing = agent.wait_for(|s| state(s) == Some("refusing") && all_actions(s, &hogs, "refuse"), settle);
    assert!(f64_at(&refusing, "/group/ratio") >= 0.85);
    decision_says(&agent, hogs[1].pid(), "refuse");

    // 240 MiB = 94%: aborting, the largest aborts, the others refuse.
    resize(&mut hogs, scale, &[(1, 75), (2, 110)]);
    let largest = hogs[2].pid();
    let aborting = agent.wait_for(|s| state(s) == Some("aborting") && action(s, largest) == Some("abort"), settle);
    assert_eq!(u64_at(&aborting, "/policy/largest_pid"), u64::from(largest));
    for h in &hogs[..2] {
        assert_eq!(action(&aborting, h.pid()), Some("refuse"), "pid {}: {aborting:#}", h.pid());
    }
    decision_says(&agent, largest, "abort");

    // Back to 225 MiB = 88%: below abort_at - hysteresis (0.90), so refusing again.
    resize(&mut hogs, scale, &[(2, 100), (1, 70)]);
    agent.wait_for(|s| state(s) == Some("refusing") && all_actions(s, &hogs, "refuse"), settle);

    // 214 MiB = 84%: below refuse_at but not below refuse_at - hysteresis (0.83): still refusing.
    resize(&mut hogs, scale, &[(2, 97), (1, 65), (0, 52)]);
    wait_usage_matches(&agent, &hogs, settle);
    std::thread::sleep(Duration::from_millis(500));
    let hysteresis = wait_usage_matches(&agent, &hogs, settle);
    let ratio = f64_at(&hysteresis, "/group/ratio");
    assert!((0.83..0.85).contains(&ratio), "the fixture should sit at 84%, is at {ratio}");
    assert_eq!(state(&hysteresis), Some("refusing"), "hysteresis: left refusing at {ratio}: {hysteresis:#}");

    // 150 MiB = 59%: normal, everyone serves.
    resize(&mut hogs, scale, &[(2, 60), (1, 50), (0, 40)]);
    let normal_again = agent.wait_for(|s| state(s) == Some("normal") && all_actions(s, &hogs, "serve"), settle);
    let pids = hogs.iter().map(Hog::pid).collect();
    Memory { limit, normal, kernel_anon, refusing, aborting, hysteresis, normal_again, pids }
}
