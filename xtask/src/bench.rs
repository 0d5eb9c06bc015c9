//! `cargo xtask bench <name>`: benchmarks whose figures go to docs/benchmarks.md. Each reports a ratio against a
//! baseline measured in the same run.
//!
//! - `all`: every benchmark below, one after the other, and docs/benchmarks.md written from what they printed
//!   (bench/all.rs; `--quick` for fewer rounds and no VM, `--skip a,b` to leave some out, `--only a,b` to run some
//!   again and keep the rest, `--rewrite` to write the page again from the last run's output).
//! - `sampler`: one full sample of a 16-process group against the raw pread of the same files (criterion), then the
//!   cost of one pread of each file a sample reads.
//! - `host-reads`: the LISTEN sockets from sock_diag against `/proc/self/net/tcp`, and a sample's reads per process
//!   with `statm` kept open against open-read-close (criterion, monitor/benches/host_reads.rs).
//! - `agent-cpu`: the release agent at a 100 ms interval on a 16-process group, then on 1,000 processes far from
//!   the lines, near them and aborting, CPU from /proc/<pid>/task/*/schedstat.
//! - `probes`: wrk against nginx in the group, eBPF probes attached vs detached, interleaved (bench/probes.rs).
//! - `proxy`: the front door (`monitor run`) against nginx and a direct connection, wrk c=1/16/64 (bench/proxy.rs).
//! - `proxy-instructions`: user-space instructions per request of the front door, the bare hop, the byte relay and
//!   nginx, counted by callgrind (bench/proxy_instr.rs): the one proxy figure other load cannot move.
//! - `reaction`: the grower suite: a fast grower in a 512 MiB group, the agent's abort against the kernel's OOM
//!   killer, timer vs events vs the brake, on this host (v1) and in the test VM (v2) (bench/reaction.rs).
//! - `reaction-crowd`: the same suite with 1,000 sleeping processes in each group (the abort must still choose the
//!   grower among them), on this host, events mode, 200 MB/s and full speed.
//! - `config`: `monitor check-config` on 100,000 `[[process]]` against 10,000 (bench/config.rs).
//! - `image`: the OCI image's size, and `monitor run` as a container's PID 1 under podman: start to `/healthz` against
//!   one bare server's start, and the stop's drain (bench/image.rs).
//! - `cluster`: a request forwarded to its owner node against a local one at c=16, and gossip bytes per node per
//!   second at 3 and 50 members (bench/cluster.rs).

// The benchmarks of other subsystems live beside this file; they are dispatched from here.
mod all;
mod all_figures;
mod all_page;
mod all_text;
mod cluster;
mod config;
mod image;
mod probes;
mod proxy;
mod proxy_instr;
mod reaction;
mod web;

use crate::util::{root, run as sh};
use anyhow::{bail, Context, Result};
use monitor_tests::{spawn_in_cgroup, CgroupV1, ChildGuard};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// Which benchmark: all, sampler, host-reads, agent-cpu, probes, proxy, proxy-instructions, reaction,
    /// reaction-crowd, web, config, cluster, image.
    name: String,
    /// agent-cpu: how long to measure, in seconds.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// all: fewer rounds and shorter runs, no test VM (each benchmark's knobs are written on the page).
    #[arg(long)]
    quick: bool,
    /// all: benchmarks to leave out, comma-separated.
    #[arg(long, value_delimiter = ',')]
    skip: Vec<String>,
    /// all: write docs/benchmarks.md again from the last run's output (target/bench-all/run.json, or the page itself
    /// when that is gone), running nothing.
    #[arg(long)]
    rewrite: bool,
    /// all: run only these benchmarks again (comma-separated), keeping every other section as the last run left it.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["skip", "rewrite"])]
    only: Vec<String>,
}

pub fn run(args: Args) -> Result<()> {
    match args.name.as_str() {
        "all" if !args.only.is_empty() => all::run_only(args.quick, &args.only),
        "all" => all::run(args.quick, &args.skip, args.rewrite),
        "sampler" => sampler(),
        "host-reads" => host_reads(),
        "agent-cpu" => agent_cpu(args.seconds),
        "probes" => probes::run(),
        "proxy" => proxy::run(),
        "proxy-instructions" => proxy_instr::run(),
        "reaction" => reaction::run(),
        "reaction-crowd" => {
            // The same suite with 1,000 sleeping processes in each group, on this host only, unless told otherwise.
            for (k, v) in [
                ("BENCH_REACTION_CROWD", "1000"),
                ("BENCH_REACTION_VM", "none"),
                ("BENCH_REACTION_MODES", "events"),
                ("BENCH_REACTION_SPEEDS", "200,0"),
            ] {
                if std::env::var_os(k).is_none() {
                    std::env::set_var(k, v);
                }
            }
            reaction::run()
        }
        "web" => web::run(),
        "config" => config::run(),
        "cluster" => cluster::run(),
        "image" => image::run(),
        other => bail!(
            "unknown benchmark {other:?} (all, sampler, host-reads, agent-cpu, probes, proxy, proxy-instructions, reaction, reaction-crowd, web, config, cluster, image)"
        ),
    }
}

