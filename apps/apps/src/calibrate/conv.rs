//! `C_muladd` of convolution and pooling layers, measured apart from the fully connected
//! one: their loops are not one large GEMM. A convolution unrolls its input (im2col,
//! col2im) around GEMMs whose shapes follow the layer's channels and positions, so its cost
//! per multiply-add differs from a fully connected layer's, and from one convolution to
//! the next; pooling has no multiply-adds at all but a cost per window entry.
//!
//! The layers timed are those of a network description (by default the DNN app's CNN,
//! [`iterstore_perf::builtin::cnn`]) up to its first fully connected layer, with the
//! kernels that train them ([`iterstore_algo::dnn::conv`], [`iterstore_algo::dnn::pool`]) over a batch:
//!
//! - a convolution: forward (without the activation, which `C_act` covers), error terms
//!   to the input and weight update, over `3 × batch × connections` multiply-adds;
//! - a pooling layer (max pooling): forward and backward, over `2 × batch × connections`
//!   window entries (the model charges pooling's connections in `U_f` and, through the
//!   layer above, in the layer below's `U_b`).
//!
//! The kind's cost is the sum of its layers' times over the sum of their multiply-adds
//! (so the network's larger layers weigh more); each layer's own is reported too.

use std::time::{Duration, Instant};

use iterstore_perf::{Layer, LayerKind, Network};

use iterstore_algo::dnn::conv::{self, Activation, ConvGeometry};
use iterstore_algo::dnn::pool::{self, PoolGeometry};

use super::{fill, median, Settings};

/// One timed layer.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerCost {
    /// The layer's name in the network description.
    pub name: String,
    /// Convolution or pooling.
    pub kind: LayerKind,
    /// Seconds per multiply-add (per window entry for pooling).
    pub seconds_per_op: f64,
}

/// The measured costs of a network's convolution and pooling layers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct KindTimings {
    /// `C_muladd` of convolution, if the network has a convolution.
    pub convolution: Option<f64>,
    /// `C_muladd` of pooling (per window entry), if the network has pooling.
    pub pooling: Option<f64>,
    /// Every timed layer, bottom first.
    pub layers: Vec<LayerCost>,
}

/// A convolution or pooling layer's geometry.
enum Geometry {
    Conv(ConvGeometry),
    Pool(PoolGeometry),
}

/// The geometries of `network`'s convolution and pooling layers below its first fully
/// connected one, named (the description is square; pooling is unpadded, as the DNN app's).
fn geometries(network: &Network) -> Vec<(String, Geometry)> {
    let (mut channels, mut size) = (network.input.channels as usize, network.input.size as usize);
    let mut out = Vec::new();
    for layer in &network.layers {
        let geometry = match layer {
            Layer::Convolution {
                out_channels,
                kernel,
                stride,
                padding,
                ..
            } => {
                let g = ConvGeometry {
                    in_channels: channels,
                    out_channels: *out_channels as usize,
                    height: size,
                    width: size,
                    kernel: *kernel as usize,
                    stride: *stride as usize,
                    padding: *padding as usize,
                };
                (channels, size) = (g.out_channels, g.out_height());
                Geometry::Conv(g)
            }
            Layer::Pooling { window, stride, .. } => {
                let g = PoolGeometry {
                    channels,
                    height: size,
                    width: size,
                    window: *window as usize,
                    stride: *stride as usize,
                };
                size = g.out_height();
                Geometry::Pool(g)
            }
            Layer::FullyConnected { .. } | Layer::Softmax { .. } => break,
        };
        out.push((layer.name().to_string(), geometry));
    }
    out
}

