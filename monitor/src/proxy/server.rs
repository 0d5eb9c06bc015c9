//! The accept loop and the drain. Each connection is served by hyper's HTTP/1.1 server (malformed request line:
//! 400; request head over `max_header_bytes`: 431). On drain: stop accepting, close idle keep-alive connections,
//! let in-flight requests finish until the deadline. The front door has threads of its own (see [`serve`]).

use super::upstream::Upstream;
use super::Proxy;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

/// How long a client may take to send a request head.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

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

/// How many front-door threads: one per core the process may run on.
fn threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).clamp(1, 16)
}

/// Serves until `drain` turns true, then drains for at most `deadline`. The front door runs on its own threads, one
/// per core, each a current-thread runtime accepting from the same listening socket with its own upstream pools, so
/// a request, its upstream exchange and its response never change threads (and never queue behind the API).
pub async fn serve(
    proxy: Arc<Proxy>,
    listener: TcpListener,
    max_header_bytes: usize,
    mut drain: watch::Receiver<bool>,
    deadline: Duration,
) -> Drained {
    let live = Arc::new(AtomicUsize::new(0));
    // Closed once every thread has stopped accepting (dropped its listener).
    let (accepting_tx, mut accepting_rx) = mpsc::channel::<()>(1);
    // Closed once every thread is done: its connections finished, or halted.
    let (done_tx, mut done_rx) = mpsc::channel::<()>(1);
    let (halt_tx, halt_rx) = watch::channel(false);
    let mut spawned = 0;
    match listener.into_std() {
        Ok(std_listener) => {
            for i in 0..threads() {
                let l = match std_listener.try_clone() {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::warn!("front door thread {i}: cloning the listener: {e}");
                        break;
                    }
                };
                let t = Thread {
                    proxy: proxy.clone(),
                    max_header_bytes,
                    drain: drain.clone(),
                    halt: halt_rx.clone(),
                    live: live.clone(),
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
    if spawned == 0 {
        tracing::error!("no front door thread could start: the proxy serves nothing");
    }
    drop((accepting_tx, done_tx));
    until_set(&mut drain).await;
    proxy.set_draining();
    let _ = accepting_rx.recv().await;
    let open = live.load(Ordering::Relaxed);
    tracing::info!(connections = open, "stopped accepting; draining");
    match tokio::time::timeout(deadline, done_rx.recv()).await {
        Ok(_) => Drained { left: 0 },
        Err(_) => {
            let left = live.load(Ordering::Relaxed);
            let _ = halt_tx.send(true);
            Drained { left }
        }
    }
}

/// One front-door thread.
struct Thread {
    proxy: Arc<Proxy>,
    max_header_bytes: usize,
    drain: watch::Receiver<bool>,
    halt: watch::Receiver<bool>,
    live: Arc<AtomicUsize>,
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
        let Thread { proxy, max_header_bytes, mut drain, mut halt, live, accepting, done } = self;
        rt.block_on(async move {
            let listener = match TcpListener::from_std(listener) {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!("front door listener: {e}");
                    return;
                }
            };
            let pool = Arc::new(proxy.upstream());
            let reaper = tokio::spawn(pool.clone().reaper(proxy.idle_timeout() / 2));
            // Held by each connection of this thread: recv() ends once they are all gone.
            let (conn_tx, mut conn_rx) = mpsc::channel::<()>(1);
            loop {
                let (stream, peer) = tokio::select! {
                    r = listener.accept() => match r {
                        Ok(x) => x,
                        Err(e) => {
                            // EMFILE and the like: wait a little rather than spin.
                            tracing::warn!("accept: {e}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    },
                    _ = until_set(&mut drain) => break,
                };
                let _ = stream.set_nodelay(true);
                live.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(connection(
                    proxy.clone(),
                    pool.clone(),
                    stream,
                    peer.ip(),
                    max_header_bytes,
                    drain.clone(),
                    Finished { live: live.clone(), _conn: conn_tx.clone() },
                ));
            }
            drop(listener);
            drop(accepting);
            drop(conn_tx);
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

/// Counts a connection until it ends.
struct Finished {
    live: Arc<AtomicUsize>,
    _conn: mpsc::Sender<()>,
}

impl Drop for Finished {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn connection(
    proxy: Arc<Proxy>,
    pool: Arc<Upstream>,
    stream: TcpStream,
    ip: IpAddr,
    max_header_bytes: usize,
    mut drain: watch::Receiver<bool>,
    _finished: Finished,
) {
    let svc = hyper::service::service_fn(move |req| {
        let proxy = proxy.clone();
        let pool = pool.clone();
        async move { Ok::<_, Infallible>(proxy.handle(&pool, req, ip).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_header_size(max_header_bytes)
        .serve_connection(TokioIo::new(stream), svc);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = until_set(&mut drain) => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}
