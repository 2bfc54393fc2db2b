//! `iterstore tune mf`: matrix factorization trained by [`iterstore_tune`]'s loop over the
//! cluster's branches, tuning the AdaGrad step size and, if asked, the staleness.
//!
//! **A tuner clock** is [`MfTuneConfig::clock_batches`] of the epoch's mini-batches
//! (each worker's, one CLOCK each), continuing where the branch's last slice stopped; its
//! loss is the RMSE of the slice's ratings before their steps, over the cluster. The
//! tuner validates once an epoch (the test RMSE, negated: the tuner's validations rise),
//! and a branch's loss before training is its training RMSE.
//!
//! **A branch** is the store's branch of both factor tables (their AdaGrad accumulators
//! included) plus each worker's place in the epoch and its setting: the step size
//! (log-uniform over [`MfTuneConfig::lr_range`]) and, if tuned, the staleness (one of
//! [`MfTuneConfig::staleness`], set on the branch: [`Cluster::set_staleness`]). The
//! specialization is built once from a virtual epoch; a slice after a switch to another
//! branch resumes mid-epoch, where the worker's tape does not (its accesses are then
//! found through the plan's index: planned rows all the same).
//!
//! **Several processes** agree on every measurement, as `dnn::tune`'s do.

use std::time::Instant;

use iterstore::{BranchId as StoreBranch, BranchStates, Cluster, Staleness, Worker};
use iterstore_algo::mf::{check_ratings, clocks, global_mean, width, MfConfig, MfModel};
use iterstore_algo::ratings_layout::RatingsLayout;
use iterstore_data::{Rating, Ratings};
use iterstore_tune::{
    BranchId, Event, Measured, Options, Outcome, Setting, Space, Trainer, Tunable, Tuner,
};

use super::{init, layout_and_tables, snapshot, step, Scratch, Step};
use crate::tuning::{live, measured, per_clock, Alive};
use crate::{preprocess, AppConfig, AppError};

/// What `iterstore tune mf` tunes, and how.
#[derive(Clone, Debug)]
pub struct MfTuneConfig {
    /// The step size's range, searched log-uniformly.
    pub lr_range: (f64, f64),
    /// The staleness values to choose from; empty: the cluster's staleness, not tuned.
    pub staleness: Vec<u32>,
    /// Mini-batches per tuner clock (at least 1).
    pub clock_batches: usize,
    /// The loop's options; `epoch_clocks` and `max_trial_clocks` are set to an epoch.
    pub options: Options,
}

/// What an MF tuning gives back.
#[derive(Debug)]
pub struct MfTuned {
    /// The tuning: why it stopped, its setting, its timeline.
    pub outcome: Outcome,
    /// The factors of the branch trained last.
    pub model: MfModel,
    /// Their test RMSE (the training RMSE without held-out ratings).
    pub rmse: f64,
    /// Seconds of setup: tables, the virtual epoch, the initial factors.
    pub setup_s: f64,
}

/// One worker's state in one branch.
#[derive(Clone)]
struct Tuned {
    scratch: Scratch,
    /// The branch's parameters (its step size).
    params: MfConfig,
    /// The next mini-batch of the epoch.
    next: usize,
    /// Squared errors and ratings of each mini-batch of the last slice.
    errors: Vec<(f64, u64)>,
}

/// `n` mini-batches of worker `w`'s epoch from where it stopped, one CLOCK each, as
/// `super::iteration` trains them.
fn slice(
    w: &mut Worker<'_>,
    st: Step<'_>,
    layout: &RatingsLayout<'_>,
    t: &mut Tuned,
    n: usize,
) -> iterstore::Result<()> {
    let (tables, id) = (st.t, w.id());
    let Tuned {
        scratch,
        params,
        next,
        errors,
    } = t;
    for _ in 0..n {
        let (mut sq, mut count) = (0.0f64, 0u64);
        for r in layout.batch(id, *next) {
            let (u, i) = (u64::from(r.user), u64::from(r.item));
            let rows = [(&tables.users, u), (&tables.items, i)];
            w.read_update(
                rows,
                [&mut scratch.dl, &mut scratch.dr],
                |[l, rr], [dl, dr]| {
                    let e = step(params, st.mean, l, rr, r.value, dl, dr);
                    sq += f64::from(e) * f64::from(e);
                },
            )?;
            count += 1;
        }
        errors.push((sq, count));
        w.clock()?;
        *next = (*next + 1) % st.clocks;
    }
    Ok(())
}

