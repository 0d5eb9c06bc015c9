//! The memory chart's marks of what happened at an instant: the guard's kills and recycles and the cluster members'
//! changes of state, each a vertical line across the plot.

use super::{x_of, Ctx, Entry};
use crate::html::escape;
use crate::view::{Dashboard, KillMarker, RecycleMarker};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// The guard's kills.
pub(super) const KILL: RGBColor = RGBColor(220, 0, 0);
/// The guard's recycles (graceful restarts).
pub(super) const RECYCLE: RGBColor = RGBColor(0, 120, 130);
/// A cluster member that joined or came back.
const MEMBER_UP: RGBColor = RGBColor(0, 140, 70);
/// A cluster member that went suspect, dead or left.
const MEMBER_DOWN: RGBColor = RGBColor(200, 90, 0);
/// The longest process name a kill's or a recycle's label shows, in characters.
const KILL_NAME_MAX: usize = 24;

/// Text as a marker shows it: control characters replaced (XML allows none of them, escaped or not).
fn printable(s: &str) -> impl Iterator<Item = char> + '_ {
    s.chars().map(|c| if c.is_control() { '\u{fffd}' } else { c })
}

/// A process name as a label shows it: [`printable`], cut at [`KILL_NAME_MAX`].
fn short_name(name: &str) -> String {
    let mut short: String = printable(name).take(KILL_NAME_MAX).collect();
    if name.chars().nth(KILL_NAME_MAX).is_some() {
        short.push('…');
    }
    short
}

/// A kill's label: the process name ([`short_name`]), with `shadow` when it was only decided and `not sent` when it
/// could not be sent. Plain text: the SVG backend escapes it.
fn kill_label(k: &KillMarker) -> String {
    let name = short_name(&k.name);
    match (k.enforced, &k.error) {
        (false, _) => format!("{name} (shadow)"),
        (true, Some(_)) => format!("{name} (not sent)"),
        (true, None) => name,
    }
}

/// A red vertical line with a label at each of the guard's kills within the range (solid for a kill sent, faint for
/// one only decided or not sent); labels go left of their line near now, and step down so close kills stay apart.
/// Returns whether any was drawn.
pub(super) fn kill_markers(chart: &mut Ctx, d: &Dashboard, y_max: f64) -> Result<bool, Box<dyn std::error::Error>> {
    let span = d.range.seconds() as f64;
    let shown = d.series.kills.iter().map(|k| (x_of(d, k.t_ms), k)).filter(|(x, _)| (-span..=0.0).contains(x));
    let mut any = false;
    for (i, (x, k)) in shown.enumerate() {
        any = true;
        let sent = k.enforced && k.error.is_none();
        let style = if sent { KILL.stroke_width(2) } else { KILL.mix(0.5).stroke_width(1) };
        chart.draw_series(LineSeries::new([(x, 0.0), (x, y_max)], style))?;
        chart.draw_series(std::iter::once(Cross::new((x, y_max * 0.97), 4, KILL.stroke_width(2))))?;
        let left = x > -span * 0.25;
        let (dx, h) = if left { (-5, HPos::Right) } else { (5, HPos::Left) };
        let font = ("sans-serif", 13).into_font().color(&KILL).pos(Pos::new(h, VPos::Top));
        let y = y_max * (0.93 - 0.07 * (i % 3) as f64);
        chart.draw_series(std::iter::once(EmptyElement::at((x, y)) + Text::new(kill_label(k), (dx, 0), font)))?;
    }
    Ok(any)
}

/// A recycle's label: the process name ([`short_name`]) and `recycled`, with `shadow` when it was only decided and
/// `not sent` when it could not be sent. Plain text: the SVG backend escapes it.
fn recycle_label(r: &RecycleMarker) -> String {
    let name = short_name(&r.name);
    match (r.enforced, &r.error) {
        (false, _) => format!("{name} recycled (shadow)"),
        (true, Some(_)) => format!("{name} recycled (not sent)"),
        (true, None) => format!("{name} recycled"),
    }
}

