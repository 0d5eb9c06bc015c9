//! Memory per request: for each request through the front door, how much its process's anonymous memory grew while
//! it was in flight (from the samples around it), grouped by a route key (the method and the path with its ids
//! folded). Exact when no other request on that process touched the samples' span; shared otherwise, and counted
//! apart. The front door writes it ([`RouteGrowth::record`]); the home page, `/metrics` and the stats database read
//! it. At most [`MAX_KEYS`] keys are kept: the rest are summed under [`OTHER`].

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The most route keys kept (besides [`OTHER`]): a client chooses its paths, and each key costs a row and a series.
pub const MAX_KEYS: usize = 64;
/// Where the requests of the keys past [`MAX_KEYS`] are counted.
pub const OTHER: &str = "other";
/// The longest key kept, in bytes.
const KEY_MAX: usize = 96;

/// Growth below this is counted as none (a page table, an allocator's arena).
pub const FLOOR_BYTES: u64 = 4096;
/// Buckets per doubling: a bucket's bounds are 4.4% apart, so a quantile read from them is within 2.2%.
const PER_OCTAVE: f64 = 16.0;

/// The bucket of `bytes`: 0 under [`FLOOR_BYTES`], else 1 + 16 log2(bytes / FLOOR_BYTES).
fn bucket(bytes: u64) -> u16 {
    if bytes < FLOOR_BYTES {
        return 0;
    }
    (1.0 + (PER_OCTAVE * (bytes as f64 / FLOOR_BYTES as f64).log2()).floor()).min(f64::from(u16::MAX)) as u16
}

/// The bytes bucket `b` stands for: 0 for the first, else the geometric middle of its bounds.
fn value_of(b: u16) -> u64 {
    if b == 0 {
        return 0;
    }
    (FLOOR_BYTES as f64 * 2f64.powf((f64::from(b) - 0.5) / PER_OCTAVE)) as u64
}

/// The lower bound of bucket `b` in bytes (what a Prometheus `le` compares against).
pub fn lower_bound(b: u16) -> u64 {
    if b == 0 {
        return 0;
    }
    (FLOOR_BYTES as f64 * 2f64.powf((f64::from(b) - 1.0) / PER_OCTAVE)).round() as u64
}

/// A sparse histogram of growths, and their sum.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hist {
    pub buckets: BTreeMap<u16, u64>,
    pub sum: u64,
}

impl Hist {
    fn add(&mut self, bytes: u64) {
        *self.buckets.entry(bucket(bytes)).or_default() += 1;
        self.sum = self.sum.saturating_add(bytes);
    }

    pub fn merge(&mut self, other: &Hist) {
        for (b, n) in &other.buckets {
            *self.buckets.entry(*b).or_default() += n;
        }
        self.sum = self.sum.saturating_add(other.sum);
    }

    pub fn count(&self) -> u64 {
        self.buckets.values().sum()
    }

    /// The `q` quantile (0..=1) in bytes, None when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        for (b, c) in &self.buckets {
            seen += c;
            if seen >= rank {
                return Some(value_of(*b));
            }
        }
        None
    }

    /// `sum;bucket:count,…`: how the stats database keeps it.
    pub fn encode(&self) -> String {
        let buckets: Vec<String> = self.buckets.iter().map(|(b, n)| format!("{b}:{n}")).collect();
        format!("{};{}", self.sum, buckets.join(","))
    }

    /// Reads [`Hist::encode`]'s text; what does not parse is left out.
    pub fn decode(s: &str) -> Hist {
        let (sum, buckets) = s.split_once(';').unwrap_or(("0", s));
        Hist {
            buckets: buckets
                .split(',')
                .filter_map(|p| {
                    let (b, n) = p.split_once(':')?;
                    Some((b.parse().ok()?, n.parse().ok()?))
                })
                .collect(),
            sum: sum.parse().unwrap_or(0),
        }
    }
}

/// One route key's requests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyStats {
    /// Requests, measured or not (a request whose process was not listed before it began is counted, unmeasured).
    pub count: u64,
    /// Growths of requests that were alone on their process over the samples' span.
    pub exact: Hist,
    /// Growths of requests that shared the span with others (each is given the whole growth).
    pub shared: Hist,
    /// Requests in flight when their process was told to abort or was killed.
    pub at_abort: u64,
}

