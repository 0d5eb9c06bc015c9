//! The agent under systemd's notification protocol, with the test in systemd's place: a datagram socket named by
//! `NOTIFY_SOCKET`, and `WATCHDOG_USEC` set. `monitor agent` sends `READY=1` once it serves, `WATCHDOG=1` at half
//! the watchdog's timeout, `STATUS=` with the group's state when it changes, and `STOPPING=1` on SIGTERM.
//! `monitor run` is ready only once its processes are healthy, and none of them gets the socket.

use monitor_tests::config::{Config, Process};
use monitor_tests::notify::{bind, count, receive_until};
use monitor_tests::run::Launched;
use monitor_tests::{agent::free_port, require_group, temp_dir, Agent, Group, Hog};
use std::time::{Duration, Instant};

const HOG: &str = env!("CARGO_BIN_EXE_alloc-hog");

#[test]
fn the_agent_says_ready_feeds_the_watchdog_reports_its_state_and_says_it_stops() {
    let test = "the_agent_says_ready_feeds_the_watchdog_reports_its_state_and_says_it_stops";
    if !require_group(test) {
        return;
    }
    let dir = temp_dir("notify-agent");
    let (sock, path) = bind(&dir);
    let cg = Group::here("notify-agent", Some(256 << 20));
    let mut hog = Hog::spawn(HOG, cg.path(), 20, false);
    let port = free_port();
    let args: Vec<String> = ["agent", "--cgroup", &cg.path().display().to_string(), "--listen"]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("127.0.0.1:{port}"), "--interval-ms".into(), "50".into()])
        .collect();
    // A 400 ms watchdog: a ping every 200 ms.
    let agent = Agent::start_args_env(args, port, &[("NOTIFY_SOCKET", &path), ("WATCHDOG_USEC", "400000")]);
    let got = receive_until(&sock, Duration::from_secs(5), |g| count(g, "READY=1") > 0 && count(g, "WATCHDOG=1") >= 5);
    assert_eq!(count(&got, "READY=1"), 1, "{got:?}");
    assert!(count(&got, "WATCHDOG=1") >= 5, "fed at half the timeout: {got:?}");
    let ready = got.iter().find(|m| m.contains("READY=1")).cloned().unwrap_or_default();
    assert!(ready.contains("STATUS=normal at "), "{ready}");
    // The group passes the refuse line: the status says so.
    hog.set_mib(225);
    let got = receive_until(&sock, Duration::from_secs(10), |g| g.iter().any(|m| m.contains("STATUS=refusing")));
    assert!(got.iter().any(|m| m.contains("STATUS=refusing new requests at ")), "{got:?}");
    // SIGTERM: STOPPING=1.
    // SAFETY: kill has no memory effects; the pid is our child's, still unreaped.
    unsafe { libc::kill(agent.pid() as i32, libc::SIGTERM) };
    let got = receive_until(&sock, Duration::from_secs(5), |g| count(g, "STOPPING=1") > 0);
    assert_eq!(count(&got, "STOPPING=1"), 1, "{got:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn monitor_run_is_ready_once_its_processes_are_and_they_never_get_the_socket() {
    let test = "monitor_run_is_ready_once_its_processes_are_and_they_never_get_the_socket";
    if !require_group(test) {
        return;
    }
    let dir = temp_dir("notify-run");
    let (sock, path) = bind(&dir);
    let cg = Group::here("notify-run", Some(256 << 20));
    // A master that takes a second to answer its health checks, and writes what it inherited.
    let env_file = dir.join("env");
    let port = free_port();
    let script =
        format!("env > {env}; sleep 1; exec python3 -m http.server --bind 127.0.0.1 {port}", env = env_file.display());
    let config = Config::new()
        .cgroup(cg.path())
        .probes(false)
        .process(Process::new("m0", "master", ["sh", "-c", &script], port).set("health", "/"));
    let started = Instant::now();
    let run = Launched::start(test, config, None, &[("NOTIFY_SOCKET", &path)]);
    let got = receive_until(&sock, Duration::from_secs(20), |g| count(g, "READY=1") > 0);
    assert_eq!(count(&got, "READY=1"), 1, "{got:?}\nstderr:\n{}", run.stderr());
    assert!(started.elapsed() >= Duration::from_secs(1), "ready before the master was healthy");
    let s = run.status();
    let states: Vec<&str> =
        s["launcher"].as_array().into_iter().flatten().filter_map(|p| p["state"].as_str()).collect();
    assert_eq!(states, ["ready"], "ready only once the master is: {s}");
    let inherited = std::fs::read_to_string(&env_file).unwrap_or_default();
    assert!(!inherited.contains("NOTIFY_SOCKET"), "the master got the socket:\n{inherited}");
    drop(run);
    let _ = std::fs::remove_dir_all(&dir);
}
