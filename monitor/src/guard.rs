//! The last resort, carried out: the sampler thread kills the process the policy's kill step names
//! ([`crate::decision::policy::kill`]) on the same wake-up that decided it, and records the kill in the
//! [`KillBook`] that the launcher (a guard's kill is not a crash), the front door (the victim's clients get 503
//! with the reason, not 502) and `/metrics` read. The memory brake ([`brake`]) stands beside it, and the signals of
//! `[actions]` go through [`signal`] (the sampler's thread sends the abort's itself, on the wake-up that chose the
//! victim).
//!
//! The kill goes through a pidfd opened on the pid; it is sent only when the process behind that pidfd has the
//! sampled start time and is still listed in the group's tree, so a reused pid or a process that left the group is
//! never hit. The agent never kills itself.

pub mod brake;
pub(crate) mod recycle;
pub use crate::decision::policy::kill::KillRecord;
pub use crate::decision::policy::recycle::RecycleRecord;
use crate::decision::policy::{KillOrder, ProcId};
use crate::decision::snapshot::{ProcessRole, Snapshot};
use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::{Mutex, PoisonError};

/// Kills kept for the launcher and the front door to recognise (older ones only count).
const RECENT: usize = 32;

/// The window in which kills of one name are counted as a repeat ([`KillBook::again`]): a minute.
pub const AGAIN_MS: u64 = 60_000;

/// `CLOCK_MONOTONIC` now, in nanoseconds.
pub(crate) fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// Why a kill was not sent.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error("the agent never kills itself")]
    Itself,
    #[error("pid {pid} is gone")]
    Gone { pid: u32 },
    #[error("pid {pid} is another process now")]
    Reused { pid: u32 },
    #[error("pid {pid} is no longer in the group")]
    Left { pid: u32 },
    #[error("reading the group's processes: {0}")]
    Group(String),
    #[error("pidfd_open({pid}): {source}")]
    Open { pid: u32, source: std::io::Error },
    #[error("pidfd_send_signal({pid}, SIGKILL): {source}")]
    Send { pid: u32, source: std::io::Error },
}

/// SIGKILLs the process `order` names if, through a pidfd, it is still the sampled process and a member of the group
/// `dir` (or a cgroup below it).
pub fn kill(order: &KillOrder, dir: &Path) -> Result<(), GuardError> {
    let pid = order.target.pid;
    if pid == std::process::id() {
        return Err(GuardError::Itself);
    }
    let fd = crate::base::pidfd::open(pid).map_err(|source| match source.raw_os_error() {
        Some(libc::ESRCH) => GuardError::Gone { pid },
        _ => GuardError::Open { pid, source },
    })?;
    match crate::sources::procs::start_ticks(pid) {
        Ok(t) if t == order.target.start_ticks => {}
        Ok(_) => return Err(GuardError::Reused { pid }),
        Err(_) => return Err(GuardError::Gone { pid }),
    }
    let listed = crate::sources::cgroup::kill::members(dir).map_err(|e| GuardError::Group(e.to_string()))?;
    if listed.binary_search(&pid).is_err() {
        return Err(GuardError::Left { pid });
    }
    crate::base::pidfd::send_signal(&fd, libc::SIGKILL).map_err(|source| match source.raw_os_error() {
        Some(libc::ESRCH) => GuardError::Gone { pid },
        _ => GuardError::Send { pid, source },
    })
}

/// Why a signal was not sent.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SignalError {
    #[error("pidfd_open({pid}): {source}")]
    Open { pid: u32, source: std::io::Error },
    #[error("pid {pid}: reading its start time: {msg}")]
    StartTime { pid: u32, msg: String },
    #[error("pid {pid} is another process now")]
    Reused { pid: u32 },
    #[error("pidfd_send_signal({pid}): {source}")]
    Send { pid: u32, source: std::io::Error },
    /// EPERM: the process runs as another user and the agent lacks CAP_KILL.
    #[error("pidfd_send_signal({pid}): not permitted: the process runs as another user and the agent lacks CAP_KILL")]
    NotPermitted { pid: u32 },
}

