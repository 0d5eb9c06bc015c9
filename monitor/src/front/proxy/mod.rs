//! The front door of `monitor run`: a hyper HTTP/1.1 reverse proxy in front of the launched processes. Routes each
//! request with [`crate::config::route`], sheds and aborts by the policy's Decision ([`shed`]), streams both bodies,
//! keeps upstream keep-alive pools ([`upstream`]) with an idle timeout below the backends' (every request goes
//! upstream in HTTP/1.1; a connection the process said it closes is never pooled), sends a request once more on a new
//! connection when a kept-alive one closed before writing it, retries an idempotent bodiless request once when it
//! fails before any response byte (on another process when least-outstanding chose the first,
//! [`route::Table::retry`]), and drains on shutdown ([`server`]).
//!
//! At the edges: an absolute-form target is sent on in origin form with the target's host as `Host`; an HTTP/1.1
//! request without a Host field, or any with two, gets 400; CONNECT gets 405 and a closed connection; a websocket
//! upgrade gets 501 (the front door carries no upgraded connection; other upgrades such as h2c are ignored and
//! answered in HTTP/1.1), and a process that switches protocols anyway 502. Content-Length with Transfer-Encoding
//! is framed by the coding alone and closes the client's connection (hyper, RFC 9112 §6.1); a transfer coding
//! besides chunked gets 501 (from a process, 502). A response body the process leaves without a frame for
//! `upstream_timeout_s` is cut ([`body`]). A request body is read before the request goes on, up to
//! `body_buffer_bytes` (64 KiB) and `body_buffer_total_bytes` across connections ([`request_body`]): a malformed one
//! (bad chunk size, a chunk shorter or longer than its size, the client gone midway) gets 400 and a closed
//! connection, logged at debug at most once a second, and the process sees nothing of it; past the limits the rest
//! is streamed, and a fault there closes the upstream connection before the body's end. 502 is only ever for what a
//! process did. At most `max_connections` clients are served at once ([`crate::base::accept::admit`]). While draining,
//! every answer says `Connection: close` ([`crate::base::accept`]).

pub mod body;
pub mod channel;
pub(crate) mod flights;
pub mod growth;
pub mod headers;
pub mod peer;
pub mod request_body;
pub mod server;
pub mod shed;
pub mod upstream;

use crate::base::token::{HostOwner, HostTokens};
use crate::config::paths;
use crate::config::route::{self, Live, Route, Rule, Unavailable};
use crate::config::ProxyConfig;
use crate::feed::Retry;
use crate::front::launcher::Member;
use body::{Lease, Outstanding, ProxyBody, Streamed};
use http_body_util::{Either, Empty};
use hyper::body::{Body, Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONNECTION, CONTENT_TYPE, HOST};
use hyper::http::uri::PathAndQuery;
use hyper::{Method, Request, Response, StatusCode, Uri, Version};
use request_body::ClientBody;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;
use upstream::Upstream;

/// What can stop the proxy from starting or serving.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("listening on {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
    #[error(transparent)]
    Table(#[from] route::TableError),
    #[error("proxy.cache_id_header: {0}")]
    Header(String),
}

/// The body of a request sent upstream: the client's ([`request_body`]: held, then streamed), or none. Boxed: most
/// requests have none, and every future and move on a request's way carries the request's size.
pub(crate) type ReqBody = Either<Box<ClientBody>, Empty<Bytes>>;

/// The proxy's side of one process: outstanding requests, the policy's action, the abort signal.
pub struct Backend {
    /// Requests in flight to it, one counter per front-door thread ([`Local::slot`]; [`Backend::outstanding`] sums
    /// them): a thread only ever writes its own, on a cache line of its own, so counting a request never waits for
    /// the line another core just wrote.
    outstanding: Box<[Slot]>,
    /// Its requests in flight, one board per front-door thread, as [`Backend::outstanding`] ([`flights`]).
    flights: Box<[flights::Board]>,
    /// [`shed::encode`]d action.
    pub action: AtomicU8,
    /// How many times the process was told to abort: a request notes it when it starts, and finds it moved when the
    /// abort closed its upstream connection.
    generation: AtomicU64,
    /// One abort channel per front-door thread ([`Backend::abort`] moves them all): each upstream connection watches
    /// its own thread's, once for its whole life, and closes when told ([`upstream`]), so no request waits on it.
    aborts: Mutex<Vec<watch::Sender<u64>>>,
    addr: SocketAddr,
    /// `Host` for requests that came without one.
    host: HeaderValue,
}

/// One thread's counter of a process's requests in flight, alone on its cache line.
#[repr(align(128))]
#[derive(Default)]
struct Slot(AtomicU32);

