//! One fully connected layer of `inputs` → `outputs` neurons with a logistic activation,
//! over a batch: weights `w` are `outputs × inputs`, row-major; activations are
//! `batch × width`, row-major.
//!
//! - [`forward`]: `y = σ(x · wᵀ)` — `batch·inputs·outputs` multiply-adds (GEMM), then
//!   `batch·outputs` activations ([`activate`]).
//! - [`backward`]: `δ_in = (δ_out · w) ∘ σ'(x)` — the same multiply-adds, then
//!   `batch·inputs` error terms ([`error_terms`]).
//! - [`update`]: `w −= η · δ_outᵀ · x` — the same multiply-adds.
//!
//! [`linear`] and [`linear_backward`] are the GEMMs of [`forward`] and [`backward`] without
//! the logistic function, for layers with another activation (or none, as a softmax
//! output layer).

use std::ops::Range;

use crate::partition;

/// `c = alpha · a(m×k) · b(k×n) + beta · c(m×n)`, row-major, with `b` transposed when
/// `b_transposed` (then `b` is stored n×k).
#[allow(clippy::too_many_arguments)]
fn gemm(
    m: usize,
    k: usize,
    n: usize,
    alpha: f32,
    a: &[f32],
    b: &[f32],
    b_transposed: bool,
    beta: f32,
    c: &mut [f32],
) {
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    let (rsb, csb) = if b_transposed {
        (1, k as isize)
    } else {
        (n as isize, 1)
    };
    // SAFETY: the asserts above bound every index the strides reach.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            alpha,
            a.as_ptr(),
            k as isize,
            1,
            b.as_ptr(),
            rsb,
            csb,
            beta,
            c.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}

/// The logistic function applied in place.
pub fn activate(y: &mut [f32]) {
    for v in y {
        *v = 1.0 / (1.0 + (-*v).exp());
    }
}

/// `delta ∘ σ'(x)` in place, where `x` holds σ's outputs (so `σ' = x (1 − x)`).
pub fn error_terms(delta: &mut [f32], x: &[f32]) {
    for (d, &a) in delta.iter_mut().zip(x) {
        *d *= a * (1.0 - a);
    }
}

/// `y = x · wᵀ`: `x` is `batch × inputs`, `w` is `outputs × inputs`, `y` is
/// `batch × outputs`.
pub fn linear(w: &[f32], x: &[f32], y: &mut [f32], batch: usize, inputs: usize, outputs: usize) {
    gemm(batch, inputs, outputs, 1.0, x, w, true, 0.0, y);
}

/// `y = σ(x · wᵀ)`: `x` is `batch × inputs`, `w` is `outputs × inputs`, `y` is
/// `batch × outputs`.
pub fn forward(w: &[f32], x: &[f32], y: &mut [f32], batch: usize, inputs: usize, outputs: usize) {
    linear(w, x, y, batch, inputs, outputs);
    activate(&mut y[..batch * outputs]);
}

/// Most chunks a layer's output neurons are cut into for [`backward_chunks`].
pub const CHUNKS: usize = 16;

/// The canonical chunks of a layer of `outputs` neurons: `min(outputs, CHUNKS)` ranges of
/// near-equal size, in order ([`crate::partition`]). A model-parallel replica cuts a
/// layer into segments of whole chunks.
pub fn chunks(outputs: usize) -> Vec<Range<usize>> {
    let g = outputs.min(CHUNKS);
    (0..g).map(|c| partition(outputs, g, c)).collect()
}

/// `δ_in += δ_out[:, c] · w[c]` for each chunk `c` of `chunks`, in order, one GEMM per
/// chunk (the canonical order in which a layer's error terms sum over its output neurons):
/// `delta_out` is `batch × outputs`, `w` is `outputs × inputs`, `delta_in` is
/// `batch × inputs`, chunk ranges index the outputs. Splitting the chunks over several
/// calls that pass `delta_in` along gives the same bits as one call, which is how a
/// model-parallel replica reproduces one worker's error terms exactly.
#[allow(clippy::too_many_arguments)]
pub fn backward_chunks(
    w: &[f32],
    delta_out: &[f32],
    delta_in: &mut [f32],
    batch: usize,
    inputs: usize,
    outputs: usize,
    chunks: &[Range<usize>],
) {
    assert!(delta_out.len() >= batch * outputs && delta_in.len() >= batch * inputs);
    for c in chunks {
        assert!(c.end <= outputs && w.len() >= c.end * inputs);
        if c.is_empty() || batch == 0 {
            continue;
        }
        // SAFETY: the asserts above bound every index the strides reach: a is
        // delta_out's columns `c` of `batch` rows of `outputs`, b is w's rows `c`.
        unsafe {
            matrixmultiply::sgemm(
                batch,
                c.len(),
                inputs,
                1.0,
                delta_out.as_ptr().add(c.start),
                outputs as isize,
                1,
                w.as_ptr().add(c.start * inputs),
                inputs as isize,
                1,
                1.0,
                delta_in.as_mut_ptr(),
                inputs as isize,
                1,
            );
        }
    }
}

/// `δ_in = δ_out · w`: `delta_out` is `batch × outputs`, `delta_in` is `batch × inputs`
/// (the error at a layer's input before its activation's derivative), summed over the
/// outputs' canonical [`chunks`] ([`backward_chunks`]).
pub fn linear_backward(
    w: &[f32],
    delta_out: &[f32],
    delta_in: &mut [f32],
    batch: usize,
    inputs: usize,
    outputs: usize,
) {
    delta_in[..batch * inputs].fill(0.0);
    backward_chunks(
        w,
        delta_out,
        delta_in,
        batch,
        inputs,
        outputs,
        &chunks(outputs),
    );
}

