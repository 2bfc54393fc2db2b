//! What a replicated shard gives the next cluster after a loss (`docs/replication.md`,
//! "Recovery from the replicas"): each copy it holds — itself, and each backup it keeps of
//! another process's shard — says at which clocks it can give its rows ([`CopyAt`]: where
//! it is, and where its run began), and gives them at the clock the processes agree on,
//! rolled back through its undo log, encoded as a checkpoint's rows part would be
//! (`crate::rows_part`), so the new cluster restores them as it restores a checkpoint's.
//!
//! It knows a copy's clocks and its rows' encoding; not which copy the processes choose
//! (`crate::cluster`'s recovery) nor how a rollback works (`undo`).

use super::Shard;
use crate::ids::{Clock, ShardId};
use serde::{Deserialize, Serialize};

/// One copy of a shard held by a process after its cluster failed: the shard it is a copy
/// of, the minimum clock it is at and the start clock of its run (where its undo log
/// takes it back; `None`: it keeps no log).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CopyAt {
    /// The shard it is a copy of.
    pub(crate) shard: ShardId,
    /// Whether it is a backup (else the shard itself).
    pub(crate) backup: bool,
    /// Its minimum clock: every update of the clocks below is applied.
    pub(crate) at: Clock,
    /// The clock its undo log restores, if it keeps one.
    pub(crate) base: Option<Clock>,
}

impl CopyAt {
    /// Whether this copy can give its rows at `clock`.
    pub(crate) fn gives(&self, clock: Clock) -> bool {
        self.at == clock || (self.base == Some(clock) && clock < self.at)
    }
}

impl Shard {
    /// The copies this shard holds: itself, then each backup it keeps, by primary.
    pub(crate) fn copies(&self) -> Vec<CopyAt> {
        let own = CopyAt {
            shard: self.id,
            backup: false,
            at: self.copy_clock(),
            base: self.undo.base(),
        };
        let held = self.held_backups().map(|b| CopyAt {
            shard: b.id,
            backup: true,
            at: b.copy_clock(),
            base: b.undo.base(),
        });
        std::iter::once(own).chain(held).collect()
    }

    /// The rows and rule states of the copy of shard `shard` this shard holds (itself, or
    /// a backup it keeps when `backup`) at minimum clock `clock`, rolled back to it, as a
    /// rows part. `Err` naming why when it holds no such copy or cannot go back to
    /// `clock`.
    pub(crate) fn part_at(
        &mut self,
        shard: ShardId,
        backup: bool,
        clock: Clock,
    ) -> Result<Vec<u8>, String> {
        let copy = match backup {
            false if shard == self.id => self,
            false => return Err(format!("shard {} is not shard {shard}", self.id)),
            true => {
                let id = self.id;
                self.held_backup_mut(shard)
                    .ok_or_else(|| format!("shard {id} keeps no backup of shard {shard}"))?
            }
        };
        copy.roll_back(clock)?;
        let mut bytes = Vec::new();
        copy.encode_rows(clock, &mut bytes)
            .map_err(|e| format!("encoding shard {shard}'s rows: {e}"))?;
        Ok(bytes)
    }
}
