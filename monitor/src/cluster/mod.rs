//! Several `monitor run` nodes as one cluster (docs/cluster.md): identical nodes, no leader, membership by SWIM
//! gossip over UDP authenticated with the cluster secret, each node gossiping the names of its processes so any
//! front door knows which node owns a cache id.
//!
//! - [`wire`]: the sealed datagram (pure);
//! - [`hop`]: the signed header of a forwarded request (pure);
//! - [`replay`]: each datagram and each hop header accepted once (pure);
//! - [`identity`]: what a member is to the gossip crate;
//! - [`load`]: each node's load, gossiped as the crate's custom broadcasts;
//! - [`members`]: the membership view, its changes and clashes (pure);
//! - [`membership`]: the driver over a tokio socket;
//! - [`suspicions`]: members suspect for too long, declared dead by the driver (pure);
//! - [`route`]: where a request for a cache goes: here, to its owner node, or a 503 (pure);
//! - [`door`]: what the front door asks of the cluster for a request, and the forward to its owner;
//! - [`api`]: `GET /api/v1/cluster` and the metrics' lines;
//! - [`fleet`]: every member's group figures, asked from its API, for the home page and `/api/v1/cluster/fleet`.

pub mod api;
pub mod door;
pub mod fleet;
pub mod hop;
pub mod identity;
pub mod load;
pub mod members;
pub mod membership;
pub mod replay;
pub mod route;
pub mod suspicions;
pub mod wire;

pub use identity::NodeId;
pub use load::Load;
pub use members::{Member, Members, State};
pub use membership::{Membership, Settings};

use std::net::SocketAddr;

/// Why the cluster membership could not start.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("cluster gossip: cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("cluster secret: {0}")]
    Secret(String),
    #[error("refused by the cluster: member {member} ({gossip}) already has {}", names.join(", "))]
    NameClash { names: Vec<String>, member: String, gossip: SocketAddr },
    #[error("cache id header: {0}")]
    Header(String),
}

/// Milliseconds since the Unix epoch by this host's clock (0 before it): the time hop headers and datagrams are
/// sealed with and checked against.
pub(crate) use crate::base::units::unix_ms;
