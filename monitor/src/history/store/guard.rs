//! The guard's rows in the stats database: each kill of the last resort (`guard_kill`) and each recycle
//! (`guard_recycle`) as it happens, read back by time range for the home page's markers and the daily report.

use super::{db, Store};
use crate::history::events::{KillEvent, RecycleEvent};
use crate::history::HistoryError;
use rusqlite::params;

impl Store {
    /// Writes the guard's kills, each once (same time and pid). Returns how many were new.
    pub(crate) fn insert_kills(&mut self, kills: &[KillEvent]) -> Result<usize, HistoryError> {
        let tx = self.conn.transaction().map_err(db)?;
        let mut n = 0;
        {
            let mut st = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO guard_kill VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                )
                .map_err(db)?;
            for k in kills {
                n += st
                    .execute(params![
                        k.at_unix_ms.min(i64::MAX as u64) as i64,
                        k.pid,
                        k.process,
                        k.role,
                        k.why,
                        k.reason,
                        k.rss_bytes.min(i64::MAX as u64) as i64,
                        k.anon_bytes.min(i64::MAX as u64) as i64,
                        k.ratio,
                        k.round,
                        k.enforced,
                        k.error
                    ])
                    .map_err(db)?;
            }
        }
        tx.commit().map_err(db)?;
        Ok(n)
    }

    /// The guard's kills in `[from, to)` (Unix seconds), oldest first; none in a database written before kills
    /// were kept.
    pub fn kills(&self, from: u64, to: u64) -> Result<Vec<KillEvent>, HistoryError> {
        if !self.has_table("guard_kill")? {
            return Ok(Vec::new());
        }
        let ms = |s: u64| s.saturating_mul(1000).min(i64::MAX as u64) as i64;
        let mut st = self
            .conn
            .prepare(
                "SELECT at_ms, pid, process, role, why, reason, rss_bytes, anon_bytes, ratio, round, enforced, error \
                 FROM guard_kill WHERE at_ms >= ?1 AND at_ms < ?2 ORDER BY at_ms, rowid",
            )
            .map_err(db)?;
        let rows = st
            .query_map([ms(from), ms(to)], |r| {
                Ok(KillEvent {
                    at_unix_ms: r.get::<_, i64>(0)?.max(0) as u64,
                    pid: r.get(1)?,
                    process: r.get(2)?,
                    role: r.get(3)?,
                    why: r.get(4)?,
                    reason: r.get(5)?,
                    rss_bytes: r.get::<_, i64>(6)?.max(0) as u64,
                    anon_bytes: r.get::<_, i64>(7)?.max(0) as u64,
                    ratio: r.get(8)?,
                    round: r.get(9)?,
                    enforced: r.get(10)?,
                    error: r.get(11)?,
                })
            })
            .map_err(db)?;
        rows.map(|r| r.map_err(db)).collect()
    }

    /// Writes the guard's recycles, each once (same time and pid). Returns how many were new.
    pub(crate) fn insert_recycles(&mut self, recycles: &[RecycleEvent]) -> Result<usize, HistoryError> {
        let tx = self.conn.transaction().map_err(db)?;
        let mut n = 0;
        {
            let mut st = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO guard_recycle VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                )
                .map_err(db)?;
            for r in recycles {
                n += st
                    .execute(params![
                        r.at_unix_ms.min(i64::MAX as u64) as i64,
                        r.pid,
                        r.process,
                        r.role,
                        r.reason,
                        r.anon_bytes.min(i64::MAX as u64) as i64,
                        r.ratio,
                        r.signal,
                        r.drained_ms.min(i64::MAX as u64) as i64,
                        r.enforced,
                        r.error
                    ])
                    .map_err(db)?;
            }
        }
        tx.commit().map_err(db)?;
        Ok(n)
    }

    /// The guard's recycles in `[from, to)` (Unix seconds), oldest first; none in a database written before
    /// recycles were kept.
    pub fn recycles(&self, from: u64, to: u64) -> Result<Vec<RecycleEvent>, HistoryError> {
        if !self.has_table("guard_recycle")? {
            return Ok(Vec::new());
        }
        let ms = |s: u64| s.saturating_mul(1000).min(i64::MAX as u64) as i64;
        let mut st = self
            .conn
            .prepare(
                "SELECT at_ms, pid, process, role, reason, anon_bytes, ratio, signal, drained_ms, enforced, error \
                 FROM guard_recycle WHERE at_ms >= ?1 AND at_ms < ?2 ORDER BY at_ms, rowid",
            )
            .map_err(db)?;
        let rows = st
            .query_map([ms(from), ms(to)], |r| {
                Ok(RecycleEvent {
                    at_unix_ms: r.get::<_, i64>(0)?.max(0) as u64,
                    pid: r.get(1)?,
                    process: r.get(2)?,
                    role: r.get(3)?,
                    reason: r.get(4)?,
                    anon_bytes: r.get::<_, i64>(5)?.max(0) as u64,
                    ratio: r.get(6)?,
                    signal: r.get(7)?,
                    drained_ms: r.get::<_, i64>(8)?.max(0) as u64,
                    enforced: r.get(9)?,
                    error: r.get(10)?,
                })
            })
            .map_err(db)?;
        rows.map(|r| r.map_err(db)).collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A kill of `node` at `kill_at`, not sent unless `enforced`.
    pub(crate) fn kill(at_unix_ms: u64, pid: u32, enforced: bool) -> KillEvent {
        KillEvent {
            at_unix_ms,
            pid,
            process: "node".into(),
            role: "worker".into(),
            why: "over_kill_at".into(),
            reason: "the group reached kill_at (97% of its limit)".into(),
            rss_bytes: 300 << 20,
            anon_bytes: 280 << 20,
            ratio: 0.975,
            round: 1,
            enforced,
            error: (!enforced).then(|| "x".to_string()),
        }
    }

    #[test]
    fn kills_are_written_once_read_by_day_and_retained_like_the_minutes() {
        let dir = monitor_tests::temp_dir("store-kills");
        let path = dir.join("stats.db");
        let day = 1_800_000_000 / 86_400 * 86_400;
        let old = kill(1000, 7, true);
        let a = kill(day * 1000 + 5_000, 11, true);
        let b = kill(day * 1000 + 9_000, 12, false);
        {
            let mut s = Store::open(&path).expect("open");
            assert_eq!(s.insert_kills(&[old.clone(), a.clone()]).expect("insert"), 2);
            assert_eq!(s.insert_kills(&[a.clone(), b.clone()]).expect("insert again"), 1, "each once");
        }
        let mut s = Store::open(&path).expect("reopen");
        assert_eq!(s.kills(day, day + 86_400).expect("read"), [a.clone(), b.clone()]);
        s.retain(30, day + 86_400).expect("retain");
        assert_eq!(s.kills(0, u64::MAX / 2).expect("read"), [a, b], "the old kill went");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A recycle of `node` with SIGTERM after a drain, not sent unless `enforced`.
    pub(crate) fn recycle(at_unix_ms: u64, pid: u32, enforced: bool) -> RecycleEvent {
        RecycleEvent {
            at_unix_ms,
            pid,
            process: "node".into(),
            role: "worker".into(),
            reason: "it obeyed the abort 20.0 s ago (no growth for 12.0 s) but still holds its memory".into(),
            anon_bytes: 280 << 20,
            ratio: 0.88,
            signal: enforced.then(|| "TERM".to_string()),
            drained_ms: 1_200,
            enforced,
            error: None,
        }
    }

    #[test]
    fn recycles_are_written_once_read_by_day_and_retained_apart_from_the_kills() {
        let dir = monitor_tests::temp_dir("store-recycles");
        let path = dir.join("stats.db");
        let day = 1_800_000_000 / 86_400 * 86_400;
        let old = recycle(1000, 7, true);
        let a = recycle(day * 1000 + 5_000, 11, true);
        let b = RecycleEvent {
            error: Some("no [actions] recycle_signal is set".into()),
            ..recycle(a.at_unix_ms, 12, true)
        };
        {
            let mut s = Store::open(&path).expect("open");
            assert_eq!(s.insert_recycles(&[old.clone(), a.clone()]).expect("insert"), 2);
            assert_eq!(s.insert_recycles(&[a.clone(), b.clone()]).expect("insert again"), 1, "each once");
            assert_eq!(s.insert_kills(&[kill(a.at_unix_ms, 11, true)]).expect("a kill"), 1, "a kill of the same time");
        }
        let mut s = Store::open(&path).expect("reopen");
        assert_eq!(s.recycles(day, day + 86_400).expect("read"), [a.clone(), b.clone()], "in the order they came");
        assert_eq!(s.kills(day, day + 86_400).expect("read").len(), 1, "the kills apart");
        s.retain(30, day + 86_400).expect("retain");
        assert_eq!(s.recycles(0, u64::MAX / 2).expect("read"), [a, b], "the old recycle went");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A database of an agent that kept kills but not recycles: read as it is, it has no recycles; opened by the
    /// agent, it gets the table and keeps its kills.
    #[test]
    fn a_database_from_before_the_recycles_opens_and_reads() {
        let dir = monitor_tests::temp_dir("store-before-recycles");
        let path = dir.join("stats.db");
        {
            let old = rusqlite::Connection::open(&path).expect("create");
            let (before, after) =
                super::super::SCHEMA.split_once("CREATE TABLE IF NOT EXISTS guard_recycle").expect("it");
            let after = after.split_once(";").map_or("", |(_, rest)| rest);
            old.execute_batch(&format!("{before}{after}")).expect("the tables of before");
            let k = kill(5_000, 11, true);
            old.execute(
                "INSERT INTO guard_kill VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                params![5_000, 11, k.process, k.role, k.why, k.reason, 1, 1, k.ratio, 1, true, k.error],
            )
            .expect("a kill of before");
        }
        let read = Store::open_read_only(&path).expect("read only");
        assert_eq!(read.recycles(0, u64::MAX / 2).expect("no table, no recycles"), []);
        assert_eq!(read.kills(0, u64::MAX / 2).expect("its kills").len(), 1);
        drop(read);
        let mut s = Store::open(&path).expect("open an old database");
        assert_eq!(s.insert_recycles(&[recycle(6_000, 11, true)]).expect("recycles"), 1);
        assert_eq!(s.recycles(0, 60).expect("read"), [recycle(6_000, 11, true)]);
        assert_eq!(s.kills(0, 60).expect("its kills").len(), 1);
        s.retain(1, 86_400 * 3).expect("retain");
        assert_eq!(s.recycles(0, 60).expect("read"), [], "retained like the kills");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
