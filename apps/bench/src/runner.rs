//! Running one app in every [`Variant`], as its limit implementation, and as its peer, on
//! the same loaded input: [`Workload`] and [`bench_app`].

use std::path::{Path, PathBuf};

use iterstore::Staleness;
use serde::Serialize;

use super::peers::{
    self, DnnPeerParams, LdaPeerParams, LibmfParams, LogRegPeerParams, PeerOutcome,
};
use super::{logreg_limit, Breakdown, Variant};
use iterstore_algo::dnn::DnnConfig;
use iterstore_algo::lda::{LdaConfig, SamplerKind};
use iterstore_algo::limit::{self, IterStats, LimitConfig};
use iterstore_algo::mf::MfConfig;
use iterstore_apps::logreg::{self, LogRegData, LogRegParams, Solver};
use iterstore_apps::pagerank::PageRankParams;
use iterstore_apps::{check_finite, dnn, lda, mf, pagerank, AppConfig, AppError, RunReport};
use iterstore_data::{Corpus, Graph, ImageSet, Ratings};

/// An app with its input loaded and its hyper-parameters chosen.
#[derive(Debug, Clone)]
pub enum Workload {
    /// Matrix factorization: training and held-out ratings.
    Mf {
        /// Training ratings.
        train: Ratings,
        /// Held-out ratings (may be empty).
        test: Ratings,
        /// Hyper-parameters.
        params: MfConfig,
    },
    /// LDA on a corpus.
    Lda {
        /// The corpus.
        corpus: Corpus,
        /// Hyper-parameters.
        params: LdaConfig,
    },
    /// PageRank on a graph.
    PageRank {
        /// The graph.
        graph: Graph,
        /// Hyper-parameters.
        params: PageRankParams,
    },
    /// The DNN (the MLP, or the CNN) on labeled images.
    Dnn {
        /// Training and test images.
        data: ImageSet,
        /// Hyper-parameters.
        params: DnnConfig,
        /// Train the CNN (which has no limit implementation) instead of the MLP.
        cnn: bool,
        /// The directory of IDX files `data` was read from, which the peer reads too;
        /// `None` for generated images, which the peer gets written into the work
        /// directory.
        idx_dir: Option<PathBuf>,
    },
    /// Multinomial logistic regression on labeled samples.
    LogReg {
        /// Training and (maybe) test samples.
        data: LogRegData,
        /// Hyper-parameters (`params.test` names an svmlight input's held-out file).
        params: LogRegParams,
        /// The Fashion-MNIST directory or svmlight file `data` was read from, which the
        /// peer reads too; `None` for generated images, which the peer gets written into
        /// the work directory.
        source: Option<PathBuf>,
    },
}

