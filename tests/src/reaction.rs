//! The grower suite of `cargo xtask bench reaction` (cgroup v1, on the host) and `vm-suite bench-reaction` (cgroup
//! v2, in the test VM): does the agent abort a fast grower before the kernel's OOM killer acts, and how soon after
//! the group crosses the abort line?
//!
//! One run: a fresh 512 MiB group, two 40 MiB `alloc-hog` bystanders, one `grower` (up to 700 MiB at a set speed)
//! and a fresh release `monitor agent` with `[actions] abort_signal = "SIGUSR2"` and the mode's `[policy]`. Once the
//! agent's status lists the three processes, what the agent counts of the group (anon, shmem and kernel memory:
//! [`crate::group::Group::charged`]) is read as the base and the grower is told to start. It either reports (it got the signal: its stamps say when it crossed the
//! line and when the signal came, from its own `CLOCK_MONOTONIC`) or dies (the kernel's OOM killer). The group's own
//! OOM count (`memory.oom_control` / `memory.events` `oom_kill`) is read before and after, apart from the agent.
//! The agent's idle CPU is measured once per mode, in its first run, before the grower starts.
//!
//! Mode `stubborn` runs the uncooperative grower (`--ignore-all`: every signal it can ignore is ignored) under the
//! default policy: only the agent's last resort, a SIGKILL at `kill_at`, stops it before the kernel does. Its
//! stamps, printed as it grows, give when the group crossed `kill_at`; its output closing (after its exit freed its
//! memory) gives its death. On v2, mode `brake-kill` adds `brake_at = 0.96`, so `memory.high` slows that grower from
//! 96% until the SIGKILL at 97%, and mode `held` turns the last resort off: the brake alone, watched for [`HOLD`].
//!
//! The respawn cell ([`respawn`]) runs `stress-ng`, which starts a new worker for each one killed, without and with
//! the agent (on v2 with the brake), and counts the kernel's kills and the agent's.

mod grower;
pub mod respawn;
mod run;
mod summary;

pub use grower::{parse_report, timing, Grower, GrowerReport, Timing};
pub use run::{alive, cpu_of, hold_timing, kill_timing, log_says_killed, parse_stat_ticks, run_once};
pub use run::{Bins, Death, Group, HoldTiming, Idle, KillTiming, Outcome, Run};
use summary::opt;
pub use summary::{percentile, table, Summary};

use crate::cgroup2::CgroupV2;
use crate::config::{strings, Config};
use crate::MIB;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The group's limit.
pub const LIMIT: u64 = 512 * MIB;
/// The agent's abort line (its default `abort_at`), as a fraction of the limit.
pub const ABORT_AT: f64 = 0.92;
/// The agent's kill line (its default `kill_at`), as a fraction of the limit.
pub const KILL_AT: f64 = 0.97;
/// The bystanders' sizes, MiB.
pub const BYSTANDERS_MIB: [u64; 2] = [40, 40];
/// How far the grower would grow, MiB: past the limit, so only a signal or the OOM killer stops it.
pub const GROWER_MAX_MIB: u64 = 700;
/// The goals printed beside the figures.
pub const GOAL_P99_MS: f64 = 20.0;
pub const GOAL_IDLE_PCT: f64 = 0.5;
/// Mode `held`: the brake slows the grower above its line at least this many times.
pub const GOAL_BRAKE_SLOWDOWN: f64 = 10.0;

/// The brake's line (`brake_at` of modes `brake` and `held`: `memory.high`), as a fraction of the limit.
pub const BRAKE_AT: f64 = 0.96;
/// How long a `held` grower is watched from its start; still alive then, the bench ends it itself (its own child).
pub const HOLD: Duration = Duration::from_secs(15);

/// The brake's line in bytes.
pub fn brake_line_bytes() -> u64 {
    (BRAKE_AT * LIMIT as f64).ceil() as u64
}

/// The abort line in bytes.
pub fn line_bytes() -> u64 {
    (ABORT_AT * LIMIT as f64).ceil() as u64
}

