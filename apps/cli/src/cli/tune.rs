//! `iterstore tune dnn|mf`: an app trained by the tuning loop (`iterstore_tune`, MLtuner)
//! over the store's branches ([`iterstore_apps::dnn::tune`], [`iterstore_apps::mf::tune`]),
//! with `run`'s options of the app (what is tuned left out: `--lr`, and `--momentum` when
//! tuned) and the tuning's own: the target, the time budget, the searcher, the search
//! space, and where the timeline goes (JSON, SVG). Runs on several processes like `run`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Result};
use clap::error::ErrorKind;
use clap::{ArgMatches, Args, Command, FromArgMatches};
use iterstore_apps::dnn::tune::{self, TuneConfig};
use iterstore_apps::mf::tune::MfTuneConfig;
use iterstore_apps::{App, Dnn, Mf};
use iterstore_tune::{Event, Options, SearchOptions, SearcherKind, Setting};
use tracing::{debug, info};

use super::apps::{command_of, parse_of, AppRun, CliApp, Runnable};
use super::log::{duration, Step};
use super::run::{self, Output};

/// The tuning's own options.
#[derive(Debug, Args)]
#[command(next_help_heading = "Tuning options")]
pub struct TuneOptions {
    /// Stop once the test accuracy reaches A (dnn: a fraction, e.g. 0.88) or the test
    /// RMSE falls to A (mf).
    #[arg(long, value_name = "A", value_parser = super::parse_cores)]
    pub target: Option<f64>,
    /// Stop once S seconds of training, measuring and validation are spent.
    #[arg(long, value_name = "S")]
    pub time_budget: Option<f64>,
    /// What is tuned: lr, and for dnn momentum, for mf staleness (a tuned value must not
    /// be given: --lr, --momentum).
    #[arg(long, value_name = "P,..", value_delimiter = ',', default_value = "lr")]
    pub tune: Vec<String>,
    /// The learning rates searched, log-uniformly: LOW:HIGH [default: dnn 0.001:1, mf
    /// 0.003:1].
    #[arg(long, value_name = "LOW:HIGH")]
    pub lr_range: Option<String>,
    /// With --tune ...,staleness (mf): the staleness values to choose from.
    #[arg(
        long,
        value_name = "S,..",
        value_delimiter = ',',
        default_value = "0,1,2,3"
    )]
    pub staleness_values: Vec<u32>,
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

/// The app a tuning trains, with its `run` options.
#[derive(Debug)]
enum TunedApp {
    Dnn(Box<AppRun<Dnn>>),
    Mf(Box<AppRun<Mf>>),
}

/// `iterstore tune <app> ...`: the app's `run` options plus [`TuneOptions`].
#[derive(Debug)]
pub struct TuneCommand {
    app: TunedApp,
    tune: TuneOptions,
}

impl TuneCommand {
    /// The app's run as parsed (its store and cluster options).
    pub(crate) fn app(&self) -> &dyn Runnable {
        match &self.app {
            TunedApp::Dnn(run) => &**run,
            TunedApp::Mf(run) => &**run,
        }
    }
}

