//! The respawn cell: an allocator that starts a new worker for each one killed, `stress-ng --vm 2 --vm-bytes 700M`
//! (two workers, each mapping and touching 700 MiB over and over), in a 512 MiB group beside a 40 MiB `alloc-hog`,
//! for a set time. One run is made without an agent and one under a fresh `monitor agent`; each counts the kernel's
//! OOM kills in the group and the agent's kills (its `killed:` log lines), and checks that stress-ng's parent ran to
//! its end and the bystander lives.
//!
//! The floor: the group grows while a killed worker dies, and when that growth is more than the headroom above the
//! kill line the kernel acts first whatever the agent does. A thread reads the group's usage every millisecond;
//! for each kill the agent logs, the growth rate is the usage's rise over the [`RATE_WINDOW_NS`] before it, and the
//! time to die runs from the kill to the first read where the usage has fallen by half of what the victim held (as
//! the agent itself counts a kill done). [`Floor::bytes`] is the 90th percentile of their product.

use super::{ABORT_AT, KILL_AT, LIMIT};
use crate::group::{Group, Hierarchy};
use crate::{spawn_in_cgroup, ChildGuard, Hog, MIB};
use serde_json::{json, Value};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The stressor's arguments, besides `--timeout`.
pub const STRESS_ARGS: [&str; 4] = ["--vm", "2", "--vm-bytes", "700M"];
/// The bystander's size, MiB.
pub const BYSTANDER_MIB: u64 = 40;
/// The window before a kill over which the group's growth rate is measured.
pub const RATE_WINDOW_NS: u64 = 20_000_000;
/// The longest a victim may take to die for its kill to be measured; past it the read is lost among later kills.
const DIE_LIMIT_NS: u64 = 200_000_000;

/// `stress-ng` started in a group for `secs` seconds, its output discarded.
pub fn spawn_stress(cg: &Path, secs: u64) -> ChildGuard {
    let mut cmd = Command::new("stress-ng");
    cmd.args(STRESS_ARGS).args(["--timeout", &format!("{secs}s")]);
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    spawn_in_cgroup(&mut cmd, cg)
}

/// Now on the realtime clock, ns: the clock the agent's log lines are stamped with.
pub fn unix_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// A thread reading the group's usage (`memory.usage_in_bytes` on v1, `memory.current` on v2) every millisecond.
pub struct Watch {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<(u64, u64)>>>,
    thread: Option<JoinHandle<()>>,
}

