//! A network as a partitioned replica runs it: a [`Stack`] of [`Stage`]s, bottom first,
//! one per layer of the performance model's description of the network (pooling
//! included), each a fully connected layer, a convolution or a max pooling.
//!
//! A stage's **units** are what a segment holds whole: a fully connected layer's output
//! neurons (its table rows), a convolution's kernels (its table rows; feature-map
//! partitioning, as Krizhevsky's two-GPU network split its kernels), a pooling's
//! channels (no table). Per sample, a stage's output is `units × unit` values, unit by
//! unit (NCHW for images), so the outputs of units `a..b` are the contiguous columns
//! `a·unit..b·unit` ([`Stage::out_cols`]). A stage reads columns [`Stage::need`] of the
//! stage below's output: all of them for a fully connected layer or a convolution (every
//! output reads every input channel), its own channels for a pooling.
//!
//! Segments hold whole canonical chunks of the units ([`kernels::chunks`]), the order in
//! which fully connected layers sum their error terms over their neurons
//! ([`kernels::backward_chunks`]), so a split replica computes what one worker computes,
//! bit for bit (a split convolution's error terms below are computed whole by its last
//! segment: `iterstore_apps::dnn`'s partitioned epoch).

use std::ops::Range;

use iterstore_perf::spec::Input;
use iterstore_perf::{Layer, Network};

use super::cnn::{CnnSpec, POOL};
use super::conv::ConvGeometry;
use super::kernels;
use super::mlp::MlpSpec;
use super::pool::PoolGeometry;
use super::Activation;

/// What a stage computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A fully connected layer over the stage below's outputs (each input row carries a
    /// constant 1 after them, for the bias).
    Dense,
    /// A convolution with the stage's activation.
    Conv(ConvGeometry),
    /// A max pooling.
    Pool(PoolGeometry),
}

/// One stage of a [`Stack`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    /// The layer's name in the performance model's description (the MLP's `l0`, `l1`, ...;
    /// the CNN's `conv1`, `pool1`, ..., `fc1`, ..., `out`).
    pub name: String,
    /// What it computes.
    pub op: Op,
    /// The weight layer (table) it trains; `None` for a pooling.
    pub weights: Option<usize>,
    /// Units: neurons, kernels or channels.
    pub units: usize,
    /// Output values per sample of the stage below (pixels for the first stage).
    pub below: usize,
}

impl Stage {
    /// Output values per unit and sample: 1 for a neuron, a kernel's output positions, a
    /// channel's pooled positions.
    pub fn unit(&self) -> usize {
        match self.op {
            Op::Dense => 1,
            Op::Conv(g) => g.positions(),
            Op::Pool(g) => g.out_height() * g.out_width(),
        }
    }

    /// Output values per sample of every unit.
    pub fn out_len(&self) -> usize {
        self.units * self.unit()
    }

    /// Floats per table row (weights, then bias); 0 without weights (a pooling).
    pub fn width(&self) -> usize {
        match self.op {
            Op::Dense => self.below + 1,
            Op::Conv(g) => g.taps() + 1,
            Op::Pool(_) => 0,
        }
    }

    /// The output columns (per sample) of units `units`.
    pub fn out_cols(&self, units: &Range<usize>) -> Range<usize> {
        let unit = self.unit();
        units.start * unit..units.end * unit
    }

    /// The columns of the stage below's output that a segment of units `units` reads.
    pub fn need(&self, units: &Range<usize>) -> Range<usize> {
        match self.op {
            Op::Pool(g) => {
                let plane = g.height * g.width;
                units.start * plane..units.end * plane
            }
            Op::Dense | Op::Conv(_) => 0..self.below,
        }
    }

    /// Floats per sample of a segment's input buffer: what it reads, and for a fully
    /// connected layer the constant 1.
    pub fn x_width(&self, units: &Range<usize>) -> usize {
        self.need(units).len() + usize::from(self.op == Op::Dense)
    }

