//! The hwloc adapter (feature `hwloc`): turns an `hwlocality` topology — this machine's, or
//! one built from an hwloc *synthetic* description — into the plain [`Topology`]. Nothing
//! else in the crate sees hwloc types; `bind.rs` uses hwloc only for memory binding.
//!
//! The mapping: zones are hwloc's NUMA nodes in logical order, each with the cores whose
//! cpusets intersect the node's cpuset (a core's PUs by OS index). NUMA nodes with no core
//! (memory-only nodes) are left out, since a zone needs a core. A machine hwloc reports
//! with no NUMA node at all is one zone holding every core. Distances come from hwloc's
//! NUMA latency matrix when it has one covering every zone; otherwise they are left to
//! [`Topology::new`] (10 local, 20 remote).

use hwlocality::object::distance::DistancesKind;
use hwlocality::object::types::ObjectType;
use hwlocality::object::TopologyObject;
use hwlocality::Topology as HwlocTopology;

use super::{Core, Topology, TopologySource, Zone};
use crate::error::{Error, Result};

/// hwloc's view of the machine this process runs on, restricted to the CPUs the calling
/// thread may run on (its affinity mask, as `available_parallelism` counts them).
pub(super) fn this_machine() -> Result<Topology> {
    let hw = HwlocTopology::new().map_err(|e| {
        Error::config(
            "topology",
            format!("hwloc could not probe this machine: {e}"),
        )
    })?;
    // Where the affinity cannot be read, keep every PU hwloc reports.
    let allowed = super::bind::current_affinity().ok();
    convert(&hw, allowed.as_deref(), TopologySource::ThisMachine)
}

/// The topology an hwloc synthetic description (`"pack:2 numa:1 core:4 pu:1"`) describes.
pub(super) fn synthetic(desc: &str) -> Result<Topology> {
    let bad = |why: &dyn std::fmt::Display| {
        Error::config(
            "topology",
            format!("bad hwloc synthetic description {desc:?}: {why}"),
        )
    };
    let hw = HwlocTopology::builder()
        .from_synthetic(desc)
        .map_err(|e| bad(&e))?
        .build()
        .map_err(|e| bad(&e))?;
    convert(&hw, None, TopologySource::Synthetic(desc.to_owned()))
}

/// OS indices of the PUs in `obj`'s cpuset, kept only if `allowed` (when given) has them.
fn pus_of(obj: &TopologyObject, allowed: Option<&[u32]>) -> Vec<u32> {
    let Some(set) = obj.cpuset() else {
        return Vec::new();
    };
    set.iter_set()
        .filter_map(|i| u32::try_from(usize::from(i)).ok())
        .filter(|pu| allowed.is_none_or(|a| a.contains(pu)))
        .collect()
}

/// Builds the plain value from an hwloc topology (see the module docs for the mapping).
fn convert(
    hw: &HwlocTopology,
    allowed: Option<&[u32]>,
    source: TopologySource,
) -> Result<Topology> {
    // Cores; a topology without Core objects (e.g. a synthetic `pack:2 pu:4`) has one
    // core per PU.
    let mut core_objs: Vec<&TopologyObject> = hw.objects_with_type(ObjectType::Core).collect();
    if core_objs.is_empty() {
        core_objs = hw.objects_with_type(ObjectType::PU).collect();
    }
    let numa: Vec<&TopologyObject> = hw.objects_with_type(ObjectType::NUMANode).collect();

    let cores_in = |node: Option<&TopologyObject>| -> Vec<Core> {
        core_objs
            .iter()
            .filter(|core| match node {
                None => true,
                Some(node) => match (node.cpuset(), core.cpuset()) {
                    (Some(n), Some(c)) => n.intersects(c),
                    _ => false,
                },
            })
            .map(|core| Core {
                pus: pus_of(core, allowed),
            })
            .filter(|core| !core.pus.is_empty())
            .collect()
    };

    // (zone, its hwloc NUMA object) for every node with a core we may use.
    let mut zones: Vec<(Zone, Option<&TopologyObject>)> = Vec::new();
    if numa.is_empty() {
        zones.push((
            Zone {
                os_index: 0,
                cores: cores_in(None),
            },
            None,
        ));
    } else {
        for &node in &numa {
            let cores = cores_in(Some(node));
            if !cores.is_empty() {
                let os_index = node.os_index().unwrap_or(node.logical_index());
                let os_index = u32::try_from(os_index).unwrap_or(u32::MAX);
                zones.push((Zone { os_index, cores }, Some(node)));
            }
        }
    }
    if zones.iter().all(|(z, _)| z.cores.is_empty()) {
        return Err(Error::config(
            "topology",
            "hwloc reports no core this process may run on",
        ));
    }

    let distances = numa_distances(hw, &zones);
    Topology::new(
        zones.into_iter().map(|(z, _)| z).collect(),
        distances,
        source,
    )
}

