//! Rank-k updates ([`Outer`]): a worker sends a layer's update as its factors, and the
//! shard multiplies them out into per-row deltas before they take the way every delta
//! takes (validated, stepped on arrival or added when their clock is complete, through
//! the table's rule). Project Adam's parameter servers compute a fully connected layer's
//! weight update from the activations and error terms this way.
//!
//! Everything in an [`Outer`] is checked before any arithmetic: a known table with an
//! update rule, of `f32` or `f64`; lengths that are whole multiples of the rows and the
//! width; rows in the table's range and distinct; at most a GiB of output and 2³¹
//! multiply-adds. A bad one fails the cluster, like a bad row delta.

use super::Shard;
use crate::ids::RowKey;
use crate::msg::{Outer, RowBatch};
use crate::rank_k::multiply_out;
use crate::table::TableMeta;
use rustc_hash::FxHashSet;

/// The most bytes one [`Outer`] may expand into (a bound against hostile frames; a
/// fully connected layer of a million weights expands into 4 MB).
const MAX_EXPANDED_BYTES: usize = 1 << 30;

/// The most multiply-adds one [`Outer`] may take (`k · rows · width`; a second or two):
/// 64 samples of a 512 × 785 layer take 26 million.
const MAX_MULTIPLY_ADDS: usize = 1 << 31;

impl Shard {
    /// Multiplies out every update of `outer` into per-row deltas appended to `rows`;
    /// an error names the first bad one (and nothing of it is appended).
    pub(super) fn expand_outer(
        &self,
        outer: Vec<Outer>,
        rows: &mut RowBatch,
    ) -> Result<(), String> {
        for o in outer {
            let meta = self
                .table(o.table)
                .ok_or_else(|| format!("a rank-k update of unknown table #{}", o.table))?;
            check(meta, &o)?;
            let deltas = multiply_out(meta.elem, o.rows.len(), meta.width, &o.left, &o.right)
                .ok_or_else(|| {
                    format!(
                        "a rank-k update of table '{}' of {:?}: only f32 and f64",
                        meta.name, meta.elem
                    )
                })?;
            let keys = o.rows.iter().map(|&row| RowKey::new(o.table, row));
            rows.extend(keys.zip(deltas));
        }
        Ok(())
    }
}

/// Checks `o` against its table `meta` (see the module docs).
fn check(meta: &TableMeta, o: &Outer) -> Result<(), String> {
    let name = &meta.name;
    if meta.rule.is_sum() {
        return Err(format!(
            "a rank-k update of table '{name}', which has no update rule"
        ));
    }
    let n = o.rows.len();
    let size = meta.elem.size();
    if n == 0 || !o.left.len().is_multiple_of(n * size) {
        return Err(format!(
            "a rank-k update of table '{name}': {} bytes of left factors for {n} rows",
            o.left.len()
        ));
    }
    let k = o.left.len() / (n * size);
    if k == 0 || o.right.len() != k * meta.row_bytes() {
        return Err(format!(
            "a rank-k update of table '{name}': {} bytes of right factors, expected {k} rows \
             of {} bytes",
            o.right.len(),
            meta.row_bytes()
        ));
    }
    if n.saturating_mul(meta.row_bytes()) > MAX_EXPANDED_BYTES {
        return Err(format!(
            "a rank-k update of table '{name}' of {n} rows: more than {MAX_EXPANDED_BYTES} \
             bytes"
        ));
    }
    if k.saturating_mul(n).saturating_mul(meta.width) > MAX_MULTIPLY_ADDS {
        return Err(format!(
            "a rank-k update of table '{name}': {k} × {n} rows × {} columns is more than \
             {MAX_MULTIPLY_ADDS} multiply-adds",
            meta.width
        ));
    }
    let mut seen = FxHashSet::default();
    for &row in &o.rows {
        if meta.rows.is_some_and(|rows| row >= rows) {
            return Err(format!(
                "a rank-k update of table '{name}' row {row}: the table has {} rows",
                meta.rows.unwrap_or(0)
            ));
        }
        if !seen.insert(row) {
            return Err(format!(
                "a rank-k update of table '{name}' names row {row} twice"
            ));
        }
    }
    Ok(())
}
