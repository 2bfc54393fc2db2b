//! The scalability optimizer (section 5): the fastest configuration for a cluster.
//!
//! [`search`] enumerates the resources `(N_ps, N_mr, N_wr)` with `N_ps, N_mr, N_wr ≥ 1`
//! and `N_ps + N_mr × N_wr ≤ N` (C1). For each it finds the per-layer partitions `P(l)`,
//! copies `R(l)` and threads `H(l)` by dynamic programming over the layers (section 5.3):
//! the state of layer `l` is `(P(l), R(l), H(l))` with `P(l) × R(l) ≤ N_wr` (C3: each
//! segment copy has its own worker; `P(l)` at most the layer's rows) and `H(l) ≤ K` (C2; C4
//! holds by construction, a copy's threads share its worker). A layer's own cost (compute,
//! parameter-server reads) depends on its state only, and the traffic between layers
//! `l − 1` and `l` on their two splits only, through the greedy segment-to-worker mapping
//! ([`crate::mapping::greedy`]), so
//!
//! `T([1, l], s_l) = node(l, s_l) + min_{s_{l−1}} [T([1, l − 1], s_{l−1}) + edge(l, s_{l−1}, s_l)]`
//!
//! is exact. The edge cost splits into a part depending on `H(l − 1)` (`M_b` of layer
//! `l − 1`) and one depending on `H(l)` (`M_f` of layer `l`), so the minimum over
//! `H(l − 1)` is taken once per pair of splits, not once per `H(l)`.
//!
//! **Complexity.** With `S = |{(P, R): P × R ≤ N}| = O(N log N)` splits, the traffic tables
//! cost `O(L × S² × N²)` greedy steps (`O(N³)` more where a matching fallback runs), and one
//! DP `O(L × S² × K)`. The DP runs once per `(N_wr, N_mr, N_ps)` (eq. 10 charges the
//! replicas' reads to `N_ps` servers), or per `(N_wr, N_mr, min(N_ps, N_wr))` when the
//! profile's `alpha` is 0 and only eq. 11 counts: `O(N² log N)` runs, in all
//! `O(L × K × N⁴ log³ N)` (the paper's bound is `O(L × K × N⁷)`).
//!
//! [`brute_force`] tries every configuration and every injective mapping; it is the oracle
//! for small instances.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::mapping::{self, Pair, Split};
use crate::model::{Estimate, LayerConfig, Model, Resources, Traffic};
use crate::spec::Cluster;
use crate::Error;

/// One configuration with its estimate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// `(N_ps, N_mr, N_wr)`.
    pub resources: Resources,
    /// `(P, R, H)` of every layer, bottom first.
    pub layers: Vec<LayerConfig>,
    /// The remote traffic between adjacent layers under the chosen mapping.
    pub traffic: Vec<Traffic>,
    /// The estimated epoch time and breakdown.
    pub estimate: Estimate,
}

/// The result of a search: the best configuration for every `(N_ps, N_mr, N_wr)`, fastest first.
#[derive(Debug, Clone, PartialEq)]
pub struct Search {
    /// The best candidate per resource triple, by epoch time, then fewer machines.
    pub candidates: Vec<Candidate>,
    /// DP runs (distinct `(N_wr, N_mr, N_ps)`, with `min(N_ps, N_wr)` for `N_ps` when the
    /// profile's `alpha` is 0).
    pub dp_runs: usize,
}

impl Search {
    /// The fastest candidate.
    pub fn best(&self) -> &Candidate {
        &self.candidates[0]
    }

    /// Epoch time of the slowest triple's best configuration over the fastest's.
    pub fn spread(&self) -> f64 {
        let last = self.candidates.last().expect("a search has candidates");
        last.estimate.epoch_s / self.best().estimate.epoch_s
    }
}

/// Every `(N_ps, N_mr, N_wr)` allowed by C1 on `cluster`, each at least 1.
pub fn resources(cluster: &Cluster) -> Vec<Resources> {
    let n = cluster.machines;
    let mut out = Vec::new();
    for workers in 1..n {
        for replicas in 1..=(n - 1) / workers {
            for parameter_servers in 1..=n - replicas * workers {
                out.push(Resources {
                    parameter_servers,
                    replicas,
                    workers,
                });
            }
        }
    }
    out
}

