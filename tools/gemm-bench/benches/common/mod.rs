//! The GEMMs of one MLP training step as the DNN app calls them ([`mlp_step`]), and the
//! three candidate kernels that can run them ([`Kernel`]): shared by `benches/gemm.rs`
//! (times) and `tests/gemm_kernels.rs` (determinism and agreement). Issue 44, item 1.
//!
//! A [`Product`] is one of the step's matrix products: a list of [`Call`]s on one output
//! (the error terms are one GEMM per canonical chunk of the outputs, summed in order, as
//! [`kernels::backward_chunks`] does). The strides are the app's, so each kernel sees the
//! same transpositions `matrixmultiply` sees in [`kernels`].

// Each of the two targets that include this file uses a different part of it.
#![allow(dead_code)]

use std::ffi::{c_char, c_int, CStr};

use iterstore_algo::dnn::kernels;

// Link OpenBLAS (the system's, through `openblas-src`'s `system` feature).
extern crate openblas_src;

extern "C" {
    fn openblas_set_num_threads(n: c_int);
    fn openblas_get_corename() -> *const c_char;
}

/// A GEMM implementation under comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// `matrixmultiply::sgemm`, the app's kernel today.
    MatrixMultiply,
    /// The `gemm` crate, single-threaded (`Parallelism::None`).
    Gemm,
    /// OpenBLAS's `cblas_sgemm`, one thread.
    OpenBlas,
}

impl Kernel {
    /// Every kernel, today's first.
    pub const ALL: [Kernel; 3] = [Kernel::MatrixMultiply, Kernel::Gemm, Kernel::OpenBlas];

    /// The name in benchmark ids and tables.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::MatrixMultiply => "matrixmultiply",
            Kernel::Gemm => "gemm",
            Kernel::OpenBlas => "openblas",
        }
    }
}

/// Makes OpenBLAS single-threaded (whatever `OPENBLAS_NUM_THREADS` says) and returns the
/// name of the core its kernels were chosen for.
pub fn openblas_one_thread() -> String {
    // SAFETY: both are plain OpenBLAS entry points without preconditions; the core name
    // is a static NUL-terminated string.
    unsafe {
        openblas_set_num_threads(1);
        CStr::from_ptr(openblas_get_corename())
            .to_string_lossy()
            .into_owned()
    }
}

/// One GEMM `c = alpha · a(m×k) · b(k×n) + beta · c` on a product's buffers: `a` starts at
/// `a_off` with strides `rsa`/`csa` (row, column), `b` likewise; `c` is row-major with
/// row stride [`Product::ldc`]. One of each operand's strides is 1.
#[derive(Clone, Debug)]
pub struct Call {
    /// Rows of `a` and `c`.
    pub m: usize,
    /// The reduced dimension.
    pub k: usize,
    /// Columns of `b` and `c`.
    pub n: usize,
    /// Where `a` starts in the product's `a` buffer.
    pub a_off: usize,
    /// `a`'s row stride.
    pub rsa: usize,
    /// `a`'s column stride.
    pub csa: usize,
    /// Where `b` starts in the product's `b` buffer.
    pub b_off: usize,
    /// `b`'s row stride.
    pub rsb: usize,
    /// `b`'s column stride.
    pub csb: usize,
    /// The product's factor.
    pub alpha: f32,
    /// `c`'s factor (0: `c` is overwritten, 1: accumulated into).
    pub beta: f32,
}

/// What [`Product::app`] runs: the app's own kernel function for this product.
#[derive(Clone, Copy, Debug)]
pub enum AppCall {
    /// [`kernels::linear`]`(w = b, x = a, y = c, batch, inputs, outputs)`.
    Linear {
        /// Samples.
        batch: usize,
        /// The layer's inputs (with the bias).
        inputs: usize,
        /// The layer's outputs.
        outputs: usize,
    },
    /// [`kernels::step_into`]`(step = c, delta_out = a, x = b, rate, ...)`.
    StepInto {
        /// Samples.
        batch: usize,
        /// The layer's inputs (with the bias).
        inputs: usize,
        /// The layer's outputs.
        outputs: usize,
        /// The step's rate (`-alpha`).
        rate: f32,
    },
    /// [`kernels::linear_backward`]`(w = b, delta_out = a, delta_in = c, ...)`.
    LinearBackward {
        /// Samples.
        batch: usize,
        /// The layer's inputs (with the bias).
        inputs: usize,
        /// The layer's outputs.
        outputs: usize,
    },
    /// No app function: the error terms as one GEMM over all outputs (not what the app
    /// does; shows what the chunks cost).
    None,
}

