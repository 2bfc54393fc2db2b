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
//! `validate`, naming the field. This module only describes; it computes no time.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::Error;

/// The version every input and plan file carries.
pub const FORMAT_VERSION: u32 = 1;

/// The newest profile version. Version 2 adds the optional [`Profile::c_muladd_by_kind_s`]
/// and [`Profile::c_nbw_per_thread_bits_per_s`]; this build reads versions 1 and 2, and a
/// version-1 profile holding either field is refused.
pub const PROFILE_VERSION: u32 = 2;

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

/// One layer of a DNN. Convolution and pooling are "valid" (no padding), square, and
/// striped by output rows when partitioned; fully connected and softmax layers are striped
/// by neuron.
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
}

/// Seconds per multiply-add of the layer kinds whose loops are not a fully connected
/// layer's GEMM (profile version 2). A kind left out costs [`Profile::c_muladd_s`].
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KindCosts {
    /// A convolution's cost per connection (im2col or col2im and the GEMM, per multiply-add).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub convolution: Option<f64>,
    /// A pooling layer's cost per window entry (connection), forward or backward.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooling: Option<f64>,
}

impl KindCosts {
    /// True when no kind has its own cost (the field is then left out of the file).
    pub fn is_empty(&self) -> bool {
        self.convolution.is_none() && self.pooling.is_none()
    }
}

/// The measured or stated costs of the machines (all homogeneous). Per-thread-count
/// vectors hold the value for `H = 1, 2, ...` threads; one entry means "the same for every
/// H", otherwise there must be one entry per core (except the per-thread bandwidth, see
/// [`Profile::bandwidth`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Format version: [`FORMAT_VERSION`] (1) or [`PROFILE_VERSION`] (2).
    pub version: u32,
    /// Profile name, for reports and plans.
    pub name: String,
    /// `C_muladd`: seconds per multiply-add (eq. 5, 7, 8) of fully connected and softmax
    /// layers, and of every kind without its own cost in `c_muladd_by_kind_s`.
    pub c_muladd_s: f64,
    /// Version 2: `C_muladd` of convolution and pooling layers, where measured apart.
    #[serde(default, skip_serializing_if = "KindCosts::is_empty")]
    pub c_muladd_by_kind_s: KindCosts,
    /// `C_act`: seconds per activation function (eq. 5).
    pub c_act_s: f64,
    /// `C_err`: seconds per error-function evaluation (eq. 7).
    pub c_err_s: f64,
    /// `C_interf(H)`: slow-down of H concurrent threads over one (eq. 9), `H = 1..`.
    pub c_interf: Vec<f64>,
    /// `C_ncost(H)`: seconds of latency per message with H threads communicating (eq. 6, 7, 9).
    pub c_ncost_s: Vec<f64>,
    /// `C_nbw`: the NIC's bandwidth in bits per second; H threads get `C_nbw / H` each (eq. 9)
    /// unless `c_nbw_per_thread_bits_per_s` says otherwise.
    pub c_nbw_bits_per_s: f64,
    /// Version 2: `C_nbw(H)` as measured, bits per second each of H concurrent streams gets,
    /// `H = 1..` (see [`Profile::bandwidth`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub c_nbw_per_thread_bits_per_s: Option<Vec<f64>>,
    /// Where the parameter-server read time lies between its best (0) and worst (1) case
    /// (eqs. 10-11): `M_w = M_min + alpha × (M_max − M_min)`.
    pub ps_read_alpha: f64,
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
    /// asynchronous and cost no epoch time in the model (section 4.2.3); carried for the plan.
    pub n_write: u64,
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
                    bits,
                    ..
                } => {
                    if *out_channels == 0 {
                        return Err(invalid(origin, at("out_channels"), "must be at least 1"));
                    }
                    (*bits, Some(("kernel", *kernel, *stride)))
                }
                Layer::Pooling {
                    window,
                    stride,
                    bits,
                    ..
                } => (*bits, Some(("window", *window, *stride))),
            };
            if bits == 0 {
                return Err(invalid(origin, at("bits"), "must be at least 1"));
            }
            if let Some((field, window, stride)) = window {
                if window == 0 || window > size {
                    return Err(invalid(
                        origin,
                        at(field),
                        format!("is {window}; it must be in 1..={size} (the input is {size} wide)"),
                    ));
                }
                if stride == 0 {
                    return Err(invalid(origin, at("stride"), "must be at least 1"));
                }
                size = (size - window) / stride + 1;
            }
        }
        Ok(())
    }
}