impl Watch {
    pub fn start(group: &Group) -> Watch {
        let file = match group.hierarchy() {
            Hierarchy::V1 => "memory.usage_in_bytes",
            Hierarchy::V2 => "memory.current",
        };
        let path = group.path().join(file);
        let (stop, samples) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Vec::new())));
        let (s, out) = (stop.clone(), samples.clone());
        let thread = std::thread::spawn(move || {
            let mut got = Vec::with_capacity(65_536);
            while !s.load(Ordering::Relaxed) {
                if let Some(v) = fs::read_to_string(&path).ok().and_then(|t| t.trim().parse::<u64>().ok()) {
                    got.push((unix_ns(), v));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            if let Ok(mut o) = out.lock() {
                *o = got;
            }
        });
        Watch { stop, samples, thread: Some(thread) }
    }

    /// Stops the thread; its reads, (unix ns, bytes), oldest first.
    pub fn finish(mut self) -> Vec<(u64, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.samples.lock().map(|mut s| std::mem::take(&mut *s)).unwrap_or_default()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One kill the agent logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoggedKill {
    pub unix_ns: u64,
    pub pid: u32,
    pub anon_bytes: u64,
}

/// A `killed:` line of the agent's text log (`2026-12-07T18:46:34.319900Z  WARN monitor::sampler: killed: …
/// pid=10515 … anon_bytes=237621248 …`); None for any other line and for shadow mode's.
pub fn parse_kill_line(line: &str) -> Option<LoggedKill> {
    if !line.contains(" killed: ") || line.contains("shadow") {
        return None;
    }
    let field = |k: &str| line.split_whitespace().find_map(|w| w.strip_prefix(k)).and_then(|v| v.parse().ok());
    let unix_ns = parse_rfc3339_ns(line.split_whitespace().next()?)?;
    Some(LoggedKill { unix_ns, pid: field("pid=")? as u32, anon_bytes: field("anon_bytes=")? })
}

/// `2026-12-07T18:46:34.319900Z` (UTC, any number of fraction digits) as ns since the epoch.
pub fn parse_rfc3339_ns(s: &str) -> Option<u64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.split(':').map(|p| p.parse::<u64>().ok());
    let (h, min, sec) = (t.next()??, t.next()??, t.next()??);
    let frac_ns = match frac {
        "" => 0,
        f if f.len() <= 9 && f.bytes().all(|b| b.is_ascii_digit()) => {
            f.parse::<u64>().ok()? * 10u64.pow(9 - f.len() as u32)
        }
        _ => return None,
    };
    // Days from 1970-01-01 to y-m-day in the proleptic Gregorian calendar (Howard Hinnant's days_from_civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = u64::try_from(era * 146_097 + doe - 719_468).ok()?;
    Some(((days * 86_400 + h * 3_600 + min * 60 + sec) * 1_000_000_000) + frac_ns)
}

/// How much the group grows while a killed worker dies, from the watch's reads and the agent's kills.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Floor {
    /// Kills measured (their victim died within [`DIE_LIMIT_NS`] and the reads cover the window before them).
    pub kills: usize,
    /// The group's growth rate into a kill, bytes/s: median and 90th percentile.
    pub rate_p50: f64,
    pub rate_p90: f64,
    /// From a kill to the victim's memory leaving the group, ms: median and 90th percentile.
    pub die_ms_p50: f64,
    pub die_ms_p90: f64,
    /// What the group grows while a victim dies (rate times time, kill by kill), bytes: its 90th percentile.
    pub bytes: f64,
}

impl Floor {
    /// The headroom from `kill_at` to the limit, bytes.
    pub fn headroom_kill_at() -> f64 {
        (1.0 - KILL_AT) * LIMIT as f64
    }

    /// The headroom from `abort_at` (the lowest the kill line goes while an allocator respawns) to the limit.
    pub fn headroom_abort_at() -> f64 {
        (1.0 - ABORT_AT) * LIMIT as f64
    }

    /// In words, for the bench's lines.
    pub fn describe(&self) -> String {
        format!(
            "floor: growth {:.0} MB/s (p90 {:.0}), time to die {:.1} ms (p90 {:.1}) over {} kills: growth x time \
             to die, kill by kill, p90 {:.1} MiB against {:.1} MiB from kill_at, {:.1} MiB from abort_at to the limit",
            self.rate_p50 / 1e6,
            self.rate_p90 / 1e6,
            self.die_ms_p50,
            self.die_ms_p90,
            self.kills,
            self.bytes / MIB as f64,
            Floor::headroom_kill_at() / MIB as f64,
            Floor::headroom_abort_at() / MIB as f64,
        )
    }
}

/// The read at or before `t` (reads sorted by time).
fn at_or_before(reads: &[(u64, u64)], t: u64) -> Option<(u64, u64)> {
    let i = reads.partition_point(|&(ts, _)| ts <= t);
    i.checked_sub(1).map(|i| reads[i])
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    v[i.min(v.len() - 1)]
}

