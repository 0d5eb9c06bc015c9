//! The membership as this node sees it: every node it has heard of, with its state (`alive`, `suspect`, `dead`,
//! `left`), addresses, processes and when it was last heard from. Pure: the gossip driver feeds it what the crate
//! knows and the leave notices received, and reads back the changes to log and the clashes to refuse.

use super::identity::NodeId;
use super::load::{Load, Note};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::time::Instant;

/// A member's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Answers probes.
    Alive,
    /// Missed a probe; dead unless it refutes the suspicion within the dead timeout.
    Suspect,
    /// Declared down by the cluster.
    Dead,
    /// Announced that it leaves (SIGTERM).
    Left,
}

impl State {
    pub const ALL: [State; 4] = [State::Alive, State::Suspect, State::Dead, State::Left];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Alive => "alive",
            State::Suspect => "suspect",
            State::Dead => "dead",
            State::Left => "left",
        }
    }

    /// Alive or suspect: still a member its peers forward to.
    pub fn is_live(self) -> bool {
        matches!(self, State::Alive | State::Suspect)
    }
}

/// One member.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub id: NodeId,
    pub state: State,
    /// The last authentic datagram from its gossip address (None: never heard from directly).
    pub last_heard: Option<Instant>,
    /// This node itself.
    pub this: bool,
    /// Its latest load note (None: none heard yet from this run of it).
    pub load: Option<Load>,
}

/// A change of a member's state, to log and count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub node: String,
    pub gossip: SocketAddr,
    /// None: a member not known before.
    pub from: Option<State>,
    pub to: State,
}

impl Change {
    /// `joined`, `suspect`, `alive again`, `dead`, `left`.
    pub fn what(&self) -> &'static str {
        match (self.from, self.to) {
            (None | Some(State::Dead | State::Left), State::Alive | State::Suspect) => "joined",
            (_, State::Alive) => "alive again",
            (_, State::Suspect) => "suspect",
            (_, State::Dead) => "dead",
            (_, State::Left) => "left",
        }
    }
}

/// A change of a member's state as it is kept and shown: when, who, from what to what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// ms since the Unix epoch.
    pub at_unix_ms: u64,
    pub node: String,
    /// None: a member not known before.
    pub from: Option<State>,
    pub to: State,
    /// `joined`, `suspect`, `alive again`, `dead` or `left`.
    pub what: String,
}

/// The changes kept, the latest last.
pub(crate) const EVENTS_KEPT: usize = 100;

/// Process or node names that a live member shares with this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clash {
    /// The member's node name and gossip address.
    pub member: String,
    pub gossip: SocketAddr,
    /// The names both have (a shared node name is listed as `node <name>`).
    pub names: Vec<String>,
    /// This node started after the member: it is the one refused.
    pub refused: bool,
}

/// Every member this node knows, by gossip address (one member per address: a restart replaces the run before).
#[derive(Debug, Clone)]
pub struct Members {
    this: NodeId,
    by_addr: BTreeMap<SocketAddr, Member>,
    /// The last [`EVENTS_KEPT`] changes.
    events: VecDeque<Event>,
}

/// A node's leave notice: its name and the start of the run that leaves.
pub type Leave = (String, u64);

/// A leave notice as a datagram carries it: `<node> <started_ms>`.
pub(crate) fn encode_leave(node: &str, started_ms: u64) -> Vec<u8> {
    format!("{node} {started_ms}").into_bytes()
}

/// The notice of a leave datagram's payload (any bytes that are not UTF-8 replaced), when it parses.
pub fn parse_leave(payload: &[u8]) -> Option<Leave> {
    let text = String::from_utf8_lossy(payload);
    let (name, ms) = text.split_once(' ')?;
    Some((name.to_string(), ms.parse().ok()?))
}

impl Members {
    pub fn new(this: NodeId) -> Members {
        let me = Member { id: this.clone(), state: State::Alive, last_heard: None, this: true, load: None };
        Members { by_addr: BTreeMap::from([(this.gossip, me)]), this, events: VecDeque::new() }
    }

    /// This node.
    pub fn this(&self) -> &NodeId {
        &self.this
    }

