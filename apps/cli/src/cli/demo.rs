//! `iterstore demo`: every bundled app on tiny synthetic data, in virtual-iteration mode
//! with two workers under BSP, printed as one table together with the equivalent
//! `iterstore run` commands. Meant to finish in well under a second in a release build.
//!
//! The demo *is* those commands: it parses each one as `iterstore run` would and runs it
//! through the same code ([`run::execute`]), so running one of them prints the result the
//! demo printed for it.

use anyhow::{bail, Result};
use clap::Parser;
use iterstore_apps::RunReport;

use super::run::{self, Progress};
use super::{Cli, Command, RunArgs};

/// Iterations of every demo run.
const ITERS: usize = 20;
/// Workers of every demo run.
const WORKERS: usize = 2;

/// The demo's runs, as `iterstore` arguments: every app with its defaults.
pub(crate) fn commands() -> [String; 3] {
    let common = format!("--synthetic tiny --mode virtual --workers {WORKERS} --iters {ITERS}");
    [
        format!("run mf {common} --seed 42"),
        format!("run lda {common} --seed 42"),
        format!("run pagerank {common}"),
    ]
}

/// `command` (arguments after `iterstore`, split at spaces) parsed as `iterstore run`.
fn parse(command: &str) -> Result<RunArgs> {
    let argv = std::iter::once("iterstore").chain(command.split_whitespace());
    match Cli::try_parse_from(argv)?.command {
        Command::Run(args) => {
            args.check_app_options()?;
            Ok(*args)
        }
        other => bail!("the demo runs only `run` commands, not {other:?}"),
    }
}

/// Runs the demo and prints its table.
pub fn demo() -> Result<()> {
    println!(
        "iterstore demo: the bundled apps on tiny synthetic data, {WORKERS} workers, mode \
         virtual, BSP, {ITERS} iterations each\n"
    );
    let commands = commands();
    let reports = commands
        .iter()
        .map(|c| run::execute(&parse(c)?, None, Progress::Hidden))
        .collect::<Result<Vec<_>>>()?;
    println!(
        "{:<9} {:<36} {:>10} {:>8} {:>10}  objective (first -> last)",
        "app", "data", "preprocess", "init", "mean iter"
    );
    for report in &reports {
        println!("{}", row(report));
    }
    println!("\nthe same runs one at a time:");
    for command in &commands {
        println!("  iterstore {command}");
    }
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
