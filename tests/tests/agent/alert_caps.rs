//! An alert command runs with none of the agent's privileges: the agent (root here, as CI runs it) runs the
//! command, which writes the capability lines of its own `/proc/self/status`; every set is empty and
//! `no_new_privs` is on. It runs as an unprivileged user, cannot write root's files, and holds only its three pipes
//! and its alert's environment.

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
    for cap in ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"] {
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

/// Sets `fd` close-on-exec (`cloexec`) or not.
fn set_cloexec(fd: std::os::fd::RawFd, cloexec: bool) {
    // SAFETY: fcntl on a descriptor the caller holds open, with integer arguments.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    let flags = if cloexec { flags | libc::FD_CLOEXEC } else { flags & !libc::FD_CLOEXEC };
    // SAFETY: as above.
    assert_eq!(unsafe { libc::fcntl(fd, libc::F_SETFD, flags) }, 0, "fcntl: {}", std::io::Error::last_os_error());
}

#[test]
fn an_alert_command_of_a_root_agent_runs_unprivileged_with_only_its_pipes() {
    let test = "an_alert_command_of_a_root_agent_runs_unprivileged_with_only_its_pipes";
    if !require_group(test) || !monitor_tests::require_root(test) {
        return;
    }
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::PermissionsExt;
    // The dir is open to all (temp_dir): the command writes its report here, as whichever user it runs as.
    let dir = temp_dir("alert-user");
    let out = dir.join("report.txt");
    // A file of root's that any process of uid 0 could write, and no other.
    let victim = dir.join("roots-file");
    std::fs::write(&victim, "root's\n").unwrap_or_else(|e| panic!("{e}"));
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap_or_else(|e| panic!("{e}"));
    // A descriptor the agent inherits without close-on-exec, as from a careless parent: it must not reach the command.
    let inherited = std::fs::File::open(&victim).unwrap_or_else(|e| panic!("{e}"));
    let script = "fds=$(ls /proc/self/fd | tr '\\n' ' '); \
                  if echo hook >> \"$1\" 2>/dev/null; then w=written; else w=refused; fi; \
                  { echo \"uid $(id -u)\"; grep -E '^(CapBnd|CapEff):' /proc/self/status; echo \"fds $fds\"; \
                    echo \"write $w\"; echo \"env $(env | cut -d= -f1 | sort | tr '\\n' ' ')\"; } > \"$0.tmp\"; \
                  mv \"$0.tmp\" \"$0\"";
    let config = Config::new()
        .alert_command(["sh", "-c", script, &out.display().to_string(), &victim.display().to_string()])
        .lines("policy", "limit_bytes = 4096\nshadow = true\nkill = false")
        .probes(false);
    let cg = Group::here("alert-user", None);
    let _hog = Hog::spawn(HOG, cg.path(), 1, false);
    set_cloexec(inherited.as_raw_fd(), false);
    let agent = Agent::with_config(&cg.path().display().to_string(), &config, &dir);
    set_cloexec(inherited.as_raw_fd(), true);
    let text = wait_until("the alert command's report", Duration::from_secs(10), || {
        std::fs::read_to_string(&out).ok().filter(|t| t.contains("env "))
    });
    eprintln!("alert command of a root agent:\n{text}");
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
            .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
    };
    let uid = field("uid ");
    assert!(uid.parse::<u32>().is_ok_and(|u| u != 0), "the command ran as uid {uid}:\n{text}");
    assert_eq!(field("CapBnd:"), "0000000000000000", "{text}");
    assert_eq!(field("CapEff:"), "0000000000000000", "{text}");
    assert_eq!(field("write "), "refused", "the command wrote root's file:\n{text}");
    assert_eq!(std::fs::read_to_string(&victim).ok().as_deref(), Some("root's\n"), "root's file changed");
    // Its three pipes, and the directory ls reads the list from (the next free number).
    assert_eq!(field("fds "), "0 1 2 3", "the command holds more than its pipes:\n{text}");
    // Its environment: PATH and the alert's variables (the shell adds PWD), nothing of the agent's.
    let env = field("env ");
    let foreign: Vec<&str> =
        env.split_whitespace().filter(|k| !k.starts_with("MONITOR_") && !["PATH", "PWD"].contains(k)).collect();
    assert!(foreign.is_empty(), "the command got {foreign:?} of the agent's environment:\n{text}");
    assert!(env.contains("MONITOR_ALERT_NAME"), "{text}");
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}
