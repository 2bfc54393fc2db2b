//! The CNN's step against central finite differences of its loss, its reference trainer on
//! the synthetic images, and its default shape against the performance model's `cnn`.

use super::*;
use iterstore_data::ImageSpec;

/// Two stages on 8 × 8 images (8 → 7 → 3 → 2 → 1), a hidden layer of 4, 3 classes.
fn small(activation: Activation) -> (CnnSpec, Images) {
    let mut set = ImageSpec {
        train: 7,
        rows: 8,
        cols: 8,
        ..ImageSpec::preset("tiny").unwrap()
    }
    .generate();
    set.train.labels.iter_mut().for_each(|l| *l %= 3);
    let cfg = DnnConfig {
        channels: vec![2, 3],
        kernel: 2,
        hidden: vec![4],
        activation,
        ..DnnConfig::default()
    };
    let spec = CnnSpec::new(8, 8, &cfg, 3);
    spec.check().unwrap();
    (spec, set.train)
}

#[test]
fn the_step_is_minus_rate_times_the_gradient() {
    for act in [Activation::Relu, Activation::Logistic] {
        let (spec, images) = small(act);
        let m = Cnn::init(&spec, 5);
        crate::dnn::network::checks::step_is_minus_the_gradient(m, &images, &format!("{act:?}"));
    }
}

/// The tiny preset at pixel noise 0.05 instead of 0.35: its class prototypes are white
/// noise without spatial structure, which a linear template (the MLP) still finds under
/// heavy noise but pooled convolution features do not (chance accuracy at 0.35).
fn clean_tiny() -> iterstore_data::ImageSet {
    ImageSpec {
        noise_std: 0.05,
        ..ImageSpec::preset("tiny").unwrap()
    }
    .generate()
}

#[test]
fn the_reference_learns_clean_synthetic_images() {
    let set = clean_tiny();
    let cfg = DnnConfig {
        channels: vec![6, 12],
        kernel: 3,
        hidden: vec![32],
        learning_rate: 0.05,
        batch: 20,
        seed: 7,
        ..DnnConfig::default()
    };
    let (m, losses) = reference(&set.train, set.classes, &cfg, 2, 4);
    assert!(losses[3] < losses[0], "{losses:?}");
    let acc = m.accuracy(&set.test);
    assert!(acc > 0.85, "accuracy {acc}, losses {losses:?}");
}

#[test]
fn shapes_that_do_not_fit_are_named() {
    let cfg = DnnConfig::cnn();
    let e = CnnSpec::new(12, 12, &cfg, 10).check().unwrap_err();
    assert!(e.contains("convolution 2 (5x5)"), "{e}");
    assert!(e.contains("4x4 input"), "{e}");
}

/// The default CNN on Fashion-MNIST is the performance model's built-in `cnn`: the same
/// layers, multiply-adds and weights (the model counts no biases).
#[test]
fn the_default_is_the_performance_model_s_cnn() {
    let spec = CnnSpec::new(28, 28, &DnnConfig::cnn(), 10);
    assert_eq!(spec.text(), "28x28-c5x16-p2-c5x32-p2-128-10");
    let shapes = iterstore_perf::model::shapes(&iterstore_perf::builtin::cnn());
    assert_eq!(shapes.len(), 2 * spec.stages() + spec.hidden.len() + 1);
    for i in 0..spec.stages() {
        let (conv, pool) = (&shapes[2 * i], &shapes[2 * i + 1]);
        let g = spec.conv(i);
        assert_eq!(conv.connections, g.muladds() as f64, "{}", conv.name);
        assert_eq!(conv.params, g.weights_len() as f64, "{}", conv.name);
        assert_eq!(conv.neurons, g.output_len() as f64, "{}", conv.name);
        assert_eq!(pool.connections, spec.pool(i).connections() as f64);
        assert_eq!(pool.neurons, spec.pool(i).output_len() as f64);
    }
    let fc = spec.fc_sizes();
    for (f, shape) in shapes[2 * spec.stages()..].iter().enumerate() {
        assert_eq!(shape.neurons, fc[f + 1] as f64, "{}", shape.name);
        assert_eq!(shape.params, (fc[f] * fc[f + 1]) as f64, "{}", shape.name);
    }
    assert_eq!(
        spec.parameters(),
        16 * 26 + 32 * (16 * 25 + 1) + 128 * (512 + 1) + 10 * 129
    );
}
