//! A small convolutional network with a softmax output: its shape ([`CnnSpec`]), its
//! weights ([`Cnn`]), the initial weights ([`init_row`]), one mini-batch's gradient step
//! ([`gradient_step`]) over a worker's [`Scratch`], test accuracy ([`Cnn::accuracy`]) and
//! a sequential trainer ([`reference()`]), the test oracle of the store-backed app. It
//! mirrors [`super::mlp`], and shares its epoch order, mini-batches and momentum.
//!
//! **Network.** Stages of a convolution ([`super::conv`]: `kernel × kernel`, stride 1, no
//! padding, with a bias, then the activation) followed by a max pooling
//! ([`super::pool`]: window and stride [`POOL`]), then fully connected hidden layers with
//! the activation, then the logits of [`super::loss::softmax_cross_entropy`]. The default,
//! on Fashion-MNIST's 28 × 28 images: conv 5×5×16 → pool 2 → conv 5×5×32 → pool 2 → fc
//! 128 → softmax 10 (28 → 24 → 12 → 8 → 4: 512 inputs to the fully connected part), the
//! performance model's `iterstore_perf::builtin::cnn`.
//!
//! **Layout.** Weight layer `l` counts the convolutions first, then the fully connected
//! layers. A convolution's rows are its kernels: row `o` holds kernel `o`'s taps (OIHW, as
//! [`super::conv`] orders them) then its bias. A fully connected layer's rows are as the
//! MLP's: one per output neuron, its input weights then its bias. A row is what the store
//! keeps as one table row. The gradient step unpacks the convolutions' rows into the
//! separate kernels and biases [`super::conv`] takes (a few thousand floats).
//!
//! It knows nothing of the store: the app reads rows into a [`Cnn`]'s layers and UPDATEs
//! the deltas [`gradient_step`] writes.

use super::activation::Activation;
use super::config::DnnConfig;
use super::conv::{self, ConvGeometry};
use super::kernels;
use super::loss::softmax_cross_entropy;
use super::network::{accuracy_by_chunks, init_rows, right_answers, zero_layers};
use super::pool::{self, PoolGeometry};
use crate::Rng64;
use iterstore_data::Images;

/// The pooling window and stride of every stage.
pub const POOL: usize = 2;

/// The shape of a CNN: its input, its convolution stages, its fully connected hidden
/// layers, its classes and the activation of every hidden layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CnnSpec {
    /// Input image height.
    pub height: usize,
    /// Input image width.
    pub width: usize,
    /// Output channels of each convolution stage, input side first.
    pub channels: Vec<usize>,
    /// Width and height of every convolution kernel.
    pub kernel: usize,
    /// Neurons of each fully connected hidden layer.
    pub hidden: Vec<usize>,
    /// Classes (the softmax layer's neurons).
    pub classes: usize,
    /// The activation of the convolutions and the hidden layers.
    pub activation: Activation,
}

impl CnnSpec {
    /// The CNN of `cfg` (its `channels`, `kernel`, `hidden` and `activation`) for
    /// `height × width` one-channel images and `classes` classes.
    pub fn new(height: usize, width: usize, cfg: &DnnConfig, classes: usize) -> Self {
        Self {
            height,
            width,
            channels: cfg.channels.clone(),
            kernel: cfg.kernel,
            hidden: cfg.hidden.clone(),
            classes,
            activation: cfg.activation,
        }
    }

    /// Checks that every stage fits its input, naming the first that does not.
    pub fn check(&self) -> Result<(), String> {
        if self.channels.is_empty() || self.kernel == 0 {
            return Err("a CNN needs at least one convolution and a kernel of 1 or more".into());
        }
        let (mut h, mut w) = (self.height, self.width);
        for (i, &c) in self.channels.iter().enumerate() {
            if c == 0 {
                return Err(format!("convolution {} has 0 channels", i + 1));
            }
            if self.kernel > h.min(w) || (h - self.kernel + 1).min(w - self.kernel + 1) < POOL {
                return Err(format!(
                    "convolution {} ({k}x{k}) and pooling {POOL} do not fit its {h}x{w} input",
                    i + 1,
                    k = self.kernel
                ));
            }
            (h, w) = ((h - self.kernel + 1) / POOL, (w - self.kernel + 1) / POOL);
        }
        Ok(())
    }

