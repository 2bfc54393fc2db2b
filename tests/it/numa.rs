//! NUMA placement through the public API: worker threads pinned to the cores the plan
//! names on this machine (read back from the kernel) or, by default, to their zone's CPUs
//! (on one zone: not at all), nothing bound on a synthetic topology, and a plan whose expected remote accesses are a fraction of hash placement
//! with unpinned threads.

use crate::util::within;
use iterstore::machine::{Pinning, Topology, WorkerPlacement};
use iterstore::{Cluster, Config, Mode, Specializations};

/// With `Pinning::Cores`, on this machine's own topology the workers are bound to their
/// planned cores, from the start and in every run.
#[test]
fn workers_run_on_the_cores_the_plan_names() {
    within(30, || {
        let topology = Topology::detect();
        let config = Config::new(2)
            .with_mode(Mode::Virtual)
            .with_pinning(Pinning::Cores);
        let mut cluster = Cluster::start(config).unwrap();
        let numa = cluster.numa().expect("numa applies in virtual mode");
        assert_eq!(numa.zones, topology.zones().len());
        assert_eq!(numa.pinning, Pinning::Cores);
        assert_eq!(numa.bound, topology.is_this_machine(), "{numa:?}");
        if numa.bound {
            assert_eq!(numa.worker_cpus, numa.planned_cpus, "{numa:?}");
            let cpus = cluster
                .run(|_| Ok(std::thread::available_parallelism().unwrap().get()))
                .unwrap();
            let planned: Vec<usize> = numa.planned_cpus.iter().map(Vec::len).collect();
            assert_eq!(cpus, planned, "a run sees its worker's affinity");
        }
        // Packed: the first zone's cores first.
        let first = &topology.zones()[0].cores;
        assert_eq!(numa.planned_cpus[0], first[0].pus, "{numa:?}");
        assert!(numa.remote_fraction.is_none(), "no plan yet");
        // Shard and communication threads run in the workers' zones.
        assert!(numa
            .shard_zones
            .iter()
            .all(|z| numa.worker_zones.contains(z)));
        assert!(numa.worker_zones.contains(&numa.comm_zone));
        assert_eq!(numa.arena_bound_bytes, 0, "no arena yet");
    });
}

/// By default (`Pinning::Zones`) a worker may run on any CPU of its zone: on a machine of
/// one zone nothing is bound, and each worker keeps the whole process's CPUs (so another
/// job on a core costs what it costs an unpinned program); with several zones each
/// worker is bound to its zone's CPUs.
#[test]
fn by_default_workers_are_bound_to_their_zone_and_not_at_all_on_one_zone() {
    within(30, || {
        let topology = Topology::detect();
        let process_cpus = process_affinity();
        let mut cluster = Cluster::start(Config::new(2).with_mode(Mode::Virtual)).unwrap();
        let numa = cluster.numa().expect("numa applies in virtual mode");
        assert_eq!(numa.pinning, Pinning::Zones);
        let zones = topology.zones();
        assert_eq!(
            numa.bound,
            topology.is_this_machine() && zones.len() > 1,
            "{numa:?}"
        );
        for (w, cpus) in numa.planned_cpus.iter().enumerate() {
            assert_eq!(cpus, &zones[numa.worker_zones[w]].pus(), "worker {w}");
        }
        if numa.bound {
            assert_eq!(numa.worker_cpus, numa.planned_cpus, "{numa:?}");
        } else {
            for cpus in &numa.worker_cpus {
                assert_eq!(cpus, &process_cpus, "an unbound worker keeps every CPU");
            }
            let seen = cluster
                .run(|_| Ok(std::thread::available_parallelism().unwrap().get()))
                .unwrap();
            assert_eq!(seen, vec![process_cpus.len(); 2], "{numa:?}");
        }
    });
}

/// The CPUs this process may run on, as the kernel says.
fn process_affinity() -> Vec<u32> {
    // SAFETY: `set` is a plain bitmask owned here; `sched_getaffinity(0, ..)` writes at
    // most `size_of::<cpu_set_t>()` bytes into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
            0
        );
        (0..libc::CPU_SETSIZE as u32)
            .filter(|&c| libc::CPU_ISSET(c as usize, &set))
            .collect()
    }
}

/// Generic mode and the `numa` switch turned off leave threads alone.
#[test]
fn numa_applies_only_to_specialized_modes_with_the_switch_on() {
    within(30, || {
        let cluster = Cluster::start(Config::new(2)).unwrap();
        assert!(cluster.numa().is_none());
        let mut specs = Specializations::ALL;
        specs.numa = false;
        let config = Config::new(2)
            .with_mode(Mode::Virtual)
            .with_specializations(specs);
        let cluster = Cluster::start(config).unwrap();
        assert!(cluster.numa().is_none());
    });
}

