//! The web server: HTTP/1.1 on [`crate::base::accept`]'s loop, with a deadline for each request's head, a bounded read
//! buffer, and admission per client address and in all (the longest-idle connection closed to make room).

use crate::base::accept::{self, Bounds, Conns, Limits};
use axum::Router;
use std::time::Duration;

/// How long a client has to send a request's head, counted from when the connection opens or falls idle between
/// requests: an idle or slow client (or a port scanner) holds no socket of the agent for longer.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections one client address may hold at once (loopback clients, the host's own admin and probes, are held
/// only to `[web] max_connections`).
pub const MAX_PER_IP: usize = 64;

/// Serves `app` on `listener` (HTTP/1.1) until `shutdown` resolves, then drains the open connections (5 s at most).
/// Unlike `axum::serve`, a connection that sends no complete request head within [`HEADER_TIMEOUT`] is closed, and
/// connections are admitted by [`accept::admit`]: at most [`MAX_PER_IP`] per client address and
/// `web.max_connections` in all, the longest-idle one in the full scope closed to make room for a new one, and new
/// ones closed while every one there is answering. No more of a connection's input is buffered than
/// `web.max_header_bytes`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    web: crate::config::WebConfig,
    shutdown: impl std::future::Future<Output = ()>,
) {
    use tower::ServiceExt;
    let limits = Limits {
        name: "API",
        bounds: Bounds { max_total: web.max_connections, max_per_ip: Some(MAX_PER_IP), owed_first: false },
        refuse_when_busy: true,
        header_read_timeout: HEADER_TIMEOUT,
        max_header_bytes: web.max_header_bytes,
    };
    let admission = accept::Admission::new(limits.bounds);
    let conns = Conns::new();
    accept::accept(listener, &admission, &limits, shutdown, &conns, |stream, _, admitted, _| {
        let (app, seat) = (app.clone(), admitted.seat.clone());
        let svc = hyper::service::service_fn(move |req: axum::http::Request<hyper::body::Incoming>| {
            seat.busy();
            let answered = accept::admit::Answering(seat.clone());
            let answer = app.clone().oneshot(req.map(axum::body::Body::new));
            async move {
                let r = answer.await;
                drop(answered);
                r
            }
        });
        tokio::spawn(accept::connection(stream, admitted, limits, conns.conn(), svc));
    })
    .await;
    if tokio::time::timeout(Duration::from_secs(5), conns.ended()).await.is_err() {
        tracing::warn!("API connections still open 5 s after the shutdown: closed");
    }
}