/// All splits with `P × R ≤ max`, by `P × R`, then `P`.
fn splits(max: u32) -> Vec<Split> {
    let mut out: Vec<Split> = (1..=max)
        .flat_map(|p| {
            (1..=max / p).map(move |r| Split {
                partitions: p,
                replications: r,
            })
        })
        .collect();
    out.sort_by_key(|s| (s.partitions * s.replications, s.partitions));
    out
}

/// The traffic of every pair of splits between every pair of adjacent layers, by one mapper.
struct Tables {
    splits: Vec<Split>,
    /// `traffic[l - 1][i0 * S + i1]`, `None` where a split does not fit a layer's rows.
    traffic: Vec<Vec<Option<Traffic>>>,
}

impl Tables {
    fn new(model: &Model, max_workers: u32, mapper: fn(&Pair) -> mapping::Mapping) -> Self {
        let splits = splits(max_workers);
        let shapes = model.shapes();
        let n = splits.len();
        let traffic = (1..shapes.len())
            .map(|l| {
                let mut table = vec![None; n * n];
                for (i0, &s0) in splits.iter().enumerate() {
                    for (i1, &s1) in splits.iter().enumerate() {
                        if fits(model, l - 1, s0) && fits(model, l, s1) {
                            let pair = Pair {
                                lower: &shapes[l - 1],
                                upper: &shapes[l],
                                lower_split: s0,
                                upper_split: s1,
                            };
                            table[i0 * n + i1] = Some(mapper(&pair).traffic);
                        }
                    }
                }
                table
            })
            .collect();
        Self { splits, traffic }
    }

    fn get(&self, l: usize, i0: usize, i1: usize) -> Traffic {
        self.traffic[l - 1][i0 * self.splits.len() + i1].expect("both splits fit")
    }
}

/// True if layer `l` can have `split.partitions` stripes.
fn fits(model: &Model, l: usize, split: Split) -> bool {
    u64::from(split.partitions) <= model.shapes()[l].rows
}

/// A layer configuration from a split and a thread count.
fn config(split: Split, threads: u32) -> LayerConfig {
    LayerConfig {
        partitions: split.partitions,
        replications: split.replications,
        threads,
    }
}

/// The best per-layer configuration for `res` by dynamic programming over the layers.
fn dp(model: &Model, tables: &Tables, res: &Resources, cores: u32) -> Vec<LayerConfig> {
    let layers = model.shapes().len();
    let k = cores as usize;
    let valid: Vec<Vec<usize>> = (0..layers)
        .map(|l| {
            (0..tables.splits.len())
                .filter(|&i| {
                    tables.splits[i].copies() <= res.workers as usize
                        && fits(model, l, tables.splits[i])
                })
                .collect()
        })
        .collect();
    let n = tables.splits.len();
    let idx = |i: usize, h: usize| i * k + h;
    let mut best = vec![f64::INFINITY; n * k];
    let mut back: Vec<Vec<(usize, usize)>> = vec![vec![(0, 0); n * k]; layers];
    for &i in &valid[0] {
        for h in 0..k {
            best[idx(i, h)] = model
                .node(0, &config(tables.splits[i], h as u32 + 1), res)
                .total();
        }
    }
    for l in 1..layers {
        let mut next = vec![f64::INFINITY; n * k];
        for &i0 in &valid[l - 1] {
            for &i1 in &valid[l] {
                let t = tables.get(l, i0, i1);
                // The part of the edge that depends on H(l − 1): M_b of layer l − 1.
                let (mut inner, mut arg) = (f64::INFINITY, 0);
                for h0 in 0..k {
                    let lower = config(tables.splits[i0], h0 as u32 + 1);
                    let v = best[idx(i0, h0)] + model.edge_backward(l, &lower, res, t.errors);
                    if v < inner {
                        (inner, arg) = (v, h0);
                    }
                }
                for h1 in 0..k {
                    let upper = config(tables.splits[i1], h1 as u32 + 1);
                    let v = inner + model.edge_forward(l, &upper, res, t.activations);
                    if v < next[idx(i1, h1)] {
                        next[idx(i1, h1)] = v;
                        back[l][idx(i1, h1)] = (i0, arg);
                    }
                }
            }
        }
        for &i1 in &valid[l] {
            for h1 in 0..k {
                next[idx(i1, h1)] += model
                    .node(l, &config(tables.splits[i1], h1 as u32 + 1), res)
                    .total();
            }
        }
        best = next;
    }
    let (mut i, mut h) = (0, 0);
    for &i1 in &valid[layers - 1] {
        for h1 in 0..k {
            if best[idx(i1, h1)] < best[idx(i, h)] {
                (i, h) = (i1, h1);
            }
        }
    }
    let mut out = vec![config(tables.splits[i], h as u32 + 1); layers];
    for l in (1..layers).rev() {
        (i, h) = back[l][idx(i, h)];
        out[l - 1] = config(tables.splits[i], h as u32 + 1);
    }
    out
}

