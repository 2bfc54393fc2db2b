//! Matrix factorization by stochastic gradient descent: the kernel.
//!
//! The model is a user factor table `L` (one row of `rank` floats per user) and an item
//! factor table `R` (one row per item); a rating is predicted as `L_u · R_i`. For one
//! observed rating `x` the SGD step on the regularised squared loss
//! `½(x − L_u·R_i)² + ½λ(‖L_u‖² + ‖R_i‖²)` with learning rate `η` is
//!
//! ```text
//! e    = x − L_u · R_i
//! ΔL_u = η (e R_i − λ L_u)
//! ΔR_i = η (e L_u − λ R_i)
//! ```
//!
//! Both deltas are computed from the rows *before* the step and are additive, which is what
//! a parameter server `UPDATE` needs. Initial rows are a deterministic function of
//! `(seed, table, row)` ([`init_row`]), so any worker can initialise any row on its own.
//!
//! This module does not know where rows live, how many workers there are or when updates
//! become visible; [`reference()`] is the plain one-worker loop used as the test oracle.

use super::Rng64;
use crate::data::{Rating, Ratings};

/// Hyper-parameters of SGD matrix factorization.
#[derive(Debug, Clone, PartialEq)]
pub struct MfConfig {
    /// Number of latent factors per row.
    pub rank: usize,
    /// SGD step size `η`. Under BSP the `W` workers' steps on a row are computed from the
    /// same start-of-iteration value and then summed, so the stable step size shrinks as
    /// `W` grows.
    pub learning_rate: f32,
    /// L2 regularisation weight `λ`.
    pub regularization: f32,
    /// Initial factors are uniform in `[0, init_scale)`.
    pub init_scale: f32,
    /// Seed of the initial factors.
    pub seed: u64,
}

