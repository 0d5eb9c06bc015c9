//! What the front door asks of the cluster for each request with a cache id: check the hop header of a request a
//! member forwarded, verify a node-bound token, and decide ([`super::route::decide`]) whether the request is served
//! here, forwarded to its owner's front door, or answered at once (400, 401, 410, 503); then, for a forward,
//! sign the hop and carry the request to the owner. Names no type of the front door's: it reads and writes plain
//! HTTP parts, and the front door turns the outcome into its answer.

use super::hop::{self, Accepted, Hop, Hops, HEADER as HOP_HEADER};
use super::replay::Counter;
use super::route::{decide, Decision, Owner};
use super::{unix_ms, ClusterError, Membership};
use crate::base::token::NodeTokens;
use crate::config::{ClusterConfig, Fallback, ProxyConfig};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How long connecting to a peer's front door may take before the owner counts as unreachable.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a connection to a peer's front door is kept idle for the next forward to it, and how many per peer.
/// Short, so that a connection the peer is about to close (its keep-alive or its drain) is rarely the one taken.
pub(crate) const IDLE_FOR: Duration = Duration::from_secs(2);
const IDLE_PER_PEER: usize = 32;

/// Connections to peers' front doors whose last answer is complete, newest last.
type Idle = Arc<std::sync::Mutex<std::collections::HashMap<SocketAddr, Vec<(std::time::Instant, Sender)>>>>;
type Sender = hyper::client::conn::http1::SendRequest<Incoming>;

/// The cluster's side of the front door.
pub struct Door {
    membership: Arc<Membership>,
    tokens: Option<NodeTokens>,
    hops: Hops,
    /// The hops accepted from peers: each (node, nonce) once.
    accepted: std::sync::Mutex<Accepted>,
    /// The nonces of the hops this node signs.
    nonces: Counter,
    fallback: Fallback,
    this: String,
    cache_header: HeaderName,
    hop_header: HeaderName,
    /// How long the owner's front door may take to send its response head (`[proxy] upstream_timeout_s`).
    head_timeout: Duration,
    idle: Idle,
}

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Served here by the front door's own rules. `signed`: its owner was proven by a token, so it is never served
    /// by another process; `fallback`: another node owns its cache (`X-Route-Fallback: owner-node-down`).
    Here { signed: bool, fallback: bool },
    /// Forwarded to the owner node's front door.
    Forward { node: String, front: SocketAddr },
    /// 503 `owner-node-unavailable` with `Retry-After`.
    Unavailable { node: String },
    /// Answered at once with this status and reason: a bad token (400, 401, 410) or a hop header that is not
    /// authentic, fresh and new (401).
    Refuse { status: u16, reason: String },
}

/// A forward that got no answer: why, and the request when it was never sent (no connection could be made).
pub struct Failed {
    pub error: ForwardError,
    pub unsent: Option<Request<Incoming>>,
}

/// Why a forward did not get an answer.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("connecting to {front}: {source}")]
    Connect { front: SocketAddr, source: std::io::Error },
    #[error("connecting to {front}: no connection within {} s", CONNECT_TIMEOUT.as_secs())]
    Timeout { front: SocketAddr },
    #[error("forwarding to {front}: {source}")]
    Http { front: SocketAddr, source: hyper::Error },
    #[error("forwarding to {front}: no response within {} s", .after.as_secs())]
    NoAnswer { front: SocketAddr, after: Duration },
}

/// A response body from a peer, as the front door streams it.
pub(crate) type PeerBody =
    http_body_util::combinators::BoxBody<hyper::body::Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// A peer's body left without a frame for this long.
#[derive(Debug, thiserror::Error)]
#[error("the owner node sent nothing of the response body for {} s", .0.as_secs_f64())]
pub struct Stalled(pub Duration);

