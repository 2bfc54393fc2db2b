//! The SSP side of a shard: workers' clocks ([`ClockTable`]), the updates waiting for the
//! minimum clock to pass them, and the reads waiting for a clock ([`DeferredReads`]).
//! When the minimum clock advances, the updates it makes visible are applied in
//! `(clock, worker)` order and then the reads it releases are answered.
//!
//! It decides *when*: when an update becomes visible and when a read is answered. *How*
//! rows are stored, added to and sent is `rows`'s; it knows nothing of runs, migrations
//! or checkpoints.
//!
//! [`ClockTable`]: crate::consistency::ClockTable
//! [`DeferredReads`]: crate::consistency::DeferredReads

use super::rows::Resolved;
use super::Shard;
use crate::buf::AlignedBuf;
use crate::ids::{Clock, ProcessId, RowKey, WorkerId};
use crate::msg::{Envelope, Outer, RowBatch, WantedChunks};

impl Shard {
    /// Worker `worker` has finished clock `clock - 1`, with its updates of that clock:
    /// `rows` sent the generic way, `outer` as factors (multiplied out here, then taken
    /// as rows) and `slab` laid out by its process's plan `epoch`.
    pub(super) fn clock(
        &mut self,
        worker: WorkerId,
        clock: Clock,
        epoch: u32,
        (mut rows, outer): (RowBatch, Vec<Outer>),
        (slab, slab_rows): (AlignedBuf, Option<Vec<u32>>),
        out: &mut Vec<Envelope>,
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
        if self.working(process, out) {
            return;
        }
        let advanced = match self.clocks.tick(worker as usize, clock) {
            Ok(advanced) => advanced,
            Err(e) => return self.reject_all(e.to_string(), out),
        };
        let expanded = match outer.is_empty() {
            true => Ok(()),
            false => self.expand_outer(outer, &mut rows),
        };
        if !rows.is_empty() || !slab.is_empty() || expanded.is_err() {
            let valid = expanded.and_then(|()| self.validate(&rows));
            // Asynchronous: pushes to tables with an update rule are stepped now.
            let rows = match valid {
                Ok(()) if self.step_on_arrival => self.step_now(rows, out),
                _ => rows,
            };
            let slab = self.resolve_slab(process, epoch, worker, (slab, slab_rows));
            if let (true, Ok(()), Ok(Some(slab))) = (self.step_on_arrival, &valid, &slab) {
                self.step_slab_now(slab, out);
            }
            match (valid, slab) {
                (Ok(()), Ok(slab)) if !rows.is_empty() || slab.is_some() => self
                    .pending
                    .entry(clock - 1)
                    .or_default()
                    .push((worker, rows, slab)),
                (Ok(()), Ok(_)) => {}
                // The clock still counts, so that nothing waits on it; the cluster fails.
                (Err(reason), _) | (_, Err(reason)) => self.reject_all(reason, out),
            }
        }
        self.advance(advanced, out);
    }

    /// Worker `worker` has finished its run: nobody waits for it any more.
    pub(super) fn finish(&mut self, worker: WorkerId, out: &mut Vec<Envelope>) {
        if let Some(process) = self.world.process_of_worker(worker) {
            if self.working(process, out) {
                return;
            }
        }
        match self.clocks.finish(worker as usize) {
            Ok(advanced) => self.advance(advanced, out),
            Err(e) => self.reject_all(e.to_string(), out),
        }
    }

    /// `from` reads `rows`, each at least as new as its clock: those the minimum clock
    /// has reached are answered now, the others once it does.
    pub(super) fn fetch(
        &mut self,
        from: ProcessId,
        rows: Vec<(RowKey, Clock)>,
        out: &mut Vec<Envelope>,
    ) {
        let min = self.visible_clock();
        let mut ready = Vec::new();
        for (key, required) in rows {
            if self.table(key.table).is_none() {
                self.reject(from, format!("fetch of unknown table #{}", key.table), out);
            } else if required <= min {
                ready.push(key);
            } else {
                if self.working(from, out) {
                    return;
                }
                self.deferred.defer(required, (from, key));
            }
        }
        if !ready.is_empty() {
            self.reply(from, ready, out);
        }
    }

    /// `from` asks for the arena refresh `want` of its plan `epoch` at data clock
    /// `required` or newer: now if the minimum clock is there, else once it is.
    pub(super) fn slab_fetch(
        &mut self,
        from: ProcessId,
        epoch: u32,
        required: Clock,
        want: WantedChunks,
        out: &mut Vec<Envelope>,
    ) {
        if required <= self.visible_clock() {
            self.reply_slab(from, epoch, want, out);
        } else if !self.working(from, out) {
            self.slab_deferred.defer(required, (from, epoch, want));
        }
    }

    /// Applies the pending updates the new minimum clock makes visible (with backups,
    /// keeping the pre-images of the run's clocks, `undo`, whose keys are also the rows
    /// the run's replication sends, `replicas`), then answers the reads that were waiting
    /// for it.
    pub(super) fn advance(&mut self, advanced: Option<Clock>, out: &mut Vec<Envelope>) {
        let Some(min) = advanced else { return };
        let later = self.pending.split_off(&min);
        let ready = std::mem::replace(&mut self.pending, later);
        let capturing = self.replicas.has_backups();
        // The undo log keeps the run's pre-images (with backups: `undo`).
        self.start_undo();
        for (_, mut batches) in ready {
            batches.sort_by_key(|(worker, _, _)| *worker);
            for (_, batch, slab) in batches {
                if capturing {
                    let keys = self.applied_keys(&batch, slab.as_ref());
                    self.record_pre_images(&keys);
                }
                self.apply(batch, slab, min, out);
            }
            self.step_rules(min, out);
        }
        self.release_visible(out);
    }

    /// The keys of the rows [`apply`](Shard::apply) of `batch` and `slab` changes (for
    /// the backups, which hold no layouts, and the undo log).
    fn applied_keys(&self, batch: &RowBatch, slab: Option<&Resolved>) -> Vec<RowKey> {
        let mut keys: Vec<RowKey> = batch.iter().map(|(key, _)| *key).collect();
        if let Some((layout, positions, bytes)) = slab {
            // A slab that does not fit is refused by `apply`, failing the cluster.
            let slab_keys = self.arena.slab_keys(layout, positions.as_deref(), bytes);
            keys.extend(slab_keys.unwrap_or_default());
        }
        keys
    }
}
