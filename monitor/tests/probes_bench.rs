//! Benchmark, not a test (ignored; run by `cargo xtask bench probes`): wrk against nginx with the probes attached
//! vs detached, interleaved rounds in one run. Reports the throughput ratio and the probes' kernel time per
//! request (BPF run-time statistics over every program invocation, including other processes' syscalls).
//!
//! Knobs (environment): `PROBES_BENCH_ROUNDS` (6), `PROBES_BENCH_SECS` (5), `PROBES_BENCH_CONNS` (32).

mod probes_support;

use probes_support::*;
use std::process::{Command, Stdio};
use std::time::Duration;

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn config(dir: &TempDir, port: u16) -> String {
    let d = dir.path().display();
    format!(
        "daemon off;\nmaster_process on;\nworker_processes 1;\nuser root;\npid {d}/nginx.pid;\n\
         error_log {d}/error.log warn;\nevents {{ worker_connections 1024; }}\n\
         http {{\n access_log off;\n client_body_temp_path {d}/body;\n proxy_temp_path {d}/proxy;\n\
          fastcgi_temp_path {d}/fastcgi;\n uwsgi_temp_path {d}/uwsgi;\n scgi_temp_path {d}/scgi;\n\
          keepalive_requests 1000000;\n\
          server {{\n  listen 127.0.0.1:{port};\n  location = /ok {{ return 200 \"ok\\n\"; }}\n }}\n}}\n"
    )
}

/// One wrk run: requests per second, completed requests, and CPU seconds of wrk (its rusage) and of `pids`.
struct Run {
    rps: f64,
    requests: u64,
    cpu_s: f64,
}

/// CPU seconds (user + system) of a process from /proc/<pid>/stat.
fn cpu_of(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of the file are utime and stime; `after` starts at field 3.
    let ticks: u64 = [11, 12].iter().filter_map(|&i| f.get(i).and_then(|v| v.parse::<u64>().ok())).sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    ticks as f64 / hz
}

