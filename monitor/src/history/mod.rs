//! History: a consumer of the published samples that keeps a per-second ring of the last hour and per-minute rows
//! of the last week in memory, and writes each minute per process to SQLite (`[stats] path`, WAL, retention). The
//! guard's kills and recycles are kept in memory too, for the home page's markers, and written as they come.
//! Under `[cluster]` it also writes the membership's events (a member joined, suspect, dead, left) as they come.
//! A database that cannot be opened or written is reported once (log, home page, `monitor_history_persisted 0`)
//! and the agent runs on: the writer tries again every few seconds, keeping the unwritten minutes (a day at most).
//!
//! One call wires it for `monitor agent` and `monitor run` alike: [`spawn`] then [`HistoryHandle::router`]
//! (the home page, `/api/v1/dashboard` and `/metrics`), and [`HistoryHandle::close`] at shutdown.

pub mod events;
mod names;
pub mod query;
pub mod ring;
mod source;
pub mod store;
mod writer;

use names::named;
pub use names::{names, Slots};
use writer::{open_and_load, Writer};

use crate::config::live::Live;
use crate::decision::policy::Decisions;
use crate::feed::LauncherInfo;
use crate::feed::{Published, Samples};
use events::{ClusterEvent, ClusterView, KillEvent, RecycleEvent};
use ring::{Aggregator, Input, Labels, Minute, ProcInput, Second};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use store::Store;
use tokio::sync::watch;

/// The per-second ring's length.
pub(crate) const SECONDS_KEPT: usize = 3600;
/// The in-memory minutes' length (the 7-day range).
pub(crate) const MINUTES_KEPT: usize = 7 * 1440;
/// How often old rows are deleted.
const RETAIN_EVERY: Duration = Duration::from_secs(3600);
/// How often a database that cannot be opened or written is tried again.
const REOPEN_EVERY: Duration = Duration::from_secs(5);
/// Minutes kept while the database cannot be written (a day), written when it can be again.
const PENDING_KEPT: usize = 1440;
/// Cluster events kept while the database cannot be written, written when it can be again.
const PENDING_EVENTS_KEPT: usize = 1000;
/// Kills kept while the database cannot be written (the last resort kills at most once a second).
const PENDING_KILLS_KEPT: usize = 1000;
/// The guard's kills kept in memory for the home page (those of the last week loaded from the database too).
pub(crate) const KILLS_KEPT: usize = 1000;
/// Recycles kept while the database cannot be written, and in memory for the home page (the guard recycles one
/// process at a time, each after a wait of seconds).
const RECYCLES_KEPT: usize = 1000;

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

/// What the history reads besides the samples.
#[derive(Clone, Default)]
pub struct Inputs {
    /// Under `monitor run`: its launched processes and its counts.
    pub door: Option<crate::feed::Door>,
    /// The agent's reaction times, for `/metrics`.
    pub reactions: Option<Arc<crate::base::reaction::Reactions>>,
    /// The config's reloads, for `/metrics`.
    pub reloads: Option<Arc<crate::config::live::Reloads>>,
    /// In a cluster: the nodes, for the home page.
    pub peers: Option<PeersFn>,
    /// In a cluster: the membership, whose events are written to the stats database.
    pub cluster_events: Option<ClusterView>,
    /// The last resort's kills, for `/metrics`.
    pub kills: Option<Arc<crate::guard::KillBook>>,
}

/// What the database thread is handed.
enum Write {
    /// A finished minute, with the labels that name its processes.
    Minute(Minute, Labels),
    /// Cluster events not handed over before.
    Events(Vec<ClusterEvent>),
    /// A kill of the guard's last resort, as its sample carried it.
    Kill(KillEvent),
    /// A recycle of the guard, as its sample carried it.
    Recycle(RecycleEvent),
    /// The memory per request of the minute starting at the given Unix second.
    Routes(u64, store::RouteRows),
}

/// The cluster's nodes as the home page lists them.
pub(crate) type PeersFn = Arc<dyn Fn() -> Vec<web::view::Peer> + Send + Sync>;

