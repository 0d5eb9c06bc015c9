//! The front door's threads on [`crate::base::accept`]'s loop: connections are admitted by `max_connections` (at the
//! cap, the one that has owed a request longest is closed, else the one idle longest; when every one has a request
//! at a process, new ones wait in the kernel's backlog), served by hyper with `max_header_bytes` and
//! `header_read_timeout_s`, and drained as nginx's graceful quit; in-flight requests may finish until the deadline.
//! The front door has threads of its own (see [`serve`]).

use super::body::{BoxError, ProxyBody};
use super::{Local, Proxy};
use crate::base::accept::admit::Answering;
use crate::base::accept::{self, Admission, Admitted, Bounds, Conn, Conns, Limits};
use crate::config::ProxyConfig;
use hyper::body::{Body, Bytes, Frame, SizeHint};
use std::convert::Infallible;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

/// Resolves once the flag is true (or its sender is gone).
pub(crate) async fn until_set(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|d| *d).await;
}

/// What the drain found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    /// Connections still open at the deadline (their requests were cut).
    pub left: usize,
}

/// How many front-door threads: `configured`, or (0) one per core the process may run on.
pub(crate) fn threads(configured: usize) -> usize {
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
    let n = proxy.threads();
    let limits = Limits {
        name: "front door",
        bounds: Bounds { max_total: cfg.max_connections, max_per_ip: None, owed_first: true },
        refuse_when_busy: false,
        header_read_timeout: Duration::from_secs(cfg.header_read_timeout_s),
        max_header_bytes: cfg.max_header_bytes,
    };
    let admission = Admission::new(limits.bounds);
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
            let reaper =
                tokio::spawn(local.pool.clone().reaper((proxy.idle_timeout() / 2).max(Duration::from_millis(100))));
            // This thread's own connections: their drain signal (raised when the shared one is, so a connection
            // waits on it without touching another thread's state) and the wait for their end.
            let conns = Conns::new();
            let serve = Arc::new(Serve { local, load: load.clone(), index, limits, conn: conns.conn() });
            // Connections handed over by another thread, until the drain.
            let handed = {
                let (serve, mut drain) = (serve.clone(), drain.clone());
                tokio::spawn(async move {
                    loop {
                        tokio::select! {
                            Some((s, ip, seat)) = inbox.recv() => match TcpStream::from_std(s) {
                                // Counted on this thread by the one that handed it over.
                                Ok(stream) => serve.start(stream, ip, true, seat),
                                Err(e) => {
                                    serve.load.live[index].fetch_sub(1, Ordering::Relaxed);
                                    tracing::warn!("taking a connection from another thread: {e}");
                                }
                            },
                            _ = until_set(&mut drain) => break,
                        }
                    }
                })
            };
            let stop = async {
                until_set(&mut drain).await;
                proxy.set_draining();
            };
            accept::accept(listener, &admission, &limits, stop, &conns, |stream, ip, seat, queued| match queued {
                true => serve.start(stream, ip, false, seat),
                false => serve.dispatch(stream, ip, seat),
            })
            .await;
            drop(accepting);
            let _ = handed.await;
            drop(serve);
            tokio::select! {
                _ = conns.ended() => {}
                _ = until_set(&mut halt) => {}
            }
            reaper.abort();
        });
        // Whatever is left (after a halt) is cut here, before the thread says it is done.
        drop(rt);
        drop(done);
    }
}

/// Starts connections' tasks on one thread.
struct Serve {
    local: Arc<Local>,
    load: Arc<Load>,
    index: usize,
    limits: Limits,
    /// Held by each connection: its drain signal, and the thread waits for them all at the end.
    conn: Conn,
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
    fn start(&self, stream: TcpStream, ip: IpAddr, counted: bool, admitted: Admitted) {
        let _ = stream.set_nodelay(true);
        if !counted {
            self.load.live[self.index].fetch_add(1, Ordering::Relaxed);
        }
        let counts = Counted { load: self.load.clone(), index: self.index };
        let (local, peer, seat) = (self.local.clone(), super::headers::client_value(ip), admitted.seat.clone());
        let svc = hyper::service::service_fn(move |req| {
            let (local, peer, seat) = (local.clone(), peer.clone(), seat.clone());
            async move {
                let resp = local.proxy.handle(&local, req, &peer, &seat).await;
                let (parts, body) = resp.into_parts();
                Ok::<_, Infallible>(hyper::Response::from_parts(parts, Answer { body, _seat: Answering(seat) }))
            }
        });
        let conn = accept::connection(stream, admitted, self.limits, self.conn.clone(), svc);
        tokio::spawn(async move {
            conn.await;
            drop(counts);
        });
    }
}

/// Counts a connection on its thread until it ends.
struct Counted {
    load: Arc<Load>,
    index: usize,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.load.live[self.index].fetch_sub(1, Ordering::Relaxed);
    }
}

/// An answer's body, which marks its connection as waiting on its client again once it is sent (or dropped).
struct Answer {
    body: ProxyBody,
    _seat: Answering,
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
