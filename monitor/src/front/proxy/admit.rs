//! Admission of front-door connections: at most `[proxy] max_connections` are served at once, so that no crowd of
//! clients can take the agent's memory or file descriptors. At the cap, a connection that waits on its client is
//! closed to make room for the new one: first the one that has waited longest while owing a request (it sent
//! nothing yet, or only part of a request's head or held body), else the one idle longest between requests, as a
//! server under connection pressure reuses its idle keep-alive connections. So slow or idle clients can never lock
//! out a new one, and a crowd of slow ones displaces its own kind before a kept-alive client between two requests.
//! A connection with a request at a process, or an answer on its way, is never closed for another: when every one
//! has, the accept loop takes no more, and new connections wait in the kernel's accept backlog until one ends. The
//! new connection is served once the one closed for it is gone, so the cap is never passed, not even for an
//! instant.
//!
//! Each connection holds a [`Seat`], which its requests mark ([`Seat::busy`] once a request goes on to a process,
//! [`Seat::waiting`] once its answer is sent): plain loads and stores, no lock. The seats are looked through only at
//! the cap.

use super::client_io::Marks;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// A seat's mark while its connection has a request at a process or an answer on its way.
const BUSY: u64 = u64::MAX;
/// A seat's mark once its connection is chosen to be closed.
const EVICTED: u64 = u64::MAX - 1;

/// How often a full door looks again for a connection it may close, when none has ended.
const RECHECK: Duration = Duration::from_millis(50);

/// One connection's place at the door.
#[derive(Debug)]
pub struct Seat {
    /// Since when (ms on the door's clock) the connection has waited on its client; [`BUSY`] or [`EVICTED`].
    since: AtomicU64,
    clock: Instant,
    evict: Notify,
    /// What the connection's stream moved last ([`super::client_io::ClientIo`] writes them).
    pub marks: Arc<Marks>,
}

impl Seat {
    fn new(clock: Instant) -> Seat {
        let seat = Seat { since: AtomicU64::new(0), clock, evict: Notify::new(), marks: Arc::default() };
        seat.waiting();
        seat
    }

    /// A request goes on to a process: the connection is not closed for another until its answer is sent.
    pub fn busy(&self) {
        self.mark(BUSY);
    }

    /// The connection waits on its client again (its answer is sent), from now.
    pub fn waiting(&self) {
        let now = u64::try_from(self.clock.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.mark(now.min(EVICTED - 1));
    }

    /// Sets the mark, unless the connection is already to be closed (a plain load and store: the door's claim is
    /// the only compare-and-swap).
    fn mark(&self, m: u64) {
        if self.since.load(Ordering::Relaxed) != EVICTED {
            self.since.store(m, Ordering::Relaxed);
        }
    }

    /// Resolves once the door chose this connection to make room for a new one: it is to be closed.
    pub async fn evicted(&self) {
        self.evict.notified().await;
    }

    /// How the door sees the connection now ([`victim`]).
    fn state(&self) -> Waits {
        let since = self.since.load(Ordering::Relaxed);
        // It has sent nothing yet, or the last bytes moved were its own: a request (head or body) is on its way.
        let owes = self.marks.moves() == 0 || self.marks.read_last();
        Waits { since, owes }
    }
}

/// A connection as [`victim`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waits {
    /// Since when (ms) it has waited on its client; [`BUSY`] or [`EVICTED`] when it does not.
    pub since: u64,
    /// It owes a request: it sent nothing yet, or only part of a request.
    pub owes: bool,
}

/// The connection among `seats` (index, state) to close for a new one: of those waiting on their client, the one
/// that has waited longest owing a request, else the one idle longest.
pub fn victim(seats: impl IntoIterator<Item = (usize, Waits)>) -> Option<usize> {
    seats.into_iter().filter(|(_, w)| w.since < EVICTED).min_by_key(|&(i, w)| (!w.owes, w.since, i)).map(|(i, _)| i)
}

