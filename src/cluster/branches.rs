//! Branches of the training state (MLtuner's mechanics): [`Cluster::fork`],
//! [`switch`](Cluster::switch), [`free`](Cluster::free), [`park`](Cluster::park) and
//! [`unpark`](Cluster::unpark), with [`BranchInfo`], [`BranchCounts`] and
//! [`BranchStates`].
//!
//! A **branch** is a copy of every table's rows and their update-rule states (kept on the
//! shards that hold the rows: each process's shards copy their own, so forking moves no
//! row over the network) and of its settings: the tables' rule parameters
//! ([`Cluster::set_rule`]: a learning rate on the servers) and the staleness
//! ([`Cluster::set_staleness`]), so consistency models switch per branch. The store
//! serves one branch, the **live** one; the others sit in per-shard slots or, parked, on
//! disk. The plan, the op tapes and the arena layout are built once and shared by every
//! branch: only values are copied (eagerly: a fork copies the rows it holds, a switch
//! moves them).
//!
//! Every op is a **collective between runs**: every process calls it alike. The processes
//! first agree on the op ([`Cluster::agree`]: a different op or branch on some process
//! fails every process with [`Error::Disagreement`] naming it), check it against their
//! books of branches (identical on every process, so a misuse is refused everywhere with
//! [`Error::Branch`]), send it to their own shards ([`ToShard::Branch`]) and wait for
//! their answers, then all-gather the outcome, so every process returns the same answer.
//! A switch then drops every copy of a row this process holds, as
//! [`set_rows`](Cluster::set_rows) does (the generic cache, the arena's chunks, the
//! workers' built state turned back into tapes), and installs the new branch's rule
//! parameters and staleness; the shards' next refreshes are whole.
//!
//! Parking writes a branch through the checkpoint layer: a complete checkpoint in
//! `<dir>/branch-<id>/` whose parts are the shards' slots (`rows_part`'s format), so an
//! unpark verifies every byte before a row goes back. If a part cannot be written, every
//! process puts its slots back from memory and the park fails everywhere.
//!
//! Everything else acts on the live branch alone: runs, [`set_rows`](Cluster::set_rows),
//! [`snapshot`](Cluster::snapshot), server functions and checkpoints (a checkpoint holds
//! the live branch; a resume is refused once a branch was forked).
//!
//! **Clocks.** The cluster's clock only moves forward: a branch trained `k` clocks after a
//! switch runs at the cluster's clocks, and [`BranchInfo::trained`] counts the clocks its
//! values have seen (a rule's per-row step counts are in its rule states, so they are
//! the branch's own). Per-worker state of [`Cluster::run_with`] is the caller's:
//! [`BranchStates`] keeps one copy per branch.

use super::checkpointing::commit;
use super::Cluster;
use crate::checkpoint::{Checkpoint, CheckpointWriter, ClusterRule, PartEntry, PartWriter};
use crate::consistency::Staleness;
use crate::error::checkpoint::CheckpointError;
use crate::error::{Error, Result};
use crate::ids::{BranchId, Clock, ShardId};
use crate::msg::{BranchOp, ToShard};
use crate::rows_part;
use crate::rule::Rule;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The name parked branches' checkpoints are written for.
const PARKED_APP: &str = "iterstore-branch";

/// What the cluster knows of one branch ([`Cluster::branches`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BranchInfo {
    /// The branch.
    pub id: BranchId,
    /// The branch it was forked from (`None` for branch 0).
    pub parent: Option<BranchId>,
    /// The cluster's clock when it was forked.
    pub forked_at: Clock,
    /// Clocks its values have been trained: its parent's at the fork, plus every clock it
    /// was live for since.
    pub trained: Clock,
    /// Whether it is the live branch, the one runs train.
    pub live: bool,
    /// The directory it is parked in, if it is parked.
    pub parked: Option<PathBuf>,
}

/// How many branch ops this process took part in ([`Cluster::branch_counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BranchCounts {
    /// Branches forked.
    pub forks: u64,
    /// Switches to another branch (a switch to the live branch is not counted).
    pub switches: u64,
    /// Branches freed.
    pub frees: u64,
    /// Branches parked.
    pub parks: u64,
    /// Branches brought back from disk.
    pub unparks: u64,
}

