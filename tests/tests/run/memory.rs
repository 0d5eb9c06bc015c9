//! Shedding and aborting driven by a real memory cgroup (256 MiB) whose usage is pushed over the lines: an
//! `alloc-hog` in the group takes it past refuse_at (85%): new requests get 503 + Retry-After naming the memory
//! guard, health paths still pass; a worker holding memory for a slow request plus the hog take it past abort_at
//! (92%): the worker, now the largest, has its in-flight request cancelled (503 naming the memory guard), or its
//! answer under way cut, abandons it and frees the memory, and the group goes back to normal. Each process is told
//! of its own action changes on its admin endpoint (`[[process]] admin_path`), with the agent's proof it checks,
//! which no client of the front door can reach, whatever shape its path takes (403, and the process hears nothing);
//! nor `[actions] post_url`'s path when it points at a process of the group. The POSTs and the decision log name the
//! victim by its configured name. In shadow mode nothing is enforced and nobody is told.

use monitor_tests::require_group;
use monitor_tests::run::{member, served_by, Run, Spec, TIMEOUT};
use monitor_tests::Hog;
use serde_json::Value;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const HOG: &str = env!("CARGO_BIN_EXE_alloc-hog");

fn state(s: &Value) -> &str {
    s.pointer("/policy/state").and_then(Value::as_str).unwrap_or("?")
}

fn spec(shadow: bool) -> Spec {
    Spec {
        workers: 1,
        limit_mib: 256,
        proxy: "master_serves_tx = false\nretry_after_s = 7\nadmin_paths = [\"^/stats$\"]".into(),
        policy: format!("shadow = {shadow}\nabort_repeat_ms = 60000"),
        // Each process is also told of its own action changes on its admin endpoint.
        process: "admin_path = \"/admin/memory\"\n".into(),
        ..Spec::default()
    }
}

