//! History: a consumer of the published samples that keeps a per-second ring of the last hour and per-minute rows
//! of the last week in memory, and writes each minute per process to SQLite (`[stats] path`, WAL, retention).
//! A database that cannot be opened or written is reported (log, home page) and the agent runs on without it.
//!
//! One call wires it for `monitor agent` and `monitor run` alike: [`spawn`] then [`HistoryHandle::router`]
//! (the home page, `/api/v1/dashboard` and `/metrics`), and [`HistoryHandle::close`] at shutdown.

pub mod query;
pub mod ring;
mod source;
pub mod store;

use crate::api::infer_roles;
use crate::config::StatsConfig;
use crate::launcher::LauncherInfo;
use crate::policy::Thresholds;
use crate::sampler::{Published, Samples};
use ring::{Aggregator, Input, Labels, Minute, ProcInput, Second};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use store::Store;
use tokio::sync::watch;

/// The per-second ring's length.
pub const SECONDS_KEPT: usize = 3600;
/// The in-memory minutes' length (the 7-day range).
pub const MINUTES_KEPT: usize = 7 * 1440;
/// How often old rows are deleted.
const RETAIN_EVERY: Duration = Duration::from_secs(3600);

/// What can go wrong with the stats database.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("opening the stats database {path}: {source}")]
    Open { path: PathBuf, source: rusqlite::Error },
    #[error("creating the folder {path} of the stats database: {source}")]
    Dir { path: PathBuf, source: std::io::Error },
    #[error("the stats database {path} is corrupt: {detail}")]
    Corrupt { path: PathBuf, detail: String },
    #[error("stats database: {0}")]
    Db(#[from] rusqlite::Error),
}

/// Launched processes' names, roles and restarts (under `monitor run`).
pub type LauncherFn = Arc<dyn Fn() -> Vec<LauncherInfo> + Send + Sync>;
/// The front door's count of shed requests so far.
pub type ShedFn = Arc<dyn Fn() -> u64 + Send + Sync>;

/// What the history reads besides the samples.
#[derive(Clone, Default)]
pub struct Inputs {
    pub launcher: Option<LauncherFn>,
    pub shed_total: Option<ShedFn>,
}

#[derive(Default)]
struct Inner {
    labels: Labels,
    seconds: VecDeque<Second>,
    minutes: VecDeque<Minute>,
    /// Restarts seen per label since the agent started.
    restarts: HashMap<u16, u64>,
    /// Why the history is not persisted, when it is not.
    note: Option<String>,
}

/// The shared history: the consumer writes it, the home page and `/metrics` read it.
pub struct History {
    inner: Mutex<Inner>,
    latest: watch::Receiver<Arc<Published>>,
    thresholds: Thresholds,
    inputs: Inputs,
}

fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Series names for a sample's processes: the launcher's name for a launched pid; otherwise `comm`, numbered
/// `comm#1`, `comm#2`… by start time when several share it. Roles from the launcher or the process tree.
pub fn names(p: &Published, launched: &[LauncherInfo]) -> Vec<(String, String)> {
    named(p, launched).into_iter().map(|(n, r, _)| (n, r)).collect()
}

/// [`names`] with a flag for the numbered ones (`comm#k`), whose number can move to another process: a new pid
/// under such a name is not taken for a restart.
fn named(p: &Published, launched: &[LauncherInfo]) -> Vec<(String, String, bool)> {
    let procs = &p.snapshot.processes;
    let roles = infer_roles(procs);
    let member = |pid: u32| launched.iter().find(|m| m.pid == Some(pid));
    let mut out: Vec<(String, String, bool)> = procs
        .iter()
        .zip(&roles)
        .map(|(x, role)| match member(x.pid) {
            Some(m) => (m.name.clone(), m.role.clone(), false),
            None => (x.name.clone(), role.to_string(), false),
        })
        .collect();
    let mut by_name: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, x) in procs.iter().enumerate() {
        if member(x.pid).is_none() {
            by_name.entry(x.name.as_str()).or_default().push(i);
        }
    }
    for (_, mut idx) in by_name.into_iter().filter(|(_, v)| v.len() > 1) {
        idx.sort_by_key(|&i| (procs[i].start_ticks, procs[i].pid));
        for (k, i) in idx.into_iter().enumerate() {
            out[i].0 = format!("{}#{}", procs[i].name, k + 1);
            out[i].2 = true;
        }
    }
    out
}

