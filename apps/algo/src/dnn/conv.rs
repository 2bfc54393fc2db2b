//! One 2-D convolution layer over a batch of images, through im2col and `matrixmultiply`'s
//! GEMM: forward, back-propagation of the error terms to the input, and weight update.
//!
//! Layout, all row-major `f32`:
//! - images are NCHW: `batch × channels × height × width`;
//! - weights `w` are `out_channels × (in_channels · kernel · kernel)`, i.e. OIHW: row `o`
//!   is kernel `o`, its taps ordered by input channel, then kernel row, then column;
//! - the optional bias is one value per output channel.
//!
//! Kernels are square, stride and zero padding the same in both directions. Each image is
//! unrolled ([`im2col`]: one row per tap, one column per output position, zeros where a
//! tap falls into the padding), the images of a batch side by side in `cols`, so that each
//! pass is one GEMM over the whole batch (outputs and error terms regrouped by channel
//! around it):
//!
//! - [`forward`]: `y = f(w · cols + b)` — `out_channels · taps · positions` multiply-adds
//!   per image, then the activation ([`Activation`]).
//! - [`backward`]: `δ_in = col2im(wᵀ · δ_out)` — the same multiply-adds, then the columns
//!   summed back onto the pixels they came from ([`col2im`]). As in
//!   [`crate::dnn::kernels::backward`], `δ_out` already holds `f'` of this layer's outputs;
//!   unlike it, the result is linear: the caller applies the derivative of the layer
//!   below's activation ([`Activation::derive`]), because the layer below may be a
//!   pooling layer or the input, which have none.
//! - [`update`]: `w −= η · Σ_images δ_out · colsᵀ` (and `b −= η · Σ δ_out`) — the same
//!   multiply-adds. On a zeroed `w` with `η = −1` it writes the gradient itself. Its GEMM
//!   sums over the positions, so it unrolls the images by position instead (one row of
//!   taps per position, and `δ_out` one row of channels per position): the GEMM then
//!   packs both operands by contiguous copies, where `colsᵀ` read through swapped strides
//!   cost it a gather per value (the same bits either way).
//!
//! `cols` is scratch that the caller keeps between calls (resized here as needed, to
//! `(taps + out_channels) · batch · positions` values), so a training step allocates
//! nothing. This module knows nothing of the store, segments or
//! the performance model.

pub use super::activation::Activation;

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

/// The output indices `lo..hi` (of `outputs`) whose tap at offset `k` reads inside an
/// input of `limit` values (the others read padding): those with
/// `0 ≤ o·stride + k − padding < limit`.
fn inside(outputs: usize, k: usize, g: &ConvGeometry, limit: usize) -> (usize, usize) {
    let lo = g.padding.saturating_sub(k).div_ceil(g.stride).min(outputs);
    let hi = (limit + g.padding)
        .checked_sub(k + 1)
        .map_or(0, |last| (last / g.stride + 1).min(outputs));
    (lo, hi.max(lo))
}

/// Calls `f(tap row, output row oy, input line iy (None in the padding), (lo, hi, first
/// input column))` for every tap and output row of one image: the output columns `lo..hi`
/// read input columns `first, first + stride, ...`; the others read padding.
fn each_line(
    g: &ConvGeometry,
    mut f: impl FnMut(usize, usize, Option<usize>, (usize, usize, usize)),
) {
    let (oh, ow, k) = (g.out_height(), g.out_width(), g.kernel);
    let mut r = 0;
    for c in 0..g.in_channels {
        for ky in 0..k {
            let (ylo, yhi) = inside(oh, ky, g, g.height);
            for kx in 0..k {
                let (lo, hi) = inside(ow, kx, g, g.width);
                let first = (lo * g.stride + kx).saturating_sub(g.padding);
                for oy in 0..oh {
                    let line = (ylo..yhi)
                        .contains(&oy)
                        .then(|| c * g.height + oy * g.stride + ky - g.padding);
                    f(r, oy, line, (lo, hi, first));
                }
                r += 1;
            }
        }
    }
}

/// [`im2col`] of one image into the columns `at..at + positions` of `cols`, a matrix of
/// `taps` rows of `ld` values.
fn im2col_block(g: &ConvGeometry, x: &[f32], cols: &mut [f32], ld: usize, at: usize) {
    let (ow, s) = (g.out_width(), g.stride);
    each_line(g, |r, oy, line, (lo, hi, first)| {
        let out = &mut cols[r * ld + at + oy * ow..][..ow];
        let Some(iy) = line else {
            out.fill(0.0);
            return;
        };
        let src = &x[iy * g.width..][..g.width];
        out[..lo].fill(0.0);
        out[hi..].fill(0.0);
        if lo == hi {
            return;
        }
        if s == 1 {
            // An element loop, not copy_from_slice: rows are short (a few to a few dozen
            // values) and a memcpy call per row cost more than the copy.
            let (out, src) = (&mut out[lo..hi], &src[first..first + hi - lo]);
            out.iter_mut().zip(src).for_each(|(v, &a)| *v = a);
        } else {
            for (v, &a) in out[lo..hi].iter_mut().zip(src[first..].iter().step_by(s)) {
                *v = a;
            }
        }
    });
}

