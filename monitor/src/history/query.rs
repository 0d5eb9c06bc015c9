//! Downsampling the history to the pixel width: seconds (5 min, 1 h) or minutes (24 h, 7 d) folded into at
//! most `buckets` equal buckets, peaks kept for memory, counts turned into rates over the covered time.

use super::ring::{Labels, Minute, Second};
use std::collections::{HashMap, VecDeque};
use web::{Marker, ProcSeries, Range, Series};

/// The buckets of a range: `n` buckets of `step` seconds from `start` (Unix seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start: u64,
    pub step: u64,
    pub n: usize,
}

/// The window of `range` ending at `now_s`, at most `buckets` buckets of a multiple of `resolution` seconds,
/// aligned to the step so buckets stay put between refreshes.
pub fn window(now_s: u64, range: Range, buckets: usize, resolution: u64) -> Window {
    let span = range.seconds();
    let resolution = resolution.max(1);
    let step = span.div_ceil(buckets.max(1) as u64).max(resolution).div_ceil(resolution) * resolution;
    let n = span.div_ceil(step) as usize;
    let end = (now_s / step + 1) * step;
    Window { start: end.saturating_sub(n as u64 * step), step, n }
}

#[derive(Default)]
struct ProcAcc {
    rss: Vec<f64>,
    requests: Vec<f64>,
    err: Vec<f64>,
    inflight: Vec<f64>,
    p50: Vec<f64>,
    p99: Vec<f64>,
}

/// One point's values for one process: (label, rss, requests, 5xx, inflight, p50 µs, p99 µs).
type ProcPoint = (u16, u64, u64, u64, u32, u32, u32);

struct Acc {
    w: Window,
    usage: Vec<f64>,
    limit: Vec<f64>,
    state: Vec<u8>,
    shed: Vec<f64>,
    covered: Vec<u64>,
    procs: HashMap<u16, ProcAcc>,
    restarts: Vec<(u64, u16)>,
}

fn add(v: &mut f64, x: f64) {
    *v = if v.is_nan() { x } else { *v + x };
}

impl Acc {
    fn new(w: Window) -> Acc {
        Acc {
            w,
            usage: vec![f64::NAN; w.n],
            limit: vec![f64::NAN; w.n],
            state: vec![0; w.n],
            shed: vec![f64::NAN; w.n],
            covered: vec![0; w.n],
            procs: HashMap::new(),
            restarts: Vec::new(),
        }
    }

    fn bucket(&self, t: u64) -> Option<usize> {
        (t >= self.w.start).then(|| ((t - self.w.start) / self.w.step) as usize).filter(|&i| i < self.w.n)
    }

    #[allow(clippy::too_many_arguments)]
    fn point(&mut self, t: u64, dur: u64, usage: u64, limit: u64, state: u8, shed: u64, procs: &[ProcPoint]) {
        let Some(i) = self.bucket(t) else { return };
        let n = self.w.n;
        self.usage[i] = self.usage[i].max(usage as f64);
        self.limit[i] = limit as f64;
        self.state[i] = self.state[i].max(state);
        add(&mut self.shed[i], shed as f64);
        self.covered[i] += dur;
        for &(label, rss, req, err, inflight, p50, p99) in procs {
            let p = self.procs.entry(label).or_insert_with(|| ProcAcc {
                rss: vec![f64::NAN; n],
                requests: vec![f64::NAN; n],
                err: vec![f64::NAN; n],
                inflight: vec![f64::NAN; n],
                p50: vec![f64::NAN; n],
                p99: vec![f64::NAN; n],
            });
            p.rss[i] = p.rss[i].max(rss as f64);
            add(&mut p.requests[i], req as f64);
            add(&mut p.err[i], err as f64);
            p.inflight[i] = p.inflight[i].max(inflight as f64);
            p.p50[i] = p.p50[i].max(p50 as f64 / 1000.0);
            p.p99[i] = p.p99[i].max(p99 as f64 / 1000.0);
        }
    }

    fn second(&mut self, s: &Second) {
        let procs: Vec<ProcPoint> = s
            .procs
            .iter()
            .map(|p| (p.label, p.rss, p.requests as u64, p.err5xx as u64, p.inflight, p.p50_us, p.p99_us))
            .collect();
        self.point(s.t, 1, s.usage, s.limit, s.state, s.shed as u64, &procs);
        if self.bucket(s.t).is_some() {
            self.restarts.extend(s.restarted.iter().map(|&l| (s.t, l)));
        }
    }

    fn minute(&mut self, m: &Minute) {
        let procs: Vec<ProcPoint> = m
            .procs
            .iter()
            .map(|p| (p.label, p.rss_max, p.requests, p.err5xx, p.inflight_max, p.p50_us, p.p99_us))
            .collect();
        self.point(m.t, 60, m.usage_max, m.limit, m.state_max, m.shed, &procs);
        if self.bucket(m.t).is_some() {
            self.restarts.extend(m.procs.iter().filter(|p| p.restarts > 0).map(|p| (m.t, p.label)));
        }
    }