/// Sends `signal` (`[actions] abort_signal` and the other actions' signals) to the process `to` if it is still the
/// process sampled: a pidfd is opened on the pid, then the start time of the process behind it is compared with the
/// sampled one.
pub(crate) fn signal(to: ProcId, signal: i32) -> Result<(), SignalError> {
    let pid = to.pid;
    let fd = crate::base::pidfd::open(pid).map_err(|source| SignalError::Open { pid, source })?;
    let start = crate::sources::procs::start_ticks(pid).map_err(|msg| SignalError::StartTime { pid, msg })?;
    if start != to.start_ticks {
        return Err(SignalError::Reused { pid });
    }
    crate::base::pidfd::send_signal(&fd, signal).map_err(|source| match source.raw_os_error() {
        Some(libc::EPERM) => SignalError::NotPermitted { pid },
        _ => SignalError::Send { pid, source },
    })?;
    Ok(())
}

/// The name of signal number `n` without `SIG` (`-` for none), for the log.
pub(crate) fn signal_name(n: Option<i32>) -> &'static str {
    n.and_then(crate::config::Signal::from_number).map_or("-", crate::config::Signal::name)
}

/// Every kill (and every recycle) the guard made since the agent started: the recent ones in full, counts by
/// process name.
#[derive(Debug, Default)]
pub struct KillBook {
    inner: Mutex<Book>,
}

#[derive(Debug, Default)]
struct Book {
    recent: VecDeque<KillRecord>,
    /// Kills sent, by process name (`monitor_guard_kills_total{process}`).
    by_name: BTreeMap<String, u64>,
    /// Kill orders decided in shadow mode, and kills that could not be sent.
    not_enforced: u64,
    failed: u64,
    /// Recycles, apart from kills: the recent ones and those sent by process name
    /// (`monitor_guard_recycles_total{process}`).
    recycles: VecDeque<RecycleRecord>,
    recycled_by_name: BTreeMap<String, u64>,
}

/// The kill counts as `/metrics` shows them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KillCounts {
    pub by_name: BTreeMap<String, u64>,
    pub not_enforced: u64,
    pub failed: u64,
    /// Recycles sent, by process name.
    pub recycled_by_name: BTreeMap<String, u64>,
}

impl KillBook {
    /// Notes one kill, sent or not.
    pub fn record(&self, rec: KillRecord) {
        let mut b = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if rec.done() {
            *b.by_name.entry(rec.name.clone()).or_default() += 1;
        } else if !rec.enforced {
            b.not_enforced += 1;
        } else {
            b.failed += 1;
        }
        if b.recent.len() == RECENT {
            b.recent.pop_front();
        }
        b.recent.push_back(rec);
    }

    /// Notes one recycle, sent, decided only or impossible.
    pub fn record_recycle(&self, rec: RecycleRecord) {
        let mut b = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if rec.done() {
            *b.recycled_by_name.entry(rec.name.clone()).or_default() += 1;
        }
        if b.recycles.len() == RECENT {
            b.recycles.pop_front();
        }
        b.recycles.push_back(rec);
    }

    /// The recycle the guard sent to `pid`, if it is among the recent ones (the launcher asks when a process exits).
    pub fn recycled(&self, pid: u32) -> Option<RecycleRecord> {
        let b = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        b.recycles.iter().rev().find(|r| r.pid == pid && r.done()).cloned()
    }

    /// The recent recycles, oldest first.
    pub(crate) fn recent_recycles(&self) -> Vec<RecycleRecord> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).recycles.iter().cloned().collect()
    }

    /// How many kills of a process named `name` the guard sent within [`AGAIN_MS`] before `unix_ms`: a name killed
    /// again and again is a restart loop of the guard's making (a launcher or an allocator that respawns it).
    pub fn again(&self, name: &str, unix_ms: u64) -> u32 {
        let b = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let since = unix_ms.saturating_sub(AGAIN_MS);
        b.recent.iter().filter(|r| r.done() && r.name == name && r.unix_ms >= since).count() as u32
    }

    /// A kill about to be sent did not go out: the record says why, and it counts as failed, not done.
    pub fn failed(&self, pid: u32, start_ticks: u64, error: String) {
        let mut b = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(i) = b.recent.iter().rposition(|r| r.pid == pid && r.start_ticks == start_ticks && r.done()) else {
            return;
        };
        let name = b.recent[i].name.clone();
        b.recent[i].error = Some(error);
        if let Some(n) = b.by_name.get_mut(&name) {
            *n = n.saturating_sub(1);
        }
        b.failed += 1;
    }

    /// The kill of `pid` went out at `mono_ns` (`CLOCK_MONOTONIC`).
    pub fn sent(&self, pid: u32, start_ticks: u64, mono_ns: u64) {
        let mut b = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(r) = b.recent.iter_mut().rev().find(|r| r.pid == pid && r.start_ticks == start_ticks) {
            r.sent_mono_ns = Some(mono_ns);
        }
    }

    /// The kill the guard sent to `pid`, if it is among the recent ones (the launcher asks when a process exits, the
    /// front door when an upstream connection breaks).
    pub fn killed(&self, pid: u32) -> Option<KillRecord> {
        let b = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        b.recent.iter().rev().find(|r| r.pid == pid && r.done()).cloned()
    }

    /// The counts, for `/metrics`.
    pub fn counts(&self) -> KillCounts {
        let b = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        KillCounts {
            by_name: b.by_name.clone(),
            not_enforced: b.not_enforced,
            failed: b.failed,
            recycled_by_name: b.recycled_by_name.clone(),
        }
    }

    /// The recent kills, oldest first.
    pub(crate) fn recent(&self) -> Vec<KillRecord> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).recent.iter().cloned().collect()
    }
}

