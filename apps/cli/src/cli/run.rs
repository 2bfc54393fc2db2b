//! `iterstore run APP`: assembles and validates the app's parameters, opens the output
//! files, loads (or generates) the input, runs the app with progress on stderr (see
//! [`super::log`]), then prints a summary on stdout and writes `--output` and `--json`.
//!
//! [`execute`] is the part that loads and runs; the demo calls it with the commands it
//! prints, so that they reproduce it.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use iterstore::{rank_from_env, Membership, Mode, Secret, Specializations, Topology, SECRET_ENV};
use iterstore_algo::dnn::{Activation, DnnConfig, Network, Partitioning};
use iterstore_algo::lda::LdaConfig;
use iterstore_algo::mf::MfConfig;
use iterstore_algo::pagerank::PageRankConfig;
use iterstore_algo::ratings_layout::RatingsPartition;
use iterstore_apps::pagerank::{GraphPartition, PageRankParams};
use iterstore_apps::{dnn, lda, mf, pagerank, AppConfig, CheckpointConfig, IterRecord, RunReport};
use iterstore_data::{
    load_corpus, load_fashion_mnist, load_graph, load_ratings, split_ratings, CorpusSpec,
    GraphSpec, ImageSpec, RatingsSpec,
};

use super::log::{self, Iterations, Step};
use super::{App, RunArgs};

/// Defaults of the MF options: LIBMF's AdaGrad step, see `iterstore_algo::mf`
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

    /// The input as a report names it: the path, or `synthetic <size>`.
    fn describe(&self) -> String {
        match self {
            Input::File(path) => path.display().to_string(),
            Input::Synthetic(size) => format!("synthetic {size}"),
        }
    }
}

/// Whether [`execute`] shows what it is doing on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    /// Loading and iteration progress as [`super::log`] draws it.
    Shown,
    /// Nothing (the demo prints its own table).
    Hidden,
}

/// A file opened for writing before the run starts, so a bad path fails early.
pub(crate) struct Output {
    path: PathBuf,
    file: BufWriter<File>,
}

