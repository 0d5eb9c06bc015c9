//! The home page's charts, drawn with plotters' SVG backend from a [`Dashboard`]. Each chart is a plot on the
//! left and a legend on the right naming every series (one per process), so the SVG text names the processes.

use crate::view::{Dashboard, Range, Series};
use markers::{kill_markers, member_markers, recycle_markers, with_extra, KILL, RECYCLE};
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

mod markers;

/// The width of every chart in pixels.
pub const WIDTH: u32 = 1000;
/// The height of every chart in pixels.
pub const HEIGHT: u32 = 270;
const LEGEND_W: u32 = 170;
const Y_LABELS_W: u32 = 64;
const RIGHT_MARGIN: u32 = 10;
/// The plot's width in pixels: the series are downsampled to this many buckets.
pub const PLOT_WIDTH: usize = (WIDTH - LEGEND_W - Y_LABELS_W - RIGHT_MARGIN) as usize;

const PALETTE: [RGBColor; 16] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(57, 59, 121),
    RGBColor(173, 73, 74),
    RGBColor(99, 121, 57),
    RGBColor(206, 109, 189),
    RGBColor(140, 162, 82),
    RGBColor(107, 110, 207),
];
const REFUSING: RGBColor = RGBColor(255, 200, 120);
const ABORTING: RGBColor = RGBColor(240, 120, 120);
/// The brake's `memory.high` line.
const BRAKE: RGBColor = RGBColor(128, 0, 160);

/// A chart could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("drawing the {chart} chart: {msg}")]
pub struct ChartError {
    pub chart: &'static str,
    pub msg: String,
}

/// The colour of the process at `index` (the same in every chart).
pub fn color(index: usize) -> RGBColor {
    PALETTE[index % PALETTE.len()]
}

type Ctx<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<TimeAxis, RangedCoordf64>>;
type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// One legend line: a name and its colour.
struct Entry {
    name: String,
    color: RGBColor,
}

/// "-90" seconds -> "1.5 min ago"; 0 -> "now".
fn ago(x: f64) -> String {
    let s = -x;
    if s < 1.0 {
        "now".into()
    } else if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else if s < 2.0 * 86_400.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{:.1} d", s / 86_400.0)
    }
}

/// `x` seconds before `now_ms` as the UTC time of day, `HH:MM`; the end of a day is `24:00`.
fn clock(now_ms: u64, x: f64) -> String {
    let now = now_ms / 1000;
    let midnight = now.saturating_sub(1) / 86_400 * 86_400;
    let minutes = ((now as f64 + x - midnight as f64) / 60.0).round() as i64;
    format!("{:02}:{:02}", minutes / 60, minutes % 60)
}

/// The time axis: seconds before now, labelled (and its grid drawn) at [`ticks`].
struct TimeAxis {
    inner: RangedCoordf64,
    ticks: Vec<f64>,
}

impl TimeAxis {
    fn new(range: Range) -> TimeAxis {
        TimeAxis { inner: (-(range.seconds() as f64)..0.0).into(), ticks: ticks(range) }
    }
}

impl Ranged for TimeAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn range(&self) -> std::ops::Range<f64> {
        self.inner.range()
    }

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }
}

/// The time axis's labelled points, seconds before now: each minute, ten minutes, three hours or day; over a span
/// of minutes, the first of 1, 2, 5, 10, 15, 30, 60, 120 or 180 minutes that makes at most 8 steps.
fn ticks(range: Range) -> Vec<f64> {
    let (n, step): (i64, f64) = match range {
        Range::FiveMinutes => (5, 60.0),
        Range::Hour => (6, 600.0),
        Range::Day => (8, 10_800.0),
        Range::Week => (7, 86_400.0),
        Range::Minutes(m) => {
            let m = i64::from(m);
            let step = [1, 2, 5, 10, 15, 30, 60, 120, 180].into_iter().find(|s| m / s <= 8).unwrap_or(180);
            (m / step, step as f64 * 60.0)
        }
    };
    (0..=n).map(|i| -((n - i) as f64) * step).collect()
}

/// The x (seconds before now, negative) of the middle of each bucket.
fn xs(d: &Dashboard) -> Vec<f64> {
    let s = &d.series;
    (0..s.len()).map(|i| (s.start_ms as f64 + (i as f64 + 0.5) * s.step_ms as f64 - d.now_ms as f64) / 1000.0).collect()
}

/// The x of a time in ms.
fn x_of(d: &Dashboard, t_ms: u64) -> f64 {
    (t_ms as f64 - d.now_ms as f64) / 1000.0
}

