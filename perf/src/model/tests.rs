//! The model's equations and its choices where the paper is silent, each pinned.

use super::*;
use crate::builtin;

fn one(p: u32, r: u32, h: u32) -> LayerConfig {
    LayerConfig {
        partitions: p,
        replications: r,
        threads: h,
    }
}

#[test]
fn shapes_follow_the_geometry() {
    let s = shapes(&builtin::cnn());
    // conv 5x5, 16 kernels on 28x28: 24x24x16 outputs of 25 taps each.
    assert_eq!(s[0].neurons, 24.0 * 24.0 * 16.0);
    assert_eq!(s[0].connections, 24.0 * 24.0 * 16.0 * 25.0);
    assert_eq!(s[0].params, 16.0 * 25.0);
    assert_eq!(s[1].params, 0.0);
    // pool 2 on 24x24x16: 12x12x16 outputs of 4 window entries each.
    assert_eq!(s[1].neurons, 12.0 * 12.0 * 16.0);
    assert_eq!(s[1].connections, 12.0 * 12.0 * 16.0 * 4.0);
    // conv 5x5, 32 kernels on 12x12x16: 8x8x32 outputs of 16 x 25 taps each.
    assert_eq!(s[2].neurons, 8.0 * 8.0 * 32.0);
    assert_eq!(s[2].connections, 8.0 * 8.0 * 32.0 * 400.0);
    assert_eq!(s[2].params, 32.0 * 400.0);
    // fc 128 on pool2's 4x4x32.
    assert_eq!(s[4].connections, 128.0 * 512.0);
}

#[test]
fn convolutions_divide_by_kernel_and_pooling_by_channel() {
    let s = shapes(&builtin::cnn());
    let local = Connectivity::Local { halo: 0.0 };
    // conv1, pool1, conv2, pool2: a convolution's segment holds whole kernels and reads
    // every channel below; a pooling segment holds whole channels and reads the same ones.
    let expected = [
        (16, Connectivity::Full),
        (16, local),
        (32, Connectivity::Full),
        (32, local),
        (128, Connectivity::Full),
        (10, Connectivity::Full),
    ];
    let got: Vec<_> = s.iter().map(|s| (s.rows, s.connectivity)).collect();
    assert_eq!(got, expected);
}

#[test]
fn each_kind_costs_its_own_muladd_and_pooling_has_no_activation_or_update() {
    let (mut p, t) = (
        builtin::example_profile(),
        builtin::fashion_mnist_training(),
    );
    let c = p.c_muladd_s;
    p.version = crate::spec::PROFILE_VERSION;
    p.c_muladd_by_kind_s = crate::spec::KindCosts {
        convolution: Some(4.0 * c),
        pooling: Some(2.0 * c),
    };
    let m = Model::new(&builtin::cnn(), &p, &t);
    let s = m.shapes().to_vec();
    let near = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs().max(1e-30);
    // conv1 (below pool1): its own taps at 4 C, its error terms back through pool1 at 2 C.
    let conv1 = m.compute(0, 1, 1);
    assert!(near(
        conv1.uf,
        4.0 * c * s[0].connections + p.c_act_s * s[0].neurons
    ));
    assert!(near(conv1.uw, 4.0 * c * s[0].connections));
    assert!(near(
        conv1.ub,
        2.0 * c * s[1].connections + p.c_err_s * s[0].neurons
    ));
    // pool1: 2 C per window entry, no activation or error function, no update; back
    // through conv2 at 4 C.
    let pool1 = m.compute(1, 1, 1);
    assert!(near(pool1.uf, 2.0 * c * s[1].connections));
    assert!(near(pool1.ub, 4.0 * c * s[2].connections));
    assert_eq!(pool1.uw, 0.0);
    // pool2 errors back through the fully connected layer at C; fc's own at C.
    assert!(near(m.compute(3, 1, 1).ub, c * s[4].connections));
    let fc = m.compute(4, 1, 1);
    assert!(near(fc.uw, c * s[4].connections));
    // A profile without per-kind costs charges C everywhere.
    let plain = Model::new(&builtin::cnn(), &builtin::example_profile(), &t);
    assert!(near(plain.compute(0, 1, 1).uw, c * s[0].connections));
}

#[test]
fn no_remote_values_cost_no_latency_and_threads_share_the_nic() {
    let p = builtin::example_profile();
    assert_eq!(comm_time(&p, 0.0, 32.0, 4), 0.0);
    let one = comm_time(&p, 1e6, 32.0, 1) - p.latency(1);
    let four = comm_time(&p, 1e6, 32.0, 4) - p.latency(4);
    assert!((four / one - 4.0).abs() < 1e-9);
}

