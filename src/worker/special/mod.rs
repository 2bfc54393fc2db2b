//! A worker's specialized state: one contiguous buffer of **blocks**, one per row the
//! worker updates (in arena order), each a small header (the row's key, its view's data
//! clock, its index, whose bit in [`Special::touched`] says whether it was updated in this
//! clock) followed by the row's view and this clock's delta; per-thread
//! copies of contended rows; and the read path through the [`ProcessArena`].
//!
//! Rows of 8 bytes or less (PageRank's ranks one vertex a row) share a block: a **run**
//! of up to [`MAX_RUN`] such rows of one table that follow each other in the worker's
//! arena order within one refresh chunk and shard, under one header (naming the run's
//! first row), their views then their deltas. A step names a run's row by the run's
//! number ([`Special::runs`]) and the row's offset in it; the row's key is checked as the
//! header's row plus the row's 4-byte id offset, its entry in [`Special::blocks`]; like
//! every row's, its touched bit is in [`Special::touched`], and its arena word for a refresh is
//! the plan's. So the per-row bookkeeping of such rows (those 4 bytes, and a 32-byte
//! header over up to 64 rows) is no larger than the row.
//!
//! A worker following its pattern finds each access's block straight from its pre-resolved
//! access sequence, so a READ or UPDATE of a row it updates touches one block (two or
//! three adjacent cache lines) and nothing else, and the blocks a few steps ahead are
//! prefetched. No hashing beyond the plan's index (only for deviating accesses), no locks.
//! Those fast paths are in `fast.rs`; this file builds the state and holds the general
//! paths: resolving deviating keys, refreshing views a chunk at a time, waiting for the
//! arena, the generic-shaped `read`/`update` and CLOCK's slabs.

mod fast;
mod held;
mod slab_writes;

use slab_writes::SlabWrites;

use super::sent::Sent;
use crate::buf::AlignedBuf;
use crate::client::{ClientShared, ProcessArena, WAIT_SLICE};
use crate::element::{ElemType, Element};
use crate::error::Result;
use crate::ids::{Clock, RowKey};
use crate::slot::{padded, padded_words};
use crate::stream;
use crate::table::TableMeta;
use std::ops::Range;
use std::sync::Arc;

const NONE: u32 = u32::MAX;
/// Marks a step that names a plan slot (a row without a block) instead of a block.
const SLOT_STEP: u32 = 1 << 31;
/// Marks a step that names a row of a run, as `run << RUN_SHIFT | offset` ([`Special::runs`]),
/// instead of a block's first word.
const RUN_STEP: u32 = 1 << 30;
/// Bits of a run step's offset.
const RUN_SHIFT: u32 = 6;
/// The most rows one run holds.
const MAX_RUN: usize = 1 << RUN_SHIFT;
/// Marks an entry of [`Special::blocks`] that is a run's row: its row id's offset from
/// the run's first row's, below `RUN_ROW`.
const RUN_ROW: u32 = 1 << 31;
/// How many steps ahead of the cursor blocks are prefetched.
const AHEAD: usize = 16;

/// Words (8 bytes) of a block header: `row`, `table | run << 33 | index << 34`, view
/// data clock, `slot | len << 32` (`len`: the row's size in bytes; `index`: the row's
/// position in arena order, its bit in [`Special::touched`], which says whether the row
/// was updated in this clock). A run's header names its first row, its `slot` is the
/// run's number, and `len` is 16 bits followed by the run's number of rows.
const HEADER_WORDS: usize = 4;
const RUN: u64 = 1 << 33;
const INDEX_SHIFT: u32 = 34;
/// Where the row's size in bytes starts in a block header's last word.
const LEN_SHIFT: u32 = 32;
/// Where a run's number of rows starts in its header's last word.
const COUNT_SHIFT: u32 = 48;

/// Where a planned row lives, as the fast path finds it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place {
    slot: u32,
    /// First word of this worker's block of the row, or [`NONE`].
    block: u32,
    /// The row's position in its block: 0, or its offset in a run.
    offset: u32,
}

/// What a plan slot resolves to for this worker ([`Special::info`]): the plan's row, chunk
/// and arena word with this worker's copy and block.
#[derive(Debug, Clone, Copy)]
struct SlotInfo {
    key: RowKey,
    chunk: u32,
    /// Arena word (8 bytes) where the row starts.
    word: u32,
    /// Row of this worker's private copies, or [`NONE`].
    copy: u32,
    /// This worker's block of the row, or [`NONE`].
    block: u32,
}

/// This worker's part of a plan slot (8 bytes; the row, chunk and arena word are the
/// plan's, shared by the process's workers).
#[derive(Debug, Clone, Copy)]
struct WorkerSlot {
    /// Row of this worker's private copies, or [`NONE`].
    copy: u32,
    /// This worker's block of the row, or [`NONE`].
    block: u32,
}

/// A block with a view, as the chunk refresh finds it.
#[derive(Debug, Clone, Copy)]
struct ViewRow {
    /// First word of the block.
    block: u32,
    /// Arena word where its row starts (a run's first row; the others' are the plan's).
    word: u32,
    /// Words of the view of a block's one row; [`RUN_VIEWS`] for a run's.
    words: u32,
    elem: ElemType,
}

/// [`ViewRow::words`] of a run: its rows' views are found through its header.
const RUN_VIEWS: u32 = u32::MAX;

/// Where one row of a block is: the block, the row's index in arena order and the first
/// words of its view and of its delta.
#[derive(Debug, Clone, Copy)]
struct RowAt {
    block: usize,
    /// The row's index in arena order.
    index: usize,
    /// The row's offset in its block (0 but in a run).
    offset: usize,
    view: usize,
    delta: usize,
}

/// A worker's private copies of contended rows, contiguous.
struct Copies {
    offsets: Vec<usize>,
    clocks: Vec<Clock>,
    data: AlignedBuf,
}

