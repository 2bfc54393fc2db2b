//! Identifiers and clocks: the names every layer above uses for tables, rows, processes,
//! server shards and worker threads, and the clock that orders their updates. The bottom
//! of the crate: this module imports nothing from it.

use serde::{Deserialize, Serialize};

/// A clock value: a worker's clock is the number of `CLOCK` calls it has completed; a
/// value's data clock promises that it includes every update of clocks `0..d` (the SSP
/// rules in terms of these are [`Staleness`](crate::Staleness)'s).
pub type Clock = u64;

/// Index of a client process in the cluster.
pub type ProcessId = u32;
/// Index of a server shard in the cluster.
pub type ShardId = u32;
/// Global index of a worker thread in the cluster.
pub type WorkerId = u32;

/// Dense id of a table within a cluster (creation order).
pub type TableId = u32;

/// A branch of the training state (`Cluster::fork`): branch 0 is the one every cluster
/// starts with (the default); each fork names the next unused number, the same on every
/// process.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct BranchId(pub u32);

impl std::fmt::Display for BranchId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "branch {}", self.0)
    }
}

/// Identifies one row of one table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RowKey {
    /// The table.
    pub table: TableId,
    /// The row within the table.
    pub row: u64,
}

impl RowKey {
    /// The key of `row` in `table`.
    pub fn new(table: TableId, row: u64) -> Self {
        RowKey { table, row }
    }
}
