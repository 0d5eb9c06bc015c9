//! The launcher of `monitor run`: starts the master, waits for its health path (asked only once the port is held by
//! the master or its descendants: an answer from another program never makes a process ready), then starts the
//! workers, made ready the same way; keeps
//! checking each ready process's health path every `health_interval_ms` (one that fails `health_failures` checks in
//! a row is `unhealthy`, out of the proxy's pool, until a check passes); restarts a process that exits after 1, 2,
//! 4 … 60 s (back to 1 s once it has been healthy for `backoff_reset_s`; one the memory guard killed is `killed`,
//! not a crash, until it is started again); on stop, SIGTERMs every child and SIGKILLs
//! those still running after the grace. Children die with the launcher.

mod member;
mod ready;
mod spawn;

pub use member::Member;

use crate::feed::Phase;

use crate::base::reaper::Kid;
use crate::config::ProcessConfig;
use crate::config::Role;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The longest wait between restarts.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How often a starting process's health path is asked.
const PROBE_EVERY: Duration = Duration::from_millis(50);
/// The longest a periodic health check waits for its answer.
const CHECK_TIMEOUT: Duration = Duration::from_secs(1);

/// Why the group could not be started.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("process {name}: cannot start {program:?}: {source}")]
    Spawn { name: String, program: String, source: std::io::Error },
    #[error("process {name} (master) exited with {status} before its health path {health} answered")]
    MasterExited { name: String, health: String, status: std::process::ExitStatus },
    #[error("process {name} (master): http://127.0.0.1:{port}{health} did not answer 200 within {secs} s")]
    MasterNotHealthy { name: String, port: u16, health: String, secs: u64 },
    /// The master's port is held by another program (the message names it).
    #[error("{0}")]
    MasterPortHeld(String),
    #[error("the config has no master process")]
    NoMaster,
    #[error("process {name}: {source}")]
    Credentials { name: String, source: crate::base::accounts::AccountError },
    #[error("stopped by a signal during start-up")]
    Interrupted,
}

/// Launcher settings outside `[[process]]`.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// The group's cgroup directory the children join (None: the launcher's own).
    pub cgroup: Option<PathBuf>,
    pub backoff_reset: Duration,
    pub stop_grace: Duration,
    /// Traces each process the moment it is started (before its first health check), so that the kernel counts
    /// everything it serves; `Tracer::none()` without probes.
    pub tracer: crate::sources::probes::Tracer,
    /// The guard's kills: a process that exits by the guard's hand is `killed`, not a crash.
    pub kills: std::sync::Arc<crate::guard::KillBook>,
    /// Environment every process gets besides its own `env` (the actions' secret, `MONITOR_ACTION_SECRET`),
    /// set last.
    pub env: Vec<(String, String)>,
}

/// The running group.
pub(crate) struct Launcher {
    members: Arc<[Member]>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn spawn_err(p: &ProcessConfig, source: std::io::Error) -> LaunchError {
    LaunchError::Spawn { name: p.name.clone(), program: p.command[0].clone(), source }
}

impl Launcher {
    /// The group's processes, in config order, none started yet: made before [`start`](Self::start), so that
    /// everything following the group (history, alerts, actions) knows each process from the moment it starts.
    pub(crate) fn members_of(procs: &[ProcessConfig]) -> Arc<[Member]> {
        procs.iter().map(|p| Member::new(&p.name, p.role, p.port, &p.health)).collect::<Vec<_>>().into()
    }

