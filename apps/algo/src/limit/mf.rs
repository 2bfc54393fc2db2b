//! The limit implementation of MF ([`crate::mf`]: AdaGrad with biases) on flat
//! `f32` tables.
//!
//! Worker `w` owns the ratings [`partition`]`(n, W, w)` in their given order, cut into
//! [`clocks`]`(n)` mini-batches ([`mini_batch`]), exactly as the store-backed app. Before
//! the iterations it maps each mini-batch's users and items to dense local indices. For
//! each mini-batch (one clock) it copies just those rows of the shared tables into a
//! private view, runs [`sgd_step`] over the mini-batch applying each step to the view
//! (read-my-writes) and adding it to a per-row delta accumulator (what a parameter
//! server's update log holds; stored next to the view); after a barrier each worker adds
//! every worker's accumulators, in worker order, into its own range of table rows, and a
//! second barrier ends the clock. One thread per worker runs the whole run (started once,
//! as a parameter server's workers are), and after each iteration, untimed, the RMSEs
//! over its part of the ratings; buffers live for the whole run and the hot loop does not
//! allocate.
//!
//! It knows nothing of the parameter server; the math is [`crate::mf`].

use std::sync::{Mutex, PoisonError, RwLock, RwLockReadGuard};
use std::time::Instant;

use super::{
    add_parts, localize, lock, par_map, read, rows_per_range, write, IterStats, LimitConfig, Part,
    SpinBarrier,
};
use crate::mf::{
    add_into, check_ratings, clocks, mini_batch, predict, rmse_from, sgd_step, squared_error_with,
    width, MfConfig, MfModel,
};
use crate::partition;
use iterstore_data::{Rating, Ratings};

/// The outcome of a limit MF run.
#[derive(Debug, Clone)]
pub struct MfRun {
    /// The final model.
    pub model: MfModel,
    /// Per iteration: time, training RMSE and (if test ratings were given) test RMSE.
    pub stats: Vec<IterStats>,
}

/// One mini-batch of one worker: its ratings and private rows.
struct Batch {
    /// `(local user, local item, value)` of the mini-batch's ratings, in order.
    ratings: Vec<(u32, u32, f32)>,
    /// Sorted global ids of the users / items the mini-batch touches.
    users: Vec<u32>,
    items: Vec<u32>,
    /// Per touched row, `2·width` floats: the private view of the row, then this clock's
    /// summed delta of it (adjacent, so a step touches neighbouring lines).
    user_rows: Vec<f32>,
    item_rows: Vec<f32>,
}

impl Batch {
    fn new(n: usize, train: &Ratings, mine: &[Rating]) -> Self {
        let (users, lu) = localize(mine.iter().map(|r| r.user), train.num_users as usize);
        let (items, li) = localize(mine.iter().map(|r| r.item), train.num_items as usize);
        let ratings = mine
            .iter()
            .zip(lu.iter().zip(&li))
            .map(|(r, (&u, &i))| (u, i, r.value))
            .collect();
        Self {
            ratings,
            user_rows: vec![0.0; users.len() * 2 * n],
            item_rows: vec![0.0; items.len() * 2 * n],
            users,
            items,
        }
    }

    /// The deltas of the touched users or items, for the merge.
    fn deltas<'a>(rows: &'a [u32], buf: &'a [f32], n: usize) -> Part<'a, f32> {
        Part {
            rows,
            data: buf.get(n..).unwrap_or_default(),
            stride: 2 * n,
        }
    }
}

/// One worker's mini-batches and scratch.
struct Worker {
    batches: Vec<Batch>,
    /// Scratch for one step's deltas.
    dl: Vec<f32>,
    dr: Vec<f32>,
}

impl Worker {
    /// Runs mini-batch `b` against the start-of-clock `tables`.
    fn sweep(&mut self, cfg: &MfConfig, mean: f32, b: usize, users: &Ranges, items: &Ranges) {
        let n = width(cfg.rank);
        let batch = &mut self.batches[b];
        users.gather(&batch.users, &mut batch.user_rows);
        items.gather(&batch.items, &mut batch.item_rows);
        for &(u, i, x) in &batch.ratings {
            let (l, ld) = batch.user_rows[u as usize * 2 * n..][..2 * n].split_at_mut(n);
            let (r, rd) = batch.item_rows[i as usize * 2 * n..][..2 * n].split_at_mut(n);
            sgd_step(cfg, mean, l, r, x, &mut self.dl, &mut self.dr);
            add_into(l, &self.dl);
            add_into(r, &self.dr);
            add_into(ld, &self.dl);
            add_into(rd, &self.dr);
        }
    }
}

/// A shared table during an iteration, cut into one row range per worker: read by
/// everyone while the workers sweep, each range written by its own worker in the merge.
struct Ranges<'a> {
    /// Floats per row.
    width: usize,
    /// Rows per range.
    per: usize,
    ranges: Vec<RwLock<&'a mut [f32]>>,
}

impl<'a> Ranges<'a> {
    fn new(table: &'a mut [f32], width: usize, threads: usize) -> Self {
        let per = rows_per_range(table.len() / width, threads);
        Self {
            width,
            per,
            ranges: table.chunks_mut(per * width).map(RwLock::new).collect(),
        }
    }

    /// Copies the rows `rows` (sorted) into the view halves of `buf` and zeroes the deltas.
    fn gather(&self, rows: &[u32], buf: &mut [f32]) {
        let (n, per) = (self.width, self.per);
        let mut dst = buf.chunks_exact_mut(2 * n);
        let mut at = 0;
        for (range, lock) in self.ranges.iter().enumerate() {
            let end = at + rows[at..].partition_point(|&r| (r as usize) < (range + 1) * per);
            if end == at {
                continue;
            }
            let table = read(lock);
            for &row in &rows[at..end] {
                let (view, delta) = dst.next().expect("a slot per row").split_at_mut(n);
                view.copy_from_slice(&table[(row as usize - range * per) * n..][..n]);
                delta.fill(0.0);
            }
            at = end;
        }
    }

