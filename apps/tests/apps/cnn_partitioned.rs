//! The partitioned CNN (model replicas whose workers hold segments of the convolutions,
//! split by kernels, of the poolings, split by channels, and of the fully connected
//! layers): a replica of 2 or 4 workers trains the weights one worker trains, bit for bit,
//! in every store mode and across processes; replicas of such workers train what as many
//! data-parallel workers train; replicated stages still learn; a plan that splits the
//! convolutions runs as it says.

use iterstore::{Cluster, Mode};
use iterstore_apps::apps::dnn::{run_cnn, run_cnn_partitioned_in, DnnOutcome};
use iterstore_apps::apps::{AppConfig, AppError};
use iterstore_apps::data::ImageSet;
use iterstore_apps::dnn::{Cnn, Partitioning};

use crate::cnn::{params, tiny};
use crate::dnn_checks::{self, losses, same};
use crate::util::{bsp, stderr, MODES};

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

/// `iterstore run dnn --model cnn` on the tiny images with a 4,4-channel CNN, plus `extra`.
fn cli(extra: &[&str]) -> std::process::Output {
    crate::util::cnn_tiny("4,4", extra)
}

#[test]
fn a_plan_that_splits_the_convolutions_runs_as_it_says_over_processes() {
    let dir = crate::util::scratch("cnn-partitioned-plan");
    let one = dir.join("one.tsv");
    let out = cli(&["--workers", "1", "--output", one.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The optimizer's CNN plan for 3 machines, then split as a plan may split it: one
    // replica of 2 workers, every convolution and pooling in 2 segments, a dedicated
    // parameter server.
    let plan = dir.join("plan.json");
    let mut planned = crate::util::example_plan("cnn", "3", "1", &plan);
    planned["resources"]["replicas"] = 1.into();
    planned["resources"]["workers"] = 2.into();
    planned["resources"]["parameter_servers"] = 1.into();
    for (layer, p) in planned["layers"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .zip([2, 2, 2, 2, 1, 1])
    {
        layer["partitions"] = p.into();
    }
    std::fs::write(&plan, planned.to_string()).unwrap();
    let (three, json) = (dir.join("three.tsv"), dir.join("three.json"));
    let out = cli(&[
        "--workers",
        "1",
        "--processes",
        "3",
        "--plan",
        plan.to_str().unwrap(),
        "--output",
        three.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        std::fs::read(&one).unwrap() == std::fs::read(&three).unwrap(),
        "the planned CNN split over 2 processes and a server differs from one worker's"
    );
    let report: serde_json::Value = crate::util::json_file(&json);
    assert_eq!(report["params"]["replica_workers"], 2);
    assert_eq!(report["params"]["weight_shards"], "2..3");
    let layout = report["params"]["layout"].as_str().unwrap();
    assert!(
        layout.contains("layer 2 (conv2): 2 segment(s) x 1 copy(ies)"),
        "{layout}"
    );
    // A partitioning by hand names the layers it expects.
    let out = cli(&["--workers", "2", "--replicas", "1", "--partitions", "2,2"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(
            "--partitions: 2 values for the network's 6 layers (conv1,pool1,conv2,pool2,fc1,out)"
        ),
        "{}",
        stderr(&out)
    );
}
