//! The command line's failures: `monitor agent` on a cgroup that does not exist or has no memory controller exits
//! non-zero at once with a one-line reason (no panic), and `monitor check-config` names the bad key and its line
//! for every fixture under `tests/fixtures/configs/invalid/` while accepting those under `valid/`, lists every
//! problem of a file that parses, and checks a file for the command named by `--mode`.

use monitor_tests::{agent::free_port, require, require_root, run_monitor, CgroupV1, Finished};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A failing start must take well under this.
const QUICK: Duration = Duration::from_secs(5);
/// The time limit of one command (beyond it the command is killed and the test fails).
const LIMIT: Duration = Duration::from_secs(20);

/// Runs `monitor agent --cgroup <cgroup>` on a free port; it must fail quickly with one line and no panic.
fn agent_must_refuse(cgroup: &str) -> Finished {
    let listen = format!("127.0.0.1:{}", free_port());
    let out = run_monitor(&["agent", "--cgroup", cgroup, "--listen", &listen], LIMIT);
    assert!(!out.status.success(), "agent --cgroup {cgroup} succeeded: {out:?}");
    assert!(out.elapsed < QUICK, "agent --cgroup {cgroup} took {:?} to fail", out.elapsed);
    assert_one_line_no_panic(&out.stderr, &format!("agent --cgroup {cgroup}"));
    out
}

fn assert_no_panic(text: &str, what: &str) {
    for bad in ["panicked", "stack backtrace", "RUST_BACKTRACE"] {
        assert!(!text.contains(bad), "{what}: output looks like a panic:\n{text}");
    }
}

fn assert_one_line_no_panic(stderr: &str, what: &str) {
    assert_no_panic(stderr, what);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{what}: want a one-line reason on stderr, got:\n{stderr}");
}

#[test]
fn agent_on_a_missing_cgroup_fails_with_one_line() {
    let out = agent_must_refuse("/does/not/exist");
    assert!(out.stderr.contains("/does/not/exist"), "the reason should name the path: {}", out.stderr);
}

#[test]
fn agent_on_a_missing_relative_cgroup_fails_with_one_line() {
    let name = format!("monitor-test-{}-no-such-group", std::process::id());
    let out = agent_must_refuse(&name);
    assert!(out.stderr.contains(&name), "the reason should name the group: {}", out.stderr);
}

/// Whether a cgroup2 directory offers the memory controller.
fn v2_has_memory(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.controllers")).is_ok_and(|c| c.split_whitespace().any(|w| w == "memory"))
}

const UNIFIED: &str = "/sys/fs/cgroup/unified";
const V1_CPU: &str = "/sys/fs/cgroup/cpu";

#[test]
fn agent_on_cgroup2_without_memory_controller_fails_with_one_line() {
    let test = "agent_on_cgroup2_without_memory_controller_fails_with_one_line";
    let unified = Path::new(UNIFIED);
    let here = unified.join("cgroup.controllers").exists() && !v2_has_memory(unified);
    if !require(here, test, &format!("no cgroup2 mount without a memory controller at {UNIFIED}")) {
        return;
    }
    agent_must_refuse(UNIFIED);
}

#[test]
fn agent_on_a_new_cgroup2_group_without_memory_controller_fails_with_one_line() {
    let test = "agent_on_a_new_cgroup2_group_without_memory_controller_fails_with_one_line";
    let unified = Path::new(UNIFIED);
    let here = unified.join("cgroup.controllers").exists() && !v2_has_memory(unified);
    if !require(here, test, &format!("no cgroup2 mount without a memory controller at {UNIFIED}"))
        || !require_root(test)
    {
        return;
    }
    let cg = CgroupV1::create_in(unified, "nomem");
    agent_must_refuse(&cg.path().display().to_string());
}

#[test]
fn agent_on_the_v1_cpu_hierarchy_fails_with_one_line() {
    let test = "agent_on_the_v1_cpu_hierarchy_fails_with_one_line";
    let cpu = Path::new(V1_CPU);
    let here = cpu.join("cpu.shares").exists() && !cpu.join("memory.stat").exists();
    if !require(here, test, &format!("no v1 cpu hierarchy (without memory) at {V1_CPU}")) {
        return;
    }
    agent_must_refuse(V1_CPU);
}