#[test]
fn measured_latency_and_bandwidth_per_thread_count_are_used_for_that_count() {
    let mut p = builtin::example_profile();
    p.version = crate::spec::PROFILE_VERSION;
    p.c_ncost_s = vec![10e-6, 30e-6];
    p.c_nbw_per_thread_bits_per_s = Some(vec![8e9, 3e9]);
    let bits = 1e6 * 32.0;
    assert!((comm_time(&p, 1e6, 32.0, 1) - (10e-6 + bits / 8e9)).abs() < 1e-12);
    assert!((comm_time(&p, 1e6, 32.0, 2) - (30e-6 + bits / 3e9)).abs() < 1e-12);
    // Past the measured threads: the last latency, the last aggregate shared.
    assert!((comm_time(&p, 1e6, 32.0, 4) - (30e-6 + bits / 1.5e9)).abs() < 1e-12);
    // The weights are read once per worker, whatever its threads: one stream at C_nbw(1).
    let m = Model::new(&builtin::mlp(), &p, &builtin::fashion_mnist_training());
    let res = Resources {
        parameter_servers: 1,
        replicas: 1,
        workers: 1,
    };
    let w = m.shapes()[0].params * 32.0;
    for threads in [1, 2, 4] {
        let read = m.ps_read(0, &one(1, 1, threads), &res);
        assert!(
            (read - (10e-6 + w / 8e9)).abs() < 1e-12,
            "{threads} threads"
        );
    }
}

#[test]
fn the_slowest_segment_holds_the_rounded_up_rows_and_threads_pay_interference() {
    let m = Model::new(
        &builtin::mlp(),
        &builtin::example_profile(),
        &builtin::fashion_mnist_training(),
    );
    // 10 classes in 3 stripes: the slowest has 4.
    assert!((m.segment_fraction(2, 3) - 0.4).abs() < 1e-12);
    let res = Resources {
        parameter_servers: 1,
        replicas: 1,
        workers: 1,
    };
    let h1 = m.node(0, &one(1, 1, 1), &res);
    let h4 = m.node(0, &one(1, 1, 4), &res);
    let ratio = h4.uf / h1.uf;
    assert!((ratio - m.profile().interference(4) / 4.0).abs() < 1e-12);
}

/// Eqs. 10-11 as NIC sharing: one replica reading alone gets `min(N_ps, N_wr)` links (eq.
/// 11); `k` replicas reading at once share the servers' `N_ps` links; the epoch serves its
/// reads `k` at a time. `alpha` places `k` between 1 and `N_mr`.
#[test]
fn reads_are_bound_by_the_smaller_of_server_and_replica_links() {
    let read = |alpha: f64, ps: u32, replicas: u32, workers: u32, cfg: LayerConfig| {
        let mut p = builtin::example_profile();
        p.ps_read_alpha = alpha;
        let m = Model::new(&builtin::mlp(), &p, &builtin::fashion_mnist_training());
        let res = Resources {
            parameter_servers: ps,
            replicas,
            workers,
        };
        let bits = m.shapes()[0].params * 32.0;
        let links = (m.ps_read(0, &cfg, &res) - p.latency(1)) / (bits / p.bandwidth(1));
        (
            1.0 / links,
            m.transfers_per_epoch(&res),
            m.reads_at_once(&res),
        )
    };
    let near = |a: f64, b: f64| (a - b).abs() < 1e-9 * b;
    // Eq. 11 (alpha 0): a one-worker replica gains nothing from a second server (section
    // 6.2.2), a two-worker one reads twice as fast; every read of the epoch is on the path.
    let (links, transfers, k) = read(0.0, 2, 18, 1, one(1, 1, 16));
    assert!(near(links, 1.0) && near(k, 1.0) && near(transfers, 60_000.0 / 70.0));
    assert!(near(read(0.0, 2, 9, 2, one(2, 1, 16)).0, 2.0));
    assert!(near(read(0.0, 8, 2, 4, one(4, 1, 16)).0, 4.0));
    // Eq. 10 (alpha 1): all 4 replicas at once share 2 servers, half a link each, and the
    // epoch's reads go 4 at a time.
    let (links, transfers, k) = read(1.0, 2, 4, 3, one(3, 1, 1));
    assert!(near(links, 0.5) && near(k, 4.0) && near(transfers, 60_000.0 / 70.0 / 4.0));
    // Half way: 2.5 replicas at once.
    assert!(near(read(0.5, 2, 4, 3, one(3, 1, 1)).2, 2.5));
    // Replication reads one copy of the weights per copy: twice the time on the same links.
    let mut p = builtin::example_profile();
    p.ps_read_alpha = 0.0;
    let m = Model::new(&builtin::mlp(), &p, &builtin::fashion_mnist_training());
    let res = Resources {
        parameter_servers: 2,
        replicas: 1,
        workers: 2,
    };
    let single = m.ps_read(0, &one(1, 1, 1), &res) - p.latency(1);
    let double = m.ps_read(0, &one(1, 2, 1), &res) - p.latency(1);
    assert!(near(double, 2.0 * single));
}

