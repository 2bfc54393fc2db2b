//! SVG charts of benchmark results (stacked per-phase bars, scaling lines).
//!
//! Both charts render to an in-memory SVG string via plotters' SVG backend. Inputs are
//! validated first, so bad numbers become a [`ChartError`] instead of a panic. Both draw
//! only a major grid, and may carry a note under the plot (e.g. that times are too small to
//! measure). The scaling chart's log axes are labelled at 1-2-5 steps (or decades, when
//! those would crowd), counts in SI units (`20k`) and times in `µs`/`ms`/`s`.

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::Shift;
use plotters::prelude::*;
use thiserror::Error;

const SIZE: (u32, u32) = (900, 540);
/// Fixed, distinct palette (Tableau 10); phase/series `i` gets `color(i)`.
const PALETTE: [u32; 10] = [
    0x1F77B4, 0xFF7F0E, 0x2CA02C, 0xD62728, 0x9467BD, 0x8C564B, 0xE377C2, 0x7F7F7F, 0xBCBD22,
    0x17BECF,
];
const REFERENCE_COLOR: RGBColor = RGBColor(0x33, 0x33, 0x33);

fn color(i: usize) -> RGBColor {
    let [_, r, g, b] = PALETTE[i % PALETTE.len()].to_be_bytes();
    RGBColor(r, g, b)
}

/// Why a chart could not be rendered. Each variant names the offending bar, phase or series.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ChartError {
    /// No bars, no phases, or no series points at all.
    #[error("nothing to plot: no bars, phases or series points")]
    Empty,
    /// Bar `bar` has `got` segments but there are `expected` phases.
    #[error("bar `{bar}` has {got} segments but there are {expected} phases")]
    SegmentCount {
        /// The bar's label.
        bar: String,
        /// Its segments.
        got: usize,
        /// The phases.
        expected: usize,
    },
    /// Segment `phase` of bar `bar` is negative, NaN or infinite.
    #[error("bar `{bar}`, phase `{phase}`: value {value} is negative or not finite")]
    InvalidValue {
        /// The bar's label.
        bar: String,
        /// The segment's phase.
        phase: String,
        /// Its value.
        value: f64,
    },
    /// The reference line `label` has a negative, NaN or infinite value.
    #[error("reference `{label}`: value {value} is negative or not finite")]
    InvalidReference {
        /// The line's label.
        label: String,
        /// Its value.
        value: f64,
    },
    /// Point `(x, y)` of series `series` is not positive and finite, as log axes need.
    #[error("series `{series}`: point ({x}, {y}) must be positive and finite on log axes")]
    NotPositive {
        /// The series' name.
        series: String,
        /// The point's x.
        x: f64,
        /// The point's y.
        y: f64,
    },
    /// plotters failed while drawing (stringified).
    #[error("drawing failed: {0}")]
    Draw(String),
}

impl<E: std::error::Error + Send + Sync> From<DrawingAreaErrorKind<E>> for ChartError {
    fn from(e: DrawingAreaErrorKind<E>) -> Self {
        ChartError::Draw(e.to_string())
    }
}

/// One bar: a label (e.g. "generic") and one value per phase (seconds, >= 0).
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    /// The x-axis label of the bar.
    pub label: String,
    /// One value per phase, stacked bottom-up in phase order.
    pub segments: Vec<f64>,
}

/// A stacked bar chart (Figure 5 style): `StackedChart::new(..)`, optionally
/// `.with_reference(..)`, then [`render`](Self::render).
#[derive(Debug, Clone, Copy)]
pub struct StackedChart<'a> {
    /// Chart caption.
    pub title: &'a str,
    /// Y-axis description (e.g. "time (s)").
    pub y_label: &'a str,
    /// Phase names (legend entries); every bar has `phases.len()` segments.
    pub phases: &'a [&'a str],
    /// Optional horizontal dashed line `(legend label, y value)`, e.g. `("limit", 0.8)`.
    pub reference: Option<(&'a str, f64)>,
    /// Optional note printed under the plot.
    pub note: Option<&'a str>,
}