impl Backend {
    /// Its requests in flight, over every front-door thread.
    pub fn outstanding(&self) -> u32 {
        self.outstanding.iter().map(|s| s.0.load(Ordering::Acquire)).fold(0, u32::wrapping_add)
    }

    /// The counter front-door thread `slot` counts its requests to this process on.
    fn slot(&self, slot: usize) -> &AtomicU32 {
        &self.outstanding[slot % self.outstanding.len()].0
    }

    /// Tells every in-flight request to this process that it must abort: the generation moves, then every upstream
    /// connection to it closes, which ends each request's exchange or response body; the request, finding the
    /// generation moved since it started, answers 503 (or cuts its response) rather than 502.
    pub fn abort(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        for tx in self.aborts.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            tx.send_modify(|g| *g += 1);
        }
    }

    /// Its requests in flight now, as every front-door thread holds them (the path with its query when `query`).
    pub(crate) fn in_flight(&self, query: bool) -> Vec<crate::decision::snapshot::InFlight> {
        let now = std::time::Instant::now();
        let mut out = Vec::new();
        for b in self.flights.iter() {
            b.read(now, query, &mut out);
        }
        out
    }

    /// This thread's board of the process's requests in flight.
    fn board(&self, slot: usize) -> &flights::Board {
        &self.flights[slot % self.flights.len()]
    }

    /// How many times the process was told to abort so far.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// A new abort channel for one front-door thread.
    fn thread_abort(&self) -> watch::Sender<u64> {
        let tx = watch::channel(0).0;
        self.aborts.lock().unwrap_or_else(PoisonError::into_inner).push(tx.clone());
        tx
    }
}

/// A request ready to go upstream, and the copy kept for its one retry (bodiless idempotent requests only). The
/// stages below it borrow it and take the request out only to send it, so no future on the way holds a copy.
struct Outbound {
    req: Option<Request<ReqBody>>,
    retry: Option<Request<ReqBody>>,
    /// The Host field is the front door's (the client sent none): a retry to another process names that one.
    own_host: bool,
    /// What each try's [`flights::Flight`] takes of the request's head, read once: its cache id (when tracked) and
    /// declared body length.
    cache_id: Option<HeaderValue>,
    bytes_in: u64,
}

/// Where a request goes first, and what decides where its retry goes.
#[derive(Clone, Copy)]
struct Target {
    index: usize,
    rule: Rule,
    exempt: bool,
    rotor: u64,
    /// Sent to the owner of a signed cache id: if it fails, nobody else may answer (503, owner unavailable).
    signed_owner: bool,
}

/// How one try at a process ended.
enum Attempt {
    /// A response head came; the sender goes back to the pool when its body ends.
    Answered {
        resp: Response<Incoming>,
        tx: SendRequest<ReqBody>,
        deadline: upstream::Deadline,
        outstanding: Outstanding,
        /// The process's abort generation when the request started.
        generation: u64,
    },
    /// No response byte: connecting, writing or reading the head failed.
    Failed(String),
    /// The kept-alive connection closed before the request was written on it: the request is back in its slot.
    Unsent(String),
    TimedOut,
    /// The memory guard told the process to abort.
    Aborted,
    /// The memory guard killed the process (its last resort): the reason, for the client's 503.
    Killed(String),
    /// The client's body failed while it was streamed on (its held part was sound).
    ClientBody(String),
}

/// Why an exchange with a process gave no response head.
enum ExchangeError {
    /// Connecting, writing or reading the head failed: the process's side.
    Upstream(String),
    /// The connection closed before the request was written on it; the request is back in its slot.
    Unsent(String),
    /// The client's body failed on the way: the client's side.
    ClientBody(String),
    /// The request's deadline passed first.
    TimedOut,
    /// The process was told to abort while a connection was made or found.
    Aborted,
}

/// One front-door thread's own part of the proxy ([`Proxy::local`]). A request clones this thread's `Arc<Local>`,
/// never the shared `Arc<Proxy>`, so its reference counting stays on its own thread.
pub struct Local {
    pub proxy: Arc<Proxy>,
    /// Its upstream keep-alive connections.
    pub pool: Arc<Upstream>,
    table: route::Table,
    /// Its abort channel of each process.
    aborts: Vec<watch::Sender<u64>>,
    /// Its counter in each [`Backend::outstanding`].
    slot: usize,
    /// Breaks ties between processes with as many requests in flight: its own, so choosing never writes a line
    /// another thread writes (each thread starts at another value).
    rotor: AtomicU64,
}

