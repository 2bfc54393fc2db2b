//! Updates on the general path and the update kernels the fast paths share: a delta is
//! added to its row's delta in the block (zero at the start of every clock), and into
//! its view where the view must show it (integers; a held float row, `held.rs`); the
//! row's touched bit records that a CLOCK sends it. A run's rows, a word each, take
//! their own versions (`*_run`).
//!
//! This file knows how an update lands in a block; the format through `block.rs`, the
//! held and dirty bits through `held.rs`; nothing of the op tape, reads or slabs.

use super::bits::bit;
use super::block::{block_words, split_block, Header, RowAt};
use super::held::held_in;
use super::{Place, SpecialWorker, NONE};
use crate::element::Element;

impl SpecialWorker {
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
        if !Header::at(&self.words, at.block).is_run() {
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
    pub(super) fn add_to_run<T: Element>(
        &mut self,
        at: RowAt,
        width: usize,
        column: usize,
        delta: &[T],
    ) {
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
    pub(super) fn add_cols_to_run<T: Element>(&mut self, at: RowAt, cols: &[(usize, T)]) {
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
        fold && self.views && Header::at(&self.words, at.block).has_view()
    }

    /// Marks a run's row at `at` touched; on its first update in the clock (returns
    /// `true`) also its run, and its delta starts at zero.
    #[inline(always)]
    pub(super) fn start_run_row(&mut self, at: RowAt) -> bool {
        if bit(&self.touched, at.index) {
            return false;
        }
        self.touched[at.index / 64] |= 1 << (at.index % 64);
        self.words[at.delta] = 0;
        true
    }
}

/// Adds `delta` at element `column` of the row of `width` `T`s whose block is `block`
/// ([`block_words`]): into its delta, which is zero at the start of every clock (a CLOCK
/// zeroes what it takes), and, for integers or a held row, into a filled view; marks the
/// block touched (its bit in the first of `(touched, dirty, holds)`, see
/// [`fold_update`]). No branch on whether this is the clock's first update of the row:
/// one was mispredicted often enough to cost MF 4 % an iteration.
#[inline(always)]
pub(super) fn add_to_block_in<T: Element>(
    block: &mut [u64],
    (touched, dirty, holds): (&mut [u64], &mut [u64], bool),
    views: bool,
    width: usize,
    column: usize,
    delta: &[T],
) {
    let cols = column..column + delta.len();
    let (header, view, row) = split_block::<T>(block, views, width);
    let r = header.index();
    if fold_update::<T>((touched, dirty, holds), r) && views && header.has_view() {
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

/// [`add_to_block_in`] of each `(column, delta)` of `cols` (columns below `width`).
#[inline(always)]
pub(super) fn add_cols_to_block_in<T: Element>(
    block: &mut [u64],
    (touched, dirty, holds): (&mut [u64], &mut [u64], bool),
    views: bool,
    width: usize,
    cols: &[(usize, T)],
) {
    let (header, view, row) = split_block::<T>(block, views, width);
    let r = header.index();
    if fold_update::<T>((touched, dirty, holds), r) && views && header.has_view() {
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
fn mark_touched(header: Header<'_>, touched: &mut [u64]) {
    let r = header.index();
    touched[r / 64] |= 1 << (r % 64);
}
