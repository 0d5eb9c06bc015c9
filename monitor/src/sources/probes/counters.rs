//! Turns the kernel's per-CPU `Counters` into a process's `Traffic` (pure: summing and percentiles).

use crate::decision::snapshot::Traffic;
use monitor_common::stats::{Counters, HIST_BUCKETS};

/// Sums one tgid's per-CPU counters.
pub fn sum(per_cpu: &[Counters]) -> Counters {
    let mut t = Counters::ZERO;
    for c in per_cpu {
        add(&mut t, c);
    }
    t
}

/// Adds `c` into `t`.
pub fn add(t: &mut Counters, c: &Counters) {
    t.accepts += c.accepts;
    t.requests += c.requests;
    for (a, b) in t.responses_by_class.iter_mut().zip(c.responses_by_class) {
        *a += b;
    }
    t.responses += c.responses;
    t.unanswered += c.unanswered;
    t.bytes_in += c.bytes_in;
    t.bytes_out += c.bytes_out;
    for (a, b) in t.latency_hist_us.iter_mut().zip(c.latency_hist_us) {
        *a += b;
    }
}

/// The `Traffic` of summed counters. In-flight = requests - final responses - requests closed unanswered.
pub fn traffic(c: &Counters) -> Traffic {
    Traffic {
        accepts_total: c.accepts,
        requests_total: c.requests,
        responses_by_class: c.responses_by_class,
        responses_total: c.responses,
        inflight: c.requests.saturating_sub(c.responses).saturating_sub(c.unanswered),
        bytes_in: c.bytes_in,
        bytes_out: c.bytes_out,
        latency_p50_us: percentile(&c.latency_hist_us, 0.50),
        latency_p99_us: percentile(&c.latency_hist_us, 0.99),
        latency_hist_us: c.latency_hist_us.to_vec(),
    }
}

/// The `q` quantile (0..=1) of a log2 µs histogram, interpolated linearly inside its bucket
/// ([0, 2) for bucket 0, [2^i, 2^(i+1)) after); `None` when the histogram is empty.
pub fn percentile(hist: &[u64; HIST_BUCKETS], q: f64) -> Option<u64> {
    let total: u64 = hist.iter().sum();
    if total == 0 {
        return None;
    }
    // The rank of the wanted observation, 1-based.
    let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
    let mut seen = 0u64;
    for (i, &n) in hist.iter().enumerate() {
        if n == 0 {
            continue;
        }
        if seen + n >= rank {
            let lo = if i == 0 { 0.0 } else { (1u64 << i) as f64 };
            let hi = (1u64 << (i + 1)) as f64;
            let frac = (rank - seen) as f64 / n as f64;
            return Some((lo + (hi - lo) * frac).round() as u64);
        }
        seen += n;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(pairs: &[(usize, u64)]) -> [u64; HIST_BUCKETS] {
        let mut h = [0; HIST_BUCKETS];
        for &(i, n) in pairs {
            h[i] = n;
        }
        h
    }

    #[test]
    fn percentiles() {
        assert_eq!(percentile(&hist(&[]), 0.5), None);
        // One observation in [512, 1024): both quantiles at the bucket's top.
        assert_eq!(percentile(&hist(&[(9, 1)]), 0.5), Some(1024));
        // 100 in [64,128), so p50 is half-way.
        assert_eq!(percentile(&hist(&[(6, 100)]), 0.5), Some(96));
        // 99 fast, 1 slow: p50 fast, p99 still fast, p100 slow.
        let h = hist(&[(3, 99), (20, 1)]);
        assert!(percentile(&h, 0.5).is_some_and(|v| (8..=16).contains(&v)));
        assert_eq!(percentile(&h, 0.99), Some(16));
        assert_eq!(percentile(&h, 1.0), Some(1 << 21));
        assert_eq!(percentile(&hist(&[(0, 4)]), 0.5), Some(1));
    }

    #[test]
    fn sums_cpus_and_inflight() {
        let mut a = Counters::ZERO;
        a.accepts = 2;
        a.requests = 5;
        a.responses = 3;
        a.responses_by_class = [1, 2, 0, 1, 0];
        a.latency_hist_us[4] = 3;
        let mut b = Counters::ZERO;
        b.requests = 2;
        b.responses = 2;
        b.unanswered = 1;
        b.responses_by_class = [0, 1, 0, 0, 1];
        b.bytes_in = 10;
        b.bytes_out = 20;
        b.latency_hist_us[4] = 1;
        let t = traffic(&sum(&[a, b]));
        assert_eq!(t.accepts_total, 2);
        assert_eq!(t.requests_total, 7);
        assert_eq!(t.responses_total, 5);
        assert_eq!(t.responses_by_class, [1, 3, 0, 1, 1]);
        assert_eq!(t.inflight, 1);
        assert_eq!((t.bytes_in, t.bytes_out), (10, 20));
        assert_eq!(t.latency_hist_us[4], 4);
        assert_eq!(t.latency_hist_us.len(), HIST_BUCKETS);
        // More answered than asked (attached mid-request) never underflows.
        let mut c = Counters::ZERO;
        c.responses = 1;
        assert_eq!(traffic(&c).inflight, 0);
    }
}
