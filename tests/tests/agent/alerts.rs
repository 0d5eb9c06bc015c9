//! Alerts end to end: a test memory group pushed over 85% and 92% and back, `monitor agent` with all three sinks:
//! a command hook (python writing what it got to a file), a webhook that never answers, and an HA pair of real
//! Alertmanagers (Debian's prometheus-alertmanager) on loopback. The hook gets each transition once, with an
//! untrusted process name intact; both Alertmanagers list the alert while it fires and not after, under the
//! fingerprint the agent computed; the hung webhook delays neither. A second agent on the same group with another
//! `instance` label makes a second alert, not a merged one.

use monitor_tests::config::Config;
use monitor_tests::{json_lines, require, require_root, temp_dir, wait_until, Agent, ChildGuard, Group, Hog};
use serde_json::Value;
use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const HOG: &str = env!("CARGO_BIN_EXE_alloc-hog");

/// A name no shell could take literally: spaces, a newline, quotes, `$()`, `;`, `|` (13 bytes: fits `comm`).
const NASTY: &str = "x y\n'\"$(id);|";
/// [`NASTY`] as the agent reads and passes it on: its newline escaped (a name cannot write a line of its own into a
/// log or a hook's input), every other character as it is (nothing interprets the quotes, `$(...)`, `;` or `|`).
const NASTY_SEEN: &str = "x y\\n'\"$(id);|";

/// The hook: appends one JSON line per run with its stdin (the alert) and its MONITOR_* variables.
const HOOK: &str = r#"
import json, os, sys
alert = json.load(sys.stdin)
env = {k: v for k, v in os.environ.items() if k.startswith("MONITOR_")}
with open(sys.argv[1], "a") as f:
    f.write(json.dumps({"alert": alert, "env": env}) + "\n")
"#;

/// The alerts an Alertmanager lists now.
fn am_alerts(port: u16) -> Vec<Value> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    match monitor_tests::http::get(addr, "/api/v2/alerts", Duration::from_secs(5)) {
        Ok(r) if r.status == 200 => {
            serde_json::from_str::<Value>(&r.text()).ok().and_then(|v| v.as_array().cloned()).unwrap_or_default()
        }
        _ => Vec::new(),
    }
}

fn am_alert_names(port: u16) -> Vec<String> {
    am_alerts(port).iter().filter_map(|a| a["labels"]["alertname"].as_str().map(String::from)).collect()
}

