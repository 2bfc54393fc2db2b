//! `iterstore tune dnn`: the data-parallel DNN trained by [`iterstore_tune`]'s tuning loop
//! (MLtuner) over the cluster's branches ([`Cluster::fork`], [`BranchStates`]), so that
//! nobody picks the learning rate.
//!
//! **A tuner clock** is [`TuneConfig::clock_batches`] mini-batches of every worker
//! (`data_parallel::slice`), continuing each worker's epoch where
//! the branch's last slice stopped; its loss is the mean training cross-entropy of those
//! mini-batches over the cluster, its seconds the run's wall time (the slowest process's)
//! shared evenly by its clocks. The tuner validates once an epoch's worth of clocks
//! (test accuracy, on the main thread like `run`'s, and timed), and its trials last at
//! most an epoch (of [`DnnConfig::batch`]'s mini-batches: a tuner clock of a larger
//! batch covers more samples).
//!
//! **A branch** is the store's branch of the weights plus every worker's state
//! (velocity, sample order, epoch position) forked with it, and its setting: the learning
//! rate (log-uniform over [`TuneConfig::lr_range`]) and, if tuned, the momentum (uniform
//! over [0, 0.99]) and the batch size (one of [`TuneConfig::batches`]; a branch forked
//! with another batch continues its epoch at the same fraction); the step decays by `lr_decay` over the epochs since the branch's
//! setting was chosen, as `run`'s does over the run's. The store's specialization is
//! built once, from a virtual iteration of one mini-batch: every mini-batch touches every
//! row in the same order, so any slice follows that tape (the tests check no access
//! leaves the plan).
//!
//! **Several processes** run the same loop in lockstep: every measurement the tuner sees
//! is agreed over the cluster (losses summed, seconds the slowest process's, the test
//! accuracy of the same snapshot), so every process's searcher proposes the same settings
//! and every branch op is the same collective.

use std::time::Instant;

use iterstore::{BranchId as StoreBranch, BranchStates, Cluster, Table};
use iterstore_algo::dnn::{Cnn, CnnSpec, DnnConfig, Mlp, MlpSpec, Network};
use iterstore_data::ImageSet;
use iterstore_tune::{
    BranchId, Event, Measured, Options, Outcome, Setting, Space, Trainer, Tunable, Tuner,
};

use super::data_parallel::{slice, Slice, State, Step};
use super::{create_tables, init, prepare, snapshot};
use crate::tuning::{live, measured, per_clock, Alive};
use crate::{preprocess, AppConfig, AppError};
use iterstore_algo::dnn::mlp::clocks;

/// Samples of the training set whose cross-entropy is a branch's loss before it trains
/// ([`Trainer::loss`]): the first ones of a fixed stride through the set.
const PROBE_SAMPLES: usize = 2048;

/// What `iterstore tune dnn` tunes, and how.
#[derive(Clone, Debug)]
pub struct TuneConfig {
    /// The learning rate's range, searched log-uniformly.
    pub lr_range: (f64, f64),
    /// Whether the momentum is tuned too (uniform over [0, 0.99]); else it is
    /// [`DnnConfig::momentum`].
    pub tune_momentum: bool,
    /// The batch sizes to choose from (samples per mini-batch over all workers); empty:
    /// [`DnnConfig::batch`], not tuned.
    pub batches: Vec<usize>,
    /// Mini-batches per tuner clock (at least 1).
    pub clock_batches: usize,
    /// The tuning loop's options. Its `epoch_clocks` and `max_trial_clocks` are set to
    /// one epoch's clocks here (validation once an epoch, trials at most an epoch).
    pub options: Options,
}

/// What a tuning gives back.
#[derive(Debug)]
pub struct DnnTuned<N> {
    /// The tuning: why it stopped, its setting, its timeline.
    pub outcome: Outcome,
    /// The weights of the branch trained last (the initial ones if none was chosen).
    pub model: N,
    /// Their test accuracy (0 without test images).
    pub accuracy: f64,
    /// Seconds of setup: tables, the virtual iteration, the initial weights.
    pub setup_s: f64,
}

/// One worker's state in one branch: the data-parallel state, the branch's setting, and
/// the losses of the slice it ran last.
#[derive(Clone)]
struct Tuned<N: Network> {
    s: State<N>,
    sl: Slice,
    losses: Vec<(f64, u64)>,
}

/// The [`Trainer`] over a cluster's branches.
struct DnnTrainer<'a, N: Network> {
    cluster: &'a mut Cluster,
    step: Step<'a>,
    zeros: &'a N,
    states: BranchStates<Tuned<N>>,
    alive: Alive,
    clock_batches: usize,
    tune_momentum: bool,
    probe: Vec<u32>,
}

impl<N: Network> DnnTrainer<'_, N> {
    /// `b`'s weights as the servers hold them.
    fn model(&mut self, b: BranchId) -> Result<N, AppError> {
        live(self.cluster, b)?;
        snapshot(self.cluster, self.step.tables, self.zeros)
    }
}

