//! `iterstore run mf`: matrix factorization's options, its benchmark workload and its row
//! of the demo.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use iterstore_algo::mf::MfConfig;
use iterstore_algo::ratings_layout::RatingsPartition;
use iterstore_apps::mf::{MfData, MfParams};
use iterstore_apps::{App, AppConfig, Input, Mf, RunReport};
use iterstore_bench::Workload;

use super::{check_bench_file, CliApp};
use crate::cli::bench::SEED;
use crate::cli::{at_least_one, BenchArgs, RunOptions};

/// Options of `iterstore run mf`.
#[derive(Debug, Args)]
pub struct MfArgs {
    /// Latent factors per row (the factorization's rank) [default: 16].
    #[arg(long, value_name = "K", help_heading = "MF options", value_parser = at_least_one)]
    pub factors: Option<usize>,
    /// AdaGrad step size (per-row AdaGrad, as LIBMF) [default: 0.1].
    #[arg(long, help_heading = "MF options")]
    pub lr: Option<f32>,
    /// L2 regularisation [default: 0.05].
    #[arg(long, help_heading = "MF options")]
    pub reg: Option<f32>,
    /// Initial factors are uniform in [0, SCALE) [default: 0.1].
    #[arg(long, value_name = "SCALE", help_heading = "MF options")]
    pub init_scale: Option<f32>,
    /// Fraction of the ratings held out for the test RMSE [default: 0.1].
    #[arg(long, value_name = "F", help_heading = "MF options")]
    pub test_fraction: Option<f64>,
    /// How the ratings are split over the workers: `ratings` (ranges of the file's
    /// ratings) or `strata` (each worker holds the ratings of its items, mini-batches by
    /// user strata). `strata` keeps most rows on one process, so locality placement can
    /// cut network traffic [default: ratings].
    #[arg(long, value_name = "HOW", help_heading = "Data options")]
    pub partition: Option<String>,
}

impl CliApp for Mf {
    type Args = MfArgs;
    const BENCHED_BY_DEFAULT: bool = true;

    fn params(args: &MfArgs, run: &RunOptions, _: &AppConfig, _: &Input) -> Result<MfParams> {
        let defaults = MfParams::default();
        let params = MfParams {
            config: MfConfig {
                rank: args.factors.unwrap_or(defaults.config.rank),
                learning_rate: args.lr.unwrap_or(defaults.config.learning_rate),
                regularization: args.reg.unwrap_or(defaults.config.regularization),
                init_scale: args.init_scale.unwrap_or(defaults.config.init_scale),
                seed: run.seed,
                partition: match args.partition.as_deref() {
                    None => RatingsPartition::default(),
                    Some("ratings") => RatingsPartition::Ratings,
                    Some("strata") => RatingsPartition::Strata,
                    Some(other) => {
                        bail!("--partition {other}: mf splits its ratings by `ratings` or `strata`")
                    }
                },
            },
            test_fraction: args.test_fraction.unwrap_or(defaults.test_fraction),
        };
        Mf::validate(&params)?;
        Ok(params)
    }

    fn bench_input(args: &BenchArgs) -> Option<&PathBuf> {
        args.mf_data.as_ref()
    }

    fn check_bench(args: &BenchArgs, benched: bool) -> Result<()> {
        check_bench_file("--mf-data", args.mf_data.as_ref(), Mf::NAME, benched)
    }

    fn bench_workload(_: &BenchArgs, input: &Input) -> Result<Workload> {
        let defaults = MfParams::default();
        let params = MfParams {
            config: MfConfig {
                seed: SEED,
                ..defaults.config
            },
            ..defaults
        };
        let MfData { train, test } = Mf::load(input, &params)?;
        Ok(Workload::Mf {
            train,
            test,
            params: params.config,
        })
    }

    fn demo_columns(r: &RunReport) -> (String, String) {
        let n = |key: &str| r.dataset.get(key).copied().unwrap_or(0);
        let first = r.iterations.first().map_or(f64::NAN, |i| i.objective);
        let data = format!(
            "{} users x {} items, {} ratings",
            n("users"),
            n("items"),
            n("train_ratings") + n("test_ratings")
        );
        let objective = format!(
            "train RMSE {first:.3} -> {:.3}, test {:.3}",
            r.final_objective().unwrap_or(f64::NAN),
            r.iterations
                .last()
                .and_then(|i| i.test_rmse)
                .unwrap_or(f64::NAN)
        );
        (data, objective)
    }
}
