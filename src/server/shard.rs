//! [`Shard`]: one server shard as a pure state machine.
//!
//! The shard serves **exact snapshots**: the rows it sends hold exactly the updates of
//! clocks `< min_clock`, no more. Updates of later clocks wait in a pending list and are
//! applied, in `(clock, worker)` order, when the minimum clock passes them. So under BSP
//! every read sees the same values whatever the thread timing (deterministic up to the
//! application's own update order), and a worker adds its own newer updates itself.

use super::arena::ArenaShard;
use crate::consistency::{Clock, ClockTable, DeferredReads};
use crate::msg::{Endpoint, Msg, ProcessId, RowBatch, ShardId, WorkerId};
use crate::{AlignedBuf, RowKey, TableMeta};
use dashmap::DashMap;
use rustc_hash::{FxBuildHasher, FxHashMap};
use std::collections::{BTreeMap, BTreeSet};

/// Updates of one worker for one clock, waiting to become visible.
type Pending = (WorkerId, RowBatch, AlignedBuf);

/// One server shard: visible rows, pending updates, worker clocks and deferred reads.
pub(crate) struct Shard {
    id: ShardId,
    tables: Vec<Option<TableMeta>>,
    rows: DashMap<RowKey, AlignedBuf, FxBuildHasher>,
    pending: BTreeMap<Clock, Vec<Pending>>,
    clocks: ClockTable,
    deferred: DeferredReads<(ProcessId, RowKey)>,
    /// Specialized storage, once a plan arrived, with the plan's number.
    arena: Option<ArenaShard>,
    plan: u32,
    /// Arena refreshes waiting for the minimum clock: `(process, chunk or all)`.
    slab_deferred: DeferredReads<(ProcessId, Option<u32>)>,
    /// Processes that have talked to this shard (told when the minimum clock advances).
    processes: BTreeSet<ProcessId>,
}

impl Shard {
    /// A shard serving `workers` workers in total.
    pub(crate) fn new(id: ShardId, workers: usize) -> Self {
        Shard {
            id,
            tables: Vec::new(),
            rows: DashMap::with_hasher(FxBuildHasher),
            pending: BTreeMap::new(),
            clocks: ClockTable::new(workers),
            deferred: DeferredReads::default(),
            arena: None,
            plan: 0,
            slab_deferred: DeferredReads::default(),
            processes: BTreeSet::new(),
        }
    }

    pub(crate) fn id(&self) -> ShardId {
        self.id
    }

    /// Handles one message, pushing any replies onto `out`.
    pub(crate) fn handle(&mut self, msg: Msg, out: &mut Vec<(Endpoint, Msg)>) {
        match msg {
            Msg::CreateTable { meta } => {
                let id = meta.id as usize;
                if self.tables.len() <= id {
                    self.tables.resize(id + 1, None);
                }
                self.tables[id] = Some(meta);
            }
            Msg::Fetch { from, rows } => {
                self.processes.insert(from);
                self.fetch(from, rows, out)
            }
            Msg::Specialize {
                from,
                plan,
                keys,
                chunk_ends,
                updaters,
            } => {
                self.processes.insert(from);
                self.plan = plan;
                self.specialize(from, keys, &chunk_ends, updaters, out);
            }
            Msg::SlabFetch {
                from,
                required,
                chunk,
            } => {
                self.processes.insert(from);
                if required <= self.clocks.min_clock() {
                    self.reply_slab(from, chunk, out);
                } else {
                    self.slab_deferred.defer(required, (from, chunk));
                }
            }
            Msg::Clock {
                worker,
                clock,
                rows,
                slab,
            } => {
                if (worker as usize) >= self.clocks.workers() || clock == 0 {
                    return self.reject(
                        None,
                        format!("bad clock {clock} from worker {worker}"),
                        out,
                    );
                }
                if !rows.is_empty() || !slab.is_empty() {
                    if let Err(reason) = self.validate(&rows) {
                        // Nobody to answer by process here; the clock still counts so that
                        // the cluster does not hang, but the bad batch changes nothing.
                        self.reject(None, reason, out);
                    } else {
                        self.pending
                            .entry(clock - 1)
                            .or_default()
                            .push((worker, rows, slab));
                    }
                }
                let advanced = self.clocks.tick(worker as usize, clock);
                self.advance(advanced, out);
            }
            Msg::Finish { worker } => {
                let advanced = self.clocks.finish(worker as usize);
                self.advance(advanced, out);
            }
            Msg::Resume { worker, clock } => self.clocks.resume(worker as usize, clock),
            Msg::Dump { from, table } => {
                let mut rows: Vec<(RowKey, AlignedBuf)> = self
                    .rows
                    .iter()
                    .filter(|e| e.key().table == table)
                    .map(|e| (*e.key(), e.value().clone()))
                    .collect();
                if let Some(arena) = &self.arena {
                    rows.extend(
                        arena
                            .rows()
                            .filter(|(k, _)| k.table == table)
                            .map(|(k, b)| (k, AlignedBuf::from_bytes(b))),
                    );
                }
                out.push((
                    Endpoint::Client(from),
                    Msg::DumpRows {
                        shard: self.id,
                        rows,
                    },
                ));
            }
            Msg::Shutdown => {}
            other => self.reject(None, format!("unexpected message {other:?}"), out),
        }
    }

