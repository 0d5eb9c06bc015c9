//! SIGHUP reloads the agent's config, with the test in systemd's place (`NOTIFY_SOCKET`). A good file is applied
//! live: the status shows the new `refuse_at`, the group, held between the old and the new line, changes state, and
//! the alert hook and the refuse signal the file adds are heard from. A bad one is refused with its file, line and
//! key while the agent serves on with the config it had. A key only a restart applies (`[web] listen`) is named as
//! such and kept. The reloads are counted in `/metrics`, and the history goes on being written after them. The
//! probes are detached and attached again, and an agent started without a file keeps running on SIGHUP.

use monitor_tests::config::Config;
use monitor_tests::{
    agent::free_port, json_lines, require_group, require_root, temp_dir, wait_until, Agent, Group, Hog,
};
use monitor_tests::{hooks, notify};
use serde_json::Value;
use std::net::SocketAddr;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const HOG: &str = env!("CARGO_BIN_EXE_alloc-hog");

/// Writes `ready`, then the name of each SIGWINCH it gets, one a line, to the file `argv[1]`.
const RECORDER: &str = r#"
import signal, sys, time
out = open(sys.argv[1], "a", buffering=1)
signal.signal(signal.SIGWINCH, lambda n, f: out.write("SIGWINCH\n"))
out.write("ready\n")
while True:
    time.sleep(1)
"#;

/// How long a reload may take to show in the status.
const RELOADED: Duration = Duration::from_secs(5);

fn sighup(pid: u32) {
    // SAFETY: kill has no memory effects; the pid is our child's, still unreaped.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGHUP) }, 0, "kill -HUP {pid}");
}

/// The process is alive: not gone, not a zombie.
fn alive(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !stat.is_empty() && !stat.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z'))
}

