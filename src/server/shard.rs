//! [`Shard`]: one server shard as a pure state machine.
//!
//! Its one output besides its replies: the arena refreshes of the process in its own OS
//! process, which it writes into that process's arena ([`LocalArena`]) instead of sending
//! (the same refreshes, in the same order).
//!
//! The shard serves **exact snapshots**: the rows it sends hold exactly the updates of
//! clocks `< min_clock`, no more. Updates of later clocks wait in a pending list and are
//! applied, in `(clock, worker)` order, when the minimum clock passes them. So under BSP
//! every read sees the same values whatever the thread timing or the number of processes
//! (deterministic up to the application's own update order), and a worker adds its own
//! newer updates itself.
//!
//! Every process of the cluster talks to every shard. A shard keeps one arena for its
//! planned rows and per process a subscription tagged with that process's plan epoch;
//! runs end at a barrier ([`Msg::RunEnd`] from every process, then [`Msg::RunReady`]
//! with the agreed start clock); a shard is done once every process has left it. Shard 0
//! also holds the [`Coordinator`].
//!
//! Between runs a shard writes its rows into a checkpoint ([`Msg::Checkpoint`]: the one
//! message whose handling does IO, a file through the checkpoint storage layer); before
//! any run it takes rows back from one ([`Msg::Restore`]).

use super::arena::{ArenaShard, Layout, Request};
use super::coordinator::Coordinator;
use super::LocalArena;
use crate::buf::AlignedBuf;
use crate::checkpoint::{CheckpointError, PartEntry, PartWriter};
use crate::consistency::{ClockTable, DeferredReads};
use crate::gather::phase_bit;
use crate::ids::{Clock, ProcessId, RowKey, ShardId, WorkerId};
use crate::msg::{Endpoint, Msg, RowBatch, Want};
use crate::placement::Placement;
use crate::rows_part;
use crate::table::TableMeta;
use crate::world::World;
use dashmap::DashMap;
use rustc_hash::{FxBuildHasher, FxHashMap};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Weak;

/// Updates of one worker for one clock, waiting to become visible: rows sent the generic
/// way, and a slab with the layout it was resolved to when it arrived (and, for a sparse
/// slab, the positions in that layout of its rows).
type Pending = (
    WorkerId,
    RowBatch,
    Option<(Layout, Option<Vec<u32>>, AlignedBuf)>,
);

/// One server shard: visible rows, pending updates, worker clocks, deferred reads, the
/// run barrier and who has left.
pub(crate) struct Shard {
    id: ShardId,
    world: World,
    tables: Vec<Option<TableMeta>>,
    /// Shard 0 only.
    coordinator: Option<Coordinator>,
    rows: DashMap<RowKey, AlignedBuf, FxBuildHasher>,
    pending: BTreeMap<Clock, Vec<Pending>>,
    clocks: ClockTable,
    deferred: DeferredReads<(ProcessId, RowKey)>,
    /// Specialized storage: every subscribed row, and each process's subscription.
    arena: ArenaShard,
    /// Arena refreshes waiting for the minimum clock: `(process, epoch, chunk or all)`.
    slab_deferred: DeferredReads<(ProcessId, u32, Want)>,
    /// Per process: the last run it ended.
    ended: Vec<u64>,
    /// The last run every process ended (and this shard answered with `RunReady`).
    run: u64,
    /// Per process: whether it has left.
    left: Vec<bool>,
    /// A migration under way (see [`Msg::Migrate`]).
    migration: Option<Migration>,
    /// A restore under way (see [`Msg::Restore`]).
    restore: Option<Restoring>,
    /// Whether a restore has completed (there is only one, before any run).
    restored: bool,
    /// The process in this shard's OS process and its arena, which takes its refreshes
    /// straight from this shard's arena ([`LocalArena`]) while it lives.
    local: Option<(ProcessId, Weak<dyn LocalArena>)>,
}

/// Where a shard is in a restore: the checkpoint's clock, and which processes have sent
/// their last rows.
#[derive(Debug)]
struct Restoring {
    clock: Clock,
    done: Vec<bool>,
}

/// Where a shard is in a migration: its own hand-over done, and from which shards it has
/// adopted rows. Both can happen in either order.
#[derive(Debug)]
struct Migration {
    handed_over: bool,
    adopted_from: Vec<bool>,
}

impl Shard {
    /// Global shard `id` of a cluster shaped `world`.
    pub(crate) fn new(id: ShardId, world: World) -> Self {
        Shard {
            id,
            world,
            tables: Vec::new(),
            coordinator: (id == 0).then(|| Coordinator::new(world.processes)),
            rows: DashMap::with_hasher(FxBuildHasher),
            pending: BTreeMap::new(),
            clocks: ClockTable::new(world.total_workers()),
            deferred: DeferredReads::default(),
            arena: ArenaShard::default(),
            slab_deferred: DeferredReads::default(),
            ended: vec![0; world.processes],
            run: 0,
            left: vec![false; world.processes],
            migration: None,
            restore: None,
            restored: false,
            local: None,
        }
    }

    /// This shard, writing the arena refreshes of `process` (the process in its own OS
    /// process) straight into `arena` while it lives, instead of sending them.
    pub(crate) fn with_local_arena(
        mut self,
        process: ProcessId,
        arena: Weak<dyn LocalArena>,
    ) -> Self {
        self.local = Some((process, arena));
        self
    }

    pub(crate) fn id(&self) -> ShardId {
        self.id
    }

    /// Whether every process has left: nobody will send to this shard again.
    pub(crate) fn released(&self) -> bool {
        self.left.iter().all(|&l| l)
    }

    /// The processes that have not left yet.
    pub(crate) fn staying(&self) -> Vec<ProcessId> {
        (0..self.world.processes as ProcessId)
            .filter(|&p| !self.left[p as usize])
            .collect()
    }

    /// Whether `p` names a process of the cluster.
    fn known(&self, p: ProcessId) -> bool {
        (p as usize) < self.world.processes
    }

