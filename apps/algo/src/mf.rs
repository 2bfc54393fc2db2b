//! Matrix factorization by stochastic gradient descent with per-row AdaGrad: the kernel.
//!
//! **Model.** A global mean `μ` (the mean training rating, fixed), a user table `L` and an
//! item table `R`. A row holds `rank` latent factors, then the row's bias, then the row's
//! AdaGrad accumulator `G` ([`width`] = `rank + 2` floats). A rating is predicted as
//! `μ + b_u + b_i + L_u · R_i`.
//!
//! **Step.** For one observed rating `x` with error `e = x − prediction`, the negative
//! gradients of the regularised squared loss `½e² + ½λ(‖L_u‖² + b_u² + ‖R_i‖² + b_i²)` are
//!
//! ```text
//! g_L = e R_i − λ L_u     g_bu = e − λ b_u
//! g_R = e L_u − λ R_i     g_bi = e − λ b_i
//! ```
//!
//! and each row moves by `η / √G` times its gradient, where `G` is the row's accumulator
//! *before* the step; then `G` grows by the mean squared gradient of the row's `rank + 1`
//! learned entries. This is LIBMF's per-row AdaGrad (one accumulator per row, the mean of
//! the squared gradient added after the step), with bias terms added. All deltas, `ΔG`
//! included, are computed from the rows before the step and are additive, which is what a
//! parameter server `UPDATE` needs: the accumulators are shared state like the factors.
//!
//! **Many workers.** Under BSP `W` workers step from the same start-of-clock rows and the
//! store sums their deltas, so a row rated by several workers moves up to `W` times as far
//! as one worker alone would take it. Two measures keep that bounded (see [`clocks`] and
//! [`initial_accumulator`]): an iteration is cut into mini-batches of about
//! [`MINI_BATCH`] ratings with one CLOCK after each, so a clock's stale steps are few; and
//! every accumulator starts at `W`, so a row's first steps are `1/√W` of one worker's,
//! while the accumulated squared gradients soon dominate and the step becomes LIBMF's.
//! With one worker `G` starts at 1, as in LIBMF.
//!
//! Initial rows are a deterministic function of `(seed, table, row, W)` ([`init_row`]),
//! so any worker can initialise any row on its own.
//!
//! This module does not know where rows live or when updates become visible; [`reference()`]
//! is the plain one-worker loop used as the test oracle.

use super::ratings_layout::RatingsPartition;
use super::{partition, Rng64};
use iterstore_data::{Rating, Ratings};

/// Ratings per mini-batch over all workers: each worker CLOCKs after its share of every
/// mini-batch (see [`clocks`]).
pub const MINI_BATCH: usize = 10_000;

/// The most CLOCKs one iteration makes: beyond it mini-batches grow with the data (every
/// CLOCK refreshes the rows a worker touches, so CLOCKs are not free).
pub const MAX_CLOCKS: usize = 64;

/// Floats per row beyond the factors: the bias and the AdaGrad accumulator.
pub const EXTRA_COLUMNS: usize = 2;

/// Row width for `rank` factors: factors, bias, accumulator.
#[inline]
pub const fn width(rank: usize) -> usize {
    rank + EXTRA_COLUMNS
}

/// CLOCKs per iteration over `num_ratings` training ratings: one per [`MINI_BATCH`] ratings,
/// at least 1 and at most [`MAX_CLOCKS`]. Every implementation cuts each worker's ratings
/// into this many contiguous mini-batches ([`mini_batch`]), the same at every worker count.
pub fn clocks(num_ratings: usize) -> usize {
    num_ratings.div_ceil(MINI_BATCH).clamp(1, MAX_CLOCKS)
}

/// The ratings mini-batch `batch` of `clocks` covers within one worker's `mine`.
pub fn mini_batch(mine: &[Rating], clocks: usize, batch: usize) -> &[Rating] {
    &mine[partition(mine.len(), clocks, batch)]
}

/// The AdaGrad accumulator every row starts with when `workers` workers train: `W`
/// (LIBMF's 1 for one worker). See the module docs.
pub fn initial_accumulator(workers: usize) -> f32 {
    workers.max(1) as f32
}