    /// Applies what the gossip crate knows (each identity with its state) and the leave notices received; returns
    /// the changes. A member the crate no longer lists keeps its last state.
    pub fn update<'a>(
        &mut self,
        seen: impl IntoIterator<Item = (&'a NodeId, State)>,
        left: &HashSet<Leave>,
    ) -> Vec<Change> {
        let mut changes = Vec::new();
        for (id, state) in seen {
            if id.gossip == self.this.gossip {
                continue;
            }
            let state = match left.contains(&(id.name.clone(), id.started_ms)) {
                true => State::Left,
                false => state,
            };
            let before = self.by_addr.get(&id.gossip);
            // An older run at the same address (the crate reports both while it swaps them) changes nothing.
            if before.is_some_and(|b| (b.id.started_ms, b.id.generation) > (id.started_ms, id.generation)) {
                continue;
            }
            let from = before.map(|b| b.state);
            if from != Some(state) {
                changes.push(Change { node: id.name.clone(), gossip: id.gossip, from, to: state });
            }
            let last_heard = before.and_then(|b| b.last_heard);
            let load = before.filter(|b| b.id.started_ms == id.started_ms).and_then(|b| b.load.clone());
            self.by_addr.insert(id.gossip, Member { id: id.clone(), state, last_heard, this: false, load });
        }
        // A leave notice that came before the crate knew the member as gone.
        for m in self.by_addr.values_mut().filter(|m| !m.this && m.state != State::Left) {
            if left.contains(&(m.id.name.clone(), m.id.started_ms)) {
                changes.push(Change {
                    node: m.id.name.clone(),
                    gossip: m.id.gossip,
                    from: Some(m.state),
                    to: State::Left,
                });
                m.state = State::Left;
            }
        }
        changes
    }

    /// Keeps `changes`, seen at `at_unix_ms`, among the last [`EVENTS_KEPT`].
    pub fn record(&mut self, changes: &[Change], at_unix_ms: u64) {
        for c in changes {
            if self.events.len() == EVENTS_KEPT {
                self.events.pop_front();
            }
            let what = c.what().to_string();
            self.events.push_back(Event { at_unix_ms, node: c.node.clone(), from: c.from, to: c.to, what });
        }
    }

    /// The changes kept, oldest first.
    pub fn events(&self) -> impl Iterator<Item = &Event> {
        self.events.iter()
    }

    /// An authentic datagram came from `from`.
    pub fn heard(&mut self, from: SocketAddr, at: Instant) {
        if let Some(m) = self.by_addr.get_mut(&from) {
            m.last_heard = Some(at);
        }
    }

