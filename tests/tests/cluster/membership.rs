//! Two nodes, each a real `monitor run` with its own master and worker, join each other through a seed and list
//! each other in `/api/v1/cluster` with their processes and front doors; when one is SIGTERMed, the other shows
//! it `left` well within the suspect plus dead timeouts (the leave is told, not detected), and counts it in
//! `/metrics`.

use monitor_tests::agent::free_port;
use monitor_tests::config::{Config, Process};
use monitor_tests::http;
use monitor_tests::require_program;
use monitor_tests::run::Launched;
use serde_json::Value;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

const SECRET: &str = "cluster-test-secret-0123456789abcdef";

/// One test of this file at a time: each starts two nodes and four servers on ports found free a moment before.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// A UDP port free on `ip` now.
fn free_udp(ip: [u8; 4]) -> u16 {
    match UdpSocket::bind(SocketAddr::from((ip, 0))).and_then(|s| s.local_addr()) {
        Ok(a) => a.port(),
        Err(e) => panic!("no free UDP port on {ip:?}: {e}"),
    }
}

/// One node: its name, loopback IP, gossip and front-door ports.
struct Node {
    name: &'static str,
    ip: [u8; 4],
    gossip: u16,
    front: u16,
}

impl Node {
    fn new(name: &'static str, last: u8) -> Node {
        let ip = [127, 0, 0, last];
        Node { name, ip, gossip: free_udp(ip), front: free_port() }
    }

    fn gossip_addr(&self) -> SocketAddr {
        SocketAddr::from((self.ip, self.gossip))
    }

    fn front_addr(&self) -> SocketAddr {
        SocketAddr::from((self.ip, self.front))
    }

    /// `monitor run` over a python3 http.server master (`<name>m0`) and worker (`<name>tx1`), its front door on
    /// this node's IP, joining through `seeds`.
    fn start(&self, seeds: &[SocketAddr], dir: &std::path::Path) -> Launched {
        let server = |port: u16| {
            ["python3", "-m", "http.server", "--bind", "127.0.0.1", "--directory"]
                .into_iter()
                .map(String::from)
                .chain([dir.display().to_string(), port.to_string()])
                .collect::<Vec<_>>()
        };
        let (m, w) = (free_port(), free_port());
        let seeds: Vec<String> = seeds.iter().map(|s| s.to_string()).collect();
        let config = Config::new()
            .probes(false)
            .proxy(self.front_addr())
            .process(Process::new(&format!("{}m0", self.name), "master", server(m), m).set("health", "/"))
            .process(Process::new(&format!("{}tx1", self.name), "worker", server(w), w).set("health", "/"))
            .set("cluster", "node", self.name)
            .set("cluster", "listen", self.gossip_addr().to_string())
            .set("cluster", "secret", SECRET)
            .set("cluster", "seeds", monitor_tests::config::strings(&seeds))
            .set("cluster", "suspect_timeout_ms", 500)
            .set("cluster", "dead_timeout_ms", 2000);
        Launched::start(&format!("cluster-{}", self.name), config, None, &[])
    }
}

/// `/api/v1/cluster` of a node, when it answers 200 with JSON.
fn cluster(n: &Launched) -> Option<Value> {
    let r = http::get(n.web, "/api/v1/cluster", Duration::from_secs(2)).ok()?;
    (r.status == 200).then(|| serde_json::from_slice(&r.body).ok()).flatten()
}

/// The member `node` as `n` lists it.
fn member(view: &Value, node: &str) -> Option<Value> {
    view["members"].as_array()?.iter().find(|m| m["node"] == node).cloned()
}

