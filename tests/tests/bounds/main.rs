//! The agent's bounds under load: its memory ceiling and `/healthz` deadline while it serves many clients, idle
//! connections, and a group removed under it (`agent`), and `monitor run`'s memory ceiling under every load at once
//! (`run`). A binary of its own, so that no test of another subject loads the machine while these measure; within
//! it, the loaded tests take turns ([`alone`]).

mod agent;
mod run;

use std::sync::{Mutex, MutexGuard};

/// The agent's documented memory ceiling under the loads these tests run (docs/benchmarks.md, "Agent under load").
pub const RSS_CEILING_MB: f64 = 64.0;

/// One test at a time: each measures the agent under a load of its own, on a 2-core machine.
static ALONE: Mutex<()> = Mutex::new(());

pub fn alone() -> MutexGuard<'static, ()> {
    ALONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A kB field of /proc/<pid>/status, in MB.
pub fn status_mb(pid: u32, field: &str) -> f64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = text
        .lines()
        .find_map(|l| l.strip_prefix(field)?.trim().strip_suffix("kB")?.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"));
    kb / 1000.0
}
