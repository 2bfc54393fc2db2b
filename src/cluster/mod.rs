//! [`Cluster`]: one process of a cluster (its server shards, its communication thread
//! and a pool of persistent worker threads) and what an application does with it:
//! create tables, run closures on every worker, specialize the store to the iteration's
//! access pattern, observe, checkpoint and shut down.
//!
//! The cluster owns threads and wiring; the protocol lives in `client`, `server` and
//! `worker`, and the transport only moves messages between them. It is the top layer of
//! the runtime (`tests/it/tidy.rs`): it may use every module below it.
//!
//! This file holds the [`Cluster`] struct, its state grouped by concern, and the few
//! calls every other file uses. Each concern is one file of `impl Cluster`:
//!
//! - `start`: starting a process (alone, joined over TCP, or several in this OS process
//!   with [`Cluster::run_local_processes`]), its threads, and the cluster id the
//!   processes agree on;
//! - `tables`: creating tables, their handles, where a row lives, snapshots;
//! - `runs`: runs of a closure on every worker, the run barrier, all-gathers;
//! - `specialize`: the specialization pipeline: gathering the pattern (the virtual
//!   iteration, or the first real run), locality placement, the plan with its op tapes
//!   and its NUMA placement;
//! - `stats`: the report types ([`Stats`], [`SpecialMemory`], [`NumaReport`]) and the
//!   calls that fill them;
//! - `checkpointing`: checkpoint and resume, with [`Resumed`];
//! - `recovery`: going on after a loss from the replicated shards, with [`Recovery`];
//! - `metrics`: the Prometheus endpoint ([`Config::metrics_addr`]) and what it serves;
//! - `shutdown`: coordinated shutdown, on drop too, and the shard and communication
//!   threads.

mod agree;
mod batches;
mod branches;
mod checkpointing;
mod diagnostics;
mod functions;
mod metrics;
mod recovery;
mod runs;
mod set_rows;
mod shutdown;
mod specialize;
mod staleness;
mod start;
mod stats;
mod tables;

pub use branches::{BranchCounts, BranchInfo, BranchStates};
pub use checkpointing::Resumed;
pub use functions::ServerFn;
pub use recovery::{Recovered, Recovery};
pub use stats::{NumaReport, SpecialMemory, Stats, TableUpdates};

use crate::client::ClientShared;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::gather::AccessPattern;
use crate::ids::Clock;
use crate::msg::ToShard;
use crate::numa::{NumaPlan, ThreadZones, WorkerPlace};
use crate::pinning::Pinning;
use crate::pool::WorkerPool;
use crate::table::Registry;
use crate::topology::{bind::MemBinder, Topology};
use crate::transport::Transport;
use crate::worker::{AccessCounters, KeptState};
use metrics::ProcessMetrics;
use shutdown::Threads;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A running cluster. Dropping it shuts it down.
pub struct Cluster {
    /// This cluster's own id (random), stamped on its table handles so that a handle of
    /// another cluster is refused.
    id: u64,
    config: Config,
    /// The tables created so far, in creation order (a table's id is its position).
    registry: Registry,
    /// What this process's threads share: its rank and the cluster's shape, the tables,
    /// the placement, the arena, the replies awaited.
    shared: Arc<ClientShared>,
    transport: Arc<dyn Transport>,
    /// Where the runs are: the run barrier's count and the next run's start clock.
    runs: Runs,
    /// The specialization pipeline's state: the pattern, the plans and the workers' kept
    /// state.
    spec: Specialization,
    /// Where this process's threads run and its memory goes.
    machine: Machine,
    /// The worker threads, alive as long as the cluster.
    pool: WorkerPool,
    /// The shard threads, the communication thread and the metrics endpoint's.
    threads: Threads,
    /// What the cluster measures of its runs and checkpoints for the metrics endpoint.
    metrics: Arc<ProcessMetrics>,
    /// Whether the cluster has shut down: later calls return [`Error::ShutDown`].
    down: bool,
    /// What the store could not do as asked, said once per kind.
    diagnostics: diagnostics::Diagnostics,
    /// The server functions registered, shared with this process's shards.
    functions: Arc<crate::server::functions::Functions>,
    /// The branches of the training state: which is live, and the others.
    branches: branches::BranchBook,
    /// Where this process keeps what it needs to go on after a loss, if anywhere
    /// ([`Cluster::start_with`]).
    recovery: Option<Recovery>,
}

