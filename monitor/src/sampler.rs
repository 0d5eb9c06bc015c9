//! The sampler: reads the group (cgroup files, /proc, eBPF maps) every interval, runs the policy, and
//! publishes the latest Snapshot + Decision on a `tokio::sync::watch` channel. It runs on its own thread so a
//! sample never waits on the async runtime and its cost stays measurable.

use crate::cgroup::{CgroupError, Group, GroupReader};
use crate::policy::{decide, Decision, PolicyState, Thresholds};
use crate::probes::Probes;
use crate::procs::ProcTable;
use crate::snapshot::{GroupSample, LimitSource, ProcSample, Snapshot};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// Descendant cgroups are re-listed this often (their processes belong to the group).
const RESCAN_EVERY: Duration = Duration::from_secs(1);

/// Whether request counting runs, and why not.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ProbeStatus {
    pub enabled: bool,
    pub reason: Option<String>,
    /// The kernel hooks counting while enabled (`sock`, `raw_sys_exit` or `tracepoints`, see
    /// [`crate::probes::Hooks`]): anything but `sock` slows every syscall on the host.
    #[serde(default)]
    pub hooks: Option<String>,
}

/// What every consumer reads: the latest sample and the decision taken on it.
#[derive(Debug, Clone, Serialize)]
pub struct Published {
    pub snapshot: Snapshot,
    pub decision: Decision,
    pub probes: ProbeStatus,
    /// Set when the latest sample failed (the group vanished, a file became unreadable); the snapshot is the last
    /// good one.
    pub error: Option<String>,
}

/// Reads one sample of the group.
pub struct Sampler {
    reader: GroupReader,
    procs: ProcTable,
    probes: Option<Probes>,
    probe_status: ProbeStatus,
    synced_pids: Vec<u32>,
    /// This process (never traced; never the victim).
    agent_pid: u32,
    limit_override: Option<u64>,
    host_total: u64,
    start: Instant,
    seq: u64,
    pids: Vec<u32>,
    samples: Vec<ProcSample>,
    last_rescan: Instant,
    /// Requests to trace a pid at once ([`Tracer`]), served between samples.
    early: Option<mpsc::Receiver<TraceRequest>>,
}

/// A pid to trace at once, and who to tell when it is.
type TraceRequest = (u32, tokio::sync::oneshot::Sender<()>);

/// Asks the sampler thread to trace a process at once, ahead of its next sample (see [`Probes::trace_now`]):
/// `monitor run`'s launcher uses it for each process it starts, before its first health check, so that the kernel
/// counts everything the process serves. Does nothing without probes.
#[derive(Clone, Debug)]
pub struct Tracer(Option<mpsc::Sender<TraceRequest>>);

impl Tracer {
    /// A tracer that does nothing (probes off, or no sampler).
    pub fn none() -> Tracer {
        Tracer(None)
    }

    /// Traces `pid` now; returns once the sampler thread has done it, or after a second at most.
    pub async fn trace(&self, pid: u32) {
        let Some(tx) = &self.0 else { return };
        let (ack, done) = tokio::sync::oneshot::channel();
        if tx.send((pid, ack)).is_err() {
            return;
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), done).await;
    }
}

/// The host's MemTotal in bytes (0 if /proc/meminfo cannot be read).
pub fn host_mem_total() -> u64 {
    use procfs::FromBufRead;
    std::fs::read("/proc/meminfo")
        .ok()
        .and_then(|b| procfs::Meminfo::from_buf_read(b.as_slice()).ok())
        .map(|m| m.mem_total)
        .unwrap_or(0)
}

/// Loads the eBPF probes if the config wants them, on the hooks it names (`auto`: the preferred set and its
/// fallbacks), or says why not in one line (the verifier's log can run to hundreds of lines: the status shows the
/// first, the debug log all). Logs the reason once.
pub fn load_probes(cfg: &crate::config::ProbesConfig) -> Result<Probes, String> {
    let probes = if cfg.enabled {
        let chosen = cfg.chosen_hooks();
        match chosen {
            Some(h) => Probes::load_with(h),
            None => Probes::load(),
        }
        .map_err(|e| {
            let full = e.to_string();
            tracing::debug!("eBPF load failed: {full}");
            let first = full.lines().next().unwrap_or_default();
            match chosen {
                Some(h) => format!("[probes] hooks = {:?}: {first}", h.name()),
                None => first.to_string(),
            }
        })
    } else {
        Err("disabled in the config ([probes] enabled = false)".to_string())
    };
    if let Err(reason) = &probes {
        tracing::warn!("request counting is off: {reason}");
    }
    probes
}

