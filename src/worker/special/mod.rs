//! A worker's specialized state: one contiguous buffer of **blocks**, one per row the
//! worker updates (in arena order), each a small header (the row's key, its view's data
//! clock, its index, whose bit in [`SpecialWorker::touched`] says whether it was updated in this
//! clock) followed by the row's view and this clock's delta; per-thread
//! copies of contended rows; and the read path through the [`ProcessArena`].
//!
//! Rows of 8 bytes or less (PageRank's ranks one vertex a row) share a block: a **run**
//! of up to [`MAX_RUN`](tape::MAX_RUN) such rows of one table that follow each other in
//! the worker's arena order within one refresh chunk and shard, under one header (naming
//! the run's first row), their views then their deltas. A step names a run's row by the run's
//! number ([`SpecialWorker::runs`]) and the row's offset in it; the row's key is checked as the
//! header's row plus the row's 4-byte id offset, its entry in [`SpecialWorker::blocks`]; like
//! every row's, its touched bit is in [`SpecialWorker::touched`], and its arena word for a refresh is
//! the plan's. So the per-row bookkeeping of such rows (those 4 bytes, and a 32-byte
//! header over up to 64 rows) is no larger than the row.
//!
//! A worker following its pattern finds each access's block straight from its pre-resolved
//! access sequence, so a READ or UPDATE of a row it updates touches one block (two or
//! three adjacent cache lines) and nothing else, and the blocks a few steps ahead are
//! prefetched. No hashing beyond the plan's index (only for deviating accesses), no locks.
//!
//! One concept a file; this one holds the state ([`SpecialWorker`]) and the small helpers every
//! part uses:
//!
//! - `block.rs`: the block format (a typed [`block::Header`], where views and deltas lie);
//! - `build.rs`: the state built from the plan, blocks and runs laid out;
//! - `tape.rs`: the op tape's steps, and resolving a key to its [`Place`];
//! - `fast.rs`: the fast paths of accesses that follow the pattern;
//! - `views.rs`: reads on the general path, views refreshed a chunk at a time, waits for
//!   the arena;
//! - `update.rs`: updates on the general path and the update kernels;
//! - `held.rs`: rows held through `read_update`;
//! - `slabs.rs` and `slab_writes.rs`: a CLOCK's slabs, and how they are written;
//! - `counters.rs`, `bits.rs`: observability; bit sets by row index.
//!
//! This file knows the state's fields and their invariants, and none of the parts'
//! algorithms; it reads blocks only through `block.rs`.

mod bits;
mod block;
mod build;
mod counters;
mod fast;
mod held;
mod slab_tables;
mod slab_writes;
mod slabs;
mod tape;
mod update;
mod views;

pub(crate) use counters::{AccessCounters, WorkerMemory};
pub(crate) use slabs::Slab;

use super::sent::SentUpdates;
use crate::buf::AlignedBuf;
use crate::client::ProcessArena;
use crate::element::Element;
use crate::ids::{Clock, RowKey};
use bits::bit;
use block::{row_at, Header, RowAt};
use slab_tables::SlabTables;
use slab_writes::SlabWrites;
use std::ops::Range;
use std::sync::Arc;
use views::ViewRow;

/// A slot's copy or block, or a [`Place`]'s block, that is not there.
const NONE: u32 = u32::MAX;

/// Marks an entry of [`SpecialWorker::blocks`] that is a run's row: its row id's offset from
/// the run's first row's, below `RUN_ROW`.
const RUN_ROW: u32 = 1 << 31;

/// Where a planned row lives, as the fast path finds it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place {
    slot: u32,
    /// First word of this worker's block of the row, or [`NONE`].
    block: u32,
    /// The row's position in its block: 0, or its offset in a run.
    offset: u32,
}

/// What a plan slot resolves to for this worker ([`SpecialWorker::info`]): the plan's row, chunk
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

/// A worker's private copies of contended rows, contiguous.
struct Copies {
    offsets: Vec<usize>,
    clocks: Vec<Clock>,
    data: AlignedBuf,
}

/// Per-worker specialized state (see module docs).
pub(crate) struct SpecialWorker {
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
    /// Which table each row with a block is of, for the bytes of slabs by table.
    slab_tables: SlabTables,
    /// Per refresh chunk of the arena: the rows in it this worker keeps a view of.
    chunk_views: Vec<Vec<ViewRow>>,
    /// Sent updates kept for read-my-writes under SSP: the blocks as they were sent.
    recent: SentUpdates<Vec<u64>>,
    copies: Copies,
    /// Per slot of the plan, this worker's copy and block.
    slots: Vec<WorkerSlot>,
    /// This worker's accesses of one iteration (`tape.rs`): a block's first word, a run's
    /// row with [`RUN_STEP`](tape::RUN_STEP) set, or a slot with
    /// [`SLOT_STEP`](tape::SLOT_STEP) set. 4 bytes per access, so walking the sequence
    /// costs little memory bandwidth.
    ///
    /// **Invariant** (checked where the steps are made, [`tape::check_steps`]): a step
    /// below [`RUN_STEP`](tape::RUN_STEP) is the first word of a block of one row lying
    /// wholly inside `words` (header, then a view, with views on, and a delta of the
    /// row's size) whose row size is its table's (width times element size); `words` and
    /// `steps` never change length afterwards. `read_update_fast` reads blocks without bounds checks on the
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
    /// The rows of tables with a server-side update rule, a bit per row as in `touched`
    /// (empty when there are none): their updates are gradients, which a READ does not
    /// add to the servers' value, and they are never held.
    gradient: Vec<u64>,
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

impl SpecialWorker {
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
        Header::at(&self.words, b).shape().0
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

    /// Whether the row at `at` was updated in this clock (its bit).
    #[inline(always)]
    fn row_touched(&self, at: RowAt) -> bool {
        bit(&self.touched, at.index)
    }

    /// Whether row `index` (as in `touched`) is of a table with an update rule: a READ
    /// returns its view alone, without this worker's own updates (gradients).
    #[inline(always)]
    fn is_gradient(&self, index: usize) -> bool {
        !self.gradient.is_empty() && bit(&self.gradient, index)
    }

    /// [`row_touched`](Self::row_touched) in `sent`, blocks as
    /// [`take_slabs`](Self::take_slabs) kept them (the touched bits after the words).
    fn sent_touched(&self, sent: &[u64], at: RowAt) -> bool {
        bit(&sent[self.words.len()..], at.index)
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

    /// Forgets sent updates every readable snapshot already includes.
    pub(crate) fn prune(&mut self, floor: Clock) {
        self.recent.prune(floor);
    }
}
