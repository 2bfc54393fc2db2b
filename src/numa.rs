//! The NUMA planner: where worker threads, server shard threads, the communication thread
//! and every copy of every planned row go on a multi-zone machine, so that workers find
//! the rows they use in their own zone (IterStore's second specialization; Cui et al.,
//! SoCC'14, measured a remote access at 2.4× a local one).
//!
//! [`plan`] is a pure function of the gathered [`AccessPattern`], the store's [`Plan`], a
//! [`Topology`] and a [`NumaConfig`]: no IO, no threads, no binding. It says where things
//! should go ([`NumaPlan`]) and what that is expected to buy; binding is someone else's job.
//!
//! # Placement
//!
//! - **Workers.** [`WorkerPlacement::Packed`] fills zone 0's cores in topology order, then
//!   zone 1's, …; [`WorkerPlacement::Spread`] takes one core of each zone in turn (zones
//!   that have run out of cores are skipped). Worker `i` gets the `i`-th core of that
//!   order, wrapping around when there are more workers than cores. A worker's blocks and
//!   per-thread copies are in its own zone.
//! - **Arena copy** of a row (the process arena, shared by the process's workers): the
//!   zone with the most *arena accesses* of the row — accesses not served by the
//!   accessing worker's own block or copy. Ties, and rows with no arena accesses, go to
//!   the zone with fewer bytes placed so far (IterStore's balancing rule), then to the
//!   lower zone index. Rows are placed in plan order, so the result is deterministic.
//! - **Replicas** (read-mostly rows): the row is replicated into another zone `z` when
//!   `z`'s arena accesses of it per iteration exceed the refreshes a replica costs per
//!   iteration — one per clock, `max(pattern.clocks(), 1)` — i.e. when the replica serves
//!   more than one access per refresh. Rows a zone's workers update through their blocks
//!   contribute no arena accesses, so with blocks on only reads earn replicas.
//! - **Server shard threads**: the zone holding most of the arena accesses of the shard's
//!   rows (same tie rule); each row's server copy lives with its shard's thread.
//! - **Communication thread**: the zone holding the most arena bytes (arena copies and
//!   replicas; ties to the lower index).
//!
//! # Cost model
//!
//! This is what the CLI prints.
//!
//! - An **access** is one READ or UPDATE of a planned row (a row in `plan.index`) in one
//!   iteration, counted from the pattern's per-row, per-worker read and update counts.
//!   Accesses of workers beyond `cfg.workers` are left out (the store runs none).
//! - An UPDATE is always **local**: it is added to the worker's own delta (its block, or
//!   its generic operation log). A READ of worker `w` is **local** if the row is in `w`'s
//!   own memory (`w` updates it, `cfg.blocks` is on and the plan gives `w` views
//!   ([`Plan::views`](crate::plan::Plan::views)), so `w` keeps a view of it, or the
//!   slot is in `plan.thread_cached[w]`), or if the row's arena copy or one of its
//!   replicas is in `w`'s zone. Otherwise it is **remote**. `remote_fraction` = remote / accesses (0 without accesses).
//! - **Baseline**: hash placement with unpinned threads, for the same pattern, plan and
//!   topology. Each row's arena copy is in zone `hash % Z` (the store's placement hash);
//!   an unpinned thread is equally likely to run in any zone at any access, and its own
//!   memory (first-touched wherever it happened to run) is equally likely to be in any
//!   zone, independently. `baseline_remote_fraction` is the *expected* remote fraction
//!   under these distributions, computed access by access (`1 - Σ_z P(memory in z) ·
//!   P(thread in z)`); with uniform distributions it comes to `(Z-1)/Z`.
//! - **Bytes** per zone: arena copies, replicas and server copies take a padded row each
//!   (`len` rounded up to 8), a block takes two (view + delta; its 32-byte header is not
//!   counted), a per-thread copy one.

use crate::gather::{AccessPattern, RowUse};
use crate::placement::stable_hash;
use crate::plan::Plan;
use crate::slot::padded;
use crate::topology::Topology;

/// How worker threads are spread over the zones of a [`Topology`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WorkerPlacement {
    /// Fill the first zone's cores, then the next zone's (fewest zones, most sharing).
    #[default]
    Packed,
    /// Round-robin over the zones (most memory bandwidth).
    Spread,
}

impl std::str::FromStr for WorkerPlacement {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "packed" => Ok(WorkerPlacement::Packed),
            "spread" => Ok(WorkerPlacement::Spread),
            _ => Err(format!(
                "worker placement '{s}' is neither 'packed' nor 'spread'"
            )),
        }
    }
}

