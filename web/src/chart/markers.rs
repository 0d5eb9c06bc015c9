//! The memory chart's marks of what happened at an instant: the guard's kills and the cluster members' changes of
//! state, each a vertical line across the plot.

use super::{x_of, Ctx, Entry};
use crate::view::{Dashboard, KillMarker};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// The guard's kills.
pub(super) const KILL: RGBColor = RGBColor(220, 0, 0);
/// A cluster member that joined or came back.
const MEMBER_UP: RGBColor = RGBColor(0, 140, 70);
/// A cluster member that went suspect, dead or left.
const MEMBER_DOWN: RGBColor = RGBColor(200, 90, 0);
/// The longest process name a kill's label shows, in characters.
const KILL_NAME_MAX: usize = 24;

/// A kill's label: the process name (control characters replaced, cut at [`KILL_NAME_MAX`]), with `shadow` when
/// it was only decided and `not sent` when it could not be sent. Plain text: the SVG backend escapes it.
fn kill_label(k: &KillMarker) -> String {
    let mut name: String =
        k.name.chars().take(KILL_NAME_MAX).map(|c| if c.is_control() { '\u{fffd}' } else { c }).collect();
    if k.name.chars().nth(KILL_NAME_MAX).is_some() {
        name.push('…');
    }
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
}
