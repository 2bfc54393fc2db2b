//! Matrix factorization on the parameter server (AdaGrad with biases, [`iterstore_algo::mf`]).
//!
//! **Tables.** `mf.L`: one row per user (row id = user id), `mf.R`: one row per item; a row
//! is [`width`]`(rank)` f32: the factors, the bias and the row's AdaGrad accumulator, so
//! the accumulators are shared through the store like the factors. The global mean is
//! computed from the training ratings before the run and is not a table.
//!
//! **Iteration.** Worker `w` owns the training ratings the layout
//! ([`RatingsLayout`], chosen by [`MfConfig::partition`]) gives it, cut into
//! [`clocks`]`(n)` mini-batches: by default the range [`partition`]`(n, W, w)` of the
//! ratings in their given order, cut into equal mini-batches ([`mini_batch`]). For each rating
//! `(u, i, x)` of a mini-batch it READs `L_u` and `R_i`, computes the step with
//! [`sgd_step`] and UPDATEs both rows by the deltas, all in one
//! [`Worker::read_update`]; after each mini-batch it CLOCKs, so an iteration makes
//! [`clocks`]`(n)` clocks. A READ includes the worker's own earlier UPDATEs, and the rows
//! `read_update` holds take each step as it comes, so under BSP each worker runs
//! sequential AdaGrad on the start-of-clock model exactly like [`iterstore_algo::limit::mf`], bit
//! for bit. On the specialized fast path the rows are lent, not copied.
//!
//! **Initialisation.** Every row receives [`init_row`] through one UPDATE by one worker: the
//! first worker whose ratings touch it, so initialisation writes rows the worker will use
//! (rows no training rating touches go to worker `row mod W`).
//!
//! **Evaluation.** After each iteration the main thread snapshots both tables and computes
//! the training RMSE and, if there are held-out ratings, the test RMSE (not timed). A
//! non-finite RMSE stops the run with [`AppError::Diverged`].
//!
//! **Model file** ([`MfOutcome::write_model`], the CLI's `--output`): a comment line
//! `# iterstore mf model: rank=K users=U items=I`, a comment line `# mean=μ; prediction =
//! mean + bias_u + bias_i + f_u·f_i`, then one line per user
//! `u<TAB>id<TAB>f_1<TAB>…<TAB>f_K<TAB>bias`, then one per item `i<TAB>id<TAB>f_1…<TAB>bias`,
//! ids being the dense ids the loader assigned (order of first appearance in the ratings
//! file). The AdaGrad accumulators are not written.

pub mod tune;

use iterstore::{Cluster, Table, Worker};
use std::io::{self, Write};

use super::checkpoint::{self, Restart, RunId};
use super::fingerprint;
use super::{
    check_finite, dense, preprocess, timed, timed_init_run, timed_run, App, AppConfig, AppError,
    Input, IterRecord, Observer, RunReport,
};
use iterstore_algo::mf::{
    check_ratings, clocks, global_mean, init_row, sgd_step, width, Factor, MfConfig, MfModel,
};
use iterstore_algo::ratings_layout::RatingsLayout;
#[cfg(doc)]
use iterstore_algo::{mf::mini_batch, partition};
use iterstore_data::{load_ratings, split_ratings, Rating, Ratings, RatingsSpec};

/// The outcome of a store-backed MF run.
#[derive(Debug, Clone)]
pub struct MfOutcome {
    /// Timings and objectives.
    pub report: RunReport,
    /// The final model.
    pub model: MfModel,
}

impl MfOutcome {
    /// Writes the model in the text format described in the module docs.
    pub fn write_model(&self, out: &mut dyn Write) -> io::Result<()> {
        write_model_of(&self.model, out)
    }
}

/// Writes `m` in the model file's text format (module docs).
pub fn write_model_of(m: &MfModel, out: &mut dyn Write) -> io::Result<()> {
    let (k, n) = (m.rank, m.width());
    let (users, items) = (m.users.len() / n, m.items.len() / n);
    writeln!(
        out,
        "# iterstore mf model: rank={k} users={users} items={items}"
    )?;
    writeln!(
        out,
        "# mean={}; prediction = mean + bias_u + bias_i + f_u·f_i",
        m.mean
    )?;
    for (tag, table) in [("u", &m.users), ("i", &m.items)] {
        for (id, row) in table.chunks_exact(n).enumerate() {
            write!(out, "{tag}\t{id}")?;
            for x in &row[..=k] {
                write!(out, "\t{x}")?;
            }
            writeln!(out)?;
        }
    }
    Ok(())
}

