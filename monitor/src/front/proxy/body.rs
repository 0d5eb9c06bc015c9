//! The response body the proxy sends: an upstream body streamed frame by frame (never buffered), which keeps its
//! process's outstanding count up until it ends, is cut when the memory guard aborts that process (the abort closes
//! the upstream connection, which wakes the body; the moved generation tells it from a clean end) or when the
//! process sends nothing of it for the upstream timeout (as nginx's `proxy_read_timeout`), and hands its
//! upstream connection back to the pool once it ended cleanly; or a short body of the proxy's own.

use super::upstream::Upstream;
use super::{Local, ReqBody};
use http_body_util::Full;
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Sleep;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Counts one request as outstanding on process `index` until dropped, on its thread's own counter: it holds the
/// thread's [`Local`], not the shared process, so neither counting nor holding it writes a line another thread uses.
pub struct Outstanding {
    local: Arc<Local>,
    index: usize,
    /// Its key on the thread's board of the process's requests in flight, when tracked ([`super::flights`]).
    flight: Option<usize>,
}

impl Outstanding {
    pub(crate) fn new(local: Arc<Local>, index: usize, flight: Option<super::flights::Flight>) -> Outstanding {
        let flight = flight.map(|f| local.proxy.backends[index].board(local.slot).enter(f));
        let counted = Outstanding { local, index, flight };
        counted.counter().fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        counted
    }

    /// `n` more response bytes went to the client.
    fn sent(&self, n: usize) {
        if let Some(key) = self.flight {
            self.local.proxy.backends[self.index].board(self.local.slot).sent(key, n as u64);
        }
    }

    /// This thread's counter of the process's requests in flight.
    fn counter(&self) -> &std::sync::atomic::AtomicU32 {
        self.local.proxy.backends[self.index].slot(self.local.slot)
    }

    /// The process's address.
    fn addr(&self) -> std::net::SocketAddr {
        self.local.proxy.backends[self.index].addr
    }

    /// How many times the process was told to abort so far.
    fn generation(&self) -> u64 {
        self.local.proxy.backends[self.index].generation()
    }
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        self.counter().fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        if let Some(key) = self.flight {
            let (proxy, backend) = (&self.local.proxy, &self.local.proxy.backends[self.index]);
            backend.board(self.local.slot).leave(key, proxy.epoch(), backend.generation());
        }
    }
}

/// A request's body length as its head declares it (`Content-Length`), 0 when it declares none.
pub(crate) fn declared_length(headers: &hyper::HeaderMap) -> u64 {
    headers.get(hyper::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// The memory guard cut a response that had started.
#[derive(Debug, thiserror::Error)]
#[error("memory guard: response cut, its process was told to abort")]
pub(crate) struct Cut;

/// The process sent nothing of a started response body for the upstream timeout.
#[derive(Debug, thiserror::Error)]
#[error("response cut: its process sent nothing for {} s", .0.as_secs())]
pub struct Stalled(pub Duration);

/// The connection a response came on, returned to its pool when the body ended cleanly and the process keeps it
/// open (`reusable`: its answer did not say `Connection: close`, nor came in HTTP/1.0 without keep-alive). A
/// connection the process is closing, pooled in the moment before hyper sees the close, would fail the next
/// request on it.
pub struct Lease {
    pub pool: Arc<Upstream>,
    pub index: usize,
    pub tx: SendRequest<ReqBody>,
    pub deadline: super::upstream::Deadline,
    pub reusable: bool,
}

/// An upstream response body on its way to the client.
pub struct Streamed {
    inner: Incoming,
    /// The process's abort generation as of the request: when it moved, the body is cut. A closed connection ends
    /// `inner` as a clean end would, so it is checked before each frame is taken.
    generation: u64,
    /// How long the upstream body may send nothing; the timer is made only once the body makes the client wait, and
    /// moved on only when a frame came since it was last polled.
    stall_after: Duration,
    stall: Option<Pin<Box<Sleep>>>,
    progressed: bool,
    ended: bool,
    lease: Option<Lease>,
    _outstanding: Outstanding,
}

impl Streamed {
    /// `stall_after`: the longest the process may leave the body without a frame before it is cut.
    pub fn new(
        inner: Incoming,
        generation: u64,
        lease: Lease,
        outstanding: Outstanding,
        stall_after: Duration,
    ) -> Streamed {
        Streamed {
            inner,
            generation,
            stall_after,
            stall: None,
            progressed: false,
            ended: false,
            lease: Some(lease),
            _outstanding: outstanding,
        }
    }

    /// True once the body has sent nothing for `stall_after` (counted from the last frame, or the first wait).
    fn stalled(&mut self, cx: &mut Context<'_>) -> bool {
        let stall_after = self.stall_after;
        let t = self.stall.get_or_insert_with(|| {
            self.progressed = false;
            Box::pin(tokio::time::sleep(stall_after))
        });
        if std::mem::take(&mut self.progressed) {
            t.as_mut().reset(tokio::time::Instant::now() + stall_after);
        }
        t.as_mut().poll(cx).is_ready()
    }

    /// True once the process was told to abort since the request started.
    fn cut(&self) -> bool {
        self._outstanding.generation() != self.generation
    }
}

impl Drop for Streamed {
    fn drop(&mut self) {
        if let Some(l) = self.lease.take() {
            if l.reusable && (self.ended || self.inner.is_end_stream()) {
                l.pool.checkin(l.index, l.tx, l.deadline);
            }
        }
    }
}

/// What the proxy answers with.
pub enum ProxyBody {
    Upstream(Streamed),
    Full(Full<Bytes>),
    /// Under `[cluster]`: the answer of the owner node's front door, streamed.
    Peer(crate::cluster::door::PeerBody),
}

impl ProxyBody {
    pub fn text(s: impl Into<Bytes>) -> ProxyBody {
        ProxyBody::Full(Full::new(s.into()))
    }
}

fn poll_streamed(s: &mut Streamed, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
    if s.cut() {
        s.lease = None;
        return Poll::Ready(Some(Err(Box::new(Cut))));
    }
    match Pin::new(&mut s.inner).poll_frame(cx) {
        Poll::Ready(None) => {
            s.ended = true;
            Poll::Ready(None)
        }
        Poll::Ready(Some(Ok(f))) => {
            s.progressed = true;
            if let Some(d) = f.data_ref() {
                s._outstanding.sent(d.len());
            }
            Poll::Ready(Some(Ok(f)))
        }
        Poll::Ready(Some(Err(e))) => {
            s.lease = None;
            Poll::Ready(Some(Err(e.into())))
        }
        Poll::Pending => {
            if s.stalled(cx) {
                tracing::warn!(upstream = %s._outstanding.addr(), "response body stalled for {} s: cut", s.stall_after.as_secs());
                s.lease = None;
                return Poll::Ready(Some(Err(Box::new(Stalled(s.stall_after)))));
            }
            Poll::Pending
        }
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ProxyBody::Upstream(s) => poll_streamed(s, cx),
            ProxyBody::Full(f) => Pin::new(f).poll_frame(cx).map_err(|never| match never {}),
            ProxyBody::Peer(b) => Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Upstream(s) => s.inner.is_end_stream(),
            ProxyBody::Full(f) => f.is_end_stream(),
            ProxyBody::Peer(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Upstream(s) => s.inner.size_hint(),
            ProxyBody::Full(f) => f.size_hint(),
            ProxyBody::Peer(b) => b.size_hint(),
        }
    }
}
