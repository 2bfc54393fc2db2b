//! The partitioned MLP (model replicas of several workers, each holding segments of the
//! layers): a replica of 2 or 4 workers trains the weights one worker trains, bit for bit,
//! in every store mode and across processes; replicas of such workers train what as many
//! data-parallel workers train; replicated layers and sparser synchronisation
//! (`N_read`/`N_write`) still learn; a partitioning that does not fit is refused naming why.

use iterstore::{Cluster, Mode};
use iterstore_apps::apps::dnn::{run, run_partitioned_in, DnnOutcome};
use iterstore_apps::apps::{AppConfig, AppError};
use iterstore_apps::data::{ImageSet, ImageSpec};
use iterstore_apps::dnn::{DnnConfig, Mlp, Partitioning};

use crate::dnn_checks::{self, losses, same};
use crate::util::{bsp, dnn_tiny, stderr, MODES};

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

/// `iterstore run dnn` on the tiny images (144-16-12-10), plus `extra`.
fn cli(extra: &[&str]) -> std::process::Output {
    dnn_tiny("16,12", extra)
}

#[test]
fn a_replica_over_two_processes_writes_one_workers_model_and_a_plan_runs() {
    let dir = crate::util::scratch("dnn-partitioned-cli");
    let (one, two) = (dir.join("one.tsv"), dir.join("two.tsv"));
    let out = cli(&["--workers", "1", "--output", one.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json = dir.join("two.json");
    let out = cli(&[
        "--workers",
        "1",
        "--processes",
        "2",
        "--replicas",
        "1",
        "--partitions",
        "2,2,2",
        "--output",
        two.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        std::fs::read(&one).unwrap() == std::fs::read(&two).unwrap(),
        "the model split over 2 processes differs from one worker's"
    );
    let report: serde_json::Value = crate::util::json_file(&json);
    assert_eq!(report["params"]["replica_workers"], 2);
    // The activations and error terms crossed between the processes.
    let kinds = report["traffic"].to_string();
    assert!(kinds.contains("Pass"), "{kinds}");

    // A plan from the optimizer, run as it says (its triple needs 2 workers here).
    let plan = dir.join("plan.json");
    let planned = crate::util::example_plan("mlp", "3", "2", &plan);
    let res = &planned["resources"];
    let workers = res["replicas"].as_u64().unwrap() * res["workers"].as_u64().unwrap();
    // The plan is for the app's default network.
    let out = crate::util::iterstore(&[
        "run",
        "dnn",
        "--synthetic",
        "tiny",
        "--iters",
        "1",
        "-q",
        "--workers",
        &workers.to_string(),
        "--plan",
        plan.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = crate::util::iterstore(&[
        "run",
        "dnn",
        "--synthetic",
        "tiny",
        "-q",
        "--workers",
        &(workers - 1).to_string(),
        "--plan",
        plan.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("the cluster has"), "{}", stderr(&out));
}

#[test]
fn a_dedicated_parameter_server_process_holds_the_weights_and_changes_no_bit() {
    let dir = crate::util::scratch("dnn-partitioned-servers");
    let (one, three) = (dir.join("one.tsv"), dir.join("three.tsv"));
    let out = cli(&["--workers", "1", "--output", one.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Process 2 is the parameter server: its worker idles, its shard holds every weight.
    let json = dir.join("three.json");
    let out = cli(&[
        "--workers",
        "1",
        "--processes",
        "3",
        "--replicas",
        "1",
        "--replica-workers",
        "2",
        "--parameter-servers",
        "1",
        "--partitions",
        "2,1,2",
        "--output",
        three.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(std::fs::read(&one).unwrap() == std::fs::read(&three).unwrap());
    let report: serde_json::Value = crate::util::json_file(&json);
    assert_eq!(report["params"]["weight_shards"], "2..3");
    let out = cli(&[
        "--workers",
        "2",
        "--replicas",
        "1",
        "--parameter-servers",
        "2",
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("2 parameter servers, the cluster has 1 shards"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn replicas_with_a_dedicated_server_train_what_data_parallel_workers_train_mlp_and_cnn() {
    let dir = crate::util::scratch("dnn-replicas-server");
    for model in ["mlp", "cnn"] {
        let (two, three) = (
            dir.join(format!("{model}-2.tsv")),
            dir.join(format!("{model}-3.tsv")),
        );
        // A CNN small enough for the tiny 12 x 12 images.
        let shape: &[&str] = if model == "cnn" {
            &["--channels", "4,4", "--kernel", "3"]
        } else {
            &[]
        };
        let with = |extra: &[&str]| {
            let mut args = vec!["--model", model];
            args.extend(shape);
            args.extend(extra);
            cli(&args)
        };
        let out = with(&["--workers", "2", "--output", two.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        let json = dir.join(format!("{model}.json"));
        let out = with(&[
            "--workers",
            "1",
            "--processes",
            "3",
            "--replicas",
            "2",
            "--replica-workers",
            "1",
            "--parameter-servers",
            "1",
            "--output",
            three.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{model}: {}", stderr(&out));
        assert!(
            std::fs::read(&two).unwrap() == std::fs::read(&three).unwrap(),
            "{model}: 2 replicas and a server differ from 2 data-parallel workers"
        );
        let report: serde_json::Value = crate::util::json_file(&json);
        assert_eq!(report["params"]["weight_shards"], "2..3", "{model}");
    }
    // The optimizer's CNN plan for 3 machines: 1 server and 2 replicas of one worker.
    let plan = dir.join("cnn-plan.json");
    crate::util::example_plan("cnn", "3", "1", &plan);
    let out = crate::util::cnn_tiny(
        "4,4",
        &[
            "--workers",
            "1",
            "--processes",
            "3",
            "--plan",
            plan.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn the_message_timeout_is_an_option_and_zero_is_refused() {
    // (The library's tests make a receive time out; here the option reaches a run whose
    // workers exchange messages across processes, and a bad value is refused.)
    let out = cli(&[
        "--workers",
        "1",
        "--processes",
        "2",
        "--replicas",
        "1",
        "--partitions",
        "2,2,2",
        "--message-timeout",
        "30",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cli(&["--message-timeout", "0"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("--message-timeout"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn partitioning_options_that_do_not_fit_are_refused_before_any_work() {
    for (extra, want) in [
        (
            &["--partitions", "2,2"][..],
            "--partitions: 2 values for the network's 3 layers (l0,l1,l2)",
        ),
        (
            &["--model", "cnn", "--partitions", "1,1,1,1"][..],
            "--partitions: 4 values for the network's 7 layers (conv1,pool1,conv2,pool2,fc1,fc2,out)",
        ),
        (
            &["--plan", "/nonexistent/plan.json"][..],
            "/nonexistent/plan.json",
        ),
        (
            &["--plan", "p.json", "--replicas", "2"][..],
            "cannot be used with",
        ),
        (
            &[
                "--workers",
                "2",
                "--replicas",
                "1",
                "--partitions",
                "1,1,11",
            ][..],
            "at most 10",
        ),
    ] {
        let out = cli(extra);
        assert!(!out.status.success(), "{extra:?} succeeded");
        assert!(stderr(&out).contains(want), "{extra:?}: {}", stderr(&out));
    }
    let out = crate::util::iterstore(&["run", "mf", "--replicas", "2"]);
    assert!(stderr(&out).contains("--replicas is an option of `run dnn`"));
}
