//! A multi-layer perceptron with a softmax output: its shape ([`MlpSpec`]), its weights
//! ([`Mlp`]), the initial weights ([`init_row`]), one mini-batch's gradient step
//! ([`gradient_step`]) over a worker's [`Scratch`], test accuracy ([`Mlp::accuracy`]) and a
//! sequential trainer ([`reference()`]), the test oracle of the store-backed app.
//!
//! **Layout.** Layer `l` maps `n_l` inputs to `n_{l+1}` outputs. Its weights are
//! `n_{l+1}` rows of `n_l + 1` floats: one row per output neuron, its input weights then
//! its bias, so that a row is what the store keeps as one table row. Activations carry a
//! constant 1 after their `n_l` values, so the bias is one more column of the GEMM
//! ([`super::kernels`]): `z = [x 1] · Wᵀ`. Hidden layers apply [`Activation`], the last
//! layer's `z` are the logits of [`super::loss::softmax_cross_entropy`]. Inputs are pixels
//! scaled to `[0, 1]`.
//!
//! It knows nothing of the store: the app reads rows into an [`Mlp`]'s layers and UPDATEs
//! the deltas [`gradient_step`] writes.

use super::activation::Activation;
use super::config::DnnConfig;
use super::kernels;
use super::loss::softmax_cross_entropy;
use super::network::{accuracy_by_chunks, init_rows, right_answers, zero_layers};
use crate::{partition, Rng64};
use iterstore_data::Images;

/// The shape of an MLP: layer sizes from the input to the classes, and the hidden
/// activation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MlpSpec {
    /// Neurons per layer: inputs, each hidden layer, classes (at least two entries).
    pub sizes: Vec<usize>,
    /// The hidden layers' activation.
    pub activation: Activation,
}

impl MlpSpec {
    /// The MLP of `cfg` for `inputs` pixels and `classes` classes.
    pub fn new(inputs: usize, cfg: &DnnConfig, classes: usize) -> Self {
        let mut sizes = vec![inputs];
        sizes.extend(&cfg.hidden);
        sizes.push(classes);
        Self {
            sizes,
            activation: cfg.activation,
        }
    }

    /// Weight layers (one fewer than [`MlpSpec::sizes`]).
    pub fn layers(&self) -> usize {
        self.sizes.len() - 1
    }

    /// Rows of layer `l`'s weights: its output neurons.
    pub fn rows(&self, l: usize) -> usize {
        self.sizes[l + 1]
    }

    /// Floats per row of layer `l`: its inputs and the bias.
    pub fn width(&self, l: usize) -> usize {
        self.sizes[l] + 1
    }

    /// The classes (the last layer's size).
    pub fn classes(&self) -> usize {
        self.sizes[self.layers()]
    }

    /// Weights and biases in all.
    pub fn parameters(&self) -> usize {
        (0..self.layers())
            .map(|l| self.rows(l) * self.width(l))
            .sum()
    }

    /// The sizes as the reports write them, e.g. `784-256-10`.
    pub fn text(&self) -> String {
        let sizes: Vec<String> = self.sizes.iter().map(usize::to_string).collect();
        sizes.join("-")
    }

    /// The widest layer, bias column included.
    fn widest(&self) -> usize {
        self.sizes.iter().max().copied().unwrap_or(0) + 1
    }
}

/// An MLP's weights: per layer, `rows(l) × width(l)` floats, row-major (see the module
/// docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Mlp {
    /// The shape.
    pub spec: MlpSpec,
    /// Each layer's weights.
    pub layers: Vec<Vec<f32>>,
}

impl Mlp {
    /// All-zero weights of `spec`.
    pub fn zeros(spec: &MlpSpec) -> Self {
        Self {
            spec: spec.clone(),
            layers: zero_layers(spec.layers(), |l| spec.rows(l) * spec.width(l)),
        }
    }

    /// The initial weights: every row's [`init_row`].
    pub fn init(spec: &MlpSpec, seed: u64) -> Self {
        let mut m = Self::zeros(spec);
        init_rows(
            &mut m.layers,
            |l| spec.width(l),
            |l, r, row| init_row(spec, seed, l, r, row),
        );
        m
    }

