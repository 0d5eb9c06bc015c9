//! The stats database: per-minute rows of the group and of each process, and the cluster membership's events, in
//! SQLite (WAL), with retention. Opened by the agent (writes one minute at a time, and the events as they come,
//! from its own thread) and by `monitor report` (reads a day).

use super::events::ClusterEvent;
use super::ring::{Labels, Minute, ProcMinute};
use super::HistoryError;
use crate::feed::growth::{Hist, KeyStats};
use rusqlite::{params, Connection, OpenFlags};
use std::path::Path;
use std::time::Duration;

mod guard;

/// Rows of the guard for the tests that write them.
#[cfg(test)]
pub(crate) use guard::tests as fixtures;

/// The tables. `cluster_event`'s unique key, which starts with the time, is also its index on time; its rowid keeps
/// the order in which events of the same millisecond were seen; so do `guard_kill`'s and `guard_recycle`'s. A table
/// added since (every one after `process_minute`) is created when the agent opens a database written before it.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS group_minute (
    t INTEGER PRIMARY KEY, usage_max INTEGER NOT NULL, usage_mean INTEGER NOT NULL, limit_bytes INTEGER NOT NULL,
    state_max INTEGER NOT NULL, refusing_s INTEGER NOT NULL, aborting_s INTEGER NOT NULL,
    refusals INTEGER NOT NULL, aborts INTEGER NOT NULL, shed INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS process_minute (
    t INTEGER NOT NULL, process TEXT NOT NULL, role TEXT NOT NULL, rss_max INTEGER NOT NULL,
    rss_mean INTEGER NOT NULL, requests INTEGER NOT NULL, errors_5xx INTEGER NOT NULL,
    inflight_max INTEGER NOT NULL, p50_us INTEGER NOT NULL, p99_us INTEGER NOT NULL, restarts INTEGER NOT NULL,
    anon_max INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (t, process)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS cluster_event (
    at_ms INTEGER NOT NULL, node TEXT NOT NULL, what TEXT NOT NULL, from_state TEXT, to_state TEXT NOT NULL,
    UNIQUE (at_ms, node, what));
CREATE TABLE IF NOT EXISTS guard_kill (
    at_ms INTEGER NOT NULL, pid INTEGER NOT NULL, process TEXT NOT NULL, role TEXT NOT NULL, why TEXT NOT NULL,
    reason TEXT NOT NULL, rss_bytes INTEGER NOT NULL, anon_bytes INTEGER NOT NULL, ratio REAL NOT NULL,
    round INTEGER NOT NULL, enforced INTEGER NOT NULL, error TEXT,
    UNIQUE (at_ms, pid));
CREATE TABLE IF NOT EXISTS guard_recycle (
    at_ms INTEGER NOT NULL, pid INTEGER NOT NULL, process TEXT NOT NULL, role TEXT NOT NULL, reason TEXT NOT NULL,
    anon_bytes INTEGER NOT NULL, ratio REAL NOT NULL, signal TEXT, drained_ms INTEGER NOT NULL,
    enforced INTEGER NOT NULL, error TEXT,
    UNIQUE (at_ms, pid));
CREATE TABLE IF NOT EXISTS route_minute (
    t INTEGER NOT NULL, route TEXT NOT NULL, requests INTEGER NOT NULL, exact TEXT NOT NULL, shared TEXT NOT NULL,
    at_abort INTEGER NOT NULL, PRIMARY KEY (t, route)) WITHOUT ROWID;
";

/// Memory per request by route key.
pub type RouteRows = std::collections::BTreeMap<String, KeyStats>;

/// The route keys as the home page and `monitor report` list them: each with its p99 growth and whether that is of
/// exact measures ([`KeyStats::p99`]), the largest first (then the most requests).
pub fn ranked(rows: RouteRows) -> Vec<(String, KeyStats, (u64, bool))> {
    let mut out: Vec<_> = rows
        .into_iter()
        .map(|(route, k)| {
            let p99 = k.p99();
            (route, k, p99)
        })
        .collect();
    out.sort_by(|(_, ka, (pa, _)), (_, kb, (pb, _))| pb.cmp(pa).then(kb.count.cmp(&ka.count)));
    out
}

/// An open stats database.
pub struct Store {
    conn: Connection,
}

fn db(e: rusqlite::Error) -> HistoryError {
    HistoryError::Db(e)
}

impl Store {
    /// Opens (creating if needed) the database at `path` in WAL mode and checks it is usable.
    pub fn open(path: &Path) -> Result<Store, HistoryError> {
        let open = |e| HistoryError::Open { path: path.to_path_buf(), source: e };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| HistoryError::Dir { path: dir.to_path_buf(), source: e })?;
        }
        let conn = Connection::open(path).map_err(open)?;
        conn.busy_timeout(Duration::from_millis(500)).map_err(open)?;
        let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)).map_err(open)?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(path = %path.display(), mode, "the stats database is not in WAL mode");
        }
        conn.execute_batch("PRAGMA synchronous=NORMAL;").map_err(open)?;
        conn.execute_batch(SCHEMA).map_err(open)?;
        if !has_column(&conn, "process_minute", "anon_max").map_err(open)? {
            // A database from before the processes' anon was kept: its minutes read 0.
            conn.execute_batch("ALTER TABLE process_minute ADD COLUMN anon_max INTEGER NOT NULL DEFAULT 0")
                .map_err(open)?;
        }
        let check: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0)).map_err(open)?;
        if check != "ok" {
            return Err(HistoryError::Corrupt { path: path.to_path_buf(), detail: check });
        }
        Ok(Store { conn })
    }

    /// Opens an existing database read-only (for `monitor report`).
    pub(crate) fn open_read_only(path: &Path) -> Result<Store, HistoryError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(path, flags)
            .map_err(|e| HistoryError::Open { path: path.to_path_buf(), source: e })?;
        conn.busy_timeout(Duration::from_secs(2)).map_err(db)?;
        Ok(Store { conn })
    }

    /// Writes one minute (replacing a row of the same minute, e.g. after a restart within it).
    pub fn insert(&mut self, m: &Minute, labels: &Labels) -> Result<(), HistoryError> {
        let tx = self.conn.transaction().map_err(db)?;
        tx.execute(
            "INSERT OR REPLACE INTO group_minute VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                m.t as i64,
                m.usage_max as i64,
                m.usage_mean as i64,
                m.limit as i64,
                m.state_max,
                m.refusing_s,
                m.aborting_s,
                m.refusals,
                m.aborts,
                m.shed as i64
            ],
        )
        .map_err(db)?;
        {
            let mut st = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO process_minute (t, process, role, rss_max, rss_mean, requests, \
                     errors_5xx, inflight_max, p50_us, p99_us, restarts, anon_max) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                )
                .map_err(db)?;
            for p in &m.procs {
                let (name, role) = labels.get(p.label);
                st.execute(params![
                    m.t as i64,
                    name,
                    role,
                    p.rss_max as i64,
                    p.rss_mean as i64,
                    p.requests as i64,
                    p.err5xx as i64,
                    p.inflight_max,
                    p.p50_us,
                    p.p99_us,
                    p.restarts,
                    p.anon_max.min(i64::MAX as u64) as i64
                ])
                .map_err(db)?;
            }
        }
        tx.commit().map_err(db)
    }

    /// Writes cluster membership events, each once: an event already written (same time, node and what) is
    /// passed over. Returns how many were new.
    pub(crate) fn insert_events(&mut self, events: &[ClusterEvent]) -> Result<usize, HistoryError> {
        let tx = self.conn.transaction().map_err(db)?;
        let mut n = 0;
        {
            let mut st =
                tx.prepare_cached("INSERT OR IGNORE INTO cluster_event VALUES (?1, ?2, ?3, ?4, ?5)").map_err(db)?;
            for e in events {
                n += st.execute(params![e.at_unix_ms as i64, e.node, e.what, e.from, e.to]).map_err(db)?;
            }
        }
        tx.commit().map_err(db)?;
        Ok(n)
    }

    /// Whether the database has the table `name` (one written by an older agent may not).
    fn has_table(&self, name: &str) -> Result<bool, HistoryError> {
        self.conn
            .query_row("SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?1", [name], |r| {
                r.get(0)
            })
            .map_err(db)
    }

    /// Writes one minute's memory per request (`t`: the minute, Unix seconds), adding to what it already holds.
    pub(crate) fn insert_routes(&mut self, t: u64, routes: &RouteRows) -> Result<(), HistoryError> {
        let tx = self.conn.transaction().map_err(db)?;
        {
            let mut read = tx
                .prepare_cached(
                    "SELECT requests, exact, shared, at_abort FROM route_minute WHERE t = ?1 AND route = ?2",
                )
                .map_err(db)?;
            let mut write =
                tx.prepare_cached("INSERT OR REPLACE INTO route_minute VALUES (?1, ?2, ?3, ?4, ?5, ?6)").map_err(db)?;
            let t = t.min(i64::MAX as u64) as i64;
            for (route, k) in routes {
                let mut k = k.clone();
                let held = read
                    .query_row(params![t, route], |r| {
                        Ok(KeyStats {
                            count: r.get::<_, i64>(0)?.max(0) as u64,
                            exact: Hist::decode(&r.get::<_, String>(1)?),
                            shared: Hist::decode(&r.get::<_, String>(2)?),
                            at_abort: r.get::<_, i64>(3)?.max(0) as u64,
                        })
                    })
                    .ok();
                if let Some(h) = held {
                    k.merge(&h);
                }
                write
                    .execute(params![
                        t,
                        route,
                        k.count.min(i64::MAX as u64) as i64,
                        k.exact.encode(),
                        k.shared.encode(),
                        k.at_abort.min(i64::MAX as u64) as i64
                    ])
                    .map_err(db)?;
            }
        }
        tx.commit().map_err(db)
    }

    /// The memory per request of the minutes in `[from, to)` (Unix seconds), summed per route key; none in a
    /// database written before it was kept.
    pub fn routes(&self, from: u64, to: u64) -> Result<RouteRows, HistoryError> {
        if !self.has_table("route_minute")? {
            return Ok(RouteRows::new());
        }
        let mut st = self
            .conn
            .prepare("SELECT route, requests, exact, shared, at_abort FROM route_minute WHERE t >= ?1 AND t < ?2")
            .map_err(db)?;
        let (from, to) = (from.min(i64::MAX as u64) as i64, to.min(i64::MAX as u64) as i64);
        let rows = st
            .query_map([from, to], |r| {
                let k = KeyStats {
                    count: r.get::<_, i64>(1)?.max(0) as u64,
                    exact: Hist::decode(&r.get::<_, String>(2)?),
                    shared: Hist::decode(&r.get::<_, String>(3)?),
                    at_abort: r.get::<_, i64>(4)?.max(0) as u64,
                };
                Ok((r.get::<_, String>(0)?, k))
            })
            .map_err(db)?;
        let mut out = RouteRows::new();
        for row in rows {
            let (route, k) = row.map_err(db)?;
            out.entry(route).or_default().merge(&k);
        }
        Ok(out)
    }

    /// The cluster membership events in `[from, to)` (Unix seconds), oldest first; none in a database written
    /// before events were kept.
    pub fn events(&self, from: u64, to: u64) -> Result<Vec<ClusterEvent>, HistoryError> {
        if !self.has_table("cluster_event")? {
            return Ok(Vec::new());
        }
        let ms = |s: u64| s.saturating_mul(1000).min(i64::MAX as u64) as i64;
        let mut st = self
            .conn
            .prepare(
                "SELECT at_ms, node, what, from_state, to_state FROM cluster_event WHERE at_ms >= ?1 AND at_ms < ?2 \
                 ORDER BY at_ms, rowid",
            )
            .map_err(db)?;
        let rows = st
            .query_map([ms(from), ms(to)], |r| {
                Ok(ClusterEvent {
                    at_unix_ms: r.get::<_, i64>(0)? as u64,
                    node: r.get(1)?,
                    what: r.get(2)?,
                    from: r.get(3)?,
                    to: r.get(4)?,
                })
            })
            .map_err(db)?;
        rows.map(|r| r.map_err(db)).collect()
    }

    /// Deletes the rows (minutes and events) older than `days` before `now` (Unix seconds); returns how many
    /// minutes went.
    pub fn retain(&mut self, days: u32, now: u64) -> Result<usize, HistoryError> {
        let cut = now.saturating_sub(days as u64 * 86_400) as i64;
        let tx = self.conn.transaction().map_err(db)?;
        let n = tx.execute("DELETE FROM group_minute WHERE t < ?1", [cut]).map_err(db)?;
        tx.execute("DELETE FROM process_minute WHERE t < ?1", [cut]).map_err(db)?;
        tx.execute("DELETE FROM cluster_event WHERE at_ms < ?1", [cut.saturating_mul(1000)]).map_err(db)?;
        tx.execute("DELETE FROM guard_kill WHERE at_ms < ?1", [cut.saturating_mul(1000)]).map_err(db)?;
        tx.execute("DELETE FROM guard_recycle WHERE at_ms < ?1", [cut.saturating_mul(1000)]).map_err(db)?;
        tx.execute("DELETE FROM route_minute WHERE t < ?1", [cut]).map_err(db)?;
        tx.commit().map_err(db)?;
        Ok(n)
    }

    /// The minutes in `[from, to)` (Unix seconds), oldest first, their processes interned into `labels`.
    pub fn minutes(&self, from: u64, to: u64, labels: &mut Labels) -> Result<Vec<Minute>, HistoryError> {
        let (from, to) = (from as i64, to as i64);
        let mut out: Vec<Minute> = Vec::new();
        let mut st = self
            .conn
            .prepare(
                "SELECT t, usage_max, usage_mean, limit_bytes, state_max, refusing_s, aborting_s, refusals, aborts, \
                 shed FROM group_minute WHERE t >= ?1 AND t < ?2 ORDER BY t",
            )
            .map_err(db)?;
        let rows = st
            .query_map([from, to], |r| {
                Ok(Minute {
                    t: r.get::<_, i64>(0)? as u64,
                    usage_max: r.get::<_, i64>(1)? as u64,
                    usage_mean: r.get::<_, i64>(2)? as u64,
                    limit: r.get::<_, i64>(3)? as u64,
                    state_max: r.get(4)?,
                    refusing_s: r.get(5)?,
                    aborting_s: r.get(6)?,
                    refusals: r.get(7)?,
                    aborts: r.get(8)?,
                    shed: r.get::<_, i64>(9)? as u64,
                    procs: Vec::new(),
                })
            })
            .map_err(db)?;
        for m in rows {
            out.push(m.map_err(db)?);
        }
        // A database from before the processes' anon was kept (read-only: not altered) reads 0.
        let anon = if has_column(&self.conn, "process_minute", "anon_max").map_err(db)? { "anon_max" } else { "0" };
        let mut st = self
            .conn
            .prepare(&format!(
                "SELECT t, process, role, rss_max, rss_mean, requests, errors_5xx, inflight_max, p50_us, p99_us, \
                 restarts, {anon} FROM process_minute WHERE t >= ?1 AND t < ?2 ORDER BY t"
            ))
            .map_err(db)?;
        let mut rows = st.query([from, to]).map_err(db)?;
        let mut i = 0;
        while let Some(r) = rows.next().map_err(db)? {
            let t = r.get::<_, i64>(0).map_err(db)? as u64;
            let name: String = r.get(1).map_err(db)?;
            let role: String = r.get(2).map_err(db)?;
            let pm = ProcMinute {
                label: labels.intern(&name, &role),
                rss_max: r.get::<_, i64>(3).map_err(db)? as u64,
                rss_mean: r.get::<_, i64>(4).map_err(db)? as u64,
                requests: saturate(r.get::<_, i64>(5).map_err(db)?, u32::MAX),
                err5xx: saturate(r.get::<_, i64>(6).map_err(db)?, u32::MAX),
                inflight_max: r.get(7).map_err(db)?,
                p50_us: r.get(8).map_err(db)?,
                p99_us: r.get(9).map_err(db)?,
                restarts: saturate(r.get::<_, i64>(10).map_err(db)?, u16::MAX),
                anon_max: r.get::<_, i64>(11).map_err(db)?.max(0) as u64,
            };
            while i < out.len() && out[i].t < t {
                i += 1;
            }
            if let Some(m) = out.get_mut(i).filter(|m| m.t == t) {
                m.procs.push(pm);
            }
        }
        Ok(out)
    }
}

