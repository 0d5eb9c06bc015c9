//! Reaction times: how long the agent took from the sampler's wake-up (`Published::wake.at`) to each action it led
//! to. Four kinds: `signal` (a refuse or abort signal sent by [`crate::consumers::actions`]), `post` (a refuse or abort
//! change POSTed to `post_url` or a process's admin path, timed when the receiver has answered it with 2xx) and `shed`
//! (the front door's first 503 after the group entered refusing or aborting); and `kill`, the last resort's SIGKILL
//! sent by the sampler thread ([`crate::guard`]).
//!
//! One [`Reactions`] is made per agent and shared (`Arc`) by the actions task, the front door and `/metrics`.
//! Recording is lock-free (relaxed atomic adds), and the front door's per-request cost is one relaxed load
//! ([`Reactions::shed_sent`]) unless a first 503 is awaited.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// What the agent did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A refuse or abort signal sent to a process.
    Signal,
    /// A refuse or abort change POSTed (answered with 2xx).
    Post,
    /// The front door's first 503 after the group entered refusing or aborting.
    Shed,
    /// The last resort's SIGKILL sent to a process that could not obey its abort.
    Kill,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Signal, Kind::Post, Kind::Shed, Kind::Kill];

    /// The `action` label of `monitor_reaction_seconds`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Signal => "signal",
            Kind::Post => "post",
            Kind::Shed => "shed",
            Kind::Kill => "kill",
        }
    }

    fn index(self) -> usize {
        match self {
            Kind::Signal => 0,
            Kind::Post => 1,
            Kind::Shed => 2,
            Kind::Kill => 3,
        }
    }
}

/// The upper bounds of the buckets, in nanoseconds: 0.1 ms to 1 s (the 20 ms bound is the goal from crossing the
/// abort line to the signal). A last bucket counts what took longer.
pub(crate) const BOUNDS_NS: [u64; 13] = [
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    20_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
];

/// Buckets per histogram: one per bound and one above the last.
const BUCKETS: usize = BOUNDS_NS.len() + 1;

/// One kind's histogram.
#[derive(Default)]
struct Histogram {
    /// Counts per bucket (not cumulative); the last is above the last bound.
    buckets: [AtomicU64; BUCKETS],
    sum_ns: AtomicU64,
}

/// A copy of one kind's histogram.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Counts per bucket (not cumulative), as [`BOUNDS_NS`], then the count above the last bound.
    pub buckets: [u64; BUCKETS],
    /// The sum of the times recorded, in nanoseconds.
    pub sum_ns: u64,
}

impl Counts {
    /// How many times were recorded.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The upper bound (in nanoseconds) of the bucket holding quantile `q` (0..=1), `None` with nothing recorded or
    /// when it lies above the last bound.
    #[cfg(test)]
    pub(crate) fn quantile_bound_ns(&self, q: f64) -> Option<u64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).max(1);
        let mut cum = 0;
        for (i, c) in self.buckets.iter().enumerate() {
            cum += c;
            if cum >= rank {
                return BOUNDS_NS.get(i).copied();
            }
        }
        None
    }
}

/// The agent's reaction times, per [`Kind`].
pub struct Reactions {
    hists: [Histogram; 4],
    /// A first 503 is awaited: the group entered refusing or aborting and the front door has not refused since.
    shed_armed: AtomicBool,
    /// The wake-up of the sample that entered refusing or aborting (read when the first 503 is sent).
    shed_wake: Mutex<Option<Instant>>,
}

impl Default for Reactions {
    fn default() -> Reactions {
        Reactions::new()
    }
}

impl Reactions {
    pub fn new() -> Reactions {
        Reactions { hists: Default::default(), shed_armed: AtomicBool::new(false), shed_wake: Mutex::new(None) }
    }

    /// Records one reaction of `kind` that took `took`.
    pub fn record(&self, kind: Kind, took: Duration) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let h = &self.hists[kind.index()];
        let i = BOUNDS_NS.partition_point(|&b| b < ns);
        h.buckets[i].fetch_add(1, Ordering::Relaxed);
        h.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Records one reaction of `kind` to the wake-up at `wake`, done now.
    pub(crate) fn record_since(&self, kind: Kind, wake: Instant) {
        self.record(kind, Instant::now().saturating_duration_since(wake));
    }

    /// A copy of `kind`'s histogram (each counter read on its own: a reaction recorded meanwhile may be in the
    /// buckets and not yet in the sum).
    pub fn counts(&self, kind: Kind) -> Counts {
        let h = &self.hists[kind.index()];
        let mut c = Counts { sum_ns: h.sum_ns.load(Ordering::Relaxed), ..Counts::default() };
        for (out, b) in c.buckets.iter_mut().zip(&h.buckets) {
            *out = b.load(Ordering::Relaxed);
        }
        c
    }

