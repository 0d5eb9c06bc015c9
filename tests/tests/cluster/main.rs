//! Several `monitor run` nodes as one cluster, on loopback addresses of their own (127.0.0.2, 127.0.0.3 …), each
//! with its own master and worker: membership by gossip and a graceful leave (python3 `http.server` processes), and
//! requests for another node's caches forwarded to it or refused (`fixture-backend` processes, which issue cache
//! ids and name themselves in `X-Served-By`); a forward captured on the wire and sent again, refused (`replay`); and
//! three nodes in network namespaces of their own (`netns`): forwards under load, a node killed, cut off and
//! healed, leaving, and restarted one at a time.

mod events;
mod fleet;
mod forward;
mod membership;
mod netns;
mod replay;

use monitor_tests::agent::free_port;
use monitor_tests::config::{Config, Process};
use monitor_tests::http;
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

/// One node: its name, loopback IP, gossip, front-door and API ports.
struct Node {
    name: &'static str,
    ip: [u8; 4],
    gossip: u16,
    front: u16,
    web: u16,
}

impl Node {
    fn new(name: &'static str, last: u8) -> Node {
        let ip = [127, 0, 0, last];
        Node { name, ip, gossip: free_udp(ip), front: free_port(), web: free_port() }
    }

    fn gossip_addr(&self) -> SocketAddr {
        SocketAddr::from((self.ip, self.gossip))
    }

    fn front_addr(&self) -> SocketAddr {
        SocketAddr::from((self.ip, self.front))
    }

    fn web_addr(&self) -> SocketAddr {
        SocketAddr::from((self.ip, self.web))
    }

    /// `monitor run` on `config`, its front door and API on this node's IP.
    fn launch(&self, test: &str, config: Config) -> Launched {
        let mut l = Launched::start(test, config, None, &[]);
        (l.proxy, l.web) = (self.front_addr(), self.web_addr());
        l
    }

    /// This node's `[proxy]` and `[cluster]`, joining through `seeds`.
    fn config(&self, seeds: &[SocketAddr]) -> Config {
        let seeds: Vec<String> = seeds.iter().map(|s| s.to_string()).collect();
        Config::new()
            .probes(false)
            .proxy(self.front_addr())
            .web(self.web_addr())
            .set("cluster", "node", self.name)
            .set("cluster", "listen", self.gossip_addr().to_string())
            .set("cluster", "secret", SECRET)
            .set("cluster", "seeds", monitor_tests::config::strings(&seeds))
            .set("cluster", "suspect_timeout_ms", 500)
            .set("cluster", "dead_timeout_ms", 2000)
    }

    /// `monitor run` over a python3 http.server master (`<name>m0`) and worker (`<name>tx1`), its front door on
    /// this node's IP, joining through `seeds`.
    fn start(&self, seeds: &[SocketAddr], dir: &std::path::Path) -> Launched {
        self.launch(&format!("cluster-{}", self.name), self.python_config(seeds, dir))
    }

    /// The config [`Node::start`] runs: python3 http.server serving `dir` as the master and the worker.
    fn python_config(&self, seeds: &[SocketAddr], dir: &std::path::Path) -> Config {
        let server = |port: u16| {
            ["python3", "-m", "http.server", "--bind", "127.0.0.1", "--directory"]
                .into_iter()
                .map(String::from)
                .chain([dir.display().to_string(), port.to_string()])
                .collect::<Vec<_>>()
        };
        let (m, w) = (free_port(), free_port());
        self.config(seeds)
            .process(Process::new(&format!("{}m0", self.name), "master", server(m), m).set("health", "/"))
            .process(Process::new(&format!("{}tx1", self.name), "worker", server(w), w).set("health", "/"))
    }

    /// `monitor run` over a fixture-backend master (`<name>m0`) and worker (`<name>tx1`), signing cache ids with
    /// `token_secret`.
    fn start_fixtures(&self, seeds: &[SocketAddr], token_secret: &str) -> Launched {
        let config = self
            .config(seeds)
            .set("cluster", "token_secret", token_secret)
            .process(Process::fixture_on(&format!("{}m0", self.name), "master", free_port()))
            .process(Process::fixture_on(&format!("{}tx1", self.name), "worker", free_port()));
        self.launch(&format!("cluster-fx-{}", self.name), config)
    }
}

/// Nodes a and b (with the last address bytes `last`), each a `monitor run` over fixture backends signing cache ids
/// with `token_secret`, b joined through a; returned once each lists the other alive and both are ready.
fn fixture_pair(last: (u8, u8), token_secret: &str) -> (Node, Node, Launched, Launched) {
    let (a, b) = (Node::new("a", last.0), Node::new("b", last.1));
    let node_a = a.start_fixtures(&[], token_secret);
    wait_member(&node_a, "a", |m| m["self"] == true, Duration::from_secs(20));
    let node_b = b.start_fixtures(&[a.gossip_addr()], token_secret);
    wait_member(&node_a, "b", |m| m["state"] == "alive", Duration::from_secs(20));
    wait_member(&node_b, "a", |m| m["state"] == "alive", Duration::from_secs(20));
    wait_ready(&node_a);
    wait_ready(&node_b);
    (a, b, node_a, node_b)
}

/// Polls `/readyz` of a node every 50 ms until it answers 200; panics after 20 s.
fn wait_ready(n: &Launched) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = http::get(n.web, "/readyz", Duration::from_secs(2));
        if r.as_ref().is_ok_and(|r| r.status == 200 && r.body.starts_with(b"ready")) {
            return;
        }
        assert!(Instant::now() < deadline, "/readyz not 200 within 20 s: {:?}\n{}", r.map(|r| r.status), n.stderr());
        std::thread::sleep(Duration::from_millis(50));
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
