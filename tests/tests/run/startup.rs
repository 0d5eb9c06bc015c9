//! Decisions taken while `monitor run` starts its processes are alerted like any other. The master takes 6 s to
//! become healthy; meanwhile an `alloc-hog` in the group pushes it past refuse_at (85% of 256 MiB) and then
//! leaves. The alert hook (python writing what it got to a file) must get the refusal, firing and then resolved,
//! before the master is healthy. Until the alerts task read every sample from the first one on, it started after
//! the processes, and a state that was over by then was never alerted. A start-up that fails keeps the history of
//! its samples in the stats database.

use monitor_tests::config::Config;
use monitor_tests::require_group;
use monitor_tests::run::{launcher, python_hook, Run, Spec};
use monitor_tests::{http, json_lines, temp_dir, Hog};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const HOG: &str = env!("CARGO_BIN_EXE_alloc-hog");

/// Statuses the hook got for `name`, in order.
fn statuses(path: &Path, name: &str) -> Vec<String> {
    json_lines(path)
        .iter()
        .filter(|a| a["labels"]["alertname"] == name)
        .filter_map(|a| a["status"].as_str().map(String::from))
        .collect()
}

/// The master's own answer to `/health` (503 while it starts), or why there was none.
fn master_health(port: u16) -> Result<u16, String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    http::get(addr, "/health", Duration::from_secs(2)).map(|r| r.status)
}

#[test]
fn a_refusal_while_the_processes_start_is_alerted_and_resolved() {
    if !require_group("a_refusal_while_the_processes_start_is_alerted_and_resolved") {
        return;
    }
    let dir = temp_dir("run-startup");
    let (hook, out) = (dir.join("hook.py"), dir.join("alerts.jsonl"));
    std::fs::write(&hook, monitor_tests::hooks::ALERT_TO_FILE).unwrap_or_else(|e| panic!("{}: {e}", hook.display()));
    // The master stays unhealthy for 6 s, all the alert has to come in: longer under a slowdown (the emulated VM),
    // with the start timeout ahead of it.
    let delay_ms = 6000 * u64::from(monitor_tests::pace::stretch());
    let spec = Spec {
        workers: 1,
        limit_mib: 256,
        start_timeout_s: delay_ms / 1000 + 20,
        fixture_args: vec!["--health-delay-ms".into(), delay_ms.to_string()],
        extra: python_hook(&hook, &out).set("alerts", "quiet_s", 0),
        ..Spec::default()
    };
    let run = Run::launch("run-startup", &spec);
    // 224 MiB of 256 (87.5%, plus the fixture processes): past refuse_at, short of abort_at (92%).
    let hog = Hog::spawn(HOG, run.cg.path(), 224, false);
    let deadline = Instant::now() + monitor_tests::pace::scaled(Duration::from_secs(4));
    while !statuses(&out, "MonitorGroupRefusing").contains(&"firing".to_string()) {
        assert!(
            Instant::now() < deadline,
            "no refusal alerted within 4 s of the group passing 85% while the master starts; hook got {:?}\n{}",
            json_lines(&out),
            run.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        master_health(run.ports[0]),
        Ok(503),
        "the master was not still starting: the alert did not come during start-up (raise --health-delay-ms)"
    );
    drop(hog);
    let deadline = Instant::now() + monitor_tests::pace::scaled(Duration::from_secs(4));
    while statuses(&out, "MonitorGroupRefusing") != ["firing", "resolved"] {
        assert!(
            Instant::now() < deadline,
            "the refusal was not resolved within 4 s of the hog leaving; hook got {:?}\n{}",
            json_lines(&out),
            run.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    run.wait_for(
        "every process ready",
        |s| launcher(s).iter().all(|p| p["state"] == "ready"),
        Duration::from_millis(delay_ms) + Duration::from_secs(20),
    );
    assert_eq!(statuses(&out, "MonitorGroupRefusing"), ["firing", "resolved"], "one incident, told once each way");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failed_start_keeps_its_samples_in_the_stats_database() {
    if !require_group("a_failed_start_keeps_its_samples_in_the_stats_database") {
        return;
    }
    let dir = temp_dir("run-failed-start");
    let db = dir.join("stats.db");
    let spec = Spec {
        workers: 1,
        fixture_args: vec!["--health-delay-ms".into(), "60000".into()],
        start_timeout_s: 2,
        extra: Config::new().stats(&db),
        ..Spec::default()
    };
    let mut run = Run::launch("run-failed-start", &spec);
    let status = run.wait_exit(Duration::from_secs(15));
    assert_eq!(status.code(), Some(1), "{}", run.stderr());
    // The minute in progress when the start failed was written, with the master under its own name.
    let out = Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); \
             print(c.execute('select count(*) from group_minute').fetchone()[0], \
             ','.join(sorted({r[0] for r in c.execute('select process from process_minute')})))",
        )
        .arg(&db)
        .output()
        .unwrap_or_else(|e| panic!("python3: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(out.status.success(), "python3 failed: {}", String::from_utf8_lossy(&out.stderr));
    let (minutes, names) = text.split_once(' ').unwrap_or((text.as_str(), ""));
    assert!(minutes.parse::<u64>().is_ok_and(|n| n >= 1), "no minute written: {text:?}\n{}", run.stderr());
    assert!(names.split(',').any(|n| n == "m0"), "the master is not in the history by its name: {text:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
