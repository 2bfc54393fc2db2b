//! The plan file: the configuration `iterstore plan` chose, as the DNN app reads it.
//!
//! A versioned JSON object ([`FORMAT_VERSION`]) naming the network, profile, cluster and
//! training settings it was made for, the resources `(N_ps, N_mr, N_wr)`, each layer's
//! partitions, copies and threads, and the estimate with its breakdown. It holds no
//! mapping of segments to workers: the mapping is a function of the splits
//! ([`crate::mapping::greedy`]), which the reader recomputes.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::model::{Estimate, Resources};
use crate::optimizer::Candidate;
use crate::spec::{self, Cluster, Training, FORMAT_VERSION};
use crate::Error;

/// One layer's part of a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlannedLayer {
    /// Layer name.
    pub name: String,
    /// `P(l)`.
    pub partitions: u32,
    /// `R(l)`.
    pub replications: u32,
    /// `H(l)`.
    pub threads: u32,
}

/// A chosen configuration, as written by `iterstore plan --output`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Format version, [`FORMAT_VERSION`].
    pub version: u32,
    /// The network's name.
    pub network: String,
    /// The profile's name.
    pub profile: String,
    /// The cluster planned for.
    pub cluster: Cluster,
    /// The training settings planned for.
    pub training: Training,
    /// `(N_ps, N_mr, N_wr)`.
    pub resources: Resources,
    /// Every layer's choices, bottom first.
    pub layers: Vec<PlannedLayer>,
    /// The estimated epoch time and its breakdown.
    pub estimate: Estimate,
}

impl Plan {
    /// The plan of `candidate`, made for `network` on `profile`, `cluster` and `training`.
    pub fn new(
        network: &str,
        profile: &str,
        cluster: Cluster,
        training: Training,
        candidate: &Candidate,
    ) -> Self {
        Self {
            version: FORMAT_VERSION,
            network: network.to_string(),
            profile: profile.to_string(),
            cluster,
            training,
            resources: candidate.resources,
            layers: candidate
                .layers
                .iter()
                .zip(&candidate.estimate.layers)
                .map(|(c, e)| PlannedLayer {
                    name: e.name.clone(),
                    partitions: c.partitions,
                    replications: c.replications,
                    threads: c.threads,
                })
                .collect(),
            estimate: candidate.estimate.clone(),
        }
    }

    /// The plan as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a plan serializes")
    }

    /// Reads the plan file at `path`, rejecting another version or an unknown field by name.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let plan: Plan = spec::load(path)?;
        if plan.version != FORMAT_VERSION {
            return Err(Error::Invalid {
                origin: path.display().to_string(),
                field: "version".into(),
                message: format!("is {}; this build reads {FORMAT_VERSION}", plan.version),
            });
        }
        Ok(plan)
    }
}