    /// Handles one message, pushing any replies onto `out`.
    pub(crate) fn handle(&mut self, msg: Msg, out: &mut Vec<(Endpoint, Msg)>) {
        if let Some(from) = msg.sender() {
            if !self.known(from) {
                return self.reject_all(format!("message from unknown process {from}"), out);
            }
            if self.left[from as usize] {
                return self.reject_all(format!("message from process {from} after it left"), out);
            }
        }
        match msg {
            Msg::DeclareTable {
                from,
                name,
                width,
                elem,
            } => match self.coordinator.as_mut() {
                Some(c) => match c.declare(name, width, elem) {
                    Ok(meta) => out.push((Endpoint::Client(from), Msg::TableDeclared { meta })),
                    Err(reason) => self.reject(from, reason, out),
                },
                None => self.reject(from, "table declared to a shard other than 0".into(), out),
            },
            Msg::Gather {
                from,
                round,
                values,
            } => match self
                .coordinator
                .as_mut()
                .map(|c| c.gather(from, round, values))
            {
                Some(Ok(Some(parts))) => {
                    for p in self.staying() {
                        let parts = parts.clone();
                        out.push((Endpoint::Client(p), Msg::Gathered { round, parts }));
                    }
                }
                Some(Ok(None)) => {}
                Some(Err(reason)) => self.reject_all(reason, out),
                None => self.reject(from, "all-gather sent to a shard other than 0".into(), out),
            },
            Msg::CreateTable { meta } => {
                let id = meta.id as usize;
                if self.tables.len() <= id {
                    self.tables.resize(id + 1, None);
                }
                match &self.tables[id] {
                    Some(known) if *known != meta => self.reject_all(
                        format!(
                            "table #{id} declared as both '{}' and '{}'",
                            known.name, meta.name
                        ),
                        out,
                    ),
                    _ => self.tables[id] = Some(meta),
                }
            }
            Msg::Fetch { from, rows } => self.fetch(from, rows, out),
            Msg::Specialize {
                from,
                epoch,
                keys,
                chunk_ends,
                chunk_phases,
                updaters,
            } => {
                let layout = (&keys[..], &chunk_ends[..], &chunk_phases[..]);
                self.specialize(from, epoch, layout, updaters, out)
            }
            Msg::SlabFetch {
                from,
                epoch,
                required,
                want,
            } => {
                if required <= self.clocks.min_clock() {
                    self.reply_slab(from, epoch, want, out);
                } else {
                    self.slab_deferred.defer(required, (from, epoch, want));
                }
            }
            Msg::Clock {
                worker,
                clock,
                epoch,
                rows,
                slab,
                slab_rows,
            } => self.clock(worker, clock, epoch, rows, (slab, slab_rows), out),
            Msg::Finish { worker } => match self.clocks.finish(worker as usize) {
                Ok(advanced) => self.advance(advanced, out),
                Err(e) => self.reject_all(e.to_string(), out),
            },
            Msg::RunEnd { from, run } => {
                let last = self.ended[from as usize];
                if run != last + 1 {
                    return self.reject_all(
                        format!("process {from} ended run {run} after run {last}"),
                        out,
                    );
                }
                self.ended[from as usize] = run;
                self.check_barrier(out);
            }
            Msg::Leave { from } => {
                self.left[from as usize] = true;
                if let Some(reason) = self.coordinator.as_mut().and_then(|c| c.left(from)) {
                    return self.reject_all(reason, out);
                }
                if self
                    .restore
                    .as_ref()
                    .is_some_and(|r| !r.done[from as usize])
                {
                    return self.reject_all(
                        format!("process {from} left the cluster during a resume"),
                        out,
                    );
                }
                self.check_barrier(out);
            }
            Msg::Checkpoint { from, root, clock } => self.checkpoint(from, &root, clock, out),
            Msg::Restore {
                from,
                clock,
                rows,
                last,
            } => self.restore(from, clock, rows, last, out),
            Msg::Migrate { from, overrides } => self.migrate(from, overrides, out),
            Msg::Adopt { shard, rows } => self.adopt(shard, rows, out),
            Msg::Dump { from, table } => {
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
                out.push((
                    Endpoint::Client(from),
                    Msg::DumpRows {
                        shard: self.id,
                        rows,
                    },
                ));
            }
            other => self.reject_all(format!("unexpected message {other:?}"), out),
        }
    }

    fn clock(
        &mut self,
        worker: WorkerId,
        clock: Clock,
        epoch: u32,
        rows: RowBatch,
        (slab, slab_rows): (AlignedBuf, Option<Vec<u32>>),
        out: &mut Vec<(Endpoint, Msg)>,
    ) {
        let Some(process) = self.world.process_of_worker(worker) else {
            return self.reject_all(format!("clock from unknown worker {worker}"), out);
        };
        if self.left[process as usize] {
            return self.reject_all(
                format!("clock from worker {worker} after its process left"),
                out,
            );
        }
        let advanced = match self.clocks.tick(worker as usize, clock) {
            Ok(advanced) => advanced,
            Err(e) => return self.reject_all(e.to_string(), out),
        };
        if !rows.is_empty() || !slab.is_empty() {
            let slab = if slab.is_empty() {
                Ok(None)
            } else {
                self.arena
                    .layout(process, epoch, worker)
                    .and_then(|layout| match &slab_rows {
                        None => Ok(layout),
                        Some(positions) => check_positions(layout, positions, worker),
                    })
                    .map(|layout| Some((layout, slab_rows, slab)))
            };
            match (self.validate(&rows), slab) {
                (Ok(()), Ok(slab)) => self
                    .pending
                    .entry(clock - 1)
                    .or_default()
                    .push((worker, rows, slab)),
                // The clock still counts, so that nothing waits on it; the cluster fails.
                (Err(reason), _) | (_, Err(reason)) => self.reject_all(reason, out),
            }
        }
        self.advance(advanced, out);
    }

    /// Answers the run barrier once every process has ended the next run (a process
    /// that left has ended all it will), or fails it if a process left before ending a
    /// run the others wait at.
    fn check_barrier(&mut self, out: &mut Vec<(Endpoint, Msg)>) {
        let staying = self.staying();
        let Some(waited) = staying.iter().map(|&p| self.ended[p as usize]).max() else {
            return;
        };
        if let Some(gone) =
            (0..self.world.processes).find(|&p| self.left[p] && self.ended[p] < waited)
        {
            return self.reject_all(
                format!(
                    "process {gone} left the cluster after run {} while others ended run {waited}",
                    self.ended[gone]
                ),
                out,
            );
        }
        let all = self.ended.iter().copied().min().unwrap_or(0);
        if all <= self.run {
            return;
        }
        self.run = all;
        let start = self.clocks.max_clock();
        if let Err(e) = self.clocks.resume_all(start) {
            return self.reject_all(format!("run {all} cannot end: {e}"), out);
        }
        for p in staying {
            out.push((
                Endpoint::Client(p),
                Msg::RunReady {
                    shard: self.id,
                    run: all,
                    start,
                },
            ));
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
                self.reject(from, format!("fetch of unknown table #{}", key.table), out);
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
            for (_worker, batch, slab) in batches {
                self.apply(batch, min);
                if let Some((layout, positions, slab)) = slab {
                    let applied = self
                        .arena
                        .apply_slab(&layout, positions.as_deref(), &slab, min);
                    if let Err(reason) = applied {
                        self.reject_all(reason, out);
                    }
                }
            }
        }
        for p in self.staying() {
            out.push((
                Endpoint::Client(p),
                Msg::MinClock {
                    shard: self.id,
                    clock: min,
                },
            ));
        }
        for (from, epoch, want) in self.slab_deferred.release(min) {
            self.reply_slab(from, epoch, want, out);
        }
        let mut by_process: FxHashMap<ProcessId, Vec<RowKey>> = FxHashMap::default();
        for (from, key) in self.deferred.release(min) {
            by_process.entry(from).or_default().push(key);
        }
        for (from, keys) in by_process {
            self.reply(from, keys, out);
        }
    }

