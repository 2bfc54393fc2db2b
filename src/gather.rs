//! Gathering the access pattern: what each worker reads and updates in one iteration.
//!
//! While recording, a worker appends every READ and UPDATE to an [`AccessLog`] (and counts
//! its CLOCKs). [`AccessPattern::from_logs`] merges the logs of all workers into one
//! summary per row — who reads it, who updates it, how often, and when it is first used —
//! which the planner turns into specialized structures. This module only summarises; it
//! decides nothing.

use crate::RowKey;
use rustc_hash::FxHashMap;

/// What an access did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// A READ.
    Read,
    /// An UPDATE (dense or single-column).
    Update,
}

/// The operations one worker performed while recording, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessLog {
    /// `(row, what)` in program order.
    pub events: Vec<(RowKey, Access)>,
    /// Number of CLOCK calls recorded.
    pub clocks: u64,
}

impl AccessLog {
    pub(crate) fn record(&mut self, key: RowKey, access: Access) {
        self.events.push((key, access));
    }
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

/// The access pattern of one iteration of every worker.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessPattern {
    workers: usize,
    clocks: u64,
    accesses: u64,
    rows: Vec<RowUse>,
    index: FxHashMap<RowKey, usize>,
    sequences: Vec<Vec<RowKey>>,
}

impl AccessPattern {
    /// Merges per-worker logs (`logs[w]` is worker `w`'s). Rows come out sorted by first
    /// use, ties broken by key, so the result does not depend on thread timing.
    pub fn from_logs(logs: &[AccessLog]) -> Self {
        let mut index: FxHashMap<RowKey, usize> = FxHashMap::default();
        let mut rows: Vec<RowUse> = Vec::new();
        let mut accesses = 0u64;
        for (w, log) in logs.iter().enumerate() {
            let w = w as u32;
            for (pos, (key, access)) in log.events.iter().enumerate() {
                accesses += 1;
                let i = *index.entry(*key).or_insert_with(|| {
                    rows.push(RowUse {
                        key: *key,
                        first_use: pos as u64,
                        readers: Vec::new(),
                        updaters: Vec::new(),
                    });
                    rows.len() - 1
                });
                let row = &mut rows[i];
                row.first_use = row.first_use.min(pos as u64);
                let counts = match access {
                    Access::Read => &mut row.readers,
                    Access::Update => &mut row.updaters,
                };
                match counts.last_mut() {
                    Some((last, n)) if *last == w => *n += 1,
                    _ => counts.push((w, 1)),
                }
            }
        }
        rows.sort_by_key(|r| (r.first_use, r.key));
        let index = rows.iter().enumerate().map(|(i, r)| (r.key, i)).collect();
        AccessPattern {
            workers: logs.len(),
            clocks: logs.iter().map(|l| l.clocks).max().unwrap_or(0),
            accesses,
            rows,
            index,
            sequences: logs
                .iter()
                .map(|l| l.events.iter().map(|(k, _)| *k).collect())
                .collect(),
        }
    }

    /// The rows worker `worker` touched, in the order it touched them (one entry per
    /// access).
    pub fn sequence(&self, worker: usize) -> &[RowKey] {
        self.sequences.get(worker).map_or(&[], Vec::as_slice)
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(events: &[(u64, Access)], clocks: u64) -> AccessLog {
        AccessLog {
            events: events
                .iter()
                .map(|(r, a)| (RowKey::new(0, *r), *a))
                .collect(),
            clocks,
        }
    }

    #[test]
    fn merges_logs_per_row_in_first_use_order() {
        use Access::*;
        let logs = [
            log(&[(5, Read), (5, Update), (7, Read)], 1),
            log(&[(7, Read), (7, Update), (7, Update), (9, Read)], 2),
        ];
        let p = AccessPattern::from_logs(&logs);
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
    }
}
