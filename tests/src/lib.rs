//! Shared support for monitor's integration tests: requirement checks, cgroup and child-process guards, the
//! `alloc-hog` driver, a tiny HTTP client and a runner for the real `monitor` binary.
//!
//! Every guard cleans up on drop (children killed and reaped, cgroups removed), so a failing test leaves nothing
//! behind. Declare guards in the order they depend on each other: cgroup first, then the processes in it, then
//! the agent watching it; Rust drops them in reverse.

pub mod agent;
pub mod cgroup;
pub mod cgroup2;
pub mod child;
pub mod hog;
pub mod http;
pub mod proc;
pub mod reaction;
pub mod require;

pub use agent::{monitor_bin, run_monitor, workspace_root, Agent, Finished};
pub use cgroup::CgroupV1;
pub use child::{join_cgroup_at_exec, spawn_in_cgroup, ChildGuard};
pub use hog::Hog;
pub use require::{in_ci, is_root, on_path, require, require_root, require_v1};

/// One mebibyte.
pub const MIB: u64 = 1024 * 1024;

/// A fresh directory `monitor-<name>-<pid>` under the system's temp dir (emptied first if a crashed run left one).
/// Panics when it cannot be made. Tests remove it themselves at the end.
pub fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("monitor-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    d
}

/// `busybox httpd` in the foreground on 127.0.0.1:`port`, serving `dir` with an `index.html` of `hi\n` written
/// into it (output discarded): a server far smaller than ours, that forks a child per connection.
pub fn busybox_httpd(dir: &std::path::Path, port: u16) -> std::process::Command {
    let index = dir.join("index.html");
    std::fs::write(&index, "hi\n").unwrap_or_else(|e| panic!("{}: {e}", index.display()));
    let mut cmd = std::process::Command::new("busybox");
    cmd.args(["httpd", "-f", "-p", &format!("127.0.0.1:{port}"), "-h"])
        .arg(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    cmd
}

/// Polls `f` every 50 ms until it gives a value; panics with `what` after `timeout`.
pub fn wait_until<T>(what: &str, timeout: std::time::Duration, mut f: impl FnMut() -> Option<T>) -> T {
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
/// `--upstream U`, each a port on 127.0.0.1.
pub fn port_and_upstreams(args: impl IntoIterator<Item = String>) -> Result<(u16, Vec<std::net::SocketAddr>), String> {
    let (mut port, mut upstreams) = (None, Vec::new());
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
        let p: u16 = v.parse().map_err(|e| format!("{a} {v}: {e}"))?;
        match a.as_str() {
            "--port" => port = Some(p),
            "--upstream" => upstreams.push(std::net::SocketAddr::from(([127, 0, 0, 1], p))),
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    let port = port.ok_or("--port is required")?;
    if upstreams.is_empty() {
        return Err("at least one --upstream is required".into());
    }
    Ok((port, upstreams))
}
