//! [`Shard`]: one server shard as a pure state machine — `handle(msg) -> replies` — that
//! does no IO.
//!
//! The shard serves **exact snapshots**: the rows it sends hold exactly the updates of
//! clocks `< min_clock`, no more. Updates of later clocks wait in a pending list and are
//! applied, in `(clock, worker)` order, when the minimum clock passes them. So under BSP
//! every read sees the same values whatever the thread timing or the number of processes
//! (deterministic up to the application's own update order), and a worker adds its own
//! newer updates itself.
//!
//! A shard takes only [`ToShard`] messages, so [`Shard::handle`] has an arm for every kind
//! and none for a message meant for a process. Every process of the cluster talks to every
//! shard. A shard keeps one arena for its planned rows and per process a subscription
//! tagged with that process's plan epoch; runs end at a barrier ([`ToShard::RunEnd`] from
//! every process, then [`ToClient::RunReady`] with the agreed start clock); a shard is done
//! once every process has left it. Shard 0 also holds the [`Coordinator`].
//!
//! **No IO.** Nothing here opens, writes or syncs a file. Besides its replies it has two
//! outputs:
//!
//! - the arena refreshes of the process in its own OS process, which it writes into that
//!   process's arena ([`LocalArena`]) instead of sending them (the same refreshes, in the
//!   same order) — memory shared with that process, not IO;
//! - its part of a checkpoint ([`ToShard::Checkpoint`]), which it asks its driver (`super`,
//!   whoever runs the shard) to write: [`Shard::handle`] returns a [`PartWrite`] instead
//!   of an answer; the driver stores the part through `crate::checkpoint`, streaming the
//!   bytes [`Shard::encode_part`] encodes, and hands the outcome back to
//!   [`Shard::part_written`], which answers [`ToClient::Checkpointed`].
//!
//! Before any run it takes rows back from a checkpoint ([`ToShard::Restore`]), as messages;
//! between runs it sets rows to values the processes give ([`ToShard::SetRows`]).
//!
//! One concept per file; each works on the [`Shard`] defined here:
//!
//! - `tables`: the tables it knows (row shapes) and shard 0's coordinator duties;
//! - `clocks`: the SSP side — workers' clocks, reads waiting for them, what a new
//!   minimum clock releases (driving `crate::consistency`);
//! - `rows`: the rows themselves — the generic map and the arena, adding updates and
//!   slabs, plans' subscriptions, the rows and refreshes reads are answered with;
//! - `runs`: the run barrier and processes leaving;
//! - `migration`: rows (and their rule states) moving between shards under a new
//!   placement;
//! - `checkpoint`: the rows' part of a checkpoint, their rule states with them (what to
//!   write, its bytes, the answer);
//! - `rules`: tables whose updates are gradients, stepped per clock through their rule,
//!   and the rule state each row keeps;
//! - `outer`: rank-k updates sent as factors, multiplied out into row deltas;
//! - `functions`: server functions its own process calls on its rows;
//! - `restore`: rows and their rule states coming back from a checkpoint;
//! - `set`: rows given new values between runs;
//! - `branches`: copies of the rows and rule states, one per branch of the training
//!   state, the live one served;
//! - `replicas`: a primary's backups on other processes, kept in step clock by clock,
//!   and the backups it keeps of others' shards (`docs/replication.md`);
//! - `undo`: a replicated shard's pre-images of its run's clocks, and the rollback that
//!   puts them back;
//! - `salvage`: the copies a shard holds after its cluster failed, and their rows at the
//!   clock the next cluster goes on from;
//!
//! This module holds the state and dispatches messages to those files; it knows nothing
//! of threads, transports, files or the cluster that drives it.

mod branches;
mod checkpoint;
mod clocks;
mod functions;
mod migration;
mod outer;
mod replicas;
mod restore;
mod rows;
mod rules;
mod runs;
mod salvage;
mod set;
mod tables;
mod undo;

#[cfg(test)]
pub(super) mod tests;

pub(crate) use checkpoint::PartWrite;
pub(crate) use replicas::keep_newest;
pub(crate) use salvage::CopyAt;

use self::branches::Branches;
use self::migration::Migration;
use self::replicas::Replicas;
use self::restore::Restoring;
use self::rows::Resolved;
use self::rules::RuleRows;
use self::set::Setting;
use self::undo::UndoLog;
use super::arena::ArenaShard;
use super::coordinator::Coordinator;
use super::LocalArena;
use crate::buf::AlignedBuf;
use crate::consistency::{ClockTable, DeferredReads};
use crate::ids::{Clock, ProcessId, RowKey, ShardId, WorkerId};
use crate::msg::{Envelope, RowBatch, ToClient, ToShard, WantedChunks};
use crate::table::TableMeta;
use crate::world::World;
use dashmap::DashMap;
use rustc_hash::FxBuildHasher;
use std::collections::BTreeMap;
use std::sync::Weak;

