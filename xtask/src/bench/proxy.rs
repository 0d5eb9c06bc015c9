//! `cargo xtask bench proxy`: the front door against nginx. Two release `fixture-backend`s (a master and a worker)
//! started by `monitor run` in a v1 test cgroup; the same two behind nginx (`least_conn`, `keepalive`, a temporary
//! config on 127.0.0.1) and behind a bare hyper hop (tests/src/bin/bare-hop.rs: the least hyper can do, the floor
//! of the library the front door is built on) and behind a byte relay (tests/src/bin/byte-relay.rs: blocking
//! threads copying bytes, no HTTP: the floor of any proxy on this machine); wrk at c = 1, 16, 64 against the
//! backend directly, `monitor run`, the bare hop, the relay and nginx, interleaved in one run. Goal: throughput at
//! least nginx's at every c; added p50 over direct <= 25 µs at c = 1. A second `monitor run` of the same build with
//! `[proxy] track_requests = false`, on two backends of its own, is in the same rounds: the memory per request and
//! the victim's requests cost what monitor/that one's throughput is short of 1 (goal: >= 0.98).
//! `BENCH_SECONDS` (default 5) sets each wrk run's length. `BENCH_PROXY_BASELINE=/path/to/monitor` adds a second
//! `monitor run` from that binary (an older build, with its own two backends) to the same interleaved rounds, so a
//! change is measured against what it replaces in one run. `BENCH_ROUNDS=N` (default 7) repeats the interleaved
//! rounds, each starting at another target; the summary takes the means, and each per-round ratio's median with its
//! lowest and highest round (each round's runs are seconds apart, so a load change between rounds moves the means
//! more than the per-round ratios; so does, at c = 1, where the scheduler happens to place a proxy and its backend:
//! on one core a request needs no wake-up interrupt between cores, and that round's proxy serves up to twice as
//! many). A goal is met when the median meets it and no round falls more than 10% under it ([`Spread::meets`]).
//! After the rounds, every proxy's instructions per request are counted under callgrind
//! ([`super::proxy_instr::counts`], `BENCH_INSTR_REQUESTS` GETs, default 500) and stand beside each throughput
//! ratio.
//! Each proxy's CPU time per request (user and system, all its threads; nginx: its workers) is read from
//! `/proc/<pid>/stat` around each run: on a machine whose two cores are shared by wrk, the proxies and the backends,
//! that is what throughput is made of, and it moves less with other load than req/s does. The wake-up interrupts
//! of the whole machine per request (`RES` + `CAL` in /proc/interrupts: a task woken on another core) are counted
//! around each run too: at c=1 a request is a chain of four wake-ups, and those that cross to the other core decide
//! the throughput (docs/benchmarks.md, "Front door"). Where `perf` is installed, one more second of wrk per target
//! and c, apart from the measured runs (counting slows every system call), counts the proxy's own system calls and
//! context switches per request (`perf stat -e raw_syscalls:sys_enter,context-switches -p`): a switch is a sleep,
//! so each one is a wake-up the request waited for.

use crate::util::{root, run as sh};
use anyhow::{bail, Context, Result};
use monitor_tests::agent::free_port;
use monitor_tests::{spawn_in_cgroup, CgroupV1, ChildGuard};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The path every benchmark request asks for (a tx path: served by either process).
pub(super) const PATH: &str = "/r4/CodeSystem/$lookup";

#[derive(Default)]
struct Wrk {
    rps: f64,
    p50_us: f64,
    p99_us: f64,
    requests: f64,
    /// CPU µs per request of the target's own processes (0 for direct).
    user_us: f64,
    sys_us: f64,
    /// Wake-up interrupts between cores per request, the whole machine ([`wakeup_ipis`]).
    ipis: f64,
    /// System calls and context switches per request of the target's own processes ([`counted`]; None without
    /// perf or processes).
    syscalls: Option<f64>,
    switches: Option<f64>,
}

