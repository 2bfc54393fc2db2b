//! Gathering the access pattern: what each worker reads and updates in one iteration.
//!
//! While recording, a worker summarises every READ and UPDATE as it happens into an
//! [`AccessLog`]: one entry per distinct row (its key, first use and counts) and one
//! 4-byte local row number per access, nothing more (the pattern of an iteration of 18 M
//! accesses is 72 MB per process, not the 430 MB a log of keys would take).
//! [`AccessPattern::from_logs`] merges the logs of all workers into one summary per row —
//! who reads it, who updates it, how often, and when it is first used — and rewrites each
//! worker's access numbers in place into indices of those rows. The planner turns the
//! summary into specialized structures and takes the sequences
//! ([`AccessPattern::take_sequences`]) to resolve them into op tapes, so nothing per access
//! is kept twice. This module only summarises; it decides nothing.

use crate::ids::RowKey;
use rustc_hash::FxHashMap;

/// What an access did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Access {
    /// A READ.
    Read,
    /// An UPDATE (dense or single-column).
    Update,
}

/// One distinct row of one worker's log.
#[derive(Debug, Clone, Copy)]
struct LocalRow {
    key: RowKey,
    /// Position of the row's first access in this worker's log.
    first_use: u64,
    reads: u32,
    updates: u32,
    /// Bit `c mod 64` set if the row is read in the log's clock `c`.
    read_phases: u64,
}

/// The operations one worker performed while recording, summarised as they happen (see
/// the module docs).
#[derive(Debug, Clone, Default)]
pub(crate) struct AccessLog {
    /// Key -> local row number.
    local: FxHashMap<RowKey, u32>,
    /// Per local row number: the row and how this worker used it.
    rows: Vec<LocalRow>,
    /// Local row number of each access, in program order.
    events: Vec<u32>,
    /// Number of CLOCK calls recorded.
    pub(crate) clocks: u64,
}

impl AccessLog {
    /// Logs one access of `key`.
    pub(crate) fn record(&mut self, key: RowKey, access: Access) {
        let next = self.rows.len() as u32;
        let id = *self.local.entry(key).or_insert(next);
        if id == next {
            self.rows.push(LocalRow {
                key,
                first_use: self.events.len() as u64,
                reads: 0,
                updates: 0,
                read_phases: 0,
            });
        }
        let row = &mut self.rows[id as usize];
        match access {
            Access::Read => {
                row.reads = row.reads.saturating_add(1);
                row.read_phases |= phase_bit(self.clocks);
            }
            Access::Update => row.updates = row.updates.saturating_add(1),
        }
        self.events.push(id);
    }

    /// Bytes this log holds (its buffers' capacity).
    pub(crate) fn bytes(&self) -> usize {
        self.events.capacity() * 4
            + self.rows.capacity() * size_of::<LocalRow>()
            + map_bytes(self.local.capacity(), size_of::<(RowKey, u32)>())
    }
}

/// The bit of [`RowUse::read_phases`] for the iteration's clock `clock` (0-based).
#[inline]
pub(crate) fn phase_bit(clock: u64) -> u64 {
    1 << (clock % 64)
}

/// How the workers use one row during an iteration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowUse {
    /// The row.
    pub key: RowKey,
    /// Position of the row's earliest access in any worker's log (smaller = needed earlier).
    pub first_use: u64,
    /// `(worker, number of READs)` for each worker that reads the row, by worker.
    pub readers: Vec<(u32, u32)>,
    /// `(worker, number of UPDATEs)` for each worker that updates the row, by worker.
    pub updaters: Vec<(u32, u32)>,
    /// The clocks of the iteration in which some worker reads the row: bit `c mod 64` for
    /// the iteration's `c`-th clock (0-based). The refresh before a clock brings only the
    /// rows read in it.
    pub read_phases: u64,
}

impl RowUse {
    /// Workers that touch the row at all (read or update), ascending.
    pub fn workers(&self) -> Vec<u32> {
        let mut w: Vec<u32> = self
            .readers
            .iter()
            .chain(&self.updaters)
            .map(|(w, _)| *w)
            .collect();
        w.sort_unstable();
        w.dedup();
        w
    }