/// Per-worker specialized state (see module docs).
pub(crate) struct Special {
    pub(crate) arena: Arc<ProcessArena>,
    /// This worker's index in the plan's per-worker layouts.
    worker: usize,
    /// This worker's NUMA zone: which of the arena's zone copies it reads.
    zone: u8,
    /// The blocks (see module docs), or empty when delta buffers are off.
    words: Vec<u64>,
    /// Per row with a block, in arena order: the block's first word, or for a run's row
    /// [`RUN_ROW`] and the row id's offset from the run's first row's.
    blocks: Vec<u32>,
    /// Per run, its block's first word.
    runs: Vec<u32>,
    /// Whether blocks hold a view (thread caches on) before the delta.
    views: bool,
    /// Per shard: its blocks (a range of `blocks`).
    shard_blocks: Vec<Range<usize>>,
    /// Per shard: the size of its slab (its blocks' padded rows).
    shard_bytes: Vec<usize>,
    /// Per shard: the bytes of its narrowest padded row (a bound a CLOCK decides by).
    shard_min_row: Vec<usize>,
    /// Per shard: the bytes of its widest padded row (a sparse slab's capacity).
    shard_max_row: Vec<usize>,
    /// Per shard: the words of its rows when its blocks are each one row (no runs), all
    /// of one width: a CLOCK takes their deltas without reading the blocks' headers.
    shard_row_words: Vec<Option<usize>>,
    /// Per refresh chunk of the arena: the rows in it this worker keeps a view of.
    chunk_views: Vec<Vec<ViewRow>>,
    /// Sent updates kept for read-my-writes under SSP: the blocks as they were sent.
    recent: Sent<Vec<u64>>,
    copies: Copies,
    /// Per slot of the plan, this worker's copy and block.
    slots: Vec<WorkerSlot>,
    /// This worker's accesses of one iteration: a block's first word, or a slot with
    /// [`SLOT_STEP`] set. 4 bytes per access, so walking the sequence costs little memory
    /// bandwidth.
    ///
    /// **Invariant** (checked where the steps are made, [`check_steps`]): a step below
    /// [`RUN_STEP`] is the first word of a block of one row lying wholly inside `words`
    /// (header, then a view, with views on, and a delta of the row's size) whose row
    /// size is its table's (width times element size); `words` and `steps` never change
    /// length afterwards. `read_update_fast` reads blocks without bounds checks on the
    /// strength of it.
    steps: Vec<u32>,
    /// Position in `steps`.
    cursor: usize,
    /// The blocks touched in this clock, a bit per block (by index in arena order), so a
    /// CLOCK visits only those.
    touched: Vec<u64>,
    /// Once the worker holds rows ([`Worker::read_update`], `held.rs`): the rows updated
    /// in this clock while not held, a bit per row as in `touched`. A row is held when
    /// it is touched and not dirty: a `read_update` clears its bit (adding its delta to
    /// the view, which becomes the worker's copy), an update of a row not held sets it.
    ///
    /// [`Worker::read_update`]: crate::Worker::read_update
    dirty: Vec<u64>,
    /// Whether this worker has held a row (called `read_update`): until then `dirty` is
    /// not kept and no row is held, so the other paths pay nothing for it.
    holds: bool,
    /// Whether staleness is above zero: then a view may be refilled after its row was
    /// held in the clock (its chunk went stale as a whole, or some of its views were
    /// marked stale at a CLOCK), and a refill adds the held rows' updates back. Under
    /// BSP a chunk is refilled once a clock, before any of its rows is read.
    ssp: bool,
    /// Whether the slabs are written with plain or streaming stores.
    writes: SlabWrites,
    /// How accesses found their rows (observability: a specialization that silently
    /// falls back shows here). `tape` is filled in when the counters are taken.
    counters: AccessCounters,
    /// Tape hits before the cursor's current run: every step the cursor advances past is
    /// a hit, so hits = `tape_hits + cursor` (wrapping), kept without a per-access count.
    tape_hits: u64,
    /// The clock of the iteration this worker is in (from 0), for the refresh requests
    /// of reads that find their chunk too stale.
    pub(crate) phase: u32,
}

/// How a specialized worker's accesses found their rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct AccessCounters {
    /// Found as the next step of the op tape (no look-up).
    pub(crate) tape: u64,
    /// Off the tape (a deviating access, or one beyond a truncated tape), found in the
    /// plan's index.
    pub(crate) indexed: u64,
    /// Rows the plan does not hold: served by the generic path.
    pub(crate) unplanned: u64,
    /// Update slabs sent whole (every row of the layout, zeros where untouched).
    pub(crate) whole_slabs: u64,
    /// Update slabs sent as only the touched rows.
    pub(crate) partial_slabs: u64,
    /// Of the slabs, those written with streaming stores ([`crate::SlabStores`]).
    pub(crate) streamed_slabs: u64,
    /// `read_update`s served on the fast path: rows lent, each delta added once to the
    /// row and once to the update log.
    pub(crate) lent_read_updates: u64,
    /// `read_update`s that took the general path (rows copied out, then READs and
    /// UPDATEs one by one): a stale view to refresh, or accesses off the pattern.
    pub(crate) copied_read_updates: u64,
}

impl std::ops::AddAssign for AccessCounters {
    fn add_assign(&mut self, other: Self) {
        self.tape += other.tape;
        self.indexed += other.indexed;
        self.unplanned += other.unplanned;
        self.whole_slabs += other.whole_slabs;
        self.partial_slabs += other.partial_slabs;
        self.streamed_slabs += other.streamed_slabs;
        self.lent_read_updates += other.lent_read_updates;
        self.copied_read_updates += other.copied_read_updates;
    }
}

/// Bytes of one worker's specialized state, by part.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WorkerMemory {
    /// The op tape (steps).
    pub(crate) tape: usize,
    /// Blocks (headers, views, deltas) and their directories.
    pub(crate) blocks: usize,
    /// The per-slot table resolved for this worker.
    pub(crate) slots: usize,
    /// Per-thread copies of contended rows.
    pub(crate) copies: usize,
    /// Sent blocks kept for read-my-writes under SSP.
    pub(crate) recent: usize,
}

impl std::ops::AddAssign for WorkerMemory {
    fn add_assign(&mut self, other: Self) {
        self.tape += other.tape;
        self.blocks += other.blocks;
        self.slots += other.slots;
        self.copies += other.copies;
        self.recent += other.recent;
    }
}

