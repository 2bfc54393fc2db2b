//! Which clock the next cluster goes on from after a loss, and which copy of each shard
//! gives its rows ([`choose`]): a pure function of what every process kept
//! ([`Inventory`]), computed alike by every process from the same all-gather.
//!
//! The clock is the newest iteration's end (a clock whose applications' states some
//! process kept, `Cluster::keep_state`) at which every shard has a copy that can give its
//! rows: a copy gives them where it is, or at its run's start through its undo log. The
//! argument that one exists (`docs/replication.md`, "Recovery from the replicas"): no
//! shard applies a clock of run `k + 1` before every shard has ended run `k` with every
//! backup acked, so when any copy's log starts at run `k + 1`'s start, every copy is at
//! least there, and one that has not started run `k + 1` is exactly there.
//!
//! It knows clocks and copies; not how they are gathered nor how rows are restored.

use crate::ids::{Clock, ProcessId, ShardId};
use crate::server::CopyAt;
use serde::{Deserialize, Serialize};

/// What one process kept of the failed cluster: the shard copies it holds and the
/// application states, each a process's at a clock (its own, and those of the processes
/// whose first shard it backs up).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Inventory {
    /// The copies, each shard itself or a backup it kept.
    pub(crate) copies: Vec<CopyAt>,
    /// The application states it holds: whose, and at which clock.
    pub(crate) states: Vec<(ProcessId, Clock)>,
}

impl Inventory {
    /// Whether it kept nothing (a process that was not in the failed cluster, or none
    /// failed).
    pub(crate) fn is_empty(&self) -> bool {
        self.copies.is_empty() && self.states.is_empty()
    }
}

/// The choice every process makes alike: the clock, the process that gives each shard's
/// rows (and whether from a backup), and the process that gives each process's
/// application state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Choice {
    /// The clock the cluster goes on from.
    pub(crate) clock: Clock,
    /// Per shard (by global id): the process giving its rows and whether its copy is a
    /// backup.
    pub(crate) rows_from: Vec<(ProcessId, bool)>,
    /// Per process (by rank): the process giving its application state.
    pub(crate) states_from: Vec<ProcessId>,
}

/// The choice for a cluster of `shards` shards in all, from every process's
/// `inventories` (in rank order): `Ok(None)` when nothing was kept or no iteration
/// ended before the loss (the run starts from the beginning); `Err` naming the shards
/// with no copy at any kept clock.
pub(crate) fn choose(shards: usize, inventories: &[Inventory]) -> Result<Option<Choice>, String> {
    let mut clocks: Vec<Clock> = (inventories.iter())
        .flat_map(|i| i.states.iter().map(|(_, c)| *c))
        .collect();
    clocks.sort_unstable();
    clocks.dedup();
    let Some(&newest) = clocks.last() else {
        return Ok(None);
    };
    let mut missing = Vec::new();
    for &clock in clocks.iter().rev() {
        let Some(states_from) = states_at(inventories, clock) else {
            continue; // some process's state at it was lost
        };
        match rows_at(shards, inventories, clock) {
            Ok(rows_from) => {
                return Ok(Some(Choice {
                    clock,
                    rows_from,
                    states_from,
                }));
            }
            Err(shards) if missing.is_empty() => missing = shards,
            Err(_) => {}
        }
    }
    if missing.is_empty() {
        // No clock has every process's state: the loss came before the first was kept
        // everywhere.
        return Ok(None);
    }
    let copies: Vec<String> = inventories
        .iter()
        .enumerate()
        .flat_map(|(p, i)| i.copies.iter().map(move |c| describe(p, c)))
        .collect();
    Err(format!(
        "no kept clock ({}) has a copy of every shard: shard(s) {} have none at the newest \
         with every process's state (the newest kept: {newest}); the copies kept: {}",
        list(&clocks),
        list(&missing),
        copies.join(", ")
    ))
}

/// Per process, the lowest rank holding its state at `clock`; `None` if some process's
/// is held by nobody.
fn states_at(inventories: &[Inventory], clock: Clock) -> Option<Vec<ProcessId>> {
    (0..inventories.len() as ProcessId)
        .map(|p| {
            let holder = inventories
                .iter()
                .position(|i| i.states.contains(&(p, clock)));
            holder.map(|h| h as ProcessId)
        })
        .collect()
}

/// Per shard, the process whose copy gives its rows at `clock` (its own primary first,
/// then the lowest rank's backup), or the shards none gives.
fn rows_at(
    shards: usize,
    inventories: &[Inventory],
    clock: Clock,
) -> Result<Vec<(ProcessId, bool)>, Vec<ShardId>> {
    let mut from = Vec::with_capacity(shards);
    let mut missing = Vec::new();
    for s in 0..shards as ShardId {
        let find = |backup: bool| {
            inventories.iter().position(|i| {
                (i.copies.iter()).any(|c| c.shard == s && c.backup == backup && c.gives(clock))
            })
        };
        match find(false)
            .map(|p| (p, false))
            .or(find(true).map(|p| (p, true)))
        {
            Some((p, backup)) => from.push((p as ProcessId, backup)),
            None => missing.push(s),
        }
    }
    match missing.is_empty() {
        true => Ok(from),
        false => Err(missing),
    }
}

