//! The command line: argument definitions (clap derive), their validation, and dispatch to
//! [`run`], [`demo`], [`bench`](mod@bench) and [`plan`]; [`log`] is what they tell a person on stderr.
//! [`apps`] is the registry of the apps `iterstore` runs: `run` has one subcommand per app,
//! with the options every app takes ([`RunOptions`], [`ClusterOptions`]) around the app's
//! own, and `run`, `demo` and `bench` reach an app through its entry.
//!
//! Every option is checked before any data is loaded or any thread started: numbers are
//! range-checked by their parsers, an option of another app is not one of the
//! subcommand's (clap rejects it), and the apps' own `validate` methods run on the
//! assembled parameters.

mod apps;
mod bench;
mod calibrate;
mod cgroup;
mod demo;
mod launch;
mod log;
mod output;
mod plan;
mod restarts;
mod run;
mod tune;
mod validate;

use std::path::PathBuf;

use anyhow::Result;
use clap::{ArgAction, Args, Parser, Subcommand};
use iterstore::machine::{Pinning, WorkerPlacement};
use iterstore::{Mode, SlabStores, Staleness};
use iterstore_algo::lda::SamplerKind;
use iterstore_apps::pagerank::GraphPartition;
use iterstore_data::synth::SIZES;

/// What `--output` writes, shown in `iterstore run --help` and each app's.
pub(crate) const OUTPUT_FORMATS: &str = "\
Output formats (--output FILE):
  pagerank  one `label<TAB>rank` line per vertex, labels as in the input file, sorted by
            label (numeric labels numerically, before any others).
  mf        `# iterstore mf model: rank=K users=U items=I`, a line `# mean=M; prediction =
            mean + bias_u + bias_i + f_u·f_i`, then one line per user
            `u<TAB>id<TAB>f_1<TAB>...<TAB>f_K<TAB>bias`, then one per item
            `i<TAB>id<TAB>f_1...<TAB>bias`; ids are the dense ids the loader assigned
            (order of first appearance).
  lda       `# iterstore lda model: topics=K vocab=V`, a line `totals<TAB>n_0...n_{K-1}`,
            then one line `word<TAB>n_w0<TAB>...<TAB>n_w{K-1}` per word id 0..V.
  dnn       `# iterstore dnn model: mlp sizes=784-256-10 activation=relu`, then one line
            per output neuron `layer<TAB>row<TAB>w_1<TAB>...<TAB>w_n<TAB>bias`.

--json FILE writes one object: iterstore_version, command_line, input, started_at, app,
mode, workers (per process), processes, staleness, setup_s, preprocess_s (virtual
iteration), init_s, iterations [{iter, seconds, objective[, test_rmse], rss_bytes,
bytes_sent, messages_sent (network traffic of the iteration's run, summed over the
processes; 0 in one process)}], dataset sizes, params, the
gathered access pattern's size, store (accesses by path: tape_accesses, indexed_accesses,
unplanned_accesses; tape_truncated; row_fetches, arena_refreshes, clock_refreshes; whole_ and
partial_chunk_refreshes, whole_ and partial_slabs (what refreshes and CLOCKs shipped:
everything, or only what changed); streamed_slabs (slabs written with streaming stores,
`--slab-stores`); lent_read_updates and copied_read_updates (read_updates served on the
fast path, rows lent, or through the general path); local_chunk_refreshes (refreshes its own shards wrote
into its arena directly); this process's
bytes_sent, bytes_received, frames_sent, frames_received; send_waits (sends that waited
for a slow peer to read) and peak_queued_bytes (most bytes queued for one peer)), traffic
(this process's
messages and bytes sent and received by kind of protocol message) and memory
(peak_rss_bytes, steady_rss_bytes, special: the specialized state's bytes by part) and
numa (topology, bound, each worker's planned core and CPUs, shard and comm zones, bytes
per zone, arena bytes bound, remote_fraction and baseline_remote_fraction; null in
generic mode or with --numa off), checkpoints, resumed (the checkpoint and iteration the
run continued from) and restarts (--restarts: per restart the lost rank, the error,
resumed_from_clock, seconds the failed attempt ran and backoff_s); dnn adds test_accuracy (after the last epoch) and
test_accuracy_per_iteration, its objective being the epoch's mean training cross-entropy,
and with --epoch-quorum epoch_quorum (fraction, replicas_needed, and per epoch
processed_samples, cut_replicas, carried_samples; cut_epochs, total_carried_samples).

Progress goes to stderr: a bar on a terminal, else one timestamped line per iteration
(-q: warnings and errors only; -v: more).";

/// `iterstore`: a parameter server for iterative ML that specializes itself to the
/// application's repeating access pattern.
#[derive(Debug, Parser)]
#[command(name = "iterstore", version, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Print only warnings and errors on stderr (no progress).
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Print more on stderr: -v debug lines, -vv trace lines. Progress is a bar on a
    /// terminal and one timestamped line per iteration otherwise.
    #[arg(short, long, global = true, action = ArgAction::Count)]
    pub verbose: u8,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one app (MF, LDA, PageRank or a DNN) on the parameter server.
    Run(apps::RunCommand),
    /// Run all three apps quickly on tiny synthetic data (virtual mode, 2 workers).
    Demo,
    /// Benchmark the store modes: every app in generic, first-iter and virtual mode and
    /// each ablation, against the limit and the peers; writes JSON, Markdown and SVG charts.
    Bench(Box<BenchArgs>),
    /// Plan distributed DNN training: search the configurations of a cluster with the
    /// performance model (Yan et al., KDD'15), print the fastest and write the chosen plan.
    Plan(Box<PlanArgs>),
    /// Measure this machine's hardware profile for the performance model (the dense
    /// kernels' costs, their slow-down on H threads, and the latency and bandwidth of the
    /// store's TCP transport on 127.0.0.1) and write it for `iterstore plan --profile`.
    Calibrate(CalibrateArgs),
    /// Train an app without choosing its learning rate (MLtuner): branches of the training
    /// state, each trained briefly with a setting a searcher proposes, the fastest kept,
    /// searched again when validation stalls.
    Tune(Box<tune::TuneCommand>),
}

