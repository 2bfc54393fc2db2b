//! The partitioned MLP (model replicas of several workers, each holding segments of the
//! layers): a replica of 2 or 4 workers trains the weights one worker trains, bit for bit,
//! in every store mode and across processes; replicas of such workers train what as many
//! data-parallel workers train; replicated layers and sparser synchronisation
//! (`N_read`/`N_write`) still learn; a partitioning that does not fit is refused naming why.
//! (Through the CLI: the CLI crate's `tests/cli/dnn_partitioned.rs`.)

use iterstore::{Cluster, Mode};
use iterstore_algo::dnn::{DnnConfig, Mlp, Partitioning};
use iterstore_apps::dnn::{run, run_partitioned_in, DnnOutcome};
use iterstore_apps::{AppConfig, AppError};
use iterstore_data::{ImageSet, ImageSpec};

use crate::dnn_checks::{self, losses, same};
use crate::util::{bsp, MODES};

fn tiny() -> ImageSet {
    ImageSpec::preset("tiny").unwrap().generate()
}

/// Two hidden layers, so that every kind of exchange happens (144-40-24-10).
fn params() -> DnnConfig {
    DnnConfig {
        hidden: vec![40, 24],
        learning_rate: 0.05,
        momentum: 0.9,
        batch: 20,
        seed: 7,
        ..DnnConfig::default()
    }
}

fn split(replicas: usize, partitions: [usize; 3], replications: [usize; 3]) -> Partitioning {
    dnn_checks::split(replicas, &partitions, &replications)
}

/// Trains on a fresh one-process cluster of `cfg.workers` workers, partitioned as asked.
fn train(
    cfg: &AppConfig,
    asked: &Partitioning,
    data: &ImageSet,
) -> Result<DnnOutcome<Mlp>, AppError> {
    let lift = |e: AppError| iterstore::Error::app(0, e);
    let mut got = Cluster::run_local_processes(cfg.store_config(), 1, |c| {
        run_partitioned_in(c, cfg, &params(), data, Some(asked), &mut |_| {}).map_err(lift)
    })
    .map_err(AppError::from)?;
    Ok(got.remove(0))
}

#[test]
fn a_replica_of_two_or_four_workers_trains_one_workers_weights_bit_for_bit() {
    let data = tiny();
    let one = run(&bsp(Mode::Generic, 1, 2), &params(), &data).unwrap();
    for (workers, p) in [
        (2, [2, 2, 2]),
        (4, [4, 4, 4]),
        (4, [4, 2, 1]),
        (4, [1, 3, 4]),
    ] {
        for mode in [Mode::Generic, Mode::Virtual] {
            let out = train(&bsp(mode, workers, 2), &split(1, p, [1; 3]), &data).unwrap();
            same(
                &out,
                &one,
                &format!("{workers} workers, partitions {p:?}, {mode:?}"),
            );
            let params = &out.report.params;
            let layout = params["layout"].as_str().unwrap();
            assert!(layout.contains("layer 2"), "{layout}");
            assert_eq!(params["replica_workers"], workers);
        }
    }
}

#[test]
fn every_mode_and_a_replica_across_processes_train_the_same_weights() {
    let data = tiny();
    let asked = split(1, [2, 2, 2], [1; 3]);
    let outs: Vec<_> = MODES
        .iter()
        .map(|&mode| train(&bsp(mode, 2, 2), &asked, &data).unwrap())
        .collect();
    for (mode, out) in MODES.iter().zip(&outs).skip(1) {
        same(out, &outs[0], &format!("{mode:?}"));
    }
    let store = &outs[2].report.store;
    assert_eq!(
        store.unplanned_accesses, 0,
        "every access followed the pattern"
    );
    // The two workers of the replica in two processes: activations and error terms
    // cross between processes.
    let cfg = bsp(Mode::Virtual, 1, 2);
    let lift = |e: AppError| iterstore::Error::app(0, e);
    let got = Cluster::run_local_processes(cfg.store_config(), 2, |c| {
        run_partitioned_in(c, &cfg, &params(), &data, Some(&asked), &mut |_| {}).map_err(lift)
    })
    .unwrap();
    for (rank, out) in got.iter().enumerate() {
        same(out, &outs[0], &format!("process {rank} of 2"));
    }
}

#[test]
fn replicas_of_partitioned_workers_train_what_as_many_data_parallel_workers_train() {
    let data = tiny();
    let two = run(&bsp(Mode::Virtual, 2, 2), &params(), &data).unwrap();
    let out = train(
        &bsp(Mode::Virtual, 4, 2),
        &split(2, [2, 1, 2], [1; 3]),
        &data,
    )
    .unwrap();
    same(&out, &two, "2 replicas of 2 workers against 2 workers");
}

#[test]
fn replicated_layers_and_sparse_synchronisation_still_learn() {
    let data = tiny();
    let cfg = bsp(Mode::Virtual, 4, 5);
    let one = run(&bsp(Mode::Virtual, 1, 5), &params(), &data).unwrap();
    // Copies split the mini-batch: the servers sum their steps, in another order than
    // one worker sums its samples.
    let replicated = train(&cfg, &split(1, [2, 1, 1], [2, 4, 3]), &data).unwrap();
    for (x, y) in losses(&replicated).iter().zip(&losses(&one)) {
        assert!(
            (x - y).abs() <= 1e-3 * y.abs(),
            "loss {x} vs one worker's {y}"
        );
    }
    let mut sparse = split(2, [2, 2, 1], [1; 3]);
    (sparse.n_read, sparse.n_write) = (30, 20);
    let out = train(&cfg, &sparse, &data).unwrap();
    assert!(out.model != replicated.model);
    let acc = out.report.test_accuracy.unwrap();
    assert!(
        acc >= 0.8,
        "test accuracy {acc} reading every 3 and writing every 2 mini-batches"
    );
    assert!(
        out.report.params["partitioning"]
            .as_str()
            .unwrap()
            .contains("n_read 30 n_write 20"),
        "{:?}",
        out.report.params
    );
}

#[test]
fn a_partitioning_that_does_not_fit_is_refused_naming_why() {
    let data = tiny();
    let cfg = bsp(Mode::Virtual, 2, 1);
    for (asked, why) in [
        (
            split(3, [1; 3], [1; 3]),
            "3 replicas do not divide the cluster's 2 workers",
        ),
        (
            split(1, [1, 1, 11], [1; 3]),
            "layer 2 (l2): 11 partitions of 10 units (at most 10",
        ),
        (
            split(1, [2, 1, 1], [2, 1, 1]),
            "layer 0 (l0): 2 partitions x 2 replications need 4",
        ),
    ] {
        let e = train(&cfg, &asked, &data).unwrap_err().to_string();
        assert!(e.contains(why), "{e}");
        assert!(e.contains("dnn --model mlp partitioning (replicas"), "{e}");
    }
}
