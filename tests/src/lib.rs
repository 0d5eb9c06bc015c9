//! The support every monitor test uses: requirement checks (`require`), cgroup v1/v2 groups with drop guards
//! (`cgroup`, `cgroup2`, `group`), child-process guards (`child`), the fixtures' drivers (`hog`, `reaction`), real
//! servers and clients (`servers`, `clients`, `wrk`), crowds of clients that hold connections (`crowd`), alert
//! hooks (`hooks`) and a webhook recorder (`recorder`), systemd's notification socket (`notify`), a tiny HTTP client
//! (`http`), network namespaces with a bridge (`netns`), the agent and `monitor run` as children (`agent`, `run`),
//! the config builder they are started with (`config`), and the memory scenario that runs on both hierarchies
//! (`scenario`).
//!
//! Every guard cleans up on drop (children killed and reaped, cgroups removed), so a failing test leaves nothing
//! behind. Declare guards in the order they depend on each other: cgroup first, then the processes in it, then
//! the agent watching it; Rust drops them in reverse.

pub mod agent;
pub mod bins;
pub mod cgroup;
pub mod cgroup2;
pub mod child;
mod ci;
pub mod clients;
pub mod config;
pub mod crowd;
pub mod group;
pub mod hog;
pub mod hooks;
pub mod http;
pub mod markdown;
pub mod netns;
pub mod notify;
pub mod pace;
pub mod proc;
pub mod reaction;
pub mod recorder;
pub mod require;
pub mod run;
pub mod scenario;
pub mod servers;
pub mod status;
pub mod temp;
pub mod wrk;

pub use agent::{monitor_bin, run_monitor, workspace_root, Agent, Finished};
pub use cgroup::CgroupV1;
pub use child::{join_cgroup_at_exec, spawn_in_cgroup, ChildGuard};
pub use group::{Group, Hierarchy};
pub use hog::Hog;
pub use recorder::Recorder;
pub use require::{in_ci, is_root, on_path, require, require_group, require_program, require_root, require_v1};
pub use temp::{temp_dir, write_secret, TempDir};

/// One mebibyte.
pub const MIB: u64 = 1024 * 1024;

/// The JSON documents of a file written one per line (blank lines skipped; none when the file is missing), as the
/// tests' alert hooks write them; a line that is not JSON fails the test.
pub fn json_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: bad JSON ({e}): {l}", path.display())))
        .collect()
}

/// Polls `f` every 50 ms until it gives a value; panics with `what` after `timeout`.
pub fn wait_until<T>(what: &str, timeout: std::time::Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let timeout = pace::scaled(timeout);
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if std::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The arguments of the proxy benchmark's floor proxies (`bare-hop`, `byte-relay`): `--port P` and one or more
/// `--upstream U`, each a port on 127.0.0.1 or an address with its port.
pub fn port_and_upstreams(args: impl IntoIterator<Item = String>) -> Result<(u16, Vec<std::net::SocketAddr>), String> {
    let (mut port, mut upstreams) = (None, Vec::new());
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
        match a.as_str() {
            "--port" => port = Some(v.parse::<u16>().map_err(|e| format!("{a} {v}: {e}"))?),
            // A port on 127.0.0.1, or an address with its port.
            "--upstream" => upstreams.push(match v.parse::<u16>() {
                Ok(p) => std::net::SocketAddr::from(([127, 0, 0, 1], p)),
                Err(_) => v.parse().map_err(|e| format!("{a} {v}: neither a port nor an address: {e}"))?,
            }),
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    let port = port.ok_or("--port is required")?;
    if upstreams.is_empty() {
        return Err("at least one --upstream is required".into());
    }
    Ok((port, upstreams))
}
