//! The web server's accept loop: HTTP/1.1 over hyper with a deadline for each request's head, a bounded read
//! buffer, and admission of each new connection by [`admit`] (per client address and in all, the longest-idle
//! connection closed to make room).

use axum::Router;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long a client has to send a request's head, counted from when the connection opens or falls idle between
/// requests: an idle or slow client (or a port scanner) holds no socket of the agent for longer.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections one client address may hold at once (loopback clients, the host's own admin and probes, are held
/// only to `[web] max_connections`).
pub const MAX_PER_IP: usize = 64;

/// What to do with a new connection, given those open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// There is room.
    Admit,
    /// There is room once this idle connection (the longest idle in the scope that is full) is closed.
    Evict(u64),
    /// Every connection in the full scope is in the middle of a request: the new one is closed.
    Refuse,
}

/// One open connection as [`admit`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct OpenConn {
    pub id: u64,
    pub ip: IpAddr,
    /// A request is being answered on it.
    pub busy: bool,
    /// When it last became idle (opened, or finished a request), in ms on any monotonic clock.
    pub idle_since_ms: u64,
}

/// Admission of a connection from `ip`: within `max_per_ip` for its address (unless it is a loopback address)
/// and `max_total` in all.
/// When a limit is reached, the longest-idle connection in that scope (one between requests, or that never sent
/// one) is closed to make room, as a server under connection pressure closes its idle keep-alive connections:
/// a crowd of idle clients can never keep a probe out, and a client at its own limit only displaces itself.
pub fn admit(open: &[OpenConn], ip: IpAddr, max_total: usize, max_per_ip: usize) -> Admission {
    let oldest_idle = |same_ip: bool| {
        open.iter()
            .filter(|c| !c.busy && (!same_ip || c.ip == ip))
            .min_by_key(|c| (c.idle_since_ms, c.id))
            .map_or(Admission::Refuse, |c| Admission::Evict(c.id))
    };
    if !ip.is_loopback() && open.iter().filter(|c| c.ip == ip).count() >= max_per_ip {
        oldest_idle(true)
    } else if open.len() >= max_total {
        oldest_idle(false)
    } else {
        Admission::Admit
    }
}

/// A connection's activity, shared between its task and the accept loop.
#[derive(Default)]
struct Activity {
    /// Requests being answered.
    busy: AtomicUsize,
    idle_since_ms: AtomicU64,
}

struct Registered {
    ip: IpAddr,
    activity: Arc<Activity>,
    close: Arc<tokio::sync::Notify>,
}