/// Options of `iterstore calibrate`.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Write the profile (JSON) to FILE.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The profile's name.
    #[arg(long, default_value = "this-machine")]
    pub name: String,
    /// Measure C_interf(H) up to H threads [default: the CPUs available].
    #[arg(long, value_name = "H", value_parser = at_least_one)]
    pub threads: Option<usize>,
    /// Where the parameter-server read time lies between its best (0) and worst (1) case
    /// (eqs. 10-11); a stated parameter, not measured.
    #[arg(long, default_value_t = 0.5, value_parser = parse_unit)]
    pub ps_read_alpha: f64,
    /// A quick, rougher measurement (small layer, few repetitions).
    #[arg(long)]
    pub quick: bool,
    /// Measure only the link between two processes of a cluster (--hosts, --rank,
    /// --secret-file; `plan --validate --emulate` runs it on the emulated links): latency
    /// and bandwidth of the store's transport, written by rank 0 to --output as JSON.
    #[arg(long, requires = "hosts")]
    pub link: bool,
    /// --link: the hosts file of the two processes (`rank host:port` lines).
    #[arg(long, value_name = "FILE", requires = "link")]
    pub hosts: Option<PathBuf>,
    /// --link: this process's rank.
    #[arg(long, value_name = "R", requires = "link")]
    pub rank: Option<usize>,
    /// --link: the cluster's secret [default: ITERSTORE_SECRET].
    #[arg(long, value_name = "FILE", requires = "link")]
    pub secret_file: Option<PathBuf>,
}

/// Parses a number in [0, 1].
pub(crate) fn parse_unit(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("'{s}' is not a number"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not in [0, 1]"))
    }
}

