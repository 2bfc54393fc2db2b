//! The model's inputs as versioned JSON files: the DNN description ([`Network`]), the
//! hardware profile ([`Profile`]), the cluster ([`Cluster`]) and the training settings
//! ([`Training`]).
//!
//! Every file (network, profile, training; the cluster comes from the command line)
//! carries `"version": 1` ([`FORMAT_VERSION`]); a profile may also be version 2
//! ([`PROFILE_VERSION`]), which adds two optional fields (per-kind `C_muladd` and measured
//! per-thread bandwidth), so every version-1 profile still loads. Every object rejects
//! unknown fields. A
//! file that does not parse is rejected naming the file, the field (the innermost key
//! before the position serde_json reports) and the line; a file that parses but holds an
//! impossible value (zero machines, a convolution larger than its input) is rejected by
//! `validate`, naming the field. The profile and its versions live in `spec/profile.rs`.
//! This module only describes; it computes no time.

use std::collections::BTreeMap;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::Error;

mod cache;
mod profile;
pub use cache::{cache_factor, CachePoint};
pub use profile::{KindCosts, Profile, PROFILE_VERSION};

/// The version every input and plan file carries.
pub const FORMAT_VERSION: u32 = 1;

/// The kind of a [`Layer`], as a network file's `kind` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LayerKind {
    /// [`Layer::FullyConnected`].
    FullyConnected,
    /// [`Layer::Convolution`].
    Convolution,
    /// [`Layer::Pooling`].
    Pooling,
    /// [`Layer::Softmax`].
    Softmax,
}

/// The input of the first layer: `channels × size × size` values (a flat input of `n`
/// values is `channels = n, size = 1`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// Channels of the input image.
    pub channels: u64,
    /// Width and height of the (square) input image.
    pub size: u64,
}

/// One layer of a DNN. Convolution and pooling are square, with an optional zero
/// `padding` on every side (absent: 0, "valid"); the output is `(size + 2 × padding −
/// kernel) / stride + 1` wide ([`out_size`]). When partitioned, a convolution is divided by
/// kernel (output channel), pooling by channel, fully connected and softmax layers by
/// neuron.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Layer {
    /// Every neuron connected to every value of the layer below.
    FullyConnected {
        /// Layer name, for reports.
        name: String,
        /// Neurons (outputs).
        neurons: u64,
        /// Bits per activation and error term.
        bits: u32,
    },
    /// A square convolution with shared kernels.
    Convolution {
        /// Layer name, for reports.
        name: String,
        /// Output channels (kernels).
        out_channels: u64,
        /// Kernel width and height.
        kernel: u64,
        /// Stride.
        stride: u64,
        /// Zeros added on every side of the input (absent: 0).
        #[serde(default, skip_serializing_if = "is_zero")]
        padding: u64,
        /// Bits per activation and error term.
        bits: u32,
    },
    /// Square max or average pooling, channel by channel; it has no weights.
    Pooling {
        /// Layer name, for reports.
        name: String,
        /// Window width and height.
        window: u64,
        /// Stride.
        stride: u64,
        /// Values added on every side of the input (absent: 0).
        #[serde(default, skip_serializing_if = "is_zero")]
        padding: u64,
        /// Bits per activation and error term.
        bits: u32,
    },
    /// The fully connected output layer with a softmax activation.
    Softmax {
        /// Layer name, for reports.
        name: String,
        /// Classes (neurons).
        neurons: u64,
        /// Bits per activation and error term.
        bits: u32,
    },
}

/// True for 0 (an absent `padding` is left out of a written file).
fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// The width of a square window's output: `(size + 2 × padding − window) / stride + 1`
/// (`window ≤ size + 2 × padding`, `stride ≥ 1`, checked by [`Network::validate`]).
pub fn out_size(size: u64, window: u64, stride: u64, padding: u64) -> u64 {
    (size + 2 * padding - window) / stride + 1
}

/// Where each constant of a file comes from, by field path (`layers[0].kernel`,
/// `n_read`): a paper's section, a measurement, or "assumed" and why. The model ignores it.
pub type Sources = BTreeMap<String, String>;

impl Layer {
    /// The layer's kind.
    pub fn kind(&self) -> LayerKind {
        match self {
            Layer::FullyConnected { .. } => LayerKind::FullyConnected,
            Layer::Convolution { .. } => LayerKind::Convolution,
            Layer::Pooling { .. } => LayerKind::Pooling,
            Layer::Softmax { .. } => LayerKind::Softmax,
        }
    }

