//! Requirement checks: a test that cannot run here (not root, no memory cgroup, a program missing) prints
//! `skipping <test>: <reason>` and returns, except in CI ([`in_ci`] says when), where a missing requirement is a
//! failure. Every skip goes through [`require`], and so does a test that leaves part of its checks out (the text half
//! of a chart without a font): it counts as skipped, not as passed. Each skip is written to the file
//! `MONITOR_TEST_SKIPS` names, once per test and process, for `cargo xtask test`, which subtracts the skipped tests
//! from the passed ones by name.

pub use crate::ci::{in_ci, is_ci};

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

/// True when the effective uid is 0.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Returns `cond`; when it is false, prints `skipping <test>: <reason>` and records the skip, or panics in CI.
/// `test` is the running test's function name (checked against the test harness's name for the thread).
pub fn require(cond: bool, test: &str, reason: &str) -> bool {
    if cond {
        return true;
    }
    if in_ci() {
        panic!("{test}: {reason} (in CI, tests that need it must run)");
    }
    skip(test, reason);
    false
}

/// Prints `skipping <test>: <reason>` straight to stderr, past the test harness's output capture, so skips show
/// in a plain `cargo test` run; and adds `<test path>: <reason>` to the file `MONITOR_TEST_SKIPS` names, when set.
fn skip(test: &str, reason: &str) {
    let thread = std::thread::current();
    let path = test_path(thread.name(), test).unwrap_or_else(|e| panic!("{e}"));
    let _ = writeln!(std::io::stderr(), "skipping {path}: {reason}");
    let Some(file) = std::env::var_os("MONITOR_TEST_SKIPS") else { return };
    // One line per test and process, however many of its requirements are missing: the line is the test.
    static RECORDED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let first = RECORDED.lock().unwrap_or_else(|e| e.into_inner()).insert(path.clone());
    if first {
        record(Path::new(&file), &path, reason);
    }
}

/// The name `cargo test` gives the running test (`module::tests::name`): the test harness names each test's thread
/// so. `test` must be that name's last part; on a thread the harness did not name (`main` under `harness = false`,
/// one a test spawned) `test` is taken as it is.
fn test_path(thread: Option<&str>, test: &str) -> Result<String, String> {
    match thread {
        Some(t) if t == test || t.ends_with(&format!("::{test}")) => Ok(t.to_string()),
        None | Some("main") => Ok(test.to_string()),
        Some(t) => Err(format!("a skip names the test {test:?}, but the test running is {t:?}: name it")),
    }
}

/// Appends `<path>: <reason>` to `file`. One write per line in append mode: lines of tests running at once do not
/// interleave.
fn record(file: &Path, path: &str, reason: &str) {
    let line = format!("{path}: {}\n", reason.replace('\n', " "));
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(file) {
        let _ = f.write_all(line.as_bytes());
    }
}

/// True when running as root; otherwise prints `skipping <test>: needs root` (or panics in CI).
pub fn require_root(test: &str) -> bool {
    require(is_root(), test, "needs root")
}

/// True with root and a v1 memory controller ([`crate::CgroupV1::unavailable_reason`]); otherwise prints
/// `skipping <test>: <reason>` (or panics in CI).
pub fn require_v1(test: &str) -> bool {
    match crate::CgroupV1::unavailable_reason() {
        None => true,
        Some(reason) => require(false, test, &reason),
    }
}

/// True with root and a memory controller on either hierarchy ([`crate::group::Hierarchy::here`]): what a test
/// that makes its group with [`crate::Group::here`] needs. Otherwise prints `skipping <test>: <reason>` (or panics
/// in CI).
pub fn require_group(test: &str) -> bool {
    match crate::group::Hierarchy::here() {
        Ok(_) => true,
        Err(reason) => require(false, test, &reason),
    }
}

/// True when `program` is a file in one of PATH's directories.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// True when `program` is on PATH; otherwise prints `skipping <test>: needs <program>` (or panics in CI).
pub fn require_program(test: &str, program: &str) -> bool {
    require(on_path(program), test, &format!("needs {program}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_met_requirement_is_true() {
        assert!(require(true, "a_met_requirement_is_true", "never printed"));
    }

    #[test]
    fn an_unmet_requirement_skips_or_fails_in_ci() {
        let test = "an_unmet_requirement_skips_or_fails_in_ci";
        if in_ci() {
            let r = std::panic::catch_unwind(|| require(false, test, "reason"));
            assert!(r.is_err());
        } else {
            assert!(!require(false, test, "reason"));
        }
    }

    #[test]
    fn ci_is_true_or_1() {
        for (value, ci) in [
            (Some("true"), true),
            (Some("1"), true),
            (None, false),
            (Some(""), false),
            (Some("false"), false),
            (Some("0"), false),
            (Some("TRUE"), false),
            (Some("yes"), false),
        ] {
            assert_eq!(is_ci(value), ci, "CI={value:?}");
        }
    }

    #[test]
    fn a_skip_is_named_by_the_running_test() {
        let me = std::thread::current().name().map(String::from);
        assert_eq!(me.as_deref(), Some("require::tests::a_skip_is_named_by_the_running_test"), "libtest's name");
        for (thread, test, want) in [
            (
                Some("v1::thp_backed_memory_is_counted"),
                "thp_backed_memory_is_counted",
                Ok("v1::thp_backed_memory_is_counted"),
            ),
            (Some("bare"), "bare", Ok("bare")),
            (Some("main"), "probes_overhead_nginx", Ok("probes_overhead_nginx")),
            (None, "spawned", Ok("spawned")),
            (Some("v1::thp_backed_memory_is_counted"), "counted", Err(())),
            (Some("v1::other"), "thp_backed_memory_is_counted", Err(())),
            (Some("tokio-runtime-worker"), "x", Err(())),
        ] {
            let got = test_path(thread, test);
            assert_eq!(got.as_deref().map_err(|_| ()), want, "{thread:?} {test:?}");
        }
    }

    #[test]
    fn a_record_is_one_line() {
        let dir = crate::temp_dir("require-record");
        let file = dir.join("skips.txt");
        record(&file, "m::a", "needs root");
        record(&file, "m::b", "two\nlines");
        let text = std::fs::read_to_string(&file).expect("the skip file");
        assert_eq!(text, "m::a: needs root\nm::b: two lines\n");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
