//! The client side of a served connection: its TCP stream, whose writes give up once the client has taken no
//! byte for [`SEND_TIMEOUT`] (as nginx's `send_timeout`), so a client that stops reading cannot hold its response,
//! the upstream connection and the process's outstanding count for as long as it stays connected. The timer is made
//! the first time a write has to wait and moved on only when one waits again after progress: a write that goes
//! through at once costs a branch.
//!
//! It also leaves [`Marks`] of its traffic for the drain, which closes a kept-alive connection only once it is quiet:
//! nothing read or written for a while, the last bytes its answer's.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// How long a client may leave the answer untaken (no byte written to it) before its connection is cut.
pub(crate) const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// What a connection's stream did lately, written by its [`ClientIo`] only (plain loads and stores, never a locked
/// instruction) and read by the drain.
#[derive(Debug, Default)]
pub struct Marks {
    /// Reads and writes that moved bytes.
    moves: AtomicU64,
    /// The last of them was a read: a request is coming in or being answered.
    read_last: AtomicBool,
}

impl Marks {
    fn moved(&self, read: bool) {
        self.moves.store(self.moves.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        if self.read_last.load(Ordering::Relaxed) != read {
            self.read_last.store(read, Ordering::Relaxed);
        }
    }

    /// How many reads and writes moved bytes so far.
    pub fn moves(&self) -> u64 {
        self.moves.load(Ordering::Relaxed)
    }

    /// True when the last bytes moved were the client's: a request has come (in whole or in part) and its answer
    /// has not started.
    pub(crate) fn read_last(&self) -> bool {
        self.read_last.load(Ordering::Relaxed)
    }
}

/// A client's stream with a send timeout.
pub(crate) struct ClientIo {
    stream: TcpStream,
    marks: Arc<Marks>,
    after: Duration,
    timer: Option<Pin<Box<Sleep>>>,
    /// A write is waiting on the client since the timer was last set.
    waiting: bool,
}

impl ClientIo {
    pub fn new(stream: TcpStream, marks: Arc<Marks>) -> ClientIo {
        ClientIo { stream, marks, after: SEND_TIMEOUT, timer: None, waiting: false }
    }

    /// Called when a write must wait: true once the client has taken nothing for `after`.
    fn timed_out(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.waiting {
            self.waiting = true;
            let deadline = Instant::now() + self.after;
            match &mut self.timer {
                Some(t) => t.as_mut().reset(deadline),
                None => self.timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
        }
        self.timer.as_mut().is_some_and(|t| t.as_mut().poll(cx).is_ready())
    }

    fn wrote(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        match r {
            Poll::Pending if self.timed_out(cx) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client took nothing of its answer for {} s", self.after.as_secs()),
            ))),
            Poll::Pending => Poll::Pending,
            ready => {
                self.waiting = false;
                if matches!(ready, Poll::Ready(Ok(n)) if n > 0) {
                    self.marks.moved(false);
                }
                ready
            }
        }
    }
}

impl AsyncRead for ClientIo {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut me.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            me.marks.moved(true);
        }
        r
    }
}

impl AsyncWrite for ClientIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.stream).poll_write(cx, buf);
        me.wrote(cx, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let r = Pin::new(&mut me.stream).poll_write_vectored(cx, bufs);
        me.wrote(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_client_that_takes_nothing_is_given_up_and_one_that_reads_is_not() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let client = TcpStream::connect(addr).await.expect("connect");
        let (server, _) = listener.accept().await.expect("accept");
        let mut io = ClientIo { after: Duration::from_millis(300), ..ClientIo::new(server, Arc::default()) };
        // The client reads for a while (longer than the timeout): never cut while it takes bytes.
        let reader = tokio::spawn(async move {
            let mut client = client;
            let mut buf = vec![0u8; 64 * 1024];
            let until = Instant::now() + Duration::from_millis(900);
            while Instant::now() < until {
                let _ = client.read(&mut buf).await;
            }
            client
        });
        let chunk = vec![7u8; 64 * 1024];
        let start = Instant::now();
        let err = loop {
            if let Err(e) = io.write_all(&chunk).await {
                break e;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "never timed out");
        };
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        // Not before the reader stopped (at 900 ms) and the timeout passed after that.
        assert!(start.elapsed() >= Duration::from_millis(1100), "cut after {:?}", start.elapsed());
        drop(reader.await);
    }
}
