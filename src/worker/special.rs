//! A worker's specialized state: its arena-shaped delta buffer (every row it updates, in
//! arena order, resolved to offsets once), per-thread copies of contended rows, and the
//! read path through the [`ProcessArena`]. No hashing beyond the plan's index, no locks.

use crate::client::{ClientShared, ProcessArena, WAIT_SLICE};
use crate::consistency::Clock;
use crate::server::padded;
use crate::{AlignedBuf, ElemType, Result, RowKey};
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

const NONE: u32 = u32::MAX;

/// A worker's rows as a contiguous buffer: per slot, where the row sits (if it does).
struct RowBuffer {
    pos: Vec<u32>,
    offsets: Vec<usize>,
    data: AlignedBuf,
}

impl RowBuffer {
    fn new(arena: &ProcessArena, slots: &[u32]) -> Self {
        let mut pos = vec![NONE; arena.plan.slots.len()];
        let mut offsets = Vec::with_capacity(slots.len());
        let mut at = 0;
        for (i, &s) in slots.iter().enumerate() {
            pos[s as usize] = i as u32;
            offsets.push(at);
            at += padded(arena.plan.slots[s as usize].len);
        }
        RowBuffer {
            pos,
            offsets,
            data: AlignedBuf::zeroed(at),
        }
    }

    #[inline]
    fn row(&self, slot: u32) -> Option<u32> {
        match self.pos[slot as usize] {
            NONE => None,
            r => Some(r),
        }
    }
}

/// Per-worker specialized state (see module docs).
pub(crate) struct Special {
    pub(crate) arena: Arc<ProcessArena>,
    deltas: Option<RowBuffer>,
    touched: Vec<bool>,
    /// Per shard: its part of `deltas`.
    shard_bytes: Vec<Range<usize>>,
    recent: VecDeque<(Clock, AlignedBuf, Vec<bool>)>,
    copies: RowBuffer,
    copy_clocks: Vec<Clock>,
    /// Position in this worker's pre-resolved access sequence.
    cursor: usize,
    worker: usize,
}

impl Special {
    /// State for worker `worker`; `deltas`: keep an arena-shaped delta buffer.
    pub(crate) fn new(arena: Arc<ProcessArena>, worker: usize, deltas: bool) -> Self {
        let plan = &arena.plan;
        let updates = plan.updates.get(worker).map(Vec::as_slice).unwrap_or(&[]);
        let copies = plan
            .thread_cached
            .get(worker)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let (deltas, shard_bytes) = if deltas {
            let buf = RowBuffer::new(&arena, updates);
            let mut ranges = vec![0..0; plan.shards.len()];
            for (i, &s) in updates.iter().enumerate() {
                let shard = plan.slots[s as usize].shard as usize;
                let start = buf.offsets[i];
                let end = start + padded(plan.slots[s as usize].len);
                let r: &mut Range<usize> = &mut ranges[shard];
                *r = if r.start == r.end {
                    start..end
                } else {
                    r.start..end
                };
            }
            (Some(buf), ranges)
        } else {
            (None, vec![0..0; plan.shards.len()])
        };
        let touched = vec![false; updates.len()];
        let copy_clocks = vec![Clock::MAX; copies.len()];
        let copies = RowBuffer::new(&arena, copies);
        Special {
            arena,
            deltas,
            touched,
            shard_bytes,
            recent: VecDeque::new(),
            copies,
            copy_clocks,
            cursor: 0,
            worker,
        }
    }

    /// The arena slot of `key`: the next entry of the pre-resolved access sequence when
    /// the worker is following its pattern (no hashing), else the plan's index.
    #[inline]
    pub(crate) fn slot(&mut self, key: RowKey) -> Option<u32> {
        let seq = &self.arena.plan.sequences[self.worker];
        if let Some(&(expected, slot)) = seq.get(self.cursor) {
            if expected == key {
                self.cursor += 1;
                if self.cursor == seq.len() {
                    self.cursor = 0; // the next iteration starts over
                }
                return Some(slot);
            }
        }
        let slot = self.arena.slot(key)?;
        // A deviation; resynchronise if this is where an iteration starts.
        if seq.first().is_some_and(|(k, _)| *k == key) {
            self.cursor = 1 % seq.len();
        }
        Some(slot)
    }

