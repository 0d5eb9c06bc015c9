//! The accept loop and the drain. Connections are admitted by [`super::admit`] (`max_connections`); each is served
//! by hyper's HTTP/1.1 server (malformed request line: 400; request head over `max_header_bytes`: 431, and no more
//! of a connection's input is buffered; a head not complete within `header_read_timeout_s`, or an idle kept-alive
//! connection after it: closed; a client that takes nothing of its answer for 30 s: cut, [`super::client_io`]).
//!
//! The drain, as nginx's graceful quit: the connections the kernel has already completed are taken (as far as
//! `max_connections` allows; the rest are closed), then the listening socket is closed (new ones are refused); every
//! request received is answered, each answer with
//! `Connection: close`, after which the connection closes; a kept-alive connection is closed only once it has been
//! quiet for [`QUIET`] (nothing read or written, the last bytes its answer's), so a request the client sent just
//! before or during the drain is answered rather than cut by a close; in-flight requests may finish until the
//! deadline. The front door has threads of its own (see [`serve`]).

use super::admit::{self, Admission, Admitted, Seat};
use super::body::{BoxError, ProxyBody};
use super::client_io::ClientIo;
use super::{Local, Proxy};
use crate::config::ProxyConfig;
use hyper::body::{Body, Bytes, Frame, SizeHint};
use hyper::header::{HeaderValue, CONNECTION};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

/// During the drain, how long a kept-alive connection must be quiet before it is closed.
pub const QUIET: Duration = Duration::from_millis(200);

/// The most connections one thread takes from the listening socket's queue when the drain starts.
const QUEUED_MAX: usize = 4096;
/// Resolves once the flag is true (or its sender is gone).
pub async fn until_set(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|d| *d).await;
}

/// What the drain found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    /// Connections still open at the deadline (their requests were cut).
    pub left: usize,
}

/// How many front-door threads: `configured`, or (0) one per core the process may run on.
fn threads(configured: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).clamp(1, 16)
}

/// Serves until `drain` turns true, then drains for at most `deadline`. The front door runs on its own threads
/// (`[proxy] threads`, default one per core), each a current-thread runtime accepting from the same listening
/// socket with its own upstream pools, so a request, its upstream exchange and its response never change threads
/// (and never queue behind the API). A thread that accepts while another has fewer connections hands the new one
/// over (once per connection).
pub async fn serve(
    proxy: Arc<Proxy>,
    listener: TcpListener,
    cfg: &ProxyConfig,
    mut drain: watch::Receiver<bool>,
    deadline: Duration,
) -> Drained {
    let n = threads(cfg.threads);
    let limits = Limits {
        max_header_bytes: cfg.max_header_bytes,
        header_read_timeout: Duration::from_secs(cfg.header_read_timeout_s),
    };
    let admission = Admission::new(cfg.max_connections);
    let (handoff, inboxes): (Vec<_>, Vec<_>) = (0..n).map(|_| mpsc::unbounded_channel()).unzip();
    let load = Arc::new(Load { live: (0..n).map(|_| AtomicUsize::new(0)).collect(), handoff });
    // Closed once every thread has stopped accepting (dropped its listener).
    let (accepting_tx, mut accepting_rx) = mpsc::channel::<()>(1);
    // Closed once every thread is done: its connections finished, or halted.
    let (done_tx, mut done_rx) = mpsc::channel::<()>(1);
    let (halt_tx, halt_rx) = watch::channel(false);
    let mut spawned = 0;
    match listener.into_std() {
        Ok(std_listener) => {
            for (i, inbox) in inboxes.into_iter().enumerate() {
                let l = match std_listener.try_clone() {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::warn!("front door thread {i}: cloning the listener: {e}");
                        break;
                    }
                };
                let t = Thread {
                    index: i,
                    proxy: proxy.clone(),
                    limits,
                    admission: admission.clone(),
                    drain: drain.clone(),
                    halt: halt_rx.clone(),
                    load: load.clone(),
                    inbox,
                    accepting: accepting_tx.clone(),
                    done: done_tx.clone(),
                };
                match std::thread::Builder::new().name(format!("front-{i}")).spawn(move || t.run(l)) {
                    Ok(_) => spawned += 1,
                    Err(e) => tracing::warn!("front door thread {i}: {e}"),
                }
            }
        }
        Err(e) => tracing::error!("front door listener: {e}"),
    }
    // The threads hold their own copies of the listening socket: it closes when the last of them drains.
    if spawned == 0 {
        tracing::error!("no front door thread could start: the proxy serves nothing");
    }
    drop((accepting_tx, done_tx));
    until_set(&mut drain).await;
    proxy.set_draining();
    let _ = accepting_rx.recv().await;
    let open = load.total();
    tracing::info!(connections = open, "stopped accepting; draining");
    match tokio::time::timeout(deadline, done_rx.recv()).await {
        Ok(_) => Drained { left: 0 },
        Err(_) => {
            let left = load.total();
            let _ = halt_tx.send(true);
            Drained { left }
        }
    }
}