/// Options of `iterstore plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The network: a JSON file, or a built-in: `mlp` or `cnn` (Fashion-MNIST),
    /// `adam-mnist` or `imagenet-22k` (Yan et al.'s Table 1 networks, perf/paper/),
    /// `imagenet-like`.
    #[arg(long, value_name = "M", required_unless_present = "validate")]
    pub model: Option<String>,
    /// The hardware profile: a JSON file, or the built-in `example` or `adam-cluster` (the
    /// paper's cluster, perf/paper/) [with --validate: measured by `iterstore calibrate`
    /// first].
    #[arg(long, value_name = "P", required_unless_present = "validate")]
    pub profile: Option<String>,
    /// Machines (N), parameter servers and workers together; 2 to 48. The search grows as
    /// N^4 (20 machines: under half a second here; 48: tens of seconds).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(2..=48),
          required_unless_present = "validate", conflicts_with = "validate")]
    pub machines: Option<u32>,
    /// Cores per machine (K): the most threads a layer may use; 1 to 256.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=256),
          required_unless_present = "validate", conflicts_with = "validate")]
    pub cores: Option<u32>,
    /// Training settings as a JSON file [default: Fashion-MNIST, 60000 samples, read every
    /// 70, write every 40].
    #[arg(long, value_name = "FILE", conflicts_with = "validate")]
    pub training: Option<PathBuf>,
    /// Write the chosen configuration here as a versioned plan file.
    #[arg(long, value_name = "FILE", conflicts_with = "validate")]
    pub output: Option<PathBuf>,
    /// How many of the fastest configurations to print.
    #[arg(long, default_value_t = 5, value_name = "T", value_parser = at_least_one)]
    pub top: usize,
    /// Instead of searching, estimate these configurations, W/R/PS as in the paper's
    /// Table 1 (workers per replica / replicas / parameter servers), comma-separated: e.g.
    /// 2/9/2,4/4/4. Each one's layers are the optimizer's best for it (or --compose,
    /// --layers); prints each estimate with its breakdown and the order.
    #[arg(
        long,
        value_name = "W/R/PS,..",
        value_delimiter = ',',
        conflicts_with = "validate"
    )]
    pub evaluate: Vec<String>,
    /// --evaluate: how each configuration's layers are composed: `best` (the optimizer's
    /// dynamic program for that W/R/PS) or `uniform` (every layer striped over the W
    /// workers, no copies, --cores threads: how Adam ran the paper's Table 1).
    #[arg(long, value_name = "HOW", default_value = "best", value_parser = ["best", "uniform"],
          requires = "evaluate")]
    pub compose: String,
    /// --evaluate: the layers' P:R:H (partitions, copies, threads), comma-separated, one per
    /// layer bottom first, or one for every layer; overrides --compose.
    #[arg(long, value_name = "P:R:H,..", requires = "evaluate")]
    pub layers: Option<String>,

    /// Check the model against measurement: calibrate this machine (unless --profile),
    /// run 8 configurations of the DNN app's MLP as local processes (different N_ps,
    /// N_mr, N_wr, partitions and N_read/N_write; each process a machine of
    /// --cpu-quota cores where cgroups allow), and print each one's estimated and measured
    /// epoch time, the errors and the rank correlation.
    #[arg(long, help_heading = "Validation")]
    pub validate: bool,
    /// --validate: train on Fashion-MNIST in DIR (tools/fetch-data fashion-mnist) [default:
    /// --synthetic small, 6000 28x28 images].
    #[arg(
        long,
        value_name = "DIR",
        help_heading = "Validation",
        requires = "validate",
        conflicts_with = "synthetic"
    )]
    pub data: Option<PathBuf>,
    /// --validate: seeded synthetic images of this size instead of --data: tiny, small,
    /// medium, large or xlarge.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help_heading = "Validation",
          requires = "validate")]
    pub synthetic: Option<String>,
    /// --validate: epochs per configuration; the last one is measured.
    #[arg(long, default_value_t = 2, value_name = "N", value_parser = at_least_one,
          help_heading = "Validation")]
    pub iters: usize,
    /// --validate: the MLP's hidden layers [default: run dnn's, 512,256].
    #[arg(long, value_name = "N,..", value_delimiter = ',', value_parser = at_least_one,
          help_heading = "Validation", requires = "validate")]
    pub hidden: Option<Vec<usize>>,
    /// --validate: cores of each emulated machine (a cgroup CPU quota per process; needs
    /// root) [default: this machine's CPUs over the most machines a configuration uses, 5].
    #[arg(long, value_name = "F", value_parser = parse_cores, help_heading = "Validation",
          requires = "validate")]
    pub cpu_quota: Option<f64>,
    /// --validate: run every configuration on an emulated cluster whose links carry RATE
    /// each way (tc syntax: 1gbit, 100mbit; network namespaces and token buckets through
    /// --emulator; needs root), so that weight transfers are bound by the links as the
    /// model assumes [default: loopback, where they are bound by the processes' CPU].
    #[arg(
        long,
        value_name = "RATE",
        help_heading = "Validation",
        requires = "validate"
    )]
    pub emulate: Option<String>,
    /// --validate --emulate: the cluster emulator [default: tools/emulate-cluster of the
    /// current directory, else of the repository this binary was built in].
    #[arg(
        long,
        value_name = "PATH",
        help_heading = "Validation",
        requires = "emulate"
    )]
    pub emulator: Option<PathBuf>,
    /// Write every candidate with its estimate (the search's, or --evaluate's) as JSON to
    /// FILE; with --validate, the configurations with their estimated and measured seconds.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// --validate: write the estimated-against-measured chart (SVG) to FILE.
    #[arg(
        long,
        value_name = "FILE",
        help_heading = "Validation",
        requires = "validate"
    )]
    pub svg: Option<PathBuf>,
}

