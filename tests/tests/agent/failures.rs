//! `monitor agent` when the world misbehaves, with the real binary against real cgroups: the group removed and
//! created again, emptied and refilled; a stats database that is locked, in a folder that cannot be made, or
//! garbage; alert sinks that hang, refuse or fail; bad API input; `monitor status` against nothing or a server that
//! is not a monitor. In each case the agent keeps running, says what happened once, and loses nothing it can keep.

use monitor_tests::agent::{free_port, process};
use monitor_tests::config::Config;
use monitor_tests::{
    require, require_group, run_monitor, spawn_in_cgroup, temp_dir, wait_until, Agent, ChildGuard, Group, Recorder,
};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// An agent on `cgroup` with `config`, the probes off (these tests are about everything else), written into `dir`.
fn agent_with(cgroup: &str, config: Config, dir: &Path) -> Agent {
    Agent::with_config(cgroup, &config.probes(false), dir)
}

/// How many lines of the agent's log contain `needle`.
fn log_count(agent: &Agent, needle: &str) -> usize {
    agent.stderr().lines().filter(|l| l.contains(needle)).count()
}

fn sleeper(cg: &Group) -> ChildGuard {
    spawn_in_cgroup(Command::new("sleep").arg("600").stdout(Stdio::null()), cg.path())
}

/// The home page, `/livez` and `/metrics` answer 200 (whatever else is failing; `/healthz` says whether the group
/// is read).
fn web_still_works(agent: &Agent) {
    for path in ["/livez", "/", "/metrics", "/api/v1/status"] {
        let (code, body) = agent.get(path);
        assert_eq!(code, 200, "GET {path}: {body}");
    }
}

