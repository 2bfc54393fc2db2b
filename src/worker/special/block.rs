//! The block format: what a worker's `words` hold for a row it updates (or a run of
//! narrow rows), and where in a block each part lies.
//!
//! A block is a header of [`HEADER_WORDS`] words, then its rows' views (with views on)
//! and then their deltas, each row `padded_words(len)` words. The header's words and bit
//! fields are read only through [`Header`], written only through [`Header::for_row`],
//! [`Header::for_run`] and [`HeaderMut`]; where a block's views and deltas start is
//! computed only here. Every accessor is `#[inline(always)]` and a plain load and shift,
//! so the fast paths (`fast.rs`) compile to the loads a raw decode would.
//!
//! This file knows the format and nothing else: not the op tape's steps, the plan, the
//! arena, the slabs or which rows are touched or held.

use crate::element::Element;
use crate::ids::{Clock, RowKey, TableId};
use crate::slot::padded_words;
use std::ops::Range;

/// Words (8 bytes) of a block header:
///
/// | word | bits    | a row's block                 | a run's block                    |
/// |------|---------|-------------------------------|----------------------------------|
/// | 0    | all     | the row's id                  | its first row's id               |
/// | 1    | 0..32   | the table                     | the table                        |
/// | 1    | 33      | 0                             | 1 (`RUN`)                        |
/// | 1    | 34..    | the row's index               | its first row's index            |
/// | 2    | all     | the view's data clock, or [`NO_VIEW`] | its views' data clock, or [`NO_VIEW`] |
/// | 3    | 0..32   | the row's plan slot           | the run's number                 |
/// | 3    | 32..    | the row's size in bytes       | 32..48 row size, 48.. its rows   |
///
/// A row's *index* is its position in the worker's arena order: its bit in
/// [`SpecialWorker::touched`](super::SpecialWorker) (updated in this clock) and in `dirty`. A run's
/// rows have consecutive indices from its first's.
pub(super) const HEADER_WORDS: usize = 4;
/// Header word of the row's id.
const ROW: usize = 0;
/// Header word of the table, the run flag and the index.
const TABLE: usize = 1;
/// Header word of the view's data clock.
const VIEW_CLOCK: usize = 2;
/// Header word of the slot or run number, and the size (and a run's rows).
const SHAPE: usize = 3;
/// The flag of a run's block in its header's [`TABLE`] word.
const RUN: u64 = 1 << 33;
/// Where the index starts in the header's [`TABLE`] word.
const INDEX_SHIFT: u32 = 34;
/// Where the row's size in bytes starts in the header's [`SHAPE`] word.
const LEN_SHIFT: u32 = 32;
/// Where a run's number of rows starts in its header's [`SHAPE`] word (its row size takes
/// the 16 bits below).
const COUNT_SHIFT: u32 = 48;

/// The data clock of a view that holds no snapshot: never filled, or marked stale (a
/// held row's view after a CLOCK under SSP). Also a private copy's before its first fill.
pub(super) const NO_VIEW: Clock = Clock::MAX;

/// A block's header, read in place (see [`HEADER_WORDS`] for its words).
///
/// It holds the words and the block's first word, and each getter indexes the one word
/// it reads, `words[b + i]`: a getter compiles to the load (and, where the compiler does
/// not know the length, the bounds check) of a raw decode, so the fast paths' code is
/// what it was with raw offsets.
#[derive(Debug, Clone, Copy)]
pub(super) struct Header<'a> {
    words: &'a [u64],
    b: usize,
}

impl<'a> Header<'a> {
    /// The header at the start of `block` (a block's words, or its header's). A getter
    /// panics if `block` ends before the word it reads.
    #[inline(always)]
    pub(super) fn of(block: &'a [u64]) -> Self {
        Header { words: block, b: 0 }
    }

    /// The header of the block at word `b` of `words`. A getter panics if the word it
    /// reads is beyond `words` (as `words[b + i]` would).
    #[inline(always)]
    pub(super) fn at(words: &'a [u64], b: usize) -> Self {
        Header { words, b }
    }

