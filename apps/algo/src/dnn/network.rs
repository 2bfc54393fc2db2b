//! [`Network`]: what the store-backed app (`iterstore_apps::dnn`) needs of a network, so that
//! one app trains the [`Mlp`] and the [`Cnn`] alike: the weights as layers of table rows,
//! the initial value of a row, one mini-batch's step over a worker's scratch, and test
//! accuracy. It adds no maths: each method forwards to the network's own module.

use super::activation::Activation;
use super::cnn::{self, Cnn};
use super::config::DnnConfig;
use super::mlp::{self, add_momentum, clocks, epoch_order, mini_batch, Mlp};
use iterstore_data::Images;

/// A network whose weights are layers of rows (one table row each) and that one worker can
/// train a mini-batch of.
pub trait Network: Clone + Send + Sync {
    /// A worker's buffers for a mini-batch.
    type Scratch: Clone + Send;

    /// `mlp` or `cnn`, as the reports and the model file name it.
    fn kind(&self) -> &'static str;
    /// The shape as the reports write it (e.g. `784-256-10`).
    fn sizes_text(&self) -> String;
    /// The hidden layers' activation.
    fn activation(&self) -> Activation;
    /// Weights and biases in all.
    fn parameters(&self) -> usize;
    /// Weight layers.
    fn layer_count(&self) -> usize;
    /// Rows of layer `l`.
    fn rows(&self, l: usize) -> usize;
    /// Floats per row of layer `l`.
    fn width(&self, l: usize) -> usize;
    /// Each layer's weights, `rows(l) × width(l)` row-major.
    fn weights(&self) -> &[Vec<f32>];
    /// The same, to write rows into.
    fn weights_mut(&mut self) -> &mut [Vec<f32>];
    /// The initial value of row `row` of layer `l`, keyed by `seed`, `l` and `row` only.
    fn init_row(&self, seed: u64, l: usize, row: usize, out: &mut [f32]);
    /// Buffers for mini-batches of up to `capacity` samples.
    fn scratch(&self, capacity: usize) -> Self::Scratch;
    /// One mini-batch's step `−rate · Σ ∇` into `deltas`; returns the summed
    /// cross-entropy.
    fn gradient_step(
        &self,
        images: &Images,
        which: &[u32],
        rate: f32,
        s: &mut Self::Scratch,
        deltas: &mut [Vec<f32>],
    ) -> f64;
    /// The fraction of `images` classified right.
    fn accuracy(&self, images: &Images) -> f64;
    /// After [`gradient_step`](Self::gradient_step) over `b` samples: layer `l`'s error
    /// terms (`b × rows(l)`) and inputs (`b × width(l)`), both sample-major, whose outer
    /// products summed times `−rate` are its step; `None` if the layer is not fully
    /// connected (its step has no such factors).
    fn factors<'s>(
        &self,
        s: &'s Self::Scratch,
        l: usize,
        b: usize,
    ) -> Option<(&'s [f32], &'s [f32])>;
}

