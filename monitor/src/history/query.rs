//! Downsampling the history to the pixel width: seconds (5 min, 1 h) or minutes (24 h, 7 d) folded into at
//! most `buckets` equal buckets, peaks kept for memory, counts turned into rates over the covered time. Past
//! [`MAX_SERIES`] processes in the range, the largest by peak RSS keep their own series and the rest are summed
//! into one, so the work and memory of a page do not grow with the size of the group.

use super::events::{KillEvent, RecycleEvent};
use super::ring::{Labels, Minute, Second};
use std::collections::VecDeque;
use std::sync::Arc;
use web::{KillMarker, Marker, ProcSeries, Range, RecycleMarker, Series};

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

/// Processes a range draws as series of their own; the others are summed into one series.
pub const MAX_SERIES: usize = 20;
/// The label of the summed series.
const OTHERS: u16 = u16::MAX;

/// One process's series, one value per bucket.
struct ProcAcc {
    rss: Vec<f64>,
    anon: Vec<f64>,
    requests: Vec<f64>,
    err: Vec<f64>,
    inflight: Vec<f64>,
    p50: Vec<f64>,
    p99: Vec<f64>,
}

/// One point's values for one process: (label, rss, requests, 5xx, inflight, p50 µs, p99 µs, anon).
type ProcPoint = (u16, u64, u64, u64, u32, u32, u32, u64);

impl ProcAcc {
    fn new(n: usize) -> ProcAcc {
        let gap = || vec![f64::NAN; n];
        ProcAcc { rss: gap(), anon: gap(), requests: gap(), err: gap(), inflight: gap(), p50: gap(), p99: gap() }
    }

    /// Adds a point's values to bucket `i`, its counts times `part` (the share of its time in that bucket).
    fn add(&mut self, i: usize, &(_, rss, req, err, inflight, p50, p99, anon): &ProcPoint, part: f64) {
        self.rss[i] = self.rss[i].max(rss as f64);
        self.anon[i] = self.anon[i].max(anon as f64);
        add(&mut self.requests[i], req as f64 * part);
        add(&mut self.err[i], err as f64 * part);
        self.inflight[i] = self.inflight[i].max(inflight as f64);
        self.p50[i] = self.p50[i].max(p50 as f64 / 1000.0);
        self.p99[i] = self.p99[i].max(p99 as f64 / 1000.0);
    }
}

/// The group's values of one point: (t, seconds covered, usage, limit, state, shed).
type GroupPoint = (u64, u64, u64, u64, u8, u64);