/// The floor from the usage `reads` ((unix ns, bytes), oldest first) and the agent's `kills`; None when no kill
/// could be measured.
pub fn floor(reads: &[(u64, u64)], kills: &[LoggedKill]) -> Option<Floor> {
    let (mut rates, mut dies, mut bytes) = (Vec::new(), Vec::new(), Vec::new());
    for k in kills {
        let Some((t1, u1)) = at_or_before(reads, k.unix_ns) else { continue };
        let Some((t0, u0)) = at_or_before(reads, k.unix_ns.saturating_sub(RATE_WINDOW_NS)) else { continue };
        if t1 <= t0 || k.unix_ns - t0 > 2 * RATE_WINDOW_NS {
            continue;
        }
        let rate = u1.saturating_sub(u0) as f64 / ((t1 - t0) as f64 / 1e9);
        let gone = u1.saturating_sub(k.anon_bytes / 2);
        let died = reads
            .iter()
            .skip_while(|&&(t, _)| t <= k.unix_ns)
            .take_while(|&&(t, _)| t <= k.unix_ns + DIE_LIMIT_NS)
            .find(|&&(_, u)| u <= gone);
        let Some(&(t, _)) = died else { continue };
        let die_s = (t - k.unix_ns) as f64 / 1e9;
        rates.push(rate);
        dies.push(die_s * 1e3);
        bytes.push(rate * die_s);
    }
    if rates.is_empty() {
        return None;
    }
    Some(Floor {
        kills: rates.len(),
        rate_p50: percentile(&mut rates, 50.0),
        rate_p90: percentile(&mut rates, 90.0),
        die_ms_p50: percentile(&mut dies, 50.0),
        die_ms_p90: percentile(&mut dies, 90.0),
        bytes: percentile(&mut bytes, 90.0),
    })
}

/// One run of the cell, with or without the agent.
#[derive(Debug, Clone, PartialEq)]
pub struct RespawnRun {
    pub agent: bool,
    /// From stress-ng's start to its exit (or to the bench giving up on it).
    pub seconds: f64,
    pub oom_kills: u64,
    pub agent_kills: u64,
    /// stress-ng's parent ran to its end: it exited by itself, not by a signal (`exit_code`: its code).
    pub parent_ran: bool,
    pub exit_code: Option<i32>,
    pub bystander_alive: bool,
    /// With the agent: the floor from this run's kills.
    pub floor: Option<Floor>,
}

impl RespawnRun {
    pub fn oom_per_s(&self) -> f64 {
        self.oom_kills as f64 / self.seconds
    }

    pub fn agent_per_s(&self) -> f64 {
        self.agent_kills as f64 / self.seconds
    }

    /// One line about the run.
    pub fn describe(&self) -> String {
        let who = if self.agent { "with the agent" } else { "without the agent" };
        let floor = self.floor.map_or(String::new(), |f| format!("; {}", f.describe()));
        format!(
            "{who}: {} kernel OOM kills ({:.2}/s), {} agent kills ({:.2}/s) in {:.1} s; stress-ng's parent {}, \
             bystander {}{floor}",
            self.oom_kills,
            self.oom_per_s(),
            self.agent_kills,
            self.agent_per_s(),
            self.seconds,
            match (self.parent_ran, self.exit_code) {
                (true, Some(c)) => format!("ran to its end (exit {c})"),
                _ => "did NOT run to its end".to_string(),
            },
            if self.bystander_alive { "alive" } else { "LOST" },
        )
    }

    pub fn to_json(&self) -> Value {
        let floor = self.floor.map(|f| {
            json!({"kills": f.kills, "rate_p50": f.rate_p50, "rate_p90": f.rate_p90, "die_ms_p50": f.die_ms_p50,
                   "die_ms_p90": f.die_ms_p90, "bytes": f.bytes})
        });
        json!({"agent": self.agent, "seconds": self.seconds, "oom_kills": self.oom_kills,
               "agent_kills": self.agent_kills, "parent_ran": self.parent_ran, "exit_code": self.exit_code,
               "bystander_alive": self.bystander_alive, "floor": floor})
    }