    /// Convolution stages.
    pub fn stages(&self) -> usize {
        self.channels.len()
    }

    /// The convolution of stage `i`.
    pub fn conv(&self, i: usize) -> ConvGeometry {
        let (in_channels, height, width) = if i == 0 {
            (1, self.height, self.width)
        } else {
            let p = self.pool(i - 1);
            (p.channels, p.out_height(), p.out_width())
        };
        ConvGeometry {
            in_channels,
            out_channels: self.channels[i],
            height,
            width,
            kernel: self.kernel,
            stride: 1,
            padding: 0,
        }
    }

    /// The pooling of stage `i` (over its convolution's outputs).
    pub fn pool(&self, i: usize) -> PoolGeometry {
        let c = self.conv(i);
        PoolGeometry {
            channels: c.out_channels,
            height: c.out_height(),
            width: c.out_width(),
            window: POOL,
            stride: POOL,
        }
    }

    /// Neurons of the fully connected part: the last pooling's outputs, the hidden layers,
    /// the classes.
    pub fn fc_sizes(&self) -> Vec<usize> {
        let mut sizes = vec![self.pool(self.stages() - 1).output_len()];
        sizes.extend(&self.hidden);
        sizes.push(self.classes);
        sizes
    }

    /// Weight layers: the convolutions, then the fully connected layers.
    pub fn layers(&self) -> usize {
        self.stages() + self.hidden.len() + 1
    }

    /// Rows of layer `l`'s weights: a convolution's kernels, a fully connected layer's
    /// output neurons.
    pub fn rows(&self, l: usize) -> usize {
        match l.checked_sub(self.stages()) {
            None => self.channels[l],
            Some(f) => self.fc_sizes()[f + 1],
        }
    }

    /// Floats per row of layer `l`: a kernel's taps or a neuron's inputs, and the bias.
    pub fn width(&self, l: usize) -> usize {
        match l.checked_sub(self.stages()) {
            None => self.conv(l).taps() + 1,
            Some(f) => self.fc_sizes()[f] + 1,
        }
    }

    /// Weights and biases in all.
    pub fn parameters(&self) -> usize {
        (0..self.layers())
            .map(|l| self.rows(l) * self.width(l))
            .sum()
    }

    /// The shape as the reports write it, e.g. `28x28-c5x16-p2-c5x32-p2-128-10`.
    pub fn text(&self) -> String {
        let mut parts = vec![format!("{}x{}", self.height, self.width)];
        for &c in &self.channels {
            parts.push(format!("c{}x{c}", self.kernel));
            parts.push(format!("p{POOL}"));
        }
        parts.extend(self.fc_sizes()[1..].iter().map(usize::to_string));
        parts.join("-")
    }
}

/// A CNN's weights: per layer, `rows(l) × width(l)` floats, row-major (module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Cnn {
    /// The shape.
    pub spec: CnnSpec,
    /// Each layer's weights.
    pub layers: Vec<Vec<f32>>,
}

impl Cnn {
    /// All-zero weights of `spec`.
    pub fn zeros(spec: &CnnSpec) -> Self {
        Self {
            spec: spec.clone(),
            layers: zero_layers(spec.layers(), |l| spec.rows(l) * spec.width(l)),
        }
    }

    /// The initial weights: every row's [`init_row`].
    pub fn init(spec: &CnnSpec, seed: u64) -> Self {
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
        const CHUNK: usize = 128;
        let mut s = Scratch::new(&self.spec, CHUNK.min(images.len()).max(1));
        unpack(self, &mut s);
        let classes = self.spec.classes;
        accuracy_by_chunks(images, CHUNK, |range| {
            let b = fill_images(images, range.clone(), &mut s.x[0]);
            forward(self, &mut s, b);
            right_answers(&s.z[..b * classes], classes, &images.labels[range])
        })
    }
}

