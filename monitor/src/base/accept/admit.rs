//! Admission of a server's connections: at most [`Bounds::max_total`] open at once, and [`Bounds::max_per_ip`] from
//! one client address (loopback clients, the host's own admin and probes, are held to the total only), so that no
//! crowd of clients can take the agent's memory or file descriptors. When a bound is reached, a connection in that
//! scope that waits on its client is closed to make room for the new one ([`victim`]): the one idle longest, or,
//! with [`Bounds::owed_first`], first the one that has waited longest while owing a request (it sent nothing yet,
//! or only part of a request), as a server under connection pressure reuses its idle keep-alive connections. So
//! slow or idle clients can never lock out a new one, and a client at its own limit only displaces itself. A
//! connection with a request being answered is never closed for another. The new connection is served once the
//! one closed for it is gone, so no bound is passed, not even for an instant.
//!
//! Each connection holds a [`Seat`], which its server marks ([`Seat::busy`] while a request is answered,
//! [`Seat::waiting`] once the answer is sent): plain loads and stores, no lock. The seats are looked through only
//! when a bound is reached.

use super::client_io::Marks;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// A seat's mark while its connection has a request being answered.
const BUSY: u64 = u64::MAX;
/// A seat's mark once its connection is chosen to be closed.
const EVICTED: u64 = u64::MAX - 1;

/// How often a full door looks again for a connection it may close, when none has ended.
const RECHECK: Duration = Duration::from_millis(50);

/// A server's bounds on its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Connections open at once.
    pub max_total: usize,
    /// Connections one non-loopback client address may hold at once (None: no bound of its own).
    pub max_per_ip: Option<usize>,
    /// Among the connections that may be closed, those owing a request go first; else the idle time alone decides.
    pub owed_first: bool,
}

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

    /// A request is being answered: the connection is not closed for another until its answer is sent.
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

    fn is_evicted(&self) -> bool {
        self.since.load(Ordering::Relaxed) == EVICTED
    }

    /// Resolves once the door chose this connection to make room for a new one: it is to be closed.
    pub(crate) async fn evicted(&self) {
        self.evict.notified().await;
    }

    /// How the door sees the connection now ([`victim`]).
    fn state(&self, id: u64) -> Waits {
        let since = self.since.load(Ordering::Relaxed);
        // It has sent nothing yet, or the last bytes moved were its own: a request (head or body) is on its way.
        let owes = self.marks.moves() == 0 || self.marks.read_last();
        Waits { id, since, owes }
    }
}

/// Marks its seat as waiting on its client again when dropped: held by a request's answer.
pub(crate) struct Answering(pub Arc<Seat>);

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.waiting();
    }
}

/// A connection as [`victim`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waits {
    /// The connection's number: a lower one was opened earlier.
    pub id: u64,
    /// Since when (ms) it has waited on its client; [`BUSY`] or [`EVICTED`] when it does not.
    pub since: u64,
    /// It owes a request: it sent nothing yet, or only part of a request.
    pub owes: bool,
}

/// The connection (its id) to close for a new one: of those waiting on their client, the one that has waited
/// longest (owing a request first when `owed_first`), the oldest on a tie.
pub fn victim(seats: impl IntoIterator<Item = Waits>, owed_first: bool) -> Option<u64> {
    seats.into_iter().filter(|w| w.since < EVICTED).min_by_key(|w| (owed_first && !w.owes, w.since, w.id)).map(|w| w.id)
}

/// The seats of the connections open, by id.
#[derive(Default)]
struct Seats {
    open: HashMap<u64, (IpAddr, Arc<Seat>)>,
    next_id: u64,
}

/// The door's seats, shared by the threads that accept.
pub struct Admission {
    bounds: Bounds,
    seats: Mutex<Seats>,
    /// Woken when a connection ends while the door may be waiting for room.
    freed: Notify,
    clock: Instant,
}

impl Admission {
    pub fn new(bounds: Bounds) -> Arc<Admission> {
        Arc::new(Admission { bounds, seats: Mutex::default(), freed: Notify::new(), clock: Instant::now() })
    }