    fn table(&self, table: u32) -> Option<&TableMeta> {
        self.tables.get(table as usize).and_then(Option::as_ref)
    }

    fn validate(&self, rows: &RowBatch) -> Result<(), String> {
        for (key, delta) in rows {
            let meta = self
                .table(key.table)
                .ok_or_else(|| format!("update of unknown table #{}", key.table))?;
            if meta.row_bytes() != delta.len() {
                return Err(format!(
                    "update of table '{}' row {} has {} bytes, expected {}",
                    meta.name,
                    key.row,
                    delta.len(),
                    meta.row_bytes()
                ));
            }
        }
        Ok(())
    }

    fn fetch(
        &mut self,
        from: ProcessId,
        rows: Vec<(RowKey, Clock)>,
        out: &mut Vec<(Endpoint, Msg)>,
    ) {
        let min = self.clocks.min_clock();
        let mut ready = Vec::new();
        for (key, required) in rows {
            if self.table(key.table).is_none() {
                self.reject(
                    Some(from),
                    format!("fetch of unknown table #{}", key.table),
                    out,
                );
            } else if required <= min {
                ready.push(key);
            } else {
                self.deferred.defer(required, (from, key));
            }
        }
        if !ready.is_empty() {
            self.reply(from, ready, out);
        }
    }

    /// Applies the pending updates the new minimum clock makes visible, then answers the
    /// reads that were waiting for it.
    fn advance(&mut self, advanced: Option<Clock>, out: &mut Vec<(Endpoint, Msg)>) {
        let Some(min) = advanced else { return };
        let later = self.pending.split_off(&min);
        let ready = std::mem::replace(&mut self.pending, later);
        for (_clock, mut batches) in ready {
            batches.sort_by_key(|(worker, _, _)| *worker);
            for (worker, batch, slab) in batches {
                self.apply(batch);
                if !slab.is_empty() {
                    let applied = match &mut self.arena {
                        Some(arena) => arena.apply_slab(worker, &slab),
                        None => Err(format!("update slab from worker {worker} before any plan")),
                    };
                    if let Err(reason) = applied {
                        self.reject(None, reason, out);
                    }
                }
            }
        }
        for &p in &self.processes {
            out.push((
                Endpoint::Client(p),
                Msg::MinClock {
                    shard: self.id,
                    clock: min,
                },
            ));
        }
        for (from, chunk) in self.slab_deferred.release(min) {
            self.reply_slab(from, chunk, out);
        }
        let mut by_process: FxHashMap<ProcessId, Vec<RowKey>> = FxHashMap::default();
        for (from, key) in self.deferred.release(min) {
            by_process.entry(from).or_default().push(key);
        }
        for (from, keys) in by_process {
            self.reply(from, keys, out);
        }
    }

    fn apply(&mut self, batch: RowBatch) {
        for (key, delta) in batch {
            let Some(elem) = self.table(key.table).map(|m| m.elem) else {
                continue;
            };
            if let Some((row, _)) = self.arena.as_mut().and_then(|a| a.row_mut(key)) {
                elem.add(row, delta.as_bytes());
                continue;
            }
            // Rows start as zeros and deltas are added (never copied), exactly as in the
            // arena, so both layouts compute bit-identical values.
            let mut row = self
                .rows
                .entry(key)
                .or_insert_with(|| AlignedBuf::zeroed(delta.len()));
            elem.add(row.as_bytes_mut(), delta.as_bytes());
        }
    }

