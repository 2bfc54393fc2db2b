//! Searchers: what proposes the next [`Setting`] to try and learns from each trial's
//! score — [`SearcherKind::Tpe`] (the default, through the `tpe` crate),
//! [`SearcherKind::Grid`] and [`SearcherKind::Random`].
//!
//! A score is lower-is-better: the tuner gives a trial's progress slope (negative when
//! its loss falls; see `crate::progress`) and `None` for a trial that made no progress or
//! diverged, which a searcher counts as worse than any trial that did. TPE and random
//! search stop when the best [`SearchOptions::top`] scores lie within
//! [`SearchOptions::within`] of each other (MLtuner's rule: more trials would not find a
//! setting much better), or after [`SearchOptions::max_trials`]; the grid stops when it
//! has proposed every point.

mod grid;
mod random;
mod tpe;

use crate::space::{Setting, Space};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Proposes settings and learns from their scores.
pub trait Searcher: Send {
    /// The next setting to try, or `None` when the search is over.
    fn propose(&mut self) -> Option<Setting>;

    /// The score of a setting it proposed: lower is better, `None` for a trial that made
    /// no progress or diverged.
    fn observe(&mut self, setting: &Setting, score: Option<f64>);
}

/// Which searcher to build ([`searcher`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SearcherKind {
    /// Tree-structured Parzen estimators (Bergstra et al.), one per tunable.
    #[default]
    Tpe,
    /// Every point of a grid ([`SearchOptions::grid_points`] per continuous tunable).
    Grid,
    /// Uniform draws in each tunable's coordinate.
    Random,
}

impl fmt::Display for SearcherKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SearcherKind::Tpe => "tpe",
            SearcherKind::Grid => "grid",
            SearcherKind::Random => "random",
        })
    }
}

impl FromStr for SearcherKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "tpe" => Ok(SearcherKind::Tpe),
            "grid" => Ok(SearcherKind::Grid),
            "random" => Ok(SearcherKind::Random),
            _ => Err(format!("unknown searcher {s:?} (tpe, grid or random)")),
        }
    }
}

/// How a searcher draws and when it stops.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchOptions {
    /// Seed of the random draws (TPE and random search are deterministic given it).
    pub seed: u64,
    /// Values per continuous tunable in a grid.
    pub grid_points: usize,
    /// Trials at most, whatever the scores.
    pub max_trials: usize,
    /// How many of the best scores must agree before a search stops.
    pub top: usize,
    /// How closely they must agree: `(s_top − s_best) ≤ within × |s_best|`.
    pub within: f64,
    /// Random trials before TPE models the scores.
    pub startup: usize,
}

impl Default for SearchOptions {
    fn default() -> Self {
        Self {
            seed: 42,
            grid_points: 7,
            max_trials: 40,
            top: 5,
            within: 0.1,
            startup: 3,
        }
    }
}

/// A searcher of `kind` over `space`.
pub fn searcher(kind: SearcherKind, space: &Space, options: &SearchOptions) -> Box<dyn Searcher> {
    match kind {
        SearcherKind::Grid => Box::new(grid::Grid::new(space, options.grid_points)),
        SearcherKind::Random => Box::new(Stopping::new(
            random::Random::new(space, options.seed),
            options,
        )),
        SearcherKind::Tpe => Box::new(Stopping::new(tpe::Tpe::new(space, options), options)),
    }
}

/// MLtuner's stopping rule around a searcher that would go on forever.
struct Stopping<S> {
    inner: S,
    proposed: usize,
    scores: Vec<f64>,
    max_trials: usize,
    top: usize,
    within: f64,
}

impl<S: Searcher> Stopping<S> {
    fn new(inner: S, options: &SearchOptions) -> Self {
        Self {
            inner,
            proposed: 0,
            scores: Vec::new(),
            max_trials: options.max_trials,
            top: options.top.max(1),
            within: options.within,
        }
    }
}

