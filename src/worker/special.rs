//! A worker's specialized state: its arena-shaped delta buffer (every row it updates, in
//! arena order, resolved to offsets once), per-thread copies of contended rows, and the
//! read path through the [`ProcessArena`]. No hashing beyond the plan's index, no locks.

use crate::client::{ClientShared, ProcessArena, WAIT_SLICE};
use crate::consistency::Clock;
use crate::server::padded;
use crate::{AlignedBuf, Element, Result, RowKey};
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

/// Where a planned row lives, resolved once when the worker's state is built: the
/// arena position the read path copies from and this worker's delta and copy rows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place {
    slot: u32,
    chunk: u32,
    /// Arena word (8 bytes) where the row starts.
    word: u32,
    /// Row of this worker's delta buffer, or [`NONE`].
    delta: u32,
    /// Byte offset of that row in the delta buffer.
    delta_at: u32,
    /// Row of this worker's private copies, or [`NONE`].
    copy: u32,
    /// Row size in bytes.
    len: u32,
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
    /// Per row of `deltas` (same layout): the row as this worker sees it — a snapshot
    /// plus every update this worker made since — kept current by its updates, so a read
    /// is one copy (or none) with no lock and no merge. Used for integer tables only,
    /// whose addition is exact. `None` when thread caches are off.
    views: Option<AlignedBuf>,
    /// Per row of `views`: the snapshot's data clock, or `Clock::MAX` if not filled.
    view_clocks: Vec<Clock>,
    /// Per slot of the plan: its key and [`Place`], resolved once.
    places: Vec<(RowKey, Place)>,
    /// This worker's accesses of one iteration, as slots: 4 bytes per access, so that
    /// walking the sequence costs little memory bandwidth.
    steps: Vec<u32>,
    /// Position in `steps`.
    cursor: usize,
}

impl Special {
    /// State for worker `worker`; `deltas`: keep an arena-shaped delta buffer; `views`:
    /// and a private view of every row in it (thread caches).
    pub(crate) fn new(arena: Arc<ProcessArena>, worker: usize, deltas: bool, views: bool) -> Self {
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
        let (views, view_clocks) = match &deltas {
            Some(d) if views => (
                Some(AlignedBuf::zeroed(d.data.len())),
                vec![Clock::MAX; updates.len()],
            ),
            _ => (None, Vec::new()),
        };
        let copy_clocks = vec![Clock::MAX; copies.len()];
        let copies = RowBuffer::new(&arena, copies);
        let mut special = Special {
            deltas,
            touched,
            shard_bytes,
            recent: VecDeque::new(),
            copies,
            copy_clocks,
            views,
            view_clocks,
            places: Vec::new(),
            steps: Vec::new(),
            cursor: 0,
            arena: Arc::clone(&arena),
        };
        special.places = (0..arena.plan.slots.len() as u32)
            .map(|slot| (arena.plan.slots[slot as usize].key, special.place_of(slot)))
            .collect();
        if let Some(seq) = arena.plan.sequences.get(worker) {
            special.steps = seq.iter().map(|&(_, slot)| slot).collect();
        }
        special
    }

    /// Resolves `slot` to its [`Place`].
    fn place_of(&self, slot: u32) -> Place {
        let s = &self.arena.plan.slots[slot as usize];
        let (delta, delta_at) = match self.deltas.as_ref().and_then(|d| Some((d.row(slot)?, d))) {
            Some((r, d)) => (r, d.offsets[r as usize] as u32),
            None => (NONE, 0),
        };
        Place {
            slot,
            chunk: s.chunk,
            word: (s.offset / 8) as u32,
            delta,
            delta_at,
            copy: self.copies.row(slot).unwrap_or(NONE),
            len: s.len as u32,
        }
    }

    /// Where `key` lives: the next step of the pre-resolved access sequence when the
    /// worker is following its pattern (no hashing), else the plan's index.
    #[inline(always)]
    pub(crate) fn place(&mut self, key: RowKey) -> Option<Place> {
        if let Some(&slot) = self.steps.get(self.cursor) {
            let (expected, place) = self.places[slot as usize];
            if expected == key {
                self.cursor += 1;
                if self.cursor == self.steps.len() {
                    self.cursor = 0; // the next iteration starts over
                }
                return Some(place);
            }
        }
        self.deviate(key)
    }

