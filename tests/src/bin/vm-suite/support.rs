//! Helpers shared by the in-VM tests: where the binaries are, reading the agent's status document, waiting for
//! the agent to show a state.

use monitor_tests::{Agent, Hog};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

/// How long the agent (sampling every 50 ms) may take to show a change; generous, as the VM runs emulated.
pub const SETTLE: Duration = Duration::from_secs(20);

/// The folder holding this binary; `monitor` and `alloc-hog` sit beside it (in the VM: `/bin`).
pub fn bin_dir() -> PathBuf {
    match std::env::current_exe() {
        Ok(p) => p.parent().map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/bin")),
        Err(_) => PathBuf::from("/bin"),
    }
}

/// The `alloc-hog` fixture beside this binary.
pub fn hog_bin() -> PathBuf {
    bin_dir().join("alloc-hog")
}

pub fn u64_at(v: &Value, ptr: &str) -> u64 {
    v.pointer(ptr).and_then(Value::as_u64).unwrap_or_else(|| panic!("no unsigned {ptr} in status:\n{v:#}"))
}

pub fn f64_at(v: &Value, ptr: &str) -> f64 {
    v.pointer(ptr).and_then(Value::as_f64).unwrap_or_else(|| panic!("no number {ptr} in status:\n{v:#}"))
}

pub fn str_at<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or_else(|| panic!("no string {ptr} in status:\n{v:#}"))
}

pub use monitor_tests::agent::process;

pub fn action(status: &Value, pid: u32) -> Option<&str> {
    process(status, pid)?.get("action")?.as_str()
}

pub fn state(status: &Value) -> Option<&str> {
    status.pointer("/policy/state")?.as_str()
}

/// `a` within `frac` of `b` (relative to `b`), or within `slack` bytes.
pub fn close(a: u64, b: u64, frac: f64, slack: u64) -> bool {
    a.abs_diff(b) as f64 <= b as f64 * frac || a.abs_diff(b) <= slack
}

/// Waits until the agent's usage is within 5% of the hogs' summed RssAnon and every hog is listed.
pub fn wait_usage_matches(agent: &Agent, hogs: &[Hog]) -> Value {
    let want: u64 = hogs.iter().map(Hog::rss_anon).sum();
    agent.wait_for(
        |s| {
            let usage = s.pointer("/group/usage_bytes").and_then(Value::as_u64).unwrap_or(0);
            close(usage, want, 0.05, 0) && hogs.iter().all(|h| process(s, h.pid()).is_some())
        },
        SETTLE,
    )
}

pub fn all_actions(status: &Value, hogs: &[Hog], want: &str) -> bool {
    hogs.iter().all(|h| action(status, h.pid()) == Some(want))
}

/// `GET /api/v1/decision?pid=N` names the action.
pub fn decision_says(agent: &Agent, pid: u32, want: &str) {
    let (code, body) = agent.get(&format!("/api/v1/decision?pid={pid}"));
    assert_eq!(code, 200, "decision for {pid}: {body}");
    let got = match serde_json::from_str::<Value>(&body) {
        Ok(Value::Object(o)) => o.get("action").and_then(Value::as_str).map(str::to_string),
        Ok(Value::String(s)) => Some(s),
        _ => None,
    };
    assert_eq!(got.as_deref(), Some(want), "decision for {pid}: {body}");
}

/// `MemTotal` of this machine in bytes.
pub fn mem_total() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    monitor_tests::proc::parse_kib_field(&meminfo, "MemTotal").unwrap_or(0)
}
