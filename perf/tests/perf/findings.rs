//! The paper's qualitative findings, reproduced by the model from stated constants
//! (`builtin::example_profile`, varied where a test says so).

use iterstore_perf::{
    builtin, optimizer, search, Cluster, Estimate, LayerConfig, Model, Network, Resources,
};

/// A 2-layer network: a 1024-neuron fully connected layer under a 1000-way softmax.
fn two_layers() -> Network {
    let mut net = builtin::mlp();
    net.layers = vec![
        iterstore_perf::Layer::FullyConnected {
            name: "fc".into(),
            neurons: 1024,
            bits: 32,
        },
        iterstore_perf::Layer::Softmax {
            name: "out".into(),
            neurons: 1000,
            bits: 32,
        },
    ];
    net
}

/// The estimate of `layers` on one replica of `workers` workers with one parameter server,
/// with the greedy mapping's traffic.
fn estimate(model: &Model, workers: u32, layers: &[LayerConfig]) -> Estimate {
    let res = Resources {
        parameter_servers: 1,
        replicas: 1,
        workers,
    };
    optimizer::evaluate(model, &res, layers).estimate
}

/// Section 6.4, figures 13-14: partitioning the output layer costs activations, replicating
/// it costs weight reads, so which is faster flips with the network's bandwidth.
#[test]
fn partition_or_replicate_the_output_layer_flips_with_bandwidth() {
    let below = LayerConfig {
        partitions: 2,
        replications: 1,
        threads: 1,
    };
    let partitioned = [
        below,
        LayerConfig {
            partitions: 2,
            replications: 1,
            threads: 1,
        },
    ];
    let replicated = [
        below,
        LayerConfig {
            partitions: 1,
            replications: 2,
            threads: 1,
        },
    ];
    let mut verdicts = Vec::new();
    for bandwidth in [1e9, 1e12] {
        let mut profile = builtin::example_profile();
        profile.c_nbw_bits_per_s = bandwidth;
        let model = Model::new(&two_layers(), &profile, &builtin::fashion_mnist_training());
        let (p, r) = (
            estimate(&model, 2, &partitioned),
            estimate(&model, 2, &replicated),
        );
        // Figure 14: partitioning has the higher activation traffic, replication the higher weight traffic.
        assert!(p.layers[1].seconds.mf > r.layers[1].seconds.mf);
        assert!(p.layers[1].seconds.mw < r.layers[1].seconds.mw);
        verdicts.push(if p.epoch_s < r.epoch_s {
            "partition"
        } else {
            "replicate"
        });
    }
    assert_eq!(
        verdicts,
        ["partition", "replicate"],
        "1 Gbit/s, then 1 Tbit/s"
    );
}

/// The per-candidate epoch times of `(N_ps, replicas, workers)` for `N_ps = 1..=max`.
fn by_parameter_servers(
    model: &Model,
    cluster: &Cluster,
    replicas: u32,
    workers: u32,
    max: u32,
) -> Vec<f64> {
    let found = search(model, cluster).unwrap();
    (1..=max)
        .map(|ps| {
            let res = Resources {
                parameter_servers: ps,
                replicas,
                workers,
            };
            found
                .candidates
                .iter()
                .find(|c| c.resources == res)
                .unwrap()
                .estimate
                .epoch_s
        })
        .collect()
}

/// Sections 6.2.1 and 6.2.2: more parameter servers help while their links are the
/// bottleneck, and stop helping once they are not (eqs. 10-11: the `k` replicas reading at
/// once share the servers' links until there are `k × N_wr` of them, one per reading
/// worker, and a replica cannot read faster than its own `N_wr` links; the example
/// profile's `alpha = 0.5` makes `k = 1.5` of 2 replicas); and a small network barely
/// waits for them: the seconds more servers save it are a few hundredths of the large
/// network's.
#[test]
fn adding_parameter_servers_stops_helping_once_they_are_not_the_bottleneck() {
    let cluster = Cluster {
        machines: 24,
        cores: 16,
    };
    let large = Model::new(
        &builtin::imagenet_like(),
        &builtin::example_profile(),
        &builtin::fashion_mnist_training(),
    );
    // 2 replicas of 4 workers, 1.5 reading at once: 6 reading workers.
    let t = by_parameter_servers(&large, &cluster, 2, 4, 12);
    assert!(
        t[..6].windows(2).all(|w| w[0] > w[1]),
        "helps up to k x N_wr = 6: {t:?}"
    );
    assert!(
        t[0] / t[1] > 1.02,
        "a second server helps the large network: {t:?}"
    );
    for more in &t[6..] {
        assert!(
            (more - t[5]).abs() <= 1e-9 * t[5],
            "no help past k x N_wr: {t:?}"
        );
    }
    // A small MLP (784-256-128-10, 235 k parameters).
    let mut small_mlp = builtin::mlp();
    for (layer, n) in small_mlp.layers.iter_mut().zip([256, 128]) {
        if let iterstore_perf::Layer::FullyConnected { neurons, .. } = layer {
            *neurons = n;
        }
    }
    let small = Model::new(
        &small_mlp,
        &builtin::example_profile(),
        &builtin::fashion_mnist_training(),
    );
    let s = by_parameter_servers(&small, &cluster, 2, 4, 8);
    assert!(
        (s[0] - s[7]) < 0.01 * (t[0] - t[7]),
        "the small network saves far fewer seconds: {s:?} vs {t:?}"
    );
}

/// Section 6.4, figure 15: across a 20-machine search space the best configuration of a
/// large network is more than 10x faster than the worst. As in figure 15 ("without
/// considering different combinations of layer compositions") each point is a resource
/// triple with its layers composed uniformly (`optimizer::uniform`); the best is the
/// optimizer's. Even the best composition of each triple spreads more than 5x.
#[test]
fn the_spread_of_a_20_machine_search_space_exceeds_10x() {
    let model = Model::new(
        &builtin::imagenet_like(),
        &builtin::example_profile(),
        &builtin::fashion_mnist_training(),
    );
    let cluster = Cluster {
        machines: 20,
        cores: 16,
    };
    let found = search(&model, &cluster).unwrap();
    let worst = optimizer::resources(&cluster)
        .iter()
        .map(|res| {
            optimizer::uniform(&model, res, cluster.cores)
                .estimate
                .epoch_s
        })
        .fold(0.0, f64::max);
    let spread = worst / found.best().estimate.epoch_s;
    println!("20 machines: best {:.1} s, worst uniform {:.1} s, spread {spread:.1}x; best per triple spreads {:.1}x", found.best().estimate.epoch_s, worst, found.spread());
    assert!(spread > 10.0, "spread {spread}");
    assert!(found.spread() > 5.0, "per-triple spread {}", found.spread());
}
