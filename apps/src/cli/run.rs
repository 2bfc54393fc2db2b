//! `iterstore run APP`: assembles and validates the app's parameters, opens the output
//! files, loads (or generates) the input, runs the app with a per-iteration progress bar on
//! stderr, then prints a summary on stdout and writes `--output` and `--json`.

use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use iterstore_apps::algo::lda::LdaConfig;
use iterstore_apps::algo::mf::MfConfig;
use iterstore_apps::algo::pagerank::PageRankConfig;
use iterstore_apps::apps::pagerank::PageRankParams;
use iterstore_apps::apps::{lda, mf, pagerank, AppConfig, IterRecord, RunReport};
use iterstore_apps::data::{
    load_corpus, load_graph, load_ratings, split_ratings, CorpusSpec, GraphSpec, RatingsSpec,
};

use super::{App, RunArgs};

/// Defaults of the MF options: LIBMF's AdaGrad step, see `iterstore_apps::algo::mf`
/// (these are also `MfConfig::default()`).
pub(crate) const MF_RANK: usize = 16;
pub(crate) const MF_LR: f32 = 0.1;
pub(crate) const MF_REG: f32 = 0.05;
pub(crate) const MF_INIT_SCALE: f32 = 0.1;
pub(crate) const MF_TEST_FRACTION: f64 = 0.1;
/// Topics when the input is a file (synthetic input uses its planted count).
const LDA_TOPICS: usize = 100;

/// Where the input comes from.
enum Input {
    File(PathBuf),
    Synthetic(String),
}

impl Input {
    fn of(args: &RunArgs) -> Self {
        match (&args.data, &args.synthetic) {
            (Some(path), _) => Input::File(path.clone()),
            (None, Some(size)) => Input::Synthetic(size.clone()),
            (None, None) => Input::Synthetic("small".into()),
        }
    }
}

/// A file opened for writing before the run starts, so a bad path fails early.
struct Output {
    path: PathBuf,
    file: BufWriter<File>,
}

impl Output {
    fn create(path: Option<&Path>) -> Result<Option<Output>> {
        path.map(|path| {
            let file =
                File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
            Ok(Output {
                path: path.to_path_buf(),
                file: BufWriter::new(file),
            })
        })
        .transpose()
    }

    fn write(mut self, f: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
        f(&mut self.file)
            .and_then(|()| self.file.flush())
            .with_context(|| format!("writing {}", self.path.display()))
    }
}

/// Runs `iterstore run` with validated arguments.
pub fn run(args: &RunArgs) -> Result<()> {
    let cfg = AppConfig {
        workers: args.workers,
        shards: args.shards,
        staleness: args.staleness,
        mode: args.mode,
        iterations: args.iters,
        ..AppConfig::default()
    };
    cfg.validate()?;
    let input = Input::of(args);
    let model = Output::create(args.output.as_deref())?;
    let json = Output::create(args.json.as_deref())?;
    let report = match args.app {
        App::Mf => run_mf(args, &cfg, input, model)?,
        App::Lda => run_lda(args, &cfg, input, model)?,
        App::Pagerank => run_pagerank(args, &cfg, input, model)?,
    };
    println!("{}", report.summary());
    if let Some(json) = json {
        json.write(|w| writeln!(w, "{}", report.to_json()))?;
    }
    Ok(())
}

