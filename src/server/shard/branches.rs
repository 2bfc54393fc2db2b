//! Branches of the training state on a shard ([`ToShard::Branch`](crate::msg::ToShard::Branch)
//! → [`ToClient::Branched`]): copies of this shard's rows — generic and arena rows — and of
//! their update-rule states, one per branch, kept here beside the live ones.
//!
//! The shard serves one branch, the **live** one, from its ordinary storage (the generic
//! map, the arena, the rule rows); every other branch sits in a **slot** ([`Values`]).
//! Forking copies the live values (or a slot) into a new slot; switching keeps the live
//! values in the live branch's slot and moves the other branch's in, so the plan, the
//! subscriptions and the arena layout stay as they are — only values move. A switch
//! forgets what was last sent to every subscription, as a set of rows does: every
//! process drops its copies after it, so the next refreshes are whole. Parking hands a
//! slot to the shard's process as a rows part (`crate::rows_part`'s format, which the
//! process writes through the checkpoint layer) and drops it; unparking takes such a part
//! back into a slot.
//!
//! An arena copy is its words as they were: the arena only grows and rows keep their
//! place, so a copy taken before a later plan is a prefix of today's layout, and rows
//! subscribed since take their value from the copy's generic rows (where they were).
//!
//! Only between runs at the cluster's clock, every update applied (as a checkpoint), and
//! only from the shard's own process: each process drives its own shards, the processes
//! agree on the op before and all-gather the outcome after (`Cluster::fork`). A misuse the
//! shard sees (an unknown branch, the live branch freed) is answered as an error; it does
//! not fail the cluster. Nothing here knows files, schedules or settings.

use super::Shard;
use crate::buf::AlignedBuf;
use crate::ids::{BranchId, Clock, ProcessId, RowKey};
use crate::msg::{BranchOp, BranchOutcome, Envelope, RuleState, ToClient};
use crate::rows_part::{self, Item};
use rustc_hash::FxHashMap;

/// One branch's values on a shard, while it is not the live one.
#[derive(Debug, Clone, Default)]
pub(super) struct Values {
    /// Rows of the generic map.
    rows: Vec<(RowKey, AlignedBuf)>,
    /// The arena's words (a prefix of its layout: see the module docs).
    arena: Vec<u64>,
    /// Rows' update-rule states.
    states: Vec<(RowKey, RuleState)>,
}

/// The branches a shard keeps: which one is live, and the others' slots.
#[derive(Debug, Default)]
pub(super) struct Branches {
    live: BranchId,
    slots: FxHashMap<BranchId, Values>,
}

impl Branches {
    /// Whether some branch other than the live one is in a slot.
    pub(super) fn any_slot(&self) -> bool {
        !self.slots.is_empty()
    }

    /// Whether branch `id` is the live one or in a slot.
    fn known(&self, id: BranchId) -> bool {
        id == self.live || self.slots.contains_key(&id)
    }
}

impl Shard {
    /// `from` asks for `op` on this shard's branches at clock `clock` (see the module
    /// docs); answers `from` with the outcome. A request from another process or out of
    /// place (between runs at `clock`, nothing pending) breaks the protocol and fails the
    /// cluster.
    pub(super) fn branch(
        &mut self,
        from: ProcessId,
        clock: Clock,
        op: BranchOp,
        out: &mut Vec<Envelope>,
    ) {
        if self.world.process_of_shard(self.id) != Some(from) {
            let reason = format!("process {from} asked shard {} for a branch op", self.id);
            return self.reject_all(reason, out);
        }
        if let Err(reason) = self.between_runs_at(clock) {
            return self.reject_all(format!("a branch op at clock {clock} {reason}"), out);
        }
        let outcome = self.branch_op(op, clock);
        out.push(Envelope::Client(
            from,
            ToClient::Branched {
                shard: self.id,
                outcome,
            },
        ));
    }

    /// Whether a migration from `from` must be refused because branches sit in slots (their
    /// rows are kept where they were: a migration would leave them on the wrong shards).
    pub(super) fn refuse_migration_with_branches(
        &self,
        from: ProcessId,
        out: &mut Vec<Envelope>,
    ) -> bool {
        if !self.branches.any_slot() {
            return false;
        }
        let reason = format!(
            "process {from} migrates rows while branches other than the live one exist \
             (place rows before forking)"
        );
        self.reject_all(reason, out);
        true
    }

