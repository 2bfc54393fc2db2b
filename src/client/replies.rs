//! [`Replies`]: the shards' answers to a process's collective requests — the run barrier,
//! table declarations, all-gathers, migrations, checkpoints, resumes, sets and table
//! snapshots
//! — filed by the communication thread and taken by the thread that waits for them.
//!
//! One box per kind of answer, all under one lock (answers are rare: a few per run). It
//! only files and hands out; how long to wait, and what a missing answer means, is the
//! waiter's ([`ClientShared::wait_for`](super::ClientShared::wait_for)).

use crate::buf::AlignedBuf;
use crate::ids::{Clock, RowKey, ShardId};
#[cfg(doc)]
use crate::msg::ToClient;
use crate::msg::{BranchOutcome, Called, ShardPart};
use crate::sync::lock;
use crate::table::TableMeta;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The answers received and not yet taken (see the module docs).
#[derive(Default)]
pub(crate) struct Replies {
    boxes: Mutex<Boxes>,
}

#[derive(Default)]
struct Boxes {
    /// Answers to the run barrier: per run, each shard's start clock.
    run_ready: BTreeMap<u64, Vec<(ShardId, Clock)>>,
    /// Tables the coordinator declared to this process.
    declared: Vec<TableMeta>,
    /// Completed all-gathers by round.
    gathered: BTreeMap<u64, Vec<AlignedBuf>>,
    /// Shards that have finished the migration under way ([`ToClient::Migrated`]).
    migrated: Vec<ShardId>,
    /// This process's shards' answers to the checkpoint under way ([`ToClient::Checkpointed`]).
    checkpointed: Vec<(ShardId, ShardPart)>,
    /// Shards that have finished the resume under way ([`ToClient::Restored`]).
    restored: Vec<ShardId>,
    /// Shards that have set every process's rows of the set under way ([`ToClient::RowsSet`]).
    rows_set: Vec<ShardId>,
    /// Shards' rows for a table snapshot ([`ToClient::DumpRows`]).
    dumps: Vec<Vec<(RowKey, AlignedBuf)>>,
    /// This process's shards' answers to the server function's call under way
    /// ([`ToClient::Called`]).
    called: Vec<Called>,
    /// This process's shards' answers to the branch op under way ([`ToClient::Branched`]).
    branched: Vec<(ShardId, BranchOutcome)>,
    /// Shards that keep this process's application state, with its clock
    /// ([`ToClient::StateKept`]).
    states_kept: Vec<(ShardId, Clock)>,
}

impl Replies {
    /// Files shard `shard`'s answer to the barrier at the end of `run`: the next run
    /// starts at `start` ([`ToClient::RunReady`]).
    pub(crate) fn run_ready(&self, shard: ShardId, run: u64, start: Clock) {
        lock(&self.boxes)
            .run_ready
            .entry(run)
            .or_default()
            .push((shard, start));
    }

    /// Files the coordinator's declaration of a table ([`ToClient::TableDeclared`]).
    pub(crate) fn declared(&self, meta: TableMeta) {
        lock(&self.boxes).declared.push(meta);
    }

    /// Files every process's part of all-gather round `round` ([`ToClient::Gathered`]).
    pub(crate) fn gathered(&self, round: u64, parts: Vec<AlignedBuf>) {
        lock(&self.boxes).gathered.insert(round, parts);
    }

    /// Files that `shard` finished the migration under way ([`ToClient::Migrated`]).
    pub(crate) fn migrated(&self, shard: ShardId) {
        lock(&self.boxes).migrated.push(shard);
    }

    /// Files `shard`'s answer to the checkpoint under way ([`ToClient::Checkpointed`]).
    pub(crate) fn checkpointed(&self, shard: ShardId, part: ShardPart) {
        lock(&self.boxes).checkpointed.push((shard, part));
    }

    /// Files that `shard` finished the resume under way ([`ToClient::Restored`]).
    pub(crate) fn restored(&self, shard: ShardId) {
        lock(&self.boxes).restored.push(shard);
    }

    /// Files that `shard` keeps this process's application state at `clock`
    /// ([`ToClient::StateKept`]).
    pub(crate) fn state_kept(&self, shard: ShardId, clock: Clock) {
        lock(&self.boxes).states_kept.push((shard, clock));
    }

    /// Whether each of `shards` keeps this process's state at `clock` (and forgets them).
    pub(crate) fn take_states_kept(&self, shards: &[ShardId], clock: Clock) -> Option<()> {
        let mut b = lock(&self.boxes);
        let all = (shards.iter()).all(|s| b.states_kept.contains(&(*s, clock)));
        all.then(|| {
            b.states_kept
                .retain(|(s, c)| !(shards.contains(s) && *c == clock))
        })
    }