impl<'a> StackedChart<'a> {
    /// A chart without a reference line.
    pub fn new(title: &'a str, y_label: &'a str, phases: &'a [&'a str]) -> Self {
        Self {
            title,
            y_label,
            phases,
            reference: None,
            note: None,
        }
    }

    /// Prints `note` under the plot.
    pub fn with_note(self, note: &'a str) -> Self {
        let note = Some(note);
        Self { note, ..self }
    }

    /// Adds a horizontal dashed line at `value` seconds, listed in the legend as `label`.
    pub fn with_reference(self, label: &'a str, value: f64) -> Self {
        let reference = Some((label, value));
        Self { reference, ..self }
    }

    /// Validates `bars` and renders the chart to an SVG string. Zero segments draw nothing.
    pub fn render(&self, bars: &[Bar]) -> Result<String, ChartError> {
        let phases = self.phases;
        if bars.is_empty() || phases.is_empty() {
            return Err(ChartError::Empty);
        }
        for b in bars {
            let (bar, got, expected) = (b.label.clone(), b.segments.len(), phases.len());
            if got != expected {
                return Err(ChartError::SegmentCount { bar, got, expected });
            }
            if let Some((&value, p)) = b.segments.iter().zip(phases).find(|(v, _)| !valid(**v)) {
                let phase = p.to_string();
                return Err(ChartError::InvalidValue { bar, phase, value });
            }
        }
        if let Some((label, value)) = self.reference.filter(|r| !valid(r.1)) {
            let label = label.to_string();
            return Err(ChartError::InvalidReference { label, value });
        }
        let sums = bars.iter().map(|b| b.segments.iter().sum::<f64>());
        let top = sums.chain(self.reference.map(|r| r.1)).fold(0.0, f64::max);
        let top = if top > 0.0 { top * 1.3 } else { 1.0 };
        let n = bars.len();
        to_svg(self.note, |root| {
            let mut chart = builder(root, self.title).build_cartesian_2d(BarAxis(n), 0.0..top)?;
            let label_of = |x: &f64| bars.get(x.floor() as usize).map(|b| b.label.clone());
            chart
                .configure_mesh()
                .disable_x_mesh()
                .light_line_style(TRANSPARENT)
                .x_label_formatter(&|x| label_of(x).unwrap_or_default())
                .x_label_style(("sans-serif", 11))
                .y_label_formatter(&|y| seconds_tick(*y))
                .y_desc(self.y_label)
                .draw()?;
            for (p, phase) in phases.iter().enumerate() {
                let c = color(p);
                let rects = bars.iter().enumerate().filter(|(_, b)| b.segments[p] > 0.0);
                let rects = rects.map(|(i, b)| {
                    let lo: f64 = b.segments[..p].iter().sum();
                    let (x0, x1) = (i as f64 + 0.2, i as f64 + 0.8);
                    Rectangle::new([(x0, lo), (x1, lo + b.segments[p])], c.filled())
                });
                let swatch =
                    move |(x, y)| Rectangle::new([(x, y - 6), (x + 12, y + 6)], c.filled());
                chart.draw_series(rects)?.label(*phase).legend(swatch);
            }
            if let Some((label, y)) = self.reference {
                let style = REFERENCE_COLOR.stroke_width(2);
                let line = DashedLineSeries::new([(0.0, y), (n as f64, y)], 8, 5, style);
                let swatch = move |(x, y)| PathElement::new([(x, y), (x + 12, y)], style);
                chart.draw_series(line)?.label(label).legend(swatch);
            }
            legend(&mut chart, SeriesLabelPosition::UpperRight)
        })
    }
}

/// Renders a stacked bar chart without a reference line; see [`StackedChart`].
pub fn stacked_bars_svg(
    title: &str,
    y_label: &str,
    phases: &[&str],
    bars: &[Bar],
) -> Result<String, ChartError> {
    StackedChart::new(title, y_label, phases).render(bars)
}

/// One line of a scaling chart: `(data size, seconds per iteration)` points, any order.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend label (e.g. "virtual").
    pub label: String,
    /// Points `(x, y)`; both must be positive and finite (log-log axes).
    pub points: Vec<(f64, f64)>,
}

