//! Issue 44's GEMM kernel comparison lives in this crate's `benches/gemm.rs` (timing) and
//! `tests/gemm_kernels.rs` (determinism, and that the benchmark runs the app's products);
//! their shared shapes and kernel wrappers are `benches/common/mod.rs`. It is kept out of
//! the workspace so that the workspace's tests do not link OpenBLAS. Run:
//!
//! ```text
//! apt-get install -y libopenblas-dev
//! OPENBLAS_NUM_THREADS=1 cargo bench --manifest-path tools/gemm-bench/Cargo.toml
//! cargo test --manifest-path tools/gemm-bench/Cargo.toml
//! ```
