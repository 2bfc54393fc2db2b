//! One 2-D convolution layer over a batch of images, through im2col and `matrixmultiply`'s
//! GEMM: forward, back-propagation of the error terms to the input, and weight update.
//!
//! Layout, all row-major `f32`:
//! - images are NCHW: `batch × channels × height × width`;
//! - weights `w` are `out_channels × (in_channels · kernel · kernel)`, i.e. OIHW: row `o`
//!   is kernel `o`, its taps ordered by input channel, then kernel row, then column;
//! - the optional bias is one value per output channel.
//!
//! Kernels are square, stride and zero padding the same in both directions. For each image
//! the input is unrolled into `cols` ([`im2col`]: one row per tap, one column per output
//! position, zeros where a tap falls into the padding), so that each pass is one GEMM:
//!
//! - [`forward`]: `y = f(w · cols + b)` — `out_channels · taps · positions` multiply-adds
//!   per image, then the activation ([`Activation`]).
//! - [`backward`]: `δ_in = col2im(wᵀ · δ_out)` — the same multiply-adds, then the columns
//!   summed back onto the pixels they came from ([`col2im`]). As in
//!   [`crate::dnn::kernels::backward`], `δ_out` already holds `f'` of this layer's outputs;
//!   unlike it, the result is linear: the caller applies the derivative of the layer
//!   below's activation ([`Activation::error_terms`]), because the layer below may be a
//!   pooling layer or the input, which have none.
//! - [`update`]: `w −= η · Σ_images δ_out · colsᵀ` (and `b −= η · Σ δ_out`) — the same
//!   multiply-adds. On a zeroed `w` with `η = −1` it writes the gradient itself.
//!
//! `cols` is scratch that the caller keeps between calls (resized here as needed), so a
//! training step allocates nothing. This module knows nothing of the store, segments or
//! the performance model.

/// The activation a layer applies to its outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// The logistic function σ, as [`crate::dnn::kernels`] uses for fully connected layers.
    Logistic,
    /// `max(0, z)`; its derivative at 0 is taken as 0.
    Relu,
    /// No activation (the layer is linear).
    Identity,
}

impl Activation {
    /// Applies the activation in place.
    pub fn apply(self, y: &mut [f32]) {
        match self {
            Activation::Logistic => crate::dnn::kernels::activate(y),
            Activation::Relu => y.iter_mut().for_each(|v| *v = v.max(0.0)),
            Activation::Identity => {}
        }
    }

    /// `delta ∘ f'` in place, with the derivative taken from the activation's outputs `y`
    /// (`σ' = y (1 − y)`; ReLU's is 1 where `y > 0`, else 0).
    pub fn error_terms(self, delta: &mut [f32], y: &[f32]) {
        match self {
            Activation::Logistic => crate::dnn::kernels::error_terms(delta, y),
            Activation::Relu => {
                for (d, &a) in delta.iter_mut().zip(y) {
                    if a <= 0.0 {
                        *d = 0.0;
                    }
                }
            }
            Activation::Identity => {}
        }
    }
}

/// The shape of a convolution layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvGeometry {
    /// Input channels.
    pub in_channels: usize,
    /// Output channels (kernels).
    pub out_channels: usize,
    /// Input height.
    pub height: usize,
    /// Input width.
    pub width: usize,
    /// Kernel width and height.
    pub kernel: usize,
    /// Stride, in both directions.
    pub stride: usize,
    /// Zero padding on every side.
    pub padding: usize,
}

impl ConvGeometry {
    /// Panics unless every size is positive and the kernel fits the padded input.
    pub fn check(&self) {
        assert!(
            self.in_channels > 0 && self.out_channels > 0 && self.stride > 0 && self.kernel > 0,
            "{self:?}: channels, kernel and stride must be positive"
        );
        assert!(
            self.kernel <= self.height + 2 * self.padding
                && self.kernel <= self.width + 2 * self.padding,
            "{self:?}: the kernel does not fit the padded input"
        );
    }

    /// Output height: `(height + 2 · padding − kernel) / stride + 1`.
    pub fn out_height(&self) -> usize {
        (self.height + 2 * self.padding - self.kernel) / self.stride + 1
    }

    /// Output width: `(width + 2 · padding − kernel) / stride + 1`.
    pub fn out_width(&self) -> usize {
        (self.width + 2 * self.padding - self.kernel) / self.stride + 1
    }

    /// Taps per kernel: `in_channels · kernel²` (a row of `w`, a column of `cols`).
    pub fn taps(&self) -> usize {
        self.in_channels * self.kernel * self.kernel
    }

