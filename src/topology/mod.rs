//! [`Topology`]: the machine as the NUMA planner sees it — memory zones (NUMA nodes), the
//! cores in each, and the relative distance between zones. A plain value: it is built
//! from hwloc (this machine, or an hwloc *synthetic* description for tests and dry runs;
//! `hwloc.rs`, behind the `hwloc` feature), or is the one-zone fallback where hwloc is
//! absent. The planner only ever sees this value; it never calls hwloc.
//!
//! This module describes machines; it binds nothing (binding is `bind.rs`).

pub(crate) mod bind;
#[cfg(feature = "hwloc")]
mod hwloc;

use crate::error::{Error, Result};

/// One core: the processing units (hardware threads) it has, by OS index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Core {
    /// OS indices of the core's processing units (what `sched_setaffinity` takes).
    pub pus: Vec<u32>,
}

/// One memory zone (NUMA node) and the cores closest to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zone {
    /// The zone's OS index (NUMA node number).
    pub os_index: u32,
    /// Its cores, in topology order.
    pub cores: Vec<Core>,
}

impl Zone {
    /// Every processing unit of the zone (OS indices), core by core: what a thread that
    /// may run anywhere in the zone is bound to.
    pub fn pus(&self) -> Vec<u32> {
        self.cores
            .iter()
            .flat_map(|c| c.pus.iter().copied())
            .collect()
    }
}

/// Where a [`Topology`] came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopologySource {
    /// hwloc's view of the machine this process runs on: binding to it takes effect.
    ThisMachine,
    /// An hwloc synthetic description (`"pack:2 numa:1 core:4 pu:1"`): for planning only;
    /// nothing is ever bound to it.
    Synthetic(String),
    /// No hwloc: one zone holding every CPU this process may use; nothing is bound.
    Fallback,
}

/// The machine as the NUMA planner sees it (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    zones: Vec<Zone>,
    /// `distances[a][b]`: relative cost of zone `a` reaching zone `b`'s memory (10 for
    /// local by convention, as ACPI SLIT and hwloc report it).
    distances: Vec<Vec<u32>>,
    source: TopologySource,
}

impl Topology {
    /// A topology from its parts. `distances` must be `zones × zones` (or empty: 10 within
    /// a zone and 20 between zones); every zone must have at least one core.
    pub fn new(zones: Vec<Zone>, distances: Vec<Vec<u32>>, source: TopologySource) -> Result<Self> {
        if zones.is_empty() || zones.iter().any(|z| z.cores.is_empty()) {
            return Err(Error::config(
                "topology",
                "every zone needs at least one core",
            ));
        }
        if zones
            .iter()
            .flat_map(|z| &z.cores)
            .any(|c| c.pus.is_empty())
        {
            return Err(Error::config(
                "topology",
                "every core needs a processing unit",
            ));
        }
        let n = zones.len();
        let distances = if distances.is_empty() {
            (0..n)
                .map(|a| (0..n).map(|b| if a == b { 10 } else { 20 }).collect())
                .collect()
        } else {
            distances
        };
        if distances.len() != n || distances.iter().any(|row| row.len() != n) {
            return Err(Error::config(
                "topology",
                format!("distances must be {n} x {n}"),
            ));
        }
        Ok(Topology {
            zones,
            distances,
            source,
        })
    }

    /// `zones` zones of `cores` single-PU cores each, numbered in order: a stand-in for
    /// tests that need no hwloc.
    pub fn uniform(zones: usize, cores: usize) -> Result<Self> {
        let name = format!("uniform: {zones} zones x {cores} cores");
        let mut pu = 0;
        let zones = (0..zones)
            .map(|z| Zone {
                os_index: z as u32,
                cores: (0..cores)
                    .map(|_| {
                        pu += 1;
                        Core { pus: vec![pu - 1] }
                    })
                    .collect(),
            })
            .collect();
        Topology::new(zones, Vec::new(), TopologySource::Synthetic(name))
    }

