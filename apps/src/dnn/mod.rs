//! Dense neural-network kernels: the per-layer loops of feed-forward, back-propagation and
//! weight update (Yan et al., Figure 5), on `f32` through `matrixmultiply`'s GEMM. The
//! calibration (`iterstore calibrate`) times exactly these, so the performance model's
//! costs are those of the code that trains.
//!
//! - [`kernels`]: a fully connected layer with the logistic activation.
//! - [`conv`]: a 2-D convolution layer (im2col + GEMM) and the [`conv::Activation`]s.
//! - [`pool`]: max and average pooling.

pub mod conv;
pub mod kernels;
pub mod pool;
