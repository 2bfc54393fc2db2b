//! Building a worker's specialized state from the plan ([`SpecialWorker::new`]): its updated
//! rows cut into blocks (a run for narrow rows that follow each other, [`group_runs`]),
//! laid out in arena order with their headers; the per-shard and per-chunk directories
//! the CLOCK and the refresh walk; the private copies of contended rows; and the op tape
//! turned into steps, checked once.
//!
//! This file runs once per worker and run; nothing here is on an access's path. It
//! writes headers only through [`Header`]'s constructors.

use super::block::{block_len, Header, NO_VIEW};
use super::slab_tables::SlabTables;
use super::slab_writes::SlabWrites;
use super::tape::{check_steps, run_step_of, MAX_RUN, RUN_SHIFT, RUN_STEP, SLOT_STEP};
use super::views::{ViewRow, RUN_VIEWS};
use super::{AccessCounters, Copies, SpecialWorker, WorkerSlot, NONE, RUN_ROW};
use crate::buf::AlignedBuf;
use crate::client::ProcessArena;
use crate::element::ElemType;
use crate::slot::{padded, padded_words};
use crate::table::TableMeta;
use crate::worker::sent::SentUpdates;
use std::sync::Arc;

impl SpecialWorker {
    /// State for worker `worker` of a store with `tables` configured by `config`: a block
    /// (delta buffer) per row it updates with the contiguous index on, with a private
    /// view of the row where the plan gives this worker views
    /// ([`Plan::views`](crate::plan::Plan::views): thread caches on, and rows it reads
    /// more than once a clock). `tape`: the worker's op tape (plan slots,
    /// see [`crate::plan::tapes`]), turned into its steps in place.
    pub(crate) fn new(
        arena: Arc<ProcessArena>,
        tables: &[TableMeta],
        worker: usize,
        config: &crate::config::Config,
        tape: Vec<u32>,
    ) -> Self {
        let deltas = config.specializations.contiguous_index;
        let plan = &arena.plan;
        let views = config.specializations.thread_caches && plan.views.get(worker) == Some(&true);
        let none: &[u32] = &[];
        let updates = plan.updates.get(worker).map_or(none, Vec::as_slice);
        let copied = plan.thread_cached.get(worker).map_or(none, Vec::as_slice);
        let mut slots = vec![
            WorkerSlot {
                copy: NONE,
                block: NONE,
            };
            plan.slots.len()
        ];
        let (mut words, mut blocks) = (Vec::new(), Vec::new());
        let mut shard_blocks = vec![0..0; plan.shards.len()];
        let mut shard_bytes = vec![0; plan.shards.len()];
        let mut shard_min_row = vec![usize::MAX; plan.shards.len()];
        let mut shard_max_row = vec![0; plan.shards.len()];
        let mut slab_tables = SlabTables::new();
        let mut chunk_views = vec![Vec::new(); if views { plan.chunks.len() } else { 0 }];
        let groups = group_runs(plan, updates);
        let block_words = |&(first, count): &(usize, usize)| {
            block_len(plan.slots[updates[first] as usize].len, count, views)
        };
        // Steps address blocks with 30 bits of words, runs with 24 bits: beyond 8 GiB of
        // blocks or 16 M runs, none are built and every update takes the generic path (a
        // partial layout would not match the one the servers expect slabs in).
        let fits = groups.iter().map(block_words).sum::<usize>() < RUN_STEP as usize
            && groups.len() < (RUN_STEP >> RUN_SHIFT) as usize;
        let mut runs = Vec::new();
        if deltas && fits {
            for &(first, count) in &groups {
                let rows = &updates[first..first + count];
                let slot = &plan.slots[rows[0] as usize];
                let b = words.len();
                let range = &mut shard_blocks[slot.shard as usize];
                *range = if range.start == range.end {
                    first..first + count
                } else {
                    range.start..first + count
                };
                let run = is_narrow(slot.len).then_some(runs.len());
                for &s in rows {
                    let planned = &plan.slots[s as usize];
                    slots[s as usize].block = b as u32;
                    shard_bytes[slot.shard as usize] += padded(planned.len);
                    slab_tables.push(blocks.len(), planned.key.table, padded(planned.len));
                    let min = &mut shard_min_row[slot.shard as usize];
                    *min = (*min).min(padded(planned.len));
                    let max = &mut shard_max_row[slot.shard as usize];
                    *max = (*max).max(padded(planned.len));
                    blocks.push(match run {
                        Some(_) => RUN_ROW | planned.key.row.wrapping_sub(slot.key.row) as u32,
                        None => b as u32,
                    });
                }
                if let Some(views) = chunk_views.get_mut(slot.chunk as usize) {
                    views.push(ViewRow {
                        block: b as u32,
                        word: slot.word(),
                        words: match run {
                            Some(_) => RUN_VIEWS,
                            None => padded_words(slot.len) as u32,
                        },
                        elem: tables
                            .get(slot.key.table as usize)
                            .map_or(ElemType::F64, |t| t.elem),
                    });
                }
                words.extend_from_slice(&match run {
                    Some(run) => {
                        runs.push(b as u32);
                        Header::for_run(slot.key, first, run, slot.len, count)
                    }
                    None => Header::for_row(slot.key, first, rows[0], slot.len),
                });
                words.resize(b + block_words(&(first, count)), 0);
            }
        }
        let shard_row_words = (0..plan.shards.len())
            .map(|s| {
                let rows = (shard_min_row[s], shard_max_row[s]);
                plain_row_words(&blocks[shard_blocks[s].clone()], rows)
            })
            .collect();
        for (min, &bytes) in shard_min_row.iter_mut().zip(&shard_bytes) {
            if bytes == 0 {
                *min = 0; // a shard this worker updates no row of
            }
        }
        slab_tables.finish(&shard_blocks);
        words.shrink_to_fit();
        blocks.shrink_to_fit();
        runs.shrink_to_fit();
        chunk_views.iter_mut().for_each(Vec::shrink_to_fit);
        let mut offsets = Vec::with_capacity(copied.len());
        let mut at = 0;
        for (i, &s) in copied.iter().enumerate() {
            slots[s as usize].copy = i as u32;
            offsets.push(at);
            at += padded(plan.slots[s as usize].len);
        }
        // The tape becomes the steps in place: a block's first word, a run's row, or a
        // slot marked as one.
        let mut steps = tape;
        if plan.slots.len() >= SLOT_STEP as usize {
            steps = Vec::new(); // slots beyond 31 bits: every access takes the indexed path
        }
        for step in &mut steps {
            let slot = *step;
            *step = match slots[slot as usize].block {
                NONE => slot | SLOT_STEP,
                b if Header::at(&words, b as usize).is_run() => {
                    let index = updates.binary_search(&slot).expect("an updated row");
                    run_step_of(Header::at(&words, b as usize), index)
                }
                b => b,
            };
        }
        check_steps(&steps, &words, 1 + usize::from(views), tables);
        let touched_words = blocks.len().div_ceil(64);
        let gradient = gradient_bits(plan, updates, tables, touched_words);
        SpecialWorker {
            worker,
            zone: arena.worker_zone(worker),
            words,
            blocks,
            runs,
            views,
            shard_bytes,
            shard_min_row,
            shard_max_row,
            shard_row_words,
            shard_blocks,
            slab_tables,
            chunk_views,
            recent: SentUpdates::default(),
            copies: Copies {
                clocks: vec![NO_VIEW; offsets.len()],
                offsets,
                data: AlignedBuf::zeroed(at),
            },
            slots,
            steps,
            cursor: 0,
            touched: vec![0; touched_words],
            dirty: vec![0; touched_words],
            holds: false,
            gradient,
            writes: SlabWrites::new(config.slab_stores),
            ssp: config.staleness != crate::consistency::Staleness::BSP,
            counters: AccessCounters::default(),
            tape_hits: 0,
            phase: 0,
            arena,
        }
    }
}

