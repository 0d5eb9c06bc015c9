//! The one rule for "in CI": the `CI` environment variable set to `true` or `1` (what CI services set; .ci/run
//! exports `CI=true`). In CI a test that cannot run fails instead of skipping ([`crate::require`]), `cargo xtask
//! test` needs the eBPF toolchain, and monitor's build script fails without it. Those all ask here: the test
//! helpers and xtask through `monitor_tests::in_ci`, the build script by including this file by path (a build
//! script cannot depend on the test crate). Any other value, or none, is not CI.

/// True when `value`, the `CI` variable's, says CI: `true` or `1`.
pub fn is_ci(value: Option<&str>) -> bool {
    matches!(value, Some("true" | "1"))
}

/// True when this process runs in CI ([`is_ci`] of its `CI` variable).
pub fn in_ci() -> bool {
    is_ci(std::env::var("CI").ok().as_deref())
}