    /// Takes each member's latest load note, of the run it is now; true when a load changed.
    pub(crate) fn set_loads<'a>(&mut self, notes: impl IntoIterator<Item = &'a Note>) -> bool {
        let mut changed = false;
        for n in notes {
            let m = self.by_addr.get_mut(&n.gossip).filter(|m| m.id.started_ms == n.started_ms);
            if let Some(m) = m.filter(|m| m.load.as_ref() != Some(&n.load)) {
                m.load = Some(n.load.clone());
                changed = true;
            }
        }
        changed
    }

    /// Every member, this node included, by gossip address.
    pub fn iter(&self) -> impl Iterator<Item = &Member> {
        self.by_addr.values()
    }

    /// How many members are in each state, this node included (alive).
    pub fn counts(&self) -> [(State, usize); 4] {
        State::ALL.map(|s| (s, self.by_addr.values().filter(|m| m.state == s).count()))
    }

    /// The live member that owns process `name`, this node included.
    pub fn owner(&self, process: &str) -> Option<&Member> {
        self.by_addr.values().find(|m| m.state.is_live() && m.id.processes.iter().any(|p| p == process))
    }

    /// The member named `node` (of two runs by that name, the later).
    pub fn node(&self, node: &str) -> Option<&Member> {
        self.by_addr.values().filter(|m| m.id.name == node).max_by_key(|m| (m.id.started_ms, m.id.generation))
    }

    /// The member that has process `name`, in whatever state: a live one first, else the latest run.
    pub(crate) fn having(&self, process: &str) -> Option<&Member> {
        let with = self.by_addr.values().filter(|m| m.id.processes.iter().any(|p| p == process));
        with.clone().find(|m| m.state.is_live()).or_else(|| with.max_by_key(|m| (m.id.started_ms, m.id.generation)))
    }

    /// The first live member whose node name or process names this node also has.
    pub fn clash(&self) -> Option<Clash> {
        self.by_addr.values().filter(|m| !m.this && m.state.is_live()).find_map(|m| {
            let mut names: Vec<String> =
                m.id.processes.iter().filter(|p| self.this.processes.contains(p)).cloned().collect();
            if m.id.name == self.this.name {
                names.insert(0, format!("node {}", m.id.name));
            }
            if names.is_empty() {
                return None;
            }
            // The later start is refused; the same start, the higher address.
            let refused = (self.this.started_ms, self.this.gossip) > (m.id.started_ms, m.id.gossip);
            Some(Clash { member: m.id.name.clone(), gossip: m.id.gossip, names, refused })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, ip: u8, procs: &[&str], started_ms: u64) -> NodeId {
        NodeId::test(name, ip, procs, started_ms)
    }

    fn states(m: &Members) -> Vec<(String, State)> {
        m.iter().map(|m| (m.id.name.clone(), m.state)).collect()
    }

    #[test]
    fn states_follow_the_crate_and_the_leave_notices() {
        let a = node("a", 2, &["a0", "a1"], 10);
        let b = node("b", 3, &["b0"], 20);
        let c = node("c", 4, &["c0"], 30);
        let mut m = Members::new(a.clone());
        let none = HashSet::new();
        // (step, what the crate lists, leave notices, changes wanted as (node, what), states after)
        let ch = m.update([(&b, State::Alive), (&c, State::Alive)], &none);
        let whats: Vec<(&str, &str)> = ch.iter().map(|c| (c.node.as_str(), c.what())).collect();
        assert_eq!(whats, [("b", "joined"), ("c", "joined")]);
        assert!(m.update([(&b, State::Alive), (&c, State::Alive)], &none).is_empty(), "no change, no event");
        let ch = m.update([(&b, State::Suspect), (&c, State::Alive)], &none);
        assert_eq!(ch.iter().map(Change::what).collect::<Vec<_>>(), ["suspect"]);
        let ch = m.update([(&b, State::Alive)], &none);
        assert_eq!(ch.iter().map(Change::what).collect::<Vec<_>>(), ["alive again"]);
        let ch = m.update([(&b, State::Dead)], &none);
        assert_eq!(ch.iter().map(Change::what).collect::<Vec<_>>(), ["dead"]);
        // A leave notice marks c left while the crate still has it alive: peers stop forwarding at once.
        let left = HashSet::from([("c".to_string(), 30)]);
        let ch = m.update([(&c, State::Alive)], &left);
        assert_eq!((ch[0].node.as_str(), ch[0].what()), ("c", "left"));
        let ch = m.update([(&c, State::Dead)], &left);
        assert!(ch.is_empty(), "left stays left when the crate declares it down: {ch:?}");
        assert_eq!(states(&m), [("a".into(), State::Alive), ("b".into(), State::Dead), ("c".into(), State::Left)]);
        assert_eq!(m.counts(), [(State::Alive, 1), (State::Suspect, 0), (State::Dead, 1), (State::Left, 1)]);
        // c restarted: a new run at the same address joins; the notice of the old run does not apply.
        let c2 = NodeId { started_ms: 40, ..c.clone() };
        let ch = m.update([(&c2, State::Alive)], &left);
        assert_eq!((ch[0].what(), ch[0].from), ("joined", Some(State::Left)));
        // The older run, still listed while the crate swaps them, changes nothing.
        assert!(m.update([(&c, State::Dead)], &left).is_empty());
        assert_eq!(m.owner("c0").map(|o| o.id.started_ms), Some(40));
        assert_eq!(m.owner("a1").map(|o| o.this), Some(true));
        assert_eq!(m.owner("b0"), None, "a dead member owns nothing");
        // Loads are taken for the run a member is now, and only a change counts.
        let load = |r: f64| crate::cluster::Load { memory_ratio: r, policy: "normal".into() };
        let note = |id: &NodeId, r: f64| Note { gossip: id.gossip, started_ms: id.started_ms, seq: 0, load: load(r) };
        assert!(m.set_loads([&note(&c2, 0.5), &note(&c, 0.9)]));
        assert!(!m.set_loads([&note(&c2, 0.5)]), "the same load again is no change");
        assert_eq!(m.node("c").and_then(|x| x.load.clone()), Some(load(0.5)));
        assert_eq!(m.node("b").and_then(|x| x.load.clone()), None);
        assert_eq!(m.owner("zz"), None);
        // This node is never replaced by what the crate says of its address.
        m.update([(&NodeId { name: "x".into(), ..a.clone() }, State::Dead)], &none);
        assert_eq!(m.this().name, "a");
        assert!(m.iter().any(|x| x.this && x.id.name == "a" && x.state == State::Alive));
    }

    #[test]
    fn changes_are_kept_with_their_time_the_latest_hundred() {
        let mut m = Members::new(node("a", 2, &["a0"], 10));
        let b = node("b", 3, &["b0"], 20);
        let ch = m.update([(&b, State::Alive)], &HashSet::new());
        m.record(&ch, 1_000);
        let ch = m.update([(&b, State::Dead)], &HashSet::new());
        m.record(&ch, 2_000);
        let got: Vec<(u64, &str, Option<State>, State, &str)> =
            m.events().map(|e| (e.at_unix_ms, e.node.as_str(), e.from, e.to, e.what.as_str())).collect();
        assert_eq!(
            got,
            [(1_000, "b", None, State::Alive, "joined"), (2_000, "b", Some(State::Alive), State::Dead, "dead")]
        );
        let flap = [Change { node: "b".into(), gossip: b.gossip, from: Some(State::Alive), to: State::Suspect }];
        for i in 0..150 {
            m.record(&flap, 3_000 + i);
        }
        assert_eq!(m.events().count(), EVENTS_KEPT);
        assert_eq!(m.events().last().map(|e| e.at_unix_ms), Some(3_149));
        assert_eq!(m.events().next().map(|e| e.at_unix_ms), Some(3_050));
    }

    #[test]
    fn leave_notices_round_trip_and_bad_ones_are_none() {
        assert_eq!(parse_leave(&encode_leave("a", 17)), Some(("a".into(), 17)));
        type Case<'a> = (&'a [u8], Option<(&'a str, u64)>);
        let cases: &[Case<'_>] = &[
            (b"b 1700000000000", Some(("b", 1_700_000_000_000))),
            (b" 5", Some(("", 5))),
            (b"a\xff 5", Some(("a\u{fffd}", 5))),
            (b"a", None),
            (b"a b", None),
            (b"a 5 6", None),
            (b"a -5", None),
            (b"a 18446744073709551616", None),
            (b"", None),
        ];
        for (payload, want) in cases {
            let want = want.map(|(n, ms)| (n.to_string(), ms));
            assert_eq!(parse_leave(payload), want, "{:?}", String::from_utf8_lossy(payload));
        }
    }

    #[test]
    fn last_heard_is_kept_per_address() {
        let a = node("a", 2, &["a0"], 10);
        let b = node("b", 3, &["b0"], 20);
        let mut m = Members::new(a);
        let at = Instant::now();
        m.heard(b.gossip, at);
        assert!(m.iter().all(|x| x.last_heard.is_none()), "unknown address: nothing to note");
        m.update([(&b, State::Alive)], &HashSet::new());
        m.heard(b.gossip, at);
        m.update([(&b, State::Suspect)], &HashSet::new());
        assert_eq!(m.iter().find(|x| x.id.name == "b").and_then(|x| x.last_heard), Some(at));
    }

    #[test]
    fn clashes_name_the_names_and_refuse_the_later_start() {
        let none = HashSet::new();
        // (this node, the other member, its state, the clash wanted as (names, refused))
        type Want = Option<(Vec<&'static str>, bool)>;
        let cases: [(NodeId, NodeId, State, Want); 6] = [
            (node("a", 2, &["m0", "tx1"], 10), node("b", 3, &["m1", "tx2"], 5), State::Alive, None),
            (
                node("a", 2, &["m0", "tx1"], 10),
                node("b", 3, &["m1", "tx1"], 5),
                State::Alive,
                Some((vec!["tx1"], true)),
            ),
            (
                node("a", 2, &["m0", "tx1"], 10),
                node("b", 3, &["m0", "tx1"], 50),
                State::Suspect,
                Some((vec!["m0", "tx1"], false)),
            ),
            (node("a", 2, &["m0"], 10), node("a", 3, &["m1"], 10), State::Alive, Some((vec!["node a"], false))),
            (node("a", 4, &["m0"], 10), node("b", 3, &["m0"], 10), State::Alive, Some((vec!["m0"], true))),
            (node("a", 2, &["m0"], 10), node("b", 3, &["m0"], 5), State::Dead, None),
        ];
        for (this, other, state, want) in cases {
            let mut m = Members::new(this.clone());
            m.update([(&other, state)], &none);
            let got = m.clash().map(|c| {
                assert_eq!((c.member.as_str(), c.gossip), (other.name.as_str(), other.gossip));
                (c.names, c.refused)
            });
            let want = want.map(|(n, r)| (n.into_iter().map(String::from).collect::<Vec<_>>(), r));
            assert_eq!(got, want, "{this:?} against {other:?} {state:?}");
        }
    }
}
