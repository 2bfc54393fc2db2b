//! The messages clients and server shards exchange, one type per direction.
//!
//! A server shard receives [`ToShard`]s: from processes (the coordinator, shard 0, also
//! table declarations and all-gathers) and from other shards (a migration's rows). A
//! process's communication thread receives [`ToClient`]s: the shards' answers, refreshes
//! and news, and other processes' workers' messages to its workers. An [`Envelope`] ties
//! each to its kind of [`Endpoint`], so a message going the wrong way cannot be built:
//! neither side checks directions at run time.
//!
//! Every transport carries exactly these values — the in-process one moves them through
//! channels, a network one serializes the envelopes — so a one-process cluster exercises
//! the same protocol as a distributed one. Row payloads are [`AlignedBuf`]s: raw
//! little-endian bytes with no per-element marshalling.

use crate::buf::AlignedBuf;
use crate::ids::{BranchId, Clock, ProcessId, RowKey, ShardId, WorkerId};
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

/// One row's update-rule state (a row of a table whose [`Rule`](crate::Rule) is not a
/// sum), as a checkpoint or a migration carries it with the row: the steps the row has
/// taken and the rule's state elements ([`Rule::state_per_element`](crate::Rule::state_per_element)
/// × the table's width, of its element type: velocity, accumulators, moments).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleState {
    /// Steps taken so far (Adam's bias correction and AdaGrad's first step depend on it).
    pub steps: u64,
    /// The state's elements, raw little-endian bytes.
    pub state: AlignedBuf,
}

/// Rule states of rows, each with its row's key.
pub type RuleStates = Vec<(RowKey, RuleState)>;

/// One clock as a primary shard applied it, for its backups ([`ToShard::Replicate`]): the
/// **post-image** of every row the clock changed — its value once every worker's update
/// was added and its rule stepped, once whoever updated it — and of its rule state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicatedClock {
    /// The clock.
    pub clock: Clock,
    /// The rows it changed, by key, with their values after it.
    pub rows: RowBatch,
    /// The rule states it changed (rows of tables with an update rule), after it.
    pub states: RuleStates,
}

/// A shard's answer to a checkpoint ([`ToClient::Checkpointed`]): its part's manifest entry
/// `(name, size, SHA-256)`, or why it could not write it.
pub type ShardPart = Result<(String, u64, String), String>;

/// One shard's answer to a server function's call ([`ToClient::Called`]): its result or
/// why there is none, and whether the function wrote a row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Called {
    /// The shard (global index).
    pub shard: ShardId,
    /// The function's result on the shard, or its error.
    pub result: Result<Vec<f64>, String>,
    /// Whether the function wrote a row.
    pub wrote: bool,
}

/// What a [`ToShard::Branch`] asks of a shard's branches of the training state (its rows,
/// their update-rule states): see `Cluster::fork` and the shard's `branches` module.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum BranchOp {
    /// Copy branch `source` (the live one or one in a slot) into a new slot `id`.
    Fork {
        /// The branch copied.
        source: BranchId,
        /// The new branch.
        id: BranchId,
    },
    /// Keep the live rows in the live branch's slot and make branch `to`'s the live ones.
    Switch {
        /// The branch to serve from now on.
        to: BranchId,
    },
    /// Drop branch `id`'s slot.
    Free {
        /// The branch dropped.
        id: BranchId,
    },
    /// Hand branch `id`'s slot to the shard's process as a rows part
    /// ([`ToClient::Branched`]) and drop it.
    Park {
        /// The branch parked.
        id: BranchId,
    },
    /// Take branch `id` back into a slot from its rows part `part`, as `Park` gave it.
    Unpark {
        /// The branch brought back.
        id: BranchId,
        /// Its rows part's bytes (`rows_part`'s format).
        part: Vec<u8>,
    },
}

/// A shard's answer to a [`ToShard::Branch`]: a parked slot's rows part (empty for
/// another op), or why the op could not be done.
pub type BranchOutcome = Result<Vec<u8>, String>;

/// Where a message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Endpoint {
    /// A server shard.
    Shard(ShardId),
    /// A client process's communication thread.
    Client(ProcessId),
}

/// The chunks of a process's subscription a [`ToShard::SlabFetch`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WantedChunks {
    /// Every chunk.
    All,
    /// One chunk (shard-local index).
    Chunk(u32),
    /// The chunks read in the iteration's clock `c` (bit `c mod 64` of their phases).
    Phase(u32),
}

