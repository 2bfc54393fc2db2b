//! The messages clients and server shards exchange.
//!
//! Every transport carries exactly these values — the in-process one moves them through
//! channels, a network one serializes them — so a one-process cluster exercises the same
//! protocol as a distributed one. Row payloads are [`AlignedBuf`]s: raw little-endian
//! bytes with no per-element marshalling.

use crate::buf::AlignedBuf;
use crate::ids::{Clock, ProcessId, RowKey, ShardId, WorkerId};
use crate::table::TableMeta;
use serde::{Deserialize, Serialize};

/// A batch of per-row deltas.
pub type RowBatch = Vec<(RowKey, AlignedBuf)>;

/// A rank-k UPDATE of rows of one table, sent as its factors
/// ([`Worker::update_outer`](crate::Worker::update_outer)): row `rows[i]` gets
/// `Σ_s left[s · rows.len() + i] · right[s · width ..][..width]`, summed in `s` order, `k`
/// being `left`'s length over `rows.len()`. For a fully connected layer, `left` is a
/// mini-batch's error terms and `right` its inputs: `k · (rows + width)` values on the
/// wire instead of `rows · width` (Project Adam).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outer {
    /// The table (one with a server-side update rule, of `f32` or `f64`).
    pub table: u32,
    /// The rows on the receiving shard.
    pub rows: Vec<u64>,
    /// `k × rows.len()` elements of the table's type, row-major by `s`.
    pub left: AlignedBuf,
    /// `k × width` elements.
    pub right: AlignedBuf,
}

/// A shard's answer to a checkpoint ([`Msg::Checkpointed`]): its part's manifest entry
/// `(name, size, SHA-256)`, or why it could not write it.
pub type ShardPart = Result<(String, u64, String), String>;

/// One shard's answer to a server function's call ([`Msg::Called`]): its result or why
/// there is none, and whether the function wrote a row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Called {
    /// The shard (global index).
    pub shard: ShardId,
    /// The function's result on the shard, or its error.
    pub result: Result<Vec<f64>, String>,
    /// Whether the function wrote a row.
    pub wrote: bool,
}

/// Where a message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Endpoint {
    /// A server shard.
    Shard(ShardId),
    /// A client process's communication thread.
    Client(ProcessId),
}

/// The chunks of a process's subscription a [`Msg::SlabFetch`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WantedChunks {
    /// Every chunk.
    All,
    /// One chunk (shard-local index).
    Chunk(u32),
    /// The chunks read in the iteration's clock `c` (bit `c mod 64` of their phases).
    Phase(u32),
}