/// What the NUMA planner needs to know about the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NumaConfig {
    /// Worker threads in the process.
    pub workers: usize,
    /// Server shards (one thread each).
    pub shards: usize,
    /// How workers are spread over the cores.
    pub placement: WorkerPlacement,
    /// Whether workers keep blocks with a private view (view + delta) of the rows they
    /// update, so that their reads of those rows stay in their own memory (the contiguous
    /// index and thread caches both on), for the workers the plan gives views.
    pub blocks: bool,
    /// Whether read-mostly rows may be replicated into other zones. The store keeps one
    /// process arena, so the cluster plans without replicas (the model would otherwise
    /// count reads of replicas the store does not make as local).
    pub replicate: bool,
}

/// Zones of the server shard threads and of the communication thread, when they are
/// fixed before the pattern is known (threads are pinned when the cluster starts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ThreadZones {
    /// Per shard: its thread's zone.
    pub shards: Vec<usize>,
    /// The communication thread's zone.
    pub comm: usize,
}

/// Where the shard threads and the communication thread of a cluster whose workers are
/// at `workers` run: the shards round-robin over the zones the workers use (in the order
/// workers first use them), the communication thread in worker 0's zone, so that every
/// thread of the process is in a zone its workers use.
pub(crate) fn thread_zones(workers: &[WorkerPlace], shards: usize) -> ThreadZones {
    let mut used: Vec<usize> = Vec::new();
    for w in workers {
        if !used.contains(&w.zone) {
            used.push(w.zone);
        }
    }
    if used.is_empty() {
        used.push(0);
    }
    ThreadZones {
        shards: (0..shards).map(|s| used[s % used.len()]).collect(),
        comm: used[0],
    }
}

/// Per refresh chunk of `plan`: the OS index of the zone holding most of its rows' arena
/// copies (by bytes), as [`plan`] placed them in `numa` (ties to the lower zone).
pub(crate) fn chunk_zones(numa: &NumaPlan, plan: &Plan, topo: &Topology) -> Vec<u32> {
    let zones = topo.zones().len();
    plan.chunks
        .iter()
        .map(|chunk| {
            let mut bytes = vec![0usize; zones];
            for s in chunk.slots.clone() {
                bytes[numa.arena_zones[s]] += plan.slots[s].len;
            }
            let best = (0..zones)
                .max_by_key(|&z| (bytes[z], std::cmp::Reverse(z)))
                .unwrap_or(0);
            topo.zones()[best].os_index
        })
        .collect()
}

/// Per arena chunk of `plan`, the zones (bit `z`) that get a copy of it: those into which
/// the rows replicated (`numa.replicas`) make at least half of the chunk's bytes. A chunk
/// is what a refresh rewrites, so a zone's copy is kept per chunk; its other rows come
/// along (read locally, where the plan counted them remote).
pub(crate) fn chunk_copies(numa: &NumaPlan, plan: &Plan) -> Vec<u64> {
    plan.chunks
        .iter()
        .map(|chunk| {
            let total: usize = chunk.slots.clone().map(|s| plan.slots[s].len).sum();
            let mut replicated = [0usize; 64];
            for s in chunk.slots.clone() {
                for &z in &numa.replicas[s] {
                    if z < 64 {
                        replicated[z] += plan.slots[s].len;
                    }
                }
            }
            (0..64)
                .filter(|&z| total > 0 && 2 * replicated[z] >= total && replicated[z] > 0)
                .fold(0u64, |mask, z| mask | 1u64 << z)
        })
        .collect()
}

/// Where one worker thread runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkerPlace {
    /// Its zone (index into `topology.zones()`).
    pub zone: usize,
    /// Its core: global index, counting the cores of all zones in topology order.
    pub core: usize,
    /// The core's processing units (OS indices), what the thread is bound to.
    pub pus: Vec<u32>,
}

/// Where everything goes, and what the placement is expected to buy (see the module
/// docs). Zones are indices into `topology.zones()`; per-slot vectors follow `plan.slots`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NumaPlan {
    /// Per worker: its zone, core and processing units.
    pub workers: Vec<WorkerPlace>,
    /// Per server shard: the zone of its thread.
    pub shard_zones: Vec<usize>,
    /// The zone of the communication thread.
    pub comm_zone: usize,
    /// Per plan slot: the zone of the row's process-arena copy.
    pub arena_zones: Vec<usize>,
    /// Per plan slot: the other zones the row is replicated into, ascending (empty if
    /// none).
    pub replicas: Vec<Vec<usize>>,
    /// Per plan slot: the zone of the row's server copy (its shard thread's zone).
    pub server_zones: Vec<usize>,
    /// Per worker: the zone of its blocks and per-thread copies (its own zone).
    pub memory_zones: Vec<usize>,
    /// Per zone: bytes of arena copies, replicas, server copies, blocks and per-thread
    /// copies placed in it.
    pub bytes_per_zone: Vec<u64>,
    /// Accesses of planned rows per iteration (see the module docs).
    pub accesses: u64,
    /// Of those, the remote ones under this plan.
    pub remote: u64,
    /// `remote / accesses` (0 without accesses).
    pub remote_fraction: f64,
    /// The expected remote fraction of hash placement with unpinned threads.
    pub baseline_remote_fraction: f64,
}

