//! L2-regularized multinomial logistic regression on the parameter server: Sandblaster
//! L-BFGS (`lbfgs`: the optimizer's vectors on the shards, combined by server
//! functions; gradients over work units with backup tasks) or, for comparison, Downpour
//! SGD (`sgd`). The objective is scikit-learn's `LogisticRegression` with
//! `C = 1/(λn)` ([`iterstore_algo::logreg`]), so `tools/peer-logreg` minimizes the same
//! function.
//!
//! **Input**: a directory of Fashion-MNIST IDX files (pixels scaled to `[0, 1]`), a
//! LIBSVM/svmlight text file (with [`LogRegParams::test`] a held-out file of the same
//! features and labels), or generated prototype images. **Objective** per iteration: the
//! training objective at the iterate; with test samples, the test accuracy after each
//! iteration. **Output**: the model, one line per class (its label, then its weights and
//! intercept).
//!
//! The result does not depend on how the cluster is split: the gradient is summed in
//! unit order and the vector operations in shard order, so P processes give one process
//! of as many shards bit for bit, whatever the workers and the timing (L-BFGS; SGD under
//! BSP only to rounding, as the other apps).

use std::io::{self, Write};
use std::path::PathBuf;

use iterstore::Cluster;
use iterstore_algo::logreg::{Samples, Shape};
use iterstore_data::{load_fashion_mnist, load_svmlight, ImageSet, ImageSpec, SparseSet};

use super::fingerprint;
use super::{App, AppConfig, AppError, Input, Observer, RunReport};

mod lbfgs;
mod sgd;
mod vectors;

/// How the model is trained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Solver {
    /// Sandblaster L-BFGS (full-batch; the vectors on the shards).
    #[default]
    Lbfgs,
    /// Downpour SGD (mini-batches, asynchronous up to the staleness).
    Sgd,
}

impl Solver {
    /// The solver named `name` (`lbfgs` or `sgd`).
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "lbfgs" => Ok(Solver::Lbfgs),
            "sgd" => Ok(Solver::Sgd),
            other => Err(format!("{other}: logreg trains by `lbfgs` or `sgd`")),
        }
    }

    /// The name the CLI and the report use.
    pub fn name(self) -> &'static str {
        match self {
            Solver::Lbfgs => "lbfgs",
            Solver::Sgd => "sgd",
        }
    }
}

/// Logistic regression's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct LogRegParams {
    /// How the model is trained.
    pub solver: Solver,
    /// The L2 regularization `λ` (scikit-learn's `C = 1/(λn)`).
    pub lambda: f64,
    /// L-BFGS: steps kept in the history (`m`).
    pub history: usize,
    /// L-BFGS: samples per work unit.
    pub unit: usize,
    /// L-BFGS: whether idle workers take backups of units still running elsewhere.
    pub backups: bool,
    /// Values per row of the model's tables.
    pub block: usize,
    /// SGD: the learning rate.
    pub lr: f64,
    /// SGD: samples per mini-batch.
    pub batch: usize,
    /// A held-out svmlight file (svmlight input only; Fashion-MNIST has its test set).
    pub test: Option<PathBuf>,
}

impl Default for LogRegParams {
    /// L-BFGS with a history of 20, λ = 1e-4, units of 500 samples with backups, rows
    /// of 512; SGD at learning rate 0.1 in batches of 100.
    fn default() -> Self {
        Self {
            solver: Solver::Lbfgs,
            lambda: 1e-4,
            history: 20,
            unit: 500,
            backups: true,
            block: 512,
            lr: 0.1,
            batch: 100,
            test: None,
        }
    }
}

impl LogRegParams {
    /// Checks every parameter, naming the first unusable one.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.lambda.is_finite() && self.lambda >= 0.0) {
            return Err(format!(
                "logreg: lambda {} must be finite and >= 0",
                self.lambda
            ));
        }
        if !(1..=100).contains(&self.history) {
            return Err(format!(
                "logreg: history {} must be in 1..=100",
                self.history
            ));
        }
        if self.unit == 0 {
            return Err("logreg: unit must be at least 1 sample".into());
        }
        if !(1..=1 << 20).contains(&self.block) {
            return Err(format!(
                "logreg: block {} must be in 1..=1048576",
                self.block
            ));
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(format!("logreg: lr {} must be finite and > 0", self.lr));
        }
        if self.batch == 0 {
            return Err("logreg: batch must be at least 1 sample".into());
        }
        Ok(())
    }
}

