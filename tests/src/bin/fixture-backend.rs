//! `fixture-backend --name tx1 --port 3002`: an HTTP server that behaves like a FHIRsmith tx process behind the
//! front door, for the proxy and launcher tests, the demo and the benchmark.
//!
//! - `GET /health` answers `ok`; `GET /stats` answers `{"name","requests","served","abandoned","inflight","dropped"}`
//!   (`requests`: every request the handler got, any path, this one included);
//!   (`admin`: the `action` of every `POST /admin/memory` acted on, monitor's per-process action change, in order;
//!   `relay`: `{pid, action}` of every `POST /admin/relay` acted on, monitor's `[actions] post_url`; `proof`:
//!   `checked` or `off`; `rejected`: why each refused one was refused; `admin_log`: the last 256 POSTs on either
//!   path as received, `{target, host, proof, body, verdict}`, for a test to replay);
//!   `/crash` exits 3.
//! - With `MONITOR_ACTION_SECRET` (hex) in its environment, as `monitor run` hands it, the admin paths act only on
//!   POSTs with a valid `X-Monitor-Proof` (docs/deploy.md) for this process's own authority, `127.0.0.1:<port>` (where
//!   it listens, whatever the request's `Host` says): a missing, malformed, altered, stale or replayed one, or one
//!   made for another receiver, gets 401 and is only recorded. This check is written from the documented string,
//!   apart from monitor's own code. `POST /admin/memory` acts only on a body whose `pid` is this process's own;
//!   another gets 401 (`not my pid`) and is only recorded.
//! - Any other path answers 200 with a JSON echo (`name`, `pid`, `method`, `path`, `xff`, `cache_id`,
//!   `body_bytes`) and `X-Served-By: <name>`, after reading the request body.
//! - `?cache=start` issues a cache id `<name>.<n>` in `X-Cache-Id`; a request carrying `X-Cache-Id` that this
//!   process did not issue gets 404 `cache-id-unknown`.
//! - `?alloc_mib=N` allocates and touches N MiB, held until the answer is sent; `?sleep_ms=N` waits N ms first;
//!   `?hold_while=PATH` then waits while the file PATH exists (a plain path, no escapes); `?body_kib=N` pads the
//!   answer to N KiB; `?trickle_ms=N` answers at once with a body of one line every 100 ms (`?line_ms=M`: every M
//!   ms) for N ms instead, the memory held until its last line.
//! - `?grow_mib=N` grows inside the request, as a runaway request would: it allocates and touches 4 MiB chunks up
//!   to N MiB, at `grow_mib_s` MiB/s (0 or absent: as fast as it can), yielding between chunks so that a client
//!   gone (or the front door cancelling the request) drops it and frees what it grew; held until the answer. With
//!   `&keep=1` what it grew is kept for good when the request ends or is cancelled (as a JVM keeps its committed
//!   heap): the process obeys, stops growing, and gives nothing back.
//! - `?grow_sync_mib=N` grows the same way without ever yielding, as a handler stuck in a native allocation loop (or
//!   a Node worker whose event loop never turns) would: a cancelled request cannot stop it, only the process's end;
//!   with `&spin_ms=M` it then holds what it grew for M ms, still without yielding, and with `&creep_mib_s=R` it
//!   goes on growing by 1 MiB chunks at R MiB/s meanwhile (a handler that never stops, growing slowly).
//! - `?drop_on=NAME`: the process named NAME closes the connection without answering (counted as `dropped` in
//!   `/stats`); the others answer as usual.
//! - `GET /hang-health?ms=N`: for the next N ms `/health` hangs until the N ms are over, then answers 503.
//! - A request whose client goes away before the answer is abandoned (its memory freed) and counted.
//! - Idle keep-alive connections close after `--keepalive-ms` (default 5000, Node's default).
//!   Logs nothing unless `--verbose`.

