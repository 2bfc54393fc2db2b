//! `iterstore run lda`: LDA's options, its benchmark workload and its row of the demo.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use iterstore_algo::lda::{LdaConfig, SamplerKind};
use iterstore_apps::{App, AppConfig, Input, Lda, RunReport};
use iterstore_bench::Workload;
use iterstore_data::CorpusSpec;

use super::CliApp;
use crate::cli::bench::SEED;
use crate::cli::{at_least_one, parse_sampler, BenchArgs, RunOptions};

/// Options of `iterstore run lda`.
#[derive(Debug, Args)]
pub struct LdaArgs {
    /// Number of topics [default: the planted number for --synthetic, else 100].
    #[arg(long, help_heading = "LDA options", value_parser = at_least_one)]
    pub topics: Option<usize>,
    /// Document-topic prior [default: 0.1].
    #[arg(long, help_heading = "LDA options")]
    pub alpha: Option<f64>,
    /// Topic-word prior [default: 0.01].
    #[arg(long, help_heading = "LDA options")]
    pub beta: Option<f64>,
    /// `sparse` (SparseLDA's bucket sampler: cost per token grows with the topics of the
    /// document and the word) or `dense` (K terms per token) [default: dense]. Both draw
    /// from the same conditional.
    #[arg(long, value_name = "KIND", help_heading = "LDA options", value_parser = parse_sampler)]
    pub sampler: Option<SamplerKind>,
}

/// The topics of `input` unless given: the planted number of a synthetic corpus, else
/// [`LdaConfig::default`]'s.
fn topics(given: Option<usize>, input: &Input) -> Result<usize> {
    let planted = match input {
        Input::Synthetic(size) => Some(
            CorpusSpec::preset(size)
                .map_err(anyhow::Error::msg)?
                .num_topics as usize,
        ),
        Input::File(_) => None,
    };
    Ok(given.or(planted).unwrap_or(LdaConfig::default().topics))
}

impl CliApp for Lda {
    type Args = LdaArgs;
    const BENCHED_BY_DEFAULT: bool = true;

    fn params(args: &LdaArgs, run: &RunOptions, _: &AppConfig, input: &Input) -> Result<LdaConfig> {
        let defaults = LdaConfig::default();
        let params = LdaConfig {
            topics: topics(args.topics, input)?,
            alpha: args.alpha.unwrap_or(defaults.alpha),
            beta: args.beta.unwrap_or(defaults.beta),
            seed: run.seed,
            sampler: args.sampler.unwrap_or(defaults.sampler),
        };
        Lda::validate(&params)?;
        Ok(params)
    }

    fn bench_input(args: &BenchArgs) -> Option<&PathBuf> {
        args.lda_data.as_ref()
    }

    fn check_bench(args: &BenchArgs, benched: bool) -> Result<()> {
        super::check_bench_file("--lda-data", args.lda_data.as_ref(), Lda::NAME, benched)
    }

    fn bench_workload(args: &BenchArgs, input: &Input) -> Result<Workload> {
        let params = LdaConfig {
            topics: topics(args.topics, input)?,
            seed: SEED,
            sampler: args.sampler.unwrap_or_default(),
            ..LdaConfig::default()
        };
        let corpus = Lda::load(input, &params)?;
        Ok(Workload::Lda { corpus, params })
    }

    fn demo_columns(r: &RunReport) -> (String, String) {
        let n = |key: &str| r.dataset.get(key).copied().unwrap_or(0);
        let first = r.iterations.first().map_or(f64::NAN, |i| i.objective);
        let data = format!(
            "{} docs, {} words, {} tokens",
            n("docs"),
            n("vocab"),
            n("tokens")
        );
        let objective = format!(
            "log-likelihood {first:.4e} -> {:.4e}",
            r.final_objective().unwrap_or(f64::NAN)
        );
        (data, objective)
    }
}