/// Logistic regression's input, loaded.
#[derive(Debug, Clone, PartialEq)]
pub enum LogRegData {
    /// Images (Fashion-MNIST or generated): training and test.
    Images(ImageSet),
    /// An svmlight training file and, maybe, its test file (labels mapped to the
    /// training file's classes).
    Sparse {
        /// The training samples.
        train: SparseSet,
        /// The held-out samples.
        test: Option<SparseSet>,
    },
}

impl LogRegData {
    /// The training samples.
    pub fn train(&self) -> &dyn Samples {
        match self {
            LogRegData::Images(set) => &set.train,
            LogRegData::Sparse { train, .. } => train,
        }
    }

    /// The held-out samples, if any.
    pub fn test(&self) -> Option<&dyn Samples> {
        match self {
            LogRegData::Images(set) => (!set.test.is_empty()).then_some(&set.test as _),
            LogRegData::Sparse { test, .. } => test.as_ref().map(|t| t as _),
        }
    }

    /// The model's shape.
    pub fn shape(&self) -> Shape {
        let classes = match self {
            LogRegData::Images(set) => set.classes,
            LogRegData::Sparse { train, .. } => train.classes as usize,
        };
        Shape {
            classes,
            features: self.train().features(),
        }
    }

    /// Each class's label as the output names it.
    fn class_label(&self, c: usize) -> String {
        match self {
            LogRegData::Images(_) => c.to_string(),
            LogRegData::Sparse { train, .. } => train.class_labels[c].to_string(),
        }
    }

    /// The digest the processes compare.
    fn digest(&self) -> u64 {
        match self {
            LogRegData::Images(set) => fingerprint::images(set),
            LogRegData::Sparse { train, test } => {
                let mut d = fingerprint::Digest::new();
                for set in std::iter::once(train).chain(test) {
                    d.u32(set.features).u32(set.classes);
                    d.u64(set.len() as u64);
                    for i in 0..set.len() {
                        let (idx, val) = set.row(i);
                        d.u32(set.labels[i]).u64(idx.len() as u64);
                        for (&j, &v) in idx.iter().zip(val) {
                            d.u32(j).u32(v.to_bits());
                        }
                    }
                }
                d.finish()
            }
        }
    }
}

/// The labels of `test` (an svmlight file loaded on its own) as `train`'s classes; a
/// label `train` never has is an error naming the file.
fn align_labels(
    train: &SparseSet,
    test: &mut SparseSet,
    path: &std::path::Path,
) -> Result<(), AppError> {
    let mut map = Vec::with_capacity(test.class_labels.len());
    for label in &test.class_labels {
        let c = train.class_labels.binary_search(label).map_err(|_| {
            AppError::Invalid(format!(
                "{}: label {label} is not a class of the training file (its labels are {:?})",
                path.display(),
                train.class_labels
            ))
        })?;
        map.push(c as u32);
    }
    for l in &mut test.labels {
        *l = map[*l as usize];
    }
    test.classes = train.classes;
    test.class_labels = train.class_labels.clone();
    Ok(())
}

/// The outcome of a run.
#[derive(Debug, Clone)]
pub struct LogRegOutcome {
    /// Timings and objectives.
    pub report: RunReport,
    /// The model: per class, its weights then its intercept.
    pub model: Vec<f64>,
}

/// Trains on `data` with `cfg`, calling `observer` after each iteration.
pub fn run_observed(
    cfg: &AppConfig,
    params: &LogRegParams,
    data: &LogRegData,
    observer: Observer<'_>,
) -> Result<LogRegOutcome, AppError> {
    let (mut outcome, start_s) =
        super::with_cluster(cfg, |c| run_in(c, cfg, params, data, observer))?;
    outcome.report.setup_s += start_s;
    Ok(outcome)
}

