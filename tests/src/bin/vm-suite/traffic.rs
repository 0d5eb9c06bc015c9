//! The eBPF request counting on this kernel, through the agent's status: exact accepts, requests and responses
//! by class for servers in the watched group (our own `vm-suite serve`, busybox's `httpd`), with one request per
//! connection, keep-alive, HEAD and POST; a server outside the group counts nothing.

use crate::support::*;
use monitor_tests::agent::free_port;
use monitor_tests::cgroup2::CgroupV2;
use monitor_tests::config::Config;
use monitor_tests::servers::{busybox_httpd, listening};
use monitor_tests::{spawn_in_cgroup, Agent, ChildGuard};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(10);

/// What a test sent to one server.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Sent {
    accepts: u64,
    requests: u64,
    /// Responses by status class: 1xx … 5xx.
    by_class: [u64; 5],
}

impl Sent {
    fn answered(&mut self, status: u16) {
        self.requests += 1;
        if let Some(slot) = usize::from(status / 100).checked_sub(1).and_then(|i| self.by_class.get_mut(i)) {
            *slot += 1;
        }
    }
}

/// Waits until something listens on 127.0.0.1:`port` (read from /proc/net/tcp, so no connection is made that the
/// probes would count).
fn wait_listening(port: u16, server: &mut ChildGuard) {
    let deadline = Instant::now() + TIMEOUT;
    while !listening(port) {
        if let Some(status) = server.wait_timeout(Duration::ZERO) {
            panic!("the server for port {port} exited: {status}");
        }
        assert!(Instant::now() < deadline, "nothing listens on 127.0.0.1:{port} after {TIMEOUT:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn status_code(head: &str) -> u16 {
    let line = head.lines().next().unwrap_or_default();
    match line.split_whitespace().nth(1).and_then(|c| c.parse().ok()) {
        Some(code) if line.starts_with("HTTP/1.") => code,
        _ => panic!("not an HTTP/1 status line: {line:?}"),
    }
}

/// One request on its own connection (`Connection: close`; `headers` are extra `Name: value\r\n` lines), the
/// whole answer read; the status code.
fn one_shot(addr: SocketAddr, method: &str, path: &str, headers: &str, body: &[u8]) -> u16 {
    let mut s = TcpStream::connect_timeout(&addr, TIMEOUT).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let _ = s.set_read_timeout(Some(TIMEOUT));
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{headers}Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    s.write_all(&req).unwrap_or_else(|e| panic!("send to {addr}: {e}"));
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap_or_else(|e| panic!("read from {addr}: {e}"));
    status_code(&String::from_utf8_lossy(&raw))
}

/// `n` GETs of `path` on one keep-alive connection, each answer read before the next is sent; the codes.
fn keep_alive(addr: SocketAddr, path: &str, n: usize) -> Vec<u16> {
    let s = TcpStream::connect_timeout(&addr, TIMEOUT).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let _ = s.set_read_timeout(Some(TIMEOUT));
    let mut out = s.try_clone().unwrap_or_else(|e| panic!("clone socket: {e}"));
    let mut reader = BufReader::new(s);
    let mut codes = Vec::new();
    for i in 0..n {
        let close = if i + 1 == n { "Connection: close\r\n" } else { "" };
        let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{close}\r\n");
        out.write_all(req.as_bytes()).unwrap_or_else(|e| panic!("send to {addr}: {e}"));
        let mut head = String::new();
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            let got = reader.read_line(&mut line).unwrap_or_else(|e| panic!("read from {addr}: {e}"));
            assert!(got > 0, "{addr} closed the keep-alive connection after {i} answers");
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
            if line.trim_end().is_empty() {
                break;
            }
            head.push_str(&line);
        }
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body).unwrap_or_else(|e| panic!("read body from {addr}: {e}"));
        codes.push(status_code(&head));
    }
    codes
}

/// The counters of `pid` in the agent's status: (accepts, requests, responses by class, inflight).
fn counters(status: &Value, pid: u32) -> Option<Sent> {
    let p = process(status, pid)?;
    let by_class = p.get("responses_by_class")?.as_array()?;
    let mut classes = [0u64; 5];
    for (slot, v) in classes.iter_mut().zip(by_class) {
        *slot = v.as_u64()?;
    }
    Some(Sent {
        accepts: p.get("accepts_total")?.as_u64()?,
        requests: p.get("requests_total")?.as_u64()?,
        by_class: classes,
    })
}