    /// The header of the block at word `b` of `words`, `None` if it does not lie inside.
    #[inline(always)]
    pub(super) fn get(words: &'a [u64], b: usize) -> Option<Self> {
        words.get(b..b + HEADER_WORDS).map(Self::of)
    }

    /// [`get`](Self::get) without a bounds check.
    ///
    /// # Safety
    ///
    /// `b + HEADER_WORDS <= words.len()`.
    #[inline(always)]
    pub(super) unsafe fn at_unchecked(words: &'a [u64], b: usize) -> Self {
        debug_assert!(b + HEADER_WORDS <= words.len());
        // SAFETY: the header's words lie inside `words` (the caller's contract).
        Self::of(unsafe { words.get_unchecked(b..b + HEADER_WORDS) })
    }

    /// The header of a block of one row: `key`'s, at `index` in arena order, of plan slot
    /// `slot` and `len` bytes, its view not filled.
    #[inline]
    pub(super) fn for_row(key: RowKey, index: usize, slot: u32, len: usize) -> [u64; HEADER_WORDS] {
        [
            key.row,
            u64::from(key.table) | (index as u64) << INDEX_SHIFT,
            NO_VIEW,
            u64::from(slot) | (len as u64) << LEN_SHIFT,
        ]
    }

    /// The header of a run of `rows` rows of `len` bytes (below 2^16) from `first` (its
    /// first row's key) at `index` in arena order, the worker's run number `run`, its
    /// views not filled.
    #[inline]
    pub(super) fn for_run(
        first: RowKey,
        index: usize,
        run: usize,
        len: usize,
        rows: usize,
    ) -> [u64; HEADER_WORDS] {
        [
            first.row,
            u64::from(first.table) | RUN | (index as u64) << INDEX_SHIFT,
            NO_VIEW,
            run as u64 | (rows as u64) << COUNT_SHIFT | (len as u64) << LEN_SHIFT,
        ]
    }

    /// Header word `i`.
    #[inline(always)]
    fn word(self, i: usize) -> u64 {
        self.words[self.b + i]
    }

    /// The row's id (a run's first row's).
    #[inline(always)]
    pub(super) fn row(self) -> u64 {
        self.word(ROW)
    }

    /// The table.
    #[inline(always)]
    pub(super) fn table(self) -> TableId {
        self.word(TABLE) as TableId
    }

    /// Whether the block is `key`'s row (a run's: its first row is `key`).
    #[inline(always)]
    pub(super) fn is_key(self, key: RowKey) -> bool {
        self.row() == key.row && self.table() == key.table
    }

    /// Whether the block is a run's.
    #[inline(always)]
    pub(super) fn is_run(self) -> bool {
        self.word(TABLE) & RUN != 0
    }

    /// The row's index in arena order (a run's first row's).
    #[inline(always)]
    pub(super) fn index(self) -> usize {
        (self.word(TABLE) >> INDEX_SHIFT) as usize
    }

    /// The data clock of the block's views, [`NO_VIEW`] if they hold no snapshot.
    #[inline(always)]
    pub(super) fn view_clock(self) -> Clock {
        self.word(VIEW_CLOCK)
    }

    /// Whether the block's views hold a snapshot.
    #[inline(always)]
    pub(super) fn has_view(self) -> bool {
        self.view_clock() != NO_VIEW
    }

    /// Whether the block's views hold a snapshot with data clock `>= required`.
    #[inline(always)]
    pub(super) fn view_fresh(self, required: Clock) -> bool {
        let clock = self.view_clock();
        clock != NO_VIEW && clock >= required
    }

    /// The plan slot of a one-row block's row.
    #[inline(always)]
    pub(super) fn slot(self) -> u32 {
        self.word(SHAPE) as u32
    }

    /// The worker's number of a run's block.
    #[inline(always)]
    pub(super) fn run(self) -> usize {
        self.word(SHAPE) as u32 as usize
    }

