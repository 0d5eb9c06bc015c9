//! The requests in flight on each process, as the front door sees them: what the guard names as the victim's work
//! when it aborts or kills a process (the decision log, the alerts, the status, the home page).
//!
//! Each front-door thread writes only its own board of each process (an uncontended lock around a slab, on a cache
//! line of its own): a request enters when it goes to the process, adds the response bytes as they pass, and
//! leaves when its response ends. The sampler's thread reads every board of the victim when it acts, a few times
//! a day at most. Nothing of a body is kept; the path is cut to [`InFlight::PATH_MAX`] when read.

use crate::decision::snapshot::InFlight;
use crate::feed::growth::{is_id_of, route_key, MAX_KEYS, OTHER};
use hyper::header::HeaderValue;
use hyper::{Method, Uri};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// One request on its way, as its thread holds it.
pub(crate) struct Flight {
    pub method: Method,
    /// Shares the request's bytes (no copy).
    pub uri: Uri,
    pub cache_id: Option<HeaderValue>,
    pub started: Instant,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// The processes' listing the front door knew of when it started ([`super::growth`]).
    pub epoch: u64,
    /// Its process's abort generation when it started.
    pub generation: u64,
}

/// A request that ended, waiting for the listing after it to say how much its process grew ([`super::growth`]).
/// Nothing of the request is held: a URI kept would keep the connection's read buffer from being reused.
pub(crate) struct Done {
    /// Its route key, by its index in the board's [`Keys`].
    pub key: u16,
    /// The listings it spans: the last before its start and the last before its end.
    pub first: u64,
    pub last: u64,
    /// Its process was told to abort (or was killed) while it was in flight.
    pub at_abort: bool,
}

/// The route keys one board has seen, each made once: a request's key is found by a hash of its method and folded
/// path, taken in one pass over the path's bytes, so the request pays no allocation and no string search. At most
/// [`MAX_KEYS`] of them; the rest are [`OTHER`] (index 0). The hash is FNV-1a from a seed of the board's own: a
/// client that made two paths collide would only count one route's requests under the other's key.
pub(crate) struct Keys {
    seed: u64,
    /// (hash, index), at most [`MAX_KEYS`]: searched in order, the most used first soon enough.
    index: Vec<(u64, u16)>,
    names: Vec<Box<str>>,
}

impl Default for Keys {
    fn default() -> Keys {
        use std::hash::{BuildHasher, Hasher};
        let seed = std::hash::RandomState::new().build_hasher().finish();
        Keys { seed, index: Vec::new(), names: vec![OTHER.into()] }
    }
}

const FNV_PRIME: u64 = 0x0100_0000_01b3;

fn fnv(h: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(FNV_PRIME))
}

impl Keys {
    /// The hash of `method` and `path` with its ids folded, as [`route_key`] folds them
    /// ([`crate::feed::growth::is_id`]): each segment `/` and its bytes, or `/:id`. One pass over the path: a
    /// segment is hashed on as it is read, and the hash from before it taken back when it turns out an id.
    fn hash(&self, method: &Method, path: &str) -> u64 {
        let mut before = fnv(self.seed, method.as_str().as_bytes());
        let (mut h, mut len, mut digits) = (fnv(before, b"/"), 0, 0);
        for &b in path.as_bytes() {
            if b == b'/' {
                before = if is_id_of(len, digits) { fnv(before, b"/:id") } else { h };
                (h, len, digits) = (fnv(before, b"/"), 0, 0);
            } else {
                h = fnv(h, &[b]);
                len += 1;
                digits += usize::from(b.is_ascii_digit());
            }
        }
        if is_id_of(len, digits) {
            fnv(before, b"/:id")
        } else {
            h
        }
    }

    /// The index of the route key of `method` and `path` ([`route_key`]).
    fn of(&mut self, method: &Method, path: &str) -> u16 {
        let hash = self.hash(method, path);
        if let Some(&(_, i)) = self.index.iter().find(|(h, _)| *h == hash) {
            return i;
        }
        if self.names.len() > MAX_KEYS {
            return 0;
        }
        self.names.push(route_key(method.as_str(), path).into());
        let i = (self.names.len() - 1) as u16;
        self.index.push((hash, i));
        i
    }
}