    fn seats(&self) -> MutexGuard<'_, Seats> {
        self.seats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Connections open (seated).
    #[cfg(test)]
    fn open(&self) -> usize {
        self.seats().open.len()
    }

    /// A seat for a new connection from `ip`, within the bounds. When a bound is reached, one connection in its
    /// scope waiting on its client is told to close (unless one is already closing) and the caller tries again
    /// after [`Admission::room`].
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Admitted, Full> {
        let mut seats = self.seats();
        let per_ip = self.bounds.max_per_ip.filter(|_| !ip.is_loopback());
        let at_ip = per_ip.is_some_and(|max| seats.open.values().filter(|(i, _)| *i == ip).count() >= max);
        if at_ip || seats.open.len() >= self.bounds.max_total {
            let scope = |(i, _): &&(IpAddr, Arc<Seat>)| !at_ip || *i == ip;
            if seats.open.values().filter(scope).any(|(_, s)| s.is_evicted()) || self.evict_one(&seats, scope) {
                return Err(Full::Closing);
            }
            return Err(Full::Busy);
        }
        let seat = Arc::new(Seat::new(self.clock));
        seats.next_id += 1;
        let id = seats.next_id;
        seats.open.insert(id, (ip, seat.clone()));
        Ok(Admitted { admission: self.clone(), id, seat })
    }