    /// The size in bytes of a one-row block's row (a run's: [`shape`](Self::shape)).
    #[inline(always)]
    pub(super) fn len_bytes(self) -> usize {
        (self.word(SHAPE) >> LEN_SHIFT) as usize
    }

    /// The number of rows of a run's block (a one-row block's: [`shape`](Self::shape)).
    #[inline(always)]
    pub(super) fn run_rows(self) -> usize {
        (self.word(SHAPE) >> COUNT_SHIFT) as usize
    }

    /// The size in bytes of each of the block's rows, and their number (one but in a run).
    #[inline(always)]
    pub(super) fn shape(self) -> (usize, usize) {
        let last = self.word(SHAPE);
        if !self.is_run() {
            ((last >> LEN_SHIFT) as usize, 1)
        } else {
            (
                ((last >> LEN_SHIFT) & 0xffff) as usize,
                (last >> COUNT_SHIFT) as usize,
            )
        }
    }
}

/// A block's header, to write its view's data clock.
pub(super) struct HeaderMut<'a>(&'a mut u64);

impl<'a> HeaderMut<'a> {
    /// The header of the block at word `b` of `words`.
    ///
    /// # Panics
    ///
    /// If its view clock's word is beyond `words`.
    #[inline(always)]
    pub(super) fn at(words: &'a mut [u64], b: usize) -> Self {
        HeaderMut(&mut words[b + VIEW_CLOCK])
    }

    /// Records that the block's views hold a snapshot at data clock `clock`.
    #[inline(always)]
    pub(super) fn set_view_clock(self, clock: Clock) {
        *self.0 = clock;
    }

    /// Marks the block's views as holding no snapshot: the next read refills them.
    #[inline(always)]
    pub(super) fn clear_view(self) {
        *self.0 = NO_VIEW;
    }
}

/// Where one row of a block is: the block, the row's index in arena order and the first
/// words of its view and of its delta.
#[derive(Debug, Clone, Copy)]
pub(super) struct RowAt {
    pub(super) block: usize,
    /// The row's index in arena order.
    pub(super) index: usize,
    /// The row's offset in its block (0 but in a run).
    pub(super) offset: usize,
    pub(super) view: usize,
    pub(super) delta: usize,
}

/// The words of a block of `count` rows of `len` bytes each, with views if `views`.
#[inline(always)]
pub(super) fn block_len(len: usize, count: usize, views: bool) -> usize {
    HEADER_WORDS + padded_words(len) * (1 + usize::from(views)) * count
}

/// The first words of the views and of the deltas of the block at word `b` whose rows
/// take `words` words (a run's rows one after the other, then their deltas).
#[inline(always)]
pub(super) fn rows_at(b: usize, words: usize, views: bool) -> (usize, usize) {
    let view = b + HEADER_WORDS;
    (view, view + if views { words } else { 0 })
}

/// The words of the views and of the deltas of the block at word `b` of `words` (all its
/// rows'), whose blocks hold views if `views`.
#[inline(always)]
pub(super) fn block_parts(words: &[u64], views: bool, b: usize) -> (Range<usize>, Range<usize>) {
    let (len, count) = Header::at(words, b).shape();
    let n = padded_words(len) * count;
    let (view, delta) = rows_at(b, n, views);
    (view..view + n, delta..delta + n)
}

/// Row `offset` of the block at word `b` of `words` (0 but in a run).
#[inline(always)]
pub(super) fn row_at(words: &[u64], views: bool, b: usize, offset: usize) -> RowAt {
    let header = Header::at(words, b);
    let (len, count) = header.shape();
    let row_words = padded_words(len);
    let (views_at, deltas_at) = rows_at(b, count * row_words, views);
    RowAt {
        block: b,
        index: header.index() + offset,
        offset,
        view: views_at + offset * row_words,
        delta: deltas_at + offset * row_words,
    }
}