/// Hyper-parameters of MF.
#[derive(Debug, Clone, PartialEq)]
pub struct MfConfig {
    /// Number of latent factors per row.
    pub rank: usize,
    /// AdaGrad step size `η`: a row moves by `η/√G` times its gradient (LIBMF's `eta`,
    /// whose default is also 0.1).
    pub learning_rate: f32,
    /// L2 regularisation weight `λ` of factors and biases.
    pub regularization: f32,
    /// Initial factors are uniform in `[0, init_scale)`; biases start at 0.
    pub init_scale: f32,
    /// Seed of the initial factors.
    pub seed: u64,
    /// How the ratings are split over workers and mini-batches.
    pub partition: RatingsPartition,
}

impl Default for MfConfig {
    fn default() -> Self {
        Self {
            rank: 16,
            learning_rate: 0.1,
            regularization: 0.05,
            init_scale: 0.1,
            seed: 42,
            partition: RatingsPartition::Ratings,
        }
    }
}

impl MfConfig {
    /// Checks that every parameter is usable, naming the first one that is not.
    pub fn validate(&self) -> Result<(), String> {
        if self.rank == 0 {
            return Err("mf: rank must be at least 1".into());
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return Err(format!(
                "mf: learning_rate {} must be > 0",
                self.learning_rate
            ));
        }
        if !(self.regularization.is_finite() && self.regularization >= 0.0) {
            return Err(format!(
                "mf: regularization {} must be >= 0",
                self.regularization
            ));
        }
        if !(self.init_scale.is_finite() && self.init_scale >= 0.0) {
            return Err(format!("mf: init_scale {} must be >= 0", self.init_scale));
        }
        Ok(())
    }
}

/// Which factor table a row belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Factor {
    /// The user factor table `L`.
    User,
    /// The item factor table `R`.
    Item,
}

/// Checks that every rating names a user below `num_users` and an item below `num_items`
/// and has a finite value, naming the first one that does not.
pub fn check_ratings(ratings: &[Rating], num_users: u32, num_items: u32) -> Result<(), String> {
    match ratings
        .iter()
        .position(|r| r.user >= num_users || r.item >= num_items || !r.value.is_finite())
    {
        None => Ok(()),
        Some(i) => {
            let r = ratings[i];
            Err(format!(
                "mf: rating {i} ({}, {}, {}) outside {num_users} users × {num_items} items or not finite",
                r.user, r.item, r.value
            ))
        }
    }
}

/// The global mean `μ` of `ratings` (summed in f64, in order; 0 when empty).
pub fn global_mean(ratings: &[Rating]) -> f32 {
    if ratings.is_empty() {
        return 0.0;
    }
    (ratings.iter().map(|r| f64::from(r.value)).sum::<f64>() / ratings.len() as f64) as f32
}

/// Writes the initial value of row `index` of table `kind` into `out` (length
/// [`width`]`(rank)`) for a run of `workers` workers: factors uniform in
/// `[0, init_scale)` (a function of `(cfg.seed, kind, index)` only), bias 0, accumulator
/// [`initial_accumulator`]`(workers)`.
pub fn init_row(cfg: &MfConfig, kind: Factor, index: u32, workers: usize, out: &mut [f32]) {
    let table = match kind {
        Factor::User => 1,
        Factor::Item => 2,
    };
    let k = cfg.rank;
    let mut rng = Rng64::from_key(&[cfg.seed, table, u64::from(index)]);
    for x in &mut out[..k] {
        *x = rng.next_f32() * cfg.init_scale;
    }
    out[k] = 0.0;
    out[k + 1] = initial_accumulator(workers);
}

/// Initial table of `rows` rows, row-major (`rows × width(rank)`).
pub fn init_table(cfg: &MfConfig, kind: Factor, rows: u32, workers: usize) -> Vec<f32> {
    let mut table = vec![0.0; rows as usize * width(cfg.rank)];
    for (i, row) in table.chunks_exact_mut(width(cfg.rank)).enumerate() {
        init_row(cfg, kind, i as u32, workers, row);
    }
    table
}