/// The [`Trainer`] over a cluster's branches.
struct MfTrainer<'a> {
    cluster: &'a mut Cluster,
    step: Step<'a>,
    layout: &'a RatingsLayout<'a>,
    train: &'a Ratings,
    test: &'a [Rating],
    states: BranchStates<Tuned>,
    alive: Alive,
    clock_batches: usize,
}

impl MfTrainer<'_> {
    /// `b`'s factors as the servers hold them.
    fn model(&mut self, b: BranchId) -> Result<MfModel, AppError> {
        live(self.cluster, b)?;
        let (st, k) = (self.step, self.step.params.rank);
        snapshot(self.cluster, st.t, self.train, k, st.mean)
    }
}

impl Trainer for MfTrainer<'_> {
    type Error = AppError;

    fn root(&self) -> BranchId {
        0
    }

    fn fork(&mut self, parent: BranchId, setting: &Setting) -> Result<BranchId, AppError> {
        let id = self
            .alive
            .fork(self.cluster, &mut self.states, parent, setting)?;
        let lr = setting.get("lr").unwrap_or(0.0) as f32;
        for t in self.states.of_mut(StoreBranch(id))? {
            t.params.learning_rate = lr;
        }
        Ok(id)
    }

    fn train(&mut self, b: BranchId, clocks: u64) -> Result<Vec<Measured>, AppError> {
        let started = Instant::now();
        live(self.cluster, b)?;
        let (cb, st, layout) = (self.clock_batches, self.step, self.layout);
        let n = clocks as usize * cb;
        let states = self.states.of_mut(StoreBranch(b))?;
        for t in states.iter_mut() {
            t.errors.clear();
        }
        self.cluster
            .run_with(states, |w, t| slice(w, st, layout, t, n))?;
        let errors = states.iter().map(|t| t.errors.as_slice());
        per_clock(self.cluster, started, errors, clocks, cb, |sq, n| {
            (sq / n).sqrt()
        })
    }

    fn loss(&mut self, b: BranchId) -> Result<Measured, AppError> {
        let started = Instant::now();
        let value = self.model(b)?.rmse(&self.train.ratings);
        measured(self.cluster, started, value)
    }

    fn evaluate(&mut self, b: BranchId) -> Result<Measured, AppError> {
        let started = Instant::now();
        let model = self.model(b)?;
        let rmse = if self.test.is_empty() {
            model.rmse(&self.train.ratings)
        } else {
            model.rmse(self.test)
        };
        measured(self.cluster, started, -rmse)
    }

    fn free(&mut self, b: BranchId) -> Result<(), AppError> {
        self.alive.free(self.cluster, &mut self.states, b)
    }
}

/// The search space of `config`: the step size, and the staleness if tuned.
pub fn space(config: &MfTuneConfig) -> Result<Space, AppError> {
    let (lo, hi) = config.lr_range;
    let mut tunables = vec![Tunable::log_uniform("lr", lo, hi)];
    if !config.staleness.is_empty() {
        let values: Vec<f64> = config.staleness.iter().map(|&s| f64::from(s)).collect();
        tunables.push(Tunable::choice("staleness", values));
    }
    Space::new(tunables).map_err(|e| AppError::Invalid(format!("mf tune: {e}")))
}