/// `δ_in = (δ_out · w) ∘ σ'(x)`: `delta_out` is `batch × outputs`, `x` (this layer's
/// input, σ's outputs of the layer below) and `delta_in` are `batch × inputs`.
pub fn backward(
    w: &[f32],
    delta_out: &[f32],
    x: &[f32],
    delta_in: &mut [f32],
    batch: usize,
    inputs: usize,
    outputs: usize,
) {
    linear_backward(w, delta_out, delta_in, batch, inputs, outputs);
    error_terms(&mut delta_in[..batch * inputs], x);
}

/// `w −= rate · δ_outᵀ · x`.
pub fn update(
    w: &mut [f32],
    delta_out: &[f32],
    x: &[f32],
    rate: f32,
    batch: usize,
    inputs: usize,
    outputs: usize,
) {
    update_with(w, delta_out, x, rate, batch, inputs, outputs, 1.0);
}

/// `step = −rate · δ_outᵀ · x`, overwriting `step` (no pass to zero it first). Every
/// element is computed as [`update`] computes it into zeros.
pub fn step_into(
    step: &mut [f32],
    delta_out: &[f32],
    x: &[f32],
    rate: f32,
    batch: usize,
    inputs: usize,
    outputs: usize,
) {
    if batch == 0 {
        step[..outputs * inputs].fill(0.0);
        return;
    }
    update_with(step, delta_out, x, rate, batch, inputs, outputs, 0.0);
}

/// `w = beta · w − rate · δ_outᵀ · x`.
#[allow(clippy::too_many_arguments)]
fn update_with(
    w: &mut [f32],
    delta_out: &[f32],
    x: &[f32],
    rate: f32,
    batch: usize,
    inputs: usize,
    outputs: usize,
    beta: f32,
) {
    // δ_outᵀ (outputs × batch) · x (batch × inputs): a is δ_out read transposed, so
    // compute it as a GEMM over the batch with explicit strides.
    assert!(delta_out.len() >= batch * outputs && x.len() >= batch * inputs);
    assert!(w.len() >= outputs * inputs);
    // SAFETY: the asserts above bound every index the strides reach.
    unsafe {
        matrixmultiply::sgemm(
            outputs,
            batch,
            inputs,
            -rate,
            delta_out.as_ptr(),
            1,
            outputs as isize,
            x.as_ptr(),
            inputs as isize,
            1,
            beta,
            w.as_mut_ptr(),
            inputs as isize,
            1,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive_forward(w: &[f32], x: &[f32], b: usize, i: usize, o: usize) -> Vec<f32> {
        let mut y = vec![0.0f32; b * o];
        for r in 0..b {
            for c in 0..o {
                let s: f32 = (0..i).map(|k| x[r * i + k] * w[c * i + k]).sum();
                y[r * o + c] = 1.0 / (1.0 + (-s).exp());
            }
        }
        y
    }

    fn data(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|k| {
                ((k as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 1000) as f32 / 1000.0
                    - 0.5
            })
            .collect()
    }

    #[test]
    fn the_kernels_compute_the_textbook_formulas() {
        let (b, i, o) = (3, 5, 4);
        let (w, x) = (data(o * i, 1), data(b * i, 2));
        let mut y = vec![0.0; b * o];
        forward(&w, &x, &mut y, b, i, o);
        let want = naive_forward(&w, &x, b, i, o);
        assert!(y.iter().zip(&want).all(|(a, c)| (a - c).abs() < 1e-6));
        let delta_out = data(b * o, 3);
        let mut delta_in = vec![0.0; b * i];
        backward(&w, &delta_out, &x, &mut delta_in, b, i, o);
        for r in 0..b {
            for k in 0..i {
                let s: f32 = (0..o).map(|c| delta_out[r * o + c] * w[c * i + k]).sum();
                let want = s * x[r * i + k] * (1.0 - x[r * i + k]);
                assert!((delta_in[r * i + k] - want).abs() < 1e-6);
            }
        }
        // The chunks in one call or split over two give the same bits.
        let (b, i, o) = (5, 7, 40);
        let (w, d) = (data(o * i, 4), data(b * o, 5));
        let mut whole = vec![0.0; b * i];
        linear_backward(&w, &d, &mut whole, b, i, o);
        let cs = chunks(o);
        assert_eq!(cs.len(), CHUNKS);
        let mut split = vec![0.0; b * i];
        backward_chunks(&w, &d, &mut split, b, i, o, &cs[..5]);
        backward_chunks(&w, &d, &mut split, b, i, o, &cs[5..]);
        assert_eq!(whole, split);
        let (b, i, o) = (3, 5, 4);
        let (w, x) = (data(o * i, 1), data(b * i, 2));
        let delta_out = data(b * o, 3);
        let mut w2 = w.clone();
        update(&mut w2, &delta_out, &x, 0.5, b, i, o);
        for c in 0..o {
            for k in 0..i {
                let g: f32 = (0..b).map(|r| delta_out[r * o + c] * x[r * i + k]).sum();
                assert!((w2[c * i + k] - (w[c * i + k] - 0.5 * g)).abs() < 1e-6);
            }
        }
    }
}