/// Options of `iterstore bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Apps to benchmark, comma-separated: mf, lda, pagerank, dnn, logreg [default:
    /// mf,lda,pagerank].
    #[arg(long, value_delimiter = ',', value_parser = apps::names())]
    pub apps: Vec<String>,
    /// Ratings file for mf (else --synthetic).
    #[arg(long, value_name = "PATH")]
    pub mf_data: Option<PathBuf>,
    /// Corpus file for lda (else --synthetic).
    #[arg(long, value_name = "PATH")]
    pub lda_data: Option<PathBuf>,
    /// Graph file for pagerank (else --synthetic).
    #[arg(long, value_name = "PATH")]
    pub pagerank_data: Option<PathBuf>,
    /// Directory of Fashion-MNIST's four IDX files for dnn (else --synthetic); the PyTorch
    /// peer reads the same files.
    #[arg(long, value_name = "DIR")]
    pub dnn_data: Option<PathBuf>,
    /// dnn: the network, `mlp` or `cnn` (`run dnn --model`'s defaults; the CNN needs
    /// images of at least 28 x 28 for its default shape, so `--synthetic small` or larger,
    /// and has no limit implementation) [default: mlp].
    #[arg(long, value_name = "M", value_parser = ["mlp", "cnn"])]
    pub dnn_model: Option<String>,
    /// Fashion-MNIST directory (its four IDX files) or svmlight file for logreg (else
    /// --synthetic images); the scikit-learn peer reads the same.
    #[arg(long, value_name = "PATH")]
    pub logreg_data: Option<PathBuf>,
    /// pagerank: rank-table block sizes (vertices per row), comma-separated; each is
    /// benchmarked as its own workload, named `<input>, block <B>` [default: 256]. The
    /// scaling sweep always uses 256.
    #[arg(long, value_delimiter = ',', value_name = "B", value_parser = at_least_one)]
    pub pagerank_block: Option<Vec<usize>>,
    /// pagerank: how the graph is split over the workers, `edges` or `communities` (see
    /// `run --partition`) [default: edges].
    #[arg(long, value_name = "HOW", value_parser = parse_graph_partition)]
    pub pagerank_partition: Option<GraphPartition>,
    /// Synthetic input size for apps given no file.
    #[arg(long, value_name = "SIZE", default_value = "small", value_parser = parse_size)]
    pub synthetic: String,
    /// Worker threads.
    #[arg(long, default_value_t = 2, value_name = "N", value_parser = at_least_one)]
    pub workers: usize,
    /// Server shards in each process [default: one per worker, at most 256]. With
    /// several, the work a CLOCK releases (applying a clock's updates, the refreshes they
    /// answer) is shared by the workers waiting for it.
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    pub shards: Option<usize>,
    /// Iterations per run (at least 2).
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub iters: usize,
    /// Rounds: each variant, the limit and the peers run N times, one after the other in
    /// each round, and each reports its median round (for an even N, the slower middle
    /// one), so that a slow spell of a shared machine does not decide a comparison.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = at_least_one)]
    pub rounds: usize,
    /// Variants to run, comma-separated [default: all: generic, first-iter, virtual,
    /// virtual-no-static-cache, virtual-no-thread-caches, virtual-no-contiguous-index,
    /// virtual-no-prefetch-batching, virtual-no-numa].
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub variants: Option<Vec<String>>,
    /// lda: topics [default: the planted number for synthetic input, else 100].
    #[arg(long, value_parser = at_least_one)]
    pub topics: Option<usize>,
    /// lda: the sampler of the app and its limit, `dense` or `sparse` (see `run
    /// --sampler`) [default: dense].
    #[arg(long, value_name = "KIND", value_parser = parse_sampler)]
    pub sampler: Option<SamplerKind>,
    /// Skip the limit implementations.
    #[arg(long)]
    pub no_limit: bool,
    /// Skip the peers (LIBMF, the Python lda package and tomotopy, scipy PageRank,
    /// PyTorch for dnn, scikit-learn for logreg).
    #[arg(long)]
    pub no_peers: bool,
    /// Also measure per-iteration time against input size on synthetic inputs.
    #[arg(long)]
    pub scaling: bool,
    /// Synthetic sizes of the scaling sweep, comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = parse_size, default_value = "tiny,small,medium,large")]
    pub scaling_sizes: Vec<String>,
    /// Iterations per scaling run (at least 2).
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub scaling_iters: usize,
    /// Directory for report.json, report.md and the SVG charts; created if missing, and
    /// checked before any input is read.
    #[arg(long, value_name = "DIR", default_value_os_t = bench::default_out())]
    pub out: PathBuf,
}

