//! The bytes of a CLOCK's slabs by table ([`SlabTables`]), for
//! `Cluster::update_bytes`: a slab is per shard, and may hold rows of several tables.
//!
//! The rows with a block lie in arena order in runs of one table (grouped by shard and
//! chunk), so a table is kept per run of rows, not per row: the bookkeeping of narrow
//! rows stays below their data. A whole slab's bytes per table are fixed by the plan and
//! counted when the worker is built; a sparse slab's are its rows' deltas and 4-byte
//! positions, found by walking the runs alongside its ascending positions. It knows the
//! slabs' sizes, not their contents.

use super::slabs::Slab;
use super::SpecialWorker;
use crate::ids::TableId;
use crate::worker::outer::tally;
use std::ops::Range;

/// Rows `start..` (up to the next run's start) with a block, of `table`, each sending
/// `bytes` (its padded delta) in a slab.
#[derive(Debug, Clone, Copy)]
struct TableRun {
    start: usize,
    table: TableId,
    bytes: usize,
}

/// Which table the rows with a block are of, and what a slab of them sends per table.
#[derive(Debug, Default)]
pub(super) struct SlabTables {
    /// The runs of rows of one table, in arena order; the first starts at row 0.
    runs: Vec<TableRun>,
    /// Per shard: the bytes per table of its whole slab.
    whole: Vec<Vec<(TableId, u64)>>,
}

impl SlabTables {
    /// An empty map, to which rows are [`push`](Self::push)ed in arena order.
    pub(super) fn new() -> Self {
        SlabTables::default()
    }

    /// Row `row` (the next in arena order) is of `table` and sends `bytes` in a slab.
    pub(super) fn push(&mut self, row: usize, table: TableId, bytes: usize) {
        match self.runs.last() {
            Some(r) if r.table == table && r.bytes == bytes => {}
            _ => self.runs.push(TableRun {
                start: row,
                table,
                bytes,
            }),
        }
    }

    /// Done pushing: each shard's whole slab by table, `shards` its rows (ranges of rows
    /// in arena order).
    pub(super) fn finish(&mut self, shards: &[Range<usize>]) {
        self.runs.shrink_to_fit();
        self.whole = (shards.iter())
            .map(|range| {
                let mut per_table = Vec::new();
                for (i, run) in self.runs.iter().enumerate() {
                    let end = self.runs.get(i + 1).map_or(usize::MAX, |n| n.start);
                    let rows = end
                        .min(range.end)
                        .saturating_sub(run.start.max(range.start));
                    if rows > 0 {
                        tally(&mut per_table, run.table, rows * run.bytes);
                    }
                }
                per_table
            })
            .collect();
    }

    /// Bytes it holds.
    pub(super) fn memory(&self) -> usize {
        let whole: usize = self.whole.iter().map(Vec::capacity).sum();
        self.runs.capacity() * size_of::<TableRun>() + whole * size_of::<(TableId, u64)>()
    }

    /// Adds the bytes `slab`, this worker's for shard `shard` whose rows start at row
    /// `start`, sends per table to `sent`.
    fn tally(&self, shard: usize, start: usize, slab: &Slab, sent: &mut Vec<(TableId, u64)>) {
        match &slab.rows {
            None if !slab.bytes.is_empty() => {
                for &(table, bytes) in self.whole.get(shard).map_or(&[][..], Vec::as_slice) {
                    tally(sent, table, bytes as usize);
                }
            }
            None => {}
            Some(positions) => {
                // Positions ascend: the run of each row is at or after the last one's.
                let first = positions.first().map_or(0, |&p| start + p as usize);
                let mut run = self.runs.partition_point(|r| r.start <= first);
                for &p in positions {
                    let row = start + p as usize;
                    while self.runs.get(run).is_some_and(|r| r.start <= row) {
                        run += 1;
                    }
                    if let Some(r) = run.checked_sub(1).and_then(|i| self.runs.get(i)) {
                        tally(sent, r.table, 4 + r.bytes);
                    }
                }
            }
        }
    }
}

impl SpecialWorker {
    /// Adds the bytes `slabs` (one per shard, as [`take_slabs`](Self::take_slabs) made
    /// them) send per table to `sent`: each row's padded delta, and for a sparse slab its
    /// 4-byte position too.
    pub(crate) fn tally_slabs(&self, slabs: &[Slab], sent: &mut Vec<(TableId, u64)>) {
        for (shard, slab) in slabs.iter().enumerate() {
            let start = self.shard_blocks.get(shard).map_or(0, |r| r.start);
            self.slab_tables.tally(shard, start, slab, sent);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::AlignedBuf;

    #[test]
    fn runs_of_tables_give_each_slab_its_bytes_by_table() {
        // Rows 0..3 of table 1 (8 bytes), 3..5 of table 2 (64), 5..6 of table 1 again.
        let mut t = SlabTables::new();
        for (row, table, bytes) in [(0, 1, 8), (1, 1, 8), (2, 1, 8), (3, 2, 64), (4, 2, 64)] {
            t.push(row, table, bytes);
        }
        t.push(5, 1, 8);
        assert_eq!(t.runs.len(), 3);
        t.finish(&[0..4, 4..6]);
        assert_eq!(t.whole, vec![vec![(1, 24), (2, 64)], vec![(2, 64), (1, 8)]]);
        let slab = |rows: Option<Vec<u32>>| Slab {
            bytes: AlignedBuf::from_slice(&[0i64]),
            rows,
        };
        let mut sent = Vec::new();
        t.tally(0, 0, &slab(None), &mut sent);
        assert_eq!(sent, vec![(1, 24), (2, 64)]);
        let mut sent = Vec::new();
        t.tally(0, 0, &slab(Some(vec![1, 3])), &mut sent);
        t.tally(1, 4, &slab(Some(vec![0, 1])), &mut sent);
        assert_eq!(sent, vec![(1, 12 + 12), (2, 68 + 68)]);
    }
}
