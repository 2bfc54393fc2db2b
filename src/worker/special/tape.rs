//! The op tape: a worker's accesses of one iteration as **steps** ([`SpecialWorker::steps`]),
//! each naming a block (its first word), a run's row ([`RUN_STEP`]: the run's number and
//! the row's offset) or a plan slot without a block ([`SLOT_STEP`]); and resolving a key
//! to its [`Place`], from the next step when the worker follows its pattern, else from
//! the plan's index. [`check_steps`] makes sure, once, of the invariant the fast paths
//! read blocks unchecked on.
//!
//! This file knows how steps encode what they name and how a key is found; it reads
//! blocks only through their [`Header`], and knows nothing of views, updates or slabs.

use super::block::{Header, RowAt, HEADER_WORDS};
use super::{Place, SpecialWorker, NONE};
use crate::client::ProcessArena;
use crate::ids::RowKey;
use crate::slot::padded_words;
use crate::table::TableMeta;
use std::sync::Arc;

impl SpecialWorker {
    /// This state's op tape as plan slots (the steps decoded), to rebuild the state from
    /// when it cannot be kept (a run failed with updates of this worker unsent).
    pub(crate) fn into_tape(self) -> (Arc<ProcessArena>, Vec<u32>) {
        let mut tape = self.steps;
        let none: &[u32] = &[];
        let updates = self
            .arena
            .plan
            .updates
            .get(self.worker)
            .map_or(none, Vec::as_slice);
        for step in &mut tape {
            *step = if *step & SLOT_STEP != 0 {
                *step & !SLOT_STEP
            } else if *step & RUN_STEP != 0 {
                let (run, offset) = run_step(*step);
                let b = self.runs[run] as usize;
                updates[Header::at(&self.words, b).index() + offset]
            } else {
                Header::at(&self.words, *step as usize).slot()
            };
        }
        (self.arena, tape)
    }

    /// Where `key` lives: the next step of the pre-resolved access sequence when the
    /// worker is following its pattern (no hashing), else the plan's index.
    #[inline(always)]
    pub(crate) fn place(&mut self, key: RowKey) -> Option<Place> {
        if let Some(&step) = self.steps.get(self.cursor) {
            let hit = if step & SLOT_STEP == 0 {
                self.step_row(step, key).map(|at| Place {
                    slot: self.slot_of(at),
                    block: at.block as u32,
                    offset: at.offset as u32,
                })
            } else {
                let slot = step & !SLOT_STEP;
                let info = self.info(slot);
                (info.key == key).then_some(Place {
                    slot,
                    block: info.block,
                    offset: 0,
                })
            };
            if let Some(place) = hit {
                self.advance();
                return Some(place);
            }
        }
        self.deviate(key)
    }

    /// [`place`](Self::place) of a key off the expected sequence.
    #[cold]
    fn deviate(&mut self, key: RowKey) -> Option<Place> {
        let Some((place, step)) = self.locate(key) else {
            self.counters.unplanned += 1;
            return None;
        };
        self.counters.indexed += 1;
        // Resynchronise if this is where an iteration starts.
        if self.steps.first() == Some(&step) {
            self.move_cursor(1 % self.steps.len());
            // The step just matched was a deviation, not a hit.
            self.tape_hits = self.tape_hits.wrapping_sub(self.cursor as u64);
        }
        Some(place)
    }

    /// Where `key` lives, found in the plan's index (the cursor does not move).
    pub(crate) fn locate_place(&self, key: RowKey) -> Option<Place> {
        self.locate(key).map(|(place, _)| place)
    }

    /// Where `key` lives, found in the plan's index (the cursor does not move), with the
    /// step that names it; `None` if the plan does not hold it.
    pub(super) fn locate(&self, key: RowKey) -> Option<(Place, u32)> {
        let slot = self.arena.slot(key)?;
        let block = self.slots[slot as usize].block;
        let b = block as usize;
        // A run's row: its step, from its index in arena order.
        let run_row = match Header::get(&self.words, b) {
            Some(h) if block != NONE && h.is_run() => {
                let updates = &self.arena.plan.updates[self.worker];
                let index = updates.binary_search(&slot).expect("an updated row");
                Some(run_step_of(h, index))
            }
            _ => None,
        };
        let offset = run_row.map_or(0, |step| run_step(step).1);
        let step = match run_row {
            _ if block == NONE => slot | SLOT_STEP,
            Some(step) => step,
            None => block,
        };
        let place = Place {
            slot,
            block,
            offset: offset as u32,
        };
        Some((place, step))
    }