/// Writes the initial value of row `row` of layer `l` into `out` (`width(l)` floats):
/// weights uniform in `±sqrt(6 / fan_in)` (He) for the convolutions and hidden layers
/// with ReLU, `±sqrt(6 / (fan_in + fan_out))` (Glorot) otherwise and for the output layer
/// (a kernel's fan-out is its taps over its input channels times its output channels),
/// drawn from a generator keyed by `(seed, l, row)` only, so any worker computes the same
/// row; bias 0.
pub fn init_row(spec: &CnnSpec, seed: u64, l: usize, row: usize, out: &mut [f32]) {
    let fan_in = spec.width(l) - 1;
    let fan_out = match l.checked_sub(spec.stages()) {
        None => spec.kernel * spec.kernel * spec.channels[l],
        Some(_) => spec.rows(l),
    };
    let hidden = l + 1 < spec.layers();
    let limit = if hidden && spec.activation == Activation::Relu {
        (6.0 / fan_in as f64).sqrt()
    } else {
        (6.0 / (fan_in + fan_out) as f64).sqrt()
    } as f32;
    let mut rng = Rng64::from_key(&[seed, 0xc0de_5eed, l as u64, row as u64]);
    let (weights, bias) = out.split_at_mut(fan_in);
    for w in weights {
        *w = (2.0 * rng.next_f32() - 1.0) * limit;
    }
    bias.fill(0.0);
}

/// One worker's buffers for a mini-batch of up to `capacity` samples, reused across
/// mini-batches (no allocation per mini-batch once the convolutions' `cols` have grown).
#[derive(Debug, Clone)]
pub struct Scratch {
    /// Up to how many samples.
    capacity: usize,
    /// Each stage's input (`x[0]`: the images; `x[i + 1]`: stage `i`'s pooled outputs),
    /// `batch × input_len`.
    x: Vec<Vec<f32>>,
    /// Each convolution's outputs after the activation, `batch × output_len`.
    y: Vec<Vec<f32>>,
    /// Each pooling's argmax, `batch × output_len`.
    argmax: Vec<Vec<u32>>,
    /// Error terms at each convolution's output.
    dy: Vec<Vec<f32>>,
    /// Error terms at each stage's input (`dx[i + 1]`: at stage `i`'s pooled outputs).
    dx: Vec<Vec<f32>>,
    /// Each convolution's kernels and biases, unpacked from its rows.
    kernels: Vec<(Vec<f32>, Vec<f32>)>,
    /// Each convolution's step, kernels and biases, before it is packed into rows.
    grads: Vec<(Vec<f32>, Vec<f32>)>,
    /// The convolutions' im2col scratch.
    cols: Vec<f32>,
    /// The fully connected layers' inputs with their constant 1 column.
    acts: Vec<Vec<f32>>,
    /// A fully connected layer's GEMM output (the last one's: logits, then softmax).
    z: Vec<f32>,
    /// Error terms at each fully connected layer's output.
    deltas: Vec<Vec<f32>>,
    /// `δ · W` of a fully connected layer.
    back: Vec<f32>,
}

impl Scratch {
    /// Buffers for `spec` and mini-batches of up to `capacity` samples.
    pub fn new(spec: &CnnSpec, capacity: usize) -> Self {
        let capacity = capacity.max(1);
        let stages = spec.stages();
        let convs: Vec<ConvGeometry> = (0..stages).map(|i| spec.conv(i)).collect();
        let mut x: Vec<Vec<f32>> = convs
            .iter()
            .map(|g| vec![0.0; capacity * g.input_len()])
            .collect();
        x.push(vec![0.0; capacity * spec.pool(stages - 1).output_len()]);
        let outputs = |i: usize| capacity * convs[i].output_len();
        let pooled = |i: usize| capacity * spec.pool(i).output_len();
        let fc = spec.fc_sizes();
        let widest = fc.iter().max().copied().unwrap_or(0) + 1;
        let weights = |g: &ConvGeometry| (vec![0.0; g.weights_len()], vec![0.0; g.out_channels]);
        Self {
            capacity,
            dx: x.clone(),
            x,
            y: (0..stages).map(|i| vec![0.0; outputs(i)]).collect(),
            argmax: (0..stages).map(|i| vec![0; pooled(i)]).collect(),
            dy: (0..stages).map(|i| vec![0.0; outputs(i)]).collect(),
            kernels: convs.iter().map(weights).collect(),
            grads: convs.iter().map(weights).collect(),
            cols: Vec::new(),
            acts: (0..fc.len() - 1)
                .map(|f| vec![0.0; capacity * (fc[f] + 1)])
                .collect(),
            z: vec![0.0; capacity * widest],
            deltas: (1..fc.len()).map(|f| vec![0.0; capacity * fc[f]]).collect(),
            back: vec![0.0; capacity * widest],
        }
    }