/// What hyper is told of each front-door connection.
#[derive(Debug, Clone, Copy)]
struct Limits {
    max_header_bytes: usize,
    header_read_timeout: Duration,
}

/// A connection accepted (and admitted) by one thread for another.
type Handoff = (std::net::TcpStream, IpAddr, Admitted);

/// The open connections of each front-door thread, and the way to hand a new one to another thread.
struct Load {
    live: Vec<AtomicUsize>,
    handoff: Vec<mpsc::UnboundedSender<Handoff>>,
}

impl Load {
    fn total(&self) -> usize {
        self.live.iter().map(|l| l.load(Ordering::Relaxed)).sum()
    }

    /// The thread that should serve a connection accepted by thread `me`: `me` unless another thread has fewer
    /// open connections. The kernel wakes whichever thread it likes for a new connection (often the same one for
    /// a burst), so this keeps the threads even.
    fn pick(&self, me: usize) -> usize {
        let mine = self.live[me].load(Ordering::Relaxed);
        let (least, n) = self
            .live
            .iter()
            .map(|l| l.load(Ordering::Relaxed))
            .enumerate()
            .min_by_key(|&(_, n)| n)
            .unwrap_or((me, mine));
        if n < mine {
            least
        } else {
            me
        }
    }
}

/// One front-door thread.
struct Thread {
    index: usize,
    proxy: Arc<Proxy>,
    limits: Limits,
    admission: Arc<Admission>,
    drain: watch::Receiver<bool>,
    halt: watch::Receiver<bool>,
    load: Arc<Load>,
    inbox: mpsc::UnboundedReceiver<Handoff>,
    accepting: mpsc::Sender<()>,
    done: mpsc::Sender<()>,
}