/// The kill line in bytes.
pub fn kill_line_bytes() -> u64 {
    (KILL_AT * LIMIT as f64).ceil() as u64
}

pub use crate::group::Hierarchy;

/// How the agent is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `interval_ms = 100`, no kernel wake-ups, no pacing.
    Timer,
    /// The defaults: every wake-up source, pacing on.
    Events,
    /// The defaults plus `brake_at = 0.96` (cgroup v2 only).
    Brake,
    /// The defaults, and a grower that ignores every signal: only the agent's SIGKILL stops it.
    Stubborn,
    /// The defaults plus `brake_at = 0.96`, and a grower that ignores every signal: `memory.high` slows it from 96%,
    /// the agent's SIGKILL at 97% stops it (cgroup v2 only).
    BrakeKill,
    /// The defaults plus `brake_at = 0.96`, the last resort off (`kill = false`), and a grower that ignores every
    /// signal: only `memory.high` slows it (cgroup v2 only). Watched for [`HOLD`], then ended by the bench if the
    /// kernel has not ended it first.
    Held,
}

impl Mode {
    pub const ALL: [Mode; 6] = [Mode::Timer, Mode::Events, Mode::Brake, Mode::Stubborn, Mode::BrakeKill, Mode::Held];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Timer => "timer",
            Mode::Events => "events",
            Mode::Brake => "brake",
            Mode::Stubborn => "stubborn",
            Mode::BrakeKill => "brake-kill",
            Mode::Held => "held",
        }
    }

    pub fn from_name(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == name)
    }

    /// What the mode sets, for tables.
    pub fn describe(self) -> &'static str {
        match self {
            Mode::Timer => "timer only (100 ms)",
            Mode::Events => "events + pacing (defaults)",
            Mode::Brake => "events + pacing + brake_at 0.96",
            Mode::Stubborn => "events + pacing (defaults), grower ignores every signal",
            Mode::BrakeKill => "events + pacing + brake_at 0.96, grower ignores every signal",
            Mode::Held => "events + pacing + brake_at 0.96, kill off, grower ignores every signal",
        }
    }

    /// True when the mode needs cgroup v2 (`memory.high`).
    pub fn needs_v2(self) -> bool {
        matches!(self, Mode::Brake | Mode::BrakeKill | Mode::Held)
    }

    /// True when the grower ignores every signal it can (`grower --ignore-all`).
    pub fn stubborn_grower(self) -> bool {
        matches!(self, Mode::Stubborn | Mode::BrakeKill | Mode::Held)
    }

    /// True when the cell is the last resort's: the agent's SIGKILL at kill_at is what should stop the grower.
    pub fn last_resort(self) -> bool {
        matches!(self, Mode::Stubborn | Mode::BrakeKill)
    }

    /// The agent's config file for this mode.
    pub fn config(self) -> String {
        let config = Config::new().set("actions", "abort_signal", "SIGUSR2");
        let config = match self {
            Mode::Timer => config
                .set("policy", "interval_ms", 100)
                .set("policy", "wakeups", strings::<&str>([]))
                .set("policy", "pacing", false),
            Mode::Events | Mode::Stubborn => config,
            Mode::Brake | Mode::BrakeKill => config.set("policy", "brake_at", BRAKE_AT),
            Mode::Held => config.set("policy", "brake_at", BRAKE_AT).set("policy", "kill", false),
        };
        config.render()
    }
}

/// The grower's speed in MB/s (10^6 bytes); 0: as fast as it can.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Speed(pub u64);

impl Speed {
    pub const ALL: [Speed; 3] = [Speed(200), Speed(1000), Speed(0)];

    pub fn label(self) -> String {
        match self.0 {
            0 => "full speed".to_string(),
            n if n % 1000 == 0 => format!("{} GB/s", n / 1000),
            n => format!("{n} MB/s"),
        }
    }
}

