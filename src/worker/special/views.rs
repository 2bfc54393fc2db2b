//! Reads on the general path, and the views they are served from: a row with a block is
//! read from its view ([`SpecialWorker::view`], [`SpecialWorker::read_view`]), which a read that finds
//! it too stale refills together with every view of its refresh chunk from one snapshot
//! ([`SpecialWorker::refresh_views`]), adding back this worker's own updates the snapshot lacks
//! where a view must hold them; a row without one is read from the arena or from this
//! worker's private copy of a contended row, waiting for a refresh while too stale.
//!
//! This file knows how views are kept fresh and what they hold; the block format only
//! through `block.rs`; nothing of the op tape, updates' bookkeeping or slabs.

use super::bits::bit;
use super::block::{block_parts, row_at, rows_at, Header, HeaderMut, RowAt, NO_VIEW};
use super::{Place, SlotInfo, SpecialWorker, NONE};
use crate::client::{ClientShared, ProcessArena, WAIT_SLICE};
use crate::element::{ElemType, Element};
use crate::error::Result;
use crate::ids::Clock;
use crate::slot::padded_words;

impl SpecialWorker {
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
            (&self.arena, self.zone, self.worker),
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
        if !T::TYPE.exact() && (self.is_held(at) || self.is_gradient(at.index)) {
            // This worker's copy, or a rule row's servers' value (its updates are
            // gradients, not added).
            T::copy_row(dst, view_row);
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
    pub(super) fn fresh_view(
        &mut self,
        shared: &ClientShared,
        place: Place,
        required: Clock,
    ) -> Result<Option<Clock>> {
        if place.block == NONE || !self.views {
            return Ok(None);
        }
        let header = Header::at(&self.words, place.block as usize);
        if !header.view_fresh(required) {
            return self.refresh_views(shared, place, required).map(Some);
        }
        Ok(Some(header.view_clock()))
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
                    let (view, _) = rows_at(b, row.words as usize, views);
                    arena.copy_row(row.word, &mut words[view..view + row.words as usize]);
                    continue;
                }
                // A run's rows (one word each) from their own arena words.
                let (view, _) = block_parts(words, views, b);
                let first = Header::at(words, b).index();
                for (v, &slot) in view.zip(&updates[first..]) {
                    arena.copy_row(plan.slots[slot as usize].word(), &mut words[v..v + 1]);
                }
            }
        };
        let clock = wait_chunk(
            shared,
            (&self.arena, self.zone, self.worker),
            (place.slot, self.phase),
            info.chunk,
            required,
            copy,
        )?;
        let (rows, words) = (&self.chunk_views[info.chunk as usize], &mut self.words);
        let mut exact = false;
        for row in rows {
            HeaderMut::at(words, row.block as usize).set_view_clock(clock);
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
        let count = Header::at(&self.words, b).shape().1;
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
    pub(super) fn add_own_to_row(&mut self, at: RowAt, data_clock: Clock, elem: ElemType) {
        let len = Header::at(&self.words, at.block).shape().0;
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
        if clock == NO_VIEW || clock < required {
            let row = &mut self.copies.data.as_bytes_mut()[at..at + len];
            self.copies.clocks[r] = wait_read(
                shared,
                (&self.arena, self.zone, self.worker),
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
    /// lacks (none to a row of a table with an update rule).
    #[inline(always)]
    pub(crate) fn add_own<T: Element>(&self, place: Place, data_clock: Clock, dst: &mut [T]) {
        if place.block == NONE {
            return;
        }
        let at = self.row_of(place);
        if self.is_gradient(at.index) {
            return; // a rule row: its updates are gradients, not added to its value
        }
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
}

/// A block with a view, as the chunk refresh finds it.
#[derive(Debug, Clone, Copy)]
pub(super) struct ViewRow {
    /// First word of the block.
    pub(super) block: u32,
    /// Arena word where its row starts (a run's first row; the others' are the plan's).
    pub(super) word: u32,
    /// Words of the view of a block's one row; [`RUN_VIEWS`] for a run's.
    pub(super) words: u32,
    /// The element type of its rows.
    pub(super) elem: ElemType,
}

/// [`ViewRow::words`] of a run: its rows' views are found through its header.
pub(super) const RUN_VIEWS: u32 = u32::MAX;

/// Runs `copy` on a snapshot `>= required` of arena chunk `chunk` (see
/// [`ProcessArena::read_chunk_in`]), asking for a refresh (of the chunks read in clock
/// `phase`, or the chunk holding `slot`: [`ProcessArena::request`]) and waiting while it
/// is too stale; returns the snapshot's data clock.
fn wait_chunk(
    shared: &ClientShared,
    (arena, zone, worker): (&ProcessArena, u8, usize),
    slot: (u32, u32),
    chunk: u32,
    required: Clock,
    mut copy: impl FnMut(&crate::client::ArenaWords<'_>),
) -> Result<Clock> {
    wait_fresh(shared, (arena, worker), slot, required, || {
        arena.read_chunk_in(zone, chunk, required, &mut copy)
    })
}

/// Reads the row of `slot` (described by `info`) from the arena, asking for a refresh (see
/// [`wait_chunk`]) and waiting while it is too stale.
fn wait_read(
    shared: &ClientShared,
    (arena, zone, worker): (&ProcessArena, u8, usize),
    slot: (u32, u32),
    info: &SlotInfo,
    required: Clock,
    dst: &mut [u8],
) -> Result<Clock> {
    wait_fresh(shared, (arena, worker), slot, required, || {
        arena.read_at_in(zone, info.chunk, info.word, required, dst)
    })
}

/// Calls `attempt` (a read of the arena that needs data clock `>= required`) until it
/// succeeds, asking for a refresh for the read of `slot` in the iteration's clock `phase`
/// and waiting for replies in between; returns the data clock it read. The time it waited
/// is local worker `worker`'s ([`LiveWorkers::waited`](crate::client::LiveWorkers::waited)).
fn wait_fresh(
    shared: &ClientShared,
    (arena, worker): (&ProcessArena, usize),
    (slot, phase): (u32, u32),
    required: Clock,
    mut attempt: impl FnMut() -> Option<Clock>,
) -> Result<Clock> {
    if let Some(clock) = attempt() {
        return Ok(clock);
    }
    // The wait for a fresh enough row, published for the metrics endpoint.
    let since = std::time::Instant::now();
    let clock = loop {
        let generation = shared.signal.generation();
        if let Some(clock) = attempt() {
            break clock;
        }
        shared.check()?;
        arena.request(shared, required, phase, Some(slot))?;
        if shared.help() {
            continue; // a shard's queued work done here: look again before sleeping
        }
        shared.signal.wait(generation, WAIT_SLICE);
    };
    shared.live.waited(worker, since);
    Ok(clock)
}
