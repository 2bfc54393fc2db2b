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
use crate::msg::{Called, Msg, ShardPart};
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
    /// Shards that have finished the migration under way ([`Msg::Migrated`]).
    migrated: Vec<ShardId>,
    /// This process's shards' answers to the checkpoint under way ([`Msg::Checkpointed`]).
    checkpointed: Vec<(ShardId, ShardPart)>,
    /// Shards that have finished the resume under way ([`Msg::Restored`]).
    restored: Vec<ShardId>,
    /// Shards that have set every process's rows of the set under way ([`Msg::RowsSet`]).
    rows_set: Vec<ShardId>,
    /// Shards' rows for a table snapshot ([`Msg::DumpRows`]).
    dumps: Vec<Vec<(RowKey, AlignedBuf)>>,
    /// This process's shards' answers to the server function's call under way
    /// ([`Msg::Called`]).
    called: Vec<Called>,
}

impl Replies {
    /// Files `msg` if it is one of the answers kept here (then the caller wakes the
    /// waiters); gives any other message back.
    pub(crate) fn file(&self, msg: Msg) -> Result<(), Msg> {
        let mut b = lock(&self.boxes);
        match msg {
            Msg::RunReady { shard, run, start } => {
                b.run_ready.entry(run).or_default().push((shard, start))
            }
            Msg::Migrated { shard } => b.migrated.push(shard),
            Msg::Checkpointed { shard, part } => b.checkpointed.push((shard, part)),
            Msg::Restored { shard } => b.restored.push(shard),
            Msg::RowsSet { shard } => b.rows_set.push(shard),
            Msg::Gathered { round, parts } => {
                b.gathered.insert(round, parts);
            }
            Msg::TableDeclared { meta } => b.declared.push(meta),
            Msg::DumpRows { rows, .. } => b.dumps.push(rows),
            Msg::Called { called } => b.called.push(called),
            other => return Err(other),
        }
        Ok(())
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
    fn answers_are_handed_out_once_complete_and_other_messages_come_back() {
        let r = Replies::default();
        for shard in 0..2 {
            assert!(r
                .file(Msg::RunReady {
                    shard,
                    run: 3,
                    start: 7
                })
                .is_ok());
        }
        assert_eq!(
            r.take_run_ready(3, 3),
            None,
            "a third shard has not answered"
        );
        assert_eq!(r.take_run_ready(3, 2), Some(vec![(0, 7), (1, 7)]));
        assert_eq!(r.take_run_ready(3, 2), None, "taken once");
        assert!(r.file(Msg::Migrated { shard: 1 }).is_ok());
        assert_eq!(r.take_migrated(2), None);
        assert!(r.file(Msg::Migrated { shard: 0 }).is_ok());
        assert_eq!(r.take_migrated(2), Some(()));
        assert_eq!(r.take_migrated(2), None, "forgotten once taken");
        assert!(matches!(
            r.file(Msg::MinClock { shard: 0, clock: 1 }),
            Err(Msg::MinClock { .. })
        ));
    }
}
