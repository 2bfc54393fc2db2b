//! [`Config`]: everything a cluster is started with, validated before any work starts.
//!
//! This module only describes and checks settings; it starts nothing.

use crate::consistency::Staleness;
use crate::error::{Error, Result};
use crate::membership::Membership;
use crate::numa::WorkerPlacement;
use crate::pinning::Pinning;
use crate::rule::{Rule, UpdateRule, UpdateRules};
use crate::topology::Topology;
use std::net::SocketAddr;
use std::time::Duration;

/// How the store obtains and uses the application's access pattern (the IterStore paper's
/// names in parentheses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// No pattern: concurrent maps, process cache, per-row fetch (IS-no-opt).
    #[default]
    Generic,
    /// Record the first real iteration, then specialize (IS-no-viter).
    FirstIter,
    /// Record a virtual iteration before any real value exists, then specialize (IterStore).
    Virtual,
}

impl Mode {
    /// The command-line spelling.
    pub const fn name(self) -> &'static str {
        match self {
            Mode::Generic => "generic",
            Mode::FirstIter => "first-iter",
            Mode::Virtual => "virtual",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "generic" => Ok(Mode::Generic),
            "first-iter" => Ok(Mode::FirstIter),
            "virtual" => Ok(Mode::Virtual),
            _ => Err(format!(
                "mode '{s}' is not one of generic, first-iter, virtual"
            )),
        }
    }
}

/// Which specializations a `first-iter` or `virtual` store applies; each can be switched
/// off for ablation. Ignored in `generic` mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Specializations {
    /// Rows in the pattern live in a static, never-evicted contiguous process cache
    /// (arena) refreshed as whole slices. Off: they go through the generic cache.
    pub static_cache: bool,
    /// Each worker keeps a private view of the rows it updates (read with no lock; for
    /// integer tables its own updates are folded in), and rows many threads contend for
    /// get per-thread copies. Off: reads go to the shared arena and merge the worker's
    /// deltas every time.
    pub thread_caches: bool,
    /// Each worker keeps a block per row it updates (its delta, next to its view), found
    /// from the pre-resolved access sequence; the deltas go out as one slab per shard in
    /// arena order. Off: updates go through the generic per-row operation log (and there
    /// are no views).
    pub contiguous_index: bool,
    /// One pre-built refresh request per shard per clock, answered in first-use-ordered
    /// chunks. Off: the arena is refreshed chunk by chunk on demand.
    pub prefetch_batching: bool,
    /// NUMA placement: worker threads are placed on cores of the [`Config::topology`]
    /// (packed or spread over zones: [`Config::worker_placement`]) and bound to their
    /// zone's CPUs or their core's ([`Config::pinning`]), and each planned row's memory is
    /// placed in the zone of the workers that use it most. Binding happens only when the
    /// topology is this machine's. Off: threads float and memory lands wherever it is
    /// first touched.
    pub numa: bool,
    /// Locality placement, in a cluster of several processes: each row the virtual
    /// iteration saw lives on a shard of the process whose workers access it most (ties
    /// and overflow beyond [`Config::placement_imbalance`] go to the less loaded
    /// process), decided by every process alike from everyone's access counts before any
    /// value exists. Off (or rows the pattern did not see): the stable hash.
    pub placement: bool,
}

impl Specializations {
    /// Every specialization on.
    pub const ALL: Specializations = Specializations {
        static_cache: true,
        thread_caches: true,
        contiguous_index: true,
        prefetch_batching: true,
        numa: true,
        placement: true,
    };
}

impl Default for Specializations {
    fn default() -> Self {
        Specializations::ALL
    }
}