/// Waits until the agent shows exactly `sent` for `pid` (responses = requests, nothing in flight), and still
/// shows it a little later (no late extra counts).
fn assert_counts(agent: &Agent, pid: u32, sent: &Sent, what: &str) {
    let matches = |s: &Value| {
        let Some(p) = process(s, pid) else { return false };
        let responses = p.get("responses_total").and_then(Value::as_u64);
        let inflight = p.get("inflight").and_then(Value::as_u64);
        counters(s, pid).as_ref() == Some(sent) && responses == Some(sent.requests) && inflight == Some(0)
    };
    let deadline = Instant::now() + SETTLE;
    loop {
        let s = agent.status();
        if matches(&s) {
            std::thread::sleep(Duration::from_millis(300));
            let again = agent.status();
            assert!(
                matches(&again),
                "{what}: counts moved past {sent:?}: {:#}",
                process(&again, pid).unwrap_or(&again)
            );
            return;
        }
        if Instant::now() >= deadline {
            let got = counters(&s, pid);
            panic!("{what}: want {sent:?}, the agent shows {got:?}: {:#}", process(&s, pid).unwrap_or(&s));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts the agent on `cg` and waits until it traces every pid in `pids` (listed = in the kernel's filter).
fn agent_tracing(cg: &CgroupV2, pids: &[u32]) -> Agent {
    let agent = Agent::start(&cg.path().display().to_string(), &[]);
    let s = agent.status();
    let enabled = s.pointer("/probes/enabled").and_then(Value::as_bool);
    let reason = s.pointer("/probes/reason").cloned().unwrap_or_default();
    assert_eq!(enabled, Some(true), "the probes are not running on this kernel: {reason}");
    // The socket hooks need `sock_recv_length`/`sock_send_length` (Linux 6.3); older kernels fall back to the raw
    // `sys_exit` program. Both are exercised: 6.1 and 6.12 boot in turn.
    let hooks = s.pointer("/probes/hooks").and_then(Value::as_str).unwrap_or_default();
    let want = if kernel_at_least(6, 3) { "sock" } else { "raw_sys_exit" };
    assert_eq!(hooks, want, "hooks the probes use on this kernel");
    agent.wait_for(|s| pids.iter().all(|&p| process(s, p).is_some()), SETTLE);
    agent
}

/// True when the running kernel's version is at least `major.minor` (from /proc/sys/kernel/osrelease).
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release.trim().split(['.', '-', '+']).map(|p| p.parse::<u32>().unwrap_or(0));
    let (a, b) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (a, b) >= (major, minor)
}

fn serve_own(cg: &Path, port: u16) -> ChildGuard {
    let mut cmd = Command::new(bin_dir().join("vm-suite"));
    cmd.args(["serve", &port.to_string()]).stdin(Stdio::null());
    let mut server = spawn_in_cgroup(&mut cmd, cg);
    wait_listening(port, &mut server);
    server
}

/// Our own server: one request per connection (200, 404, 500, HEAD, POST) and keep-alive; a second instance
/// outside the group gets traffic too and must not show up.
pub fn own_server_counts_exactly() {
    let cg = CgroupV2::create("http", None);
    let port = free_port();
    let server = serve_own(cg.path(), port);
    let outside_port = free_port();
    let outside = serve_own(Path::new(monitor_tests::cgroup2::V2_MOUNT), outside_port);
    let agent = agent_tracing(&cg, &[server.pid()]);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));

    let mut sent = Sent::default();
    for (method, path, body, n) in [
        ("GET", "/", &b""[..], 5),
        ("GET", "/missing", b"", 3),
        ("GET", "/error", b"", 2),
        ("HEAD", "/", b"", 2),
        ("POST", "/form", b"a=1&b=two", 2),
    ] {
        for _ in 0..n {
            sent.accepts += 1;
            sent.answered(one_shot(addr, method, path, "", body));
        }
    }
    sent.accepts += 1;
    for code in keep_alive(addr, "/", 10) {
        sent.answered(code);
    }
    let outside_addr = SocketAddr::from(([127, 0, 0, 1], outside_port));
    for _ in 0..4 {
        assert_eq!(one_shot(outside_addr, "GET", "/", "", b""), 200);
    }
    let expected = Sent { accepts: 15, requests: 24, by_class: [0, 19, 0, 3, 2] };
    assert_eq!(sent, expected, "the server answered other codes than planned");
    assert_counts(&agent, server.pid(), &sent, "vm-suite serve");
    let s = agent.status();
    assert!(process(&s, outside.pid()).is_none(), "a server outside the group is listed: {s:#}");
}

/// busybox `httpd` (the static one in the VM) forks a child per connection, which reads the request on fd 0 and
/// answers on fd 1. The probes follow the fork (`task_newtask`) and fold each child's counts into the server
/// when it exits, so the server's pid shows exactly what was sent: accepts, requests and responses by class.
pub fn busybox_httpd_counts() {
    let cg = CgroupV2::create("httpd", None);
    let www = std::env::temp_dir().join(format!("vm-suite-www-{}", std::process::id()));
    std::fs::create_dir_all(&www).unwrap_or_else(|e| panic!("mkdir {}: {e}", www.display()));
    std::fs::write(www.join("index.html"), "hello from busybox\n").unwrap_or_else(|e| panic!("write index: {e}"));
    let port = free_port();
    let mut cmd = busybox_httpd(&www, port);
    cmd.stdin(Stdio::null());
    let mut httpd = spawn_in_cgroup(&mut cmd, cg.path());
    wait_listening(port, &mut httpd);
    let agent = agent_tracing(&cg, &[httpd.pid()]);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));

    let mut sent = Sent::default();
    for (path, n) in [("/", 6), ("/missing", 2)] {
        for _ in 0..n {
            sent.accepts += 1;
            sent.answered(one_shot(addr, "GET", path, "", b""));
        }
    }
    // busybox's own client too.
    for _ in 0..2 {
        let out = Command::new("busybox").args(["wget", "-q", "-O", "-", &format!("http://{addr}/")]).output();
        let out = out.unwrap_or_else(|e| panic!("busybox wget: {e}"));
        assert!(out.status.success(), "busybox wget failed: {}", String::from_utf8_lossy(&out.stderr));
        sent.accepts += 1;
        sent.answered(200);
    }
    assert_eq!((sent.requests, sent.by_class), (10, [0, 8, 0, 2, 0]));
    let deadline = Instant::now() + SETTLE;
    let s = loop {
        let s = agent.status();
        let got = counters(&s, httpd.pid());
        if got.as_ref() == Some(&sent) || Instant::now() >= deadline {
            break s;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let got = counters(&s, httpd.pid());
    let all: Vec<u32> = s
        .pointer("/processes")
        .and_then(Value::as_array)
        .map_or_else(Vec::new, |ps| ps.iter().filter_map(|p| p.get("pid")?.as_u64()?.try_into().ok()).collect());
    let total_requests: u64 = all.iter().filter_map(|&p| counters(&s, p)).map(|c| c.requests).sum();
    println!("busybox httpd: sent {sent:?}; the agent shows for its pid {got:?}, {total_requests} requests in all");
    assert_eq!(got.as_ref(), Some(&sent), "{:#}", process(&s, httpd.pid()).unwrap_or(&s));
    assert_eq!(total_requests, sent.requests, "the group's total: {s:#}");
}

/// The fixture backend (tests/src/bin/fixture-backend.rs, hyper on tokio): 200s, /health, a foreign cache id
/// (404), POST bodies, and keep-alive, counted exactly.
pub fn fixture_backend_counts_exactly() {
    let cg = CgroupV2::create("backend", None);
    let port = free_port();
    let mut cmd = Command::new(bin_dir().join("fixture-backend"));
    cmd.args(["--name", "tx1", "--port", &port.to_string()]).stdin(Stdio::null());
    let mut backend = spawn_in_cgroup(&mut cmd, cg.path());
    wait_listening(port, &mut backend);
    let agent = agent_tracing(&cg, &[backend.pid()]);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));

    let mut sent = Sent::default();
    for (method, path, headers, body, n) in [
        ("GET", "/tx/r4/ValueSet", "", &b""[..], 4),
        ("GET", "/health", "", b"", 2),
        ("GET", "/tx/r4/x", "X-Cache-Id: tx9.1\r\n", b"", 2),
        ("POST", "/tx/r4/$validate-code", "Content-Type: application/json\r\n", b"{\"code\":\"x\"}", 2),
    ] {
        for _ in 0..n {
            sent.accepts += 1;
            sent.answered(one_shot(addr, method, path, headers, body));
        }
    }
    sent.accepts += 1;
    for code in keep_alive(addr, "/tx/r4/CodeSystem", 8) {
        sent.answered(code);
    }
    assert_eq!(sent, Sent { accepts: 11, requests: 18, by_class: [0, 16, 0, 2, 0] }, "unexpected answers");
    assert_counts(&agent, backend.pid(), &sent, "fixture-backend");
}

