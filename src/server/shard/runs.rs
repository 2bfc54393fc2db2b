//! Runs and leaving: the run barrier ([`ToShard::RunEnd`](crate::msg::ToShard::RunEnd) from
//! every process, answered with [`ToClient::RunReady`] and the agreed start clock) and
//! processes leaving the shard ([`ToShard::Leave`](crate::msg::ToShard::Leave)); a process
//! that leaves while others wait for it fails the cluster instead of hanging it.
//!
//! It knows which runs each process ended and who has left; not rows, plans, migrations
//! or checkpoints (a resume only tells it whether a process leaves too early).

use super::Shard;
use crate::ids::ProcessId;
use crate::msg::{Envelope, ToClient};

impl Shard {
    /// Process `from` has ended run `run` (the next one, or the protocol was broken).
    pub(super) fn run_end(&mut self, from: ProcessId, run: u64, out: &mut Vec<Envelope>) {
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

    /// Process `from` sent work of the run in progress (the one after `self.run`): if a
    /// process has left without ending that run, the run can never end — every process
    /// is told at once (see [`Shard::check_moved_on`]). Returns whether it was refused.
    pub(super) fn working(&mut self, from: ProcessId, out: &mut Vec<Envelope>) -> bool {
        if let Some(w) = self.working.get_mut(from as usize) {
            *w = true;
        }
        if self.refuse_during_set(from, "work of the next run", out) {
            return true;
        }
        self.check_moved_on(out)
    }

    /// Whether a process that has left ended no more runs than this shard has seen end
    /// while another went on to the next one (the processes did different numbers of runs,
    /// or one left mid-run): then nothing can complete that run, and every process — the
    /// one that left too — is told, naming both and the runs, instead of waiting.
    fn check_moved_on(&mut self, out: &mut Vec<Envelope>) -> bool {
        let n = self.world.processes;
        let Some(gone) = (0..n).find(|&p| self.left[p] && self.ended[p] <= self.run) else {
            return false;
        };
        let Some(on) = (0..n).find(|&p| !self.left[p] && self.working[p]) else {
            return false;
        };
        let why = different_runs(gone, self.ended[gone], &on.to_string(), self.run + 1);
        self.reject_everyone(why, out);
        true
    }

    /// Process `from` leaves: it sends nothing more.
    pub(super) fn leave(&mut self, from: ProcessId, out: &mut Vec<Envelope>) {
        self.left[from as usize] = true;
        if self.check_moved_on(out) {
            return;
        }
        if let Some(reason) = self.coordinator.as_mut().and_then(|c| c.left(from)) {
            return self.reject_all(reason, out);
        }
        if self.restore.as_ref().is_some_and(|r| !r.done_by(from)) {
            return self.reject_all(
                format!("process {from} left the cluster during a resume"),
                out,
            );
        }
        if self.setting.as_ref().is_some_and(|s| !s.done_by(from)) {
            return self.reject_everyone(
                format!(
                    "process {from} left the cluster while the others set rows (the \
                     processes called different collectives, or one stopped early)"
                ),
                out,
            );
        }
        self.check_barrier(out);
    }

    /// Answers the run barrier once every process has ended the next run (a process
    /// that left has ended all it will) and every backup has acked every clock, or fails it if a process left before ending a
    /// run the others wait at.
    pub(super) fn check_barrier(&mut self, out: &mut Vec<Envelope>) {
        let staying = self.staying();
        let Some(waited) = staying.iter().map(|&p| self.ended[p as usize]).max() else {
            return;
        };
        if let Some(gone) =
            (0..self.world.processes).find(|&p| self.left[p] && self.ended[p] < waited)
        {
            // The same case as `check_moved_on`, seen from the barrier (the one that went
            // on sent this shard nothing else of its run): the one that left is told too,
            // or it would take its own clean leave for success.
            let on = staying
                .iter()
                .find(|&&p| self.ended[p as usize] == waited)
                .map_or_else(|| "another".to_string(), |p| p.to_string());
            let why = different_runs(gone, self.ended[gone], &on, waited);
            return self.reject_everyone(why, out);
        }
        let all = self.ended.iter().copied().min().unwrap_or(0);
        if all <= self.run {
            return;
        }
        // A run ends once every backup has what its clocks changed (`replicas`).
        self.replicate(self.clocks.min_clock(), out);
        if !self.backups_caught_up() {
            return;
        }
        self.run = all;
        self.working.fill(false);
        let start = self.clocks.max_clock();
        if let Err(e) = self.clocks.resume_all(start) {
            return self.reject_all(format!("run {all} cannot end: {e}"), out);
        }
        self.undo_run_starts(start);
        for p in staying {
            out.push(Envelope::Client(
                p,
                ToClient::RunReady {
                    shard: self.id,
                    run: all,
                    start,
                },
            ));
        }
    }
}

/// Why a run cannot end: process `gone` left after ending `ended` runs while process `on`
/// went on to run `run`.
fn different_runs(gone: usize, ended: u64, on: &str, run: u64) -> String {
    let after = match ended {
        0 => "before its first run".to_string(),
        r => format!("after run {r}"),
    };
    format!(
        "process {gone} left the cluster {after} while process {on} went on to run {run} \
         (the processes did different numbers of runs, or one stopped early)"
    )
}
