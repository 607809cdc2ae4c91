//! The picture on the gate's page: one metric over the last 30 minutes,
//! canary against primary, as an inline SVG drawn here (no script, so the
//! page's strict CSP stays), with the moments of approvals and weight steps
//! marked. Pure: the points and marks come in, the markup goes out. Every
//! text in it is gatebot's own (names, numbers, units); nothing from
//! Flagger's side or from people is drawn.

use std::fmt::Write;

use super::prometheus::Point;
use crate::gate::Millis;

/// How far back a chart looks.
pub(crate) const SPAN_MS: Millis = 30 * 60 * 1000;

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 180.0;
/// Room for the value labels on the left and the time labels below.
const LEFT: f64 = 56.0;
const BOTTOM: f64 = 22.0;
const TOP: f64 = 22.0;

/// One metric's two series.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Chart {
    pub name: &'static str,
    pub unit: &'static str,
    pub canary: Vec<Point>,
    pub primary: Vec<Point>,
}

/// A moment to mark: an approval, a weight step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mark {
    pub at: Millis,
    pub label: MarkLabel,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MarkLabel {
    Approved,
    Weight(u32),
}

impl MarkLabel {
    fn text(self) -> String {
        match self {
            Self::Approved => "approved".to_string(),
            Self::Weight(w) => format!("{w} %"),
        }
    }
}

/// Where `[lo, hi]` lands on the chart's y axis, with some room around.
struct Scale {
    lo: f64,
    hi: f64,
    from_s: f64,
}

impl Scale {
    fn of(chart: &Chart, now: Millis) -> Option<Self> {
        let values = chart.canary.iter().chain(&chart.primary).map(|(_, v)| *v);
        let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
        if !lo.is_finite() || !hi.is_finite() {
            return None;
        }
        let pad = ((hi - lo) * 0.1).max(hi.abs() * 0.01).max(0.5);
        // A rate never passes 100 %: the axis does not either.
        let top = if chart.unit == "%" && hi <= 100.0 {
            (hi + pad).min(100.0)
        } else {
            hi + pad
        };
        Some(Self {
            lo: lo - pad,
            hi: top.max(hi),
            from_s: (now - SPAN_MS) as f64 / 1000.0,
        })
    }

    fn x(&self, at_s: f64) -> f64 {
        let span = SPAN_MS as f64 / 1000.0;
        LEFT + ((at_s - self.from_s) / span).clamp(0.0, 1.0) * (WIDTH - LEFT - 8.0)
    }

    fn y(&self, v: f64) -> f64 {
        TOP + (1.0 - (v - self.lo) / (self.hi - self.lo)) * (HEIGHT - TOP - BOTTOM)
    }
}

fn polyline(out: &mut String, scale: &Scale, points: &[Point], color: &str, dashed: bool) {
    if points.is_empty() {
        return;
    }
    let coords: Vec<String> = points
        .iter()
        .map(|(t, v)| format!("{:.1},{:.1}", scale.x(*t), scale.y(*v)))
        .collect();
    let dash = if dashed {
        r#" stroke-dasharray="5 3""#
    } else {
        ""
    };
    let _ = write!(
        out,
        r#"<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{}"/>"#,
        coords.join(" ")
    );
}

/// The chart as SVG markup; None when neither series has a point.
pub(crate) fn svg(chart: &Chart, marks: &[Mark], now: Millis) -> Option<String> {
    let scale = Scale::of(chart, now)?;
    let mut out = String::with_capacity(2048);
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(
        out,
        r#"<title>{} of the canary (solid) against the primary (dashed), last 30 minutes</title>"#,
        chart.name
    );
    let _ = write!(
        out,
        r##"<text x="{LEFT}" y="14" fill="#333">{}: canary <tspan fill="#d9480f">━</tspan> primary <tspan fill="#1c7ed6">╍</tspan></text>"##,
        chart.name
    );
    let bottom = HEIGHT - BOTTOM;
    let _ = write!(
        out,
        r##"<line x1="{LEFT}" y1="{bottom}" x2="{}" y2="{bottom}" stroke="#999"/>"##,
        WIDTH - 8.0
    );
    for v in [scale.lo, scale.hi] {
        let _ = write!(
            out,
            r##"<text x="{}" y="{:.1}" text-anchor="end" fill="#666">{}</text>"##,
            LEFT - 4.0,
            scale.y(v) + 4.0,
            label(v, chart.unit)
        );
    }
    let _ = write!(
        out,
        r##"<text x="{LEFT}" y="{}" fill="#666">30 min ago</text><text x="{}" y="{}" text-anchor="end" fill="#666">now</text>"##,
        HEIGHT - 6.0,
        WIDTH - 8.0,
        HEIGHT - 6.0
    );
    for mark in marks
        .iter()
        .filter(|m| m.at >= now - SPAN_MS && m.at <= now)
    {
        let x = scale.x(mark.at as f64 / 1000.0);
        // Near the right edge the label goes on the line's left.
        let (at, anchor) = if x > WIDTH - 72.0 {
            (x - 2.0, "end")
        } else {
            (x + 2.0, "start")
        };
        let _ = write!(
            out,
            r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{bottom}" stroke="#2b8a3e" stroke-dasharray="2 2"/><text x="{at:.1}" y="{}" text-anchor="{anchor}" fill="#2b8a3e">{}</text>"##,
            TOP + 10.0,
            mark.label.text()
        );
    }
    polyline(&mut out, &scale, &chart.primary, "#1c7ed6", true);
    polyline(&mut out, &scale, &chart.canary, "#d9480f", false);
    out.push_str("</svg>");
    Some(out)
}

fn label(v: f64, unit: &str) -> String {
    if unit == "%" || v.abs() < 10.0 {
        format!("{v:.1} {unit}")
    } else {
        format!("{v:.0} {unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Millis = 1_714_572_120_000;

    fn chart() -> Chart {
        let t0 = (NOW - SPAN_MS) as f64 / 1000.0;
        Chart {
            name: "success",
            unit: "%",
            canary: (0..31)
                .map(|i| (t0 + 60.0 * i as f64, 99.0 - i as f64 * 0.05))
                .collect(),
            primary: (0..31).map(|i| (t0 + 60.0 * i as f64, 99.8)).collect(),
        }
    }

    #[test]
    fn a_chart_draws_both_series_and_the_marks_within_its_span() {
        let marks = [
            Mark {
                at: NOW - 10 * 60_000,
                label: MarkLabel::Weight(50),
            },
            Mark {
                at: NOW - 60_000,
                label: MarkLabel::Approved,
            },
            Mark {
                at: NOW - 2 * SPAN_MS,
                label: MarkLabel::Weight(10),
            },
        ];
        let svg = svg(&chart(), &marks, NOW).unwrap();
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains(">50 %</text>") && svg.contains(">approved</text>"));
        assert!(
            !svg.contains(">10 %</text>"),
            "a mark older than the span is left out"
        );
        assert!(
            !svg.contains("<script") && !svg.contains("style="),
            "nothing the CSP refuses"
        );
        insta::assert_snapshot!("evidence_chart", svg);
    }

    #[test]
    fn no_point_no_chart() {
        let empty = Chart {
            name: "p99",
            unit: "ms",
            canary: Vec::new(),
            primary: Vec::new(),
        };
        assert_eq!(svg(&empty, &[], NOW), None);
    }
}
