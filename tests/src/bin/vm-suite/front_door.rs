//! `monitor run` on a real cgroup v2 hierarchy: it creates the group with its `memory.max`, starts a master and a
//! worker of the fixture backend in it, proxies requests to them, counts them in the kernel, and on SIGTERM drains,
//! stops the processes and removes the group it created.

use crate::support::SETTLE;
use monitor_tests::config::{bytes, Config, Process};
use monitor_tests::group::{oom_kills, Hierarchy};
use monitor_tests::http;
use monitor_tests::run::{member, served_by, Launched};
use monitor_tests::status::{process, str_at, u64_at};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Requests sent through the front door.
const REQUESTS: u64 = 20;

pub fn run_creates_the_group_and_serves() {
    let config = Config::new().set("policy", "interval_ms", 50);
    let V2Run { cg, mut run } = start_run("run", 256, config, &[("m0", "master"), ("tx1", "worker")]);

    let ready = run.wait_for(
        "both processes ready",
        |s| {
            let l = s.pointer("/launcher").and_then(Value::as_array);
            l.is_some_and(|l| l.len() == 2 && l.iter().all(|p| p["state"] == "ready"))
        },
        SETTLE,
    );
    // The group it created, with the limit, holding both processes.
    let max = std::fs::read_to_string(cg.join("memory.max")).unwrap_or_default();
    assert_eq!(max.trim(), (256u64 << 20).to_string(), "memory.max of {}", cg.display());
    let procs = std::fs::read_to_string(cg.join("cgroup.procs")).unwrap_or_default();
    let pids: Vec<u32> = ready["launcher"]
        .as_array()
        .map(|l| l.iter().filter_map(|p| p["pid"].as_u64()).map(|p| p as u32).collect())
        .unwrap_or_default();
    assert_eq!(pids.len(), 2, "{ready:#}");
    for pid in &pids {
        assert!(procs.lines().any(|l| l.trim() == pid.to_string()), "pid {pid} not in {}: {procs}", cg.display());
    }
    assert_eq!(u64_at(&ready, "/group/limit_bytes"), 256 << 20, "the limit the agent reads");
    assert_eq!(str_at(&ready, "/group/version"), "v2");

    // Through the front door: every request answered by one of the two.
    for i in 0..REQUESTS {
        let r = http::request(run.proxy, "GET", &format!("/tx/r4/CodeSystem/{i}"), &[], Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("request {i} via the proxy: {e}"));
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
    }
    // Counted in the kernel for the two processes: at least what went through (the launcher's health checks
    // count too), and then nothing left in flight. A sample may fall between a request and its response (a health
    // check, or the last request: the status is up to one sample old; in flight 1 was seen on 6.1), so this waits
    // for a sample with none: one that never comes (a request counted and its response not) fails here.
    let s = run.wait_for(
        "the requests counted and none in flight",
        |s| {
            let procs: Vec<&Value> = pids.iter().filter_map(|&p| process(s, p)).collect();
            let total: u64 = procs.iter().filter_map(|p| p.get("requests_total")).filter_map(Value::as_u64).sum();
            let idle =
                procs.len() == pids.len() && procs.iter().all(|p| p.get("inflight").and_then(Value::as_u64) == Some(0));
            total >= REQUESTS && idle
        },
        SETTLE,
    );
    for &pid in &pids {
        let p = process(&s, pid).unwrap_or_else(|| panic!("pid {pid} not in the status:\n{s:#}"));
        assert_eq!(p.get("inflight").and_then(Value::as_u64), Some(0), "{p:#}");
    }

    // SIGTERM: drain, stop the processes, exit 0, remove the group.
    let status = run.terminate(Duration::from_secs(30));
    assert!(status.success(), "monitor run exited with {status}");
    assert!(!cg.exists(), "{} was not removed", cg.display());
    for pid in pids {
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "process {pid} outlived monitor run");
    }
}

/// A `monitor run` started on cgroup v2, with the group it creates.
struct V2Run {
    cg: PathBuf,
    run: Launched,
}

