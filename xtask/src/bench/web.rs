//! `cargo xtask bench web`: the home page and the agent's memory with 24 h of history for 16 processes, and with 7
//! days for 64.
//!
//! 1. Render time (criterion, monitor/benches/web_page.rs): the 24 h page against the same run's baseline, the
//!    same 24 h data as JSON (what `/api/v1/dashboard?range=24h` sends). Goal: page <= 50 ms. The same for the
//!    7 d page of a week of 64 processes (10,080 minutes and the last hour's seconds). Goal: page <= 100 ms.
//! 2. Memory: the bench binary fills a stats database through the real history (1440 minutes × 16 processes)
//!    and reports its own VmRSS before and after holding the day (ring full). Then the release agent is started
//!    twice on the same group, with an empty database (the baseline) and with the filled one (it loads the
//!    minutes at start), each serves the 24 h page a few times, and its VmRSS is read. Goal: <= 40 MB. The same
//!    with a database of 10,080 minutes × 64 processes, on a group of 64, serving the 7 d page; its peak
//!    (VmHWM) counts there, since loading the week and drawing it may hold more than is left after. Goal: peak
//!    <= 64 MB.
//!
//! The groups are v1 test cgroups of 16 and 64 sleeping processes when cgroups can be created (root), else the
//! agent's own cgroup (`--cgroup auto`). Figures go to docs/benchmarks.md (`cargo xtask bench all`).

use super::estimate_ns;
use crate::util::{root, run as sh};
use anyhow::{bail, Context, Result};
use monitor_tests::agent::free_port;
use monitor_tests::{spawn_in_cgroup, CgroupV1, ChildGuard};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub fn run() -> Result<()> {
    render()?;
    memory()
}

fn render() -> Result<()> {
    // criterion's report goes to stderr: stdout carries the summary alone (what `bench all` keeps).
    sh(Command::new("cargo")
        .current_dir(root())
        .args(["bench", "-p", "monitor", "--bench", "web_page"])
        .stdout(std::io::stderr()))?;
    let page = estimate_ns("web-24h-16/page")?;
    let json = estimate_ns("web-24h-16/json")?;
    let short = estimate_ns("web-24h-16/page-5m")?;
    println!(
        "render, 24 h × 16 processes: page {:.2} ms (goal <= 50 ms); baseline JSON of the same data {:.2} ms; \
         ratio page/json = {:.2}; 5 min page {:.2} ms",
        page / 1e6,
        json / 1e6,
        page / json,
        short / 1e6
    );
    let page = estimate_ns("web-7d-64/page")?;
    let json = estimate_ns("web-7d-64/json")?;
    println!(
        "render, 7 d × 64 processes: page {:.2} ms (goal <= 100 ms); baseline JSON of the same data {:.2} ms; \
         ratio page/json = {:.2}",
        page / 1e6,
        json / 1e6,
        page / json
    );
    Ok(())
}

/// VmRSS (or another `Vm*` field) of a process in KiB.
fn status_kib(pid: u32, field: &str) -> Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = text.lines().find(|l| l.starts_with(field)).with_context(|| format!("no {field} for {pid}"))?;
    let v = line.split_whitespace().nth(1).context("empty field")?;
    Ok(v.parse()?)
}

/// A temp folder, removed on drop.
struct Temp(PathBuf);

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Fills `db` through the bench binary with `cell`'s history (`24h-16`, `7d-64`); returns its (empty, full) VmRSS
/// in KiB.
fn fill(db: &Path, cell: &str) -> Result<(u64, u64)> {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(root())
        .args(["bench", "-p", "monitor", "--bench", "web_page"])
        .env("WEB_BENCH_FILL_DB", db)
        .env("WEB_BENCH_CELL", cell);
    eprintln!("+ WEB_BENCH_FILL_DB={} WEB_BENCH_CELL={cell} {cmd:?}", db.display());
    let out = cmd.stderr(Stdio::inherit()).output().context("running the web_page bench")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("filling the database failed ({}):\n{text}", out.status);
    }
    let line = text.lines().find_map(|l| l.strip_prefix("WEB_BENCH_RSS ")).context("no WEB_BENCH_RSS line")?;
    let v: serde_json::Value = serde_json::from_str(line)?;
    let kib = |k: &str| v[k].as_u64().with_context(|| format!("no {k} in {line}"));
    Ok((kib("empty_kib")?, kib("full_kib")?))
}