use http_body_util::{BodyExt, Either, Full};
use hyper::body::{Body, Bytes, Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::HashSet;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

const MIB: usize = 1024 * 1024;

struct Args {
    name: String,
    port: u16,
    keepalive: Duration,
    health_delay: Duration,
    verbose: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        name: String::new(),
        port: 0,
        keepalive: Duration::from_millis(5000),
        health_delay: Duration::ZERO,
        verbose: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let (key, inline) = match a.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (a.clone(), None),
        };
        if key == "--verbose" {
            args.verbose = true;
            continue;
        }
        let value = match inline.or_else(|| it.next()) {
            Some(v) => v,
            None => return Err(format!("{key} needs a value")),
        };
        let num = |v: &str| v.parse::<u64>().map_err(|_| format!("{key}: {v:?} is not a number"));
        match key.as_str() {
            "--name" | "--instance-code" => args.name = value,
            "--port" => args.port = u16::try_from(num(&value)?).map_err(|_| format!("{key}: {value} too big"))?,
            "--keepalive-ms" => args.keepalive = Duration::from_millis(num(&value)?),
            "--health-delay-ms" => args.health_delay = Duration::from_millis(num(&value)?),
            _ => return Err(format!("unknown argument {key}")),
        }
    }
    if args.name.is_empty() || args.port == 0 {
        return Err("usage: fixture-backend --name NAME --port PORT [--keepalive-ms N] [--verbose]".into());
    }
    Ok(args)
}

struct State {
    name: String,
    issued: Mutex<HashSet<String>>,
    next_id: AtomicU64,
    /// Every request the handler was given, whatever its path (what the kernel probes should count).
    requests: AtomicU64,
    served: AtomicU64,
    abandoned: AtomicU64,
    inflight: AtomicU64,
    dropped: AtomicU64,
    started: std::time::Instant,
    health_delay: Duration,
    /// `/health` hangs until then.
    health_hang_until: Mutex<Option<tokio::time::Instant>>,
    /// The `action` of every `POST /admin/memory` acted on (monitor's `[[process]] admin_path`), in order.
    admin: Mutex<Vec<String>>,
    /// `{pid, action}` of every `POST /admin/relay` acted on (monitor's `[actions] post_url`), in order.
    relay: Mutex<Vec<serde_json::Value>>,
    /// The proofs' checker, when the environment has the secret.
    proofs: Option<Mutex<proof::Proofs>>,
    /// Why each refused admin POST was refused, in order.
    rejected: Mutex<Vec<String>>,
    /// The last [`ADMIN_LOG`] admin POSTs as received, with the verdict.
    admin_log: Mutex<std::collections::VecDeque<serde_json::Value>>,
    verbose: bool,
}

/// How many admin POSTs `/stats` shows as received.
const ADMIN_LOG: usize = 256;

/// Checks `X-Monitor-Proof` as docs/deploy.md tells a server author to: HMAC-SHA256 over
/// `<t>\n<n>\n<METHOD>\n<authority>\n<target>\n<body>` with its own authority, within 30 s either side, each
/// nonce once.
mod proof {
    use hmac::{Hmac, Mac};
    use sha2::Sha256;
    use std::collections::HashMap;

    const WINDOW_MS: u64 = 30_000;

    pub struct Proofs {
        key: Vec<u8>,
        /// This receiver's `host:port` as the agent addresses it: where it listens, not what a request's `Host` says.
        authority: String,
        /// Each nonce accepted within the window, with its time.
        seen: HashMap<String, u64>,
    }

    fn unhex(s: &str) -> Option<Vec<u8>> {
        if !s.len().is_multiple_of(2) {
            return None;
        }
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
    }

    impl Proofs {
        /// The checker of the secret in hex, at least 32 bytes, for the receiver at `authority`.
        pub fn from_hex(secret: &str, authority: String) -> Result<Proofs, String> {
            let key = unhex(secret.trim()).ok_or("MONITOR_ACTION_SECRET is not hex")?;
            if key.len() < 32 {
                return Err(format!("MONITOR_ACTION_SECRET is {} bytes, under 32", key.len()));
            }
            Ok(Proofs { key, authority: authority.to_ascii_lowercase(), seen: HashMap::new() })
        }

