//! The fast paths of [`Special`]: a READ, `read_with` or UPDATE that follows the pattern
//! finds its block (or plan slot) as the next step of the pre-resolved access sequence,
//! checks the key there and does its work in that block, prefetching the blocks a few
//! steps ahead. Each returns without side effects when it cannot serve the access, so the
//! caller can take the general path.

use super::{Special, AHEAD, HEADER_WORDS, NONE, SLOT_STEP, TOUCHED};
use crate::consistency::Clock;
use crate::prefetch::prefetch;
use crate::server::padded;
use crate::{Element, RowKey};

impl Special {
    /// The fast path of a READ that follows the pattern: if the next step is `key`'s block
    /// and its view is fresh enough for `required`, copies the row as this worker sees it
    /// into `dst` (the table's width) and returns `true`. Otherwise changes nothing and
    /// returns `false`: the caller takes the general path. `no_generic_updates`: the
    /// worker's generic log holds no updates (of this clock or of recent ones) that a row
    /// without a block might need added.
    #[inline(always)]
    pub(crate) fn read_fast<T: Element>(
        &mut self,
        key: RowKey,
        required: Clock,
        no_generic_updates: bool,
        dst: &mut [T],
    ) -> bool {
        let Some(&step) = self.steps.get(self.cursor) else {
            return false;
        };
        if step & SLOT_STEP != 0 {
            return no_generic_updates
                && self.read_slot_fast(step & !SLOT_STEP, key, required, dst);
        }
        let exact = T::TYPE.exact();
        if !self.views || (!exact && !self.recent.is_empty()) {
            return false;
        }
        let (b, n) = (step as usize, dst.len());
        let row_words = padded(size_of_val(dst)) / 8;
        let Some(block) = self.words.get(b..b + HEADER_WORDS + 2 * row_words) else {
            return false;
        };
        let clock = block[2];
        if block[0] != key.row || block[1] as u32 != key.table || clock == Clock::MAX {
            return false;
        }
        if clock < required {
            return false;
        }
        let (view, delta) = block[HEADER_WORDS..].split_at(row_words);
        let view = &bytemuck::cast_slice::<u64, T>(view)[..n];
        if !exact && block[1] & TOUCHED != 0 {
            // Floats: the snapshot plus this clock's delta, in one pass (integer views
            // already hold this worker's updates).
            T::sum_into(dst, view, &bytemuck::cast_slice::<u64, T>(delta)[..n]);
        } else {
            dst.copy_from_slice(view);
        }
        self.advance();
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
        let Some(info) = self.slots.get(slot as usize) else {
            return false;
        };
        if info.key != key || info.block != NONE {
            return false;
        }
        let dst: &mut [u8] = bytemuck::cast_slice_mut(dst);
        let fresh = if info.copy == NONE {
            self.arena
                .read_at(info.chunk, info.word, required, dst)
                .is_some()
        } else {
            let r = info.copy as usize;
            let clock = self.copies.clocks[r];
            let fresh = clock != Clock::MAX && clock >= required;
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
    /// `scratch` (the table's width). Gives `f` back if it could not take the fast path.
    ///
    /// [`Worker::read_with`]: super::Worker::read_with
    #[inline(always)]
    pub(crate) fn read_with_fast<T: Element, R, F: FnOnce(&[T]) -> R>(
        &mut self,
        key: RowKey,
        required: Clock,
        no_generic_updates: bool,
        scratch: &mut [T],
        f: F,
    ) -> std::result::Result<R, F> {
        let Some(&step) = self.steps.get(self.cursor) else {
            return Err(f);
        };
        if step & SLOT_STEP != 0 {
            if no_generic_updates && self.read_slot_fast(step & !SLOT_STEP, key, required, scratch)
            {
                return Ok(f(scratch));
            }
            return Err(f);
        }
        let exact = T::TYPE.exact();
        if !self.views || (!exact && !self.recent.is_empty()) {
            return Err(f);
        }
        let (b, n) = (step as usize, scratch.len());
        let row_words = padded(size_of_val(scratch)) / 8;
        let end = b + HEADER_WORDS + 2 * row_words;
        let Some(block) = self.words.get(b..end) else {
            return Err(f);
        };
        let clock = block[2];
        if block[0] != key.row || block[1] as u32 != key.table || clock == Clock::MAX {
            return Err(f);
        }
        if clock < required {
            return Err(f);
        }
        let add_delta = !exact && block[1] & TOUCHED != 0;
        self.advance();
        let (view, delta) = self.words[b + HEADER_WORDS..end].split_at(row_words);
        let view = &bytemuck::cast_slice::<u64, T>(view)[..n];
        if add_delta {
            T::sum_into(scratch, view, &bytemuck::cast_slice::<u64, T>(delta)[..n]);
            Ok(f(scratch))
        } else {
            Ok(f(view))
        }
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
        let Some(&step) = self.steps.get(self.cursor) else {
            return false;
        };
        if step & SLOT_STEP != 0 {
            return false;
        }
        let (b, n) = (step as usize, width);
        let cols = column..column + delta.len();
        let row_words = padded(width * size_of::<T>()) / 8;
        let view_words = if self.views { row_words } else { 0 };
        let Some(block) = self
            .words
            .get_mut(b..b + HEADER_WORDS + view_words + row_words)
        else {
            return false;
        };
        if block[0] != key.row || block[1] as u32 != key.table {
            return false;
        }
        let (header, rows) = block.split_at_mut(HEADER_WORDS);
        let (view, row) = rows.split_at_mut(view_words);
        if T::TYPE.exact() && self.views && header[2] != Clock::MAX {
            T::add_slice(
                &mut bytemuck::cast_slice_mut::<u64, T>(view)[cols.clone()],
                delta,
            );
        }
        let row = &mut bytemuck::cast_slice_mut::<u64, T>(row)[..n];
        if header[1] & TOUCHED == 0 {
            // First update of the clock: the delta is the value (as the generic log does).
            header[1] |= TOUCHED;
            self.dirty += 1;
            if delta.len() == n {
                row.copy_from_slice(delta);
            } else {
                row.fill(T::default());
                T::add_slice(&mut row[cols], delta);
            }
        } else {
            T::add_slice(&mut row[cols], delta);
        }
        self.advance();
        true
    }

    /// Moves to the next step and prefetches what a step [`AHEAD`] will touch.
    #[inline(always)]
    pub(super) fn advance(&mut self) {
        self.cursor += 1;
        if self.cursor == self.steps.len() {
            self.cursor = 0; // the next iteration starts over
        }
        if let Some(&ahead) = self.steps.get(self.cursor + AHEAD) {
            if ahead & SLOT_STEP == 0 {
                let b = ahead as usize;
                for line in [b, b + 8, b + 16] {
                    if let Some(w) = self.words.get(line) {
                        prefetch(w);
                    }
                }
            } else if let Some(info) = self.slots.get((ahead & !SLOT_STEP) as usize) {
                self.arena.prefetch(info.word);
            }
        }
    }
}