/// `[probes] hooks` names one set and gets that set or none: `sock` runs on 6.3+ and, on an older kernel, leaves
/// the probes off with a reason naming the key (no silent fallback); `raw_sys_exit` runs on both.
pub fn configured_hooks_have_no_fallback() {
    let cg = CgroupV2::create("hooks", None);
    for (hooks, runs) in [("sock", kernel_at_least(6, 3)), ("raw_sys_exit", true)] {
        let config = Config::new()
            .set("probes", "hooks", hooks)
            .write(std::env::temp_dir().join(format!("vm-suite-hooks-{hooks}.toml")));
        let agent = Agent::start(&cg.path().display().to_string(), &["--config", &config.display().to_string()]);
        let s = agent.status();
        let _ = std::fs::remove_file(&config);
        let enabled = s.pointer("/probes/enabled").and_then(Value::as_bool);
        let reason = s.pointer("/probes/reason").and_then(Value::as_str).unwrap_or_default();
        if runs {
            assert_eq!(enabled, Some(true), "hooks = {hooks:?}: {reason}");
            assert_eq!(s.pointer("/probes/hooks").and_then(Value::as_str), Some(hooks), "{:#}", s["probes"]);
        } else {
            assert_eq!(enabled, Some(false), "hooks = {hooks:?} on a kernel without it: {:#}", s["probes"]);
            let want = format!("[probes] hooks = {hooks:?}");
            assert!(reason.starts_with(&want), "reason {reason:?} should start with {want:?}");
        }
    }
}