impl Output {
    pub(crate) fn create(path: Option<&Path>) -> Result<Option<Output>> {
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

    pub(crate) fn write(
        mut self,
        f: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<()> {
        f(&mut self.file)
            .and_then(|()| self.file.flush())
            .with_context(|| format!("writing {}", self.path.display()))
    }
}

/// How this process joins a cluster (`--hosts`, `--rank` or a launcher's environment,
/// `--secret-file` or `ITERSTORE_SECRET`); `None` without `--hosts`.
fn membership(args: &RunArgs) -> Result<Option<Membership>> {
    let Some(hosts) = &args.hosts else {
        return Ok(None);
    };
    let rank = match args.rank {
        Some(r) => r,
        None => match rank_from_env()? {
            Some((r, _)) => r,
            None => bail!(
                "--hosts needs --rank, or a launcher's SLURM_PROCID, OMPI_COMM_WORLD_RANK or RANK"
            ),
        },
    };
    let secret = match &args.secret_file {
        Some(path) => Secret::from_file(path)?,
        None => Secret::from_env(SECRET_ENV).context(
            "--hosts needs the cluster's secret: --secret-file FILE or ITERSTORE_SECRET",
        )?,
    };
    let mut m = Membership::from_hosts_file(hosts, rank, secret)?;
    m.connect_timeout = std::time::Duration::from_secs(args.connect_timeout);
    m.send_queue_bytes = args.send_queue;
    if let Some((_, size)) = rank_from_env()? {
        if size != m.hosts.len() {
            bail!(
                "the launcher's world size is {size} but {} lists {} processes",
                hosts.display(),
                m.hosts.len()
            );
        }
    }
    m.validate()?;
    Ok(Some(m))
}

/// The store-side settings of `args`; a synthetic topology that hwloc rejects (or a build
/// without hwloc) is an error here, before any data is read.
pub(crate) fn app_config(args: &RunArgs) -> Result<AppConfig> {
    let mut specializations = Specializations::ALL;
    specializations.numa = args.numa;
    specializations.placement = args.row_placement;
    let topology = match &args.topology {
        None => None,
        Some(desc) => {
            if args.mode == Mode::Generic || !args.numa {
                bail!("--topology plans the NUMA placement, which needs --mode virtual or first-iter and --numa on");
            }
            Some(Topology::synthetic(desc).with_context(|| format!("--topology {desc:?}"))?)
        }
    };
    Ok(AppConfig {
        workers: args.workers,
        shards: super::shards_or_default(
            args.shards,
            args.workers,
            args.parameter_servers.is_some() || args.plan.is_some(),
        ),
        staleness: args.staleness,
        mode: args.mode,
        iterations: args.iters,
        specializations,
        topology,
        worker_placement: args.placement,
        membership: membership(args)?,
        checkpoint: checkpoint_config(args)?,
        resume: resume_dir(args)?,
        message_timeout: std::time::Duration::from_secs(args.message_timeout),
        yield_waits: args.yield_waits,
        slab_stores: args.slab_stores,
    })
}

/// `--checkpoint-dir D --checkpoint-every N` (clap makes each require the other).
fn checkpoint_config(args: &RunArgs) -> Result<Option<CheckpointConfig>> {
    match (&args.checkpoint_dir, args.checkpoint_every) {
        (None, None) => Ok(None),
        (Some(dir), Some(every)) if every >= 1 => Ok(Some(CheckpointConfig {
            dir: dir.clone(),
            every,
        })),
        (Some(_), Some(every)) => bail!("--checkpoint-every {every} must be at least 1"),
        (Some(_), None) => bail!("--checkpoint-dir needs --checkpoint-every N"),
        (None, Some(_)) => bail!("--checkpoint-every needs --checkpoint-dir DIR"),
    }
}

/// `--resume D`, which must be an existing directory.
fn resume_dir(args: &RunArgs) -> Result<Option<PathBuf>> {
    let Some(dir) = &args.resume else {
        return Ok(None);
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(Some(dir.clone())),
        Ok(_) => bail!("--resume {}: not a directory", dir.display()),
        Err(e) => bail!("--resume {}: {e}", dir.display()),
    }
}

/// Runs `iterstore run` with validated arguments; `command_line` goes into the JSON report.
pub fn run(args: &RunArgs, command_line: String) -> Result<()> {
    let started_at = super::now_rfc3339();
    let cfg = app_config(args)?;
    cfg.validate()?;
    // In a cluster, every process computes the same model: rank 0 writes the files.
    let writes = cfg.rank() == 0;
    let model = Output::create(args.output.as_deref().filter(|_| writes))?;
    let json = Output::create(args.json.as_deref().filter(|_| writes))?;
    let mut report = execute(args, model, Progress::Shown)?;
    println!("{}", report.summary());
    if let Some(json) = json {
        report.set_provenance(
            super::VERSION,
            &command_line,
            &Input::of(args).describe(),
            &started_at,
        );
        json.write(|w| writeln!(w, "{}", report.to_json()))?;
    }
    Ok(())
}

/// Validates the app's parameters, loads or generates the input, runs the app and writes
/// the model into `model` if given; returns the run's report.
pub(crate) fn execute(
    args: &RunArgs,
    model: Option<Output>,
    progress: Progress,
) -> Result<RunReport> {
    let cfg = app_config(args)?;
    cfg.validate()?;
    let input = Input::of(args);
    tracing::debug!(
        "{}: {} iterations on {}, mode {}, {} workers, {} shard(s)",
        args.app.name(),
        cfg.iterations,
        input.describe(),
        cfg.mode.name(),
        cfg.workers,
        cfg.shards
    );
    let report = match args.app {
        App::Mf => run_mf(args, &cfg, input, model, progress)?,
        App::Lda => run_lda(args, &cfg, input, model, progress)?,
        App::Pagerank => run_pagerank(args, &cfg, input, model, progress)?,
        App::Dnn => run_dnn(args, &cfg, input, model, progress)?,
    };
    tracing::debug!(
        "{}: setup {}, preprocess {}, init {}",
        report.app,
        log::duration(report.setup_s),
        log::duration(report.preprocess_s),
        log::duration(report.init_s)
    );
    Ok(report)
}

/// A step of [`execute`]: shown as [`Step`] unless progress is hidden.
fn step(progress: Progress, what: impl FnOnce() -> String) -> Option<Step> {
    (progress == Progress::Shown).then(|| Step::start(&what()))
}

/// Ends `step` with `what` it produced.
fn step_done(step: Option<Step>, what: impl FnOnce() -> String) {
    if let Some(step) = step {
        step.done(&what());
    }
}

/// What reading or generating `input` is called in the log.
fn loading(input: &Input, kind: &str) -> String {
    match input {
        Input::File(path) => log::reading(path),
        Input::Synthetic(size) => format!("generating synthetic {size} {kind}"),
    }
}

/// What was read or generated, for the log line that ends the step.
fn loaded(input: &Input, counts: String) -> String {
    match input {
        Input::File(path) => format!("read {}: {counts}", path.display()),
        Input::Synthetic(size) => format!("generated synthetic {size}: {counts}"),
    }
}

/// The iteration progress of one run, and its per-iteration callback.
struct Watch(Option<Iterations>);

impl Watch {
    fn start(app: App, iters: usize, progress: Progress) -> Watch {
        Watch((progress == Progress::Shown).then(|| Iterations::start(app.name(), iters)))
    }

    fn observer(&mut self) -> impl FnMut(&IterRecord) + '_ {
        move |r: &IterRecord| {
            if let Some(it) = &mut self.0 {
                it.observe(r);
            }
        }
    }

    fn finish(self) {
        if let Some(it) = self.0 {
            it.finish();
        }
    }
}

fn run_mf(
    args: &RunArgs,
    cfg: &AppConfig,
    input: Input,
    out: Option<Output>,
    progress: Progress,
) -> Result<RunReport> {
    let params = MfConfig {
        rank: args.factors.unwrap_or(MF_RANK),
        learning_rate: args.lr.unwrap_or(MF_LR),
        regularization: args.reg.unwrap_or(MF_REG),
        init_scale: args.init_scale.unwrap_or(MF_INIT_SCALE),
        seed: args.seed,
        partition: match args.partition.as_deref() {
            None => RatingsPartition::default(),
            Some("ratings") => RatingsPartition::Ratings,
            Some("strata") => RatingsPartition::Strata,
            Some(other) => {
                bail!("--partition {other}: mf splits its ratings by `ratings` or `strata`")
            }
        },
    };
    params.validate().map_err(anyhow::Error::msg)?;
    let test_fraction = args.test_fraction.unwrap_or(MF_TEST_FRACTION);
    if !(0.0..1.0).contains(&test_fraction) {
        bail!("--test-fraction {test_fraction} must be in [0, 1)");
    }
    let loading_step = step(progress, || loading(&input, "ratings"));
    let ratings = match &input {
        Input::File(path) => load_ratings(path)?,
        Input::Synthetic(size) => RatingsSpec::preset(size)
            .map_err(anyhow::Error::msg)?
            .generate(),
    };
    step_done(loading_step, || {
        let counts = format!(
            "{} ratings, {} users, {} items",
            ratings.ratings.len(),
            ratings.num_users,
            ratings.num_items
        );
        loaded(&input, counts)
    });
    let (train, test) = split_ratings(&ratings, test_fraction, args.seed);
    drop(ratings);
    let mut watch = Watch::start(App::Mf, cfg.iterations, progress);
    let outcome = mf::run_observed(cfg, &params, &train, &test.ratings, &mut watch.observer())?;
    watch.finish();
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
    progress: Progress,
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
        sampler: args.sampler.unwrap_or(defaults.sampler),
    };
    params.validate().map_err(anyhow::Error::msg)?;
    let loading_step = step(progress, || loading(&input, "corpus"));
    let corpus = match (&input, spec) {
        (Input::File(path), _) => load_corpus(path)?,
        (Input::Synthetic(_), Some(spec)) => spec.generate().0,
        (Input::Synthetic(_), None) => unreachable!("a synthetic input has a spec"),
    };
    step_done(loading_step, || {
        let tokens: usize = corpus.docs.iter().map(Vec::len).sum();
        let counts = format!(
            "{} documents, {} words, {tokens} tokens",
            corpus.docs.len(),
            corpus.vocab_size
        );
        loaded(&input, counts)
    });
    let mut watch = Watch::start(App::Lda, cfg.iterations, progress);
    let outcome = lda::run_observed(cfg, &params, &corpus, &mut watch.observer())?;
    watch.finish();
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
    progress: Progress,
) -> Result<RunReport> {
    let defaults = PageRankParams::default();
    let params = PageRankParams {
        config: PageRankConfig {
            damping: args.damping.unwrap_or(defaults.config.damping),
        },
        block: args.block.unwrap_or(defaults.block),
        partition: match args.partition.as_deref() {
            None => defaults.partition,
            Some(name) => {
                GraphPartition::parse(name).map_err(|e| anyhow::anyhow!("--partition {e}"))?
            }
        },
    };
    params.validate().map_err(anyhow::Error::msg)?;
    let loading_step = step(progress, || loading(&input, "graph"));
    let (graph, labels) = match &input {
        Input::File(path) => {
            let labeled = load_graph(path)?;
            (labeled.graph, Some(labeled.labels))
        }
        Input::Synthetic(size) => {
            let spec = GraphSpec::preset(size).map_err(anyhow::Error::msg)?;
            (spec.generate(), None)
        }
    };
    step_done(loading_step, || {
        let counts = format!(
            "{} vertices, {} edges",
            graph.num_vertices,
            graph.edges.len()
        );
        loaded(&input, counts)
    });
    let mut watch = Watch::start(App::Pagerank, cfg.iterations, progress);
    let outcome = pagerank::run_observed(cfg, &params, &graph, &mut watch.observer())?;
    watch.finish();
    if let Some(out) = out {
        out.write(|w| outcome.write_ranks(labels.as_deref(), w))?;
    }
    Ok(outcome.report)
}