/// Whether the best `top` of `scores` lie within `within` (relative) of the best.
pub(crate) fn settled(scores: &[f64], top: usize, within: f64) -> bool {
    if scores.len() < top {
        return false;
    }
    let mut sorted = scores.to_vec();
    sorted.sort_by(f64::total_cmp);
    let (best, last) = (sorted[0], sorted[top - 1]);
    last - best <= within * best.abs()
}

impl<S: Searcher> Searcher for Stopping<S> {
    fn propose(&mut self) -> Option<Setting> {
        if self.proposed >= self.max_trials || settled(&self.scores, self.top, self.within) {
            return None;
        }
        let s = self.inner.propose()?;
        self.proposed += 1;
        Some(s)
    }

    fn observe(&mut self, setting: &Setting, score: Option<f64>) {
        if let Some(s) = score.filter(|s| s.is_finite()) {
            self.scores.push(s);
        }
        self.inner.observe(setting, score);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::Tunable;

    fn lr_space() -> Space {
        Space::new(vec![Tunable::log_uniform("lr", 1e-4, 10.0)]).unwrap()
    }

    /// A score with its best at lr = 0.1 (log distance), `None` (diverged) above 1.
    fn score(s: &Setting) -> Option<f64> {
        let lr = s.get("lr").unwrap();
        (lr <= 1.0).then(|| -1.0 / (1.0 + (lr / 0.1).ln().powi(2)))
    }

    fn best_of(kind: SearcherKind, options: &SearchOptions) -> (f64, usize) {
        let mut searcher = searcher(kind, &lr_space(), options);
        let (mut best, mut best_lr, mut n) = (f64::INFINITY, 0.0, 0);
        while let Some(s) = searcher.propose() {
            let v = score(&s);
            searcher.observe(&s, v);
            n += 1;
            if let Some(v) = v.filter(|v| *v < best) {
                best = v;
                best_lr = s.get("lr").unwrap();
            }
        }
        (best_lr, n)
    }

    #[test]
    fn every_searcher_finds_the_best_region_and_stops() {
        let options = SearchOptions {
            max_trials: 60,
            ..SearchOptions::default()
        };
        for kind in [SearcherKind::Tpe, SearcherKind::Random, SearcherKind::Grid] {
            let (lr, n) = best_of(kind, &options);
            assert!((0.02..0.5).contains(&lr), "{kind}: best lr {lr}");
            assert!(n <= 60, "{kind}: {n} trials");
            if kind == SearcherKind::Grid {
                assert_eq!(n, options.grid_points);
            }
        }
    }

    #[test]
    fn tpe_needs_fewer_trials_than_random_search_to_get_close() {
        // Trials until a score within 5 % of the optimum (-1), mean over seeds.
        let trials_to = |kind: SearcherKind| -> f64 {
            let mut total = 0;
            for seed in 0..8 {
                let options = SearchOptions {
                    seed,
                    max_trials: 200,
                    within: 0.0,
                    ..SearchOptions::default()
                };
                let mut s = searcher(kind, &lr_space(), &options);
                let mut n = 0;
                while let Some(setting) = s.propose() {
                    n += 1;
                    let v = score(&setting);
                    s.observe(&setting, v);
                    if v.is_some_and(|v| v < -0.95) {
                        break;
                    }
                }
                total += n;
            }
            total as f64 / 8.0
        };
        let (tpe, random) = (
            trials_to(SearcherKind::Tpe),
            trials_to(SearcherKind::Random),
        );
        assert!(tpe < random, "tpe {tpe} trials, random {random}");
    }

    #[test]
    fn the_stopping_rule_needs_top_scores_within_the_margin() {
        assert!(!settled(&[-1.0, -0.99], 5, 0.1));
        assert!(settled(&[-1.0, -0.99, -0.95, -0.92, -0.91, -0.1], 5, 0.1));
        assert!(!settled(&[-1.0, -0.99, -0.95, -0.92, -0.85], 5, 0.1));
        assert_eq!("grid".parse::<SearcherKind>(), Ok(SearcherKind::Grid));
        assert!("hyperband"
            .parse::<SearcherKind>()
            .unwrap_err()
            .contains("tpe"));
    }
}
