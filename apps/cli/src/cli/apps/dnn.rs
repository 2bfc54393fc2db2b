//! `iterstore run dnn`: the DNN's options (its network, hyper-parameters and
//! partitioning), its benchmark workload and its row of the demo.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;
use iterstore_algo::dnn::{Activation, DnnConfig, Partitioning, ServerRule, Straggler};
use iterstore_apps::dnn::DnnParams;
use iterstore_apps::{App, AppConfig, Dnn, Input};
use iterstore_bench::Workload;

use super::{check_benched, CliApp};
use crate::cli::bench::SEED;
use crate::cli::{at_least_one, BenchArgs, RunOptions};

/// Options of `iterstore run dnn`.
#[derive(Debug, Args)]
pub struct DnnArgs {
    /// The network, `mlp` (fully connected hidden layers, softmax output) or `cnn`
    /// (convolutions, each with a 2x2 max pooling, then fully connected hidden layers,
    /// softmax output) [default: mlp].
    #[arg(long, value_name = "M", help_heading = "DNN options")]
    pub model: Option<String>,
    /// Neurons of each hidden layer, comma-separated [default: 512,256; cnn: 128].
    #[arg(long, value_name = "N,..", value_delimiter = ',', help_heading = "DNN options",
          value_parser = at_least_one)]
    pub hidden: Option<Vec<usize>>,
    /// The hidden layers' activation, relu or logistic [default: relu].
    #[arg(long, value_name = "F", help_heading = "DNN options")]
    pub activation: Option<String>,
    /// With --model cnn: output channels of each convolution, comma-separated
    /// [default: 16,32].
    #[arg(long, value_name = "C,..", value_delimiter = ',', help_heading = "DNN options",
          value_parser = at_least_one)]
    pub channels: Option<Vec<usize>>,
    /// With --model cnn: convolution kernel width and height [default: 5].
    #[arg(long, value_name = "K", help_heading = "DNN options", value_parser = at_least_one)]
    pub kernel: Option<usize>,
    /// The SGD step on the mini-batch's mean gradient in the first epoch [default: 0.05].
    #[arg(long, help_heading = "DNN options")]
    pub lr: Option<f32>,
    /// The step of epoch e (from 0) is --lr / (1 + D e); 0 keeps it constant
    /// [default: 0.5].
    #[arg(long, value_name = "D", help_heading = "DNN options")]
    pub lr_decay: Option<f32>,
    /// Momentum μ: each worker UPDATEs its velocity v = μ v + step (under BSP the
    /// same as momentum on the whole mini-batch) [default: 0.9].
    #[arg(long, value_name = "MU", help_heading = "DNN options")]
    pub momentum: Option<f32>,
    /// Let the parameter servers step the weights: sgd, momentum (with --momentum),
    /// adagrad, rmsprop or adam, at --lr decayed by --lr-decay; the workers UPDATE
    /// gradients and keep no velocity. With --replicas, --n-read, --n-write and
    /// --staleness unbounded this is DistBelief's Downpour SGD (adagrad) [default: the
    /// workers step, with momentum].
    #[arg(long, value_name = "R", help_heading = "DNN options")]
    pub server_rule: Option<String>,
    /// End an epoch once this fraction of the model replicas have finished their share
    /// (Project Adam's 75 %: 0.75); the others stop where they are and take their
    /// unprocessed samples first into their next epoch. Needs --staleness unbounded
    /// and two replicas or more [default: every replica finishes].
    #[arg(long, value_name = "F", help_heading = "DNN options")]
    pub epoch_quorum: Option<f32>,
    /// Project Adam's layer updates (with --server-rule, the MLP): send each fully
    /// connected layer's error terms and inputs instead of its gradient; the layer's
    /// shards multiply them out (k(M+N) values for k samples instead of MN).
    #[arg(long, help_heading = "DNN options")]
    pub layer_updates: bool,
    /// DistBelief's warm start: replica 0 alone trains N mini-batches of its share
    /// (reading and writing every one) before the other replicas join [default: 0].
    #[arg(long, value_name = "N", help_heading = "DNN options")]
    pub warm_start: Option<usize>,
    /// Make global worker W sleep MS milliseconds before each of its mini-batches (a
    /// straggler on purpose, to see --epoch-quorum at work without a CPU quota).
    #[arg(long, value_name = "W:MS", help_heading = "DNN options")]
    pub straggler: Option<String>,
    /// Samples per mini-batch over all workers; each mini-batch ends in a CLOCK
    /// [default: 64].
    #[arg(long, value_name = "B", help_heading = "DNN options", value_parser = at_least_one)]
    pub batch: Option<usize>,

    /// Seconds a worker waits for another worker's activations or error terms (a
    /// partitioned replica) before it fails naming the sender.
    #[arg(long, value_name = "S", default_value_t = 120, help_heading = "DNN options",
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub message_timeout: u64,
    /// Train the network as the optimizer's plan FILE says (`iterstore plan --output`,
    /// for the same --model): its model replicas, each layer's partitions and
    /// replications, N_read and N_write. The cluster must have the plan's N_mr x N_wr
    /// workers (--processes x --workers).
    #[arg(long, value_name = "FILE", help_heading = "DNN options",
          conflicts_with_all = ["replicas", "partitions", "replications", "n_read", "n_write",
                                "replica_workers", "parameter_servers"])]
    pub plan: Option<PathBuf>,
    /// Model replicas (N_mr); the workers split evenly into them [default: one per
    /// worker: data parallelism].
    #[arg(long, value_name = "N", help_heading = "DNN options", value_parser = at_least_one)]
    pub replicas: Option<usize>,
    /// Workers per replica (N_wr); the replicas take the first --replicas x N_wr
    /// workers and the others stay idle [default: the workers divided evenly].
    #[arg(long, value_name = "N", help_heading = "DNN options", value_parser = at_least_one)]
    pub replica_workers: Option<usize>,
    /// Keep the weights on the cluster's last N shards (N_ps parameter servers; with
    /// --processes and one shard per process, the last N processes, whose workers should
    /// then be idle: see --replica-workers) [default: every shard].
    #[arg(long, value_name = "N", help_heading = "DNN options", value_parser = at_least_one)]
    pub parameter_servers: Option<usize>,
    /// Segments of each layer within a replica (P(l)), comma-separated, input side
    /// first: the MLP's weight layers; the CNN's convolutions (split by kernels), poolings
    /// (by channels) and fully connected layers, e.g. 6 values for conv,pool,conv,pool,fc,out
    /// [default: 1 each].
    #[arg(long, value_name = "P,..", value_delimiter = ',', help_heading = "DNN options",
          value_parser = at_least_one)]
    pub partitions: Option<Vec<usize>>,
    /// Copies of each layer's segments within a replica (R(l)), each on its own
    /// worker and its own share of the mini-batch; the layers as --partitions counts them
    /// [default: 1 each].
    #[arg(long, value_name = "R,..", value_delimiter = ',', help_heading = "DNN options",
          value_parser = at_least_one)]
    pub replications: Option<Vec<usize>>,
    /// A replica reads the weights every S samples (N_read) [default: every
    /// mini-batch].
    #[arg(long, value_name = "S", help_heading = "DNN options", value_parser = at_least_one)]
    pub n_read: Option<usize>,
    /// A replica writes its accumulated steps every S samples (N_write) [default:
    /// every mini-batch].
    #[arg(long, value_name = "S", help_heading = "DNN options", value_parser = at_least_one)]
    pub n_write: Option<usize>,
}

