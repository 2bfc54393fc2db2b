//! [`DnnConfig`]: the hyper-parameters of DNN training (the network's hidden layers and
//! activation, the CNN's convolutions, the SGD step and mini-batch size, the seed) and
//! their validation. It knows nothing of the data or the store.

use super::activation::Activation;

/// Hyper-parameters of mini-batch SGD on an MLP or a CNN with a softmax output layer.
#[derive(Debug, Clone, PartialEq)]
pub struct DnnConfig {
    /// Neurons of each hidden layer, input side first (the input and output sizes come
    /// from the data).
    pub hidden: Vec<usize>,
    /// The hidden layers' activation (and the CNN's convolutions').
    pub activation: Activation,
    /// The CNN's convolution stages: output channels of each, input side first (each is
    /// followed by a 2 × 2 max pooling; [`super::cnn`]). The MLP ignores it.
    pub channels: Vec<usize>,
    /// The CNN's convolution kernel width and height. The MLP ignores it.
    pub kernel: usize,
    /// The SGD step: every mini-batch moves the weights by `−learning_rate` times the mean
    /// gradient of the cross-entropy over the mini-batch.
    pub learning_rate: f32,
    /// Inverse-time decay of the step: epoch `e` (from 0) uses `learning_rate / (1 +
    /// lr_decay · e)` ([`DnnConfig::rate`]); 0 keeps it constant.
    pub lr_decay: f32,
    /// Momentum `μ`: every worker keeps its velocity `v ← μ v + step` and UPDATEs `v`.
    /// The velocities are linear in the steps, so the workers' velocities add up to the
    /// velocity of the whole mini-batch's step: under BSP this is SGD with momentum on
    /// the whole mini-batch. 0 is plain SGD.
    pub momentum: f32,
    /// Samples per mini-batch, over all workers together (each worker computes the gradient
    /// of its share, and every mini-batch ends in a CLOCK).
    pub batch: usize,
    /// Seed of the initial weights and the per-epoch sample order.
    pub seed: u64,
    /// `None`: the workers step the weights (SGD with their own momentum, above). Else
    /// the parameter servers do, by this optimizer (DistBelief's Downpour SGD applies
    /// AdaGrad there): a worker UPDATEs its share of the mini-batch's mean gradient, and
    /// the servers step every weight row once per mini-batch with `learning_rate` (decayed
    /// per epoch as above) and, for [`ServerRule::Momentum`], `momentum`.
    pub server_rule: Option<ServerRule>,
    /// `None`: an epoch ends when every model replica has processed its share. Else
    /// Project Adam's epoch quorum: it ends once this fraction of the replicas
    /// ([`super::quorum::replicas_needed`]) have, the others stopping where they are and
    /// taking their unprocessed samples first into their next epoch. Asynchronous
    /// replicas only (under SSP the fast ones wait for the slowest at every clock).
    pub epoch_quorum: Option<f32>,
    /// Project Adam's layer updates (with a server rule, the MLP): a worker sends each
    /// fully connected layer's error terms and inputs of its samples instead of the
    /// layer's gradient, and the layer's shards multiply them out (`k · (M + N)` values
    /// for `k` samples instead of `M · N`).
    pub layer_updates: bool,
    /// DistBelief's warm start: mini-batches one model replica trains alone (reading and
    /// writing every one) before the others join; 0: none.
    pub warm_start: usize,
    /// Fault injection, to see stragglers and the epoch quorum without a CPU quota: a
    /// worker that sleeps before each of its mini-batches. `None` in real runs.
    pub straggler: Option<Straggler>,
}

/// A worker made slow on purpose ([`DnnConfig::straggler`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Straggler {
    /// The global worker.
    pub worker: usize,
    /// What it sleeps before each mini-batch.
    pub delay: std::time::Duration,
}

impl std::str::FromStr for Straggler {
    type Err = String;