    /// The fraction of `images` whose largest logit is their label (0 without images).
    pub fn accuracy(&self, images: &Images) -> f64 {
        const CHUNK: usize = 256;
        let mut s = Scratch::new(&self.spec, CHUNK.min(images.len()).max(1));
        let classes = self.spec.classes();
        accuracy_by_chunks(images, CHUNK, |range| {
            let b = fill_inputs(&self.spec, images, range.clone(), &mut s.acts[0]);
            forward(self, &mut s, b);
            right_answers(&s.z[..b * classes], classes, &images.labels[range])
        })
    }
}

/// Writes the initial value of row `row` of layer `l` into `out` (`width(l)` floats):
/// weights uniform in `±sqrt(6 / fan_in)` for ReLU (He) or `±sqrt(6 / (fan_in +
/// fan_out))` for the logistic function and the output layer (Glorot), drawn from a
/// generator keyed by `(seed, l, row)` only, so any worker computes the same row; bias 0.
pub fn init_row(spec: &MlpSpec, seed: u64, l: usize, row: usize, out: &mut [f32]) {
    let (fan_in, fan_out) = (spec.sizes[l], spec.sizes[l + 1]);
    let hidden = l + 1 < spec.layers();
    let limit = if hidden && spec.activation == Activation::Relu {
        (6.0 / fan_in as f64).sqrt()
    } else {
        (6.0 / (fan_in + fan_out) as f64).sqrt()
    } as f32;
    let mut rng = Rng64::from_key(&[seed, 0x1a7e_5eed, l as u64, row as u64]);
    let (weights, bias) = out.split_at_mut(fan_in);
    for w in weights {
        *w = (2.0 * rng.next_f32() - 1.0) * limit;
    }
    bias.fill(0.0);
}

/// One worker's buffers for a mini-batch of up to `capacity` samples, reused across
/// mini-batches (no allocation per mini-batch).
#[derive(Debug, Clone)]
pub struct Scratch {
    /// Up to how many samples.
    capacity: usize,
    /// Layer inputs with their constant 1 column: `acts[l]` is `batch × (n_l + 1)`.
    acts: Vec<Vec<f32>>,
    /// A layer's GEMM output `batch × n_{l+1}` (the last layer's: logits, then softmax).
    z: Vec<f32>,
    /// Error terms at each layer's output: `deltas[l]` is `batch × n_{l+1}`.
    deltas: Vec<Vec<f32>>,
    /// `δ · W` of a layer, `batch × (n_l + 1)`.
    back: Vec<f32>,
}

impl Scratch {
    /// Buffers for `spec` and mini-batches of up to `capacity` samples.
    pub fn new(spec: &MlpSpec, capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            capacity,
            acts: (0..spec.layers())
                .map(|l| vec![0.0; capacity * spec.width(l)])
                .collect(),
            z: vec![0.0; capacity * spec.widest()],
            deltas: (0..spec.layers())
                .map(|l| vec![0.0; capacity * spec.rows(l)])
                .collect(),
            back: vec![0.0; capacity * spec.widest()],
        }
    }

    /// Up to how many samples a mini-batch may have.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// After [`gradient_step`] over `b` samples: layer `l`'s error terms (`b × rows(l)`,
    /// sample-major) and inputs with their constant 1 (`b × width(l)`), whose outer
    /// products summed, times `−rate`, are the layer's step (Project Adam's layer update).
    pub fn factors(&self, spec: &MlpSpec, l: usize, b: usize) -> (&[f32], &[f32]) {
        (
            &self.deltas[l][..b * spec.rows(l)],
            &self.acts[l][..b * spec.width(l)],
        )
    }
}

/// Writes images `which` of `images` (pixels scaled to `[0, 1]`, then a 1) into `x`, one row
/// of `n_0 + 1` floats each, and returns how many.
pub(crate) fn fill_inputs(
    spec: &MlpSpec,
    images: &Images,
    which: impl IntoIterator<Item = usize>,
    x: &mut [f32],
) -> usize {
    let width = spec.width(0);
    let mut b = 0;
    for i in which {
        let row = &mut x[b * width..(b + 1) * width];
        for (v, &p) in row.iter_mut().zip(images.image(i)) {
            *v = f32::from(p) * (1.0 / 255.0);
        }
        row[width - 1] = 1.0;
        b += 1;
    }
    b
}