/// The open connections, by id.
#[derive(Default)]
struct Registry {
    conns: std::sync::Mutex<HashMap<u64, Registered>>,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Registered>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Marks a connection busy while a request is answered (also when the connection is dropped mid-request).
struct Busy {
    activity: Arc<Activity>,
    clock: Instant,
}

impl Busy {
    fn start(activity: Arc<Activity>, clock: Instant) -> Busy {
        activity.busy.fetch_add(1, Ordering::Relaxed);
        Busy { activity, clock }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.activity.idle_since_ms.store(self.clock.elapsed().as_millis() as u64, Ordering::Relaxed);
        self.activity.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves `app` on `listener` (HTTP/1.1) until `shutdown` resolves, then lets the open connections finish their
/// requests (5 s at most). Unlike `axum::serve`, a connection that sends no complete request head within
/// [`HEADER_TIMEOUT`] is closed, and connections are admitted by [`admit`]: at most [`MAX_PER_IP`] per client
/// address and `limits.max_connections` in all, the longest-idle one closed to make room for a new one. No more of
/// a connection's input is buffered than `limits.max_header_bytes` (hyper's default is 400 KiB a connection).
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: crate::config::WebConfig,
    shutdown: impl std::future::Future<Output = ()>,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use tower::ServiceExt;
    let registry = Arc::new(Registry::default());
    let clock = Instant::now();
    // Each connection's task holds a sender: the receiver ends when every task has.
    let (alive, mut all_done) = tokio::sync::mpsc::channel::<()>(1);
    let (stop, stopping) = watch::channel(false);
    let mut full = false;
    let mut next_id = 0u64;
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_header_size(limits.max_header_bytes)
        .max_buf_size(limits.max_header_bytes);
    let max_connections = limits.max_connections;
    let builder = Arc::new(builder);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors or memory: wait for some to be freed rather than spin.
                    tracing::debug!("accepting an API connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let ip = peer.ip();
        next_id += 1;
        let id = next_id;
        let activity = Arc::new(Activity::default());
        activity.idle_since_ms.store(clock.elapsed().as_millis() as u64, Ordering::Relaxed);
        let close = Arc::new(tokio::sync::Notify::new());
        {
            let mut conns = registry.lock();
            let open: Vec<OpenConn> = conns
                .iter()
                .map(|(&id, c)| OpenConn {
                    id,
                    ip: c.ip,
                    busy: c.activity.busy.load(Ordering::Relaxed) > 0,
                    idle_since_ms: c.activity.idle_since_ms.load(Ordering::Relaxed),
                })
                .collect();
            match admit(&open, ip, max_connections, MAX_PER_IP) {
                Admission::Admit => full = false,
                Admission::Evict(old) => {
                    if let Some(c) = conns.remove(&old) {
                        c.close.notify_one();
                    }
                    tracing::debug!(%ip, "API connections at their limit: closed the longest-idle one");
                }
                Admission::Refuse => {
                    if !full {
                        tracing::warn!(%ip, "every API connection is answering a request: closing new ones");
                        full = true;
                    }
                    continue; // the stream is dropped: closed
                }
            }
            conns.insert(id, Registered { ip, activity: activity.clone(), close: close.clone() });
        }
        let (app, builder, mut stopping) = (app.clone(), builder.clone(), stopping.clone());
        let (registry, alive) = (registry.clone(), alive.clone());
        tokio::spawn(async move {
            let _alive = alive;
            let svc = hyper::service::service_fn(move |req: axum::http::Request<hyper::body::Incoming>| {
                let busy = Busy::start(activity.clone(), clock);
                let answer = app.clone().oneshot(req.map(axum::body::Body::new));
                async move {
                    let r = answer.await;
                    drop(busy);
                    r
                }
            });
            let conn = builder.serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = close.notified() => {} // evicted: dropping the connection closes it
                _ = stopping.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            registry.lock().remove(&id);
        });
    }
    drop(listener);
    drop(alive);
    let _ = stop.send(true);
    if tokio::time::timeout(Duration::from_secs(5), all_done.recv()).await.is_err() {
        tracing::warn!("API connections still open 5 s after the shutdown: closed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(id: u64, ip: [u8; 4], busy: bool, idle_since_ms: u64) -> OpenConn {
        OpenConn { id, ip: IpAddr::from(ip), busy, idle_since_ms }
    }

    #[test]
    fn a_full_scope_gives_up_its_longest_idle_connection() {
        let me = IpAddr::from([10, 0, 0, 1]);
        assert_eq!(admit(&[], me, 3, 2), Admission::Admit);
        // At the per-address limit: the address's own longest-idle connection, never another client's.
        let open =
            [conn(1, [10, 0, 0, 2], false, 0), conn(2, [10, 0, 0, 1], false, 50), conn(3, [10, 0, 0, 1], false, 20)];
        assert_eq!(admit(&open, me, 10, 2), Admission::Evict(3));
        // At the total limit: the longest idle of all; busy ones are never closed.
        let open =
            [conn(1, [10, 0, 0, 2], true, 0), conn(2, [10, 0, 0, 3], false, 50), conn(3, [10, 0, 0, 4], false, 20)];
        assert_eq!(admit(&open, me, 3, 2), Admission::Evict(3));
        let busy = [conn(1, [10, 0, 0, 2], true, 0), conn(2, [10, 0, 0, 3], true, 0)];
        assert_eq!(admit(&busy, me, 2, 2), Admission::Refuse);
        let mine_busy =
            [conn(1, [10, 0, 0, 1], true, 0), conn(2, [10, 0, 0, 1], true, 0), conn(3, [10, 0, 0, 2], false, 0)];
        assert_eq!(admit(&mine_busy, me, 10, 2), Admission::Refuse, "a client busy at its limit waits its turn");
        // The host's own clients are held to the total only.
        let local = [conn(1, [127, 0, 0, 1], false, 0), conn(2, [127, 0, 0, 1], false, 0)];
        assert_eq!(admit(&local, IpAddr::from([127, 0, 0, 1]), 10, 2), Admission::Admit);
        assert_eq!(admit(&local, IpAddr::from([127, 0, 0, 1]), 2, 2), Admission::Evict(1));
        // Ties on the idle time go to the oldest connection.
        let ties = [conn(7, [10, 0, 0, 1], false, 5), conn(4, [10, 0, 0, 1], false, 5)];
        assert_eq!(admit(&ties, me, 10, 2), Admission::Evict(4));
    }
}