    /// `W:MS`: worker `W` sleeps `MS` milliseconds before each mini-batch.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?}: expected WORKER:MILLISECONDS, e.g. 3:20");
        let (w, ms) = s.split_once(':').ok_or_else(bad)?;
        let worker = w.trim().parse().map_err(|_| bad())?;
        let ms: u64 = ms.trim().parse().map_err(|_| bad())?;
        if ms > 60_000 {
            return Err(format!("{s:?}: at most 60000 ms a mini-batch"));
        }
        Ok(Self {
            worker,
            delay: std::time::Duration::from_millis(ms),
        })
    }
}

/// An optimizer the parameter servers run for the DNN ([`DnnConfig::server_rule`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerRule {
    /// Plain SGD.
    Sgd,
    /// SGD with momentum ([`DnnConfig::momentum`]).
    Momentum,
    /// AdaGrad (Downpour SGD's).
    AdaGrad,
    /// RMSProp (decay 0.9).
    RmsProp,
    /// Adam (β1 0.9, β2 0.999).
    Adam,
}

impl ServerRule {
    /// Every rule, with its name.
    pub const ALL: [(&'static str, ServerRule); 5] = [
        ("sgd", ServerRule::Sgd),
        ("momentum", ServerRule::Momentum),
        ("adagrad", ServerRule::AdaGrad),
        ("rmsprop", ServerRule::RmsProp),
        ("adam", ServerRule::Adam),
    ];

    /// Its name, as [`ServerRule::ALL`] gives it.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, r)| *r == self)
            .map_or("?", |(n, _)| n)
    }
}

impl std::str::FromStr for ServerRule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .iter()
            .find(|(n, _)| *n == s)
            .map(|(_, r)| *r)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|(n, _)| *n).collect();
                format!("{s:?} is not a server rule (one of {})", names.join(", "))
            })
    }
}

impl Default for DnnConfig {
    /// Hidden layers of 512 and 256 ReLU neurons, step 0.05 decaying as `1 / (1 + 0.5 e)`,
    /// momentum 0.9, mini-batches of 64, seed 42: on Fashion-MNIST, 89 % test accuracy
    /// after 10 epochs (BENCHMARKS.md).
    fn default() -> Self {
        Self {
            hidden: vec![512, 256],
            activation: Activation::Relu,
            channels: vec![16, 32],
            kernel: 5,
            learning_rate: 0.05,
            lr_decay: 0.5,
            momentum: 0.9,
            batch: 64,
            seed: 42,
            server_rule: None,
            epoch_quorum: None,
            layer_updates: false,
            warm_start: 0,
            straggler: None,
        }
    }
}

/// The largest hidden layer accepted (a bound against typos, not a limit of the code).
pub const MAX_NEURONS: usize = 1 << 16;

impl DnnConfig {
    /// The CNN's defaults: [`DnnConfig::default`] with one hidden layer of 128 neurons
    /// after the convolutions `5 × 5 × 16` and `5 × 5 × 32` (each with a 2 × 2 max
    /// pooling), the performance model's `cnn`.
    pub fn cnn() -> Self {
        Self {
            hidden: vec![128],
            ..Self::default()
        }
    }

