//! deploy/: the systemd units and the configs they name. Each config passes `monitor check-config`; each unit,
//! with its paths pointed at this build and this checkout, passes `systemd-analyze verify` without a warning; the
//! run unit gives monitor more time to stop than the config's drain and grace; `systemd-analyze security` rates
//! the agent units at or below 4.0 and the run unit below 6.0. The container's pod is the docs' and passes the
//! Kubernetes schema.

use monitor_tests::agent::{monitor_bin, workspace_root};
use monitor_tests::require;
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
    for name in ["agent.toml", "run.toml", "agent.d/app.toml", "container/run.toml"] {
        let path = deploy().join(name);
        let out = Command::new(monitor_bin()).arg("check-config").arg(&path).output();
        let out = out.unwrap_or_else(|e| panic!("monitor check-config: {e}"));
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn the_units_verify_and_name_the_configs() {
    let test = "the_units_verify_and_name_the_configs";
    let analyze = Command::new("systemd-analyze").arg("--version").output().is_ok();
    if !require(analyze, test, "needs systemd-analyze (the systemd package)") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("monitor-deploy-units-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let bin = monitor_bin().display().to_string();
    let configs = format!("{}/", deploy().display());
    let units = [
        ("monitor-agent.service", "monitor-agent.service", "agent.toml"),
        ("monitor-agent@.service", "monitor-agent@app.service", "agent.d/%i.toml"),
        ("monitor-run.service", "monitor-run.service", "run.toml"),
    ];
    for (file, unit, config) in units {
        let text = read(&deploy().join(file));
        for cmd in ["check-config /etc/monitor/", "--config /etc/monitor/"] {
            assert!(text.contains(&format!("{cmd}{config}")), "{file} should name /etc/monitor/{config}");
        }
        let local = text.replace("/usr/bin/monitor", &bin).replace("/etc/monitor/", &configs);
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

/// The overall exposure `systemd-analyze security` gives, from its last line
/// `→ Overall exposure level for monitor-run.service: 2.0 OK 🙂`.
fn exposure(output: &str) -> Option<f64> {
    let line = output.lines().rev().find(|l| l.contains("Overall exposure level"))?;
    line.rsplit_once(": ")?.1.split_whitespace().next()?.parse().ok()
}

#[test]
fn reads_the_exposure() {
    assert_eq!(exposure("x\n→ Overall exposure level for monitor-run.service: 2.0 OK 🙂\n"), Some(2.0));
    assert_eq!(exposure("→ Overall exposure level for a@i.service: 8.9 EXPOSED 🙁"), Some(8.9));
    assert_eq!(exposure("no verdict"), None);
}

/// The hardening goal, measured as docs/deploy.md does it: `systemd-analyze security --offline=yes <unit file>`.
#[test]
fn the_units_are_hardened() {
    let test = "the_units_are_hardened";
    let probe = Command::new("systemd-analyze").args(["security", "--help"]).output();
    let offline = probe.as_ref().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("--offline"));
    if !require(offline, test, "needs `systemd-analyze security --offline` (systemd 250 or later)") {
        return;
    }
    for (unit, goal, inclusive) in [
        ("monitor-agent.service", 4.0, true),
        ("monitor-agent@.service", 4.0, true),
        ("monitor-run.service", 6.0, false),
    ] {
        let path = deploy().join(unit);
        let out = Command::new("systemd-analyze")
            .args(["security", "--offline=yes", "--no-pager"])
            .arg(&path)
            .output()
            .unwrap_or_else(|e| panic!("systemd-analyze security: {e}"));
        let text = String::from_utf8_lossy(&out.stdout);
        let score = exposure(&text)
            .unwrap_or_else(|| panic!("{unit}: no exposure in:\n{text}{}", String::from_utf8_lossy(&out.stderr)));
        let within = if inclusive { score <= goal } else { score < goal };
        let rel = if inclusive { "<=" } else { "<" };
        assert!(within, "{unit}: exposure {score}, the goal is {rel} {goal}:\n{text}");
    }
}

/// deploy/container/pod.yaml is the pod docs/deploy.md shows (less its comment lines), and it passes the Kubernetes
/// API's schema strictly (`kubernetes-validate --strict`: every field one the API knows, every value of its type);
/// the same pod with a misspelt field does not, so the check is not one that passes anything.
#[test]
fn the_pod_spec_is_the_docs_and_passes_the_kubernetes_schema() {
    let test = "the_pod_spec_is_the_docs_and_passes_the_kubernetes_schema";
    let path = deploy().join("container/pod.yaml");
    let pod = read(&path);
    let body: String = pod.lines().filter(|l| !l.starts_with('#')).map(|l| format!("{l}\n")).collect();
    let doc = read(&workspace_root().join("docs/deploy.md"));
    assert!(doc.contains(&format!("```yaml\n{body}```")), "docs/deploy.md's pod is not deploy/container/pod.yaml");

    let tool = monitor_tests::bins::kubernetes_validate_venv().join("bin/kubernetes-validate");
    if !require(tool.is_file(), test, "needs kubernetes-validate (cargo xtask setup --packages installs it)") {
        return;
    }
    let validate = |p: &Path| {
        let out = Command::new(&tool).args(["--strict", "--no-warn"]).arg(p).output();
        let out = out.unwrap_or_else(|e| panic!("{}: {e}", tool.display()));
        (
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    };
    let (ok, said) = validate(&path);
    assert!(ok, "{said}");
    assert!(said.contains("passed for resource pod/fhir"), "{said}");

    let misspelt = std::env::temp_dir().join(format!("monitor-pod-{}.yaml", std::process::id()));
    let bad = pod.replace("terminationGracePeriodSeconds:", "terminationGracePeriod:");
    assert_ne!(bad, pod, "the pod has no terminationGracePeriodSeconds");
    std::fs::write(&misspelt, bad).unwrap_or_else(|e| panic!("{}: {e}", misspelt.display()));
    let (ok, said) = validate(&misspelt);
    let _ = std::fs::remove_file(&misspelt);
    assert!(!ok && said.contains("'terminationGracePeriod' was unexpected"), "{said}");
}
