//! `iterstore run dnn` (the MLP): the report and model file, the launcher's 2 processes
//! against 1, and bad data and options named. (The app itself: the `iterstore-apps`
//! crate's `tests/apps/dnn.rs`.)

use crate::util::{dnn_tiny, iterstore, scratch, stderr};

/// `iterstore run dnn` on the tiny images with a small network, plus `extra`.
fn cli_tiny(extra: &[&str]) -> std::process::Output {
    dnn_tiny("16", extra)
}

#[test]
fn the_cli_writes_the_report_and_the_model() {
    let dir = scratch("dnn-cli");
    let (json, model) = (dir.join("report.json"), dir.join("model.tsv"));
    let out = cli_tiny(&[
        "--json",
        json.to_str().unwrap(),
        "--output",
        model.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("test accuracy"), "{stdout}");
    let report: serde_json::Value = crate::util::json_file(&json);
    let acc = report["test_accuracy"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&acc), "{report}");
    assert_eq!(report["app"], "dnn");
    assert_eq!(report["iterations"].as_array().unwrap().len(), 2);
    // Each epoch's test accuracy, in the report and on its progress line (what a tuner
    // driving the CLI reads while it runs).
    let last = report["iterations"][1]["test_accuracy"].as_f64().unwrap();
    assert_eq!(last, acc);
    let verbose = crate::util::dnn_tiny_logged("16", &[]);
    let log = stderr(&verbose);
    let line = log
        .lines()
        .find(|l| l.contains("dnn: iteration 1/2 took"))
        .unwrap_or_else(|| panic!("no progress line: {log}"));
    assert!(line.contains("(test accuracy "), "{line}");
    let text = std::fs::read_to_string(&model).unwrap();
    assert!(
        text.starts_with("# iterstore dnn model: mlp sizes=144-16-10 activation=relu\n"),
        "{}",
        &text[..80.min(text.len())]
    );
    // One line per output neuron of each layer after the comment.
    assert_eq!(text.lines().count(), 1 + 16 + 10);
}

#[test]
fn two_processes_write_the_bytes_of_one_process_of_two_workers() {
    let dir = scratch("dnn-cli-processes");
    let (one, two) = (dir.join("one.tsv"), dir.join("two.tsv"));
    let out = cli_tiny(&["--workers", "2", "--output", one.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cli_tiny(&[
        "--workers",
        "1",
        "--processes",
        "2",
        "--output",
        two.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(std::fs::read(&one).unwrap() == std::fs::read(&two).unwrap());
}

#[test]
fn bad_data_and_options_are_errors_that_say_what_is_wrong() {
    let dir = scratch("dnn-cli-errors");
    // A directory whose training images are not IDX: the file and the fault are named.
    let data = dir.join("fmnist");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("train-images-idx3-ubyte.gz"), b"not idx at all").unwrap();
    let out = iterstore(&["run", "dnn", "--data", data.to_str().unwrap()]);
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(
        e.contains("train-images-idx3-ubyte.gz: bad IDX magic"),
        "{e}"
    );
    let missing = dir.join("nowhere");
    let out = iterstore(&["run", "dnn", "--data", missing.to_str().unwrap()]);
    assert!(
        stderr(&out).contains("nowhere: not a directory"),
        "{}",
        stderr(&out)
    );
    for (args, want) in [
        (&["run", "dnn", "--model", "rnn"][..], "--model rnn"),
        (
            &["run", "dnn", "--activation", "tanh"][..],
            "--activation tanh",
        ),
        (&["run", "dnn", "--lr", "-1"][..], "learning rate -1"),
        (&["run", "dnn", "--momentum", "1"][..], "momentum 1"),
        (&["run", "dnn", "--hidden", "0"][..], "--hidden"),
        (
            &["run", "mf", "--hidden", "8"][..],
            "unexpected argument '--hidden' found",
        ),
        (
            &["run", "lda", "--lr", "0.1"][..],
            "unexpected argument '--lr' found",
        ),
        (&["run", "dnn", "--partition", "ratings"][..], "--partition"),
        (
            &["bench", "--apps", "dnn", "--dnn-data", "/nonexistent/dir"][..],
            "--dnn-data /nonexistent/dir: not a directory",
        ),
    ] {
        let out = iterstore(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let e = stderr(&out);
        assert!(e.contains(want), "{args:?}: {e}");
    }
}