/// The action changes process `i` was POSTed on its admin endpoint, in order.
fn admin(run: &Run, i: usize) -> Vec<String> {
    let s = run.stats(i);
    s["admin"].as_array().map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

/// Waits until process `i` was told exactly `want`.
fn wait_admin(run: &Run, i: usize, want: &[&str]) {
    let deadline = std::time::Instant::now() + TIMEOUT;
    while admin(run, i) != want {
        assert!(std::time::Instant::now() < deadline, "process {i} was told {:?}, want {want:?}", admin(run, i));
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the process `pid` holds more than 140 MiB (its slow request's 150).
fn wait_holding(run: &Run, pid: u64) {
    run.wait_for(
        "tx1 holding its memory",
        |s| {
            s["processes"].as_array().is_some_and(|ps| {
                ps.iter().any(|p| p["pid"].as_u64() == Some(pid) && p["rss_bytes"].as_u64() > Some(140 << 20))
            })
        },
        TIMEOUT,
    );
}

/// Waits until tx1 saw its client go (the front door cancelled or cut its request), and checks it abandoned exactly
/// that one request.
fn abandoned_once(run: &Run) {
    let stats = monitor_tests::wait_until("tx1 to see its client gone", TIMEOUT, || {
        let s = run.stats(1);
        (s["abandoned"].as_u64() != Some(0)).then_some(s)
    });
    assert_eq!(stats["abandoned"].as_u64(), Some(1), "{stats}");
}

/// True when `want` appears in `got` in order (other entries may come between).
fn in_order(got: &[String], want: &[&str]) -> bool {
    let mut it = got.iter();
    want.iter().all(|w| it.any(|g| g == w))
}

#[test]
fn shedding_at_85_and_cancelling_at_92() {
    if !require_group("shedding_at_85_and_cancelling_at_92") {
        return;
    }
    let run = Run::start("memory", &spec(false));
    assert_eq!(run.get("/r4/x", &[]).status, 200);

    // 88% of 256 MiB: refusing.
    let mut hog = Hog::spawn(HOG, run.cg.path(), 224, false);
    run.wait_for("refusing", |s| state(s) == "refusing", TIMEOUT);
    let r = run.get("/r4/x", &[]);
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("7"));
    assert!(r.text().starts_with("memory guard:") && r.text().contains("refuses new requests"), "{}", r.text());
    let r = run.get("/health", &[]);
    assert_eq!(r.status, 200, "health paths are exempt: {}", r.text());
    // So are `[proxy] admin_paths`. A process's own admin_path is the agent's channel: no client reaches it.
    let r = run.get("/stats", &[]);
    assert_eq!(r.status, 200, "[proxy] admin_paths are exempt: {}", r.text());
    let r = run.get("/admin/memory", &[]);
    assert_eq!(r.status, 403, "[[process]] admin_path is the agent's channel: {}", r.text());
    wait_admin(&run, 1, &["refuse"]);
    hog.set_mib(40);
    run.wait_for("normal", |s| state(s) == "normal", TIMEOUT);
    wait_admin(&run, 1, &["refuse", "serve"]);
    assert_eq!(run.get("/r4/x", &[]).status, 200);

    // A slow request that makes tx1 hold 150 MiB: tx1 becomes the largest process.
    let addr = run.proxy;
    let slow = std::thread::spawn(move || {
        monitor_tests::http::get(addr, "/r4/big?alloc_mib=150&sleep_ms=20000", Duration::from_secs(30))
    });
    let tx1_pid = member(&run.status(), "tx1")["pid"].as_u64().expect("tx1 pid");
    wait_holding(&run, tx1_pid);
    // 40 + 150 + the processes, then the hog grows to ~93%.
    hog.set_mib(85);
    // The abort can be over within one sample (tx1 frees its memory at once): the status may never show it, the
    // cancelled request (503 naming tx1, below) and tx1's admin POSTs do.
    let s = run.wait_for(
        "aborting tx1, or its request answered",
        |s| state(s) == "aborting" || slow.is_finished(),
        TIMEOUT,
    );
    if state(&s) == "aborting" {
        assert_eq!(s.pointer("/policy/victim_pid").and_then(Value::as_u64), Some(tx1_pid), "{s:#}");
    }
    let r = slow.join().expect("client thread").expect("the slow request gets an answer");
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().starts_with("memory guard:") && r.text().contains("tx1"), "{}", r.text());
    // tx1 saw its client go away and freed the memory: the group goes back to normal and tx1 serves again. The
    // front door's 503 can reach this client before tx1's server has noticed its connection close: waited for.
    abandoned_once(&run);
    run.wait_for("normal again", |s| state(s) == "normal", TIMEOUT);
    let r = run.get("/r4/x", &[]);
    assert_eq!((r.status, served_by(&r).as_str()), (200, "tx1"), "{}", r.text());
    // Each process was told of every change of its own action on its admin endpoint ([[process]] admin_path): one
    // POST per change (never the same action twice in a row), tx1 aborted once, m0 never.
    let deadline = std::time::Instant::now() + TIMEOUT;
    while admin(&run, 1).last().map(String::as_str) != Some("serve") && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let (m0, tx1) = (admin(&run, 0), admin(&run, 1));
    assert!(in_order(&tx1, &["refuse", "serve", "abort", "serve"]), "tx1 was told {tx1:?}");
    assert!(
        in_order(&m0, &["refuse", "serve", "refuse", "serve"]) && !m0.iter().any(|a| a == "abort"),
        "m0 was told {m0:?}"
    );
    for told in [&m0, &tx1] {
        assert!(told.windows(2).all(|w| w[0] != w[1]), "a POST without a change: {told:?}");
    }
    // The abort POST and the decision log name tx1 as configured, not by its command name.
    let log = run.stats(1)["admin_log"].as_array().cloned().unwrap_or_default();
    let abort = log
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e["body"].as_str()?).ok())
        .find(|b| b["action"] == "abort")
        .unwrap_or_else(|| panic!("no abort POST in tx1's log: {log:?}"));
    assert_eq!((abort["name"].as_str(), abort["pid"].as_u64()), (Some("tx1"), Some(tx1_pid)), "{abort}");
    assert!(abort["comm"].as_str().is_some_and(|c| !c.is_empty() && c != "tx1"), "{abort}");
    let err = run.stderr();
    let line = err.lines().find(|l| l.contains("decision changed") && l.contains("aborting"));
    assert!(line.is_some_and(|l| l.contains("victim_name=\"tx1\"") || l.contains("victim_name=tx1")), "{err}");
    // Every one of them proved it came from the agent: each process checked, and refused none.
    for i in 0..2 {
        let s = run.stats(i);
        assert_eq!((s["proof"].as_str(), s["rejected"].as_array().map(Vec::len)), (Some("checked"), Some(0)), "{s:#}");
    }
    drop(hog);
}

