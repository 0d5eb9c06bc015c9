//! The last resort on a real memory group (v1 or v2, as the host offers) (root): a grower that ignores every signal it
//! can is SIGKILLed by the agent before the kernel's OOM killer acts, its bystanders (a master and its worker) left
//! alone; the largest process is the one killed even when its main thread has exited and a thread holds its memory;
//! memory that no kill frees (a tmpfs file the group wrote) costs at most three kills, then the agent stops
//! killing; in shadow mode the kill is decided and logged, never sent; and an allocator that starts a new worker for
//! each one killed (stress-ng) is met by the agent's kills, the kernel's OOM killer left with a twentieth of what it
//! kills without the agent.

use monitor_tests::config::Config;
use monitor_tests::hog::ThreadHolder;
use monitor_tests::reaction::{alive, respawn, Grower, Outcome, Speed};
use monitor_tests::{require_group, spawn_in_cgroup, Agent, ChildGuard, Group, Hog, MIB};
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

const HOG: &str = env!("CARGO_BIN_EXE_alloc-hog");
const GROWER: &str = env!("CARGO_BIN_EXE_grower");
const HOLDER: &str = env!("CARGO_BIN_EXE_thread-holder");

/// An agent on `cg` with the `[policy]` lines `policy` and the abort signal SIGUSR2, its config in `dir`; each alert
/// it sends is appended as one JSON line to `dir/alerts.jsonl` by a command sink.
fn agent(cg: &Group, dir: &Path, policy: &str) -> Agent {
    let out = dir.join("alerts.jsonl");
    let config = Config::new()
        .lines("policy", policy)
        .alert_command(["sh", "-c", "cat >> \"$0\"; echo >> \"$0\"", &out.display().to_string()])
        .set("alerts", "quiet_s", 1)
        .probes(false)
        .set("actions", "abort_signal", "SIGUSR2");
    Agent::with_config_only(cg.path(), &config, dir)
}

/// The alerts named `name` the agent has sent (firing and resolved), from its command sink in `dir`.
fn alerts(dir: &Path, name: &str) -> Vec<serde_json::Value> {
    monitor_tests::json_lines(&dir.join("alerts.jsonl"))
        .into_iter()
        .filter(|a| a["labels"]["alertname"] == name)
        .collect()
}

/// The agent's `killed:` lines (the kills it sent, not the shadow ones).
fn kill_lines(agent: &Agent) -> Vec<String> {
    agent.stderr().lines().filter(|l| l.contains("killed:") && !l.contains("shadow")).map(str::to_string).collect()
}

/// The group's anon and shmem, as the agent counts its usage.
fn counted(cg: &Group) -> u64 {
    cg.anon().ok().unwrap_or(0) + cg.shmem()
}

/// A master holding 40 MiB and its worker holding 40 MiB, two `alloc-hog`s in `cg`: `sh` starts the worker in the
/// background, then becomes the master (exec), so the worker's parent is the master. Both end when `stdin` closes;
/// the group's guard kills what is left.
struct Family {
    master: ChildGuard,
    _stdin: ChildStdin,
    worker: u32,
}

impl Family {
    fn spawn(cg: &Group) -> Family {
        let script = r#"exec 3<&0; "$0" 40 <&3 3<&- & exec "$0" 40 3<&-"#;
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script, HOG]).stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut master = spawn_in_cgroup(&mut cmd, cg.path());
        let (Some(stdin), Some(stdout)) = (master.stdin.take(), master.stdout.take()) else {
            panic!("the family started without pipes");
        };
        let mut out = BufReader::new(stdout);
        for _ in 0..2 {
            let mut line = String::new();
            out.read_line(&mut line).unwrap_or_else(|e| panic!("reading the family's output: {e}"));
            assert_eq!(line.trim(), format!("ready {}", 40 * MIB), "an alloc-hog of the family");
        }
        let pid = master.pid();
        let worker = cg.procs().into_iter().find(|&p| p != pid).unwrap_or_else(|| panic!("no worker in the group"));
        Family { master, _stdin: stdin, worker }
    }

    fn alive(&self) -> bool {
        alive(self.master.pid()) && alive(self.worker)
    }
}

/// A file on /dev/shm (a tmpfs), removed on drop.
struct ShmFile(PathBuf);

