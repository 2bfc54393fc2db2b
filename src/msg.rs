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
        /// The worker's arena-shaped delta buffer for this shard (specialized mode; empty
        /// otherwise): the rows it registered with [`Msg::Specialize`], in order, each
        /// padded to 8 bytes.
        slab: AlignedBuf,
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
    /// Switches the shard to a specialized layout: its rows of `keys` live in one arena in
    /// this order (each padded to 8 bytes), refreshed in chunks ending at the slot indices
    /// `chunk_ends`; `updaters` lists, per worker, the slots its delta slab covers.
    Specialize {
        /// The process whose plan this is.
        from: ProcessId,
        /// Numbers the process's plans; arena replies carry it.
        plan: u32,
        /// The shard's rows in arena order.
        keys: Vec<RowKey>,
        /// Exclusive end slot of each chunk.
        chunk_ends: Vec<u32>,
        /// `(worker, slots)` pairs.
        updaters: Vec<(WorkerId, Vec<u32>)>,
    },
    /// Asks for the specialized arena (one chunk, or all chunks in order) at a data clock
    /// of at least `required`.
    SlabFetch {
        /// The asking process.
        from: ProcessId,
        /// Required data clock.
        required: Clock,
        /// One chunk (shard-local index), or `None` for all.
        chunk: Option<u32>,
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
    /// One chunk of a shard's arena: exactly every update of clocks `< data_clock`.
    SlabRows {
        /// The sending shard.
        shard: ShardId,
        /// The plan the bytes are laid out for.
        plan: u32,
        /// Shard-local chunk index.
        chunk: u32,
        /// See above.
        data_clock: Clock,
        /// The chunk's bytes, laid out as the arena.
        bytes: AlignedBuf,
    },
    /// The shard's minimum clock advanced (lets asynchronous readers see progress).
    MinClock {
        /// The sending shard.
        shard: ShardId,
        /// The new minimum.
        clock: Clock,
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
