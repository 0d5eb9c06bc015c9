//! Names after `execve`: a shell in the group that execs its program keeps its pid and start time, and the agent's
//! `/api/v1/status` names the program within about a second of the exec (names are read again from
//! `/proc/<pid>/comm` once a second). And a name no process can hide behind: one named with bytes that are not UTF-8
//! (any process may name itself so) is sampled like any other, shown lossily, and told to abort when largest; its
//! memory is not counted as held beyond the sampled processes. Nor a name that writes the log or the terminal: a
//! process named with a newline and `killed: …`, or with a terminal's escape sequence, is killed in one log line
//! and listed by `monitor status` with its name escaped.

use monitor_tests::agent::free_port;
use monitor_tests::{http, monitor_bin, require_group, spawn_in_cgroup, ChildGuard, Group, TempDir};
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
    if !require_group(name) {
        return;
    }
    let cg = Group::here("exec-names", None);
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

/// A python process in `cg` that names itself `name` (raw bytes, through `prctl(PR_SET_NAME)`), touches `mib` MiB,
/// says `ready` and sleeps.
fn named_holder(cg: &Group, name: &[u8], mib: u64) -> ChildGuard {
    let literal: String = name.iter().map(|b| format!("\\x{b:02x}")).collect();
    let script = format!(
        "import ctypes,sys,time\nctypes.CDLL(None).prctl(15, b'{literal}', 0, 0, 0)\nb = bytearray({mib} << 20)\n\
         b[::4096] = b'\\x01' * len(range(0, len(b), 4096))\nprint('ready', flush=True)\ntime.sleep(120)\n"
    );
    let mut cmd = Command::new("python3");
    cmd.args(["-c", &script]).stdout(Stdio::piped()).stdin(Stdio::null());
    let mut child = spawn_in_cgroup(&mut cmd, cg.path());
    let out = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut line = String::new();
    let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line);
    assert_eq!(line.trim(), "ready", "the holder of {mib} MiB started");
    child
}

#[test]
fn a_process_named_with_bytes_that_are_not_utf8_is_seen_and_is_the_one_aborted() {
    let name = "a_process_named_with_bytes_that_are_not_utf8_is_seen_and_is_the_one_aborted";
    if !require_group(name) {
        return;
    }
    let cg = Group::here("hostile-name", Some(512 << 20));
    let hidden = named_holder(&cg, b"\xff\xfe\xfd\x80hide", 300);
    let _small = named_holder(&cg, b"small", 60);
    let raw = std::fs::read(format!("/proc/{}/comm", hidden.pid())).unwrap_or_default();
    assert!(std::str::from_utf8(&raw).is_err(), "the name is not UTF-8: {raw:?}");
    // The abort line at 70% of the limit (the two hold ~360 MiB of 512): the largest must be the one told.
    let dir = TempDir::new("hostile-name");
    let config = monitor_tests::config::Config::new()
        .lines("policy", "refuse_at = 0.6\nabort_at = 0.65\nkill = false")
        .probes(false)
        .write(dir.path().join("monitor.toml"));
    let port = free_port();
    let mut agent = ChildGuard::spawn(
        Command::new(monitor_bin())
            .args(["agent", "--config"])
            .arg(&config)
            .arg("--cgroup")
            .arg(cg.path())
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        let r = http::get(std::net::SocketAddr::from(([127, 0, 0, 1], port)), "/api/v1/status", Duration::from_secs(2));
        let s: Option<Value> = r.ok().filter(|r| r.status == 200).and_then(|r| serde_json::from_slice(&r.body).ok());
        if let Some(s) = s.filter(|s| s["policy"]["state"] == "aborting") {
            break s;
        }
        assert!(Instant::now() < deadline, "the agent never reached aborting");
        assert!(agent.wait_timeout(Duration::ZERO).is_none(), "the agent exited");
        std::thread::sleep(Duration::from_millis(100));
    };
    let entry = status["processes"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["pid"].as_u64() == Some(u64::from(hidden.pid()))))
        .unwrap_or_else(|| panic!("the process with a hostile name is not in the status:\n{status:#}"));
    assert!(entry["rss_bytes"].as_u64().unwrap_or(0) >= 290 << 20, "its RSS is counted: {entry}");
    assert!(entry["name"].as_str().is_some_and(|n| n.ends_with("hide")), "named lossily: {entry}");
    assert_eq!(status["policy"]["victim_pid"], hidden.pid(), "it is the one told to abort:\n{status:#}");
    assert_eq!(entry["action"], "abort", "{entry}");
    // Every listed process was sampled, and what no sampled process holds is small: the 300 MiB are attributed.
    let group = &status["group"];
    assert_eq!(group["processes_unsampled"], 0, "{group}");
    assert!(group["unattributed_bytes"].as_u64().is_some_and(|b| b < 64 << 20), "{group}");
    assert_eq!(status["policy"]["unseen"], false, "{status:#}");
}