impl Special {
    /// State for worker `worker` of a store with `tables` configured by `config`: a block
    /// (delta buffer) per row it updates with the contiguous index on, with a private
    /// view of the row with thread caches on. `tape`: the worker's op tape (plan slots,
    /// see [`crate::plan::tapes`]), turned into its steps in place.
    pub(crate) fn new(
        arena: Arc<ProcessArena>,
        tables: &[TableMeta],
        worker: usize,
        config: &crate::config::Config,
        tape: Vec<u32>,
    ) -> Self {
        let deltas = config.specializations.contiguous_index;
        let views = config.specializations.thread_caches;
        let plan = &arena.plan;
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
        let mut chunk_views = vec![Vec::new(); if views { plan.chunks.len() } else { 0 }];
        let groups = group_runs(plan, updates);
        let views_per = 1 + usize::from(views);
        let block_words = |&(first, count): &(usize, usize)| {
            HEADER_WORDS + padded_words(plan.slots[updates[first] as usize].len) * views_per * count
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
                let (flag, last) = match run {
                    Some(run) => {
                        runs.push(b as u32);
                        (RUN, run as u64 | (count as u64) << COUNT_SHIFT)
                    }
                    None => (0, u64::from(rows[0])),
                };
                words.extend_from_slice(&[
                    slot.key.row,
                    u64::from(slot.key.table) | flag | (first as u64) << INDEX_SHIFT,
                    Clock::MAX,
                    last | (slot.len as u64) << LEN_SHIFT,
                ]);
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
                b if words[b as usize + 1] & RUN != 0 => {
                    let index = updates.binary_search(&slot).expect("an updated row");
                    run_step_of(&words, b as usize, index)
                }
                b => b,
            };
        }
        check_steps(&steps, &words, views_per, tables);
        let touched_words = blocks.len().div_ceil(64);
        Special {
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
            chunk_views,
            recent: Sent::default(),
            copies: Copies {
                clocks: vec![Clock::MAX; offsets.len()],
                offsets,
                data: AlignedBuf::zeroed(at),
            },
            slots,
            steps,
            cursor: 0,
            touched: vec![0; touched_words],
            dirty: vec![0; touched_words],
            holds: false,
            writes: SlabWrites::new(config.slab_stores),
            ssp: config.staleness != crate::consistency::Staleness::BSP,
            counters: AccessCounters::default(),
            tape_hits: 0,
            phase: 0,
            arena,
        }
    }

    /// This state's op tape as plan slots (the steps decoded), to rebuild the state from
    /// when it cannot be kept (a run failed with updates of this worker unsent).
    pub(crate) fn into_tape(self) -> (Arc<ProcessArena>, Vec<u32>) {
        let mut tape = self.steps;
        let none: &[u32] = &[];
        let updates = self
            .arena
            .plan
            .updates
            .get(self.worker)
            .map_or(none, Vec::as_slice);
        for step in &mut tape {
            *step = if *step & SLOT_STEP != 0 {
                *step & !SLOT_STEP
            } else if *step & RUN_STEP != 0 {
                let (run, offset) = run_step(*step);
                let b = self.runs[run] as usize;
                updates[(self.words[b + 1] >> INDEX_SHIFT) as usize + offset]
            } else {
                self.words[*step as usize + 3] as u32
            };
        }
        (self.arena, tape)
    }

    /// Whether a view serves a read of a row of `T`s alone: views are on and, for floats,
    /// no sent updates of recent clocks wait to be added (SSP).
    #[inline(always)]
    pub(super) fn serves_reads<T: Element>(&self) -> bool {
        self.views && (T::TYPE.exact() || self.recent.is_empty())
    }

    /// Moves the cursor to `to`, banking the hits it had counted.
    #[inline]
    pub(super) fn move_cursor(&mut self, to: usize) {
        self.tape_hits = self.tape_hits.wrapping_add(self.cursor as u64);
        self.cursor = to;
    }

    /// How accesses found their rows since the last call, leaving zeros.
    pub(crate) fn take_counters(&mut self) -> AccessCounters {
        // Every step the cursor passed was a hit: count those of its current position.
        self.counters.tape = self.tape_hits.wrapping_add(self.cursor as u64);
        self.tape_hits = (self.cursor as u64).wrapping_neg();
        std::mem::take(&mut self.counters)
    }

    /// Bytes of this state, by part.
    pub(crate) fn memory(&self) -> WorkerMemory {
        WorkerMemory {
            tape: self.steps.capacity() * 4,
            blocks: self.words.capacity() * 8
                + self.blocks.capacity() * 4
                + self.runs.capacity() * 4
                + (self.touched.capacity() + self.dirty.capacity()) * 8
                + self.chunk_views.iter().map(|v| v.capacity()).sum::<usize>()
                    * size_of::<ViewRow>(),
            slots: self.slots.capacity() * size_of::<WorkerSlot>(),
            copies: self.copies.data.as_bytes().len()
                + self.copies.offsets.capacity() * 8
                + self.copies.clocks.capacity() * 8,
            recent: self.recent.all().map(|w| w.capacity() * 8).sum(),
        }
    }

    /// Where `key` lives: the next step of the pre-resolved access sequence when the
    /// worker is following its pattern (no hashing), else the plan's index.
    #[inline(always)]
    pub(crate) fn place(&mut self, key: RowKey) -> Option<Place> {
        if let Some(&step) = self.steps.get(self.cursor) {
            let hit = if step & SLOT_STEP == 0 {
                self.step_row(step, key).map(|at| Place {
                    slot: self.slot_of(at),
                    block: at.block as u32,
                    offset: at.offset as u32,
                })
            } else {
                let slot = step & !SLOT_STEP;
                let info = self.info(slot);
                (info.key == key).then_some(Place {
                    slot,
                    block: info.block,
                    offset: 0,
                })
            };
            if let Some(place) = hit {
                self.advance();
                return Some(place);
            }
        }
        self.deviate(key)
    }

    /// [`place`](Self::place) of a key off the expected sequence.
    #[cold]
    fn deviate(&mut self, key: RowKey) -> Option<Place> {
        let Some((place, step)) = self.locate(key) else {
            self.counters.unplanned += 1;
            return None;
        };
        self.counters.indexed += 1;
        // Resynchronise if this is where an iteration starts.
        if self.steps.first() == Some(&step) {
            self.move_cursor(1 % self.steps.len());
            // The step just matched was a deviation, not a hit.
            self.tape_hits = self.tape_hits.wrapping_sub(self.cursor as u64);
        }
        Some(place)
    }

    /// Where `key` lives, found in the plan's index (the cursor does not move).
    pub(crate) fn locate_place(&self, key: RowKey) -> Option<Place> {
        self.locate(key).map(|(place, _)| place)
    }

    /// Where `key` lives, found in the plan's index (the cursor does not move), with the
    /// step that names it; `None` if the plan does not hold it.
    fn locate(&self, key: RowKey) -> Option<(Place, u32)> {
        let slot = self.arena.slot(key)?;
        let block = self.slots[slot as usize].block;
        let b = block as usize;
        // A run's row: its step, from its index in arena order.
        let run_row = match self.words.get(b..b + HEADER_WORDS) {
            Some(h) if block != NONE && h[1] & RUN != 0 => {
                let updates = &self.arena.plan.updates[self.worker];
                let index = updates.binary_search(&slot).expect("an updated row");
                Some(run_step_of(&self.words, b, index))
            }
            _ => None,
        };
        let offset = run_row.map_or(0, |step| run_step(step).1);
        let step = match run_row {
            _ if block == NONE => slot | SLOT_STEP,
            Some(step) => step,
            None => block,
        };
        let place = Place {
            slot,
            block,
            offset: offset as u32,
        };
        Some((place, step))
    }

    /// What plan slot `slot` (below the plan's slots) resolves to for this worker.
    #[inline(always)]
    fn info(&self, slot: u32) -> SlotInfo {
        self.info_get(slot).expect("a plan slot")
    }

    /// [`info`](Self::info), `None` for a slot beyond the plan's.
    #[inline(always)]
    fn info_get(&self, slot: u32) -> Option<SlotInfo> {
        let (planned, mine) = (
            self.arena.plan.slots.get(slot as usize)?,
            self.slots.get(slot as usize)?,
        );
        Some(SlotInfo {
            key: planned.key,
            chunk: planned.chunk,
            word: planned.word(),
            copy: mine.copy,
            block: mine.block,
        })
    }

    /// The size in bytes of a row in the block at word `b`.
    #[inline(always)]
    fn block_len(&self, b: usize) -> usize {
        block_shape(&self.words, b).0
    }

    /// Where the row at `place` (which has a block) is.
    #[inline(always)]
    fn row_of(&self, place: Place) -> RowAt {
        row_at(
            &self.words,
            self.views,
            place.block as usize,
            place.offset as usize,
        )
    }

    /// The plan slot of the row at `at`.
    fn slot_of(&self, at: RowAt) -> u32 {
        if self.words[at.block + 1] & RUN == 0 {
            return self.words[at.block + 3] as u32;
        }
        self.arena.plan.updates[self.worker][at.index]
    }

    /// Whether the row at `at` was updated in this clock (its bit).
    #[inline(always)]
    fn row_touched(&self, at: RowAt) -> bool {
        bit(&self.touched, at.index)
    }

    /// [`row_touched`](Self::row_touched) in `sent`, blocks as
    /// [`take_slabs`](Self::take_slabs) kept them (the touched bits after the words).
    fn sent_touched(&self, sent: &[u64], at: RowAt) -> bool {
        bit(&sent[self.words.len()..], at.index)
    }

    /// Copies the row at `place` (a snapshot with data clock `>= required`) into `dst`,
    /// waiting for a refresh if needed; returns the snapshot's data clock.
    #[inline(always)]
    pub(crate) fn read(
        &mut self,
        shared: &ClientShared,
        place: Place,
        required: Clock,
        dst: &mut [u8],
    ) -> Result<Clock> {
        let info = self.info(place.slot);
        if info.copy != NONE {
            return self.read_copy(shared, place.slot, required, dst);
        }
        if let Some(clock) = self
            .arena
            .read_at_in(self.zone, info.chunk, info.word, required, dst)
        {
            return Ok(clock);
        }
        wait_read(
            shared,
            (&self.arena, self.zone),
            (place.slot, self.phase),
            &info,
            required,
            dst,
        )
    }

    /// The row at `place` from this worker's view, refreshed first if its snapshot is older
    /// than `required`: the snapshot plus every update this worker made since, and the
    /// snapshot's data clock. `None` if the row has no view (this worker does not update
    /// it, or thread caches are off), or its elements are floats.
    #[inline(always)]
    pub(crate) fn view<T: Element>(
        &mut self,
        shared: &ClientShared,
        place: Place,
        required: Clock,
    ) -> Result<Option<(&[T], Clock)>> {
        // Only where adding updates one by one equals adding their sum, or the row is
        // held: another float view would read other bits than the generic store
        // (snapshot + summed updates).
        if !T::TYPE.exact() && (place.block == NONE || !self.is_held(self.row_of(place))) {
            return Ok(None);
        }
        let Some(clock) = self.fresh_view(shared, place, required)? else {
            return Ok(None);
        };
        let at = self.row_of(place);
        let len = self.block_len(at.block);
        let view = &self.words[at.view..at.view + padded_words(len)];
        let row = &bytemuck::cast_slice::<u64, T>(view)[..len / size_of::<T>()];
        Ok(Some((row, clock)))
    }

    /// Copies the row at `place` into `dst` from this worker's view (refreshed first if
    /// older than `required`), with this worker's updates; returns the snapshot's data
    /// clock, or `None` if the row has no view. Float views hold the snapshot alone (the
    /// updates are added on each read, as the generic store adds them) unless the row is
    /// held; integer views already include them.
    #[inline(always)]
    pub(crate) fn read_view<T: Element>(
        &mut self,
        shared: &ClientShared,
        place: Place,
        required: Clock,
        dst: &mut [T],
    ) -> Result<Option<Clock>> {
        let Some(clock) = self.fresh_view(shared, place, required)? else {
            return Ok(None);
        };
        let at = self.row_of(place);
        let n = dst.len();
        let row_words = padded_words(size_of_val(dst));
        let view = &self.words[at.view..at.view + row_words];
        let view_row = &bytemuck::cast_slice::<u64, T>(view)[..n];
        let touched = self.row_touched(at);
        if !T::TYPE.exact() && self.is_held(at) {
            T::copy_row(dst, view_row); // this worker's copy
        } else if !T::TYPE.exact() && touched && self.recent.is_empty() {
            // The common float case in one pass: the snapshot plus this clock's delta (the
            // same additions as copying, then adding the delta).
            let delta = &self.words[at.delta..at.delta + row_words];
            let delta_row = &bytemuck::cast_slice::<u64, T>(delta)[..n];
            T::sum_into(dst, view_row, delta_row);
        } else {
            T::copy_row(dst, view_row);
            if !T::TYPE.exact() {
                self.add_own(place, clock, dst);
            }
        }
        Ok(Some(clock))
    }

    /// The data clock of the view of the row at `place`, refreshed first if older than
    /// `required`; `None` if the row has no view.
    #[inline(always)]
    fn fresh_view(
        &mut self,
        shared: &ClientShared,
        place: Place,
        required: Clock,
    ) -> Result<Option<Clock>> {
        if place.block == NONE || !self.views {
            return Ok(None);
        }
        let b = place.block as usize;
        let clock = self.words[b + 2];
        if clock == Clock::MAX || clock < required {
            return self.refresh_views(shared, place, required).map(Some);
        }
        Ok(Some(clock))
    }

    /// Refills the views of every row of the refresh chunk holding `place` from one
    /// snapshot `>= required` of the chunk (waiting for it if needed) and, in integer
    /// rows, adds this worker's updates that snapshot lacks; returns its data clock.
    #[cold]
    fn refresh_views(
        &mut self,
        shared: &ClientShared,
        place: Place,
        required: Clock,
    ) -> Result<Clock> {
        let info = self.info(place.slot);
        let rows = &self.chunk_views[info.chunk as usize];
        let (views, words) = (self.views, &mut self.words);
        let plan = &self.arena.plan;
        let updates = plan.updates.get(self.worker).map_or(&[][..], Vec::as_slice);
        let copy = |arena: &crate::client::ArenaWords<'_>| {
            for row in rows {
                let b = row.block as usize;
                if row.words != RUN_VIEWS {
                    let view = b + HEADER_WORDS;
                    arena.copy_row(row.word, &mut words[view..view + row.words as usize]);
                    continue;
                }
                // A run's rows (one word each) from their own arena words.
                let (view, _) = block_parts(words, views, b);
                let first = (words[b + 1] >> INDEX_SHIFT) as usize;
                for (v, &slot) in view.zip(&updates[first..]) {
                    arena.copy_row(plan.slots[slot as usize].word(), &mut words[v..v + 1]);
                }
            }
        };
        let clock = wait_chunk(
            shared,
            (&self.arena, self.zone),
            (place.slot, self.phase),
            info.chunk,
            required,
            copy,
        )?;
        let (rows, words) = (&self.chunk_views[info.chunk as usize], &mut self.words);
        let mut exact = false;
        for row in rows {
            words[row.block as usize + 2] = clock;
            exact |= row.elem.exact();
        }
        if exact || (self.holds && self.ssp) {
            // Integer views hold this worker's own updates too, and so do held rows'.
            for i in 0..self.chunk_views[info.chunk as usize].len() {
                let row = self.chunk_views[info.chunk as usize][i];
                // (`add_own_to_view` passes over float rows not held.)
                if row.elem.exact() || self.ssp {
                    self.add_own_to_view(row.block as usize, clock, row.elem);
                }
            }
        }
        Ok(clock)
    }

    /// Adds to the views of the block at word `b` (snapshots at `data_clock` of rows of
    /// `elem`s) this worker's updates they lack: to every row's of integers, to held
    /// rows' of floats.
    fn add_own_to_view(&mut self, b: usize, data_clock: Clock, elem: ElemType) {
        let count = block_shape(&self.words, b).1;
        for offset in 0..count {
            let at = row_at(&self.words, self.views, b, offset);
            if elem.exact() || self.is_held(at) {
                self.add_own_to_row(at, data_clock, elem);
            }
        }
    }

    /// Adds to the view of the row at `at` (a snapshot at `data_clock` of `elem`s) this
    /// worker's updates it lacks: the sent ones of clocks from `data_clock` on (SSP),
    /// oldest first, then this clock's delta if the row was updated — the additions a
    /// read makes.
    fn add_own_to_row(&mut self, at: RowAt, data_clock: Clock, elem: ElemType) {
        let len = block_shape(&self.words, at.block).0;
        let row_words = padded_words(len);
        let touched = self.row_touched(at);
        let words_len = self.words.len();
        let (head, tail) = self.words.split_at_mut(at.delta);
        let view: &mut [u8] =
            &mut bytemuck::cast_slice_mut(&mut head[at.view..at.view + row_words])[..len];
        for sent in self.recent.missing_from(data_clock) {
            if bit(&sent[words_len..], at.index) {
                let sent_delta = &sent[at.delta..at.delta + row_words];
                elem.add(view, &bytemuck::cast_slice(sent_delta)[..len]);
            }
        }
        if touched {
            let delta_row: &[u8] = bytemuck::cast_slice(&tail[..row_words]);
            elem.add(view, &delta_row[..len]);
        }
    }

    /// [`read`](Self::read) of a row this worker keeps a private copy of.
    fn read_copy(
        &mut self,
        shared: &ClientShared,
        slot: u32,
        required: Clock,
        dst: &mut [u8],
    ) -> Result<Clock> {
        let info = self.info(slot);
        let r = info.copy as usize;
        let at = self.copies.offsets[r];
        let len = dst.len();
        let clock = self.copies.clocks[r];
        if clock == Clock::MAX || clock < required {
            let row = &mut self.copies.data.as_bytes_mut()[at..at + len];
            self.copies.clocks[r] = wait_read(
                shared,
                (&self.arena, self.zone),
                (slot, self.phase),
                &info,
                required,
                row,
            )?;
        }
        dst.copy_from_slice(&self.copies.data.as_bytes()[at..at + len]);
        Ok(self.copies.clocks[r])
    }

    /// Adds this worker's updates to the row at `place` that a snapshot at `data_clock`
    /// lacks.
    #[inline(always)]
    pub(crate) fn add_own<T: Element>(&self, place: Place, data_clock: Clock, dst: &mut [T]) {
        if place.block == NONE {
            return;
        }
        let at = self.row_of(place);
        let n = dst.len();
        let delta = at.delta..at.delta + padded_words(size_of_val(dst));
        for words in self.recent.missing_from(data_clock) {
            if self.sent_touched(words, at) {
                let sent = &bytemuck::cast_slice::<u64, T>(&words[delta.clone()])[..n];
                T::add_slice(dst, sent);
            }
        }
        if self.row_touched(at) {
            T::add_slice(dst, &bytemuck::cast_slice(&self.words[delta])[..n]);
        }
    }

    /// Adds `delta` to the row at `place`, starting at element `column` (a whole row:
    /// `column == 0` and the row's width). Returns `false` when the row has no block in
    /// this worker (the caller logs it generically).
    #[inline(always)]
    pub(crate) fn update<T: Element>(&mut self, place: Place, column: usize, delta: &[T]) -> bool {
        if place.block == NONE {
            return false;
        }
        let at = self.row_of(place);
        let width = self.block_len(at.block) / size_of::<T>();
        if self.words[at.block + 1] & RUN == 0 {
            self.add_to_block(at.block, width, column, delta);
        } else {
            self.add_to_run(at, width, column, delta);
        }
        true
    }

    /// Adds `delta` at element `column` of the block at word `b` (a row of `width`
    /// elements): into its delta (zero at the start of the clock) and, for integers, into
    /// a filled view ([`add_to_block_in`]).
    #[inline(always)]
    fn add_to_block<T: Element>(&mut self, b: usize, width: usize, column: usize, delta: &[T]) {
        let block = block_words::<T>(&mut self.words, self.views, b, width);
        let bits = (&mut self.touched[..], &mut self.dirty[..], self.holds);
        add_to_block_in(block, bits, self.views, width, column, delta);
    }

    /// [`add_to_block`](Self::add_to_block) of a run's row at `at` (one word), touched by
    /// its bit.
    #[inline(always)]
    fn add_to_run<T: Element>(&mut self, at: RowAt, width: usize, column: usize, delta: &[T]) {
        let cols = column..column + delta.len();
        if self.folds::<T>(at) {
            let view = std::slice::from_mut(&mut self.words[at.view]);
            T::add_slice(
                &mut bytemuck::cast_slice_mut::<u64, T>(view)[cols.clone()],
                delta,
            );
        }
        if self.start_run_row(at) && delta.len() == width {
            // The row's first update in the clock, whole: it is the delta.
            let row = std::slice::from_mut(&mut self.words[at.delta]);
            bytemuck::cast_slice_mut::<u64, T>(row)[..width].copy_from_slice(delta);
            return;
        }
        let row = std::slice::from_mut(&mut self.words[at.delta]);
        T::add_slice(&mut bytemuck::cast_slice_mut::<u64, T>(row)[cols], delta);
    }

    /// [`add_cols_to_block_in`] of a run's row at `at` (one word).
    #[inline(always)]
    fn add_cols_to_run<T: Element>(&mut self, at: RowAt, cols: &[(usize, T)]) {
        if self.folds::<T>(at) {
            let view = std::slice::from_mut(&mut self.words[at.view]);
            let view = bytemuck::cast_slice_mut::<u64, T>(view);
            for &(column, delta) in cols {
                view[column] = view[column].add(delta);
            }
        }
        self.start_run_row(at);
        let row =
            bytemuck::cast_slice_mut::<u64, T>(std::slice::from_mut(&mut self.words[at.delta]));
        for &(column, delta) in cols {
            row[column] = row[column].add(delta);
        }
    }

    /// Whether an update of the run's row at `at` goes into its view too: a filled view of
    /// integers, or of a held row ([`fold_update`]). Call before the update marks it.
    #[inline(always)]
    fn folds<T: Element>(&mut self, at: RowAt) -> bool {
        let fold = fold_update::<T>((&self.touched, &mut self.dirty, self.holds), at.index);
        fold && self.views && self.words[at.block + 2] != Clock::MAX
    }

    /// Marks a run's row at `at` touched; on its first update in the clock (returns
    /// `true`) also its run, and its delta starts at zero.
    #[inline(always)]
    fn start_run_row(&mut self, at: RowAt) -> bool {
        if bit(&self.touched, at.index) {
            return false;
        }
        self.touched[at.index / 64] |= 1 << (at.index % 64);
        self.words[at.delta] = 0;
        true
    }

    /// Readies state kept from an earlier run for a new one: the run starts at the top of
    /// the access sequence, and sent updates of earlier runs are no longer tracked for
    /// read-my-writes (as for a freshly built state). The views stay: a run requires data
    /// of every clock before it ([`Staleness::required_in_run`]), so a view older than that
    /// is refilled on its first read, and one that is not already holds every update of
    /// this worker it must show.
    ///
    /// [`Staleness::required_in_run`]: crate::Staleness::required_in_run
    pub(crate) fn start_run(&mut self) {
        self.move_cursor(0);
        self.recent.clear();
        self.phase = 0;
    }

    /// Whether updates of the current clock are waiting to be sent.
    pub(crate) fn has_updates(&self) -> bool {
        self.touched.iter().any(|&bits| bits != 0)
    }

    /// Takes this clock's delta slabs, one per shard, and starts a new clock. A slab is
    /// every row the worker updates on that shard in arena order (zeros where untouched),
    /// or, when that is smaller, only the touched rows with their positions.
    pub(crate) fn take_slabs(&mut self, clock: Clock, keep_recent: bool) -> Vec<Slab> {
        if keep_recent {
            // The touched bits go with the blocks: they say which rows were updated.
            let mut sent = Vec::with_capacity(self.words.len() + self.touched.len());
            sent.extend_from_slice(&self.words);
            sent.extend_from_slice(&self.touched);
            self.recent.push(clock, sent);
        }
        // Per shard, only the touched rows are visited (their bits), unless the slab is
        // sent whole: then every row of the shard takes its place in it. Timed, for the
        // choice of stores (`slab_writes.rs`).
        let streaming = self.writes.streaming();
        let timer = self.writes.timer();
        let mut slabs = Vec::with_capacity(self.shard_blocks.len());
        for shard in 0..self.shard_blocks.len() {
            let bytes = self.shard_bytes[shard];
            // Sparse when the touched rows with their positions are smaller than the
            // whole slab: certain from the widest row, impossible from the narrowest,
            // and otherwise (rows of several widths) their bytes are counted.
            let count = count_bits(&self.touched, self.shard_blocks[shard].clone());
            let (min, max) = (self.shard_min_row[shard], self.shard_max_row[shard]);
            let sparse = if count * (4 + max) < bytes {
                Some(count * max)
            } else if count * (4 + min) >= bytes {
                None
            } else {
                Some(self.touched_bytes(shard)).filter(|&t| t + 4 * count < bytes)
            };
            let slab = sparse.map(|size| self.sparse_slab(shard, count, size, streaming));
            if bytes > 0 {
                if slab.is_some() {
                    self.counters.partial_slabs += 1;
                } else {
                    self.counters.whole_slabs += 1;
                }
                self.counters.streamed_slabs += u64::from(streaming);
            }
            slabs.push(slab.unwrap_or_else(|| self.whole_slab(shard, streaming)));
        }
        self.release_held(keep_recent);
        self.touched.fill(0);
        if streaming {
            stream::fence(); // the slabs' streaming stores, before they are sent
        }
        if let Some(started) = timer {
            let written = slabs.iter().map(|s| s.bytes.len()).sum();
            self.writes.record(streaming, written, started.elapsed());
        }
        slabs
    }

    /// Bytes of `shard`'s touched rows, as a sparse slab holds them (padded).
    fn touched_bytes(&self, shard: usize) -> usize {
        set_bits(&self.touched, self.shard_blocks[shard].clone())
            .map(|r| match self.blocks[r] {
                e if e & RUN_ROW != 0 => 8, // a run's row: one word
                b => padded(block_shape(&self.words, b as usize).0),
            })
            .sum()
    }

    /// The slab of `shard`'s `count` touched rows with their positions, built in capacity
    /// for `size` bytes of rows (at least theirs, so it never grows).
    fn sparse_slab(&mut self, shard: usize, count: usize, size: usize, streaming: bool) -> Slab {
        let range = self.shard_blocks[shard].clone();
        let mut rows = Vec::with_capacity(count);
        let mut out = Vec::with_capacity(size / 8);
        if let (Some(n), false) = (self.shard_row_words[shard], streaming) {
            // Every block of the shard is one row of `n` words: its delta is at the same
            // offset in each, and is taken without decoding the block's header.
            let at = HEADER_WORDS + if self.views { n } else { 0 };
            let (blocks, words) = (&self.blocks, &mut self.words);
            for r in set_bits(&self.touched, range.clone()) {
                let delta = blocks[r] as usize + at;
                stream::take(&mut words[delta..delta + n], &mut out);
                rows.push((r - range.start) as u32);
            }
            return Slab {
                bytes: AlignedBuf::from_word_vec(out),
                rows: Some(rows),
            };
        }
        let mut runs = RunCursor::new(self, range.start);
        for r in set_bits(&self.touched, range.clone()) {
            let delta = match self.blocks[r] {
                e if e & RUN_ROW != 0 => {
                    let (_, first, deltas) = runs.run_of(self, r);
                    deltas + r - first..deltas + r - first + 1
                }
                b => block_parts(&self.words, self.views, b as usize).1,
            };
            take_delta(&mut self.words[delta], &mut out, streaming);
            rows.push((r - range.start) as u32);
        }
        Slab {
            bytes: AlignedBuf::from_word_vec(out),
            rows: Some(rows),
        }
    }

    /// `shard`'s whole slab: every row's delta in order, zeros where untouched.
    fn whole_slab(&mut self, shard: usize, streaming: bool) -> Slab {
        let (range, bytes) = (self.shard_blocks[shard].clone(), self.shard_bytes[shard]);
        let mut runs = RunCursor::new(self, range.start);
        let mut out = Vec::with_capacity(bytes / 8);
        let mut r = range.start;
        while r < range.end {
            let touched = |r: usize| bit(&self.touched, r);
            let entry = self.blocks[r];
            if entry & RUN_ROW == 0 {
                let b = entry as usize;
                let delta = block_parts(&self.words, self.views, b).1;
                if touched(r) {
                    take_delta(&mut self.words[delta], &mut out, streaming);
                } else {
                    out.resize(out.len() + delta.len(), 0);
                }
                r += 1;
                continue;
            }
            // The rest of the run holding `r`, a word a row.
            let (b, first, deltas) = runs.run_of(self, r);
            let end = (first + block_shape(&self.words, b).1).min(range.end);
            let run_deltas = &self.words[deltas + r - first..deltas + end - first];
            out.extend(
                (r..end)
                    .zip(run_deltas)
                    .map(|(i, &delta)| if touched(i) { delta } else { 0 }),
            );
            r = end;
        }
        Slab {
            bytes: AlignedBuf::from_word_vec(out),
            rows: None,
        }
    }

    /// Forgets sent updates every readable snapshot already includes.
    pub(crate) fn prune(&mut self, floor: Clock) {
        self.recent.prune(floor);
    }
}

