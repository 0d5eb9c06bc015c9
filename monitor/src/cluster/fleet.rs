//! The fleet poller: every [`EVERY`] it asks each live member other than this node for its `/api/v1/status` (its
//! front door's shed count included), all at once, at most [`ASK_TIMEOUT`] and [`MAX_BODY`] each, and
//! keeps each node's last figures with when they came and the last error. This node's own figures come from its
//! latest sample, without HTTP. One poll at a time: the next starts once the last has ended. The home page's
//! Cluster table and `GET /api/v1/cluster/fleet` read what it keeps.

use super::members::Members;
use super::Membership;
use crate::config::client::Bounds;
use crate::config::{HttpUrl, UrlError};
use crate::feed::Phase;
use crate::feed::Published;
use crate::view::StatusView;
use axum::routing::get;
use axum::{Json, Router};
use hyper::body::Bytes;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use web::view::{Figures, Fleet as FleetView, FleetTotal, Peer};

/// How often the members are asked.
pub(crate) const EVERY: Duration = Duration::from_secs(2);
/// How long one member's answer may take, connection included.
pub(crate) const ASK_TIMEOUT: Duration = Duration::from_secs(1);
/// The largest answer read from a member; a larger one is an error, not read further.
pub(crate) const MAX_BODY: usize = 1 << 20;
/// One member's ask: [`ASK_TIMEOUT`] and [`MAX_BODY`].
pub const BOUNDS: Bounds = Bounds { timeout: ASK_TIMEOUT, max_body: MAX_BODY };

/// What this node's own figures are made of.
pub struct Local {
    /// Its latest sample.
    pub latest: watch::Receiver<Arc<Published>>,
    /// Its launched processes.
    pub door: Option<crate::feed::Door>,
}

impl Local {
    /// The figures of the latest sample (the same sums as [`figures_of`] makes of a status document, without
    /// building one), with the sample's time.
    fn figures(&self) -> (Figures, u64) {
        let p = self.latest.borrow().clone();
        let (s, d) = (&p.snapshot, &p.decision);
        let ready = self.door.as_ref().map(|d| d.launched().iter().filter(|l| l.state == Phase::Ready).count() as u64);
        let f = Figures {
            usage_bytes: s.group.usage_bytes,
            limit_bytes: s.group.limit_bytes,
            ratio: d.ratio,
            policy: d.state.to_string(),
            processes: s.processes.len() as u64,
            ready,
            requests_total: s.processes.iter().map(|p| p.traffic.requests_total).sum(),
            requests_per_s: None,
            inflight: s.processes.iter().map(|p| p.traffic.inflight).sum(),
            shed_total: self.door.as_ref().map(|d| d.shed_total()),
        };
        (f, s.unix_ms)
    }
}

/// One node's figures as they come, from its status document (the shed count is its `front_door`'s: unknown for a
/// node that has none). The rate is left for [`Entry::answered`].
pub(crate) fn figures_of(v: &StatusView) -> Figures {
    Figures {
        usage_bytes: v.group.usage_bytes,
        limit_bytes: v.group.limit_bytes,
        ratio: v.group.ratio,
        policy: v.policy.state.to_string(),
        processes: v.processes.len() as u64,
        ready: v.launcher.as_ref().map(|l| l.iter().filter(|p| p.state == Phase::Ready).count() as u64),
        requests_total: v.processes.iter().map(|p| p.requests_total).sum(),
        requests_per_s: None,
        inflight: v.processes.iter().map(|p| p.inflight).sum(),
        shed_total: v.front_door.map(|f| f.shed_total),
    }
}

/// What is known of one node.
#[derive(Debug, Clone)]
struct Entry {
    figures: Option<Figures>,
    /// When the figures came.
    at: Option<Instant>,
    /// When it was first asked (or seen, when it was never live here).
    first: Instant,
    /// Why its latest ask failed, or why it is no longer asked; None while it answers.
    error: Option<String>,
    /// The sample time and request count of its last answer, for the rate.
    prev: Option<(u64, u64)>,
}

impl Entry {
    fn new(now: Instant) -> Entry {
        Entry { figures: None, at: None, first: now, error: None, prev: None }
    }

