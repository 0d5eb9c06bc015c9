//! Three nodes a, b and c, each a real `monitor run` in a network namespace of its own (`nsenter --net`), on a
//! bridge the test makes, each over a fixture-backend master and worker and signing cache ids with a shared token
//! secret. The test reaches each front door through the bridge, as a load balancer would.
//!
//! - A cache id minted on a and used through b reaches a's process, and b counts the forwards; 12 clients through
//!   b and c for 10 s, with ids of all three, are each answered by the process their id names.
//! - kill -9 a: within the suspect plus dead timeouts b and c see it dead; every request for a's ids gets 503
//!   `owner-node-unavailable`, and no answer ever comes from a process other than its id's owner.
//! - nft rules inside a's namespace cut it off from b and c, then are removed: a is dead to them, then alive again,
//!   and its ids reach it through b and c again.
//! - SIGTERM on c while requests for its ids flow through b: b sees c leave, and no forward of b ever finds c's
//!   front door closed.
//! - a's front door refuses b's and c's connections (a firewall), its gossip still passes: b (fallback none)
//!   answers a's ids with 503 `owner-node-unavailable`, c (`fallback = "any"`) serves them itself with
//!   `X-Route-Fallback: owner-node-down`; once the rule is gone, both forward to a again.
//! - A rolling restart of all three under load (a node out of the clients' rotation while it restarts, as a load
//!   balancer following `/readyz` takes it out): the only failed requests are those for the restarting node's
//!   caches, and the test counts them.

use super::*;
use monitor_tests::netns::{Host, Lan};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

const TOKENS: &str = "token-secret-of-the-netns-cluster-0123";
const NAMES: [&str; 3] = ["a", "b", "c"];
// Each node has its namespace to itself, so its ports are fixed.
const GOSSIP: u16 = 7946;
const FRONT: u16 = 8080;
const WEB: u16 = 9090;
/// The suspect plus dead timeouts of every node.
const SUSPECT_AND_DEAD: Duration = Duration::from_millis(2500);

/// The test's requirements: root, `ip` and `nsenter`, and for the partition `nft`.
fn required(test: &str, nft: bool) -> bool {
    monitor_tests::require_root(test)
        && monitor_tests::require_program(test, "ip")
        && monitor_tests::require_program(test, "nsenter")
        && (!nft || monitor_tests::require_program(test, "nft"))
}

fn at(ip: Ipv4Addr, port: u16) -> SocketAddr {
    SocketAddr::from((ip, port))
}

static STARTS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// `monitor run` as node `i` of `lan`, in its namespace, joining through the other two.
fn start(lan: &Lan, i: usize) -> Launched {
    start_with(lan, i, |c| c)
}

/// [`start`] with the config changed by `change`.
fn start_with(lan: &Lan, i: usize, change: impl Fn(Config) -> Config) -> Launched {
    let (h, name) = (&lan.hosts[i], NAMES[i]);
    let seeds: Vec<String> =
        lan.hosts.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, o)| at(o.ip, GOSSIP).to_string()).collect();
    let config = Config::new()
        .probes(false)
        .proxy(at(h.ip, FRONT))
        .web(at(h.ip, WEB))
        .set("cluster", "node", name)
        .set("cluster", "listen", at(h.ip, GOSSIP).to_string())
        .set("cluster", "secret", SECRET)
        .set("cluster", "token_secret", TOKENS)
        .set("cluster", "seeds", monitor_tests::config::strings(&seeds))
        .set("cluster", "suspect_timeout_ms", 500)
        .set("cluster", "dead_timeout_ms", 2000)
        .process(Process::fixture_on(&format!("{name}m0"), "master", 18001))
        .process(Process::fixture_on(&format!("{name}tx1"), "worker", 18002));
    let config = change(config);
    // A config file of its own per start: a restarted node's old guard removes its file when dropped.
    let run = STARTS.fetch_add(1, Ordering::Relaxed);
    let mut l = Launched::start_wrapped(&format!("{}-{run}", h.ns), config, &h.prefix(), None, &[]);
    (l.proxy, l.web) = (at(h.ip, FRONT), at(h.ip, WEB));
    l
}