/// Renders a log-log line chart, one coloured line with point markers per series: `x` is
/// a count (labelled `20k`, `1M`), `y` seconds (labelled `500 µs`, `20 ms`, `2 s`).
/// `note`, if given, is printed under the plot.
pub fn scaling_svg(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    note: Option<&str>,
) -> Result<String, ChartError> {
    let all = || {
        series
            .iter()
            .flat_map(|s| s.points.iter().map(move |p| (s, *p)))
    };
    let bad = |v: f64| !(v.is_finite() && v > 0.0);
    if let Some((s, (x, y))) = all().find(|(_, (x, y))| bad(*x) || bad(*y)) {
        let series = s.label.clone();
        return Err(ChartError::NotPositive { series, x, y });
    }
    if all().next().is_none() {
        return Err(ChartError::Empty);
    }
    let span = |f: fn((f64, f64)) -> f64| {
        let v = || all().map(|(_, p)| f(p));
        (v().fold(f64::MAX, f64::min) / 1.5)..(v().fold(0.0, f64::max) * 1.5)
    };
    let (xr, yr) = (LogAxis::new(span(|p| p.0)), LogAxis::new(span(|p| p.1)));
    to_svg(note, |root| {
        let mut chart = builder(root, title).build_cartesian_2d(xr, yr)?;
        chart
            .configure_mesh()
            .light_line_style(TRANSPARENT)
            .x_labels(8)
            .y_labels(8)
            .x_desc(x_label)
            .y_desc(y_label)
            .x_label_formatter(&|v| count_tick(*v))
            .y_label_formatter(&|v| seconds_tick(*v))
            .draw()?;
        for (i, s) in series.iter().enumerate() {
            let c = color(i);
            let mut pts = s.points.clone();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            chart.draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))?;
            let marks = pts.iter().map(|p| Circle::new(*p, 4, c.filled()));
            let swatch = move |(x, y)| PathElement::new([(x, y), (x + 14, y)], c.stroke_width(2));
            chart.draw_series(marks)?.label(&s.label).legend(swatch);
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)
    })
}

type Root<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// Height of the strip under the plot that holds a note.
const NOTE_HEIGHT: u32 = 28;

/// Runs `draw` on a white SVG canvas, with `note` in a strip under it, and returns the
/// finished document.
fn to_svg(
    note: Option<&str>,
    draw: impl FnOnce(&Root<'_>) -> Result<(), ChartError>,
) -> Result<String, ChartError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        match note {
            Some(note) => {
                let (plot, strip) = root.split_vertically(SIZE.1 - NOTE_HEIGHT);
                draw(&plot)?;
                let style = ("sans-serif", 14).into_font().color(&REFERENCE_COLOR);
                strip.draw(&Text::new(note.to_string(), (16, 4), style))?;
            }
            None => draw(&root)?,
        }
        root.present()?;
    }
    Ok(svg)
}

fn builder<'a, 'b>(root: &'a Root<'b>, title: &str) -> ChartBuilder<'a, 'a, SVGBackend<'b>> {
    let mut b = ChartBuilder::on(root);
    b.caption(title, ("sans-serif", 22)).margin(12);
    b.x_label_area_size(40).y_label_area_size(70);
    b
}

fn legend<'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, CT>,
    position: SeriesLabelPosition,
) -> Result<(), ChartError> {
    let mut labels = chart.configure_series_labels();
    labels.position(position).background_style(WHITE.mix(0.85));
    Ok(labels.border_style(BLACK).draw()?)
}

fn valid(v: f64) -> bool {
    v.is_finite() && v >= 0.0
}

