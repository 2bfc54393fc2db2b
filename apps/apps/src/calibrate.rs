//! Measures the hardware profile of the performance model (Yan et al., KDD'15) on this
//! machine: the costs of the kernels the DNN code uses ([`iterstore_algo::dnn`]), their slow-down
//! when H threads run them at once, and the latency and bandwidth of the store's own TCP
//! transport between processes.
//!
//! - `C_muladd`: seconds per multiply-add of the fully connected layer GEMMs (forward,
//!   back-propagation and weight update of a `size × size` layer over a batch, timed
//!   together).
//! - `C_muladd` of convolution and pooling ([`conv`]): the same passes of the DNN app's
//!   CNN's convolution and pooling layers, per multiply-add (per window entry), written to
//!   the profile's `c_muladd_by_kind_s` (profile version 2).
//! - `C_act`, `C_err`: seconds per logistic activation and per error term (the element-wise
//!   passes, timed alone).
//! - `C_interf(H)`, `H = 1..threads`: the mean time of the fully connected GEMMs when H
//!   threads run them at once (each on its own matrices), over the time of one thread alone.
//! - `C_ncost(H)`, `C_nbw(H)`, `H = 1..threads` ([`network`]): H pairs of store processes
//!   on 127.0.0.1 exchanging values at once; `C_nbw(H)` goes to
//!   `c_nbw_per_thread_bits_per_s` (version 2), `C_nbw(1)` to `c_nbw_bits_per_s`.
//! - `C_muladd` against the working set ([`cache`]): the fully connected GEMMs timed at
//!   working sets below and above each of this machine's cache sizes, over `C_muladd`,
//!   written to `c_muladd_by_working_set` (version 3).
//!
//! Every figure is the median of several repetitions.

pub mod cache;
pub mod conv;
pub mod network;

use iterstore_algo::dnn::kernels;
use iterstore_perf::{spec::PROFILE_VERSION, Network, Profile};
use std::time::{Duration, Instant};

pub use cache::{CacheCurve, CacheLevel};
pub use conv::{KindTimings, LayerCost};
pub use network::NetworkCosts;

/// How much to measure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// Neurons per side of the timed layer.
    pub size: usize,
    /// Samples per batch.
    pub batch: usize,
    /// Repetitions per figure (the median is kept).
    pub repeats: usize,
    /// The most threads `C_interf`, `C_ncost` and `C_nbw` are measured for.
    pub threads: usize,
    /// Bytes of the bandwidth ping-pong.
    pub bandwidth_bytes: usize,
    /// The largest working set the cache curve is timed at ([`cache`]).
    pub cache_cap_bytes: u64,
}

impl Settings {
    /// A thorough measurement (a few seconds per figure at most).
    pub fn full(threads: usize) -> Settings {
        Settings {
            size: 512,
            batch: 64,
            repeats: 9,
            threads,
            bandwidth_bytes: 8 << 20,
            cache_cap_bytes: 1 << 30,
        }
    }

    /// A quick one (for tests and smoke runs).
    pub fn quick(threads: usize) -> Settings {
        Settings {
            size: 128,
            batch: 16,
            repeats: 3,
            threads,
            bandwidth_bytes: 1 << 20,
            cache_cap_bytes: 4 << 20,
        }
    }
}

/// `n` deterministic values in `[-0.5, 0.5]`, varied by `seed`.
fn fill(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|k| ((k as u32).wrapping_mul(2_654_435_761) ^ seed) as f32 / u32::MAX as f32 - 0.5)
        .collect()
}

/// The median of `f`'s durations over `n` runs.
fn median(n: usize, mut f: impl FnMut() -> Duration) -> Duration {
    let mut d: Vec<Duration> = (0..n.max(1)).map(|_| f()).collect();
    d.sort();
    d[d.len() / 2]
}

/// One layer's matrices.
struct Layer {
    w: Vec<f32>,
    x: Vec<f32>,
    y: Vec<f32>,
    delta_in: Vec<f32>,
}

impl Layer {
    fn new(size: usize, batch: usize) -> Layer {
        Layer {
            w: fill(size * size, 1),
            x: fill(batch * size, 2),
            y: vec![0.0; batch * size],
            delta_in: vec![0.0; batch * size],
        }
    }

