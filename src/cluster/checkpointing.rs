//! Checkpoint and resume of a cluster: [`Cluster::checkpoint`], [`Cluster::checkpoint_with`]
//! and [`Cluster::resume`], with [`Resumed`].
//!
//! **Checkpoint** (between runs, every process alike): each process begins the checkpoint
//! at the cluster's start clock in the shared directory, writes its application state as
//! `process-<rank>.app`, and has each of its shards write its rows, with their update-rule
//! states, as `shard-<id>.rows` on the shard's own thread ([`ToShard::Checkpoint`] →
//! [`ToClient::Checkpointed`](crate::msg::ToClient::Checkpointed)). The processes then
//! all-gather what they wrote (or why they could not); rank 0 records every part and
//! commits the manifest, and a second all-gather tells every process the outcome. So every
//! process returns the same answer, only once the checkpoint is complete, and a failure
//! anywhere (a full disk, a refused directory) fails the checkpoint on every process
//! without failing the cluster.
//!
//! **Resume** (before any run or plan, every process alike): each process opens and
//! verifies the newest complete checkpoint, the processes all-gather whether they could,
//! each reads its share of the rows parts (old shard `k` is read by process
//! `k mod processes`) and checks it whole, they all-gather again, and only then do the
//! tables' rules take the checkpoint's parameters ([`ToShard::SetRule`]) and every row
//! go, with its rule state, to its home shard under this cluster's placement
//! ([`ToShard::Restore`]); a
//! shard that has every process's rows starts every worker at the checkpoint's clock
//! ([`ToClient::Restored`](crate::msg::ToClient::Restored)). A checkpoint that any process
//! refuses is refused by all, naming the file; nothing is restored from it.
//!
//! This module decides the steps and who reads what; the files are the storage layer's
//! (`crate::checkpoint`), the rows' bytes `crate::rows_part`'s, the shards' side is in
//! `server::shard`.

use super::batches::ShardBatches;
use super::Cluster;
use crate::buf::AlignedBuf;
use crate::checkpoint::{
    Checkpoint, CheckpointWriter, ClusterRule, ClusterShape, Meta, PartEntry, PartWriter,
    TableShape,
};
use crate::error::checkpoint::CheckpointError;
use crate::error::{Error, Result};
use crate::ids::Clock;
use crate::msg::ToShard;
use crate::rows_part::{self, Item};
use crate::rule::Rule;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A checkpoint a cluster resumed from ([`Cluster::resume`]): its clock, the cluster that
/// wrote it and the application states it holds.
#[derive(Debug)]
pub struct Resumed {
    checkpoint: Checkpoint,
}

impl Resumed {
    /// The clock the checkpoint holds; the cluster's next run starts at it.
    pub fn clock(&self) -> Clock {
        self.checkpoint.clock()
    }

    /// The checkpoint's directory (`<dir>/ckpt-<clock>`).
    pub fn dir(&self) -> &Path {
        self.checkpoint.dir()
    }

    /// Processes of the cluster that wrote the checkpoint (with [`ClusterRule::Any`] it may
    /// differ from this cluster's).
    pub fn processes(&self) -> usize {
        self.checkpoint.meta().cluster.processes
    }

    /// The application state process `rank` of the writing cluster saved with
    /// [`Cluster::checkpoint_with`], or `None` if it saved none. The bytes were verified
    /// against the manifest's checksum when the checkpoint was opened.
    pub fn app_state(&self, rank: usize) -> Result<Option<Vec<u8>>> {
        let name = app_part_name(rank);
        if !self.checkpoint.parts().iter().any(|p| p.name == name) {
            return Ok(None);
        }
        Ok(Some(self.checkpoint.read_part(&name)?))
    }
}

/// What a process did in one step of a checkpoint or resume, all-gathered: its parts (or
/// clock), or the file at fault and why (an error's kind does not cross processes; the
/// receiver makes it a [`CheckpointError::OnProcess`]).
#[derive(Debug, Serialize, Deserialize)]
struct Report<T> {
    outcome: std::result::Result<T, (PathBuf, String)>,
}

/// The part name of process `rank`'s application state.
fn app_part_name(rank: usize) -> String {
    format!("process-{rank}.app")
}

impl Cluster {
    /// Writes a checkpoint of every table into `dir` (created if missing), at the clock
    /// the next run starts at, for application `app`; returns the checkpoint's
    /// directory, `<dir>/ckpt-<clock>`. See [`checkpoint_with`](Self::checkpoint_with).
    pub fn checkpoint(&mut self, dir: &Path, app: &str) -> Result<PathBuf> {
        self.checkpoint_parts(dir, app, None)
    }