/// The value of `monitor_config_reloads_total{result="…"}` in `/metrics`.
fn reloads(agent: &Agent, result: &str) -> Option<u64> {
    let (code, text) = agent.get("/metrics");
    assert_eq!(code, 200, "{text}");
    let series = format!("monitor_config_reloads_total{{result=\"{result}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(series.as_str())).and_then(|v| v.trim().parse().ok())
}

/// The 1-based line of `path` holding `needle`.
fn line_of(path: &Path, needle: &str) -> usize {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    match text.lines().position(|l| l.contains(needle)) {
        Some(i) => i + 1,
        None => panic!("{needle:?} is not in {}:\n{text}", path.display()),
    }
}

/// Sends SIGTERM and waits until the agent has exited (a zombie, reaped by the guard).
fn stop(agent: &Agent) {
    // SAFETY: as in `sighup`.
    unsafe { libc::kill(agent.pid() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(agent.pid()) {
        assert!(Instant::now() < deadline, "the agent did not stop on SIGTERM; stderr:\n{}", agent.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The latest minute (Unix seconds) of the group in the stats database.
fn last_minute(db: &Path) -> u64 {
    let out = Command::new("python3")
        .arg("-c")
        .arg("import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute('select max(t) from group_minute').fetchone()[0])")
        .arg(db)
        .output()
        .unwrap_or_else(|e| panic!("python3: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(out.status.success(), "python3 failed: {}", String::from_utf8_lossy(&out.stderr));
    text.parse().unwrap_or_else(|_| panic!("no minute in {}: {text:?}", db.display()))
}

#[test]
fn sighup_applies_a_good_config_and_keeps_the_running_one_on_a_bad_one() {
    let test = "sighup_applies_a_good_config_and_keeps_the_running_one_on_a_bad_one";
    if !require_group(test) {
        return;
    }
    let dir = temp_dir("reload-agent");
    let sock_path = dir.join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap_or_else(|e| panic!("{}: {e}", sock_path.display()));
    let cg = Group::here("reload-agent", Some(256 << 20));
    // 190 MiB of 256: 74%, between the new refuse line (0.7) and the old one (0.85, less the hysteresis).
    let mut hog = Hog::spawn(HOG, cg.path(), 20, false);
    hog.set_mib(190);
    // A process of the group that writes down the signals it gets.
    let signals = dir.join("signals");
    let mut cmd = Command::new("python3");
    cmd.args(["-c", RECORDER]).arg(&signals);
    let _recorder = monitor_tests::spawn_in_cgroup(&mut cmd, cg.path());
    wait_until("the recorder", RELOADED, || std::fs::read_to_string(&signals).ok().filter(|t| t.contains("ready")));
    let port = free_port();
    let db = dir.join("stats.db");
    let base = Config::new()
        .cgroup(cg.path())
        .probes(false)
        .stats(&db)
        .web(SocketAddr::from(([127, 0, 0, 1], port)))
        .set("policy", "interval_ms", 50);
    let file = base.clone().set("policy", "refuse_at", 0.85).write(dir.join("monitor.toml"));
    let args = vec!["agent".to_string(), "--config".into(), file.display().to_string()];
    let env = [("NOTIFY_SOCKET", sock_path.to_str().unwrap_or_default())];
    let agent = Agent::start_args_env(args, port, &env);
    let pid = agent.pid();
    let s = agent.wait_for(|s| s["group"]["ratio"].as_f64().is_some_and(|r| r > 0.72), Duration::from_secs(10));
    assert_eq!((s["policy"]["refuse_at"].as_f64(), s["policy"]["state"].as_str()), (Some(0.85), Some("normal")));
    assert_eq!(s["config"]["file"].as_str(), file.to_str(), "{s}");
    assert!(s["config"]["last_reload"].is_null(), "no reload yet: {s}");
    assert_eq!(reloads(&agent, "ok"), Some(0));
    notify::receive_until(&sock, Duration::from_secs(5), |g| g.iter().any(|m| m.contains("READY=1")));

    // A good file: applied live, and the sampler decides with it; the alert hook and the signal it adds are heard.
    let alerted = dir.join("alerts.jsonl");
    let hook = ["python3", "-c", hooks::ALERT_TO_FILE, &alerted.display().to_string()];
    let base = base.alert_command(hook).set("actions", "refuse_signal", "SIGWINCH");
    base.clone().set("policy", "refuse_at", 0.7).write(&file);
    sighup(pid);
    let s = agent.wait_for(|s| s["config"]["last_reload"] == "ok", RELOADED);
    assert_eq!(s["config"]["restart_needed"], Value::Array(vec![]), "{s}");
    // The status shows the lines the latest sample was decided with: the new ones from the first sample after the
    // sampler applied the file.
    agent.wait_for(|s| s["policy"]["refuse_at"].as_f64() == Some(0.7), RELOADED);
    agent.wait_for(|s| s["policy"]["state"] == "refusing", RELOADED);
    assert_eq!(reloads(&agent, "ok"), Some(1));
    wait_until("the alert hook the reload added", RELOADED, || {
        json_lines(&alerted).into_iter().find(|a| a["labels"]["alertname"] == "MonitorGroupRefusing")
    });
    wait_until("the refuse signal the reload added", RELOADED, || {
        std::fs::read_to_string(&signals).ok().filter(|t| t.contains("SIGWINCH"))
    });
    let got = notify::receive_until(&sock, RELOADED, |g| g.iter().any(|m| m.contains("READY=1")));
    let reloading = got.iter().position(|m| m.split(' ').any(|w| w == "RELOADING=1"));
    let ready = got.iter().rposition(|m| m.split(' ').any(|w| w == "READY=1"));
    assert!(reloading.is_some_and(|r| ready.is_some_and(|d| d > r)), "RELOADING=1, then READY=1: {got:?}");
    let stamped = reloading.and_then(|r| got[r].split(' ').find_map(|w| w.strip_prefix("MONOTONIC_USEC=")));
    assert!(stamped.and_then(|t| t.parse::<u64>().ok()).is_some_and(|t| t > 0), "{got:?}");
    assert!(got.iter().any(|m| m.contains("STATUS=") && m.contains("config reloaded")), "{got:?}");

    // A bad key: refused with its file, line and key; the agent serves on with 0.7.
    let bad = base.clone().set("policy", "refuse_at", 0.7).set("policy", "refuse_att", 0.6).write(&file);
    let line = line_of(&bad, "refuse_att");
    sighup(pid);
    let s = agent.wait_for(|s| s["config"]["last_reload"] == "failed", RELOADED);
    let error = s["config"]["error"].as_str().unwrap_or_default().to_string();
    assert!(error.starts_with(&format!("{}:{line}:", file.display())), "file and line: {error}");
    assert!(error.contains("refuse_att"), "the key: {error}");
    assert_eq!(s["policy"]["refuse_at"].as_f64(), Some(0.7), "the running config is kept: {s}");
    assert!(alive(pid), "SIGHUP never stops the agent");
    assert_eq!((reloads(&agent, "ok"), reloads(&agent, "failed")), (Some(1), Some(1)));
    let logged = agent.stderr();
    assert!(
        logged.lines().any(|l| l.contains("ERROR") && l.contains("config reload failed") && l.contains("refuse_att")),
        "{logged}"
    );
    let got = notify::receive_until(&sock, RELOADED, |g| g.iter().any(|m| m.contains("READY=1")));
    assert!(got.iter().any(|m| m.contains("READY=1") && m.contains("config reload failed")), "{got:?}");

    // [web] listen needs a restart: named in a warning, the API stays where it is.
    let moved = free_port();
    base.clone().set("policy", "refuse_at", 0.7).web(SocketAddr::from(([127, 0, 0, 1], moved))).write(&file);
    sighup(pid);
    let s = agent.wait_for(|s| s["config"]["reloads_ok"] == 2, RELOADED);
    assert_eq!((s["config"]["last_reload"].as_str(), &s["config"]["error"]), (Some("ok"), &Value::Null), "{s}");
    assert_eq!(s["config"]["restart_needed"], serde_json::json!(["web.listen"]), "{s}");
    let warned: Vec<String> = agent
        .stderr()
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("web.listen changed in the file but needs a restart"))
        .map(String::from)
        .collect();
    assert_eq!(warned.len(), 1, "one warning for the one key: {warned:?}");
    assert!(std::net::TcpStream::connect(("127.0.0.1", moved)).is_err(), "nothing listens on the new address");

    // The history is still written after the reloads: the minute in progress two seconds before the SIGTERM is in
    // the database (written when it ended, or by the drain; the minute the SIGTERM falls in may hold no whole
    // second yet).
    std::thread::sleep(Duration::from_secs(2));
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0) - 2;
    stop(&agent);
    let minute = last_minute(&db);
    assert!(minute >= now - now % 60, "the last minute written is {minute}, the reloads ended before {now}");
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sighup_without_a_config_file_keeps_the_agent_running_as_it_is() {
    let test = "sighup_without_a_config_file_keeps_the_agent_running_as_it_is";
    if !require_group(test) {
        return;
    }
    let installed = Path::new("/etc/monitor/agent.toml").exists();
    if !monitor_tests::require(!installed, test, "/etc/monitor/agent.toml exists: the agent would read it") {
        return;
    }
    let cg = Group::here("reload-nofile", Some(256 << 20));
    let agent = Agent::start(&cg.path().display().to_string(), &[]);
    sighup(agent.pid());
    let deadline = Instant::now() + RELOADED;
    while !agent.stderr().contains("no config file to read again") {
        assert!(Instant::now() < deadline, "no word of the SIGHUP; stderr:\n{}", agent.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(alive(agent.pid()), "SIGHUP never stops the agent");
    let s = agent.status();
    assert!(s["config"]["file"].is_null() && s["config"]["last_reload"].is_null(), "nothing was reloaded: {s}");
    assert_eq!(s["policy"]["refuse_at"].as_f64(), Some(0.85), "{s}");
}

#[test]
fn sighup_detaches_and_attaches_the_probes() {
    let test = "sighup_detaches_and_attaches_the_probes";
    if !require_root(test) || !require_group(test) {
        return;
    }
    let dir = temp_dir("reload-probes");
    let cg = Group::here("reload-probes", Some(512 << 20));
    let server_port = free_port();
    let mut cmd = monitor_tests::servers::python_http(&dir, "127.0.0.1", server_port);
    let server = monitor_tests::spawn_in_cgroup(&mut cmd, cg.path());
    monitor_tests::http::wait_port(server_port);
    let port = free_port();
    let base =
        Config::new().cgroup(cg.path()).web(SocketAddr::from(([127, 0, 0, 1], port))).set("policy", "interval_ms", 50);
    let file = base.clone().probes(true).write(dir.join("monitor.toml"));
    let agent = Agent::start_args(vec!["agent".into(), "--config".into(), file.display().to_string()], port);
    let requests = |s: &Value| {
        monitor_tests::agent::process(s, server.pid()).and_then(|p| p["requests_total"].as_u64()).unwrap_or(0)
    };
    let serve = || {
        let r = monitor_tests::http::get(SocketAddr::from(([127, 0, 0, 1], server_port)), "/", RELOADED);
        assert!(r.is_ok_and(|r| r.status == 200), "the server in the group answers");
    };
    let s = agent.status();
    assert_eq!(s["probes"]["enabled"], true, "probes must load as root: {}", s["probes"]);
    // Let the sampler put the server in the kernel's filter, then count one request.
    std::thread::sleep(Duration::from_millis(300));
    serve();
    agent.wait_for(|s| requests(s) >= 1, RELOADED);

    base.clone().probes(false).write(&file);
    sighup(agent.pid());
    let s = agent.wait_for(|s| s["probes"]["enabled"] == false, RELOADED);
    assert!(s["probes"]["reason"].as_str().is_some_and(|r| r.contains("disabled in the config")), "{s}");
    assert_eq!(s["config"]["restart_needed"], Value::Array(vec![]), "{s}");

    base.clone().probes(true).write(&file);
    sighup(agent.pid());
    let s = agent.wait_for(|s| s["probes"]["enabled"] == true, RELOADED);
    let counted = requests(&s);
    std::thread::sleep(Duration::from_millis(300));
    serve();
    agent.wait_for(|s| requests(s) > counted, RELOADED);
    assert_eq!(reloads(&agent, "ok"), Some(2));
    drop(agent);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_reload_applies_within_a_second_whatever_the_interval() {
    let test = "a_reload_applies_within_a_second_whatever_the_interval";
    if !require_group(test) {
        return;
    }
    let dir = temp_dir("reload-slow");
    let cg = Group::here("reload-slow", Some(256 << 20));
    let mut hog = Hog::spawn(HOG, cg.path(), 20, false);
    hog.set_mib(190);
    let port = free_port();
    // A sample every 20 s, not paced: without a look for the new config between samples it would wait that long.
    let base = Config::new()
        .cgroup(cg.path())
        .probes(false)
        .web(SocketAddr::from(([127, 0, 0, 1], port)))
        .set("policy", "interval_ms", 20_000)
        .set("policy", "abort_repeat_ms", 20_000)
        .set("policy", "pacing", false);
    let file = base.clone().set("policy", "refuse_at", 0.85).write(dir.join("monitor.toml"));
    let agent = Agent::start_args(vec!["agent".into(), "--config".into(), file.display().to_string()], port);
    let s = agent.wait_for(|s| s["group"]["ratio"].as_f64().is_some_and(|r| r > 0.72), Duration::from_secs(5));
    assert_eq!(s["policy"]["state"], "normal", "{s}");
    let seq = s["sample"]["seq"].as_u64().unwrap_or(0);
    base.clone().set("policy", "refuse_at", 0.7).write(&file);
    sighup(agent.pid());
    let s = agent.wait_for(|s| s["policy"]["state"] == "refusing", Duration::from_secs(3));
    // Looking for a new config is no sample: one came for the reload, none for the looks.
    std::thread::sleep(Duration::from_millis(2500));
    let after = agent.status()["sample"]["seq"].as_u64().unwrap_or(0);
    assert!(after <= seq + 2, "samples {seq} -> {after} in a few seconds of a 20 s interval: {s}");
    let _ = std::fs::remove_dir_all(&dir);
}
