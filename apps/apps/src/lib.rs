//! The bundled applications run on the iterstore parameter server: matrix factorization
//! ([`mf`]), LDA ([`lda`]), PageRank ([`pagerank`]), a DNN ([`dnn`]: an MLP or a CNN
//! trained by mini-batch SGD) and logistic regression ([`logreg`]: Sandblaster L-BFGS on
//! server functions and work units, or Downpour SGD), data-parallel over a cluster's workers through the public
//! `iterstore` API only. Each runs under an [`AppConfig`] (cluster shape, consistency,
//! store mode, iterations) and returns a [`RunReport`] or an [`AppError`]; [`checkpoint`]
//! saves and restores a run. Programs drive every app through one trait, [`App`]
//! (implemented by [`Mf`], [`Lda`], [`PageRank`], [`Dnn`] and [`LogReg`]). Beside the apps: [`calibrate`] measures this machine's
//! hardware profile for the DNN performance model and [`validate`] checks that model
//! against measured runs.
//!
//! The apps' inputs come from `iterstore-data`, their kernels (and the in-memory "limit"
//! implementations they are compared to) from `iterstore-algo`.
//!
//! Every app runs the same phases, each one [`Cluster::run`] (or virtual iteration) that the
//! main thread times:
//!
//! 1. **setup** — partition the data with [`iterstore_algo::partition`] exactly as the
//!    [`iterstore_algo::limit`] implementations do, build each worker's plan (its slice of the data
//!    with ids mapped to table rows), start the cluster, create the tables;
//! 2. **preprocess** — in [`Mode::Virtual`] only, one [`Cluster::virtual_iteration`] of the
//!    app's *own* iteration function (the same function the real iterations call), so the
//!    store sees exactly the rows a real iteration touches;
//! 3. **init** — one run in which workers write the initial parameters as UPDATEs, then
//!    CLOCK;
//! 4. **iterations** — one run per iteration, each ending in a CLOCK (LDA and PageRank
//!    clock once per iteration, MF and the DNN once per mini-batch). Between runs the main thread
//!    evaluates the objective from [`Cluster::snapshot`]s; that evaluation is not part of
//!    the iteration time. An objective that is NaN or infinite stops the run with
//!    [`AppError::Diverged`] (naming the app, the iteration and the objective) rather than
//!    reporting a diverged model as a result.
//!
//! Worker-local state that lives across runs (LDA's topic assignments, PageRank's last
//! propagated ranks, the DNN's epoch count and momentum velocity) is one value per worker
//! handed to [`Cluster::run_with`], so it needs no lock; the virtual iteration gets
//! throw-away copies of it
//! ([`Cluster::virtual_iteration_with`]), so nothing computed from its zero reads leaks
//! into the real runs. Iteration functions never decide *which* rows to touch from values
//! they read, so a virtual iteration touches the same rows as a real one.
//!
//! With [`AppConfig::checkpoint`] an app writes a [`checkpoint`] after every N-th
//! iteration (the tables and its workers' states); with [`AppConfig::resume`] it restores
//! one after creating its tables, skips the initialisation run and continues with the
//! iteration after the checkpoint's, so that it ends as an uninterrupted run does.
//!
//! Under BSP (staleness 0) a store-backed app computes the same model as its limit
//! implementation: LDA exactly, PageRank to rounding, MF to rounding (the store sums a
//! worker's deltas of a row before adding them). Each app returns a [`RunReport`].
//!
//! The apps know nothing of files or the command line.

#![warn(missing_docs)]

pub mod app;
pub mod budget;
pub mod calibrate;
pub mod checkpoint;
pub mod dnn;
mod fingerprint;
pub mod lda;
pub mod logreg;
pub mod mf;
pub mod pagerank;
mod report;
pub mod rss;
mod tuning;
pub mod validate;