/// Settings of a cluster. Build one with [`Config::new`] and the `with_*` methods (or set
/// the public fields), then [`validate`](Config::validate) it — [`Cluster::start`]
/// validates too.
///
/// [`Cluster::start`]: crate::Cluster::start
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Config {
    /// Worker threads in this process.
    pub workers: usize,
    /// Server shards in this process (each one thread); rows are placed on shards by a
    /// hash of `(table, row)`.
    pub shards: usize,
    /// The consistency model.
    pub staleness: Staleness,
    /// Capacity of the process cache in rows (LRU eviction); `None` caches every row read.
    /// Generic mode only.
    pub cache_capacity: Option<usize>,
    /// How the access pattern is obtained and used.
    pub mode: Mode,
    /// The specializations applied in `first-iter` and `virtual` modes.
    pub specializations: Specializations,
    /// IterStore's rule: a row gets per-thread copies when (its share of all accesses) ×
    /// (number of threads touching it) is at least this, and at least two threads touch it.
    pub contention_threshold: f64,
    /// Chunks each shard's refresh is cut into (first-use order).
    pub prefetch_chunks: usize,
    /// Bytes the workers' op tapes (their pre-resolved access sequences, 4 bytes per
    /// access) may take together. A worker's accesses beyond its share of the budget take
    /// the indexed path (one look-up in the plan's index) instead of failing; `Stats`
    /// counts them. `None`: a quarter of the memory available when the plan is made
    /// (unbounded where that cannot be read).
    pub tape_budget: Option<usize>,
    /// The machine the NUMA placement plans for. `None`: this machine, as hwloc sees it
    /// (one zone without hwloc). A synthetic topology (`Topology::synthetic`) is planned
    /// for but never bound to: a dry run of the placement.
    pub topology: Option<Topology>,
    /// How worker threads are spread over the topology's zones.
    pub worker_placement: WorkerPlacement,
    /// How worker threads are bound to the CPUs of their placement (default
    /// [`Pinning::Zones`]: anywhere in their zone, and not bound on a machine of one
    /// zone).
    pub pinning: Pinning,
    /// How this process joins a cluster of processes over TCP; `None`: a one-process
    /// cluster. Every process of a cluster must have the same `workers`, `shards`,
    /// `staleness` and `mode` (checked when they connect).
    pub membership: Option<Membership>,
    /// Locality placement's allowed imbalance: no process gets more than this many times
    /// its even share of the placed rows' bytes (at least 1.0).
    pub placement_imbalance: f64,
    /// How long [`Worker::recv_from`](crate::Worker::recv_from) waits for a message
    /// before it fails naming the sender and tag. A sender that stopped with an error, or
    /// a failed cluster, ends the wait at once whatever this is.
    pub message_timeout: Duration,
    /// Whether threads that wait for the store yield their core for a moment before they
    /// sleep (default `true`): a worker for the next run (1 ms) or for another worker's
    /// update (200 µs), the caller of a run for its end (2 ms). What they wait for
    /// usually comes sooner than a sleeping thread is woken, which on a virtual machine
    /// costs tens of microseconds a time (a 220 µs PageRank iteration took 1.5x as long
    /// without).
    /// A yielding thread gives its core to any thread with work, but it does use the
    /// CPU it finds idle: turn this off on a machine shared with other jobs or under a
    /// CPU quota, where that time is counted.
    pub yield_waits: bool,
    /// How a specialized worker writes the update slabs its CLOCKs send (default
    /// [`SlabStores::Auto`]).
    pub slab_stores: SlabStores,
    /// Where this process serves its metrics for Prometheus (`GET /metrics`: worker
    /// clocks and their lag, waits, traffic per peer, queue depths, run and checkpoint
    /// durations, specialization coverage); `None` (the default): no endpoint. The
    /// address is bound when the cluster starts, which fails naming it if it cannot be;
    /// port 0 takes any free port ([`Cluster::metrics_addr`] says which). With
    /// [`Cluster::run_local_processes`], process `r` binds the port plus `r`.
    ///
    /// [`Cluster::metrics_addr`]: crate::Cluster::metrics_addr
    /// [`Cluster::run_local_processes`]: crate::Cluster::run_local_processes
    pub metrics_addr: Option<SocketAddr>,
    /// Copies of every server shard, on as many processes (default 1: the shard alone).
    /// More than one keeps backups of each shard on the next processes of a ring, each
    /// clock reaching every backup before it becomes visible (`docs/replication.md`).
    /// **A lost process is not survived yet**: promotion of a backup is not built, so
    /// backups cost time and memory and buy nothing until it is. Refused: 0, more copies
    /// than the cluster has processes, with [`Staleness::Unbounded`], and with
    /// [`Mode::FirstIter`]'s locality placement (its rows migrate after the first run);
    /// `set_rows`, resumes, branch ops, server function calls and migrations under a new
    /// placement fail naming this field while it is more than 1.
    pub shard_replicas: usize,
    /// The update rules of the application's own, by name ([`with_rule`](Config::with_rule)):
    /// every process must register the same (agreed right after joining).
    pub rules: UpdateRules,
}

