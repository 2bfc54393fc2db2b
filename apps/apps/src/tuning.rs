//! What the apps' tuning trainers (`dnn::tune`, `mf::tune`) share: the branches alive
//! on a cluster, making one live, freeing one (the store keeps one branch live, so
//! another takes its place first), and measurements agreed over the cluster so that
//! every process's tuner sees the same numbers and takes the same decisions.

use std::collections::BTreeSet;

use iterstore::{BranchId as StoreBranch, BranchStates, Cluster, Staleness};
use iterstore_tune::{BranchId, Measured, Setting};

use crate::AppError;

/// The branches a tuning has alive, branch 0 (the initial state) first.
pub(crate) struct Alive(BTreeSet<u32>);

impl Alive {
    /// Only branch 0.
    pub(crate) fn new() -> Self {
        Self(BTreeSet::from([0]))
    }

    /// Forks `parent` on `cluster` and its per-worker states, gives the new branch the
    /// staleness `setting` names (if any), and returns its id.
    pub(crate) fn fork<S: Clone>(
        &mut self,
        cluster: &mut Cluster,
        states: &mut BranchStates<S>,
        parent: BranchId,
        setting: &Setting,
    ) -> Result<BranchId, AppError> {
        let id = cluster.fork(StoreBranch(parent))?;
        states.fork(StoreBranch(parent), id)?;
        self.0.insert(id.0);
        if let Some(s) = setting.get("staleness") {
            // A branch's staleness is set while it is live, and kept with it.
            live(cluster, id.0)?;
            cluster.set_staleness(Staleness::Bounded(s as u32))?;
        }
        Ok(id.0)
    }

    /// Frees `b` on `cluster` and its per-worker states; if it is live, the newest other
    /// branch alive becomes live first (the tuner never frees its last branch).
    pub(crate) fn free<S: Clone>(
        &mut self,
        cluster: &mut Cluster,
        states: &mut BranchStates<S>,
        b: BranchId,
    ) -> Result<(), AppError> {
        self.0.remove(&b);
        if cluster.live_branch() == StoreBranch(b) {
            let Some(&other) = self.0.iter().next_back() else {
                return Ok(());
            };
            live(cluster, other)?;
        }
        cluster.free(StoreBranch(b))?;
        states.free(StoreBranch(b));
        Ok(())
    }
}

/// Makes `b` the live branch of `cluster`.
pub(crate) fn live(cluster: &mut Cluster, b: BranchId) -> Result<(), AppError> {
    if cluster.live_branch() != StoreBranch(b) {
        cluster.switch(StoreBranch(b))?;
    }
    Ok(())
}

/// `local` seconds and `values` agreed over `cluster`: the slowest process's seconds and
/// the values summed, the same on every process.
pub(crate) fn agreed(
    cluster: &mut Cluster,
    local: f64,
    values: &[f64],
) -> Result<(f64, Vec<f64>), AppError> {
    let mut mine = Vec::with_capacity(values.len() + 1);
    mine.push(local);
    mine.extend_from_slice(values);
    let all = cluster.all_gather(&mine)?;
    let seconds = all.iter().map(|p| p[0]).fold(0.0, f64::max);
    let mut sums = vec![0.0; values.len()];
    for part in &all {
        for (s, v) in sums.iter_mut().zip(&part[1..]) {
            *s += v;
        }
    }
    Ok((seconds, sums))
}

/// A slice's per-mini-batch `(sum, count)` pairs of every worker (`per_worker`), summed
/// per tuner clock of `per_clock` mini-batches, agreed over `cluster`, as one
/// [`Measured`] per clock: `value((sum, count))`, the slice's seconds (`started` until
/// now, the slowest process's) shared evenly.
pub(crate) fn per_clock<'a>(
    cluster: &mut Cluster,
    started: std::time::Instant,
    per_worker: impl Iterator<Item = &'a [(f64, u64)]>,
    clocks: u64,
    per_clock: usize,
    value: impl Fn(f64, f64) -> f64,
) -> Result<Vec<Measured>, AppError> {
    let mut mine = vec![0.0; 2 * clocks as usize];
    for pairs in per_worker {
        for (i, &(sum, count)) in pairs.iter().enumerate() {
            mine[2 * (i / per_clock)] += sum;
            mine[2 * (i / per_clock) + 1] += count as f64;
        }
    }
    let (seconds, sums) = agreed(cluster, started.elapsed().as_secs_f64(), &mine)?;
    Ok(sums
        .chunks_exact(2)
        .map(|c| Measured {
            seconds: seconds / clocks as f64,
            value: value(c[0], c[1].max(1.0)),
        })
        .collect())
}

/// `value`, measured since `started`, as a [`Measured`] whose seconds are agreed over
/// `cluster` (the slowest process's; every process computed the same value).
pub(crate) fn measured(
    cluster: &mut Cluster,
    started: std::time::Instant,
    value: f64,
) -> Result<Measured, AppError> {
    let (seconds, _) = agreed(cluster, started.elapsed().as_secs_f64(), &[])?;
    Ok(Measured { seconds, value })
}
