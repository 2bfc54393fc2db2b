//! Fetching rows on a miss: de-duplication of in-flight requests and opportunistic
//! batching. Waiting for the reply is the caller's business (the process's
//! [`Signal`](crate::sync::Signal)).
//!
//! Batching is "group commit": a worker that queues a request while another is sending
//! leaves it for that sender, which drains the whole queue into one message per shard.

use super::ClientShared;
use crate::error::Result;
use crate::ids::{Clock, RowKey};
use crate::msg::ToShard;
use crate::sync::lock;
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

#[derive(Default)]
struct Queue {
    pending: Vec<(RowKey, Clock)>,
    sending: bool,
}

/// Outstanding fetches of one process.
#[derive(Default)]
pub(crate) struct Fetcher {
    /// Requirements with a request outstanding, per row. A request is shared only by
    /// readers with the *same* requirement: a reply to a higher one may wait for the very
    /// worker that needs a lower one.
    in_flight: Mutex<FxHashMap<RowKey, Vec<Clock>>>,
    queue: Mutex<Queue>,
    /// Rows asked for so far (observability).
    pub(crate) rows_requested: AtomicU64,
}

impl Fetcher {
    /// Asks the shard holding `key` for a snapshot with data clock `>= required`, unless
    /// a request with the same requirement is already in flight. A failed send forgets
    /// the requests it carried (nobody would answer them) and is returned.
    pub(crate) fn request(
        &self,
        shared: &ClientShared,
        key: RowKey,
        required: Clock,
    ) -> Result<()> {
        {
            let mut in_flight = lock(&self.in_flight);
            let outstanding = in_flight.entry(key).or_default();
            if outstanding.contains(&required) {
                return Ok(());
            }
            outstanding.push(required);
        }
        let mut q = lock(&self.queue);
        q.pending.push((key, required));
        if q.sending {
            return Ok(());
        }
        q.sending = true;
        loop {
            let batch = std::mem::take(&mut q.pending);
            if batch.is_empty() {
                q.sending = false;
                return Ok(());
            }
            drop(q);
            self.rows_requested
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            let sent = send_batch(shared, &batch);
            q = lock(&self.queue);
            if let Err(e) = sent {
                q.sending = false;
                let unsent = std::mem::take(&mut q.pending);
                drop(q);
                let mut in_flight = lock(&self.in_flight);
                for (key, required) in batch.iter().chain(&unsent) {
                    if let Some(outstanding) = in_flight.get_mut(key) {
                        outstanding.retain(|r| r != required);
                    }
                }
                return Err(e);
            }
        }
    }

    /// Marks the fetches that a snapshot at `data_clock` satisfies as answered.
    pub(crate) fn answered(&self, keys: impl Iterator<Item = RowKey>, data_clock: Clock) {
        let mut in_flight = lock(&self.in_flight);
        for key in keys {
            if let Some(outstanding) = in_flight.get_mut(&key) {
                outstanding.retain(|&r| r > data_clock);
                if outstanding.is_empty() {
                    in_flight.remove(&key);
                }
            }
        }
    }
}

fn send_batch(shared: &ClientShared, batch: &[(RowKey, Clock)]) -> Result<()> {
    let placement = shared.placement();
    let mut per_shard: Vec<Vec<(RowKey, Clock)>> = vec![Vec::new(); placement.shards()];
    for &(key, required) in batch {
        per_shard[placement.shard_of(key) as usize].push((key, required));
    }
    for (shard, rows) in per_shard.into_iter().enumerate() {
        if rows.is_empty() {
            continue;
        }
        let from = shared.process;
        shared.send_shard(shard as u32, ToShard::Fetch { from, rows })?;
    }
    Ok(())
}