    fn reply(&self, to: ProcessId, keys: Vec<RowKey>, out: &mut Vec<(Endpoint, Msg)>) {
        let rows = keys
            .into_iter()
            .filter_map(|key| {
                let bytes = self.table(key.table)?.row_bytes();
                if let Some(row) = self.arena.as_ref().and_then(|a| a.row(key)) {
                    return Some((key, AlignedBuf::from_bytes(row)));
                }
                let row = self
                    .rows
                    .entry(key)
                    .or_insert_with(|| AlignedBuf::zeroed(bytes))
                    .clone();
                Some((key, row))
            })
            .collect();
        out.push((
            Endpoint::Client(to),
            Msg::Rows {
                shard: self.id,
                data_clock: self.clocks.min_clock(),
                rows,
            },
        ));
    }

    /// Installs a plan: rows already held move into the arena, keeping their values.
    fn specialize(
        &mut self,
        from: ProcessId,
        keys: Vec<RowKey>,
        chunk_ends: &[u32],
        updaters: Vec<(WorkerId, Vec<u32>)>,
        out: &mut Vec<(Endpoint, Msg)>,
    ) {
        // A previous plan's rows go back to the dynamic map first.
        if let Some(old) = self.arena.take() {
            for (key, bytes) in old.rows() {
                self.rows.insert(key, AlignedBuf::from_bytes(bytes));
            }
        }
        let mut arena = match ArenaShard::new(&self.tables, keys, chunk_ends, updaters) {
            Ok(a) => a,
            Err(reason) => return self.reject(Some(from), reason, out),
        };
        let moved: Vec<RowKey> = self
            .rows
            .iter()
            .map(|e| *e.key())
            .filter(|k| arena.row(*k).is_some())
            .collect();
        for key in moved {
            if let (Some((_, value)), Some((row, _))) = (self.rows.remove(&key), arena.row_mut(key))
            {
                row.copy_from_slice(value.as_bytes());
            }
        }
        self.arena = Some(arena);
    }

    /// Sends one chunk, or every chunk in order, of the arena at the current data clock.
    fn reply_slab(&self, to: ProcessId, chunk: Option<u32>, out: &mut Vec<(Endpoint, Msg)>) {
        let Some(arena) = &self.arena else {
            return self.reject(Some(to), "arena fetch before any plan".into(), out);
        };
        let chunks = match chunk {
            Some(c) => c as usize..c as usize + 1,
            None => 0..arena.chunks(),
        };
        for c in chunks {
            let Some(bytes) = arena.chunk_bytes(c) else {
                return self.reject(Some(to), format!("no chunk {c}"), out);
            };
            out.push((
                Endpoint::Client(to),
                Msg::SlabRows {
                    shard: self.id,
                    plan: self.plan,
                    chunk: c as u32,
                    data_clock: self.clocks.min_clock(),
                    bytes,
                },
            ));
        }
    }

    fn reject(&self, to: Option<ProcessId>, reason: String, out: &mut Vec<(Endpoint, Msg)>) {
        // Without an addressee (a clock from a worker) the rejection goes to every
        // process this shard has heard of; in one process that is process 0.
        let to = to.unwrap_or(0);
        out.push((
            Endpoint::Client(to),
            Msg::Rejected {
                shard: self.id,
                reason,
            },
        ));
    }
}

