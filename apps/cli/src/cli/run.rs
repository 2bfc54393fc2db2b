//! `iterstore run APP`: assembles and validates the app's parameters, opens the output
//! files, loads (or generates) the input, runs the app with progress on stderr (see
//! [`super::log`]), then prints a summary on stdout and writes `--output` and `--json`.
//!
//! [`execute`] is the part that loads and runs; the demo calls it with the commands it
//! prints, so that they reproduce it.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use iterstore::deploy::{rank_from_env, Membership, Secret, SECRET_ENV};
use iterstore::machine::Topology;
use iterstore::{Mode, Specializations};
use iterstore_apps::{AppConfig, CheckpointConfig, Input, IterRecord, RunReport};

use super::apps::{AppRun, CliApp, Runnable};
use super::log::{self, Iterations, Step};
use super::output::Output;
use super::restarts::Restarts;
use super::{ClusterOptions, JoinFrom, RunOptions};

/// Where the input of `run` comes from: `--data`, else `--synthetic` (by default small).
pub(crate) fn input(run: &RunOptions) -> Input {
    match (&run.data, &run.synthetic) {
        (Some(path), _) => Input::File(path.clone()),
        (None, Some(size)) => Input::Synthetic(size.clone()),
        (None, None) => Input::Synthetic("small".into()),
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

/// How this process joins a cluster (`--hosts` with `--rank` or a launcher's rank, or
/// `--join env`; `--secret-file` or `ITERSTORE_SECRET`); `None` without either.
fn membership(args: &ClusterOptions) -> Result<Option<Membership>> {
    let Some(hosts) = &args.hosts else {
        return match args.join {
            Some(JoinFrom::Env) => {
                let secret = secret(args, "--join env")?;
                let mut m = Membership::from_launcher_env(secret)?;
                m.connect_timeout = std::time::Duration::from_secs(args.connect_timeout);
                m.send_queue_bytes = args.send_queue;
                m.validate()?;
                Ok(Some(m))
            }
            None => Ok(None),
        };
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
    let mut m = Membership::from_hosts_file(hosts, rank, secret(args, "--hosts")?)?;
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

/// The cluster's secret for `option` (`--hosts`, `--join env`): `--secret-file`, else
/// `ITERSTORE_SECRET`.
fn secret(args: &ClusterOptions, option: &str) -> Result<Secret> {
    match &args.secret_file {
        Some(path) => Ok(Secret::from_file(path)?),
        None => Secret::from_env(SECRET_ENV).with_context(|| {
            format!("{option} needs the cluster's secret: --secret-file FILE or ITERSTORE_SECRET")
        }),
    }
}

/// The store-side settings of `run` and `cluster`, for an app whose options put its model
/// on dedicated server shards or not and whose workers wait `message_timeout` for each
/// other's messages; a synthetic topology that hwloc rejects (or a build without hwloc) is
/// an error here, before any data is read.
pub(crate) fn app_config(
    run: &RunOptions,
    cluster: &ClusterOptions,
    dedicated_servers: bool,
    message_timeout: Duration,
) -> Result<AppConfig> {
    let mut specializations = Specializations::ALL;
    specializations.numa = run.numa;
    specializations.placement = cluster.row_placement;
    let topology = match &run.topology {
        None => None,
        Some(desc) => {
            if run.mode == Mode::Generic || !run.numa {
                bail!("--topology plans the NUMA placement, which needs --mode virtual or first-iter and --numa on");
            }
            Some(Topology::synthetic(desc).with_context(|| format!("--topology {desc:?}"))?)
        }
    };
    let mut cfg = AppConfig {
        workers: run.workers,
        shards: super::shards_or_default(run.shards, run.workers, dedicated_servers),
        staleness: run.staleness,
        mode: run.mode,
        iterations: run.iters,
        specializations,
        topology,
        worker_placement: run.placement,
        pinning: run.pin,
        membership: membership(cluster)?,
        checkpoint: checkpoint_config(cluster)?,
        resume: resume_dir(cluster)?,
        resume_optional: false,
        message_timeout,
        yield_waits: run.yield_waits,
        slab_stores: run.slab_stores,
        metrics_addr: cluster.metrics_addr,
        shard_replicas: cluster.shard_replicas,
        recovery: iterstore::Recovery::new(),
    };
    restartable(&mut cfg, cluster.restarts)?;
    if cfg.membership.is_none() {
        // Before the launcher starts any process (with --hosts, the store checks it).
        let processes = Some(cluster.processes.unwrap_or(1));
        cfg.store_config().check_shard_replicas(processes)?;
    }
    Ok(cfg)
}

/// With `--restarts N` (N > 0) and a checkpoint directory, makes every attempt continue
/// from the newest complete checkpoint there, if any (see [`super::restarts`]); refuses
/// `--resume` from another directory, which a restart would not continue from.
fn restartable(cfg: &mut AppConfig, restarts: u32) -> Result<()> {
    let Some(ck) = cfg.checkpoint.as_ref().filter(|_| restarts > 0) else {
        return Ok(());
    };
    match &cfg.resume {
        Some(dir) if dir != &ck.dir => bail!(
            "--restarts continues from --checkpoint-dir {}: give --resume the same \
             directory, or start the run from {} without --restarts",
            ck.dir.display(),
            dir.display()
        ),
        // Given explicitly, it must hold a checkpoint (as without --restarts).
        Some(_) => {}
        None => {
            cfg.resume = Some(ck.dir.clone());
            cfg.resume_optional = true;
        }
    }
    Ok(())
}

/// `--checkpoint-dir D --checkpoint-every N` (clap makes each require the other).
fn checkpoint_config(args: &ClusterOptions) -> Result<Option<CheckpointConfig>> {
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
fn resume_dir(args: &ClusterOptions) -> Result<Option<PathBuf>> {
    let Some(dir) = &args.resume else {
        return Ok(None);
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(Some(dir.clone())),
        Ok(_) => bail!("--resume {}: not a directory", dir.display()),
        Err(e) => bail!("--resume {}: {e}", dir.display()),
    }
}

/// Runs `iterstore run <app>` as parsed; `command_line` goes into the JSON report.
pub fn run(app: &dyn Runnable, command_line: String) -> Result<()> {
    let started_at = super::now_rfc3339();
    let cfg = app.app_config()?;
    cfg.validate()?;
    // In a cluster, every process computes the same model: rank 0 writes the files.
    let writes = cfg.rank() == 0;
    let options = app.options();
    let model = Output::create(options.output.as_deref().filter(|_| writes))?;
    let json = Output::create(options.json.as_deref().filter(|_| writes))?;
    let mut report = app.execute(model, Progress::Shown)?;
    println!("{}", report.summary());
    if let Some(json) = json {
        report.set_provenance(
            super::VERSION,
            &command_line,
            &input(options).describe(),
            &started_at,
        );
        json.write(|w| writeln!(w, "{}", report.to_json()))?;
    }
    Ok(())
}

/// Assembles and validates app `A`'s parameters, loads or generates its input, runs it and
/// writes its output into `model` if given; returns the run's report.
pub(crate) fn execute<A: CliApp>(
    run: &AppRun<A>,
    model: Option<Output>,
    progress: Progress,
) -> Result<RunReport> {
    let cfg = run.app_config()?;
    cfg.validate()?;
    let input = input(&run.run);
    tracing::debug!(
        "{}: {} iterations on {}, mode {}, {} workers, {} shard(s)",
        A::NAME,
        cfg.iterations,
        input.describe(),
        cfg.mode.name(),
        cfg.workers,
        cfg.shards
    );
    let params = A::params(&run.args, &run.run, &cfg, &input)?;
    let loading_step = step(progress, || loading(&input, A::INPUT));
    let data = A::load(&input, &params)?;
    step_done(loading_step, || loaded(&input, A::counts(&data)));
    let mut restarts = Restarts::new(run.cluster.restarts, &cfg);
    let outcome = loop {
        let began = std::time::Instant::now();
        let mut watch = Watch::start(A::NAME, cfg.iterations, progress);
        let attempt = A::run(&cfg, &params, &data, &mut watch.observer());
        match attempt {
            Ok(outcome) => {
                watch.finish();
                break outcome;
            }
            Err(e) => {
                drop(watch);
                restarts.after_failure(e, began.elapsed())?;
            }
        }
    };
    if let Some(out) = model {
        out.write(|w| A::write_output(&outcome, &data, w))?;
    }
    let mut report = A::into_report(outcome);
    report.restarts = restarts.into_reports();
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
pub(crate) fn loading(input: &Input, kind: &str) -> String {
    match input {
        Input::File(path) => log::reading(path),
        Input::Synthetic(size) => format!("generating synthetic {size} {kind}"),
    }
}

/// What was read or generated, for the log line that ends the step.
pub(crate) fn loaded(input: &Input, counts: String) -> String {
    match input {
        Input::File(path) => format!("read {}: {counts}", path.display()),
        Input::Synthetic(size) => format!("generated synthetic {size}: {counts}"),
    }
}

/// The iteration progress of one run, and its per-iteration callback.
struct Watch(Option<Iterations>);

impl Watch {
    fn start(app: &'static str, iters: usize, progress: Progress) -> Watch {
        Watch((progress == Progress::Shown).then(|| Iterations::start(app, iters)))
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
