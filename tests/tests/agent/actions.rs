//! `[actions]`: `monitor agent` signals each process of a real memory group when its action changes. A python process
//! that records the signals it gets and an `alloc-hog` share a 256 MiB group: the hog grows to 86% (every process
//! refuses: the recorder gets `refuse_signal`), then to 96% (the hog, the largest, gets `abort_signal`, SIGUSR2,
//! which ends it), and the group is back to normal (the recorder gets `serve_signal`). A twin recorder outside the
//! group gets nothing. Every change is also POSTed to `post_url` (the shared webhook [`Recorder`], python's
//! `http.server`, answering 204); without `[actions] secret_file` they go unsigned, and the agent says so. Shadow
//! mode sends and posts nothing. With `[actions] admin_path`, each process that listens is POSTed its own changes on
//! its own port; with `secret_file`, every POST carries the proof (`X-Monitor-Proof`) that the processes given the
//! same secret check, and that one given another secret refuses.

use monitor_tests::agent::process;
use monitor_tests::config::Config;
use monitor_tests::recorder::Request;
use monitor_tests::{require_group, spawn_in_cgroup, temp_dir, Agent, ChildGuard, Group, Hog, Recorder, MIB};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const HOG: &str = env!("CARGO_BIN_EXE_alloc-hog");
const SETTLE: Duration = Duration::from_secs(10);

/// Appends the name of each of the three signals it gets to the file `argv[1]`, after a first line `ready`.
const RECORDER: &str = r#"
import signal, sys, time
out = open(sys.argv[1], "a", buffering=1)
for s in (signal.SIGWINCH, signal.SIGUSR2, signal.SIGCONT):
    signal.signal(s, lambda n, f: out.write(signal.Signals(n).name + "\n"))
out.write("ready\n")
while True:
    time.sleep(1)
"#;

