//! The registry of the apps `iterstore` runs ([`APPS`]): each app's options and what
//! `run`, `demo` and `bench` need of it ([`CliApp`], one module per app here, on top of the
//! app's [`App`]), reached by name through its type-erased [`Entry`]. `run` takes one
//! subcommand per registered app, built from the registry ([`RunCommand`]): the options
//! every app takes ([`RunOptions`]), then the app's own, then [`ClusterOptions`]; clap
//! rejects an option of another app as it rejects any unknown one.
//!
//! Registering an app is its module here (its options, [`CliApp`]) and one line in
//! [`APPS`].

pub(crate) mod dnn;
mod lda;
mod logreg;
mod mf;
mod pagerank;

use std::fmt::Debug;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::builder::{PossibleValue, PossibleValuesParser};
use clap::error::ErrorKind;
use clap::{ArgMatches, Args, Command, FromArgMatches};
use iterstore_apps::{App, AppConfig, Dnn, Input, Lda, LogReg, Mf, PageRank, RunReport};
use iterstore_bench::Workload;

use super::output::Output;
use super::run::{self, Progress};
use super::{BenchArgs, ClusterOptions, RunOptions, OUTPUT_FORMATS};

/// An app as `iterstore` drives it: its options of `run`, how they and `bench`'s make its
/// parameters, and its row of the demo's table.
pub(crate) trait CliApp: App + Debug + 'static {
    /// The app's own options of `iterstore run <app>`.
    type Args: Args + FromArgMatches + Debug;
    /// Whether `iterstore bench` runs the app when `--apps` does not say.
    const BENCHED_BY_DEFAULT: bool = false;

    /// The parameters `iterstore run` gives the app, from its options, the options every
    /// app takes and its input, for the store settings `cfg`; checked.
    fn params(
        args: &Self::Args,
        run: &RunOptions,
        cfg: &AppConfig,
        input: &Input,
    ) -> Result<Self::Params>;

    /// Whether `args` keep the model on dedicated server shards (a process then has one
    /// shard unless `--shards` says).
    fn dedicated_servers(_args: &Self::Args) -> bool {
        false
    }

    /// What in `args` changes rows outside a clock (`set_rows`, server function calls,
    /// branches), which `--shard-replicas` above 1 refuses before any work starts; `None`
    /// if nothing does.
    fn outside_clocks(_args: &Self::Args) -> Option<&'static str> {
        None
    }

    /// How long a worker waits for a message of another worker.
    fn message_timeout(_args: &Self::Args) -> Duration {
        iterstore::MESSAGE_TIMEOUT
    }

    /// `iterstore bench`'s option naming the app's input, if given.
    fn bench_input(_args: &BenchArgs) -> Option<&PathBuf> {
        None
    }

    /// Checks `iterstore bench`'s options of the app; `benched`: whether it runs.
    fn check_bench(_args: &BenchArgs, _benched: bool) -> Result<()> {
        Ok(())
    }

    /// The app's workload of `iterstore bench` on `input`: its parameters for the
    /// benchmark, its input loaded ([`App::load`]). An app the benchmark harness does not
    /// know (no [`Workload`] of its own) is refused.
    fn bench_workload(_args: &BenchArgs, _input: &Input) -> Result<Workload> {
        anyhow::bail!("iterstore bench has no workload of {}", Self::NAME)
    }

    /// The workloads `iterstore bench` runs of `workload` (the app's input, named `name`);
    /// by default just it.
    fn bench_workloads(
        _args: &BenchArgs,
        name: String,
        workload: Workload,
    ) -> Result<Vec<(String, Workload)>> {
        Ok(vec![(name, workload)])
    }

    /// The demo table's data and objective columns for a report of the app; by default
    /// the dataset's sizes and the objective's first and last values.
    fn demo_columns(r: &RunReport) -> (String, String) {
        let data: Vec<String> = r.dataset.iter().map(|(k, v)| format!("{v} {k}")).collect();
        let first = r.iterations.first().map_or(f64::NAN, |i| i.objective);
        let last = r.final_objective().unwrap_or(f64::NAN);
        (data.join(", "), format!("{first:.4e} -> {last:.4e}"))
    }
}

