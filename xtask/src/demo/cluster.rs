//! The demo's cluster step: two more `monitor run`s, nodes a (127.0.0.2) and b (127.0.0.3), each over a master and
//! a worker in a limited memory cgroup of its own, joined by gossip under a shared secret and signing cache ids
//! bound to their node. It shows the two list each other alive; a cache started on a, used through b's front door,
//! forwarded to a and served by the process that owns it; a tampered id refused with 401; the fleet table
//! (`monitor status --cluster`); and b leaving on SIGTERM: a sees it left at once, and b's ids get 503
//! `owner-node-unavailable` from a, never another node's process.

use super::system::{interrupted, Spec, System};
use anyhow::{bail, Context, Result};
use monitor_tests::http;
use serde_json::Value;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const SECRET: &str = "the-demo-cluster-secret-0123456789";
const TOKENS: &str = "the-demo-cluster-token-secret-0123456";
/// Each node's memory limit, MiB.
const LIMIT_MIB: u64 = 256;

/// A free UDP port on `ip`, for a node's gossip.
fn free_udp(ip: Ipv4Addr) -> Result<u16> {
    let s = UdpSocket::bind((ip, 0)).with_context(|| format!("binding a UDP port on {ip}"))?;
    Ok(s.local_addr()?.port())
}

/// Node `name` on `ip`: processes `<name>m0` and `<name>tx1`, `[cluster]` with its gossip at `gossip`.
fn spec(name: &str, ip: Ipv4Addr, gossip: SocketAddr, seeds: &[SocketAddr]) -> Spec {
    let seeds: Vec<String> = seeds.iter().map(|s| format!("{:?}", s.to_string())).collect();
    Spec {
        name: name.to_string(),
        ip,
        processes: vec![(format!("{name}m0"), "master"), (format!("{name}tx1"), "worker")],
        more: format!(
            "\n[cluster]\nnode = {name:?}\nlisten = \"{gossip}\"\nseeds = [{}]\nsecret = {SECRET:?}\n\
             token_secret = {TOKENS:?}\nsuspect_timeout_ms = 500\ndead_timeout_ms = 2000\n",
            seeds.join(", ")
        ),
    }
}

/// `/api/v1/cluster` of `n`: each member's name and state.
fn members(n: &System) -> Vec<(String, String)> {
    let view = http::get(n.web, "/api/v1/cluster", Duration::from_secs(3))
        .ok()
        .and_then(|r| serde_json::from_slice::<Value>(&r.body).ok())
        .unwrap_or_default();
    let list = view["members"].as_array().cloned().unwrap_or_default();
    list.iter()
        .map(|m| (m["node"].as_str().unwrap_or("?").to_string(), m["state"].as_str().unwrap_or("?").to_string()))
        .collect()
}