    /// Writes a checkpoint of every table — the rows and, for a table with an update rule
    /// ([`Rule`]), each row's rule state and the rule's parameters — and of this process's
    /// application `state`
    /// (opaque bytes: per-worker state kept outside the store, such as topic assignments
    /// or random generators' positions; [`Resumed::app_state`] gives it back) into
    /// `dir`, at the clock the next run starts at, for application `app`; returns the
    /// checkpoint's directory, `<dir>/ckpt-<clock>`.
    ///
    /// A collective between runs: every process of the cluster calls it alike (each with
    /// its own `state`), and `dir` must be the same directory for all of them (one
    /// machine, or a shared file system). It returns once the checkpoint is complete (its
    /// manifest written) or has failed, the same on every process. A checkpoint is
    /// complete only when its manifest is: a failure at any point (a full disk, a crash)
    /// leaves the previous complete checkpoint valid, and older ones are removed only
    /// after a newer one completes. A failure to write is an [`Error::Checkpoint`] naming
    /// the file; the cluster can go on running. Refused if `dir` already holds a complete
    /// checkpoint at this clock or later.
    pub fn checkpoint_with(&mut self, dir: &Path, app: &str, state: &[u8]) -> Result<PathBuf> {
        self.checkpoint_parts(dir, app, Some(state))
    }

    /// Restores every table from the newest complete checkpoint in `dir` written for
    /// application `app`, so that the next run continues from the checkpoint's clock.
    ///
    /// A collective, like [`checkpoint_with`](Self::checkpoint_with): every process calls
    /// it alike, after creating the same tables (names, types, widths and kinds of
    /// update rule, in the same order) as the run that wrote the checkpoint and before any
    /// run, virtual iteration of a specialized mode, fork of a branch, or other resume.
    /// `rule` says whether the checkpoint may come from a cluster of another shape; rows
    /// are redistributed to this cluster's shards by key either way, each with its rule
    /// state. A table's rule takes back the parameters it had at the checkpoint (a
    /// [`set_rule`](Self::set_rule) before the checkpoint holds after the resume).
    ///
    /// The whole checkpoint is verified (manifest, the writing run's app, tables and
    /// cluster, every part's size and SHA-256 and the rows' encoding) before any row is
    /// restored. A missing, incomplete, corrupt or mismatched checkpoint is refused with
    /// an [`Error::Checkpoint`] naming the file and why, on every process; a table is
    /// never silently left empty.
    pub fn resume(&mut self, dir: &Path, app: &str, rule: ClusterRule) -> Result<Resumed> {
        self.check()?;
        self.refuse_with_backups("a resume")?;
        let used = self.runs.ended > 0
            || self.spec.plans > 0
            || self.runs.sets > 0
            || self.branches.forked();
        let opened = if used || self.runs.resumed {
            Err(CheckpointError::TooLate {
                dir: dir.to_path_buf(),
            })
        } else {
            Checkpoint::open_newest(dir, &self.checkpoint_meta(app), rule)
        };
        let (checkpoint, clocks) = match opened {
            Ok(c) => {
                let clocks = self.gather_reports(Ok(c.clock()))?;
                (c, clocks)
            }
            Err(e) => return Err(self.gather_failure::<Clock>(e)),
        };
        if let Some((p, c)) = clocks.iter().enumerate().find(|(_, c)| **c != clocks[0]) {
            return Err(CheckpointError::ClockDisagreement {
                dir: dir.to_path_buf(),
                first: clocks[0],
                process: p,
                clock: *c,
            }
            .into());
        }
        let batches = match self.read_rows(&checkpoint) {
            Ok(b) => {
                self.gather_reports(Ok(()))?;
                b
            }
            Err(e) => return Err(self.gather_failure::<()>(e)),
        };
        // The rules' parameters as they were at the checkpoint (a `set_rule` before it
        // holds after the resume): the checkpoint's meta matched, so kinds are the same.
        let rules: Vec<(u32, Rule)> = checkpoint
            .meta()
            .tables
            .iter()
            .zip(self.registry.tables())
            .filter(|(c, t)| c.rule != t.rule)
            .map(|(c, t)| (t.id, c.rule))
            .collect();
        for (table, rule) in rules {
            self.install_rule(table, rule)?;
        }
        let clock = checkpoint.clock();
        self.restore_batches(batches, clock)?;
        self.runs.start_clock = clock;
        self.runs.resumed = true;
        Ok(Resumed { checkpoint })
    }

