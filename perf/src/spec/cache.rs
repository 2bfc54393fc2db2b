//! The cost of a multiply-add against a segment's working set ([`CachePoint`],
//! [`cache_factor`]): profile version 3's `c_muladd_by_working_set`.
//!
//! A segment whose weights and activations fit in a cache level multiplies faster than one
//! that streams them from the next level or from memory (Yan et al. §4.1.1: `C_muladd`
//! "captures the cache effects of model parallelism"; §6.2.1: partitioning makes
//! ImageNet-22K's working set fit in L3, so model parallelism speeds it up super-linearly).
//! A profile states the curve as points `(bytes, factor)`: a segment of working set
//! `bytes` pays `factor × C_muladd` per multiply-add. Between two points the factor is
//! interpolated linearly in `log(bytes)`; below the first and above the last it is the
//! first's and the last's. A cache level is two points close together around its size
//! (flat below, the next level's factor above). Without a curve the factor is 1.
//!
//! This module only describes the curve; which bytes make a segment's working set is the
//! model's (`Model::working_set`).

use serde::{Deserialize, Serialize};

use super::{invalid, positive};
use crate::Error;

/// One point of the cost-per-multiply-add curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CachePoint {
    /// A segment's working set, bytes.
    pub bytes: f64,
    /// Its cost per multiply-add over `C_muladd` (the layer kind's).
    pub factor: f64,
}

/// The factor of a working set of `bytes` on `curve` (points by increasing `bytes`,
/// checked when the profile is read): 1 on an empty curve, the end points' beyond the ends,
/// linear in `log(bytes)` between points.
pub fn cache_factor(curve: &[CachePoint], bytes: f64) -> f64 {
    let (Some(first), Some(last)) = (curve.first(), curve.last()) else {
        return 1.0;
    };
    if bytes <= first.bytes {
        return first.factor;
    }
    if bytes >= last.bytes {
        return last.factor;
    }
    let i = curve.partition_point(|p| p.bytes <= bytes);
    let (a, b) = (curve[i - 1], curve[i]);
    let t = (bytes.ln() - a.bytes.ln()) / (b.bytes.ln() - a.bytes.ln());
    a.factor + t * (b.factor - a.factor)
}

/// Checks a curve read from `origin`'s `field`: at least one point, positive finite bytes
/// and factors, bytes strictly increasing.
pub fn validate_curve(origin: &str, field: &str, curve: &[CachePoint]) -> Result<(), Error> {
    if curve.is_empty() {
        return Err(invalid(origin, field, "must hold at least one point"));
    }
    for (i, p) in curve.iter().enumerate() {
        positive(origin, &format!("{field}[{i}].bytes"), p.bytes)?;
        positive(origin, &format!("{field}[{i}].factor"), p.factor)?;
        if i > 0 && p.bytes <= curve[i - 1].bytes {
            return Err(invalid(
                origin,
                format!("{field}[{i}].bytes"),
                format!(
                    "is {}; the points must be by increasing bytes (the one before is {})",
                    p.bytes,
                    curve[i - 1].bytes
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(bytes: f64, factor: f64) -> CachePoint {
        CachePoint { bytes, factor }
    }

    #[test]
    fn the_factor_is_flat_outside_and_log_linear_between_points() {
        let curve = [pt(1e6, 1.0), pt(4e6, 3.0)];
        assert_eq!(cache_factor(&[], 5e9), 1.0);
        assert_eq!(cache_factor(&curve, 10.0), 1.0);
        assert_eq!(cache_factor(&curve, 1e9), 3.0);
        // 2 MB is half way between 1 and 4 MB in log(bytes).
        assert!((cache_factor(&curve, 2e6) - 2.0).abs() < 1e-12);
    }

    #[test]
    fn a_bad_curve_names_the_point() {
        let err = validate_curve("p.json", "c", &[pt(2e6, 1.0), pt(1e6, 2.0)])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("c[1].bytes") && err.contains("p.json"),
            "{err}"
        );
        let err = validate_curve("p.json", "c", &[pt(2e6, 0.0)])
            .unwrap_err()
            .to_string();
        assert!(err.contains("c[0].factor"), "{err}");
        assert!(validate_curve("p.json", "c", &[]).is_err());
    }
}