/// How a specialized worker writes the update slabs its CLOCKs send to the shards
/// ([`Config::slab_stores`]). Either way the slabs hold the same bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SlabStores {
    /// Measured: the worker times its slabs (32 KiB or more) written each way, trying
    /// the way it does not use once every 32 CLOCKs, and streams while that takes less
    /// than 0.7 of the time plain stores take (when other jobs load the machine's memory,
    /// reading each slab line before writing it is what a CLOCK waits on).
    #[default]
    Auto,
    /// Plain stores (cheapest on a quiet machine: the shard reads the slab from this
    /// core's cache).
    Plain,
    /// Streaming (non-temporal) stores, which write whole lines without reading them
    /// first (x86_64; elsewhere every setting writes plainly).
    Streaming,
}

impl std::str::FromStr for SlabStores {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(SlabStores::Auto),
            "plain" => Ok(SlabStores::Plain),
            "streaming" => Ok(SlabStores::Streaming),
            _ => Err(format!(
                "slab stores '{s}' are none of 'auto', 'plain' and 'streaming'"
            )),
        }
    }
}

/// Default of [`Config::message_timeout`].
pub const MESSAGE_TIMEOUT: Duration = Duration::from_secs(120);

/// Upper bound on workers per process; far above any machine this runs on.
pub const MAX_WORKERS: usize = 1024;
/// Upper bound on server shards per process.
pub const MAX_SHARDS: usize = 256;

impl Default for Config {
    fn default() -> Self {
        Config {
            workers: 1,
            shards: 1,
            staleness: Staleness::BSP,
            cache_capacity: None,
            mode: Mode::Generic,
            specializations: Specializations::ALL,
            contention_threshold: 0.01,
            prefetch_chunks: 4,
            tape_budget: None,
            topology: None,
            worker_placement: WorkerPlacement::Packed,
            pinning: Pinning::Zones,
            membership: None,
            placement_imbalance: 1.2,
            message_timeout: MESSAGE_TIMEOUT,
            yield_waits: true,
            slab_stores: SlabStores::Auto,
            metrics_addr: None,
            shard_replicas: 1,
            rules: UpdateRules::default(),
        }
    }
}

impl Config {
    /// A BSP configuration with `workers` worker threads and one server shard.
    pub fn new(workers: usize) -> Self {
        Config {
            workers,
            ..Config::default()
        }
    }

    /// Sets the number of server shards.
    #[must_use = "a builder returns the changed settings"]
    pub fn with_shards(mut self, shards: usize) -> Self {
        self.shards = shards;
        self
    }

    /// Sets the staleness bound.
    #[must_use = "a builder returns the changed settings"]
    pub fn with_staleness(mut self, staleness: Staleness) -> Self {
        self.staleness = staleness;
        self
    }

    /// Sets the specializations (for ablation).
    #[must_use = "a builder returns the changed settings"]
    pub fn with_specializations(mut self, specializations: Specializations) -> Self {
        self.specializations = specializations;
        self
    }

    /// Sets the store mode.
    #[must_use = "a builder returns the changed settings"]
    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Bounds the process cache to `rows` rows with LRU eviction.
    #[must_use = "a builder returns the changed settings"]
    pub fn with_cache_capacity(mut self, rows: usize) -> Self {
        self.cache_capacity = Some(rows);
        self
    }

    /// Bounds the op tapes of all workers to `bytes` (see [`Config::tape_budget`]).
    #[must_use = "a builder returns the changed settings"]
    pub fn with_tape_budget(mut self, bytes: usize) -> Self {
        self.tape_budget = Some(bytes);
        self
    }

    /// Keeps `replicas` copies of every shard (see [`Config::shard_replicas`]).
    #[must_use = "a builder returns the changed settings"]
    pub fn with_shard_replicas(mut self, replicas: usize) -> Self {
        self.shard_replicas = replicas;
        self
    }

