//! What the cluster reports about itself: the report types [`Stats`] (how rows reached
//! this process, and what the current plan holds), [`SpecialMemory`] (bytes of the
//! specialized state by part) and [`NumaReport`] (where threads and memory went), all
//! serializable ([`Serialize`]) for the applications' reports; and the calls that fill them
//! between runs: [`Cluster::stats`], [`Cluster::traffic`], [`Cluster::update_bytes`],
//! [`Cluster::numa`] and [`Cluster::access_pattern`].
//!
//! It only reads counters kept elsewhere (by the client, the transport, the arena and
//! the other files of the cluster) and changes nothing the store does.

use super::Cluster;
use crate::gather::AccessPattern;
use crate::pinning::{self, Pinning};
use crate::sync::lock;
use crate::topology::TopologySource;
use crate::transport::KindTraffic;
use crate::worker::{KeptState, WorkerMemory};
use serde::Serialize;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The bytes of UPDATEs sent to one table ([`Cluster::update_bytes`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableUpdates {
    /// The table's name.
    pub table: String,
    /// Bytes of its UPDATEs sent by this process's workers.
    pub bytes: u64,
}

/// What the store has done so far: how rows reached the process, and what the current
/// plan holds. For observability and for tests that a specialization is really in use.
///
/// A specialized store that silently fell back to its slower paths shows here: accesses
/// of a specialized worker are counted by how they found their row (the op tape, the
/// plan's index, or the generic store for rows the plan does not hold).
///
/// It serializes (serde) as a map of its fields under the names here, `memory` as a
/// nested map and `specialize_time` as serde's `Duration`: `{"secs": .., "nanos": ..}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
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
    /// Of those, the rows of tables with a server-side update rule
    /// ([`Rule`](crate::Rule)): their shards fold the slabs' deltas into gradients and
    /// step them per clock, as they step the rows sent the generic way.
    pub planned_rule_rows: usize,
    /// Per-thread row copies in the current plan, summed over workers.
    pub thread_cached_rows: usize,
    /// Workers of the current plan whose blocks hold views (private snapshots) of the rows
    /// they update: those that read them more than once a clock on average, with thread
    /// caches on; the others read those rows from the arena. 0 without a plan.
    pub view_workers: usize,
    /// Plans made so far.
    pub plans: u32,
    /// Wall time spent building plans from gathered patterns and switching the store to
    /// them, summed over all plans (the "build" half of preprocessing).
    pub specialize_time: Duration,
    /// How many kinds of diagnostic the store has said: things it could not do as asked
    /// (a virtual iteration outside virtual mode specializes nothing; a virtual-mode run
    /// before any virtual iteration runs generic; a recorded iteration without a CLOCK).
    /// Their messages are [`Cluster::diagnostics`]; each is also logged once (through
    /// `tracing`, or on standard error when no subscriber is installed).
    pub diagnostics: u32,
    /// Accesses of specialized workers found as the next step of their op tape, with no
    /// look-up (the fast path). Counted when a run ends; init runs
    /// ([`Cluster::init_run`]) are not counted, since they write each row once rather
    /// than follow the iteration's pattern.
    pub tape_accesses: u64,
    /// Accesses of specialized workers found in the plan's index instead: they deviated
    /// from the gathered pattern, or came after the end of a tape truncated to fit
    /// [`Config::tape_budget`](crate::config::Config::tape_budget).
    pub indexed_accesses: u64,
    /// Accesses of specialized workers to rows the plan does not hold, served by the
    /// generic store.
    pub unplanned_accesses: u64,
    /// Accesses the current plan left off the op tapes to stay within
    /// [`Config::tape_budget`](crate::config::Config::tape_budget).
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
    ///
    /// [`Membership::send_queue_bytes`]: crate::membership::Membership::send_queue_bytes
    pub send_waits: u64,
    /// The most bytes ever queued for one peer: at most
    /// [`Membership::send_queue_bytes`] plus one message for the workers' sends, which
    /// wait for space; shards' replies never wait, and a peer whose queue they push past
    /// four times the bound is declared lost.
    ///
    /// [`Membership::send_queue_bytes`]: crate::membership::Membership::send_queue_bytes
    pub peak_queued_bytes: u64,
}

/// The NUMA placement of a cluster ([`Cluster::numa`]): where its worker threads run, where
/// the planned rows' memory goes, and the fraction of accesses expected to reach another
/// zone's memory against the baseline of hash placement with unpinned threads.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct NumaReport {
    /// The topology planned for: `this machine`, `fallback (no hwloc)` or the synthetic
    /// description.
    pub topology: String,
    /// Zones (NUMA nodes) of the topology.
    pub zones: usize,
    /// Whether threads were really bound: only on this machine's own topology, and with
    /// [`Pinning::Zones`] only when it has several zones.
    pub bound: bool,
    /// How workers are bound when they are: to their zone's CPUs or their core's.
    pub pinning: Pinning,
    /// Per worker: the core it is planned on (global index, topology order).
    pub worker_cores: Vec<usize>,
    /// Per worker: the zone it is planned in.
    pub worker_zones: Vec<usize>,
    /// Per worker: the CPUs (processing units, by OS index) it is bound to when `bound`:
    /// its planned core's, or with [`Pinning::Zones`] every CPU of its planned zone.
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
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

impl Cluster {
    /// Counters describing what the store has done so far (see [`Stats`]). Meant for use
    /// between runs.
    pub fn stats(&self) -> Stats {
        let arena = self.shared.arena();
        let mut workers = WorkerMemory::default();
        let mut tape_in_kept = 0;
        for kept in &self.spec.kept {
            match &*lock(kept) {
                KeptState::Built(sp) => workers += sp.memory(),
                KeptState::Tape(_, tape) => tape_in_kept += tape.capacity() * 4,
                KeptState::Nothing => {}
            }
        }
        let (plan_bytes, arena_bytes, arena_rows) = arena.as_ref().map_or((0, 0, 0), |a| {
            (a.plan.bytes(), a.bytes(), a.plan.arena_bytes)
        });
        let memory = SpecialMemory {
            gathered_logs: self.spec.gathered.0,
            gathered_pattern: self.spec.gathered.1,
            pattern: self.spec.pattern.as_ref().map_or(0, AccessPattern::bytes),
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
            migrations: self.spec.migrations,
            bytes_sent: traffic.bytes_sent,
            bytes_received: traffic.bytes_received,
            frames_sent: traffic.frames_sent,
            frames_received: traffic.frames_received,
            send_waits: traffic.send_waits,
            peak_queued_bytes: traffic.peak_queued_bytes,
            tape_accesses: self.spec.counters.tape,
            indexed_accesses: self.spec.counters.indexed,
            unplanned_accesses: self.spec.counters.unplanned,
            whole_slabs: self.spec.counters.whole_slabs,
            partial_slabs: self.spec.counters.partial_slabs,
            streamed_slabs: self.spec.counters.streamed_slabs,
            lent_read_updates: self.spec.counters.lent_read_updates,
            copied_read_updates: self.spec.counters.copied_read_updates,
            helped_drains: self.shared.helped.load(Ordering::Relaxed),
            tape_truncated: self.spec.tape_truncated,
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
            planned_rule_rows: arena.as_ref().map_or(0, |a| {
                let tables = self.registry.tables();
                let ruled = |t: u32| tables.get(t as usize).is_some_and(|m| !m.rule.is_sum());
                a.plan.slots.iter().filter(|s| ruled(s.key.table)).count()
            }),
            thread_cached_rows: arena
                .as_ref()
                .map_or(0, |a| a.plan.thread_cached.iter().map(Vec::len).sum()),
            view_workers: arena.as_ref().map_or(0, |a| {
                let views = self.config.specializations.thread_caches;
                a.plan.views.iter().filter(|&&v| v && views).count()
            }),
            plans: self.spec.plans,
            specialize_time: self.spec.specialize_time,
            diagnostics: self.diagnostics.messages().len() as u32,
        }
    }

    /// The diagnostics said so far, in order (see [`Stats::diagnostics`]).
    pub fn diagnostics(&self) -> Vec<String> {
        self.diagnostics.messages()
    }

    /// This process's network traffic so far, by kind of protocol message: what the
    /// bytes of [`Stats::bytes_sent`] and [`Stats::bytes_received`] were spent on. A
    /// message counts as sent when it is queued for its peer (the totals in `Stats` count
    /// bytes as they are written, heartbeats included), so at a given moment the two need
    /// not agree. Empty in a one-process cluster.
    pub fn traffic(&self) -> Vec<KindTraffic> {
        self.transport.traffic_by_kind()
    }

    /// The bytes of UPDATEs this process's workers have sent so far, by table (in
    /// creation order; tables never updated are left out): per row sent the generic way
    /// its 12-byte key and its delta, per planned row in a slab its padded delta (and its
    /// 4-byte position when the slab holds only the touched rows; a whole slab holds
    /// every row the worker updates on that shard, zeros where untouched), per rank-k
    /// update ([`Worker::update_outer`](crate::Worker::update_outer)) its factors and 8
    /// bytes a row for each shard it went to. Payloads as the protocol carries them,
    /// before framing (per message: [`Cluster::traffic`]); to this process's shards too
    /// (no wire there).
    pub fn update_bytes(&self) -> Vec<TableUpdates> {
        let counts = lock(&self.shared.update_bytes);
        let tables = self.shared.tables.read().unwrap_or_else(|e| e.into_inner());
        tables
            .iter()
            .filter_map(|m| {
                counts.get(&m.id).map(|&bytes| TableUpdates {
                    table: m.name.clone(),
                    bytes,
                })
            })
            .collect()
    }

    /// The NUMA placement (see [`NumaReport`]), or `None` when it does not apply: generic
    /// mode, or `Specializations::numa` off. Worker threads are pinned from the start;
    /// the rows' placement and the remote fractions come with the first plan.
    pub fn numa(&self) -> Option<NumaReport> {
        if !self.machine.numa_on {
            return None;
        }
        let plan = self.machine.numa.as_ref();
        let topology = match self.machine.topology.source() {
            TopologySource::ThisMachine => "this machine".to_string(),
            TopologySource::Fallback => "fallback (no hwloc: one zone)".to_string(),
            TopologySource::Synthetic(desc) => desc.clone(),
        };
        Some(NumaReport {
            topology,
            zones: self.machine.topology.zones().len(),
            bound: self.machine.bound,
            pinning: self.machine.pinning,
            worker_cores: self.machine.places.iter().map(|p| p.core).collect(),
            worker_zones: self.machine.places.iter().map(|p| p.zone).collect(),
            planned_cpus: pinning::bound_cpus(
                &self.machine.topology,
                &self.machine.places,
                self.machine.pinning,
            ),
            worker_cpus: self.machine.worker_cpus.clone(),
            bytes_per_zone: plan.map_or_else(Vec::new, |p| p.bytes_per_zone.clone()),
            shard_zones: self.machine.thread_zones.shards.clone(),
            comm_zone: self.machine.thread_zones.comm,
            arena_bound_bytes: self.machine.arena_bound_bytes,
            replicated_rows: plan
                .map_or(0, |p| p.replicas.iter().filter(|r| !r.is_empty()).count()),
            zone_copy_bytes: self.shared.arena().map_or(0, |a| a.zone_copy_bytes()),
            zone_copy_rows: match self.shared.arena() {
                Some(arena) => (0..self.machine.places.len())
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
        self.spec.pattern.as_ref()
    }
}