/// Tunes MF on `cluster` (started for `cfg`, its staleness bounded): the tables, the
/// virtual epoch (virtual mode), the initial factors, then [`Tuner::run`] over the
/// cluster's branches, calling `on_event` with each event (the same on every process).
/// `options.target`, if any, is a test RMSE negated (the tuner's validations rise).
#[allow(clippy::too_many_arguments)]
pub fn tune_in(
    cluster: &mut Cluster,
    cfg: &AppConfig,
    params: &MfConfig,
    train: &Ratings,
    test: &[Rating],
    config: &MfTuneConfig,
    on_event: &mut dyn FnMut(&Event),
) -> Result<MfTuned, AppError> {
    cfg.validate()?;
    crate::check_cluster(cfg, cluster)?;
    params.validate()?;
    if config.clock_batches == 0 {
        return Err(AppError::Invalid(
            "mf tune: a tuner clock needs at least one mini-batch".into(),
        ));
    }
    if matches!(cfg.staleness, Staleness::Unbounded) {
        return Err(AppError::Invalid(
            "mf tune: branches switch bounded staleness only (not unbounded)".into(),
        ));
    }
    check_ratings(&train.ratings, train.num_users, train.num_items)?;
    check_ratings(test, train.num_users, train.num_items).map_err(|e| format!("test set: {e}"))?;
    let space = space(config)?;
    let (workers, n) = (cluster.total_workers(), train.ratings.len());
    let (wd, mean, per_epoch) = (width(params.rank), global_mean(&train.ratings), clocks(n));
    let epoch_clocks = per_epoch.div_ceil(config.clock_batches).max(1) as u64;
    let mut options = config.options.clone();
    options.epoch_clocks = epoch_clocks;
    options.max_trial_clocks = epoch_clocks.max(options.first_trial_clocks);
    let tuner = Tuner::new(space, options)
        .map_err(|e| AppError::Invalid(format!("mf tune: {e}")))?
        .observe(on_event);

    let setup = Instant::now();
    let (layout, owners, t) = layout_and_tables(cluster, train, params, workers, per_epoch)?;
    let st = Step {
        t,
        params,
        mean,
        clocks: per_epoch,
    };
    let mut states: Vec<Tuned> = (0..cfg.workers)
        .map(|_| Tuned {
            scratch: Scratch::new(wd),
            params: params.clone(),
            next: 0,
            errors: Vec::new(),
        })
        .collect();
    preprocess(cluster, cfg, &states, |w, t: &mut Tuned| {
        slice(w, st, &layout, t, per_epoch)
    })?;
    let mut scratch: Vec<Scratch> = states.iter().map(|t| t.scratch.clone()).collect();
    init(cluster, &mut scratch, &owners, t, params, workers)?;
    for s in &mut states {
        s.errors.clear();
    }
    let setup_s = setup.elapsed().as_secs_f64();

    let mut trainer = MfTrainer {
        cluster,
        step: st,
        layout: &layout,
        train,
        test,
        states: BranchStates::new(states),
        alive: Alive::new(),
        clock_batches: config.clock_batches,
    };
    let outcome = tuner.run(&mut trainer)?;
    let model = trainer.model(outcome.branch.unwrap_or(0))?;
    let rmse = if test.is_empty() {
        model.rmse(&train.ratings)
    } else {
        model.rmse(test)
    };
    Ok(MfTuned {
        outcome,
        model,
        rmse,
        setup_s,
    })
}

/// [`tune_in`] on a cluster of its own started for `cfg`; returns the tuning and the
/// seconds to start the cluster.
pub fn tune(
    cfg: &AppConfig,
    params: &MfConfig,
    train: &Ratings,
    test: &[Rating],
    config: &MfTuneConfig,
    on_event: &mut dyn FnMut(&Event),
) -> Result<(MfTuned, f64), AppError> {
    crate::with_cluster(cfg, |c| {
        tune_in(c, cfg, params, train, test, config, on_event)
    })
}
