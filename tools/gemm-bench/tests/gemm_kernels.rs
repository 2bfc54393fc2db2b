//! The GEMM kernels compared for issue 44 (`benches/gemm.rs`) on the products of one MLP
//! training step: each is deterministic (two calls on the same inputs give the same bits,
//! and so do copies of the inputs at another address), each agrees with `matrixmultiply`,
//! and the benchmark's `matrixmultiply` calls give exactly the bits of the app's own
//! kernel functions (so the benchmark times what the app runs).
//!
//! Needs the system OpenBLAS (Debian: libopenblas-dev).

#[path = "../benches/common/mod.rs"]
mod common;

use common::{data, default_step, mlp_step, openblas_one_thread, Kernel, Product};

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// `p` with `kernel` on fresh copies of the inputs placed `shift` floats into their
/// buffers (another alignment), onto `c`'s initial values.
fn run_shifted(p: &Product, kernel: Kernel, shift: usize) -> Vec<f32> {
    let place = |v: Vec<f32>| {
        let mut w = vec![f32::NAN; shift];
        w.extend(v);
        w
    };
    let (a, b) = (place(data(p.a_len, 1)), place(data(p.b_len, 2)));
    let mut c = place(data(p.c_rows * p.ldc, 3));
    p.run(kernel, &a[shift..], &b[shift..], &mut c[shift..]);
    c.split_off(shift)
}

fn step_products() -> Vec<Product> {
    let mut v = default_step();
    // Odd sizes too: edges of every kernel's blocking.
    v.extend(mlp_step(&[37, 23, 17, 3], 5, 0.25));
    v
}

#[test]
fn every_kernel_gives_the_same_bits_twice() {
    openblas_one_thread();
    for p in step_products() {
        for kernel in Kernel::ALL {
            let first = run_shifted(&p, kernel, 0);
            let again = run_shifted(&p, kernel, 0);
            assert_eq!(bits(&first), bits(&again), "{} {}", p.name, kernel.name());
            let moved = run_shifted(&p, kernel, 1);
            assert_eq!(
                bits(&first),
                bits(&moved),
                "{} {}: inputs at another address",
                p.name,
                kernel.name()
            );
        }
    }
}

#[test]
fn every_kernel_agrees_with_matrixmultiply() {
    openblas_one_thread();
    for p in step_products() {
        let want = run_shifted(&p, Kernel::MatrixMultiply, 0);
        let scale = want
            .iter()
            .map(|v| v.abs())
            .fold(f32::MIN_POSITIVE, f32::max);
        for kernel in [Kernel::Gemm, Kernel::OpenBlas] {
            let got = run_shifted(&p, kernel, 0);
            let diff = got
                .iter()
                .zip(&want)
                .map(|(u, v)| (u - v).abs())
                .fold(0.0f32, f32::max);
            assert!(
                diff <= 1e-5 * scale,
                "{} {}: differs by {diff} (scale {scale})",
                p.name,
                kernel.name()
            );
        }
    }
}

#[test]
fn the_benchmark_runs_what_the_app_runs() {
    for p in step_products() {
        let (a, b) = (data(p.a_len, 1), data(p.b_len, 2));
        let init = data(p.c_rows * p.ldc, 3);
        let mut app = init.clone();
        if !p.run_app(&a, &b, &mut app) {
            continue;
        }
        let mut ours = init;
        p.run(Kernel::MatrixMultiply, &a, &b, &mut ours);
        assert_eq!(bits(&app), bits(&ours), "{}", p.name);
    }
}
