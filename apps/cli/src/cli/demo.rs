//! `iterstore demo`: every bundled app on tiny synthetic data, in virtual-iteration mode
//! with two workers under BSP, printed as one table together with the equivalent
//! `iterstore run` commands. Meant to finish in well under a second in a release build.
//!
//! The demo *is* those commands: it parses each one as `iterstore run` would and runs it
//! through the same code ([`super::run::execute`]), so running one of them prints the
//! result the demo printed for it. Each app's columns of the table are its registry
//! entry's ([`apps::Entry::demo_columns`]).

use anyhow::{bail, Result};
use clap::Parser;
use iterstore_apps::RunReport;

use super::apps::{self, Runnable};
use super::run::Progress;
use super::{Cli, Command};

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
fn parse(command: &str) -> Result<Box<dyn Runnable>> {
    let argv = std::iter::once("iterstore").chain(command.split_whitespace());
    match Cli::try_parse_from(argv)?.command {
        Command::Run(run) => Ok(run.into_app()),
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
        .map(|c| parse(c)?.execute(None, Progress::Hidden))
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
    let (data, objective) = apps::find(r.app)
        .map(|app| app.demo_columns(r))
        .unwrap_or_default();
    format!(
        "{:<9} {:<36} {:>8.1}ms {:>6.1}ms {:>8.2}ms  {objective}",
        r.app,
        data,
        r.preprocess_s * 1e3,
        r.init_s * 1e3,
        r.mean_iteration_s() * 1e3,
    )
}
