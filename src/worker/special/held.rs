//! Held rows of a specialized worker ([`Worker::read_update`]): a float row read through
//! `read_update` is *held* for the rest of the clock. Its view becomes this worker's copy
//! of the row (the snapshot plus the worker's updates so far, added once), and every
//! later update of the row in the clock is added to that copy as well as to the delta,
//! so a read of it is the view as it is and `read_update` lends it without a copy. A
//! hand-written SGD loop keeps its rows the same way; the generic store holds rows in
//! the worker's held map with the same additions, so reads are bit-identical across
//! modes.
//!
//! Integer rows need no holding: their views always include the worker's updates (one
//! by one or summed, integers add up alike). The state is two bitmaps by row index: the
//! touched bits every worker keeps, and, once a worker holds rows, `dirty` bits for rows
//! updated while not held. A row is held when touched and not dirty, so holding a row on
//! the fast path writes nothing the UPDATE that follows does not write anyway. A CLOCK
//! releases every held row (it clears both bitmaps); under SSP, where a view may serve
//! the next clocks too, it also marks the held rows' views stale, since they now hold
//! updates a later snapshot includes, and a chunk refilled while rows of it are held
//! (unbounded staleness moves the required clock within a clock) adds their updates
//! back.
//!
//! [`Worker::read_update`]: crate::Worker::read_update

use super::bits::bit;
use super::block::{Header, HeaderMut, RowAt, HEADER_WORDS};
use super::slabs::RunCursor;
use super::{SpecialWorker, NONE, RUN_ROW};
use crate::client::ClientShared;
use crate::element::Element;
use crate::error::Result;
use crate::ids::{Clock, RowKey};

impl SpecialWorker {
    /// Whether the row at `at` is held in this clock.
    #[inline(always)]
    pub(super) fn is_held(&self, at: RowAt) -> bool {
        self.holds && held_in(&self.touched, &self.dirty, at.index)
    }

    /// Starts keeping the `dirty` bits, at this worker's first `read_update`: every row
    /// updated so far in this clock was updated while not held.
    #[inline(never)]
    fn start_holding(&mut self) {
        self.holds = true;
        self.dirty.copy_from_slice(&self.touched);
    }

    /// Holds `key`'s row (a row of `T`s) if this worker keeps a view of it: refreshes the
    /// view first if older than `required`, then makes it the worker's copy. Returns
    /// `false` (holding nothing) when the row has no view here, so the worker holds it in
    /// its held map instead. The cursor does not move.
    pub(crate) fn hold<T: Element>(
        &mut self,
        shared: &ClientShared,
        key: RowKey,
        required: Clock,
    ) -> Result<bool> {
        let Some((place, _)) = self.locate(key) else {
            return Ok(false);
        };
        if place.block == NONE || !self.views {
            return Ok(false);
        }
        let Some(clock) = self.fresh_view(shared, place, required)? else {
            return Ok(false);
        };
        if !T::TYPE.exact() {
            self.hold_at::<T>(self.row_of(place), clock);
        }
        Ok(true)
    }

    /// Makes the view of the float row at `at` (a snapshot at `data_clock`) this worker's
    /// copy, if it is not yet: adds the worker's updates the snapshot lacks (sent ones
    /// under SSP, oldest first, then this clock's delta: the additions a read makes),
    /// and marks the row held (touched, with a zero delta if it was not, and not dirty).
    pub(super) fn hold_at<T: Element>(&mut self, at: RowAt, data_clock: Clock) {
        if !self.holds {
            self.start_holding();
        }
        if self.is_held(at) {
            return;
        }
        self.add_own_to_row(at, data_clock, T::TYPE);
        if Header::at(&self.words, at.block).is_run() {
            self.start_run_row(at); // touched, its delta zeroed if it was not
        } else {
            self.touched[at.index / 64] |= 1 << (at.index % 64);
        }
        self.dirty[at.index / 64] &= !(1 << (at.index % 64));
    }

    /// Readies the float row of the block at word `b` (index `index`, a fresh view of
    /// `row_words` words, `n` elements) for a fast `read_update`: a row updated in this
    /// clock while not held gets its delta added to its view, which then is the worker's
    /// copy (no sent updates wait to be added: SSP keeps floats off the fast path). No bit is written
    /// for a row already held or not yet updated: the update that follows marks it held.
    #[inline(always)]
    pub(super) fn hold_fresh<T: Element>(
        &mut self,
        b: usize,
        index: usize,
        row_words: usize,
        n: usize,
    ) {
        if !self.holds {
            self.start_holding();
        }
        let (w, mask) = (index / 64, 1u64 << (index % 64));
        if self.dirty[w] & mask != 0 {
            self.dirty[w] &= !mask;
            let rows = &mut self.words[b + HEADER_WORDS..b + HEADER_WORDS + 2 * row_words];
            let (view, delta) = rows.split_at_mut(row_words);
            let delta = &bytemuck::cast_slice::<u64, T>(delta)[..n];
            T::add_slice(&mut bytemuck::cast_slice_mut::<u64, T>(view)[..n], delta);
        }
    }

    /// Releases every held row at a CLOCK, before its touched bits are cleared.
    /// `keep_recent` (SSP): a held row's view holds the updates just sent, which a later
    /// snapshot includes too, so it is marked stale and the next read refills it. Under
    /// BSP every view is refilled in the next clock anyway.
    pub(super) fn release_held(&mut self, keep_recent: bool) {
        if !self.holds {
            return;
        }
        if keep_recent {
            let mut runs = RunCursor::new(self, 0);
            for w in 0..self.touched.len() {
                let mut bits = self.touched[w] & !self.dirty[w];
                while bits != 0 {
                    let r = w * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    let b = match self.blocks[r] {
                        e if e & RUN_ROW != 0 => runs.run_of(self, r).0,
                        b => b as usize,
                    };
                    HeaderMut::at(&mut self.words, b).clear_view();
                }
            }
        }
        self.dirty.fill(0);
    }
}

/// Whether row `r` is held, for a worker that holds rows: updated in this clock, and
/// never while not held (see [`SpecialWorker::dirty`]).
#[inline(always)]
pub(super) fn held_in(touched: &[u64], dirty: &[u64], r: usize) -> bool {
    bit(touched, r) && !bit(dirty, r)
}