    /// An answer at `now`: figures of the node's sample taken at `unix_ms`.
    fn answered(&mut self, mut f: Figures, unix_ms: u64, now: Instant) {
        let last_rate = self.figures.as_ref().and_then(|f| f.requests_per_s);
        f.requests_per_s = match self.prev {
            // The same sample again: the rate stands.
            Some((t, _)) if t == unix_ms => last_rate,
            Some((t, n)) if t < unix_ms && n <= f.requests_total => {
                Some((f.requests_total - n) as f64 * 1000.0 / (unix_ms - t) as f64)
            }
            // A restarted process (its count went back) or a clock gone back: no rate until the next answer.
            _ => None,
        };
        self.prev = Some((unix_ms, f.requests_total));
        (self.figures, self.at, self.error) = (Some(f), Some(now), None);
    }

    fn failed(&mut self, why: String) {
        self.error = Some(why);
    }

    /// Fills the row of this node.
    fn fill(&self, p: &mut Peer, now: Instant) {
        p.figures.clone_from(&self.figures);
        p.figures_age_s = self.at.map(|t| now.saturating_duration_since(t).as_secs_f64());
        if let Some(e) = &self.error {
            p.error = Some(e.clone());
            p.no_answer_s = Some(now.saturating_duration_since(self.at.unwrap_or(self.first)).as_secs_f64());
        }
    }
}

/// The poller's keep, shared with the routes and the home page.
pub(crate) struct Fleet {
    membership: Arc<Membership>,
    entries: Mutex<HashMap<String, Entry>>,
}

impl Fleet {
    /// Starts polling every [`EVERY`] on the current runtime.
    pub fn spawn(membership: Arc<Membership>, local: Local) -> Arc<Fleet> {
        let fleet = Arc::new(Fleet { membership, entries: Mutex::new(HashMap::new()) });
        let f = fleet.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                f.poll(&local).await;
            }
        });
        fleet
    }

    /// One poll: every live member but this node asked at once, this node's figures from its latest sample.
    async fn poll(&self, local: &Local) {
        let members = self.membership.members();
        let mut asks = tokio::task::JoinSet::new();
        for m in members.iter().filter(|m| !m.this && m.state.is_live()) {
            let (node, web) = (m.id.name.clone(), m.id.web);
            asks.spawn(async move { (node, ask(web).await) });
        }
        let answers = asks.join_all().await;
        let own = local.figures();
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        record(&mut entries, &members, own, answers, Instant::now());
    }

    /// Every member with what is known of it, in the membership's order.
    pub fn peers(&self) -> Vec<Peer> {
        rows(&self.membership.members(), &self.entries.lock().unwrap_or_else(|p| p.into_inner()), Instant::now())
    }

    /// `GET /api/v1/cluster/fleet`'s document.
    pub fn view(&self) -> FleetView {
        let nodes = self.peers();
        let total = FleetTotal::of(&nodes);
        FleetView { node: self.membership.members().this().name.clone(), nodes, total }
    }
}

/// A member's answer: its status document, or why there is none.
type Answer = Result<StatusView, String>;

/// Keeps one poll's outcome at `now`: this node's figures (`own`, with its sample's time), each asked member's
/// answer, and for each member no longer asked why; members no longer listed are forgotten.
fn record(
    entries: &mut HashMap<String, Entry>,
    members: &Members,
    own: (Figures, u64),
    answers: Vec<(String, Answer)>,
    now: Instant,
) {
    entries.retain(|node, _| members.iter().any(|m| m.id.name == *node));
    entries.entry(members.this().name.clone()).or_insert_with(|| Entry::new(now)).answered(own.0, own.1, now);
    for (node, got) in answers {
        let e = entries.entry(node).or_insert_with(|| Entry::new(now));
        match got {
            Ok(v) => e.answered(figures_of(&v), v.sample.unix_ms, now),
            Err(why) => e.failed(why),
        }
    }
    // A member no longer asked says so, unless its last ask already said why it failed.
    for m in members.iter().filter(|m| !m.this && !m.state.is_live()) {
        let e = entries.entry(m.id.name.clone()).or_insert_with(|| Entry::new(now));
        if e.error.is_none() {
            e.failed(format!("not asked: the node is {}", m.state.as_str()));
        }
    }
}

/// The home page's rows: each member as gossip lists it, with its figures.
fn rows(m: &Members, entries: &HashMap<String, Entry>, now: Instant) -> Vec<Peer> {
    let mut peers = super::api::peers(m);
    for p in &mut peers {
        if let Some(e) = entries.get(&p.node) {
            e.fill(p, now);
        }
    }
    peers
}

/// `GET /api/v1/cluster/fleet`.
pub(crate) fn router(fleet: Arc<Fleet>) -> Router {
    Router::new().route("/api/v1/cluster/fleet", get(move || async move { Json(fleet.view()) }))
}

