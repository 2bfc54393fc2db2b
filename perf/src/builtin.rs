//! Built-in inputs: the Fashion-MNIST networks the DNN app trains ([`mlp`], [`cnn`]), their
//! training settings, a large ImageNet-22K-like network for the paper's findings
//! ([`imagenet_like`]), an example hardware profile with stated constants
//! ([`example_profile`]) until `iterstore calibrate` measures one, and the paper's own
//! setup as `perf/paper/` describes it, every constant with its source ([`paper_network`],
//! [`adam_cluster`], [`paper_training`]: Yan et al.'s Table 1 networks, cluster and
//! training settings).
//!
//! The example profile is not a measurement. Its constants are round numbers of the order
//! of a 2020s server core and a 10 Gbit/s Ethernet NIC:
//!
//! | constant | value | meaning |
//! |---|---|---|
//! | `c_muladd_s` | 0.5 ns | one multiply-add (SIMD-amortised), every layer kind |
//! | `c_act_s` | 10 ns | one activation function |
//! | `c_err_s` | 10 ns | one error-function evaluation |
//! | `c_interf` | `1 + 0.05 (H − 1)`, H = 1..16 | memory-bandwidth interference |
//! | `c_ncost_s` | 50 µs | latency per message, any H |
//! | `c_nbw_bits_per_s` | 10 Gbit/s | NIC bandwidth, shared equally by the H threads |
//! | `ps_read_alpha` | 0.5 | parameter-server reads halfway between eqs. 11 and 10 |

use crate::spec::{Input, KindCosts, Layer, Network, Profile, Training, FORMAT_VERSION};

/// Names of the built-in networks, as `iterstore plan --model` accepts them.
pub const NETWORKS: [&str; 5] = ["mlp", "cnn", "adam-mnist", "imagenet-22k", "imagenet-like"];

/// Names of the built-in profiles, as `iterstore plan --profile` accepts them.
pub const PROFILES: [&str; 2] = ["example", "adam-cluster"];

/// `perf/paper/adam-mnist.json`: Adam's MNIST network (Yan et al. section 6.1).
const ADAM_MNIST: &str = include_str!("../paper/adam-mnist.json");
/// `perf/paper/imagenet-22k.json`: an ImageNet-22K network as section 6.1 describes it.
const IMAGENET_22K: &str = include_str!("../paper/imagenet-22k.json");
/// `perf/paper/adam-cluster.json`: the paper's 20-machine cluster (section 6.1).
const ADAM_CLUSTER: &str = include_str!("../paper/adam-cluster.json");
/// `perf/paper/mnist-training.json`.
const MNIST_TRAINING: &str = include_str!("../paper/mnist-training.json");
/// `perf/paper/imagenet-training.json`.
const IMAGENET_TRAINING: &str = include_str!("../paper/imagenet-training.json");

/// A fully connected layer of `neurons` 32-bit neurons.
fn fc(name: &str, neurons: u64) -> Layer {
    Layer::FullyConnected {
        name: name.into(),
        neurons,
        bits: 32,
    }
}

/// A 32-bit convolution.
fn conv(name: &str, out_channels: u64, kernel: u64, stride: u64) -> Layer {
    Layer::Convolution {
        name: name.into(),
        out_channels,
        kernel,
        stride,
        padding: 0,
        bits: 32,
    }
}

/// 32-bit pooling.
fn pool(name: &str, window: u64, stride: u64) -> Layer {
    Layer::Pooling {
        name: name.into(),
        window,
        stride,
        padding: 0,
        bits: 32,
    }
}

/// A 32-bit softmax output layer.
fn softmax(name: &str, neurons: u64) -> Layer {
    Layer::Softmax {
        name: name.into(),
        neurons,
        bits: 32,
    }
}

/// The Fashion-MNIST MLP the DNN app trains (`iterstore run dnn`, its default hidden
/// layers): 784 → 512 → 256 → softmax 10.
pub fn mlp() -> Network {
    Network {
        version: FORMAT_VERSION,
        name: "fashion-mnist-mlp".into(),
        input: Input {
            channels: 1,
            size: 28,
        },
        layers: vec![fc("fc1", 512), fc("fc2", 256), softmax("out", 10)],
        sources: Default::default(),
    }
}

/// The Fashion-MNIST CNN the DNN app trains (`iterstore run dnn --model cnn`): conv 5×5×16
/// → pool 2 → conv 5×5×32 → pool 2 → fc 128 → softmax 10.
pub fn cnn() -> Network {
    Network {
        version: FORMAT_VERSION,
        name: "fashion-mnist-cnn".into(),
        input: Input {
            channels: 1,
            size: 28,
        },
        layers: vec![
            conv("conv1", 16, 5, 1),
            pool("pool1", 2, 2),
            conv("conv2", 32, 5, 1),
            pool("pool2", 2, 2),
            fc("fc", 128),
            softmax("out", 10),
        ],
        sources: Default::default(),
    }
}

