//! A DNN (an MLP or a CNN with a softmax output, [`iterstore_algo::dnn`]) trained by mini-batch SGD
//! on the parameter server. [`run`] trains the MLP, [`run_cnn`] the CNN, over
//! data-parallel workers, with one generic loop over a [`Network`] (described below);
//! [`run_partitioned_in`] and [`run_cnn_partitioned_in`] train them partitioned over
//! model replicas as a plan says (`partitioned` module: the network's stages split into
//! segments over a replica's workers). Every way shares the initialisation, evaluation,
//! checkpoints and report.
//!
//! **Tables.** One `f32` table per weight layer, `dnn.w<l>`: for a fully connected layer
//! one row per output neuron of layer `l`, its input weights then its bias
//! ([`MlpSpec::width`]), so a layer's rows are its weight matrix ([`Mlp`]); for a
//! convolution one row per kernel, its taps then its bias ([`Cnn`]).
//!
//! **Iteration** (one epoch, data-parallel). Worker `w` (global id) owns the training images
//! [`partition`]`(n, W, w)`, in an order shuffled per epoch ([`epoch_order`], keyed by
//! seed, epoch and worker; the epoch count is the worker's own state, kept across runs by
//! [`Cluster::run_with`]). The epoch is [`clocks`]`(n, batch)` mini-batches; for mini-batch
//! `b` every worker READs every row of every layer, computes the SGD step of its share of
//! the mini-batch ([`mini_batch`]: part `b` of its order) with [`gradient_step`] —
//! `−η_e / batch` times the summed gradient of the cross-entropy, the step `η_e` decaying
//! with the epoch ([`DnnConfig::rate`]) — folds it into its velocity (momentum; a worker's
//! own state, like its epoch) and UPDATEs every row by the velocity,
//! and CLOCKs. Under BSP the next mini-batch's READs see every worker's step, so the
//! workers together run sequential mini-batch SGD with mini-batches of `batch` samples
//! ([`reference()`] is the oracle); under SSP a worker's READ may miss up to `s` clocks of
//! the others' steps. The rows touched never depend on the values read, so a virtual
//! iteration (on zeros) touches exactly the rows a real one does.
//!
//! **Layer updates** ([`DnnConfig::layer_updates`], with a server rule): instead of
//! UPDATEing every row of a layer by its gradient, a worker sends the layer's error terms
//! (times `−1/batch`) and inputs of its samples as one rank-k UPDATE
//! ([`Worker::update_outer`]), which the layer's shards multiply out before stepping
//! (Project Adam); with `write_every > 1` the factors of several mini-batches go
//! together. The report's `update_bytes` counts the bytes per weight table.
//!
//! **Warm start** ([`DnnConfig::warm_start`], DistBelief's): after the initial weights,
//! replica 0 alone trains that many mini-batches of its share (reading and writing every
//! one) while the other workers only CLOCK, then the epochs start (`init_s` includes it).
//!
//! **Epoch quorum** ([`DnnConfig::epoch_quorum`], asynchronous replicas only): an epoch
//! ends once that fraction of the replicas have finished their shares; the others stop
//! where they are (their remaining mini-batches only CLOCK), write their unwritten steps,
//! and take the samples they did not reach first into their next epoch
//! (`data_parallel` and `quorum` modules). The report counts per epoch the samples
//! processed, the replicas cut and the samples carried ([`QuorumReport`]).
//!
//! **Initialisation.** Every row receives [`init_row`] (keyed by seed, layer and row, so
//! the same on any number of workers) through one UPDATE by worker `k mod W`, `k` counting
//! the rows of all layers.
//!
//! **Evaluation.** A worker sums its samples' cross-entropy as it computes them (on the
//! weights it read: the running training loss of the epoch); after each epoch the
//! processes all-gather the sums and the objective is their mean. The main thread then
//! snapshots the tables and measures the test accuracy (not timed). A non-finite loss
//! stops the run with [`AppError::Diverged`].
//!
//! **Model file** ([`DnnOutcome::write_model`], the CLI's `--output`): a comment line
//! `# iterstore dnn model: mlp sizes=784-256-10 activation=relu` (for the CNN `cnn
//! sizes=28x28-c5x16-p2-c5x32-p2-128-10 activation=relu`), then one line per row
//! `<layer><TAB><row><TAB>w_1<TAB>…<TAB>w_n<TAB>bias` (floats written to round-trip).