impl CliApp for Dnn {
    type Args = DnnArgs;
    const BENCHED_BY_DEFAULT: bool = false;

    fn params(args: &DnnArgs, run: &RunOptions, cfg: &AppConfig, _: &Input) -> Result<DnnParams> {
        let (cnn, config) = dnn_config(args, run.seed)?;
        let partitioning = dnn_partitioning(args, cfg, cnn, &config)?;
        Ok(DnnParams {
            cnn,
            config,
            partitioning,
        })
    }

    fn outside_clocks(args: &DnnArgs) -> Option<&'static str> {
        (args.server_rule.is_some())
            .then_some("--server-rule sets the initial weights with set_rows, not a clock")
    }

    fn dedicated_servers(args: &DnnArgs) -> bool {
        args.parameter_servers.is_some() || args.plan.is_some()
    }

    fn message_timeout(args: &DnnArgs) -> Duration {
        Duration::from_secs(args.message_timeout)
    }

    fn bench_input(args: &BenchArgs) -> Option<&PathBuf> {
        args.dnn_data.as_ref()
    }

    fn check_bench(args: &BenchArgs, benched: bool) -> Result<()> {
        check_benched("--dnn-model", args.dnn_model.is_some(), Dnn::NAME, benched)?;
        if let Some(dir) = &args.dnn_data {
            check_benched("--dnn-data", true, Dnn::NAME, benched)?;
            if !dir.is_dir() {
                bail!(
                    "--dnn-data {}: not a directory (it names the directory of Fashion-MNIST's \
                     IDX files: tools/fetch-data fashion-mnist)",
                    dir.display()
                );
            }
        }
        Ok(())
    }

    /// `iterstore run dnn`'s defaults for the network `--dnn-model` names, seeded like the
    /// rest of the benchmark; the peer reads the IDX files the images were read from
    /// (generated images are written into its work directory).
    fn bench_workload(args: &BenchArgs, input: &Input) -> Result<Workload> {
        let cnn = args.dnn_model.as_deref() == Some("cnn");
        let defaults = if cnn {
            DnnConfig::cnn()
        } else {
            DnnConfig::default()
        };
        let params = DnnParams {
            cnn,
            config: DnnConfig {
                seed: SEED,
                ..defaults
            },
            partitioning: None,
        };
        let data = Dnn::load(input, &params)?;
        Ok(Workload::Dnn {
            data,
            params: params.config,
            cnn,
            idx_dir: match input {
                Input::File(dir) => Some(dir.clone()),
                Input::Synthetic(_) => None,
            },
        })
    }
}

