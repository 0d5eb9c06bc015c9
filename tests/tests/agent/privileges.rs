//! `monitor agent` run as `nobody` with no capabilities (setpriv from root) on a group root made: it starts,
//! reads the group, and says which configured features are off for want of which capability: the probes' disabled
//! reason in `/api/v1/status` names CAP_BPF and CAP_PERFMON and that requests are not counted; a warning each for
//! signal actions (CAP_KILL) and admin_path actions (CAP_SYS_PTRACE); and the abort signal to a root process of the
//! group, refused by the kernel, is logged as wanting CAP_KILL. With the capabilities docs name (CAP_BPF,
//! CAP_PERFMON, CAP_DAC_READ_SEARCH, CAP_KILL, CAP_SYS_PTRACE, ambient), the same nobody loads the probes, signals
//! root's process, and warns of nothing.

use monitor_tests::agent::free_port;
use monitor_tests::config::{bytes, Config};
use monitor_tests::{require_group, require_program, Agent, Group, Hog, MIB};
use std::process::Command;
use std::time::Duration;

/// nobody's uid and gid.
fn nobody() -> (String, String) {
    let id = |flag: &str| {
        let out = Command::new("id").args([flag, "nobody"]).output().expect("id");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    (id("-u"), id("-g"))
}

/// `monitor agent` on `cg` as nobody through setpriv, with `caps` (setpriv's `+cap,…` list) inheritable and ambient,
/// or none; configured to abort the group's largest process with SIGUSR2 past a 1 MiB limit (an admin path too).
/// Returns the agent and nobody's uid.
fn start_as_nobody(cg: &Group, name: &str, caps: Option<&str>) -> (Agent, String) {
    let config = Config::new()
        .set("policy", "limit_bytes", bytes(MIB))
        .set("actions", "abort_signal", "SIGUSR2")
        .set("actions", "admin_path", "/admin/memory")
        .write(std::env::temp_dir().join(format!("monitor-{name}-{}.toml", std::process::id())));
    let (uid, gid) = nobody();
    let port = free_port();
    let args: Vec<String> = ["agent", "--interval-ms", "50", "--cgroup", &cg.relative(), "--listen"]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("127.0.0.1:{port}"), "--config".into(), config.display().to_string()])
        .collect();
    let mut wrapper = vec!["setpriv", "--reuid", &uid, "--regid", &gid, "--clear-groups"];
    if let Some(caps) = caps {
        wrapper.extend(["--inh-caps", caps, "--ambient-caps", caps]);
    }
    wrapper.push("--");
    let agent = Agent::start_wrapped(&wrapper, args, port);
    let _ = std::fs::remove_file(&config);
    (agent, uid)
}

#[test]
fn an_agent_without_capabilities_names_what_each_feature_lacks() {
    let test = "an_agent_without_capabilities_names_what_each_feature_lacks";
    if !require_group(test) || !require_program(test, "setpriv") {
        return;
    }
    let cg = Group::here("privileges", None);
    // A root process of the group holding 8 MiB: the largest, so the one told to abort.
    let victim = Hog::spawn(env!("CARGO_BIN_EXE_alloc-hog"), cg.path(), 8, false);
    // A limit below what the group uses: aborting from the first sample.
    let (agent, uid) = start_as_nobody(&cg, "privileges", None);

    // The premise: the agent runs as nobody with an empty effective set.
    let status = std::fs::read_to_string(format!("/proc/{}/status", agent.pid())).expect("agent status");
    let line = |key: &str| status.lines().find(|l| l.starts_with(key)).unwrap_or_default().to_string();
    assert!(line("Uid:").split_whitespace().nth(2) == Some(uid.as_str()), "{}", line("Uid:"));
    assert_eq!(line("CapEff:").split_whitespace().nth(1), Some("0000000000000000"), "{status}");

    let st = agent.wait_for(|s| s["policy"]["state"] == "aborting", Duration::from_secs(10));
    assert_eq!(st["group"]["cgroup"], cg.path().display().to_string(), "it reads the group");
    assert_eq!(st["probes"]["enabled"], false, "{}", st["probes"]);
    let reason = st["probes"]["reason"].as_str().unwrap_or_default();
    for want in ["CAP_BPF", "CAP_PERFMON", "missing", "requests are not counted in the kernel"] {
        assert!(reason.contains(want), "the probes' reason does not say {want:?}: {reason}");
    }

    let said = |what: &str| {
        monitor_tests::wait_until(what, Duration::from_secs(10), || agent.stderr().contains(what).then_some(()));
    };
    said("signal actions off: CAP_KILL missing; processes of other users are not signalled (EPERM)");
    said("admin_path actions off: CAP_SYS_PTRACE missing;");
    said(&format!("SIGUSR2 not sent: pidfd_send_signal({}): not permitted", victim.pid()));
    said("lacks CAP_KILL");
    let log = agent.stderr();
    // One warning per feature: the two above, and the probes' own, which names their capabilities.
    let warnings = log.lines().filter(|l| l.contains(" off: CAP_") && l.contains("WARN")).count();
    assert_eq!(warnings, 3, "{log}");
    let probes = log.lines().filter(|l| l.contains("request counting is off: CAP_BPF, CAP_PERFMON")).count();
    assert_eq!(probes, 1, "{log}");
}

/// The capabilities an unprivileged agent needs, as setpriv names them.
const NEEDED: &str = "+bpf,+perfmon,+dac_read_search,+kill,+sys_ptrace";

#[test]
fn an_agent_with_the_documented_capabilities_loads_the_probes_and_signals() {
    let test = "an_agent_with_the_documented_capabilities_loads_the_probes_and_signals";
    if !require_group(test) || !require_program(test, "setpriv") {
        return;
    }
    let cg = Group::here("privileges-caps", None);
    let victim = Hog::spawn(env!("CARGO_BIN_EXE_alloc-hog"), cg.path(), 8, false);
    let (agent, uid) = start_as_nobody(&cg, "privileges-caps", Some(NEEDED));
    let status = std::fs::read_to_string(format!("/proc/{}/status", agent.pid())).expect("agent status");
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap_or_default();
    assert_eq!(uid_line.split_whitespace().nth(2), Some(uid.as_str()), "runs as nobody: {uid_line}");

    // The probes are loaded before the API answers. The hog is over kill_at from the first sample: the guard may
    // kill it before a poll sees `aborting`, so the decision is read from the agent's log, which keeps it.
    let st = agent.status();
    assert_eq!(st["probes"]["enabled"], true, "the probes load with these capabilities: {}", st["probes"]);
    monitor_tests::wait_until("the decision to abort", Duration::from_secs(10), || {
        agent.stderr().lines().any(|l| l.contains("decision changed") && l.contains("state=\"aborting\"")).then_some(())
    });
    // SIGUSR2 ends alloc-hog: root's process, signalled by nobody with CAP_KILL.
    let sent = format!("pid={}", victim.pid());
    monitor_tests::wait_until("the hog signalled", Duration::from_secs(10), || {
        agent.stderr().lines().any(|l| l.contains("sent SIGUSR2") && l.contains(&sent)).then_some(())
    });
    let log = agent.stderr();
    assert!(!log.contains(" off: CAP_"), "nothing is missing:\n{log}");
    assert!(!log.contains("not permitted"), "{log}");
    drop(victim);
}
