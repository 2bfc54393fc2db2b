//! The fast paths of [`SpecialWorker`]: a READ, `read_with` or UPDATE that follows the pattern
//! finds its block (or plan slot) as the next step of the pre-resolved access sequence,
//! checks the key there and does its work in that block, prefetching the blocks a few
//! steps ahead. Each returns without side effects when it cannot serve the access, so the
//! caller can take the general path.
//!
//! Only reads prefetch ([`SpecialWorker::advance`]); updates take their step without one.
//!
//! A step naming a run's row ([`RUN_STEP`]) leaves these paths at once for their run
//! versions (`*_run`), out of line, so that a block's path has one more test and nothing
//! else.
//!
//! This file knows the steps' encoding and the prefetch distance; it reads block
//! headers only through `block.rs`'s [`Header`] (loads the compiler sees through), and
//! leaves resolving deviating keys, refreshing views and the CLOCK to the other files.

use super::bits::bit;
use super::block::{block_span, row_at, run_row_at, Header, RowAt, HEADER_WORDS, NO_VIEW};
use super::held::held_in;
use super::tape::{run_step, RUN_STEP, SLOT_STEP};
use super::update::{add_cols_to_block_in, add_to_block_in};
use super::{SpecialWorker, NONE, RUN_ROW};
use crate::element::Element;
use crate::ids::{Clock, RowKey};
use crate::prefetch::prefetch_at;
use crate::slot::padded_words;
use crate::worker::scratch_of;

/// How many steps ahead of the cursor blocks are prefetched.
const AHEAD: usize = 16;
/// Words of a block [`SpecialWorker::advance`] prefetches: three cache lines.
const PREFETCH_WORDS: usize = 24;
/// The most words of a block a read's advance prefetches (16 cache lines).
const MAX_PREFETCH_WORDS: usize = 128;

/// A block [`SpecialWorker::fresh_block`] found: its view and delta rows.
struct FreshBlock<'a, T> {
    view: &'a [T],
    delta: &'a [T],
    /// Words of each row.
    row_words: usize,
    /// Whether the view is not yet the row as this worker sees it (a float row touched
    /// this clock and not held): `read_with` then builds the row in scratch instead of
    /// lending the view. (`read_fast` adds every float row's delta, zero when untouched,
    /// unless the row is held.)
    add_delta: bool,
    /// Whether the row is a held float row: its view is the row as this worker sees it.
    held: bool,
    /// Whether the row is of a table with an update rule: a READ is its view alone.
    gradient: bool,
}

impl SpecialWorker {
    /// The fast path of a READ that follows the pattern: if the next step is `key`'s block
    /// and its view is fresh enough for `required`, copies the row as this worker sees it
    /// into `dst` (the table's width) and returns `true`. Otherwise changes nothing and
    /// returns `false`: the caller takes the general path. `no_generic_updates`, asked
    /// only for a row without a block: whether the worker's generic log holds no updates
    /// (of this clock or of recent ones) that such a row might need added.
    #[inline(always)]
    pub(crate) fn read_fast<T: Element>(
        &mut self,
        key: RowKey,
        required: Clock,
        no_generic_updates: impl FnOnce() -> bool,
        dst: &mut [T],
    ) -> bool {
        let Some(&step) = self.steps.get(self.cursor) else {
            return false;
        };
        if step >= RUN_STEP {
            // A row without a block, or a run's row (one test on a block's path).
            if step & SLOT_STEP != 0 {
                return no_generic_updates()
                    && self.read_slot_fast(step & !SLOT_STEP, key, required, dst);
            }
            return self.read_run(step, key, required, dst);
        }
        let Some(fresh) = self.fresh_block::<T>(step, key, required, dst.len()) else {
            return false;
        };
        self.prefetch_for_read(fresh.row_words);
        if T::TYPE.exact() || fresh.held || fresh.gradient {
            // Integer views hold this worker's updates, and so does a held row's; a rule
            // row's updates are gradients, which a READ does not add.
            T::copy_row(dst, fresh.view);
        } else {
            // Floats: the snapshot plus this clock's delta, in one pass, whether or not
            // the row was updated in this clock (an untouched delta is zero, and adding
            // zero changes no value a row can hold: rows start at +0 and only ever have
            // deltas added, so none is -0). No branch on it: one was mispredicted often.
            T::sum_into(dst, fresh.view, fresh.delta);
        }
        self.step_cursor();
        true
    }

