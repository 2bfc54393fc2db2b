//! The benchmark harness behind `iterstore bench`: runs each app in every store mode and
//! ablation ([`Variant`]), against the limit implementations and peer libraries
//! ([`peers`]), and reports the paper's per-phase breakdown ([`Breakdown`]) as a terminal
//! table, JSON and SVG charts ([`report`], [`chart`]). [`bench_app`] benches one app on one
//! [`Workload`] under [`BenchOptions`] and returns an [`AppBench`].
//!
//! The drawing (`plotters`) and the peers (`libmf`) are compiled only here.
//!
//! - [`Variant`]: a store configuration (generic, first-iter, virtual, and virtual with
//!   one specialization off);
//! - [`Breakdown`]: a run's seconds per phase (IterStore's Figure 5);
//! - [`Workload`] and [`bench_app`]: one app on one loaded input, every variant, the limit
//!   and the peer;
//! - [`scaling`]: per-iteration time against input size;
//! - [`report`]: the whole report as JSON, a terminal table, Markdown and SVG charts;
//! - [`chart`] and [`peers`]: the SVG drawing and the peer systems.
//!
//! This crate knows nothing of the command line.

#![warn(missing_docs)]

mod breakdown;
pub mod chart;
mod logreg_limit;
pub mod peers;
pub mod report;
mod runner;
pub mod scaling;
mod variant;

pub use breakdown::{Breakdown, PHASES};
pub use runner::{bench_app, AppBench, BenchOptions, LimitResult, RunResult, Workload};
pub use variant::{Variant, SPECIALIZATIONS};