    /// The layer's name.
    pub fn name(&self) -> &str {
        match self {
            Layer::FullyConnected { name, .. }
            | Layer::Convolution { name, .. }
            | Layer::Pooling { name, .. }
            | Layer::Softmax { name, .. } => name,
        }
    }
}

/// A DNN: its input and layers, bottom to top.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Network {
    /// Format version, [`FORMAT_VERSION`].
    pub version: u32,
    /// Network name, for reports and plans.
    pub name: String,
    /// The input of the first layer.
    pub input: Input,
    /// The layers, bottom (nearest the input) first.
    pub layers: Vec<Layer>,
    /// Where the numbers come from ([`Sources`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sources: Sources,
}

/// The machines: `machines` identical machines of `cores` cores each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    /// N: machines available (parameter servers and workers).
    pub machines: u32,
    /// K: cores per machine, the most threads a layer may use (C2).
    pub cores: u32,
}

/// The training settings of one epoch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Training {
    /// Format version, [`FORMAT_VERSION`].
    pub version: u32,
    /// `N_sample`: samples per epoch.
    pub n_sample: u64,
    /// `N_read`: a replica reads the weights from the parameter servers every `n_read` samples.
    pub n_read: u64,
    /// `N_write`: a replica writes its updates every `n_write` samples. Writes are
    /// asynchronous and cost no epoch time in the model (section 4.2.3) unless
    /// [`Training::synchronous_writes`].
    pub n_write: u64,
    /// Samples a segment copy sends in one message to a connected segment (a mini-batch
    /// share): the latency `C_ncost` of activations and error terms is paid once per
    /// message. Absent: 1, the paper's one sample per message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
    /// Whether a replica waits for its writes as for its reads (iterstore under BSP/SSP:
    /// a CLOCK sends the updates, and the next read needs them applied): each write costs
    /// what a read of the same weights costs. Absent: `false`, the paper's asynchronous
    /// writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synchronous_writes: Option<bool>,
    /// Where the numbers come from ([`Sources`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sources: Sources,
}

/// An [`Error::Invalid`] about `field` of `origin`.
fn invalid(origin: &str, field: impl Into<String>, message: impl Into<String>) -> Error {
    Error::Invalid {
        origin: origin.to_string(),
        field: field.into(),
        message: message.into(),
    }
}

/// `Ok` if `value` is finite and positive, else an error naming `field`.
fn positive(origin: &str, field: &str, value: f64) -> Result<(), Error> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(invalid(
            origin,
            field,
            format!("must be positive and finite, not {value}"),
        ))
    }
}

/// `Ok` if `version` is [`FORMAT_VERSION`].
fn check_version(origin: &str, version: u32) -> Result<(), Error> {
    if version == FORMAT_VERSION {
        Ok(())
    } else {
        Err(invalid(
            origin,
            "version",
            format!("is {version}; this build reads {FORMAT_VERSION}"),
        ))
    }
}

impl Network {
    /// Checks the values: a version this build reads, at least one layer, positive sizes,
    /// and every convolution and pooling window fitting its input. `origin` names the
    /// file (or built-in) in the error.
    pub fn validate(&self, origin: &str) -> Result<(), Error> {
        check_version(origin, self.version)?;
        if self.input.channels == 0 {
            return Err(invalid(origin, "input.channels", "must be at least 1"));
        }
        if self.input.size == 0 {
            return Err(invalid(origin, "input.size", "must be at least 1"));
        }
        if self.layers.is_empty() {
            return Err(invalid(origin, "layers", "must hold at least one layer"));
        }
        let mut size = self.input.size;
        for (i, layer) in self.layers.iter().enumerate() {
            let at = |field: &str| format!("layers[{i}].{field}");
            let (bits, window) = match layer {
                Layer::FullyConnected { neurons, bits, .. }
                | Layer::Softmax { neurons, bits, .. } => {
                    if *neurons == 0 {
                        return Err(invalid(origin, at("neurons"), "must be at least 1"));
                    }
                    size = 1;
                    (*bits, None)
                }
                Layer::Convolution {
                    out_channels,
                    kernel,
                    stride,
                    padding,
                    bits,
                    ..
                } => {
                    if *out_channels == 0 {
                        return Err(invalid(origin, at("out_channels"), "must be at least 1"));
                    }
                    (*bits, Some(("kernel", *kernel, *stride, *padding)))
                }
                Layer::Pooling {
                    window,
                    stride,
                    padding,
                    bits,
                    ..
                } => (*bits, Some(("window", *window, *stride, *padding))),
            };
            if bits == 0 {
                return Err(invalid(origin, at("bits"), "must be at least 1"));
            }
            if let Some((field, window, stride, padding)) = window {
                if padding >= window.max(1) {
                    return Err(invalid(
                        origin,
                        at("padding"),
                        format!("is {padding}; it must be less than the {field} ({window})"),
                    ));
                }
                let padded = size + 2 * padding;
                if window == 0 || window > padded {
                    return Err(invalid(
                        origin,
                        at(field),
                        format!(
                            "is {window}; it must be in 1..={padded} (the input is {size} wide, padded {padded})"
                        ),
                    ));
                }
                if stride == 0 {
                    return Err(invalid(origin, at("stride"), "must be at least 1"));
                }
                size = out_size(size, window, stride, padding);
            }
        }
        Ok(())
    }
}