/// One second of wrk at `conns` against `port` with the system calls and context switches of `pids` (every
/// thread) counted by `perf stat`: (syscalls, switches) per request, None without perf or pids.
fn counted(port: u16, conns: u32, pids: &[u32]) -> Result<Option<(f64, f64)>> {
    if pids.is_empty() || !monitor_tests::on_path("perf") {
        return Ok(None);
    }
    let list = pids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let perf = Command::new("perf")
        .args(["stat", "-x", ",", "-e", "raw_syscalls:sys_enter,context-switches", "-p", &list])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("perf stat")?;
    // perf needs a moment to attach to every thread.
    std::thread::sleep(Duration::from_millis(300));
    let w = wrk(port, conns, 1);
    // SAFETY: kill(2) on our own child: SIGINT makes perf stat print its counts and exit.
    unsafe { libc::kill(perf.id() as i32, libc::SIGINT) };
    let out = perf.wait_with_output().context("perf stat")?;
    let w = w?;
    let text = String::from_utf8_lossy(&out.stderr);
    let count = |event: &str| {
        text.lines().find(|l| l.contains(event)).and_then(|l| l.split(',').next()?.trim().parse::<f64>().ok())
    };
    let n = w.requests.max(1.0);
    Ok(count("raw_syscalls:sys_enter").zip(count("context-switches")).map(|(s, c)| (s / n, c / n)))
}

/// Interrupts sent to wake a task on another core so far, all cores: `RES` (reschedule) and `CAL` (function call,
/// which this kernel's queued remote wake-ups use) in /proc/interrupts (x86; 0 where the lines are missing).
fn wakeup_ipis() -> u64 {
    let Ok(text) = std::fs::read_to_string("/proc/interrupts") else { return 0 };
    text.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let rest = l.strip_prefix("RES:").or_else(|| l.strip_prefix("CAL:"))?;
            // Per-core counts, then the description.
            Some(rest.split_whitespace().map_while(|v| v.parse::<u64>().ok()).sum::<u64>())
        })
        .sum()
}

/// (user, system) clock ticks of `pids` so far, all threads of each.
fn cpu_ticks(pids: &[u32]) -> (u64, u64) {
    let mut t = (0, 0);
    for pid in pids {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // After the command (which may hold spaces), field 3 (state) comes first: utime is 14, stime 15.
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        t.0 += num(11);
        t.1 += num(12);
    }
    t
}

/// The pids whose parent is `parent` (nginx's workers).
fn children(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().is_some_and(|s| {
                let rest = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
                rest.split_whitespace().nth(1).and_then(|v| v.parse::<u32>().ok()) == Some(parent)
            })
        })
        .collect()
}

fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// A ratio over the rounds: its median, and its lowest and highest round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Spread {
    pub median: f64,
    pub low: f64,
    pub high: f64,
}

impl Spread {
    pub(super) fn of(v: &[f64]) -> Spread {
        let low = v.iter().copied().fold(f64::INFINITY, f64::min);
        let high = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Spread { median: median(v.to_vec()), low, high }
    }

    /// A goal of at least `goal` is met when the median meets it and no round falls more than 10% under it: one
    /// lucky median over rounds that swing is not a figure that holds.
    pub(super) fn meets(&self, goal: f64) -> bool {
        self.median >= goal && self.low >= goal * 0.9
    }

    /// `median of per-round ratios 1.02, lowest 0.95, highest 1.10`, and `; goal >= 1: met` when `goal` is given.
    fn describe(&self, goal: Option<f64>) -> String {
        let mut s =
            format!("median of per-round ratios {:.2}, lowest {:.2}, highest {:.2}", self.median, self.low, self.high);
        if let Some(g) = goal {
            let verdict = if self.meets(g) { "met" } else { "not met" };
            s.push_str(&format!("; goal >= {g}: {verdict}"));
        }
        s
    }
}

/// A `wrk --latency` run's output: its text, requests/s, p50 and p99 (µs). An error when wrk failed or saw
/// non-2xx answers or socket errors, naming `against`.
pub(super) fn read_wrk(out: &std::process::Output, against: impl std::fmt::Display) -> Result<(String, f64, f64, f64)> {
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() || text.contains("Non-2xx") || text.contains("Socket errors") {
        bail!("wrk against {against} failed or saw errors:\n{text}");
    }
    let field = |prefix: &str| {
        text.lines().find_map(|l| l.trim().strip_prefix(prefix).map(|v| v.trim().to_string())).unwrap_or_default()
    };
    let rps = field("Requests/sec:").parse::<f64>().with_context(|| format!("no Requests/sec in:\n{text}"))?;
    let p50 = micros(&field("50%")).with_context(|| format!("no 50% in:\n{text}"))?;
    let p99 = micros(&field("99%")).with_context(|| format!("no 99% in:\n{text}"))?;
    Ok((text, rps, p50, p99))
}