    /// Output positions per channel: `out_height · out_width`.
    pub fn positions(&self) -> usize {
        self.out_height() * self.out_width()
    }

    /// Values per input image.
    pub fn input_len(&self) -> usize {
        self.in_channels * self.height * self.width
    }

    /// Values per output image.
    pub fn output_len(&self) -> usize {
        self.out_channels * self.positions()
    }

    /// Length of the weights: `out_channels · taps`.
    pub fn weights_len(&self) -> usize {
        self.out_channels * self.taps()
    }

    /// Multiply-adds per image of each of the three passes (connections, padding included).
    pub fn muladds(&self) -> usize {
        self.output_len() * self.taps()
    }
}

/// `c = alpha · a · b + beta · c` for an `m × k` matrix `a` and `k × n` matrix `b`, each
/// given as `(values, row stride, column stride)`, and `c` `m × n` row-major.
#[allow(clippy::too_many_arguments)]
fn gemm(
    (m, k, n): (usize, usize, usize),
    alpha: f32,
    (a, rsa, csa): (&[f32], usize, usize),
    (b, rsb, csb): (&[f32], usize, usize),
    beta: f32,
    c: &mut [f32],
) {
    let last = |rows: usize, cols: usize, rs: usize, cs: usize| (rows - 1) * rs + (cols - 1) * cs;
    assert!(m > 0 && k > 0 && n > 0);
    assert!(last(m, k, rsa, csa) < a.len() && last(k, n, rsb, csb) < b.len());
    assert!(c.len() >= m * n);
    // SAFETY: the asserts above bound every index the strides reach.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            alpha,
            a.as_ptr(),
            rsa as isize,
            csa as isize,
            b.as_ptr(),
            rsb as isize,
            csb as isize,
            beta,
            c.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}

/// The input row and column a tap at offset `k` reads for output index `o`, or `None` in
/// the padding.
fn source(o: usize, k: usize, g: &ConvGeometry, limit: usize) -> Option<usize> {
    (o * g.stride + k)
        .checked_sub(g.padding)
        .filter(|&i| i < limit)
}

/// Unrolls one image `x` (`in_channels × height × width`) into `cols`
/// (`taps × positions`): `cols[(c, ky, kx)][(oy, ox)] = x[c][oy·s + ky − p][ox·s + kx − p]`,
/// 0 in the padding.
pub fn im2col(g: &ConvGeometry, x: &[f32], cols: &mut [f32]) {
    let (oh, ow, k) = (g.out_height(), g.out_width(), g.kernel);
    let plane = g.height * g.width;
    let mut rows = cols[..g.taps() * oh * ow].chunks_exact_mut(oh * ow);
    for c in 0..g.in_channels {
        let image = &x[c * plane..][..plane];
        for ky in 0..k {
            for kx in 0..k {
                let row = rows.next().expect("taps rows");
                for (oy, out) in row.chunks_exact_mut(ow).enumerate() {
                    let Some(iy) = source(oy, ky, g, g.height) else {
                        out.fill(0.0);
                        continue;
                    };
                    let line = &image[iy * g.width..][..g.width];
                    for (ox, v) in out.iter_mut().enumerate() {
                        *v = source(ox, kx, g, g.width).map_or(0.0, |ix| line[ix]);
                    }
                }
            }
        }
    }
}

/// The adjoint of [`im2col`]: adds every entry of `cols` (`taps × positions`) onto the
/// pixel of `x` (`in_channels × height × width`) it was read from; padding entries are
/// dropped. `x` is added to, not overwritten.
pub fn col2im(g: &ConvGeometry, cols: &[f32], x: &mut [f32]) {
    let (oh, ow, k) = (g.out_height(), g.out_width(), g.kernel);
    let plane = g.height * g.width;
    let mut rows = cols[..g.taps() * oh * ow].chunks_exact(oh * ow);
    for c in 0..g.in_channels {
        let image = &mut x[c * plane..][..plane];
        for ky in 0..k {
            for kx in 0..k {
                let row = rows.next().expect("taps rows");
                for (oy, out) in row.chunks_exact(ow).enumerate() {
                    let Some(iy) = source(oy, ky, g, g.height) else {
                        continue;
                    };
                    let line = &mut image[iy * g.width..][..g.width];
                    for (ox, v) in out.iter().enumerate() {
                        if let Some(ix) = source(ox, kx, g, g.width) {
                            line[ix] += v;
                        }
                    }
                }
            }
        }
    }
}