/// A message for a server shard: from a process (shard 0, the coordinator, also takes
/// table declarations and all-gathers), or from another shard ([`ToShard::Adopt`],
/// [`ToShard::Replicate`], [`ToShard::ReplicaAck`]).
/// [`Shard::handle`](crate::server::Shard::handle) takes only these, so a message a shard
/// cannot receive cannot be sent to one.
///
/// Every message from a process to a shard travels on that pair's ordered channel
/// ([`Transport`](crate::transport::Transport)), so a process's `CreateTable`,
/// `Specialize` and `RunEnd` precede its workers' later messages at every shard.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ToShard {
    // ---- from a process to shard 0, the coordinator ----
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
    /// [`ToClient::Gathered`] once every process sent its part of round `round`.
    Gather {
        /// The process.
        from: ProcessId,
        /// Numbers the process's all-gathers (from 1).
        round: u64,
        /// Its values, raw little-endian bytes.
        values: AlignedBuf,
    },

    // ---- from a process ----
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
        /// otherwise): the rows its process registered for it with [`ToShard::Specialize`] of
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
    /// at the largest clock any reached and answers [`ToClient::RunReady`].
    RunEnd {
        /// The process.
        from: ProcessId,
        /// The run.
        run: u64,
    },
    /// Asks for every row of a table this shard holds (for snapshots between runs), or
    /// with `backup` those of the backup it keeps of that shard (`--shard-replicas`).
    Dump {
        /// The asking process.
        from: ProcessId,
        /// The table.
        table: u32,
        /// `None`: the shard's own rows; `Some(p)`: its backup of primary shard `p`.
        backup: Option<ShardId>,
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
    /// shard ([`ToShard::Adopt`]). Sent by the shard's own process only.
    Migrate {
        /// The shard's process.
        from: ProcessId,
        /// The new placement's per-row overrides of the hash.
        overrides: Vec<(RowKey, ShardId)>,
    },
    /// Between runs, when every update is applied: the shard writes its rows (generic
    /// and arena rows alike) as part `shard-<id>.rows` of the checkpoint at `clock` in
    /// `root` (whose directory the process has begun) and answers
    /// [`ToClient::Checkpointed`]. Sent by the shard's own process only; refused with pending
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
    /// [`ToClient::Restored`].
    Restore {
        /// The sending process.
        from: ProcessId,
        /// The checkpoint's clock.
        clock: Clock,
        /// The rows, with their values.
        rows: Vec<(RowKey, AlignedBuf)>,
        /// The update-rule states of rows of tables with a rule (a row may have one
        /// without a value: a row stepped back to zeros).
        states: RuleStates,
        /// Whether this is the process's last `Restore` to this shard.
        last: bool,
    },
    /// Between runs, when every update is applied ([`Cluster::set_rows`]): rows this
    /// process sets, whose home is this shard, with their new values. Each process sends
    /// every shard one or more, the last with `last` set (possibly empty); once every
    /// process's last has come, the shard answers [`ToClient::RowsSet`]. A row set by two
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
    /// Between runs, when every update is applied and every process agreed on it
    /// (`Cluster::fork` and the other branch collectives): `op` on the shard's branches,
    /// at the cluster's clock `clock`; answered with [`ToClient::Branched`]. Sent by the
    /// shard's own process only.
    Branch {
        /// The shard's process.
        from: ProcessId,
        /// Every worker's clock at the shard.
        clock: Clock,
        /// What to do.
        op: BranchOp,
    },
    /// Between runs, when every update is applied ([`Cluster::call`]): run server
    /// function `function` of the sending process's registry on this shard's rows with
    /// `args`, and answer [`ToClient::Called`]. Sent by the shard's own process only.
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
    /// The process has sent everything it will send: it leaves the cluster. A shard stops
    /// once every process has left it.
    Leave {
        /// The process.
        from: ProcessId,
    },

    // ---- from another shard ----
    /// The rows of a migration whose new home is the receiving shard, with their values;
    /// exactly one per pair of shards per migration (possibly empty).
    Adopt {
        /// The sending shard.
        shard: ShardId,
        /// The rows.
        rows: Vec<(RowKey, AlignedBuf)>,
        /// The update-rule states of the rows of tables with a rule that move.
        states: RuleStates,
    },
    /// From a primary shard to a shard of another process that keeps a backup of it
    /// (`Config::shard_replicas`): what the primary applied when its minimum clock
    /// advanced to `clock`, for the backup to apply alike. Answered with
    /// [`ToShard::ReplicaAck`] once applied.
    Replicate {
        /// The primary shard.
        primary: ShardId,
        /// The start clock of the primary's run in progress: the backup's undo log keeps
        /// the run's pre-images from there.
        run_start: Clock,
        /// The primary's minimum clock at its previous `Replicate` (0 before its first):
        /// the backup must be there, or one was lost or reordered.
        since: Clock,
        /// The primary's new minimum clock: every update of clocks below it is applied.
        clock: Clock,
        /// Tables the primary took (created, or given a new rule) since its last
        /// `Replicate`, before it applied `clocks`.
        tables: Vec<TableMeta>,
        /// The clocks applied, ascending, each as the rows and rule states it changed
        /// after it (post-images: the backup copies them, bit for bit the primary's).
        clocks: Vec<ReplicatedClock>,
    },
    /// From a backup's shard to its primary: the backup has applied everything up to
    /// the primary's minimum clock `clock` ([`ToShard::Replicate`]).
    ReplicaAck {
        /// The shard keeping the backup.
        backup: ShardId,
        /// The primary shard.
        primary: ShardId,
        /// The clock applied.
        clock: Clock,
    },
    /// From a process, between runs, to each shard keeping a backup of its first shard:
    /// keep its application state at `clock` (the next run's start) for a recovery
    /// (`Cluster::keep_state`); answered with [`ToClient::StateKept`].
    KeepState {
        /// The process.
        from: ProcessId,
        /// The start clock of its next run.
        clock: Clock,
        /// The state's bytes, the application's own.
        state: Vec<u8>,
    },
}