    /// Total accesses (reads and updates) of the row per iteration.
    pub fn accesses(&self) -> u64 {
        self.readers
            .iter()
            .chain(&self.updaters)
            .map(|(_, n)| u64::from(*n))
            .sum()
    }
}

/// The access pattern of one iteration of every worker: a summary per row, and (until the
/// planner takes them) each worker's accesses in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessPattern {
    workers: usize,
    clocks: u64,
    accesses: u64,
    rows: Vec<RowUse>,
    index: FxHashMap<RowKey, usize>,
    /// Per worker: the index in `rows` of each access, in program order.
    sequences: Vec<Vec<u32>>,
}

impl AccessPattern {
    /// Merges per-worker logs (`logs[w]` is worker `w`'s), consuming them: each log's
    /// per-access buffer becomes the worker's sequence, rewritten in place. Rows come out
    /// sorted by first use, ties broken by key, so the result does not depend on thread
    /// timing.
    pub(crate) fn from_logs(logs: Vec<AccessLog>) -> Self {
        let mut index: FxHashMap<RowKey, usize> = FxHashMap::default();
        let mut rows: Vec<RowUse> = Vec::new();
        // Per worker: local row number -> merged row (before sorting).
        let mut merged: Vec<Vec<u32>> = Vec::with_capacity(logs.len());
        for (w, log) in logs.iter().enumerate() {
            let w = w as u32;
            let mut to_row = Vec::with_capacity(log.rows.len());
            for local in &log.rows {
                let i = *index.entry(local.key).or_insert_with(|| {
                    rows.push(RowUse {
                        key: local.key,
                        first_use: local.first_use,
                        readers: Vec::new(),
                        updaters: Vec::new(),
                        read_phases: 0,
                    });
                    rows.len() - 1
                });
                let row = &mut rows[i];
                row.first_use = row.first_use.min(local.first_use);
                row.read_phases |= local.read_phases;
                if local.reads > 0 {
                    row.readers.push((w, local.reads));
                }
                if local.updates > 0 {
                    row.updaters.push((w, local.updates));
                }
                to_row.push(i as u32);
            }
            merged.push(to_row);
        }
        // Sort by first use; `rank[i]`: where merged row `i` ends up.
        let mut order: Vec<u32> = (0..rows.len() as u32).collect();
        order.sort_by_key(|&i| (rows[i as usize].first_use, rows[i as usize].key));
        let mut rank = vec![0u32; rows.len()];
        for (pos, &i) in order.iter().enumerate() {
            rank[i as usize] = pos as u32;
        }
        let mut slots: Vec<Option<RowUse>> = rows.into_iter().map(Some).collect();
        let rows: Vec<RowUse> = order
            .iter()
            .map(|&i| slots[i as usize].take().expect("each row once"))
            .collect();
        let index = rows.iter().enumerate().map(|(i, r)| (r.key, i)).collect();
        let clocks = logs.iter().map(|l| l.clocks).max().unwrap_or(0);
        let mut accesses = 0u64;
        let sequences = logs
            .into_iter()
            .zip(&merged)
            .map(|(log, to_row)| {
                let mut events = log.events;
                accesses += events.len() as u64;
                for e in &mut events {
                    *e = rank[to_row[*e as usize] as usize];
                }
                events
            })
            .collect();
        AccessPattern {
            workers: merged.len(),
            clocks,
            accesses,
            rows,
            index,
            sequences,
        }
    }