/// [`run_observed`] on a cluster already started: every process of the cluster must call
/// it alike. The cluster stays up.
pub fn run_in(
    cluster: &mut Cluster,
    cfg: &AppConfig,
    params: &LogRegParams,
    data: &LogRegData,
    observer: Observer<'_>,
) -> Result<LogRegOutcome, AppError> {
    cfg.validate()?;
    super::check_cluster(cfg, cluster)?;
    params.validate()?;
    let shape = data.shape();
    if data.train().is_empty() || shape.classes < 2 {
        return Err(AppError::Invalid(format!(
            "logreg needs samples of at least 2 classes (the input has {} samples of {})",
            data.train().len(),
            shape.classes
        )));
    }
    let mut report = RunReport::new("logreg", "objective", cfg);
    report.processes = cluster.processes();
    report
        .dataset
        .insert("train_samples", data.train().len() as u64);
    report
        .dataset
        .insert("test_samples", data.test().map_or(0, |t| t.len()) as u64);
    report.dataset.insert("features", shape.features as u64);
    report.dataset.insert("classes", shape.classes as u64);
    report.param("solver", params.solver.name());
    report.param("lambda", params.lambda);
    report.param("block", params.block);
    match params.solver {
        Solver::Lbfgs => {
            report.param("history", params.history);
            report.param("unit", params.unit);
            report.param("backups", params.backups);
        }
        Solver::Sgd => {
            report.param("lr", params.lr);
            report.param("batch", params.batch);
        }
    }
    fingerprint::input_digest(&mut report, data.digest());
    fingerprint::agree(cluster, cfg, &report)?;
    let model = match params.solver {
        Solver::Lbfgs => lbfgs::train(cluster, cfg, params, data, &mut report, observer)?,
        Solver::Sgd => sgd::train(cluster, cfg, params, data, &mut report, observer)?,
    };
    Ok(LogRegOutcome { report, model })
}

/// `measure()` on rank 0 only, its values handed to every process (an all-gather): an
/// evaluation every process reports alike, computed once, with the other processes
/// waiting outside the timed iterations rather than evaluating beside them.
fn on_rank_0(
    cluster: &mut Cluster,
    measure: impl FnOnce(&Cluster) -> Result<Vec<f64>, AppError>,
) -> Result<Vec<f64>, AppError> {
    let mine = if cluster.rank() == 0 {
        measure(cluster)?
    } else {
        Vec::new()
    };
    Ok(cluster.all_gather(&mine)?.swap_remove(0))
}

/// Logistic regression as [`App`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogReg;

impl App for LogReg {
    const NAME: &'static str = "logreg";
    const ABOUT: &'static str = "Multinomial logistic regression by Sandblaster L-BFGS or \
                                 Downpour SGD (input: Fashion-MNIST IDX directory or an \
                                 svmlight file)";
    const INPUT: &'static str = "samples";
    type Params = LogRegParams;
    type Data = LogRegData;
    type Outcome = LogRegOutcome;

    fn validate(params: &LogRegParams) -> Result<(), AppError> {
        Ok(params.validate()?)
    }

    fn load(input: &Input, params: &LogRegParams) -> Result<LogRegData, AppError> {
        match input {
            Input::File(path) if path.is_dir() => {
                if params.test.is_some() {
                    return Err(AppError::Invalid(format!(
                        "--test is for svmlight input; {} is a Fashion-MNIST directory \
                         with its own test images",
                        path.display()
                    )));
                }
                Ok(LogRegData::Images(load_fashion_mnist(path)?))
            }
            Input::File(path) => {
                let train = load_svmlight(path, None)?;
                let test = match &params.test {
                    Some(t) => {
                        let mut test = load_svmlight(t, Some(train.features))?;
                        align_labels(&train, &mut test, t)?;
                        Some(test)
                    }
                    None => None,
                };
                Ok(LogRegData::Sparse { train, test })
            }
            Input::Synthetic(size) => {
                if params.test.is_some() {
                    return Err(AppError::Invalid(
                        "--test is for svmlight input; generated images have their own \
                         test set"
                            .into(),
                    ));
                }
                Ok(LogRegData::Images(ImageSpec::preset(size)?.generate()))
            }
        }
    }

    fn counts(data: &LogRegData) -> String {
        let shape = data.shape();
        format!(
            "{} training samples, {} test samples, {} features, {} classes",
            data.train().len(),
            data.test().map_or(0, |t| t.len()),
            shape.features,
            shape.classes
        )
    }

    fn run(
        cfg: &AppConfig,
        params: &LogRegParams,
        data: &LogRegData,
        observer: Observer<'_>,
    ) -> Result<LogRegOutcome, AppError> {
        run_observed(cfg, params, data, observer)
    }

    fn write_output(
        outcome: &LogRegOutcome,
        data: &LogRegData,
        out: &mut dyn Write,
    ) -> io::Result<()> {
        let width = data.shape().width();
        for (c, row) in outcome.model.chunks(width).enumerate() {
            write!(out, "{}", data.class_label(c))?;
            for v in row {
                write!(out, " {v}")?;
            }
            writeln!(out)?;
        }
        Ok(())
    }

    fn into_report(outcome: LogRegOutcome) -> RunReport {
        outcome.report
    }
}
