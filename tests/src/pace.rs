//! How much slower than a native run the tests run: `MONITOR_TEST_SLOWDOWN`, a whole number (default 1). The test
//! VM runs every instruction emulated and sets it for the host tests it runs again on cgroup v2 (tests/vm/init, from
//! a loop timed there and on the host), so the support crate's waits (an agent's start, a request's answer, a port
//! to listen, a status to show a change) stretch by it. Only the patience grows: what a test checks is the same.
//!
//! A test whose work must last longer on a slow machine (requests held long enough to overlap, a master kept
//! unhealthy long enough for an alert) stretches it by [`stretch`], the same factor capped at [`STRETCH_MAX`]: work
//! stretched by 30 would outlast the front door's own timeouts and the VM's.

use std::time::Duration;

/// The factor (1 when unset or not a whole number of at least 1).
pub fn slowdown() -> u32 {
    parse(std::env::var("MONITOR_TEST_SLOWDOWN").ok().as_deref())
}

fn parse(value: Option<&str>) -> u32 {
    value.and_then(|v| v.trim().parse().ok()).filter(|&n| n >= 1).unwrap_or(1)
}

/// The most [`stretch`] gives.
pub const STRETCH_MAX: u32 = 10;

/// The factor a test's own work stretches by: [`slowdown`], at most [`STRETCH_MAX`].
pub fn stretch() -> u32 {
    slowdown().min(STRETCH_MAX)
}

/// `d` stretched by [`slowdown`].
pub fn scaled(d: Duration) -> Duration {
    d * slowdown()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_number_of_at_least_one() {
        assert_eq!(parse(None), 1);
        assert_eq!(parse(Some("4")), 4);
        assert_eq!(parse(Some(" 3 ")), 3);
        assert_eq!(parse(Some("0")), 1);
        assert_eq!(parse(Some("1.5")), 1);
        assert_eq!(parse(Some("slow")), 1);
    }
}
