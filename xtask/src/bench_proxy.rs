//! `cargo xtask bench proxy`: the front door against nginx. Two release `fixture-backend`s (a master and a worker)
//! started by `monitor run` in a v1 test cgroup; the same two behind nginx (`least_conn`, `keepalive`, a temporary
//! config on 127.0.0.1); wrk at c = 1, 16, 64 against the backend directly, `monitor run` and nginx, interleaved
//! in one run. Goal: throughput >= nginx at every c; added p50 over direct <= 25 µs at c = 1.
//! `BENCH_SECONDS` (default 5) sets each wrk run's length. `BENCH_PROXY_BASELINE=/path/to/monitor` adds a second
//! `monitor run` from that binary (an older build, with its own two backends) to the same interleaved rounds, so a
//! change is measured against what it replaces in one run. `BENCH_ROUNDS=N` (default 1) repeats the interleaved
//! rounds; the summary takes the means.

use crate::util::{root, run as sh};
use anyhow::{bail, Context, Result};
use monitor_tests::agent::free_port;
use monitor_tests::{spawn_in_cgroup, CgroupV1, ChildGuard};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PATH: &str = "/r4/CodeSystem/$lookup";

struct Wrk {
    rps: f64,
    p50_us: f64,
    p99_us: f64,
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
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || text.contains("Non-2xx") || text.contains("Socket errors") {
        bail!("wrk against {port} failed or saw errors:\n{text}");
    }
    let field = |prefix: &str| {
        text.lines().find_map(|l| l.trim().strip_prefix(prefix).map(|v| v.trim().to_string())).unwrap_or_default()
    };
    let rps = field("Requests/sec:").parse::<f64>().with_context(|| format!("no Requests/sec in:\n{text}"))?;
    let p50_us = micros(&field("50%")).with_context(|| format!("no 50% in:\n{text}"))?;
    let p99_us = micros(&field("99%")).with_context(|| format!("no 99% in:\n{text}"))?;
    Ok(Wrk { rps, p50_us, p99_us })
}

fn wait_port(port: u16) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if Instant::now() >= deadline {
            bail!("nothing listens on {addr}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn nginx_conf(dir: &Path, listen: u16, a: u16, b: u16) -> String {
    let d = dir.display();
    format!(
        "daemon off;\nworker_processes 2;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
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
    _child: ChildGuard,
}

fn start_monitor(bin: &Path, fixture: &Path, cg: &CgroupV1, dir: &Path, tag: &str, a: u16, b: u16) -> Result<Monitor> {
    let (front, web) = (free_port(), free_port());
    let fixture = fixture.display().to_string();
    let (m0, tx1) = (format!("{tag}-m0"), format!("{tag}-tx1"));
    let config = format!(
        "[group]\ncgroup = {:?}\n[probes]\nenabled = false\n[web]\nlisten = \"127.0.0.1:{web}\"\n\
         [proxy]\nlisten = \"127.0.0.1:{front}\"\n\
         [[process]]\nname = {m0:?}\nrole = \"master\"\ncommand = [{fixture:?}, \"--name\", {m0:?}, \"--port\", \"{a}\"]\nport = {a}\n\
         [[process]]\nname = {tx1:?}\nrole = \"worker\"\ncommand = [{fixture:?}, \"--name\", {tx1:?}, \"--port\", \"{b}\"]\nport = {b}\n",
        cg.path().display().to_string()
    );
    let file = dir.join(format!("{tag}.toml"));
    std::fs::write(&file, config)?;
    let child = ChildGuard::spawn(
        Command::new(bin).args(["run", "--config"]).arg(&file).env("MONITOR_LOG", "warn").stdin(Stdio::null()),
    );
    for p in [a, b, front] {
        wait_port(p)?;
    }
    Ok(Monitor { front, _child: child })
}

pub fn run() -> Result<()> {
    if let Some(reason) = CgroupV1::unavailable_reason() {
        bail!("the proxy benchmark runs monitor run in a v1 memory cgroup: {reason}");
    }
    let seconds: u64 = std::env::var("BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    let rounds: u32 = std::env::var("BENCH_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(1).max(1);
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
    let bin = root.join("target/release");
    let cg = CgroupV1::create("bench-proxy", Some(1 << 30));
    let dir = std::env::temp_dir().join(format!("monitor-bench-proxy-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (a, b, ngx) = (free_port(), free_port(), free_port());
    let fixture = bin.join("fixture-backend");
    let monitor = start_monitor(&bin.join("monitor"), &fixture, &cg, &dir, "run", a, b)?;
    let baseline = match std::env::var_os("BENCH_PROXY_BASELINE") {
        Some(old) => {
            let (c, d) = (free_port(), free_port());
            Some(start_monitor(Path::new(&old), &fixture, &cg, &dir, "baseline", c, d)?)
        }
        None => None,
    };
    std::fs::write(dir.join("nginx.conf"), nginx_conf(&dir, ngx, a, b))?;
    // nginx runs inside the test cgroup too, so its workers go with the group whatever happens.
    let _nginx = spawn_in_cgroup(
        Command::new("nginx").arg("-p").arg(&dir).arg("-c").arg(dir.join("nginx.conf")).stderr(Stdio::null()),
        cg.path(),
    );
    wait_port(ngx)?;
    let mut targets = vec![("direct (one backend)", a), ("monitor run", monitor.front)];
    if let Some(old) = &baseline {
        targets.push(("monitor run (baseline build)", old.front));
    }
    targets.push(("nginx", ngx));
    println!("wrk -t1 -cC -d{seconds}s --latency http://127.0.0.1:PORT{PATH}; two fixture-backends (release)\n");
    println!("| c | target | req/s | p50 µs | p99 µs |\n| --- | --- | --- | --- | --- |");
    let mut summary = Vec::new();
    for c in [1u32, 16, 64] {
        let mut row: Vec<Wrk> = targets.iter().map(|_| Wrk { rps: 0.0, p50_us: 0.0, p99_us: 0.0 }).collect();
        for _ in 0..rounds {
            for (&(name, port), sum) in targets.iter().zip(row.iter_mut()) {
                let _ = wrk(port, c, 1)?; // warm-up: connections, pools
                let w = wrk(port, c, seconds)?;
                println!("| {c} | {name} | {:.0} | {:.0} | {:.0} |", w.rps, w.p50_us, w.p99_us);
                sum.rps += w.rps / rounds as f64;
                sum.p50_us += w.p50_us / rounds as f64;
                sum.p99_us += w.p99_us / rounds as f64;
            }
        }
        summary.push((c, row));
    }
    println!("\nmeans over {rounds} interleaved round(s):");
    for (c, row) in &summary {
        let (direct, ours, nginx) = (&row[0], &row[1], &row[row.len() - 1]);
        print!(
            "c={c}: monitor/nginx throughput {:.2} (goal >= 1); added p50 over direct: monitor {:+.0} µs, nginx {:+.0} µs",
            ours.rps / nginx.rps,
            ours.p50_us - direct.p50_us,
            nginx.p50_us - direct.p50_us
        );
        if row.len() == 4 {
            let old = &row[2];
            print!(
                "; baseline build: /nginx {:.2}, {:+.0} µs; new/baseline throughput {:.2}",
                old.rps / nginx.rps,
                old.p50_us - direct.p50_us,
                ours.rps / old.rps
            );
        }
        println!();
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
