//! [`Cluster`]: starts a one-process cluster (server shards, a communication thread, a
//! pool of persistent worker threads), creates tables, runs closures on every worker, and
//! shuts down.
//!
//! The cluster owns threads and wiring; the protocol lives in `client`, `server` and
//! `worker`, and the transport only moves messages between them.

mod checkpointing;

pub use checkpointing::Resumed;

use crate::client::{spawn_comm, ClientShared, ProcessArena};
use crate::config::{Config, Mode};
use crate::element::Element;
use crate::error::{panic_message, Error, Result};
use crate::gather::{AccessLog, AccessPattern};
use crate::ids::{Clock, ProcessId};
use crate::membership::{Membership, SHUTDOWN_TIMEOUT};
use crate::msg::{Endpoint, Msg};
use crate::net::NetConfig;
use crate::numa::{self, NumaConfig, NumaPlan, ThreadZones, WorkerPlace};
use crate::plan::{self, PlanConfig};
use crate::pool::WorkerPool;
use crate::server;
use crate::sync::lock;
use crate::table::{resolve, Registry, Table};
use crate::topology::{bind::MemBinder, Topology};
use crate::transport::{
    InProcTransport, Inbox, KindTraffic, LocalInboxes, TcpTransport, Transport,
};
use crate::worker::{AccessCounters, Kept, Role, Worker, WorkerMemory};
use crate::world::World;
use crossbeam::channel::unbounded;
use std::hash::{BuildHasher, Hasher};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the store has done so far: how rows reached the process, and what the current
/// plan holds. For observability and for tests that a specialization is really in use.
///
/// A specialized store that silently fell back to its slower paths shows here: accesses
/// of a specialized worker are counted by how they found their row (the op tape, the
/// plan's index, or the generic store for rows the plan does not hold).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Stats {
    /// Rows fetched one by one through the generic path (misses and stale rows).
    pub row_fetches: u64,
    /// Arena refresh requests sent (one per shard per batched refresh, or per chunk).
    pub arena_refreshes: u64,
    /// Batched refreshes asked for the chunks one clock of the iteration reads (each sent
    /// to every shard holding some): the prefetch the pattern's clocks allow. Refresh
    /// requests beyond these were for single chunks (reads off the pattern, or batching
    /// off).
    pub clock_refreshes: u64,
    /// Arena chunks received whole (a process's first copy of a chunk, or when most of
    /// it changed).
    pub whole_chunk_refreshes: u64,
    /// Arena chunks received as only the rows changed since this process's last copy.
    pub partial_chunk_refreshes: u64,
    /// Of the chunk refreshes (whole and partial), those this process's own shards wrote
    /// straight from their arenas into its arena, with no message and one copy.
    pub local_chunk_refreshes: u64,
    /// Update slabs (a specialized worker's CLOCK to one shard) sent whole: every row the
    /// worker may update there, zeros where untouched. Counted like `tape_accesses`.
    pub whole_slabs: u64,
    /// Update slabs sent as only the rows the worker touched (smaller than whole).
    pub partial_slabs: u64,
    /// Of the update slabs (whole and partial), those written with streaming stores
    /// ([`Config::slab_stores`](crate::Config::slab_stores)).
    pub streamed_slabs: u64,
    /// `read_update`s of specialized workers served on the fast path: the rows lent
    /// without a copy (the pattern's next accesses were theirs, their views fresh).
    pub lent_read_updates: u64,
    /// `read_update`s of specialized workers that took the general path (rows copied,
    /// then the READs and UPDATEs one by one): a view to refresh first (once per chunk
    /// and clock), or accesses off the pattern.
    pub copied_read_updates: u64,
    /// Times a worker waiting for an answer took, on its own thread, the messages queued
    /// for one of this process's shards: with several shards, the work a CLOCK releases
    /// (applying the clock's updates and the refreshes they answer) is shared this way
    /// by the waiting workers instead of done by the CLOCK's worker alone.
    pub helped_drains: u64,
    /// Rows in the current plan's static arena.
    pub planned_rows: usize,
    /// Per-thread row copies in the current plan, summed over workers.
    pub thread_cached_rows: usize,
    /// Plans made so far.
    pub plans: u32,
    /// Wall time spent building plans from gathered patterns and switching the store to
    /// them, summed over all plans (the "build" half of preprocessing).
    pub specialize_time: Duration,
    /// Accesses of specialized workers found as the next step of their op tape, with no
    /// look-up (the fast path). Counted when a run ends; init runs
    /// ([`Cluster::init_run`]) are not counted, since they write each row once rather
    /// than follow the iteration's pattern.
    pub tape_accesses: u64,
    /// Accesses of specialized workers found in the plan's index instead: they deviated
    /// from the gathered pattern, or came after the end of a tape truncated to fit
    /// [`Config::tape_budget`].
    pub indexed_accesses: u64,
    /// Accesses of specialized workers to rows the plan does not hold, served by the
    /// generic store.
    pub unplanned_accesses: u64,
    /// Accesses the current plan left off the op tapes to stay within
    /// [`Config::tape_budget`].
    pub tape_truncated: u64,
    /// Bytes held by the specialized state, by part.
    pub memory: SpecialMemory,
    /// Rows locality placement put on another shard than the hash would (0 in one
    /// process, with `placement` off, or before the first plan).
    pub placed_rows: usize,
    /// Times rows holding values moved to their locality placement (in first-iter mode,
    /// after the recorded run; 0 when placement happened before any run).
    pub migrations: u32,
    /// Bytes this process sent to other processes (frames and their headers; 0 in a
    /// one-process cluster).
    pub bytes_sent: u64,
    /// Bytes this process received from other processes.
    pub bytes_received: u64,
    /// Frames (messages and heartbeats) this process sent to other processes.
    pub frames_sent: u64,
    /// Frames this process received from other processes.
    pub frames_received: u64,
    /// Sends that found their peer's outbound queue full ([`Membership::send_queue_bytes`])
    /// and waited for it to drain: how often a slow reader held this process back.
    pub send_waits: u64,
    /// The most bytes ever queued for one peer: at most
    /// [`Membership::send_queue_bytes`] plus one message for the workers' sends, which
    /// wait for space; shards' replies never wait, and a peer whose queue they push past
    /// four times the bound is declared lost.
    pub peak_queued_bytes: u64,
}

/// The NUMA placement of a cluster ([`Cluster::numa`]): where its worker threads run, where
/// the planned rows' memory goes, and the fraction of accesses expected to reach another
/// zone's memory against the baseline of hash placement with unpinned threads.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct NumaReport {
    /// The topology planned for: `this machine`, `fallback (no hwloc)` or the synthetic
    /// description.
    pub topology: String,
    /// Zones (NUMA nodes) of the topology.
    pub zones: usize,
    /// Whether threads were really bound (only on this machine's own topology).
    pub bound: bool,
    /// Per worker: the core it is planned on (global index, topology order).
    pub worker_cores: Vec<usize>,
    /// Per worker: the zone it is planned in.
    pub worker_zones: Vec<usize>,
    /// Per worker: the CPUs (processing units, by OS index) of its planned core.
    pub planned_cpus: Vec<Vec<u32>>,
    /// Per worker: the CPUs its thread may run on, read back from the kernel
    /// (`sched_getaffinity`): `planned_cpus` when bound.
    pub worker_cpus: Vec<Vec<u32>>,
    /// Bytes placed in each zone by the current plan (arena copies, replicas, server
    /// copies, blocks, per-thread copies); empty before a plan exists.
    pub bytes_per_zone: Vec<u64>,
    /// Rows the plan replicates into another zone than their arena copy's.
    pub replicated_rows: usize,
    /// Bytes of arena chunks copied into another zone (the refresh writes every copy; a
    /// worker reads its own zone's): the chunks whose bytes are at least half rows the
    /// plan replicates there.
    pub zone_copy_bytes: usize,
    /// Per worker: the plan's rows it reads from its own zone's copy of their chunk.
    pub zone_copy_rows: Vec<usize>,
    /// Per server shard: the zone its thread runs in (bound when `bound`).
    pub shard_zones: Vec<usize>,
    /// The zone of the communication thread.
    pub comm_zone: usize,
    /// Bytes of the process arena bound to the zone of their chunk's rows (hwloc area
    /// binding before the first touch; 0 where it is unsupported or nothing is bound).
    pub arena_bound_bytes: usize,
    /// Expected fraction of an iteration's accesses that reach another zone's memory
    /// under this plan (`None` before a plan exists).
    pub remote_fraction: Option<f64>,
    /// The same for hash placement with unpinned threads, same pattern and topology.
    pub baseline_remote_fraction: Option<f64>,
}

