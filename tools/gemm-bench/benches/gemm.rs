//! Criterion benchmarks of the GEMM kernels on the shapes of one MLP training step at the
//! DNN's defaults (issue 44, item 1): the MLP 784-512-256-10 on 32 samples (mini-batches of
//! 64 over 2 workers), each product as the app runs it (`common::mlp_step`: the forward
//! `x·wᵀ`, the weight gradient `δᵀ·x`, the error terms `δ·w` in the app's chunks, and the
//! error terms as one GEMM), with each of `matrixmultiply` (today's kernel), the `gemm`
//! crate (single-threaded) and OpenBLAS (one thread).
//!
//! Ids are `gemm/<product>/<kernel>`; throughput is in floating-point operations
//! (criterion's "elem/s" is FLOP/s). Before timing, each kernel's result is checked
//! against `matrixmultiply`'s (relative error) and against a second call on the same
//! inputs (bits); the check is printed. Run:
//!
//! ```text
//! OPENBLAS_NUM_THREADS=1 cargo bench --manifest-path tools/gemm-bench/Cargo.toml
//! ```
//!
//! Results are in `BENCHMARKS.md` ("Issue 44: GEMM kernels for the DNN's shapes").

mod common;

use std::time::Duration;

use common::{data, default_step, openblas_one_thread, Kernel};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};

fn gemm_kernels(c: &mut Criterion) {
    let core = openblas_one_thread();
    eprintln!("OpenBLAS core: {core}");
    let mut g = c.benchmark_group("gemm");
    for p in default_step() {
        let (a, b) = (data(p.a_len, 1), data(p.b_len, 2));
        let init = data(p.c_rows * p.ldc, 3);
        let mut want = init.clone();
        p.run(Kernel::MatrixMultiply, &a, &b, &mut want);
        g.throughput(Throughput::Elements(p.flops()));
        for kernel in Kernel::ALL {
            let (mut x, mut y) = (init.clone(), init.clone());
            p.run(kernel, &a, &b, &mut x);
            p.run(kernel, &a, &b, &mut y);
            let same_bits = x.iter().zip(&y).all(|(u, v)| u.to_bits() == v.to_bits());
            let err = x
                .iter()
                .zip(&want)
                .map(|(u, v)| (u - v).abs())
                .fold(0.0f32, f32::max)
                / want
                    .iter()
                    .map(|v| v.abs())
                    .fold(f32::MIN_POSITIVE, f32::max);
            eprintln!(
                "{} {}: repeat bit-identical {same_bits}, max rel. diff to matrixmultiply {err:.1e}",
                p.name,
                kernel.name()
            );
            assert!(
                err < 1e-4,
                "{} with {}: wrong result",
                p.name,
                kernel.name()
            );
            let mut out = init.clone();
            g.bench_function(format!("{}/{}", p.name, kernel.name()), |bench| {
                bench.iter(|| p.run(kernel, black_box(&a), black_box(&b), black_box(&mut out)))
            });
        }
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50)
}

criterion_group! {
    name = benches;
    config = config();
    targets = gemm_kernels
}
criterion_main!(benches);
