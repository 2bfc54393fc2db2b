//! TPE (Bergstra et al., NeurIPS 2011) through the `tpe` crate: one optimizer per
//! tunable (Parzen estimators for a continuous coordinate, a histogram for a choice's
//! index), after [`SearchOptions::startup`] uniform draws. A trial without a score is
//! told `+∞`, worse than any scored trial.

use super::{random, SearchOptions, Searcher};
use crate::space::{Domain, Setting, Space};
use rand::rngs::StdRng;
use rand::SeedableRng as _;
use tpe::TpeOptimizer;

/// One TPE optimizer per tunable.
pub(super) struct Tpe {
    space: Space,
    optimizers: Vec<TpeOptimizer>,
    rng: StdRng,
    startup: usize,
    told: usize,
    /// Proposed settings waiting for their score, with the coordinates drawn for them.
    pending: Vec<(Setting, Vec<f64>)>,
}

impl Tpe {
    pub(super) fn new(space: &Space, options: &SearchOptions) -> Self {
        let optimizers = space
            .tunables()
            .iter()
            .map(|t| {
                let (a, b) = t.domain().coordinates();
                // `Space::new` checked a < b, finite: the ranges are valid.
                let range = tpe::range(a, b).expect("a checked, non-empty range");
                match t.domain() {
                    Domain::Choice(_) => TpeOptimizer::new(tpe::histogram_estimator(), range),
                    _ => TpeOptimizer::new(tpe::parzen_estimator(), range),
                }
            })
            .collect();
        Self {
            space: space.clone(),
            optimizers,
            rng: StdRng::seed_from_u64(options.seed),
            startup: options.startup,
            told: 0,
            pending: Vec::new(),
        }
    }
}

impl Searcher for Tpe {
    fn propose(&mut self) -> Option<Setting> {
        let c: Vec<f64> = if self.told < self.startup {
            random::draw(&self.space, &mut self.rng)
        } else {
            let rng = &mut self.rng;
            self.optimizers
                .iter_mut()
                .map(|o| match o.ask(rng) {
                    Ok(c) => c,
                    Err(never) => match never {},
                })
                .collect()
        };
        let setting = self.space.setting(&c);
        self.pending.push((setting.clone(), c));
        Some(setting)
    }

    fn observe(&mut self, setting: &Setting, score: Option<f64>) {
        let Some(i) = self.pending.iter().position(|(s, _)| s == setting) else {
            return;
        };
        let (_, c) = self.pending.swap_remove(i);
        let value = score.filter(|s| !s.is_nan()).unwrap_or(f64::INFINITY);
        for (o, c) in self.optimizers.iter_mut().zip(c) {
            // The coordinate was drawn inside the optimizer's range; a refusal cannot
            // happen, and would only lose this observation.
            let _ = o.tell(c, value);
        }
        self.told += 1;
    }
}
