//! [`Cluster::set_rows`]: giving rows new values between runs — initial values that are not
//! zeros, weights loaded from elsewhere, a row reset — as a collective: every process sends
//! the rows it sets to their home shards ([`ToShard::SetRows`]) and waits until every shard
//! has every process's ([`ToClient::RowsSet`](crate::msg::ToClient::RowsSet)); then it
//! drops every copy of a row it holds (the generic cache, the specialized arena's chunks,
//! the workers' views), so the next run reads the new values through the same specialized
//! paths as before.
//!
//! It knows the message and the waiting; how a shard stores the rows is `server`'s, and
//! what a worker keeps between runs `worker`'s.

use super::batches::ShardBatches;
use super::Cluster;
use crate::buf::AlignedBuf;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::msg::ToShard;
use crate::table::{resolve, Table};

impl Cluster {
    /// Sets `rows` of `table` to the values given, between runs: `(row, values)` pairs,
    /// each of the table's width (the shape [`snapshot`](Self::snapshot) returns). A
    /// **collective**: every process calls it at the same point of the program, with
    /// its own rows (possibly none); it returns once every process's rows are set
    /// everywhere. The next run reads the new values, in every mode and on the
    /// specialized paths (every copy of a row this process held is dropped and fetched
    /// anew, whole). Updates then add to the values set, as to zeros before.
    ///
    /// A row set twice — within one call or by two processes — is refused (which value
    /// won would depend on timing), as are a row outside a sized table and a value of
    /// the wrong width, before anything is sent. `-0.0` is stored as `0.0` (rows hold
    /// what adding to zeros gives; every other value is kept bit for bit). A process that
    /// calls another collective, starts a run or ends while the others set rows fails
    /// the cluster at once, naming it.
    ///
    /// Setting rows is a whole-cluster synchronisation and drops this process's cached
    /// rows: meant for initialization and occasional resets, not for every iteration
    /// (UPDATE with a delta for that).
    ///
    /// ```
    /// use iterstore::{Cluster, Config};
    ///
    /// # fn main() -> iterstore::Result<()> {
    /// let mut cluster = Cluster::start(Config::new(2))?;
    /// let w = cluster.create_table_sized::<f32>("w", 3, 2)?;
    /// cluster.set_rows(&w, &[(0, vec![0.5, -1.0, 2.0]), (1, vec![1.0; 3])])?;
    /// cluster.run(|worker| {
    ///     let mut row = [0.0f32; 3];
    ///     worker.read(&w, 0, &mut row)?;
    ///     assert_eq!(row, [0.5, -1.0, 2.0]);
    ///     worker.clock()
    /// })?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_rows<T: Element>(&mut self, table: &Table<T>, rows: &[(u64, Vec<T>)]) -> Result<()> {
        self.check()?;
        self.refuse_with_backups("set_rows")?;
        let meta = resolve(self.registry.tables(), self.id, table)?;
        let mut seen = std::collections::HashSet::with_capacity(rows.len());
        for (row, values) in rows {
            if *row >= table.rows {
                return Err(Error::RowOutOfRange {
                    table: meta.name.clone(),
                    row: *row,
                    rows: table.rows,
                });
            }
            if values.len() != table.width {
                return Err(Error::WidthMismatch {
                    table: meta.name.clone(),
                    row: *row,
                    expected: table.width,
                    actual: values.len(),
                });
            }
            if !seen.insert(*row) {
                return Err(Error::config(
                    "set_rows",
                    format!(
                        "row {row} of table '{}' is given twice (which value wins would be \
                         arbitrary)",
                        meta.name
                    ),
                ));
            }
        }
        let placement = self.shared.placement();
        let mut batches = ShardBatches::new(self.shared.world.total_shards());
        for (row, values) in rows {
            let key = table.key(*row);
            // Zeros plus the values: what a row updated from zeros holds (`-0.0` becomes
            // `0.0`, which the shards' skipping of all-zero deltas relies on).
            let mut value = vec![T::default(); values.len()];
            T::add_slice(&mut value, values);
            batches.push(
                placement.shard_of(key) as usize,
                key,
                AlignedBuf::from_slice(&value),
            );
        }
        let from = self.shared.process;
        self.send_batches(batches, |batch, last| ToShard::SetRows {
            from,
            rows: batch.rows,
            last,
        })?;
        self.shared.await_rows_set()?;
        self.drop_row_copies();
        Ok(())
    }
}