    /// `Σ (x − prediction)²` over `ratings` (as [`squared_error`]), the users' rows read
    /// from `self` and the items' from `items`.
    ///
    /// [`squared_error`]: crate::mf::squared_error
    fn squared_error(&self, items: &Ranges<'_>, ratings: &[Rating], mean: f32) -> f64 {
        let (users, items_rows) = (self.read_all(), items.read_all());
        squared_error_with(ratings, |u, i| {
            predict(mean, self.row(&users, u), items.row(&items_rows, i))
        })
    }

    /// Row `r` of the table, from its ranges locked for reading ([`read_all`](Self::read_all)).
    fn row<'g>(&self, guards: &'g [RwLockReadGuard<'_, &'a mut [f32]>], r: u32) -> &'g [f32] {
        let r = r as usize;
        &guards[r / self.per][(r % self.per) * self.width..][..self.width]
    }

    /// Every range, locked for reading.
    fn read_all(&self) -> Vec<RwLockReadGuard<'_, &'a mut [f32]>> {
        self.ranges.iter().map(read).collect()
    }

    /// Adds `parts` (in order) into range `w`, if there is one.
    fn merge(&self, w: usize, parts: &[Part<'_, f32>]) {
        if let Some(lock) = self.ranges.get(w) {
            let mut range = write(lock);
            add_parts(w * self.per, &mut range, self.width, parts);
        }
    }
}

/// Runs `limit.iterations` BSP iterations of MF over `train` with `limit.threads` workers,
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
    let (n, threads) = (width(cfg.rank), limit.threads);
    let total = train.ratings.len();
    let clocks = clocks(total);
    let mut model = MfModel::init(cfg, train, threads);
    let mut workers = par_map(threads, |w| {
        let mine = &train.ratings[partition(total, threads, w)];
        Worker {
            batches: (0..clocks)
                .map(|b| Batch::new(n, train, mini_batch(mine, clocks, b)))
                .collect(),
            dl: vec![0.0; n],
            dr: vec![0.0; n],
        }
    });
    let stats = Mutex::new(Vec::with_capacity(limit.iterations.min(1024)));
    let mean = model.mean;
    {
        let users = Ranges::new(&mut model.users, n, threads);
        let items = Ranges::new(&mut model.items, n, threads);
        let states: Vec<RwLock<&mut Worker>> = workers.iter_mut().map(RwLock::new).collect();
        // Per thread: its squared errors over its part of the training and test ratings.
        let errors: Vec<Mutex<(f64, f64)>> = (0..threads).map(|_| Mutex::new((0.0, 0.0))).collect();
        let barrier = SpinBarrier::new(threads);
        let work = |w: usize| {
            let _poison = barrier.guard();
            for iter in 0..limit.iterations {
                let start = Instant::now();
                for b in 0..clocks {
                    write(&states[w]).sweep(cfg, mean, b, &users, &items);
                    barrier.wait();
                    let all: Vec<_> = states.iter().map(read).collect();
                    let batches = all.iter().map(|st| &st.batches[b]);
                    let parts: Vec<_> = batches
                        .clone()
                        .map(|x| Batch::deltas(&x.users, &x.user_rows, n))
                        .collect();
                    users.merge(w, &parts);
                    let parts: Vec<_> = batches
                        .map(|x| Batch::deltas(&x.items, &x.item_rows, n))
                        .collect();
                    items.merge(w, &parts);
                    drop(all);
                    barrier.wait();
                }
                // Every merge is done (the barrier above): the iteration's time.
                let seconds = start.elapsed().as_secs_f64();
                let error_of = |r: &[Rating]| {
                    users.squared_error(&items, &r[partition(r.len(), threads, w)], mean)
                };
                let train_sq = error_of(&train.ratings);
                let test_sq = test.map_or(0.0, error_of);
                *lock(&errors[w]) = (train_sq, test_sq);
                barrier.wait();
                if w == 0 {
                    // Summed in worker order; the others write theirs again only after
                    // the next iteration's barriers, which wait for this thread.
                    let all: Vec<(f64, f64)> = errors.iter().map(|e| *lock(e)).collect();
                    lock(&stats).push(IterStats {
                        iter,
                        seconds,
                        objective: rmse_from(all.iter().map(|e| e.0).sum(), total),
                        held_out: test.map(|t| rmse_from(all.iter().map(|e| e.1).sum(), t.len())),
                    });
                }
            }
        };
        par_map(threads, work);
    }
    let stats = stats.into_inner().unwrap_or_else(PoisonError::into_inner);
    Ok(MfRun { model, stats })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mf::reference;
    use crate::Rng64;

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
            learning_rate: 0.1,
            regularization: 0.001,
            init_scale: 0.5,
            seed: 3,
            ..MfConfig::default()
        }
    }

    #[test]
    fn sgd_reduces_rmse_for_one_two_and_three_threads() {
        let (train, test) = planted();
        let initial = MfModel::init(&cfg(), &train, 1).rmse(&train.ratings);
        for threads in [1, 2, 3] {
            let limit = LimitConfig {
                threads,
                iterations: 30,
            };
            let run = run(&cfg(), &limit, &train, Some(&test)).unwrap();
            let last = run.stats.last().unwrap();
            assert_eq!(run.stats.len(), 30);
            assert!(
                last.objective < 0.15 * initial,
                "threads {threads}: {} vs {initial}",
                last.objective
            );
            assert!(
                last.held_out.unwrap() < 0.2 * initial,
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