impl SpecialWorker {
    /// This state, for runs under SSP (`true`) or BSP: the staleness of the run it is
    /// built for, which a branch may change from the configured one.
    pub(crate) fn with_ssp(mut self, ssp: bool) -> Self {
        self.ssp = ssp;
        self
    }
}

/// A bit per updated row (`updates`, plan slots in arena order) set for the rows of
/// tables with an update rule, in `words` words; empty if there are none.
fn gradient_bits(
    plan: &crate::plan::Plan,
    updates: &[u32],
    tables: &[TableMeta],
    words: usize,
) -> Vec<u64> {
    let ruled = |s: u32| {
        let table = plan.slots[s as usize].key.table as usize;
        tables.get(table).is_some_and(|t| !t.rule.is_sum())
    };
    if !updates.iter().any(|&s| ruled(s)) {
        return Vec::new();
    }
    let mut bits = vec![0u64; words.max(updates.len().div_ceil(64))];
    for (i, &s) in updates.iter().enumerate() {
        if ruled(s) {
            bits[i / 64] |= 1 << (i % 64);
        }
    }
    bits
}

/// Whether a row of `len` bytes goes in a run: it takes one word.
fn is_narrow(len: usize) -> bool {
    padded_words(len) == 1
}

/// The worker's updated rows `updates` (plan slots, arena order) cut into blocks, as
/// `(first, rows)` positions in `updates`: a run of up to [`MAX_RUN`] narrow rows of one
/// table and size that follow each other in one chunk and shard, their ids at most
/// [`RUN_ROW`] past the first's; every other row alone.
fn group_runs(plan: &crate::plan::Plan, updates: &[u32]) -> Vec<(usize, usize)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (i, &s) in updates.iter().enumerate() {
        let slot = &plan.slots[s as usize];
        if let Some((first, count)) = runs.last_mut() {
            let last = &plan.slots[updates[*first + *count - 1] as usize];
            let head = &plan.slots[updates[*first] as usize];
            let joins = *count < MAX_RUN
                && slot.key.row.wrapping_sub(head.key.row) < u64::from(RUN_ROW)
                && is_narrow(slot.len)
                && is_narrow(last.len)
                && slot.len == last.len
                && slot.key.table == last.key.table
                && slot.shard == last.shard
                && slot.chunk == last.chunk;
            if joins {
                *count += 1;
                continue;
            }
        }
        runs.push((i, 1));
    }
    runs
}

/// The words of a shard's rows if its `blocks` (entries of [`SpecialWorker::blocks`]) are each
/// one row (no runs) and its rows' padded bytes `(narrowest, widest)` are one width.
fn plain_row_words(blocks: &[u32], (narrowest, widest): (usize, usize)) -> Option<usize> {
    let plain =
        !blocks.is_empty() && narrowest == widest && blocks.iter().all(|&e| e & RUN_ROW == 0);
    plain.then_some(widest / 8)
}

#[cfg(test)]
mod tests {
    use super::plain_row_words;
    use crate::worker::special::RUN_ROW;

    #[test]
    fn a_shard_is_plain_when_its_blocks_are_single_rows_of_one_width() {
        assert_eq!(plain_row_words(&[0, 40, 80], (72, 72)), Some(9));
        assert_eq!(plain_row_words(&[0, 40, 80], (64, 72)), None);
        assert_eq!(plain_row_words(&[0, RUN_ROW | 1, 80], (8, 8)), None);
        assert_eq!(plain_row_words(&[], (0, 0)), None);
    }
}
