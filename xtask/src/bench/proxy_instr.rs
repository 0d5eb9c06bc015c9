//! `cargo xtask bench proxy-instructions`: the user-space instructions each proxy spends per request, counted by
//! valgrind's callgrind, so a figure that other load on the machine cannot move (wrk's req/s and CPU time on these
//! two shared cores swing by tens of percent between runs; an instruction count is the same to within a fraction of
//! a percent). It is the cost that throughput at high concurrency is made of, less the kernel's share (system time
//! is the same for every proxy here: `cargo xtask bench proxy`).
//!
//! Each target runs under `valgrind --tool=callgrind` in front of two release fixture-backends (not under valgrind):
//! `monitor run` (its front door on one thread, `[proxy] threads = 1`), the bare hyper hop, the byte relay, and nginx
//! (`master_process off`: one process, its proxying as in `cargo xtask bench proxy`). curl sends a warm-up of
//! [`WARMUP`] requests, the counters are zeroed (`callgrind_control --zero`), curl sends `BENCH_REQUESTS` (default
//! 2000) GETs of the proxy benchmark's path on one keep-alive connection, and the counters are dumped: instructions
//! per request are the dump's total over the requests. For `monitor run` only the front-door thread is counted (the
//! sampler, API and launcher threads do their own work on their own clocks); for the others every thread.
//! `BENCH_PROXY_BASELINE=/path/to/monitor` adds a second `monitor run` from that binary (an older build): a change
//! to the request path is then measured against what it replaces. The same build with `[proxy] track_requests =
//! false` is always measured too: what keeping each request in flight costs. `BENCH_PROXY_KEEP=1` keeps the dumps (one
//! folder per target, printed) for `callgrind_annotate`. Two instances of one build differ by up to 0.3%
//! (`BENCH_PROXY_BASELINE` naming the same binary shows it), so only a larger difference is the build's. Needs
//! root (a v1 test cgroup), valgrind, curl and nginx.

use super::proxy::{monitor_config, nginx_conf, release_bins, wait_port_for, PATH};
use anyhow::{bail, Context, Result};
use monitor_tests::agent::free_port;
use monitor_tests::{on_path, spawn_in_cgroup, CgroupV1, ChildGuard};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Requests sent before the counters are zeroed: connections, pools and lazy state are made by then.
const WARMUP: u32 = 200;
/// A function only the front door's threads run (`monitor run`'s other threads are not counted).
const FRONT_DOOR: &str = "monitor::front::proxy::server::Thread::run";

/// One proxy under callgrind.
struct Target {
    name: &'static str,
    port: u16,
    dir: PathBuf,
    child: ChildGuard,
    /// Count only the threads whose profile names this function.
    thread: Option<&'static str>,
}

/// `valgrind --tool=callgrind` running `program`, its counts in `dir` (one file per thread).
fn callgrind(dir: &Path, program: &Path) -> Command {
    let mut c = Command::new("valgrind");
    c.args(["--tool=callgrind", "--separate-threads=yes", "--dump-instr=no"])
        .arg(format!("--callgrind-out-file={}/callgrind.out", dir.display()))
        .arg(program)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

/// `n` GETs on one connection with curl; all must be 200.
fn curl(port: u16, n: u32) -> Result<()> {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}\\n", "--max-time", "600"])
        .arg(format!("http://127.0.0.1:{port}{PATH}?i=[1-{n}]"))
        .output()
        .context("running curl")?;
    let codes = String::from_utf8_lossy(&out.stdout);
    let ok = codes.lines().filter(|l| *l == "200").count();
    if ok != n as usize {
        bail!("curl against {port}: {ok} of {n} answers were 200 ({})", codes.lines().last().unwrap_or("none"));
    }
    Ok(())
}