    /// Tells the [`victim`] among the seats in `scope` to close; false when none waits on its client.
    fn evict_one(&self, seats: &Seats, scope: impl Fn(&&(IpAddr, Arc<Seat>)) -> bool) -> bool {
        // A seat's mark may change between the look and the claim (its request went on): then look again.
        for _ in 0..4 {
            let states = seats.open.iter().filter(|(_, o)| scope(o)).map(|(&id, (_, s))| s.state(id));
            let Some((_, seat)) = victim(states, self.bounds.owed_first).and_then(|id| seats.open.get(&id)) else {
                return false;
            };
            let since = seat.since.load(Ordering::Relaxed);
            if since < EVICTED
                && seat.since.compare_exchange(since, EVICTED, Ordering::Relaxed, Ordering::Relaxed).is_ok()
            {
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
    /// Every connection in the full scope has a request on it.
    Busy,
}

/// A connection's admission: its seat, given up when it is dropped.
pub struct Admitted {
    admission: Arc<Admission>,
    id: u64,
    pub seat: Arc<Seat>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let a = &self.admission;
        let was_full = {
            let mut seats = a.seats();
            let was_full = seats.open.len() >= a.bounds.max_total;
            seats.open.remove(&self.id);
            was_full
        };
        if was_full || self.seat.is_evicted() {
            // A stored permit: a loop that has not started waiting on `room` yet still hears of it.
            a.freed.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: Bounds = Bounds { max_total: 2, max_per_ip: None, owed_first: true };

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn the_victim_owes_a_request_longest_else_is_idle_longest() {
        let owes = |id, since| Waits { id, since, owes: true };
        let idle = |id, since| Waits { id, since, owes: false };
        // (states, owed first, chosen)
        let cases: [(&[Waits], bool, Option<u64>); 11] = [
            (&[], true, None),
            (&[owes(0, BUSY), idle(1, BUSY)], true, None),
            (&[owes(0, EVICTED), idle(1, BUSY)], true, None),
            (&[idle(0, 30), idle(1, 10), idle(2, 20)], true, Some(1)),
            (&[owes(0, 30), owes(1, 10), owes(2, 20)], true, Some(1)),
            // A slow client that just came goes before a kept-alive one idle for long.
            (&[idle(0, 1), owes(1, 900)], true, Some(1)),
            (&[idle(0, BUSY), owes(1, 500), owes(2, EVICTED), idle(3, 7)], true, Some(1)),
            // Ties on the time go to the oldest connection.
            (&[owes(7, 5), owes(4, 5)], true, Some(4)),
            // By idle time alone: the kept-alive one idle longest goes, whatever the others owe.
            (&[idle(0, 1), owes(1, 900)], false, Some(0)),
            (&[owes(0, BUSY), idle(1, BUSY)], false, None),
            (&[owes(7, 5), idle(4, 5)], false, Some(4)),
        ];
        for (states, owed_first, want) in cases {
            assert_eq!(victim(states.iter().copied(), owed_first), want, "{states:?} owed first: {owed_first}");
        }
    }

    /// Admits from `from` once `evicted` is gone (the closed connection's task is the caller itself here).
    fn admit_after_eviction(door: &Arc<Admission>, from: IpAddr, evicted: Admitted) -> Admitted {
        assert_eq!(door.admit(from).err(), Some(Full::Closing), "no bound is ever passed");
        assert_eq!(door.admit(from).err(), Some(Full::Closing), "no second eviction while one is on its way");
        assert!(evicted.seat.is_evicted());
        let open = door.open();
        drop(evicted);
        assert_eq!(door.open(), open - 1);
        door.admit(from).expect("room once the evicted one is gone")
    }

    #[tokio::test]
    async fn at_the_cap_a_waiting_connection_makes_room_and_busy_ones_do_not() {
        let door = Admission::new(ALL);
        let a = door.admit(ip(1)).expect("under the cap");
        std::thread::sleep(Duration::from_millis(5));
        let b = door.admit(ip(2)).expect("under the cap");
        assert_eq!(door.open(), 2);
        // Both owe their first request: the older one, a, is closed for c.
        let a_told = a.seat.clone();
        let c = admit_after_eviction(&door, ip(3), a);
        tokio::time::timeout(Duration::from_secs(1), a_told.evicted()).await.expect("a was told to close");
        assert!(!b.seat.is_evicted(), "b stays");
        // Both with a request being answered: nothing is closed, no one admitted.
        b.seat.busy();
        c.seat.busy();
        assert_eq!(door.admit(ip(4)).err(), Some(Full::Busy));
        assert_eq!(door.open(), 2, "a refusal holds no seat");
        assert!(!b.seat.is_evicted() && !c.seat.is_evicted());
        // An answer sent: that connection waits on its client again, and may be closed for a new one.
        c.seat.waiting();
        let d = admit_after_eviction(&door, ip(4), c);
        drop((b, d));
        assert_eq!(door.open(), 0, "every seat given up");
    }

    #[test]
    fn a_client_at_its_own_limit_displaces_only_itself_and_loopback_has_none() {
        let door = Admission::new(Bounds { max_total: 10, max_per_ip: Some(2), owed_first: false });
        let other = door.admit(ip(2)).expect("room");
        let mine = [door.admit(ip(1)).expect("room"), door.admit(ip(1)).expect("room")];
        // At its own limit: its own longest-idle connection (the first, the older on a tie), never another's.
        let [first, second] = mine;
        let second = {
            let told = first.seat.clone();
            let third = admit_after_eviction(&door, ip(1), first);
            assert!(told.is_evicted() && !other.seat.is_evicted() && !second.seat.is_evicted());
            (second, third)
        };
        // Both of its connections answering: the client waits its turn, others are admitted.
        second.0.seat.busy();
        second.1.seat.busy();
        assert_eq!(door.admit(ip(1)).err(), Some(Full::Busy), "a client busy at its limit waits its turn");
        let _more = door.admit(ip(3)).expect("another client has room");
        // The host's own clients are held to the total only.
        let local = IpAddr::from([127, 0, 0, 1]);
        let _local: Vec<Admitted> =
            (0..3).map(|_| door.admit(local).expect("loopback past the per-address bound")).collect();
    }

    #[tokio::test]
    async fn a_full_door_hears_when_a_connection_ends() {
        let door = Admission::new(Bounds { max_total: 1, ..ALL });
        let a = door.admit(ip(1)).expect("under the cap");
        a.seat.busy();
        assert_eq!(door.admit(ip(2)).err(), Some(Full::Busy));
        let waiter = {
            let door = door.clone();
            tokio::spawn(async move {
                let started = tokio::time::Instant::now();
                loop {
                    if let Ok(seat) = door.admit(ip(2)) {
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