fn describe(p: usize, c: &CopyAt) -> String {
    let what = if c.backup { "backup of shard" } else { "shard" };
    let base = c
        .base
        .map_or_else(String::new, |b| format!(", run from {b}"));
    format!("{what} {} on process {p} at {}{base}", c.shard, c.at)
}

fn list<T: ToString>(xs: &[T]) -> String {
    xs.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(shard: ShardId, backup: bool, at: Clock, base: Option<Clock>) -> CopyAt {
        CopyAt {
            shard,
            backup,
            at,
            base,
        }
    }

    /// Three processes of one shard each, two copies of each (shard s backed up on
    /// process s + 1), process 2 lost: process 0 holds shard 0 and the backup of 2,
    /// process 1 shard 1 and the backup of 0, process 2 nothing (its replacement). Each
    /// survivor holds, at `clocks`, its own state and that of the process whose first
    /// shard it backs up.
    fn lost_2(at: [Clock; 3], base: [Option<Clock>; 3], clocks: &[Clock]) -> Vec<Inventory> {
        let inv = |copies: Vec<CopyAt>, whose: [ProcessId; 2]| Inventory {
            copies,
            states: (clocks.iter())
                .flat_map(|&c| whose.map(|p| (p, c)))
                .collect(),
        };
        vec![
            inv(
                vec![
                    copy(0, false, at[0], base[0]),
                    copy(2, true, at[2], base[2]),
                ],
                [0, 2],
            ),
            inv(
                vec![
                    copy(1, false, at[1], base[1]),
                    copy(0, true, at[0], base[0]),
                ],
                [1, 0],
            ),
            Inventory::default(),
        ]
    }

    #[test]
    fn mid_run_every_copy_goes_back_to_the_runs_start() {
        // Run from clock 5; shards at 7, 8 and 7 (the lost process's last clock reached
        // shard 1 alone).
        let inv = lost_2([7, 8, 7], [Some(5); 3], &[3, 5]);
        let got = choose(3, &inv).unwrap().unwrap();
        assert_eq!(got.clock, 5);
        assert_eq!(got.rows_from, vec![(0, false), (1, false), (0, true)]);
        assert_eq!(got.states_from, vec![0, 1, 0]);
    }

    #[test]
    fn at_a_run_barrier_the_copies_that_did_not_start_the_next_run_are_where_they_are() {
        // Shard 1 applied the first clock of the run from 8; the others had not.
        let inv = lost_2([8, 9, 8], [Some(5), Some(8), Some(5)], &[5, 8]);
        assert_eq!(choose(3, &inv).unwrap().unwrap().clock, 8);
        // Without the states of clock 8 (the loss came before they were kept), shard 1
        // cannot go back two runs: refused, naming it.
        let inv = lost_2([8, 9, 8], [Some(5), Some(8), Some(5)], &[5]);
        let e = choose(3, &inv).unwrap_err();
        assert!(e.contains("shard(s) 1 have none"), "{e}");
    }

    #[test]
    fn nothing_kept_or_no_iteration_ended_starts_from_the_beginning() {
        assert_eq!(choose(3, &vec![Inventory::default(); 3]), Ok(None));
        assert_eq!(choose(3, &lost_2([2, 2, 2], [Some(1); 3], &[])), Ok(None));
    }

    #[test]
    fn a_shard_with_no_surviving_copy_is_named() {
        let mut inv = lost_2([7, 7, 7], [Some(5); 3], &[5]);
        inv[0].copies.pop(); // the only backup of shard 2
        let e = choose(3, &inv).unwrap_err();
        assert!(e.contains("shard(s) 2 have none"), "{e}");
        assert!(
            e.contains("backup of shard 0 on process 1 at 7, run from 5"),
            "{e}"
        );
    }

    #[test]
    fn the_newest_clock_every_shard_gives_is_taken_and_a_primary_before_a_backup() {
        // Every copy at 8 with its log from 8 (nothing of that run applied yet).
        let inv = lost_2([8, 8, 8], [Some(8); 3], &[5, 8]);
        let got = choose(3, &inv).unwrap().unwrap();
        assert_eq!(got.clock, 8);
        assert_eq!(got.rows_from[0], (0, false));
        // Process 0's own states lost with it: process 1 gives them; process 2's were
        // only on process 0.
        let mut inv = inv;
        inv[0].states.retain(|(p, _)| *p == 2);
        assert_eq!(choose(3, &inv).unwrap().unwrap().states_from, vec![1, 1, 0]);
        // A process's state at 8 held by nobody: 5 is the newest with everyone's.
        inv[0].states.retain(|&(p, c)| !(p == 2 && c == 8));
        let e = choose(3, &inv).unwrap_err();
        assert!(e.contains("have none at the newest"), "{e}");
    }
}
