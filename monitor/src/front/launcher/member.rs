//! One launched process as the rest of `monitor run` sees it: name, role, port, and its live state (ready, pid,
//! restarts, phase), written by the launcher and read lock-free by the proxy and under a small lock by the API.

use crate::config::Role;
use crate::feed::{LauncherInfo, Phase};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;

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
    pub(crate) fn is_ready(&self) -> bool {
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
