//! `iterstore bench --apps logreg`: logistic regression's runs in every variant, its
//! L-BFGS limit and its scikit-learn peer (skipped where the peer environment is
//! missing) on generated images and on an svmlight file, with the objective, the test
//! accuracy and the iterations to the peer's objective in `report.json` and the Markdown,
//! and no bar in the verdict.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use super::bench_cli::{
    array, assert_close, bench, check_breakdown, read_json, run, run_names, stderr, stdout,
    TempDir, TABLE_HEADER, VARIANTS, VERDICT_HEADER,
};

/// `v` as a number in `(lo, hi]`.
fn within(v: &Value, lo: f64, hi: f64, what: &str) -> f64 {
    let x = v
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: {v} is not a number"));
    assert!(x > lo && x <= hi, "{what}: {x} not in ({lo}, {hi}]");
    x
}

/// The one peer of `app`: its result if it ran, `None` if it was skipped for want of
/// tools/peer-env's environment (a failure fails the test).
fn peer_result(app: &Value) -> Option<&Value> {
    let peers = array(app, "peers");
    assert_eq!(peers.len(), 1, "{peers:?}");
    match &peers[0] {
        Value::Object(o) if o.contains_key("Ran") => Some(&o["Ran"]),
        Value::Object(o) if o.contains_key("Skipped") => {
            let why = o["Skipped"].as_str().unwrap();
            assert!(why.contains("tools/peer-env"), "{why}");
            eprintln!("peer skipped: {why}");
            None
        }
        other => panic!("the peer failed: {other}"),
    }
}

/// Checks the peer's result: scikit-learn on `threads` threads, at most `max_iter`
/// iterations, its objective and test accuracy.
fn check_peer(p: &Value, max_iter: u64) {
    assert!(p["peer"].as_str().unwrap().contains("scikit-learn"), "{p}");
    assert!(p["peer"].as_str().unwrap().contains("2 threads"), "{p}");
    let iterations = p["iterations"].as_u64().unwrap();
    assert!(iterations >= 1 && iterations <= max_iter, "{p}");
    assert_eq!(p["metric"][0], "objective", "{p}");
    within(&p["metric"][1], 0.0, f64::INFINITY, "peer objective");
    within(&p["test_accuracy"], 0.0, 1.0, "peer accuracy");
    within(&p["per_iter_s"], 0.0, f64::INFINITY, "peer seconds");
    let note = p["note"].as_str().unwrap();
    assert!(note.contains(&format!("of at most {max_iter}")), "{note}");
}

#[test]
fn logreg_runs_every_variant_its_limit_and_scikit_learn() {
    let tmp = TempDir::new("logreg");
    let out_dir = tmp.join("out");
    let args = ["--apps", "logreg", "--synthetic", "tiny", "--iters", "3"];
    let out = bench(&args, &out_dir);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = read_json(&out_dir.join("report.json"));
    assert_eq!(report["inputs"]["logreg"], "synthetic tiny");
    let apps = array(&report, "apps");
    assert_eq!(apps.len(), 1);
    let app = &apps[0];
    assert_eq!(
        (app["app"].as_str(), app["work_unit"].as_str()),
        (Some("logreg"), Some("samples"))
    );
    assert_eq!(app["work"], 1000, "the tiny set's training images");
    assert_eq!(run_names(app), VARIANTS);

    // L-BFGS gives the same bits in every mode; the limit runs the same optimizer on
    // plain arrays, summed alike but not bit for bit (the shards reduce in their order).
    let generic = run(app, "generic");
    let objective = within(&generic["objective"], 0.0, 3.0, "objective");
    let accuracy = within(&generic["test_accuracy"], 0.1, 1.0, "accuracy");
    for r in array(app, "runs") {
        let name = r["variant"]["name"].as_str().unwrap();
        check_breakdown(&r["breakdown"], 2, name);
        assert_eq!(r["objective"], generic["objective"], "{name}");
        assert_eq!(r["test_accuracy"], accuracy, "{name}");
        assert_eq!(array(&r["report"], "iterations").len(), 3, "{name}");
    }
    let limit = &app["limit"];
    check_breakdown(&limit["breakdown"], 2, "limit");
    assert_close(
        limit["objective"].as_f64().unwrap(),
        objective,
        1e-9,
        "limit",
    );
    let limit_accuracy = within(&limit["test_accuracy"], 0.1, 1.0, "limit accuracy");
    assert!(
        (limit_accuracy - accuracy).abs() < 0.02,
        "{limit_accuracy} {accuracy}"
    );
    assert_eq!(array(limit, "objectives").len(), 3);

    let text = stdout(&out);
    let verdict = &array(&report, "verdicts")[0];
    for bar in ["max_vs_generic", "max_vs_limit", "max_vs_peer"] {
        assert!(verdict["target"][bar].is_null(), "{verdict}");
    }
    assert_eq!(verdict["met"], false, "no bar, nothing met: {verdict}");
    match peer_result(app) {
        Some(p) => {
            check_peer(p, 3);
            assert!(verdict["virtual_vs_peer"].is_number(), "{verdict}");
            assert!(text.contains("| peer: scikit-learn "), "{text}");
            assert!(text.contains("(test accuracy "), "{text}");
            let line = (text.lines())
                .find(|l| l.starts_with("Iterations to within 1e-4 of the peer's objective"))
                .unwrap_or_else(|| panic!("no iterations to the peer: {text}"));
            for name in VARIANTS.iter().chain(&["limit"]) {
                assert!(line.contains(&format!(" {name} ")), "{name}: {line}");
            }
        }
        None => assert!(verdict["virtual_vs_peer"].is_null()),
    }

    assert_eq!(text.matches(TABLE_HEADER).count(), 1, "{text}");
    assert!(
        text.contains("\nlogreg: synthetic tiny (1000 samples), 2 workers, 3 iterations"),
        "{text}"
    );
    assert_eq!(text.matches(VERDICT_HEADER).count(), 1, "{text}");
    let row = (text.lines())
        .find(|l| l.starts_with("| logreg | synthetic tiny | "))
        .unwrap_or_else(|| panic!("no verdict row: {text}"));
    assert!(row.ends_with(" | no bar set |"), "{row}");
    assert!(out_dir.join("breakdown-logreg.svg").is_file());
}

