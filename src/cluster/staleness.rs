//! [`Cluster::set_staleness`]: the staleness bound of the next runs, changed between runs
//! (a branch's setting: [`Cluster::switch`] installs the branch's).
//!
//! The shards serve exact snapshots whatever the bound, and the plan does not depend on
//! it: only the workers' freshness checks and the specialized worker's SSP bookkeeping
//! do, and they read it when a run starts. So a bounded staleness (BSP included) may
//! change between runs; asynchrony (`Staleness::Unbounded`) may not be entered or left,
//! because the shards step update rules on arrival only in a cluster started
//! asynchronous.

use super::Cluster;
use crate::consistency::Staleness;
use crate::error::{Error, Result};

impl Cluster {
    /// Runs from now on read with `staleness`: a collective between runs, every process
    /// alike (a difference fails every process with [`Error::Disagreement`]). It is the
    /// live branch's setting: a fork copies it, a switch installs the other branch's.
    /// Refused when it enters or leaves [`Staleness::Unbounded`] (see the module docs).
    ///
    /// ```
    /// use iterstore::{Cluster, Config, Staleness};
    ///
    /// # fn main() -> iterstore::Result<()> {
    /// let mut cluster = Cluster::start(Config::new(2))?;
    /// cluster.set_staleness(Staleness::Bounded(2))?;
    /// assert_eq!(cluster.config().staleness, Staleness::Bounded(2));
    /// assert!(cluster.set_staleness(Staleness::Unbounded).is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_staleness(&mut self, staleness: Staleness) -> Result<()> {
        self.check()?;
        self.agree(&[("staleness", &format!("{staleness:?}"))])?;
        self.install_staleness(staleness)
    }

    /// Installs `staleness` (agreed on) in this process; see
    /// [`set_staleness`](Self::set_staleness).
    pub(super) fn install_staleness(&mut self, staleness: Staleness) -> Result<()> {
        let now = self.config.staleness;
        if now == staleness {
            return Ok(());
        }
        if (now == Staleness::Unbounded) != (staleness == Staleness::Unbounded) {
            return Err(Error::config(
                "staleness",
                format!(
                    "{now:?} cannot become {staleness:?} between runs (asynchrony is chosen \
                     when the cluster starts: its shards step update rules on arrival)"
                ),
            ));
        }
        self.config.staleness = staleness;
        self.shared.set_staleness(staleness);
        self.unbuild_workers();
        Ok(())
    }
}