impl Default for MfConfig {
    fn default() -> Self {
        Self {
            rank: 16,
            learning_rate: 0.01,
            regularization: 0.05,
            init_scale: 0.5,
            seed: 42,
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

/// Writes the initial value of row `index` of table `kind` into `out` (length `rank`):
/// uniform in `[0, init_scale)`, a function of `(cfg.seed, kind, index)` only.
pub fn init_row(cfg: &MfConfig, kind: Factor, index: u32, out: &mut [f32]) {
    let table = match kind {
        Factor::User => 1,
        Factor::Item => 2,
    };
    let mut rng = Rng64::from_key(&[cfg.seed, table, u64::from(index)]);
    for x in out {
        *x = rng.next_f32() * cfg.init_scale;
    }
}

/// Initial factor table of `rows` rows, row-major (`rows × rank`).
pub fn init_table(cfg: &MfConfig, kind: Factor, rows: u32) -> Vec<f32> {
    let mut table = vec![0.0; rows as usize * cfg.rank];
    for (i, row) in table.chunks_exact_mut(cfg.rank).enumerate() {
        init_row(cfg, kind, i as u32, row);
    }
    table
}

/// The predicted rating `l · r`.
///
/// Summed in four interleaved lanes (then `(s0+s1)+(s2+s3)`, then the tail) for speed; every
/// implementation uses this function, so they round identically.
#[inline]
pub fn predict(l: &[f32], r: &[f32]) -> f32 {
    debug_assert_eq!(l.len(), r.len());
    let mut s = [0.0f32; 4];
    let (lc, rc) = (l.chunks_exact(4), r.chunks_exact(4));
    let (lt, rt) = (lc.remainder(), rc.remainder());
    for (a, b) in lc.zip(rc) {
        for j in 0..4 {
            s[j] += a[j] * b[j];
        }
    }
    let mut sum = (s[0] + s[1]) + (s[2] + s[3]);
    for (a, b) in lt.iter().zip(rt) {
        sum += a * b;
    }
    sum
}

/// One SGD step for the rating `rating` of user row `l` by item row `r`: writes
/// `dl = η(e·r − λ·l)` and `dr = η(e·l − λ·r)` (all slices of length `rank`) and returns
/// the error `e = rating − l·r` before the step. The caller adds the deltas.
#[inline]
pub fn sgd_step(
    cfg: &MfConfig,
    l: &[f32],
    r: &[f32],
    rating: f32,
    dl: &mut [f32],
    dr: &mut [f32],
) -> f32 {
    let err = rating - predict(l, r);
    let (lr, reg) = (cfg.learning_rate, cfg.regularization);
    let n = l.len();
    let (r, dl, dr) = (&r[..n], &mut dl[..n], &mut dr[..n]);
    for j in 0..n {
        dl[j] = lr * (err * r[j] - reg * l[j]);
        dr[j] = lr * (err * l[j] - reg * r[j]);
    }
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

/// `Σ (x − L_u·R_i)²` over `ratings` for row-major factor tables `users` and `items`.
pub fn squared_error(ratings: &[Rating], users: &[f32], items: &[f32], rank: usize) -> f64 {
    squared_error_with(ratings, |u, i| {
        let (u, i) = (u as usize * rank, i as usize * rank);
        predict(&users[u..u + rank], &items[i..i + rank])
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

/// RMSE of the factor tables `users` and `items` (row-major, `rank` wide) on `ratings`.
pub fn rmse(ratings: &[Rating], users: &[f32], items: &[f32], rank: usize) -> f64 {
    rmse_from(squared_error(ratings, users, items, rank), ratings.len())
}

/// The two factor tables, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct MfModel {
    /// Factors per row.
    pub rank: usize,
    /// User factors, `num_users × rank`.
    pub users: Vec<f32>,
    /// Item factors, `num_items × rank`.
    pub items: Vec<f32>,
}

impl MfModel {
    /// The deterministic initial model for `ratings`' dimensions.
    pub fn init(cfg: &MfConfig, ratings: &Ratings) -> Self {
        Self {
            rank: cfg.rank,
            users: init_table(cfg, Factor::User, ratings.num_users),
            items: init_table(cfg, Factor::Item, ratings.num_items),
        }
    }

    /// RMSE of this model on `ratings`.
    pub fn rmse(&self, ratings: &[Rating]) -> f64 {
        rmse(ratings, &self.users, &self.items, self.rank)
    }
}

/// Plain sequential SGD, one worker: `iters` passes over the ratings in order, each step
/// applied immediately. Returns the model and the training RMSE after each pass.
///
/// # Panics
/// If `cfg` or `ratings` is invalid.
pub fn reference(ratings: &Ratings, cfg: &MfConfig, iters: usize) -> (MfModel, Vec<f64>) {
    cfg.validate().unwrap();
    check_ratings(&ratings.ratings, ratings.num_users, ratings.num_items).unwrap();
    let k = cfg.rank;
    let mut m = MfModel::init(cfg, ratings);
    let (mut dl, mut dr) = (vec![0.0; k], vec![0.0; k]);
    let mut history = Vec::with_capacity(iters);
    for _ in 0..iters {
        for r in &ratings.ratings {
            let (u, i) = (r.user as usize * k, r.item as usize * k);
            let (l, rr) = (&mut m.users[u..u + k], &mut m.items[i..i + k]);
            sgd_step(cfg, l, rr, r.value, &mut dl, &mut dr);
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
        let (l, r) = ([1.0, 2.0], [3.0, -1.0]);
        let (mut dl, mut dr) = ([0.0; 2], [0.0; 2]);
        let err = sgd_step(&cfg, &l, &r, 4.0, &mut dl, &mut dr);
        assert_eq!(err, 3.0); // 4 − (3 − 2)
        assert!((dl[0] - 0.1 * (3.0 * 3.0 - 0.5)).abs() < 1e-6);
        assert!((dl[1] - 0.1 * (-3.0 - 1.0)).abs() < 1e-6);
        assert!((dr[0] - 0.1 * (3.0 - 1.5)).abs() < 1e-6);
        assert!((dr[1] - 0.1 * (6.0 + 0.5)).abs() < 1e-6);
    }

    #[test]
    fn predict_handles_every_length() {
        for n in 0..11 {
            let l: Vec<f32> = (0..n).map(|x| x as f32).collect();
            let want: f32 = l.iter().map(|x| x * x).sum();
            assert_eq!(predict(&l, &l), want);
        }
    }

    #[test]
    fn init_rows_are_deterministic_and_in_range() {
        let cfg = MfConfig {
            rank: 8,
            init_scale: 0.3,
            ..MfConfig::default()
        };
        let (mut a, mut b, mut c) = ([0.0; 8], [0.0; 8], [0.0; 8]);
        init_row(&cfg, Factor::User, 5, &mut a);
        init_row(&cfg, Factor::User, 5, &mut b);
        init_row(&cfg, Factor::Item, 5, &mut c);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a.iter().all(|&x| (0.0..0.3).contains(&x)));
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
                value: 2.0,
            },
            Rating {
                user: 1,
                item: 0,
                value: 0.0,
            },
        ];
        let (users, items) = ([1.0, 1.0, 0.0, 0.0], [5.0, 5.0, 1.0, 1.0]);
        assert_eq!(rmse(&ratings, &users, &items, 2), 0.0);
        assert_eq!(rmse(&[], &users, &items, 2), 0.0);
    }
}
