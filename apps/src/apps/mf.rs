//! Matrix factorization by SGD on the parameter server.
//!
//! **Tables.** `mf.L`: one row of `rank` f32 factors per user (row id = user id); `mf.R`:
//! one row per item. The math is [`crate::algo::mf`].
//!
//! **Iteration.** Worker `w` owns the training ratings [`partition`]`(n, W, w)` in their
//! given order. For each rating `(u, i, x)` it READs `L_u` and `R_i`, computes the step with
//! [`sgd_step`] and UPDATEs both rows by the deltas; after its last rating it CLOCKs once.
//! A READ includes the worker's own earlier UPDATEs, so under BSP each worker runs
//! sequential SGD on the start-of-iteration model, exactly like [`crate::limit::mf`] (up to
//! float rounding: the store sums a worker's deltas of a row before adding them to it).
//!
//! **Initialisation.** Every row receives [`init_row`] through one UPDATE by one worker: the
//! first worker whose ratings touch it, so initialisation writes rows the worker will use
//! (rows no training rating touches go to worker `row mod W`).
//!
//! **Evaluation.** After each iteration the main thread snapshots both tables and computes
//! the training RMSE and, if there are held-out ratings, the test RMSE (not timed).
//!
//! **Model file** ([`MfOutcome::write_model`], the CLI's `--output`): a comment line
//! `# iterstore mf model: rank=K users=U items=I`, then one line per user
//! `u<TAB>id<TAB>f_1<TAB>…<TAB>f_K`, then one per item `i<TAB>id<TAB>f_1…`, ids being the
//! dense ids the loader assigned (order of first appearance in the ratings file).

use iterstore::{Cluster, Table, Worker};
use std::io::{self, Write};

use super::{
    dense, preprocess, start, timed, timed_init_run, timed_run, AppConfig, AppError, IterRecord,
    Observer, RunReport,
};
use crate::algo::mf::{check_ratings, init_row, rmse, sgd_step, Factor, MfConfig, MfModel};
use crate::algo::partition;
use crate::data::{Rating, Ratings};

/// The outcome of a store-backed MF run.
#[derive(Debug, Clone)]
pub struct MfOutcome {
    /// Timings and objectives.
    pub report: RunReport,
    /// The final factor tables.
    pub model: MfModel,
}

impl MfOutcome {
    /// Writes the model in the text format described in the module docs.
    pub fn write_model(&self, out: &mut dyn Write) -> io::Result<()> {
        let m = &self.model;
        let k = m.rank;
        let (users, items) = (m.users.len() / k, m.items.len() / k);
        writeln!(
            out,
            "# iterstore mf model: rank={k} users={users} items={items}"
        )?;
        for (tag, table) in [("u", &m.users), ("i", &m.items)] {
            for (id, row) in table.chunks_exact(k).enumerate() {
                write!(out, "{tag}\t{id}")?;
                for x in row {
                    write!(out, "\t{x}")?;
                }
                writeln!(out)?;
            }
        }
        Ok(())
    }
}

/// The two factor tables.
#[derive(Clone, Copy)]
struct Tables {
    users: Table<f32>,
    items: Table<f32>,
}

/// One worker's scratch rows.
struct Scratch {
    l: Vec<f32>,
    r: Vec<f32>,
    dl: Vec<f32>,
    dr: Vec<f32>,
}

impl Scratch {
    fn new(rank: usize) -> Self {
        Self {
            l: vec![0.0; rank],
            r: vec![0.0; rank],
            dl: vec![0.0; rank],
            dr: vec![0.0; rank],
        }
    }
}

/// One iteration of one worker over its ratings: the function both the virtual iteration
/// and the real iterations run.
fn iteration(
    w: &mut Worker<'_>,
    t: Tables,
    params: &MfConfig,
    ratings: &[Rating],
    s: &mut Scratch,
) -> iterstore::Result<()> {
    for r in ratings {
        let (u, i) = (u64::from(r.user), u64::from(r.item));
        w.read(&t.users, u, &mut s.l)?;
        w.read(&t.items, i, &mut s.r)?;
        sgd_step(params, &s.l, &s.r, r.value, &mut s.dl, &mut s.dr);
        w.update(&t.users, u, &s.dl)?;
        w.update(&t.items, i, &s.dr)?;
    }
    w.clock()
}

/// The rows each worker initialises: `(users, items)` per worker.
fn init_owners(train: &Ratings, workers: usize) -> Vec<(Vec<u32>, Vec<u32>)> {
    const NONE: u32 = u32::MAX;
    let mut user_owner = vec![NONE; train.num_users as usize];
    let mut item_owner = vec![NONE; train.num_items as usize];
    let n = train.ratings.len();
    for w in 0..workers {
        for r in &train.ratings[partition(n, workers, w)] {
            for (owner, id) in [(&mut user_owner, r.user), (&mut item_owner, r.item)] {
                if owner[id as usize] == NONE {
                    owner[id as usize] = w as u32;
                }
            }
        }
    }
    let mut rows = vec![(Vec::new(), Vec::new()); workers];
    for (id, &o) in user_owner.iter().enumerate() {
        let o = if o == NONE { id % workers } else { o as usize };
        rows[o].0.push(id as u32);
    }
    for (id, &o) in item_owner.iter().enumerate() {
        let o = if o == NONE { id % workers } else { o as usize };
        rows[o].1.push(id as u32);
    }
    rows
}

