//! `cargo xtask bench cluster`: what a cluster costs. Every node is a release `monitor run` on a loopback address
//! of its own (127.0.1.x), with `[cluster]` at its defaults (1000 ms suspect, 5000 ms dead) and fixture-backend
//! processes; the nodes share a token secret.
//!
//! 1. A forwarded request against a local one: two nodes a and b. wrk at c = 16 sends `/fhir/use` to b's front
//!    door with a cache id minted on b (served by b's own process: the baseline) and with one minted on a (b
//!    forwards it to a's front door, which serves it), interleaved over `BENCH_ROUNDS` rounds (default 3) of
//!    `BENCH_SECONDS` each (default 5). Goal: forwarded p50 <= 1.6 × local p50. The floor of any extra hop, in
//!    the same rounds: a byte relay (tests/src/bin/byte-relay.rs) in front of b with b's own cache ids.
//! 2. Gossip traffic per node per second at 3 and at 50 members: the nodes' own counters
//!    (`monitor_cluster_gossip_bytes_total`, UDP payloads) read from each node's `/metrics` twice,
//!    `GOSSIP_SECONDS` apart (default 30), once every member lists every other as alive. The 50 members are 50
//!    `monitor run` processes, each over one fixture master.

use super::proxy::{read_wrk, release_bins};
use crate::util::root;
use anyhow::{bail, Context, Result};
use monitor_tests::agent::free_port;
use monitor_tests::config::{strings, Config, Process};
use monitor_tests::http;
use monitor_tests::ChildGuard;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SECRET: &str = "bench-cluster-secret-0123456789abcdef";
const TOKENS: &str = "bench-cluster-tokens-0123456789abcdef";
const GOSSIP: u16 = 7946;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// One node: its loopback IP and the ports on it, its `monitor run`.
struct Node {
    name: String,
    ip: Ipv4Addr,
    front: u16,
    web: u16,
    /// Killed on drop; its processes go with it (they die with their parent).
    _child: ChildGuard,
}

impl Node {
    fn front(&self) -> SocketAddr {
        SocketAddr::from((self.ip, self.front))
    }

    fn web(&self) -> SocketAddr {
        SocketAddr::from((self.ip, self.web))
    }
}

/// Starts node `name` on `ip`, joining through `seeds`, over a fixture master (and a worker when `worker`).
fn start(bin: &Path, dir: &Path, name: &str, ip: Ipv4Addr, seeds: &[SocketAddr], worker: bool) -> Result<Node> {
    let (front, web) = (free_port(), free_port());
    let seeds: Vec<String> = seeds.iter().map(|s| s.to_string()).collect();
    let fixture = |proc_name: &str, role: &str| {
        let port = free_port();
        let cmd = [bin.join("fixture-backend").display().to_string(), "--name".into(), proc_name.into()];
        Process::new(proc_name, role, cmd.into_iter().chain(["--port".into(), port.to_string()]), port)
    };
    let mut config = Config::new()
        .probes(false)
        .proxy(SocketAddr::from((ip, front)))
        .web(SocketAddr::from((ip, web)))
        .set("cluster", "node", name)
        .set("cluster", "listen", SocketAddr::from((ip, GOSSIP)).to_string())
        .set("cluster", "secret", SECRET)
        .set("cluster", "token_secret", TOKENS)
        .set("cluster", "seeds", strings(&seeds))
        .process(fixture(&format!("{name}m0"), "master"));
    if worker {
        config = config.process(fixture(&format!("{name}tx1"), "worker"));
    }
    let file = config.write(dir.join(format!("{name}.toml")));
    let child = ChildGuard::spawn(
        Command::new(bin.join("monitor"))
            .args(["run", "--config"])
            .arg(&file)
            .env("MONITOR_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null()),
    );
    Ok(Node { name: name.to_string(), ip, front, web, _child: child })
}

/// The members `n` lists as alive, when its API answers.
fn alive(n: &Node) -> Option<usize> {
    let r = http::get(n.web(), "/api/v1/cluster", Duration::from_secs(3)).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&r.body).ok()?;
    Some(v["members"].as_array()?.iter().filter(|m| m["state"] == "alive").count())
}

