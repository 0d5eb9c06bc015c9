//! One launched process as the rest of `monitor run` sees it: name, role, port, and its live state (ready, pid,
//! restarts, phase), written by the launcher and read lock-free by the proxy and under a small lock by the API.

use crate::config::Role;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;

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

#[derive(Debug)]
struct Detail {
    phase: Phase,
    next_retry_unix_ms: Option<u64>,
}

/// A launched process's shared state.
#[derive(Debug)]
pub struct Member {
    pub name: String,
    pub role: Role,
    pub port: u16,
    pub health: String,
    ready: AtomicBool,
    pid: AtomicU32,
    restarts: AtomicU32,
    detail: Mutex<Detail>,
}

impl Member {
    pub fn new(name: &str, role: Role, port: u16, health: &str) -> Member {
        Member {
            name: name.into(),
            role,
            port,
            health: health.into(),
            ready: AtomicBool::new(false),
            pid: AtomicU32::new(0),
            restarts: AtomicU32::new(0),
            detail: Mutex::new(Detail { phase: Phase::Starting, next_retry_unix_ms: None }),
        }
    }

    /// Healthy and running: may be sent requests.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The running process's pid, 0 when none.
    pub fn pid(&self) -> u32 {
        self.pid.load(Ordering::Acquire)
    }

    pub fn restarts(&self) -> u32 {
        self.restarts.load(Ordering::Relaxed)
    }

    pub fn phase(&self) -> Phase {
        self.detail.lock().map(|d| d.phase).unwrap_or(Phase::Stopped)
    }

    pub(crate) fn set(&self, phase: Phase, pid: u32, next_retry_unix_ms: Option<u64>) {
        if let Ok(mut d) = self.detail.lock() {
            d.phase = phase;
            d.next_retry_unix_ms = next_retry_unix_ms;
        }
        self.pid.store(pid, Ordering::Release);
        self.ready.store(phase == Phase::Ready, Ordering::Release);
    }

    pub(crate) fn count_restart(&self) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
    }

    /// The API's view.
    pub fn info(&self) -> LauncherInfo {
        let (phase, next) =
            self.detail.lock().map(|d| (d.phase, d.next_retry_unix_ms)).unwrap_or((Phase::Stopped, None));
        let pid = self.pid();
        LauncherInfo {
            name: self.name.clone(),
            role: self.role,
            port: self.port,
            pid: (pid != 0).then_some(pid),
            state: phase,
            next_retry_unix_ms: next,
            restarts: self.restarts(),
        }
    }
}
