//! The DNN on the store: it learns the synthetic images, equals the sequential reference
//! (any number of workers) bit for bit under BSP, gives the same weights in every store
//! mode and on 2 processes of 1 worker as on 1 of 2, still learns under SSP, and stops
//! with a clear error when it diverges. (Through the CLI: the CLI crate's `tests/cli/dnn.rs`.)

use iterstore::{Mode, Staleness};
use iterstore_algo::dnn::mlp::reference;
use iterstore_algo::dnn::{DnnConfig, Mlp};
use iterstore_apps::dnn::{run, run_in, DnnOutcome};
use iterstore_apps::{AppConfig, AppError};
use iterstore_data::{ImageSet, ImageSpec};

use crate::dnn_checks::{equals_reference, losses, processes_agree, NetApp};
use crate::util::{bsp, MODES};

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