/// The current factor tables, read back from the servers.
fn snapshot(
    cluster: &Cluster,
    t: Tables,
    train: &Ratings,
    rank: usize,
) -> Result<MfModel, AppError> {
    Ok(MfModel {
        rank,
        users: dense(cluster.snapshot(&t.users)?, train.num_users as usize, rank),
        items: dense(cluster.snapshot(&t.items)?, train.num_items as usize, rank),
    })
}

/// Runs MF on `train` with `cfg`, evaluating on `test` (which may be empty) after every
/// iteration. See the module docs for the tables and phases.
pub fn run(
    cfg: &AppConfig,
    params: &MfConfig,
    train: &Ratings,
    test: &[Rating],
) -> Result<MfOutcome, AppError> {
    run_observed(cfg, params, train, test, &mut |_| {})
}

/// [`run`], calling `observer` after each iteration is evaluated.
pub fn run_observed(
    cfg: &AppConfig,
    params: &MfConfig,
    train: &Ratings,
    test: &[Rating],
    observer: Observer<'_>,
) -> Result<MfOutcome, AppError> {
    cfg.validate()?;
    params.validate()?;
    check_ratings(&train.ratings, train.num_users, train.num_items)?;
    check_ratings(test, train.num_users, train.num_items).map_err(|e| format!("test set: {e}"))?;
    let mut report = RunReport::new("mf", "train_rmse", cfg);
    for (k, v) in [
        ("users", train.num_users.into()),
        ("items", train.num_items.into()),
        ("train_ratings", train.ratings.len() as u64),
        ("test_ratings", test.len() as u64),
    ] {
        report.dataset.insert(k, v);
    }
    report.param("rank", params.rank);
    report.param("learning_rate", params.learning_rate);
    report.param("regularization", params.regularization);
    report.param("init_scale", params.init_scale);
    report.param("seed", params.seed);

    let (k, workers, n) = (params.rank, cfg.workers, train.ratings.len());
    let (setup, setup_s) = timed(|| -> Result<_, AppError> {
        let owners = init_owners(train, workers);
        let mut cluster = start(cfg)?;
        let t = Tables {
            users: cluster.create_table::<f32>("mf.L", k)?,
            items: cluster.create_table::<f32>("mf.R", k)?,
        };
        Ok((owners, cluster, t))
    });
    let (owners, mut cluster, t) = setup?;
    report.setup_s = setup_s;
    let mine = |w: &Worker<'_>| &train.ratings[partition(n, workers, w.id())];

    let (pre_s, pattern) = preprocess(&mut cluster, cfg, |w| {
        iteration(w, t, params, mine(w), &mut Scratch::new(k))
    })?;
    report.preprocess_s = pre_s;
    report.pattern = pattern;

    report.init_s = timed_init_run(&mut cluster, |w| {
        let mut row = vec![0.0f32; k];
        let (users, items) = &owners[w.id()];
        for (table, kind, ids) in [
            (&t.users, Factor::User, users),
            (&t.items, Factor::Item, items),
        ] {
            for &id in ids {
                init_row(params, kind, id, &mut row);
                w.update(table, u64::from(id), &row)?;
            }
        }
        w.clock()
    })?;

    let mut model = snapshot(&cluster, t, train, k)?;
    // First-iter mode records the first real iteration (not the initialisation run).
    for iter in 0..cfg.iterations {
        let seconds = timed_run(&mut cluster, |w| {
            iteration(w, t, params, mine(w), &mut Scratch::new(k))
        })?;
        model = snapshot(&cluster, t, train, k)?;
        let record = IterRecord {
            iter,
            seconds,
            objective: rmse(&train.ratings, &model.users, &model.items, k),
            test_rmse: (!test.is_empty()).then(|| rmse(test, &model.users, &model.items, k)),
        };
        observer(&record);
        report.iterations.push(record);
    }
    report.specialize_s = cluster.stats().specialize_time.as_secs_f64();
    cluster.shutdown()?;
    Ok(MfOutcome { report, model })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_has_exactly_one_initialising_worker() {
        let train = Ratings {
            ratings: vec![
                Rating {
                    user: 2,
                    item: 0,
                    value: 1.0,
                },
                Rating {
                    user: 0,
                    item: 0,
                    value: 1.0,
                },
                Rating {
                    user: 2,
                    item: 1,
                    value: 1.0,
                },
            ],
            num_users: 4,
            num_items: 3,
        };
        let owners = init_owners(&train, 2);
        // Worker 0 has rating 0, worker 1 ratings 1..3.
        assert_eq!(owners[0], (vec![2], vec![0, 2]));
        assert_eq!(owners[1], (vec![0, 1, 3], vec![1]));
    }

    #[test]
    fn model_file_lists_users_then_items() {
        let outcome = MfOutcome {
            report: RunReport::new("mf", "train_rmse", &AppConfig::default()),
            model: MfModel {
                rank: 2,
                users: vec![1.0, 2.0],
                items: vec![0.5, -1.0, 3.0, 4.0],
            },
        };
        let mut out = Vec::new();
        outcome.write_model(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "# iterstore mf model: rank=2 users=1 items=2\nu\t0\t1\t2\ni\t0\t0.5\t-1\ni\t1\t3\t4\n"
        );
    }
}
