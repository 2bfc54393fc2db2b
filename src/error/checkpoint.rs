//! [`CheckpointError`]: everything that can go wrong writing or opening a checkpoint
//! (the storage layer's own errors, a call at the wrong time, another process's failure).
//!
//! Every variant names the file or directory at fault and says why, so that a refused
//! resume tells the user what to look at. This module only describes errors; it knows
//! nothing of how they arise.

use crate::ids::Clock;
use std::io;
use std::path::PathBuf;

/// Why a checkpoint could not be written or a resume was refused, naming the file or
/// directory at fault ([`path`](Self::path)) and the reason.
///
/// A checkpoint and a resume are collectives: an error on another process reaches this
/// one as [`OnProcess`](Self::OnProcess), its kind given as text (it crossed the network).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// An operating-system call on `path` failed (create, write, sync, rename, read...).
    #[error("{}: {action} failed: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done, e.g. "write" or "sync".
        action: &'static str,
        /// The underlying error.
        source: io::Error,
    },
    /// The checkpoint directory given to resume from does not exist.
    #[error("{}: the checkpoint directory does not exist", dir.display())]
    MissingDir {
        /// The directory.
        dir: PathBuf,
    },
    /// The directory holds no complete checkpoint.
    #[error("no complete checkpoint in {} ({reason})", dir.display())]
    NoCheckpoint {
        /// The checkpoint directory.
        dir: PathBuf,
        /// What it holds instead.
        reason: String,
    },
    /// A checkpoint directory opened directly has no manifest.
    #[error("{}: no MANIFEST.json: the checkpoint was never completed", dir.display())]
    Incomplete {
        /// The checkpoint's directory.
        dir: PathBuf,
    },
    /// The manifest cannot be parsed or is inconsistent.
    #[error("{}: corrupt manifest: {reason}", path.display())]
    CorruptManifest {
        /// The manifest.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The manifest is of a format version this build cannot read.
    #[error(
        "{}: format version {found}, this build reads versions 1 to {supported}",
        path.display()
    )]
    Version {
        /// The manifest.
        path: PathBuf,
        /// The version it declares.
        found: u32,
        /// The newest version this build reads (it reads every older one).
        supported: u32,
    },
    /// The checkpoint was written by a run this one cannot resume (app, tables, cluster).
    #[error("{}: {reason}", path.display())]
    MetaMismatch {
        /// The manifest.
        path: PathBuf,
        /// The first difference, e.g. "written by app mf, this run is lda".
        reason: String,
    },
    /// A part listed in the manifest is not there.
    #[error("{}: missing (the manifest lists it)", path.display())]
    MissingPart {
        /// The part's file.
        path: PathBuf,
    },
    /// A part is not a regular file.
    #[error("{}: not a regular file", path.display())]
    NotAFile {
        /// The part's path.
        path: PathBuf,
    },
    /// A part's size differs from the manifest's.
    #[error("{}: size {actual} does not match the manifest's {expected}", path.display())]
    SizeMismatch {
        /// The part's file.
        path: PathBuf,
        /// Its size on disk.
        actual: u64,
        /// The size the manifest lists.
        expected: u64,
    },
    /// A part's contents differ from the manifest's checksum.
    #[error(
        "{}: checksum mismatch (SHA-256 {actual} on disk, {expected} in the manifest)",
        path.display()
    )]
    ChecksumMismatch {
        /// The part's file.
        path: PathBuf,
        /// Its SHA-256 on disk, hex.
        actual: String,
        /// The SHA-256 the manifest lists, hex.
        expected: String,
    },
    /// A part was asked for that the manifest does not list.
    #[error("{}: the checkpoint has no part '{name}'", dir.display())]
    UnknownPart {
        /// The checkpoint's directory.
        dir: PathBuf,
        /// The part asked for.
        name: String,
    },
    /// A part name is not a plain file name this layer accepts.
    #[error("invalid checkpoint part name '{name}': {reason}")]
    BadPartName {
        /// The name.
        name: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// The same part was written or recorded twice in one checkpoint.
    #[error("{}: part written twice", path.display())]
    DuplicatePart {
        /// The part's file.
        path: PathBuf,
    },
    /// A part entry handed to the writer is malformed.
    #[error("{}: invalid part entry: {reason}", path.display())]
    BadEntry {
        /// The part's file.
        path: PathBuf,
        /// What is wrong with the entry.
        reason: &'static str,
    },
    /// `commit` was called while a part was begun and never finished.
    #[error("{}: begun but not finished, so the checkpoint cannot be completed", path.display())]
    Unfinished {
        /// The part's file.
        path: PathBuf,
    },
    /// A complete checkpoint at this clock or a later one is already in the directory, so
    /// writing this one would make the directory's newest checkpoint not this run's.
    #[error(
        "{}: a complete checkpoint at clock {existing}, not older than clock {clock} being \
         written (resume from it, or remove it)",
        path.display()
    )]
    NotNewer {
        /// The existing checkpoint's directory.
        path: PathBuf,
        /// Its clock.
        existing: Clock,
        /// The clock being written.
        clock: Clock,
    },
    /// Where the store writes or removes a checkpoint's directory or file, a symbolic
    /// link or another kind of file was found: never followed, never replaced.
    #[error(
        "{}: is a symbolic link or not a plain directory: refused (checkpoint directories \
         and files are never followed through links)",
        path.display()
    )]
    Link {
        /// The path found to be a link (or not a directory).
        path: PathBuf,
    },
    /// An older checkpoint directory holds entries the store did not write (or links):
    /// they are left in place, and so is the directory.
    #[error(
        "{}: holds {} the store did not write ({}): left in place",
        dir.display(),
        if names.len() == 1 { "an entry" } else { "entries" },
        names.join(", ")
    )]
    Foreign {
        /// The checkpoint directory.
        dir: PathBuf,
        /// What it holds besides the store's files.
        names: Vec<String>,
    },
    /// A resume was asked for after a run, a plan, a `set_rows` or another resume.
    #[error(
        "{}: a resume must come before any run, plan, set_rows or other resume",
        dir.display()
    )]
    TooLate {
        /// The checkpoint directory given.
        dir: PathBuf,
    },
    /// The processes of a resume opened checkpoints at different clocks (the directory
    /// changed under them, or it is not the same directory on every machine).
    #[error(
        "{}: process 0 opened the checkpoint at clock {first}, process {process} at clock {clock}",
        dir.display()
    )]
    ClockDisagreement {
        /// The checkpoint directory given.
        dir: PathBuf,
        /// Process 0's clock.
        first: Clock,
        /// The first process that opened another.
        process: usize,
        /// Its clock.
        clock: Clock,
    },
    /// A part's contents do not decode, or do not hold what the manifest says.
    #[error("{}: {reason}", path.display())]
    CorruptPart {
        /// The part's file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A server shard could not write its part.
    #[error("{message}")]
    ShardPart {
        /// The shard.
        shard: u32,
        /// The part's file.
        path: PathBuf,
        /// Why, naming the file.
        message: String,
    },
    /// Another process of the cluster failed its share of the checkpoint or resume.
    #[error("process {process}: {message}")]
    OnProcess {
        /// The process.
        process: usize,
        /// The file or directory at fault there.
        path: PathBuf,
        /// Its error, as text.
        message: String,
    },
}

