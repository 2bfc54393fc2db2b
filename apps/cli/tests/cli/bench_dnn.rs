//! `iterstore bench --apps dnn`: the DNN's runs, its limit and its PyTorch peer (skipped
//! where the peer environment is missing), with samples per second and test accuracy in
//! `report.json` and the Markdown, and issue 14's bar in the verdict.

use std::process::Command;

use serde_json::Value;

use super::bench_cli::{
    array, assert_close, check_breakdown, read_json, rest_mean, run, run_names, stderr, stdout,
    TempDir, TABLE_HEADER, VERDICT_HEADER,
};

/// `v` as a number in `(lo, hi]`.
fn within(v: &Value, lo: f64, hi: f64, what: &str) -> f64 {
    let x = v
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: {v} is not a number"));
    assert!(x > lo && x <= hi, "{what}: {x} not in ({lo}, {hi}]");
    x
}

#[test]
fn dnn_reports_samples_per_second_and_accuracy_against_its_peer() {
    let tmp = TempDir::new("dnn");
    let out_dir = tmp.join("out");
    // Two variants keep it fast; every variant is the same code path as for the other apps.
    let args = [
        "--apps",
        "dnn",
        "--synthetic",
        "tiny",
        "--iters",
        "2",
        "--variants",
        "generic,virtual",
    ];
    // PyTorch's OpenMP threads sleep rather than spin while they wait: with the rest of
    // the suite running beside it, spinning makes the peer many times slower.
    let out = Command::new(env!("CARGO_BIN_EXE_iterstore"))
        .arg("bench")
        .args(args)
        .arg("--out")
        .arg(&out_dir)
        .env("OMP_WAIT_POLICY", "PASSIVE")
        .output()
        .expect("the iterstore binary runs");
    assert!(out.status.success(), "{}", stderr(&out));
    let report = read_json(&out_dir.join("report.json"));
    assert_eq!(report["inputs"]["dnn"], "synthetic tiny");
    let apps = array(&report, "apps");
    assert_eq!(apps.len(), 1);
    let app = &apps[0];
    assert_eq!(
        (app["app"].as_str(), app["work_unit"].as_str()),
        (Some("dnn"), Some("samples"))
    );
    assert_eq!(app["work"], 1000, "the tiny set's training images");
    assert_eq!(run_names(app), ["generic", "virtual"]);

    // BSP: both modes and the limit train the same weights, so the same loss and accuracy.
    let generic = run(app, "generic");
    let accuracy = within(&generic["test_accuracy"], 0.1, 1.0, "generic accuracy");
    for r in array(app, "runs") {
        let name = r["variant"]["name"].as_str().unwrap();
        check_breakdown(&r["breakdown"], 1, name);
        assert_eq!(r["objective"], generic["objective"], "{name}");
        assert_eq!(r["test_accuracy"], accuracy, "{name}");
        let rate = within(&r["samples_per_s"], 0.0, f64::INFINITY, name);
        assert_close(rate * rest_mean(&r["breakdown"]), 1000.0, 1e-9, name);
    }
    let limit = &app["limit"];
    check_breakdown(&limit["breakdown"], 1, "limit");
    assert_eq!(limit["test_accuracy"], accuracy, "limit");
    let objective = generic["objective"].as_f64().unwrap();
    assert_close(
        limit["objective"].as_f64().unwrap(),
        objective,
        1e-9,
        "limit",
    );
    within(&limit["samples_per_s"], 0.0, f64::INFINITY, "limit");

    // The peer ran (then it trained the same samples), or was skipped naming tools/peer-env.
    let peers = array(app, "peers");
    assert_eq!(peers.len(), 1, "{peers:?}");
    let text = stdout(&out);
    let verdict = &array(&report, "verdicts")[0];
    assert_eq!(verdict["target"]["max_vs_peer"], 2.0);
    assert!(verdict["target"]["max_vs_generic"].is_null());
    assert!(verdict["target"]["max_vs_limit"].is_null());
    let virt = rest_mean(&run(app, "virtual")["breakdown"]);
    match &peers[0] {
        Value::Object(o) if o.contains_key("Ran") => {
            let p = &o["Ran"];
            assert!(p["peer"].as_str().unwrap().contains("2 threads"), "{p}");
            assert_eq!(p["iterations"], 2, "{p}");
            assert_eq!(p["metric"][0], "test_accuracy", "{p}");
            within(&p["metric"][1], 0.1, 1.0, "peer accuracy");
            let rate = within(&p["samples_per_s"], 0.0, f64::INFINITY, "peer");
            let per_iter = p["per_iter_s"].as_f64().unwrap();
            assert_close(rate * per_iter, 1000.0, 1e-6, "peer samples");
            let vs = verdict["virtual_vs_peer"].as_f64().unwrap();
            // Times in the JSON are rounded to the nanosecond.
            assert_close(vs, virt / per_iter, 1e-6, "virtual / peer");
            assert_eq!(verdict["met"], vs <= 2.0, "{verdict}");
            assert!(text.contains("| peer: torch "), "{text}");
            assert!(text.contains(", peer torch "), "{text}");
        }
        Value::Object(o) if o.contains_key("Skipped") => {
            let why = o["Skipped"].as_str().unwrap();
            assert!(why.contains("tools/peer-env"), "{why}");
            eprintln!("peer skipped: {why}");
            assert!(verdict["virtual_vs_peer"].is_null());
            assert_eq!(verdict["met"], false, "no peer, no verdict");
        }
        other => panic!("the peer failed: {other}"),
    }

    // The Markdown: the table with accuracies, the samples per second, the verdict row.
    assert_eq!(text.matches(TABLE_HEADER).count(), 1, "{text}");
    assert!(
        text.contains("\ndnn: synthetic tiny (1000 samples), 2 workers"),
        "{text}"
    );
    assert!(text.contains("(test accuracy "), "{text}");
    assert!(text.contains("\nTraining samples per second"), "{text}");
    assert_eq!(text.matches(VERDICT_HEADER).count(), 1, "{text}");
    assert!(text.contains("\n| dnn | synthetic tiny | "), "{text}");
    // No bar against generic or the limit; issue 14's against the peer.
    let row = text.lines().find(|l| l.starts_with("| dnn | ")).unwrap();
    assert_eq!(row.matches(" | - | ").count(), 2, "{row}");
    assert!(row.contains(" | ≤ 2.0 | "), "{row}");
    assert!(out_dir.join("breakdown-dnn.svg").is_file());
}

