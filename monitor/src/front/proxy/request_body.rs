//! A client's request body on its way to a process. The front door reads it before it sends the request on, up to
//! `[proxy] body_buffer_bytes` of it ([`hold`]), and no more than `body_buffer_total_bytes` across every connection
//! at once ([`Budget`]): a body that ends within that (most do) reaches the process whole, with its length, or not
//! at all, so a malformed one (a bad chunk size, a chunk shorter or longer than its size, a client gone midway) is
//! answered 400 at the front door and the process never sees the request. The rest of a longer body, or of one read
//! while the total is taken, is streamed after the held part; when it turns out malformed midway, hyper closes the
//! upstream connection without the body's end, so the process reads an incomplete body, never a complete request,
//! and the client still gets 400 ([`ClientBodyError`] tells it from what the process did).
//!
//! A body of one frame is held as hyper read it: no copy, no allocation. The frames of a longer one are copied into
//! a buffer of the body's own as they come, because a frame keeps alive the whole read buffer it was cut from: a slow
//! client's few bytes a second, held as they came, would each keep 8 KiB.

use super::body::BoxError;
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::HeaderMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// How long the held part of a body may take to arrive (as nginx's `client_body_timeout`): then 408.
pub(crate) const HOLD_TIMEOUT: Duration = Duration::from_secs(30);

/// The client's body failed: malformed framing, or the client went away before its end.
#[derive(Debug, thiserror::Error)]
#[error("the client's request body: {0}")]
pub struct ClientBodyError(#[source] pub BoxError);

/// True when `e` (an upstream exchange's error) or one of its causes is the client's body failing.
pub(crate) fn from_client(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if c.is::<ClientBodyError>() {
            return true;
        }
        cur = c.source();
    }
    false
}

/// The bytes of request bodies the front door may hold: per request, and in all at once (shared by its threads).
#[derive(Debug)]
pub struct Budget {
    per_request: usize,
    total: usize,
    used: AtomicUsize,
}

impl Budget {
    pub fn new(per_request: usize, total: usize) -> Budget {
        Budget { per_request, total, used: AtomicUsize::new(0) }
    }

    /// Bytes held now, across every request.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Takes up to `want` bytes of the total; returns what it granted (0 when it is all taken).
    fn take(&self, want: usize) -> usize {
        let mut granted = 0;
        let _ = self.used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
            granted = want.min(self.total.saturating_sub(used));
            (granted > 0).then_some(used + granted)
        });
        granted
    }

    fn give(&self, n: usize) {
        if n > 0 {
            self.used.fetch_sub(n, Ordering::Relaxed);
        }
    }
}

/// A request body: the data held, then (past the limits) the rest of the client's body.
pub struct ClientBody<B = Incoming> {
    /// The data held and not yet sent: the body's one frame as it came, or a copy of its frames.
    held: Bytes,
    /// The part of the last frame read past the limits: sent after `held`, before the rest.
    over: Option<Bytes>,
    trailers: Option<HeaderMap>,
    /// The client gave the body's length (Content-Length): a body held whole says its length, so that it goes on
    /// with it; a chunked one goes on chunked, as it came.
    sized: bool,
    /// The bytes of `budget` that `held` takes, given back once it is sent (or dropped).
    taken: usize,
    budget: Option<Arc<Budget>>,
    rest: Option<B>,
}

impl<B> ClientBody<B> {
    /// Bytes read and not yet sent.
    fn pending(&self) -> u64 {
        (self.held.len() + self.over.as_ref().map_or(0, Bytes::len)) as u64
    }

    fn give_back(&mut self) {
        if let Some(b) = &self.budget {
            b.give(std::mem::take(&mut self.taken));
        }
    }
}

impl<B> Drop for ClientBody<B> {
    fn drop(&mut self) {
        self.give_back();
    }
}