/// CPU seconds used by reaped children (wrk) so far.
fn children_cpu() -> f64 {
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: ru is a valid pointer.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

fn wrk(url: &str, secs: u64, conns: u64, pids: &[u32]) -> Run {
    let (c0, p0) = (children_cpu(), pids.iter().map(|&p| cpu_of(p)).sum::<f64>());
    let out = Command::new("wrk")
        .args(["-t1", &format!("-c{conns}"), &format!("-d{secs}s"), "--timeout", "5s", url])
        .stderr(Stdio::null())
        .output();
    let out = out.unwrap_or_else(|e| panic!("wrk: {e}"));
    let cpu_s = children_cpu() - c0 + pids.iter().map(|&p| cpu_of(p)).sum::<f64>() - p0;
    let text = String::from_utf8_lossy(&out.stdout);
    let rps = text
        .lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Requests/sec in wrk output: {text}"));
    let requests = text
        .lines()
        .find_map(|l| l.trim().split_once(" requests in "))
        .and_then(|(n, _)| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no request count in wrk output: {text}"));
    Run { rps, requests, cpu_s }
}

fn sum_stats(s: &[(String, Duration, u64)]) -> (Duration, u64) {
    s.iter().fold((Duration::ZERO, 0), |(t, n), (_, dt, dn)| (t + *dt, n + dn))
}

#[test]
#[ignore = "benchmark: cargo xtask bench probes"]
fn probes_overhead_nginx() {
    let name = "probes_overhead_nginx";
    if !require_root(name) || !require_program(name, "nginx") || !require_program(name, "wrk") {
        return;
    }
    let (rounds, secs, conns) =
        (knob("PROBES_BENCH_ROUNDS", 6), knob("PROBES_BENCH_SECS", 5), knob("PROBES_BENCH_CONNS", 32));
    let dir = TempDir::new("bench");
    let port = free_port();
    let conf = dir.write("nginx.conf", config(&dir, port).as_bytes());
    let server = Server::start(
        Command::new("nginx")
            .arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        port,
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut pids = server.children();
    while pids.is_empty() {
        assert!(std::time::Instant::now() < deadline, "nginx worker did not start");
        std::thread::sleep(Duration::from_millis(50));
        pids = server.children();
    }
    pids.push(server.pid());
    let url = format!("http://127.0.0.1:{port}/ok");

    wrk(&url, 1, conns, &pids); // warm-up
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let order = if r % 2 == 0 { [false, true] } else { [true, false] };
        for attached in order {
            if !attached {
                off.push(wrk(&url, secs, conns, &pids));
                continue;
            }
            let mut probes = load_probes();
            sync(&mut probes, &pids);
            let run = wrk(&url, secs, conns, &pids);
            let counted: u64 = read(&mut probes).values().map(|t| t.requests_total).sum();
            assert!(counted >= run.requests, "counted {counted} < wrk's {}", run.requests);
            on.push(run);
        }
        let (a, b) = (&off[off.len() - 1], &on[on.len() - 1]);
        eprintln!("round {r}: detached {:.0} req/s, attached {:.0} req/s", a.rps, b.rps);
    }

    // One more attached round with the kernel's BPF run-time statistics on, for the per-program split. (They
    // cost two clock reads per program run, so they stay off in the rounds above.)
    let stats_fd = aya::sys::enable_stats(aya::sys::Stats::RunTime).unwrap_or_else(|e| panic!("enable_stats: {e}"));
    let mut probes = load_probes();
    sync(&mut probes, &pids);
    let before = probes.run_stats();
    let run = wrk(&url, secs, conns, &pids);
    let after = probes.run_stats();
    let counted: u64 = read(&mut probes).values().map(|t| t.requests_total).sum::<u64>().max(1);
    drop(probes);
    drop(stats_fd);

    let mean_of = |v: &[Run], f: &dyn Fn(&Run) -> f64| v.iter().map(f).sum::<f64>() / v.len().max(1) as f64;
    let (rps_off, rps_on) = (mean_of(&off, &|r| r.rps), mean_of(&on, &|r| r.rps));
    let cpu_ns = |v: &[Run]| {
        let (cpu, n) = v.iter().fold((0.0, 0u64), |(c, n), r| (c + r.cpu_s, n + r.requests));
        cpu * 1e9 / n.max(1) as f64
    };
    let (cpu_off, cpu_on) = (cpu_ns(&off), cpu_ns(&on));
    let fmt = |v: &[Run]| v.iter().map(|r| format!("{:.0}", r.rps)).collect::<Vec<_>>().join(", ");
    let ratios: Vec<String> = on.iter().zip(&off).map(|(a, b)| format!("{:.3}", a.rps / b.rps)).collect();
    let (t0, n0) = sum_stats(&before);
    let (t1, n1) = sum_stats(&after);
    let bpf_ns = (t1 - t0).as_nanos() as f64;

    println!("PROBES BENCH: nginx 1 worker, wrk -t1 -c{conns} -d{secs}s, {rounds} interleaved rounds");
    println!("| | req/s (mean) | req/s by round | CPU ns per request (nginx + wrk) |");
    println!("| --- | ---: | --- | ---: |");
    println!("| detached | {rps_off:.0} | {} | {cpu_off:.0} |", fmt(&off));
    println!("| attached | {rps_on:.0} | {} | {cpu_on:.0} |", fmt(&on));
    println!("throughput ratio attached/detached: {:.4} (by round: {})", rps_on / rps_off, ratios.join(", "));
    println!("probe cost per request, CPU time (attached - detached): {:.0} ns", cpu_on - cpu_off);
    println!(
        "probe cost per request, BPF run time (stats round, {} req/s): {:.0} ns over {:.2} program runs per request",
        run.rps.round(),
        bpf_ns / counted as f64,
        (n1 - n0) as f64 / counted as f64
    );
    println!("| program | runs per request | ns per run | ns per request |");
    println!("| --- | ---: | ---: | ---: |");
    for ((name, ta, na), (_, tb, nb)) in after.iter().zip(&before) {
        let runs = na - nb;
        if runs == 0 {
            continue;
        }
        let ns = (*ta - *tb).as_nanos() as f64;
        println!(
            "| {name} | {:.2} | {:.0} | {:.0} |",
            runs as f64 / counted as f64,
            ns / runs as f64,
            ns / counted as f64
        );
    }
}