    /// [`place`](Self::place) of a key off the expected sequence.
    #[cold]
    fn deviate(&mut self, key: RowKey) -> Option<Place> {
        let slot = self.arena.slot(key)?;
        // Resynchronise if this is where an iteration starts.
        if self.steps.first() == Some(&slot) {
            self.cursor = 1 % self.steps.len();
        }
        Some(self.places[slot as usize].1)
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
        if place.copy != NONE {
            return self.read_copy(shared, place, required, dst);
        }
        if let Some(clock) = self.arena.read_at(place.chunk, place.word, required, dst) {
            return Ok(clock);
        }
        wait_read(shared, &self.arena, place, required, dst)
    }

    /// The row at `place` from this worker's view, refreshed first if its snapshot is older
    /// than `required`: the snapshot plus every update this worker made since, and the
    /// snapshot's data clock. `None` if
    /// the row has no view (this worker does not update it, or thread caches are off).
    #[inline(always)]
    pub(crate) fn view<T: Element>(
        &mut self,
        shared: &ClientShared,
        place: Place,
        required: Clock,
    ) -> Result<Option<(&[T], Clock)>> {
        // Only where adding updates one by one equals adding their sum: a float view
        // would read other bits than the generic store (snapshot + summed updates).
        if !T::TYPE.exact() {
            return Ok(None);
        }
        self.fresh_view::<T>(shared, place, required)
    }

    /// Copies the row at `place` into `dst` from this worker's view (refreshed first if
    /// older than `required`), with this worker's updates; returns the snapshot's data
    /// clock, or `None` if the row has no view. Float views hold the snapshot alone (the
    /// updates are added on each read, as the generic store adds them); integer views
    /// already include them.
    #[inline(always)]
    pub(crate) fn read_view<T: Element>(
        &mut self,
        shared: &ClientShared,
        place: Place,
        required: Clock,
        dst: &mut [T],
    ) -> Result<Option<Clock>> {
        let Some((_, clock)) = self.fresh_view::<T>(shared, place, required)? else {
            return Ok(None);
        };
        let (r, at, len) = (
            place.delta as usize,
            place.delta_at as usize,
            place.len as usize,
        );
        let views = self.views.as_ref().expect("fresh_view returned a row");
        let view: &[T] = bytemuck::cast_slice(&views.as_bytes()[at..at + len]);
        match &self.deltas {
            // The common float case in one pass: the snapshot plus this clock's delta (the
            // same additions as copying, then adding the delta).
            Some(deltas) if !T::TYPE.exact() && self.touched[r] && self.recent.is_empty() => {
                let delta: &[T] = bytemuck::cast_slice(&deltas.data.as_bytes()[at..at + len]);
                for ((d, v), u) in dst.iter_mut().zip(view).zip(delta) {
                    *d = v.add(*u);
                }
            }
            _ => {
                dst.copy_from_slice(view);
                if !T::TYPE.exact() {
                    self.add_own(place, clock, dst);
                }
            }
        }
        Ok(Some(clock))
    }

    /// The view row at `place` and its data clock, refreshed if older than `required`.
    #[inline(always)]
    fn fresh_view<T: Element>(
        &mut self,
        shared: &ClientShared,
        place: Place,
        required: Clock,
    ) -> Result<Option<(&[T], Clock)>> {
        if place.delta == NONE || self.views.is_none() {
            return Ok(None);
        }
        let r = place.delta as usize;
        let clock = self.view_clocks[r];
        if clock == Clock::MAX || clock < required {
            self.refresh_view::<T>(shared, place, required)?;
        }
        let (at, len) = (place.delta_at as usize, place.len as usize);
        let views = self.views.as_ref().expect("checked above");
        let row = bytemuck::cast_slice(&views.as_bytes()[at..at + len]);
        Ok(Some((row, self.view_clocks[r])))
    }

    /// Refills the view of the row at `place` from a snapshot `>= required` and adds this
    /// worker's updates the snapshot lacks.
    #[cold]
    fn refresh_view<T: Element>(
        &mut self,
        shared: &ClientShared,
        place: Place,
        required: Clock,
    ) -> Result<()> {
        let (r, at, len) = (
            place.delta as usize,
            place.delta_at as usize,
            place.len as usize,
        );
        let mut views = self.views.take().expect("a view row was asked for");
        let row = &mut views.as_bytes_mut()[at..at + len];
        let data_clock = match self.read(shared, place, required, row) {
            Ok(clock) => clock,
            Err(e) => {
                self.views = Some(views);
                return Err(e);
            }
        };
        if T::TYPE.exact() {
            self.add_own::<T>(place, data_clock, bytemuck::cast_slice_mut(row));
        }
        self.views = Some(views);
        self.view_clocks[r] = data_clock;
        Ok(())
    }