/// Options every `iterstore run APP` takes, before the app's own: the input, the store,
/// the output files.
#[derive(Debug, Args)]
pub struct RunOptions {
    /// Input file (gzip read transparently): ratings for mf (MovieLens u.data, CSV,
    /// RecBole .inter), a corpus for lda (LDA-C .ldac, UCI docword), a graph for pagerank
    /// (graph-tool .gt/.gt.gz, or an edge list: one `source target` pair of non-negative
    /// integer vertex ids per line, `#` or `%` starting a comment line; any other line is
    /// an error), a directory of Fashion-MNIST's gzipped IDX files for dnn
    /// (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz,
    /// t10k-labels-idx1-ubyte.gz: tools/fetch-data fashion-mnist).
    #[arg(long, value_name = "PATH", conflicts_with = "synthetic")]
    pub data: Option<PathBuf>,
    /// Generate seeded synthetic input of this size instead of reading --data: tiny,
    /// small, medium, large or xlarge [default: small].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub synthetic: Option<String>,
    /// Store mode: generic, first-iter or virtual.
    #[arg(long, default_value = "virtual", value_parser = parse_mode)]
    pub mode: Mode,
    /// Worker threads.
    #[arg(long, default_value_t = 2, value_name = "N", value_parser = at_least_one)]
    pub workers: usize,
    /// Server shards in each process [default: one per worker, at most 256; one with
    /// dnn's --parameter-servers or --plan, whose servers are counted in shards]. With
    /// several, the work a CLOCK releases (applying a clock's updates, the refreshes they
    /// answer) is shared by the workers waiting for it.
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    pub shards: Option<usize>,
    /// Iterations after initialisation.
    #[arg(long, default_value_t = 10, value_name = "N", value_parser = at_least_one)]
    pub iters: usize,
    /// Staleness bound: 0 (BSP), a positive integer (SSP) or async.
    #[arg(long, default_value = "0", value_parser = parse_staleness)]
    pub staleness: Staleness,
    /// NUMA placement in specialized modes: place workers on cores, bind them (--pin)
    /// and place rows in the zone of the workers that use them most.
    #[arg(long, default_value = "on", value_parser = parse_on_off, value_name = "on|off", action = ArgAction::Set)]
    pub numa: bool,
    /// Waiting threads yield their core for a moment before they sleep (faster short
    /// iterations); off: they sleep at once, for a machine shared with other jobs or
    /// under a CPU quota, where the yielding time is counted.
    #[arg(long, default_value = "on", value_parser = parse_on_off, value_name = "on|off", action = ArgAction::Set)]
    pub yield_waits: bool,
    /// How specialized workers write the update slabs of their CLOCKs: auto (plain
    /// stores, streaming ones while the machine's memory is measurably contended), plain
    /// or streaming (non-temporal).
    #[arg(long, default_value = "auto", value_name = "auto|plain|streaming")]
    pub slab_stores: SlabStores,
    /// Plan the NUMA placement for this hwloc synthetic topology instead of this machine
    /// (e.g. "pack:2 numa:1 core:4 pu:1"): planned and printed, nothing bound.
    #[arg(long, value_name = "DESC")]
    pub topology: Option<String>,
    /// How workers are spread over NUMA zones: packed (fill a zone first) or spread.
    #[arg(long, default_value = "packed", value_parser = parse_placement)]
    pub placement: WorkerPlacement,
    /// How --numa on binds workers: zones (any CPU of the worker's zone; nothing bound on
    /// a machine of one zone, so another job costs what it costs an unpinned program) or
    /// cores (each worker on its own core, for a machine the run has to itself).
    #[arg(long, default_value = "zones", value_name = "zones|cores", value_parser = parse_pinning)]
    pub pin: Pinning,
    /// Write the run report as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the model to FILE (formats below).
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Seed of the initial model, the sampler and the train/test split.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

/// Options of a run on several processes, and its checkpoints (after the app's own).
#[derive(Debug, Args)]
pub struct ClusterOptions {
    /// Run as P local processes on 127.0.0.1, each with --workers workers (a launcher:
    /// output prefixed by rank, exit status the worst child's, children stopped with it).
    /// The result is the same as one process of P x --workers workers. At most
    /// 64 (local processes share this machine's cores; a larger cluster is --hosts).
    #[arg(long, value_name = "P", help_heading = "Cluster options", value_parser = parse_processes,
          conflicts_with_all = ["hosts", "rank", "join"])]
    pub processes: Option<usize>,
    /// Join the cluster described by FILE: one `rank host:port` line per process. Every
    /// process runs the same command with its own --rank.
    #[arg(
        long,
        value_name = "FILE",
        help_heading = "Cluster options",
        group = "cluster_source"
    )]
    pub hosts: Option<PathBuf>,
    /// Join the cluster the launcher's environment describes, with no hosts file (every
    /// process runs the same command): under srun, the nodes, tasks and rank it gives
    /// (each task listens on ITERSTORE_PORT [29600] plus its index on its node); under
    /// torchrun, MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE (the processes meet at rank
    /// 0, which tells each every address; ITERSTORE_RENDEZVOUS_TIMEOUT [120] seconds at
    /// most).
    #[arg(
        long,
        value_name = "SOURCE",
        value_enum,
        help_heading = "Cluster options",
        group = "cluster_source",
        conflicts_with = "rank"
    )]
    pub join: Option<JoinFrom>,
    /// This process's rank in --hosts [default: from SLURM_PROCID, OMPI_COMM_WORLD_RANK
    /// or RANK].
    #[arg(
        long,
        value_name = "R",
        help_heading = "Cluster options",
        requires = "hosts"
    )]
    pub rank: Option<usize>,
    /// The cluster's shared secret, read from FILE [default: the ITERSTORE_SECRET
    /// environment variable]. Never give it on the command line.
    #[arg(
        long,
        value_name = "FILE",
        help_heading = "Cluster options",
        requires = "cluster_source"
    )]
    pub secret_file: Option<PathBuf>,
    /// Locality placement in virtual mode on several processes: each row on the process
    /// whose workers use it most (off: rows spread by hash).
    #[arg(long, default_value = "on", value_parser = parse_on_off, value_name = "on|off",
          action = ArgAction::Set, help_heading = "Cluster options")]
    pub row_placement: bool,
    /// Write a checkpoint into DIR (created if missing; shared by every process) after
    /// every --checkpoint-every iterations: the tables and each process's worker state.
    #[arg(
        long,
        value_name = "DIR",
        help_heading = "Checkpoint options",
        requires = "checkpoint_every"
    )]
    pub checkpoint_dir: Option<PathBuf>,
    /// Iterations between checkpoints (at least 1); needs --checkpoint-dir.
    #[arg(long, value_name = "N", help_heading = "Checkpoint options", value_parser = at_least_one,
          requires = "checkpoint_dir")]
    pub checkpoint_every: Option<usize>,
    /// Resume from the newest complete checkpoint in DIR, written by the same app with
    /// the same parameters and data: the run continues after the checkpoint's iteration
    /// and ends as an uninterrupted run of --iters would. A missing, partial, corrupt or
    /// mismatched checkpoint is refused, naming the file.
    #[arg(long, value_name = "DIR", help_heading = "Checkpoint options")]
    pub resume: Option<PathBuf>,
    /// When a process of the cluster is lost (killed, crashed, its connection gone), start
    /// the cluster again, at most N times: the other processes end their cluster, wait
    /// (1 s, 2 s, 4 s... at most 30 s), rejoin with the same hosts and secret and go on
    /// from the newest complete checkpoint in --checkpoint-dir (from the beginning
    /// without one). With --processes the launcher starts the lost process again; with
    /// --hosts or --join, start it again with the same command within --connect-timeout.
    /// Errors of configuration or data are never restarted. With --checkpoint-dir, a run
    /// whose directory already holds a checkpoint continues from it (as --resume DIR).
    #[arg(long, value_name = "N", default_value_t = 0, help_heading = "Checkpoint options",
          value_parser = clap::value_parser!(u32).range(0..=100))]
    pub restarts: u32,
    /// Keep R copies of every server shard, each on its own process (at most the
    /// cluster's processes): every clock's updates reach the R - 1 backups before they
    /// become visible. A lost process still ends the run (promotion of a backup is not
    /// built yet; --restarts with --checkpoint-dir is what survives a loss). Refused with
    /// --staleness async, --resume (or --restarts with --checkpoint-dir), --mode
    /// first-iter with --row-placement on, tune, and app options that change rows outside
    /// a clock (dnn's --server-rule, logreg's lbfgs solver).
    #[arg(long, value_name = "R", default_value_t = 1, help_heading = "Cluster options",
          value_parser = at_least_one)]
    pub shard_replicas: usize,
    /// With --processes: run each process in its own CPU group limited to F cores (a
    /// cgroup v1 CPU quota; needs root), so that the processes behave like machines of F
    /// cores each.
    #[arg(long, value_name = "F", help_heading = "Cluster options", requires = "processes",
          value_parser = parse_cores)]
    pub cpu_quota: Option<f64>,
    /// Seconds to wait at start-up for every other process to connect.
    #[arg(long, value_name = "S", default_value_t = 30, help_heading = "Cluster options",
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub connect_timeout: u64,
    /// Bytes of messages queued for one slow peer before this process's workers wait for
    /// it to read (a number with an optional K, M or G suffix, powers of 1024): the memory
    /// a slow reader can hold here, per peer (see the run JSON's store.send_waits and
    /// store.peak_queued_bytes).
    #[arg(long, value_name = "BYTES", default_value = "64M", help_heading = "Cluster options",
          value_parser = parse_send_queue)]
    pub send_queue: usize,
    /// Serve this process's metrics for Prometheus at http://ADDR/metrics while it runs
    /// (worker clocks and their lag, waits, bytes per peer, queue depths, run and
    /// checkpoint durations, specialization coverage). With --processes P, rank R serves
    /// the port plus R (9400, 9401, ...); port 0 takes any free port.
    #[arg(long, value_name = "ADDR", help_heading = "Cluster options")]
    pub metrics_addr: Option<std::net::SocketAddr>,
}