/// `Σ a_j b_j`, summed in four interleaved lanes (then `(s0+s1)+(s2+s3)`, then the tail)
/// for speed; every implementation uses this function, so they round identically.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut s = [0.0f32; 4];
    let (ac, bc) = (a.chunks_exact(4), b.chunks_exact(4));
    let (at, bt) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for j in 0..4 {
            s[j] += x[j] * y[j];
        }
    }
    let mut sum = (s[0] + s[1]) + (s[2] + s[3]);
    for (x, y) in at.iter().zip(bt) {
        sum += x * y;
    }
    sum
}

/// The predicted rating `μ + b_u + b_i + L_u · R_i` for full rows `l` and `r` (width
/// `rank + 2`).
#[inline]
pub fn predict(mean: f32, l: &[f32], r: &[f32]) -> f32 {
    let k = l.len() - EXTRA_COLUMNS;
    mean + l[k] + r[k] + dot(&l[..k], &r[..k])
}

/// One AdaGrad step for the rating `rating` of user row `l` by item row `r` (full rows,
/// width `rank + 2`) given the global mean: writes the additive deltas of both rows into
/// `dl` and `dr` (same width: factors, bias, accumulator; see the module docs) and returns
/// the error `e = rating − prediction` before the step. The caller adds the deltas.
#[inline]
pub fn sgd_step(
    cfg: &MfConfig,
    mean: f32,
    l: &[f32],
    r: &[f32],
    rating: f32,
    dl: &mut [f32],
    dr: &mut [f32],
) -> f32 {
    let n = l.len();
    let k = n - EXTRA_COLUMNS;
    let (r, dl, dr) = (&r[..n], &mut dl[..n], &mut dr[..n]);
    let err = rating - predict(mean, l, r);
    let reg = cfg.regularization;
    // The step sizes depend only on the accumulators, not on the error.
    let (sl, sr) = (
        cfg.learning_rate / l[k + 1].sqrt(),
        cfg.learning_rate / r[k + 1].sqrt(),
    );
    // One pass over the factors: negative gradient `g`, delta `s·g`, and `Σ g²` in four
    // interleaved lanes (then `(s0+s1)+(s2+s3)`, then the tail, then the bias), as in
    // `dot`.
    // Each chunk of 4 is computed as whole arrays and stored as one, so the deltas leave
    // as 16-byte stores: the UPDATE that adds them reads them back with 16-byte loads,
    // which a store of four single floats cannot forward to (a stall per load).
    let (mut ql, mut qr) = ([0.0f32; 4], [0.0f32; 4]);
    let chunks = k / 4 * 4;
    for c in (0..chunks).step_by(4) {
        let a: [f32; 4] = l[c..c + 4].try_into().expect("4 factors");
        let b: [f32; 4] = r[c..c + 4].try_into().expect("4 factors");
        let gl: [f32; 4] = std::array::from_fn(|j| err * b[j] - reg * a[j]);
        let gr: [f32; 4] = std::array::from_fn(|j| err * a[j] - reg * b[j]);
        let step_l: [f32; 4] = std::array::from_fn(|j| sl * gl[j]);
        let step_r: [f32; 4] = std::array::from_fn(|j| sr * gr[j]);
        dl[c..c + 4].copy_from_slice(&step_l);
        dr[c..c + 4].copy_from_slice(&step_r);
        for j in 0..4 {
            ql[j] += gl[j] * gl[j];
            qr[j] += gr[j] * gr[j];
        }
    }
    let (mut sum_l, mut sum_r) = (
        (ql[0] + ql[1]) + (ql[2] + ql[3]),
        (qr[0] + qr[1]) + (qr[2] + qr[3]),
    );
    for j in chunks..=k {
        // The tail of the factors, then the bias (whose "other row" entry is 1).
        let (a, b) = (l[j], r[j]);
        let (ob, oa) = if j < k { (b, a) } else { (1.0, 1.0) };
        let (gl, gr) = (err * ob - reg * a, err * oa - reg * b);
        dl[j] = sl * gl;
        dr[j] = sr * gr;
        sum_l += gl * gl;
        sum_r += gr * gr;
    }
    let per = 1.0 / (k + 1) as f32;
    dl[k + 1] = sum_l * per;
    dr[k + 1] = sum_r * per;
    err
}