/// One agent's VmRSS after start-up and five pages of `range` (`24h`, `7d`); returns (VmRSS KiB, VmHWM KiB, mean
/// page ms).
fn agent_rss(dir: &Path, db: &Path, cgroup: &str, range: &str) -> Result<(u64, u64, f64)> {
    let cfg = dir.join(format!("{}.toml", db.file_stem().and_then(|s| s.to_str()).unwrap_or("monitor")));
    std::fs::write(&cfg, format!("[stats]\npath = {:?}\n[probes]\nenabled = false\n", db.display().to_string()))?;
    let port = free_port();
    let agent = ChildGuard::spawn(
        Command::new(crate::util::target_dir().join("release/monitor"))
            .args(["agent", "--config"])
            .arg(&cfg)
            .args(["--cgroup", cgroup, "--interval-ms", "100", "--listen", &format!("127.0.0.1:{port}")])
            .env("MONITOR_LOG", "warn")
            .stdout(Stdio::null()),
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(30);
    while monitor_tests::http::get(addr, "/healthz", Duration::from_secs(2)).map(|r| r.status) != Ok(200) {
        if Instant::now() >= deadline {
            bail!("the agent on {addr} did not answer /healthz");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(3));
    let mut total = Duration::ZERO;
    let path = format!("/?range={range}");
    for _ in 0..5 {
        let t = Instant::now();
        let r = monitor_tests::http::get(addr, &path, Duration::from_secs(10)).map_err(anyhow::Error::msg)?;
        total += t.elapsed();
        if r.status != 200 {
            bail!("GET {path}: {}", r.status);
        }
    }
    let rss = status_kib(agent.pid(), "VmRSS:")?;
    let hwm = status_kib(agent.pid(), "VmHWM:")?;
    Ok((rss, hwm, total.as_secs_f64() * 1e3 / 5.0))
}

fn mb(kib: u64) -> f64 {
    kib as f64 * 1024.0 / 1e6
}

/// A test cgroup of `n` sleeping processes, removed with them on drop; `None` and `auto` where cgroups cannot be
/// created (the agents watch their own).
fn group(name: &str, n: usize) -> (Option<CgroupV1>, Vec<ChildGuard>, String) {
    match CgroupV1::unavailable_reason() {
        None => {
            let cg = CgroupV1::create(name, Some(1 << 30));
            let children: Vec<ChildGuard> =
                (0..n).map(|_| spawn_in_cgroup(Command::new("sleep").arg("3600"), cg.path())).collect();
            let path = cg.path().display().to_string();
            (Some(cg), children, path)
        }
        Some(reason) => {
            eprintln!("no test cgroup ({reason}): the agents watch their own cgroup (--cgroup auto)");
            (None, Vec::new(), "auto".to_string())
        }
    }
}

fn memory() -> Result<()> {
    let dir = Temp(std::env::temp_dir().join(format!("monitor-bench-web-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0)?;
    let full_db = dir.0.join("day.db");
    let (empty, full) = fill(&full_db, "24h-16")?;
    println!(
        "in-process history (ring of 3600 s + 1440 minutes, 16 processes, after one 24 h page): VmRSS {:.1} MB \
         -> {:.1} MB, +{:.1} MB",
        mb(empty),
        mb(full),
        mb(full.saturating_sub(empty))
    );
    let week_db = dir.0.join("week.db");
    let (week_empty, week_full) = fill(&week_db, "7d-64")?;
    println!(
        "in-process history (ring of 3600 s + 10,080 minutes, 64 processes, after one 7 d page): VmRSS {:.1} MB \
         -> {:.1} MB, +{:.1} MB",
        mb(week_empty),
        mb(week_full),
        mb(week_full.saturating_sub(week_empty))
    );

    sh(Command::new("cargo").current_dir(root()).args(["build", "--release", "-p", "monitor"]))?;
    let (cg, children, cgroup) = group("bench-web", 16);
    let empty_db = dir.0.join("empty.db");
    let (base, base_hwm, base_ms) = agent_rss(&dir.0, &empty_db, &cgroup, "24h")?;
    let (loaded, loaded_hwm, loaded_ms) = agent_rss(&dir.0, &full_db, &cgroup, "24h")?;
    let procs = if cg.is_some() { "16 sleeping processes" } else { "its own cgroup" };
    drop((children, cg));
    println!("release agent on {procs}, after start-up and five GET /?range=24h:");
    println!(
        "  empty database (baseline): VmRSS {:.1} MB (peak {:.1} MB), page {base_ms:.1} ms",
        mb(base),
        mb(base_hwm)
    );
    println!(
        "  24 h × 16 processes loaded: VmRSS {:.1} MB (peak {:.1} MB), page {loaded_ms:.1} ms; +{:.1} MB over the \
         baseline",
        mb(loaded),
        mb(loaded_hwm),
        mb(loaded.saturating_sub(base))
    );
    let ring = mb(full.saturating_sub(empty));
    println!(
        "  with a full hour's ring added (the in-process delta above bounds it): <= {:.1} MB (goal <= 40 MB)",
        mb(loaded) + ring
    );

    let (cg, children, cgroup) = group("bench-web-week", 64);
    let empty_db = dir.0.join("empty-week.db");
    let (base, base_hwm, base_ms) = agent_rss(&dir.0, &empty_db, &cgroup, "7d")?;
    let (loaded, loaded_hwm, loaded_ms) = agent_rss(&dir.0, &week_db, &cgroup, "7d")?;
    let procs = if cg.is_some() { "64 sleeping processes" } else { "its own cgroup" };
    drop((children, cg));
    println!("release agent on {procs}, after start-up and five GET /?range=7d:");
    println!(
        "  empty database (baseline, week): VmRSS {:.1} MB (peak {:.1} MB), page {base_ms:.1} ms",
        mb(base),
        mb(base_hwm)
    );
    println!(
        "  7 d × 64 processes loaded: VmRSS {:.1} MB (peak {:.1} MB, goal <= 64 MB), page {loaded_ms:.1} ms; \
         +{:.1} MB over the baseline (peak +{:.1} MB)",
        mb(loaded),
        mb(loaded_hwm),
        mb(loaded.saturating_sub(base)),
        mb(loaded_hwm.saturating_sub(base_hwm))
    );
    Ok(())
}
