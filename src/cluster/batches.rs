//! [`ShardBatches`]: rows bound for their home shards, cut into messages of a bounded
//! size, with at least one (possibly empty) message per shard so that every shard hears
//! from every process; and their sending, the last message to each shard flagged. Shared
//! by the collectives that hand rows to the shards: a resume ([`ToShard::Restore`]) and a set
//! of rows ([`ToShard::SetRows`]).

use super::Cluster;
use crate::buf::AlignedBuf;
use crate::error::Result;
use crate::ids::RowKey;
use crate::msg::ToShard;

/// Bytes of rows per message, well under the network's largest frame.
const BATCH_BYTES: usize = 4 << 20;

/// Rows per shard, in messages of at most [`BATCH_BYTES`] (see the module docs).
#[derive(Debug)]
pub(super) struct ShardBatches {
    batches: Vec<Vec<Vec<(RowKey, AlignedBuf)>>>,
    bytes: Vec<usize>,
}

impl ShardBatches {
    /// No rows yet for any of `shards` shards.
    pub(super) fn new(shards: usize) -> Self {
        ShardBatches {
            batches: vec![vec![Vec::new()]; shards],
            bytes: vec![0; shards],
        }
    }

    /// Adds `row` of `key` for shard `shard`, starting a new message when the current
    /// one would pass [`BATCH_BYTES`].
    pub(super) fn push(&mut self, shard: usize, key: RowKey, row: AlignedBuf) {
        let (Some(batches), Some(bytes)) = (self.batches.get_mut(shard), self.bytes.get_mut(shard))
        else {
            return;
        };
        if *bytes + row.len() > BATCH_BYTES {
            batches.push(Vec::new());
            *bytes = 0;
        }
        *bytes += row.len();
        if let Some(batch) = batches.last_mut() {
            batch.push((key, row));
        }
    }
}

impl Cluster {
    /// Sends every shard its messages of `batches`, each made by `msg(rows, last)`.
    pub(super) fn send_batches(
        &self,
        batches: ShardBatches,
        msg: impl Fn(Vec<(RowKey, AlignedBuf)>, bool) -> ToShard,
    ) -> Result<()> {
        for (shard, batches) in batches.batches.into_iter().enumerate() {
            let n = batches.len();
            for (i, rows) in batches.into_iter().enumerate() {
                self.send(shard, msg(rows, i + 1 == n))?;
            }
        }
        Ok(())
    }
}
