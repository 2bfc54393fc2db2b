//! Many consecutive rows at once: [`Worker::read_rows`] into one dense buffer and its
//! UPDATE counterpart [`Worker::update_rows`]. Each row is one READ or UPDATE of the
//! ordinary kind, in row order, so they take the same paths (the specialized tape, the
//! views, the generic cache) and a virtual iteration records them as such.

use super::Worker;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::table::Table;

impl Worker<'_> {
    /// Reads rows `first, first + 1, …` of `table` into `out`, row after row:
    /// `out.len()` must be a multiple of the table's width (that many rows are read).
    /// Each row is a [`read`](Self::read), with its staleness and this worker's updates.
    ///
    /// ```
    /// use iterstore::{Cluster, Config};
    ///
    /// # fn main() -> iterstore::Result<()> {
    /// let mut cluster = Cluster::start(Config::new(1))?;
    /// let weights = cluster.create_table::<f32>("weights", 2)?;
    /// cluster.run(|w| {
    ///     w.update_rows(&weights, 0, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])?; // rows 0..3
    ///     let mut all = [0.0f32; 6];
    ///     w.read_rows(&weights, 0, &mut all)?;
    ///     assert_eq!(all, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    ///     w.clock()
    /// })?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn read_rows<T: Element>(
        &mut self,
        table: &Table<T>,
        first: u64,
        out: &mut [T],
    ) -> Result<()> {
        let width = self.rows_width(table, first, out.len())?;
        for (i, row) in out.chunks_exact_mut(width).enumerate() {
            self.read(table, first + i as u64, row)?;
        }
        Ok(())
    }

    /// Adds `deltas` to rows `first, first + 1, …` of `table`, row after row:
    /// `deltas.len()` must be a multiple of the table's width. Each row is an
    /// [`update`](Self::update).
    pub fn update_rows<T: Element>(
        &mut self,
        table: &Table<T>,
        first: u64,
        deltas: &[T],
    ) -> Result<()> {
        let width = self.rows_width(table, first, deltas.len())?;
        for (i, delta) in deltas.chunks_exact(width).enumerate() {
            self.update(table, first + i as u64, delta)?;
        }
        Ok(())
    }

    /// The table's width, if `len` is a whole number of its rows starting at `first`,
    /// all of them in the table; else the error naming the table.
    fn rows_width<T: Element>(&self, table: &Table<T>, first: u64, len: usize) -> Result<usize> {
        let width = table.width;
        let rows = len.checked_div(width).unwrap_or(0) as u64;
        if width == 0 || !len.is_multiple_of(width) {
            let meta = self.check(table, first, width)?;
            return Err(Error::WidthMismatch {
                table: meta.name.clone(),
                row: first,
                expected: width * rows.max(1) as usize,
                actual: len,
            });
        }
        let end = first.checked_add(rows).filter(|&end| end <= table.rows);
        if end.is_none() && rows > 0 {
            let meta = self.check(table, first, width)?;
            return Err(Error::RowOutOfRange {
                table: meta.name.clone(),
                row: first.saturating_add(rows - 1).min(table.rows.max(first)),
                rows: table.rows,
            });
        }
        Ok(width)
    }
}