    /// Joins the cluster of processes `membership` describes (see [`Config::membership`]).
    #[must_use = "a builder returns the changed settings"]
    pub fn with_membership(mut self, membership: Membership) -> Self {
        self.membership = Some(membership);
        self
    }

    /// Plans the NUMA placement for `topology` instead of this machine (see
    /// [`Config::topology`]).
    #[must_use = "a builder returns the changed settings"]
    pub fn with_topology(mut self, topology: Topology) -> Self {
        self.topology = Some(topology);
        self
    }

    /// Sets [`Config::pinning`].
    #[must_use = "a builder returns the changed settings"]
    pub fn with_pinning(mut self, pinning: Pinning) -> Self {
        self.pinning = pinning;
        self
    }

    /// Sets [`Config::yield_waits`].
    #[must_use = "a builder returns the changed settings"]
    pub fn with_yield_waits(mut self, yield_waits: bool) -> Self {
        self.yield_waits = yield_waits;
        self
    }

    /// Sets [`Config::slab_stores`].
    #[must_use = "a builder returns the changed settings"]
    pub fn with_slab_stores(mut self, slab_stores: SlabStores) -> Self {
        self.slab_stores = slab_stores;
        self
    }

    /// Serves this process's metrics at `addr` (see [`Config::metrics_addr`]).
    #[must_use = "a builder returns the changed settings"]
    pub fn with_metrics_addr(mut self, addr: SocketAddr) -> Self {
        self.metrics_addr = Some(addr);
        self
    }

    /// Registers `rule`, an update rule of the application's own, under `name` (see
    /// [`UpdateRule`], whose docs show one): [`rule`](Config::rule) then makes a [`Rule`] of
    /// it for a table. Every process of a cluster must register the same rules — names,
    /// parameter names and state widths; a process that lacks one or declares it otherwise
    /// is refused when it joins, naming the rule and the ranks. A name that is empty,
    /// longer than [`MAX_RULE_NAME`](crate::MAX_RULE_NAME) bytes, a built-in rule's or
    /// taken is refused by [`validate`](Config::validate).
    pub fn with_rule(mut self, name: &str, rule: impl UpdateRule) -> Self {
        self.rules.register(name, rule);
        self
    }

    /// The rule registered as `name` ([`with_rule`](Config::with_rule)) with `params` (as
    /// many as it names, checked by it), for
    /// [`Cluster::create_table_with_rule`](crate::Cluster::create_table_with_rule) or
    /// [`Cluster::set_rule`](crate::Cluster::set_rule).
    pub fn rule(&self, name: &str, params: &[f64]) -> Result<Rule> {
        self.rules
            .rule(name, params)
            .map_err(|e| Error::config("rule", e))
    }

    /// Checks every setting; the error names the offending field.
    pub fn validate(&self) -> Result<()> {
        if let Some(why) = self.rules.refused() {
            return Err(Error::config("rules", why));
        }
        if self.workers == 0 || self.workers > MAX_WORKERS {
            return Err(Error::config(
                "workers",
                format!("{} is outside 1..={MAX_WORKERS}", self.workers),
            ));
        }
        if self.shards == 0 || self.shards > MAX_SHARDS {
            return Err(Error::config(
                "shards",
                format!("{} is outside 1..={MAX_SHARDS}", self.shards),
            ));
        }
        if !(self.contention_threshold >= 0.0 && self.contention_threshold.is_finite()) {
            return Err(Error::config(
                "contention_threshold",
                format!(
                    "{} is not a finite non-negative number",
                    self.contention_threshold
                ),
            ));
        }
        if self.prefetch_chunks == 0 || self.prefetch_chunks > 4096 {
            return Err(Error::config(
                "prefetch_chunks",
                format!("{} is outside 1..=4096", self.prefetch_chunks),
            ));
        }
        if self.cache_capacity == Some(0) {
            return Err(Error::config(
                "cache_capacity",
                "a capacity of 0 rows cannot hold the row being read; use None for unbounded",
            ));
        }
        if let Some(m) = &self.membership {
            m.validate()?;
        }
        if !(self.placement_imbalance >= 1.0 && self.placement_imbalance.is_finite()) {
            return Err(Error::config(
                "placement_imbalance",
                format!(
                    "{} is not a finite number of at least 1",
                    self.placement_imbalance
                ),
            ));
        }
        if self.message_timeout.is_zero() {
            return Err(Error::config("message_timeout", "must be longer than zero"));
        }
        let processes = self.membership.as_ref().map(|m| m.hosts.len());
        self.check_shard_replicas(processes)
    }

