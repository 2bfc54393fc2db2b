//! The rows a shard holds and how they change: the generic map (rows sent the generic
//! way) and the arena ([`ArenaShard`]: rows some process planned, with its subscriptions).
//! Here updates and slabs are resolved and added, plans subscribe, and reads are answered
//! with rows ([`ToClient::Rows`]) or arena refreshes ([`ToClient::SlabRows`], or written straight
//! into the arena of the process in this OS process, [`LocalArena`]).
//!
//! It knows how rows are stored, added to and sent; not *when* (the clocks decide that,
//! `clocks`), nor runs, migrations or checkpoints.
//!
//! [`ArenaShard`]: super::ArenaShard
//! [`LocalArena`]: super::LocalArena

use super::Shard;
use crate::buf::AlignedBuf;
use crate::gather::phase_bit;
use crate::ids::{Clock, ProcessId, RowKey, ShardId, WorkerId};
use crate::msg::{Envelope, RowBatch, ToClient, WantedChunks};
use crate::server::arena::{Fold, Layout, Request};

/// A slab resolved to its worker's layout when it arrived (and, for a sparse slab, the
/// positions in that layout of its rows).
pub(super) type Resolved = (Layout, Option<Vec<u32>>, AlignedBuf);

impl Shard {
    /// Resolves worker `worker`'s update `slab` to its layout under `process`'s plan
    /// `epoch`: `None` if the slab is empty, `Err` if no such plan holds it or a sparse
    /// slab names a position beyond it.
    pub(super) fn resolve_slab(
        &self,
        process: ProcessId,
        epoch: u32,
        worker: WorkerId,
        (slab, slab_rows): (AlignedBuf, Option<Vec<u32>>),
    ) -> Result<Option<Resolved>, String> {
        if slab.is_empty() {
            return Ok(None);
        }
        self.arena
            .layout(process, epoch, worker)
            .and_then(|layout| match &slab_rows {
                None => Ok(layout),
                Some(positions) => check_positions(layout, positions, worker),
            })
            .map(|layout| Some((layout, slab_rows, slab)))
    }

    /// Adds one worker's updates of one clock, `batch` and its resolved `slab`, visible
    /// from data clock `now`. A slab that does not fit fails the cluster.
    pub(super) fn apply(
        &mut self,
        batch: RowBatch,
        slab: Option<Resolved>,
        now: Clock,
        out: &mut Vec<Envelope>,
    ) {
        self.apply_rows(batch, now);
        if let Some((layout, positions, slab)) = slab {
            let (tables, rules) = (&self.tables, &mut self.rules);
            let mut sink = |key: RowKey, delta: &[u8]| rules.add_planned(tables, key, delta);
            // Asynchronous: the slab's rule rows were stepped when it arrived.
            let fold = match self.step_on_arrival {
                true => Fold::Sums,
                false => Fold::All(&mut sink),
            };
            let applied = (self.arena).apply_slab(&layout, positions.as_deref(), &slab, now, fold);
            if let Err(reason) = applied {
                self.reject_all(reason, out);
            }
        }
    }

