//! `[[process]] user`: a worker started as `nobody` (python3's http.server, a real server) runs with nobody's uid,
//! primary group and only its groups, serves through the front door, and is listed like any other process; and
//! `monitor run` not running as root refuses at start to take another user.

use monitor_tests::agent::free_port;
use monitor_tests::config::{bytes, Process};
use monitor_tests::run::{member, processes, Launched};
use monitor_tests::{require_group, require_program, temp_dir, Group, MIB};
use std::time::Duration;

/// `Uid:`, `Gid:` or `Groups:` of `/proc/<pid>/status`: the numbers on that line.
fn ids(pid: u64, key: &str) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_else(|e| panic!("pid {pid}: {e}"));
    let line = status.lines().find(|l| l.starts_with(key)).unwrap_or_else(|| panic!("no {key} in:\n{status}"));
    line[key.len()..].split_whitespace().map(|n| n.parse().unwrap_or_else(|e| panic!("{line}: {e}"))).collect()
}

/// nobody's uid and primary gid, from `id` (the host's user database, as monitor reads it).
fn nobody() -> (u32, u32) {
    let id = |flag: &str| {
        let out = std::process::Command::new("id").args([flag, "nobody"]).output().expect("id");
        String::from_utf8_lossy(&out.stdout).trim().parse::<u32>().unwrap_or_else(|e| panic!("id {flag} nobody: {e}"))
    };
    (id("-u"), id("-g"))
}

#[test]
fn a_worker_with_user_nobody_runs_as_nobody_and_serves_through_the_front_door() {
    let test = "a_worker_with_user_nobody_runs_as_nobody_and_serves_through_the_front_door";
    if !require_group(test) || !require_program(test, "python3") {
        return;
    }
    let (uid, gid) = nobody();
    assert_ne!(uid, 0);
    // A directory root made and everyone can read: what the worker serves.
    let www = temp_dir("users-www");
    std::fs::write(www.join("hello.txt"), "served as nobody\n").expect("write hello.txt");
    let cg = Group::here("users", None);
    let port = free_port();
    let dir = www.display().to_string();
    let worker = Process::new(
        "tx1",
        "worker",
        ["python3", "-m", "http.server", "--bind", "127.0.0.1", "--directory", &dir, &port.to_string()],
        port,
    )
    .set("health", "/hello.txt")
    .set("user", "nobody");
    let config = processes([Process::fixture("m0", "master"), worker])
        .cgroup(cg.path())
        .set("group", "limit_bytes", bytes(512 * MIB))
        .set("proxy", "master_serves_tx", false);
    let run = Launched::start("users", config, None, &[]);
    let s = run.wait_for("tx1 ready", |s| member(s, "tx1")["state"] == "ready", Duration::from_secs(20));
    let pid = member(&s, "tx1")["pid"].as_u64().unwrap_or_else(|| panic!("no pid for tx1: {s:#}"));

    // Real, effective, saved and filesystem ids are nobody's; its only group is nobody's primary one (the
    // launcher's root groups are gone).
    assert_eq!(ids(pid, "Uid:"), [uid; 4], "tx1 (pid {pid})");
    assert_eq!(ids(pid, "Gid:"), [gid; 4], "tx1 (pid {pid})");
    assert_eq!(ids(pid, "Groups:"), [gid], "tx1 (pid {pid})");
    let master = member(&s, "m0")["pid"].as_u64().unwrap_or(0);
    assert_eq!(ids(master, "Uid:")[0], 0, "m0 has no user: it runs as monitor does");

    let r = run.get("/hello.txt", &[]);
    assert_eq!((r.status, r.text()), (200, "served as nobody\n".to_string()), "through the front door");
    assert!(
        r.header("server").is_some_and(|s| s.contains("Python")),
        "answered by http.server: {:?}",
        r.header("server")
    );
    let listed = s["processes"].as_array().into_iter().flatten().any(|p| p["pid"].as_u64() == Some(pid));
    assert!(listed, "tx1 (pid {pid}) is one of the group's processes: {s:#}");
    drop(run);
    let _ = std::fs::remove_dir_all(&www);
}

#[test]
fn monitor_run_not_root_refuses_to_start_a_process_as_another_user() {
    let test = "monitor_run_not_root_refuses_to_start_a_process_as_another_user";
    if !require_group(test) || !require_program(test, "setpriv") {
        return;
    }
    let (uid, gid) = nobody();
    // monitor itself as nobody, asked to start its master as root.
    let cg = Group::here("users-not-root", None);
    let config = processes([Process::fixture("m0", "master").set("user", "root")]).cgroup(cg.path());
    let path = config.write(std::env::temp_dir().join(format!("monitor-users-not-root-{}.toml", std::process::id())));
    let out = std::process::Command::new("setpriv")
        .args(["--reuid", &uid.to_string(), "--regid", &gid.to_string(), "--clear-groups", "--"])
        .arg(monitor_tests::monitor_bin())
        .args(["run", "--config"])
        .arg(&path)
        .output()
        .expect("setpriv");
    let _ = std::fs::remove_file(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "monitor run as nobody started m0 as root:\n{stderr}");
    let want = format!("process m0: monitor runs as uid {uid} gid {gid}, not root: it cannot start a process as uid 0");
    assert!(stderr.contains(&want), "want {want:?} in:\n{stderr}");
}