    /// Checks [`Config::shard_replicas`] for a cluster of `processes` processes (`None`:
    /// not known yet; the caller that knows checks again): what [`validate`](Self::validate)
    /// and [`Cluster::start`](crate::Cluster::start) refuse, for a launcher that knows the
    /// count before any process exists.
    pub fn check_shard_replicas(&self, processes: Option<usize>) -> Result<()> {
        let r = self.shard_replicas;
        if r == 0 {
            return Err(Error::config(
                "shard_replicas",
                "0 would keep no copy of a shard; 1 (the default) is the shard alone",
            ));
        }
        if let Some(n) = processes.filter(|&n| r > n) {
            return Err(Error::config(
                "shard_replicas",
                format!(
                    "{r} copies of each shard need {r} processes (each on its own), but the \
                     cluster has {n}"
                ),
            ));
        }
        if r > 1 && self.staleness == Staleness::Unbounded {
            return Err(Error::config(
                "shard_replicas",
                format!(
                    "{r} copies of each shard with staleness Unbounded: an asynchronous \
                     cluster steps rules in arrival order, which backups do not replay yet \
                     (docs/replication.md)"
                ),
            ));
        }
        if r > 1 && self.mode == Mode::FirstIter && self.specializations.placement {
            return Err(Error::config(
                "shard_replicas",
                format!(
                    "{r} copies of each shard with Mode::FirstIter's locality placement: its \
                     rows migrate after the first run, which backups do not follow yet (turn \
                     the placement off, or use Mode::Virtual; docs/replication.md)"
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_settings_naming_the_field() {
        let e = Config::new(0).validate().unwrap_err().to_string();
        assert!(e.contains("workers"), "{e}");
        let e = Config::new(2)
            .with_shards(0)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("shards"), "{e}");
        let e = Config::new(2)
            .with_cache_capacity(0)
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("cache_capacity"));
        assert!(Config::new(2).with_cache_capacity(10).validate().is_ok());
    }

    #[test]
    fn refuses_shard_replicas_it_cannot_keep_naming_the_field() {
        let e = Config::new(2)
            .with_shard_replicas(0)
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("shard_replicas"), "{e}");
        let too_many = Config::new(2).with_shard_replicas(3);
        let e = too_many
            .check_shard_replicas(Some(2))
            .unwrap_err()
            .to_string();
        assert!(e.contains("shard_replicas") && e.contains("has 2"), "{e}");
        // Backups are kept under SSP; an asynchronous cluster is refused, naming both.
        assert!(Config::new(2).with_shard_replicas(2).validate().is_ok());
        let e = Config::new(2)
            .with_shard_replicas(2)
            .with_staleness(Staleness::Unbounded)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("shard_replicas") && e.contains("Unbounded"),
            "{e}"
        );
        assert!(Config::new(2).check_shard_replicas(Some(1)).is_ok());
        assert_eq!(Config::new(2).shard_replicas, 1);
        // FirstIter's placement migrates rows after the first run: refused at start.
        let first_iter = Config::new(2)
            .with_shard_replicas(2)
            .with_mode(Mode::FirstIter);
        let e = first_iter.validate().unwrap_err().to_string();
        assert!(
            e.contains("shard_replicas") && e.contains("FirstIter"),
            "{e}"
        );
        let mut unplaced = first_iter.with_specializations(Specializations::ALL);
        unplaced.specializations.placement = false;
        assert!(unplaced.validate().is_ok());
    }

    #[test]
    fn parses_staleness() {
        assert_eq!("0".parse::<Staleness>(), Ok(Staleness::BSP));
        assert_eq!("async".parse::<Staleness>(), Ok(Staleness::Unbounded));
        assert!("-1".parse::<Staleness>().is_err());
    }
}