#[test]
fn the_cnn_is_benchmarked_without_a_limit_and_the_model_option_needs_dnn() {
    let tmp = TempDir::new("cnn");
    let out_dir = tmp.join("out");
    let out = Command::new(env!("CARGO_BIN_EXE_iterstore"))
        .arg("bench")
        .args([
            "--apps",
            "dnn",
            "--dnn-model",
            "cnn",
            "--synthetic",
            "small",
        ])
        .args([
            "--iters",
            "2",
            "--variants",
            "virtual",
            "--no-peers",
            "--out",
        ])
        .arg(&out_dir)
        .output()
        .expect("the iterstore binary runs");
    assert!(out.status.success(), "{}", stderr(&out));
    let report = read_json(&out_dir.join("report.json"));
    let app = &array(&report, "apps")[0];
    assert_eq!(app["dataset"], "synthetic small, cnn");
    assert_eq!(app["work"], 6000, "the small set's training images");
    assert!(
        app["limit"].is_null(),
        "the CNN has no limit: {}",
        app["limit"]
    );
    let virt = run(app, "virtual");
    within(&virt["test_accuracy"], 0.1, 1.0, "accuracy");
    within(
        &virt["samples_per_s"],
        0.0,
        f64::INFINITY,
        "samples per second",
    );
    let sizes = &virt["report"]["params"]["sizes"];
    assert_eq!(
        sizes, "28x28-c5x16-p2-c5x32-p2-128-10",
        "run dnn --model cnn's network"
    );
    assert!(
        stderr(&out).contains("no limit implementation"),
        "{}",
        stderr(&out)
    );
    let text = stdout(&out);
    let line = text
        .lines()
        .find(|l| l.starts_with("Training samples per second"))
        .unwrap_or_else(|| panic!("no samples per second: {text}"));
    assert!(
        line.contains(": virtual ") && !line.contains("limit"),
        "{line}"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_iterstore"))
        .args(["bench", "--apps", "mf", "--dnn-model", "cnn"])
        .output()
        .expect("the iterstore binary runs");
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("--dnn-model given but dnn is not benchmarked"),
        "{}",
        stderr(&out)
    );
}
