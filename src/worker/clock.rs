//! CLOCK and the end of a run for a [`Worker`]: the operation log and the specialized
//! delta slabs split into one `Clock` message per shard, the sent updates kept for
//! read-my-writes, and the prefetch of the refresh the next reads need.

use super::outer::tally;
use super::special::Slab;
use super::{SpecialWorker, Worker};
use crate::consistency::Staleness;
use crate::error::Result;
use crate::ids::Clock;
use crate::msg::{Outer, RowBatch, ToShard};

impl Worker<'_> {
    /// Ends this worker's current clock: its buffered updates are sent, and become visible
    /// to the other workers once every worker has finished this clock.
    pub fn clock(&mut self) -> Result<()> {
        self.shared.check()?;
        if let Some(log) = &mut self.log {
            log.clocks += 1;
        }
        if self.virtual_only {
            return Ok(());
        }
        self.release_held();
        let placement = self.shared.placement();
        let shards = placement.shards();
        let mut per_shard: Vec<RowBatch> = (0..shards).map(|_| Vec::new()).collect();
        let mut outer: Vec<Vec<Outer>> = (0..shards).map(|_| Vec::new()).collect();
        let log = std::mem::take(&mut self.oplog);
        // Bytes sent by table, counted as the rows are cut (a row's key is 12 bytes).
        let mut sent = self.cut_outer(&placement, &mut outer, &mut per_shard);
        if self.keeps_recent() {
            for (key, delta) in &log {
                tally(&mut sent, key.table, 12 + delta.len());
                per_shard[placement.shard_of(*key) as usize].push((*key, delta.clone()));
            }
            self.recent.push(self.clock, log);
        } else {
            for (key, delta) in log {
                tally(&mut sent, key.table, 12 + delta.len());
                per_shard[placement.shard_of(key) as usize].push((key, delta));
            }
        }
        let keep = self.keeps_recent();
        let (epoch, mut slabs) = match &mut self.special {
            Some(sp) => {
                let slabs = sp.take_slabs(self.clock, keep);
                sp.tally_slabs(&slabs, &mut sent);
                (sp.arena.id, slabs)
            }
            None => (0, Vec::new()),
        };
        if !sent.is_empty() {
            self.shared.count_update_bytes(&sent);
        }
        slabs.resize_with(shards, Slab::default);
        self.clock += 1;
        self.shared.live.set_clock(self.local, self.clock);
        self.floor = self
            .shared
            .staleness()
            .required_in_run(self.clock, self.run_start);
        // The CLOCKs to this process's other shards are only queued, the one to this
        // worker's own shard is sent (and driven here), then the others are driven. So
        // when this CLOCK completes a clock, the work it releases on each shard
        // (applying the clock's updates, the refreshes they answer) is taken by the
        // workers waiting for it ([`ClientShared::help`]) while this one does its own
        // shard's, instead of all of it here one shard after another.
        let own = self.own_shard();
        let mut own_msg = None;
        let batches = per_shard.into_iter().zip(outer).zip(slabs);
        for (shard, ((rows, outer), slab)) in batches.enumerate() {
            let msg = ToShard::Clock {
                worker: self.global,
                clock: self.clock,
                epoch,
                rows,
                outer,
                slab: slab.bytes,
                slab_rows: slab.rows,
            };
            match own {
                Some(o) if o == shard => own_msg = Some(msg),
                Some(_) => self.shared.enqueue(shard as u32, msg)?,
                None => self.send_to_shard(shard, msg)?,
            }
        }
        if let (Some(o), Some(msg)) = (own, own_msg) {
            self.shared.signal.notify(); // waiting workers: shards have work queued
            self.send_to_shard(o, msg)?;
            for shard in self.shared.world.shards_of(self.shared.process) {
                if shard as usize != o {
                    self.shared.drive(shard);
                }
            }
        }
        let floor = self.required();
        self.recent.prune(floor);
        if let Some(sp) = &mut self.special {
            sp.prune(floor);
            // Prefetch: the refresh the next clock's reads need (the chunks the pattern
            // reads in it), asked for once per process.
            let phase = (self.clock - self.run_start) % sp.arena.plan.clocks;
            sp.phase = phase as u32;
            let shared = self.shared;
            sp.arena.request(shared, floor, sp.phase, None)?;
        }
        Ok(())
    }

    /// Sends what is left and tells the servers this worker is done for this run.
    pub(crate) fn finish(&mut self) -> Result<Clock> {
        if self.virtual_only {
            return Ok(self.clock);
        }
        if !self.oplog.is_empty()
            || self.has_outer()
            || self
                .special
                .as_ref()
                .is_some_and(SpecialWorker::has_updates)
        {
            self.clock()?;
        }
        for shard in 0..self.shared.world.total_shards() {
            let worker = self.global;
            self.send_to_shard(shard, ToShard::Finish { worker })?;
        }
        Ok(self.clock)
    }

    /// The shard of this process whose CLOCK this worker drives itself when the process
    /// has several (its local index modulo their number); `None` with one shard or none.
    fn own_shard(&self) -> Option<usize> {
        let (world, process) = (&self.shared.world, self.shared.process);
        let local = world.shards_of(process);
        let index = world.local_worker(process, self.global).unwrap_or(0);
        (local.len() > 1).then(|| local.start as usize + index % local.len())
    }

    pub(super) fn send_to_shard(&self, shard: usize, msg: ToShard) -> Result<()> {
        self.shared.send_shard(shard as u32, msg)
    }

    pub(super) fn keeps_recent(&self) -> bool {
        self.shared.staleness() != Staleness::BSP
    }
}