/// A recycle's title, shown on hover: the whole name, its pid, the signal or why none was sent, and why.
fn recycle_title(r: &RecycleMarker) -> String {
    let name: String = printable(&r.name).collect();
    let how = match (r.enforced, &r.error, &r.signal) {
        (false, _, _) => "recycled in shadow mode (decided, not sent)".to_string(),
        (true, Some(e), _) => format!("recycled, not sent: {}", printable(e).collect::<String>()),
        (true, None, Some(sig)) => format!("recycled with SIG{}", printable(sig).collect::<String>()),
        (true, None, None) => "recycled".to_string(),
    };
    format!("{name} (pid {}) {how}: {}", r.pid, printable(&r.reason).collect::<String>())
}

/// A dashed teal vertical line with a circle on top and a label at each of the guard's recycles within the range
/// (faint for one only decided or not sent), its labels below the kills' so that a kill and a recycle close together
/// stay apart. Returns, per recycle drawn, a hover target with its title (why), in SVG to add to the chart: the SVG
/// backend has no titles.
pub(super) fn recycle_markers(
    chart: &mut Ctx,
    d: &Dashboard,
    y_max: f64,
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let span = d.range.seconds() as f64;
    let shown = d.series.recycles.iter().map(|r| (x_of(d, r.t_ms), r)).filter(|(x, _)| (-span..=0.0).contains(x));
    let mut hovers = Vec::new();
    for (i, (x, r)) in shown.enumerate() {
        let sent = r.enforced && r.error.is_none();
        let style = if sent { RECYCLE.stroke_width(2) } else { RECYCLE.mix(0.5).stroke_width(1) };
        chart.draw_series(DashedLineSeries::new([(x, 0.0), (x, y_max)], 6, 4, style))?;
        chart.draw_series(std::iter::once(Circle::new((x, y_max * 0.97), 4, RECYCLE.filled())))?;
        let left = x > -span * 0.25;
        let (dx, h) = if left { (-5, HPos::Right) } else { (5, HPos::Left) };
        let font = ("sans-serif", 13).into_font().color(&RECYCLE).pos(Pos::new(h, VPos::Top));
        let y = y_max * (0.72 - 0.07 * (i % 3) as f64);
        chart.draw_series(std::iter::once(EmptyElement::at((x, y)) + Text::new(recycle_label(r), (dx, 0), font)))?;
        let (top, bottom) = (chart.backend_coord(&(x, y_max)), chart.backend_coord(&(x, 0.0)));
        hovers.push(format!(
            "<line class=\"recycle\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#000\" stroke-opacity=\"0\" \
             stroke-width=\"9\"><title>{3}</title></line>",
            top.0,
            top.1,
            bottom.1,
            escape(&recycle_title(r))
        ));
    }
    Ok(hovers)
}

/// `svg` with `extra` elements drawn last (on top), before its end.
pub(super) fn with_extra(mut svg: String, extra: &[String]) -> String {
    if let Some(end) = svg.rfind("</svg>").filter(|_| !extra.is_empty()) {
        svg.insert_str(end, &extra.concat());
    }
    svg
}