    /// Adds `batch`, visible from data clock `now`.
    fn apply_rows(&mut self, batch: RowBatch, now: Clock) {
        for (key, delta) in batch {
            let Some((elem, rule)) = self.table(key.table).map(|m| (m.elem, m.rule)) else {
                continue;
            };
            if !rule.is_sum() {
                self.add_gradient(key, rule, elem, &delta);
                continue;
            }
            if let Some((row, _)) = self.arena.row_mut(key, now) {
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

    /// Answers `to`'s read of `keys` with their rows at the current data clock (a row
    /// never written is zeros).
    pub(super) fn reply(&self, to: ProcessId, keys: Vec<RowKey>, out: &mut Vec<Envelope>) {
        let rows = keys
            .into_iter()
            .filter_map(|key| {
                let bytes = self.table(key.table)?.row_bytes();
                if let Some(row) = self.arena.row(key) {
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
        out.push(Envelope::Client(
            to,
            ToClient::Rows {
                shard: self.id,
                data_clock: self.clocks.min_clock(),
                rows,
            },
        ));
    }

    /// Subscribes `from` to a plan: rows new to the arena move in with their values.
    pub(super) fn specialize(
        &mut self,
        from: ProcessId,
        epoch: u32,
        (keys, chunk_ends, chunk_phases): (&[RowKey], &[u32], &[u64]),
        updaters: Vec<(WorkerId, Vec<u32>)>,
        out: &mut Vec<Envelope>,
    ) {
        if let Some((w, _)) = updaters
            .iter()
            .find(|(w, _)| self.world.process_of_worker(*w) != Some(from))
        {
            return self.reject(
                from,
                format!("plan of process {from} lays out worker {w}"),
                out,
            );
        }
        let rows = &self.rows;
        let req = Request {
            process: from,
            epoch,
            keys,
            chunk_ends,
            chunk_phases,
            updaters,
        };
        let subscribed = self.arena.subscribe(&self.tables, req, |key| {
            rows.remove(&key).map(|(_, value)| value)
        });
        if let Err(reason) = subscribed {
            self.reject(from, reason, out);
        }
    }

    /// Sends the chunks `want` names, in order, of `to`'s subscription at the current
    /// data clock: for each, the rows changed since the last refresh sent to `to`, or the
    /// whole chunk. A request for an older epoch is stale (the process has re-planned
    /// since) and needs no answer.
    pub(super) fn reply_slab(
        &mut self,
        to: ProcessId,
        epoch: u32,
        want: WantedChunks,
        out: &mut Vec<Envelope>,
    ) {
        let Some((current, phases)) = self.arena.subscription(to) else {
            return self.reject(
                to,
                format!("arena fetch of process {to} before any plan"),
                out,
            );
        };
        if epoch != current {
            return;
        }
        let chunks: Vec<usize> = match want {
            WantedChunks::All => (0..phases.len()).collect(),
            WantedChunks::Chunk(c) => vec![c as usize],
            WantedChunks::Phase(p) => {
                let bit = phase_bit(u64::from(p));
                (0..phases.len())
                    .filter(|&c| phases[c] & bit != 0)
                    .collect()
            }
        };
        let data_clock = self.clocks.min_clock();
        let local = (self.local.as_ref())
            .filter(|(process, _)| *process == to)
            .and_then(|(_, arena)| arena.upgrade());
        let no_chunk = |c: usize| format!("no chunk {c} in the plan of process {to}");
        for c in chunks {
            if let Some(local) = &local {
                let Some(rows) = self.arena.refresh_rows(to, c, data_clock) else {
                    return self.reject(to, no_chunk(c), out);
                };
                local.write_refresh(self.id, epoch, c as u32, data_clock, &rows);
                continue;
            }
            let Some(refresh) = self.arena.refresh(to, c, data_clock) else {
                return self.reject(to, no_chunk(c), out);
            };
            out.push(Envelope::Client(
                to,
                ToClient::SlabRows {
                    shard: self.id,
                    epoch,
                    chunk: c as u32,
                    data_clock,
                    rows: refresh.rows,
                    bytes: refresh.bytes,
                },
            ));
        }
    }

    /// Answers `from` with every row of `table` this shard holds, generic and arena rows
    /// alike, as they are now, as shard `answering` (this shard, or the shard keeping it
    /// as a backup: an answer names the shard that sends it).
    pub(super) fn dump(
        &self,
        answering: ShardId,
        from: ProcessId,
        table: u32,
        out: &mut Vec<Envelope>,
    ) {
        let mut rows: Vec<(RowKey, AlignedBuf)> = self
            .rows
            .iter()
            .filter(|e| e.key().table == table)
            .map(|e| (*e.key(), e.value().clone()))
            .collect();
        rows.extend(
            self.arena
                .rows()
                .filter(|(k, _)| k.table == table)
                .map(|(k, b)| (k, AlignedBuf::from_bytes(b))),
        );
        out.push(Envelope::Client(
            from,
            ToClient::DumpRows {
                shard: answering,
                rows,
            },
        ));
    }
}

/// `layout` if every position of a sparse slab's rows is in it.
fn check_positions(layout: Layout, positions: &[u32], worker: WorkerId) -> Result<Layout, String> {
    match positions.iter().find(|&&p| p as usize >= layout.len()) {
        None => Ok(layout),
        Some(p) => Err(format!(
            "update slab of worker {worker} names row {p} of a layout of {}",
            layout.len()
        )),
    }
}
