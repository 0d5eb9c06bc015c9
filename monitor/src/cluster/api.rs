//! `GET /api/v1/cluster` (this node and every member it knows), `GET /readyz` (this node is a member and its
//! processes are healthy) and the cluster's families of `/metrics` (a collector the agent adds to its registry), from
//! the [`Members`] view and the launcher's.

use super::members::{Members, State};
use super::Membership;
use crate::feed::{Door, Phase};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

/// The JSON of `/api/v1/cluster`. Fields may be added, never renamed.
#[derive(Debug, Serialize, Deserialize)]
pub struct ClusterView {
    /// This node's name.
    pub node: String,
    pub members: Vec<MemberView>,
    /// The last changes of the members' states this node saw (joined, suspect, alive again, dead, left), oldest
    /// first, at most 100.
    #[serde(default)]
    pub events: Vec<super::members::Event>,
}

/// One member.
#[derive(Debug, Serialize, Deserialize)]
pub struct MemberView {
    pub node: String,
    pub state: State,
    /// Where gossip reaches it.
    pub gossip: SocketAddr,
    /// Its front door, where requests for its caches are forwarded.
    pub front: SocketAddr,
    /// Its API (`/api/v1/status`), for the fleet's merged views.
    pub web: SocketAddr,
    /// Its process names (the cache-id prefixes it owns).
    pub processes: Vec<String>,
    /// Seconds since an authentic datagram came from it (null: never heard from directly; 0 for this node).
    pub last_heard_s: Option<f64>,
    /// This node itself.
    #[serde(rename = "self")]
    pub this: bool,
    /// When this run of the node started, ms since the Unix epoch.
    pub started_ms: u64,
    /// Its group's memory ratio and policy state, as it last gossiped them (null: not heard yet).
    pub load: Option<super::Load>,
}

/// The view at `now`.
pub fn view(m: &Members, now: Instant) -> ClusterView {
    let members = m
        .iter()
        .map(|x| MemberView {
            node: x.id.name.clone(),
            state: x.state,
            gossip: x.id.gossip,
            front: x.id.front,
            web: x.id.web,
            processes: x.id.processes.clone(),
            last_heard_s: match x.this {
                true => Some(0.0),
                false => x.last_heard.map(|t| now.saturating_duration_since(t).as_secs_f64()),
            },
            this: x.this,
            started_ms: x.id.started_ms,
            load: x.load.clone(),
        })
        .collect();
    ClusterView { node: m.this().name.clone(), members, events: m.events().cloned().collect() }
}

/// Every member as the home page lists it: its page at its API address, its state and its last load.
pub fn peers(m: &Members) -> Vec<web::view::Peer> {
    m.iter()
        .map(|x| web::view::Peer {
            node: x.id.name.clone(),
            state: x.state.as_str().into(),
            url: format!("http://{}/", x.id.web),
            memory_ratio: x.load.as_ref().map(|l| l.memory_ratio),
            policy: x.load.as_ref().map(|l| l.policy.clone()),
            this: x.this,
            front: Some(x.id.front.to_string()),
            ..web::view::Peer::default()
        })
        .collect()
}

/// `GET /api/v1/cluster` and `GET /readyz`.
pub(crate) fn router(m: Arc<Membership>, door: crate::feed::Door) -> Router {
    let ready_m = m.clone();
    Router::new().route("/api/v1/cluster", get(move || async move { Json(view(&m.members(), Instant::now())) })).route(
        "/readyz",
        get(move || async move {
            let procs: Vec<(String, Phase)> = door.launched().into_iter().map(|p| (p.name, p.state)).collect();
            match readiness(ready_m.has_left(), ready_m.refused().as_deref(), &procs) {
                Ok(()) => (StatusCode::OK, "ready\n".to_string()),
                Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")),
            }
        }),
    )
}