/// Which shard holds `key` when rows are placed by hash.
pub(crate) fn shard_of(key: RowKey, shards: usize) -> usize {
    use std::hash::BuildHasher;
    // Fx's low bits are weak for small integer keys; mix the high half in.
    let x = FxBuildHasher.hash_one(key);
    ((x ^ (x >> 32)) % shards as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ElemType;

    fn shard_with_table(workers: usize) -> Shard {
        let mut s = Shard::new(0, workers);
        let meta = TableMeta {
            id: 0,
            name: "t".into(),
            width: 2,
            elem: ElemType::I64,
        };
        s.handle(Msg::CreateTable { meta }, &mut Vec::new());
        s
    }

    fn rows_of(out: &[(Endpoint, Msg)]) -> Vec<(u64, Vec<i64>, u64)> {
        out.iter()
            .filter_map(|(_, m)| match m {
                Msg::Rows {
                    data_clock, rows, ..
                } => Some(
                    rows.iter()
                        .map(|(k, b)| (k.row, b.cast::<i64>().to_vec(), *data_clock))
                        .collect::<Vec<_>>(),
                ),
                _ => None,
            })
            .flatten()
            .collect()
    }

    fn clock(worker: WorkerId, clock: Clock, rows: &[(u64, [i64; 2])]) -> Msg {
        Msg::Clock {
            worker,
            clock,
            rows: rows
                .iter()
                .map(|(r, v)| (RowKey::new(0, *r), AlignedBuf::from_slice(v)))
                .collect(),
            slab: AlignedBuf::default(),
        }
    }

    fn fetch(row: u64, required: Clock) -> Msg {
        Msg::Fetch {
            from: 0,
            rows: vec![(RowKey::new(0, row), required)],
        }
    }

    #[test]
    fn reads_wait_for_the_slowest_worker_and_see_exact_snapshots() {
        let mut s = shard_with_table(2);
        let mut out = Vec::new();
        s.handle(clock(0, 1, &[(3, [1, 2])]), &mut out);
        // Worker 0 runs ahead: its clock-1 update must not be visible at data clock 1.
        s.handle(clock(0, 2, &[(3, [10, 10])]), &mut out);
        s.handle(fetch(3, 1), &mut out);
        assert!(
            rows_of(&out).is_empty(),
            "worker 1 has not finished clock 0"
        );
        s.handle(clock(1, 1, &[(3, [100, 0])]), &mut out);
        assert_eq!(rows_of(&out), vec![(3, vec![101, 2], 1)]);
        out.clear();
        s.handle(fetch(3, 0), &mut out);
        assert_eq!(rows_of(&out), vec![(3, vec![101, 2], 1)]);
    }

    #[test]
    fn bad_updates_change_nothing_but_still_count_the_clock() {
        let mut s = shard_with_table(1);
        let mut out = Vec::new();
        let bad = Msg::Clock {
            worker: 0,
            clock: 1,
            rows: vec![
                (RowKey::new(0, 1), AlignedBuf::from_slice(&[1i64, 1])),
                (RowKey::new(0, 2), AlignedBuf::from_slice(&[1i64])),
            ],
            slab: AlignedBuf::default(),
        };
        s.handle(bad, &mut out);
        assert!(matches!(out[0].1, Msg::Rejected { .. }));
        out.clear();
        s.handle(fetch(1, 1), &mut out);
        assert_eq!(rows_of(&out), vec![(1, vec![0, 0], 1)]);
        out.clear();
        s.handle(
            Msg::Fetch {
                from: 0,
                rows: vec![(RowKey::new(9, 0), 0)],
            },
            &mut out,
        );
        assert!(matches!(out[0].1, Msg::Rejected { .. }));
    }

    #[test]
    fn finished_workers_are_not_waited_for() {
        let mut s = shard_with_table(2);
        let mut out = Vec::new();
        s.handle(clock(0, 1, &[]), &mut out);
        s.handle(clock(0, 2, &[]), &mut out);
        s.handle(fetch(0, 2), &mut out);
        assert!(rows_of(&out).is_empty());
        s.handle(Msg::Finish { worker: 1 }, &mut out);
        assert_eq!(rows_of(&out).len(), 1);
    }

    #[test]
    fn updates_apply_in_worker_order_within_a_clock() {
        // Floating-point addition is not associative: the shard must fix the order.
        let mut s = Shard::new(0, 2);
        let meta = TableMeta {
            id: 0,
            name: "f".into(),
            width: 1,
            elem: ElemType::F64,
        };
        s.handle(Msg::CreateTable { meta }, &mut Vec::new());
        let big = |w: WorkerId, v: f64| Msg::Clock {
            worker: w,
            clock: 1,
            rows: vec![(RowKey::new(0, 0), AlignedBuf::from_slice(&[v]))],
            slab: AlignedBuf::default(),
        };
        let mut out = Vec::new();
        s.handle(big(1, -1e16), &mut out);
        s.handle(big(0, 1e16), &mut out);
        s.handle(
            Msg::Fetch {
                from: 0,
                rows: vec![(RowKey::new(0, 0), 1)],
            },
            &mut out,
        );
        let Some((_, Msg::Rows { rows, .. })) = out.last() else {
            panic!("{out:?}")
        };
        assert_eq!(rows[0].1.cast::<f64>(), &[0.0]);
    }

    #[test]
    fn placement_by_hash_spreads_rows() {
        let mut counts = [0usize; 4];
        for r in 0..4000 {
            counts[shard_of(RowKey::new(0, r), 4)] += 1;
        }
        assert!(counts.iter().all(|&c| c > 800), "{counts:?}");
    }
}