/// Where `--join` reads the cluster's description from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum JoinFrom {
    /// The launcher's environment (srun, torchrun, mpirun with MASTER_ADDR exported).
    Env,
}

/// The version of this binary, as `--version` prints it and the JSON reports record it.
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Runs the parsed command line; `args` is the command line as given (for the reports).
pub fn main(cli: Cli, args: &[std::ffi::OsString]) -> Result<()> {
    log::init(cli.quiet, cli.verbose);
    let command_line = command_line(args);
    match cli.command {
        Command::Run(run) => match run.app().cluster().processes {
            Some(p) if p > 1 => launch::launch(run.app(), p, args),
            _ => run::run(run.app(), command_line),
        },
        Command::Demo => demo::demo(),
        Command::Bench(args) => bench::bench(&args, command_line),
        Command::Plan(args) if args.validate => validate::validate(&args),
        Command::Plan(args) => plan::plan(&args),
        Command::Calibrate(args) => calibrate::run(&args),
        Command::Tune(t) if t.app().cluster().shard_replicas > 1 => Err(replicas_refused(
            t.app().cluster().shard_replicas,
            "tune's trials are branches of the training state, which backups do not follow",
        )),
        Command::Tune(t) => match t.app().cluster().processes {
            Some(p) if p > 1 => launch::launch(t.app(), p, args),
            _ => tune::tune(&t, command_line),
        },
    }
}