/// Waits until each of `nodes` lists every other as alive, and is ready.
fn settle(nodes: &[&Launched]) {
    for n in nodes {
        for name in NAMES.iter().take(nodes.len()) {
            wait_member(n, name, |m| m["state"] == "alive", Duration::from_secs(20));
        }
        wait_ready(n);
    }
}

/// Three nodes on a new bridge, joined and ready.
fn three() -> (Lan, Vec<Launched>) {
    let lan = Lan::new(3);
    let a = start(&lan, 0);
    wait_member(&a, "a", |m| m["self"] == true, Duration::from_secs(20));
    let (b, c) = (start(&lan, 1), start(&lan, 2));
    settle(&[&a, &b, &c]);
    (lan, vec![a, b, c])
}

fn request(front: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Result<http::Response, String> {
    http::request(front, "GET", path, headers, Duration::from_secs(5))
}

fn get(front: SocketAddr, path: &str, headers: &[(&str, &str)]) -> http::Response {
    request(front, path, headers).unwrap_or_else(|e| panic!("GET {path} via {front}: {e}"))
}

/// A cache started through `front`: its signed id and the process that owns it.
fn mint(front: SocketAddr) -> (String, String) {
    let r = get(front, "/fhir/start?cache=start", &[]);
    match (r.status, r.header("x-cache-id"), r.header("x-served-by")) {
        (200, Some(id), Some(by)) => (id.to_string(), by.to_string()),
        _ => panic!("no cache from {front}: {} {}", r.status, r.text()),
    }
}

/// One request of a load: what it asked, through which front door, when, and what came back.
#[derive(Debug, Clone)]
struct Sent {
    /// The node that owns the id (the token's first field) and the process named in it.
    node: String,
    owner: String,
    started: Instant,
    ended: Instant,
    /// 0 when no answer came.
    status: u16,
    served_by: Option<String>,
    body: String,
    retry_after: bool,
}

impl Sent {
    fn misrouted(&self) -> bool {
        self.status == 200 && self.served_by.as_deref() != Some(self.owner.as_str())
    }

    fn owner_unavailable(&self) -> bool {
        self.status == 503 && self.body.contains("owner-node-unavailable") && self.retry_after
    }
}

/// The cache ids the clients use, as (id, owner process); replaced when a node's caches are lost.
type Ids = Arc<RwLock<Vec<(String, String)>>>;

/// `clients` threads sending `/fhir/use` with the ids in turn, each through one of `fronts` not marked out (index
/// `out`), until `stop` or `limit`; at most 20000 requests each.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<Vec<Sent>>>,
}

impl Load {
    fn start(clients: usize, fronts: Vec<SocketAddr>, ids: Ids, out: Arc<AtomicUsize>, limit: Duration) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let until = Instant::now() + limit;
        let threads = (0..clients)
            .map(|c| {
                let (fronts, ids, out, stop) = (fronts.clone(), ids.clone(), out.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut sent = Vec::new();
                    let mut i = c;
                    while !stop.load(Ordering::Relaxed) && Instant::now() < until && sent.len() < 20_000 {
                        let (id, owner) = {
                            let ids = ids.read().unwrap_or_else(|p| p.into_inner());
                            ids[i % ids.len()].clone()
                        };
                        let skip = out.load(Ordering::Relaxed);
                        let usable: Vec<SocketAddr> =
                            fronts.iter().enumerate().filter(|(j, _)| *j != skip).map(|(_, f)| *f).collect();
                        let front = usable[(i / 7) % usable.len()];
                        let started = Instant::now();
                        let r = request(front, "/fhir/use", &[("X-Cache-Id", &id)]);
                        let node = id.split('.').next().unwrap_or_default().to_string();
                        let (status, served_by, body, retry_after) = match r {
                            Ok(r) => (
                                r.status,
                                r.header("x-served-by").map(String::from),
                                r.text().chars().take(200).collect(),
                                r.header("retry-after").is_some(),
                            ),
                            Err(e) => (0, None, e, false),
                        };
                        let ended = Instant::now();
                        sent.push(Sent { node, owner, started, ended, status, served_by, body, retry_after });
                        i += 1;
                    }
                    sent
                })
            })
            .collect();
        Load { stop, threads }
    }

    fn finish(self) -> Vec<Sent> {
        self.stop.store(true, Ordering::Relaxed);
        self.threads.into_iter().flat_map(|t| t.join().expect("a client thread")).collect()
    }
}

