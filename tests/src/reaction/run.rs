//! One run of the suite: the group, its bystanders, the grower and a fresh agent; the OOM count read from the
//! group; the agent's idle CPU from `/proc`.

pub use crate::group::Group;
use crate::{ChildGuard, Hog};
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::grower::{timing, Grower, GrowerReport, Timing};
use super::{kill_line_bytes, line_bytes, Mode, Plan, Speed, BYSTANDERS_MIB, GROWER_MAX_MIB, LIMIT};

/// How a run ended for the grower.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// It printed its report (`signal_ns` None: never signalled; the bench closed its stdin after the time limit).
    Report(GrowerReport),
    /// It died without a report.
    Died(Death),
}

/// How a grower died without a report, and the chunks it stamped on its way (`--ignore-all` prints them as it goes).
#[derive(Debug, Clone, PartialEq)]
pub struct Death {
    /// E.g. `signal: 9 (SIGKILL)`.
    pub how: String,
    /// The signal that ended it.
    pub signal: Option<i32>,
    /// When its output closed (`CLOCK_MONOTONIC` ns; 0: unknown): it had exited and its memory was freed.
    pub closed_ns: u64,
    /// (stamp ns, bytes held after the chunk), one per chunk it printed.
    pub chunks: Vec<(u64, u64)>,
}

impl std::fmt::Display for Death {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.how)
    }
}

/// What the chunk stamps of a killed grower say: from crossing `kill_at` to its death.
#[derive(Debug, Clone, PartialEq)]
pub struct KillTiming {
    /// The crossing of the kill line (`CLOCK_MONOTONIC` ns).
    pub crossing_ns: u64,
    /// The crossing of the kill line to the grower's output closing, ns.
    pub latency_ns: u64,
    /// The grower's speed from its first to its last chunk, bytes/s (None: under two chunks).
    pub rate_bytes_s: Option<f64>,
}

/// From the moment `base` + the grower's bytes reached `line` to `death.closed_ns`. A chunk is stamped once it is
/// all touched, and the agent kills within the chunk that crosses, often before its stamp: the crossing is placed
/// inside the chunk by the grower's speed, from the stamp before it (the chunk that crossed, or the one under way
/// at the kill). None when the grower stayed short of the line by more than a chunk, or its death was not stamped.
pub fn kill_timing(death: &Death, base: u64, line: u64) -> Option<KillTiming> {
    if death.closed_ns == 0 {
        return None;
    }
    let c = &death.chunks;
    let rate_bytes_s = match (c.first(), c.last()) {
        (Some(&(t0, b0)), Some(&(t1, b1))) if t1 > t0 => Some((b1 - b0) as f64 / ((t1 - t0) as f64 / 1e9)),
        _ => None,
    };
    let crossing = match c.iter().position(|&(_, b)| base + b >= line) {
        // Crossed in the first chunk: at most its stamp.
        Some(0) => c[0].0,
        // Between the stamps of the chunk before and the chunk that crossed.
        Some(i) => {
            let ((t0, b0), (t1, b1)) = (c[i - 1], c[i]);
            t0 + ((line - base - b0) as f64 / (b1 - b0) as f64 * (t1 - t0) as f64) as u64
        }
        // Inside the chunk under way at the kill: at the grower's speed from the last stamp.
        None => {
            let &(t, b) = c.last()?;
            let chunk = match c.as_slice() {
                [.., (_, a), (_, z)] => z - a,
                _ => b,
            };
            let missing = line.checked_sub(base + b)?;
            if missing > chunk {
                return None;
            }
            t + (missing as f64 / rate_bytes_s? * 1e9) as u64
        }
    };
    Some(KillTiming { crossing_ns: crossing, latency_ns: death.closed_ns.saturating_sub(crossing), rate_bytes_s })
}