struct Acc {
    w: Window,
    usage: Vec<f64>,
    limit: Vec<f64>,
    state: Vec<u8>,
    shed: Vec<f64>,
    covered: Vec<u64>,
    /// Each process's series, indexed by label (a point touches its processes without a lookup).
    procs: Vec<Option<ProcAcc>>,
    /// The sum of the processes without a series of their own.
    others: Option<ProcAcc>,
    restarts: Vec<(u64, u16)>,
    /// Whether each label has a series of its own, when not all have one; the others go to [`OTHERS`].
    keep: Option<Vec<bool>>,
    /// How many processes [`OTHERS`] sums.
    folded: usize,
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
            procs: Vec::new(),
            others: None,
            restarts: Vec::new(),
            keep: None,
            folded: 0,
        }
    }

    fn bucket(&self, t: u64) -> Option<usize> {
        (t >= self.w.start).then(|| ((t - self.w.start) / self.w.step) as usize).filter(|&i| i < self.w.n)
    }

    /// Adds one point to the buckets its time covers (a minute over buckets of seconds fills each of them, its
    /// counts shared out by time): the group's values, and each process's, those without a series of their own
    /// summed into one (memory, requests, errors and in-flight added; latencies the worst). Returns its first
    /// bucket, `None` for a point outside the window.
    fn point(
        &mut self,
        (t, dur, usage, limit, state, shed): GroupPoint,
        procs: impl Iterator<Item = ProcPoint>,
    ) -> Option<usize> {
        let dur = dur.max(1);
        // Its seconds inside the window, and the buckets they fall in.
        let (from, to) = (t.max(self.w.start), (t + dur).min(self.w.start + self.w.n as u64 * self.w.step));
        if from >= to {
            return None;
        }
        let first = self.bucket(from)?;
        let last = self.bucket(to - 1).unwrap_or(first);
        let parts: Vec<(usize, u64)> = (first..=last)
            .map(|i| {
                let b0 = self.w.start + i as u64 * self.w.step;
                (i, (b0 + self.w.step).min(to) - b0.max(from))
            })
            .collect();
        let n = self.w.n;
        for &(i, secs) in &parts {
            self.usage[i] = self.usage[i].max(usage as f64);
            self.limit[i] = limit as f64;
            self.state[i] = self.state[i].max(state);
            add(&mut self.shed[i], shed as f64 * secs as f64 / dur as f64);
            self.covered[i] += secs;
        }
        let mut others: Option<ProcPoint> = None;
        for p in procs {
            let label = usize::from(p.0);
            if self.keep.as_ref().is_some_and(|keep| !keep.get(label).copied().unwrap_or(false)) {
                let o = others.get_or_insert((OTHERS, 0, 0, 0, 0, 0, 0, 0));
                o.1 += p.1;
                o.7 += p.7;
                o.2 += p.2;
                o.3 += p.3;
                o.4 = o.4.saturating_add(p.4);
                o.5 = o.5.max(p.5);
                o.6 = o.6.max(p.6);
                continue;
            }
            if self.procs.len() <= label {
                self.procs.resize_with(label + 1, || None);
            }
            let acc = self.procs[label].get_or_insert_with(|| ProcAcc::new(n));
            for &(i, secs) in &parts {
                acc.add(i, &p, secs as f64 / dur as f64);
            }
        }
        if let Some(o) = others {
            let acc = self.others.get_or_insert_with(|| ProcAcc::new(n));
            for &(i, secs) in &parts {
                acc.add(i, &o, secs as f64 / dur as f64);
            }
        }
        Some(first)
    }

    fn second(&mut self, s: &Second) {
        let procs = s
            .procs
            .iter()
            .map(|p| (p.label, p.rss, p.requests as u64, p.err5xx as u64, p.inflight, p.p50_us, p.p99_us, p.anon));
        if self.point((s.t, 1, s.usage, s.limit, s.state, s.shed as u64), procs).is_some() {
            self.restarts.extend(s.restarted.iter().map(|&l| (s.t, l)));
        }
    }

    fn minute(&mut self, m: &Minute) {
        let procs = m.procs.iter().map(|p| {
            let (req, err) = (u64::from(p.requests), u64::from(p.err5xx));
            (p.label, p.rss_max, req, err, p.inflight_max, p.p50_us, p.p99_us, p.anon_max)
        });
        if self.point((m.t, 60, m.usage_max, m.limit, m.state_max, m.shed), procs).is_some() {
            self.restarts.extend(m.procs.iter().filter(|p| p.restarts > 0).map(|p| (m.t, p.label)));
        }
    }

    fn finish(self, labels: &Labels) -> Series {
        let rate = |v: Vec<f64>, covered: &[u64]| -> Vec<f64> {
            v.into_iter().zip(covered).map(|(x, &c)| if c == 0 { f64::NAN } else { x / c as f64 }).collect()
        };
        let others = format!("{} others", self.folded);
        let name = |l: u16| if l == OTHERS { (others.as_str(), "others") } else { labels.get(l) };
        let mut procs: Vec<(u16, ProcAcc)> = self
            .procs
            .into_iter()
            .enumerate()
            .filter_map(|(l, p)| Some((l as u16, p?)))
            .chain(self.others.map(|p| (OTHERS, p)))
            .collect();
        let rank = |role: &str| match role {
            "master" => 0,
            "worker" => 1,
            "others" => 3,
            _ => 2,
        };
        procs.sort_by(|a, b| {
            let (na, ra) = name(a.0);
            let (nb, rb) = name(b.0);
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
            kills: Vec::new(),
            recycles: Vec::new(),
            members: Vec::new(),
            procs: procs
                .into_iter()
                .map(|(l, p)| {
                    let (name, role) = name(l);
                    ProcSeries {
                        name: name.to_string(),
                        role: role.to_string(),
                        rss_bytes: p.rss,
                        anon_bytes: p.anon,
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

/// One point of the history: a second or a minute.
enum Point<'a> {
    Second(&'a Second),
    Minute(&'a Minute),
}

/// Calls `f` with each point of the window from `from`: seconds for the short ranges (minutes before the oldest
/// second), minutes for the long ones (seconds after the newest minute).
fn points<'a>(
    seconds: &'a VecDeque<Arc<Second>>,
    minutes: &'a VecDeque<Arc<Minute>>,
    fine: bool,
    from: u64,
    mut f: impl FnMut(Point<'a>),
) {
    if fine {
        let first = seconds.front().map(|s| s.t).unwrap_or(u64::MAX);
        for m in minutes.iter().rev().take_while(|m| m.t + 60 > from).filter(|m| m.t + 60 <= first) {
            f(Point::Minute(m.as_ref()));
        }
        for s in seconds.iter().rev().take_while(|s| s.t >= from) {
            f(Point::Second(s.as_ref()));
        }
    } else {
        let after = minutes.back().map(|m| m.t + 60).unwrap_or(0);
        for m in minutes.iter().rev().take_while(|m| m.t + 60 > from) {
            f(Point::Minute(m.as_ref()));
        }
        for s in seconds.iter().rev().take_while(|s| s.t >= after) {
            f(Point::Second(s.as_ref()));
        }
    }
}

/// The series of `range` ending at `now_ms`, at most [`MAX_SERIES`] processes and one sum of the others.
pub fn series(
    seconds: &VecDeque<Arc<Second>>,
    minutes: &VecDeque<Arc<Minute>>,
    labels: &Labels,
    now_ms: u64,
    range: Range,
    buckets: usize,
) -> Series {
    let now_s = now_ms / 1000;
    let fine = range.seconds() <= 3600;
    let mut acc = Acc::new(window(now_s, range, buckets, if fine { 1 } else { 60 }));
    let from = acc.w.start;
    // Each label's peak RSS over the window, indexed by label (None: not in the window).
    let mut peak: Vec<Option<u64>> = Vec::new();
    let mut seen = |label: u16, rss: u64| {
        let l = usize::from(label);
        if peak.len() <= l {
            peak.resize(l + 1, None);
        }
        peak[l] = Some(peak[l].map_or(rss, |p| p.max(rss)));
    };
    points(seconds, minutes, fine, from, |p| match p {
        Point::Second(s) => s.procs.iter().for_each(|x| seen(x.label, x.rss)),
        Point::Minute(m) => m.procs.iter().for_each(|x| seen(x.label, x.rss_max)),
    });
    let mut by_size: Vec<(u16, u64)> = peak.iter().enumerate().filter_map(|(l, p)| Some((l as u16, (*p)?))).collect();
    if by_size.len() > MAX_SERIES {
        by_size.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        acc.folded = by_size.len() - MAX_SERIES;
        let mut keep = vec![false; peak.len()];
        for &(l, _) in &by_size[..MAX_SERIES] {
            keep[usize::from(l)] = true;
        }
        acc.keep = Some(keep);
    }
    points(seconds, minutes, fine, from, |p| match p {
        Point::Second(s) => acc.second(s),
        Point::Minute(m) => acc.minute(m),
    });
    acc.finish(labels)
}

/// The time the series' buckets cover, `[start, start + len * step)`, in ms.
fn covered(s: &Series) -> std::ops::Range<u64> {
    s.start_ms..s.start_ms.saturating_add(s.len() as u64 * s.step_ms)
}

/// The guard's kills (oldest first) in the series' buckets, as the page marks them.
pub fn kills(kills: &VecDeque<Arc<KillEvent>>, s: &Series) -> Vec<KillMarker> {
    let within = covered(s);
    kills
        .iter()
        .filter(|k| within.contains(&k.at_unix_ms))
        .map(|k| KillMarker {
            t_ms: k.at_unix_ms,
            name: k.process.clone(),
            pid: k.pid,
            enforced: k.enforced,
            error: k.error.clone(),
        })
        .collect()
}

/// The guard's recycles (oldest first) in the series' buckets, as the page marks them.
pub fn recycles(recycles: &VecDeque<Arc<RecycleEvent>>, s: &Series) -> Vec<RecycleMarker> {
    let within = covered(s);
    recycles
        .iter()
        .filter(|r| within.contains(&r.at_unix_ms))
        .map(|r| RecycleMarker {
            t_ms: r.at_unix_ms,
            name: r.process.clone(),
            pid: r.pid,
            reason: r.reason.clone(),
            signal: r.signal.clone(),
            enforced: r.enforced,
            error: r.error.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::ring::{ProcMinute, ProcSecond};

    #[test]
    fn kills_are_marked_within_the_buckets_only() {
        let kill = |at_unix_ms: u64, pid: u32| {
            Arc::new(KillEvent {
                at_unix_ms,
                pid,
                process: "node".into(),
                role: "worker".into(),
                why: "over_kill_at".into(),
                reason: "the group reached kill_at".into(),
                rss_bytes: 1,
                anon_bytes: 1,
                ratio: 0.98,
                round: 1,
                enforced: pid != 2,
                error: None,
            })
        };
        let s = Series { start_ms: 100_000, step_ms: 1000, usage_bytes: vec![f64::NAN; 300], ..Series::default() };
        let held: VecDeque<_> =
            [kill(99_999, 1), kill(100_000, 2), kill(399_999, 3), kill(400_000, 4)].into_iter().collect();
        let marked = kills(&held, &s);
        assert_eq!(
            marked.iter().map(|k| (k.t_ms, k.pid, k.enforced)).collect::<Vec<_>>(),
            [(100_000, 2, false), (399_999, 3, true)]
        );
        assert!(kills(&held, &Series::default()).is_empty(), "no buckets, no kills");
    }

    #[test]
    fn recycles_are_marked_within_the_buckets_only_with_their_reason() {
        let recycle = |at_unix_ms: u64, pid: u32| {
            Arc::new(RecycleEvent {
                at_unix_ms,
                pid,
                process: "api".into(),
                role: "worker".into(),
                reason: format!("reason {pid}"),
                anon_bytes: 1,
                ratio: 0.9,
                signal: (pid != 2).then(|| "TERM".to_string()),
                drained_ms: 0,
                enforced: pid != 2,
                error: None,
            })
        };
        let s = Series { start_ms: 100_000, step_ms: 1000, usage_bytes: vec![f64::NAN; 300], ..Series::default() };
        let held: VecDeque<_> =
            [recycle(99_999, 1), recycle(100_000, 2), recycle(399_999, 3), recycle(400_000, 4)].into_iter().collect();
        let marked = recycles(&held, &s);
        let got: Vec<_> =
            marked.iter().map(|r| (r.t_ms, r.pid, r.enforced, r.signal.as_deref(), r.reason.as_str())).collect();
        assert_eq!(got, [(100_000, 2, false, None, "reason 2"), (399_999, 3, true, Some("TERM"), "reason 3")]);
        assert!(recycles(&held, &Series::default()).is_empty(), "no buckets, no recycles");
    }

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
        let secs: VecDeque<Arc<Second>> = (0..3600u64)
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
            .map(Arc::new)
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
        let mins: VecDeque<Arc<Minute>> = (0..1440u64)
            .filter(|i| !(600..700).contains(i))
            .map(|i| Minute {
                t: i * 60,
                usage_max: 7,
                limit: 9,
                procs: vec![ProcMinute { label: a, rss_max: 5, requests: 120, ..ProcMinute::default() }],
                ..Minute::default()
            })
            .map(Arc::new)
            .collect();
        let s = series(&VecDeque::new(), &mins, &labels, 86_399_000, Range::Day, 720);
        assert_eq!(s.len(), 720);
        assert!(s.procs[0].requests_per_s.iter().filter(|v| v.is_finite()).all(|&v| v == 2.0));
        assert!(s.usage_bytes[320].is_nan(), "the hole (minutes 600-699) is a gap");
        assert_eq!(s.usage_bytes[100], 7.0);
    }

    /// Minutes (from the stats database, after a restart) under a window of seconds fill every bucket they cover,
    /// their counts shared out: the chart is a line, not a dot a minute.
    #[test]
    fn minutes_fill_every_second_they_cover_in_the_short_ranges() {
        let mut labels = Labels::default();
        let a = labels.intern("tx1", "worker");
        let now_s = 10 * 60;
        let mins: VecDeque<Arc<Minute>> = (0..10u64)
            .map(|i| Minute {
                t: i * 60,
                usage_max: 7,
                limit: 9,
                procs: vec![ProcMinute { label: a, anon_max: 6, requests: 120, ..ProcMinute::default() }],
                ..Minute::default()
            })
            .map(Arc::new)
            .collect();
        let s = series(&VecDeque::new(), &mins, &labels, now_s * 1000, Range::Minutes(10), 720);
        let filled = s.usage_bytes.iter().filter(|v| v.is_finite()).count();
        assert!(filled as f64 >= 0.95 * s.len() as f64, "{filled} of {} buckets", s.len());
        assert!(s.procs[0].anon_bytes.iter().filter(|v| v.is_finite()).all(|&v| v == 6.0));
        let rates: Vec<f64> = s.procs[0].requests_per_s.iter().copied().filter(|v| v.is_finite()).collect();
        assert!(rates.iter().all(|&v| (v - 2.0).abs() < 1e-9), "120 a minute is 2/s in every bucket: {rates:?}");
    }

    #[test]
    fn past_max_series_the_smaller_processes_are_summed_into_one() {
        let mut labels = Labels::default();
        let ids: Vec<u16> = (0..500).map(|i| labels.intern(&format!("p{i}"), "process")).collect();
        let secs: VecDeque<Arc<Second>> = (0..60u64)
            .map(|t| Second {
                t: 1000 + t,
                usage: 1,
                limit: 2,
                procs: ids
                    .iter()
                    .map(|&l| ProcSecond {
                        label: l,
                        rss: 1000 + u64::from(l),
                        requests: 1,
                        inflight: 1,
                        p99_us: u32::from(l),
                        ..ProcSecond::default()
                    })
                    .collect(),
                ..Second::default()
            })
            .map(Arc::new)
            .collect();
        let s = series(&secs, &VecDeque::new(), &labels, 1_060_000, Range::FiveMinutes, 300);
        assert_eq!(s.procs.len(), MAX_SERIES + 1);
        assert_eq!(s.procs[0].name, "p480", "the largest keep their own series");
        let others = s.procs.last().expect("the sum");
        assert_eq!(others.name, "480 others");
        let last = s.len() - 2;
        assert_eq!(others.rss_bytes[last], (0..480u64).map(|l| 1000 + l).sum::<u64>() as f64);
        assert_eq!(others.requests_per_s[last], 480.0);
        assert_eq!(others.inflight[last], 480.0);
        assert_eq!(others.latency_p99_ms[last], 0.479, "the worst latency of those summed");
    }
}
