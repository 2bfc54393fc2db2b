//! Observability of a worker's specialized state: how its accesses found their rows
//! ([`AccessCounters`]) and the bytes it takes ([`WorkerMemory`]).
//!
//! This file reads the state's sizes and counts; it decides nothing.

use super::views::ViewRow;
use super::{SpecialWorker, WorkerSlot};

impl SpecialWorker {
    /// Counts a `read_update` that took the general path.
    pub(crate) fn count_copied_read_update(&mut self) {
        self.counters.copied_read_updates += 1;
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
                + self.slab_tables.memory()
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
