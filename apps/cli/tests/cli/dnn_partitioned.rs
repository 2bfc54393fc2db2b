//! `iterstore run dnn` partitioned: a replica over two processes writes one worker's model,
//! a plan runs as it says, a dedicated parameter-server process changes no bit, and
//! partitioning options that do not fit are refused before any work. (The partitioned app
//! itself: the `iterstore-apps` crate's `tests/apps/dnn_partitioned.rs`.)

use crate::util::{dnn_tiny, stderr};

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
    assert!(stderr(&out).contains("unexpected argument '--replicas' found"));
}