    /// [`read_fast`](Self::read_fast) of a row without a block (one this worker reads but
    /// does not update): straight from the arena, or from this worker's copy of a
    /// contended row, when fresh enough.
    #[inline(always)]
    fn read_slot_fast<T: Element>(
        &mut self,
        slot: u32,
        key: RowKey,
        required: Clock,
        dst: &mut [T],
    ) -> bool {
        let Some(info) = self.info_get(slot) else {
            return false;
        };
        if info.key != key || info.block != NONE {
            return false;
        }
        let dst: &mut [u8] = bytemuck::cast_slice_mut(dst);
        let fresh = if info.copy == NONE {
            self.arena
                .read_at_in(self.zone, info.chunk, info.word, required, dst)
                .is_some()
        } else {
            let r = info.copy as usize;
            let clock = self.copies.clocks[r];
            let fresh = clock != NO_VIEW && clock >= required;
            if fresh {
                let at = self.copies.offsets[r];
                dst.copy_from_slice(&self.copies.data.as_bytes()[at..at + dst.len()]);
            }
            fresh
        };
        if fresh {
            self.advance();
        }
        fresh
    }

    /// The fast path of a READ that lends the row ([`Worker::read_with`]): like
    /// [`read_fast`](Self::read_fast), calling `f` with the row instead of copying it out.
    /// A view is lent as it is when it already is the row as this worker sees it (integer
    /// rows, and float rows not updated in this clock); otherwise the row is built in
    /// `scratch` (words, grown to a row of `width` elements only then). Gives `f` back if
    /// it could not take the fast path.
    ///
    /// [`Worker::read_with`]: crate::Worker::read_with
    #[inline(always)]
    pub(crate) fn read_with_fast<T: Element, R, F: FnOnce(&[T]) -> R>(
        &mut self,
        key: RowKey,
        required: Clock,
        no_generic_updates: impl FnOnce() -> bool,
        (scratch, width): (&mut Vec<u64>, usize),
        f: F,
    ) -> std::result::Result<R, F> {
        let Some(&step) = self.steps.get(self.cursor) else {
            return Err(f);
        };
        if step >= RUN_STEP {
            if step & SLOT_STEP != 0 {
                let row = scratch_of(scratch, width);
                if no_generic_updates()
                    && self.read_slot_fast(step & !SLOT_STEP, key, required, row)
                {
                    return Ok(f(row));
                }
                return Err(f);
            }
            return self.read_with_run(step, key, required, (scratch, width), f);
        }
        let Some(fresh) = self.fresh_block::<T>(step, key, required, width) else {
            return Err(f);
        };
        // The block ahead is prefetched before `f` runs, so that `f` hides the fetch.
        self.prefetch_for_read(fresh.row_words);
        let r = if fresh.add_delta {
            let row = scratch_of(scratch, width);
            T::sum_into(row, fresh.view, fresh.delta);
            f(row)
        } else {
            f(fresh.view)
        };
        self.step_cursor();
        Ok(r)
    }