impl Workload {
    /// `mf`, `lda`, `pagerank`, `dnn` or `logreg`.
    pub fn app(&self) -> &'static str {
        match self {
            Workload::Mf { .. } => "mf",
            Workload::Lda { .. } => "lda",
            Workload::PageRank { .. } => "pagerank",
            Workload::Dnn { .. } => "dnn",
            Workload::LogReg { .. } => "logreg",
        }
    }

    /// The work of one iteration in the app's natural unit (see [`work_unit`](Self::work_unit)).
    pub fn work(&self) -> u64 {
        match self {
            Workload::Mf { train, .. } => train.ratings.len() as u64,
            Workload::Lda { corpus, .. } => corpus.docs.iter().map(|d| d.len() as u64).sum(),
            Workload::PageRank { graph, .. } => graph.edges.len() as u64,
            Workload::Dnn { data, .. } => data.train.len() as u64,
            Workload::LogReg { data, .. } => data.train().len() as u64,
        }
    }

    /// PageRank's rank-table block size (vertices per row); `None` for the other apps.
    pub fn block(&self) -> Option<usize> {
        match self {
            Workload::PageRank { params, .. } => Some(params.block),
            _ => None,
        }
    }

    /// The name of the objective each iteration reports.
    pub fn objective(&self) -> &'static str {
        match self {
            Workload::Mf { .. } => "training RMSE",
            Workload::Lda { .. } => "log-likelihood",
            Workload::PageRank { .. } => "L1 change",
            Workload::Dnn { .. } => "training cross-entropy",
            Workload::LogReg { .. } => "objective",
        }
    }

    /// What [`work`](Self::work) counts.
    pub fn work_unit(&self) -> &'static str {
        match self {
            Workload::Mf { .. } => "ratings",
            Workload::Lda { .. } => "tokens",
            Workload::PageRank { .. } => "edges",
            Workload::Dnn { .. } | Workload::LogReg { .. } => "samples",
        }
    }

    /// What sets the workload apart from its app's default, for its name: LDA's sampler
    /// (`sparse sampler`) unless the default, the DNN's network if it is the CNN (`cnn`),
    /// logistic regression's solver if it is SGD (`sgd`).
    pub fn name_note(&self) -> Option<String> {
        match self {
            Workload::Lda { params, .. } if params.sampler != SamplerKind::default() => {
                Some(format!("{} sampler", params.sampler.name()))
            }
            Workload::Dnn { cnn: true, .. } => Some("cnn".into()),
            Workload::LogReg { params, .. } if params.solver != Solver::default() => {
                Some(params.solver.name().into())
            }
            _ => None,
        }
    }

    /// Runs the store-backed app.
    pub fn run(&self, cfg: &AppConfig) -> Result<RunReport, AppError> {
        Ok(match self {
            Workload::Mf {
                train,
                test,
                params,
            } => mf::run(cfg, params, train, &test.ratings)?.report,
            Workload::Lda { corpus, params } => lda::run(cfg, params, corpus)?.report,
            Workload::PageRank { graph, params } => pagerank::run(cfg, params, graph)?.report,
            Workload::Dnn {
                data,
                params,
                cnn: true,
                ..
            } => dnn::run_cnn(cfg, params, data)?.report,
            Workload::Dnn { data, params, .. } => dnn::run(cfg, params, data)?.report,
            Workload::LogReg { data, params, .. } => {
                logreg::run_observed(cfg, params, data, &mut |_| {})?.report
            }
        })
    }

    /// Runs the limit implementation with `threads` threads; a non-finite objective (or MF
    /// test RMSE) is [`AppError::Diverged`], as in the store-backed apps. The DNN's and
    /// logistic regression's results carry their test accuracy. `None` for the CNN and
    /// logistic regression by SGD, which have no limit; logistic regression's L-BFGS
    /// limit is [`iterstore_algo::logreg::minimize`] with the same history.
    pub fn run_limit(
        &self,
        threads: usize,
        iterations: usize,
    ) -> Result<Option<LimitResult>, AppError> {
        let cfg = LimitConfig {
            threads,
            iterations,
        };
        let mut test_accuracy = None;
        let stats = match self {
            Workload::Mf {
                train,
                test,
                params,
            } => limit::mf::run(params, &cfg, train, Some(&test.ratings))?.stats,
            Workload::Lda { corpus, params } => limit::lda::run(params, &cfg, corpus)?.stats,
            Workload::PageRank { graph, params } => {
                limit::pagerank::run(&params.config, &cfg, graph)?.stats
            }
            Workload::Dnn { cnn: true, .. } => return Ok(None),
            Workload::Dnn { data, params, .. } => {
                let run = limit::dnn::run(params, &cfg, data)?;
                test_accuracy = run.test_accuracy.last().copied();
                run.stats
            }
            Workload::LogReg { params, .. } if params.solver != Solver::Lbfgs => return Ok(None),
            Workload::LogReg { data, params, .. } => {
                let run = logreg_limit::run(data, params, threads, iterations)?;
                test_accuracy = run.test_accuracy;
                run.stats
            }
        };
        for s in &stats {
            check_finite(
                self.app(),
                s.iter,
                iterations,
                self.objective(),
                s.objective,
            )?;
            if let Some(held_out) = s.held_out {
                check_finite(self.app(), s.iter, iterations, "test RMSE", held_out)?;
            }
        }
        Ok(Some(
            LimitResult {
                test_accuracy,
                samples_per_s: None,
                ..LimitResult::new(&stats)
            }
            .with_rate(self),
        ))
    }

    /// Runs this app's peers (LIBMF for MF; the Python `lda` package and tomotopy for
    /// LDA; scipy for PageRank; PyTorch for the DNN; scikit-learn for logistic regression,
    /// at most `iterations` L-BFGS iterations), each with `threads` threads where it can
    /// use them.
    pub fn run_peers(&self, threads: usize, iterations: usize, workdir: &Path) -> Vec<PeerOutcome> {
        match self {
            Workload::Mf {
                train,
                test,
                params,
            } => {
                let p = LibmfParams {
                    rank: params.rank,
                    iterations,
                    // The same settings mean the same thing: our MF is LIBMF's per-row
                    // AdaGrad (`eta` = our learning rate, λ per rating on both tables), plus
                    // bias terms and a global mean LIBMF does not have. See `peers::libmf`.
                    learning_rate: params.learning_rate,
                    lambda: params.regularization,
                    threads,
                };
                let test = (!test.ratings.is_empty()).then_some(test);
                vec![peers::libmf(train, test, &p)]
            }
            Workload::Lda { corpus, params } => {
                let p = LdaPeerParams {
                    topics: params.topics,
                    iterations,
                    alpha: params.alpha,
                    beta: params.beta,
                    seed: params.seed,
                };
                let python = peers::PythonPeer::from_env();
                vec![
                    python.lda(corpus, &p, workdir),
                    python.tomotopy(corpus, &p, threads, workdir),
                ]
            }
            Workload::PageRank { graph, params } => vec![peers::python_pagerank(
                graph,
                iterations,
                params.config.damping,
                workdir,
            )],
            Workload::Dnn {
                data,
                params,
                idx_dir,
                cnn,
            } => {
                let p = DnnPeerParams {
                    config: params.clone(),
                    cnn: *cnn,
                    epochs: iterations,
                    threads,
                };
                let python = peers::PythonPeer::from_env();
                vec![python.dnn(data, idx_dir.as_deref(), &p, workdir)]
            }
            Workload::LogReg {
                data,
                params,
                source,
            } => {
                let p = LogRegPeerParams {
                    lambda: params.lambda,
                    max_iter: iterations,
                    threads,
                };
                let python = peers::PythonPeer::from_env();
                let test = params.test.as_deref();
                vec![python.logreg(data, source.as_deref(), test, &p, workdir)]
            }
        }
    }

    /// Training samples per second of a run whose later iterations took `rest_mean_s`
    /// each: the DNN's throughput (`None` for the other apps, whose work is not samples).
    pub fn samples_per_s(&self, rest_mean_s: f64) -> Option<f64> {
        match self {
            Workload::Dnn { .. } if rest_mean_s > 0.0 => Some(self.work() as f64 / rest_mean_s),
            _ => None,
        }
    }
}