/// A parsed `iterstore run <app> ...`, its app's type erased.
pub(crate) trait Runnable: Debug {
    /// The options every app takes.
    fn options(&self) -> &RunOptions;
    /// The cluster and checkpoint options.
    fn cluster(&self) -> &ClusterOptions;
    /// The store-side settings the options ask for.
    fn app_config(&self) -> Result<AppConfig>;
    /// Runs the app ([`run::execute`]).
    fn execute(&self, model: Option<Output>, progress: Progress) -> Result<RunReport>;
}

/// `iterstore run <app> ...` parsed for app `A`.
#[derive(Debug)]
pub(crate) struct AppRun<A: CliApp> {
    /// The options every app takes.
    pub(crate) run: RunOptions,
    /// The app's own.
    pub(crate) args: A::Args,
    /// The cluster and checkpoint options.
    pub(crate) cluster: ClusterOptions,
}

impl<A: CliApp> Runnable for AppRun<A> {
    fn options(&self) -> &RunOptions {
        &self.run
    }

    fn cluster(&self) -> &ClusterOptions {
        &self.cluster
    }

    fn app_config(&self) -> Result<AppConfig> {
        let cfg = run::app_config(
            &self.run,
            &self.cluster,
            A::dedicated_servers(&self.args),
            A::message_timeout(&self.args),
        )?;
        match A::outside_clocks(&self.args) {
            Some(why) if cfg.shard_replicas > 1 => {
                Err(super::replicas_refused(cfg.shard_replicas, why))
            }
            _ => Ok(cfg),
        }
    }

    fn execute(&self, model: Option<Output>, progress: Progress) -> Result<RunReport> {
        run::execute(self, model, progress)
    }
}

/// A registered app, its type erased: what parsing `run` and the `bench` and `demo`
/// commands need of it.
pub(crate) trait Entry: Sync {
    /// The app's name ([`App::NAME`]).
    fn name(&self) -> &'static str;
    /// [`App::ABOUT`].
    fn about(&self) -> &'static str;
    /// The app's subcommand of `run`.
    fn command(&self) -> Command;
    /// The app's subcommand of `run` as parsed.
    fn parse(&self, matches: &mut ArgMatches) -> Result<Box<dyn Runnable>, clap::Error>;
    /// [`CliApp::BENCHED_BY_DEFAULT`].
    fn benched_by_default(&self) -> bool;
    /// [`CliApp::bench_input`].
    fn bench_input<'a>(&self, args: &'a BenchArgs) -> Option<&'a PathBuf>;
    /// [`CliApp::check_bench`].
    fn check_bench(&self, args: &BenchArgs, benched: bool) -> Result<()>;
    /// [`CliApp::bench_workload`].
    fn bench_workload(&self, args: &BenchArgs, input: &Input) -> Result<Workload>;
    /// [`CliApp::bench_workloads`].
    fn bench_workloads(
        &self,
        args: &BenchArgs,
        name: String,
        workload: Workload,
    ) -> Result<Vec<(String, Workload)>>;
    /// [`CliApp::demo_columns`].
    fn demo_columns(&self, report: &RunReport) -> (String, String);
}

/// The [`Entry`] of app `A`.
struct Registered<A>(PhantomData<fn() -> A>);

impl<A: CliApp> Entry for Registered<A> {
    fn name(&self) -> &'static str {
        A::NAME
    }

    fn about(&self) -> &'static str {
        A::ABOUT
    }

    fn command(&self) -> Command {
        command_of::<A>()
    }

    fn parse(&self, matches: &mut ArgMatches) -> Result<Box<dyn Runnable>, clap::Error> {
        Ok(Box::new(parse_of::<A>(matches)?))
    }

    fn benched_by_default(&self) -> bool {
        A::BENCHED_BY_DEFAULT
    }

    fn bench_input<'a>(&self, args: &'a BenchArgs) -> Option<&'a PathBuf> {
        A::bench_input(args)
    }

    fn check_bench(&self, args: &BenchArgs, benched: bool) -> Result<()> {
        A::check_bench(args, benched)
    }

    fn bench_workload(&self, args: &BenchArgs, input: &Input) -> Result<Workload> {
        A::bench_workload(args, input)
    }

    fn bench_workloads(
        &self,
        args: &BenchArgs,
        name: String,
        workload: Workload,
    ) -> Result<Vec<(String, Workload)>> {
        A::bench_workloads(args, name, workload)
    }

    fn demo_columns(&self, report: &RunReport) -> (String, String) {
        A::demo_columns(report)
    }
}