/// One protocol message.
///
/// Every message from a process to a shard travels on that pair's ordered channel
/// ([`Transport`](crate::transport::Transport)), so a process's `CreateTable`,
/// `Specialize` and `RunEnd` precede its workers' later messages at every shard.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Msg {
    // ---- process -> shard 0, the coordinator ----
    /// Asks the coordinator for the id of table `name` (assigned once, on first
    /// declaration; a later declaration must have the same shape).
    DeclareTable {
        /// The asking process.
        from: ProcessId,
        /// The table's name.
        name: String,
        /// Elements per row.
        width: usize,
        /// Element type.
        elem: crate::element::ElemType,
        /// Its number of rows, if declared with one.
        rows: Option<u64>,
        /// How its servers apply updates.
        rule: crate::rule::Rule,
    },

    /// A process's part of an all-gather (`Cluster::all_gather`): the coordinator answers
    /// [`Msg::Gathered`] once every process sent its part of round `round`.
    Gather {
        /// The process.
        from: ProcessId,
        /// Numbers the process's all-gathers (from 1).
        round: u64,
        /// Its values, raw little-endian bytes.
        values: AlignedBuf,
    },

    // ---- process -> shard ----
    /// Declares a table (sent to every shard before the table is used; idempotent).
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
        /// The worker (global id).
        worker: WorkerId,
        /// The worker's clock after the `CLOCK` call: exactly one more than its last.
        clock: Clock,
        /// The plan epoch `slab` is laid out for (0 without a slab).
        epoch: u32,
        /// Per-row deltas of the clock just completed.
        rows: RowBatch,
        /// Rank-k updates of the clock just completed, as their factors (rows on this
        /// shard only).
        outer: Vec<Outer>,
        /// The worker's arena-shaped delta buffer for this shard (specialized mode; empty
        /// otherwise): the rows its process registered for it with [`Msg::Specialize`] of
        /// `epoch`, in order, each padded to 8 bytes — or only those at `slab_rows`.
        slab: AlignedBuf,
        /// `None`: `slab` covers every row of the worker's layout; else the positions in
        /// the layout of the rows it holds (the rows the worker touched, when sending
        /// only them is smaller).
        slab_rows: Option<Vec<u32>>,
    },
    /// A worker finished its work for this run; it is not waited for any more.
    Finish {
        /// The worker (global id).
        worker: WorkerId,
    },
    /// A process's workers have all finished run `run` (numbered from 1) and sent
    /// everything. When every process has ended the run, the shard resumes every worker
    /// at the largest clock any reached and answers [`Msg::RunReady`].
    RunEnd {
        /// The process.
        from: ProcessId,
        /// The run.
        run: u64,
    },
    /// Asks for every row of a table this shard holds (for snapshots between runs).
    Dump {
        /// The asking process.
        from: ProcessId,
        /// The table.
        table: u32,
    },
    /// Subscribes the process to a specialized layout: the shard's rows of `keys`, in
    /// this order (each padded to 8 bytes), refreshed in chunks ending at the slot indices
    /// `chunk_ends`; `updaters` lists, per worker of the process, the slots its delta
    /// slab covers. Replaces the process's previous subscription; other processes'
    /// subscriptions are untouched.
    Specialize {
        /// The process whose plan this is.
        from: ProcessId,
        /// Numbers the process's plans (from 1, increasing); slabs and refreshes carry it.
        epoch: u32,
        /// The shard's rows in the process's arena order.
        keys: Vec<RowKey>,
        /// Exclusive end slot of each chunk.
        chunk_ends: Vec<u32>,
        /// Per chunk: the clocks of an iteration in which the process reads it (bit
        /// `c mod 64`), for [`WantedChunks::Phase`].
        chunk_phases: Vec<u64>,
        /// `(worker, slots)` pairs (global worker ids).
        updaters: Vec<(WorkerId, Vec<u32>)>,
    },
    /// Asks for the process's subscribed rows (the chunks `want` names, in order) at a
    /// data clock of at least `required`.
    SlabFetch {
        /// The asking process.
        from: ProcessId,
        /// The subscription's epoch.
        epoch: u32,
        /// Required data clock.
        required: Clock,
        /// Which chunks.
        want: WantedChunks,
    },
    /// Between runs, before the first plan: the shard hands every row it holds whose home
    /// under the new placement (the hash, with these overrides) is another shard to that
    /// shard ([`Msg::Adopt`]). Sent by the shard's own process only.
    Migrate {
        /// The shard's process.
        from: ProcessId,
        /// The new placement's per-row overrides of the hash.
        overrides: Vec<(RowKey, ShardId)>,
    },

    /// Between runs, when every update is applied: the shard writes its rows (generic
    /// and arena rows alike) as part `shard-<id>.rows` of the checkpoint at `clock` in
    /// `root` (whose directory the process has begun) and answers
    /// [`Msg::Checkpointed`]. Sent by the shard's own process only; refused with pending
    /// updates, at another clock than the shard's or during a migration or restore.
    Checkpoint {
        /// The shard's process.
        from: ProcessId,
        /// The checkpoint root directory (on this machine).
        root: std::path::PathBuf,
        /// The clock the checkpoint holds: every worker's clock at the shard.
        clock: Clock,
    },
    /// Before any run and any plan, when resuming from a checkpoint at `clock`: rows this
    /// process read from the checkpoint whose home is this shard. Each process sends
    /// every shard one or more, the last with `last` set (possibly empty); once every
    /// process's last has come, the shard starts every worker at `clock` and answers
    /// [`Msg::Restored`].
    Restore {
        /// The sending process.
        from: ProcessId,
        /// The checkpoint's clock.
        clock: Clock,
        /// The rows, with their values.
        rows: Vec<(RowKey, AlignedBuf)>,
        /// Whether this is the process's last `Restore` to this shard.
        last: bool,
    },
    /// Between runs, when every update is applied ([`Cluster::set_rows`]): rows this
    /// process sets, whose home is this shard, with their new values. Each process sends
    /// every shard one or more, the last with `last` set (possibly empty); once every
    /// process's last has come, the shard answers [`Msg::RowsSet`]. A row set by two
    /// processes, or work of the next run before every process's last, fails the cluster.
    ///
    /// [`Cluster::set_rows`]: crate::cluster::Cluster::set_rows
    SetRows {
        /// The sending process.
        from: ProcessId,
        /// The rows, with their new values.
        rows: Vec<(RowKey, AlignedBuf)>,
        /// Whether this is the process's last `SetRows` to this shard.
        last: bool,
    },

    /// Between runs, when every update is applied ([`Cluster::call`]): run server
    /// function `function` of the sending process's registry on this shard's rows with
    /// `args`, and answer [`Msg::Called`]. Sent by the shard's own process only.
    ///
    /// [`Cluster::call`]: crate::cluster::Cluster::call
    Call {
        /// The shard's process.
        from: ProcessId,
        /// The function's id (registration order).
        function: u32,
        /// The call's arguments.
        args: Vec<f64>,
    },

    // ---- shard -> shard ----
    /// The rows of a migration whose new home is the receiving shard, with their values;
    /// exactly one per pair of shards per migration (possibly empty).
    Adopt {
        /// The sending shard.
        shard: ShardId,
        /// The rows.
        rows: Vec<(RowKey, AlignedBuf)>,
    },

    /// The process has sent everything it will send: it leaves the cluster. A shard stops
    /// once every process has left it.
    Leave {
        /// The process.
        from: ProcessId,
    },

    // ---- shard -> process ----
    /// The coordinator's answer to [`Msg::DeclareTable`].
    TableDeclared {
        /// The table, with its cluster-wide id.
        meta: TableMeta,
    },
    /// Every process's part of all-gather round `round`, in rank order.
    Gathered {
        /// The round.
        round: u64,
        /// One part per process.
        parts: Vec<AlignedBuf>,
    },
    /// Row values: exactly every update of clocks `< data_clock`.
    Rows {
        /// The sending shard.
        shard: ShardId,
        /// See above.
        data_clock: Clock,
        /// The rows.
        rows: Vec<(RowKey, AlignedBuf)>,
    },
    /// One chunk of a process's subscription: exactly every update of clocks
    /// `< data_clock`. Either the whole chunk, or only the rows that changed since the
    /// last `SlabRows` of this chunk sent to this process (which it then holds).
    SlabRows {
        /// The sending shard.
        shard: ShardId,
        /// The subscription's epoch the bytes are laid out for.
        epoch: u32,
        /// Shard-local chunk index.
        chunk: u32,
        /// See above.
        data_clock: Clock,
        /// `None`: `bytes` is the whole chunk; else the positions in the chunk of the rows
        /// `bytes` holds, one after another (each padded to 8 bytes).
        rows: Option<Vec<u32>>,
        /// The chunk's bytes, laid out as the process's arena.
        bytes: AlignedBuf,
    },
    /// The shard's minimum clock advanced (lets asynchronous readers see progress).
    MinClock {
        /// The sending shard.
        shard: ShardId,
        /// The new minimum.
        clock: Clock,
    },
    /// Every process ended run `run`: every update is applied and the next run starts
    /// at clock `start` for every worker.
    RunReady {
        /// The sending shard.
        shard: ShardId,
        /// The run that ended.
        run: u64,
        /// The next run's start clock.
        start: Clock,
    },
    /// The shard has handed over every row a migration moved away from it and adopted
    /// every row it moved to it.
    Migrated {
        /// The sending shard.
        shard: ShardId,
    },
    /// Answer to [`Msg::Checkpoint`]: the part the shard wrote, or why it could not
    /// (the file and the reason; the cluster goes on, but the checkpoint fails).
    Checkpointed {
        /// The sending shard.
        shard: ShardId,
        /// The part's manifest entry, or the error.
        part: ShardPart,
    },
    /// Answer to [`Msg::Call`]: the function's result on the shard, or why there is none,
    /// and whether it wrote a row.
    Called {
        /// The answer.
        called: Called,
    },
    /// The shard has every process's rows of a resume and starts every worker at the
    /// checkpoint's clock.
    Restored {
        /// The sending shard.
        shard: ShardId,
    },
    /// Between runs, after every process agreed on it ([`Cluster::set_rule`]): table
    /// `table`'s rule becomes `rule`, of the same kind (its parameters change; the rows'
    /// state stays). Every process sends it to every shard before any work of the next
    /// run, so every step of that run uses it.
    ///
    /// [`Cluster::set_rule`]: crate::cluster::Cluster::set_rule
    SetRule {
        /// The sending process.
        from: ProcessId,
        /// The table.
        table: u32,
        /// Its new rule.
        rule: crate::rule::Rule,
    },
    /// The shard has set every process's rows of a [`Msg::SetRows`] and forgotten what
    /// it last sent each process's arena (its next refreshes are whole).
    RowsSet {
        /// The sending shard.
        shard: ShardId,
    },
    /// Answer to [`Msg::Dump`].
    DumpRows {
        /// The sending shard.
        shard: ShardId,
        /// The rows.
        rows: Vec<(RowKey, AlignedBuf)>,
    },
    /// The shard rejected a message; the cluster fails.
    Rejected {
        /// The sending shard.
        shard: ShardId,
        /// Why.
        reason: String,
    },

    // ---- process -> process (worker to worker) ----
    /// A worker's message to a worker of the receiving process (`Worker::send`), put into
    /// that worker's mailbox.
    Pass {
        /// The sending worker (global id).
        from: WorkerId,
        /// The receiving worker (global id; one of the receiving process's).
        to: WorkerId,
        /// The message's tag.
        tag: u32,
        /// The sender's round (its run or virtual iteration, counted from 1 by every
        /// process alike): a receiver takes only messages of its own round.
        round: u64,
        /// The element type the values were sent as.
        elem: crate::element::ElemType,
        /// The values, raw little-endian bytes.
        values: AlignedBuf,
    },
    /// A worker stopped its part of round `round` (a run or virtual iteration, counted
    /// alike by every process) with an error: whoever waits for its messages in that round
    /// stops waiting.
    WorkerStopped {
        /// The worker (global id).
        worker: WorkerId,
        /// The round.
        round: u64,
    },
}