/// What to run and the time limits.
#[derive(Debug, Clone)]
pub struct Plan {
    pub hierarchy: Hierarchy,
    pub modes: Vec<Mode>,
    pub speeds: Vec<Speed>,
    /// Runs per cell.
    pub runs: usize,
    /// How many `sleep` processes share the group besides the bystanders and the grower (`BENCH_REACTION_CROWD`).
    pub crowd: usize,
    /// Runs of the respawn cell ([`respawn`]), and how long stress-ng runs in each.
    pub respawn_runs: usize,
    pub respawn_s: u64,
    /// The idle stretch of each mode's first run.
    pub idle: Duration,
    /// Where the agent's config and log go.
    pub work: PathBuf,
    /// The longest an agent may take to list the group, and a grower to report or die.
    pub start_timeout: Duration,
    pub grow_timeout: Duration,
}

impl Plan {
    /// From `BENCH_REACTION_RUNS` (default 20), `BENCH_REACTION_IDLE_S` (10), `BENCH_REACTION_MODES` and
    /// `BENCH_REACTION_SPEEDS` (comma lists, e.g. `timer,events` and `200,1000,0`; default: all that `h` allows),
    /// and `BENCH_REACTION_CROWD` (0): sleeping processes added to each run's group. The respawn cell is named
    /// `respawn` in the modes' list; `BENCH_REACTION_RESPAWN_RUNS` (3) runs of it, `BENCH_REACTION_RESPAWN_S` (20)
    /// seconds of stress-ng each.
    pub fn from_env(h: Hierarchy, work: PathBuf, slow: bool) -> Result<Plan, String> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let number = |k: &str, default: u64| match var(k) {
            Some(v) => v.trim().parse::<u64>().map_err(|_| format!("{k}={v}: not a whole number")),
            None => Ok(default),
        };
        let runs = number("BENCH_REACTION_RUNS", 20)?;
        if runs == 0 {
            return Err("BENCH_REACTION_RUNS must be at least 1".into());
        }
        let idle = Duration::from_secs(number("BENCH_REACTION_IDLE_S", 10)?.max(1));
        let mut modes: Vec<Mode> = Mode::ALL.into_iter().filter(|m| h == Hierarchy::V2 || !m.needs_v2()).collect();
        let mut respawn = true;
        if let Some(list) = var("BENCH_REACTION_MODES") {
            let names: Vec<&str> = list.split(',').map(str::trim).collect();
            respawn = names.contains(&"respawn");
            let asked = names
                .iter()
                .filter(|&&n| n != "respawn")
                .map(|n| Mode::from_name(n).ok_or_else(|| format!("BENCH_REACTION_MODES: unknown mode {n:?}")))
                .collect::<Result<Vec<_>, _>>()?;
            modes.retain(|m| asked.contains(m));
        }
        let respawn_runs = if respawn { number("BENCH_REACTION_RESPAWN_RUNS", 3)? as usize } else { 0 };
        let respawn_s = number("BENCH_REACTION_RESPAWN_S", 20)?.max(1);
        let speeds = match var("BENCH_REACTION_SPEEDS") {
            Some(list) => list
                .split(',')
                .map(|n| n.trim().parse().map(Speed).map_err(|_| format!("BENCH_REACTION_SPEEDS: bad speed {n:?}")))
                .collect::<Result<Vec<_>, _>>()?,
            None => Speed::ALL.to_vec(),
        };
        if (modes.is_empty() || speeds.is_empty()) && respawn_runs == 0 {
            return Err("no cell left to run (BENCH_REACTION_MODES / BENCH_REACTION_SPEEDS)".into());
        }
        let crowd = number("BENCH_REACTION_CROWD", 0)? as usize;
        // A crowd takes a moment to start and to be listed.
        let scale = if slow { 6 } else { 1 } + crowd.div_ceil(1000) as u64;
        Ok(Plan {
            hierarchy: h,
            modes,
            speeds,
            runs: runs as usize,
            crowd,
            respawn_runs,
            respawn_s,
            idle,
            work,
            start_timeout: Duration::from_secs(20 * scale),
            grow_timeout: Duration::from_secs(30 * scale),
        })
    }
}

