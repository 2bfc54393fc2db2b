//! `iterstore tune dnn`: the DNN trained by the tuning loop (`iterstore_tune`, MLtuner)
//! over the store's branches ([`iterstore_apps::dnn::tune`]), with `run dnn`'s options
//! (the learning rate and, with `--tune lr,momentum`, the momentum left out) and the
//! tuning's own: the target, the time budget, the searcher, the search space, and where
//! the timeline goes (JSON, SVG). Runs on several processes like `run`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Result};
use clap::error::ErrorKind;
use clap::{ArgMatches, Args, Command, FromArgMatches};
use iterstore_apps::dnn::tune::{self, TuneConfig};
use iterstore_apps::{App, Dnn};
use iterstore_tune::{Event, Options, SearchOptions, SearcherKind, Setting};
use tracing::{debug, info};

use super::apps::{command_of, parse_of, AppRun, CliApp, Runnable};
use super::log::{duration, Step};
use super::run::{self, Output};

/// The tuning's own options.
#[derive(Debug, Args)]
#[command(next_help_heading = "Tuning options")]
pub struct TuneOptions {
    /// Stop once the test accuracy reaches A (a fraction, e.g. 0.88).
    #[arg(long, value_name = "A", value_parser = super::parse_unit)]
    pub target: Option<f64>,
    /// Stop once S seconds of training, measuring and validation are spent.
    #[arg(long, value_name = "S")]
    pub time_budget: Option<f64>,
    /// What is tuned: lr, or lr,momentum (a tuned value must not be given: --lr,
    /// --momentum).
    #[arg(long, value_name = "P,..", value_delimiter = ',', default_value = "lr")]
    pub tune: Vec<String>,
    /// The learning rates searched, log-uniformly: LOW:HIGH.
    #[arg(long, value_name = "LOW:HIGH", default_value = "0.001:1")]
    pub lr_range: String,
    /// Who proposes settings: tpe, grid or random.
    #[arg(long, default_value = "tpe")]
    pub searcher: SearcherKind,
    /// Trials of one search at most.
    #[arg(long, value_name = "N", default_value_t = 40, value_parser = super::at_least_one)]
    pub max_trials: usize,
    /// Mini-batches per tuner clock (the unit of a trial's progress).
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = super::at_least_one)]
    pub clock_batches: usize,
    /// Tuner clocks of a search's first trial (the trial time doubles from there until a
    /// trial makes progress).
    #[arg(long, value_name = "N", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub first_trial_clocks: u64,
    /// Validations without a new best that make a plateau and start a re-tune (0: never).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub plateau: usize,
    /// Re-tunes at most.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub max_retunes: usize,
    /// Write the timeline of branches (fork, train, score, kill, choose, evaluate,
    /// re-tune, stop) as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub timeline: Option<PathBuf>,
    /// Draw every branch's loss against time as an SVG in FILE.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

/// `iterstore tune <app> ...`: the app's `run` options plus [`TuneOptions`].
#[derive(Debug)]
pub struct TuneCommand {
    app: AppRun<Dnn>,
    tune: TuneOptions,
}

impl TuneCommand {
    /// The app's run as parsed (its store and cluster options).
    pub(crate) fn app(&self) -> &dyn Runnable {
        &self.app
    }
}

