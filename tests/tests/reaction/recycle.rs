//! A process that obeyed its abort but gives nothing back (as a JVM keeps its committed heap) is recycled
//! gracefully, never killed. Under `monitor run`: tx1 grows in a request toward 600 MiB of a 512 MiB group and keeps
//! what it grew when the front door cancels the request; `recycle_after_s` later the group still refuses, so tx1's
//! requests in flight are waited for, it gets SIGTERM, and the launcher starts it again; the master and tx2 keep
//! their pids, tx2's clients get only its 200 or the guard's 503, and nothing is SIGKILLed. Under `monitor agent`: a
//! Python process that stops growing at the abort signal and keeps its memory receives `[actions] recycle_signal`
//! once.

use monitor_tests::run::{member, Busy, Run, Seen, Spec, TIMEOUT};
use monitor_tests::{require_group, spawn_in_cgroup, Agent, Group, MIB};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

fn pid_of(status: &serde_json::Value, name: &str) -> u64 {
    member(status, name)["pid"].as_u64().unwrap_or_else(|| panic!("{name} has no pid:\n{status:#}"))
}

#[test]
fn a_worker_that_obeyed_but_keeps_its_memory_is_recycled_by_sigterm_never_killed() {
    if !require_group("a_worker_that_obeyed_but_keeps_its_memory_is_recycled_by_sigterm_never_killed") {
        return;
    }
    let _turn = crate::turn();
    let spec = Spec {
        workers: 2,
        limit_mib: 512,
        proxy: "master_serves_tx = false\ndrain_timeout_s = 5".into(),
        policy: "interval_ms = 100\nrecycle_after_s = 3".into(),
        ..Spec::default()
    };
    let run = Run::start("run-recycle", &spec);
    let tx1 = run.cache_id_of("tx1");
    let tx2 = run.cache_id_of("tx2");
    let before = run.status();
    let (m0, tx1_pid, tx2_pid) = (pid_of(&before, "m0"), pid_of(&before, "tx1"), pid_of(&before, "tx2"));
    let oom = run.cg.oom_count();
    let guarded = |body: &str| body.starts_with("memory guard:");
    let busy = Busy::start(&run, 2, &tx2, "tx2", "/r4/x?sleep_ms=50", guarded);

    // tx1 grows at 500 MiB/s (slower as much as the machine is: an emulated VM) until the front door cancels the
    // request at 92%, and keeps what it grew. (At full speed a loaded machine may let it reach kill_at before the
    // cancel lands: that is the last resort's case, tests/tests/reaction/last_resort.rs.)
    let rate = 500 / monitor_tests::pace::stretch();
    let grow = run.get(&format!("/r4/x?grow_mib=600&grow_mib_s={rate}&keep=1"), &[("X-Cache-Id", &tx1)]);
    assert_eq!(grow.status, 503, "the growing request: {} {}\n{}", grow.status, grow.text(), run.stderr());
    assert!(grow.text().starts_with("memory guard:"), "cancelled by the guard: {}", grow.text());
    let status = run.wait_for(
        "tx1 recycled and ready again",
        |s| {
            let m = member(s, "tx1");
            m["state"] == "ready" && m["pid"].as_u64().is_some_and(|p| p != tx1_pid)
        },
        Duration::from_secs(30),
    );
    let log = run.stderr();
    assert!(log.contains("recycled: it obeyed the abort"), "the guard says why:\n{log}");
    assert!(log.contains("recycled by the memory guard"), "the launcher knows it:\n{log}");
    assert!(!log.contains("killed: "), "nothing was SIGKILLed:\n{log}");
    // The fixture shuts down cleanly on SIGTERM, as a server does: it exits 0, never by SIGKILL.
    assert!(log.contains("restarting name=tx1") && log.contains("status=exit status: 0"), "tx1 exited cleanly:\n{log}");
    assert_eq!(member(&status, "tx1")["restarts"], 1, "{status:#}");
    assert_eq!((pid_of(&status, "m0"), pid_of(&status, "tx2")), (m0, tx2_pid), "only tx1 was recycled:\n{status:#}");
    let recycles = status["recycles"].as_array().cloned().unwrap_or_default();
    assert_eq!(recycles.len(), 1, "one recycle: {status:#}");
    assert_eq!((recycles[0]["name"].as_str(), recycles[0]["signal"].as_str()), (Some("tx1"), Some("TERM")));
    assert!(status["kills"].as_array().is_none_or(Vec::is_empty), "no kill: {status:#}");
    let metrics = monitor_tests::http::get(run.web, "/metrics", TIMEOUT).map(|r| r.text()).unwrap_or_default();
    assert!(metrics.contains("monitor_guard_recycles_total{process=\"tx1\"} 1"), "{metrics}");
    // The group serves again, tx1 with it.
    run.wait_for("the group back to normal", |s| s["policy"]["state"] == "normal", TIMEOUT);
    // A restarted process knows none of its old cache ids (`cache-id-unknown`, as the routing rules expect): it
    // issues new ones.
    let fresh = run.cache_id_of("tx1");
    let r = run.get("/r4/x", &[("X-Cache-Id", &fresh)]);
    assert_eq!(r.status, 200, "tx1 serves again: {}", r.text());
    assert_eq!(run.cg.oom_count(), oom, "the kernel's OOM killer acted:\n{}", run.stderr());
    let Seen { ok, shed, failed } = busy.stop();
    assert!(failed.is_empty(), "tx2's clients got only 200 or the guard's 503: {failed:#?}");
    eprintln!("tx1 recycled by SIGTERM and restarted; tx2's clients: {ok} ok, {shed} shed, 0 failed; OOM kills 0");
}

