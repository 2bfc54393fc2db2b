//! `iterstore bench`: runs each app in every store mode and ablation, against the limit
//! implementations and peer libraries, and reports the paper's per-phase breakdown as a
//! terminal table, JSON and SVG charts.

pub mod chart;
pub mod peers;