/// The most ended requests a board holds between two listings: past it, more are dropped (and counted), so a flood
/// of requests between two listings cannot grow the front door.
const DONE_MAX: usize = 1 << 16;

impl Flight {
    /// As the guard reports it at `now`: the path (with its query when `query`) cut to [`InFlight::PATH_MAX`] bytes
    /// at a character's edge, its control characters escaped ([`crate::base::text::escape_controls`]).
    fn report(&self, now: Instant, query: bool) -> InFlight {
        let full = match (query, self.uri.path_and_query()) {
            (true, Some(pq)) => pq.as_str(),
            _ => self.uri.path(),
        };
        let mut end = full.len().min(InFlight::PATH_MAX);
        while !full.is_char_boundary(end) {
            end -= 1;
        }
        // A path may hold C1 controls (UTF-8 is let through), a header a tab: escaped, as the guard shows them.
        let esc = |s: &str| crate::base::text::escape_controls(s).into_owned();
        InFlight {
            method: self.method.as_str().chars().take(32).collect(),
            path: esc(&full[..end]),
            cache_id: self
                .cache_id
                .as_ref()
                .and_then(|v| v.to_str().ok())
                .map(|c| esc(&c.chars().take(128).collect::<String>())),
            age_ms: now.saturating_duration_since(self.started).as_millis() as u64,
            bytes_in: self.bytes_in,
            bytes_out: self.bytes_out,
        }
    }
}

/// One thread's requests in flight on one process, and those ended since the last listing, alone on its cache line.
#[repr(align(128))]
#[derive(Default)]
pub(crate) struct Board(Mutex<Held>);

#[derive(Default)]
pub(crate) struct Held {
    flights: slab::Slab<Flight>,
    done: Vec<Done>,
    /// Ended requests not kept: the board held [`DONE_MAX`].
    dropped: u64,
    keys: Keys,
}

impl Board {
    fn lock(&self) -> MutexGuard<'_, Held> {
        // Nothing under the lock can panic halfway through a change: a poisoned board is still whole.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Enters a request; its key leaves it.
    pub fn enter(&self, f: Flight) -> usize {
        self.lock().flights.insert(f)
    }

    /// The request `key` ended at listing `epoch`, its process's abort generation then `generation`.
    pub fn leave(&self, key: usize, epoch: u64, generation: u64) {
        let mut h = self.lock();
        let Some(f) = h.flights.try_remove(key) else { return };
        if h.done.len() >= DONE_MAX {
            h.dropped += 1;
            return;
        }
        let at_abort = f.generation != generation;
        let key = h.keys.of(&f.method, f.uri.path());
        h.done.push(Done { key, first: f.epoch, last: epoch, at_abort });
    }

    /// `n` more response bytes passed to the client.
    pub fn sent(&self, key: usize, n: u64) {
        if let Some(f) = self.lock().flights.get_mut(key) {
            f.bytes_out = f.bytes_out.saturating_add(n);
        }
    }

    /// Appends the requests on this board to `out`, as of `now`.
    pub fn read(&self, now: Instant, query: bool, out: &mut Vec<InFlight>) {
        out.extend(self.lock().flights.iter().map(|(_, f)| f.report(now, query)));
    }

