//! Section 5.3's claim, as a property: on random small networks and clusters the dynamic
//! program with the greedy mapping finds the same optimum as trying every configuration
//! and every injective segment-to-worker mapping.

use iterstore_perf::model::{Connectivity, Shape};
use iterstore_perf::optimizer::brute_force;
use iterstore_perf::spec::CachePoint;
use iterstore_perf::{search, Cluster, KindCosts, LayerKind, Model, Profile, Training};
use proptest::prelude::*;

/// A random layer: full or local connectivity, a few neurons and rows. Kind and connectivity
/// pair more freely than `model::shapes` pairs them (a weighted local layer is a
/// "convolution"): the search is exact for any shapes.
fn shape() -> impl Strategy<Value = Shape> {
    (
        1u64..=6,
        1u64..=6,
        1.0f64..40.0,
        any::<bool>(),
        prop_oneof![
            Just(None),
            Just(Some(0.0)),
            Just(Some(0.15)),
            Just(Some(0.4))
        ],
        prop_oneof![Just(8.0), Just(32.0)],
    )
        .prop_map(|(neurons, rows, fan_in, weights, halo, bits)| {
            let neurons = neurons as f64 * 10.0;
            let connections = neurons * fan_in;
            let kind = match (halo, weights) {
                (None, _) => LayerKind::FullyConnected,
                (Some(_), true) => LayerKind::Convolution,
                (Some(_), false) => LayerKind::Pooling,
            };
            Shape {
                name: "l".into(),
                kind,
                neurons,
                rows,
                connections,
                params: if weights { connections } else { 0.0 },
                bits,
                below: fan_in,
                connectivity: halo.map_or(Connectivity::Full, |halo| Connectivity::Local { halo }),
            }
        })
}

/// A random profile for `cores` cores, with costs spread over orders of magnitude so that
/// compute, latency, bandwidth or parameter-server reads can each dominate.
fn profile(cores: u32) -> impl Strategy<Value = Profile> {
    (
        -10.0f64..-7.0,
        -9.0f64..-6.0,
        -7.0f64..-3.0,
        4.0f64..10.0,
        0.0f64..=1.0,
        proptest::collection::vec(0.0f64..0.5, cores as usize),
        (
            proptest::option::of(-10.0f64..-7.0),
            proptest::option::of(-10.0f64..-7.0),
            proptest::option::of(proptest::collection::vec(4.0f64..10.0, cores as usize)),
            // A cache curve: factor 1 up to `small` bytes, `slow` from `small × 2^span`.
            proptest::option::of((1.0f64..5.0, 0.1f64..3.0, 1.0f64..8.0)),
        ),
    )
        .prop_map(
            |(muladd, act, ncost, nbw, alpha, steps, (conv, pool, per_thread, cache))| {
                let mut interf = 1.0;
                Profile {
                    version: 3,
                    name: "random".into(),
                    c_muladd_s: 10f64.powf(muladd),
                    c_muladd_by_kind_s: KindCosts {
                        convolution: conv.map(|c| 10f64.powf(c)),
                        pooling: pool.map(|c| 10f64.powf(c)),
                    },
                    c_act_s: 10f64.powf(act),
                    c_err_s: 10f64.powf(act),
                    c_interf: steps
                        .iter()
                        .map(|s| {
                            let v = interf;
                            interf += s;
                            v
                        })
                        .collect(),
                    c_ncost_s: vec![10f64.powf(ncost)],
                    c_nbw_bits_per_s: 10f64.powf(nbw),
                    c_nbw_per_thread_bits_per_s: per_thread
                        .map(|v| v.iter().map(|b| 10f64.powf(*b)).collect()),
                    c_muladd_by_working_set: cache.map(|(small, span, slow)| {
                        let bytes = 10f64.powf(small);
                        vec![
                            CachePoint { bytes, factor: 1.0 },
                            CachePoint {
                                bytes: bytes * 2f64.powf(span),
                                factor: slow,
                            },
                        ]
                    }),
                    ps_read_alpha: alpha,
                    sources: Default::default(),
                }
            },
        )
}

/// A random small instance: up to 3 layers, 2-5 machines, 1-2 cores.
fn instance() -> impl Strategy<Value = (Model, Cluster)> {
    (2u32..=5, 1u32..=2).prop_flat_map(|(machines, cores)| {
        (
            proptest::collection::vec(shape(), 1..=3),
            profile(cores),
            1u64..=500,
            1u64..=50,
        )
            .prop_map(move |(shapes, profile, n_sample, n_read)| {
                let training = Training {
                    version: 1,
                    n_sample,
                    n_read,
                    n_write: 1,
                    batch: None,
                    synchronous_writes: None,
                    sources: Default::default(),
                };
                (
                    Model::from_shapes(shapes, profile, training),
                    Cluster { machines, cores },
                )
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn the_dp_finds_the_brute_force_optimum((model, cluster) in instance()) {
        let fast = search(&model, &cluster).unwrap();
        let slow = brute_force(&model, &cluster).unwrap();
        let (a, b) = (fast.best().estimate.epoch_s, slow.estimate.epoch_s);
        prop_assert!((a - b).abs() <= 1e-9 * b, "dp {a} ({:?}) vs brute force {b} ({:?})", fast.best(), slow);
    }
}

/// A case the property once found: with `alpha > 0` eq. 10 charges reads to `N_ps` servers
/// themselves, so a DP run for one server count cannot stand in for another with the same
/// `min(N_ps, N_wr)` (here 2 servers and 1 worker wants 2 threads on the first layer, 1
/// server does not).
#[test]
fn the_dp_runs_per_server_count_when_eq_10_counts() {
    let layer = |connections: f64| Shape {
        name: "l".into(),
        kind: LayerKind::FullyConnected,
        neurons: 10.0,
        rows: 1,
        connections,
        params: connections,
        bits: 8.0,
        below: 3.0,
        connectivity: Connectivity::Full,
    };
    let profile = Profile {
        version: 2,
        name: "random".into(),
        c_muladd_s: 1.3157047882675363e-10,
        c_muladd_by_kind_s: KindCosts {
            convolution: None,
            pooling: None,
        },
        c_act_s: 6.446767814138293e-7,
        c_err_s: 6.446767814138293e-7,
        c_interf: vec![1.0, 1.493502586970649],
        c_ncost_s: vec![7.048116743444881e-6],
        c_nbw_bits_per_s: 2855913.488778745,
        c_nbw_per_thread_bits_per_s: None,
        c_muladd_by_working_set: None,
        ps_read_alpha: 0.9427988549728089,
        sources: Default::default(),
    };
    let training = Training {
        version: 1,
        n_sample: 1,
        n_read: 30,
        n_write: 1,
        batch: None,
        synchronous_writes: None,
        sources: Default::default(),
    };
    let model = Model::from_shapes(
        vec![layer(34.20557886367409), layer(112.0980268892052)],
        profile,
        training,
    );
    let cluster = Cluster {
        machines: 4,
        cores: 2,
    };
    let (a, b) = (
        search(&model, &cluster).unwrap().best().estimate.epoch_s,
        brute_force(&model, &cluster).unwrap().estimate.epoch_s,
    );
    assert!((a - b).abs() <= 1e-9 * b, "dp {a} vs brute force {b}");
}
