//! Adaptive pacing, as earlyoom paces: the next sample comes sooner as the headroom to the next line shrinks and
//! the growth rises, and at `interval_ms` when the group is far from its lines. A pure function of the samples it
//! is fed; no I/O.
//!
//! The interval is the time the group needs to reach the next line (refuse, abort, the limit) at the fastest
//! growth it may show: twice the growth seen lately (its peak, halving every second), or, while no kernel threshold
//! follows the group's usage (cgroup v2, or thresholds off), at least `fill_rate_mib_s`. Kept between
//! `min_interval_ms` and `interval_ms`.

use std::time::Duration;

/// How pacing is configured (`[policy]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pacing {
    /// Off: every `max`.
    pub enabled: bool,
    /// `interval_ms`: the interval far from the lines.
    pub max: Duration,
    /// `min_interval_ms`: the shortest interval.
    pub min: Duration,
    /// The growth assumed while nothing in the kernel follows the usage, in bytes per second (0: none assumed;
    /// see [`Pacer::set_assumed`]).
    pub assumed_rate: f64,
}

/// The observed growth's peak halves over this.
const HALF_LIFE_S: f64 = 1.0;

/// The pacer's memory between samples.
#[derive(Debug, Clone)]
pub(crate) struct Pacer {
    pacing: Pacing,
    /// The previous sample: (monotonic ms, anonymous bytes).
    last: Option<(u64, u64)>,
    /// The peak growth seen lately, bytes per second.
    rate: f64,
    /// Whether `pacing.assumed_rate` applies now.
    assume: bool,
}

impl Pacer {
    pub fn new(pacing: Pacing) -> Pacer {
        Pacer { pacing, last: None, rate: 0.0, assume: true }
    }

    /// A reloaded `[policy]`: the interval far from the lines, the shortest one and the growth assumed; whether
    /// pacing is on stays as started, and so does the growth seen so far.
    pub(crate) fn set_bounds(&mut self, max: Duration, min: Duration, assumed_rate: f64) {
        self.pacing = Pacing { max, min, assumed_rate, ..self.pacing };
    }

    /// The shortest interval it chooses.
    pub fn min(&self) -> Duration {
        self.pacing.min
    }

    /// Whether the configured worst growth is assumed (while no kernel threshold follows the usage).
    pub(crate) fn set_assumed(&mut self, assumed: bool) {
        self.assume = assumed;
    }

    /// The growth the pacer reckons with now, bytes per second.
    #[cfg(test)]
    fn rate(&self) -> f64 {
        self.rate
    }