mod app;
mod data_parallel;
mod init;
mod partitioned;
mod quorum;
mod server;
pub mod tune;

use data_parallel::{iteration, warm_up, State, Step};

use init::{init, init_set};
use server::server_rule;

pub use app::{Dnn, DnnParams, DnnRun};

use std::io::{self, Write};

use iterstore::{Cluster, Rule, Table, Worker};

use super::checkpoint::{self, Restart, RunId};
use super::fingerprint;
use super::{
    check_finite, dense, preprocess, timed, timed_run, AppConfig, AppError, IterRecord, Observer,
    QuorumReport, RunReport,
};
use iterstore_algo::dnn::mlp::clocks;
#[cfg(doc)]
use iterstore_algo::dnn::mlp::{epoch_order, gradient_step, init_row, mini_batch, reference};
use iterstore_algo::dnn::quorum::replicas_needed;
use iterstore_algo::dnn::stack::Stack;
use iterstore_algo::dnn::{
    Cnn, CnnSpec, DataParallel, DnnConfig, Layout, Mlp, MlpSpec, Network, Partitioning,
};
#[cfg(doc)]
use iterstore_algo::partition;
use iterstore_data::ImageSet;

/// The outcome of a store-backed DNN run.
#[derive(Debug, Clone)]
pub struct DnnOutcome<N = Mlp> {
    /// Timings and objectives (`test_accuracy` included).
    pub report: RunReport,
    /// The final weights.
    pub model: N,
}

impl<N: Network> DnnOutcome<N> {
    /// Writes the model in the text format described in the module docs.
    pub fn write_model(&self, out: &mut dyn Write) -> io::Result<()> {
        write_model_of(&self.model, out)
    }
}

/// Writes `m` in the model file's text format (module docs).
fn write_model_of<N: Network>(m: &N, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "# iterstore dnn model: {} sizes={} activation={}",
        m.kind(),
        m.sizes_text(),
        m.activation().name()
    )?;
    for (l, layer) in m.weights().iter().enumerate() {
        for (r, row) in layer.chunks_exact(m.width(l)).enumerate() {
            write!(out, "{l}\t{r}")?;
            for v in row {
                write!(out, "\t{v}")?;
            }
            writeln!(out)?;
        }
    }
    Ok(())
}

/// What [`Training::run`] needs of a worker's state: its progress through the epoch, and
/// what a checkpoint keeps of it (what its next epochs depend on besides the tables: its
/// epoch count, which keys its sample order and step size, and its velocities and
/// unwritten steps).
trait Saved: Clone + Send {
    /// The summed cross-entropy of this epoch's samples so far, and their count.
    fn progress(&self) -> (f64, u64);
    /// `Some(samples carried into the next epoch)` if the epoch quorum ended this
    /// worker's last epoch before its share was done.
    fn cut_short(&self) -> Option<usize> {
        None
    }
    /// The state as bytes.
    fn save(&self) -> Vec<u8>;
    /// Restores what [`save`](Self::save) wrote, refusing another shape.
    fn restore(&mut self, bytes: &[u8]) -> Result<(), String>;
}

/// With an epoch quorum ([`DnnConfig::epoch_quorum`]): how many of `replicas` replicas'
/// finished shares end an epoch, after checking the run can have one (asynchronous, two
/// replicas or more); recorded in `report`.
fn epoch_quorum(
    cfg: &AppConfig,
    params: &DnnConfig,
    replicas: usize,
    report: &mut RunReport,
) -> Result<Option<usize>, AppError> {
    let Some(fraction) = params.epoch_quorum else {
        return Ok(None);
    };
    if cfg.staleness != iterstore::Staleness::Unbounded {
        return Err(AppError::Invalid(format!(
            "dnn --epoch-quorum {fraction}: needs asynchronous replicas (--staleness \
             unbounded); under SSP the fast replicas wait for the slowest at every clock"
        )));
    }
    if replicas < 2 {
        return Err(AppError::Invalid(format!(
            "dnn --epoch-quorum {fraction}: needs two model replicas or more, the run has \
             {replicas}"
        )));
    }
    let needed = replicas_needed(fraction, replicas);
    report.param("epoch_quorum", fraction);
    report.epoch_quorum = Some(QuorumReport::new(fraction, needed));
    Ok(Some(needed))
}

