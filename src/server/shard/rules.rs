//! Server-side update rules ([`Rule`]): for a table whose rule is not a sum, the updates
//! of a clock are gradients — added into the row's gradient, not its value, as they are
//! applied in `(clock, worker)` order — and once every update of that clock is in, each
//! row that got one is stepped through the rule with it, its state (velocity,
//! accumulators, moments, step count) kept here beside it.
//!
//! In an asynchronous cluster (`Staleness::Unbounded`) a push is instead stepped as it
//! arrives, alone (DistBelief's Downpour SGD: a parameter shard applies each replica's
//! gradients when they come), and a READ of such a row fetches the current value.
//!
//! Rows of such tables are planned like any other: a slab's deltas of them are folded
//! into the same per-row gradients ([`Fold`], in the same `(clock, worker)` order as rows
//! sent the generic way), and a step writes the row where it lives, in the arena (marked
//! changed for the next refresh) or in the generic map. So a run computes the same bits
//! whichever way its updates travel. In an asynchronous cluster a slab's rule rows are
//! stepped as it arrives too, and the rest of it waits for its clock ([`Fold::Sums`]).
//!
//! A row's state travels with it ([`RuleState`]): a checkpoint part holds it (`checkpoint`),
//! a resume brings it back (`restore`), a migration hands it over (`migration`); between
//! runs every gradient has been stepped, so the state and step count are all there is.
//!
//! [`Rule`]: crate::rule::Rule
//! [`Fold`]: crate::server::arena::Fold
//! [`Fold::Sums`]: crate::server::arena::Fold::Sums

use super::rows::Resolved;
use super::Shard;
use crate::buf::AlignedBuf;
use crate::element::ElemType;
use crate::error::panic_message;
use crate::ids::{Clock, RowKey};
use crate::msg::{Envelope, RowBatch, RuleState, RuleStates};
use crate::rule::Rule;
use crate::server::arena::Fold;
use crate::table::TableMeta;
use rustc_hash::FxHashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// One row's gradient of the clock being applied and its rule's state.
#[derive(Debug)]
struct RuleRow {
    grad: AlignedBuf,
    state: AlignedBuf,
    /// Steps taken so far.
    steps: u64,
    /// Whether it got a gradient in the clock being applied.
    touched: bool,
}

/// The rows of tables with a rule: their gradients and states, and which rows got a
/// gradient in the clock being applied.
#[derive(Debug, Default)]
pub(super) struct RuleRows {
    rows: FxHashMap<RowKey, RuleRow>,
    touched: Vec<RowKey>,
}

impl RuleRows {
    /// Whether no row has rule state.
    pub(super) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Whether some row got a gradient not stepped yet (its clock is not complete).
    pub(super) fn waiting(&self) -> bool {
        !self.touched.is_empty()
    }

    /// The keys of every row with rule state, sorted.
    pub(super) fn keys(&self) -> Vec<RowKey> {
        let mut keys: Vec<RowKey> = self.rows.keys().copied().collect();
        keys.sort_unstable();
        keys
    }

    /// Row `key`'s step count and state bytes, if it has state.
    pub(super) fn get(&self, key: RowKey) -> Option<(u64, &[u8])> {
        self.rows.get(&key).map(|r| (r.steps, r.state.as_bytes()))
    }

    /// Removes row `key`'s state (it moves to another shard), if it has one. Only between
    /// clocks' steps: its gradient is zeros.
    pub(super) fn take(&mut self, key: RowKey) -> Option<RuleState> {
        let r = self.rows.remove(&key)?;
        Some(RuleState {
            steps: r.steps,
            state: r.state,
        })
    }

    /// Gives row `key`, of `row_bytes` bytes, the state `state` (from a checkpoint or
    /// another shard); `false` if it had one already.
    pub(super) fn insert(&mut self, key: RowKey, row_bytes: usize, state: RuleState) -> bool {
        if self.rows.contains_key(&key) {
            return false;
        }
        let row = RuleRow {
            grad: AlignedBuf::zeroed(row_bytes),
            state: state.state,
            steps: state.steps,
            touched: false,
        };
        self.rows.insert(key, row);
        true
    }

