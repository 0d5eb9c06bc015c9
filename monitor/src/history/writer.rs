//! The stats database's writer, on a thread of its own: it opens the database and loads the last week at start,
//! writes each finished minute, cluster event, kill and recycle, deletes rows past the retention, and keeps what it
//! could not write (for a while) until the database works again.

use super::*;

/// Opens the database and loads its minutes of the last week that are older than those already in memory (none at
/// start-up; those of the time it could not be opened when it opens late), and its kills and recycles of the last
/// week that are not in memory.
pub(super) fn open_and_load(path: &std::path::Path, days: u32, h: &History) -> Result<Store, HistoryError> {
    let mut s = Store::open(path)?;
    let now = now_s();
    let gone = s.retain(days, now)?;
    let mut inner = h.lock();
    let from = now.saturating_sub(MINUTES_KEPT as u64 * 60);
    let to = inner.minutes.front().map_or(now + 60, |m| m.t);
    let loaded = s.minutes(from, to, &mut inner.labels)?;
    tracing::info!(path = %path.display(), minutes = loaded.len(), deleted = gone, "stats database open");
    for m in loaded.into_iter().rev() {
        if inner.minutes.len() >= MINUTES_KEPT {
            break;
        }
        inner.minutes.push_front(Arc::new(m));
    }
    let kills = s.kills(from, now + 60)?;
    load_newest(&mut inner.kills, kills, KILLS_KEPT, |k| (k.at_unix_ms, k.pid));
    let recycles = s.recycles(from, now + 60)?;
    load_newest(&mut inner.recycles, recycles, RECYCLES_KEPT, |r| (r.at_unix_ms, r.pid));
    Ok(s)
}

/// Adds the rows `loaded` (oldest first) that `held` does not hold (by time and pid), the newest first up to `kept`
/// in all, and keeps `held` in time order.
fn load_newest<T>(held: &mut VecDeque<Arc<T>>, loaded: Vec<T>, kept: usize, key: impl Fn(&T) -> (u64, u32)) {
    let have: std::collections::HashSet<(u64, u32)> = held.iter().map(|x| key(x)).collect();
    for x in loaded.into_iter().rev().filter(|x| !have.contains(&key(x))) {
        if held.len() >= kept {
            break;
        }
        held.push_front(Arc::new(x));
    }
    held.make_contiguous().sort_by_key(|x| key(x).0);
}

/// The database thread: writes each finished minute and each cluster event as it comes; while the database cannot
/// be opened or written, keeps the minutes (up to [`PENDING_KEPT`]) and the events (up to [`PENDING_EVENTS_KEPT`]),
/// the oldest dropped first, and tries again every [`REOPEN_EVERY`], saying so once when it fails and once when it
/// works again.
pub(super) struct Writer {
    store: Option<Store>,
    path: PathBuf,
    h: Arc<History>,
    /// `[stats] retention_days` as applied now (a reload changes it).
    config: Live,
    /// The retention the rows were last deleted for (at the start, the one the database was opened with).
    retained_for: u32,
    /// Minutes not written yet, oldest first.
    pending: VecDeque<Minute>,
    /// Cluster events not written yet, oldest first.
    pending_events: VecDeque<ClusterEvent>,
    /// Kills not written yet, oldest first.
    pending_kills: VecDeque<KillEvent>,
    /// Recycles not written yet, oldest first.
    pending_recycles: VecDeque<RecycleEvent>,
    /// Minutes of memory per request not written yet, oldest first.
    pending_routes: VecDeque<(u64, super::store::RouteRows)>,
    /// The latest labels (they only grow, so they name every pending minute's processes).
    labels: Labels,
    /// How often a database that cannot be opened or written is tried again ([`REOPEN_EVERY`]).
    pub(super) retry: Duration,
}

impl Writer {
    pub(super) fn new(store: Option<Store>, path: PathBuf, h: Arc<History>, config: Live) -> Writer {
        let retained_for = config.now().stats.retention_days;
        Writer {
            store,
            path,
            h,
            config,
            retained_for,
            pending: VecDeque::new(),
            pending_events: VecDeque::new(),
            pending_kills: VecDeque::new(),
            pending_recycles: VecDeque::new(),
            pending_routes: VecDeque::new(),
            labels: Labels::default(),
            retry: REOPEN_EVERY,
        }
    }

