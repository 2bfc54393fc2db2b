//! How worker threads are bound to CPUs once the NUMA planner has placed them
//! ([`Pinning`]), and the CPU sets that follows from a placement ([`bound_cpus`]).
//!
//! IterStore pins each worker to one core. That buys locality only across zones: within
//! a zone every core reaches the same memory, and a worker pinned to a core cannot leave
//! it when another job on the machine is running there (MF's virtual mode took 16.2 ms
//! an iteration pinned against 11.3 ms unpinned with a load of 5.6 on 2 CPUs). So by
//! default a worker may run on any CPU of its zone, and on a machine of one zone nothing
//! is bound at all; pinning to cores stays available for dedicated machines.

use crate::numa::WorkerPlace;
use crate::topology::Topology;

/// How worker threads are bound to CPUs in specialized modes with NUMA placement on
/// ([`Config::pinning`](crate::Config::pinning)). Shard and communication threads are
/// always bound to a zone's CPUs, and only when the workers are bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pinning {
    /// Each worker may run on any CPU of the zone it is planned in, so the scheduler can
    /// move it off a core another job is using while its memory stays local. On a
    /// machine of one zone nothing is bound (there is nothing to keep local).
    #[default]
    Zones,
    /// Each worker is bound to the CPUs of its own planned core (IterStore's pinning):
    /// for a machine the run has to itself.
    Cores,
}

impl std::str::FromStr for Pinning {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "zones" => Ok(Pinning::Zones),
            "cores" => Ok(Pinning::Cores),
            _ => Err(format!("pinning '{s}' is neither 'zones' nor 'cores'")),
        }
    }
}

impl std::fmt::Display for Pinning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Pinning::Zones => "zones",
            Pinning::Cores => "cores",
        })
    }
}

impl Pinning {
    /// Whether threads placed on `topology` are bound at all under this pinning: not on
    /// a machine of one zone when pinning to zones (the zone is every CPU).
    pub(crate) fn binds(self, topology: &Topology) -> bool {
        self == Pinning::Cores || topology.zones().len() > 1
    }
}

/// Per worker: the CPUs its thread is bound to under `pinning` — its planned core's, or
/// every CPU of its planned zone.
pub(crate) fn bound_cpus(
    topology: &Topology,
    places: &[WorkerPlace],
    pinning: Pinning,
) -> Vec<Vec<u32>> {
    places
        .iter()
        .map(|p| match pinning {
            Pinning::Cores => p.pus.clone(),
            Pinning::Zones => topology.zones()[p.zone].pus(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numa::{place_workers, WorkerPlacement};

    #[test]
    fn zones_bind_a_worker_to_its_whole_zone_and_cores_to_its_core() {
        let topo = Topology::uniform(2, 4).unwrap();
        let places = place_workers(&topo, 6, WorkerPlacement::Spread);
        let zones = bound_cpus(&topo, &places, Pinning::Zones);
        let cores = bound_cpus(&topo, &places, Pinning::Cores);
        for (w, place) in places.iter().enumerate() {
            assert_eq!(zones[w], topo.zones()[place.zone].pus(), "worker {w}");
            assert_eq!(cores[w], place.pus, "worker {w}");
            assert_eq!(cores[w].len(), 1);
            assert_eq!(zones[w].len(), 4);
        }
        assert_ne!(
            zones[0], zones[1],
            "spread: workers 0 and 1 in different zones"
        );
    }

    #[test]
    fn one_zone_binds_nothing_unless_pinning_to_cores() {
        let one = Topology::uniform(1, 4).unwrap();
        let two = Topology::uniform(2, 2).unwrap();
        assert!(!Pinning::Zones.binds(&one));
        assert!(Pinning::Zones.binds(&two));
        assert!(Pinning::Cores.binds(&one));
        assert!(Pinning::Cores.binds(&two));
    }

    #[test]
    fn parses_and_prints_its_names() {
        for p in [Pinning::Zones, Pinning::Cores] {
            assert_eq!(p.to_string().parse::<Pinning>(), Ok(p));
        }
        assert!("core".parse::<Pinning>().unwrap_err().contains("'core'"));
        assert_eq!(Pinning::default(), Pinning::Zones);
    }
}