/// The shared state of the front door.
pub struct Proxy {
    table: route::Table,
    members: Arc<[Member]>,
    backends: Vec<Arc<Backend>>,
    idle_timeout: Duration,
    /// The threads' [`Local`]s made so far: the next one's slot and first rotor value.
    locals: AtomicUsize,
    /// How many front-door threads serve ([`server::threads`]): one in-flight counter each per process.
    threads: usize,
    cache_header: HeaderName,
    health_paths: Vec<String>,
    draining: AtomicBool,
    ratio_bits: AtomicU64,
    retry_after: HeaderValue,
    retry_after_s: u64,
    upstream_timeout: Duration,
    /// The request-body bytes the front door may hold ([`request_body`]).
    body_budget: Arc<request_body::Budget>,
    /// The processes' own admin paths: the agent's channel to them, never reached from outside (403).
    channel: channel::Channel,
    /// The guard's kills: a request whose process the guard killed is answered 503 with the reason, not 502.
    kills: Arc<crate::guard::KillBook>,
    tokens: Option<HostTokens>,
    /// 503s sent by the memory guard (refused new requests and cancelled in-flight ones), and requests sent on to
    /// another node's front door: published to the door's readers.
    counts: Arc<crate::feed::DoorCounts>,
    /// Times the first 503 after each entry into refusing or aborting ([`shed`]).
    reactions: Arc<crate::base::reaction::Reactions>,
    /// Malformed request bodies answered 400 since start, and the second (since `started`, plus one) of the last
    /// debug line about them: at most one a second, so a flood of them cannot flood the log.
    bad_bodies: AtomicU64,
    bad_body_logged: AtomicU64,
    started: std::time::Instant,
    /// Under `[cluster]`: where requests with a cache id are routed across nodes ([`peer`]).
    cluster: std::sync::OnceLock<Arc<crate::cluster::door::Door>>,
    /// `[proxy] track_requests`: each request in flight is kept on its process's board ([`flights`]).
    track: bool,
    /// `[proxy] track_query`.
    track_query: bool,
    /// The processes' listings seen so far ([`growth`]): a request notes it when it starts and when it ends.
    epoch: AtomicU64,
}

static X_ROUTE_FALLBACK: HeaderName = HeaderName::from_static("x-route-fallback");

fn status(code: StatusCode, msg: String) -> Response<ProxyBody> {
    let mut r = Response::new(ProxyBody::text(msg));
    *r.status_mut() = code;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// 405 for CONNECT (a tunnel, which a reverse proxy does not make), closing the connection: the client may already
/// be sending the tunnel's bytes.
fn refuse_connect() -> Response<ProxyBody> {
    let mut r = status(StatusCode::METHOD_NOT_ALLOWED, "CONNECT is not supported: this is a reverse proxy\n".into());
    r.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
    r
}

fn idempotent(m: &Method) -> bool {
    matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE)
}

/// The error and its causes on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

impl Proxy {
    /// The front door to `members`; `admin_paths`: the agent's channel to the processes (their own admin endpoints,
    /// `[[process]] admin_path`, and `[actions] post_url`'s path when it points at one of them), answered 403 to
    /// every client ([`channel`]); `reactions`: where its
    /// first 503s are timed; `kills`: the guard's kills, shared with the sampler: a request whose process the guard
    /// killed gets 503 with the reason and is never retried on another process (it may be what grew the one killed).
    pub fn new(
        cfg: &ProxyConfig,
        members: Arc<[Member]>,
        admin_paths: &[String],
        reactions: Arc<crate::base::reaction::Reactions>,
        kills: Arc<crate::guard::KillBook>,
        counts: Arc<crate::feed::DoorCounts>,
    ) -> Result<Proxy, ProxyError> {
        let procs: Vec<(String, route::Role)> = members.iter().map(|m| (m.name.clone(), m.role)).collect();
        let table = route::Table::new(&procs, &cfg.master_paths, &cfg.tx_paths, cfg.master_serves_tx)?
            .with_admin_paths(&cfg.admin_paths, admin_paths)?;
        let threads = server::threads(cfg.threads);
        let backends = members
            .iter()
            .map(|m| {
                let addr = SocketAddr::from(([127, 0, 0, 1], m.port));
                let host = HeaderValue::from_str(&addr.to_string()).map_err(|e| ProxyError::Header(e.to_string()))?;
                Ok(Arc::new(Backend {
                    outstanding: (0..threads).map(|_| Slot::default()).collect(),
                    flights: (0..threads).map(|_| flights::Board::default()).collect(),
                    action: AtomicU8::new(0),
                    generation: AtomicU64::new(0),
                    aborts: Mutex::new(Vec::new()),
                    addr,
                    host,
                }))
            })
            .collect::<Result<Vec<_>, ProxyError>>()?;
        let mut health_paths: Vec<String> = members.iter().map(|m| m.health.clone()).collect();
        health_paths.dedup();
        Ok(Proxy {
            table,
            members,
            backends,
            idle_timeout: Duration::from_millis(cfg.idle_timeout_ms),
            locals: AtomicUsize::new(0),
            threads,
            cache_header: HeaderName::from_bytes(cfg.cache_id_header.as_bytes())
                .map_err(|e| ProxyError::Header(e.to_string()))?,
            health_paths,
            draining: AtomicBool::new(false),
            ratio_bits: AtomicU64::new(0),
            retry_after: HeaderValue::from(cfg.retry_after_s),
            retry_after_s: cfg.retry_after_s,
            upstream_timeout: Duration::from_secs(cfg.upstream_timeout_s),
            body_budget: Arc::new(request_body::Budget::new(cfg.body_buffer_bytes, cfg.body_buffer_total_bytes)),
            tokens: cfg
                .token_secret
                .as_deref()
                .map(|s| HostTokens::new(s.as_bytes(), &crate::config::host_name(), cfg.token_ttl_s)),
            counts,
            reactions,
            bad_bodies: AtomicU64::new(0),
            bad_body_logged: AtomicU64::new(0),
            started: std::time::Instant::now(),
            cluster: std::sync::OnceLock::new(),
            kills,
            channel: channel::Channel::new(admin_paths),
            track: cfg.track_requests,
            track_query: cfg.track_query,
            epoch: AtomicU64::new(0),
        })
    }

