//! SVG charts of benchmark results (stacked per-phase bars, scaling lines).