/// One branch in the book.
#[derive(Debug, Clone)]
struct Entry {
    parent: Option<BranchId>,
    forked_at: Clock,
    /// Clocks trained until it last became live (or was forked).
    trained: Clock,
    /// The tables' rule parameters while not live (the live branch's are the registry's).
    rules: Vec<(u32, Rule)>,
    /// Its staleness while not live (the live branch's is the configuration's).
    staleness: Staleness,
    parked: Option<PathBuf>,
}

/// A process's book of branches: the same on every process (see the module docs).
#[derive(Debug)]
pub(super) struct BranchBook {
    live: BranchId,
    /// The cluster's clock when the live branch became live.
    live_since: Clock,
    next: u32,
    entries: BTreeMap<BranchId, Entry>,
    counts: BranchCounts,
}

impl BranchBook {
    /// Whether a branch was ever forked (a resume is then too late).
    pub(super) fn forked(&self) -> bool {
        self.next > 1
    }
}

impl Default for BranchBook {
    fn default() -> Self {
        let root = Entry {
            parent: None,
            forked_at: 0,
            trained: 0,
            rules: Vec::new(),
            staleness: Staleness::BSP,
            parked: None,
        };
        BranchBook {
            live: BranchId(0),
            live_since: 0,
            next: 1,
            entries: BTreeMap::from([(BranchId(0), root)]),
            counts: BranchCounts::default(),
        }
    }
}

/// Per-worker states of [`Cluster::run_with`], one vector per branch: fork them with the
/// store's branches so that each branch trains with its own (random generators, local
/// buffers, counters).
///
/// ```
/// use iterstore::{BranchStates, Cluster, Config};
///
/// # fn main() -> iterstore::Result<()> {
/// let mut cluster = Cluster::start(Config::new(2))?;
/// let mut states = BranchStates::new(vec![0u32; 2]);
/// let b = cluster.fork(cluster.live_branch())?;
/// states.fork(cluster.live_branch(), b)?;
/// cluster.switch(b)?;
/// cluster.run_with(states.of_mut(b)?, |w, n| {
///     *n += 1;
///     w.clock()
/// })?;
/// assert_eq!(states.of_mut(b)?, &[1, 1]);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct BranchStates<S> {
    states: BTreeMap<BranchId, Vec<S>>,
}

impl<S: Clone> BranchStates<S> {
    /// Branch 0's states (the branch every cluster starts with).
    pub fn new(initial: Vec<S>) -> Self {
        BranchStates {
            states: BTreeMap::from([(BranchId(0), initial)]),
        }
    }

    /// Gives branch `id` a copy of branch `source`'s states.
    pub fn fork(&mut self, source: BranchId, id: BranchId) -> Result<()> {
        let copy = self.get(source)?.clone();
        self.states.insert(id, copy);
        Ok(())
    }

    /// Branch `id`'s states.
    pub fn of_mut(&mut self, id: BranchId) -> Result<&mut Vec<S>> {
        self.states.get_mut(&id).ok_or_else(|| Error::Branch {
            branch: id,
            reason: "has no per-worker states".into(),
        })
    }

    /// Drops branch `id`'s states.
    pub fn free(&mut self, id: BranchId) {
        self.states.remove(&id);
    }

    fn get(&self, id: BranchId) -> Result<&Vec<S>> {
        self.states.get(&id).ok_or_else(|| Error::Branch {
            branch: id,
            reason: "has no per-worker states".into(),
        })
    }
}

/// An op's outcome on one process, all-gathered.
#[derive(Debug, Serialize, Deserialize)]
struct Outcome(std::result::Result<(), String>);

impl Cluster {
    /// The live branch: the one runs read and train.
    pub fn live_branch(&self) -> BranchId {
        self.branches.live
    }

    /// Every branch, live, in slots or parked, by id.
    pub fn branches(&self) -> Vec<BranchInfo> {
        let book = &self.branches;
        book.entries
            .iter()
            .map(|(&id, e)| {
                let live = id == book.live;
                let since = self.runs.start_clock.saturating_sub(book.live_since);
                BranchInfo {
                    id,
                    parent: e.parent,
                    forked_at: e.forked_at,
                    trained: e.trained + if live { since } else { 0 },
                    live,
                    parked: e.parked.clone(),
                }
            })
            .collect()
    }