pub use app::{App, Input};
pub use checkpoint::CheckpointConfig;
pub use dnn::Dnn;
pub use lda::Lda;
pub use logreg::LogReg;
pub use mf::Mf;
pub use pagerank::PageRank;
pub use report::{
    CheckpointReport, IterRecord, MemoryReport, PatternSummary, Provenance, QuorumReport,
    RestartReport, ResumeReport, RunReport, StoreReport,
};

use iterstore::deploy::Membership;
use iterstore::machine::{Pinning, Topology, WorkerPlacement};
use iterstore::{Cluster, Config, Element, Mode, Specializations, Staleness, Worker};
use std::path::PathBuf;
use std::time::Instant;

/// How an app runs on the store: cluster shape, consistency, store mode and iteration count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppConfig {
    /// Worker threads `W` (also the number of data partitions).
    pub workers: usize,
    /// Server shards.
    pub shards: usize,
    /// The consistency model (`Staleness::BSP` makes runs deterministic).
    pub staleness: Staleness,
    /// How the store obtains the access pattern; [`Mode::Virtual`] runs a virtual
    /// iteration before initialisation.
    pub mode: Mode,
    /// Iterations (passes over the data) after initialisation; at least 1.
    pub iterations: usize,
    /// Which specializations a specialized mode applies (all by default; the benchmark's
    /// ablations switch them off one at a time).
    pub specializations: Specializations,
    /// The machine the NUMA placement plans for (`None`: this one). A synthetic topology
    /// is planned for and reported, never bound to.
    pub topology: Option<Topology>,
    /// How worker threads are spread over the topology's zones.
    pub worker_placement: WorkerPlacement,
    /// How worker threads are bound to CPUs ([`iterstore::Config::pinning`]).
    pub pinning: Pinning,
    /// The cluster of processes this one joins (`None`: one process). Every process loads
    /// the whole input and works on its workers' partitions, so P processes of `workers`
    /// workers compute what one process of `P * workers` computes.
    pub membership: Option<Membership>,
    /// Write checkpoints ([`checkpoint`]) while running (`None`: none).
    pub checkpoint: Option<CheckpointConfig>,
    /// Resume from the newest complete checkpoint in this directory instead of
    /// initialising: the run continues with the iteration after the checkpoint's and
    /// ends where an uninterrupted run of `iterations` ends.
    pub resume: Option<PathBuf>,
    /// With [`resume`](Self::resume): whether a directory that holds no complete
    /// checkpoint (or does not exist yet) starts the run from the beginning instead of
    /// failing. What the CLI's `--restarts` uses on its checkpoint directory. Every process
    /// looks once the cluster has formed, when no process of an earlier attempt can still
    /// be completing a checkpoint, and the processes check that they found the same one.
    pub resume_optional: bool,
    /// How long a worker waits for another worker's message (the partitioned DNN's
    /// activations and error terms) before it fails naming the sender
    /// ([`iterstore::Config::message_timeout`]).
    pub message_timeout: std::time::Duration,
    /// Whether waiting threads yield before they sleep
    /// ([`iterstore::Config::yield_waits`]).
    pub yield_waits: bool,
    /// How specialized workers write their update slabs
    /// ([`iterstore::Config::slab_stores`]).
    pub slab_stores: iterstore::SlabStores,
    /// Where this process serves its metrics for Prometheus
    /// ([`iterstore::Config::metrics_addr`]; `None`: nowhere).
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Copies of every server shard ([`iterstore::Config::shard_replicas`]; 1: the shard
    /// alone). More than one cannot [`resume`](Self::resume) yet: refused by
    /// [`validate`](Self::validate).
    pub shard_replicas: usize,
    /// What this process keeps across the clusters it starts, to go on without a
    /// checkpoint after another process is lost ([`iterstore::Recovery`]; with
    /// `shard_replicas` above 1). Clones share it: one per process.
    pub recovery: iterstore::Recovery,
}