/// A message for a process's communication thread (an [`Endpoint::Client`]): a shard's
/// answer or news, or a worker's message to a worker of the process. The communication
/// thread takes only these.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ToClient {
    // ---- from a shard ----
    /// The coordinator's answer to [`ToShard::DeclareTable`].
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
    /// Answer to [`ToShard::Call`]: the function's result on the shard, or why there is
    /// none, and whether it wrote a row.
    Called {
        /// The answer.
        called: Called,
    },
    /// The shard has handed over every row a migration moved away from it and adopted
    /// every row it moved to it.
    Migrated {
        /// The sending shard.
        shard: ShardId,
    },
    /// Answer to [`ToShard::Checkpoint`]: the part the shard wrote, or why it could not
    /// (the file and the reason; the cluster goes on, but the checkpoint fails).
    Checkpointed {
        /// The sending shard.
        shard: ShardId,
        /// The part's manifest entry, or the error.
        part: ShardPart,
    },
    /// The shard has every process's rows of a resume and starts every worker at the
    /// checkpoint's clock.
    Restored {
        /// The sending shard.
        shard: ShardId,
    },
    /// The shard has set every process's rows of a [`ToShard::SetRows`] and forgotten what
    /// it last sent each process's arena (its next refreshes are whole).
    RowsSet {
        /// The sending shard.
        shard: ShardId,
    },
    /// Answer to [`ToShard::KeepState`]: the shard keeps the process's state at `clock`.
    StateKept {
        /// The sending shard.
        shard: ShardId,
        /// The state's clock.
        clock: Clock,
    },
    /// Answer to [`ToShard::Branch`]: done (with a parked slot's rows part), or why not.
    Branched {
        /// The sending shard.
        shard: ShardId,
        /// The outcome.
        outcome: BranchOutcome,
    },
    /// Answer to [`ToShard::Dump`].
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

    // ---- from a worker of another process ----
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

/// One protocol message with the endpoint it goes to: what a transport carries, and what
/// crosses the network. The direction is the type: a shard is sent only a [`ToShard`], a
/// communication thread only a [`ToClient`], so a message going the wrong way cannot be
/// built, sent or decoded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Envelope {
    /// For server shard `.0`.
    Shard(ShardId, ToShard),
    /// For the communication thread of process `.0`.
    Client(ProcessId, ToClient),
}

impl ToShard {
    /// The names of the kinds of message a shard receives, indexed by [`ToShard::kind`].
    pub(crate) const KINDS: [&'static str; 22] = [
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
        "Migrate",
        "Checkpoint",
        "Restore",
        "SetRows",
        "SetRule",
        "Leave",
        "Adopt",
        "Call",
        "Branch",
        "Replicate",
        "ReplicaAck",
        "KeepState",
    ];

    /// This message's kind, an index into [`ToShard::KINDS`].
    pub(crate) fn kind(&self) -> usize {
        match self {
            ToShard::DeclareTable { .. } => 0,
            ToShard::Gather { .. } => 1,
            ToShard::CreateTable { .. } => 2,
            ToShard::Fetch { .. } => 3,
            ToShard::Clock { .. } => 4,
            ToShard::Finish { .. } => 5,
            ToShard::RunEnd { .. } => 6,
            ToShard::Dump { .. } => 7,
            ToShard::Specialize { .. } => 8,
            ToShard::SlabFetch { .. } => 9,
            ToShard::Migrate { .. } => 10,
            ToShard::Checkpoint { .. } => 11,
            ToShard::Restore { .. } => 12,
            ToShard::SetRows { .. } => 13,
            ToShard::SetRule { .. } => 14,
            ToShard::Leave { .. } => 15,
            ToShard::Adopt { .. } => 16,
            ToShard::Call { .. } => 17,
            ToShard::Branch { .. } => 18,
            ToShard::Replicate { .. } => 19,
            ToShard::ReplicaAck { .. } => 20,
            ToShard::KeepState { .. } => 21,
        }
    }