    /// Adds `delta` (bytes) to the gradient of `key` (a row of a table with rule `rule`,
    /// `elem`s) for the clock being applied. All-zero deltas (bit for bit) are no update.
    fn add(&mut self, key: RowKey, rule: Rule, elem: ElemType, delta: &[u8]) {
        if delta.iter().all(|&b| b == 0) {
            return;
        }
        let len = delta.len();
        let r = self.rows.entry(key).or_insert_with(|| RuleRow {
            grad: AlignedBuf::zeroed(len),
            state: AlignedBuf::zeroed(len * rule.state_per_element()),
            steps: 0,
            touched: false,
        });
        if !std::mem::replace(&mut r.touched, true) {
            self.touched.push(key);
        }
        elem.add(r.grad.as_bytes_mut(), delta);
    }

    /// [`add`](Self::add) of a planned row's delta from a slab (`tables`: the shard's,
    /// for its rule; a row of an unknown table or of a sum is passed over).
    pub(super) fn add_planned(&mut self, tables: &[Option<TableMeta>], key: RowKey, delta: &[u8]) {
        let meta = tables.get(key.table as usize).and_then(Option::as_ref);
        if let Some(m) = meta.filter(|m| !m.rule.is_sum()) {
            self.add(key, m.rule, m.elem, delta);
        }
    }
}

impl Shard {
    /// `Ok` if every state of `states` is of a known table with an update rule and has
    /// its state size.
    pub(super) fn validate_states(&self, states: &RuleStates) -> Result<(), String> {
        for (key, s) in states {
            let meta = self
                .table(key.table)
                .ok_or_else(|| format!("rule state of unknown table #{}", key.table))?;
            let Some(bytes) = meta.state_bytes() else {
                return Err(format!(
                    "rule state of table '{}', whose rule is a sum",
                    meta.name
                ));
            };
            if s.state.len() != bytes {
                return Err(format!(
                    "rule state of table '{}' row {} has {} bytes, expected {bytes}",
                    meta.name,
                    key.row,
                    s.state.len()
                ));
            }
        }
        Ok(())
    }

    /// Takes `states` (validated) into this shard's rule rows; `Err` naming the first
    /// row that had one already.
    pub(super) fn insert_states(&mut self, states: RuleStates) -> Result<(), RowKey> {
        for (key, state) in states {
            let bytes = self.table(key.table).map_or(0, |m| m.row_bytes());
            if !self.rules.insert(key, bytes, state) {
                return Err(key);
            }
        }
        Ok(())
    }

    /// Adds `delta` to the gradient of `key` (a row of a table with rule `rule`, `elem`s)
    /// for the clock being applied. All-zero deltas (bit for bit) are no update.
    pub(super) fn add_gradient(
        &mut self,
        key: RowKey,
        rule: Rule,
        elem: ElemType,
        delta: &AlignedBuf,
    ) {
        self.rules.add(key, rule, elem, delta.as_bytes());
    }

    /// In an asynchronous cluster: steps the rows of `batch` whose table has an update
    /// rule with this push alone, now, and returns the others (added when their clock is
    /// complete, as always).
    pub(super) fn step_now(&mut self, batch: RowBatch, out: &mut Vec<Envelope>) -> RowBatch {
        let mut rest = Vec::with_capacity(batch.len());
        let mut stepped = false;
        for (key, delta) in batch {
            match self.table(key.table).map(|m| (m.rule, m.elem)) {
                Some((rule, elem)) if !rule.is_sum() => {
                    self.add_gradient(key, rule, elem, &delta);
                    stepped = true;
                }
                _ => rest.push((key, delta)),
            }
        }
        if stepped {
            self.step_rules(self.arrival_clock(), out);
        }
        rest
    }