/// Row `offset` of the run at word `b` whose header is `header` (rows of one word each:
/// its views, then its deltas).
#[inline(always)]
pub(super) fn run_row_at(header: Header<'_>, b: usize, offset: usize, views: bool) -> RowAt {
    let (views_at, deltas_at) = rows_at(b, header.run_rows(), views);
    RowAt {
        block: b,
        index: header.index() + offset,
        offset,
        view: views_at + offset,
        delta: deltas_at + offset,
    }
}

/// Where the block at word `b` of a worker's words lies: a row of `width` `T`s, its
/// header, its view if `views`, its delta.
#[inline(always)]
pub(super) fn block_span<T: Element>(b: usize, width: usize, views: bool) -> Range<usize> {
    let row_words = padded_words(width * size_of::<T>());
    let view_words = if views { row_words } else { 0 };
    b..b + HEADER_WORDS + view_words + row_words
}

/// The words of the block at word `b` of `words` ([`block_span`]).
#[inline(always)]
pub(super) fn block_words<T: Element>(
    words: &mut [u64],
    views: bool,
    b: usize,
    width: usize,
) -> &mut [u64] {
    &mut words[block_span::<T>(b, width, views)]
}

/// A block's words ([`block_words`]) as its header, its view (empty without views) and
/// its delta row of `width` `T`s.
#[inline(always)]
pub(super) fn split_block<T: Element>(
    block: &mut [u64],
    views: bool,
    width: usize,
) -> (Header<'_>, &mut [u64], &mut [T]) {
    let row_words = padded_words(width * size_of::<T>());
    let view_words = if views { row_words } else { 0 };
    let (header, rows) = block.split_at_mut(HEADER_WORDS);
    let (view, row) = rows.split_at_mut(view_words);
    (
        Header::of(header),
        view,
        &mut bytemuck::cast_slice_mut::<u64, T>(row)[..width],
    )
}

#[cfg(test)]
mod tests {
    use super::{block_parts, row_at, Header, HEADER_WORDS, NO_VIEW};
    use crate::ids::RowKey;

    #[test]
    fn a_header_reads_back_what_it_was_built_with() {
        let key = RowKey {
            table: 3,
            row: u64::MAX - 1,
        };
        let words = Header::for_row(key, 1 << 29, 77, 4000);
        let h = Header::of(&words);
        assert!(h.is_key(key) && !h.is_run() && !h.has_view());
        assert_eq!((h.index(), h.slot(), h.len_bytes()), (1 << 29, 77, 4000));
        assert_eq!((h.shape(), h.view_clock()), ((4000, 1), NO_VIEW));
        assert!(!h.view_fresh(0));

        let words = Header::for_run(key, 5, 1 << 23, 8, 64);
        let h = Header::of(&words);
        assert!(h.is_key(key) && h.is_run());
        assert_eq!((h.index(), h.run(), h.run_rows()), (5, 1 << 23, 64));
        assert_eq!(h.shape(), (8, 64));
    }

    #[test]
    fn a_view_is_fresh_from_its_clock_on() {
        let key = RowKey { table: 0, row: 9 };
        let mut words = Header::for_row(key, 0, 0, 8).to_vec();
        super::HeaderMut::at(&mut words, 0).set_view_clock(4);
        let h = Header::of(&words);
        assert!(h.has_view() && h.view_fresh(4) && !h.view_fresh(5));
        super::HeaderMut::at(&mut words, 0).clear_view();
        assert!(!Header::of(&words).has_view());
    }

    #[test]
    fn a_run_s_views_come_before_its_deltas() {
        let key = RowKey { table: 0, row: 9 };
        let mut words = Header::for_run(key, 10, 0, 4, 3).to_vec();
        words.resize(HEADER_WORDS + 6, 0);
        let (view, delta) = block_parts(&words, true, 0);
        assert_eq!((view, delta), (4..7, 7..10));
        let at = row_at(&words, true, 0, 2);
        assert_eq!((at.index, at.view, at.delta), (12, 6, 9));
        let at = row_at(&words, false, 0, 2);
        assert_eq!((at.view, at.delta), (6, 6));
    }
}