#[derive(Default)]
struct Inner {
    labels: Labels,
    /// Shared with the renders, which take a copy of the pointers and let go of the lock before they read.
    seconds: VecDeque<Arc<Second>>,
    minutes: VecDeque<Arc<Minute>>,
    /// The guard's kills, oldest first, shared with the renders like the rings.
    kills: VecDeque<Arc<KillEvent>>,
    /// The guard's recycles, oldest first, shared likewise.
    recycles: VecDeque<Arc<RecycleEvent>>,
    /// Restarts seen per label since the agent started.
    restarts: HashMap<u16, u64>,
    /// Why the history is not persisted, when it is not.
    note: Option<String>,
    /// The decisions counted from every sample.
    decisions: Decisions,
    /// The numbers of processes sharing a command name, kept from sample to sample.
    slots: Slots,
    /// The last sample's series, reused while its processes are the same.
    series: Series,
    /// When (Unix seconds) the name table was last found full with no index to release: it is looked over again
    /// a minute later at the soonest, when the oldest minute has gone.
    full_since: Option<u64>,
}

impl Inner {
    /// Releases the names' indexes that nothing refers to any more (no kept second or minute, no process of the last
    /// sample or of `live`, nothing the aggregator holds open), when `live` brings more new names than the table
    /// has room for: so that the table stays within [`ring::LABELS_MAX`] and every name kept keeps its index.
    fn release_labels(&mut self, live: &[(String, String, bool)], agg: &mut Aggregator, now: u64) {
        let new = live.iter().filter(|(n, _, _)| self.labels.lookup(n).is_none()).count();
        if new <= self.labels.room() {
            return;
        }
        if self.full_since.is_some_and(|t| now < t + 60) {
            return;
        }
        let mut used = vec![false; ring::LABELS_MAX];
        let mut mark = |l: u16| {
            if let Some(u) = used.get_mut(l as usize) {
                *u = true;
            }
        };
        for m in &self.minutes {
            m.procs.iter().for_each(|p| mark(p.label));
        }
        for s in &self.seconds {
            s.procs.iter().for_each(|p| mark(p.label));
            s.restarted.iter().for_each(|&l| mark(l));
        }
        self.series.labels.iter().for_each(|&(l, _)| mark(l));
        live.iter().filter_map(|(n, _, _)| self.labels.lookup(n)).for_each(&mut mark);
        agg.mark_used(&mut used);
        let released = self.labels.release(&used);
        for l in &released {
            self.restarts.remove(l);
        }
        agg.forget(&released);
        self.full_since = released.is_empty().then_some(now);
    }
}

/// The series of the last sample's processes: reused while the processes, their names and parents, and the
/// launched ones are the same (most samples: far from the lines, every process's memory is read once a second).
#[derive(Default)]
struct Series {
    /// Each process's pid, start time, parent and name.
    procs: Vec<(u32, u64, u32, String)>,
    launched: Vec<crate::feed::LauncherInfo>,
    /// Each process's label and whether the name is a number among namesakes.
    labels: Vec<(u16, bool)>,
}

impl Series {
    fn holds(&self, procs: &[crate::decision::snapshot::ProcSample], launched: &[crate::feed::LauncherInfo]) -> bool {
        self.launched == launched
            && self.procs.len() == procs.len()
            && self.procs.iter().zip(procs).all(|((pid, start, ppid, name), x)| {
                (*pid, *start, *ppid) == (x.pid, x.start_ticks, x.ppid) && *name == x.name
            })
    }
}

/// The shared history: the consumer writes it, the home page and `/metrics` read it.
pub struct History {
    inner: Mutex<Inner>,
    latest: watch::Receiver<Arc<Published>>,
    inputs: Inputs,
}

fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl History {
    fn new(latest: watch::Receiver<Arc<Published>>, inputs: Inputs) -> History {
        History { inner: Mutex::new(Inner::default()), latest, inputs }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_note(&self, note: Option<String>) {
        self.lock().note = note;
    }

    /// Reduces one sample to the aggregator's input, interning its names (releasing the indexes of names nothing
    /// refers to any more when the table is full, which `agg` hears of).
    fn input(&self, p: &Published, agg: &mut Aggregator) -> Input {
        let launched = self.inputs.door.as_ref().map(|d| d.launched()).unwrap_or_default();
        let mut guard = self.lock();
        let inner = &mut *guard;
        let sampled = &p.snapshot.processes;
        if !inner.series.holds(sampled, &launched) {
            let names = named(p, &launched, &mut inner.slots);
            inner.release_labels(&names, agg, p.snapshot.unix_ms / 1000);
            inner.series.labels =
                names.into_iter().map(|(name, role, numbered)| (inner.labels.intern(&name, &role), numbered)).collect();
            inner.series.procs = sampled.iter().map(|x| (x.pid, x.start_ticks, x.ppid, x.name.clone())).collect();
            inner.series.launched = launched;
        }
        let procs = sampled
            .iter()
            .zip(&inner.series.labels)
            .map(|(x, &(label, numbered))| ProcInput {
                label,
                numbered,
                pid: x.pid,
                start_ticks: x.start_ticks,
                rss: x.rss_bytes,
                anon: x.anon_bytes,
                requests_total: x.traffic.requests_total,
                err5xx_total: x.traffic.responses_by_class[4],
                inflight: x.traffic.inflight,
                p50_us: x.traffic.latency_p50_us,
                p99_us: x.traffic.latency_p99_us,
            })
            .collect();
        drop(guard);
        Input {
            unix_ms: p.snapshot.unix_ms,
            usage: p.snapshot.group.usage_bytes,
            limit: p.snapshot.group.limit_bytes,
            state: ring::state_code(p.decision.state),
            new_victim: p.decision.changed && p.decision.victim.is_some(),
            shed_total: self.inputs.door.as_ref().map_or(0, |d| d.shed_total()),
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
            inner.seconds.push_back(Arc::new(s));
            while inner.seconds.len() > SECONDS_KEPT {
                inner.seconds.pop_front();
            }
        }
        let m = min?;
        inner.minutes.push_back(Arc::new(m.clone()));
        while inner.minutes.len() > MINUTES_KEPT {
            inner.minutes.pop_front();
        }
        Some((m, inner.labels.clone()))
    }

    /// Keeps a kill for the home page, the oldest dropped past [`KILLS_KEPT`].
    fn keep_kill(&self, k: KillEvent) {
        keep_newest(&mut self.lock().kills, k, KILLS_KEPT);
    }

    /// Keeps a recycle for the home page, the oldest dropped past [`RECYCLES_KEPT`].
    fn keep_recycle(&self, r: RecycleEvent) {
        keep_newest(&mut self.lock().recycles, r, RECYCLES_KEPT);
    }

    /// Restarts seen per series name since the agent started.
    pub fn restarts(&self) -> Vec<(String, u64)> {
        let inner = self.lock();
        inner.restarts.iter().map(|(&l, &n)| (inner.labels.get(l).0.to_string(), n)).collect()
    }

    /// The front door's shed count, when it has one.
    pub fn shed_total(&self) -> Option<u64> {
        self.inputs.door.as_ref().map(|d| d.shed_total())
    }

    /// The front door's requests sent a second time, per reason (None without a front door).
    pub fn retries(&self) -> Option<[(&'static str, u64); 2]> {
        self.inputs.door.as_ref().map(|d| d.retries())
    }

    /// The front door's memory per request, per route key since start (None without a front door).
    pub fn growth(&self) -> Option<std::collections::BTreeMap<String, crate::feed::growth::KeyStats>> {
        self.inputs.door.as_ref().map(|d| d.growth().totals())
    }

    /// The agent's reaction times, when it keeps them.
    pub fn reactions(&self) -> Option<&crate::base::reaction::Reactions> {
        self.inputs.reactions.as_deref()
    }

    /// The last resort's kill counts, when the kills are kept.
    pub(crate) fn kill_counts(&self) -> Option<crate::guard::KillCounts> {
        self.inputs.kills.as_ref().map(|k| k.counts())
    }

    /// The latest published sample.
    pub fn latest(&self) -> Arc<Published> {
        self.latest.borrow().clone()
    }

    /// The config's reloads, when they are counted.
    pub fn reloads(&self) -> Option<&crate::config::live::Reloads> {
        self.inputs.reloads.as_deref()
    }

    /// Launched processes (empty under `monitor agent`).
    pub fn launched(&self) -> Vec<LauncherInfo> {
        self.inputs.door.as_ref().map(|d| d.launched()).unwrap_or_default()
    }

    /// The series names of the latest sample's processes, numbered as the history numbers them.
    pub fn names(&self, p: &Published) -> Vec<(String, String)> {
        let launched = self.launched();
        let mut inner = self.lock();
        names(p, &launched, &mut inner.slots)
    }

    /// The decisions counted since the agent started.
    pub fn decisions(&self) -> Decisions {
        self.lock().decisions
    }

    /// Why the history is not persisted, if it is not.
    pub fn note(&self) -> Option<String> {
        self.lock().note.clone()
    }
}

/// Appends `x`, dropping the oldest past `kept`.
fn keep_newest<T>(held: &mut VecDeque<Arc<T>>, x: T, kept: usize) {
    held.push_back(Arc::new(x));
    while held.len() > kept {
        held.pop_front();
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
pub fn spawn(rx: watch::Receiver<Arc<Published>>, samples: Samples, config: Live, inputs: Inputs) -> HistoryHandle {
    let cfg = config.now().stats.clone();
    let mut inputs = inputs;
    // Without a database there is nowhere to write the events: they stay the membership's.
    let view = inputs.cluster_events.take().filter(|_| cfg.path.is_some());
    let history = Arc::new(History::new(rx.clone(), inputs));
    let (tx, writes) = mpsc::channel::<Write>();
    let writer = cfg.path.clone().map(|path| {
        // Opened here, so that a database that cannot be opened is said before the API serves; the writer tries
        // again in the background (a lock held by a backup, a folder mounted late) and keeps the minutes meanwhile.
        let store = match open_and_load(&path, cfg.retention_days, &history) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::error!("history is not persisted: {e} (trying again every {}s)", REOPEN_EVERY.as_secs());
                history.set_note(Some(format!("history is not persisted: {e}")));
                None
            }
        };
        let h = history.clone();
        std::thread::Builder::new()
            .name("history-db".into())
            .spawn(move || Writer::new(store, path, h, config).run(writes))
    });
    let writer = match writer {
        Some(Ok(t)) => Some(t),
        Some(Err(e)) => {
            tracing::error!("history is not persisted: cannot start its thread: {e}");
            history.set_note(Some(format!("history is not persisted: cannot start its thread: {e}")));
            None
        }
        None => None,
    };
    let h = history.clone();
    let consumer = tokio::spawn(async move { consume(samples, h, tx, view).await });
    HistoryHandle { history, consumer, writer }
}

/// Reads every sample into the rings and hands each finished minute to the database thread; under `[cluster]`, hands
/// it each membership event as the membership records it (those recorded before the history started first, and
/// those not handed over yet when the samples stop last). Sending never waits: the thread has an unbounded queue.
async fn consume(mut samples: Samples, h: Arc<History>, tx: mpsc::Sender<Write>, mut view: Option<ClusterView>) {
    let mut agg = Aggregator::default();
    let mut last_seq = None;
    let mut cursor = events::Cursor::default();
    let send_events = |cursor: &mut events::Cursor, view: &mut Option<ClusterView>| {
        let new = view.as_mut().map(|v| events::take(cursor, v)).unwrap_or_default();
        if !new.is_empty() {
            let _ = tx.send(Write::Events(new));
        }
    };
    send_events(&mut cursor, &mut view);
    loop {
        tokio::select! {
            p = samples.next() => {
                let Some(p) = p else { break };
                if last_seq != Some(p.snapshot.seq) && p.error.is_none() {
                    last_seq = Some(p.snapshot.seq);
                    h.lock().decisions.observe(&p.decision);
                    if let Some(k) = p.kill.as_ref().map(KillEvent::from) {
                        h.keep_kill(k.clone());
                        let _ = tx.send(Write::Kill(k));
                    }
                    if let Some(r) = p.recycle.as_ref().map(RecycleEvent::from) {
                        h.keep_recycle(r.clone());
                        let _ = tx.send(Write::Recycle(r));
                    }
                    let input = h.input(&p, &mut agg);
                    let (sec, min) = agg.push(&input);
                    if let Some((m, labels)) = h.keep(sec, min) {
                        send_routes(&h, &tx, m.t);
                        let _ = tx.send(Write::Minute(m, labels));
                    }
                }
            }
            going = events::changed(&mut view) => match going {
                true => send_events(&mut cursor, &mut view),
                false => view = None,
            },
        }
    }
    send_events(&mut cursor, &mut view);
    let (sec, min) = agg.flush();
    if let Some((m, labels)) = h.keep(sec, min) {
        send_routes(&h, &tx, m.t);
        let _ = tx.send(Write::Minute(m, labels));
    }
}

/// Hands the memory per request measured since the last minute to the database thread, as minute `t`'s.
fn send_routes(h: &History, tx: &std::sync::mpsc::Sender<Write>, t: u64) {
    let Some(door) = &h.inputs.door else { return };
    let routes = door.growth().take();
    if !routes.is_empty() {
        let _ = tx.send(Write::Routes(t, routes));
    }
}

impl HistoryHandle {
    /// The home page and `/api/v1/dashboard`, drawn from the history.
    pub(crate) fn router(&self) -> axum::Router {
        let source: Arc<dyn web::Source> = self.history.clone();
        web::router(source)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::policy::State;

    /// A full name table releases the indexes nothing refers to, and only those: a name in a kept minute or
    /// second, in the aggregator's open second, of the last sample's processes or of this one keeps its index.
    #[test]
    fn a_full_name_table_releases_only_the_names_nothing_refers_to() {
        let mut inner = Inner::default();
        for i in 0..ring::OVERFLOW {
            inner.labels.intern(&format!("p{i}"), "process");
        }
        let proc_minute = |label| ring::ProcMinute { label, ..ring::ProcMinute::default() };
        let proc_second = |label| ring::ProcSecond { label, ..ring::ProcSecond::default() };
        inner.minutes.push_back(Arc::new(Minute { t: 60, procs: vec![proc_minute(5)], ..Minute::default() }));
        inner.seconds.push_back(Arc::new(Second { t: 100, procs: vec![proc_second(6)], ..Second::default() }));
        inner.series.labels = vec![(8, false)];
        inner.restarts.insert(11, 2);
        let mut agg = Aggregator::default();
        let open = ProcInput {
            label: 7,
            numbered: false,
            pid: 70,
            start_ticks: 1,
            rss: 1,
            anon: 1,
            requests_total: 0,
            err5xx_total: 0,
            inflight: 0,
            p50_us: None,
            p99_us: None,
        };
        let input = Input {
            unix_ms: 101_000,
            usage: 1,
            limit: 2,
            state: 0,
            new_victim: false,
            shed_total: 0,
            procs: vec![open.clone(), ProcInput { label: 10, pid: 100, ..open }],
        };
        agg.push(&input);
        let live = vec![("p9".to_string(), "process".to_string(), false), ("fresh".into(), "process".into(), false)];
        inner.release_labels(&live, &mut agg, 101);
        for i in 5..=9u16 {
            assert_eq!(inner.labels.lookup(&format!("p{i}")), Some(i), "p{i} is referred to");
        }
        assert_eq!(inner.labels.lookup("p4"), None, "p4 is not");
        let fresh = inner.labels.intern("fresh", "process");
        assert!(fresh != ring::OVERFLOW && !(5..=9).contains(&fresh), "fresh took {fresh}");
        assert_eq!(inner.labels.get(fresh).0, "fresh");
        assert_eq!(inner.labels.lookup("p10"), Some(10), "in the open second");
        assert!(!inner.restarts.contains_key(&11), "a released name's restarts go with it");
        assert!(inner.labels.slots() <= ring::LABELS_MAX);
    }

    /// Minutes finished while another process holds the database locked are kept and written, in order, once the
    /// lock is gone; the note says why nothing is written meanwhile and goes away after.
    #[test]
    fn minutes_wait_for_a_locked_database_and_are_written_after() {
        let dir = monitor_tests::temp_dir("history-locked");
        let path = dir.join("stats.db");
        let holder = rusqlite::Connection::open(&path).expect("open");
        holder
            .execute_batch("PRAGMA journal_mode=DELETE; CREATE TABLE x(y); BEGIN EXCLUSIVE; INSERT INTO x VALUES (1);")
            .expect("lock");
        let (_tx, latest) = watch::channel(Arc::new(Published::test(State::Normal)));
        let h = Arc::new(History::new(latest, Inputs::default()));
        h.set_note(Some("history is not persisted: database is locked".into()));
        let mut w = Writer::new(None, path.clone(), h.clone(), Live::fixed(Default::default()));
        w.retry = Duration::from_millis(100);
        let (rows, writes) = mpsc::channel();
        let writer = std::thread::spawn(move || w.run(writes));
        let mut labels = Labels::default();
        let now = now_s() / 60 * 60;
        for t in [now - 120, now - 60] {
            let label = labels.intern("tx1", "worker");
            let procs = vec![ring::ProcMinute { label, rss_max: 7, ..Default::default() }];
            rows.send(Write::Minute(Minute { t, usage_max: t, procs, ..Minute::default() }, labels.clone()))
                .expect("send");
        }
        let joined = ClusterEvent {
            at_unix_ms: now * 1000 - 30_000,
            node: "b".into(),
            what: "joined".into(),
            from: None,
            to: "alive".into(),
        };
        rows.send(Write::Events(vec![joined.clone()])).expect("send");
        std::thread::sleep(Duration::from_millis(800));
        assert!(h.note().is_some(), "locked: nothing written yet");
        holder.execute_batch("ROLLBACK").expect("unlock");
        drop(holder);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while h.note().is_some() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(h.note(), None, "written once the lock is gone");
        drop(rows);
        writer.join().expect("the writer ends with the samples");
        let store = Store::open_read_only(&path).expect("read back");
        let mut fresh = Labels::default();
        let written = store.minutes(0, u64::MAX / 2, &mut fresh).expect("minutes");
        assert_eq!(written.iter().map(|m| m.t).collect::<Vec<_>>(), [now - 120, now - 60]);
        assert_eq!(fresh.get(written[1].procs[0].label).0, "tx1");
        assert_eq!(
            store.events(0, u64::MAX / 2).expect("events"),
            [joined],
            "the event waited too, and is written once"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Under `[cluster]`: the events the membership recorded before the history started, and those it records
    /// while the agent runs, reach the database at once (not at the end of a minute), each once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn membership_events_are_written_as_they_come() {
        use crate::cluster::members::Change;
        use crate::cluster::{Members, NodeId};
        use crate::decision::policy::State as Policy;
        let dir = monitor_tests::temp_dir("history-events");
        let path = dir.join("stats.db");
        let mut cfg = crate::config::Config::default();
        cfg.stats.path = Some(path.clone());
        let b = NodeId::test("b", 3, &["b0"], 20);
        let change = |from, to| Change { node: "b".into(), gossip: b.gossip, from, to };
        let mut members = Members::new(NodeId::test("a", 2, &["a0"], 10));
        let t0 = now_s() * 1000;
        members.record(&[change(None, crate::cluster::State::Alive)], t0);
        let (view_tx, view) = watch::channel(Arc::new(members.clone()));
        let (feed, latest) = crate::feed::Feed::new(Published::test(Policy::Normal));
        let inputs = Inputs { cluster_events: Some(view), ..Inputs::default() };
        let handle = spawn(latest, feed.subscribe("history"), Live::fixed(cfg), inputs);
        let written = || Store::open_read_only(&path).and_then(|s| s.events(0, u64::MAX / 2)).unwrap_or_default();
        let within = |n: usize| {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while written().len() < n && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            written()
        };
        assert_eq!(within(1).len(), 1, "the join recorded before the history started");
        let alive = crate::cluster::State::Alive;
        members.record(&[change(Some(alive), crate::cluster::State::Suspect)], t0 + 500);
        view_tx.send_replace(Arc::new(members.clone()));
        let suspect = crate::cluster::State::Suspect;
        members.record(&[change(Some(suspect), crate::cluster::State::Dead)], t0 + 2500);
        view_tx.send_replace(Arc::new(members.clone()));
        let got = within(3);
        let whats: Vec<(u64, &str)> = got.iter().map(|e| (e.at_unix_ms, e.what.as_str())).collect();
        assert_eq!(whats, [(t0, "joined"), (t0 + 500, "suspect"), (t0 + 2500, "dead")], "while the agent runs");
        // A change the history has not read when the samples stop is written as it stops.
        members.record(&[change(Some(crate::cluster::State::Dead), alive)], t0 + 9000);
        view_tx.send_replace(Arc::new(members));
        drop(feed);
        handle.close(Duration::from_secs(5)).await;
        let whats: Vec<String> = written().into_iter().map(|e| e.what).collect();
        assert_eq!(whats, ["joined", "suspect", "dead", "joined"], "each once");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A kill and a recycle a published sample carries are each written to the database once, however often their
    /// sample is read, each to its own table, and kept for the home page.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_kill_and_recycle_is_written_once() {
        let dir = monitor_tests::temp_dir("history-kills");
        let path = dir.join("stats.db");
        let mut cfg = crate::config::Config::default();
        cfg.stats.path = Some(path.clone());
        let (feed, latest) = crate::feed::Feed::new(Published::test(State::Aborting));
        let handle = spawn(latest, feed.subscribe("history"), Live::fixed(cfg), Inputs::default());
        let mut p = Published::test(State::Aborting);
        p.snapshot.seq = 1;
        p.snapshot.unix_ms = (now_s() - 30) * 1000;
        p.kill = Some(crate::guard::KillRecord {
            pid: 11,
            rss_bytes: 300,
            anon_bytes: 280,
            unix_ms: p.snapshot.unix_ms,
            ..crate::guard::KillRecord::example(11, "node", true)
        });
        feed.publish(Arc::new(p.clone()));
        p.kill = None;
        p.snapshot.seq = 2;
        p.snapshot.unix_ms += 20_000;
        p.recycle = Some(crate::guard::RecycleRecord {
            pid: 12,
            start_ticks: 5,
            name: "api".into(),
            role: crate::decision::snapshot::ProcessRole::Worker,
            anon_bytes: 200 << 20,
            ratio: 0.87,
            reason: "it obeyed the abort 20.0 s ago".into(),
            signal: Some("TERM".into()),
            drained_ms: 300,
            unix_ms: p.snapshot.unix_ms,
            enforced: true,
            error: None,
        });
        let p = Arc::new(p);
        feed.publish(p.clone());
        feed.publish(p);
        drop(feed);
        let h = handle.history.clone();
        handle.close(Duration::from_secs(5)).await;
        let store = Store::open_read_only(&path).expect("the database");
        let kills = store.kills(0, u64::MAX / 2).expect("kills");
        assert_eq!(kills.iter().map(|k| (k.pid, k.process.as_str())).collect::<Vec<_>>(), [(11, "node")]);
        let recycles = store.recycles(0, u64::MAX / 2).expect("recycles");
        let written: Vec<_> = recycles.iter().map(|r| (r.pid, r.process.as_str(), r.signal.as_deref())).collect();
        assert_eq!(written, [(12, "api", Some("TERM"))], "once, apart from the kill");
        let series = web::Source::dashboard(h.as_ref(), web::Range::FiveMinutes, 300).series;
        assert_eq!(
            series.kills.iter().map(|k| (k.pid, k.name.as_str(), k.enforced)).collect::<Vec<_>>(),
            [(11, "node", true)]
        );
        assert_eq!(
            series.recycles.iter().map(|r| (r.pid, r.name.as_str(), r.enforced)).collect::<Vec<_>>(),
            [(12, "api", true)]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The kills and recycles of the last week in the database are on the home page after a restart; older ones are
    /// not.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_kills_and_recycles_of_the_last_week_are_loaded_from_the_database() {
        let dir = monitor_tests::temp_dir("history-kills-load");
        let path = dir.join("stats.db");
        let now = now_s();
        let kill = |ago_s: u64, pid: u32, enforced: bool| KillEvent {
            at_unix_ms: (now - ago_s) * 1000,
            pid,
            process: format!("w<{pid}>"),
            role: "worker".into(),
            why: "abort_not_obeyed".into(),
            reason: "did not abort".into(),
            rss_bytes: 1,
            anon_bytes: 1,
            ratio: 0.95,
            round: 1,
            enforced,
            error: None,
        };
        let kills = [kill(8 * 86_400, 1, true), kill(2 * 86_400, 2, false), kill(120, 3, true)];
        Store::open(&path).and_then(|mut s| s.insert_kills(&kills)).expect("kills written");
        let recycle = |ago_s: u64, pid: u32| RecycleEvent {
            at_unix_ms: (now - ago_s) * 1000,
            pid,
            process: format!("r<{pid}>"),
            role: "worker".into(),
            reason: "it obeyed the abort".into(),
            anon_bytes: 1,
            ratio: 0.9,
            signal: Some("TERM".into()),
            drained_ms: 0,
            enforced: true,
            error: None,
        };
        let recycles = [recycle(9 * 86_400, 4), recycle(3 * 86_400, 5), recycle(60, 6)];
        Store::open(&path).and_then(|mut s| s.insert_recycles(&recycles)).expect("recycles written");
        let mut cfg = crate::config::Config::default();
        cfg.stats.path = Some(path.clone());
        let (feed, latest) = crate::feed::Feed::new(Published::test(State::Normal));
        let handle = spawn(latest, feed.subscribe("history"), Live::fixed(cfg), Inputs::default());
        let marked = |range| {
            let s = web::Source::dashboard(handle.history.as_ref(), range, 300).series;
            s.kills.iter().map(|k| (k.pid, k.name.clone(), k.enforced)).collect::<Vec<_>>()
        };
        assert_eq!(marked(web::Range::Hour), [(3, "w<3>".to_string(), true)]);
        assert_eq!(marked(web::Range::Week), [(2, "w<2>".into(), false), (3, "w<3>".into(), true)]);
        let recycled = |range| {
            let s = web::Source::dashboard(handle.history.as_ref(), range, 300).series;
            s.recycles.iter().map(|r| (r.pid, r.name.clone())).collect::<Vec<_>>()
        };
        assert_eq!(recycled(web::Range::Hour), [(6, "r<6>".to_string())]);
        assert_eq!(recycled(web::Range::Week), [(5, "r<5>".to_string()), (6, "r<6>".to_string())]);
        drop(feed);
        handle.close(Duration::from_secs(5)).await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_reloaded_retention_deletes_old_rows_with_the_next_minute() {
        let dir = monitor_tests::temp_dir("history-retention");
        let path = dir.join("stats.db");
        let now = now_s() / 60 * 60;
        let mut labels = Labels::default();
        let mut store = Store::open(&path).expect("open");
        for t in [now - 10 * 86_400, now - 3 * 86_400] {
            store.insert(&Minute { t, ..Minute::default() }, &labels).expect("insert");
        }
        let (publisher, live) = Live::new(crate::config::Config::default());
        let (_tx, latest) = watch::channel(Arc::new(Published::test(State::Normal)));
        let h = Arc::new(History::new(latest, Inputs::default()));
        let w = Writer::new(Some(store), path.clone(), h, live);
        let (rows, writes) = mpsc::channel();
        let writer = std::thread::spawn(move || w.run(writes));
        let mut cfg = crate::config::Config::default();
        cfg.stats.retention_days = 7;
        publisher.publish(cfg);
        rows.send(Write::Minute(Minute { t: now, ..Minute::default() }, labels.clone())).expect("send");
        drop(rows);
        writer.join().expect("the writer ends with the samples");
        let read = Store::open_read_only(&path).expect("read back");
        let left = read.minutes(0, u64::MAX / 2, &mut labels).expect("minutes");
        assert_eq!(left.iter().map(|m| m.t).collect::<Vec<_>>(), [now - 3 * 86_400, now], "30 days, then 7");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
