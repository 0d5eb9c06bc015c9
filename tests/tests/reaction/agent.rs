//! The agent reacts in time on a real memory group (v1 or v2, as the host offers) (root): a `grower` that maps and
//! touches 4 MiB chunks as fast as this machine allows, in a 512 MiB group beside two 40 MiB bystanders, is sent the
//! abort signal before the kernel's OOM killer has to act, 20 runs out of 20, with the default policy. And no wake-up
//! source is faked: with the memory thresholds off (`wakeups = []`) the status says so, the abort comes from a timed
//! sample, and a moderate grower is still signalled in time; with them on, the abort comes from a threshold.
//!
//! The tests take turns (`crate::turn`): each loads a core with its grower, and the timings are the point.

use monitor_tests::config::Config;
use monitor_tests::reaction::{Grower, Outcome, Speed};
use monitor_tests::{require_group, Agent, Group, Hierarchy, Hog, MIB};
use serde_json::Value;
use std::time::Duration;

const HOG: &str = env!("CARGO_BIN_EXE_alloc-hog");
const GROWER: &str = env!("CARGO_BIN_EXE_grower");
const LIMIT: u64 = 512 * MIB;
/// The abort line of the default policy.
const ABORT_AT: f64 = 0.92;

/// A 512 MiB group with two 40 MiB bystanders, and an agent on it with `policy` and the abort signal SIGUSR2.
struct Setup {
    _bystanders: Vec<Hog>,
    agent: Agent,
    cg: Group,
    dir: std::path::PathBuf,
}

impl Setup {
    fn new(name: &str, policy: &str) -> Setup {
        let cg = Group::here(name, Some(LIMIT));
        let bystanders = (0..2).map(|_| Hog::spawn(HOG, cg.path(), 40, false)).collect();
        let dir = monitor_tests::temp_dir(name);
        let config = Config::new().lines("policy", policy).probes(false).set("actions", "abort_signal", "SIGUSR2");
        let agent = Agent::with_config_only(cg.path(), &config, &dir);
        Setup { _bystanders: bystanders, agent, cg, dir }
    }