/// How [`bench_app`] runs.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Worker threads (and limit threads).
    pub workers: usize,
    /// Server shards.
    pub shards: usize,
    /// Iterations per run (at least 2, so there is a mean of later iterations).
    pub iterations: usize,
    /// The variants to run, in order.
    pub variants: Vec<Variant>,
    /// Run the limit implementation.
    pub limit: bool,
    /// Run the peer.
    pub peers: bool,
    /// Rounds (at least 1): every variant, the limit and the peers are run this many
    /// times, one after the other in each round, and each reports its median round
    /// (`median_round`), so a slow spell of a shared machine lands in one round of each
    /// instead of in one run of the comparison.
    pub rounds: usize,
    /// Scratch directory for the peers' input files.
    pub workdir: PathBuf,
}

impl BenchOptions {
    /// Checks the options before any work starts.
    pub fn validate(&self) -> Result<(), String> {
        if self.workers == 0 || self.shards == 0 {
            return Err("workers and shards must be at least 1".into());
        }
        if self.iterations < 2 {
            return Err(format!(
                "iterations must be at least 2 (the first iteration and the mean of later \
                 ones are reported separately), got {}",
                self.iterations
            ));
        }
        if self.variants.is_empty() {
            return Err("no variant to run".into());
        }
        if self.rounds == 0 {
            return Err("rounds must be at least 1".into());
        }
        Ok(())
    }
}

/// One variant's run of one app.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// The store configuration.
    pub variant: Variant,
    /// Seconds per phase.
    pub breakdown: Breakdown,
    /// The objective after the last iteration.
    pub objective: f64,
    /// MF's held-out RMSE after the last iteration.
    pub test_rmse: Option<f64>,
    /// The DNN's test accuracy after the last iteration.
    pub test_accuracy: Option<f64>,
    /// The DNN's training samples per second in the later iterations (work over
    /// `breakdown.rest_mean_s`).
    pub samples_per_s: Option<f64>,
    /// The app's full report (every iteration).
    pub report: RunReport,
}

/// The limit implementation's run.
#[derive(Debug, Clone, Serialize)]
pub struct LimitResult {
    /// Seconds per phase (iterations only).
    pub breakdown: Breakdown,
    /// The objective after the last iteration.
    pub objective: f64,
    /// MF's held-out RMSE after the last iteration.
    pub test_rmse: Option<f64>,
    /// The DNN's test accuracy after the last iteration.
    pub test_accuracy: Option<f64>,
    /// The DNN's training samples per second in the later iterations.
    pub samples_per_s: Option<f64>,
    /// The objective after each iteration.
    pub objectives: Vec<f64>,
}