    /// The fast path of [`Worker::read_update`] that follows the pattern: if the next
    /// `2 N` steps are the blocks of `rows` (each `(key, width)`) then the same blocks
    /// again, and every view is fresh enough for `required`, holds each row (`held.rs`),
    /// calls `f` with their views and `deltas`, adds each delta to its row (view and
    /// delta: the rows are held) and moves past the `2 N` steps. Otherwise changes
    /// nothing and gives `f` back. Each delta has its row's width.
    ///
    /// Blocks are read without bounds checks, on the invariant of `SpecialWorker::steps` (a
    /// block step names a whole block inside `words`) and one check per row here: the
    /// matched block's rows are `width` `T`s (its header's length), so its view and delta
    /// lie inside the block whatever the caller passes.
    ///
    /// [`Worker::read_update`]: crate::Worker::read_update
    #[inline(always)]
    pub(crate) fn read_update_fast<T, R, const N: usize, F>(
        &mut self,
        rows: [(RowKey, usize); N],
        required: Clock,
        deltas: &mut [&mut [T]; N],
        f: F,
    ) -> std::result::Result<R, F>
    where
        T: Element,
        F: FnOnce([&[T]; N], [&mut [T]; N]) -> R,
    {
        if !self.serves_reads::<T>() {
            return Err(f);
        }
        let c = self.cursor;
        let Some(steps) = self.steps.get(c..c + 2 * N) else {
            return Err(f);
        };
        // Per row: its block's first word, its index (touched and held bits) and the
        // words of its view (the delta follows). No bounds checks, on the invariant of
        // `SpecialWorker::steps`: a block step names a whole block inside `words` whose rows
        // have the size its header records; the block matched below is `key`'s and its
        // rows are `n` `T`s (checked against the header's length). Its view and delta are
        // taken as rows without a check and a cast each (`row_in`): those measured 3-4 %
        // of an MF iteration.
        let mut at = [(0usize, 0usize, 0usize); N];
        for (i, &(key, n)) in rows.iter().enumerate() {
            let step = steps[i];
            if step >= RUN_STEP || steps[N + i] != step {
                return Err(f);
            }
            let b = step as usize;
            // SAFETY: a block step's header lies inside `words` (see above).
            let header = unsafe { Header::at_unchecked(&self.words, b) };
            if !header.is_key(key)
                || !header.view_fresh(required)
                || header.len_bytes() != n * size_of::<T>()
                || self.is_gradient(header.index())
            {
                // (A rule row is never held: its updates are gradients, not its value.)
                return Err(f);
            }
            let row_words = padded_words(n * size_of::<T>());
            debug_assert!(b + HEADER_WORDS + 2 * row_words <= self.words.len());
            at[i] = (b, header.index(), row_words);
        }
        if !T::TYPE.exact() {
            for (i, &(b, index, row_words)) in at.iter().enumerate() {
                self.hold_fresh::<T>(b, index, row_words, rows[i].1);
            }
        }
        let mut views: [&[T]; N] = [&[]; N];
        for (view, (&(b, _, _), &(_, n))) in views.iter_mut().zip(at.iter().zip(&rows)) {
            // SAFETY: the block's view (`n` `T`s: its header's length, checked above)
            // follows its header inside `words` (the steps' invariant).
            *view = unsafe { row_in(&self.words, b + HEADER_WORDS, n) };
        }
        let r = f(views, deltas.each_mut().map(|d| &mut **d));
        // The blocks a read a step ahead would prefetch, as reads do.
        for (k, &(_, _, row_words)) in at.iter().enumerate() {
            let words = (HEADER_WORDS + row_words).clamp(PREFETCH_WORDS, MAX_PREFETCH_WORDS);
            self.prefetch_step(c + k + 1 + AHEAD, words);
        }
        // Every row is held now (integers' views hold this worker's updates anyway):
        // each delta goes into the view and into the clock's delta.
        for (i, (&(b, index, row_words), delta)) in at.iter().zip(deltas.iter()).enumerate() {
            let (view, sum, n) = (b + HEADER_WORDS, b + HEADER_WORDS + row_words, rows[i].1);
            // SAFETY: the block's view and delta (`row_words` words each, `n` `T`s: its
            // header's length, checked above) follow its header inside `words` (the
            // steps' invariant). (`delta` has `n` elements too; `add_slice` would stop at
            // the shorter if not.)
            unsafe {
                T::add_slice(row_in_mut(&mut self.words, view, n), delta);
                T::add_slice(row_in_mut(&mut self.words, sum, n), delta);
            }
            self.touched[index / 64] |= 1 << (index % 64);
        }
        self.counters.lent_read_updates += 1;
        self.cursor = c + 2 * N - 1;
        self.step_cursor();
        Ok(r)
    }

