//! What the apps' tuning trainers (`dnn::tune`, `mf::tune`) share: the branches alive
//! on a cluster, making one live, freeing one (the store keeps one branch live, so
//! another takes its place first), and measurements agreed over the cluster so that
//! every process's tuner sees the same numbers and takes the same decisions.

use std::collections::BTreeSet;

use iterstore::{BranchId as StoreBranch, BranchStates, Cluster};
use iterstore_tune::BranchId;

use crate::AppError;

/// The branches a tuning has alive, branch 0 (the initial state) first.
pub(crate) struct Alive(BTreeSet<u32>);

impl Alive {
    /// Only branch 0.
    pub(crate) fn new() -> Self {
        Self(BTreeSet::from([0]))
    }

    /// Branch `b` was forked.
    pub(crate) fn forked(&mut self, b: BranchId) {
        self.0.insert(b);
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