/// A body cut with [`Stalled`] once it has been `after` without a frame: a peer cut off mid-answer (a partition)
/// does not hold the client for ever.
pub(crate) struct Bounded<B> {
    inner: B,
    after: Duration,
    sleep: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl<B> Bounded<B> {
    pub fn new(inner: B, after: Duration) -> Bounded<B> {
        Bounded { inner, after, sleep: Box::pin(tokio::time::sleep(after)) }
    }
}

impl<B> hyper::body::Body for Bounded<B>
where
    B: hyper::body::Body<Data = hyper::body::Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = hyper::body::Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        use std::future::Future;
        use std::task::Poll;
        let this = self.get_mut();
        match std::pin::Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.sleep.as_mut().reset(tokio::time::Instant::now() + this.after);
                Poll::Ready(frame.map(|r| r.map_err(Into::into)))
            }
            Poll::Pending => match this.sleep.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(Stalled(this.after))))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

impl Door {
    /// With `[proxy]`'s cache id header, token lifetime and upstream timeout.
    pub fn new(c: &ClusterConfig, membership: Arc<Membership>, px: &ProxyConfig) -> Result<Door, ClusterError> {
        let (cache_header, token_ttl_s) = (px.cache_id_header.as_str(), px.token_ttl_s);
        let secret = c.secret_bytes().map_err(ClusterError::Secret)?;
        let this = membership.members().this().name.clone();
        let cache_header =
            HeaderName::from_bytes(cache_header.as_bytes()).map_err(|e| ClusterError::Header(e.to_string()))?;
        Ok(Door {
            tokens: c.token_secret.as_deref().map(|s| NodeTokens::new(s.as_bytes(), &this, token_ttl_s)),
            hops: Hops::new(&secret),
            accepted: std::sync::Mutex::new(hop::accepted()),
            nonces: Counter::new(),
            fallback: c.fallback,
            this,
            cache_header,
            hop_header: HeaderName::from_static(HOP_HEADER),
            head_timeout: Duration::from_secs(px.upstream_timeout_s),
            idle: Idle::default(),
            membership,
        })
    }

    /// Decides where a request goes, from its method, target (path and query) and headers. The hop header is
    /// removed (the processes never see it); a valid token of this node is replaced by the process's own cache id.
    pub fn route(&self, method: &str, target: &str, headers: &mut HeaderMap) -> Route {
        let id = headers.get(&self.cache_header).map(|v| v.to_str().map(str::to_string));
        let hop = match headers.remove(&self.hop_header) {
            None => false,
            Some(v) => {
                let cache_id = match &id {
                    Some(Ok(s)) => s.as_str(),
                    _ => "",
                };
                let value = v.to_str().unwrap_or_default();
                let mut accepted = self.accepted.lock().unwrap_or_else(|p| p.into_inner());
                match self.hops.check(value, unix_ms(), &Hop { method, target, cache_id }, &mut accepted) {
                    Ok(_) => true,
                    Err(e) => return Route::Refuse { status: 401, reason: e.to_string() },
                }
            }
        };
        let id = match id {
            None => return Route::Here { signed: false, fallback: false },
            Some(Ok(id)) => id,
            Some(Err(_)) => return Route::Refuse { status: 400, reason: "bad cache id".into() },
        };
        let members = self.membership.members();
        let (decision, inner) = match &self.tokens {
            Some(t) => match t.verify(&id) {
                Ok(o) => {
                    let owner = Owner::Token { node: &o.node, process: &o.process };
                    (decide(owner, &members, hop, self.fallback), Some(o.cache_id.clone()))
                }
                Err(e) => return Route::Refuse { status: e.status(), reason: e.to_string() },
            },
            None => {
                let prefix = id.split('.').next().unwrap_or_default();
                (decide(Owner::Prefix(prefix), &members, hop, self.fallback), None)
            }
        };
        // Served here: the process gets its own cache id back.
        let unwrap = |headers: &mut HeaderMap| {
            if let Some(v) = inner.as_deref().and_then(|s| HeaderValue::from_str(s).ok()) {
                headers.insert(&self.cache_header, v);
            }
        };
        match decision {
            Decision::Local => {
                unwrap(headers);
                Route::Here { signed: inner.is_some(), fallback: false }
            }
            Decision::Fallback { .. } => {
                unwrap(headers);
                Route::Here { signed: false, fallback: true }
            }
            Decision::Forward { node, front } => Route::Forward { node, front },
            Decision::Unavailable { node } => Route::Unavailable { node },
        }
    }

    /// The token a process's cache id is handed to clients as (None: no `token_secret`, or not `<process>.<id>`).
    pub fn sign(&self, cache_id: &str) -> Option<String> {
        self.tokens.as_ref()?.sign(cache_id)
    }