fn run_mf(args: &RunArgs, cfg: &AppConfig, input: Input, out: Option<Output>) -> Result<RunReport> {
    let params = MfConfig {
        rank: args.rank.unwrap_or(MF_RANK),
        learning_rate: args.lr.unwrap_or(MF_LR),
        regularization: args.reg.unwrap_or(MF_REG),
        init_scale: args.init_scale.unwrap_or(MF_INIT_SCALE),
        seed: args.seed,
    };
    params.validate().map_err(anyhow::Error::msg)?;
    let test_fraction = args.test_fraction.unwrap_or(MF_TEST_FRACTION);
    if !(0.0..1.0).contains(&test_fraction) {
        bail!("--test-fraction {test_fraction} must be in [0, 1)");
    }
    let ratings = match input {
        Input::File(path) => load_ratings(&path)?,
        Input::Synthetic(size) => RatingsSpec::preset(&size)
            .map_err(anyhow::Error::msg)?
            .generate(),
    };
    let (train, test) = split_ratings(&ratings, test_fraction, args.seed);
    drop(ratings);
    let bar = progress_bar("mf", cfg.iterations);
    let outcome = mf::run_observed(cfg, &params, &train, &test.ratings, &mut observer(&bar))?;
    bar.finish_and_clear();
    if let Some(out) = out {
        out.write(|w| outcome.write_model(w))?;
    }
    Ok(outcome.report)
}

fn run_lda(
    args: &RunArgs,
    cfg: &AppConfig,
    input: Input,
    out: Option<Output>,
) -> Result<RunReport> {
    let spec = match &input {
        Input::Synthetic(size) => Some(CorpusSpec::preset(size).map_err(anyhow::Error::msg)?),
        Input::File(_) => None,
    };
    let planted = spec.as_ref().map(|s| s.num_topics as usize);
    let defaults = LdaConfig::default();
    let params = LdaConfig {
        topics: args.topics.or(planted).unwrap_or(LDA_TOPICS),
        alpha: args.alpha.unwrap_or(defaults.alpha),
        beta: args.beta.unwrap_or(defaults.beta),
        seed: args.seed,
    };
    params.validate().map_err(anyhow::Error::msg)?;
    let corpus = match (input, spec) {
        (Input::File(path), _) => load_corpus(&path)?,
        (Input::Synthetic(_), Some(spec)) => spec.generate().0,
        (Input::Synthetic(_), None) => unreachable!("a synthetic input has a spec"),
    };
    let bar = progress_bar("lda", cfg.iterations);
    let outcome = lda::run_observed(cfg, &params, &corpus, &mut observer(&bar))?;
    bar.finish_and_clear();
    if let Some(out) = out {
        out.write(|w| outcome.write_model(w))?;
    }
    Ok(outcome.report)
}

fn run_pagerank(
    args: &RunArgs,
    cfg: &AppConfig,
    input: Input,
    out: Option<Output>,
) -> Result<RunReport> {
    let defaults = PageRankParams::default();
    let params = PageRankParams {
        config: PageRankConfig {
            damping: args.damping.unwrap_or(defaults.config.damping),
        },
        block: args.block.unwrap_or(defaults.block),
    };
    params.validate().map_err(anyhow::Error::msg)?;
    let (graph, labels) = match input {
        Input::File(path) => {
            let labeled = load_graph(&path)?;
            (labeled.graph, Some(labeled.labels))
        }
        Input::Synthetic(size) => {
            let spec = GraphSpec::preset(&size).map_err(anyhow::Error::msg)?;
            (spec.generate(), None)
        }
    };
    let bar = progress_bar("pagerank", cfg.iterations);
    let outcome = pagerank::run_observed(cfg, &params, &graph, &mut observer(&bar))?;
    bar.finish_and_clear();
    if let Some(out) = out {
        out.write(|w| outcome.write_ranks(labels.as_deref(), w))?;
    }
    Ok(outcome.report)
}

/// A bar of `iters` steps on stderr, hidden when stderr is not a terminal.
fn progress_bar(app: &str, iters: usize) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(iters as u64);
    let style = ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg}")
        .expect("the template is valid")
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_prefix(app.to_string());
    bar.set_message("setting up (virtual iteration, initialisation)");
    bar
}

/// Advances `bar` with each iteration's time and objective.
fn observer(bar: &ProgressBar) -> impl FnMut(&IterRecord) + '_ {
    move |r: &IterRecord| {
        bar.set_message(format!(
            "iteration {} took {:.3} s, objective {:.6}",
            r.iter, r.seconds, r.objective
        ));
        bar.inc(1);
    }
}
