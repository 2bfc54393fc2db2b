//! Migration: rows moving between shards under a new placement ([`ToShard::Migrate`]). Each
//! shard hands over the rows whose new home is another shard, with their update-rule
//! states ([`ToShard::Adopt`], one per shard, empty ones too) and adopts those handed to
//! it, in either order; once it has done both it tells every process
//! ([`ToClient::Migrated`]).
//!
//! Only between runs, before any plan: rows in the arena or updates not yet visible could
//! not follow. A replicated shard takes part but refuses to move a row (its backups
//! would not follow): after a recovery the rows are already where the new placement
//! puts them. It knows the placement, the generic rows and their rule states; not clocks'
//! meaning, plans' layouts or checkpoints.

use super::Shard;
use crate::buf::AlignedBuf;
use crate::ids::{ProcessId, RowKey, ShardId};
use crate::msg::{Envelope, RuleStates, ToClient, ToShard};
use crate::placement::Placement;

/// Where a shard is in a migration: its own hand-over done, and from which shards it has
/// adopted rows. Both can happen in either order.
#[derive(Debug)]
pub(super) struct Migration {
    handed_over: bool,
    adopted_from: Vec<bool>,
}

impl Shard {
    /// This shard's part of a migration: every row it holds whose home under the new
    /// placement is another shard goes there, with its update-rule state, in one
    /// [`ToShard::Adopt`] per shard (empty ones too, so each shard knows when it has
    /// everything). Only between runs, before any plan: rows in the arena or updates not
    /// yet visible could not follow.
    pub(super) fn migrate(
        &mut self,
        from: ProcessId,
        overrides: Vec<(RowKey, ShardId)>,
        out: &mut Vec<Envelope>,
    ) {
        let total = self.world.total_shards();
        if self.world.process_of_shard(self.id) != Some(from) {
            return self.reject_all(
                format!("process {from} asked shard {} to migrate", self.id),
                out,
            );
        }
        if !self.pending.is_empty() || self.rules.waiting() || self.arena.rows().next().is_some() {
            return self.reject_all(
                "a migration after updates are pending or rows are planned".into(),
                out,
            );
        }
        if let Some((key, s)) = overrides.iter().find(|(_, s)| *s as usize >= total) {
            return self.reject_all(format!("migration sends {key:?} to shard {s}"), out);
        }
        let state = self.migration.get_or_insert_with(|| Migration {
            handed_over: false,
            adopted_from: vec![false; total],
        });
        if state.handed_over {
            return self.reject_all("a second migration before the first ended".into(), out);
        }
        state.handed_over = true;
        let mut placement = Placement::hashed(total);
        for (key, shard) in overrides {
            placement.set(key, shard);
        }
        let mut leaving: Vec<RowKey> = self
            .rows
            .iter()
            .map(|e| *e.key())
            .filter(|&k| placement.shard_of(k) != self.id)
            .collect();
        leaving.sort_unstable();
        let states_leaving =
            (self.rules.keys().into_iter()).any(|k| placement.shard_of(k) != self.id);
        if (!leaving.is_empty() || states_leaving) && self.replicated() {
            return self.reject_all(
                format!(
                    "a migration that moves rows off shard {}, which is replicated \
                     (shard_replicas): its backups would not follow",
                    self.id
                ),
                out,
            );
        }
        let mut to: Vec<Vec<(RowKey, AlignedBuf)>> = vec![Vec::new(); total];
        for key in leaving {
            if let Some((key, value)) = self.rows.remove(&key) {
                to[placement.shard_of(key) as usize].push((key, value));
            }
        }
        // A row's state leaves with it (a row stepped back to zeros may have no value).
        let mut states: Vec<RuleStates> = vec![Vec::new(); total];
        for key in self.rules.keys() {
            let home = placement.shard_of(key);
            if home != self.id {
                if let Some(state) = self.rules.take(key) {
                    states[home as usize].push((key, state));
                }
            }
        }
        for (shard, (rows, states)) in to.into_iter().zip(states).enumerate() {
            if shard != self.id as usize {
                let adopt = ToShard::Adopt {
                    shard: self.id,
                    rows,
                    states,
                };
                out.push(Envelope::Shard(shard as ShardId, adopt));
            }
        }
        self.check_migrated(out);
    }

    /// Rows shard `from` handed over in a migration, with their rule states.
    pub(super) fn adopt(
        &mut self,
        from: ShardId,
        (rows, states): (Vec<(RowKey, AlignedBuf)>, RuleStates),
        out: &mut Vec<Envelope>,
    ) {
        let total = self.world.total_shards();
        if from as usize >= total || from == self.id {
            return self.reject_all(format!("rows adopted from shard {from}"), out);
        }
        let state = self.migration.get_or_insert_with(|| Migration {
            handed_over: false,
            adopted_from: vec![false; total],
        });
        if std::mem::replace(&mut state.adopted_from[from as usize], true) {
            return self.reject_all(format!("rows adopted twice from shard {from}"), out);
        }
        if (!rows.is_empty() || !states.is_empty()) && self.replicated() {
            return self.reject_all(
                format!(
                    "rows moved onto shard {}, which is replicated (shard_replicas): its \
                     backups would not follow",
                    self.id
                ),
                out,
            );
        }
        let valid = self.validate_as("adoption", &rows);
        if let Err(reason) = valid.and_then(|()| self.validate_states(&states)) {
            return self.reject_all(format!("adopted rows: {reason}"), out);
        }
        for (key, value) in rows {
            if self.rows.insert(key, value).is_some() {
                return self.reject_all(format!("{key:?} adopted but already here"), out);
            }
        }
        if let Err(key) = self.insert_states(states) {
            return self.reject_all(
                format!("{key:?}'s rule state adopted but already here"),
                out,
            );
        }
        self.check_migrated(out);
    }

    /// Tells every process once this shard has handed over and adopted everything.
    fn check_migrated(&mut self, out: &mut Vec<Envelope>) {
        let done = self.migration.as_ref().is_some_and(|m| {
            m.handed_over
                && m.adopted_from
                    .iter()
                    .enumerate()
                    .all(|(s, &a)| a || s == self.id as usize)
        });
        if done {
            self.migration = None;
            for p in self.staying() {
                out.push(Envelope::Client(p, ToClient::Migrated { shard: self.id }));
            }
        }
    }
}