    /// The checkpoint's description of this run: `app`, the tables, the cluster's shape.
    pub(super) fn checkpoint_meta(&self, app: &str) -> Meta {
        Meta {
            app: app.to_string(),
            tables: self
                .registry
                .tables()
                .iter()
                .map(TableShape::from)
                .collect(),
            cluster: ClusterShape {
                processes: self.shared.world.processes,
                workers: self.config.workers,
                shards: self.shared.world.shards,
            },
        }
    }

    /// [`checkpoint_with`](Self::checkpoint_with), `state` optional.
    fn checkpoint_parts(&mut self, dir: &Path, app: &str, state: Option<&[u8]>) -> Result<PathBuf> {
        self.check()?;
        let began = std::time::Instant::now();
        let clock = self.runs.start_clock;
        let writer = CheckpointWriter::begin(dir, clock, self.checkpoint_meta(app));
        let writer = match writer {
            Ok(writer) => writer,
            Err(e) => return Err(self.gather_failure::<Vec<PartEntry>>(e)),
        };
        let reports = match self.write_own_parts(dir, clock, state)? {
            Ok(parts) => self.gather_reports(Ok(parts))?,
            Err(e) => return Err(self.gather_failure::<Vec<PartEntry>>(e)),
        };
        // Rank 0 completes the checkpoint if every process wrote its parts.
        let committed = (self.shared.process == 0).then(|| commit(writer, &reports));
        let outcome = match committed.unwrap_or(Ok(PathBuf::new())) {
            Ok(dir) => self.gather_reports(Ok(dir))?,
            Err(e) => return Err(self.gather_failure::<PathBuf>(e)),
        };
        let done = outcome.into_iter().next().ok_or_else(|| {
            Error::failed("checkpoint", "the all-gather returned no process's outcome")
        })?;
        self.metrics.checkpointed(began);
        Ok(done)
    }

    /// Writes this process's parts of the checkpoint at `clock` (begun in `dir`): its
    /// application state, then each of its shards' rows, on the shards' threads. `Err`
    /// for a failed cluster; `Ok(Err)` for parts that could not be written.
    #[allow(clippy::type_complexity)]
    fn write_own_parts(
        &self,
        dir: &Path,
        clock: Clock,
        state: Option<&[u8]>,
    ) -> Result<std::result::Result<Vec<PartEntry>, CheckpointError>> {
        let mut parts = Vec::new();
        let rank = self.shared.process;
        if let Some(state) = state {
            let name = app_part_name(rank as usize);
            let written = PartWriter::standalone(dir, clock, &name)
                .and_then(|part| part.write_all_with(|out| out.write_all(state)));
            match written {
                Ok(entry) => parts.push(entry),
                Err(e) => return Ok(Err(e)),
            }
        }
        let shards = self.shared.world.shards_of(rank);
        for shard in shards.clone() {
            let root = dir.to_path_buf();
            self.send(
                shard as usize,
                ToShard::Checkpoint {
                    from: rank,
                    root,
                    clock,
                },
            )?;
        }
        let answers = self.shared.await_checkpointed(shards.len())?;
        for (shard, answer) in answers {
            match answer {
                Ok((name, size, sha256)) => parts.push(PartEntry { name, size, sha256 }),
                Err(message) => {
                    let path = part_path(dir, clock, &rows_part::part_name(shard));
                    return Ok(Err(CheckpointError::ShardPart {
                        shard,
                        path,
                        message,
                    }));
                }
            }
        }
        Ok(Ok(parts))
    }

    /// Every process's `report`, in rank order, when every process succeeded; else the
    /// lowest rank's error, as a [`CheckpointError::OnProcess`].
    pub(super) fn gather_reports<T: Serialize + for<'de> Deserialize<'de>>(
        &mut self,
        report: std::result::Result<T, (PathBuf, String)>,
    ) -> Result<Vec<T>> {
        let bytes = serde_json::to_vec(&Report { outcome: report })
            .map_err(|e| Error::failed("checkpoint", e))?;
        let parts = self.all_gather_bytes(&bytes)?;
        let mut values = Vec::with_capacity(parts.len());
        for (p, part) in parts.iter().enumerate() {
            let report: Report<T> = serde_json::from_slice(part).map_err(|e| {
                Error::failed("checkpoint", format!("process {p} sent a bad report: {e}"))
            })?;
            match report.outcome {
                Ok(v) => values.push(v),
                Err((path, message)) => {
                    return Err(CheckpointError::OnProcess {
                        process: p,
                        path,
                        message,
                    }
                    .into())
                }
            }
        }
        Ok(values)
    }

