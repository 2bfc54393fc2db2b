//! Scaling: per-iteration time against input size, for the generic and virtual modes and
//! the limit, on the seeded synthetic inputs ([`iterstore_data::synth`] presets), so the
//! growth of cost with work is visible.

use iterstore::Mode;
use serde::Serialize;

use super::{bench_app, BenchOptions, Variant, Workload};
use iterstore_apps::AppError;

/// One input size's mean later-iteration times.
#[derive(Debug, Clone, Serialize)]
pub struct ScalingPoint {
    /// The preset name (`tiny`, `small`, …).
    pub size: String,
    /// Per-iteration work in the app's unit.
    pub work: u64,
    /// Generic mode, seconds per later iteration.
    pub generic_s: f64,
    /// Virtual mode, seconds per later iteration.
    pub virtual_s: f64,
    /// The limit implementation, seconds per later iteration (NaN when not run).
    pub limit_s: f64,
}

/// One app's scaling curve.
#[derive(Debug, Clone, Serialize)]
pub struct Scaling {
    /// `mf`, `lda` or `pagerank`.
    pub app: &'static str,
    /// What `work` counts.
    pub work_unit: &'static str,
    /// PageRank's rank-table block size (vertices per row); `None` for the other apps.
    pub block: Option<usize>,
    /// One point per size, in the order given.
    pub points: Vec<ScalingPoint>,
}

/// Runs generic, virtual and (unless `opts.limit` is off) the limit on each of `workloads` (`(size, workload)`, all of
/// one app, smallest first) with `opts`' workers and iterations; `progress` hears one line
/// per run.
pub fn scaling(
    workloads: &[(String, Workload)],
    opts: &BenchOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<Option<Scaling>, AppError> {
    let Some((_, first)) = workloads.first() else {
        return Ok(None);
    };
    let opts = BenchOptions {
        variants: vec![Variant::mode(Mode::Generic), Variant::mode(Mode::Virtual)],
        peers: false,
        ..opts.clone()
    };
    let mut points = Vec::with_capacity(workloads.len());
    for (size, workload) in workloads {
        let mut tagged = |line: &str| progress(&format!("[scaling {size}] {line}"));
        let bench = bench_app(workload, size, &opts, &mut tagged)?;
        let rest = |name: &str| {
            bench
                .run(name)
                .map_or(f64::NAN, |r| r.breakdown.rest_mean_s)
        };
        points.push(ScalingPoint {
            size: size.clone(),
            work: bench.work,
            generic_s: rest("generic"),
            virtual_s: rest("virtual"),
            limit_s: bench
                .limit
                .as_ref()
                .map_or(f64::NAN, |l| l.breakdown.rest_mean_s),
        });
    }
    Ok(Some(Scaling {
        app: first.app(),
        work_unit: first.work_unit(),
        block: first.block(),
        points,
    }))
}
