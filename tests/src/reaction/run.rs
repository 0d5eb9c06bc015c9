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
use super::{line_bytes, Mode, Plan, Speed, BYSTANDERS_MIB, LIMIT};

/// How a run ended for the grower.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// It printed its report (`signal_ns` None: never signalled; the bench closed its stdin after the time limit).
    Report(GrowerReport),
    /// It died without a report; how (e.g. `signal: 9 (SIGKILL)`).
    Died(String),
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
    let _bystanders: Vec<Hog> =
        BYSTANDERS_MIB.iter().map(|&mib| Hog::spawn(&bins.alloc_hog, group.path(), mib, false)).collect();
    let mut grower = Grower::spawn(&bins.grower, group.path(), speed)?;
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
    // Ready: the status answers and lists the bystanders and the grower.
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
        if listed.is_some_and(|n| n > BYSTANDERS_MIB.len()) {
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
    let base = group.anon()?;
    let oom_before = group.oom_kills()?;
    grower.start()?;
    let outcome = grower.finish(plan.grow_timeout)?;
    grower.child.kill();
    let oom_kills = group.oom_kills()?.saturating_sub(oom_before);
    let peak_usage = group.peak_usage();
    if let Some(status) = agent.wait_timeout(Duration::ZERO) {
        return Err(format!("the agent exited ({status}) during the run:\n{}", tail(&log_path, 20)));
    }
    Ok((Run { base, oom_kills, peak_usage, outcome }, idle))
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
}
