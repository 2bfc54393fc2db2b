//! The limit implementation of SGD matrix factorization on flat `f32` factor tables.
//!
//! Worker `w` owns the ratings [`partition`]`(n, W, w)` in their given order. Before the
//! iterations it maps its users and items to dense local indices; each iteration it copies
//! just those rows of the shared tables into its private view, runs [`sgd_step`] over its
//! ratings applying each step to the view (read-my-writes) and adding it to a per-row
//! delta accumulator (what a parameter server's update log holds; stored next to the
//! view), and finally the accumulators are added into the shared tables in worker order. Buffers live for the
//! whole run; the hot loop does not allocate.
//!
//! It knows nothing of the parameter server; the math is [`crate::algo::mf`].

use std::time::Instant;

use super::{add_parts, localize, par_each, par_map, par_rows, IterStats, LimitConfig, Part};
use crate::algo::mf::{
    add_into, check_ratings, rmse_from, sgd_step, squared_error, MfConfig, MfModel,
};
use crate::algo::partition;
use crate::data::{Rating, Ratings};

/// The outcome of a limit MF run.
#[derive(Debug, Clone)]
pub struct MfRun {
    /// The final factor tables.
    pub model: MfModel,
    /// Per iteration: time, training RMSE and (if test ratings were given) test RMSE.
    pub stats: Vec<IterStats>,
}

/// One worker's data and private rows.
struct Worker {
    /// `(local user, local item, value)` of the worker's ratings, in order.
    ratings: Vec<(u32, u32, f32)>,
    /// Sorted global ids of the users / items the worker touches.
    users: Vec<u32>,
    items: Vec<u32>,
    /// Per touched row, `2·rank` floats: the private view of the row, then this
    /// iteration's summed delta of it (adjacent, so a step touches neighbouring lines).
    user_rows: Vec<f32>,
    item_rows: Vec<f32>,
    /// Scratch for one step's deltas.
    dl: Vec<f32>,
    dr: Vec<f32>,
}

impl Worker {
    fn new(rank: usize, train: &Ratings, mine: &[Rating]) -> Self {
        let (users, lu) = localize(mine.iter().map(|r| r.user), train.num_users as usize);
        let (items, li) = localize(mine.iter().map(|r| r.item), train.num_items as usize);
        let ratings = mine
            .iter()
            .zip(lu.iter().zip(&li))
            .map(|(r, (&u, &i))| (u, i, r.value))
            .collect();
        Self {
            ratings,
            user_rows: vec![0.0; users.len() * 2 * rank],
            item_rows: vec![0.0; items.len() * 2 * rank],
            users,
            items,
            dl: vec![0.0; rank],
            dr: vec![0.0; rank],
        }
    }

    /// One BSP iteration against the start-of-iteration `model`.
    fn sweep(&mut self, cfg: &MfConfig, model: &MfModel) {
        let k = cfg.rank;
        gather(&self.users, &model.users, k, &mut self.user_rows);
        gather(&self.items, &model.items, k, &mut self.item_rows);
        for &(u, i, x) in &self.ratings {
            let (l, ld) = self.user_rows[u as usize * 2 * k..][..2 * k].split_at_mut(k);
            let (r, rd) = self.item_rows[i as usize * 2 * k..][..2 * k].split_at_mut(k);
            sgd_step(cfg, l, r, x, &mut self.dl, &mut self.dr);
            add_into(l, &self.dl);
            add_into(r, &self.dr);
            add_into(ld, &self.dl);
            add_into(rd, &self.dr);
        }
    }

    /// The deltas of the touched users or items, for the merge.
    fn deltas<'a>(rows: &'a [u32], buf: &'a [f32], k: usize) -> Part<'a, f32> {
        Part {
            rows,
            data: buf.get(k..).unwrap_or_default(),
            stride: 2 * k,
        }
    }
}

/// Copies the rows `rows` of `table` into the view halves of `buf` and zeroes the deltas.
fn gather(rows: &[u32], table: &[f32], k: usize, buf: &mut [f32]) {
    for (dst, &row) in buf.chunks_exact_mut(2 * k).zip(rows) {
        let (view, delta) = dst.split_at_mut(k);
        view.copy_from_slice(&table[row as usize * k..][..k]);
        delta.fill(0.0);
    }
}

/// RMSE of `model` on `ratings`, the squared errors summed per worker chunk in order.
fn parallel_rmse(model: &MfModel, ratings: &[Rating], threads: usize) -> f64 {
    let parts = par_map(threads, |w| {
        let mine = &ratings[partition(ratings.len(), threads, w)];
        squared_error(mine, &model.users, &model.items, model.rank)
    });
    rmse_from(parts.iter().sum(), ratings.len())
}