/// The cores in the order workers take them: `(zone, global core index)`.
fn core_order(topo: &Topology, placement: WorkerPlacement) -> Vec<(usize, usize)> {
    // Per zone: `(zone, global core index)` of its cores, in topology order.
    let mut next = 0;
    let per_zone: Vec<Vec<(usize, usize)>> = topo
        .zones()
        .iter()
        .enumerate()
        .map(|(z, zone)| {
            next += zone.cores.len();
            (next - zone.cores.len()..next).map(|c| (z, c)).collect()
        })
        .collect();
    match placement {
        WorkerPlacement::Packed => per_zone.concat(),
        WorkerPlacement::Spread => {
            let most = per_zone.iter().map(Vec::len).max().unwrap_or(0);
            (0..most)
                .flat_map(|c| {
                    per_zone
                        .iter()
                        .filter_map(move |cores| cores.get(c).copied())
                })
                .collect()
        }
    }
}

/// The zone with the largest `count`; ties go to the one with fewer `bytes`, then to the
/// lower index.
fn pick(counts: &[u64], bytes: &[u64]) -> usize {
    let most = counts.iter().copied().max().unwrap_or(0);
    (0..counts.len())
        .filter(|&z| counts[z] == most)
        .min_by_key(|&z| (bytes[z], z))
        .unwrap_or(0)
}

/// What the per-access loops need to know about the workers.
struct Workers<'a> {
    zones: Vec<usize>,
    updates: &'a [Vec<u32>],
    cached: &'a [Vec<u32>],
    /// Per worker: whether its blocks hold views (blocks on and the plan's
    /// [`Plan::views`]).
    views: Vec<bool>,
}

impl Workers<'_> {
    /// Whether worker `w`'s accesses of `slot` are served by its own block or copy.
    fn own(&self, w: usize, slot: u32) -> bool {
        let has = |lists: &[Vec<u32>]| lists.get(w).is_some_and(|l| l.binary_search(&slot).is_ok());
        (self.views.get(w) == Some(&true) && has(self.updates)) || has(self.cached)
    }

    /// Each access entry of `row` by a worker the store runs: `(worker, count, own)`.
    /// An UPDATE is always in the worker's own memory (its block's delta, or its generic
    /// operation log); a READ is if the worker keeps a view or copy of the row.
    fn entries<'r>(
        &'r self,
        row: &'r RowUse,
        slot: u32,
    ) -> impl Iterator<Item = (usize, u64, bool)> + 'r {
        let reads = row
            .readers
            .iter()
            .map(move |&(w, n)| (w as usize, u64::from(n), self.own(w as usize, slot)));
        let updates = row
            .updaters
            .iter()
            .map(|&(w, n)| (w as usize, u64::from(n), true));
        reads
            .chain(updates)
            .filter(|&(w, _, _)| w < self.zones.len())
    }

    /// Adds `row`'s arena accesses per zone into `out`.
    fn arena_accesses(&self, row: &RowUse, slot: u32, out: &mut [u64]) {
        for (w, n, own) in self.entries(row, slot) {
            if !own {
                out[self.zones[w]] += n;
            }
        }
    }
}

/// Where each of `workers` worker threads runs on `topo` (see the module docs): the part of
/// the plan that needs no access pattern, so threads are pinned when the cluster starts.
pub(crate) fn place_workers(
    topo: &Topology,
    workers: usize,
    placement: WorkerPlacement,
) -> Vec<WorkerPlace> {
    let order = core_order(topo, placement);
    let mut first_core = Vec::with_capacity(topo.zones().len());
    let mut n = 0;
    for zone in topo.zones() {
        first_core.push(n);
        n += zone.cores.len();
    }
    (0..workers)
        .map(|i| {
            let (zone, core) = order[i % order.len()];
            WorkerPlace {
                zone,
                core,
                pus: topo.zones()[zone].cores[core - first_core[zone]]
                    .pus
                    .clone(),
            }
        })
        .collect()
}