/// The two factor tables.
#[derive(Clone, Copy)]
struct Tables {
    users: Table<f32>,
    items: Table<f32>,
}

/// One worker's scratch rows: a step's deltas of the user's and the item's row.
#[derive(Clone)]
struct Scratch {
    dl: Vec<f32>,
    dr: Vec<f32>,
}

impl Scratch {
    fn new(width: usize) -> Self {
        Self {
            dl: vec![0.0; width],
            dr: vec![0.0; width],
        }
    }
}

/// What an iteration needs besides the worker: tables, parameters, global mean and
/// CLOCKs per iteration.
#[derive(Clone, Copy)]
struct Step<'a> {
    t: Tables,
    params: &'a MfConfig,
    mean: f32,
    clocks: usize,
}

/// One iteration of one worker over its ratings in `layout`, one CLOCK per mini-batch: the
/// function both the virtual iteration and the real iterations run. (In the virtual
/// iteration reads are zeros, so the steps are garbage, but they are dropped and the rows
/// touched do not depend on them.)
fn iteration(
    w: &mut Worker<'_>,
    st: Step<'_>,
    layout: &RatingsLayout<'_>,
    s: &mut Scratch,
) -> iterstore::Result<()> {
    let t = st.t;
    let id = w.id();
    for b in 0..st.clocks {
        for r in layout.batch(id, b) {
            let (u, i) = (u64::from(r.user), u64::from(r.item));
            let rows = [(&t.users, u), (&t.items, i)];
            w.read_update(rows, [&mut s.dl, &mut s.dr], |[l, rr], [dl, dr]| {
                step(st.params, st.mean, l, rr, r.value, dl, dr);
            })?;
        }
        w.clock()?;
    }
    Ok(())
}

/// [`sgd_step`], kept out of line in [`iteration`]'s loop: with the step inlined into it
/// (as `#[inline]` across the crates allows), LLVM left the loop's other calls out of line
/// and the store's MF iteration took 1.5x as long (BENCHMARKS.md, the restructuring of
/// issue 39). The limit calls `sgd_step` directly, as before.
#[inline(never)]
fn step(
    params: &MfConfig,
    mean: f32,
    l: &[f32],
    r: &[f32],
    rating: f32,
    dl: &mut [f32],
    dr: &mut [f32],
) -> f32 {
    sgd_step(params, mean, l, r, rating, dl, dr)
}

/// The ratings cut for `workers` workers and `clocks` clocks an epoch, the rows each
/// worker initialises, and the two factor tables, created: what a run and a tuning set up
/// alike.
#[allow(clippy::type_complexity)]
fn layout_and_tables<'a>(
    cluster: &mut Cluster,
    train: &'a Ratings,
    params: &MfConfig,
    workers: usize,
    clocks: usize,
) -> Result<(RatingsLayout<'a>, Vec<(Vec<u32>, Vec<u32>)>, Tables), AppError> {
    let layout = RatingsLayout::new(
        &train.ratings,
        params.partition,
        (train.num_users, train.num_items),
        workers,
        clocks,
    );
    let owners = init_owners(train, &layout, workers);
    let wd = width(params.rank);
    let t = Tables {
        users: cluster.create_table::<f32>("mf.L", wd)?,
        items: cluster.create_table::<f32>("mf.R", wd)?,
    };
    Ok((layout, owners, t))
}

