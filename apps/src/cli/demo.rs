//! `iterstore demo`: every bundled app on tiny synthetic data, in virtual-iteration mode
//! with two workers under BSP, printed as one table together with the equivalent
//! `iterstore run` commands. Meant to finish in well under a second in a release build.

use anyhow::Result;
use iterstore::{Mode, Staleness};
use iterstore_apps::algo::lda::LdaConfig;
use iterstore_apps::algo::mf::MfConfig;
use iterstore_apps::apps::pagerank::PageRankParams;
use iterstore_apps::apps::{lda, mf, pagerank, AppConfig, RunReport};
use iterstore_apps::data::{split_ratings, CorpusSpec, GraphSpec, RatingsSpec};

use super::run::MF_TEST_FRACTION;

/// Iterations of every demo run.
const ITERS: usize = 20;
/// The demo's MF step: tiny data tolerates a larger one than the `run` default.
const MF_LR: f32 = 0.01;
const MF_INIT_SCALE: f32 = 0.5;
const SEED: u64 = 42;

/// Runs the demo and prints its table.
pub fn demo() -> Result<()> {
    let cfg = AppConfig {
        workers: 2,
        shards: 1,
        staleness: Staleness::BSP,
        mode: Mode::Virtual,
        iterations: ITERS,
        ..AppConfig::default()
    };
    println!(
        "iterstore demo: the bundled apps on tiny synthetic data, {} workers, mode {}, BSP, \
         {ITERS} iterations each\n",
        cfg.workers,
        cfg.mode.name()
    );
    let (train, test) = split_ratings(
        &RatingsSpec::preset("tiny")
            .map_err(anyhow::Error::msg)?
            .generate(),
        MF_TEST_FRACTION,
        SEED,
    );
    let mf_params = MfConfig {
        learning_rate: MF_LR,
        init_scale: MF_INIT_SCALE,
        seed: SEED,
        ..MfConfig::default()
    };
    let mf = mf::run(&cfg, &mf_params, &train, &test.ratings)?.report;

    let spec = CorpusSpec::preset("tiny").map_err(anyhow::Error::msg)?;
    let lda_params = LdaConfig {
        topics: spec.num_topics as usize,
        seed: SEED,
        ..LdaConfig::default()
    };
    let lda = lda::run(&cfg, &lda_params, &spec.generate().0)?.report;

    let graph = GraphSpec::preset("tiny")
        .map_err(anyhow::Error::msg)?
        .generate();
    let pagerank = pagerank::run(&cfg, &PageRankParams::default(), &graph)?.report;

    println!(
        "{:<9} {:<36} {:>10} {:>8} {:>10}  objective (first -> last)",
        "app", "data", "preprocess", "init", "mean iter"
    );
    for report in [&mf, &lda, &pagerank] {
        println!("{}", row(report));
    }
    println!("\nthe same runs one at a time:");
    let common = format!("--synthetic tiny --mode virtual --workers 2 --iters {ITERS}");
    println!("  iterstore run mf {common} --lr {MF_LR} --init-scale {MF_INIT_SCALE} --seed {SEED}");
    println!("  iterstore run lda {common} --seed {SEED}");
    println!("  iterstore run pagerank {common}");
    println!("options and output formats: iterstore run --help");
    Ok(())
}

/// One table row: the app, its data, its times and its objective's progress.
fn row(r: &RunReport) -> String {
    let n = |key: &str| r.dataset.get(key).copied().unwrap_or(0);
    let data = match r.app {
        "mf" => format!(
            "{} users x {} items, {} ratings",
            n("users"),
            n("items"),
            n("train_ratings") + n("test_ratings")
        ),
        "lda" => format!(
            "{} docs, {} words, {} tokens",
            n("docs"),
            n("vocab"),
            n("tokens")
        ),
        _ => format!("{} vertices, {} edges", n("vertices"), n("edges")),
    };
    let first = r.iterations.first().map_or(f64::NAN, |i| i.objective);
    let objective = match r.app {
        "mf" => format!(
            "train RMSE {first:.3} -> {:.3}, test {:.3}",
            r.final_objective().unwrap_or(f64::NAN),
            r.iterations
                .last()
                .and_then(|i| i.test_rmse)
                .unwrap_or(f64::NAN)
        ),
        "lda" => format!(
            "log-likelihood {first:.4e} -> {:.4e}",
            r.final_objective().unwrap_or(f64::NAN)
        ),
        _ => format!(
            "L1 change {first:.2e} -> {:.2e}",
            r.final_objective().unwrap_or(f64::NAN)
        ),
    };
    format!(
        "{:<9} {:<36} {:>8.1}ms {:>6.1}ms {:>8.2}ms  {objective}",
        r.app,
        data,
        r.preprocess_s * 1e3,
        r.init_s * 1e3,
        r.mean_iteration_s() * 1e3,
    )
}