    /// Moves the ended requests into `done`, the route keys they name into `keys` (from index `keys.len()` on: they
    /// only grow), notes the first listing of each one still in flight in `flying`, and returns how many ended
    /// requests were dropped since the last call.
    pub fn collect(&self, done: &mut Vec<Done>, keys: &mut Vec<Box<str>>, flying: &mut Vec<u64>) -> u64 {
        let mut h = self.lock();
        done.append(&mut h.done);
        keys.extend(h.keys.names.iter().skip(keys.len()).cloned());
        flying.extend(h.flights.iter().map(|(_, f)| f.epoch));
        std::mem::take(&mut h.dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn flight(uri: &str, started: Instant) -> Flight {
        Flight {
            method: Method::GET,
            uri: uri.parse().expect("a test URI"),
            cache_id: Some(HeaderValue::from_static("w1.abc")),
            started,
            bytes_in: 3,
            bytes_out: 0,
            epoch: 7,
            generation: 0,
        }
    }

    #[test]
    fn a_request_is_listed_from_its_start_to_its_end_with_its_bytes() {
        let b = Board::default();
        let t0 = Instant::now();
        let k = b.enter(flight("/heavy?secret=1", t0));
        b.sent(k, 10);
        b.sent(k, 5);
        let mut out = Vec::new();
        b.read(t0 + Duration::from_millis(1200), false, &mut out);
        assert_eq!(
            out,
            vec![InFlight {
                method: "GET".into(),
                path: "/heavy".into(),
                cache_id: Some("w1.abc".into()),
                age_ms: 1200,
                bytes_in: 3,
                bytes_out: 15,
            }]
        );
        out.clear();
        b.read(t0, true, &mut out);
        assert_eq!(out[0].path, "/heavy?secret=1", "the query only when configured");
        let (mut done, mut keys, mut flying) = (Vec::new(), Vec::new(), Vec::new());
        b.collect(&mut done, &mut keys, &mut flying);
        assert_eq!((done.len(), flying), (0, vec![7]));
        b.leave(k, 9, 1);
        b.leave(k, 9, 1);
        b.sent(k, 1);
        out.clear();
        b.read(t0, false, &mut out);
        assert!(out.is_empty());
        let mut flying = Vec::new();
        assert_eq!(b.collect(&mut done, &mut keys, &mut flying), 0);
        assert!(flying.is_empty());
        assert_eq!(done.len(), 1, "left once");
        assert_eq!((done[0].first, done[0].last, done[0].at_abort), (7, 9, true));
        assert_eq!(&*keys[usize::from(done[0].key)], "GET /heavy");
    }

    /// A client's path may carry C1 controls (a terminal's CSI, U+009B) and its cache id a tab: the guard shows
    /// them escaped.
    #[test]
    fn a_reported_path_and_cache_id_have_their_controls_escaped() {
        let t0 = Instant::now();
        let mut f = flight("/a\u{9b}2J", t0);
        f.cache_id = Some(HeaderValue::from_static("w1\tx"));
        let r = f.report(t0, true);
        assert_eq!((r.path.as_str(), r.cache_id.as_deref()), ("/a\\u{9b}2J", Some("w1\\tx")));
    }

    /// Paths that fold to one route key share its index; past the cap, new keys are `other`.
    #[test]
    fn route_keys_are_found_by_their_folded_path_and_capped() {
        let mut k = Keys::default();
        let get = Method::GET;
        let a = k.of(&get, "/Patient/123");
        assert_eq!(k.of(&get, "/Patient/456"), a);
        assert_ne!(k.of(&Method::POST, "/Patient/456"), a);
        assert_eq!(&*k.names[usize::from(a)], "GET /Patient/:id");
        for i in 0..MAX_KEYS + 5 {
            k.of(&get, &format!("/a{}/b{}", "x".repeat(i % 10), "y".repeat(i / 10)));
        }
        assert_eq!(k.names.len(), MAX_KEYS + 1, "other and the first {MAX_KEYS}");
        assert_eq!(k.of(&get, "/yet-another"), 0);
        assert_eq!(k.of(&get, "/Patient/789"), a, "a key kept stays its own");
        // The hash folds as route_key does: two paths share an index exactly when they share a key.
        let paths =
            ["/", "/a", "/a/", "/r4", "/r4/x1", "/r4/abc123", "/r4/abc12", "/0f3a9c2e-77b1-4d5e", "/a//b", "/a/b"];
        let k = Keys::default();
        for p in paths {
            for q in paths {
                let same_key = route_key("GET", p) == route_key("GET", q);
                assert_eq!(k.hash(&get, p) == k.hash(&get, q), same_key, "{p} {q}");
            }
        }
    }

    #[test]
    fn a_long_path_is_cut() {
        let b = Board::default();
        let long = format!("/{}", "a".repeat(5000));
        b.enter(flight(&long, Instant::now()));
        let mut out = Vec::new();
        b.read(Instant::now(), true, &mut out);
        assert_eq!(out[0].path.len(), InFlight::PATH_MAX);
    }
}