/// Finds the runs of rows in ascending arena order (a CLOCK's walk over a shard's rows),
/// moving over the runs as the rows do.
struct RunCursor {
    /// The run the last row asked for was in (or the first that may hold the next).
    run: usize,
}

impl RunCursor {
    /// A cursor for rows from index `start` on.
    fn new(sp: &Special, start: usize) -> Self {
        let end = |&b: &u32| {
            let b = b as usize;
            (sp.words[b + 1] >> INDEX_SHIFT) as usize + block_shape(&sp.words, b).1
        };
        RunCursor {
            run: sp.runs.partition_point(|b| end(b) <= start),
        }
    }

    /// The run holding row `r` (a run's row at or after the last asked for): its block,
    /// its first row's index and the word of its first delta.
    #[inline(always)]
    fn run_of(&mut self, sp: &Special, r: usize) -> (usize, usize, usize) {
        loop {
            let b = sp.runs[self.run] as usize;
            let first = (sp.words[b + 1] >> INDEX_SHIFT) as usize;
            let count = block_shape(&sp.words, b).1;
            if r < first + count {
                return (b, first, rows_at(b, count, sp.views).1);
            }
            self.run += 1;
        }
    }
}

/// A run step's run and the row's offset in it.
#[inline(always)]
fn run_step(step: u32) -> (usize, usize) {
    let step = step & !RUN_STEP;
    (
        (step >> RUN_SHIFT) as usize,
        (step as usize) & (MAX_RUN - 1),
    )
}

