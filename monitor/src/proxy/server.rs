//! The accept loop and the drain. Each connection is served by hyper's HTTP/1.1 server (malformed request line:
//! 400; request head over `max_header_bytes`: 431). On drain: stop accepting, close idle keep-alive connections,
//! let in-flight requests finish until the deadline.

use super::Proxy;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
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

/// Serves until `drain` turns true, then drains for at most `deadline`.
pub async fn serve(
    proxy: Arc<Proxy>,
    listener: TcpListener,
    max_header_bytes: usize,
    mut drain: watch::Receiver<bool>,
    deadline: Duration,
) -> Drained {
    let (done_tx, mut done_rx) = mpsc::channel::<()>(1);
    let live = Arc::new(std::sync::atomic::AtomicUsize::new(0));
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
        let proxy = proxy.clone();
        let mut drain = drain.clone();
        let done = done_tx.clone();
        let live = live.clone();
        live.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tokio::spawn(async move {
            let ip = peer.ip();
            let svc = hyper::service::service_fn(move |req| {
                let proxy = proxy.clone();
                async move { Ok::<_, Infallible>(proxy.handle(req, ip).await) }
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
            live.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            drop(done);
        });
    }
    proxy.set_draining();
    drop(listener);
    drop(done_tx);
    let open = live.load(std::sync::atomic::Ordering::Relaxed);
    tracing::info!(connections = open, "stopped accepting; draining");
    match tokio::time::timeout(deadline, done_rx.recv()).await {
        Ok(_) => Drained { left: 0 },
        Err(_) => Drained { left: live.load(std::sync::atomic::Ordering::Relaxed) },
    }
}