/// `cols` resized to one image's unrolled input.
fn scratch<'a>(g: &ConvGeometry, cols: &'a mut Vec<f32>) -> &'a mut [f32] {
    let len = g.taps() * g.positions();
    if cols.len() < len {
        cols.resize(len, 0.0);
    }
    &mut cols[..len]
}

/// `y = f(w · im2col(x) + b)` for each of `batch` images: `x` is `batch × input_len`, `y`
/// is `batch × output_len` (NCHW), `w` is `out_channels × taps`, `bias` (if any) has
/// `out_channels` values.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    g: &ConvGeometry,
    w: &[f32],
    bias: Option<&[f32]>,
    x: &[f32],
    y: &mut [f32],
    batch: usize,
    activation: Activation,
    cols: &mut Vec<f32>,
) {
    g.check();
    let (taps, positions) = (g.taps(), g.positions());
    assert!(x.len() >= batch * g.input_len() && y.len() >= batch * g.output_len());
    let cols = scratch(g, cols);
    for b in 0..batch {
        im2col(g, &x[b * g.input_len()..][..g.input_len()], cols);
        let out = &mut y[b * g.output_len()..][..g.output_len()];
        gemm(
            (g.out_channels, taps, positions),
            1.0,
            (w, taps, 1),
            (cols, positions, 1),
            0.0,
            out,
        );
        if let Some(bias) = bias {
            for (plane, &v) in out.chunks_exact_mut(positions).zip(bias) {
                plane.iter_mut().for_each(|o| *o += v);
            }
        }
    }
    activation.apply(&mut y[..batch * g.output_len()]);
}

/// `δ_in = col2im(wᵀ · δ_out)` for each of `batch` images: `delta_out` is
/// `batch × output_len` (already times this layer's `f'`), `delta_in` is
/// `batch × input_len` and is overwritten. Linear: the layer below's activation
/// derivative is the caller's (module docs).
pub fn backward(
    g: &ConvGeometry,
    w: &[f32],
    delta_out: &[f32],
    delta_in: &mut [f32],
    batch: usize,
    cols: &mut Vec<f32>,
) {
    g.check();
    let (taps, positions) = (g.taps(), g.positions());
    assert!(delta_out.len() >= batch * g.output_len());
    assert!(delta_in.len() >= batch * g.input_len());
    let cols = scratch(g, cols);
    delta_in[..batch * g.input_len()].fill(0.0);
    for b in 0..batch {
        // wᵀ (taps × out_channels): w read with its strides swapped.
        gemm(
            (taps, g.out_channels, positions),
            1.0,
            (w, 1, taps),
            (
                &delta_out[b * g.output_len()..][..g.output_len()],
                positions,
                1,
            ),
            0.0,
            cols,
        );
        col2im(g, cols, &mut delta_in[b * g.input_len()..][..g.input_len()]);
    }
}

/// `w −= rate · Σ_images δ_out · im2col(x)ᵀ` and, with a bias, `b −= rate · Σ δ_out` per
/// output channel: `delta_out` is `batch × output_len`, `x` (this layer's input) is
/// `batch × input_len`.
#[allow(clippy::too_many_arguments)]
pub fn update(
    g: &ConvGeometry,
    w: &mut [f32],
    bias: Option<&mut [f32]>,
    delta_out: &[f32],
    x: &[f32],
    rate: f32,
    batch: usize,
    cols: &mut Vec<f32>,
) {
    g.check();
    let (taps, positions) = (g.taps(), g.positions());
    assert!(delta_out.len() >= batch * g.output_len() && x.len() >= batch * g.input_len());
    assert!(w.len() >= g.weights_len());
    let cols = scratch(g, cols);
    for b in 0..batch {
        im2col(g, &x[b * g.input_len()..][..g.input_len()], cols);
        // colsᵀ (positions × taps): cols read with its strides swapped.
        gemm(
            (g.out_channels, positions, taps),
            -rate,
            (
                &delta_out[b * g.output_len()..][..g.output_len()],
                positions,
                1,
            ),
            (cols, 1, positions),
            1.0,
            w,
        );
    }
    if let Some(bias) = bias {
        for (o, v) in bias.iter_mut().enumerate().take(g.out_channels) {
            let sum: f32 = (0..batch)
                .flat_map(|b| &delta_out[b * g.output_len() + o * positions..][..positions])
                .sum();
            *v -= rate * sum;
        }
    }
}

#[cfg(test)]
mod tests;