/// One shard's part of a CLOCK in specialized mode.
#[derive(Debug, Default)]
pub(crate) struct Slab {
    /// The deltas, each padded to 8 bytes.
    pub(crate) bytes: AlignedBuf,
    /// `None`: every row of the worker's layout for the shard; else the positions in that
    /// layout of the rows `bytes` holds.
    pub(crate) rows: Option<Vec<u32>>,
}

/// Where the block at word `b` of a worker's words lies: a row of `width` `T`s, its
/// header, its view if `views`, its delta.
#[inline(always)]
fn block_span<T: Element>(b: usize, width: usize, views: bool) -> Range<usize> {
    let row_words = padded_words(width * size_of::<T>());
    let view_words = if views { row_words } else { 0 };
    b..b + HEADER_WORDS + view_words + row_words
}

/// The words of the block at word `b` of `words` ([`block_span`]).
#[inline(always)]
fn block_words<T: Element>(words: &mut [u64], views: bool, b: usize, width: usize) -> &mut [u64] {
    &mut words[block_span::<T>(b, width, views)]
}

/// A block's words ([`block_words`]) as its header, its view (empty without views) and
/// its delta row of `width` `T`s.
#[inline(always)]
fn split_block<T: Element>(
    block: &mut [u64],
    views: bool,
    width: usize,
) -> (&mut [u64], &mut [u64], &mut [T]) {
    let row_words = padded_words(width * size_of::<T>());
    let view_words = if views { row_words } else { 0 };
    let (header, rows) = block.split_at_mut(HEADER_WORDS);
    let (view, row) = rows.split_at_mut(view_words);
    (
        header,
        view,
        &mut bytemuck::cast_slice_mut::<u64, T>(row)[..width],
    )
}