/// Where a cluster's runs are. Every process counts the same runs, gathers and rounds.
#[derive(Debug, Default)]
struct Runs {
    /// Runs every process has ended so far (the run barrier's count).
    ended: u64,
    /// The clock the next run starts at, agreed at the last run barrier.
    start_clock: Clock,
    /// All-gathers done so far.
    gathers: u64,
    /// Runs and virtual iterations so far.
    rounds: u64,
    /// Whether a worker done with its part of a run stays to help the last one
    /// ([`ClientShared::help_while`]): only where there is something to take (several
    /// shards in this process, driven by the threads that send to them: a
    /// [`LocalDrive`](crate::transport::LocalDrive)) and the workers do not outnumber the
    /// CPUs this process may use, where a waiting helper would take a running worker's core (PageRank with 8
    /// workers on 2 cores was 5-11 % slower with it). Fixed at start.
    help_at_end: bool,
    /// Whether the tables were restored from a checkpoint ([`Cluster::resume`]).
    resumed: bool,
    /// Sets of rows done so far ([`Cluster::set_rows`]).
    sets: u64,
}

/// The specialization pipeline's state (see `specialize`), kept between runs.
#[derive(Default)]
struct Specialization {
    /// In first-iter mode: record the next run (the first real iteration) and specialize.
    gather_next: bool,
    /// The access pattern gathered last (its sequences become the op tapes of the plan
    /// built from it).
    pattern: Option<AccessPattern>,
    /// Bytes of the logs and of the merged pattern when the pattern was last gathered.
    gathered: (usize, usize),
    /// Number of plans made so far (the current plan's id).
    plans: u32,
    /// Per worker: its specialized state (or the op tape to build it from), kept between
    /// runs.
    kept: Vec<Mutex<KeptState>>,
    /// Accesses the current plan left off the tapes.
    tape_truncated: u64,
    /// How specialized workers' accesses found their rows, summed over finished runs.
    counters: AccessCounters,
    /// Migrations of rows holding values to their locality placement.
    migrations: u32,
    /// Time spent in [`Cluster::specialize`] so far.
    specialize_time: Duration,
}

/// Where a process's threads run and its memory goes: the NUMA placement, fixed at start
/// but for the NUMA plan and the arena's bound bytes, which come with each plan.
struct Machine {
    /// The machine the NUMA placement plans for.
    topology: Topology,
    /// Whether the NUMA specialization applies (a specialized mode with `numa` on).
    numa_on: bool,
    /// Where each worker thread is planned to run.
    places: Vec<WorkerPlace>,
    /// Each worker thread's CPU affinity, read back after pinning.
    worker_cpus: Vec<Vec<u32>>,
    /// Whether the threads were bound.
    bound: bool,
    /// How workers are bound when they are.
    pinning: Pinning,
    /// Zones of the shard threads and the communication thread.
    thread_zones: ThreadZones,
    /// Binds the process arena's chunks to their zones (when threads are bound).
    binder: Option<MemBinder>,
    /// Bytes of the current process arena bound to a zone.
    arena_bound_bytes: usize,
    /// The NUMA plan of the current specialized plan.
    numa: Option<NumaPlan>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("config", &self.config)
            .field("tables", &self.registry.tables().len())
            .field("down", &self.down)
            .finish()
    }
}

impl Cluster {
    /// This process's rank in its cluster (0 for a one-process cluster).
    pub fn rank(&self) -> usize {
        self.shared.process as usize
    }

    /// Number of processes in the cluster.
    pub fn processes(&self) -> usize {
        self.shared.world.processes
    }

    /// Worker threads in the whole cluster: `processes() * config().workers`. Worker
    /// ids ([`Worker::id`](crate::worker::Worker::id)) run over `0..total_workers()`.
    pub fn total_workers(&self) -> usize {
        self.shared.world.total_workers()
    }

    /// The address this process serves its metrics on (`GET /metrics`), if
    /// [`Config::metrics_addr`] asked for an endpoint: the port actually bound.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.threads.metrics.as_ref().map(|m| m.addr())
    }

    /// The configuration the cluster runs with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// `Err` if this process has shut down, or if the cluster has failed.
    fn check(&self) -> Result<()> {
        if self.down {
            return Err(Error::ShutDown);
        }
        self.shared.check()
    }

    /// `Err` naming [`Config::shard_replicas`] if the shards have backups: `what` changes
    /// rows outside a clock, which no backup would see (`docs/replication.md`, "Refused
    /// until handled").
    fn refuse_with_backups(&self, what: &str) -> Result<()> {
        match self.config.shard_replicas {
            1 => Ok(()),
            r => Err(Error::config(
                "shard_replicas",
                format!(
                    "{r} copies of each shard: {what} is not kept on the backups yet (only \
                     runs are; docs/replication.md)"
                ),
            )),
        }
    }

    /// Sends `msg` to the server shard `shard` (a global shard id).
    fn send(&self, shard: usize, msg: ToShard) -> Result<()> {
        self.shared.send_shard(shard as u32, msg)
    }
}
