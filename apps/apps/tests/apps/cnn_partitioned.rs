//! The partitioned CNN (model replicas whose workers hold segments of the convolutions,
//! split by kernels, of the poolings, split by channels, and of the fully connected
//! layers): a replica of 2 or 4 workers trains the weights one worker trains, bit for bit,
//! in every store mode and across processes; replicas of such workers train what as many
//! data-parallel workers train; replicated stages still learn. (A plan that splits the
//! convolutions runs as it says through the CLI: the CLI crate's
//! `tests/cli/cnn_partitioned.rs`.)

use iterstore::{Cluster, Mode};
use iterstore_algo::dnn::{Cnn, Partitioning};
use iterstore_apps::dnn::{run_cnn, run_cnn_partitioned_in, DnnOutcome};
use iterstore_apps::{AppConfig, AppError};
use iterstore_data::ImageSet;

use crate::cnn::{params, tiny};
use crate::dnn_checks::{self, losses, same};
use crate::util::{bsp, MODES};

fn split(replicas: usize, partitions: [usize; 6], replications: [usize; 6]) -> Partitioning {
    dnn_checks::split(replicas, &partitions, &replications)
}

/// Trains on `processes` in-process processes of `cfg.workers` workers each, partitioned
/// as asked; every process's outcome.
fn train(
    cfg: &AppConfig,
    processes: usize,
    asked: &Partitioning,
    data: &ImageSet,
) -> Result<Vec<DnnOutcome<Cnn>>, AppError> {
    let lift = |e: AppError| iterstore::Error::app(0, e);
    Cluster::run_local_processes(cfg.store_config(), processes, |c| {
        run_cnn_partitioned_in(c, cfg, &params(), data, Some(asked), &mut |_| {}).map_err(lift)
    })
    .map_err(AppError::from)
}

#[test]
fn a_replica_of_two_or_four_workers_trains_one_workers_weights_bit_for_bit() {
    let data = tiny();
    let one = run_cnn(&bsp(Mode::Generic, 1, 2), &params(), &data).unwrap();
    assert!(
        losses(&one)[1] < losses(&one)[0],
        "it learns: {:?}",
        losses(&one)
    );
    for (workers, p) in [
        // Every stage split alike; a pooling split unlike its convolution; the output
        // layer split (the softmax gathers its logits); four ways.
        (2, [2, 2, 2, 2, 2, 2]),
        (2, [2, 1, 1, 2, 1, 1]),
        (4, [3, 2, 4, 3, 1, 2]),
        (4, [4, 4, 4, 4, 4, 4]),
    ] {
        for mode in [Mode::Generic, Mode::Virtual] {
            let out = train(&bsp(mode, workers, 2), 1, &split(1, p, [1; 6]), &data).unwrap();
            let out = &out[0];
            let what = format!("{workers} workers, partitions {p:?}, {mode:?}");
            same(out, &one, &what);
            let layout = out.report.params["layout"].as_str().unwrap();
            assert!(layout.contains("layer 1 (pool1)"), "{layout}");
            assert_eq!(out.report.params["replica_workers"], workers);
            if mode == Mode::Virtual {
                assert_eq!(out.report.store.unplanned_accesses, 0, "{what}");
            }
        }
    }
}

#[test]
fn every_mode_and_a_replica_across_processes_train_the_same_weights() {
    let data = tiny();
    let asked = split(1, [2, 2, 1, 2, 2, 1], [1; 6]);
    let outs: Vec<_> = MODES
        .iter()
        .map(|&mode| train(&bsp(mode, 2, 2), 1, &asked, &data).unwrap().remove(0))
        .collect();
    for (mode, out) in MODES.iter().zip(&outs).skip(1) {
        same(out, &outs[0], &format!("{mode:?}"));
    }
    // The replica's two workers in two processes: the feature maps and their error terms
    // cross between processes.
    let got = train(&bsp(Mode::Virtual, 1, 2), 2, &asked, &data).unwrap();
    for (rank, out) in got.iter().enumerate() {
        same(out, &outs[0], &format!("process {rank} of 2"));
    }
}

#[test]
fn replicas_of_partitioned_workers_train_what_as_many_data_parallel_workers_train() {
    let data = tiny();
    let two = run_cnn(&bsp(Mode::Virtual, 2, 2), &params(), &data).unwrap();
    let asked = split(2, [2, 2, 2, 1, 1, 2], [1; 6]);
    let out = train(&bsp(Mode::Virtual, 4, 2), 1, &asked, &data).unwrap();
    same(&out[0], &two, "2 replicas of 2 workers against 2 workers");
}

#[test]
fn replicated_stages_still_learn() {
    // Copies of a stage split the mini-batch: the servers sum their steps, so the weights
    // are not one worker's bits, but the network learns as well.
    let data = tiny();
    let asked = split(1, [2, 1, 1, 2, 1, 1], [1, 2, 4, 1, 2, 2]);
    let out = train(&bsp(Mode::Virtual, 4, 4), 1, &asked, &data).unwrap();
    let loss = losses(&out[0]);
    assert!(loss[3] < 0.5 * loss[0], "{loss:?}");
    let acc = out[0].report.test_accuracy.unwrap();
    assert!(acc >= 0.85, "test accuracy {acc}, losses {loss:?}");
}

#[test]
fn a_partitioning_that_does_not_fit_is_refused_naming_the_layer() {
    let data = tiny();
    let e = |asked: Partitioning, workers| {
        train(&bsp(Mode::Virtual, workers, 1), 1, &asked, &data)
            .expect_err("refused")
            .to_string()
    };
    // conv1 has 6 kernels: 6 chunks of one.
    let msg = e(split(1, [7, 1, 1, 1, 1, 1], [1; 6]), 8);
    assert!(
        msg.contains("layer 0 (conv1): 7 partitions of 6 units"),
        "{msg}"
    );
    let msg = e(split(1, [1, 3, 1, 1, 1, 1], [1; 6]), 2);
    assert!(
        msg.contains("layer 1 (pool1): 3 partitions x 1 replications need 3 workers"),
        "{msg}"
    );
    let mut short = split(1, [1; 6], [1; 6]);
    short.partitions.truncate(4);
    let msg = e(short, 1);
    assert!(
        msg.contains("6 layers (conv1,pool1,conv2,pool2,fc1,out)"),
        "{msg}"
    );
}
