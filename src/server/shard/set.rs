//! Setting rows between runs ([`ToShard::SetRows`](crate::msg::ToShard::SetRows), from
//! [`Cluster::set_rows`]): every process sends the rows it sets whose home is this shard,
//! the last message flagged; each row takes its new value at once (in the arena if planned,
//! else in the generic map). Once every process has sent its last, the shard forgets what
//! it last sent each process's arena — those processes drop their copies, so their next
//! refreshes must be whole — and tells every process ([`ToClient::RowsSet`]).
//!
//! Only between runs, with every update applied: work of the next run, an all-gather, a
//! plan or a process leaving before every process's last fails the cluster at once
//! (the processes called different collectives) instead of leaving anyone waiting; so
//! does one row set by two processes (which value wins would depend on timing).
//!
//! [`Cluster::set_rows`]: crate::cluster::Cluster::set_rows

use super::{Lasts, Shard};
use crate::buf::AlignedBuf;
use crate::ids::{ProcessId, RowKey};
use crate::msg::{Envelope, ToClient};
use rustc_hash::FxHashMap;

/// Where a shard is in a set: which processes have sent their last rows, and who set
/// each row so far.
#[derive(Debug)]
pub(super) struct Setting {
    /// The first process whose rows came (named in errors).
    first: ProcessId,
    done: Lasts,
    by: FxHashMap<RowKey, ProcessId>,
}

impl Setting {
    /// Whether process `p` has sent its last rows.
    pub(super) fn done_by(&self, p: ProcessId) -> bool {
        self.done.done_by(p)
    }
}

impl Shard {
    /// Rows `from` sets whose home is this shard (see the module docs).
    pub(super) fn set_rows(
        &mut self,
        from: ProcessId,
        rows: Vec<(RowKey, AlignedBuf)>,
        last: bool,
        out: &mut Vec<Envelope>,
    ) {
        if self.setting.is_none() {
            if let Some(reason) = self.busy_for_set(from) {
                return self.reject_everyone(reason, out);
            }
            self.setting = Some(Setting {
                first: from,
                done: Lasts::new(self.world.processes),
                by: FxHashMap::default(),
            });
        }
        if let Err(reason) = self.validate(&rows) {
            return self.reject_all(format!("rows set by process {from}: {reason}"), out);
        }
        let Some(state) = self.setting.as_mut() else {
            return;
        };
        if !state.done.note(from, last) {
            return self.reject_all(format!("rows set by process {from} after its last"), out);
        }
        for (key, _) in &rows {
            if let Some(other) = state.by.insert(*key, from) {
                let table = self.table(key.table).map_or("?", |m| m.name.as_str());
                return self.reject_everyone(
                    format!(
                        "row {} of table '{table}' set by process {other} and by process \
                         {from} (which value wins would depend on timing)",
                        key.row
                    ),
                    out,
                );
            }
        }
        let now = self.clocks.min_clock();
        for (key, value) in rows {
            match self.arena.row_mut(key, now) {
                Some((row, _)) => row.copy_from_slice(value.as_bytes()),
                None => {
                    self.rows.insert(key, value);
                }
            }
        }
        self.check_set(out);
    }

    /// Why `from` cannot begin setting rows here now, if it cannot: the run after the
    /// last one ended has begun somewhere, updates wait, or another collective is open.
    fn busy_for_set(&self, from: ProcessId) -> Option<String> {
        if let Some(p) = (0..self.world.processes).find(|&p| self.working[p]) {
            return Some(format!(
                "process {from} sets rows while process {p} went on to run {} (the \
                 processes called different collectives: set_rows on one, a run on another)",
                self.run + 1
            ));
        }
        if !self.pending.is_empty() || self.migration.is_some() || self.restore.is_some() {
            return Some(format!(
                "process {from} sets rows while updates, a migration or a resume are under \
                 way (set_rows is only between runs)"
            ));
        }
        let round = self.coordinator.as_ref().and_then(|c| c.open_round());
        round.map(|round| {
            format!(
                "process {from} sets rows while all-gather round {round} is open (the \
                 processes called different collectives)"
            )
        })
    }

    /// Once every process has sent its last rows: every subscription's next refresh is
    /// whole, and every process is told.
    fn check_set(&mut self, out: &mut Vec<Envelope>) {
        if !self.setting.as_ref().is_some_and(|s| s.done.all()) {
            return;
        }
        self.setting = None;
        self.arena.forget_sent();
        for p in self.staying() {
            out.push(Envelope::Client(p, ToClient::RowsSet { shard: self.id }));
        }
    }

    /// A message of another collective (or of the next run) from `from` while rows are
    /// being set: the processes called different collectives, and every process is told.
    /// Returns whether it was refused.
    pub(super) fn refuse_during_set(
        &self,
        from: ProcessId,
        what: &str,
        out: &mut Vec<Envelope>,
    ) -> bool {
        let Some(state) = &self.setting else {
            return false;
        };
        self.reject_everyone(
            format!(
                "process {from} sent {what} while process {} sets rows (the processes called \
                 different collectives: set_rows on one, not on another)",
                state.first
            ),
            out,
        );
        true
    }
}