    /// This process's share of a failed step: tells every process (an all-gather, like
    /// [`gather_reports`](Self::gather_reports)) and returns its own error, typed. `T` is
    /// the step's report type, the same on every process.
    pub(super) fn gather_failure<T: Serialize + for<'de> Deserialize<'de>>(
        &mut self,
        error: CheckpointError,
    ) -> Error {
        let report: std::result::Result<T, _> = Err((error.path(), error.to_string()));
        match self.gather_reports(report) {
            Err(Error::Checkpoint(CheckpointError::OnProcess { .. })) | Ok(_) => error.into(),
            Err(failed) => failed,
        }
    }

    /// This process's share of the checkpoint's rows parts (old shard `k` for
    /// `k mod processes == rank`), read and checked whole, as batches of rows per shard
    /// of this cluster (at least one per shard, possibly empty, so that every shard
    /// hears from every process).
    fn read_rows(
        &self,
        checkpoint: &Checkpoint,
    ) -> std::result::Result<ShardBatches, CheckpointError> {
        let mut batches = ShardBatches::new(self.shared.world.total_shards());
        let old = checkpoint.meta().cluster;
        let old_shards = old.processes * old.shards;
        let manifest = checkpoint.dir().join("MANIFEST.json");
        let unexpected = checkpoint.parts().iter().find(|p| {
            rows_part::parse_part_name(&p.name).is_none_or(|s| s as usize >= old_shards)
                && !(0..old.processes).any(|r| p.name == app_part_name(r))
        });
        if let Some(p) = unexpected {
            return Err(CheckpointError::CorruptManifest {
                path: manifest,
                reason: format!("lists an unexpected part {}", p.name),
            });
        }
        let placement = self.shared.placement();
        let tables = self.registry.tables();
        let processes = self.shared.world.processes;
        let rank = self.shared.process as usize;
        for k in (0..old_shards).filter(|k| k % processes == rank) {
            let name = rows_part::part_name(k as u32);
            let path = checkpoint.dir().join(&name);
            if !checkpoint.parts().iter().any(|p| p.name == name) {
                return Err(CheckpointError::CorruptManifest {
                    path: manifest.clone(),
                    reason: format!("lists no {name} (a cluster of {old_shards} shards wrote it)"),
                });
            }
            let reader = checkpoint.part(&name)?;
            let sizes = |t: u32| {
                let m = tables.get(t as usize)?;
                Some((m.row_bytes(), m.state_bytes()))
            };
            let header = rows_part::read(reader, sizes, |item| match item {
                Item::Row(key, row) => batches.push(placement.shard_of(key) as usize, key, row),
                Item::State(key, state) => {
                    batches.push_state(placement.shard_of(key) as usize, key, state)
                }
            })
            .map_err(|reason| CheckpointError::CorruptPart {
                path: path.clone(),
                reason: reason.to_string(),
            })?;
            if header.shard as usize != k || header.clock != checkpoint.clock() {
                return Err(CheckpointError::CorruptPart {
                    path: path.clone(),
                    reason: format!(
                        "holds shard {} at clock {}, the manifest lists it as shard {k} at clock {}",
                        header.shard,
                        header.clock,
                        checkpoint.clock()
                    ),
                });
            }
        }
        Ok(batches)
    }

    /// [`all_gather`](Self::all_gather) of bytes.
    pub(super) fn all_gather_bytes(&mut self, bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
        let parts = self.gather_round(AlignedBuf::from_bytes(bytes))?;
        Ok(parts.iter().map(|b| b.as_bytes().to_vec()).collect())
    }
}

/// Rank 0's part of a checkpoint (or of a park, `branches.rs`): records every process's
/// parts and commits. Returns the complete checkpoint's directory, or the file at fault
/// and why.
pub(super) fn commit(
    writer: CheckpointWriter,
    reports: &[Vec<PartEntry>],
) -> std::result::Result<PathBuf, CheckpointError> {
    for entry in reports.iter().flatten() {
        writer.record(entry.clone())?;
    }
    let committed = writer.commit()?;
    tracing::debug!(
        "checkpoint at clock {} complete in {}; {} older removed",
        committed.clock,
        committed.dir.display(),
        committed.pruned.len()
    );
    for e in &committed.prune_failures {
        tracing::warn!(
            "checkpoint {} is complete, but: {e}",
            committed.dir.display()
        );
    }
    Ok(committed.dir)
}

/// The path of part `name` of the checkpoint at `clock` in `dir`.
fn part_path(dir: &Path, clock: Clock, name: &str) -> PathBuf {
    dir.join(crate::checkpoint::dir_name(clock)).join(name)
}
