//! The one-clock undo log (`docs/replication.md`, "Promotion on a loss", step 3): while a
//! replicated shard — a primary with backups, or a backup — applies a clock, it keeps the
//! **pre-image** of every row (generic or arena, with the arena's changed stamp) and
//! every rule state that clock changes, until the next clock applies; [`Shard::roll_back`]
//! puts them back, so the shard holds exactly its state at the clock before. Pre-images,
//! never inverse deltas: a float sum does not subtract back bit for bit, and a rule's
//! step has no inverse at all.
//!
//! A shard of one copy (R = 1) records nothing and pays nothing: no loss it could roll
//! back for is survived without backups.
//!
//! It knows what a clock's application changes (the rows `advance` is about to add or a
//! backup's `apply_replica` to copy over, and their rule states) and how to put it back; not
//! when a rollback is due (the agreed clock, not built) nor how rows are added (`rows`,
//! `rules`).

use super::Shard;
use crate::buf::AlignedBuf;
use crate::consistency::DeferredReads;
use crate::ids::{Clock, RowKey, ShardId};
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

/// The pre-images of the newest applied clock (see the module docs).
#[derive(Debug, Default)]
pub(super) struct UndoLog {
    /// Whether this shard is a backup (a primary records while it has backups).
    backup: bool,
    /// The minimum clock the pre-images restore: the newest applied clock, whose changes
    /// they undo. `None`: nothing to undo.
    to: Option<Clock>,
    /// Each row the clock changed, by key: its first pre-image.
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

    /// Forgets the previous clock's pre-images: clock `clock` is about to be applied
    /// (its changes are recorded next), leaving the shard at minimum clock `clock + 1`.
    fn start(&mut self, clock: Clock) {
        self.rows.clear();
        self.to = Some(clock);
    }
}

impl Shard {
    /// Whether this shard keeps an undo log: it is a backup, or a primary with backups.
    pub(super) fn recording(&self) -> bool {
        self.undo.backup || self.replicas.has_backups()
    }

    /// Starts the undo log of clock `clock`, the last the minimum clock's advance applies
    /// (a shard that does not record keeps none).
    pub(super) fn start_undo(&mut self, clock: Clock) {
        if self.recording() {
            self.undo.start(clock);
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

    /// Rolls this shard back to minimum clock `to`, where every surviving copy of every
    /// shard resumes after a loss: at `to + 1` its newest clock's changes are undone from
    /// the log, at `to` nothing is; either way every pending update of a clock `to` or
    /// later is discarded (its workers send it again), workers' clocks go back to `to`,
    /// reads waiting past it are dropped (their workers drop their caches and read
    /// again), and every process's next arena refresh is whole. A primary's backups are
    /// taken to have rolled back too (their acks and the replication go on from `to`).
    /// `Err` naming why, changing nothing, for anything further back (one clock at most,
    /// and once: a second rollback is refused) or ahead.
    pub(crate) fn roll_back(&mut self, to: Clock) -> Result<(), String> {
        let at = match self.undo.backup {
            true => self.applied_clock(),
            false => self.clocks.min_clock(),
        };
        let id = self.id;
        let role = if self.undo.backup {
            "backup of shard"
        } else {
            "shard"
        };
        if at.checked_sub(1) == Some(to) {
            if self.undo.to != Some(to) {
                return Err(format!(
                    "{role} {id} at minimum clock {at} cannot roll back to {to}: it holds no \
                     undo log of clock {to} (it records one only with backups, and a \
                     rollback uses it up)"
                ));
            }
            self.undo_newest_clock();
        } else if at != to {
            return Err(format!(
                "{role} {id} at minimum clock {at} cannot roll back to {to}: only its \
                 newest clock can be undone"
            ));
        }
        self.undo = UndoLog {
            backup: self.undo.backup,
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
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "promotion is not wired to the cluster yet")
    )]
    pub(crate) fn roll_back_backup(&mut self, primary: ShardId, to: Clock) -> Result<(), String> {
        match self.held_backup_mut(primary) {
            Some(b) => b.roll_back(to),
            None => Err(format!(
                "shard {} keeps no backup of shard {primary} to roll back",
                self.id
            )),
        }
    }

    /// Puts back every pre-image of the log: each row where it lives now (in the arena
    /// with its old stamp, or in the generic map; a row that did not exist goes, or
    /// becomes zeros in the arena) and its rule state (one that did not exist goes).
    fn undo_newest_clock(&mut self) {
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
