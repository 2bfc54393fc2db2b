//! Starting a process of a cluster: [`Cluster::start`] (a process alone, or joining over
//! TCP the processes its [`Membership`] names), [`Cluster::run_local_processes`]
//! (several processes' worth of cluster in this OS process, joined by the in-process
//! transport), and the start they share: the worker pool pinned to its planned cores,
//! the server shards and the communication thread spawned in their zones, the metrics
//! endpoint bound first and served last, and the [`Cluster`] put together. Also the cluster id the processes check in their handshake.
//!
//! It decides what runs where at start and nothing after: the protocol is the shards'
//! and the client's, the wiring `transport`'s and `net`'s, the placement of threads
//! `numa`'s, and what the threads do later (runs, plans, shutdown) the other files'.

use super::metrics::{self, MetricsServer};
use super::runs::is_secondary;
use super::shutdown::Threads;
use super::{Cluster, Machine, Runs, Specialization};
use crate::client::{spawn_comm, ClientShared};
use crate::config::{Config, Mode};
use crate::consistency::Staleness;
use crate::error::{panic_message, Error, Result};
use crate::ids::ProcessId;
use crate::membership::{Membership, SHUTDOWN_TIMEOUT};
use crate::net::NetConfig;
use crate::numa::{self, WorkerPlace};
use crate::pinning;
use crate::pool::WorkerPool;
use crate::server;
use crate::table::Registry;
use crate::topology::{bind::MemBinder, Topology};
use crate::transport::{
    ClientInbox, InProcTransport, LocalInboxes, ShardInbox, TcpTransport, Transport,
};
use crate::world::World;
use crossbeam::channel::unbounded;
use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

impl Cluster {
    /// Validates `config` and starts a one-process cluster: `config.shards` server shard
    /// threads, a communication thread and `config.workers` worker threads, which live
    /// as long as the cluster: every [`run`](Self::run) uses the same threads.
    pub fn start(config: Config) -> Result<Cluster> {
        if config.membership.is_none() {
            config.check_shard_replicas(Some(1))?;
        }
        config.validate()?;
        // First: an address that cannot be bound fails the start before any work.
        let metrics = metrics::bind(&config, 0)?;
        if let Some(m) = config.membership.clone() {
            return Self::join(config, m, metrics);
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
        )?
        .serve_metrics(metrics)
    }

