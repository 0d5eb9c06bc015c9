//! Upstream keep-alive pools: per front-door thread, per process, a stack of idle `hyper::client::conn::http1`
//! senders. Each connection is driven by a task on the thread that opened it, so a request, its upstream exchange
//! and its response stay on one thread. A connection idle for `idle_timeout` (below the backends' own) is never
//! reused; a sender goes back to the pool only after its response body ended cleanly.
//!
//! Each connection's task also watches its thread's abort channel of its process ([`super::Backend::abort`]), once
//! for the connection's life, and closes the connection when the memory guard tells the process to abort: that ends
//! the exchange or the response body of the request on it.
//!
//! Each connection keeps one timer for the deadline of the request it carries ([`Deadline`]): a checkout moves it on
//! to the new request's deadline. Moving a timer that has not fired to a later time is one atomic store in tokio,
//! where a timer made and dropped per request takes the timer driver's lock twice.

use super::ReqBody;
use crate::base::on_wake::OnWake;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::time::Sleep;

/// A connection's timer, set to the deadline of the request it carries.
pub type Deadline = Pin<Box<Sleep>>;

/// How long connecting to a process may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Idle connections kept per process and thread, at most.
const MAX_IDLE: usize = 256;

/// Why no connection to a process could be had.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("connecting to {addr}: {source}")]
    Io { addr: SocketAddr, source: std::io::Error },
    #[error("connecting to {addr}: no connection within {} s", CONNECT_TIMEOUT.as_secs())]
    Timeout { addr: SocketAddr },
    #[error("HTTP/1 handshake with {addr}: {source}")]
    Handshake { addr: SocketAddr, source: hyper::Error },
    /// The request's deadline passed before a connection was ready.
    #[error("no connection to {addr} before the request's deadline")]
    Deadline { addr: SocketAddr },
}

struct Idle {
    tx: SendRequest<ReqBody>,
    deadline: Deadline,
    since: Instant,
}

/// One front-door thread's connections to every process.
pub struct Upstream {
    idle: Vec<Mutex<Vec<Idle>>>,
    idle_timeout: Duration,
}

/// A sender checked out of the pool, its timer set to the request's deadline; `reused` when it has carried a
/// request before.
pub struct Checkout {
    pub tx: SendRequest<ReqBody>,
    pub deadline: Deadline,
    pub reused: bool,
}

impl Upstream {
    pub fn new(processes: usize, idle_timeout: Duration) -> Upstream {
        Upstream { idle: (0..processes).map(|_| Mutex::new(Vec::new())).collect(), idle_timeout }
    }

    fn pop(&self, index: usize) -> Option<Idle> {
        self.idle[index].lock().unwrap_or_else(PoisonError::into_inner).pop()
    }

    /// A ready sender to process `index` at `addr`, its timer set to `deadline`: the most recently used idle one
    /// (unless `fresh`), or a new connection (closed when `abort` moves); none after `deadline`.
    pub async fn checkout(
        &self,
        index: usize,
        addr: SocketAddr,
        abort: &watch::Sender<u64>,
        deadline: tokio::time::Instant,
        fresh: bool,
    ) -> Result<Checkout, ConnectError> {
        while let Some(mut idle) = if fresh { None } else { self.pop(index) } {
            if idle.tx.is_closed() || idle.since.elapsed() >= self.idle_timeout {
                continue;
            }
            if !idle.tx.is_ready() {
                match tokio::time::timeout_at(deadline, idle.tx.ready()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => continue,
                    Err(_) => return Err(ConnectError::Deadline { addr }),
                }
            }
            idle.deadline.as_mut().reset(deadline);
            return Ok(Checkout { tx: idle.tx, deadline: idle.deadline, reused: true });
        }
        // Boxed: connecting is rare, and the future of every request's exchange would otherwise carry its size.
        let tx = match Box::pin(tokio::time::timeout_at(deadline, connect(addr, abort.subscribe()))).await {
            Ok(tx) => tx?,
            Err(_) => return Err(ConnectError::Deadline { addr }),
        };
        Ok(Checkout { tx, deadline: Box::pin(tokio::time::sleep_until(deadline)), reused: false })
    }

    /// Puts a sender whose exchange ended cleanly back for the next request, with its timer.
    pub(crate) fn checkin(&self, index: usize, tx: SendRequest<ReqBody>, deadline: Deadline) {
        if tx.is_closed() {
            return;
        }
        let mut idle = self.idle[index].lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < MAX_IDLE {
            idle.push(Idle { tx, deadline, since: Instant::now() });
        }
    }

    /// Closes the connections idle past the timeout (and forgets those the process closed).
    pub fn reap(&self) {
        for list in &self.idle {
            let mut idle = list.lock().unwrap_or_else(PoisonError::into_inner);
            idle.retain(|i| !i.tx.is_closed() && i.since.elapsed() < self.idle_timeout);
        }
    }

    /// Reaps every `every` until the runtime stops.
    pub(crate) async fn reaper(self: Arc<Self>, every: Duration) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.reap();
        }
    }
}

/// Resolves when the process is told to abort (its thread's abort channel moves); never if the sender is gone.
async fn aborted(mut rx: watch::Receiver<u64>) {
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// A new connection to `addr`, driven by a task of its own until it ends or `abort` moves.
async fn connect(addr: SocketAddr, abort: watch::Receiver<u64>) -> Result<SendRequest<ReqBody>, ConnectError> {
    let stream = match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(source)) => return Err(ConnectError::Io { addr, source }),
        Err(_) => return Err(ConnectError::Timeout { addr }),
    };
    let _ = stream.set_nodelay(true);
    let (tx, conn) = http1::Builder::new()
        .handshake(TokioIo::new(stream))
        .await
        .map_err(|source| ConnectError::Handshake { addr, source })?;
    tokio::spawn(async move {
        // The abort is rare: polled only when it wakes the task, not on each of the connection's I/O wake-ups.
        let aborted = OnWake::new(aborted(abort));
        tokio::select! {
            biased;
            r = conn => {
                if let Err(e) = r {
                    tracing::debug!(%addr, "upstream connection ended: {e}");
                }
            }
            _ = aborted => tracing::debug!(%addr, "upstream connection closed: its process was told to abort"),
        }
    });
    Ok(tx)
}