impl<N: Network> Trainer for DnnTrainer<'_, N> {
    type Error = AppError;

    fn root(&self) -> BranchId {
        0
    }

    fn fork(&mut self, parent: BranchId, setting: &Setting) -> Result<BranchId, AppError> {
        let id = self
            .alive
            .fork(self.cluster, &mut self.states, parent, setting)?;
        let lr = setting.get("lr").unwrap_or(0.0) as f32;
        let momentum = match setting.get("momentum") {
            Some(m) if self.tune_momentum => m as f32,
            _ => self.step.params.momentum,
        };
        let n = self.step.data.train.len();
        for t in self.states.of_mut(StoreBranch(id))? {
            let batch = setting.get("batch").map_or(t.sl.batch, |b| b as usize);
            t.s.rebatch(clocks(n, t.sl.batch), clocks(n, batch));
            t.sl = Slice {
                batch,
                learning_rate: lr,
                momentum,
                from_epoch: t.s.epoch(),
            };
        }
        Ok(id)
    }

    fn train(&mut self, b: BranchId, clocks: u64) -> Result<Vec<Measured>, AppError> {
        let started = Instant::now();
        live(self.cluster, b)?;
        let (cb, step) = (self.clock_batches, self.step);
        let n = clocks as usize * cb;
        let states = self.states.of_mut(StoreBranch(b))?;
        for t in states.iter_mut() {
            t.losses.clear();
        }
        self.cluster.run_with(states, |w, t| {
            slice(w, step, &mut t.s, t.sl, n, &mut t.losses)
        })?;
        let losses = states.iter().map(|t| t.losses.as_slice());
        per_clock(self.cluster, started, losses, clocks, cb, |sum, n| sum / n)
    }

    fn loss(&mut self, b: BranchId) -> Result<Measured, AppError> {
        let started = Instant::now();
        let model = self.model(b)?;
        // Every process measures the same snapshot on the same samples (the time is the
        // slowest's).
        let mut scratch = model.scratch(self.probe.len());
        let mut deltas: Vec<Vec<f32>> = model.weights().to_vec();
        let train = &self.step.data.train;
        let loss = model.gradient_step(train, &self.probe, 0.0, &mut scratch, &mut deltas);
        let value = loss / self.probe.len().max(1) as f64;
        measured(self.cluster, started, value)
    }

    fn evaluate(&mut self, b: BranchId) -> Result<Measured, AppError> {
        let started = Instant::now();
        let value = self.model(b)?.accuracy(&self.step.data.test);
        measured(self.cluster, started, value)
    }

    fn free(&mut self, b: BranchId) -> Result<(), AppError> {
        self.alive.free(self.cluster, &mut self.states, b)
    }
}

/// The search space of `config`: the learning rate, and the momentum if tuned.
pub fn space(config: &TuneConfig) -> Result<Space, AppError> {
    let (lo, hi) = config.lr_range;
    let mut tunables = vec![Tunable::log_uniform("lr", lo, hi)];
    if config.tune_momentum {
        tunables.push(Tunable::uniform("momentum", 0.0, 0.99));
    }
    if !config.batches.is_empty() {
        let values: Vec<f64> = config.batches.iter().map(|&b| b as f64).collect();
        tunables.push(Tunable::choice("batch", values));
    }
    Space::new(tunables).map_err(|e| AppError::Invalid(format!("dnn tune: {e}")))
}

/// Checks that `params` train in slices: data-parallel workers stepping with momentum
/// (no server rule, epoch quorum, layer updates or warm start).
fn check_tunable(params: &DnnConfig, config: &TuneConfig) -> Result<(), AppError> {
    let refuse = |what: &str| {
        Err(AppError::Invalid(format!(
            "dnn tune: {what} is not tuned yet (tuning trains data-parallel workers that \
             step with momentum)"
        )))
    };
    if params.server_rule.is_some() {
        return refuse("a server rule");
    }
    if params.epoch_quorum.is_some() {
        return refuse("an epoch quorum");
    }
    if params.layer_updates {
        return refuse("--layer-updates");
    }
    if params.warm_start > 0 {
        return refuse("a warm start");
    }
    if config.clock_batches == 0 {
        return Err(AppError::Invalid(
            "dnn tune: a tuner clock needs at least one mini-batch".into(),
        ));
    }
    if config.batches.contains(&0) {
        return Err(AppError::Invalid(
            "dnn tune: a batch size must be at least 1".into(),
        ));
    }
    let (lo, hi) = config.lr_range;
    if !(lo > 0.0 && lo < hi && hi.is_finite()) {
        return Err(AppError::Invalid(format!(
            "dnn tune: the learning-rate range {lo}:{hi} must be 0 < low < high"
        )));
    }
    Ok(())
}