    /// The block named by `step` if it is `key`'s, its view holds a snapshot fresh enough
    /// for `required`, and a read can be served from it alone ([`serves_reads`]). `n`: the
    /// row's width.
    ///
    /// [`serves_reads`]: SpecialWorker::serves_reads
    #[inline(always)]
    fn fresh_block<T: Element>(
        &self,
        step: u32,
        key: RowKey,
        required: Clock,
        n: usize,
    ) -> Option<FreshBlock<'_, T>> {
        if !self.serves_reads::<T>() {
            return None;
        }
        // Views are on (`serves_reads`): the block holds a view before the delta.
        let row_words = padded_words(n * size_of::<T>());
        let block = self.words.get(block_span::<T>(step as usize, n, true))?;
        let (header, rows) = block.split_at(HEADER_WORDS);
        let header = Header::of(header);
        if !header.is_key(key) || !header.view_fresh(required) {
            return None;
        }
        let (view, delta) = rows.split_at(row_words);
        let index = header.index();
        let held = !T::TYPE.exact() && self.holds && held_in(&self.touched, &self.dirty, index);
        let gradient = self.is_gradient(index);
        Some(FreshBlock {
            view: &bytemuck::cast_slice(view)[..n],
            delta: &bytemuck::cast_slice(delta)[..n],
            row_words,
            add_delta: !T::TYPE.exact() && !held && !gradient && bit(&self.touched, index),
            held,
            gradient,
        })
    }

    /// The fast path of an UPDATE that follows the pattern: if the next step is `key`'s
    /// block (a row of `width` elements), adds `delta` to it starting at element `column`
    /// (a whole row: `column == 0`, `delta.len() == width`) and returns `true`; otherwise
    /// changes nothing and returns `false`.
    #[inline(always)]
    pub(crate) fn update_fast<T: Element>(
        &mut self,
        key: RowKey,
        width: usize,
        column: usize,
        delta: &[T],
    ) -> bool {
        let views = self.views;
        let Some((block, bits)) = self.next_block::<T>(key, width) else {
            return self.update_run(key, width, column, delta);
        };
        add_to_block_in(block, bits, views, width, column, delta);
        self.step_cursor();
        true
    }

    /// The fast path of a sparse UPDATE ([`Worker::update_cols`]) that follows the
    /// pattern: if the next step is `key`'s block (a row of `width` elements), adds each
    /// `(column, delta)` of `cols` (columns below `width`) and returns `true`; otherwise
    /// changes nothing and returns `false`. An empty `cols` only takes the step.
    ///
    /// [`Worker::update_cols`]: crate::Worker::update_cols
    #[inline(always)]
    pub(crate) fn update_cols_fast<T: Element>(
        &mut self,
        key: RowKey,
        width: usize,
        cols: &[(usize, T)],
    ) -> bool {
        let views = self.views;
        let Some((block, bits)) = self.next_block::<T>(key, width) else {
            return self.update_cols_run(key, cols);
        };
        if !cols.is_empty() {
            add_cols_to_block_in(block, bits, views, width, cols);
        }
        self.step_cursor();
        true
    }

    /// The words of `key`'s block (a row of `width` `T`s) if the next step is that block
    /// (the step an UPDATE that follows the pattern takes), with the touched and dirty
    /// bits and whether the worker holds rows.
    #[inline(always)]
    #[allow(clippy::type_complexity)]
    fn next_block<T: Element>(
        &mut self,
        key: RowKey,
        width: usize,
    ) -> Option<(&mut [u64], (&mut [u64], &mut [u64], bool))> {
        let step = *self.steps.get(self.cursor)?;
        if step >= RUN_STEP {
            return None;
        }
        let block = self
            .words
            .get_mut(block_span::<T>(step as usize, width, self.views))?;
        Header::of(block).is_key(key).then_some((
            block,
            (&mut self.touched[..], &mut self.dirty[..], self.holds),
        ))
    }

    /// Moves to the next step and prefetches what a step [`AHEAD`] will touch: a block's
    /// first three lines (the header, and a narrow row's view and delta), or a run's
    /// first two. Reads advance this way; updates only move the cursor
    /// ([`step_cursor`](Self::step_cursor)): a prefetch serves a load the worker waits
    /// for, an update's row was most often just read (its lines are in cache), and a
    /// store that misses does not stall the worker. The steps an update would have
    /// prefetched are reached by the reads' prefetches around it; issuing them at
    /// updates as well cost MF 2 % an iteration (BENCHMARKS.md).
    #[inline(always)]
    pub(super) fn advance(&mut self) {
        self.prefetch_ahead(PREFETCH_WORDS);
        self.step_cursor();
    }

    /// The prefetch of a read of a row of `row_words` words: the block ahead is prefetched
    /// through its view (a wide row's view is read whole; at most [`MAX_PREFETCH_WORDS`]),
    /// as the next reads are likely of rows as wide.
    #[inline(always)]
    fn prefetch_for_read(&self, row_words: usize) {
        self.prefetch_ahead((HEADER_WORDS + row_words).clamp(PREFETCH_WORDS, MAX_PREFETCH_WORDS));
    }

    /// Moves the cursor to the next step (the next iteration's first at the end).
    #[inline(always)]
    fn step_cursor(&mut self) {
        self.cursor += 1;
        if self.cursor == self.steps.len() {
            self.move_cursor(0); // the next iteration starts over
        }
    }

    /// Prefetches `words` words from the header of the block [`AHEAD`] steps after the
    /// next one (a plan slot's arena row when that step is a slot's).
    #[inline(always)]
    fn prefetch_ahead(&self, words: usize) {
        self.prefetch_step(self.cursor + 1 + AHEAD, words);
    }

    /// [`prefetch_ahead`](Self::prefetch_ahead) of step `at`.
    #[inline(always)]
    fn prefetch_step(&self, at: usize, words: usize) {
        if let Some(&ahead) = self.steps.get(at) {
            if ahead < RUN_STEP {
                // The first three lines unrolled (all a narrow row's block needs), then
                // the rest of a wide row's view.
                let b = ahead as usize;
                for line in [b, b + 8, b + 16] {
                    prefetch_at(&self.words, line);
                }
                let mut line = PREFETCH_WORDS;
                while line < words {
                    prefetch_at(&self.words, b + line);
                    line += 8;
                }
            } else if ahead & SLOT_STEP != 0 {
                if let Some(planned) = self.arena.plan.slots.get((ahead & !SLOT_STEP) as usize) {
                    self.arena.prefetch(planned.word());
                }
            } else if let Some(&b) = self.runs.get(run_step(ahead).0) {
                // A run's row: its run's first lines (its header and views).
                for line in [0, 8] {
                    prefetch_at(&self.words, b as usize + line);
                }
            }
        }
    }

    /// [`read_fast`](Self::read_fast) of a run's row (a [`RUN_STEP`] step), out of line.
    #[inline(never)]
    fn read_run<T: Element>(
        &mut self,
        step: u32,
        key: RowKey,
        required: Clock,
        dst: &mut [T],
    ) -> bool {
        let Some((view, delta)) = self.fresh_run_row::<T>(step, key, required, dst.len()) else {
            return false;
        };
        match delta {
            Some(delta) => T::sum_into(dst, view, delta),
            None => T::copy_row(dst, view),
        }
        self.advance();
        true
    }

    /// The view of the run's row `step` names, if it is `key`'s and its view is fresh
    /// enough for `required` and serves a read alone (as [`fresh_block`]), as `n`
    /// elements; with the row's delta if a read must add it (a float row touched in this
    /// clock and not held).
    ///
    /// [`fresh_block`]: Self::fresh_block
    #[inline(always)]
    fn fresh_run_row<T: Element>(
        &self,
        step: u32,
        key: RowKey,
        required: Clock,
        n: usize,
    ) -> Option<(&[T], Option<&[T]>)> {
        let exact = T::TYPE.exact();
        if !self.serves_reads::<T>() {
            return None;
        }
        let at = self.run_row(step, key)?;
        if !Header::at(&self.words, at.block).view_fresh(required) || at.delta >= self.words.len() {
            return None;
        }
        let word = |w: usize| &bytemuck::cast_slice::<u64, T>(&self.words[w..=w])[..n];
        let own_apart =
            !exact && !self.is_held(at) && !self.is_gradient(at.index) && self.run_row_touched(at);
        let delta = own_apart.then(|| word(at.delta));
        Some((word(at.view), delta))
    }

    /// [`read_with_fast`](Self::read_with_fast) of a run's row, out of line: its view is
    /// lent when it is the row as this worker sees it.
    #[inline(never)]
    fn read_with_run<T: Element, R, F: FnOnce(&[T]) -> R>(
        &mut self,
        step: u32,
        key: RowKey,
        required: Clock,
        (scratch, width): (&mut Vec<u64>, usize),
        f: F,
    ) -> std::result::Result<R, F> {
        let Some((view, delta)) = self.fresh_run_row::<T>(step, key, required, width) else {
            return Err(f);
        };
        let r = match delta {
            None => f(view),
            Some(delta) => {
                let row = scratch_of(scratch, width);
                T::sum_into(row, view, delta);
                f(row)
            }
        };
        self.advance();
        Ok(r)
    }

    /// [`update_fast`](Self::update_fast) when the next step is not a block: a run's row,
    /// out of line.
    #[inline(never)]
    fn update_run<T: Element>(
        &mut self,
        key: RowKey,
        width: usize,
        column: usize,
        delta: &[T],
    ) -> bool {
        let Some(at) = self.next_run_row(key) else {
            return false;
        };
        self.add_to_run(at, width, column, delta);
        self.step_cursor();
        true
    }

    /// [`update_cols_fast`](Self::update_cols_fast) when the next step is not a block: a
    /// run's row, out of line.
    #[inline(never)]
    fn update_cols_run<T: Element>(&mut self, key: RowKey, cols: &[(usize, T)]) -> bool {
        let Some(at) = self.next_run_row(key) else {
            return false;
        };
        if !cols.is_empty() {
            self.add_cols_to_run(at, cols);
        }
        self.step_cursor();
        true
    }

    /// `key`'s row if the next step is that run's row.
    #[inline(always)]
    fn next_run_row(&self, key: RowKey) -> Option<RowAt> {
        let step = *self.steps.get(self.cursor)?;
        if step & (SLOT_STEP | RUN_STEP) != RUN_STEP {
            return None;
        }
        self.run_row(step, key)
    }

    /// The row a step names, if it is `key`'s: a block's first word, its header naming the
    /// row; or with [`RUN_STEP`] a run's row by the run's number and its offset, its id
    /// the header's plus its entry in `blocks`.
    pub(super) fn step_row(&self, step: u32, key: RowKey) -> Option<RowAt> {
        if step & RUN_STEP == 0 {
            let b = step as usize;
            let header = Header::get(&self.words, b)?;
            return header
                .is_key(key)
                .then(|| row_at(&self.words, self.views, b, 0));
        }
        self.run_row(step, key)
    }

    /// [`step_row`](Self::step_row) of a [`RUN_STEP`] step.
    #[inline(always)]
    fn run_row(&self, step: u32, key: RowKey) -> Option<RowAt> {
        let (run, offset) = run_step(step);
        let b = *self.runs.get(run)? as usize;
        let header = Header::get(&self.words, b)?;
        let id = *self.blocks.get(header.index() + offset)? & !RUN_ROW;
        if header.row().wrapping_add(u64::from(id)) != key.row
            || header.table() != key.table
            || offset >= header.run_rows()
        {
            return None;
        }
        Some(run_row_at(header, b, offset, self.views))
    }

    /// Whether a run's row at `at` was updated in this clock (its bit).
    #[inline(always)]
    fn run_row_touched(&self, at: RowAt) -> bool {
        bit(&self.touched, at.index)
    }
}