/// App `A`'s subcommand: the options every app takes, its own, the cluster's.
pub(crate) fn command_of<A: CliApp>() -> Command {
    let cmd = Command::new(A::NAME)
        .after_long_help(OUTPUT_FORMATS)
        .allow_negative_numbers(true);
    let cmd = RunOptions::augment_args(cmd);
    let cmd = A::Args::augment_args(cmd);
    ClusterOptions::augment_args(cmd).about(A::ABOUT)
}

/// App `A`'s subcommand ([`command_of`]) as parsed.
pub(crate) fn parse_of<A: CliApp>(matches: &mut ArgMatches) -> Result<AppRun<A>, clap::Error> {
    Ok(AppRun::<A> {
        run: RunOptions::from_arg_matches_mut(matches)?,
        args: A::Args::from_arg_matches_mut(matches)?,
        cluster: ClusterOptions::from_arg_matches_mut(matches)?,
    })
}

/// Every app `iterstore` runs, in the order `run --help` and `bench` list them: the one
/// place an app is registered.
pub(crate) static APPS: [&dyn Entry; 5] = [
    &Registered::<Mf>(PhantomData),
    &Registered::<Lda>(PhantomData),
    &Registered::<PageRank>(PhantomData),
    &Registered::<Dnn>(PhantomData),
    &Registered::<LogReg>(PhantomData),
];

/// The registered app named `name`.
pub(crate) fn find(name: &str) -> Option<&'static dyn Entry> {
    APPS.iter().copied().find(|app| app.name() == name)
}

/// A parser of the registered apps' names (`bench --apps`), each described.
pub(crate) fn names() -> PossibleValuesParser {
    PossibleValuesParser::new(
        APPS.iter()
            .map(|app| PossibleValue::new(app.name()).help(app.about())),
    )
}

/// `iterstore run <app> ...`: one subcommand per registered app.
#[derive(Debug)]
pub struct RunCommand(Box<dyn Runnable>);

impl RunCommand {
    /// The app's run as parsed.
    pub(crate) fn app(&self) -> &dyn Runnable {
        &*self.0
    }

    /// The same, owned.
    pub(crate) fn into_app(self) -> Box<dyn Runnable> {
        self.0
    }
}

impl Args for RunCommand {
    fn augment_args(cmd: Command) -> Command {
        cmd.subcommand_required(true)
            .subcommand_value_name("APP")
            .after_long_help(OUTPUT_FORMATS)
            .subcommands(APPS.iter().map(|app| app.command()))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl FromArgMatches for RunCommand {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        Self::from_arg_matches_mut(&mut matches.clone())
    }

    fn from_arg_matches_mut(matches: &mut ArgMatches) -> Result<Self, clap::Error> {
        let Some((name, mut sub)) = matches.remove_subcommand() else {
            return Err(clap::Error::raw(
                ErrorKind::MissingSubcommand,
                "`run` needs an app\n",
            ));
        };
        let app = find(&name).ok_or_else(|| {
            clap::Error::raw(ErrorKind::InvalidSubcommand, format!("no app `{name}`\n"))
        })?;
        Ok(RunCommand(app.parse(&mut sub)?))
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

/// Fails if `flag` (an `iterstore bench` option naming app `app`'s input file) is given
/// while `app` is not `benched`, or names no file.
fn check_bench_file(flag: &str, given: Option<&PathBuf>, app: &str, benched: bool) -> Result<()> {
    if let Some(path) = given {
        if !benched {
            anyhow::bail!("{flag} given but {app} is not benchmarked (--apps)");
        }
        if !path.is_file() {
            anyhow::bail!("{flag} {}: no such file", path.display());
        }
    }
    Ok(())
}

/// Fails if `flag` (an `iterstore bench` option of app `app`) is given while `app` is not
/// `benched`.
fn check_benched(flag: &str, given: bool, app: &str, benched: bool) -> Result<()> {
    if given && !benched {
        anyhow::bail!("{flag} given but {app} is not benchmarked (--apps)");
    }
    Ok(())
}