    /// [`read`](Self::read) of a row this worker keeps a private copy of.
    fn read_copy(
        &mut self,
        shared: &ClientShared,
        place: Place,
        required: Clock,
        dst: &mut [u8],
    ) -> Result<Clock> {
        let r = place.copy as usize;
        let at = self.copies.offsets[r];
        let len = dst.len();
        if self.copy_clocks[r] == Clock::MAX || self.copy_clocks[r] < required {
            let row = &mut self.copies.data.as_bytes_mut()[at..at + len];
            self.copy_clocks[r] = wait_read(shared, &self.arena, place, required, row)?;
        }
        dst.copy_from_slice(&self.copies.data.as_bytes()[at..at + len]);
        Ok(self.copy_clocks[r])
    }

    /// Adds this worker's updates to the row at `place` that a snapshot at `data_clock`
    /// lacks.
    #[inline(always)]
    pub(crate) fn add_own<T: Element>(&self, place: Place, data_clock: Clock, dst: &mut [T]) {
        let (Some(deltas), r) = (&self.deltas, place.delta as usize) else {
            return;
        };
        if place.delta == NONE {
            return;
        }
        let at = place.delta_at as usize;
        let len = std::mem::size_of_val(dst);
        if !self.recent.is_empty() {
            for (clock, buf, touched) in &self.recent {
                if *clock >= data_clock && touched[r] {
                    T::add_slice(dst, bytemuck::cast_slice(&buf.as_bytes()[at..at + len]));
                }
            }
        }
        if self.touched[r] {
            T::add_slice(
                dst,
                bytemuck::cast_slice(&deltas.data.as_bytes()[at..at + len]),
            );
        }
    }

    /// Adds `delta` to the row at `place`, starting at element `column` (a whole row:
    /// `column == 0` and the row's width). Returns `false` when the row is not in this
    /// worker's delta buffer (the caller logs it generically).
    #[inline(always)]
    pub(crate) fn update<T: Element>(&mut self, place: Place, column: usize, delta: &[T]) -> bool {
        let Some(deltas) = &mut self.deltas else {
            return false;
        };
        if place.delta == NONE {
            return false;
        }
        let r = place.delta as usize;
        let start = place.delta_at as usize;
        let len = place.len as usize;
        if let (Some(views), true) = (&mut self.views, T::TYPE.exact()) {
            if self.view_clocks[r] != Clock::MAX {
                let row: &mut [T] =
                    bytemuck::cast_slice_mut(&mut views.as_bytes_mut()[start..start + len]);
                T::add_slice(&mut row[column..column + delta.len()], delta);
            }
        }
        let row: &mut [T] =
            bytemuck::cast_slice_mut(&mut deltas.data.as_bytes_mut()[start..start + len]);
        if !self.touched[r] {
            // First update of the clock: the delta is the value (as the generic log does).
            self.touched[r] = true;
            if delta.len() == row.len() {
                row.copy_from_slice(delta);
                return true;
            }
            row.fill(T::default());
        }
        T::add_slice(&mut row[column..column + delta.len()], delta);
        true
    }

    /// Readies state kept from an earlier run for a new one: the run starts at the top of
    /// the access sequence, and sent updates of earlier runs are no longer tracked for
    /// read-my-writes (as for a freshly built state).
    pub(crate) fn start_run(&mut self) {
        self.cursor = 0;
        self.recent.clear();
        self.view_clocks.fill(Clock::MAX);
    }

    /// Whether updates of the current clock are waiting to be sent.
    pub(crate) fn has_updates(&self) -> bool {
        self.touched.contains(&true)
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

/// Reads the row at `place` from the arena, asking for a refresh and waiting while it is
/// too stale.
fn wait_read(
    shared: &ClientShared,
    arena: &ProcessArena,
    place: Place,
    required: Clock,
    dst: &mut [u8],
) -> Result<Clock> {
    loop {
        if let Some(clock) = arena.read_at(place.chunk, place.word, required, dst) {
            return Ok(clock);
        }
        let generation = shared.fetcher.generation();
        if let Some(clock) = arena.read_at(place.chunk, place.word, required, dst) {
            return Ok(clock);
        }
        shared.check()?;
        arena.request(
            shared.process,
            shared.transport.as_ref(),
            required,
            Some(place.slot),
        )?;
        shared.fetcher.wait(generation, WAIT_SLICE);
    }
}