/// The cache term: a segment whose working set (its weights once, and each thread's input
/// and output values) lies past the curve's knee pays the curve's factor per multiply-add.
#[test]
fn a_segment_past_the_cache_pays_the_curves_factor() {
    let mut p = builtin::example_profile();
    p.version = crate::spec::PROFILE_VERSION;
    let m0 = Model::new(&builtin::mlp(), &p, &builtin::fashion_mnist_training());
    // fc1: 784 x 512 weights of 4 bytes, 784 inputs and 512 outputs per thread.
    let whole = m0.working_set(0, 1, 1, m0.shapes()[0].params);
    assert!((whole - (784.0 * 512.0 + 784.0 + 512.0) * 4.0).abs() < 1e-6);
    let half = m0.working_set(0, 2, 4, m0.shapes()[0].params);
    assert!((half - (784.0 * 256.0 + 4.0 * (784.0 + 256.0)) * 4.0).abs() < 1e-6);
    // A knee between the two: the whole layer pays 3x per multiply-add, each half 1x.
    p.c_muladd_by_working_set = Some(vec![
        crate::spec::CachePoint {
            bytes: half * 1.01,
            factor: 1.0,
        },
        crate::spec::CachePoint {
            bytes: whole * 0.99,
            factor: 3.0,
        },
    ]);
    let m = Model::new(&builtin::mlp(), &p, &builtin::fashion_mnist_training());
    let c = p.c_muladd_s * m.shapes()[0].connections;
    assert!((m.compute(0, 1, 1).uw - 3.0 * c).abs() < 1e-9 * c);
    assert!((m.compute(0, 2, 4).uw - 0.5 * c).abs() < 1e-9 * c);
    // So splitting the layer in two more than halves its compute: super-linear.
    assert!(m.compute(0, 2, 1).uf < 0.5 * m.compute(0, 1, 1).uf);
}

#[test]
fn the_estimate_is_the_sum_of_its_breakdown() {
    let m = Model::new(
        &builtin::mlp(),
        &builtin::example_profile(),
        &builtin::fashion_mnist_training(),
    );
    let res = Resources {
        parameter_servers: 1,
        replicas: 2,
        workers: 2,
    };
    let layers = [one(2, 1, 2), one(2, 1, 2), one(1, 2, 2)];
    let t = [
        Traffic {
            activations: 100.0,
            errors: 50.0,
        },
        Traffic {
            activations: 10.0,
            errors: 0.0,
        },
    ];
    let e = m.estimate(&res, &layers, &t);
    let by_layer: f64 = e.layers.iter().map(|l| l.seconds.total()).sum();
    assert!((e.epoch_s - by_layer).abs() < 1e-9 * e.epoch_s);
    assert_eq!(
        e.layers[0].seconds.mf, 0.0,
        "the first layer reads its input locally"
    );
    assert_eq!(
        e.layers[2].seconds.mb, 0.0,
        "the top layer has its error from the labels"
    );
}

#[test]
fn replicas_share_the_reads_writes_can_wait_and_a_message_carries_a_batch() {
    let mut training = builtin::fashion_mnist_training();
    let res = |replicas| Resources {
        parameter_servers: 1,
        replicas,
        workers: 1,
    };
    let mut all_at_once = builtin::example_profile();
    all_at_once.ps_read_alpha = 1.0;
    let m = Model::new(&builtin::mlp(), &all_at_once, &training);
    // The epoch's N_sample / N_read reads, served N_mr at a time when all replicas read at
    // once: each replica's N_sample / (N_mr × N_read).
    let one_replica = m.transfers_per_epoch(&res(1));
    assert!((one_replica - 60_000.0 / 70.0).abs() < 1e-9);
    assert!((m.transfers_per_epoch(&res(4)) - one_replica / 4.0).abs() < 1e-9);
    // Synchronous writes add a transfer every N_write samples.
    training.synchronous_writes = Some(true);
    let m = Model::new(&builtin::mlp(), &all_at_once, &training);
    let with_writes = m.transfers_per_epoch(&res(1));
    assert!((with_writes - (60_000.0 / 70.0 + 60_000.0 / 40.0)).abs() < 1e-9);
    // A message of 32 samples pays the latency once: per sample, a 32nd of it.
    let two = one(2, 1, 1);
    let per_sample = |batch| {
        let mut t = builtin::fashion_mnist_training();
        t.batch = batch;
        let m = Model::new(&builtin::mlp(), &builtin::example_profile(), &t);
        m.edge_forward(1, &two, &res(1), 0.0) + m.edge_forward(1, &two, &res(1), 100.0)
    };
    let (alone, batched) = (per_sample(None), per_sample(Some(32)));
    let latency = builtin::example_profile().latency(1) * 60_000.0;
    assert!(((alone - batched) - latency * (1.0 - 1.0 / 32.0)).abs() < 1e-6 * alone);
}
