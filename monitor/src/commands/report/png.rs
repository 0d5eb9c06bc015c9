//! `monitor report --png FILE`: the day as the home page draws it. The page's charts (`web`'s SVG) over the UTC
//! day, from the day's minutes with its restarts, kills, recycles and cluster members' changes marked, stacked under
//! a title into one SVG that resvg draws into the PNG.
//!
//! Text is set in a TTF read at run time (Debian's fonts-dejavu-core), loaded into resvg's font database as its
//! `sans-serif`, the family the charts name; with no usable font the charts are drawn without text and the caller
//! says so.

use super::{DayReport, ReportError};
use crate::history::query;
use crate::history::ring::{Labels, Minute};
use resvg::tiny_skia::{Pixmap, Transform};
use resvg::usvg::{fontdb, Options, Tree};
use std::collections::VecDeque;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use web::chart::{HEIGHT as CHART_HEIGHT, PLOT_WIDTH, WIDTH as CHART_WIDTH};
use web::{Dashboard, MemberMarker, Range};

/// The title's height, and each chart's heading's, in pixels.
const TITLE: u32 = 44;
const HEADING: u32 = 28;
/// The image's size in pixels: the title, then each of the page's charts under its heading.
pub const WIDTH: u32 = CHART_WIDTH;
pub const HEIGHT: u32 = TITLE + web::page::CHARTS.len() as u32 * (HEADING + CHART_HEIGHT);

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

/// The first font of `paths` that reads and parses, in a font database whose `sans-serif` it is.
pub(crate) fn find_font(paths: &[&str]) -> Option<(PathBuf, Arc<fontdb::Database>)> {
    paths.iter().find_map(|p| {
        let mut db = fontdb::Database::new();
        db.load_font_data(std::fs::read(p).ok()?);
        let family = db.faces().next()?.families.first()?.0.clone();
        db.set_sans_serif_family(family);
        Some((PathBuf::from(p), Arc::new(db)))
    })
}

/// The home page's view of the day starting at `day_start`: its minutes in the day range's buckets, its kills,
/// recycles and cluster events marked, the time axis in UTC time of day. The thresholds are not kept: no refuse/abort lines.
pub fn dashboard(r: &DayReport, minutes: &[Minute], labels: &Labels, day_start: u64) -> Dashboard {
    let end_ms = (day_start + 86_400) * 1000;
    let minutes: VecDeque<Arc<Minute>> = minutes.iter().cloned().map(Arc::new).collect();
    // Asked a second before the day's end, the day range's buckets are the day's.
    let mut series = query::series(&VecDeque::new(), &minutes, labels, end_ms - 1000, Range::Day, PLOT_WIDTH);
    series.kills = query::kills(&r.kills.iter().cloned().map(Arc::new).collect(), &series);
    series.recycles = query::recycles(&r.recycles.iter().cloned().map(Arc::new).collect(), &series);
    series.members = r
        .cluster_events
        .iter()
        .map(|e| MemberMarker {
            t_ms: e.at_unix_ms,
            node: e.node.clone(),
            up: matches!(e.what.as_str(), "joined" | "alive again"),
        })
        .collect();
    Dashboard { now_ms: end_ms, range: Range::Day, series, clock: true, ..Dashboard::default() }
}

/// The page's charts of `d` under a title, as one SVG of [`WIDTH`] × [`HEIGHT`].
pub fn svg(r: &DayReport, d: &Dashboard) -> Result<String, ReportError> {
    let mut out = String::with_capacity(512 * 1024);
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" font-family=\"sans-serif\">\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/><text x=\"12\" y=\"30\" font-size=\"22\">monitor report \
         {} (UTC): {} requests{}</text>",
        web::html::escape(&r.date),
        r.requests_total,
        if r.minutes == 0 { "; no data for this day" } else { "" }
    );
    let mut y = TITLE;
    for (_, heading, draw) in web::page::CHARTS {
        let chart = draw(d).map_err(|e| ReportError::Png(e.to_string()))?;
        let _ = write!(
            out,
            "<text x=\"12\" y=\"{}\" font-size=\"17\">{}</text><g transform=\"translate(0 {})\">{chart}</g>",
            y + 20,
            web::html::escape(heading),
            y + HEADING
        );
        y += HEADING + CHART_HEIGHT;
    }
    out.push_str("</svg>");
    Ok(out)
}

