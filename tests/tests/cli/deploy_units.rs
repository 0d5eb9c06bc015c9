//! deploy/: the systemd units and the configs they name. Each config passes `monitor check-config`; each unit,
//! with its paths pointed at this build and this checkout, passes `systemd-analyze verify` without a warning; the
//! run unit gives monitor more time to stop than the config's drain and grace.

use monitor_tests::agent::{monitor_bin, workspace_root};
use monitor_tests::in_ci;
use std::path::{Path, PathBuf};
use std::process::Command;

fn deploy() -> PathBuf {
    workspace_root().join("deploy")
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The integer value of `key = N` in a TOML or unit file's text (the first such line).
fn int_value(text: &str, key: &str, sep: char) -> u64 {
    text.lines()
        .filter_map(|l| l.split_once(sep))
        .find(|(k, _)| k.trim() == key)
        .and_then(|(_, v)| v.split('#').next()?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no integer {key} in:\n{text}"))
}

#[test]
fn the_deploy_configs_are_valid() {
    for name in ["agent.toml", "run.toml"] {
        let path = deploy().join(name);
        let out = Command::new(monitor_bin()).arg("check-config").arg(&path).output();
        let out = out.unwrap_or_else(|e| panic!("monitor check-config: {e}"));
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn the_units_verify_and_name_the_configs() {
    let test = "the_units_verify_and_name_the_configs";
    if Command::new("systemd-analyze").arg("--version").output().is_err() {
        assert!(!in_ci(), "{test}: systemd-analyze must be installed in CI (the systemd package)");
        monitor_tests::require::skip(test, "no systemd-analyze");
        return;
    }
    let dir = std::env::temp_dir().join(format!("monitor-deploy-units-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let bin = monitor_bin().display().to_string();
    let configs = format!("{}/", deploy().display());
    for (unit, config) in [("monitor-agent.service", "agent.toml"), ("monitor-run.service", "run.toml")] {
        let text = read(&deploy().join(unit));
        for cmd in ["check-config /etc/monitor/", "--config /etc/monitor/"] {
            assert!(text.contains(&format!("{cmd}{config}")), "{unit} should name /etc/monitor/{config}");
        }
        let local = text.replace("/usr/local/bin/monitor", &bin).replace("/etc/monitor/", &configs);
        let path = dir.join(unit);
        std::fs::write(&path, local).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let out = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&path)
            .current_dir(&dir)
            .output()
            .unwrap_or_else(|e| panic!("systemd-analyze: {e}"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        // Only warnings about this unit count: verify also loads the host's units, whatever they say.
        let ours: Vec<&str> = stderr.lines().filter(|l| l.contains(unit)).collect();
        assert!(out.status.success() && ours.is_empty(), "systemd-analyze verify {unit}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    let unit = read(&deploy().join("monitor-run.service"));
    let run = read(&deploy().join("run.toml"));
    let stop = int_value(&unit, "TimeoutStopSec", '=');
    let (drain, grace) = (int_value(&run, "drain_timeout_s", '='), int_value(&run, "stop_grace_s", '='));
    assert!(stop > drain + grace, "TimeoutStopSec={stop} must exceed drain_timeout_s {drain} + stop_grace_s {grace}");
    assert!(unit.contains("KillMode=mixed"), "monitor-run.service: SIGTERM must reach monitor alone (KillMode=mixed)");
    assert!(run.contains("cgroup = \"auto\""), "run.toml: the unit's cgroup is the group");
}
