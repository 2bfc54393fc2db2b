//! The planner: pure functions from an [`AccessPattern`] to a [`Plan`] — which rows the
//! process caches statically, where each lives in the contiguous arena, which rows get
//! per-thread copies, what each worker's update buffer holds, and how each shard's refresh
//! is cut into chunks — and from the pattern's per-worker sequences to op [`Tapes`].
//!
//! No IO, no threads, no store state: the planner only lays things out, so it can be tested
//! on synthetic patterns.

use crate::gather::{map_bytes, AccessPattern};
use crate::ids::RowKey;
use crate::placement::Placement;
use crate::slot::padded;
use crate::table::TableMeta;
use rustc_hash::FxHashMap;
use std::ops::Range;

/// Planner settings (taken from [`Config`](crate::Config)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlanConfig {
    /// Worker threads in the process.
    pub workers: usize,
    /// Chunks per shard refresh.
    pub chunks: usize,
    /// Whether contended rows get per-thread copies.
    pub thread_caches: bool,
    /// The contention threshold (see [`Config::contention_threshold`](crate::Config)).
    pub contention_threshold: f64,
}

/// Where one row lives in the process arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// The row.
    pub key: RowKey,
    /// Byte offset in the arena (8-byte aligned).
    pub offset: usize,
    /// Row size in bytes.
    pub len: usize,
    /// The shard holding the row.
    pub shard: u32,
    /// The refresh chunk the row belongs to (global chunk index).
    pub chunk: u32,
}

impl Slot {
    /// The arena word (8 bytes) where the row starts.
    #[inline(always)]
    pub fn word(&self) -> u32 {
        (self.offset / 8) as u32
    }
}

/// A contiguous part of the arena: one shard's rows, or one chunk of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    /// The shard.
    pub shard: u32,
    /// Slot indices.
    pub slots: Range<usize>,
    /// Byte range in the arena.
    pub bytes: Range<usize>,
}

/// The layout of a specialized process (see module docs).
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Every cached row; grouped by shard, in first-use order within a shard.
    pub slots: Vec<Slot>,
    /// Per shard: its contiguous part of the arena.
    pub shards: Vec<Span>,
    /// Refresh chunks, shard by shard (see [`build`] for their order).
    pub chunks: Vec<Span>,
    /// Per chunk: the clocks of the iteration in which the process reads its rows (bit
    /// `c mod 64`, as [`RowUse::read_phases`](crate::stats::RowUse::read_phases)); every row of
    /// a chunk is read in the same clocks. The refresh before clock `c` asks only for the
    /// chunks with bit `c` set; a chunk no worker reads is never refreshed.
    pub chunk_phases: Vec<u64>,
    /// CLOCKs per iteration in the pattern (at least 1).
    pub clocks: u64,
    /// Arena size in bytes.
    pub arena_bytes: usize,
    /// The pre-built read-only index: row -> slot.
    pub index: FxHashMap<RowKey, u32>,
    /// Per worker: the slots it updates, ascending.
    pub updates: Vec<Vec<u32>>,
    /// Per worker: the slots it keeps a private copy of (contended rows).
    pub thread_cached: Vec<Vec<u32>>,
    /// Per worker: whether the blocks of the rows it updates hold a view (its private
    /// snapshot of each, refreshed a chunk at a time) besides the delta. A view is one
    /// more copy of the row per refresh (arena → view → the reader), which pays when the
    /// worker reads the row again within a clock; a worker that reads the rows it updates
    /// at most once a clock on average (bytes weighted, rows it never reads counting as
    /// zero) reads them from the arena instead (see [`build`]).
    pub views: Vec<bool>,
}

impl Plan {
    /// Bytes the plan holds: slots, spans, the index and the per-worker layouts.
    pub fn bytes(&self) -> usize {
        let lists = |v: &Vec<Vec<u32>>| v.iter().map(|l| l.capacity() * 4).sum::<usize>();
        self.slots.capacity() * size_of::<Slot>()
            + (self.shards.capacity() + self.chunks.capacity()) * size_of::<Span>()
            + self.chunk_phases.capacity() * 8
            + map_bytes(self.index.capacity(), size_of::<(RowKey, u32)>())
            + lists(&self.updates)
            + lists(&self.thread_cached)
            + self.views.capacity()
    }
}