    /// Forward, back-propagation and update once; returns the GEMM time only.
    fn step(&mut self, size: usize, batch: usize) -> Duration {
        let started = Instant::now();
        // The GEMMs alone: forward without the activation pass, and so on.
        let (b, n) = (batch, size);
        kernels::forward(&self.w, &self.x, &mut self.y, b, n, n);
        let forward = started.elapsed();
        let act = time_activation(&mut self.y);
        let started = Instant::now();
        kernels::backward(&self.w, &self.y, &self.x, &mut self.delta_in, b, n, n);
        let backward = started.elapsed();
        let err = time_error_terms(&mut self.delta_in, &self.x);
        let started = Instant::now();
        kernels::update(&mut self.w, &self.y, &self.x, 1e-6, b, n, n);
        let update = started.elapsed();
        (forward + backward + update).saturating_sub(act + err)
    }

    /// The three GEMMs of [`Layer::step`] alone, without the element-wise passes (so no
    /// separately timed pass is subtracted, which a preempted timing can drive to 0).
    fn gemms(&mut self, size: usize, batch: usize) -> Duration {
        let started = Instant::now();
        let (b, n) = (batch, size);
        kernels::linear(&self.w, &self.x, &mut self.y, b, n, n);
        kernels::linear_backward(&self.w, &self.y, &mut self.delta_in, b, n, n);
        kernels::update(&mut self.w, &self.y, &self.x, 1e-6, b, n, n);
        started.elapsed()
    }
}

fn time_activation(y: &mut [f32]) -> Duration {
    let started = Instant::now();
    kernels::activate(y);
    started.elapsed()
}

fn time_error_terms(d: &mut [f32], x: &[f32]) -> Duration {
    let started = Instant::now();
    kernels::error_terms(d, x);
    started.elapsed()
}

/// `(C_muladd, C_act, C_err)` in seconds.
pub fn compute_costs(s: &Settings) -> (f64, f64, f64) {
    let mut layer = Layer::new(s.size, s.batch);
    layer.step(s.size, s.batch); // warm up
    let gemm = median(s.repeats, || layer.step(s.size, s.batch));
    let muladds = 3.0 * (s.batch * s.size * s.size) as f64;
    let elems = (s.batch * s.size) as f64;
    let mut y = layer.y.clone();
    let act = median(s.repeats, || time_activation(&mut y));
    let mut d = layer.delta_in.clone();
    let err = median(s.repeats, || time_error_terms(&mut d, &layer.x));
    (
        gemm.as_secs_f64() / muladds,
        act.as_secs_f64() / elems,
        err.as_secs_f64() / elems,
    )
}

/// `C_interf(H)` for `H = 1..=s.threads`: the slow-down of H threads running the layer
/// at once over one thread alone (`C_interf(1) = 1`).
pub fn interference(s: &Settings) -> Vec<f64> {
    let run = |h: usize| -> Duration {
        median(s.repeats, || {
            let barrier = std::sync::Barrier::new(h);
            let total: Duration = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..h)
                    .map(|_| {
                        let barrier = &barrier;
                        scope.spawn(move || {
                            let mut layer = Layer::new(s.size, s.batch);
                            layer.step(s.size, s.batch);
                            barrier.wait();
                            layer.step(s.size, s.batch)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|t| t.join().unwrap_or_default())
                    .sum()
            });
            total / h as u32
        })
    };
    let one = run(1).as_secs_f64().max(1e-12);
    (1..=s.threads.max(1))
        .map(|h| {
            if h == 1 {
                1.0
            } else {
                (run(h).as_secs_f64() / one).max(1e-3)
            }
        })
        .collect()
}

/// A measured profile and the per-layer figures behind its per-kind costs.
#[derive(Debug, Clone)]
pub struct Calibration {
    /// The profile, as written for `iterstore plan --profile`.
    pub profile: Profile,
    /// Each timed convolution and pooling layer of the network.
    pub kinds: KindTimings,
    /// The cache curve and the cache sizes it was timed around.
    pub cache: CacheCurve,
}

