//! The response body the proxy sends: an upstream body streamed frame by frame (never buffered), which keeps its
//! process's outstanding count up until it ends and is cut when the memory guard aborts that process; or a short
//! body of the proxy's own.

use super::Backend;
use http_body_util::Full;
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::watch;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Counts one request as outstanding on its process until dropped.
pub struct Outstanding(pub Arc<Backend>);

impl Outstanding {
    pub fn new(b: Arc<Backend>) -> Outstanding {
        b.outstanding.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Outstanding(b)
    }
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        self.0.outstanding.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Resolves when the process is told to abort (the abort generation moves); never if the sender is gone.
pub async fn aborted(mut rx: watch::Receiver<u64>) {
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The memory guard cut a response that had started.
#[derive(Debug, thiserror::Error)]
#[error("memory guard: response cut, its process was told to abort")]
pub struct Cut;

/// What the proxy answers with.
pub enum ProxyBody {
    Upstream { inner: Incoming, abort: Pin<Box<dyn Future<Output = ()> + Send>>, _outstanding: Outstanding },
    Full(Full<Bytes>),
}

impl ProxyBody {
    pub fn text(s: impl Into<Bytes>) -> ProxyBody {
        ProxyBody::Full(Full::new(s.into()))
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ProxyBody::Upstream { inner, abort, .. } => {
                if abort.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Some(Err(Box::new(Cut))));
                }
                Pin::new(inner).poll_frame(cx).map_err(Into::into)
            }
            ProxyBody::Full(f) => Pin::new(f).poll_frame(cx).map_err(|never| match never {}),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Upstream { inner, .. } => inner.is_end_stream(),
            ProxyBody::Full(f) => f.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Upstream { inner, .. } => inner.size_hint(),
            ProxyBody::Full(f) => f.size_hint(),
        }
    }
}
