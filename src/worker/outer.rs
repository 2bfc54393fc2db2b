//! Rank-k UPDATEs sent as their factors ([`Worker::update_outer`]): a worker buffers them
//! through the clock and at CLOCK cuts each into one [`Outer`] per shard holding some of
//! its rows (the rows' left factors, the whole right factor), which the shard multiplies
//! out (`server/shard/outer.rs`) — or, where the rows are fewer bytes than their factors
//! (few rows on that shard, many samples), multiplies them out itself and sends rows. Only for tables with a server-side update rule, whose
//! READs are the servers' value alone: nothing of the update has to be added to this
//! worker's own reads, so it never needs multiplying out here.

use super::Worker;
use crate::buf::AlignedBuf;
use crate::element::{ElemType, Element};
use crate::error::{Error, Result};
use crate::gather::Access;
use crate::ids::{RowKey, TableId};
use crate::msg::{Outer, RowBatch};
use crate::placement::Placement;
use crate::rank_k::multiply_out;
use crate::table::{resolve, Table};
use std::ops::Range;

/// A rank-k update buffered until CLOCK.
pub(super) struct PendingOuter {
    table: TableId,
    rows: Range<u64>,
    elem: ElemType,
    left: AlignedBuf,
    right: AlignedBuf,
}

impl Worker<'_> {
    /// UPDATEs rows `rows` of `table` by a sum of `k` outer products, sent as its
    /// factors: row `rows.start + i` gets `Σ_s left[s · n + i] · right[s · width ..][..width]`
    /// (`n` rows, `k = left.len() / n`, `right` being `k × width`), multiplied out by the
    /// row's shard. For a fully connected layer of `n` neurons over `width` inputs, `left`
    /// is a mini-batch's error terms (times the step) and `right` its inputs: `k · (n +
    /// width)` values leave the worker instead of `n · width` (Project Adam). At CLOCK each
    /// shard gets whichever is fewer bytes, its rows' factors or the rows multiplied out
    /// by the worker (a shard with few of the rows, or `k` near `n`): the same arithmetic
    /// either way. Each row counts as an UPDATE of the access pattern.
    ///
    /// Only for a table of `f32` or `f64` with a server-side update rule
    /// ([`Rule`](crate::Rule)): there a READ is the servers' value alone, so the update
    /// needs no multiplying out on the worker. Sums are computed in `s` order, with a
    /// multiply and an add (no fused multiply-add), the same on every machine.
    ///
    /// ```
    /// use iterstore::{Cluster, Config, Rule};
    ///
    /// # fn main() -> iterstore::Result<()> {
    /// let mut cluster = Cluster::start(Config::new(1))?;
    /// let t = cluster.create_table_with_rule::<f32>("w", 3, Some(2), Rule::Sgd { lr: 1.0 })?;
    /// cluster.run(|w| {
    ///     // Two rows, k = 2: row 0 gets 1·[1,2,3] + 2·[0,1,0], row 1 gets 3·[1,2,3] + 4·[0,1,0].
    ///     w.update_outer(&t, 0..2, &[1.0, 3.0, 2.0, 4.0], &[1.0, 2.0, 3.0, 0.0, 1.0, 0.0])?;
    ///     w.clock()
    /// })?;
    /// // SGD at rate 1 steps against the gradient.
    /// assert_eq!(cluster.snapshot(&t)?, vec![(0, vec![-1.0, -4.0, -3.0]), (1, vec![-3.0, -10.0, -9.0])]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn update_outer<T: Element>(
        &mut self,
        table: &Table<T>,
        rows: Range<u64>,
        left: &[T],
        right: &[T],
    ) -> Result<()> {
        let meta = resolve(self.tables, self.cluster, table)?;
        let refuse = |why: String| {
            Err(Error::config(
                "update_outer",
                format!("table '{}': {why}", meta.name),
            ))
        };
        if !matches!(T::TYPE, ElemType::F32 | ElemType::F64) {
            return refuse(format!("{:?} elements: only f32 and f64", T::TYPE));
        }
        if meta.rule.is_sum() {
            return refuse(
                "it has no update rule (its READs add this worker's own updates, which \
                 would have to be multiplied out here): create it with \
                 Cluster::create_table_with_rule"
                    .into(),
            );
        }
        let n = rows.end.saturating_sub(rows.start);
        if n == 0 {
            return refuse(format!("no rows in {rows:?}"));
        }
        if rows.end > table.rows {
            return Err(Error::RowOutOfRange {
                table: meta.name.clone(),
                row: rows.end - 1,
                rows: table.rows,
            });
        }
        let n = n as usize;
        let k = left.len() / n;
        if left.len() != k * n || right.len() != k * table.width {
            return refuse(format!(
                "{} left and {} right values for {n} rows of width {}: expected k × {n} and \
                 k × {}",
                left.len(),
                right.len(),
                table.width,
                table.width
            ));
        }
        for row in rows.clone() {
            self.record(table.key(row), Access::Update);
        }
        if self.virtual_only || k == 0 {
            return Ok(());
        }
        self.outer.push(PendingOuter {
            table: meta.id,
            rows,
            elem: T::TYPE,
            left: AlignedBuf::from_slice(left),
            right: AlignedBuf::from_slice(right),
        });
        Ok(())
    }

    /// Cuts the buffered rank-k updates per shard holding some of their rows, each into
    /// whichever is fewer bytes: an [`Outer`] of the rows' left factors and the whole
    /// right factor (into `outer`), or the rows multiplied out here, the same arithmetic
    /// the shard would do (into `rows`); returns the bytes sent, by table.
    pub(super) fn cut_outer(
        &mut self,
        placement: &Placement,
        outer: &mut [Vec<Outer>],
        rows_out: &mut [RowBatch],
    ) -> Vec<(TableId, u64)> {
        let mut sent: Vec<(TableId, u64)> = Vec::new();
        for o in self.outer.drain(..) {
            let n = (o.rows.end - o.rows.start) as usize;
            let size = o.elem.size();
            let k = o.left.len() / (n * size);
            let width = o.right.len() / (k * size);
            let mut mine: Vec<Vec<u64>> = vec![Vec::new(); outer.len()];
            for row in o.rows.clone() {
                mine[placement.shard_of(RowKey::new(o.table, row)) as usize].push(row);
            }
            let left = o.left.as_bytes();
            for (shard, rows) in mine.into_iter().enumerate() {
                if rows.is_empty() {
                    continue;
                }
                let mut cut = Vec::with_capacity(k * rows.len() * size);
                for s in 0..k {
                    for &row in &rows {
                        let at = (s * n + (row - o.rows.start) as usize) * size;
                        cut.extend_from_slice(&left[at..at + size]);
                    }
                }
                let cut = AlignedBuf::from_bytes(&cut);
                let factored = rows.len() * 8 + cut.len() + o.right.len();
                let whole = rows.len() * (12 + width * size);
                let multiplied = (whole < factored)
                    .then(|| multiply_out(o.elem, rows.len(), width, &cut, &o.right))
                    .flatten();
                match multiplied {
                    Some(deltas) => {
                        tally(&mut sent, o.table, whole);
                        let keys = rows.iter().map(|&row| RowKey::new(o.table, row));
                        rows_out[shard].extend(keys.zip(deltas));
                    }
                    None => {
                        tally(&mut sent, o.table, factored);
                        outer[shard].push(Outer {
                            table: o.table,
                            rows,
                            left: cut,
                            right: o.right.clone(),
                        });
                    }
                }
            }
        }
        sent
    }

    /// Whether rank-k updates wait for the next CLOCK.
    pub(super) fn has_outer(&self) -> bool {
        !self.outer.is_empty()
    }
}

/// Adds `bytes` sent to `table` into `sent` (a short list: few tables).
pub(super) fn tally(sent: &mut Vec<(TableId, u64)>, table: TableId, bytes: usize) {
    match sent.iter_mut().find(|(t, _)| *t == table) {
        Some((_, b)) => *b += bytes as u64,
        None => sent.push((table, bytes as u64)),
    }
}
