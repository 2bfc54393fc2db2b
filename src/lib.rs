//! # iterstore
//!
//! A parameter server for iterative machine learning. Workers share model parameters
//! stored in **tables** of fixed-width **rows** through three operations:
//!
//! - [`Worker::read`] — a row's value, at most `s` clocks stale
//!   ([Stale Synchronous Parallel](Staleness); `s = 0` is BSP), always including the
//!   worker's own updates;
//! - [`Worker::update`] — add a delta to a row (updates aggregate with `+`);
//! - [`Worker::clock`] — end of a unit of work: buffered updates are sent.
//!
//! A [`Cluster`] is started from a validated [`Config`]; [`Cluster::create_table`] makes
//! typed [`Table`]s; [`Cluster::run`] runs a closure on every worker thread, and
//! [`Cluster::run_with`] also hands each worker its own state, kept across runs.
//!
//! Internally, server shards (`server`) hold the authoritative rows and the workers'
//! clocks, the client side (`client`) caches snapshots and fetches on misses, and a
//! transport moves protocol messages between them. The consistency rules are a pure
//! state machine. See `ARCHITECTURE.md`.
//!
//! ```
//! use iterstore::{Cluster, Config};
//!
//! # fn main() -> iterstore::Result<()> {
//! let mut cluster = Cluster::start(Config::new(2))?; // 2 workers, BSP
//! let weights = cluster.create_table::<f32>("weights", 4)?;
//! let sums = cluster.run(|w| {
//!     let mut row = [0.0f32; 4];
//!     for _iteration in 0..3 {
//!         w.read(&weights, 0, &mut row)?; // READ
//!         w.update(&weights, 0, &[1.0, 0.0, 0.0, 0.0])?; // UPDATE
//!         w.clock()?; // CLOCK
//!     }
//!     w.read(&weights, 0, &mut row)?;
//!     Ok(row[0])
//! })?;
//! assert_eq!(sums, vec![6.0, 6.0]); // 2 workers x 3 iterations
//! cluster.shutdown()?;
//! # Ok(())
//! # }
//! ```
//!
//! ## Specializing: the virtual iteration
//!
//! In [`Mode::Virtual`] the application runs its iteration code once through
//! [`Cluster::virtual_iteration`] before any parameter has a value; the store logs which
//! rows each worker touches, in which order, and builds its specialized structures from
//! that ([`Stats`](stats::Stats) shows they are used). Two rules:
//!
//! - *Which* rows an iteration touches must not depend on the values it reads (reads
//!   return zeros here). A real iteration that deviates still gives the same answers; it
//!   is only slower where it deviates.
//! - The virtual iteration **really runs the code**, on zeros. Anything it changes outside
//!   the store would carry values computed from zeros into the real run. Keep a worker's
//!   local state in per-worker states and gather with
//!   [`Cluster::virtual_iteration_with`], which gives each worker a throw-away copy
//!   (or skip the effect when [`Worker::is_virtual`] is `true`):
//!
//! ```
//! use iterstore::{Cluster, Config, Mode, Worker, Table};
//!
//! # fn main() -> iterstore::Result<()> {
//! let mut cluster = Cluster::start(Config::new(2).with_mode(Mode::Virtual))?;
//! let counts = cluster.create_table::<f64>("counts", 1)?;
//! // Per worker: the share it computed last, kept across iterations.
//! let mut shares = vec![0.0f64; 2];
//! let iteration = |w: &mut Worker<'_>, share: &mut f64| -> iterstore::Result<()> {
//!     let mut total = [0.0];
//!     w.read(&counts, 0, &mut total)?;
//!     *share = 1.0 / (total[0] + 1.0); // from zeros in the virtual iteration
//!     w.update(&counts, 0, &[1.0])?;
//!     w.clock()
//! };
//! cluster.virtual_iteration_with(&shares, iteration)?; // copies: `shares` is untouched
//! assert_eq!(shares, vec![0.0, 0.0]);
//! for _ in 0..3 {
//!     cluster.run_with(&mut shares, iteration)?;
//! }
//! assert_eq!(shares, vec![1.0 / 5.0, 1.0 / 5.0]); // read 4 after 2 runs of 2 workers
//! assert_eq!(cluster.stats().indexed_accesses, 0); // every access followed the pattern
//! # Ok(())
//! # }
//! ```
//!
//! ## Branches of the training state
//!
//! Between runs, every process alike, the store can keep several **branches** of the
//! model (MLtuner's mechanics, for tuning): [`Cluster::fork`] copies every table's rows,
//! rule states, rule parameters and staleness into a new [`BranchId`] (each shard copies
//! its own rows: nothing crosses the network), [`Cluster::switch`] chooses which one the
//! next runs train, [`Cluster::free`] drops one, and [`Cluster::park`] /
//! [`Cluster::unpark`] move one to disk and back through the checkpoint layer. Every
//! branch shares the plan and its specialized structures; only values are copied.
//! [`BranchStates`] keeps the workers' own states per branch.
//!
//! ## Logs, diagnostics and statistics
//!
//! The store logs through [`tracing`](https://docs.rs/tracing): install a subscriber
//! (`tracing-subscriber`'s `fmt().init()`, say) to see its progress and warnings. What it
//! could not do as asked — a virtual iteration outside [`Mode::Virtual`] (nothing is
//! specialized), a virtual-mode run before any virtual iteration (it runs generic), a
//! recorded iteration without a CLOCK — is said once per kind *even without a
//! subscriber* (then on standard error), counted in
//! [`Stats::diagnostics`](stats::Stats::diagnostics) and listed by
//! [`Cluster::diagnostics`]. [`Cluster::stats`] says whether the specialization was
//! taken: `tape_accesses` (found on the op tape, the fast path) against
//! `indexed_accesses` (off the pattern). `examples/custom_app.rs` shows all three.
#![warn(missing_docs)]