/// Adds `delta` at element `column` of the row of `width` `T`s whose block is `block`
/// ([`block_words`]): into its delta, which is zero at the start of every clock (a CLOCK
/// zeroes what it takes), and, for integers or a held row, into a filled view; marks the
/// block touched (its bit in the first of `(touched, dirty, holds)`, see
/// [`fold_update`]). No branch on whether this is the clock's first update of the row:
/// one was mispredicted often enough to cost MF 4 % an iteration.
#[inline(always)]
fn add_to_block_in<T: Element>(
    block: &mut [u64],
    (touched, dirty, holds): (&mut [u64], &mut [u64], bool),
    views: bool,
    width: usize,
    column: usize,
    delta: &[T],
) {
    let cols = column..column + delta.len();
    let (header, view, row) = split_block::<T>(block, views, width);
    let r = (header[1] >> INDEX_SHIFT) as usize;
    if fold_update::<T>((touched, dirty, holds), r) && views && header[2] != Clock::MAX {
        let view = bytemuck::cast_slice_mut::<u64, T>(view);
        T::add_slice(&mut view[cols.clone()], delta);
    }
    mark_touched(header, touched);
    T::add_slice(&mut row[cols], delta);
}

/// Whether an update of row `r` (by index) goes into its view: always for integers (a
/// filled view holds the worker's updates), for floats if the row is held ([`held_in`]);
/// an update of a float row not held marks it dirty. `holds`: whether the worker holds
/// rows at all (else `dirty` is not kept and nothing is held).
#[inline(always)]
fn fold_update<T: Element>((touched, dirty, holds): (&[u64], &mut [u64], bool), r: usize) -> bool {
    if T::TYPE.exact() {
        return true;
    }
    if !holds {
        return false;
    }
    let held = held_in(touched, dirty, r);
    if !held {
        dirty[r / 64] |= 1 << (r % 64);
    }
    held
}

