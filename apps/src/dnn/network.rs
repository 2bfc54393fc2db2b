//! [`Network`]: what the store-backed app (`crate::apps::dnn`) needs of a network, so that
//! one app trains the [`Mlp`] and the [`Cnn`] alike: the weights as layers of table rows,
//! the initial value of a row, one mini-batch's step over a worker's scratch, and test
//! accuracy. It adds no maths: each method forwards to the network's own module.

use super::activation::Activation;
use super::cnn::{self, Cnn};
use super::mlp::{self, Mlp};
use crate::data::Images;

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
        }
    };
}

impl_network!(Mlp, mlp, "mlp");
impl_network!(Cnn, cnn, "cnn");
