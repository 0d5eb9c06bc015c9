//! What the launcher of `monitor run` publishes of each process it started: its name, role, port, pid, phase and
//! restarts. The launcher writes it; the API, the alerts, the history and a cluster peer read it.

use crate::config::Role;
use serde::Serialize;

/// Where a process is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Started, waiting for its health path to answer 200.
    Starting,
    /// Healthy: the proxy sends it requests.
    Ready,
    /// Running, but failed `health_failures` checks in a row: out of the proxy's pool until a check passes.
    Unhealthy,
    /// Exited; restarted at `next_retry_unix_ms`.
    BackingOff,
    /// Killed by the memory guard's last resort (not a crash); restarted at `next_retry_unix_ms` like any exit.
    Killed,
    /// Stopped by the launcher (drain).
    Stopped,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Ready => "ready",
            Phase::Unhealthy => "unhealthy",
            Phase::BackingOff => "backing-off",
            Phase::Killed => "killed",
            Phase::Stopped => "stopped",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// What `/api/v1/status` shows of one launched process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct LauncherInfo {
    pub name: String,
    /// `master` or `worker`, from the config.
    pub role: Role,
    pub port: u16,
    /// The running process's pid (None while backing off).
    pub pid: Option<u32>,
    /// `starting`, `ready`, `unhealthy`, `backing-off`, `killed` (by the memory guard, until its restart) or
    /// `stopped`.
    pub state: Phase,
    /// When the next start is due (Unix ms), while backing off.
    pub next_retry_unix_ms: Option<u64>,
    /// How many times it has been restarted.
    pub restarts: u32,
}