/// One matrix product of the step.
#[derive(Clone, Debug)]
pub struct Product {
    /// The benchmark id, e.g. `fwd0_32x785x512`.
    pub name: String,
    /// Floats in `a`'s buffer.
    pub a_len: usize,
    /// Floats in `b`'s buffer.
    pub b_len: usize,
    /// Rows of `c`.
    pub c_rows: usize,
    /// `c`'s row stride (and columns).
    pub ldc: usize,
    /// Whether `c` is zeroed before the calls (the app's `linear_backward`).
    pub zero_c: bool,
    /// The GEMMs, in order.
    pub calls: Vec<Call>,
    /// The app's function that computes the same.
    pub app: AppCall,
}

impl Product {
    /// Floating-point operations: `2·m·k·n` per call.
    pub fn flops(&self) -> u64 {
        self.calls
            .iter()
            .map(|c| 2 * (c.m * c.k * c.n) as u64)
            .sum()
    }

    /// Runs the product with `kernel` on `a`, `b` into `c`.
    pub fn run(&self, kernel: Kernel, a: &[f32], b: &[f32], c: &mut [f32]) {
        assert!(a.len() >= self.a_len && b.len() >= self.b_len);
        assert!(c.len() >= self.c_rows * self.ldc);
        if self.zero_c {
            c[..self.c_rows * self.ldc].fill(0.0);
        }
        for call in &self.calls {
            sgemm(kernel, call, a, b, c, self.ldc);
        }
    }

    /// Runs the app's own function for this product (`matrixmultiply` through
    /// [`kernels`]); `false` when the app has none.
    pub fn run_app(&self, a: &[f32], b: &[f32], c: &mut [f32]) -> bool {
        match self.app {
            AppCall::Linear {
                batch,
                inputs,
                outputs,
            } => kernels::linear(b, a, c, batch, inputs, outputs),
            AppCall::StepInto {
                batch,
                inputs,
                outputs,
                rate,
            } => kernels::step_into(c, a, b, rate, batch, inputs, outputs),
            AppCall::LinearBackward {
                batch,
                inputs,
                outputs,
            } => kernels::linear_backward(b, a, c, batch, inputs, outputs),
            AppCall::None => return false,
        }
        true
    }
}