impl KeyStats {
    fn add(&mut self, growth: u64, exact: bool, at_abort: bool) {
        self.count += 1;
        if exact {
            self.exact.add(growth);
        } else {
            self.shared.add(growth);
        }
        self.at_abort += u64::from(at_abort);
    }

    pub fn merge(&mut self, o: &KeyStats) {
        self.count += o.count;
        self.exact.merge(&o.exact);
        self.shared.merge(&o.shared);
        self.at_abort += o.at_abort;
    }

    /// The 99th percentile of the growth, and whether it is of exact measures: of the exact ones when there are
    /// any, else of the shared ones.
    pub fn p99(&self) -> (u64, bool) {
        match self.exact.quantile(0.99) {
            Some(v) => (v, true),
            None => (self.shared.quantile(0.99).unwrap_or(0), false),
        }
    }
}

#[derive(Debug, Default)]
struct Book {
    /// Since start.
    total: BTreeMap<String, KeyStats>,
    /// Since the last [`RouteGrowth::take`].
    recent: BTreeMap<String, KeyStats>,
}

/// The growth per route key, written by the front door, read by the page, `/metrics` and the stats database.
#[derive(Debug, Default)]
pub struct RouteGrowth(Mutex<Book>);

impl RouteGrowth {
    fn lock(&self) -> MutexGuard<'_, Book> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One request of route `key` grew its process by `growth` bytes.
    pub fn record(&self, key: &str, growth: u64, exact: bool, at_abort: bool) {
        self.each(key, |k| k.add(growth, exact, at_abort));
    }

    /// One request of route `key` whose growth could not be measured (its process was not listed before it began).
    pub fn record_unmeasured(&self, key: &str, at_abort: bool) {
        self.each(key, |k| {
            k.count += 1;
            k.at_abort += u64::from(at_abort);
        });
    }

    /// Applies `f` to `key`'s stats since start and since the last [`RouteGrowth::take`] (`key` is [`OTHER`] once
    /// [`MAX_KEYS`] others are kept). A key's name is made only the first time it comes (each minute for the recent
    /// ones), not per request.
    fn each(&self, key: &str, f: impl Fn(&mut KeyStats)) {
        let mut b = self.lock();
        let key = if b.total.contains_key(key) || b.total.len() < MAX_KEYS { key } else { OTHER };
        let b = &mut *b;
        for map in [&mut b.total, &mut b.recent] {
            match map.get_mut(key) {
                Some(k) => f(k),
                None => f(map.entry(key.to_string()).or_default()),
            }
        }
    }

    /// Every key since start.
    pub fn totals(&self) -> BTreeMap<String, KeyStats> {
        self.lock().total.clone()
    }

    /// The keys since the last call (what the stats database keeps per minute), emptied.
    pub fn take(&self) -> BTreeMap<String, KeyStats> {
        std::mem::take(&mut self.lock().recent)
    }
}

/// A path segment that names one thing rather than a kind: all digits, or 6 characters or more with a digit, or 16
/// characters or more (`123`, `a1b2c3`, a UUID; not `r4` or `v2`). The front door's boards fold with it too when they
/// hash a path (`front::proxy::flights::Keys`).
pub(crate) fn is_id(seg: &[u8]) -> bool {
    is_id_of(seg.len(), seg.iter().filter(|b| b.is_ascii_digit()).count())
}

/// [`is_id`] of a segment of `len` bytes, `digits` of them digits: for a caller that counted them on its own pass.
pub(crate) fn is_id_of(len: usize, digits: usize) -> bool {
    (digits > 0 && (digits == len || len >= 6)) || len >= 16
}

