//! One accept loop for the agent's HTTP/1.1 servers, the API and the front door: each gives its [`Limits`] and its
//! service per connection. Connections are admitted by [`admit`] (in all and per client address, a connection
//! waiting on its client closed to make room); each is served by hyper (a request head over `max_header_bytes`:
//! 431, and no more of a connection's input is buffered; a head not complete within `header_read_timeout`, or an
//! idle kept-alive connection after it: closed; a client that takes nothing of its answer for 30 s: cut,
//! [`client_io`]).
//!
//! The drain, as nginx's graceful quit: the connections the kernel has already completed are taken (as far as the
//! bounds allow; the rest are closed), then the listening socket is closed (new ones are refused); every request
//! received is answered, each answer with `Connection: close`, after which the connection closes; a kept-alive
//! connection is closed only once it has been quiet for [`QUIET`] (nothing read or written, the last bytes its
//! answer's), so a request the client sent just before or during the drain is answered rather than cut by a close.

pub mod admit;
pub mod client_io;
mod head_timer;

pub use admit::{Admission, Admitted, Bounds, Full, Seat};

use crate::base::on_wake::OnWake;
use client_io::ClientIo;
use hyper::body::{Body, Incoming};
use hyper::header::{HeaderValue, CONNECTION};
use hyper::service::Service;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

/// During the drain, how long a kept-alive connection must be quiet before it is closed.
pub(crate) const QUIET: Duration = Duration::from_millis(200);

/// The most connections one accept loop takes from the listening socket's queue when the drain starts.
const QUEUED_MAX: usize = 4096;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a server holds its connections to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// The server's name in the logs.
    pub name: &'static str,
    pub bounds: Bounds,
    /// When every connection in a full scope has a request on it: close new connections (true), or take no more
    /// and leave them in the kernel's accept backlog until one ends (false).
    pub refuse_when_busy: bool,
    /// How long a client has to send a request's head, from when its connection opens or falls idle.
    pub header_read_timeout: Duration,
    /// The largest request head, and the most of a connection's input buffered (hyper's default is 400 KiB).
    pub max_header_bytes: usize,
}

/// The connections of one accept loop: their drain signal, and the wait for them all to end.
pub(crate) struct Conns {
    drain: watch::Sender<bool>,
    conn: Conn,
    done: mpsc::Receiver<()>,
}

/// What each connection of a [`Conns`] holds while it is served.
#[derive(Clone)]
pub(crate) struct Conn {
    drain: watch::Receiver<bool>,
    _alive: mpsc::Sender<()>,
}

impl Conns {
    pub fn new() -> Conns {
        let (drain, rx) = watch::channel(false);
        let (alive, done) = mpsc::channel(1);
        Conns { drain, conn: Conn { drain: rx, _alive: alive }, done }
    }

    /// The handle a new connection holds.
    pub fn conn(&self) -> Conn {
        self.conn.clone()
    }

    /// Resolves once every connection (and every handle of [`Conns::conn`]) is gone.
    pub async fn ended(self) {
        let Conns { conn, mut done, .. } = self;
        drop(conn);
        let _ = done.recv().await;
    }
}