/// The bytes of UPDATEs every process's workers sent to each weight table (all-gathered:
/// every process must call it), for the report; tables nobody updated are left out.
fn cluster_update_bytes(
    cluster: &mut Cluster,
    tables: &[Table<f32>],
) -> Result<Vec<iterstore::stats::TableUpdates>, AppError> {
    let names: Vec<String> = (0..tables.len()).map(|l| format!("dnn.w{l}")).collect();
    let local = cluster.update_bytes();
    let mine: Vec<f64> = names
        .iter()
        .map(|n| {
            local
                .iter()
                .find(|u| &u.table == n)
                .map_or(0.0, |u| u.bytes as f64)
        })
        .collect();
    let all = cluster.all_gather(&mine)?;
    Ok(names
        .into_iter()
        .enumerate()
        .map(|(l, table)| iterstore::stats::TableUpdates {
            table,
            bytes: all
                .iter()
                .map(|p| p.get(l).copied().unwrap_or(0.0) as u64)
                .sum(),
        })
        .filter(|u| u.bytes > 0)
        .collect())
}

/// The current weights, read back from the servers.
fn snapshot<N: Network>(
    cluster: &Cluster,
    tables: &[Table<f32>],
    zeros: &N,
) -> Result<N, AppError> {
    let mut m = zeros.clone();
    for (l, table) in tables.iter().enumerate() {
        let (rows, width) = (m.rows(l), m.width(l));
        m.weights_mut()[l] = dense(cluster.snapshot(table)?, rows, width);
    }
    Ok(m)
}

/// Checks that `data` can be trained on: training images, labels below the classes, one
/// image size.
fn check_data(data: &ImageSet) -> Result<(), AppError> {
    if data.train.is_empty() {
        return Err(AppError::Invalid("dnn: no training images".into()));
    }
    if !(2..=256).contains(&data.classes) {
        return Err(AppError::Invalid(format!(
            "dnn: {} classes (expected 2 to 256)",
            data.classes
        )));
    }
    for (name, images) in [("training", &data.train), ("test", &data.test)] {
        if images.labels.len() != images.len() {
            return Err(AppError::Invalid(format!(
                "dnn: {} {name} labels for {} images",
                images.labels.len(),
                images.len()
            )));
        }
        if images
            .labels
            .iter()
            .any(|&c| usize::from(c) >= data.classes)
        {
            return Err(AppError::Invalid(format!(
                "dnn: a {name} label is not below {} classes",
                data.classes
            )));
        }
    }
    if !data.test.is_empty()
        && (data.test.rows, data.test.cols) != (data.train.rows, data.train.cols)
    {
        return Err(AppError::Invalid(
            "dnn: test and training images differ in size".into(),
        ));
    }
    Ok(())
}

/// Runs the MLP on `data` with `cfg`, evaluating on its test images after every epoch.
/// See the module docs for the tables and phases.
pub fn run(cfg: &AppConfig, params: &DnnConfig, data: &ImageSet) -> Result<DnnOutcome, AppError> {
    run_observed(cfg, params, data, &mut |_| {})
}

/// [`run`] for the CNN ([`CnnSpec::new`] of `params`).
pub fn run_cnn(
    cfg: &AppConfig,
    params: &DnnConfig,
    data: &ImageSet,
) -> Result<DnnOutcome<Cnn>, AppError> {
    run_cnn_observed(cfg, params, data, &mut |_| {})
}

/// [`run_observed`] for the CNN.
pub fn run_cnn_observed(
    cfg: &AppConfig,
    params: &DnnConfig,
    data: &ImageSet,
    observer: Observer<'_>,
) -> Result<DnnOutcome<Cnn>, AppError> {
    run_cnn_partitioned_observed(cfg, params, data, None, observer)
}

/// `f` on a cluster of its own, started for `cfg` and shut down after; the start counts
/// as setup.
fn on_own_cluster<N>(
    cfg: &AppConfig,
    f: impl FnOnce(&mut Cluster) -> Result<DnnOutcome<N>, AppError>,
) -> Result<DnnOutcome<N>, AppError> {
    let (mut outcome, start_s) = super::with_cluster(cfg, f)?;
    outcome.report.setup_s += start_s;
    Ok(outcome)
}