/// Tunes the network of `zeros`' shape on `cluster` (started for `cfg`): the tables, the
/// virtual iteration of one mini-batch (virtual mode), the initial weights, then
/// [`Tuner::run`] over the cluster's branches, calling `on_event` with each event (the
/// same on every process).
pub fn tune_in<N: Network>(
    cluster: &mut Cluster,
    cfg: &AppConfig,
    params: &DnnConfig,
    data: &ImageSet,
    zeros: N,
    config: &TuneConfig,
    on_event: &mut dyn FnMut(&Event),
) -> Result<DnnTuned<N>, AppError> {
    check_tunable(params, config)?;
    // The run's checks (the cluster, the parameters, the data) and its fingerprint agreed.
    let report = prepare(cluster, cfg, params, data, &zeros)?;
    super::fingerprint::agree(cluster, cfg, &report)?;
    let space = space(config)?;
    let n = data.train.len();
    let per_epoch = clocks(n, params.batch);
    let epoch_clocks = per_epoch.div_ceil(config.clock_batches).max(1) as u64;
    let mut options = config.options.clone();
    options.epoch_clocks = epoch_clocks;
    options.max_trial_clocks = epoch_clocks.max(options.first_trial_clocks);
    let tuner = Tuner::new(space, options)
        .map_err(|e| AppError::Invalid(format!("dnn tune: {e}")))?
        .observe(on_event);

    let setup = Instant::now();
    let tables: Vec<Table<f32>> = create_tables(cluster, &zeros, None, None)?;
    let workers = cluster.total_workers();
    // Buffers for the largest mini-batch any branch may train.
    let largest = config
        .batches
        .iter()
        .copied()
        .fold(params.batch, usize::max);
    let capacity = n.div_ceil(workers).div_ceil(clocks(n, largest)) + 1;
    let sl = Slice {
        batch: params.batch,
        learning_rate: 0.0,
        momentum: params.momentum,
        from_epoch: 0,
    };
    let mut states: Vec<Tuned<N>> = (0..cfg.workers)
        .map(|_| Tuned {
            s: State::new(&zeros, capacity),
            sl,
            losses: Vec::new(),
        })
        .collect();
    let step = Step {
        tables: &tables,
        params,
        data,
        replicas: workers,
        read_every: 1,
        write_every: 1,
        clocks: per_epoch,
        quorum: None,
    };
    preprocess(cluster, cfg, &states, |w, t: &mut Tuned<N>| {
        slice(w, step, &mut t.s, t.sl, 1, &mut t.losses)
    })?;
    init(cluster, &mut states, &tables, &zeros, params.seed, workers)?;
    let setup_s = setup.elapsed().as_secs_f64();

    let stride = (n / PROBE_SAMPLES).max(1);
    let probe = (0..n)
        .step_by(stride)
        .take(PROBE_SAMPLES)
        .map(|i| i as u32)
        .collect();
    let mut trainer = DnnTrainer {
        cluster,
        step,
        zeros: &zeros,
        states: BranchStates::new(states),
        alive: Alive::new(),
        clock_batches: config.clock_batches,
        tune_momentum: config.tune_momentum,
        probe,
    };
    let outcome = tuner.run(&mut trainer)?;
    let last = outcome.branch.unwrap_or(0);
    let model = trainer.model(last)?;
    let accuracy = model.accuracy(&data.test);
    Ok(DnnTuned {
        outcome,
        model,
        accuracy,
        setup_s,
    })
}

/// What [`tune`] gives back, whichever the network: the tuning, the final branch's test
/// accuracy and model file, and the seconds before tuning began.
#[derive(Debug)]
pub struct TuneRun {
    /// The tuning: why it stopped, its setting, its timeline.
    pub outcome: Outcome,
    /// The final branch's test accuracy.
    pub accuracy: f64,
    /// The final branch's model file ([`DnnOutcome::write_model`](super::DnnOutcome::write_model)'s format).
    pub model_file: Vec<u8>,
    /// Seconds to start the cluster, create the tables, specialize and initialize.
    pub setup_s: f64,
}

/// [`tune_in`] for the MLP, or the CNN if `cnn`, on a cluster of its own started for
/// `cfg`.
pub fn tune(
    cfg: &AppConfig,
    params: &DnnConfig,
    cnn: bool,
    data: &ImageSet,
    config: &TuneConfig,
    on_event: &mut dyn FnMut(&Event),
) -> Result<TuneRun, AppError> {
    fn finish<N: Network>(t: DnnTuned<N>, start_s: f64) -> Result<TuneRun, AppError> {
        let mut model_file = Vec::new();
        super::write_model_of(&t.model, &mut model_file)
            .map_err(|e| AppError::Invalid(format!("dnn tune: the model file: {e}")))?;
        Ok(TuneRun {
            outcome: t.outcome,
            accuracy: t.accuracy,
            model_file,
            setup_s: t.setup_s + start_s,
        })
    }
    params.validate()?;
    if cnn {
        let spec = CnnSpec::new(data.train.rows, data.train.cols, params, data.classes);
        spec.check()
            .map_err(|e| AppError::Invalid(format!("dnn --model cnn: {e}")))?;
        let (t, start_s) = crate::with_cluster(cfg, |c| {
            tune_in(c, cfg, params, data, Cnn::zeros(&spec), config, on_event)
        })?;
        finish(t, start_s)
    } else {
        let spec = MlpSpec::new(data.train.pixels_per_image(), params, data.classes);
        let (t, start_s) = crate::with_cluster(cfg, |c| {
            tune_in(c, cfg, params, data, Mlp::zeros(&spec), config, on_event)
        })?;
        finish(t, start_s)
    }
}
