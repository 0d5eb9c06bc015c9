//! Crowds of clients that hold a server's connections for as long as a test lasts, each crowd one thread over
//! non-blocking sockets: [`slow_bodies`] (each client sends a request head, then its body a few bytes a second, and
//! comes back at once when its connection is closed, as a slow-loris attack does) and [`idle`] (connections that
//! send nothing or half a request head, opened again every few seconds). [`raise_nofile`] raises this process's
//! open-file limit for them.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What a crowd did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Crowded {
    /// Connections opened (each client's first, and every one after the server closed the last).
    pub opened: usize,
    /// Connections the server closed (or reset) under a client.
    pub closed: usize,
    /// Connections the server answered (with anything: a 408 after its body timeout, a 4xx …), then closed here.
    pub answered: usize,
    /// Connection attempts that failed or timed out (the server's backlog full).
    pub refused: usize,
}

/// A running crowd; [`Crowd::stop`] ends it and returns what it did.
pub struct Crowd {
    stop: Arc<AtomicBool>,
    opened: Arc<AtomicUsize>,
    thread: Option<JoinHandle<Crowded>>,
}

impl Crowd {
    fn spawn(name: &str, f: impl FnOnce(&AtomicBool, &AtomicUsize) -> Crowded + Send + 'static) -> Crowd {
        let stop = Arc::new(AtomicBool::new(false));
        let opened = Arc::new(AtomicUsize::new(0));
        let (s, o) = (stop.clone(), opened.clone());
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || f(&s, &o))
            .unwrap_or_else(|e| panic!("starting the {name} thread: {e}"));
        Crowd { stop, opened, thread: Some(thread) }
    }

    /// Connections opened so far.
    pub fn opened(&self) -> usize {
        self.opened.load(Ordering::Relaxed)
    }

    /// Stops the crowd (its connections are closed) and returns what it did.
    pub fn stop(mut self) -> Crowded {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(c)) => c,
            _ => panic!("a crowd's thread panicked"),
        }
    }
}

impl Drop for Crowd {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A non-blocking connection to `addr` with `first` sent, or None when the server did not take it within 200 ms.
fn open(addr: SocketAddr, first: &[u8]) -> Option<TcpStream> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    // A fresh socket's send buffer takes a request head whole.
    if !first.is_empty() && s.write_all(first).is_err() {
        return None;
    }
    s.set_nonblocking(true).ok()?;
    Some(s)
}

/// How a client's connection stands after a round.
#[derive(Debug, PartialEq, Eq)]
enum Round {
    Open,
    Closed,
    Answered,
}

/// One round of a slow client: a few more bytes of its body, and a look at what the server sent.
fn trickle(s: &mut TcpStream) -> Round {
    let mut buf = [0u8; 512];
    match s.read(&mut buf) {
        Ok(0) => return Round::Closed,
        Ok(_) => return Round::Answered,
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        Err(_) => return Round::Closed,
    }
    match s.write(b"abc") {
        Ok(_) => Round::Open,
        Err(e) if e.kind() == ErrorKind::WouldBlock => Round::Open,
        Err(_) => Round::Closed,
    }
}

/// Sleeps until `until`, or until `stop` is set.
fn pause(until: Instant, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= until {
            return;
        }
        std::thread::sleep((until - now).min(Duration::from_millis(50)));
    }
}

/// `n` clients that each POST to `path` on `addr` with a body of 1 MB (`Content-Length`) sent 3 bytes a second,
/// so none ever completes its request; a client whose connection is closed opens a new one the next second.
pub fn slow_bodies(addr: SocketAddr, n: usize, path: &str) -> Crowd {
    let head =
        format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: text/plain\r\nContent-Length: 1000000\r\n\r\n");
    Crowd::spawn("slow-bodies", move |stop, opened| {
        let mut done = Crowded::default();
        let mut conns: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
        while !stop.load(Ordering::Relaxed) {
            let next = Instant::now() + Duration::from_secs(1);
            for c in conns.iter_mut() {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let round = match c {
                    None => match open(addr, head.as_bytes()) {
                        Some(s) => {
                            *c = Some(s);
                            done.opened += 1;
                            opened.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        None => {
                            done.refused += 1;
                            continue;
                        }
                    },
                    Some(s) => trickle(s),
                };
                match round {
                    Round::Open => {}
                    Round::Closed => done.closed += 1,
                    Round::Answered => done.answered += 1,
                }
                if round != Round::Open {
                    *c = None;
                }
            }
            pause(next, stop);
        }
        done
    })
}

/// `n` connections to `addr` that send nothing (the even ones) or half a request head (the odd ones), all closed
/// and opened again every `every`.
pub fn idle(addr: SocketAddr, n: usize, every: Duration) -> Crowd {
    Crowd::spawn("idle-conns", move |stop, opened| {
        let mut done = Crowded::default();
        while !stop.load(Ordering::Relaxed) {
            let next = Instant::now() + every;
            let conns: Vec<TcpStream> = (0..n)
                .filter_map(|i| {
                    let first: &[u8] = if i % 2 == 0 { b"" } else { b"GET / HTTP/1.1\r\nHo" };
                    let c = open(addr, first);
                    if c.is_none() {
                        done.refused += 1;
                    }
                    c
                })
                .collect();
            done.opened += conns.len();
            opened.fetch_add(conns.len(), Ordering::Relaxed);
            pause(next, stop);
            drop(conns);
        }
        done
    })
}

/// Raises this process's soft limit of open files to `want` (at most its hard limit) and returns the soft limit
/// now in force; children started afterwards inherit it.
pub fn raise_nofile(want: u64) -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 0;
    }
    if lim.rlim_cur < want {
        let raised = libc::rlimit { rlim_cur: want.min(lim.rlim_max), rlim_max: lim.rlim_max };
        // SAFETY: setrlimit reads the struct it is given; raising the soft limit up to the hard one needs no
        // privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim = raised;
        }
    }
    lim.rlim_cur
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn a_slow_client_comes_back_when_closed_and_an_idle_crowd_holds_its_connections() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let slow = slow_bodies(addr, 1, "/up");
        let (mut first, _) = listener.accept().expect("the slow client");
        first.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        let mut head = vec![0u8; 4096];
        let n = first.read(&mut head).expect("its head");
        let head = String::from_utf8_lossy(&head[..n]).to_string();
        assert!(head.starts_with("POST /up HTTP/1.1\r\n") && head.contains("Content-Length: 1000000"), "{head}");
        drop(first);
        // Closed under it: it opens another within about a second, and says so.
        let (second, _) = listener.accept().expect("the slow client again");
        drop(second);
        let done = slow.stop();
        assert!(done.opened >= 2 && done.closed >= 1, "{done:?}");

        let idle = idle(addr, 2, Duration::from_secs(60));
        let (_a, _) = listener.accept().expect("an idle connection");
        let (_b, _) = listener.accept().expect("another");
        assert_eq!(idle.stop(), Crowded { opened: 2, ..Crowded::default() });
        assert!(raise_nofile(64) >= 64);
    }
}