/// Reads `body` until its end, `budget`'s per-request limit, or its total taken, whichever comes first; an error
/// of the client's body is returned.
pub async fn hold<B>(mut body: B, budget: &Arc<Budget>) -> Result<ClientBody<B>, B::Error>
where
    B: Body<Data = Bytes> + Unpin,
{
    use http_body_util::BodyExt;
    let sized = body.size_hint().exact().is_some();
    let mut held =
        ClientBody { held: Bytes::new(), over: None, trailers: None, sized, taken: 0, budget: None, rest: None };
    // Empty until a body of more than one frame is copied into it.
    let mut copy = Vec::new();
    while !body.is_end_stream() {
        let room = budget.per_request.saturating_sub(held.taken);
        if room == 0 || budget.used() >= budget.total {
            held.rest = Some(body);
            break;
        }
        let data = match body.frame().await {
            None => break,
            Some(Err(e)) => return Err(e),
            Some(Ok(f)) => match f.into_data() {
                Ok(d) => d,
                Err(f) => {
                    held.trailers = f.into_trailers().ok();
                    continue;
                }
            },
        };
        if data.is_empty() {
            continue;
        }
        let n = budget.take(data.len().min(room));
        if n > 0 && held.budget.is_none() {
            held.budget = Some(budget.clone());
        }
        held.taken += n;
        if n == data.len() && held.held.is_empty() && copy.is_empty() && body.is_end_stream() {
            held.held = data;
            break;
        }
        copy.extend_from_slice(&data[..n]);
        if n < data.len() {
            held.over = Some(data.slice(n..));
            held.rest = Some(body);
            break;
        }
    }
    if !copy.is_empty() {
        held.held = Bytes::from(copy);
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
        if !me.held.is_empty() {
            let d = std::mem::take(&mut me.held);
            me.give_back();
            return Poll::Ready(Some(Ok(Frame::data(d))));
        }
        if let Some(d) = me.over.take() {
            return Poll::Ready(Some(Ok(Frame::data(d))));
        }
        if let Some(t) = me.trailers.take() {
            return Poll::Ready(Some(Ok(Frame::trailers(t))));
        }
        match &mut me.rest {
            Some(rest) => Pin::new(rest).poll_frame(cx).map_err(|e| ClientBodyError(e.into())),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_empty()
            && self.over.is_none()
            && self.trailers.is_none()
            && self.rest.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        let pending = self.pending();
        match &self.rest {
            None if self.sized => SizeHint::with_exact(pending),
            None => {
                let mut h = SizeHint::new();
                h.set_lower(pending);
                h
            }
            Some(rest) => {
                let r = rest.size_hint();
                let mut h = SizeHint::new();
                if let Some(u) = r.upper() {
                    h.set_upper(u.saturating_add(pending));
                }
                h.set_lower(r.lower().saturating_add(pending));
                h
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::collections::VecDeque;

    /// A body of ready frames, then an error if `fails`.
    struct Frames {
        chunks: VecDeque<Bytes>,
        fails: bool,
    }

    impl Body for Frames {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            let me = self.get_mut();
            match me.chunks.pop_front() {
                Some(b) => Poll::Ready(Some(Ok(Frame::data(b)))),
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

    /// Frames of `chunks` bytes each, every frame's bytes a letter of its own ('a', 'b' …).
    fn frames(chunks: &[usize], fails: bool) -> Frames {
        let chunks = chunks.iter().zip(b'a'..).map(|(&n, c)| Bytes::from(vec![c; n])).collect();
        Frames { chunks, fails }
    }

    fn budget(per_request: usize, total: usize) -> Arc<Budget> {
        Arc::new(Budget::new(per_request, total))
    }

    const KIB64: usize = 64 * 1024;

    #[tokio::test]
    async fn a_short_body_is_held_whole_with_its_length() {
        let b = budget(KIB64, 1 << 20);
        let held = hold(frames(&[3, 4, 5], false), &b).await.expect("held");
        assert!(held.rest.is_none());
        assert_eq!(b.used(), 12, "held bytes are taken from the total");
        // Chunked in, chunked out: no length made up.
        assert_eq!((held.size_hint().lower(), held.size_hint().upper()), (12, None));
        let bytes = held.collect().await.expect("body").to_bytes();
        assert_eq!(&bytes[..], b"aaabbbbccccc");
        assert_eq!(b.used(), 0, "given back once sent");
    }

    #[tokio::test]
    async fn a_body_of_one_frame_is_held_as_it_came() {
        let b = budget(KIB64, 1 << 20);
        let data = Bytes::from(vec![b'h'; 5]);
        let held = hold(http_body_util::Full::new(data.clone()), &b).await.expect("held");
        assert_eq!(held.size_hint().exact(), Some(5));
        assert_eq!(held.held.as_ptr(), data.as_ptr(), "not copied");
        drop(held);
        assert_eq!(b.used(), 0, "given back when dropped unsent");
    }

    #[tokio::test]
    async fn small_frames_are_copied_and_keep_no_read_buffer_alive() {
        // A slow client's frames, cut from one read buffer as hyper cuts them.
        let buffer = Bytes::from(vec![b'x'; 8192]);
        let chunks = (0..50).map(|i| buffer.slice(i * 3..i * 3 + 3)).collect();
        let b = budget(KIB64, 1 << 20);
        let held = hold(Frames { chunks, fails: false }, &b).await.expect("held");
        assert_eq!(held.pending(), 150);
        assert!(buffer.is_unique(), "no held frame keeps the read buffer");
    }

    #[tokio::test]
    async fn a_malformed_short_body_fails_before_anything_is_sent() {
        let b = budget(KIB64, 1 << 20);
        assert!(hold(frames(&[3], true), &b).await.is_err());
        assert!(hold(frames(&[], true), &b).await.is_err());
        assert_eq!(b.used(), 0);
    }

    #[tokio::test]
    async fn a_long_body_is_held_up_to_the_limit_then_streamed_and_its_error_is_the_clients() {
        let b = budget(KIB64, 1 << 20);
        let held = hold(frames(&[KIB64 / 2, KIB64 / 2, 10, 20], true), &b).await.expect("held");
        assert!(held.rest.is_some());
        assert_eq!(held.size_hint().lower(), KIB64 as u64);
        let err = held.collect().await.expect_err("the client's error");
        let boxed: BoxError = Box::new(err);
        assert!(from_client(boxed.as_ref()));
        let other: BoxError = Box::new(std::io::Error::other("upstream reset"));
        assert!(!from_client(other.as_ref()));
        assert_eq!(b.used(), 0);
    }

    #[tokio::test]
    async fn the_limits_hold_exactly_and_the_body_goes_on_whole_in_order() {
        // (frames, per request, total, taken by others, held, streamed)
        type Case = (&'static [usize], usize, usize, usize, usize, bool);
        let cases: [Case; 7] = [
            (&[10, 10], 100, 100, 0, 20, false),
            (&[10, 10], 15, 100, 0, 15, true),
            (&[10, 10], 100, 12, 0, 12, true),
            (&[10, 10], 100, 100, 95, 5, true),
            (&[10, 10], 100, 100, 100, 0, true),
            (&[10], 0, 100, 0, 0, true),
            (&[10, 0, 10], 20, 20, 0, 20, false),
        ];
        for (chunks, per_request, total, others, want_held, streamed) in cases {
            let b = budget(per_request, total);
            assert_eq!(b.take(others), others);
            let held = hold(frames(chunks, false), &b).await.expect("held");
            let what = format!("{chunks:?} per request {per_request}, total {total}, {others} taken");
            assert_eq!(held.held.len(), want_held, "{what}");
            assert_eq!(b.used(), others + want_held, "{what}");
            assert_eq!(held.rest.is_some(), streamed, "{what}");
            let sent = held.collect().await.expect("body").to_bytes();
            let want: Vec<u8> = chunks.iter().zip(b'a'..).flat_map(|(&n, c)| vec![c; n]).collect();
            assert_eq!(&sent[..], &want[..], "{what}");
            assert_eq!(b.used(), others, "{what}: given back");
        }
    }

    #[test]
    fn the_total_is_never_granted_twice() {
        let b = Budget::new(100, 100);
        assert_eq!((b.take(60), b.take(60), b.take(1)), (60, 40, 0));
        b.give(50);
        assert_eq!((b.used(), b.take(70)), (50, 50));
    }
}