/// `count` ids minted through each of `fronts`.
fn ids_of(fronts: &[SocketAddr], count: usize) -> Vec<(String, String)> {
    fronts.iter().flat_map(|f| (0..count).map(|_| mint(*f)).collect::<Vec<_>>()).collect()
}

fn fronts(lan: &Lan) -> Vec<SocketAddr> {
    lan.hosts.iter().map(|h: &Host| at(h.ip, FRONT)).collect()
}

fn forwarded(n: &Launched, node: &str) -> u64 {
    let metrics = http::get(n.web, "/metrics", Duration::from_secs(5)).expect("metrics");
    let text = String::from_utf8_lossy(&metrics.body).to_string();
    let prefix = format!("monitor_cluster_forwarded_total{{node=\"{node}\"}} ");
    let line = text.lines().find_map(|l| l.strip_prefix(&prefix));
    line.and_then(|v| v.trim().parse().ok()).unwrap_or_else(|| panic!("no {prefix} in:\n{text}"))
}

#[test]
fn three_namespaced_nodes_forward_to_the_owner_and_never_misroute_under_load() {
    let test = "three_namespaced_nodes_forward_to_the_owner_and_never_misroute_under_load";
    if !required(test, false) {
        return;
    }
    let _serial = one_at_a_time();
    let (lan, nodes) = three();
    let f = fronts(&lan);

    // Minted on a, used through b: it reaches the process on a that issued it, and b counts each forward.
    let (token, owner) = mint(f[0]);
    assert!(token.starts_with(&format!("a.{owner}.")), "{token}");
    let before = forwarded(&nodes[1], "b");
    for _ in 0..5 {
        let r = get(f[1], "/fhir/use", &[("X-Cache-Id", &token)]);
        assert_eq!((r.status, r.header("x-served-by")), (200, Some(owner.as_str())), "{}", r.text());
    }
    assert_eq!(forwarded(&nodes[1], "b") - before, 5, "b counts its forwards");

    // 12 clients through b and c for 10 s, with 4 ids of each node.
    let ids: Ids = Arc::new(RwLock::new(ids_of(&f, 4)));
    let load = Load::start(12, f[1..].to_vec(), ids, Arc::new(AtomicUsize::new(usize::MAX)), Duration::from_secs(10));
    std::thread::sleep(Duration::from_secs(10));
    let sent = load.finish();
    let wrong: Vec<&Sent> = sent.iter().filter(|s| s.status != 200 || s.misrouted()).collect();
    assert!(
        wrong.is_empty(),
        "{} of {} not answered by their owner: {:#?}",
        wrong.len(),
        sent.len(),
        &wrong[..wrong.len().min(5)]
    );
    assert!(sent.len() >= 500, "only {} requests in 10 s", sent.len());
    for node in NAMES {
        assert!(sent.iter().any(|s| s.node == node), "no request for {node}'s ids");
    }
    assert!(forwarded(&nodes[1], "b") > before + 5 && forwarded(&nodes[2], "c") > 0);
}