impl Drop for ShmFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn stubborn_grower_is_killed_by_the_agent() {
    if !require_group("stubborn_grower_is_killed_by_the_agent") {
        return;
    }
    let _turn = crate::turn();
    let cg = Group::here("kill-stubborn", Some(512 * MIB));
    let family = Family::spawn(&cg);
    let dir = monitor_tests::temp_dir("kill-stubborn");
    let agent = agent(&cg, &dir, "");
    // Up to 700 MiB at full speed: past the limit, so only a SIGKILL stops it before the kernel does.
    let mut grower =
        Grower::spawn_stubborn(GROWER.as_ref(), cg.path(), Speed(0), 700).unwrap_or_else(|e| panic!("{e}"));
    let pid = grower.child.pid();
    agent.wait_for(|s| monitor_tests::agent::process(s, pid).is_some(), Duration::from_secs(10));
    let kills = cg.oom_count();
    grower.start().unwrap_or_else(|e| panic!("{e}"));
    let outcome = grower.finish(Duration::from_secs(10)).unwrap_or_else(|e| panic!("{e}"));
    let death = match outcome {
        Outcome::Died(d) => d,
        Outcome::Report(r) => panic!("the grower reported instead of dying: {r:?}\n{}", agent.stderr()),
    };
    assert_eq!(cg.oom_count(), kills, "the kernel's OOM killer acted ({death}):\n{}", agent.stderr());
    assert_eq!(death.signal, Some(libc::SIGKILL), "the grower died by SIGKILL: {death}");
    let field = format!("pid={pid} ");
    let lines = monitor_tests::wait_until("the agent's kill line", Duration::from_secs(2), || {
        Some(kill_lines(&agent)).filter(|l| l.iter().any(|l| l.contains(&field)))
    });
    assert_eq!(lines.len(), 1, "one kill, the grower's: {lines:#?}");
    assert!(family.alive(), "both bystanders live:\n{}", agent.stderr());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_process_whose_main_thread_exited_is_killed_as_the_largest() {
    if !require_group("a_process_whose_main_thread_exited_is_killed_as_the_largest") {
        return;
    }
    let _turn = crate::turn();
    const LIMIT: u64 = 512 * MIB;
    let cg = Group::here("kill-thread-holder", Some(LIMIT));
    let dir = monitor_tests::temp_dir("kill-thread-holder");
    let agent = agent(&cg, &dir, "");
    // Nobody obeys the abort signal, nobody dies of it: only the agent's SIGKILL at kill_at ends one of them.
    let deaf = [libc::SIGUSR2];
    // 300 MiB held by a thread, the main thread gone: its leader's statm reads zeros.
    let mut holder = ThreadHolder::spawn(HOLDER, Some(cg.path()), 300, &deaf);
    let mut hog = Hog::spawn_ignoring(HOG, cg.path(), 130, false, &deaf);
    let (holder_pid, hog_pid) = (holder.pid(), hog.pid());
    let seen = agent.wait_for(
        |s| [holder_pid, hog_pid].iter().all(|&p| monitor_tests::agent::process(s, p).is_some()),
        Duration::from_secs(10),
    );
    let seen = monitor_tests::agent::process(&seen, holder_pid).map(|p| p["anon_bytes"].clone()).unwrap_or_default();
    let kills = cg.oom_count();
    // A second hog takes the group to about 500 MiB: past kill_at (97%, 496.6 MiB), short of the limit.
    let second_mib = (500 * MIB).saturating_sub(counted(&cg)) / MIB;
    let mut second = Hog::spawn_ignoring(HOG, cg.path(), second_mib, false, &deaf);
    let lines = monitor_tests::wait_until("the agent's kill line", Duration::from_secs(10), || {
        Some(kill_lines(&agent)).filter(|l| !l.is_empty())
    });
    let field = format!("pid={holder_pid} ");
    assert!(
        lines.iter().any(|l| l.contains(&field)),
        "the holder ({holder_pid}, 300 MiB; the agent saw {seen} bytes of anon) is the one killed, not the hogs \
         ({hog_pid}, 130 MiB; {}, {second_mib} MiB): {lines:#?}\n{}",
        second.pid(),
        agent.stderr()
    );
    let death = holder.child.wait_timeout(Duration::from_secs(5));
    assert_eq!(death.and_then(|d| d.signal()), Some(libc::SIGKILL), "the holder died by SIGKILL: {death:?}");
    assert!(alive(hog_pid) && alive(second.pid()), "both hogs live:\n{}", agent.stderr());
    // They still answer, holding what they were asked to.
    hog.set_mib(130);
    second.set_mib(second_mib);
    assert_eq!(kill_lines(&agent).len(), 1, "one kill, the holder's:\n{}", agent.stderr());
    assert_eq!(cg.oom_count(), kills, "the kernel's OOM killer acted:\n{}", agent.stderr());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tmpfs_at_most_three_kills_then_halted() {
    if !require_group("tmpfs_at_most_three_kills_then_halted") {
        return;
    }
    let _turn = crate::turn();
    const LIMIT: u64 = 128 * MIB;
    let cg = Group::here("kill-tmpfs", Some(LIMIT));
    // Four small processes that ignore every signal they can: each one the agent kills frees almost nothing.
    let growers: Vec<Grower> = (0..4)
        .map(|_| {
            let args = ["--ignore-all", "--max-mib", "1", "--chunk-mib", "1"];
            let mut g = Grower::spawn_args(GROWER.as_ref(), cg.path(), &args).unwrap_or_else(|e| panic!("{e}"));
            g.start().unwrap_or_else(|e| panic!("{e}"));
            g
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    // A process of the group fills a tmpfs file to 98.5% of the limit, counted as shmem, then exits. The agent is
    // started after it, so that the writer is never its target.
    let file = ShmFile(PathBuf::from(format!("/dev/shm/monitor-test-{}-kill-tmpfs", std::process::id())));
    let fill_mib = ((0.985 * LIMIT as f64) as u64).saturating_sub(counted(&cg)) / MIB;
    let mut dd = Command::new("dd");
    dd.args(["if=/dev/zero", "bs=64k", "status=none"])
        .arg(format!("of={}", file.0.display()))
        .arg(format!("count={}", fill_mib * 16))
        .stdin(Stdio::null());
    let mut writer = spawn_in_cgroup(&mut dd, cg.path());
    let status = writer.wait_timeout(Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "dd wrote {fill_mib} MiB to {}: {status:?}", file.0.display());
    let shmem = cg.shmem();
    assert!(shmem >= fill_mib * MIB, "the file is charged to the group as shmem: {shmem} bytes");
    let kills = cg.oom_count();

    let dir = monitor_tests::temp_dir("kill-tmpfs");
    // The file holds the group over kill_at whatever is killed (each grower holds about 1 MiB of the 128): each
    // kill frees a little, none brings the group under the line. kill_at at 95% keeps it so after three kills of
    // processes that do not grow (a process that stopped growing is killed only over kill_at).
    let agent = agent(&cg, &dir, "kill_at = 0.95\nkill_repeat_ms = 300\nkill_after_ms = 300");
    // Three kills, then none: watch for five seconds past the third.
    let third = monitor_tests::wait_until("three kills", Duration::from_secs(8), || {
        (kill_lines(&agent).len() >= 3).then(Instant::now)
    });
    while third.elapsed() < Duration::from_secs(5) {
        let n = kill_lines(&agent).len();
        assert!(n <= 3, "a kill past the third:\n{}", agent.stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = agent.status();
    let ratio = status.pointer("/group/ratio").and_then(serde_json::Value::as_f64).unwrap_or(0.0);
    assert!(ratio >= 0.92, "the file still holds the group past abort_at: {ratio}\n{status:#}");
    assert_eq!(status.pointer("/policy/kills_halted"), Some(&serde_json::Value::Bool(true)), "{status:#}");
    let ineffective = monitor_tests::wait_until("MonitorKillIneffective", Duration::from_secs(5), || {
        let a = alerts(&dir, "MonitorKillIneffective");
        (!a.is_empty()).then_some(a)
    });
    assert_eq!(ineffective.len(), 1, "one page while it lasts: {ineffective:#?}");
    let killed = alerts(&dir, "MonitorProcessKilled");
    let pids: std::collections::BTreeSet<String> =
        killed.iter().filter_map(|a| a["labels"]["pid"].as_str().map(str::to_string)).collect();
    assert_eq!(pids.len(), 3, "one MonitorProcessKilled per kill: {killed:#?}");
    let left = growers.iter().filter(|g| alive(g.child.pid())).count();
    assert_eq!(left, 1, "three of the four were killed, the fourth spared:\n{}", agent.stderr());
    assert_eq!(cg.oom_count(), kills, "the kernel's OOM killer acted:\n{}", agent.stderr());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn shadow_decided_never_sent() {
    if !require_group("shadow_decided_never_sent") {
        return;
    }
    let _turn = crate::turn();
    const LIMIT: u64 = 256 * MIB;
    let cg = Group::here("kill-shadow", Some(LIMIT));
    let dir = monitor_tests::temp_dir("kill-shadow");
    let agent = agent(&cg, &dir, "shadow = true");
    // The grower stops at 98% of the limit (past kill_at, short of the limit) and holds: nothing kills it, not even
    // the kernel.
    let base = counted(&cg);
    let max_mib = ((0.98 * LIMIT as f64) as u64).saturating_sub(base) / MIB;
    let mut grower =
        Grower::spawn_stubborn(GROWER.as_ref(), cg.path(), Speed(0), max_mib).unwrap_or_else(|e| panic!("{e}"));
    let pid = grower.child.pid();
    agent.wait_for(|s| monitor_tests::agent::process(s, pid).is_some(), Duration::from_secs(10));
    let kills = cg.oom_count();
    grower.start().unwrap_or_else(|e| panic!("{e}"));
    monitor_tests::wait_until("the shadow kill line", Duration::from_secs(5), || {
        agent.stderr().contains("shadow: would kill (not enforced)").then_some(())
    });
    // A second's more of decisions (one each kill_repeat_ms), none sent.
    std::thread::sleep(Duration::from_secs(1));
    assert!(grower.child.try_wait().ok().flatten().is_none(), "the grower lives:\n{}", agent.stderr());
    assert!(kill_lines(&agent).is_empty(), "nothing was killed:\n{}", agent.stderr());
    assert_eq!(cg.oom_count(), kills, "the kernel's OOM killer acted:\n{}", agent.stderr());
    let paged = monitor_tests::wait_until("MonitorProcessKilled", Duration::from_secs(5), || {
        let a = alerts(&dir, "MonitorProcessKilled");
        (!a.is_empty()).then_some(a)
    });
    let summary = paged[0]["annotations"]["summary"].as_str().unwrap_or_default();
    assert!(summary.contains("not enforced"), "the alert says nothing was done: {summary}");
    assert_eq!(paged.len(), 1, "decided once for the one process it would kill: {paged:#?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// How long each stress-ng run of `respawning_allocator_is_met_before_the_kernel` lasts.
const RESPAWN_S: u64 = 8;
/// Under the agent the kernel kills at most one worker for this many it kills without it in the same test (and at
/// most one where that allows none). Not none: a killed worker's memory takes some 20 to 40 ms to leave the group,
/// and its sibling grows at 1 to 2 GB/s meanwhile, more than the 15 MiB from kill_at to the limit; measured on the
/// v1 host (debug agent, 8 s runs), 1 kernel kill in 5 runs against 21 to 34 per run without the agent.
const RESPAWN_OOM_RATIO: u64 = 20;

#[test]
fn respawning_allocator_is_met_before_the_kernel() {
    let test = "respawning_allocator_is_met_before_the_kernel";
    if !require_group(test) || !monitor_tests::require_program(test, "stress-ng") {
        return;
    }
    let _turn = crate::turn();
    let dir = monitor_tests::temp_dir("kill-respawn");
    let monitor = monitor_tests::monitor_bin();
    let setup = |agent_config: Option<String>| respawn::Setup {
        monitor: &monitor,
        alloc_hog: HOG.as_ref(),
        secs: RESPAWN_S,
        agent_config,
        work: dir.clone(),
        start_timeout: monitor_tests::pace::scaled(Duration::from_secs(15)),
    };
    // stress-ng starts a new worker for each one killed: without the agent the kernel's OOM killer kills them over
    // and over; the same run under the agent (the defaults) is the measure of the agent's kills.
    let without = {
        let cg = Group::here("kill-respawn-bare", Some(512 * MIB));
        respawn::run(&cg, &setup(None)).unwrap_or_else(|e| panic!("{e}"))
    };
    let with = {
        let cg = Group::here("kill-respawn", Some(512 * MIB));
        respawn::run(&cg, &setup(Some(Config::new().render()))).unwrap_or_else(|e| panic!("{e}"))
    };
    let both = format!("{}\n{}", without.describe(), with.describe());
    eprintln!("{both}");
    for r in [&without, &with] {
        assert!(r.parent_ran && r.bystander_alive, "stress-ng's parent ran to its end, the bystander lives:\n{both}");
    }
    assert!(without.oom_kills > 0, "without the agent the kernel kills the workers:\n{both}");
    assert!(with.agent_kills > 0, "the agent killed the workers:\n{both}");
    assert!(
        with.oom_kills <= (without.oom_kills / RESPAWN_OOM_RATIO).max(1),
        "the kernel killed at most 1 in {RESPAWN_OOM_RATIO} of what it kills without the agent:\n{both}"
    );
}