/// Whether row `r` is held, for a worker that holds rows: updated in this clock, and
/// never while not held (see [`Special::dirty`]).
#[inline(always)]
fn held_in(touched: &[u64], dirty: &[u64], r: usize) -> bool {
    bit(touched, r) && !bit(dirty, r)
}

/// [`add_to_block_in`] of each `(column, delta)` of `cols` (columns below `width`).
#[inline(always)]
fn add_cols_to_block_in<T: Element>(
    block: &mut [u64],
    (touched, dirty, holds): (&mut [u64], &mut [u64], bool),
    views: bool,
    width: usize,
    cols: &[(usize, T)],
) {
    let (header, view, row) = split_block::<T>(block, views, width);
    let r = (header[1] >> INDEX_SHIFT) as usize;
    if fold_update::<T>((touched, dirty, holds), r) && views && header[2] != Clock::MAX {
        let view = bytemuck::cast_slice_mut::<u64, T>(view);
        for &(column, delta) in cols {
            view[column] = view[column].add(delta);
        }
    }
    mark_touched(header, touched);
    for &(column, delta) in cols {
        row[column] = row[column].add(delta);
    }
}

/// Marks the block with `header` touched in this clock: its bit in `touched` (the index
/// its header holds).
#[inline(always)]
fn mark_touched(header: &[u64], touched: &mut [u64]) {
    let r = (header[1] >> INDEX_SHIFT) as usize;
    touched[r / 64] |= 1 << (r % 64);
}

/// Appends the delta words `delta` to a slab's `out` (with streaming stores if
/// `streaming`: [`Special::take_slabs`] fences them) and zeroes them: the next clock's
/// delta starts at zero (see [`add_to_block_in`]).
#[inline(always)]
fn take_delta(delta: &mut [u64], out: &mut Vec<u64>, streaming: bool) {
    stream::extend(out, delta, streaming);
    delta.fill(0);
}

/// The words of a shard's rows if its `blocks` (entries of [`Special::blocks`]) are each
/// one row (no runs) and its rows' padded bytes `(narrowest, widest)` are one width.
fn plain_row_words(blocks: &[u32], (narrowest, widest): (usize, usize)) -> Option<usize> {
    let plain =
        !blocks.is_empty() && narrowest == widest && blocks.iter().all(|&e| e & RUN_ROW == 0);
    plain.then_some(widest / 8)
}

/// How many bits of `bits` are set in `range`.
fn count_bits(bits: &[u64], range: Range<usize>) -> usize {
    if range.is_empty() {
        return 0;
    }
    (range.start / 64..=(range.end - 1) / 64)
        .map(|w| (bits[w] & range_mask(&range, w)).count_ones() as usize)
        .sum()
}

/// The positions in `range` of the bits set in `bits`, in order.
fn set_bits(bits: &[u64], range: Range<usize>) -> impl Iterator<Item = usize> + '_ {
    (range.start / 64..range.end.div_ceil(64)).flat_map(move |w| {
        // The range's ends masked off the word, then each set bit in turn.
        let mut word = bits[w] & range_mask(&range, w);
        std::iter::from_fn(move || {
            (word != 0).then(|| {
                let bit = word.trailing_zeros() as usize;
                word &= word - 1;
                w * 64 + bit
            })
        })
    })
}

/// The bits of word `w` of a bit set that fall in `range` (`w` overlapping it).
#[inline(always)]
fn range_mask(range: &Range<usize>, w: usize) -> u64 {
    let lo = if w == range.start / 64 {
        !0u64 << (range.start % 64)
    } else {
        !0
    };
    let hi = if w == (range.end - 1) / 64 {
        !0u64 >> (63 - (range.end - 1) % 64)
    } else {
        !0
    };
    lo & hi
}

/// Checks the invariant of [`Special::steps`]: every block step of `steps` is the first
/// word of a one-row block of `words` whose header, and rows (`rows_per`: the delta,
/// and the view with views on) of its table's row size, lie inside `words`. The blocks
/// are laid out so; this makes sure of it once, since `read_update_fast` reads them
/// unchecked (a failure is a bug in the layout, not in anything a user gave).
fn check_steps(steps: &[u32], words: &[u64], rows_per: usize, tables: &[TableMeta]) {
    for &step in steps.iter().filter(|&&s| s < RUN_STEP) {
        let b = step as usize;
        let whole = words.get(b..b + HEADER_WORDS).is_some_and(|header| {
            let (len, rows) = block_shape(words, b);
            let table = tables.get(header[1] as u32 as usize);
            header[1] & RUN == 0
                && rows == 1
                && table.is_some_and(|t| t.row_bytes() == len)
                && b + HEADER_WORDS + padded_words(len) * rows_per <= words.len()
        });
        assert!(
            whole,
            "op tape step {b} is not a whole block of the worker's buffer"
        );
    }
}

/// The size in bytes of a row of the block at word `b` of `words`, and its rows (more
/// than one in a run).
#[inline(always)]
fn block_shape(words: &[u64], b: usize) -> (usize, usize) {
    let last = words[b + 3];
    if words[b + 1] & RUN == 0 {
        ((last >> LEN_SHIFT) as usize, 1)
    } else {
        (
            ((last >> LEN_SHIFT) & 0xffff) as usize,
            (last >> COUNT_SHIFT) as usize,
        )
    }
}