impl Args for TuneCommand {
    fn augment_args(cmd: Command) -> Command {
        let dnn = TuneOptions::augment_args(command_of::<Dnn>()).about(
            "Train the DNN without choosing its learning rate: branches of the training \
             state, each trained briefly with a searched setting, the fastest kept",
        );
        cmd.subcommand_required(true)
            .subcommand_value_name("APP")
            .subcommand(dnn)
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl FromArgMatches for TuneCommand {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        Self::from_arg_matches_mut(&mut matches.clone())
    }

    fn from_arg_matches_mut(matches: &mut ArgMatches) -> Result<Self, clap::Error> {
        match matches.remove_subcommand() {
            Some((name, mut sub)) if name == Dnn::NAME => Ok(TuneCommand {
                app: parse_of::<Dnn>(&mut sub)?,
                tune: TuneOptions::from_arg_matches_mut(&mut sub)?,
            }),
            Some((name, _)) => Err(clap::Error::raw(
                ErrorKind::InvalidSubcommand,
                format!("`tune` does not tune `{name}` yet (dnn)\n"),
            )),
            None => Err(clap::Error::raw(
                ErrorKind::MissingSubcommand,
                "`tune` needs an app (dnn)\n",
            )),
        }
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

/// The tuning configuration the options ask for, checked against the app's options.
fn tune_config(cmd: &TuneCommand, seed: u64) -> Result<TuneConfig> {
    let t = &cmd.tune;
    let mut tune_momentum = false;
    for p in &t.tune {
        match p.as_str() {
            "lr" => {}
            "momentum" => tune_momentum = true,
            "batch" => bail!(
                "--tune batch: tuning the batch size is not built yet (it changes the clocks \
                 of an epoch)"
            ),
            other => bail!("--tune {other}: tunable are lr and momentum"),
        }
    }
    if !t.tune.iter().any(|p| p == "lr") {
        bail!("--tune: lr is always tuned (give --tune lr or --tune lr,momentum)");
    }
    if cmd.app.args.lr.is_some() {
        bail!("--lr: tune searches the learning rate; leave --lr out (--lr-range bounds it)");
    }
    if tune_momentum && cmd.app.args.momentum.is_some() {
        bail!("--momentum: --tune momentum searches it; leave --momentum out");
    }
    let (lo, hi) = t
        .lr_range
        .split_once(':')
        .and_then(|(a, b)| Some((a.parse::<f64>().ok()?, b.parse::<f64>().ok()?)))
        .filter(|&(a, b)| a > 0.0 && a < b && b.is_finite())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--lr-range {}: expected LOW:HIGH with 0 < LOW < HIGH",
                t.lr_range
            )
        })?;
    if t.time_budget.is_some_and(|b| !(b > 0.0 && b.is_finite())) {
        bail!("--time-budget: a positive number of seconds");
    }
    let options = Options {
        searcher: t.searcher,
        search: SearchOptions {
            seed,
            max_trials: t.max_trials,
            ..SearchOptions::default()
        },
        first_trial_clocks: t.first_trial_clocks,
        plateau: t.plateau,
        max_retunes: t.max_retunes,
        target: t.target,
        time_budget: t.time_budget,
        ..Options::default()
    };
    if options.target.is_none() && options.time_budget.is_none() && options.plateau == 0 {
        bail!("nothing ends the tuning: give --target, --time-budget or a --plateau above 0");
    }
    Ok(TuneConfig {
        lr_range: (lo, hi),
        tune_momentum,
        clock_batches: t.clock_batches,
        options,
    })
}

/// A setting as the progress lines write it: `lr 0.0312, momentum 0.9`.
fn setting_text(s: &Setting) -> String {
    let parts: Vec<String> = s
        .values()
        .iter()
        .map(|(k, v)| format!("{k} {}", super::log::number(*v)))
        .collect();
    parts.join(", ")
}

