//! What the front door of `monitor run` publishes besides the samples: each process it started (name, role, port,
//! pid, phase, restarts) and its counts since start (requests shed, requests forwarded to another node). The
//! launcher and the proxy write it; the API, the alerts, the history, the fleet and `/metrics` read it. Under
//! `monitor agent` there is none.

use crate::config::Role;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The front door as its readers see it.
#[derive(Clone)]
pub struct Door {
    launched: Arc<dyn Fn() -> Vec<LauncherInfo> + Send + Sync>,
    counts: Arc<DoorCounts>,
}

impl Door {
    /// `launched` reads the launcher's processes; `counts` is the one the proxy counts into.
    pub fn new(launched: impl Fn() -> Vec<LauncherInfo> + Send + Sync + 'static, counts: Arc<DoorCounts>) -> Door {
        Door { launched: Arc::new(launched), counts }
    }

    /// Every launched process, running or backing off.
    pub fn launched(&self) -> Vec<LauncherInfo> {
        (self.launched)()
    }

    /// Requests answered 503 because the group was refusing or aborting, since start.
    pub fn shed_total(&self) -> u64 {
        self.counts.shed.load(Ordering::Relaxed)
    }

    /// Requests sent on to the node that owns their cache, since start (0 outside a cluster).
    pub fn forwarded_total(&self) -> u64 {
        self.counts.forwarded.load(Ordering::Relaxed)
    }

    /// Requests sent to a process a second time, per reason, since start.
    pub fn retries(&self) -> [(&'static str, u64); 2] {
        Retry::ALL.map(|r| (r.as_str(), self.counts.retries[r as usize].load(Ordering::Relaxed)))
    }

    /// The memory its requests grew their processes by, per route key.
    pub fn growth(&self) -> &super::growth::RouteGrowth {
        &self.counts.growth
    }
}

/// The front door's counts since start, written by the proxy's threads.
#[derive(Debug, Default)]
pub struct DoorCounts {
    pub shed: AtomicU64,
    pub forwarded: AtomicU64,
    /// Requests sent a second time, by [`Retry`] ([`DoorCounts::retried`]).
    pub retries: [AtomicU64; 2],
    /// Memory per request, per route key (`[proxy] track_requests`).
    pub growth: super::growth::RouteGrowth,
}

impl DoorCounts {
    /// Counts one request sent a second time, for `why`.
    pub fn retried(&self, why: Retry) {
        self.retries[why as usize].fetch_add(1, Ordering::Relaxed);
    }
}

/// Why the front door sent a request a second time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// A kept-alive connection closed before the request was written on it: the process never saw it (any method).
    Unsent = 0,
    /// The exchange failed before any byte of an answer, on a request that is idempotent and bodiless.
    Failed = 1,
}

impl Retry {
    pub const ALL: [Retry; 2] = [Retry::Unsent, Retry::Failed];

    pub fn as_str(self) -> &'static str {
        match self {
            Retry::Unsent => "unsent",
            Retry::Failed => "failed",
        }
    }
}

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