    /// In an asynchronous cluster: steps the rule rows of a push's `slab` with it alone,
    /// now; its sum rows are added when its clock is complete ([`Fold::Sums`]). A slab
    /// that does not fit fails the cluster.
    pub(super) fn step_slab_now(&mut self, slab: &Resolved, out: &mut Vec<Envelope>) {
        let (layout, positions, bytes) = slab;
        let now = self.arrival_clock();
        let (tables, rules) = (&self.tables, &mut self.rules);
        let mut sink = |key: RowKey, delta: &[u8]| rules.add_planned(tables, key, delta);
        let fold = Fold::Rules(&mut sink);
        let applied = (self.arena).apply_slab(layout, positions.as_deref(), bytes, now, fold);
        match applied {
            Ok(()) => self.step_rules(now, out),
            Err(reason) => self.reject_all(reason, out),
        }
    }

    /// The data clock an asynchronous step is marked with in the arena: one past the
    /// current minimum clock, so that the next refresh of its chunk ships it whatever
    /// clock that refresh is at (one at the current clock may have gone already).
    fn arrival_clock(&self) -> Clock {
        self.clocks.min_clock() + 1
    }

    /// Table `table`'s rule becomes `rule`, which must be valid and of the same kind
    /// (the rows' state stays as it is); anything else fails the cluster.
    pub(super) fn set_rule(&mut self, table: u32, rule: Rule, out: &mut Vec<Envelope>) {
        let Some(Some(meta)) = self.tables.get_mut(table as usize) else {
            return self.reject_all(format!("a rule for unknown table #{table}"), out);
        };
        if !meta.rule.same_kind(&rule) {
            let reason = format!(
                "table '{}': rule {} cannot become {rule} (another kind: its state would not fit)",
                meta.name, meta.rule
            );
            return self.reject_all(reason, out);
        }
        let checked = (rule.check(meta.elem)).and_then(|()| self.update_rules.check(&rule));
        if let Err(reason) = checked {
            let reason = format!("table '{}': {reason}", meta.name);
            return self.reject_all(reason, out);
        }
        meta.rule = rule;
        self.table_changed(table);
    }

    /// Steps every row that got a gradient in the clock just applied (in the order they
    /// got their first) and clears their gradients. A planned row is stepped in the
    /// arena, changed as of data clock `now`; any other in the generic map. A custom
    /// rule's step that panics fails the cluster, naming the rule and the table.
    pub(super) fn step_rules(&mut self, now: Clock, out: &mut Vec<Envelope>) {
        let touched = std::mem::take(&mut self.rules.touched);
        let custom = self.update_rules.clone();
        for key in touched {
            let Some(meta) = self.table(key.table) else {
                continue;
            };
            let (rule, elem, bytes) = (meta.rule, meta.elem, meta.row_bytes());
            let Some(r) = self.rules.rows.get_mut(&key) else {
                continue;
            };
            r.steps += 1;
            let mut generic;
            let value: &mut [u8] = match self.arena.row_mut(key, now) {
                Some((row, _)) => row,
                None => {
                    generic = self
                        .rows
                        .entry(key)
                        .or_insert_with(|| AlignedBuf::zeroed(bytes));
                    generic.as_bytes_mut()
                }
            };
            let (grad, state, steps) = (r.grad.as_bytes(), r.state.as_bytes_mut(), r.steps);
            // `Rule::check` refuses a rule on integers when the table is created, and
            // `UpdateRules::check` a custom rule not registered here.
            let mut step = || custom.step_bytes(&rule, elem, value, grad, state, steps);
            // Only the application's code may panic: the built-in steps are not guarded.
            let stepped = match rule {
                Rule::Custom(_) => catch_unwind(AssertUnwindSafe(step)),
                _ => {
                    step();
                    Ok(())
                }
            };
            r.grad.as_bytes_mut().fill(0);
            r.touched = false;
            if let Err(payload) = stepped {
                let table = self.table(key.table).map_or("?", |m| m.name.as_str());
                let reason = format!(
                    "update rule {} panicked stepping row {} of table '{table}': {}",
                    rule,
                    key.row,
                    panic_message(payload.as_ref())
                );
                // The rows after it are not stepped: the cluster fails.
                return self.reject_all(reason, out);
            }
        }
    }
}