/// Whether `table` has the column `column`.
fn has_column(conn: &Connection, table: &str, column: &str) -> Result<bool, rusqlite::Error> {
    let mut st = conn.prepare(&format!("PRAGMA table_info({table})"))?;
    let names = st.query_map([], |r| r.get::<_, String>(1))?;
    for n in names {
        if n? == column {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A count from the database in the width the agent holds it: negative as 0, past the type's range as its maximum.
fn saturate<T: TryFrom<i64> + Into<i64> + Copy>(v: i64, max: T) -> T {
    T::try_from(v.clamp(0, max.into())).unwrap_or(max)
}

#[cfg(test)]
mod tests {
    use super::guard::tests::kill;
    use super::*;

    #[test]
    fn counts_past_the_held_width_saturate() {
        assert_eq!(saturate(42, u32::MAX), 42);
        assert_eq!(saturate(-5, u32::MAX), 0);
        assert_eq!(saturate(5_000_000_000, u32::MAX), u32::MAX);
        assert_eq!(saturate(70_000, u16::MAX), u16::MAX);
    }

    fn minute(t: u64, labels: &mut Labels) -> Minute {
        let a = labels.intern("master", "master");
        let b = labels.intern("tx1", "worker");
        Minute {
            t,
            usage_max: 500,
            usage_mean: 400,
            limit: 1000,
            state_max: 1,
            refusing_s: 12,
            refusals: 1,
            procs: vec![
                ProcMinute { label: a, rss_max: 300, rss_mean: 250, requests: 60, ..ProcMinute::default() },
                ProcMinute {
                    label: b,
                    rss_max: 200,
                    anon_max: 150,
                    requests: 120,
                    restarts: 1,
                    ..ProcMinute::default()
                },
            ],
            ..Minute::default()
        }
    }

    #[test]
    fn rows_survive_reopening_and_retention_deletes_old_ones() {
        let dir = std::env::temp_dir().join(format!("monitor-store-{}", std::process::id()));
        let path = dir.join("stats.db");
        let _ = std::fs::remove_dir_all(&dir);
        let mut labels = Labels::default();
        {
            let mut s = Store::open(&path).expect("open");
            for t in [0, 60, 86_400 * 3, 86_400 * 3 + 60] {
                s.insert(&minute(t, &mut labels), &labels).expect("insert");
            }
        }
        let mut s = Store::open(&path).expect("reopen");
        let mut fresh = Labels::default();
        let all = s.minutes(0, u64::MAX / 2, &mut fresh).expect("read");
        assert_eq!(all.len(), 4);
        assert_eq!(all[0], minute(0, &mut fresh));
        assert_eq!(s.retain(2, 86_400 * 4).expect("retain"), 2);
        let left = s.minutes(0, u64::MAX / 2, &mut fresh).expect("read");
        assert_eq!(left.iter().map(|m| m.t).collect::<Vec<_>>(), vec![86_400 * 3, 86_400 * 3 + 60]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn event(at_unix_ms: u64, node: &str, what: &str, from: Option<&str>, to: &str) -> ClusterEvent {
        let (node, what, to) = (node.to_string(), what.to_string(), to.to_string());
        ClusterEvent { at_unix_ms, node, what, from: from.map(String::from), to }
    }

    #[test]
    fn cluster_events_are_written_once_read_by_day_and_retained_like_the_minutes() {
        let dir = monitor_tests::temp_dir("store-events");
        let path = dir.join("stats.db");
        let day = 86_400 * 20_000;
        let joined = event(day * 1000 + 5, "b", "joined", None, "alive");
        let suspect = event(day * 1000 + 900, "b", "suspect", Some("alive"), "suspect");
        let dead = event(day * 1000 + 900, "b", "dead", Some("suspect"), "dead");
        let old = event((day - 3 * 86_400) * 1000, "c", "left", Some("alive"), "left");
        {
            let mut s = Store::open(&path).expect("open");
            assert_eq!(s.insert_events(&[old.clone(), joined.clone()]).expect("insert"), 2);
            // Sent again with the next ones (a reader that lost its place): the first two are not written twice.
            // Two events of the same millisecond keep the order they came in.
            let again = [joined.clone(), suspect.clone(), dead.clone()];
            assert_eq!(s.insert_events(&again).expect("insert again"), 2);
        }
        let mut s = Store::open(&path).expect("reopen");
        assert_eq!(s.events(day, day + 86_400).expect("read"), [joined.clone(), suspect.clone(), dead.clone()]);
        assert_eq!(s.events(0, day).expect("read"), [old]);
        assert_eq!(s.retain(2, day + 3600).expect("retain"), 0, "no minutes to delete");
        assert_eq!(s.events(0, u64::MAX / 2).expect("read"), [joined, suspect, dead], "the old event went");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_database_from_before_the_events_opens_and_reads() {
        let dir = monitor_tests::temp_dir("store-old");
        let path = dir.join("stats.db");
        {
            let old = Connection::open(&path).expect("create");
            let before = SCHEMA.split("CREATE TABLE IF NOT EXISTS cluster_event").next().unwrap_or_default();
            let before = before.replace("anon_max INTEGER NOT NULL DEFAULT 0, ", "");
            old.execute_batch(&before).expect("the tables of before");
            old.execute_batch(
                "INSERT INTO group_minute VALUES (0, 5, 4, 10, 0, 0, 0, 0, 0, 0);
                 INSERT INTO process_minute VALUES (0, 'tx1', 'worker', 3, 2, 1, 0, 0, 0, 0, 0);",
            )
            .expect("a minute of before");
        }
        let mut labels = Labels::default();
        // `monitor report` reads it as it is: no events, no error, no anon.
        let read = Store::open_read_only(&path).expect("read only");
        assert_eq!(read.events(0, u64::MAX / 2).expect("no table, no events"), []);
        assert_eq!(read.kills(0, u64::MAX / 2).expect("no table, no kills"), []);
        let old = read.minutes(0, 60, &mut labels).expect("an old minute");
        assert_eq!((old[0].procs[0].rss_max, old[0].procs[0].anon_max), (3, 0));
        drop(read);
        // The agent opens it and adds the table.
        let mut s = Store::open(&path).expect("open an old database");
        s.insert(&minute(60, &mut labels), &labels).expect("minutes as before");
        let back = s.minutes(0, 120, &mut labels).expect("read");
        assert_eq!(back[0].procs[0].anon_max, 0, "the old minute");
        assert_eq!(back[1], minute(60, &mut labels), "the new one, its anon kept");
        assert_eq!(s.insert_events(&[event(61_000, "b", "joined", None, "alive")]).expect("events"), 1);
        assert_eq!(s.events(0, 120).expect("read").len(), 1);
        assert_eq!(s.insert_kills(&[kill(62_000, 11, true)]).expect("kills"), 1);
        assert_eq!(s.kills(0, 120).expect("read").len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_corrupt_file_is_an_error_not_a_panic() {
        let path = std::env::temp_dir().join(format!("monitor-corrupt-{}.db", std::process::id()));
        std::fs::write(&path, vec![0x5a; 8192]).expect("write");
        let err = Store::open(&path).err().expect("corrupt file must not open");
        assert!(err.to_string().contains(&path.display().to_string()), "{err}");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_locked_database_is_an_error_not_a_hang() {
        let path = std::env::temp_dir().join(format!("monitor-locked-{}.db", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let holder = Connection::open(&path).expect("open");
        holder
            .execute_batch("PRAGMA journal_mode=DELETE; CREATE TABLE x(y); BEGIN EXCLUSIVE; INSERT INTO x VALUES (1);")
            .expect("lock");
        let started = std::time::Instant::now();
        assert!(Store::open(&path).is_err());
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(holder);
        let _ = std::fs::remove_file(&path);
    }
}