/// Runs `limit.iterations` BSP iterations of SGD over `train` with `limit.threads` workers,
/// starting from [`MfModel::init`]. Reports the training RMSE after each iteration, and the
/// RMSE on `test` when given (test ratings must fit `train`'s dimensions).
pub fn run(
    cfg: &MfConfig,
    limit: &LimitConfig,
    train: &Ratings,
    test: Option<&[Rating]>,
) -> Result<MfRun, String> {
    cfg.validate()?;
    limit.validate()?;
    check_ratings(&train.ratings, train.num_users, train.num_items)?;
    if let Some(test) = test {
        check_ratings(test, train.num_users, train.num_items)
            .map_err(|e| format!("test set: {e}"))?;
    }
    let (k, threads) = (cfg.rank, limit.threads);
    let n = train.ratings.len();
    let mut model = MfModel::init(cfg, train);
    let mut workers = par_map(threads, |w| {
        Worker::new(k, train, &train.ratings[partition(n, threads, w)])
    });
    let mut stats = Vec::with_capacity(limit.iterations);
    for iter in 0..limit.iterations {
        let start = Instant::now();
        par_each(&mut workers, |wk| wk.sweep(cfg, &model));
        let users: Vec<_> = workers
            .iter()
            .map(|w| Worker::deltas(&w.users, &w.user_rows, k))
            .collect();
        par_rows(&mut model.users, k, threads, |first, rows| {
            add_parts(first, rows, k, &users)
        });
        let items: Vec<_> = workers
            .iter()
            .map(|w| Worker::deltas(&w.items, &w.item_rows, k))
            .collect();
        par_rows(&mut model.items, k, threads, |first, rows| {
            add_parts(first, rows, k, &items)
        });
        let seconds = start.elapsed().as_secs_f64();
        stats.push(IterStats {
            iter,
            seconds,
            objective: parallel_rmse(&model, &train.ratings, threads),
            held_out: test.map(|t| parallel_rmse(&model, t, threads)),
        });
    }
    Ok(MfRun { model, stats })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::mf::reference;
    use crate::algo::Rng64;

    /// Ratings of a planted rank-3 model with small noise: 60 users × 40 items, ~half
    /// observed, shuffled; plus the held-out rest.
    fn planted() -> (Ratings, Vec<Rating>) {
        let mut rng = Rng64::from_key(&[2024]);
        let mut factor =
            |n: usize| -> Vec<f32> { (0..n * 3).map(|_| 0.4 + rng.next_f32()).collect() };
        let (u, v) = (factor(60), factor(40));
        let mut rng = Rng64::from_key(&[7]);
        let (mut train, mut test) = (Vec::new(), Vec::new());
        for user in 0..60u32 {
            for item in 0..40u32 {
                let (a, b) = (&u[user as usize * 3..][..3], &v[item as usize * 3..][..3]);
                let value = a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>()
                    + 0.02 * (rng.next_f32() - 0.5);
                let r = Rating { user, item, value };
                if rng.next_f32() < 0.5 {
                    train.push(r)
                } else {
                    test.push(r)
                }
            }
        }
        for i in (1..train.len()).rev() {
            train.swap(i, rng.below(i as u32 + 1) as usize);
        }
        (
            Ratings {
                ratings: train,
                num_users: 60,
                num_items: 40,
            },
            test,
        )
    }

    fn cfg() -> MfConfig {
        MfConfig {
            rank: 3,
            learning_rate: 0.02,
            regularization: 0.01,
            init_scale: 0.5,
            seed: 3,
        }
    }

    #[test]
    fn sgd_reduces_rmse_for_one_two_and_three_threads() {
        let (train, test) = planted();
        let initial = MfModel::init(&cfg(), &train).rmse(&train.ratings);
        for threads in [1, 2, 3] {
            let limit = LimitConfig {
                threads,
                iterations: 30,
            };
            let run = run(&cfg(), &limit, &train, Some(&test)).unwrap();
            let last = run.stats.last().unwrap();
            assert_eq!(run.stats.len(), 30);
            assert!(
                last.objective < 0.1 * initial,
                "threads {threads}: {} vs {initial}",
                last.objective
            );
            assert!(
                last.held_out.unwrap() < 0.1 * initial,
                "threads {threads}: {:?}",
                last.held_out
            );
            assert!(run.stats.iter().all(|s| s.seconds >= 0.0));
        }
    }

    #[test]
    fn one_thread_is_sequential_sgd_up_to_rounding() {
        let (train, _) = planted();
        let (want, history) = reference(&train, &cfg(), 5);
        let got = run(
            &cfg(),
            &LimitConfig {
                threads: 1,
                iterations: 5,
            },
            &train,
            None,
        )
        .unwrap();
        for (a, b) in got
            .model
            .users
            .iter()
            .chain(&got.model.items)
            .zip(want.users.iter().chain(&want.items))
        {
            assert!((a - b).abs() < 1e-4, "{a} vs {b}");
        }
        for (s, h) in got.stats.iter().zip(&history) {
            assert!((s.objective - h).abs() < 1e-4);
        }
    }

    #[test]
    fn runs_are_deterministic_and_bad_input_is_rejected() {
        let (train, _) = planted();
        let limit = LimitConfig {
            threads: 2,
            iterations: 3,
        };
        let a = run(&cfg(), &limit, &train, None).unwrap();
        let b = run(&cfg(), &limit, &train, None).unwrap();
        assert_eq!(a.model, b.model);
        let bad = [Rating {
            user: 60,
            item: 0,
            value: 1.0,
        }];
        assert!(run(&cfg(), &limit, &train, Some(&bad))
            .unwrap_err()
            .contains("test set"));
        assert!(run(
            &cfg(),
            &LimitConfig {
                threads: 0,
                iterations: 1
            },
            &train,
            None
        )
        .is_err());
    }
}
