//! `cargo xtask demo`: the whole system on this host. `monitor run` (agent + launcher + front door) over a master and
//! two workers of the fixture backend, in a limited memory cgroup it creates (v1, or v2 on a unified-only host); a
//! small load through the front door; the group pushed past refuse_at (85%: new requests shed with 503) and abort_at
//! (92%: the largest process's in-flight request cancelled) and back; two more `monitor run`s on 127.0.0.2 and
//! 127.0.0.3 as a cluster (a cache of one node used through the other, a node leaving); then SIGTERM, a drain, exit
//! 0, and a check that nothing is left. Ctrl-C at any point drains and cleans up; a watchdog that outlives xtask
//! cleans up if xtask is killed.

mod cluster;
mod load;
mod system;

use crate::util::{is_root, root, run as sh};
use anyhow::{bail, Context, Result};
use load::Load;
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(5);
use system::{group_parent, interrupted, pause, Spec, System, MIB};

#[derive(clap::Args)]
pub struct Args {
    /// Memory limit of the demo group, in MiB (at least 256).
    #[arg(long, default_value_t = 512)]
    limit_mib: u64,
    /// Seconds of normal load before the group is pushed over the lines.
    #[arg(long, default_value_t = 8)]
    load_s: u64,
    /// Before the final SIGTERM, leave the system running under a light load for this many seconds (Ctrl-C ends
    /// it sooner), so the home page can be opened.
    #[arg(long, value_name = "SECONDS")]
    hold: Option<u64>,
    /// Like --hold, until Ctrl-C.
    #[arg(long, conflicts_with = "hold")]
    keep: bool,
}

pub fn run(args: Args) -> Result<()> {
    if !is_root() {
        bail!("demo needs root (it creates a memory cgroup): run it as root");
    }
    let (parent, version) = group_parent().map_err(|e| anyhow::anyhow!("demo needs a memory cgroup: {e}"))?;
    if args.limit_mib < 256 {
        bail!("--limit-mib {}: at least 256", args.limit_mib);
    }
    let began = Instant::now();
    let root = root();
    // The whole product, the kernel's request counts included: the eBPF toolchain first, and a build that fails
    // rather than leave the object out.
    crate::setup::run().map_err(|e| e.context("the demo counts requests with eBPF: installing its toolchain"))?;
    sh(Command::new("cargo").current_dir(&root).env("MONITOR_EBPF_REQUIRED", "1").args([
        "build",
        "-p",
        "monitor",
        "-p",
        "monitor-tests",
        "--bins",
    ]))?;
    system::catch_signals();
    let bin = crate::util::target_dir().join("debug");
    let mut sys = System::start(&bin, parent, args.limit_mib, Spec::main())?;
    banner(&sys, version);
    let played = play(&sys, &args).and_then(|()| {
        step("6. two hosts as one cluster: nodes a and b, each a monitor run over a master and a worker");
        cluster::play(&bin, parent)
    });
    match &played {
        Err(_) if interrupted() => println!("\ninterrupted: stopping"),
        Err(e) => println!("\ndemo step failed: {e:#}\nstopping; monitor's log:\n{}", sys.log_tail(15)),
        Ok(()) => {}
    }
    let stopped = stop(&mut sys, played.is_ok());
    println!("\ndemo done in {:.0} s", began.elapsed().as_secs_f64());
    played.and(stopped)
}

fn banner(sys: &System, version: &str) {
    let names: Vec<String> =
        sys.processes.iter().zip(&sys.ports).map(|((n, r), p)| format!("{n} ({r}, :{p})")).collect();
    println!("\n== monitor demo: the whole system on this host");
    println!("   group       {} (cgroup {version}, limit {} MiB)", sys.cgroup.display(), sys.limit / MIB);
    println!("   processes   {} — fixture-backend", names.join(", "));
    println!("   config      {}", sys.dir.join("monitor.toml").display());
    println!();
    println!("   front door  http://{}/", sys.proxy);
    println!("   home page   http://{}/", sys.web);
    println!("   metrics     http://{}/metrics", sys.web);
    println!("   status API  http://{}/api/v1/status", sys.web);
}

fn step(title: &str) {
    println!("\n== {title}");
}

fn state(s: &Value) -> &str {
    s.pointer("/policy/state").and_then(Value::as_str).unwrap_or("?")
}

fn ratio(s: &Value) -> f64 {
    s.pointer("/group/ratio").and_then(Value::as_f64).unwrap_or(0.0)
}

fn usage(s: &Value) -> u64 {
    s.pointer("/group/usage_bytes").and_then(Value::as_u64).unwrap_or(0)
}