#[test]
fn a_killed_namespaced_node_gets_503_from_the_others_and_nothing_is_misrouted() {
    let test = "a_killed_namespaced_node_gets_503_from_the_others_and_nothing_is_misrouted";
    if !required(test, false) {
        return;
    }
    let _serial = one_at_a_time();
    let (lan, nodes) = three();
    let f = fronts(&lan);
    let ids: Ids = Arc::new(RwLock::new(ids_of(&f, 3)));
    let load = Load::start(8, f[1..].to_vec(), ids, Arc::new(AtomicUsize::new(usize::MAX)), Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(1));

    // kill -9 of a's monitor and of its processes: nothing of a answers, and no leave is told.
    lan.hosts[0].kill_all();
    let killed = Instant::now();
    for n in &nodes[1..] {
        wait_member(n, "a", |m| m["state"] == "dead", Duration::from_secs(8));
    }
    let dead_after = killed.elapsed();
    std::thread::sleep(Duration::from_secs(1));
    let sent = load.finish();

    assert!(dead_after < SUSPECT_AND_DEAD + Duration::from_millis(1500), "a seen dead after {dead_after:?}");
    let misrouted: Vec<&Sent> = sent.iter().filter(|s| s.misrouted()).collect();
    assert!(misrouted.is_empty(), "answered by a process that is not the owner: {misrouted:#?}");
    let after: Vec<&Sent> = sent.iter().filter(|s| s.node == "a" && s.started > killed).collect();
    assert!(after.len() >= 20, "only {} requests for a's ids after the kill", after.len());
    let other: Vec<&&Sent> = after.iter().filter(|s| !s.owner_unavailable()).collect();
    assert!(other.is_empty(), "a's ids after the kill, not 503 owner-node-unavailable: {other:#?}");
    let live = sent.iter().filter(|s| s.node != "a");
    let failed: Vec<&Sent> = live.filter(|s| s.status != 200).collect();
    assert!(failed.is_empty(), "b's and c's ids failed: {failed:#?}");
}

#[test]
fn a_partitioned_namespaced_node_is_dead_to_the_others_then_back_and_served_again() {
    let test = "a_partitioned_namespaced_node_is_dead_to_the_others_then_back_and_served_again";
    if !required(test, true) {
        return;
    }
    let _serial = one_at_a_time();
    let (lan, nodes) = three();
    let f = fronts(&lan);
    let (token, owner) = mint(f[0]);
    let a = &lan.hosts[0];

    a.cut_off_from(&[lan.hosts[1].ip, lan.hosts[2].ip]);
    for n in &nodes[1..] {
        wait_member(n, "a", |m| m["state"] == "dead", Duration::from_secs(10));
    }
    wait_member(&nodes[0], "b", |m| m["state"] == "dead", Duration::from_secs(10));
    for front in &f[1..] {
        let r = get(*front, "/fhir/use", &[("X-Cache-Id", &token)]);
        assert_eq!(r.status, 503, "{}", r.text());
        assert!(r.text().contains("owner-node-unavailable"), "{}", r.text());
    }
    // a itself still serves its caches to whoever reaches it.
    let r = get(f[0], "/fhir/use", &[("X-Cache-Id", &token)]);
    assert_eq!((r.status, r.header("x-served-by")), (200, Some(owner.as_str())), "{}", r.text());

    a.heal();
    let healed = Instant::now();
    for n in &nodes[1..] {
        wait_member(n, "a", |m| m["state"] == "alive", Duration::from_secs(20));
    }
    wait_member(&nodes[0], "b", |m| m["state"] == "alive", Duration::from_secs(20));
    wait_member(&nodes[0], "c", |m| m["state"] == "alive", Duration::from_secs(20));
    eprintln!("a alive again on b and c {:?} after the heal", healed.elapsed());
    for front in &f[1..] {
        let r = get(*front, "/fhir/use", &[("X-Cache-Id", &token)]);
        assert_eq!((r.status, r.header("x-served-by")), (200, Some(owner.as_str())), "{}", r.text());
    }
}