impl History {
    fn new(latest: watch::Receiver<Arc<Published>>, thresholds: Thresholds, inputs: Inputs) -> History {
        History { inner: Mutex::new(Inner::default()), latest, thresholds, inputs }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_note(&self, note: Option<String>) {
        self.lock().note = note;
    }

    /// Reduces one sample to the aggregator's input, interning its names.
    fn input(&self, p: &Published) -> Input {
        let launched = self.inputs.launcher.as_ref().map(|f| f()).unwrap_or_default();
        let names = named(p, &launched);
        let mut inner = self.lock();
        let procs = p
            .snapshot
            .processes
            .iter()
            .zip(names)
            .map(|(x, (name, role, numbered))| ProcInput {
                label: inner.labels.intern(&name, &role),
                numbered,
                pid: x.pid,
                start_ticks: x.start_ticks,
                rss: x.rss_bytes,
                requests_total: x.traffic.requests_total,
                err5xx_total: x.traffic.responses_by_class[4],
                inflight: x.traffic.inflight,
                p50_us: x.traffic.latency_p50_us,
                p99_us: x.traffic.latency_p99_us,
            })
            .collect();
        drop(inner);
        Input {
            unix_ms: p.snapshot.unix_ms,
            usage: p.snapshot.group.usage_bytes,
            limit: p.snapshot.group.limit_bytes,
            state: ring::state_code(p.decision.state),
            new_victim: p.decision.changed && p.decision.victim.is_some(),
            shed_total: self.inputs.shed_total.as_ref().map(|f| f()).unwrap_or(0),
            procs,
        }
    }

    /// Keeps a finished second and minute; returns the minute with the labels to write.
    fn keep(&self, sec: Option<Second>, min: Option<Minute>) -> Option<(Minute, Labels)> {
        let mut inner = self.lock();
        if let Some(s) = sec {
            for l in &s.restarted {
                *inner.restarts.entry(*l).or_default() += 1;
            }
            inner.seconds.push_back(s);
            while inner.seconds.len() > SECONDS_KEPT {
                inner.seconds.pop_front();
            }
        }
        let m = min?;
        inner.minutes.push_back(m.clone());
        while inner.minutes.len() > MINUTES_KEPT {
            inner.minutes.pop_front();
        }
        Some((m, inner.labels.clone()))
    }

    /// Restarts seen per series name since the agent started.
    pub fn restarts(&self) -> Vec<(String, u64)> {
        let inner = self.lock();
        inner.restarts.iter().map(|(&l, &n)| (inner.labels.get(l).0.to_string(), n)).collect()
    }

    /// The front door's shed count, when it has one.
    pub fn shed_total(&self) -> Option<u64> {
        self.inputs.shed_total.as_ref().map(|f| f())
    }

    /// The latest published sample.
    pub fn latest(&self) -> Arc<Published> {
        self.latest.borrow().clone()
    }

    pub fn thresholds(&self) -> &Thresholds {
        &self.thresholds
    }

    /// Launched processes (empty under `monitor agent`).
    pub fn launched(&self) -> Vec<LauncherInfo> {
        self.inputs.launcher.as_ref().map(|f| f()).unwrap_or_default()
    }

    /// Why the history is not persisted, if it is not.
    pub fn note(&self) -> Option<String> {
        self.lock().note.clone()
    }
}

/// The running history: its shared state and the tasks that feed and persist it.
pub struct HistoryHandle {
    pub history: Arc<History>,
    consumer: tokio::task::JoinHandle<()>,
    writer: Option<std::thread::JoinHandle<()>>,
}

/// Opens the database (if configured), loads the last week from it and starts the consumer. Call inside the
/// runtime. Never fails: a database problem is logged, shown on the home page, and the history stays in memory.
pub fn spawn(
    rx: watch::Receiver<Arc<Published>>,
    samples: Samples,
    cfg: &StatsConfig,
    thresholds: Thresholds,
    inputs: Inputs,
) -> HistoryHandle {
    let history = Arc::new(History::new(rx.clone(), thresholds, inputs));
    let mut store = None;
    if let Some(path) = &cfg.path {
        match open_and_load(path, cfg.retention_days, &history) {
            Ok(s) => store = Some(s),
            Err(e) => {
                tracing::error!("history is not persisted: {e}");
                history.set_note(Some(format!("history is not persisted: {e}")));
            }
        }
    }
    let (tx, writes) = mpsc::channel::<(Minute, Labels)>();
    let writer = store.map(|s| {
        let h = history.clone();
        let days = cfg.retention_days;
        std::thread::Builder::new().name("history-db".into()).spawn(move || write_loop(s, writes, h, days))
    });
    let writer = match writer {
        Some(Ok(t)) => Some(t),
        Some(Err(e)) => {
            tracing::error!("history is not persisted: cannot start its thread: {e}");
            None
        }
        None => None,
    };
    let h = history.clone();
    let consumer = tokio::spawn(async move { consume(samples, h, tx).await });
    HistoryHandle { history, consumer, writer }
}

fn open_and_load(path: &std::path::Path, days: u32, h: &History) -> Result<Store, HistoryError> {
    let mut s = Store::open(path)?;
    let now = now_s();
    let gone = s.retain(days, now)?;
    let mut inner = h.lock();
    let from = now.saturating_sub(MINUTES_KEPT as u64 * 60);
    let loaded = s.minutes(from, now + 60, &mut inner.labels)?;
    tracing::info!(path = %path.display(), minutes = loaded.len(), deleted = gone, "stats database open");
    inner.minutes = loaded.into();
    Ok(s)
}

async fn consume(mut samples: Samples, h: Arc<History>, tx: mpsc::Sender<(Minute, Labels)>) {
    let mut agg = Aggregator::default();
    let mut last_seq = None;
    while let Some(p) = samples.next().await {
        if last_seq != Some(p.snapshot.seq) && p.error.is_none() {
            last_seq = Some(p.snapshot.seq);
            let (sec, min) = agg.push(&h.input(&p));
            if let Some(row) = h.keep(sec, min) {
                let _ = tx.send(row);
            }
        }
    }
    let (sec, min) = agg.flush();
    if let Some(row) = h.keep(sec, min) {
        let _ = tx.send(row);
    }
}

fn write_loop(mut s: Store, rows: mpsc::Receiver<(Minute, Labels)>, h: Arc<History>, days: u32) {
    let mut last_retain = std::time::Instant::now();
    let mut failing = false;
    for (m, labels) in rows {
        match s.insert(&m, &labels) {
            Ok(()) if failing => {
                tracing::info!("stats database writable again");
                h.set_note(None);
                failing = false;
            }
            Ok(()) => {}
            Err(e) => {
                if !failing {
                    tracing::error!("history is not persisted: {e}");
                }
                h.set_note(Some(format!("history is not persisted since minute {}: {e}", m.t)));
                failing = true;
            }
        }
        if last_retain.elapsed() >= RETAIN_EVERY {
            last_retain = std::time::Instant::now();
            if let Err(e) = s.retain(days, now_s()) {
                tracing::warn!("deleting old history rows: {e}");
            }
        }
    }
}

impl HistoryHandle {
    /// The home page, `/api/v1/dashboard` and `/metrics`, to merge with the API's router.
    pub fn router(&self) -> axum::Router {
        let source: Arc<dyn web::Source> = self.history.clone();
        web::router(source)
            .merge(crate::metrics::router(self.history.clone()))
            .method_not_allowed_fallback(crate::api::method_not_allowed)
    }

    /// Waits (up to `timeout`) for the last minute to be written after the sampler stopped.
    pub async fn close(self, timeout: Duration) {
        let HistoryHandle { consumer, writer, .. } = self;
        let done = async move {
            let _ = consumer.await;
            if let Some(w) = writer {
                let _ = tokio::task::spawn_blocking(move || w.join()).await;
            }
        };
        if tokio::time::timeout(timeout, done).await.is_err() {
            tracing::warn!("the history's last minute was not written within {timeout:?}");
        }
    }
}