    /// The processes' listings seen so far ([`growth`]).
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Relaxed)
    }

    /// The requests in flight on the process with pid `pid` now (none when it is not one of the front door's, or
    /// `[proxy] track_requests` is off): what the guard names as its work when it acts on it.
    pub fn in_flight(&self, pid: u32) -> Vec<crate::decision::snapshot::InFlight> {
        if pid == 0 || !self.track {
            return Vec::new();
        }
        match self.members.iter().position(|m| m.pid() == pid) {
            Some(i) => self.backends[i].in_flight(self.track_query),
            None => Vec::new(),
        }
    }

    /// What one front-door thread keeps for itself: a new, empty set of upstream pools, and its own copy of the
    /// routing table (a regex shared by threads serves all but the first from a slower, locked cache pool).
    pub fn local(self: &Arc<Self>) -> Local {
        let slot = self.locals.fetch_add(1, Ordering::Relaxed);
        Local {
            slot,
            rotor: AtomicU64::new(slot as u64),
            proxy: self.clone(),
            pool: Arc::new(Upstream::new(self.backends.len(), self.idle_timeout)),
            table: self.table.clone(),
            aborts: self.backends.iter().map(|b| b.thread_abort()).collect(),
        }
    }

    /// How many front-door threads serve.
    pub(crate) fn threads(&self) -> usize {
        self.threads
    }

    /// How long an upstream connection may sit idle before it is closed.
    pub(crate) fn idle_timeout(&self) -> Duration {
        self.idle_timeout
    }

    /// How many requests the memory guard has answered with 503 (refused or cancelled) since start.
    pub fn shed_total(&self) -> u64 {
        self.counts.shed.load(Ordering::Relaxed)
    }

    /// Turns readiness off: health paths answer 503 from now on, and every response says `Connection: close`.
    pub(crate) fn set_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// True once the front door drains.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// 400 for a request whose body failed at the front door (`what` says how), logged at debug at most once a
    /// second. The connection is closed: its framing can no longer be trusted.
    fn bad_body(&self, what: &str) -> Response<ProxyBody> {
        let n = self.bad_bodies.fetch_add(1, Ordering::Relaxed) + 1;
        let now = self.started.elapsed().as_secs() + 1;
        let last = self.bad_body_logged.load(Ordering::Relaxed);
        if now > last && self.bad_body_logged.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            tracing::debug!(total = n, "malformed request body answered 400: {what}");
        }
        let mut r = status(StatusCode::BAD_REQUEST, "malformed request body\n".into());
        r.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
        r
    }

    fn live(&self, i: usize) -> Live {
        let b = &self.backends[i];
        Live {
            ready: self.members[i].is_ready(),
            serving: b.action.load(Ordering::Acquire) == 0,
            outstanding: b.outstanding(),
        }
    }

    /// Answers one request from a client at `peer` ([`headers::client_value`]), with this thread's table and
    /// upstream connections; marks the connection's `seat` busy once the request goes on ([`crate::base::accept::admit`]).
    pub async fn handle(
        &self,
        local: &Arc<Local>,
        req: Request<Incoming>,
        peer: &HeaderValue,
        seat: &crate::base::accept::Seat,
    ) -> Response<ProxyBody> {
        if req.body().is_end_stream() {
            // Nothing more to wait for from the client.
            seat.busy();
        }
        if req.method() == Method::CONNECT {
            return refuse_connect();
        }
        // Every decision about the path is made on every way the process may read it (`paths`); the path itself
        // goes on as it came. The URI is shared, not copied.
        let uri = req.uri().clone();
        let readings = paths::Readings::of(uri.path());
        if self.channel.is_channel(&readings) {
            // The agent's channel to its processes: no client may speak on it (see `channel`).
            return status(
                StatusCode::FORBIDDEN,
                "forbidden: this path is the memory guard's channel to its processes\n".into(),
            );
        }
        // A health path, or below one, however the process reads it.
        let health = readings.all_under(&self.health_paths);
        if health && self.draining.load(Ordering::Acquire) {
            return status(StatusCode::SERVICE_UNAVAILABLE, "draining\n".into());
        }
        let (mut req, here) = match self.cluster.get() {
            // Boxed, as every path most requests never take: the future every request carries (and moves) stays small.
            Some(door) => match Box::pin(self.through_cluster(door, req, peer, seat)).await {
                Ok(routed) => routed,
                Err(answer) => return answer,
            },
            None => (req, peer::Here::default()),
        };
        // Health and admin paths are never refused by the memory guard.
        let exempt = health || local.table.is_admin(&readings);
        let mut signed = here.signed;
        let mut cache_owner: Option<String> = None;
        if let Some(v) = headers::first(req.headers(), &self.cache_header) {
            let Ok(id) = v.to_str() else { return status(StatusCode::BAD_REQUEST, "bad cache id\n".into()) };
            match &self.tokens {
                Some(t) => match t.verify(id) {
                    Ok(HostOwner::Here(inner)) => {
                        signed = true;
                        cache_owner = Some(route::cache_prefix(&inner).to_string());
                        match HeaderValue::from_str(&inner) {
                            Ok(v) => req.headers_mut().insert(&self.cache_header, v),
                            Err(_) => return status(StatusCode::UNAUTHORIZED, "bad cache id\n".into()),
                        };
                    }
                    Ok(HostOwner::Node(node)) => {
                        return self.unavailable(&format!(
                            "owner-node-unavailable: node {node} of this cache id is not this host"
                        ))
                    }
                    Err(e) => {
                        let code = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::UNAUTHORIZED);
                        return status(code, format!("{e}\n"));
                    }
                },
                None => cache_owner = Some(route::cache_prefix(id).to_string()),
            }
        }
        let rq = route::Request { path: &readings, cache_prefix: cache_owner.as_deref(), signed, exempt };
        let rotor = local.rotor.fetch_add(1, Ordering::Relaxed);
        let route = local.table.select(&rq, |i| self.live(i), rotor);
        // Not carried in the future past here.
        drop(readings);
        drop(uri);
        let (index, rule, fallback) = match route {
            Route::To { index, rule, fallback } => (index, rule, fallback),
            Route::Unavailable(Unavailable::Shed) => return self.refused(),
            Route::Unavailable(Unavailable::Down) if signed => {
                let owner = cache_owner.unwrap_or_default();
                return self.unavailable(&format!("the owner of this cache id ({owner}) is not available"));
            }
            Route::Unavailable(Unavailable::Down) => return self.unavailable("the master process is not ready"),
            Route::Unavailable(Unavailable::NoneReady) => return self.unavailable("no process is ready"),
        };
        let signed_owner = signed && rule == Rule::CacheOwner && fallback.is_none();
        let fallback = match here.fallback {
            true => Some(HeaderValue::from_static(crate::cluster::route::OWNER_NODE_DOWN)),
            false => fallback.map(|f| HeaderValue::from_static(f.as_str())),
        };
        let to = Target { index, rule, exempt, rotor, signed_owner };
        // Forwarded in three stages, as a proxy's phases are: the request filter (what is sent, or the answer that
        // stops it), the upstream with one retry, and the response filter. Written out here rather than in a
        // function of their own: each async function on the way keeps its arguments in the future every request
        // carries (and moves).
        let mut resp = 'forward: {
            let (mut out, body) = match self.request_filter(&to, req, peer, fallback.clone()) {
                Ok(filtered) => filtered,
                Err(answer) => break 'forward *answer,
            };
            if let Some(body) = body {
                // Boxed: most requests have no body.
                match Box::pin(self.hold_body(body)).await {
                    Ok(held) => {
                        if let Some(r) = out.req.as_mut() {
                            *r.body_mut() = held;
                        }
                    }
                    Err(answer) => break 'forward answer,
                }
            }
            // Held whole or in part: what the request waits for from here on is the process.
            seat.busy();
            let (index, outcome) = self.upstream(local, &to, &mut out).await;
            self.response_filter(local, &to, index, outcome)
        };
        if let Some(f) = fallback {
            resp.headers_mut().insert(X_ROUTE_FALLBACK.clone(), f);
        }
        resp
    }

    /// The request as the process gets it: origin form, no hop-by-hop fields, exactly one Host, the client's
    /// address added; its body, if any, still to be held ([`Proxy::hold_body`]); or the answer that stops it here.
    fn request_filter(
        &self,
        to: &Target,
        req: Request<Incoming>,
        peer: &HeaderValue,
        fallback: Option<HeaderValue>,
    ) -> Result<(Outbound, Option<Incoming>), Box<Response<ProxyBody>>> {
        let (mut parts, body) = req.into_parts();
        if parts.uri.scheme().is_some() || parts.uri.authority().is_some() || parts.uri.path_and_query().is_none() {
            // Absolute form: the process gets the origin form, and the target's host in place of the Host field
            // (RFC 9112 §3.2.2), so the two never disagree.
            if let Some(v) =
                parts.uri.authority().and_then(|a| HeaderValue::from_str(a.as_str().rsplit('@').next()?).ok())
            {
                parts.headers.insert(HOST, v);
            }
            let pq = parts.uri.path_and_query().cloned().unwrap_or_else(|| PathAndQuery::from_static("/"));
            parts.uri = Uri::from(pq);
        }
        let stripped = headers::strip_hop_by_hop(&mut parts.headers);
        if stripped.other_coding {
            return Err(Box::new(status(
                StatusCode::NOT_IMPLEMENTED,
                "transfer codings other than chunked are not supported\n".into(),
            )));
        }
        if let Some(upgrade) = stripped.upgrade {
            // Other upgrades (h2c) are ignored, as a server may (RFC 9110 §7.8): the request is answered in HTTP/1.1.
            if headers::names_protocol(&upgrade, "websocket") {
                return Err(Box::new(status(
                    StatusCode::NOT_IMPLEMENTED,
                    "the front door does not carry protocol upgrades (Upgrade: websocket)\n".into(),
                )));
            }
        }
        headers::append_forwarded_for(&mut parts.headers, peer);
        // Exactly one Host; HTTP/1.0 may have none (RFC 9112 §3.2). Two would leave the process to pick one.
        let (own_host, two_hosts) = {
            let mut hosts = parts.headers.get_all(HOST).iter();
            (hosts.next().is_none(), hosts.next().is_some())
        };
        if two_hosts || (own_host && parts.version != Version::HTTP_10) {
            return Err(Box::new(status(StatusCode::BAD_REQUEST, "a request needs exactly one Host field\n".into())));
        }
        if own_host {
            parts.headers.insert(HOST, self.backends[to.index].host.clone());
        }
        // Upstream every request is HTTP/1.1, whatever the client spoke (nginx's `proxy_http_version 1.1`): an
        // HTTP/1.0 request line asks the process to close the connection after its answer, which would leave the
        // keep-alive pool nothing to keep, and a connection being closed to race the next request on it.
        parts.version = Version::HTTP_11;
        if let Some(f) = fallback {
            parts.headers.insert(X_ROUTE_FALLBACK.clone(), f);
        }
        let bodiless = body.is_end_stream();
        let retry = (bodiless && idempotent(&parts.method)).then(|| {
            let mut r = Request::new(Either::Right(Empty::new()));
            *r.method_mut() = parts.method.clone();
            *r.uri_mut() = parts.uri.clone();
            *r.headers_mut() = parts.headers.clone();
            r
        });
        let cache_id = match self.track {
            true => headers::first(&parts.headers, &self.cache_header).cloned(),
            false => None,
        };
        // A bodiless request declares no length but 0 (hyper refuses a Content-Length it cannot read).
        let bytes_in = if bodiless { 0 } else { body::declared_length(&parts.headers) };
        let body = (!bodiless).then_some(body);
        let req = Some(Request::from_parts(parts, Either::Right(Empty::new())));
        Ok((Outbound { req, retry, own_host, cache_id, bytes_in }, body))
    }

    /// A request's body held before anything goes upstream: a malformed one is answered here (400, or 408 when it
    /// does not come in time) and never reaches the process.
    async fn hold_body(&self, body: Incoming) -> Result<ReqBody, Response<ProxyBody>> {
        match tokio::time::timeout(request_body::HOLD_TIMEOUT, request_body::hold(body, &self.body_budget)).await {
            Ok(Ok(held)) => Ok(Either::Left(Box::new(held))),
            Ok(Err(e)) => Err(self.bad_body(&chain(&e))),
            Err(_) => {
                let mut r = status(
                    StatusCode::REQUEST_TIMEOUT,
                    format!("the request body did not come within {} s\n", request_body::HOLD_TIMEOUT.as_secs()),
                );
                r.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
                Err(r)
            }
        }
    }

    /// Sends the request to its process, and at most once more on a fresh connection when the first try gave no
    /// answer: any request that was never written (its kept-alive connection closed first) to the same process; a
    /// bodiless idempotent one that failed before any answer byte to the next process the route allows (the same
    /// one when a rule names it), within the same deadline. Never after the guard aborted or killed the process.
    /// Returns the process that answered last.
    async fn upstream(&self, local: &Arc<Local>, to: &Target, out: &mut Outbound) -> (usize, Attempt) {
        let deadline = tokio::time::Instant::now() + self.upstream_timeout;
        let mut index = to.index;
        let mut fresh = false;
        // One await for both tries: the future every request carries (and moves) holds one attempt, not two.
        loop {
            let pid = self.members[index].pid();
            let outcome = self.attempt(local, index, out, deadline, fresh).await;
            let (Attempt::Failed(e) | Attempt::Unsent(e)) = &outcome else { return (index, outcome) };
            if let Some(k) = self.kills.killed(pid) {
                tracing::debug!(name = %self.members[index].name, pid, "upstream failed after the guard's kill: {e}");
                return (index, Attempt::Killed(k.reason));
            }
            if fresh {
                return (index, outcome);
            }
            fresh = true;
            if matches!(outcome, Attempt::Unsent(_)) && out.req.is_some() {
                tracing::debug!(name = %self.members[index].name, "sending again on a new connection: {e}");
                self.counts.retried(Retry::Unsent);
                continue;
            }
            let Some(mut r) = out.retry.take() else { return (index, outcome) };
            let next = local.table.retry(to.rule, to.exempt, |i| self.live(i), to.rotor.wrapping_add(1), index);
            tracing::debug!(from = %self.members[index].name, to = %self.members[next].name, "retrying once after: {e}");
            if next != index && out.own_host {
                r.headers_mut().insert(HOST, self.backends[next].host.clone());
            }
            self.counts.retried(Retry::Failed);
            index = next;
            out.req = Some(r);
        }
    }

    /// The answer the client gets: the process's response, without hop-by-hop fields, its cache id signed, its
    /// body streamed and cut if the process is told to abort; or the front door's own error.
    fn response_filter(&self, local: &Local, to: &Target, index: usize, outcome: Attempt) -> Response<ProxyBody> {
        let name = &self.members[index].name;
        match outcome {
            Attempt::Answered { resp, .. } if resp.status() == StatusCode::SWITCHING_PROTOCOLS => {
                // The front door asked for no upgrade and cannot carry one: the connection is dropped, not pooled.
                tracing::warn!(name = %name, "upstream switched protocols unasked");
                status(StatusCode::BAD_GATEWAY, format!("bad gateway: process {name} switched protocols unasked\n"))
            }
            Attempt::Answered { resp, tx, deadline, outstanding, generation } => {
                let (mut parts, inner) = resp.into_parts();
                let stripped = headers::strip_hop_by_hop(&mut parts.headers);
                if stripped.other_coding {
                    // Its connection is dropped with `tx`, not pooled.
                    tracing::warn!(name = %name, "upstream answered with a transfer coding besides chunked");
                    return status(
                        StatusCode::BAD_GATEWAY,
                        format!("bad gateway: process {name} answered with a transfer coding besides chunked\n"),
                    );
                }
                if let Some(signed) = self.signed_cache_id(&parts.headers) {
                    parts.headers.insert(&self.cache_header, signed);
                }
                let reusable = !stripped.close && (parts.version != Version::HTTP_10 || stripped.keep_alive);
                let lease = Lease { pool: local.pool.clone(), index, tx, deadline, reusable };
                Response::from_parts(
                    parts,
                    ProxyBody::Upstream(Streamed::new(inner, generation, lease, outstanding, self.upstream_timeout)),
                )
            }
            Attempt::Aborted => self.aborted(name),
            Attempt::Killed(reason) => self.killed(name, &reason),
            Attempt::ClientBody(msg) => self.bad_body(&msg),
            Attempt::Failed(msg) | Attempt::Unsent(msg) => {
                tracing::warn!(name = %name, "upstream request failed: {msg}");
                if to.signed_owner {
                    self.unavailable(&format!("the owner of this cache id ({name}) is not available: {msg}"))
                } else {
                    status(StatusCode::BAD_GATEWAY, format!("bad gateway: process {name}: {msg}\n"))
                }
            }
            Attempt::TimedOut => status(
                StatusCode::GATEWAY_TIMEOUT,
                format!(
                    "gateway timeout: process {name} sent no answer within {} s\n",
                    self.upstream_timeout.as_secs()
                ),
            ),
        }
    }

    /// The token a process's cache id (in `headers`) goes to the client as: signed by this host's tokens, or under
    /// `[cluster]` by the node's; None when nothing signs, or the id is not `<process>.<id>`.
    fn signed_cache_id(&self, headers: &HeaderMap) -> Option<HeaderValue> {
        if self.tokens.is_none() && self.cluster.get().is_none() {
            return None;
        }
        let id = headers::first(headers, &self.cache_header)?.to_str().ok()?;
        let token = match &self.tokens {
            Some(t) => t.sign(id),
            None => self.cluster.get()?.sign(id),
        }?;
        HeaderValue::from_str(&token).ok()
    }

    /// One try at process `index` with the request in `out.req` (taken once sent), counted as outstanding on it,
    /// until a response head, an error, the deadline, or the memory guard's abort of that process (which closes the
    /// connection: the exchange fails, and the moved generation says why).
    async fn attempt(
        &self,
        local: &Arc<Local>,
        index: usize,
        out: &mut Outbound,
        deadline: tokio::time::Instant,
        fresh: bool,
    ) -> Attempt {
        let flight = match (self.track, out.req.as_ref()) {
            (true, Some(r)) => Some(flights::Flight {
                method: r.method().clone(),
                uri: r.uri().clone(),
                cache_id: out.cache_id.clone(),
                started: std::time::Instant::now(),
                bytes_in: out.bytes_in,
                bytes_out: 0,
                epoch: self.epoch(),
                generation: self.backends[index].generation(),
            }),
            _ => None,
        };
        let outstanding = Outstanding::new(local.clone(), index, flight);
        let generation = self.backends[index].generation();
        match self.exchange(local, index, &mut out.req, generation, deadline, fresh).await {
            Ok((resp, tx, deadline)) => Attempt::Answered { resp, tx, deadline, outstanding, generation },
            Err(_) if self.backends[index].generation() != generation => Attempt::Aborted,
            Err(ExchangeError::Upstream(msg)) => Attempt::Failed(msg),
            Err(ExchangeError::Unsent(msg)) => Attempt::Unsent(msg),
            Err(ExchangeError::ClientBody(msg)) => Attempt::ClientBody(msg),
            Err(ExchangeError::TimedOut) => Attempt::TimedOut,
            Err(ExchangeError::Aborted) => Attempt::Aborted,
        }
    }

    /// One request (taken from `req` once a connection is ready) on a pooled (unless `fresh`) or new connection to
    /// process `index`, until a response head or `deadline` (on the connection's own timer); the sender and its
    /// timer come back with the response. A request the connection closed before writing goes back into `req`.
    async fn exchange(
        &self,
        local: &Local,
        index: usize,
        req: &mut Option<Request<ReqBody>>,
        generation: u64,
        deadline: tokio::time::Instant,
        fresh: bool,
    ) -> Result<(Response<Incoming>, SendRequest<ReqBody>, upstream::Deadline), ExchangeError> {
        let backend = &self.backends[index];
        let mut c = match local.pool.checkout(index, backend.addr, &local.aborts[index], deadline, fresh).await {
            Ok(c) => c,
            Err(upstream::ConnectError::Deadline { .. }) => return Err(ExchangeError::TimedOut),
            Err(e) => return Err(ExchangeError::Upstream(e.to_string())),
        };
        // An abort while connecting closed no connection of this request's: it is not sent.
        if backend.generation() != generation {
            return Err(ExchangeError::Aborted);
        }
        let Some(request) = req.take() else {
            return Err(ExchangeError::Upstream("the request was sent already".into()));
        };
        let sent = tokio::select! {
            biased;
            r = c.tx.try_send_request(request) => r,
            _ = c.deadline.as_mut() => return Err(ExchangeError::TimedOut),
        };
        match sent {
            Ok(resp) => Ok((resp, c.tx, c.deadline)),
            Err(mut e) => {
                if let Some(back) = e.take_message() {
                    *req = Some(back);
                    return Err(ExchangeError::Unsent(chain(e.error())));
                }
                let e = e.into_error();
                exchange_failed(&e, c.reused)
            }
        }
    }
}

/// Why an exchange whose request was written (in part or whole) gave no answer.
fn exchange_failed<T>(e: &hyper::Error, reused: bool) -> Result<T, ExchangeError> {
    if request_body::from_client(e) {
        // hyper closed the upstream connection without the body's end: the process never got a whole request.
        return Err(ExchangeError::ClientBody(chain(e)));
    }
    Err(ExchangeError::Upstream(format!("{}{}", chain(e), if reused { " (reused connection)" } else { "" })))
}