/// Runs every cell of `plan`, interleaved (run 1 of every cell, then run 2, …) so that the machine's drift spreads
/// over all cells; prints one line per run to stderr; returns the cells' summaries labelled `group`.
pub fn run_suite(plan: &Plan, bins: &Bins, group: &str) -> Vec<Summary> {
    let cells: Vec<(Mode, Speed)> = plan.modes.iter().flat_map(|&m| plan.speeds.iter().map(move |&s| (m, s))).collect();
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); cells.len()];
    let mut errors = vec![0usize; cells.len()];
    let mut idles: Vec<(Mode, Idle)> = Vec::new();
    for r in 0..plan.runs {
        for (i, &(mode, speed)) in cells.iter().enumerate() {
            let measure = !idles.iter().any(|(m, _)| *m == mode) && Some(&speed) == plan.speeds.first();
            let what = format!("{group}, {}, {}, run {}/{}", mode.name(), speed.label(), r + 1, plan.runs);
            let idle = measure.then_some(plan.idle);
            let result =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_once(plan, bins, mode, speed, idle)))
                    .unwrap_or_else(|_| Err("panicked (message above)".to_string()));
            match result {
                Ok((run, idle)) => {
                    eprintln!("{what}: {}", describe(&run));
                    if let Some(idle) = idle {
                        eprintln!(
                            "{what}: agent idle {:.3}% of a core ({} ticks in {:.1} s; run time {}%), baseline {:.3}%",
                            idle.agent_pct(),
                            idle.agent_ticks,
                            idle.seconds,
                            opt(idle.agent_pct_ns(), 3),
                            idle.own_pct()
                        );
                        idles.push((mode, idle));
                    }
                    runs[i].push(run);
                }
                Err(e) => {
                    eprintln!("{what}: FAILED: {e}");
                    errors[i] += 1;
                }
            }
        }
    }
    cells
        .iter()
        .enumerate()
        .map(|(i, &(mode, speed))| {
            let idle = idles.iter().find(|(m, _)| *m == mode).map(|(_, idle)| idle);
            Summary::new(group, mode, speed, &runs[i], errors[i], idle)
        })
        .collect()
}

/// One line about a run.
pub fn describe(run: &Run) -> String {
    let peak = run.peak_usage.map_or(String::new(), |p| format!(", group peak {:.1} MiB", p as f64 / MIB as f64));
    let lost =
        if run.bystanders_lost > 0 { format!(", {} bystander(s) lost", run.bystanders_lost) } else { String::new() };
    let oom = format!("{} OOM kill(s){peak}{lost}", run.oom_kills);
    if let Some(t) = run.hold_timing() {
        let end = if run.ended_by_bench { "held to the window's end" } else { "died before the window's end" };
        return format!(
            "{end}: {:.1} s above the brake's line, grower at {} MB/s before it and {} MB/s above it, {oom}",
            t.held_ns as f64 / 1e9,
            opt(t.rate_before_bytes_s.map(|r| r / 1e6), 0),
            opt(t.rate_above_bytes_s.map(|r| r / 1e6), 2),
        );
    }
    if let (Outcome::Died(d), true) = (&run.outcome, run.killed_by_agent) {
        let held = d.chunks.last().map_or(0, |&(_, b)| b);
        return match run.kill_timing() {
            Some(t) => format!(
                "killed by the agent, dead {:.1} ms after crossing kill_at, base {} MiB + grower {} MiB at its last \
                 chunk, grower at {} MB/s, {oom}",
                t.latency_ns as f64 / 1e6,
                run.base / MIB,
                held / MIB,
                opt(t.rate_bytes_s.map(|r| r / 1e6), 0),
            ),
            None => format!("killed by the agent before crossing kill_at (held {} MiB), {oom}", held / MIB),
        };
    }
    match (&run.outcome, run.timing()) {
        (Outcome::Report(_), Some(t)) => format!(
            "signalled {:.1} ms after the line{}, base {} MiB + grower {} MiB: overshoot {:.1} MiB, grower at {} MB/s, \
             {oom}",
            t.latency_ns as f64 / 1e6,
            if t.before_line { " (before it)" } else { "" },
            run.base / MIB,
            t.held_bytes / MIB,
            t.overshoot_bytes as f64 / MIB as f64,
            opt(t.rate_bytes_s.map(|r| r / 1e6), 0),
        ),
        (Outcome::Report(r), None) => format!("never signalled (held {} MiB), {oom}", r.peak_bytes / MIB),
        (Outcome::Died(how), _) => format!("the grower died without a signal ({how}), {oom}"),
    }
}