/// A member's status document, from its API at `web`.
async fn ask(web: SocketAddr) -> Answer {
    let body = fetch(web, "/api/v1/status").await?;
    serde_json::from_slice(&body).map_err(|e| format!("http://{web}/api/v1/status: not a monitor status document: {e}"))
}

/// GETs `path` from a member's API at `addr` on a connection of its own, within [`BOUNDS`]: the body, if it comes
/// complete within [`ASK_TIMEOUT`] and holds at most [`MAX_BODY`] bytes.
pub async fn fetch(addr: SocketAddr, path: &str) -> Result<Bytes, String> {
    let url: HttpUrl = format!("http://{addr}{path}").parse().map_err(|e: UrlError| e.to_string())?;
    crate::config::client::fetch(&url, BOUNDS).await.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::policy::{State, Thresholds};
    use crate::feed::Published;
    use crate::view::FrontDoorView;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn the_figures_come_from_the_status_and_the_rate_from_two_answers() {
        let mut p = Published::test(State::Refusing);
        p.snapshot.group.usage_bytes = 300;
        p.snapshot.group.limit_bytes = 1000;
        let mut v = crate::view::status_view(&p, &Thresholds::default());
        v.group.ratio = 0.3;
        v.front_door = Some(FrontDoorView { shed_total: 4, forwarded_total: 1 });
        let f = figures_of(&v);
        assert_eq!((f.usage_bytes, f.limit_bytes, f.ratio, f.policy.as_str()), (300, 1000, 0.3, "refusing"));
        assert_eq!((f.processes, f.ready, f.shed_total, f.requests_per_s), (0, None, Some(4), None));

        let t0 = Instant::now();
        let mut e = Entry::new(t0);
        let with = |n: u64| Figures { requests_total: n, ..f.clone() };
        e.answered(with(100), 10_000, t0);
        assert_eq!(e.figures.as_ref().and_then(|f| f.requests_per_s), None, "one answer: no rate");
        e.answered(with(150), 12_000, t0);
        assert_eq!(e.figures.as_ref().and_then(|f| f.requests_per_s), Some(25.0));
        e.answered(with(150), 12_000, t0);
        assert_eq!(e.figures.as_ref().and_then(|f| f.requests_per_s), Some(25.0), "the same sample: it stands");
        e.answered(with(20), 14_000, t0);
        assert_eq!(e.figures.as_ref().and_then(|f| f.requests_per_s), None, "a count that went back");

        e.failed("no answer within 1 s".into());
        let mut row = Peer::default();
        e.fill(&mut row, t0 + Duration::from_secs(5));
        assert_eq!((row.no_answer_s, row.error.as_deref()), (Some(5.0), Some("no answer within 1 s")));
        assert_eq!(row.figures.map(|f| f.requests_total), Some(20), "the last figures stay");
        e.answered(with(30), 16_000, t0);
        let mut row = Peer::default();
        e.fill(&mut row, t0);
        assert_eq!((row.stale(), row.no_answer_s, row.error), (false, None, None));
    }

    #[test]
    fn this_node_s_figures_are_those_its_status_document_gives() {
        let mut p = Published::test(State::Aborting);
        p.snapshot.unix_ms = 77;
        p.snapshot.group.usage_bytes = 900;
        p.snapshot.group.limit_bytes = 1000;
        p.decision.ratio = 0.9;
        let (_, latest) = watch::channel(Arc::new(p.clone()));
        let counts = Arc::new(crate::feed::DoorCounts::default());
        counts.shed.store(5, std::sync::atomic::Ordering::Relaxed);
        let local = Local { latest, door: Some(crate::feed::Door::new(Vec::new, counts)) };
        let mut v = crate::view::status_view(&p, &Thresholds::default());
        v.front_door = Some(FrontDoorView { shed_total: 5, forwarded_total: 0 });
        v.launcher = Some(Vec::new());
        assert_eq!(local.figures(), (figures_of(&v), 77));
    }

    #[test]
    fn a_poll_keeps_answers_and_errors_and_forgets_members_no_longer_listed() {
        use crate::cluster::{NodeId, State as Member};
        use std::collections::HashSet;
        let mut m = Members::new(NodeId::test("a", 2, &["a0"], 7));
        let (b, c, d) =
            (NodeId::test("b", 3, &["b0"], 7), NodeId::test("c", 4, &["c0"], 7), NodeId::test("d", 5, &[], 7));
        m.update([(&b, Member::Alive), (&c, Member::Alive), (&d, Member::Dead)], &HashSet::new());
        let status = |usage: u64, shed_total: u64| {
            let mut p = Published::test(State::Normal);
            p.snapshot.group.usage_bytes = usage;
            p.snapshot.unix_ms = 1000;
            let mut v = crate::view::status_view(&p, &Thresholds::default());
            v.front_door = Some(FrontDoorView { shed_total, forwarded_total: 0 });
            v
        };
        let own = (Figures { usage_bytes: 1, ..Figures::default() }, 1000);
        let mut entries = HashMap::new();
        entries.insert("gone".to_string(), Entry::new(Instant::now()));
        let t0 = Instant::now();
        let answers =
            vec![("b".to_string(), Ok(status(300, 2))), ("c".to_string(), Err("no answer within 1 s".to_string()))];
        record(&mut entries, &m, own.clone(), answers, t0);
        assert!(!entries.contains_key("gone"), "a member no longer listed is forgotten");
        let first = rows(&m, &entries, t0 + Duration::from_secs(3));
        let row = |n: &str| first.iter().find(|r| r.node == n).cloned().unwrap_or_default();
        assert_eq!(row("a").figures.map(|f| (f.usage_bytes, row("a").this)), Some((1, true)));
        let b = row("b");
        assert_eq!(b.figures.as_ref().map(|f| (f.usage_bytes, f.shed_total)), Some((300, Some(2))));
        assert_eq!((b.stale(), b.figures_age_s, b.front.as_deref()), (false, Some(3.0), Some("127.0.0.3:8080")));
        let c = row("c");
        assert_eq!((c.figures, c.no_answer_s, c.error.as_deref()), (None, Some(3.0), Some("no answer within 1 s")));
        let d = row("d");
        assert_eq!((d.state.as_str(), d.error.as_deref()), ("dead", Some("not asked: the node is dead")));

        // b stops answering: its last figures stay, with the time since they came.
        let answers = vec![("b".to_string(), Err("connecting to 127.0.0.3:9464: refused".to_string()))];
        record(&mut entries, &m, own, answers, t0 + Duration::from_secs(2));
        let second = rows(&m, &entries, t0 + Duration::from_secs(5));
        let b = second.iter().find(|r| r.node == "b").cloned().unwrap_or_default();
        assert_eq!(b.figures.map(|f| f.usage_bytes), Some(300));
        assert_eq!((b.no_answer_s, b.error.as_deref()), (Some(5.0), Some("connecting to 127.0.0.3:9464: refused")));
    }

    /// A server on loopback that answers every connection with `answer` (after reading the request head), or
    /// holds it open without a word when `answer` is None.
    async fn server(answer: Option<Vec<u8>>) -> SocketAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    let _ = s.read(&mut buf).await;
                    match answer {
                        Some(a) => {
                            let _ = s.write_all(&a).await;
                        }
                        None => tokio::time::sleep(Duration::from_secs(30)).await,
                    }
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn an_answer_is_bounded_in_size_and_time() {
        let ok = server(Some(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello".to_vec())).await;
        assert_eq!(fetch(ok, "/x").await.as_deref(), Ok(&b"hello"[..]));

        // Announced too large: refused before reading it.
        let big = server(Some(b"HTTP/1.1 200 OK\r\ncontent-length: 2000000\r\n\r\n".to_vec())).await;
        let e = fetch(big, "/x").await.expect_err("too large");
        assert!(e.contains("2000000 bytes, over the bound"), "{e}");

        // Not announced (chunked, or to the end of the connection): cut at the bound.
        let mut chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        for _ in 0..20 {
            chunked.extend_from_slice(format!("{:x}\r\n", 100_000).as_bytes());
            chunked.extend(std::iter::repeat_n(b'x', 100_000));
            chunked.extend_from_slice(b"\r\n");
        }
        chunked.extend_from_slice(b"0\r\n\r\n");
        let endless = server(Some(chunked)).await;
        let e = fetch(endless, "/x").await.expect_err("too large");
        assert!(e.ends_with(&format!("an answer over {MAX_BODY} bytes")), "{e}");

        // Silent: given up after the timeout.
        let silent = server(None).await;
        let t = Instant::now();
        let e = fetch(silent, "/x").await.expect_err("silent");
        assert!(e.ends_with("no answer within 1 s"), "{e}");
        assert!(t.elapsed() < ASK_TIMEOUT + Duration::from_millis(500), "{:?}", t.elapsed());

        let refused = server(Some(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n".to_vec())).await;
        assert_eq!(fetch(refused, "/x").await, Err(format!("http://{refused}/x: HTTP 404")));
    }
}