/// Adds `delta` to `row` element-wise.
#[inline]
pub fn add_into(row: &mut [f32], delta: &[f32]) {
    for (x, d) in row.iter_mut().zip(delta) {
        *x += d;
    }
}

/// `Σ (x − prediction)²` over `ratings` (in f64, in order), with predictions from `predict`
/// given `(user, item)`.
pub fn squared_error_with(ratings: &[Rating], mut predict: impl FnMut(u32, u32) -> f32) -> f64 {
    ratings
        .iter()
        .map(|r| {
            let e = f64::from(r.value - predict(r.user, r.item));
            e * e
        })
        .sum()
}

/// `Σ (x − prediction)²` over `ratings` for row-major tables `users` and `items` of
/// [`width`]`(rank)`-wide rows and global mean `mean`.
pub fn squared_error(
    ratings: &[Rating],
    mean: f32,
    users: &[f32],
    items: &[f32],
    rank: usize,
) -> f64 {
    let n = width(rank);
    squared_error_with(ratings, |u, i| {
        predict(
            mean,
            &users[u as usize * n..][..n],
            &items[i as usize * n..][..n],
        )
    })
}

/// Root-mean-square error from a squared-error sum over `count` ratings (0 when empty).
pub fn rmse_from(sum_squared: f64, count: usize) -> f64 {
    if count == 0 {
        0.0
    } else {
        (sum_squared / count as f64).sqrt()
    }
}

/// The model: global mean and the two tables, row-major, [`width`]`(rank)` floats per row.
#[derive(Debug, Clone, PartialEq)]
pub struct MfModel {
    /// Factors per row.
    pub rank: usize,
    /// The global mean `μ`.
    pub mean: f32,
    /// User rows, `num_users × width(rank)`.
    pub users: Vec<f32>,
    /// Item rows, `num_items × width(rank)`.
    pub items: Vec<f32>,
}

impl MfModel {
    /// The deterministic initial model for `ratings` (its dimensions and mean) when
    /// `workers` workers train.
    pub fn init(cfg: &MfConfig, ratings: &Ratings, workers: usize) -> Self {
        Self {
            rank: cfg.rank,
            mean: global_mean(&ratings.ratings),
            users: init_table(cfg, Factor::User, ratings.num_users, workers),
            items: init_table(cfg, Factor::Item, ratings.num_items, workers),
        }
    }

    /// Floats per row.
    pub fn width(&self) -> usize {
        width(self.rank)
    }

    /// RMSE of this model on `ratings`.
    pub fn rmse(&self, ratings: &[Rating]) -> f64 {
        rmse_from(
            squared_error(ratings, self.mean, &self.users, &self.items, self.rank),
            ratings.len(),
        )
    }
}

