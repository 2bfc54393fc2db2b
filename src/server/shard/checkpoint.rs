//! A shard's part of a checkpoint ([`ToShard::Checkpoint`](crate::msg::ToShard::Checkpoint)
//! → [`ToClient::Checkpointed`]): whether it may be taken now, what it holds, its bytes,
//! and the answer.
//!
//! Three steps, the middle one its driver's: [`Shard::handle`] checks that the checkpoint
//! is in place (between runs, at the checkpoint's clock) and returns a [`PartWrite`]
//! naming the part and the rows it holds; the driver stores the part through
//! `crate::checkpoint`, streaming into it the bytes [`Shard::encode_part`] encodes (the
//! `rows_part` format); it hands the outcome to [`Shard::part_written`], which answers
//! the process that asked — with the part's manifest entry, or the error's text (a failed
//! write, say a full disk, is not a protocol error: the cluster goes on).
//!
//! It knows which rows and rule states a part holds and their encoding; not files, directories, fsync or
//! checksums (`crate::checkpoint`'s, called by the driver), nor how a resume reads the
//! part back (`restore` takes rows and rule states as messages).

use super::Shard;
use crate::checkpoint::PartEntry;
use crate::error::checkpoint::CheckpointError;
use crate::ids::{Clock, ProcessId, RowKey};
use crate::msg::{Envelope, ToClient};
use crate::rows_part;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// A checkpoint part a shard asks its driver to write: every row it holds that is not all
/// zeros, generic and arena rows alike, sorted by key, then the update-rule state of every
/// row that has one, sorted by key, as part `shard-<id>.rows` of the checkpoint at `clock`
/// in `root` (see [`rows_part`]).
///
/// It is carried out at once, before the shard handles anything else: the part's bytes
/// ([`Shard::encode_part`]) are the rows as they are when it was asked for.
#[derive(Debug)]
pub(crate) struct PartWrite {
    /// The process that asked, and gets the answer.
    from: ProcessId,
    root: PathBuf,
    clock: Clock,
    name: String,
    /// The rows to write, sorted: each key, and whether its row is in the arena.
    keys: Vec<(RowKey, bool)>,
    /// The rows whose update-rule state to write, sorted.
    states: Vec<RowKey>,
}

impl PartWrite {
    /// The checkpoint directory (the root holding `ckpt-<clock>/`).
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The checkpoint's clock.
    pub(crate) fn clock(&self) -> Clock {
        self.clock
    }

    /// The part's file name, `shard-<id>.rows`.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }
}

impl Shard {
    /// `from` asks for this shard's rows as its part of the checkpoint at `clock` in
    /// `root`: the part to write, or `None` after rejecting a checkpoint out of place.
    /// Only between runs: with updates pending, workers at another clock, a run ending, or
    /// a migration or restore under way, the rows are not the checkpoint's clock's, and
    /// the protocol was broken.
    pub(super) fn checkpoint(
        &self,
        from: ProcessId,
        root: PathBuf,
        clock: Clock,
        out: &mut Vec<Envelope>,
    ) -> Option<PartWrite> {
        if self.world.process_of_shard(self.id) != Some(from) {
            self.reject_all(
                format!("process {from} asked shard {} for a checkpoint", self.id),
                out,
            );
            return None;
        }
        if let Err(reason) = self.between_runs_at(clock) {
            self.reject_all(format!("a checkpoint at clock {clock} {reason}"), out);
            return None;
        }
        Some(PartWrite {
            from,
            root,
            clock,
            name: rows_part::part_name(self.id),
            keys: self.part_keys(),
            states: self.rules.keys(),
        })
    }

    /// `Ok` if every update up to `clock` is applied and none after: no update pending,
    /// every worker at `clock`, no run ending, no migration or restore under way, every
    /// rule gradient stepped.
    pub(super) fn between_runs_at(&self, clock: Clock) -> Result<(), String> {
        let (min, max) = (self.clocks.min_clock(), self.clocks.max_clock());
        if !self.pending.is_empty() {
            Err("while updates are pending".into())
        } else if min != clock || max != clock {
            Err(format!(
                "while the shard's workers are at clocks {min} to {max}"
            ))
        } else if let Some(p) = self
            .staying()
            .into_iter()
            .find(|&p| self.ended[p as usize] != self.run)
        {
            Err(format!(
                "while process {p} is ending run {}",
                self.ended[p as usize]
            ))
        } else if self.migration.is_some() {
            Err("during a migration".into())
        } else if self.restore.is_some() {
            Err("during a restore".into())
        } else if self.rules.waiting() {
            Err("while rule gradients wait for their step".into())
        } else {
            Ok(())
        }
    }

    /// Every row to write, sorted by key: those not all zeros, generic and arena rows
    /// alike, each with whether it is in the arena.
    fn part_keys(&self) -> Vec<(RowKey, bool)> {
        let mut keys: Vec<(RowKey, bool)> = self
            .rows
            .iter()
            .filter(|e| rows_part::keep(e.value().as_bytes()))
            .map(|e| (*e.key(), false))
            .collect();
        keys.extend(
            self.arena
                .rows()
                .filter(|(_, b)| rows_part::keep(b))
                .map(|(k, _)| (k, true)),
        );
        keys.sort_unstable_by_key(|(k, _)| *k);
        keys
    }

    /// Encodes every row and rule state this shard holds now as a rows part of clock
    /// `clock` into `out` (what [`encode_part`](Self::encode_part) writes for a checkpoint
    /// asked for at `clock`).
    pub(super) fn encode_rows(&self, clock: Clock, out: &mut impl Write) -> io::Result<()> {
        let write = PartWrite {
            from: 0,
            root: PathBuf::new(),
            clock,
            name: rows_part::part_name(self.id),
            keys: self.part_keys(),
            states: self.rules.keys(),
        };
        self.encode_part(&write, out)
    }

    /// Encodes the part `write` names into `out`: its header, then each of its rows and
    /// rule states as this shard holds them (see [`rows_part`]). Bytes only: where they go
    /// is the caller's, and so is every error of `out`.
    pub(crate) fn encode_part(&self, write: &PartWrite, out: &mut impl Write) -> io::Result<()> {
        let header = rows_part::Header {
            shard: self.id,
            clock: write.clock,
            rows: write.keys.len() as u64,
            states: write.states.len() as u64,
        };
        rows_part::write_header(out, header)?;
        for &(key, in_arena) in &write.keys {
            if in_arena {
                if let Some(row) = self.arena.row(key) {
                    rows_part::write_row(out, key, row)?;
                }
            } else if let Some(row) = self.rows.get(&key) {
                rows_part::write_row(out, key, row.as_bytes())?;
            }
        }
        for &key in &write.states {
            if let Some((steps, state)) = self.rules.get(key) {
                rows_part::write_state(out, key, steps, state)?;
            }
        }
        Ok(())
    }

    /// The outcome of `write`, as its driver stored it: answers the process that asked
    /// with the part's entry, or with the error's text.
    pub(crate) fn part_written(
        &self,
        write: PartWrite,
        written: Result<PartEntry, CheckpointError>,
        out: &mut Vec<Envelope>,
    ) {
        let part = written
            .map(|e| (e.name, e.size, e.sha256))
            .map_err(|e| e.to_string());
        let shard = self.id;
        out.push(Envelope::Client(
            write.from,
            ToClient::Checkpointed { shard, part },
        ));
    }
}
