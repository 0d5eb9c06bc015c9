//! A client's request body on its way to a process. The front door reads it before it sends the request on, up to
//! [`HOLD_BYTES`] ([`hold`]): a body that ends within that (most do) reaches the process whole, with its length, or
//! not at all, so a malformed one (a bad chunk size, a chunk shorter or longer than its size, a client gone
//! midway) is answered 400 at the front door and the process never sees the request. The rest of a longer body
//! is streamed after the held part; when it turns out malformed midway, hyper closes the upstream connection
//! without the body's end, so the process reads an incomplete body, never a complete request, and the client
//! still gets 400 ([`ClientBodyError`] tells it from what the process did).
//!
//! Held frames are the `Bytes` hyper read them into (no copy); a body of one frame is held without allocating.

use super::body::BoxError;
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// The most of a body read before the request goes on (as nginx's `client_body_buffer_size`, held in memory).
pub const HOLD_BYTES: usize = 64 * 1024;

/// How long the held part of a body may take to arrive (as nginx's `client_body_timeout`): then 408.
pub const HOLD_TIMEOUT: Duration = Duration::from_secs(30);

/// The client's body failed: malformed framing, or the client went away before its end.
#[derive(Debug, thiserror::Error)]
#[error("the client's request body: {0}")]
pub struct ClientBodyError(#[source] pub BoxError);

/// True when `e` (an upstream exchange's error) or one of its causes is the client's body failing.
pub fn from_client(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if c.is::<ClientBodyError>() {
            return true;
        }
        cur = c.source();
    }
    false
}

/// A request body: the frames held, then (past [`HOLD_BYTES`]) the rest of the client's body.
pub struct ClientBody<B = Incoming> {
    first: Option<Frame<Bytes>>,
    more: VecDeque<Frame<Bytes>>,
    /// Data bytes held and not yet sent.
    held: u64,
    /// The client gave the body's length (Content-Length): a body held whole says its length, so that it goes on
    /// with it; a chunked one goes on chunked, as it came.
    sized: bool,
    rest: Option<B>,
}

impl<B> ClientBody<B> {
    fn push(&mut self, f: Frame<Bytes>) {
        if let Some(d) = f.data_ref() {
            self.held += d.len() as u64;
        }
        if self.first.is_none() && self.more.is_empty() {
            self.first = Some(f);
        } else {
            self.more.push_back(f);
        }
    }

    fn pop(&mut self) -> Option<Frame<Bytes>> {
        let f = self.first.take().or_else(|| self.more.pop_front())?;
        if let Some(d) = f.data_ref() {
            self.held -= d.len() as u64;
        }
        Some(f)
    }
}

/// Reads `body` until its end or [`HOLD_BYTES`], whichever comes first; an error of the client's body is returned.
pub async fn hold<B>(mut body: B) -> Result<ClientBody<B>, B::Error>
where
    B: Body<Data = Bytes> + Unpin,
{
    use http_body_util::BodyExt;
    let sized = body.size_hint().exact().is_some();
    let mut held = ClientBody { first: None, more: VecDeque::new(), held: 0, sized, rest: None };
    while !body.is_end_stream() {
        match body.frame().await {
            None => break,
            Some(Err(e)) => return Err(e),
            Some(Ok(f)) => {
                held.push(f);
                if held.held >= HOLD_BYTES as u64 {
                    held.rest = Some(body);
                    break;
                }
            }
        }
    }
    Ok(held)
}

impl<B> Body for ClientBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = ClientBodyError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let me = self.get_mut();
        if let Some(f) = me.pop() {
            return Poll::Ready(Some(Ok(f)));
        }
        match &mut me.rest {
            Some(rest) => Pin::new(rest).poll_frame(cx).map_err(|e| ClientBodyError(e.into())),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.more.is_empty() && self.rest.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        match &self.rest {
            None if self.sized => SizeHint::with_exact(self.held),
            None => {
                let mut h = SizeHint::new();
                h.set_lower(self.held);
                h
            }
            Some(rest) => {
                let r = rest.size_hint();
                let mut h = SizeHint::new();
                if let Some(u) = r.upper() {
                    h.set_upper(u.saturating_add(self.held));
                }
                h.set_lower(r.lower().saturating_add(self.held));
                h
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// A body of ready frames, then an error if `fails`.
    struct Frames {
        chunks: VecDeque<usize>,
        fails: bool,
    }

    impl Body for Frames {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            let me = self.get_mut();
            match me.chunks.pop_front() {
                Some(n) => Poll::Ready(Some(Ok(Frame::data(Bytes::from(vec![b'a'; n]))))),
                None if me.fails => {
                    me.fails = false;
                    Poll::Ready(Some(Err(std::io::Error::other("invalid chunk size"))))
                }
                None => Poll::Ready(None),
            }
        }

        fn is_end_stream(&self) -> bool {
            self.chunks.is_empty() && !self.fails
        }
    }

    fn frames(chunks: &[usize], fails: bool) -> Frames {
        Frames { chunks: chunks.iter().copied().collect(), fails }
    }

    #[tokio::test]
    async fn a_short_body_is_held_whole_with_its_length() {
        let held = hold(frames(&[3, 4, 5], false)).await.expect("held");
        assert!(held.rest.is_none());
        // Chunked in, chunked out: no length made up.
        assert_eq!((held.size_hint().lower(), held.size_hint().upper()), (12, None));
        let bytes = held.collect().await.expect("body").to_bytes();
        assert_eq!(bytes.len(), 12);
    }

    #[tokio::test]
    async fn a_body_of_known_length_held_whole_keeps_it() {
        let held = hold(http_body_util::Full::new(Bytes::from_static(b"hello"))).await.expect("held");
        assert_eq!(held.size_hint().exact(), Some(5));
        assert!(held.first.is_some() && held.more.is_empty(), "one frame, held without a queue");
        assert_eq!(held.collect().await.expect("body").to_bytes(), "hello");
    }

    #[tokio::test]
    async fn a_malformed_short_body_fails_before_anything_is_sent() {
        assert!(hold(frames(&[3], true)).await.is_err());
        assert!(hold(frames(&[], true)).await.is_err());
    }

    #[tokio::test]
    async fn a_long_body_is_held_up_to_the_limit_then_streamed_and_its_error_is_the_clients() {
        let held = hold(frames(&[HOLD_BYTES / 2, HOLD_BYTES / 2, 10, 20], true)).await.expect("held");
        assert!(held.rest.is_some());
        assert_eq!(held.size_hint().lower(), HOLD_BYTES as u64);
        let err = held.collect().await.expect_err("the client's error");
        let boxed: BoxError = Box::new(err);
        assert!(from_client(boxed.as_ref()));
        let other: BoxError = Box::new(std::io::Error::other("upstream reset"));
        assert!(!from_client(other.as_ref()));
    }
}