/// The DNN's network from `--model` (`true`: the CNN) and its hyper-parameters from
/// `args` (`--hidden`, `--activation`, `--channels`, `--kernel`, `--lr`, `--lr-decay`,
/// `--momentum`, `--batch`, `--seed`), the defaults being the network's.
fn dnn_config(args: &RunArgs) -> Result<(bool, DnnConfig)> {
    let cnn = match args.model.as_deref() {
        None | Some("mlp") => false,
        Some("cnn") => true,
        Some(other) => bail!("--model {other}: dnn trains `mlp` or `cnn`"),
    };
    if !cnn && (args.channels.is_some() || args.kernel.is_some()) {
        bail!("--channels and --kernel shape the CNN: give them with --model cnn");
    }
    let defaults = if cnn {
        DnnConfig::cnn()
    } else {
        DnnConfig::default()
    };
    let params = DnnConfig {
        hidden: args.hidden.clone().unwrap_or(defaults.hidden),
        channels: args.channels.clone().unwrap_or(defaults.channels),
        kernel: args.kernel.unwrap_or(defaults.kernel),
        activation: match args.activation.as_deref() {
            None => defaults.activation,
            Some(a) => a
                .parse::<Activation>()
                .map_err(|e| anyhow::anyhow!("--activation {a}: {e}"))?,
        },
        learning_rate: args.lr.unwrap_or(defaults.learning_rate),
        lr_decay: args.lr_decay.unwrap_or(defaults.lr_decay),
        momentum: args.momentum.unwrap_or(defaults.momentum),
        batch: args.batch.unwrap_or(defaults.batch),
        seed: args.seed,
    };
    params.validate().map_err(anyhow::Error::msg)?;
    Ok((cnn, params))
}