#[test]
fn a_sigtermed_namespaced_node_leaves_before_its_front_door_closes() {
    let test = "a_sigtermed_namespaced_node_leaves_before_its_front_door_closes";
    if !required(test, false) {
        return;
    }
    let _serial = one_at_a_time();
    let (lan, mut nodes) = three();
    let f = fronts(&lan);
    let ids: Ids = Arc::new(RwLock::new(ids_of(&f[2..], 4)));
    // 16 clients through b only, all with c's ids: forwards in flight around the moment c leaves.
    let load = Load::start(16, vec![f[1]], ids, Arc::new(AtomicUsize::new(usize::MAX)), Duration::from_secs(30));
    // A slow request on c, in flight when the SIGTERM comes: the drain lets it finish.
    let slow = std::thread::spawn(move || request(f[2], "/fhir/slow?sleep_ms=1500", &[]));
    std::thread::sleep(Duration::from_millis(700));

    let mut c = nodes.pop().expect("c");
    c.sigterm();
    let termed = Instant::now();
    let (_, left_after) = wait_member(&nodes[1], "c", |m| m["state"] == "left", Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(500));
    let sent = load.finish();
    let status = c.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "c exited with {status}");
    let slow = slow.join().expect("the slow request");
    assert!(slow.as_ref().is_ok_and(|r| r.status == 200), "c's in-flight request: {slow:?}");

    assert!(left_after < Duration::from_millis(1500), "b saw c leave after {left_after:?}");
    let misrouted: Vec<&Sent> = sent.iter().filter(|s| s.misrouted()).collect();
    assert!(misrouted.is_empty(), "{misrouted:#?}");
    let odd: Vec<&Sent> = sent.iter().filter(|s| s.status != 200 && !s.owner_unavailable()).collect();
    assert!(odd.is_empty(), "c's ids through b, neither served nor 503 owner-node-unavailable: {odd:#?}");
    let refused = sent.iter().filter(|s| s.started > termed + left_after && s.owner_unavailable()).count();
    assert!(refused > 0, "no request for c's ids was refused after c left");
    let b_log = nodes[1].stderr();
    assert!(!b_log.contains("forward to the owner node failed"), "b forwarded to c after it closed:\n{b_log}");
}

#[test]
fn a_rolling_restart_of_three_namespaced_nodes_fails_only_the_restarting_nodes_caches() {
    let test = "a_rolling_restart_of_three_namespaced_nodes_fails_only_the_restarting_nodes_caches";
    if !required(test, false) {
        return;
    }
    let _serial = one_at_a_time();
    let (lan, mut nodes) = three();
    let f = fronts(&lan);
    let ids: Ids = Arc::new(RwLock::new(ids_of(&f, 4)));
    let out = Arc::new(AtomicUsize::new(usize::MAX));
    let load = Load::start(12, f.clone(), ids.clone(), out.clone(), Duration::from_secs(120));
    std::thread::sleep(Duration::from_secs(1));

    // Node i's window: from its leaving the rotation to its fresh caches being in the clients' hands.
    let mut windows: Vec<(String, Instant, Instant)> = Vec::new();
    for i in 0..3 {
        let began = Instant::now();
        out.store(i, Ordering::Relaxed);
        // What is in flight through its front door ends (the fixtures answer at once).
        std::thread::sleep(Duration::from_millis(300));
        let status = nodes[i].terminate(Duration::from_secs(30));
        assert!(status.success(), "{} exited with {status}", NAMES[i]);
        nodes[i] = start(&lan, i);
        let others: Vec<&Launched> = nodes.iter().collect();
        settle(&others);
        // Its caches died with its processes: the clients start new ones there, then it rejoins the rotation.
        let fresh = ids_of(&f[i..=i], 4);
        {
            let mut ids = ids.write().unwrap_or_else(|p| p.into_inner());
            ids.retain(|(id, _)| !id.starts_with(&format!("{}.", NAMES[i])));
            ids.extend(fresh);
        }
        out.store(usize::MAX, Ordering::Relaxed);
        windows.push((NAMES[i].to_string(), began, Instant::now()));
        std::thread::sleep(Duration::from_secs(1));
    }
    let sent = load.finish();

    let misrouted: Vec<&Sent> = sent.iter().filter(|s| s.misrouted()).collect();
    assert!(misrouted.is_empty(), "{misrouted:#?}");
    let in_window = |s: &Sent| windows.iter().any(|(n, b, e)| *n == s.node && s.ended >= *b && s.started <= *e);
    let failed: Vec<&Sent> = sent.iter().filter(|s| s.status != 200).collect();
    let stray: Vec<&&Sent> = failed.iter().filter(|s| !in_window(s)).collect();
    assert!(stray.is_empty(), "failed outside their owner's restart: {stray:#?}");
    // A lost cache answers 503 owner-node-unavailable (its node away), 503 with the owner process not available
    // (its node back, that process not yet healthy) or 404 cache-id-unknown (the new process never issued it).
    let process_down = |s: &Sent| s.status == 503 && s.retry_after && s.body.contains(&format!("({})", s.owner));
    let unknown = |s: &Sent| s.status == 404 && s.body.contains("cache-id-unknown");
    let odd: Vec<&&Sent> =
        failed.iter().filter(|s| !s.owner_unavailable() && !process_down(s) && !unknown(s)).collect();
    assert!(odd.is_empty(), "{odd:#?}");
    let kinds = [
        failed.iter().filter(|s| s.owner_unavailable()).count(),
        failed.iter().filter(|s| process_down(s)).count(),
        failed.iter().filter(|s| unknown(s)).count(),
    ];
    eprintln!(
        "failed: {} owner-node-unavailable, {} owner process down, {} cache-id-unknown",
        kinds[0], kinds[1], kinds[2]
    );
    for name in NAMES {
        let n = failed.iter().filter(|s| s.node == name).count();
        eprintln!("restart of {name}: {n} requests for its caches failed");
        assert!(n > 0, "no request for {name}'s caches failed while it restarted: the test did not reach them");
    }
    eprintln!("{} requests, {} failed, all for the restarting node's caches", sent.len(), failed.len());
    assert!(sent.len() - failed.len() >= 1000, "only {} served", sent.len() - failed.len());
}