    /// The plan slot of the row at `at`.
    pub(super) fn slot_of(&self, at: RowAt) -> u32 {
        let header = Header::at(&self.words, at.block);
        if !header.is_run() {
            return header.slot();
        }
        self.arena.plan.updates[self.worker][at.index]
    }
}

/// Marks a step that names a plan slot (a row without a block) instead of a block.
pub(super) const SLOT_STEP: u32 = 1 << 31;

/// Marks a step that names a row of a run, as `run << RUN_SHIFT | offset` ([`SpecialWorker::runs`]),
/// instead of a block's first word.
pub(super) const RUN_STEP: u32 = 1 << 30;

/// Bits of a run step's offset.
pub(super) const RUN_SHIFT: u32 = 6;

/// The most rows one run holds.
pub(super) const MAX_RUN: usize = 1 << RUN_SHIFT;

/// A run step's run and the row's offset in it.
#[inline(always)]
pub(super) fn run_step(step: u32) -> (usize, usize) {
    let step = step & !RUN_STEP;
    (
        (step >> RUN_SHIFT) as usize,
        (step as usize) & (MAX_RUN - 1),
    )
}

/// The step naming row `index` (in arena order) of the run whose block has `header`: its
/// run's number and its offset.
pub(super) fn run_step_of(header: Header<'_>, index: usize) -> u32 {
    let (run, first) = (header.run() as u32, header.index() as u32);
    RUN_STEP | run << RUN_SHIFT | (index as u32 - first)
}

/// Checks the invariant of [`SpecialWorker::steps`]: every block step of `steps` is the first
/// word of a one-row block of `words` whose header, and rows (`rows_per`: the delta,
/// and the view with views on) of its table's row size, lie inside `words`. The blocks
/// are laid out so; this makes sure of it once, since `read_update_fast` reads them
/// unchecked (a failure is a bug in the layout, not in anything a user gave).
pub(super) fn check_steps(steps: &[u32], words: &[u64], rows_per: usize, tables: &[TableMeta]) {
    for &step in steps.iter().filter(|&&s| s < RUN_STEP) {
        let b = step as usize;
        let whole = Header::get(words, b).is_some_and(|header| {
            let (len, rows) = header.shape();
            let table = tables.get(header.table() as usize);
            !header.is_run()
                && rows == 1
                && table.is_some_and(|t| t.row_bytes() == len)
                && b + HEADER_WORDS + padded_words(len) * rows_per <= words.len()
        });
        assert!(
            whole,
            "op tape step {b} is not a whole block of the worker's buffer"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::{check_steps, RUN_STEP, SLOT_STEP};
    use crate::element::ElemType;
    use crate::ids::RowKey;
    use crate::table::TableMeta;
    use crate::worker::special::block::{Header, HEADER_WORDS};

    #[test]
    fn op_tape_steps_must_name_whole_blocks_of_their_tables_row_size() {
        // Table 0: three f32s a row (12 bytes, two words padded).
        let tables = [TableMeta {
            id: 0,
            name: "t".into(),
            width: 3,
            elem: ElemType::F32,
            rows: None,
            rule: crate::rule::Rule::Sum,
        }];
        let key = |table| RowKey { table, row: 7 };
        let header = |table, len| Header::for_row(key(table), 0, 0, len);
        // A block at word 0: header, view and delta of two words each.
        let mut words = header(0, 12).to_vec();
        words.resize(HEADER_WORDS + 4, 0);
        // Slot steps and run steps are not blocks and are not looked at.
        check_steps(&[0, 0, RUN_STEP + 5, SLOT_STEP | 3], &words, 2, &tables);
        let refused = |steps: &[u32], words: &[u64], rows_per: usize| {
            let check = || check_steps(steps, words, rows_per, &tables);
            std::panic::catch_unwind(check).is_err()
        };
        assert!(!refused(&[0], &words, 2));
        assert!(refused(&[1], &words, 2), "a step inside a block");
        assert!(
            refused(&[0], &words[..HEADER_WORDS + 3], 2),
            "a block cut short"
        );
        assert!(refused(&[0], &words, 3), "rows beyond the buffer");
        let mut wrong_size = words.clone();
        wrong_size[..HEADER_WORDS].copy_from_slice(&header(0, 8));
        assert!(refused(&[0], &wrong_size, 2), "a row size not its table's");
        let mut unknown = words.clone();
        unknown[..HEADER_WORDS].copy_from_slice(&header(1, 12));
        assert!(refused(&[0], &unknown, 2), "a table that does not exist");
        let mut run = words.clone();
        run[..HEADER_WORDS].copy_from_slice(&Header::for_run(key(0), 0, 0, 12, 1));
        assert!(refused(&[0], &run, 2), "a run's block");
    }
}