/// One process `monitor run` launched, as the guard sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LaunchedProc {
    pub pid: u32,
    pub name: String,
    pub role: ProcessRole,
    /// `[[process]] protect = true`.
    pub protect: bool,
}

/// Under `monitor run`: the requests the front door has in flight on a process, by its pid.
pub(crate) type InFlightOf = std::sync::Arc<dyn Fn(u32) -> Vec<crate::decision::snapshot::InFlight> + Send + Sync>;

/// The launched processes, read by the sampler when the group nears its lines (under `monitor run`; the agent
/// infers roles from the process tree instead).
pub(crate) type Roster = std::sync::Arc<dyn Fn() -> Vec<LaunchedProc> + Send + Sync>;

/// What the sampler knows of each process beyond its sample, near the lines: its role, and under `monitor run` its
/// configured name (kills are counted by it, as every other per-process series).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Known {
    /// By the sample's order of processes.
    pub roles: Vec<ProcessRole>,
    pub names: Vec<Option<String>>,
}

impl Known {
    /// The role and the name to record for `pid` (the sample's name when none is configured).
    pub fn of(&self, snap: &Snapshot, pid: u32) -> (ProcessRole, Option<String>) {
        match snap.processes.iter().position(|p| p.pid == pid) {
            Some(i) => {
                (self.roles.get(i).copied().unwrap_or(ProcessRole::Process), self.names.get(i).cloned().flatten())
            }
            None => (ProcessRole::Process, None),
        }
    }
}

/// Each process's role (and configured name), and the pids the last resort spares: under `monitor run` the launched
/// masters and `[[process]] protect`; else the masters inferred from the process tree.
pub(crate) fn known_and_protected(snap: &Snapshot, roster: Option<&Roster>) -> (Known, Vec<u32>) {
    match roster {
        Some(f) => {
            let launched = f();
            let mut known = Known::default();
            let mut protected = Vec::new();
            for p in snap.processes.iter() {
                let l = launched.iter().find(|l| l.pid == p.pid);
                known.roles.push(l.map_or(ProcessRole::Process, |l| l.role));
                known.names.push(l.map(|l| l.name.clone()));
                if l.is_some_and(|l| l.protect || l.role == ProcessRole::Master) {
                    protected.push(p.pid);
                }
            }
            (known, protected)
        }
        None => {
            let roles = crate::decision::snapshot::infer_roles(&snap.processes);
            let protected = snap
                .processes
                .iter()
                .zip(&roles)
                .filter(|(_, r)| **r == ProcessRole::Master)
                .map(|(p, _)| p.pid)
                .collect();
            (Known { names: vec![None; roles.len()], roles }, protected)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_pid_is_not_signalled() {
        // This process, with a start time that is not its own: refused before any signal.
        let me = ProcId { pid: std::process::id(), start_ticks: 1 };
        let e = signal(me, libc::SIGCONT).expect_err("a different start time");
        assert!(matches!(e, SignalError::Reused { .. }), "{e}");
        let real = crate::sources::procs::start_ticks(me.pid).expect("own start time");
        signal(ProcId { start_ticks: real, ..me }, 0).expect("signal 0 to itself");
    }
}