/// What the stamps of a `held` grower say: its speed before the brake's line and held above it.
#[derive(Debug, Clone, PartialEq)]
pub struct HoldTiming {
    /// The crossing of the brake's line (`CLOCK_MONOTONIC` ns), placed inside the crossing chunk.
    pub crossing_ns: u64,
    /// From the crossing to the end: the bench's end of the window, or the grower's death.
    pub held_ns: u64,
    /// Its speed from its first chunk to the last one below the line, bytes/s (None: under two such chunks).
    pub rate_before_bytes_s: Option<f64>,
    /// Its speed above the line: what the group's anon gained from the line to the window's end, over that time
    /// (or, when it died first, its stamps past the line), bytes/s.
    pub rate_above_bytes_s: Option<f64>,
}

/// From `death`'s stamps with the group's `base` anon before the grower started, the brake's `line`, and `end` (ns,
/// the group's anon) read at the window's end. None when the grower never reached the line.
pub fn hold_timing(death: &Death, base: u64, line: u64, end: Option<(u64, u64)>) -> Option<HoldTiming> {
    let c = &death.chunks;
    let i = c.iter().position(|&(_, b)| base + b >= line)?;
    let crossing_ns = match i {
        0 => c[0].0,
        _ => {
            let ((t0, b0), (t1, b1)) = (c[i - 1], c[i]);
            t0 + ((line - base - b0) as f64 / (b1 - b0) as f64 * (t1 - t0) as f64) as u64
        }
    };
    let rate = |(t0, b0): (u64, u64), (t1, b1): (u64, u64)| {
        (t1 > t0 && b1 >= b0).then(|| (b1 - b0) as f64 / ((t1 - t0) as f64 / 1e9))
    };
    let rate_before_bytes_s = if i >= 2 { rate(c[0], c[i - 1]) } else { None };
    let (end_ns, rate_above_bytes_s) = match end {
        Some((t, anon)) => (t, rate((crossing_ns, line), (t, anon.max(line)))),
        None => {
            let last = *c.last()?;
            (death.closed_ns.max(last.0), rate((crossing_ns, line - base), last))
        }
    };
    Some(HoldTiming {
        crossing_ns,
        held_ns: end_ns.saturating_sub(crossing_ns),
        rate_before_bytes_s,
        rate_above_bytes_s,
    })
}

/// One run's result.
#[derive(Debug, Clone)]
pub struct Run {
    /// The group's anon just before the grower started.
    pub base: u64,
    /// OOM kills the kernel counted in the group during the run.
    pub oom_kills: u64,
    /// The kernel's high-water mark of the group's usage, when it keeps one: a check on the grower's stamps.
    pub peak_usage: Option<u64>,
    pub outcome: Outcome,
    /// The grower died by SIGKILL and the agent's log says it killed it.
    pub killed_by_agent: bool,
    /// Bystanders gone by the end of the run.
    pub bystanders_lost: usize,
    /// When the agent sent the grower its SIGKILL (`CLOCK_MONOTONIC` ns, from its `/api/v1/status` `kills`).
    pub kill_sent_ns: Option<u64>,
    /// Mode `held`: the run was one, its window ended with the grower alive (the bench killed it), and when it
    /// ended (ns) with the group's anon then.
    pub held: bool,
    pub ended_by_bench: bool,
    pub held_end: Option<(u64, u64)>,
}

impl Run {
    pub fn signalled(&self) -> bool {
        matches!(&self.outcome, Outcome::Report(r) if r.signal_ns.is_some())
    }

    /// The agent acted first: the grower got the signal and the kernel killed nobody.
    pub fn acted_first(&self) -> bool {
        self.signalled() && self.oom_kills == 0
    }

    pub fn timing(&self) -> Option<Timing> {
        match &self.outcome {
            Outcome::Report(r) => timing(r, self.base, line_bytes()),
            Outcome::Died(_) => None,
        }
    }

    /// Crossing `kill_at` to the agent's SIGKILL, ns (0 when the kill came before the crossing the stamps place).
    pub fn sigkill_latency_ns(&self) -> Option<u64> {
        Some(self.kill_sent_ns?.saturating_sub(self.kill_timing()?.crossing_ns))
    }

    /// Crossing `kill_at` to the grower's death, for a grower that died.
    pub fn kill_timing(&self) -> Option<KillTiming> {
        match &self.outcome {
            Outcome::Died(d) => kill_timing(d, self.base, kill_line_bytes()),
            Outcome::Report(_) => None,
        }
    }