/// The actions posted so far for `pid`, in the order they were posted.
fn posted_for(hook: &Recorder, pid: u32) -> Vec<String> {
    hook.requests()
        .iter()
        .map(Request::json)
        .filter(|j| j["pid"].as_u64() == Some(u64::from(pid)))
        .map(|j| j["action"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The (pid, action) of every change posted so far, sorted.
fn posted(hook: &Recorder) -> Vec<(u64, String)> {
    let mut v: Vec<(u64, String)> = hook
        .requests()
        .iter()
        .map(Request::json)
        .map(|j| (j["pid"].as_u64().unwrap_or(0), j["action"].as_str().unwrap_or("").to_string()))
        .collect();
    v.sort();
    v
}

fn recorder(file: &Path, cgroup: Option<&Path>) -> ChildGuard {
    let mut cmd = Command::new("python3");
    cmd.args(["-c", RECORDER]).arg(file).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    let child = match cgroup {
        Some(cg) => spawn_in_cgroup(&mut cmd, cg),
        None => ChildGuard::spawn(&mut cmd),
    };
    let deadline = Instant::now() + SETTLE;
    while !std::fs::read_to_string(file).unwrap_or_default().starts_with("ready") {
        assert!(Instant::now() < deadline, "the recorder did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// The signals a recorder got so far.
fn got(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file).unwrap_or_default().lines().skip(1).map(str::to_string).collect()
}

fn wait_got(file: &Path, want: &[&str]) {
    let deadline = Instant::now() + SETTLE;
    while got(file) != want {
        assert!(Instant::now() < deadline, "the recorder got {:?}, want {want:?}", got(file));
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn state(s: &Value) -> Option<&str> {
    s.pointer("/policy/state").and_then(Value::as_str)
}

#[test]
fn processes_get_the_configured_signal_when_their_action_changes() {
    let test = "processes_get_the_configured_signal_when_their_action_changes";
    if !require_group(test) {
        return;
    }
    let dir = temp_dir("actions");
    let cg = Group::here("actions", Some(256 * MIB));
    let (inside, outside) = (dir.join("inside.log"), dir.join("outside.log"));
    let rec = recorder(&inside, Some(cg.path()));
    let _twin = recorder(&outside, None);
    let mut hog = Hog::spawn(HOG, cg.path(), 64, false);
    let posts = Recorder::start(&[], 204);
    let config = Config::new()
        .set("actions", "refuse_signal", "SIGWINCH")
        .set("actions", "abort_signal", "SIGUSR2")
        .set("actions", "serve_signal", "SIGCONT")
        .set("actions", "post_url", posts.url("/actions"));
    let agent = Agent::with_config(&cg.path().display().to_string(), &config, &dir);
    let listed = |s: &Value, pid: u32| process(s, pid).is_some();
    agent.wait_for(|s| state(s) == Some("normal") && listed(s, rec.pid()) && listed(s, hog.pid()), SETTLE);
    assert_eq!(got(&inside), Vec::<String>::new(), "nothing is sent while every process serves");

    // 86% of the limit: everyone refuses; the recorder is told once.
    hog.set_mib(215);
    agent.wait_for(|s| state(s) == Some("refusing"), SETTLE);
    wait_got(&inside, &["SIGWINCH"]);
    // 96%: the hog is the largest and aborts (SIGUSR2 ends it); the recorder keeps refusing, with no new signal.
    // Then the group is back to normal and the recorder may serve again.
    // (The hog may get SIGUSR2 before it has finished growing: its acknowledgement is not waited for.)
    hog.ask_mib(240);
    agent.wait_for(|s| state(s) == Some("normal") && !listed(s, hog.pid()), SETTLE);
    wait_got(&inside, &["SIGWINCH", "SIGCONT"]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(got(&inside), ["SIGWINCH", "SIGCONT"], "one signal per change of action");
    assert_eq!(got(&outside), Vec::<String>::new(), "a process outside the group was signalled");
    // Every change, posted: both refuse, the hog aborts, the recorder serves again. The kernel wake-ups sample the
    // group while the hog's memory is torn down after SIGUSR2: it may be sampled again on the way down, then told to
    // refuse (the group back in refusing) and to serve (back to normal) before it leaves the group.
    let deadline = Instant::now() + SETTLE;
    let hog_ok = |v: &[String]| {
        v.len() >= 2 && v[..2] == ["refuse", "abort"] && v[2..].iter().all(|a| a == "refuse" || a == "serve")
    };
    while (posted_for(&posts, rec.pid()) != ["refuse", "serve"] || !hog_ok(&posted_for(&posts, hog.pid())))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(posted_for(&posts, rec.pid()), ["refuse", "serve"], "the recorder's posted changes");
    let hog_posted = posted_for(&posts, hog.pid());
    assert!(hog_ok(&hog_posted), "the hog's posted changes: refuse, abort, then only its teardown: {hog_posted:?}");
    assert_eq!(posted(&posts).len(), 2 + hog_posted.len(), "only the group's processes: {:?}", posted(&posts));
    // No secret_file: unsigned, and said so.
    let proofs: Vec<Request> = posts.requests().into_iter().filter(|r| r.header("x-monitor-proof").is_some()).collect();
    assert_eq!(proofs, Vec::<Request>::new(), "a proof without a secret");
    assert!(
        agent.stderr().contains("go unsigned"),
        "the agent did not say its POSTs are unsigned:\n{}",
        agent.stderr()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn shadow_mode_sends_no_signal() {
    let test = "shadow_mode_sends_no_signal";
    if !require_group(test) {
        return;
    }
    let dir = temp_dir("actions-shadow");
    let cg = Group::here("actions-shadow", Some(256 * MIB));
    let log = dir.join("inside.log");
    let _rec = recorder(&log, Some(cg.path()));
    let mut hog = Hog::spawn(HOG, cg.path(), 215, false);
    let posts = Recorder::start(&[], 204);
    let config = Config::new()
        .set("policy", "shadow", true)
        .set("actions", "refuse_signal", "SIGWINCH")
        .set("actions", "abort_signal", "SIGUSR2")
        .set("actions", "post_url", posts.url("/actions"));
    let agent = Agent::with_config(&cg.path().display().to_string(), &config, &dir);
    agent.wait_for(|s| state(s) == Some("refusing"), SETTLE);
    hog.set_mib(240);
    let s = agent.wait_for(|s| state(s) == Some("aborting"), SETTLE);
    assert_eq!(s.pointer("/policy/shadow"), Some(&Value::Bool(true)), "{s:#}");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(got(&log), Vec::<String>::new(), "shadow mode sent a signal");
    assert_eq!(posted(&posts), Vec::<(u64, String)>::new(), "shadow mode posted a change");
    // The hog, the victim, is still there: SIGUSR2 would have ended it.
    let s = agent.status();
    let hog_listed = process(&s, hog.pid()).is_some();
    assert!(hog_listed, "the victim was signalled in shadow mode: {s:#}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `/stats` of the `fixture-backend` on `port`.
fn stats(port: u16) -> Value {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let r = monitor_tests::http::get(addr, "/stats", Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("GET /stats on {port}: {e}"));
    serde_json::from_str(&r.text()).unwrap_or_else(|e| panic!("/stats on {port}: {e}"))
}

/// The action changes a `fixture-backend` on `port` was POSTed on its admin endpoint and acted on.
fn told(port: u16) -> Vec<String> {
    let v = stats(port);
    v["admin"].as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

fn wait_told(port: u16, want: &[&str]) {
    let deadline = Instant::now() + SETTLE;
    while told(port) != want {
        assert!(Instant::now() < deadline, "the process on {port} was told {:?}, want {want:?}", told(port));
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn each_listening_process_is_told_on_its_own_port() {
    let test = "each_listening_process_is_told_on_its_own_port";
    if !require_group(test) {
        return;
    }
    let dir = temp_dir("actions-admin");
    let cg = Group::here("actions-admin", Some(256 * MIB));
    // The group's secret, in the file the agent reads and, as hex, in the environment of the processes.
    let secret = b"the group's action secret, 32 bytes or more";
    let secret_file = dir.join("action.secret");
    monitor_tests::write_secret(&secret_file, &[&secret[..], b"\n"].concat());
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let fixture = |name: &str, port: u16, cgroup: Option<&Path>, secret: &[u8]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fixture-backend"));
        cmd.args(["--name", name, "--port", &port.to_string()]).stdout(Stdio::null()).stderr(Stdio::null());
        cmd.env(monitor::base::proof::SECRET_ENV, hex(secret));
        let child = match cgroup {
            Some(cg) => spawn_in_cgroup(&mut cmd, cg),
            None => ChildGuard::spawn(&mut cmd),
        };
        monitor_tests::http::wait_port(port);
        child
    };
    let ports: Vec<u16> = (0..4).map(|_| monitor_tests::agent::free_port()).collect();
    let m0 = fixture("m0", ports[0], Some(cg.path()), secret);
    let tx1 = fixture("tx1", ports[1], Some(cg.path()), secret);
    let _twin = fixture("twin", ports[2], None, secret);
    // In the group, but given another secret: it refuses every POST it gets.
    let stranger = fixture("stranger", ports[3], Some(cg.path()), b"another secret, also 32 bytes or more");
    let mut hog = Hog::spawn(HOG, cg.path(), 64, false);
    let posts = Recorder::start(&[], 204);
    let config = Config::new()
        .set("actions", "admin_path", "/admin/memory")
        .set("actions", "post_url", posts.url("/actions"))
        .set("actions", "secret_file", secret_file.display().to_string());
    let agent = Agent::with_config(&cg.path().display().to_string(), &config, &dir);
    let listed = |s: &Value, pid: u32| process(s, pid).is_some();
    agent.wait_for(|s| state(s) == Some("normal") && [&m0, &tx1, &stranger].iter().all(|c| listed(s, c.pid())), SETTLE);

    // Over 85%: every process refuses; each one that listens is told on its own port (the hog listens on nothing).
    hog.set_mib(222);
    agent.wait_for(|s| state(s) == Some("refusing"), SETTLE);
    wait_told(ports[0], &["refuse"]);
    wait_told(ports[1], &["refuse"]);
    hog.set_mib(40);
    agent.wait_for(|s| state(s) == Some("normal"), SETTLE);
    wait_told(ports[0], &["refuse", "serve"]);
    wait_told(ports[1], &["refuse", "serve"]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        (told(ports[0]), told(ports[1])),
        (vec!["refuse".to_string(), "serve".into()], vec!["refuse".to_string(), "serve".into()]),
        "one POST per change"
    );
    assert_eq!(told(ports[2]), Vec::<String>::new(), "a process outside the group was told");
    // Each POST proved itself to the processes given the secret; the one given another refused both of its own.
    for port in &ports[..2] {
        assert_eq!(stats(*port)["rejected"], serde_json::json!([]), "on {port}");
    }
    assert_eq!(told(ports[3]), Vec::<String>::new(), "a POST was taken with another secret");
    assert_eq!(stats(ports[3])["rejected"], serde_json::json!(["bad mac", "bad mac"]));
    assert!(!agent.stderr().contains("go unsigned"), "{}", agent.stderr());
    // post_url's POSTs carry the proof too, each with a nonce of its own, made with the file's secret for the
    // recorder's authority, which their Host header names.
    let authority = format!("127.0.0.1:{}", posts.port());
    let key = monitor::base::proof::Key::new(secret).expect("a long secret");
    let mut verifier = monitor::base::proof::Verifier::new(key, &authority);
    let got = posts.requests();
    assert_eq!(got.len(), 8, "the four processes of the group refused, then served: {got:#?}");
    for r in &got {
        let proof = r.header("x-monitor-proof");
        assert_eq!(r.header("host"), Some(authority.as_str()), "{r:#?}");
        assert_eq!(verifier.verify(proof, &r.method, &r.path, r.body.as_bytes()), Ok(()), "{r:#?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