/// The forward pass of `b` samples already in `s.acts[0]`: leaves every layer's input in
/// `s.acts` and the logits in `s.z`.
fn forward(m: &Mlp, s: &mut Scratch, b: usize) {
    let spec = &m.spec;
    let last = spec.layers() - 1;
    for l in 0..=last {
        let (inputs, outputs) = (spec.width(l), spec.rows(l));
        kernels::linear(&m.layers[l], &s.acts[l], &mut s.z, b, inputs, outputs);
        if l < last {
            let z = &mut s.z[..b * outputs];
            spec.activation.apply(z);
            let next = &mut s.acts[l + 1];
            for (dst, src) in next
                .chunks_exact_mut(outputs + 1)
                .zip(z.chunks_exact(outputs))
            {
                dst[..outputs].copy_from_slice(src);
                dst[outputs] = 1.0;
            }
        }
    }
}

/// One mini-batch: the samples `which` of `images` (at most [`Scratch::capacity`]) through
/// `m`, and into `deltas` (one buffer per layer, shaped as `m.layers`) the SGD step
/// `−rate · Σ ∇` of the summed cross-entropy of these samples; returns that summed
/// cross-entropy. The caller scales `rate` (the learning rate over the whole mini-batch's
/// size), so that the workers' steps add up to one mini-batch step. With no samples, the
/// deltas are zeros and the loss 0.
pub fn gradient_step(
    m: &Mlp,
    images: &Images,
    which: &[u32],
    rate: f32,
    s: &mut Scratch,
    deltas: &mut [Vec<f32>],
) -> f64 {
    let spec = &m.spec;
    let b = which.len();
    if b == 0 {
        for d in deltas.iter_mut() {
            d.fill(0.0);
        }
        return 0.0;
    }
    assert!(
        b <= s.capacity,
        "{b} samples in a scratch of {}",
        s.capacity
    );
    fill_inputs(
        spec,
        images,
        which.iter().map(|&i| i as usize),
        &mut s.acts[0],
    );
    forward(m, s, b);
    let last = spec.layers() - 1;
    let classes = spec.classes();
    let labels: Vec<u8> = which.iter().map(|&i| images.labels[i as usize]).collect();
    let loss = softmax_cross_entropy(
        &mut s.z[..b * classes],
        &labels,
        &mut s.deltas[last],
        classes,
    );
    for l in (0..=last).rev() {
        let (inputs, outputs) = (spec.width(l), spec.rows(l));
        kernels::step_into(
            &mut deltas[l],
            &s.deltas[l],
            &s.acts[l],
            rate,
            b,
            inputs,
            outputs,
        );
        if l == 0 {
            break;
        }
        // The error at this layer's input, through the previous layer's activation; the
        // bias column is dropped.
        kernels::linear_backward(&m.layers[l], &s.deltas[l], &mut s.back, b, inputs, outputs);
        let n = inputs - 1;
        let (below, acts) = (&mut s.deltas[l - 1], &s.acts[l]);
        for ((d, back), a) in below
            .chunks_exact_mut(n)
            .zip(s.back.chunks_exact(inputs))
            .zip(acts.chunks_exact(inputs))
            .take(b)
        {
            d.copy_from_slice(&back[..n]);
            spec.activation.derive(d, &a[..n]);
        }
    }
    loss
}

/// [`Scratch::factors`] of `m`'s layer `l` (every layer of an MLP is fully connected).
pub fn factors<'s>(m: &Mlp, s: &'s Scratch, l: usize, b: usize) -> Option<(&'s [f32], &'s [f32])> {
    Some(s.factors(&m.spec, l, b))
}

/// The mini-batches of one epoch over `n` samples of mini-batch `batch`: `ceil(n / batch)`
/// (at least 1).
pub fn clocks(n: usize, batch: usize) -> usize {
    n.div_ceil(batch.max(1)).max(1)
}

/// Worker `worker`'s samples of an epoch among `workers`: its range [`partition`]`(n,
/// workers, worker)` of the training set, in an order shuffled by a generator keyed by
/// `(seed, epoch, worker)` (Fisher–Yates), written into `order`.
pub fn epoch_order(
    n: usize,
    workers: usize,
    worker: usize,
    seed: u64,
    epoch: u64,
    order: &mut Vec<u32>,
) {
    order.clear();
    order.extend(partition(n, workers, worker).map(|i| i as u32));
    let mut rng = Rng64::from_key(&[seed, 0x0bde_5eed, epoch, worker as u64]);
    for i in (1..order.len()).rev() {
        let j = rng.below(i as u32 + 1) as usize;
        order.swap(i, j);
    }
}