/// A count as a short tick label: `500`, `20k`, `1.5M`, `2G`.
fn count_tick(v: f64) -> String {
    let (scaled, unit) = match v.abs() {
        a if a >= 1e9 => (v / 1e9, "G"),
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e3 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    format!("{}{unit}", trim_number(scaled))
}

/// Seconds as a short tick label: `50 µs`, `2 ms`, `0.5 s`, `20 s`.
fn seconds_tick(v: f64) -> String {
    match v.abs() {
        0.0 => "0".into(),
        a if a < 1e-3 => format!("{} µs", trim_number(v * 1e6)),
        a if a < 0.1 => format!("{} ms", trim_number(v * 1e3)),
        _ => format!("{} s", trim_number(v)),
    }
}

/// `v` with at most 3 decimals and no trailing zeros.
fn trim_number(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A log-scale axis over a positive range whose key points are the 1-2-5 values in it,
/// or only the powers of ten when those would be too many, or 1..9 times the powers of
/// ten when the range is too narrow for two 1-2-5 values.
#[derive(Clone, Debug)]
struct LogAxis {
    lo: f64,
    hi: f64,
}

impl LogAxis {
    fn new(range: Range<f64>) -> Self {
        let (lo, hi) = (range.start, range.end);
        // A single point (or equal ends) still needs a span.
        let hi = if hi > lo { hi } else { lo * 10.0 };
        LogAxis { lo, hi }
    }

    /// The values `m · 10^k` inside the axis for `m` in `mantissas`, ascending.
    fn ticks(&self, mantissas: &[f64]) -> Vec<f64> {
        let first = self.lo.log10().floor() as i32;
        let last = self.hi.log10().ceil() as i32;
        (first..=last)
            .flat_map(|k| mantissas.iter().map(move |m| m * 10f64.powi(k)))
            .filter(|v| (self.lo..=self.hi).contains(v))
            .collect()
    }
}

impl Ranged for LogAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let (lo, hi) = (self.lo.log10(), self.hi.log10());
        let frac = (value.max(f64::MIN_POSITIVE).log10() - lo) / (hi - lo);
        limit.0 + (frac * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        // The same points for the light grid (drawn transparent) as for the bold one.
        let max = hint.max_num_points().max(2);
        let steps = self.ticks(&[1.0, 2.0, 5.0]);
        if steps.len() > max {
            let decades = self.ticks(&[1.0]);
            let every = decades.len().div_ceil(max).max(1);
            return decades.into_iter().step_by(every).collect();
        }
        if steps.len() >= 2 {
            return steps;
        }
        let fine = self.ticks(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
        if fine.len() <= max {
            fine
        } else {
            fine.into_iter().step_by(2).collect()
        }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

/// X axis of the bar chart: `n` unit-wide slots, one tick (the bar label) per slot centre.
#[derive(Clone, Copy)]
struct BarAxis(usize);

impl Ranged for BarAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let frac = value / self.0 as f64;
        limit.0 + (frac * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, _hint: H) -> Vec<f64> {
        (0..self.0).map(|i| i as f64 + 0.5).collect()
    }

    fn range(&self) -> Range<f64> {
        0.0..self.0 as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bar(label: &str, segments: &[f64]) -> Bar {
        let (label, segments) = (label.into(), segments.to_vec());
        Bar { label, segments }
    }

    fn series(label: &str, points: &[(f64, f64)]) -> Series {
        let (label, points) = (label.into(), points.to_vec());
        Series { label, points }
    }

    /// Number of `tag` elements (e.g. `<rect`) filled with palette colour `i`.
    fn filled(svg: &str, tag: &str, i: usize) -> usize {
        let fill = format!("fill=\"#{:06X}\"", PALETTE[i]);
        svg.lines()
            .filter(|l| l.starts_with(tag) && l.contains(&fill))
            .count()
    }

    /// Checks the document frame and that each `|`-separated text is a `<text>` body,
    /// which plotters-svg writes on a line of its own.
    fn has_texts(svg: &str, texts: &str) {
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        for text in texts.split('|') {
            assert!(svg.lines().any(|l| l == text), "missing text {text}");
        }
    }

    const PHASES: [&str; 4] = ["preprocess", "init", "first iteration", "rest (mean x 9)"];

    #[test]
    fn stacked_bars_render_labels_and_segments() {
        let bars = [
            bar("generic", &[0.1, 0.2, 0.5, 2.0]),
            bar("first-iter", &[0.0, 0.2, 0.6, 1.0]),
            bar("virtual", &[0.3, 0.0, 0.0, 0.4]),
        ];
        let chart = StackedChart::new("MF", "time (s)", &PHASES).with_reference("limit", 0.8);
        let svg = chart.render(&bars).unwrap();
        has_texts(&svg, "generic|first-iter|virtual|limit|MF|time (s)");
        has_texts(&svg, &PHASES.join("|"));
        // Nonzero segments per phase, plus one legend swatch each.
        for (p, nonzero) in [2, 2, 2, 3].into_iter().enumerate() {
            assert_eq!(filled(&svg, "<rect", p), nonzero + 1, "phase {p}");
        }
        // The dashed reference line is many short polylines in its own colour.
        let dash = "<polyline fill=\"none\" opacity=\"1\" stroke=\"#333333\"";
        assert!(svg.matches(dash).count() > 3);
        let plain = stacked_bars_svg("MF", "s", &PHASES, &bars).unwrap();
        assert!(!plain.contains("#333333") && !plain.contains("limit"));
    }

    #[test]
    fn all_zero_single_bar_renders() {
        let svg = stacked_bars_svg("t", "s", &["a", "b"], &[bar("only", &[0.0, 0.0])]).unwrap();
        has_texts(&svg, "only|a|b");
        assert_eq!((filled(&svg, "<rect", 0), filled(&svg, "<rect", 1)), (1, 1));
    }

    #[test]
    fn stacked_bars_errors() {
        let ph = ["a", "b"];
        let err = |ph: &[&str], bars: &[Bar]| stacked_bars_svg("t", "s", ph, bars).unwrap_err();
        assert_eq!(err(&ph, &[]), ChartError::Empty);
        assert_eq!(err(&[], &[bar("x", &[])]), ChartError::Empty);
        let e = err(&ph, &[bar("x", &[1.0])]);
        let want = "bar `x` has 1 segments but there are 2 phases";
        assert!(matches!(e, ChartError::SegmentCount { .. }) && e.to_string() == want);
        for v in [-1.0, f64::INFINITY, f64::NAN] {
            let e = err(&ph, &[bar("ok", &[1.0, 1.0]), bar("x", &[1.0, v])]);
            let want = format!("bar `x`, phase `b`: value {v} is negative or not finite");
            assert!(matches!(e, ChartError::InvalidValue { .. }) && e.to_string() == want);
        }
        let chart = StackedChart::new("t", "s", &ph).with_reference("limit", -0.5);
        let e = chart.render(&[bar("x", &[1.0; 2])]).unwrap_err();
        let want = "reference `limit`: value -0.5 is negative or not finite";
        assert!(matches!(e, ChartError::InvalidReference { .. }) && e.to_string() == want);
    }

    #[test]
    fn scaling_renders_series() {
        let s = [
            series("generic", &[(1e3, 0.5), (1e4, 4.0), (1e5, 41.0)]),
            series("virtual", &[(1e5, 20.0), (1e3, 0.2), (1e4, 2.1)]),
            series("limit", &[(1e4, 1.0)]),
        ];
        let svg = scaling_svg("scaling", "ratings", "s / iteration", &s, Some("a note")).unwrap();
        has_texts(
            &svg,
            "generic|virtual|limit|scaling|ratings|s / iteration|a note",
        );
        for (i, n) in [3, 3, 1].into_iter().enumerate() {
            assert_eq!(filled(&svg, "<circle", i), n, "markers of series {i}");
        }
        let solo = scaling_svg("t", "x", "y", &[series("solo", &[(5.0, 5.0)])], None).unwrap();
        has_texts(&solo, "solo");
    }

    #[test]
    fn scaling_errors() {
        let err = |s: &[Series]| scaling_svg("t", "x", "y", s, None).unwrap_err();
        assert_eq!(err(&[]), ChartError::Empty);
        assert_eq!(err(&[series("a", &[])]), ChartError::Empty);
        let (inf, nan) = (f64::INFINITY, f64::NAN);
        for (x, y) in [(0.0, 1.0), (1.0, -2.0), (inf, 1.0), (1.0, nan)] {
            let e = err(&[
                series("ok", &[(1.0, 1.0)]),
                series("bad", &[(2.0, 2.0), (x, y)]),
            ]);
            let want = format!("series `bad`: point ({x}, {y}) must be positive and finite");
            assert!(
                matches!(e, ChartError::NotPositive { .. }) && e.to_string().starts_with(&want)
            );
        }
    }

    #[test]
    fn log_axis_labels_are_few_and_spread() {
        let hint = 8usize;
        let points = |lo: f64, hi: f64| LogAxis::new(lo..hi).key_points(hint);
        // tiny..small MF: 1-2-5 steps, not the crowded 60000 70000 80000 90000 100000.
        assert_eq!(points(2200.0, 134_000.0), [5e3, 1e4, 2e4, 5e4, 1e5]);
        // Many decades: only powers of ten, at most `hint` of them.
        let wide = points(1e-6, 1e3);
        assert!(wide.len() <= hint && wide.iter().all(|v| v.log10().fract().abs() < 1e-9));
        // A narrow range still gets two labels or more.
        assert!(points(3000.0, 4500.0).len() >= 2);
    }

    #[test]
    fn tick_labels_read_as_counts_and_times() {
        assert_eq!(count_tick(500.0), "500");
        assert_eq!(count_tick(20_000.0), "20k");
        assert_eq!(count_tick(1_500_000.0), "1.5M");
        assert_eq!(seconds_tick(0.0), "0");
        assert_eq!(seconds_tick(5e-5), "50 µs");
        assert_eq!(seconds_tick(0.002), "2 ms");
        assert_eq!(seconds_tick(0.05), "50 ms");
        assert_eq!(seconds_tick(0.5), "0.5 s");
    }

    #[test]
    fn stacked_bars_carry_a_note() {
        let chart = StackedChart::new("t", "s", &["a"]).with_note("too small to measure");
        let svg = chart.render(&[bar("x", &[1.0])]).unwrap();
        has_texts(&svg, "too small to measure");
    }
}
