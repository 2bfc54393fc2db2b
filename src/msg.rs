//! The messages clients and server shards exchange.
//!
//! Every transport carries exactly these values — the in-process one moves them through
//! channels, a network one serializes them — so a one-process cluster exercises the same
//! protocol as a distributed one. Row payloads are [`AlignedBuf`]s: raw little-endian
//! bytes with no per-element marshalling.

use crate::consistency::Clock;
use crate::{AlignedBuf, RowKey, TableMeta};
use serde::{Deserialize, Serialize};

/// Index of a client process in the cluster.
pub type ProcessId = u32;
/// Index of a server shard in the cluster.
pub type ShardId = u32;
/// Global index of a worker thread in the cluster.
pub type WorkerId = u32;

/// A batch of per-row deltas.
pub type RowBatch = Vec<(RowKey, AlignedBuf)>;

/// Where a message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Endpoint {
    /// A server shard.
    Shard(ShardId),
    /// A client process's communication thread.
    Client(ProcessId),
}

/// One protocol message.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Msg {
    // ---- client -> shard ----
    /// Declares a table (sent to every shard before the table is used).
    CreateTable {
        /// The table.
        meta: TableMeta,
    },
    /// Asks for rows, each with the data clock the asking worker needs.
    Fetch {
        /// The asking process.
        from: ProcessId,
        /// `(row, required data clock)` pairs.
        rows: Vec<(RowKey, Clock)>,
    },
    /// A worker completed a clock. `rows` are the deltas it made during clock
    /// `clock - 1` to rows on this shard (possibly none); they become visible when every
    /// worker has completed that clock.
    Clock {
        /// The worker.
        worker: WorkerId,
        /// The worker's clock after the `CLOCK` call.
        clock: Clock,
        /// Per-row deltas of the clock just completed.
        rows: RowBatch,
    },
    /// A worker finished its work for this run; it is not waited for any more.
    Finish {
        /// The worker.
        worker: WorkerId,
    },
    /// A worker starts a new run at `clock`.
    Resume {
        /// The worker.
        worker: WorkerId,
        /// Its clock.
        clock: Clock,
    },
    /// Asks for every row of a table this shard holds (for snapshots between runs).
    Dump {
        /// The asking process.
        from: ProcessId,
        /// The table.
        table: u32,
    },
    /// Stops the receiving thread.
    Shutdown,

    // ---- shard -> client ----
    /// Row values: exactly every update of clocks `< data_clock`.
    Rows {
        /// The sending shard.
        shard: ShardId,
        /// See above.
        data_clock: Clock,
        /// The rows.
        rows: Vec<(RowKey, AlignedBuf)>,
    },
    /// Answer to [`Msg::Dump`].
    DumpRows {
        /// The sending shard.
        shard: ShardId,
        /// The rows.
        rows: Vec<(RowKey, AlignedBuf)>,
    },
    /// The shard rejected a message.
    Rejected {
        /// The sending shard.
        shard: ShardId,
        /// Why.
        reason: String,
    },
}
