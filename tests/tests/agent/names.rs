//! Names after `execve`: a shell in the group that execs its program keeps its pid and start time, and the agent's
//! `/api/v1/status` names the program within about a second of the exec (names are read again from
//! `/proc/<pid>/comm` once a second).

use monitor_tests::agent::free_port;
use monitor_tests::{http, monitor_bin, require_v1, spawn_in_cgroup, CgroupV1, ChildGuard, TempDir};
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The name `/api/v1/status` gives `pid`, when the agent answers and lists it.
fn name_of(port: u16, pid: u32) -> Option<String> {
    let r = http::get(std::net::SocketAddr::from(([127, 0, 0, 1], port)), "/api/v1/status", Duration::from_secs(5));
    let r = r.ok().filter(|r| r.status == 200)?;
    let s: Value = serde_json::from_slice(&r.body).ok()?;
    let p = s["processes"].as_array()?.iter().find(|p| p["pid"].as_u64() == Some(u64::from(pid)))?;
    p["name"].as_str().map(str::to_string)
}

#[test]
fn a_script_that_execs_its_program_is_named_after_the_program() {
    let name = "a_script_that_execs_its_program_is_named_after_the_program";
    if !require_v1(name) {
        return;
    }
    let cg = CgroupV1::create("exec-names", None);
    // The shell waits until the agent has named it, then becomes `sleep`.
    let dir = TempDir::new("exec-names");
    let go = dir.path().join("go");
    let script = format!("while [ ! -e '{}' ]; do sleep 0.05; done; exec sleep 60", go.display());
    let mut sh = Command::new("sh");
    sh.args(["-c", &script]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    let shell = spawn_in_cgroup(&mut sh, cg.path());
    let pid = shell.pid();
    let port = free_port();
    let mut cmd = Command::new(monitor_bin());
    cmd.args(["agent", "--cgroup", &cg.relative(), "--listen", &format!("127.0.0.1:{port}"), "--interval-ms", "100"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _agent = ChildGuard::spawn(&mut cmd);
    let before =
        monitor_tests::wait_until("the agent lists the script", Duration::from_secs(20), || name_of(port, pid));
    assert_eq!(before, "sh", "before the exec");
    // Past the agent's first reading of the name, so that only a second reading can see the exec.
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(&go, b"").unwrap_or_else(|e| panic!("{}: {e}", go.display()));
    let comm = || std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim().to_string();
    monitor_tests::wait_until("the script's exec", Duration::from_secs(10), || (comm() == "sleep").then_some(()));
    let exec_seen = Instant::now();
    let mut last = String::new();
    monitor_tests::wait_until("the status names the exec'd program", Duration::from_secs(5), || {
        last = name_of(port, pid).unwrap_or_default();
        (last == "sleep").then_some(())
    });
    let took = exec_seen.elapsed();
    assert!(took <= Duration::from_millis(1500), "named `sleep` {took:?} after the exec");
    eprintln!("{name}: named `sh` before the exec, `sleep` {took:?} after it");
}
