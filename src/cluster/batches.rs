//! [`ShardBatches`]: rows (and rule states) bound for their home shards, cut into messages
//! of a bounded size, with at least one (possibly empty) message per shard so that every
//! shard hears from every process; and their sending, the last message to each shard
//! flagged. Shared by the collectives that hand rows to the shards: a resume
//! ([`ToShard::Restore`], rows and their update-rule states) and a set of rows
//! ([`ToShard::SetRows`], rows only).

use super::Cluster;
use crate::buf::AlignedBuf;
use crate::error::Result;
use crate::ids::{Clock, RowKey};
use crate::msg::{RuleState, RuleStates, ToShard};

/// Bytes of rows per message, well under the network's largest frame.
const BATCH_BYTES: usize = 4 << 20;

/// What one message carries: rows with their values, and rows' rule states.
#[derive(Debug, Clone, Default)]
pub(super) struct Batch {
    /// Rows and their values.
    pub(super) rows: Vec<(RowKey, AlignedBuf)>,
    /// Rows' update-rule states.
    pub(super) states: RuleStates,
}

/// Rows and rule states per shard, in messages of at most [`BATCH_BYTES`] (see the module
/// docs).
#[derive(Debug)]
pub(super) struct ShardBatches {
    batches: Vec<Vec<Batch>>,
    bytes: Vec<usize>,
}

impl ShardBatches {
    /// No rows yet for any of `shards` shards.
    pub(super) fn new(shards: usize) -> Self {
        ShardBatches {
            batches: vec![vec![Batch::default()]; shards],
            bytes: vec![0; shards],
        }
    }

    /// Adds `row` of `key` for shard `shard`, starting a new message when the current
    /// one would pass [`BATCH_BYTES`].
    pub(super) fn push(&mut self, shard: usize, key: RowKey, row: AlignedBuf) {
        let len = row.len();
        if let Some(batch) = self.batch_for(shard, len) {
            batch.rows.push((key, row));
        }
    }

    /// Adds the rule state `state` of row `key` for shard `shard`, like [`push`](Self::push).
    pub(super) fn push_state(&mut self, shard: usize, key: RowKey, state: RuleState) {
        let len = state.state.len() + 8;
        if let Some(batch) = self.batch_for(shard, len) {
            batch.states.push((key, state));
        }
    }

    /// The message of shard `shard` that takes `len` more bytes (a new one when the
    /// current one would pass [`BATCH_BYTES`]); `None` for a shard out of range.
    fn batch_for(&mut self, shard: usize, len: usize) -> Option<&mut Batch> {
        let (Some(batches), Some(bytes)) = (self.batches.get_mut(shard), self.bytes.get_mut(shard))
        else {
            return None;
        };
        if *bytes + len > BATCH_BYTES {
            batches.push(Batch::default());
            *bytes = 0;
        }
        *bytes += len;
        batches.last_mut()
    }
}

impl Cluster {
    /// Restores `batches` at `clock` (a resume's, or a recovery's): sends every shard its
    /// rows and rule states as [`ToShard::Restore`] messages and waits until every shard
    /// has every process's (and starts every worker at `clock`).
    pub(super) fn restore_batches(&self, batches: ShardBatches, clock: Clock) -> Result<()> {
        let from = self.shared.process;
        self.send_batches(batches, |batch, last| ToShard::Restore {
            from,
            clock,
            rows: batch.rows,
            states: batch.states,
            last,
        })?;
        self.shared.await_restored()
    }

    /// Sends every shard its messages of `batches`, each made by `msg(batch, last)`.
    pub(super) fn send_batches(
        &self,
        batches: ShardBatches,
        msg: impl Fn(Batch, bool) -> ToShard,
    ) -> Result<()> {
        for (shard, batches) in batches.batches.into_iter().enumerate() {
            let n = batches.len();
            for (i, batch) in batches.into_iter().enumerate() {
                self.send(shard, msg(batch, i + 1 == n))?;
            }
        }
        Ok(())
    }
}