/// The prefix of the lines `vm-suite bench-reaction` prints for the host, one JSON summary each.
pub const VM_LINE: &str = "@@BENCH reaction ";

/// `vm-suite bench-reaction`: every cell on a cgroup v2 group, with the binaries in `bin_dir`; prints the table and
/// one [`VM_LINE`] per cell.
pub fn vm_main(bin_dir: &Path) -> std::process::ExitCode {
    use std::process::ExitCode;
    if let Some(reason) = CgroupV2::unavailable_reason() {
        eprintln!("bench-reaction: cannot run here: {reason}");
        return ExitCode::FAILURE;
    }
    let bins = match Bins::in_dir(bin_dir) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("bench-reaction: {e}");
            return ExitCode::FAILURE;
        }
    };
    let work = crate::temp_dir("bench-reaction");
    let plan = match Plan::from_env(Hierarchy::V2, work.clone(), true) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("bench-reaction: {e}");
            return ExitCode::FAILURE;
        }
    };
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let group = format!("v2, Linux {} (VM, TCG)", kernel.trim());
    println!(
        "bench-reaction on {group}: {} runs per cell, modes {:?}, speeds {:?}",
        plan.runs,
        plan.modes.iter().map(|m| m.name()).collect::<Vec<_>>(),
        plan.speeds.iter().map(|s| s.label()).collect::<Vec<_>>()
    );
    let cells = run_suite(&plan, &bins, &group);
    if !cells.is_empty() {
        println!("{}", table(&cells));
    }
    for c in &cells {
        println!("{VM_LINE}{}", c.to_json());
    }
    let pairs = respawn::run_cell(&plan, &bins, &group);
    if !pairs.is_empty() {
        println!("{}", respawn::table(&pairs));
    }
    for p in &pairs {
        println!("{}{}", respawn::VM_LINE, p.to_json());
    }
    let _ = fs::remove_dir_all(&work);
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_and_labels() {
        assert!(Mode::Timer.config().contains("wakeups = []"));
        assert!(Mode::Brake.config().contains("brake_at = 0.96"));
        assert!(Mode::ALL.iter().all(|m| m.config().contains("abort_signal = \"SIGUSR2\"")));
        assert_eq!(Mode::from_name("events"), Some(Mode::Events));
        let labels: Vec<String> = Speed::ALL.iter().map(|s| s.label()).collect();
        assert_eq!(labels, ["200 MB/s", "1 GB/s", "full speed"]);
        assert_eq!(line_bytes(), 493_921_240);
        assert_eq!(kill_line_bytes(), 520_764_785);
        assert_eq!(Mode::from_name("stubborn"), Some(Mode::Stubborn));
        assert!(!Mode::Stubborn.needs_v2());
        assert_eq!(Mode::from_name("held"), Some(Mode::Held));
        assert!(Mode::Held.needs_v2() && Mode::Brake.needs_v2() && Mode::BrakeKill.needs_v2());
        assert_eq!(Mode::from_name("brake-kill"), Some(Mode::BrakeKill));
        let brake_kill = Mode::BrakeKill.config();
        assert!(brake_kill.contains("brake_at = 0.96") && !brake_kill.contains("kill = false"), "{brake_kill}");
        assert!(Mode::BrakeKill.last_resort() && Mode::Stubborn.last_resort() && !Mode::Held.last_resort());
        let held = Mode::Held.config();
        assert!(held.contains("brake_at = 0.96") && held.contains("kill = false"), "{held}");
        assert_eq!(brake_line_bytes(), 515_396_076);
    }
}
