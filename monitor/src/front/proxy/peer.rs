//! Under `[cluster]`: a request with a cache id is first put to the cluster ([`crate::cluster::door`]). Served here,
//! it goes on through the front door's own rules; owned by another live node, it is sent on to that node's front
//! door (origin form, no hop-by-hop fields, the client's address added, the hop signed) and its answer streamed
//! back; a bad token, a forged hop or an unavailable owner node is answered here. Without `[cluster]` nothing here
//! runs.

use super::body::ProxyBody;
use super::{headers, status, Proxy};
use crate::cluster::door::{Door, Failed, Route};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, HOST};
use hyper::http::request::Parts;
use hyper::{Request, Response, StatusCode, Uri};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What the cluster said of a request served here.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Here {
    /// Its owner was proven by a node-bound token: never served by another process.
    pub signed: bool,
    /// Another node owns its cache, and `fallback = "any"` serves it here.
    pub fallback: bool,
}

impl Proxy {
    /// Puts the front door in the cluster: from now on requests with a cache id are routed across nodes.
    pub(crate) fn join_cluster(&self, door: Arc<Door>) {
        let _ = self.cluster.set(door);
    }

    /// Requests sent on to another node's front door since start.
    pub fn forwarded_total(&self) -> u64 {
        self.counts.forwarded.load(Ordering::Relaxed)
    }

    /// The request to serve here and what the cluster said of it, or the answer.
    pub(super) async fn through_cluster(
        &self,
        door: &Door,
        req: Request<Incoming>,
        peer: &HeaderValue,
        seat: &crate::base::accept::Seat,
    ) -> Result<(Request<Incoming>, Here), Response<ProxyBody>> {
        let (mut parts, body) = req.into_parts();
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
        match door.route(parts.method.as_str(), &target, &mut parts.headers) {
            Route::Here { signed, fallback } => Ok((Request::from_parts(parts, body), Here { signed, fallback })),
            Route::Refuse { status: code, reason } => {
                Err(status(StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST), format!("{reason}\n")))
            }
            Route::Unavailable { node } => {
                Err(self
                    .unavailable(&format!("owner-node-unavailable: node {node} of this cache id is not a live member")))
            }
            Route::Forward { node, front } => {
                // Its body is streamed to the other node: from here the request waits on that node.
                seat.busy();
                match self.to_peer(door, &node, front, parts, body, peer, &target).await {
                    Ok(answer) => Err(answer),
                    Err(unsent) => Ok((unsent, Here { signed: false, fallback: true })),
                }
            }
        }
    }

    /// Sends a request on to the owner node's front door and streams its answer back; or, with `fallback = "any"`
    /// and no connection to the owner, hands the request back as it came, to be served here.
    #[allow(clippy::too_many_arguments)]
    async fn to_peer(
        &self,
        door: &Door,
        node: &str,
        front: SocketAddr,
        mut parts: Parts,
        body: Incoming,
        peer: &HeaderValue,
        target: &str,
    ) -> Result<Response<ProxyBody>, Request<Incoming>> {
        let stripped = headers::strip_hop_by_hop(&mut parts.headers);
        if stripped.other_coding {
            return Ok(status(
                StatusCode::NOT_IMPLEMENTED,
                "transfer codings other than chunked are not supported\n".into(),
            ));
        }
        match Uri::builder().path_and_query(target).build() {
            Ok(u) => parts.uri = u,
            Err(_) => return Ok(status(StatusCode::BAD_REQUEST, "bad request target\n".into())),
        }
        // Kept to put back if the request is served here after all: the local path adds its own.
        let host = parts.headers.get(HOST).cloned();
        let xff: Vec<HeaderValue> = parts.headers.get_all(&headers::X_FORWARDED_FOR).iter().cloned().collect();
        headers::append_forwarded_for(&mut parts.headers, peer);
        if let Ok(h) = HeaderValue::from_str(&front.to_string()) {
            parts.headers.insert(HOST, h);
        }
        door.sign_hop(parts.method.as_str(), target, &mut parts.headers);
        match door.send(front, Request::from_parts(parts, body)).await {
            Ok(resp) => {
                self.counts.forwarded.fetch_add(1, Ordering::Relaxed);
                let (mut parts, body) = resp.into_parts();
                headers::strip_hop_by_hop(&mut parts.headers);
                Ok(Response::from_parts(parts, ProxyBody::Peer(body)))
            }
            Err(Failed { error, unsent: Some(mut req) }) if door.falls_back() => {
                tracing::warn!(node, %front, "owner node unreachable, served here (fallback = \"any\"): {error}");
                let h = req.headers_mut();
                match host {
                    Some(v) => h.insert(HOST, v),
                    None => h.remove(HOST),
                };
                h.remove(&headers::X_FORWARDED_FOR);
                for v in xff {
                    h.append(&headers::X_FORWARDED_FOR, v);
                }
                door.serve_here_instead(h);
                Err(req)
            }
            Err(Failed { error, .. }) => {
                tracing::warn!(node, %front, "forward to the owner node failed: {error}");
                Ok(self.unavailable(&format!(
                    "owner-node-unavailable: node {node} of this cache id is unreachable: {error}"
                )))
            }
        }
    }
}