    fn finish(self, labels: &Labels) -> Series {
        let rate = |v: Vec<f64>, covered: &[u64]| -> Vec<f64> {
            v.into_iter().zip(covered).map(|(x, &c)| if c == 0 { f64::NAN } else { x / c as f64 }).collect()
        };
        let mut procs: Vec<(u16, ProcAcc)> = self.procs.into_iter().collect();
        let rank = |role: &str| match role {
            "master" => 0,
            "worker" => 1,
            _ => 2,
        };
        procs.sort_by(|a, b| {
            let (na, ra) = labels.get(a.0);
            let (nb, rb) = labels.get(b.0);
            (rank(ra), na).cmp(&(rank(rb), nb))
        });
        let covered = self.covered;
        Series {
            start_ms: self.w.start * 1000,
            step_ms: self.w.step * 1000,
            usage_bytes: self.usage,
            limit_bytes: self.limit,
            state: self.state,
            shed_per_s: rate(self.shed, &covered),
            restarts: self
                .restarts
                .iter()
                .map(|&(t, l)| Marker { t_ms: t * 1000, name: labels.get(l).0.to_string() })
                .collect(),
            procs: procs
                .into_iter()
                .map(|(l, p)| {
                    let (name, role) = labels.get(l);
                    ProcSeries {
                        name: name.to_string(),
                        role: role.to_string(),
                        rss_bytes: p.rss,
                        requests_per_s: rate(p.requests, &covered),
                        inflight: p.inflight,
                        latency_p50_ms: p.p50,
                        latency_p99_ms: p.p99,
                        errors_5xx_per_s: rate(p.err, &covered),
                    }
                })
                .collect(),
        }
    }
}

/// The series of `range` ending at `now_ms`: seconds for the short ranges (minutes before the oldest second),
/// minutes for the long ones (seconds after the newest minute).
pub fn series(
    seconds: &VecDeque<Second>,
    minutes: &VecDeque<Minute>,
    labels: &Labels,
    now_ms: u64,
    range: Range,
    buckets: usize,
) -> Series {
    let now_s = now_ms / 1000;
    let fine = matches!(range, Range::FiveMinutes | Range::Hour);
    let mut acc = Acc::new(window(now_s, range, buckets, if fine { 1 } else { 60 }));
    let from = acc.w.start;
    if fine {
        let first = seconds.front().map(|s| s.t).unwrap_or(u64::MAX);
        for m in minutes.iter().rev().take_while(|m| m.t + 60 > from).filter(|m| m.t + 60 <= first) {
            acc.minute(m);
        }
        for s in seconds.iter().rev().take_while(|s| s.t >= from) {
            acc.second(s);
        }
    } else {
        let after = minutes.back().map(|m| m.t + 60).unwrap_or(0);
        for m in minutes.iter().rev().take_while(|m| m.t + 60 > from) {
            acc.minute(m);
        }
        for s in seconds.iter().rev().take_while(|s| s.t >= after) {
            acc.second(s);
        }
    }
    acc.finish(labels)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::ring::{ProcMinute, ProcSecond};

    #[test]
    fn windows_fit_the_pixel_width() {
        assert_eq!(window(1000, Range::FiveMinutes, 770, 1), Window { start: 701, step: 1, n: 300 });
        let w = window(7200, Range::Hour, 770, 1);
        assert_eq!((w.step, w.n), (5, 720));
        let w = window(86_400 * 10, Range::Day, 770, 60);
        assert_eq!((w.step, w.n), (120, 720));
        let w = window(86_400 * 10, Range::Week, 770, 60);
        assert!(w.n <= 770 && w.step.is_multiple_of(60), "{w:?}");
        assert!(w.start + w.n as u64 * w.step > 86_400 * 10);
    }

    #[test]
    fn seconds_fold_into_buckets_with_rates_and_peaks() {
        let mut labels = Labels::default();
        let a = labels.intern("tx1", "worker");
        let m = labels.intern("m0", "master");
        let secs: VecDeque<Second> = (0..3600u64)
            .map(|i| Second {
                t: 10_000 + i,
                usage: i,
                limit: 5000,
                state: u8::from(i == 3599),
                procs: vec![
                    ProcSecond { label: a, rss: i, requests: 10, ..ProcSecond::default() },
                    ProcSecond { label: m, rss: 1, requests: 1, ..ProcSecond::default() },
                ],
                restarted: if i == 100 { vec![a] } else { vec![] },
                ..Second::default()
            })
            .collect();
        let s = series(&secs, &VecDeque::new(), &labels, 13_599_500, Range::Hour, 720);
        assert_eq!(s.len(), 720);
        assert_eq!(s.procs.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), vec!["m0", "tx1"]);
        let last = s.len() - 1;
        assert_eq!(s.procs[1].requests_per_s[last], 10.0);
        assert_eq!(s.usage_bytes[last], 3599.0);
        assert_eq!(s.state[last], 1);
        assert_eq!(s.restarts, vec![Marker { t_ms: 10_100_000, name: "tx1".into() }]);
    }

    #[test]
    fn minutes_fill_the_long_ranges_and_gaps_stay_gaps() {
        let mut labels = Labels::default();
        let a = labels.intern("tx1", "worker");
        let mins: VecDeque<Minute> = (0..1440u64)
            .filter(|i| !(600..700).contains(i))
            .map(|i| Minute {
                t: i * 60,
                usage_max: 7,
                limit: 9,
                procs: vec![ProcMinute { label: a, rss_max: 5, requests: 120, ..ProcMinute::default() }],
                ..Minute::default()
            })
            .collect();
        let s = series(&VecDeque::new(), &mins, &labels, 86_399_000, Range::Day, 720);
        assert_eq!(s.len(), 720);
        assert!(s.procs[0].requests_per_s.iter().filter(|v| v.is_finite()).all(|&v| v == 2.0));
        assert!(s.usage_bytes[320].is_nan(), "the hole (minutes 600-699) is a gap");
        assert_eq!(s.usage_bytes[100], 7.0);
    }
}