/// The words of the views and of the deltas of the block at word `b` of `words` (all its
/// rows'), whose blocks hold views if `views`.
#[inline(always)]
fn block_parts(words: &[u64], views: bool, b: usize) -> (Range<usize>, Range<usize>) {
    let (len, count) = block_shape(words, b);
    let n = padded_words(len) * count;
    let (view, delta) = rows_at(b, n, views);
    (view..view + n, delta..delta + n)
}

/// Row `offset` of the block at word `b` of `words` (0 but in a run).
#[inline(always)]
fn row_at(words: &[u64], views: bool, b: usize, offset: usize) -> RowAt {
    let (len, count) = block_shape(words, b);
    let row_words = padded_words(len);
    let (views_at, deltas_at) = rows_at(b, count * row_words, views);
    RowAt {
        block: b,
        index: (words[b + 1] >> INDEX_SHIFT) as usize + offset,
        offset,
        view: views_at + offset * row_words,
        delta: deltas_at + offset * row_words,
    }
}

/// The first words of the views and of the deltas of the block at word `b` whose rows
/// take `words` words (a run's rows one after the other, then their deltas).
#[inline(always)]
fn rows_at(b: usize, words: usize, views: bool) -> (usize, usize) {
    let view = b + HEADER_WORDS;
    (view, view + if views { words } else { 0 })
}

/// The step naming row `index` (in arena order) of the run at word `b` of `words`: its
/// run's number and its offset.
fn run_step_of(words: &[u64], b: usize, index: usize) -> u32 {
    let (run, first) = (words[b + 3] as u32, (words[b + 1] >> INDEX_SHIFT) as u32);
    RUN_STEP | run << RUN_SHIFT | (index as u32 - first)
}

/// Bit `r` of `bits`.
#[inline(always)]
fn bit(bits: &[u64], r: usize) -> bool {
    bits[r / 64] & (1 << (r % 64)) != 0
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

/// Runs `copy` on a snapshot `>= required` of arena chunk `chunk` (see
/// [`ProcessArena::read_chunk_in`]), asking for a refresh (of the chunks read in clock
/// `phase`, or the chunk holding `slot`: [`ProcessArena::request`]) and waiting while it
/// is too stale; returns the snapshot's data clock.
fn wait_chunk(
    shared: &ClientShared,
    (arena, zone): (&ProcessArena, u8),
    slot: (u32, u32),
    chunk: u32,
    required: Clock,
    mut copy: impl FnMut(&crate::client::ArenaWords<'_>),
) -> Result<Clock> {
    wait_fresh(shared, arena, slot, required, || {
        arena.read_chunk_in(zone, chunk, required, &mut copy)
    })
}

/// Reads the row of `slot` (described by `info`) from the arena, asking for a refresh (see
/// [`wait_chunk`]) and waiting while it is too stale.
fn wait_read(
    shared: &ClientShared,
    (arena, zone): (&ProcessArena, u8),
    slot: (u32, u32),
    info: &SlotInfo,
    required: Clock,
    dst: &mut [u8],
) -> Result<Clock> {
    wait_fresh(shared, arena, slot, required, || {
        arena.read_at_in(zone, info.chunk, info.word, required, dst)
    })
}

/// Calls `attempt` (a read of the arena that needs data clock `>= required`) until it
/// succeeds, asking for a refresh for the read of `slot` in the iteration's clock `phase`
/// and waiting for replies in between; returns the data clock it read.
fn wait_fresh(
    shared: &ClientShared,
    arena: &ProcessArena,
    (slot, phase): (u32, u32),
    required: Clock,
    mut attempt: impl FnMut() -> Option<Clock>,
) -> Result<Clock> {
    loop {
        if let Some(clock) = attempt() {
            return Ok(clock);
        }
        let generation = shared.signal.generation();
        if let Some(clock) = attempt() {
            return Ok(clock);
        }
        shared.check()?;
        arena.request(shared, required, phase, Some(slot))?;
        if shared.help() {
            continue; // a shard's queued work done here: look again before sleeping
        }
        shared.signal.wait(generation, WAIT_SLICE);
    }
}

#[cfg(test)]
mod tests {
    use super::{
        check_steps, count_bits, plain_row_words, set_bits, HEADER_WORDS, LEN_SHIFT, RUN, RUN_ROW,
        RUN_STEP, SLOT_STEP,
    };
    use crate::element::ElemType;
    use crate::table::TableMeta;

    #[test]
    fn op_tape_steps_must_name_whole_blocks_of_their_tables_row_size() {
        // Table 0: three f32s a row (12 bytes, two words padded).
        let tables = [TableMeta {
            id: 0,
            name: "t".into(),
            width: 3,
            elem: ElemType::F32,
        }];
        let header = |table: u64, len: u64| [7, table, 0, len << LEN_SHIFT];
        // A block at word 0: header, view and delta of two words each.
        let mut words = header(0, 12).to_vec();
        words.resize(HEADER_WORDS + 4, 0);
        // Slot steps and run steps are not blocks and are not looked at.
        check_steps(&[0, 0, RUN_STEP + 5, SLOT_STEP | 3], &words, 2, &tables);
        let refused = |steps: &[u32], words: &[u64], rows_per: usize| {
            let check = || check_steps(steps, words, rows_per, &tables);
            std::panic::catch_unwind(check).is_err()
        };
        assert!(!refused(&[0], &words, 2));
        assert!(refused(&[1], &words, 2), "a step inside a block");
        assert!(
            refused(&[0], &words[..HEADER_WORDS + 3], 2),
            "a block cut short"
        );
        assert!(refused(&[0], &words, 3), "rows beyond the buffer");
        let mut wrong_size = words.clone();
        wrong_size[..HEADER_WORDS].copy_from_slice(&header(0, 8));
        assert!(refused(&[0], &wrong_size, 2), "a row size not its table's");
        let mut unknown = words.clone();
        unknown[..HEADER_WORDS].copy_from_slice(&header(1, 12));
        assert!(refused(&[0], &unknown, 2), "a table that does not exist");
        let mut run = words.clone();
        run[..HEADER_WORDS].copy_from_slice(&header(RUN, 12));
        assert!(refused(&[0], &run, 2), "a run's block");
    }

    #[test]
    fn a_shard_is_plain_when_its_blocks_are_single_rows_of_one_width() {
        assert_eq!(plain_row_words(&[0, 40, 80], (72, 72)), Some(9));
        assert_eq!(plain_row_words(&[0, 40, 80], (64, 72)), None);
        assert_eq!(plain_row_words(&[0, RUN_ROW | 1, 80], (8, 8)), None);
        assert_eq!(plain_row_words(&[], (0, 0)), None);
    }

    #[test]
    fn count_bits_counts_the_range_s_bits_only() {
        let bits = [u64::MAX, 0b1011, 1 << 63];
        for start in 0..192 {
            for end in start..=192 {
                let want = set_bits(&bits, start..end).count();
                assert_eq!(count_bits(&bits, start..end), want, "{start}..{end}");
            }
        }
    }

    #[test]
    fn set_bits_are_the_range_s_in_order() {
        let mut bits = vec![0u64; 3];
        for r in [0, 5, 63, 64, 70, 128, 191] {
            bits[r / 64] |= 1 << (r % 64);
        }
        let got = |range: std::ops::Range<usize>| set_bits(&bits, range).collect::<Vec<_>>();
        assert_eq!(got(0..192), [0, 5, 63, 64, 70, 128, 191]);
        assert_eq!(got(5..65), [5, 63, 64]);
        assert_eq!(got(64..64), Vec::<usize>::new());
        assert_eq!(got(71..128), Vec::<usize>::new());
        assert_eq!(got(128..192), [128, 191]);
    }
}