impl LimitResult {
    fn new(stats: &[IterStats]) -> Self {
        let last = stats.last();
        LimitResult {
            breakdown: Breakdown::of_limit(stats),
            objective: last.map_or(f64::NAN, |s| s.objective),
            test_rmse: last.and_then(|s| s.held_out),
            test_accuracy: None,
            samples_per_s: None,
            objectives: stats.iter().map(|s| s.objective).collect(),
        }
    }

    /// With `samples_per_s` filled in for `workload`.
    fn with_rate(self, workload: &Workload) -> Self {
        let samples_per_s = workload.samples_per_s(self.breakdown.rest_mean_s);
        LimitResult {
            samples_per_s,
            ..self
        }
    }
}

/// Everything measured for one workload: one app on one input (for PageRank, at one block
/// size).
#[derive(Debug, Clone, Serialize)]
pub struct AppBench {
    /// `mf`, `lda`, `pagerank` or `dnn`.
    pub app: &'static str,
    /// The workload's name as passed to [`bench_app`]: `iterstore bench` names the input (a
    /// file name or `synthetic <size>`), for PageRank followed by `, block <B>`; the
    /// scaling sweep names the size.
    pub dataset: String,
    /// PageRank's rank-table block size (vertices per row); `None` for the other apps.
    pub block: Option<usize>,
    /// Per-iteration work, in `work_unit`s.
    pub work: u64,
    /// What `work` counts.
    pub work_unit: &'static str,
    /// Worker threads.
    pub workers: usize,
    /// Iterations per run.
    pub iterations: usize,
    /// Rounds each result is the median of ([`BenchOptions::rounds`]).
    pub rounds: usize,
    /// One result per variant, in the order run.
    pub runs: Vec<RunResult>,
    /// The limit implementation, if run.
    pub limit: Option<LimitResult>,
    /// The peers, if asked for (none otherwise).
    pub peers: Vec<PeerOutcome>,
}

impl AppBench {
    /// The run of the variant named `name`.
    pub fn run(&self, name: &str) -> Option<&RunResult> {
        self.runs.iter().find(|r| r.variant.name == name)
    }

    /// Mean later-iteration time of variant `a` over that of variant `b`.
    pub fn ratio(&self, a: &str, b: &str) -> Option<f64> {
        Some(self.run(a)?.breakdown.rest_mean_s / self.run(b)?.breakdown.rest_mean_s)
    }

    /// Mean later-iteration time of variant `name` over the limit's.
    pub fn ratio_to_limit(&self, name: &str) -> Option<f64> {
        Some(self.run(name)?.breakdown.rest_mean_s / self.limit.as_ref()?.breakdown.rest_mean_s)
    }
}