/// Waits (at most `limit`) until `n` lists `node` in `state`; how long it took.
fn wait_member(n: &System, node: &str, state: &str, limit: Duration) -> Result<Duration> {
    let t = Instant::now();
    while t.elapsed() < limit && !interrupted() {
        if members(n).iter().any(|(m, s)| m == node && s == state) {
            return Ok(t.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("{node} not {state} within {limit:?}: {:?}", members(n))
}

/// A cache started through `front`: its id as the client gets it, and the process that serves it.
fn start_cache(front: SocketAddr) -> Result<(String, String)> {
    let r = http::get(front, "/fhir/start?cache=start", Duration::from_secs(5)).map_err(anyhow::Error::msg)?;
    match (r.status, r.header("x-cache-id"), r.header("x-served-by")) {
        (200, Some(id), Some(by)) => Ok((id.to_string(), by.to_string())),
        _ => bail!("no cache id from {front}: {} {}", r.status, r.text().trim()),
    }
}

fn with_id(front: SocketAddr, id: &str) -> Result<http::Response> {
    http::request(front, "GET", "/fhir/use", &[("X-Cache-Id", id)], Duration::from_secs(5)).map_err(anyhow::Error::msg)
}

pub fn play(bin: &Path, parent: &Path) -> Result<()> {
    let (ia, ib) = (Ipv4Addr::new(127, 0, 0, 2), Ipv4Addr::new(127, 0, 0, 3));
    let ga = SocketAddr::from((ia, free_udp(ia)?));
    let gb = SocketAddr::from((ib, free_udp(ib)?));
    let a = System::start(bin, parent, LIMIT_MIB, spec("a", ia, ga, &[]))?;
    let began = Instant::now();
    let mut b = System::start(bin, parent, LIMIT_MIB, spec("b", ib, gb, &[ga]))?;
    println!("   node a: front door http://{}/, home page http://{}/, gossip {ga}", a.proxy, a.web);
    println!("   node b: front door http://{}/, home page http://{}/, gossip {gb} (seed: a)", b.proxy, b.web);
    wait_member(&a, "b", "alive", Duration::from_secs(10))?;
    wait_member(&b, "a", "alive", Duration::from_secs(10))?;
    println!(
        "   a and b list each other alive {:.1} s after b started (SWIM gossip over UDP, each datagram sealed with \
         the cluster secret)",
        began.elapsed().as_secs_f64()
    );

    let (id, owner) = start_cache(a.proxy)?;
    println!("   a cache started on a, served by {owner}: X-Cache-Id {id}");
    println!("     (<node>.<process>.<id>.<expiry>.<mac>: bound to node a and process {owner}, HMAC-SHA256)");
    let mut served = Vec::new();
    for _ in 0..5 {
        let r = with_id(b.proxy, &id)?;
        served.push(format!("{} {}", r.status, r.header("x-served-by").unwrap_or("-")));
    }
    let forwarded = b.status().ok().and_then(|s| s.pointer("/front_door/forwarded_total").and_then(Value::as_u64));
    println!(
        "   5 requests with it through b's front door: {}; b forwarded {} of them to a",
        served.join(", "),
        forwarded.map_or("?".into(), |n| n.to_string())
    );
    if served.iter().any(|s| s != &format!("200 {owner}")) {
        bail!("a's cache was not served by {owner} through b: {served:?}");
    }
    let mut tampered = id.clone();
    let last = if tampered.ends_with('0') { "1" } else { "0" };
    tampered.replace_range(tampered.len() - 1.., last);
    let r = with_id(b.proxy, &tampered)?;
    println!("   the same id with its mac changed, through b: {} {:?}", r.status, r.text().trim());

    // The fleet table once a's poller has b's figures (it asks every 2 s).
    let deadline = Instant::now() + Duration::from_secs(6);
    while Instant::now() < deadline && !interrupted() {
        let fleet = http::get(a.web, "/api/v1/cluster/fleet", Duration::from_secs(3)).ok();
        let v: Value = fleet.and_then(|r| serde_json::from_slice(&r.body).ok()).unwrap_or_default();
        if v.pointer("/total/answering").and_then(Value::as_u64) == Some(2) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let url = format!("http://{}", a.web);
    println!("   monitor status --cluster --url {url}:");
    let st = Command::new(a.monitor_bin()).args(["status", "--cluster", "--url", &url]).status();
    if !st.as_ref().is_ok_and(|s| s.success()) {
        bail!("monitor status --cluster --url {url} failed: {st:?}");
    }

    let (b_id, b_owner) = start_cache(b.proxy)?;
    b.sigterm();
    let left = wait_member(&a, "b", "left", Duration::from_secs(5))?;
    println!(
        "   SIGTERM to b: a lists b as left {} ms later (b told every member before it drained)",
        left.as_millis()
    );
    let r = with_id(a.proxy, &b_id)?;
    println!(
        "   b's cache ({b_owner}) through a now: {}, Retry-After {}, {:?}",
        r.status,
        r.header("retry-after").unwrap_or("-"),
        r.text().trim()
    );
    if r.status != 503 || !r.text().contains("owner-node-unavailable") {
        bail!("b's cache through a after b left: {} {}", r.status, r.text().trim());
    }
    let pids_b = b.launched_pids();
    let exit_b = b.wait_exit(Duration::from_secs(15));
    let mut left = b.leftovers(&pids_b);
    let pids_a = a.launched_pids();
    let mut a = a;
    a.sigterm();
    let exit_a = a.wait_exit(Duration::from_secs(15));
    left.extend(a.leftovers(&pids_a));
    match (exit_b, exit_a) {
        (Some(sb), Some(sa)) if sb.success() && sa.success() && left.is_empty() => {
            println!("   b, then a, drained and exited 0; their groups, processes and ports are gone");
            Ok(())
        }
        (Some(sb), Some(sa)) if sb.success() && sa.success() => bail!("left behind: {}", left.join(", ")),
        other => bail!("the cluster's nodes did not both exit 0 after SIGTERM: {other:?}"),
    }
}
