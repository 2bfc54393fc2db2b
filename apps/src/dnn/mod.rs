//! Dense neural-network kernels: the per-layer loops of feed-forward, back-propagation and
//! weight update (Yan et al., Figure 5), on `f32` through `matrixmultiply`'s GEMM. The
//! calibration (`iterstore calibrate`) times exactly these, so the performance model's
//! costs are those of the code that trains.

pub mod kernels;