/// Runs of finite values as point lists (a NaN breaks the line).
fn segments(xs: &[f64], ys: &[f64]) -> Vec<Vec<(f64, f64)>> {
    let mut out: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut cur = Vec::new();
    for (&x, &y) in xs.iter().zip(ys) {
        if y.is_finite() {
            cur.push((x, y));
        } else if !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The largest finite value of all the vectors (at least `floor`).
fn max_of<'a>(vs: impl IntoIterator<Item = &'a Vec<f64>>, floor: f64) -> f64 {
    vs.into_iter().flatten().copied().filter(|v| v.is_finite()).fold(floor, f64::max)
}

/// Draws one line series (broken at gaps).
fn line(chart: &mut Ctx, xs: &[f64], ys: &[f64], style: ShapeStyle) -> DrawResult {
    for seg in segments(xs, ys) {
        chart.draw_series(LineSeries::new(seg, style))?;
    }
    Ok(())
}

/// Draws the frame, calls `body` to draw the series, then the legend it returns on the right.
fn render(
    name: &'static str,
    d: &Dashboard,
    y_max: f64,
    y_desc: &str,
    body: impl FnOnce(&mut Ctx, &[f64]) -> Result<Vec<Entry>, Box<dyn std::error::Error>>,
) -> Result<String, ChartError> {
    let mut svg = String::with_capacity(64 * 1024);
    let xs = xs(d);
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        let result = (|| -> DrawResult {
            root.fill(&WHITE)?;
            let (plot, legend) = root.split_horizontally(WIDTH - LEGEND_W);
            let mut chart = ChartBuilder::on(&plot)
                .margin_top(8)
                .margin_right(RIGHT_MARGIN)
                .x_label_area_size(26)
                .y_label_area_size(Y_LABELS_W)
                .build_cartesian_2d(TimeAxis::new(d.range), 0.0..y_max)?;
            let time = |x: &f64| if d.clock { clock(d.now_ms, *x) } else { ago(*x) };
            chart
                .configure_mesh()
                .y_labels(6)
                .x_label_formatter(&time)
                .y_label_formatter(&|y| short(*y))
                .y_desc(y_desc)
                .label_style(("sans-serif", 15))
                .light_line_style(RGBColor(240, 240, 240))
                .draw()?;
            let entries = body(&mut chart, &xs)?;
            let font = ("sans-serif", if entries.len() > 14 { 14 } else { 16 }).into_font();
            let step = (HEIGHT as i32 - 16) / (entries.len().max(1) as i32);
            let step = step.clamp(10, 18);
            for (i, e) in entries.iter().enumerate() {
                let y = 10 + i as i32 * step;
                legend.draw(&Rectangle::new([(6, y), (20, y + 10)], e.color.filled()))?;
                legend.draw_text(&e.name, &font.color(&BLACK), (26, y))?;
            }
            root.present()?;
            Ok(())
        })();
        result.map_err(|e| ChartError { chart: name, msg: e.to_string() })?;
    }
    Ok(svg)
}

/// 1234567 -> "1.2M"; small values as they are.
fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

const MIB: f64 = 1024.0 * 1024.0;

fn mib(v: &[f64]) -> Vec<f64> {
    v.iter().map(|b| b / MIB).collect()
}

/// Shaded spans where the group was refusing (orange) or aborting (red).
fn state_spans(chart: &mut Ctx, d: &Dashboard, y_max: f64) -> DrawResult {
    let s: &Series = &d.series;
    let mut i = 0;
    while i < s.state.len() {
        let st = s.state[i];
        let mut j = i;
        while j < s.state.len() && s.state[j] == st {
            j += 1;
        }
        if st > 0 {
            let x0 = x_of(d, s.start_ms + i as u64 * s.step_ms);
            let x1 = x_of(d, s.start_ms + j as u64 * s.step_ms).min(0.0);
            let c = if st >= 2 { ABORTING } else { REFUSING };
            chart.draw_series(std::iter::once(Rectangle::new([(x0, 0.0), (x1, y_max)], c.mix(0.45).filled())))?;
        }
        i = j;
    }
    Ok(())
}