impl Default for AppConfig {
    /// Two workers, one shard, BSP, virtual-iteration mode, ten iterations.
    fn default() -> Self {
        Self {
            workers: 2,
            shards: 1,
            staleness: Staleness::BSP,
            mode: Mode::Virtual,
            iterations: 10,
            specializations: Specializations::ALL,
            topology: None,
            worker_placement: WorkerPlacement::Packed,
            pinning: Pinning::Zones,
            membership: None,
            checkpoint: None,
            resume: None,
            resume_optional: false,
            message_timeout: iterstore::MESSAGE_TIMEOUT,
            yield_waits: true,
            slab_stores: iterstore::SlabStores::Auto,
            metrics_addr: None,
            shard_replicas: 1,
            recovery: iterstore::Recovery::new(),
        }
    }
}

impl AppConfig {
    /// Checks every setting, naming the first offending one.
    pub fn validate(&self) -> Result<(), AppError> {
        if self.iterations == 0 {
            return Err(AppError::Invalid("iterations must be at least 1".into()));
        }
        if self.checkpoint.as_ref().is_some_and(|c| c.every == 0) {
            return Err(AppError::Invalid(
                "checkpoint every must be at least 1 iteration".into(),
            ));
        }
        self.store_config()
            .validate()
            .map_err(|e| AppError::Invalid(e.to_string()))?;
        if let (r @ 2.., Some(dir)) = (self.shard_replicas, &self.resume) {
            let how = match self.resume_optional {
                true => "continue after a restart from the checkpoints in",
                false => "resume from",
            };
            let reason = format!(
                "{r} copies of each shard cannot {how} {} yet: the backups would start \
                 empty (docs/replication.md)",
                dir.display()
            );
            let e = iterstore::Error::InvalidConfig {
                field: "shard_replicas",
                reason,
            };
            return Err(AppError::Invalid(e.to_string()));
        }
        Ok(())
    }

    /// The store configuration this app configuration starts a cluster with.
    pub fn store_config(&self) -> Config {
        let mut config = Config::new(self.workers)
            .with_shards(self.shards)
            .with_staleness(self.staleness)
            .with_mode(self.mode)
            .with_specializations(self.specializations);
        config.topology = self.topology.clone();
        config.worker_placement = self.worker_placement;
        config.pinning = self.pinning;
        config.membership = self.membership.clone();
        config.message_timeout = self.message_timeout;
        config.yield_waits = self.yield_waits;
        config.slab_stores = self.slab_stores;
        config.metrics_addr = self.metrics_addr;
        config.shard_replicas = self.shard_replicas;
        config
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.membership.as_ref().map_or(0, |m| m.rank)
    }
}

/// Why an app run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppError {
    /// A parameter or the input data was rejected before any work started.
    #[error("{0}")]
    Invalid(String),
    /// The input file could not be read, or is malformed (the error names the file).
    #[error(transparent)]
    Data(#[from] iterstore_data::DataError),
    /// The parameter server failed.
    #[error("parameter server: {0}")]
    Store(#[from] iterstore::Error),
    /// The objective became NaN or infinite: the model diverged, and the run stopped
    /// instead of reporting it as a result.
    #[error(
        "{app} diverged in iteration {iteration} of {iterations}: {objective} is {value}{hint}"
    )]
    Diverged {
        /// `mf`, `lda`, `pagerank` or `dnn`.
        app: &'static str,
        /// 1-based iteration.
        iteration: usize,
        /// Iterations the run was asked for.
        iterations: usize,
        /// What was measured, e.g. `training RMSE`.
        objective: &'static str,
        /// The non-finite value.
        value: f64,
        /// What to try, with a leading separator (empty when there is no advice).
        hint: &'static str,
    },
    /// A checkpoint could not be written (a full disk, say); the run stopped. `kept`
    /// says which earlier checkpoint is still there to resume from.
    #[error("checkpoint after iteration {iteration} failed: {source}; {kept}")]
    Checkpoint {
        /// 1-based iteration after which the checkpoint was due.
        iteration: usize,
        /// Why it failed (names the file).
        #[source]
        source: iterstore::Error,
        /// The checkpoint still there, and how to resume from it.
        kept: String,
    },
    /// An error of one run among several (a benchmark variant, the limit), with which.
    #[error("{context}: {source}")]
    In {
        /// Which run, e.g. `mf on ml-100k.inter, variant generic`.
        context: String,
        /// What went wrong.
        #[source]
        source: Box<AppError>,
    },
}

