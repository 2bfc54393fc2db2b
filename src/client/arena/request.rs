//! Refresh requests: which chunks to ask the shards for (one chunk, or the chunks of a
//! clock, batched per shard), shared by readers with the same requirement.

use super::{ClientShared, ProcessArena, EMPTY};
use crate::error::Result;
use crate::gather::phase_bit;
use crate::ids::Clock;
use crate::msg::{ToShard, WantedChunks};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::PoisonError;

impl ProcessArena {
    /// Makes sure a refresh that will satisfy `required` has been asked for. With
    /// batching: the chunks read in the iteration's clock `phase` (one request per shard
    /// holding some), or, when `slot` is given and its chunk is not read in that clock (an
    /// access off the pattern), that chunk alone. Without batching, only the chunk
    /// holding `slot` (if given).
    pub(crate) fn request(
        &self,
        shared: &ClientShared,
        required: Clock,
        phase: u32,
        slot: Option<u32>,
    ) -> Result<()> {
        let chunk = slot.map(|s| self.plan.slots[s as usize].chunk);
        let bit = phase_bit(u64::from(phase));
        let target = match (self.batched, chunk) {
            (true, Some(c)) if self.plan.chunk_phases[c as usize] & bit == 0 => Target::Chunk(c),
            (true, _) => Target::Phase(phase),
            (false, Some(c)) => Target::Chunk(c),
            (false, None) => return Ok(()),
        };
        if target == Target::Phase(phase) && !self.plan.chunk_phases.iter().any(|&p| p & bit != 0) {
            return Ok(()); // nothing is read in this clock
        }
        {
            let mut requested = self
                .requested
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            // Forget requests every chunk they cover has been refreshed for (a chunk never
            // filled has not, whatever the clock asked for).
            requested.retain(|&(t, r)| !self.covers(t, r));
            // Asked already (not yet answered in full), or answered already: another
            // worker of this process asked first. Checked in this order under the lock,
            // with snapshots only ever getting newer, one of the two holds for a request
            // another worker made, however its answer and this call interleave.
            if requested.contains(&(target, required)) || self.covers(target, required) {
                return Ok(());
            }
            requested.push((target, required));
        }
        let send = |shard: u32, want: WantedChunks| {
            self.requests_sent.fetch_add(1, Ordering::Relaxed);
            let msg = ToShard::SlabFetch {
                from: shared.process,
                epoch: self.id,
                required,
                want,
            };
            shared.send_shard(shard, msg)
        };
        match target {
            Target::Phase(p) => {
                self.phase_requests.fetch_add(1, Ordering::Relaxed);
                let mut last = None;
                for (c, span) in self.plan.chunks.iter().enumerate() {
                    if self.plan.chunk_phases[c] & bit != 0 && last != Some(span.shard) {
                        last = Some(span.shard);
                        send(span.shard, WantedChunks::Phase(p))?;
                    }
                }
            }
            Target::Chunk(c) => {
                let shard = self.plan.chunks[c as usize].shard;
                send(
                    shard,
                    WantedChunks::Chunk(c - self.first_chunk[shard as usize]),
                )?;
            }
        }
        Ok(())
    }

    /// Whether every chunk `target` covers holds a snapshot a read requiring `required`
    /// takes (as [`read_chunk_in`](Self::read_chunk_in) decides: filled, and at least
    /// that clock).
    fn covers(&self, target: Target, required: Clock) -> bool {
        let fresh = |c: &AtomicU64| {
            let clock = c.load(Ordering::Acquire);
            clock != EMPTY && clock >= required
        };
        match target {
            Target::Chunk(c) => fresh(&self.chunk_clocks[c as usize]),
            Target::Phase(p) => {
                let bit = phase_bit(u64::from(p));
                self.chunk_clocks
                    .iter()
                    .zip(&self.plan.chunk_phases)
                    .filter(|(_, &phases)| phases & bit != 0)
                    .all(|(c, _)| fresh(c))
            }
        }
    }
}

/// What a refresh request covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target {
    /// One chunk (global index).
    Chunk(u32),
    /// The chunks read in the iteration's clock `p`.
    Phase(u32),
}