        /// Ok when `header` proves this request now; else why not.
        pub fn check(&mut self, header: Option<&str>, method: &str, target: &str, body: &[u8]) -> Result<(), String> {
            let header = header.ok_or("missing")?;
            let fields: HashMap<&str, &str> = header.split(',').filter_map(|f| f.trim().split_once('=')).collect();
            let (Some(t), Some(n), Some(mac)) = (fields.get("t"), fields.get("n"), fields.get("mac")) else {
                return Err("malformed".into());
            };
            let mut m = Hmac::<Sha256>::new_from_slice(&self.key).map_err(|e| e.to_string())?;
            m.update(format!("{t}\n{n}\n{method}\n{}\n{target}\n", self.authority).as_bytes());
            m.update(body);
            m.verify_slice(&unhex(mac).ok_or("malformed")?).map_err(|_| "bad mac")?;
            let t: u64 = t.parse().map_err(|_| "malformed")?;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0);
            if now.abs_diff(t) > WINDOW_MS {
                return Err("stale".into());
            }
            self.seen.retain(|_, at| *at + WINDOW_MS >= now);
            if self.seen.contains_key(*n) {
                return Err("replayed".into());
            }
            self.seen.insert(n.to_string(), t);
            Ok(())
        }
    }
}

/// Counts a request in flight; a request dropped before it answers (the client went away) is abandoned. A
/// `?trickle_ms` answer carries it on in its body until the last line.
struct InFlight {
    state: Arc<State>,
    done: bool,
}

impl InFlight {
    /// The request was answered in full.
    fn served(&mut self) {
        self.state.served.fetch_add(1, Ordering::Relaxed);
        self.done = true;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.state.inflight.fetch_sub(1, Ordering::Relaxed);
        if !self.done {
            self.state.abandoned.fetch_add(1, Ordering::Relaxed);
            if self.state.verbose {
                eprintln!("{}: request abandoned (client gone)", self.state.name);
            }
        }
    }
}

fn query_u64(query: &str, key: &str) -> Option<u64> {
    query.split('&').find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

/// An answer: whole, or `?trickle_ms`'s body.
type Answer = Either<Full<Bytes>, Trickle>;

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Answer> {
    let mut r = Response::new(Either::Left(Full::new(body.into())));
    *r.status_mut() = status;
    r
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The connection is closed without an answer (`?drop_on=<this process>`).
#[derive(Debug)]
struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("dropped on request")
    }
}