/// Ready for a load balancer's traffic: a member of the cluster (joined, or alone once no seed answered) that has
/// not left nor been refused, with every launched process healthy. Otherwise, why not.
pub fn readiness(left: bool, refused: Option<&str>, processes: &[(String, Phase)]) -> Result<(), String> {
    if let Some(why) = refused {
        return Err(why.to_string());
    }
    if left {
        return Err("this node has left the cluster".into());
    }
    let waiting: Vec<String> =
        processes.iter().filter(|(_, p)| *p != Phase::Ready).map(|(n, p)| format!("{n} {}", p.as_str())).collect();
    match (processes.is_empty(), waiting.is_empty()) {
        (true, _) => Err("no process started yet".into()),
        (false, true) => Ok(()),
        (false, false) => Err(waiting.join(", ")),
    }
}

/// The cluster's families of `/metrics`, read from the membership and the front door at each scrape.
pub(crate) struct Families {
    pub membership: Arc<Membership>,
    /// The front door, for the requests forwarded (none: 0).
    pub door: Option<Door>,
}

impl std::fmt::Debug for Families {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("cluster::Families")
    }
}

impl Collector for Families {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let (m, forwarded) = (&self.membership, self.door.as_ref().map_or(0, Door::forwarded_total));
        encode(&mut e, &m.members(), m.rejected(), forwarded, m.gossip_bytes())
    }
}

