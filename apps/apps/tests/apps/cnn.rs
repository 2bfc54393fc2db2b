//! The CNN on the store: it learns the synthetic images (at low noise, see [`tiny`]), equals the sequential reference
//! bit for bit under BSP (1 and 2 workers), gives the same weights in every store mode and
//! on 2 processes of 1 worker as on 1 of 2. (Through the CLI: the CLI crate's
//! `tests/cli/cnn.rs`.)

use iterstore::Mode;
use iterstore_algo::dnn::cnn::reference;
use iterstore_algo::dnn::{Cnn, DnnConfig};
use iterstore_apps::dnn::{run_cnn, run_cnn_in, DnnOutcome};
use iterstore_data::{ImageSet, ImageSpec};

use crate::dnn_checks::{equals_reference, losses, processes_agree, NetApp};
use crate::util::{bsp, MODES};

/// The tiny preset at pixel noise 0.05 (not 0.35): its class prototypes are white noise
/// without spatial structure, which pooled convolution features cannot find under the
/// preset's noise (chance accuracy), unlike the MLP's linear templates.
pub(crate) fn tiny() -> ImageSet {
    ImageSpec {
        noise_std: 0.05,
        ..ImageSpec::preset("tiny").unwrap()
    }
    .generate()
}

/// A small CNN for the 12 × 12 tiny images: 12 → conv 3 → 10 → pool → 5 → conv 3 → 3 →
/// pool → 1, 12 channels into a hidden layer of 32.
pub(crate) fn params() -> DnnConfig {
    DnnConfig {
        channels: vec![6, 12],
        kernel: 3,
        hidden: vec![32],
        learning_rate: 0.05,
        momentum: 0.9,
        batch: 20,
        seed: 7,
        ..DnnConfig::default()
    }
}

/// The CNN's entry points for the shared checks.
const CNN: NetApp<Cnn> = NetApp {
    run: run_cnn,
    run_in: run_cnn_in,
    reference,
};

#[test]
fn the_synthetic_images_are_learned() {
    let data = tiny();
    let out = run_cnn(&bsp(Mode::Virtual, 2, 4), &params(), &data).unwrap();
    let loss = losses(&out);
    assert!(loss[3] < 0.5 * loss[0], "{loss:?}");
    let acc = out.report.test_accuracy.unwrap();
    // Chance is 10 %.
    assert!(acc >= 0.85, "test accuracy {acc}, losses {loss:?}");
    assert_eq!(out.model.accuracy(&data.test), acc);
    let json: serde_json::Value = serde_json::from_str(&out.report.to_json()).unwrap();
    assert_eq!(json["params"]["model"], "cnn");
    assert_eq!(json["params"]["sizes"], "12x12-c3x6-p2-c3x12-p2-32-10");
}

#[test]
fn the_store_equals_the_sequential_reference_bit_for_bit() {
    equals_reference(&CNN, &tiny(), &params(), &[1, 2]);
}

#[test]
fn every_mode_gives_the_same_weights_and_losses() {
    let data = tiny();
    let outs: Vec<DnnOutcome<Cnn>> = MODES
        .iter()
        .map(|&mode| run_cnn(&bsp(mode, 2, 2), &params(), &data).unwrap())
        .collect();
    for (mode, out) in MODES.iter().zip(&outs).skip(1) {
        assert!(
            out.model == outs[0].model,
            "{mode:?} weights differ from generic"
        );
        assert_eq!(losses(out), losses(&outs[0]), "{mode:?}");
    }
    let store = &outs[2].report.store;
    assert_eq!(store.unplanned_accesses, 0);
    assert!(store.tape_accesses > 0);
}

#[test]
fn two_processes_of_one_worker_compute_what_one_of_two_computes() {
    processes_agree(&CNN, &tiny(), &params(), &[Mode::Virtual]);
}
