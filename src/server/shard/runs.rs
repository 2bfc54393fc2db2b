//! Runs and leaving: the run barrier ([`Msg::RunEnd`] from every process, answered with
//! [`Msg::RunReady`] and the agreed start clock) and processes leaving the shard
//! ([`Msg::Leave`]); a process that leaves while others wait for it fails the cluster
//! instead of hanging it.
//!
//! It knows which runs each process ended and who has left; not rows, plans, migrations
//! or checkpoints (a resume only tells it whether a process leaves too early).

use super::Shard;
use crate::ids::ProcessId;
use crate::msg::{Endpoint, Msg};

impl Shard {
    /// Process `from` has ended run `run` (the next one, or the protocol was broken).
    pub(super) fn run_end(&mut self, from: ProcessId, run: u64, out: &mut Vec<(Endpoint, Msg)>) {
        let last = self.ended[from as usize];
        if run != last + 1 {
            return self.reject_all(
                format!("process {from} ended run {run} after run {last}"),
                out,
            );
        }
        self.ended[from as usize] = run;
        self.check_barrier(out);
    }

    /// Process `from` leaves: it sends nothing more.
    pub(super) fn leave(&mut self, from: ProcessId, out: &mut Vec<(Endpoint, Msg)>) {
        self.left[from as usize] = true;
        if let Some(reason) = self.coordinator.as_mut().and_then(|c| c.left(from)) {
            return self.reject_all(reason, out);
        }
        if self.restore.as_ref().is_some_and(|r| !r.done_by(from)) {
            return self.reject_all(
                format!("process {from} left the cluster during a resume"),
                out,
            );
        }
        self.check_barrier(out);
    }

    /// Answers the run barrier once every process has ended the next run (a process
    /// that left has ended all it will), or fails it if a process left before ending a
    /// run the others wait at.
    fn check_barrier(&mut self, out: &mut Vec<(Endpoint, Msg)>) {
        let staying = self.staying();
        let Some(waited) = staying.iter().map(|&p| self.ended[p as usize]).max() else {
            return;
        };
        if let Some(gone) =
            (0..self.world.processes).find(|&p| self.left[p] && self.ended[p] < waited)
        {
            return self.reject_all(
                format!(
                    "process {gone} left the cluster after run {} while others ended run {waited}",
                    self.ended[gone]
                ),
                out,
            );
        }
        let all = self.ended.iter().copied().min().unwrap_or(0);
        if all <= self.run {
            return;
        }
        self.run = all;
        let start = self.clocks.max_clock();
        if let Err(e) = self.clocks.resume_all(start) {
            return self.reject_all(format!("run {all} cannot end: {e}"), out);
        }
        for p in staying {
            out.push((
                Endpoint::Client(p),
                Msg::RunReady {
                    shard: self.id,
                    run: all,
                    start,
                },
            ));
        }
    }
}