/// Runs `workload` in every variant of `opts`, then the limit and the peers, and again
/// for each of `opts.rounds` rounds; each reports its median round. `progress` hears one
/// line per finished run.
pub fn bench_app(
    workload: &Workload,
    dataset: &str,
    opts: &BenchOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<AppBench, AppError> {
    opts.validate()?;
    let app = workload.app();
    let mut runs = vec![Vec::with_capacity(opts.rounds); opts.variants.len()];
    let mut limits = Vec::with_capacity(opts.rounds);
    let mut peer_rounds = Vec::with_capacity(opts.rounds);
    for round in 0..opts.rounds {
        let tag = if opts.rounds > 1 {
            format!(" (round {} of {})", round + 1, opts.rounds)
        } else {
            String::new()
        };
        for (variant, results) in opts.variants.iter().zip(&mut runs) {
            let run = run_variant(workload, dataset, opts, variant)?;
            progress(&format!(
                "{app:<9}{:<32} {:>10.4} s per later iteration{tag}",
                variant.name, run.breakdown.rest_mean_s
            ));
            results.push(run);
        }
        if opts.limit {
            let l = workload
                .run_limit(opts.workers, opts.iterations)
                .map_err(|e| e.context(format!("{app} on {dataset}, limit")))?;
            match &l {
                Some(l) => progress(&format!(
                    "{app:<9}{:<32} {:>10.4} s per later iteration{tag}",
                    "limit", l.breakdown.rest_mean_s
                )),
                None => progress(&format!("{app} on {dataset}: no limit implementation")),
            }
            limits.extend(l);
        }
        if opts.peers {
            let peers = workload.run_peers(opts.workers, opts.iterations, &opts.workdir);
            for outcome in &peers {
                progress(&match outcome {
                    PeerOutcome::Ran(r) => format!(
                        "{app:<9}{:<32} {:>10.4} s per iteration{tag}",
                        r.peer, r.per_iter_s
                    ),
                    PeerOutcome::Skipped(why) => format!("{app} peer skipped: {why}"),
                    PeerOutcome::Failed(why) => format!("{app} peer failed: {why}"),
                });
            }
            peer_rounds.push(peers);
        }
    }
    let runs = runs
        .into_iter()
        .filter_map(|r| median_round(r, |r| r.breakdown.rest_mean_s))
        .collect();
    let limit = median_round(limits, |l| l.breakdown.rest_mean_s);
    let peers = median_peers(peer_rounds);
    Ok(AppBench {
        app,
        dataset: dataset.to_string(),
        block: workload.block(),
        work: workload.work(),
        work_unit: workload.work_unit(),
        workers: opts.workers,
        iterations: opts.iterations,
        rounds: opts.rounds,
        runs,
        limit,
        peers,
    })
}

/// One run of `workload` in `variant`.
fn run_variant(
    workload: &Workload,
    dataset: &str,
    opts: &BenchOptions,
    variant: &Variant,
) -> Result<RunResult, AppError> {
    let app = workload.app();
    let cfg = AppConfig {
        workers: opts.workers,
        shards: opts.shards,
        staleness: Staleness::BSP,
        mode: variant.mode,
        iterations: opts.iterations,
        specializations: variant.specializations,
        ..AppConfig::default()
    };
    let report = workload
        .run(&cfg)
        .map_err(|e| e.context(format!("{app} on {dataset}, variant {}", variant.name)))?;
    let breakdown = Breakdown::of_report(&report);
    let last = report.iterations.last();
    Ok(RunResult {
        variant: variant.clone(),
        breakdown,
        objective: last.map_or(f64::NAN, |r| r.objective),
        test_rmse: last.and_then(|r| r.test_rmse),
        test_accuracy: report.test_accuracy,
        samples_per_s: workload.samples_per_s(breakdown.rest_mean_s),
        report,
    })
}

/// The median of `rounds` by `seconds` (for an even count, the slower of the middle two,
/// so a comparison is never flattered by the choice); `None` if there is none.
pub fn median_round<R>(mut rounds: Vec<R>, seconds: impl Fn(&R) -> f64) -> Option<R> {
    rounds.sort_by(|a, b| seconds(a).total_cmp(&seconds(b)));
    let middle = rounds.len() / 2;
    rounds.into_iter().nth(middle)
}

/// Per peer (the same peers in every round, in order), its median round; a peer that
/// was skipped or failed in any round reports the first such outcome.
fn median_peers(rounds: Vec<Vec<PeerOutcome>>) -> Vec<PeerOutcome> {
    let peers = rounds.iter().map(Vec::len).max().unwrap_or(0);
    let mut by_peer: Vec<Vec<PeerOutcome>> = vec![Vec::new(); peers];
    for round in rounds {
        for (i, outcome) in round.into_iter().enumerate() {
            by_peer[i].push(outcome);
        }
    }
    by_peer
        .into_iter()
        .filter_map(|outcomes| {
            if let Some(bad) = outcomes.iter().find(|o| o.result().is_none()) {
                return Some(bad.clone());
            }
            median_round(outcomes, |o| o.result().map_or(f64::NAN, |r| r.per_iter_s))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::PeerResult;

    fn ran(per_iter_s: f64) -> PeerOutcome {
        PeerOutcome::Ran(PeerResult {
            peer: "p".into(),
            iterations: 2,
            total_s: 2.0 * per_iter_s,
            per_iter_s,
            metric: None,
            samples_per_s: None,
            test_accuracy: None,
            note: None,
        })
    }

    #[test]
    fn a_median_round_is_the_middle_one_and_the_slower_middle_one_of_an_even_count() {
        let id = |x: &f64| *x;
        assert_eq!(median_round(vec![3.0, 1.0, 2.0], id), Some(2.0));
        assert_eq!(median_round(vec![5.0, 1.0, 4.0, 2.0], id), Some(4.0));
        assert_eq!(median_round(vec![1.0, 2.0], id), Some(2.0));
        assert_eq!(median_round(vec![7.0], id), Some(7.0));
        assert_eq!(median_round(Vec::<f64>::new(), id), None);
    }

    #[test]
    fn each_peer_reports_its_median_round_or_its_first_failure() {
        let skipped = PeerOutcome::Skipped("not installed".into());
        let failed = PeerOutcome::Failed("crashed".into());
        let rounds = vec![
            vec![ran(5.0), ran(1.0), skipped.clone()],
            vec![ran(1.0), failed.clone(), skipped.clone()],
            vec![ran(3.0), ran(2.0), skipped.clone()],
        ];
        assert_eq!(median_peers(rounds), vec![ran(3.0), failed, skipped]);
        assert!(median_peers(Vec::new()).is_empty());
    }
}