impl Thread {
    fn run(self, listener: std::net::TcpListener) {
        let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt,
            Err(e) => {
                tracing::error!("front door runtime: {e}");
                return;
            }
        };
        let Thread { index, proxy, limits, admission, mut drain, mut halt, load, mut inbox, accepting, done } = self;
        rt.block_on(async move {
            let listener = match TcpListener::from_std(listener) {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!("front door listener: {e}");
                    return;
                }
            };
            let local = Arc::new(proxy.local());
            // This thread's own drain signal for its connections, raised when the shared one is: each connection
            // waits on it (a lock on every wake of the connection's task) without touching another thread's state.
            let (conn_drain_tx, conn_drain) = watch::channel(false);
            let reaper =
                tokio::spawn(local.pool.clone().reaper((proxy.idle_timeout() / 2).max(Duration::from_millis(100))));
            // Held by each connection of this thread: recv() ends once they are all gone.
            let (conn_tx, mut conn_rx) = mpsc::channel::<()>(1);
            let serve = Serve { local, load: load.clone(), index, limits, drain: conn_drain, conn: conn_tx };
            // A connection accepted at the cap: served once the one closed for it is gone, or (every connection
            // with a request on it) once one ends; no other is accepted meanwhile: they wait in the kernel's backlog.
            let mut waiting: Option<(TcpStream, IpAddr)> = None;
            let mut full = FullLog::default();
            loop {
                tokio::select! {
                    r = listener.accept(), if waiting.is_none() => match r {
                        Ok((stream, peer)) => match admission.admit() {
                            Ok(seat) => serve.dispatch(stream, peer.ip(), seat),
                            Err(why) => {
                                full.saw(why, admission.max());
                                waiting = Some((stream, peer.ip()));
                            }
                        },
                        Err(e) => {
                            // EMFILE and the like: wait a little rather than spin.
                            tracing::warn!("accept: {e}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    },
                    _ = admission.room(), if waiting.is_some() => match admission.admit() {
                        Ok(seat) => {
                            if let Some((stream, ip)) = waiting.take() {
                                serve.dispatch(stream, ip, seat);
                            }
                            full.over();
                        }
                        Err(why) => full.saw(why, admission.max()),
                    },
                    Some((s, ip, seat)) = inbox.recv() => match TcpStream::from_std(s) {
                        // Counted on this thread by the one that handed it over.
                        Ok(stream) => serve.start(stream, ip, true, seat),
                        Err(e) => {
                            load.live[index].fetch_sub(1, Ordering::Relaxed);
                            tracing::warn!("taking a connection from another thread: {e}");
                        }
                    },
                    _ = until_set(&mut drain) => {
                        proxy.set_draining();
                        break;
                    }
                }
            }
            let _ = conn_drain_tx.send(true);
            // Connections the kernel completed before the drain: their requests may be on the way, so they are
            // served (each answer closes its connection) as far as the door has room; the others are closed. Then
            // the listener is closed: new ones are refused.
            if let Some((stream, ip)) = waiting.take() {
                if let Ok(seat) = admission.admit() {
                    serve.start(stream, ip, false, seat);
                }
            }
            for _ in 0..QUEUED_MAX {
                let queued = std::future::poll_fn(|cx| match listener.poll_accept(cx) {
                    Poll::Ready(r) => Poll::Ready(Some(r.map(|(s, peer)| (s, peer.ip())))),
                    Poll::Pending => Poll::Ready(None),
                })
                .await;
                let Some(Ok((stream, ip))) = queued else { break };
                if let Ok(seat) = admission.admit() {
                    serve.start(stream, ip, false, seat);
                }
            }
            drop(listener);
            drop(accepting);
            drop(serve);
            tokio::select! {
                _ = conn_rx.recv() => {}
                _ = until_set(&mut halt) => {}
            }
            reaper.abort();
        });
        // Whatever is left (after a halt) is cut here, before the thread says it is done.
        drop(rt);
        drop(done);
    }
}

/// One thread's log of the door being full with every connection busy: a line when it starts, one when it ends.
#[derive(Default)]
struct FullLog {
    since: Option<tokio::time::Instant>,
}

impl FullLog {
    /// An admission just failed.
    fn saw(&mut self, why: admit::Full, max_connections: usize) {
        if self.since.is_none() && why == admit::Full::Busy {
            self.since = Some(tokio::time::Instant::now());
            tracing::warn!(
                max_connections,
                "front door full, every connection with a request on it: new connections wait"
            );
        }
    }

    /// A connection was admitted.
    fn over(&mut self) {
        if let Some(t) = self.since.take() {
            tracing::info!("front door admitting again after {} ms full", t.elapsed().as_millis());
        }
    }
}

/// Starts connections' tasks on one thread.
struct Serve {
    local: Arc<Local>,
    load: Arc<Load>,
    index: usize,
    limits: Limits,
    /// The thread's own drain signal, which each connection watches.
    drain: watch::Receiver<bool>,
    /// Held by each connection: the thread waits for them all at the end.
    conn: mpsc::Sender<()>,
}

impl Serve {
    /// Serves an admitted connection on this thread, or hands it to the thread with the fewest ([`Load::pick`]).
    fn dispatch(&self, stream: TcpStream, ip: IpAddr, seat: Admitted) {
        let to = self.load.pick(self.index);
        if to == self.index {
            self.start(stream, ip, false, seat);
            return;
        }
        match stream.into_std() {
            Ok(s) => {
                // Counted at once, so a burst of accepts spreads over the threads.
                self.load.live[to].fetch_add(1, Ordering::Relaxed);
                if self.load.handoff[to].send((s, ip, seat)).is_err() {
                    self.load.live[to].fetch_sub(1, Ordering::Relaxed);
                }
            }
            Err(e) => tracing::warn!("handing a connection to another thread: {e}"),
        }
    }

