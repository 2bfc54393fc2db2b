//! Every branch's loss against the tuner's time as an SVG picture (the thesis proposal's
//! Figure 14): one line per branch, the branches a search chose drawn bold, a log-scaled
//! loss axis when the losses span more than a decade, up to 10x the largest starting
//! loss (a diverged branch leaves at the top).

use crate::timeline::Timeline;
use std::fmt::Write as _;

const W: f64 = 900.0;
const H: f64 = 520.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 250.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 50.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// Escapes text for SVG.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Draws `timeline`'s curves.
pub(crate) fn draw(timeline: &Timeline) -> String {
    let points = timeline.curves.iter().flat_map(|c| c.points.iter());
    let finite: Vec<(f64, f64)> = points
        .filter(|(t, l)| t.is_finite() && l.is_finite())
        .copied()
        .collect();
    let t_max = finite.iter().map(|p| p.0).fold(0.0f64, f64::max).max(1e-9);
    let (lo, hi) = finite
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
            (a.min(p.1), b.max(p.1))
        });
    // A diverged branch's losses would stretch the axis over many decades and flatten
    // every other curve: the axis stops at 10x the largest loss a branch started from
    // (the tuner's divergence threshold); higher points are drawn at the top.
    let starts = timeline.curves.iter().filter_map(|c| {
        c.points
            .iter()
            .map(|p| p.1)
            .find(|l| l.is_finite() && *l > 0.0)
    });
    let cap = starts.fold(0.0f64, f64::max) * 10.0;
    let hi = if cap > lo { hi.min(cap) } else { hi };
    let log = lo > 0.0 && hi / lo > 10.0;
    let f = |v: f64| if log { v.ln() } else { v };
    let (y0, y1) = if finite.is_empty() {
        (0.0, 1.0)
    } else {
        (f(lo), f(hi).max(f(lo) + 1e-12))
    };
    let x = |t: f64| LEFT + (W - LEFT - RIGHT) * t / t_max;
    let y = |v: f64| TOP + (H - TOP - BOTTOM) * (1.0 - (f(v).clamp(y0, y1) - y0) / (y1 - y0));
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" \
         fill=\"white\"/>\n"
    );
    let (ax0, ay1) = (LEFT, H - BOTTOM);
    let _ = writeln!(
        s,
        "<path d=\"M{ax0} {TOP} V{ay1} H{}\" stroke=\"black\" fill=\"none\"/>",
        W - RIGHT
    );
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">time (s), 0 to {t_max:.1}</text>",
        (LEFT + W - RIGHT) / 2.0,
        H - 15.0
    );
    let scale = if log { "log scale" } else { "linear" };
    let _ = writeln!(
        s,
        "<text x=\"15\" y=\"{}\" transform=\"rotate(-90 15 {})\" text-anchor=\"middle\">\
         training loss ({scale}), {lo:.4} to {hi:.4}</text>",
        H / 2.0,
        H / 2.0
    );
    for (i, c) in timeline.curves.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let width = if c.chosen { 3.0 } else { 1.2 };
        let path: Vec<String> = c
            .points
            .iter()
            .filter(|(t, l)| t.is_finite() && l.is_finite())
            .map(|(t, l)| format!("{:.1},{:.1}", x(*t), y(*l)))
            .collect();
        if !path.is_empty() {
            let _ = writeln!(
                s,
                "<polyline points=\"{}\" stroke=\"{color}\" stroke-width=\"{width}\" \
                 fill=\"none\"><title>branch {} {}</title></polyline>",
                path.join(" "),
                c.branch,
                esc(&c.setting.to_string())
            );
        }
        if i < 30 {
            let ly = TOP + 16.0 * i as f64;
            let _ = writeln!(
                s,
                "<text x=\"{}\" y=\"{ly}\" fill=\"{color}\">{}branch {}: {}</text>",
                W - RIGHT + 10.0,
                if c.chosen { "▶ " } else { "" },
                c.branch,
                esc(&c.setting.to_string())
            );
        }
    }
    s.push_str("</svg>\n");
    s
}
