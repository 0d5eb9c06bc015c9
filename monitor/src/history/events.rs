//! Events for the stats database: the cluster membership's changes of the members' states (the last hundred the
//! membership keeps in memory, `/api/v1/cluster`'s `events`), picked out as they come so that each is written once,
//! and the guard's kills and recycles as the published samples carry them.

use crate::cluster::members::Event;
use crate::cluster::Members;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tokio::sync::watch;

/// The membership as it changes (`Membership::watch()`): the history reads its events from it.
pub type ClusterView = watch::Receiver<Arc<Members>>;

/// A change of a member's state as the stats database and the daily report keep it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterEvent {
    /// When this node saw the change, in ms since the Unix epoch.
    pub at_unix_ms: u64,
    pub node: String,
    /// `joined`, `suspect`, `alive again`, `dead` or `left`.
    pub what: String,
    /// The state before (`alive`, `suspect`, `dead`, `left`); None for a member not known before.
    pub from: Option<String>,
    /// The state after.
    pub to: String,
}

/// A kill of the guard's last resort as the stats database and the daily report keep it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KillEvent {
    /// When the kill was decided, in ms since the Unix epoch.
    pub at_unix_ms: u64,
    pub pid: u32,
    /// The command name.
    pub process: String,
    pub role: String,
    /// `over_kill_at` or `abort_not_obeyed`, and in words.
    pub why: String,
    pub reason: String,
    pub rss_bytes: u64,
    pub anon_bytes: u64,
    pub ratio: f64,
    pub round: u32,
    /// False in shadow mode: decided, never sent.
    pub enforced: bool,
    /// Why the SIGKILL was not sent, when it was not.
    pub error: Option<String>,
}

impl From<&crate::guard::KillRecord> for KillEvent {
    fn from(r: &crate::guard::KillRecord) -> KillEvent {
        KillEvent {
            at_unix_ms: r.unix_ms,
            pid: r.pid,
            process: r.name.clone(),
            role: r.role.to_string(),
            why: r.why.to_string(),
            reason: r.reason.clone(),
            rss_bytes: r.rss_bytes,
            anon_bytes: r.anon_bytes,
            ratio: r.ratio,
            round: r.round,
            enforced: r.enforced,
            error: r.error.clone(),
        }
    }
}

/// A recycle of the guard (a graceful restart of a process that obeyed its abort but kept the group over
/// `refuse_at`) as the stats database and the daily report keep it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecycleEvent {
    /// When the recycle was sent (or decided, or found impossible), in ms since the Unix epoch.
    pub at_unix_ms: u64,
    pub pid: u32,
    /// The configured name under `monitor run`, else the command name.
    pub process: String,
    pub role: String,
    /// Why, in words.
    pub reason: String,
    pub anon_bytes: u64,
    /// The group's ratio when it was decided.
    pub ratio: f64,
    /// The signal sent (`TERM` under `monitor run`, `[actions] recycle_signal` under `monitor agent`), when one was.
    pub signal: Option<String>,
    /// How long its requests in flight were waited for before the signal (under `monitor run`).
    pub drained_ms: u64,
    /// False in shadow mode: decided, never sent.
    pub enforced: bool,
    /// Why it was not sent, when it was not.
    pub error: Option<String>,
}

impl From<&crate::guard::RecycleRecord> for RecycleEvent {
    fn from(r: &crate::guard::RecycleRecord) -> RecycleEvent {
        RecycleEvent {
            at_unix_ms: r.unix_ms,
            pid: r.pid,
            process: r.name.clone(),
            role: r.role.to_string(),
            reason: r.reason.clone(),
            anon_bytes: r.anon_bytes,
            ratio: r.ratio,
            signal: r.signal.clone(),
            drained_ms: r.drained_ms,
            enforced: r.enforced,
            error: r.error.clone(),
        }
    }
}

impl From<&Event> for ClusterEvent {
    fn from(e: &Event) -> ClusterEvent {
        ClusterEvent {
            at_unix_ms: e.at_unix_ms,
            node: e.node.clone(),
            what: e.what.clone(),
            from: e.from.map(|s| s.as_str().to_string()),
            to: e.to.as_str().to_string(),
        }
    }
}

/// Where the reading of the membership's events stands: the last event taken.
#[derive(Debug, Default)]
pub struct Cursor {
    last: Option<Event>,
}

impl Cursor {
    /// The events of `events` (oldest first, as the membership keeps them) after the last one taken, all of them
    /// when that one is no longer kept. Taking one twice is harmless: the database keeps one row per
    /// (time, node, what).
    pub fn take<'a>(&mut self, events: impl Iterator<Item = &'a Event>) -> Vec<ClusterEvent> {
        let all: Vec<&Event> = events.collect();
        let from = match &self.last {
            Some(last) => all.iter().rposition(|e| *e == last).map_or(0, |i| i + 1),
            None => 0,
        };
        if let Some(e) = all.last() {
            self.last = Some((*e).clone());
        }
        all[from..].iter().map(|e| ClusterEvent::from(*e)).collect()
    }
}

/// Waits for the next change of the membership; false once it has stopped. Without a membership (no `[cluster]`,
/// or no stats database) it waits for ever, so that a `select!` over it only ever takes its other branches.
pub async fn changed(view: &mut Option<ClusterView>) -> bool {
    match view {
        Some(v) => v.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

/// The events of the membership's present view not taken yet (marking the view seen).
pub fn take(cursor: &mut Cursor, view: &mut ClusterView) -> Vec<ClusterEvent> {
    let members = view.borrow_and_update().clone();
    cursor.take(members.events())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::members::{Change, Members};
    use crate::cluster::{NodeId, State};

    #[test]
    fn each_event_is_taken_once_even_past_the_hundred_kept() {
        let b = NodeId::test("b", 3, &["b0"], 20);
        let mut m = Members::new(NodeId::test("a", 2, &["a0"], 10));
        let mut cursor = Cursor::default();
        assert!(cursor.take(m.events()).is_empty(), "no events yet");
        let change = |from, to| Change { node: "b".into(), gossip: b.gossip, from, to };
        m.record(&[change(None, State::Alive)], 1_000);
        let got = cursor.take(m.events());
        let want =
            ClusterEvent { at_unix_ms: 1_000, node: "b".into(), what: "joined".into(), from: None, to: "alive".into() };
        assert_eq!(got, [want]);
        assert!(cursor.take(m.events()).is_empty(), "taken once");
        m.record(&[change(Some(State::Alive), State::Suspect), change(Some(State::Suspect), State::Dead)], 2_000);
        let got: Vec<(u64, String, Option<String>)> =
            cursor.take(m.events()).into_iter().map(|e| (e.at_unix_ms, e.what, e.from)).collect();
        assert_eq!(
            got,
            [(2_000, "suspect".into(), Some("alive".into())), (2_000, "dead".into(), Some("suspect".into()))]
        );
        // More changes than the membership keeps between two reads: all those still kept are taken.
        for i in 0..150 {
            m.record(&[change(Some(State::Alive), State::Suspect)], 3_000 + i);
        }
        let got = cursor.take(m.events());
        assert_eq!(got.len(), crate::cluster::members::EVENTS_KEPT);
        assert_eq!(got.last().map(|e| e.at_unix_ms), Some(3_149));
    }
}