    /// Adds `batch`, visible from data clock `now`.
    fn apply(&mut self, batch: RowBatch, now: Clock) {
        for (key, delta) in batch {
            let Some(elem) = self.table(key.table).map(|m| m.elem) else {
                continue;
            };
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

    fn reply(&self, to: ProcessId, keys: Vec<RowKey>, out: &mut Vec<(Endpoint, Msg)>) {
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
        out.push((
            Endpoint::Client(to),
            Msg::Rows {
                shard: self.id,
                data_clock: self.clocks.min_clock(),
                rows,
            },
        ));
    }

    /// Subscribes `from` to a plan: rows new to the arena move in with their values.
    fn specialize(
        &mut self,
        from: ProcessId,
        epoch: u32,
        (keys, chunk_ends, chunk_phases): (&[RowKey], &[u32], &[u64]),
        updaters: Vec<(WorkerId, Vec<u32>)>,
        out: &mut Vec<(Endpoint, Msg)>,
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
    fn reply_slab(
        &mut self,
        to: ProcessId,
        epoch: u32,
        want: Want,
        out: &mut Vec<(Endpoint, Msg)>,
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
            Want::All => (0..phases.len()).collect(),
            Want::Chunk(c) => vec![c as usize],
            Want::Phase(p) => {
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
            out.push((
                Endpoint::Client(to),
                Msg::SlabRows {
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

    /// This shard's part of a migration: every row it holds whose home under the new
    /// placement is another shard goes there in one [`Msg::Adopt`] per shard (empty ones
    /// too, so each shard knows when it has everything). Only between runs, before any
    /// plan: rows in the arena or updates not yet visible could not follow.
    fn migrate(
        &mut self,
        from: ProcessId,
        overrides: Vec<(RowKey, ShardId)>,
        out: &mut Vec<(Endpoint, Msg)>,
    ) {
        let total = self.world.total_shards();
        if self.world.process_of_shard(self.id) != Some(from) {
            return self.reject_all(
                format!("process {from} asked shard {} to migrate", self.id),
                out,
            );
        }
        if !self.pending.is_empty() || self.arena.rows().next().is_some() {
            return self.reject_all(
                "a migration after updates are pending or rows are planned".into(),
                out,
            );
        }
        if let Some((key, s)) = overrides.iter().find(|(_, s)| *s as usize >= total) {
            return self.reject_all(format!("migration sends {key:?} to shard {s}"), out);
        }
        let state = self.migration.get_or_insert_with(|| Migration {
            handed_over: false,
            adopted_from: vec![false; total],
        });
        if state.handed_over {
            return self.reject_all("a second migration before the first ended".into(), out);
        }
        state.handed_over = true;
        let mut placement = Placement::hashed(total);
        for (key, shard) in overrides {
            placement.set(key, shard);
        }
        let mut leaving: Vec<RowKey> = self
            .rows
            .iter()
            .map(|e| *e.key())
            .filter(|&k| placement.shard_of(k) != self.id)
            .collect();
        leaving.sort_unstable();
        let mut to: Vec<Vec<(RowKey, AlignedBuf)>> = vec![Vec::new(); total];
        for key in leaving {
            if let Some((key, value)) = self.rows.remove(&key) {
                to[placement.shard_of(key) as usize].push((key, value));
            }
        }
        for (shard, rows) in to.into_iter().enumerate() {
            if shard != self.id as usize {
                let adopt = Msg::Adopt {
                    shard: self.id,
                    rows,
                };
                out.push((Endpoint::Shard(shard as ShardId), adopt));
            }
        }
        self.check_migrated(out);
    }

    /// Rows shard `from` handed over in a migration.
    fn adopt(
        &mut self,
        from: ShardId,
        rows: Vec<(RowKey, AlignedBuf)>,
        out: &mut Vec<(Endpoint, Msg)>,
    ) {
        let total = self.world.total_shards();
        if from as usize >= total || from == self.id {
            return self.reject_all(format!("rows adopted from shard {from}"), out);
        }
        let state = self.migration.get_or_insert_with(|| Migration {
            handed_over: false,
            adopted_from: vec![false; total],
        });
        if std::mem::replace(&mut state.adopted_from[from as usize], true) {
            return self.reject_all(format!("rows adopted twice from shard {from}"), out);
        }
        for (key, value) in rows {
            if self.rows.insert(key, value).is_some() {
                return self.reject_all(format!("{key:?} adopted but already here"), out);
            }
        }
        self.check_migrated(out);
    }

    /// Writes this shard's rows as its part of the checkpoint at `clock` in `root` and
    /// answers `from` with the part's entry or the error. Only between runs: with updates
    /// pending, workers at another clock, a run ending, or a migration or restore under
    /// way, the rows are not the checkpoint's clock's, and the protocol was broken.
    fn checkpoint(
        &mut self,
        from: ProcessId,
        root: &Path,
        clock: Clock,
        out: &mut Vec<(Endpoint, Msg)>,
    ) {
        if self.world.process_of_shard(self.id) != Some(from) {
            return self.reject_all(
                format!("process {from} asked shard {} for a checkpoint", self.id),
                out,
            );
        }
        if let Err(reason) = self.between_runs_at(clock) {
            return self.reject_all(format!("a checkpoint at clock {clock} {reason}"), out);
        }
        let part = self
            .write_rows(root, clock)
            .map(|e| (e.name, e.size, e.sha256))
            .map_err(|e| e.to_string());
        let shard = self.id;
        out.push((Endpoint::Client(from), Msg::Checkpointed { shard, part }));
    }

    /// `Ok` if every update up to `clock` is applied and none after: no update pending,
    /// every worker at `clock`, no run ending, no migration or restore under way.
    fn between_runs_at(&self, clock: Clock) -> Result<(), String> {
        let (min, max) = (self.clocks.min_clock(), self.clocks.max_clock());
        if !self.pending.is_empty() {
            Err("while updates are pending".into())
        } else if min != clock || max != clock {
            Err(format!(
                "while the shard's workers are at clocks {min} to {max}"
            ))
        } else if let Some(p) = self
            .staying()
            .into_iter()
            .find(|&p| self.ended[p as usize] != self.run)
        {
            Err(format!(
                "while process {p} is ending run {}",
                self.ended[p as usize]
            ))
        } else if self.migration.is_some() {
            Err("during a migration".into())
        } else if self.restore.is_some() {
            Err("during a restore".into())
        } else {
            Ok(())
        }
    }

    /// Writes every row this shard holds that is not all zeros, generic and arena rows
    /// alike, sorted by key, as part `shard-<id>.rows` (see [`rows_part`]).
    fn write_rows(&self, root: &Path, clock: Clock) -> Result<PartEntry, CheckpointError> {
        let mut keys: Vec<(RowKey, bool)> = self
            .rows
            .iter()
            .filter(|e| rows_part::keep(e.value().as_bytes()))
            .map(|e| (*e.key(), false))
            .collect();
        keys.extend(
            self.arena
                .rows()
                .filter(|(_, b)| rows_part::keep(b))
                .map(|(k, _)| (k, true)),
        );
        keys.sort_unstable_by_key(|(k, _)| *k);
        let part = PartWriter::standalone(root, clock, &rows_part::part_name(self.id))?;
        part.write_all_with(|out| {
            rows_part::write_header(out, self.id, clock, keys.len() as u64)?;
            for (key, in_arena) in keys {
                if in_arena {
                    if let Some(row) = self.arena.row(key) {
                        rows_part::write_row(out, key, row)?;
                    }
                } else if let Some(row) = self.rows.get(&key) {
                    rows_part::write_row(out, key, row.as_bytes())?;
                }
            }
            Ok(())
        })
    }

    /// Rows `from` read from a checkpoint at `clock` whose home is this shard. Only
    /// before any run, plan or migration: the shard must hold nothing yet.
    fn restore(
        &mut self,
        from: ProcessId,
        clock: Clock,
        rows: Vec<(RowKey, AlignedBuf)>,
        last: bool,
        out: &mut Vec<(Endpoint, Msg)>,
    ) {
        if self.restore.is_none() {
            let used = self.restored
                || self.run != 0
                || self.clocks.max_clock() != 0
                || !self.pending.is_empty()
                || !self.rows.is_empty()
                || self.arena.rows().next().is_some()
                || self.migration.is_some();
            if used {
                return self.reject_all(
                    "a resume after runs, a plan, a migration or another resume".into(),
                    out,
                );
            }
            self.restore = Some(Restoring {
                clock,
                done: vec![false; self.world.processes],
            });
        }
        let Some(state) = self.restore.as_mut() else {
            return;
        };
        if state.clock != clock {
            let other = state.clock;
            return self.reject_all(
                format!("process {from} resumes from clock {clock}, another from clock {other}"),
                out,
            );
        }
        if std::mem::replace(&mut state.done[from as usize], last) {
            return self.reject_all(
                format!("rows restored by process {from} after its last"),
                out,
            );
        }
        if let Err(reason) = self.validate(&rows) {
            return self.reject_all(format!("restored rows: {reason}"), out);
        }
        for (key, value) in rows {
            if self.rows.insert(key, value).is_some() {
                return self.reject_all(format!("{key:?} restored twice"), out);
            }
        }
        self.check_restored(out);
    }

    /// Once every process has sent its last rows: every worker starts at the checkpoint's
    /// clock, and every process is told.
    fn check_restored(&mut self, out: &mut Vec<(Endpoint, Msg)>) {
        let Some(state) = self.restore.as_ref().filter(|r| r.done.iter().all(|&d| d)) else {
            return;
        };
        let clock = state.clock;
        self.restore = None;
        self.restored = true;
        if let Err(e) = self.clocks.resume_all(clock) {
            return self.reject_all(format!("a resume at clock {clock}: {e}"), out);
        }
        for p in self.staying() {
            out.push((Endpoint::Client(p), Msg::Restored { shard: self.id }));
        }
    }

    /// Tells every process once this shard has handed over and adopted everything.
    fn check_migrated(&mut self, out: &mut Vec<(Endpoint, Msg)>) {
        let done = self.migration.as_ref().is_some_and(|m| {
            m.handed_over
                && m.adopted_from
                    .iter()
                    .enumerate()
                    .all(|(s, &a)| a || s == self.id as usize)
        });
        if done {
            self.migration = None;
            for p in self.staying() {
                out.push((Endpoint::Client(p), Msg::Migrated { shard: self.id }));
            }
        }
    }

    fn reject(&self, to: ProcessId, reason: String, out: &mut Vec<(Endpoint, Msg)>) {
        out.push((
            Endpoint::Client(to),
            Msg::Rejected {
                shard: self.id,
                reason,
            },
        ));
    }

    /// A protocol error that fails the cluster: every process still in it is told.
    fn reject_all(&self, reason: String, out: &mut Vec<(Endpoint, Msg)>) {
        for p in self.staying() {
            self.reject(p, reason.clone(), out);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::element::ElemType;
    use std::sync::Arc;

    fn shard_with_table(workers: usize) -> Shard {
        shard_in(0, World::single(workers, 1))
    }

    /// Table 0, "t": two `i64` per row.
    fn table_t() -> TableMeta {
        TableMeta {
            id: 0,
            name: "t".into(),
            width: 2,
            elem: ElemType::I64,
        }
    }

    /// Shard `id` of `world`, with [`table_t`] created.
    fn shard_in(id: ShardId, world: World) -> Shard {
        let mut s = Shard::new(id, world);
        s.handle(Msg::CreateTable { meta: table_t() }, &mut Vec::new());
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
            epoch: 0,
            rows: rows
                .iter()
                .map(|(r, v)| (RowKey::new(0, *r), AlignedBuf::from_slice(v)))
                .collect(),
            slab: AlignedBuf::default(),
            slab_rows: None,
        }
    }

    fn fetch(row: u64, required: Clock) -> Msg {
        Msg::Fetch {
            from: 0,
            rows: vec![(RowKey::new(0, row), required)],
        }
    }

    #[test]
    fn a_clock_refresh_ships_only_the_chunks_read_in_that_clock() {
        let mut s = shard_with_table(1);
        let mut out = Vec::new();
        let specialize = Msg::Specialize {
            from: 0,
            epoch: 1,
            keys: (0..4).map(|r| RowKey::new(0, r)).collect(),
            chunk_ends: vec![1, 2, 3, 4],
            // Chunk 0 is read in clock 0, chunk 1 in clock 1, chunk 2 in both, chunk 3
            // never (its rows are only updated).
            chunk_phases: vec![0b01, 0b10, 0b11, 0],
            updaters: vec![],
        };
        s.handle(specialize, &mut out);
        let chunks_for = |s: &mut Shard, want| {
            let mut out = Vec::new();
            let msg = Msg::SlabFetch {
                from: 0,
                epoch: 1,
                required: 0,
                want,
            };
            s.handle(msg, &mut out);
            let chunks = out.iter().filter_map(|(_, m)| match m {
                Msg::SlabRows { chunk, .. } => Some(*chunk),
                _ => None,
            });
            chunks.collect::<Vec<_>>()
        };
        assert_eq!(chunks_for(&mut s, Want::Phase(0)), [0, 2]);
        assert_eq!(chunks_for(&mut s, Want::Phase(1)), [1, 2]);
        assert_eq!(
            chunks_for(&mut s, Want::Phase(65)),
            [1, 2],
            "clocks wrap at 64"
        );
        assert!(chunks_for(&mut s, Want::Phase(2)).is_empty());
        assert_eq!(chunks_for(&mut s, Want::Chunk(3)), [3]);
        assert_eq!(chunks_for(&mut s, Want::All), [0, 1, 2, 3]);
        let bad = Msg::Specialize {
            from: 0,
            epoch: 2,
            keys: vec![RowKey::new(0, 0)],
            chunk_ends: vec![1],
            chunk_phases: vec![],
            updaters: vec![],
        };
        s.handle(bad, &mut out);
        assert!(
            out.iter().any(|(_, m)| matches!(m, Msg::Rejected { reason, .. } if reason.contains("0 chunk phases for 1 chunks"))),
            "{out:?}"
        );
    }

    /// Shard 1 of 3 (one per process, one worker each) holding rows 0..8 of table 0.
    fn seeded_middle_shard() -> Shard {
        let world = World {
            processes: 3,
            workers: 1,
            shards: 1,
        };
        let mut s = shard_in(1, world);
        let mut out = Vec::new();
        let rows: Vec<(u64, [i64; 2])> = (0..8).map(|r| (r, [r as i64, 1])).collect();
        s.handle(clock(0, 1, &rows), &mut out);
        s.handle(clock(1, 1, &[]), &mut out);
        s.handle(clock(2, 1, &[]), &mut out);
        assert!(s.pending.is_empty(), "{out:?}");
        s
    }

    #[test]
    fn a_migration_completes_under_every_order_of_its_messages_and_loses_nothing() {
        let key = |r| RowKey::new(0, r);
        // Rows 100 and 200 come from shards 0 and 2: the same placement sends them here.
        let overrides = vec![
            (key(0), 0),
            (key(1), 2),
            (key(2), 1),
            (key(100), 1),
            (key(200), 1),
        ];
        let mut placement = Placement::hashed(3);
        for &(k, s) in &overrides {
            placement.set(k, s);
        }
        let adopt = |from: ShardId, row: u64| Msg::Adopt {
            shard: from,
            rows: vec![(key(row), AlignedBuf::from_slice(&[row as i64, 7]))],
        };
        let script = [
            Msg::Migrate {
                from: 1,
                overrides: overrides.clone(),
            },
            adopt(0, 100),
            adopt(2, 200),
        ];
        let orders = [
            [0, 1, 2],
            [0, 2, 1],
            [1, 0, 2],
            [1, 2, 0],
            [2, 0, 1],
            [2, 1, 0],
        ];
        for order in orders.map(|o| o.map(|i| script[i].clone())) {
            let mut s = seeded_middle_shard();
            let mut out = Vec::new();
            for (i, msg) in order.iter().enumerate() {
                s.handle(msg.clone(), &mut out);
                let migrated = out
                    .iter()
                    .filter(|(_, m)| matches!(m, Msg::Migrated { shard: 1 }))
                    .count();
                assert_eq!(migrated, if i == 2 { 3 } else { 0 }, "{order:?}: {out:?}");
            }
            assert!(
                !out.iter().any(|(_, m)| matches!(m, Msg::Rejected { .. })),
                "{out:?}"
            );
            // What left went to its new home, one Adopt per other shard.
            let mut handed: Vec<(ShardId, u64)> = Vec::new();
            for (to, m) in &out {
                if let (Endpoint::Shard(t), Msg::Adopt { shard: 1, rows }) = (to, m) {
                    handed.extend(rows.iter().map(|(k, _)| (*t, k.row)));
                }
            }
            let adopts = out
                .iter()
                .filter(|(_, m)| matches!(m, Msg::Adopt { .. }))
                .count();
            assert_eq!(adopts, 2);
            let mut kept: Vec<u64> = s.rows.iter().map(|e| e.key().row).collect();
            kept.sort_unstable();
            for r in 0..8 {
                let home = placement.shard_of(key(r));
                if home == 1 {
                    assert!(kept.contains(&r), "row {r} stays");
                } else {
                    assert!(
                        handed.contains(&(home, r)),
                        "row {r} goes to {home}: {handed:?}"
                    );
                }
            }
            assert!(
                handed.contains(&(0, 0)) && handed.contains(&(2, 1)),
                "{handed:?}"
            );
            assert!(kept.contains(&2) && kept.contains(&100) && kept.contains(&200));
            assert_eq!(s.rows.get(&key(100)).unwrap().cast::<i64>(), [100, 7]);
        }
    }

    #[test]
    fn a_bad_migration_is_a_protocol_error() {
        let rejected = |msgs: Vec<Msg>| {
            let mut s = seeded_middle_shard();
            let mut out = Vec::new();
            for m in msgs {
                s.handle(m, &mut out);
            }
            out.iter().any(|(_, m)| matches!(m, Msg::Rejected { .. }))
        };
        let migrate = |from| Msg::Migrate {
            from,
            overrides: vec![],
        };
        let adopt = |from| Msg::Adopt {
            shard: from,
            rows: vec![],
        };
        assert!(!rejected(vec![migrate(1), adopt(0), adopt(2)]));
        assert!(rejected(vec![migrate(0)]), "another process's shard");
        assert!(rejected(vec![adopt(0), adopt(0)]), "adopted twice");
        assert!(rejected(vec![adopt(1)]), "from itself");
        assert!(
            rejected(vec![migrate(1), migrate(1)]),
            "migrated twice at once"
        );
        let far = Msg::Migrate {
            from: 1,
            overrides: vec![(RowKey::new(0, 0), 3)],
        };
        assert!(rejected(vec![far]), "a shard that does not exist");
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
            epoch: 0,
            rows: vec![
                (RowKey::new(0, 1), AlignedBuf::from_slice(&[1i64, 1])),
                (RowKey::new(0, 2), AlignedBuf::from_slice(&[1i64])),
            ],
            slab: AlignedBuf::default(),
            slab_rows: None,
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
        let mut s = Shard::new(0, World::single(2, 1));
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
            epoch: 0,
            rows: vec![(RowKey::new(0, 0), AlignedBuf::from_slice(&[v]))],
            slab: AlignedBuf::default(),
            slab_rows: None,
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

    /// Every way to merge `a` and `b` keeping each one's order (what a transport that is
    /// FIFO per sender allows).
    fn interleavings<T: Clone>(a: &[T], b: &[T]) -> Vec<Vec<T>> {
        match (a.split_first(), b.split_first()) {
            (None, _) => vec![b.to_vec()],
            (_, None) => vec![a.to_vec()],
            (Some((x, ra)), Some((y, rb))) => {
                let mut out = Vec::new();
                for mut rest in interleavings(ra, b) {
                    rest.insert(0, x.clone());
                    out.push(rest);
                }
                for mut rest in interleavings(a, rb) {
                    rest.insert(0, y.clone());
                    out.push(rest);
                }
                out
            }
        }
    }

    /// What process `p` (one worker, global id `p`) sends in one run of a two-process
    /// cluster, until it waits at the run barrier; then what it sends after the barrier.
    fn process_script(p: u32) -> (Vec<Msg>, Vec<Msg>) {
        let meta = table_t();
        let key = |r: u64| RowKey::new(0, r);
        // The processes order the shared rows differently and each has a row of its own.
        let keys = if p == 0 {
            vec![key(1), key(2), key(10)]
        } else {
            vec![key(11), key(2), key(1)]
        };
        let delta = |v: i64| [v, -v];
        let slab: Vec<i64> = if p == 0 {
            [delta(1), delta(2)].concat() // slots 0, 1: rows 1, 2
        } else {
            [delta(30), delta(40)].concat() // slots 1, 2: rows 2, 1
        };
        let before = vec![
            Msg::CreateTable { meta },
            Msg::Specialize {
                from: p,
                epoch: 1,
                keys,
                chunk_ends: vec![1, 3],
                chunk_phases: vec![u64::MAX; 2],
                updaters: vec![(p, if p == 0 { vec![0, 1] } else { vec![1, 2] })],
            },
            Msg::Clock {
                worker: p,
                clock: 1,
                epoch: 1,
                rows: vec![(key(5), AlignedBuf::from_slice(&[100 + i64::from(p), 1]))],
                slab: AlignedBuf::from_slice(&slab),
                slab_rows: None,
            },
            Msg::SlabFetch {
                from: p,
                epoch: 1,
                required: 1,
                want: Want::All,
            },
            Msg::Finish { worker: p },
            Msg::RunEnd { from: p, run: 1 },
        ];
        let after = vec![
            Msg::Fetch {
                from: p,
                rows: vec![(key(5), 1), (key(2), 1)],
            },
            Msg::Leave { from: p },
        ];
        (before, after)
    }

    /// The answers process `p` got, in a form independent of arrival order.
    fn answers_to(p: u32, out: &[(Endpoint, Msg)]) -> Vec<String> {
        let mut v: Vec<String> = out
            .iter()
            .filter(|(to, _)| *to == Endpoint::Client(p))
            .filter_map(|(_, m)| match m {
                Msg::Rejected { reason, .. } => panic!("rejected: {reason}"),
                Msg::MinClock { .. } => None,
                Msg::Rows {
                    rows, data_clock, ..
                } => Some(format!(
                    "rows@{data_clock} {:?}",
                    rows.iter()
                        .map(|(k, b)| (k.row, b.cast::<i64>().to_vec()))
                        .collect::<Vec<_>>()
                )),
                Msg::SlabRows {
                    chunk,
                    data_clock,
                    bytes,
                    epoch,
                    ..
                } => Some(format!(
                    "slab {epoch}/{chunk}@{data_clock} {:?}",
                    bytes.cast::<i64>()
                )),
                other => Some(format!("{other:?}")),
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn two_processes_get_the_same_answers_in_every_order_the_transport_allows() {
        let world = two_process_world();
        let ((b0, a0), (b1, a1)) = (process_script(0), process_script(1));
        let mut expected: Option<(Vec<String>, Vec<String>)> = None;
        let mut orders = 0;
        // Before the barrier any merge is possible; after it, a process sends only once
        // the barrier answered, i.e. after both `RunEnd`s.
        for before in interleavings(&b0, &b1) {
            for after in interleavings(&a0, &a1) {
                orders += 1;
                let mut s = Shard::new(0, world);
                let mut out = Vec::new();
                for m in before.iter().chain(&after) {
                    s.handle(m.clone(), &mut out);
                }
                assert!(s.released(), "both processes left");
                let got = (answers_to(0, &out), answers_to(1, &out));
                match &expected {
                    None => expected = Some(got),
                    Some(e) => assert_eq!(&got, e),
                }
            }
        }
        assert_eq!(orders, 924 * 6);
        let (p0, p1) = expected.unwrap();
        // Row 2 got 2 (process 0) and 30 (process 1); row 1 got 1 and 40.
        assert!(p0.contains(&"slab 1/0@1 [41, -41]".to_string()), "{p0:?}");
        assert!(
            p0.contains(&"slab 1/1@1 [32, -32, 0, 0]".to_string()),
            "{p0:?}"
        );
        assert!(
            p1.contains(&"slab 1/1@1 [32, -32, 41, -41]".to_string()),
            "{p1:?}"
        );
        assert!(p1
            .iter()
            .any(|a| a.contains("RunReady") && a.contains("start: 1")));
        assert!(
            p0.contains(&"rows@1 [(5, [201, 2]), (2, [32, -32])]".to_string()),
            "{p0:?}"
        );
    }

    /// A [`LocalArena`] that records the refreshes written to it as [`answers_to`]
    /// formats a `SlabRows`, with the changed rows' positions.
    #[derive(Default)]
    struct Written(std::sync::Mutex<Vec<String>>);

    impl LocalArena for Written {
        fn write_refresh(
            &self,
            _shard: ShardId,
            epoch: u32,
            chunk: u32,
            data_clock: Clock,
            rows: &crate::server::RefreshRows<'_>,
        ) {
            let words: Vec<u64> = rows.slices().flatten().copied().collect();
            assert_eq!(words.len(), rows.words());
            let values: &[i64] = bytemuck::cast_slice(&words);
            let at = rows.positions().map(<[u32]>::to_vec);
            let line = format!("slab {epoch}/{chunk}@{data_clock} {values:?} at {at:?}");
            self.0.lock().unwrap().push(line);
        }
    }

    /// [`answers_to`], with the positions of a `SlabRows`' changed rows.
    fn answers_with_rows(p: u32, out: &[(Endpoint, Msg)]) -> Vec<String> {
        let mut v: Vec<String> = answers_to(p, out)
            .into_iter()
            .filter(|a| !a.starts_with("slab "))
            .collect();
        for (to, m) in out {
            if let (
                true,
                Msg::SlabRows {
                    epoch,
                    chunk,
                    data_clock,
                    rows,
                    bytes,
                    ..
                },
            ) = (*to == Endpoint::Client(p), m)
            {
                let values = bytes.cast::<i64>();
                v.push(format!(
                    "slab {epoch}/{chunk}@{data_clock} {values:?} at {rows:?}"
                ));
            }
        }
        v.sort();
        v
    }

    #[test]
    fn a_process_in_the_shards_os_process_gets_the_same_refreshes_written_not_sent() {
        let world = two_process_world();
        let ((b0, a0), (b1, a1)) = (process_script(0), process_script(1));
        let mut orders = 0;
        for before in interleavings(&b0, &b1) {
            for after in interleavings(&a0, &a1) {
                orders += 1;
                // The same messages to a shard sending every refresh, and to one writing
                // process 0's into its arena.
                let written = Arc::new(Written::default());
                let local: Weak<dyn LocalArena> = Arc::downgrade(&written) as _;
                let mut sent = (Shard::new(0, world), Vec::new());
                let mut direct = (Shard::new(0, world).with_local_arena(0, local), Vec::new());
                for m in before.iter().chain(&after) {
                    sent.0.handle(m.clone(), &mut sent.1);
                    direct.0.handle(m.clone(), &mut direct.1);
                }
                let slabs_to = |p: u32, out: &[(Endpoint, Msg)]| {
                    out.iter()
                        .filter(|(to, _)| *to == Endpoint::Client(p))
                        .filter(|(_, m)| matches!(m, Msg::SlabRows { .. }))
                        .count()
                };
                assert_eq!(
                    slabs_to(0, &direct.1),
                    0,
                    "process 0's refreshes are written"
                );
                assert!(slabs_to(0, &sent.1) > 0);
                // Process 1 (another OS process) is sent the same as before.
                assert_eq!(
                    answers_with_rows(1, &direct.1),
                    answers_with_rows(1, &sent.1)
                );
                // Process 0 gets the same answers, its refreshes through its arena.
                let mut got = answers_with_rows(0, &direct.1);
                got.extend(written.0.lock().unwrap().drain(..));
                got.sort();
                assert_eq!(got, answers_with_rows(0, &sent.1));
            }
        }
        assert_eq!(orders, 924 * 6);
    }

    #[test]
    fn a_local_arena_that_is_gone_gets_its_refreshes_sent() {
        let world = two_process_world();
        let ((b0, a0), (b1, a1)) = (process_script(0), process_script(1));
        let gone: Weak<dyn LocalArena> = Arc::downgrade(&Arc::new(Written::default())) as _;
        let mut s = Shard::new(0, world).with_local_arena(0, gone);
        let mut out = Vec::new();
        for m in b0.iter().chain(&b1).chain(&a0).chain(&a1) {
            s.handle(m.clone(), &mut out);
        }
        assert!(out
            .iter()
            .any(|(to, m)| *to == Endpoint::Client(0) && matches!(m, Msg::SlabRows { .. })));
    }

    #[test]
    fn a_process_that_leaves_early_fails_the_barrier_instead_of_hanging_it() {
        let world = World {
            processes: 2,
            workers: 1,
            shards: 1,
        };
        let mut s = Shard::new(0, world);
        let mut out = Vec::new();
        s.handle(Msg::Finish { worker: 0 }, &mut out);
        s.handle(Msg::RunEnd { from: 0, run: 1 }, &mut out);
        s.handle(Msg::Leave { from: 1 }, &mut out);
        let rejected: Vec<&String> = out
            .iter()
            .filter_map(|(to, m)| match m {
                Msg::Rejected { reason, .. } if *to == Endpoint::Client(0) => Some(reason),
                _ => None,
            })
            .collect();
        assert_eq!(rejected.len(), 1, "{out:?}");
        assert!(rejected[0].contains("process 1 left"), "{}", rejected[0]);
    }

    #[test]
    fn slabs_of_a_plan_the_shard_does_not_hold_and_clock_regressions_are_rejected() {
        let mut s = shard_with_table(1);
        let mut out = Vec::new();
        let slab = |epoch| Msg::Clock {
            worker: 0,
            clock: 1,
            epoch,
            rows: Vec::new(),
            slab: AlignedBuf::from_slice(&[1i64, 1]),
            slab_rows: None,
        };
        s.handle(slab(1), &mut out);
        assert!(
            matches!(&out[0].1, Msg::Rejected { reason, .. } if reason.contains("before process 0 sent any plan")),
            "{out:?}"
        );
        out.clear();
        s.handle(clock(0, 1, &[]), &mut out);
        assert!(
            matches!(&out[0].1, Msg::Rejected { reason, .. } if reason.contains("worker 0 sent clock 1 after clock 1")),
            "{out:?}"
        );
    }

    /// A sparse slab (the touched rows and their positions in the worker's layout) adds
    /// to those rows only; a position beyond the layout is a protocol error that changes
    /// nothing but still counts the clock.
    #[test]
    fn sparse_slabs_add_to_their_rows_and_bad_positions_are_rejected() {
        let mut s = shard_with_table(1);
        let mut out = Vec::new();
        let key = |r: u64| RowKey::new(0, r);
        s.handle(Msg::CreateTable { meta: table_t() }, &mut out);
        s.handle(
            Msg::Specialize {
                from: 0,
                epoch: 1,
                keys: vec![key(1), key(2), key(3)],
                chunk_ends: vec![3],
                chunk_phases: vec![u64::MAX],
                updaters: vec![(0, vec![0, 1, 2])],
            },
            &mut out,
        );
        let sparse = |clock, positions: Vec<u32>, values: &[i64]| Msg::Clock {
            worker: 0,
            clock,
            epoch: 1,
            rows: Vec::new(),
            slab: AlignedBuf::from_slice(values),
            slab_rows: Some(positions),
        };
        out.clear();
        s.handle(sparse(1, vec![0, 2], &[1, 2, 5, 6]), &mut out);
        assert!(
            !out.iter().any(|(_, m)| matches!(m, Msg::Rejected { .. })),
            "{out:?}"
        );
        s.handle(sparse(2, vec![1, 3], &[7, 7, 9, 9]), &mut out);
        let rejected: Vec<&String> = out
            .iter()
            .filter_map(|(_, m)| match m {
                Msg::Rejected { reason, .. } => Some(reason),
                _ => None,
            })
            .collect();
        assert_eq!(rejected.len(), 1, "{out:?}");
        assert!(
            rejected[0].contains("names row 3 of a layout of 3"),
            "{}",
            rejected[0]
        );
        out.clear();
        s.handle(
            Msg::SlabFetch {
                from: 0,
                epoch: 1,
                required: 2,
                want: Want::All,
            },
            &mut out,
        );
        let whole: Vec<i64> = out
            .iter()
            .find_map(|(_, m)| match m {
                Msg::SlabRows {
                    bytes, rows: None, ..
                } => Some(bytes.cast::<i64>().to_vec()),
                _ => None,
            })
            .expect("the chunk");
        assert_eq!(
            whole,
            [1, 2, 0, 0, 5, 6],
            "clock 2's bad slab added nothing"
        );
    }

    /// A fresh directory under the system's temporary directory, removed when dropped.
    struct TestDir(std::path::PathBuf);

    impl TestDir {
        fn new(name: &str) -> Self {
            use std::sync::atomic::{AtomicUsize, Ordering};
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let dir = std::env::temp_dir()
                .join(format!("iterstore-shard-{}-{n}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TestDir(dir)
        }

        /// The root, with the directory of the checkpoint at `clock` begun in it.
        fn begun(&self, clock: Clock) -> &Path {
            let dir = self.0.join(crate::checkpoint::dir_name(clock));
            std::fs::create_dir_all(dir).unwrap();
            &self.0
        }
    }

    impl Drop for TestDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn two_process_world() -> World {
        World {
            processes: 2,
            workers: 1,
            shards: 1,
        }
    }

    fn rejected(out: &[(Endpoint, Msg)]) -> Vec<&str> {
        out.iter()
            .filter_map(|(_, m)| match m {
                Msg::Rejected { reason, .. } => Some(reason.as_str()),
                _ => None,
            })
            .collect()
    }

    fn checkpointed(out: &[(Endpoint, Msg)]) -> Vec<(Endpoint, crate::msg::ShardPart)> {
        out.iter()
            .filter_map(|(to, m)| match m {
                Msg::Checkpointed { part, .. } => Some((*to, part.clone())),
                _ => None,
            })
            .collect()
    }

    /// The rows of a rows part, as `(row, values)` of table 0 (`i64` pairs).
    fn rows_in(path: &Path) -> (rows_part::Header, Vec<(u64, Vec<i64>)>) {
        let bytes = std::fs::read(path).unwrap();
        let mut rows = Vec::new();
        let header = rows_part::read(
            &bytes[..],
            |t| (t == 0).then_some(16),
            |k, b| rows.push((k.row, b.cast::<i64>().to_vec())),
        )
        .unwrap();
        (header, rows)
    }

    #[test]
    fn a_checkpoint_writes_generic_and_arena_rows_sorted_without_zero_rows() {
        let dir = TestDir::new("rows");
        let mut s = shard_with_table(1);
        let mut out = Vec::new();
        // Rows 4 and 2 the generic way, rows 3 and 9 planned (9 is never updated).
        s.handle(clock(0, 1, &[(4, [1, 2]), (2, [3, 4])]), &mut out);
        let specialize = Msg::Specialize {
            from: 0,
            epoch: 1,
            keys: vec![RowKey::new(0, 3), RowKey::new(0, 9)],
            chunk_ends: vec![2],
            chunk_phases: vec![1],
            updaters: vec![(0, vec![0])],
        };
        s.handle(specialize, &mut out);
        let slab = Msg::Clock {
            worker: 0,
            clock: 2,
            epoch: 1,
            rows: vec![],
            slab: AlignedBuf::from_slice(&[5i64, 6]),
            slab_rows: None,
        };
        s.handle(slab, &mut out);
        s.handle(Msg::Finish { worker: 0 }, &mut out);
        s.handle(Msg::RunEnd { from: 0, run: 1 }, &mut out);
        out.clear();
        let root = dir.begun(2).to_path_buf();
        s.handle(
            Msg::Checkpoint {
                from: 0,
                root: root.clone(),
                clock: 2,
            },
            &mut out,
        );
        let answers = checkpointed(&out);
        assert_eq!(answers.len(), 1, "{out:?}");
        let (name, size, _) = answers[0].1.clone().unwrap();
        assert_eq!(
            (answers[0].0, name.as_str()),
            (Endpoint::Client(0), "shard-0.rows")
        );
        let path = root.join("ckpt-00000002/shard-0.rows");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
        let (header, rows) = rows_in(&path);
        assert_eq!((header.shard, header.clock, header.rows), (0, 2, 3));
        assert_eq!(
            rows,
            vec![(2, vec![3, 4]), (3, vec![5, 6]), (4, vec![1, 2])]
        );
    }

    #[test]
    fn a_checkpoint_out_of_place_is_a_protocol_error_and_a_failed_write_is_not() {
        let dir = TestDir::new("refused");
        let root = dir.begun(1).to_path_buf();
        let ask = |from, clock| Msg::Checkpoint {
            from,
            root: root.clone(),
            clock,
        };
        // Shard 0 of two processes: worker 0 has sent clock 1, worker 1 has not.
        let mut s = shard_in(0, two_process_world());
        let mut out = Vec::new();
        s.handle(ask(1, 0), &mut out);
        assert!(
            rejected(&out)[0].contains("process 1 asked shard 0"),
            "{out:?}"
        );
        out.clear();
        s.handle(clock(0, 1, &[(1, [1, 1])]), &mut out);
        s.handle(ask(0, 0), &mut out);
        assert!(
            rejected(&out)[0].contains("while updates are pending"),
            "{out:?}"
        );
        out.clear();
        s.handle(clock(1, 1, &[]), &mut out);
        s.handle(ask(0, 0), &mut out);
        assert!(rejected(&out)[0].contains("clocks 1 to 1"), "{out:?}");
        out.clear();
        s.handle(Msg::Finish { worker: 0 }, &mut out);
        s.handle(Msg::RunEnd { from: 0, run: 1 }, &mut out);
        s.handle(ask(0, 1), &mut out);
        assert!(
            rejected(&out)[0].contains("process 0 is ending run 1"),
            "{out:?}"
        );
        out.clear();
        s.handle(Msg::Finish { worker: 1 }, &mut out);
        s.handle(Msg::RunEnd { from: 1, run: 1 }, &mut out);
        out.clear();
        // In place, but not begun: the write fails and says where; the cluster goes on.
        s.handle(ask(0, 7), &mut out);
        assert!(rejected(&out)[0].contains("clocks 1 to 1"), "{out:?}");
        out.clear();
        let elsewhere = Msg::Checkpoint {
            from: 0,
            root: root.join("missing"),
            clock: 1,
        };
        s.handle(elsewhere, &mut out);
        let answers = checkpointed(&out);
        let err = answers[0].1.clone().unwrap_err();
        assert!(
            err.contains("missing/ckpt-00000001") && err.contains("does not exist"),
            "{err}"
        );
        assert!(rejected(&out).is_empty());
        out.clear();
        s.handle(ask(0, 1), &mut out);
        assert!(checkpointed(&out)[0].1.is_ok(), "{out:?}");
    }

    #[test]
    fn a_checkpoint_writes_the_same_bytes_whatever_the_other_process_sends_around_it() {
        let dir = TestDir::new("orders");
        let root = dir.begun(1).to_path_buf();
        let key = |r| RowKey::new(0, r);
        let mine = vec![Msg::Checkpoint {
            from: 0,
            root: root.clone(),
            clock: 1,
        }];
        // Between runs the other process may read and dump; then it leaves.
        let theirs = vec![
            Msg::Fetch {
                from: 1,
                rows: vec![(key(7), 1), (key(1), 1)],
            },
            Msg::Dump { from: 1, table: 0 },
            Msg::Leave { from: 1 },
        ];
        let mut sums = Vec::new();
        for order in interleavings(&mine, &theirs) {
            let mut s = shard_in(0, two_process_world());
            let mut out = Vec::new();
            s.handle(clock(0, 1, &[(1, [1, 2])]), &mut out);
            s.handle(clock(1, 1, &[(1, [10, 20]), (5, [0, 0])]), &mut out);
            for p in 0..2 {
                s.handle(Msg::Finish { worker: p }, &mut out);
                s.handle(Msg::RunEnd { from: p, run: 1 }, &mut out);
            }
            out.clear();
            for m in order {
                s.handle(m, &mut out);
            }
            assert!(rejected(&out).is_empty(), "{out:?}");
            let answers = checkpointed(&out);
            assert_eq!(answers.len(), 1);
            sums.push(answers[0].1.clone().unwrap());
            let (_, rows) = rows_in(&root.join("ckpt-00000001/shard-0.rows"));
            // Row 5 is all zeros and row 7 was only read: neither is written.
            assert_eq!(rows, vec![(1, vec![11, 22])]);
        }
        assert_eq!(sums.len(), 4);
        assert!(sums.iter().all(|s| *s == sums[0]), "{sums:?}");
    }

    /// What process `p` sends in a resume of a two-process cluster: its rows for shard 0
    /// (process 0 in two messages), then after `Restored` a read and `Leave`.
    fn restore_script(p: u32) -> (Vec<Msg>, Vec<Msg>) {
        let meta = table_t();
        let row = |r: u64| (RowKey::new(0, r), AlignedBuf::from_slice(&[r as i64, -1]));
        let restore = |rows, last| Msg::Restore {
            from: p,
            clock: 6,
            rows,
            last,
        };
        let mut before = vec![Msg::CreateTable { meta }];
        if p == 0 {
            before.push(restore(vec![row(1), row(3)], false));
            before.push(restore(vec![row(5)], true));
        } else {
            before.push(restore(vec![row(2)], true));
        }
        let after = vec![
            Msg::Fetch {
                from: p,
                rows: (1..=6).map(|r| (RowKey::new(0, r), 6)).collect(),
            },
            Msg::Leave { from: p },
        ];
        (before, after)
    }

    #[test]
    fn a_restore_completes_once_under_every_order_the_transport_allows() {
        let (b0, a0) = restore_script(0);
        let (b1, a1) = restore_script(1);
        let mut orders = 0;
        for before in interleavings(&b0, &b1) {
            for after in interleavings(&a0, &a1) {
                orders += 1;
                let mut s = Shard::new(0, two_process_world());
                let mut out = Vec::new();
                let last = before.len() - 1;
                for (i, m) in before.iter().enumerate() {
                    s.handle(m.clone(), &mut out);
                    let restored = out
                        .iter()
                        .filter(|(_, m)| matches!(m, Msg::Restored { shard: 0 }))
                        .count();
                    let last_restore = before[i + 1..]
                        .iter()
                        .all(|m| !matches!(m, Msg::Restore { .. }));
                    assert_eq!(restored, if last_restore { 2 } else { 0 }, "{i} of {last}");
                }
                for m in &after {
                    s.handle(m.clone(), &mut out);
                }
                assert!(s.released());
                for p in 0..2 {
                    let answers = answers_to(p, &out);
                    assert!(
                        answers.contains(
                            &"rows@6 [(1, [1, -1]), (2, [2, -1]), (3, [3, -1]), (4, [0, 0]), \
                              (5, [5, -1]), (6, [0, 0])]"
                                .to_string()
                        ),
                        "{answers:?}"
                    );
                }
            }
        }
        assert_eq!(orders, 10 * 6);
    }

    #[test]
    fn a_restore_out_of_place_fails_the_cluster() {
        let refused = |prefix: Vec<Msg>| {
            let mut s = shard_in(0, two_process_world());
            let mut out = Vec::new();
            for m in prefix {
                s.handle(m, &mut out);
            }
            rejected(&out).first().map(|r| r.to_string())
        };
        let restore = |from, clock, rows: Vec<(RowKey, AlignedBuf)>, last| Msg::Restore {
            from,
            clock,
            rows,
            last,
        };
        let row = |t, bytes: &[i64]| (RowKey::new(t, 1), AlignedBuf::from_slice(bytes));
        let ok = vec![restore(0, 4, vec![], true), restore(1, 4, vec![], true)];
        assert_eq!(refused(ok.clone()), None);
        let twice = [ok.clone(), vec![restore(0, 4, vec![], true)]].concat();
        assert!(refused(twice).unwrap().contains("another resume"));
        let after_run = vec![clock(0, 1, &[]), restore(0, 4, vec![], true)];
        assert!(refused(after_run).unwrap().contains("after runs"));
        let clocks = vec![restore(0, 4, vec![], false), restore(1, 5, vec![], true)];
        assert!(refused(clocks).unwrap().contains("another from clock 4"));
        let after_last = vec![restore(0, 4, vec![], true), restore(0, 4, vec![], true)];
        assert!(refused(after_last).unwrap().contains("after its last"));
        let unknown = vec![restore(0, 4, vec![row(3, &[1, 1])], true)];
        assert!(refused(unknown).unwrap().contains("unknown table #3"));
        let narrow = vec![restore(0, 4, vec![row(0, &[1])], true)];
        assert!(refused(narrow)
            .unwrap()
            .contains("has 8 bytes, expected 16"));
        let dup = vec![
            restore(0, 4, vec![row(0, &[1, 1])], false),
            restore(0, 4, vec![row(0, &[1, 1])], true),
        ];
        assert!(refused(dup).unwrap().contains("restored twice"));
        let gone = vec![restore(0, 4, vec![], true), Msg::Leave { from: 1 }];
        assert!(refused(gone)
            .unwrap()
            .contains("process 1 left the cluster during a resume"));
        let gone_after = [ok, vec![Msg::Leave { from: 1 }]].concat();
        assert_eq!(refused(gone_after), None);
    }
}