impl AppError {
    /// This error with `context` saying which run it belongs to.
    pub fn context(self, context: impl Into<String>) -> AppError {
        AppError::In {
            context: context.into(),
            source: Box::new(self),
        }
    }
}

/// What [`check_finite`] suggests per app.
fn divergence_hint(app: &str) -> &'static str {
    match app {
        "mf" | "dnn" => " (try a smaller learning rate, --lr)",
        _ => "",
    }
}

/// Fails with [`AppError::Diverged`] when `value`, the `objective` of `app` after 0-based
/// iteration `iter` of `iterations`, is NaN or infinite.
pub fn check_finite(
    app: &'static str,
    iter: usize,
    iterations: usize,
    objective: &'static str,
    value: f64,
) -> Result<(), AppError> {
    if value.is_finite() {
        return Ok(());
    }
    Err(AppError::Diverged {
        app,
        iteration: iter + 1,
        iterations,
        objective,
        value,
        hint: divergence_hint(app),
    })
}

impl From<String> for AppError {
    fn from(message: String) -> Self {
        AppError::Invalid(message)
    }
}

/// Per-iteration callback: receives each iteration's record as soon as it is evaluated.
pub type Observer<'a> = &'a mut dyn FnMut(&IterRecord);

/// Runs `f` and returns its result with the seconds it took.
pub(crate) fn timed<R>(f: impl FnOnce() -> R) -> (R, f64) {
    let start = Instant::now();
    let result = f();
    (result, start.elapsed().as_secs_f64())
}

/// Starts a cluster for `cfg` (already validated).
pub(crate) fn start(cfg: &AppConfig) -> Result<Cluster, AppError> {
    Ok(Cluster::start_with(cfg.store_config(), &cfg.recovery)?)
}

/// In [`Mode::Virtual`], runs `iteration` once as the virtual iteration, each worker on a
/// throw-away copy of its state in `states`, and returns its time and a summary of the
/// gathered pattern; in other modes does nothing.
pub(crate) fn preprocess<S, F>(
    cluster: &mut Cluster,
    cfg: &AppConfig,
    states: &[S],
    iteration: F,
) -> Result<(f64, Option<PatternSummary>), AppError>
where
    S: Clone + Send,
    F: Fn(&mut Worker<'_>, &mut S) -> iterstore::Result<()> + Sync,
{
    if cfg.mode != Mode::Virtual {
        return Ok((0.0, None));
    }
    let (pattern, seconds) = timed(|| {
        cluster
            .virtual_iteration_with(states, iteration)
            .map(PatternSummary::from)
    });
    Ok((seconds, Some(pattern?)))
}

/// What one run cost: its time, and the network traffic it caused, summed over every
/// process of the cluster (zero in one process).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RunCost {
    /// Wall-clock seconds of the run.
    pub(crate) seconds: f64,
    /// Bytes every process sent to the others during the run.
    pub(crate) bytes_sent: u64,
    /// Messages (frames) every process sent to the others during the run.
    pub(crate) messages_sent: u64,
}