    /// Mode `held`: its speed before the brake's line and held above it.
    pub fn hold_timing(&self) -> Option<HoldTiming> {
        match &self.outcome {
            Outcome::Died(d) if self.held => hold_timing(d, self.base, super::brake_line_bytes(), self.held_end),
            _ => None,
        }
    }
}

/// True while `pid` runs (not gone, not a zombie).
pub fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').and_then(|i| s[i + 1..].split_whitespace().next().map(|st| st != "Z")))
        .unwrap_or(false)
}

/// True when the agent's log at `path` has a `killed:` line for `pid` (waits up to a second for it).
pub fn log_says_killed(path: &Path, pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(1);
    let field = format!("pid={pid} ");
    loop {
        let text = fs::read_to_string(path).unwrap_or_default();
        if text.lines().any(|l| l.contains("killed:") && !l.contains("shadow") && l.contains(&field)) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// utime + stime (clock ticks) and, where the kernel has schedstats, the summed run time of every thread (ns).
pub fn cpu_of(pid: u32) -> Result<(u64, Option<u64>), String> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| format!("/proc/{pid}/stat: {e}"))?;
    let ticks = parse_stat_ticks(&stat).ok_or_else(|| format!("bad /proc/{pid}/stat: {stat:?}"))?;
    let mut ns = Some(0u64);
    match fs::read_dir(format!("/proc/{pid}/task")) {
        Ok(tasks) => {
            for t in tasks.flatten() {
                let run = fs::read_to_string(t.path().join("schedstat"))
                    .ok()
                    .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()));
                ns = ns.zip(run).map(|(a, b)| a + b);
            }
        }
        Err(_) => ns = None,
    }
    Ok((ticks, ns))
}

/// utime + stime from the text of `/proc/<pid>/stat`.
pub fn parse_stat_ticks(text: &str) -> Option<u64> {
    let close = text.rfind(')')?;
    let f: Vec<&str> = text[close + 1..].split_whitespace().collect();
    // After ")": state is index 0; utime (field 14) is index 11, stime (15) index 12.
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// Clock ticks per second.
pub fn clock_hz() -> f64 {
    // SAFETY: sysconf has no preconditions.
    match unsafe { libc::sysconf(libc::_SC_CLK_TCK) } {
        v if v > 0 => v as f64,
        _ => 100.0,
    }
}

/// The agent's CPU over an idle stretch, with this (sleeping) process's as the baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct Idle {
    pub seconds: f64,
    pub agent_ticks: u64,
    pub own_ticks: u64,
    /// Thread run time from schedstat, when the kernel has it.
    pub agent_ns: Option<u64>,
    pub hz: f64,
}

impl Idle {
    /// utime+stime as % of one core.
    pub fn agent_pct(&self) -> f64 {
        self.agent_ticks as f64 / self.hz / self.seconds * 100.0
    }

    pub fn own_pct(&self) -> f64 {
        self.own_ticks as f64 / self.hz / self.seconds * 100.0
    }

    /// schedstat run time as % of one core.
    pub fn agent_pct_ns(&self) -> Option<f64> {
        self.agent_ns.map(|ns| ns as f64 / 1e9 / self.seconds * 100.0)
    }
}

fn measure_idle(agent: u32, d: Duration) -> Result<Idle, String> {
    let t0 = Instant::now();
    let (a0, n0) = cpu_of(agent)?;
    let (o0, _) = cpu_of(std::process::id())?;
    std::thread::sleep(d);
    let (a1, n1) = cpu_of(agent)?;
    let (o1, _) = cpu_of(std::process::id())?;
    Ok(Idle {
        seconds: t0.elapsed().as_secs_f64(),
        agent_ticks: a1.saturating_sub(a0),
        own_ticks: o1.saturating_sub(o0),
        agent_ns: n0.zip(n1).map(|(a, b)| b.saturating_sub(a)),
        hz: clock_hz(),
    })
}

/// The binaries a run needs.
#[derive(Debug, Clone)]
pub struct Bins {
    pub monitor: PathBuf,
    pub alloc_hog: PathBuf,
    pub grower: PathBuf,
}