/// An ImageNet-22K-like network of 8 layers as the paper describes it (5 convolutions, 2
/// fully connected, a 22,000-way softmax), on 3×128×128 inputs: about 0.7 billion connections.
pub fn imagenet_like() -> Network {
    Network {
        version: FORMAT_VERSION,
        name: "imagenet-22k-like".into(),
        input: Input {
            channels: 3,
            size: 128,
        },
        layers: vec![
            conv("conv1", 64, 7, 2),
            conv("conv2", 128, 5, 2),
            conv("conv3", 256, 3, 1),
            conv("conv4", 256, 3, 2),
            conv("conv5", 256, 3, 1),
            fc("fc6", 2048),
            fc("fc7", 2048),
            softmax("out", 22_000),
        ],
        sources: Default::default(),
    }
}

/// One of the paper's networks (`adam-mnist` or `imagenet-22k`), as `perf/paper/`
/// describes it.
pub fn paper_network(name: &str) -> Option<Network> {
    let text = match name {
        "adam-mnist" => ADAM_MNIST,
        "imagenet-22k" => IMAGENET_22K,
        _ => return None,
    };
    Some(crate::spec::parse(text, name).expect("perf/paper/ files parse (tested)"))
}

/// The training settings of the paper's network `name` (`adam-mnist`: MNIST's 60,000
/// samples; `imagenet-22k`: 15 million), reading every 70 and writing every 40 samples.
pub fn paper_training(name: &str) -> Option<Training> {
    let text = match name {
        "adam-mnist" => MNIST_TRAINING,
        "imagenet-22k" => IMAGENET_TRAINING,
        _ => return None,
    };
    Some(crate::spec::parse(text, name).expect("perf/paper/ files parse (tested)"))
}

/// The paper's cluster (section 6.1) as `perf/paper/adam-cluster.json` states it.
pub fn adam_cluster() -> Profile {
    crate::spec::parse(ADAM_CLUSTER, "adam-cluster").expect("perf/paper/ files parse (tested)")
}

/// The built-in network called `name` ([`NETWORKS`]).
pub fn network(name: &str) -> Option<Network> {
    match name {
        "mlp" => Some(mlp()),
        "cnn" => Some(cnn()),
        "imagenet-like" => Some(imagenet_like()),
        _ => paper_network(name),
    }
}

/// Fashion-MNIST's training settings: 60,000 samples per epoch, reads every 70 and writes
/// every 40 samples (the paper's default synchronisation, section 6.2).
pub fn fashion_mnist_training() -> Training {
    Training {
        version: FORMAT_VERSION,
        n_sample: 60_000,
        n_read: 70,
        n_write: 40,
        batch: None,
        synchronous_writes: None,
        sources: Default::default(),
    }
}

/// The example profile (constants in the module docs), for 16 cores.
pub fn example_profile() -> Profile {
    Profile {
        version: FORMAT_VERSION,
        name: "example".into(),
        c_muladd_s: 0.5e-9,
        c_muladd_by_kind_s: KindCosts::default(),
        c_act_s: 10e-9,
        c_err_s: 10e-9,
        c_interf: (0..16).map(|h| 1.0 + 0.05 * f64::from(h)).collect(),
        c_ncost_s: vec![50e-6],
        c_nbw_bits_per_s: 10e9,
        c_nbw_per_thread_bits_per_s: None,
        c_muladd_by_working_set: None,
        ps_read_alpha: 0.5,
        sources: Default::default(),
    }
}

/// The built-in profile called `name` ([`PROFILES`]).
pub fn profile(name: &str) -> Option<Profile> {
    match name {
        "example" => Some(example_profile()),
        "adam-cluster" => Some(adam_cluster()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_ins_are_valid() {
        for name in NETWORKS {
            network(name).unwrap().validate(name).unwrap();
        }
        for name in PROFILES {
            profile(name).unwrap().validate(name).unwrap();
        }
        fashion_mnist_training().validate("training").unwrap();
        for name in ["adam-mnist", "imagenet-22k"] {
            paper_training(name).unwrap().validate(name).unwrap();
        }
    }

    #[test]
    fn built_ins_round_trip_through_json() {
        let text = serde_json::to_string_pretty(&cnn()).unwrap();
        assert_eq!(crate::spec::parse::<Network>(&text, "cnn").unwrap(), cnn());
        let text = serde_json::to_string_pretty(&example_profile()).unwrap();
        assert_eq!(
            crate::spec::parse::<Profile>(&text, "example").unwrap(),
            example_profile()
        );
    }
}