fn fixtures(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/configs").join(kind)
}

fn toml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    files
}

fn check_config(path: &Path) -> Finished {
    let p = path.display().to_string();
    let out = run_monitor(&["check-config", &p], LIMIT);
    assert_no_panic(&out.stderr, &format!("check-config {p}"));
    out
}

#[test]
fn check_config_accepts_every_valid_fixture() {
    let files = toml_files(&fixtures("valid"));
    assert!(!files.is_empty());
    for f in files {
        let out = check_config(&f);
        assert!(out.status.success(), "check-config {} failed:\n{}{}", f.display(), out.stdout, out.stderr);
    }
}

/// Each invalid fixture: the text fragments its error must contain, and the lines it may name (the first bad key;
/// for a pair of values that conflict, either one's line).
const INVALID: &[(&str, &[&str], &[usize])] = &[
    ("unknown-section.toml", &["polcy"], &[3]),
    ("unknown-policy-key.toml", &["refuse_ta"], &[4]),
    ("unknown-process-key.toml", &["cmd"], &[4]),
    ("refuse-not-below-abort.toml", &["abort_at"], &[2, 3]),
    ("abort-above-one.toml", &["abort_at"], &[3]),
    ("refuse-zero.toml", &["refuse_at"], &[3]),
    ("hysteresis-negative.toml", &["hysteresis"], &[2]),
    ("hysteresis-not-below-refuse.toml", &["hysteresis"], &[4]),
    ("interval-too-small.toml", &["interval_ms"], &[4]),
    ("wrong-type.toml", &["refuse_at"], &[2]),
    ("not-toml.toml", &[], &[3]),
    ("role-unknown.toml", &["role"], &[3]),
    ("refuse-above-default-abort.toml", &["refuse_at", "abort_at at its default"], &[3]),
    ("brake-below-abort.toml", &["brake_at", "above abort_at"], &[2, 3]),
    ("kill-below-abort.toml", &["kill_at", "above abort_at"], &[2, 3]),
    ("abort-above-default-kill.toml", &["abort_at", "kill_at at its default"], &[2]),
    ("wakeup-unknown.toml", &["inotify"], &[3]),
    ("min-interval-above-interval.toml", &["min_interval_ms"], &[3]),
    ("webhook-https-ca-missing.toml", &["alerts.ca_file", "/nonexistent/monitor-test-ca.pem"], &[5]),
    ("cluster-short-secret.toml", &["cluster.secret", "at least 32"], &[6]),
    ("proxy-short-secret.toml", &["proxy.token_secret", "at least 32"], &[3]),
    ("cluster-fallback-unknown.toml", &["fallback", "anywhere"], &[6]),
    ("cluster-wildcard-gossip.toml", &["cluster.listen", "set advertise"], &[2]),
    ("cluster-secret-and-file.toml", &["cluster.secret_file", "not both"], &[6]),
    ("user-unknown.toml", &["process[0].user", "no user \"no-such-user-for-monitor\""], &[6]),
    ("group-unknown.toml", &["process[0].group", "no group \"no-such-group-for-monitor\""], &[7]),
    ("user-negative.toml", &["user", "-5 is not an id"], &[6]),
    ("actions-secret-file-missing.toml", &["actions.secret_file", "/nonexistent/monitor-test-action.secret"], &[5]),
    ("alerts-command-user-unknown.toml", &["alerts.command_user", "no user \"no-such-user-for-monitor\""], &[4]),
];

/// Whether an error message names line `n` (`file:3:`, `line 3`, `line: 3`).
fn names_line(text: &str, n: usize) -> bool {
    [format!(":{n}:"), format!("line {n}"), format!("line: {n}")].iter().any(|f| text.contains(f.as_str()))
}