/// The profile of this machine, named `name`, with its convolution and pooling costs
/// measured on `network`'s layers and `ps_read_alpha` as given (the model's stated
/// parameter; it is not measured).
pub fn calibrate(
    name: &str,
    s: &Settings,
    network: &Network,
    ps_read_alpha: f64,
) -> iterstore::Result<Calibration> {
    let (c_muladd_s, c_act_s, c_err_s) = compute_costs(s);
    let kinds = conv::kind_costs(s, network);
    let cache = cache::cache_curve(s);
    let c_interf = interference(s);
    let net = network::network_costs(s)?;
    let profile = Profile {
        version: PROFILE_VERSION,
        name: name.to_string(),
        c_muladd_s,
        c_muladd_by_kind_s: iterstore_perf::KindCosts {
            convolution: kinds.convolution,
            pooling: kinds.pooling,
        },
        c_act_s,
        c_err_s,
        c_interf,
        c_ncost_s: net.latency_s,
        c_nbw_bits_per_s: net.bandwidth_bits_per_s[0],
        c_nbw_per_thread_bits_per_s: Some(net.bandwidth_bits_per_s),
        c_muladd_by_working_set: Some(cache.points.clone()),
        ps_read_alpha,
        sources: Default::default(),
    };
    Ok(Calibration {
        profile,
        kinds,
        cache,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use iterstore_perf::{Model, Training};

    /// A calibrated profile carries the cache curve (version 3), it survives the file, and
    /// the model charges a segment past the curve's last point that point's factor.
    #[test]
    fn a_calibrated_profile_carries_the_cache_curve_and_the_model_uses_it() {
        let s = Settings {
            repeats: 1,
            ..Settings::quick(1)
        };
        let measured = calibrate("t", &s, &iterstore_perf::builtin::mlp(), 0.5).unwrap();
        let profile = measured.profile;
        assert_eq!(profile.version, PROFILE_VERSION);
        let curve = profile
            .c_muladd_by_working_set
            .clone()
            .expect("a cache curve");
        assert!(curve.len() >= 2, "{curve:?}");
        assert!(curve.last().unwrap().bytes <= s.cache_cap_bytes as f64);
        profile.validate("the measured profile").unwrap();
        let text = serde_json::to_string(&profile).unwrap();
        let back: Profile = serde_json::from_str(&text).unwrap();
        // The same points, to the last digits a JSON float keeps.
        let read = back
            .c_muladd_by_working_set
            .clone()
            .expect("the curve in the file");
        let near = |a: f64, b: f64| (a - b).abs() <= 1e-12 * a.abs().max(b.abs());
        assert_eq!(read.len(), curve.len());
        for (r, c) in read.iter().zip(&curve) {
            assert!(
                near(r.bytes, c.bytes) && near(r.factor, c.factor),
                "{r:?} {c:?}"
            );
        }

        // One fully connected layer of 1100 x 1100: 4.8 MB, past the quick curve's end.
        let network: Network = serde_json::from_str(
            r#"{"version": 1, "name": "fc", "input": {"channels": 1100, "size": 1},
                "layers": [{"kind": "fully_connected", "name": "fc", "neurons": 1100, "bits": 32}]}"#,
        )
        .unwrap();
        let training: Training =
            serde_json::from_str(r#"{"version": 1, "n_sample": 1, "n_read": 1, "n_write": 1}"#)
                .unwrap();
        let last = read.last().unwrap();
        let model = Model::new(&network, &back, &training);
        assert!(model.working_set(0, 1, 1, 1100.0 * 1100.0) > last.bytes);
        let uf = model.compute(0, 1, 1).uf;
        let muladds = 1100.0 * 1100.0;
        let expected = back.c_muladd_s * last.factor * muladds + back.c_act_s * 1100.0;
        assert!(
            (uf - expected).abs() <= 1e-9 * expected,
            "{uf} vs {expected}"
        );
        let mut flat = back.clone();
        flat.c_muladd_by_working_set = None;
        let plain = Model::new(&network, &flat, &training).compute(0, 1, 1).uf;
        let expected = back.c_muladd_s * muladds + back.c_act_s * 1100.0;
        assert!((plain - expected).abs() <= 1e-9 * expected);
    }
}