/// Accepts on `listener` until `stop` resolves, handing each admitted connection to `serve` (its stream, client
/// address, seat, and whether it was taken from the queue once the drain began). Then tells `conns` to drain,
/// serves the connections the kernel completed before, and closes the listener.
pub async fn accept(
    listener: TcpListener,
    admission: &Arc<Admission>,
    limits: &Limits,
    stop: impl Future<Output = ()>,
    conns: &Conns,
    mut serve: impl FnMut(TcpStream, IpAddr, Admitted, bool),
) {
    let name = limits.name;
    let max_connections = limits.bounds.max_total;
    // A connection accepted at a bound: served once the one closed for it is gone, or (every connection with a
    // request on it, unless such are refused) once one ends; no other is accepted meanwhile.
    let mut waiting: Option<(TcpStream, IpAddr)> = None;
    // Since when every connection in a full scope has had a request on it.
    let mut full: Option<tokio::time::Instant> = None;
    // A connection was told to close for the one waiting.
    let mut closing = false;
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            r = listener.accept(), if waiting.is_none() => match r {
                Ok((stream, peer)) => waiting = Some((stream, peer.ip())),
                Err(e) => {
                    // EMFILE and the like: wait a little rather than spin.
                    tracing::warn!("{name}: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = admission.room(), if waiting.is_some() => {}
        }
        let Some((stream, ip)) = waiting.take() else { continue };
        match admission.admit(ip) {
            Ok(seat) => {
                closing = false;
                if let Some(t) = full.take() {
                    tracing::info!("{name} admitting again after {} ms full", t.elapsed().as_millis());
                }
                serve(stream, ip, seat, false);
            }
            Err(Full::Closing) => {
                if !closing {
                    tracing::debug!(%ip, "{name} connections at their limit: closing the one waiting longest");
                    closing = true;
                }
                waiting = Some((stream, ip));
            }
            Err(Full::Busy) => {
                if full.is_none() {
                    full = Some(tokio::time::Instant::now());
                    let then = if limits.refuse_when_busy { "are closed" } else { "wait" };
                    let why = "every connection with a request on it";
                    tracing::warn!(max_connections, %ip, "{name} full, {why}: new connections {then}");
                }
                if !limits.refuse_when_busy {
                    waiting = Some((stream, ip));
                }
            }
        }
    }
    let _ = conns.drain.send(true);
    // Connections the kernel completed before the drain: their requests may be on the way, so they are served
    // (each answer closes its connection) as far as the bounds allow; the others are closed. Then the listener is
    // closed: new ones are refused.
    let queued = std::iter::from_fn(|| {
        match listener.poll_accept(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
            Poll::Ready(Ok((s, peer))) => Some((s, peer.ip())),
            _ => None,
        }
    });
    for (stream, ip) in waiting.into_iter().chain(queued.take(QUEUED_MAX)) {
        if let Ok(seat) = admission.admit(ip) {
            serve(stream, ip, seat, true);
        }
    }
}

/// Serves one admitted connection with `svc` until it ends, the door closes it for a new one ([`Seat::evicted`]),
/// or the drain does.
pub async fn connection<S, B>(stream: TcpStream, admitted: Admitted, limits: Limits, conn: Conn, svc: S)
where
    S: Service<Request<Incoming>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    B: Body + 'static,
    B::Error: Into<BoxError>,
{
    let seat = admitted.seat.clone();
    let Conn { mut drain, _alive } = conn;
    let closing = drain.clone();
    let svc = hyper::service::service_fn(move |req| {
        let answer = svc.call(req);
        let closing = closing.clone();
        async move {
            let mut resp = answer.await?;
            if *closing.borrow() {
                // The last answer on this connection: hyper closes it once written.
                resp.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
            }
            Ok::<_, S::Error>(resp)
        }
    });
    let marks = seat.marks.clone();
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(head_timer::HeadTimer::default())
        .header_read_timeout(limits.header_read_timeout)
        .max_header_size(limits.max_header_bytes)
        .max_buf_size(limits.max_header_bytes)
        .serve_connection(TokioIo::new(ClientIo::new(stream, marks.clone())), svc);
    tokio::pin!(conn);
    // The eviction and the drain are rare: polled only when they wake the task, not on each of its I/O wake-ups.
    let mut evicted = OnWake::new(seat.evicted());
    {
        let mut drained = OnWake::new(drain.wait_for(|d| *d));
        tokio::select! {
            biased;
            _ = conn.as_mut() => return,
            _ = &mut evicted => return,
            _ = &mut drained => {}
        }
    }
    // Draining. A request that comes (or has come) is answered with `Connection: close` and hyper then closes the
    // connection by itself; one that is quiet for QUIET, its last bytes an answer's, is closed here (at once if
    // idle, else after the answer in progress).
    let mut seen = marks.moves();
    loop {
        tokio::select! {
            biased;
            _ = conn.as_mut() => return,
            _ = &mut evicted => return,
            _ = tokio::time::sleep(QUIET) => {}
        }
        let now = marks.moves();
        if now == seen && !marks.read_last() {
            break;
        }
        seen = now;
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}
