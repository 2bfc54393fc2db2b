//! `iterstore tune dnn|mf|lda`: an app trained by the tuning loop (`iterstore_tune`, MLtuner)
//! over the store's branches ([`iterstore_apps::dnn::tune`], [`iterstore_apps::mf::tune`],
//! [`iterstore_apps::lda::tune`]),
//! with `run`'s options of the app (what is tuned left out: `--lr`, and `--momentum` when
//! tuned) and the tuning's own: the target, the time budget, the searcher, the search
//! space, and where the timeline goes (JSON, SVG). Runs on several processes like `run`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Result};
use clap::error::ErrorKind;
use clap::{ArgMatches, Args, Command, FromArgMatches};
use iterstore_apps::dnn::tune::{self, TuneConfig};
use iterstore_apps::lda::tune::LdaTuneConfig;
use iterstore_apps::mf::tune::MfTuneConfig;
use iterstore_apps::{App, Dnn, Lda, Mf};
use iterstore_tune::{Event, Options, SearchOptions, SearcherKind, Setting};
use tracing::{debug, info};

use super::apps::{command_of, parse_of, AppRun, CliApp, Runnable};
use super::log::{duration, Step};
use super::output::Output;
use super::run;

/// The tuning's own options.
#[derive(Debug, Args)]
#[command(next_help_heading = "Tuning options")]
pub struct TuneOptions {
    /// Stop once the test accuracy reaches A (dnn: a fraction, e.g. 0.88), the test
    /// RMSE falls to A (mf), or the log-likelihood reaches A (lda, as `run lda` reports
    /// it).
    #[arg(long, value_name = "A", value_parser = parse_finite, allow_negative_numbers = true)]
    pub target: Option<f64>,
    /// Stop once S seconds of training, measuring and validation are spent.
    #[arg(long, value_name = "S")]
    pub time_budget: Option<f64>,
    /// What is tuned: lr, and for dnn momentum and batch, for mf staleness; lda tunes
    /// staleness only (a tuned value must not be given: --lr, --momentum) [default: lr; lda:
    /// staleness].
    #[arg(long, value_name = "P,..", value_delimiter = ',')]
    pub tune: Option<Vec<String>>,
    /// The learning rates searched, log-uniformly: LOW:HIGH [default: dnn 0.001:1, mf
    /// 0.003:1].
    #[arg(long, value_name = "LOW:HIGH")]
    pub lr_range: Option<String>,
    /// With --tune ...,batch (dnn): the batch sizes to choose from.
    #[arg(long, value_name = "B,..", value_delimiter = ',', default_value = "16,32,64,128,256",
          value_parser = super::at_least_one)]
    pub batch_values: Vec<usize>,
    /// With --tune ...,staleness (mf) and for lda: the staleness values to choose from.
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
    Lda(Box<AppRun<Lda>>),
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
            TunedApp::Lda(run) => &**run,
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
        let lda = TuneOptions::augment_args(command_of::<Lda>()).about(
            "Train LDA without choosing its staleness: branches of the counts and topics, \
             each trained a few sweeps with a staleness, the fastest kept",
        );
        cmd.subcommand_required(true)
            .subcommand_value_name("APP")
            .subcommand(dnn)
            .subcommand(mf)
            .subcommand(lda)
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
                "`tune` needs an app (dnn, mf or lda)\n",
            ));
        };
        let app = match name.as_str() {
            "dnn" => TunedApp::Dnn(Box::new(parse_of::<Dnn>(&mut sub)?)),
            "mf" => TunedApp::Mf(Box::new(parse_of::<Mf>(&mut sub)?)),
            "lda" => TunedApp::Lda(Box::new(parse_of::<Lda>(&mut sub)?)),
            other => {
                return Err(clap::Error::raw(
                    ErrorKind::InvalidSubcommand,
                    format!("`tune` does not tune `{other}` yet (dnn, mf or lda)\n"),
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

/// Parses a finite number.
fn parse_finite(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() => Ok(f),
        Ok(f) => Err(format!("{f}: give a finite number")),
        Err(e) => Err(e.to_string()),
    }
}

/// The tunables `--tune` names (`default` if not given), checked against what `app`
/// tunes (`allowed`; `lr` always when it is allowed).
fn tunables(t: &TuneOptions, app: &str, default: &str, allowed: &[&str]) -> Result<Vec<String>> {
    let tuned = t.tune.clone().unwrap_or_else(|| vec![default.to_string()]);
    for p in &tuned {
        match p.as_str() {
            other if allowed.contains(&other) => {}
            other => bail!("--tune {other}: {app} tunes {}", allowed.join(", ")),
        }
    }
    if allowed.contains(&"lr") && !tuned.iter().any(|p| p == "lr") {
        bail!("--tune: {app}'s lr is always tuned (give --tune lr or --tune lr,...)");
    }
    Ok(tuned)
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
    let tuned = tunables(t, "dnn", "lr", &["lr", "momentum", "batch"])?;
    let tune_momentum = tuned.iter().any(|p| p == "momentum");
    let batches = if tuned.iter().any(|p| p == "batch") {
        if run.args.batch.is_some() {
            bail!("--batch: --tune batch searches it; leave --batch out (--batch-values)");
        }
        t.batch_values.clone()
    } else {
        Vec::new()
    };
    if run.args.lr.is_some() {
        bail!("--lr: tune searches the learning rate; leave --lr out (--lr-range bounds it)");
    }
    if tune_momentum && run.args.momentum.is_some() {
        bail!("--momentum: --tune momentum searches it; leave --momentum out");
    }
    if t.target.is_some_and(|a| !(0.0..=1.0).contains(&a)) {
        bail!("--target: dnn's is a test accuracy, a fraction from 0 to 1");
    }
    let config = TuneConfig {
        lr_range: lr_range(t, (0.001, 1.0))?,
        tune_momentum,
        batches,
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
    let tuned = tunables(t, "mf", "lr", &["lr", "staleness"])?;
    if run.args.lr.is_some() {
        bail!("--lr: tune searches the step size; leave --lr out (--lr-range bounds it)");
    }
    if t.target.is_some_and(|r| r <= 0.0) {
        bail!("--target: mf's is a test RMSE, above 0");
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

/// `tune lda`: checks, loads, tunes.
fn tune_lda(run: &AppRun<Lda>, t: &TuneOptions) -> Result<Tuned> {
    let cfg = run.app_config()?;
    cfg.validate()?;
    let input = run::input(&run.run);
    let params = Lda::params(&run.args, &run.run, &cfg, &input)?;
    tunables(t, "lda", "staleness", &["staleness"])?;
    if t.lr_range.is_some() {
        bail!("--lr-range: lda has no learning rate to tune (it tunes the staleness)");
    }
    if t.staleness_values.is_empty() {
        bail!("--staleness-values: give at least one value");
    }
    let config = LdaTuneConfig {
        staleness: t.staleness_values.clone(),
        options: options(t, run.run.seed, t.target)?,
    };
    let loading = Step::start(&run::loading(&input, Lda::INPUT));
    let corpus = Lda::load(&input, &params)?;
    loading.done(&run::loaded(&input, Lda::counts(&corpus)));
    info!("tune: setting up (tables, virtual sweep, initial counts)");
    let (r, start_s) =
        iterstore_apps::lda::tune::tune(&cfg, &params, &corpus, &config, &mut progress)?;
    Ok(Tuned {
        outcome: r.outcome,
        result: format!("log-likelihood {}", super::log::number(r.log_likelihood)),
        model_file: Vec::new(),
        setup_s: r.setup_s + start_s,
        metric: ("log_likelihood", r.log_likelihood),
    })
}

/// Runs `iterstore tune <app> ...` as parsed; `command_line` goes into the JSON report.
pub fn tune(cmd: &TuneCommand, command_line: String) -> Result<()> {
    let began = Instant::now();
    let started_at = super::now_rfc3339();
    let (run, name) = match &cmd.app {
        TunedApp::Dnn(r) => (&r.run, Dnn::NAME),
        TunedApp::Mf(r) => (&r.run, Mf::NAME),
        TunedApp::Lda(r) => (&r.run, Lda::NAME),
    };
    if matches!(cmd.app, TunedApp::Lda(_)) && run.output.is_some() {
        bail!("--output: tune lda writes no model file yet (run lda with the chosen staleness)");
    }
    let writes = cmd.app().app_config()?.rank() == 0;
    let model = Output::create(run.output.as_deref().filter(|_| writes))?;
    let json = Output::create(run.json.as_deref().filter(|_| writes))?;
    let timeline = Output::create(cmd.tune.timeline.as_deref().filter(|_| writes))?;
    let svg = Output::create(cmd.tune.svg.as_deref().filter(|_| writes))?;
    let tuned = match &cmd.app {
        TunedApp::Dnn(r) => tune_dnn(r, &cmd.tune)?,
        TunedApp::Mf(r) => tune_mf(r, &cmd.tune)?,
        TunedApp::Lda(r) => tune_lda(r, &cmd.tune)?,
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