impl CheckpointError {
    /// The file or directory at fault (for a bad part name, the name).
    pub fn path(&self) -> PathBuf {
        use CheckpointError::*;
        match self {
            Io { path, .. }
            | CorruptManifest { path, .. }
            | Version { path, .. }
            | MetaMismatch { path, .. }
            | MissingPart { path }
            | NotAFile { path }
            | SizeMismatch { path, .. }
            | ChecksumMismatch { path, .. }
            | DuplicatePart { path }
            | BadEntry { path, .. }
            | Unfinished { path }
            | NotNewer { path, .. }
            | CorruptPart { path, .. }
            | ShardPart { path, .. }
            | OnProcess { path, .. }
            | Link { path } => path.clone(),
            TooLate { dir } | ClockDisagreement { dir, .. } => dir.clone(),
            Foreign { dir, .. } => dir.clone(),
            MissingDir { dir } | NoCheckpoint { dir, .. } | Incomplete { dir } => dir.clone(),
            UnknownPart { dir, name } => dir.join(name),
            BadPartName { name, .. } => PathBuf::from(name),
        }
    }

    /// An [`Io`](CheckpointError::Io) error on `path`.
    pub(crate) fn io(path: impl Into<PathBuf>, action: &'static str, source: io::Error) -> Self {
        CheckpointError::Io {
            path: path.into(),
            action,
            source,
        }
    }
}

impl From<CheckpointError> for super::Error {
    fn from(e: CheckpointError) -> Self {
        super::Error::Checkpoint(e)
    }
}