/// The `n` `T`s starting at word `at` of `words`, without a bounds check.
///
/// # Safety
///
/// `at + padded_words(n * size_of::<T>()) <= words.len()`. (Alignment holds: words are
/// 8-byte aligned and no element type is aligned more; every bit pattern is a `T`.)
#[inline(always)]
unsafe fn row_in<T: Element>(words: &[u64], at: usize, n: usize) -> &[T] {
    const { assert!(align_of::<T>() <= align_of::<u64>()) };
    debug_assert!(at + padded_words(n * size_of::<T>()) <= words.len());
    // SAFETY: in bounds by the caller's contract; `T: Pod` with alignment at most 8.
    unsafe { std::slice::from_raw_parts(words.as_ptr().add(at).cast::<T>(), n) }
}

/// [`row_in`], mutable.
///
/// # Safety
///
/// As for [`row_in`].
#[inline(always)]
unsafe fn row_in_mut<T: Element>(words: &mut [u64], at: usize, n: usize) -> &mut [T] {
    const { assert!(align_of::<T>() <= align_of::<u64>()) };
    debug_assert!(at + padded_words(n * size_of::<T>()) <= words.len());
    // SAFETY: as in `row_in`; the borrow of `words` is unique.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().add(at).cast::<T>(), n) }
}