/// A vertical line at each cluster member's change of state within the range, green for one that joined or came
/// back, orange for one that went suspect, dead or left. Returns the legend entries of the kinds drawn.
pub(super) fn member_markers(
    chart: &mut Ctx,
    d: &Dashboard,
    y_max: f64,
) -> Result<Vec<Entry>, Box<dyn std::error::Error>> {
    let span = d.range.seconds() as f64;
    let mut entries = Vec::new();
    for (up, color, name) in [(true, MEMBER_UP, "member up"), (false, MEMBER_DOWN, "member down")] {
        let xs = d.series.members.iter().filter(|m| m.up == up).map(|m| x_of(d, m.t_ms));
        let lines: Vec<_> = xs.filter(|x| (-span..=0.0).contains(x)).map(|x| [(x, 0.0), (x, y_max)]).collect();
        if !lines.is_empty() {
            chart.draw_series(lines.into_iter().map(|l| PathElement::new(l, color.stroke_width(2))))?;
            entries.push(Entry { name: name.into(), color });
        }
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::{memory, MIB};
    use crate::view::Series;

    /// An hour of a group at 100 MiB with a kill at each `(seconds ago, name, enforced, error)`.
    fn with_kills(kills: &[(i64, &str, bool, Option<&str>)]) -> Dashboard {
        let now_ms = 1_700_000_000_000u64;
        let n = 60;
        let mib = 100.0 * MIB;
        let mut d = Dashboard { now_ms, range: crate::view::Range::Hour, ..Dashboard::default() };
        d.group.refuse_at = 0.85;
        d.group.abort_at = 0.92;
        d.series = Series {
            start_ms: now_ms - 3_600_000,
            step_ms: 60_000,
            usage_bytes: vec![mib; n],
            limit_bytes: vec![2.0 * mib; n],
            state: vec![0; n],
            kills: kills
                .iter()
                .map(|&(ago, name, enforced, error)| KillMarker {
                    t_ms: (now_ms as i64 - ago * 1000) as u64,
                    name: name.into(),
                    pid: 42,
                    enforced,
                    error: error.map(Into::into),
                })
                .collect(),
            ..Series::default()
        };
        d
    }

    /// The contents of the SVG's `<text>` elements, trimmed.
    fn texts(svg: &str) -> Vec<&str> {
        svg.split("<text").skip(1).filter_map(|t| Some(t.split_once('>')?.1.split_once("</text>")?.0.trim())).collect()
    }

    #[test]
    fn a_kill_in_range_is_a_red_line_with_its_escaped_name() {
        let svg = memory(&with_kills(&[(600, "<b>&\"x'", true, None), (300, "tx1", false, None)])).expect("svg");
        let texts = texts(&svg);
        assert!(texts.contains(&"&lt;b&gt;&amp;&quot;x&apos;"), "the name, escaped once: {texts:?}");
        assert!(!svg.contains("<b>") && !svg.contains("&amp;lt;"), "never raw, never twice");
        assert!(texts.contains(&"tx1 (shadow)"), "{texts:?}");
        assert!(texts.contains(&"guard kill"), "a legend entry: {texts:?}");
        assert!(svg.contains("stroke=\"#DC0000\""), "the kill's line");
    }

    #[test]
    fn kills_outside_the_range_draw_nothing() {
        for kills in [&[][..], &[(7200, "old", true, None), (-30, "ahead", true, None)][..]] {
            let svg = memory(&with_kills(kills)).expect("svg");
            assert!(!svg.contains("#DC0000"), "no kill line for {kills:?}");
            let texts = texts(&svg);
            assert!(!texts.iter().any(|t| ["guard kill", "old", "ahead"].contains(t)), "{texts:?}");
        }
    }

    #[test]
    fn kill_labels() {
        let k = |name: &str, enforced: bool, error: Option<&str>| KillMarker {
            t_ms: 0,
            name: name.into(),
            pid: 1,
            enforced,
            error: error.map(Into::into),
        };
        let cases = [
            (k("node", true, None), "node"),
            (k("node", false, None), "node (shadow)"),
            (k("node", true, Some("pid 1 is gone")), "node (not sent)"),
            (k("a\u{1b}[2J\0b", true, None), "a\u{fffd}[2J\u{fffd}b"),
            (k(&"x".repeat(40), true, None), &format!("{}…", "x".repeat(KILL_NAME_MAX))),
        ];
        for (marker, want) in &cases {
            assert_eq!(kill_label(marker), *want, "{marker:?}");
        }
    }

    /// An hour of a group at 100 MiB with a kill 10 minutes ago and a recycle at each `(seconds ago, name, enforced,
    /// error)`.
    fn with_recycles(recycles: &[(i64, &str, bool, Option<&str>)]) -> Dashboard {
        let mut d = with_kills(&[(600, "killed", true, None)]);
        d.series.recycles = recycles
            .iter()
            .map(|&(ago, name, enforced, error)| RecycleMarker {
                t_ms: (d.now_ms as i64 - ago * 1000) as u64,
                name: name.into(),
                pid: 42,
                reason: "it obeyed the abort 20.0 s ago but still holds its memory".into(),
                signal: (enforced && error.is_none()).then(|| "TERM".into()),
                enforced,
                error: error.map(Into::into),
            })
            .collect();
        d
    }

    /// The hover targets' titles.
    fn titles(svg: &str) -> Vec<&str> {
        svg.split("<title>").skip(1).filter_map(|t| Some(t.split_once("</title>")?.0)).collect()
    }

    #[test]
    fn a_recycle_in_range_is_a_dashed_teal_line_apart_from_the_kills_with_its_name_and_why() {
        let d = with_recycles(&[
            (900, "<b>&\"x'", true, None),
            (300, "tx1", false, None),
            (120, "tx2", true, Some("gone")),
        ]);
        let svg = memory(&d).expect("svg");
        let texts = texts(&svg);
        assert!(texts.contains(&"&lt;b&gt;&amp;&quot;x&apos; recycled"), "the name, escaped once: {texts:?}");
        assert!(!svg.contains("<b>") && !svg.contains("&amp;lt;"), "never raw, never twice");
        assert!(texts.contains(&"tx1 recycled (shadow)") && texts.contains(&"tx2 recycled (not sent)"), "{texts:?}");
        assert!(texts.contains(&"guard recycle") && texts.contains(&"guard kill"), "a legend entry each: {texts:?}");
        assert!(texts.contains(&"killed") && !texts.contains(&"killed recycled"), "the kill stays a kill: {texts:?}");
        assert!(svg.contains("stroke=\"#007882\"") && svg.contains("stroke=\"#DC0000\""), "a line of its own colour");
        let why = "it obeyed the abort 20.0 s ago but still holds its memory";
        assert_eq!(
            titles(&svg),
            [
                format!("&lt;b&gt;&amp;&quot;x&#39; (pid 42) recycled with SIGTERM: {why}"),
                format!("tx1 (pid 42) recycled in shadow mode (decided, not sent): {why}"),
                format!("tx2 (pid 42) recycled, not sent: gone: {why}"),
            ]
        );
        assert!(svg.trim_end().ends_with("</svg>"), "the titles inside the SVG");
    }

    #[test]
    fn recycles_outside_the_range_draw_nothing() {
        for recycles in [&[][..], &[(7200, "old", true, None), (-30, "ahead", true, None)][..]] {
            let svg = memory(&with_recycles(recycles)).expect("svg");
            assert!(!svg.contains("#007882") && !svg.contains("<title>"), "no recycle line for {recycles:?}");
            let texts = texts(&svg);
            assert!(!texts.iter().any(|t| t.contains("recycle") || ["old", "ahead"].contains(t)), "{texts:?}");
        }
    }

    #[test]
    fn recycle_labels_and_titles_show_no_control_characters() {
        let r = RecycleMarker {
            t_ms: 0,
            name: format!("a\u{1b}[2J\0{}", "x".repeat(40)),
            pid: 7,
            reason: "why\n".into(),
            signal: Some("USR2".into()),
            enforced: true,
            error: None,
        };
        assert_eq!(recycle_label(&r), format!("a\u{fffd}[2J\u{fffd}{}… recycled", "x".repeat(KILL_NAME_MAX - 6)));
        assert_eq!(
            recycle_title(&r),
            format!("a\u{fffd}[2J\u{fffd}{} (pid 7) recycled with SIGUSR2: why\u{fffd}", "x".repeat(40))
        );
    }
}