mod buf;
mod checkpoint;
mod client;
mod cluster;
mod config;
mod consistency;
mod element;
mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod gather;
mod ids;
mod launch;
mod membership;
mod msg;
mod net;
mod numa;
mod pinning;
mod placement;
mod plan;
mod pool;
mod prefetch;
mod rank_k;
mod rows_part;
mod rule;
mod server;
mod slot;
mod stream;
mod sync;
mod table;
mod topology;
mod transport;
mod worker;
mod world;

// The core: what every embedding writes.
pub use cluster::{BranchCounts, BranchInfo, BranchStates, Cluster, Recovered, Recovery};
pub use config::{
    Config, Mode, SlabStores, Specializations, MAX_SHARDS, MAX_WORKERS, MESSAGE_TIMEOUT,
};
pub use consistency::Staleness;
pub use element::{ElemType, Element};
pub use error::{Error, Result};
pub use ids::{BranchId, Clock, RowKey, TableId};
pub use rule::{
    CustomRule, Real, Rule, UpdateRule, UpdateRules, MAX_RULE_NAME, MAX_RULE_PARAMS, MAX_RULE_STATE,
};
pub use table::Table;
pub use worker::Worker;

/// Checkpoints and resuming from them: [`Cluster::checkpoint`], [`Cluster::resume`].
pub mod checkpoints {
    pub use crate::checkpoint::{newest_checkpoint, ClusterRule};
    pub use crate::cluster::Resumed;
    pub use crate::error::checkpoint::CheckpointError;
}

/// Starting the processes of a cluster and finding each other: hosts files and lists,
/// the shared secret, the rendezvous, ranks from Slurm or the environment, and a
/// launcher of local processes ([`launch_local`](deploy::launch_local)).
pub mod deploy {
    pub use crate::launch::{
        die_with_parent, fresh_secret, launch_local, Launched, LAUNCH_GRACE, LAUNCH_HOSTS_ENV,
        LAUNCH_RANK_ENV, MAX_LOCAL_PROCESSES,
    };
    pub use crate::membership::{
        expand_hostlist, loopback_hosts, parse_hosts, parse_tasks_per_node, rank_from_env,
        rendezvous, Membership, RendezvousConfig, Secret, BASE_PORT_ENV, DEFAULT_BASE_PORT,
        MAX_HOSTLIST_HOSTS, MIN_SEND_QUEUE_BYTES, RENDEZVOUS_PORT_ENV, RENDEZVOUS_TIMEOUT,
        RENDEZVOUS_TIMEOUT_ENV, SECRET_ENV, SHUTDOWN_TIMEOUT,
    };
}

/// Server functions: code each shard runs on its own rows ([`Cluster::register_function`],
/// [`Cluster::call`]), for vector operations on tables without moving the vectors
/// (DistBelief's Sandblaster).
pub mod functions {
    pub use crate::cluster::ServerFn;
    pub use crate::server::functions::{Fold, Reduce, ShardRows};
}

/// Work units handed out on demand with backup tasks ([`Worker::work_units`]): a batch
/// cut into many units, the slow workers' tail run again by idle ones, the first result
/// of each unit counted once (DistBelief's Sandblaster).
pub mod units {
    pub use crate::worker::units::{UnitsOutcome, UnitsReport, WorkUnits, UNIT_TAGS};
}

/// What a cluster reports about itself: [`Cluster::stats`], the access pattern a
/// virtual iteration recorded ([`Cluster::access_pattern`]), traffic by message kind,
/// UPDATE bytes by table, and where the NUMA placement put threads and memory.
pub mod stats {
    pub use crate::cluster::{NumaReport, SpecialMemory, Stats, TableUpdates};
    pub use crate::gather::{AccessPattern, RowUse};
    pub use crate::transport::KindTraffic;
}

/// The machine's topology (NUMA zones and cores, from hwloc or synthetic) and how
/// workers are placed on it ([`Config::with_topology`], `Config::worker_placement`).
pub mod machine {
    pub use crate::numa::WorkerPlacement;
    pub use crate::pinning::Pinning;
    pub use crate::topology::{Core, Topology, TopologySource, Zone};
}