/// Draws `svg` with the text in `fonts` (none without).
pub fn render(svg: &str, fonts: Option<Arc<fontdb::Database>>) -> Result<Pixmap, ReportError> {
    let mut opt = Options::default();
    if let Some(fonts) = fonts {
        opt.fontdb = fonts;
    }
    let tree = Tree::from_str(svg, &opt).map_err(|e| ReportError::Png(format!("reading the charts' SVG: {e}")))?;
    let size = tree.size().to_int_size();
    let mut pixmap = Pixmap::new(size.width(), size.height())
        .ok_or_else(|| ReportError::Png(format!("no {}×{} image", size.width(), size.height())))?;
    resvg::render(&tree, Transform::default(), &mut pixmap.as_mut());
    Ok(pixmap)
}

/// Writes the day's charts to `path`, with the first font of [`FONT_PATHS`] (or without text if none is usable).
pub fn write_png(
    path: &Path,
    r: &DayReport,
    minutes: &[Minute],
    labels: &Labels,
    day_start: u64,
) -> Result<PngOutcome, ReportError> {
    let font = find_font(FONT_PATHS);
    let svg = svg(r, &dashboard(r, minutes, labels, day_start))?;
    let pixmap = render(&svg, font.as_ref().map(|f| f.1.clone()))?;
    let png = pixmap.encode_png().map_err(|e| ReportError::Png(format!("encoding the PNG: {e}")))?;
    std::fs::write(path, png).map_err(|e| ReportError::Png(format!("writing {}: {e}", path.display())))?;
    Ok(PngOutcome { width: pixmap.width(), height: pixmap.height(), font: font.map(|f| f.0) })
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

/// The date shown for a day start, for the tests that only have its Unix second.
#[cfg(test)]
pub(crate) fn date_of(day_start: u64) -> String {
    super::civil_from_days(day_start / 86_400)
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
                    ProcMinute {
                        label: w,
                        rss_max: (100 + i % 50) << 20,
                        requests: 600 + i as u32,
                        ..ProcMinute::default()
                    },
                ],
                ..Minute::default()
            })
            .collect();
        (minutes, labels, start)
    }

    /// The day's chart drawn as `write_png` draws it, read back from the PNG.
    fn png(
        r: &DayReport,
        minutes: &[Minute],
        labels: &Labels,
        start: u64,
        fonts: Option<Arc<fontdb::Database>>,
    ) -> Pixmap {
        let svg = svg(r, &dashboard(r, minutes, labels, start)).expect("svg");
        let png = render(&svg, fonts).expect("render").encode_png().expect("encode");
        assert_eq!(png.get(..8), Some(&b"\x89PNG\r\n\x1a\n"[..]), "a PNG");
        Pixmap::decode_png(&png).expect("the PNG decodes")
    }

    /// Pixels of exactly `rgb`.
    fn count(p: &Pixmap, rgb: (u8, u8, u8)) -> usize {
        p.pixels().iter().filter(|c| (c.red(), c.green(), c.blue()) == rgb).count()
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
        for fonts in [with.as_ref().map(|f| f.1.clone()), None] {
            let img = png(&r, &minutes, &labels, start, fonts);
            assert_eq!((img.width(), img.height()), (WIDTH, HEIGHT));
            let dark = img.pixels().iter().filter(|p| p.red() < 100 && p.green() < 100 && p.blue() < 100).count();
            assert!(dark > 1000, "the charts drew lines ({dark} dark pixels)");
            inked.push(dark);
        }
        if with.is_some() {
            // The title, headings, axis labels and legends: thousands of dark pixels of glyphs.
            assert!(inked[0] > inked[1] + 5000, "text adds ink: {inked:?}");
        }
    }

    #[test]
    fn the_png_is_the_home_pages_charts_with_their_series() {
        let (minutes, labels, start) = day();
        let r = summarize(&date_of(start), &minutes, &labels);
        let d = dashboard(&r, &minutes, &labels, start);
        let svg = svg(&r, &d).expect("svg");
        for (id, _, draw) in web::page::CHARTS {
            assert!(svg.contains(&draw(&d).expect(id)), "the page's {id} chart, as it is");
        }
        assert_eq!(d.series.procs.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["app-master", "app-w01"]);
        let img = png(&r, &minutes, &labels, start, None);
        // Each process's colour (its lines and legend boxes) is drawn; the next one of the palette, no process's,
        // is neither in the SVG nor in the PNG.
        for k in 0..2 {
            let c = web::chart::color(k);
            assert!(svg.contains(&format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)), "process {k} in the SVG");
            assert!(count(&img, (c.0, c.1, c.2)) > 500, "process {k}'s colour is drawn");
        }
        let unused = web::chart::color(2);
        assert!(!svg.contains(&format!("#{:02X}{:02X}{:02X}", unused.0, unused.1, unused.2)));
        assert_eq!(count(&img, (unused.0, unused.1, unused.2)), 0);
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
        let (up, down) = ((0, 140, 70), (200, 90, 0));
        let (marked, unmarked) = (png(&r, &minutes, &labels, start, None), png(&quiet, &minutes, &labels, start, None));
        // A line up the memory chart for each (and its legend entry); nothing of either colour without events.
        assert!(count(&marked, up) > 200, "the join is marked");
        assert!(count(&marked, down) > 200, "the death is marked");
        assert_eq!((count(&unmarked, up), count(&unmarked, down)), (0, 0));
    }

    #[test]
    fn recycles_are_marked_apart_from_kills() {
        use crate::history::store::fixtures::{kill, recycle};
        let (minutes, labels, start) = day();
        let quiet = summarize(&date_of(start), &minutes, &labels);
        let at = |hour: u64| (start + hour * 3600) * 1000;
        let recycled = DayReport { recycles: vec![recycle(at(8), 11, true)], ..quiet.clone() };
        let killed = DayReport { kills: vec![kill(at(16), 12, true)], ..quiet.clone() };
        let (teal, red) = ((0, 120, 130), (220, 0, 0));
        let draw = |r: &DayReport| png(r, &minutes, &labels, start, None);
        let (r, k, none) = (draw(&recycled), draw(&killed), draw(&quiet));
        // A dashed line up the memory chart, its circle and its legend entry, in a colour of its own.
        assert!(count(&r, teal) > 150, "the recycle is marked");
        assert_eq!(count(&r, red), 0, "not as a kill");
        assert!(count(&k, red) > 150, "the kill is marked");
        assert_eq!((count(&k, teal), count(&none, teal), count(&none, red)), (0, 0, 0));
        let svg = svg(&recycled, &dashboard(&recycled, &minutes, &labels, start)).expect("svg");
        assert!(svg.contains("<title>node (pid 11) recycled with SIGTERM: "), "why, on hover in the SVG");
    }

    #[test]
    fn an_empty_day_and_a_bad_path_are_errors_or_charts_not_panics() {
        let labels = Labels::default();
        let r = summarize("2024-03-01", &[], &labels);
        let img = png(&r, &[], &labels, 0, None);
        assert_eq!((img.width(), img.height()), (WIDTH, HEIGHT), "an empty day still draws");
        let bad = Path::new("/nonexistent-dir/x/day.png");
        let err = write_png(bad, &r, &[], &labels, 0).expect_err("unwritable path");
        assert!(err.to_string().contains("/nonexistent-dir/x/day.png"), "{err}");
    }
}