/// `88% (452 MiB of 512 MiB)`.
fn memory(s: &Value, limit: u64) -> String {
    format!("{:.0}% ({} MiB of {} MiB)", ratio(s) * 100.0, usage(s) / MIB, limit / MIB)
}

fn check(interrupted_ok: bool) -> Result<()> {
    if interrupted_ok {
        Ok(())
    } else {
        bail!("interrupted by Ctrl-C")
    }
}

fn play(sys: &System, args: &Args) -> Result<()> {
    let load = Load::start(sys.proxy, 3, Duration::from_millis(100));
    step(&format!("1. normal load ({} s): sessions follow their X-Cache-Id, $closure goes to the master", args.load_s));
    check(pause(Duration::from_secs(args.load_s)))?;
    let t = load.take();
    println!("   {}\n   {}\n", t.statuses(), t.routing());
    sys.print_table()?;

    let ids = load::sessions(sys.proxy, &["tx1", "tx2"]);
    let (Some(tx1), Some(tx2)) = (ids.get("tx1"), ids.get("tx2")) else {
        bail!("could not open a session on each of tx1 and tx2: {ids:?}");
    };

    // Past refuse_at: one request on tx1 holds memory up to ~88% for 6 s.
    let s = sys.status()?;
    let mib = ((0.88 * sys.limit as f64 - usage(&s) as f64) / MIB as f64).ceil() as u64;
    step(&format!("2. a request makes tx1 hold {mib} MiB for 6 s: the group passes 85%, new requests get 503"));
    let holder = load::hold(sys.proxy, tx1, mib, Duration::from_secs(6));
    let Some(s) = sys.wait_for(Duration::from_secs(5), |s| state(s) == "refusing") else {
        check(!interrupted())?;
        bail!("the group did not reach refusing: {}", memory(&sys.status()?, sys.limit));
    };
    println!("   refusing at {}", memory(&s, sys.limit));
    check(pause(Duration::from_secs(2)))?;
    sys.print_table()?;
    let held = holder.join().map_err(|_| anyhow::anyhow!("holder thread panicked"))?;
    let held = held.map_err(anyhow::Error::msg).context("the holding request")?;
    println!(
        "   the holding request (admitted before the line) finished: {} from {}",
        held.status,
        load::served_by(&held)
    );
    let settled = sys.wait_for(Duration::from_secs(5), |s| state(s) == "normal" && ratio(s) < 0.2);
    check(!interrupted())?;
    let Some(s) = settled else { bail!("not back to normal 5 s after the memory was freed") };
    println!("   tx1 freed its memory: back to normal at {}", memory(&s, sys.limit));
    let t = load.take();
    println!("   clients meanwhile: {}", t.statuses());
    if let Some((retry, body)) = &t.shed {
        println!("   a shed answer: 503, Retry-After: {retry}, {body:?}");
    }

    // Past abort_at: tx1 holds ~60%, then tx2 adds enough for ~95%; tx1, the largest, is aborted.
    let a = sys.limit * 60 / 100 / MIB;
    step(&format!("3. tx1 holds {a} MiB, then tx2 enough for ~95%: past 92%, the largest (tx1) is aborted"));
    let big = load::hold(sys.proxy, tx1, a, Duration::from_secs(8));
    let Some(s) = sys.wait_for(Duration::from_secs(5), |s| usage(s) >= a * MIB) else {
        check(!interrupted())?;
        bail!("tx1 did not take its {a} MiB");
    };
    let b = (sys.limit * 95 / 100).saturating_sub(usage(&s)) / MIB;
    println!("   tx1 holds {a} MiB: {}; tx2 takes {b} MiB more", memory(&s, sys.limit));
    let small = load::hold(sys.proxy, tx2, b, Duration::from_secs(3));
    // The abort is over in milliseconds (a memory threshold wakes the agent, the front door cancels tx1's request
    // and tx1 frees its memory), faster than the status is polled: the cancelled request is the evidence, and its
    // answer names the process aborted.
    let r = big.join().map_err(|_| anyhow::anyhow!("thread panicked"))?.map_err(anyhow::Error::msg)?;
    let text = r.text();
    if !(r.status == 503 && text.contains("request cancelled")) {
        check(!interrupted())?;
        bail!(
            "tx1's request was not cancelled ({} {:?}): {}",
            r.status,
            text.trim(),
            memory(&sys.status()?, sys.limit)
        );
    }
    println!("   tx1's in-flight request, cancelled past 92%: {} {:?}", r.status, text.trim());
    if let Ok(stats) = monitor_tests::http::get(
        std::net::SocketAddr::from(([127, 0, 0, 1], sys.ports[1])),
        "/stats",
        Duration::from_secs(5),
    ) {
        println!("   tx1 saw its client go and freed the memory: /stats {}", stats.text().trim());
    }
    let s = sys.status()?;
    println!("   then {} at {}", state(&s), memory(&s, sys.limit));
    sys.print_table()?;
    let r = small.join().map_err(|_| anyhow::anyhow!("thread panicked"))?.map_err(anyhow::Error::msg)?;
    println!("   tx2's request (not the largest) finished: {} from {}", r.status, load::served_by(&r));
    let t = load.take();
    println!("   clients meanwhile: {}", t.statuses());

    step("4. recovered: normal load again (4 s)");
    let _ = sys.wait_for(Duration::from_secs(5), |s| state(s) == "normal");
    load.take();
    check(pause(Duration::from_secs(4)))?;
    let t = load.take();
    println!("   {}\n   {}\n", t.statuses(), t.routing());
    sys.print_table()?;
    // The clients hold still for the comparison (their last requests finish first).
    load.hold(true);
    std::thread::sleep(Duration::from_millis(300));
    println!("   {}", counts(sys)?);
    load.hold(false);

    last_resort(sys, tx2, &load)?;

    if args.keep || args.hold.is_some() {
        load.set_pace(Duration::from_millis(500));
        let until = match args.hold {
            Some(s) => format!("for {s} s (Ctrl-C ends it sooner)"),
            None => "until Ctrl-C".to_string(),
        };
        println!("\n== holding {until}, under a light load: open the home page");
        println!("   home page   http://{}/", sys.web);
        println!("   front door  http://{}/", sys.proxy);
        let secs = args.hold.unwrap_or(u64::MAX / 2);
        pause(Duration::from_secs(secs));
        let t = load.take();
        println!("\n   while holding: {}", t.statuses());
    }
    Ok(())
}

