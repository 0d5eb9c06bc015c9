//! The kernel's OOM kills made visible, end to end on a memory group of either hierarchy: a grower that ignores the
//! abort signal runs into the 256 MiB limit of its group and is killed by the kernel. The agent watching the group
//! shows `group.oom_kills` going from 0 to 1 in `/api/v1/status`, exports `monitor_oom_kills_total 1`, and pages
//! `MonitorOomKill` to a command sink, naming the grower (pid, name, its last RSS).
//!
//! Beside it, the agent's reactions short of a kill: a refusal's signal and POST are each timed once in
//! `monitor_reaction_seconds`.

use monitor_tests::config::Config;
use monitor_tests::{json_lines, require_group, temp_dir, wait_until, Agent, ChildGuard, Group, Hog, MIB};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::Duration;

const GROWER: &str = env!("CARGO_BIN_EXE_grower");
const HOG: &str = env!("CARGO_BIN_EXE_alloc-hog");
const LIMIT: u64 = 256 * MIB;

fn oom_kills(status: &Value) -> Option<u64> {
    status.pointer("/group/oom_kills").and_then(Value::as_u64)
}

#[test]
fn a_grower_killed_by_the_kernel_is_counted_exported_and_paged() {
    let test = "a_grower_killed_by_the_kernel_is_counted_exported_and_paged";
    if !require_group(test) {
        return;
    }
    let dir = temp_dir("oom-kills");
    let out = dir.join("alerts.jsonl");
    // The command sink: the alert's JSON on stdin, appended as one line.
    let config = Config::new()
        .alert_command(["sh", "-c", "cat >> \"$0\"; echo >> \"$0\"", &out.display().to_string()])
        .set("alerts", "quiet_s", 1)
        .set("actions", "abort_signal", "SIGUSR2")
        // The kernel's kill is what this test is about: the agent's last resort stays off.
        .set("policy", "kill", false)
        .probes(false);

    let cg = Group::here("oom-kills", Some(LIMIT));
    // Swap would let the grower live on past the limit: the limit holds for memory and swap together.
    if cg.path().join("memory.memsw.limit_in_bytes").exists() {
        cg.write("memory.memsw.limit_in_bytes", &LIMIT.to_string());
    } else if cg.path().join("memory.swap.max").exists() {
        cg.write("memory.swap.max", "0");
    } else {
        let _ = std::fs::write(cg.path().join("memory.swappiness"), "0");
    }
    let bystander = Hog::spawn(HOG, cg.path(), 20, false);
    let agent = Agent::with_config(&cg.path().display().to_string(), &config, &dir);
    let before = agent.wait_for(|s| oom_kills(s) == Some(0), Duration::from_secs(10));
    assert_eq!(before.pointer("/group/version").and_then(Value::as_str), Some(cg.hierarchy().name()));
    let (_, metrics) = agent.get("/metrics");
    assert!(metrics.lines().any(|l| l == "monitor_oom_kills_total 0"), "{metrics}");

    // The grower: ignores SIGUSR2 and grows at full speed towards 700 MiB in a 256 MiB group.
    let mut cmd = Command::new(GROWER);
    cmd.args(["--ignore-signal", "--max-mib", "700"]).stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut grower: ChildGuard = monitor_tests::spawn_in_cgroup(&mut cmd, cg.path());
    let pid = grower.pid();
    let (Some(mut stdin), Some(stdout)) = (grower.stdin.take(), grower.stdout.take()) else {
        panic!("grower started without pipes");
    };
    let mut ready = String::new();
    let _ = BufReader::new(stdout).read_line(&mut ready);
    assert_eq!(ready.trim(), format!("ready {pid}"), "the grower's first line");
    stdin.write_all(b"go\n").and_then(|()| stdin.flush()).unwrap_or_else(|e| panic!("starting the grower: {e}"));

    let status = grower
        .wait_timeout(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("the grower is still running 30 s after it started (limit {} MiB)", LIMIT / MIB));
    assert_eq!(status.signal(), Some(libc::SIGKILL), "the kernel's OOM killer ends the grower: {status:?}");
    drop(stdin);

    let after = agent.wait_for(|s| oom_kills(s) == Some(1), Duration::from_secs(10));
    assert!(
        monitor_tests::agent::process(&after, bystander.pid()).is_some(),
        "the bystander lives on in the group: {after:#}"
    );
    let (_, metrics) = agent.get("/metrics");
    assert!(metrics.contains("# TYPE monitor_oom_kills_total counter\n"), "{metrics}");
    assert!(metrics.lines().any(|l| l == "monitor_oom_kills_total 1"), "{metrics}");

    let alert = wait_until("MonitorOomKill at the command sink", Duration::from_secs(15), || {
        json_lines(&out).into_iter().find(|a| a["labels"]["alertname"] == "MonitorOomKill")
    });
    eprintln!("MonitorOomKill: {}", alert["annotations"]["summary"]);
    assert_eq!(alert["status"], "firing");
    assert_eq!(alert["labels"]["oom_kill"], "1");
    assert_eq!(alert["labels"]["cgroup"], cg.path().display().to_string());
    assert_eq!(alert["annotations"]["name"], "grower", "{alert:#}");
    assert_eq!(alert["annotations"]["pid"], pid.to_string(), "{alert:#}");
    let rss: u64 = alert["annotations"]["rss_bytes"].as_str().and_then(|s| s.parse().ok()).unwrap_or(0);
    assert!(rss > 0 && rss <= LIMIT + 16 * MIB, "the grower's RSS as last sampled: {rss}");
    assert_eq!(alert["annotations"]["oom_kills"], "1");
    std::thread::sleep(Duration::from_secs(2));
    let paged = json_lines(&out).into_iter().filter(|a| a["labels"]["alertname"] == "MonitorOomKill").count();
    assert_eq!(paged, 1, "one kill, one page: {:?}", json_lines(&out));
    drop(agent);
    drop(bystander);
    drop(cg);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A receiver of the agent's POSTs on loopback: answers each with 200 and counts them.
fn post_receiver() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("binding the receiver: {e}"));
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_else(|e| panic!("{e}"));
    let posts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = posts.clone();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut req = Vec::new();
            let mut buf = [0u8; 4096];
            // The head, then as much body as Content-Length says.
            let complete = |req: &[u8]| {
                let text = String::from_utf8_lossy(req);
                let Some(end) = text.find("\r\n\r\n") else { return false };
                let len = text[..end]
                    .lines()
                    .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                    .and_then(|v| v.parse::<usize>().ok())
                    .unwrap_or(0);
                req.len() >= end + 4 + len
            };
            while !complete(&req) {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            if req.starts_with(b"POST ") {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    });
    (port, posts)
}