/// Group memory: per-process anon memory stacked (what the group's usage is made of: resident file pages, shared
/// between processes, would count many times over), group usage, the limit and the refuse/abort lines (when known),
/// the brake's `memory.high` when it is set, state spans, restart markers, the guard's kills and recycles and the
/// cluster members' changes of state.
pub fn memory(d: &Dashboard) -> Result<String, ChartError> {
    let s = &d.series;
    let n = s.len();
    // Cumulative anon per process, in MiB; a bucket with no data at all stays NaN (a gap).
    let mut cum: Vec<Vec<f64>> = Vec::with_capacity(s.procs.len());
    let mut acc = vec![0.0; n];
    let any: Vec<bool> = (0..n)
        .map(|i| s.usage_bytes[i].is_finite() || s.procs.iter().any(|p| p_at(&p.anon_bytes, i).is_finite()))
        .collect();
    for p in &s.procs {
        for (i, a) in acc.iter_mut().enumerate() {
            let v = p_at(&p.anon_bytes, i);
            if v.is_finite() {
                *a += v / MIB;
            }
        }
        cum.push(acc.iter().zip(&any).map(|(&a, &ok)| if ok { a } else { f64::NAN }).collect());
    }
    let usage = mib(&s.usage_bytes);
    let limit = mib(&s.limit_bytes);
    let high = d.group.brake.as_ref().and_then(|b| b.high_bytes).map(|b| b as f64 / MIB);
    let y_max = max_of(cum.iter().chain([&usage, &limit]), high.unwrap_or(1.0)) * 1.05;
    let (refuse_at, abort_at) = (d.group.refuse_at, d.group.abort_at);
    let mut hovers = Vec::new();
    let svg = render("memory", d, y_max, "MiB", |chart, xs| {
        state_spans(chart, d, y_max)?;
        let mut entries = Vec::new();
        for k in (0..s.procs.len()).rev() {
            let c = color(k);
            for seg in segments(xs, &cum[k]) {
                chart.draw_series(AreaSeries::new(seg, 0.0, lighten(c).filled()).border_style(c))?;
            }
        }
        for (k, p) in s.procs.iter().enumerate() {
            entries.push(Entry { name: p.name.clone(), color: color(k) });
        }
        line(chart, xs, &usage, BLACK.stroke_width(2))?;
        line(chart, xs, &limit, RGBColor(60, 60, 60).stroke_width(1))?;
        let at = |f: f64| limit.iter().map(|l| l * f).collect::<Vec<_>>();
        // A fraction of 0 is not known (the daily report's database does not keep the thresholds).
        let lines = [(refuse_at, "refuse", RGBColor(230, 140, 0)), (abort_at, "abort", RGBColor(200, 0, 0))];
        let lines: Vec<_> = lines.into_iter().filter(|l| l.0 > 0.0).collect();
        for &(f, _, c) in &lines {
            line(chart, xs, &at(f), c.stroke_width(1))?;
        }
        if let Some(high) = high {
            // The value set now, across the range (the brake follows the limit, which rarely moves).
            let span = d.range.seconds() as f64;
            chart.draw_series(LineSeries::new([(-span, high), (0.0, high)], BRAKE.stroke_width(2)))?;
        }
        for m in &s.restarts {
            let x = x_of(d, m.t_ms);
            let k = s.procs.iter().position(|p| p.name == m.name).unwrap_or(0);
            chart.draw_series(LineSeries::new([(x, 0.0), (x, y_max)], color(k).stroke_width(2)))?;
            chart.draw_series(std::iter::once(TriangleMarker::new((x, y_max * 0.97), 5, color(k).filled())))?;
        }
        let killed = kill_markers(chart, d, y_max)?;
        hovers = recycle_markers(chart, d, y_max)?;
        let members = member_markers(chart, d, y_max)?;
        entries.push(Entry { name: "group usage".into(), color: BLACK });
        entries.push(Entry { name: "limit".into(), color: RGBColor(60, 60, 60) });
        for (f, name, color) in lines {
            entries.push(Entry { name: format!("{name} {:.0}%", f * 100.0), color });
        }
        if let Some(high) = high {
            entries.push(Entry { name: format!("memory.high {high:.0} MiB"), color: BRAKE });
        }
        if killed {
            entries.push(Entry { name: "guard kill".into(), color: KILL });
        }
        if !hovers.is_empty() {
            entries.push(Entry { name: "guard recycle".into(), color: RECYCLE });
        }
        entries.extend(members);
        Ok(entries)
    })?;
    Ok(with_extra(svg, &hovers))
}

/// An opaque lighter shade (stacked areas must not blend into each other).
fn lighten(c: RGBColor) -> RGBColor {
    let l = |v: u8| (v as f64 * 0.55 + 255.0 * 0.45) as u8;
    RGBColor(l(c.0), l(c.1), l(c.2))
}

fn p_at(v: &[f64], i: usize) -> f64 {
    v.get(i).copied().unwrap_or(f64::NAN)
}