    pub fn from_json(v: &Value) -> Result<RespawnRun, String> {
        let bad = || format!("bad respawn run: {v}");
        let f = |k: &str| v.get(k).and_then(Value::as_f64).ok_or_else(bad);
        let u = |k: &str| v.get(k).and_then(Value::as_u64).ok_or_else(bad);
        let b = |k: &str| v.get(k).and_then(Value::as_bool).ok_or_else(bad);
        let floor = match v.get("floor") {
            Some(Value::Null) | None => None,
            Some(fl) => {
                let g = |k: &str| fl.get(k).and_then(Value::as_f64).ok_or_else(bad);
                Some(Floor {
                    kills: g("kills")? as usize,
                    rate_p50: g("rate_p50")?,
                    rate_p90: g("rate_p90")?,
                    die_ms_p50: g("die_ms_p50")?,
                    die_ms_p90: g("die_ms_p90")?,
                    bytes: g("bytes")?,
                })
            }
        };
        Ok(RespawnRun {
            agent: b("agent")?,
            seconds: f("seconds")?,
            oom_kills: u("oom_kills")?,
            agent_kills: u("agent_kills")?,
            parent_ran: b("parent_ran")?,
            exit_code: v.get("exit_code").and_then(Value::as_i64).map(|c| c as i32),
            bystander_alive: b("bystander_alive")?,
            floor,
        })
    }
}

/// What a run needs besides its group.
pub struct Setup<'a> {
    pub monitor: &'a Path,
    pub alloc_hog: &'a Path,
    /// How long stress-ng runs (its `--timeout`).
    pub secs: u64,
    /// The agent's config file text (None: no agent).
    pub agent_config: Option<String>,
    /// Where the agent's config and log go.
    pub work: PathBuf,
    /// The longest the agent may take to list the group.
    pub start_timeout: Duration,
}

/// One run in `group` (made by the caller, with its 512 MiB limit): the bystander, the agent if asked for, stress-ng
/// for `secs`; the group's processes are left to the group's guard.
pub fn run(group: &Group, s: &Setup) -> Result<RespawnRun, String> {
    let bystander = Hog::spawn(s.alloc_hog, group.path(), BYSTANDER_MIB, false);
    let log_path = s.work.join("respawn-agent.log");
    let mut agent = match &s.agent_config {
        Some(config) => Some(start_agent(group, s, config, &log_path)?),
        None => None,
    };
    let oom_before = group.oom_kills()?;
    let watch = s.agent_config.is_some().then(|| Watch::start(group));
    let t0 = Instant::now();
    let mut stress = spawn_stress(group.path(), s.secs);
    let status: Option<ExitStatus> = stress.wait_timeout(Duration::from_secs(s.secs * 3 + 30));
    let seconds = t0.elapsed().as_secs_f64();
    stress.kill();
    let reads = watch.map(Watch::finish).unwrap_or_default();
    let oom_kills = group.oom_kills()?.saturating_sub(oom_before);
    let bystander_alive = super::alive(bystander.pid());
    let kills: Vec<LoggedKill> = match agent.as_mut() {
        Some(a) => {
            if let Some(st) = a.wait_timeout(Duration::ZERO) {
                return Err(format!("the agent exited ({st}) during the run:\n{}", tail(&log_path)));
            }
            a.kill();
            fs::read_to_string(&log_path).unwrap_or_default().lines().filter_map(parse_kill_line).collect()
        }
        None => Vec::new(),
    };
    Ok(RespawnRun {
        agent: s.agent_config.is_some(),
        seconds,
        oom_kills,
        agent_kills: kills.len() as u64,
        parent_ran: status.is_some_and(|st| st.code().is_some()),
        exit_code: status.and_then(|st| st.code()),
        bystander_alive,
        floor: floor(&reads, &kills),
    })
}

fn tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(20)..].join("\n")
}

