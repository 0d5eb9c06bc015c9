//! `cargo bench -p monitor --bench probes_overhead` (as root; `cargo xtask bench probes` runs it): wrk against nginx
//! detached and with each set of hooks (per-syscall tracepoints, raw `sys_exit`, socket tracepoints), and with the
//! socket tracepoints but nginx untraced (the floor of those hooks: their programs run and count nothing),
//! interleaved rounds in one run.
//! One more mode attaches two empty `cgroup_skb` programs to nginx's cgroup2 group: the floor of the other place
//! where a program could see the requests (each packet of the group's sockets, from kernel memory), which the
//! probes do not use.
//! Reports the throughput ratios, the CPU cost per request, and the probes' kernel time per request (BPF run-time
//! statistics over every program invocation, including other processes' syscalls).
//!
//! Knobs (environment): `PROBES_BENCH_ROUNDS` (6), `PROBES_BENCH_SECS` (5), `PROBES_BENCH_CONNS` (32),
//! `PROBES_BENCH_ONLY_STATS=1` (only the per-program split of the BPF run time).

// The probes tests' loading and reading helpers; the benchmark uses only part of them.
#[allow(dead_code)]
#[path = "../tests/probes/counts.rs"]
mod counts;

use counts::{load_probes_with, read, sync};
use monitor::sources::probes::Hooks;
use monitor_tests::agent::free_port;
use monitor_tests::cgroup::CgroupV1;
use monitor_tests::servers::start_nginx_in;
use monitor_tests::{in_ci, require_program, require_root, TempDir};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
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

/// Two empty `cgroup_skb` programs (`r0 = 1; exit`: every packet passes, nothing is looked at), one on ingress and
/// one on egress of a cgroup2 group, each attached by a BPF link: what any program there costs by running at all.
/// Loaded with the bare `bpf(2)` syscall, as they need no object. Closing the links (drop) detaches them.
struct EmptyCgroupSkb {
    _fds: Vec<OwnedFd>,
}

/// `struct bpf_attr` for `BPF_PROG_LOAD`, up to `expected_attach_type`, zero-padded to the size the kernel reads.
#[repr(C)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
    _rest: [u8; 56],
}

/// `struct bpf_attr` for `BPF_LINK_CREATE`: program, target cgroup, attach type, flags.
#[repr(C)]
struct LinkCreate {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    _rest: [u8; 112],
}

impl EmptyCgroupSkb {
    fn attach(group: &Path) -> std::io::Result<EmptyCgroupSkb> {
        const BPF_PROG_LOAD: libc::c_long = 5;
        const BPF_LINK_CREATE: libc::c_long = 28;
        const BPF_PROG_TYPE_CGROUP_SKB: u32 = 8;
        // mov r0, 1 (BPF_ALU64 | BPF_MOV | BPF_K, imm 1); exit (BPF_JMP | BPF_EXIT).
        let insns: [u64; 2] = [0xb7 | (1 << 32), 0x95];
        let cgroup = std::fs::File::open(group)?;
        let sys = |cmd: libc::c_long, attr: *const libc::c_void, size: usize| -> std::io::Result<OwnedFd> {
            // SAFETY: `attr` points to a live, fully initialised attribute of `size` bytes for `cmd`; the kernel
            // returns a new fd we then own.
            let fd = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr, size) };
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: fd is a fresh descriptor returned to us.
            Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
        };
        let mut fds = Vec::new();
        // BPF_CGROUP_INET_INGRESS = 0, BPF_CGROUP_INET_EGRESS = 1.
        for (attach_type, name) in [(0u32, *b"empty_ingress\0\0\0"), (1, *b"empty_egress\0\0\0\0")] {
            let load = ProgLoad {
                prog_type: BPF_PROG_TYPE_CGROUP_SKB,
                insn_cnt: insns.len() as u32,
                insns: insns.as_ptr() as u64,
                license: c"GPL".as_ptr() as u64,
                log_level: 0,
                log_size: 0,
                log_buf: 0,
                kern_version: 0,
                prog_flags: 0,
                prog_name: name,
                prog_ifindex: 0,
                expected_attach_type: attach_type,
                _rest: [0; 56],
            };
            let prog = sys(BPF_PROG_LOAD, (&load as *const ProgLoad).cast(), std::mem::size_of::<ProgLoad>())?;
            let link = LinkCreate {
                prog_fd: prog.as_raw_fd() as u32,
                target_fd: cgroup.as_raw_fd() as u32,
                attach_type,
                flags: 0,
                _rest: [0; 112],
            };
            let link = sys(BPF_LINK_CREATE, (&link as *const LinkCreate).cast(), std::mem::size_of::<LinkCreate>())?;
            fds.extend([link, prog]);
        }
        Ok(EmptyCgroupSkb { _fds: fds })
    }
}

/// BPF run-time statistics (name, run time, runs) of the loaded programs named `empty_*` (ours: [`EmptyCgroupSkb`]).
fn empty_stats() -> Vec<(String, Duration, u64)> {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter_map(|i| {
            let name = i.name_as_str()?.to_string();
            name.starts_with("empty_").then(|| (name, i.run_time(), i.run_count()))
        })
        .collect()
}

