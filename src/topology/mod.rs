//! [`Topology`]: the machine as the NUMA planner sees it — memory zones (NUMA nodes), the
//! cores in each, and the relative distance between zones. A plain value: it is built
//! from hwloc (this machine, or an hwloc *synthetic* description for tests and dry runs;
//! `hwloc.rs`, behind the `hwloc` feature), or is the one-zone fallback where hwloc is
//! absent. The planner only ever sees this value; it never calls hwloc.
//!
//! This module describes machines; it binds nothing (binding is `bind.rs`).

use crate::{Error, Result};

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
