//! The algorithms of the bundled iterstore apps and what is built from them without the
//! parameter server: the kernels of matrix factorization ([`mf`]), LDA ([`lda`]) and
//! PageRank ([`pagerank`]) with what they share ([`Rng64`], [`partition`], [`IterStats`]);
//! the hand-written in-memory implementations of each app in [`limit`] ("the limit" a
//! store-backed run is compared to); and the neural networks in [`dnn`] ([`dnn::Mlp`],
//! [`dnn::Cnn`], their dense kernels and partitioned layouts).
//!
//! The store-backed apps (the `iterstore-apps` crate) and the limits call the same kernels,
//! so both compute the same model. The heavy numeric dependencies (`matrixmultiply`'s GEMM,
//! `multiversion`'s per-CPU code paths) are used only here.
//!
//! Each algorithm module holds one algorithm as pure functions on slices: the per-element
//! update ([`mf::sgd_step`], [`lda::TopicSampler::sample`], the [`pagerank`] step terms),
//! the deterministic initialisation and seeding, the objective, and a plain sequential
//! `reference` implementation that serves as the oracle in tests.
//!
//! The crate root owns the pieces the three algorithms share: the deterministic [`Rng64`]
//! (keyed by seed, table, row, iteration, ... so any worker can reproduce any draw without
//! coordination), the data [`partition`] every implementation uses, and [`IterStats`].
//!
//! The kernels know nothing of threads, of the parameter server or of files: callers decide
//! where rows live and how updates are applied ([`limit`] adds the threads). The crate does
//! not depend on the parameter server at all.

#![warn(missing_docs)]

pub mod dnn;
pub mod graph_partition;
pub mod in_edges;
pub mod lbfgs;
pub mod lda;
pub mod limit;
pub mod logreg;
pub mod mf;
pub mod pagerank;
pub mod ratings_layout;

use std::ops::Range;

/// What one iteration of an app cost and achieved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IterStats {
    /// 0-based index of the iteration.
    pub iter: usize,
    /// Wall-clock seconds the iteration took (model evaluation excluded).
    pub seconds: f64,
    /// The app's objective after the iteration: training RMSE (MF), log-likelihood (LDA) or
    /// L1 change of the ranks (PageRank).
    pub objective: f64,
    /// The objective on held-out data, when the app has some (MF test RMSE).
    pub held_out: Option<f64>,
}

/// The items worker `worker` of `workers` owns out of `n` items given in order: the
/// contiguous chunk `[worker·n/W, (worker+1)·n/W)`.
///
/// Every implementation (store-backed or limit) partitions ratings, documents and edges
/// this way, so a given worker sees the same data everywhere.
///
/// # Panics
/// If `workers` is 0 or `worker >= workers`.
pub fn partition(n: usize, workers: usize, worker: usize) -> Range<usize> {
    assert!(worker < workers, "worker {worker} out of {workers}");
    let at = |w: usize| ((w as u128 * n as u128) / workers as u128) as usize;
    at(worker)..at(worker + 1)
}

/// SplitMix64 finaliser: a bijective 64-bit mix with good avalanche.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A small, fast, deterministic random number generator (SplitMix64).
///
/// Generators are created from a key (seed, purpose, indices...) rather than shared, so a
/// draw depends only on its key and never on thread scheduling. Not cryptographic.
#[derive(Debug, Clone)]
pub struct Rng64 {
    state: u64,
}

impl Rng64 {
    const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

    /// A generator whose stream is a function of `key` only (order-sensitive).
    pub fn from_key(key: &[u64]) -> Self {
        let state = key.iter().fold(0x6a09_e667_f3bc_c909, |h, &k| {
            mix64(h ^ mix64(k.wrapping_add(Self::GAMMA)))
        });
        Self { state }
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(Self::GAMMA);
        mix64(self.state)
    }

    /// A uniform draw from `[0, 1)` with 53 random bits.
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform draw from `[0, 1)` with 24 random bits.
    #[inline]
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / (1u32 << 24) as f32)
    }

    /// A uniform draw from `0..n` (multiply-shift; bias below 2⁻³² for `n < 2³²`).
    ///
    /// # Panics
    /// If `n` is 0.
    #[inline]
    pub fn below(&mut self, n: u32) -> u32 {
        assert!(n > 0, "Rng64::below(0)");
        ((u64::from(self.next_u64() as u32) * u64::from(n)) >> 32) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_covers_everything_in_order() {
        for n in [0usize, 1, 7, 10, 1001] {
            for workers in 1..6 {
                let mut next = 0;
                for w in 0..workers {
                    let r = partition(n, workers, w);
                    assert_eq!(r.start, next);
                    assert!(r.len() <= n / workers + 1);
                    next = r.end;
                }
                assert_eq!(next, n);
            }
        }
    }

    #[test]
    fn rng_is_keyed_and_roughly_uniform() {
        let a: Vec<u64> = (0..4)
            .map(|_| Rng64::from_key(&[1, 2]).next_u64())
            .collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(
            Rng64::from_key(&[1, 2]).next_u64(),
            Rng64::from_key(&[2, 1]).next_u64()
        );
        let mut rng = Rng64::from_key(&[7]);
        let mut hist = [0u32; 10];
        let mut sum = 0.0;
        for _ in 0..100_000 {
            hist[rng.below(10) as usize] += 1;
            let x = rng.next_f64();
            assert!((0.0..1.0).contains(&x));
            sum += x;
        }
        assert!(
            hist.iter().all(|&h| (9_000..11_000).contains(&h)),
            "{hist:?}"
        );
        assert!((sum / 100_000.0 - 0.5).abs() < 0.01);
    }
}