/// Starts `monitor run` creating the group `monitor-test-<name>-<pid>` with a `limit_mib` limit, fixture backends
/// as `processes` (name, role) and `config` around them; waits until every process is ready.
fn start_run(name: &str, limit_mib: u64, config: Config, processes: &[(&str, &str)]) -> V2Run {
    let cg = Path::new("/sys/fs/cgroup").join(format!("monitor-test-{name}-{}", std::process::id()));
    assert!(!cg.exists(), "{} exists already", cg.display());
    let mut config = config
        .cgroup(&cg)
        .set("group", "create", true)
        .set("group", "limit_bytes", bytes(limit_mib << 20))
        .set("proxy", "drain_timeout_s", 5)
        .set("proxy", "stop_grace_s", 2);
    for (name, role) in processes {
        config = config.process(Process::fixture(name, role).set("start_timeout_s", 30));
    }
    let run = Launched::start(&format!("run-{name}-v2"), config, None, &[]);
    run.wait_for(
        "every process ready",
        |s| {
            let l = s.pointer("/launcher").and_then(Value::as_array);
            l.is_some_and(|l| l.len() == processes.len() && l.iter().all(|p| p["state"] == "ready"))
        },
        SETTLE,
    );
    V2Run { cg, run }
}

/// `monitor run` on cgroup v2 reacts in time: a worker grows inside one request to 700 MiB, as fast as it can, in a
/// 512 MiB group the run creates. The front door cancels that request (the memory guard's 503) before the kernel's
/// OOM killer acts (`memory.events` `oom_kill` stays 0), the worker frees what it grew and is not restarted, and
/// the other worker's requests that were let in all succeed.
pub fn run_cancels_a_request_growing_past_the_limit() {
    let processes = [("m0", "master"), ("tx1", "worker"), ("tx2", "worker")];
    let config = Config::new().probes(false).set("proxy", "master_serves_tx", false);
    let V2Run { cg, mut run } = start_run("grow", 512, config, &processes);
    let oom_kills = || oom_kills(&cg, Hierarchy::V2).unwrap_or_else(|e| panic!("{e}"));
    let proxy = run.proxy;
    let get = |path: &str, headers: &[(&str, &str)]| {
        http::request(proxy, "GET", path, headers, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("GET {path} via the proxy: {e}"))
    };
    let cache_id_of = |name: &str| {
        (0..40)
            .map(|_| get("/r4/x?cache=start", &[]))
            .find(|r| served_by(r) == name)
            .and_then(|r| r.header("x-cache-id").map(str::to_string))
            .unwrap_or_else(|| panic!("{name} never issued a cache id"))
    };
    let (tx1, tx2) = (cache_id_of("tx1"), cache_id_of("tx2"));
    let kills = oom_kills();
    // One client keeps tx2 busy with 100 ms requests through the episode.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let client = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut ok, mut shed, mut failed) = (0u64, 0u64, Vec::new());
            let deadline = Instant::now() + Duration::from_secs(60);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < deadline {
                let r =
                    http::request(proxy, "GET", "/r4/x?sleep_ms=100", &[("X-Cache-Id", &tx2)], Duration::from_secs(30));
                match r {
                    Ok(r) if r.status == 200 => ok += 1,
                    Ok(r)
                        if r.status == 503 && r.text().starts_with("memory guard:") && r.text().contains("refuses") =>
                    {
                        shed += 1;
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Ok(r) => failed.push(format!("{}: {}", r.status, r.text())),
                    Err(e) => failed.push(e),
                }
            }
            (ok, shed, failed)
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    let t0 = Instant::now();
    let grow = get("/r4/x?grow_mib=700", &[("X-Cache-Id", &tx1)]);
    let took = t0.elapsed();
    assert_eq!(grow.status, 503, "the growing request is cancelled: {}", grow.text());
    assert!(grow.text().starts_with("memory guard:"), "{}", grow.text());
    assert_eq!(oom_kills(), kills, "the kernel's OOM killer acted");
    let s =
        run.wait_for("normal again", |s| s.pointer("/policy/state").and_then(Value::as_str) == Some("normal"), SETTLE);
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, shed, failed) = client.join().unwrap_or_else(|_| panic!("the client thread panicked"));
    let tx1_state = member(&s, "tx1");
    assert_eq!(tx1_state["restarts"], 0, "tx1 was not restarted: {tx1_state}");
    println!(
        "grow request cancelled after {took:?}; tx2's client: {ok} ok, {shed} shed while refusing, {} failed",
        failed.len()
    );
    assert!(ok >= 5, "tx2's client got too few answers to judge: {ok} ok, {failed:?}");
    assert!(ok as f64 >= 0.99 * (ok + failed.len() as u64) as f64, "tx2's requests let in must succeed: {failed:?}");

    run.terminate(Duration::from_secs(30));
    assert!(!cg.exists(), "{} was not removed", cg.display());
}