/// [`run_in`] for the CNN.
pub fn run_cnn_in(
    cluster: &mut Cluster,
    cfg: &AppConfig,
    params: &DnnConfig,
    data: &ImageSet,
    observer: Observer<'_>,
) -> Result<DnnOutcome<Cnn>, AppError> {
    run_cnn_partitioned_in(cluster, cfg, params, data, None, observer)
}

/// [`run_cnn_in`] partitioned as `partitioning` asks (a plan's, one value per layer of
/// the performance model's description, pooling included: [`Stack::cnn`]); as
/// [`run_partitioned_in`] for the MLP.
pub fn run_cnn_partitioned_in(
    cluster: &mut Cluster,
    cfg: &AppConfig,
    params: &DnnConfig,
    data: &ImageSet,
    partitioning: Option<&Partitioning>,
    observer: Observer<'_>,
) -> Result<DnnOutcome<Cnn>, AppError> {
    params.validate()?;
    let spec = CnnSpec::new(data.train.rows, data.train.cols, params, data.classes);
    spec.check()
        .map_err(|e| AppError::Invalid(format!("dnn --model cnn: {e}")))?;
    let stack = Stack::cnn(&spec);
    run_split_in(
        cluster,
        cfg,
        params,
        data,
        Cnn::zeros(&spec),
        &stack,
        partitioning,
        observer,
    )
}

/// [`run_cnn_partitioned_in`] on a cluster of its own.
pub fn run_cnn_partitioned_observed(
    cfg: &AppConfig,
    params: &DnnConfig,
    data: &ImageSet,
    partitioning: Option<&Partitioning>,
    observer: Observer<'_>,
) -> Result<DnnOutcome<Cnn>, AppError> {
    on_own_cluster(cfg, |c| {
        run_cnn_partitioned_in(c, cfg, params, data, partitioning, observer)
    })
}

/// [`run`], calling `observer` after each epoch is evaluated.
pub fn run_observed(
    cfg: &AppConfig,
    params: &DnnConfig,
    data: &ImageSet,
    observer: Observer<'_>,
) -> Result<DnnOutcome, AppError> {
    run_partitioned_observed(cfg, params, data, None, observer)
}

/// [`run_observed`] with the MLP partitioned as `partitioning` asks
/// ([`run_partitioned_in`]).
pub fn run_partitioned_observed(
    cfg: &AppConfig,
    params: &DnnConfig,
    data: &ImageSet,
    partitioning: Option<&Partitioning>,
    observer: Observer<'_>,
) -> Result<DnnOutcome, AppError> {
    on_own_cluster(cfg, |c| {
        run_partitioned_in(c, cfg, params, data, partitioning, observer)
    })
}

/// [`run_observed`] on a cluster already started (for example one process of
/// [`Cluster::run_local_processes`]): this process's workers take their partitions by
/// global worker id, so every process of the cluster must call it alike. The cluster
/// stays up.
pub fn run_in(
    cluster: &mut Cluster,
    cfg: &AppConfig,
    params: &DnnConfig,
    data: &ImageSet,
    observer: Observer<'_>,
) -> Result<DnnOutcome, AppError> {
    run_partitioned_in(cluster, cfg, params, data, None, observer)
}

/// [`run_in`] with the layers partitioned over model replicas as `partitioning` asks (a
/// plan's, [`Partitioning::from_plan`]); `None`, or whole layers on one worker per
/// replica, is the data-parallel run.
pub fn run_partitioned_in(
    cluster: &mut Cluster,
    cfg: &AppConfig,
    params: &DnnConfig,
    data: &ImageSet,
    partitioning: Option<&Partitioning>,
    observer: Observer<'_>,
) -> Result<DnnOutcome, AppError> {
    let spec = MlpSpec::new(data.train.pixels_per_image(), params, data.classes);
    let stack = Stack::mlp(&spec);
    run_split_in(
        cluster,
        cfg,
        params,
        data,
        Mlp::zeros(&spec),
        &stack,
        partitioning,
        observer,
    )
}

