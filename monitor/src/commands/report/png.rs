//! `monitor report --png FILE`: the day as a PNG drawn with plotters' bitmap backend: peak RSS per process per
//! minute (with the group's usage and limit, and a vertical line at each cluster membership event) above requests
//! per minute per process.
//!
//! Text is drawn with ab_glyph from a TTF read at run time (Debian's fonts-dejavu-core); with no usable font the
//! chart is drawn without text and the caller says so. plotters' own `ab_glyph` feature is not used: features
//! unify, and the web crate's SVG charts would then fail their text layout whenever no font is registered.

use super::{civil_from_days, DayReport, ReportError};
use crate::history::ring::{Labels, Minute};
use ab_glyph::{point, Font, FontVec, PxScale, ScaleFont};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{BackendColor, BackendCoord, BackendTextStyle, DrawingErrorKind};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The image's size in pixels.
pub const WIDTH: u32 = 1200;
pub const HEIGHT: u32 = 900;

/// Fonts tried in order (Debian's fonts-dejavu-core first).
pub const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

/// What was written.
#[derive(Debug, Clone, PartialEq)]
pub struct PngOutcome {
    pub width: u32,
    pub height: u32,
    /// The font the text was drawn with; None: drawn without text.
    pub font: Option<PathBuf>,
}

/// The first font of `paths` that reads and parses.
pub fn find_font(paths: &[&str]) -> Option<(PathBuf, FontVec)> {
    paths.iter().find_map(|p| {
        let bytes = std::fs::read(p).ok()?;
        FontVec::try_from_vec(bytes).ok().map(|f| (PathBuf::from(p), f))
    })
}

/// The bitmap backend with text drawn by ab_glyph (or not at all without a font).
struct TextBitmap<'a, 'f> {
    inner: BitMapBackend<'a>,
    font: Option<&'f FontVec>,
}

type BitmapError = <BitMapBackend<'static> as DrawingBackend>::ErrorType;

impl TextBitmap<'_, '_> {
    /// Width and height of `text` at `size` pixels.
    fn measure(font: &FontVec, size: f64, text: &str) -> (f32, f32) {
        let f = font.as_scaled(PxScale::from(size as f32));
        let mut w = 0.0;
        let mut prev = None;
        for c in text.chars() {
            let id = f.glyph_id(c);
            if let Some(p) = prev {
                w += f.kern(p, id);
            }
            w += f.h_advance(id);
            prev = Some(id);
        }
        (w, f.ascent() - f.descent())
    }
}

impl DrawingBackend for TextBitmap<'_, '_> {
    type ErrorType = BitmapError;

    fn get_size(&self) -> (u32, u32) {
        self.inner.get_size()
    }
    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<BitmapError>> {
        self.inner.ensure_prepared()
    }
    fn present(&mut self) -> Result<(), DrawingErrorKind<BitmapError>> {
        self.inner.present()
    }
    fn draw_pixel(&mut self, p: BackendCoord, c: BackendColor) -> Result<(), DrawingErrorKind<BitmapError>> {
        self.inner.draw_pixel(p, c)
    }
    fn draw_line<S: plotters_backend::BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), DrawingErrorKind<BitmapError>> {
        self.inner.draw_line(from, to, style)
    }
    fn draw_rect<S: plotters_backend::BackendStyle>(
        &mut self,
        ul: BackendCoord,
        br: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<BitmapError>> {
        self.inner.draw_rect(ul, br, style, fill)
    }
    fn draw_path<S: plotters_backend::BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<BitmapError>> {
        self.inner.draw_path(path, style)
    }
    fn fill_polygon<S: plotters_backend::BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<BitmapError>> {
        self.inner.fill_polygon(vert, style)
    }

    fn estimate_text_size<T: BackendTextStyle>(
        &self,
        text: &str,
        style: &T,
    ) -> Result<(u32, u32), DrawingErrorKind<BitmapError>> {
        match self.font {
            Some(font) => {
                let (w, h) = Self::measure(font, style.size(), text);
                Ok((w.ceil() as u32, h.ceil() as u32))
            }
            None => self.inner.estimate_text_size(text, style),
        }
    }

    /// Draws `text` with the font, anchored as asked; horizontal only (the charts rotate none). Without a font it
    /// draws nothing (plotters' built-in stand-in panics when asked to draw).
    fn draw_text<T: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &T,
        pos: BackendCoord,
    ) -> Result<(), DrawingErrorKind<BitmapError>> {
        let Some(font) = self.font else { return Ok(()) };
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        let (w, h) = Self::measure(font, style.size(), text);
        let x0 = pos.0 as f32
            - match style.anchor().h_pos {
                HPos::Left => 0.0,
                HPos::Center => w / 2.0,
                HPos::Right => w,
            };
        let y0 = pos.1 as f32
            - match style.anchor().v_pos {
                VPos::Top => 0.0,
                VPos::Center => h / 2.0,
                VPos::Bottom => h,
            };
        let scale = PxScale::from(style.size() as f32);
        let f = font.as_scaled(scale);
        let mut x = x0;
        let mut prev = None;
        let mut pixels = Vec::new();
        for c in text.chars() {
            let id = f.glyph_id(c);
            if let Some(p) = prev {
                x += f.kern(p, id);
            }
            let glyph = id.with_scale_and_position(scale, point(x, y0 + f.ascent()));
            x += f.h_advance(id);
            prev = Some(id);
            if let Some(outline) = font.outline_glyph(glyph) {
                let b = outline.px_bounds();
                outline.draw(|gx, gy, cov| {
                    if cov > 0.01 {
                        pixels.push(((b.min.x as i32 + gx as i32, b.min.y as i32 + gy as i32), cov));
                    }
                });
            }
        }
        for (p, cov) in pixels {
            self.inner.draw_pixel(p, BackendColor { alpha: color.alpha * cov as f64, rgb: color.rgb })?;
        }
        Ok(())
    }
}