/// The route key of a request: its method and its path with the ids folded (`GET /Patient/:id`, see [`is_id`]).
/// The path is read once the way a servlet container reads it ([`crate::config::paths::canonical`]: `;` parameters
/// cut, escapes decoded, dot segments resolved), so its re-spellings share a key; a control character that decoding
/// gave is written back as its escape. Cut to 96 bytes; a path that is not one (`*`) is kept as is.
pub fn route_key(method: &str, path: &str) -> String {
    let path = crate::config::paths::canonical(path);
    let mut key = String::with_capacity(method.len() + path.len().min(KEY_MAX) + 1);
    key.push_str(method);
    key.push(' ');
    for (i, seg) in path.split('/').enumerate() {
        if i > 0 {
            key.push('/');
        }
        if is_id(seg.as_bytes()) {
            key.push_str(":id");
        } else {
            for c in seg.chars() {
                if c.is_control() {
                    let mut b = [0; 4];
                    for byte in c.encode_utf8(&mut b).bytes() {
                        key.push_str(&format!("%{byte:02X}"));
                    }
                } else {
                    key.push(c);
                }
            }
        }
        if key.len() >= KEY_MAX {
            break;
        }
    }
    let mut end = key.len().min(KEY_MAX);
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    key.truncate(end);
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_folded_and_keys_are_short() {
        assert_eq!(route_key("GET", "/Patient/123/_history/2"), "GET /Patient/:id/_history/:id");
        assert_eq!(route_key("POST", "/r4/CodeSystem/$validate-code"), "POST /r4/CodeSystem/$validate-code");
        assert_eq!(route_key("GET", "/a/0f3a9c2e-77b1-4d5e-9a0b-1c2d3e4f5a6b/x"), "GET /a/:id/x");
        assert_eq!(route_key("GET", "/"), "GET /");
        let long = format!("/{}", ["seg"; 100].join("/"));
        assert!(route_key("GET", &long).len() <= KEY_MAX);
    }

    #[test]
    fn re_spellings_of_a_path_share_its_key() {
        let key = route_key("GET", "/r4/Patient/123");
        for p in
            ["/r4;x/Patient/123", "/r4/%50atient/123", "/r4/./Patient/123", "/r4/x/../Patient/123", "/r4/Patient;a=b/9"]
        {
            assert_eq!(route_key("GET", p), key, "{p}");
        }
        assert_eq!(route_key("GET", "/a%0Ab"), "GET /a%0Ab", "no control character in a key");
        assert_eq!(route_key("OPTIONS", "*"), "OPTIONS *");
    }

    #[test]
    fn a_quantile_is_within_its_bucket() {
        for mib in [1u64, 7, 64, 150, 900] {
            let mut h = Hist::default();
            h.add(mib << 20);
            let got = h.quantile(0.99).expect("a value") as f64;
            let want = (mib << 20) as f64;
            assert!((got / want - 1.0).abs() < 0.025, "{mib} MiB read as {got}");
        }
        let mut h = Hist::default();
        for _ in 0..99 {
            h.add(0);
        }
        h.add(64 << 20);
        assert_eq!(h.quantile(0.99), Some(0), "99 of 100 grew nothing");
        assert!(h.quantile(1.0).unwrap_or(0) > 60 << 20);
        assert_eq!(Hist::decode(&h.encode()), h);
        assert_eq!(Hist::decode("7;x:1,3:y,2:5"), Hist { buckets: [(2, 5)].into_iter().collect(), sum: 7 });
    }

    #[test]
    fn keys_past_the_cap_go_to_other_and_take_empties_the_recent_ones() {
        let g = RouteGrowth::default();
        for i in 0..MAX_KEYS + 10 {
            g.record(&format!("GET /k{}", "x".repeat(i % 15) + &"y".repeat(i / 15)), 1 << 20, true, false);
        }
        let t = g.totals();
        assert_eq!(t.len(), MAX_KEYS + 1);
        assert_eq!(t[OTHER].count, 10);
        g.record("GET /kx", 0, false, true);
        assert_eq!(g.totals()["GET /kx"].at_abort, 1, "a key already kept stays its own");
        assert_eq!(g.take().values().map(|k| k.count).sum::<u64>(), MAX_KEYS as u64 + 11);
        assert!(g.take().is_empty());
        assert_eq!(g.totals().values().map(|k| k.count).sum::<u64>(), MAX_KEYS as u64 + 11);
    }
}
