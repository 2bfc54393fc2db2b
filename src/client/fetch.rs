//! Fetching rows on a miss: de-duplication of in-flight requests, opportunistic batching,
//! and the signal workers wait on until a reply arrives.
//!
//! Batching is "group commit": a worker that queues a request while another is sending
//! leaves it for that sender, which drains the whole queue into one message per shard.

use crate::consistency::Clock;
use crate::msg::{Endpoint, Msg, ProcessId};
use crate::server::shard_of;
use crate::transport::Transport;
use crate::{Error, Result, RowKey};
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

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
    /// Bumped (under `signal`) whenever a reply arrives; read without locking.
    generation: AtomicU64,
    signal: Mutex<()>,
    arrived: Condvar,
    /// Rows asked for so far (observability).
    pub(crate) rows_requested: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Fetcher {
    /// Asks the shard holding `key` for a snapshot with data clock `>= required`, unless
    /// a request with the same requirement is already in flight.
    pub(crate) fn request(
        &self,
        process: ProcessId,
        shards: usize,
        transport: &dyn Transport,
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
            let sent = send_batch(process, shards, transport, batch);
            q = lock(&self.queue);
            if let Err(e) = sent {
                q.sending = false;
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

    /// The current reply generation (no lock); pass it to [`wait`](Self::wait).
    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Wakes every waiting worker.
    pub(crate) fn notify(&self) {
        let guard = lock(&self.signal);
        self.generation.fetch_add(1, Ordering::AcqRel);
        drop(guard);
        self.arrived.notify_all();
    }

    /// Waits until something arrived after `generation` was read, or `timeout` passed.
    /// The generation is bumped under the same lock this checks it under, so a reply
    /// that lands between the caller's check and this wait is never missed.
    pub(crate) fn wait(&self, generation: u64, timeout: Duration) {
        let guard = lock(&self.signal);
        if self.generation.load(Ordering::Acquire) == generation {
            let _ = self.arrived.wait_timeout(guard, timeout);
        }
    }
}

fn send_batch(
    process: ProcessId,
    shards: usize,
    transport: &dyn Transport,
    batch: Vec<(RowKey, Clock)>,
) -> Result<()> {
    let mut per_shard: Vec<Vec<(RowKey, Clock)>> = vec![Vec::new(); shards];
    for (key, required) in batch {
        per_shard[shard_of(key, shards)].push((key, required));
    }
    for (shard, rows) in per_shard.into_iter().enumerate() {
        if rows.is_empty() {
            continue;
        }
        let to = Endpoint::Shard(shard as u32);
        transport
            .send(
                to,
                Msg::Fetch {
                    from: process,
                    rows,
                },
            )
            .map_err(|e| Error::failed(format!("server shard {shard}"), e))?;
    }
    Ok(())
}