/// The last resort: a request on tx2 allocates twice the limit without ever yielding, so cancelling it cannot stop
/// it; the guard kills tx2 itself before the kernel's OOM killer acts, its client gets the guard's 503, and the
/// launcher starts tx2 again.
fn last_resort(sys: &System, tx2: &str, load: &Load) -> Result<()> {
    let mib = sys.limit * 2 / MIB;
    step(&format!("5. a request makes tx2 allocate {mib} MiB without ever yielding: the guard kills tx2 itself"));
    let before = sys.status()?;
    let pid = |s: &Value| {
        s["launcher"].as_array().and_then(|l| l.iter().find(|m| m["name"] == "tx2")).and_then(|m| m["pid"].as_u64())
    };
    let old = pid(&before);
    let oom = before["group"]["oom_kills"].as_u64();
    let path = format!("/fhir/ValueSet/$expand?grow_sync_mib={mib}");
    let r = monitor_tests::http::request(sys.proxy, "GET", &path, &[("X-Cache-Id", tx2)], load::TIMEOUT)
        .map_err(anyhow::Error::msg)?;
    println!("   tx2's client: {} {:?}", r.status, r.text().trim());
    if r.status != 503 {
        check(!interrupted())?;
        bail!("the growing request was answered {}, not the guard's 503", r.status);
    }
    let s = sys.wait_for(Duration::from_secs(10), |s| pid(s).is_some_and(|p| Some(p) != old) && state(s) == "normal");
    check(!interrupted())?;
    let Some(s) = s else { bail!("tx2 was not started again within 10 s") };
    if let Some(k) = s["kills"].as_array().and_then(|k| k.last()) {
        println!(
            "   killed: {} (pid {}), {} MiB, {}",
            k["name"].as_str().unwrap_or("?"),
            k["pid"],
            k["rss_bytes"].as_u64().unwrap_or(0) / MIB,
            k["reason"].as_str().unwrap_or("")
        );
    }
    println!(
        "   the kernel's OOM kills in the group: {} before, {} after; tx2 restarted as pid {}",
        oom.map_or("-".into(), |n| n.to_string()),
        s["group"]["oom_kills"].as_u64().map_or("-".into(), |n| n.to_string()),
        pid(&s).unwrap_or(0)
    );
    if s["group"]["oom_kills"].as_u64() != oom {
        bail!("the kernel's OOM killer acted");
    }
    sys.print_table()?;
    let t = load.take();
    println!("   clients meanwhile: {}", t.statuses());
    Ok(())
}

