//! Random search: each tunable's coordinate drawn uniformly (so a log-uniform tunable is
//! uniform in its logarithm), from a seeded generator.

use super::Searcher;
use crate::space::{Setting, Space};
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};

/// Uniform draws over a space's coordinates.
pub(super) struct Random {
    space: Space,
    rng: StdRng,
}

impl Random {
    pub(super) fn new(space: &Space, seed: u64) -> Self {
        Self {
            space: space.clone(),
            rng: StdRng::seed_from_u64(seed),
        }
    }
}

/// A uniform draw of every coordinate of `space`.
pub(super) fn draw(space: &Space, rng: &mut StdRng) -> Vec<f64> {
    space
        .tunables()
        .iter()
        .map(|t| {
            let (a, b) = t.domain().coordinates();
            rng.random_range(a..b)
        })
        .collect()
}

impl Searcher for Random {
    fn propose(&mut self) -> Option<Setting> {
        let c = draw(&self.space, &mut self.rng);
        Some(self.space.setting(&c))
    }

    fn observe(&mut self, _: &Setting, _: Option<f64>) {}
}