/// On a synthetic two-zone topology nothing is bound, workers are planned packed or
/// spread, and an MF-like pattern's plan keeps remote accesses at most a quarter of the
/// baseline's.
#[test]
fn a_synthetic_topology_is_planned_for_but_never_bound() {
    for (placement, zones) in [
        (WorkerPlacement::Packed, vec![0, 0, 0, 0, 1, 1, 1, 1]),
        (WorkerPlacement::Spread, vec![0, 1, 0, 1, 0, 1, 0, 1]),
    ] {
        let numa = within(30, move || {
            let mut config = Config::new(8)
                .with_mode(Mode::Virtual)
                .with_topology(Topology::uniform(2, 4).unwrap());
            config.worker_placement = placement;
            let mut cluster = Cluster::start(config).unwrap();
            let users = cluster.create_table::<f32>("users", 4).unwrap();
            let items = cluster.create_table::<f32>("items", 4).unwrap();
            let iteration = |w: &mut iterstore::Worker<'_>| {
                let mut row = [0.0f32; 4];
                for i in 0..40u64 {
                    let user = w.id() as u64 * 100 + i;
                    w.read(&users, user, &mut row)?;
                    w.read(&items, i % 10, &mut row)?;
                    w.update(&users, user, &[0.1; 4])?;
                    w.update(&items, i % 10, &[0.1; 4])?;
                }
                w.clock()
            };
            cluster.virtual_iteration(iteration).unwrap();
            cluster.run(iteration).unwrap();
            cluster.numa().unwrap()
        });
        assert!(!numa.bound, "{numa:?}");
        assert_eq!(
            numa.arena_bound_bytes, 0,
            "nothing is bound on a synthetic topology"
        );
        assert_eq!(numa.shard_zones, vec![0], "{numa:?}");
        assert_eq!(
            numa.replicated_rows, 0,
            "every row a worker reads it also updates (its own block): no replicas"
        );
        assert_eq!(numa.zone_copy_bytes, 0);
        assert_eq!(numa.worker_zones, zones, "{placement:?}");
        let (plan, baseline) = (
            numa.remote_fraction.unwrap(),
            numa.baseline_remote_fraction.unwrap(),
        );
        assert!((baseline - 0.5).abs() < 1e-9, "{numa:?}");
        assert!(plan <= baseline / 4.0, "{numa:?}");
        assert_eq!(numa.bytes_per_zone.len(), 2);
        assert!(numa.bytes_per_zone.iter().all(|&b| b > 0), "{numa:?}");
    }
}

/// Rows read from both zones many times per clock and updated by one worker are
/// replicated: the other zone's workers read their zone's copy of the chunks holding them,
/// which the refresh keeps equal to the arena's (the same answers as without NUMA).
#[test]
fn read_mostly_rows_get_a_copy_in_the_other_zone_and_change_no_answer() {
    let run = |numa_on: bool| {
        within(30, move || {
            let mut config = Config::new(8)
                .with_mode(Mode::Virtual)
                .with_topology(Topology::uniform(2, 4).unwrap());
            config.specializations.numa = numa_on;
            // No per-thread copies: they would serve these reads from each worker's own
            // zone already (rows this contended get them by default).
            config.contention_threshold = 100.0;
            let mut cluster = Cluster::start(config).unwrap();
            let dict = cluster.create_table::<f64>("dict", 8).unwrap();
            let own = cluster.create_table::<f64>("own", 8).unwrap();
            let iteration = |w: &mut iterstore::Worker<'_>| {
                let mut row = [0.0f64; 8];
                let mut sum = 0.0;
                for pass in 0..5u64 {
                    for r in 0..64u64 {
                        w.read(&dict, r, &mut row)?;
                        sum += row[0];
                        if w.id() == 0 && pass == 0 {
                            w.update(&dict, r, &[1.0 + r as f64; 8])?;
                        }
                    }
                }
                w.update(&own, w.id() as u64, &[sum; 8])?;
                w.clock()
            };
            cluster.virtual_iteration(iteration).unwrap();
            for _ in 0..3 {
                cluster.run(iteration).unwrap();
            }
            (
                cluster.snapshot(&dict).unwrap(),
                cluster.snapshot(&own).unwrap(),
                cluster.numa(),
            )
        })
    };
    let (dict, own, numa) = run(true);
    let (dict_off, own_off, _) = run(false);
    assert_eq!(dict, dict_off);
    assert_eq!(own, own_off, "every worker read the same values");
    let numa = numa.unwrap();
    assert!(numa.replicated_rows > 0, "{numa:?}");
    assert!(numa.zone_copy_bytes > 0, "{numa:?}");
    // The workers of one zone read the dictionary from their zone's copy.
    let readers: Vec<usize> = (0..8).filter(|&w| numa.zone_copy_rows[w] >= 64).collect();
    assert_eq!(readers.len(), 4, "{numa:?}");
    assert!(readers
        .iter()
        .all(|&w| numa.worker_zones[w] == numa.worker_zones[readers[0]]));
}