    /// Adds the signed hop header to a request about to be forwarded (its target and cache id as they are sent).
    pub(crate) fn sign_hop(&self, method: &str, target: &str, headers: &mut HeaderMap) {
        let cache_id = headers.get(&self.cache_header).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        let value =
            self.hops.sign(&self.this, unix_ms(), self.nonces.next(), &Hop { method, target, cache_id: &cache_id });
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(&self.hop_header, v);
        }
    }

    /// Sends `req` (origin form, hop-by-hop fields already removed, the hop header signed) to the front door at
    /// `front`, on a kept-alive connection to it whose last answer is complete (idle at most [`IDLE_FOR`]) or else
    /// a new one, and returns its response head (within the upstream timeout) with the body streaming, cut if it
    /// goes that long without a frame. A kept-alive connection that turns out closed before the request went out
    /// is passed over; one that fails after is an error (the request may have been sent). When no connection could
    /// be made, the request comes back with the error, unsent.
    pub async fn send(&self, front: SocketAddr, req: Request<Incoming>) -> Result<Response<PeerBody>, Failed> {
        let mut req = req;
        let failed = |error, unsent| Failed { error, unsent };
        while let Some(mut tx) = self.take_idle(front) {
            match tx.try_send_request(req).await {
                Ok(resp) => return Ok(self.answered(front, tx, resp)),
                Err(mut e) => match e.take_message() {
                    Some(back) => req = back,
                    None => return Err(failed(ForwardError::Http { front, source: e.into_error() }, None)),
                },
            }
        }
        let stream = match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(front)).await {
            Ok(Ok(s)) => s,
            Ok(Err(source)) => return Err(failed(ForwardError::Connect { front, source }, Some(req))),
            Err(_) => return Err(failed(ForwardError::Timeout { front }, Some(req))),
        };
        let _ = stream.set_nodelay(true);
        let (mut tx, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await {
            Ok(c) => c,
            Err(source) => return Err(failed(ForwardError::Http { front, source }, Some(req))),
        };
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let resp = match tokio::time::timeout(self.head_timeout, tx.send_request(req)).await {
            Ok(r) => r.map_err(|source| failed(ForwardError::Http { front, source }, None))?,
            Err(_) => return Err(failed(ForwardError::NoAnswer { front, after: self.head_timeout }, None)),
        };
        Ok(self.answered(front, tx, resp))
    }

    /// `fallback = "any"`: a request whose owner node cannot be reached may be served here.
    pub(crate) fn falls_back(&self) -> bool {
        self.fallback == Fallback::Any
    }

    /// Readies a request that was to be forwarded but is served here instead (`fallback = "any"`, the owner
    /// unreachable): without the hop header, and with the process's own cache id in place of a valid token, as a
    /// request served here on a fallback decision has.
    pub(crate) fn serve_here_instead(&self, headers: &mut HeaderMap) {
        headers.remove(&self.hop_header);
        let Some(tokens) = &self.tokens else { return };
        let inner = headers.get(&self.cache_header).and_then(|v| tokens.verify(v.to_str().ok()?).ok());
        if let Some(v) = inner.and_then(|o| HeaderValue::from_str(&o.cache_id).ok()) {
            headers.insert(&self.cache_header, v);
        }
    }

    /// The newest idle connection to `front` that is still open and young enough; older ones are dropped.
    fn take_idle(&self, front: SocketAddr) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = idle.get_mut(&front)?;
        while let Some((at, tx)) = list.pop() {
            if at.elapsed() < IDLE_FOR && tx.is_ready() {
                return Some(tx);
            }
        }
        None
    }

    /// Bounds the answer's body, and puts the connection back among the idle once the answer is complete.
    fn answered(&self, front: SocketAddr, mut tx: Sender, resp: Response<Incoming>) -> Response<PeerBody> {
        let idle = self.idle.clone();
        let limit = self.head_timeout;
        tokio::spawn(async move {
            if let Ok(Ok(())) = tokio::time::timeout(limit, tx.ready()).await {
                let mut idle = idle.lock().unwrap_or_else(|p| p.into_inner());
                let list = idle.entry(front).or_default();
                list.retain(|(at, tx)| at.elapsed() < IDLE_FOR && !tx.is_closed());
                if list.len() < IDLE_PER_PEER {
                    list.push((std::time::Instant::now(), tx));
                }
            }
        });
        resp.map(|b| Bounded::new(b, self.head_timeout).boxed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::membership::Settings;
    use crate::cluster::{NodeId, State};

    const SECRET: &str = "0123456789abcdef0123456789abcdef";
    const TOKENS: &str = "fedcba9876543210fedcba9876543210";

    fn settings(name: &str, procs: &[&str], seeds: &[SocketAddr]) -> Settings {
        let port = std::net::UdpSocket::bind("127.0.0.1:0").and_then(|s| s.local_addr()).expect("a free port").port();
        let gossip = SocketAddr::from(([127, 0, 0, 1], port));
        Settings {
            this: NodeId {
                name: name.into(),
                gossip,
                front: SocketAddr::from(([127, 0, 0, 1], port)),
                web: SocketAddr::from(([127, 0, 0, 1], port)),
                processes: procs.iter().map(|p| p.to_string()).collect(),
                started_ms: unix_ms(),
                generation: 0,
            },
            listen: gossip,
            seeds: seeds.iter().map(|s| s.to_string()).collect(),
            secret: SECRET.as_bytes().to_vec(),
            suspect: Duration::from_millis(200),
            dead: Duration::from_millis(600),
        }
    }

    fn config(fallback: Fallback) -> ClusterConfig {
        let text = format!(
            "[proxy]\nlisten = \"127.0.0.1:8080\"\n[cluster]\nlisten = \"127.0.0.1:7946\"\nsecret = \"{SECRET}\"\n\
             token_secret = \"{TOKENS}\"\nfallback = \"{}\"\n",
            if fallback == Fallback::Any { "any" } else { "none" }
        );
        match crate::config::Config::from_toml(&text, std::path::Path::new("m.toml")) {
            Ok(c) => c.cluster.expect("a [cluster]"),
            Err(e) => panic!("{e}"),
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(HeaderName::from_bytes(k.as_bytes()).expect("name"), HeaderValue::from_str(v).expect("value"));
        }
        h
    }

    /// A body that never sends a frame.
    struct Silent;

    impl hyper::body::Body for Silent {
        type Data = hyper::body::Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
            std::task::Poll::Pending
        }
    }

    #[tokio::test]
    async fn a_silent_peer_body_is_cut_after_its_bound_and_a_whole_one_is_not() {
        let t = std::time::Instant::now();
        let cut = Bounded::new(Silent, Duration::from_millis(150)).collect().await;
        let e = cut.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("sent nothing of the response body"), "{e}");
        assert!(t.elapsed() >= Duration::from_millis(150) && t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        let whole = http_body_util::Full::new(hyper::body::Bytes::from_static(b"ok"));
        let got = Bounded::new(whole, Duration::from_millis(150)).collect().await.map(|c| c.to_bytes());
        assert_eq!(got.ok(), Some(hyper::body::Bytes::from_static(b"ok")));
    }

    #[tokio::test]
    async fn requests_are_served_here_forwarded_or_refused() {
        let a = Arc::new(Membership::start(settings("a", &["am0"], &[])).await.expect("a"));
        let a_addr = a.members().this().gossip;
        let b = Membership::start(settings("b", &["bm0"], &[a_addr])).await.expect("b");
        let b_front = b.members().this().front;
        let mut w = a.watch();
        let joined = w.wait_for(|v| v.iter().any(|x| x.id.name == "b" && x.state == State::Alive));
        assert!(tokio::time::timeout(Duration::from_secs(5), joined).await.is_ok(), "b never joined a");
        let px = crate::config::ProxyConfig::default();
        let door = Door::new(&config(Fallback::None), a.clone(), &px).expect("a door");
        let any = Door::new(&config(Fallback::Any), a.clone(), &px).expect("a door");
        let tokens = |node| NodeTokens::new(TOKENS.as_bytes(), node, 60);
        let mine = tokens("a").sign("am0.1").expect("a token");
        let theirs = tokens("b").sign("bm0.7").expect("a token");
        let gone = tokens("zz").sign("zm0.1").expect("a token");
        let hops = Hops::new(SECRET.as_bytes());
        let nonces = Counter::new();
        let hop =
            |id: &str| hops.sign("b", unix_ms(), nonces.next(), &Hop { method: "GET", target: "/x", cache_id: id });
        let once = hop(&mine);
        let flipped = if theirs.ends_with('0') { '1' } else { '0' };
        let tampered = format!("{}{flipped}", &theirs[..theirs.len() - 1]);
        let here = |signed, fallback| Route::Here { signed, fallback };
        // (door, headers, route, the cache id header after)
        let cases: Vec<(&Door, HeaderMap, Route, Option<&str>)> = vec![
            (&door, headers(&[]), here(false, false), None),
            (&door, headers(&[("x-cache-id", &mine)]), here(true, false), Some("am0.1")),
            (
                &door,
                headers(&[("x-cache-id", &theirs)]),
                Route::Forward { node: "b".into(), front: b_front },
                Some(&theirs),
            ),
            (
                &door,
                headers(&[("x-cache-id", &theirs), ("x-monitor-hop", &hop(&theirs))]),
                Route::Unavailable { node: "b".into() },
                Some(&theirs),
            ),
            (
                &door,
                headers(&[("x-cache-id", &mine), ("x-monitor-hop", &hop(&mine))]),
                here(true, false),
                Some("am0.1"),
            ),
            (
                &door,
                headers(&[("x-cache-id", &mine), ("x-monitor-hop", &hop("another id"))]),
                Route::Refuse { status: 401, reason: "hop header signature does not match".into() },
                Some(&mine),
            ),
            (&door, headers(&[("x-cache-id", &mine), ("x-monitor-hop", &once)]), here(true, false), Some("am0.1")),
            (
                &door,
                headers(&[("x-cache-id", &mine), ("x-monitor-hop", &once)]),
                Route::Refuse { status: 401, reason: "hop header replayed".into() },
                Some(&mine),
            ),
            (
                &door,
                headers(&[("x-cache-id", &mine), ("x-monitor-hop", "b.1.2.3")]),
                Route::Refuse { status: 401, reason: "hop header malformed".into() },
                Some(&mine),
            ),
            (
                &door,
                headers(&[("x-cache-id", "am0.1")]),
                Route::Refuse { status: 400, reason: "cache id is not a signed token".into() },
                Some("am0.1"),
            ),
            (
                &door,
                headers(&[("x-cache-id", &tampered)]),
                Route::Refuse { status: 401, reason: "cache id signature does not match".into() },
                Some(&tampered),
            ),
            (&door, headers(&[("x-cache-id", &gone)]), Route::Unavailable { node: "zz".into() }, Some(&gone)),
            (&any, headers(&[("x-cache-id", &gone)]), here(false, true), Some("zm0.1")),
        ];
        for (d, mut h, want, after) in cases {
            let before = format!("{h:?}");
            assert_eq!(d.route("GET", "/x", &mut h), want, "{before}");
            assert!(h.get(HOP_HEADER).is_none(), "the hop header never reaches a process");
            assert_eq!(h.get("x-cache-id").and_then(|v| v.to_str().ok()), after, "{before}");
        }
        // A signed hop verifies on the owner's side for exactly the request it was made for.
        let mut h = headers(&[("x-cache-id", &theirs)]);
        door.sign_hop("GET", "/x", &mut h);
        let value = h.get(HOP_HEADER).and_then(|v| v.to_str().ok()).expect("a hop header").to_string();
        let signed = hops.verify(&value, unix_ms(), &Hop { method: "GET", target: "/x", cache_id: &theirs });
        assert_eq!(signed.map(|s| s.node), Ok("a".into()));
        // Each forward's header has a nonce of its own.
        let mut again = headers(&[("x-cache-id", &theirs)]);
        door.sign_hop("GET", "/x", &mut again);
        let next = again.get(HOP_HEADER).and_then(|v| v.to_str().ok()).expect("a hop header");
        let nonce = |v: &str| v.rsplit('.').nth(1).map(str::to_string);
        assert_ne!(nonce(&value), nonce(next), "{value} then {next}");
        assert_eq!(door.sign("am0.1").map(|t| t.starts_with("a.am0.1.")), Some(true));
    }
}