    /// Whether its error terms below are a sum over its units, which its last segment
    /// sends: a fully connected layer and a convolution. A pooling's segment computes and
    /// sends its channels' error terms alone.
    pub fn sums_below(&self) -> bool {
        !matches!(self.op, Op::Pool(_))
    }

    /// The canonical chunks of its units.
    pub fn chunks(&self) -> Vec<Range<usize>> {
        kernels::chunks(self.units)
    }

    /// The convolution of a segment of `n` kernels.
    pub fn conv_of(g: ConvGeometry, n: usize) -> ConvGeometry {
        ConvGeometry {
            out_channels: n,
            ..g
        }
    }

    /// The pooling of a segment of `n` channels.
    pub fn pool_of(g: PoolGeometry, n: usize) -> PoolGeometry {
        PoolGeometry { channels: n, ..g }
    }
}

/// The stages of a network, its hidden activation, its classes and its description for
/// the performance model's mapping of segments to workers.
#[derive(Debug, Clone, PartialEq)]
pub struct Stack {
    /// Bottom first; the last is the softmax's logits.
    pub stages: Vec<Stage>,
    /// The activation of every stage but the pooling and the last.
    pub activation: Activation,
    /// Classes (the last stage's units).
    pub classes: usize,
    /// The network as the performance model describes it (one layer per stage).
    pub network: Network,
}

impl Stack {
    /// The MLP of `spec`: one fully connected stage per weight layer.
    pub fn mlp(spec: &MlpSpec) -> Self {
        let stages = (0..spec.layers())
            .map(|l| Stage {
                name: format!("l{l}"),
                op: Op::Dense,
                weights: Some(l),
                units: spec.sizes[l + 1],
                below: spec.sizes[l],
            })
            .collect();
        Self {
            stages,
            activation: spec.activation,
            classes: spec.classes(),
            network: mlp_network(&spec.sizes),
        }
    }

    /// The CNN of `spec` (checked): a convolution and a pooling per stage of the spec,
    /// then its fully connected layers. The performance model describes square images;
    /// a `height × width` image is described by its height.
    pub fn cnn(spec: &CnnSpec) -> Self {
        let mut stages = Vec::new();
        let mut layers = Vec::new();
        let mut names = cnn_names(spec.stages(), spec.hidden.len()).into_iter();
        let mut below = spec.height * spec.width;
        for i in 0..spec.stages() {
            let (g, p) = (spec.conv(i), spec.pool(i));
            let (conv_name, pool_name) = (names.next().unwrap(), names.next().unwrap());
            stages.push(Stage {
                name: conv_name.clone(),
                op: Op::Conv(g),
                weights: Some(i),
                units: g.out_channels,
                below,
            });
            layers.push(Layer::Convolution {
                name: conv_name,
                out_channels: g.out_channels as u64,
                kernel: g.kernel as u64,
                stride: 1,
                padding: 0,
                bits: 32,
            });
            stages.push(Stage {
                name: pool_name.clone(),
                op: Op::Pool(p),
                weights: None,
                units: p.channels,
                below: g.output_len(),
            });
            layers.push(Layer::Pooling {
                name: pool_name,
                window: POOL as u64,
                stride: POOL as u64,
                padding: 0,
                bits: 32,
            });
            below = p.output_len();
        }
        let fc = spec.fc_sizes();
        for f in 0..fc.len() - 1 {
            let last = f + 2 == fc.len();
            let name = names.next().unwrap();
            stages.push(Stage {
                name: name.clone(),
                op: Op::Dense,
                weights: Some(spec.stages() + f),
                units: fc[f + 1],
                below: fc[f],
            });
            layers.push(dense_layer(name, fc[f + 1], last));
        }
        Self {
            stages,
            activation: spec.activation,
            classes: spec.classes,
            network: Network {
                version: iterstore_perf::spec::FORMAT_VERSION,
                name: "cnn".into(),
                input: Input {
                    channels: 1,
                    size: spec.height as u64,
                },
                layers,
                sources: Default::default(),
            },
        }
    }