impl Args for TuneCommand {
    fn augment_args(cmd: Command) -> Command {
        let dnn = TuneOptions::augment_args(command_of::<Dnn>()).about(
            "Train the DNN without choosing its learning rate (or momentum): branches of the \
             training state, each trained briefly with a searched setting, the fastest kept",
        );
        let mf = TuneOptions::augment_args(command_of::<Mf>()).about(
            "Train MF without choosing its step size (or staleness): branches of the \
             factors, each trained briefly with a searched setting, the fastest kept",
        );
        cmd.subcommand_required(true)
            .subcommand_value_name("APP")
            .subcommand(dnn)
            .subcommand(mf)
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
        let Some((name, mut sub)) = matches.remove_subcommand() else {
            return Err(clap::Error::raw(
                ErrorKind::MissingSubcommand,
                "`tune` needs an app (dnn or mf)\n",
            ));
        };
        let app = match name.as_str() {
            "dnn" => TunedApp::Dnn(Box::new(parse_of::<Dnn>(&mut sub)?)),
            "mf" => TunedApp::Mf(Box::new(parse_of::<Mf>(&mut sub)?)),
            other => {
                return Err(clap::Error::raw(
                    ErrorKind::InvalidSubcommand,
                    format!("`tune` does not tune `{other}` yet (dnn or mf)\n"),
                ))
            }
        };
        Ok(TuneCommand {
            app,
            tune: TuneOptions::from_arg_matches_mut(&mut sub)?,
        })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

/// The tunables `--tune` names, checked against what `app` tunes (`lr` always).
fn tunables(t: &TuneOptions, app: &str, others: &[&str]) -> Result<Vec<String>> {
    for p in &t.tune {
        match p.as_str() {
            "lr" => {}
            "batch" => bail!(
                "--tune batch: tuning the batch size is not built yet (it changes the clocks \
                 of an epoch)"
            ),
            other if others.contains(&other) => {}
            other => bail!(
                "--tune {other}: {app} tunes lr{}",
                others.iter().map(|o| format!(", {o}")).collect::<String>()
            ),
        }
    }
    if !t.tune.iter().any(|p| p == "lr") {
        bail!("--tune: lr is always tuned (give --tune lr or --tune lr,...)");
    }
    Ok(t.tune.clone())
}

/// `--lr-range`, or `default`.
fn lr_range(t: &TuneOptions, default: (f64, f64)) -> Result<(f64, f64)> {
    let Some(text) = &t.lr_range else {
        return Ok(default);
    };
    text.split_once(':')
        .and_then(|(a, b)| Some((a.parse::<f64>().ok()?, b.parse::<f64>().ok()?)))
        .filter(|&(a, b)| a > 0.0 && a < b && b.is_finite())
        .ok_or_else(|| anyhow::anyhow!("--lr-range {text}: expected LOW:HIGH with 0 < LOW < HIGH"))
}

/// The tuning loop's options from `t`; `target` is what the tuner's validations must
/// reach (a test RMSE negated: they rise).
fn options(t: &TuneOptions, seed: u64, target: Option<f64>) -> Result<Options> {
    if t.time_budget.is_some_and(|b| !(b > 0.0 && b.is_finite())) {
        bail!("--time-budget: a positive number of seconds");
    }
    if target.is_none() && t.time_budget.is_none() && t.plateau == 0 {
        bail!("nothing ends the tuning: give --target, --time-budget or a --plateau above 0");
    }
    Ok(Options {
        searcher: t.searcher,
        search: SearchOptions {
            seed,
            max_trials: t.max_trials,
            ..SearchOptions::default()
        },
        first_trial_clocks: t.first_trial_clocks,
        plateau: t.plateau,
        max_retunes: t.max_retunes,
        target,
        time_budget: t.time_budget,
        ..Options::default()
    })
}

/// What a tuning of either app leaves for the summary and the files.
struct Tuned {
    outcome: iterstore_tune::Outcome,
    /// The final branch's validation, as the summary says it.
    result: String,
    /// The final branch's model file.
    model_file: Vec<u8>,
    setup_s: f64,
    /// The final validation for the JSON report: its name and value.
    metric: (&'static str, f64),
}

/// `tune dnn`: checks, loads, tunes.
fn tune_dnn(run: &AppRun<Dnn>, t: &TuneOptions) -> Result<Tuned> {
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
    let tuned = tunables(t, "dnn", &["momentum"])?;
    let tune_momentum = tuned.iter().any(|p| p == "momentum");
    if run.args.lr.is_some() {
        bail!("--lr: tune searches the learning rate; leave --lr out (--lr-range bounds it)");
    }
    if tune_momentum && run.args.momentum.is_some() {
        bail!("--momentum: --tune momentum searches it; leave --momentum out");
    }
    if t.target.is_some_and(|a| a > 1.0) {
        bail!("--target: dnn's is a test accuracy, a fraction up to 1");
    }
    let config = TuneConfig {
        lr_range: lr_range(t, (0.001, 1.0))?,
        tune_momentum,
        clock_batches: t.clock_batches,
        options: options(t, run.run.seed, t.target)?,
    };
    let loading = Step::start(&run::loading(&input, Dnn::INPUT));
    let data = Dnn::load(&input, &params)?;
    loading.done(&run::loaded(&input, Dnn::counts(&data)));
    info!("tune: setting up (tables, virtual iteration, initial weights)");
    let r = tune::tune(
        &cfg,
        &params.config,
        params.cnn,
        &data,
        &config,
        &mut progress,
    )?;
    Ok(Tuned {
        outcome: r.outcome,
        result: format!("test accuracy {:.2} %", 100.0 * r.accuracy),
        model_file: r.model_file,
        setup_s: r.setup_s,
        metric: ("test_accuracy", r.accuracy),
    })
}

/// `tune mf`: checks, loads, tunes.
fn tune_mf(run: &AppRun<Mf>, t: &TuneOptions) -> Result<Tuned> {
    let cfg = run.app_config()?;
    cfg.validate()?;
    let input = run::input(&run.run);
    let params = Mf::params(&run.args, &run.run, &cfg, &input)?;
    let tuned = tunables(t, "mf", &["staleness"])?;
    if run.args.lr.is_some() {
        bail!("--lr: tune searches the step size; leave --lr out (--lr-range bounds it)");
    }
    let staleness = if tuned.iter().any(|p| p == "staleness") {
        if t.staleness_values.is_empty() {
            bail!("--staleness-values: give at least one value");
        }
        t.staleness_values.clone()
    } else {
        Vec::new()
    };
    let config = MfTuneConfig {
        lr_range: lr_range(t, (0.003, 1.0))?,
        staleness,
        clock_batches: t.clock_batches,
        options: options(t, run.run.seed, t.target.map(|r| -r))?,
    };
    let loading = Step::start(&run::loading(&input, Mf::INPUT));
    let data = Mf::load(&input, &params)?;
    loading.done(&run::loaded(&input, Mf::counts(&data)));
    info!("tune: setting up (tables, virtual iteration, initial factors)");
    let (r, start_s) = iterstore_apps::mf::tune::tune(
        &cfg,
        &params.config,
        &data.train,
        &data.test.ratings,
        &config,
        &mut progress,
    )?;
    let mut model_file = Vec::new();
    iterstore_apps::mf::write_model_of(&r.model, &mut model_file)?;
    Ok(Tuned {
        outcome: r.outcome,
        result: format!("test RMSE {:.4}", r.rmse),
        model_file,
        setup_s: r.setup_s + start_s,
        metric: ("test_rmse", r.rmse),
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

/// Runs `iterstore tune <app> ...` as parsed; `command_line` goes into the JSON report.
pub fn tune(cmd: &TuneCommand, command_line: String) -> Result<()> {
    let began = Instant::now();
    let started_at = super::now_rfc3339();
    let (run, name) = match &cmd.app {
        TunedApp::Dnn(r) => (&r.run, Dnn::NAME),
        TunedApp::Mf(r) => (&r.run, Mf::NAME),
    };
    let writes = cmd.app().app_config()?.rank() == 0;
    let model = Output::create(run.output.as_deref().filter(|_| writes))?;
    let json = Output::create(run.json.as_deref().filter(|_| writes))?;
    let timeline = Output::create(cmd.tune.timeline.as_deref().filter(|_| writes))?;
    let svg = Output::create(cmd.tune.svg.as_deref().filter(|_| writes))?;
    let tuned = match &cmd.app {
        TunedApp::Dnn(r) => tune_dnn(r, &cmd.tune)?,
        TunedApp::Mf(r) => tune_mf(r, &cmd.tune)?,
    };
    let wall = began.elapsed().as_secs_f64();
    let o = &tuned.outcome;
    let chosen = o
        .setting
        .as_ref()
        .map_or("no setting chosen".into(), setting_text);
    println!(
        "tune {name}: {} after {} (tuning {}, setup {}): {chosen}, {}, {} branches forked, {} \
         re-tunes",
        o.stop,
        duration(wall),
        duration(o.seconds),
        duration(tuned.setup_s),
        tuned.result,
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
            "app": name,
            "command": "tune",
            "version": super::VERSION,
            "command_line": command_line,
            "input": run::input(run).describe(),
            "started_at": started_at,
            "stop": o.stop,
            "setting": o.setting,
            "best_validation": o.best,
            tuned.metric.0: tuned.metric.1,
            "tuning_seconds": o.seconds,
            "setup_s": tuned.setup_s,
            "wall_seconds": wall,
            "timeline": o.timeline,
        });
        out.write(|w| writeln!(w, "{report:#}"))?;
    }
    Ok(())
}
