//! The crate's error type: one `#[non_exhaustive]` enum for every public boundary.
//!
//! Errors name the offending thing (table, row, worker, field). This module knows nothing
//! about how errors arise; it only describes them.

pub mod checkpoint;

use std::fmt;

/// A `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration was rejected before any work started.
    #[error("invalid configuration: {field}: {reason}")]
    InvalidConfig {
        /// The offending field.
        field: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// The processes of a cluster disagree on something every one of them must share
    /// ([`Cluster::agree`](crate::cluster::Cluster::agree)): the app, a parameter, a
    /// digest of the input.
    #[error("the processes disagree on {field}: {detail}")]
    Disagreement {
        /// What differs (the first field, in the order given, that does).
        field: String,
        /// Which ranks hold which value.
        detail: String,
    },
    /// A run with per-worker states was given a number of states other than the number
    /// of workers.
    #[error("{given} per-worker states given for {workers} workers (one per worker is needed)")]
    StateCount {
        /// States given.
        given: usize,
        /// Workers in the cluster.
        workers: usize,
    },
    /// No table with this name (or handle) exists in this cluster.
    #[error("unknown table {0}")]
    UnknownTable(String),
    /// A table with this name already exists.
    #[error("table '{0}' already exists")]
    TableExists(String),
    /// A table was looked up with a different element type than it was created with.
    #[error("table '{table}' holds {actual} elements, not {requested}")]
    TypeMismatch {
        /// The table.
        table: String,
        /// The element type it was created with.
        actual: &'static str,
        /// The element type asked for.
        requested: &'static str,
    },
    /// A row buffer or delta does not have the table's row width.
    #[error("table '{table}' row {row}: expected {expected} elements, got {actual}")]
    WidthMismatch {
        /// The table.
        table: String,
        /// The row.
        row: u64,
        /// The table's row width.
        expected: usize,
        /// The length supplied.
        actual: usize,
    },
    /// A row outside a table declared with a row count
    /// ([`Cluster::create_table_sized`](crate::cluster::Cluster::create_table_sized)).
    #[error("table '{table}': row {row} is out of range (the table has rows 0..{rows})")]
    RowOutOfRange {
        /// The table.
        table: String,
        /// The row asked for.
        row: u64,
        /// The table's number of rows.
        rows: u64,
    },
    /// A column index is outside the row.
    #[error("table '{table}' row {row}: column {column} is out of range (width {width})")]
    ColumnOutOfRange {
        /// The table.
        table: String,
        /// The row.
        row: u64,
        /// The column asked for.
        column: usize,
        /// The table's row width.
        width: usize,
    },
    /// The cluster was shut down; no more work can be done on it.
    #[error("the cluster has been shut down")]
    ShutDown,
    /// A worker thread panicked while running user code.
    #[error("worker {worker} panicked: {message}")]
    WorkerPanicked {
        /// The worker's index.
        worker: usize,
        /// The panic payload, if it was a string.
        message: String,
    },
    /// An internal component (a server shard, a communication thread or the transport)
    /// failed; the cluster cannot continue.
    #[error("{component} failed: {message}")]
    Failed {
        /// What failed, e.g. "server shard 1".
        component: String,
        /// Why.
        message: String,
    },
    /// A branch collective ([`Cluster::fork`](crate::cluster::Cluster::fork) and the
    /// others) was refused — an unknown, live or parked branch where another is needed —
    /// or failed on some process; the same on every process.
    #[error("{branch}: {reason}")]
    Branch {
        /// The branch the op named.
        branch: crate::ids::BranchId,
        /// Why.
        reason: String,
    },
    /// A checkpoint could not be written, or a resume was refused: a missing, incomplete,
    /// corrupt or mismatched checkpoint, a full disk, a call at the wrong time. The
    /// error names the file ([`CheckpointError::path`]) and says why.
    ///
    /// [`CheckpointError::path`]: crate::error::checkpoint::CheckpointError::path
    #[error("checkpoint: {0}")]
    Checkpoint(crate::error::checkpoint::CheckpointError),
    /// [`Worker::recv_from`](crate::Worker::recv_from) got no message: its sender
    /// stopped with an error, the wait timed out ([`Config::message_timeout`]), the
    /// message was not what the receiver expected, or the sends and receives of runs do
    /// not match (a message of an earlier run never received, or the sender already in a
    /// later run). Also a run's error when messages sent in it were never received.
    ///
    /// [`Config::message_timeout`]: crate::Config::message_timeout
    #[error("worker {worker}: receiving tag {tag} from worker {from}: {reason}")]
    Receive {
        /// The receiving worker.
        worker: usize,
        /// The sending worker.
        from: usize,
        /// The message's tag.
        tag: u32,
        /// What went wrong.
        reason: String,
    },
    /// A server function failed on a shard: its code returned an error or panicked, it
    /// read or wrote a row it may not, or the shards' results could not be combined.
    /// The cluster goes on.
    #[error("server function '{function}' on shard {shard}: {message}")]
    ServerFunction {
        /// The function's name.
        function: String,
        /// The shard (global index).
        shard: usize,
        /// What went wrong.
        message: String,
    },
    /// An error raised by application code running on a worker.
    #[error("worker {worker}: {source}")]
    App {
        /// The worker's index.
        worker: usize,
        /// The application's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl Error {
    /// Wraps an application error raised on worker `worker`, so that closures passed to
    /// [`Cluster::run`](crate::Cluster::run) can use `?` on their own error types via
    /// `.map_err(|e| Error::app(worker.id(), e))`.
    pub fn app(worker: usize, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Error::App {
            worker,
            source: source.into(),
        }
    }

    /// The rank of the process whose loss this error reports, if it reports one: the
    /// cluster failed because process `rank` was killed, crashed, shut down or stopped
    /// answering (its connection reset, closed or silent past the heartbeat timeout), or
    /// because it left the cluster in the middle of a collective the others were in (a
    /// shard's `process R left the cluster during …`: it failed, or noticed a loss before
    /// this process did). Such an error is a fault of the run, not of its configuration
    /// or data: the CLI's `--restarts` starts the cluster again on it, and on nothing
    /// else.
    ///
    /// ```
    /// use iterstore::Error;
    ///
    /// let lost = Error::Failed {
    ///     component: "cluster".into(),
    ///     message: "process 2 at 127.0.0.1:7002 was lost: connection reset".into(),
    /// };
    /// assert_eq!(lost.lost_process(), Some(2));
    /// let left = Error::Failed {
    ///     component: "server shard 0".into(),
    ///     message: "process 1 left the cluster during all-gather round 11".into(),
    /// };
    /// assert_eq!(left.lost_process(), Some(1));
    /// assert_eq!(Error::ShutDown.lost_process(), None);
    /// ```
    pub fn lost_process(&self) -> Option<usize> {
        let Error::Failed { component, message } = self else {
            return None;
        };
        let rest = message.strip_prefix("process ")?;
        // A shard's word for a process gone mid-collective (`server::shard`).
        if let Some(rank) = rest.split_once(LEFT).and_then(|(r, _)| r.parse().ok()) {
            return Some(rank);
        }
        if component != "cluster" {
            return None;
        }
        let (rank, rest) = rest.split_once(" at ")?;
        let (_addr, _reason) = rest.split_once(LOST)?;
        rank.parse().ok()
    }

    pub(crate) fn config(field: &'static str, reason: impl fmt::Display) -> Self {
        Error::InvalidConfig {
            field,
            reason: reason.to_string(),
        }
    }

    pub(crate) fn failed(component: impl fmt::Display, message: impl fmt::Display) -> Self {
        Error::Failed {
            component: component.to_string(),
            message: message.to_string(),
        }
    }
}

/// What follows the rank when a shard reports that a process left mid-collective.
const LEFT: &str = " left the cluster ";

/// What separates the address from the reason in [`lost_message`].
const LOST: &str = " was lost: ";

/// How the loss of process `rank` at `addr` is described (the message of the
/// [`Error::Failed`] of component `cluster` that [`Error::lost_process`] recognizes).
pub(crate) fn lost_message(rank: u32, addr: impl fmt::Display, reason: &str) -> String {
    format!("process {rank} at {addr}{LOST}{reason}")
}

/// Logs a warning the library's user must see: through `tracing` when the program has
/// installed a subscriber, else on standard error (a library's `tracing` events are
/// dropped without one).
pub(crate) fn warn_visible(message: &str) {
    if tracing::dispatcher::has_been_set() {
        tracing::warn!("{message}");
    } else {
        eprintln!("iterstore: warning: {message}");
    }
}

/// The message of a caught panic.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}