    /// Starts the group (`members` from [`members_of`](Self::members_of) on the same `procs`): the master first
    /// (until healthy, or a clear error), then the workers. `cancel` resolving aborts the start-up (a signal):
    /// every child started so far is killed.
    pub async fn start(
        procs: &[ProcessConfig],
        members: Arc<[Member]>,
        opts: Options,
        cancel: impl std::future::Future<Output = ()>,
    ) -> Result<Launcher, LaunchError> {
        let master = procs.iter().position(|p| p.role == Role::Master).ok_or(LaunchError::NoMaster)?;
        // Every process's user and group, before any starts: an unknown user or one monitor may not take is a
        // start-up error, not a worker backing off.
        for p in procs {
            spawn::credentials(p).map_err(|source| LaunchError::Credentials { name: p.name.clone(), source })?;
        }
        let (stop, _) = watch::channel(false);
        let mut launcher = Launcher { members, stop, tasks: Vec::new() };
        let opts = Arc::new(opts);
        let mp = &procs[master];
        let mut child = spawn::spawn(mp, &opts).map_err(|e| spawn_err(mp, e))?;
        let pid = child.id().unwrap_or(0);
        // Its pid is the member's before the sample the tracer asks for: that sample names it as configured.
        launcher.members[master].set(Phase::Starting, pid, None);
        opts.tracer.trace(pid).await;
        tracing::info!(name = %mp.name, pid, "started the master; waiting for its health path");
        let deadline = Instant::now() + Duration::from_secs(mp.start_timeout_s);
        tokio::pin!(cancel);
        let mut said = ready::Said::default();
        loop {
            match ready::check(&mp.name, pid, mp.port, &mp.health, Duration::from_secs(1)).await {
                ready::Check::Ready => break,
                ready::Check::NotYet => said.clear(),
                ready::Check::Foreign(msg) => said.error(&msg),
            }
            let exited = child.try_wait();
            if let (Some(msg), Ok(Some(_)) | Err(_)) = (said.last(), &exited) {
                return Err(LaunchError::MasterPortHeld(msg.to_string()));
            }
            if let Ok(Some(status)) = exited {
                return Err(LaunchError::MasterExited { name: mp.name.clone(), health: mp.health.clone(), status });
            }
            if Instant::now() >= deadline {
                if let Some(msg) = said.last() {
                    return Err(LaunchError::MasterPortHeld(msg.to_string()));
                }
                return Err(LaunchError::MasterNotHealthy {
                    name: mp.name.clone(),
                    port: mp.port,
                    health: mp.health.clone(),
                    secs: mp.start_timeout_s,
                });
            }
            tokio::select! {
                _ = tokio::time::sleep(PROBE_EVERY) => {}
                _ = &mut cancel => return Err(LaunchError::Interrupted),
            }
        }
        launcher.members[master].set(Phase::Ready, pid, None);
        tracing::info!(name = %mp.name, pid, "master ready; starting the workers");
        launcher.supervise(master, mp.clone(), child, true, opts.clone());
        for (i, p) in procs.iter().enumerate().filter(|(i, _)| *i != master) {
            let child = spawn::spawn(p, &opts).map_err(|e| spawn_err(p, e))?;
            launcher.members[i].set(Phase::Starting, child.id().unwrap_or(0), None);
            opts.tracer.trace(child.id().unwrap_or(0)).await;
            tracing::info!(name = %p.name, pid = child.id().unwrap_or(0), "started");
            launcher.supervise(i, p.clone(), child, false, opts.clone());
        }
        Ok(launcher)
    }

    fn supervise(&mut self, i: usize, p: ProcessConfig, child: Kid, ready: bool, opts: Arc<Options>) {
        let members = self.members.clone();
        let stop = self.stop.subscribe();
        self.tasks.push(tokio::spawn(async move { supervise(&members[i], p, child, ready, stop, &opts).await }));
    }

    /// SIGTERMs every child, SIGKILLs those still running after the grace, and waits for them.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        for t in std::mem::take(&mut self.tasks) {
            let _ = t.await;
        }
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        // Dropped without stop() (an error path): the supervisors kill their children (kill_on_drop) as they end.
        let _ = self.stop.send(true);
    }
}

/// Runs, watches and restarts one process until the launcher stops: the health loop while it runs, the restart
/// loop (with backoff) after it exits.
async fn supervise(
    m: &Member,
    p: ProcessConfig,
    mut child: Kid,
    mut ready: bool,
    mut stop: watch::Receiver<bool>,
    opts: &Options,
) {
    let mut backoff = Duration::from_secs(1);
    let mut said = ready::Said::default();
    loop {
        let pid = child.id().unwrap_or(0);
        let Some((status, healthy_since)) = health_loop(m, &p, &mut child, ready, &mut stop, &mut said).await else {
            terminate(m, &p.name, &mut child, opts.stop_grace).await;
            return;
        };
        if healthy_since.is_some_and(|t| t.elapsed() >= opts.backoff_reset) {
            backoff = Duration::from_secs(1);
        }
        let next = SystemTime::now() + backoff;
        let status = status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
        match (opts.kills.killed(pid), opts.kills.recycled(pid)) {
            (Some(k), _) => {
                m.set(Phase::Killed, 0, Some(unix_ms(next)));
                tracing::warn!(name = %p.name, pid, backoff_s = backoff.as_secs(), "killed by the memory guard ({}); restarting", k.reason);
            }
            (None, Some(r)) => {
                m.set(Phase::BackingOff, 0, Some(unix_ms(next)));
                tracing::warn!(name = %p.name, pid, %status, backoff_s = backoff.as_secs(), "recycled by the memory guard ({}); restarting", r.reason);
            }
            (None, None) => {
                m.set(Phase::BackingOff, 0, Some(unix_ms(next)));
                tracing::warn!(name = %p.name, pid, %status, backoff_s = backoff.as_secs(), "process exited; restarting");
            }
        }
        match restart_loop(m, &p, &mut backoff, &mut stop, opts).await {
            Some(c) => {
                child = c;
                ready = false;
            }
            None => return,
        }
    }
}