    /// Stages.
    pub fn len(&self) -> usize {
        self.stages.len()
    }

    /// Whether it has no stage (never: a network has an output layer).
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// The stages' names, in order, comma-separated.
    pub fn names(&self) -> String {
        let names: Vec<&str> = self.stages.iter().map(|s| s.name.as_str()).collect();
        names.join(",")
    }
}

/// The names of a CNN's stages with `convolutions` convolutions and `hidden` fully
/// connected hidden layers: `conv1`, `pool1`, ..., `fc1`, ..., `out`.
pub fn cnn_names(convolutions: usize, hidden: usize) -> Vec<String> {
    (1..=convolutions)
        .flat_map(|i| [format!("conv{i}"), format!("pool{i}")])
        .chain((1..=hidden).map(|f| format!("fc{f}")))
        .chain(["out".to_string()])
        .collect()
}

/// The optimizer's description of an MLP of `sizes` (inputs, hidden layers, classes):
/// fully connected layers under a softmax.
pub fn mlp_network(sizes: &[usize]) -> Network {
    let last = sizes.len() - 2;
    Network {
        version: iterstore_perf::spec::FORMAT_VERSION,
        name: "mlp".into(),
        input: Input {
            channels: sizes[0] as u64,
            size: 1,
        },
        layers: (0..=last)
            .map(|l| dense_layer(format!("l{l}"), sizes[l + 1], l == last))
            .collect(),
        sources: Default::default(),
    }
}

/// The performance model's 32-bit fully connected layer of `neurons` neurons, the softmax
/// output if `last`.
fn dense_layer(name: String, neurons: usize, last: bool) -> Layer {
    let neurons = neurons as u64;
    if last {
        Layer::Softmax {
            name,
            neurons,
            bits: 32,
        }
    } else {
        Layer::FullyConnected {
            name,
            neurons,
            bits: 32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dnn::DnnConfig;

    #[test]
    fn the_cnn_stages_match_the_model_description_and_chain_their_sizes() {
        let spec = CnnSpec::new(28, 28, &DnnConfig::cnn(), 10);
        let s = Stack::cnn(&spec);
        assert_eq!(s.names(), "conv1,pool1,conv2,pool2,fc1,out");
        // The built-in description the optimizer plans with, up to names.
        let shape = |n: &Network| -> Vec<(f64, u64, f64, f64)> {
            iterstore_perf::model::shapes(n)
                .iter()
                .map(|x| (x.neurons, x.rows, x.connections, x.params))
                .collect()
        };
        assert_eq!(shape(&s.network), shape(&iterstore_perf::builtin::cnn()));
        for pair in s.stages.windows(2) {
            assert_eq!(
                pair[0].units * pair[0].unit(),
                pair[1].below,
                "{}",
                pair[1].name
            );
        }
        let tables: Vec<_> = s.stages.iter().filter_map(|x| x.weights).collect();
        assert_eq!(tables, [0, 1, 2, 3]);
        // A pooling segment of channels 4..8 reads those channels of its 24 x 24 input.
        assert_eq!(s.stages[1].need(&(4..8)), 4 * 576..8 * 576);
        assert_eq!(s.stages[1].out_cols(&(4..8)), 4 * 144..8 * 144);
        assert_eq!(s.stages[2].need(&(0..3)), 0..16 * 144);
        assert_eq!(s.stages[4].x_width(&(0..64)), 513);
        assert!(!s.stages[3].sums_below() && s.stages[2].sums_below());
    }

    #[test]
    fn the_mlp_stages_are_its_layers() {
        let spec = MlpSpec {
            sizes: vec![20, 40, 12, 5],
            activation: Activation::Relu,
        };
        let s = Stack::mlp(&spec);
        assert_eq!(s.names(), "l0,l1,l2");
        assert_eq!(s.stages[1].x_width(&(0..3)), 41);
        assert_eq!(s.stages[2].out_cols(&(2..5)), 2..5);
        assert_eq!(s.network, mlp_network(&spec.sizes));
    }
}