/// The network of `zeros`' shape (its stages `stack`) partitioned as `partitioning` asks:
/// the data-parallel run without a partitioning or when the layout splits nothing, else
/// the partitioned one (`partitioned` module).
#[allow(clippy::too_many_arguments)]
fn run_split_in<N: Network>(
    cluster: &mut Cluster,
    cfg: &AppConfig,
    params: &DnnConfig,
    data: &ImageSet,
    zeros: N,
    stack: &Stack,
    partitioning: Option<&Partitioning>,
    observer: Observer<'_>,
) -> Result<DnnOutcome<N>, AppError> {
    let Some(asked) = partitioning else {
        let every = DataParallel::every_worker(cluster.total_workers());
        return run_network_in(cluster, cfg, params, data, zeros, every, observer);
    };
    params.validate()?;
    let layout = Layout::new(asked, stack, cluster.total_workers(), params.batch).map_err(|e| {
        AppError::Invalid(format!(
            "dnn --model {} partitioning ({asked}): {e}",
            zeros.kind()
        ))
    })?;
    if let Some(dp) = layout.data_parallel() {
        let mut outcome = run_network_in(cluster, cfg, params, data, zeros, dp, observer)?;
        outcome.report.param("partitioning", asked.to_string());
        return Ok(outcome);
    }
    if params.epoch_quorum.is_some()
        || params.straggler.is_some()
        || params.layer_updates
        || params.warm_start > 0
    {
        return Err(AppError::Invalid(format!(
            "dnn: an epoch quorum, a straggler, layer updates or a warm start with a \
             partitioned replica ({asked}) are not supported yet: use data parallelism \
             (--replicas, --n-read, --n-write)"
        )));
    }
    if params.server_rule.is_some() {
        return Err(AppError::Invalid(format!(
            "dnn: a server rule with a partitioned replica ({asked}) is not supported yet: \
             use data parallelism (--replicas, --n-read, --n-write)"
        )));
    }
    let mut report = prepare(cluster, cfg, params, data, &zeros)?;
    report.param("partitioning", asked.to_string());
    report.param("replica_workers", layout.replica_workers);
    report.param("layout", layout.describe(stack).join("; "));
    let n = data.train.len();
    let clocks = clocks(n, params.batch);
    let shards = weight_shards(layout.parameter_servers, cluster, cfg, &mut report)?;
    fingerprint::agree(cluster, cfg, &report)?;
    let (setup, setup_s) = timed(|| -> Result<_, AppError> {
        let tables = create_tables(cluster, &zeros, shards, None)?;
        let capacity = n.div_ceil(layout.replicas).div_ceil(clocks);
        let first = cluster.rank() * cfg.workers;
        let states: Vec<partitioned::State> = (first..first + cfg.workers)
            .map(|w| partitioned::State::new(stack, &layout, w, capacity))
            .collect();
        Ok((tables, states))
    });
    let (tables, states) = setup?;
    report.setup_s = setup_s;
    let epoch = partitioned::Epoch {
        tables: &tables,
        params,
        stack,
        layout: &layout,
        data,
        clocks,
    };
    let train = Training {
        tables: &tables,
        params,
        data,
        zeros,
        warm: None,
    };
    train.run(
        cluster,
        cfg,
        report,
        states,
        |w, s| partitioned::iteration(w, epoch, s),
        observer,
    )
}

/// The report of a DNN run with its parameters and dataset, after checking the run can
/// start.
fn prepare<N: Network>(
    cluster: &Cluster,
    cfg: &AppConfig,
    params: &DnnConfig,
    data: &ImageSet,
    zeros: &N,
) -> Result<RunReport, AppError> {
    cfg.validate()?;
    super::check_cluster(cfg, cluster)?;
    params.validate()?;
    check_data(data)?;
    let mut report = RunReport::new("dnn", "train_cross_entropy", cfg);
    report.processes = cluster.processes();
    for (k, v) in [
        ("train_images", data.train.len() as u64),
        ("test_images", data.test.len() as u64),
        ("pixels", data.train.pixels_per_image() as u64),
        ("classes", data.classes as u64),
    ] {
        report.dataset.insert(k, v);
    }
    fingerprint::input_digest(&mut report, fingerprint::images(data));
    report.param("model", zeros.kind());
    report.param("sizes", zeros.sizes_text());
    report.param("parameters", zeros.parameters());
    report.param("activation", zeros.activation().name());
    report.param("learning_rate", params.learning_rate);
    report.param("lr_decay", params.lr_decay);
    report.param("momentum", params.momentum);
    if let Some(rule) = params.server_rule {
        report.param("server_rule", rule.name());
    }
    report.param("batch", params.batch);
    report.param("seed", params.seed);
    report.param(
        "clocks_per_iteration",
        clocks(data.train.len(), params.batch),
    );
    Ok(report)
}