/// `zones × zones` distances from hwloc's NUMA latency matrix, or empty when hwloc has no
/// such matrix covering every zone.
fn numa_distances(hw: &HwlocTopology, zones: &[(Zone, Option<&TopologyObject>)]) -> Vec<Vec<u32>> {
    let Ok(matrices) =
        hw.distances_with_type(Some(DistancesKind::MEANS_LATENCY), ObjectType::NUMANode)
    else {
        return Vec::new();
    };
    for m in &matrices {
        let idx: Option<Vec<usize>> = zones
            .iter()
            .map(|(_, node)| node.and_then(|n| m.object_idx(n)))
            .collect();
        let Some(idx) = idx else { continue };
        let n = m.num_objects();
        let values = m.distances();
        return idx
            .iter()
            .map(|&a| {
                idx.iter()
                    .map(|&b| u32::try_from(values[a * n + b]).unwrap_or(u32::MAX))
                    .collect()
            })
            .collect();
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pus(t: &Topology) -> Vec<Vec<u32>> {
        t.zones().iter().map(|z| z.pus()).collect()
    }

    #[test]
    fn two_zones_of_four_single_pu_cores() {
        let desc = "pack:2 numa:1 core:4 pu:1";
        let t = synthetic(desc).unwrap();
        assert_eq!(t.source(), &TopologySource::Synthetic(desc.to_owned()));
        assert!(!t.is_this_machine());
        assert_eq!(t.zones().len(), 2);
        assert!(t.zones().iter().all(|z| z.cores.len() == 4));
        assert!(t
            .zones()
            .iter()
            .flat_map(|z| &z.cores)
            .all(|c| c.pus.len() == 1));
        assert_eq!(pus(&t), vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
        assert_eq!(
            t.zones().iter().map(|z| z.os_index).collect::<Vec<_>>(),
            vec![0, 1]
        );
        assert_eq!(t.distance(0, 0), 10);
        assert!(t.distance(0, 1) > t.distance(0, 0));
    }

    #[test]
    fn four_zones_of_two_two_pu_cores() {
        let t = synthetic("pack:1 numa:4 core:2 pu:2").unwrap();
        assert_eq!(t.zones().len(), 4);
        assert_eq!(t.cores(), 8);
        for (z, zone) in t.zones().iter().enumerate() {
            assert_eq!(zone.os_index, z as u32);
            assert_eq!(zone.cores.len(), 2);
            assert!(zone.cores.iter().all(|c| c.pus.len() == 2));
        }
        let all: Vec<u32> = pus(&t).concat();
        assert_eq!(all, (0..16).collect::<Vec<_>>());
    }

    #[test]
    fn synthetic_topologies_get_the_default_distances() {
        // A synthetic description carries no NUMA distance matrix: 10 local, 20 remote.
        let t = synthetic("pack:2 numa:1 core:1 pu:1").unwrap();
        assert_eq!(t.distance(1, 1), 10);
        assert_eq!(t.distance(1, 0), 20);
    }

    #[test]
    fn cores_without_core_objects_are_pus() {
        let t = synthetic("pack:2 pu:3").unwrap();
        assert_eq!(t.zones().len(), 1);
        assert_eq!(t.cores(), 6);
    }

    #[test]
    fn bad_description_is_rejected_naming_it() {
        let err = synthetic("pack:2 bogus:7").unwrap_err();
        let msg = err.to_string();
        assert!(matches!(
            err,
            Error::InvalidConfig {
                field: "topology",
                ..
            }
        ));
        assert!(msg.contains("pack:2 bogus:7"), "{msg}");
        assert!(msg.contains("hwloc"), "{msg}");
    }

    #[test]
    fn this_machine_counts_every_usable_pu() {
        let t = this_machine().unwrap();
        assert!(t.is_this_machine());
        assert!(!t.zones().is_empty());
        let n = std::thread::available_parallelism().unwrap().get();
        assert_eq!(pus(&t).concat().len(), n);
    }
}