/// Folds `step` into the velocity `v ← momentum · v + step`, layer by layer (with momentum
/// 0, `v` becomes `step`).
pub fn add_momentum(velocity: &mut [Vec<f32>], step: &[Vec<f32>], momentum: f32) {
    for (v, d) in velocity.iter_mut().zip(step) {
        add_momentum_row(v, d, momentum);
    }
}

/// [`add_momentum`] of one row (or any slice): `v ← momentum · v + step`, element-wise.
#[inline]
pub fn add_momentum_row(velocity: &mut [f32], step: &[f32], momentum: f32) {
    for (v, &d) in velocity.iter_mut().zip(step) {
        *v = momentum * *v + d;
    }
}

/// Mini-batch `b` of `clocks` of a worker's epoch `order`: the `b`-th of `clocks` equal
/// parts ([`partition`]).
pub fn mini_batch(order: &[u32], clocks: usize, b: usize) -> &[u32] {
    &order[partition(order.len(), clocks, b)]
}

/// Trains `cfg`'s MLP on `train` sequentially, as the store-backed app does with
/// `workers` workers under BSP (each mini-batch's step is the sum of the workers' steps
/// on the weights before it, each folded into the worker's velocity, added in worker
/// order), for `epochs` epochs; returns the
/// weights and each epoch's mean training cross-entropy. The oracle of the app's tests.
pub fn reference(
    train: &Images,
    classes: usize,
    cfg: &DnnConfig,
    workers: usize,
    epochs: usize,
) -> (Mlp, Vec<f64>) {
    let spec = MlpSpec::new(train.pixels_per_image(), cfg, classes);
    super::network::train_reference(Mlp::init(&spec, cfg.seed), train, cfg, workers, epochs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use iterstore_data::ImageSpec;

    fn tiny_spec(activation: Activation) -> (MlpSpec, Images) {
        let mut set = ImageSpec {
            train: 7,
            rows: 2,
            cols: 3,
            ..ImageSpec::preset("tiny").unwrap()
        }
        .generate();
        set.train.labels.iter_mut().for_each(|l| *l %= 3);
        let cfg = DnnConfig {
            hidden: vec![4, 5],
            activation,
            ..DnnConfig::default()
        };
        (MlpSpec::new(6, &cfg, 3), set.train)
    }

    #[test]
    fn the_step_is_minus_rate_times_the_gradient() {
        for act in [Activation::Relu, Activation::Logistic] {
            let (spec, images) = tiny_spec(act);
            let m = Mlp::init(&spec, 5);
            let label = format!("{act:?}");
            crate::dnn::network::checks::step_is_minus_the_gradient(m, &images, &label);
        }
    }

    #[test]
    fn epoch_orders_partition_and_shuffle() {
        let mut all = Vec::new();
        let mut o = Vec::new();
        for w in 0..3 {
            epoch_order(10, 3, w, 1, 0, &mut o);
            let mut sorted = o.clone();
            sorted.sort_unstable();
            let r = partition(10, 3, w);
            assert_eq!(sorted, r.map(|i| i as u32).collect::<Vec<_>>());
            all.extend(o.iter().copied());
        }
        assert_eq!(all.len(), 10);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        epoch_order(1000, 1, 0, 1, 0, &mut a);
        epoch_order(1000, 1, 0, 1, 1, &mut b);
        assert_ne!(a, b);
        assert_eq!(clocks(10, 4), 3);
        assert_eq!(mini_batch(&a[..10], 3, 2).len(), 4);
    }

    #[test]
    fn the_reference_learns_the_synthetic_images() {
        let set = ImageSpec::preset("tiny").unwrap().generate();
        let cfg = DnnConfig {
            hidden: vec![32],
            learning_rate: 0.2,
            momentum: 0.0,
            batch: 10,
            ..DnnConfig::default()
        };
        let (m, losses) = reference(&set.train, set.classes, &cfg, 2, 5);
        assert!(losses[4] < losses[0], "{losses:?}");
        let acc = m.accuracy(&set.test);
        assert!(acc > 0.85, "accuracy {acc}, losses {losses:?}");
    }
}