fn control(pid: u32, what: &str) -> Result<()> {
    let out = Command::new("callgrind_control").arg(what).arg(pid.to_string()).output()?;
    if !out.status.success() {
        bail!("callgrind_control {what} {pid}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// The instructions of the first dump (`callgrind.out.1-NN`, one file per thread) in `dir`, of the threads that run
/// `thread` when given.
fn dumped(dir: &Path, thread: Option<&str>) -> Result<u64> {
    let mut total = 0;
    let mut files = 0;
    for e in std::fs::read_dir(dir)? {
        let path = e?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else { continue };
        if !name.starts_with("callgrind.out.1-") && name != "callgrind.out.1" {
            continue;
        }
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        if thread.is_some_and(|f| !text.contains(f)) {
            continue;
        }
        let summary = text
            .lines()
            .find_map(|l| l.strip_prefix("summary:").or_else(|| l.strip_prefix("totals:")))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .with_context(|| format!("no summary in {}", path.display()))?;
        total += summary;
        files += 1;
    }
    if files == 0 {
        bail!("callgrind wrote no dump in {}", dir.display());
    }
    Ok(total)
}

fn measure(t: &Target, n: u32) -> Result<f64> {
    curl(t.port, WARMUP)?;
    control(t.child.pid(), "--zero")?;
    curl(t.port, n)?;
    control(t.child.pid(), "--dump")?;
    // The dump is written by the program's own thread once it sees the request.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match dumped(&t.dir, t.thread) {
            Ok(i) => return Ok(i as f64 / f64::from(n)),
            Err(e) if std::time::Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

pub fn run() -> Result<()> {
    let n: u32 = std::env::var("BENCH_REQUESTS").ok().and_then(|s| s.parse().ok()).unwrap_or(2000).max(1);
    let keep = std::env::var_os("BENCH_PROXY_KEEP").is_some();
    println!(
        "user-space instructions per request (valgrind --tool=callgrind), curl: {n} GETs of {PATH} on one \
         connection after {WARMUP} warm-up; two fixture-backends (release)\n"
    );
    let rows = counts(n, keep)?;
    let of = |name: &str| rows.iter().find(|r| r.0 == name).map_or(f64::NAN, |r| r.1);
    let (nginx, hop) = (of("nginx"), of("bare hyper hop"));
    println!("| target | instructions per request | / nginx | / bare hyper hop |\n| --- | ---: | ---: | ---: |");
    for (name, per) in &rows {
        println!("| {name} | {per:.0} | {:.2} | {:.2} |", per / nginx, per / hop);
    }
    Ok(())
}

/// Each target's instructions per request over `n` GETs (with `BENCH_PROXY_BASELINE`, the baseline build's too);
/// `keep`: the dumps stay, and their folder is printed.
pub(super) fn counts(n: u32, keep: bool) -> Result<Vec<(&'static str, f64)>> {
    if let Some(reason) = CgroupV1::unavailable_reason() {
        bail!("the proxy instruction benchmark runs its processes in a v1 memory cgroup: {reason}");
    }
    for tool in ["valgrind", "callgrind_control", "curl", "nginx"] {
        if !on_path(tool) {
            bail!("{tool} is needed: apt-get install valgrind curl nginx");
        }
    }
    let bin = release_bins()?;
    let fixture = bin.join("fixture-backend");
    let cg = CgroupV1::create("bench-proxy-instr", Some(1 << 30));
    let base = std::env::temp_dir().join(format!("monitor-bench-proxy-instr-{}", std::process::id()));
    let sub = |name: &str| -> Result<PathBuf> {
        let d = base.join(name);
        std::fs::create_dir_all(&d)?;
        Ok(d)
    };
    // Two backends for the hop, the relay and nginx; monitor run starts its own two.
    let (a, b) = (free_port(), free_port());
    let _backends: Vec<ChildGuard> = [("m0", a), ("tx1", b)]
        .iter()
        .map(|(name, port)| {
            spawn_in_cgroup(
                Command::new(&fixture).args(["--name", name, "--port", &port.to_string()]).stdin(Stdio::null()),
                cg.path(),
            )
        })
        .collect();
    let mut targets = Vec::new();

    // The same names and paths of the same length for both builds, so nothing but the build differs.
    let mut monitors = vec![("monitor run", "run-new", bin.join("monitor"), "threads = 1\n")];
    if let Some(old) = std::env::var_os("BENCH_PROXY_BASELINE") {
        monitors.push(("monitor run (baseline build)", "run-old", PathBuf::from(old), "threads = 1\n"));
    }
    // What keeping each request in flight (for the victim's requests and memory per request) costs the request.
    let off = "threads = 1\ntrack_requests = false\n";
    monitors.push(("monitor run (track_requests = false)", "run-off", bin.join("monitor"), off));
    for (name, tag, program, lines) in monitors {
        let (dir, front, web, c, d) = (sub(tag)?, free_port(), free_port(), free_port(), free_port());
        let config = monitor_config(&cg, &fixture, (web, front), lines, [("m0", c), ("tx1", d)]);
        std::fs::write(dir.join("monitor.toml"), config)?;
        let child = spawn_in_cgroup(
            callgrind(&dir, &program)
                .args(["run", "--config"])
                .arg(dir.join("monitor.toml"))
                .env("MONITOR_LOG", "warn"),
            cg.path(),
        );
        targets.push(Target { name, port: front, dir, child, thread: Some(FRONT_DOOR) });
    }

    let upstreams = ["--upstream".to_string(), a.to_string(), "--upstream".to_string(), b.to_string()];
    for (name, program) in [("bare hyper hop", "bare-hop"), ("byte relay", "byte-relay")] {
        let (dir, port) = (sub(program)?, free_port());
        let child = spawn_in_cgroup(
            callgrind(&dir, &bin.join(program)).args(["--port", &port.to_string()]).args(&upstreams),
            cg.path(),
        );
        targets.push(Target { name, port, dir, child, thread: None });
    }

    let (dir, port) = (sub("nginx")?, free_port());
    std::fs::write(dir.join("nginx.conf"), nginx_conf(&dir, port, a, b, "master_process off;\nworker_processes 1;"))?;
    let child = spawn_in_cgroup(
        callgrind(&dir, Path::new("nginx")).arg("-p").arg(&dir).arg("-c").arg(dir.join("nginx.conf")),
        cg.path(),
    );
    targets.push(Target { name: "nginx", port, dir, child, thread: None });

    for port in [a, b].into_iter().chain(targets.iter().map(|t| t.port)) {
        // Programs start slowly under valgrind.
        wait_port_for(port, Duration::from_secs(120))?;
    }
    let mut rows = Vec::new();
    for t in &targets {
        let per = measure(t, n).with_context(|| t.name)?;
        rows.push((t.name, per));
    }
    for mut t in targets {
        // SIGTERM first: monitor run drains and stops its processes.
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(t.child.pid() as i32, libc::SIGTERM) };
        if t.child.wait_timeout(Duration::from_secs(60)).is_none() {
            t.child.kill();
        }
    }
    if keep {
        println!("- the dumps are kept in {} (callgrind_annotate <folder>/callgrind.out.*)", base.display());
    } else {
        let _ = std::fs::remove_dir_all(&base);
    }
    Ok(rows)
}