/// Bytes held by the parts of the specialized state (heap buffers, by capacity). The
/// `gathered_*` parts are what existed when the pattern was gathered, before planning;
/// the others are the current state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[non_exhaustive]
pub struct SpecialMemory {
    /// The workers' access logs when gathering ended (freed as they are merged).
    pub gathered_logs: usize,
    /// The merged pattern before planning, with every worker's access sequence.
    pub gathered_pattern: usize,
    /// The pattern kept after planning: per-row summaries only (its sequences became the
    /// op tapes).
    pub pattern: usize,
    /// The plan: slots, spans, the read-only index, per-worker update and copy layouts.
    pub plan: usize,
    /// The workers' op tapes: 4 bytes per access of an iteration. The only per-access
    /// state kept while iterating.
    pub tapes: usize,
    /// The workers' blocks (per updated row: header, view, delta).
    pub blocks: usize,
    /// Each worker's table of the plan's slots resolved for it.
    pub slot_tables: usize,
    /// Per-thread copies of contended rows.
    pub thread_copies: usize,
    /// Sent blocks kept for read-my-writes under SSP.
    pub sent_blocks: usize,
    /// The process arena (every planned row, plus per-chunk clocks and versions).
    pub process_arena: usize,
    /// The server shards' arena of the same rows.
    pub server_arenas: usize,
}

impl SpecialMemory {
    /// Bytes of the current state (every part but the `gathered_*` ones).
    pub fn current(&self) -> usize {
        self.pattern
            + self.plan
            + self.tapes
            + self.blocks
            + self.slot_tables
            + self.thread_copies
            + self.sent_blocks
            + self.process_arena
            + self.server_arenas
    }
}

/// A running cluster. Dropping it shuts it down.
pub struct Cluster {
    id: u64,
    config: Config,
    registry: Registry,
    shared: Arc<ClientShared>,
    transport: Arc<dyn Transport>,
    /// Runs every process has ended so far (the run barrier's count).
    runs: u64,
    /// The clock the next run starts at, agreed at the last run barrier.
    start_clock: Clock,
    /// All-gathers done so far.
    gathers: u64,
    threads: Threads,
    /// The worker threads, alive as long as the cluster.
    pool: WorkerPool,
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
    /// Whether a worker done with its part of a run stays to help the last one
    /// ([`ClientShared::help_while`]): only where there is something to take (several
    /// shards in this process, driven by the threads that send to them:
    /// [`Transport::helps`]) and the workers do not outnumber the CPUs this process may
    /// use, where a waiting helper would take a running worker's core (PageRank with 8
    /// workers on 2 cores was 5-11 % slower with it).
    help_at_run_end: bool,
    /// Zones of the shard threads and the communication thread (fixed at start).
    thread_zones: ThreadZones,
    /// Binds the process arena's chunks to their zones (when threads are bound).
    binder: Option<MemBinder>,
    /// Bytes of the current process arena bound to a zone.
    arena_bound_bytes: usize,
    /// The NUMA plan of the current specialized plan.
    numa: Option<NumaPlan>,
    /// Per worker: its specialized state (or the op tape to build it from), kept between
    /// runs.
    specials: Vec<Mutex<Kept>>,
    /// Runs and virtual iterations so far (every process counts the same ones).
    rounds: u64,
    pattern: Option<AccessPattern>,
    /// How specialized workers' accesses found their rows, summed over finished runs.
    counters: AccessCounters,
    /// Accesses the current plan left off the tapes.
    tape_truncated: u64,
    /// Bytes of the logs and of the merged pattern when the pattern was last gathered.
    gathered: (usize, usize),
    /// Number of plans made so far (the current plan's id).
    plans: u32,
    /// Migrations of rows holding values to their locality placement.
    migrations: u32,
    /// Time spent in [`Cluster::specialize`] so far.
    specialize_time: Duration,
    /// In first-iter mode: record the next run (the first real iteration) and specialize.
    gather_next: bool,
    /// Whether the tables were restored from a checkpoint ([`Cluster::resume`]).
    resumed: bool,
    down: bool,
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
    /// Validates `config` and starts a one-process cluster: `config.shards` server shard
    /// threads, a communication thread and `config.workers` worker threads, which live
    /// as long as the cluster: every [`run`](Self::run) uses the same threads.
    pub fn start(config: Config) -> Result<Cluster> {
        config.validate()?;
        if let Some(m) = config.membership.clone() {
            return Self::join(config, m);
        }
        let world = World::single(config.workers, config.shards);
        let (transport, shard_inboxes, mut client_inboxes) = InProcTransport::new(1, config.shards);
        let inbox = client_inboxes.remove(0);
        Self::start_process(
            config,
            world,
            0,
            Arc::new(transport),
            shard_inboxes,
            inbox,
            Binding::After(0),
        )
    }

    /// Joins the cluster of processes `m` describes over TCP: connects to and
    /// authenticates every other process (within `m.connect_timeout`), then starts this
    /// process's threads.
    fn join(config: Config, m: Membership) -> Result<Cluster> {
        let world = World {
            processes: m.hosts.len(),
            workers: config.workers,
            shards: config.shards,
        };
        let rank = m.rank as ProcessId;
        let (shard_tx, shard_rx): (Vec<_>, Vec<_>) =
            (0..config.shards).map(|_| unbounded()).unzip();
        let (client_tx, client_rx) = unbounded();
        let mut net = NetConfig::new(
            rank,
            m.hosts.clone(),
            cluster_id(&config, &m),
            m.secret.bytes().to_vec(),
        );
        net.connect_timeout = m.connect_timeout;
        net.heartbeat_interval = m.heartbeat_interval;
        net.heartbeat_timeout = m.heartbeat_timeout;
        net.queue_bytes = m.send_queue_bytes;
        let local = LocalInboxes {
            shards: shard_tx,
            client: client_tx,
        };
        let what = format!(
            "joining the cluster as process {rank} of {}",
            world.processes
        );
        let transport = TcpTransport::start(net, world, local).map_err(|e| {
            let mut message = e.to_string();
            if message.contains("cluster id") {
                message.push_str(
                    " (every process must run with the same hosts, workers, shards, staleness, \
                     mode and specializations)",
                );
            }
            Error::failed(&what, message)
        })?;
        tracing::info!("{what}: connected to every process");
        // The processes before this one on the same machine have taken their workers'
        // cores already.
        let binding = Binding::After(colocated_before(&m) * config.workers);
        Self::start_process(
            config,
            world,
            rank,
            Arc::new(transport),
            shard_rx,
            client_rx,
            binding,
        )
    }