/// The median time of one convolution training step over `batch` images, and its
/// multiply-adds.
fn time_conv(g: &ConvGeometry, s: &Settings) -> (Duration, f64) {
    let b = s.batch;
    let w = fill(g.weights_len(), 1);
    let x = fill(b * g.input_len(), 2);
    let mut y = vec![0.0; b * g.output_len()];
    let mut delta_in = vec![0.0; b * g.input_len()];
    let mut w_new = w.clone();
    let mut cols = Vec::new();
    let mut step = || {
        let started = Instant::now();
        conv::forward(g, &w, None, &x, &mut y, b, Activation::Identity, &mut cols);
        conv::backward(g, &w, &y, &mut delta_in, b, &mut cols);
        conv::update(g, &mut w_new, None, &y, &x, 1e-9, b, &mut cols);
        started.elapsed()
    };
    step(); // warm up
    (median(s.repeats, step), 3.0 * (b * g.muladds()) as f64)
}

/// The median time of one max-pooling forward and backward over `batch` images, and its
/// window entries.
fn time_pool(g: &PoolGeometry, s: &Settings) -> (Duration, f64) {
    let b = s.batch;
    let x = fill(b * g.input_len(), 3);
    let mut y = vec![0.0; b * g.output_len()];
    let mut argmax = vec![0; b * g.output_len()];
    let mut delta_in = vec![0.0; b * g.input_len()];
    let mut step = || {
        let started = Instant::now();
        pool::max_forward(g, &x, &mut y, &mut argmax, b);
        pool::max_backward(g, &y, &argmax, &mut delta_in, b);
        started.elapsed()
    };
    step(); // warm up
    (median(s.repeats, step), 2.0 * (b * g.connections()) as f64)
}

/// Times `network`'s convolution and pooling layers (module docs).
pub fn kind_costs(s: &Settings, network: &Network) -> KindTimings {
    let mut out = KindTimings::default();
    let (mut conv, mut pool) = ((0.0, 0.0), (0.0, 0.0));
    for (name, geometry) in geometries(network) {
        let (kind, (time, ops), sum) = match &geometry {
            Geometry::Conv(g) => (LayerKind::Convolution, time_conv(g, s), &mut conv),
            Geometry::Pool(g) => (LayerKind::Pooling, time_pool(g, s), &mut pool),
        };
        let seconds = time.as_secs_f64().max(1e-9);
        sum.0 += seconds;
        sum.1 += ops;
        out.layers.push(LayerCost {
            name,
            kind,
            seconds_per_op: seconds / ops,
        });
    }
    let per_op = |(t, n): (f64, f64)| (n > 0.0).then(|| t / n);
    out.convolution = per_op(conv);
    out.pooling = per_op(pool);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cnn_s_geometries_follow_its_description() {
        let g = geometries(&iterstore_perf::builtin::cnn());
        let names: Vec<&str> = g.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["conv1", "pool1", "conv2", "pool2"]);
        let Geometry::Conv(conv2) = &g[2].1 else {
            panic!("conv2 is a convolution")
        };
        // 28 -> conv 5 -> 24 -> pool 2 -> 12 -> conv 5 -> 8.
        assert_eq!(
            (conv2.in_channels, conv2.height, conv2.out_height()),
            (16, 12, 8)
        );
        // The kernels' multiply-adds are the model's connections.
        let shapes = iterstore_perf::model::shapes(&iterstore_perf::builtin::cnn());
        assert_eq!(conv2.muladds() as f64, shapes[2].connections);
        let Geometry::Pool(pool2) = &g[3].1 else {
            panic!("pool2 is pooling")
        };
        assert_eq!(pool2.connections() as f64, shapes[3].connections);
    }

    #[test]
    fn every_layer_gets_a_positive_cost() {
        let s = Settings {
            batch: 2,
            repeats: 1,
            ..Settings::quick(1)
        };
        let c = kind_costs(&s, &iterstore_perf::builtin::cnn());
        assert_eq!(c.layers.len(), 4);
        assert!(c.layers.iter().all(|l| l.seconds_per_op > 0.0), "{c:?}");
        assert!(c.convolution.unwrap() > 0.0 && c.pooling.unwrap() > 0.0);
        let mlp = kind_costs(&s, &iterstore_perf::builtin::mlp());
        assert_eq!(mlp, KindTimings::default(), "an MLP has no such layers");
    }
}