/// The traffic between adjacent layers of `layers` from `tables`.
fn traffic_of(tables: &Tables, layers: &[LayerConfig]) -> Vec<Traffic> {
    let index = |c: &LayerConfig| {
        tables
            .splits
            .iter()
            .position(|s| s.partitions == c.partitions && s.replications == c.replications)
            .expect("a split of the table")
    };
    (1..layers.len())
        .map(|l| tables.get(l, index(&layers[l - 1]), index(&layers[l])))
        .collect()
}

/// The candidate of one explicit configuration, with the greedy mapping's traffic.
pub fn evaluate(model: &Model, res: &Resources, layers: &[LayerConfig]) -> Candidate {
    let shapes = model.shapes();
    let split = |c: &LayerConfig| Split {
        partitions: c.partitions,
        replications: c.replications,
    };
    let traffic: Vec<Traffic> = (1..layers.len())
        .map(|l| {
            let pair = Pair {
                lower: &shapes[l - 1],
                upper: &shapes[l],
                lower_split: split(&layers[l - 1]),
                upper_split: split(&layers[l]),
            };
            mapping::greedy(&pair).traffic
        })
        .collect();
    let estimate = model.estimate(res, layers, &traffic);
    Candidate {
        resources: *res,
        layers: layers.to_vec(),
        traffic,
        estimate,
    }
}

/// The configuration prior systems use (section 4.1: "the same number of partitions for an
/// entire neural network"): every layer striped over all `N_wr` workers (at most its rows),
/// no copies, `cores` threads.
pub fn uniform(model: &Model, res: &Resources, cores: u32) -> Candidate {
    let layers: Vec<LayerConfig> = model
        .shapes()
        .iter()
        .map(|s| LayerConfig {
            partitions: u64::from(res.workers).min(s.rows) as u32,
            replications: 1,
            threads: cores,
        })
        .collect();
    evaluate(model, res, &layers)
}

/// Checks `model`'s profile against `cluster`.
fn check(model: &Model, cluster: &Cluster) -> Result<(), Error> {
    cluster.validate()?;
    model.profile().validate_for(&model.profile().name, cluster)
}

/// Orders candidates: faster first, then fewer machines, then by resources.
fn sort(candidates: &mut [Candidate]) {
    candidates.sort_by(|a, b| {
        a.estimate
            .epoch_s
            .total_cmp(&b.estimate.epoch_s)
            .then(a.resources.machines().cmp(&b.resources.machines()))
            .then(a.resources.cmp(&b.resources))
    });
}

/// What of `res` the DP's answer depends on: `N_wr`, `N_mr` and the servers. Eq. 11 sees
/// `min(N_ps, N_wr)` only; eq. 10 (weighted by `alpha` in [`Model::ps_read`]) sees `N_ps`
/// itself, so runs are shared across `N_ps` only when `alpha` is 0.
fn dp_key(model: &Model, res: &Resources) -> (u32, u32, u32) {
    let servers = if model.profile().ps_read_alpha > 0.0 {
        res.parameter_servers
    } else {
        res.parameter_servers.min(res.workers)
    };
    (res.workers, res.replicas, servers)
}

/// The best configuration of every resource triple on `cluster`, fastest first.
pub fn search(model: &Model, cluster: &Cluster) -> Result<Search, Error> {
    check(model, cluster)?;
    let tables = Tables::new(model, cluster.machines - 1, mapping::greedy);
    let mut runs: HashMap<(u32, u32, u32), Vec<LayerConfig>> = HashMap::new();
    let mut candidates = Vec::new();
    for res in resources(cluster) {
        let key = dp_key(model, &res);
        let layers = runs
            .entry(key)
            .or_insert_with(|| dp(model, &tables, &res, cluster.cores))
            .clone();
        let traffic = traffic_of(&tables, &layers);
        let estimate = model.estimate(&res, &layers, &traffic);
        candidates.push(Candidate {
            resources: res,
            layers,
            traffic,
            estimate,
        });
    }
    sort(&mut candidates);
    Ok(Search {
        candidates,
        dp_runs: runs.len(),
    })
}