/// Checks a running process's health until it exits (its status, and since when it was healthy) or the launcher
/// stops (None). While it starts it is asked often until it first answers; then every `health_interval_ms`, if
/// checks are on.
async fn health_loop(
    m: &Member,
    p: &ProcessConfig,
    child: &mut Kid,
    ready: bool,
    stop: &mut watch::Receiver<bool>,
    said: &mut ready::Said,
) -> Option<(std::io::Result<std::process::ExitStatus>, Option<Instant>)> {
    let pid = child.id().unwrap_or(0);
    let check_every = (p.health_interval_ms > 0).then(|| Duration::from_millis(p.health_interval_ms));
    let mut health = Health { healthy_since: ready.then(Instant::now), failures: 0 };
    loop {
        if *stop.borrow() {
            return None;
        }
        let (every, timeout) = match (health.healthy_since, check_every) {
            (None, _) => (Some(PROBE_EVERY), Duration::from_secs(1)),
            (Some(_), Some(every)) => (Some(every), every.min(CHECK_TIMEOUT)),
            (Some(_), None) => (None, CHECK_TIMEOUT),
        };
        tokio::select! {
            st = child.wait() => return Some((st, health.healthy_since)),
            _ = stop.changed() => {}
            check = async {
                tokio::time::sleep(every.unwrap_or(PROBE_EVERY)).await;
                ready::check(&p.name, pid, p.port, &p.health, timeout).await
            }, if every.is_some() => {
                // Only an answer from the process's own port counts: a port held by another program is said
                // (once while it lasts) and fails the check.
                match &check {
                    ready::Check::Foreign(msg) => said.error(msg),
                    _ => said.clear(),
                }
                health.record(m, p, pid, &check);
            }
        }
    }
}

/// A running process's health as its checks found it.
struct Health {
    healthy_since: Option<Instant>,
    /// Consecutive failed checks since the process was last seen healthy.
    failures: u32,
}

impl Health {
    /// One check's answer: ready at its first success; out of the pool after `health_failures` failures in a row
    /// (at once when its port is another program's), back in at the next success.
    fn record(&mut self, m: &Member, p: &ProcessConfig, pid: u32, check: &ready::Check) {
        let ok = *check == ready::Check::Ready;
        if self.healthy_since.is_none() {
            if ok {
                tracing::info!(name = %p.name, pid, "ready");
                m.set(Phase::Ready, pid, None);
                self.healthy_since = Some(Instant::now());
            }
        } else if ok {
            if self.failures >= p.health_failures {
                tracing::info!(name = %p.name, pid, "healthy again: back in the pool");
                m.set(Phase::Ready, pid, None);
            }
            self.failures = 0;
        } else if matches!(check, ready::Check::Foreign(_)) && self.failures < p.health_failures {
            // Its port is another program's now: out of the pool at once, not after the failures.
            self.failures = p.health_failures;
            tracing::warn!(name = %p.name, pid, "its port is held by another program: out of the pool");
            m.set(Phase::Unhealthy, pid, None);
        } else {
            self.failures = self.failures.saturating_add(1);
            if self.failures == p.health_failures {
                tracing::warn!(name = %p.name, pid, failures = self.failures, health = %p.health, "health checks failing: out of the pool");
                m.set(Phase::Unhealthy, pid, None);
            }
        }
    }
}

/// Waits out the backoff and starts the process again, doubling the backoff (up to [`MAX_BACKOFF`]) after each
/// try; the new child, or None when the launcher stops first.
async fn restart_loop(
    m: &Member,
    p: &ProcessConfig,
    backoff: &mut Duration,
    stop: &mut watch::Receiver<bool>,
    opts: &Options,
) -> Option<Kid> {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(*backoff) => {}
            _ = stop.wait_for(|s| *s) => {
                m.set(Phase::Stopped, 0, None);
                return None;
            }
        }
        *backoff = (*backoff * 2).min(MAX_BACKOFF);
        m.count_restart();
        match spawn::spawn(p, opts) {
            Ok(child) => {
                m.set(Phase::Starting, child.id().unwrap_or(0), None);
                opts.tracer.trace(child.id().unwrap_or(0)).await;
                return Some(child);
            }
            Err(e) => {
                let next = SystemTime::now() + *backoff;
                m.set(Phase::BackingOff, 0, Some(unix_ms(next)));
                tracing::error!(name = %p.name, "restart failed: {e}; next try in {} s", backoff.as_secs());
            }
        }
    }
}

/// SIGTERM, then SIGKILL after `grace`.
async fn terminate(m: &Member, name: &str, child: &mut Kid, grace: Duration) {
    let pid = child.id().unwrap_or(0);
    m.set(Phase::Stopped, pid, None);
    spawn::signal(pid, libc::SIGTERM);
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(_) => tracing::info!(name, pid, "stopped"),
        Err(_) => {
            tracing::warn!(name, pid, "still running {} s after SIGTERM: SIGKILL", grace.as_secs());
            let _ = child.kill().await;
        }
    }
    m.set(Phase::Stopped, 0, None);
}
