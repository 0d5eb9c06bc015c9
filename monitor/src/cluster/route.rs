//! Where a request with a cache id goes in a cluster: a pure function of the id's owner (from a verified token or a
//! plain prefix), the membership view, whether the request was already forwarded once, and `[cluster] fallback`.
//! The front door then either routes it among its own processes ([`crate::config::route::Table::select`]), forwards it,
//! or answers it.

use super::members::Members;
use crate::config::Fallback;
use std::net::SocketAddr;

/// Who owns the cache a request names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner<'a> {
    /// No cache id: any node may serve it.
    None,
    /// A verified token: the node and process it was minted for.
    Token { node: &'a str, process: &'a str },
    /// An unsigned id: the process named by its prefix.
    Prefix(&'a str),
}

/// The decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Served here, by the front door's own rules.
    Local,
    /// Forwarded to the owner node's front door, with the signed hop header.
    Forward { node: String, front: SocketAddr },
    /// 503 `owner-node-unavailable` with `Retry-After`: the owner node is dead, left or unknown, or a forwarded
    /// request reached a node that is not its owner (never forwarded twice).
    Unavailable { node: String },
    /// `fallback = "any"`: served here although another node owns the cache, with
    /// `X-Route-Fallback: owner-node-down`.
    Fallback { node: String },
}

/// The `X-Route-Fallback` value of [`Decision::Fallback`].
pub(crate) const OWNER_NODE_DOWN: &str = "owner-node-down";

/// Where a request whose cache is owned by `owner` goes. `hop`: it was forwarded here by a member.
pub fn decide(owner: Owner<'_>, members: &Members, hop: bool, fallback: Fallback) -> Decision {
    let this = &members.this().name;
    let down = |node: &str| match fallback {
        Fallback::None => Decision::Unavailable { node: node.to_string() },
        Fallback::Any => Decision::Fallback { node: node.to_string() },
    };
    let node = match owner {
        Owner::None => return Decision::Local,
        Owner::Token { node, .. } if node == this => return Decision::Local,
        Owner::Token { node, .. } => members.node(node),
        Owner::Prefix(p) if members.this().processes.iter().any(|x| x == p) => return Decision::Local,
        Owner::Prefix(p) => match members.having(p) {
            Some(m) => Some(m),
            // No member has it: the local rules answer (a process says cache-id-unknown).
            None => return Decision::Local,
        },
    };
    // A prefix's owner is always a known member here; a token may name a node never heard of.
    let name = match (node, owner) {
        (Some(m), _) => m.id.name.clone(),
        (None, Owner::Token { node, .. }) => node.to_string(),
        (None, _) => String::new(),
    };
    match node {
        // Another node's cache reached by a hop: the forwarding node's view differs from ours; never forward twice.
        _ if hop => Decision::Unavailable { node: name },
        Some(m) if m.state.is_live() => Decision::Forward { node: name, front: m.id.front },
        _ => down(&name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::members::State;
    use crate::cluster::NodeId;
    use std::collections::HashSet;

    fn node(name: &str, ip: u8, procs: &[&str]) -> NodeId {
        NodeId::test(name, ip, procs, 1)
    }

    #[test]
    fn owners_here_alive_dead_left_unknown_and_hops() {
        let mut m = Members::new(node("a", 2, &["a0", "a1"]));
        let (b, c, d) = (node("b", 3, &["b0"]), node("c", 4, &["c0"]), node("d", 5, &["d0"]));
        m.update([(&b, State::Alive), (&c, State::Dead), (&d, State::Suspect)], &HashSet::from([]));
        let e = node("e", 6, &["e0"]);
        m.update([(&e, State::Alive)], &HashSet::from([("e".to_string(), 1)]));
        let fwd =
            |n: &str, ip: u8| Decision::Forward { node: n.into(), front: SocketAddr::from(([127, 0, 0, ip], 8080)) };
        let un = |n: &str| Decision::Unavailable { node: n.into() };
        let fb = |n: &str| Decision::Fallback { node: n.into() };
        let tok = |node, process| Owner::Token { node, process };
        use Fallback::{Any, None as Closed};
        // (owner, hop, fallback, decision)
        let cases = [
            (Owner::None, false, Closed, Decision::Local),
            (Owner::None, true, Closed, Decision::Local),
            (tok("a", "a1"), false, Closed, Decision::Local),
            (tok("a", "a1"), true, Closed, Decision::Local),
            (Owner::Prefix("a0"), false, Closed, Decision::Local),
            (tok("b", "b0"), false, Closed, fwd("b", 3)),
            (Owner::Prefix("b0"), false, Closed, fwd("b", 3)),
            (tok("d", "d0"), false, Closed, fwd("d", 5)),
            (tok("b", "b0"), true, Closed, un("b")),
            (Owner::Prefix("b0"), true, Any, un("b")),
            (tok("c", "c0"), false, Closed, un("c")),
            (tok("c", "c0"), false, Any, fb("c")),
            (Owner::Prefix("c0"), false, Closed, un("c")),
            (Owner::Prefix("c0"), false, Any, fb("c")),
            (tok("e", "e0"), false, Closed, un("e")),
            (Owner::Prefix("e0"), false, Any, fb("e")),
            (tok("zz", "z0"), false, Closed, un("zz")),
            (tok("zz", "z0"), false, Any, fb("zz")),
            (tok("zz", "z0"), true, Any, un("zz")),
            (Owner::Prefix("nobody"), false, Closed, Decision::Local),
            (Owner::Prefix("nobody"), true, Closed, Decision::Local),
        ];
        for (owner, hop, fallback, want) in cases {
            assert_eq!(decide(owner, &m, hop, fallback), want, "{owner:?} hop={hop} {fallback:?}");
        }
    }

    #[test]
    fn a_process_that_moved_to_a_live_node_is_followed() {
        let mut m = Members::new(node("a", 2, &["a0"]));
        // tx9 was on b, which died; it now runs on c.
        let b = NodeId { started_ms: 1, ..node("b", 3, &["tx9"]) };
        let c = NodeId { started_ms: 5, ..node("c", 4, &["tx9"]) };
        m.update([(&b, State::Dead), (&c, State::Alive)], &HashSet::new());
        let want = Decision::Forward { node: "c".into(), front: SocketAddr::from(([127, 0, 0, 4], 8080)) };
        assert_eq!(decide(Owner::Prefix("tx9"), &m, false, Fallback::None), want);
        // A token keeps naming the node it was minted on.
        let owner = Owner::Token { node: "b", process: "tx9" };
        assert_eq!(decide(owner, &m, false, Fallback::None), Decision::Unavailable { node: "b".into() });
    }
}
