//! `iterstore run logreg`: logistic regression's options, its workload of `iterstore
//! bench` (L-BFGS with the run's defaults against its limit and scikit-learn) and its row
//! of the demo.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Result};
use clap::Args;
use iterstore_apps::logreg::{LogRegParams, Solver};
use iterstore_apps::{App, AppConfig, Input, LogReg, RunReport};
use iterstore_bench::Workload;

use super::{check_benched, CliApp};
use crate::cli::{at_least_one, BenchArgs, RunOptions};

/// Options of `iterstore run logreg`.
#[derive(Debug, Args)]
pub struct LogRegArgs {
    /// `lbfgs` (Sandblaster L-BFGS: the optimizer's vectors on the server shards, the
    /// gradient over work units with backup tasks) or `sgd` (Downpour SGD) [default:
    /// lbfgs].
    #[arg(long, value_name = "HOW", help_heading = "Logistic regression options")]
    pub solver: Option<String>,
    /// L2 regularization λ of the mean loss (scikit-learn's C = 1/(λ·samples))
    /// [default: 1e-4].
    #[arg(long, value_name = "λ", help_heading = "Logistic regression options")]
    pub lambda: Option<f64>,
    /// L-BFGS: steps kept in the history [default: 20].
    #[arg(long, value_name = "M", help_heading = "Logistic regression options",
          value_parser = at_least_one)]
    pub history: Option<usize>,
    /// L-BFGS: samples per work unit (many more units than workers let fast workers take
    /// more) [default: 500].
    #[arg(long, value_name = "N", help_heading = "Logistic regression options",
          value_parser = at_least_one)]
    pub unit: Option<usize>,
    /// L-BFGS: no backup tasks (idle workers then wait for the slowest unit).
    #[arg(long, help_heading = "Logistic regression options")]
    pub no_backups: bool,
    /// Values per row of the model's tables [default: 512].
    #[arg(long, value_name = "B", help_heading = "Logistic regression options",
          value_parser = at_least_one)]
    pub block: Option<usize>,
    /// SGD: learning rate [default: 0.1].
    #[arg(long, help_heading = "Logistic regression options")]
    pub lr: Option<f64>,
    /// SGD: samples per mini-batch [default: 100].
    #[arg(long, value_name = "N", help_heading = "Logistic regression options",
          value_parser = at_least_one)]
    pub batch: Option<usize>,
    /// A held-out svmlight file for the test accuracy (with svmlight --data; its
    /// features and labels must be the training file's).
    #[arg(long, value_name = "FILE", help_heading = "Data options")]
    pub test: Option<PathBuf>,
}

impl CliApp for LogReg {
    type Args = LogRegArgs;

    fn outside_clocks(args: &LogRegArgs) -> Option<&'static str> {
        let lbfgs = match args.solver.as_deref() {
            None => LogRegParams::default().solver == Solver::Lbfgs,
            Some(name) => Solver::parse(name).is_ok_and(|s| s == Solver::Lbfgs),
        };
        lbfgs
            .then_some("the lbfgs solver runs server functions, not clocks (--solver sgd does not)")
    }

    fn params(args: &LogRegArgs, _: &RunOptions, _: &AppConfig, _: &Input) -> Result<LogRegParams> {
        let d = LogRegParams::default();
        let solver = match args.solver.as_deref() {
            None => d.solver,
            Some(name) => Solver::parse(name).map_err(|e| anyhow!("--solver {e}"))?,
        };
        let params = LogRegParams {
            solver,
            lambda: args.lambda.unwrap_or(d.lambda),
            history: args.history.unwrap_or(d.history),
            unit: args.unit.unwrap_or(d.unit),
            backups: !args.no_backups,
            block: args.block.unwrap_or(d.block),
            lr: args.lr.unwrap_or(d.lr),
            batch: args.batch.unwrap_or(d.batch),
            test: args.test.clone(),
        };
        LogReg::validate(&params)?;
        Ok(params)
    }

    fn bench_input(args: &BenchArgs) -> Option<&PathBuf> {
        args.logreg_data.as_ref()
    }

    fn check_bench(args: &BenchArgs, benched: bool) -> Result<()> {
        if let Some(path) = &args.logreg_data {
            check_benched("--logreg-data", true, LogReg::NAME, benched)?;
            if !path.exists() {
                bail!(
                    "--logreg-data {}: no such file or directory (it names a Fashion-MNIST \
                     directory, tools/fetch-data fashion-mnist, or an svmlight file)",
                    path.display()
                );
            }
        }
        Ok(())
    }

    /// `iterstore run logreg`'s defaults (Sandblaster L-BFGS, λ = 1e-4, a history of
    /// 20); the peer reads the directory or file the samples were read from (generated
    /// images are written into its work directory).
    fn bench_workload(_args: &BenchArgs, input: &Input) -> Result<Workload> {
        let params = LogRegParams::default();
        let data = LogReg::load(input, &params)?;
        Ok(Workload::LogReg {
            data,
            params,
            source: match input {
                Input::File(path) => Some(path.clone()),
                Input::Synthetic(_) => None,
            },
        })
    }

    fn demo_columns(r: &RunReport) -> (String, String) {
        let n = |key: &str| r.dataset.get(key).copied().unwrap_or(0);
        let data = format!(
            "{} samples, {} features, {} classes",
            n("train_samples"),
            n("features"),
            n("classes")
        );
        let first = r.iterations.first().map_or(f64::NAN, |i| i.objective);
        let mut objective = format!(
            "objective {first:.4} -> {:.4}",
            r.final_objective().unwrap_or(f64::NAN)
        );
        if let Some(acc) = r.test_accuracy {
            objective.push_str(&format!(", test accuracy {:.1} %", 100.0 * acc));
        }
        (data, objective)
    }
}