/// A fresh agent on `group`, its log at `log_path`, once its status lists the bystander.
fn start_agent(group: &Group, s: &Setup, config: &str, log_path: &Path) -> Result<ChildGuard, String> {
    let path = s.work.join("respawn-agent.toml");
    fs::write(&path, config).map_err(|e| format!("{}: {e}", path.display()))?;
    let log = fs::File::create(log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], crate::agent::free_port()));
    let mut agent = ChildGuard::spawn(
        Command::new(s.monitor)
            .arg("agent")
            .arg("--config")
            .arg(&path)
            .arg("--cgroup")
            .arg(group.path())
            .args(["--listen", &addr.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log),
    );
    let deadline = Instant::now() + s.start_timeout;
    loop {
        if let Some(st) = agent.wait_timeout(Duration::ZERO) {
            return Err(format!("the agent exited ({st}) at start:\n{}", tail(log_path)));
        }
        let listed = crate::http::get(addr, "/api/v1/status", Duration::from_secs(2))
            .ok()
            .filter(|r| r.status == 200)
            .and_then(|r| serde_json::from_slice::<Value>(&r.body).ok())
            .and_then(|st| st.get("processes").and_then(Value::as_array).map(Vec::len));
        if listed.is_some_and(|n| n >= 1) {
            return Ok(agent);
        }
        if Instant::now() >= deadline {
            return Err(format!("the agent did not list the group within {:?}:\n{}", s.start_timeout, tail(log_path)));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The prefix of the lines `vm-suite bench-reaction` prints for the host, one JSON [`Pair`] each.
pub const VM_LINE: &str = "@@BENCH respawn ";

/// The agent's config for the cell: the defaults, and on v2 the brake (`brake_at`, [`super::BRAKE_AT`]).
pub fn agent_config(h: Hierarchy) -> String {
    let config = crate::config::Config::new();
    match h {
        Hierarchy::V1 => config.render(),
        Hierarchy::V2 => config.set("policy", "brake_at", super::BRAKE_AT).render(),
    }
}

/// One run of the cell: stress-ng without the agent, then under it, each in a new group.
#[derive(Debug, Clone, PartialEq)]
pub struct Pair {
    pub group: String,
    pub without: RespawnRun,
    pub with: RespawnRun,
}

impl Pair {
    pub fn to_json(&self) -> Value {
        json!({"group": self.group, "without": self.without.to_json(), "with": self.with.to_json()})
    }

    pub fn from_json(v: &Value) -> Result<Pair, String> {
        Ok(Pair {
            group: v.get("group").and_then(Value::as_str).ok_or_else(|| format!("bad respawn pair: {v}"))?.into(),
            without: RespawnRun::from_json(&v["without"])?,
            with: RespawnRun::from_json(&v["with"])?,
        })
    }
}

/// `plan.respawn_runs` runs of the cell on `plan.hierarchy`, each line printed to stderr as it ends; a run that
/// fails is printed and left out.
pub fn run_cell(plan: &super::Plan, bins: &super::Bins, group: &str) -> Vec<Pair> {
    let mut out = Vec::new();
    for r in 0..plan.respawn_runs {
        let what = format!("{group}, respawn, run {}/{}", r + 1, plan.respawn_runs);
        let setup = |agent_config: Option<String>| Setup {
            monitor: &bins.monitor,
            alloc_hog: &bins.alloc_hog,
            secs: plan.respawn_s,
            agent_config,
            work: plan.work.clone(),
            start_timeout: plan.start_timeout,
        };
        let one = |name: &str, config: Option<String>| {
            let cg = Group::create(plan.hierarchy, name, LIMIT);
            let got = run(&cg, &setup(config));
            if let Ok(run) = &got {
                eprintln!("{what}: {}", run.describe());
            }
            got
        };
        match one("respawn-bare", None).and_then(|w| Ok((w, one("respawn", Some(agent_config(plan.hierarchy)))?))) {
            Ok((without, with)) => out.push(Pair { group: group.to_string(), without, with }),
            Err(e) => eprintln!("{what}: FAILED: {e}"),
        }
    }
    out
}

/// The cell's table: one row per run.
pub fn table(pairs: &[Pair]) -> String {
    let mut out = String::from(
        "| group | run | without the agent: kernel OOM kills | with the agent: kernel OOM kills | agent kills | \
         growth x time to die, p90 of the kills (p90 growth, p90 time to die) | headroom from kill_at / abort_at | stress-ng's parent ran, bystander lives |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n",
    );
    let mut n = 0;
    for (i, p) in pairs.iter().enumerate() {
        n = if i > 0 && pairs[i - 1].group == p.group { n + 1 } else { 1 };
        let floor = p.with.floor.map_or("n/a".to_string(), |f| {
            format!("{:.1} MiB ({:.0} MB/s, {:.1} ms)", f.bytes / MIB as f64, f.rate_p90 / 1e6, f.die_ms_p90)
        });
        let ok = |r: &RespawnRun| if r.parent_ran && r.bystander_alive { "yes" } else { "NO" };
        out.push_str(&format!(
            "| {} | {n} | {} ({:.2}/s) | {} ({:.2}/s) | {} ({:.2}/s) | {floor} | {:.1} / {:.1} MiB | {} / {} |\n",
            p.group,
            p.without.oom_kills,
            p.without.oom_per_s(),
            p.with.oom_kills,
            p.with.oom_per_s(),
            p.with.agent_kills,
            p.with.agent_per_s(),
            Floor::headroom_kill_at() / MIB as f64,
            Floor::headroom_abort_at() / MIB as f64,
            ok(&p.without),
            ok(&p.with),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_agent_s_kill_lines() {
        let line = "2026-12-07T18:46:34.319900Z  WARN monitor::sampler: killed: the group reached kill_at (97% of its \
                    limit) pid=10515 name=stress-ng-vm role=worker rss_bytes=238477312 anon_bytes=237621248 \
                    ratio=\"0.971\" why=\"over_kill_at\" round=1";
        let k = parse_kill_line(line).expect("a kill line");
        assert_eq!(k, LoggedKill { unix_ns: 1_796_669_194_319_900_000, pid: 10515, anon_bytes: 237_621_248 });
        assert_eq!(parse_kill_line("2026-12-07T18:46:34Z  INFO x: watching group"), None);
        assert_eq!(parse_kill_line(&line.replace("killed:", "shadow: would kill (not enforced) killed:")), None);
        assert_eq!(parse_rfc3339_ns("1970-01-01T00:00:01.5Z"), Some(1_500_000_000));
        assert_eq!(parse_rfc3339_ns("2000-03-01T00:00:00Z"), Some(951_868_800_000_000_000));
        assert_eq!(parse_rfc3339_ns("2000-03-01 00:00:00"), None);
    }

    #[test]
    fn the_floor_is_growth_times_the_time_to_die() {
        let ms = 1_000_000u64;
        // The group grows 1 MiB a ms up to 500 MiB at 100 ms; the kill then; the victim's 200 MiB leave at 104 ms.
        let mut reads: Vec<(u64, u64)> = (0..=100).map(|i| (i * ms, (400 + i) * MIB)).collect();
        reads.extend((101..=103).map(|i| (i * ms, (400 + i) * MIB)));
        reads.push((104 * ms, 304 * MIB));
        let kill = LoggedKill { unix_ns: 100 * ms, pid: 1, anon_bytes: 200 * MIB };
        let f = floor(&reads, &[kill]).expect("measured");
        assert_eq!(f.kills, 1);
        assert!((f.rate_p50 - MIB as f64 * 1e3).abs() < 1.0, "{f:?}");
        assert!((f.die_ms_p50 - 4.0).abs() < 1e-9, "{f:?}");
        assert!((f.bytes - 4.0 * MIB as f64).abs() < 1.0, "{f:?}");
        // No reads before the kill, or no death in sight: nothing measured.
        assert_eq!(floor(&reads[101..], &[kill]), None);
        assert_eq!(floor(&reads[..104], &[kill]), None);
    }
}
