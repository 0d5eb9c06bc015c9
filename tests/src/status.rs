//! Reading the agent's status document (`/api/v1/status`): typed values at a JSON pointer (a missing one fails
//! the test with the whole document), a process's entry, its action, the policy's state.

use serde_json::Value;

pub use crate::agent::process;

pub fn u64_at(v: &Value, ptr: &str) -> u64 {
    v.pointer(ptr).and_then(Value::as_u64).unwrap_or_else(|| panic!("no unsigned {ptr} in status:\n{v:#}"))
}

pub fn f64_at(v: &Value, ptr: &str) -> f64 {
    v.pointer(ptr).and_then(Value::as_f64).unwrap_or_else(|| panic!("no number {ptr} in status:\n{v:#}"))
}

pub fn str_at<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or_else(|| panic!("no string {ptr} in status:\n{v:#}"))
}

/// The action the status gives `pid` (`serve`, `refuse`, `abort`).
pub fn action(status: &Value, pid: u32) -> Option<&str> {
    process(status, pid)?.get("action")?.as_str()
}

/// The policy's state (`normal`, `refusing`, `aborting`).
pub fn state(status: &Value) -> Option<&str> {
    status.pointer("/policy/state")?.as_str()
}

/// `a` within `frac` of `b` (relative to `b`), or within `slack` bytes.
pub fn close(a: u64, b: u64, frac: f64, slack: u64) -> bool {
    a.abs_diff(b) as f64 <= b as f64 * frac || a.abs_diff(b) <= slack
}

/// `MemTotal` of this machine in bytes.
pub fn mem_total() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    crate::proc::parse_kib_field(&meminfo, "MemTotal").unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_values_states_and_actions() {
        let s = serde_json::json!({
            "group": {"usage_bytes": 10, "ratio": 0.5, "version": "v1"},
            "policy": {"state": "refusing"},
            "processes": [{"pid": 7, "action": "refuse"}],
        });
        assert_eq!((u64_at(&s, "/group/usage_bytes"), f64_at(&s, "/group/ratio")), (10, 0.5));
        assert_eq!(str_at(&s, "/group/version"), "v1");
        assert_eq!((state(&s), action(&s, 7), action(&s, 8)), (Some("refusing"), Some("refuse"), None));
        assert!(close(105, 100, 0.05, 0) && !close(106, 100, 0.05, 0) && close(106, 100, 0.0, 6));
    }
}