impl std::error::Error for Dropped {}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Result<Response<Answer>, BoxError> {
    state.requests.fetch_add(1, Ordering::Relaxed);
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    if path == "/health" {
        let until = state.health_hang_until.lock().map(|u| *u).unwrap_or(None);
        if let Some(until) = until.filter(|u| *u > tokio::time::Instant::now()) {
            tokio::time::sleep_until(until).await;
            return Ok(text(StatusCode::SERVICE_UNAVAILABLE, "was hung\n"));
        }
    }
    if query.split('&').any(|kv| kv.strip_prefix("drop_on=") == Some(state.name.as_str())) {
        state.dropped.fetch_add(1, Ordering::Relaxed);
        // A service error makes hyper close the connection without writing a response.
        return Err(Box::new(Dropped));
    }
    match path.as_str() {
        "/hang-health" => {
            let ms = query_u64(&query, "ms").unwrap_or(0);
            if let Ok(mut u) = state.health_hang_until.lock() {
                *u = Some(tokio::time::Instant::now() + Duration::from_millis(ms));
            }
            return Ok(text(StatusCode::OK, format!("/health hangs for {ms} ms\n")));
        }
        "/health" if state.started.elapsed() >= state.health_delay => return Ok(text(StatusCode::OK, "ok\n")),
        "/health" => return Ok(text(StatusCode::SERVICE_UNAVAILABLE, "starting\n")),
        "/crash" => std::process::exit(3),
        "/admin/memory" | "/admin/relay" if req.method() == hyper::Method::POST => return admin(&state, req).await,
        "/stats" => {
            let v = serde_json::json!({
                "name": state.name,
                "requests": state.requests.load(Ordering::Relaxed),
                "served": state.served.load(Ordering::Relaxed),
                "abandoned": state.abandoned.load(Ordering::Relaxed),
                "inflight": state.inflight.load(Ordering::Relaxed),
                "dropped": state.dropped.load(Ordering::Relaxed),
                "admin": state.admin.lock().map(|a| a.clone()).unwrap_or_default(),
                "relay": state.relay.lock().map(|a| a.clone()).unwrap_or_default(),
                "proof": if state.proofs.is_some() { "checked" } else { "off" },
                "rejected": state.rejected.lock().map(|a| a.clone()).unwrap_or_default(),
                "admin_log": state.admin_log.lock().map(|a| a.iter().cloned().collect::<Vec<_>>()).unwrap_or_default(),
            });
            return Ok(text(StatusCode::OK, v.to_string()));
        }
        _ => {}
    }
    state.inflight.fetch_add(1, Ordering::Relaxed);
    let mut flight = InFlight { state: state.clone(), done: false };
    let header = |n: &str| req.headers().get(n).and_then(|v| v.to_str().ok()).map(str::to_string);
    let (xff, cache_id) = (header("x-forwarded-for"), header("x-cache-id"));
    let method = req.method().to_string();
    if let Some(id) = &cache_id {
        let known = state.issued.lock().map(|s| s.contains(id)).unwrap_or(false);
        if !known {
            flight.done = true;
            let v = serde_json::json!({"error": "cache-id-unknown", "name": state.name, "cache_id": id});
            return Ok(text(StatusCode::NOT_FOUND, v.to_string()));
        }
    }
    let body_bytes = req.into_body().collect().await?.to_bytes().len();
    let hold: Vec<u8> = match query_u64(&query, "alloc_mib") {
        Some(mib) => touched(usize::try_from(mib).unwrap_or(0).saturating_mul(MIB)),
        None => Vec::new(),
    };
    let grown = match (query_u64(&query, "grow_mib"), query_u64(&query, "grow_sync_mib")) {
        (Some(mib), _) => {
            let keep = query_u64(&query, "keep").is_some_and(|k| k > 0);
            grow(mib, query_u64(&query, "grow_mib_s").unwrap_or(0), keep).await
        }
        (None, Some(mib)) => {
            let mut grown = grow_sync(mib);
            if let Some(ms) = query_u64(&query, "spin_ms") {
                // Blocks this thread of the runtime, as a handler stuck in native code would.
                creep(Duration::from_millis(ms), query_u64(&query, "creep_mib_s").unwrap_or(0), &mut grown);
            }
            grown
        }
        (None, None) => Vec::new(),
    };
    if let Some(ms) = query_u64(&query, "sleep_ms") {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if let Some(flag) = query.split('&').find_map(|kv| kv.strip_prefix("hold_while=")) {
        // Held while a test's file exists: requests on several processes hold their memory together until the test
        // has seen what it waits for, however slowly the host runs.
        while std::path::Path::new(flag).exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let mut issued = None;
    if query.split('&').any(|kv| kv == "cache=start") {
        let id = format!("{}.{:x}", state.name, state.next_id.fetch_add(1, Ordering::Relaxed) + 1);
        if let Ok(mut s) = state.issued.lock() {
            s.insert(id.clone());
        }
        issued = Some(id);
    }
    let mut v = serde_json::json!({
        "name": state.name, "pid": std::process::id(), "method": method, "path": path, "xff": xff,
        "cache_id": cache_id.or(issued.clone()), "body_bytes": body_bytes,
        "held_bytes": hold.len() + grown.iter().map(Vec::len).sum::<usize>(),
    })
    .to_string();
    if let Some(kib) = query_u64(&query, "body_kib") {
        let want = usize::try_from(kib).unwrap_or(0).saturating_mul(1024);
        if want > v.len() {
            v.push_str(&" ".repeat(want - v.len()));
        }
    }
    let mut resp = match query_u64(&query, "trickle_ms") {
        Some(ms) => {
            let every =
                query_u64(&query, "line_ms").map_or(TRICKLE_EVERY, Duration::from_millis).max(Duration::from_millis(1));
            let lines = u32::try_from(ms / every.as_millis() as u64).unwrap_or(u32::MAX);
            let tick = Box::pin(tokio::time::sleep(Duration::ZERO));
            // The request is in flight until the body's last line.
            Response::new(Either::Right(Trickle { flight, lines, every, tick, _held: (hold, grown) }))
        }
        None => {
            drop(hold);
            drop(grown);
            flight.served();
            text(StatusCode::OK, v)
        }
    };
    resp.headers_mut().insert(
        "x-served-by",
        hyper::header::HeaderValue::from_str(&state.name)
            .unwrap_or_else(|_| hyper::header::HeaderValue::from_static("?")),
    );
    if let Some(id) = issued.and_then(|id| hyper::header::HeaderValue::from_str(&id).ok()) {
        resp.headers_mut().insert("x-cache-id", id);
    }
    Ok(resp)
}

/// How often `?trickle_ms`'s body sends a line, unless `?line_ms` says.
const TRICKLE_EVERY: Duration = Duration::from_millis(100);

/// `?trickle_ms=N`'s body: a line every `every` for N ms, the first at once, holding what the request
/// allocated until the last; dropped before it (its client gone, or the front door cutting it) it frees the memory
/// and its [`InFlight`] counts the request abandoned.
struct Trickle {
    flight: InFlight,
    lines: u32,
    every: Duration,
    tick: Pin<Box<tokio::time::Sleep>>,
    _held: (Vec<u8>, Vec<Vec<u8>>),
}

impl Body for Trickle {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if this.lines == 0 {
            if !this.flight.done {
                this.flight.served();
            }
            return Poll::Ready(None);
        }
        if this.tick.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        this.lines -= 1;
        this.tick.as_mut().reset(tokio::time::Instant::now() + this.every);
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b".\n")))))
    }
}

