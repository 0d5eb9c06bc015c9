//! An alert command runs with none of the agent's privileges: the agent (root here, as CI runs it) runs the
//! command, which writes the capability lines of its own `/proc/self/status`; every set is empty and
//! `no_new_privs` is on.

use monitor_tests::config::Config;
use monitor_tests::{require_group, temp_dir, wait_until, Agent, Group, Hog};
use std::time::Duration;

const HOG: &str = env!("CARGO_BIN_EXE_alloc-hog");

#[test]
fn an_alert_command_has_no_capability_and_no_new_privileges() {
    let test = "an_alert_command_has_no_capability_and_no_new_privileges";
    if !require_group(test) {
        return;
    }
    let dir = temp_dir("alert-caps");
    let out = dir.join("caps.txt");
    // Refusing from the first sample (a 4 KiB limit, shadow mode): one alert, one run of the command.
    let script = "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status > \"$0.tmp\"; \
                  mv \"$0.tmp\" \"$0\"";
    let config = Config::new()
        .alert_command(["sh", "-c", script, &out.display().to_string()])
        .lines("policy", "limit_bytes = 4096\nshadow = true\nkill = false")
        .probes(false);
    let cg = Group::here("alert-caps", None);
    let _hog = Hog::spawn(HOG, cg.path(), 1, false);
    let _agent = Agent::with_config(&cg.path().display().to_string(), &config, &dir);
    let text = wait_until("the alert command's status lines", Duration::from_secs(10), || {
        std::fs::read_to_string(&out).ok().filter(|t| t.contains("NoNewPrivs"))
    });
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
            .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
    };
    for cap in ["CapInh:", "CapPrm:", "CapEff:", "CapAmb:"] {
        assert_eq!(field(cap), "0000000000000000", "{cap} of the alert command:\n{text}");
    }
    assert_eq!(field("NoNewPrivs:"), "1", "{text}");
    // The agent itself keeps what it needs (root here): only its child was stripped.
    let own = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    eprintln!(
        "alert command:\n{text}(the test, as the agent's user: {:?})",
        own.lines().find(|l| l.starts_with("CapEff"))
    );
    let _ = std::fs::remove_dir_all(&dir);
}