/// An answer under way when its process is told to abort is cut: the client has had the head (200) and the start of
/// the body, then the connection ends without the body's last chunk. The process sees its client gone, abandons the
/// request and frees what it held, and the group goes back to normal.
#[test]
fn an_answer_under_way_is_cut_when_its_process_aborts() {
    if !require_group("an_answer_under_way_is_cut_when_its_process_aborts") {
        return;
    }
    // A line every 100 ms: the cut is seen when the next line comes.
    let (lines, _) = cut_under_way("memory-cut", 100);
    eprintln!("the answer was cut after {lines} of its 600 lines");
}

/// The same while the answer waits on its process (a line every 5 minutes): the abort closes the upstream connection,
/// which wakes the answer at once, well before its next line or the upstream timeout (60 s) would.
#[test]
fn a_waiting_answer_is_cut_at_once_when_its_process_aborts() {
    if !require_group("a_waiting_answer_is_cut_at_once_when_its_process_aborts") {
        return;
    }
    let (lines, after) = cut_under_way("memory-cut-waiting", 300_000);
    assert_eq!(lines, 1, "only the first line comes before the cut");
    assert!(after < Duration::from_secs(45), "the waiting answer was cut {after:?} after the growth began");
    eprintln!("the waiting answer was cut {after:?} after the growth began");
}