/// The progress line of `event`.
fn progress(event: &Event) {
    match event {
        Event::Fork {
            t,
            branch,
            parent,
            setting,
        } => info!(
            "tune: {}: branch {branch} forked from {parent} with {}",
            duration(*t),
            setting_text(setting)
        ),
        Event::Train {
            t,
            branch,
            clocks,
            loss,
            ..
        } => debug!(
            "tune: {}: branch {branch} trained {clocks} clocks, loss {}",
            duration(*t),
            super::log::number(*loss)
        ),
        Event::Score {
            t,
            branch,
            state,
            slope,
        } => info!(
            "tune: {}: branch {branch} {state:?}{}",
            duration(*t),
            slope.map_or(String::new(), |s| format!(
                ", loss slope {}/s",
                super::log::number(s)
            ))
        ),
        Event::Kill { t, branch, reason } => {
            info!("tune: {}: branch {branch} freed: {reason}", duration(*t))
        }
        Event::Choose {
            t,
            branch,
            setting,
            trials,
        } => info!(
            "tune: {}: chose branch {branch} ({}) after {trials} trials",
            duration(*t),
            setting_text(setting)
        ),
        Event::Evaluate { t, branch, metric } => info!(
            "tune: {}: branch {branch} test accuracy {:.2} %",
            duration(*t),
            100.0 * metric
        ),
        Event::Retune { t, branch } => info!(
            "tune: {}: branch {branch} stopped improving: searching again from it",
            duration(*t)
        ),
        Event::Stop { t, stop } => info!("tune: {}: {stop}", duration(*t)),
    }
}

/// Runs `iterstore tune <app>` as parsed; `command_line` goes into the JSON report.
pub fn tune(cmd: &TuneCommand, command_line: String) -> Result<()> {
    let began = Instant::now();
    let started_at = super::now_rfc3339();
    let run = &cmd.app;
    let cfg = run.app_config()?;
    cfg.validate()?;
    let input = run::input(&run.run);
    let params = Dnn::params(&run.args, &run.run, &cfg, &input)?;
    if params.partitioning.is_some() {
        bail!(
            "tune dnn trains data-parallel replicas: --plan, --replicas, --partitions and the \
             like are not tuned yet"
        );
    }
    let config = tune_config(cmd, run.run.seed)?;
    let writes = cfg.rank() == 0;
    let model = Output::create(run.run.output.as_deref().filter(|_| writes))?;
    let json = Output::create(run.run.json.as_deref().filter(|_| writes))?;
    let timeline = Output::create(cmd.tune.timeline.as_deref().filter(|_| writes))?;
    let svg = Output::create(cmd.tune.svg.as_deref().filter(|_| writes))?;
    let loading = Step::start(&run::loading(&input, Dnn::INPUT));
    let data = Dnn::load(&input, &params)?;
    loading.done(&run::loaded(&input, Dnn::counts(&data)));
    info!("tune: setting up (tables, virtual iteration, initial weights)");
    let tuned = tune::tune(
        &cfg,
        &params.config,
        params.cnn,
        &data,
        &config,
        &mut progress,
    )?;
    let wall = began.elapsed().as_secs_f64();
    let o = &tuned.outcome;
    let chosen = o
        .setting
        .as_ref()
        .map_or("no setting chosen".into(), setting_text);
    println!(
        "tune dnn: {} after {} (tuning {}, setup {}): {chosen}, test accuracy {:.2} %, {} \
         branches forked, {} re-tunes",
        o.stop,
        duration(wall),
        duration(o.seconds),
        duration(tuned.setup_s),
        100.0 * tuned.accuracy,
        o.timeline.count("fork"),
        o.timeline.count("retune"),
    );
    if let Some(out) = model {
        out.write(|w| w.write_all(&tuned.model_file))?;
    }
    if let Some(out) = timeline {
        out.write(|w| writeln!(w, "{}", o.timeline.to_json()))?;
    }
    if let Some(out) = svg {
        out.write(|w| w.write_all(o.timeline.to_svg().as_bytes()))?;
    }
    if let Some(out) = json {
        let report = serde_json::json!({
            "app": Dnn::NAME,
            "command": "tune",
            "version": super::VERSION,
            "command_line": command_line,
            "input": input.describe(),
            "started_at": started_at,
            "workers": cfg.workers,
            "stop": o.stop,
            "setting": o.setting,
            "best_test_accuracy": o.best,
            "test_accuracy": tuned.accuracy,
            "tuning_seconds": o.seconds,
            "setup_s": tuned.setup_s,
            "wall_seconds": wall,
            "timeline": o.timeline,
        });
        out.write(|w| writeln!(w, "{report:#}"))?;
    }
    Ok(())
}