/// One POST of monitor's on an admin path: checked (when there is a secret), logged, and acted on only if good.
async fn admin(state: &State, req: Request<Incoming>) -> Result<Response<Answer>, BoxError> {
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str()).to_string();
    let header = |n: &str| req.headers().get(n).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    // The Host is only logged: the proof is checked against this process's own authority.
    let (proof, host) = (header("x-monitor-proof"), header("host"));
    let method = req.method().to_string();
    let body = req.into_body().collect().await?.to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let verdict = match &state.proofs {
        Some(p) => match p.lock() {
            Ok(mut p) => p.check(proof.as_deref(), &method, &target, &body),
            Err(_) => Err("checker poisoned".into()),
        },
        None => Ok(()),
    };
    // A process's own changes only: another process's, however proven, are not for it to act on.
    let own = target.starts_with("/admin/relay") || v["pid"].as_u64() == Some(u64::from(std::process::id()));
    let verdict = verdict.and_then(|()| if own { Ok(()) } else { Err("not my pid".to_string()) });
    if let Ok(mut log) = state.admin_log.lock() {
        if log.len() == ADMIN_LOG {
            log.pop_front();
        }
        log.push_back(serde_json::json!({
            "target": target,
            "host": host,
            "proof": proof,
            "body": String::from_utf8_lossy(&body),
            "verdict": verdict.as_ref().err().map_or("accepted", String::as_str),
        }));
    }
    if let Err(why) = verdict {
        if state.verbose {
            eprintln!("{}: {target}: refused: {why}", state.name);
        }
        if let Ok(mut r) = state.rejected.lock() {
            r.push(why.clone());
        }
        return Ok(text(StatusCode::UNAUTHORIZED, format!("refused: {why}\n")));
    }
    let action = v["action"].as_str().unwrap_or("?").to_string();
    if target.starts_with("/admin/relay") {
        if let Ok(mut r) = state.relay.lock() {
            r.push(serde_json::json!({"pid": v["pid"], "action": action}));
        }
    } else if let Ok(mut a) = state.admin.lock() {
        a.push(action);
    }
    Ok(text(StatusCode::NO_CONTENT, ""))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fixture-backend: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("fixture-backend: runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fixture-backend: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: Args) -> std::io::Result<()> {
    let addr = SocketAddr::from(([127, 0, 0, 1], args.port));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    // Its authority as the agent addresses it: the loopback address and port it listens at.
    let authority = listener.local_addr()?.to_string();
    let proofs = match std::env::var("MONITOR_ACTION_SECRET") {
        Ok(hex) => Some(Mutex::new(proof::Proofs::from_hex(&hex, authority).map_err(std::io::Error::other)?)),
        Err(_) => None,
    };
    let state = Arc::new(State {
        name: args.name,
        issued: Mutex::new(HashSet::new()),
        next_id: AtomicU64::new(0),
        requests: AtomicU64::new(0),
        served: AtomicU64::new(0),
        abandoned: AtomicU64::new(0),
        inflight: AtomicU64::new(0),
        dropped: AtomicU64::new(0),
        started: std::time::Instant::now(),
        health_delay: args.health_delay,
        health_hang_until: Mutex::new(None),
        admin: Mutex::new(Vec::new()),
        relay: Mutex::new(Vec::new()),
        proofs,
        rejected: Mutex::new(Vec::new()),
        admin_log: Mutex::new(std::collections::VecDeque::new()),
        verbose: args.verbose,
    });
    if state.verbose {
        eprintln!("{}: listening on {addr}", state.name);
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => r?,
            _ = term.recv() => return Ok(()),
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let keepalive = args.keepalive;
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| handle(state.clone(), req));
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(keepalive)
                .serve_connection(TokioIo::new(stream), svc);
            let _ = conn.await;
        });
    }
}