    /// Checks the settings, naming the first offending one.
    pub fn validate(&self) -> Result<(), String> {
        if self.hidden.len() > 16 {
            return Err(format!("{} hidden layers: at most 16", self.hidden.len()));
        }
        if let Some(&n) = self.hidden.iter().find(|&&n| n == 0 || n > MAX_NEURONS) {
            return Err(format!(
                "hidden layer of {n} neurons: each must have 1 to {MAX_NEURONS}"
            ));
        }
        if self.channels.len() > 8 || self.channels.iter().any(|&c| c == 0 || c > 4096) {
            return Err(format!(
                "convolution channels {:?}: at most 8 stages of 1 to 4096 channels",
                self.channels
            ));
        }
        if !(1..=32).contains(&self.kernel) {
            return Err(format!("kernel {}: must be 1 to 32", self.kernel));
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return Err(format!(
                "learning rate {} must be positive and finite",
                self.learning_rate
            ));
        }
        if !(self.lr_decay.is_finite() && self.lr_decay >= 0.0) {
            return Err(format!(
                "learning-rate decay {} must be finite and >= 0",
                self.lr_decay
            ));
        }
        if !(0.0..1.0).contains(&self.momentum) {
            return Err(format!("momentum {} must be in [0, 1)", self.momentum));
        }
        if let Some(rule) = self.server_rule {
            if rule != ServerRule::Momentum && self.momentum != 0.0 {
                return Err(format!(
                    "momentum {} with server rule {}: the workers keep no velocity when the \
                     servers step (momentum is for server rule momentum)",
                    self.momentum,
                    rule.name()
                ));
            }
        }
        if self.layer_updates && self.server_rule.is_none() {
            return Err(
                "layer updates need a server rule: the servers multiply the factors \
                        out and step the weights (--server-rule)"
                    .into(),
            );
        }
        if let Some(f) = self.epoch_quorum {
            if !(f > 0.0 && f <= 1.0) {
                return Err(format!(
                    "epoch quorum {f}: a fraction of the replicas in (0, 1]"
                ));
            }
        }
        if self.batch == 0 || self.batch > 1 << 20 {
            return Err(format!(
                "mini-batch of {} samples: must be 1 to 1048576",
                self.batch
            ));
        }
        Ok(())
    }

    /// The step of epoch `epoch` (from 0) per sample of a mini-batch:
    /// `learning_rate / (1 + lr_decay · epoch) / batch`, what [`super::mlp::gradient_step`]
    /// multiplies the summed gradient by.
    pub fn rate(&self, epoch: u64) -> f32 {
        let decayed =
            f64::from(self.learning_rate) / (1.0 + f64::from(self.lr_decay) * epoch as f64);
        (decayed / self.batch as f64) as f32
    }

    /// The hidden layers as the reports write them, e.g. `256-128` (empty: none).
    pub fn hidden_text(&self) -> String {
        let sizes: Vec<String> = self.hidden.iter().map(usize::to_string).collect();
        sizes.join("-")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_setting() {
        assert!(DnnConfig::default().validate().is_ok());
        let bad = |c: DnnConfig| c.validate().unwrap_err();
        let d = DnnConfig::default;
        assert!(bad(DnnConfig {
            hidden: vec![10, 0],
            ..d()
        })
        .contains("0 neurons"));
        assert!(bad(DnnConfig {
            learning_rate: f32::NAN,
            ..d()
        })
        .contains("learning rate NaN"));
        assert!(bad(DnnConfig {
            learning_rate: -1.0,
            ..d()
        })
        .contains("learning rate -1"));
        assert!(bad(DnnConfig { batch: 0, ..d() }).contains("mini-batch of 0"));
        for f in [0.0, 1.5, f32::NAN] {
            assert!(bad(DnnConfig {
                epoch_quorum: Some(f),
                ..d()
            })
            .contains("epoch quorum"));
        }
        assert!(bad(DnnConfig {
            lr_decay: -0.5,
            ..d()
        })
        .contains("decay -0.5"));
        let c = DnnConfig {
            learning_rate: 0.4,
            lr_decay: 0.5,
            batch: 2,
            ..d()
        };
        assert_eq!((c.rate(0), c.rate(2)), (0.2, 0.1));
        assert_eq!(
            "3:20".parse::<Straggler>(),
            Ok(Straggler {
                worker: 3,
                delay: std::time::Duration::from_millis(20)
            })
        );
        for bad in ["3", "x:1", "1:-2", "1:70000"] {
            assert!(bad.parse::<Straggler>().is_err(), "{bad}");
        }
        assert_eq!(
            DnnConfig {
                hidden: vec![256, 128],
                ..d()
            }
            .hidden_text(),
            "256-128"
        );
    }
}