/// Plain sequential training, one worker: `iters` passes over the ratings in order, each
/// step applied immediately (with one worker the CLOCKs between mini-batches change
/// nothing). Returns the model and the training RMSE after each pass.
///
/// # Panics
/// If `cfg` or `ratings` is invalid.
pub fn reference(ratings: &Ratings, cfg: &MfConfig, iters: usize) -> (MfModel, Vec<f64>) {
    cfg.validate().unwrap();
    check_ratings(&ratings.ratings, ratings.num_users, ratings.num_items).unwrap();
    let n = width(cfg.rank);
    let mut m = MfModel::init(cfg, ratings, 1);
    let (mut dl, mut dr) = (vec![0.0; n], vec![0.0; n]);
    let mut history = Vec::with_capacity(iters);
    for _ in 0..iters {
        for r in &ratings.ratings {
            let (u, i) = (r.user as usize * n, r.item as usize * n);
            let (l, rr) = (&mut m.users[u..u + n], &mut m.items[i..i + n]);
            sgd_step(cfg, m.mean, l, rr, r.value, &mut dl, &mut dr);
            add_into(l, &dl);
            add_into(rr, &dr);
        }
        history.push(m.rmse(&ratings.ratings));
    }
    (m, history)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sgd_step_matches_the_formula() {
        let cfg = MfConfig {
            learning_rate: 0.1,
            regularization: 0.5,
            ..MfConfig::default()
        };
        // Rank 2: factors, bias, accumulator.
        let (l, r) = ([1.0, 2.0, 0.5, 4.0], [3.0, -1.0, -0.5, 1.0]);
        let (mut dl, mut dr) = ([0.0; 4], [0.0; 4]);
        let err = sgd_step(&cfg, 1.0, &l, &r, 5.0, &mut dl, &mut dr);
        assert_eq!(err, 3.0); // 5 − (1 + 0.5 − 0.5 + 3 − 2)
        let gl = [3.0 * 3.0 - 0.5, -3.0 - 1.0, 3.0 - 0.25];
        let gr = [3.0 - 1.5, 6.0 + 0.5, 3.0 + 0.25];
        for j in 0..3 {
            assert!((dl[j] - 0.1 / 2.0 * gl[j]).abs() < 1e-6, "{j}");
            assert!((dr[j] - 0.1 * gr[j]).abs() < 1e-6, "{j}");
        }
        let mean_sq = |g: [f32; 3]| g.iter().map(|x| x * x).sum::<f32>() / 3.0;
        assert!((dl[3] - mean_sq(gl)).abs() < 1e-4);
        assert!((dr[3] - mean_sq(gr)).abs() < 1e-4);
    }

    #[test]
    fn dot_handles_every_length() {
        for n in 0..11 {
            let l: Vec<f32> = (0..n).map(|x| x as f32).collect();
            let want: f32 = l.iter().map(|x| x * x).sum();
            assert_eq!(dot(&l, &l), want);
        }
    }

    #[test]
    fn init_rows_are_deterministic_and_in_range() {
        let cfg = MfConfig {
            rank: 8,
            init_scale: 0.3,
            ..MfConfig::default()
        };
        let (mut a, mut b, mut c) = ([0.0; 10], [0.0; 10], [0.0; 10]);
        init_row(&cfg, Factor::User, 5, 3, &mut a);
        init_row(&cfg, Factor::User, 5, 3, &mut b);
        init_row(&cfg, Factor::Item, 5, 3, &mut c);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a[..8].iter().all(|&x| (0.0..0.3).contains(&x)));
        assert_eq!(a[8..], [0.0, 3.0]);
    }

    #[test]
    fn clocks_grow_with_the_data_within_bounds() {
        assert_eq!(clocks(0), 1);
        assert_eq!(clocks(MINI_BATCH), 1);
        assert_eq!(clocks(90_000), 9);
        assert_eq!(clocks(usize::MAX / 2), MAX_CLOCKS);
        let mine: Vec<Rating> = (0..10)
            .map(|i| Rating {
                user: i,
                item: 0,
                value: 1.0,
            })
            .collect();
        let sizes: Vec<usize> = (0..3).map(|b| mini_batch(&mine, 3, b).len()).collect();
        assert_eq!(sizes, [3, 3, 4]);
    }

    #[test]
    fn validate_names_the_bad_parameter() {
        assert!(MfConfig::default().validate().is_ok());
        let bad = MfConfig {
            learning_rate: f32::NAN,
            ..MfConfig::default()
        };
        assert!(bad.validate().unwrap_err().contains("learning_rate"));
        assert!(MfConfig {
            rank: 0,
            ..MfConfig::default()
        }
        .validate()
        .is_err());
    }

    #[test]
    fn rmse_of_exact_model_is_zero() {
        let ratings = [
            Rating {
                user: 0,
                item: 1,
                value: 3.0,
            },
            Rating {
                user: 1,
                item: 0,
                value: 0.5,
            },
        ];
        // Rank 1, mean 1: user 0 = (1, bias 0), user 1 = (0, bias −0.5); item 0 = (5, 0),
        // item 1 = (1, bias 1).
        let m = MfModel {
            rank: 1,
            mean: 1.0,
            users: vec![1.0, 0.0, 1.0, 0.0, -0.5, 1.0],
            items: vec![5.0, 0.0, 1.0, 1.0, 1.0, 1.0],
        };
        assert_eq!(m.rmse(&ratings), 0.0);
        assert_eq!(m.rmse(&[]), 0.0);
        assert_eq!(global_mean(&ratings), 1.75);
    }
}