    /// One run: a grower at `speed` until the agent signals it or the kernel kills it. Returns the outcome, the
    /// group's anon before it started, and the OOM kills the kernel counted meanwhile.
    fn run(&self, speed: Speed) -> (Outcome, u64, u64) {
        // The agent is back to normal, with nothing but the bystanders listed, before each run.
        self.agent.wait_for(
            |s| {
                s.pointer("/policy/state").and_then(Value::as_str) == Some("normal")
                    && s.pointer("/processes").and_then(Value::as_array).map(Vec::len) == Some(2)
            },
            Duration::from_secs(10),
        );
        let mut grower = Grower::spawn(GROWER.as_ref(), self.cg.path(), speed).unwrap_or_else(|e| panic!("{e}"));
        let pid = grower.child.pid();
        self.agent.wait_for(|s| monitor_tests::agent::process(s, pid).is_some(), Duration::from_secs(10));
        let base = self.cg.anon().unwrap_or_else(|e| panic!("{e}"));
        let kills = self.cg.oom_count();
        grower.start().unwrap_or_else(|e| panic!("{e}"));
        let outcome = grower.finish(Duration::from_secs(10)).unwrap_or_else(|e| panic!("{e}"));
        (outcome, base, self.cg.oom_count() - kills)
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The grower's bytes at the signal plus the base, against the abort line and the limit; panics naming the run
/// if it was not signalled, or was signalled only past the limit.
fn signalled_in_time(outcome: &Outcome, base: u64, kills: u64, what: &str) -> f64 {
    let report = match outcome {
        Outcome::Report(r) => r,
        Outcome::Died(how) => panic!("{what}: the grower died without the signal ({how}); OOM kills {kills}"),
    };
    let signal = report.signal_ns.unwrap_or_else(|| panic!("{what}: the grower was never signalled: {report:?}"));
    assert_eq!(kills, 0, "{what}: the kernel OOM-killed {kills} process(es)");
    let held = report.chunks.iter().take_while(|&&(t, _)| t <= signal).last().map_or(0, |&(_, b)| b);
    let reached = (base + held) as f64 / LIMIT as f64;
    assert!(reached < 1.0, "{what}: signalled at {:.1}% of the limit", reached * 100.0);
    reached
}

fn wakeups(status: &Value) -> Vec<String> {
    let list = status.pointer("/group/wakeups").and_then(Value::as_array);
    let list = list.unwrap_or_else(|| panic!("no group.wakeups in the status:\n{status:#}"));
    list.iter().filter_map(|v| v.as_str().map(str::to_string)).collect()
}

/// The sources of the wake-ups that took the agent into `aborting`, one per time, from its log lines.
fn aborts_woken_by(agent: &Agent) -> Vec<String> {
    let log = agent.stderr();
    log.lines()
        .filter(|l| l.contains("decision changed") && l.contains("state=\"aborting\""))
        .filter_map(|l| {
            let rest = &l[l.find("woken_by=")? + "woken_by=".len()..];
            Some(rest.split_whitespace().next()?.trim_matches('"').to_string())
        })
        .collect()
}

#[test]
fn a_full_speed_grower_is_signalled_before_the_limit_in_20_of_20_runs() {
    if !require_group("a_full_speed_grower_is_signalled_before_the_limit_in_20_of_20_runs") {
        return;
    }
    let _turn = crate::turn();
    let setup = Setup::new("reaction-fast", "");
    // v1 arms its memory thresholds; v2 watches memory.events and a PSI trigger on memory.pressure.
    let armed: &[&str] = match setup.cg.hierarchy() {
        Hierarchy::V1 => &["thresholds"],
        Hierarchy::V2 => &["events", "pressure"],
    };
    let mut listed = wakeups(&setup.agent.status());
    listed.sort();
    assert_eq!(listed, armed, "the wake-ups armed by default");
    let mut reached = Vec::new();
    for run in 1..=20 {
        let (outcome, base, kills) = setup.run(Speed(0));
        reached.push(signalled_in_time(&outcome, base, kills, &format!("run {run} of 20")));
    }
    let worst = reached.iter().copied().fold(0.0, f64::max);
    eprintln!("20 of 20 signalled before the limit; the furthest a grower got: {:.1}% of the limit", worst * 100.0);
    // v1's thresholds fire at the lines themselves: they must have woken the agent into aborting at least once in
    // the 20 runs (the pacing timer, quicker near the line, sometimes comes first). v2 has no usage thresholds:
    // memory.events and PSI speak only at memory.high or memory.max and under reclaim, so short of the limit the
    // pacing timer is what finds the line, and only the outcome above is asked of it.
    let woken = aborts_woken_by(&setup.agent);
    eprintln!("the aborts were woken by {woken:?}");
    if setup.cg.hierarchy() == Hierarchy::V1 {
        assert!(woken.iter().any(|w| w == "thresholds"), "woken by {woken:?}:\n{}", setup.agent.stderr());
    }
}

#[test]
fn with_the_thresholds_off_the_timer_still_reacts() {
    if !require_group("with_the_thresholds_off_the_timer_still_reacts") {
        return;
    }
    let _turn = crate::turn();
    let setup = Setup::new("reaction-timer", "wakeups = []");
    let status = setup.agent.status();
    assert!(wakeups(&status).is_empty(), "nothing armed:\n{status:#}");
    let off = status.pointer("/group/wakeups_off").and_then(Value::as_array).cloned().unwrap_or_default();
    assert!(
        off.iter().any(|o| o["reason"].as_str().is_some_and(|r| r.contains("config"))),
        "the wake-ups said off in the config:\n{status:#}"
    );
    // 100 MB/s: the 41 MiB between the abort line and the limit take 430 ms, the timer's pacing has time.
    for run in 1..=3 {
        let (outcome, base, kills) = setup.run(Speed(100));
        let reached = signalled_in_time(&outcome, base, kills, &format!("timer run {run}"));
        assert!(reached >= ABORT_AT - 0.01, "run {run}: signalled at {:.1}%, before the line", reached * 100.0);
    }
    let woken = aborts_woken_by(&setup.agent);
    assert!(!woken.is_empty() && woken.iter().all(|w| w == "timer"), "woken by {woken:?}:\n{}", setup.agent.stderr());
}
