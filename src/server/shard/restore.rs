//! Restore: rows coming back from a checkpoint in a resume
//! ([`ToShard::Restore`](crate::msg::ToShard::Restore)). Every process sends the rows it
//! read whose home is this shard, with their update-rule states, the last message flagged; once every process has sent its
//! last, every worker starts at the checkpoint's clock and every process is told
//! ([`ToClient::Restored`]).
//!
//! Only before any run, plan or migration: the shard must hold nothing yet. The rows and
//! states arrive as messages; it knows nothing of files or how they were read. A shard
//! with backups (a recovery from the replicas, `crate::cluster`'s) hands them every row
//! it restored as one replicated clock just before the restore's, which they copy and keep
//! out of their undo log (it precedes the run they go on with).

use super::{Lasts, Shard};
use crate::buf::AlignedBuf;
use crate::ids::{Clock, ProcessId, RowKey};
use crate::msg::{Envelope, RuleStates, ToClient};

/// Where a shard is in a restore: the checkpoint's clock, and which processes have sent
/// their last rows.
#[derive(Debug)]
pub(super) struct Restoring {
    clock: Clock,
    done: Lasts,
}

impl Restoring {
    /// Whether process `p` has sent its last rows.
    pub(super) fn done_by(&self, p: ProcessId) -> bool {
        self.done.done_by(p)
    }
}

impl Shard {
    /// Rows `from` read from a checkpoint at `clock` whose home is this shard, and the
    /// rule states of such rows. Only before any run, plan or migration: the shard must
    /// hold nothing yet.
    pub(super) fn restore(
        &mut self,
        from: ProcessId,
        clock: Clock,
        (rows, states): (Vec<(RowKey, AlignedBuf)>, RuleStates),
        last: bool,
        out: &mut Vec<Envelope>,
    ) {
        if self.restore.is_none() {
            let used = self.restored
                || self.run != 0
                || self.clocks.max_clock() != 0
                || !self.pending.is_empty()
                || !self.rows.is_empty()
                || !self.rules.is_empty()
                || self.arena.rows().next().is_some()
                || self.migration.is_some();
            if used {
                return self.reject_all(
                    "a resume after runs, a plan, a migration, set rows or another resume".into(),
                    out,
                );
            }
            self.restore = Some(Restoring {
                clock,
                done: Lasts::new(self.world.processes),
            });
        }
        let Some(state) = self.restore.as_mut() else {
            return;
        };
        if state.clock != clock {
            let other = state.clock;
            return self.reject_all(
                format!("process {from} resumes from clock {clock}, another from clock {other}"),
                out,
            );
        }
        if !state.done.note(from, last) {
            return self.reject_all(
                format!("rows restored by process {from} after its last"),
                out,
            );
        }
        if let Err(reason) = self.validate(&rows) {
            return self.reject_all(format!("restored rows: {reason}"), out);
        }
        if let Err(reason) = self.validate_states(&states) {
            return self.reject_all(format!("restored rows: {reason}"), out);
        }
        for (key, value) in rows {
            if self.rows.insert(key, value).is_some() {
                return self.reject_all(format!("{key:?} restored twice"), out);
            }
        }
        if let Err(key) = self.insert_states(states) {
            return self.reject_all(format!("{key:?}'s rule state restored twice"), out);
        }
        self.check_restored(out);
    }

    /// Once every process has sent its last rows: every worker starts at the checkpoint's
    /// clock, the backups (if any) are sent every row, and every process is told.
    fn check_restored(&mut self, out: &mut Vec<Envelope>) {
        let Some(state) = self.restore.as_ref().filter(|r| r.done.all()) else {
            return;
        };
        let clock = state.clock;
        self.restore = None;
        self.restored = true;
        if let Err(e) = self.clocks.resume_all(clock) {
            return self.reject_all(format!("a resume at clock {clock}: {e}"), out);
        }
        self.undo_run_starts(clock);
        self.replicate_restored(clock, out);
        for p in self.staying() {
            out.push(Envelope::Client(p, ToClient::Restored { shard: self.id }));
        }
    }
}
