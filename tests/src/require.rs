//! Requirement checks: a test that cannot run here prints `skipping <test>: <reason>` and returns, except in CI
//! (`CI=true`), where a missing requirement is a failure.

/// True when the `CI` environment variable is `true` (or `1`).
pub fn in_ci() -> bool {
    matches!(std::env::var("CI").as_deref(), Ok("true") | Ok("1"))
}

/// True when the effective uid is 0.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Returns `cond`; when it is false, prints `skipping <test>: <reason>` (or panics in CI).
pub fn require(cond: bool, test: &str, reason: &str) -> bool {
    if cond {
        return true;
    }
    if in_ci() {
        panic!("{test}: {reason} (CI=true: tests that need it must run in CI)");
    }
    skip(test, reason);
    false
}

/// Prints `skipping <test>: <reason>` straight to stderr, past the test harness's output capture, so skips show
/// in a plain `cargo test` run; and adds `<test>: <reason>` to the file `MONITOR_TEST_SKIPS` names, when set, for
/// `cargo xtask test`'s summary. Every skip goes through here.
pub fn skip(test: &str, reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "skipping {test}: {reason}");
    if let Some(file) = std::env::var_os("MONITOR_TEST_SKIPS") {
        let line = format!("{test}: {reason}\n");
        // One write per line in append mode: lines of tests running at once do not interleave.
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(file) {
            let _ = f.write_all(line.as_bytes());
        }
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
        assert!(require(true, "t", "never printed"));
    }

    #[test]
    fn an_unmet_requirement_skips_or_fails_in_ci() {
        if in_ci() {
            let r = std::panic::catch_unwind(|| require(false, "t", "reason"));
            assert!(r.is_err());
        } else {
            assert!(!require(false, "t", "reason"));
        }
    }
}
