//! One 2-D pooling layer over a batch of images, channel by channel: max pooling and
//! average pooling, forward and backward. It has no weights and no activation.
//!
//! Images are NCHW, row-major `f32` (as in [`crate::dnn::conv`]). Windows are square,
//! without padding ("valid", as the performance model's network description has them):
//! output `(oy, ox)` of a channel covers input rows `oy·s .. oy·s + window` and columns
//! `ox·s .. ox·s + window`. Windows may overlap (`stride < window`); input rows and
//! columns past the last whole window are not read.
//!
//! - [`max_forward`]: each output is the largest value of its window; the index (within
//!   the image) of that value is kept in `argmax` (the first one on a tie).
//! - [`max_backward`]: each output's error term goes to its argmax input; inputs that
//!   were no window's maximum get 0, an input that was several windows' gets their sum.
//! - [`average_forward`], [`average_backward`]: the window's mean, and each output's error
//!   term spread equally over its window.
//!
//! Like [`crate::dnn::conv::backward`], the backward passes are linear: the caller applies
//! the derivative of the layer below's activation.

/// The shape of a pooling layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolGeometry {
    /// Channels (the same in and out).
    pub channels: usize,
    /// Input height.
    pub height: usize,
    /// Input width.
    pub width: usize,
    /// Window width and height.
    pub window: usize,
    /// Stride, in both directions.
    pub stride: usize,
}

impl PoolGeometry {
    /// Panics unless every size is positive and the window fits the input.
    pub fn check(&self) {
        assert!(
            self.channels > 0 && self.window > 0 && self.stride > 0,
            "{self:?}: channels, window and stride must be positive"
        );
        assert!(
            self.window <= self.height && self.window <= self.width,
            "{self:?}: the window does not fit the input"
        );
    }

    /// Output height: `(height − window) / stride + 1`.
    pub fn out_height(&self) -> usize {
        (self.height - self.window) / self.stride + 1
    }

    /// Output width: `(width − window) / stride + 1`.
    pub fn out_width(&self) -> usize {
        (self.width - self.window) / self.stride + 1
    }

    /// Values per input image.
    pub fn input_len(&self) -> usize {
        self.channels * self.height * self.width
    }

    /// Values per output image.
    pub fn output_len(&self) -> usize {
        self.channels * self.out_height() * self.out_width()
    }

    /// Window entries read per image (the model's connections of a pooling layer).
    pub fn connections(&self) -> usize {
        self.output_len() * self.window * self.window
    }

    /// Calls `f(output index, index of its window's top-left input)` for every output of
    /// one image, in order; indices are within the image.
    fn each_window(&self, mut f: impl FnMut(usize, usize)) {
        let plane = self.height * self.width;
        let mut out = 0;
        for c in 0..self.channels {
            for oy in 0..self.out_height() {
                for ox in 0..self.out_width() {
                    f(out, c * plane + (oy * self.width + ox) * self.stride);
                    out += 1;
                }
            }
        }
    }

    /// The window whose top-left input is `top`, as the start of each of its rows.
    fn window_rows(&self, top: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.window).map(move |dy| top + dy * self.width)
    }
}

/// Max pooling of `batch` images: `x` is `batch × input_len`, `y` and `argmax` are
/// `batch × output_len`; `argmax` gets each maximum's index within its image.
pub fn max_forward(g: &PoolGeometry, x: &[f32], y: &mut [f32], argmax: &mut [u32], batch: usize) {
    g.check();
    let (n_in, n_out) = (g.input_len(), g.output_len());
    assert!(x.len() >= batch * n_in && y.len() >= batch * n_out && argmax.len() >= batch * n_out);
    assert!(
        n_in <= u32::MAX as usize,
        "{g:?}: an image too large for u32 indices"
    );
    for b in 0..batch {
        let (image, out, arg) = (
            &x[b * n_in..][..n_in],
            &mut y[b * n_out..][..n_out],
            &mut argmax[b * n_out..][..n_out],
        );
        g.each_window(|o, top| {
            let (mut best, mut max) = (top, image[top]);
            for start in g.window_rows(top) {
                for (i, &v) in image[start..start + g.window].iter().enumerate() {
                    if v > max {
                        (best, max) = (start + i, v);
                    }
                }
            }
            out[o] = max;
            arg[o] = best as u32;
        });
    }
}

/// The error terms of max pooling: `delta_in` (`batch × input_len`, overwritten) gets each
/// output's `delta_out` at its `argmax` input (summed where windows share a maximum).
pub fn max_backward(
    g: &PoolGeometry,
    delta_out: &[f32],
    argmax: &[u32],
    delta_in: &mut [f32],
    batch: usize,
) {
    g.check();
    let (n_in, n_out) = (g.input_len(), g.output_len());
    assert!(delta_out.len() >= batch * n_out && argmax.len() >= batch * n_out);
    assert!(delta_in.len() >= batch * n_in);
    delta_in[..batch * n_in].fill(0.0);
    for b in 0..batch {
        let d_in = &mut delta_in[b * n_in..][..n_in];
        let pairs = delta_out[b * n_out..][..n_out]
            .iter()
            .zip(&argmax[b * n_out..][..n_out]);
        for (&d, &i) in pairs {
            d_in[i as usize] += d;
        }
    }
}

/// Average pooling of `batch` images: `x` is `batch × input_len`, `y` is
/// `batch × output_len`.
pub fn average_forward(g: &PoolGeometry, x: &[f32], y: &mut [f32], batch: usize) {
    g.check();
    let (n_in, n_out) = (g.input_len(), g.output_len());
    assert!(x.len() >= batch * n_in && y.len() >= batch * n_out);
    let scale = 1.0 / (g.window * g.window) as f32;
    for b in 0..batch {
        let (image, out) = (&x[b * n_in..][..n_in], &mut y[b * n_out..][..n_out]);
        g.each_window(|o, top| {
            let rows = g.window_rows(top);
            let sum: f32 = rows
                .map(|r| image[r..r + g.window].iter().sum::<f32>())
                .sum();
            out[o] = sum * scale;
        });
    }
}

/// The error terms of average pooling: `delta_in` (`batch × input_len`, overwritten) gets
/// each output's `delta_out / window²` on every input of its window.
pub fn average_backward(g: &PoolGeometry, delta_out: &[f32], delta_in: &mut [f32], batch: usize) {
    g.check();
    let (n_in, n_out) = (g.input_len(), g.output_len());
    assert!(delta_out.len() >= batch * n_out && delta_in.len() >= batch * n_in);
    let scale = 1.0 / (g.window * g.window) as f32;
    delta_in[..batch * n_in].fill(0.0);
    for b in 0..batch {
        let (d_out, d_in) = (
            &delta_out[b * n_out..][..n_out],
            &mut delta_in[b * n_in..][..n_in],
        );
        g.each_window(|o, top| {
            let share = d_out[o] * scale;
            for r in g.window_rows(top) {
                d_in[r..r + g.window].iter_mut().for_each(|d| *d += share);
            }
        });
    }
}

#[cfg(test)]
mod tests;