/// [`col2im`] of the columns `at..at + positions` of `cols` (`taps` rows of `ld` values)
/// onto one image.
fn col2im_block(g: &ConvGeometry, cols: &[f32], x: &mut [f32], ld: usize, at: usize) {
    let (ow, s) = (g.out_width(), g.stride);
    each_line(g, |r, oy, line, (lo, hi, first)| {
        let Some(iy) = line.filter(|_| lo < hi) else {
            return;
        };
        let out = &cols[r * ld + at + oy * ow..][..ow];
        let dst = &mut x[iy * g.width..][..g.width];
        if s == 1 {
            let dst = &mut dst[first..first + hi - lo];
            dst.iter_mut().zip(&out[lo..hi]).for_each(|(d, &v)| *d += v);
        } else {
            for (d, &v) in dst[first..].iter_mut().step_by(s).zip(&out[lo..hi]) {
                *d += v;
            }
        }
    });
}

/// Unrolls one image `x` (`in_channels × height × width`) into `cols`
/// (`taps × positions`): `cols[(c, ky, kx)][(oy, ox)] = x[c][oy·s + ky − p][ox·s + kx − p]`,
/// 0 in the padding.
pub fn im2col(g: &ConvGeometry, x: &[f32], cols: &mut [f32]) {
    im2col_block(g, x, cols, g.positions(), 0);
}

/// The adjoint of [`im2col`]: adds every entry of `cols` (`taps × positions`) onto the
/// pixel of `x` (`in_channels × height × width`) it was read from; padding entries are
/// dropped. `x` is added to, not overwritten.
pub fn col2im(g: &ConvGeometry, cols: &[f32], x: &mut [f32]) {
    col2im_block(g, cols, x, g.positions(), 0);
}

/// The scratch of a batch, carved from `cols`: the unrolled inputs (`taps × batch ·
/// positions`) and the outputs or error terms by channel (`out_channels × batch ·
/// positions`).
fn scratch<'a>(
    g: &ConvGeometry,
    batch: usize,
    cols: &'a mut Vec<f32>,
) -> (&'a mut [f32], &'a mut [f32]) {
    let n = batch * g.positions();
    let len = (g.taps() + g.out_channels) * n;
    if cols.len() < len {
        cols.resize(len, 0.0);
    }
    cols[..len].split_at_mut(g.taps() * n)
}

/// Regroups `batch` NCHW images (`out_channels × positions` each) into one matrix of
/// `out_channels` rows of `batch · positions` (CNHW).
fn to_channels(g: &ConvGeometry, images: &[f32], channels: &mut [f32], batch: usize) {
    let p = g.positions();
    for (b, image) in images[..batch * g.output_len()]
        .chunks_exact(g.output_len())
        .enumerate()
    {
        for (o, plane) in image.chunks_exact(p).enumerate() {
            channels[(o * batch + b) * p..][..p].copy_from_slice(plane);
        }
    }
}

/// The inverse of [`to_channels`].
fn to_images(g: &ConvGeometry, channels: &[f32], images: &mut [f32], batch: usize) {
    let p = g.positions();
    for (b, image) in images[..batch * g.output_len()]
        .chunks_exact_mut(g.output_len())
        .enumerate()
    {
        for (o, plane) in image.chunks_exact_mut(p).enumerate() {
            plane.copy_from_slice(&channels[(o * batch + b) * p..][..p]);
        }
    }
}

/// `im2col` of every image of `x` side by side: `taps × batch · positions`.
fn unroll(g: &ConvGeometry, x: &[f32], cols: &mut [f32], batch: usize) {
    let (n, p) = (batch * g.positions(), g.positions());
    for b in 0..batch {
        im2col_block(g, &x[b * g.input_len()..][..g.input_len()], cols, n, b * p);
    }
}

/// `y = f(w · im2col(x) + b)` for each of `batch` images: `x` is `batch × input_len`, `y`
/// is `batch × output_len` (NCHW), `w` is `out_channels × taps`, `bias` (if any) has
/// `out_channels` values. One GEMM over the whole batch.
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
    assert!(x.len() >= batch * g.input_len() && y.len() >= batch * g.output_len());
    assert!(w.len() >= g.weights_len());
    if batch == 0 {
        return;
    }
    let (taps, n) = (g.taps(), batch * g.positions());
    let (cols, out) = scratch(g, batch, cols);
    unroll(g, x, cols, batch);
    gemm(
        (g.out_channels, taps, n),
        1.0,
        (w, taps, 1),
        (cols, n, 1),
        0.0,
        out,
    );
    if let Some(bias) = bias {
        for (row, &v) in out.chunks_exact_mut(n).zip(bias) {
            row.iter_mut().for_each(|o| *o += v);
        }
    }
    to_images(g, out, y, batch);
    activation.apply(&mut y[..batch * g.output_len()]);
}