impl Sampler {
    /// Opens the group. `probes` is the loaded eBPF side, or the reason it is not running.
    pub fn new(
        group: Group,
        limit_override: Option<u64>,
        probes: Result<Probes, String>,
    ) -> Result<Sampler, CgroupError> {
        let reader = GroupReader::open(group)?;
        let (probes, probe_status) = match probes {
            Ok(p) => {
                let hooks = Some(p.hooks().name().to_string());
                (Some(p), ProbeStatus { enabled: true, reason: None, hooks })
            }
            Err(reason) => (None, ProbeStatus { enabled: false, reason: Some(reason), hooks: None }),
        };
        Ok(Sampler {
            reader,
            procs: ProcTable::new(),
            probes,
            probe_status,
            synced_pids: Vec::new(),
            agent_pid: std::process::id(),
            limit_override,
            host_total: host_mem_total(),
            start: Instant::now(),
            seq: 0,
            pids: Vec::new(),
            samples: Vec::new(),
            last_rescan: Instant::now(),
            early: None,
        })
    }

    pub fn group(&self) -> &Group {
        self.reader.group()
    }

    /// A [`Tracer`] served by this sampler's thread (a no-op one when the probes are off).
    pub fn tracer(&mut self) -> Tracer {
        if self.probes.is_none() {
            return Tracer::none();
        }
        let (tx, rx) = mpsc::channel();
        self.early = Some(rx);
        Tracer(Some(tx))
    }

    /// Traces `pid` at once (a [`Tracer`] request).
    fn trace_now(&mut self, pid: u32) {
        let Some(probes) = self.probes.as_mut() else { return };
        if let Err(e) = probes.trace_now(pid) {
            tracing::warn!(pid, "tracing a new process at once: {e} (it counts from the next sample)");
        }
    }

    /// Sleeps until `until`, serving [`Tracer`] requests meanwhile.
    fn wait_until(&mut self, until: Instant) {
        loop {
            let now = Instant::now();
            if now >= until {
                return;
            }
            let Some(rx) = &self.early else {
                std::thread::sleep(until - now);
                return;
            };
            match rx.recv_timeout(until - now) {
                Ok((pid, ack)) => {
                    self.trace_now(pid);
                    let _ = ack.send(());
                }
                Err(mpsc::RecvTimeoutError::Timeout) => return,
                Err(mpsc::RecvTimeoutError::Disconnected) => self.early = None,
            }
        }
    }

    pub fn probe_status(&self) -> &ProbeStatus {
        &self.probe_status
    }

    /// One sample of the group.
    pub fn sample(&mut self) -> Result<Snapshot, CgroupError> {
        if self.last_rescan.elapsed() >= RESCAN_EVERY {
            self.reader.rescan()?;
            self.last_rescan = Instant::now();
        }
        let mem = self.reader.memory()?;
        self.reader.pids(&mut self.pids)?;
        self.procs.sample(&self.pids, &mut self.samples);
        self.add_traffic();
        let (limit_bytes, limit_source) = match (self.limit_override, mem.limit_bytes) {
            (Some(l), _) => (l, LimitSource::Config),
            (None, Some(l)) => (l, LimitSource::Cgroup),
            (None, None) => (self.host_total, LimitSource::Host),
        };
        self.seq += 1;
        let group = self.reader.group();
        Ok(Snapshot {
            seq: self.seq,
            unix_ms: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0),
            mono_ms: self.start.elapsed().as_millis() as u64,
            group: GroupSample {
                cgroup: group.dir.clone(),
                version: group.version,
                usage_bytes: mem.usage_bytes,
                limit_bytes,
                limit_source,
            },
            processes: self.samples.clone(),
            agent_pid: self.agent_pid,
        })
    }

    fn add_traffic(&mut self) {
        let Some(probes) = self.probes.as_mut() else { return };
        let result = (|| {
            // The agent itself is never traced, even in its own group (`cgroup = "auto"`).
            let me = self.agent_pid;
            let changed = !self.synced_pids.iter().copied().eq(self.pids.iter().copied().filter(|&p| p != me));
            if changed || probes.has_pinned() {
                self.synced_pids.clear();
                self.synced_pids.extend(self.pids.iter().copied().filter(|&p| p != me));
                probes.sync_pids(&self.synced_pids)?;
            }
            probes.read()
        })();
        match result {
            Ok(mut traffic) => {
                for p in &mut self.samples {
                    if let Some(t) = traffic.remove(&p.pid) {
                        p.traffic = t;
                    }
                }
            }
            Err(e) => {
                tracing::warn!("eBPF probes stopped: {e}");
                self.probe_status = ProbeStatus { enabled: false, reason: Some(format!("stopped: {e}")), hooks: None };
                self.probes = None;
            }
        }
    }
}