/// The best per-layer configuration of the one resource triple `res` on `cluster` (the
/// search's dynamic program for it alone), with its estimate: what `iterstore plan
/// --evaluate W/R/PS` prints. `res` must fit the cluster (C1) with every count at least 1.
pub fn best_for(model: &Model, cluster: &Cluster, res: &Resources) -> Result<Candidate, Error> {
    check(model, cluster)?;
    if res.parameter_servers == 0 || res.replicas == 0 || res.workers == 0 {
        return Err(Error::Invalid {
            origin: "configuration".into(),
            field: "W/R/PS".into(),
            message: "every count must be at least 1".into(),
        });
    }
    if res.machines() > cluster.machines {
        return Err(Error::Invalid {
            origin: "configuration".into(),
            field: "W/R/PS".into(),
            message: format!(
                "{}/{}/{} uses {} machines (W x R + PS); the cluster has {}",
                res.workers,
                res.replicas,
                res.parameter_servers,
                res.machines(),
                cluster.machines
            ),
        });
    }
    let tables = Tables::new(model, res.workers, mapping::greedy);
    let layers = dp(model, &tables, res, cluster.cores);
    let traffic = traffic_of(&tables, &layers);
    let estimate = model.estimate(res, &layers, &traffic);
    Ok(Candidate {
        resources: *res,
        layers,
        traffic,
        estimate,
    })
}

/// The fastest configuration by trying every resource triple, every per-layer
/// `(P, R, H)` and, for every pair of adjacent layers, every injective mapping.
/// Exponential in the layers and machines: for small instances (tests) only.
pub fn brute_force(model: &Model, cluster: &Cluster) -> Result<Candidate, Error> {
    check(model, cluster)?;
    let tables = Tables::new(model, cluster.machines - 1, mapping::exhaustive);
    let layers = model.shapes().len();
    let mut best: Option<Candidate> = None;
    for res in resources(cluster) {
        let states: Vec<Vec<LayerConfig>> = (0..layers)
            .map(|l| {
                tables
                    .splits
                    .iter()
                    .filter(|s| s.copies() <= res.workers as usize && fits(model, l, **s))
                    .flat_map(|&s| (1..=cluster.cores).map(move |h| config(s, h)))
                    .collect()
            })
            .collect();
        let mut pick = vec![0usize; layers];
        loop {
            let chosen: Vec<LayerConfig> = (0..layers).map(|l| states[l][pick[l]]).collect();
            let traffic = traffic_of(&tables, &chosen);
            let estimate = model.estimate(&res, &chosen, &traffic);
            if best
                .as_ref()
                .is_none_or(|b| estimate.epoch_s < b.estimate.epoch_s)
            {
                best = Some(Candidate {
                    resources: res,
                    layers: chosen,
                    traffic,
                    estimate,
                });
            }
            // The next combination, odometer style.
            let mut l = 0;
            while l < layers {
                pick[l] += 1;
                if pick[l] < states[l].len() {
                    break;
                }
                pick[l] = 0;
                l += 1;
            }
            if l == layers {
                break;
            }
        }
    }
    Ok(best.expect("a valid cluster has configurations"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_respect_c1() {
        let all = resources(&Cluster {
            machines: 5,
            cores: 1,
        });
        assert!(all
            .iter()
            .all(|r| r.machines() <= 5 && r.parameter_servers >= 1));
        assert!(all.contains(&Resources {
            parameter_servers: 1,
            replicas: 2,
            workers: 2
        }));
        assert!(all.contains(&Resources {
            parameter_servers: 4,
            replicas: 1,
            workers: 1
        }));
        assert_eq!(all.len(), 17);
    }

    #[test]
    fn splits_cover_every_product() {
        let s = splits(4);
        assert_eq!(s.len(), 8);
        assert!(s.iter().all(|s| s.partitions * s.replications <= 4));
    }
}