/// Runs a request whose answer sends a line every `line_ms` (600 lines, holding 150 MiB), grows the group past
/// `abort_at` once the first line came, and reads until the cut: the lines the client got, and how long after the
/// growth began the cut came.
fn cut_under_way(name: &str, line_ms: u64) -> (usize, Duration) {
    let dir = monitor_tests::temp_dir(name);
    let (hook, alerts) = (dir.join("hook.py"), dir.join("alerts.jsonl"));
    std::fs::write(&hook, monitor_tests::hooks::ALERT_TO_FILE).unwrap_or_else(|e| panic!("{}: {e}", hook.display()));
    let mut spec = spec(false);
    spec.extra = monitor_tests::run::python_hook(&hook, &alerts);
    let run = Run::start(name, &spec);
    let mut hog = Hog::spawn(HOG, run.cg.path(), 40, false);
    // tx1 allocates 150 MiB and answers at once, holding the memory until its last line.
    let mut client = TcpStream::connect(run.proxy).expect("connecting to the front door");
    // Longer than the upstream timeout: the read that ends must be the cut, not the client's patience.
    client.set_read_timeout(Some(Duration::from_secs(120))).expect("read timeout");
    let request = format!(
        "GET /r4/big?alloc_mib=150&trickle_ms={}&line_ms={line_ms} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        600 * line_ms
    );
    client.write_all(request.as_bytes()).expect("sending the request");
    let sent = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains(".\n") {
        let n = client.read(&mut buf).expect("the answer's head and first line");
        assert!(n > 0, "the front door closed before the first line: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&got));
    let tx1_pid = member(&run.status(), "tx1")["pid"].as_u64().expect("tx1 pid");
    wait_holding(&run, tx1_pid);
    // 40 + 150 + the processes, then the hog grows to ~93%: tx1, the largest, is told to abort.
    let grown = Instant::now();
    hog.set_mib(85);
    // The rest of the answer: lines until the cut (the end of the connection, or a reset).
    loop {
        match client.read(&mut buf) {
            Ok(0) => break,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("no cut within the client's read timeout: {}", String::from_utf8_lossy(&got))
            }
            Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let after = grown.elapsed();
    let text = String::from_utf8_lossy(&got);
    assert!(!text.ends_with("0\r\n\r\n"), "the answer ended whole, it was not cut: {text}");
    names_the_request(&run, &alerts, sent.elapsed());
    abandoned_once(&run);
    run.wait_for("normal again", |s| state(s) == "normal", TIMEOUT);
    drop(hog);
    (text.matches(".\n").count(), after)
}

/// The abort's decision log line and its alert name the victim's request in flight, its path without the query
/// and its age (at least the time it waited for the growth, at most the time since it was sent).
fn names_the_request(run: &Run, alerts: &std::path::Path, since_sent: Duration) {
    let line = monitor_tests::wait_until("the abort in the decision log", Duration::from_secs(10), || {
        run.stderr().lines().find(|l| l.contains("decision changed") && l.contains("aborting")).map(str::to_string)
    });
    assert!(line.contains("victim_requests=\"GET /r4/big "), "the decision log names no request: {line}");
    assert!(!line.contains("alloc_mib"), "the query is kept out unless configured: {line}");
    let alert = monitor_tests::wait_until("the abort alert", Duration::from_secs(10), || {
        monitor_tests::json_lines(alerts).into_iter().find(|a| a["labels"]["alertname"] == "MonitorGroupAborting")
    });
    let listed = alert["annotations"]["victim_requests"].as_str().unwrap_or_default().to_string();
    let age: f64 = listed
        .strip_prefix("GET /r4/big ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("the abort alert names no request: {alert}"));
    assert!(age > 0.0 && age <= since_sent.as_secs_f64() + 0.1, "age {age} s, sent {since_sent:?} before: {listed}");
    let summary = alert["annotations"]["summary"].as_str().unwrap_or_default();
    assert!(summary.contains("1 request in flight, the oldest GET /r4/big for"), "{summary}");
    // Its memory per request counts it as in flight at an abort, once the listing after its end has come.
    let deadline = Instant::now() + monitor_tests::pace::scaled(Duration::from_secs(10));
    loop {
        let m = monitor_tests::http::get(run.web, "/metrics", TIMEOUT).map(|r| r.text()).unwrap_or_default();
        if m.contains("monitor_request_at_abort_total{route=\"GET /r4/big\"} 1\n") {
            break;
        }
        let counted: Vec<&str> = m.lines().filter(|l| l.starts_with("monitor_request_")).collect();
        assert!(Instant::now() < deadline, "the request not counted at the abort within 10 s: {counted:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("the abort alert named: {listed}");
}

#[test]
fn shadow_mode_enforces_nothing() {
    if !require_group("shadow_mode_enforces_nothing") {
        return;
    }
    let run = Run::start("shadow", &spec(true));
    let hog = Hog::spawn(HOG, run.cg.path(), 240, false);
    let s = run.wait_for("aborting (decided only)", |s| state(s) == "aborting", TIMEOUT);
    assert_eq!(s.pointer("/policy/shadow"), Some(&Value::Bool(true)));
    let r = run.get("/r4/x", &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!((admin(&run, 0), admin(&run, 1)), (vec![], vec![]), "shadow mode told the processes");
    drop(hog);
}

#[test]
fn no_client_can_speak_on_the_agents_channel_whatever_the_path_looks_like() {
    if !require_group("no_client_can_speak_on_the_agents_channel_whatever_the_path_looks_like") {
        return;
    }
    // The master relays the changes to its workers: post_url points at it, behind the front door.
    let master_port = monitor_tests::agent::free_port();
    let mut spec = spec(false);
    spec.master_port = Some(master_port);
    spec.extra =
        spec.extra.set("actions", "post_url", format!("http://127.0.0.1:{master_port}/admin/relay?from=monitor"));
    let run = Run::start("channel", &spec);
    // The agent's own message, forged: tx1 told to abort, then to serve.
    let forged = r#"{"pid":1,"name":"tx1","action":"abort","state":"aborting","ratio":0.99,"cgroup":"/"}"#;
    let shapes = [
        "/admin/memory",
        "/ADMIN/MEMORY",
        "//admin//memory",
        "/admin/./memory",
        "/r4/../admin/memory",
        "/%61dmin/memory",
        "/admin%2fmemory",
        "/%2561dmin/memory",
        "/admin/memory?pid=1",
        "/admin/memory/",
        // post_url's path and its neighbours.
        "/admin/relay",
        "/admin/relay?from=monitor",
        "/ADMIN/Relay",
        "//admin//relay",
        "/admin%2Frelay",
        "/admin%2frelay?from=monitor",
        "/r4/../admin/relay",
        "/admin/x/../relay",
        "/admin/relay/",
    ];
    for path in shapes {
        for (method, body) in [("POST", forged), ("PUT", forged), ("GET", "")] {
            let headers = [("Content-Type", "application/json")];
            let r = monitor_tests::http::request_body(run.proxy, method, path, &headers, body.as_bytes(), TIMEOUT)
                .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
            assert_eq!(r.status, 403, "{method} {path}: {} {}", r.status, r.text());
        }
    }
    // Neither the master nor the worker heard any of it, on either path.
    for i in 0..2 {
        let s = run.stats(i);
        assert!(admin(&run, i).is_empty(), "process {i} was told {:?} by a client", admin(&run, i));
        let heard = (s["relay"].as_array().map(Vec::len), s["admin_log"].as_array().map(Vec::len));
        assert_eq!(heard, (Some(0), Some(0)), "process {i} heard a client on the channel: {s:#}");
    }
    // Its neighbours are ordinary paths, forwarded as ever.
    for path in ["/admin/memoryx", "/admin/relayx", "/admin/relay2/x"] {
        let r = run.get(path, &[]);
        assert_eq!(r.status, 200, "{path}: {}", r.text());
    }
}