    /// Runs `f` on each of `processes` processes' worth of cluster — each with
    /// `config.workers` worker threads and `config.shards` shards — started in this OS
    /// process and joined by the in-process transport, each process on its own thread.
    /// Returns the results in rank order. Every process shuts down when its `f` returns.
    ///
    /// It runs exactly the protocol a cluster of OS processes runs (ranks, global worker
    /// ids, tables agreed by name, run barriers, coordinated shutdown), without a network:
    /// use it to check that an application computes the same on P processes as on one,
    /// as iterstore's own tests do. As with processes, every process must create the same
    /// tables in the same order and do the same sequence of runs; a process whose `f`
    /// fails makes the others fail rather than wait for it.
    ///
    /// ```
    /// use iterstore::{Cluster, Config};
    ///
    /// # fn main() -> iterstore::Result<()> {
    /// let sums = Cluster::run_local_processes(Config::new(2), 2, |cluster| {
    ///     let t = cluster.create_table::<i64>("t", 1)?;
    ///     cluster.run(|w| {
    ///         w.update(&t, 0, &[w.id() as i64])?;
    ///         w.clock()
    ///     })?;
    ///     Ok(cluster.snapshot(&t)?[0].1[0])
    /// })?;
    /// assert_eq!(sums, vec![6, 6]); // workers 0..4 over two processes
    /// # Ok(())
    /// # }
    /// ```
    pub fn run_local_processes<R, F>(config: Config, processes: usize, f: F) -> Result<Vec<R>>
    where
        R: Send,
        F: Fn(&mut Cluster) -> Result<R> + Sync,
    {
        config.validate()?;
        if processes == 0 {
            return Err(Error::config("processes", "must be at least 1"));
        }
        if config.membership.is_some() {
            return Err(Error::config(
                "membership",
                "run_local_processes joins its processes in this OS process; leave membership unset",
            ));
        }
        let world = World {
            processes,
            workers: config.workers,
            shards: config.shards,
        };
        let (transport, mut shard_inboxes, client_inboxes) =
            InProcTransport::new(processes, world.total_shards());
        let transport: Arc<dyn Transport> = Arc::new(transport);
        let mut clusters = Vec::with_capacity(processes);
        for (rank, inbox) in client_inboxes.into_iter().enumerate() {
            let shards: Vec<Inbox> = shard_inboxes.drain(..config.shards).collect();
            let rank = rank as ProcessId;
            let cluster = Self::start_process(
                config.clone(),
                world,
                rank,
                transport.clone(),
                shards,
                inbox,
                if processes == 1 {
                    Binding::After(0)
                } else {
                    Binding::Never
                },
            );
            match cluster {
                Ok(c) => clusters.push(c),
                Err(e) => {
                    for c in &mut clusters {
                        c.shared
                            .fail(Error::failed(format!("process {rank}"), "did not start"));
                    }
                    return Err(e);
                }
            }
        }
        let f = &f;
        let outcomes: Vec<Result<R>> = std::thread::scope(|scope| {
            let handles: Vec<_> = clusters
                .into_iter()
                .map(|mut cluster| {
                    scope.spawn(move || {
                        let result = f(&mut cluster);
                        if result.is_err() {
                            // The others fail rather than wait at a barrier for this one.
                            cluster.shared.fail(Error::failed(
                                format!("process {}", cluster.rank()),
                                "its application code failed",
                            ));
                        }
                        let down = cluster.shutdown();
                        result.and_then(|r| down.map(|()| r))
                    })
                })
                .collect();
            handles
                .into_iter()
                .enumerate()
                .map(|(rank, h)| {
                    h.join().unwrap_or_else(|payload| {
                        Err(Error::failed(
                            format!("process {rank}"),
                            panic_message(payload.as_ref()),
                        ))
                    })
                })
                .collect()
        });
        // The first cause, not the secondary failures it caused in the others.
        let mut results = Vec::with_capacity(processes);
        let mut first: Option<Error> = None;
        for outcome in outcomes {
            match outcome {
                Ok(r) => results.push(r),
                Err(e) => {
                    if first.as_ref().is_none_or(is_secondary) {
                        first = Some(e);
                    }
                }
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(results),
        }
    }

    /// Starts process `rank` of a cluster shaped `world`: its worker pool, its shards
    /// (fed by `shard_inboxes`) and its communication thread (fed by `client_inbox`).
    /// Threads are bound only if `binding` allows it and the NUMA placement applies.
    fn start_process(
        config: Config,
        world: World,
        rank: ProcessId,
        transport: Arc<dyn Transport>,
        shard_inboxes: Vec<Inbox>,
        client_inbox: Inbox,
        binding: Binding,
    ) -> Result<Cluster> {
        // Before any thread is bound: hwloc reads the CPUs this process may use.
        let topology = config.topology.clone().unwrap_or_else(Topology::detect);
        let zones = topology.zones().len();
        let numa_on = config.mode != Mode::Generic && config.specializations.numa;
        // Processes sharing this machine take cores one after another, not all the first.
        let skip = match binding {
            Binding::After(n) => n,
            Binding::Never => 0,
        };
        let places: Vec<WorkerPlace> =
            numa::place_workers(&topology, skip + config.workers, config.worker_placement)
                .split_off(skip);
        // Binding on a topology other than this machine's would silently do nothing.
        let bound = binding != Binding::Never && numa_on && topology.is_this_machine();
        let pus: Vec<Vec<u32>> = places.iter().map(|p| p.pus.clone()).collect();
        // First, so that a failure here leaves no other thread behind.
        let mut pool = WorkerPool::start(config.workers, config.yield_waits)?;
        let worker_cpus = pool.pin(bound.then_some(pus.as_slice()))?;
        // Shard and communication threads go to zones the workers use, fixed now.
        let thread_zones = numa::thread_zones(&places, config.shards);
        let zone_pus = |z: usize| bound.then(|| topology.zones()[z].pus());
        let shared = Arc::new(ClientShared::new(
            rank,
            world,
            config.clone(),
            transport.clone(),
        ));
        let mut threads = Threads {
            shutdown_timeout: (config.membership.as_ref())
                .map_or(SHUTDOWN_TIMEOUT, |m| m.shutdown_timeout),
            ..Threads::default()
        };
        let spawn_err = |e: std::io::Error| Error::failed("thread spawn", e);
        // This process's shards write its arena refreshes straight into its arena.
        let local_arena: std::sync::Weak<dyn server::LocalArena> = Arc::downgrade(&shared) as _;
        for (local, (id, inbox)) in world.shards_of(rank).zip(shard_inboxes).enumerate() {
            let shard = server::Shard::new(id, world).with_local_arena(rank, local_arena.clone());
            let pus = zone_pus(thread_zones.shards[local]);
            match server::spawn(shard, inbox, transport.clone(), pus) {
                Ok((t, staying)) => threads.shards.push((id, t, staying)),
                Err(e) => return Err(threads.abort(transport.as_ref(), rank, spawn_err(e))),
            }
        }
        let direct: Arc<dyn crate::transport::DirectClient> = shared.clone();
        transport.attach_client(rank, Arc::downgrade(&direct));
        let pus = zone_pus(thread_zones.comm);
        match spawn_comm(shared.clone(), client_inbox, pus) {
            Ok(t) => threads.comm = Some(t),
            Err(e) => return Err(threads.abort(transport.as_ref(), rank, spawn_err(e))),
        }
        Ok(Cluster {
            id: std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish(),
            runs: 0,
            start_clock: 0,
            gathers: 0,
            specials: (0..config.workers).map(|_| Mutex::default()).collect(),
            rounds: 0,
            pool,
            topology,
            numa_on,
            places,
            worker_cpus,
            bound,
            help_at_run_end: transport.helps()
                && shared.world.shards_of(rank).len() > 1
                && config.workers
                    <= std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            thread_zones,
            // With one zone there is nowhere else for memory to go, and binding the arena
            // there measurably slowed BSP runs (MF on MovieLens-100K, 2 workers: 1.5x per
            // iteration on this 2-core, 1-node machine), so only bind across zones.
            binder: (bound && zones > 1).then(MemBinder::new),
            arena_bound_bytes: 0,
            numa: None,
            config,
            registry: Registry::default(),
            pattern: None,
            counters: AccessCounters::default(),
            tape_truncated: 0,
            gathered: (0, 0),
            gather_next: true,
            plans: 0,
            migrations: 0,
            specialize_time: Duration::ZERO,
            shared,
            transport,
            threads,
            resumed: false,
            down: false,
        })
    }

    /// This process's rank in its cluster (0 for a one-process cluster).
    pub fn rank(&self) -> usize {
        self.shared.process as usize
    }

    /// Number of processes in the cluster.
    pub fn processes(&self) -> usize {
        self.shared.world.processes
    }

    /// The rank of the process whose shard holds row `row` of `table` (where its updates
    /// are applied and its reads served): for observability, and for applications or
    /// benchmarks that care where their rows live.
    pub fn home_of<T: Element>(&self, table: &Table<T>, row: u64) -> Result<usize> {
        resolve(self.registry.tables(), self.id, table)?;
        let shard = self.shared.placement().shard_of(table.key(row));
        Ok(shard as usize / self.shared.world.shards)
    }

    /// Worker threads in the whole cluster: `processes() * config().workers`. Worker
    /// ids ([`Worker::id`]) run over `0..total_workers()`.
    pub fn total_workers(&self) -> usize {
        self.shared.world.total_workers()
    }

    /// The configuration the cluster runs with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Creates a table of `width`-element rows of `T`. Every row starts as zeros.
    pub fn create_table<T: Element>(&mut self, name: &str, width: usize) -> Result<Table<T>> {
        self.check()?;
        self.registry.check_new(name, width)?;
        // The coordinator (shard 0, on rank 0) assigns the id, once per name.
        let declare = Msg::DeclareTable {
            from: self.shared.process,
            name: name.to_string(),
            width,
            elem: T::TYPE,
        };
        self.send(0, declare)?;
        let meta = self.shared.await_table(name)?;
        let meta = self.registry.insert(meta)?.clone();
        for shard in 0..self.shared.world.total_shards() {
            self.send(shard, Msg::CreateTable { meta: meta.clone() })?;
        }
        self.shared
            .tables
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(meta.clone());
        Ok(Table::new(self.id, &meta))
    }

    /// [`create_table`](Self::create_table) with every row of the table on the global
    /// server shards `shards` (a non-empty range of `0..processes × Config::shards`;
    /// process `p`'s shards are `p × shards ..`): for example the weights of a model on
    /// dedicated parameter-server processes. Rows hash over those shards; locality
    /// placement leaves them there. Every process must create the table with the same
    /// range: this call all-gathers it and fails naming a process that differs.
    pub fn create_table_on<T: Element>(
        &mut self,
        name: &str,
        width: usize,
        shards: std::ops::Range<usize>,
    ) -> Result<Table<T>> {
        let total = self.shared.world.total_shards();
        if shards.is_empty() || shards.end > total {
            return Err(Error::config(
                "shards",
                format!("table {name:?} on shards {shards:?}: the cluster has shards 0..{total}"),
            ));
        }
        let table = self.create_table::<T>(name, width)?;
        let mine = [
            i64::from(table.id()),
            shards.start as i64,
            shards.end as i64,
        ];
        let all = self.all_gather(&mine)?;
        if let Some(p) = all.iter().position(|other| other.as_slice() != mine) {
            return Err(Error::failed(
                format!("table {name:?}"),
                format!(
                    "process {p} put it on shards {}..{}, process {} on {shards:?}",
                    all[p].get(1).copied().unwrap_or(0),
                    all[p].get(2).copied().unwrap_or(0),
                    self.shared.process
                ),
            ));
        }
        let mut placement = (*self.shared.placement()).clone();
        placement.restrict(
            table.id(),
            shards.start as u32,
            (shards.end - shards.start) as u32,
        );
        self.shared.set_placement(placement);
        Ok(table)
    }

    /// The handle of the existing table `name`, which must hold `T`.
    pub fn table<T: Element>(&self, name: &str) -> Result<Table<T>> {
        let meta = self.registry.by_name(name)?;
        if meta.elem != T::TYPE {
            return Err(Error::TypeMismatch {
                table: name.to_string(),
                actual: meta.elem.name(),
                requested: T::TYPE.name(),
            });
        }
        Ok(Table::new(self.id, meta))
    }

    /// Every process's `values`, in rank order: a collective, which every process of the
    /// cluster must call, the same number of times and in the same order as the others
    /// (it waits for all of them). For what an application computes outside the store
    /// and the whole cluster needs, such as the sum of each worker's part of an
    /// objective: concatenating the parts in rank order gives the same sequence, and so
    /// the same floating-point sum, as one process of as many workers.
    ///
    /// ```
    /// use iterstore::{Cluster, Config};
    ///
    /// # fn main() -> iterstore::Result<()> {
    /// let all = Cluster::run_local_processes(Config::new(1), 3, |cluster| {
    ///     let mine = [cluster.rank() as f64 + 0.5];
    ///     cluster.all_gather(&mine)
    /// })?;
    /// assert_eq!(all[2], vec![vec![0.5], vec![1.5], vec![2.5]]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn all_gather<T: Element>(&mut self, values: &[T]) -> Result<Vec<Vec<T>>> {
        let parts = self.gather_round(crate::buf::AlignedBuf::from_slice(values))?;
        Ok(parts.iter().map(|b| b.cast::<T>().to_vec()).collect())
    }