/// `δ_in = col2im(wᵀ · δ_out)` for each of `batch` images: `delta_out` is
/// `batch × output_len` (already times this layer's `f'`), `delta_in` is
/// `batch × input_len` and is overwritten. Linear: the layer below's activation
/// derivative is the caller's (module docs). One GEMM over the whole batch.
pub fn backward(
    g: &ConvGeometry,
    w: &[f32],
    delta_out: &[f32],
    delta_in: &mut [f32],
    batch: usize,
    cols: &mut Vec<f32>,
) {
    g.check();
    assert!(delta_out.len() >= batch * g.output_len());
    assert!(delta_in.len() >= batch * g.input_len() && w.len() >= g.weights_len());
    delta_in[..batch * g.input_len()].fill(0.0);
    if batch == 0 {
        return;
    }
    let (taps, n, p) = (g.taps(), batch * g.positions(), g.positions());
    let (cols, delta) = scratch(g, batch, cols);
    to_channels(g, delta_out, delta, batch);
    // wᵀ (taps × out_channels): w read with its strides swapped.
    gemm(
        (taps, g.out_channels, n),
        1.0,
        (w, 1, taps),
        (delta, n, 1),
        0.0,
        cols,
    );
    for b in 0..batch {
        col2im_block(
            g,
            cols,
            &mut delta_in[b * g.input_len()..][..g.input_len()],
            n,
            b * p,
        );
    }
}

/// `w −= rate · Σ_images δ_out · im2col(x)ᵀ` and, with a bias, `b −= rate · Σ δ_out` per
/// output channel: `delta_out` is `batch × output_len`, `x` (this layer's input) is
/// `batch × input_len`. One GEMM over the whole batch.
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
    assert!(delta_out.len() >= batch * g.output_len() && x.len() >= batch * g.input_len());
    assert!(w.len() >= g.weights_len());
    if batch == 0 {
        return;
    }
    let (taps, n, out) = (g.taps(), batch * g.positions(), g.out_channels);
    // Both operands laid out with the sum's index (image and position) slowest, so that
    // the GEMM packs them by contiguous copies: the same products summed in the same
    // order as over `im2col`'s columns (the same bits).
    let (cols, delta) = scratch(g, batch, cols);
    unroll_by_position(g, x, cols, batch);
    to_positions(g, delta_out, delta, batch);
    gemm(
        (out, n, taps),
        -rate,
        (delta, 1, out),
        (cols, taps, 1),
        1.0,
        w,
    );
    if let Some(bias) = bias {
        // Each channel's sum over the positions in order, from −0.0 as `Iterator::sum`
        // adds floats (the same bits as summing each channel's plane), the channels side
        // by side in one pass.
        let mut sums = vec![-0.0f32; out];
        for row in delta[..out * n].chunks_exact(out) {
            sums.iter_mut().zip(row).for_each(|(s, &d)| *s += d);
        }
        for (v, sum) in bias.iter_mut().zip(sums) {
            *v -= rate * sum;
        }
    }
}

/// `im2col` of each of the `batch` images of `x`, transposed: one row of `taps` values
/// per output position, the images one after the other (`batch · positions` rows), zeros
/// where a tap falls into the padding.
fn unroll_by_position(g: &ConvGeometry, x: &[f32], cols: &mut [f32], batch: usize) {
    let (oh, ow, k, taps) = (g.out_height(), g.out_width(), g.kernel, g.taps());
    let mut rows = cols[..batch * g.positions() * taps].chunks_exact_mut(taps);
    for image in x[..batch * g.input_len()].chunks_exact(g.input_len()) {
        for oy in 0..oh {
            for ox in 0..ow {
                let row = rows.next().expect("a row per output position");
                let (x0, y0) = (ox * g.stride, oy * g.stride);
                let mut lines = row.chunks_exact_mut(k);
                for plane in image.chunks_exact(g.height * g.width) {
                    for ky in 0..k {
                        let line = lines.next().expect("a line of taps per kernel row");
                        let iy = (y0 + ky).wrapping_sub(g.padding);
                        if iy >= g.height {
                            line.fill(0.0);
                            continue;
                        }
                        let src = &plane[iy * g.width..][..g.width];
                        match x0.checked_sub(g.padding).and_then(|ix| src.get(ix..ix + k)) {
                            // The whole line inside the image (always without padding).
                            Some(src) => line.iter_mut().zip(src).for_each(|(v, &a)| *v = a),
                            None => {
                                for (kx, v) in line.iter_mut().enumerate() {
                                    let ix = (x0 + kx).wrapping_sub(g.padding);
                                    *v = if ix < g.width { src[ix] } else { 0.0 };
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `delta_out` (`batch` images of `out_channels` planes) regrouped by position: one row
/// of `out_channels` values per output position, the images one after the other.
fn to_positions(g: &ConvGeometry, images: &[f32], rows: &mut [f32], batch: usize) {
    let (p, out) = (g.positions(), g.out_channels);
    for (image, rows) in images[..batch * g.output_len()]
        .chunks_exact(g.output_len())
        .zip(rows.chunks_exact_mut(p * out))
    {
        // Written in order, read across the planes.
        for (pos, row) in rows.chunks_exact_mut(out).enumerate() {
            for (o, v) in row.iter_mut().enumerate() {
                *v = image[o * p + pos];
            }
        }
    }
}

#[cfg(test)]
mod tests;