/// Polls `n`'s cluster view every 50 ms until `pred` holds for its member `node`; panics after `timeout`.
fn wait_member(n: &Launched, node: &str, pred: impl Fn(&Value) -> bool, timeout: Duration) -> (Value, Duration) {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < timeout {
        if let Some(v) = cluster(n) {
            if let Some(m) = member(&v, node).filter(|m| pred(m)) {
                return (m, start.elapsed());
            }
            last = Some(v);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{node} not as wanted within {timeout:?}; view: {last:#?}\nstderr:\n{}", n.stderr())
}

#[test]
fn two_nodes_join_list_each_other_and_a_sigterm_shows_as_left() {
    if !require_program("two_nodes_join_list_each_other_and_a_sigterm_shows_as_left", "python3") {
        return;
    }
    let _serial = one_at_a_time();
    let dir = monitor_tests::temp_dir("cluster-two");
    let (a, b) = (Node::new("a", 2), Node::new("b", 3));
    let node_a = a.start(&[], &dir);
    // a's membership is up before its processes start; b joins through it.
    wait_member(&node_a, "a", |m| m["self"] == true, Duration::from_secs(20));
    let mut node_b = b.start(&[a.gossip_addr()], &dir);

    let alive = |m: &Value| m["state"] == "alive";
    let (b_on_a, _) = wait_member(&node_a, "b", alive, Duration::from_secs(20));
    let (a_on_b, _) = wait_member(&node_b, "a", alive, Duration::from_secs(20));
    assert_eq!(b_on_a["processes"], serde_json::json!(["bm0", "btx1"]), "{b_on_a:#}");
    assert_eq!(a_on_b["processes"], serde_json::json!(["am0", "atx1"]), "{a_on_b:#}");
    assert_eq!(b_on_a["gossip"], b.gossip_addr().to_string());
    assert_eq!(b_on_a["front"], b.front_addr().to_string(), "peers forward to b's front door");
    assert_eq!(a_on_b["front"], a.front_addr().to_string());
    let heard = |m: &Value| m["last_heard_s"].as_f64().is_some_and(|s| s < 5.0);
    wait_member(&node_a, "b", heard, Duration::from_secs(5));
    wait_member(&node_b, "a", heard, Duration::from_secs(5));
    // Each node's load (its group's memory ratio and policy state) reaches the other.
    let loaded = |m: &Value| m["load"]["policy"] == "normal" && m["load"]["memory_ratio"].as_f64().is_some();
    wait_member(&node_a, "b", loaded, Duration::from_secs(10));
    wait_member(&node_b, "a", loaded, Duration::from_secs(10));
    // Both are ready for a load balancer: members, with their processes healthy.
    for n in [&node_a, &node_b] {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let r = http::get(n.web, "/readyz", Duration::from_secs(2));
            if r.as_ref().is_ok_and(|r| r.status == 200 && r.body.starts_with(b"ready")) {
                break;
            }
            assert!(Instant::now() < deadline, "/readyz not 200 within 20 s: {:?}", r.map(|r| r.status));
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // Both front doors serve, on their nodes' addresses.
    for front in [a.front_addr(), b.front_addr()] {
        let r = http::get(front, "/", Duration::from_secs(10));
        assert!(r.as_ref().is_ok_and(|r| r.status == 200), "{front}: {:?}", r.map(|r| r.status));
    }

    // SIGTERM on b: a sees it left, well before the suspect and dead timeouts (2.5 s) would have declared it dead.
    node_b.sigterm();
    let (_, took) = wait_member(&node_a, "b", |m| m["state"] == "left", Duration::from_secs(10));
    assert!(took < Duration::from_millis(1500), "left seen after {took:?}");
    let status = node_b.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "b exited with {status}; stderr:\n{}", node_b.stderr());
    assert!(node_b.stderr().contains("left the cluster"), "{}", node_b.stderr());
    assert!(node_a.stderr().contains("cluster member left"), "{}", node_a.stderr());
    let metrics = http::get(node_a.web, "/metrics", Duration::from_secs(5)).expect("metrics");
    let text = String::from_utf8_lossy(&metrics.body);
    for line in ["monitor_cluster_members{state=\"left\"} 1", "monitor_cluster_members{state=\"alive\"} 1"] {
        assert!(text.lines().any(|l| l == line), "{line} not in /metrics:\n{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The children of `pid` (its direct ones, from every thread).
fn children(pid: u32) -> Vec<i32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.flatten().collect::<Vec<_>>());
    tasks
        .unwrap_or_default()
        .iter()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| s.split_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<i32>>())
        .collect()
}

fn signal(pid: i32, sig: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions; the pids are ours (monitor and the servers it started).
    unsafe { libc::kill(pid, sig) };
}

#[test]
fn a_killed_node_is_suspect_then_dead_after_the_dead_timeout() {
    if !require_program("a_killed_node_is_suspect_then_dead_after_the_dead_timeout", "python3") {
        return;
    }
    let _serial = one_at_a_time();
    let dir = monitor_tests::temp_dir("cluster-kill");
    let (a, b) = (Node::new("a", 4), Node::new("b", 5));
    let node_a = a.start(&[], &dir);
    wait_member(&node_a, "a", |m| m["self"] == true, Duration::from_secs(20));
    let node_b = b.start(&[a.gossip_addr()], &dir);
    wait_member(&node_a, "b", |m| m["state"] == "alive", Duration::from_secs(20));
    wait_member(&node_b, "a", |m| m["state"] == "alive", Duration::from_secs(20));
    // kill -9: no leave is told. Its servers are ended too, so that nothing of b answers.
    let servers = children(node_b.pid());
    assert_eq!(servers.len(), 2, "b's master and worker: {servers:?}");
    let pid = i32::try_from(node_b.pid()).expect("a pid");
    signal(pid, libc::SIGKILL);
    for s in &servers {
        signal(*s, libc::SIGKILL);
    }
    let killed = Instant::now();
    // Suspect after a missed probe (a probe period is 500 ms), dead once the 2000 ms suspicion runs out.
    let (_, to_suspect) = wait_member(&node_a, "b", |m| m["state"] != "alive", Duration::from_secs(5));
    let (_, _) = wait_member(&node_a, "b", |m| m["state"] == "dead", Duration::from_secs(6));
    let to_dead = killed.elapsed();
    assert!(to_suspect < Duration::from_millis(1500), "suspect after {to_suspect:?}");
    assert!(
        to_dead >= Duration::from_millis(2000) && to_dead < Duration::from_millis(4000),
        "dead after {to_dead:?}: the suspicion lasts the 2000 ms dead timeout, after a probe period or two"
    );
    assert!(node_a.stderr().contains("cluster member suspect"), "{}", node_a.stderr());
    assert!(node_a.stderr().contains("cluster member dead"), "{}", node_a.stderr());
    let _ = std::fs::remove_dir_all(&dir);
}