    /// Copies slot `slot` (a snapshot with data clock `>= required`) into `dst`, waiting
    /// for a refresh if needed; returns the snapshot's data clock.
    pub(crate) fn read(
        &mut self,
        shared: &ClientShared,
        slot: u32,
        required: Clock,
        dst: &mut [u8],
    ) -> Result<Clock> {
        if let Some(r) = self.copies.row(slot) {
            let r = r as usize;
            let at = self.copies.offsets[r];
            let len = dst.len();
            if self.copy_clocks[r] == Clock::MAX || self.copy_clocks[r] < required {
                let row = &mut self.copies.data.as_bytes_mut()[at..at + len];
                self.copy_clocks[r] = wait_read(shared, &self.arena, slot, required, row)?;
            }
            dst.copy_from_slice(&self.copies.data.as_bytes()[at..at + len]);
            return Ok(self.copy_clocks[r]);
        }
        wait_read(shared, &self.arena, slot, required, dst)
    }

    /// Adds this worker's updates to `slot` that a snapshot at `data_clock` lacks.
    #[inline]
    pub(crate) fn add_own(&self, slot: u32, data_clock: Clock, elem: ElemType, dst: &mut [u8]) {
        let Some(deltas) = &self.deltas else { return };
        let Some(r) = deltas.row(slot) else { return };
        let r = r as usize;
        let at = deltas.offsets[r];
        let len = dst.len();
        for (clock, buf, touched) in &self.recent {
            if *clock >= data_clock && touched[r] {
                elem.add(dst, &buf.as_bytes()[at..at + len]);
            }
        }
        if self.touched[r] {
            elem.add(dst, &deltas.data.as_bytes()[at..at + len]);
        }
    }

    /// Adds `delta` to `slot`'s row at byte `at` (a whole row: `at == 0`). Returns `false`
    /// when the row is not in this worker's delta buffer (the caller logs it generically).
    #[inline]
    pub(crate) fn update(&mut self, slot: u32, elem: ElemType, at: usize, delta: &[u8]) -> bool {
        let Some(deltas) = &mut self.deltas else {
            return false;
        };
        let Some(r) = deltas.row(slot) else {
            return false;
        };
        let r = r as usize;
        let start = deltas.offsets[r];
        let len = self.arena.plan.slots[slot as usize].len;
        let row = &mut deltas.data.as_bytes_mut()[start..start + len];
        if !self.touched[r] {
            // First update of the clock: the delta is the value (as the generic log does).
            row.fill(0);
            self.touched[r] = true;
            if delta.len() == len {
                row.copy_from_slice(delta);
                return true;
            }
        }
        elem.add(&mut row[at..at + delta.len()], delta);
        true
    }

    /// Takes this clock's delta slabs, one per shard, and starts a new clock.
    pub(crate) fn take_slabs(&mut self, clock: Clock, keep_recent: bool) -> Vec<AlignedBuf> {
        let Some(deltas) = &mut self.deltas else {
            return vec![AlignedBuf::default(); self.shard_bytes.len()];
        };
        let slabs = self
            .shard_bytes
            .iter()
            .map(|r| AlignedBuf::from_bytes(&deltas.data.as_bytes()[r.clone()]))
            .collect();
        if keep_recent {
            self.recent
                .push_back((clock, deltas.data.clone(), self.touched.clone()));
        }
        deltas.data.clear();
        self.touched.fill(false);
        slabs
    }

    /// Forgets sent updates every readable snapshot already includes.
    pub(crate) fn prune(&mut self, floor: Clock) {
        while self.recent.front().is_some_and(|(c, _, _)| *c < floor) {
            self.recent.pop_front();
        }
    }
}

/// Reads `slot` from the arena, asking for a refresh and waiting while it is too stale.
fn wait_read(
    shared: &ClientShared,
    arena: &ProcessArena,
    slot: u32,
    required: Clock,
    dst: &mut [u8],
) -> Result<Clock> {
    loop {
        if let Some(clock) = arena.read_fresh(slot, required, dst) {
            return Ok(clock);
        }
        let generation = shared.fetcher.generation();
        if let Some(clock) = arena.read_fresh(slot, required, dst) {
            return Ok(clock);
        }
        shared.check()?;
        arena.request(
            shared.process,
            shared.transport.as_ref(),
            required,
            Some(slot),
        )?;
        shared.fetcher.wait(generation, WAIT_SLICE);
    }
}