/// A real Alertmanager on loopback, clustering off, a receiver that sends nowhere; its port.
fn alertmanager(am_bin: &Path, dir: &Path, name: &str) -> (ChildGuard, u16) {
    let port = monitor_tests::agent::free_port();
    let cfg = dir.join(format!("{name}.yml"));
    std::fs::write(&cfg, "route:\n  receiver: none\n  group_wait: 1s\nreceivers:\n  - name: none\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let child = ChildGuard::spawn(
        Command::new(am_bin)
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!("--storage.path={}", dir.join(format!("{name}-data")).display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--cluster.listen-address=")
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    wait_until("alertmanager to answer", Duration::from_secs(20), || {
        monitor_tests::http::get(([127, 0, 0, 1], port).into(), "/-/ready", Duration::from_secs(2))
            .ok()
            .filter(|r| r.status == 200)
    });
    (child, port)
}

#[test]
fn transitions_reach_hook_alertmanager_once_and_a_hung_webhook_delays_nothing() {
    let test = "transitions_reach_hook_alertmanager_once_and_a_hung_webhook_delays_nothing";
    if !require_root(test) {
        return;
    }
    let am_bin = Path::new("/usr/bin/prometheus-alertmanager");
    if !require(am_bin.exists(), test, "needs prometheus-alertmanager (apt-get install prometheus-alertmanager)") {
        return;
    }
    let dir = temp_dir("alerts");
    let (_am, am_port) = alertmanager(am_bin, &dir, "am1");
    let (_am2, am2_port) = alertmanager(am_bin, &dir, "am2");
    // A webhook that accepts connections and never answers (each POST times out, is retried, and backs off).
    let hung = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let hung_port = hung.local_addr().map(|a| a.port()).unwrap_or(0);

    let out = dir.join("hook.jsonl");
    let config = Config::new()
        .alert_command(["python3", "-c", HOOK, &out.display().to_string()])
        .set("alerts", "webhook", format!("http://127.0.0.1:{hung_port}/hook"))
        .set("alerts", "alertmanager", format!("http://127.0.0.1:{am_port}"))
        .set("alerts", "alertmanagers", monitor_tests::config::strings([format!("http://127.0.0.1:{am2_port}")]))
        .set("alerts", "quiet_s", 1)
        .set("alerts", "resend_s", 2)
        // The hog held over abort_at for seconds must stay alive: the last resort is tested on its own.
        .set("policy", "kill", false)
        .probes(false);

    // The group: 256 MiB; the process with the nasty name is the largest.
    let cg = Group::here("alerts", Some(256 << 20));
    let nasty_bin = dir.join(NASTY);
    std::os::unix::fs::symlink(HOG, &nasty_bin).unwrap_or_else(|e| panic!("{e}"));
    let mut big = Hog::spawn(&nasty_bin, cg.path(), 100, false);
    let _a = Hog::spawn(HOG, cg.path(), 50, false);
    let _b = Hog::spawn(HOG, cg.path(), 50, false);
    let agent = Agent::with_config(&cg.path().display().to_string(), &config, &dir);
    let state = |want: &'static str| move |s: &Value| s["policy"]["state"] == want;
    agent.wait_for(state("normal"), Duration::from_secs(10));

    // Over 85%: refusing (~86%).
    big.set_mib(120);
    agent.wait_for(state("refusing"), Duration::from_secs(10));
    let t_refusing = Instant::now();
    let firing = wait_until("the hook to see MonitorGroupRefusing", Duration::from_secs(10), || {
        json_lines(&out).into_iter().find(|l| l["alert"]["labels"]["alertname"] == "MonitorGroupRefusing")
    });
    // The hung webhook (5 s timeout per attempt) did not hold the hook back.
    assert!(t_refusing.elapsed() < Duration::from_secs(4), "hook took {:?}", t_refusing.elapsed());
    assert_eq!(firing["alert"]["status"], "firing");
    assert_eq!(firing["env"]["MONITOR_ALERT_STATUS"], "firing");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    assert_eq!(firing["alert"]["labels"]["instance"], host.trim(), "{firing}");
    let runbook = firing["alert"]["annotations"]["runbook_url"].as_str().unwrap_or_default();
    assert!(runbook.ends_with("alerts.md#monitorgrouprefusing"), "{firing}");
    // Both of the HA pair list it, under the fingerprint the agent sent.
    for port in [am_port, am2_port] {
        let listed = wait_until("Alertmanager to list MonitorGroupRefusing", Duration::from_secs(10), || {
            am_alerts(port).into_iter().find(|a| a["labels"]["alertname"] == "MonitorGroupRefusing")
        });
        assert_eq!(listed["fingerprint"], firing["alert"]["fingerprint"], "Alertmanager's fingerprint: {listed}");
    }
    // A second agent on the same group, another instance: a second alert in Alertmanager, not the same one.
    let peer_config = Config::new()
        .set("alerts", "alertmanager", format!("http://127.0.0.1:{am_port}"))
        .lines("alerts", "labels = { instance = \"peer\" }")
        .set("alerts", "quiet_s", 1)
        .set("alerts", "resend_s", 2)
        .set("policy", "kill", false)
        .probes(false);
    let peer_dir = dir.join("peer");
    std::fs::create_dir_all(&peer_dir).unwrap_or_else(|e| panic!("{e}"));
    let peer = Agent::with_config(&cg.path().display().to_string(), &peer_config, &peer_dir);
    let both = wait_until("Alertmanager to list both instances", Duration::from_secs(10), || {
        let found: Vec<Value> =
            am_alerts(am_port).into_iter().filter(|a| a["labels"]["alertname"] == "MonitorGroupRefusing").collect();
        (found.len() == 2).then_some(found)
    });
    let instances: BTreeSet<&str> = both.iter().filter_map(|a| a["labels"]["instance"].as_str()).collect();
    assert_eq!(instances, BTreeSet::from([host.trim(), "peer"]), "{both:?}");

    // Over 92%: aborting (~94%); the victim is the nasty-named process.
    big.set_mib(140);
    agent.wait_for(state("aborting"), Duration::from_secs(10));
    let aborting = wait_until("the hook to see MonitorGroupAborting", Duration::from_secs(10), || {
        json_lines(&out).into_iter().find(|l| l["alert"]["labels"]["alertname"] == "MonitorGroupAborting")
    });
    assert_eq!(aborting["alert"]["annotations"]["victim_pid"], big.pid().to_string());
    assert_eq!(aborting["alert"]["annotations"]["victim_name"], NASTY_SEEN, "name must arrive intact on stdin");
    assert_eq!(aborting["env"]["MONITOR_ANNOTATION_VICTIM_NAME"], NASTY_SEEN, "name must arrive intact in the env");

    // Several seconds of samples in the same state send nothing more.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(json_lines(&out).len(), 2, "one line per transition: {:?}", json_lines(&out));

    // Back down: both resolve, once each (after quiet_s = 1).
    big.set_mib(10);
    agent.wait_for(state("normal"), Duration::from_secs(10));
    let lines = wait_until("both resolutions", Duration::from_secs(10), || {
        let l = json_lines(&out);
        (l.len() >= 4).then_some(l)
    });
    std::thread::sleep(Duration::from_secs(2));
    let lines_after = json_lines(&out);
    assert_eq!(lines_after.len(), 4, "exactly 4 notifications: {lines_after:?}");
    let resolved: Vec<&str> = lines[2..]
        .iter()
        .filter(|l| l["alert"]["status"] == "resolved")
        .filter_map(|l| l["alert"]["labels"]["alertname"].as_str())
        .collect();
    assert_eq!(resolved.len(), 2, "{lines:?}");
    assert!(resolved.contains(&"MonitorGroupRefusing") && resolved.contains(&"MonitorGroupAborting"));
    wait_until("Alertmanager to drop the resolved alerts", Duration::from_secs(10), || {
        let names = am_alert_names(am_port);
        (!names.iter().any(|n| n.starts_with("MonitorGroup"))).then_some(())
    });
    drop(peer);
    drop(hung);
    let _ = std::fs::remove_dir_all(&dir);
}