/// A Python process that grows 4 MiB every 10 ms until SIGUSR2 (the abort) stops it, keeps what it grew, and prints
/// `recycle` on each SIGUSR1.
const OBEYS_AND_KEEPS: &str = r#"
import signal, sys, time
held, stop = [], [False]
signal.signal(signal.SIGUSR2, lambda *a: stop.__setitem__(0, True))
signal.signal(signal.SIGUSR1, lambda *a: print("recycle", flush=True))
print("ready", flush=True)
sys.stdin.readline()
while not stop[0] and len(held) < 150:
    held.append(bytearray(b"\x01" * (4 << 20)))
    time.sleep(0.01)
print("stopped", len(held) * 4, flush=True)
while True:
    time.sleep(1)
"#;

#[test]
fn under_the_agent_the_recycle_signal_is_sent_once() {
    let name = "under_the_agent_the_recycle_signal_is_sent_once";
    if !require_group(name) || !monitor_tests::require_program(name, "python3") {
        return;
    }
    let _turn = crate::turn();
    let cg = Group::here("recycle-agent", Some(512 * MIB));
    let dir = monitor_tests::temp_dir("recycle-agent");
    let config = monitor_tests::config::Config::new()
        .lines("policy", "recycle_after_s = 2")
        .probes(false)
        .set("actions", "abort_signal", "SIGUSR2")
        .set("actions", "recycle_signal", "SIGUSR1");
    let agent = Agent::with_config_only(cg.path(), &config, &dir);
    let mut cmd = Command::new("python3");
    cmd.args(["-c", OBEYS_AND_KEEPS]).stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = spawn_in_cgroup(&mut cmd, cg.path());
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        panic!("python started without pipes");
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next = |what: &str| {
        rx.recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("waiting for {what}: {e}\n{}", agent.stderr()))
    };
    assert_eq!(next("ready"), "ready");
    let pid = child.pid();
    agent.wait_for(|s| monitor_tests::agent::process(s, pid).is_some(), Duration::from_secs(10));
    let oom = cg.oom_count();
    std::io::Write::write_all(&mut stdin, b"go\n").unwrap_or_else(|e| panic!("starting the growth: {e}"));
    let stopped = next("the abort to stop the growth");
    assert!(stopped.starts_with("stopped"), "{stopped}");
    assert_eq!(next("the recycle signal"), "recycle", "{}", agent.stderr());
    // The recycle is told once while the process stays: watch 30 more samples of the group over refuse_at.
    let seq = agent.status()["sample"]["seq"].as_u64().unwrap_or(0);
    agent.wait_for(|s| s["sample"]["seq"].as_u64().is_some_and(|n| n >= seq + 30), Duration::from_secs(30));
    assert!(rx.try_recv().is_err(), "a second recycle signal:\n{}", agent.stderr());
    let status = agent.status();
    let recycles = status["recycles"].as_array().cloned().unwrap_or_default();
    assert_eq!(recycles.len(), 1, "{status:#}");
    assert_eq!(recycles[0]["signal"].as_str(), Some("USR1"), "{status:#}");
    assert!(status["kills"].as_array().is_none_or(Vec::is_empty), "never killed: {status:#}");
    assert_eq!(cg.oom_count(), oom, "the kernel's OOM killer acted:\n{}", agent.stderr());
    assert!(child.try_wait().ok().flatten().is_none(), "it lives");
    eprintln!("{stopped} MiB, then one SIGUSR1 recycle; never killed, 0 OOM kills");
    let _ = std::fs::remove_dir_all(&dir);
}