    /// One all-gather round through the coordinator: every process's `values`, in rank
    /// order (the collective under [`all_gather`](Self::all_gather) and its byte form).
    pub(crate) fn gather_round(
        &mut self,
        values: crate::buf::AlignedBuf,
    ) -> Result<Vec<crate::buf::AlignedBuf>> {
        self.check()?;
        self.gathers += 1;
        let round = self.gathers;
        let from = self.shared.process;
        self.send(
            0,
            Msg::Gather {
                from,
                round,
                values,
            },
        )?;
        self.shared.await_gathered(round)
    }

    /// Runs `f` once on each of the `config.workers` worker threads and returns their
    /// results in worker order.
    ///
    /// Every worker starts at the same clock (the largest any worker reached before).
    /// When `f` returns, the worker's remaining updates are sent and it stops holding the
    /// others back. If any worker fails — `f` returns an error or panics — the others
    /// still run to completion and the first failure (by worker index) is returned.
    pub fn run<R, F>(&mut self, f: F) -> Result<Vec<R>>
    where
        R: Send,
        F: Fn(&mut Worker<'_>) -> Result<R> + Sync,
    {
        self.run_as(self.units(), |w, ()| f(w), true)
    }

    /// A [`run`](Self::run) with per-worker state: worker `w` gets `&mut states[w]`, which
    /// it keeps across runs (topic assignments, local buffers, random generators). There
    /// must be exactly one state per worker. Each state is only ever touched by its own
    /// worker, so it needs no lock.
    ///
    /// ```
    /// use iterstore::{Cluster, Config};
    ///
    /// # fn main() -> iterstore::Result<()> {
    /// let mut cluster = Cluster::start(Config::new(2))?;
    /// let t = cluster.create_table::<i64>("t", 1)?;
    /// let mut done = vec![0u32; 2]; // one counter per worker, kept across runs
    /// for _ in 0..3 {
    ///     cluster.run_with(&mut done, |w, done| {
    ///         w.update(&t, 0, &[1])?;
    ///         *done += 1;
    ///         w.clock()
    ///     })?;
    /// }
    /// assert_eq!(done, vec![3, 3]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn run_with<S, R, F>(&mut self, states: &mut [S], f: F) -> Result<Vec<R>>
    where
        S: Send,
        R: Send,
        F: Fn(&mut Worker<'_>, &mut S) -> Result<R> + Sync,
    {
        let states = self.per_worker(states.iter_mut())?;
        self.run_as(states, f, true)
    }

    /// [`init_run`](Self::init_run) with per-worker state, as [`run_with`](Self::run_with).
    pub fn init_run_with<S, R, F>(&mut self, states: &mut [S], f: F) -> Result<Vec<R>>
    where
        S: Send,
        R: Send,
        F: Fn(&mut Worker<'_>, &mut S) -> Result<R> + Sync,
    {
        let states = self.per_worker(states.iter_mut())?;
        self.run_as(states, f, false)
    }

    /// One unit input per worker.
    fn units(&self) -> Vec<()> {
        vec![(); self.config.workers]
    }

    /// `states` as one input per worker, or an error naming the mismatch.
    fn per_worker<I: ExactSizeIterator>(&self, states: I) -> Result<Vec<I::Item>> {
        if states.len() != self.config.workers {
            return Err(Error::StateCount {
                given: states.len(),
                workers: self.config.workers,
            });
        }
        Ok(states.collect())
    }

    /// A [`run`](Self::run) that writes the initial parameters: the same in every way
    /// except that `first-iter` mode never records it, so the first *ordinary* run (the
    /// first real iteration) is the one gathered. In `virtual` mode it already runs on the
    /// specialized store.
    pub fn init_run<R, F>(&mut self, f: F) -> Result<Vec<R>>
    where
        R: Send,
        F: Fn(&mut Worker<'_>) -> Result<R> + Sync,
    {
        self.run_as(self.units(), |w, ()| f(w), false)
    }

    /// [`run`](Self::run) with `inputs[w]` handed to worker `w`; `may_gather`: this run
    /// may be the one `first-iter` records.
    fn run_as<I, R, F>(&mut self, inputs: Vec<I>, f: F, may_gather: bool) -> Result<Vec<R>>
    where
        I: Send,
        R: Send,
        F: Fn(&mut Worker<'_>, I) -> Result<R> + Sync,
    {
        self.check()?;
        let start = self.start_clock;
        let gather_first = may_gather && self.config.mode == Mode::FirstIter && self.gather_next;
        let role = if gather_first {
            Role::Recording
        } else {
            Role::Normal
        };
        // An init run writes each row once rather than following the iteration's pattern:
        // how its accesses found their rows says nothing about the specialization.
        let count = may_gather;
        let outcome = self.on_workers(role, start, count, inputs, &f);
        // Every worker has finished (even a failed one), so the run can end everywhere;
        // the run's own error, if any, is the one to report.
        let ended = self.end_run();
        let (results, logs) = outcome?;
        ended?;
        if gather_first {
            // First-iteration gathering: this run was generic and logged; every update is
            // on the servers now, so the conversion loses nothing.
            self.gather_next = false;
            self.gather(logs);
            self.place_rows()?;
            self.specialize()?;
        }
        Ok(results)
    }

    /// In `first-iter` mode, makes the next [`run`](Self::run) the one whose accesses are
    /// recorded and specialized for (by default it is the first `run`; [`init_run`]s are
    /// never recorded), for example to re-gather after the pattern changed. No effect in
    /// other modes.
    ///
    /// [`init_run`]: Self::init_run
    pub fn gather_next_run(&mut self) {
        self.gather_next = self.config.mode == Mode::FirstIter;
    }

    /// Runs one **virtual iteration**: `f` (the application's own iteration code, with
    /// its CLOCKs) runs on every worker while the store only logs — reads return zeros,
    /// updates are dropped, nothing is sent and no clock advances. The merged log is the
    /// cluster's [`AccessPattern`], returned and kept ([`access_pattern`](Self::access_pattern)).
    ///
    /// Call it before initialising any parameter. `f` must not depend on values it reads
    /// to decide *which* rows it touches, or the pattern will differ from the real one
    /// (a deviating real iteration still works; it is just not specialized for).
    ///
    /// **The virtual iteration really runs `f`**, so every effect `f` has outside the
    /// store happens too, computed from zeros: a worker's local state changed here would
    /// carry those values into the real iterations (NaNs from dividing by a zero count are
    /// the usual symptom). Keep such state in per-worker states and use
    /// [`virtual_iteration_with`](Self::virtual_iteration_with), which hands `f` a
    /// throw-away copy, or skip the effect when [`Worker::is_virtual`] is `true`.
    pub fn virtual_iteration<R, F>(&mut self, f: F) -> Result<&AccessPattern>
    where
        R: Send,
        F: Fn(&mut Worker<'_>) -> Result<R> + Sync,
    {
        self.virtual_as(self.units(), |w, ()| f(w))
    }

    /// A [`virtual_iteration`](Self::virtual_iteration) of the iteration code that
    /// [`run_with`](Self::run_with) runs: worker `w` gets a *copy* of `states[w]`, dropped
    /// when it returns, so nothing the virtual iteration does to a worker's state (from
    /// the zeros it reads) reaches the real iterations.
    pub fn virtual_iteration_with<S, R, F>(&mut self, states: &[S], f: F) -> Result<&AccessPattern>
    where
        S: Clone + Send,
        R: Send,
        F: Fn(&mut Worker<'_>, &mut S) -> Result<R> + Sync,
    {
        let copies = self.per_worker(states.iter().cloned())?;
        self.virtual_as(copies, |w, mut copy| f(w, &mut copy))
    }

    /// [`virtual_iteration`](Self::virtual_iteration) with `inputs[w]` for worker `w`.
    fn virtual_as<I, R, F>(&mut self, inputs: Vec<I>, f: F) -> Result<&AccessPattern>
    where
        I: Send,
        R: Send,
        F: Fn(&mut Worker<'_>, I) -> Result<R> + Sync,
    {
        self.check()?;
        let start = self.start_clock;
        let (_, logs) = self.on_workers(Role::Virtual, start, false, inputs, &f)?;
        self.gather(logs);
        if self.config.mode == Mode::Virtual {
            self.place_rows()?;
            self.specialize()?;
        }
        Ok(self.pattern.as_ref().expect("set above"))
    }

    /// Locality placement ([`Specializations::placement`](crate::Specializations)): in a
    /// cluster of several processes, every process shares its rows' access counts with
    /// every other (an all-gather, which every process does alike) and installs the same
    /// placement. Before any run or resume no row holds a value, so nothing moves. After
    /// runs (the first-iter mode, which gathers in the first real iteration) or a resume
    /// (rows restored from a checkpoint) the rows that hold
    /// values move to their new home shards first ([`Msg::Migrate`]): every shard hands
    /// them over between runs, when every update of the last run is applied, and every
    /// process waits until every shard has finished before it goes on. Once a plan
    /// exists its rows live in the shards' arenas and stay where they are (a warning
    /// says so).
    fn place_rows(&mut self) -> Result<()> {
        if !self.config.specializations.placement || self.shared.world.processes < 2 {
            return Ok(());
        }
        if self.plans > 0 {
            tracing::warn!(
                "locality placement skipped: the rows are already planned; they keep their \
                 placement"
            );
            return Ok(());
        }
        let Some(pattern) = &self.pattern else {
            return Ok(());
        };
        let mine: Vec<i64> = pattern
            .rows()
            .iter()
            .flat_map(|r| {
                [
                    i64::from(r.key.table),
                    r.key.row as i64,
                    r.accesses() as i64,
                ]
            })
            .collect();
        let parts = self.all_gather(&mine)?;
        let tables = self.registry.tables();
        let mut uses: std::collections::BTreeMap<crate::ids::RowKey, (u64, Vec<u64>)> =
            std::collections::BTreeMap::new();
        for (p, part) in parts.iter().enumerate() {
            for r in part.chunks_exact(3) {
                let key = crate::ids::RowKey::new(r[0] as u32, r[1] as u64);
                let Some(meta) = tables.get(key.table as usize) else {
                    continue;
                };
                let entry = uses
                    .entry(key)
                    .or_insert_with(|| (meta.row_bytes() as u64, vec![0; parts.len()]));
                entry.1[p] += r[2] as u64;
            }
        }
        let uses: Vec<(crate::ids::RowKey, u64, Vec<u64>)> =
            uses.into_iter().map(|(k, (b, a))| (k, b, a)).collect();
        let hashed = self.shared.placement().without_overrides();
        if (self.runs > 0 || self.resumed) && hashed.has_restrictions() {
            // Shards migrate rows by the hash and the overrides alone: a table kept on a
            // range of shards would be moved off it.
            tracing::warn!(
                "locality placement skipped: rows holding values would have to migrate, \
                 and a table is kept on a range of shards (create_table_on)"
            );
            return Ok(());
        }
        let placed = crate::placement::by_locality(
            &hashed,
            &uses,
            self.shared.world.shards,
            self.config.placement_imbalance,
        );
        tracing::debug!(
            "locality placement: {} of {} rows moved off their hash shard",
            placed.overridden(),
            uses.len()
        );
        if self.runs > 0 || self.resumed {
            let overrides = placed.overrides();
            let rank = self.shared.process;
            for shard in self.shared.world.shards_of(rank) {
                let overrides = overrides.clone();
                self.send(
                    shard as usize,
                    Msg::Migrate {
                        from: rank,
                        overrides,
                    },
                )?;
            }
            self.shared.await_migrated()?;
            self.migrations += 1;
        }
        self.shared.set_placement(placed);
        Ok(())
    }

    /// Merges the workers' logs into the cluster's pattern, noting what they took.
    fn gather(&mut self, logs: Vec<AccessLog>) {
        let log_bytes = logs.iter().map(AccessLog::bytes).sum();
        let pattern = AccessPattern::from_logs(logs);
        self.gathered = (log_bytes, pattern.bytes());
        self.pattern = Some(pattern);
    }

    /// Builds the plan from the gathered pattern and switches the servers and this
    /// process to it. The pattern's sequences become the workers' op tapes.
    fn specialize(&mut self) -> Result<()> {
        let Some(sequences) = self.pattern.as_mut().map(AccessPattern::take_sequences) else {
            return Ok(());
        };
        let Some(pattern) = &self.pattern else {
            return Ok(());
        };
        let started = Instant::now();
        let specs = self.config.specializations;
        let workers = self.config.workers;
        let cfg = PlanConfig {
            workers,
            chunks: self.config.prefetch_chunks,
            thread_caches: specs.thread_caches && specs.static_cache,
            contention_threshold: self.config.contention_threshold,
        };
        let plan = plan::build(
            pattern,
            self.registry.tables(),
            &self.shared.placement(),
            &cfg,
        );
        let slabs = specs.static_cache && specs.contiguous_index;
        self.plans += 1;
        let (rank, world) = (self.shared.process, self.shared.world);
        for span in &plan.shards {
            let first = span.slots.start as u32;
            let in_shard = |s: &&u32| plan.slots[**s as usize].shard == span.shard;
            let updaters = if slabs {
                (0..workers)
                    .map(|w| {
                        let slots = plan.updates[w].iter().filter(in_shard).map(|s| s - first);
                        (world.worker_id(rank, w), slots.collect())
                    })
                    .collect()
            } else {
                Vec::new()
            };
            let msg = Msg::Specialize {
                from: rank,
                epoch: self.plans,
                keys: plan.slots[span.slots.clone()]
                    .iter()
                    .map(|s| s.key)
                    .collect(),
                chunk_ends: plan
                    .chunks
                    .iter()
                    .filter(|c| c.shard == span.shard)
                    .map(|c| c.slots.end as u32 - first)
                    .collect(),
                chunk_phases: plan
                    .chunks
                    .iter()
                    .zip(&plan.chunk_phases)
                    .filter(|(c, _)| c.shard == span.shard)
                    .map(|(_, &phases)| phases)
                    .collect(),
                updaters,
            };
            self.send(span.shard as usize, msg)?;
        }
        self.numa = self.numa_on.then(|| {
            let cfg = NumaConfig {
                workers,
                shards: self.config.shards,
                placement: self.config.worker_placement,
                blocks: specs.static_cache && specs.contiguous_index && specs.thread_caches,
                replicate: true,
            };
            numa::plan(
                pattern,
                &plan,
                &self.topology,
                &cfg,
                Some(&self.thread_zones),
            )
        });
        // Each arena chunk is bound, before its first touch, to the zone holding most of
        // its rows' arena copies.
        let chunk_zones: Option<Vec<u32>> = match (&self.numa, &self.binder) {
            (Some(n), Some(_)) => Some(numa::chunk_zones(n, &plan, &self.topology)),
            _ => None,
        };
        let budget = self.config.tape_budget.or_else(default_tape_budget);
        let tapes = plan::tapes(pattern, &plan, sequences, budget);
        self.tape_truncated = tapes.truncated;
        let binding = self.binder.as_ref().zip(chunk_zones.as_deref());
        // Zone copies of the chunks the NUMA plan replicates, read by the workers of
        // those zones.
        let copies = self.numa.as_ref().map(|n| numa::chunk_copies(n, &plan));
        let worker_zones: Vec<u8> = self.places.iter().map(|p| p.zone as u8).collect();
        let zone_nodes: Vec<u32> = self.topology.zones().iter().map(|z| z.os_index).collect();
        let arena = specs.static_cache.then(|| {
            let arena = ProcessArena::new(plan, self.plans, specs.prefetch_batching, binding);
            let arena = match copies {
                Some(copies) if copies.iter().any(|&m| m != 0) => {
                    let binding = self.binder.as_ref().map(|b| (b, zone_nodes.as_slice()));
                    arena.with_zone_copies(copies, worker_zones, binding)
                }
                _ => arena,
            };
            Arc::new(arena)
        });
        self.arena_bound_bytes = arena.as_ref().map_or(0, |a| a.bound_bytes);
        for (kept, tape) in self.specials.iter().zip(tapes.tapes) {
            *lock(kept) = match &arena {
                Some(arena) => Kept::Tape(arena.clone(), tape),
                None => Kept::Nothing,
            };
        }
        self.shared.set_arena(arena);
        self.specialize_time += started.elapsed();
        Ok(())
    }

    /// Counters describing what the store has done so far (see [`Stats`]). Meant for use
    /// between runs.
    pub fn stats(&self) -> Stats {
        let arena = self.shared.arena();
        let mut workers = WorkerMemory::default();
        let mut tape_in_kept = 0;
        for kept in &self.specials {
            match &*lock(kept) {
                Kept::Built(sp) => workers += sp.memory(),
                Kept::Tape(_, tape) => tape_in_kept += tape.capacity() * 4,
                Kept::Nothing => {}
            }
        }
        let (plan_bytes, arena_bytes, arena_rows) = arena.as_ref().map_or((0, 0, 0), |a| {
            (a.plan.bytes(), a.bytes(), a.plan.arena_bytes)
        });
        let memory = SpecialMemory {
            gathered_logs: self.gathered.0,
            gathered_pattern: self.gathered.1,
            pattern: self.pattern.as_ref().map_or(0, AccessPattern::bytes),
            plan: plan_bytes,
            tapes: workers.tape + tape_in_kept,
            blocks: workers.blocks,
            slot_tables: workers.slots,
            thread_copies: workers.copies,
            sent_blocks: workers.recent,
            process_arena: arena_bytes,
            server_arenas: arena_rows,
        };
        let traffic = self.transport.traffic();
        Stats {
            placed_rows: self.shared.placement().overridden(),
            migrations: self.migrations,
            bytes_sent: traffic.bytes_sent,
            bytes_received: traffic.bytes_received,
            frames_sent: traffic.frames_sent,
            frames_received: traffic.frames_received,
            send_waits: traffic.send_waits,
            peak_queued_bytes: traffic.peak_queued_bytes,
            tape_accesses: self.counters.tape,
            indexed_accesses: self.counters.indexed,
            unplanned_accesses: self.counters.unplanned,
            whole_slabs: self.counters.whole_slabs,
            partial_slabs: self.counters.partial_slabs,
            streamed_slabs: self.counters.streamed_slabs,
            lent_read_updates: self.counters.lent_read_updates,
            copied_read_updates: self.counters.copied_read_updates,
            helped_drains: self.shared.helped.load(Ordering::Relaxed),
            tape_truncated: self.tape_truncated,
            memory,
            row_fetches: self.shared.fetcher.rows_requested.load(Ordering::Relaxed),
            arena_refreshes: arena
                .as_ref()
                .map_or(0, |a| a.requests_sent.load(Ordering::Relaxed)),
            clock_refreshes: arena
                .as_ref()
                .map_or(0, |a| a.phase_requests.load(Ordering::Relaxed)),
            whole_chunk_refreshes: arena
                .as_ref()
                .map_or(0, |a| a.whole_refreshes.load(Ordering::Relaxed)),
            partial_chunk_refreshes: arena
                .as_ref()
                .map_or(0, |a| a.partial_refreshes.load(Ordering::Relaxed)),
            local_chunk_refreshes: arena
                .as_ref()
                .map_or(0, |a| a.local_refreshes.load(Ordering::Relaxed)),
            planned_rows: arena.as_ref().map_or(0, |a| a.plan.slots.len()),
            thread_cached_rows: arena
                .as_ref()
                .map_or(0, |a| a.plan.thread_cached.iter().map(Vec::len).sum()),
            plans: self.plans,
            specialize_time: self.specialize_time,
        }
    }

    /// This process's network traffic so far, by kind of protocol message: what the
    /// bytes of [`Stats::bytes_sent`] and [`Stats::bytes_received`] were spent on. A
    /// message counts as sent when it is queued for its peer (the totals in `Stats` count
    /// bytes as they are written, heartbeats included), so at a given moment the two need
    /// not agree. Empty in a one-process cluster.
    pub fn traffic(&self) -> Vec<KindTraffic> {
        self.transport.traffic_by_kind()
    }

    /// The NUMA placement (see [`NumaReport`]), or `None` when it does not apply: generic
    /// mode, or `Specializations::numa` off. Worker threads are pinned from the start;
    /// the rows' placement and the remote fractions come with the first plan.
    pub fn numa(&self) -> Option<NumaReport> {
        if !self.numa_on {
            return None;
        }
        let plan = self.numa.as_ref();
        let topology = match self.topology.source() {
            crate::topology::TopologySource::ThisMachine => "this machine".to_string(),
            crate::topology::TopologySource::Fallback => {
                "fallback (no hwloc: one zone)".to_string()
            }
            crate::topology::TopologySource::Synthetic(desc) => desc.clone(),
        };
        Some(NumaReport {
            topology,
            zones: self.topology.zones().len(),
            bound: self.bound,
            worker_cores: self.places.iter().map(|p| p.core).collect(),
            worker_zones: self.places.iter().map(|p| p.zone).collect(),
            planned_cpus: self.places.iter().map(|p| p.pus.clone()).collect(),
            worker_cpus: self.worker_cpus.clone(),
            bytes_per_zone: plan.map_or_else(Vec::new, |p| p.bytes_per_zone.clone()),
            shard_zones: self.thread_zones.shards.clone(),
            comm_zone: self.thread_zones.comm,
            arena_bound_bytes: self.arena_bound_bytes,
            replicated_rows: plan
                .map_or(0, |p| p.replicas.iter().filter(|r| !r.is_empty()).count()),
            zone_copy_bytes: self.shared.arena().map_or(0, |a| a.zone_copy_bytes()),
            zone_copy_rows: match self.shared.arena() {
                Some(arena) => (0..self.places.len())
                    .map(|w| {
                        let zone = arena.worker_zone(w);
                        arena
                            .plan
                            .slots
                            .iter()
                            .filter(|s| arena.has_copy(s.chunk, zone))
                            .count()
                    })
                    .collect(),
                None => Vec::new(),
            },
            remote_fraction: plan.map(|p| p.remote_fraction),
            baseline_remote_fraction: plan.map(|p| p.baseline_remote_fraction),
        })
    }

    /// The access pattern gathered so far, if any.
    pub fn access_pattern(&self) -> Option<&AccessPattern> {
        self.pattern.as_ref()
    }

    /// Runs `f` on every worker thread in `role`; returns results and access logs.
    fn on_workers<I, R, F>(
        &mut self,
        role: Role,
        start: Clock,
        count: bool,
        inputs: Vec<I>,
        f: &F,
    ) -> Result<(Vec<R>, Vec<AccessLog>)>
    where
        I: Send,
        R: Send,
        F: Fn(&mut Worker<'_>, I) -> Result<R> + Sync,
    {
        let (shared, tables, id) = (&*self.shared, self.registry.tables(), self.id);
        let specials = &self.specials;
        let help_at_end = self.help_at_run_end && role != Role::Virtual;
        self.rounds += 1;
        let round = self.rounds;
        // Workers of this run not yet done with their part (see the end of the closure;
        // counted only when the finished ones stay to help).
        let running = AtomicUsize::new(inputs.len());
        let outcomes = self.pool.on_each(inputs, |w, input| {
            // A virtual iteration leaves the kept state alone.
            let kept = match role {
                Role::Virtual => Kept::Nothing,
                _ => std::mem::take(&mut *lock(&specials[w])),
            };
            let mut worker = Worker::new(shared, tables, id, w, start, role, kept).in_round(round);
            let result = catch_unwind(AssertUnwindSafe(|| f(&mut worker, input)));
            if !matches!(result, Ok(Ok(_))) {
                // Whoever waits for this worker's messages stops waiting.
                shared.worker_stopped(shared.world.worker_id(shared.process, w), round);
            }
            let finished = worker.finish();
            let (kept, counters) = worker.take_kept(finished.is_ok());
            if role != Role::Virtual {
                *lock(&specials[w]) = kept;
            }
            let log = worker.take_log().unwrap_or_default();
            // Done: stay to take what the last worker's CLOCK queues on this process's
            // shards, then leave with it.
            if help_at_end {
                if running.fetch_sub(1, Ordering::AcqRel) == 1 {
                    shared.signal.notify(); // the helpers waiting below: the run is over
                } else {
                    shared.help_while(|| running.load(Ordering::Acquire) > 0);
                }
            }
            (result, finished, log, counters)
        });
        let mut results = Vec::with_capacity(outcomes.len());
        let mut logs = Vec::with_capacity(outcomes.len());
        let mut first_error: Option<Error> = None;
        for (w, outcome) in outcomes.into_iter().enumerate() {
            let result = match outcome {
                Err(payload) | Ok((Err(payload), _, _, _)) => Err(Error::WorkerPanicked {
                    worker: w,
                    message: panic_message(payload.as_ref()),
                }),
                Ok((Ok(result), finished, log, counters)) => {
                    logs.push(log);
                    if count {
                        self.counters += counters;
                    }
                    result.and_then(|r| finished.map(|_| r))
                }
            };
            match result {
                Ok(r) => results.push(r),
                Err(e) => {
                    if first_error.as_ref().is_none_or(is_secondary) {
                        first_error = Some(e);
                    }
                }
            }
        }
        // Messages of this round nobody received: an error of the run (or, after another
        // error, dropped with it), never values for a later run's receives.
        let leftovers = self.shared.mailboxes.leftovers(round);
        if let (None, Some(l)) = (&first_error, leftovers.first()) {
            first_error = Some(Error::Receive {
                worker: self.shared.world.worker_id(self.shared.process, l.to) as usize,
                from: l.from as usize,
                tag: l.tag,
                reason: format!(
                    "{} message(s) sent to it in this run were never received{}",
                    l.count,
                    match leftovers.len() {
                        1 => String::new(),
                        n => format!(" (and {} more sender/tag pairs)", n - 1),
                    }
                ),
            });
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok((results, logs)),
        }
    }

    /// The current server-side contents of `table`: every row that exists, sorted by row.
    /// Meant for use between runs (values of a run in progress may be partial).
    pub fn snapshot<T: Element>(&self, table: &Table<T>) -> Result<Vec<(u64, Vec<T>)>> {
        self.check()?;
        resolve(self.registry.tables(), self.id, table)?;
        for shard in 0..self.shared.world.total_shards() {
            self.send(
                shard,
                Msg::Dump {
                    from: self.shared.process,
                    table: table.id,
                },
            )?;
        }
        let mut rows: Vec<(u64, Vec<T>)> = self
            .shared
            .collect_dumps(self.shared.world.total_shards())?
            .into_iter()
            .map(|(k, b)| (k.row, b.cast::<T>().to_vec()))
            .collect();
        rows.sort_unstable_by_key(|(r, _)| *r);
        Ok(rows)
    }

    /// Leaves the cluster and stops this process's threads. Idempotent; later calls on
    /// the cluster return [`Error::ShutDown`].
    ///
    /// Shutdown is coordinated: this process tells every shard it leaves, and its own
    /// shards keep serving the others until every process has left them (so no process
    /// stops shards that others still use), within [`Membership::shutdown_timeout`]
    /// ([`SHUTDOWN_TIMEOUT`] by default); past it, the error names the processes that had
    /// not left. A cluster that
    /// has failed stops its threads at once.
    pub fn shutdown(&mut self) -> Result<()> {
        if self.down {
            return Ok(());
        }
        self.down = true;
        let rank = self.shared.process;
        for shard in 0..self.shared.world.total_shards() {
            // Best effort: a failed cluster still tells the others it is gone.
            let _ = self
                .transport
                .send(Endpoint::Shard(shard as u32), Msg::Leave { from: rank });
        }
        let failed = self.shared.has_failed();
        // A process lost while this one waits for the others to leave ends the wait.
        let shared = &self.shared;
        let gave_up = || shared.has_failed();
        let mut result = self
            .threads
            .stop(self.transport.as_ref(), rank, failed, &gave_up);
        if let Err(e) = self.transport.close() {
            tracing::warn!("process {rank}: closing the network: {e}");
        }
        if !failed && (result.is_ok() || self.shared.has_failed()) {
            // The cause (a lost process), rather than that its shards were not released;
            // this process's own stop is no cause.
            match self.shared.check() {
                Err(Error::ShutDown) | Ok(()) => {}
                Err(cause) => result = Err(cause),
            }
        }
        match result {
            Err(Error::ShutDown) => Ok(()),
            other => other,
        }
    }

    fn check(&self) -> Result<()> {
        if self.down {
            return Err(Error::ShutDown);
        }
        self.shared.check()
    }

    fn send(&self, shard: usize, msg: Msg) -> Result<()> {
        self.shared.send(Endpoint::Shard(shard as u32), msg)
    }

    /// Ends the current run at every shard and waits until every process has ended it:
    /// then all updates are applied, and the shards agree on the next run's start clock.
    fn end_run(&mut self) -> Result<()> {
        let run = self.runs + 1;
        for shard in 0..self.shared.world.total_shards() {
            let from = self.shared.process;
            self.send(shard, Msg::RunEnd { from, run })?;
        }
        self.start_clock = self.shared.await_run_ready(run)?;
        self.runs = run;
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// A process's shard threads and communication thread.
#[derive(Default)]
struct Threads {
    shards: Vec<(u32, JoinHandle<()>, server::Staying)>,
    comm: Option<JoinHandle<()>>,
    /// How long `stop` waits for the other processes to leave the shards.
    shutdown_timeout: Duration,
}

impl Threads {
    /// Stops and joins every thread after a failed start; returns `error`.
    fn abort(&mut self, transport: &dyn Transport, rank: ProcessId, error: Error) -> Error {
        let _ = self.stop(transport, rank, true, &|| true);
        error
    }

    /// Waits for the shard threads to be released by every process (at once if
    /// `now`, else within `shutdown_timeout` or until `give_up()`), then stops the
    /// communication thread.
    fn stop(
        &mut self,
        transport: &dyn Transport,
        rank: ProcessId,
        now: bool,
        give_up: &dyn Fn() -> bool,
    ) -> Result<()> {
        let deadline = Instant::now()
            + if now {
                Duration::ZERO
            } else {
                self.shutdown_timeout
            };
        let mut result = Ok(());
        while self.shards.iter().any(|(_, t, _)| !t.is_finished())
            && Instant::now() < deadline
            && !give_up()
        {
            std::thread::sleep(Duration::from_millis(2));
        }
        let now = now || give_up();
        for (id, t, staying) in self.shards.drain(..) {
            if !t.is_finished() {
                if !now && result.is_ok() {
                    let names: Vec<String> = staying.get().iter().map(|p| p.to_string()).collect();
                    result = Err(Error::failed(
                        format!("server shard {id} (process {rank})"),
                        format!(
                            "process(es) {} did not leave it within {:.1} s (still running, \
                             or stopped without shutting down)",
                            names.join(", "),
                            self.shutdown_timeout.as_secs_f64()
                        ),
                    ));
                }
                let _ = transport.stop_local(Endpoint::Shard(id));
            }
            if let Err(payload) = t.join() {
                let name = format!("server shard {id}");
                result = result.and(Err(Error::failed(name, panic_message(payload.as_ref()))));
            }
        }
        if let Some(t) = self.comm.take() {
            let _ = transport.stop_local(Endpoint::Client(rank));
            if let Err(payload) = t.join() {
                let name = format!("client communication thread {rank}");
                result = result.and(Err(Error::failed(name, panic_message(payload.as_ref()))));
            }
        }
        result
    }
}

/// The default [`Config::tape_budget`]: a quarter of the memory available now, or none if
/// that cannot be read.
fn default_tape_budget() -> Option<usize> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024) / 4)
}

/// Whether and where a process may pin its worker threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Binding {
    /// Not at all (several processes' worth of threads in one OS process).
    Never,
    /// On the cores after the first `n` in placement order (taken by the processes of
    /// the cluster that share this machine and come before this one).
    After(usize),
}

/// How many ranks before `m.rank` run on this process's machine: the same IP address,
/// or both on loopback. (Processes in separate network namespaces of one machine have
/// different addresses and are not detected; run them with `--numa off`.)
fn colocated_before(m: &Membership) -> usize {
    let me = m.hosts[m.rank].ip();
    m.hosts[..m.rank]
        .iter()
        .filter(|a| a.ip() == me || (a.ip().is_loopback() && me.is_loopback()))
        .count()
}

/// The id a cluster's processes check in their handshake: a digest of what they must
/// agree on (protocol version, hosts, workers, shards, staleness, mode, specializations
/// and the placement imbalance, which decide which collectives they run), so a process
/// started with other settings is refused before any work starts.
fn cluster_id(config: &Config, m: &Membership) -> u64 {
    let agreed = format!(
        "iterstore protocol 1|{:?}|workers {}|shards {}|staleness {:?}|mode {}|{:?}|{}",
        m.hosts,
        config.workers,
        config.shards,
        config.staleness,
        config.mode.name(),
        config.specializations,
        config.placement_imbalance
    );
    // FNV-1a: stable across builds and platforms.
    agreed.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Errors that are consequences of another failure rather than causes.
fn is_secondary(e: &Error) -> bool {
    matches!(e, Error::ShutDown | Error::Failed { .. })
}
