//! Promotion of a backup (`docs/replication.md`, "Promotion on a loss", step 4), as a
//! state-machine step of the shard keeping it: the backup of a lost primary becomes a
//! primary shard of its own, at the clock it applied up to, serving reads and taking
//! clocks from there exactly as the primary would have.
//!
//! **Not wired yet**: nothing in the cluster calls it (no loss is survived), and the rest
//! of a promotion is not built — agreeing the rollback clock over the survivors (the
//! rollback to it is `undo`'s, not called either), routing the promoted shard's messages
//! to the keeping thread, picking its new backups. So a promotion here is right only when
//! the backup is at the clock the survivors resume from. Shard 0's coordinator duties
//! (table ids, all-gathers) are not carried over: its promotion is refused.
//!
//! It knows what a primary's state is beyond its rows (clocks, runs, what was announced);
//! not how the backup got its rows (`replicas`).

use super::Shard;
use crate::ids::ShardId;

impl Shard {
    /// Takes the backup of `primary` this shard keeps out as a primary of its own: its
    /// tables, rows and rule states are `primary`'s at the minimum clock the backup
    /// applied up to, where every worker resumes, with run `run` (the last every process
    /// ended) behind it. It has no arena and no subscriptions (each process re-sends its
    /// plan, which moves the planned rows in with their values), no backups, and answers
    /// its own process's arena as this shard does. `Err` if this shard keeps no backup of
    /// `primary`, or `primary` is shard 0 (the coordinator).
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "promotion is not wired to the cluster yet")
    )]
    pub(crate) fn promote(&mut self, primary: ShardId, run: u64) -> Result<Shard, String> {
        if primary == 0 {
            return Err(
                "shard 0's coordinator duties are not carried over by a promotion yet".into(),
            );
        }
        let Some(mut b) = self.take_backup(primary) else {
            return Err(format!(
                "shard {} keeps no backup of shard {primary} to promote",
                self.id
            ));
        };
        let clock = b.applied_clock();
        b.clocks
            .resume_all(clock)
            .map_err(|e| format!("backup of shard {primary} cannot resume at {clock}: {e}"))?;
        b.ended.fill(run);
        b.run = run;
        b.replicated_up_to(clock);
        // A primary without backups: it records no undo log.
        b.undo = super::undo::UndoLog::default();
        b.local.clone_from(&self.local);
        Ok(b)
    }
}
