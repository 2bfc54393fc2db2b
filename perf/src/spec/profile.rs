//! The hardware profile ([`Profile`]): the model's measured or stated costs, and how a
//! cost is looked up for a layer kind ([`Profile::muladd`]) or a thread count
//! ([`Profile::interference`], [`Profile::latency`], [`Profile::bandwidth`]).
//!
//! Profiles are the one input with several versions: version 2 adds the optional per-kind
//! `C_muladd` ([`KindCosts`]) and measured per-thread bandwidth, version 3
//! ([`PROFILE_VERSION`]) the cost per multiply-add against the working set
//! ([`CachePoint`], `spec/cache.rs`); an older file still loads and costs what it did, and a
//! file holding a newer version's field is refused naming the field. Any version may carry
//! `sources`, the origin of each constant (the model ignores it).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::cache::{cache_factor, validate_curve, CachePoint};
use super::{invalid, positive, Cluster, LayerKind, FORMAT_VERSION};
use crate::Error;

/// The newest profile version. Version 2 adds the optional [`Profile::c_muladd_by_kind_s`]
/// and [`Profile::c_nbw_per_thread_bits_per_s`], version 3
/// [`Profile::c_muladd_by_working_set`]; this build reads versions 1 to 3, and a profile
/// holding a field of a newer version than its own is refused.
pub const PROFILE_VERSION: u32 = 3;

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
    /// Format version: [`FORMAT_VERSION`] (1) to [`PROFILE_VERSION`] (3).
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
    /// Version 3: `C_muladd` against the segment's working set, as factors of the kind's
    /// `C_muladd` ([`Profile::working_set_factor`]); absent, 1 at every size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub c_muladd_by_working_set: Option<Vec<CachePoint>>,
    /// How much the replicas' weight reads overlap, between eq. 11's best case (0: one
    /// replica reads at a time, each at `min(N_ps, N_wr)` links) and eq. 10's worst (1: all
    /// `N_mr` at once, sharing the servers' links): `1 + alpha × (N_mr − 1)` replicas read
    /// at once (`Model::reads_at_once`).
    pub ps_read_alpha: f64,
    /// Where each constant comes from (a measurement, a paper's section, or "assumed" and
    /// why), by field name. The model ignores it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sources: BTreeMap<String, String>,
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
        if let Some(curve) = &self.c_muladd_by_working_set {
            validate_curve(origin, "c_muladd_by_working_set", curve)?;
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

    /// A version this build reads (1 to 3), and no field of a newer version than the file's.
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
        let newer = [
            ("c_muladd_by_kind_s", 2, !self.c_muladd_by_kind_s.is_empty()),
            (
                "c_nbw_per_thread_bits_per_s",
                2,
                self.c_nbw_per_thread_bits_per_s.is_some(),
            ),
            (
                "c_muladd_by_working_set",
                3,
                self.c_muladd_by_working_set.is_some(),
            ),
        ];
        if let Some((field, needs, _)) = newer
            .iter()
            .find(|(_, needs, present)| *present && self.version < *needs)
        {
            return Err(invalid(
                origin,
                *field,
                format!("needs \"version\": {needs} or later, not {}", self.version),
            ));
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

    /// The factor on `C_muladd` of a segment whose working set is `bytes`
    /// ([`Profile::c_muladd_by_working_set`]; 1 without a curve).
    pub fn working_set_factor(&self, bytes: f64) -> f64 {
        self.c_muladd_by_working_set
            .as_deref()
            .map_or(1.0, |curve| cache_factor(curve, bytes))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse;

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
            &v2.replace("\"version\": 2", "\"version\": 4"),
            "future.json",
        )
        .unwrap()
        .validate("future.json")
        .unwrap_err()
        .to_string();
        assert!(err.contains("version") && err.contains("is 4"), "{err}");
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