    /// The process a message names as its sender, if it names one.
    pub(crate) fn sender(&self) -> Option<ProcessId> {
        match self {
            ToShard::DeclareTable { from, .. }
            | ToShard::Gather { from, .. }
            | ToShard::Fetch { from, .. }
            | ToShard::RunEnd { from, .. }
            | ToShard::Dump { from, .. }
            | ToShard::Specialize { from, .. }
            | ToShard::SlabFetch { from, .. }
            | ToShard::Migrate { from, .. }
            | ToShard::Checkpoint { from, .. }
            | ToShard::Restore { from, .. }
            | ToShard::SetRows { from, .. }
            | ToShard::SetRule { from, .. }
            | ToShard::Call { from, .. }
            | ToShard::Branch { from, .. }
            | ToShard::KeepState { from, .. }
            | ToShard::Leave { from } => Some(*from),
            ToShard::CreateTable { .. }
            | ToShard::Clock { .. }
            | ToShard::Finish { .. }
            | ToShard::Adopt { .. }
            | ToShard::Replicate { .. }
            | ToShard::ReplicaAck { .. } => None,
        }
    }
}

impl ToClient {
    /// The shard an answer names as its sender, if it names one.
    pub(crate) fn sending_shard(&self) -> Option<ShardId> {
        match self {
            ToClient::Rows { shard, .. }
            | ToClient::SlabRows { shard, .. }
            | ToClient::MinClock { shard, .. }
            | ToClient::RunReady { shard, .. }
            | ToClient::Migrated { shard }
            | ToClient::Checkpointed { shard, .. }
            | ToClient::Restored { shard }
            | ToClient::RowsSet { shard }
            | ToClient::StateKept { shard, .. }
            | ToClient::Branched { shard, .. }
            | ToClient::DumpRows { shard, .. }
            | ToClient::Rejected { shard, .. } => Some(*shard),
            ToClient::TableDeclared { .. }
            | ToClient::Gathered { .. }
            | ToClient::Called { .. }
            | ToClient::Pass { .. }
            | ToClient::WorkerStopped { .. } => None,
        }
    }

    /// The names of the kinds of message a communication thread receives, indexed by
    /// [`ToClient::kind`].
    pub(crate) const KINDS: [&'static str; 17] = [
        "TableDeclared",
        "Gathered",
        "Rows",
        "SlabRows",
        "MinClock",
        "RunReady",
        "Migrated",
        "Checkpointed",
        "Restored",
        "RowsSet",
        "DumpRows",
        "Rejected",
        "Pass",
        "WorkerStopped",
        "Called",
        "Branched",
        "StateKept",
    ];

    /// This message's kind, an index into [`ToClient::KINDS`].
    pub(crate) fn kind(&self) -> usize {
        match self {
            ToClient::TableDeclared { .. } => 0,
            ToClient::Gathered { .. } => 1,
            ToClient::Rows { .. } => 2,
            ToClient::SlabRows { .. } => 3,
            ToClient::MinClock { .. } => 4,
            ToClient::RunReady { .. } => 5,
            ToClient::Migrated { .. } => 6,
            ToClient::Checkpointed { .. } => 7,
            ToClient::Restored { .. } => 8,
            ToClient::RowsSet { .. } => 9,
            ToClient::DumpRows { .. } => 10,
            ToClient::Rejected { .. } => 11,
            ToClient::Pass { .. } => 12,
            ToClient::WorkerStopped { .. } => 13,
            ToClient::Called { .. } => 14,
            ToClient::Branched { .. } => 15,
            ToClient::StateKept { .. } => 16,
        }
    }
}

impl Envelope {
    /// The names of every kind of message, both directions (those a shard receives, then
    /// those a communication thread receives), indexed by [`Envelope::kind`].
    pub(crate) const KINDS: [&'static str; ToShard::KINDS.len() + ToClient::KINDS.len()] = {
        let mut all = [""; ToShard::KINDS.len() + ToClient::KINDS.len()];
        let mut i = 0;
        while i < ToShard::KINDS.len() {
            all[i] = ToShard::KINDS[i];
            i += 1;
        }
        while i < all.len() {
            all[i] = ToClient::KINDS[i - ToShard::KINDS.len()];
            i += 1;
        }
        all
    };

    /// The message's kind, an index into [`Envelope::KINDS`].
    pub(crate) fn kind(&self) -> usize {
        match self {
            Envelope::Shard(_, msg) => msg.kind(),
            Envelope::Client(_, msg) => ToShard::KINDS.len() + msg.kind(),
        }
    }

    /// Where the message goes.
    pub(crate) fn to(&self) -> Endpoint {
        match self {
            Envelope::Shard(s, _) => Endpoint::Shard(*s),
            Envelope::Client(p, _) => Endpoint::Client(*p),
        }
    }
}