/// Runs the sampler every `interval` until `stop` is set, publishing on `tx`. The first sample must already be
/// published (see [`first`]), so consumers always have a value.
pub fn spawn(
    mut sampler: Sampler,
    thresholds: Thresholds,
    interval: Duration,
    mut state: PolicyState,
    tx: watch::Sender<Arc<Published>>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("sampler".into()).spawn(move || {
        let mut next = Instant::now() + interval;
        let mut failing = false;
        while !stop.load(Ordering::Relaxed) {
            sampler.wait_until(next);
            next += interval;
            if next < Instant::now() {
                next = Instant::now() + interval; // fell behind (suspend, overload): do not burst
            }
            match sampler.sample() {
                Ok(snap) => {
                    if failing {
                        tracing::info!(cgroup = %sampler.group().dir.display(), "group readable again");
                        failing = false;
                    }
                    let (s, decision) = decide(&state, &snap, &thresholds);
                    state = s;
                    log_decision(&decision, &snap);
                    let probes = sampler.probe_status().clone();
                    tx.send_replace(Arc::new(Published { snapshot: snap, decision, probes, error: None }));
                }
                Err(e) => {
                    if !failing {
                        tracing::error!("sample failed: {e}");
                        failing = true;
                    }
                    let msg = e.to_string();
                    tx.send_modify(|p| {
                        let mut np = (**p).clone();
                        np.error = Some(msg);
                        *p = Arc::new(np);
                    });
                }
            }
        }
    })
}

/// Takes the first sample synchronously (so start-up fails fast on an unreadable group) and decides on it.
pub fn first(sampler: &mut Sampler, thresholds: &Thresholds) -> Result<(PolicyState, Published), CgroupError> {
    let snap = sampler.sample()?;
    let (state, decision) = decide(&PolicyState::default(), &snap, thresholds);
    log_decision(&decision, &snap);
    let probes = sampler.probe_status().clone();
    Ok((state, Published { snapshot: snap, decision, probes, error: None }))
}

/// A sampler opened on the group, with its first sample taken and decided on.
pub struct Started {
    pub sampler: Sampler,
    pub thresholds: Thresholds,
    pub state: PolicyState,
    pub first: Published,
}

/// Opens the group with the config's probes, limit and thresholds, takes the first sample (start-up fails fast
/// on an unreadable group) and logs what is watched. Shared by `monitor agent` and `monitor run`.
pub fn start(group: Group, cfg: &crate::config::Config) -> Result<Started, CgroupError> {
    let probes = load_probes(&cfg.probes);
    let mut sampler = Sampler::new(group, cfg.policy.limit_bytes, probes)?;
    let thresholds = cfg.policy.thresholds();
    let (state, first) = first(&mut sampler, &thresholds)?;
    let g = &first.snapshot.group;
    tracing::info!(
        cgroup = %g.cgroup.display(),
        version = ?g.version,
        limit_bytes = g.limit_bytes,
        limit_source = ?g.limit_source,
        processes = first.snapshot.processes.len(),
        "watching group"
    );
    Ok(Started { sampler, thresholds, state, first })
}

/// Logs a decision once, when it changes.
fn log_decision(d: &Decision, snap: &Snapshot) {
    if !d.changed {
        return;
    }
    let victim = d.victim.and_then(|v| snap.processes.iter().find(|p| p.pid == v.pid));
    tracing::warn!(
        state = d.state.as_str(),
        ratio = format!("{:.3}", d.ratio),
        usage_bytes = snap.group.usage_bytes,
        limit_bytes = snap.group.limit_bytes,
        victim_pid = victim.map(|v| v.pid),
        victim_name = victim.map(|v| v.name.as_str()),
        victim_rss_bytes = victim.map(|v| v.rss_bytes),
        shadow = d.shadow,
        "decision changed"
    );
}