/// `50.00us`, `1.20ms`, `2.00s` -> µs.
fn micros(s: &str) -> Option<f64> {
    let (num, mult) = if let Some(v) = s.strip_suffix("us") {
        (v, 1.0)
    } else if let Some(v) = s.strip_suffix("ms") {
        (v, 1e3)
    } else if let Some(v) = s.strip_suffix('s') {
        (v, 1e6)
    } else {
        return None;
    };
    num.parse::<f64>().ok().map(|n| n * mult)
}

fn wrk(port: u16, conns: u32, seconds: u64) -> Result<Wrk> {
    let out = Command::new("wrk")
        .args(["-t1", &format!("-c{conns}"), &format!("-d{seconds}s"), "--latency"])
        .arg(format!("http://127.0.0.1:{port}{PATH}"))
        .output()
        .context("running wrk (apt-get install wrk)")?;
    let (text, rps, p50_us, p99_us) = read_wrk(&out, port)?;
    let requests = text
        .lines()
        .find_map(|l| l.trim().split_once(" requests in ").and_then(|(n, _)| n.trim().parse::<f64>().ok()))
        .with_context(|| format!("no request count in:\n{text}"))?;
    Ok(Wrk { rps, p50_us, p99_us, requests, ..Wrk::default() })
}

/// One measured wrk run, with the CPU time of `pids` per request.
fn measure(port: u16, conns: u32, seconds: u64, pids: &[u32]) -> Result<Wrk> {
    let (before, ipis) = (cpu_ticks(pids), wakeup_ipis());
    let mut w = wrk(port, conns, seconds)?;
    let (after, ipis) = (cpu_ticks(pids), wakeup_ipis().saturating_sub(ipis));
    w.ipis = ipis as f64 / w.requests.max(1.0);
    let per_req = |a: u64, b: u64| (a.saturating_sub(b)) as f64 / clock_ticks_per_s() * 1e6 / w.requests.max(1.0);
    w.user_us = per_req(after.0, before.0);
    w.sys_us = per_req(after.1, before.1);
    Ok(w)
}

fn wait_port(port: u16) -> Result<()> {
    wait_port_for(port, Duration::from_secs(20))
}