/// One table per weight layer of `zeros`' shape, on the global shards `shards` if given
/// (dedicated parameter servers), else spread over all.
fn create_tables<N: Network>(
    cluster: &mut Cluster,
    zeros: &N,
    shards: Option<std::ops::Range<usize>>,
    rule: Option<Rule>,
) -> Result<Vec<Table<f32>>, AppError> {
    let tables = (0..zeros.layer_count()).map(|l| {
        let (name, width) = (format!("dnn.w{l}"), zeros.width(l));
        let rows = Some(zeros.rows(l) as u64);
        match (&shards, rule) {
            (None, Some(rule)) => cluster.create_table_with_rule::<f32>(&name, width, rows, rule),
            (Some(range), Some(rule)) => {
                cluster.create_table_with_rule_on::<f32>(&name, width, rows, rule, range.clone())
            }
            (None, None) => cluster.create_table::<f32>(&name, width),
            (Some(range), None) => cluster.create_table_on::<f32>(&name, width, range.clone()),
        }
    });
    Ok(tables.collect::<iterstore::Result<_>>()?)
}

/// The shards of `parameter_servers` dedicated parameter servers (the cluster's last
/// ones), recorded in `report`; `None` without (every shard).
fn weight_shards(
    parameter_servers: Option<usize>,
    cluster: &Cluster,
    cfg: &AppConfig,
    report: &mut RunReport,
) -> Result<Option<std::ops::Range<usize>>, AppError> {
    if parameter_servers.is_none() {
        return Ok(None);
    }
    let range = DataParallel::weight_shards(parameter_servers, cluster.processes() * cfg.shards)
        .map_err(|e| AppError::Invalid(format!("dnn: {e}")))?;
    report.param("weight_shards", format!("{range:?}"));
    Ok(Some(range))
}

/// What every way of training shares: the tables, the hyper-parameters, the data and the
/// network's shape.
struct Training<'a, N, S> {
    tables: &'a [Table<f32>],
    params: &'a DnnConfig,
    data: &'a ImageSet,
    zeros: N,
    /// The warm start's run, if any.
    warm: Option<WarmUp<'a, S>>,
}