/// Per process (name, minute-index -> value), for the series of one panel.
type PerProcess = BTreeMap<String, Vec<(f64, f64)>>;

/// The day's points: hours since the day's start on x.
fn points(minutes: &[Minute], labels: &Labels, day_start: u64) -> (PerProcess, PerProcess, Vec<(f64, f64, f64)>) {
    let mut rss = PerProcess::new();
    let mut req = PerProcess::new();
    let mut group = Vec::with_capacity(minutes.len());
    for m in minutes {
        let h = m.t.saturating_sub(day_start) as f64 / 3600.0;
        group.push((h, m.usage_max as f64 / 1048576.0, m.limit as f64 / 1048576.0));
        for p in &m.procs {
            let name = labels.get(p.label).0.to_string();
            rss.entry(name.clone()).or_default().push((h, p.rss_max as f64 / 1048576.0));
            req.entry(name).or_default().push((h, p.requests as f64));
        }
    }
    (rss, req, group)
}

/// A cluster member that joined or came back.
const MEMBER_UP: RGBColor = RGBColor(0, 140, 70);
/// A cluster member that went suspect, dead or left.
const MEMBER_DOWN: RGBColor = RGBColor(200, 90, 0);

/// The hours (since the day's start) of the day's cluster events: those of members that joined or came back, and
/// those of members that went suspect, dead or left.
fn event_hours(r: &DayReport, day_start: u64) -> (Vec<f64>, Vec<f64>) {
    let hour = |ms: u64| ms.saturating_sub(day_start * 1000) as f64 / 3_600_000.0;
    let up = |what: &str| matches!(what, "joined" | "alive again");
    let ups = r.cluster_events.iter().filter(|e| up(&e.what)).map(|e| hour(e.at_unix_ms)).collect();
    let downs = r.cluster_events.iter().filter(|e| !up(&e.what)).map(|e| hour(e.at_unix_ms)).collect();
    (ups, downs)
}

fn color(i: usize) -> RGBColor {
    web::chart::color(i)
}

fn draw_err<E: std::fmt::Debug>(e: E) -> ReportError {
    ReportError::Png(format!("drawing the chart: {e:?}"))
}

/// A panel over the day: hours 0..24 across, 0..`y_max` up, with its caption and a light mesh.
fn day_chart<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    caption: String,
    caption_size: u32,
    y_max: f64,
) -> Result<ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>, ReportError> {
    let mut c = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", caption_size))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..24.0, 0.0..y_max)
        .map_err(draw_err)?;
    c.configure_mesh()
        .x_labels(13)
        .x_desc("hour")
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(draw_err)?;
    Ok(c)
}