    /// Shows the book's counts, size and live branch on the metrics endpoint.
    fn note_branches(&self) {
        let book = &self.branches;
        self.metrics
            .branches_changed(&book.counts, book.entries.len(), book.live.0);
    }

    /// The branch ops this process took part in.
    pub fn branch_counts(&self) -> BranchCounts {
        self.branches.counts
    }

    /// Forks branch `source` (the live one or one in memory) into a new branch with a copy
    /// of its rows, rule states, rule parameters and staleness, and returns its id (the
    /// same on every process). The live branch stays live. A collective between runs (see
    /// the module docs); refused for an unknown or parked `source`.
    ///
    /// ```
    /// use iterstore::{Cluster, Config};
    ///
    /// # fn main() -> iterstore::Result<()> {
    /// let mut cluster = Cluster::start(Config::new(1))?;
    /// let t = cluster.create_table::<i64>("t", 1)?;
    /// let add = |n: i64| move |w: &mut iterstore::Worker<'_>| {
    ///     w.update(&t, 0, &[n])?;
    ///     w.clock()
    /// };
    /// cluster.run(add(1))?;
    /// let main = cluster.live_branch();
    /// let other = cluster.fork(main)?;
    /// cluster.run(add(10))?; // main: 11
    /// cluster.switch(other)?;
    /// cluster.run(add(100))?; // other: 101
    /// assert_eq!(cluster.snapshot(&t)?, vec![(0, vec![101])]);
    /// cluster.switch(main)?;
    /// assert_eq!(cluster.snapshot(&t)?, vec![(0, vec![11])]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn fork(&mut self, source: BranchId) -> Result<BranchId> {
        let id = BranchId(self.branches.next);
        self.agree_on("fork", &format!("{source} into {id}"))?;
        let (rules, staleness) = self.settings_of(source)?;
        self.on_own_shards(BranchOp::Fork { source, id }, id)?;
        let trained = self
            .branches()
            .into_iter()
            .find(|b| b.id == source)
            .map_or(0, |b| b.trained);
        let entry = Entry {
            parent: Some(source),
            forked_at: self.runs.start_clock,
            trained,
            rules,
            staleness,
            parked: None,
        };
        let book = &mut self.branches;
        book.entries.insert(id, entry);
        book.next += 1;
        book.counts.forks += 1;
        self.note_branches();
        Ok(id)
    }

    /// Makes branch `to` (one in memory) the live one: the live branch's rows, rule states,
    /// rule parameters and staleness are kept in its slot, and `to`'s take their place;
    /// the next run trains `to`. A collective between runs (see the module docs); a
    /// switch to the live branch does nothing; refused for an unknown or parked branch.
    pub fn switch(&mut self, to: BranchId) -> Result<()> {
        self.agree_on("switch", &format!("to {to}"))?;
        let (rules, staleness) = self.settings_of(to)?;
        let live = self.branches.live;
        if to == live {
            return Ok(());
        }
        self.on_own_shards(BranchOp::Switch { to }, to)?;
        let now = self.runs.start_clock;
        let saved = (self.current_rules(), self.config.staleness);
        let book = &mut self.branches;
        if let Some(e) = book.entries.get_mut(&live) {
            e.trained += now.saturating_sub(book.live_since);
            (e.rules, e.staleness) = saved;
        }
        book.live = to;
        book.live_since = now;
        book.counts.switches += 1;
        let current = self.current_rules();
        for (table, rule) in rules {
            if current.iter().any(|&(t, r)| t == table && r != rule) {
                self.install_rule(table, rule)?;
            }
        }
        self.install_staleness(staleness)?;
        self.drop_row_copies();
        self.note_branches();
        Ok(())
    }

    /// Drops branch `id` (in memory or parked; a parked branch's files stay where they
    /// are). A collective between runs; refused for the live branch or an unknown one.
    pub fn free(&mut self, id: BranchId) -> Result<()> {
        self.agree_on("free", &id.to_string())?;
        let entry = self.entry(id)?;
        if id == self.branches.live {
            return Err(misuse(id, "is the live branch (switch to another first)"));
        }
        if entry.parked.is_none() {
            self.on_own_shards(BranchOp::Free { id }, id)?;
        }
        self.branches.entries.remove(&id);
        self.branches.counts.frees += 1;
        self.note_branches();
        Ok(())
    }

    /// Parks branch `id` (in memory, not live) in `dir` (created if missing; the same
    /// directory on every process, as for a checkpoint): its rows and rule states are
    /// written as a complete checkpoint in `<dir>/branch-<id>/` and dropped from memory;
    /// returns that checkpoint's directory. [`unpark`](Self::unpark) brings it back. A
    /// collective between runs; if any part cannot be written, the branch stays in memory
    /// and every process returns the error.
    pub fn park(&mut self, id: BranchId, dir: &Path) -> Result<PathBuf> {
        self.agree_on("park", &format!("{id} in {}", dir.display()))?;
        self.settings_of(id)?;
        if id == self.branches.live {
            return Err(misuse(id, "is the live branch (switch to another first)"));
        }
        let root = dir.join(format!("branch-{}", id.0));
        let clock = self.runs.start_clock;
        let meta = self.checkpoint_meta(PARKED_APP);
        let writer = match CheckpointWriter::begin(&root, clock, meta) {
            Ok(w) => {
                self.gather_reports(Ok(()))?;
                w
            }
            Err(e) => return Err(self.gather_failure::<()>(e)),
        };
        let parts = self.on_own_shards(BranchOp::Park { id }, id)?;
        let reports = match write_parts(&root, clock, &parts) {
            Ok(entries) => self.gather_reports(Ok(entries)),
            Err(e) => Err(self.gather_failure::<Vec<PartEntry>>(e)),
        };
        let committed = match reports {
            Ok(reports) => {
                let commit = (self.shared.process == 0).then(|| commit(writer, &reports));
                match commit.unwrap_or(Ok(PathBuf::new())) {
                    Ok(dir) => self.gather_reports(Ok(dir)),
                    Err(e) => Err(self.gather_failure::<PathBuf>(e)),
                }
            }
            Err(e) => Err(e),
        };
        match committed {
            Ok(dirs) => {
                let done = dirs.into_iter().next().unwrap_or_default();
                if let Some(e) = self.branches.entries.get_mut(&id) {
                    e.parked = Some(root);
                }
                self.branches.counts.parks += 1;
                self.note_branches();
                Ok(done)
            }
            Err(e) => {
                // Put the slots back from memory, on every process alike.
                for (shard, part) in parts {
                    let op = BranchOp::Unpark { id, part };
                    self.send_op(shard, op)?;
                }
                let n = self.shared.world.shards_of(self.shared.process).len();
                self.shared.await_branched(n)?;
                Err(e)
            }
        }
    }

    /// Brings parked branch `id` back into memory from the checkpoint
    /// [`park`](Self::park) wrote, verified whole first (a missing or corrupt file is
    /// refused on every process, naming it, and the branch stays parked); then the
    /// parked files are removed. A collective between runs.
    pub fn unpark(&mut self, id: BranchId) -> Result<()> {
        self.agree_on("unpark", &id.to_string())?;
        let entry = self.entry(id)?;
        let Some(root) = entry.parked.clone() else {
            return Err(misuse(id, "is not parked"));
        };
        let meta = self.checkpoint_meta(PARKED_APP);
        let shards = self.shared.world.shards_of(self.shared.process);
        let read = Checkpoint::open_newest(&root, &meta, ClusterRule::Same).and_then(|c| {
            shards
                .clone()
                .map(|s| Ok((s, c.read_part(&rows_part::part_name(s))?)))
                .collect::<std::result::Result<Vec<_>, CheckpointError>>()
        });
        let parts = match read {
            Ok(parts) => {
                self.gather_reports(Ok(()))?;
                parts
            }
            Err(e) => return Err(self.gather_failure::<()>(e)),
        };
        for (shard, part) in parts {
            self.send_op(shard, BranchOp::Unpark { id, part })?;
        }
        self.finish_op(id, shards.len())?;
        // Every process has its rows back (the outcome was all-gathered): the files are
        // stale, and a later park of the branch at this clock writes them anew.
        if self.shared.process == 0 {
            if let Err(e) = std::fs::remove_dir_all(&root) {
                tracing::warn!("{id} is unparked, but {} stays: {e}", root.display());
            }
        }
        if let Some(e) = self.branches.entries.get_mut(&id) {
            e.parked = None;
        }
        self.branches.counts.unparks += 1;
        self.note_branches();
        Ok(())
    }

    /// Agrees with every process on branch op `what` with `detail`.
    fn agree_on(&mut self, what: &str, detail: &str) -> Result<()> {
        self.check()?;
        self.refuse_with_backups("a branch op")?;
        self.agree(&[("branch op", what), ("branch op's branches", detail)])
    }

    /// Branch `id`'s book entry; refused if unknown.
    fn entry(&self, id: BranchId) -> Result<&Entry> {
        self.branches
            .entries
            .get(&id)
            .ok_or_else(|| misuse(id, "is not a branch (never forked, or freed)"))
    }

    /// Branch `id`'s settings: its rule parameters and staleness; refused if it is
    /// unknown or parked.
    fn settings_of(&self, id: BranchId) -> Result<(Vec<(u32, Rule)>, Staleness)> {
        let entry = self.entry(id)?;
        if entry.parked.is_some() {
            return Err(misuse(id, "is parked (unpark it first)"));
        }
        if id == self.branches.live {
            return Ok((self.current_rules(), self.config.staleness));
        }
        Ok((entry.rules.clone(), entry.staleness))
    }

    /// The tables' rules now, by table id.
    fn current_rules(&self) -> Vec<(u32, Rule)> {
        let tables = self.registry.tables().iter();
        tables.map(|m| (m.id, m.rule)).collect()
    }

    /// Sends `op` to this process's shards, waits for their answers and all-gathers the
    /// outcome; returns the shards' parts (a park's). `id` is the branch named in errors.
    fn on_own_shards(&mut self, op: BranchOp, id: BranchId) -> Result<Vec<(ShardId, Vec<u8>)>> {
        let shards = self.shared.world.shards_of(self.shared.process);
        for shard in shards.clone() {
            self.send_op(shard, op.clone())?;
        }
        self.finish_op(id, shards.len())
    }

    fn send_op(&self, shard: ShardId, op: BranchOp) -> Result<()> {
        let from = self.shared.process;
        let clock = self.runs.start_clock;
        self.send(shard as usize, ToShard::Branch { from, clock, op })
    }

    /// Waits for `shards` answers of this process's shards and all-gathers the outcome:
    /// every process returns the first failure (by rank, then shard), or the parts.
    fn finish_op(&mut self, id: BranchId, shards: usize) -> Result<Vec<(ShardId, Vec<u8>)>> {
        let answers = self.shared.await_branched(shards)?;
        let mut parts = Vec::with_capacity(answers.len());
        let mut failure = None;
        for (shard, outcome) in answers {
            match outcome {
                Ok(part) => parts.push((shard, part)),
                Err(reason) => {
                    failure.get_or_insert(format!("shard {shard}: {reason}"));
                }
            }
        }
        let mine = serde_json::to_vec(&Outcome(failure.map_or(Ok(()), Err)))
            .map_err(|e| Error::failed("branch op", e))?;
        for (p, bytes) in self.all_gather_bytes(&mine)?.iter().enumerate() {
            let Outcome(outcome) = serde_json::from_slice(bytes).map_err(|e| {
                Error::failed("branch op", format!("process {p} sent a bad outcome: {e}"))
            })?;
            if let Err(reason) = outcome {
                return Err(misuse(id, &format!("on process {p}, {reason}")));
            }
        }
        Ok(parts)
    }
}

/// The error of a refused or failed branch op.
fn misuse(branch: BranchId, reason: &str) -> Error {
    Error::Branch {
        branch,
        reason: reason.to_string(),
    }
}

/// Writes this process's shards' `parts` of a parked branch's checkpoint at `clock` in
/// `root`.
fn write_parts(
    root: &Path,
    clock: Clock,
    parts: &[(ShardId, Vec<u8>)],
) -> std::result::Result<Vec<PartEntry>, CheckpointError> {
    parts
        .iter()
        .map(|(shard, bytes)| {
            PartWriter::standalone(root, clock, &rows_part::part_name(*shard))?
                .write_all_with(|out| out.write_all(bytes))
        })
        .collect()
}
