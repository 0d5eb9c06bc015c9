//! A member's identity as the gossip crate carries it: the node's name, where to reach it, the names of its
//! processes and when it started. Gossiped with every membership update, so each node knows which node owns the
//! prefix of any cache id without asking.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// One node of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NodeId {
    /// `[cluster] node`.
    pub name: String,
    /// Where gossip reaches it: its address in the membership (one member per address).
    pub gossip: SocketAddr,
    /// Where peers forward requests for its caches.
    pub front: SocketAddr,
    /// Where its API answers (`/api/v1/status`), for the fleet's merged views.
    pub web: SocketAddr,
    /// Its `[[process]]` names, the cache-id prefixes it owns.
    pub processes: Vec<String>,
    /// When this run of the node started (ms since the Unix epoch): a restarted node's identity wins over the
    /// one it had before, and of two nodes that clash, the later one is refused.
    pub started_ms: u64,
    /// Bumped each time the node rejoins after being declared dead (a healed partition).
    pub generation: u32,
}

impl NodeId {
    /// A stand-in for a seed known only by its address: the crate accepts an announce sent to any identity with
    /// the receiver's address.
    pub fn seed(gossip: SocketAddr) -> NodeId {
        NodeId {
            name: String::new(),
            gossip,
            front: gossip,
            web: gossip,
            processes: Vec::new(),
            started_ms: 0,
            generation: 0,
        }
    }

    /// A node for the unit tests: `name` at 127.0.0.`ip` (gossip 7946, front door 8080, API 9464), owning `procs`.
    #[cfg(test)]
    pub(crate) fn test(name: &str, ip: u8, procs: &[&str], started_ms: u64) -> NodeId {
        let at = |port| SocketAddr::from(([127, 0, 0, ip], port));
        NodeId {
            name: name.into(),
            gossip: at(7946),
            front: at(8080),
            web: at(9464),
            processes: procs.iter().map(|p| p.to_string()).collect(),
            started_ms,
            generation: 0,
        }
    }

    /// Of two runs at one address, the one that wins: the later start, then the later generation.
    fn newer_than(&self, other: &NodeId) -> bool {
        (self.started_ms, self.generation) > (other.started_ms, other.generation)
    }
}

impl foca::Identity for NodeId {
    type Addr = SocketAddr;

    /// Declared dead while still running (a partition that healed): rejoin at once as the next generation.
    fn renew(&self) -> Option<Self> {
        Some(NodeId { generation: self.generation.wrapping_add(1), ..self.clone() })
    }

    fn addr(&self) -> SocketAddr {
        self.gossip
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        self.newer_than(adversary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use foca::Identity;

    #[test]
    fn a_restart_or_a_rejoin_wins_its_address() {
        let a = NodeId {
            name: "a".into(),
            gossip: "127.0.0.2:7946".parse().expect("addr"),
            front: "127.0.0.2:8080".parse().expect("addr"),
            web: "127.0.0.2:9464".parse().expect("addr"),
            processes: vec!["m0".into(), "tx1".into()],
            started_ms: 1000,
            generation: 0,
        };
        let rejoined = a.renew().expect("renews");
        assert_eq!((rejoined.generation, rejoined.addr()), (1, a.addr()));
        assert!(rejoined.win_addr_conflict(&a) && !a.win_addr_conflict(&rejoined));
        let restarted = NodeId { started_ms: 2000, ..a.clone() };
        assert!(restarted.win_addr_conflict(&rejoined) && !rejoined.win_addr_conflict(&restarted));
        assert_eq!(NodeId::seed(a.gossip).addr(), a.addr());
    }
}
