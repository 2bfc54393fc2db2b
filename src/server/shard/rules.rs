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
//! Rows of such tables live in the generic map: no plan subscribes them (`plan` leaves
//! them out, and a shard refuses a plan naming one), so a slab never carries them.
//!
//! [`Rule`]: crate::rule::Rule

use super::Shard;
use crate::buf::AlignedBuf;
use crate::element::ElemType;
use crate::ids::RowKey;
use crate::msg::{Envelope, RowBatch};
use crate::rule::Rule;
use rustc_hash::FxHashMap;

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
    /// Whether some row has rule state (a checkpoint or migration would lose it).
    pub(super) fn has_state(&self) -> bool {
        !self.rows.is_empty()
    }
}

impl Shard {
    /// Adds `delta` to the gradient of `key` (a row of a table with rule `rule`, `elem`s)
    /// for the clock being applied. All-zero deltas (bit for bit) are no update.
    pub(super) fn add_gradient(
        &mut self,
        key: RowKey,
        rule: Rule,
        elem: ElemType,
        delta: &AlignedBuf,
    ) {
        if delta.as_bytes().iter().all(|&b| b == 0) {
            return;
        }
        let len = delta.len();
        let r = self.rules.rows.entry(key).or_insert_with(|| RuleRow {
            grad: AlignedBuf::zeroed(len),
            state: AlignedBuf::zeroed(len * rule.state_per_element()),
            steps: 0,
            touched: false,
        });
        if !std::mem::replace(&mut r.touched, true) {
            self.rules.touched.push(key);
        }
        elem.add(r.grad.as_bytes_mut(), delta.as_bytes());
    }

    /// In an asynchronous cluster: steps the rows of `batch` whose table has an update
    /// rule with this push alone, now, and returns the others (added when their clock is
    /// complete, as always).
    pub(super) fn step_now(&mut self, batch: RowBatch) -> RowBatch {
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
            self.step_rules();
        }
        rest
    }

    /// Table `table`'s rule becomes `rule`, which must be valid and of the same kind
    /// (the rows' state stays as it is); anything else fails the cluster.
    pub(super) fn set_rule(&mut self, table: u32, rule: Rule, out: &mut Vec<Envelope>) {
        let Some(Some(meta)) = self.tables.get_mut(table as usize) else {
            return self.reject_all(format!("a rule for unknown table #{table}"), out);
        };
        if meta.rule.kind() != rule.kind() {
            let reason = format!(
                "table '{}': rule {} cannot become {rule} (another kind: its state would not fit)",
                meta.name, meta.rule
            );
            return self.reject_all(reason, out);
        }
        if let Err(reason) = rule.check(meta.elem) {
            let reason = format!("table '{}': {reason}", meta.name);
            return self.reject_all(reason, out);
        }
        meta.rule = rule;
    }

    /// Steps every row that got a gradient in the clock just applied (in the order they
    /// got their first) and clears their gradients.
    pub(super) fn step_rules(&mut self) {
        let touched = std::mem::take(&mut self.rules.touched);
        for key in touched {
            let Some(meta) = self.table(key.table) else {
                continue;
            };
            let (rule, elem, bytes) = (meta.rule, meta.elem, meta.row_bytes());
            let Some(r) = self.rules.rows.get_mut(&key) else {
                continue;
            };
            r.steps += 1;
            let mut value = self
                .rows
                .entry(key)
                .or_insert_with(|| AlignedBuf::zeroed(bytes));
            match elem {
                ElemType::F32 => {
                    rule.step::<f32>(value.cast_mut(), r.grad.cast(), r.state.cast_mut(), r.steps)
                }
                ElemType::F64 => {
                    rule.step::<f64>(value.cast_mut(), r.grad.cast(), r.state.cast_mut(), r.steps)
                }
                // `Rule::check` refuses a rule on integers when the table is created.
                ElemType::I32 | ElemType::I64 => {}
            }
            r.grad.as_bytes_mut().fill(0);
            r.touched = false;
        }
    }
}
