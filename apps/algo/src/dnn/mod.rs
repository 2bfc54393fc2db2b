//! Neural networks: the dense kernels, the per-layer loops of feed-forward,
//! back-propagation and weight update (Yan et al., Figure 5), on `f32` through
//! `matrixmultiply`'s GEMM; the calibration (`iterstore calibrate`) times exactly these, so
//! the performance model's costs are those of the code that trains. On top of them, an MLP
//! and a small CNN, each with a softmax output, trained by the store-backed app
//! `iterstore_apps::dnn` through [`Network`].
//!
//! - [`kernels`]: one fully connected layer's GEMMs (and the logistic function).
//! - [`conv`]: a 2-D convolution layer (im2col + GEMM).
//! - [`pool`]: max and average pooling.
//! - [`activation`]: the activations (ReLU, logistic, identity) and their derivatives.
//! - [`loss`]: softmax and cross-entropy, the error terms back-propagation starts from.
//! - [`mlp`]: the network's shape and weights, one mini-batch's SGD step, accuracy, and a
//!   sequential trainer (the app's oracle).
//! - [`cnn`]: the same for a CNN (convolutions with max pooling, then fully connected
//!   layers), on [`conv`] and [`pool`].
//! - [`network`]: [`Network`], what the app needs of either.
//! - [`stack`]: a network as a partitioned replica runs it: stages (fully connected,
//!   convolution, pooling), what a segment of each reads and writes.
//! - [`layout`]: how a partitioned network (model replicas, segments, copies) is laid out
//!   over the workers, from a plan or the command line.
//! - [`quorum`]: the epoch quorum's arithmetic (replicas needed, carried samples).
//! - [`config`]: [`DnnConfig`], the hyper-parameters.

pub mod activation;
pub mod cnn;
pub mod config;
pub mod conv;
pub mod kernels;
pub mod layout;
pub mod loss;
pub mod mlp;
pub mod network;
pub mod pool;
pub mod quorum;
pub mod stack;

pub use activation::Activation;
pub use cnn::{Cnn, CnnSpec};
pub use config::{DnnConfig, ServerRule, Straggler};
pub use layout::{DataParallel, Layout, Partitioning};
pub use mlp::{Mlp, MlpSpec};
pub use network::Network;
