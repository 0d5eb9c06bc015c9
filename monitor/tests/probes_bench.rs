//! Benchmark, not a test (ignored; run by `cargo xtask bench probes`): wrk against nginx detached and with each
//! set of hooks (per-syscall tracepoints, raw `sys_exit`, socket tracepoints), and with the socket tracepoints but
//! nginx untraced (the floor of those hooks: their programs run and count nothing), interleaved rounds in one run.
//! Reports the throughput ratios, the CPU cost per request, and the probes' kernel time per request (BPF run-time
//! statistics over every program invocation, including other processes' syscalls).
//!
//! Knobs (environment): `PROBES_BENCH_ROUNDS` (6), `PROBES_BENCH_SECS` (5), `PROBES_BENCH_CONNS` (32),
//! `PROBES_BENCH_ONLY_STATS=1` (only the per-program split of the BPF run time).

mod probes_support;

use monitor::probes::Hooks;
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

/// Nanoseconds per syscall of this (untraced) process: `getppid` (hooked by neither set's filter-passing
/// path, but by every raw `sys_exit` run) and a 1-byte `write` to /dev/null (a hooked syscall number).
fn untraced_syscall_ns() -> (f64, f64) {
    const N: u32 = 300_000;
    let devnull =
        std::fs::OpenOptions::new().write(true).open("/dev/null").unwrap_or_else(|e| panic!("/dev/null: {e}"));
    let fd = std::os::fd::AsRawFd::as_raw_fd(&devnull);
    let time = |f: &dyn Fn()| {
        // Best of three, against other jobs on the machine.
        (0..3)
            .map(|_| {
                let t = std::time::Instant::now();
                for _ in 0..N {
                    f();
                }
                t.elapsed().as_nanos() as f64 / N as f64
            })
            .fold(f64::MAX, f64::min)
    };
    // SAFETY: plain syscalls on our own valid fd and a valid one-byte buffer.
    let getppid = time(&|| unsafe {
        libc::getppid();
    });
    // SAFETY: as above.
    let write = time(&|| unsafe {
        libc::write(fd, b"x".as_ptr().cast(), 1);
    });
    (getppid, write)
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
    let (server, mut pids) = start_nginx(&dir, &config(&dir, port), port, 1);
    pids.push(server.pid());
    let url = format!("http://127.0.0.1:{port}/ok");

    // Warm-up.
    wrk(&url, 1, conns, &pids);

    // `PROBES_BENCH_ONLY_STATS=1`: only the per-program BPF run-time split below (a quick look while tuning).
    let only_stats = knob("PROBES_BENCH_ONLY_STATS", 0) == 1;

    // Every mode per round, in an order that rotates so each mode runs at each position equally often.
    // The last mode loads the socket set with nginx untraced: the floor of those hooks, what their programs cost
    // by running at all (on wrk's and nginx's socket operations) before they count anything.
    let modes: [(Option<Hooks>, bool, &str); 5] = [
        (None, false, "detached"),
        (Some(Hooks::Tracepoints), true, "tracepoints"),
        (Some(Hooks::RawSysExit), true, "raw sys_exit"),
        (Some(Hooks::Sock), true, "socket"),
        (Some(Hooks::Sock), false, "socket, nginx untraced"),
    ];
    let n = modes.len();
    let mut runs: Vec<Vec<Run>> = (0..n).map(|_| Vec::new()).collect();
    // Cost for everyone else: syscalls of an untraced process (this one), per mode, best of three.
    for r in 0..if only_stats { 0 } else { 2 } {
        for (hooks, _, name) in modes.into_iter().take(4) {
            let probes = hooks.map(load_probes_with);
            let (getppid, write) = untraced_syscall_ns();
            drop(probes);
            println!(
                "untraced syscalls, {name} (pass {r}): getppid {getppid:.0} ns, write(/dev/null, 1) {write:.0} ns"
            );
        }
    }
    for r in 0..if only_stats { 0 } else { rounds as usize } {
        for k in 0..n {
            let m = (r + k) % n;
            let run = match modes[m] {
                (None, ..) => wrk(&url, secs, conns, &pids),
                (Some(hooks), traced, _) => {
                    let mut probes = load_probes_with(hooks);
                    if traced {
                        sync(&mut probes, &pids);
                    }
                    let run = wrk(&url, secs, conns, &pids);
                    let counted: u64 = read(&mut probes).values().map(|t| t.requests_total).sum();
                    if traced {
                        assert!(counted >= run.requests, "{hooks:?}: counted {counted} < wrk's {}", run.requests);
                    } else {
                        assert_eq!(counted, 0, "{hooks:?} with nginx untraced counted requests");
                    }
                    run
                }
            };
            runs[m].push(run);
        }
        let last: Vec<String> =
            (0..n).map(|m| format!("{} {:.0} req/s", modes[m].2, runs[m].last().map_or(0.0, |r| r.rps))).collect();
        eprintln!("round {r}: {}", last.join(", "));
    }

    if !only_stats {
        let mean_of = |v: &[Run]| v.iter().map(|r| r.rps).sum::<f64>() / v.len().max(1) as f64;
        let cpu_ns = |v: &[Run]| {
            let (cpu, n) = v.iter().fold((0.0, 0u64), |(c, n), r| (c + r.cpu_s, n + r.requests));
            cpu * 1e9 / n.max(1) as f64
        };
        let fmt = |v: &[Run]| v.iter().map(|r| format!("{:.0}", r.rps)).collect::<Vec<_>>().join(", ");
        let (rps_off, cpu_off) = (mean_of(&runs[0]), cpu_ns(&runs[0]));
        println!(
            "PROBES BENCH: nginx 1 worker, wrk -t1 -c{conns} -d{secs}s, {rounds} rounds of {n} modes, order rotating"
        );
        // Each round's run next to the same round's detached run: ratio and cost per round, and their medians (a
        // burst of other load on the machine moves a mean, hardly a median).
        let ns = |r: &Run| r.cpu_s * 1e9 / r.requests.max(1) as f64;
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            match v.len() {
                0 => f64::NAN,
                l if l % 2 == 1 => v[l / 2],
                l => (v[l / 2 - 1] + v[l / 2]) / 2.0,
            }
        };
        println!(
            "| | req/s (mean) | req/s by round | CPU ns per request (nginx + wrk) | ratio of means | median ratio | \
             cost of means | median cost |"
        );
        println!("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |");
        println!("| detached | {rps_off:.0} | {} | {cpu_off:.0} | 1 | 1 | 0 | 0 |", fmt(&runs[0]));
        for m in 1..n {
            let (rps, cpu) = (mean_of(&runs[m]), cpu_ns(&runs[m]));
            let ratios = runs[m].iter().zip(&runs[0]).map(|(a, b)| a.rps / b.rps).collect();
            let costs = runs[m].iter().zip(&runs[0]).map(|(a, b)| ns(a) - ns(b)).collect();
            println!(
                "| {} | {rps:.0} | {} | {cpu:.0} | {:.3} | {:.3} | {:.0} ns | {:.0} ns |",
                modes[m].2,
                fmt(&runs[m]),
                rps / rps_off,
                median(ratios),
                cpu - cpu_off,
                median(costs)
            );
        }
        // Round by round (each next to its own detached run): throughput ratio and CPU cost.
        for m in 1..n {
            let per: Vec<String> = runs[m]
                .iter()
                .zip(&runs[0])
                .map(|(a, b)| format!("{:.3}/{:.0}", a.rps / b.rps, ns(a) - ns(b)))
                .collect();
            println!("{} by round (ratio/ns): {}", modes[m].2, per.join(", "));
        }
    }

    // One more attached run per set with the kernel's BPF run-time statistics on, for the per-program split.
    // (They cost two clock reads per program run, so they stay off in the rounds above.) The last run leaves nginx
    // untraced: what the socket programs cost the socket operations of every other process (here wrk's and
    // nginx's, per request).
    let stats_fd = aya::sys::enable_stats(aya::sys::Stats::RunTime).unwrap_or_else(|e| panic!("enable_stats: {e}"));
    let sets = [(Hooks::Tracepoints, true), (Hooks::RawSysExit, true), (Hooks::Sock, true), (Hooks::Sock, false)];
    for (hooks, traced) in sets {
        let mut probes = load_probes_with(hooks);
        if traced {
            sync(&mut probes, &pids);
        }
        let before = probes.run_stats();
        let run = wrk(&url, secs, conns, &pids);
        let after = probes.run_stats();
        let counted: u64 =
            if traced { read(&mut probes).values().map(|t| t.requests_total).sum::<u64>() } else { run.requests };
        let counted = counted.max(1);
        drop(probes);
        let (t0, n0) = sum_stats(&before);
        let (t1, n1) = sum_stats(&after);
        let bpf_ns = (t1 - t0).as_nanos() as f64;
        let what = if traced { "" } else { ", nginx not traced" };
        println!(
            "{hooks:?}{what}: BPF run time (stats run, {} req/s): {:.0} ns per request over {:.2} program runs per request",
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
    drop(stats_fd);
}