    /// Files that `shard` finished the set under way ([`ToClient::RowsSet`]).
    pub(crate) fn rows_set(&self, shard: ShardId) {
        lock(&self.boxes).rows_set.push(shard);
    }

    /// Files a shard's rows for a table snapshot ([`ToClient::DumpRows`]).
    pub(crate) fn dump(&self, rows: Vec<(RowKey, AlignedBuf)>) {
        lock(&self.boxes).dumps.push(rows);
    }

    /// Files a shard's answer to the call under way ([`ToClient::Called`]).
    pub(crate) fn called(&self, called: Called) {
        lock(&self.boxes).called.push(called);
    }

    /// Files `shard`'s answer to the branch op under way ([`ToClient::Branched`]).
    pub(crate) fn branched(&self, shard: ShardId, outcome: BranchOutcome) {
        lock(&self.boxes).branched.push((shard, outcome));
    }

    /// This process's shards' answers to the branch op under way, once `shards` arrived.
    pub(crate) fn take_branched(&self, shards: usize) -> Option<Vec<(ShardId, BranchOutcome)>> {
        let mut b = lock(&self.boxes);
        (b.branched.len() >= shards).then(|| std::mem::take(&mut b.branched))
    }

    /// Every shard's answer to the barrier at the end of `run`, once `shards` arrived.
    pub(crate) fn take_run_ready(&self, run: u64, shards: usize) -> Option<Vec<(ShardId, Clock)>> {
        let mut b = lock(&self.boxes);
        if b.run_ready.get(&run).is_some_and(|a| a.len() >= shards) {
            b.run_ready.remove(&run)
        } else {
            None
        }
    }

    /// The coordinator's declaration of table `name`, once it arrived.
    pub(crate) fn take_table(&self, name: &str) -> Option<TableMeta> {
        let mut b = lock(&self.boxes);
        let i = b.declared.iter().position(|m| m.name == name)?;
        Some(b.declared.swap_remove(i))
    }

    /// Every process's part of all-gather round `round`, once complete.
    pub(crate) fn take_gathered(&self, round: u64) -> Option<Vec<AlignedBuf>> {
        lock(&self.boxes).gathered.remove(&round)
    }

    /// Whether `shards` shards finished the migration under way (and forgets them).
    pub(crate) fn take_migrated(&self, shards: usize) -> Option<()> {
        let mut b = lock(&self.boxes);
        (b.migrated.len() >= shards).then(|| b.migrated.clear())
    }

    /// The answers of `shards` shards to the checkpoint under way, in arrival order.
    pub(crate) fn take_checkpointed(&self, shards: usize) -> Option<Vec<(ShardId, ShardPart)>> {
        let mut b = lock(&self.boxes);
        (b.checkpointed.len() >= shards).then(|| std::mem::take(&mut b.checkpointed))
    }

    /// This process's shards' answers to the call under way, once `shards` arrived.
    pub(crate) fn take_called(&self, shards: usize) -> Option<Vec<Called>> {
        let mut b = lock(&self.boxes);
        (b.called.len() >= shards).then(|| std::mem::take(&mut b.called))
    }

    /// Whether `shards` shards finished the resume under way (and forgets them).
    pub(crate) fn take_restored(&self, shards: usize) -> Option<()> {
        let mut b = lock(&self.boxes);
        (b.restored.len() >= shards).then(|| b.restored.clear())
    }

    /// Whether `shards` shards finished the set under way (and forgets them).
    pub(crate) fn take_rows_set(&self, shards: usize) -> Option<()> {
        let mut b = lock(&self.boxes);
        (b.rows_set.len() >= shards).then(|| b.rows_set.clear())
    }

    /// The rows of `shards` shards' snapshot answers, once all arrived.
    pub(crate) fn take_dumps(&self, shards: usize) -> Option<Vec<(RowKey, AlignedBuf)>> {
        let mut b = lock(&self.boxes);
        (b.dumps.len() >= shards).then(|| b.dumps.drain(..).flatten().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_handed_out_once_complete() {
        let r = Replies::default();
        for shard in 0..2 {
            r.run_ready(shard, 3, 7);
        }
        assert_eq!(
            r.take_run_ready(3, 3),
            None,
            "a third shard has not answered"
        );
        assert_eq!(r.take_run_ready(3, 2), Some(vec![(0, 7), (1, 7)]));
        assert_eq!(r.take_run_ready(3, 2), None, "taken once");
        r.migrated(1);
        assert_eq!(r.take_migrated(2), None);
        r.migrated(0);
        assert_eq!(r.take_migrated(2), Some(()));
        assert_eq!(r.take_migrated(2), None, "forgotten once taken");
    }
}