/// Writes a small svmlight file of 3 classes (labels 2, 5 and 9) over 6 features, the
/// class's own feature raised, and returns its path.
fn svmlight(dir: &Path) -> std::path::PathBuf {
    let mut text = String::new();
    for i in 0..90usize {
        let (class, label) = [(0, 2), (1, 5), (2, 9)][i % 3];
        let _ = write!(text, "{label}");
        for j in 0..6usize {
            let noise = ((i * 7 + j * 13) % 10) as f64 / 10.0;
            let value = noise + if j == 2 * class { 1.5 } else { 0.0 };
            let _ = write!(text, " {}:{value}", j + 1);
        }
        text.push('\n');
    }
    let path = dir.join("three.svm");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn an_svmlight_file_is_benchmarked_and_read_by_the_peer() {
    let tmp = TempDir::new("logreg-svm");
    let data = svmlight(&tmp.join(""));
    let out_dir = tmp.join("out");
    let data_arg = data.to_str().unwrap();
    let args = [
        "--apps",
        "logreg",
        "--logreg-data",
        data_arg,
        "--iters",
        "2",
        "--variants",
        "virtual",
    ];
    let out = bench(&args, &out_dir);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = read_json(&out_dir.join("report.json"));
    assert_eq!(report["inputs"]["logreg"], data_arg);
    let app = &array(&report, "apps")[0];
    assert_eq!(
        (app["dataset"].as_str(), app["work"].as_u64()),
        (Some("three.svm"), Some(90))
    );
    let virt = run(app, "virtual");
    assert_eq!(virt["report"]["dataset"]["classes"], 3);
    assert_eq!(virt["report"]["dataset"]["features"], 6);
    // No test file: no accuracy, the objective alone.
    assert!(virt["test_accuracy"].is_null(), "{virt}");
    if let Some(p) = peer_result(app) {
        assert_eq!(p["metric"][0], "objective", "{p}");
        assert!(p["test_accuracy"].is_null(), "{p}");
        let note = p["note"].as_str().unwrap();
        assert!(note.contains("of at most 2"), "{note}");
    }

    // The option needs the app benchmarked, and something to read.
    let refused = |args: &[&str], want: &str| {
        let out = bench(args, &tmp.join("refused"));
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr(&out).contains(want), "{args:?}: {}", stderr(&out));
        assert!(!tmp.join("refused").exists(), "nothing written: {args:?}");
    };
    refused(
        &["--apps", "mf", "--logreg-data", data_arg],
        "--logreg-data given but logreg is not benchmarked",
    );
    refused(
        &["--apps", "logreg", "--logreg-data", "/nonexistent/fmnist"],
        "--logreg-data /nonexistent/fmnist: no such file or directory",
    );
}