/// `impl Network` for a network type whose module (`$m`) has the same shape of
/// functions (`init_row`, `Scratch::new`, `gradient_step`) and whose weights and spec sit
/// in the same fields: the trait is a delegation, written once.
macro_rules! impl_network {
    ($ty:ident, $m:ident, $kind:literal) => {
        impl Network for $ty {
            type Scratch = $m::Scratch;

            fn kind(&self) -> &'static str {
                $kind
            }
            fn sizes_text(&self) -> String {
                self.spec.text()
            }
            fn activation(&self) -> Activation {
                self.spec.activation
            }
            fn parameters(&self) -> usize {
                self.spec.parameters()
            }
            fn layer_count(&self) -> usize {
                self.spec.layers()
            }
            fn rows(&self, l: usize) -> usize {
                self.spec.rows(l)
            }
            fn width(&self, l: usize) -> usize {
                self.spec.width(l)
            }
            fn weights(&self) -> &[Vec<f32>] {
                &self.layers
            }
            fn weights_mut(&mut self) -> &mut [Vec<f32>] {
                &mut self.layers
            }
            fn init_row(&self, seed: u64, l: usize, row: usize, out: &mut [f32]) {
                $m::init_row(&self.spec, seed, l, row, out);
            }
            fn scratch(&self, capacity: usize) -> Self::Scratch {
                $m::Scratch::new(&self.spec, capacity)
            }
            fn gradient_step(
                &self,
                images: &Images,
                which: &[u32],
                rate: f32,
                s: &mut Self::Scratch,
                deltas: &mut [Vec<f32>],
            ) -> f64 {
                $m::gradient_step(self, images, which, rate, s, deltas)
            }
            fn accuracy(&self, images: &Images) -> f64 {
                $ty::accuracy(self, images)
            }
            fn factors<'s>(
                &self,
                s: &'s Self::Scratch,
                l: usize,
                b: usize,
            ) -> Option<(&'s [f32], &'s [f32])> {
                $m::factors(self, s, l, b)
            }
        }
    };
}

impl_network!(Mlp, mlp, "mlp");
impl_network!(Cnn, cnn, "cnn");

/// Zeroed weights of `layers` layers, layer `l` of `size(l)` floats.
pub(crate) fn zero_layers(layers: usize, size: impl Fn(usize) -> usize) -> Vec<Vec<f32>> {
    (0..layers).map(|l| vec![0.0; size(l)]).collect()
}

/// Sets every row of `layers` (layer `l`'s rows `width(l)` floats wide) by `init(l, r,
/// row)`.
pub(crate) fn init_rows(
    layers: &mut [Vec<f32>],
    width: impl Fn(usize) -> usize,
    mut init: impl FnMut(usize, usize, &mut [f32]),
) {
    for (l, layer) in layers.iter_mut().enumerate() {
        for (r, row) in layer.chunks_exact_mut(width(l)).enumerate() {
            init(l, r, row);
        }
    }
}

/// `dst += src`, layer by layer, element by element.
pub fn add_layers(dst: &mut [Vec<f32>], src: &[Vec<f32>]) {
    /// Elements added per step: fixed-size lanes, so the compiler emits vector adds.
    const LANES: usize = 8;
    for (d, s) in dst.iter_mut().zip(src) {
        debug_assert_eq!(d.len(), s.len());
        let mut d = d.chunks_exact_mut(LANES);
        let mut s = s.chunks_exact(LANES);
        for (d, s) in (&mut d).zip(&mut s) {
            for k in 0..LANES {
                d[k] += s[k];
            }
        }
        for (d, s) in d.into_remainder().iter_mut().zip(s.remainder()) {
            *d += *s;
        }
    }
}

/// The fraction of `images` classified right (0 without images), `chunk` images at a
/// time: `right_in(range)` counts the right ones among images `range` ([`right_answers`]).
pub(crate) fn accuracy_by_chunks(
    images: &Images,
    chunk: usize,
    mut right_in: impl FnMut(std::ops::Range<usize>) -> usize,
) -> f64 {
    let n = images.len();
    if n == 0 {
        return 0.0;
    }
    let right: usize = (0..n)
        .step_by(chunk)
        .map(|start| right_in(start..(start + chunk).min(n)))
        .sum();
    right as f64 / n as f64
}

/// How many rows of `logits` (`classes` wide) have their largest value at their label.
pub(crate) fn right_answers(logits: &[f32], classes: usize, labels: &[u8]) -> usize {
    super::loss::argmax_rows(logits, classes)
        .zip(labels)
        .filter(|(p, &l)| *p == usize::from(l))
        .count()
}

