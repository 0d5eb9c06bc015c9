//! What the in-VM tests share: the time they allow the emulated VM, where the binaries are, and the status
//! readers and waits of the support crate, at that time.

use monitor_tests::{Agent, Hog};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

pub use monitor_tests::status::{close, f64_at, mem_total, process, str_at, u64_at};

/// How long the agent (sampling every 50 ms) may take to show a change; generous, as the VM runs emulated.
pub const SETTLE: Duration = Duration::from_secs(20);

/// The folder holding this binary; `monitor`, `alloc-hog`, `fixture-backend` and `grower` sit beside it (in the
/// VM: `/bin`).
pub fn bin_dir() -> PathBuf {
    monitor_tests::bins::exe_dir()
}

/// The `alloc-hog` fixture beside this binary.
pub fn hog_bin() -> PathBuf {
    monitor_tests::bins::alloc_hog()
}

/// Waits (up to [`SETTLE`]) until the agent's usage is within 5% of the hogs' summed RssAnon and every hog is
/// listed.
pub fn wait_usage_matches(agent: &Agent, hogs: &[Hog]) -> Value {
    monitor_tests::scenario::wait_usage_matches(agent, hogs, SETTLE)
}