/// What a round's run has attached.
#[derive(Debug, Clone, Copy)]
enum Mode {
    Detached,
    /// A set of hooks; nginx traced or not.
    Probes(Hooks, bool),
    /// [`EmptyCgroupSkb`] on nginx's group.
    EmptyCgroupSkb,
}

fn sum_stats(s: &[(String, Duration, u64)]) -> (Duration, u64) {
    s.iter().fold((Duration::ZERO, 0), |(t, n), (_, dt, dn)| (t + *dt, n + dn))
}

fn main() {
    let name = "probes_overhead_nginx";
    if !require_root(name) || !require_program(name, "nginx") || !require_program(name, "wrk") {
        return;
    }
    let (rounds, secs, conns) =
        (knob("PROBES_BENCH_ROUNDS", 6), knob("PROBES_BENCH_SECS", 5), knob("PROBES_BENCH_CONNS", 32));
    let dir = TempDir::new("bench");
    let port = free_port();
    // nginx runs in a cgroup2 group of its own (no controllers: it changes nothing for the other modes), so the
    // empty cgroup_skb programs see its sockets and nobody else's.
    let mount = monitor::sources::cgroup::Mounts::read().ok().and_then(|m| m.v2);
    if mount.is_none() && in_ci() {
        panic!("{name}: no cgroup2 hierarchy mounted");
    }
    let group = mount.map(|m| CgroupV1::create_in(&m, "probes-bench"));
    let (server, mut pids) = start_nginx_in(&dir, &config(&dir, port), port, 1, group.as_ref().map(|g| g.path()));
    pids.push(server.pid());
    let url = format!("http://127.0.0.1:{port}/ok");

    // Warm-up.
    wrk(&url, 1, conns, &pids);

    // `PROBES_BENCH_ONLY_STATS=1`: only the per-program BPF run-time split below (a quick look while tuning).
    let only_stats = knob("PROBES_BENCH_ONLY_STATS", 0) == 1;

    // Every mode per round, in an order that rotates so each mode runs at each position equally often.
    // The last mode loads the socket set with nginx untraced: the floor of those hooks, what their programs cost
    // by running at all (on wrk's and nginx's socket operations) before they count anything.
    let mut modes = vec![
        (Mode::Detached, "detached"),
        (Mode::Probes(Hooks::Tracepoints, true), "tracepoints"),
        (Mode::Probes(Hooks::RawSysExit, true), "raw sys_exit"),
        (Mode::Probes(Hooks::Sock, true), "socket"),
        (Mode::Probes(Hooks::Sock, false), "socket, nginx untraced"),
    ];
    match &group {
        Some(_) => modes.push((Mode::EmptyCgroupSkb, "empty cgroup_skb programs")),
        None => eprintln!("no cgroup2 hierarchy mounted: the empty cgroup_skb mode is left out"),
    }
    let n = modes.len();
    let mut runs: Vec<Vec<Run>> = (0..n).map(|_| Vec::new()).collect();
    // Cost for everyone else: syscalls of an untraced process (this one), per mode, best of three.
    for r in 0..if only_stats { 0 } else { 2 } {
        for &(mode, name) in &modes[..4] {
            let probes = match mode {
                Mode::Probes(hooks, _) => Some(load_probes_with(hooks)),
                _ => None,
            };
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
            let run = match modes[m].0 {
                Mode::Detached => wrk(&url, secs, conns, &pids),
                Mode::EmptyCgroupSkb => {
                    let g = group.as_ref().map(|g| g.path()).unwrap_or_else(|| panic!("no group"));
                    let programs =
                        EmptyCgroupSkb::attach(g).unwrap_or_else(|e| panic!("empty cgroup_skb programs: {e}"));
                    let run = wrk(&url, secs, conns, &pids);
                    drop(programs);
                    run
                }
                Mode::Probes(hooks, traced) => {
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
            (0..n).map(|m| format!("{} {:.0} req/s", modes[m].1, runs[m].last().map_or(0.0, |r| r.rps))).collect();
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
                modes[m].1,
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
            println!("{} by round (ratio/ns): {}", modes[m].1, per.join(", "));
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
    // The empty cgroup_skb programs, statistics on: they must have run (on every packet of nginx's sockets).
    if let Some(g) = &group {
        let programs = EmptyCgroupSkb::attach(g.path()).unwrap_or_else(|e| panic!("empty cgroup_skb programs: {e}"));
        let before = empty_stats();
        let run = wrk(&url, secs, conns, &pids);
        let after = empty_stats();
        drop(programs);
        let ((t0, n0), (t1, n1)) = (sum_stats(&before), sum_stats(&after));
        let runs = n1 - n0;
        assert!(runs >= run.requests, "the empty cgroup_skb programs ran {runs} times for {} requests", run.requests);
        let requests = run.requests.max(1) as f64;
        println!(
            "Empty cgroup_skb programs: BPF run time (stats run, {} req/s): {:.0} ns per request over {:.2} program \
             runs per request ({:.0} ns per run)",
            run.rps.round(),
            (t1 - t0).as_nanos() as f64 / requests,
            runs as f64 / requests,
            (t1 - t0).as_nanos() as f64 / runs.max(1) as f64
        );
    }
    drop(stats_fd);
    drop(server);
    drop(group);
}