impl Profile {
    /// Checks the values: positive costs, `alpha` in `[0, 1]`, non-empty per-thread
    /// vectors with `C_interf(1) = 1`-or-more values. Their length against the cores is
    /// checked by [`Profile::validate_for`].
    pub fn validate(&self, origin: &str) -> Result<(), Error> {
        self.validate_version(origin)?;
        positive(origin, "c_muladd_s", self.c_muladd_s)?;
        let kinds = &self.c_muladd_by_kind_s;
        for (field, value) in [
            ("convolution", kinds.convolution),
            ("pooling", kinds.pooling),
        ] {
            if let Some(v) = value {
                positive(origin, &format!("c_muladd_by_kind_s.{field}"), v)?;
            }
        }
        if let Some(bw) = &self.c_nbw_per_thread_bits_per_s {
            if bw.is_empty() {
                return Err(invalid(
                    origin,
                    "c_nbw_per_thread_bits_per_s",
                    "must hold at least one value",
                ));
            }
            for (i, v) in bw.iter().enumerate() {
                positive(origin, &format!("c_nbw_per_thread_bits_per_s[{i}]"), *v)?;
            }
        }
        positive(origin, "c_act_s", self.c_act_s)?;
        positive(origin, "c_err_s", self.c_err_s)?;
        positive(origin, "c_nbw_bits_per_s", self.c_nbw_bits_per_s)?;
        for (field, values) in [("c_interf", &self.c_interf), ("c_ncost_s", &self.c_ncost_s)] {
            if values.is_empty() {
                return Err(invalid(origin, field, "must hold at least one value"));
            }
            for (i, v) in values.iter().enumerate() {
                if !(v.is_finite() && *v >= 0.0) {
                    return Err(invalid(
                        origin,
                        format!("{field}[{i}]"),
                        format!("must be finite and not negative, not {v}"),
                    ));
                }
            }
        }
        if self.c_interf.iter().any(|v| *v <= 0.0) {
            return Err(invalid(origin, "c_interf", "every factor must be positive"));
        }
        if !(0.0..=1.0).contains(&self.ps_read_alpha) {
            return Err(invalid(
                origin,
                "ps_read_alpha",
                format!("is {}; it must be in [0, 1]", self.ps_read_alpha),
            ));
        }
        Ok(())
    }

    /// A version this build reads (1 or 2), and no version-2 field in a version-1 profile.
    fn validate_version(&self, origin: &str) -> Result<(), Error> {
        if !(FORMAT_VERSION..=PROFILE_VERSION).contains(&self.version) {
            return Err(invalid(
                origin,
                "version",
                format!(
                    "is {}; this build reads profiles of version {FORMAT_VERSION} to {PROFILE_VERSION}",
                    self.version
                ),
            ));
        }
        if self.version < PROFILE_VERSION {
            let newer = [
                ("c_muladd_by_kind_s", !self.c_muladd_by_kind_s.is_empty()),
                (
                    "c_nbw_per_thread_bits_per_s",
                    self.c_nbw_per_thread_bits_per_s.is_some(),
                ),
            ];
            if let Some((field, _)) = newer.iter().find(|(_, present)| *present) {
                return Err(invalid(
                    origin,
                    *field,
                    format!("needs \"version\": {PROFILE_VERSION}, not {}", self.version),
                ));
            }
        }
        Ok(())
    }