/// The rows each worker initialises: `(users, items)` per worker.
fn init_owners(
    train: &Ratings,
    layout: &RatingsLayout<'_>,
    workers: usize,
) -> Vec<(Vec<u32>, Vec<u32>)> {
    const NONE: u32 = u32::MAX;
    let mut user_owner = vec![NONE; train.num_users as usize];
    let mut item_owner = vec![NONE; train.num_items as usize];
    for w in 0..workers {
        for r in layout.of(w) {
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

/// The initialisation run: every row's [`init_row`] UPDATEd by its owner in `owners`;
/// returns its time.
fn init(
    cluster: &mut Cluster,
    scratch: &mut [Scratch],
    owners: &[(Vec<u32>, Vec<u32>)],
    t: Tables,
    params: &MfConfig,
    workers: usize,
) -> Result<f64, AppError> {
    let wd = width(params.rank);
    timed_init_run(cluster, scratch, |w, _| {
        let mut row = vec![0.0f32; wd];
        let (users, items) = &owners[w.id()];
        for (table, kind, ids) in [
            (&t.users, Factor::User, users),
            (&t.items, Factor::Item, items),
        ] {
            for &id in ids {
                init_row(params, kind, id, workers, &mut row);
                w.update(table, u64::from(id), &row)?;
            }
        }
        w.clock()
    })
}

/// The current factor tables, read back from the servers.
fn snapshot(
    cluster: &Cluster,
    t: Tables,
    train: &Ratings,
    rank: usize,
    mean: f32,
) -> Result<MfModel, AppError> {
    let n = width(rank);
    Ok(MfModel {
        rank,
        mean,
        users: dense(cluster.snapshot(&t.users)?, train.num_users as usize, n),
        items: dense(cluster.snapshot(&t.items)?, train.num_items as usize, n),
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
    let (mut outcome, start_s) =
        super::with_cluster(cfg, |c| run_in(c, cfg, params, train, test, observer))?;
    outcome.report.setup_s += start_s;
    Ok(outcome)
}

/// [`run_observed`] on a cluster already started (for example one process of
/// [`Cluster::run_local_processes`]): this process's workers take their partitions by
/// global worker id, so every process of the cluster must call it alike. The cluster
/// stays up.
pub fn run_in(
    cluster: &mut Cluster,
    cfg: &AppConfig,
    params: &MfConfig,
    train: &Ratings,
    test: &[Rating],
    observer: Observer<'_>,
) -> Result<MfOutcome, AppError> {
    cfg.validate()?;
    super::check_cluster(cfg, cluster)?;
    params.validate()?;
    check_ratings(&train.ratings, train.num_users, train.num_items)?;
    check_ratings(test, train.num_users, train.num_items).map_err(|e| format!("test set: {e}"))?;
    crate::budget::Footprint {
        what: "the factor tables",
        rows: (
            u64::from(train.num_users) + u64::from(train.num_items),
            "users and items",
        ),
        // The factors, the bias and the AdaGrad accumulator.
        width: (width(params.rank) as u64, "columns"),
        value_bytes: 4,
        flag: ("--factors", params.rank as u64),
    }
    .check()?;
    let mut report = RunReport::new("mf", "train_rmse", cfg);
    report.processes = cluster.processes();
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
    report.param("partition", params.partition.name());

    // Partitions are by global worker id: P processes of W workers split the data as one
    // process of P * W workers does.
    let (k, workers, n) = (params.rank, cluster.total_workers(), train.ratings.len());
    let (wd, mean, clocks) = (width(k), global_mean(&train.ratings), clocks(n));
    report.param("clocks_per_iteration", clocks);
    fingerprint::input_digest(&mut report, fingerprint::ratings(&[&train.ratings, test]));
    fingerprint::agree(cluster, cfg, &report)?;
    let run_json = checkpoint::run_json(&report);
    let id = RunId {
        app: "mf",
        run: &run_json,
        clocks_per_iteration: clocks as u64,
        init_clocks: checkpoint::INIT_CLOCKS,
    };
    let (setup, setup_s) = timed(|| layout_and_tables(cluster, train, params, workers, clocks));
    let (layout, owners, t) = setup?;
    report.setup_s = setup_s;
    // MF keeps nothing outside the tables across iterations (its scratch rows are
    // overwritten before every use), so its workers' states are empty and a checkpoint
    // resumes on any number of workers.
    let restart = checkpoint::resume(cluster, cfg, &id)?;
    report.resumed = restart.as_ref().map(Restart::report);
    let start = restart.as_ref().map_or(0, |r| r.done);
    let st = Step {
        t,
        params,
        mean,
        clocks,
    };

    // Per worker: its scratch rows, kept across runs.
    let mut scratch: Vec<Scratch> = (0..cfg.workers).map(|_| Scratch::new(wd)).collect();
    let (pre_s, pattern) = preprocess(cluster, cfg, &scratch, |w, scratch| {
        iteration(w, st, &layout, scratch)
    })?;
    report.preprocess_s = pre_s;
    report.pattern = pattern;

    if restart.is_none() {
        report.init_s = init(cluster, &mut scratch, &owners, t, params, workers)?;
    }

    let mut model = snapshot(cluster, t, train, k, mean)?;
    // First-iter mode records the first real iteration (not the initialisation run).
    for iter in start..cfg.iterations {
        let cost = timed_run(cluster, &mut scratch, |w, scratch| {
            iteration(w, st, &layout, scratch)
        })?;
        model = snapshot(cluster, t, train, k, mean)?;
        let record = IterRecord {
            iter,
            seconds: cost.seconds,
            bytes_sent: cost.bytes_sent,
            messages_sent: cost.messages_sent,
            objective: model.rmse(&train.ratings),
            test_rmse: (!test.is_empty()).then(|| model.rmse(test)),
            test_accuracy: None,
            rss_bytes: None,
        };
        check_finite(
            "mf",
            iter,
            cfg.iterations,
            "training RMSE",
            record.objective,
        )?;
        if let Some(test_rmse) = record.test_rmse {
            check_finite("mf", iter, cfg.iterations, "test RMSE", test_rmse)?;
        }
        report.push_iteration(record, observer);
        let done = iter + 1;
        let saved =
            checkpoint::after_iteration(cluster, cfg, &id, done, || vec![Vec::new(); cfg.workers])?;
        report.record_checkpoint(saved);
    }
    report.record_store(cluster);
    Ok(MfOutcome { report, model })
}

/// Matrix factorization as [`App`]: its parameters with the held-out fraction, its
/// ratings split into training and test ratings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mf;

/// MF's parameters as [`App`] takes them: the algorithm's, and how many ratings are held
/// out for the test RMSE.
#[derive(Debug, Clone, PartialEq)]
pub struct MfParams {
    /// The algorithm's parameters (the split's seed is [`MfConfig::seed`]).
    pub config: MfConfig,
    /// The fraction of the ratings held out, in `[0, 1)`.
    pub test_fraction: f64,
}

impl Default for MfParams {
    /// [`MfConfig::default`], a tenth held out.
    fn default() -> Self {
        Self {
            config: MfConfig::default(),
            test_fraction: 0.1,
        }
    }
}

/// MF's input as [`App`] loads it: the ratings split by [`split_ratings`].
#[derive(Debug, Clone, PartialEq)]
pub struct MfData {
    /// The ratings trained on.
    pub train: Ratings,
    /// The held-out ratings (possibly none).
    pub test: Ratings,
}

impl App for Mf {
    const NAME: &'static str = "mf";
    const ABOUT: &'static str = "Matrix factorization by SGD (input: ratings)";
    const INPUT: &'static str = "ratings";
    type Params = MfParams;
    type Data = MfData;
    type Outcome = MfOutcome;

    fn validate(params: &MfParams) -> Result<(), AppError> {
        params.config.validate()?;
        let f = params.test_fraction;
        if !(0.0..1.0).contains(&f) {
            return Err(AppError::Invalid(format!(
                "--test-fraction {f} must be in [0, 1)"
            )));
        }
        Ok(())
    }

    fn load(input: &Input, params: &MfParams) -> Result<MfData, AppError> {
        let ratings = match input {
            Input::File(path) => load_ratings(path)?,
            Input::Synthetic(size) => RatingsSpec::preset(size)?.generate(),
        };
        let (train, test) = split_ratings(&ratings, params.test_fraction, params.config.seed);
        Ok(MfData { train, test })
    }

    fn counts(data: &MfData) -> String {
        format!(
            "{} ratings, {} users, {} items",
            data.train.ratings.len() + data.test.ratings.len(),
            data.train.num_users,
            data.train.num_items
        )
    }

    fn run(
        cfg: &AppConfig,
        params: &MfParams,
        data: &MfData,
        observer: Observer<'_>,
    ) -> Result<MfOutcome, AppError> {
        run_observed(
            cfg,
            &params.config,
            &data.train,
            &data.test.ratings,
            observer,
        )
    }

    fn write_output(outcome: &MfOutcome, _: &MfData, out: &mut dyn Write) -> io::Result<()> {
        outcome.write_model(out)
    }

    fn into_report(outcome: MfOutcome) -> RunReport {
        outcome.report
    }
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
        let layout = RatingsLayout::new(
            &train.ratings,
            Default::default(),
            (train.num_users, train.num_items),
            2,
            1,
        );
        let owners = init_owners(&train, &layout, 2);
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
                mean: 3.5,
                users: vec![1.0, 2.0, 0.25, 9.0],
                items: vec![0.5, -1.0, 0.0, 9.0, 3.0, 4.0, -1.0, 9.0],
            },
        };
        let mut out = Vec::new();
        outcome.write_model(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "# iterstore mf model: rank=2 users=1 items=2\n\
             # mean=3.5; prediction = mean + bias_u + bias_i + f_u·f_i\n\
             u\t0\t1\t2\t0.25\ni\t0\t0.5\t-1\t0\ni\t1\t3\t4\t-1\n"
        );
    }
}