#[test]
fn check_config_names_the_bad_key_and_its_line() {
    let dir = fixtures("invalid");
    let mut failures = Vec::new();
    for (file, fragments, lines) in INVALID {
        let out = check_config(&dir.join(file));
        let text = format!("{}{}", out.stdout, out.stderr);
        if out.status.success() {
            failures.push(format!("{file}: accepted"));
            continue;
        }
        for f in *fragments {
            if !text.contains(f) {
                failures.push(format!("{file}: error does not name {f:?}: {}", text.trim()));
            }
        }
        if !lines.iter().any(|&n| names_line(&text, n)) {
            failures.push(format!("{file}: error does not name line {lines:?}: {}", text.trim()));
        }
    }
    assert!(failures.is_empty(), "check-config errors:\n{}", failures.join("\n"));
}

#[test]
fn every_invalid_fixture_has_an_expectation() {
    for f in toml_files(&fixtures("invalid")) {
        let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        assert!(INVALID.iter().any(|(n, _, _)| *n == name), "add {name} to INVALID in cli_errors.rs");
    }
}

#[test]
fn names_line_reads_the_usual_forms() {
    assert!(names_line("cfg.toml:3: unknown field", 3));
    assert!(names_line("TOML parse error at line 4, column 1", 4));
    assert!(!names_line("cfg.toml:13: x", 3));
}

#[test]
fn report_without_a_database_says_how_to_name_one() {
    let out = run_monitor(&["report"], LIMIT);
    assert!(!out.status.success(), "{out:?}");
    assert_one_line_no_panic(&out.stderr, "report");
    assert!(out.stderr.contains("--db") && out.stderr.contains("--config"), "{}", out.stderr);
}

#[test]
fn check_config_on_a_missing_file_fails_with_one_line() {
    let out = run_monitor(&["check-config", "/does/not/exist.toml"], LIMIT);
    assert!(!out.status.success(), "{out:?}");
    assert_one_line_no_panic(&out.stderr, "check-config /does/not/exist.toml");
}