    /// The rows worker `worker` touched, in the order it touched them (one entry per
    /// access). Empty once the store has specialized: the planner takes the sequences
    /// (they are resolved into the workers' op tapes rather than kept twice).
    pub fn sequence(&self, worker: usize) -> impl ExactSizeIterator<Item = RowKey> + '_ {
        let seq = self.sequences.get(worker).map_or(&[][..], Vec::as_slice);
        seq.iter().map(|&i| self.rows[i as usize].key)
    }

    /// Hands each worker's sequence (indices into [`rows`](Self::rows)) to the planner,
    /// leaving none.
    pub(crate) fn take_sequences(&mut self) -> Vec<Vec<u32>> {
        std::mem::take(&mut self.sequences)
    }

    /// Number of workers whose logs were merged.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// CLOCKs per iteration (the most any worker called).
    pub fn clocks(&self) -> u64 {
        self.clocks
    }

    /// Total READs and UPDATEs recorded.
    pub fn accesses(&self) -> u64 {
        self.accesses
    }

    /// Every row touched, in first-use order.
    pub fn rows(&self) -> &[RowUse] {
        &self.rows
    }

    /// The use of `key`, if it was touched.
    pub fn get(&self, key: RowKey) -> Option<&RowUse> {
        self.index.get(&key).map(|&i| &self.rows[i])
    }

    /// Bytes this pattern holds: the per-row summaries, their index and the sequences not
    /// yet taken by the planner.
    pub fn bytes(&self) -> usize {
        let row_lists: usize = self
            .rows
            .iter()
            .map(|r| (r.readers.capacity() + r.updaters.capacity()) * 8)
            .sum();
        self.rows.capacity() * size_of::<RowUse>()
            + row_lists
            + map_bytes(self.index.capacity(), size_of::<(RowKey, usize)>())
            + self
                .sequences
                .iter()
                .map(|s| s.capacity() * 4)
                .sum::<usize>()
    }
}

/// The approximate heap size of a hash map with `capacity` entries of `entry` bytes (one
/// control byte per bucket, buckets at 8/7 of the capacity).
pub(crate) fn map_bytes(capacity: usize, entry: usize) -> usize {
    capacity * 8 / 7 * (entry + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(events: &[(u64, Access)], clocks: u64) -> AccessLog {
        let mut log = AccessLog::default();
        for (r, a) in events {
            log.record(RowKey::new(0, *r), *a);
        }
        log.clocks = clocks;
        log
    }

    #[test]
    fn merges_logs_per_row_in_first_use_order() {
        use Access::*;
        let logs = vec![
            log(&[(5, Read), (5, Update), (7, Read)], 1),
            log(&[(7, Read), (7, Update), (7, Update), (9, Read)], 2),
        ];
        let p = AccessPattern::from_logs(logs);
        assert_eq!(p.workers(), 2);
        assert_eq!(p.clocks(), 2);
        assert_eq!(p.accesses(), 7);
        let keys: Vec<u64> = p.rows().iter().map(|r| r.key.row).collect();
        assert_eq!(keys, vec![5, 7, 9]);
        let seven = p.get(RowKey::new(0, 7)).unwrap();
        assert_eq!(seven.first_use, 0);
        assert_eq!(seven.readers, vec![(0, 1), (1, 1)]);
        assert_eq!(seven.updaters, vec![(1, 2)]);
        assert_eq!(seven.workers(), vec![0, 1]);
        assert_eq!(seven.accesses(), 4);
        assert!(p.get(RowKey::new(1, 7)).is_none());
        let seq: Vec<u64> = p.sequence(1).map(|k| k.row).collect();
        assert_eq!(seq, vec![7, 7, 7, 9]);
        let seq: Vec<u64> = p.sequence(0).map(|k| k.row).collect();
        assert_eq!(seq, vec![5, 5, 7]);
    }

    #[test]
    fn a_log_costs_four_bytes_per_access_plus_its_rows() {
        let mut log = AccessLog::default();
        for i in 0..100_000u64 {
            log.record(RowKey::new(0, i % 100), Access::Read);
        }
        // 100 000 accesses of 100 rows: the events dominate.
        assert!(log.bytes() < 100_000 * 4 * 2 + 100 * 64, "{}", log.bytes());
        let mut p = AccessPattern::from_logs(vec![log]);
        assert_eq!(p.rows().len(), 100);
        let before = p.bytes();
        let seqs = p.take_sequences();
        assert_eq!(seqs[0].len(), 100_000);
        assert_eq!(&seqs[0][..3], &[0, 1, 2]);
        assert!(p.bytes() < before / 10, "{} -> {}", before, p.bytes());
        assert_eq!(p.sequence(0).len(), 0);
    }
}
