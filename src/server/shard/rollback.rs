//! The agreed rollback clock (`docs/replication.md`, "Promotion on a loss", step 2): once
//! processes are lost, every surviving copy that goes on — each surviving primary, and
//! each surviving backup of a lost primary — reports its minimum clock, and the survivors
//! roll back to the least ([`agreed_clock`]), the last clock every copy has applied.
//! Copies differ by one clock at most (a worker sends `Clock(c)` to every shard before
//! `Clock(c + 1)`; only the lost process's last sends may have reached some and not
//! others), and the undo log goes back one clock at most (`undo`): a wider spread, or a
//! lost shard none of whose copies survives, is refused naming the shards.
//!
//! A pure function of the reports: gathering them over the survivors (an all-gather
//! through the lowest surviving rank) is not built, and nothing calls it yet. Backups of
//! surviving primaries are not consulted: they are sent their primary's state again.
//!
//! It knows the ring of backups (`World::backups_of`) and clocks; not how a copy rolls
//! back (`undo`) nor how it is promoted (`promotion`).

#![cfg_attr(
    not(test),
    expect(dead_code, reason = "promotion is not wired to the cluster yet")
)]

use crate::ids::{Clock, ProcessId, ShardId};
use crate::world::World;
use std::collections::BTreeMap;
use std::fmt;

/// Which copy of a shard reports: where it is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Holder {
    /// The shard itself, on its own process.
    Primary,
    /// Its backup, kept by this shard (on another process).
    BackupOn(ShardId),
}

/// One surviving copy's report: the copy of shard `shard` held as `holder` is at minimum
/// clock `clock` (a backup: the primary's minimum clock it applied up to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CopyClock {
    /// The shard it is a copy of.
    pub(crate) shard: ShardId,
    /// Where it is held.
    pub(crate) holder: Holder,
    /// Its minimum clock.
    pub(crate) clock: Clock,
}

impl fmt::Display for CopyClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.holder {
            Holder::Primary => write!(f, "shard {} at {}", self.shard, self.clock),
            Holder::BackupOn(k) => write!(
                f,
                "shard {}'s backup on shard {k} at {}",
                self.shard, self.clock
            ),
        }
    }
}

/// The clock the survivors of losing the processes `lost` roll back to, in a cluster
/// shaped `world` with `replicas` copies of each shard, from the `reports` of the
/// surviving copies: the least minimum clock over every surviving primary and every
/// surviving backup of a lost shard (other backups' reports are passed over). `Err`
/// naming the shards when a shard of a surviving process did not report, a lost shard
/// has no surviving backup that did, a report is from a lost process, names a backup the
/// ring does not place there or comes twice, or the clocks differ by more than one.
pub(crate) fn agreed_clock(
    world: World,
    replicas: usize,
    lost: &[ProcessId],
    reports: &[CopyClock],
) -> Result<Clock, String> {
    let shards = world.processes * world.shards;
    let process_of = |s: ShardId| s as usize / world.shards;
    let is_lost = |s: ShardId| lost.contains(&(process_of(s) as ProcessId));
    if let Some(p) = lost.iter().find(|&&p| p as usize >= world.processes) {
        return Err(format!(
            "process {p} is not in a cluster of {}",
            world.processes
        ));
    }
    if lost.is_empty() {
        return Err("no process was lost: there is nothing to roll back for".into());
    }
    let mut seen: BTreeMap<(ShardId, Holder), Clock> = BTreeMap::new();
    let mut counted: Vec<CopyClock> = Vec::new();
    for r in reports {
        let holder = match r.holder {
            Holder::Primary => r.shard,
            Holder::BackupOn(k) => k,
        };
        if r.shard as usize >= shards || holder as usize >= shards {
            return Err(format!("{r}: no such shard in a cluster of {shards}"));
        }
        if is_lost(holder) {
            return Err(format!("{r}: its process {} was lost", process_of(holder)));
        }
        if let Holder::BackupOn(k) = r.holder {
            if !world.backups_of(r.shard, replicas).contains(&k) {
                return Err(format!(
                    "{r}: shard {k} keeps no backup of shard {}",
                    r.shard
                ));
            }
        }
        if seen.insert((r.shard, r.holder), r.clock).is_some() {
            return Err(format!("{r}: reported twice"));
        }
        // A backup of a surviving primary is sent its primary's state again.
        if r.holder == Holder::Primary || is_lost(r.shard) {
            counted.push(*r);
        }
    }
    for s in 0..shards as ShardId {
        let reported = match is_lost(s) {
            false => seen.contains_key(&(s, Holder::Primary)),
            true => counted.iter().any(|r| r.shard == s),
        };
        if !reported {
            return Err(match is_lost(s) {
                false => format!("shard {s} (process {}) did not report", process_of(s)),
                true => format!(
                    "shard {s} of lost process {} has no surviving backup that reported",
                    process_of(s)
                ),
            });
        }
    }
    let least = counted.iter().min_by_key(|r| r.clock).copied();
    let most = counted.iter().max_by_key(|r| r.clock).copied();
    let (Some(least), Some(most)) = (least, most) else {
        return Err("no copy reported".into());
    };
    if most.clock - least.clock > 1 {
        let at = |clock: Clock| {
            let copies = counted.iter().filter(|r| r.clock == clock);
            copies
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(format!(
            "the surviving copies differ by more than one clock ({}; {}): the undo log goes \
             back one",
            at(least.clock),
            at(most.clock)
        ));
    }
    Ok(least.clock)
}