/// Memory a `keep=1` growth left behind: never given back.
static KEPT: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

/// What a growth holds; with `keep`, moved to [`KEPT`] when it is dropped (the request cancelled or answered).
struct Held {
    chunks: Vec<Vec<u8>>,
    keep: bool,
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.keep {
            KEPT.lock().unwrap_or_else(|e| e.into_inner()).append(&mut self.chunks);
        }
    }
}

/// Grows to `mib` MiB in touched 4 MiB chunks at `rate_mib_s` (0: as fast as it can), yielding after each chunk;
/// with `keep`, what it grew is kept for good once the request ends.
async fn grow(mib: u64, rate_mib_s: u64, keep: bool) -> Vec<Vec<u8>> {
    const CHUNK_MIB: u64 = 4;
    let chunks = mib.div_ceil(CHUNK_MIB);
    let mut held = Held { chunks: Vec::with_capacity(usize::try_from(chunks).unwrap_or(0)), keep };
    let start = tokio::time::Instant::now();
    for i in 0..chunks {
        if rate_mib_s > 0 {
            let due = start + Duration::from_secs_f64((i * CHUNK_MIB) as f64 / rate_mib_s as f64);
            tokio::time::sleep_until(due).await;
        } else {
            tokio::task::yield_now().await;
        }
        held.chunks.push(touched(CHUNK_MIB as usize * MIB));
    }
    if keep {
        // Dropped here: kept for good.
        return Vec::new();
    }
    std::mem::take(&mut held.chunks)
}

/// Grows to `mib` MiB in touched 4 MiB chunks as fast as it can, never yielding: nothing outside can stop it.
fn grow_sync(mib: u64) -> Vec<Vec<u8>> {
    (0..mib.div_ceil(4)).map(|_| touched(4 * MIB)).collect()
}

/// Blocks for `spin`, growing `held` by touched 1 MiB chunks at `rate_mib_s` MiB/s meanwhile (0: not at all).
fn creep(spin: Duration, rate_mib_s: u64, held: &mut Vec<Vec<u8>>) {
    let start = std::time::Instant::now();
    if rate_mib_s == 0 {
        std::thread::sleep(spin);
        return;
    }
    let every = Duration::from_secs(1) / u32::try_from(rate_mib_s).unwrap_or(u32::MAX);
    while start.elapsed() < spin {
        std::thread::sleep(every.min(spin.saturating_sub(start.elapsed())));
        held.push(touched(MIB));
    }
}

/// `bytes` of memory with every page written once: resident and private, at the speed of the page faults (a
/// byte-by-byte fill would set the pace in a debug build instead).
fn touched(bytes: usize) -> Vec<u8> {
    let mut v = vec![0u8; bytes];
    for b in v.iter_mut().step_by(4096) {
        *b = 1;
    }
    v
}