impl Bins {
    /// `monitor`, `alloc-hog` and `grower` in one folder; fails naming the first that is missing.
    pub fn in_dir(dir: &Path) -> Result<Bins, String> {
        let find = |name: &str| {
            let p = dir.join(name);
            if p.is_file() {
                Ok(p)
            } else {
                Err(format!("{} is missing", p.display()))
            }
        };
        Ok(Bins { monitor: find("monitor")?, alloc_hog: find("alloc-hog")?, grower: find("grower")? })
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// One run of `mode` at `speed`; measures the agent's idle CPU first when `idle` is given.
pub fn run_once(
    plan: &Plan,
    bins: &Bins,
    mode: Mode,
    speed: Speed,
    idle: Option<Duration>,
) -> Result<(Run, Option<Idle>), String> {
    let group = Group::create(plan.hierarchy, &format!("reaction-{}", mode.name()), LIMIT);
    let bystanders: Vec<Hog> =
        BYSTANDERS_MIB.iter().map(|&mib| Hog::spawn(&bins.alloc_hog, group.path(), mib, false)).collect();
    let _crowd: Vec<ChildGuard> =
        (0..plan.crowd).map(|_| crate::spawn_in_cgroup(Command::new("sleep").arg("3600"), group.path())).collect();
    let mut grower = match mode {
        m if m.stubborn_grower() => Grower::spawn_stubborn(&bins.grower, group.path(), speed, GROWER_MAX_MIB)?,
        _ => Grower::spawn(&bins.grower, group.path(), speed)?,
    };
    let grower_pid = grower.child.pid();
    let config = plan.work.join(format!("{}.toml", mode.name()));
    fs::write(&config, mode.config()).map_err(|e| format!("{}: {e}", config.display()))?;
    let log_path = plan.work.join("agent.log");
    let log = fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
    let port = crate::agent::free_port();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut agent = ChildGuard::spawn(
        Command::new(&bins.monitor)
            .arg("agent")
            .arg("--config")
            .arg(&config)
            .arg("--cgroup")
            .arg(group.path())
            .args(["--listen", &addr.to_string()])
            .env("MONITOR_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log),
    );
    // Ready: the status answers and lists the bystanders, the crowd and the grower.
    let deadline = Instant::now() + plan.start_timeout;
    loop {
        if let Some(status) = agent.wait_timeout(Duration::ZERO) {
            return Err(format!("the agent exited ({status}) at start:\n{}", tail(&log_path, 20)));
        }
        let listed = crate::http::get(addr, "/api/v1/status", Duration::from_secs(2))
            .ok()
            .filter(|r| r.status == 200)
            .and_then(|r| serde_json::from_slice::<Value>(&r.body).ok())
            .and_then(|s| s.get("processes").and_then(Value::as_array).map(Vec::len));
        if listed.is_some_and(|n| n > BYSTANDERS_MIB.len() + plan.crowd) {
            break;
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the agent did not list the group within {:?}:\n{}",
                plan.start_timeout,
                tail(&log_path, 20)
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // The idle stretch starts a second after the agent is ready, past its start-up work.
    let idle = idle
        .map(|d| {
            std::thread::sleep(Duration::from_secs(1));
            measure_idle(agent.pid(), d)
        })
        .transpose()?;
    // What the agent counts, so that the grower's bytes on top of it cross the agent's lines where it sees them.
    let base = group.charged()?;
    let oom_before = group.oom_kills()?;
    grower.start()?;
    let (mut ended_by_bench, mut held_end) = (false, None);
    let outcome = if mode == Mode::Held {
        let held = grower.hold(super::HOLD, || group.charged().ok())?;
        (ended_by_bench, held_end) = (held.ended_by_bench, held.end);
        Outcome::Died(held.death)
    } else {
        grower.finish(plan.grow_timeout)?
    };
    grower.child.kill();
    let oom_kills = group.oom_kills()?.saturating_sub(oom_before);
    let peak_usage = group.peak_usage();
    let bystanders_lost = bystanders.iter().filter(|h| !alive(h.pid())).count();
    let killed_by_agent = matches!(&outcome, Outcome::Died(d) if d.signal == Some(libc::SIGKILL))
        && log_says_killed(&log_path, grower_pid);
    if let Some(status) = agent.wait_timeout(Duration::ZERO) {
        return Err(format!("the agent exited ({status}) during the run:\n{}", tail(&log_path, 20)));
    }
    // The agent's own stamp of its SIGKILL, from the same clock as the grower's.
    let kill_sent_ns = crate::http::get(addr, "/api/v1/status", Duration::from_secs(2))
        .ok()
        .and_then(|r| serde_json::from_slice::<Value>(&r.body).ok())
        .and_then(|s| {
            s.get("kills")?.as_array()?.iter().rev().find(|k| k["pid"] == grower_pid)?.get("sent_mono_ns")?.as_u64()
        });
    let run = Run {
        base,
        oom_kills,
        peak_usage,
        outcome,
        killed_by_agent,
        bystanders_lost,
        kill_sent_ns,
        held: mode == Mode::Held,
        ended_by_bench,
        held_end,
    };
    Ok((run, idle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cpu_ticks() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 17 5 0 0 20 0 1 0 100 0 0";
        assert_eq!(parse_stat_ticks(stat), Some(22));
        assert_eq!(parse_stat_ticks("42 (x) S 1"), None);
        assert!(cpu_of(std::process::id()).is_ok());
    }

    #[test]
    fn times_a_held_grower_before_and_above_the_line() {
        let death = Death {
            how: "signal: 9 (SIGKILL)".into(),
            signal: Some(9),
            closed_ns: 5_000_000_000,
            chunks: vec![(0, 10), (1_000_000_000, 20), (2_000_000_000, 30), (3_000_000_000, 31)],
        };
        // base 60, line 85: crossed halfway through the chunk stamped at 2 s (20 -> 30 bytes), at 1.5 s; before
        // it 10 bytes in 1 s. The window ended at 4.5 s with the group at 90 bytes: 5 bytes in 3 s above the line.
        let t = hold_timing(&death, 60, 85, Some((4_500_000_000, 90))).expect("crossed");
        assert_eq!(t.crossing_ns, 1_500_000_000);
        assert_eq!(t.held_ns, 3_000_000_000);
        assert_eq!(t.rate_before_bytes_s, Some(10.0));
        assert!(t.rate_above_bytes_s.is_some_and(|r| (r - 5.0 / 3.0).abs() < 1e-9), "{t:?}");
        // Died before the window's end: its own stamps past the line, until its output closed.
        let t = hold_timing(&death, 60, 85, None).expect("crossed");
        assert_eq!(t.held_ns, 3_500_000_000);
        assert!(t.rate_above_bytes_s.is_some_and(|r| (r - 6.0 / 1.5).abs() < 1e-9), "{t:?}");
        assert_eq!(hold_timing(&death, 60, 200, None), None, "never reached the line");
    }

    #[test]
    fn times_a_kill_from_the_crossing_chunk_to_the_death() {
        let death = |closed_ns| Death {
            how: "signal: 9 (SIGKILL)".into(),
            signal: Some(9),
            closed_ns,
            chunks: vec![(10, 20), (20, 30), (30, 40), (40, 44)],
        };
        // base 60, line 95: crossed halfway through the chunk stamped at 30 (30 -> 40 bytes from t=20 to t=30),
        // at t=25; its output closed at 55.
        let t = kill_timing(&death(55), 60, 95).expect("crossed");
        assert_eq!(t.latency_ns, 30);
        assert_eq!(t.rate_bytes_s, Some(24.0 / 30e-9));
        // line 106: 2 bytes past the last stamp (44 at t=40), inside the chunk under way at 0.8 bytes/ns: t=42.5.
        assert_eq!(kill_timing(&death(55), 60, 106).map(|t| t.latency_ns), Some(13));
        assert_eq!(kill_timing(&death(55), 60, 200), None, "more than a chunk short of the line");
        assert_eq!(kill_timing(&death(0), 60, 95), None, "death not stamped");
    }
}
