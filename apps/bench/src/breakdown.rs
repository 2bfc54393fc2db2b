//! [`Breakdown`]: a run's time split the way IterStore's Figure 5 splits it —
//! preprocessing (gathering the pattern and building the specialized store),
//! initialisation, the first iteration, and the mean of the iterations after it.

use serde::Serialize;

use iterstore_algo::limit::IterStats;
use iterstore_apps::RunReport;

/// The phase names, in stacking order.
pub const PHASES: [&str; 4] = [
    "preprocess",
    "init",
    "first iteration",
    "later iterations (mean)",
];

/// Seconds per phase of one run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Breakdown {
    /// Gathering the pattern and building the specialized store: the virtual iteration
    /// (virtual mode) or the plan build at the end of the first iteration (first-iter mode,
    /// then *not* counted in `first_iter_s`); 0 for generic mode and the limit.
    pub preprocess_s: f64,
    /// The initialisation run (0 where not measured separately: the limit).
    pub init_s: f64,
    /// The first iteration.
    pub first_iter_s: f64,
    /// Mean of the iterations after the first (equal to `first_iter_s` with one iteration).
    pub rest_mean_s: f64,
    /// How many iterations `rest_mean_s` averages.
    pub rest_iters: usize,
}

impl Breakdown {
    /// The phases of a store-backed app run.
    pub fn of_report(report: &RunReport) -> Self {
        let seconds: Vec<f64> = report.iterations.iter().map(|r| r.seconds).collect();
        // In first-iter mode the plan is built inside the first iteration's run.
        let in_first = if report.mode == "first-iter" {
            report.specialize_s
        } else {
            0.0
        };
        let mut b = Self::of_iterations(&seconds);
        b.first_iter_s = (b.first_iter_s - in_first).max(0.0);
        b.preprocess_s = report.preprocess_s + in_first;
        b.init_s = report.init_s;
        b
    }

    /// The phases of a limit run (iterations only).
    pub fn of_limit(stats: &[IterStats]) -> Self {
        let seconds: Vec<f64> = stats.iter().map(|s| s.seconds).collect();
        Self::of_iterations(&seconds)
    }

    fn of_iterations(seconds: &[f64]) -> Self {
        let first = seconds.first().copied().unwrap_or(0.0);
        let rest = seconds.get(1..).unwrap_or(&[]);
        let rest_mean_s = if rest.is_empty() {
            first
        } else {
            rest.iter().sum::<f64>() / rest.len() as f64
        };
        Breakdown {
            preprocess_s: 0.0,
            init_s: 0.0,
            first_iter_s: first,
            rest_mean_s,
            rest_iters: rest.len(),
        }
    }

    /// The phases in [`PHASES`] order.
    pub fn segments(&self) -> [f64; 4] {
        [
            self.preprocess_s,
            self.init_s,
            self.first_iter_s,
            self.rest_mean_s,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iterstore_apps::{AppConfig, IterRecord};

    fn report(mode: iterstore::Mode, iters: &[f64]) -> RunReport {
        let cfg = AppConfig {
            mode,
            ..AppConfig::default()
        };
        let mut r = RunReport::new("mf", "train_rmse", &cfg);
        for (i, &seconds) in iters.iter().enumerate() {
            r.iterations.push(IterRecord {
                iter: i,
                seconds,
                objective: 0.0,
                test_rmse: None,
                test_accuracy: None,
                rss_bytes: None,
                bytes_sent: 0,
                messages_sent: 0,
            });
        }
        r.init_s = 0.5;
        r
    }

    #[test]
    fn splits_phases_per_mode() {
        let mut r = report(iterstore::Mode::Virtual, &[4.0, 1.0, 3.0]);
        r.preprocess_s = 0.25;
        r.specialize_s = 0.1;
        let b = Breakdown::of_report(&r);
        assert_eq!(b.segments(), [0.25, 0.5, 4.0, 2.0]);
        assert_eq!(b.rest_iters, 2);

        let mut r = report(iterstore::Mode::FirstIter, &[4.0, 1.0]);
        r.specialize_s = 1.5;
        let b = Breakdown::of_report(&r);
        assert_eq!(
            b.segments(),
            [1.5, 0.5, 2.5, 1.0],
            "the build moves to preprocess"
        );

        let b = Breakdown::of_report(&report(iterstore::Mode::Generic, &[2.0]));
        assert_eq!(b.segments(), [0.0, 0.5, 2.0, 2.0]);
        assert_eq!(b.rest_iters, 0);
    }
}