    /// The group entered refusing or aborting on the sample taken for the wake-up at `wake`: the next 503 of the
    /// front door is timed from it.
    pub(crate) fn arm_shed(&self, wake: Instant) {
        *self.shed_wake.lock().unwrap_or_else(PoisonError::into_inner) = Some(wake);
        self.shed_armed.store(true, Ordering::Release);
    }

    /// The group is back to normal: no 503 is awaited.
    pub(crate) fn disarm_shed(&self) {
        self.shed_armed.store(false, Ordering::Relaxed);
        *self.shed_wake.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// The front door sent a memory-guard 503: the first since [`arm_shed`](Self::arm_shed) is recorded. One
    /// relaxed load when none is awaited.
    #[inline]
    pub(crate) fn shed_sent(&self) {
        if !self.shed_armed.load(Ordering::Relaxed) {
            return;
        }
        self.first_shed();
    }

    #[cold]
    fn first_shed(&self) {
        // Of the requests refused at once, only the one that turns the flag off records.
        if !self.shed_armed.swap(false, Ordering::Acquire) {
            return;
        }
        let wake = self.shed_wake.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(wake) = wake {
            self.record_since(Kind::Shed, wake);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn times_land_in_their_buckets_with_the_bound_inclusive() {
        let r = Reactions::new();
        r.record(Kind::Signal, Duration::from_micros(50)); // <= 0.1 ms
        r.record(Kind::Signal, Duration::from_micros(100)); // exactly 0.1 ms: still the first bucket
        r.record(Kind::Signal, Duration::from_micros(101)); // 0.25 ms bucket
        r.record(Kind::Signal, 15 * MS); // 20 ms bucket
        r.record(Kind::Signal, Duration::from_secs(3)); // above 1 s
        let c = r.counts(Kind::Signal);
        assert_eq!(c.buckets[0], 2);
        assert_eq!(c.buckets[1], 1);
        assert_eq!(c.buckets[7], 1, "{c:?}");
        assert_eq!(c.buckets[BUCKETS - 1], 1);
        assert_eq!(c.count(), 5);
        assert_eq!(c.sum_ns, 50_000 + 100_000 + 101_000 + 15_000_000 + 3_000_000_000);
        assert_eq!(r.counts(Kind::Post), Counts::default(), "kinds are apart");
    }

    #[test]
    fn quantiles_name_the_bucket_bound() {
        let r = Reactions::new();
        assert_eq!(r.counts(Kind::Post).quantile_bound_ns(0.5), None);
        for _ in 0..98 {
            r.record(Kind::Post, Duration::from_micros(800));
        }
        r.record(Kind::Post, 40 * MS);
        r.record(Kind::Post, Duration::from_secs(2));
        let c = r.counts(Kind::Post);
        assert_eq!(c.quantile_bound_ns(0.5), Some(1_000_000));
        assert_eq!(c.quantile_bound_ns(0.99), Some(50_000_000));
        assert_eq!(c.quantile_bound_ns(1.0), None, "the slowest is above 1 s");
    }

    #[test]
    fn only_the_first_503_after_an_entry_is_timed() {
        let r = Reactions::new();
        r.shed_sent(); // not armed: nothing
        assert_eq!(r.counts(Kind::Shed).count(), 0);
        let wake = Instant::now() - 30 * MS;
        r.arm_shed(wake);
        r.shed_sent();
        r.shed_sent();
        r.shed_sent();
        let c = r.counts(Kind::Shed);
        assert_eq!(c.count(), 1, "one per entry, not one per 503");
        assert!(c.sum_ns >= 30_000_000, "timed from the wake-up: {c:?}");
        // Armed again by a new entry, then back to normal before any 503: nothing is recorded.
        r.arm_shed(Instant::now());
        r.disarm_shed();
        r.shed_sent();
        assert_eq!(r.counts(Kind::Shed).count(), 1);
        r.arm_shed(Instant::now());
        r.shed_sent();
        assert_eq!(r.counts(Kind::Shed).count(), 2);
    }

    #[test]
    fn concurrent_503s_record_once() {
        let r = std::sync::Arc::new(Reactions::new());
        r.arm_shed(Instant::now());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let r = r.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        r.shed_sent();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("a shedding thread");
        }
        assert_eq!(r.counts(Kind::Shed).count(), 1);
    }

    #[test]
    fn record_since_measures_from_the_wake_up() {
        let r = Reactions::new();
        r.record_since(Kind::Signal, Instant::now() - 3 * MS);
        let c = r.counts(Kind::Signal);
        assert_eq!(c.count(), 1);
        assert!(c.sum_ns >= 3_000_000 && c.buckets[..5].iter().all(|&n| n == 0), "at least 3 ms: {c:?}");
        // A wake-up in the future (clock granularity) counts as zero, not a panic.
        r.record_since(Kind::Signal, Instant::now() + MS);
        assert_eq!(r.counts(Kind::Signal).buckets[0], 1);
    }
}