/// The seats of the connections open, by index; a freed index is reused.
#[derive(Default)]
struct Seats {
    all: Vec<Option<Arc<Seat>>>,
    free: Vec<usize>,
}

/// The door's count of open connections and their seats, shared by the front-door threads.
pub struct Admission {
    max: usize,
    open: AtomicUsize,
    /// Connections told to close for a new one that have not ended yet.
    evicting: AtomicUsize,
    seats: Mutex<Seats>,
    /// Woken when a connection ends while the door is full.
    freed: Notify,
    clock: Instant,
}

impl Admission {
    pub fn new(max: usize) -> Arc<Admission> {
        Arc::new(Admission {
            max,
            open: AtomicUsize::new(0),
            evicting: AtomicUsize::new(0),
            seats: Mutex::default(),
            freed: Notify::new(),
            clock: Instant::now(),
        })
    }

    fn seats(&self) -> MutexGuard<'_, Seats> {
        self.seats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cap.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Connections open (seated).
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// A seat for a new connection, under the cap. At the cap, one connection waiting on its client is told to
    /// close (unless one is already closing) and the caller tries again after [`Admission::room`].
    pub fn admit(self: &Arc<Self>) -> Result<Admitted, Full> {
        if self.open.fetch_add(1, Ordering::Relaxed) >= self.max {
            self.open.fetch_sub(1, Ordering::Relaxed);
            if self.evicting.load(Ordering::Relaxed) > 0 || self.evict_one() {
                return Err(Full::Closing);
            }
            return Err(Full::Busy);
        }
        let seat = Arc::new(Seat::new(self.clock));
        let mut seats = self.seats();
        let index = match seats.free.pop() {
            Some(i) => {
                seats.all[i] = Some(seat.clone());
                i
            }
            None => {
                seats.all.push(Some(seat.clone()));
                seats.all.len() - 1
            }
        };
        Ok(Admitted { admission: self.clone(), index, seat })
    }

    /// Tells the [`victim`] to close; false when no connection waits on its client.
    fn evict_one(&self) -> bool {
        let seats = self.seats();
        // A seat's mark may change between the look and the claim (its request went on): then look again.
        for _ in 0..4 {
            let states = seats.all.iter().enumerate().filter_map(|(i, s)| Some((i, s.as_ref()?.state())));
            let Some(seat) = victim(states).and_then(|i| seats.all[i].as_ref()) else { return false };
            let since = seat.since.load(Ordering::Relaxed);
            if since < EVICTED
                && seat.since.compare_exchange(since, EVICTED, Ordering::Relaxed, Ordering::Relaxed).is_ok()
            {
                self.evicting.fetch_add(1, Ordering::Relaxed);
                // A stored permit: the connection's task sees it even if it is not waiting on it right now.
                seat.evict.notify_one();
                return true;
            }
        }
        false
    }

    /// Resolves when a connection has ended while the door was full, or after a short while (a connection may
    /// have started waiting on its client meanwhile): then try [`Admission::admit`] again.
    pub async fn room(&self) {
        tokio::select! {
            _ = self.freed.notified() => {}
            _ = tokio::time::sleep(RECHECK) => {}
        }
    }
}

/// Why a connection was not admitted yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// A connection is closing to make room.
    Closing,
    /// Every connection has a request on it.
    Busy,
}