    fn branch_op(&mut self, op: BranchOp, clock: Clock) -> BranchOutcome {
        let live = self.branches.live;
        match op {
            BranchOp::Fork { source, id } => {
                if self.branches.known(id) {
                    return Err(format!("{id} exists already"));
                }
                let values = if source == live {
                    self.live_values()
                } else {
                    let slot = self.branches.slots.get(&source);
                    slot.ok_or_else(|| format!("{source} is not on this shard"))?
                        .clone()
                };
                self.branches.slots.insert(id, values);
            }
            BranchOp::Switch { to } if to == live => {}
            BranchOp::Switch { to } => {
                let values = self.branches.slots.remove(&to);
                let values = values.ok_or_else(|| format!("{to} is not on this shard"))?;
                let saved = self.live_values();
                self.branches.slots.insert(live, saved);
                self.install_values(values);
                self.branches.live = to;
            }
            BranchOp::Free { id } | BranchOp::Park { id } if id == live => {
                return Err(format!("{id} is the live branch"));
            }
            BranchOp::Free { id } => {
                let slot = self.branches.slots.remove(&id);
                slot.ok_or_else(|| format!("{id} is not on this shard"))?;
            }
            BranchOp::Park { id } => {
                let slot = self.branches.slots.get(&id);
                let values = slot.ok_or_else(|| format!("{id} is not on this shard"))?;
                let part = self.encode_values(values, clock)?;
                self.branches.slots.remove(&id);
                return Ok(part);
            }
            BranchOp::Unpark { id, part } => {
                if self.branches.known(id) {
                    return Err(format!("{id} exists already"));
                }
                let values = self.decode_values(&part)?;
                self.branches.slots.insert(id, values);
            }
        }
        Ok(Vec::new())
    }

    /// A copy of the live values.
    fn live_values(&self) -> Values {
        let mut rows: Vec<(RowKey, AlignedBuf)> = self
            .rows
            .iter()
            .map(|e| (*e.key(), e.value().clone()))
            .collect();
        rows.sort_unstable_by_key(|(k, _)| *k);
        let states = self
            .rules
            .keys()
            .into_iter()
            .filter_map(|key| {
                let (steps, state) = self.rules.get(key)?;
                let state = AlignedBuf::from_bytes(state);
                Some((key, RuleState { steps, state }))
            })
            .collect();
        Values {
            rows,
            arena: self.arena.values().1.to_vec(),
            states,
        }
    }

    /// `values` become the live ones; every subscription's next refresh is whole.
    fn install_values(&mut self, values: Values) {
        let now = self.clocks.min_clock();
        let mut generic: FxHashMap<RowKey, AlignedBuf> = values.rows.into_iter().collect();
        self.arena.set_values(&values.arena, now);
        let copied = self.arena.rows_of(&values.arena).count();
        let later: Vec<RowKey> = self.arena.values().0[copied..].to_vec();
        for key in later {
            if let (Some(value), Some((row, _))) =
                (generic.remove(&key), self.arena.row_mut(key, now))
            {
                row.copy_from_slice(value.as_bytes());
            }
        }
        self.rows.clear();
        for (key, value) in generic {
            self.rows.insert(key, value);
        }
        for key in self.rules.keys() {
            self.rules.take(key);
        }
        for (key, state) in values.states {
            let bytes = self.table(key.table).map_or(0, |m| m.row_bytes());
            self.rules.insert(key, bytes, state);
        }
        self.arena.forget_sent();
    }

    /// `values` as a rows part of this shard at `clock`: rows not all zeros, then rule
    /// states, each sorted by key.
    fn encode_values(&self, values: &Values, clock: Clock) -> Result<Vec<u8>, String> {
        let mut rows: Vec<(RowKey, &[u8])> = values
            .rows
            .iter()
            .map(|(k, v)| (*k, v.as_bytes()))
            .chain(self.arena.rows_of(&values.arena))
            .filter(|(_, v)| rows_part::keep(v))
            .collect();
        rows.sort_unstable_by_key(|(k, _)| *k);
        let header = rows_part::Header {
            shard: self.id,
            clock,
            rows: rows.len() as u64,
            states: values.states.len() as u64,
        };
        let mut out = Vec::new();
        let written = (|| {
            rows_part::write_header(&mut out, header)?;
            for (key, row) in rows {
                rows_part::write_row(&mut out, key, row)?;
            }
            for (key, s) in &values.states {
                rows_part::write_state(&mut out, *key, s.steps, s.state.as_bytes())?;
            }
            std::io::Result::Ok(())
        })();
        written.map_err(|e| format!("encoding a parked branch: {e}"))?;
        Ok(out)
    }

    /// A slot from a rows part [`encode_values`](Self::encode_values) made on this shard.
    fn decode_values(&self, part: &[u8]) -> Result<Values, String> {
        let mut values = Values::default();
        let sizes = |t: u32| self.table(t).map(|m| (m.row_bytes(), m.state_bytes()));
        let header = rows_part::read(part, sizes, |item| match item {
            Item::Row(key, row) => values.rows.push((key, row)),
            Item::State(key, state) => values.states.push((key, state)),
        })
        .map_err(|e| format!("a parked branch's rows: {e}"))?;
        if header.shard != self.id {
            return Err(format!(
                "a parked branch's rows of shard {}, given to shard {}",
                header.shard, self.id
            ));
        }
        Ok(values)
    }
}