/// One line per process for the field `f`, plus an optional extra line (e.g. the total).
fn per_process(
    name: &'static str,
    d: &Dashboard,
    y_desc: &str,
    f: impl Fn(&crate::view::ProcSeries) -> &Vec<f64>,
    extra: Option<(&str, Vec<f64>)>,
) -> Result<String, ChartError> {
    let s = &d.series;
    let y_max = max_of(s.procs.iter().map(&f).chain(extra.as_ref().map(|(_, v)| v)), 1.0) * 1.1;
    render(name, d, y_max, y_desc, |chart, xs| {
        let mut entries = Vec::new();
        if let Some((label, v)) = &extra {
            line(chart, xs, v, BLACK.stroke_width(2))?;
            entries.push(Entry { name: (*label).to_string(), color: BLACK });
        }
        for (k, p) in s.procs.iter().enumerate() {
            line(chart, xs, f(p), color(k).stroke_width(1))?;
            entries.push(Entry { name: p.name.clone(), color: color(k) });
        }
        Ok(entries)
    })
}

/// Sums the processes' values bucket by bucket (NaN where none has a value).
fn summed(d: &Dashboard, f: impl Fn(&crate::view::ProcSeries) -> &Vec<f64>) -> Vec<f64> {
    (0..d.series.len())
        .map(|i| {
            let vals: Vec<f64> = d.series.procs.iter().map(|p| p_at(f(p), i)).filter(|v| v.is_finite()).collect();
            if vals.is_empty() {
                f64::NAN
            } else {
                vals.iter().sum()
            }
        })
        .collect()
}

/// Requests per second: the sum and each process.
pub fn requests(d: &Dashboard) -> Result<String, ChartError> {
    let total = summed(d, |p| &p.requests_per_s);
    per_process("requests", d, "requests/s", |p| &p.requests_per_s, Some(("all processes", total)))
}

/// Requests in flight per process.
pub fn inflight(d: &Dashboard) -> Result<String, ChartError> {
    per_process("in-flight", d, "in flight", |p| &p.inflight, None)
}

/// Latency p50 (thin) and p99 (thick) per process.
pub fn latency(d: &Dashboard) -> Result<String, ChartError> {
    let s = &d.series;
    let y_max = max_of(s.procs.iter().map(|p| &p.latency_p99_ms).chain(s.procs.iter().map(|p| &p.latency_p50_ms)), 1.0);
    render("latency", d, y_max * 1.1, "ms (p50 thin, p99 thick)", |chart, xs| {
        let mut entries = Vec::new();
        for (k, p) in s.procs.iter().enumerate() {
            line(chart, xs, &p.latency_p50_ms, color(k).stroke_width(1))?;
            line(chart, xs, &p.latency_p99_ms, color(k).stroke_width(3))?;
            entries.push(Entry { name: p.name.clone(), color: color(k) });
        }
        Ok(entries)
    })
}

/// 5xx responses per second per process, and the front door's shed 503s.
pub fn errors(d: &Dashboard) -> Result<String, ChartError> {
    per_process("errors", d, "per second", |p| &p.errors_5xx_per_s, Some(("shed 503", d.series.shed_per_s.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_break_at_gaps() {
        let xs = [1.0, 2.0, 3.0, 4.0, 5.0];
        let ys = [1.0, f64::NAN, 3.0, 4.0, f64::NAN];
        assert_eq!(segments(&xs, &ys), vec![vec![(1.0, 1.0)], vec![(3.0, 3.0), (4.0, 4.0)]]);
        assert!(segments(&xs, &[f64::NAN; 5]).is_empty());
    }

    #[test]
    fn labels() {
        assert_eq!(ago(0.0), "now");
        assert_eq!(ago(-30.0), "30 s");
        assert_eq!(ago(-600.0), "10 min");
        assert_eq!(ago(-3.0 * 86_400.0), "3.0 d");
        let midnight = 1_709_251_200_000;
        assert_eq!(clock(midnight, 0.0), "24:00", "the end of the day before");
        assert_eq!(clock(midnight, -86_400.0), "00:00");
        assert_eq!(clock(midnight + 86_400_000, -3.0 * 3600.0), "21:00");
        assert_eq!(
            ticks(Range::Day).iter().map(|&x| clock(midnight, x)).collect::<Vec<_>>()[..3],
            ["00:00", "03:00", "06:00"]
        );
        assert_eq!(
            ticks(Range::Hour).iter().map(|&x| ago(x)).collect::<Vec<_>>(),
            ["60 min", "50 min", "40 min", "30 min", "20 min", "10 min", "now"]
        );
        assert_eq!(
            ticks(Range::Minutes(12)).iter().map(|&x| ago(x)).collect::<Vec<_>>(),
            ["12 min", "10 min", "8 min", "6 min", "4 min", "2 min", "now"],
            "a span the data fills: at most 8 steps of a round length"
        );
        assert_eq!(ticks(Range::Minutes(1)).len(), 2);
        assert_eq!(ticks(Range::Minutes(1440)).len(), 9);
        assert_eq!(short(1_500_000.0), "1.5M");
        assert_eq!(short(0.5), "0.50");
    }
}