/// A connection's admission: its seat, given up when it is dropped.
pub struct Admitted {
    admission: Arc<Admission>,
    index: usize,
    pub seat: Arc<Seat>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let a = &self.admission;
        {
            let mut seats = a.seats();
            if let Some(slot) = seats.all.get_mut(self.index) {
                *slot = None;
                seats.free.push(self.index);
            }
        }
        if self.seat.since.load(Ordering::Relaxed) == EVICTED {
            a.evicting.fetch_sub(1, Ordering::Relaxed);
        }
        if a.open.fetch_sub(1, Ordering::Relaxed) >= a.max {
            a.freed.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_victim_owes_a_request_longest_else_is_idle_longest() {
        let owes = |since| Waits { since, owes: true };
        let idle = |since| Waits { since, owes: false };
        // (states by index, chosen)
        let cases: [(&[Waits], Option<usize>); 8] = [
            (&[], None),
            (&[owes(BUSY), idle(BUSY)], None),
            (&[owes(EVICTED), idle(BUSY)], None),
            (&[idle(30), idle(10), idle(20)], Some(1)),
            (&[owes(30), owes(10), owes(20)], Some(1)),
            // A slow client that just came goes before a kept-alive one idle for long.
            (&[idle(1), owes(900)], Some(1)),
            (&[idle(BUSY), owes(500), owes(EVICTED), idle(7)], Some(1)),
            (&[owes(5), owes(5)], Some(0)),
        ];
        for (states, want) in cases {
            assert_eq!(victim(states.iter().copied().enumerate()), want, "{states:?}");
        }
    }

    /// Admits until a seat is given or `tries` run out (the closed connection's task is the caller itself here).
    fn admit_after_eviction(door: &Arc<Admission>, evicted: Admitted) -> Admitted {
        assert_eq!(door.admit().err(), Some(Full::Closing), "the cap is never passed");
        assert_eq!(door.evicting.load(Ordering::Relaxed), 1);
        assert_eq!(door.admit().err(), Some(Full::Closing), "no second eviction while one is on its way");
        assert_eq!(door.evicting.load(Ordering::Relaxed), 1);
        assert_eq!(evicted.seat.since.load(Ordering::Relaxed), EVICTED);
        drop(evicted);
        assert_eq!(door.evicting.load(Ordering::Relaxed), 0);
        door.admit().expect("room once the evicted one is gone")
    }

    #[tokio::test]
    async fn at_the_cap_a_waiting_connection_makes_room_and_busy_ones_do_not() {
        let door = Admission::new(2);
        let a = door.admit().expect("under the cap");
        std::thread::sleep(Duration::from_millis(5));
        let b = door.admit().expect("under the cap");
        assert_eq!(door.open(), 2);
        // Both owe their first request: the older one, a, is closed for c.
        let a_told = a.seat.clone();
        let c = admit_after_eviction(&door, a);
        tokio::time::timeout(Duration::from_secs(1), a_told.evicted()).await.expect("a was told to close");
        assert!(b.seat.since.load(Ordering::Relaxed) < EVICTED, "b stays");
        // Both with a request at a process: nothing is closed, no one admitted.
        b.seat.busy();
        c.seat.busy();
        assert_eq!(door.admit().err(), Some(Full::Busy));
        assert_eq!((door.open(), door.evicting.load(Ordering::Relaxed)), (2, 0), "a refusal holds no seat");
        // An answer sent: that connection waits on its client again, and may be closed for a new one.
        c.seat.waiting();
        let d = admit_after_eviction(&door, c);
        drop((b, d));
        assert_eq!(door.open(), 0);
        assert!(door.seats().all.iter().all(Option::is_none), "every seat given up");
    }

    #[tokio::test]
    async fn a_full_door_hears_when_a_connection_ends() {
        let door = Admission::new(1);
        let a = door.admit().expect("under the cap");
        a.seat.busy();
        assert_eq!(door.admit().err(), Some(Full::Busy));
        let waiter = {
            let door = door.clone();
            tokio::spawn(async move {
                let started = tokio::time::Instant::now();
                loop {
                    if let Ok(seat) = door.admit() {
                        return (seat, started.elapsed());
                    }
                    door.room().await;
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(120)).await;
        drop(a);
        let (_seat, took) = waiter.await.expect("admitted");
        assert!(took >= Duration::from_millis(120), "not before a connection ended: {took:?}");
    }
}