impl Msg {
    /// The names of the kinds of message, indexed by [`Msg::kind`].
    pub(crate) const KINDS: [&'static str; 33] = [
        "DeclareTable",
        "Gather",
        "CreateTable",
        "Fetch",
        "Clock",
        "Finish",
        "RunEnd",
        "Dump",
        "Specialize",
        "SlabFetch",
        "Leave",
        "TableDeclared",
        "Gathered",
        "Rows",
        "SlabRows",
        "MinClock",
        "RunReady",
        "DumpRows",
        "Rejected",
        "Migrate",
        "Adopt",
        "Migrated",
        "Checkpoint",
        "Restore",
        "Checkpointed",
        "Restored",
        "Pass",
        "WorkerStopped",
        "SetRows",
        "RowsSet",
        "SetRule",
        "Call",
        "Called",
    ];

    /// This message's kind, an index into [`Msg::KINDS`].
    pub(crate) fn kind(&self) -> usize {
        match self {
            Msg::DeclareTable { .. } => 0,
            Msg::Gather { .. } => 1,
            Msg::CreateTable { .. } => 2,
            Msg::Fetch { .. } => 3,
            Msg::Clock { .. } => 4,
            Msg::Finish { .. } => 5,
            Msg::RunEnd { .. } => 6,
            Msg::Dump { .. } => 7,
            Msg::Specialize { .. } => 8,
            Msg::SlabFetch { .. } => 9,
            Msg::Leave { .. } => 10,
            Msg::TableDeclared { .. } => 11,
            Msg::Gathered { .. } => 12,
            Msg::Rows { .. } => 13,
            Msg::SlabRows { .. } => 14,
            Msg::MinClock { .. } => 15,
            Msg::RunReady { .. } => 16,
            Msg::DumpRows { .. } => 17,
            Msg::Rejected { .. } => 18,
            Msg::Migrate { .. } => 19,
            Msg::Adopt { .. } => 20,
            Msg::Migrated { .. } => 21,
            Msg::Checkpoint { .. } => 22,
            Msg::Restore { .. } => 23,
            Msg::Checkpointed { .. } => 24,
            Msg::Restored { .. } => 25,
            Msg::Pass { .. } => 26,
            Msg::WorkerStopped { .. } => 27,
            Msg::SetRows { .. } => 28,
            Msg::RowsSet { .. } => 29,
            Msg::SetRule { .. } => 30,
            Msg::Call { .. } => 31,
            Msg::Called { .. } => 32,
        }
    }

    /// The process a message names as its sender, if it names one.
    pub(crate) fn sender(&self) -> Option<ProcessId> {
        match self {
            Msg::DeclareTable { from, .. }
            | Msg::Gather { from, .. }
            | Msg::Fetch { from, .. }
            | Msg::RunEnd { from, .. }
            | Msg::Dump { from, .. }
            | Msg::Specialize { from, .. }
            | Msg::SlabFetch { from, .. }
            | Msg::Migrate { from, .. }
            | Msg::Checkpoint { from, .. }
            | Msg::Restore { from, .. }
            | Msg::SetRows { from, .. }
            | Msg::SetRule { from, .. }
            | Msg::Call { from, .. }
            | Msg::Leave { from } => Some(*from),
            _ => None,
        }
    }
}