#[test]
fn an_owner_whose_front_door_is_firewalled_gets_503_or_with_fallback_any_is_served_elsewhere() {
    let test = "an_owner_whose_front_door_is_firewalled_gets_503_or_with_fallback_any_is_served_elsewhere";
    if !required(test, true) {
        return;
    }
    let _serial = one_at_a_time();
    let lan = Lan::new(3);
    let a = start(&lan, 0);
    wait_member(&a, "a", |m| m["self"] == true, Duration::from_secs(20));
    let b = start(&lan, 1);
    let c = start_with(&lan, 2, |c| c.set("cluster", "fallback", "any"));
    settle(&[&a, &b, &c]);
    let f = fronts(&lan);
    let (token, owner) = mint(f[0]);

    lan.hosts[0].refuse_tcp_from(&[lan.hosts[1].ip, lan.hosts[2].ip], FRONT);
    // b: 503, saying the owner is unreachable; none of b's processes serves it.
    let r = get(f[1], "/fhir/use", &[("X-Cache-Id", &token)]);
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("owner-node-unavailable") && r.text().contains("unreachable"), "{}", r.text());
    assert!(r.header("retry-after").is_some() && r.header("x-served-by").is_none(), "{:?}", r.headers);
    // c: served by one of c's processes, which gets the plain cache id (not the token) and, not knowing it, says
    // so (the client rebuilds its cache there); marked as a fallback.
    let r = get(f[2], "/fhir/use", &[("X-Cache-Id", &token)]);
    assert_eq!(r.header("x-route-fallback"), Some("owner-node-down"), "{}: {}", r.status, r.text());
    let echo: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
    let inner = token.split('.').take(3).skip(1).collect::<Vec<_>>().join(".");
    let got = (r.status, echo["error"].as_str(), echo["cache_id"].as_str());
    assert_eq!(got, (404, Some("cache-id-unknown"), Some(inner.as_str())), "{}", r.text());
    assert!(echo["name"].as_str().is_some_and(|n| n.starts_with('c')), "served by one of c's: {}", r.text());
    assert!(c.stderr().contains("served here (fallback = \"any\")"), "{}", c.stderr());
    // a stayed alive to both all along (only TCP to its front door was refused).
    for n in [&b, &c] {
        wait_member(n, "a", |m| m["state"] == "alive", Duration::from_secs(1));
    }

    lan.hosts[0].accept_tcp();
    for front in &f[1..] {
        let r = get(*front, "/fhir/use", &[("X-Cache-Id", &token)]);
        assert_eq!((r.status, r.header("x-served-by")), (200, Some(owner.as_str())), "{}", r.text());
    }
}