/// Draws the two panels on `root`.
fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    r: &DayReport,
    minutes: &[Minute],
    labels: &Labels,
    day_start: u64,
) -> Result<(), ReportError> {
    root.fill(&WHITE).map_err(draw_err)?;
    let (rss, req, group) = points(minutes, labels, day_start);
    let (top, bottom) = root.split_vertically(HEIGHT * 11 / 20);
    let peak = group.iter().map(|g| g.1.max(g.2)).fold(1.0, f64::max) * 1.05;
    let mut c = day_chart(&top, format!("monitor report {} (UTC): memory per process, MiB", r.date), 22, peak)?;
    let usage = group.iter().map(|g| (g.0, g.1));
    c.draw_series(LineSeries::new(usage, BLACK.stroke_width(2)))
        .map_err(draw_err)?
        .label("group usage")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK.stroke_width(2)));
    c.draw_series(LineSeries::new(group.iter().map(|g| (g.0, g.2)), RED.stroke_width(1)))
        .map_err(draw_err)?
        .label("limit")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RED));
    for (i, (name, pts)) in rss.iter().enumerate() {
        let col = color(i);
        c.draw_series(LineSeries::new(pts.iter().copied(), col.stroke_width(1)))
            .map_err(draw_err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], col.stroke_width(2)));
    }
    let (ups, downs) = event_hours(r, day_start);
    for (hours, col, label) in [
        (ups, MEMBER_UP, "cluster member joined or back"),
        (downs, MEMBER_DOWN, "cluster member suspect, dead or left"),
    ] {
        if hours.is_empty() {
            continue;
        }
        let lines = hours.into_iter().map(move |h| PathElement::new(vec![(h, 0.0), (h, peak)], col));
        c.draw_series(lines)
            .map_err(draw_err)?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], col.stroke_width(2)));
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(RGBColor(200, 200, 200))
        .label_font(("sans-serif", 12))
        .draw()
        .map_err(draw_err)?;

    let top_req = req.values().flat_map(|v| v.iter().map(|p| p.1)).fold(1.0, f64::max) * 1.1;
    let mut c =
        day_chart(&bottom, format!("requests per minute per process ({} in total)", r.requests_total), 20, top_req)?;
    for (i, pts) in req.values().enumerate() {
        c.draw_series(LineSeries::new(pts.iter().copied(), color(i).stroke_width(1))).map_err(draw_err)?;
    }
    if minutes.is_empty() {
        let style = ("sans-serif", 24).into_font().color(&RGBColor(120, 120, 120));
        root.draw_text("no data for this day", &style, (WIDTH as i32 / 2 - 110, HEIGHT as i32 / 2))
            .map_err(draw_err)?;
    }
    root.present().map_err(draw_err)
}

/// The chart as RGB8 pixels (`WIDTH` × `HEIGHT`), text drawn with `font` when given.
pub fn render(
    r: &DayReport,
    minutes: &[Minute],
    labels: &Labels,
    day_start: u64,
    font: Option<&FontVec>,
) -> Result<Vec<u8>, ReportError> {
    let mut buf = vec![255u8; WIDTH as usize * HEIGHT as usize * 3];
    {
        let inner = BitMapBackend::with_buffer(&mut buf, (WIDTH, HEIGHT));
        let root = TextBitmap { inner, font }.into_drawing_area();
        draw(&root, r, minutes, labels, day_start)?;
    }
    Ok(buf)
}

/// Encodes RGB8 pixels as PNG.
pub fn encode(rgb: &[u8], width: u32, height: u32) -> Result<Vec<u8>, ReportError> {
    let mut out = std::io::Cursor::new(Vec::new());
    image::write_buffer_with_format(&mut out, rgb, width, height, image::ColorType::Rgb8, image::ImageFormat::Png)
        .map_err(|e| ReportError::Png(format!("encoding the PNG: {e}")))?;
    Ok(out.into_inner())
}

/// Writes the day's chart to `path`, with the first font of [`FONT_PATHS`] (or without text if none is usable).
pub fn write_png(
    path: &Path,
    r: &DayReport,
    minutes: &[Minute],
    labels: &Labels,
    day_start: u64,
) -> Result<PngOutcome, ReportError> {
    let font = find_font(FONT_PATHS);
    let rgb = render(r, minutes, labels, day_start, font.as_ref().map(|f| &f.1))?;
    let png = encode(&rgb, WIDTH, HEIGHT)?;
    std::fs::write(path, png).map_err(|e| ReportError::Png(format!("writing {}: {e}", path.display())))?;
    Ok(PngOutcome { width: WIDTH, height: HEIGHT, font: font.map(|f| f.0) })
}

/// The line `monitor report --png` prints (on stderr, so `--json` stays JSON).
pub fn describe(path: &Path, o: &PngOutcome) -> String {
    match &o.font {
        Some(f) => format!("wrote {} ({}×{} PNG, text in {})", path.display(), o.width, o.height, f.display()),
        None => format!(
            "wrote {} ({}×{} PNG) without text: no font found (tried {}; apt-get install fonts-dejavu-core)",
            path.display(),
            o.width,
            o.height,
            FONT_PATHS.join(", ")
        ),
    }
}