/// Each worker's op tape: its accesses of one iteration in order, resolved to plan slots
/// ahead of time, so that a worker repeating the pattern finds each row without hashing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tapes {
    /// Per worker: the slot of each access (accesses of rows the plan leaves out are
    /// skipped).
    pub tapes: Vec<Vec<u32>>,
    /// Accesses left off the tapes to stay within the budget; they take the indexed path.
    pub truncated: u64,
}

/// Resolves `sequences` (per worker, indices into `pattern.rows()`, as
/// [`AccessPattern::take_sequences`] hands them over) into op tapes for `plan`, in place:
/// no second per-access buffer is allocated. With a `budget` in bytes, each worker keeps
/// at most its share of it (proportional to its accesses) and the rest of its accesses
/// are left off.
pub fn tapes(
    pattern: &AccessPattern,
    plan: &Plan,
    mut sequences: Vec<Vec<u32>>,
    budget: Option<usize>,
) -> Tapes {
    const OUT: u32 = u32::MAX;
    let slot_of: Vec<u32> = pattern
        .rows()
        .iter()
        .map(|r| plan.index.get(&r.key).copied().unwrap_or(OUT))
        .collect();
    let total: usize = sequences.iter().map(Vec::len).sum();
    let mut truncated = 0u64;
    for seq in &mut sequences {
        let mut n = 0;
        for i in 0..seq.len() {
            let slot = slot_of[seq[i] as usize];
            if slot != OUT {
                seq[n] = slot;
                n += 1;
            }
        }
        let keep = match budget {
            Some(bytes) if total > 0 => {
                let share = (bytes / 4) as u128 * seq.len() as u128 / total as u128;
                n.min(share as usize)
            }
            _ => n,
        };
        truncated += (n - keep) as u64;
        seq.truncate(keep);
        seq.shrink_to_fit();
    }
    Tapes {
        tapes: sequences,
        truncated,
    }
}