/// The partitioning `--plan` or `--replicas`/`--partitions`/`--replications`/`--n-read`/
/// `--n-write` ask for, if any.
fn dnn_partitioning(
    args: &RunArgs,
    cfg: &AppConfig,
    cnn: bool,
    params: &DnnConfig,
) -> Result<Option<Partitioning>> {
    let by_hand = args.replicas.is_some()
        || args.replica_workers.is_some()
        || args.parameter_servers.is_some()
        || args.partitions.is_some()
        || args.replications.is_some()
        || args.n_read.is_some()
        || args.n_write.is_some();
    // One value per layer of the performance model's description: the CNN's poolings
    // count (they are split by channels like the convolution below them).
    let names = if cnn {
        iterstore_algo::dnn::stack::cnn_names(params.channels.len(), params.hidden.len())
    } else {
        (0..=params.hidden.len()).map(|l| format!("l{l}")).collect()
    };
    let layers = names.len();
    if let Some(path) = &args.plan {
        let plan = iterstore_perf::Plan::load(path).map_err(anyhow::Error::msg)?;
        let asked = Partitioning::from_plan(&plan);
        if asked.partitions.len() != layers {
            bail!(
                "--plan {}: planned for {} ({} layers), but this network has {layers} layers ({})",
                path.display(),
                plan.network,
                plan.layers.len(),
                names.join(","),
            );
        }
        if plan.layers.iter().any(|l| l.threads > 1) {
            tracing::info!(
                "--plan {}: each segment copy runs on its worker's one thread; the plan's threads per layer (H) are not applied",
                path.display()
            );
        }
        return Ok(Some(asked));
    }
    if !by_hand {
        return Ok(None);
    }
    let per_layer = |given: &Option<Vec<usize>>, flag: &str| -> Result<Vec<usize>> {
        match given {
            None => Ok(vec![1; layers]),
            Some(v) if v.len() == layers => Ok(v.clone()),
            Some(v) => bail!(
                "{flag}: {} values for the network's {layers} layers ({})",
                v.len(),
                names.join(",")
            ),
        }
    };
    let processes = cfg.membership.as_ref().map_or(1, |m| m.hosts.len());
    let total = cfg.workers * processes;
    let replicas = args.replicas.unwrap_or_else(|| match args.replica_workers {
        Some(n) => (total / n).max(1),
        None => total,
    });
    Ok(Some(Partitioning {
        replicas,
        partitions: per_layer(&args.partitions, "--partitions")?,
        replications: per_layer(&args.replications, "--replications")?,
        n_read: args.n_read.unwrap_or(0),
        n_write: args.n_write.unwrap_or(0),
        replica_workers: args.replica_workers,
        parameter_servers: args.parameter_servers,
    }))
}