/// Waits at most `limit` for something to listen on 127.0.0.1:`port`.
pub(super) fn wait_port_for(port: u16, limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if Instant::now() >= deadline {
            bail!("nothing listens on {addr}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Builds the release binaries the proxy benchmarks run (`monitor`, the fixture backend, the floor proxies) and
/// gives their directory.
pub(super) fn release_bins() -> Result<PathBuf> {
    let root = root();
    sh(Command::new("cargo").current_dir(&root).args([
        "build",
        "--release",
        "-p",
        "monitor",
        "-p",
        "monitor-tests",
        "--bins",
    ]))?;
    Ok(crate::util::target_dir().join("release"))
}

/// nginx in front of 127.0.0.1:`a` and :`b` (`least_conn`, `keepalive`) on 127.0.0.1:`listen`, its files in `dir`;
/// `processes`: the directives for its processes (e.g. `worker_processes 2;`).
pub(super) fn nginx_conf(dir: &Path, listen: u16, a: u16, b: u16, processes: &str) -> String {
    let d = dir.display();
    format!(
        "daemon off;\n{processes}\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
         events {{ worker_connections 1024; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
           fastcgi_temp_path {d}/fcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
           upstream be {{ least_conn; server 127.0.0.1:{a}; server 127.0.0.1:{b}; keepalive 64; keepalive_timeout 4s; }}\n\
           server {{ listen 127.0.0.1:{listen}; location / {{ proxy_pass http://be; proxy_http_version 1.1; \
         proxy_set_header Connection \"\"; }} }}\n}}\n"
    )
}

/// A `monitor run` (with its own web and proxy ports) in front of two fixture backends on ports `a` and `b`.
struct Monitor {
    front: u16,
    child: ChildGuard,
}

/// The config of a `monitor run` in group `cg` (probes off) serving its API on `web` and its front door on `front`
/// (with the `[proxy]` lines `proxy`), in front of two fixture backends: a master and a worker, each a (name, port).
pub(super) fn monitor_config(
    cg: &CgroupV1,
    fixture: &Path,
    (web, front): (u16, u16),
    proxy: &str,
    [(m0, a), (tx1, b)]: [(&str, u16); 2],
) -> String {
    let fixture = fixture.display().to_string();
    format!(
        "[group]\ncgroup = {:?}\n[probes]\nenabled = false\n[web]\nlisten = \"127.0.0.1:{web}\"\n\
         [proxy]\nlisten = \"127.0.0.1:{front}\"\n{proxy}\
         [[process]]\nname = {m0:?}\nrole = \"master\"\ncommand = [{fixture:?}, \"--name\", {m0:?}, \"--port\", \"{a}\"]\nport = {a}\n\
         [[process]]\nname = {tx1:?}\nrole = \"worker\"\ncommand = [{fixture:?}, \"--name\", {tx1:?}, \"--port\", \"{b}\"]\nport = {b}\n",
        cg.path().display().to_string()
    )
}

/// Starts a `monitor run` of `bin` tagged `tag` over two fixture backends on `a` and `b`, with the `[proxy]` lines
/// `proxy`.
#[allow(clippy::too_many_arguments)]
fn start_monitor(
    bin: &Path,
    fixture: &Path,
    cg: &CgroupV1,
    dir: &Path,
    tag: &str,
    proxy: &str,
    a: u16,
    b: u16,
) -> Result<Monitor> {
    let (front, web) = (free_port(), free_port());
    let (m0, tx1) = (format!("{tag}-m0"), format!("{tag}-tx1"));
    let config = monitor_config(cg, fixture, (web, front), proxy, [(&m0, a), (&tx1, b)]);
    let file = dir.join(format!("{tag}.toml"));
    std::fs::write(&file, config)?;
    let child = ChildGuard::spawn(
        Command::new(bin).args(["run", "--config"]).arg(&file).env("MONITOR_LOG", "warn").stdin(Stdio::null()),
    );
    for p in [a, b, front] {
        wait_port(p)?;
    }
    Ok(Monitor { front, child })
}

pub fn run() -> Result<()> {
    if let Some(reason) = CgroupV1::unavailable_reason() {
        bail!("the proxy benchmark runs monitor run in a v1 memory cgroup: {reason}");
    }
    let seconds: u64 = std::env::var("BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    let rounds: u32 = std::env::var("BENCH_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(7).max(1);
    let instr_requests: u32 =
        std::env::var("BENCH_INSTR_REQUESTS").ok().and_then(|s| s.parse().ok()).unwrap_or(500).max(1);
    let bin = release_bins()?;
    let cg = CgroupV1::create("bench-proxy", Some(1 << 30));
    let dir = std::env::temp_dir().join(format!("monitor-bench-proxy-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (a, b, ngx) = (free_port(), free_port(), free_port());
    let fixture = bin.join("fixture-backend");
    let monitor = start_monitor(&bin.join("monitor"), &fixture, &cg, &dir, "run", "", a, b)?;
    // The same build with `[proxy] track_requests = false` (no requests in flight kept, no memory per request), on
    // two backends of its own: what naming the victim's requests and measuring memory per request cost.
    let off = {
        let (c, d) = (free_port(), free_port());
        start_monitor(&bin.join("monitor"), &fixture, &cg, &dir, "untracked", "track_requests = false\n", c, d)?
    };
    let baseline = match std::env::var_os("BENCH_PROXY_BASELINE") {
        Some(old) => {
            let (c, d) = (free_port(), free_port());
            Some(start_monitor(Path::new(&old), &fixture, &cg, &dir, "baseline", "", c, d)?)
        }
        None => None,
    };
    std::fs::write(dir.join("nginx.conf"), nginx_conf(&dir, ngx, a, b, "worker_processes 2;"))?;
    // nginx runs inside the test cgroup too, so its workers go with the group whatever happens.
    let nginx = spawn_in_cgroup(
        Command::new("nginx").arg("-p").arg(&dir).arg("-c").arg(dir.join("nginx.conf")).stderr(Stdio::null()),
        cg.path(),
    );
    wait_port(ngx)?;
    let workers = {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let w = children(nginx.pid());
            if w.len() >= 2 || Instant::now() >= deadline {
                break w;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let mut targets: Vec<(&str, u16, Vec<u32>)> =
        vec![("direct (one backend)", a, Vec::new()), ("monitor run", monitor.front, vec![monitor.child.pid()])];
    if let Some(old) = &baseline {
        targets.push(("monitor run (baseline build)", old.front, vec![old.child.pid()]));
    }
    targets.push(("monitor run (track_requests = false)", off.front, vec![off.child.pid()]));
    // The floors, in front of the same two backends: of the library, a bare hyper hop (tests/src/bin/bare-hop.rs);
    // of any proxy, a byte relay (tests/src/bin/byte-relay.rs: blocking threads, no HTTP).
    let mut floors = Vec::new();
    for (name, program) in [("bare hyper hop", "bare-hop"), ("byte relay", "byte-relay")] {
        let port = free_port();
        let child = spawn_in_cgroup(
            Command::new(bin.join(program))
                .args(["--port", &port.to_string(), "--upstream", &a.to_string(), "--upstream", &b.to_string()])
                .stdin(Stdio::null()),
            cg.path(),
        );
        wait_port(port)?;
        targets.push((name, port, vec![child.pid()]));
        floors.push(child);
    }
    targets.push(("nginx", ngx, workers));
    let at = |name: &str| targets.iter().position(|t| t.0 == name).unwrap_or(0);
    let (i_hop, i_relay, i_nginx) = (at("bare hyper hop"), at("byte relay"), at("nginx"));
    let i_off = at("monitor run (track_requests = false)");
    println!(
        "wrk -t1 -cC -d{seconds}s --latency http://127.0.0.1:PORT{PATH}; two fixture-backends (release); \
         {rounds} rounds of {seconds} s per target and c, the targets' order rotated each round"
    );
    println!(
        "CPU: µs of the proxy's own processes per request (user + system); IPIs: wake-up interrupts between cores \
         per request, the whole machine; syscalls and switches: the proxy's own system calls and context switches \
         per request, counted by perf in a run of their own; one row per target and round, rounds in order\n"
    );
    println!(
        "| c | round | target | req/s | p50 µs | p99 µs | CPU µs/req | IPIs/req | syscalls/req | switches/req |\n| --- | \
         --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    let mut summary = Vec::new();
    for c in [1u32, 16, 64] {
        let mut row: Vec<Wrk> = targets.iter().map(|_| Wrk::default()).collect();
        let (mut ratios, mut hop_ratios, mut off_ratios) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            let mut this_round = vec![0.0; targets.len()];
            // Each round starts at another target: none always runs first, or right after the same one.
            let order = (0..targets.len()).map(|k| (k + round as usize) % targets.len());
            for i in order {
                let ((name, port, pids), sum) = (&targets[i], &mut row[i]);
                let _ = wrk(*port, c, 1)?; // warm-up: connections, pools
                let mut w = measure(*port, c, seconds, pids)?;
                (w.syscalls, w.switches) = counted(*port, c, pids)?.unzip();
                let cpu = if pids.is_empty() { String::new() } else { format!("{:.0} + {:.0}", w.user_us, w.sys_us) };
                let per = |v: Option<f64>| v.map(|v| format!("{v:.2}")).unwrap_or_default();
                println!(
                    "| {c} | {} | {name} | {:.0} | {:.0} | {:.0} | {cpu} | {:.2} | {} | {} |",
                    round + 1,
                    w.rps,
                    w.p50_us,
                    w.p99_us,
                    w.ipis,
                    per(w.syscalls),
                    per(w.switches)
                );
                let n = rounds as f64;
                sum.rps += w.rps / n;
                sum.p50_us += w.p50_us / n;
                sum.p99_us += w.p99_us / n;
                sum.user_us += w.user_us / n;
                sum.sys_us += w.sys_us / n;
                sum.ipis += w.ipis / n;
                let add = |sum: &mut Option<f64>, v: Option<f64>| {
                    if let Some(v) = v {
                        *sum = Some(sum.unwrap_or(0.0) + v / n);
                    }
                };
                add(&mut sum.syscalls, w.syscalls);
                add(&mut sum.switches, w.switches);
                this_round[i] = w.rps;
            }
            ratios.push(this_round[1] / this_round[i_nginx]);
            hop_ratios.push(this_round[1] / this_round[i_hop]);
            off_ratios.push(this_round[1] / this_round[i_off]);
        }
        summary.push((c, row, Spread::of(&ratios), Spread::of(&hop_ratios), Spread::of(&off_ratios)));
    }
    // Instructions per request stand beside every throughput ratio: deterministic, where req/s swings with the
    // machine's other load.
    drop(floors);
    let instr = super::proxy_instr::counts(instr_requests, false)?;
    let of = |name: &str| instr.iter().find(|r| r.0 == name).map_or(f64::NAN, |r| r.1);
    let (i_ours, i_off_n, i_hop_n, i_relay_n, i_nginx_n) = (
        of("monitor run"),
        of("monitor run (track_requests = false)"),
        of("bare hyper hop"),
        of("byte relay"),
        of("nginx"),
    );
    println!(
        "\ninstructions per request (valgrind --tool=callgrind, {instr_requests} GETs on one connection): monitor \
         {i_ours:.0}, monitor with track_requests = false {i_off_n:.0}, bare hop {i_hop_n:.0}, byte relay {i_relay_n:.0}, \
         nginx {i_nginx_n:.0}"
    );
    println!("\nmeans over {rounds} interleaved round(s):");
    for (c, row, ratio, hop_ratio, off_ratio) in &summary {
        let (direct, ours, hop, relay, nginx) = (&row[0], &row[1], &row[i_hop], &row[i_relay], &row[i_nginx]);
        let added = |w: &Wrk| w.p50_us - direct.p50_us;
        print!(
            "c={c}: monitor/nginx throughput {:.2} ({}; instructions {:.2}x), monitor/bare hop {:.2} ({}; \
             instructions {:.2}x), byte relay/nginx {:.2}; added p50 over direct: monitor {:+.0} µs, bare hop {:+.0} µs, byte relay \
             {:+.0} µs, nginx {:+.0} µs; CPU µs/req (user + sys): monitor {:.0} + {:.0}, bare hop {:.0} + {:.0}, byte \
             relay {:.0} + {:.0}, nginx {:.0} + {:.0}",
            ours.rps / nginx.rps,
            ratio.describe(Some(1.0)),
            i_ours / i_nginx_n,
            ours.rps / hop.rps,
            hop_ratio.describe(None),
            i_ours / i_hop_n,
            relay.rps / nginx.rps,
            added(ours),
            added(hop),
            added(relay),
            added(nginx),
            ours.user_us,
            ours.sys_us,
            hop.user_us,
            hop.sys_us,
            relay.user_us,
            relay.sys_us,
            nginx.user_us,
            nginx.sys_us
        );
        if baseline.is_some() {
            let old = &row[2];
            print!(
                "; baseline build: /nginx {:.2}, {:+.0} µs, CPU {:.0} + {:.0}; new/baseline throughput {:.2}",
                old.rps / nginx.rps,
                added(old),
                old.user_us,
                old.sys_us,
                ours.rps / old.rps
            );
        }
        let off = &row[i_off];
        print!(
            "; memory per request on/off throughput {:.2} ({}; instructions {:.2}x), CPU off {:.0} + {:.0}",
            ours.rps / off.rps,
            off_ratio.describe(Some(0.98)),
            i_ours / i_off_n,
            off.user_us,
            off.sys_us
        );
        print!(
            "; wake-up IPIs per request: monitor {:.2}, bare hop {:.2}, byte relay {:.2}, nginx {:.2}",
            ours.ipis, hop.ipis, relay.ipis, nginx.ipis
        );
        let pair = |w: &Wrk| match w.syscalls.zip(w.switches) {
            Some((s, c)) => format!("{s:.2} / {c:.2}"),
            None => "n/a".into(),
        };
        println!(
            "; syscalls / context switches per request: monitor {}, bare hop {}, byte relay {}, nginx {}",
            pair(ours),
            pair(hop),
            pair(relay),
            pair(nginx)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