/// Requests per process as the kernel counted them (eBPF) beside the processes' own count of what they served.
/// Each process's count is read, then the kernel's from the first status whose counters were read after that
/// (`sample.counted_unix_ms`: the agent reads them once a second), then the process's again: when nothing else
/// reached the process in between (the second read is the first plus itself), the two must be equal.
fn counts(sys: &System) -> Result<String> {
    // Every request it got, health checks and this /stats request included.
    let own = |port: u16| {
        monitor_tests::http::get(std::net::SocketAddr::from(([127, 0, 0, 1], port)), "/stats", TIMEOUT)
            .ok()
            .and_then(|r| serde_json::from_slice::<Value>(&r.body).ok())
            .and_then(|v| v["requests"].as_u64())
    };
    let before: Vec<Option<u64>> = sys.ports.iter().map(|&p| own(p)).collect();
    let asked = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as u64;
    let counted = |s: &Value| s["sample"]["counted_unix_ms"].as_u64().is_some_and(|t| t > asked);
    let Some(s) = sys.wait_for(Duration::from_secs(5), counted) else {
        bail!("the agent did not read the request counters within 5 s")
    };
    let after: Vec<Option<u64>> = sys.ports.iter().map(|&p| own(p)).collect();
    let processes = s["processes"].as_array().cloned().unwrap_or_default();
    let mut out = Vec::new();
    for (i, (name, _)) in sys.processes.iter().enumerate() {
        let pid = s["launcher"].as_array().into_iter().flatten().find(|p| p["name"] == *name).map(|p| &p["pid"]);
        let kernel = processes.iter().find(|p| Some(&p["pid"]) == pid).and_then(|p| p["requests_total"].as_u64());
        let show = |v: Option<u64>| v.map_or("-".to_string(), |n| n.to_string());
        let (b, a) = (before.get(i).copied().flatten(), after.get(i).copied().flatten());
        let others = match (b, a) {
            (Some(b), Some(a)) if a > b + 1 => format!(" (+{} arrived during the check)", a - b - 1),
            _ => String::new(),
        };
        out.push(format!("{name} {}/{}{others}", show(kernel), show(b)));
    }
    Ok(format!("requests counted in the kernel (eBPF) / got by the process by its own count: {}", out.join(", ")))
}

/// SIGTERM (with requests in flight after a full run): they finish, `monitor run` exits 0; then nothing may be
/// left.
fn stop(sys: &mut System, in_flight: bool) -> Result<()> {
    let pids = sys.launched_pids();
    let n = if in_flight { 3 } else { 0 };
    match n {
        0 => step("7. SIGTERM to monitor run: it drains and exits 0"),
        n => {
            step(&format!("7. SIGTERM to monitor run with {n} slow requests (1.5 s) in flight: it drains and exits 0"))
        }
    }
    let slow: Vec<_> = (0..n).map(|_| load::slow(sys.proxy, Duration::from_millis(1500))).collect();
    std::thread::sleep(Duration::from_millis(300));
    let pid = sys.pid().unwrap_or(0);
    sys.sigterm();
    let sent = Instant::now();
    std::thread::sleep(Duration::from_millis(200));
    let refused = std::net::TcpStream::connect_timeout(&sys.proxy, Duration::from_millis(500)).is_err();
    println!("   a new connection 0.2 s after SIGTERM: {}", if refused { "refused" } else { "accepted (!)" });
    let exit = sys.wait_exit(Duration::from_secs(20));
    let took = sent.elapsed().as_secs_f64();
    let answers: Vec<String> = slow
        .into_iter()
        .map(|h| match h.join() {
            Ok(Ok(r)) => format!("{} from {}", r.status, load::served_by(&r)),
            Ok(Err(e)) => e,
            Err(_) => "thread panicked".into(),
        })
        .collect();
    if !answers.is_empty() {
        println!("   in-flight requests: {}", answers.join(", "));
    }
    match exit {
        Some(st) => println!(
            "   monitor run (pid {pid}) exited with {} {took:.1} s after SIGTERM; its log since:",
            st.code().map_or_else(|| st.to_string(), |c| format!("code {c}"))
        ),
        None => println!("   monitor run (pid {pid}) still running 20 s after SIGTERM: killed"),
    }
    print!("{}", sys.log_from("draining"));
    let left = sys.leftovers(&pids);
    if left.is_empty() {
        println!(
            "\n== nothing left: {} removed (by monitor run), processes {pids:?} gone, ports closed",
            sys.cgroup.display()
        );
    } else {
        println!("\n== LEFT BEHIND: {}", left.join(", "));
    }
    match exit {
        Some(st) if st.success() && left.is_empty() => Ok(()),
        Some(st) if !st.success() => bail!("monitor run exited {st} after SIGTERM"),
        None => bail!("monitor run did not exit within 20 s of SIGTERM"),
        _ => bail!("left behind: {}", left.join(", ")),
    }
}
