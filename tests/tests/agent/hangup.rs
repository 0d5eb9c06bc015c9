//! SIGHUP at start: from the first lines of `main` until the reload handler is installed, the agent ignores SIGHUP
//! (`SigIgn` bit 0 of its `/proc/<pid>/status`), so hangups sent all through its start-up leave it running, and
//! once the handler exists (`SigCgt` bit 0) a hangup reloads instead.

use monitor_tests::agent::free_port;
use monitor_tests::{http, monitor_bin, require_group, ChildGuard, Group};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// (SIGHUP ignored, SIGHUP caught) from a `/proc/<pid>/status` text.
fn sighup(status: &str) -> (bool, bool) {
    let bit = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .is_some_and(|m| m & 1 != 0)
    };
    (bit("SigIgn:"), bit("SigCgt:"))
}

#[test]
fn hangups_during_start_up_do_not_end_the_agent() {
    let name = "hangups_during_start_up_do_not_end_the_agent";
    if !require_group(name) {
        return;
    }
    let cg = Group::here("hangup-start", None);
    let port = free_port();
    let mut cmd = Command::new(monitor_bin());
    cmd.args(["agent", "--cgroup", &cg.relative(), "--listen", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut agent = ChildGuard::spawn(&mut cmd);
    let pid = agent.pid();
    let path = format!("/proc/{pid}/status");
    let (mut ignored_seen, mut sent) = (false, 0u32);
    let deadline = Instant::now() + Duration::from_secs(10);
    // Watch the start-up closely, and while SIGHUP is ignored, send it.
    let caught = loop {
        let status = std::fs::read_to_string(&path).unwrap_or_default();
        let (ignored, caught) = sighup(&status);
        if caught {
            break true;
        }
        if ignored {
            ignored_seen = true;
            // SAFETY: kill with a pid of our own child.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGHUP) };
            sent += 1;
        }
        if let Some(st) = agent.wait_timeout(Duration::ZERO) {
            panic!("the agent ended ({st}) during start-up after {sent} hangups");
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_micros(200));
    };
    assert!(caught, "no SIGHUP handler within 10 s");
    assert!(ignored_seen, "SIGHUP was not ignored before its handler existed");
    assert!(sent > 0, "no hangup sent during start-up");
    // Up and answering, then a hangup on the handler reloads rather than ends it.
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    monitor_tests::wait_until("the agent's API", Duration::from_secs(20), || {
        http::get(addr, "/healthz", Duration::from_secs(2)).ok().filter(|r| r.status == 200)
    });
    // SAFETY: as above.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGHUP) };
    std::thread::sleep(Duration::from_millis(500));
    assert!(agent.wait_timeout(Duration::ZERO).is_none(), "a hangup on the running agent ended it");
    eprintln!("{name}: {sent} hangups during start-up, the agent running");
}