    /// Serves `stream` on this thread, counted on it until it ends; `counted` when the count already holds it (a
    /// connection handed over by another thread).
    fn start(&self, stream: TcpStream, ip: IpAddr, counted: bool, seat: Admitted) {
        let _ = stream.set_nodelay(true);
        if !counted {
            self.load.live[self.index].fetch_add(1, Ordering::Relaxed);
        }
        let finished = Finished { load: self.load.clone(), index: self.index, _conn: self.conn.clone(), seat };
        tokio::spawn(connection(self.local.clone(), stream, ip, self.limits, self.drain.clone(), finished));
    }
}

/// Counts a connection on its thread, and holds its seat at the door, until it ends.
struct Finished {
    load: Arc<Load>,
    index: usize,
    _conn: mpsc::Sender<()>,
    seat: Admitted,
}

impl Drop for Finished {
    fn drop(&mut self) {
        self.load.live[self.index].fetch_sub(1, Ordering::Relaxed);
    }
}

async fn connection(
    local: Arc<Local>,
    stream: TcpStream,
    ip: IpAddr,
    limits: Limits,
    mut drain: watch::Receiver<bool>,
    finished: Finished,
) {
    let peer = super::headers::client_value(ip);
    let seat = finished.seat.seat.clone();
    let svc = {
        let seat = seat.clone();
        hyper::service::service_fn(move |req| {
            let local = local.clone();
            let peer = peer.clone();
            let seat = seat.clone();
            async move {
                let resp = local.proxy.handle(&local, req, &peer, &seat).await;
                let (mut parts, body) = resp.into_parts();
                if local.proxy.draining() {
                    // The last answer on this connection: hyper closes it once written.
                    parts.headers.insert(CONNECTION, HeaderValue::from_static("close"));
                }
                Ok::<_, Infallible>(hyper::Response::from_parts(parts, Answer { body, seat }))
            }
        })
    };
    let marks = seat.marks.clone();
    // No more of the client's input is buffered than the largest head allowed (hyper's default is 400 KiB).
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_header_size(limits.max_header_bytes)
        .max_buf_size(limits.max_header_bytes)
        .serve_connection(TokioIo::new(ClientIo::new(stream, marks.clone())), svc);
    tokio::pin!(conn);
    tokio::select! {
        biased;
        _ = conn.as_mut() => return,
        _ = seat.evicted() => return,
        _ = until_set(&mut drain) => {}
    }
    // Draining. A request that comes (or has come) is answered with `Connection: close` and hyper then closes the
    // connection by itself; one that is quiet for QUIET, its last bytes an answer's, is closed here (at once if idle,
    // else after the answer in progress).
    let mut seen = marks.moves();
    loop {
        tokio::select! {
            biased;
            _ = conn.as_mut() => return,
            _ = seat.evicted() => return,
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

/// An answer's body, which marks its connection as waiting on its client again once it is sent (or dropped).
struct Answer {
    body: ProxyBody,
    seat: Arc<Seat>,
}

impl Drop for Answer {
    fn drop(&mut self) {
        self.seat.waiting();
    }
}

impl Body for Answer {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(live: &[usize]) -> Load {
        Load {
            live: live.iter().map(|&n| AtomicUsize::new(n)).collect(),
            handoff: live.iter().map(|_| mpsc::unbounded_channel().0).collect(),
        }
    }

    #[test]
    fn a_new_connection_goes_to_the_thread_with_the_fewest() {
        let cases: &[(&[usize], usize, usize)] = &[
            (&[0, 0], 0, 0),
            (&[0, 0], 1, 1),
            (&[3, 2], 0, 1),
            (&[2, 3], 1, 0),
            (&[5, 5, 4], 0, 2),
            (&[4, 5, 4], 0, 0),
            (&[7], 0, 0),
        ];
        for (live, me, want) in cases {
            assert_eq!(load(live).pick(*me), *want, "{live:?} accepted by {me}");
        }
        assert_eq!(load(&[1, 2, 3]).total(), 6);
    }
}
