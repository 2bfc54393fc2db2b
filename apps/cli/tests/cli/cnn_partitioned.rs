//! `iterstore run dnn --model cnn` partitioned: a plan that splits the convolutions runs as
//! it says over processes, and a partitioning by hand names the layers it expects. (The
//! partitioned app itself: the `iterstore-apps` crate's `tests/apps/cnn_partitioned.rs`.)

use crate::util::stderr;

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