#[test]
fn a_removed_group_is_said_once_and_picked_up_when_created_again() {
    let test = "a_removed_group_is_said_once_and_picked_up_when_created_again";
    if !require_group(test) {
        return;
    }
    let dir = temp_dir("removed");
    let cg = Group::here("removed", None);
    let mut first = sleeper(&cg);
    // Alerts to a command that appends each one (a JSON line) to a file.
    let alerts = dir.join("alerts.jsonl");
    let hook = format!("cat >> '{}'; echo >> '{}'", alerts.display(), alerts.display());
    let extra = Config::new().alert_command(["sh", "-c", &hook]).set("alerts", "quiet_s", 1);
    let agent = agent_with(&cg.path().display().to_string(), extra, &dir);
    let unreadable = |status: &str| {
        let text = std::fs::read_to_string(&alerts).unwrap_or_default();
        text.lines()
            .filter(|l| l.contains("MonitorGroupUnreadable") && l.contains(&format!("\"status\":\"{status}\"")))
            .count()
    };
    let pid = first.pid();
    agent.wait_for(|s| process(s, pid).is_some(), Duration::from_secs(5));

    // Every process gone, then the directory.
    first.kill();
    agent.wait_for(|s| s["processes"].as_array().is_some_and(Vec::is_empty), Duration::from_secs(5));
    std::fs::remove_dir(cg.path()).unwrap_or_else(|e| panic!("rmdir {}: {e}", cg.path().display()));
    let gone = agent.wait_for(|s| s["group"]["error"].is_string(), Duration::from_secs(5));
    let error = gone["group"]["error"].as_str().unwrap_or_default().to_string();
    assert!(error.contains(&cg.path().display().to_string()), "the error names the group: {error}");
    assert!(error.contains("does not exist"), "the error says the group is gone, in words: {error}");
    // A second of samples later: still said the same way, and logged once.
    std::thread::sleep(Duration::from_secs(1));
    let still = agent.status();
    assert_eq!(still["group"]["error"].as_str(), Some(error.as_str()), "one clear reason, not a changing one");
    wait_until("the failure's log line", Duration::from_secs(5), || {
        (log_count(&agent, "sample failed") >= 1).then_some(())
    });
    assert_eq!(log_count(&agent, "sample failed"), 1, "logged once, not per sample:\n{}", agent.stderr());
    web_still_works(&agent);
    let (code, health) = agent.get("/healthz");
    assert_eq!(code, 503, "degraded while the group is gone: {health}");
    assert!(health.contains("does not exist"), "{health}");
    let (_, metrics) = agent.get("/metrics");
    assert!(metrics.contains("monitor_sample_ok 0"), "{metrics}");
    let (_, page) = agent.get("/");
    assert!(page.contains("does not exist"), "the home page says so");
    wait_until("the alert", Duration::from_secs(3), || (unreadable("firing") >= 1).then_some(()));
    assert_eq!(unreadable("firing"), 1, "one alert for the whole time it is gone");

    // Created again, with a new process: the agent watches it again.
    std::fs::create_dir(cg.path()).unwrap_or_else(|e| panic!("mkdir {}: {e}", cg.path().display()));
    let second = sleeper(&cg);
    let pid = second.pid();
    let back = agent.wait_for(|s| s["group"]["error"].is_null() && process(s, pid).is_some(), Duration::from_secs(5));
    assert_eq!(back["policy"]["state"], "normal");
    // The agent logs before it publishes, but its stderr reaches the test through a reader thread: wait for the line.
    wait_until("the recovery's log line", Duration::from_secs(5), || {
        (log_count(&agent, "group readable again") >= 1).then_some(())
    });
    assert_eq!(log_count(&agent, "group readable again"), 1, "{}", agent.stderr());
    assert_eq!(log_count(&agent, "sample failed"), 1, "{}", agent.stderr());
    wait_until("the alert to resolve", Duration::from_secs(5), || (unreadable("resolved") == 1).then_some(()));
    assert_eq!(unreadable("firing"), 1);
    drop(second);
    drop(agent);
    drop(cg);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_emptied_group_is_watched_on_and_new_processes_are_seen() {
    let test = "an_emptied_group_is_watched_on_and_new_processes_are_seen";
    if !require_group(test) {
        return;
    }
    let dir = temp_dir("emptied");
    let cg = Group::here("emptied", Some(256 << 20));
    let mut first = sleeper(&cg);
    let agent = agent_with(&cg.path().display().to_string(), Config::new(), &dir);
    let pid = first.pid();
    agent.wait_for(|s| process(s, pid).is_some(), Duration::from_secs(5));
    first.kill();
    let empty = agent.wait_for(|s| s["processes"].as_array().is_some_and(Vec::is_empty), Duration::from_secs(5));
    assert!(empty["group"]["error"].is_null(), "an empty group is not an error: {empty}");
    assert_eq!(empty["policy"]["state"], "normal");
    assert!(empty["policy"]["largest_pid"].is_null(), "{empty}");
    let seq = empty["sample"]["seq"].as_u64().unwrap_or(0);
    std::thread::sleep(Duration::from_millis(500));
    assert!(agent.status()["sample"]["seq"].as_u64().unwrap_or(0) > seq, "sampling goes on");
    // New processes, one of them in a child group created after the agent started.
    let second = sleeper(&cg);
    let child = cg.subgroup("late");
    let third = spawn_in_cgroup(Command::new("sleep").arg("600"), child.path());
    let (p2, p3) = (second.pid(), third.pid());
    agent.wait_for(|s| process(s, p2).is_some() && process(s, p3).is_some(), Duration::from_secs(5));
    let (code, body) = agent.get(&format!("/api/v1/decision?pid={p2}"));
    assert_eq!(code, 200, "{body}");
    assert!(!agent.stderr().contains("ERROR"), "nothing went wrong:\n{}", agent.stderr());
    drop((third, second, child));
    drop(agent);
    drop(cg);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Holds an exclusive lock on the SQLite database at argv[1] (rollback journal, so readers and writers both wait)
/// until it is killed; prints `locked` once it holds it.
const LOCKER: &str = r#"
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("PRAGMA journal_mode=DELETE")
c.execute("CREATE TABLE IF NOT EXISTS held(x)")
c.execute("BEGIN EXCLUSIVE")
c.execute("INSERT INTO held VALUES (1)")
print("locked", flush=True)
time.sleep(600)
"#;

fn metric(agent: &Agent, name: &str) -> Option<String> {
    let (_, text) = agent.get("/metrics");
    text.lines().find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')).map(|v| v.trim().to_string()))
}

/// An agent on its own cgroup (no test group needed) with `extra` config.
fn own_group_agent(dir: &Path, extra: Config) -> Agent {
    agent_with("auto", extra, dir)
}

#[test]
fn a_database_locked_at_start_is_opened_once_the_lock_is_gone() {
    let test = "a_database_locked_at_start_is_opened_once_the_lock_is_gone";
    if !require(Path::new("/usr/bin/python3").exists(), test, "needs python3") {
        return;
    }
    let dir = temp_dir("locked");
    let db = dir.join("stats.db");
    let mut locker = ChildGuard::spawn(
        Command::new("python3").args(["-c", LOCKER]).arg(&db).stdout(Stdio::piped()).stderr(Stdio::null()),
    );
    let mut line = String::new();
    if let Some(out) = locker.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    assert_eq!(line.trim(), "locked", "the locker did not take its lock");
    let agent = own_group_agent(&dir, Config::new().stats(&db));
    // It started, says why nothing is written, and serves everything.
    assert_eq!(metric(&agent, "monitor_history_persisted").as_deref(), Some("0"));
    let (_, page) = agent.get("/");
    assert!(page.contains("history is not persisted") && page.contains("locked"), "the page says why");
    web_still_works(&agent);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(log_count(&agent, "history is not persisted"), 1, "logged once:\n{}", agent.stderr());
    // The lock goes away: the database is opened without a restart.
    drop(locker);
    wait_until("the database to be opened", Duration::from_secs(20), || {
        (metric(&agent, "monitor_history_persisted").as_deref() == Some("1")).then_some(())
    });
    assert_eq!(log_count(&agent, "history is not persisted"), 1, "{}", agent.stderr());
    assert!(agent.stderr().contains("stats database open"), "{}", agent.stderr());
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_database_where_none_can_be_made_is_said_once_and_the_agent_serves_on() {
    let dir = temp_dir("unwritable");
    // The folder cannot be created: its parent is a file (root ignores permission bits, so this is the reliable
    // "not writable" here).
    let file = dir.join("a-file");
    std::fs::write(&file, "x").unwrap_or_else(|e| panic!("{e}"));
    let db = file.join("stats.db");
    let agent = own_group_agent(&dir, Config::new().stats(&db));
    web_still_works(&agent);
    let (_, page) = agent.get("/");
    assert!(page.contains("history is not persisted"), "the page says so");
    assert_eq!(metric(&agent, "monitor_history_persisted").as_deref(), Some("0"));
    let seq = agent.status()["sample"]["seq"].as_u64().unwrap_or(0);
    std::thread::sleep(Duration::from_secs(6));
    assert!(agent.status()["sample"]["seq"].as_u64().unwrap_or(0) > seq + 20, "sampling goes on");
    assert_eq!(log_count(&agent, "history is not persisted"), 1, "logged once:\n{}", agent.stderr());
    assert!(agent.stderr().contains(&file.display().to_string()), "the log names the folder");
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_garbage_database_is_said_once_and_left_untouched() {
    let dir = temp_dir("garbage");
    let db = dir.join("stats.db");
    let garbage: Vec<u8> = (0..16384u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&db, &garbage).unwrap_or_else(|e| panic!("{e}"));
    let agent = own_group_agent(&dir, Config::new().stats(&db));
    web_still_works(&agent);
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(log_count(&agent, "history is not persisted"), 1, "logged once:\n{}", agent.stderr());
    assert_eq!(std::fs::read(&db).ok().as_deref(), Some(garbage.as_slice()), "the operator's file is not changed");
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Accepts connections and never answers (nor reads), holding each one open.
const SILENT: &str = r#"
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', int(sys.argv[1])))
s.listen(64)
held = []
while True:
    c, _ = s.accept()
    held.append(c)
"#;

/// Starts the alerting agent on a group with one process whose limit (`[policy] limit_bytes`) it is far over, so
/// it is aborting (in shadow mode: nothing enforced; the last resort off, so the transitions are all it alerts) from
/// its first sample.
fn alerting_agent(dir: &Path, cg: &Group, alerts: &str) -> Agent {
    let extra = Config::new()
        .lines("policy", "limit_bytes = 4096\nshadow = true\nkill = false")
        .lines("alerts", "quiet_s = 1\nresend_s = 1")
        .lines("alerts", alerts);
    agent_with(&cg.path().display().to_string(), extra, dir)
}

#[test]
fn hung_refused_and_failing_sinks_block_nothing_and_are_said_once() {
    let test = "hung_refused_and_failing_sinks_block_nothing_and_are_said_once";
    if !require_group(test) || !require(Path::new("/usr/bin/python3").exists(), test, "needs python3") {
        return;
    }
    let dir = temp_dir("sinks");
    // An Alertmanager stand-in that takes every batch.
    let am = Recorder::start(&[], 200);
    let silent_port = free_port();
    let _silent = ChildGuard::spawn(Command::new("python3").args(["-c", SILENT, &silent_port.to_string()]));
    monitor_tests::http::wait_port(silent_port);
    let refused_port = free_port(); // nothing listens there

    // A command that hangs (killed after 1 s), a webhook that never answers, an Alertmanager that works.
    let cg = Group::here("sinks", None);
    let _p = sleeper(&cg);
    let alerts = format!(
        "command = [\"sleep\", \"600\"]\ncommand_timeout_s = 1\nwebhook = \"http://127.0.0.1:{silent_port}/hook\"\n\
         alertmanager = \"{am}\"\n",
        am = am.url("")
    );
    let agent = alerting_agent(&dir, &cg, &alerts);
    let started = Instant::now();
    wait_until("the working sink to get the alerts", Duration::from_secs(5), || {
        am.requests().iter().any(|r| r.body.contains("MonitorGroupAborting")).then_some(())
    });
    assert!(started.elapsed() < Duration::from_secs(4), "the working sink waited {:?}", started.elapsed());
    // The sampler never waited: a sample every 50 ms throughout.
    let seq = agent.status()["sample"]["seq"].as_u64().unwrap_or(0);
    std::thread::sleep(Duration::from_secs(5));
    let now = agent.status();
    assert!(now["sample"]["seq"].as_u64().unwrap_or(0) >= seq + 50, "sampling slowed: {seq} -> {now}");
    web_still_works(&agent);
    // The Alertmanager re-sends kept arriving (resend_s = 1) despite the hung sinks.
    assert!(am.requests().len() >= 4, "re-sends: {:#?}", am.requests());
    // The command timed out for each notification it got, and said so as a warning each time; the webhook is
    // reported down once.
    let log = agent.stderr();
    assert!(log_count(&agent, "alert command timed out") >= 1, "{log}");
    assert!(log.lines().filter(|l| l.contains("alert command timed out")).all(|l| l.contains("WARN")), "{log}");
    assert!(log_count(&agent, "alert sink is down") <= 1, "reported once:\n{log}");
    drop(agent);

    // A refused webhook and Alertmanager, and a command that fails: each said clearly; a refused sink once, though
    // the Alertmanager is sent a batch every second (resend_s = 1), each failing after its 5 attempts (7.5 s).
    let alerts = format!(
        "command = [\"sh\", \"-c\", \"echo cannot page >&2; exit 3\"]\nwebhook = \"http://127.0.0.1:{refused_port}/hook\"\n\
         alertmanager = \"http://127.0.0.1:{refused_port}\"\n"
    );
    let agent = alerting_agent(&dir, &cg, &alerts);
    wait_until("the failing command to be said", Duration::from_secs(3), || {
        (log_count(&agent, "alert command failed") >= 2).then_some(())
    });
    // Two or three of the Alertmanager's batches have failed by now.
    std::thread::sleep(Duration::from_secs(23));
    let log = agent.stderr();
    let down = |sink: &str| log.lines().filter(|l| l.contains("alert sink is down") && l.contains(sink)).count();
    assert_eq!((down("\"webhook\""), down("\"alertmanager\"")), (1, 1), "each reported once:\n{log}");
    // The group's two alerts (a recycle, decided in shadow mode once the group has refused 20 s, is another).
    let failed: Vec<&str> =
        log.lines().filter(|l| l.contains("alert command failed") && l.contains("alert=\"MonitorGroup")).collect();
    assert_eq!(failed.len(), 2, "one warning per notification (refusing, aborting):\n{log}");
    assert!(failed.iter().all(|l| l.contains("WARN") && l.contains("exit status: 3") && l.contains("cannot page")));
    web_still_works(&agent);
    drop(agent);
    drop(cg);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_api_input_gets_400_or_404_with_a_body_never_a_500() {
    let dir = temp_dir("api");
    let agent = own_group_agent(&dir, Config::new());
    let me = agent.pid();
    let cases: Vec<(String, u16)> = vec![
        ("/api/v1/decision?pid=abc".into(), 400),
        ("/api/v1/decision?pid=-1".into(), 400),
        ("/api/v1/decision?pid=".into(), 400),
        ("/api/v1/decision?pid=99999999".into(), 404),
        ("/api/v1/decision?pid=4294967296".into(), 400),
        ("/api/v1/decision".into(), 400),
        ("/api/v1/decision?pid=1&pid=2".into(), 400),
        ("/api/v1/decision?pid=%ff%fe".into(), 400),
        (format!("/api/v1/decision?pid={me}"), 200),
        ("/api/v1/dashboard?range=forever".into(), 400),
        ("/nope".into(), 404),
        ("/api/v1/nope".into(), 404),
        ("/api/v2/status".into(), 404),
    ];
    for (path, want) in &cases {
        let (code, body) = agent.get(path);
        assert_eq!(code, *want, "GET {path}: {body}");
        assert!(!body.trim().is_empty(), "GET {path}: {code} with an empty body");
    }
    // A huge query string: refused (4xx), the agent unharmed.
    let huge = format!("/api/v1/decision?pid={}", "1".repeat(200_000));
    match monitor_tests::http::get(agent.addr(), &huge, Duration::from_secs(5)) {
        Ok(r) => assert!((400..500).contains(&r.status), "huge query: {}", r.status),
        Err(e) => assert!(e.contains("reset") || e.contains("Broken pipe"), "huge query: {e}"),
    }
    // HEAD: the headers of the GET, no body.
    let head = raw_exchange(agent.addr(), "HEAD /api/v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: application/json"), "{head}");
    assert!(head.ends_with("\r\n\r\n"), "HEAD answered with a body: {head}");
    // Another method on a GET route: 405 with a body.
    let post = monitor_tests::http::request(agent.addr(), "POST", "/api/v1/status", &[], Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("POST: {e}"));
    assert_eq!(post.status, 405);
    assert!(!post.text().trim().is_empty(), "405 with an empty body");
    web_still_works(&agent);
    assert!(!agent.stderr().contains("panicked"), "{}", agent.stderr());
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sends `request` as is and returns everything the server wrote until it closed (5 s limits).
fn raw_exchange(addr: std::net::SocketAddr, request: &str) -> String {
    use std::io::{Read, Write};
    let t = Duration::from_secs(5);
    let mut s = std::net::TcpStream::connect_timeout(&addr, t).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let _ = s.set_read_timeout(Some(t));
    s.write_all(request.as_bytes()).unwrap_or_else(|e| panic!("send: {e}"));
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn assert_one_clear_line(out: &monitor_tests::Finished, what: &str, words: &[&str]) {
    assert!(!out.status.success(), "{what}: exit 0; stdout: {}", out.stdout);
    assert!(out.stdout.trim().is_empty(), "{what}: nothing on stdout, got {}", out.stdout);
    let err = out.stderr.trim();
    assert_eq!(err.lines().count(), 1, "{what}: one line, got:\n{err}");
    assert!(!err.contains("panicked"), "{what}: {err}");
    for w in words {
        assert!(err.contains(w), "{what}: {w:?} not in {err}");
    }
}

#[test]
fn status_against_nothing_or_not_a_monitor_fails_with_one_clear_line() {
    let test = "status_against_nothing_or_not_a_monitor_fails_with_one_clear_line";
    if !require(Path::new("/usr/bin/python3").exists(), test, "needs python3") {
        return;
    }
    let t = Duration::from_secs(20);
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    for json in [false, true] {
        let mut args = vec!["status", "--url", &url];
        if json {
            args.push("--json");
        }
        assert_one_clear_line(&run_monitor(&args, t), "nothing listening", &[&format!("127.0.0.1:{port}")]);
    }
    // A web server that is not a monitor: HTML at /api/v1/status.
    let dir = temp_dir("not-monitor");
    std::fs::create_dir_all(dir.join("api/v1")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.join("api/v1/status"), "<!doctype html><html><body>hello</body></html>\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let _server = ChildGuard::spawn(
        Command::new("python3")
            .args(["-m", "http.server", &port.to_string(), "--bind", "127.0.0.1", "-d"])
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    monitor_tests::http::wait_port(port);
    for json in [false, true] {
        let mut args = vec!["status", "--url", &url];
        if json {
            args.push("--json");
        }
        let out = run_monitor(&args, t);
        assert_one_clear_line(&out, &format!("an HTML server (json: {json})"), &[&url, "not a monitor"]);
    }
    // Valid JSON that is not a status document (a JSON API of something else).
    std::fs::write(dir.join("api/v1/status"), "{\"status\": \"green\"}\n").unwrap_or_else(|e| panic!("{e}"));
    for json in [false, true] {
        let mut args = vec!["status", "--url", &url];
        if json {
            args.push("--json");
        }
        let out = run_monitor(&args, t);
        assert_one_clear_line(&out, &format!("another JSON API (json: {json})"), &[&url, "not a monitor"]);
    }
    // A server that accepts the connection and never answers: a time limit, not a hang.
    drop(_server);
    let _silent = ChildGuard::spawn(Command::new("python3").args(["-c", SILENT, &port.to_string()]));
    monitor_tests::http::wait_port(port);
    let out = run_monitor(&["status", "--url", &url], t);
    assert_one_clear_line(&out, "a server that never answers", &[&url, "no answer within 10 s"]);
    assert!(out.elapsed < Duration::from_secs(15), "took {:?}", out.elapsed);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The pids of processes whose command line is exactly `argv` (NUL-separated in /proc/<pid>/cmdline).
fn pids_running(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain(std::iter::once(0))).collect();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .collect()
}

/// Kills what a test's alert command left behind (they are ours: started by the agent the test started).
fn kill_leftovers(argv: &[&str]) {
    for pid in pids_running(argv) {
        if let Ok(pid) = libc::pid_t::try_from(pid) {
            // SAFETY: kill has no memory-safety preconditions; the process was started by this test's agent.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

#[test]
fn an_alert_command_is_done_when_it_exits_and_a_hung_one_is_killed_with_its_children() {
    let test = "an_alert_command_is_done_when_it_exits_and_a_hung_one_is_killed_with_its_children";
    if !require_group(test) {
        return;
    }
    let dir = temp_dir("command-children");
    let cg = Group::here("command-children", None);
    let _p = sleeper(&cg);
    // Leaves a background child holding its stdout, and exits 0 at once: it ran, promptly, and its child is its
    // own business.
    let background = ["sleep", "597.25"];
    let alerts = "command = [\"sh\", \"-c\", \"sleep 597.25 & echo started\"]\ncommand_timeout_s = 3\n";
    let agent = alerting_agent(&dir, &cg, alerts);
    wait_until("the command to be logged as run", Duration::from_secs(2), || {
        (log_count(&agent, "alert command ran") >= 2).then_some(())
    });
    assert_eq!(log_count(&agent, "timed out"), 0, "{}", agent.stderr());
    assert!(agent.stderr().contains("started"), "its output is logged: {}", agent.stderr());
    drop(agent);
    kill_leftovers(&background);

    // Hangs in a child of its own (the shell waits for it): killed at the time limit, child included.
    let hung = ["sleep", "596.75"];
    let alerts = "command = [\"sh\", \"-c\", \"sleep 596.75; echo never\"]\ncommand_timeout_s = 1\n";
    let agent = alerting_agent(&dir, &cg, alerts);
    // Two notifications (refusing, aborting), each run killed after its second.
    wait_until("both runs to time out", Duration::from_secs(6), || {
        (log_count(&agent, "alert command timed out") >= 2).then_some(())
    });
    std::thread::sleep(Duration::from_millis(300));
    let orphans = pids_running(&hung);
    drop(agent);
    kill_leftovers(&hung);
    assert!(orphans.is_empty(), "the agent's hung alert commands left {orphans:?} running");
    drop(cg);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether the peer closed `s` within `within` (a read of 0 bytes or a reset), rather than holding it open.
fn closed_within(s: &mut std::net::TcpStream, within: Duration) -> bool {
    use std::io::Read;
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 512];
    while Instant::now() < deadline {
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {} // an error response (408) before the close is fine
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn idle_and_slow_clients_do_not_hold_the_api_open() {
    use std::io::Write;
    let dir = temp_dir("idle");
    let agent = own_group_agent(&dir, Config::new());
    let connect = || {
        std::net::TcpStream::connect_timeout(&agent.addr(), Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("connect: {e}"))
    };
    // One sends nothing, one half a request head, one a request and then stays idle on keep-alive.
    let mut idle = connect();
    let mut slow = connect();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").unwrap_or_else(|e| panic!("{e}"));
    let mut kept = connect();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap_or_else(|e| panic!("{e}"));
    let started = Instant::now();
    // Meanwhile the API answers others.
    web_still_works(&agent);
    for (name, s) in [("idle", &mut idle), ("slow", &mut slow), ("kept-alive", &mut kept)] {
        let left = Duration::from_secs(20).saturating_sub(started.elapsed());
        assert!(closed_within(s, left), "the {name} connection is still open after {:?}", started.elapsed());
    }
    web_still_works(&agent);
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn connections_past_the_limit_close_the_longest_idle_and_sampling_goes_on() {
    let dir = temp_dir("many");
    let agent = own_group_agent(&dir, Config::new());
    let seq = agent.status()["sample"]["seq"].as_u64().unwrap_or(0);
    // 256 connections are served at once (`[web] max_connections`, its default); these are more, and send nothing.
    let mut held: Vec<std::net::TcpStream> = (0..300)
        .map(|_| {
            std::net::TcpStream::connect_timeout(&agent.addr(), Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("connect: {e}"))
        })
        .collect();
    // A probe past the limit is answered: the longest-idle connections were closed to make room.
    let probe = monitor_tests::http::get(agent.addr(), "/healthz", Duration::from_secs(2));
    assert_eq!(probe.map(|r| r.status), Ok(200), "a probe gets through 300 idle connections");
    assert!(closed_within(&mut held[0], Duration::from_secs(5)), "the first connection held made room");
    let status = wait_until("sampling to go on", Duration::from_secs(10), || {
        let s = agent.status();
        (s["sample"]["seq"].as_u64().unwrap_or(0) > seq + 20).then_some(s)
    });
    assert!(status["group"]["error"].is_null(), "{status}");
    drop(held);
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}