    /// The one-zone topology of a machine without hwloc: every CPU this process may run on
    /// (as `std::thread::available_parallelism` counts them) in one zone.
    pub fn fallback() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let zone = Zone {
            os_index: 0,
            cores: (0..cpus as u32).map(|pu| Core { pus: vec![pu] }).collect(),
        };
        Topology::new(vec![zone], Vec::new(), TopologySource::Fallback).expect("one core at least")
    }

    /// hwloc's view of the machine this process runs on ([`TopologySource::ThisMachine`]):
    /// one zone per NUMA node that has cores, with the cores and PUs the calling thread
    /// may run on (its affinity mask), and hwloc's NUMA distance matrix when it has one.
    /// Memory-only NUMA nodes are left out; a machine with no NUMA node is one zone.
    ///
    /// Fails with [`Error::InvalidConfig`] when hwloc cannot probe the machine or is not
    /// compiled in (the `hwloc` feature); [`Topology::detect`] falls back instead.
    pub fn this_machine() -> Result<Self> {
        #[cfg(feature = "hwloc")]
        {
            hwloc::this_machine()
        }
        #[cfg(not(feature = "hwloc"))]
        {
            Err(Error::config(
                "topology",
                "this machine's topology needs the `hwloc` feature, which this build lacks",
            ))
        }
    }

    /// The machine an hwloc synthetic description describes
    /// ([`TopologySource::Synthetic`]), such as `"pack:2 numa:1 core:4 pu:1"` (2 zones of
    /// 4 single-PU cores) or `"pack:1 numa:4 core:2 pu:2"`: for planning and tests only,
    /// nothing is ever bound to it. PUs and zones are numbered in order.
    ///
    /// A description hwloc rejects is an [`Error::InvalidConfig`] quoting it and hwloc's
    /// complaint; so is any description when the `hwloc` feature is off.
    pub fn synthetic(desc: &str) -> Result<Self> {
        #[cfg(feature = "hwloc")]
        {
            hwloc::synthetic(desc)
        }
        #[cfg(not(feature = "hwloc"))]
        {
            Err(Error::config(
                "topology",
                format!(
                    "synthetic topology {desc:?} needs the `hwloc` feature, which this build lacks"
                ),
            ))
        }
    }

    /// The topology to plan with on this machine: [`Topology::this_machine`], or
    /// [`Topology::fallback`] (one zone, nothing bound) when hwloc is not compiled in or
    /// cannot probe the machine. Never fails.
    pub fn detect() -> Self {
        Topology::this_machine().unwrap_or_else(|_| Topology::fallback())
    }

    /// The zones.
    pub fn zones(&self) -> &[Zone] {
        &self.zones
    }

    /// Relative distance from zone `a` to zone `b`'s memory (10 = local).
    pub fn distance(&self, a: usize, b: usize) -> u32 {
        self.distances[a][b]
    }

    /// Where this topology came from.
    pub fn source(&self) -> &TopologySource {
        &self.source
    }

    /// Whether binding threads and memory to this topology takes effect: only hwloc's view
    /// of this very machine (binding on a synthetic topology silently does nothing).
    pub fn is_this_machine(&self) -> bool {
        self.source == TopologySource::ThisMachine
    }

    /// Total cores.
    pub fn cores(&self) -> usize {
        self.zones.iter().map(|z| z.cores.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detect_is_this_machine_with_every_usable_pu() {
        let t = Topology::detect();
        let n = std::thread::available_parallelism().unwrap().get();
        let pus: usize = t
            .zones()
            .iter()
            .flat_map(|z| &z.cores)
            .map(|c| c.pus.len())
            .sum();
        assert!(!t.zones().is_empty());
        assert_eq!(pus, n);
        if cfg!(feature = "hwloc") {
            assert_eq!(t.source(), &TopologySource::ThisMachine);
            assert!(t.is_this_machine());
        } else {
            assert_eq!(t, Topology::fallback());
        }
    }

    #[test]
    fn synthetic_descriptions_need_hwloc() {
        let r = Topology::synthetic("pack:2 numa:1 core:4 pu:1");
        if cfg!(feature = "hwloc") {
            assert_eq!(r.unwrap().zones().len(), 2);
        } else {
            let msg = r.unwrap_err().to_string();
            assert!(msg.contains("`hwloc` feature"), "{msg}");
            assert!(msg.contains("pack:2 numa:1 core:4 pu:1"), "{msg}");
        }
    }

    #[test]
    fn new_fills_default_distances_and_checks_shapes() {
        let t = Topology::uniform(3, 2).unwrap();
        assert_eq!(t.distance(1, 1), 10);
        assert_eq!(t.distance(0, 2), 20);
        assert_eq!(t.cores(), 6);
        let zone = t.zones()[0].clone();
        assert!(Topology::new(vec![zone], vec![vec![10, 20]], TopologySource::Fallback).is_err());
    }
}