/// Names that would forge a log line (`a\nkilled: x`) or drive the terminal (`ESC [2J`, clear the screen) are
/// escaped where the agent reads them: the two largest are killed, each in one line of the log that holds no raw
/// control byte and no line of it starts with the forged text; `monitor status` lists the third escaped.
#[test]
fn names_with_a_newline_or_an_escape_cannot_forge_a_log_line_or_drive_the_terminal() {
    let name = "names_with_a_newline_or_an_escape_cannot_forge_a_log_line_or_drive_the_terminal";
    if !require_group(name) {
        return;
    }
    let cg = Group::here("forged-names", Some(512 << 20));
    let forger = named_holder(&cg, b"a\nkilled: x", 150);
    let clearer = named_holder(&cg, b"\x1b[2Jbig", 120);
    let small = named_holder(&cg, b"\x1b[2J", 1);
    // About 60% of the limit: the kill line at 20% kills the largest at once, then the next (29% after the first).
    let dir = TempDir::new("forged-names");
    let config = monitor_tests::config::Config::new()
        .lines("policy", "refuse_at = 0.1\nabort_at = 0.15\nkill_at = 0.2")
        .probes(false)
        .write(dir.path().join("monitor.toml"));
    let log = dir.path().join("agent.log");
    let log_file = std::fs::File::create(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    let port = free_port();
    let mut agent = ChildGuard::spawn(
        Command::new(monitor_bin())
            .args(["agent", "--config"])
            .arg(&config)
            .arg("--cgroup")
            .arg(cg.path())
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file),
    );
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    let kill_line = |text: &str, pid: u32| {
        text.lines().find(|l| l.contains("killed: ") && l.contains(&format!("pid={pid} "))).map(str::to_string)
    };
    for holder in [&forger, &clearer] {
        monitor_tests::wait_until("the agent kills the holder", Duration::from_secs(20), || {
            assert!(agent.wait_timeout(Duration::ZERO).is_none(), "the agent exited:\n{}", read_log());
            kill_line(&read_log(), holder.pid())
        });
    }
    let text = read_log();
    let forged = kill_line(&text, forger.pid()).unwrap_or_default();
    assert!(forged.contains("name=a\\nkilled: x"), "the name escaped in its line: {forged}");
    assert!(!text.lines().any(|l| l.starts_with("killed: x")), "a forged line:\n{text}");
    assert!(!text.contains('\x1b'), "a raw escape in the log:\n{text:?}");
    let cleared = kill_line(&text, clearer.pid()).unwrap_or_default();
    assert!(cleared.contains("name=\\e[2Jbig"), "the name escaped in its line: {cleared}");
    // The status table, as a terminal would print it: the small one listed, escaped.
    let out = Command::new(monitor_bin())
        .args(["status", "--url", &format!("http://127.0.0.1:{port}")])
        .output()
        .unwrap_or_else(|e| panic!("monitor status: {e}"));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "monitor status: {}\n{table}", String::from_utf8_lossy(&out.stderr));
    assert!(!out.stdout.contains(&0x1b), "a raw escape in the status:\n{table:?}");
    let row = table.lines().find(|l| l.trim_start().starts_with(&small.pid().to_string()));
    assert!(row.is_some_and(|r| r.contains("\\e[2J")), "the small one listed, escaped:\n{table}");
    eprintln!("{name}: {forged}");
}