/// The store's refusal of `--shard-replicas R` (R > 1) with something it does not keep on
/// the backups yet (`why`), naming the field as the store does.
pub(crate) fn replicas_refused(r: usize, why: &str) -> anyhow::Error {
    iterstore::Error::InvalidConfig {
        field: "shard_replicas",
        reason: format!("{r} copies of each shard: {why} (docs/replication.md)"),
    }
    .into()
}

/// The current time as RFC 3339 UTC, to the second (`2026-01-31T12:00:00Z`).
pub(crate) fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// `args` joined as a shell would need them: an argument with anything but letters,
/// digits and `-_./:=,+@%` is single-quoted.
pub(crate) fn command_line(args: &[std::ffi::OsString]) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:=,+@%".contains(c);
    args.iter()
        .map(|a| {
            let a = a.to_string_lossy();
            if !a.is_empty() && a.chars().all(plain) {
                a.into_owned()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub(crate) fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

pub(crate) fn parse_cores(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f > 0.0 && f.is_finite() => Ok(f),
        Ok(f) => Err(format!("{f} cores: give a positive number")),
        Err(e) => Err(e.to_string()),
    }
}

pub(crate) fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("'{s}' is neither 'on' nor 'off'")),
    }
}

pub(crate) fn parse_placement(s: &str) -> Result<WorkerPlacement, String> {
    s.parse()
}

