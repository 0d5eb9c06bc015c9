//! The agent's log as the command line sets it: an invalid `MONITOR_LOG` stops `monitor agent` and `monitor run` at
//! once with one line naming the variable and the bad directive, and `--log-format json` writes one JSON object
//! per line on stderr; `--help` names both.

use monitor_tests::agent::free_port;
use monitor_tests::{monitor_bin, Agent};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Runs `monitor <args>` with `MONITOR_LOG=<value>`; it must fail within seconds with one line on stderr.
fn refused(args: &[&str], value: &str) -> String {
    let out = Command::new(monitor_bin())
        .args(args)
        .env("MONITOR_LOG", value)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("monitor {args:?}: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "monitor {args:?} with MONITOR_LOG={value:?} started:\n{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "want one line, got:\n{stderr}");
    stderr
}

#[test]
fn an_invalid_monitor_log_stops_start_up_naming_the_variable_and_directive() {
    let listen = format!("127.0.0.1:{}", free_port());
    let agent = ["agent", "--cgroup", "auto", "--listen", &listen];
    for (value, directive) in [("warning", "`warning`"), ("info,monitor::sampler=loud", "`monitor::sampler=loud`")] {
        let err = refused(&agent, value);
        assert!(err.contains("MONITOR_LOG") && err.contains(directive), "agent, MONITOR_LOG={value}: {err}");
    }
    // `run` checks it before it reads its config or starts anything.
    let err = refused(&["run", "--config", "/nonexistent.toml"], "verbose");
    assert!(err.contains("MONITOR_LOG") && err.contains("`verbose`"), "run: {err}");
}

#[test]
fn log_format_json_writes_one_object_per_line() {
    let port = free_port();
    let args = ["agent", "--cgroup", "auto", "--interval-ms", "50", "--log-format", "json", "--listen"]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("127.0.0.1:{port}")])
        .collect();
    let agent = Agent::start_args_env(args, port, &[("MONITOR_LOG", "info")]);
    let stderr = monitor_tests::wait_until("the API line in the log", Duration::from_secs(10), || {
        let s = agent.stderr();
        s.contains("serving the API").then_some(s)
    });
    let mut seen = 0;
    for line in stderr.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not one JSON object per line ({e}): {line}"));
        for key in ["timestamp", "level", "target", "message"] {
            assert!(v[key].is_string(), "{key} missing: {line}");
        }
        if v["message"] == "serving the API" {
            assert_eq!(v["level"], "INFO", "{line}");
            assert_eq!(v["listen"], format!("127.0.0.1:{port}"), "the event's fields are keys: {line}");
            seen += 1;
        }
    }
    assert_eq!(seen, 1, "{stderr}");
}

#[test]
fn help_names_monitor_log_and_the_log_formats() {
    let out = monitor_tests::run_monitor(&["--help"], Duration::from_secs(20));
    assert!(out.status.success(), "{out:?}");
    for want in ["MONITOR_LOG", "--log-format", "json"] {
        assert!(out.stdout.contains(want), "--help does not name {want}:\n{}", out.stdout);
    }
    let agent = monitor_tests::run_monitor(&["agent", "--help"], Duration::from_secs(20));
    assert!(agent.stdout.contains("--log-format"), "the flag is global:\n{}", agent.stdout);
}