/// Runs one real run of `f` on every worker, worker `w` with `&mut states[w]`, and returns
/// its time and traffic (an all-gather: every process calls this as often).
pub(crate) fn timed_run<S, F>(
    cluster: &mut Cluster,
    states: &mut [S],
    f: F,
) -> Result<RunCost, AppError>
where
    S: Send,
    F: Fn(&mut Worker<'_>, &mut S) -> iterstore::Result<()> + Sync,
{
    let before = cluster.stats();
    let (result, seconds) = timed(|| cluster.run_with(states, f));
    result?;
    let after = cluster.stats();
    let mine = [
        (after.bytes_sent - before.bytes_sent) as i64,
        (after.frames_sent - before.frames_sent) as i64,
    ];
    let all = cluster.all_gather(&mine)?;
    Ok(RunCost {
        seconds,
        bytes_sent: all.iter().map(|p| p[0] as u64).sum(),
        messages_sent: all.iter().map(|p| p[1] as u64).sum(),
    })
}

/// Runs the initialisation run of `f` on every worker ([`Cluster::init_run_with`]) and
/// returns its time.
pub(crate) fn timed_init_run<S, F>(
    cluster: &mut Cluster,
    states: &mut [S],
    f: F,
) -> Result<f64, AppError>
where
    S: Send,
    F: Fn(&mut Worker<'_>, &mut S) -> iterstore::Result<()> + Sync,
{
    let (result, seconds) = timed(|| cluster.init_run_with(states, f));
    result?;
    Ok(seconds)
}

/// Starts a cluster for `cfg`, runs `f` on it and shuts it down; returns `f`'s result and
/// the seconds the start took.
pub(crate) fn with_cluster<R>(
    cfg: &AppConfig,
    f: impl FnOnce(&mut Cluster) -> Result<R, AppError>,
) -> Result<(R, f64), AppError> {
    cfg.validate()?;
    checkpoint::check_dirs(cfg)?;
    let (cluster, start_s) = timed(|| start(cfg));
    let mut cluster = cluster?;
    let out = f(&mut cluster)?;
    cluster.shutdown()?;
    Ok((out, start_s))
}

/// Checks that `cluster` runs the workers `cfg` describes (an app given a cluster started
/// elsewhere).
pub(crate) fn check_cluster(cfg: &AppConfig, cluster: &Cluster) -> Result<(), AppError> {
    let workers = cluster.config().workers;
    if cfg.workers != workers {
        return Err(AppError::Invalid(format!(
            "the app is configured for {} workers per process, the cluster runs {workers}",
            cfg.workers
        )));
    }
    Ok(())
}

/// Builds one value per worker `0..workers` in parallel (inline for one worker).
pub(crate) fn par_build<T: Send>(workers: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    if workers == 1 {
        return vec![f(0)];
    }
    std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = (0..workers).map(|w| s.spawn(move || f(w))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// A row-major `rows × width` table from a [`Cluster::snapshot`]; absent rows are zeros and
/// rows outside `0..rows` are ignored.
pub(crate) fn dense<T: Element>(snapshot: Vec<(u64, Vec<T>)>, rows: usize, width: usize) -> Vec<T> {
    let mut out = vec![T::default(); rows * width];
    for (row, values) in snapshot {
        if let Ok(row) = usize::try_from(row) {
            if row < rows && values.len() == width {
                out[row * width..][..width].copy_from_slice(&values);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_finite_objective_is_an_error_naming_app_iteration_and_objective() {
        assert!(check_finite("pagerank", 0, 5, "L1 change", 0.5).is_ok());
        let e = check_finite("pagerank", 2, 5, "L1 change", f64::INFINITY).unwrap_err();
        assert_eq!(
            e.to_string(),
            "pagerank diverged in iteration 3 of 5: L1 change is inf"
        );
        let e = check_finite("mf", 6, 20, "training RMSE", f64::NAN).unwrap_err();
        assert_eq!(
            e.to_string(),
            "mf diverged in iteration 7 of 20: training RMSE is NaN \
             (try a smaller learning rate, --lr)"
        );
        let e = e.context("mf on ml-100k.inter, limit");
        assert!(e
            .to_string()
            .starts_with("mf on ml-100k.inter, limit: mf diverged"));
    }
}