/// The cluster's families; `gossip_bytes` is (sent, received).
pub(crate) fn encode(
    e: &mut DescriptorEncoder,
    m: &Members,
    rejected: u64,
    forwarded: u64,
    gossip_bytes: (u64, u64),
) -> std::fmt::Result {
    let help = "Members this node knows, by state (this node included, alive).";
    let mut members = e.encode_descriptor("monitor_cluster_members", help, None, MetricType::Gauge)?;
    for (state, n) in m.counts() {
        ConstGauge::new(n).encode(members.encode_family(&[("state", state.as_str())])?)?;
    }
    // Counters are named without `_total`: the encoder writes it.
    for (name, help, n) in [
        (
            "monitor_cluster_datagrams_rejected",
            "Gossip datagrams dropped: their mac did not match the cluster secret, or they were malformed.",
            rejected,
        ),
        (
            "monitor_cluster_forwarded",
            "Requests sent on to the front door of the node that owns their cache.",
            forwarded,
        ),
    ] {
        ConstCounter::new(n).encode(e.encode_descriptor(name, help, None, MetricType::Counter)?)?;
    }
    let help = "Bytes of gossip datagrams (UDP payloads), by direction.";
    let mut bytes = e.encode_descriptor("monitor_cluster_gossip_bytes", help, None, MetricType::Counter)?;
    for (direction, n) in [("sent", gossip_bytes.0), ("received", gossip_bytes.1)] {
        ConstCounter::new(n).encode(bytes.encode_family(&[("direction", direction)])?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::NodeId;
    use std::collections::HashSet;
    use std::time::Duration;

    fn node(name: &str, ip: u8, procs: &[&str]) -> NodeId {
        NodeId::test(name, ip, procs, 7)
    }

    /// The families of `m` with 3 datagrams rejected, 5 requests forwarded, 700 bytes sent and 650 received.
    #[derive(Debug)]
    struct Fixed(Members);

    impl Collector for Fixed {
        fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
            encode(&mut e, &self.0, 3, 5, (700, 650))
        }
    }

    fn metrics_text(m: Members) -> String {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(Fixed(m)));
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).expect("encoded");
        text
    }

    #[test]
    fn the_view_and_the_metrics_list_every_member() {
        let mut m = Members::new(node("a", 2, &["a0"]));
        let b = node("b", 3, &["b0", "b1"]);
        let c = node("c", 4, &["c0"]);
        let ch = m.update([(&b, State::Alive), (&c, State::Dead)], &HashSet::new());
        m.record(&ch, 42);
        let t0 = Instant::now();
        m.heard(b.gossip, t0);
        let load = crate::cluster::Load { memory_ratio: 0.25, policy: "refusing".into() };
        let a_note = crate::cluster::load::Note { gossip: m.this().gossip, started_ms: 7, seq: 1, load };
        m.set_loads([&a_note]);
        let v = view(&m, t0 + Duration::from_millis(1500));
        let json = serde_json::to_value(&v).expect("json");
        assert_eq!(json["node"], "a");
        let members = json["members"].as_array().expect("members");
        assert_eq!(members.len(), 3);
        assert_eq!(members[0]["self"], true);
        assert_eq!(members[0]["last_heard_s"], 0.0);
        assert_eq!(members[0]["load"], serde_json::json!({"memory_ratio": 0.25, "policy": "refusing"}));
        assert_eq!(members[1]["node"], "b");
        assert_eq!(members[1]["state"], "alive");
        assert_eq!(members[1]["front"], "127.0.0.3:8080");
        assert_eq!(members[1]["gossip"], "127.0.0.3:7946");
        assert_eq!(members[1]["processes"], serde_json::json!(["b0", "b1"]));
        assert_eq!(members[1]["last_heard_s"], 1.5);
        assert_eq!(members[2]["state"], "dead");
        assert_eq!(
            json["events"][0],
            serde_json::json!({"at_unix_ms": 42, "node": "b", "from": null, "to": "alive", "what": "joined"})
        );
        assert_eq!(json["events"].as_array().map(Vec::len), Some(2));
        assert!(members[1]["load"].is_null(), "no load heard yet");
        assert!(members[2]["last_heard_s"].is_null());
        let peers = peers(&m);
        assert_eq!(peers.len(), 3);
        assert_eq!((peers[0].url.as_str(), peers[0].this), ("http://127.0.0.2:9464/", true));
        assert_eq!((peers[0].memory_ratio, peers[0].policy.as_deref()), (Some(0.25), Some("refusing")));
        assert_eq!((peers[2].state.as_str(), peers[2].memory_ratio), ("dead", None));
        let text = metrics_text(m);
        for line in [
            "monitor_cluster_members{state=\"alive\"} 2",
            "monitor_cluster_members{state=\"suspect\"} 0",
            "monitor_cluster_members{state=\"dead\"} 1",
            "monitor_cluster_members{state=\"left\"} 0",
            "monitor_cluster_datagrams_rejected_total 3",
            "monitor_cluster_forwarded_total 5",
            "monitor_cluster_gossip_bytes_total{direction=\"sent\"} 700",
            "monitor_cluster_gossip_bytes_total{direction=\"received\"} 650",
            "# TYPE monitor_cluster_members gauge",
            "# HELP monitor_cluster_datagrams_rejected_total Gossip datagrams dropped: their mac did not match the \
             cluster secret, or they were malformed.",
            "# TYPE monitor_cluster_gossip_bytes_total counter",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
        }
    }

    #[test]
    fn ready_once_a_member_with_every_process_healthy() {
        let p = |n: &str, ph: Phase| (n.to_string(), ph);
        let ok: Result<(), String> = Ok(());
        // (left, processes, result)
        let cases = [
            (false, vec![p("m0", Phase::Ready), p("tx1", Phase::Ready)], ok.clone()),
            (false, vec![p("m0", Phase::Ready), p("tx1", Phase::Starting)], Err("tx1 starting".to_string())),
            (
                false,
                vec![p("m0", Phase::Unhealthy), p("tx1", Phase::BackingOff)],
                Err("m0 unhealthy, tx1 backing-off".to_string()),
            ),
            (false, vec![], Err("no process started yet".to_string())),
            (true, vec![p("m0", Phase::Ready)], Err("this node has left the cluster".to_string())),
            (false, vec![p("m0", Phase::Stopped)], Err("m0 stopped".to_string())),
        ];
        for (left, procs, want) in cases {
            assert_eq!(readiness(left, None, &procs), want, "left={left} {procs:?}");
        }
        let why = "refused by the cluster: member b (127.0.0.3:7946) already has tx1";
        assert_eq!(readiness(true, Some(why), &[p("m0", Phase::Ready)]), Err(why.to_string()));
    }
}
