//! The run's undo log (`docs/replication.md`, "Recovery from the replicas"): while a
//! replicated shard — a primary with backups, or a backup — applies the clocks of a run,
//! it keeps the **pre-image** of every row (generic or arena, with the arena's changed
//! stamp) and every rule state they change, as it was when the run began (the first
//! pre-image of each row; later clocks of the run add only rows not kept yet), until the
//! first clock of the next run applies; [`Shard::roll_back`] puts them back, so the shard
//! holds exactly its state at the run's start clock. Pre-images, never inverse deltas: a
//! float sum does not subtract back bit for bit, and a rule's step has no inverse at all.
//!
//! A run's start is where the survivors of a loss go on from: an app's iteration is a run,
//! and an app can go on from the start of an iteration, not from the middle of one. So a
//! copy can give its state at two clocks: where it is, and where its run began.
//!
//! A shard of one copy (R = 1) records nothing and pays nothing: no loss it could roll
//! back for is survived without backups. Each row is kept once a run, whatever the clocks
//! in it (a row changed by every clock of the run costs one copy, not one a clock).
//!
//! It knows what a clock's application changes (the rows `advance` is about to add or a
//! backup's `apply_replica` to copy over, and their rule states) and how to put it back; not
//! when a rollback is due (`recovery`) nor how rows are added (`rows`, `rules`).

use super::Shard;
use crate::buf::AlignedBuf;
use crate::consistency::DeferredReads;
use crate::ids::{Clock, RowKey};
use crate::msg::RuleState;
use rustc_hash::FxHashMap;

/// One row as it was before the newest applied clock changed it.
#[derive(Debug)]
struct PreImage {
    /// Its bytes; `None`: it was in neither the arena nor the generic map (zeros).
    value: Option<AlignedBuf>,
    /// In the arena: the data clock it had last changed at.
    changed: Option<Clock>,
    /// Its rule state, if it had one.
    rule: Option<RuleState>,
}

/// The pre-images of the run's applied clocks (see the module docs).
#[derive(Debug, Default)]
pub(super) struct UndoLog {
    /// Whether this shard is a backup (a primary records while it has backups).
    backup: bool,
    /// The start clock of the run in progress (a primary's from its run barrier, a
    /// backup's from its primary's `Replicate`).
    run_start: Clock,
    /// The minimum clock the pre-images restore: the start of the run whose clocks they
    /// undo. `None`: nothing to undo.
    to: Option<Clock>,
    /// Each row the run's clocks changed, by key: its first pre-image.
    rows: FxHashMap<RowKey, PreImage>,
}

impl UndoLog {
    /// The log of a backup instance (which always records).
    pub(super) fn of_backup() -> Self {
        UndoLog {
            backup: true,
            ..UndoLog::default()
        }
    }

    /// Whether it holds nothing: no clock recorded, no pre-image.
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.to.is_none() && self.rows.is_empty()
    }

    /// A clock of the run in progress is about to be applied (its changes are recorded
    /// next): the first of the run forgets the previous run's pre-images.
    fn start(&mut self) {
        if self.to != Some(self.run_start) {
            self.rows.clear();
            self.to = Some(self.run_start);
        }
    }

    /// The minimum clock the log restores, if it holds a run's pre-images.
    pub(super) fn base(&self) -> Option<Clock> {
        self.to
    }
}

impl Shard {
    /// Whether this shard keeps an undo log: it is a backup, or a primary with backups.
    pub(super) fn recording(&self) -> bool {
        self.undo.backup || self.replicas.has_backups()
    }

    /// The rows (and rule states) the log holds pre-images of: every one the run's clocks
    /// changed.
    pub(super) fn undo_keys(&self) -> Vec<RowKey> {
        self.undo.rows.keys().copied().collect()
    }

    /// The start clock of the run in progress, as this shard's log knows it.
    pub(super) fn undo_run_start(&self) -> Clock {
        self.undo.run_start
    }

    /// A run starting at clock `start` is under way: its first applied clock starts a
    /// new log.
    pub(super) fn undo_run_starts(&mut self, start: Clock) {
        self.undo.run_start = start;
    }

    /// Clocks of the run in progress are about to be applied: the log keeps their
    /// pre-images, from the run's start (a shard that does not record keeps none).
    pub(super) fn start_undo(&mut self) {
        if self.recording() {
            self.undo.start();
        }
    }