/// Trains `m` (its initial weights) on `train` sequentially, as the store-backed app does
/// with `workers` workers under BSP: each mini-batch's step is the sum of the workers'
/// steps on the weights before it, each folded into the worker's velocity, added in
/// worker order; for `epochs` epochs. Returns the weights and each epoch's mean training
/// cross-entropy. The oracle of the app's tests, for either network
/// ([`mlp::reference`], [`cnn::reference`]).
pub fn train_reference<N: Network>(
    mut m: N,
    train: &Images,
    cfg: &DnnConfig,
    workers: usize,
    epochs: usize,
) -> (N, Vec<f64>) {
    let n = train.len();
    let clocks = clocks(n, cfg.batch);
    let mut orders = vec![Vec::new(); workers];
    let mut s = m.scratch(n.div_ceil(workers).div_ceil(clocks) + 1);
    let zeros: Vec<Vec<f32>> = m.weights().iter().map(|l| vec![0.0; l.len()]).collect();
    let mut steps = vec![zeros; workers];
    let mut velocities = steps.clone();
    let mut losses = Vec::with_capacity(epochs);
    for epoch in 0..epochs {
        for (w, order) in orders.iter_mut().enumerate() {
            epoch_order(n, workers, w, cfg.seed, epoch as u64, order);
        }
        let mut loss = 0.0;
        let rate = cfg.rate(epoch as u64);
        for b in 0..clocks {
            for (w, step) in steps.iter_mut().enumerate() {
                let which = mini_batch(&orders[w], clocks, b);
                loss += m.gradient_step(train, which, rate, &mut s, step);
                add_momentum(&mut velocities[w], step, cfg.momentum);
            }
            for step in &velocities {
                add_layers(m.weights_mut(), step);
            }
        }
        losses.push(loss / n as f64);
    }
    (m, losses)
}

/// Shared test checks of a [`Network`].
#[cfg(test)]
pub(crate) mod checks {
    use super::Network;
    use iterstore_data::Images;

    /// The summed cross-entropy of samples `which` under `m`.
    fn loss_of<N: Network>(m: &N, images: &Images, which: &[u32]) -> f64 {
        let mut s = m.scratch(which.len());
        let mut d: Vec<Vec<f32>> = m.weights().iter().map(|l| vec![0.0; l.len()]).collect();
        m.gradient_step(images, which, 0.0, &mut s, &mut d)
    }

    /// Asserts that `m`'s step at rate 1 on samples `which` is minus the gradient of the
    /// summed cross-entropy, against central finite differences (in f64 of the f32 loss)
    /// on a few weights of every layer, biases included. Biases are set to 0.1 first, so
    /// that fewer ReLUs sit on their kink; `label` names the case in a failure.
    pub(crate) fn step_is_minus_the_gradient<N: Network>(mut m: N, images: &Images, label: &str) {
        for l in 0..m.layer_count() {
            let w = m.width(l);
            m.weights_mut()[l]
                .chunks_exact_mut(w)
                .for_each(|row| row[w - 1] = 0.1);
        }
        let which = [0u32, 3, 6, 2];
        let mut s = m.scratch(4);
        let mut d: Vec<Vec<f32>> = m.weights().iter().map(|l| vec![0.0; l.len()]).collect();
        m.gradient_step(images, &which, 1.0, &mut s, &mut d);
        for (l, step) in d.iter().enumerate() {
            let w = m.width(l);
            for idx in [0, w - 1, w + 1, m.rows(l) * w - 1] {
                let at = |x: f32| {
                    let mut m2 = m.clone();
                    m2.weights_mut()[l][idx] += x;
                    loss_of(&m2, images, &which)
                };
                let analytic = -f64::from(step[idx]);
                // A ReLU kink or a max-pooling tie within h of the point bends a central
                // difference, so the closest of a few step sizes counts.
                let numeric: Vec<f64> = [1e-2f32, 3e-3, 1e-3, 3e-4]
                    .iter()
                    .map(|&h| (at(h) - at(-h)) / f64::from(2.0 * h))
                    .collect();
                assert!(
                    numeric
                        .iter()
                        .any(|n| (n - analytic).abs() < 2e-2 * (1.0 + analytic.abs())),
                    "{label} layer {l} weight {idx}: numeric {numeric:?}, analytic {analytic}"
                );
            }
        }
    }
}