/// The value of the sample `name` (with its labels, as written) in a `/metrics` text.
fn sample_value(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn a_refusal_s_signal_and_post_are_timed() {
    let test = "a_refusal_s_signal_and_post_are_timed";
    if !require_group(test) {
        return;
    }
    let dir = temp_dir("reaction-metrics");
    let (port, posts) = post_receiver();
    // SIGCONT: a signal the hog takes without noticing.
    let config = Config::new()
        .set("actions", "refuse_signal", "SIGCONT")
        .set("actions", "post_url", format!("http://127.0.0.1:{port}/memory"))
        .probes(false);
    let cg = Group::here("reaction-metrics", Some(LIMIT));
    let mut hog = Hog::spawn(HOG, cg.path(), 50, false);
    let agent = Agent::with_config(&cg.path().display().to_string(), &config, &dir);
    agent.wait_for(|s| s["policy"]["state"] == "normal", Duration::from_secs(10));
    let count = |action: &str| {
        let (_, m) = agent.get("/metrics");
        sample_value(&m, &format!("monitor_reaction_seconds_count{{action=\"{action}\"}}"))
    };
    assert_eq!((count("signal"), count("post"), count("shed")), (Some(0.0), Some(0.0), Some(0.0)));

    // About 88% of the limit: refusing, and the hog is told so once by signal and once by POST.
    hog.set_mib(225);
    agent.wait_for(|s| s["policy"]["state"] == "refusing", Duration::from_secs(10));
    wait_until("the signal and the POST timed", Duration::from_secs(10), || {
        (count("signal") == Some(1.0) && count("post") == Some(1.0)).then_some(())
    });
    assert_eq!(posts.load(std::sync::atomic::Ordering::SeqCst), 1, "one change, one POST");
    let (_, m) = agent.get("/metrics");
    let within = |action: &str, le: &str| {
        sample_value(&m, &format!("monitor_reaction_seconds_bucket{{action=\"{action}\",le=\"{le}\"}}"))
    };
    // From the wake-up of the sample that decided it: a signal in well under a second, the POST answered too.
    assert_eq!(within("signal", "1"), Some(1.0), "{m}");
    assert_eq!(within("post", "1"), Some(1.0), "{m}");
    assert_eq!(count("shed"), Some(0.0), "no front door under monitor agent");
    drop(agent);
    drop(hog);
    drop(cg);
    let _ = std::fs::remove_dir_all(&dir);
}