    /// Keeps the pre-image of each row of `keys` (rows the clock being recorded is about
    /// to change) not kept yet: its value where it lives, its arena stamp and its rule
    /// state.
    pub(super) fn record_pre_images(&mut self, keys: &[RowKey]) {
        for key in keys {
            if self.undo.rows.contains_key(key) {
                continue;
            }
            let (value, changed) = match self.arena.row(*key) {
                Some(bytes) => (
                    Some(AlignedBuf::from_bytes(bytes)),
                    self.arena.changed(*key),
                ),
                None => (self.rows.get(key).map(|r| r.value().clone()), None),
            };
            let rule = (self.rules.get(*key)).map(|(steps, state)| RuleState {
                steps,
                state: AlignedBuf::from_bytes(state),
            });
            let pre = PreImage {
                value,
                changed,
                rule,
            };
            self.undo.rows.insert(*key, pre);
        }
    }

    /// Rolls this shard back to minimum clock `to`, where every copy of every shard goes
    /// on from after a loss: at the start of its run, every change of the run's clocks is
    /// undone from the log; where it is, nothing is. Either way every pending update of a
    /// clock `to` or later is discarded (its workers send it again), workers' clocks go
    /// back to `to`, reads waiting past it are dropped (their workers drop their caches and
    /// read again), and every process's next arena refresh is whole. A primary's backups
    /// are taken to have rolled back too (their acks and the replication go on from `to`).
    /// `Err` naming why, changing nothing, for any other clock (and a second rollback to
    /// an older one: a rollback uses the log up).
    pub(crate) fn roll_back(&mut self, to: Clock) -> Result<(), String> {
        let at = self.copy_clock();
        let id = self.id;
        let role = if self.undo.backup {
            "backup of shard"
        } else {
            "shard"
        };
        if to != at {
            match self.undo.to {
                Some(base) if base == to && to < at => self.undo_run(),
                Some(base) => {
                    return Err(format!(
                        "{role} {id} at minimum clock {at} cannot roll back to {to}: only to \
                         its run's start, clock {base}, or where it is"
                    ))
                }
                None => {
                    return Err(format!(
                        "{role} {id} at minimum clock {at} cannot roll back to {to}: it holds \
                         no undo log (it records one only with backups, and a rollback uses \
                         it up)"
                    ))
                }
            }
        }
        self.undo = UndoLog {
            backup: self.undo.backup,
            run_start: to,
            ..UndoLog::default()
        };
        self.pending.retain(|&c, _| c < to);
        self.deferred = DeferredReads::default();
        self.slab_deferred = DeferredReads::default();
        self.arena.forget_sent();
        match self.undo.backup {
            true => self.replicas_rolled_back(to),
            false => {
                self.clocks.roll_back(to);
                self.replicas_rolled_back(to);
            }
        }
        Ok(())
    }

    /// [`roll_back`](Self::roll_back) of the backup of shard `primary` this shard keeps.
    #[cfg(test)]
    pub(crate) fn roll_back_backup(
        &mut self,
        primary: crate::ids::ShardId,
        to: Clock,
    ) -> Result<(), String> {
        match self.held_backup_mut(primary) {
            Some(b) => b.roll_back(to),
            None => Err(format!(
                "shard {} keeps no backup of shard {primary} to roll back",
                self.id
            )),
        }
    }

    /// The minimum clock this copy is at: a primary's own, a backup's the one it applied
    /// up to.
    pub(crate) fn copy_clock(&self) -> Clock {
        match self.undo.backup {
            true => self.applied_clock(),
            false => self.clocks.min_clock(),
        }
    }

    /// Puts back every pre-image of the log: each row where it lives now (in the arena
    /// with its old stamp, or in the generic map; a row that did not exist goes, or
    /// becomes zeros in the arena) and its rule state (one that did not exist goes).
    fn undo_run(&mut self) {
        let to = self.undo.to.unwrap_or_default();
        for (key, pre) in std::mem::take(&mut self.undo.rows) {
            let stamp = pre.changed.unwrap_or(to);
            if let Some((row, _)) = self.arena.row_mut(key, stamp) {
                match &pre.value {
                    Some(v) => row.copy_from_slice(v.as_bytes()),
                    None => row.fill(0),
                }
            } else {
                match pre.value {
                    Some(v) => {
                        self.rows.insert(key, v);
                    }
                    None => {
                        self.rows.remove(&key);
                    }
                }
            }
            self.rules.take(key);
            if let Some(state) = pre.rule {
                let bytes = self.table(key.table).map_or(0, |m| m.row_bytes());
                self.rules.insert(key, bytes, state);
            }
        }
    }
}