fn run_dnn(
    args: &RunArgs,
    cfg: &AppConfig,
    input: Input,
    out: Option<Output>,
    progress: Progress,
) -> Result<RunReport> {
    let (cnn, params) = dnn_config(args)?;
    let partitioning = dnn_partitioning(args, cfg, cnn, &params)?;
    let loading_step = step(progress, || loading(&input, "images"));
    let data = match &input {
        Input::File(path) => load_fashion_mnist(path)?,
        Input::Synthetic(size) => ImageSpec::preset(size)
            .map_err(anyhow::Error::msg)?
            .generate(),
    };
    step_done(loading_step, || {
        let counts = format!(
            "{} training and {} test images of {} x {} pixels, {} classes",
            data.train.len(),
            data.test.len(),
            data.train.rows,
            data.train.cols,
            data.classes
        );
        loaded(&input, counts)
    });
    let mut watch = Watch::start(App::Dnn, cfg.iterations, progress);
    let asked = partitioning.as_ref();
    if cnn {
        let outcome =
            dnn::run_cnn_partitioned_observed(cfg, &params, &data, asked, &mut watch.observer());
        dnn_written(outcome?, watch, out)
    } else {
        let outcome =
            dnn::run_partitioned_observed(cfg, &params, &data, asked, &mut watch.observer());
        dnn_written(outcome?, watch, out)
    }
}

/// Ends a DNN run: the progress closed, the model written to `out` if asked.
fn dnn_written<N: Network>(
    outcome: dnn::DnnOutcome<N>,
    watch: Watch,
    out: Option<Output>,
) -> Result<RunReport> {
    watch.finish();
    if let Some(out) = out {
        out.write(|w| outcome.write_model(w))?;
    }
    Ok(outcome.report)
}
