//! A performance model and scalability optimizer for distributed DNN training, after Yan,
//! Ruwase, He and Chilimbi, "Performance Modeling and Scalability Optimization of
//! Distributed Deep Learning Systems" (KDD'15). It knows nothing of the iterstore store.
//!
//! - [`spec`]: the inputs as versioned JSON: [`Network`], [`Profile`], [`Cluster`],
//!   [`Training`], each with `validate` naming the bad field.
//! - [`model`]: [`Model`] estimates a configuration's epoch time ([`Estimate`]) from eqs.
//!   5-11, broken down per component and per layer.
//! - [`mapping`]: the segment-to-worker mapping (greedy, with a matching fallback) and the
//!   remote traffic it causes.
//! - [`optimizer`]: [`search`] enumerates `(N_ps, N_mr, N_wr)` under C1-C4 and finds each
//!   one's per-layer partitions, copies and threads by dynamic programming;
//!   [`optimizer::brute_force`] is its oracle.
//! - [`plan`]: the [`Plan`] file the DNN app reads.
//! - [`rank`]: Spearman's rank correlation, to compare the model's order of configurations
//!   with a measured one.
//! - [`builtin`]: the Fashion-MNIST `mlp` and `cnn`, a large ImageNet-like network and an
//!   example profile with stated constants.
//!
//! ```
//! use iterstore_perf::{builtin, search, Cluster, Model};
//!
//! let model = Model::new(&builtin::mlp(), &builtin::example_profile(), &builtin::fashion_mnist_training());
//! let found = search(&model, &Cluster { machines: 8, cores: 4 }).unwrap();
//! let best = found.best();
//! assert!(best.resources.machines() <= 8);
//! assert!(best.estimate.epoch_s <= found.candidates.last().unwrap().estimate.epoch_s);
//! println!("{:?}: {:.3} s per epoch", best.resources, best.estimate.epoch_s);
//! ```

#![warn(missing_docs)]

pub mod builtin;
pub mod mapping;
pub mod model;
pub mod optimizer;
pub mod plan;
pub mod rank;
pub mod spec;

pub use model::{Components, Estimate, LayerConfig, Model, Resources, Traffic};
pub use optimizer::{search, Candidate, Search};
pub use plan::Plan;
pub use spec::{Cluster, KindCosts, Layer, LayerKind, Network, Profile, Training};

/// What can go wrong reading inputs or planning. Every variant names its origin (a file,
/// a built-in, or `cluster`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read.
    #[error("{origin}: {source}")]
    Io {
        /// The file.
        origin: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A file is not valid JSON of the expected shape.
    #[error("{origin}: line {line}{}: {message}", field.as_ref().map(|f| format!(", field `{f}`")).unwrap_or_default())]
    Parse {
        /// The file.
        origin: String,
        /// The innermost field at or before the error, if any.
        field: Option<String>,
        /// The 1-based line.
        line: usize,
        /// serde_json's message.
        message: String,
    },
    /// A value is out of range.
    #[error("{origin}: field `{field}` {message}")]
    Invalid {
        /// The file, built-in or `cluster`.
        origin: String,
        /// The field, as a path (`layers[2].kernel`).
        field: String,
        /// What is wrong with it.
        message: String,
    },
}