/// Updates of one worker for one clock, waiting to become visible: rows sent the generic
/// way, and a slab resolved to its layout when it arrived.
type Pending = (WorkerId, RowBatch, Option<Resolved>);

/// Which processes have sent their last message of a collective that hands the shard
/// rows in several messages (a resume's [`ToShard::Restore`], a set's [`ToShard::SetRows`]).
#[derive(Debug)]
struct Lasts(Vec<bool>);

impl Lasts {
    /// Nobody's last yet, of `processes` processes.
    fn new(processes: usize) -> Self {
        Lasts(vec![false; processes])
    }

    /// Notes a message of `p`, its last if `last`; `false` if `p` had sent its last
    /// already (the protocol was broken).
    fn note(&mut self, p: ProcessId, last: bool) -> bool {
        !std::mem::replace(&mut self.0[p as usize], last)
    }

    /// Whether `p` has sent its last.
    fn done_by(&self, p: ProcessId) -> bool {
        self.0[p as usize]
    }

    /// Whether every process has.
    fn all(&self) -> bool {
        self.0.iter().all(|&d| d)
    }
}

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
    slab_deferred: DeferredReads<(ProcessId, u32, WantedChunks)>,
    /// Per process: the last run it ended.
    ended: Vec<u64>,
    /// The last run every process ended (and this shard answered with `RunReady`).
    run: u64,
    /// Per process: whether it has left.
    left: Vec<bool>,
    /// Per process: whether it has sent work (a clock, a finish, a read that waits) of
    /// the run after `run`.
    working: Vec<bool>,
    /// A migration under way (see [`ToShard::Migrate`]).
    migration: Option<Migration>,
    /// A restore under way (see [`ToShard::Restore`]).
    restore: Option<Restoring>,
    /// Whether a restore has completed (there is only one, before any run).
    restored: bool,
    /// Rows being set between runs (see [`ToShard::SetRows`]).
    setting: Option<Setting>,
    /// Gradients and rule states of the rows of tables with an update rule.
    rules: RuleRows,
    /// Which branch of the training state is live, and the others' values.
    branches: Branches,
    /// Asynchronous cluster (`Staleness::Unbounded`): a push to a table with an update
    /// rule is stepped as it arrives, not once its clock is complete (Downpour SGD).
    step_on_arrival: bool,
    /// The process in this shard's OS process and its arena, which takes its refreshes
    /// straight from this shard's arena ([`LocalArena`]) while it lives.
    local: Option<(ProcessId, Weak<dyn LocalArena>)>,
    /// The server functions of the process in this shard's OS process.
    functions: Option<std::sync::Arc<crate::server::functions::Functions>>,
    /// Its backups on other processes, and the backups it keeps.
    replicas: Replicas,
    /// With backups or as one: the pre-images of the newest applied clock.
    undo: UndoLog,
    /// The update rules of the application's own, registered on every process.
    update_rules: std::sync::Arc<crate::rule::UpdateRules>,
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
            working: vec![false; world.processes],
            migration: None,
            restore: None,
            restored: false,
            setting: None,
            rules: RuleRows::default(),
            branches: Branches::default(),
            step_on_arrival: false,
            local: None,
            functions: None,
            replicas: Replicas::default(),
            undo: UndoLog::default(),
            update_rules: Default::default(),
        }
    }

    /// This shard, stepping rows of tables with a custom rule through `rules` (the
    /// process's registry, the same on every process).
    pub(crate) fn with_update_rules(
        mut self,
        rules: std::sync::Arc<crate::rule::UpdateRules>,
    ) -> Self {
        self.update_rules = rules;
        self
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

    /// This shard, stepping each push to a table with an update rule as it arrives
    /// (`true`: the cluster runs asynchronously, `Staleness::Unbounded`).
    pub(crate) fn stepping_on_arrival(mut self, on: bool) -> Self {
        self.step_on_arrival = on;
        self
    }

    pub(crate) fn id(&self) -> ShardId {
        self.id
    }

    /// The cluster it is a shard of.
    pub(crate) fn world(&self) -> World {
        self.world
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

    /// Handles one message, pushing any replies onto `out` (answers and news for
    /// processes, and a migration's rows for other shards).
    ///
    /// Returns the checkpoint part to write when `msg` asks for one (and is in place):
    /// its answer waits for the caller, who writes the part and hands the outcome to
    /// [`part_written`](Shard::part_written) before handling anything else.
    #[must_use = "a checkpoint part must be written and its outcome handed to part_written"]
    pub(crate) fn handle(&mut self, msg: ToShard, out: &mut Vec<Envelope>) -> Option<PartWrite> {
        if let Some(from) = msg.sender() {
            if !self.known(from) {
                self.reject_all(format!("message from unknown process {from}"), out);
                return None;
            }
            if self.left[from as usize] {
                self.reject_all(format!("message from process {from} after it left"), out);
                return None;
            }
        }
        match msg {
            ToShard::DeclareTable {
                from,
                name,
                width,
                elem,
                rows,
                rule,
            } => self.declare_table(from, name, width, (elem, rows, rule), out),
            ToShard::Gather { from, .. } if self.refuse_during_set(from, "an all-gather", out) => {}
            ToShard::Gather {
                from,
                round,
                values,
            } => self.gather(from, round, values, out),
            ToShard::CreateTable { meta } => self.create_table(meta, out),
            ToShard::Fetch { from, rows } => self.fetch(from, rows, out),
            ToShard::Specialize {
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
            ToShard::SlabFetch {
                from,
                epoch,
                required,
                want,
            } => self.slab_fetch(from, epoch, required, want, out),
            ToShard::Clock {
                worker,
                clock,
                epoch,
                rows,
                outer,
                slab,
                slab_rows,
            } => self.clock(worker, clock, epoch, (rows, outer), (slab, slab_rows), out),
            ToShard::Finish { worker } => self.finish(worker, out),
            ToShard::RunEnd { from, .. } if self.refuse_during_set(from, "a run's end", out) => {}
            ToShard::RunEnd { from, run } => self.run_end(from, run, out),
            ToShard::Leave { from } => self.leave(from, out),
            ToShard::Checkpoint { from, .. }
                if self.refuse_during_set(from, "a checkpoint", out) => {}
            ToShard::Checkpoint { from, root, clock } => {
                return self.checkpoint(from, root, clock, out)
            }
            ToShard::Restore {
                from,
                clock,
                rows,
                states,
                last,
            } => self.restore(from, clock, (rows, states), last, out),
            ToShard::SetRows { from, .. } if self.refuse_replicated(from, "set_rows", out) => {}
            ToShard::SetRows { from, rows, last } => self.set_rows(from, rows, last, out),
            ToShard::SetRule { table, rule, .. } => self.set_rule(table, rule, out),
            ToShard::Migrate { from, .. } if self.refuse_during_set(from, "a migration", out) => {}
            ToShard::Migrate { from, .. } if self.refuse_migration_with_branches(from, out) => {}
            ToShard::Migrate { from, overrides } => self.migrate(from, overrides, out),
            ToShard::Adopt {
                shard,
                rows,
                states,
            } => self.adopt(shard, (rows, states), out),
            ToShard::Dump {
                from,
                table,
                backup: None,
            } => self.dump(self.id, from, table, out),
            ToShard::Dump {
                from,
                table,
                backup: Some(primary),
            } => match self.held_backup(primary) {
                Some(b) => b.dump(self.id, from, table, out),
                None => self.reject(
                    from,
                    format!("shard {} keeps no backup of shard {primary}", self.id),
                    out,
                ),
            },
            ToShard::Call { from, .. }
                if self.refuse_replicated(from, "a server function", out) => {}
            ToShard::Call {
                from,
                function,
                args,
            } => self.call(from, function, &args, out),
            ToShard::Branch { from, .. } if self.refuse_during_set(from, "a branch op", out) => {}
            ToShard::Branch { from, .. } if self.refuse_replicated(from, "a branch op", out) => {}
            ToShard::Branch { from, clock, op } => self.branch(from, clock, op, out),
            ToShard::Replicate {
                primary,
                run_start,
                since,
                clock,
                tables,
                clocks,
            } => self.replicate_in((primary, run_start, since, clock), tables, clocks, out),
            ToShard::ReplicaAck {
                backup,
                primary,
                clock,
            } => self.replica_ack((backup, primary), clock, out),
            ToShard::KeepState { from, clock, state } => self.keep_state((from, clock), state, out),
        }
        None
    }

    fn reject(&self, to: ProcessId, reason: String, out: &mut Vec<Envelope>) {
        out.push(Envelope::Client(
            to,
            ToClient::Rejected {
                shard: self.id,
                reason,
            },
        ));
    }

    /// A failure every process must hear of, those that have left too (they may still be
    /// waiting for the others to leave their shards; one that is gone ignores it).
    fn reject_everyone(&self, reason: String, out: &mut Vec<Envelope>) {
        for p in 0..self.world.processes as ProcessId {
            self.reject(p, reason.clone(), out);
        }
    }

    /// A protocol error that fails the cluster: every process still in it is told.
    fn reject_all(&self, reason: String, out: &mut Vec<Envelope>) {
        for p in self.staying() {
            self.reject(p, reason.clone(), out);
        }
    }
}