/// Waits until every node lists all of them alive and answers `/readyz` 200.
fn settle(nodes: &[Node], limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    for n in nodes {
        loop {
            let ready = http::get(n.web(), "/readyz", Duration::from_secs(3)).is_ok_and(|r| r.status == 200);
            if ready && alive(n) == Some(nodes.len()) {
                break;
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} does not list {} members alive within {limit:?} (it lists {:?})",
                    n.name,
                    nodes.len(),
                    alive(n)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    Ok(())
}

/// A cache started through `front`: its signed id.
fn mint(front: SocketAddr) -> Result<String> {
    let r = http::get(front, "/fhir/start?cache=start", Duration::from_secs(5)).map_err(anyhow::Error::msg)?;
    match (r.status, r.header("x-cache-id")) {
        (200, Some(id)) => Ok(id.to_string()),
        _ => bail!("no cache id from {front}: {} {}", r.status, r.text()),
    }
}

/// wrk -t2 -c16 against `front` with `id`: (req/s, p50 µs, p99 µs).
fn wrk(front: SocketAddr, id: &str, seconds: u64) -> Result<(f64, f64, f64)> {
    let out = Command::new("wrk")
        .args(["-t2", "-c16", &format!("-d{seconds}s"), "--latency", "-H", &format!("X-Cache-Id: {id}")])
        .arg(format!("http://{front}/fhir/use"))
        .output()
        .context("running wrk (apt-get install wrk)")?;
    let (_, rps, p50, p99) = read_wrk(&out, front)?;
    Ok((rps, p50, p99))
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn forwarded(bin: &Path, dir: &Path) -> Result<()> {
    let (seconds, rounds) = (env_u64("BENCH_SECONDS", 5), env_u64("BENCH_ROUNDS", 3).max(1));
    let (ia, ib) = (Ipv4Addr::new(127, 0, 1, 2), Ipv4Addr::new(127, 0, 1, 3));
    let a = start(bin, dir, "a", ia, &[], true)?;
    let b = start(bin, dir, "b", ib, &[SocketAddr::from((ia, GOSSIP))], true)?;
    let nodes = [a, b];
    settle(&nodes, Duration::from_secs(60))?;
    let (local, remote) = (mint(nodes[1].front())?, mint(nodes[0].front())?);
    // The floor of any extra hop on this machine: a byte relay (tests/src/bin/byte-relay.rs: blocking threads, no
    // HTTP) in front of b, with b's own cache ids.
    let port = free_port();
    let _relay = ChildGuard::spawn(
        Command::new(bin.join("byte-relay"))
            .args(["--port", &port.to_string(), "--upstream", &nodes[1].front().to_string()])
            .stdin(Stdio::null()),
    );
    let relay = SocketAddr::from(([127, 0, 0, 1], port));
    wait_listening(relay)?;
    // Warm every path.
    wrk(nodes[1].front(), &local, 1)?;
    wrk(nodes[1].front(), &remote, 1)?;
    wrk(relay, &local, 1)?;
    let (mut l, mut r, mut f) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        l.push(wrk(nodes[1].front(), &local, seconds)?);
        r.push(wrk(nodes[1].front(), &remote, seconds)?);
        f.push(wrk(relay, &local, seconds)?);
    }
    let col = |v: &[(f64, f64, f64)], i: usize| -> Vec<f64> { v.iter().map(|t| [t.0, t.1, t.2][i]).collect() };
    println!(
        "forwarded against local, through the same front door (b), wrk -t2 -c16, {rounds} × {seconds} s interleaved:"
    );
    for (what, v) in
        [("local (b's cache)", &l), ("forwarded (a's cache, b -> a)", &r), ("floor: byte relay -> b, b's cache", &f)]
    {
        println!(
            "  {what}: {:.0} req/s, p50 {:.0} µs, p99 {:.0} µs",
            mean(&col(v, 0)),
            mean(&col(v, 1)),
            mean(&col(v, 2))
        );
    }
    let ratios: Vec<f64> = l.iter().zip(&r).map(|(l, r)| r.1 / l.1).collect();
    println!(
        "  forwarded / local p50: {:.2} (rounds: {}; goal <= 1.6); throughput forwarded / local {:.2}",
        mean(&ratios),
        ratios.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(", "),
        mean(&col(&r, 0)) / mean(&col(&l, 0))
    );
    let floors: Vec<f64> = l.iter().zip(&f).map(|(l, f)| f.1 / l.1).collect();
    println!(
        "  floor: one byte-relay hop / local p50: {:.2} (rounds: {}); forwarded over floor: {:.2}",
        mean(&floors),
        floors.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(", "),
        mean(&ratios) / mean(&floors).max(f64::MIN_POSITIVE)
    );
    Ok(())
}

/// Waits (at most 10 s) until something accepts connections at `addr`.
fn wait_listening(addr: SocketAddr) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if Instant::now() >= deadline {
            bail!("nothing listens at {addr} after 10 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// `monitor_cluster_gossip_bytes_total` of `n`: (sent, received).
fn gossip_bytes(n: &Node) -> Result<(u64, u64)> {
    let r = http::get(n.web(), "/metrics", Duration::from_secs(5)).map_err(anyhow::Error::msg)?;
    let text = String::from_utf8_lossy(&r.body);
    let value = |dir: &str| {
        let key = format!("monitor_cluster_gossip_bytes_total{{node=\"{}\",direction=\"{dir}\"}} ", n.name);
        text.lines().find_map(|l| l.strip_prefix(&key)?.trim().parse::<u64>().ok())
    };
    match (value("sent"), value("received")) {
        (Some(s), Some(r)) => Ok((s, r)),
        _ => bail!("no monitor_cluster_gossip_bytes_total of {} in its /metrics", n.name),
    }
}

fn gossip(bin: &Path, dir: &Path, members: usize) -> Result<()> {
    let seconds = env_u64("GOSSIP_SECONDS", 30);
    let ip = |i: usize| Ipv4Addr::new(127, 0, 1, u8::try_from(10 + i).unwrap_or(u8::MAX));
    let first = start(bin, dir, "n0", ip(0), &[], false)?;
    let seed = [SocketAddr::from((ip(0), GOSSIP))];
    let mut nodes = vec![first];
    for i in 1..members {
        nodes.push(start(bin, dir, &format!("n{i}"), ip(i), &seed, false)?);
    }
    settle(&nodes, Duration::from_secs(180))?;
    let before: Vec<(u64, u64)> = nodes.iter().map(gossip_bytes).collect::<Result<_>>()?;
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(seconds));
    let after: Vec<(u64, u64)> = nodes.iter().map(gossip_bytes).collect::<Result<_>>()?;
    let secs = t0.elapsed().as_secs_f64();
    let still = alive(&nodes[0]).unwrap_or(0);
    let sent: Vec<f64> = before.iter().zip(&after).map(|(b, a)| a.0.saturating_sub(b.0) as f64 / secs).collect();
    let recv: Vec<f64> = before.iter().zip(&after).map(|(b, a)| a.1.saturating_sub(b.1) as f64 / secs).collect();
    let max = sent.iter().copied().fold(0.0, f64::max);
    println!(
        "gossip at {members} members ({still} alive on n0 at the end), over {secs:.0} s: per node sent {:.0} B/s \
         (max {max:.0}), received {:.0} B/s; the whole cluster {:.1} kB/s",
        mean(&sent),
        mean(&recv),
        sent.iter().sum::<f64>() / 1e3
    );
    drop(nodes);
    // The nodes' gossip ports are free again before the next size starts.
    std::thread::sleep(Duration::from_secs(1));
    Ok(())
}

/// A temp folder, removed on drop.
struct Temp(PathBuf);

impl Drop for Temp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn run() -> Result<()> {
    let bin = release_bins()?;
    let dir = Temp(std::env::temp_dir().join(format!("monitor-bench-cluster-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0)?;
    eprintln!("binaries from {}", bin.strip_prefix(root()).unwrap_or(&bin).display());
    forwarded(&bin, &dir.0)?;
    gossip(&bin, &dir.0, 3)?;
    gossip(&bin, &dir.0, env_u64("GOSSIP_MEMBERS", 50) as usize)?;
    Ok(())
}