    /// Checks that every per-thread vector has one entry or at least one per core.
    pub fn validate_for(&self, origin: &str, cluster: &Cluster) -> Result<(), Error> {
        for (field, values) in [("c_interf", &self.c_interf), ("c_ncost_s", &self.c_ncost_s)] {
            if values.len() != 1 && values.len() < cluster.cores as usize {
                return Err(invalid(
                    origin,
                    field,
                    format!(
                        "has {} values; it needs 1 or one per core ({})",
                        values.len(),
                        cluster.cores
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `C_interf(H)` (eq. 9): entry `H - 1`, or the only entry.
    pub fn interference(&self, threads: u32) -> f64 {
        per_threads(&self.c_interf, threads)
    }

    /// `C_ncost(H)` (eq. 9): entry `H - 1`, or the only entry.
    pub fn latency(&self, threads: u32) -> f64 {
        per_threads(&self.c_ncost_s, threads)
    }

    /// `C_muladd` of a layer of `kind`: its own cost if the profile has one, else
    /// `c_muladd_s`.
    pub fn muladd(&self, kind: LayerKind) -> f64 {
        let own = match kind {
            LayerKind::Convolution => self.c_muladd_by_kind_s.convolution,
            LayerKind::Pooling => self.c_muladd_by_kind_s.pooling,
            LayerKind::FullyConnected | LayerKind::Softmax => None,
        };
        own.unwrap_or(self.c_muladd_s)
    }

    /// `C_nbw(H)` (eq. 9), the bandwidth each of H threads gets. Without measured
    /// per-thread values, an equal share of the NIC: `C_nbw / H`. With them, entry `H − 1`;
    /// past the last measured `T` threads, the aggregate measured at `T` shared equally:
    /// `C_nbw(T) × T / H`.
    pub fn bandwidth(&self, threads: u32) -> f64 {
        let h = threads.max(1) as usize;
        match &self.c_nbw_per_thread_bits_per_s {
            None => self.c_nbw_bits_per_s / h as f64,
            Some(v) => {
                let t = h.min(v.len());
                v[t - 1] * t as f64 / h as f64
            }
        }
    }
}

/// The value for `threads` in a per-thread vector: its only entry, or entry `threads - 1`
/// (the last one past the end).
fn per_threads(values: &[f64], threads: u32) -> f64 {
    let i = (threads.max(1) as usize - 1).min(values.len() - 1);
    values[i]
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
            bits: 32,
        };
        let err = net.validate("n.json").unwrap_err().to_string();
        assert!(
            err.contains("layers[0].kernel") && err.contains("n.json"),
            "{err}"
        );
    }

    #[test]
    fn per_thread_values_extend_and_are_checked_against_the_cores() {
        let mut p = crate::builtin::example_profile();
        p.c_interf = vec![1.0, 1.5];
        let err = p
            .validate_for(
                "p.json",
                &Cluster {
                    machines: 4,
                    cores: 4,
                },
            )
            .unwrap_err()
            .to_string();
        assert!(err.contains("c_interf"), "{err}");
        assert_eq!(p.interference(2), 1.5);
        assert_eq!(p.bandwidth(4), p.c_nbw_bits_per_s / 4.0);
    }

    /// A profile as `iterstore calibrate` wrote it before version 2 (2026-11-23).
    const VERSION_1: &str = r#"{
  "version": 1,
  "name": "this-machine",
  "c_muladd_s": 2.9e-11,
  "c_act_s": 4.3e-9,
  "c_err_s": 2.3e-10,
  "c_interf": [1.0, 1.06],
  "c_ncost_s": [9.6e-5],
  "c_nbw_bits_per_s": 7.1e9,
  "ps_read_alpha": 0.5
}"#;

    #[test]
    fn a_version_1_profile_still_loads_and_costs_what_it_did() {
        let p: Profile = parse(VERSION_1, "old.json").unwrap();
        p.validate("old.json").unwrap();
        assert!(p.c_muladd_by_kind_s.is_empty() && p.c_nbw_per_thread_bits_per_s.is_none());
        assert_eq!(p.muladd(LayerKind::Convolution), 2.9e-11);
        assert_eq!(p.muladd(LayerKind::Pooling), 2.9e-11);
        assert_eq!(p.bandwidth(2), 7.1e9 / 2.0);
        assert_eq!(p.latency(2), 9.6e-5);
        // Written back, it is the same file: the new fields are left out when empty.
        let again: serde_json::Value = serde_json::to_value(&p).unwrap();
        assert_eq!(
            again,
            serde_json::from_str::<serde_json::Value>(VERSION_1).unwrap()
        );
    }

    #[test]
    fn version_2_fields_are_read_checked_and_refused_in_version_1() {
        let v2 = VERSION_1
            .replace("\"version\": 1", "\"version\": 2")
            .replace(
                "\"ps_read_alpha\": 0.5",
                "\"ps_read_alpha\": 0.5, \"c_muladd_by_kind_s\": {\"convolution\": 5e-11}, \
             \"c_nbw_per_thread_bits_per_s\": [6e9, 2e9]",
            );
        let p: Profile = parse(&v2, "new.json").unwrap();
        p.validate("new.json").unwrap();
        assert_eq!(p.muladd(LayerKind::Convolution), 5e-11);
        assert_eq!(p.muladd(LayerKind::Pooling), 2.9e-11, "left out: C_muladd");
        assert_eq!(p.muladd(LayerKind::FullyConnected), 2.9e-11);
        assert_eq!(p.bandwidth(1), 6e9);
        assert_eq!(p.bandwidth(2), 2e9);
        // Past the measured threads the aggregate of the last one is shared.
        assert_eq!(p.bandwidth(4), 2e9 * 2.0 / 4.0);
        let err = parse::<Profile>(
            &v2.replace("\"version\": 2", "\"version\": 1"),
            "mixed.json",
        )
        .unwrap()
        .validate("mixed.json")
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("mixed.json")
                && err.contains("c_muladd_by_kind_s")
                && err.contains("version"),
            "{err}"
        );
        let err = parse::<Profile>(
            &v2.replace("\"version\": 2", "\"version\": 3"),
            "future.json",
        )
        .unwrap()
        .validate("future.json")
        .unwrap_err()
        .to_string();
        assert!(err.contains("version") && err.contains("is 3"), "{err}");
        let err = parse::<Profile>(&v2.replace("convolution", "convolutoin"), "typo.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("convolutoin"), "{err}");
        let err = parse::<Profile>(&v2.replace("[6e9, 2e9]", "[6e9, 0]"), "zero.json")
            .unwrap()
            .validate("zero.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("c_nbw_per_thread_bits_per_s[1]"), "{err}");
    }
}