/// Lays out `pattern` over the shards of `placement` (rows of tables unknown to `tables`
/// are left out). Within a shard, rows are grouped by the clocks in which the process
/// reads them ([`RowUse::read_phases`](crate::stats::RowUse::read_phases); groups of fewer than
/// a quarter of a chunk's rows merged into one), groups ordered by their first use and
/// rows by first use within a group, and each group is cut into chunks of at most the
/// shard's rows over [`PlanConfig::chunks`]: a refresh ships the chunks of one clock, in
/// the order they are needed. A worker's blocks hold views ([`Plan::views`]) with thread
/// caches on if, over the rows it updates, it reads each byte more than once a clock on
/// average.
pub(crate) fn build(
    pattern: &AccessPattern,
    tables: &[TableMeta],
    placement: &Placement,
    cfg: &PlanConfig,
) -> Plan {
    let shards = placement.shards();
    // Rows grouped by shard; within a shard, first-use order (the pattern's order).
    let mut by_shard: Vec<Vec<usize>> = vec![Vec::new(); shards];
    for (i, row) in pattern.rows().iter().enumerate() {
        // Rows of tables with an update rule too: the shards fold their slabs' deltas
        // into gradients and step them per clock.
        if tables.get(row.key.table as usize).is_some() {
            by_shard[placement.shard_of(row.key) as usize].push(i);
        }
    }
    let rows_of = pattern.rows();
    let mut phases_of: Vec<u64> = rows_of.iter().map(|r| r.read_phases).collect();
    for rows in &mut by_shard {
        // Groups smaller than a quarter of a chunk are merged into one, read in every
        // clock any of them is: refreshing it costs a few rows more, and a shard's chunks
        // (one message each per refresh) stay at most about 5x `cfg.chunks`.
        let min_rows = rows.len() / (4 * cfg.chunks.max(1));
        let mut size: FxHashMap<u64, usize> = FxHashMap::default();
        for &i in rows.iter() {
            *size.entry(phases_of[i]).or_default() += 1;
        }
        let small = |p: &u64| size[p] < min_rows;
        let merged = size.keys().filter(|p| small(p)).fold(0, |all, p| all | p);
        for &i in rows.iter() {
            if small(&phases_of[i]) {
                phases_of[i] = merged;
            }
        }
        let mut group_start: FxHashMap<u64, u64> = FxHashMap::default();
        for &i in rows.iter() {
            let first = group_start
                .entry(phases_of[i])
                .or_insert(rows_of[i].first_use);
            *first = (*first).min(rows_of[i].first_use);
        }
        // Stable: within a group, the pattern's (first-use) order.
        rows.sort_by_key(|&i| (group_start[&phases_of[i]], phases_of[i]));
    }
    let mut plan = Plan {
        updates: vec![Vec::new(); cfg.workers],
        thread_cached: vec![Vec::new(); cfg.workers],
        clocks: pattern.clocks().max(1),
        ..Plan::default()
    };
    let total_accesses = pattern.accesses().max(1) as f64;
    let clocks = plan.clocks as u128;
    // Per worker: bytes of the rows it updates, and those bytes times its reads of them.
    let mut updated = vec![(0u128, 0u128); cfg.workers];
    let mut offset = 0usize;
    for (shard, rows) in by_shard.iter().enumerate() {
        let shard_start = (plan.slots.len(), offset);
        let per_chunk = rows.len().div_ceil(cfg.chunks.max(1)).max(1);
        for (n, &i) in rows.iter().enumerate() {
            let row = &rows_of[i];
            let len = tables[row.key.table as usize].row_bytes();
            let slot = plan.slots.len() as u32;
            let in_chunk = plan.chunks.last().map_or(0, |c| c.slots.len());
            let same_group = plan.chunk_phases.last() == Some(&phases_of[i]);
            if n == 0 || in_chunk == per_chunk || !same_group {
                plan.chunks.push(Span {
                    shard: shard as u32,
                    slots: plan.slots.len()..plan.slots.len(),
                    bytes: offset..offset,
                });
                plan.chunk_phases.push(phases_of[i]);
            }
            let chunk = plan.chunks.len() as u32 - 1;
            plan.slots.push(Slot {
                key: row.key,
                offset,
                len,
                shard: shard as u32,
                chunk,
            });
            offset += padded(len);
            let span = plan.chunks.last_mut().expect("pushed above");
            span.slots.end = plan.slots.len();
            span.bytes.end = offset;
            plan.index.insert(row.key, slot);
            for &(w, _) in &row.updaters {
                if let Some(u) = plan.updates.get_mut(w as usize) {
                    u.push(slot);
                }
                if let Some((bytes, read)) = updated.get_mut(w as usize) {
                    let reads = row
                        .readers
                        .binary_search_by_key(&w, |r| r.0)
                        .map_or(0, |i| row.readers[i].1);
                    *bytes += padded(len) as u128;
                    *read += padded(len) as u128 * u128::from(reads);
                }
            }
            let threads = row.workers();
            let contention = row.accesses() as f64 / total_accesses * threads.len() as f64;
            if cfg.thread_caches && threads.len() >= 2 && contention >= cfg.contention_threshold {
                for w in threads {
                    if let Some(t) = plan.thread_cached.get_mut(w as usize) {
                        t.push(slot);
                    }
                }
            }
        }
        plan.shards.push(Span {
            shard: shard as u32,
            slots: shard_start.0..plan.slots.len(),
            bytes: shard_start.1..offset,
        });
    }
    plan.arena_bytes = offset;
    plan.views = updated
        .iter()
        .map(|&(bytes, read)| cfg.thread_caches && read > bytes * clocks)
        .collect();
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::element::ElemType;
    use crate::gather::{Access, AccessLog};

    fn tables() -> Vec<TableMeta> {
        vec![
            TableMeta {
                id: 0,
                name: "a".into(),
                width: 3,
                elem: ElemType::F32,
                rows: None,
                rule: crate::rule::Rule::Sum,
            },
            TableMeta {
                id: 1,
                name: "hot".into(),
                width: 2,
                elem: ElemType::I64,
                rows: None,
                rule: crate::rule::Rule::Sum,
            },
        ]
    }

    fn pattern() -> AccessPattern {
        let mut logs = vec![AccessLog::default(), AccessLog::default()];
        for (w, log) in logs.iter_mut().enumerate() {
            for r in 0..20u64 {
                let key = RowKey::new(0, r * 2 + w as u64);
                log.record(key, Access::Read);
                log.record(key, Access::Update);
                log.record(RowKey::new(1, 0), Access::Read);
                log.record(RowKey::new(1, 0), Access::Update);
            }
            log.record(RowKey::new(9, 0), Access::Read); // unknown table: left out
            log.clocks = 1;
        }
        AccessPattern::from_logs(logs)
    }

    #[test]
    fn lays_out_rows_by_shard_in_first_use_order_aligned() {
        let cfg = PlanConfig {
            workers: 2,
            chunks: 3,
            thread_caches: true,
            contention_threshold: 0.1,
        };
        let plan = build(&pattern(), &tables(), &Placement::hashed(2), &cfg);
        assert_eq!(plan.slots.len(), 41);
        assert_eq!(plan.index.len(), 41);
        for (i, s) in plan.slots.iter().enumerate() {
            assert_eq!(s.offset % 8, 0);
            assert_eq!(plan.index[&s.key] as usize, i);
            let span = &plan.chunks[s.chunk as usize];
            assert!(span.slots.contains(&i) && span.shard == s.shard);
        }
        // Shards are contiguous and cover the arena; chunks tile each shard in order.
        assert_eq!(plan.shards[0].bytes.start, 0);
        assert_eq!(plan.shards[0].bytes.end, plan.shards[1].bytes.start);
        assert_eq!(plan.shards[1].bytes.end, plan.arena_bytes);
        for shard in &plan.shards {
            let chunks: Vec<_> = plan
                .chunks
                .iter()
                .filter(|c| c.shard == shard.shard)
                .collect();
            assert!(chunks.len() <= 3);
            assert_eq!(chunks.first().unwrap().bytes.start, shard.bytes.start);
            assert_eq!(chunks.last().unwrap().bytes.end, shard.bytes.end);
        }
        // Within a shard, slots follow first use.
        for shard in &plan.shards {
            let uses: Vec<u64> = plan.slots[shard.slots.clone()]
                .iter()
                .map(|s| pattern().get(s.key).unwrap().first_use)
                .collect();
            assert!(uses.windows(2).all(|w| w[0] <= w[1]), "{uses:?}");
        }
        // Each worker updates its 20 rows plus the hot row.
        assert_eq!(plan.updates[0].len(), 21);
        // Each worker's accesses are resolved to slots in order; the unknown table's
        // access is left off.
        let mut p = pattern();
        let sequences = p.take_sequences();
        let t = tapes(&p, &plan, sequences, None);
        assert_eq!(t.truncated, 0);
        assert_eq!(t.tapes[1].len(), 80);
        assert_eq!(t.tapes[1][0], plan.index[&RowKey::new(0, 1)]);
        assert_eq!(t.tapes[1][1], plan.index[&RowKey::new(0, 1)]);
        assert_eq!(t.tapes[1][2], plan.index[&RowKey::new(1, 0)]);
        // Only the hot row is contended enough for per-thread copies.
        let hot = plan.index[&RowKey::new(1, 0)];
        assert_eq!(plan.thread_cached, vec![vec![hot], vec![hot]]);
    }

    #[test]
    fn chunks_hold_rows_read_in_the_same_clocks_in_order_of_need() {
        // One worker, two clocks: rows 0 and 1 read in clock 0, rows 2 and 3 in clock 1,
        // row 4 in both, row 5 only updated (never read).
        let mut log = AccessLog::default();
        let key = |r| RowKey::new(0, r);
        for r in [4, 0, 5, 1] {
            log.record(key(r), if r == 5 { Access::Update } else { Access::Read });
        }
        log.clocks = 1;
        for r in [2, 4, 3] {
            log.record(key(r), Access::Read);
        }
        log.clocks = 2;
        let pattern = AccessPattern::from_logs(vec![log]);
        let cfg = PlanConfig {
            workers: 1,
            chunks: 1,
            thread_caches: false,
            contention_threshold: 1.0,
        };
        let plan = build(&pattern, &tables(), &Placement::hashed(1), &cfg);
        assert_eq!(plan.clocks, 2);
        let rows: Vec<Vec<u64>> = plan
            .chunks
            .iter()
            .map(|c| {
                plan.slots[c.slots.clone()]
                    .iter()
                    .map(|s| s.key.row)
                    .collect()
            })
            .collect();
        // Groups by first use: {4} (both clocks), {0, 1} (clock 0), {5} (never read),
        // {2, 3} (clock 1); one shard asked for one chunk still gets one per group.
        assert_eq!(rows, [vec![4], vec![0, 1], vec![5], vec![2, 3]]);
        assert_eq!(plan.chunk_phases, [0b11, 0b01, 0, 0b10]);
    }

    #[test]
    fn groups_too_small_for_a_chunk_are_merged() {
        // 64 rows read in clock 0 and `lone` rows in each of the clocks 1..=8; 4 chunks,
        // so groups under a sixteenth of the shard's rows merge. With 8 per clock (128
        // rows): none does, chunks of 32 rows. With 2 (80 rows): the eight groups of 2
        // merge into one read in clocks 1..=8, and clock 0's rows take chunks of 20.
        let plan_for = |lone: u64| {
            let mut log = AccessLog::default();
            for r in 0..64 {
                log.record(RowKey::new(0, r), Access::Read);
            }
            for c in 1..=8u64 {
                log.clocks = c;
                for r in 0..lone {
                    log.record(RowKey::new(0, 1000 + c * 10 + r), Access::Read);
                }
            }
            log.clocks = 9;
            let cfg = PlanConfig {
                workers: 1,
                chunks: 4,
                thread_caches: false,
                contention_threshold: 1.0,
            };
            build(
                &AccessPattern::from_logs(vec![log]),
                &tables(),
                &Placement::hashed(1),
                &cfg,
            )
        };
        let separate = plan_for(8);
        let lone_clocks: Vec<u64> = (1..=8).map(|c| 1 << c).collect();
        assert_eq!(separate.chunk_phases, [&[1, 1][..], &lone_clocks].concat());
        let merged = plan_for(2);
        assert_eq!(merged.chunk_phases, [1, 1, 1, 1, 0b1_1111_1110]);
    }

    /// Two workers, one shard and one chunk, no per-thread copies.
    fn one_shard_without_thread_caches() -> PlanConfig {
        PlanConfig {
            workers: 2,
            chunks: 1,
            thread_caches: false,
            contention_threshold: 0.0,
        }
    }

    #[test]
    fn tapes_beyond_the_budget_are_truncated_in_proportion() {
        let cfg = one_shard_without_thread_caches();
        let mut p = pattern();
        let plan = build(&p, &tables(), &Placement::hashed(1), &cfg);
        let sequences = p.take_sequences();
        // 162 accesses (81 per worker, one of each left out); room for 100 steps.
        let t = tapes(&p, &plan, sequences, Some(400));
        assert_eq!(t.tapes[0].len(), 50);
        assert_eq!(t.tapes[1].len(), 50);
        assert_eq!(t.truncated, 60);
        assert_eq!(t.tapes[0][0], plan.index[&RowKey::new(0, 0)]);
    }

    #[test]
    fn thread_caches_can_be_switched_off() {
        let cfg = one_shard_without_thread_caches();
        let plan = build(&pattern(), &tables(), &Placement::hashed(1), &cfg);
        assert!(plan.thread_cached.iter().all(Vec::is_empty));
        assert_eq!(plan.views, [false, false]);
        assert_eq!(plan.chunks.len(), 1);
    }

    #[test]
    fn views_go_to_workers_that_read_their_rows_more_than_once_a_clock() {
        let cfg = PlanConfig {
            thread_caches: true,
            ..one_shard_without_thread_caches()
        };
        // Each worker reads its 20 rows once and the hot row 20 times (16 bytes each):
        // 640 bytes read of 336 updated, in one clock.
        let plan = build(&pattern(), &tables(), &Placement::hashed(1), &cfg);
        assert_eq!(plan.views, [true, true]);
        // Two clocks of the same accesses (a DNN's mini-batches): worker 0 reads each of
        // its rows once a clock, worker 1 never reads its own.
        let mut logs = vec![AccessLog::default(), AccessLog::default()];
        for _ in 0..2 {
            for r in 0..10u64 {
                logs[0].record(RowKey::new(0, r), Access::Read);
                logs[0].record(RowKey::new(0, r), Access::Update);
                logs[1].record(RowKey::new(0, 10 + r), Access::Update);
            }
        }
        for log in &mut logs {
            log.clocks = 2;
        }
        let pattern = AccessPattern::from_logs(logs);
        let plan = build(&pattern, &tables(), &Placement::hashed(1), &cfg);
        assert_eq!(plan.views, [false, false]);
        // One read more of each row a clock, and worker 0's views pay.
        let mut logs = vec![AccessLog::default(); 2];
        for _ in 0..2 {
            for r in 0..10u64 {
                logs[0].record(RowKey::new(0, r), Access::Read);
                logs[0].record(RowKey::new(0, r), Access::Update);
                logs[0].record(RowKey::new(0, r), Access::Read);
            }
        }
        logs[0].clocks = 2;
        let plan = build(
            &AccessPattern::from_logs(logs),
            &tables(),
            &Placement::hashed(1),
            &cfg,
        );
        assert_eq!(plan.views, [true, false]);
    }
}