    pub(super) fn run(mut self, rows: mpsc::Receiver<Write>) {
        let mut last_retain = std::time::Instant::now();
        loop {
            let idle = self.pending.is_empty()
                && self.pending_events.is_empty()
                && self.pending_kills.is_empty()
                && self.pending_recycles.is_empty()
                && self.pending_routes.is_empty();
            let row = if idle && self.store.is_some() {
                rows.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected)
            } else {
                rows.recv_timeout(self.retry)
            };
            let done = match row {
                Ok(Write::Minute(m, labels)) => {
                    self.labels = labels;
                    if self.pending.len() >= PENDING_KEPT {
                        self.pending.pop_front();
                    }
                    self.pending.push_back(m);
                    false
                }
                Ok(Write::Events(events)) => {
                    for e in events {
                        if self.pending_events.len() >= PENDING_EVENTS_KEPT {
                            self.pending_events.pop_front();
                        }
                        self.pending_events.push_back(e);
                    }
                    false
                }
                Ok(Write::Routes(t, routes)) => {
                    if self.pending_routes.len() >= PENDING_KEPT {
                        self.pending_routes.pop_front();
                    }
                    self.pending_routes.push_back((t, routes));
                    false
                }
                Ok(Write::Kill(k)) => {
                    if self.pending_kills.len() >= PENDING_KILLS_KEPT {
                        self.pending_kills.pop_front();
                    }
                    self.pending_kills.push_back(k);
                    false
                }
                Ok(Write::Recycle(r)) => {
                    if self.pending_recycles.len() >= RECYCLES_KEPT {
                        self.pending_recycles.pop_front();
                    }
                    self.pending_recycles.push_back(r);
                    false
                }
                Err(mpsc::RecvTimeoutError::Timeout) => false,
                Err(mpsc::RecvTimeoutError::Disconnected) => true,
            };
            self.flush();
            if done {
                return;
            }
            // A reload that changes the retention applies with the next minute written, not the next hour.
            let days = self.days();
            let due = last_retain.elapsed() >= RETAIN_EVERY || days != self.retained_for;
            if let Some(s) = self.store.as_mut().filter(|_| due) {
                last_retain = std::time::Instant::now();
                self.retained_for = days;
                if let Err(e) = s.retain(days, now_s()) {
                    tracing::warn!("deleting old history rows: {e}");
                }
            }
        }
    }

    fn days(&self) -> u32 {
        self.config.now().stats.retention_days
    }

    /// Opens the database if it is not open, and writes the pending minutes, oldest first, then the pending events,
    /// kills, recycles and memory per request.
    fn flush(&mut self) {
        let failing = self.h.note().is_some();
        if self.store.is_none() {
            match open_and_load(&self.path, self.days(), &self.h) {
                Ok(s) => self.store = Some(s),
                Err(e) => {
                    tracing::debug!("stats database still cannot be opened: {e}");
                    return;
                }
            }
        }
        let Some(store) = self.store.as_mut() else { return };
        // Says once that writing fails, and shows why on the home page until it works again.
        let failed = |h: &History, e: &HistoryError, note: String| {
            if !failing {
                tracing::error!("history is not persisted: {e} (kept in memory, trying again)");
            }
            h.set_note(Some(note));
        };
        while let Some(m) = self.pending.front() {
            if let Err(e) = store.insert(m, &self.labels) {
                failed(&self.h, &e, format!("history is not persisted since minute {}: {e}", m.t));
                return;
            }
            self.pending.pop_front();
        }
        if !self.pending_events.is_empty() {
            if let Err(e) = store.insert_events(self.pending_events.make_contiguous()) {
                failed(&self.h, &e, format!("history is not persisted: writing cluster events: {e}"));
                return;
            }
            self.pending_events.clear();
        }
        if !self.pending_kills.is_empty() {
            if let Err(e) = store.insert_kills(self.pending_kills.make_contiguous()) {
                failed(&self.h, &e, format!("history is not persisted: writing the guard's kills: {e}"));
                return;
            }
            self.pending_kills.clear();
        }
        if !self.pending_recycles.is_empty() {
            if let Err(e) = store.insert_recycles(self.pending_recycles.make_contiguous()) {
                failed(&self.h, &e, format!("history is not persisted: writing the guard's recycles: {e}"));
                return;
            }
            self.pending_recycles.clear();
        }
        while let Some((t, routes)) = self.pending_routes.front() {
            if let Err(e) = store.insert_routes(*t, routes) {
                failed(&self.h, &e, format!("history is not persisted: writing the memory per request: {e}"));
                return;
            }
            self.pending_routes.pop_front();
        }
        if failing {
            tracing::info!("stats database writable again: history is persisted");
            self.h.set_note(None);
        }
    }
}