pub(crate) fn parse_pinning(s: &str) -> Result<Pinning, String> {
    s.parse()
}

pub(crate) fn parse_mode(s: &str) -> Result<Mode, String> {
    s.parse()
}

pub(crate) fn parse_sampler(s: &str) -> Result<SamplerKind, String> {
    match s {
        "dense" => Ok(SamplerKind::Dense),
        "sparse" => Ok(SamplerKind::Sparse),
        _ => Err(format!("'{s}': lda samples with `dense` or `sparse`")),
    }
}

pub(crate) fn parse_staleness(s: &str) -> Result<Staleness, String> {
    s.parse()
}

/// `N`, `NK`, `NM` or `NG` (powers of 1024; lower case too), at least 1 and at most
/// 1 TiB.
pub(crate) fn parse_bytes(s: &str) -> Result<usize, String> {
    let (digits, unit) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&s[..i], c.to_ascii_uppercase()),
        _ => (s, 'B'),
    };
    let shift = match unit {
        'B' => 0,
        'K' => 10,
        'M' => 20,
        'G' => 30,
        _ => return Err(format!("'{s}': the unit must be K, M or G")),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{s}' is not a number of bytes (e.g. 64M, 512K)"))?;
    match n
        .checked_shl(shift)
        .filter(|&b| (1..=1 << 40).contains(&b) && b >> shift == n)
    {
        Some(b) => usize::try_from(b).map_err(|_| format!("'{s}' is too large here")),
        None => Err(format!("'{s}' must be between 1 and 1024G")),
    }
}

/// `--processes`: 1 to [`iterstore::deploy::MAX_LOCAL_PROCESSES`] (the library's launcher's bound).
pub(crate) fn parse_processes(s: &str) -> Result<usize, String> {
    let n = at_least_one(s)?;
    if n > iterstore::deploy::MAX_LOCAL_PROCESSES {
        return Err(format!(
            "{n} local processes is more than {}: they share this machine's cores (run a larger cluster with --hosts)",
            iterstore::deploy::MAX_LOCAL_PROCESSES
        ));
    }
    Ok(n)
}

/// `--send-queue`: a size ([`parse_bytes`]) of at least [`iterstore::deploy::MIN_SEND_QUEUE_BYTES`].
pub(crate) fn parse_send_queue(s: &str) -> Result<usize, String> {
    let bytes = parse_bytes(s)?;
    if bytes < iterstore::deploy::MIN_SEND_QUEUE_BYTES {
        return Err(format!(
            "'{s}' is below the least that works, 1M: a healthy peer's burst of replies would be taken for a slow reader"
        ));
    }
    Ok(bytes)
}

pub(crate) fn parse_graph_partition(s: &str) -> Result<GraphPartition, String> {
    GraphPartition::parse(s)
}

pub(crate) fn parse_size(s: &str) -> Result<String, String> {
    let lower = s.to_ascii_lowercase();
    if SIZES.contains(&lower.as_str()) {
        Ok(lower)
    } else {
        Err(format!("'{s}' is not one of {}", SIZES.join(", ")))
    }
}

/// The shards per process `--shards` asks for, or by default one per worker (at most
/// [`iterstore::MAX_SHARDS`]): a CLOCK's work is then shared by the waiting workers. With
/// `dedicated_servers` (dnn's `--parameter-servers` or `--plan`, whose servers are counted
/// in shards) the default is one, so that N servers are N processes.
pub(crate) fn shards_or_default(
    shards: Option<usize>,
    workers: usize,
    dedicated_servers: bool,
) -> usize {
    let default = if dedicated_servers {
        1
    } else {
        workers.min(iterstore::MAX_SHARDS)
    };
    shards.unwrap_or(default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_take_binary_suffixes_and_refuse_the_rest() {
        assert_eq!(parse_bytes("64M"), Ok(64 << 20));
        assert_eq!(parse_bytes("512k"), Ok(512 << 10));
        assert_eq!(parse_bytes("3g"), Ok(3 << 30));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        for bad in ["", "0", "M", "-1K", "1.5M", "12T", "99999999999G", "64 M"] {
            assert!(parse_bytes(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn command_lines_quote_what_a_shell_would_split() {
        let args: Vec<std::ffi::OsString> =
            ["iterstore", "run", "--data", "my file.tsv", "it's", ""]
                .iter()
                .map(Into::into)
                .collect();
        assert_eq!(
            command_line(&args),
            r"iterstore run --data 'my file.tsv' 'it'\''s' ''"
        );
    }
}
