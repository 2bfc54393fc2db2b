//! Going on after the loss of a process without a checkpoint, from the replicated shards
//! (`Config::shard_replicas` R > 1; `docs/replication.md`, "Recovery from the replicas"):
//! [`Recovery`], what a process keeps across its clusters, [`Cluster::keep_state`] and
//! [`Cluster::recover`], with [`Recovered`].
//!
//! **Keep.** A cluster started with [`Cluster::start_with`] that fails because another
//! process was lost leaves its shards — each with the backups it kept of other processes'
//! shards, and each with its run's undo log — in the [`Recovery`]. Between runs, each
//! application hands [`Cluster::keep_state`] what its workers keep besides the store (the
//! bytes its checkpoints' state part would hold): the process keeps it, and sends it to
//! the shards backing up its first shard, which keep it beside their backups and
//! acknowledge it before the next run can start.
//!
//! **Recover.** The next cluster — the same processes, the lost one started again —
//! calls [`Cluster::recover`] where it would resume from a checkpoint: the processes
//! all-gather what each kept ([`choice::Inventory`]), choose alike the newest iteration's
//! end at which every shard has a copy ([`choice::choose`]), and each process sends the
//! rows of the copies chosen on it, rolled back to that clock, to the shard they were on,
//! as a checkpoint's rows are restored ([`ToShard::Restore`]); the primaries replicate
//! them to their new backups. The application's virtual iteration then places the rows
//! as the failed cluster did (the same pattern), so its migration moves none. Each
//! process's application state comes from its own copy or a backup's, all-gathered.
//!
//! It knows what is kept and the collective that restores it; the copies' clocks and
//! rows are the shards' (`server`), the choice `choice`'s.

mod choice;

use super::batches::ShardBatches;
use super::Cluster;
use crate::checkpoint::dir_name;
use crate::error::{Error, Result};
use crate::ids::{Clock, ProcessId};
use crate::msg::ToShard;
use crate::rows_part::{self, Item};
use crate::server::{keep_newest, Shard};
use crate::sync::lock;
use choice::Inventory;
use std::sync::{Arc, Mutex};

/// What one process keeps, across the clusters it starts with [`Cluster::start_with`],
/// to go on after another process is lost without reading a checkpoint: the shards of a
/// cluster that failed that way (with their backups of other processes' shards) and the
/// application states handed to [`Cluster::keep_state`]. Clones share it. Empty until a
/// replicated cluster keeps something; a process that was not in the failed cluster (the
/// lost one, started again) holds nothing, and the others give it its share.
#[derive(Clone, Default)]
pub struct Recovery {
    kept: Arc<Mutex<Kept>>,
}

/// What a [`Recovery`] holds.
#[derive(Default)]
struct Kept {
    /// The shards of the last cluster that failed because a process was lost.
    shards: Vec<Shard>,
    /// Every process's application state at each clock kept, oldest first.
    states: Vec<(Clock, Vec<u8>)>,
}

impl Recovery {
    /// An empty one.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether it holds shards of a failed cluster to go on from.
    pub fn holds_shards(&self) -> bool {
        !lock(&self.kept).shards.is_empty()
    }

    /// Keeps the shards of a cluster that failed because a process was lost (replacing
    /// any kept before).
    pub(super) fn keep_shards(&self, shards: Vec<Shard>) {
        lock(&self.kept).shards = shards;
    }

    /// Keeps this process's application state `state` at `clock`, dropping the oldest
    /// beyond the last few ([`keep_newest`]).
    fn keep_state(&self, clock: Clock, state: Vec<u8>) {
        keep_newest(&mut lock(&self.kept).states, clock, state);
    }
}

impl std::fmt::Debug for Recovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept = lock(&self.kept);
        f.debug_struct("Recovery")
            .field("shards", &kept.shards.len())
            .field(
                "states",
                &kept.states.iter().map(|(c, _)| *c).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Two handles are equal when they share what they keep.
impl PartialEq for Recovery {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.kept, &other.kept)
    }
}

impl Eq for Recovery {}

/// What a cluster went on from ([`Cluster::recover`]): the clock, and every process's
/// application state kept there, in rank order.
#[derive(Debug)]
pub struct Recovered {
    clock: Clock,
    states: Vec<Vec<u8>>,
}

impl Recovered {
    /// The clock the cluster's next run starts at: the end of the last iteration every
    /// shard had a copy of.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Every process's application state at that clock, as it handed it to
    /// [`Cluster::keep_state`], in rank order.
    pub fn states(&self) -> &[Vec<u8>] {
        &self.states
    }
}

impl Cluster {
    /// Starts a cluster as [`start`](Self::start) does, keeping its shards in `recovery`
    /// if it fails because another process was lost, and going on from what `recovery`
    /// holds at [`recover`](Self::recover). Only a cluster with
    /// [`Config::shard_replicas`](crate::Config::shard_replicas) above 1 keeps anything.
    pub fn start_with(config: crate::config::Config, recovery: &Recovery) -> Result<Cluster> {
        let mut cluster = Self::start(config)?;
        cluster.recovery = Some(recovery.clone());
        Ok(cluster)
    }