/// One [`Call`] with `kernel`. The bounds of every operand are checked first.
fn sgemm(kernel: Kernel, t: &Call, a: &[f32], b: &[f32], c: &mut [f32], ldc: usize) {
    let (m, k, n) = (t.m, t.k, t.n);
    assert!(m > 0 && k > 0 && n > 0);
    assert!(t.a_off + (m - 1) * t.rsa + (k - 1) * t.csa < a.len());
    assert!(t.b_off + (k - 1) * t.rsb + (n - 1) * t.csb < b.len());
    assert!((m - 1) * ldc + n <= c.len() && n <= ldc);
    let (pa, pb, pc) = (a[t.a_off..].as_ptr(), b[t.b_off..].as_ptr(), c.as_mut_ptr());
    match kernel {
        // SAFETY: the asserts above bound every index the strides reach.
        Kernel::MatrixMultiply => unsafe {
            matrixmultiply::sgemm(
                m,
                k,
                n,
                t.alpha,
                pa,
                t.rsa as isize,
                t.csa as isize,
                pb,
                t.rsb as isize,
                t.csb as isize,
                t.beta,
                pc,
                ldc as isize,
                1,
            );
        },
        // SAFETY: as above. `gemm` computes `dst = alpha·dst + beta·lhs·rhs` (its names
        // swapped against BLAS's), reading `dst` only when `read_dst`.
        Kernel::Gemm => unsafe {
            gemm::gemm(
                m,
                n,
                k,
                pc,
                1,
                ldc as isize,
                t.beta != 0.0,
                pa,
                t.csa as isize,
                t.rsa as isize,
                pb,
                t.csb as isize,
                t.rsb as isize,
                t.beta,
                t.alpha,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        },
        Kernel::OpenBlas => {
            use cblas_sys::{cblas_sgemm, CBLAS_LAYOUT, CBLAS_TRANSPOSE};
            // Row-major CBLAS: an operand with unit column stride is itself, with its row
            // stride as leading dimension; one with unit row stride is the transpose of a
            // row-major matrix whose leading dimension is its column stride.
            let op = |rs: usize, cs: usize| {
                if cs == 1 {
                    (CBLAS_TRANSPOSE::CblasNoTrans, rs)
                } else {
                    assert_eq!(rs, 1, "one of an operand's strides is 1");
                    (CBLAS_TRANSPOSE::CblasTrans, cs)
                }
            };
            let ((ta, lda), (tb, ldb)) = (op(t.rsa, t.csa), op(t.rsb, t.csb));
            // SAFETY: as above; OpenBLAS reads `a` and `b` and writes `c` within them.
            unsafe {
                cblas_sgemm(
                    CBLAS_LAYOUT::CblasRowMajor,
                    ta,
                    tb,
                    m as c_int,
                    n as c_int,
                    k as c_int,
                    t.alpha,
                    pa,
                    lda as c_int,
                    pb,
                    ldb as c_int,
                    t.beta,
                    pc,
                    ldc as c_int,
                );
            }
        }
    }
}

/// The GEMMs of one training step of an MLP with layer sizes `sizes` (input first) on
/// `batch` samples, as [`iterstore_algo::dnn::mlp::gradient_step`] runs them: per layer
/// `l` of `inputs = sizes[l] + 1` (the bias) and `outputs = sizes[l + 1]`,
///
/// - `fwd{l}`: [`kernels::linear`], `y(b×o) = x(b×i) · wᵀ` with `w` stored `o×i`;
/// - `wgrad{l}`: [`kernels::step_into`], `step(o×i) = −rate · δᵀ · x` with `δ` stored
///   `b×o`;
/// - `err{l}` (`l ≥ 1`): [`kernels::linear_backward`], `δ_in(b×i) = δ(b×o) · w` as one
///   GEMM per canonical chunk of the outputs (`k` = the chunk's size), accumulated in
///   order into zeros;
/// - `err{l}_1gemm` (`l ≥ 1`): the same product as a single GEMM over all outputs, which
///   the app does not run (it gives other bits): what the chunking costs.
pub fn mlp_step(sizes: &[usize], batch: usize, rate: f32) -> Vec<Product> {
    let mut v = Vec::new();
    let b = batch;
    for l in 0..sizes.len() - 1 {
        let (i, o) = (sizes[l] + 1, sizes[l + 1]);
        v.push(Product {
            name: format!("fwd{l}_{b}x{i}x{o}"),
            a_len: b * i,
            b_len: o * i,
            c_rows: b,
            ldc: o,
            zero_c: false,
            calls: vec![Call {
                m: b,
                k: i,
                n: o,
                a_off: 0,
                rsa: i,
                csa: 1,
                b_off: 0,
                rsb: 1,
                csb: i,
                alpha: 1.0,
                beta: 0.0,
            }],
            app: AppCall::Linear {
                batch: b,
                inputs: i,
                outputs: o,
            },
        });
        v.push(Product {
            name: format!("wgrad{l}_{o}x{b}x{i}"),
            a_len: b * o,
            b_len: b * i,
            c_rows: o,
            ldc: i,
            zero_c: false,
            calls: vec![Call {
                m: o,
                k: b,
                n: i,
                a_off: 0,
                rsa: 1,
                csa: o,
                b_off: 0,
                rsb: i,
                csb: 1,
                alpha: -rate,
                beta: 0.0,
            }],
            app: AppCall::StepInto {
                batch: b,
                inputs: i,
                outputs: o,
                rate,
            },
        });
        if l == 0 {
            continue;
        }
        let chunk = |r: std::ops::Range<usize>| Call {
            m: b,
            k: r.len(),
            n: i,
            a_off: r.start,
            rsa: o,
            csa: 1,
            b_off: r.start * i,
            rsb: i,
            csb: 1,
            alpha: 1.0,
            beta: 1.0,
        };
        let cs = kernels::chunks(o);
        v.push(Product {
            name: format!("err{l}_{b}x{o}x{i}_{}chunks", cs.len()),
            a_len: b * o,
            b_len: o * i,
            c_rows: b,
            ldc: i,
            zero_c: true,
            calls: cs.into_iter().map(chunk).collect(),
            app: AppCall::LinearBackward {
                batch: b,
                inputs: i,
                outputs: o,
            },
        });
        v.push(Product {
            name: format!("err{l}_{b}x{o}x{i}_1gemm"),
            a_len: b * o,
            b_len: o * i,
            c_rows: b,
            ldc: i,
            zero_c: true,
            calls: vec![chunk(0..o)],
            app: AppCall::None,
        });
    }
    v
}

/// The DNN's defaults: the MLP 784-512-256-10, mini-batches of 64 over 2 workers (32
/// samples a worker), rate 0.1 / 64.
pub fn default_step() -> Vec<Product> {
    mlp_step(&[784, 512, 256, 10], 32, 0.1 / 64.0)
}

/// `n` floats in [−0.5, 0.5), a fixed function of `seed` and the index.
pub fn data(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|k| {
            ((k as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32
                / (1u32 << 24) as f32
                - 0.5
        })
        .collect()
}