impl Cluster {
    /// Checks that there are at least 2 machines (one parameter server, one worker) and
    /// at least one core.
    pub fn validate(&self) -> Result<(), Error> {
        if self.machines < 2 {
            return Err(invalid(
                "cluster",
                "machines",
                format!(
                    "is {}; it must be at least 2 (one parameter server and one worker)",
                    self.machines
                ),
            ));
        }
        if self.cores == 0 {
            return Err(invalid("cluster", "cores", "must be at least 1"));
        }
        Ok(())
    }
}

impl Training {
    /// Checks a version this build reads and positive counts.
    pub fn validate(&self, origin: &str) -> Result<(), Error> {
        check_version(origin, self.version)?;
        for (field, v) in [
            ("n_sample", self.n_sample),
            ("n_read", self.n_read),
            ("n_write", self.n_write),
            ("batch", self.batch.unwrap_or(1)),
        ] {
            if v == 0 {
                return Err(invalid(origin, field, "must be at least 1"));
            }
        }
        Ok(())
    }
}

/// Parses `text` as a `T`, naming `origin` and the field in the error.
pub fn parse<T: DeserializeOwned>(text: &str, origin: &str) -> Result<T, Error> {
    serde_json::from_str(text).map_err(|e| {
        let offset = offset_of(text, e.line(), e.column());
        // serde names unknown and missing fields itself; otherwise name the key before.
        let named = e.to_string().contains(" field `");
        Error::Parse {
            origin: origin.to_string(),
            field: if named {
                None
            } else {
                field_before(text, offset)
            },
            line: e.line(),
            message: e.to_string(),
        }
    })
}

/// Reads and parses the JSON file at `path` as a `T` (validation is the caller's).
pub fn load<T: DeserializeOwned>(path: &Path) -> Result<T, Error> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        origin: origin.clone(),
        source,
    })?;
    parse(&text, &origin)
}

/// The byte offset of 1-based `line` and `column` in `text`.
fn offset_of(text: &str, line: usize, column: usize) -> usize {
    let start: usize = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum();
    (start + column).min(text.len())
}

/// The innermost `"key":` that starts before `offset`, if any.
fn field_before(text: &str, offset: usize) -> Option<String> {
    let bytes = &text.as_bytes()[..offset];
    let mut end = bytes.len();
    while let Some(colon) = bytes[..end].iter().rposition(|&b| b == b':') {
        let before = text[..colon].trim_end();
        if let Some(key) = before.strip_suffix('"') {
            if let Some(open) = key.rfind('"') {
                return Some(key[open + 1..].to_string());
            }
        }
        end = colon;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrong_type_names_the_field_and_line() {
        let text = "{\n  \"cores\": 4,\n  \"machines\": \"many\"\n}";
        let err = parse::<Cluster>(text, "c.json").unwrap_err().to_string();
        assert!(
            err.contains("c.json") && err.contains("`machines`") && err.contains("line 3"),
            "{err}"
        );
    }

    #[test]
    fn an_unknown_field_is_rejected_by_name() {
        let text = r#"{"version": 1, "n_sample": 10, "n_read": 1, "n_write": 1, "n_raed": 3}"#;
        let err = parse::<Training>(text, "t.json").unwrap_err().to_string();
        assert!(err.contains("n_raed") && err.contains("t.json"), "{err}");
    }

    #[test]
    fn zero_machines_and_bad_geometry_name_the_field() {
        let err = Cluster {
            machines: 0,
            cores: 4,
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(err.contains("machines"), "{err}");
        let mut net = crate::builtin::cnn();
        net.layers[0] = Layer::Convolution {
            name: "c".into(),
            out_channels: 4,
            kernel: 40,
            stride: 1,
            padding: 0,
            bits: 32,
        };
        let err = net.validate("n.json").unwrap_err().to_string();
        assert!(
            err.contains("layers[0].kernel") && err.contains("n.json"),
            "{err}"
        );
    }
}