    /// Keeps `state` — what this process's workers keep besides the store at the end of
    /// a run, as bytes of the application's own — for [`recover`](Self::recover), between
    /// runs: this process keeps it, and so does each process backing up its first shard
    /// (`ToShard::KeepState`), which acknowledges it before this returns (within the
    /// message timeout), so that no process's next run starts before its state is on
    /// another process. Nothing with one copy of each shard.
    pub fn keep_state(&mut self, state: &[u8]) -> Result<()> {
        let replicas = self.config.shard_replicas;
        if replicas < 2 {
            return Ok(());
        }
        self.check()?;
        let (rank, clock) = (self.shared.process, self.runs.start_clock);
        let world = self.shared.world;
        let keepers = world.backups_of(world.shards_of(rank).start, replicas);
        for &k in &keepers {
            let msg = ToShard::KeepState {
                from: rank,
                clock,
                state: state.to_vec(),
            };
            self.send(k as usize, msg)?;
        }
        let timeout = self.config.message_timeout;
        self.shared.await_states_kept(&keepers, clock, timeout)?;
        if let Some(r) = &self.recovery {
            r.keep_state(clock, state.to_vec());
        }
        Ok(())
    }

    /// Goes on from what the processes kept of a cluster that failed because a process was
    /// lost (see the module docs): a collective before any run, plan or resume, every
    /// process calling it alike after creating the same tables. Returns the clock the next
    /// run starts at and every process's application state there, or `None` when nothing
    /// was kept (the first cluster) or no iteration had ended (the run starts from the
    /// beginning). With one copy of each shard, `None` at once, without a gather.
    ///
    /// Fails, on every process, naming the shards, when no kept clock has a copy of every
    /// shard.
    pub fn recover(&mut self) -> Result<Option<Recovered>> {
        if self.config.shard_replicas < 2 {
            return Ok(None);
        }
        self.check()?;
        let used = self.runs.ended > 0 || self.spec.plans > 0 || self.runs.resumed;
        if used {
            return Err(Error::failed(
                "recovery",
                "recover() comes before any run, plan or resume",
            ));
        }
        let mut kept = self
            .recovery
            .as_ref()
            .map(|r| std::mem::take(&mut *lock(&r.kept)))
            .unwrap_or_default();
        let rank = self.shared.process;
        let mine = Inventory {
            copies: kept.shards.iter().flat_map(Shard::copies).collect(),
            states: (kept.states.iter().map(|(c, _)| (rank, *c)))
                .chain(
                    kept.shards
                        .iter()
                        .flat_map(|s| s.kept_states().map(|(p, c, _)| (p, c))),
                )
                .collect(),
        };
        let inventories = self.gather_reports(Ok(mine))?;
        let total = self.shared.world.total_shards();
        let choice = match choice::choose(total, &inventories) {
            Ok(Some(choice)) => choice,
            Ok(None) => {
                if inventories.iter().any(|i| !i.is_empty()) {
                    tracing::warn!(
                        "recovery: no iteration had ended before the loss; the run starts \
                         from the beginning"
                    );
                }
                return Ok(None);
            }
            Err(why) => return Err(Error::failed("recovery", why)),
        };
        let rows = self.rows_of_copies(&mut kept.shards, &choice.rows_from, choice.clock);
        let batches = match rows {
            Ok(b) => {
                self.gather_reports(Ok(()))?;
                b
            }
            Err(why) => {
                let report: std::result::Result<(), _> =
                    Err((std::path::PathBuf::from("replicas"), why.clone()));
                let _ = self.gather_reports(report);
                return Err(Error::failed(format!("recovery (process {rank})"), why));
            }
        };
        let clock = choice.clock;
        self.restore_batches(batches, clock)?;
        // Each process sends the states it was chosen to give; everyone takes them all.
        let given: Vec<(ProcessId, &[u8])> = (choice.states_from.iter().enumerate())
            .filter(|(_, &from)| from == rank)
            .filter_map(|(p, _)| {
                let p = p as ProcessId;
                let own = (p == rank)
                    .then(|| kept.states.iter().find(|(c, _)| *c == clock))
                    .flatten()
                    .map(|(_, s)| s.as_slice());
                let held = || {
                    (kept.shards.iter())
                        .flat_map(|s| s.kept_states())
                        .find(|&(q, c, _)| q == p && c == clock)
                        .map(|(_, _, s)| s)
                };
                own.or_else(held).map(|s| (p, s))
            })
            .collect();
        let gathered = self.all_gather_bytes(&encode_states(&given))?;
        let mut states: Vec<Option<Vec<u8>>> = vec![None; self.shared.world.processes];
        for (from, part) in gathered.iter().enumerate() {
            let decoded = decode_states(part).ok_or_else(|| {
                Error::failed(
                    "recovery",
                    format!("process {from} sent unreadable application states"),
                )
            })?;
            for (p, state) in decoded {
                if let Some(slot) = states.get_mut(p as usize) {
                    *slot = Some(state);
                }
            }
        }
        let states = (states.into_iter().enumerate())
            .map(|(p, s)| {
                s.ok_or_else(|| {
                    Error::failed(
                        "recovery",
                        format!(
                            "process {}, chosen to give process {p}'s state at clock {clock}, \
                             did not",
                            choice.states_from[p]
                        ),
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        self.runs.start_clock = clock;
        self.runs.resumed = true;
        tracing::info!(
            "recovery: the cluster goes on from clock {clock} ({}), from the replicated shards",
            dir_name(clock)
        );
        Ok(Some(Recovered { clock, states }))
    }

    /// The rows of the copies `rows_from` places on this process, among `shards`, at
    /// `clock`, as batches for their home shards (at least one, possibly empty, per
    /// shard); `Err` naming the copy that could not give them.
    fn rows_of_copies(
        &self,
        shards: &mut [Shard],
        rows_from: &[(ProcessId, bool)],
        clock: Clock,
    ) -> std::result::Result<ShardBatches, String> {
        let mut batches = ShardBatches::new(self.shared.world.total_shards());
        let tables = self.registry.tables();
        let rank = self.shared.process;
        for (s, &(p, backup)) in rows_from.iter().enumerate() {
            if p != rank {
                continue;
            }
            let s = s as u32;
            let holder = shards.iter_mut().find(|k| {
                (k.copies().iter()).any(|c| c.shard == s && c.backup == backup && c.gives(clock))
            });
            let Some(holder) = holder else {
                return Err(format!(
                    "this process holds no copy of shard {s} at {clock}"
                ));
            };
            let bytes = holder.part_at(s, backup, clock)?;
            let sizes = |t: u32| {
                let m = tables.get(t as usize)?;
                Some((m.row_bytes(), m.state_bytes()))
            };
            // Back to the shard they were on: the processes place rows again as the failed
            // cluster did (the same pattern), so that no row moves (which the backups
            // would not follow).
            rows_part::read(&bytes[..], sizes, |item| match item {
                Item::Row(key, row) => batches.push(s as usize, key, row),
                Item::State(key, state) => batches.push_state(s as usize, key, state),
            })
            .map_err(|e| format!("shard {s}'s copy at clock {clock}: {e}"))?;
        }
        Ok(batches)
    }

    /// After this cluster failed: keeps its `shards` in its [`Recovery`] when the cause
    /// was a lost process and the shards are replicated; drops them otherwise.
    pub(super) fn keep_after_failure(&self, shards: Vec<Shard>) {
        let Some(recovery) = &self.recovery else {
            return;
        };
        let lost = matches!(self.shared.check(), Err(e) if e.lost_process().is_some());
        if lost && self.config.shard_replicas > 1 && !shards.is_empty() {
            tracing::info!(
                "process {}: keeping its {} shard(s) and their backups to go on from",
                self.shared.process,
                shards.len()
            );
            recovery.keep_shards(shards);
        }
    }
}

/// States, each a process's, as one message: a `u64` count, then each as a `u64` process,
/// a `u64` length and its bytes (little-endian).
fn encode_states(states: &[(ProcessId, &[u8])]) -> Vec<u8> {
    let mut out = (states.len() as u64).to_le_bytes().to_vec();
    for (p, s) in states {
        out.extend_from_slice(&u64::from(*p).to_le_bytes());
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s);
    }
    out
}

/// [`encode_states`]' inverse; `None` for bytes it did not write.
fn decode_states(bytes: &[u8]) -> Option<Vec<(ProcessId, Vec<u8>)>> {
    let mut at = 0usize;
    let mut next = |n: usize| -> Option<&[u8]> {
        let head = bytes.get(at..at.checked_add(n)?)?;
        at += n;
        Some(head)
    };
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    let count = word(next(8)?);
    let mut states = Vec::new();
    for _ in 0..count {
        let p = ProcessId::try_from(word(next(8)?)).ok()?;
        let len = usize::try_from(word(next(8)?)).ok()?;
        states.push((p, next(len)?.to_vec()));
    }
    (at == bytes.len()).then_some(states)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_decode_as_encoded_and_refuse_other_bytes() {
        let (a, b) = (vec![1u8, 2, 3], vec![9u8; 20]);
        let states: Vec<(ProcessId, &[u8])> = vec![(2, &a), (0, &[]), (1, &b)];
        let bytes = encode_states(&states);
        let want: Vec<(ProcessId, Vec<u8>)> =
            states.iter().map(|(p, s)| (*p, s.to_vec())).collect();
        assert_eq!(decode_states(&bytes), Some(want));
        assert_eq!(decode_states(&bytes[..bytes.len() - 1]), None);
        assert_eq!(decode_states(&[]), None);
        let mut huge = 1u64.to_le_bytes().to_vec();
        huge.extend_from_slice(&0u64.to_le_bytes());
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(decode_states(&huge), None);
    }
}