    /// Joins the cluster of processes `m` describes over TCP: connects to and
    /// authenticates every other process (within `m.connect_timeout`), then starts this
    /// process's threads.
    fn join(config: Config, m: Membership, metrics: Option<TcpListener>) -> Result<Cluster> {
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
            cluster_id(&m),
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
                    " (every process must run with the same protocol version and hosts file)",
                );
            }
            Error::failed(&what, message)
        })?;
        tracing::info!("{what}: connected to every process");
        // The processes before this one on the same machine have taken their workers'
        // cores already.
        let binding = Binding::After(colocated_before(&m) * config.workers);
        let settings = agreed_settings(&config);
        let mut cluster = Self::start_process(
            config,
            world,
            rank,
            Arc::new(transport),
            shard_rx,
            client_rx,
            binding,
        )?
        .serve_metrics(metrics)?;
        // Before anything else, every process checks that the others run with the same
        // store settings, naming the one that differs. On a difference the process leaves
        // without a word to any shard: where the shards live is one of the settings.
        let pairs: Vec<(&str, &str)> = settings.iter().map(|(n, v)| (*n, v.as_str())).collect();
        match cluster.agree(&pairs) {
            Ok(()) => Ok(cluster),
            Err(e) => {
                cluster.abandon();
                Err(match e {
                    Error::Disagreement { field, detail } => Error::config(
                        "processes",
                        format!(
                            "the processes of the cluster run with different settings: {field} differs ({detail}); every process must run with the same workers, shards, staleness, mode, specializations, shard replicas and update rules (Config::with_rule)"
                        ),
                    ),
                    other => other,
                })
            }
        }
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
        if processes == 0 {
            return Err(Error::config("processes", "must be at least 1"));
        }
        config.check_shard_replicas(Some(processes))?;
        config.validate()?;
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
        let mut endpoints = (0..processes)
            .map(|rank| metrics::bind(&config, rank))
            .collect::<Result<Vec<_>>>()?
            .into_iter();
        let (transport, mut shard_inboxes, client_inboxes) =
            InProcTransport::new(processes, world.total_shards());
        let transport: Arc<dyn Transport> = Arc::new(transport);
        let mut clusters = Vec::with_capacity(processes);
        for (rank, inbox) in client_inboxes.into_iter().enumerate() {
            let shards: Vec<ShardInbox> = shard_inboxes.drain(..config.shards).collect();
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
            )
            .and_then(|c| c.serve_metrics(endpoints.next().flatten()));
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

    /// Serves this process's metrics on `listener`, if given, from a thread of its own.
    fn serve_metrics(mut self, listener: Option<TcpListener>) -> Result<Cluster> {
        if let Some(listener) = listener {
            let registry = metrics::registry(
                self.shared.clone(),
                self.transport.clone(),
                self.metrics.clone(),
            );
            let server = MetricsServer::spawn(listener, registry, self.shared.process)
                .map_err(|e| Error::failed("metrics endpoint", e))?;
            self.threads.metrics = Some(server);
        }
        Ok(self)
    }

    /// Starts process `rank` of a cluster shaped `world`: its worker pool, its shards
    /// (fed by `shard_inboxes`) and its communication thread (fed by `client_inbox`).
    /// Threads are bound only if `binding` allows it and the NUMA placement applies.
    fn start_process(
        config: Config,
        world: World,
        rank: ProcessId,
        transport: Arc<dyn Transport>,
        shard_inboxes: Vec<ShardInbox>,
        client_inbox: ClientInbox,
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
        // Binding on a topology other than this machine's would silently do nothing; on
        // one zone, pinning to zones binds nothing (the zone is every CPU).
        let bound = binding != Binding::Never
            && numa_on
            && topology.is_this_machine()
            && config.pinning.binds(&topology);
        let bound_cpus = pinning::bound_cpus(&topology, &places, config.pinning);
        // First, so that a failure here leaves no other thread behind.
        let mut pool = WorkerPool::start(config.workers, config.yield_waits)?;
        let worker_cpus = pool.pin(bound.then_some(bound_cpus.as_slice()))?;
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
        let functions = Arc::new(server::functions::Functions::default());
        let update_rules = Arc::new(config.rules.clone());
        for (local, (id, inbox)) in world.shards_of(rank).zip(shard_inboxes).enumerate() {
            let shard = server::Shard::new(id, world)
                .with_replicas(config.shard_replicas)
                .with_local_arena(rank, local_arena.clone())
                .with_functions(functions.clone())
                .with_update_rules(update_rules.clone())
                .stepping_on_arrival(config.staleness == Staleness::Unbounded);
            let pus = zone_pus(thread_zones.shards[local]);
            match server::spawn(shard, inbox, transport.clone(), pus) {
                Ok((t, staying)) => threads.shards.push((id, t, staying)),
                Err(e) => return Err(threads.abort(transport.as_ref(), rank, spawn_err(e))),
            }
        }
        let direct: Arc<dyn crate::transport::DirectClient> = shared.clone();
        if let Some(drive) = transport.local_drive() {
            drive.attach_client(rank, Arc::downgrade(&direct));
        }
        let pus = zone_pus(thread_zones.comm);
        match spawn_comm(shared.clone(), client_inbox, pus) {
            Ok(t) => threads.comm = Some(t),
            Err(e) => return Err(threads.abort(transport.as_ref(), rank, spawn_err(e))),
        }
        let help_at_end = transport.local_drive().is_some()
            && shared.world.shards_of(rank).len() > 1
            && config.workers
                <= std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        Ok(Cluster {
            id: std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish(),
            registry: Registry::default(),
            runs: Runs {
                help_at_end,
                ..Runs::default()
            },
            spec: Specialization {
                gather_next: true,
                kept: (0..config.workers).map(|_| Mutex::default()).collect(),
                ..Specialization::default()
            },
            machine: Machine {
                topology,
                numa_on,
                places,
                worker_cpus,
                bound,
                pinning: config.pinning,
                thread_zones,
                // With one zone there is nowhere else for memory to go, and binding the
                // arena there measurably slowed BSP runs (MF on MovieLens-100K, 2 workers:
                // 1.5x per iteration on this 2-core, 1-node machine), so only bind across
                // zones.
                binder: (bound && zones > 1).then(MemBinder::new),
                arena_bound_bytes: 0,
                numa: None,
            },
            config,
            shared,
            transport,
            pool,
            threads,
            metrics: Arc::default(),
            down: false,
            diagnostics: Default::default(),
            functions,
            branches: Default::default(),
            recovery: None,
        })
    }
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

/// What every process of a cluster must run with alike, by name: the settings that decide
/// which collectives they run and how rows and workers are numbered (agreed right after
/// joining, by [`Cluster::agree`]).
fn agreed_settings(config: &Config) -> Vec<(&'static str, String)> {
    vec![
        ("workers", config.workers.to_string()),
        ("shards", config.shards.to_string()),
        ("staleness", format!("{:?}", config.staleness)),
        ("mode", config.mode.name().to_string()),
        ("specializations", format!("{:?}", config.specializations)),
        (
            "placement imbalance",
            config.placement_imbalance.to_string(),
        ),
        ("shard replicas", config.shard_replicas.to_string()),
        ("update rules", config.rules.declarations()),
    ]
}

/// The id a cluster's processes check in their handshake: a digest of the protocol
/// version and the hosts, so a process of another build or another cluster is refused
/// before any message. The store settings are agreed next, by name ([`agreed_settings`]).
fn cluster_id(m: &Membership) -> u64 {
    let agreed = format!("iterstore protocol 2|{:?}", m.hosts);
    // FNV-1a: stable across builds and platforms.
    agreed.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