/// Plans the NUMA placement of `plan` (built from `pattern`) on `topo` (see the module
/// docs).
///
/// `threads`: the shard and communication threads' zones when they are already fixed
/// (the cluster pins them at start); `None` lets the planner choose them from the
/// accesses.
pub(crate) fn plan(
    pattern: &AccessPattern,
    plan: &Plan,
    topo: &Topology,
    cfg: &NumaConfig,
    threads: Option<&ThreadZones>,
) -> NumaPlan {
    let zones = topo.zones().len();
    let workers = place_workers(topo, cfg.workers, cfg.placement);
    let ws = Workers {
        zones: workers.iter().map(|w| w.zone).collect(),
        updates: &plan.updates,
        cached: &plan.thread_cached,
        views: (0..cfg.workers)
            .map(|w| cfg.blocks && plan.views.get(w) == Some(&true))
            .collect(),
    };
    debug_assert!(ws.updates.iter().chain(ws.cached).all(|l| l.is_sorted()));
    let row_bytes = |s: u32| padded(plan.slots[s as usize].len) as u64;
    let mut bytes = vec![0u64; zones];

    // Each worker's own memory: blocks and per-thread copies, in its zone.
    for (w, &zone) in ws.zones.iter().enumerate() {
        if cfg.blocks {
            // The delta, and the view where the worker keeps one.
            let per_row = 1 + u64::from(ws.views[w]);
            for &s in plan.updates.get(w).map_or(&[][..], Vec::as_slice) {
                bytes[zone] += per_row * row_bytes(s);
            }
        }
        for &s in plan.thread_cached.get(w).map_or(&[][..], Vec::as_slice) {
            bytes[zone] += row_bytes(s);
        }
    }

    // The pattern's use of each slot.
    let mut uses: Vec<Option<&RowUse>> = vec![None; plan.slots.len()];
    for row in pattern.rows() {
        if let Some(&s) = plan.index.get(&row.key) {
            uses[s as usize] = Some(row);
        }
    }

    // Shard threads: where most of their rows' arena accesses come from.
    let shards = cfg.shards.max(plan.shards.len()).max(1);
    let mut shard_acc = vec![vec![0u64; zones]; shards];
    let mut shard_bytes = vec![0u64; shards];
    for (s, slot) in plan.slots.iter().enumerate() {
        shard_bytes[slot.shard as usize] += row_bytes(s as u32);
        if let Some(row) = uses[s] {
            ws.arena_accesses(row, s as u32, &mut shard_acc[slot.shard as usize]);
        }
    }
    let mut shard_zones = Vec::with_capacity(shards);
    for (s, (acc, &b)) in shard_acc.iter().zip(&shard_bytes).enumerate() {
        let fixed = threads.and_then(|t| t.shards.get(s).copied());
        let z = fixed.unwrap_or_else(|| pick(acc, &bytes));
        bytes[z] += b;
        shard_zones.push(z);
    }
    let server_zones = plan
        .slots
        .iter()
        .map(|s| shard_zones[s.shard as usize])
        .collect();

    // Arena copies and replicas, row by row in plan order; then what it buys.
    let refreshes = pattern.clocks().max(1);
    let mut arena_zones = Vec::with_capacity(plan.slots.len());
    let mut replicas = Vec::with_capacity(plan.slots.len());
    let mut arena_bytes = vec![0u64; zones];
    let mut acc = vec![0u64; zones];
    let (mut accesses, mut remote, mut baseline) = (0u64, 0u64, 0f64);
    // Unpinned: a thread runs, and its memory was first touched, in any zone alike.
    let anywhere = vec![1.0 / zones as f64; zones];
    let own_remote = 1.0 - anywhere.iter().map(|p| p * p).sum::<f64>();
    for (s, slot) in plan.slots.iter().enumerate() {
        let s32 = s as u32;
        acc.fill(0);
        if let Some(row) = uses[s] {
            ws.arena_accesses(row, s32, &mut acc);
        }
        let home = pick(&acc, &bytes);
        let b = row_bytes(s32);
        bytes[home] += b;
        arena_bytes[home] += b;
        let extra: Vec<usize> = (0..zones)
            .filter(|&z| cfg.replicate && z != home && acc[z] > refreshes)
            .collect();
        for &z in &extra {
            bytes[z] += b;
            arena_bytes[z] += b;
        }
        if let Some(row) = uses[s] {
            let hashed = (stable_hash(slot.key) % zones as u64) as usize;
            for (w, n, own) in ws.entries(row, s32) {
                let zone = ws.zones[w];
                accesses += n;
                if !(own || zone == home || extra.contains(&zone)) {
                    remote += n;
                }
                let p = if own {
                    own_remote
                } else {
                    1.0 - anywhere[hashed]
                };
                baseline += p * n as f64;
            }
        }
        arena_zones.push(home);
        replicas.push(extra);
    }
    let comm_zone = threads.map_or_else(|| pick(&arena_bytes, &vec![0; zones]), |t| t.comm);
    let fraction = |x: f64| {
        if accesses == 0 {
            0.0
        } else {
            x / accesses as f64
        }
    };
    NumaPlan {
        memory_zones: ws.zones.clone(),
        workers,
        shard_zones,
        comm_zone,
        arena_zones,
        replicas,
        server_zones,
        bytes_per_zone: bytes,
        accesses,
        remote,
        remote_fraction: fraction(remote as f64),
        baseline_remote_fraction: fraction(baseline),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::element::ElemType;
    use crate::gather::{Access, AccessLog};
    use crate::ids::RowKey;
    use crate::placement::Placement;
    use crate::plan::{self, PlanConfig};
    use crate::table::TableMeta;
    use crate::topology::{Core, TopologySource, Zone};

    const SHARDS: usize = 2;

    fn tables() -> Vec<TableMeta> {
        let table = |id, name: &str, width, elem| TableMeta {
            id,
            name: name.into(),
            width,
            elem,
            rows: None,
            rule: crate::rule::Rule::Sum,
        };
        vec![
            table(0, "rows", 8, ElemType::F32),
            table(1, "shared", 10, ElemType::F32),
            table(2, "totals", 16, ElemType::I64),
        ]
    }

    fn build(logs: Vec<AccessLog>) -> (AccessPattern, Plan) {
        build_with(logs, true)
    }

    fn build_with(logs: Vec<AccessLog>, thread_caches: bool) -> (AccessPattern, Plan) {
        let workers = logs.len();
        let pattern = AccessPattern::from_logs(logs);
        let cfg = PlanConfig {
            workers,
            chunks: 2,
            thread_caches,
            contention_threshold: 1.0,
        };
        let plan = plan::build(&pattern, &tables(), &Placement::hashed(SHARDS), &cfg);
        (pattern, plan)
    }

    fn touch(log: &mut AccessLog, key: RowKey) {
        log.record(key, Access::Read);
        log.record(key, Access::Update);
    }

    /// MF-like, 8 workers, 2 clocks: each worker's users (table 0) are its own; 40 popular
    /// items (table 1) are rated by every worker; 40 tail items are rated once by worker
    /// `t % 8` and once by worker `(t + 4) % 8` (another zone, packed on 2 or 4 zones).
    fn mf() -> (AccessPattern, Plan) {
        let mut logs = vec![AccessLog::default(); 8];
        for (w, log) in logs.iter_mut().enumerate() {
            for clock in 0..2u64 {
                for u in 0..10u64 {
                    let user = RowKey::new(0, w as u64 * 100 + clock * 10 + u);
                    for i in (0..40u64).filter(|i| (u * 3 + i + w as u64).is_multiple_of(4)) {
                        touch(log, user);
                        touch(log, RowKey::new(1, i));
                    }
                }
                for t in (40..80u64).filter(|t| t % 2 == clock) {
                    let (a, b) = (t as usize % 8, (t as usize + 4) % 8);
                    if w == a || w == b {
                        touch(log, RowKey::new(0, w as u64 * 100 + 50));
                        touch(log, RowKey::new(1, t));
                    }
                }
                log.clocks += 1;
            }
        }
        build(logs)
    }

    /// LDA-like, 8 workers, 1 clock: every worker reads and updates word rows (table 1)
    /// for its tokens, and the one totals row (table 2), contended enough for per-thread
    /// copies.
    fn lda() -> (AccessPattern, Plan) {
        let mut logs = vec![AccessLog::default(); 8];
        for (w, log) in logs.iter_mut().enumerate() {
            for k in 0..100u64 {
                touch(log, RowKey::new(1, (w as u64 * 31 + k * 17) % 50));
                touch(log, RowKey::new(2, 0));
            }
            log.clocks = 1;
        }
        let (pattern, plan) = build(logs);
        let totals = plan.index[&RowKey::new(2, 0)];
        assert!(plan.thread_cached.iter().all(|t| t == &[totals]));
        (pattern, plan)
    }

    fn cfg(placement: WorkerPlacement, blocks: bool) -> NumaConfig {
        NumaConfig {
            workers: 8,
            shards: SHARDS,
            placement,
            blocks,
            replicate: true,
        }
    }

    /// [`plan`] with [`cfg`], the planner choosing the thread zones.
    fn planned(
        pattern: &AccessPattern,
        p: &Plan,
        topo: &Topology,
        placement: WorkerPlacement,
        blocks: bool,
    ) -> NumaPlan {
        plan(pattern, p, topo, &cfg(placement, blocks), None)
    }

    fn uniform(zones: usize, cores: usize) -> Topology {
        Topology::uniform(zones, cores).unwrap()
    }

    /// All bytes the plan places, counted directly from its parts.
    fn placed_bytes(p: &Plan, n: &NumaPlan, blocks: bool) -> u64 {
        let row = |s: &u32| padded(p.slots[*s as usize].len) as u64;
        let rows: u64 = (0..p.slots.len() as u32)
            .map(|s| row(&s) * (2 + n.replicas[s as usize].len() as u64))
            .sum();
        let own: u64 = p.updates.iter().flatten().map(row).sum::<u64>() * 2;
        let copies: u64 = p.thread_cached.iter().flatten().map(row).sum();
        rows + if blocks { own } else { 0 } + copies
    }

    #[test]
    fn packed_fills_zones_in_order_spread_alternates_and_both_wrap() {
        let topo = uniform(2, 4);
        let run = |placement, workers| {
            let (pattern, p) = lda();
            let cfg = NumaConfig {
                workers,
                ..cfg(placement, true)
            };
            plan(&pattern, &p, &topo, &cfg, None).workers
        };
        let packed = run(WorkerPlacement::Packed, 8);
        let zones: Vec<usize> = packed.iter().map(|w| w.zone).collect();
        assert_eq!(zones, [0, 0, 0, 0, 1, 1, 1, 1]);
        let cores: Vec<usize> = packed.iter().map(|w| w.core).collect();
        assert_eq!(cores, (0..8).collect::<Vec<_>>());
        assert!(packed.iter().all(|w| w.pus == [w.core as u32]));
        let spread = run(WorkerPlacement::Spread, 8);
        let zones: Vec<usize> = spread.iter().map(|w| w.zone).collect();
        assert_eq!(zones, [0, 1, 0, 1, 0, 1, 0, 1]);
        let cores: Vec<usize> = spread.iter().map(|w| w.core).collect();
        assert_eq!(cores, [0, 4, 1, 5, 2, 6, 3, 7]);
        assert!(spread.iter().all(|w| w.pus == [w.core as u32]));
        for placement in [WorkerPlacement::Packed, WorkerPlacement::Spread] {
            let ten = run(placement, 10);
            assert_eq!(ten.len(), 10);
            assert_eq!(ten[8], ten[0]);
            assert_eq!(ten[9], ten[1]);
        }
    }

    #[test]
    fn spread_skips_zones_that_ran_out_of_cores() {
        let core = |pu| Core {
            pus: vec![pu, pu + 100],
        };
        let zones = vec![
            Zone {
                os_index: 3,
                cores: vec![core(0)],
            },
            Zone {
                os_index: 5,
                cores: vec![core(1), core(2), core(3)],
            },
        ];
        let topo = Topology::new(zones, Vec::new(), TopologySource::Fallback).unwrap();
        let order = core_order(&topo, WorkerPlacement::Spread);
        assert_eq!(order, [(0, 0), (1, 1), (1, 2), (1, 3)]);
        let (pattern, p) = lda();
        let n = planned(&pattern, &p, &topo, WorkerPlacement::Spread, true);
        assert_eq!(n.workers[2].pus, [2, 102]);
        assert_eq!(n.workers[4].core, 0);
    }

    #[test]
    fn mf_and_lda_beat_the_baseline_with_and_without_blocks() {
        for (name, build) in [("mf", mf as fn() -> _), ("lda", lda)] {
            for (zones, cores) in [(2, 4), (4, 2)] {
                let topo = uniform(zones, cores);
                let (pattern, p) = build();
                for blocks in [true, false] {
                    let n = planned(&pattern, &p, &topo, WorkerPlacement::Packed, blocks);
                    eprintln!(
                        "{name} {zones}x{cores} blocks={blocks}: remote {:.4} of {} accesses, \
                         baseline {:.4}",
                        n.remote_fraction, n.accesses, n.baseline_remote_fraction
                    );
                    assert_eq!(n.accesses, pattern.accesses());
                    if blocks {
                        assert!(
                            n.remote_fraction <= n.baseline_remote_fraction / 4.0,
                            "{name} {zones}x{cores}: {n:?}"
                        );
                    } else {
                        assert!(n.remote_fraction < n.baseline_remote_fraction);
                    }
                    // Blocks and copies are in the worker's zone; server copies with
                    // their shard's thread.
                    assert_eq!(
                        n.memory_zones,
                        n.workers.iter().map(|w| w.zone).collect::<Vec<_>>()
                    );
                    for (s, slot) in p.slots.iter().enumerate() {
                        assert_eq!(n.server_zones[s], n.shard_zones[slot.shard as usize]);
                        assert!(!n.replicas[s].contains(&n.arena_zones[s]));
                    }
                }
            }
        }
    }

    #[test]
    fn without_blocks_rows_go_to_their_majority_zone() {
        let (pattern, p) = mf();
        let topo = uniform(2, 4);
        let n = planned(&pattern, &p, &topo, WorkerPlacement::Packed, false);
        // Worker 5's users are read only by it: in its zone, never replicated.
        let user = p.index[&RowKey::new(0, 503)] as usize;
        assert_eq!((n.arena_zones[user], n.replicas[user].len()), (1, 0));
        // Popular items are used by both zones many times per clock: replicated.
        let item = p.index[&RowKey::new(1, 0)] as usize;
        assert_eq!(n.replicas[item].len(), 1);
        // A tail item, once by each zone: not worth a replica, so one side is remote.
        let tail = p.index[&RowKey::new(1, 41)] as usize;
        assert!(n.replicas[tail].is_empty());
        assert!(n.remote > 0);
    }

    #[test]
    fn read_mostly_rows_are_replicated_rows_read_once_are_not() {
        // Worker 0 (zone 0) and worker 4 (zone 1) read row 0 ten times per iteration and
        // row 1 once each; two clocks.
        let mut logs = vec![AccessLog::default(); 8];
        for w in [0, 4] {
            for _ in 0..10 {
                logs[w].record(RowKey::new(1, 0), Access::Read);
            }
            logs[w].record(RowKey::new(1, 1), Access::Read);
            logs[w].clocks = 2;
        }
        let (pattern, p) = build_with(logs, false);
        assert!(p.thread_cached.iter().all(Vec::is_empty));
        let n = planned(&pattern, &p, &uniform(2, 4), WorkerPlacement::Packed, true);
        let hot = p.index[&RowKey::new(1, 0)] as usize;
        let cold = p.index[&RowKey::new(1, 1)] as usize;
        let mut zones = n.replicas[hot].clone();
        zones.push(n.arena_zones[hot]);
        zones.sort_unstable();
        assert_eq!(zones, [0, 1]);
        assert!(n.replicas[cold].is_empty());
        // Only the cold row's reads from the other zone are remote.
        assert_eq!((n.accesses, n.remote), (22, 1));
        assert_eq!(
            n.bytes_per_zone.iter().sum::<u64>(),
            placed_bytes(&p, &n, true)
        );
    }

    #[test]
    fn rows_without_arena_accesses_balance_bytes_and_threads_follow_accesses() {
        // Worker 0 (zone 0 of 2) alone reads and updates ten 32-byte rows, reading each
        // `reads` times a clock.
        let logs_reading = |reads: usize| {
            let mut logs = vec![AccessLog::default(); 8];
            for r in 0..10 {
                for _ in 1..reads {
                    logs[0].record(RowKey::new(0, r), Access::Read);
                }
                touch(&mut logs[0], RowKey::new(0, r));
            }
            logs[0].clocks = 1;
            logs
        };
        let logs = || logs_reading(2);
        let topo = uniform(2, 4);
        // With blocks, no access reaches the arena: its 640 bytes of blocks are in zone 0,
        // so the shard threads, the server copies (320) and the arena copies (320) all go
        // to zone 1 to balance it.
        let (pattern, p) = build(logs());
        let n = planned(&pattern, &p, &topo, WorkerPlacement::Packed, true);
        assert_eq!(n.bytes_per_zone, [640, 640]);
        assert_eq!(n.shard_zones, [1, 1]);
        assert!(n.arena_zones.iter().all(|&z| z == 1));
        assert_eq!((n.comm_zone, n.remote), (1, 0));
        // Without blocks every access reaches the arena: everything follows worker 0.
        let (pattern, p) = build(logs());
        let n = planned(&pattern, &p, &topo, WorkerPlacement::Packed, false);
        assert_eq!(n.bytes_per_zone, [640, 0]);
        assert_eq!(n.shard_zones, [0, 0]);
        assert!(n.arena_zones.iter().all(|&z| z == 0));
        assert!(n.replicas.iter().all(Vec::is_empty));
        assert_eq!((n.comm_zone, n.remote, n.accesses), (0, 0, 30));
        // Read once a clock, the rows get no views (`Plan::views`): the reads reach the
        // arena as without blocks, and only the deltas (320) are worker 0's own memory.
        let (pattern, p) = build(logs_reading(1));
        assert!(!p.views[0]);
        let n = planned(&pattern, &p, &topo, WorkerPlacement::Packed, true);
        assert_eq!(n.bytes_per_zone.iter().sum::<u64>(), 960);
        assert_eq!(
            n.bytes_per_zone[0],
            n.bytes_per_zone.iter().max().copied().unwrap()
        );
        assert_eq!((n.remote, n.accesses), (0, 20));
    }

    #[test]
    fn bytes_add_up_and_plans_are_deterministic() {
        for (zones, cores) in [(2, 4), (4, 2)] {
            let topo = uniform(zones, cores);
            for build in [mf as fn() -> _, lda] {
                for blocks in [true, false] {
                    for placement in [WorkerPlacement::Packed, WorkerPlacement::Spread] {
                        let (pattern, p) = build();
                        let n = planned(&pattern, &p, &topo, placement, blocks);
                        assert_eq!(n.bytes_per_zone.len(), zones);
                        assert_eq!(
                            n.bytes_per_zone.iter().sum::<u64>(),
                            placed_bytes(&p, &n, blocks)
                        );
                        let (pattern2, p2) = build();
                        assert_eq!(n, planned(&pattern2, &p2, &topo, placement, blocks));
                    }
                }
            }
        }
    }

    #[test]
    fn baseline_is_about_one_zone_short_of_all() {
        for (zones, cores) in [(2, 4), (4, 2)] {
            let topo = uniform(zones, cores);
            let want = (zones - 1) as f64 / zones as f64;
            for build in [mf as fn() -> _, lda] {
                let (pattern, p) = build();
                for blocks in [true, false] {
                    let n = planned(&pattern, &p, &topo, WorkerPlacement::Spread, blocks);
                    let got = n.baseline_remote_fraction;
                    assert!((got - want).abs() < 1e-9, "{zones} zones: {got} vs {want}");
                }
            }
        }
    }

    #[test]
    fn one_zone_is_all_local_and_an_empty_pattern_is_zero() {
        let (pattern, p) = mf();
        let n = planned(&pattern, &p, &uniform(1, 8), WorkerPlacement::Packed, false);
        assert_eq!(
            (n.remote, n.remote_fraction, n.baseline_remote_fraction),
            (0, 0.0, 0.0)
        );
        assert_eq!(n.comm_zone, 0);
        let empty = AccessPattern::from_logs(vec![AccessLog::default(); 2]);
        let p = plan::build(
            &empty,
            &tables(),
            &Placement::hashed(1),
            &PlanConfig {
                workers: 2,
                chunks: 1,
                thread_caches: true,
                contention_threshold: 1.0,
            },
        );
        let n = planned(&empty, &p, &uniform(2, 1), WorkerPlacement::Spread, true);
        assert_eq!(
            (n.accesses, n.remote_fraction, n.baseline_remote_fraction),
            (0, 0.0, 0.0)
        );
        assert_eq!(n.shard_zones.len(), SHARDS);
        assert_eq!(n.bytes_per_zone, [0, 0]);
    }

    #[test]
    fn fixed_thread_zones_follow_the_workers_and_replication_can_be_off() {
        let topo = uniform(2, 4);
        let workers = place_workers(&topo, 8, WorkerPlacement::Packed);
        let threads = thread_zones(&workers, 3);
        assert_eq!(
            threads,
            ThreadZones {
                shards: vec![0, 1, 0],
                comm: 0
            }
        );
        let one_zone = thread_zones(&place_workers(&topo, 2, WorkerPlacement::Packed), 2);
        assert_eq!(
            one_zone,
            ThreadZones {
                shards: vec![0, 0],
                comm: 0
            }
        );
        assert_eq!(topo.zones()[1].pus(), vec![4, 5, 6, 7]);

        let (pattern, p) = mf();
        let mut c = cfg(WorkerPlacement::Packed, false);
        c.replicate = false;
        let fixed = ThreadZones {
            shards: vec![1; p.shards.len()],
            comm: 1,
        };
        let n = plan(&pattern, &p, &topo, &c, Some(&fixed));
        assert!(n.shard_zones.iter().all(|&z| z == 1), "{:?}", n.shard_zones);
        assert_eq!(n.comm_zone, 1);
        assert!(n.replicas.iter().all(Vec::is_empty));
        let with = planned(&pattern, &p, &topo, WorkerPlacement::Packed, false);
        assert!(
            n.remote_fraction >= with.remote_fraction,
            "replicas only ever help"
        );
        // Each chunk goes to the zone holding most of its rows' bytes.
        let chunks = chunk_zones(&n, &p, &topo);
        assert_eq!(chunks.len(), p.chunks.len());
        for (chunk, &zone) in p.chunks.iter().zip(&chunks) {
            let mut bytes = [0usize; 2];
            for s in chunk.slots.clone() {
                bytes[n.arena_zones[s]] += p.slots[s].len;
            }
            assert!(
                bytes[zone as usize] >= bytes[1 - zone as usize],
                "{bytes:?}"
            );
        }
    }
}