/// The date shown for a day start (used by tests and callers that only have the Unix second).
pub fn date_of(day_start: u64) -> String {
    civil_from_days(day_start / 86_400)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::report::summarize;
    use crate::history::ring::ProcMinute;

    fn day() -> (Vec<Minute>, Labels, u64) {
        let mut labels = Labels::default();
        let m = labels.intern("app-master", "master");
        let w = labels.intern("app-w01", "worker");
        let start = 1_709_251_200;
        let minutes = (0..1440u64)
            .map(|i| Minute {
                t: start + i * 60,
                usage_max: (400 + i % 100) << 20,
                usage_mean: 400 << 20,
                limit: 1 << 30,
                procs: vec![
                    ProcMinute { label: m, rss_max: 300 << 20, requests: 60, ..ProcMinute::default() },
                    ProcMinute { label: w, rss_max: (100 + i % 50) << 20, requests: 600 + i, ..ProcMinute::default() },
                ],
                ..Minute::default()
            })
            .collect();
        (minutes, labels, start)
    }

    fn decode(png: &[u8]) -> image::RgbImage {
        image::load_from_memory_with_format(png, image::ImageFormat::Png).expect("the PNG decodes").to_rgb8()
    }

    #[test]
    fn a_day_decodes_at_the_expected_size_with_and_without_a_font() {
        let test = "a_day_decodes_at_the_expected_size_with_and_without_a_font";
        let (minutes, labels, start) = day();
        let r = summarize(&date_of(start), &minutes, &labels);
        let with = find_font(FONT_PATHS);
        // fonts-dejavu-core is one of .ci/packages: in CI the text half must run.
        let why =
            format!("no font in {FONT_PATHS:?} (apt-get install fonts-dejavu-core): the text half is not checked");
        monitor_tests::require(with.is_some(), test, &why);
        let mut inked = Vec::new();
        for font in [with.as_ref().map(|f| &f.1), None] {
            let rgb = render(&r, &minutes, &labels, start, font).expect("render");
            let img = decode(&encode(&rgb, WIDTH, HEIGHT).expect("encode"));
            assert_eq!(img.dimensions(), (WIDTH, HEIGHT));
            let dark = img.pixels().filter(|p| p.0.iter().all(|&c| c < 100)).count();
            assert!(dark > 1000, "the chart drew lines ({dark} dark pixels)");
            inked.push(dark);
        }
        if with.is_some() {
            assert!(inked[0] > inked[1], "text adds ink: {inked:?}");
        }
    }

    #[test]
    fn cluster_events_are_marked_by_kind() {
        let (minutes, labels, start) = day();
        let event = |hour: u64, what: &str| crate::history::events::ClusterEvent {
            at_unix_ms: (start + hour * 3600) * 1000,
            node: "b".into(),
            what: what.into(),
            from: None,
            to: "alive".into(),
        };
        let quiet = summarize(&date_of(start), &minutes, &labels);
        let r = DayReport { cluster_events: vec![event(6, "joined"), event(18, "dead")], ..quiet.clone() };
        let count = |r: &DayReport, col: RGBColor| {
            let rgb = render(r, &minutes, &labels, start, None).expect("render");
            rgb.chunks(3).filter(|p| *p == [col.0, col.1, col.2]).count()
        };
        // A line up the memory panel for each (and its legend entry); nothing of either colour without events.
        assert!(count(&r, MEMBER_UP) > 200, "the join is marked");
        assert!(count(&r, MEMBER_DOWN) > 200, "the death is marked");
        assert_eq!((count(&quiet, MEMBER_UP), count(&quiet, MEMBER_DOWN)), (0, 0));
    }

    #[test]
    fn an_empty_day_and_a_bad_path_are_errors_or_charts_not_panics() {
        let labels = Labels::default();
        let r = summarize("2024-03-01", &[], &labels);
        let rgb = render(&r, &[], &labels, 0, None).expect("an empty day still draws");
        assert_eq!(rgb.len(), (WIDTH * HEIGHT * 3) as usize);
        let bad = Path::new("/nonexistent-dir/x/day.png");
        let err = write_png(bad, &r, &[], &labels, 0).expect_err("unwritable path");
        assert!(err.to_string().contains("/nonexistent-dir/x/day.png"), "{err}");
    }
}
