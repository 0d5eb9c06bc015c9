//! Each node's load, gossiped as a custom broadcast of the gossip crate: its group's memory ratio and its policy
//! state, numbered so that a newer note replaces an older one on its way through the cluster. The note is text,
//! `<gossip addr> <started_ms> <seq> <ratio> <policy>`; the datagram that carries it is sealed like any other.

use super::identity::NodeId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// A node's load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Load {
    /// The group's memory usage over its limit (`/api/v1/status` `group.ratio`).
    pub memory_ratio: f64,
    /// The policy's state: `normal`, `refusing` or `aborting`.
    pub policy: String,
}

/// One node's load, numbered.
#[derive(Debug, Clone, PartialEq)]
pub struct Note {
    pub gossip: SocketAddr,
    pub started_ms: u64,
    pub seq: u64,
    pub load: Load,
}

/// Why a note was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed load note")]
pub struct NoteError;

impl Note {
    pub(crate) fn encode(&self) -> String {
        format!("{} {} {} {} {}", self.gossip, self.started_ms, self.seq, self.load.memory_ratio, self.load.policy)
    }

    pub fn decode(data: &[u8]) -> Result<Note, NoteError> {
        let text = std::str::from_utf8(data).map_err(|_| NoteError)?;
        let mut f = text.split(' ');
        let mut next = || f.next().ok_or(NoteError);
        let gossip = next()?.parse().map_err(|_| NoteError)?;
        let started_ms = next()?.parse().map_err(|_| NoteError)?;
        let seq = next()?.parse().map_err(|_| NoteError)?;
        let memory_ratio: f64 = next()?.parse().map_err(|_| NoteError)?;
        let policy = next()?;
        let known = matches!(policy, "normal" | "refusing" | "aborting");
        if !memory_ratio.is_finite() || !known || f.next().is_some() {
            return Err(NoteError);
        }
        Ok(Note { gossip, started_ms, seq, load: Load { memory_ratio, policy: policy.to_string() } })
    }

    /// The order of notes from one address: a later run, then a later number.
    fn rank(&self) -> (u64, u64) {
        (self.started_ms, self.seq)
    }
}

/// The latest note of each node, shared by the crate's handler and the driver.
pub type Loads = Arc<Mutex<BTreeMap<SocketAddr, Note>>>;

/// What identifies a note in the crate's backlog: a newer one of the same address replaces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    gossip: SocketAddr,
    rank: (u64, u64),
}

impl foca::Invalidates for Key {
    fn invalidates(&self, other: &Self) -> bool {
        self.gossip == other.gossip && self.rank >= other.rank
    }
}

/// The crate's handler of load notes: keeps the newest of each node and passes only news on.
pub struct Handler {
    pub loads: Loads,
}

impl foca::BroadcastHandler<NodeId> for Handler {
    type Key = Key;
    type Error = NoteError;

    fn receive_item(&mut self, data: &[u8], _sender: Option<&NodeId>) -> Result<Option<Key>, NoteError> {
        let note = Note::decode(data)?;
        let mut loads = self.loads.lock().unwrap_or_else(|p| p.into_inner());
        if loads.get(&note.gossip).is_some_and(|old| old.rank() >= note.rank()) {
            return Ok(None);
        }
        let key = Key { gossip: note.gossip, rank: note.rank() };
        loads.insert(note.gossip, note);
        Ok(Some(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use foca::{BroadcastHandler, Invalidates};

    fn note(seq: u64, started_ms: u64, ratio: f64) -> Note {
        Note {
            gossip: "127.0.0.2:7946".parse().expect("addr"),
            started_ms,
            seq,
            load: Load { memory_ratio: ratio, policy: "refusing".into() },
        }
    }

    #[test]
    fn notes_round_trip_and_bad_ones_are_refused() {
        let n = note(3, 10, 0.875);
        assert_eq!(n.encode(), "127.0.0.2:7946 10 3 0.875 refusing");
        assert_eq!(Note::decode(n.encode().as_bytes()), Ok(n));
        for bad in [
            "",
            "127.0.0.2:7946 10 3 0.875",
            "127.0.0.2:7946 10 3 0.875 refusing extra",
            "127.0.0.2:7946 10 3 NaN normal",
            "127.0.0.2:7946 10 3 0.5 sleeping",
            "nowhere 10 3 0.5 normal",
            "127.0.0.2:7946 -1 3 0.5 normal",
        ] {
            assert_eq!(Note::decode(bad.as_bytes()), Err(NoteError), "{bad:?}");
        }
        assert_eq!(Note::decode(&[0xff, 0xfe]), Err(NoteError));
    }

    #[test]
    fn only_newer_notes_are_kept_and_passed_on() {
        let loads = Loads::default();
        let mut h = Handler { loads: loads.clone() };
        let take = |h: &mut Handler, n: &Note| h.receive_item(n.encode().as_bytes(), None).expect("a note");
        // (note, passed on)
        let steps = [
            (note(1, 10, 0.1), true),
            (note(1, 10, 0.1), false),
            (note(0, 10, 0.9), false),
            (note(2, 10, 0.2), true),
            (note(0, 20, 0.3), true),
            (note(5, 10, 0.9), false),
        ];
        for (n, passed) in steps {
            assert_eq!(take(&mut h, &n).is_some(), passed, "{n:?}");
        }
        let kept = loads.lock().map(|l| l.values().cloned().collect::<Vec<_>>()).expect("lock");
        assert_eq!(kept, [note(0, 20, 0.3)], "the restarted run's note");
        let k = |seq, started| Key { gossip: "127.0.0.2:7946".parse().expect("addr"), rank: (started, seq) };
        assert!(k(2, 10).invalidates(&k(1, 10)) && !k(1, 10).invalidates(&k(2, 10)));
        let other = Key { gossip: "127.0.0.3:7946".parse().expect("addr"), rank: (0, 0) };
        assert!(!k(9, 99).invalidates(&other));
        assert!(h.receive_item(b"junk", None).is_err());
    }
}
