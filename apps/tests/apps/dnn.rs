//! The DNN on the store: it learns the synthetic images, equals the sequential reference
//! (any number of workers) bit for bit under BSP, gives the same weights in every store
//! mode and on 2 processes of 1 worker as on 1 of 2, still learns under SSP, and stops
//! with a clear error when it diverges. Through the CLI: the report and model file, the
//! launcher's 2 processes against 1, and bad data and options named.

use iterstore::{Mode, Staleness};
use iterstore_apps::apps::dnn::{run, run_in, DnnOutcome};
use iterstore_apps::apps::{AppConfig, AppError};
use iterstore_apps::data::{ImageSet, ImageSpec};
use iterstore_apps::dnn::mlp::reference;
use iterstore_apps::dnn::{DnnConfig, Mlp};

use crate::dnn_checks::{equals_reference, losses, processes_agree, NetApp};
use crate::util::{bsp, dnn_tiny, iterstore, scratch, stderr, MODES};

fn tiny() -> ImageSet {
    ImageSpec::preset("tiny").unwrap().generate()
}

/// A small network that learns the tiny images in a few epochs.
fn params() -> DnnConfig {
    DnnConfig {
        hidden: vec![32],
        learning_rate: 0.05,
        momentum: 0.9,
        batch: 20,
        seed: 7,
        ..DnnConfig::default()
    }
}

/// The MLP's entry points for the shared checks.
const MLP: NetApp<Mlp> = NetApp {
    run,
    run_in,
    reference,
};

#[test]
fn the_synthetic_images_are_learned() {
    let data = tiny();
    let out = run(&bsp(Mode::Virtual, 2, 5), &params(), &data).unwrap();
    let loss = losses(&out);
    assert!(loss[4] < 0.5 * loss[0], "{loss:?}");
    let acc = out.report.test_accuracy.unwrap();
    // Chance is 10 %.
    assert!(acc >= 0.85, "test accuracy {acc}, losses {loss:?}");
    assert_eq!(out.report.test_accuracy_per_iteration.len(), 5);
    assert_eq!(out.model.accuracy(&data.test), acc);
    let json: serde_json::Value = serde_json::from_str(&out.report.to_json()).unwrap();
    assert_eq!(json["test_accuracy"], acc);
    assert_eq!(json["params"]["sizes"], "144-32-10");
    assert_eq!(json["objective_name"], "train_cross_entropy");
}

#[test]
fn the_store_equals_the_sequential_reference_bit_for_bit() {
    equals_reference(&MLP, &tiny(), &params(), &[1, 3]);
}

#[test]
fn every_mode_gives_the_same_weights_and_losses() {
    let data = tiny();
    let outs: Vec<DnnOutcome> = MODES
        .iter()
        .map(|&mode| run(&bsp(mode, 2, 3), &params(), &data).unwrap())
        .collect();
    for (mode, out) in MODES.iter().zip(&outs).skip(1) {
        assert!(
            out.model == outs[0].model,
            "{mode:?} weights differ from generic"
        );
        assert_eq!(losses(out), losses(&outs[0]), "{mode:?}");
        assert_eq!(out.report.test_accuracy, outs[0].report.test_accuracy);
    }
    // Every access of the virtual run followed the pattern.
    let store = &outs[2].report.store;
    assert_eq!(store.unplanned_accesses, 0);
    assert!(store.tape_accesses > 0);
}

#[test]
fn two_processes_of_one_worker_compute_what_one_of_two_computes() {
    processes_agree(&MLP, &tiny(), &params(), &MODES);
}

#[test]
fn ssp_still_learns() {
    let data = tiny();
    let cfg = AppConfig {
        staleness: Staleness::Bounded(2),
        ..bsp(Mode::Virtual, 2, 5)
    };
    let out = run(&cfg, &params(), &data).unwrap();
    let acc = out.report.test_accuracy.unwrap();
    assert!(acc >= 0.8, "test accuracy {acc} under SSP");
}

#[test]
fn a_diverging_run_stops_with_an_error() {
    let data = tiny();
    let wild = DnnConfig {
        learning_rate: 1e30,
        ..params()
    };
    let e = run(&bsp(Mode::Virtual, 2, 3), &wild, &data).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, AppError::Diverged { app: "dnn", .. }), "{text}");
    assert!(text.contains("training cross-entropy is"), "{text}");
    assert!(text.contains("--lr"), "{text}");
}

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
            "--hidden is an option of `run dnn`, not of `run mf`",
        ),
        (
            &["run", "lda", "--lr", "0.1"][..],
            "--lr is an option of `run mf` and `run dnn`, not of `run lda`",
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