#[test]
fn check_config_lists_every_problem_with_its_key_and_line() {
    let dir = monitor_tests::temp_dir("check-config-many");
    let file = dir.join("many.toml");
    let text = "[policy]\nabort_at = 1.5\n[stats]\nretention_days = 0\n[proxy]\nmax_header_bytes = 100\n";
    std::fs::write(&file, text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let out = check_config(&file);
    assert!(!out.status.success(), "accepted: {out:?}");
    for (line, key) in [(2, "policy.abort_at"), (4, "stats.retention_days"), (6, "proxy.max_header_bytes")] {
        let said = out.stderr.lines().any(|l| names_line(l, line) && l.contains(key));
        assert!(said, "{key} at line {line} not named:\n{}", out.stderr);
    }
    assert!(out.stderr.contains("3 problems"), "{}", out.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_config_mode_run_needs_a_process_and_agent_names_what_it_ignores() {
    let agent_only = fixtures("valid").join("policy.toml").display().to_string();
    let out = run_monitor(&["check-config", "--mode", "run", &agent_only], LIMIT);
    assert!(!out.status.success(), "run without [[process]] accepted: {out:?}");
    assert_one_line_no_panic(&out.stderr, "check-config --mode run");
    assert!(out.stderr.contains("no [[process]] to run"), "{}", out.stderr);

    let with_processes = fixtures("valid").join("full.toml").display().to_string();
    let out = run_monitor(&["check-config", &with_processes], LIMIT);
    assert!(out.status.success() && out.stdout.contains("ok for monitor run"), "{out:?}");
    let out = run_monitor(&["check-config", "--mode", "agent", &with_processes], LIMIT);
    assert!(out.status.success(), "{out:?}");
    assert!(out.stderr.contains("warning:") && out.stderr.contains("process: ignored by monitor agent"), "{out:?}");

    let out = run_monitor(&["check-config", "--mode", "both", &with_processes], LIMIT);
    assert!(!out.status.success(), "{out:?}");
}

/// Runs `monitor <args…>`, which must fail with one line on stderr (no panic), and returns that line.
fn fails_with_one_line(args: &[&str]) -> String {
    let out = run_monitor(args, LIMIT);
    assert!(!out.status.success(), "monitor {args:?} succeeded: {out:?}");
    assert_one_line_no_panic(&out.stderr, &format!("monitor {args:?}"));
    out.stderr.trim().to_string()
}

#[test]
fn each_error_is_said_once_with_a_hint() {
    // A missing file: the OS's reason once, not once per layer.
    let e = fails_with_one_line(&["check-config", "/nonexistent/monitor.toml"]);
    assert_eq!(e.matches("No such file or directory").count(), 1, "{e}");
    // A file that is not a stats database.
    let e = fails_with_one_line(&["report", "--db", "/etc/passwd"]);
    assert_eq!(e, "monitor: /etc/passwd is not a monitor stats database (SQLite could not read it as a database)");
    // No agent where status looks: the URL, and what to do.
    let url = format!("http://127.0.0.1:{}", free_port());
    let e = fails_with_one_line(&["status", "--url", &url]);
    assert!(e.contains(&format!("no monitor agent answers at {url}")) && e.contains("monitor agent"), "{e}");
    // A bad flag is named as the flag, not as the config key it sets.
    let e = fails_with_one_line(&["agent", "--cgroup", "/does/not/exist", "--interval-ms", "5"]);
    assert!(e.starts_with("monitor: --interval-ms: 5 is not in"), "{e}");
    // An unknown key names the nearest known one.
    let dir = monitor_tests::temp_dir("cli-hints");
    let typo = dir.join("typo.toml");
    std::fs::write(&typo, "[polcy]\nrefuse_at = 0.8\n").unwrap_or_else(|e| panic!("{e}"));
    let e = fails_with_one_line(&["check-config", "-c", &typo.display().to_string()]);
    assert!(e.contains("unknown field `polcy`") && e.ends_with("did you mean `policy`?"), "{e}");
    let e = fails_with_one_line(&["report", "--db", "/nonexistent.db", "--date", "tomorrow"]);
    assert!(e.contains("use today, yesterday or YYYY-MM-DD"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn version_names_the_commit_and_the_ebpf_object() {
    let out = run_monitor(&["--version"], LIMIT);
    assert!(out.status.success(), "{out:?}");
    let v = out.stdout.trim();
    assert!(v.starts_with("monitor ") && v.contains("(revision "), "{v}");
    assert!(v.contains("eBPF object built in") || v.contains("eBPF object not built in: "), "{v}");
}

#[test]
fn a_secret_file_others_can_read_stops_the_agent_and_check_config_names_the_fix() {
    use std::os::unix::fs::PermissionsExt;
    let dir = monitor_tests::temp_dir("cli-open-secret");
    // Made as the docs once said, under the usual umask: mode 0644.
    let secret = dir.join("action.secret");
    std::fs::write(&secret, format!("{}\n", "ab".repeat(32))).unwrap_or_else(|e| panic!("{e}"));
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap_or_else(|e| panic!("{e}"));
    let file = dir.join("m.toml");
    let text = format!(
        "[policy]\nshadow = true\n\n[actions]\npost_url = \"http://127.0.0.1:1/m\"\nsecret_file = {:?}\n",
        secret.display().to_string()
    );
    std::fs::write(&file, text).unwrap_or_else(|e| panic!("{e}"));
    let (s, f) = (secret.display(), file.display());
    let want = format!("{f}:6: actions.secret_file: {s} is mode 0644 (readable by others): run chmod 600 {s}");

    let out = check_config(&file);
    assert!(!out.status.success(), "accepted: {out:?}");
    assert!(out.stderr.lines().any(|l| l.ends_with(&want)), "want {want:?} in:\n{}", out.stderr);

    // The agent does not start with it: it exits at once, saying the same, before listening.
    let listen = format!("127.0.0.1:{}", free_port());
    let out = run_monitor(&["agent", "--config", &f.to_string(), "--cgroup", "auto", "--listen", &listen], LIMIT);
    assert!(!out.status.success(), "the agent started: {out:?}");
    assert!(out.elapsed < QUICK, "the agent took {:?} to refuse", out.elapsed);
    assert_no_panic(&out.stderr, "agent");
    assert!(out.stderr.contains(&want), "want {want:?} in:\n{}", out.stderr);

    // The fix it names is the fix.
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap_or_else(|e| panic!("{e}"));
    let out = check_config(&file);
    assert!(out.status.success(), "refused after chmod 600: {out:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