/// A run before the first epoch, after the initial weights (the warm start).
type WarmUp<'a, S> = &'a (dyn Fn(&mut Worker<'_>, &mut S) -> iterstore::Result<()> + Sync);

impl<N: Network, S: Saved> Training<'_, N, S> {
    /// A resume (with `--resume`), the virtual iteration (virtual mode), the initial
    /// weights and the `warm` run if any (unless resumed; its time counts as the
    /// initialisation's), then one `iteration` per epoch on every worker, each
    /// followed by the mean training loss over the cluster, the test accuracy and a
    /// checkpoint when one is due.
    fn run(
        self,
        cluster: &mut Cluster,
        cfg: &AppConfig,
        mut report: RunReport,
        mut states: Vec<S>,
        iteration: impl Fn(&mut Worker<'_>, &mut S) -> iterstore::Result<()> + Sync,
        observer: Observer<'_>,
    ) -> Result<DnnOutcome<N>, AppError> {
        let (tables, zeros) = (self.tables, &self.zeros);
        let workers = cluster.total_workers();
        let run_json = checkpoint::run_json(&report);
        let id = RunId {
            app: "dnn",
            run: &run_json,
            clocks_per_iteration: clocks(self.data.train.len(), self.params.batch) as u64,
            init_clocks: self.init_clocks(),
        };
        let restart = checkpoint::resume(cluster, cfg, &id)?;
        if let Some(r) = &restart {
            // Velocities and sample orders follow the workers: the same total is needed.
            let first = cluster.rank() * cfg.workers;
            let blobs = r.same_workers("dnn", workers, first, cfg.workers)?;
            for (l, (state, blob)) in states.iter_mut().zip(blobs).enumerate() {
                state.restore(blob).map_err(|e| r.bad_state(first + l, e))?;
            }
        }
        report.resumed = restart.as_ref().map(Restart::report);
        let start = restart.as_ref().map_or(0, |r| r.done);
        let (pre_s, pattern) = preprocess(cluster, cfg, &states, &iteration)?;
        report.preprocess_s = pre_s;
        report.pattern = pattern;
        if restart.is_none() {
            report.init_s = match self.params.server_rule {
                None => init(
                    cluster,
                    &mut states,
                    tables,
                    zeros,
                    self.params.seed,
                    workers,
                )?,
                // UPDATEs are gradients: the initial weights are set, not added.
                Some(_) => init_set(cluster, tables, zeros, self.params.seed)?,
            };
            if let Some(warm) = self.warm {
                report.init_s += timed_run(cluster, &mut states, warm)?.seconds;
            }
        }
        let mut model = snapshot(cluster, tables, zeros)?;
        let mut accuracies = Vec::with_capacity(cfg.iterations.min(1024));
        for iter in start..cfg.iterations {
            // The servers' step decays per epoch as the workers' does (after a resume
            // too: the checkpoint brought back the step of the epoch before it).
            if let Some(rule) = server_rule(self.params, iter as u64) {
                if iter > 0 && self.params.lr_decay != 0.0 {
                    for table in tables {
                        cluster.set_rule(table, rule)?;
                    }
                }
            }
            let cost = timed_run(cluster, &mut states, &iteration)?;
            let mine: Vec<f64> = states
                .iter()
                .flat_map(|s| {
                    let (loss, samples) = s.progress();
                    let cut = s.cut_short();
                    [
                        loss,
                        samples as f64,
                        f64::from(u8::from(cut.is_some())),
                        cut.unwrap_or(0) as f64,
                    ]
                })
                .collect();
            let all = cluster.all_gather(&mine)?;
            let (mut loss, mut samples, mut cut, mut carried) = (0.0, 0.0, 0.0, 0.0);
            for p in all.iter().flat_map(|p| p.chunks_exact(4)) {
                loss += p[0];
                samples += p[1];
                cut += p[2];
                carried += p[3];
            }
            let loss = loss / samples.max(1.0);
            if let Some(q) = &mut report.epoch_quorum {
                q.push_epoch(iter, samples as u64, cut as usize, carried as u64);
            }
            check_finite("dnn", iter, cfg.iterations, "training cross-entropy", loss)?;
            model = snapshot(cluster, tables, zeros)?;
            accuracies.push(model.accuracy(&self.data.test));
            let record = IterRecord {
                iter,
                seconds: cost.seconds,
                bytes_sent: cost.bytes_sent,
                messages_sent: cost.messages_sent,
                objective: loss,
                test_rmse: None,
                test_accuracy: accuracies
                    .last()
                    .copied()
                    .filter(|_| !self.data.test.is_empty()),
                rss_bytes: None,
            };
            report.push_iteration(record, observer);
            let saved = checkpoint::after_iteration(cluster, cfg, &id, iter + 1, || {
                states.iter().map(Saved::save).collect()
            })?;
            report.record_checkpoint(saved);
        }
        if !self.data.test.is_empty() {
            if accuracies.is_empty() {
                // Resumed after the last epoch: the checkpoint's model.
                accuracies.push(model.accuracy(&self.data.test));
            }
            report.set_test_accuracy(accuracies);
        }
        report.record_store(cluster);
        report.update_bytes = cluster_update_bytes(cluster, tables)?;
        Ok(DnnOutcome { report, model })
    }
}

impl<N, S> Training<'_, N, S> {
    /// The clocks before the first epoch: the initialisation run's (none with a server
    /// rule: the initial weights are set, [`init_set`]) and a warm start's.
    fn init_clocks(&self) -> u64 {
        let init = match self.params.server_rule {
            None => checkpoint::INIT_CLOCKS,
            Some(_) => 0,
        };
        let warm = if self.warm.is_some() {
            self.params.warm_start as u64
        } else {
            0
        };
        init + warm
    }
}

/// The run of [`run_in`] and [`run_cnn_in`], for the network of `zeros`' shape: every
/// worker trains the whole network on its share of each mini-batch.
fn run_network_in<N: Network>(
    cluster: &mut Cluster,
    cfg: &AppConfig,
    params: &DnnConfig,
    data: &ImageSet,
    zeros: N,
    dp: DataParallel,
    observer: Observer<'_>,
) -> Result<DnnOutcome<N>, AppError> {
    let mut report = prepare(cluster, cfg, params, data, &zeros)?;
    let n = data.train.len();
    let clocks = clocks(n, params.batch);
    let shards = weight_shards(dp.parameter_servers, cluster, cfg, &mut report)?;
    if dp.replicas != cluster.total_workers() {
        report.param("replicas", dp.replicas);
    }
    let quorum = epoch_quorum(cfg, params, dp.replicas, &mut report)?;
    if params.layer_updates {
        if zeros.factors(&zeros.scratch(1), 0, 0).is_none() {
            return Err(AppError::Invalid(format!(
                "dnn --layer-updates: the {}'s layers are not all fully connected (the MLP's \
                 are)",
                zeros.kind()
            )));
        }
        report.param("layer_updates", true);
    }
    if params.warm_start > 0 {
        report.param("warm_start", params.warm_start);
    }
    if let Some(slow) = params.straggler {
        if slow.worker >= dp.replicas {
            return Err(AppError::Invalid(format!(
                "dnn --straggler {}: the run's replicas are workers 0 to {}",
                slow.worker,
                dp.replicas - 1
            )));
        }
        report.param(
            "straggler",
            format!("{}:{}", slow.worker, slow.delay.as_millis()),
        );
    }
    fingerprint::agree(cluster, cfg, &report)?;
    let (setup, setup_s) = timed(|| -> Result<_, AppError> {
        let tables = create_tables(cluster, &zeros, shards, server_rule(params, 0))?;
        // A replica's share of a mini-batch: at most ceil(ceil(n / N_mr) / clocks) samples.
        let capacity = n.div_ceil(dp.replicas).div_ceil(clocks);
        let states: Vec<State<N>> = (0..cfg.workers)
            .map(|_| State::new(&zeros, capacity))
            .collect();
        Ok((tables, states))
    });
    let (tables, states) = setup?;
    report.setup_s = setup_s;
    let st = Step {
        tables: &tables,
        params,
        data,
        replicas: dp.replicas,
        read_every: dp.read_every,
        write_every: dp.write_every,
        clocks,
        quorum,
    };
    let warm_start = params.warm_start;
    let warm = move |w: &mut Worker<'_>, s: &mut State<N>| warm_up(w, st, s, warm_start);
    let train = Training {
        tables: &tables,
        params,
        data,
        zeros,
        warm: (warm_start > 0).then_some(&warm as WarmUp<'_, State<N>>),
    };
    train.run(
        cluster,
        cfg,
        report,
        states,
        |w, s| iteration(w, st, s),
        observer,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use iterstore_algo::dnn::Activation;

    #[test]
    fn model_file_lists_every_row_of_every_layer() {
        let spec = MlpSpec {
            sizes: vec![2, 1, 2],
            activation: Activation::Relu,
        };
        let model = Mlp {
            spec,
            layers: vec![vec![0.5, -1.0, 0.25], vec![1.0, 0.0, 2.0, 3.0]],
        };
        let outcome = DnnOutcome {
            report: RunReport::new("dnn", "train_cross_entropy", &AppConfig::default()),
            model,
        };
        let mut out = Vec::new();
        outcome.write_model(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "# iterstore dnn model: mlp sizes=2-1-2 activation=relu\n\
             0\t0\t0.5\t-1\t0.25\n1\t0\t1\t0\n1\t1\t2\t3\n"
        );
    }

    #[test]
    fn bad_data_is_refused_before_any_work() {
        let mut data = iterstore_data::ImageSpec::preset("tiny")
            .unwrap()
            .generate();
        data.train.labels[3] = 10;
        let e = run(&AppConfig::default(), &DnnConfig::default(), &data).unwrap_err();
        assert!(
            e.to_string().contains("training label is not below 10"),
            "{e}"
        );
    }
}