    /// Up to how many samples a mini-batch may have.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// Writes images `which` of `images` (pixels scaled to `[0, 1]`) into `x`, one image after
/// the other, and returns how many.
fn fill_images(images: &Images, which: impl IntoIterator<Item = usize>, x: &mut [f32]) -> usize {
    let n = images.pixels_per_image();
    let mut b = 0;
    for i in which {
        for (v, &p) in x[b * n..(b + 1) * n].iter_mut().zip(images.image(i)) {
            *v = f32::from(p) * (1.0 / 255.0);
        }
        b += 1;
    }
    b
}

/// Copies each convolution's rows (taps, then bias) into `s.kernels`.
fn unpack(m: &Cnn, s: &mut Scratch) {
    for (i, (w, bias)) in s.kernels.iter_mut().enumerate() {
        let taps = m.spec.width(i) - 1;
        for ((row, kernel), b) in m.layers[i]
            .chunks_exact(taps + 1)
            .zip(w.chunks_exact_mut(taps))
            .zip(bias.iter_mut())
        {
            kernel.copy_from_slice(&row[..taps]);
            *b = row[taps];
        }
    }
}

/// The forward pass of `b` samples already in `s.x[0]`, with the kernels already
/// [`unpack`]ed: leaves every stage's and layer's values in `s` and the logits in `s.z`.
fn forward(m: &Cnn, s: &mut Scratch, b: usize) {
    let spec = &m.spec;
    let act = spec.activation;
    for i in 0..spec.stages() {
        let (w, bias) = &s.kernels[i];
        let (below, above) = s.x.split_at_mut(i + 1);
        let g = spec.conv(i);
        conv::forward(
            &g,
            w,
            Some(bias),
            &below[i],
            &mut s.y[i],
            b,
            act,
            &mut s.cols,
        );
        pool::max_forward(&spec.pool(i), &s.y[i], &mut above[0], &mut s.argmax[i], b);
    }
    let fc = spec.fc_sizes();
    let last = fc.len() - 2;
    for (dst, src) in s.acts[0]
        .chunks_exact_mut(fc[0] + 1)
        .zip(s.x[spec.stages()].chunks_exact(fc[0]))
        .take(b)
    {
        dst[..fc[0]].copy_from_slice(src);
        dst[fc[0]] = 1.0;
    }
    for f in 0..=last {
        let (inputs, outputs) = (fc[f] + 1, fc[f + 1]);
        let l = spec.stages() + f;
        kernels::linear(&m.layers[l], &s.acts[f], &mut s.z, b, inputs, outputs);
        if f < last {
            let z = &mut s.z[..b * outputs];
            act.apply(z);
            for (dst, src) in s.acts[f + 1]
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
/// cross-entropy. As [`super::mlp::gradient_step`]: the caller scales `rate`, and with
/// no samples the deltas are zeros and the loss 0.
pub fn gradient_step(
    m: &Cnn,
    images: &Images,
    which: &[u32],
    rate: f32,
    s: &mut Scratch,
    deltas: &mut [Vec<f32>],
) -> f64 {
    for d in deltas.iter_mut() {
        d.fill(0.0);
    }
    let b = which.len();
    if b == 0 {
        return 0.0;
    }
    assert!(
        b <= s.capacity,
        "{b} samples in a scratch of {}",
        s.capacity
    );
    let spec = &m.spec;
    let act = spec.activation;
    unpack(m, s);
    fill_images(images, which.iter().map(|&i| i as usize), &mut s.x[0]);
    forward(m, s, b);
    let fc = spec.fc_sizes();
    let last = fc.len() - 2;
    let labels: Vec<u8> = which.iter().map(|&i| images.labels[i as usize]).collect();
    let loss = softmax_cross_entropy(
        &mut s.z[..b * spec.classes],
        &labels,
        &mut s.deltas[last],
        spec.classes,
    );
    let stages = spec.stages();
    for f in (0..=last).rev() {
        let (inputs, outputs) = (fc[f] + 1, fc[f + 1]);
        let l = stages + f;
        kernels::update(
            &mut deltas[l],
            &s.deltas[f],
            &s.acts[f],
            rate,
            b,
            inputs,
            outputs,
        );
        // The error at this layer's input, bias column dropped: through the activation
        // of the layer below, or (f = 0) onto the last pooling's outputs as they are.
        kernels::linear_backward(&m.layers[l], &s.deltas[f], &mut s.back, b, inputs, outputs);
        let n = inputs - 1;
        let rows = s.back.chunks_exact(inputs).take(b);
        if f == 0 {
            for (d, back) in s.dx[stages].chunks_exact_mut(n).zip(rows) {
                d.copy_from_slice(&back[..n]);
            }
        } else {
            let (below, acts) = (&mut s.deltas[f - 1], &s.acts[f]);
            for ((d, back), a) in below
                .chunks_exact_mut(n)
                .zip(rows)
                .zip(acts.chunks_exact(inputs))
            {
                d.copy_from_slice(&back[..n]);
                act.derive(d, &a[..n]);
            }
        }
    }
    for i in (0..stages).rev() {
        let g = spec.conv(i);
        let (below, above) = s.dx.split_at_mut(i + 1);
        pool::max_backward(&spec.pool(i), &above[0], &s.argmax[i], &mut s.dy[i], b);
        act.derive(&mut s.dy[i][..b * g.output_len()], &s.y[i]);
        let (gw, gb) = &mut s.grads[i];
        gw.fill(0.0);
        gb.fill(0.0);
        conv::update(&g, gw, Some(gb), &s.dy[i], &s.x[i], rate, b, &mut s.cols);
        let taps = g.taps();
        for ((row, kernel), &bias) in deltas[i]
            .chunks_exact_mut(taps + 1)
            .zip(gw.chunks_exact(taps))
            .zip(gb.iter())
        {
            row[..taps].copy_from_slice(kernel);
            row[taps] = bias;
        }
        if i > 0 {
            conv::backward(&g, &s.kernels[i].0, &s.dy[i], &mut below[i], b, &mut s.cols);
        }
    }
    loss
}

/// Trains `cfg`'s CNN on `train` sequentially, as the store-backed app does with
/// `workers` workers under BSP (as [`super::mlp::reference`]: each mini-batch's step is
/// the sum of the workers' velocities on the weights before it, added in worker order),
/// for `epochs` epochs; returns the weights and each epoch's mean training cross-entropy.
/// The oracle of the app's tests.
pub fn reference(
    train: &Images,
    classes: usize,
    cfg: &DnnConfig,
    workers: usize,
    epochs: usize,
) -> (Cnn, Vec<f64>) {
    let spec = CnnSpec::new(train.rows, train.cols, cfg, classes);
    super::network::train_reference(Cnn::init(&spec, cfg.seed), train, cfg, workers, epochs)
}

/// A CNN's layers have no factored step here (its fully connected layers could, its
/// convolutions cannot): `None`, and the app refuses layer updates for it.
pub fn factors<'s>(_: &Cnn, _: &'s Scratch, _: usize, _: usize) -> Option<(&'s [f32], &'s [f32])> {
    None
}

#[cfg(test)]
mod tests;