fn estimate_ns(id: &str) -> Result<f64> {
    let path = crate::util::target_dir().join("criterion").join(id).join("new/estimates.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)?;
    v["mean"]["point_estimate"].as_f64().context("no mean.point_estimate")
}

fn sampler() -> Result<()> {
    if let Some(reason) = CgroupV1::unavailable_reason() {
        bail!("the sampler benchmark creates a v1 memory cgroup: {reason}");
    }
    // criterion's report goes to stderr: this process's stdout carries the summary alone (what `bench all` keeps).
    sh(Command::new("cargo")
        .current_dir(root())
        .args(["bench", "-p", "monitor", "--bench", "sampler"])
        .stdout(std::io::stderr()))?;
    let raw = estimate_ns("sampler-16/raw-pread")?;
    let full = estimate_ns("sampler-16/full-sample")?;
    println!("16 processes: raw pread of the same files {:.1} µs, full sample {:.1} µs", raw / 1e3, full / 1e3);
    println!("ratio full/raw = {:.2} (goal <= 1.5)", full / raw);
    println!("at a 100 ms interval that is {:.3}% of one core spent sampling", full / 100e6 * 100.0);
    file_costs()
}

/// `1.2 µs`, `11.6 ms`: `ns` in the unit that keeps it between 1 and 1000.
fn human_ns(ns: f64) -> String {
    match ns {
        n if n < 1e3 => format!("{n:.0} ns"),
        n if n < 1e6 => format!("{:.1} µs", n / 1e3),
        n if n < 1e9 => format!("{:.1} ms", n / 1e6),
        n => format!("{:.2} s", n / 1e9),
    }
}

/// The host reads of monitor/benches/host_reads.rs (criterion), each beside the read it replaces; its summary on
/// stdout, criterion's report on stderr.
fn host_reads() -> Result<()> {
    sh(Command::new("cargo")
        .current_dir(root())
        .args(["bench", "-p", "monitor", "--bench", "host_reads"])
        .stdout(std::io::stderr()))?;
    let (diag, tcp) = (estimate_ns("listeners/sock_diag")?, estimate_ns("listeners/proc-net-tcp")?);
    let owner = estimate_ns("listeners/port_owner")?;
    println!(
        "LISTEN sockets, one read: sock_diag {}, /proc/self/net/tcp {} ({:.0}x); a readiness check's port_owner {}",
        human_ns(diag),
        human_ns(tcp),
        tcp / diag,
        human_ns(owner)
    );
    // The group is named after the processes the benchmark managed to start (`procs-200`).
    let criterion = crate::util::target_dir().join("criterion");
    let group = std::fs::read_dir(&criterion)
        .with_context(|| format!("reading {}", criterion.display()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .find(|n| n.starts_with("procs-"))
        .context("no procs-<n> group in target/criterion")?;
    let n: f64 = group.trim_start_matches("procs-").parse().with_context(|| format!("group {group}"))?;
    let kept = estimate_ns(&format!("{group}/statm-kept-open"))? / n;
    let closed = estimate_ns(&format!("{group}/open-read-close"))? / n;
    println!(
        "{n} processes sampled, per process: statm kept open {}, open-read-close {} ({:.1}x)",
        human_ns(kept),
        human_ns(closed),
        closed / kept
    );
    Ok(())
}

/// Mean ns of one `pread` from offset 0 of each of `files`, over `rounds` passes.
fn pread_ns(files: &[File], rounds: u32) -> Result<f64> {
    let mut buf = vec![0u8; 16 << 10];
    let t0 = Instant::now();
    for _ in 0..rounds {
        for f in files {
            std::hint::black_box(f.read_at(&mut buf, 0)?);
        }
    }
    Ok(t0.elapsed().as_nanos() as f64 / (f64::from(rounds) * files.len() as f64))
}

/// The cost of one pread of each file a sample reads, and of the two it does not (`status`, `stat`), on a v1 group
/// of 16 `sleep` processes: the figures docs/design.md and monitor/src/sources/procs.rs cite.
fn file_costs() -> Result<()> {
    const ROUNDS: u32 = 2000;
    let cg = CgroupV1::create("bench-sampler-files", Some(1 << 30));
    let children: Vec<ChildGuard> =
        (0..16).map(|_| spawn_in_cgroup(Command::new("sleep").arg("600"), cg.path())).collect();
    let open = |p: std::path::PathBuf| File::open(&p).with_context(|| format!("opening {}", p.display()));
    let per_process = |name: &str| -> Result<Vec<File>> {
        children.iter().map(|c| open(std::path::Path::new("/proc").join(c.pid().to_string()).join(name))).collect()
    };
    let stat = pread_ns(&[open(cg.path().join("memory.stat"))?], ROUNDS)?;
    let procs = pread_ns(&[open(cg.path().join("cgroup.procs"))?], ROUNDS)?;
    let statm = pread_ns(&per_process("statm")?, ROUNDS)?;
    let status = pread_ns(&per_process("status")?, ROUNDS)?;
    let pstat = pread_ns(&per_process("stat")?, ROUNDS)?;
    println!("one pread from offset 0 of an open file, mean of {ROUNDS} rounds over 16 sleep processes:");
    println!("| file | µs per read | / statm |\n| --- | ---: | ---: |");
    for (name, ns) in [
        ("group `memory.stat` (v1, each sample)", stat),
        ("group `cgroup.procs` (v1, each sample)", procs),
        ("`/proc/<pid>/statm` (each process, each sample: RSS and RssAnon)", statm),
        ("`/proc/<pid>/status` (not read: the same RssAnon)", status),
        ("`/proc/<pid>/stat` (once per process)", pstat),
    ] {
        println!("| {name} | {:.2} | {:.1} |", ns / 1e3, ns / statm);
    }
    Ok(())
}

/// CPU time of each thread of a process so far, by thread name, in nanoseconds: the first field of
/// `/proc/<pid>/task/<tid>/schedstat` (the scheduler's own count, exact, where utime and stime are 10 ms ticks
/// sampled at the timer). Threads of one name are summed.
fn cpu_ns_by_thread(pid: u32) -> Result<std::collections::BTreeMap<String, u64>> {
    let mut out = std::collections::BTreeMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let dir = task?.path();
        let (Ok(name), Ok(stat)) =
            (std::fs::read_to_string(dir.join("comm")), std::fs::read_to_string(dir.join("schedstat")))
        else {
            continue; // a thread that ended meanwhile
        };
        let ns: u64 = stat.split_whitespace().next().context("empty schedstat")?.parse()?;
        *out.entry(name.trim().to_string()).or_default() += ns;
    }
    Ok(out)
}

fn agent_cpu(seconds: u64) -> Result<()> {
    if let Some(reason) = CgroupV1::unavailable_reason() {
        bail!("the agent-cpu benchmark creates a v1 memory cgroup: {reason}");
    }
    let release =
        ["build", "--release", "-p", "monitor", "-p", "monitor-tests", "--bin", "monitor", "--bin", "alloc-hog"];
    sh(Command::new("cargo").current_dir(root()).args(release))?;
    // The baseline first, then the large group far from the lines and near them (refusing: pacing samples fast).
    {
        let cg = CgroupV1::create("bench-agent-cpu", Some(1 << 30));
        let _sleepers = sleepers(&cg, 16);
        println!("{}", agent_cpu_cell(&cg, "16 processes", "< 0.5%", seconds, "")?);
    }
    let cg = CgroupV1::create("bench-agent-cpu-1000", Some(2 << 30));
    let _sleepers = sleepers(&cg, 1000);
    println!("{}", agent_cpu_cell(&cg, "1,000 processes far from the lines", "< 2%", seconds, "")?);
    // One process makes the group 91% full: past refuse_at (85%), so the group refuses and pacing watches it
    // closely, short of abort_at (92%), from where every sample reads each process's memory.
    // What the agent counts: anon, shmem, and the kernel memory charged to the same limit.
    let held = monitor_tests::group::charged(cg.path(), monitor_tests::Hierarchy::V1).map_err(anyhow::Error::msg)?;
    let mib = |ratio: f64| ((ratio * (2u64 << 30) as f64) as u64).saturating_sub(held) >> 20;
    let hog = crate::util::target_dir().join("release/alloc-hog");
    {
        let _hog = monitor_tests::Hog::spawn(&hog, cg.path(), mib(0.91), false);
        let what = format!("1,001 processes near the lines (one holding {} MiB of 2 GiB)", mib(0.91));
        println!("{}", agent_cpu_cell(&cg, &what, "< 5%", seconds, "")?);
    }
    // The worst case: 94%, past abort_at and short of kill_at (97%), the last resort off so that the process told
    // to abort is never killed: every sample lists nothing new but reads each process's memory.
    let _hog = monitor_tests::Hog::spawn(&hog, cg.path(), mib(0.94), false);
    let what = format!("1,001 processes aborting (one holding {} MiB of 2 GiB, never killed)", mib(0.94));
    println!("{}", agent_cpu_cell(&cg, &what, "< 5%", seconds, "kill = false")?);
    Ok(())
}

/// `n` processes sleeping in `cg` (killed on drop).
fn sleepers(cg: &CgroupV1, n: usize) -> Vec<ChildGuard> {
    (0..n).map(|_| spawn_in_cgroup(Command::new("sleep").arg("3600"), cg.path())).collect()
}

/// The release agent on `cg` at a 100 ms interval, with these further `[policy]` lines, for `seconds`: its CPU by
/// thread against this process sleeping as long, the samples it took, and the group's state. One line.
fn agent_cpu_cell(cg: &CgroupV1, what: &str, goal: &str, seconds: u64, policy: &str) -> Result<String> {
    let port = monitor_tests::agent::free_port();
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let file = std::env::temp_dir().join(format!("monitor-bench-agent-cpu-{}.toml", std::process::id()));
    monitor_tests::config::Config::new()
        .cgroup(cg.path())
        .web(addr)
        .set("policy", "interval_ms", 100)
        .lines("policy", policy)
        .write(&file);
    let mut agent = ChildGuard::spawn(
        Command::new(crate::util::target_dir().join("release/monitor"))
            .args(["agent", "--config"])
            .arg(&file)
            .env("MONITOR_LOG", "warn")
            .stdout(Stdio::null()),
    );
    std::thread::sleep(Duration::from_secs(2));
    if agent.wait_timeout(Duration::from_millis(1)).is_some() {
        bail!("the agent exited at start");
    }
    let status = || -> Result<serde_json::Value> {
        let r = monitor_tests::http::get(addr, "/api/v1/status", Duration::from_secs(5))
            .map_err(|e| anyhow::anyhow!("the agent's status: {e}"))?;
        Ok(serde_json::from_slice(&r.body)?)
    };
    let seq = |v: &serde_json::Value| v.pointer("/sample/seq").and_then(serde_json::Value::as_u64).unwrap_or(0);
    let s0 = status()?;
    let t0 = Instant::now();
    let c0 = cpu_ns_by_thread(agent.pid())?;
    // The baseline in the same run: this xtask process sleeping for the same time.
    let me0: u64 = cpu_ns_by_thread(std::process::id())?.values().sum();
    std::thread::sleep(Duration::from_secs(seconds));
    let c1 = cpu_ns_by_thread(agent.pid())?;
    let me1: u64 = cpu_ns_by_thread(std::process::id())?.values().sum();
    let wall = t0.elapsed().as_secs_f64() * 1e9;
    let s1 = status()?;
    let pct = |ns: u64| ns as f64 / wall * 100.0;
    let spent: Vec<(&String, u64)> =
        c1.iter().map(|(name, &ns)| (name, ns.saturating_sub(c0.get(name).copied().unwrap_or(0)))).collect();
    let total: u64 = spent.iter().map(|(_, ns)| ns).sum();
    let threads: Vec<String> =
        spent.iter().filter(|(_, ns)| *ns > 0).map(|(name, ns)| format!("{name} {:.3}%", pct(*ns))).collect();
    drop(agent);
    let _ = std::fs::remove_file(&file);
    let state = s1.pointer("/policy/state").and_then(serde_json::Value::as_str).unwrap_or("?");
    let ratio = s1.pointer("/group/ratio").and_then(serde_json::Value::as_f64).unwrap_or(f64::NAN);
    Ok(format!(
        "agent at 100 ms, {what}, {:.0} s: {:.1} ms of CPU = {:.3}% of one core (goal {goal}); by thread: {}; \
         {} samples, {state} at ratio {ratio:.3}; idle baseline (this sleeping process): {:.3}%",
        wall / 1e9,
        total as f64 / 1e6,
        pct(total),
        threads.join(", "),
        seq(&s1).saturating_sub(seq(&s0)),
        pct(me1.saturating_sub(me0))
    ))
}