    /// The interval until the next sample, given this sample (`mono_ms`, `usage` and `limit` in bytes) and the
    /// lines that matter (fractions of the limit, ascending; the limit itself is always one).
    pub fn next(&mut self, mono_ms: u64, usage: u64, limit: u64, lines: &[f64]) -> Duration {
        if let Some((t0, u0)) = self.last {
            let dt = mono_ms.saturating_sub(t0) as f64 / 1000.0;
            if dt > 0.0 {
                let seen = usage.saturating_sub(u0) as f64 / dt;
                self.rate = seen.max(self.rate * 0.5f64.powf(dt / HALF_LIFE_S));
            }
        }
        self.last = Some((mono_ms, usage));
        if !self.pacing.enabled || limit == 0 {
            return self.pacing.max;
        }
        let next_line =
            lines.iter().chain(std::iter::once(&1.0)).map(|f| (limit as f64 * f) as u64).find(|&line| line > usage);
        let Some(line) = next_line else { return self.pacing.min };
        let headroom = (line - usage) as f64;
        let assumed = if self.assume { self.pacing.assumed_rate } else { 0.0 };
        let fastest = (2.0 * self.rate).max(assumed);
        if fastest <= 0.0 {
            return self.pacing.max;
        }
        Duration::from_secs_f64(headroom / fastest).clamp(self.pacing.min, self.pacing.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const LIMIT: u64 = 512 * MIB;
    const LINES: [f64; 2] = [0.85, 0.92];

    fn pacer(assumed_mib_s: u64) -> Pacer {
        Pacer::new(Pacing {
            enabled: true,
            max: Duration::from_millis(100),
            min: Duration::from_millis(5),
            assumed_rate: (assumed_mib_s * MIB) as f64,
        })
    }

    #[test]
    fn reloaded_bounds_apply_from_the_next_sample() {
        let mut p = pacer(0);
        assert_eq!(p.next(0, 300 * MIB, LIMIT, &LINES), Duration::from_millis(100));
        p.set_bounds(Duration::from_millis(250), Duration::from_millis(20), (2048 * MIB) as f64);
        assert_eq!(p.min(), Duration::from_millis(20));
        // Far from the lines at the assumed 2 GiB/s: the headroom to 85% (135 MiB) takes 66 ms.
        let next = p.next(100, 300 * MIB, LIMIT, &LINES);
        assert!(next > Duration::from_millis(20) && next < Duration::from_millis(250), "{next:?}");
        p.set_assumed(false);
        assert_eq!(p.next(200, 300 * MIB, LIMIT, &LINES), Duration::from_millis(250), "the new interval");
    }

    #[test]
    fn a_quiet_group_is_sampled_at_the_interval() {
        let mut p = pacer(0);
        for i in 0..20 {
            assert_eq!(p.next(i * 100, 300 * MIB, LIMIT, &LINES), Duration::from_millis(100));
        }
    }

    #[test]
    fn a_grower_is_sampled_faster_as_it_nears_the_line() {
        let mut p = pacer(0);
        // 1000 MiB/s, sampled every 20 ms: the interval shrinks to the floor as the refuse line nears.
        let mut seen = Vec::new();
        p.next(0, 100 * MIB, LIMIT, &LINES);
        for i in 1..=16 {
            seen.push(p.next(i * 20, (100 + 20 * i) * MIB, LIMIT, &LINES));
        }
        // 420 MiB is 15.2 MiB short of the refuse line: 7.6 ms at twice 1000 MiB/s.
        assert!(seen.windows(2).all(|w| w[1] <= w[0]), "{seen:?}");
        assert!(seen[0] == Duration::from_millis(100), "{seen:?}");
        assert!((seen[15].as_secs_f64() - 0.0076).abs() < 1e-4, "{seen:?}");
        // Past the refuse line the abort line is next, 36 MiB further.
        let d = p.next(340, 440 * MIB, LIMIT, &LINES);
        assert!(d > seen[15], "{d:?}");
    }

    #[test]
    fn headroom_over_twice_the_growth() {
        let mut p = pacer(0);
        p.next(0, 100 * MIB, LIMIT, &LINES);
        // 200 MiB/s seen; the refuse line (435.2 MiB) is 325.2 MiB away at 130 MiB: 400 MiB/s assumed.
        let d = p.next(1000, 300 * MIB, LIMIT, &LINES);
        let headroom = LIMIT as f64 * 0.85 - 300.0 * MIB as f64;
        let want = headroom / (400.0 * MIB as f64);
        assert!((d.as_secs_f64() - want.min(0.1)).abs() < 1e-9, "{d:?}");
    }

    #[test]
    fn without_a_kernel_threshold_the_worst_growth_is_assumed() {
        let mut p = pacer(2048);
        // 80% of 512 MiB: 25.6 MiB to the refuse line at 2 GiB/s is 12.5 ms.
        let d = p.next(0, (LIMIT as f64 * 0.80) as u64, LIMIT, &LINES);
        assert!((d.as_secs_f64() - 0.0125).abs() < 1e-6, "{d:?}");
        // Far from the lines it is the interval.
        assert_eq!(p.next(100, 50 * MIB, LIMIT, &LINES), Duration::from_millis(100));
    }

    #[test]
    fn past_every_line_and_the_limit_the_floor() {
        let mut p = pacer(0);
        assert_eq!(p.next(0, LIMIT, LIMIT, &LINES), Duration::from_millis(5));
        assert_eq!(p.next(10, LIMIT + MIB, LIMIT, &LINES), Duration::from_millis(5));
    }

    #[test]
    fn the_peak_growth_fades() {
        let mut p = pacer(0);
        p.next(0, 100 * MIB, LIMIT, &LINES);
        p.next(100, 200 * MIB, LIMIT, &LINES); // 1000 MiB/s
        let peak = p.rate();
        p.next(1100, 200 * MIB, LIMIT, &LINES); // a second later, no growth
        assert!((p.rate() - peak / 2.0).abs() < 1.0, "{} vs {}", p.rate(), peak);
    }

    #[test]
    fn off_is_the_interval() {
        let mut p = Pacer::new(Pacing {
            enabled: false,
            max: Duration::from_millis(100),
            min: Duration::from_millis(5),
            assumed_rate: 1e12,
        });
        assert_eq!(p.next(0, LIMIT - 1, LIMIT, &LINES), Duration::from_millis(100));
    }

    #[test]
    fn no_limit_never_divides_by_zero() {
        let mut p = pacer(2048);
        assert_eq!(p.next(0, 0, 0, &LINES), Duration::from_millis(100));
    }
}