/// The DNN's network from `--model` (`true`: the CNN) and its hyper-parameters from
/// `args` (`--hidden`, `--activation`, `--channels`, `--kernel`, `--lr`, `--lr-decay`,
/// `--momentum`, `--server-rule`, `--epoch-quorum`, `--layer-updates`, `--warm-start`, `--straggler`, `--batch`) and `seed`, the defaults being the network's.
fn dnn_config(args: &DnnArgs, seed: u64) -> Result<(bool, DnnConfig)> {
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
    let server_rule = match args.server_rule.as_deref() {
        None => None,
        Some(r) => Some(
            r.parse::<ServerRule>()
                .map_err(|e| anyhow::anyhow!("--server-rule: {e}"))?,
        ),
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
        momentum: match (args.momentum, server_rule) {
            (Some(m), _) => m,
            // The workers keep no velocity when the servers step (but momentum's does).
            (None, Some(r)) if r != ServerRule::Momentum => 0.0,
            (None, _) => defaults.momentum,
        },
        batch: args.batch.unwrap_or(defaults.batch),
        seed,
        server_rule,
        epoch_quorum: args.epoch_quorum,
        layer_updates: args.layer_updates,
        warm_start: args.warm_start.unwrap_or(0),
        straggler: match args.straggler.as_deref() {
            None => None,
            Some(s) => Some(
                s.parse::<Straggler>()
                    .map_err(|e| anyhow::anyhow!("--straggler {e}"))?,
            ),
        },
    };
    params.validate().map_err(anyhow::Error::msg)?;
    Ok((cnn, params))
}

/// The partitioning `--plan` or `--replicas`/`--partitions`/`--replications`/`--n-read`/
/// `--n-write` ask for, if any.
fn dnn_partitioning(
    args: &DnnArgs,
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
